/*-------------------------------------------------------------------------
 *
 * view.c
 *	  The coordinator's mirror of P/coord/ in etcd: the shard map, the live
 *	  members and the owner of each shard, with the revisions of their
 *	  keys.  A full read (linearizable, never serializable: a member
 *	  without a leader serves stale serializable reads) replaces it; watch
 *	  events and the coordinator's own successful writes update it.
 *
 * The shard map is created here, once per cluster: when a full read finds
 * no map, the node puts its own (silo.initial_shard_count shards) with
 * put-if-absent, and whichever node's put came first wins; the others
 * read the winner's.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_coordinator.h"

#include "utils/memutils.h"

/* what a key under P/coord/ is */
typedef enum CoordKeyKind
{
	KEY_OTHER,
	KEY_MEMBER,
	KEY_OWNER,
	KEY_MOVE,
	KEY_MAP
} CoordKeyKind;

static void view_retry_later(CoordState *cs);

/*
 * coord_view_init: allocate the mirror (empty) in the coordinator's
 * long-lived context.
 */
void
coord_view_init(CoordState *cs)
{
	cs->shards = MemoryContextAllocZero(cs->cxt, sizeof(SiloShard) * SILO_MAX_SHARDS);
	cs->owners = MemoryContextAllocZero(cs->cxt, sizeof(CoordOwner) * SILO_MAX_SHARDS);
	cs->tokens = MemoryContextAllocZero(cs->cxt, sizeof(int64) * SILO_MAX_SHARDS);
	cs->placement_logged = MemoryContextAllocZero(cs->cxt, sizeof(bool) * SILO_MAX_SHARDS);
	cs->maxmembers = 16;
	cs->members = MemoryContextAllocZero(cs->cxt, sizeof(CoordMember) * cs->maxmembers);
	cs->backoff_ms = COORD_BACKOFF_MIN_MS;
}

/*
 * view_classify: what kind of key kv is; the node id of a member key
 * (into node_id) or the shard of an owner key (into *shard).
 */
static CoordKeyKind
view_classify(CoordState *cs, const char *key, size_t len, char *node_id, int *shard)
{
	size_t		mp = strlen(cs->member_prefix);
	size_t		sp = strlen(cs->shard_prefix);

	if (len == strlen(cs->map_key) && memcmp(key, cs->map_key, len) == 0)
		return KEY_MAP;
	if (len > mp && len - mp < SILO_NODE_ID_LEN && memcmp(key, cs->member_prefix, mp) == 0 &&
		memchr(key + mp, '\0', len - mp) == NULL)
	{
		memcpy(node_id, key + mp, len - mp);
		node_id[len - mp] = '\0';
		return KEY_MEMBER;
	}
	if (len > strlen(cs->move_prefix) && memcmp(key, cs->move_prefix, strlen(cs->move_prefix)) == 0)
	{
		const char *p = key + strlen(cs->move_prefix);
		const char *end = key + len;
		int			id = 0;
		int			digits = 0;

		while (p < end && *p >= '0' && *p <= '9' && digits < 5)
		{
			id = id * 10 + (*p++ - '0');
			digits++;
		}
		if (digits > 0 && p == end && id < SILO_MAX_SHARDS)
		{
			*shard = id;
			return KEY_MOVE;
		}
		return KEY_OTHER;
	}
	if (len > sp && memcmp(key, cs->shard_prefix, sp) == 0)
	{
		const char *p = key + sp;
		const char *end = key + len;
		int			id = 0;
		int			digits = 0;

		while (p < end && *p >= '0' && *p <= '9' && digits < 5)
		{
			id = id * 10 + (*p++ - '0');
			digits++;
		}
		if (digits > 0 && id < SILO_MAX_SHARDS && end - p == 6 && memcmp(p, "/owner", 6) == 0)
		{
			*shard = id;
			return KEY_OWNER;
		}
	}
	return KEY_OTHER;
}

/*
 * coord_view_member: the live member with node_id, or NULL.
 */
