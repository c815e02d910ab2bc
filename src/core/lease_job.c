/*-------------------------------------------------------------------------
 *
 * lease_job.c
 *	  silo.lease_job: the lease of one named job's due task, Silo's
 *	  LeaseTask (for tests and tooling).
 *
 * The job's status row is locked first (FOR UPDATE), as the job
 * operations do (jobops.c), so the call serializes with cancel, restart,
 * expedite and the reports of the job; the job must be Waiting: pending,
 * not cancelled, not running, its start come.  Its task row is then found
 * by primary key and taken exactly as silo.lease takes a row
 * (silo_lease_take_row: a delete that skips a row another transaction
 * holds, the lease row, the leased_task row with payload, limits and
 * retry policy).  A silo.lease taking the same task at that moment holds
 * it: the call then returns no row, and exactly one of the two has it.
 *
 * Limits are not bypassed, unlike Silo's LeaseTask: a job waiting on a
 * limit has no task row yet (its place is a chain task or a concurrency
 * request), and is refused.  The task deleted is due; the delete goes
 * past the task table's trigger, so the rollback lowering of the group's
 * lease mark (and the tenant's) that the trigger would have owed is owed
 * here (leasemark.c), as silo_mark_begin owes it for a lease.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_core.h"
#include "lease_internal.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/datum.h"

/* the task columns a lease reads, then whether the row is due */
static const char *const lease_job_task_cols[] = {
	"task_id", "task_group", "tenant", "job_id", "attempt", "relative_attempt", "priority",
	"start_at", "seq", "holds", "job_info_tid", "job_status_tid", "due"
};
#define LJ_DUE LT_NCOLS

/* What lease_job_lock reads about the job. */
typedef struct LeaseJobState
{
	char	   *status;			/* Pending or a terminal status */
	TimestampTz next_attempt_at;
	char	   *task_group;
	int16		priority;
	int32		attempt;
	int32		relative_attempt;
	bool		limited;		/* the job has limits */
	bool		cancelled;		/* has a cancellation flag */
	bool		running;		/* its current task is leased */
	bool		has_task;		/* the status row names a task */
	Datum		task_id;
} LeaseJobState;

/*
 * lease_job_refuse: raise SL012 for the job, with why in the message.
 */
static void
lease_job_refuse(const char *why, const char *detail, const char *hint)
{
	ereport(ERROR,
			(errcode(ERRCODE_SILO_JOB_NOT_LEASABLE),
			 errmsg("job cannot be leased: %s", why),
			 errdetail("%s", detail),
			 hint ? errhint("%s", hint) : 0));
}

/*
 * lease_job_lock: lock the job's status row and read its state (SPI
 * connected); SL003 when there is no such job.  The flag and the lease
 * are read by a second statement, after the lock, so they are current.
 */
static void
lease_job_lock(Datum *key, LeaseJobState *st)
{
	static SPIPlanPtr lock_plan = NULL;
	static SPIPlanPtr state_plan = NULL;
	static const Oid key_types[2] = {TEXTOID, TEXTOID};
	static const Oid state_types[3] = {TEXTOID, TEXTOID, UUIDOID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	bool		isnull;

	silo_exec(&lock_plan,
			  "SELECT s.status, s.task_id, s.next_attempt_at, i.task_group, i.priority,"
			  "  s.attempt, s.relative_attempt, i.limits <> '[]'::jsonb"
			  "  FROM silo.job_status s JOIN silo.job_info i ON i.tenant = s.tenant AND i.id = s.id"
			  " WHERE s.tenant = $1 AND s.id = $2 FOR UPDATE OF s",
			  2, key_types, key, NULL, false, 0);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_JOB_NOT_FOUND),
				 errmsg("job not found"),
				 errdetail("There is no job \"%s\" in tenant \"%s\".",
						   TextDatumGetCString(key[1]), TextDatumGetCString(key[0]))));

	st->status = silo_col_text(0, 1);
	st->task_id = silo_col(0, 2, &isnull);
	st->has_task = !isnull;
	if (st->has_task)
		st->task_id = SPI_datumTransfer(st->task_id, false, UUID_LEN);
	st->next_attempt_at = silo_col_ts(0, 3, &isnull);
	st->task_group = silo_col_text(0, 4);
	st->priority = DatumGetInt16(silo_col(0, 5, &isnull));
	st->attempt = silo_col_int32(0, 6);
	st->relative_attempt = silo_col_int32(0, 7);
	st->limited = silo_col_bool(0, 8);

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
}

/*
 * lease_job_check: refuse (SL012) a job that is not Waiting: ended,
 * cancelled, running, or not yet due.
 */
