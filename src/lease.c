/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  silo.lease and silo.heartbeat: the worker's side of taking work.
 *
 * Leasing moves tasks from silo.task to silo.task_lease in one statement:
 * the due tasks of the group are locked in ready order with
 * FOR UPDATE SKIP LOCKED (so a worker never waits on, or receives,
 * another worker's rows), deleted by ctid (a TID scan, never a join), and
 * their lease rows inserted.  The job_status row is not touched: a job is
 * Running exactly when its current task has a lease row.  The scan starts
 * at the group's lease mark (leasemark.c), past the tasks earlier leases
 * took, whose index entries a long-open snapshot keeps alive.  Ready refresh
 * tasks of floating limits in the group (floating.c) are handed out
 * first, as rows of kind 'refresh'.
 *
 *-------------------------------------------------------------------------
 */
#include "silo.h"

#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

PG_FUNCTION_INFO_V1(silo_lease);
PG_FUNCTION_INFO_V1(silo_heartbeat);

#define LEASED_TASK_NATTS 15

/*
 * lease_marks_enabled: whether silo.task carries the trigger that keeps
 * lease marks safe (it does from extension version 1.3 on).
 */
static bool
lease_marks_enabled(Oid *task_relid)
{
	Oid			relid;
	Relation	rel;
	bool		enabled;

	relid = get_relname_relid("task", get_namespace_oid("silo", false));
	if (!OidIsValid(relid))
		return false;
	rel = table_open(relid, AccessShareLock);
	enabled = silo_mark_enabled(rel);
	table_close(rel, NoLock);
	*task_relid = relid;
	return enabled;
}

/*
 * lease_promote_group: make the group's due-but-unpromoted tasks leasable,
 * so that a due task is leasable whether or not the broker has run.
 * Usually this finds nothing: the partial index task_future holds only
 * tasks that are not yet promoted.
 */
static void
lease_promote_group(const char *task_group, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {TIMESTAMPTZOID, TEXTOID};
	Datum		values[2];

	values[0] = TimestampTzGetDatum(now);
	values[1] = CStringGetTextDatum(task_group);
	silo_exec(&plan,
			  "UPDATE silo.task SET due = true WHERE ctid = ANY(ARRAY("
			  " SELECT ctid FROM silo.task"
			  "  WHERE NOT due AND start_at <= $1 AND task_group = $2"
			  "  ORDER BY start_at LIMIT 1000 FOR UPDATE SKIP LOCKED))",
			  2, types, values, NULL, false, 0);
}

static void lease_raise_mark(const char *task_group, uint64 gen, const SiloMarkKey *start,
							 const SiloMarkKey *past);

/*
 * silo_lease: SQL entry point silo.lease(worker_id, task_group, max_tasks,
 * lease_ms).  Returns up to max_tasks rows of silo.leased_task in priority
 * order.  Needs READ COMMITTED: under REPEATABLE READ a locked-and-deleted
 * task raises a serialization error instead of being skipped.
 */
Datum
silo_lease(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[8] = {TEXTOID, INT4OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	INT2OID, TIMESTAMPTZOID, INT8OID};
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *worker_id;
	char	   *task_group;
	int32		max_tasks;
	int32		lease_ms;
	TimestampTz now;
	TimestampTz expires;
	Datum		values[8];
	uint64		i;
	uint64		n_refresh;
	bool		use_mark;
	Oid			task_relid = InvalidOid;
	SiloMarkKey start;
	uint64		gen = 0;

	worker_id = silo_text_arg(fcinfo, 0, "worker_id", 1, SILO_MAX_WORKER_LEN);
	task_group = silo_text_arg(fcinfo, 1, "task_group", 1, SILO_MAX_GROUP_LEN);
	silo_require_arg(fcinfo, 2, "max_tasks");
	max_tasks = PG_GETARG_INT32(2);
	silo_check_range("max_tasks", max_tasks, 1, SILO_MAX_LEASE_BATCH);
	silo_require_arg(fcinfo, 3, "lease_ms");
	lease_ms = PG_GETARG_INT32(3);
	silo_check_range("lease_ms", lease_ms, SILO_MIN_LEASE_MS, SILO_MAX_LEASE_MS);

	silo_require_read_committed("silo.lease");

	InitMaterializedSRF(fcinfo, 0);

	now = silo_now_ts();
	expires = now + (TimestampTz) lease_ms * 1000;

	silo_spi_connect();

	/*
	 * Refresh tasks of floating limits come first (Silo gives them priority
	 * 0); the query runs only while one may be ready.
	 */
	n_refresh = silo_refresh_hint()
		? silo_floating_lease(task_group, max_tasks, worker_id, now, expires) : 0;
	for (i = 0; i < n_refresh; i++)
	{
		Datum		out[LEASED_TASK_NATTS];
		bool		outnulls[LEASED_TASK_NATTS];
		bool		isnull;

		memset(outnulls, true, sizeof(outnulls));
		out[0] = silo_col(i, 1, &isnull);	/* task_id */
		out[1] = CStringGetTextDatum("refresh");
		out[2] = silo_col(i, 2, &isnull);	/* tenant */
		out[7] = Int32GetDatum(0);	/* priority */
		out[8] = CStringGetTextDatum(task_group);
		out[11] = TimestampTzGetDatum(expires);
		out[12] = silo_col(i, 3, &isnull);	/* queue_key */
		out[13] = silo_col(i, 4, &isnull);	/* current_max_concurrency */
		out[14] = silo_col(i, 5, &isnull);	/* refresh_metadata */
		outnulls[0] = outnulls[1] = outnulls[2] = outnulls[7] = outnulls[8] = false;
		outnulls[11] = outnulls[12] = outnulls[13] = outnulls[14] = false;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
	}
	if (n_refresh >= (uint64) max_tasks)
	{
		silo_spi_finish();
		return (Datum) 0;
	}
	max_tasks -= (int32) n_refresh;

	lease_promote_group(task_group, now);

	/* read the mark before the scan's snapshot is taken (leasemark.c) */
	use_mark = lease_marks_enabled(&task_relid);
	start = silo_mark_lowest;
	if (use_mark)
		silo_mark_begin(task_group, task_relid, &start, &gen);

	values[0] = CStringGetTextDatum(task_group);
	values[1] = Int32GetDatum(max_tasks);
	values[2] = CStringGetTextDatum(worker_id);
	values[3] = TimestampTzGetDatum(now);
	values[4] = TimestampTzGetDatum(expires);
	values[5] = Int16GetDatum(start.priority);
	values[6] = TimestampTzGetDatum(start.start_at);
	values[7] = Int64GetDatum(start.seq);

	/*
	 * Each leased task's payload comes from job_info by one primary-key
	 * probe: a LATERAL subquery with LIMIT cannot be flattened into a join,
	 * so it is always the parameterized inner side of a nested loop, and it
	 * projects only the three columns used (a scalar subquery returning the
	 * whole row, as before 1.4, built and took apart a row datum per task).
	 */
	silo_exec(&plan,
			  "WITH t AS ("
			  "  DELETE FROM silo.task WHERE ctid = ANY(ARRAY("
			  "    SELECT ctid FROM silo.task WHERE task_group = $1 AND due"
			  "       AND (priority, start_at, seq) >= ($6, $7, $8)"
			  "     ORDER BY priority, start_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED))"
			  "  RETURNING task_id, task_group, tenant, job_id, attempt, relative_attempt,"
			  "    priority, start_at, seq, holds),"
			  " l AS ("
			  "  INSERT INTO silo.task_lease (task_id, kind, task_group, tenant, job_id, attempt,"
			  "    relative_attempt, priority, start_at, seq, worker_id, started_at, expires_at,"
			  "    holds)"
			  "  SELECT task_id, 'run', task_group, tenant, job_id, attempt, relative_attempt,"
			  "    priority, start_at, seq, $3, $4, $5, holds FROM t)"
			  "SELECT t.task_id, t.tenant, t.job_id, t.attempt, t.relative_attempt,"
			  "  j.retry_count IS NULL OR t.relative_attempt > j.retry_count,"
			  "  t.priority::integer, t.task_group, j.payload, j.metadata,"
			  "  t.priority, t.start_at, t.seq"
			  "  FROM t LEFT JOIN LATERAL (SELECT i.retry_count, i.payload, i.metadata"
			  "                              FROM silo.job_info i"
			  "                             WHERE i.tenant = t.tenant AND i.id = t.job_id"
			  "                             LIMIT 1) j ON true"
			  " ORDER BY t.priority, t.start_at, t.seq",
			  8, types, values, NULL, false, 0);

	for (i = 0; i < SPI_processed; i++)
	{
		Datum		out[LEASED_TASK_NATTS];
		bool		outnulls[LEASED_TASK_NATTS];
		int			c;

		memset(outnulls, 0, sizeof(outnulls));
		out[0] = silo_col(i, 1, &outnulls[0]);	/* task_id */
		out[1] = CStringGetTextDatum("run");	/* kind */
		for (c = 2; c <= 10; c++)	/* tenant .. metadata */
			out[c] = silo_col(i, c, &outnulls[c]);
		out[11] = TimestampTzGetDatum(expires);
		outnulls[12] = outnulls[13] = outnulls[14] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
	}
	if (use_mark && SPI_processed > 0)
	{
		SiloMarkKey past;
		bool		isnull;

		/* rows come in ready order: just past the last one, at most */
		past.priority = DatumGetInt16(silo_col(SPI_processed - 1, 11, &isnull));
		past.start_at = silo_col_ts(SPI_processed - 1, 12, &isnull);
		past.seq = silo_col_int64(SPI_processed - 1, 13) + 1;
		lease_raise_mark(task_group, gen, &start, &past);
	}
	silo_spi_finish();
	return (Datum) 0;
}

/*
 * lease_raise_mark: after a lease that scanned from start and took tasks
 * up to just below past, raise the group's mark as far as is safe.  The
 * scan skipped the rows other transactions had locked, and a lock does
 * not always end in a delete: a FOR UPDATE whose re-check fails keeps the
 * row locked, unchanged, to the end of its transaction.  So the raise
 * stops at the first due row still visible at or after start -- seen with
 * a snapshot taken after the lease's delete, so the tasks just leased are
 * gone from it and anything another lease skipped is in it -- when that
 * row lies below past.  The query has no upper bound on purpose: a B-tree
 * scan cannot end early on a row comparison that fails only on a later
 * column, so "< past" would walk every due task of the group.
 */
static void
lease_raise_mark(const char *task_group, uint64 gen, const SiloMarkKey *start,
				 const SiloMarkKey *past)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[4] = {TEXTOID, INT2OID, TIMESTAMPTZOID, INT8OID};
	Datum		values[4];
	SiloMarkKey to = *past;
	bool		isnull;

	values[0] = CStringGetTextDatum(task_group);
	values[1] = Int16GetDatum(start->priority);
	values[2] = TimestampTzGetDatum(start->start_at);
	values[3] = Int64GetDatum(start->seq);
	silo_exec(&plan,
			  "SELECT priority, start_at, seq FROM silo.task"
			  " WHERE task_group = $1 AND due"
			  "   AND (priority, start_at, seq) >= ($2, $3, $4)"
			  " ORDER BY priority, start_at, seq LIMIT 1",
			  4, types, values, NULL, false, 1);
	if (SPI_processed == 1)
	{
		SiloMarkKey first;

		first.priority = DatumGetInt16(silo_col(0, 1, &isnull));
		first.start_at = silo_col_ts(0, 2, &isnull);
		first.seq = silo_col_int64(0, 3);
		if (silo_mark_cmp(&first, past) < 0)
			to = first;
	}
	silo_mark_raise(task_group, gen, &to);
}

