/*-------------------------------------------------------------------------
 *
 * outcome.c
 *	  How an attempt ends: the work of silo.complete, silo.fail,
 *	  silo.ack_cancel, silo.release and of the refresh reports, and
 *	  silo_finish_attempt, the one transition they share with the broker's
 *	  lease sweep.  Every end of a job tells its waiters
 *	  (silo.wait_result, ipc/waiters.c), who are woken after the commit.
 *
 * Every report first deletes its lease row (the delete is the lock: a
 * second report, or the sweep, finds nothing and gets "lease not found"),
 * then locks the job_status row, then writes the attempt row and the new
 * status -- and, for a retry, the next task -- in the same transaction.
 * Reports lock the lease, then job_status, then write the task; cancel
 * locks job_status, then the task.  The sweep also holds the tasks it
 * promoted, so it locks job rows with NOWAIT and never waits on them.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_core.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "access/xact.h"
#include "common/pg_prng.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/json.h"
#include "utils/lsyscache.h"

/*
 * A CTE o: the job's status and its time, as they are before the
 * statement's UPDATE of the job's status row (locked here; the statement
 * joins it, and returns them so the 0x03 row can be moved after it).
 */
#define OUTCOME_OLD_STATUS \
	"o AS (SELECT status, changed_at FROM silo.job_status" \
	"  WHERE tenant = $1 AND id = $2 FOR UPDATE)"

/*
 * outcome_take_lease: delete the lease a worker reports on, checking that
 * it exists, is of a tenant the caller may act in, has not expired and
 * belongs to worker_id and the caller's role.  An error rolls the
 * delete back.  SPI must be connected.
 */
static void
outcome_take_lease(Datum task_id, const char *worker_id, TimestampTz now, SiloLease *lease)
{
	/*
	 * Another tenant's lease is answered as no lease at all, before it is
	 * compared with anything: the answer says nothing of it.
	 */
	if (!silo_lease_take(task_id, lease) || !silo_tenant_allowed(lease->tenant))
		ereport(ERROR,
				(errcode(ERRCODE_SILO_LEASE_NOT_FOUND),
				 errmsg("lease not found"),
				 errdetail("Task %s has no lease: it was never leased, was already reported, or its expired lease was swept.",
						   silo_uuid_to_cstring(task_id))));
	if (lease->expires_at <= now)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_LEASE_NOT_FOUND),
				 errmsg("lease not found"),
				 errdetail("The lease on task %s expired at %s; the sweep ends the attempt as WORKER_CRASHED.",
						   silo_uuid_to_cstring(task_id),
						   timestamptz_to_str(lease->expires_at))));
	if (strcmp(lease->worker_id, worker_id) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_LEASE_OWNER_MISMATCH),
				 errmsg("lease owner mismatch"),
				 errdetail("Task %s is leased by another worker.",
						   silo_uuid_to_cstring(task_id))));
	/* a lease belongs to the role that took it (docs/security.md) */
	if (lease->owner_role != NULL && strcmp(lease->owner_role, silo_caller_name()) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_LEASE_OWNER_MISMATCH),
				 errmsg("lease owner mismatch"),
				 errdetail("Task %s was leased by another role.",
						   silo_uuid_to_cstring(task_id))));
}

/*
 * silo_retry_delay_ms: delay before retry k (k = 1 for the first retry):
 * min(initial * factor^(k-1) * r, max), r = 1 or uniform in [1, 2).
 * Silo's own formula uses factor^k, delaying the first retry too long;
 * this follows its documentation instead.
 */
int64
silo_retry_delay_ms(const SiloRetryPolicy *policy, int32 retry_number)
{
	double		delay;

	/* 0 * an overflowed power would be NaN; a zero interval stays zero. */
	if (policy->initial_ms == 0)
		return 0;
	delay = (double) policy->initial_ms * pow(policy->factor, (double) (retry_number - 1));
	if (policy->randomize)
		delay *= 1.0 + pg_prng_double(&pg_global_prng_state);
	if (!(delay < (double) policy->max_ms))
		return policy->max_ms;
	return (int64) delay;
}

/*
 * outcome_not_running: the lease names a task that is not its job's
 * current one -- broken bookkeeping, reported as SL009.
 */
static void
outcome_not_running(SiloLease *lease)
{
	ereport(ERROR,
			(errcode(ERRCODE_SILO_INTERNAL),
			 errmsg("job \"%s\" of tenant \"%s\" is not running task %s",
					lease->job_id, lease->tenant, silo_uuid_to_cstring(lease->task_id))));
}

