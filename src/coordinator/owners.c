/*-------------------------------------------------------------------------
 *
 * owners.c
 *	  Shard ownership: acquiring a shard nobody owns, re-stamping the owner
 *	  keys that name this node, releasing one, the reconciliation of
 *	  placement with the owner keys, and the publication of what this node
 *	  may serve into shared memory.
 *
 * Owner keys P/coord/shards/<id>/owner are permanent (no lease).  Every
 * write of one is a txn that also requires this node's member key to be
 * under its live lease, so a node whose membership lapsed cannot write
 * any:
 *
 *	  acquire	[owner CREATE == 0, member LEASE == mine] -> put
 *	  re-stamp	[owner MOD == its mod revision, member LEASE == mine] -> put
 *				(after every registration, and when the advertised conninfo
 *				changed)
 *	  release	[owner MOD == token] -> delete
 *
 * The revision of the txn that last wrote the key is this process's
 * fencing token for the shard.  A shard is served only while its owner key
 * names this node and still carries that token (nobody wrote it since),
 * the shard is in state SERVING and the membership deadline has not
 * passed.  Tokens are dropped whenever the membership is (re)gained, so
 * every registration re-stamps, and thereby re-proves, every shard.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_coordinator.h"

#include "postmaster/interrupt.h"

/*
 * coord_owner_is_me: whether an owner key names this node.
 */
bool
coord_owner_is_me(const CoordOwner *o)
{
	return o->present && strcmp(o->node_id, silo_node_id) == 0;
}

/*
 * owner_key: the owner key of shard (palloc'd).
 */
static char *
owner_key(CoordState *cs, int shard)
{
	return psprintf("%s%d/owner", cs->shard_prefix, shard);
}

/*
 * owner_txn_failed: an owner txn etcd did not answer: stop this round and
 * retry after a backoff; an indeterminate write is settled by a full read.
 */
static void
owner_txn_failed(CoordState *cs, int shard, const char *what, EtcdStatus st)
{
	if (!cs->txn_failing)
		ereport(LOG,
				(errmsg("silo coordinator: could not %s shard %d in etcd: %s: %s%s", what, shard,
						etcd_kind_name(st.kind), st.message,
						st.indeterminate ? " (it may have been applied)" : ""),
				 errdetail("Endpoint %s; retrying.", st.endpoint)));
	cs->txn_failing = true;
	if (st.indeterminate)
	{
		cs->synced = false;
		cs->next_sync_us = 0;
	}
	cs->next_reconcile_us = silo_monotonic_us() + coord_jitter_ms(cs->backoff_ms) * 1000;
}

/*
 * owner_write: acquire (acquire = true) or re-stamp shard with a txn
 * fenced on this node's membership.  On success the new revision is the
 * shard's token and the mirror has the new value; on a refusal the
 * failure branch's reads update the mirror (and end the membership if the
 * member key is no longer this lease's).  Returns false when the round
 * must stop.
 */
