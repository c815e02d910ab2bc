/*-------------------------------------------------------------------------
 *
 * import.c
 *	  Jobs with their history (silo.import_jobs, api/import.c): the checks
 *	  of an imported job, the state its attempts lead to, a new job's rows,
 *	  and the batch.  A job whose id exists is re-imported (reimport.c).
 *
 * The rules are Silo's ImportJobs (docs/api.md, "silo.import_jobs"): every
 * attempt ended, all but the last Failed; no attempts gives a pending
 * job, a last Succeeded or Cancelled attempt that status, a last Failed
 * one Failed when the Failed attempts used up the retry policy, else a
 * pending job with the next attempt number.  A pending import writes its
 * task, or walks its limits, as an enqueue does.  A batch that names a
 * running job is refused whole; other per-job refusals write nothing of
 * that job and are its result row.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_core.h"

#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"

/* the worker_id of an imported attempt that started, unless one is given */
#define IMPORT_WORKER	"import"

/*
 * import_check_attempt: the checks of attempt i (0-based) of job's n.
 */
static void
import_check_attempt(SiloImportJob *job, int i, TimestampTz now)
{
	SiloImportAttempt *a = &job->attempts[i];
	bool		failed = strcmp(a->status, "Failed") == 0;

	if (!failed && strcmp(a->status, "Succeeded") != 0 && strcmp(a->status, "Cancelled") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("attempt status must be Succeeded, Failed or Cancelled"),
				 errdetail("Attempt %d has status \"%s\"; only attempts that ended can be imported.",
						   i + 1, a->status)));
	if (i < job->nattempts - 1 && !failed)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("only the last attempt may be %s", a->status),
				 errdetail("Attempt %d of %d is %s; every attempt before the last must be Failed.",
						   i + 1, job->nattempts, a->status)));
	if (TIMESTAMP_NOT_FINITE(a->finished_at) ||
		(a->has_started && TIMESTAMP_NOT_FINITE(a->started_at)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("attempt times must be finite timestamps"),
				 errdetail("Attempt %d has an infinite time.", i + 1)));
	if (a->finished_at > now)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("attempt finished_at must not be in the future"),
				 errdetail("Attempt %d finished at %s.", i + 1, timestamptz_to_str(a->finished_at))));
	if (a->has_started && a->started_at > a->finished_at)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("attempt started_at must not be after its finished_at"),
				 errdetail("Attempt %d started at %s.", i + 1, timestamptz_to_str(a->started_at))));
	if (i > 0 && a->finished_at < job->attempts[i - 1].finished_at)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("attempts must be in the order they ran"),
				 errdetail("Attempt %d finished before attempt %d.", i + 1, i)));
	if (a->worker_id != NULL)
	{
		if (!a->has_started)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("an attempt with a worker_id needs its started_at"),
					 errdetail("Attempt %d has no started_at.", i + 1)));
		silo_check_length("worker_id", a->worker_id, 1, SILO_MAX_WORKER_LEN);
	}
	if (a->result != NULL && strcmp(a->status, "Succeeded") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("only a Succeeded attempt has a result"),
				 errdetail("Attempt %d is %s.", i + 1, a->status)));
	if (!failed && (a->error_code != NULL || a->error_data != NULL))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("only a Failed attempt has an error_code or error_data"),
				 errdetail("Attempt %d is %s.", i + 1, a->status)));
	if (failed && a->error_code == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("a Failed attempt needs an error_code"),
				 errdetail("Attempt %d has none.", i + 1)));
	if (failed)
		silo_check_length("error_code", a->error_code, 1, SILO_MAX_ERROR_CODE_LEN);
}

/*
 * silo_import_check: check one job to import (22023, 22004) before
 * anything is written: enqueue's checks of its fields (normalizing its
 * limits), its id, and its history.
 */
void
silo_import_check(SiloImportJob *job)
{
	TimestampTz now = silo_now_ts();
	int			i;

	if (job->job.id == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("id must not be null"),
				 errdetail("An imported job keeps the id it had in the system it comes from.")));
	silo_enqueue_check(&job->job);
	if (job->has_enqueued_at && TIMESTAMP_NOT_FINITE(job->enqueued_at))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("enqueued_at must be a finite timestamp")));
	if (job->nattempts > SILO_MAX_IMPORT_ATTEMPTS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a job may bring at most %d attempts", SILO_MAX_IMPORT_ATTEMPTS),
				 errdetail("This one brings %d.", job->nattempts)));
	for (i = 0; i < job->nattempts; i++)
		import_check_attempt(job, i, now);
}

