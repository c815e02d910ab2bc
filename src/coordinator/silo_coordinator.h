/*-------------------------------------------------------------------------
 *
 * silo_coordinator.h
 *	  The cluster coordinator: a background worker in a library of its own
 *	  (silo_coordinator.so, linked with the etcd client, libcurl and
 *	  jansson), so that ordinary backends never load libcurl.  It keeps
 *	  this node's membership in etcd, reads and watches the shard map and
 *	  the owners, acquires the shards placement gives it, and writes what
 *	  this node may serve into shared memory (src/cluster/shardmap.c),
 *	  which is all the request path reads.  docs/cluster.md is the spec.
 *
 *	  May call cluster/ (silo.so's functions, which resolve at load because
 *	  silo.so is preloaded with RTLD_GLOBAL) and etcd/ (src/README.md has
 *	  the layers).  Never includes jansson.h: the JSON of etcd's values is
 *	  read and written with PostgreSQL's own JSON parser (json.c).
 *
 *	  coordinator.c	the worker's entry point, signals, the main loop,
 *					graceful stop, reload, the etcd client's timeouts
 *	  membership.c	the membership lease, the member key, keepalives and
 *					the self-fencing deadline
 *	  view.c		this node's mirror of P/coord/: full reads, the shard
 *					map (created once), applying keys and watch events
 *	  watch.c		the watch of P/coord/, its ends and restarts, the
 *					periodic freshness check
 *	  owners.c		acquiring, re-stamping and releasing owner keys, the
 *					reconciliation of placement with the owners, the
 *					publication into shared memory
 *	  placement.c	rendezvous hashing over the live members
 *	  json.c		the values of member, owner and shard map keys
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_COORDINATOR_H
#define SILO_COORDINATOR_H

#include "silo_cluster.h"

#include "etcd.h"

/* the smallest self-fencing margin (the margin is max(this, TTL / 5)) */
#define COORD_MIN_MARGIN_MS		500
/* longest wait of one loop iteration with a watch running (its poll) */
#define COORD_WATCH_POLL_MS		100
/* longest wait of one loop iteration without a watch */
#define COORD_MAX_WAIT_MS		1000
/* the watch's silence limit: past etcd's default progress interval (10 min) */
#define COORD_WATCH_SILENCE_MS	(11 * 60 * 1000)
/* backoff of re-reads after a watch ended or a read failed */
#define COORD_BACKOFF_MIN_MS	100
#define COORD_BACKOFF_MAX_MS	2000
/* retry interval of a registration refused because the member key exists */
#define COORD_REGISTER_RETRY_MS 500

/* a live member, from its key P/coord/members/<node_id> */
typedef struct CoordMember
{
	char		node_id[SILO_NODE_ID_LEN];
	char		conninfo[SILO_CONNINFO_LEN];
	int64		lease;
	int64		mod_revision;
} CoordMember;

/* a shard's owner key P/coord/shards/<id>/owner, as last read */
typedef struct CoordOwner
{
	bool		present;
	char		node_id[SILO_NODE_ID_LEN];	/* "" when the value is unreadable */
	char		conninfo[SILO_CONNINFO_LEN];
	char		acquired_at[40];
	int64		create_revision;
	int64		mod_revision;
} CoordOwner;

