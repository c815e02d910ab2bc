/*-------------------------------------------------------------------------
 *
 * moves.c
 *	  Moving a shard's rows with its ownership (docs/cluster.md, "Moving a
 *	  shard"): the move record in etcd, the txns that change its phase,
 *	  the target's request, what this node must do before a plain
 *	  acquisition, and what the views show of a move.
 *
 * When placement gives shard S to node B while a live member A owns it,
 * B puts a move record P/coord/moves/<S> (put-if-absent, while A's owner
 * key is unchanged and B's member key is B's).  The record's phase then
 * goes, each step one txn guarded on the record's mod revision:
 *
 *	  requested  -> published	A published S's rows (a publication)
 *	  published  -> copying		B wiped its rows of S and subscribed
 *	  copying	 -> synced		every table copied; B streams A's changes
 *	  synced	 -> drained		A paused S, waited for its transactions,
 *								B confirmed A's final LSN; A's setsums
 *	  drained	 -> verified	B's setsums agree; B dropped the subscription
 *	  verified	 -> released	A deleted its owner key (fenced), same txn
 *	  released	 -> acquired	B put its owner key (put-if-absent), same txn
 *	  acquired	 -> (deleted)	A deleted its copy of S, then the record
 *
 * and any phase before released -> aborted (the move gives up; each side
 * undoes its part, and the target, or the source when the target is gone,
 * deletes the record).  A source whose target died after released takes
 * the shard back (released -> aborted with A's owner key, one txn): its
 * copy is the shard's, untouched since the pause.
 *
 * Each node also keeps its side in silo.shard_state (moves_sql.c), in the
 * same transaction as the work it records, and each loop compares the two
 * and does what is missing: a crash at any point resumes or rolls back.
 * The source's side is move_source.c, the target's move_target.c.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_coordinator.h"

#include "utils/memutils.h"

static const char *const phase_names[] = {
	"", "requested", "published", "copying", "synced", "drained", "verified", "released",
	"acquired", "aborted"
};

/*
 * coord_move_phase_name / coord_move_phase_of: a phase's name, and back
 * (MOVE_NONE for an unknown name).
 */
const char *
coord_move_phase_name(CoordMovePhase phase)
{
	return phase_names[phase];
}

CoordMovePhase
coord_move_phase_of(const char *name)
{
	int			i;

	for (i = MOVE_REQUESTED; i <= MOVE_ABORTED; i++)
		if (name != NULL && strcmp(name, phase_names[i]) == 0)
			return (CoordMovePhase) i;
	return MOVE_NONE;
}

/*
 * coord_moves_init: the move records' mirror and this node's runs, empty.
 */
void
coord_moves_init(CoordState *cs)
{
	int			s;

	cs->move_prefix = MemoryContextStrdup(cs->cxt, psprintf("%smoves/", cs->prefix));
	cs->moves = MemoryContextAllocZero(cs->cxt, sizeof(CoordMove) * SILO_MAX_SHARDS);
	cs->runs = MemoryContextAllocZero(cs->cxt, sizeof(CoordMoveRun) * SILO_MAX_SHARDS);
	cs->local = MemoryContextAllocZero(cs->cxt, sizeof(CoordLocal) * SILO_MAX_SHARDS);
	for (s = 0; s < SILO_MAX_SHARDS; s++)
		cs->runs[s].backoff_ms = 5000;
	strlcpy(cs->repl_conninfo, silo_replication_conninfo && silo_replication_conninfo[0]
			? silo_replication_conninfo : cs->conninfo, sizeof(cs->repl_conninfo));
	cs->draining = silo_draining;
}

/*
 * coord_move_store: a move record read or watched (deleted: gone), into
 * the mirror.  An unreadable record is kept as present with phase
 * MOVE_NONE: nobody requests another move of the shard meanwhile.
 */
void
coord_move_store(CoordState *cs, int shard, const EtcdKeyValue *kv, bool deleted)
{
	CoordMove  *m = &cs->moves[shard];
	MemoryContext old;

	if (m->setsums)
		pfree(m->setsums);
	memset(m, 0, sizeof(*m));
	if (deleted)
		return;
	m->present = true;
	m->create_revision = kv->create_revision;
	m->mod_revision = kv->mod_revision;
	old = MemoryContextSwitchTo(cs->cxt);
	if (!coord_parse_move(kv->value, kv->value_len, m))
	{
		m->phase = MOVE_NONE;
		ereport(LOG,
				(errmsg("silo coordinator: the move record of shard %d holds no readable value",
						shard)));
	}
	if (m->setsums)
		m->setsums = pstrdup(m->setsums);
	MemoryContextSwitchTo(old);
}

