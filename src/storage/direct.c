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
 * (docs/performance.md §11).  This is how PostgreSQL's own catalog code
 * and its logical-replication apply worker write rows.
 *
 * What is skipped, and why that is safe:
 * - Triggers.  silo's one trigger, task_lease_mark on silo.task, is
 *   answered by the callers themselves (lease.c owes the marks it would
 *   have owed); triggers of users' own on silo's tables are unsupported
 *   (docs/storage.md).
 * - CHECK and NOT NULL constraints.  Every value written here is made by
 *   silo itself from rows it has just read; the constraints stay on the
 *   tables for the SQL paths and as documentation.
 * - Permission checks.  Callers are the extension owner's SECURITY
 *   DEFINER functions, exactly as their SQL was.
 *
 * Columns are found by name when a table is opened, so the position of a
 * column (which differs between a fresh install and an upgraded one) does
 * not matter; and a table opened for inserts must have no live column the
 * caller does not name, so that no column default is ever skipped.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_storage.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/nbtree.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "nodes/execnodes.h"
#include "parser/parse_relation.h"
#include "storage/bufmgr.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#define DIRECT_MAX_TABLES	8
#define DIRECT_BATCH_ROWS	32		/* rows a batched table holds at most */
#define DIRECT_WALK_STEPS	8		/* rows silo_table_fetch_ascending walks
									 * before it searches again */

struct SiloTable
{
	SiloDirect *d;
	Relation	rel;
	ResultRelInfo *rri;			/* indexes open (SILO_TABLE_WRITE) */
	Relation	index;			/* the index silo_table_fetch and scans use */
	int			index_nkeys;	/* its key columns */
	FmgrInfo	eq[INDEX_MAX_KEYS]; /* = for each key column */
	IndexScanDesc scan;			/* reused across fetches; ended when the
								 * snapshot changes */
	Snapshot	scan_snapshot;
	bool		walking;		/* silo_table_fetch_ascending: the scan
								 * stands on a row whose first key column
								 * is walk_key */
	Datum		walk_key;
	Datum		walk_asked;		/* the key it was last asked for */
	FmgrInfo	ge;				/* >= of the index's first key column */
	IndexFetchTableData *fetch; /* for fetches by TID */
	BlockNumber nblocks;		/* the table's size when last looked at */
	TupleTableSlot *row;		/* the row last fetched or scanned */
	TupleTableSlot *out;		/* the row to insert or update to */
	Datum	   *values;			/* the table's columns, to form it from */
	bool	   *isnull;
	int			ncols;
	AttrNumber *attnum;			/* the caller's column i is attnum[i] */
	bool		batched;		/* inserts wait for silo_table_flush */
	TupleTableSlot **pending;	/* the rows waiting, npending of them */
	int			npending;
	int			maxpending;
};

struct SiloDirect
{
	EState	   *estate;
	CommandId	cid;
	Snapshot	snapshot;		/* registered; taken at begin, renewed by
								 * silo_direct_new_snapshot */
	int			ntables;
	SiloTable  *tables[DIRECT_MAX_TABLES];
};

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

/*
 * direct_scan: the table's index scan with the current snapshot, begun
 * (or begun again after a new snapshot) with nkeys keys.
 */
static IndexScanDesc
direct_scan(SiloTable *t, int nkeys)
{
	if (t->scan != NULL && (t->scan_snapshot != t->d->snapshot ||
							t->scan->numberOfKeys != nkeys))
	{
		index_endscan(t->scan);
		t->scan = NULL;
	}
	if (t->scan == NULL)
	{
		t->scan = index_beginscan(t->rel, t->index, t->d->snapshot, nkeys, 0);
		t->scan_snapshot = t->d->snapshot;
	}
	return t->scan;
}

/*
 * silo_table_fetch: find the row whose first nkeys index columns equal
 * keys, as the current snapshot sees it: the row, when all key columns
 * are given (the indexes are unique), or the first of them in index order
 * (a prefix: "does anyone wait on this key").  The row is then the
 * table's current row.
 */
