/*-------------------------------------------------------------------------
 *
 * tail.c
 *	  A move's setsums without scanning the shard during the pause: the
 *	  rows are summed once before the pause, and only the rows that changed
 *	  since are summed again while the shard is paused (docs/cluster.md,
 *	  "The setsums and the tail").
 *
 * silo.move_tail_setsums runs on each side of a move, in a session of its
 * own that the coordinator opens for it, and returns what
 * silo.shard_setsums would return at the end of the pause:
 *
 *	 1. it creates a temporary logical replication slot (pgoutput, on the
 *		publication of the shard's rows), then takes snapshot T: every
 *		transaction that T does not see commits after the slot's start, so
 *		the slot decodes it;
 *	 2. it sums the shard's rows as T sees them (the long part, before the
 *		pause), runs rounds (step 3) until one is quick (the first decodes
 *		all the WAL written meanwhile), and says so with a NOTICE, which the
 *		coordinator waits for before it pauses the shard;
 *	 3. every ROUND_MS, and once more when silo.shard_state says the pause
 *		is over (the source's drained LSN, the target's LSN once every
 *		change had arrived): it takes a new snapshot T', flushes the WAL up
 *		to the insert position L, decodes the slot up to L, and collects the
 *		key of every row the decoded transactions touched (K); the sums of
 *		the rows with those keys as T sees them are subtracted and as T'
 *		sees them added.  T' becomes T.
 *
 * Why it is exact: a row whose key no transaction touched between T and
 * T' is the same in both, so adding and removing it changes nothing, and
 * a superset of the touched keys is as good as the set.  A transaction
 * decoded in a round whose T' does not see it (it committed after T' but
 * before L, or its commit waits for a synchronous standby) has its keys
 * summed again in every later round until a T' sees it.  T itself is taken
 * again while a transaction it does not see has already committed (such a
 * commit may precede the slot's start, and would never be decoded).  A transaction T' sees committed before L was read
 * (its commit record is in the WAL before it becomes visible), and the
 * flush up to L lets decoding read it even after an asynchronous commit.
 *
 * Each side computes its own sums from its own rows and its own WAL (the
 * target decodes the changes its subscription applied, through a
 * publication of its own), so a change lost on the way shows as sums that
 * differ.  Anything that goes wrong here is an error of this call only:
 * the coordinator then sums the whole shard during the pause instead.
 *
 * The call holds a snapshot from its start to its end (before and during
 * the pause): VACUUM cannot remove rows that died meanwhile, as during a
 * table's initial copy.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_cluster.h"

#include "access/transam.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/snapmgr.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "utils/wait_event.h"

/* the least time between two rounds while the pause has not ended */
#define ROUND_MS		100
/* how often it looks whether the pause has ended */
#define POLL_MS			20
/* at most this many key columns per table */
#define TAIL_MAX_KEYS	8

/* one shard table: its sums, its key columns, the keys of two rounds */
typedef struct TailTable
{
	Oid			relid;
	char	   *relname;
	char	   *cols;			/* silo.shard_columns */
	int			ncols;			/* published columns */
	int			nkeys;
	int			keypos[TAIL_MAX_KEYS];	/* key columns among the published */
	SPIPlanPtr	keysum;			/* the sums of the rows of a key set */
	List	   *keys;			/* this round's (TailKey *) */
	List	   *carry;			/* this round's that T' does not see */
	List	   *carried;		/* earlier rounds' that T' did not see yet */
	int64		count;
	SiloSetsum	sum;
} TailTable;

/* a changed row's key, and the transaction that changed it */
typedef struct TailKey
{
	TransactionId xid;
	char	   *v[FLEXIBLE_ARRAY_MEMBER];	/* nkeys values, as text */
} TailKey;

typedef struct Tail
{
	int			ntables;
	TailTable  *tables;
	Snapshot	next;			/* this round's T' */
	TransactionId xid;			/* the transaction being read */
	bool		carry;			/* T' does not see it */
	MemoryContext round_cxt;	/* the last round's keys (the carried ones) */
} Tail;

/*
 * tail_spi: run sql (no parameters) with a fresh snapshot; error unless it
 * succeeds.  Returns SPI's row count.
 */
static uint64
tail_spi(const char *sql, int expected)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			rc = SPI_execute(sql, false, 0);

	/* SPI returns in its own context: allocate in the caller's again */
	MemoryContextSwitchTo(cxt);

	if (rc != expected)
		elog(ERROR, "silo: \"%s\" failed: %s", sql, SPI_result_code_string(rc));
	return SPI_processed;
}