/*
 * move_key: the record's key of shard (palloc'd).
 */
static char *
move_key(CoordState *cs, int shard)
{
	return psprintf("%s%d", cs->move_prefix, shard);
}

/*
 * coord_move_bounds: shard's hash range as SQL literals: lo, and hi or
 * NULL for the last shard (its range ends at 2^63).
 */
void
coord_move_bounds(CoordState *cs, int shard, char *lo, char *hi)
{
	const SiloShard *s = &cs->shards[shard];

	snprintf(lo, 32, "%lld", (long long) s->range_start);
	if (s->end_is_max)
		snprintf(hi, 32, "NULL");
	else
		snprintf(hi, 32, "%lld", (long long) s->range_end);
}

/*
 * move_apply: a successful txn's new record (or its deletion) into the
 * mirror, as the watch will show it.
 */
static void
move_apply(CoordState *cs, int shard, const CoordMove *m, int64 revision)
{
	EtcdKeyValue kv = {0};
	char	   *key = move_key(cs, shard);

	kv.key = key;
	kv.key_len = strlen(key);
	if (m == NULL)
	{
		coord_view_apply_kv(cs, &kv, true);
		return;
	}
	kv.value = coord_move_value(m, shard);
	kv.value_len = strlen(kv.value);
	kv.create_revision = m->create_revision ? m->create_revision : revision;
	kv.mod_revision = revision;
	coord_view_apply_kv(cs, &kv, false);
}

/*
 * move_refresh: a refused txn's reads (the record, the owner key) into
 * the mirror.
 */
static void
move_refresh(CoordState *cs, int shard, const EtcdTxnResult *res)
{
	size_t		i;

	for (i = 0; i < res->n_responses; i++)
	{
		const EtcdRangeResult *r = &res->responses[i].range;
		EtcdKeyValue gone = {0};
		char	   *key = i == 0 ? move_key(cs, shard)
			: psprintf("%s%d/owner", cs->shard_prefix, shard);

		if (r->n_kvs == 1)
			coord_view_apply_kv(cs, &r->kvs[0], false);
		else
		{
			gone.key = key;
			gone.key_len = strlen(key);
			coord_view_apply_kv(cs, &gone, true);
		}
	}
}

/*
 * coord_move_txn: move shard's record to phase (MOVE_NONE: delete it),
 * guarded on the record's mod revision and the extra compares, with the
 * extra ops in the same txn; why is kept as the record's reason.  On
 * success the mirror has the new record and *revision the txn's revision;
 * a refused txn refreshes the mirror from its reads; etcd's silence is
 * retried by the next loop (an indeterminate write is settled by a full
 * read).
 */
bool
coord_move_txn(CoordState *cs, int shard, CoordMovePhase phase, const char *why,
			   EtcdCompare *cmp, int ncmp, EtcdOp *ops, int nops, int64 *revision)
{
	CoordMove	m = cs->moves[shard];
	char	   *key = move_key(cs, shard);
	EtcdCompare *c = palloc0(sizeof(EtcdCompare) * (ncmp + 1));
	EtcdOp	   *succ = palloc0(sizeof(EtcdOp) * (nops + 1));
	EtcdOp		fail[2];
	EtcdTxnRequest req = {0};
	EtcdTxnResult res = {0};
	EtcdStatus	st;
	bool		ok;

	memset(fail, 0, sizeof(fail));
	c[0].key = etcd_cstr(key);
	c[0].target = ETCD_TARGET_MOD;
	c[0].result = ETCD_RESULT_EQUAL;
	c[0].number = m.mod_revision;
	if (ncmp > 0)
		memcpy(c + 1, cmp, sizeof(EtcdCompare) * ncmp);
	m.phase = phase;
	if (why != NULL)
		strlcpy(m.reason, why, sizeof(m.reason));
	if (phase == MOVE_NONE)
	{
		succ[0].type = ETCD_OP_DELETE;
		succ[0].delete_range.key = etcd_cstr(key);
	}
	else
	{
		succ[0].type = ETCD_OP_PUT;
		succ[0].put.key = etcd_cstr(key);
		succ[0].put.value = etcd_cstr(coord_move_value(&m, shard));
	}
	if (nops > 0)
		memcpy(succ + 1, ops, sizeof(EtcdOp) * nops);
	fail[0].type = ETCD_OP_RANGE;
	fail[0].range.key = etcd_cstr(key);
	fail[1].type = ETCD_OP_RANGE;
	fail[1].range.key = etcd_cstr(psprintf("%s%d/owner", cs->shard_prefix, shard));
	req.compare = c;
	req.n_compare = ncmp + 1;
	req.success = succ;
	req.n_success = nops + 1;
	req.failure = fail;
	req.n_failure = 2;
	st = etcd_txn(cs->client, &req, &res);
	if (!etcd_ok(st))
	{
		ereport(LOG,
				(errmsg("silo coordinator: shard %d: could not move its record to %s: %s: %s%s",
						shard, phase == MOVE_NONE ? "deleted" : coord_move_phase_name(phase),
						etcd_kind_name(st.kind), st.message,
						st.indeterminate ? " (it may have been applied)" : "")));
		if (st.indeterminate)
		{
			cs->synced = false;
			cs->next_sync_us = 0;
		}
		return false;
	}
	ok = res.succeeded;
	if (ok)
	{
		if (revision)
			*revision = res.header.revision;
		move_apply(cs, shard, phase == MOVE_NONE ? NULL : &m, res.header.revision);
		ereport(LOG,
				(errmsg("silo coordinator: shard %d: move %lld from \"%s\" to \"%s\" %s%s%s",
						shard, (long long) m.create_revision, m.source, m.target,
						phase == MOVE_NONE ? "done" : coord_move_phase_name(phase),
						why ? ": " : "", why ? why : "")));
	}
	else
		move_refresh(cs, shard, &res);
	etcd_txn_result_free(&res);
	return ok;
}

