/*-------------------------------------------------------------------------
 *
 * direct_write.c
 *	  Direct row access, writing: inserts (one at a time or batched by
 *	  page), deletes and updates, and the checks a table must pass before
 *	  silo writes it directly (direct.c has the overview).
 *
 *-------------------------------------------------------------------------
 */
#include "direct_internal.h"

#include "access/heapam.h"
#include "access/tableam.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "utils/memutils.h"
#include "utils/rel.h"

/*
 * silo_direct_check_writable: refuse to write a table directly when doing
 * so would go behind something the table asks of every write: it must be
 * a plain heap table, and the only enabled trigger it may have is silo's
 * own lease-mark trigger on silo.task, which the callers answer
 * themselves.  Called when a table is opened for deleting or writing.
 */
void
silo_direct_check_writable(SiloTable *t)
{
	Relation	rel = t->rel;
	int			i;

	if (rel->rd_rel->relkind != RELKIND_RELATION || rel->rd_rel->relam != HEAP_TABLE_AM_OID)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("table silo.%s is not a plain heap table", RelationGetRelationName(rel)),
				 errdetail("silo writes the rows of its tables through the heap and index access methods; a partitioned table or another table access method cannot be written that way."),
				 errhint("Give the table back the form silo created it with (docs/storage.md).")));
	if (rel->trigdesc == NULL)
		return;
	for (i = 0; i < rel->trigdesc->numtriggers; i++)
	{
		Trigger    *trig = &rel->trigdesc->triggers[i];

		if (trig->tgenabled == TRIGGER_DISABLED)
			continue;
		if (strcmp(RelationGetRelationName(rel), "task") == 0 &&
			strcmp(trig->tgname, "task_lease_mark") == 0)
			continue;
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("table silo.%s has trigger \"%s\", which silo would not fire",
						RelationGetRelationName(rel), trig->tgname),
				 errdetail("silo writes the rows of this table directly, without firing triggers."),
				 errhint("Drop the trigger, or disable it with ALTER TABLE silo.%s DISABLE TRIGGER \"%s\"; triggers on silo's tables are not supported (docs/storage.md).",
						 RelationGetRelationName(rel), trig->tgname)));
	}
}

/*
 * direct_check_replica_identity: before the first delete (or update) of
 * a table in this work, the check an UPDATE or DELETE statement makes: a
 * table whose publications publish the change needs a replica identity.
 */
static void
direct_check_replica_identity(SiloTable *t, CmdType cmd)
{
	bool	   *checked = cmd == CMD_DELETE ? &t->delete_checked : &t->update_checked;

	if (*checked)
		return;
	CheckCmdReplicaIdentity(t->rel, cmd);
	*checked = true;
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
 * silo_table_inserted_tid: where the row last inserted into t (not
 * batched) was written, for a row hint that points at it.
 */
ItemPointer
silo_table_inserted_tid(SiloTable *t)
{
	Assert(!t->batched);
	return &t->out->tts_tid;
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

	direct_check_replica_identity(t, CMD_DELETE);
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

	direct_check_replica_identity(t, CMD_DELETE);
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
	direct_check_replica_identity(t, CMD_UPDATE);
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
