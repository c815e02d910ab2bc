/*-------------------------------------------------------------------------
 *
 * groups.c
 *	  Task group settings (silo.task_group_setting): today one, fairness
 *	  -- 'none' (ready order, the default) or 'round_robin' (turns across
 *	  tenants: lease_tenants.c).
 *
 * A lease asks for its group's setting every time, so each backend caches
 * the answers in a small hash, dropped whenever the shared configuration
 * generation moves (ipc/shmem.c: bumped at the commit of every change of
 * the table, by its trigger) or this backend changes a setting itself.
 * Without shared memory the cache lasts one transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_core.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#define GROUP_KEY_BYTES (SILO_MAX_GROUP_LEN * MAX_MULTIBYTE_CHAR_LEN + 1)

typedef struct GroupEntry
{
	char		task_group[GROUP_KEY_BYTES];	/* hash key */
	bool		fair;
} GroupEntry;

static HTAB *group_cache = NULL;
static bool group_cache_stale = false;
static uint64 group_cache_generation = 0;
static LocalTransactionId group_cache_lxid = InvalidLocalTransactionId;
static Oid	group_setting_relid = InvalidOid;	/* silo.task_group_setting */

/*
 * group_cache_drop: forget every cached setting.  The hash's memory is
 * freed at the next lookup, not in an invalidation callback.
 */
static void
group_cache_drop(void)
{
	group_cache_stale = true;
}

/*
 * group_lookup: the setting of task_group as silo.task_group_setting
 * holds it (no row: not fair).
 */
static bool
group_lookup(const char *task_group)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[1] = {TEXTOID};
	Datum		values[1];
	bool		fair;

	/* looked up each time: the extension may have been re-created */
	group_setting_relid = get_relname_relid("task_group_setting",
											get_namespace_oid("silo", true));
	if (!OidIsValid(group_setting_relid))
		return false;			/* a schema before 1.7: no settings */
	values[0] = CStringGetTextDatum(task_group);
	silo_spi_connect();
	silo_exec(&plan,
			  "SELECT fairness = 'round_robin' FROM silo.task_group_setting"
			  " WHERE task_group = $1",
			  1, types, values, NULL, true, 1);
	fair = SPI_processed == 1 && silo_col_bool(0, 1);
	silo_spi_finish();
	return fair;
}

/*
 * silo_group_fair: whether task_group dispatches in turns across tenants
 * (cached; see the file header).
 */
bool
silo_group_fair(const char *task_group)
{
	uint64		generation = silo_config_generation();
	GroupEntry *e;
	bool		found;

	if (strlen(task_group) >= GROUP_KEY_BYTES)
		return group_lookup(task_group);
	if (group_cache == NULL || generation != group_cache_generation || group_cache_stale ||
		(generation == 0 && group_cache_lxid != MyProc->lxid))
	{
		HASHCTL		ctl;

		if (group_cache != NULL)
			hash_destroy(group_cache);
		ctl.keysize = GROUP_KEY_BYTES;
		ctl.entrysize = sizeof(GroupEntry);
		ctl.hcxt = CacheMemoryContext;
		group_cache = hash_create("silo task group settings", 16, &ctl,
								  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		group_cache_generation = generation;
		group_cache_lxid = MyProc->lxid;
		group_cache_stale = false;
	}
	e = hash_search(group_cache, task_group, HASH_FIND, &found);
	if (found)
		return e->fair;

	/* read before the entry exists: an error leaves no half-made entry */
	{
		bool		fair = group_lookup(task_group);

		e = hash_search(group_cache, task_group, HASH_ENTER, &found);
		e->fair = fair;
		return fair;
	}
}

/*
 * silo_group_settings_changed: the settings (relation relid) changed in
 * this transaction: this backend forgets them now, every other at the
 * commit.
 */
void
silo_group_settings_changed(Oid relid)
{
	group_cache_drop();
	silo_config_changed_at_commit();
	CacheInvalidateRelcacheByRelid(relid);
	group_setting_relid = relid;
}

/*
 * group_relcache_invalidate: relcache callback: a change of
 * silo.task_group_setting drops the cache (this reaches sessions after
 * COMMIT PREPARED, and hot standbys, which the generation does not).
 */
static void
group_relcache_invalidate(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == group_setting_relid)
		group_cache_drop();
}

/*
 * silo_groups_init: register the invalidation callback (from _PG_init).
 */
void
silo_groups_init(void)
{
	CacheRegisterRelcacheCallback(group_relcache_invalidate, (Datum) 0);
}

/*
 * silo_group_configure: set task_group's fairness ('none' or
 * 'round_robin', checked by the caller); returns the one it had.  Takes
 * effect for leases that start after the commit.
 */
char *
silo_group_configure(const char *task_group, const char *fairness)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	char	   *previous;

	values[0] = CStringGetTextDatum(task_group);
	values[1] = CStringGetTextDatum(fairness);
	silo_spi_connect();
	silo_exec(&plan,
			  "WITH old AS (SELECT fairness FROM silo.task_group_setting"
			  "              WHERE task_group = $1 FOR UPDATE),"
			  "     new AS (INSERT INTO silo.task_group_setting (task_group, fairness)"
			  "              VALUES ($1, $2) ON CONFLICT (task_group) DO UPDATE"
			  "              SET fairness = excluded.fairness, updated_at = now())"
			  " SELECT coalesce((SELECT fairness FROM old), 'none')",
			  2, types, values, NULL, false, 1);
	previous = silo_col_text(0, 1);
	silo_spi_finish();
	return previous;
}
