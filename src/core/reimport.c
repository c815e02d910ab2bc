/*-------------------------------------------------------------------------
 *
 * reimport.c
 *	  A re-import (silo.import_jobs of a job whose id the tenant has): the
 *	  history brought must extend the job's own, attempt by attempt; its
 *	  new attempts are added, its old scheduling state is cleaned up, and
 *	  it takes the state the whole history leads to (import.c).
 *
 * Silo's rules (docs/api.md, "silo.import_jobs"): a running job refuses the
 * whole batch; a Succeeded job, a history that does not start with the
 * job's attempts, or one that adds none refuse only this job.  The job
 * keeps its fields but takes the retry policy brought; its cancellation
 * flag is dropped (a Cancelled result sets a new one).  The job's status
 * row is locked first (FOR UPDATE), as every job operation does.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_core.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgrprotos.h"

/* What reimport_lock reads of an existing job. */
typedef struct ReimportState
{
	char	   *status;			/* Pending or a terminal status */
	TimestampTz changed_at;
	bool		has_task;
	Datum		task_id;		/* the pending attempt's task */
	TimestampTz next_attempt_at;
	int32		attempt;
	char	   *task_group;
	int32		priority;
	int64		seq;
	int			nlimits;
	SiloLimit  *limits;
} ReimportState;

static const Oid reimport_key_types[2] = {TEXTOID, TEXTOID};

/*
 * reimport_lock: lock job key's status row and read its state; false when
 * there is no such job.  SPI must be connected.
 */
static bool
reimport_lock(Datum *key, ReimportState *st)
{
	static SPIPlanPtr plan = NULL;
	bool		isnull;

	silo_exec(&plan,
			  "SELECT s.status, s.changed_at, s.task_id, s.next_attempt_at, s.attempt,"
			  "  i.task_group, i.priority, i.seq, i.limits"
			  "  FROM silo.job_status s JOIN silo.job_info i ON i.tenant = s.tenant AND i.id = s.id"
			  " WHERE s.tenant = $1 AND s.id = $2 FOR UPDATE OF s",
			  2, reimport_key_types, key, NULL, false, 0);
	if (SPI_processed == 0)
		return false;
	st->status = silo_col_text(0, 1);
	st->changed_at = silo_col_ts(0, 2, NULL);
	st->task_id = silo_col(0, 3, &isnull);
	st->has_task = !isnull;
	if (st->has_task)
		st->task_id = datumCopy(st->task_id, false, UUID_LEN);
	st->next_attempt_at = silo_col_ts(0, 4, NULL);
	st->attempt = silo_col_int32(0, 5);
	st->task_group = silo_col_text(0, 6);
	st->priority = DatumGetInt16(silo_col(0, 7, &isnull));
	st->seq = silo_col_int64(0, 8);
	st->nlimits = silo_parse_limits(DatumGetJsonbP(silo_col(0, 9, &isnull)), &st->limits, NULL);
	return true;
}

/*
 * reimport_jsonb_same: whether two nullable jsonb columns hold the same.
 */
static bool
reimport_jsonb_same(Datum a, bool a_null, Jsonb *b)
{
	if (a_null || b == NULL)
		return a_null && b == NULL;
	return DatumGetBool(DirectFunctionCall2(jsonb_eq, a, JsonbPGetDatum(b)));
}

/*
 * reimport_row_matches: whether attempt row r (of the last statement)
 * records attempt a of the history: status, times, result, error.
 */
static bool
reimport_row_matches(int r, SiloImportAttempt *a)
{
	bool		null_started;
	bool		null_code;
	bool		isnull;
	TimestampTz started = silo_col_ts(r, 3, &null_started);
	Datum		result = silo_col(r, 5, &isnull);
	char	   *code;

	if (strcmp(silo_col_text(r, 2), a->status) != 0)
		return false;
	if (null_started != !a->has_started || (!null_started && started != a->started_at))
		return false;
	if (silo_col_ts(r, 4, NULL) != a->finished_at)
		return false;
	if (!reimport_jsonb_same(result, isnull, a->result))
		return false;
	(void) silo_col(r, 6, &null_code);
	code = null_code ? NULL : silo_col_text(r, 6);
	if ((code == NULL) != (a->error_code == NULL) ||
		(code != NULL && strcmp(code, a->error_code) != 0))
		return false;
	result = silo_col(r, 7, &isnull);
	return reimport_jsonb_same(result, isnull, a->error_data);
}

