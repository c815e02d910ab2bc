/*-------------------------------------------------------------------------
 *
 * jobs.c
 *	  SQL entry points on a whole job: silo.cancel, silo.restart,
 *	  silo.expedite, silo.delete_job and silo.job_result
 *	  (core/jobops.c), and the procedures silo.wait_result (core/wait.c)
 *	  and silo.wait_any (core/wait_any.c).
 *
 *-------------------------------------------------------------------------
 */
#include "silo_api.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "nodes/parsenodes.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/syscache.h"

/* the longest silo.wait_result or silo.wait_any waits in one call */
#define WAIT_MAX_US		((int64) USECS_PER_DAY)

PG_FUNCTION_INFO_V1(silo_cancel);
PG_FUNCTION_INFO_V1(silo_restart);
PG_FUNCTION_INFO_V1(silo_expedite);
PG_FUNCTION_INFO_V1(silo_delete_job);
PG_FUNCTION_INFO_V1(silo_job_result);
PG_FUNCTION_INFO_V1(silo_wait_result);
PG_FUNCTION_INFO_V1(silo_wait_any);

/*
 * job_args: the job_id and tenant arguments (0 and 1) every job operation
 * takes, checked, then the prologue of fn.
 */
static void
job_args(FunctionCallInfo fcinfo, const char *fn, int flags, char **tenant, char **id)
{
	*id = silo_text_arg(fcinfo, 0, "job_id", 1, SILO_MAX_ID_LEN);
	*tenant = silo_text_arg(fcinfo, 1, "tenant", 1, SILO_MAX_TENANT_LEN);
	silo_api_begin(fn, flags);
	silo_api_tenant(*tenant);
}

/*
 * silo_cancel: SQL entry point silo.cancel(job_id, tenant).
 */
Datum
silo_cancel(PG_FUNCTION_ARGS)
{
	char	   *tenant;
	char	   *id;

	job_args(fcinfo, "silo.cancel", SILO_API_WRITES, &tenant, &id);
	silo_job_cancel(tenant, id, "silo.cancel");
	PG_RETURN_VOID();
}

/*
 * silo_restart: SQL entry point silo.restart(job_id, tenant).
 */
Datum
silo_restart(PG_FUNCTION_ARGS)
{
	char	   *tenant;
	char	   *id;

	job_args(fcinfo, "silo.restart", SILO_API_WRITES, &tenant, &id);
	silo_job_restart(tenant, id, "silo.restart");
	PG_RETURN_VOID();
}

/*
 * silo_expedite: SQL entry point silo.expedite(job_id, tenant).
 */
Datum
silo_expedite(PG_FUNCTION_ARGS)
{
	char	   *tenant;
	char	   *id;

	job_args(fcinfo, "silo.expedite", SILO_API_WRITES, &tenant, &id);
	silo_job_expedite(tenant, id, "silo.expedite");
	PG_RETURN_VOID();
}

/*
 * silo_delete_job: SQL entry point silo.delete_job(job_id, tenant).
 * Returns false when there is no such job.
 */
Datum
silo_delete_job(PG_FUNCTION_ARGS)
{
	char	   *tenant;
	char	   *id;

	job_args(fcinfo, "silo.delete_job", SILO_API_WRITES, &tenant, &id);
	PG_RETURN_BOOL(silo_job_delete(tenant, id));
}

/*
 * silo_job_result: SQL entry point silo.job_result(job_id, tenant).  The
 * outcome of a terminal job; it writes nothing.
 */
Datum
silo_job_result(PG_FUNCTION_ARGS)
{
	char	   *tenant;
	char	   *id;

	job_args(fcinfo, "silo.job_result", 0, &tenant, &id);
	InitMaterializedSRF(fcinfo, 0);
	silo_job_read_result((ReturnSetInfo *) fcinfo->resultinfo, tenant, id);
	return (Datum) 0;
}

/*
 * wait_timeout_arg: silo.wait_result's timeout (argument argno), in
 * microseconds: more than zero and at most a day (22023), rounded up to
 * a whole millisecond.  A month counts 30 days, as interval arithmetic
 * does.
 */
