/*-------------------------------------------------------------------------
 *
 * batch.c
 *	  The work of silo.complete_many: a worker reports a whole batch of
 *	  successes in one call.
 *
 * silo.complete costs a function call, two statements and their executor
 * start-up per task.  complete_many does the same transition for every
 * task of a batch in one call, with no SQL (direct.c): per task the lease
 * row is deleted (the delete is the lock, as for a single report), the
 * attempt row inserted, the job_status row ended (a HOT update), the
 * job's 0x03 row moved (statusindex.c) and its waiters told
 * (ipc/waiters.c), each row found by the hint the row before it carries,
 * else by its key; the leases are looked up by walking their index in
 * task-id order.  Jobs with limits then free their slots, in the same
 * transaction, set-wise (silo_limits_release_many: the batch's keys
 * locked in one pass, then its holder rows deleted and its keys probed
 * for waiters; only keys with waiters are granted).
 *
 * A task whose lease is gone, has expired or belongs to another worker is
 * skipped: that is a race a worker must expect (the sweep ended the
 * attempt), not a mistake in the call.  The function returns the tasks it
 * completed, so the caller can tell.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_core.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

/*
 * batch_order_cmp: qsort_arg comparator of indexes into an array of UUIDs
 * (arg), by the UUID each points at.
 */
static int
batch_order_cmp(const void *a, const void *b, void *arg)
{
	Datum	   *ids = (Datum *) arg;

	return memcmp(DatumGetUUIDP(ids[*(const int *) a]),
				  DatumGetUUIDP(ids[*(const int *) b]), UUID_LEN);
}

/* task_lease columns complete_many reads */
static const char *const batch_lease_cols[] = {
	"task_id", "kind", "tenant", "job_id", "attempt", "relative_attempt", "worker_id",
	"started_at", "expires_at", "holds", "job_status_tid", "owner_role"
};
enum
{
	BL_TASK_ID, BL_KIND, BL_TENANT, BL_JOB_ID, BL_ATTEMPT, BL_RELATIVE_ATTEMPT,
	BL_WORKER_ID, BL_STARTED_AT, BL_EXPIRES_AT, BL_HOLDS, BL_JOB_STATUS_TID, BL_OWNER_ROLE,
	BL_NCOLS
};

/* silo.attempt, every column */
static const char *const batch_attempt_cols[] = {
	"tenant", "job_id", "attempt", "relative_attempt", "task_id", "worker_id", "status",
	"started_at", "finished_at", "result", "error_code", "error_data"
};
#define BATCH_ATTEMPT_NCOLS 12

/* silo.job_status, every column */
static const char *const batch_status_cols[] = {
	"tenant", "id", "status", "changed_at", "attempt", "relative_attempt", "task_id",
	"next_attempt_at", "status_index_tid"
};
enum
{
	BS_TENANT, BS_ID, BS_STATUS, BS_CHANGED_AT, BS_ATTEMPT, BS_RELATIVE_ATTEMPT, BS_TASK_ID,
	BS_NEXT_ATTEMPT_AT, BS_STATUS_INDEX_TID, BS_NCOLS
};

/*
 * batch_take_lease: delete the lease of task_id if it is live and
 * worker_id's (and was taken by role, and is of a tenant the caller may act
 * in when it is restricted), as "DELETE ... WHERE task_id = $1 AND worker_id = $2 AND
 * expires_at > $3" would under READ COMMITTED: a lease changed since the
 * snapshot (a heartbeat) is read again and decided again; one deleted
 * meanwhile (by the sweep, or a second report) is skipped.  Returns
 * whether the lease was taken; it is then the table's current row.
 */
static bool
batch_take_lease(SiloDirect *d, SiloTable *lease, Datum task_id, const char *worker_id,
				 const char *role, bool restricted, TimestampTz now)
{
	bool		first = true;

	for (;;)
	{
		bool		isnull;
		Datum		owner;

		/*
		 * The batch's ids come in ascending order: the first look walks
		 * on from the previous task's entry; after a change, a fresh search.
		 */
		if (!(first ? silo_table_fetch_ascending(lease, task_id)
			  : silo_table_fetch(lease, 1, &task_id)))
			return false;
		first = false;
		if (!silo_text_datum_is(silo_table_get(lease, BL_WORKER_ID, &isnull), worker_id) ||
			DatumGetTimestampTz(silo_table_get(lease, BL_EXPIRES_AT, &isnull)) <= now)
			return false;
		/* a lease belongs to the role that took it (none recorded before 1.7) */
		owner = silo_table_get(lease, BL_OWNER_ROLE, &isnull);
		if (!isnull && !silo_text_datum_is(owner, role))
			return false;
		/* a tenant the caller may not act in: as if there were no lease */
		if (restricted &&
			!silo_tenant_allowed(TextDatumGetCString(silo_table_get(lease, BL_TENANT, &isnull))))
			return false;
		switch (silo_table_delete(lease))
		{
			case TM_Ok:
				return true;
			case TM_Updated:
				silo_direct_new_snapshot(d);
				continue;
			default:
				return false;
		}
	}
}