bool
silo_table_fetch(SiloTable *t, int nkeys, const Datum *keys)
{
	ScanKeyData skey[INDEX_MAX_KEYS];
	IndexScanDesc scan;
	int			i;

	Assert(nkeys <= t->index_nkeys);
	for (i = 0; i < nkeys; i++)
		ScanKeyEntryInitializeWithInfo(&skey[i], 0, i + 1, BTEqualStrategyNumber,
									   InvalidOid, t->index->rd_indcollation[i],
									   &t->eq[i], keys[i]);
	scan = direct_scan(t, nkeys);
	index_rescan(scan, skey, nkeys, NULL, 0);
	t->walking = false;
	return index_getnext_slot(scan, ForwardScanDirection, t->row);
}

/*
 * direct_walk_key: remember the first key column of the current row.
 */
static void
direct_walk_key(SiloTable *t)
{
	Form_pg_attribute att = TupleDescAttr(RelationGetDescr(t->rel),
										  t->index->rd_index->indkey.values[0] - 1);
	bool		isnull;
	Datum		d = slot_getattr(t->row, att->attnum, &isnull);

	t->walk_key = datumCopy(d, att->attbyval, att->attlen);
	t->walking = true;
}

/*
 * direct_walk_next: step the walk to the next row the snapshot sees,
 * passing at most *budget index entries (dead ones included: each costs a
 * heap visit).  False when the index has no more (the walk ends) or when
 * the budget is spent (*spent).
 */
static bool
direct_walk_next(SiloTable *t, int *budget, bool *spent)
{
	*spent = false;
	for (;;)
	{
		if (*budget <= 0)
		{
			*spent = true;
			return false;
		}
		(*budget)--;
		if (index_getnext_tid(t->scan, ForwardScanDirection) == NULL)
		{
			t->walking = false;
			return false;
		}
		if (index_fetch_heap(t->scan, t->row))
		{
			direct_walk_key(t);
			return true;
		}
	}
}

/*
 * silo_table_fetch_ascending: silo_table_fetch of one key, on a table
 * whose index has a single key column, for keys asked for in strictly
 * ascending order -- the sorted task ids of a batch.  The scan stays where
 * the last key left it and walks forward to the next one, a step along the
 * leaf instead of a descent from the root, as long as the keys lie close
 * together in the index (the rows of one batch were made together); after
 * DIRECT_WALK_STEPS index entries it searches from the root again.  A key
 * not above the previous one is searched for from the root.
 */
bool
silo_table_fetch_ascending(SiloTable *t, Datum key)
{
	FmgrInfo   *cmp = index_getprocinfo(t->index, 1, BTORDER_PROC);
	Oid			coll = t->index->rd_indcollation[0];
	Form_pg_attribute att = TupleDescAttr(RelationGetDescr(t->rel),
										  t->index->rd_index->indkey.values[0] - 1);
	ScanKeyData skey;
	int			budget = DIRECT_WALK_STEPS;
	int			unlimited = INT_MAX;
	bool		spent;
	bool		ascending;

	Assert(t->index_nkeys == 1);
	ascending = t->walking && t->scan != NULL && t->scan_snapshot == t->d->snapshot &&
		DatumGetInt32(FunctionCall2Coll(cmp, coll, key, t->walk_asked)) > 0;
	t->walk_asked = datumCopy(key, att->attbyval, att->attlen);
	if (ascending)
	{
		for (;;)
		{
			int32		c = DatumGetInt32(FunctionCall2Coll(cmp, coll, t->walk_key, key));

			if (c == 0)
				return true;
			if (c > 0)
				return false;	/* the scan is past it: no such row */
			if (!direct_walk_next(t, &budget, &spent))
			{
				if (!spent)
					return false;	/* no row at or after it */
				break;
			}
		}
	}
	ScanKeyEntryInitializeWithInfo(&skey, 0, 1, BTGreaterEqualStrategyNumber, InvalidOid,
								   coll, &t->ge, key);
	index_rescan(direct_scan(t, 1), &skey, 1, NULL, 0);
	t->walking = true;
	if (!direct_walk_next(t, &unlimited, &spent))
		return false;
	return DatumGetInt32(FunctionCall2Coll(cmp, coll, t->walk_key, key)) == 0;
}

