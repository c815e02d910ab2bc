/*-------------------------------------------------------------------------
 *
 * batch.c
 *	  silo.complete_many: a worker reports a whole batch of successes in
 *	  one call.
 *
 * silo.complete costs a function call, two statements and their executor
 * start-up per task.  complete_many does the same transition for every
 * task of a batch in one statement: the lease rows are deleted (the
 * delete is the lock, as for a single report), the attempt rows inserted
 * and the job_status rows ended, set-wise.  Jobs with limits then free
 * their slots, in the same transaction, also set-wise
 * (silo_limits_release_many: one statement for the batch's holder rows,
 * one for which keys have waiters; only those are granted).
 *
 * A task whose lease is gone, has expired or belongs to another worker is
 * skipped: that is a race a worker must expect (the sweep ended the
 * attempt), not a mistake in the call.  The function returns the tasks it
 * completed, so the caller can tell.
 *
 *-------------------------------------------------------------------------
 */
#include "silo.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

PG_FUNCTION_INFO_V1(silo_complete_many);

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
 * result: a one-dimensional array as long as task_ids (nulls allowed).
 */
static void
batch_check_results(ArrayType *arr, int ntasks)
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
}

/*
 * silo_complete_many: SQL entry point silo.complete_many(task_ids,
 * worker_id, results).  Ends every listed task that has a live lease of
 * worker_id as Succeeded, with results[i] as the result of task_ids[i],
 * and returns the task ids it completed.  A listed refresh task is an
 * error (SL010), as for silo.complete.
 */
Datum
silo_complete_many(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[4] = {UUIDARRAYOID, TEXTOID, TIMESTAMPTZOID, JSONBARRAYOID};
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ArrayType  *task_ids;
	char	   *worker_id;
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	TimestampTz now;
	int			ntasks;
	uint64		i;
	uint64		nrun = 0;
	int64		nended;

	worker_id = silo_text_arg(fcinfo, 1, "worker_id", 1, SILO_MAX_WORKER_LEN);

	/*
	 * NULL is an empty batch: array_agg over a lease that returned nothing
	 * gives NULL, and "lease, then complete what was leased" must not fail
	 * on an empty queue.
	 */
	task_ids = PG_ARGISNULL(0) ? construct_empty_array(UUIDOID) : PG_GETARG_ARRAYTYPE_P(0);
	ntasks = batch_check_task_ids(task_ids);
	if (!PG_ARGISNULL(2))
		batch_check_results(PG_GETARG_ARRAYTYPE_P(2), ntasks);
	if (IsolationUsesXactSnapshot())
		silo_require_read_committed("silo.complete_many");

	/* SETOF uuid: the call site's expected descriptor is the row type */
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (ntasks == 0)
		return (Datum) 0;

	now = silo_now_ts();
	values[0] = PointerGetDatum(task_ids);
	values[1] = CStringGetTextDatum(worker_id);
	values[2] = TimestampTzGetDatum(now);
	values[3] = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
	nulls[3] = PG_ARGISNULL(2) ? 'n' : ' ';

	silo_spi_connect();

	/*
	 * One statement for the batch.  The leases are deleted first (their
	 * row locks serialize this call with the sweep and with a second
	 * report); attempts and statuses are written only for 'run' leases, and
	 * a refresh lease in the list aborts the whole call below.  The status
	 * rows are found by a primary-key look-up per lease (still Pending,
	 * still on this task) and updated by ctid (a TID scan), never through
	 * a join, whose plan can go wrong on a table that looked empty
	 * (planner.c).  While we hold a job's lease, other transactions may
	 * lock its status row but never update it; should one ever do so, the
	 * UPDATE's own status and task conditions are re-checked on the newest
	 * version (a TID scan's re-check does not re-check the ctid), so such
	 * a row is left alone and the count check below says so.  The last
	 * column counts the status rows ended, to check the bookkeeping.
	 */
	silo_exec(&plan,
			  "WITH d AS ("
			  "  DELETE FROM silo.task_lease"
			  "   WHERE task_id = ANY($1) AND worker_id = $2 AND expires_at > $3"
			  "  RETURNING task_id, kind, tenant, job_id, attempt, relative_attempt,"
			  "    started_at, holds),"
			  " a AS ("
			  "  INSERT INTO silo.attempt (tenant, job_id, attempt, relative_attempt, task_id,"
			  "    worker_id, status, started_at, finished_at, result)"
			  "  SELECT d.tenant, d.job_id, d.attempt, d.relative_attempt, d.task_id, $2,"
			  "    'Succeeded', d.started_at, $3, r.result"
			  "    FROM d JOIN unnest($1, $4) AS r(task_id, result) ON r.task_id = d.task_id"
			  "   WHERE d.kind = 'run'),"
			  " s AS ("
			  "  UPDATE silo.job_status s SET status = 'Succeeded', changed_at = $3,"
			  "    task_id = NULL, next_attempt_at = NULL"
			  "   WHERE s.ctid = ANY(ARRAY("
			  "       SELECT (SELECT CASE WHEN x.status = 'Pending' AND x.task_id = d.task_id"
			  "                           THEN x.ctid END"
			  "                 FROM silo.job_status x"
			  "                WHERE x.tenant = d.tenant AND x.id = d.job_id)"
			  "         FROM d WHERE d.kind = 'run'))"
			  "     AND s.status = 'Pending'"
			  "     AND s.task_id = ANY(ARRAY(SELECT task_id FROM d WHERE d.kind = 'run'))"
			  "  RETURNING 1)"
			  "SELECT d.task_id, d.kind, d.tenant, d.holds, d.job_id,"
			  "  (SELECT count(*) FROM s) FROM d",
			  4, types, values, nulls, false, 0);

	for (i = 0; i < SPI_processed; i++)
	{
		char	   *kind = silo_col_text(i, 2);
		bool		isnull;

		if (strcmp(kind, "run") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_SILO_WRONG_TASK_KIND),
					 errmsg("task %s is a %s task, not a run task",
							silo_uuid_to_cstring(silo_col(i, 1, &isnull)), kind),
					 errhint("Answer a refresh task with silo.report_refresh or silo.fail_refresh.")));
		nrun++;
	}
	nended = SPI_processed > 0 ? silo_col_int64(0, 6) : 0;
	if ((uint64) nended != nrun)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_INTERNAL),
				 errmsg("complete_many ended %lld job statuses for %llu leases",
						(long long) nended, (unsigned long long) nrun),
				 errdetail("A leased task is not its job's current task.")));

	/*
	 * Hand out the results first: SPI_tuptable is replaced by the release
	 * statements below.  The leases' holds are copied out for them.
	 */
	{
		uint64		n = SPI_processed;
		Datum	   *ids = palloc(sizeof(Datum) * (n + 1));
		char	  **tenants = palloc0(sizeof(char *) * (n + 1));
		List	  **holds = palloc0(sizeof(List *) * (n + 1));

		for (i = 0; i < n; i++)
		{
			bool		isnull;
			Datum		h;

			ids[i] = silo_col(i, 1, &isnull);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &ids[i], &isnull);
			h = silo_col(i, 4, &isnull);
			if (!isnull)
			{
				/* a job with limits: its tenant marks it below */
				tenants[i] = silo_col_text(i, 3);
				holds[i] = silo_holds_list(h);
			}
		}

		/* Jobs with limits free their slots, and grant the waiters. */
		silo_limits_release_many((int) n, tenants, holds, ids, now);
	}
	silo_spi_finish();
	return (Datum) 0;
}