/*
 * tail_value: column col of result row row as a palloc'd C string in the
 * caller's context (NULL for NULL).
 */
static char *
tail_value(uint64 row, int col)
{
	return SPI_getvalue(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col);
}

/*
 * tail_tables: the shard tables, their published columns, their key (the
 * replica identity's columns) and the statement that sums a key set's
 * rows, filter being the shard's rows.
 */
static void
tail_tables(Tail *t, const char *filter)
{
	uint64		n;
	uint64		i;

	n = tail_spi("SELECT c.oid, c.relname, silo.shard_columns(c.oid), k.positions, k.keycols, k.casts,"
				 "       k.names, (SELECT pg_catalog.count(*) FROM pg_catalog.pg_attribute a"
				 "                  WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
				 "                    AND a.attgenerated = '' AND a.atttypid <> 'pg_catalog.tid'::pg_catalog.regtype)"
				 "  FROM silo.shard_tables() s(t) JOIN pg_catalog.pg_class c ON c.oid = s.t"
				 "  LEFT JOIN LATERAL ("
				 "       SELECT pg_catalog.array_agg(p.pos ORDER BY a.attnum) AS positions,"
				 "              pg_catalog.string_agg(pg_catalog.format('%I', a.attname), ',' ORDER BY a.attnum) AS keycols,"
				 "              pg_catalog.string_agg(pg_catalog.format('k.k%s::%s', a.attnum,"
				 "                pg_catalog.format_type(a.atttypid, a.atttypmod)), ',' ORDER BY a.attnum) AS casts,"
				 "              pg_catalog.string_agg(pg_catalog.format('k%s', a.attnum), ',' ORDER BY a.attnum) AS names"
				 "         FROM pg_catalog.pg_index i"
				 "         JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY (i.indkey)"
				 "         JOIN (SELECT a2.attnum, pg_catalog.row_number() OVER (ORDER BY a2.attnum) AS pos"
				 "                 FROM pg_catalog.pg_attribute a2"
				 "                WHERE a2.attrelid = c.oid AND a2.attnum > 0 AND NOT a2.attisdropped"
				 "                  AND a2.attgenerated = '' AND a2.atttypid <> 'pg_catalog.tid'::pg_catalog.regtype) p"
				 "           ON p.attnum = a.attnum"
				 "        WHERE i.indrelid = c.oid"
				 "          AND (i.indisreplident OR (c.relreplident = 'd' AND i.indisprimary))) k ON true"
				 " ORDER BY c.relname",
				 SPI_OK_SELECT);
	t->ntables = (int) n;
	t->tables = palloc0(sizeof(TailTable) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		TailTable  *tt = &t->tables[i];
		char	   *positions = tail_value(i, 4);
		char	   *keycols = tail_value(i, 5);
		char	   *casts = tail_value(i, 6);
		char	   *names = tail_value(i, 7);
		Oid		   *argtypes;
		char	   *p;
		StringInfoData sql;
		int			k;

		tt->relid = (Oid) strtoul(tail_value(i, 1), NULL, 10);
		tt->relname = tail_value(i, 2);
		tt->cols = tail_value(i, 3);
		tt->ncols = atoi(tail_value(i, 8));
		if (positions == NULL || keycols == NULL)
			elog(ERROR, "silo: table %s has no replica identity index", tt->relname);
		/* "{2,5}": positions among the published columns, from 1 */
		for (p = positions + 1; *p && *p != '}'; p++)
		{
			if (tt->nkeys == TAIL_MAX_KEYS)
				elog(ERROR, "silo: table %s has too many key columns", tt->relname);
			tt->keypos[tt->nkeys++] = (int) strtol(p, &p, 10) - 1;
			if (*p == '}')
				break;
		}
		silo_setsum_clear(&tt->sum);

		/* the rows whose key is in the arrays $1..$n */
		initStringInfo(&sql);
		appendStringInfo(&sql, "SELECT pg_catalog.count(*), silo.setsum(ROW(%s)::text) FROM silo.%s t"
						 " WHERE %s AND (%s) IN (SELECT %s FROM ROWS FROM (",
						 tt->cols, quote_identifier(tt->relname), filter, keycols, casts);
		argtypes = palloc(sizeof(Oid) * tt->nkeys);
		for (k = 0; k < tt->nkeys; k++)
		{
			argtypes[k] = TEXTARRAYOID;
			appendStringInfo(&sql, "%spg_catalog.unnest($%d)", k ? ", " : "", k + 1);
		}
		appendStringInfo(&sql, ") AS k(%s))", names);
		tt->keysum = SPI_prepare(sql.data, tt->nkeys, argtypes);
		if (tt->keysum == NULL)
			elog(ERROR, "silo: could not prepare \"%s\": %s", sql.data,
				 SPI_result_code_string(SPI_result));
	}
}