/*
 * coord_move_claim_owner: put this node's owner key of shard and move the
 * record to phase, in one txn that requires the key to be absent and this
 * node's membership lease to be alive (both ends of a move claim the shard
 * this way: the target at acquired, the source when it takes the shard
 * back); on success the view has the new key.  Returns whether it did.
 */
bool
coord_move_claim_owner(CoordState *cs, int shard, CoordMovePhase phase, const char *why)
{
	char	   *key = psprintf("%s%d/owner", cs->shard_prefix, shard);
	char		now[40];
	char	   *value;
	EtcdCompare cmp[2];
	EtcdOp		put = {0};
	EtcdKeyValue kv = {0};
	int64		rev = 0;

	memset(cmp, 0, sizeof(cmp));
	coord_now_iso(now, sizeof(now));
	value = coord_owner_value(cs, now);
	cmp[0].key = etcd_cstr(key);
	cmp[0].target = ETCD_TARGET_CREATE;
	cmp[0].result = ETCD_RESULT_EQUAL;
	cmp[0].number = 0;
	cmp[1].key = etcd_cstr(cs->member_key);
	cmp[1].target = ETCD_TARGET_LEASE;
	cmp[1].result = ETCD_RESULT_EQUAL;
	cmp[1].number = cs->lease_id;
	put.type = ETCD_OP_PUT;
	put.put.key = etcd_cstr(key);
	put.put.value = etcd_cstr(value);
	if (!coord_move_txn(cs, shard, phase, why, cmp, 2, &put, 1, &rev))
		return false;
	kv.key = key;
	kv.key_len = strlen(key);
	kv.value = value;
	kv.value_len = strlen(value);
	kv.create_revision = kv.mod_revision = rev;
	cs->tokens[shard] = rev;
	coord_view_apply_kv(cs, &kv, false);
	cs->dirty = true;
	return true;
}

/*
 * coord_move_request: the target's first step: placement gives shard to
 * this node while source, a live member, owns it.  One move in at a time
 * per silo.max_moves_in, none while this node drains, none during the
 * backoff after a move of the shard gave up.  Returns false when etcd did
 * not answer (the reconciliation stops).
 */