/*
 * silo_import_outcome: the state job's history leads to, under policy
 * (the retry policy that goes on), attempt i of the history being number
 * first_attempt + i.  Silo counts a job's retries by its Failed attempts:
 * relative attempt numbers are the history's own, from 1.
 */
void
silo_import_outcome(SiloImportJob *job, const SiloRetryPolicy *policy, int32 first_attempt,
					TimestampTz now, SiloImportOutcome *out)
{
	int			n = job->nattempts;

	memset(out, 0, sizeof(*out));
	if (n > 0)
	{
		SiloImportAttempt *last = &job->attempts[n - 1];

		/* when the last is Failed all are: n failures, n - 1 retries */
		if (strcmp(last->status, "Failed") != 0 || policy->count < 0 || n > policy->count)
		{
			out->status = last->status;
			out->changed_at = last->finished_at;
			out->attempt = first_attempt + n - 1;
			out->relative_attempt = n;
			return;
		}
	}
	out->status = "Pending";
	out->pending = true;
	out->changed_at = now;
	out->attempt = first_attempt + n;
	out->relative_attempt = n + 1;
	/* as an enqueue: a back-dated start is now */
	out->due = job->job.start_at <= now;
	out->next_attempt_at = out->due ? now : job->job.start_at;
}

/*
 * silo_import_state_name: the job's state after its import, as silo.jobs
 * names it.
 */
const char *
silo_import_state_name(const SiloImportOutcome *out, TimestampTz now)
{
	if (!out->pending)
		return out->status;
	if (out->next_attempt_at > now)
		return out->relative_attempt > 1 ? "Retrying" : "Scheduled";
	return "Waiting";
}

/*
 * silo_import_write_attempts: the attempt rows of job's history from
 * attempt from (0-based) on, attempt i numbered first_attempt + i.
 */
void
silo_import_write_attempts(const char *tenant, const char *id, SiloImportJob *job, int from,
						   int32 first_attempt)
{
	SiloDirect *d;
	SiloTable  *t;
	int			i;

	if (from >= job->nattempts)
		return;
	d = silo_direct_begin();
	t = silo_attempt_open(d);
	for (i = from; i < job->nattempts; i++)
	{
		SiloImportAttempt *a = &job->attempts[i];
		SiloAttemptRow row;

		memset(&row, 0, sizeof(row));
		row.tenant = CStringGetTextDatum(tenant);
		row.job_id = CStringGetTextDatum(id);
		row.attempt = first_attempt + i;
		row.relative_attempt = i + 1;
		row.task_id = silo_new_uuid();
		if (a->has_started)
			row.worker_id = CStringGetTextDatum(a->worker_id ? a->worker_id : IMPORT_WORKER);
		row.status = CStringGetTextDatum(a->status);
		row.started_at = a->started_at;
		row.finished_at = a->finished_at;
		row.result = a->result ? JsonbPGetDatum(a->result) : (Datum) 0;
		row.error_code = a->error_code;
		row.error_data = a->error_data;
		silo_attempt_put(t, &row);
	}
	silo_direct_end(d);
}

/*
 * silo_import_settle: what follows an imported job's new state: a
 * Cancelled job's flag (every Cancelled job has one, as after a cancel),
 * a terminal job's waiters woken at commit, a pending job's task (or its
 * limit walk, appended to chains for the batch's end, as enqueue_many
 * does) with the wake-up an enqueue gives.  SPI must be connected.
 */
