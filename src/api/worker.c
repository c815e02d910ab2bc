/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  SQL entry points of the worker's side: silo.lease, silo.lease_job,
 *	  silo.heartbeat,
 *	  silo.complete, silo.fail, silo.ack_cancel, silo.release,
 *	  silo.complete_many, silo.report_refresh and silo.fail_refresh.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_api.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(silo_lease);
PG_FUNCTION_INFO_V1(silo_lease_job);
PG_FUNCTION_INFO_V1(silo_heartbeat);
PG_FUNCTION_INFO_V1(silo_complete);
PG_FUNCTION_INFO_V1(silo_fail);
PG_FUNCTION_INFO_V1(silo_ack_cancel);
PG_FUNCTION_INFO_V1(silo_release);
PG_FUNCTION_INFO_V1(silo_complete_many);
PG_FUNCTION_INFO_V1(silo_report_refresh);
PG_FUNCTION_INFO_V1(silo_fail_refresh);

/*
 * lease_tenants: the tenants a lease takes tasks of: the tenants argument
 * (a filter anyone may pass), narrowed to the caller's bindings when it
 * is bound; *n = -1 for every tenant of the group.  An unbound role in
 * isolation mode may lease nothing (42501).
 */
static char **
lease_tenants(FunctionCallInfo fcinfo, int argno, int *n)
{
	const SiloCaller *c = silo_caller();
	char	  **given = NULL;
	int			ngiven = -1;
	char	  **out;
	int			nout = 0;
	int			i;

	if (PG_NARGS() > argno && !PG_ARGISNULL(argno))
	{
		ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(argno);
		Datum	   *elems;
		bool	   *nulls;

		if (ARR_NDIM(arr) > 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("tenants must be a one-dimensional array")));
		deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &ngiven);
		if (ngiven > SILO_MAX_LEASE_BATCH)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("tenants has %d elements, more than the limit of %d", ngiven,
							SILO_MAX_LEASE_BATCH)));
		given = palloc(sizeof(char *) * (ngiven + 1));
		for (i = 0; i < ngiven; i++)
		{
			if (nulls[i])
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("tenants must not contain nulls")));
			given[i] = TextDatumGetCString(elems[i]);
			silo_check_length(psprintf("tenants[%d]", i + 1), given[i], 1, SILO_MAX_TENANT_LEN);
		}
	}
	if (!c->restricted || c->all)
	{
		*n = ngiven;
		return given;
	}
	silo_tenancy_require_binding();
	if (ngiven < 0)
	{
		/* a copy: the cache may be reloaded before the lease is done */
		out = palloc(sizeof(char *) * (c->ntenants + 1));
		for (i = 0; i < c->ntenants; i++)
			out[i] = pstrdup(c->tenants[i]);
		*n = c->ntenants;
		return out;
	}
	/* the caller's filter, narrowed to its bindings */
	out = palloc(sizeof(char *) * (ngiven + 1));
	for (i = 0; i < ngiven; i++)
		if (silo_tenant_allowed(given[i]))
			out[nout++] = given[i];
	*n = nout;
	return out;
}

/*
 * silo_lease: SQL entry point silo.lease(worker_id, task_group, max_tasks,
 * lease_ms, tenants).  Returns up to max_tasks rows of silo.leased_task in
 * priority order (core/lease.c), of the given tenants only when tenants
 * is not NULL, and only of its tenants for a role bound to some.
 */
Datum
silo_lease(PG_FUNCTION_ARGS)
{
	char	   *worker_id;
	char	   *task_group;
	int32		max_tasks;
	int32		lease_ms;
	char	  **tenants;
	int			ntenants;

	worker_id = silo_text_arg(fcinfo, 0, "worker_id", 1, SILO_MAX_WORKER_LEN);
	task_group = silo_text_arg(fcinfo, 1, "task_group", 1, SILO_MAX_GROUP_LEN);
	silo_require_arg(fcinfo, 2, "max_tasks");
	max_tasks = PG_GETARG_INT32(2);
	silo_check_range("max_tasks", max_tasks, 1, SILO_MAX_LEASE_BATCH);
	silo_require_arg(fcinfo, 3, "lease_ms");
	lease_ms = PG_GETARG_INT32(3);
	silo_check_range("lease_ms", lease_ms, SILO_MIN_LEASE_MS, SILO_MAX_LEASE_MS);
	silo_api_begin("silo.lease", SILO_API_READ_COMMITTED | SILO_API_WRITES);
	tenants = lease_tenants(fcinfo, 4, &ntenants);

	InitMaterializedSRF(fcinfo, 0);
	silo_lease_tasks((ReturnSetInfo *) fcinfo->resultinfo, worker_id, task_group,
					 max_tasks, lease_ms, ntenants, tenants);
	return (Datum) 0;
}

