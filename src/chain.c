/*-------------------------------------------------------------------------
 *
 * chain.c
 *	  The limit chain: key locks, walking a job's limits in order, and
 *	  granting waiting requesters.  Releasing the slots a job holds is in
 *	  release.c.
 *
 * Where a pending attempt of a job with limits can be, exactly one of:
 *	  silo.chain_task			its start time has not come, or a rate limit
 *								re-check is due later, or its walk was deferred
 *	  silo.concurrency_request	waiting for a slot of one key (0x08)
 *	  silo.task					granted every limit: leasable once due
 *	  silo.task_lease			running
 * and, all along, one silo.concurrency_holder row (0x09) per key it holds.
 * Every move between these places, and every holder row written or
 * deleted, happens in the transaction of the operation that caused it.
 *
 * Serialization: every read-then-write of a key's holders, requesters,
 * floating state or rate bucket happens under that key's lock, a
 * transaction-scoped lock in the advisory lock space (field4 =
 * SILO_LOCKTAG_CLASS, so it never collides with user advisory locks).
 * Deadlock freedom among silo's calls comes from one rule: a transaction
 * waits for a key lock only when the key's hash is greater than every key
 * lock it already holds (a global order); otherwise it only tries.  A walk
 * that cannot take a key defers the rest of its chain to a chain task the
 * broker walks; a release that cannot take a key deletes its holder row
 * anyway and leaves a regrant marker for the broker.  A job's keys are
 * taken in hash order.  The broker never waits: a busy key makes it retry
 * later.  (Cancel and the refresh reports wait for their keys; see
 * docs/limits.md.)
 *
 * Lock order with rows: lease row, then the job's status row, then key
 * locks.  Grants of other jobs touch only rows created or owned under the
 * key lock (requester, holder, new task rows), never job_status rows, so
 * a cancel holding a job row while waiting for a key cannot deadlock
 * with the grant that holds the key.
 *
 *-------------------------------------------------------------------------
 */
#include "silo.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"

/* Requesters granted per round trip. */
#define CHAIN_GRANT_BATCH	32

/*
 * Key locks are entries in the shared lock table, which is sized for
 * max_locks_per_transaction per backend.  Past this many keys in one
 * transaction (a bulk enqueue_many over many keys), walks are deferred
 * to the broker instead of taking more; releases still lock what they
 * must, a job's keys being at most SILO_MAX_LIMITS.
 */
#define CHAIN_MAX_XACT_KEYS 256

/* Set while the broker (or run_maintenance) runs: never wait for keys. */
bool		silo_limits_nowait = false;
static bool chain_is_broker = false;

/* The greatest key hash this transaction holds a lock on, and how many. */
static bool chain_holds_any = false;
static uint64 chain_max_held = 0;
static int	chain_nkeys = 0;

static void chain_walk(SiloChainJob *job, int from, SiloChainMode mode, TimestampTz now);

/*
 * silo_limits_xact_end: forget the transaction's key locks (they are
 * released by the lock manager at transaction end).
 */
void
silo_limits_xact_end(void)
{
	chain_holds_any = false;
	chain_max_held = 0;
	chain_nkeys = 0;
	silo_limits_nowait = chain_is_broker;
}

/*
 * silo_limits_set_broker: this process is the broker: it never waits for
 * a key lock.
 */
void
silo_limits_set_broker(void)
{
	chain_is_broker = true;
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
 * transaction already holds CHAIN_MAX_XACT_KEYS keys (unless always_wait).
 */
bool
silo_key_lock(uint64 h, bool always_wait)
{
	LOCKTAG		tag;
	bool		wait;
	LockAcquireResult res;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h,
						 SILO_LOCKTAG_CLASS);
	if (!always_wait && chain_nkeys >= CHAIN_MAX_XACT_KEYS &&
		!LockHeldByMe(&tag, ExclusiveLock))
		return false;
	wait = !silo_limits_nowait && (always_wait || !chain_holds_any || h > chain_max_held);
	res = LockAcquire(&tag, ExclusiveLock, false, !wait);
	if (res == LOCKACQUIRE_NOT_AVAIL)
		return false;
	if (res == LOCKACQUIRE_OK)
		chain_nkeys++;
	if (!chain_holds_any || h > chain_max_held)
		chain_max_held = h;
	chain_holds_any = true;
	return true;
}