static int64
wait_timeout_arg(FunctionCallInfo fcinfo, int argno, const char *fn)
{
	Interval   *span;
	double		us;

	silo_require_arg(fcinfo, argno, "timeout");
	span = PG_GETARG_INTERVAL_P(argno);
	us = (double) span->time + (double) span->day * USECS_PER_DAY +
		(double) span->month * DAYS_PER_MONTH * USECS_PER_DAY;
	if (!(us > 0 && us <= (double) WAIT_MAX_US))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must be more than zero and at most 1 day"),
				 errdetail("The value given is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(span)))),
				 us > 0 ? errhint("Call %s again to wait longer.", fn) : 0));
	return ((int64) us + 999) / 1000 * 1000;
}

/*
 * wait_owner: the owner of the procedure being called, whose rights its
 * looks at the job use (core/wait.c says why it is not SECURITY DEFINER).
 */
static Oid
wait_owner(FunctionCallInfo fcinfo)
{
	HeapTuple	tuple;
	Oid			owner;

	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fcinfo->flinfo->fn_oid));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for function %u", fcinfo->flinfo->fn_oid);
	owner = ((Form_pg_proc) GETSTRUCT(tuple))->proowner;
	ReleaseSysCache(tuple);
	return owner;
}

/*
 * wait_require_nonatomic: 25001 unless fn was CALLed where a procedure
 * may commit (autocommit mode, not inside a transaction block, an
 * exception block or a function).  Checked first: there, nothing else
 * matters.
 */
static void
wait_require_nonatomic(FunctionCallInfo fcinfo, const char *fn)
{
	if (fcinfo->context == NULL || !IsA(fcinfo->context, CallContext) ||
		((CallContext *) fcinfo->context)->atomic || IsSubTransaction())
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("%s cannot run inside a transaction block", fn),
				 errdetail("It commits while it waits, so that it holds no snapshot; inside a transaction block, a subtransaction (an exception block), a function or a procedure that cannot commit, it could not."),
				 errhint("CALL it on its own in autocommit mode.")));
}

/*
 * silo_wait_result: SQL entry point, the procedure
 * silo.wait_result(job_id, tenant, timeout, INOUT status, result,
 * error_code, error_data, finished_at): wait for the job to end, then
 * return silo.job_result's row as its INOUT parameters (what the call
 * passes for them is ignored).  It commits while it waits, so it must be
 * called where a procedure may commit: CALL in autocommit mode (25001
 * inside a transaction block, or from a function).
 */
Datum
silo_wait_result(PG_FUNCTION_ARGS)
{
	char	   *tenant;
	char	   *id;
	int64		timeout_us;
	TupleDesc	tupdesc;
	Datum		values[5];
	bool		nulls[5];

	id = silo_text_arg(fcinfo, 0, "job_id", 1, SILO_MAX_ID_LEN);
	tenant = silo_text_arg(fcinfo, 1, "tenant", 1, SILO_MAX_TENANT_LEN);
	timeout_us = wait_timeout_arg(fcinfo, 2, "silo.wait_result");
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "silo: wait_result must return a record");
	wait_require_nonatomic(fcinfo, "silo.wait_result");
	silo_api_begin("silo.wait_result", 0);
	silo_wait_require_read_committed("silo.wait_result");
	silo_api_tenant(tenant);
	silo_job_wait_result(tenant, id, timeout_us, wait_owner(fcinfo), values, nulls);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}

/*
 * wait_any_cmp / wait_any_distinct: ids[0..*n) without repeats, in the
 * order of their first appearance (a job listed twice takes one place of
 * the pool and is returned once).
 */
typedef struct WaitAnyId
{
	const char *id;
	int			pos;
} WaitAnyId;

