/*-------------------------------------------------------------------------
 *
 * maintenance.c
 *	  The broker's passes over due work, also run by silo.run_maintenance:
 *	  the promotion of tasks whose start time has come, the sweep of
 *	  expired leases, the walk of parked limit chains; the purge of old
 *	  terminal jobs; and when the next of them is due.
 *
 * In cluster mode every pass and the purge skip the rows of shards this
 * node does not serve: rows arriving while a shard moves here, rows left
 * by a move away, belong to another node's shard.
 *
 * Promotion is one statement per batch; the sweep and the chain walk page
 * through their items with the batch runner (storage/runner.c), each item
 * in a subtransaction of its own, so one bad row is logged and skipped
 * rather than stopping the pass.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_core.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgrprotos.h"
#include "utils/json.h"

#define MAINT_PROMOTE_BATCH		10000

/*
 * Which form of a pass's statement runs: in cluster mode (1) each pass
 * looks only at rows of the shards this node serves (silo.shard_served,
 * which also holds the shard's lock in share mode until the transaction
 * ends, so that a move's pause waits for the pass); single-node mode (0)
 * pays nothing for it.
 */
#define MAINT_FILTER()			(silo_cluster_mode() ? 1 : 0)
#define PURGE_BATCH				5000

/* GUC silo.retention (registered by module.c) */
int			silo_retention_s = 7 * 24 * 3600;

/*
 * silo_promote_due_tasks: mark tasks whose start time has passed as due,
 * in bounded batches, and notify each task group that got work.  SPI must
 * be connected.  Returns the number promoted.
 */
int64
silo_promote_due_tasks(TimestampTz now)
{
	static SPIPlanPtr plans[2] = {NULL, NULL};
	static const char *const sql[2] = {
		"WITH p AS ("
		" UPDATE silo.task SET due = true WHERE ctid = ANY(ARRAY("
		"  SELECT ctid FROM silo.task WHERE NOT due AND start_at <= $1"
		"   ORDER BY start_at LIMIT $2 FOR UPDATE SKIP LOCKED))"
		" RETURNING task_group)"
		"SELECT task_group, count(*) FROM p GROUP BY task_group",
		"WITH p AS ("
		" UPDATE silo.task SET due = true WHERE ctid = ANY(ARRAY("
		"  SELECT ctid FROM silo.task WHERE NOT due AND start_at <= $1"
		"   AND silo.shard_served(tenant) ORDER BY start_at LIMIT $2 FOR UPDATE SKIP LOCKED))"
		" RETURNING task_group)"
		"SELECT task_group, count(*) FROM p GROUP BY task_group"
	};
	static const Oid types[2] = {TIMESTAMPTZOID, INT4OID};
	Datum		values[2];
	int64		total = 0;
	int			c = MAINT_FILTER();

	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(MAINT_PROMOTE_BATCH);
	for (;;)
	{
		uint64		i;
		int64		n = 0;

		/* One row per task group that got work, with its count. */
		silo_exec(&plans[c], sql[c], 2, types, values, NULL, false, 0);
		for (i = 0; i < SPI_processed; i++)
		{
			Async_Notify(SILO_NOTIFY_CHANNEL, silo_col_text(i, 1));
			n += silo_col_int64(i, 2);
		}
		total += n;
		if (n < MAINT_PROMOTE_BATCH)
			break;
	}
	return total;
}

/*
 * maint_expired_error_data: the error_data of a WORKER_CRASHED attempt.
 */
static Jsonb *
maint_expired_error_data(SiloLease *lease, TimestampTz now)
{
	StringInfoData buf;
	char	   *expired_at;
	char	   *swept_at;

	/* timestamptz_to_str returns a static buffer: copy each result in turn. */
	expired_at = pstrdup(timestamptz_to_str(lease->expires_at));
	swept_at = pstrdup(timestamptz_to_str(now));

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"message\": ");
	escape_json(&buf, psprintf("lease expired at %s (swept at %s)", expired_at, swept_at));
	appendStringInfoString(&buf, ", \"worker_id\": ");
	escape_json(&buf, lease->worker_id);
	appendStringInfoChar(&buf, '}');
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}

