/*-------------------------------------------------------------------------
 *
 * membership.c
 *	  This node's membership: a lease of TTL silo.lease_ttl_s, the member
 *	  key P/coord/members/<node_id> put under it with put-if-absent, unary
 *	  keepalives every TTL/5, and the self-fencing deadline the request
 *	  path checks (src/cluster/shardmap.c).
 *
 * The deadline is the monotonic time at which the last keepalive etcd
 * answered with a TTL was *sent*, plus that TTL, minus a margin of
 * max(500 ms, TTL/5).  etcd can expire the lease no earlier than TTL after
 * it received that keepalive (later after a leader change: every lease is
 * renewed in full then), so the node stops serving at least the margin
 * before any other node can see its member key go.  A keepalive that
 * fails changes nothing: the deadline runs out by itself unless a later
 * one succeeds, and it is retried half an interval later.  An answer
 * without a TTL means the lease is gone: the node stops serving at once
 * and registers again with a new lease.
 *
 * While another live process holds the member key (a second server with
 * the same node id, or this node's previous run whose lease has not
 * expired), the node does not register and serves nothing; it tries again
 * every COORD_REGISTER_RETRY_MS, and at once when the watch sees the key
 * deleted.
 *
 * The member key is part of the membership: when a read or the watch shows
 * it gone while registered (view.c sets member_gone), the node stops
 * serving at once and sends a keepalive at once.  No TTL: the lease
 * expired.  A TTL: someone deleted the key under a live lease, and since a
 * force release is possible from then on, the membership is over too.
 * Either way the node registers again, which drops its fencing tokens:
 * nothing is served before its owner keys are read afresh and re-stamped
 * (owners.c).
 *
 *-------------------------------------------------------------------------
 */
#include "silo_coordinator.h"

#include "miscadmin.h"

/*
 * coord_membership_init: this process's incarnation (a random id) and
 * start time, and the conninfo it advertises.
 */
void
coord_membership_init(CoordState *cs)
{
	uint8		rnd[16];
	int			i;

	if (!pg_strong_random(rnd, sizeof(rnd)))
	{
		uint64		t = silo_monotonic_us() ^ ((uint64) MyProcPid << 32);

		for (i = 0; i < (int) sizeof(rnd); i++)
			rnd[i] = (uint8) (t >> ((i % 8) * 8)) ^ (uint8) i;
	}
	for (i = 0; i < (int) sizeof(rnd); i++)
		snprintf(cs->incarnation + 2 * i, 3, "%02x", rnd[i]);
	coord_now_iso(cs->started_at, sizeof(cs->started_at));
	strlcpy(cs->conninfo, silo_advertise_conninfo ? silo_advertise_conninfo : "",
			sizeof(cs->conninfo));
	if (cs->conninfo[0] == '\0')
		ereport(WARNING,
				(errmsg("silo.advertise_conninfo is empty"),
				 errdetail("Clients that get NOT_OWNER (SL020) for this node's shards cannot follow it here.")));
}

/*
 * membership_set_deadline: the deadline from a keepalive (or grant) sent
 * at send_us and answered with ttl seconds.
 */
static void
membership_set_deadline(CoordState *cs, uint64 send_us, int64 ttl)
{
	uint64		until = send_us + (uint64) ttl * 1000000;

	cs->deadline_us = until > cs->margin_us ? until - cs->margin_us : 0;
	silo_cluster_serve_until(cs->deadline_us);
}

/*
 * membership_revoke_lease: revoke a lease (its keys go with it), best
 * effort: an expired lease is already gone, and one etcd does not hear of
 * expires by itself.
 */
static void
membership_revoke_lease(CoordState *cs, int64 lease)
{
	EtcdStatus	st;

	if (lease == 0)
		return;
	st = etcd_lease_revoke(cs->client, lease);
	if (!etcd_ok(st) && st.kind != ETCD_NOT_FOUND)
		ereport(DEBUG1,
				(errmsg("silo coordinator: could not revoke lease %lld: %s: %s",
						(long long) lease, etcd_kind_name(st.kind), st.message)));
}

/*
 * membership_key_holder: describe the member key's current holder from
 * its kv, for the "already registered" message.
 */
static char *
membership_key_holder(const EtcdKeyValue *kv)
{
	CoordMember m;

	memset(&m, 0, sizeof(m));
	if (kv == NULL)
		return "an unknown process";
	(void) coord_parse_member(kv->value, kv->value_len, &m);
	return psprintf("lease %lld, conninfo \"%s\"", (long long) kv->lease, m.conninfo);
}

/*
 * membership_register: grant a lease and put the member key under it if
 * the key is absent.  On success the deadline starts from the grant's send
 * time, fencing tokens are dropped and a full read is scheduled at once:
 * the node re-validates (re-stamps) its shards before it serves any.
 */