static int
wait_any_cmp(const void *a, const void *b)
{
	const WaitAnyId *x = a;
	const WaitAnyId *y = b;
	int			c = strcmp(x->id, y->id);

	return c != 0 ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

static char **
wait_any_distinct(char **ids, int *n)
{
	WaitAnyId  *v = palloc(*n * sizeof(WaitAnyId));
	bool	   *keep = palloc0(*n * sizeof(bool));
	int			i;
	int			k = 0;

	for (i = 0; i < *n; i++)
	{
		v[i].id = ids[i];
		v[i].pos = i;
	}
	qsort(v, *n, sizeof(WaitAnyId), wait_any_cmp);
	for (i = 0; i < *n; i++)
		if (i == 0 || strcmp(v[i].id, v[i - 1].id) != 0)
			keep[v[i].pos] = true;
	for (i = 0; i < *n; i++)
		if (keep[i])
			ids[k++] = ids[i];
	*n = k;
	return ids;
}

/*
 * wait_any_ids: silo.wait_any's job_ids (argument 0) as C strings, without
 * repeats: a one-dimensional array of 1 to silo.max_wait_any_jobs distinct
 * ids (at least one with no pool at all: the pool then refuses it with
 * 53400), none NULL (22004), each of 1 to SILO_MAX_ID_LEN characters
 * (22023).
 */
static char **
wait_any_ids(FunctionCallInfo fcinfo, int *n)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	char	  **ids;
	int			i;

	silo_require_arg(fcinfo, 0, "job_ids");
	arr = PG_GETARG_ARRAYTYPE_P(0);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("job_ids must be a one-dimensional array"),
				 errdetail("The array given has %d dimensions.", ARR_NDIM(arr))));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, n);
	ids = palloc(*n * sizeof(char *));
	for (i = 0; i < *n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("job_ids must not contain null"),
					 errdetail("Element %d is null.", i + 1)));
		ids[i] = TextDatumGetCString(elems[i]);
		silo_check_length("a job id", ids[i], 1, SILO_MAX_ID_LEN);
	}
	ids = wait_any_distinct(ids, n);
	if (*n < 1 || *n > Max(silo_max_wait_any_jobs, 1))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("job_ids must hold between 1 and %d job ids", Max(silo_max_wait_any_jobs, 1)),
				 errdetail("The array given holds %d distinct ids.", *n),
				 *n > 1 ? errhint("The most is silo.max_wait_any_jobs; await the rest in another call.") : 0));
	return ids;
}

/*
 * silo_wait_any: SQL entry point, the procedure silo.wait_any(job_ids,
 * tenant, timeout, INOUT ended): wait until at least one of the jobs has
 * ended (or is gone), then return in ended the ids of those found so, in
 * the order given; an empty array at the timeout.  Called as
 * silo.wait_result is (CALL in autocommit mode, 25001 otherwise).
 */
Datum
silo_wait_any(PG_FUNCTION_ARGS)
{
	char	  **ids;
	char	   *tenant;
	int			n;
	int64		timeout_us;
	TupleDesc	tupdesc;
	bool	   *ended;
	Datum	   *out;
	int			nout = 0;
	int			i;
	Datum		value;
	bool		isnull = false;

	wait_require_nonatomic(fcinfo, "silo.wait_any");
	ids = wait_any_ids(fcinfo, &n);
	tenant = silo_text_arg(fcinfo, 1, "tenant", 1, SILO_MAX_TENANT_LEN);
	timeout_us = wait_timeout_arg(fcinfo, 2, "silo.wait_any");
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "silo: wait_any must return a record");
	silo_api_begin("silo.wait_any", 0);
	silo_wait_require_read_committed("silo.wait_any");
	silo_api_tenant(tenant);

	ended = palloc(n * sizeof(bool));
	(void) silo_job_wait_any(tenant, ids, n, timeout_us, wait_owner(fcinfo), ended);
	out = palloc(n * sizeof(Datum));
	for (i = 0; i < n; i++)
		if (ended[i])
			out[nout++] = CStringGetTextDatum(ids[i]);
	value = PointerGetDatum(construct_array(out, nout, TEXTOID, -1, false, TYPALIGN_INT));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), &value, &isnull)));
}
