/*-------------------------------------------------------------------------
 *
 * move_source.c
 *	  The source's side of a shard's move (moves.c has the phases): publish
 *	  the shard's rows, pause it once the target has caught up, drain it,
 *	  sum it, release it, and delete its copy once the target owns it; or
 *	  undo all that when the move gives up.
 *
 * The pause, step by step (phase synced):
 *	 0. the slot's lag under PAUSE_LAG_BYTES: publish the shard as PAUSED
 *		(new calls get SL021) and send silo.shard_drain, which waits for
 *		the calls that had passed the check (bounded: SL022 gives up);
 *	 1. the drain's LSN, recorded with state 'paused' (a restart keeps the
 *		shard paused);
 *	 2. the target's slot has confirmed the LSN: every change is there;
 *		phase drained, with the LSN;
 *	 3. (phase drained) the setsums of the shard's rows, table by table,
 *		into the record, while the target sums its copy.
 * The shard stays paused until it is released or the move gives up; past
 * silo.move_pause_limit_ms the source gives up by itself.
 *
 * The source also gives up, in any phase before released, when its target
 * has not been a member for TARGET_GONE_TTLS lease TTLs (else a dead
 * target would keep the publication and the slot, and the WAL the slot
 * holds back, forever), and in phase synced when the slot's lag has not
 * come under PAUSE_LAG_BYTES within CATCH_UP_LIMIT_MS.  Giving up is
 * retried on every loop until the record says aborted (etcd may refuse
 * or not answer): nothing else happens meanwhile.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_coordinator.h"

#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

/* the slot's lag under which the source pauses (bytes of WAL) */
#define PAUSE_LAG_BYTES		(1024 * 1024)
/* how long the source waits in phase synced for that lag */
#define CATCH_UP_LIMIT_MS	(5 * 60 * 1000)
/* the source gives up once its target has not been a member this long */
#define TARGET_GONE_TTLS	4
/* how often the source sweeps replication slots no move needs */
#define SWEEP_INTERVAL_MS	10000

/*
 * src_slot: the slot of the move (the target creates it by subscribing).
 */
static char *
src_slot(int shard, int64 move_id)
{
	return psprintf("silo_move_%d_%lld", shard, (long long) move_id);
}

/*
 * src_unpause: serve the shard again (its state no longer says paused).
 */
static void
src_unpause(CoordState *cs, int shard)
{
	CoordMoveRun *run = &cs->runs[shard];

	if (run->paused)
	{
		run->paused = false;
		cs->dirty = true;
	}
	run->paused_at_us = 0;
}

/*
 * src_abort: give the move up (any phase before released): from now on
 * coord_move_source only retries the record's abort, until it says
 * aborted.  A shard not recorded as paused is served again at once (the
 * record is not in drained or verified: see coord_move_publish_state).
 */
static void
src_abort(CoordState *cs, int shard, const char *why)
{
	CoordMoveRun *run = &cs->runs[shard];

	if (!run->aborting)
	{
		run->aborting = true;
		strlcpy(run->abort_why, why, sizeof(run->abort_why));
	}
	coord_tail_stop(cs, shard);
	if (!cs->local_loaded || cs->local[shard].state != LOCAL_PAUSED)
		src_unpause(cs, shard);
	if (coord_move_txn(cs, shard, MOVE_ABORTED, run->abort_why, NULL, 0, NULL, 0, NULL))
		run->aborting = false;
}

/*
 * src_cleanup: drop the publication and the slots; keep_rows: the shard
 * is this node's again, else its rows go.  true once done (state stored).
 */
static bool
src_cleanup(CoordState *cs, int shard, bool keep_rows)
{
	CoordMoveRun *run = &cs->runs[shard];
	bool		ok;
	char	   *value;
	char		lo[32];
	char		hi[32];

	if (coord_sql_take(cs, shard, SQL_SRC_CLEANUP, &ok, &value))
	{
		if (ok && value && strcmp(value, "retry") != 0)
		{
			cs->local[shard].state = coord_local_state_of(value);
			cs->local[shard].move_id = 0;
			src_unpause(cs, shard);
			cs->dirty = true;
			return true;
		}
		run->next_poll_us = silo_monotonic_us() + 200 * 1000;
		return false;
	}
	if (coord_sql_pending(cs, shard) || silo_monotonic_us() < run->next_poll_us)
		return false;
	coord_move_bounds(cs, shard, lo, hi);
	(void) coord_sql_send(cs, shard, SQL_SRC_CLEANUP,
						  psprintf("SELECT silo.move_source_cleanup(%d, %s, %s, %s)", shard, lo, hi,
								   keep_rows ? "true" : "false"));
	return false;
}