/*
 * chain_busy: the error for a key the broker (or run_maintenance) could
 * not lock without waiting; the broker retries it on a later round.
 */
static void
chain_busy(const char *tenant, const char *key)
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
		chain_busy(tenant, queue);
}

/* A key and its hash, for sorting. */
typedef struct ChainKey
{
	uint64		hash;
	char	   *queue;
} ChainKey;

static int
chain_key_cmp(const void *a, const void *b)
{
	uint64		x = ((const ChainKey *) a)->hash;
	uint64		y = ((const ChainKey *) b)->hash;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/*
 * chain_sorted_keys: the concurrency keys of queues with their lock
 * hashes, in hash order (the global lock order).
 */
static ChainKey *
chain_sorted_keys(const char *tenant, List *queues)
{
	ChainKey   *keys = palloc(sizeof(ChainKey) * (list_length(queues) + 1));
	ListCell   *lc;
	int			i = 0;

	foreach(lc, queues)
	{
		keys[i].queue = (char *) lfirst(lc);
		keys[i].hash = silo_key_hash('c', tenant, keys[i].queue, NULL);
		i++;
	}
	qsort(keys, i, sizeof(ChainKey), chain_key_cmp);
	return keys;
}

/*
 * silo_limits_lock_all: lock a set of concurrency keys in hash order,
 * so that two transactions releasing the same keys cannot deadlock.
 */
void
silo_limits_lock_all(const char *tenant, List *queues)
{
	ChainKey   *keys = chain_sorted_keys(tenant, queues);
	int			i;

	for (i = 0; i < list_length(queues); i++)
		if (!silo_key_lock(keys[i].hash, true))
			chain_busy(tenant, keys[i].queue);
}

/*
 * silo_holds_datum / silo_holds_list: a list of keys as text[] and back.
 */
Datum
silo_holds_datum(List *holds)
{
	Datum	   *elems;
	ListCell   *lc;
	int			i = 0;

	if (holds == NIL)
		return PointerGetDatum(construct_empty_array(TEXTOID));
	elems = palloc(sizeof(Datum) * list_length(holds));
	foreach(lc, holds)
		elems[i++] = CStringGetTextDatum((char *) lfirst(lc));
	return PointerGetDatum(construct_array(elems, i, TEXTOID, -1, false, TYPALIGN_INT));
}

List *
silo_holds_list(Datum arr)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int			i;
	List	   *out = NIL;

	deconstruct_array(DatumGetArrayTypeP(arr), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &n);
	for (i = 0; i < n; i++)
		out = lappend(out, TextDatumGetCString(elems[i]));
	return out;
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

/*
 * silo_chain_load_limits: read and parse the job's stored limits.
 */
void
silo_chain_load_limits(SiloChainJob *job)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	bool		isnull;

	values[0] = CStringGetTextDatum(job->tenant);
	values[1] = CStringGetTextDatum(job->job_id);
	/*
	 * Not read_only: that would reuse the statement's snapshot, taken before
	 * a key-lock wait, and miss a job committed while we waited.
	 */
	silo_exec(&plan, "SELECT limits, ctid FROM silo.job_info WHERE tenant = $1 AND id = $2",
			  2, types, values, NULL, false, 1);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_INTERNAL),
				 errmsg("job \"%s\" of tenant \"%s\" has no job_info row",
						job->job_id, job->tenant)));
	job->nlimits = silo_parse_limits(DatumGetJsonbP(silo_col(0, 1, &isnull)), &job->limits, NULL);
	/* job_info rows are never updated: where it is stays a good hint */
	ItemPointerCopy((ItemPointer) DatumGetPointer(silo_col(0, 2, &isnull)), &job->info_tid);
	job->has_info_tid = true;
}

