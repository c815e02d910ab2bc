/*-------------------------------------------------------------------------
 *
 * enqueue.c
 *	  SQL entry points silo.enqueue and silo.enqueue_many: their arguments
 *	  (enqueue_many's job objects included), then core/enqueue.c.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_api.h"

#include <math.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"

PG_FUNCTION_INFO_V1(silo_enqueue);
PG_FUNCTION_INFO_V1(silo_enqueue_many);

/*
 * enqueue_parse_on_conflict: 'error' or 'ignore'.
 */
static bool
enqueue_parse_on_conflict(const char *value)
{
	if (strcmp(value, "ignore") == 0)
		return true;
	if (strcmp(value, "error") == 0)
		return false;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("on_conflict must be 'error' or 'ignore'"),
			 errdetail("The value given is \"%s\".", value)));
	return false;				/* keep compiler quiet */
}

/*
 * silo_enqueue: SQL entry point silo.enqueue(task_group, payload, tenant,
 * id, priority, start_at, retry_policy, limits, metadata, on_conflict).
 */
Datum
silo_enqueue(PG_FUNCTION_ARGS)
{
	SiloEnqueueArgs args;

	memset(&args, 0, sizeof(args));
	args.task_group = silo_text_arg(fcinfo, 0, "task_group", 1, SILO_MAX_GROUP_LEN);
	silo_require_arg(fcinfo, 1, "payload");
	args.payload = PG_GETARG_JSONB_P(1);
	args.tenant = silo_text_arg(fcinfo, 2, "tenant", 1, SILO_MAX_TENANT_LEN);
	args.id = PG_ARGISNULL(3) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(3));
	silo_require_arg(fcinfo, 4, "priority");
	args.priority = PG_GETARG_INT32(4);
	silo_require_arg(fcinfo, 5, "start_at");
	args.start_at = PG_GETARG_TIMESTAMPTZ(5);
	silo_parse_retry_policy(PG_ARGISNULL(6) ? NULL : PG_GETARG_JSONB_P(6), &args.retry);
	silo_require_arg(fcinfo, 7, "limits");
	args.limits = PG_GETARG_JSONB_P(7);
	silo_require_arg(fcinfo, 8, "metadata");
	args.metadata = PG_GETARG_JSONB_P(8);
	silo_require_arg(fcinfo, 9, "on_conflict");
	args.ignore_conflict = enqueue_parse_on_conflict(text_to_cstring(PG_GETARG_TEXT_PP(9)));
	silo_api_begin("silo.enqueue", SILO_API_WRITES | SILO_API_ANY_SCHEMA);
	silo_api_tenant(args.tenant);

	PG_RETURN_TEXT_P(cstring_to_text(silo_enqueue_job(&args)));
}

/*
 * silo_json_string_field: a required JSON string field as a C string.
 */
char *
silo_json_string_field(const char *key, JsonbValue *v)
{
	if (v->type == jbvNull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", key)));
	if (v->type != jbvString)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a JSON string", key)));
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/*
 * silo_json_timestamp_field: an ISO 8601 timestamp field (key names it)
 * of a job object, a JSON string.  The datetime parser leaves no state
 * behind when it fails, so its error can be caught and re-raised as 22023
 * without a subtransaction.
 */
TimestampTz
silo_json_timestamp_field(const char *key, JsonbValue *v)
{
	const char *s = silo_json_string_field(key, v);
	MemoryContext oldcxt = CurrentMemoryContext;
	volatile TimestampTz result = 0;

	PG_TRY();
	{
		result = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in,
														 CStringGetDatum(s),
														 ObjectIdGetDatum(InvalidOid),
														 Int32GetDatum(-1)));
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a timestamp such as an ISO 8601 string", key),
				 errdetail("%s", edata->message),
				 errhint("Example: \"2026-11-22T10:00:00Z\".")));
	}
	PG_END_TRY();
	return result;
}

/*
 * silo_enqueue_from_json: fill args from one job object (of enqueue_many's
 * array, or import_jobs').  Keys are enqueue's argument names; extra, if
 * given, is offered every key first and takes the ones it knows (import's
 * own); anything else is rejected, with hint listing the keys.
 */
