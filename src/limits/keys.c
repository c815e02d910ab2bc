/*-------------------------------------------------------------------------
 *
 * keys.c
 *	  Key locks: the lock every read-then-write of a limit key's rows
 *	  takes, and the global order that keeps silo's calls free of
 *	  deadlocks (chain.c's header explains the rules).
 *
 *-------------------------------------------------------------------------
 */
#include "silo_limits.h"

#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lock.h"

/*
 * Key locks are entries in the shared lock table, which is sized for
 * max_locks_per_transaction per backend.  Past this many keys in one
 * transaction (a bulk enqueue_many over many keys), walks are deferred
 * to the broker instead of taking more; releases still lock what they
 * must, a job's keys being at most SILO_MAX_LIMITS.
 */
#define KEYS_MAX_XACT_KEYS 256

/* Set while the broker (or run_maintenance) runs: never wait for keys. */
bool		silo_limits_nowait = false;
bool		silo_limits_shard_filter = false;
static bool keys_is_broker = false;

/* The greatest key hash this transaction holds a lock on, and how many. */
static bool keys_holds_any = false;
static uint64 keys_max_held = 0;
static int	keys_nkeys = 0;

/*
 * silo_limits_xact_end: forget the transaction's key locks (they are
 * released by the lock manager at transaction end).
 */
void
silo_limits_xact_end(void)
{
	keys_holds_any = false;
	keys_max_held = 0;
	keys_nkeys = 0;
	silo_limits_nowait = keys_is_broker;
}

/*
 * silo_limits_set_broker: this process is the broker: it never waits for
 * a key lock.
 */
void
silo_limits_set_broker(void)
{
	keys_is_broker = true;
	silo_limits_nowait = true;
}

/*
 * silo_key_hash: the 64-bit lock hash of a key: domain 'c' for concurrency
 * keys (fixed and floating share one key space), 'r' for rate buckets.
 */
uint64
silo_key_hash(char domain, const char *tenant, const char *a, const char *b)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, domain);
	appendBinaryStringInfo(&buf, tenant, strlen(tenant) + 1);
	appendBinaryStringInfo(&buf, a, strlen(a) + 1);
	if (b)
		appendBinaryStringInfo(&buf, b, strlen(b) + 1);
	return hash_bytes_extended((const unsigned char *) buf.data, buf.len, 0x5110);
}

/*
 * silo_key_lock: lock a key hash.  Waits only when always_wait is set or
 * the hash is above every key already held (and never in nowait mode);
 * otherwise only tries.  Returns false when the lock is busy, or when the
 * transaction already holds KEYS_MAX_XACT_KEYS keys (unless always_wait).
 */
bool
silo_key_lock(uint64 h, bool always_wait)
{
	LOCKTAG		tag;
	bool		wait;
	LockAcquireResult res;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 SILO_LOCKTAG_CLASS);
	if (!always_wait && keys_nkeys >= KEYS_MAX_XACT_KEYS &&
		!LockHeldByMe(&tag, ExclusiveLock))
		return false;
	wait = !silo_limits_nowait && (always_wait || !keys_holds_any || h > keys_max_held);
	res = LockAcquire(&tag, ExclusiveLock, false, !wait);
	if (res == LOCKACQUIRE_NOT_AVAIL)
		return false;
	if (res == LOCKACQUIRE_OK)
		keys_nkeys++;
	if (!keys_holds_any || h > keys_max_held)
		keys_max_held = h;
	keys_holds_any = true;
	return true;
}

/*
 * silo_limits_key_busy: the error for a key the broker (or
 * run_maintenance) could not lock without waiting; the broker retries it
 * on a later round.
 */
void
silo_limits_key_busy(const char *tenant, const char *key)
{
	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 errmsg("limit key \"%s\" of tenant \"%s\" is locked by another transaction",
					key, tenant)));
}

/*
 * silo_limits_lock_key: lock one concurrency key, waiting per the global
 * order; raises 55P03 when busy in nowait mode.
 */
void
silo_limits_lock_key(const char *tenant, const char *queue)
{
	if (!silo_key_lock(silo_key_hash('c', tenant, queue, NULL), true))
		silo_limits_key_busy(tenant, queue);
}

/* A key and its hash, for sorting. */
typedef struct KeysKey
{
	uint64		hash;
	char	   *queue;
} KeysKey;

/*
 * keys_key_cmp: qsort comparator of keys in hash order.
 */
static int
keys_key_cmp(const void *a, const void *b)
{
	uint64		x = ((const KeysKey *) a)->hash;
	uint64		y = ((const KeysKey *) b)->hash;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/*
 * keys_sorted: the concurrency keys of queues with their lock
 * hashes, in hash order (the global lock order).
 */
static KeysKey *
keys_sorted(const char *tenant, List *queues)
{
	KeysKey   *keys = palloc(sizeof(KeysKey) * (list_length(queues) + 1));
	ListCell   *lc;
	int			i = 0;

	foreach(lc, queues)
	{
		keys[i].queue = (char *) lfirst(lc);
		keys[i].hash = silo_key_hash('c', tenant, keys[i].queue, NULL);
		i++;
	}
	qsort(keys, i, sizeof(KeysKey), keys_key_cmp);
	return keys;
}

/*
 * silo_limits_lock_all: lock a set of concurrency keys in hash order,
 * so that two transactions releasing the same keys cannot deadlock.
 */
void
silo_limits_lock_all(const char *tenant, List *queues)
{
	KeysKey   *keys = keys_sorted(tenant, queues);
	int			i;

	for (i = 0; i < list_length(queues); i++)
		if (!silo_key_lock(keys[i].hash, true))
			silo_limits_key_busy(tenant, keys[i].queue);
}

/*
 * silo_limit_queues: the concurrency and floating keys of a limit list.
 */
List *
silo_limit_queues(SiloLimit *limits, int n)
{
	List	   *out = NIL;
	int			i;

	for (i = 0; i < n; i++)
		if (limits[i].type != SILO_LIMIT_RATE)
			out = lappend(out, limits[i].key);
	return out;
}