/*
 * chain_write_task: the job is granted every limit: write its leasable
 * task, in its place in the ready order, and wake its task group.
 */
static void
chain_write_task(SiloChainJob *job)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr hinted_plan = NULL;
	static const Oid types[12] = {
		TEXTOID, TIMESTAMPTZOID, INT2OID, TEXTOID, TEXTOID, INT4OID, INT4OID,
		UUIDOID, INT8OID, TEXTARRAYOID, TIDOID, TIDOID
	};
	Datum		values[12];

	values[0] = CStringGetTextDatum(job->task_group);
	values[1] = TimestampTzGetDatum(job->start_at);
	values[2] = Int16GetDatum((int16) job->priority);
	values[3] = CStringGetTextDatum(job->tenant);
	values[4] = CStringGetTextDatum(job->job_id);
	values[5] = Int32GetDatum(job->attempt);
	values[6] = Int32GetDatum(job->relative_attempt);
	values[7] = job->task_id;
	values[8] = Int64GetDatum(job->seq);
	values[9] = silo_holds_datum(job->holds);
	if ((job->has_info_tid || job->has_status_tid) && silo_status_index_exists())
	{
		char		nulls[12];

		/*
		 * The task carries the row hints the walk knows (1.5), as the task
		 * of a job without limits does: enqueue knows both, the broker's
		 * walk of a parked job both, a grant the job_info one.
		 */
		memset(nulls, ' ', sizeof(nulls));
		values[10] = PointerGetDatum(&job->info_tid);
		values[11] = PointerGetDatum(&job->status_tid);
		nulls[10] = job->has_info_tid ? ' ' : 'n';
		nulls[11] = job->has_status_tid ? ' ' : 'n';
		silo_exec(&hinted_plan,
				  "INSERT INTO silo.task (task_group, start_at, priority, tenant, job_id, attempt,"
				  "  relative_attempt, task_id, seq, due, holds, job_info_tid, job_status_tid)"
				  " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, true, $10, $11, $12)",
				  12, types, values, nulls, false, 0);
	}
	else
		silo_exec(&plan,
				  "INSERT INTO silo.task (task_group, start_at, priority, tenant, job_id, attempt,"
				  "  relative_attempt, task_id, seq, due, holds)"
				  " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, true, $10)",
				  10, types, values, NULL, false, 0);
	silo_notify_group(job->task_group);
}

/*
 * chain_write_chain_task: park the job's walk at limit index at until
 * run_at (a future start, a rate-limit re-check, or a deferred step).
 */
static void
chain_write_chain_task(SiloChainJob *job, int at, TimestampTz run_at)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[13] = {
		TEXTOID, TEXTOID, INT4OID, INT4OID, UUIDOID, TEXTOID, INT2OID, INT8OID,
		TIMESTAMPTZOID, TIMESTAMPTZOID, INT2OID, INT4OID, TEXTARRAYOID
	};
	Datum		values[13];

	values[0] = CStringGetTextDatum(job->tenant);
	values[1] = CStringGetTextDatum(job->job_id);
	values[2] = Int32GetDatum(job->attempt);
	values[3] = Int32GetDatum(job->relative_attempt);
	values[4] = job->task_id;
	values[5] = CStringGetTextDatum(job->task_group);
	values[6] = Int16GetDatum((int16) job->priority);
	values[7] = Int64GetDatum(job->seq);
	values[8] = TimestampTzGetDatum(job->start_at);
	values[9] = TimestampTzGetDatum(run_at);
	values[10] = Int16GetDatum((int16) at);
	values[11] = Int32GetDatum(job->rate_checks);
	values[12] = silo_holds_datum(job->holds);
	silo_exec(&plan,
			  "INSERT INTO silo.chain_task (tenant, job_id, attempt, relative_attempt, task_id,"
			  "  task_group, priority, seq, start_at, run_at, limit_index, rate_checks, holds)"
			  " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
			  13, types, values, NULL, false, 0);
	silo_wake_broker_at_commit();
}