/*
 * silo_lease_job: SQL entry point silo.lease_job(worker_id, job_id,
 * tenant, lease_ms).  Leases the named job's due task (core/lease_job.c):
 * one row of silo.leased_task, or none when another transaction holds
 * the task.  The tenant is checked as every call that names one checks
 * it: the caller's bindings, and in cluster mode the tenant's shard.
 */
Datum
silo_lease_job(PG_FUNCTION_ARGS)
{
	char	   *worker_id;
	char	   *id;
	char	   *tenant;
	int32		lease_ms;

	worker_id = silo_text_arg(fcinfo, 0, "worker_id", 1, SILO_MAX_WORKER_LEN);
	id = silo_text_arg(fcinfo, 1, "job_id", 1, SILO_MAX_ID_LEN);
	tenant = silo_text_arg(fcinfo, 2, "tenant", 1, SILO_MAX_TENANT_LEN);
	silo_require_arg(fcinfo, 3, "lease_ms");
	lease_ms = PG_GETARG_INT32(3);
	silo_check_range("lease_ms", lease_ms, SILO_MIN_LEASE_MS, SILO_MAX_LEASE_MS);
	silo_api_begin("silo.lease_job", SILO_API_READ_COMMITTED | SILO_API_WRITES);
	silo_api_tenant(tenant);

	InitMaterializedSRF(fcinfo, 0);
	silo_lease_one_job((ReturnSetInfo *) fcinfo->resultinfo, worker_id, tenant, id, lease_ms);
	return (Datum) 0;
}

/*
 * report_tenant: the optional tenant argument (argno) of a heartbeat or a
 * report, the tenant of the task it answers.  When given, the prologue's
 * tenant half runs on it before the lease is looked up: the caller's
 * bindings, and in cluster mode the tenant's shard, so that a node the
 * task's shard has moved away from answers SL020 with the new owner
 * rather than SL001 (it no longer holds the lease row).  The lease's own
 * tenant is checked as before once the lease is found.
 */
static void
report_tenant(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return;
	silo_api_tenant(silo_text_arg(fcinfo, argno, "tenant", 1, SILO_MAX_TENANT_LEN));
}

/*
 * silo_heartbeat: SQL entry point silo.heartbeat(task_id, worker_id,
 * lease_ms, tenant).  Extends a live lease owned by worker_id; returns
 * whether the job has been cancelled.
 */
Datum
silo_heartbeat(PG_FUNCTION_ARGS)
{
	char	   *worker_id;
	int32		lease_ms;

	silo_require_arg(fcinfo, 0, "task_id");
	worker_id = silo_text_arg(fcinfo, 1, "worker_id", 1, SILO_MAX_WORKER_LEN);
	silo_require_arg(fcinfo, 2, "lease_ms");
	lease_ms = PG_GETARG_INT32(2);
	silo_check_range("lease_ms", lease_ms, SILO_MIN_LEASE_MS, SILO_MAX_LEASE_MS);
	silo_api_begin("silo.heartbeat", SILO_API_WRITES);
	report_tenant(fcinfo, 3);

	PG_RETURN_BOOL(silo_heartbeat_lease(PG_GETARG_DATUM(0), worker_id, lease_ms));
}

/*
 * report_args: the task_id and worker_id arguments (0 and 1) every report
 * takes, checked, then the prologue of report fn: a report locks its lease
 * and then reads what a concurrent transaction committed while it waited,
 * which needs READ COMMITTED; then the optional tenant (argument
 * tenant_argno, see report_tenant).
 */
