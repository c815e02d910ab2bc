/*-------------------------------------------------------------------------
 *
 * tenancy.c
 *	  Which tenants the calling role may act in (docs/security.md,
 *	  "Tenants").
 *
 * The caller is the role current at the call -- GetOuterUserId(), which
 * sees SET ROLE and is not changed by SECURITY DEFINER functions -- and,
 * when it is bound, the session's user too: its bindings meet the
 * caller's, so a bound login cannot shed its tenants by SET ROLE to an
 * unbound role it belongs to (silo_producer, say).  A role is bound to a tenant by a row of
 * silo.tenant_grant (role name, tenant), written by silo.grant_tenant;
 * '*' binds it to every tenant.  Membership in a bound role binds too
 * (any membership: a binding restricts, so a role cannot escape one by
 * being a member without inheritance).  Role names are stored, not OIDs:
 * OIDs differ between nodes and are reused after DROP ROLE.
 *
 *	  caller						isolation off		isolation on
 *	  superuser or silo_admin		every tenant		every tenant
 *	  bound to tenants				those tenants		those tenants
 *	  bound to nothing				every tenant		none (fail closed)
 *
 * and then, for a caller that is not an administrator, whose session's
 * user is bound and not an administrator: only those of the session
 * user's tenants too.  The bindings are read without SQL (tenancy_read).
 *
 * What a role may do is cached per backend and dropped when the bindings
 * change (a shared generation bumped at the commit of every change), when
 * role memberships or roles change (catalog invalidations), when the
 * caller is another role, or when silo.tenant_isolation changes.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_tenancy.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

/* GUC silo.tenant_isolation (registered by module.c) */
bool		silo_tenant_isolation = false;

static SiloCaller cached;
static bool cached_valid = false;
static uint64 cached_generation = 0;
static bool cached_isolation = false;
static LocalTransactionId cached_lxid = InvalidLocalTransactionId;
static MemoryContext tenancy_cxt = NULL;
static Oid	tenancy_grant_relid = InvalidOid;	/* silo.tenant_grant, once read */

/*
 * tenancy_invalidate: catalog callback (role memberships, roles): forget
 * the cached caller.
 */
static void
tenancy_invalidate(Datum arg, int cacheid, uint32 hashvalue)
{
	cached_valid = false;
}

/*
 * tenancy_relcache_invalidate: relcache callback: a change of
 * silo.tenant_grant (the trigger sends one at every change; relid
 * InvalidOid is every relation) drops the cache.  This reaches sessions
 * the shared generation cannot: after COMMIT PREPARED, and on a hot
 * standby, where the invalidation is replayed from WAL.
 */
static void
tenancy_relcache_invalidate(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == tenancy_grant_relid)
		cached_valid = false;
}

/*
 * silo_tenancy_init: register the catalog callbacks (from _PG_init).
 */
void
silo_tenancy_init(void)
{
	CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, tenancy_invalidate, (Datum) 0);
	CacheRegisterSyscacheCallback(AUTHOID, tenancy_invalidate, (Datum) 0);
	CacheRegisterRelcacheCallback(tenancy_relcache_invalidate, (Datum) 0);
}

/*
 * tenancy_cmp: qsort/bsearch comparator of tenant names (byte order).
 */
static int
tenancy_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/* One role's side of the answer: its bindings, as a set of tenants. */
typedef struct TenantSet
{
	bool		bound;			/* else it restricts nothing */
	bool		all;			/* '*' */
	int			n;
	char	  **tenants;		/* sorted */
} TenantSet;

/* A row of silo.tenant_grant. */
typedef struct Binding
{
	Oid			role;			/* InvalidOid: no role has the name now */
	char	   *tenant;
} Binding;

/*
 * tenancy_read: every binding, read from silo.tenant_grant with a heap
 * scan and a fresh snapshot -- no SQL, so nothing the caller's
 * search_path names can take part, and no privilege on the table is
 * needed (the filter of the views runs as the querying role).  Role names
 * are resolved to the roles that have them now.  Returns the number of
 * bindings; none when the schema is older than 1.7.
 */
