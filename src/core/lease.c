/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  silo.lease and silo.heartbeat: the worker's side of taking work.
 *
 * Leasing moves tasks from silo.task to silo.task_lease, with no SQL
 * (direct.c): the group's due tasks are read from task_ready in ready
 * order, each is deleted unless another transaction holds it (SKIP LOCKED:
 * a worker never waits on, or receives, another worker's rows), its lease
 * row inserted and its job's payload read through the row hint the task
 * carries.  The job_status row is not touched: a job is Running exactly
 * when its current task has a lease row.  The scan starts
 * at the group's lease mark (leasemark.c), past the tasks earlier leases
 * took, whose index entries a long-open snapshot keeps alive.  Ready refresh
 * tasks of floating limits in the group (floating.c) are handed out
 * first, as rows of kind 'refresh'.  A lease of some tenants, and the
 * turns of a fair group, are lease_tenants.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_core.h"
#include "lease_internal.h"

#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"

static void lease_raise_mark(SiloDirect *d, const char *task_group, uint64 gen,
							 const SiloMarkKey *start, const SiloMarkKey *past);

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

/* silo.task columns a lease reads (lease_internal.h names them) */
const char *const silo_lease_task_cols[] = {
	"task_id", "task_group", "tenant", "job_id", "attempt", "relative_attempt", "priority",
	"start_at", "seq", "holds", "job_info_tid", "job_status_tid"
};

/* silo.task_lease, every column */
static const char *const lease_lease_cols[] = {
	"task_id", "kind", "task_group", "tenant", "job_id", "attempt", "relative_attempt",
	"priority", "start_at", "seq", "worker_id", "started_at", "expires_at", "holds",
	"job_status_tid", "owner_role"
};
#define LEASE_LEASE_NCOLS 16

/*
 * silo.job_info columns a lease reads; the key first (see below).  The
 * retry policy and limits come from the row the lease reads anyway, so
 * handing them to the worker costs no extra lookup (1.8).
 */
static const char *const lease_info_cols[] = {
	"tenant", "id", "retry_count", "payload", "metadata", "retry_initial_ms", "retry_max_ms",
	"retry_factor", "retry_randomize", "limits"
};
enum
{
	LI_TENANT, LI_ID, LI_RETRY_COUNT, LI_PAYLOAD, LI_METADATA, LI_RETRY_INITIAL_MS,
	LI_RETRY_MAX_MS, LI_RETRY_FACTOR, LI_RETRY_RANDOMIZE, LI_LIMITS, LI_NCOLS
};

/*
 * lease_retry_policy: the retry policy of the job_info row (one that has
 * a policy: retry_count is not NULL) as the object silo.enqueue accepts,
 * every key given.  Rarely built: most jobs have none.
 */
static Datum
lease_retry_policy(SiloTable *info, Datum retry_count)
{
	SiloRetryPolicy p;
	bool		n;

	p.count = DatumGetInt32(retry_count);
	p.initial_ms = DatumGetInt64(silo_table_get(info, LI_RETRY_INITIAL_MS, &n));
	p.max_ms = DatumGetInt64(silo_table_get(info, LI_RETRY_MAX_MS, &n));
	p.factor = DatumGetFloat8(silo_table_get(info, LI_RETRY_FACTOR, &n));
	p.randomize = DatumGetBool(silo_table_get(info, LI_RETRY_RANDOMIZE, &n));
	return JsonbPGetDatum(silo_retry_policy_jsonb(&p));
}

/*
 * lease_group_overdue: whether the group has a task whose start has come
 * but which the broker has not promoted yet.  Usually it has none: the
 * broker promotes future tasks as their time comes.  The probe reads the
 * group's own range of task_future_group (task_group, start_at WHERE NOT
 * due), so other groups' overdue tasks -- thousands of them while the
 * broker is paused or behind -- cost it nothing (1.7).
 */
static bool
lease_group_overdue(const char *task_group, TimestampTz now)
{
	SiloDirect *d = silo_direct_begin();
	SiloTable  *t = silo_table_open(d, "task", silo_lease_task_cols, LT_NCOLS, "task_future_group",
									SILO_TABLE_READ);
	ScanKeyData keys[2];
	bool		found;

	ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid, C_COLLATION_OID,
						   F_TEXTEQ, CStringGetTextDatum(task_group));
	ScanKeyInit(&keys[1], 2, BTLessEqualStrategyNumber, F_TIMESTAMP_LE, TimestampTzGetDatum(now));
	silo_table_scan_start(t, keys, 2);
	found = silo_table_scan_next(t);
	silo_direct_end(d);
	return found;
}