/*
 * tail_presum: the sums of every table's rows of the shard as snapshot
 * sees them: what silo.shard_setsums computes, at T.
 */
static void
tail_presum(Tail *t, const char *filter, Snapshot snapshot)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			i;

	for (i = 0; i < t->ntables; i++)
	{
		TailTable  *tt = &t->tables[i];
		char	   *sql;
		SPIPlanPtr	plan;
		int			rc;

		sql = psprintf("SELECT pg_catalog.count(*), silo.setsum(ROW(%s)::text) FROM silo.%s WHERE %s",
					   tt->cols, quote_identifier(tt->relname), filter);
		plan = SPI_prepare(sql, 0, NULL);
		if (plan == NULL)
			elog(ERROR, "silo: could not prepare \"%s\"", sql);
		rc = SPI_execute_snapshot(plan, NULL, NULL, snapshot, InvalidSnapshot, true, false, 0);
		MemoryContextSwitchTo(cxt);
		if (rc != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "silo: \"%s\" failed: %s", sql, SPI_result_code_string(rc));
		tt->count = strtoll(tail_value(0, 1), NULL, 10);
		silo_setsum_from_text(cstring_to_text(tail_value(0, 2)), "setsum", &tt->sum);
		SPI_freeplan(plan);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * tail_read: n bytes of a message at *pos, or an error when it is shorter
 * (a message this code does not understand: the caller sums the shard
 * whole instead).
 */
static const char *
tail_read(const char *msg, int len, int *pos, int n)
{
	const char *p = msg + *pos;

	if (n < 0 || *pos + n > len)
		elog(ERROR, "silo: a decoded change is shorter than its format says");
	*pos += n;
	return p;
}

/*
 * tail_int: a big-endian integer of n (2 or 4) bytes.
 */
static uint32
tail_int(const char *msg, int len, int *pos, int n)
{
	const unsigned char *p = (const unsigned char *) tail_read(msg, len, pos, n);

	return n == 2 ? (uint32) (p[0] << 8 | p[1]) :
		(uint32) p[0] << 24 | (uint32) p[1] << 16 | (uint32) p[2] << 8 | p[3];
}

/*
 * tail_tuple: read a TupleData of a change of tt and add its key to this
 * round's keys.  (pgoutput, protocol 1: values as text; a key column is
 * never NULL nor an unchanged TOAST value, which would be an error.)
 */
static void
tail_tuple(Tail *t, TailTable *tt, const char *msg, int len, int *pos)
{
	int			ncols = (int) tail_int(msg, len, pos, 2);
	TailKey    *key = palloc0(offsetof(TailKey, v) + sizeof(char *) * tt->nkeys);
	int			c;
	int			k = 0;

	if (ncols != tt->ncols)
		elog(ERROR, "silo: a decoded change of %s has %d columns, not %d",
			 tt->relname, ncols, tt->ncols);
	for (c = 0; c < ncols; c++)
	{
		char		kind = *tail_read(msg, len, pos, 1);
		bool		is_key = k < tt->nkeys && tt->keypos[k] == c;

		if (kind == 't')
		{
			int			vlen = (int) tail_int(msg, len, pos, 4);
			const char *v = tail_read(msg, len, pos, vlen);

			if (is_key)
				key->v[k] = pnstrdup(v, vlen);
		}
		else if (kind != 'n' && kind != 'u')
			elog(ERROR, "silo: a decoded change has a column of kind '%c'", kind);
		if (is_key)
		{
			if (key->v[k] == NULL)
				elog(ERROR, "silo: a decoded change of %s has no value for a key column",
					 tt->relname);
			k++;
		}
	}
	key->xid = t->xid;
	tt->keys = lappend(tt->keys, key);
	if (t->carry)
		tt->carry = lappend(tt->carry, key);
}

/*
 * tail_change: one decoded message: the keys of an insert, an update
 * (old and new) or a delete of a shard table; anything else is skipped.
 */
static void
tail_change(Tail *t, const char *msg, int len)
{
	int			pos = 1;
	char		kind;
	Oid			relid;
	TailTable  *tt = NULL;
	int			i;

	if (len >= 21 && msg[0] == 'B')
	{
		/* a transaction's begin: its xid, after two 8-byte fields */
		pos = 17;
		t->xid = (TransactionId) tail_int(msg, len, &pos, 4);
		t->carry = XidInMVCCSnapshot(t->xid, t->next);
		return;
	}
	if (len < 1 || (msg[0] != 'I' && msg[0] != 'U' && msg[0] != 'D'))
		return;
	relid = (Oid) tail_int(msg, len, &pos, 4);
	for (i = 0; i < t->ntables; i++)
		if (t->tables[i].relid == relid)
			tt = &t->tables[i];
	if (tt == NULL)
		return;
	kind = *tail_read(msg, len, &pos, 1);
	if (msg[0] == 'U' && (kind == 'K' || kind == 'O'))
	{
		tail_tuple(t, tt, msg, len, &pos);
		kind = *tail_read(msg, len, &pos, 1);
	}
	if ((msg[0] == 'D') != (kind == 'K' || kind == 'O') || (msg[0] != 'D' && kind != 'N'))
		elog(ERROR, "silo: a decoded change of %s is not in the expected form", tt->relname);
	tail_tuple(t, tt, msg, len, &pos);
}

/*
 * tail_decode: decode the slot up to upto and collect the keys of the
 * changes of the publication's rows.
 */
static void
tail_decode(Tail *t, const char *slot, const char *pub, XLogRecPtr upto)
{
	uint64		n;
	uint64		i;
	char	   *sql;

	sql = psprintf("SELECT data FROM pg_catalog.pg_logical_slot_get_binary_changes(%s, '%X/%X', NULL,"
				   " 'proto_version', '1', 'publication_names', %s)",
				   quote_literal_cstr(slot), LSN_FORMAT_ARGS(upto), quote_literal_cstr(pub));
	n = tail_spi(sql, SPI_OK_SELECT);
	for (i = 0; i < n; i++)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);
		bytea	   *b;

		if (isnull)
			continue;
		b = DatumGetByteaPP(d);
		tail_change(t, VARDATA_ANY(b), VARSIZE_ANY_EXHDR(b));
	}
	SPI_freetuptable(SPI_tuptable);
}