CoordMember *
coord_view_member(CoordState *cs, const char *node_id)
{
	int			i;

	for (i = 0; i < cs->nmembers; i++)
		if (strcmp(cs->members[i].node_id, node_id) == 0)
			return &cs->members[i];
	return NULL;
}

/*
 * view_store_member: insert, replace or (deleted) remove a member.
 */
static void
view_store_member(CoordState *cs, const char *node_id, const EtcdKeyValue *kv, bool deleted)
{
	CoordMember *m = coord_view_member(cs, node_id);

	if (deleted)
	{
		if (m != NULL)
		{
			*m = cs->members[cs->nmembers - 1];
			cs->nmembers--;
		}
		return;
	}
	if (m == NULL)
	{
		if (cs->nmembers == cs->maxmembers)
		{
			cs->maxmembers *= 2;
			cs->members = repalloc(cs->members, sizeof(CoordMember) * cs->maxmembers);
		}
		m = &cs->members[cs->nmembers++];
	}
	memset(m, 0, sizeof(*m));
	/* the key names the member; the value only adds its conninfo */
	if (!coord_parse_member(kv->value, kv->value_len, m))
		ereport(LOG,
				(errmsg("silo coordinator: the member key of node \"%s\" holds no readable value",
						node_id)));
	strlcpy(m->node_id, node_id, sizeof(m->node_id));
	m->lease = kv->lease;
	m->mod_revision = kv->mod_revision;
}

/*
 * view_store_owner: set or (deleted) clear a shard's owner.  An owner key
 * whose value cannot be read counts as owned by nobody this node knows:
 * present (so nobody acquires it) with an empty node id.
 */
static void
view_store_owner(CoordState *cs, int shard, const EtcdKeyValue *kv, bool deleted)
{
	CoordOwner *o = &cs->owners[shard];

	memset(o, 0, sizeof(*o));
	if (deleted)
		return;
	o->present = true;
	o->create_revision = kv->create_revision;
	o->mod_revision = kv->mod_revision;
	if (!coord_parse_owner(kv->value, kv->value_len, o))
	{
		memset(o->node_id, 0, sizeof(o->node_id));
		ereport(LOG,
				(errmsg("silo coordinator: the owner key of shard %d holds no readable value", shard)));
	}
}

/*
 * view_store_map: adopt the shard map in kv.  false (logged) when its
 * value is not a valid map: the node then keeps the map it had, or has
 * none.
 */
static bool
view_store_map(CoordState *cs, const EtcdKeyValue *kv, bool created)
{
	SiloShard  *shards = palloc(sizeof(SiloShard) * SILO_MAX_SHARDS);
	int			n;
	char	   *why;
	int			i;

	if (!coord_parse_map(kv->value, kv->value_len, shards, &n, &why))
	{
		static int64 logged_revision = 0;

		if (kv->mod_revision != logged_revision)
			ereport(WARNING,
					(errmsg("silo coordinator: the shard map in etcd (key \"%s\") is not valid: %s",
							cs->map_key, why),
					 errdetail("This node serves nothing until the map is valid.")));
		logged_revision = kv->mod_revision;
		return false;
	}
	if (cs->map_known && n == cs->nshards && kv->mod_revision == cs->map_mod_revision)
		return true;
	if (cs->map_known && (n != cs->nshards ||
						  memcmp(shards, cs->shards, sizeof(SiloShard) * n) != 0))
		ereport(WARNING,
				(errmsg("silo coordinator: the shard map in etcd changed from %d to %d shards",
						cs->nshards, n),
				 errdetail("Maps are not meant to change once created; this node follows the new one.")));
	memcpy(cs->shards, shards, sizeof(SiloShard) * n);
	for (i = n; i < SILO_MAX_SHARDS; i++)
		cs->tokens[i] = 0;
	cs->nshards = n;
	cs->map_known = true;
	cs->map_mod_revision = kv->mod_revision;
	if (!cs->map_logged)
	{
		if (created)
			ereport(LOG,
					(errmsg("silo coordinator: created the shard map of %d shards in etcd", n)));
		else if (n != silo_initial_shard_count)
			ereport(LOG,
					(errmsg("silo coordinator: using the cluster's shard map of %d shards; silo.initial_shard_count = %d is ignored",
							n, silo_initial_shard_count),
					 errdetail("Only the node that creates the map reads that setting.")));
		else
			ereport(LOG,
					(errmsg("silo coordinator: read the shard map of %d shards from etcd", n)));
		cs->map_logged = true;
	}
	return true;
}

