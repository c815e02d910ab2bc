/*-------------------------------------------------------------------------
 *
 * jobops.c
 *	  Operations on a whole job: the work of silo.cancel, silo.restart,
 *	  silo.expedite, silo.delete_job, silo.job_result and the looks of
 *	  silo.wait_result (wait.c).  A cancel that ends the job and a delete
 *	  tell the job's waiters (ipc/waiters.c).
 *
 * Each locks the job's status row first (FOR UPDATE), so it serializes
 * with reports and with other job operations on the same job; allowed
 * states and errors follow Silo (docs/states.md).
 *
 *-------------------------------------------------------------------------
 */
#include "silo_core.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"

/* What jobops_lock reads about a job. */
typedef struct JobState
{
	char	   *status;			/* Pending or a terminal status */
	TimestampTz changed_at;		/* and since when (its 0x03 key) */
	bool		cancelled;		/* has a cancellation flag */
	bool		running;		/* its current task is leased */
	bool		has_task;		/* status row names a current task */
	Datum		task_id;
	TimestampTz next_attempt_at;
	char	   *task_group;
	int32		priority;
	int32		attempt;
	int64		seq;
	int			nlimits;		/* the job's limits, parsed */
	SiloLimit  *limits;
} JobState;

static const Oid jobops_key_types[2] = {TEXTOID, TEXTOID};

/*
 * jobops_key: a job's key (tenant, id) as the first two statement
 * parameters.
 */
static void
jobops_key(const char *tenant, const char *id, Datum *values)
{
	values[0] = CStringGetTextDatum(tenant);
	values[1] = CStringGetTextDatum(id);
}

/*
 * jobops_not_found: raise SL003 for values (tenant, job_id).
 */
static void
jobops_not_found(Datum *values)
{
	ereport(ERROR,
			(errcode(ERRCODE_SILO_JOB_NOT_FOUND),
			 errmsg("job not found"),
			 errdetail("There is no job \"%s\" in tenant \"%s\".",
					   TextDatumGetCString(values[1]), TextDatumGetCString(values[0]))));
}

/*
 * jobops_lock: lock the job's status row and read its state; false when
 * there is no such job.  SPI must be connected.  The flag and lease are
 * read by a second statement, after the lock, so they are current.
 */