/*
 * tail_keysum: the count and setsum of tt's rows whose key is in keys, as
 * snapshot sees them.
 */
static void
tail_keysum(TailTable *tt, List *keys, Snapshot snapshot, int64 *count, SiloSetsum *sum)
{
	MemoryContext cxt = CurrentMemoryContext;
	Datum		values[TAIL_MAX_KEYS];
	int			k;
	int			rc;

	for (k = 0; k < tt->nkeys; k++)
	{
		Datum	   *elems = palloc(sizeof(Datum) * list_length(keys));
		ListCell   *lc;
		int			n = 0;

		foreach(lc, keys)
			elems[n++] = CStringGetTextDatum(((TailKey *) lfirst(lc))->v[k]);
		values[k] = PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
	}
	rc = SPI_execute_snapshot(tt->keysum, values, NULL, snapshot, InvalidSnapshot, true, false, 0);
	MemoryContextSwitchTo(cxt);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "silo: the sum of changed rows of %s failed: %s", tt->relname,
			 SPI_result_code_string(rc));
	*count = strtoll(tail_value(0, 1), NULL, 10);
	silo_setsum_from_text(cstring_to_text(tail_value(0, 2)), "setsum", sum);
	SPI_freetuptable(SPI_tuptable);
}

/*
 * tail_key_copy: a copy of key k of tt in the current memory context.
 */
static TailKey *
tail_key_copy(TailTable *tt, const TailKey *k)
{
	TailKey    *c = palloc(offsetof(TailKey, v) + sizeof(char *) * tt->nkeys);
	int			i;

	c->xid = k->xid;
	for (i = 0; i < tt->nkeys; i++)
		c->v[i] = pstrdup(k->v[i]);
	return c;
}

