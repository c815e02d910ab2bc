/*-------------------------------------------------------------------------
 *
 * lease_tenants.c
 *	  Leases that know tenants: of some tenants only (silo.lease's tenants
 *	  argument, or a role bound to tenants), and the fair dispatch of a
 *	  task group whose fairness is round_robin (docs/api.md, "Fair
 *	  dispatch").
 *
 * Both read task_ready_tenant (task_group, tenant, priority, start_at, seq
 * WHERE due AND tenant <> '-'), where each tenant's due tasks of a group
 * are a range of their own in ready order, so one tenant's backlog costs
 * nothing to a lease of another's.  Each tenant's range is read from the
 * tenant's own lease mark (leasemark.c), past the index entries of the
 * tasks leased before, which stay until vacuum removes them; the mark is
 * raised to the first task the read finds.  The default tenant '-' is not
 * in that index (a database of one tenant then pays nothing for it): its
 * tasks are found on the group's ready order, task_ready, from the group's
 * mark.
 *
 * Fair dispatch is round robin across the tenants with due tasks: a turn
 * takes the first task (in ready order) of the next tenant after the
 * group's cursor, and moves the cursor to that tenant; past the last
 * tenant the rotation starts again from the first.  The tenants of a
 * lease's turns are found first, each with one descent of the index that
 * reads the index entry only (silo_table_peek), then their marks are read,
 * then the tasks, with a snapshot taken after the marks.  The cursor is in
 * shared memory beside the group's mark, moved at every turn, so
 * concurrent workers share one rotation; a lost cursor (a restart, an
 * evicted entry) only restarts the rotation.  Priority orders a tenant's
 * own tasks; across tenants it gives no precedence.  When one named
 * tenant alone has due tasks, or none has, the lease goes on in the
 * group's ready order (lease.c): that is also where the default tenant's
 * tasks are served, as they have no turn of their own.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_core.h"
#include "lease_internal.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"

/*
 * A turn passes over at most this many of a tenant's tasks that other
 * transactions hold (concurrent leases of the same tenant) before it
 * gives the turn up.
 */
#define FAIR_SKIP_LIMIT 64

/*
 * A lease of more tenants than this (the tenants argument allows 1000)
 * reads their ranges from the start instead of reading that many marks.
 */
#define MARKED_TENANTS 64

/*
 * A fair lease lines up this many tenants more than the tasks it wants:
 * a tenant found may have none to give (its index entries are of tasks
 * just leased, not yet marked dead), and the turn then goes on to the
 * next one.
 */
#define FAIR_EXTRA_TENANTS 8

/* One tenant of a lease: its name and its mark. */
typedef struct TenantRange
{
	char	   *tenant;
	SiloMarkKey start;			/* where its next read begins: its mark, read
								 * before the snapshot, then just past the
								 * rows this lease has read */
	uint64		gen;			/* 0: no mark (nothing to raise) */
	bool		raised;
	bool		seen;			/* the current read found a row */
	SiloMarkKey key;			/* the key of the row read last */
} TenantRange;

/*
 * ranges_begin: read the marks of the n tenants (or none, without
 * task_relid or with too many tenants), then take the snapshot the reads
 * of their ranges use: a mark must be read before it (leasemark.c).
 */
static void
ranges_begin(SiloDirect *d, const char *task_group, TenantRange *r, int n, Oid task_relid)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		r[i].start = silo_mark_lowest;
		r[i].gen = 0;
		r[i].raised = false;
		if (!OidIsValid(task_relid) || n > MARKED_TENANTS)
			continue;
		if (strcmp(r[i].tenant, "-") == 0)
		{
			/*
			 * The default tenant's tasks are read on the group's order from
			 * the group's mark, which they must never raise: it is every
			 * tenant's.
			 */
			silo_mark_begin(task_group, "", task_relid, &r[i].start, &r[i].gen);
			r[i].gen = 0;
		}
		else
			silo_mark_begin(task_group, r[i].tenant, task_relid, &r[i].start, &r[i].gen);
	}
	silo_direct_new_snapshot(d);
}