static bool
jobops_lock(Datum *key, JobState *st)
{
	static SPIPlanPtr lock_plan = NULL;
	static SPIPlanPtr state_plan = NULL;
	static const Oid state_types[3] = {TEXTOID, TEXTOID, UUIDOID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	bool		isnull;

	silo_exec(&lock_plan,
			  "SELECT s.status, s.task_id, s.next_attempt_at, i.task_group, i.priority,"
			  "  s.attempt, i.seq, i.limits, s.changed_at"
			  "  FROM silo.job_status s JOIN silo.job_info i ON i.tenant = s.tenant AND i.id = s.id"
			  " WHERE s.tenant = $1 AND s.id = $2 FOR UPDATE OF s",
			  2, jobops_key_types, key, NULL, false, 0);
	if (SPI_processed == 0)
		return false;

	st->status = silo_col_text(0, 1);
	st->task_id = silo_col(0, 2, &isnull);
	st->has_task = !isnull;
	if (st->has_task)
		st->task_id = datumCopy(st->task_id, false, UUID_LEN);
	st->next_attempt_at = silo_col_ts(0, 3, NULL);
	st->task_group = silo_col_text(0, 4);
	st->priority = DatumGetInt16(silo_col(0, 5, &isnull));
	st->attempt = silo_col_int32(0, 6);
	st->seq = silo_col_int64(0, 7);
	st->nlimits = silo_parse_limits(DatumGetJsonbP(silo_col(0, 8, &isnull)), &st->limits, NULL);
	st->changed_at = silo_col_ts(0, 9, NULL);

	values[0] = key[0];
	values[1] = key[1];
	values[2] = st->has_task ? st->task_id : (Datum) 0;
	nulls[2] = st->has_task ? ' ' : 'n';
	silo_exec(&state_plan,
			  "SELECT EXISTS (SELECT 1 FROM silo.job_cancellation WHERE tenant = $1 AND job_id = $2),"
			  "       EXISTS (SELECT 1 FROM silo.task_lease WHERE task_id = $3)",
			  3, state_types, values, nulls, false, 0);
	st->cancelled = silo_col_bool(0, 1);
	st->running = silo_col_bool(0, 2);
	return true;
}

/*
 * jobops_begin: the common start of cancel, restart and expedite (fn is
 * the SQL function's name, for messages): connect SPI and lock the job;
 * SL003 if it is missing.
 */
static void
jobops_begin(const char *tenant, const char *id, const char *fn, Datum *values,
			 JobState *st)
{
	jobops_key(tenant, id, values);
	silo_spi_connect();
	if (!jobops_lock(values, st))
		jobops_not_found(values);
	/* Its limits' holders must be counted on fresh snapshots (see enqueue). */
	if (st->nlimits > 0)
		silo_require_read_committed(psprintf("%s of a job with limits", fn));
}

/*
 * jobops_task_key: put the key of the job's pending task into values[2..5]
 * (task_group, start_at, priority, attempt), after tenant and job_id.
 */
static void
jobops_task_key(Datum *values, JobState *st)
{
	values[2] = CStringGetTextDatum(st->task_group);
	values[3] = TimestampTzGetDatum(st->next_attempt_at);
	values[4] = Int16GetDatum((int16) st->priority);
	values[5] = Int32GetDatum(st->attempt);
}

/*
 * jobops_chain_job: the chain walker's view of the job's current attempt.
 */
static void
jobops_chain_job(SiloChainJob *job, Datum *key, JobState *st)
{
	memset(job, 0, sizeof(*job));
	job->tenant = TextDatumGetCString(key[0]);
	job->job_id = TextDatumGetCString(key[1]);
	job->task_group = st->task_group;
	job->priority = st->priority;
	job->seq = st->seq;
	job->attempt = st->attempt;
	job->relative_attempt = 1;
	job->task_id = st->task_id;
	job->start_at = st->next_attempt_at;
	job->nlimits = st->nlimits;
	job->limits = st->limits;
}

/*
 * jobops_state_name: the job's state as silo.jobs shows it.
 */
static const char *
jobops_state_name(JobState *st, TimestampTz now)
{
	if (strcmp(st->status, "Pending") != 0)
		return st->status;
	if (st->running)
		return "Running";
	if (st->next_attempt_at > now)
		return st->attempt > 1 ? "Retrying" : "Scheduled";
	return "Waiting";
}

/*
 * jobops_is_terminal: Succeeded, Failed or Cancelled.
 */
static bool
jobops_is_terminal(JobState *st)
{
	return strcmp(st->status, "Pending") != 0;
}

/*
 * silo_job_cancel: the work of silo.cancel.  A pending job is cancelled at
 * once (its task deleted); a running job gets the flag, which its worker
 * sees on the next heartbeat.
 */
void
silo_job_cancel(const char *tenant, const char *id, const char *fn)
{
	static SPIPlanPtr delete_plan = NULL;
	static SPIPlanPtr end_plan = NULL;
	static const Oid types[7] = {TEXTOID, TEXTOID, TEXTOID, TIMESTAMPTZOID, INT2OID,
	INT4OID, TIMESTAMPTZOID};
	Datum		values[7];
	JobState	st;
	TimestampTz now = silo_now_ts();

	jobops_begin(tenant, id, fn, values, &st);
	if (strcmp(st.status, "Cancelled") == 0 || (st.cancelled && !jobops_is_terminal(&st)))
		ereport(ERROR,
				(errcode(ERRCODE_SILO_JOB_ALREADY_CANCELLED),
				 errmsg("job is already cancelled")));
	if (jobops_is_terminal(&st))
		ereport(ERROR,
				(errcode(ERRCODE_SILO_JOB_ALREADY_TERMINAL),
				 errmsg("job is already in terminal state"),
				 errdetail("The job's status is %s.", st.status)));

	jobops_task_key(values, &st);
	values[6] = TimestampTzGetDatum(now);

	if (!st.running)
	{
		bool		removed;

		if (st.nlimits > 0)
		{
			SiloChainJob job;

			/* Wherever it waits, and every slot it holds, in one go. */
			jobops_chain_job(&job, values, &st);
			removed = silo_chain_cancel(&job, now);
		}
		else
		{
			silo_exec(&delete_plan,
					  "DELETE FROM silo.task WHERE task_group = $3 AND start_at = $4 AND priority = $5"
					  " AND tenant = $1 AND job_id = $2 AND attempt = $6",
					  7, types, values, NULL, false, 0);
			removed = SPI_processed == 1;
		}
		if (removed)
		{
			silo_exec(&end_plan,
					  "UPDATE silo.job_status SET status = 'Cancelled', changed_at = $7, task_id = NULL,"
					  "  next_attempt_at = NULL WHERE tenant = $1 AND id = $2",
					  7, types, values, NULL, false, 0);
			silo_status_index_move(TextDatumGetCString(values[0]),
								   TextDatumGetCString(values[1]),
								   st.status, st.changed_at, "Cancelled", now);
			silo_wait_job_ended(tenant, id);
		}
		else if (!silo_task_leased(st.task_id))
		{
			/* Neither waiting nor leased: bookkeeping is broken. */
			ereport(ERROR,
					(errcode(ERRCODE_SILO_INTERNAL),
					 errmsg("pending job \"%s\" is neither waiting nor leased",
							TextDatumGetCString(values[1]))));
		}
		/* else a worker leased it while we waited: flag only */
	}
	silo_cancellation_insert(tenant, id, now, false);
	silo_spi_finish();
}

/*
 * silo_job_restart: the work of silo.restart.  A Failed or Cancelled job
 * runs again with a fresh retry budget; attempt numbers keep rising.
 */
void
silo_job_restart(const char *tenant, const char *id, const char *fn)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[4] = {TEXTOID, TEXTOID, UUIDOID, TIMESTAMPTZOID};
	Datum		values[4];
	JobState	st;
	TimestampTz now = silo_now_ts();

	jobops_begin(tenant, id, fn, values, &st);
	if (strcmp(st.status, "Failed") != 0 && strcmp(st.status, "Cancelled") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_JOB_NOT_RESTARTABLE),
				 errmsg("job is not restartable"),
				 errdetail("Only Failed or Cancelled jobs can be restarted; this job is %s.",
						   jobops_state_name(&st, now))));

	values[2] = silo_new_uuid();
	values[3] = TimestampTzGetDatum(now);
	silo_exec(&plan,
			  "WITH n AS ("
			  "  SELECT coalesce(max(attempt), 0) + 1 AS attempt FROM silo.attempt"
			  "   WHERE tenant = $1 AND job_id = $2),"
			  " c AS (DELETE FROM silo.job_cancellation WHERE tenant = $1 AND job_id = $2)"
			  "UPDATE silo.job_status SET status = 'Pending', changed_at = $4, attempt = n.attempt,"
			  "  relative_attempt = 1, task_id = $3, next_attempt_at = $4"
			  "  FROM n WHERE tenant = $1 AND id = $2 RETURNING n.attempt",
			  4, types, values, NULL, false, 0);
	st.attempt = silo_col_int32(0, 1);
	st.task_id = values[2];
	st.next_attempt_at = now;
	if (st.nlimits == 0)
	{
		SiloTaskRow task;

		memset(&task, 0, sizeof(task));
		task.task_group = st.task_group;
		task.start_at = now;
		task.priority = st.priority;
		task.tenant = tenant;
		task.job_id = id;
		task.attempt = st.attempt;
		task.relative_attempt = 1;
		task.task_id = st.task_id;
		task.seq = st.seq;
		task.due = true;
		silo_task_insert(&task);
	}
	silo_status_index_move(tenant, id, st.status, st.changed_at, "Pending", now);
	if (st.nlimits > 0)
	{
		SiloChainJob job;

		/* A restarted job walks its limits again, like a new one. */
		jobops_chain_job(&job, values, &st);
		silo_chain_start(&job, now);
	}
	else
		silo_notify_group(st.task_group);
	silo_spi_finish();
}