/*
 * batch_end_status: set the job's status row to Succeeded, if it is still
 * Pending on this task, and move its 0x03 row along.  The status row is
 * found through the hint the lease carries (where enqueue wrote it; a HOT
 * chain starts there), else by primary key; its 0x03 row likewise through
 * the row's own hint.  The report holds the job's lease, so no other
 * transaction ends the job meanwhile; a status row changed since the
 * snapshot is read again.  Returns whether it was ended.
 */
static bool
batch_end_status(SiloDirect *d, SiloTable *status, SiloTable *idx, Datum tenant,
				 Datum job_id, Datum task_id, Datum hint, bool hint_null, TimestampTz now)
{
	static const int cols[5] = {BS_STATUS, BS_CHANGED_AT, BS_TASK_ID, BS_NEXT_ATTEMPT_AT,
	BS_STATUS_INDEX_TID};
	Datum		key[2];
	Datum		values[5];
	bool		nulls[5] = {false, false, true, true, true};

	key[0] = tenant;
	key[1] = job_id;
	values[0] = CStringGetTextDatum("Succeeded");
	values[1] = TimestampTzGetDatum(now);
	values[2] = values[3] = values[4] = (Datum) 0;
	for (;;)
	{
		bool		isnull;
		Datum		cur;
		TimestampTz old_at;
		Datum		old_hint;
		bool		old_hint_null;

		if (!silo_table_fetch_hinted(status, hint, hint_null, 2, key))
			return false;
		if (!silo_text_datum_is(silo_table_get(status, BS_STATUS, &isnull), "Pending"))
			return false;
		cur = silo_table_get(status, BS_TASK_ID, &isnull);
		if (isnull || memcmp(DatumGetUUIDP(cur), DatumGetUUIDP(task_id), UUID_LEN) != 0)
			return false;
		old_at = DatumGetTimestampTz(silo_table_get(status, BS_CHANGED_AT, &isnull));
		old_hint = silo_table_get(status, BS_STATUS_INDEX_TID, &old_hint_null);
		if (!old_hint_null)
		{
			/* the update below leaves the row; keep the hint's value */
			ItemPointer copy = palloc(sizeof(ItemPointerData));

			ItemPointerCopy((ItemPointer) DatumGetPointer(old_hint), copy);
			old_hint = PointerGetDatum(copy);
		}

		/*
		 * The terminal row's 0x03 hint is cleared: the hot paths need it
		 * only to leave Pending, and the slow paths that move a terminal
		 * job on look its 0x03 row up by key.
		 */
		switch (silo_table_update(status, 5, cols, values, nulls))
		{
			case TM_Ok:
				silo_status_index_move_in(idx, tenant, job_id, CStringGetTextDatum("Pending"),
										  old_at, old_hint, old_hint_null, values[0], now);
				silo_wait_job_ended_text(tenant, job_id);
				return true;
			case TM_Updated:
				silo_direct_new_snapshot(d);
				hint_null = true;
				continue;
			default:
				return false;
		}
	}
}

/*
 * silo_complete_batch: the work of silo.complete_many (api/worker.c
 * checked the arguments): ends every task of ids that has a live lease of
 * worker_id as Succeeded, with results[i] (unless results is NULL or
 * result_nulls[i]) as the result of ids[i], and puts the task ids it
 * completed into rsinfo's tuplestore.  A listed refresh task is an error
 * (SL010), as for silo.complete.
 *
 * Per task, in task-id order (the order leases are locked in, so two
 * batches never wait on each other in a cycle): the lease is deleted
 * (the delete is the lock: it serializes this call with the sweep and
 * with a second report), the attempt row inserted and the status row
 * ended -- the same rows silo.complete writes, written directly
 * (direct.c).  Jobs with limits then free their slots, in the same
 * transaction, set-wise (silo_limits_release_many).
 */