static void
membership_register(CoordState *cs)
{
	uint64		send_us = silo_monotonic_us();
	char	   *value = coord_member_value(cs);
	EtcdLease	lease = {0};
	EtcdCompare cmp = {0};
	EtcdOp		put = {0};
	EtcdOp		get = {0};
	EtcdTxnRequest req = {0};
	EtcdTxnResult res = {0};
	EtcdStatus	st;
	bool		registered = false;

	st = etcd_lease_grant(cs->client, cs->ttl_s, 0, &lease);
	if (!etcd_ok(st) || lease.ttl <= 0)
	{
		if (!cs->keepalive_failing)
			ereport(LOG,
					(errmsg("silo coordinator: could not grant a membership lease in etcd: %s: %s",
							etcd_kind_name(st.kind), st.message),
					 errdetail("Endpoint %s; retrying.", st.endpoint)));
		cs->keepalive_failing = true;
		cs->next_register_us = silo_monotonic_us() + cs->interval_us;
		return;
	}

	cmp.key = etcd_cstr(cs->member_key);
	cmp.target = ETCD_TARGET_CREATE;
	cmp.result = ETCD_RESULT_EQUAL;
	cmp.number = 0;
	put.type = ETCD_OP_PUT;
	put.put.key = etcd_cstr(cs->member_key);
	put.put.value = etcd_cstr(value);
	put.put.lease = lease.id;
	get.type = ETCD_OP_RANGE;
	get.range.key = etcd_cstr(cs->member_key);
	req.compare = &cmp;
	req.n_compare = 1;
	req.success = &put;
	req.n_success = 1;
	req.failure = &get;
	req.n_failure = 1;
	st = etcd_txn(cs->client, &req, &res);
	if (etcd_ok(st) && res.succeeded)
		registered = true;
	else if (etcd_ok(st))
	{
		const EtcdKeyValue *kv = NULL;

		if (res.n_responses == 1 && res.responses[0].range.n_kvs == 1)
			kv = &res.responses[0].range.kvs[0];
		if (!cs->blocked_logged)
			ereport(LOG,
					(errmsg("silo coordinator: node id \"%s\" is already registered in etcd; this node does not register and serves nothing while that key exists",
							silo_node_id),
					 errdetail("Key \"%s\" is held by %s: another server running with silo.node_id = '%s', or this node's previous run, whose lease has not expired yet.",
							   cs->member_key, membership_key_holder(kv), silo_node_id),
					 errhint("Each server needs its own silo.node_id; a restarted node registers once its old lease expires (at most silo.lease_ttl_s).")));
		cs->blocked_logged = true;
	}
	else
	{
		/* the put may have been applied: look before deciding */
		EtcdRangeRequest rreq = {0};
		EtcdRangeResult rres = {0};

		rreq.key = etcd_cstr(cs->member_key);
		if (st.indeterminate && etcd_ok(etcd_range(cs->client, &rreq, &rres)) &&
			rres.n_kvs == 1 && rres.kvs[0].lease == lease.id)
			registered = true;
		etcd_range_result_free(&rres);
		if (!registered && !cs->keepalive_failing)
			ereport(LOG,
					(errmsg("silo coordinator: could not register in etcd: %s: %s",
							etcd_kind_name(st.kind), st.message),
					 errdetail("Endpoint %s; retrying.", st.endpoint)));
		if (!registered)
			cs->keepalive_failing = true;
	}
	etcd_txn_result_free(&res);

	if (!registered)
	{
		membership_revoke_lease(cs, lease.id);
		cs->next_register_us = silo_monotonic_us() + COORD_REGISTER_RETRY_MS * 1000;
		return;
	}
	cs->lease_id = lease.id;
	cs->registered = true;
	cs->member_gone = false;
	cs->blocked_logged = false;
	cs->keepalive_failing = false;
	cs->member_value_stale = false;
	memset(cs->tokens, 0, sizeof(int64) * SILO_MAX_SHARDS);
	membership_set_deadline(cs, send_us, lease.ttl);
	cs->next_keepalive_us = send_us + cs->interval_us;
	cs->synced = false;
	cs->next_sync_us = 0;
	cs->dirty = true;
	ereport(LOG,
			(errmsg("silo coordinator: registered node \"%s\" in etcd (lease %lld, TTL %lld s, incarnation %s)",
					silo_node_id, (long long) lease.id, (long long) lease.ttl, cs->incarnation)));
}

/*
 * membership_keepalive: one unary keepalive of the lease; moves the
 * deadline on an answer with a TTL, ends the membership on one without.
 */
