/*-------------------------------------------------------------------------
 *
 * silo_tenancy.h
 *	  Tenants as a security boundary: which tenants the calling role may
 *	  act in (its bindings, silo.tenant_grant), the isolation mode, and the
 *	  checks api/ and core/ make.  Calls ipc/, storage/ and util/
 *	  (src/README.md has the layers; docs/security.md the model).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_TENANCY_H
#define SILO_TENANCY_H

#include "silo_ipc.h"
#include "silo_storage.h"

/* The tenant of a role bound to every tenant. */
#define SILO_ALL_TENANTS		"*"

/* GUC silo.tenant_isolation (registered by module.c) */
extern bool silo_tenant_isolation;

/* What the calling role may do: the answer of silo_caller(). */
typedef struct SiloCaller
{
	Oid			role;			/* the role current at the call */
	Oid			session;		/* the session's user */
	bool		session_bound;	/* whose bindings restrict the caller too */
	bool		admin;			/* a superuser or a member of silo_admin */
	bool		restricted;		/* acts only in tenants (else everywhere) */
	bool		all;			/* bound to '*': every tenant */
	int			ntenants;
	char	  **tenants;		/* the bound tenants, sorted */
} SiloCaller;

extern const SiloCaller *silo_caller(void);
extern bool silo_tenant_allowed(const char *tenant);
extern void silo_tenancy_check(const char *tenant);
extern void silo_tenancy_require_binding(void);
extern char *silo_caller_name(void);
extern void silo_tenancy_grants_changed(Oid relid);
extern void silo_tenancy_init(void);

#endif							/* SILO_TENANCY_H */