void
silo_import_settle(SiloImportTarget *t, SiloImportOutcome *o, Datum task_id, List **chains)
{
	if (!o->pending)
	{
		if (strcmp(o->status, "Cancelled") == 0)
			silo_cancellation_insert(t->tenant, t->id, o->changed_at, false);
		silo_wait_job_ended(t->tenant, t->id);
		return;
	}
	if (t->nlimits == 0)
	{
		SiloTaskRow task;

		memset(&task, 0, sizeof(task));
		task.task_group = t->task_group;
		task.start_at = o->next_attempt_at;
		task.priority = t->priority;
		task.tenant = t->tenant;
		task.job_id = t->id;
		task.attempt = o->attempt;
		task.relative_attempt = o->relative_attempt;
		task.task_id = task_id;
		task.seq = t->seq;
		task.due = o->due;
		task.has_info_tid = task.has_status_tid = t->has_hints;
		task.info_tid = t->info_tid;
		task.status_tid = t->status_tid;
		silo_task_insert(&task);
		if (o->due)
			silo_notify_group(t->task_group);
		else
			silo_wake_broker_at_commit();
	}
	else
	{
		SiloChainJob *chain = palloc0(sizeof(SiloChainJob));

		chain->tenant = t->tenant;
		chain->job_id = t->id;
		chain->task_group = t->task_group;
		chain->priority = t->priority;
		chain->seq = t->seq;
		chain->attempt = o->attempt;
		chain->relative_attempt = o->relative_attempt;
		chain->task_id = task_id;
		chain->start_at = o->next_attempt_at;
		chain->nlimits = t->nlimits;
		chain->limits = t->limits;
		chain->has_info_tid = chain->has_status_tid = t->has_hints;
		chain->info_tid = t->info_tid;
		chain->status_tid = t->status_tid;
		*chains = lappend(*chains, chain);
	}
}

/*
 * silo_import_refuse: job is not imported; error (with its SQLSTATE) is
 * its result, copied out of SPI's memory for the caller.  Nothing of the
 * job has been written.  SPI must be connected.
 */
void
silo_import_refuse(SiloImportJob *job, const char *sqlstate, char *error)
{
	job->success = false;
	job->status = NULL;
	job->error = SPI_palloc(strlen(error) + 1);
	strcpy(job->error, error);
	job->sqlstate = sqlstate;
}

/*
 * silo_import_running: refuse the whole batch: job (tenant, id) is
 * running (SL013).  The error rolls back whatever the batch wrote.
 */
void
silo_import_running(const char *tenant, const char *id)
{
	ereport(ERROR,
			(errcode(ERRCODE_SILO_JOB_NOT_REIMPORTABLE),
			 errmsg("job \"%s\" of tenant \"%s\" is running", id, tenant),
			 errdetail("A batch that re-imports a running job is refused whole: no job of it was imported."),
			 errhint("Import the batch again once the job's attempt has ended.")));
}

/*
 * silo_import_new: import job, whose id the tenant does not have: its rows in
 * the state its history leads to, its attempts, its metadata.
 */
void
silo_import_new(SiloImportJob *job, TimestampTz now, List **chains)
{
	SiloEnqueueArgs *a = &job->job;
	SiloImportOutcome o;
	SiloImportTarget t;
	SiloJobRow	row;

	silo_import_outcome(job, &a->retry, 1, now, &o);
	memset(&row, 0, sizeof(row));
	row.tenant = a->tenant;
	row.id = a->id;
	row.task_group = a->task_group;
	row.priority = a->priority;
	row.start_at = a->start_at;
	row.enqueued_at = job->has_enqueued_at ? job->enqueued_at : now;
	row.payload = a->payload;
	row.retry = a->retry;
	row.limits = a->limits;
	row.metadata = a->metadata;
	row.task_id = o.pending ? silo_new_uuid() : (Datum) 0;
	row.next_attempt_at = o.next_attempt_at;

	memset(&t, 0, sizeof(t));
	if (!silo_job_insert_imported(&row, o.status, o.changed_at, o.attempt, o.relative_attempt,
								  &t.seq, &t.info_tid, &t.status_tid))
	{
		silo_import_refuse(job, "23505",
						   psprintf("job \"%s\" was created in tenant \"%s\" by another transaction during the import",
									a->id, a->tenant));
		return;
	}
	silo_import_write_attempts(a->tenant, a->id, job, 0, 1);
	if (JB_ROOT_COUNT(a->metadata) > 0)
		silo_job_metadata_insert(a->tenant, a->id, a->metadata);

	t.tenant = a->tenant;
	t.id = a->id;
	t.task_group = a->task_group;
	t.priority = a->priority;
	t.nlimits = a->nlimits;
	t.limits = a->parsed_limits;
	t.has_hints = true;
	silo_import_settle(&t, &o, row.task_id, chains);
	job->success = true;
	job->status = silo_import_state_name(&o, now);
}