/*
 * silo_table_fetch_tid: find the row a TID that silo stored points at, as
 * the current snapshot sees it: the visible version of the HOT chain that
 * starts there, as an index entry pointing there would find it.  The TID
 * is a hint (see docs/storage.md, "Row hints"): it may point past the end
 * of a table rewritten since, at a removed row, or at another row that
 * took its place, so the caller checks the row's key before using it and
 * falls back to silo_table_fetch.
 */
bool
silo_table_fetch_tid(SiloTable *t, ItemPointer tid)
{
	ItemPointerData at = *tid;
	bool		call_again = false;
	bool		all_dead = false;

	t->walking = false;			/* the current row changes */
	if (!ItemPointerIsValid(&at))
		return false;
	if (t->nblocks == InvalidBlockNumber || ItemPointerGetBlockNumber(&at) >= t->nblocks)
	{
		/* the table may have grown since it was last looked at */
		t->nblocks = RelationGetNumberOfBlocks(t->rel);
		if (ItemPointerGetBlockNumber(&at) >= t->nblocks)
			return false;
	}
	if (t->fetch == NULL)
		t->fetch = table_index_fetch_begin(t->rel);
	return table_index_fetch_tuple(t->fetch, &at, t->d->snapshot, t->row, &call_again,
								   &all_dead);
}

/*
 * silo_table_scan_start / silo_table_scan_next: walk the table's index in
 * order from the given scan keys (the caller builds them, row comparisons
 * included); each row returned becomes the current row.
 */
void
silo_table_scan_start(SiloTable *t, ScanKey keys, int nkeys)
{
	index_rescan(direct_scan(t, nkeys), keys, nkeys, NULL, 0);
	t->walking = false;
}

bool
silo_table_scan_next(SiloTable *t)
{
	return index_getnext_slot(t->scan, ForwardScanDirection, t->row);
}

/*
 * silo_table_get: column col (the caller's numbering) of the current row.
 */
Datum
silo_table_get(SiloTable *t, int col, bool *isnull)
{
	TupleTableSlot *row = t->row;
	AttrNumber	attnum = t->attnum[col];

	/* the first read of a row takes all of it apart, once */
	if (attnum > row->tts_nvalid)
		slot_getallattrs(row);
	*isnull = row->tts_isnull[attnum - 1];
	return row->tts_values[attnum - 1];
}

/*
 * silo_table_tid: where the current row is.
 */
ItemPointer
silo_table_tid(SiloTable *t)
{
	return &t->row->tts_tid;
}

/*
 * direct_index: insert the index entries of the row in slot (just written
 * to the table), if the table has indexes that need them.  update says
 * the row is a new version whose keys did not change (an update that could
 * not be HOT), which lets the B-tree clear out old versions instead of
 * splitting a page.
 */
static void
direct_index(SiloTable *t, TupleTableSlot *slot, bool update)
{
	EState	   *estate = t->d->estate;

	if (t->rri->ri_NumIndices > 0)
	{
		List	   *recheck = ExecInsertIndexTuples(t->rri, slot, estate, update, false,
													NULL, NIL);

		list_free(recheck);
		ResetPerTupleExprContext(estate);
	}
}

/*
 * direct_form: store in slot the row of the table's columns whose
 * values t->values / t->isnull hold, formed once as a heap tuple (what
 * the heap stores; a virtual slot would be copied twice on the way).
 */
static void
direct_form(SiloTable *t, TupleTableSlot *slot)
{
	HeapTuple	tuple = heap_form_tuple(RelationGetDescr(t->rel), t->values, t->isnull);

	ExecStoreHeapTuple(tuple, slot, true);
}

