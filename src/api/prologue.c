/*-------------------------------------------------------------------------
 *
 * prologue.c
 *	  The checks every SQL entry point makes of its transaction, in one
 *	  place, after its arguments have been checked and before it changes
 *	  anything: the installed schema's version, the isolation level, a
 *	  read-only transaction, parallel mode.  Cluster mode adds the
 *	  tenant's shard here.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_api.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "tcop/utility.h"

/*
 * silo_api_begin: the prologue of entry point fn (its SQL name, for
 * messages), with the SILO_API_* flags it needs.
 */
void
silo_api_begin(const char *fn, int flags)
{
	if (!(flags & SILO_API_ANY_SCHEMA))
		silo_schema_require_current(fn);
	if ((flags & SILO_API_READ_COMMITTED) && IsolationUsesXactSnapshot())
		silo_require_read_committed(fn);
	if (flags & SILO_API_WRITES)
		silo_api_require_writable(fn);
}

/*
 * silo_api_require_writable: fn writes rows: refuse a read-only
 * transaction, naming fn (25006), and parallel mode, before anything is
 * written.  The direct writes of core/ would not be stopped by the
 * statement-level checks SQL runs.
 */
void
silo_api_require_writable(const char *fn)
{
	PreventCommandIfReadOnly(fn);
	PreventCommandIfParallelMode(fn);
}

/*
 * silo_api_tenant: the second half of the prologue, for an entry point
 * that names a tenant: the calling role must be allowed in it (42501;
 * with silo.tenant_isolation on, '-' is refused: 22023), and in cluster
 * mode its shard must be served here (SL020 with the owner, or SL021).
 */
void
silo_api_tenant(const char *tenant)
{
	silo_tenancy_check(tenant);
	silo_cluster_check_tenant(tenant);
}