/*
 * lease_promote_group: make the group's due-but-unpromoted tasks leasable,
 * so that a due task is leasable whether or not the broker has run.
 */
static void
lease_promote_group(const char *task_group, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {TIMESTAMPTZOID, TEXTOID};
	Datum		values[2];

	if (!lease_group_overdue(task_group, now))
		return;
	values[0] = TimestampTzGetDatum(now);
	values[1] = CStringGetTextDatum(task_group);
	silo_spi_connect();
	silo_exec(&plan,
			  "UPDATE silo.task SET due = true WHERE ctid = ANY(ARRAY("
			  " SELECT ctid FROM silo.task"
			  "  WHERE NOT due AND start_at <= $1 AND task_group = $2"
			  "  ORDER BY start_at LIMIT 1000 FOR UPDATE SKIP LOCKED))",
			  2, types, values, NULL, false, 0);
	silo_spi_finish();
}

/*
 * lease_ready_keys: scan keys for task_ready (task_group, priority,
 * start_at, seq) from key on: task_group = group AND (priority, start_at,
 * seq) >= key, the row comparison an index scan starts at.  keys has room
 * for 2, row for 3.
 */
static void
lease_ready_keys(ScanKey keys, ScanKey row, Datum group, const SiloMarkKey *key)
{
	ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid, C_COLLATION_OID,
						   F_TEXTEQ, group);
	ScanKeyEntryInitialize(&row[0], SK_ROW_MEMBER, 2, BTGreaterEqualStrategyNumber, INT2OID,
						   InvalidOid, F_BTINT2CMP, Int16GetDatum(key->priority));
	ScanKeyEntryInitialize(&row[1], SK_ROW_MEMBER, 3, BTGreaterEqualStrategyNumber,
						   TIMESTAMPTZOID, InvalidOid, F_TIMESTAMP_CMP,
						   TimestampTzGetDatum(key->start_at));
	ScanKeyEntryInitialize(&row[2], SK_ROW_MEMBER | SK_ROW_END, 4, BTGreaterEqualStrategyNumber,
						   INT8OID, InvalidOid, F_BTINT8CMP, Int64GetDatum(key->seq));
	MemSet(&keys[1], 0, sizeof(ScanKeyData));
	keys[1].sk_flags = SK_ROW_HEADER;
	keys[1].sk_attno = 2;
	keys[1].sk_strategy = BTGreaterEqualStrategyNumber;
	keys[1].sk_argument = PointerGetDatum(row);
}

/*
 * silo_lease_row_key: the ready-order key of the task table's current row.
 */
void
silo_lease_row_key(SiloTable *task, SiloMarkKey *key)
{
	bool		isnull;

	key->priority = DatumGetInt16(silo_table_get(task, LT_PRIORITY, &isnull));
	key->start_at = DatumGetTimestampTz(silo_table_get(task, LT_START_AT, &isnull));
	key->seq = DatumGetInt64(silo_table_get(task, LT_SEQ, &isnull));
}


/*
 * silo_lease_take_row: take the task table's current row, if no other
 * transaction holds it (FOR UPDATE SKIP LOCKED: a worker never waits on,
 * or receives, another worker's rows): delete it, insert its lease row,
 * and hand the worker the task with its job's payload, read from job_info
 * by primary key (through the task's row hint).  Returns whether it was
 * taken.
 */