static char *
report_args(FunctionCallInfo fcinfo, const char *fn, int tenant_argno)
{
	char	   *worker_id;

	silo_require_arg(fcinfo, 0, "task_id");
	worker_id = silo_text_arg(fcinfo, 1, "worker_id", 1, SILO_MAX_WORKER_LEN);
	silo_api_begin(fn, SILO_API_READ_COMMITTED | SILO_API_WRITES);
	report_tenant(fcinfo, tenant_argno);
	return worker_id;
}

/*
 * silo_complete: SQL entry point silo.complete(task_id, worker_id, result,
 * tenant).
 */
Datum
silo_complete(PG_FUNCTION_ARGS)
{
	char	   *worker_id = report_args(fcinfo, "silo.complete", 3);

	silo_report_outcome(PG_GETARG_DATUM(0), worker_id, SILO_OUTCOME_SUCCEEDED,
						PG_ARGISNULL(2) ? NULL : PG_GETARG_JSONB_P(2), NULL, NULL);
	PG_RETURN_VOID();
}

/*
 * silo_fail: SQL entry point silo.fail(task_id, worker_id, error_code,
 * error_data, tenant).  Retries per the job's policy.
 */
Datum
silo_fail(PG_FUNCTION_ARGS)
{
	char	   *error_code = silo_text_arg(fcinfo, 2, "error_code", 1, SILO_MAX_ERROR_CODE_LEN);
	char	   *worker_id = report_args(fcinfo, "silo.fail", 4);

	silo_report_outcome(PG_GETARG_DATUM(0), worker_id, SILO_OUTCOME_FAILED, NULL, error_code,
						PG_ARGISNULL(3) ? NULL : PG_GETARG_JSONB_P(3));
	PG_RETURN_VOID();
}

/*
 * silo_ack_cancel: SQL entry point silo.ack_cancel(task_id, worker_id,
 * tenant).
 * Ends the job Cancelled, whether or not a cancel was requested (a worker
 * may cancel its own job).
 */
Datum
silo_ack_cancel(PG_FUNCTION_ARGS)
{
	char	   *worker_id = report_args(fcinfo, "silo.ack_cancel", 2);

	silo_report_outcome(PG_GETARG_DATUM(0), worker_id, SILO_OUTCOME_CANCELLED, NULL, NULL, NULL);
	PG_RETURN_VOID();
}

/*
 * silo_release: SQL entry point silo.release(task_id, worker_id, tenant).  Hands
 * the task back without using up an attempt (core/outcome.c).
 */
Datum
silo_release(PG_FUNCTION_ARGS)
{
	char	   *worker_id = report_args(fcinfo, "silo.release", 2);

	silo_release_task(PG_GETARG_DATUM(0), worker_id);
	PG_RETURN_VOID();
}

/*
 * batch_uuid_cmp: qsort comparator of raw UUIDs, to find duplicates.
 */
static int
batch_uuid_cmp(const void *a, const void *b)
{
	return memcmp(DatumGetUUIDP(*(const Datum *) a),
				  DatumGetUUIDP(*(const Datum *) b), UUID_LEN);
}

/*
 * batch_check_task_ids: task_ids must be a one-dimensional array of at
 * most SILO_MAX_LEASE_BATCH distinct, non-null UUIDs.  Returns its length.
 */
static int
batch_check_task_ids(ArrayType *arr)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int			i;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("task_ids must be a one-dimensional array")));
	deconstruct_array(arr, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR, &elems, &nulls, &n);
	if (n > SILO_MAX_LEASE_BATCH)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("task_ids has %d elements, more than the limit of %d", n,
						SILO_MAX_LEASE_BATCH),
				 errhint("Split the batch; a lease returns at most %d tasks.",
						 SILO_MAX_LEASE_BATCH)));
	for (i = 0; i < n; i++)
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("task_ids must not contain nulls"),
					 errdetail("Element %d is null.", i + 1)));
	qsort(elems, n, sizeof(Datum), batch_uuid_cmp);
	for (i = 1; i < n; i++)
		if (batch_uuid_cmp(&elems[i - 1], &elems[i]) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("task_ids lists task %s more than once",
							silo_uuid_to_cstring(elems[i])),
					 errdetail("Each task can be completed once, with one result.")));
	return n;
}

/*
 * batch_check_results: results, when given, pairs each task with its
 * result: a one-dimensional array as long as task_ids, with the same
 * subscripts (nulls allowed).
 */
