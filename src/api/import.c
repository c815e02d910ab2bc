/*-------------------------------------------------------------------------
 *
 * import.c
 *	  SQL entry point silo.import_jobs(jobs jsonb): its job objects (enqueue
 *	  _many's keys, with enqueued_at and attempts), then core/import.c, and
 *	  a result row per job.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_api.h"

#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(silo_import_jobs);

#define IMPORT_KEYS_HINT \
	"Keys are silo.enqueue's argument names but on_conflict (task_group, payload, tenant, id," \
	" priority, start_at, retry_policy, limits, metadata), with enqueued_at and attempts."

/*
 * import_json_jsonb: a JSON value as jsonb; NULL for JSON null.
 */
static Jsonb *
import_json_jsonb(JsonbValue *v)
{
	return v->type == jbvNull ? NULL : JsonbValueToJsonb(v);
}

/*
 * import_parse_attempt: fill a from one object of an attempts array.
 */
static void
import_parse_attempt(JsonbValue *obj, SiloImportAttempt *a, int n)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *key = NULL;
	bool		have_finished = false;

	if (obj->type != jbvBinary || !JsonContainerIsObject(obj->val.binary.data))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("each element of attempts must be a JSON object"),
				 errdetail("Attempt %d is not.", n)));
	memset(a, 0, sizeof(*a));
	it = JsonbIteratorInit(obj->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			key = pnstrdup(v.val.string.val, v.val.string.len);
			continue;
		}
		if (tok != WJB_VALUE)
			continue;
		if (strcmp(key, "status") == 0)
			a->status = silo_json_string_field("attempt status", &v);
		else if (strcmp(key, "finished_at") == 0)
		{
			a->finished_at = silo_json_timestamp_field("attempt finished_at", &v);
			have_finished = true;
		}
		else if (strcmp(key, "started_at") == 0)
		{
			a->has_started = v.type != jbvNull;
			if (a->has_started)
				a->started_at = silo_json_timestamp_field("attempt started_at", &v);
		}
		else if (strcmp(key, "worker_id") == 0)
			a->worker_id = v.type == jbvNull ? NULL : silo_json_string_field("worker_id", &v);
		else if (strcmp(key, "result") == 0)
			a->result = import_json_jsonb(&v);
		else if (strcmp(key, "error_code") == 0)
			a->error_code = v.type == jbvNull ? NULL : silo_json_string_field("error_code", &v);
		else if (strcmp(key, "error_data") == 0)
			a->error_data = import_json_jsonb(&v);
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unknown key \"%s\" in an attempt object", key),
					 errhint("Keys are status, started_at, finished_at, worker_id, result, error_code and error_data.")));
	}
	if (a->status == NULL || !have_finished)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("attempt %s must not be null", a->status == NULL ? "status" : "finished_at"),
				 errdetail("Attempt %d lacks it; every attempt needs a status and a finished_at.", n)));
}

/*
 * import_key: the keys of an imported job that enqueue_many's do not
 * have (a SiloJobKeyFn): enqueued_at and attempts; on_conflict is
 * refused (an existing id is re-imported).
 */
static bool
import_key(const char *key, JsonbValue *v, void *arg)
{
	SiloImportJob *job = (SiloImportJob *) arg;

	if (strcmp(key, "enqueued_at") == 0)
	{
		job->has_enqueued_at = v->type != jbvNull;
		if (job->has_enqueued_at)
			job->enqueued_at = silo_json_timestamp_field(key, v);
		return true;
	}
	if (strcmp(key, "on_conflict") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown key \"on_conflict\" in an imported job"),
				 errdetail("An imported job whose id exists is re-imported."),
				 errhint(IMPORT_KEYS_HINT)));
	if (strcmp(key, "attempts") == 0)
	{
		JsonbIterator *it;
		JsonbValue	e;
		JsonbIteratorToken tok;
		int			n = 0;

		if (v->type == jbvNull)
			return true;
		if (v->type != jbvBinary || !JsonContainerIsArray(v->val.binary.data) ||
			JsonContainerIsScalar(v->val.binary.data))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("attempts must be a JSON array of attempt objects")));
		job->nattempts = JsonContainerSize(v->val.binary.data);
		if (job->nattempts > SILO_MAX_IMPORT_ATTEMPTS)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a job may bring at most %d attempts", SILO_MAX_IMPORT_ATTEMPTS),
					 errdetail("This one brings %d.", job->nattempts)));
		job->attempts = palloc0(sizeof(SiloImportAttempt) * Max(job->nattempts, 1));
		it = JsonbIteratorInit(v->val.binary.data);
		while ((tok = JsonbIteratorNext(&it, &e, true)) != WJB_DONE)
		{
			if (tok != WJB_ELEM)
				continue;
			import_parse_attempt(&e, &job->attempts[n], n + 1);
			n++;
		}
		return true;
	}
	return false;
}

/*
 * import_error_context: say which array element an error is about.
 */
static void
import_error_context(void *arg)
{
	errcontext("job %d of the jobs array (counting from 0)", *(int *) arg);
}

/*
 * silo_import_jobs: SQL entry point silo.import_jobs(jobs jsonb).  Every
 * job object is checked, and its tenant allowed, before anything is
 * written: any error refuses the whole batch.  One row per job comes
 * back, in input order.
 */
Datum
silo_import_jobs(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Jsonb	   *arg;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	ErrorContextCallback errcb;
	SiloImportJob *jobs;
	int			njobs;
	int			index = 0;
	int			i;

	silo_require_arg(fcinfo, 0, "jobs");
	arg = PG_GETARG_JSONB_P(0);
	if (!JB_ROOT_IS_ARRAY(arg) || JB_ROOT_IS_SCALAR(arg))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("jobs must be a JSON array of job objects")));
	silo_api_begin("silo.import_jobs", SILO_API_WRITES);
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);

	njobs = JB_ROOT_COUNT(arg);
	jobs = palloc0(sizeof(SiloImportJob) * Max(njobs, 1));
	errcb.callback = import_error_context;
	errcb.arg = &index;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;
	it = JsonbIteratorInit(&arg->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		SiloImportJob *job;

		if (tok != WJB_ELEM)
			continue;
		job = &jobs[index];
		silo_enqueue_from_json(&v, &job->job, import_key, job, IMPORT_KEYS_HINT);
		silo_import_check(job);
		silo_api_tenant(job->job.tenant);
		index++;
		CHECK_FOR_INTERRUPTS();
	}
	error_context_stack = errcb.previous;

	silo_import_batch(njobs, jobs);

	for (i = 0; i < njobs; i++)
	{
		Datum		values[6];
		bool		nulls[6] = {false, false, false, false, false, false};

		values[0] = CStringGetTextDatum(jobs[i].job.id);
		values[1] = CStringGetTextDatum(jobs[i].job.tenant);
		values[2] = BoolGetDatum(jobs[i].success);
		nulls[3] = jobs[i].status == NULL;
		if (!nulls[3])
			values[3] = CStringGetTextDatum(jobs[i].status);
		nulls[4] = nulls[5] = jobs[i].success;
		if (!jobs[i].success)
		{
			values[4] = CStringGetTextDatum(jobs[i].error);
			values[5] = CStringGetTextDatum(jobs[i].sqlstate);
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