static bool
owner_write(CoordState *cs, int shard, bool acquire)
{
	CoordOwner *o = &cs->owners[shard];
	char	   *key = owner_key(cs, shard);
	char		now[40];
	char	   *value;
	EtcdCompare cmp[2];
	EtcdOp		put = {0};
	EtcdOp		get[2];
	EtcdTxnRequest req = {0};
	EtcdTxnResult res = {0};
	EtcdStatus	st;
	bool		cont = true;

	memset(cmp, 0, sizeof(cmp));
	memset(get, 0, sizeof(get));
	coord_now_iso(now, sizeof(now));
	value = coord_owner_value(cs, (!acquire && o->acquired_at[0]) ? o->acquired_at : now);
	cmp[0].key = etcd_cstr(key);
	cmp[0].target = acquire ? ETCD_TARGET_CREATE : ETCD_TARGET_MOD;
	cmp[0].result = ETCD_RESULT_EQUAL;
	cmp[0].number = acquire ? 0 : o->mod_revision;
	cmp[1].key = etcd_cstr(cs->member_key);
	cmp[1].target = ETCD_TARGET_LEASE;
	cmp[1].result = ETCD_RESULT_EQUAL;
	cmp[1].number = cs->lease_id;
	put.type = ETCD_OP_PUT;
	put.put.key = etcd_cstr(key);
	put.put.value = etcd_cstr(value);
	get[0].type = ETCD_OP_RANGE;
	get[0].range.key = etcd_cstr(key);
	get[1].type = ETCD_OP_RANGE;
	get[1].range.key = etcd_cstr(cs->member_key);
	req.compare = cmp;
	req.n_compare = 2;
	req.success = &put;
	req.n_success = 1;
	req.failure = get;
	req.n_failure = 2;
	st = etcd_txn(cs->client, &req, &res);
	if (!etcd_ok(st))
	{
		owner_txn_failed(cs, shard, acquire ? "acquire" : "re-stamp", st);
		return false;
	}
	cs->txn_failing = false;
	if (res.succeeded)
	{
		EtcdKeyValue kv = {0};
		int64		previous = o->mod_revision;

		kv.key = key;
		kv.key_len = strlen(key);
		kv.value = value;
		kv.value_len = strlen(value);
		kv.create_revision = acquire ? res.header.revision : o->create_revision;
		kv.mod_revision = res.header.revision;
		cs->tokens[shard] = res.header.revision;
		coord_view_apply_kv(cs, &kv, false);
		if (acquire)
			ereport(LOG,
					(errmsg("silo coordinator: node \"%s\" acquired shard %d (token %lld)",
							silo_node_id, shard, (long long) res.header.revision)));
		else
			ereport(LOG,
					(errmsg("silo coordinator: node \"%s\" re-stamped its shard %d (token %lld, was revision %lld)",
							silo_node_id, shard, (long long) res.header.revision,
							(long long) previous)));
	}
	else
	{
		EtcdKeyValue gone = {0};
		const EtcdRangeResult *owner = res.n_responses == 2 ? &res.responses[0].range : NULL;
		const EtcdRangeResult *member = res.n_responses == 2 ? &res.responses[1].range : NULL;

		if (owner != NULL && owner->n_kvs == 1)
			coord_view_apply_kv(cs, &owner->kvs[0], false);
		else if (owner != NULL)
		{
			gone.key = key;
			gone.key_len = strlen(key);
			coord_view_apply_kv(cs, &gone, true);
		}
		if (member != NULL && member->n_kvs == 1)
			coord_view_apply_kv(cs, &member->kvs[0], false);
		else if (member != NULL)
		{
			gone.key = cs->member_key;
			gone.key_len = strlen(cs->member_key);
			coord_view_apply_kv(cs, &gone, true);
		}
		cont = cs->registered && !cs->member_gone;
	}
	etcd_txn_result_free(&res);
	return cont;
}

/*
 * coord_owner_release: give shard up: delete its owner key if it still
 * carries this process's token.  (Moves release in the txn that moves
 * their record on: move_source.c.)
 */
bool
coord_owner_release(CoordState *cs, int shard)
{
	char	   *key = owner_key(cs, shard);
	EtcdCompare cmp = {0};
	EtcdOp		del = {0};
	EtcdTxnRequest req = {0};
	EtcdTxnResult res = {0};
	EtcdStatus	st;
	bool		released;

	if (cs->tokens[shard] == 0)
		return false;
	cmp.key = etcd_cstr(key);
	cmp.target = ETCD_TARGET_MOD;
	cmp.result = ETCD_RESULT_EQUAL;
	cmp.number = cs->tokens[shard];
	del.type = ETCD_OP_DELETE;
	del.delete_range.key = etcd_cstr(key);
	req.compare = &cmp;
	req.n_compare = 1;
	req.success = &del;
	req.n_success = 1;
	st = etcd_txn(cs->client, &req, &res);
	released = etcd_ok(st) && res.succeeded;
	etcd_txn_result_free(&res);
	if (released)
	{
		EtcdKeyValue gone = {0};

		gone.key = key;
		gone.key_len = strlen(key);
		cs->tokens[shard] = 0;
		coord_view_apply_kv(cs, &gone, true);
		ereport(LOG, (errmsg("silo coordinator: node \"%s\" released shard %d", silo_node_id, shard)));
	}
	else if (!etcd_ok(st))
		owner_txn_failed(cs, shard, "release", st);
	return released;
}