bool
coord_move_request(CoordState *cs, int shard, const CoordMember *source)
{
	CoordOwner *o = &cs->owners[shard];
	CoordMoveRun *run = &cs->runs[shard];
	CoordMove	m;
	char	   *key = move_key(cs, shard);
	EtcdCompare cmp[3];
	EtcdOp		put = {0};
	EtcdTxnRequest req = {0};
	EtcdTxnResult res = {0};
	EtcdStatus	st;
	int			active = 0;
	int			s;

	if (cs->moves[shard].present || cs->draining || !cs->local_loaded ||
		silo_max_moves_in <= 0 || silo_monotonic_us() < run->not_before_us)
		return true;
	for (s = 0; s < cs->nshards; s++)
		if (cs->moves[s].present && strcmp(cs->moves[s].target, silo_node_id) == 0)
			active++;
	if (active >= silo_max_moves_in)
		return true;

	memset(&m, 0, sizeof(m));
	memset(cmp, 0, sizeof(cmp));
	m.phase = MOVE_REQUESTED;
	strlcpy(m.source, o->node_id, sizeof(m.source));
	strlcpy(m.target, silo_node_id, sizeof(m.target));
	strlcpy(m.source_conninfo, source->repl_conninfo, sizeof(m.source_conninfo));
	coord_now_iso(m.created_at, sizeof(m.created_at));
	cmp[0].key = etcd_cstr(key);
	cmp[0].target = ETCD_TARGET_CREATE;
	cmp[0].result = ETCD_RESULT_EQUAL;
	cmp[0].number = 0;
	cmp[1].key = etcd_cstr(psprintf("%s%d/owner", cs->shard_prefix, shard));
	cmp[1].target = ETCD_TARGET_MOD;
	cmp[1].result = ETCD_RESULT_EQUAL;
	cmp[1].number = o->mod_revision;
	cmp[2].key = etcd_cstr(cs->member_key);
	cmp[2].target = ETCD_TARGET_LEASE;
	cmp[2].result = ETCD_RESULT_EQUAL;
	cmp[2].number = cs->lease_id;
	put.type = ETCD_OP_PUT;
	put.put.key = etcd_cstr(key);
	put.put.value = etcd_cstr(coord_move_value(&m, shard));
	req.compare = cmp;
	req.n_compare = 3;
	req.success = &put;
	req.n_success = 1;
	st = etcd_txn(cs->client, &req, &res);
	if (!etcd_ok(st))
	{
		if (st.indeterminate)
		{
			cs->synced = false;
			cs->next_sync_us = 0;
		}
		return false;
	}
	if (res.succeeded)
	{
		m.create_revision = res.header.revision;
		move_apply(cs, shard, &m, res.header.revision);
		ereport(LOG,
				(errmsg("silo coordinator: shard %d: move %lld requested from \"%s\" to \"%s\"",
						shard, (long long) res.header.revision, m.source, m.target)));
	}
	else
	{
		/* someone else's record, or the owner changed: read it all again */
		cs->synced = false;
		cs->next_sync_us = 0;
	}
	etcd_txn_result_free(&res);
	return true;
}

/*
 * coord_move_held: the test hook silo.test_move_pause_at: this node does
 * nothing about a move in that phase (logged once per move).
 */
bool
coord_move_held(CoordState *cs, int shard, CoordMovePhase phase)
{
	CoordMoveRun *run = &cs->runs[shard];

	if (silo_test_move_pause_at == NULL || silo_test_move_pause_at[0] == '\0' ||
		strcmp(silo_test_move_pause_at, coord_move_phase_name(phase)) != 0)
	{
		run->hold_logged = false;
		return false;
	}
	if (!run->hold_logged)
		ereport(LOG,
				(errmsg("silo coordinator: shard %d: move held at phase %s (silo.test_move_pause_at)",
						shard, coord_move_phase_name(phase))));
	run->hold_logged = true;
	return true;
}

/*
 * move_orphan: this node's state of a shard that no move record names
 * it in: the end of a move whose record is gone, or rows that are no
 * longer the shard's.  Undo or finish what the state says.
 */
static void
move_orphan(CoordState *cs, int shard)
{
	CoordLocal *l = &cs->local[shard];
	CoordOwner *o = &cs->owners[shard];
	CoordMove  *m = &cs->moves[shard];

	switch (l->state)
	{
		case LOCAL_NONE:
			break;
		case LOCAL_OWNED:
			/* another node owns it now: what is here is not the shard's */
			if (o->present && o->node_id[0] && !coord_owner_is_me(o) && !m->present)
				l->state = LOCAL_STALE;
			else if (l->move_id == -1)
			{
				bool		ok;
				char	   *value;

				/* a plain acquisition, to be recorded */
				if (coord_sql_take(cs, shard, SQL_OWNED, &ok, &value) && ok)
					l->move_id = 0;
				else if (!coord_sql_pending(cs, shard))
					(void) coord_sql_send(cs, shard, SQL_OWNED,
										  psprintf("SELECT silo.shard_state_set(%d, 'owned', 0, '', NULL)",
												   shard));
			}
			break;
		case LOCAL_SENDING:
		case LOCAL_PAUSED:
		case LOCAL_RELEASED:
			coord_move_source(cs, shard);
			break;
		case LOCAL_RECEIVING:
		case LOCAL_RECEIVED:
		case LOCAL_STALE:
			coord_move_target(cs, shard);
			break;
	}
}