/*
 * chain_write_request: queue the job for a slot of key (limit index at).
 * max is the job's own maxConcurrency, or 0 for a floating key.
 */
static void
chain_write_request(SiloChainJob *job, int at, const char *queue, int32 max, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[14] = {
		TEXTOID, TEXTOID, INT2OID, TIMESTAMPTZOID, INT8OID, INT4OID, TEXTOID,
		INT4OID, UUIDOID, TEXTOID, INT2OID, INT4OID, TEXTARRAYOID, TIMESTAMPTZOID
	};
	Datum		values[14];
	char		nulls[14];

	memset(nulls, ' ', sizeof(nulls));
	values[0] = CStringGetTextDatum(job->tenant);
	values[1] = CStringGetTextDatum(queue);
	values[2] = Int16GetDatum((int16) job->priority);
	values[3] = TimestampTzGetDatum(job->start_at);
	values[4] = Int64GetDatum(job->seq);
	values[5] = Int32GetDatum(job->attempt);
	values[6] = CStringGetTextDatum(job->job_id);
	values[7] = Int32GetDatum(job->relative_attempt);
	values[8] = job->task_id;
	values[9] = CStringGetTextDatum(job->task_group);
	values[10] = Int16GetDatum((int16) at);
	values[11] = Int32GetDatum(max);
	nulls[11] = max > 0 ? ' ' : 'n';
	values[12] = silo_holds_datum(job->holds);
	values[13] = TimestampTzGetDatum(now);
	silo_exec(&plan,
			  "INSERT INTO silo.concurrency_request (tenant, queue, priority, start_at, seq,"
			  "  attempt, job_id, relative_attempt, task_id, task_group, limit_index,"
			  "  max_concurrency, holds, requested_at)"
			  " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
			  14, types, values, nulls, false, 0);
}

/*
 * chain_write_holder: the job takes a slot of key.
 */
static void
chain_write_holder(const char *tenant, const char *queue, Datum task_id, const char *job_id,
				   int32 attempt, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[6] = {TEXTOID, TEXTOID, UUIDOID, TEXTOID, INT4OID, TIMESTAMPTZOID};
	Datum		values[6];

	values[0] = CStringGetTextDatum(tenant);
	values[1] = CStringGetTextDatum(queue);
	values[2] = task_id;
	values[3] = CStringGetTextDatum(job_id);
	values[4] = Int32GetDatum(attempt);
	values[5] = TimestampTzGetDatum(now);
	silo_exec(&plan,
			  "INSERT INTO silo.concurrency_holder (tenant, queue, task_id, job_id, attempt, granted_at)"
			  " VALUES ($1, $2, $3, $4, $5, $6)",
			  6, types, values, NULL, false, 0);
}

/*
 * chain_key_state: the number of holders of a key and whether it has
 * requesters.  The key lock must be held.
 */
static int64
chain_key_state(const char *tenant, const char *queue, bool *has_requesters)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];

	values[0] = CStringGetTextDatum(tenant);
	values[1] = CStringGetTextDatum(queue);
	silo_exec(&plan,
			  "SELECT (SELECT count(*) FROM silo.concurrency_holder WHERE tenant = $1 AND queue = $2),"
			  "       EXISTS (SELECT 1 FROM silo.concurrency_request WHERE tenant = $1 AND queue = $2)",
			  2, types, values, NULL, false, 0);
	*has_requesters = silo_col_bool(0, 2);
	return silo_col_int64(0, 1);
}

/*
 * chain_defer: a key could not be locked without risking a deadlock:
 * park the walk at limit index at, due now, for the broker.  In the
 * broker itself a busy key is an error, so the chain task it is walking
 * stays in place for a later round.
 */