/*
 * maint_sweep_item / maint_sweep_describe: the sweep's callbacks over
 * an array of task ids.  An expired run lease ends its attempt as
 * WORKER_CRASHED; an expired refresh lease frees the refresh.
 */
static bool
maint_sweep_item(int i, void *arg, TimestampTz now)
{
	SiloLease	lease;
	Datum		task_id = DirectFunctionCall1(uuid_in,
											  CStringGetDatum(SILO_CELL((SiloListed *) arg, i, 0)));

	if (!silo_lease_take_expired(task_id, now, &lease))
		return false;
	if (strcmp(lease.kind, "refresh") == 0)
		silo_floating_finish(&lease, SILO_FLOATING_EXPIRED, 0, NULL, now);
	else
		silo_finish_attempt(&lease, SILO_OUTCOME_FAILED, NULL, "WORKER_CRASHED",
							maint_expired_error_data(&lease, now), now, true);
	return true;
}

static char *
maint_sweep_describe(int i, void *arg)
{
	return psprintf("sweep the expired lease of task %s", SILO_CELL((SiloListed *) arg, i, 0));
}

/*
 * silo_sweep_expired_leases: end every expired lease as a failed attempt
 * with code WORKER_CRASHED (retried per the job's policy; Cancelled when
 * the job was flagged).  Looks at up to limit expired leases, oldest
 * first, after skipping *offset of them; *more says whether there may be
 * others.  SPI must be connected.  Returns the number swept.
 */
int64
silo_sweep_expired_leases(TimestampTz now, int limit, int64 *offset, bool *more)
{
	static SPIPlanPtr plans[2] = {NULL, NULL};
	static const char *const sql[2] = {
		"SELECT task_id FROM silo.task_lease WHERE expires_at <= $1"
		" ORDER BY expires_at, task_id OFFSET $3 LIMIT $2",
		"SELECT task_id FROM silo.task_lease WHERE expires_at <= $1"
		" AND silo.shard_served(tenant) ORDER BY expires_at, task_id OFFSET $3 LIMIT $2"
	};
	int			c = MAINT_FILTER();

	return silo_run_listed(&plans[c], sql[c],
						   now, limit, offset, more, maint_sweep_item, maint_sweep_describe);
}

static bool
maint_chain_item(int i, void *arg, TimestampTz now)
{
	static SPIPlanPtr take_plan = NULL;
	static SPIPlanPtr job_plan = NULL;
	static const Oid types[4] = {TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID};
	SiloListed *l = (SiloListed *) arg;
	Datum		values[4];
	SiloChainJob job;
	bool		isnull;
	int			at;
	ItemPointerData status_tid;

	values[0] = CStringGetTextDatum(SILO_CELL(l, i, 0));
	values[1] = CStringGetTextDatum(SILO_CELL(l, i, 1));
	values[2] = Int32GetDatum(pg_strtoint32(SILO_CELL(l, i, 2)));
	values[3] = TimestampTzGetDatum(now);
	/* The job row first (every path locks it before keys), then the task. */
	silo_exec(&job_plan,
			  "SELECT ctid FROM silo.job_status WHERE tenant = $1 AND id = $2 AND status = 'Pending'"
			  " AND attempt = $3 FOR UPDATE NOWAIT",
			  4, types, values, NULL, false, 0);
	if (SPI_processed != 1)
		return false;
	status_tid = *(ItemPointer) DatumGetPointer(silo_col(0, 1, &isnull));
	silo_exec(&take_plan,
			  "DELETE FROM silo.chain_task WHERE tenant = $1 AND job_id = $2 AND attempt = $3"
			  " AND run_at <= $4"
			  " RETURNING relative_attempt, task_id, task_group, priority, seq, start_at,"
			  "   limit_index, rate_checks, holds",
			  4, types, values, NULL, false, 0);
	if (SPI_processed != 1)
		return false;

	memset(&job, 0, sizeof(job));
	job.tenant = SILO_CELL(l, i, 0);
	job.job_id = SILO_CELL(l, i, 1);
	job.attempt = DatumGetInt32(values[2]);
	job.relative_attempt = silo_col_int32(0, 1);
	job.task_id = datumCopy(silo_col(0, 2, &isnull), false, UUID_LEN);
	job.task_group = silo_col_text(0, 3);
	job.priority = DatumGetInt16(silo_col(0, 4, &isnull));
	job.seq = silo_col_int64(0, 5);
	job.start_at = silo_col_ts(0, 6, NULL);
	at = DatumGetInt16(silo_col(0, 7, &isnull));
	job.rate_checks = silo_col_int32(0, 8);
	job.holds = silo_holds_list(silo_col(0, 9, &isnull));
	/* where its status row is: a hint for the task the walk may write */
	job.status_tid = status_tid;
	job.has_status_tid = true;
	silo_chain_load_limits(&job);
	at = silo_chain_resume(&job, at, SILO_CHAIN_BROKER, now);
	if (at >= 0)
		silo_fail_rate_limited(&job, at, now);
	return true;
}