bool
silo_lease_take_row(LeaseWork *w, SiloTable *task)
{
	Datum		l[LEASE_LEASE_NCOLS];
	bool		lnulls[LEASE_LEASE_NCOLS];
	Datum		out[LEASED_TASK_NATTS];
	bool		outnulls[LEASED_TASK_NATTS];
	Datum		key[2];
	Datum		hint;
	bool		hint_null;
	bool		isnull;
	int			c;

	/*
	 * Cluster mode: a task of a shard this node does not serve (rows left
	 * by a force-released shard, say) is passed over.
	 */
	if (w->cluster && !silo_cluster_serves_tenant(TextDatumGetCString(
													silo_table_get(task, LT_TENANT, &isnull))))
		return false;

	/*
	 * With silo.tenant_isolation on, the default tenant is refused
	 * everywhere: its tasks wait, for every caller, until it is off.
	 */
	if (w->no_default)
	{
		text	   *t = DatumGetTextPP(silo_table_get(task, LT_TENANT, &isnull));

		if (VARSIZE_ANY_EXHDR(t) == 1 && *VARDATA_ANY(t) == '-')
			return false;
	}

	/*
	 * The delete is the lock (SKIP LOCKED): a task another transaction
	 * holds, or changed or took since the scan's snapshot, is passed over.
	 * The check before the mark is raised finds any of them that stays
	 * (lease_raise_mark).
	 */
	if (silo_table_delete_skip_locked(task) != TM_Ok)
		return false;

	/* the lease row: the task's columns, then who holds it until when */
	memset(lnulls, false, sizeof(lnulls));
	l[0] = silo_table_get(task, LT_TASK_ID, &isnull);
	l[1] = w->run;
	for (c = 2; c <= 9; c++)	/* task_group .. seq: LT_TASK_GROUP .. LT_SEQ */
		l[c] = silo_table_get(task, LT_TASK_GROUP + c - 2, &isnull);
	l[10] = w->worker_text;
	l[11] = TimestampTzGetDatum(w->now);
	l[12] = TimestampTzGetDatum(w->expires);
	l[13] = silo_table_get(task, LT_HOLDS, &lnulls[13]);
	l[14] = silo_table_get(task, LT_JOB_STATUS_TID, &lnulls[14]);
	l[15] = w->owner;
	silo_table_insert(w->lease, l, lnulls);

	memset(outnulls, false, sizeof(outnulls));
	out[0] = l[0];				/* task_id */
	out[1] = w->run;			/* kind */
	out[2] = l[3];				/* tenant */
	out[3] = l[4];				/* job_id */
	out[4] = l[5];				/* attempt */
	out[5] = l[6];				/* relative_attempt */
	out[7] = Int32GetDatum(DatumGetInt16(l[7]));	/* priority */
	out[8] = l[2];				/* task_group */
	out[11] = TimestampTzGetDatum(w->expires);
	outnulls[12] = outnulls[13] = outnulls[14] = true;
	outnulls[15] = outnulls[16] = true;
	key[0] = l[3];
	key[1] = l[4];
	hint = silo_table_get(task, LT_JOB_INFO_TID, &hint_null);
	if (silo_table_fetch_hinted(w->info, hint, hint_null, 2, key))
	{
		Datum		retry_count = silo_table_get(w->info, LI_RETRY_COUNT, &isnull);

		out[6] = BoolGetDatum(isnull ||
							  DatumGetInt32(l[6]) > DatumGetInt32(retry_count));
		out[9] = silo_table_get(w->info, LI_PAYLOAD, &outnulls[9]);
		out[10] = silo_table_get(w->info, LI_METADATA, &outnulls[10]);
		out[15] = silo_table_get(w->info, LI_LIMITS, &outnulls[15]);
		/* NULL: no policy, the first failure is final */
		outnulls[16] = isnull;
		if (!isnull)
			out[16] = lease_retry_policy(w->info, retry_count);
	}
	else
	{
		/* no job_info row: bookkeeping is broken, but hand out the task */
		out[6] = BoolGetDatum(true);
		outnulls[9] = outnulls[10] = true;
	}
	tuplestore_putvalues(w->rsinfo->setResult, w->rsinfo->setDesc, out, outnulls);
	return true;
}

/*
 * silo_lease_begin: open the tables a lease writes and reads, in d.
 */
void
silo_lease_begin(LeaseWork *w, SiloDirect *d, ReturnSetInfo *rsinfo, const char *worker_id,
				 TimestampTz now, TimestampTz expires)
{
	w->rsinfo = rsinfo;
	w->lease = silo_table_open(d, "task_lease", lease_lease_cols, LEASE_LEASE_NCOLS,
							   NULL, SILO_TABLE_WRITE);
	w->info = silo_table_open(d, "job_info", lease_info_cols, LI_NCOLS, NULL,
							  SILO_TABLE_READ);
	w->worker_text = CStringGetTextDatum(worker_id);
	w->owner = CStringGetTextDatum(silo_caller_name());
	w->run = CStringGetTextDatum("run");
	w->now = now;
	w->expires = expires;
	w->cluster = silo_cluster_mode();
	w->no_default = silo_tenant_isolation;
	/* the lease rows are written page by page when the work ends */
	silo_table_batch(w->lease);
}

/*
 * lease_take: the lease of the whole group: walks the group's due tasks
 * in ready order from start and takes them (lease_take_row).  Up to
 * max_tasks rows go to the result set; *past becomes the key just after
 * the last task taken.  Returns how many were taken.
 */