static void
chain_defer(SiloChainJob *job, int at, SiloChainMode mode, TimestampTz now)
{
	if (mode == SILO_CHAIN_BROKER)
		chain_busy(job->tenant, job->limits[at].key);
	chain_write_chain_task(job, at, now);
}

/*
 * chain_rate_delay_at: when a job over a rate limit is checked again:
 * at the bucket's next admission when that is within maxBackoffMs, else
 * after min(initial * multiplier^k, max) for its k-th re-check.
 */
static TimestampTz
chain_rate_delay_at(SiloLimit *l, int32 k, TimestampTz next_admit, TimestampTz now)
{
	double		delay;

	/*
	 * Rounded up to the millisecond: waiters of one leaky bucket then get
	 * equal times, and the broker takes them in queue order.
	 */
	if (next_admit > now && next_admit - now <= (TimestampTz) l->rl_max_ms * 1000)
		return (next_admit + 999) / 1000 * 1000;
	delay = (double) l->rl_initial_ms * pow(l->rl_multiplier, (double) k);
	if (!(delay < (double) l->rl_max_ms))
		delay = (double) l->rl_max_ms;
	return now + (TimestampTz) delay * 1000;
}

/*
 * chain_step_rate: one rate-limit step.  Returns true when admitted (the
 * walk goes on); otherwise the job is parked or has ended.
 */
static bool
chain_step_rate(SiloChainJob *job, int at, SiloChainMode mode, TimestampTz now)
{
	SiloLimit  *l = &job->limits[at];
	TimestampTz next_admit;

	if (!silo_key_lock(silo_key_hash('r', job->tenant, l->key, l->unique_key), false))
	{
		chain_defer(job, at, mode, now);
		return false;
	}
	if (silo_rate_limit_admit(job->tenant, l, now, &next_admit))
	{
		job->rate_checks = 0;
		return true;
	}
	if (l->rl_max_retries > 0 && job->rate_checks >= l->rl_max_retries)
	{
		/* Ending the job needs its row lock, which only the broker holds. */
		if (mode == SILO_CHAIN_BROKER)
			silo_chain_fail_rate_limited(job, at, now);
		else
			chain_write_chain_task(job, at, now);
		return false;
	}
	{
		TimestampTz run_at = chain_rate_delay_at(l, job->rate_checks, next_admit, now);

		job->rate_checks++;
		chain_write_chain_task(job, at, run_at);
	}
	return false;
}

/*
 * chain_step_key: one concurrency or floating step.  Returns true when a
 * slot was taken at once (the walk goes on); otherwise the job waits as
 * a requester (or was parked).  A job takes a slot directly only when
 * nobody waits, so it never jumps the queue; otherwise it queues and the
 * key's grant pass decides, in order.
 */
static bool
chain_step_key(SiloChainJob *job, int at, SiloChainMode mode, TimestampTz now)
{
	SiloLimit  *l = &job->limits[at];
	int64		holders;
	bool		waiting;
	int32		max;

	if (!silo_key_lock(silo_key_hash('c', job->tenant, l->key, NULL), false))
	{
		chain_defer(job, at, mode, now);
		return false;
	}
	if (l->type == SILO_LIMIT_FLOATING)
		max = silo_floating_max(job->tenant, l, job->task_group, now);
	else
		max = l->max;

	holders = chain_key_state(job->tenant, l->key, &waiting);
	if (!waiting && holders < max)
	{
		chain_write_holder(job->tenant, l->key, job->task_id, job->job_id, job->attempt, now);
		job->holds = lappend(job->holds, l->key);
		return true;
	}
	chain_write_request(job, at, l->key, l->type == SILO_LIMIT_FLOATING ? 0 : l->max, now);
	silo_grant_key(job->tenant, l->key, now);
	return false;
}

