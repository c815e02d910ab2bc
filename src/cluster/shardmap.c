/*-------------------------------------------------------------------------
 *
 * shardmap.c
 *	  Which shards this node serves: the shard map and this node's
 *	  ownership of each shard, in shared memory, and the check every SQL
 *	  entry point makes of a tenant's shard before it touches the tenant's
 *	  rows.
 *
 * A shard is a half-open range [start, end) of the 64-bit hash of a
 * tenant id, hashtextextended(tenant, 0) -- PostgreSQL's own hash, the
 * one function of the tenant a publication's row filter may use
 * (docs/cluster.md).  All of a tenant's rows live in one shard.
 *
 * In single-node mode (silo.etcd_endpoints empty) there is one shard, the
 * whole range, always served here: the check returns at its first test
 * and the hot paths pay nothing.  In cluster mode the coordinator
 * (src/coordinator/, a background worker in a library of its own) keeps
 * the map from etcd's: the shards, their owners, and this node's right
 * to serve.  The request path never talks to etcd; it reads what the
 * coordinator wrote here.
 *
 * This node serves a shard only while (a) etcd says it owns it, (b) the
 * shard is in state SERVING (not being acquired, not paused for a move),
 * and (c) its membership lease is alive as far as it can prove: the
 * coordinator stores a deadline on the monotonic clock, the send time of
 * the last keepalive etcd confirmed plus the TTL minus a margin, past
 * which the node stops serving before etcd can expire its lease anywhere
 * else (self-fencing).
 *
 * A call that passed a shard's check holds the shard's lock (a
 * transaction-scoped lock in the advisory space, field4
 * SILO_LOCKTAG_SHARD) in share mode until it ends, so that a pause can
 * wait for every such transaction to end by taking the lock exclusively
 * (pause.c).  The pause publishes the shard as PAUSED first, and a call
 * checks the state again once it holds the lock, so none slips past.
 *
 * Locking: the map is written under the tranche's LWLock in exclusive
 * mode (by the coordinator) and read under it in shared mode; the
 * serving deadline is an atomic read without the lock.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_cluster.h"

#include <time.h>

#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/json.h"

/* GUCs (registered by module.c) */
char	   *silo_node_id = NULL;
char	   *silo_etcd_endpoints = NULL;
char	   *silo_cluster_prefix = NULL;
char	   *silo_advertise_conninfo = NULL;
char	   *silo_replication_conninfo = NULL;
int			silo_initial_shard_count = 8;
int			silo_lease_ttl_s = 10;

typedef struct ClusterShared
{
	LWLock	   *lock;
	bool		configured;		/* the coordinator has written a map */
	bool		member;			/* this node's membership is registered */
	pg_atomic_uint64 serve_until;	/* monotonic us; 0: not serving */
	pg_atomic_uint64 generation;	/* bumped with every change of the map */
	int			pid;			/* the coordinator's, or 0 */
	int			nshards;
	SiloShard	shards[SILO_MAX_SHARDS];
} ClusterShared;

static ClusterShared *cluster_shared = NULL;

/*
 * silo_cluster_mode: whether this server runs in cluster mode (fixed at
 * start: silo.etcd_endpoints is a postmaster setting).
 */
bool
silo_cluster_mode(void)
{
	return silo_etcd_endpoints != NULL && silo_etcd_endpoints[0] != '\0';
}

/*
 * silo_cluster_shmem_request / silo_cluster_shmem_startup: reserve and
 * initialise the map (the caller of startup holds AddinShmemInitLock).
 */
void
silo_cluster_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(ClusterShared)));
	RequestNamedLWLockTranche("silo_cluster", 1);
}

void
silo_cluster_shmem_startup(void)
{
	bool		found;

	cluster_shared = ShmemInitStruct("silo_cluster", sizeof(ClusterShared), &found);
	if (!found)
	{
		memset(cluster_shared, 0, sizeof(ClusterShared));
		cluster_shared->lock = &(GetNamedLWLockTranche("silo_cluster"))->lock;
		pg_atomic_init_u64(&cluster_shared->serve_until, 0);
		pg_atomic_init_u64(&cluster_shared->generation, 0);
	}
}

