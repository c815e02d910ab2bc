/*-------------------------------------------------------------------------
 *
 * direct.c
 *	  Direct row access for the hot paths: rows found by primary key (or
 *	  scanned in index order), locked, inserted, updated and deleted
 *	  through the table and index access methods, with no SQL, no plan and
 *	  no executor tree.
 *
 * A lease and a completion touch a few rows per job, each by its key.  As
 * SQL statements most of their cost was the executor carrying those rows
 * between plan nodes (projections, CTE tuplestores, sub-plans, hash joins
 * on unnested arrays); here a job costs the heap and B-tree work itself
 * (docs/performance.md §11).  PostgreSQL's catalog code writes its rows
 * this way too.  Its logical-replication apply worker uses the same table
 * and index calls, but also runs triggers, constraints and the
 * replica-identity check; here triggers and constraints are skipped, and
 * the replica identity is checked (below).
 *
 * What is skipped, and why that is safe:
 * - Triggers.  silo's one trigger, task_lease_mark on silo.task, is
 *   answered by the callers themselves (lease.c owes the marks it would
 *   have owed).  A table with any other enabled trigger is refused when
 *   opened for writing (0A000): silo would not fire it.
 * - CHECK and NOT NULL constraints.  Every value written here is made by
 *   silo itself from rows it has just read; the constraints stay on the
 *   tables for the SQL paths and as documentation.
 * - Permission checks.  Callers are the extension owner's SECURITY
 *   DEFINER functions, exactly as their SQL was.
 *
 * What is checked instead:
 * - The table is a plain heap table: not partitioned, no other access
 *   method (0A000 when opened for writing).
 * - Replication: before the first delete or update through a table, the
 *   check PostgreSQL makes for an UPDATE or DELETE statement
 *   (CheckCmdReplicaIdentity): a table that publishes deletes or updates
 *   needs a replica identity that a subscriber can apply them with.
 *   Writing without it would drop the change on every subscriber.
 *
 * The code is in three files: this one (a piece of work, opening and
 * closing tables), direct_read.c (finding rows) and direct_write.c
 * (writing them); their shared state is in direct_internal.h.
 *
 * Columns are found by name when a table is opened, so the position of a
 * column (which differs between a fresh install and an upgraded one) does
 * not matter; and a table opened for inserts must have no live column the
 * caller does not name, so that no column default is ever skipped.
 *
 *-------------------------------------------------------------------------
 */
#include "direct_internal.h"

#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "executor/executor.h"
#include "parser/parse_relation.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/*
 * silo_direct_begin: start a piece of direct work in the current
 * transaction.  Like a data-modifying SQL statement under READ COMMITTED,
 * it counts as a new command and reads with a new snapshot, so it sees
 * what earlier statements of the transaction wrote and what other
 * transactions have committed.
 */
SiloDirect *
silo_direct_begin(void)
{
	SiloDirect *d = palloc0(sizeof(SiloDirect));

	CommandCounterIncrement();
	d->estate = CreateExecutorState();
	d->cid = GetCurrentCommandId(true);
	d->snapshot = RegisterSnapshot(GetTransactionSnapshot());
	return d;
}

/*
 * silo_direct_snapshot: the snapshot direct reads use.
 */
Snapshot
silo_direct_snapshot(SiloDirect *d)
{
	return d->snapshot;
}

/*
 * silo_direct_new_snapshot: start a new command and read from now on with
 * the latest snapshot, which sees this work's own writes so far and every
 * transaction committed until now: after a row was found changed by a
 * transaction that committed since the current snapshot was taken (what
 * EvalPlanQual does for a SQL statement), or to check what a lease left
 * behind.  Rows batched inserts hold are written first, so that it sees
 * them too.  Open scans are ended; the next fetch begins them again.
 */
void
silo_direct_new_snapshot(SiloDirect *d)
{
	int			i;

	for (i = 0; i < d->ntables; i++)
	{
		SiloTable  *t = d->tables[i];

		silo_table_flush(t);
		t->walking = false;
		if (t->scan != NULL)
		{
			index_endscan(t->scan);
			t->scan = NULL;
		}
	}
	UnregisterSnapshot(d->snapshot);
	CommandCounterIncrement();
	d->cid = GetCurrentCommandId(true);
	d->snapshot = RegisterSnapshot(GetLatestSnapshot());
}

/*
 * direct_relid: the OID of silo's table relname; a missing table is a
 * broken installation.
 */
static Oid
direct_relid(const char *relname)
{
	Oid			relid = get_relname_relid(relname, get_namespace_oid("silo", false));

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_SILO_INTERNAL),
				 errmsg("table silo.%s does not exist", relname),
				 errhint("Run ALTER EXTENSION silo UPDATE.")));
	return relid;
}

/*
 * silo_table_open: open silo.relname for direct access.  cols names the
 * columns the caller reads or writes, in the order it will give them;
 * index names the index that fetches and scans use (NULL: the primary
 * key).  mode says what the caller will do: read rows (SILO_TABLE_READ),
 * also lock and delete them (SILO_TABLE_DELETE), or also insert and update
 * them (SILO_TABLE_WRITE: the table's indexes are opened for insertion,
 * and the table must have no live column outside cols).  The locks are
 * those a SELECT or a data-modifying statement would take.
 */