/*
 * view_store: put one key's state into the mirror; returns its kind (and
 * the member's node id or the owner's shard).
 */
static CoordKeyKind
view_store(CoordState *cs, const EtcdKeyValue *kv, bool deleted, char *node_id, int *shard)
{
	CoordKeyKind kind = view_classify(cs, kv->key, kv->key_len, node_id, shard);

	switch (kind)
	{
		case KEY_MEMBER:
			view_store_member(cs, node_id, kv, deleted);
			break;
		case KEY_OWNER:
			view_store_owner(cs, *shard, kv, deleted);
			break;
		case KEY_MOVE:
			coord_move_store(cs, *shard, kv, deleted);
			break;
		case KEY_MAP:
			if (deleted)
			{
				ereport(WARNING,
						(errmsg("silo coordinator: the shard map was deleted from etcd (key \"%s\")",
								cs->map_key),
						 errdetail("This node keeps the map it has; deleting the map is not supported.")));
				cs->map_mod_revision = 0;
			}
			else
				(void) view_store_map(cs, kv, false);
			break;
		case KEY_OTHER:
			break;
	}
	return kind;
}

/*
 * view_check_tokens: drop the fencing token of every shard whose owner key
 * no longer carries it (deleted, owned by another node, or modified by
 * someone else), saying so.
 */
static void
view_check_tokens(CoordState *cs)
{
	int			i;

	for (i = 0; i < SILO_MAX_SHARDS; i++)
	{
		CoordOwner *o = &cs->owners[i];

		if (cs->tokens[i] == 0 || (coord_owner_is_me(o) && o->mod_revision == cs->tokens[i]))
			continue;
		ereport(LOG,
				(errmsg("silo coordinator: shard %d is no longer this node's as of token %lld: %s",
						i, (long long) cs->tokens[i],
						!o->present ? "its owner key was deleted"
						: coord_owner_is_me(o) ? "its owner key was written by someone else"
						: psprintf("its owner key names node \"%s\"", o->node_id))));
		cs->tokens[i] = 0;
		cs->dirty = true;
	}
}

/*
 * view_check_me: while registered, this node's member key must be there
 * under its lease.  Under another lease, the membership is gone (someone
 * else took the key).  Gone altogether, the node stops serving at once (a
 * force release is possible from now on) and asks its lease at once: an
 * answer without a TTL ends the membership as expired, an answer with one
 * as deleted under a live lease (membership.c).
 */
static void
view_check_me(CoordState *cs)
{
	CoordMember *me;

	if (!cs->registered)
		return;
	me = coord_view_member(cs, silo_node_id);
	if (me != NULL && me->lease != cs->lease_id)
		coord_membership_lost(cs, "its member key is under another lease");
	else if (me == NULL && !cs->member_gone)
	{
		cs->member_gone = true;
		cs->deadline_us = 0;
		silo_cluster_serve_until(0);
		cs->next_keepalive_us = 0;
	}
}

/*
 * coord_view_apply_kv: a watch event (or the coordinator's own write)
 * for kv; checks what it may have taken away from this node.
 */