/*
 * silo_monotonic_us: the monotonic clock, in microseconds: the same in
 * every process of the machine, and never stepped by NTP.
 */
uint64
silo_monotonic_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64) ts.tv_sec * 1000000 + (uint64) ts.tv_nsec / 1000;
}

/*
 * silo_tenant_hash: the hash a tenant's shard is found by:
 * hashtextextended(tenant, 0) under a deterministic collation, i.e.
 * PostgreSQL's hash_bytes_extended of the tenant's bytes with seed 0.
 */
int64
silo_tenant_hash(const char *tenant, int len)
{
	return (int64) hash_bytes_extended((const unsigned char *) tenant, len, 0);
}

/*
 * silo_shard_bounds: the range of shard i of n: [*start, *end) on the
 * int8 line, with end = 2^63 for the last shard (returned as int128).
 * Shard i starts at -2^63 + floor(i * 2^64 / n).
 */
void
silo_shard_bounds(int i, int n, int128 *start, int128 *end)
{
	int128		span = (int128) 1 << 64;
	int128		lo = -((int128) 1 << 63);

	*start = lo + span * i / n;
	*end = lo + span * (i + 1) / n;
}

/*
 * cluster_find: the index of the shard whose range holds hash (a binary
 * search over the sorted starts), or -1.  Caller holds the lock.
 */
static int
cluster_find(int64 hash)
{
	int			lo = 0;
	int			hi = cluster_shared->nshards - 1;

	while (lo <= hi)
	{
		int			mid = (lo + hi) / 2;
		SiloShard  *s = &cluster_shared->shards[mid];

		if (hash < s->range_start)
			hi = mid - 1;
		else if (!s->end_is_max && hash >= s->range_end)
			lo = mid + 1;
		else
			return mid;
	}
	return -1;
}

/*
 * silo_shard_of: a copy of the shard a tenant belongs to; false when
 * there is no map (cluster mode before the coordinator wrote one).  In
 * single-node mode, the one local shard.
 */
bool
silo_shard_of(const char *tenant, SiloShard *out)
{
	int64		hash = silo_tenant_hash(tenant, strlen(tenant));
	int			i;

	if (!silo_cluster_mode())
	{
		memset(out, 0, sizeof(*out));
		out->id = 0;
		out->range_start = PG_INT64_MIN;
		out->end_is_max = true;
		out->state = SILO_SHARD_SERVING;
		out->local = true;
		return true;
	}
	if (cluster_shared == NULL)
		return false;
	LWLockAcquire(cluster_shared->lock, LW_SHARED);
	i = cluster_shared->configured ? cluster_find(hash) : -1;
	if (i >= 0)
		*out = cluster_shared->shards[i];
	LWLockRelease(cluster_shared->lock);
	return i >= 0;
}

/*
 * silo_cluster_shard_by_id: a copy of shard id as the map has it now;
 * false when there is no map or no such shard.  Cluster mode only.
 */
bool
silo_cluster_shard_by_id(int id, SiloShard *out)
{
	bool		found = false;

	if (cluster_shared == NULL || id < 0)
		return false;
	LWLockAcquire(cluster_shared->lock, LW_SHARED);
	if (cluster_shared->configured && id < cluster_shared->nshards &&
		cluster_shared->shards[id].id == id)
	{
		*out = cluster_shared->shards[id];
		found = true;
	}
	LWLockRelease(cluster_shared->lock);
	return found;
}

/*
 * cluster_owner_detail: the machine-readable DETAIL of a NOT_OWNER error:
 * a JSON object with the shard and its owner.
 */
static char *
cluster_owner_detail(const SiloShard *s)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"shard\": %d, \"owner_node_id\": ", s->id);
	if (s->owner_node_id[0])
		escape_json(&buf, s->owner_node_id);
	else
		appendStringInfoString(&buf, "null");
	appendStringInfoString(&buf, ", \"owner_conninfo\": ");
	if (s->owner_conninfo[0])
		escape_json(&buf, s->owner_conninfo);
	else
		appendStringInfoString(&buf, "null");
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/*
 * cluster_unavailable: the retryable error for a shard this node owns (or
 * may own) but cannot serve right now, and why.
 */
