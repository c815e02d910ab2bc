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
 *	  placement.c	rendezvous hashing over the live members (draining
 *					members excluded)
 *	  moves.c		a shard's move: its record in etcd, the phases' txns,
 *					the target's request, what the views show
 *	  move_source.c	the source's side of a move: publish, pause, drain,
 *					release, clean up
 *	  move_target.c	the target's side: wipe, subscribe, verify, acquire
 *	  moves_sql.c	the connection to this node the moves run SQL over
 *					(libpq, asynchronous), and silo.shard_state's mirror
 *	  json.c		the values of member, owner, move and shard map keys
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
	char		repl_conninfo[SILO_CONNINFO_LEN];	/* how to replicate from it */
	bool		draining;		/* leaving: placement gives it nothing */
	int64		lease;
	int64		mod_revision;
} CoordMember;

/* the phases of a move record P/coord/moves/<id> (moves.c), in order */
typedef enum CoordMovePhase
{
	MOVE_NONE = 0,				/* no record, or an unreadable one */
	MOVE_REQUESTED,
	MOVE_PUBLISHED,
	MOVE_COPYING,
	MOVE_SYNCED,
	MOVE_DRAINED,
	MOVE_VERIFIED,
	MOVE_RELEASED,
	MOVE_ACQUIRED,
	MOVE_ABORTED
} CoordMovePhase;

/* a shard's move record, as last read */
typedef struct CoordMove
{
	bool		present;
	CoordMovePhase phase;
	int64		create_revision;	/* the move's id */
	int64		mod_revision;
	char		source[SILO_NODE_ID_LEN];
	char		target[SILO_NODE_ID_LEN];
	char		source_conninfo[SILO_CONNINFO_LEN]; /* the source's replication conninfo */
	char		lsn[32];		/* the source's final LSN, from drained on */
	char		reason[256];	/* why it was aborted */
	char		created_at[40];
	char		paused_at[40];	/* the source's wall clock at the pause */
	char	   *setsums;		/* the source's, from drained on (cs->cxt) */
} CoordMove;

/* this node's row of silo.shard_state, mirrored (moves_sql.c) */
typedef enum CoordLocalState
{
	LOCAL_NONE = 0,
	LOCAL_OWNED,
	LOCAL_SENDING,
	LOCAL_PAUSED,
	LOCAL_RELEASED,
	LOCAL_RECEIVING,
	LOCAL_RECEIVED,
	LOCAL_STALE
} CoordLocalState;

typedef struct CoordLocal
{
	CoordLocalState state;
	int64		move_id;
} CoordLocal;

/* what this node is doing about a shard's move right now (not durable) */
/* a move's tail session (move_tail.c) */
typedef enum CoordTailState
{
	TAIL_NONE = 0,				/* not started for this move, or stopped */
	TAIL_SUMMING,				/* summing the rows before the pause */
	TAIL_READY,					/* summed; waiting for the pause's end */
	TAIL_DONE,					/* the setsums are in tail_result */
	TAIL_FAILED					/* sum the whole shard instead */
} CoordTailState;

typedef struct CoordMoveRun
{
	int64		move_id;		/* the move step belongs to */
	int			step;			/* how far this node's side got in the phase */
	bool		paused;			/* the source paused the shard in shared memory */
	uint64		paused_at_us;
	uint64		next_poll_us;
	uint64		not_before_us;	/* the target waits after a move gave up */
	int			backoff_ms;
	uint64		peer_gone_us;	/* when the peer was first seen not a member */
	uint64		synced_at_us;	/* the source first saw phase synced (this run) */
	bool		aborting;		/* the source gives up: retried until recorded */
	char		abort_why[256];
	bool		hold_logged;
	bool		logged;			/* a once-per-move message */
	char		lsn[32];
	char		paused_at[40];	/* wall clock, for the record */
	char	   *setsums;		/* the source's own, during the pause */
	/* the tail's session (move_tail.c) */
	void	   *tail_conn;		/* PGconn *: libpq's header stays out of here */
	CoordTailState tail_state;
	int64		tail_move_id;	/* the move the tail was started for */
	uint64		tail_started_us;
	bool		tail_lsn_sent;	/* the target recorded its LSN for the tail */
	char	   *tail_result;	/* TAIL_DONE: the setsums */
} CoordMoveRun;

/* what a move's statement is for (CoordSql.tag), per shard */
typedef enum CoordSqlTag
{
	SQL_WIPE = 1,				/* silo.shard_wipe */
	SQL_OWNED,					/* silo.shard_state_set(..., 'owned') */
	SQL_SRC_PREPARE,
	SQL_SRC_LAG,
	SQL_SRC_DRAIN,
	SQL_SRC_PAUSED,
	SQL_SRC_SETSUMS,
	SQL_SRC_FLUSHED,
	SQL_SRC_RELEASED,
	SQL_SRC_CLEANUP,
	SQL_TGT_UNSUBSCRIBE,
	SQL_TGT_PREPARE,
	SQL_TGT_SUBSCRIBE,
	SQL_TGT_PROGRESS,
	SQL_TGT_SETSUMS,
	SQL_TGT_RECEIVED,
	SQL_TGT_ACQUIRED,
	SQL_TGT_TAIL_PUBLISH,		/* silo.shard_publish of the tail's publication */
	SQL_TGT_TAIL_LSN,			/* the target's LSN for its tail */
	SQL_SWEEP					/* silo.move_source_sweep (shard -1) */
} CoordSqlTag;