/*
 * tail_flush_point: the WAL position to flush so that everything inserted
 * before the insert position upto is on disk.  Right after a page's header
 * the insert position is past a header nothing has written yet (XLogFlush
 * would fail: "flushed only to" the page's start); everything inserted
 * ends at the page's start then.
 */
static XLogRecPtr
tail_flush_point(XLogRecPtr upto)
{
	if (upto % XLOG_BLCKSZ == SizeOfXLogShortPHD ||
		XLogSegmentOffset(upto, wal_segment_size) == SizeOfXLogLongPHD)
		return upto - upto % XLOG_BLCKSZ;
	return upto;
}

/*
 * tail_round: one round of the header's step 3; *snapshot (T) is replaced
 * by the new one (T').
 */
static void
tail_round(Tail *t, const char *slot, const char *pub, Snapshot *snapshot)
{
	Snapshot	next = RegisterSnapshot(GetLatestSnapshot());
	XLogRecPtr	upto = GetXLogInsertRecPtr();
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "silo tail round",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	int			i;

	uint64		t0 = silo_monotonic_us();
	uint64		t1;
	int			nkeys = 0;

	XLogFlush(tail_flush_point(upto));
	t->next = next;
	t->carry = true;
	tail_decode(t, slot, pub, upto);
	t1 = silo_monotonic_us();
	for (i = 0; i < t->ntables; i++)
	{
		TailTable  *tt = &t->tables[i];
		List	   *keys = list_concat_copy(tt->carried, tt->keys);
		int64		old_count;
		int64		new_count;
		SiloSetsum	old_sum;
		SiloSetsum	new_sum;

		nkeys += list_length(keys);
		if (keys != NIL)
		{
			tail_keysum(tt, keys, *snapshot, &old_count, &old_sum);
			tail_keysum(tt, keys, next, &new_count, &new_sum);
			tt->count += new_count - old_count;
			silo_setsum_subtract(&tt->sum, &old_sum);
			silo_setsum_union(&tt->sum, &new_sum);
		}
		/*
		 * keys of transactions T' does not see (a commit still waiting for a
		 * synchronous standby, say): again in the rounds until one sees it;
		 * the earlier rounds' are copied out of the context that goes
		 */
		{
			List	   *still = tt->carry;
			ListCell   *lc;

			foreach(lc, tt->carried)
			{
				TailKey    *k = (TailKey *) lfirst(lc);

				if (XidInMVCCSnapshot(k->xid, next))
					still = lappend(still, tail_key_copy(tt, k));
			}
			tt->carried = still;
		}
		tt->carry = NIL;
		tt->keys = NIL;
		CHECK_FOR_INTERRUPTS();
	}
	ereport(DEBUG1,
			(errmsg_internal("silo: a tail round decoded in %lld ms, %d keys summed in %lld ms",
							 (long long) (t1 - t0) / 1000, nkeys,
							 (long long) (silo_monotonic_us() - t1) / 1000)));
	UnregisterSnapshot(*snapshot);
	*snapshot = next;
	/* this round's keys stay for the next one; the last round's go */
	MemoryContextSwitchTo(old);
	if (t->round_cxt != NULL)
		MemoryContextDelete(t->round_cxt);
	t->round_cxt = cxt;
}

/*
 * tail_finish_lsn: the pause's LSN once silo.shard_state says that the
 * pause of this move ended for this side (state finish_state, final_lsn
 * set), else InvalidXLogRecPtr.  An error when the row names another
 * move or none: the move is over and nobody waits for this call.
 */