/*
 * src_pause: phase synced (the steps of the header comment).
 */
static void
src_pause(CoordState *cs, int shard)
{
	CoordMove  *m = &cs->moves[shard];
	CoordMoveRun *run = &cs->runs[shard];
	CoordLocal *l = &cs->local[shard];
	char	   *slot = src_slot(shard, m->create_revision);
	uint64		now = silo_monotonic_us();
	bool		ok;
	char	   *value;

	if (run->paused_at_us != 0 && now - run->paused_at_us > (uint64) silo_move_pause_limit_ms * 1000)
	{
		src_abort(cs, shard, psprintf("paused for more than %d ms", silo_move_pause_limit_ms));
		return;
	}
	switch (run->step)
	{
		case 0:
			/* paused before a restart: the pause's bound runs from now */
			if (l->state == LOCAL_PAUSED && run->paused_at_us == 0)
				run->paused_at_us = now;
			if (run->synced_at_us == 0)
				run->synced_at_us = now;
			else if (l->state != LOCAL_PAUSED &&
					 now - run->synced_at_us > (uint64) CATCH_UP_LIMIT_MS * 1000)
			{
				src_abort(cs, shard, psprintf("the target did not catch up within %d s",
											  CATCH_UP_LIMIT_MS / 1000));
				return;
			}
			/* the rows summed before the pause, so that it sums only the tail */
			if (l->state != LOCAL_PAUSED)
			{
				coord_tail_start(cs, shard, psprintf("silo_move_%d", shard), "paused");
				coord_tail_poll(cs, shard);
				if (run->tail_state == TAIL_SUMMING)
				{
					run->synced_at_us = now;	/* not the target's catch-up */
					return;
				}
			}
			if (coord_sql_take(cs, shard, SQL_SRC_LAG, &ok, &value) && ok && value &&
				(strtoll(value, NULL, 10) < PAUSE_LAG_BYTES || l->state == LOCAL_PAUSED))
			{
				run->paused = true;
				run->paused_at_us = now;
				coord_now_iso(run->paused_at, sizeof(run->paused_at));
				coord_publish(cs);
				if (coord_sql_send(cs, shard, SQL_SRC_DRAIN,
								   psprintf("SELECT silo.shard_drain(%d, %d)", shard,
											silo_move_drain_timeout_ms)))
					run->step = 1;
				return;
			}
			if (!coord_sql_pending(cs, shard) && now >= run->next_poll_us)
			{
				run->next_poll_us = now + 50 * 1000;
				(void) coord_sql_send(cs, shard, SQL_SRC_LAG,
									  psprintf("SELECT pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_insert_lsn(), confirmed_flush_lsn)"
											   " FROM pg_catalog.pg_replication_slots WHERE slot_name = %s",
											   quote_literal_cstr(slot)));
			}
			return;
		case 1:
			if (!coord_sql_take(cs, shard, SQL_SRC_DRAIN, &ok, &value))
				return;
			if (!ok || value == NULL)
			{
				src_abort(cs, shard, value ? value : "the drain failed");
				return;
			}
			strlcpy(run->lsn, value, sizeof(run->lsn));
			if (coord_sql_send(cs, shard, SQL_SRC_PAUSED,
							   psprintf("SELECT silo.shard_state_set(%d, 'paused', %lld, %s, %s)",
										shard, (long long) m->create_revision,
										quote_literal_cstr(m->target), quote_literal_cstr(run->lsn))))
				run->step = 2;
			return;
		case 2:
			if (!coord_sql_take(cs, shard, SQL_SRC_PAUSED, &ok, &value))
				return;
			if (!ok)
			{
				src_abort(cs, shard, "could not record the pause");
				return;
			}
			l->state = LOCAL_PAUSED;
			l->move_id = m->create_revision;
			run->step = 3;
			run->next_poll_us = 0;
			/* FALLTHROUGH */
		case 3:
			if (coord_sql_take(cs, shard, SQL_SRC_FLUSHED, &ok, &value) && ok && value &&
				strcmp(value, "t") == 0)
			{
				/* the setsums follow in phase drained: the target sums meanwhile */
				strlcpy(m->lsn, run->lsn, sizeof(m->lsn));
				strlcpy(m->paused_at, run->paused_at, sizeof(m->paused_at));
				if (m->setsums)
					pfree(m->setsums);
				m->setsums = NULL;
				(void) coord_move_txn(cs, shard, MOVE_DRAINED, NULL, NULL, 0, NULL, 0, NULL);
				return;
			}
			if (!coord_sql_pending(cs, shard) && now >= run->next_poll_us)
			{
				run->next_poll_us = now + 5 * 1000;
				(void) coord_sql_send(cs, shard, SQL_SRC_FLUSHED,
									  psprintf("SELECT coalesce((SELECT confirmed_flush_lsn >= %s::pg_catalog.pg_lsn"
											   " FROM pg_catalog.pg_replication_slots WHERE slot_name = %s), false)",
											   quote_literal_cstr(run->lsn), quote_literal_cstr(slot)));
			}
			return;
	}
}

