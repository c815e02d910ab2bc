/*-------------------------------------------------------------------------
 *
 * direct_read.c
 *	  Direct row access, reading: rows found by key (with or without a row
 *	  hint), walked in ascending key order, or scanned in index order
 *	  (direct.c has the overview).
 *
 *-------------------------------------------------------------------------
 */
#include "direct_internal.h"

#include "access/nbtree.h"
#include "access/relscan.h"
#include "access/tableam.h"
#include "catalog/pg_type.h"
#include "storage/bufmgr.h"
#include "utils/datum.h"
#include "utils/rel.h"

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
 * silo_table_fetch_ascending: silo_table_fetch of one key of the index's
 * first column, unique by construction (task_lease's task_id), for keys
 * asked for in strictly ascending order -- the sorted task ids of a batch.  The scan stays where
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
 * silo_table_peek: index column attno (1-based) of the first index entry
 * at or after the scan keys, whatever the visibility of its row -- it may
 * be a dead row's entry that no scan has marked yet: where a range of the
 * index begins, found without walking the dead rows in front of its first
 * live one.  Returns false when no entry follows.  *value is a copy.  The
 * table's current row is not changed.
 */
bool
silo_table_peek(SiloTable *t, ScanKey keys, int nkeys, int attno, Datum *value)
{
	IndexScanDesc scan = direct_scan(t, nkeys);
	ItemPointer tid;
	Form_pg_attribute att;
	bool		isnull;

	scan->xs_want_itup = true;
	index_rescan(scan, keys, nkeys, NULL, 0);
	t->walking = false;
	tid = index_getnext_tid(scan, ForwardScanDirection);
	scan->xs_want_itup = false;
	if (tid == NULL)
		return false;
	att = TupleDescAttr(scan->xs_itupdesc, attno - 1);
	*value = index_getattr(scan->xs_itup, attno, scan->xs_itupdesc, &isnull);
	if (isnull)
		return false;
	*value = datumCopy(*value, att->attbyval, att->attlen);
	return true;
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