/*
 * jobops_expedite_chain: expedite a job with limits: its future start is
 * a chain task at limit 0, which is taken and walked now.
 */
static void
jobops_expedite_chain(Datum *key, JobState *st, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[4] = {TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID};
	Datum		values[4];
	SiloChainJob job;
	bool		isnull;

	values[0] = key[0];
	values[1] = key[1];
	values[2] = Int32GetDatum(st->attempt);
	values[3] = TimestampTzGetDatum(now);
	silo_exec(&plan,
			  "WITH c AS (DELETE FROM silo.chain_task WHERE tenant = $1 AND job_id = $2"
			  "    AND attempt = $3 AND run_at > $4 AND limit_index = 0 RETURNING relative_attempt),"
			  " s AS (UPDATE silo.job_status SET next_attempt_at = $4"
			  "    WHERE tenant = $1 AND id = $2 AND EXISTS (SELECT 1 FROM c))"
			  "SELECT relative_attempt FROM c",
			  4, types, values, NULL, false, 0);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_JOB_NOT_EXPEDITABLE),
				 errmsg("job cannot be expedited: %s",
						silo_task_leased(st->task_id) ? "job is running" : "no pending task")));
	st->next_attempt_at = now;
	jobops_chain_job(&job, key, st);
	job.relative_attempt = DatumGetInt32(silo_col(0, 1, &isnull));
	silo_chain_start(&job, now);
}