static char *
maint_chain_describe(int i, void *arg)
{
	SiloListed *l = (SiloListed *) arg;

	return psprintf("walk the limits of job \"%s\" of tenant \"%s\"",
					SILO_CELL(l, i, 1), SILO_CELL(l, i, 0));
}

/*
 * silo_run_chain_tasks: walk the chain tasks whose time has come (future
 * starts of jobs with limits, rate-limit re-checks, deferred steps), up
 * to limit of them after skipping *offset busy ones.  Returns the number
 * walked.
 */
int64
silo_run_chain_tasks(TimestampTz now, int limit, int64 *offset, bool *more)
{
	static SPIPlanPtr plans[2] = {NULL, NULL};
	static const char *const sql[2] = {
		"SELECT tenant, job_id, attempt FROM silo.chain_task WHERE run_at <= $1"
		" ORDER BY run_at, priority, start_at, seq OFFSET $3 LIMIT $2",
		"SELECT tenant, job_id, attempt FROM silo.chain_task WHERE run_at <= $1"
		" AND silo.shard_served(tenant) ORDER BY run_at, priority, start_at, seq OFFSET $3 LIMIT $2"
	};
	int			c = MAINT_FILTER();

	return silo_run_listed(&plans[c], sql[c],
						   now, limit, offset, more, maint_chain_item, maint_chain_describe);
}

/*
 * silo_next_due_at: when the broker has work next: the earliest future
 * task, chain task, regrant marker or floating-limit check; false when
 * there is none.  SPI must be connected.
 */
bool
silo_next_due_at(TimestampTz *next)
{
	static SPIPlanPtr plans[2] = {NULL, NULL};
	static const char *const sql[2] = {
		"SELECT least((SELECT min(start_at) FROM silo.task WHERE NOT due),"
		"             (SELECT min(run_at) FROM silo.chain_task),"
		"             (SELECT min(marked_at) FROM silo.concurrency_regrant),"
		"             (SELECT min(refresh_check_at) FROM silo.floating_limit))",
		"SELECT least((SELECT min(start_at) FROM silo.task WHERE NOT due AND silo.shard_served(tenant)),"
		"             (SELECT min(run_at) FROM silo.chain_task WHERE silo.shard_served(tenant)),"
		"             (SELECT min(marked_at) FROM silo.concurrency_regrant WHERE silo.shard_served(tenant)),"
		"             (SELECT min(refresh_check_at) FROM silo.floating_limit WHERE silo.shard_served(tenant)))"
	};
	bool		isnull;
	int			c = MAINT_FILTER();

	silo_exec(&plans[c], sql[c], 0, NULL, NULL, NULL, true, 0);
	*next = silo_col_ts(0, 1, &isnull);
	return !isnull;
}

/* A paged pass of the broker's: its items handled this call, and used. */
typedef int64 (*MaintPass) (TimestampTz now, int limit, int64 *offset, bool *more);

/*
 * maint_pass: run a paged pass on at most *budget items (each item a
 * subtransaction), taking what it looked at from *budget.  Returns the
 * items it handled.
 */
static int64
maint_pass(MaintPass pass, TimestampTz now, int *budget)
{
	int64		offset = 0;
	int64		handled;
	bool		more;

	if (*budget <= 0)
		return 0;
	handled = pass(now, *budget, &offset, &more);
	*budget -= (int) (handled + offset);
	CHECK_FOR_INTERRUPTS();
	return handled;
}