static int
lease_take(SiloDirect *d, LeaseWork *w, const char *task_group, int32 max_tasks,
		   const SiloMarkKey *start, SiloMarkKey *past)
{
	SiloTable  *task = silo_table_open(d, "task", silo_lease_task_cols, LT_NCOLS, "task_ready",
									SILO_TABLE_DELETE);
	ScanKeyData keys[2];
	ScanKeyData row[3];
	int			n = 0;

	lease_ready_keys(keys, row, CStringGetTextDatum(task_group), start);
	silo_table_scan_start(task, keys, 2);
	while (n < max_tasks && silo_table_scan_next(task))
	{
		if (!silo_lease_take_row(w, task))
			continue;
		silo_lease_row_key(task, past);
		past->seq++;			/* just past the last task taken */
		n++;
	}
	return n;
}

/*
 * silo_lease_tasks: silo.lease's work (api/worker.c checked the arguments
 * and the transaction): up to max_tasks rows of silo.leased_task go to
 * rsinfo's tuplestore, in ready order, or in turns across tenants when
 * the group is fair.  ntenants >= 0 leases only the given tenants' tasks
 * (none when 0); -1 the whole group's.  Needs READ COMMITTED: under
 * REPEATABLE READ a locked-and-deleted task would be skipped by a
 * snapshot that still shows it.
 */
void
silo_lease_tasks(ReturnSetInfo *rsinfo, const char *worker_id, const char *task_group,
				 int32 max_tasks, int32 lease_ms, int ntenants, char **tenants)
{
	TimestampTz now;
	TimestampTz expires;
	uint64		i;
	uint64		n_refresh = 0;
	bool		use_mark;
	Oid			task_relid = InvalidOid;
	SiloMarkKey start;
	SiloMarkKey past;
	uint64		gen = 0;
	SiloDirect *d;
	LeaseWork	w;
	int			n;
	bool		fair;

	now = silo_now_ts();
	expires = now + (TimestampTz) lease_ms * 1000;

	/*
	 * Refresh tasks of floating limits come first (Silo gives them priority
	 * 0); the query runs only while one may be ready.
	 */
	if (silo_refresh_hint())
	{
		silo_spi_connect();
		n_refresh = silo_floating_lease(task_group, max_tasks, worker_id, now, expires,
										ntenants, tenants);
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
		silo_spi_finish();
		if (n_refresh >= (uint64) max_tasks)
			return;
		max_tasks -= (int32) n_refresh;
	}

	lease_promote_group(task_group, now);

	fair = silo_group_fair(task_group);
	use_mark = lease_marks_enabled(&task_relid);

	/* some tenants only: their own ranges, from their own marks */
	if (ntenants >= 0)
	{
		d = silo_direct_begin();
		silo_lease_begin(&w, d, rsinfo, worker_id, now, expires);
		(void) silo_lease_take_tenants(d, &w, task_group, max_tasks, ntenants, tenants, fair,
									   use_mark ? task_relid : InvalidOid);
		silo_direct_end(d);
		return;
	}

	/* read the mark before the scan's snapshot is taken (leasemark.c) */
	start = silo_mark_lowest;
	if (use_mark)
		silo_mark_begin(task_group, "", task_relid, &start, &gen);

	d = silo_direct_begin();
	silo_lease_begin(&w, d, rsinfo, worker_id, now, expires);

	/*
	 * A fair group takes turns across its named tenants first
	 * (lease_tenants.c); what they leave is taken in ready order.
	 */
	if (fair)
		max_tasks -= silo_lease_take_fair(d, &w, task_group, max_tasks,
										  use_mark ? task_relid : InvalidOid);
	n = max_tasks > 0 ? lease_take(d, &w, task_group, max_tasks, &start, &past) : 0;
	if (use_mark && n > 0)
		lease_raise_mark(d, task_group, gen, &start, &past);
	silo_direct_end(d);
}

/*
 * lease_raise_mark: after a lease that scanned from start and took tasks
 * up to just below past, raise the group's mark as far as is safe.  The
 * scan skipped the rows other transactions had locked, and a lock does
 * not always end in a delete: a FOR UPDATE whose re-check fails keeps the
 * row locked, unchanged, to the end of its transaction.  So the raise
 * stops at the first due row still visible at or after start -- seen with
 * a snapshot taken after the lease's deletes, so the tasks just leased are
 * gone from it and anything another lease skipped is in it -- when that
 * row lies below past.  The scan reads that one row and stops: the
 * comparison with past is made here, not as an upper bound of the scan
 * (docs/performance.md §8).
 */