/*
 * silo_job_expedite: the work of silo.expedite: move a job's future task
 * (first run or retry backoff) to now.
 */
void
silo_job_expedite(const char *tenant, const char *id, const char *fn)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[7] = {TEXTOID, TEXTOID, TEXTOID, TIMESTAMPTZOID, INT2OID,
	INT4OID, TIMESTAMPTZOID};
	Datum		values[7];
	JobState	st;
	TimestampTz now = silo_now_ts();
	const char *why = NULL;

	jobops_begin(tenant, id, fn, values, &st);
	/* a Cancelled job is cancelled first, as Silo says (docs/states.md) */
	if (strcmp(st.status, "Cancelled") == 0 || (st.cancelled && !jobops_is_terminal(&st)))
		why = "job is cancelled";
	else if (jobops_is_terminal(&st))
		why = "job is in a terminal state";
	else if (st.running)
		why = "job is running";
	else if (st.next_attempt_at <= now)
		why = "task is already ready to run";
	if (why)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_JOB_NOT_EXPEDITABLE),
				 errmsg("job cannot be expedited: %s", why),
				 errdetail("Only a job waiting for a future start or a retry backoff can be expedited.")));

	if (st.nlimits > 0)
	{
		jobops_expedite_chain(values, &st, now);
		silo_spi_finish();
		return;
	}

	jobops_task_key(values, &st);
	values[6] = TimestampTzGetDatum(now);
	silo_exec(&plan,
			  "WITH t AS ("
			  "  UPDATE silo.task SET start_at = $7, due = true"
			  "   WHERE task_group = $3 AND start_at = $4 AND priority = $5"
			  "     AND tenant = $1 AND job_id = $2 AND attempt = $6 RETURNING 1)"
			  "UPDATE silo.job_status SET next_attempt_at = $7"
			  "  WHERE tenant = $1 AND id = $2 AND EXISTS (SELECT 1 FROM t)",
			  7, types, values, NULL, false, 0);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_JOB_NOT_EXPEDITABLE),
				 errmsg("job cannot be expedited: %s",
						silo_task_leased(st.task_id) ? "job is running" : "no pending task")));
	silo_spi_finish();
	silo_notify_group(st.task_group);
}

/*
 * silo_job_delete: the work of silo.delete_job: remove a terminal job with
 * its attempts, metadata and flag; false when there is no such job.
 */
bool
silo_job_delete(const char *tenant, const char *id)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[2];
	JobState	st;

	jobops_key(tenant, id, values);
	silo_spi_connect();
	if (!jobops_lock(values, &st))
	{
		silo_spi_finish();
		return false;
	}
	if (!jobops_is_terminal(&st))
		ereport(ERROR,
				(errcode(ERRCODE_SILO_JOB_NOT_TERMINAL),
				 errmsg("job is not in a terminal state"),
				 errdetail("Only Succeeded, Failed or Cancelled jobs can be deleted."),
				 errhint("Cancel it (a running job ends when its worker reports) or let it finish, then delete it.")));
	silo_exec(&plan,
			  "WITH a AS (DELETE FROM silo.attempt WHERE tenant = $1 AND job_id = $2),"
			  " m AS (DELETE FROM silo.job_metadata m USING silo.job_info i, jsonb_each_text(i.metadata) e"
			  "   WHERE i.tenant = $1 AND i.id = $2 AND m.tenant = $1 AND m.key = e.key"
			  "     AND m.value = e.value AND m.job_id = $2),"
			  " c AS (DELETE FROM silo.job_cancellation WHERE tenant = $1 AND job_id = $2),"
			  " i AS (DELETE FROM silo.job_info WHERE tenant = $1 AND id = $2),"
			  " s AS (DELETE FROM silo.job_status WHERE tenant = $1 AND id = $2"
			  "   RETURNING tenant, status, changed_at, id)"
			  "DELETE FROM silo.job_status_index x USING s"
			  " WHERE x.tenant = s.tenant AND x.status = s.status AND x.changed_at = s.changed_at"
			  "   AND x.id = s.id",
			  2, jobops_key_types, values, NULL, false, 0);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_INTERNAL),
				 errmsg("job \"%s\" of tenant \"%s\" has no status index entry",
						TextDatumGetCString(values[1]), TextDatumGetCString(values[0]))));
	silo_spi_finish();
	silo_wait_job_ended(tenant, id);
	return true;
}