/*
 * src_summed: the source's setsums are known (by its tail or by a sum of
 * the whole shard): log how far into the pause, put them into the record.
 */
static void
src_summed(CoordState *cs, int shard, const char *setsums, const char *how)
{
	CoordMove  *m = &cs->moves[shard];
	CoordMoveRun *run = &cs->runs[shard];

	m->setsums = MemoryContextStrdup(cs->cxt, setsums);
	ereport(LOG,
			(errmsg("silo coordinator: shard %d: summed %s, %lld ms into the pause", shard, how,
					(long long) (run->paused_at_us ?
								 (silo_monotonic_us() - run->paused_at_us) / 1000 : 0))));
	(void) coord_move_txn(cs, shard, MOVE_DRAINED, NULL, NULL, 0, NULL, 0, NULL);
}

/*
 * src_sum: phase drained without the source's setsums yet: take them from
 * the tail (move_tail.c) or, without one, sum the shard's rows (frozen
 * since the pause); then into the record, which stays in phase drained.
 * The target sums its copy meanwhile.
 */
static void
src_sum(CoordState *cs, int shard)
{
	CoordMove  *m = &cs->moves[shard];
	CoordMoveRun *run = &cs->runs[shard];
	bool		ok;
	char	   *value;
	char		lo[32];
	char		hi[32];

	coord_tail_poll(cs, shard);
	if (run->tail_move_id == m->create_revision)
	{
		if (run->tail_state == TAIL_SUMMING || run->tail_state == TAIL_READY)
			return;
		if (run->tail_state == TAIL_DONE)
		{
			src_summed(cs, shard, run->tail_result, "the tail");
			coord_tail_stop(cs, shard);
			return;
		}
	}
	if (coord_sql_take(cs, shard, SQL_SRC_SETSUMS, &ok, &value))
	{
		if (!ok || value == NULL)
		{
			src_abort(cs, shard, "could not sum the shard's rows");
			return;
		}
		src_summed(cs, shard, value, "the whole shard");
		return;
	}
	if (coord_sql_pending(cs, shard))
		return;
	coord_move_bounds(cs, shard, lo, hi);
	(void) coord_sql_send(cs, shard, SQL_SRC_SETSUMS,
						  psprintf("SELECT silo.shard_setsums(%s, %s)", lo, hi));
}

/*
 * src_release: phase verified: delete the owner key fenced on this
 * node's token, and move the record to released, in one txn.
 */
static void
src_release(CoordState *cs, int shard)
{
	CoordOwner *o = &cs->owners[shard];
	EtcdCompare cmp = {0};
	EtcdOp		del = {0};
	char	   *key = psprintf("%s%d/owner", cs->shard_prefix, shard);

	if (cs->tokens[shard] == 0 || cs->tokens[shard] != o->mod_revision)
		return;					/* not re-stamped yet after a restart */
	cmp.key = etcd_cstr(key);
	cmp.target = ETCD_TARGET_MOD;
	cmp.result = ETCD_RESULT_EQUAL;
	cmp.number = cs->tokens[shard];
	del.type = ETCD_OP_DELETE;
	del.delete_range.key = etcd_cstr(key);
	if (coord_move_txn(cs, shard, MOVE_RELEASED, NULL, &cmp, 1, &del, 1, NULL))
	{
		EtcdKeyValue gone = {0};

		gone.key = key;
		gone.key_len = strlen(key);
		cs->tokens[shard] = 0;
		coord_view_apply_kv(cs, &gone, true);
		cs->dirty = true;
	}
}

/*
 * src_take_back: phase released, and the target has not been a member
 * for two lease TTLs: the shard is this node's again, from its own copy
 * (untouched since the pause): its owner key and the record's abort in
 * one txn, which fails if the target acquired meanwhile.
 */
