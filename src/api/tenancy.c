/*-------------------------------------------------------------------------
 *
 * tenancy.c
 *	  SQL entry points of tenant bindings: silo.grant_tenant,
 *	  silo.revoke_tenant (for silo_admin), and silo.tenant_visible, the
 *	  filter of silo's views (docs/security.md, "Tenants").
 *
 *-------------------------------------------------------------------------
 */
#include "silo_api.h"

#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(silo_grant_tenant);
PG_FUNCTION_INFO_V1(silo_revoke_tenant);
PG_FUNCTION_INFO_V1(silo_tenant_visible);
PG_FUNCTION_INFO_V1(silo_tenant_grant_changed);

/*
 * tenancy_args: the role (a regrole, stored by name) and tenant arguments
 * of grant_tenant and revoke_tenant, checked.
 */
static void
tenancy_args(FunctionCallInfo fcinfo, const char *fn, Datum *values)
{
	char	   *tenant;
	Oid			role;

	silo_require_arg(fcinfo, 0, "role");
	role = PG_GETARG_OID(0);
	tenant = silo_text_arg(fcinfo, 1, "tenant", 1, SILO_MAX_TENANT_LEN);
	silo_check_name("tenant", tenant);
	silo_api_begin(fn, SILO_API_WRITES);
	values[0] = CStringGetTextDatum(GetUserNameFromId(role, false));
	values[1] = CStringGetTextDatum(tenant);
}

/*
 * silo_grant_tenant: SQL entry point silo.grant_tenant(role, tenant): bind
 * role (and its members) to tenant ('*': every tenant).  Returns whether
 * the binding is new.  Takes effect in every session at commit (the
 * table's trigger, below).
 */
Datum
silo_grant_tenant(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	bool		added;

	tenancy_args(fcinfo, "silo.grant_tenant", values);
	silo_spi_connect();
	silo_exec(&plan,
			  "INSERT INTO silo.tenant_grant (role_name, tenant) VALUES ($1, $2)"
			  " ON CONFLICT DO NOTHING",
			  2, types, values, NULL, false, 0);
	added = SPI_processed == 1;
	silo_spi_finish();
	PG_RETURN_BOOL(added);
}

/*
 * silo_revoke_tenant: SQL entry point silo.revoke_tenant(role, tenant):
 * remove that binding; returns whether there was one.  A role whose last
 * binding goes is unbound again: every tenant with silo.tenant_isolation
 * off, none with it on.
 */
Datum
silo_revoke_tenant(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	bool		removed;

	tenancy_args(fcinfo, "silo.revoke_tenant", values);
	silo_spi_connect();
	silo_exec(&plan,
			  "DELETE FROM silo.tenant_grant WHERE role_name = $1 AND tenant = $2",
			  2, types, values, NULL, false, 0);
	removed = SPI_processed == 1;
	silo_spi_finish();
	PG_RETURN_BOOL(removed);
}

/*
 * silo_tenant_visible: SQL entry point silo.tenant_visible(tenant), the
 * filter of silo's views: whether the role current at the call may see
 * tenant's rows and, in cluster mode, whether they are this node's (a
 * copy of a shard arriving or left behind by a move is not shown).  It
 * raises nothing and returns nothing but the answer.
 */
Datum
silo_tenant_visible(PG_FUNCTION_ARGS)
{
	char	   *tenant;

	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(false);
	tenant = TextDatumGetCString(PG_GETARG_DATUM(0));
	PG_RETURN_BOOL(silo_tenant_allowed(tenant) && silo_cluster_owns_tenant(tenant));
}

/*
 * silo_tenant_grant_changed: the AFTER ... FOR EACH STATEMENT trigger of
 * silo.tenant_grant (any insert, update, delete or truncate: the
 * functions above, a restore, a superuser's edit): every session drops
 * what it cached of the bindings once this transaction commits.
 */
Datum
silo_tenant_grant_changed(PG_FUNCTION_ARGS)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("silo.tenant_grant_changed must be called as a trigger")));
	silo_tenancy_grants_changed(RelationGetRelid(((TriggerData *) fcinfo->context)->tg_relation));
	return PointerGetDatum(NULL);
}