void
silo_enqueue_from_json(JsonbValue *obj, SiloEnqueueArgs *args, SiloJobKeyFn extra,
					   void *extra_arg, const char *hint)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *key = NULL;
	bool		have_group = false;

	if (obj->type != jbvBinary || JsonContainerIsArray(obj->val.binary.data) ||
		JsonContainerIsScalar(obj->val.binary.data))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("each element of jobs must be a JSON object")));

	/* Defaults, as in silo.enqueue. */
	args->payload = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")));
	args->tenant = "-";
	args->id = NULL;
	args->priority = 50;
	args->start_at = GetCurrentTransactionStartTimestamp();
	silo_parse_retry_policy(NULL, &args->retry);
	args->limits = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("[]")));
	args->metadata = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")));
	args->ignore_conflict = false;

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

		if (extra && extra(key, &v, extra_arg))
			continue;
		if (strcmp(key, "task_group") == 0)
		{
			args->task_group = silo_json_string_field(key, &v);
			have_group = true;
		}
		else if (strcmp(key, "payload") == 0)
			args->payload = JsonbValueToJsonb(&v);
		else if (strcmp(key, "tenant") == 0)
			args->tenant = silo_json_string_field(key, &v);
		else if (strcmp(key, "id") == 0)
			args->id = v.type == jbvNull ? NULL : silo_json_string_field(key, &v);
		else if (strcmp(key, "priority") == 0)
		{
			double		d;

			if (v.type == jbvNull)
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("priority must not be null")));
			if (v.type != jbvNumeric)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("priority must be a JSON number")));
			d = DatumGetFloat8(DirectFunctionCall1(numeric_float8_no_overflow,
												   NumericGetDatum(v.val.numeric)));
			if (!(d >= -1e9 && d <= 1e9) || d != floor(d))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("priority must be an integer between 0 and 99")));
			args->priority = (int32) d;
		}
		else if (strcmp(key, "start_at") == 0)
		{
			args->start_at = silo_json_timestamp_field(key, &v);
		}
		else if (strcmp(key, "retry_policy") == 0)
			silo_parse_retry_policy(v.type == jbvNull ? NULL : JsonbValueToJsonb(&v),
									&args->retry);
		else if (strcmp(key, "limits") == 0 || strcmp(key, "metadata") == 0)
		{
			if (v.type == jbvNull)
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("%s must not be null", key)));
			if (key[0] == 'l')
				args->limits = JsonbValueToJsonb(&v);
			else
				args->metadata = JsonbValueToJsonb(&v);
		}
		else if (strcmp(key, "on_conflict") == 0)
			args->ignore_conflict = enqueue_parse_on_conflict(silo_json_string_field(key, &v));
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unknown key \"%s\" in a job object", key),
					 errhint("%s", hint)));
	}
	if (!have_group)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("task_group must not be null"),
				 errdetail("Every job object needs a \"task_group\" key.")));
}

/*
 * enqueue_many_error_context: say which array element an error is about.
 */
static void
enqueue_many_error_context(void *arg)
{
	errcontext("job %d of the jobs array (counting from 0)", *(int *) arg);
}

/*
 * silo_enqueue_many: SQL entry point silo.enqueue_many(jobs jsonb).  All
 * or nothing: any invalid element aborts the statement.  Ids come back in
 * input order; jobs walk their limits in input order, after every job row
 * is written.
 */
Datum
silo_enqueue_many(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Jsonb	   *jobs;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	ErrorContextCallback errcb;
	int			index = 0;
	List	   *chains = NIL;

	silo_require_arg(fcinfo, 0, "jobs");
	jobs = PG_GETARG_JSONB_P(0);
	if (!JB_ROOT_IS_ARRAY(jobs) || JB_ROOT_IS_SCALAR(jobs))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("jobs must be a JSON array of job objects")));
	silo_api_begin("silo.enqueue_many", SILO_API_WRITES | SILO_API_ANY_SCHEMA);

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);

	errcb.callback = enqueue_many_error_context;
	errcb.arg = &index;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;

	it = JsonbIteratorInit(&jobs->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		SiloEnqueueArgs args;
		Datum		id;
		bool		isnull = false;

		if (tok != WJB_ELEM)
			continue;
		memset(&args, 0, sizeof(args));
		silo_enqueue_from_json(&v, &args, NULL, NULL,
							   "Keys are silo.enqueue's argument names: task_group, payload, tenant, id, priority, start_at, retry_policy, limits, metadata, on_conflict.");
		silo_api_tenant(args.tenant);
		args.chains = &chains;
		id = CStringGetTextDatum(silo_enqueue_job(&args));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &id, &isnull);
		index++;
		CHECK_FOR_INTERRUPTS();
	}
	error_context_stack = errcb.previous;

	/* limits are walked once every job row is in */
	silo_enqueue_start_chains(chains);
	return (Datum) 0;
}