/*
 * outcome_lock_job: lock the job's status row and read its retry policy.
 * Returns whether the job has a cancellation flag, read after the lock so
 * that a cancel committed while we waited is seen.  With nowait, a row
 * locked by another transaction raises 55P03 instead of waiting.
 */
static bool
outcome_lock_job(SiloLease *lease, SiloRetryPolicy *policy, bool nowait)
{
	static SPIPlanPtr lock_plan = NULL;
	static SPIPlanPtr nowait_plan = NULL;
	static SPIPlanPtr flag_plan = NULL;
	static const Oid types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	bool		isnull;
	Datum		current_task;

	values[0] = CStringGetTextDatum(lease->tenant);
	values[1] = CStringGetTextDatum(lease->job_id);
#define LOCK_JOB_SQL \
	"SELECT s.status, s.task_id, i.retry_count, i.retry_initial_ms, i.retry_max_ms," \
	"  i.retry_factor, i.retry_randomize" \
	"  FROM silo.job_status s JOIN silo.job_info i ON i.tenant = s.tenant AND i.id = s.id" \
	" WHERE s.tenant = $1 AND s.id = $2 FOR UPDATE OF s"

	if (nowait)
		silo_exec(&nowait_plan, LOCK_JOB_SQL " NOWAIT", 2, types, values, NULL, false, 0);
	else
		silo_exec(&lock_plan, LOCK_JOB_SQL, 2, types, values, NULL, false, 0);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_INTERNAL),
				 errmsg("job \"%s\" of tenant \"%s\" has a lease but no status row",
						lease->job_id, lease->tenant)));
	current_task = silo_col(0, 2, &isnull);
	if (strcmp(silo_col_text(0, 1), "Pending") != 0 || isnull ||
		memcmp(DatumGetUUIDP(current_task), DatumGetUUIDP(lease->task_id), UUID_LEN) != 0)
		outcome_not_running(lease);

	silo_col(0, 3, &isnull);
	if (isnull)
		policy->count = -1;
	else
	{
		policy->count = silo_col_int32(0, 3);
		policy->initial_ms = silo_col_int64(0, 4);
		policy->max_ms = silo_col_int64(0, 5);
		policy->factor = DatumGetFloat8(silo_col(0, 6, &isnull));
		policy->randomize = silo_col_bool(0, 7);
	}

	silo_exec(&flag_plan,
			  "SELECT 1 FROM silo.job_cancellation WHERE tenant = $1 AND job_id = $2",
			  2, types, values, NULL, false, 1);
	return SPI_processed > 0;
}

/*
 * outcome_chain_job: the chain walker's view of the job behind a lease,
 * for its next attempt (or the same one, released) with task task_id
 * starting at start.  Reads the job's limits.
 */
static void
outcome_chain_job(SiloChainJob *job, SiloLease *lease, Datum task_id, TimestampTz start)
{
	memset(job, 0, sizeof(*job));
	job->tenant = lease->tenant;
	job->job_id = lease->job_id;
	job->task_group = lease->task_group;
	job->priority = lease->priority;
	job->seq = lease->seq;
	job->attempt = lease->attempt;
	job->relative_attempt = lease->relative_attempt;
	job->task_id = task_id;
	job->start_at = start;
	silo_chain_load_limits(job);
}

/*
 * outcome_write_task: the task of a job without limits that runs again:
 * attempt (attempt, relative) with task task_id, starting at start.
 */
static void
outcome_write_task(SiloLease *lease, int32 attempt, int32 relative, Datum task_id,
				   TimestampTz start, bool due)
{
	SiloTaskRow task;

	memset(&task, 0, sizeof(task));
	task.task_group = lease->task_group;
	task.start_at = start;
	task.priority = lease->priority;
	task.tenant = lease->tenant;
	task.job_id = lease->job_id;
	task.attempt = attempt;
	task.relative_attempt = relative;
	task.task_id = task_id;
	task.seq = lease->seq;
	task.due = due;
	silo_task_insert(&task);
}

/*
 * silo_finish_attempt: end the attempt behind a taken lease.  Writes the
 * attempt row and either a terminal status or, for a failure with retries
 * left, the next task and a Pending status.  A failure of a cancelled job
 * ends it Cancelled; a success ends it Succeeded even if a cancel is
 * pending (the work was done).  SPI must be connected.  The sweep passes
 * nowait, so a job row held by an open transaction is left for its next
 * round rather than stalling it.
 */