/*
 * coord_owners_reconcile: make the owner keys agree with what this node
 * should hold: re-stamp the keys naming it that do not carry its token (or
 * its current conninfo), acquire the unowned shards placement gives it,
 * and request a move of each shard placement gives it that another live
 * member owns (moves.c; said once per change).  Stops early to keep the
 * lease alive or when etcd fails; returns true when it went through every
 * shard.  A shard left waiting (stale rows being wiped, a move deferred)
 * brings the reconciliation back a little later.
 */
bool
coord_owners_reconcile(CoordState *cs)
{
	int			s;
	bool		again = false;

	if (!cs->registered || cs->member_gone || !cs->synced || !cs->map_known)
		return true;
	for (s = 0; s < cs->nshards; s++)
	{
		CoordOwner *o = &cs->owners[s];
		const CoordMember *placed;
		bool		placed_me;

		if (silo_monotonic_us() >= cs->next_keepalive_us || ShutdownRequestPending)
			return false;
		if (coord_owner_is_me(o))
		{
			cs->placement_logged[s] = false;
			if ((cs->tokens[s] != o->mod_revision || strcmp(o->conninfo, cs->conninfo) != 0) &&
				!owner_write(cs, s, false))
				return false;
			continue;
		}
		placed = coord_placement_owner(cs, s);
		placed_me = placed != NULL && strcmp(placed->node_id, silo_node_id) == 0;
		if (!o->present && placed_me && !cs->moves[s].present)
		{
			/* stale rows of the shard go first (moves.c) */
			if (!coord_move_ready_to_acquire(cs, s))
				again = true;
			else if (!owner_write(cs, s, true))
				return false;
			else if (coord_owner_is_me(o))
				coord_move_acquired_plainly(cs, s);
		}
		else if (o->present && placed_me)
		{
			const CoordMember *source = coord_view_member(cs, o->node_id);

			if (!cs->placement_logged[s])
				ereport(LOG,
						(errmsg("silo coordinator: placement gives shard %d to node \"%s\", but node \"%s\" owns it",
								s, silo_node_id, o->node_id),
						 errdetail("%s", source != NULL && silo_max_moves_in > 0
								   ? "The shard moves here with its rows."
								   : "It stays there: its owner is not a member, or silo.max_moves_in is 0.")));
			cs->placement_logged[s] = true;
			/* only a live owner is a move's source */
			if (source != NULL && !cs->moves[s].present)
			{
				if (!coord_move_request(cs, s, source))
					return false;
				again |= !cs->moves[s].present;
			}
		}
		else
			cs->placement_logged[s] = false;
	}
	cs->reconcile = again;
	if (again)
		cs->next_reconcile_us = silo_monotonic_us() + 200 * 1000;
	return true;
}

/*
 * coord_publish: write the shard map as this node knows it into shared
 * memory, for the request path and the views: each shard's bounds, its
 * owner (the NOT_OWNER hint), and for the shards whose owner key names
 * this node, SERVING while this process holds the key's token under a
 * live membership, else ACQUIRING (SL021: retry); a shard whose owner is
 * not a member is owner_down (SL021 too: a NOT_OWNER naming a node that
 * is gone would send clients to it).  Nothing until the map is known.
 */
void
coord_publish(CoordState *cs)
{
	SiloShard  *out = palloc0(sizeof(SiloShard) * SILO_MAX_SHARDS);
	int			n = cs->map_known ? cs->nshards : 0;
	int			s;

	for (s = 0; s < n; s++)
	{
		const CoordOwner *o = &cs->owners[s];

		out[s] = cs->shards[s];
		if (o->present)
		{
			strlcpy(out[s].owner_node_id, o->node_id, SILO_NODE_ID_LEN);
			strlcpy(out[s].owner_conninfo, o->conninfo, SILO_CONNINFO_LEN);
			out[s].owner_down = !coord_owner_is_me(o) && coord_view_member(cs, o->node_id) == NULL;
		}
		if (coord_owner_is_me(o))
		{
			out[s].local = true;
			out[s].state = (cs->registered && cs->tokens[s] != 0 &&
							cs->tokens[s] == o->mod_revision)
				? SILO_SHARD_SERVING : SILO_SHARD_ACQUIRING;
		}
		/* a move's pause, rows not ready to serve, and moves for the views */
		coord_move_publish_state(cs, s, &out[s]);
	}
	silo_cluster_publish(out, n, cs->registered);
	pfree(out);
	cs->dirty = false;
}