static void
lease_raise_mark(SiloDirect *d, const char *task_group, uint64 gen, const SiloMarkKey *start,
				 const SiloMarkKey *past)
{
	SiloTable  *task = silo_table_open(d, "task", silo_lease_task_cols, LT_NCOLS, "task_ready",
									SILO_TABLE_READ);
	ScanKeyData keys[2];
	ScanKeyData row[3];
	SiloMarkKey to = *past;

	silo_direct_new_snapshot(d);
	lease_ready_keys(keys, row, CStringGetTextDatum(task_group), start);
	silo_table_scan_start(task, keys, 2);
	if (silo_table_scan_next(task))
	{
		SiloMarkKey first;

		silo_lease_row_key(task, &first);
		if (silo_mark_cmp(&first, past) < 0)
			to = first;
	}
	silo_mark_raise(task_group, "", gen, &to);
}

/*
 * lease_heartbeat_not_found: the answer to a heartbeat on a task with no
 * lease -- or with another tenant's, which must not be told apart.
 */
static void
lease_heartbeat_not_found(Datum task_id)
{
	ereport(ERROR,
			(errcode(ERRCODE_SILO_LEASE_NOT_FOUND),
			 errmsg("lease not found"),
			 errdetail("Task %s has no lease: it was never leased, was already reported, or its expired lease was swept.",
					   silo_uuid_to_cstring(task_id))));
}

/*
 * silo_heartbeat_lease: silo.heartbeat's work: extend a live lease owned
 * by worker_id; returns whether the job has been cancelled.  The update
 * touches only expires_at, so it is a HOT update.
 */
bool
silo_heartbeat_lease(Datum task_id, const char *worker_id, int32 lease_ms)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr check_plan = NULL;
	static const Oid types[5] = {UUIDOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID};
	Datum		values[5];
	TimestampTz now;
	bool		cancelled;

	now = silo_now_ts();
	values[0] = task_id;
	values[1] = CStringGetTextDatum(worker_id);
	values[2] = TimestampTzGetDatum(now + (TimestampTz) lease_ms * 1000);
	values[3] = TimestampTzGetDatum(now);
	values[4] = CStringGetTextDatum(silo_caller_name());

	silo_spi_connect();
	silo_exec(&plan,
			  "UPDATE silo.task_lease l SET expires_at = $3"
			  " WHERE task_id = $1 AND worker_id = $2 AND expires_at > $4"
			  "   AND (owner_role IS NULL OR owner_role = $5)"
			  " RETURNING l.kind = 'run' AND EXISTS (SELECT 1 FROM silo.job_cancellation c"
			  "   WHERE c.tenant = l.tenant AND c.job_id = l.job_id), l.tenant",
			  5, types, values, NULL, false, 0);
	if (SPI_processed == 1)
	{
		/* the checks the prologue could not make: the lease names the tenant */
		char	   *tenant = silo_col_text(0, 2);

		if (!silo_tenant_allowed(tenant))
			lease_heartbeat_not_found(values[0]);
		silo_tenancy_check(tenant);
		silo_cluster_check_tenant(tenant);
		cancelled = silo_col_bool(0, 1);
		silo_spi_finish();
		return cancelled;
	}

	/* Say why: no lease (or an expired one) versus another worker's or role's. */
	silo_exec(&check_plan,
			  "SELECT worker_id = $2 AND (owner_role IS NULL OR owner_role = $5), expires_at > $4,"
			  "       tenant"
			  "  FROM silo.task_lease WHERE task_id = $1",
			  5, types, values, NULL, true, 1);
	if (SPI_processed == 1 && !silo_tenant_allowed(silo_col_text(0, 3)))
		lease_heartbeat_not_found(values[0]);	/* another tenant's: say nothing */
	if (SPI_processed == 1 && silo_col_bool(0, 2) && !silo_col_bool(0, 1))
		ereport(ERROR,
				(errcode(ERRCODE_SILO_LEASE_OWNER_MISMATCH),
				 errmsg("lease owner mismatch"),
				 errdetail("Task %s is leased by another worker or role.",
						   silo_uuid_to_cstring(values[0]))));
	if (SPI_processed == 1)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_LEASE_NOT_FOUND),
				 errmsg("lease not found"),
				 errdetail("The lease on task %s has expired; the sweep ends the attempt as WORKER_CRASHED.",
						   silo_uuid_to_cstring(values[0]))));
	lease_heartbeat_not_found(values[0]);
	return false;				/* keep compiler quiet */
}