void
coord_view_apply_kv(CoordState *cs, const EtcdKeyValue *kv, bool deleted)
{
	char		node_id[SILO_NODE_ID_LEN];
	int			shard = -1;
	CoordKeyKind kind = view_store(cs, kv, deleted, node_id, &shard);

	switch (kind)
	{
		case KEY_MEMBER:
			if (strcmp(node_id, silo_node_id) == 0)
			{
				view_check_me(cs);
				/* the key that kept this node out is gone: try now */
				if (deleted && !cs->registered)
					cs->next_register_us = 0;
			}
			cs->reconcile = true;
			cs->dirty = true;	/* an owner's membership: SL021 or SL020 */
			break;
		case KEY_OWNER:
			view_check_tokens(cs);
			cs->reconcile = true;
			cs->dirty = true;
			break;
		case KEY_MOVE:
			cs->reconcile = true;
			cs->dirty = true;
			break;
		case KEY_MAP:
			view_check_tokens(cs);
			cs->reconcile = true;
			cs->dirty = true;
			break;
		case KEY_OTHER:
			break;
	}
}

/*
 * view_create_map: put this node's map (silo.initial_shard_count shards)
 * if there is none; either way adopt the map etcd holds afterwards.
 * false when etcd did not answer (or the map is invalid).
 */
static bool
view_create_map(CoordState *cs, int64 *revision)
{
	char	   *value = coord_map_value(silo_initial_shard_count);
	EtcdCompare cmp = {0};
	EtcdOp		put = {0};
	EtcdOp		get = {0};
	EtcdTxnRequest req = {0};
	EtcdTxnResult res = {0};
	EtcdStatus	st;
	bool		ok = false;

	cmp.key = etcd_cstr(cs->map_key);
	cmp.target = ETCD_TARGET_CREATE;
	cmp.result = ETCD_RESULT_EQUAL;
	cmp.number = 0;
	put.type = ETCD_OP_PUT;
	put.put.key = etcd_cstr(cs->map_key);
	put.put.value = etcd_cstr(value);
	get.type = ETCD_OP_RANGE;
	get.range.key = etcd_cstr(cs->map_key);
	req.compare = &cmp;
	req.n_compare = 1;
	req.success = &put;
	req.n_success = 1;
	req.failure = &get;
	req.n_failure = 1;
	st = etcd_txn(cs->client, &req, &res);
	if (!etcd_ok(st))
	{
		coord_view_read_failed(cs, "create the shard map", st);
		return false;
	}
	if (res.succeeded)
	{
		EtcdKeyValue kv = {0};

		kv.key = cs->map_key;
		kv.key_len = strlen(cs->map_key);
		kv.value = value;
		kv.value_len = strlen(value);
		kv.create_revision = kv.mod_revision = res.header.revision;
		ok = view_store_map(cs, &kv, true);
	}
	else if (res.n_responses == 1 && res.responses[0].range.n_kvs == 1)
		ok = view_store_map(cs, &res.responses[0].range.kvs[0], false);
	*revision = res.header.revision;
	etcd_txn_result_free(&res);
	return ok;
}

/*
 * coord_view_resync: replace the mirror with a full linearizable read of
 * P/coord/ (creating the shard map if there is none), then check what the
 * read took away from this node.  On success the mirror is current as of
 * cs->view_revision, from which the watch resumes.  false (and a retry
 * scheduled with backoff) when etcd did not answer.
 */