/*
 * import_exists: whether the tenant has job id, and refuse the batch if
 * it is running.  SPI must be connected.
 */
static bool
import_exists(Datum *key)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {TEXTOID, TEXTOID};

	silo_exec(&plan,
			  "SELECT s.status = 'Pending' AND EXISTS (SELECT 1 FROM silo.task_lease l"
			  "  WHERE l.task_id = s.task_id) FROM silo.job_status s"
			  " WHERE s.tenant = $1 AND s.id = $2",
			  2, types, key, NULL, false, 0);
	if (SPI_processed == 0)
		return false;
	if (silo_col_bool(0, 1))
		silo_import_running(TextDatumGetCString(key[0]), TextDatumGetCString(key[1]));
	return true;
}

/*
 * import_check_unique: 22023 when jobs names one job twice (a re-import
 * inside the batch would be undefined).
 */
static void
import_check_unique(int njobs, SiloImportJob *jobs)
{
	HASHCTL		ctl;
	HTAB	   *seen;
	int			i;

	/* the limits count characters: a key holds them in the longest encoding */
	int			keysize = (SILO_MAX_TENANT_LEN + SILO_MAX_ID_LEN) *
	pg_database_encoding_max_length() + 2;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = keysize;
	ctl.entrysize = ctl.keysize;
	ctl.hcxt = CurrentMemoryContext;
	seen = hash_create("silo import ids", Max(njobs, 16), &ctl,
					   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	for (i = 0; i < njobs; i++)
	{
		char	   *key = palloc0(keysize);
		bool		found;

		/* names hold no control characters (silo_check_name) */
		snprintf(key, keysize, "%s\x01%s", jobs[i].job.tenant, jobs[i].job.id);
		hash_search(seen, key, HASH_ENTER, &found);
		if (found)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("job \"%s\" of tenant \"%s\" appears twice in jobs",
							jobs[i].job.id, jobs[i].job.tenant),
					 errdetail("Element %d repeats an earlier one.", i),
					 errhint("Import each job once, with its whole history.")));
	}
	hash_destroy(seen);
}

/*
 * silo_import_batch: the work of silo.import_jobs on checked jobs: first
 * refuse the batch if any names a running job, then import each (new, or
 * re-imported), setting its result; limit walks start once every job row
 * is written, as in enqueue_many.
 */
void
silo_import_batch(int njobs, SiloImportJob *jobs)
{
	TimestampTz now = silo_now_ts();
	List	   *chains = NIL;
	bool	   *exists;
	ListCell   *lc;
	int			i;

	import_check_unique(njobs, jobs);
	for (i = 0; i < njobs; i++)
	{
		/* counting a key's holders must see every committed grant */
		if (jobs[i].job.nlimits > 0)
			silo_require_read_committed("silo.import_jobs with limits");
	}

	exists = palloc0(sizeof(bool) * Max(njobs, 1));
	silo_spi_connect();
	for (i = 0; i < njobs; i++)
	{
		Datum		key[2];

		key[0] = CStringGetTextDatum(jobs[i].job.tenant);
		key[1] = CStringGetTextDatum(jobs[i].job.id);
		exists[i] = import_exists(key);
	}
	for (i = 0; i < njobs; i++)
	{
		Datum		key[2];

		key[0] = CStringGetTextDatum(jobs[i].job.tenant);
		key[1] = CStringGetTextDatum(jobs[i].job.id);
		/* a job purged or deleted meanwhile is imported anew */
		if (!exists[i] || !silo_reimport_job(&jobs[i], key, now, &chains))
			silo_import_new(&jobs[i], now, &chains);
		CHECK_FOR_INTERRUPTS();
	}
	foreach(lc, chains)
	{
		silo_chain_start((SiloChainJob *) lfirst(lc), now);
		CHECK_FOR_INTERRUPTS();
	}
	silo_spi_finish();
}