/*
 * reimport_history: NULL when job's history starts with the job's own
 * attempts (*nexisting of them, the first numbered *first_attempt) and
 * adds at least one; else why it does not, for the job's result.  SPI
 * must be connected.
 */
static char *
reimport_history(SiloImportJob *job, Datum *key, int *nexisting, int32 *first_attempt)
{
	static SPIPlanPtr plan = NULL;
	int			m;
	int			r;

	silo_exec(&plan,
			  "SELECT attempt, status, started_at, finished_at, result, error_code, error_data"
			  "  FROM silo.attempt WHERE tenant = $1 AND job_id = $2 ORDER BY attempt",
			  2, reimport_key_types, key, NULL, false, 0);
	m = (int) SPI_processed;
	if (m > job->nattempts)
		return psprintf("the import brings %d attempts but the job has %d", job->nattempts, m);
	for (r = 0; r < m; r++)
	{
		if (!reimport_row_matches(r, &job->attempts[r]))
			return psprintf("attempt %d of the import does not match the job's attempt %d",
							r + 1, silo_col_int32(r, 1));
	}
	if (m == job->nattempts)
		return psprintf("the import brings no attempt beyond the job's %d", m);
	*nexisting = m;
	*first_attempt = m > 0 ? silo_col_int32(m - 1, 1) - m + 1 : 1;
	return NULL;
}

/*
 * reimport_unschedule: remove the pending attempt of job key (state st)
 * from wherever it waits, freeing the slots it holds.  A worker that
 * leased it meanwhile refuses the batch.
 */
static void
reimport_unschedule(Datum *key, ReimportState *st, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[6] = {TEXTOID, TEXTOID, TEXTOID, TIMESTAMPTZOID, INT2OID, INT4OID};
	Datum		values[6];
	bool		removed;

	if (st->nlimits > 0)
	{
		SiloChainJob job;

		memset(&job, 0, sizeof(job));
		job.tenant = TextDatumGetCString(key[0]);
		job.job_id = TextDatumGetCString(key[1]);
		job.task_group = st->task_group;
		job.priority = st->priority;
		job.seq = st->seq;
		job.attempt = st->attempt;
		job.relative_attempt = 1;
		job.task_id = st->task_id;
		job.start_at = st->next_attempt_at;
		job.nlimits = st->nlimits;
		job.limits = st->limits;
		removed = silo_chain_cancel(&job, now);
	}
	else
	{
		values[0] = key[0];
		values[1] = key[1];
		values[2] = CStringGetTextDatum(st->task_group);
		values[3] = TimestampTzGetDatum(st->next_attempt_at);
		values[4] = Int16GetDatum((int16) st->priority);
		values[5] = Int32GetDatum(st->attempt);
		silo_exec(&plan,
				  "DELETE FROM silo.task WHERE task_group = $3 AND start_at = $4 AND priority = $5"
				  " AND tenant = $1 AND job_id = $2 AND attempt = $6",
				  6, types, values, NULL, false, 0);
		removed = SPI_processed == 1;
	}
	if (removed)
		return;
	if (silo_task_leased(st->task_id))
		silo_import_running(TextDatumGetCString(key[0]), TextDatumGetCString(key[1]));
	ereport(ERROR,
			(errcode(ERRCODE_SILO_INTERNAL),
			 errmsg("pending job \"%s\" is neither waiting nor leased",
					TextDatumGetCString(key[1]))));
}

/*
 * reimport_update: the job's new state o (task task_id when pending), the
 * retry policy brought, and no cancellation flag, in one statement.
 */