static void
batch_check_results(ArrayType *arr, ArrayType *task_ids, int ntasks)
{
	int			n = ArrayGetNItems(ARR_NDIM(arr), ARR_DIMS(arr));

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("results must be a one-dimensional array")));
	if (n != ntasks)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("results has %d elements but task_ids has %d", n, ntasks),
				 errdetail("results[i] is the result of task_ids[i]; pass NULL for no results.")));
	/* pairing is by subscript: both arrays must start at the same one */
	if (n > 0 && ARR_LBOUND(arr)[0] != ARR_LBOUND(task_ids)[0])
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("results must have the same subscripts as task_ids"),
				 errdetail("task_ids starts at subscript %d, results at %d.",
						   ARR_LBOUND(task_ids)[0], ARR_LBOUND(arr)[0]),
				 errhint("results[i] is the result of task_ids[i].")));
}

/*
 * silo_complete_many: SQL entry point silo.complete_many(task_ids,
 * worker_id, results).  Ends every listed task that has a live lease of
 * worker_id as Succeeded, with results[i] as the result of task_ids[i],
 * and returns the task ids it completed (core/batch.c).
 */
Datum
silo_complete_many(PG_FUNCTION_ARGS)
{
	ArrayType  *task_ids;
	char	   *worker_id;
	Datum	   *ids;
	Datum	   *results = NULL;
	bool	   *result_nulls = NULL;
	int			ntasks;
	int			nresults;

	worker_id = silo_text_arg(fcinfo, 1, "worker_id", 1, SILO_MAX_WORKER_LEN);

	/*
	 * NULL is an empty batch: array_agg over a lease that returned nothing
	 * gives NULL, and "lease, then complete what was leased" must not fail
	 * on an empty queue.
	 */
	task_ids = PG_ARGISNULL(0) ? construct_empty_array(UUIDOID) : PG_GETARG_ARRAYTYPE_P(0);
	ntasks = batch_check_task_ids(task_ids);
	if (!PG_ARGISNULL(2))
		batch_check_results(PG_GETARG_ARRAYTYPE_P(2), task_ids, ntasks);
	silo_api_begin("silo.complete_many", SILO_API_READ_COMMITTED);

	/* SETOF uuid: the call site's expected descriptor is the row type */
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (ntasks == 0)
		return (Datum) 0;
	silo_api_require_writable("silo.complete_many");

	deconstruct_array(task_ids, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR, &ids, NULL, &ntasks);
	if (!PG_ARGISNULL(2))
		deconstruct_array(PG_GETARG_ARRAYTYPE_P(2), JSONBOID, -1, false, TYPALIGN_INT,
						  &results, &result_nulls, &nresults);
	silo_complete_batch((ReturnSetInfo *) fcinfo->resultinfo, ntasks, ids, results,
						result_nulls, worker_id);
	return (Datum) 0;
}

/*
 * silo_report_refresh: SQL entry point silo.report_refresh(task_id,
 * worker_id, new_max_concurrency, tenant): set the key's max and grant waiting
 * jobs at once if it grew.
 */
Datum
silo_report_refresh(PG_FUNCTION_ARGS)
{
	int32		new_max;
	char	   *worker_id;

	silo_require_arg(fcinfo, 2, "new_max_concurrency");
	new_max = PG_GETARG_INT32(2);
	silo_check_range("new_max_concurrency", new_max, 1, PG_INT32_MAX);
	worker_id = report_args(fcinfo, "silo.report_refresh", 3);
	silo_report_refresh_end(PG_GETARG_DATUM(0), worker_id, SILO_FLOATING_REPORTED, new_max,
							NULL);
	PG_RETURN_VOID();
}

/*
 * silo_fail_refresh: SQL entry point silo.fail_refresh(task_id,
 * worker_id, error, tenant): keep the max, back off and try again.
 */
Datum
silo_fail_refresh(PG_FUNCTION_ARGS)
{
	char	   *error = silo_text_arg(fcinfo, 2, "error", 1, SILO_MAX_META_VALUE_LEN);
	char	   *worker_id = report_args(fcinfo, "silo.fail_refresh", 3);

	silo_report_refresh_end(PG_GETARG_DATUM(0), worker_id, SILO_FLOATING_FAILED, 0, error);
	PG_RETURN_VOID();
}