void
silo_complete_batch(ReturnSetInfo *rsinfo, int ntasks, Datum *ids, Datum *results,
					bool *result_nulls, const char *worker_id)
{
	int		   *order;
	TimestampTz now;
	int			i;
	int			ndone = 0;
	int			nrun = 0;
	int			nended = 0;
	char	  **tenants;
	List	  **holds;
	Datum	   *done_ids;
	bool		any_limited = false;
	SiloDirect *d;
	SiloTable  *lease;
	SiloTable  *attempt;
	SiloTable  *status;
	SiloTable  *idx;
	Datum		worker_text;
	Datum		succeeded;
	char	   *role = silo_caller_name();
	bool		restricted = silo_caller()->restricted;

	/* the order to take the tasks in */
	order = palloc(sizeof(int) * ntasks);
	for (i = 0; i < ntasks; i++)
		order[i] = i;
	qsort_arg(order, ntasks, sizeof(int), batch_order_cmp, ids);

	now = silo_now_ts();
	worker_text = CStringGetTextDatum(worker_id);
	succeeded = CStringGetTextDatum("Succeeded");
	tenants = palloc0(sizeof(char *) * ntasks);
	holds = palloc0(sizeof(List *) * ntasks);
	done_ids = palloc(sizeof(Datum) * ntasks);

	d = silo_direct_begin();
	lease = silo_table_open(d, "task_lease", batch_lease_cols, BL_NCOLS, NULL,
							SILO_TABLE_DELETE);
	attempt = silo_table_open(d, "attempt", batch_attempt_cols, BATCH_ATTEMPT_NCOLS, NULL,
							  SILO_TABLE_WRITE);
	status = silo_table_open(d, "job_status", batch_status_cols, BS_NCOLS, NULL,
							 SILO_TABLE_WRITE);
	idx = silo_status_index_open(d);
	/* the new attempt and 0x03 rows are written page by page at the end */
	silo_table_batch(attempt);
	silo_table_batch(idx);

	for (i = 0; i < ntasks; i++)
	{
		int			k = order[i];
		SiloAttemptRow row;
		bool		isnull;
		Datum		h;

		if (!batch_take_lease(d, lease, ids[k], worker_id, role, restricted, now))
			continue;
		if (!silo_text_datum_is(silo_table_get(lease, BL_KIND, &isnull), "run"))
			ereport(ERROR,
					(errcode(ERRCODE_SILO_WRONG_TASK_KIND),
					 errmsg("task %s is a %s task, not a run task",
							silo_uuid_to_cstring(ids[k]),
							TextDatumGetCString(silo_table_get(lease, BL_KIND, &isnull))),
					 errhint("Answer a refresh task with silo.report_refresh or silo.fail_refresh.")));
		/*
		 * The isolation mode's refusal of tenant '-' and, in cluster mode,
		 * the shard: a task this call may not complete fails the whole
		 * batch.  (Another tenant's lease was passed over above.)
		 */
		if (restricted || silo_tenant_isolation || silo_cluster_mode())
		{
			char	   *tenant = TextDatumGetCString(silo_table_get(lease, BL_TENANT, &isnull));

			silo_tenancy_check(tenant);
			silo_cluster_check_tenant(tenant);
		}
		nrun++;

		memset(&row, 0, sizeof(row));
		row.tenant = silo_table_get(lease, BL_TENANT, &isnull);
		row.job_id = silo_table_get(lease, BL_JOB_ID, &isnull);
		row.attempt = DatumGetInt32(silo_table_get(lease, BL_ATTEMPT, &isnull));
		row.relative_attempt = DatumGetInt32(silo_table_get(lease, BL_RELATIVE_ATTEMPT, &isnull));
		row.task_id = ids[k];
		row.worker_id = worker_text;
		row.status = succeeded;
		row.started_at = DatumGetTimestampTz(silo_table_get(lease, BL_STARTED_AT, &isnull));
		row.finished_at = now;
		if (results != NULL && !result_nulls[k])
			row.result = results[k];
		silo_attempt_put(attempt, &row);

		h = silo_table_get(lease, BL_HOLDS, &isnull);
		if (!isnull)
		{
			/* a job with limits: its tenant marks it for the release below */
			tenants[ndone] = TextDatumGetCString(row.tenant);
			holds[ndone] = silo_holds_list(h);
			any_limited = true;
		}
		h = silo_table_get(lease, BL_JOB_STATUS_TID, &isnull);
		if (batch_end_status(d, status, idx, row.tenant, row.job_id, ids[k], h, isnull, now))
			nended++;
		done_ids[ndone++] = ids[k];
	}
	silo_direct_end(d);

	if (nended != nrun)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_INTERNAL),
				 errmsg("complete_many ended %d job statuses for %d leases", nended, nrun),
				 errdetail("A leased task is not its job's current task.")));

	for (i = 0; i < ndone; i++)
	{
		bool		isnull = false;

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &done_ids[i], &isnull);
	}

	/* Jobs with limits free their slots, and grant the waiters. */
	if (any_limited)
	{
		silo_spi_connect();
		silo_limits_release_many(ndone, tenants, holds, done_ids, now);
		silo_spi_finish();
	}
}
