/*-------------------------------------------------------------------------
 *
 * chain.c
 *	  The limit chain: walking a job's limits in order.  Key locks are in
 *	  keys.c, granting waiting requesters in grant.c, releasing the slots
 *	  a job holds in release.c.
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
#include "silo_limits.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"

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
	SiloTaskRow task;

	/*
	 * The task carries the row hints the walk knows (1.5), as the task of
	 * a job without limits does: enqueue knows both, the broker's walk of
	 * a parked job both, a grant the job_info one.
	 */
	memset(&task, 0, sizeof(task));
	task.task_group = job->task_group;
	task.start_at = job->start_at;
	task.priority = job->priority;
	task.tenant = job->tenant;
	task.job_id = job->job_id;
	task.attempt = job->attempt;
	task.relative_attempt = job->relative_attempt;
	task.task_id = job->task_id;
	task.seq = job->seq;
	task.due = true;
	task.limited = true;
	task.holds = job->holds;
	task.has_info_tid = job->has_info_tid;
	task.info_tid = job->info_tid;
	task.has_status_tid = job->has_status_tid;
	task.status_tid = job->status_tid;
	silo_task_insert(&task);
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
 * silo_chain_write_holder: the job takes a slot of key.
 */
void
silo_chain_write_holder(const char *tenant, const char *queue, Datum task_id, const char *job_id,
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
		silo_limits_key_busy(job->tenant, job->limits[at].key);
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
 * walk goes on); otherwise the job is parked, or (the broker's walk) has
 * used up the limit's re-checks: *exhausted.
 */
static bool
chain_step_rate(SiloChainJob *job, int at, SiloChainMode mode, TimestampTz now,
				bool *exhausted)
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
		/*
		 * Ending the job needs its row lock, which only the broker holds:
		 * its caller ends it (core/maintenance.c).
		 */
		if (mode == SILO_CHAIN_BROKER)
			*exhausted = true;
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
		silo_chain_write_holder(job->tenant, l->key, job->task_id, job->job_id, job->attempt, now);
		job->holds = lappend(job->holds, l->key);
		return true;
	}
	chain_write_request(job, at, l->key, l->type == SILO_LIMIT_FLOATING ? 0 : l->max, now);
	silo_grant_key(job->tenant, l->key, now);
	return false;
}

/*
 * chain_walk: walk the job's limits from index from; at the end, write
 * its leasable task.  Returns the index of a rate limit whose re-checks
 * the broker's walk used up (the job must end), or -1.
 */
static int
chain_walk(SiloChainJob *job, int from, SiloChainMode mode, TimestampTz now)
{
	int			i;

	for (i = from; i < job->nlimits; i++)
	{
		bool		passed;
		bool		exhausted = false;

		CHECK_FOR_INTERRUPTS();
		if (job->limits[i].type == SILO_LIMIT_RATE)
			passed = chain_step_rate(job, i, mode, now, &exhausted);
		else
			passed = chain_step_key(job, i, mode, now);
		if (exhausted)
			return i;
		if (!passed)
			return -1;
	}
	chain_write_task(job);
	return -1;
}

/*
 * silo_chain_walk: a grant's walk of the job it granted, from the limit
 * after the granted key (grant.c).
 */
void
silo_chain_walk(SiloChainJob *job, int from, SiloChainMode mode, TimestampTz now)
{
	Assert(mode != SILO_CHAIN_BROKER);
	(void) chain_walk(job, from, mode, now);
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
		(void) chain_walk(job, 0, SILO_CHAIN_OWNER, now);
}

/*
 * silo_chain_resume: go on with a walk from index at (a chain task the
 * caller has taken; the broker holds the job's row with NOWAIT).  Returns
 * the index of a rate limit whose re-checks are used up: the caller ends
 * the job (RATE_LIMITED); -1 otherwise.
 */
int
silo_chain_resume(SiloChainJob *job, int at, SiloChainMode mode, TimestampTz now)
{
	return chain_walk(job, at, mode, now);
}