/*
 * chain_walk: walk the job's limits from index from; at the end, write
 * its leasable task.
 */
static void
chain_walk(SiloChainJob *job, int from, SiloChainMode mode, TimestampTz now)
{
	int			i;

	for (i = from; i < job->nlimits; i++)
	{
		bool		passed;

		CHECK_FOR_INTERRUPTS();
		if (job->limits[i].type == SILO_LIMIT_RATE)
			passed = chain_step_rate(job, i, mode, now);
		else
			passed = chain_step_key(job, i, mode, now);
		if (!passed)
			return;
	}
	chain_write_task(job);
}

/*
 * silo_chain_start: a new attempt of a job with limits enters its chain
 * at the first limit: now if its start has come, else a chain task at its
 * start time (a future job takes no slot early).  The caller owns the
 * job's status row (it created or locked it).
 */
void
silo_chain_start(SiloChainJob *job, TimestampTz now)
{
	job->holds = NIL;
	job->rate_checks = 0;
	if (job->start_at > now)
		chain_write_chain_task(job, 0, job->start_at);
	else
		chain_walk(job, 0, SILO_CHAIN_OWNER, now);
}

/*
 * silo_chain_resume: go on with a walk from index at (a chain task the
 * caller has taken; the broker holds the job's row with NOWAIT).
 */
void
silo_chain_resume(SiloChainJob *job, int at, SiloChainMode mode, TimestampTz now)
{
	chain_walk(job, at, mode, now);
}

/* One requester, copied out of the grant query's result. */
typedef struct ChainRequest
{
	int32		priority;
	TimestampTz start_at;
	int64		seq;
	int32		attempt;
	char	   *job_id;
	int32		relative_attempt;
	Datum		task_id;
	char	   *task_group;
	int32		limit_index;
	int32		max;			/* 0: floating */
	List	   *holds;
} ChainRequest;

/*
 * chain_read_requests: the first requesters of a key in grant order,
 * with the key's holder count and floating max (0 when none).
 */
static int
chain_read_requests(const char *tenant, const char *queue, ChainRequest *out,
					int64 *holders, int32 *floating_max)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[3] = {TEXTOID, TEXTOID, INT4OID};
	Datum		values[3];
	uint64		i;
	bool		isnull;

	values[0] = CStringGetTextDatum(tenant);
	values[1] = CStringGetTextDatum(queue);
	values[2] = Int32GetDatum(CHAIN_GRANT_BATCH);
	silo_exec(&plan,
			  "SELECT r.priority, r.start_at, r.seq, r.attempt, r.job_id, r.relative_attempt,"
			  "  r.task_id, r.task_group, r.limit_index, coalesce(r.max_concurrency, 0), r.holds,"
			  "  (SELECT count(*) FROM silo.concurrency_holder h WHERE h.tenant = $1 AND h.queue = $2),"
			  "  coalesce((SELECT f.current_max FROM silo.floating_limit f"
			  "             WHERE f.tenant = $1 AND f.queue = $2), 0)"
			  "  FROM silo.concurrency_request r WHERE r.tenant = $1 AND r.queue = $2"
			  " ORDER BY r.priority, r.start_at, r.seq, r.attempt LIMIT $3",
			  3, types, values, NULL, false, 0);
	for (i = 0; i < SPI_processed; i++)
	{
		ChainRequest *r = &out[i];

		r->priority = DatumGetInt16(silo_col(i, 1, &isnull));
		r->start_at = silo_col_ts(i, 2, NULL);
		r->seq = silo_col_int64(i, 3);
		r->attempt = silo_col_int32(i, 4);
		r->job_id = silo_col_text(i, 5);
		r->relative_attempt = silo_col_int32(i, 6);
		r->task_id = datumCopy(silo_col(i, 7, &isnull), false, UUID_LEN);
		r->task_group = silo_col_text(i, 8);
		r->limit_index = DatumGetInt16(silo_col(i, 9, &isnull));
		r->max = silo_col_int32(i, 10);
		r->holds = silo_holds_list(silo_col(i, 11, &isnull));
		*holders = silo_col_int64(i, 12);
		*floating_max = silo_col_int32(i, 13);
	}
	return (int) SPI_processed;
}