void
silo_finish_attempt(SiloLease *lease, SiloOutcome outcome, Jsonb *result,
					const char *error_code, Jsonb *error_data, TimestampTz now,
					bool nowait)
{
	static SPIPlanPtr end_plan = NULL;
	static SPIPlanPtr retry_plan = NULL;
	static const Oid end_types[5] = {TEXTOID, TEXTOID, UUIDOID, TIMESTAMPTZOID, TEXTOID};
	static const Oid retry_types[7] = {
		TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID, UUIDOID, TIMESTAMPTZOID, INT4OID
	};
	Datum		values[7];
	SiloRetryPolicy policy;
	SiloAttemptRow attempt;
	bool		cancelled = false;
	const char *job_status;
	bool		retry = false;
	char	   *old_status;
	TimestampTz old_at;

	/*
	 * Only a failure needs the retry policy and the cancellation flag, read
	 * under the job's row lock.  A success or a cancel ends the job whatever
	 * the flag says; their UPDATE locks and checks the row itself.
	 */
	if (outcome == SILO_OUTCOME_FAILED)
		cancelled = outcome_lock_job(lease, &policy, nowait);

	/*
	 * The attempt records what happened to it; the job's status is where
	 * the job ends up.  They differ only for a failure of a flagged job: a
	 * Failed attempt, a Cancelled job, no retry.
	 */
	memset(&attempt, 0, sizeof(attempt));
	switch (outcome)
	{
		case SILO_OUTCOME_SUCCEEDED:
			job_status = "Succeeded";
			break;
		case SILO_OUTCOME_CANCELLED:
			job_status = "Cancelled";
			break;
		default:
			attempt.status = CStringGetTextDatum("Failed");
			if (cancelled)
				job_status = "Cancelled";
			else
			{
				job_status = "Failed";
				retry = policy.count >= 0 && lease->relative_attempt <= policy.count;
			}
			break;
	}
	if (outcome != SILO_OUTCOME_FAILED)
		attempt.status = CStringGetTextDatum(job_status);
	attempt.tenant = CStringGetTextDatum(lease->tenant);
	attempt.job_id = CStringGetTextDatum(lease->job_id);
	attempt.attempt = lease->attempt;
	attempt.relative_attempt = lease->relative_attempt;
	attempt.task_id = lease->task_id;
	attempt.worker_id = CStringGetTextDatum(lease->worker_id);
	attempt.started_at = lease->started_at;
	attempt.finished_at = now;
	attempt.result = result ? JsonbPGetDatum(result) : (Datum) 0;
	attempt.error_code = error_code;
	attempt.error_data = error_data;
	values[0] = attempt.tenant;
	values[1] = attempt.job_id;

	/*
	 * The status row first (a job with limits locks it before its keys, the
	 * order every path takes), then the attempt row, then 0x03.
	 */
	if (!retry)
	{
		values[2] = lease->task_id;
		values[3] = TimestampTzGetDatum(now);
		values[4] = CStringGetTextDatum(job_status);
		silo_exec(&end_plan,
				  "WITH " OUTCOME_OLD_STATUS
				  "UPDATE silo.job_status s SET status = $5, changed_at = $4, task_id = NULL,"
				  "  next_attempt_at = NULL"
				  "  FROM o WHERE s.tenant = $1 AND s.id = $2 AND s.status = 'Pending' AND s.task_id = $3"
				  " RETURNING o.changed_at",
				  5, end_types, values, NULL, false, 0);
		if (SPI_processed != 1)
			outcome_not_running(lease);
		old_at = silo_col_ts(0, 1, NULL);
		silo_attempt_insert(&attempt);
		silo_status_index_move(lease->tenant, lease->job_id, "Pending", old_at, job_status, now);
		silo_wait_job_ended(lease->tenant, lease->job_id);
		if (strcmp(job_status, "Cancelled") == 0 && !cancelled)
			silo_cancellation_insert(lease->tenant, lease->job_id, now, true);
		if (lease->limited)
			silo_limits_release(lease->tenant, lease->holds, lease->task_id, now);
		return;
	}

	{
		int64		delay = silo_retry_delay_ms(&policy, lease->relative_attempt);
		TimestampTz start = now + delay * 1000;
		Datum		task_id = silo_new_uuid();

		values[2] = Int32GetDatum(lease->attempt);
		values[3] = TimestampTzGetDatum(now);
		values[4] = task_id;
		values[5] = TimestampTzGetDatum(start);
		values[6] = Int32GetDatum(lease->relative_attempt);
		silo_exec(&retry_plan,
				  "WITH " OUTCOME_OLD_STATUS
				  "UPDATE silo.job_status s SET status = 'Pending', changed_at = $4,"
				  "  attempt = $3 + 1, relative_attempt = $7 + 1, task_id = $5, next_attempt_at = $6"
				  "  FROM o WHERE s.tenant = $1 AND s.id = $2 RETURNING o.status, o.changed_at",
				  7, retry_types, values, NULL, false, 0);
		if (SPI_processed != 1)
			outcome_not_running(lease);
		old_status = silo_col_text(0, 1);
		old_at = silo_col_ts(0, 2, NULL);
		silo_attempt_insert(&attempt);
		if (!lease->limited)
			outcome_write_task(lease, lease->attempt + 1, lease->relative_attempt + 1,
							   task_id, start, delay == 0);
		silo_status_index_move(lease->tenant, lease->job_id, old_status, old_at, "Pending", now);
		if (lease->limited)
		{
			SiloChainJob job;

			/* Free the slots first: the retry queues behind the waiters. */
			silo_limits_release(lease->tenant, lease->holds, lease->task_id, now);
			outcome_chain_job(&job, lease, task_id, start);
			job.attempt = lease->attempt + 1;
			job.relative_attempt = lease->relative_attempt + 1;
			silo_chain_start(&job, now);
		}
		else if (delay == 0)
			silo_notify_group(lease->task_group);
		else
			silo_wake_broker_at_commit();
	}
}