static void
cluster_unavailable(const char *tenant, const SiloShard *s, const char *why)
{
	ereport(ERROR,
			(errcode(ERRCODE_SILO_SHARD_UNAVAILABLE),
			 errmsg("shard %d of tenant \"%s\" is not available on this node right now", s->id,
					tenant),
			 errdetail("%s", why),
			 errhint("Retry in a moment; the call wrote nothing.")));
}

/*
 * cluster_still_serving: after a call took shard id's lock in share mode,
 * whether the shard is still served here.  A pause publishes the shard as
 * PAUSED before it waits for the lock exclusively, so a call that read
 * SERVING but got the lock only after the pause's wait sees the pause
 * here and gives up instead of running past it.
 */
static bool
cluster_still_serving(int id)
{
	SiloShard	s;

	return silo_cluster_shard_by_id(id, &s) && s.local && s.state == SILO_SHARD_SERVING &&
		silo_monotonic_us() < pg_atomic_read_u64(&cluster_shared->serve_until);
}

/*
 * silo_cluster_check_tenant: the check an entry point makes before it
 * touches a tenant's rows.  Nothing in single-node mode.  In cluster mode
 * the tenant's shard must be served here: otherwise NOT_OWNER (SL020)
 * with the owner in DETAIL, or SL021 when the shard cannot be served
 * right now (a move's pause, an acquisition, membership not proven).  A
 * call that passes holds the shard's lock in share mode until its
 * transaction ends (see the header).
 */
void
silo_cluster_check_tenant(const char *tenant)
{
	SiloShard	s;
	LOCKTAG		tag;

	if (!silo_cluster_mode())
		return;
	if (!silo_shard_of(tenant, &s))
		ereport(ERROR,
				(errcode(ERRCODE_SILO_SHARD_UNAVAILABLE),
				 errmsg("this node does not know the shard map yet"),
				 errdetail("The coordinator has not read the cluster's shard map from etcd."),
				 errhint("Retry in a moment; the call wrote nothing.")));
	if (!s.local && s.owner_down)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_SHARD_UNAVAILABLE),
				 errmsg("shard %d of tenant \"%s\" is not available right now", s.id, tenant),
				 errdetail("Its owner, node \"%s\", is not a member of the cluster: it is down or cut off from etcd.",
						   s.owner_node_id),
				 errhint("Retry later: the owner serves the shard again when it is back. If it will never return, an operator can force-release the shard (siloctl shard force-release %d), which gives it to another node empty.",
						 s.id)));
	if (!s.local)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_NOT_OWNER),
				 errmsg("shard %d of tenant \"%s\" is not owned by this node", s.id, tenant),
				 errdetail("%s", cluster_owner_detail(&s)),
				 s.owner_conninfo[0]
				 ? errhint("Send the call to node \"%s\": %s", s.owner_node_id, s.owner_conninfo)
				 : errhint("The shard has no owner right now; retry in a moment.")));
	if (s.state != SILO_SHARD_SERVING)
		cluster_unavailable(tenant, &s, s.state == SILO_SHARD_PAUSED
							? "The shard is paused while it moves to another node."
							: "This node is still acquiring the shard.");
	if (silo_monotonic_us() >= pg_atomic_read_u64(&cluster_shared->serve_until))
		cluster_unavailable(tenant, &s,
							"This node cannot prove its cluster membership right now (etcd unreachable, or its lease lost).");
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) s.id, 0, SILO_LOCKTAG_SHARD);
	(void) LockAcquire(&tag, ShareLock, false, false);
	/* a pause may have begun while this call waited for the lock */
	if (!cluster_still_serving(s.id))
		cluster_unavailable(tenant, &s, "The shard is paused while it moves to another node.");
}