static int
tenancy_read(Binding **out)
{
	Oid			relid = get_relname_relid("tenant_grant", get_namespace_oid("silo", true));
	Relation	rel;
	TableScanDesc scan;
	Snapshot	snapshot;
	HeapTuple	tup;
	AttrNumber	role_att;
	AttrNumber	tenant_att;
	int			n = 0;
	int			cap = 16;

	*out = NULL;
	if (!OidIsValid(relid))
		return 0;
	tenancy_grant_relid = relid;
	role_att = get_attnum(relid, "role_name");
	tenant_att = get_attnum(relid, "tenant");
	rel = table_open(relid, AccessShareLock);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	scan = table_beginscan(rel, snapshot, 0, NULL);
	*out = palloc(sizeof(Binding) * cap);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		bool		isnull;
		Datum		r = heap_getattr(tup, role_att, RelationGetDescr(rel), &isnull);
		Datum		t = heap_getattr(tup, tenant_att, RelationGetDescr(rel), &isnull);

		if (n == cap)
		{
			cap *= 2;
			*out = repalloc(*out, sizeof(Binding) * cap);
		}
		(*out)[n].role = get_role_oid(TextDatumGetCString(r), true);
		(*out)[n].tenant = TextDatumGetCString(t);
		n++;
	}
	table_endscan(scan);
	UnregisterSnapshot(snapshot);
	table_close(rel, AccessShareLock);
	return n;
}

/*
 * tenancy_is_admin: whether role administers silo: a superuser or a role
 * with the privileges of silo_admin.
 */
static bool
tenancy_is_admin(Oid role)
{
	Oid			admin_role = get_role_oid("silo_admin", true);

	return superuser_arg(role) ||
		(OidIsValid(admin_role) && has_privs_of_role(role, admin_role));
}

/*
 * tenancy_set: the tenants role is bound to, itself or through any role it
 * is a member of (membership with or without inheritance: a binding
 * restricts, so it cannot be escaped by not inheriting).
 */
static TenantSet
tenancy_set(Oid role, Binding *b, int nb)
{
	TenantSet	s = {false, false, 0, NULL};
	int			i;

	s.tenants = palloc(sizeof(char *) * (nb + 1));
	for (i = 0; i < nb; i++)
	{
		if (!OidIsValid(b[i].role) || !is_member_of_role(role, b[i].role))
			continue;
		s.bound = true;
		if (strcmp(b[i].tenant, SILO_ALL_TENANTS) == 0)
			s.all = true;
		s.tenants[s.n++] = b[i].tenant;
	}
	qsort(s.tenants, s.n, sizeof(char *), tenancy_cmp);
	return s;
}

/*
 * tenancy_intersect: the tenants both sets allow.
 */
static TenantSet
tenancy_intersect(TenantSet a, TenantSet b)
{
	TenantSet	s = {true, false, 0, NULL};
	int			i;

	if (!a.bound || b.all)
		return b.bound ? (a.bound ? a : b) : a;
	if (!b.bound)
		return a;
	if (a.all)
		return b;
	s.tenants = palloc(sizeof(char *) * (a.n + 1));
	for (i = 0; i < a.n; i++)
		if (bsearch(&a.tenants[i], b.tenants, b.n, sizeof(char *), tenancy_cmp) != NULL)
			s.tenants[s.n++] = a.tenants[i];
	return s;
}

/*
 * tenancy_load: fill the cache for the role current at the call and the
 * session's user.  The caller's own bindings (or, unbound in isolation
 * mode, none at all) meet those of the session's user when that user is
 * bound: a bound login cannot shed its tenants with SET ROLE to an unbound
 * role such as silo_producer, while an unbound login (a pooler's) may SET
 * ROLE to a bound one.
 */
static void
tenancy_load(Oid role, Oid session)
{
	MemoryContext old;
	Binding    *b;
	int			nb;
	TenantSet	mine;
	TenantSet	result;

	if (tenancy_cxt == NULL)
		tenancy_cxt = AllocSetContextCreate(CacheMemoryContext, "silo tenancy",
											ALLOCSET_SMALL_SIZES);
	MemoryContextReset(tenancy_cxt);
	memset(&cached, 0, sizeof(cached));
	cached.role = role;
	cached.session = session;
	cached.admin = tenancy_is_admin(role);
	if (cached.admin)
		return;

	old = MemoryContextSwitchTo(tenancy_cxt);
	nb = tenancy_read(&b);
	mine = tenancy_set(role, b, nb);
	if (!mine.bound && silo_tenant_isolation)
		mine.bound = true;		/* fail closed: no tenant at all */
	result = mine;
	if (session != role && !tenancy_is_admin(session))
	{
		cached.session_bound = tenancy_set(session, b, nb).bound;
		if (cached.session_bound)
			result = tenancy_intersect(mine, tenancy_set(session, b, nb));
	}
	cached.restricted = result.bound;
	cached.all = result.all;
	cached.ntenants = result.n;
	cached.tenants = result.tenants;
	MemoryContextSwitchTo(old);
}