/*
 * silo_heartbeat: SQL entry point silo.heartbeat(task_id, worker_id,
 * lease_ms).  Extends a live lease owned by worker_id; returns whether the
 * job has been cancelled.  The update touches only expires_at, so it is a
 * HOT update.
 */
Datum
silo_heartbeat(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr check_plan = NULL;
	static const Oid types[4] = {UUIDOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		values[4];
	char	   *worker_id;
	int32		lease_ms;
	TimestampTz now;
	bool		cancelled;

	silo_require_arg(fcinfo, 0, "task_id");
	worker_id = silo_text_arg(fcinfo, 1, "worker_id", 1, SILO_MAX_WORKER_LEN);
	silo_require_arg(fcinfo, 2, "lease_ms");
	lease_ms = PG_GETARG_INT32(2);
	silo_check_range("lease_ms", lease_ms, SILO_MIN_LEASE_MS, SILO_MAX_LEASE_MS);

	now = silo_now_ts();
	values[0] = PG_GETARG_DATUM(0);
	values[1] = CStringGetTextDatum(worker_id);
	values[2] = TimestampTzGetDatum(now + (TimestampTz) lease_ms * 1000);
	values[3] = TimestampTzGetDatum(now);

	silo_spi_connect();
	silo_exec(&plan,
			  "UPDATE silo.task_lease l SET expires_at = $3"
			  " WHERE task_id = $1 AND worker_id = $2 AND expires_at > $4"
			  " RETURNING l.kind = 'run' AND EXISTS (SELECT 1 FROM silo.job_cancellation c"
			  "   WHERE c.tenant = l.tenant AND c.job_id = l.job_id)",
			  4, types, values, NULL, false, 0);
	if (SPI_processed == 1)
	{
		cancelled = silo_col_bool(0, 1);
		silo_spi_finish();
		PG_RETURN_BOOL(cancelled);
	}

	/* Say why: no lease (or an expired one) versus another worker's. */
	silo_exec(&check_plan,
			  "SELECT worker_id = $2, expires_at > $4 FROM silo.task_lease"
			  " WHERE task_id = $1",
			  4, types, values, NULL, true, 1);
	if (SPI_processed == 1 && silo_col_bool(0, 2) && !silo_col_bool(0, 1))
		ereport(ERROR,
				(errcode(ERRCODE_SILO_LEASE_OWNER_MISMATCH),
				 errmsg("lease owner mismatch"),
				 errdetail("Task %s is leased by another worker.",
						   silo_uuid_to_cstring(values[0]))));
	if (SPI_processed == 1)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_LEASE_NOT_FOUND),
				 errmsg("lease not found"),
				 errdetail("The lease on task %s has expired; the sweep ends the attempt as WORKER_CRASHED.",
						   silo_uuid_to_cstring(values[0]))));
	ereport(ERROR,
			(errcode(ERRCODE_SILO_LEASE_NOT_FOUND),
			 errmsg("lease not found"),
			 errdetail("Task %s has no lease: it was never leased, was already reported, or its expired lease was swept.",
					   silo_uuid_to_cstring(values[0]))));
	PG_RETURN_BOOL(false);		/* keep compiler quiet */
}