/*
 * silo_take_reported_lease: the common start of every report: connect SPI
 * and take the lease, which must be of the given kind ('run' for job
 * reports, 'refresh' for floating-limit refreshes).  The caller finishes
 * SPI.
 */
void
silo_take_reported_lease(Datum task_id, const char *worker_id, TimestampTz now,
						 const char *kind, SiloLease *lease)
{
	silo_spi_connect();
	outcome_take_lease(task_id, worker_id, now, lease);
	/* the checks the prologue could not make: the lease names the tenant */
	silo_tenancy_check(lease->tenant);
	silo_cluster_check_tenant(lease->tenant);
	if (strcmp(lease->kind, kind) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_WRONG_TASK_KIND),
				 errmsg("task %s is a %s task, not a %s task",
						silo_uuid_to_cstring(lease->task_id), lease->kind, kind),
				 strcmp(kind, "run") == 0
				 ? errhint("Answer a refresh task with silo.report_refresh or silo.fail_refresh.")
				 : errhint("Answer a job's task with silo.complete, silo.fail, silo.ack_cancel or silo.release.")));
}

/*
 * silo_report_outcome: the work of complete, fail and ack_cancel.
 */
void
silo_report_outcome(Datum task_id, const char *worker_id, SiloOutcome outcome,
					Jsonb *result, const char *error_code, Jsonb *error_data)
{
	SiloLease	lease;
	TimestampTz now = silo_now_ts();

	silo_take_reported_lease(task_id, worker_id, now, "run", &lease);
	silo_finish_attempt(&lease, outcome, result, error_code, error_data, now, false);
	silo_spi_finish();
}

/*
 * silo_report_refresh_end: the work of report_refresh and fail_refresh:
 * take the refresh's lease and record its end on the key's state.
 */
void
silo_report_refresh_end(Datum task_id, const char *worker_id, SiloFloatingEnd how,
						int32 new_max, const char *error)
{
	SiloLease	lease;
	TimestampTz now = silo_now_ts();

	silo_take_reported_lease(task_id, worker_id, now, "refresh", &lease);
	silo_floating_finish(&lease, how, new_max, error, now);
	silo_spi_finish();
}

/*
 * silo_release_task: the work of silo.release: hand the task back, due
 * at once and in its old place in the queue, without using up an
 * attempt.  A released task of a cancelled job ends the job Cancelled
 * instead.
 */