/*
 * coord_moves_step: one round of every move this node takes part in,
 * and of its own state of shards no move names it in.  Runs after the
 * reconciliation; needs the mirror of silo.shard_state.
 */
void
coord_moves_step(CoordState *cs)
{
	int			s;

	coord_sql_poll(cs);
	if (!cs->map_known)
		return;
	if (!cs->local_loaded && !coord_local_load(cs))
		return;
	for (s = 0; s < cs->nshards; s++)
	{
		CoordMove  *m = &cs->moves[s];

		if (m->present && m->phase != MOVE_NONE && strcmp(m->source, silo_node_id) == 0)
			coord_move_source(cs, s);
		else if (m->present && m->phase != MOVE_NONE && strcmp(m->target, silo_node_id) == 0)
			coord_move_target(cs, s);
		else
			move_orphan(cs, s);
	}
	coord_move_source_sweep(cs);
	coord_sql_discard_unclaimed(cs);
}

/*
 * coord_moves_busy: whether a move that names this node is under way (the
 * loop then waits at most a few milliseconds, so that a pause is short).
 */
bool
coord_moves_busy(CoordState *cs)
{
	int			s;

	if (cs->sql.busy || cs->sql.done)
		return true;
	for (s = 0; s < cs->nshards; s++)
		if (cs->moves[s].present && cs->moves[s].phase != MOVE_NONE &&
			(strcmp(cs->moves[s].source, silo_node_id) == 0 ||
			 strcmp(cs->moves[s].target, silo_node_id) == 0))
			return true;
	return false;
}

/*
 * coord_move_ready_to_acquire: before a plain acquisition of an unowned
 * shard (placement gives it here, no move): whatever this node holds of
 * the shard is stale -- an old copy, an aborted one -- and goes first.
 * Only a node with no state of the shard at all keeps its rows (those from
 * before cluster mode).  true when the shard may be acquired now.
 */
bool
coord_move_ready_to_acquire(CoordState *cs, int shard)
{
	char		lo[32];
	char		hi[32];
	bool		ok;
	char	   *value;

	if (!cs->local_loaded || cs->moves[shard].present)
		return false;
	if (coord_sql_take(cs, shard, SQL_WIPE, &ok, &value) && ok)
		cs->local[shard].state = LOCAL_NONE;
	if (cs->local[shard].state == LOCAL_NONE)
		return true;
	if (coord_sql_pending(cs, shard))
		return false;
	coord_move_bounds(cs, shard, lo, hi);
	(void) coord_sql_send(cs, shard, SQL_WIPE,
						  psprintf("SELECT silo.shard_wipe(%d, %s, %s)", shard, lo, hi));
	return false;
}

/*
 * coord_move_acquired_plainly: a plain acquisition succeeded: the rows
 * here are the shard's ('owned'), recorded when the connection is free
 * (a crash before that leaves no state, which means the same).
 */
void
coord_move_acquired_plainly(CoordState *cs, int shard)
{
	cs->local[shard].state = LOCAL_OWNED;
	cs->local[shard].move_id = -1;	/* not recorded yet: move_orphan does */
}

/*
 * coord_move_publish_state: what shared memory says of shard besides its
 * owner: a shard of this node's that a move paused, or whose rows are not
 * ready to serve, is not served; the views show moves in and out.  A
 * record in drained or verified that names this node as the source
 * pauses the shard whatever else says otherwise (its own state row, a
 * restart): the target's copy is being or has been checked against
 * rows that must not change any more.
 */
void
coord_move_publish_state(CoordState *cs, int shard, SiloShard *out)
{
	CoordMove  *m = &cs->moves[shard];
	CoordLocal *l = &cs->local[shard];
	bool		active = m->present && m->phase != MOVE_NONE && m->phase < MOVE_ACQUIRED;
	bool		frozen = m->present && (m->phase == MOVE_DRAINED || m->phase == MOVE_VERIFIED) &&
		strcmp(m->source, silo_node_id) == 0;

	if (out->local)
	{
		if (!cs->local_loaded)
			out->state = SILO_SHARD_ACQUIRING;
		else if (frozen || cs->runs[shard].paused || l->state == LOCAL_PAUSED)
			out->state = SILO_SHARD_PAUSED;
		else if (l->state != LOCAL_NONE && l->state != LOCAL_OWNED && l->state != LOCAL_SENDING)
			out->state = SILO_SHARD_ACQUIRING;
		if (active && strcmp(m->source, silo_node_id) == 0)
			out->move = SILO_MOVE_OUT;
	}
	else if (active && strcmp(m->target, silo_node_id) == 0)
		out->move = SILO_MOVE_IN;
}