static void
src_take_back(CoordState *cs, int shard)
{
	(void) coord_move_claim_owner(cs, shard, MOVE_ABORTED,
								  "the target left after the release; the source took the shard back");
}

/*
 * src_set_state: record state in silo.shard_state for this move (once).
 */
static bool
src_set_state(CoordState *cs, int shard, CoordLocalState state, const char *name)
{
	CoordMove  *m = &cs->moves[shard];
	CoordLocal *l = &cs->local[shard];
	bool		ok;
	char	   *value;

	if (l->state == state && l->move_id == m->create_revision)
		return true;
	if (coord_sql_take(cs, shard, SQL_SRC_RELEASED, &ok, &value) && ok)
	{
		l->state = state;
		l->move_id = m->create_revision;
		cs->dirty = true;
		return true;
	}
	if (!coord_sql_pending(cs, shard))
		(void) coord_sql_send(cs, shard, SQL_SRC_RELEASED,
							  psprintf("SELECT silo.shard_state_set(%d, %s, %lld, %s, NULL)", shard,
									   quote_literal_cstr(name), (long long) m->create_revision,
									   quote_literal_cstr(m->target)));
	return false;
}

/*
 * coord_move_source: this node's side of shard's move as its source, or,
 * with no record naming it, the end of its state of a move that is over.
 */
void
coord_move_source(CoordState *cs, int shard)
{
	CoordMove  *m = &cs->moves[shard];
	CoordLocal *l = &cs->local[shard];
	CoordOwner *o = &cs->owners[shard];
	CoordMoveRun *run = &cs->runs[shard];
	CoordMember *target;
	bool		ok;
	char	   *value;
	char		lo[32];
	char		hi[32];

	if (!m->present || m->phase == MOVE_NONE || strcmp(m->source, silo_node_id) != 0)
	{
		/* the move is over: a shard still this node's keeps its rows */
		if (run->tail_state != TAIL_NONE &&
			(!m->present || strcmp(m->target, silo_node_id) != 0))
			coord_tail_stop(cs, shard);
		(void) src_cleanup(cs, shard, l->state != LOCAL_RELEASED && coord_owner_is_me(o));
		return;
	}
	if (run->move_id != m->create_revision)
	{
		run->move_id = m->create_revision;
		run->step = 0;
		run->next_poll_us = 0;
		run->peer_gone_us = 0;
		run->synced_at_us = 0;
		run->aborting = false;
		coord_tail_stop(cs, shard);
	}
	if (coord_move_held(cs, shard, m->phase))
		return;
	if (m->phase >= MOVE_RELEASED)
		run->aborting = false;
	else if (run->aborting)
	{
		src_abort(cs, shard, run->abort_why);
		return;
	}
	if (m->phase < MOVE_RELEASED && !coord_owner_is_me(o))
	{
		src_abort(cs, shard, "the source no longer owns the shard");
		return;
	}
	/* before the release the source may give up: a target gone too long */
	if (m->phase < MOVE_RELEASED)
	{
		if (coord_view_member(cs, m->target) != NULL)
			run->peer_gone_us = 0;
		else if (run->peer_gone_us == 0)
			run->peer_gone_us = silo_monotonic_us();
		else if (silo_monotonic_us() - run->peer_gone_us >
				 TARGET_GONE_TTLS * (uint64) cs->ttl_s * 1000000)
		{
			src_abort(cs, shard, psprintf("the target has not been a member for %d lease TTLs",
										  TARGET_GONE_TTLS));
			return;
		}
	}
	switch (m->phase)
	{
		case MOVE_NONE:
			break;
		case MOVE_REQUESTED:
			if (l->state == LOCAL_SENDING && l->move_id == m->create_revision)
			{
				(void) coord_move_txn(cs, shard, MOVE_PUBLISHED, NULL, NULL, 0, NULL, 0, NULL);
				break;
			}
			if (coord_sql_take(cs, shard, SQL_SRC_PREPARE, &ok, &value))
			{
				if (!ok)
					src_abort(cs, shard, value ? value : "could not publish the shard");
				else
				{
					l->state = LOCAL_SENDING;
					l->move_id = m->create_revision;
					cs->dirty = true;
				}
				break;
			}
			coord_move_bounds(cs, shard, lo, hi);
			if (!coord_sql_pending(cs, shard))
				(void) coord_sql_send(cs, shard, SQL_SRC_PREPARE,
									  psprintf("SELECT silo.move_source_prepare(%d, %lld, %s, %s, %s)",
											   shard, (long long) m->create_revision,
											   quote_literal_cstr(m->target), lo, hi));
			break;
		case MOVE_PUBLISHED:
		case MOVE_COPYING:
			/* the rows summed while the target copies (move_tail.c) */
			if (l->state == LOCAL_SENDING)
			{
				coord_tail_start(cs, shard, psprintf("silo_move_%d", shard), "paused");
				coord_tail_poll(cs, shard);
			}
			break;
		case MOVE_SYNCED:
			src_pause(cs, shard);
			break;
		case MOVE_DRAINED:
			if (!run->paused)
			{
				run->paused = true;
				cs->dirty = true;
			}
			if (m->setsums == NULL)
				src_sum(cs, shard);
			if (run->paused_at_us == 0)
				run->paused_at_us = silo_monotonic_us();
			else if (silo_monotonic_us() - run->paused_at_us >
					 (uint64) silo_move_pause_limit_ms * 1000)
				src_abort(cs, shard, psprintf("the target did not verify within %d ms of the pause",
											  silo_move_pause_limit_ms));
			break;
		case MOVE_VERIFIED:
			src_release(cs, shard);
			break;
		case MOVE_RELEASED:
			if (!src_set_state(cs, shard, LOCAL_RELEASED, "released"))
				break;
			src_unpause(cs, shard);
			target = coord_view_member(cs, m->target);
			if (target != NULL)
				run->peer_gone_us = 0;
			else if (run->peer_gone_us == 0)
				run->peer_gone_us = silo_monotonic_us();
			else if (silo_monotonic_us() - run->peer_gone_us > 2 * (uint64) cs->ttl_s * 1000000)
				src_take_back(cs, shard);
			break;
		case MOVE_ACQUIRED:
			if (l->state != LOCAL_NONE && !src_cleanup(cs, shard, false))
				break;
			(void) coord_move_txn(cs, shard, MOVE_NONE, NULL, NULL, 0, NULL, 0, NULL);
			break;
		case MOVE_ABORTED:
			if (run->tail_state != TAIL_NONE)
				coord_tail_stop(cs, shard);
			if (run->step != 99)
			{
				if (!src_cleanup(cs, shard, coord_owner_is_me(o)))
					break;
				run->step = 99;
			}
			/* the target deletes the record; unless it is gone */
			if (coord_view_member(cs, m->target) == NULL)
				(void) coord_move_txn(cs, shard, MOVE_NONE, NULL, NULL, 0, NULL, 0, NULL);
			break;
	}
}