/*
 * range_keys: scan keys for tenant's due tasks of the group from key on:
 * on task_ready_tenant, task_group = group AND tenant = tenant AND
 * (priority, start_at, seq) >= key; on task_ready (the default tenant),
 * task_group = group AND (priority, start_at, seq) >= key.  keys has room
 * for 3, row for 3.  Returns the number of keys.
 */
static int
range_keys(ScanKey keys, ScanKey row, Datum group, const char *tenant, const SiloMarkKey *key)
{
	bool		dflt = strcmp(tenant, "-") == 0;
	int			first = dflt ? 2 : 3;	/* the index column of priority */
	int			n = 0;

	ScanKeyEntryInitialize(&keys[n++], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   C_COLLATION_OID, F_TEXTEQ, group);
	if (!dflt)
		ScanKeyEntryInitialize(&keys[n++], 0, 2, BTEqualStrategyNumber, InvalidOid,
							   C_COLLATION_OID, F_TEXTEQ, CStringGetTextDatum(tenant));
	ScanKeyEntryInitialize(&row[0], SK_ROW_MEMBER, first, BTGreaterEqualStrategyNumber,
						   INT2OID, InvalidOid, F_BTINT2CMP, Int16GetDatum(key->priority));
	ScanKeyEntryInitialize(&row[1], SK_ROW_MEMBER, first + 1, BTGreaterEqualStrategyNumber,
						   TIMESTAMPTZOID, InvalidOid, F_TIMESTAMP_CMP,
						   TimestampTzGetDatum(key->start_at));
	ScanKeyEntryInitialize(&row[2], SK_ROW_MEMBER | SK_ROW_END, first + 2,
						   BTGreaterEqualStrategyNumber, INT8OID, InvalidOid, F_BTINT8CMP,
						   Int64GetDatum(key->seq));
	MemSet(&keys[n], 0, sizeof(ScanKeyData));
	keys[n].sk_flags = SK_ROW_HEADER;
	keys[n].sk_attno = first;
	keys[n].sk_strategy = BTGreaterEqualStrategyNumber;
	keys[n].sk_argument = PointerGetDatum(row);
	return n + 1;
}

/*
 * range_is_default: whether a row of task_ready belongs to the default
 * tenant (the range of '-' is read on the whole group's order).
 */
static bool
range_is_default(SiloTable *task)
{
	bool		isnull;
	text	   *t = DatumGetTextPP(silo_table_get(task, LT_TENANT, &isnull));

	return VARSIZE_ANY_EXHDR(t) == 1 && *VARDATA_ANY(t) == '-';
}

/*
 * range_open: start reading r's range on task (task_ready_tenant, or
 * task_ready for the default tenant) from r->start.
 */
static void
range_open(SiloTable *task, Datum group, TenantRange *r, ScanKey keys, ScanKey row)
{
	silo_table_scan_start(task, keys, range_keys(keys, row, group, r->tenant, &r->start));
	r->seen = false;
}

/*
 * range_next: the next row of r's range, which becomes task's current row
 * and r->key; false at its end.  The default tenant's range passes over
 * the other tenants' rows.  The first time a range is read in this lease,
 * its mark is raised to the first row read -- nothing of the tenant below
 * it is visible, and whatever appears there later lowers the mark again
 * -- or past everything when the range is empty.  r->start follows the
 * read: this lease's next read of the range starts past the rows read,
 * which are taken, or held by other transactions.
 */
static bool
range_next(SiloTable *task, const char *task_group, TenantRange *r)
{
	bool		dflt = strcmp(r->tenant, "-") == 0;

	while (silo_table_scan_next(task))
	{
		silo_lease_row_key(task, &r->key);
		r->start = r->key;
		r->start.seq++;
		if (dflt && !range_is_default(task))
			continue;
		if (!r->seen && !r->raised && r->gen != 0)
		{
			silo_mark_raise(task_group, r->tenant, r->gen, &r->key);
			r->raised = true;
		}
		r->seen = true;
		return true;
	}
	if (!r->seen && !r->raised && r->gen != 0)
	{
		silo_mark_raise(task_group, r->tenant, r->gen, &silo_mark_highest);
		r->raised = true;
	}
	return false;
}

/*
 * range_table: the table (index) r's range is read on.
 */