/*
 * silo_table_batch: from now on, rows inserted into t are kept, up to
 * DIRECT_BATCH_ROWS of them, until silo_table_flush (or silo_direct_end)
 * writes them at once, with one WAL record and one buffer lock per page
 * they fill, as COPY writes: for rows no one reads before the work ends.
 */
void
silo_table_batch(SiloTable *t)
{
	Assert(t->rri != NULL);
	t->batched = true;
}

/*
 * silo_table_flush: write the rows a batched table holds, then their
 * index entries.
 */
void
silo_table_flush(SiloTable *t)
{
	int			i;

	if (t->npending == 0)
		return;
	table_multi_insert(t->rel, t->pending, t->npending, t->d->cid, 0, NULL);
	for (i = 0; i < t->npending; i++)
	{
		direct_index(t, t->pending[i], false);
		ExecClearTuple(t->pending[i]);
	}
	t->npending = 0;
}

/*
 * silo_table_insert: insert a row; values and nulls are in the order of
 * the columns the table was opened with.  A batched table keeps it for
 * silo_table_flush.
 */
void
silo_table_insert(SiloTable *t, const Datum *values, const bool *nulls)
{
	int			natts = RelationGetDescr(t->rel)->natts;
	TupleTableSlot *slot;
	MemoryContext old;
	int			i;

	Assert(t->rri != NULL);
	memset(t->isnull, true, sizeof(bool) * natts);
	for (i = 0; i < t->ncols; i++)
	{
		t->values[t->attnum[i] - 1] = values[i];
		t->isnull[t->attnum[i] - 1] = nulls != NULL && nulls[i];
	}
	if (!t->batched)
	{
		direct_form(t, t->out);
		table_tuple_insert(t->rel, t->out, t->d->cid, 0, NULL);
		direct_index(t, t->out, false);
		return;
	}
	if (t->npending == DIRECT_BATCH_ROWS)
		silo_table_flush(t);
	/* what waits lives as long as the work, whatever the caller's context */
	old = MemoryContextSwitchTo(t->d->estate->es_query_cxt);
	if (t->npending == t->maxpending)
	{
		if (t->pending == NULL)
			t->pending = palloc(sizeof(TupleTableSlot *) * DIRECT_BATCH_ROWS);
		t->pending[t->maxpending++] = MakeSingleTupleTableSlot(RelationGetDescr(t->rel),
															   &TTSOpsHeapTuple);
	}
	slot = t->pending[t->npending++];
	direct_form(t, slot);
	MemoryContextSwitchTo(old);
}

/*
 * silo_table_delete: delete the current row, waiting for a transaction
 * that holds it.  TM_Ok, or why not: TM_Deleted (someone else deleted it
 * first), TM_Updated (changed meanwhile: read it again with a new
 * snapshot and decide again), TM_SelfModified (this transaction already
 * did).
 */
TM_Result
silo_table_delete(SiloTable *t)
{
	TM_FailureData tmfd;

	return table_tuple_delete(t->rel, &t->row->tts_tid, t->d->cid, t->d->snapshot,
							  InvalidSnapshot, true, &tmfd, false);
}

/*
 * silo_table_delete_skip_locked: delete the current row unless another
 * transaction holds it (SKIP LOCKED), in one step where FOR UPDATE SKIP
 * LOCKED and a DELETE take two: the delete does not wait, and a row held
 * elsewhere comes back as TM_BeingModified.  A row this transaction has
 * locked itself (a task an UPDATE ... FOR UPDATE promoted a moment ago
 * carries that lock) also comes back so; for those, and only those, the
 * lock is taken the usual way, which succeeds at once, and the delete
 * repeated.  TM_Ok when deleted.
 */
TM_Result
silo_table_delete_skip_locked(SiloTable *t)
{
	TM_FailureData tmfd;
	TM_Result	res;

	res = table_tuple_delete(t->rel, &t->row->tts_tid, t->d->cid, t->d->snapshot,
							 InvalidSnapshot, false, &tmfd, false);
	if (res != TM_BeingModified)
		return res;
	res = table_tuple_lock(t->rel, &t->row->tts_tid, t->d->snapshot, t->row, t->d->cid,
						   LockTupleExclusive, LockWaitSkip, 0, &tmfd);
	if (res != TM_Ok)
		return res;
	return silo_table_delete(t);
}