/* the statement in flight on the connection to this node (moves_sql.c) */
typedef struct CoordSql
{
	struct pg_conn *conn;
	uint64		next_connect_us;
	bool		connect_failing;
	bool		busy;			/* a statement was sent */
	bool		done;			/* its result waits to be taken */
	int			shard;			/* whose step sent it */
	int			tag;
	int64		move_id;
	bool		ok;
	char	   *value;			/* first column of the first row, or NULL */
	char	   *error;
	uint64		sent_us;		/* when sent; once done, when it ended */
	int			unclaimed;		/* its result was seen untaken */
} CoordSql;

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

	/* moves (moves*.c) */
	char	   *move_prefix;	/* "P/coord/moves/" */
	CoordMove  *moves;			/* [SILO_MAX_SHARDS] */
	CoordMoveRun *runs;			/* [SILO_MAX_SHARDS] */
	CoordLocal *local;			/* [SILO_MAX_SHARDS]: silo.shard_state */
	bool		local_loaded;
	CoordSql	sql;
	char		repl_conninfo[SILO_CONNINFO_LEN];	/* what peers replicate from */
	bool		draining;		/* silo.draining, as advertised */
	uint64		next_sweep_us;	/* the next sweep of leftover slots */

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

/* moves.c, move_source.c, move_target.c, moves_sql.c */
extern const char *coord_move_phase_name(CoordMovePhase phase);
extern CoordMovePhase coord_move_phase_of(const char *name);
extern void coord_moves_init(CoordState *cs);
extern void coord_moves_step(CoordState *cs);
extern bool coord_moves_busy(CoordState *cs);
extern void coord_move_store(CoordState *cs, int shard, const EtcdKeyValue *kv, bool deleted);
extern bool coord_move_request(CoordState *cs, int shard, const CoordMember *source);
extern bool coord_move_ready_to_acquire(CoordState *cs, int shard);
extern void coord_move_acquired_plainly(CoordState *cs, int shard);
extern void coord_move_publish_state(CoordState *cs, int shard, SiloShard *out);
extern bool coord_move_txn(CoordState *cs, int shard, CoordMovePhase phase, const char *why,
						   EtcdCompare *cmp, int ncmp, EtcdOp *ops, int nops, int64 *revision);
extern bool coord_move_claim_owner(CoordState *cs, int shard, CoordMovePhase phase,
								   const char *why);
extern bool coord_move_held(CoordState *cs, int shard, CoordMovePhase phase);
extern void coord_move_bounds(CoordState *cs, int shard, char *lo, char *hi);
extern void coord_move_source(CoordState *cs, int shard);
extern void coord_move_target(CoordState *cs, int shard);
extern void coord_move_source_sweep(CoordState *cs);
extern void coord_sql_poll(CoordState *cs);
extern bool coord_sql_send(CoordState *cs, int shard, int tag, const char *sql);
extern bool coord_sql_take(CoordState *cs, int shard, int tag, bool *ok, char **value);
extern bool coord_sql_pending(CoordState *cs, int shard);
extern bool coord_local_load(CoordState *cs);
extern CoordLocalState coord_local_state_of(const char *name);
extern void coord_sql_close(CoordState *cs);
extern char *coord_sql_conninfo(const char *application_name);

/* move_tail.c */
extern void coord_tail_start(CoordState *cs, int shard, const char *publication,
							 const char *finish_state);
extern void coord_tail_poll(CoordState *cs, int shard);
extern void coord_tail_fail(CoordState *cs, int shard, const char *why);
extern void coord_tail_stop(CoordState *cs, int shard);
extern void coord_sql_discard_unclaimed(CoordState *cs);

/* placement.c */
extern uint64 coord_placement_weight(const char *node_id, int shard);
extern const CoordMember *coord_placement_owner(const CoordState *cs, int shard);

/* json.c */
extern char *coord_member_value(const CoordState *cs);
extern char *coord_owner_value(const CoordState *cs, const char *acquired_at);
extern bool coord_parse_member(const char *json, size_t len, CoordMember *out);
extern bool coord_parse_owner(const char *json, size_t len, CoordOwner *out);
extern char *coord_map_value(int n);
extern char *coord_move_value(const CoordMove *m, int shard);
extern bool coord_parse_move(const char *json, size_t len, CoordMove *out);
extern bool coord_parse_map(const char *json, size_t len, SiloShard *shards, int *n,
							char **why);
extern void coord_now_iso(char *buf, size_t size);

#endif							/* SILO_COORDINATOR_H */