static SiloTable *
range_table(SiloTable *ready, SiloTable *ready_tenant, TenantRange *r)
{
	return strcmp(r->tenant, "-") == 0 ? ready : ready_tenant;
}

/*
 * range_take: up to max of r's tasks in ready order; a turn (max 1)
 * passes over at most FAIR_SKIP_LIMIT tasks that others hold.  Returns
 * how many were taken.
 */
static int
range_take(LeaseWork *w, SiloTable *ready, SiloTable *ready_tenant, Datum group,
		   const char *task_group, TenantRange *r, int32 max)
{
	SiloTable  *task = range_table(ready, ready_tenant, r);
	ScanKeyData keys[3];
	ScanKeyData row[3];
	int			n = 0;
	int			passed = 0;

	range_open(task, group, r, keys, row);
	while (n < max && range_next(task, task_group, r))
	{
		if (silo_lease_take_row(w, task))
			n++;
		else if (max == 1 && ++passed > FAIR_SKIP_LIMIT)
			break;
	}
	return n;
}

/*
 * merge_take: up to max of the n tenants' tasks in ready order across
 * them -- priority, then effective start, then enqueue order, as a lease
 * of the whole group would take them -- by merging their ranges, each
 * read by a scan of its own.  Returns how many were taken.
 */
static int
merge_take(SiloDirect *d, LeaseWork *w, const char *task_group, TenantRange *r, int n,
		   int32 max)
{
	Datum		group = CStringGetTextDatum(task_group);
	SiloTable **t = palloc(sizeof(SiloTable *) * n);
	ScanKeyData *keys = palloc(sizeof(ScanKeyData) * 3 * n);
	ScanKeyData *row = palloc(sizeof(ScanKeyData) * 3 * n);
	bool	   *live = palloc(sizeof(bool) * n);
	int			taken = 0;
	int			i;

	for (i = 0; i < n; i++)
	{
		t[i] = silo_table_open(d, "task", silo_lease_task_cols, LT_NCOLS,
							   strcmp(r[i].tenant, "-") == 0 ? "task_ready" : "task_ready_tenant",
							   SILO_TABLE_DELETE);
		range_open(t[i], group, &r[i], &keys[3 * i], &row[3 * i]);
		live[i] = range_next(t[i], task_group, &r[i]);
	}
	while (taken < max)
	{
		int			best = -1;

		for (i = 0; i < n; i++)
			if (live[i] && (best < 0 || silo_mark_cmp(&r[i].key, &r[best].key) < 0))
				best = i;
		if (best < 0)
			break;
		if (silo_lease_take_row(w, t[best]))
			taken++;
		live[best] = range_next(t[best], task_group, &r[best]);
	}
	return taken;
}

/*
 * open_ranges: the two indexes a lease of tenants reads.
 */
static void
open_ranges(SiloDirect *d, SiloTable **ready, SiloTable **ready_tenant)
{
	*ready = silo_table_open(d, "task", silo_lease_task_cols, LT_NCOLS, "task_ready",
							 SILO_TABLE_DELETE);
	*ready_tenant = silo_table_open(d, "task", silo_lease_task_cols, LT_NCOLS,
									"task_ready_tenant", SILO_TABLE_DELETE);
}

/*
 * rounds: turns across the tenants of r, one task each, until max_tasks
 * are taken or a round takes nothing; with cursor, the group's rotation
 * moves at every turn.  Returns how many were taken.
 */
static int
rounds(LeaseWork *w, SiloTable *ready, SiloTable *ready_tenant, const char *task_group,
	   TenantRange *r, int n, int32 max_tasks, bool cursor)
{
	Datum		group = CStringGetTextDatum(task_group);
	int			taken = 0;
	bool		took;
	int			i;

	do
	{
		took = false;
		for (i = 0; i < n && taken < max_tasks; i++)
		{
			if (range_take(w, ready, ready_tenant, group, task_group, &r[i], 1) == 1)
			{
				taken++;
				took = true;
			}
			if (cursor)
				silo_mark_cursor_set(task_group, r[i].tenant);
		}
	} while (took && taken < max_tasks);
	return taken;
}