/*
 * jobops_fetch_result: read the outcome of job (tenant, id) in key, as
 * the five columns of silo.job_result, and return its status (the first
 * column).  SL003 when there is no such job.  SPI must be connected.
 */
static char *
jobops_fetch_result(Datum *key)
{
	static SPIPlanPtr plan = NULL;

	silo_exec(&plan,
			  "SELECT s.status, CASE WHEN s.status = 'Succeeded' THEN a.result END,"
			  "  CASE WHEN a.finished_at = s.changed_at THEN a.error_code END,"
			  "  CASE WHEN a.finished_at = s.changed_at THEN a.error_data END, s.changed_at"
			  "  FROM silo.job_status s"
			  "  LEFT JOIN LATERAL (SELECT * FROM silo.attempt a WHERE a.tenant = s.tenant"
			  "     AND a.job_id = s.id ORDER BY a.attempt DESC LIMIT 1) a ON true"
			  " WHERE s.tenant = $1 AND s.id = $2",
			  2, jobops_key_types, key, NULL, true, 0);
	if (SPI_processed == 0)
		jobops_not_found(key);
	return silo_col_text(0, 1);
}

/*
 * silo_job_read_result: the work of silo.job_result: the outcome of a terminal
 * job, from the attempt that ended it (a job cancelled while it waited
 * has none: only status and time are set), into rsinfo's tuplestore.
 */
void
silo_job_read_result(ReturnSetInfo *rsinfo, const char *tenant, const char *id)
{
	Datum		values[2];
	Datum		out[5];
	bool		outnulls[5];
	int			c;

	jobops_key(tenant, id, values);
	silo_spi_connect();
	if (strcmp(jobops_fetch_result(values), "Pending") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_JOB_NOT_TERMINAL),
				 errmsg("job is not in a terminal state"),
				 errdetail("The job has not finished yet."),
				 errhint("Wait for it with CALL silo.wait_result, or poll again later.")));
	for (c = 0; c < 5; c++)
		out[c] = silo_col(0, c + 1, &outnulls[c]);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
	silo_spi_finish();
}

/*
 * silo_job_look_result: the work of one look of silo.wait_result at job
 * (tenant, id), under the caller's snapshot: false while it is Pending;
 * once it has ended, true, with silo.job_result's five columns in
 * values and nulls, copied into cxt and detoasted (the caller commits
 * before it returns them: no TOAST pointer may outlive the snapshot).
 * SL003 when there is no such job.
 */
bool
silo_job_look_result(const char *tenant, const char *id, MemoryContext cxt,
					 Datum *values, bool *nulls)
{
	Datum		key[2];
	MemoryContext old;
	int			c;

	jobops_key(tenant, id, key);
	silo_spi_connect();
	if (strcmp(jobops_fetch_result(key), "Pending") == 0)
	{
		silo_spi_finish();
		return false;
	}
	old = MemoryContextSwitchTo(cxt);
	for (c = 0; c < 5; c++)
	{
		values[c] = silo_col(0, c + 1, &nulls[c]);
		/* text and jsonb columns; finished_at is by value */
		if (!nulls[c] && c < 4)
			values[c] = PointerGetDatum(pg_detoast_datum_copy((struct varlena *)
															  DatumGetPointer(values[c])));
	}
	MemoryContextSwitchTo(old);
	silo_spi_finish();
	return true;
}