/* the coordinator's whole state (one per process) */
typedef struct CoordState
{
	EtcdClient *client;
	bool		version_ok;		/* etcd's cluster version is 3.4 or later */
	uint64		next_version_us;
	MemoryContext cxt;			/* long-lived allocations */

	/* keys */
	char	   *prefix;			/* "P/coord/" */
	char	   *member_prefix;	/* "P/coord/members/" */
	char	   *shard_prefix;	/* "P/coord/shards/" */
	char	   *member_key;		/* this node's */
	char	   *map_key;		/* "P/coord/shardmap" */

	/* timing, from silo.lease_ttl_s */
	int			ttl_s;
	uint64		interval_us;	/* keepalive interval: TTL / 5 */
	uint64		margin_us;		/* self-fencing margin */
	int			request_timeout_ms;

	/* membership */
	int64		lease_id;		/* 0: none */
	bool		registered;		/* our member key is under lease_id */
	bool		member_gone;	/* registered, but the key was seen gone */
	uint64		deadline_us;	/* the published serving deadline */
	uint64		next_keepalive_us;
	uint64		next_register_us;
	bool		blocked_logged; /* "already registered" logged */
	char		incarnation[33];
	char		started_at[40];
	char		conninfo[SILO_CONNINFO_LEN];	/* silo.advertise_conninfo */
	bool		member_value_stale; /* conninfo changed since registration */
	bool		keepalive_failing;	/* logged once per run of failures */

	/* the mirror of P/coord/ */
	bool		synced;			/* a full read succeeded and is current */
	uint64		next_sync_us;
	int			backoff_ms;
	bool		read_failing;	/* logged once per run of failures */
	bool		map_logged;		/* how this node got the map, logged */
	int64		view_revision;	/* revision of the last full read */
	bool		map_known;
	int			nshards;
	int64		map_mod_revision;
	SiloShard  *shards;			/* [SILO_MAX_SHARDS]: bounds only */
	CoordOwner *owners;			/* [SILO_MAX_SHARDS] */
	int64	   *tokens;			/* [SILO_MAX_SHARDS]: fencing token, 0 = none */
	bool	   *placement_logged;	/* [SILO_MAX_SHARDS] */
	CoordMember *members;
	int			nmembers;
	int			maxmembers;

	/* the watch */
	EtcdWatch  *watch;
	uint64		next_fresh_us;
	bool		fresh_suspect;	/* the last freshness check disagreed */

	/* work for the loop */
	bool		dirty;			/* publish to shared memory */
	bool		reconcile;		/* run the reconciliation */
	uint64		next_reconcile_us;
	bool		txn_failing;	/* logged once per run of failures */
} CoordState;

/* coordinator.c */
extern PGDLLEXPORT void silo_coordinator_main(Datum main_arg);
extern uint64 coord_jitter_ms(int base_ms);

/* membership.c */
extern void coord_membership_init(CoordState *cs);
extern void coord_membership_step(CoordState *cs);
extern void coord_membership_lost(CoordState *cs, const char *why);
extern void coord_membership_revoke(CoordState *cs);
extern void coord_membership_update_value(CoordState *cs);

/* view.c */
extern void coord_view_init(CoordState *cs);
extern bool coord_view_resync(CoordState *cs);
extern void coord_view_apply_kv(CoordState *cs, const EtcdKeyValue *kv, bool deleted);
extern bool coord_view_matches(CoordState *cs, const EtcdRangeResult *keys);
extern CoordMember *coord_view_member(CoordState *cs, const char *node_id);
extern void coord_view_read_failed(CoordState *cs, const char *what, EtcdStatus st);

/* watch.c */
extern void coord_watch_start(CoordState *cs);
extern void coord_watch_poll(CoordState *cs, int timeout_ms);
extern void coord_watch_stop(CoordState *cs);
extern void coord_watch_check_fresh(CoordState *cs);

/* owners.c */
extern bool coord_owners_reconcile(CoordState *cs);
extern bool coord_owner_release(CoordState *cs, int shard);
extern void coord_publish(CoordState *cs);
extern bool coord_owner_is_me(const CoordOwner *o);

/* placement.c */
extern uint64 coord_placement_weight(const char *node_id, int shard);
extern const CoordMember *coord_placement_owner(const CoordState *cs, int shard);

/* json.c */
extern char *coord_member_value(const CoordState *cs);
extern char *coord_owner_value(const CoordState *cs, const char *acquired_at);
extern bool coord_parse_member(const char *json, size_t len, CoordMember *out);
extern bool coord_parse_owner(const char *json, size_t len, CoordOwner *out);
extern char *coord_map_value(int n);
extern bool coord_parse_map(const char *json, size_t len, SiloShard *shards, int *n,
							char **why);
extern void coord_now_iso(char *buf, size_t size);

#endif							/* SILO_COORDINATOR_H */
