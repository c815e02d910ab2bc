/*-------------------------------------------------------------------------
 *
 * silo_cluster.h
 *	  Cluster mode's part inside silo.so: what a node needs to take part in
 *	  a cluster of PostgreSQL servers that share silo's tenants out as
 *	  shards.  (The coordinator's etcd client is not here: it lives in
 *	  src/etcd/ and is not linked into silo.so.)  May call ipc/, storage/
 *	  and util/ (src/README.md has the layers).
 *
 *	  setsum.c: a composable multiset checksum, used to check that a
 *	  shard's rows arrived whole on another node.  shardmap.c: the shard
 *	  map in shared memory and the ownership check.  pause.c: the wait of a
 *	  move's pause for the transactions that passed the check.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_CLUSTER_H
#define SILO_CLUSTER_H

#include "silo_util.h"

#include "access/xlogdefs.h"
#include "fmgr.h"

/*
 * setsum.c: the setsum of a multiset of byte strings.
 *
 * Each item is hashed with SHA-256 (PostgreSQL's, common/cryptohash.h);
 * the 32-byte digest is read as 8 unsigned 32-bit lanes, little-endian
 * (lane i is digest bytes 4i..4i+3, byte 4i the least significant).  Lane
 * i is summed modulo the prime silo_setsum_primes[i].  The setsum of a
 * multiset is the lane-wise sum of its items' lanes, so it does not depend
 * on order, the setsum of a union is the sum of the setsums and an item is
 * removed by subtracting its lanes.  The empty multiset is all zeros.
 *
 * As text a setsum is 64 lowercase hexadecimal digits: 8 digits per lane,
 * lane 0 first, each lane written most significant digit first (the lane's
 * value as "%08x").
 *
 * The idea is Dropbox's setsum; theirs hashes with SHA3-256, this one with
 * SHA-256, so the values of the two are not interchangeable.
 */
#define SILO_SETSUM_LANES		8
#define SILO_SETSUM_HEX_LEN		(SILO_SETSUM_LANES * 8)

typedef struct SiloSetsum
{
	uint32		lane[SILO_SETSUM_LANES];	/* lane[i] < silo_setsum_primes[i] */
} SiloSetsum;

extern const uint32 silo_setsum_primes[SILO_SETSUM_LANES];

extern void silo_setsum_clear(SiloSetsum *s);
extern void silo_setsum_add_item(SiloSetsum *s, const char *data, size_t len);
extern void silo_setsum_union(SiloSetsum *into, const SiloSetsum *other);
extern void silo_setsum_subtract(SiloSetsum *from, const SiloSetsum *other);
extern void silo_setsum_to_hex(const SiloSetsum *s, char *out);
extern void silo_setsum_from_text(text *t, const char *argname, SiloSetsum *out);

/* setsum.c: SQL-callable (sql/silo--1.6--1.7.sql) */
extern Datum silo_setsum_accum(PG_FUNCTION_ARGS);
extern Datum silo_setsum_combine(PG_FUNCTION_ARGS);
extern Datum silo_setsum_serialize(PG_FUNCTION_ARGS);
extern Datum silo_setsum_deserialize(PG_FUNCTION_ARGS);
extern Datum silo_setsum_final(PG_FUNCTION_ARGS);
extern Datum silo_setsum_add(PG_FUNCTION_ARGS);
extern Datum silo_setsum_sub(PG_FUNCTION_ARGS);
extern Datum silo_setsum_item(PG_FUNCTION_ARGS);

/*
 * shardmap.c: the shard map and this node's ownership, in shared memory,
 * and the check of a tenant's shard.
 */
#define SILO_MAX_SHARDS			1024
#define SILO_NODE_ID_LEN		64
#define SILO_CONNINFO_LEN		512

/* locktag_field4 of the shard locks a pause waits on (key locks: 0x5110) */
#define SILO_LOCKTAG_SHARD		0x5111

/* What this node may do with a shard it owns. */
typedef enum SiloShardState
{
	SILO_SHARD_SERVING,			/* owned and served */
	SILO_SHARD_ACQUIRING,		/* being acquired: rows may be arriving */
	SILO_SHARD_PAUSED			/* owned, paused for a move */
} SiloShardState;

/* A move this node takes part in, for the views (the coordinator's). */
typedef enum SiloShardMove
{
	SILO_MOVE_NONE,
	SILO_MOVE_OUT,				/* this node is the source: its rows are copied */
	SILO_MOVE_IN				/* this node is the target: rows are arriving */
} SiloShardMove;

typedef struct SiloShard
{
	int32		id;
	int64		range_start;	/* first hash of the shard */
	int64		range_end;		/* first hash past it, unless end_is_max */
	bool		end_is_max;		/* the range ends at 2^63 (the last shard) */
	bool		local;			/* owned by this node */
	uint8		state;			/* SiloShardState, when local */
	uint8		move;			/* SiloShardMove */
	bool		owner_down;		/* its owner is not a member: nobody serves it */
	char		owner_node_id[SILO_NODE_ID_LEN];	/* "" when unowned */
	char		owner_conninfo[SILO_CONNINFO_LEN];
} SiloShard;

/* GUCs (registered by module.c) */
extern char *silo_node_id;
extern char *silo_etcd_endpoints;
extern char *silo_cluster_prefix;
extern char *silo_advertise_conninfo;
extern char *silo_replication_conninfo;
extern int	silo_initial_shard_count;
extern int	silo_lease_ttl_s;

extern bool silo_cluster_mode(void);
extern void silo_cluster_shmem_request(void);
extern void silo_cluster_shmem_startup(void);
extern uint64 silo_monotonic_us(void);
extern int64 silo_tenant_hash(const char *tenant, int len);
extern void silo_shard_bounds(int i, int n, int128 *start, int128 *end);
extern bool silo_shard_of(const char *tenant, SiloShard *out);
extern void silo_cluster_check_tenant(const char *tenant);
extern bool silo_cluster_serves_tenant(const char *tenant);
extern bool silo_cluster_owns_tenant(const char *tenant);
extern int	silo_cluster_snapshot(SiloShard *out, bool *member, bool *serving);
extern void silo_cluster_publish(const SiloShard *shards, int n, bool member);
extern void silo_cluster_serve_until(uint64 until_us);
extern void silo_cluster_set_coordinator(int pid);
extern bool silo_cluster_shard_by_id(int id, SiloShard *out);

/* pause.c: the wait of a move's pause, and the broker's filter */
extern int	silo_move_drain_timeout_ms;
extern int	silo_move_pause_limit_ms;
extern bool silo_draining;
extern int	silo_max_moves_in;
extern char *silo_test_move_pause_at;
extern XLogRecPtr silo_cluster_drain(int shard, int timeout_ms);

/* tail.c: a move's setsums, the pause summing only what changed */
extern char *silo_cluster_tail_setsums(int shard, int64 move, int64 lo, bool hi_null, int64 hi,
									   const char *pub, const char *finish_state, int limit_ms);

#endif							/* SILO_CLUSTER_H */