/*
 * silo_maintenance_round: silo.run_maintenance's work, one round of the
 * broker's passes in the caller's transaction: *promoted gets the tasks
 * promoted and chain tasks walked, *swept the leases swept.  Every item
 * of a paged pass runs in a subtransaction that writes, and a backend
 * keeps only 64 of them in its snapshot (PGPROC_MAX_CACHED_SUBXIDS):
 * beyond, every snapshot any backend takes while this transaction is open
 * has to look them up in pg_subtrans.  So one call looks at most at
 * SILO_MAINTENANCE_ITEMS items in all, as the broker does per transaction;
 * what is left waits for the next call.
 */
void
silo_maintenance_round(TimestampTz now, int64 *promoted_out, int64 *swept_out)
{
	int			budget = SILO_MAINTENANCE_ITEMS;

	silo_spi_connect();
	*promoted_out = silo_promote_due_tasks(now);
	*promoted_out += maint_pass(silo_run_chain_tasks, now, &budget);
	(void) maint_pass(silo_run_regrants, now, &budget);
	*swept_out = maint_pass(silo_sweep_expired_leases, now, &budget);
	(void) maint_pass(silo_check_floating_limits, now, &budget);
	(void) silo_purge_idle_buckets(now);
	silo_spi_finish();
}

/*
 * silo_purge_jobs: silo.purge_terminal_jobs's work: delete terminal jobs
 * whose status changed before before, with their attempts, metadata and
 * flags, in batches; at most max_jobs, and tell their waiters.  Returns
 * how many.
 */
int64
silo_purge_jobs(int32 max_jobs, TimestampTz before)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[3] = {TIMESTAMPTZOID, INT4OID, BOOLOID};
	Datum		values[3];
	int64		total = 0;

	values[0] = TimestampTzGetDatum(before);
	/* $3: every shard (single-node mode), else only those served here */
	values[2] = BoolGetDatum(!silo_cluster_mode());
	silo_spi_connect();
	while (total < max_jobs)
	{
		int64		n;
		uint64		i;

		values[1] = Int32GetDatum((int32) Min(PURGE_BATCH, max_jobs - total));
		silo_exec(&plan,
				  "WITH j AS ("
				  "  SELECT tenant, id, status, changed_at FROM silo.job_status"
				  "   WHERE status <> 'Pending' AND changed_at < $1 AND ($3 OR silo.shard_served(tenant))"
				  "   LIMIT $2 FOR UPDATE SKIP LOCKED),"
				  " x AS (DELETE FROM silo.job_status_index x USING j"
				  "   WHERE x.tenant = j.tenant AND x.status = j.status"
				  "     AND x.changed_at = j.changed_at AND x.id = j.id),"
				  " a AS (DELETE FROM silo.attempt x USING j"
				  "   WHERE x.tenant = j.tenant AND x.job_id = j.id),"
				  " m AS (DELETE FROM silo.job_metadata x"
				  "   USING j, silo.job_info i, jsonb_each_text(i.metadata) e"
				  "   WHERE i.tenant = j.tenant AND i.id = j.id AND x.tenant = j.tenant"
				  "     AND x.key = e.key AND x.value = e.value AND x.job_id = j.id),"
				  " c AS (DELETE FROM silo.job_cancellation x USING j"
				  "   WHERE x.tenant = j.tenant AND x.job_id = j.id),"
				  " i AS (DELETE FROM silo.job_info x USING j"
				  "   WHERE x.tenant = j.tenant AND x.id = j.id),"
				  " s AS (DELETE FROM silo.job_status x USING j"
				  "   WHERE x.tenant = j.tenant AND x.id = j.id RETURNING x.tenant, x.id)"
				  "SELECT tenant, id FROM s",
				  3, types, values, NULL, false, 0);
		n = (int64) SPI_processed;
		/* a waiter woken by the job's end may not have looked yet */
		for (i = 0; i < SPI_processed; i++)
		{
			bool		isnull;

			silo_wait_job_ended_text(silo_col(i, 1, &isnull), silo_col(i, 2, &isnull));
		}
		total += n;
		if (n < DatumGetInt32(values[1]))
			break;
		CHECK_FOR_INTERRUPTS();
	}
	silo_spi_finish();
	return total;
}