bool
coord_view_resync(CoordState *cs)
{
	EtcdRangeRequest req = {0};
	EtcdRangeResult res = {0};
	EtcdStatus	st;
	int64		revision;
	size_t		i;

	req.key = etcd_cstr(cs->prefix);
	req.prefix = true;
	st = etcd_range(cs->client, &req, &res);
	if (!etcd_ok(st))
	{
		coord_view_read_failed(cs, "read the cluster state", st);
		return false;
	}
	revision = res.header.revision;

	/* the map is kept unless the read has a valid one */
	cs->nmembers = 0;
	memset(cs->owners, 0, sizeof(CoordOwner) * SILO_MAX_SHARDS);
	for (i = 0; i < SILO_MAX_SHARDS; i++)
		if (cs->moves[i].present)
			coord_move_store(cs, (int) i, NULL, true);
	cs->map_mod_revision = 0;
	for (i = 0; i < res.n_kvs; i++)
	{
		char		node_id[SILO_NODE_ID_LEN];
		int			shard;

		(void) view_store(cs, &res.kvs[i], false, node_id, &shard);
	}
	etcd_range_result_free(&res);
	if (cs->map_mod_revision == 0)
	{
		int64		created_at = 0;

		if (!view_create_map(cs, &created_at))
		{
			/* etcd failed (already scheduled), or the map is not valid */
			if (silo_monotonic_us() >= cs->next_sync_us)
				view_retry_later(cs);
			return false;
		}
		/* the watch resumes after the read, so it sees the map's put too */
	}
	cs->view_revision = revision;
	cs->synced = true;
	cs->backoff_ms = COORD_BACKOFF_MIN_MS;
	cs->fresh_suspect = false;
	cs->next_fresh_us = silo_monotonic_us() + 2 * cs->interval_us;
	if (cs->read_failing)
		ereport(LOG, (errmsg("silo coordinator: etcd answers reads again")));
	cs->read_failing = false;
	view_check_tokens(cs);
	view_check_me(cs);
	cs->reconcile = true;
	cs->dirty = true;
	return true;
}

/*
 * view_retry_later: the mirror is stale; read it again after a jittered
 * backoff (100 ms doubling to 2 s).
 */
static void
view_retry_later(CoordState *cs)
{
	cs->synced = false;
	cs->next_sync_us = silo_monotonic_us() + coord_jitter_ms(cs->backoff_ms) * 1000;
	cs->backoff_ms = Min(cs->backoff_ms * 2, COORD_BACKOFF_MAX_MS);
}

/*
 * coord_view_read_failed: a read (or the watch) failed: the mirror is
 * stale until a full read succeeds, tried again after a jittered backoff.
 * Logged once per run of failures.  Serving does not depend on this: the
 * membership deadline does.
 */
void
coord_view_read_failed(CoordState *cs, const char *what, EtcdStatus st)
{
	if (!cs->read_failing)
		ereport(LOG,
				(errmsg("silo coordinator: could not %s from etcd: %s: %s", what,
						etcd_kind_name(st.kind), st.message),
				 errdetail("Endpoint %s; retrying with backoff.", st.endpoint)));
	cs->read_failing = true;
	view_retry_later(cs);
}

/*
 * coord_view_matches: whether a keys-only read of P/coord/ agrees with
 * the mirror (the same member, owner and map keys, at the same
 * revisions): the freshness check of the watch.
 */
bool
coord_view_matches(CoordState *cs, const EtcdRangeResult *keys)
{
	int			members = 0;
	int			owners = 0;
	int			owners_known = 0;
	int			moves = 0;
	int			moves_known = 0;
	bool		map = false;
	size_t		i;

	for (i = 0; i < keys->n_kvs; i++)
	{
		const EtcdKeyValue *kv = &keys->kvs[i];
		char		node_id[SILO_NODE_ID_LEN];
		int			shard;
		CoordMember *m;

		switch (view_classify(cs, kv->key, kv->key_len, node_id, &shard))
		{
			case KEY_MEMBER:
				m = coord_view_member(cs, node_id);
				if (m == NULL || m->mod_revision != kv->mod_revision)
					return false;
				members++;
				break;
			case KEY_OWNER:
				if (!cs->owners[shard].present ||
					cs->owners[shard].mod_revision != kv->mod_revision)
					return false;
				owners++;
				break;
			case KEY_MOVE:
				if (!cs->moves[shard].present ||
					cs->moves[shard].mod_revision != kv->mod_revision)
					return false;
				moves++;
				break;
			case KEY_MAP:
				if (cs->map_mod_revision != kv->mod_revision)
					return false;
				map = true;
				break;
			case KEY_OTHER:
				break;
		}
	}
	for (i = 0; i < SILO_MAX_SHARDS; i++)
	{
		if (cs->owners[i].present)
			owners_known++;
		if (cs->moves[i].present)
			moves_known++;
	}
	return members == cs->nmembers && owners == owners_known && moves == moves_known &&
		map == (cs->map_mod_revision != 0);
}
