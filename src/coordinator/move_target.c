/*-------------------------------------------------------------------------
 *
 * move_target.c
 *	  The target's side of a shard's move (moves.c has the phases): wipe
 *	  its rows of the shard, subscribe to the source's publication, wait
 *	  for the copy, compare setsums once the source has drained, acquire
 *	  the shard from the verified copy and catch node-local state up; or,
 *	  when the move gives up, drop the subscription and the copy.
 *
 * Subscriptions are named silo_move_<shard>, their slots on the source
 * silo_move_<shard>_<move id>.  A subscription is always dropped without
 * touching the source's slot (disabled, slot_name NONE, dropped: this
 * needs no connection to the source, and can go in the transaction that
 * records the shard as 'owned'); the source drops its slots when it cleans
 * up, before it deletes its copy.  The subscription commits synchronously
 * (synchronous_commit = on), so that it confirms a flushed position as
 * soon as it has applied it: the source's pause waits for that.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_coordinator.h"

#include <time.h>

#include "utils/builtins.h"
#include "utils/memutils.h"

/*
 * tgt_unsubscribe_sql: drop the shard's subscription, if any, leaving its
 * slot to the source, and the publication its tail decodes.
 */
static char *
tgt_unsubscribe_sql(int shard)
{
	return psprintf("DO $$BEGIN IF EXISTS (SELECT 1 FROM pg_catalog.pg_subscription"
					" WHERE subname = 'silo_move_%d') THEN"
					" ALTER SUBSCRIPTION silo_move_%d DISABLE;"
					" ALTER SUBSCRIPTION silo_move_%d SET (slot_name = NONE);"
					" DROP SUBSCRIPTION silo_move_%d; END IF;"
					" DROP PUBLICATION IF EXISTS silo_tail_%d; END$$",
					shard, shard, shard, shard, shard);
}

/*
 * tgt_abort: give the move up (any phase before released).
 */
static void
tgt_abort(CoordState *cs, int shard, const char *why)
{
	coord_tail_stop(cs, shard);
	(void) coord_move_txn(cs, shard, MOVE_ABORTED, why, NULL, 0, NULL, 0, NULL);
}

/*
 * tgt_forget: drop the subscription and wipe the copy; true once done
 * (no state of the shard left here).
 */
static bool
tgt_forget(CoordState *cs, int shard)
{
	CoordMoveRun *run = &cs->runs[shard];
	bool		ok;
	char	   *value;
	char		lo[32];
	char		hi[32];

	if (cs->local[shard].state == LOCAL_NONE && run->step >= 98)
		return true;
	if (coord_sql_take(cs, shard, SQL_TGT_UNSUBSCRIBE, &ok, &value))
	{
		if (ok)
			run->step = 97;
		return false;
	}
	if (coord_sql_take(cs, shard, SQL_WIPE, &ok, &value))
	{
		if (ok)
		{
			cs->local[shard].state = LOCAL_NONE;
			run->step = 98;
			return true;
		}
		return false;
	}
	if (coord_sql_pending(cs, shard))
		return false;
	if (run->step != 97)
		(void) coord_sql_send(cs, shard, SQL_TGT_UNSUBSCRIBE, tgt_unsubscribe_sql(shard));
	else
	{
		coord_move_bounds(cs, shard, lo, hi);
		(void) coord_sql_send(cs, shard, SQL_WIPE,
							  psprintf("SELECT silo.shard_wipe(%d, %s, %s)", shard, lo, hi));
	}
	return false;
}

/*
 * tgt_iso_ms: an ISO 8601 UTC time of coord_now_iso as milliseconds since
 * the epoch (0 when it is not one).  The pause is measured across two
 * nodes' wall clocks: as exact as their clocks agree.
 */