/*
 * silo_cluster_serves_tenant: whether this node serves the tenant's shard
 * right now, for a path that passes over rows of other shards instead of
 * failing (a lease's scan, the broker's passes).  Takes the shard's lock
 * as the check does when it does.  Always true in single-node mode.
 */
bool
silo_cluster_serves_tenant(const char *tenant)
{
	SiloShard	s;
	LOCKTAG		tag;

	if (!silo_cluster_mode())
		return true;
	if (!silo_shard_of(tenant, &s) || !s.local || s.state != SILO_SHARD_SERVING ||
		silo_monotonic_us() >= pg_atomic_read_u64(&cluster_shared->serve_until))
		return false;
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) s.id, 0, SILO_LOCKTAG_SHARD);
	(void) LockAcquire(&tag, ShareLock, false, false);
	/* the lock stays until the transaction ends either way: harmless */
	return cluster_still_serving(s.id);
}

/*
 * silo_cluster_owns_tenant: whether the tenant's shard is this node's --
 * served, or paused for a move away -- for the views, which show the rows
 * of the node's own shards and not a copy arriving or one left behind by
 * a move.  Takes no shard lock (a view reads rows, it does not change a
 * shard's data), only the map's LWLock in shared mode to read it.  Always
 * true in single-node mode; in cluster mode false for every tenant until
 * the coordinator has loaded the map.
 */
bool
silo_cluster_owns_tenant(const char *tenant)
{
	SiloShard	s;

	if (!silo_cluster_mode())
		return true;
	return silo_shard_of(tenant, &s) && s.local;
}

/*
 * silo_cluster_snapshot: a copy of the whole map for the views, and
 * whether this node is a registered member with a live deadline.
 * Returns the number of shards copied into out (room for
 * SILO_MAX_SHARDS); in single-node mode the one local shard.
 */
int
silo_cluster_snapshot(SiloShard *out, bool *member, bool *serving)
{
	int			n;

	if (!silo_cluster_mode())
	{
		(void) silo_shard_of("-", &out[0]);
		*member = false;
		*serving = true;
		return 1;
	}
	if (cluster_shared == NULL)
	{
		*member = *serving = false;
		return 0;
	}
	LWLockAcquire(cluster_shared->lock, LW_SHARED);
	n = cluster_shared->configured ? cluster_shared->nshards : 0;
	memcpy(out, cluster_shared->shards, sizeof(SiloShard) * n);
	*member = cluster_shared->member;
	LWLockRelease(cluster_shared->lock);
	*serving = silo_monotonic_us() < pg_atomic_read_u64(&cluster_shared->serve_until);
	return n;
}

/*
 * silo_cluster_publish: the coordinator's write of the whole map (shards
 * sorted by range start, covering the line), and whether this node's
 * membership is registered.
 */
void
silo_cluster_publish(const SiloShard *shards, int n, bool member)
{
	if (cluster_shared == NULL)
		return;
	Assert(n >= 0 && n <= SILO_MAX_SHARDS);
	LWLockAcquire(cluster_shared->lock, LW_EXCLUSIVE);
	memcpy(cluster_shared->shards, shards, sizeof(SiloShard) * n);
	cluster_shared->nshards = n;
	cluster_shared->configured = n > 0;
	cluster_shared->member = member;
	pg_atomic_fetch_add_u64(&cluster_shared->generation, 1);
	LWLockRelease(cluster_shared->lock);
}

/*
 * silo_cluster_serve_until: the coordinator's self-fencing deadline on
 * the monotonic clock (0: stop serving now).
 */
void
silo_cluster_serve_until(uint64 until_us)
{
	if (cluster_shared != NULL)
		pg_atomic_write_u64(&cluster_shared->serve_until, until_us);
}

/*
 * silo_cluster_set_coordinator: the coordinator's pid, published while it
 * runs (0 when it exits).
 */
void
silo_cluster_set_coordinator(int pid)
{
	if (cluster_shared == NULL)
		return;
	LWLockAcquire(cluster_shared->lock, LW_EXCLUSIVE);
	cluster_shared->pid = pid;
	LWLockRelease(cluster_shared->lock);
}