static void
membership_keepalive(CoordState *cs)
{
	uint64		send_us = silo_monotonic_us();
	EtcdLease	lease = {0};
	EtcdStatus	st;

	st = etcd_lease_keepalive(cs->client, cs->lease_id, &lease);
	if (etcd_ok(st) && lease.ttl > 0 && cs->member_gone)
	{
		coord_membership_lost(cs, "its member key was deleted from etcd while its lease lives");
		return;
	}
	if (etcd_ok(st) && lease.ttl > 0)
	{
		membership_set_deadline(cs, send_us, lease.ttl);
		cs->next_keepalive_us = send_us + cs->interval_us;
		if (cs->keepalive_failing)
			ereport(LOG,
					(errmsg("silo coordinator: etcd answers keepalives again (lease %lld, TTL %lld s)",
							(long long) cs->lease_id, (long long) lease.ttl)));
		cs->keepalive_failing = false;
		return;
	}
	if (etcd_ok(st) || st.kind == ETCD_NOT_FOUND)
	{
		coord_membership_lost(cs, "its lease expired in etcd");
		return;
	}
	if (!cs->keepalive_failing)
	{
		uint64		now = silo_monotonic_us();

		ereport(LOG,
				(errmsg("silo coordinator: a keepalive of lease %lld failed: %s: %s",
						(long long) cs->lease_id, etcd_kind_name(st.kind), st.message),
				 errdetail("Endpoint %s.  This node serves for %lld ms more unless a keepalive succeeds.",
						   st.endpoint,
						   (long long) (cs->deadline_us > now ? (cs->deadline_us - now) / 1000 : 0))));
	}
	cs->keepalive_failing = true;
	cs->next_keepalive_us = silo_monotonic_us() + cs->interval_us / 2;
}

/*
 * coord_membership_lost: the membership is gone (the lease expired, or the
 * member key was deleted or taken over): stop serving now, forget the
 * fencing tokens, revoke the old lease if it still lives, and register
 * again.
 */
void
coord_membership_lost(CoordState *cs, const char *why)
{
	int64		old = cs->lease_id;

	if (!cs->registered)
		return;
	silo_cluster_serve_until(0);
	cs->deadline_us = 0;
	cs->registered = false;
	cs->member_gone = false;
	cs->lease_id = 0;
	memset(cs->tokens, 0, sizeof(int64) * SILO_MAX_SHARDS);
	ereport(LOG,
			(errmsg("silo coordinator: node \"%s\" lost its membership: %s; it stops serving and registers again",
					silo_node_id, why)));
	coord_publish(cs);
	membership_revoke_lease(cs, old);
	cs->next_register_us = 0;
}

/*
 * coord_membership_revoke: the graceful end: stop serving, then revoke
 * the lease so the member key goes at once (owner keys stay: the node
 * keeps its shards across a restart).
 */
void
coord_membership_revoke(CoordState *cs)
{
	int64		old = cs->lease_id;

	silo_cluster_serve_until(0);
	cs->deadline_us = 0;
	cs->registered = false;
	cs->member_gone = false;
	cs->lease_id = 0;
	memset(cs->tokens, 0, sizeof(int64) * SILO_MAX_SHARDS);
	if (old != 0 && cs->client != NULL)
	{
		membership_revoke_lease(cs, old);
		ereport(LOG,
				(errmsg("silo coordinator: revoked the membership of node \"%s\" (lease %lld)",
						silo_node_id, (long long) old)));
	}
}

/*
 * coord_membership_update_value: put the member key's value again (the
 * advertised conninfo changed), only while it is still under this node's
 * lease.
 */
void
coord_membership_update_value(CoordState *cs)
{
	char	   *value = coord_member_value(cs);
	EtcdCompare cmp = {0};
	EtcdOp		put = {0};
	EtcdTxnRequest req = {0};
	EtcdTxnResult res = {0};
	EtcdStatus	st;

	cmp.key = etcd_cstr(cs->member_key);
	cmp.target = ETCD_TARGET_LEASE;
	cmp.result = ETCD_RESULT_EQUAL;
	cmp.number = cs->lease_id;
	put.type = ETCD_OP_PUT;
	put.put.key = etcd_cstr(cs->member_key);
	put.put.value = etcd_cstr(value);
	put.put.lease = cs->lease_id;
	req.compare = &cmp;
	req.n_compare = 1;
	req.success = &put;
	req.n_success = 1;
	st = etcd_txn(cs->client, &req, &res);
	if (etcd_ok(st) && res.succeeded)
	{
		cs->member_value_stale = false;
		ereport(LOG,
				(errmsg("silo coordinator: node \"%s\" now advertises \"%s\"", silo_node_id,
						cs->conninfo)));
	}
	else if (etcd_ok(st))
		coord_membership_lost(cs, "its member key is no longer under its lease");
	else if (st.indeterminate)
	{
		/* the next full read shows what happened; put again to be sure */
		cs->synced = false;
		cs->next_sync_us = 0;
	}
	etcd_txn_result_free(&res);
}

/*
 * coord_membership_step: register while not registered (when due), keep
 * the lease alive (when due), and put a changed member value.
 */
void
coord_membership_step(CoordState *cs)
{
	uint64		now = silo_monotonic_us();

	if (!cs->registered)
	{
		if (now >= cs->next_register_us)
			membership_register(cs);
		return;
	}
	if (now >= cs->next_keepalive_us)
		membership_keepalive(cs);
	if (cs->registered && cs->member_value_stale && !cs->keepalive_failing)
		coord_membership_update_value(cs);
}