static int64
tgt_iso_ms(const char *iso)
{
	struct tm	tm;
	int			ms = 0;

	memset(&tm, 0, sizeof(tm));
	if (sscanf(iso, "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
			   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7)
		return 0;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (int64) timegm(&tm) * 1000 + ms;
}

/*
 * tgt_finish: the shard is this node's: catch node-local state up with the
 * rows that arrived (silo.move_target_acquired) and serve.
 */
static void
tgt_finish(CoordState *cs, int shard)
{
	bool		ok;
	char	   *value;
	char		lo[32];
	char		hi[32];

	if (coord_sql_take(cs, shard, SQL_TGT_ACQUIRED, &ok, &value))
	{
		if (ok)
		{
			CoordMove  *m = &cs->moves[shard];

			cs->local[shard].state = LOCAL_OWNED;
			cs->local[shard].move_id = 0;
			cs->runs[shard].backoff_ms = 5000;
			cs->dirty = true;
			coord_publish(cs);
			if (m->present && m->paused_at[0])
			{
				char		now[40];

				coord_now_iso(now, sizeof(now));
				ereport(LOG,
						(errmsg("silo coordinator: shard %d: served here from %s after a pause of %lld ms (paused on node \"%s\" from %s)",
								shard, now, (long long) (tgt_iso_ms(now) - tgt_iso_ms(m->paused_at)),
								m->source, m->paused_at)));
			}
		}
		return;
	}
	if (coord_sql_pending(cs, shard))
		return;
	coord_move_bounds(cs, shard, lo, hi);
	/* the subscription goes in the same transaction; the source drops its slot */
	(void) coord_sql_send(cs, shard, SQL_TGT_ACQUIRED,
						  psprintf("%s; SELECT silo.move_target_acquired(%d, %s, %s)",
								   tgt_unsubscribe_sql(shard), shard, lo, hi));
}

/*
 * tgt_acquire: phase released: put this node's owner key (the source
 * deleted its own) and move the record to acquired, in one txn that also
 * requires this node's membership.
 */
static void
tgt_acquire(CoordState *cs, int shard)
{
	if (coord_move_claim_owner(cs, shard, MOVE_ACQUIRED, NULL))
		tgt_finish(cs, shard);
}

/*
 * tgt_subscribe: phase published: drop a leftover subscription, wipe the
 * shard's rows here ('receiving'), subscribe; then phase copying.
 */
static void
tgt_subscribe(CoordState *cs, int shard)
{
	CoordMove  *m = &cs->moves[shard];
	CoordMoveRun *run = &cs->runs[shard];
	bool		ok;
	char	   *value;
	char		lo[32];
	char		hi[32];

	if (coord_sql_pending(cs, shard) && !cs->sql.done)
		return;
	if (coord_sql_take(cs, shard, SQL_TGT_UNSUBSCRIBE, &ok, &value))
	{
		if (!ok)
			return;
		coord_move_bounds(cs, shard, lo, hi);
		(void) coord_sql_send(cs, shard, SQL_TGT_PREPARE,
							  psprintf("SELECT silo.move_target_prepare(%d, %lld, %s, %s, %s)",
									   shard, (long long) m->create_revision,
									   quote_literal_cstr(m->source), lo, hi));
		return;
	}
	if (coord_sql_take(cs, shard, SQL_TGT_PREPARE, &ok, &value))
	{
		if (!ok)
		{
			tgt_abort(cs, shard, "could not wipe the shard's rows here");
			return;
		}
		cs->local[shard].state = LOCAL_RECEIVING;
		cs->local[shard].move_id = m->create_revision;
		cs->dirty = true;
		(void) coord_sql_send(cs, shard, SQL_TGT_SUBSCRIBE,
							  psprintf("CREATE SUBSCRIPTION silo_move_%d CONNECTION %s PUBLICATION silo_move_%d"
									   " WITH (slot_name = 'silo_move_%d_%lld', create_slot = true,"
									   " copy_data = true, enabled = true, synchronous_commit = 'on')",
									   shard, quote_literal_cstr(m->source_conninfo), shard, shard,
									   (long long) m->create_revision));
		return;
	}
	if (coord_sql_take(cs, shard, SQL_TGT_SUBSCRIBE, &ok, &value))
	{
		if (!ok)
			tgt_abort(cs, shard, value ? value : "could not subscribe");
		else
			run->step = 1;
		return;
	}
	if (run->step == 1)
	{
		(void) coord_move_txn(cs, shard, MOVE_COPYING, NULL, NULL, 0, NULL, 0, NULL);
		return;
	}
	(void) coord_sql_send(cs, shard, SQL_TGT_UNSUBSCRIBE, tgt_unsubscribe_sql(shard));
}

/*
 * tgt_tail_begin: phase synced: publish the rows being received for the
 * tail to decode, and start the tail (move_tail.c), once per move.
 */
static void
tgt_tail_begin(CoordState *cs, int shard)
{
	CoordMove  *m = &cs->moves[shard];
	CoordMoveRun *run = &cs->runs[shard];
	bool		ok;
	char	   *value;
	char		lo[32];
	char		hi[32];

	if (run->tail_move_id == m->create_revision)
	{
		coord_tail_poll(cs, shard);
		return;
	}
	if (coord_sql_take(cs, shard, SQL_TGT_TAIL_PUBLISH, &ok, &value))
	{
		if (ok)
			coord_tail_start(cs, shard, psprintf("silo_tail_%d", shard), "receiving");
		else
			coord_tail_fail(cs, shard, value ? value : "the tail's publication failed");
		return;
	}
	if (coord_sql_pending(cs, shard))
		return;
	coord_move_bounds(cs, shard, lo, hi);
	(void) coord_sql_send(cs, shard, SQL_TGT_TAIL_PUBLISH,
						  psprintf("SELECT silo.shard_publish('silo_tail_%d', %s, %s)", shard, lo, hi));
}

/*
 * tgt_tail_sum: phase drained, with a tail running for this move: record
 * this node's WAL position (every change of the shard has been applied
 * before it: the source's slot confirmed its final LSN), which ends the
 * tail, and take its setsums.  true when there is no tail to wait for
 * (any more): the copy is then summed whole.
 */
static bool
tgt_tail_sum(CoordState *cs, int shard)
{
	CoordMove  *m = &cs->moves[shard];
	CoordMoveRun *run = &cs->runs[shard];
	bool		ok;
	char	   *value;

	coord_tail_poll(cs, shard);
	if (run->tail_move_id != m->create_revision ||
		(run->tail_state != TAIL_SUMMING && run->tail_state != TAIL_READY &&
		 run->tail_state != TAIL_DONE))
		return true;
	if (!run->tail_lsn_sent)
	{
		if (coord_sql_take(cs, shard, SQL_TGT_TAIL_LSN, &ok, &value))
		{
			if (ok)
				run->tail_lsn_sent = true;
			else
				coord_tail_stop(cs, shard);
			return !ok;
		}
		if (!coord_sql_pending(cs, shard))
			(void) coord_sql_send(cs, shard, SQL_TGT_TAIL_LSN,
								  psprintf("SELECT silo.shard_state_set(%d, 'receiving', %lld, %s,"
										   " pg_catalog.pg_current_wal_insert_lsn())",
										   shard, (long long) m->create_revision,
										   quote_literal_cstr(m->source)));
		return false;
	}
	if (run->tail_state != TAIL_DONE)
		return false;
	run->setsums = MemoryContextStrdup(cs->cxt, run->tail_result);
	ereport(LOG, (errmsg("silo coordinator: shard %d: summed the copy with its tail", shard)));
	coord_tail_stop(cs, shard);
	return true;
}

/*
 * tgt_verify: phase drained: the source paused and its slot confirmed
 * its final LSN, so every change is here.  Sum the copy (while the
 * source sums its rows); equal setsums: 'received', phase verified.  (The subscription is dropped with the
 * acquisition, outside the pause: nothing arrives for the paused shard.)
 */
static void
tgt_verify(CoordState *cs, int shard)
{
	CoordMove  *m = &cs->moves[shard];
	CoordLocal *l = &cs->local[shard];
	CoordMoveRun *run = &cs->runs[shard];
	bool		ok;
	char	   *value;
	char		lo[32];
	char		hi[32];

	if (l->state == LOCAL_RECEIVED && l->move_id == m->create_revision)
	{
		(void) coord_move_txn(cs, shard, MOVE_VERIFIED, NULL, NULL, 0, NULL, 0, NULL);
		return;
	}
	if (coord_sql_take(cs, shard, SQL_TGT_RECEIVED, &ok, &value))
	{
		if (ok)
		{
			l->state = LOCAL_RECEIVED;
			l->move_id = m->create_revision;
		}
		return;
	}
	if (run->setsums == NULL && !tgt_tail_sum(cs, shard))
		return;
	if (coord_sql_take(cs, shard, SQL_TGT_SETSUMS, &ok, &value))
	{
		if (!ok || value == NULL)
		{
			tgt_abort(cs, shard, "could not sum the copy");
			return;
		}
		run->setsums = MemoryContextStrdup(cs->cxt, value);
		ereport(LOG,
				(errmsg("silo coordinator: shard %d: summed the whole copy", shard)));
	}
	if (coord_sql_pending(cs, shard))
		return;
	if (run->setsums == NULL)
	{
		coord_move_bounds(cs, shard, lo, hi);
		(void) coord_sql_send(cs, shard, SQL_TGT_SETSUMS,
							  psprintf("SELECT silo.shard_setsums(%s, %s)", lo, hi));
		return;
	}
	/* the source's come into the record once it has summed */
	if (m->setsums == NULL)
		return;
	if (strcmp(run->setsums, m->setsums) != 0)
	{
		ereport(LOG,
				(errmsg("silo coordinator: shard %d: the copy's setsums differ from the source's",
						shard),
				 errdetail("Source: %s; here: %s.", m->setsums, run->setsums)));
		tgt_abort(cs, shard, "the setsums differ");
		return;
	}
	ereport(LOG,
			(errmsg("silo coordinator: shard %d: the copy's setsums agree with the source's", shard),
			 errdetail("%s", run->setsums)));
	/* the subscription stays until the acquisition: nothing more arrives */
	(void) coord_sql_send(cs, shard, SQL_TGT_RECEIVED,
						  psprintf("SELECT silo.shard_state_set(%d, 'received', %lld, %s, NULL)",
								   shard, (long long) m->create_revision,
								   quote_literal_cstr(m->source)));
}

/*
 * tgt_progress: phase copying: the subscription's tables, polled; every
 * one ready: the tail's sum of the copy (so that the source pauses only
 * once both sides have summed), then phase synced.
 */
static void
tgt_progress(CoordState *cs, int shard)
{
	CoordMove  *m = &cs->moves[shard];
	CoordMoveRun *run = &cs->runs[shard];
	bool		ok;
	char	   *value;

	if (run->step == 2)
	{
		tgt_tail_begin(cs, shard);
		if (run->tail_move_id == m->create_revision && run->tail_state != TAIL_SUMMING)
			(void) coord_move_txn(cs, shard, MOVE_SYNCED, NULL, NULL, 0, NULL, 0, NULL);
		return;
	}
	if (coord_sql_take(cs, shard, SQL_TGT_PROGRESS, &ok, &value))
	{
		if (!ok || value == NULL)
			return;
		if (strcmp(value, "ready") == 0)
			run->step = 2;
		else if (strcmp(value, "none") == 0)
			tgt_abort(cs, shard, "the subscription is gone");
		else if (strncmp(value, "errors:", 7) == 0)
			tgt_abort(cs, shard, psprintf("the subscription failed repeatedly (%s)", value));
		return;
	}
	if (coord_sql_pending(cs, shard) || silo_monotonic_us() < run->next_poll_us)
		return;
	run->next_poll_us = silo_monotonic_us() + 100 * 1000;
	(void) coord_sql_send(cs, shard, SQL_TGT_PROGRESS,
						  psprintf("SELECT silo.move_target_progress(%d)", shard));
}

/*
 * coord_move_target: this node's side of shard's move as its target, or,
 * with no record naming it, the end of its state of a copy: a verified
 * copy of a shard it owns is finished, any other goes.
 */
void
coord_move_target(CoordState *cs, int shard)
{
	CoordMove  *m = &cs->moves[shard];
	CoordOwner *o = &cs->owners[shard];
	CoordMoveRun *run = &cs->runs[shard];

	if (!m->present || m->phase == MOVE_NONE || strcmp(m->target, silo_node_id) != 0)
	{
		if (run->tail_state != TAIL_NONE && run->tail_move_id != 0 &&
			(!m->present || strcmp(m->source, silo_node_id) != 0))
			coord_tail_stop(cs, shard);
		if (cs->local[shard].state == LOCAL_RECEIVED && coord_owner_is_me(o))
			tgt_finish(cs, shard);
		else
		{
			if (run->step >= 98)
				run->step = 0;
			(void) tgt_forget(cs, shard);
		}
		return;
	}
	if (run->move_id != m->create_revision)
	{
		run->move_id = m->create_revision;
		run->step = 0;
		run->next_poll_us = 0;
		run->peer_gone_us = 0;
		if (run->setsums)
			pfree(run->setsums);
		run->setsums = NULL;
		coord_tail_stop(cs, shard);
	}
	if (coord_move_held(cs, shard, m->phase))
		return;
	if (m->phase < MOVE_RELEASED && !(o->present && strcmp(o->node_id, m->source) == 0))
	{
		tgt_abort(cs, shard, "the source no longer owns the shard");
		return;
	}
	/* before the release the target may give up: a source gone too long */
	if (m->phase < MOVE_RELEASED)
	{
		if (coord_view_member(cs, m->source) != NULL)
			run->peer_gone_us = 0;
		else if (run->peer_gone_us == 0)
			run->peer_gone_us = silo_monotonic_us();
		else if (silo_monotonic_us() - run->peer_gone_us > 4 * (uint64) cs->ttl_s * 1000000)
		{
			tgt_abort(cs, shard, "the source has not been a member for four lease TTLs");
			return;
		}
	}
	switch (m->phase)
	{
		case MOVE_NONE:
		case MOVE_REQUESTED:
		case MOVE_VERIFIED:
			break;
		case MOVE_SYNCED:
			coord_tail_poll(cs, shard);
			break;
		case MOVE_PUBLISHED:
			tgt_subscribe(cs, shard);
			break;
		case MOVE_COPYING:
			tgt_progress(cs, shard);
			break;
		case MOVE_DRAINED:
			tgt_verify(cs, shard);
			break;
		case MOVE_RELEASED:
			if (cs->local[shard].state == LOCAL_RECEIVED &&
				cs->local[shard].move_id == m->create_revision)
				tgt_acquire(cs, shard);
			break;
		case MOVE_ACQUIRED:
			if (cs->local[shard].state != LOCAL_OWNED && coord_owner_is_me(o))
			{
				tgt_finish(cs, shard);
				break;
			}
			/* the source deletes the record after its copy; unless it is gone */
			if (coord_view_member(cs, m->source) != NULL)
				run->peer_gone_us = 0;
			else if (run->peer_gone_us == 0)
				run->peer_gone_us = silo_monotonic_us();
			else if (silo_monotonic_us() - run->peer_gone_us > 2 * (uint64) cs->ttl_s * 1000000)
				(void) coord_move_txn(cs, shard, MOVE_NONE, NULL, NULL, 0, NULL, 0, NULL);
			break;
		case MOVE_ABORTED:
			if (!tgt_forget(cs, shard))
				break;
			if (coord_move_txn(cs, shard, MOVE_NONE, NULL, NULL, 0, NULL, 0, NULL))
			{
				run->not_before_us = silo_monotonic_us() + (uint64) run->backoff_ms * 1000;
				run->backoff_ms = Min(run->backoff_ms * 2, 60000);
			}
			break;
	}
}