static XLogRecPtr
tail_finish_lsn(int shard, int64 move, const char *finish_state)
{
	char	   *state;
	char	   *lsn;

	if (tail_spi(psprintf("SELECT state, final_lsn FROM silo.shard_state"
						  " WHERE shard_id = %d AND move_id = %lld", shard, (long long) move),
				 SPI_OK_SELECT) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the move of shard %d is over on this node", shard)));
	state = tail_value(0, 1);
	lsn = tail_value(0, 2);
	SPI_freetuptable(SPI_tuptable);
	if (strcmp(state, finish_state) != 0 || lsn == NULL)
		return InvalidXLogRecPtr;
	return DatumGetLSN(DirectFunctionCall1(pg_lsn_in, CStringGetDatum(lsn)));
}

/*
 * tail_first_snapshot: T, registered, taken after the slot's creation.  A
 * transaction whose commit is in the WAL before the slot's start is not
 * decoded, so T must see it: one that T does not see although it has
 * committed (its commit still waits for a synchronous standby, say) is
 * waited for, and T taken again.
 */
static Snapshot
tail_first_snapshot(void)
{
	for (;;)
	{
		Snapshot	s = RegisterSnapshot(GetLatestSnapshot());
		bool		waited = false;
		uint32		i;

		for (i = 0; i < s->xcnt; i++)
			if (TransactionIdDidCommit(s->xip[i]))
			{
				XactLockTableWait(s->xip[i], NULL, NULL, XLTW_None);
				waited = true;
			}
		if (!waited)
			return s;
		UnregisterSnapshot(s);
	}
}

/*
 * silo_cluster_tail_setsums: the header's steps for shard's move (its
 * hash range [lo, hi), hi_null: up to 2^63; its publication pub), until silo.shard_state says
 * finish_state with a final LSN or limit_ms pass.  The result is in
 * silo.shard_setsums' form.
 */
char *
silo_cluster_tail_setsums(int shard, int64 move, int64 lo, bool hi_null, int64 hi,
						  const char *pub, const char *finish_state, int limit_ms)
{
	char	   *filter;
	Tail		t = {0};
	char	   *slot = psprintf("silo_tail_%d_%lld", shard, (long long) move);
	Snapshot	snapshot;
	uint64		start = silo_monotonic_us();
	uint64		round_us = start;
	MemoryContext loop_cxt;
	StringInfoData out;
	int			i;

	if (IsTransactionBlock())
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("silo.move_tail_setsums cannot run inside a transaction block")));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "silo: SPI_connect failed");
	tail_spi(psprintf("SELECT silo.shard_filter(%lld, %s)", (long long) lo,
					  hi_null ? "NULL" : psprintf("%lld", (long long) hi)), SPI_OK_SELECT);
	filter = tail_value(0, 1);
	tail_tables(&t, filter);
	tail_spi(psprintf("SELECT pg_catalog.pg_create_logical_replication_slot(%s, 'pgoutput', true)",
					  quote_literal_cstr(slot)), SPI_OK_SELECT);
	snapshot = tail_first_snapshot();
	tail_presum(&t, filter, snapshot);

	/*
	 * Rounds until one is quick: the first decodes all the WAL written
	 * during the sum, which the pause must not wait for.
	 */
	for (i = 0; i < 50; i++)
	{
		uint64		r0 = silo_monotonic_us();

		tail_round(&t, slot, pub, &snapshot);
		if (silo_monotonic_us() - r0 < 3 * ROUND_MS * 1000)
			break;
	}
	ereport(NOTICE,
			(errmsg("silo: the rows of shard %d are summed up to the tail", shard)));

	/* a round every ROUND_MS; the pause's end looked for every POLL_MS */
	loop_cxt = AllocSetContextCreate(CurrentMemoryContext, "silo tail loop", ALLOCSET_SMALL_SIZES);
	for (;;)
	{
		MemoryContext old = MemoryContextSwitchTo(loop_cxt);
		bool		last = tail_finish_lsn(shard, move, finish_state) != InvalidXLogRecPtr;

		MemoryContextSwitchTo(old);
		MemoryContextReset(loop_cxt);

		if (last || silo_monotonic_us() - round_us >= ROUND_MS * 1000)
		{
			tail_round(&t, slot, pub, &snapshot);
			round_us = silo_monotonic_us();
		}
		if (last)
			break;
		if (silo_monotonic_us() - start > (uint64) limit_ms * 1000)
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("the pause of shard %d did not end within %d ms", shard, limit_ms)));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, POLL_MS,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}

	/* the same text as silo.shard_setsums */
	initStringInfo(&out);
	for (i = 0; i < t.ntables; i++)
	{
		char		hex[SILO_SETSUM_HEX_LEN + 1];

		silo_setsum_to_hex(&t.tables[i].sum, hex);
		appendStringInfo(&out, "%s%s:%lld:%s", i ? ";" : "", t.tables[i].relname,
						 (long long) t.tables[i].count, hex);
	}
	UnregisterSnapshot(snapshot);
	tail_spi(psprintf("SELECT pg_catalog.pg_drop_replication_slot(%s)", quote_literal_cstr(slot)),
			 SPI_OK_SELECT);
	/* the result outlives SPI */
	{
		char	   *result = SPI_palloc(out.len + 1);

		memcpy(result, out.data, out.len + 1);
		SPI_finish();
		return result;
	}
}