/*
 * chain_take_request: delete a granted requester's row (under the key
 * lock, so it is there).
 */
static void
chain_take_request(const char *tenant, const char *queue, ChainRequest *r)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[6] = {TEXTOID, TEXTOID, INT2OID, TIMESTAMPTZOID, INT8OID, INT4OID};
	Datum		values[6];

	values[0] = CStringGetTextDatum(tenant);
	values[1] = CStringGetTextDatum(queue);
	values[2] = Int16GetDatum((int16) r->priority);
	values[3] = TimestampTzGetDatum(r->start_at);
	values[4] = Int64GetDatum(r->seq);
	values[5] = Int32GetDatum(r->attempt);
	silo_exec(&plan,
			  "DELETE FROM silo.concurrency_request WHERE tenant = $1 AND queue = $2"
			  " AND priority = $3 AND start_at = $4 AND seq = $5 AND attempt = $6",
			  6, types, values, NULL, false, 0);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_INTERNAL),
				 errmsg("requester of job \"%s\" for key \"%s\" vanished under the key lock",
						r->job_id, queue)));
}

/*
 * silo_grant_key: grant waiting requesters of a key, in order (priority,
 * effective start, enqueue order), while the key has capacity for the
 * one at the head: a fixed key compares its holders with the head job's
 * own maxConcurrency, a floating key with the shared current max.  Each
 * granted job goes on with its chain in this transaction; that walk may
 * come back to this key (nested grant passes are fine: each reads the
 * current rows), after which the batch is read again.  The key lock must
 * be held.
 */
void
silo_grant_key(const char *tenant, const char *queue, TimestampTz now)
{
	ChainRequest reqs[CHAIN_GRANT_BATCH];

	for (;;)
	{
		int64		holders = 0;
		int32		floating_max = 0;
		int			n = chain_read_requests(tenant, queue, reqs, &holders, &floating_max);
		int			i;
		bool		stale = false;

		for (i = 0; i < n && !stale; i++)
		{
			ChainRequest *r = &reqs[i];
			SiloChainJob job;
			int32		max = r->max;

			memset(&job, 0, sizeof(job));
			job.tenant = pstrdup(tenant);
			job.job_id = r->job_id;
			job.task_group = r->task_group;
			job.priority = r->priority;
			job.seq = r->seq;
			job.attempt = r->attempt;
			job.relative_attempt = r->relative_attempt;
			job.task_id = r->task_id;
			job.start_at = r->start_at;
			job.holds = r->holds;

			if (max == 0)
			{
				/* Floating: the shared max, re-created if an operator reset it. */
				if (floating_max == 0)
				{
					silo_chain_load_limits(&job);
					floating_max = silo_floating_max(tenant, &job.limits[r->limit_index],
													 r->task_group, now);
				}
				max = floating_max;
			}
			if (holders >= max)
				return;			/* the head waits; nobody overtakes it */

			chain_take_request(tenant, queue, r);
			chain_write_holder(tenant, queue, r->task_id, r->job_id, r->attempt, now);
			holders++;
			job.holds = lappend(job.holds, pstrdup(queue));
			if (job.limits == NULL)
				silo_chain_load_limits(&job);
			chain_walk(&job, r->limit_index + 1, SILO_CHAIN_CASCADE, now);

			/*
			 * A job with more limits went on to other keys, whose grants may
			 * have come back to this key (a job waiting on it further down
			 * its chain) and granted or queued here: the batch and the
			 * holder count are stale, read them again.
			 */
			if (r->limit_index + 1 < job.nlimits)
				stale = true;
		}
		if (!stale && n < CHAIN_GRANT_BATCH)
			return;
	}
}