void
silo_release_task(Datum task_id, const char *worker_id)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[5] = {TEXTOID, TEXTOID, UUIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		values[5];
	SiloLease	lease;
	SiloRetryPolicy policy;
	TimestampTz now = silo_now_ts();
	Datum		new_task = silo_new_uuid();
	char	   *old_status;
	TimestampTz old_at;

	silo_take_reported_lease(task_id, worker_id, now, "run", &lease);
	if (outcome_lock_job(&lease, &policy, false))
	{
		silo_finish_attempt(&lease, SILO_OUTCOME_CANCELLED, NULL, "RELEASED", NULL, now, false);
		silo_spi_finish();
		return;
	}

	values[0] = CStringGetTextDatum(lease.tenant);
	values[1] = CStringGetTextDatum(lease.job_id);
	values[2] = new_task;
	values[3] = TimestampTzGetDatum(lease.start_at);
	values[4] = TimestampTzGetDatum(now);
	silo_exec(&plan,
			  "WITH " OUTCOME_OLD_STATUS
			  "UPDATE silo.job_status s SET task_id = $3, next_attempt_at = $4, changed_at = $5"
			  "  FROM o WHERE s.tenant = $1 AND s.id = $2 RETURNING o.status, o.changed_at",
			  5, types, values, NULL, false, 0);
	if (SPI_processed != 1)
		outcome_not_running(&lease);
	old_status = silo_col_text(0, 1);
	old_at = silo_col_ts(0, 2, NULL);
	if (!lease.limited)
		outcome_write_task(&lease, lease.attempt, lease.relative_attempt, new_task,
						   lease.start_at, true);
	silo_status_index_move(lease.tenant, lease.job_id, old_status, old_at, old_status, now);
	if (lease.limited)
	{
		SiloChainJob job;

		/* The slots go back, and the task walks its limits again. */
		silo_limits_release(lease.tenant, lease.holds, lease.task_id, now);
		outcome_chain_job(&job, &lease, new_task, lease.start_at);
		silo_chain_start(&job, now);
	}
	else
		silo_notify_group(lease.task_group);
	silo_spi_finish();
}

/*
 * silo_fail_rate_limited: a job over a rate limit has used up the limit's
 * maxRetries re-checks (the broker's walk of it said so): it ends Failed
 * with RATE_LIMITED (the original Silo dropped the check and stranded the
 * job), with an attempt row that never started, and its slots are freed.
 * The broker holds the job's status row.
 */
void
silo_fail_rate_limited(SiloChainJob *job, int at, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[4] = {TEXTOID, TEXTOID, UUIDOID, TIMESTAMPTZOID};
	Datum		values[4];
	SiloLimit  *l = &job->limits[at];
	StringInfoData buf;
	SiloAttemptRow attempt;
	TimestampTz old_at;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"limit_index\": ");
	appendStringInfo(&buf, "%d, \"name\": ", at);
	escape_json(&buf, l->key);
	appendStringInfoString(&buf, ", \"uniqueKey\": ");
	escape_json(&buf, l->unique_key);
	appendStringInfo(&buf, ", \"rechecks\": %d}", job->rate_checks);

	values[0] = CStringGetTextDatum(job->tenant);
	values[1] = CStringGetTextDatum(job->job_id);
	values[2] = job->task_id;
	values[3] = TimestampTzGetDatum(now);
	silo_exec(&plan,
			  "WITH " OUTCOME_OLD_STATUS
			  "UPDATE silo.job_status s SET status = 'Failed', changed_at = $4, task_id = NULL,"
			  "  next_attempt_at = NULL"
			  "  FROM o WHERE s.tenant = $1 AND s.id = $2 AND s.status = 'Pending' AND s.task_id = $3"
			  " RETURNING o.changed_at",
			  4, types, values, NULL, false, 0);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_INTERNAL),
				 errmsg("job \"%s\" of tenant \"%s\" is not waiting on task %s",
						job->job_id, job->tenant, silo_uuid_to_cstring(job->task_id))));
	old_at = silo_col_ts(0, 1, NULL);

	/* an attempt that never started: no worker, no start time */
	memset(&attempt, 0, sizeof(attempt));
	attempt.tenant = values[0];
	attempt.job_id = values[1];
	attempt.attempt = job->attempt;
	attempt.relative_attempt = job->relative_attempt;
	attempt.task_id = job->task_id;
	attempt.status = CStringGetTextDatum("Failed");
	attempt.finished_at = now;
	attempt.error_code = "RATE_LIMITED";
	attempt.error_data = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
	silo_attempt_insert(&attempt);
	silo_status_index_move(job->tenant, job->job_id, "Pending", old_at, "Failed", now);
	silo_wait_job_ended(job->tenant, job->job_id);
	silo_limits_release(job->tenant, job->holds, job->task_id, now);
}