SiloTable *
silo_table_open(SiloDirect *d, const char *relname, const char *const *cols, int ncols,
				const char *index, SiloTableMode mode)
{
	LOCKMODE	lockmode = mode == SILO_TABLE_READ ? AccessShareLock : RowExclusiveLock;
	SiloTable  *t = palloc0(sizeof(SiloTable));
	TupleDesc	desc;
	Oid			indexoid;
	int			i;
	int			live = 0;

	if (d->ntables >= DIRECT_MAX_TABLES)
		elog(ERROR, "silo: too many tables open for direct access");
	t->d = d;
	t->rel = table_open(direct_relid(relname), lockmode);
	desc = RelationGetDescr(t->rel);

	t->ncols = ncols;
	t->attnum = palloc(sizeof(AttrNumber) * ncols);
	for (i = 0; i < ncols; i++)
	{
		t->attnum[i] = attnameAttNum(t->rel, cols[i], false);
		if (t->attnum[i] <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_SILO_INTERNAL),
					 errmsg("table silo.%s has no column \"%s\"", relname, cols[i]),
					 errhint("The silo library and the installed extension differ: run ALTER EXTENSION silo UPDATE.")));
	}
	for (i = 0; i < desc->natts; i++)
		if (!TupleDescAttr(desc, i)->attisdropped)
			live++;
	if (mode == SILO_TABLE_WRITE && live != ncols)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_INTERNAL),
				 errmsg("table silo.%s has %d columns, not the %d this library writes",
						relname, live, ncols),
				 errhint("The silo library and the installed extension differ: run ALTER EXTENSION silo UPDATE.")));

	if (mode != SILO_TABLE_READ)
		silo_direct_check_writable(t);
	if (mode == SILO_TABLE_WRITE)
	{
		t->rri = makeNode(ResultRelInfo);
		InitResultRelInfo(t->rri, t->rel, 0, NULL, 0);
		ExecOpenIndices(t->rri, false);
	}

	indexoid = index == NULL ? RelationGetPrimaryKeyIndex(t->rel)
		: get_relname_relid(index, RelationGetNamespace(t->rel));
	if (!OidIsValid(indexoid))
		ereport(ERROR,
				(errcode(ERRCODE_SILO_INTERNAL),
				 errmsg("table silo.%s has no index %s", relname,
						index == NULL ? "for its primary key" : index)));
	t->index = index_open(indexoid, lockmode);
	t->index_nkeys = IndexRelationGetNumberOfKeyAttributes(t->index);
	for (i = 0; i < t->index_nkeys; i++)
	{
		Oid			type = t->index->rd_opcintype[i];
		Oid			op = get_opfamily_member(t->index->rd_opfamily[i], type, type,
											 BTEqualStrategyNumber);

		if (!OidIsValid(op))
			elog(ERROR, "silo: no equality operator for column %d of index %s", i + 1,
				 RelationGetRelationName(t->index));
		fmgr_info(get_opcode(op), &t->eq[i]);
		if (i == 0)
		{
			op = get_opfamily_member(t->index->rd_opfamily[0], type, type,
									 BTGreaterEqualStrategyNumber);
			if (!OidIsValid(op))
				elog(ERROR, "silo: no >= operator for column 1 of index %s",
					 RelationGetRelationName(t->index));
			fmgr_info(get_opcode(op), &t->ge);
		}
	}

	t->nblocks = InvalidBlockNumber;
	t->row = table_slot_create(t->rel, NULL);
	t->out = MakeSingleTupleTableSlot(desc, &TTSOpsHeapTuple);
	t->values = palloc(sizeof(Datum) * desc->natts);
	t->isnull = palloc(sizeof(bool) * desc->natts);
	d->tables[d->ntables++] = t;
	return t;
}

/*
 * silo_direct_end: write the rows batched inserts still hold, close every
 * table (keeping their locks to the end of the transaction, as a statement
 * would), drop the snapshot, and end the command so that what follows in
 * the transaction sees the writes.
 */
void
silo_direct_end(SiloDirect *d)
{
	int			i;

	for (i = 0; i < d->ntables; i++)
		silo_table_flush(d->tables[i]);
	for (i = d->ntables - 1; i >= 0; i--)
	{
		SiloTable  *t = d->tables[i];
		int			j;

		for (j = 0; j < t->maxpending; j++)
			ExecDropSingleTupleTableSlot(t->pending[j]);
		if (t->scan != NULL)
			index_endscan(t->scan);
		if (t->fetch != NULL)
			table_index_fetch_end(t->fetch);
		ExecDropSingleTupleTableSlot(t->row);
		ExecDropSingleTupleTableSlot(t->out);
		index_close(t->index, NoLock);
		if (t->rri != NULL)
			ExecCloseIndices(t->rri);
		table_close(t->rel, NoLock);
	}
	UnregisterSnapshot(d->snapshot);
	FreeExecutorState(d->estate);
	CommandCounterIncrement();
}