/*
 * silo_lease_take_tenants: a lease of the given tenants' tasks of the
 * group.  Not fair: in ready order across them (their ranges merged);
 * more than MARKED_TENANTS tenants, tenant after tenant in the array's
 * order.  Fair: turns across them in the array's order, from the
 * one after the tenant the group served last, moving the group's cursor.
 * Returns how many were taken.
 */
int
silo_lease_take_tenants(SiloDirect *d, LeaseWork *w, const char *task_group, int32 max_tasks,
						int ntenants, char **tenants, bool fair, Oid task_relid)
{
	Datum		group = CStringGetTextDatum(task_group);
	TenantRange *r;
	SiloTable  *ready;
	SiloTable  *ready_tenant;
	int			n = 0;
	int			i;
	int			first;

	if (ntenants <= 0)
		return 0;
	/*
	 * Fair: the turns go on from the tenant after the one the group served
	 * last, when it is in the array (so leases of one task each go round
	 * the array), else from the array's first.
	 */
	first = 0;
	if (fair && ntenants > 1)
	{
		char	   *cursor = silo_mark_cursor_get(task_group);

		for (i = 0; cursor != NULL && i < ntenants; i++)
			if (strcmp(tenants[i], cursor) == 0)
				first = (i + 1) % ntenants;
	}
	r = palloc(sizeof(TenantRange) * ntenants);
	for (i = 0; i < ntenants; i++)
		r[i].tenant = tenants[(first + i) % ntenants];
	open_ranges(d, &ready, &ready_tenant);
	ranges_begin(d, task_group, r, ntenants, task_relid);
	if (fair && ntenants > 1)
		return rounds(w, ready, ready_tenant, task_group, r, ntenants, max_tasks, true);
	if (ntenants > 1 && ntenants <= MARKED_TENANTS)
		return merge_take(d, w, task_group, r, ntenants, max_tasks);
	for (i = 0; i < ntenants && n < max_tasks; i++)
		n += range_take(w, ready, ready_tenant, group, task_group, &r[i], max_tasks - n);
	return n;
}

/*
 * silo_lease_take_fair: the lease of a fair group: turns from the group's
 * cursor on (see the file header) until max_tasks are taken or a round
 * takes nothing.  Returns how many were taken; 0 at once when at most one
 * named tenant has due tasks (the caller's walk in ready order serves it).
 */
int
silo_lease_take_fair(SiloDirect *d, LeaseWork *w, const char *task_group, int32 max_tasks,
					 Oid task_relid)
{
	SiloTable  *ready;
	SiloTable  *ready_tenant;
	char	   *cursor = silo_mark_cursor_get(task_group);
	char	   *after = cursor;
	Datum		group = CStringGetTextDatum(task_group);
	int			want = max_tasks + FAIR_EXTRA_TENANTS;
	TenantRange *r = palloc(sizeof(TenantRange) * want);
	int			n = 0;
	bool		wrapped = cursor == NULL;
	bool		complete = false;	/* every tenant with entries was found */

	open_ranges(d, &ready, &ready_tenant);

	/* the tenants whose turn it is: after the cursor, then from the first */
	while (n < want)
	{
		ScanKeyData keys[2];
		Datum		t;
		char	   *tenant;

		ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
							   C_COLLATION_OID, F_TEXTEQ, group);
		if (after != NULL)
			ScanKeyEntryInitialize(&keys[1], 0, 2, BTGreaterStrategyNumber, InvalidOid,
								   C_COLLATION_OID, F_TEXT_GT, CStringGetTextDatum(after));
		if (!silo_table_peek(ready_tenant, keys, after != NULL ? 2 : 1, 2, &t))
		{
			if (wrapped)
			{
				complete = true;
				break;
			}
			wrapped = true;
			after = NULL;
			continue;
		}
		tenant = TextDatumGetCString(t);
		if (n > 0 && strcmp(tenant, r[0].tenant) == 0)
		{
			complete = true;	/* round the whole rotation */
			break;
		}
		r[n++].tenant = tenant;
		after = tenant;
	}
	if (n == 0 || (n == 1 && complete))
		return 0;
	ranges_begin(d, task_group, r, n, task_relid);
	return rounds(w, ready, ready_tenant, task_group, r, n, max_tasks, true);
}