static void
reimport_update(Datum *key, SiloImportJob *job, SiloImportOutcome *o, Datum task_id)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[13] = {
		TEXTOID, TEXTOID, TEXTOID, TIMESTAMPTZOID, INT4OID, INT4OID, UUIDOID,
		TIMESTAMPTZOID, INT4OID, INT8OID, INT8OID, FLOAT8OID, BOOLOID
	};
	Datum		values[13];
	char		nulls[13];
	const SiloRetryPolicy *p = &job->job.retry;
	int			i;

	memset(nulls, ' ', sizeof(nulls));
	values[0] = key[0];
	values[1] = key[1];
	values[2] = CStringGetTextDatum(o->status);
	values[3] = TimestampTzGetDatum(o->changed_at);
	values[4] = Int32GetDatum(o->attempt);
	values[5] = Int32GetDatum(o->relative_attempt);
	values[6] = task_id;
	values[7] = TimestampTzGetDatum(o->next_attempt_at);
	nulls[6] = nulls[7] = o->pending ? ' ' : 'n';
	values[8] = Int32GetDatum(p->count);
	values[9] = Int64GetDatum(p->initial_ms);
	values[10] = Int64GetDatum(p->max_ms);
	values[11] = Float8GetDatum(p->factor);
	values[12] = BoolGetDatum(p->randomize);
	for (i = 8; i < 13 && p->count < 0; i++)
		nulls[i] = 'n';
	silo_exec(&plan,
			  "WITH c AS (DELETE FROM silo.job_cancellation WHERE tenant = $1 AND job_id = $2),"
			  " i AS (UPDATE silo.job_info SET retry_count = $9, retry_initial_ms = $10,"
			  "   retry_max_ms = $11, retry_factor = $12, retry_randomize = $13"
			  "   WHERE tenant = $1 AND id = $2)"
			  "UPDATE silo.job_status SET status = $3, changed_at = $4, attempt = $5,"
			  "  relative_attempt = $6, task_id = $7, next_attempt_at = $8"
			  " WHERE tenant = $1 AND id = $2",
			  13, types, values, nulls, false, 0);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_INTERNAL),
				 errmsg("locked job \"%s\" has no status row", TextDatumGetCString(key[1]))));
}

/*
 * silo_reimport_job: re-import job, whose tenant has its id (key); false
 * when the job is gone by the time its row is locked (the caller imports
 * it anew).  A refusal is set as the job's result, with nothing written.
 * SPI must be connected.
 */
bool
silo_reimport_job(SiloImportJob *job, Datum *key, TimestampTz now, List **chains)
{
	ReimportState st;
	SiloImportOutcome o;
	SiloImportTarget t;
	int			nexisting = 0;
	int32		first = 1;
	char	   *why;
	Datum		task_id = (Datum) 0;
	bool		pending;

	if (!reimport_lock(key, &st))
		return false;
	pending = strcmp(st.status, "Pending") == 0;
	if (pending && !st.has_task)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_INTERNAL),
				 errmsg("pending job \"%s\" has no task", job->job.id)));
	if (pending && silo_task_leased(st.task_id))
		silo_import_running(job->job.tenant, job->job.id);
	if (strcmp(st.status, "Succeeded") == 0)
	{
		silo_import_refuse(job, "SL013", "job already succeeded");
		return true;
	}
	why = reimport_history(job, key, &nexisting, &first);
	if (why)
	{
		silo_import_refuse(job, "SL013", why);
		return true;
	}
	/* Its limits' holders must be counted on fresh snapshots (enqueue). */
	if (st.nlimits > 0)
		silo_require_read_committed("silo.import_jobs of a job with limits");

	if (pending)
		reimport_unschedule(key, &st, now);
	silo_import_outcome(job, &job->job.retry, first, now, &o);
	if (o.pending)
		task_id = silo_new_uuid();
	reimport_update(key, job, &o, task_id);
	silo_status_index_move(job->job.tenant, job->job.id, st.status, st.changed_at,
						   o.status, o.changed_at);
	silo_import_write_attempts(job->job.tenant, job->job.id, job, nexisting, first);

	/* the job keeps its group, priority, order and limits */
	memset(&t, 0, sizeof(t));
	t.tenant = job->job.tenant;
	t.id = job->job.id;
	t.task_group = st.task_group;
	t.priority = st.priority;
	t.seq = st.seq;
	t.nlimits = st.nlimits;
	t.limits = st.limits;
	silo_import_settle(&t, &o, task_id, chains);
	job->success = true;
	job->status = silo_import_state_name(&o, now);
	return true;
}