/*
 * silo_table_update: replace the current row by itself with n columns
 * changed (cols[i] set to values[i], or NULL); results as for
 * silo_table_delete.  Index entries are written only when the update is
 * not HOT.  No caller changes a column of an index key (the hint given to
 * the B-tree for a non-HOT update says so).
 */
TM_Result
silo_table_update(SiloTable *t, int n, const int *cols, const Datum *values, const bool *nulls)
{
	int			natts = RelationGetDescr(t->rel)->natts;
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	bool		update_indexes;
	TM_Result	res;
	int			i;

	Assert(t->rri != NULL);
	slot_getallattrs(t->row);
	memcpy(t->values, t->row->tts_values, sizeof(Datum) * natts);
	memcpy(t->isnull, t->row->tts_isnull, sizeof(bool) * natts);
	for (i = 0; i < n; i++)
	{
		t->values[t->attnum[cols[i]] - 1] = values[i];
		t->isnull[t->attnum[cols[i]] - 1] = nulls != NULL && nulls[i];
	}
	direct_form(t, t->out);
	res = table_tuple_update(t->rel, &t->row->tts_tid, t->out, t->d->cid, t->d->snapshot,
							 InvalidSnapshot, true, &tmfd, &lockmode, &update_indexes);
	if (res == TM_Ok && update_indexes)
		direct_index(t, t->out, true);
	return res;
}

/*
 * silo_text_datum_is: whether a text datum holds exactly s.
 */
bool
silo_text_datum_is(Datum d, const char *s)
{
	text	   *t = DatumGetTextPP(d);
	size_t		len = strlen(s);

	return VARSIZE_ANY_EXHDR(t) == len && memcmp(VARDATA_ANY(t), s, len) == 0;
}

/*
 * silo_text_datums_equal: whether two text datums hold the same bytes
 * (equality under the "C" collation of silo's key columns).
 */
bool
silo_text_datums_equal(Datum a, Datum b)
{
	text	   *ta = DatumGetTextPP(a);
	text	   *tb = DatumGetTextPP(b);

	return VARSIZE_ANY_EXHDR(ta) == VARSIZE_ANY_EXHDR(tb) &&
		memcmp(VARDATA_ANY(ta), VARDATA_ANY(tb), VARSIZE_ANY_EXHDR(ta)) == 0;
}

/*
 * silo_table_fetch_hinted: find a row by its key, trying the TID hint
 * first: the row the hint points at is taken if its first nkeys columns
 * (the caller's numbering: columns 0 .. nkeys - 1 must be the key, in
 * index order) equal keys; otherwise the index is searched.  text and
 * timestamptz key columns only.
 */
bool
silo_table_fetch_hinted(SiloTable *t, Datum hint, bool hint_null, int nkeys,
						const Datum *keys)
{
	if (!hint_null && silo_table_fetch_tid(t, (ItemPointer) DatumGetPointer(hint)))
	{
		TupleDesc	desc = t->row->tts_tupleDescriptor;
		int			i;

		for (i = 0; i < nkeys; i++)
		{
			bool		isnull;
			Datum		v = silo_table_get(t, i, &isnull);
			Oid			type = TupleDescAttr(desc, t->attnum[i] - 1)->atttypid;

			if (isnull)
				break;
			if (type == TEXTOID)
			{
				if (!silo_text_datums_equal(v, keys[i]))
					break;
			}
			else if (type == TIMESTAMPTZOID)
			{
				if (DatumGetTimestampTz(v) != DatumGetTimestampTz(keys[i]))
					break;
			}
			else
				elog(ERROR, "silo: hinted key column of type %u", type);
		}
		if (i == nkeys)
			return true;
	}
	return silo_table_fetch(t, nkeys, keys);
}
