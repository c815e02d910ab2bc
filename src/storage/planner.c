/*-------------------------------------------------------------------------
 *
 * planner.c
 *	  Size floors for silo's tables in the planner's estimates.
 *
 * Queue tables swing between empty and huge.  ANALYZE (or autovacuum) of
 * an empty table records zero rows, and a plan made then -- cached for
 * the life of a backend by SPI, or by a worker's prepared statement --
 * treats every path as free: measured here, a lookup by primary key took
 * the status index and walked a whole tenant (6 ms instead of 10 us), an
 * update by ctid became a scan of every Pending row, and a join to
 * job_info became a full index scan per task.  While silo plans one of its
 * own statements (silo_exec, spi.c, sets silo_planning_own), the
 * get_relation_info hook plans every table of schema silo, and its
 * indexes, as holding at least SILO_PLAN_MIN_ROWS rows: the paths silo's
 * statements are written for (primary-key look-ups, TID scans, the ready
 * index) then win on any data, and large tables are not affected.  Other
 * queries -- users' reports over the views, say -- are planned as usual.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_storage.h"

#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "optimizer/plancat.h"
#include "utils/lsyscache.h"

#define SILO_PLAN_MIN_ROWS	10000.0
#define SILO_PLAN_MIN_PAGES 100
#define SILO_PLAN_MIN_INDEX_PAGES 10

static get_relation_info_hook_type planner_prev_hook = NULL;

/* true while silo_exec runs one of silo's own statements */
bool		silo_planning_own = false;

/*
 * planner_relation_info: raise the size estimates of a silo table and its
 * indexes to the floors, after the standard estimate.
 */
static void
planner_relation_info(PlannerInfo *root, Oid relid, bool inhparent, RelOptInfo *rel)
{
	Oid			silo_ns;
	ListCell   *lc;

	if (planner_prev_hook)
		planner_prev_hook(root, relid, inhparent, rel);
	if (!silo_planning_own || rel->tuples >= SILO_PLAN_MIN_ROWS)
		return;
	silo_ns = get_namespace_oid("silo", true);
	if (!OidIsValid(silo_ns) || get_rel_namespace(relid) != silo_ns ||
		get_rel_relkind(relid) != RELKIND_RELATION)
		return;
	rel->tuples = SILO_PLAN_MIN_ROWS;
	rel->pages = Max(rel->pages, SILO_PLAN_MIN_PAGES);
	foreach(lc, rel->indexlist)
	{
		IndexOptInfo *index = (IndexOptInfo *) lfirst(lc);

		if (index->tuples < SILO_PLAN_MIN_ROWS)
			index->tuples = SILO_PLAN_MIN_ROWS;
		index->pages = Max(index->pages, SILO_PLAN_MIN_INDEX_PAGES);
	}
}

/*
 * silo_planner_init: install the hook (from _PG_init).
 */
void
silo_planner_init(void)
{
	planner_prev_hook = get_relation_info_hook;
	get_relation_info_hook = planner_relation_info;
}