/*
 * silo_caller: what the role current at the call may do (cached; see the
 * header).  Needs a transaction.
 */
const SiloCaller *
silo_caller(void)
{
	Oid			role = GetOuterUserId();
	Oid			session = GetSessionUserId();
	uint64		generation = silo_config_generation();

	/*
	 * Without shared memory (silo not preloaded) no generation tells of
	 * another backend's change: the cache then lasts one transaction.
	 */
	if (!cached_valid || cached.role != role || cached.session != session ||
		cached_generation != generation || cached_isolation != silo_tenant_isolation ||
		(generation == 0 && cached_lxid != MyProc->lxid))
	{
		/* valid first: an invalidation during the load makes it invalid */
		cached_valid = true;
		cached_generation = generation;
		cached_isolation = silo_tenant_isolation;
		cached_lxid = MyProc->lxid;
		tenancy_load(role, session);
	}
	return &cached;
}

/*
 * silo_tenant_allowed: whether the caller may act in tenant.
 */
bool
silo_tenant_allowed(const char *tenant)
{
	const SiloCaller *c = silo_caller();

	if (!c->restricted || c->all)
		return true;
	return bsearch(&tenant, c->tenants, c->ntenants, sizeof(char *), tenancy_cmp) != NULL;
}

/*
 * silo_caller_name: the name of the role current at the call (what a
 * lease records as its owner).
 */
char *
silo_caller_name(void)
{
	return GetUserNameFromId(GetOuterUserId(), false);
}

/*
 * silo_tenancy_check: the caller may act in tenant, or 42501; with
 * silo.tenant_isolation on, the default tenant '-' is refused (22023): a
 * tenant must be named.  The check comes before anything is read, so its
 * answer says nothing of the tenant's jobs.
 */
void
silo_tenancy_check(const char *tenant)
{
	const SiloCaller *c;

	if (silo_tenant_isolation && strcmp(tenant, "-") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tenant must be given when silo.tenant_isolation is on"),
				 errdetail("The default tenant \"-\" is refused in isolation mode."),
				 errhint("Pass the tenant argument.")));
	if (silo_tenant_allowed(tenant))
		return;
	c = silo_caller();
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("role \"%s\" may not act in tenant \"%s\"",
					GetUserNameFromId(c->role, false), tenant),
			 c->session_bound
			 ? errdetail("The role, or the session's user \"%s\", is bound to other tenants.",
						 GetUserNameFromId(c->session, false))
			 : c->ntenants > 0
			 ? errdetail("The role is bound to other tenants.")
			 : errdetail("silo.tenant_isolation is on and the role is bound to no tenant."),
			 errhint("An administrator binds roles to tenants with silo.grant_tenant (docs/security.md).")));
}

/*
 * silo_tenancy_require_binding: a caller that acts in no tenant at all
 * (isolation mode, bound to nothing) is refused (42501) by the calls that
 * name no tenant, such as silo.lease.
 */
void
silo_tenancy_require_binding(void)
{
	const SiloCaller *c = silo_caller();

	if (!c->restricted || c->all || c->ntenants > 0)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("role \"%s\" may not act in any tenant",
					GetUserNameFromId(c->role, false)),
			 errdetail("silo.tenant_isolation is on and the role is bound to no tenant."),
			 errhint("An administrator binds roles to tenants with silo.grant_tenant (docs/security.md).")));
}

/*
 * silo_tenancy_grants_changed: the bindings (relation relid) changed in
 * this transaction: every backend's cache goes at commit, this one's now;
 * the relcache invalidation also reaches prepared transactions' commits
 * and hot standbys.
 */
void
silo_tenancy_grants_changed(Oid relid)
{
	cached_valid = false;
	silo_config_changed_at_commit();
	CacheInvalidateRelcacheByRelid(relid);
}