static void
lease_job_check(LeaseJobState *st, TimestampTz now)
{
	if (strcmp(st->status, "Cancelled") == 0 || (st->cancelled && strcmp(st->status, "Pending") == 0))
		lease_job_refuse("job is cancelled",
						 "A cancelled job is not run again unless it is restarted.",
						 "silo.restart runs a Cancelled job again.");
	if (strcmp(st->status, "Pending") != 0)
		lease_job_refuse("job is in a terminal state",
						 psprintf("The job's status is %s.", st->status), NULL);
	if (st->running)
		lease_job_refuse("job is running",
						 "Its current task is leased by a worker.", NULL);
	if (!st->has_task)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_INTERNAL),
				 errmsg("job is waiting but has no task"),
				 errdetail("Its status row names no current task.")));
	if (st->next_attempt_at > now)
		lease_job_refuse("job is not due yet",
						 psprintf("The job is %s: its task starts later.",
								  st->relative_attempt > 1 ? "Retrying" : "Scheduled"),
						 "silo.expedite makes it due now.");
}

/*
 * lease_job_owe_mark: a due task leaves task_ready: should this
 * transaction roll back, it comes back below the marks (the group's and
 * the tenant's), which the lease owes then.  Owing twice is harmless.
 */
static void
lease_job_owe_mark(SiloTable *task, const char *task_group, const char *tenant)
{
	bool		isnull;
	SiloMarkKey mark;

	if (!DatumGetBool(silo_table_get(task, LJ_DUE, &isnull)))
		return;
	silo_lease_row_key(task, &mark);
	silo_mark_owe(task_group, strcmp(tenant, "-") == 0 ? "" : tenant, &mark, false);
}

/*
 * lease_job_missing: the job's task row was not found although the job
 * is Waiting: it waits on a limit (refused, SL012), or a worker leased it
 * since the job was read (SL012, running), or bookkeeping is broken
 * (SL009).  SPI must not be connected.
 */
static void
lease_job_missing(LeaseJobState *st, const char *tenant, const char *id)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];
	bool		leased;

	silo_spi_connect();
	values[0] = st->task_id;
	silo_exec(&plan, "SELECT 1 FROM silo.task_lease WHERE task_id = $1",
			  1, types, values, NULL, false, 1);
	leased = SPI_processed > 0;
	silo_spi_finish();
	if (leased)
		lease_job_refuse("job is running", "Its current task is leased by a worker.", NULL);
	if (st->limited)
		lease_job_refuse("job is waiting for a limit",
						 "silo.lease_job does not bypass a job's limits: the job becomes leasable once its limits grant it its task.",
						 NULL);
	ereport(ERROR,
			(errcode(ERRCODE_SILO_INTERNAL),
			 errmsg("pending job \"%s\" of tenant \"%s\" has no task %s", id, tenant,
					silo_uuid_to_cstring(st->task_id))));
}

/*
 * silo_lease_one_job: silo.lease_job's work (api/worker.c checked the
 * arguments, the transaction and the tenant): lease job (tenant, id)'s
 * due task to worker_id for lease_ms, as one silo.leased_task row in
 * rsinfo's tuplestore, or no row when another transaction holds the task.
 * Refuses a job that is not Waiting, or waits on a limit (SL012).
 */
void
silo_lease_one_job(ReturnSetInfo *rsinfo, const char *worker_id, const char *tenant,
		   const char *id, int32 lease_ms)
{
	LeaseJobState st;
	Datum		key[2];
	Datum		pk[6];
	TimestampTz now = silo_now_ts();
	TimestampTz expires = now + (TimestampTz) lease_ms * 1000;
	SiloDirect *d;
	SiloTable  *task;
	LeaseWork	w;
	bool		isnull;

	key[0] = CStringGetTextDatum(tenant);
	key[1] = CStringGetTextDatum(id);
	silo_spi_connect();
	lease_job_lock(key, &st);
	silo_spi_finish();
	lease_job_check(&st, now);

	/* the task by primary key (task_group, start_at, priority, tenant, job_id, attempt) */
	pk[0] = CStringGetTextDatum(st.task_group);
	pk[1] = TimestampTzGetDatum(st.next_attempt_at);
	pk[2] = Int16GetDatum(st.priority);
	pk[3] = key[0];
	pk[4] = key[1];
	pk[5] = Int32GetDatum(st.attempt);
	d = silo_direct_begin();
	task = silo_table_open(d, "task", lease_job_task_cols, LT_NCOLS + 1, NULL,
						   SILO_TABLE_DELETE);
	if (!silo_table_fetch(task, 6, pk) ||
		!datumIsEqual(silo_table_get(task, LT_TASK_ID, &isnull), st.task_id, false, UUID_LEN))
	{
		silo_direct_end(d);
		lease_job_missing(&st, tenant, id);
	}

	silo_lease_begin(&w, d, rsinfo, worker_id, now, expires);
	lease_job_owe_mark(task, st.task_group, tenant);
	if (!silo_lease_take_row(&w, task))
	{
		/*
		 * Held by another transaction, or changed since the snapshot (the
		 * broker promoted it a moment ago): look once more with a new
		 * snapshot.  A task still held is another transaction's: no row.
		 */
		silo_direct_new_snapshot(d);
		if (silo_table_fetch(task, 6, pk) &&
			datumIsEqual(silo_table_get(task, LT_TASK_ID, &isnull), st.task_id, false, UUID_LEN))
		{
			lease_job_owe_mark(task, st.task_group, tenant);
			(void) silo_lease_take_row(&w, task);
		}
	}
	silo_direct_end(d);
}