/*
 * coord_move_source_sweep: every SWEEP_INTERVAL_MS, drop the replication
 * slots of this node's database that no move needs (silo.move_source_sweep):
 * a silo_move_<S>_<M> slot that no move record names with this node as its
 * source (a subscription created after its move gave up, which its
 * subscriber dropped without its slot), and, while no record names this node
 * as a source at all, inactive table synchronization slots
 * (pg_<oid>_sync_<oid>_<id>) an aborted copy left behind.  Only with the
 * mirror of etcd current, every record readable, and the connection idle:
 * a move's own slot always has its record (this node published it first).
 */
void
coord_move_source_sweep(CoordState *cs)
{
	StringInfoData keep;
	bool		ok;
	bool		sync = true;
	char	   *value;
	int			s;
	uint64		now = silo_monotonic_us();

	if (coord_sql_take(cs, -1, SQL_SWEEP, &ok, &value))
	{
		if (ok && value != NULL && strcmp(value, "0") != 0)
			ereport(LOG,
					(errmsg("silo coordinator: dropped %s replication slots no move needs", value)));
		return;
	}
	if (!cs->synced || cs->sql.busy || cs->sql.done || now < cs->next_sweep_us)
		return;
	initStringInfo(&keep);
	appendStringInfoString(&keep, "ARRAY[''");
	for (s = 0; s < cs->nshards; s++)
	{
		CoordMove  *m = &cs->moves[s];

		if (!m->present)
			continue;
		if (m->phase == MOVE_NONE)
			return;				/* unreadable: whose it is, nobody knows */
		if (strcmp(m->source, silo_node_id) != 0)
			continue;
		sync = false;
		appendStringInfo(&keep, ", '%s'", src_slot(s, m->create_revision));
	}
	appendStringInfoString(&keep, "]::text[]");
	if (coord_sql_send(cs, -1, SQL_SWEEP,
					   psprintf("SELECT silo.move_source_sweep(%s, %s)", keep.data,
								sync ? "true" : "false")))
		cs->next_sweep_us = now + (uint64) SWEEP_INTERVAL_MS * 1000;
}
