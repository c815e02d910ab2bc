/*-------------------------------------------------------------------------
 *
 * broker.c
 *	  The silo broker background worker, and the maintenance it runs:
 *	  promotion of tasks whose start time has come, the sweep of expired
 *	  leases, and the purge of old terminal jobs (run by pg_cron).
 *
 * The broker serves one database (silo.database).  Each tick it promotes
 * due tasks and notifies their task groups (one transaction), then sweeps
 * expired leases (small transactions of BROKER_SWEEP_BATCH leases);
 * it then sleeps until the next future task is due, at most one second,
 * or until a committing transaction that created a future task sets its
 * latch.  Each expired lease is handled in its own subtransaction, so one
 * bad row is logged and skipped rather than stopping the sweep.
 *
 *-------------------------------------------------------------------------
 */
#include "silo.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/extension.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/json.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

PGDLLEXPORT void silo_broker_main(Datum main_arg);

PG_FUNCTION_INFO_V1(silo_run_maintenance);

static void silo_run_maintenance_round(TimestampTz now, Datum *values);
PG_FUNCTION_INFO_V1(silo_purge_terminal_jobs);
PG_FUNCTION_INFO_V1(silo_now);
PG_FUNCTION_INFO_V1(silo_broker_pid);

#define BROKER_PROMOTE_BATCH	10000
#define BROKER_SWEEP_BATCH		50
#define BROKER_MAX_SLEEP_MS		1000
#define BROKER_MAX_SWEEP_ROUNDS 200
#define BROKER_LOCKED_RETRY_MS	50
#define BROKER_ENSURE_INTERVAL_MS 1000
#define PURGE_BATCH				5000

/*
 * silo_promote_due_tasks: mark tasks whose start time has passed as due,
 * in bounded batches, and notify each task group that got work.  SPI must
 * be connected.  Returns the number promoted.
 */
int64
silo_promote_due_tasks(TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {TIMESTAMPTZOID, INT4OID};
	Datum		values[2];
	int64		total = 0;

	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(BROKER_PROMOTE_BATCH);
	for (;;)
	{
		uint64		i;
		int64		n = 0;

		/* One row per task group that got work, with its count. */
		silo_exec(&plan,
				  "WITH p AS ("
				  " UPDATE silo.task SET due = true WHERE ctid = ANY(ARRAY("
				  "  SELECT ctid FROM silo.task WHERE NOT due AND start_at <= $1"
				  "   ORDER BY start_at LIMIT $2 FOR UPDATE SKIP LOCKED))"
				  " RETURNING task_group)"
				  "SELECT task_group, count(*) FROM p GROUP BY task_group",
				  2, types, values, NULL, false, 0);
		for (i = 0; i < SPI_processed; i++)
		{
			Async_Notify(SILO_NOTIFY_CHANNEL, silo_col_text(i, 1));
			n += silo_col_int64(i, 2);
		}
		total += n;
		if (n < BROKER_PROMOTE_BATCH)
			break;
	}
	return total;
}

/*
 * broker_expired_error_data: the error_data of a WORKER_CRASHED attempt.
 */
static Jsonb *
broker_expired_error_data(SiloLease *lease, TimestampTz now)
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
 * silo_run_isolated: run fn on items 0..n-1, each in a subtransaction of
 * its own, so that one bad item is logged and skipped instead of stopping
 * the broker.  fn returns whether it handled the item; an item it could
 * not handle (or whose row or key another transaction holds: 55P03, retried
 * quietly) stays in place, and *offset grows by their number so the next
 * round looks past them.  Returns the number handled.
 */
int64
silo_run_isolated(int n, SiloItemFn fn, SiloItemDescribeFn describe, void *arg,
				  TimestampTz now, int64 *offset)
{
	volatile int64 done = 0;
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile int i;

	for (i = 0; i < n; i++)
	{
		BeginInternalSubTransaction(NULL);
		MemoryContextSwitchTo(cxt);
		PG_TRY();
		{
			if (fn(i, arg, now))
				done++;
			ReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(cxt);
			CurrentResourceOwner = owner;
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(cxt);
			edata = CopyErrorData();
			FlushErrorState();
			RollbackAndReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(cxt);
			CurrentResourceOwner = owner;

			/* A cancel or shutdown is not a bad row: let it through. */
			if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) == ERRCODE_OPERATOR_INTERVENTION)
				ReThrowError(edata);
			/* A busy row or key is retried next round, quietly; anything else is logged. */
			if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
				ereport(WARNING,
						(errcode(edata->sqlerrcode),
						 errmsg("silo: could not %s: %s", describe(i, arg), edata->message),
						 errdetail("It stays in place and the broker retries it.")));
			FreeErrorData(edata);
		}
		PG_END_TRY();
	}
	*offset += (int64) n - done;
	return done;
}

/*
 * silo_run_listed: one paged pass of the broker: list due items with sql
 * (parameters $1 now, $2 limit, $3 offset; every column is read as text),
 * then run fn on each in isolation (silo_run_isolated).  *more says
 * whether a full page came back.  Returns the number handled.
 */
int64
silo_run_listed(SPIPlanPtr *plan, const char *sql, TimestampTz now, int limit,
				int64 *offset, bool *more, SiloItemFn fn, SiloItemDescribeFn describe)
{
	static const Oid types[3] = {TIMESTAMPTZOID, INT4OID, INT8OID};
	Datum		values[3];
	SiloListed *listed = palloc(sizeof(SiloListed));
	uint64		n;
	uint64		i;
	int			c;

	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(limit);
	values[2] = Int64GetDatum(*offset);
	silo_exec(plan, sql, 3, types, values, NULL, false, 0);
	n = SPI_processed;
	*more = n == (uint64) limit;
	listed->ncols = SPI_tuptable->tupdesc->natts;
	listed->cells = palloc(sizeof(char *) * (n * listed->ncols + 1));
	for (i = 0; i < n; i++)
		for (c = 0; c < listed->ncols; c++)
			SILO_CELL(listed, i, c) = SPI_getvalue(SPI_tuptable->vals[i],
												   SPI_tuptable->tupdesc, c + 1);
	return silo_run_isolated((int) n, fn, describe, listed, now, offset);
}

/*
 * broker_sweep_item / broker_sweep_describe: the sweep's callbacks over
 * an array of task ids.  An expired run lease ends its attempt as
 * WORKER_CRASHED; an expired refresh lease frees the refresh.
 */
static bool
broker_sweep_item(int i, void *arg, TimestampTz now)
{
	SiloLease	lease;
	Datum		task_id = DirectFunctionCall1(uuid_in,
											  CStringGetDatum(SILO_CELL((SiloListed *) arg, i, 0)));

	if (!silo_take_expired_lease(task_id, now, &lease))
		return false;
	if (strcmp(lease.kind, "refresh") == 0)
		silo_floating_refresh_expired(&lease, now);
	else
		silo_finish_attempt(&lease, SILO_OUTCOME_FAILED, NULL, "WORKER_CRASHED",
							broker_expired_error_data(&lease, now), now, true);
	return true;
}

static char *
broker_sweep_describe(int i, void *arg)
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
	static SPIPlanPtr plan = NULL;

	return silo_run_listed(&plan,
						   "SELECT task_id FROM silo.task_lease WHERE expires_at <= $1"
						   " ORDER BY expires_at, task_id OFFSET $3 LIMIT $2",
						   now, limit, offset, more, broker_sweep_item, broker_sweep_describe);
}

static bool
broker_chain_item(int i, void *arg, TimestampTz now)
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
	silo_chain_resume(&job, at, SILO_CHAIN_BROKER, now);
	return true;
}

static char *
broker_chain_describe(int i, void *arg)
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
	static SPIPlanPtr plan = NULL;

	return silo_run_listed(&plan,
						   "SELECT tenant, job_id, attempt FROM silo.chain_task WHERE run_at <= $1"
						   " ORDER BY run_at, priority, start_at, seq OFFSET $3 LIMIT $2",
						   now, limit, offset, more, broker_chain_item, broker_chain_describe);
}

/*
 * broker_next_sleep_ms: how long the broker may sleep: until the earliest
 * future task, chain task or floating-limit check is due, at most
 * BROKER_MAX_SLEEP_MS.  SPI must be connected.
 */
static long
broker_next_sleep_ms(TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	bool		isnull;
	TimestampTz next;
	long		ms;

	silo_exec(&plan,
			  "SELECT least((SELECT min(start_at) FROM silo.task WHERE NOT due),"
			  "             (SELECT min(run_at) FROM silo.chain_task),"
			  "             (SELECT min(marked_at) FROM silo.concurrency_regrant),"
			  "             (SELECT min(refresh_check_at) FROM silo.floating_limit))",
			  0, NULL, NULL, NULL, true, 0);
	next = silo_col_ts(0, 1, &isnull);
	if (isnull)
		return BROKER_MAX_SLEEP_MS;
	/*
	 * A task already overdue after a promotion round is locked by some
	 * transaction (a lease or cancel in flight): back off rather than spin.
	 */
	if (next <= now)
		return BROKER_LOCKED_RETRY_MS;
	ms = (long) ((next - now) / 1000) + 1;
	return Min(ms, BROKER_MAX_SLEEP_MS);
}

/*
 * broker_check_interrupts: between transactions there is no statement to
 * cancel, so a query cancel (pg_cancel_backend) is dropped there rather
 * than ending the broker; termination still works.
 */
static void
broker_check_interrupts(void)
{
	QueryCancelPending = false;
	CHECK_FOR_INTERRUPTS();
}

/*
 * broker_schema_ready: whether the installed extension is the version this
 * library was built for.  After a library upgrade and before ALTER
 * EXTENSION silo UPDATE, the broker waits (logging once) instead of
 * failing every round on tables that do not exist yet.
 */
static bool
broker_schema_ready(void)
{
	static SPIPlanPtr plan = NULL;
	static bool warned = false;
	char	   *version;

	silo_exec(&plan, "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'silo'",
			  0, NULL, NULL, NULL, true, 1);
	if (SPI_processed != 1)
		return false;
	version = silo_col_text(0, 1);
	if (strcmp(version, SILO_EXTENSION_VERSION) == 0)
	{
		warned = false;
		return true;
	}
	if (!warned)
		ereport(LOG,
				(errmsg("silo broker is waiting: extension silo is at version %s, the library at %s",
						version, SILO_EXTENSION_VERSION),
				 errhint("Run ALTER EXTENSION silo UPDATE in database \"%s\".", silo_database)));
	warned = true;
	return false;
}

/*
 * broker_recover: after an error in one of the broker's transactions, log
 * it and abort the transaction, so that the loop carries on.
 */
static void
broker_recover(MemoryContext loopcxt)
{
	MemoryContextSwitchTo(loopcxt);
	EmitErrorReport();
	FlushErrorState();
	AbortCurrentTransaction();
}

/*
 * broker_run_in: run fn in a transaction of its own with SPI connected.
 * An error is logged and the transaction aborted; the broker carries on.
 * fn runs only while silo is installed and, unless any_version, only
 * once its schema is the version of this library.  Returns false when fn
 * failed or did not run.
 */
static bool
broker_run_in(MemoryContext loopcxt, const char *activity, void (*fn) (void *), void *arg,
			  bool any_version)
{
	volatile bool ok = false;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PG_TRY();
	{
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING, activity);
		if (OidIsValid(get_extension_oid("silo", true)))
		{
			silo_spi_connect();
			if (any_version || broker_schema_ready())
			{
				fn(arg);
				ok = true;
			}
			silo_spi_finish();
		}
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		broker_recover(loopcxt);
		ok = false;
	}
	PG_END_TRY();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
	MemoryContextSwitchTo(loopcxt);
	return ok;
}

/*
 * broker_run: broker_run_in for work that needs this library's schema.
 */
static bool
broker_run(MemoryContext loopcxt, const char *activity, void (*fn) (void *), void *arg)
{
	return broker_run_in(loopcxt, activity, fn, arg, false);
}

/*
 * broker_send_wakeups: send the wake-up notifications other transactions
 * deferred (notify.c), in a transaction of its own that needs neither
 * SPI nor silo's schema (so they go out during an upgrade window too).
 * If the commit fails, the wake-ups are pending again.  Returns the ms
 * until the next one is due, or -1.
 */
static long
broker_send_wakeups(MemoryContext loopcxt)
{
	/* static: both are read after a longjmp */
	static char sent[SILO_NOTIFY_ENTRIES][SILO_NOTIFY_NAME_BYTES];
	static int	nsent;
	volatile long next_ms = -1;

	if (!silo_notify_any_pending())
		return -1;
	nsent = 0;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PG_TRY();
	{
		pgstat_report_activity(STATE_RUNNING, "silo broker: deferred wake-ups");
		next_ms = silo_notify_send_deferred(sent, &nsent);
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		broker_recover(loopcxt);
		silo_notify_requeue(sent, nsent);
		next_ms = BROKER_MAX_SLEEP_MS;
	}
	PG_END_TRY();
	pgstat_report_activity(STATE_IDLE, NULL);
	MemoryContextSwitchTo(loopcxt);
	return next_ms;
}

/* What one sweep round reports back to broker_tick. */
typedef struct BrokerSweepRound
{
	int64		offset;			/* leases skipped so far this tick */
	bool		more;
} BrokerSweepRound;

/*
 * broker_promote_step / broker_sweep_step / broker_sleep_step: the units
 * broker_tick runs, each in its own transaction.
 */
static void
broker_promote_step(void *arg)
{
	silo_promote_due_tasks(silo_now_ts());
}

static void
broker_sweep_step(void *arg)
{
	BrokerSweepRound *round = (BrokerSweepRound *) arg;

	(void) silo_sweep_expired_leases(silo_now_ts(), BROKER_SWEEP_BATCH, &round->offset,
									 &round->more);
}

static void
broker_chain_step(void *arg)
{
	BrokerSweepRound *round = (BrokerSweepRound *) arg;

	(void) silo_run_chain_tasks(silo_now_ts(), BROKER_SWEEP_BATCH, &round->offset, &round->more);
}

static void
broker_regrant_step(void *arg)
{
	BrokerSweepRound *round = (BrokerSweepRound *) arg;

	(void) silo_run_regrants(silo_now_ts(), BROKER_SWEEP_BATCH, &round->offset, &round->more);
}

static void
broker_floating_step(void *arg)
{
	BrokerSweepRound *round = (BrokerSweepRound *) arg;

	(void) silo_check_floating_limits(silo_now_ts(), BROKER_SWEEP_BATCH, &round->offset,
									  &round->more);
}

static void
broker_refresh_hint_step(void *arg)
{
	*(bool *) arg = silo_floating_any_ready();
}

static void
broker_buckets_step(void *arg)
{
	(void) silo_purge_idle_buckets(silo_now_ts());
}

static void
broker_sleep_step(void *arg)
{
	*(long *) arg = broker_next_sleep_ms(silo_now_ts());
}

/*
 * broker_rounds: run a paged step (chain tasks, sweep, floating checks)
 * in small transactions until it has looked at everything due, at most
 * BROKER_MAX_SWEEP_ROUNDS rounds.  Small transactions keep each under the
 * 64 subtransactions a backend caches.
 */
static void
broker_rounds(MemoryContext loopcxt, const char *activity, void (*step) (void *))
{
	BrokerSweepRound round;
	int			rounds = 0;

	round.offset = 0;
	do
	{
		round.more = false;
		if (!broker_run(loopcxt, activity, step, &round))
			break;
		broker_check_interrupts();
		/* a long round must not hold back deferred wake-ups */
		(void) broker_send_wakeups(loopcxt);
	} while (round.more && ++rounds < BROKER_MAX_SWEEP_ROUNDS);
}

/*
 * broker_tick: promote due tasks (committed at once, so workers see them
 * while the sweep runs), then sweep expired leases in small transactions
 * until every expired lease has been looked at (at most
 * BROKER_MAX_SWEEP_ROUNDS rounds).  Small transactions keep each
 * under the 64 subtransactions a backend caches.  Returns the time to
 * sleep.
 */
static long
broker_tick(MemoryContext loopcxt)
{
	long		sleep_ms = BROKER_MAX_SLEEP_MS;
	bool		any_ready = true;

	/* A failed promotion must not stop the sweep. */
	(void) broker_run(loopcxt, "silo broker: promote", broker_promote_step, NULL);
	broker_rounds(loopcxt, "silo broker: limits", broker_chain_step);
	broker_rounds(loopcxt, "silo broker: regrants", broker_regrant_step);
	broker_rounds(loopcxt, "silo broker: sweep", broker_sweep_step);
	broker_rounds(loopcxt, "silo broker: floating limits", broker_floating_step);
	if (broker_run(loopcxt, "silo broker: refresh hint", broker_refresh_hint_step, &any_ready))
		silo_set_refresh_hint(any_ready);
	(void) broker_run(loopcxt, "silo broker: plan", broker_sleep_step, &sleep_ms);
	return sleep_ms;
}

/*
 * broker_ensure_purge_job: make sure pg_cron runs the retention purge in
 * this database, with silo's command.  The install script cannot schedule
 * it: pg_dump keeps pg_cron's job table, so a restore would then collide
 * with the restored row.  Instead the broker schedules it once silo holds
 * jobs -- during a (single-job) pg_restore the cron.job data is loaded
 * before silo's, so the restored row is found.  A restored row may still
 * name the database it was dumped from, or carry the command of an older
 * version, which resolved names through the database's search_path as a
 * superuser: both are put right.  Runs on every schema version, so that
 * the command is fixed as soon as this library runs.  silo.retention = 0
 * means no purge is needed.
 */
static void
broker_ensure_purge_job(void *arg)
{
	static SPIPlanPtr check_plan = NULL;
	static SPIPlanPtr schedule_plan = NULL;
	static SPIPlanPtr alter_plan = NULL;
	static const Oid types[2] = {INT8OID, TEXTOID};
	Datum		values[2];
	bool		isnull;

	if (silo_retention_s == 0)
		return;
	values[1] = CStringGetTextDatum(SILO_PURGE_COMMAND);
	silo_exec(&check_plan,
			  "SELECT to_regprocedure('cron.schedule(text,text,text)') IS NOT NULL"
			  "       AND EXISTS (SELECT 1 FROM silo.job_status),"
			  "       j.jobid, j.database = current_database() AND j.command = $1"
			  "  FROM (SELECT 1) one LEFT JOIN cron.job j"
			  "    ON j.jobname = '" SILO_PURGE_JOB_NAME "' AND j.username = current_user",
			  1, &types[1], &values[1], NULL, true, 0);
	if (SPI_processed != 1 || !silo_col_bool(0, 1))
		return;
	values[0] = silo_col(0, 2, &isnull);
	if (isnull)
	{
		silo_exec(&schedule_plan,
				  "SELECT cron.schedule('" SILO_PURGE_JOB_NAME "', '* * * * *', $1)",
				  1, &types[1], &values[1], NULL, false, 0);
		ereport(LOG,
				(errmsg("silo broker scheduled the pg_cron job \"%s\"", SILO_PURGE_JOB_NAME)));
	}
	else if (!silo_col_bool(0, 3))
	{
		silo_exec(&alter_plan,
				  "SELECT cron.alter_job($1, command => $2, database => current_database())",
				  2, types, values, NULL, false, 0);
		ereport(LOG,
				(errmsg("silo broker rewrote the pg_cron job \"%s\" to run silo's purge in this database",
						SILO_PURGE_JOB_NAME)));
	}
}

/*
 * silo_broker_main: entry point of the broker background worker.
 */
void
silo_broker_main(Datum main_arg)
{
	MemoryContext loopcxt;
	TimestampTz last_ensure = 0;
	TimestampTz next_tick = 0;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	BackgroundWorkerInitializeConnection(silo_database, NULL, 0);
	pgstat_report_appname("silo broker");

	/*
	 * ALTER DATABASE/ROLE ... SET applies to the broker too; the sweep's
	 * correctness needs READ COMMITTED and writable transactions, and no
	 * timeout may abort its rounds.
	 */
	SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_read_only", "off", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("lock_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("idle_in_transaction_session_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);

	/*
	 * The broker is a superuser, and a database owner who is not one may
	 * set the database's search_path to a schema of theirs holding a
	 * function or operator named like one of pg_catalog's: every name the
	 * broker's statements (and pg_cron's functions they call) resolve must
	 * come from pg_catalog or be schema-qualified (docs/security.md).
	 * pg_temp last: the broker makes no temporary objects, and nobody
	 * else can make them in its session.
	 */
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);

	/*
	 * ALTER DATABASE ... SET role, which the owner may also do, would make
	 * the broker act as that role: it acts as itself.
	 */
	SetConfigOption("role", "none", PGC_SUSET, PGC_S_OVERRIDE);

	/*
	 * The broker's statements are built around indexes, and the plans it
	 * caches must not turn into sequential scans because a queue table was
	 * empty when they were made (the SQL API functions carry the same
	 * settings; docs/performance.md).  A disabled scan that has no
	 * alternative costs 1e10, which would make every such statement
	 * JIT-compiled: short queue statements never gain from JIT.
	 */
	SetConfigOption("enable_seqscan", "off", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("jit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	silo_shmem_set_broker(true);
	silo_limits_set_broker();
	ereport(LOG,
			(errmsg("silo broker started for database \"%s\"", silo_database)));

	loopcxt = AllocSetContextCreate(TopMemoryContext, "silo broker loop",
									ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		long		sleep_ms;
		TimestampTz now;

		broker_check_interrupts();
		if (ConfigReloadPending)
		{
			bool		was_paused = silo_broker_paused;

			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			next_tick = 0;		/* silo.broker_paused may have changed */
			if (was_paused != silo_broker_paused)
				ereport(LOG,
						(errmsg("silo broker %s", silo_broker_paused ? "paused" : "resumed")));
		}

		/*
		 * A round runs when it is due or was asked for; a latch set only
		 * for deferred wake-ups (below) does not cost a round.
		 */
		MemoryContextSwitchTo(loopcxt);
		(void) broker_send_wakeups(loopcxt);
		if (silo_broker_take_tick_request() || GetCurrentTimestamp() >= next_tick)
		{
			long		tick_ms = BROKER_MAX_SLEEP_MS;

			if (!silo_broker_paused)
				tick_ms = broker_tick(loopcxt);
			next_tick = GetCurrentTimestamp() + (TimestampTz) tick_ms * 1000;
		}
		if (GetCurrentTimestamp() - last_ensure >= BROKER_ENSURE_INTERVAL_MS * 1000)
		{
			(void) broker_run_in(loopcxt, "silo broker: check purge job",
								 broker_ensure_purge_job, NULL, true);
			/* paused means no maintenance at all (tests rely on it) */
			if (!silo_broker_paused)
				(void) broker_run(loopcxt, "silo broker: idle rate-limit buckets",
								  broker_buckets_step, NULL);
			last_ensure = GetCurrentTimestamp();
		}

		/* Trailing wake-ups of coalesced notifications, paused or not. */
		now = GetCurrentTimestamp();
		sleep_ms = next_tick > now ? (long) ((next_tick - now + 999) / 1000) : 0;
		{
			long		next_ms = broker_send_wakeups(loopcxt);

			if (next_ms >= 0 && next_ms < sleep_ms)
				sleep_ms = next_ms;
		}
		MemoryContextReset(loopcxt);

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/*
 * silo_run_maintenance: SQL entry point silo.run_maintenance(): one round
 * of the broker's work -- promotion, limit chains, the lease sweep and
 * floating-limit refresh checks -- for tests and for operators whose
 * broker is paused.  promoted counts due tasks and walked chain tasks.
 */
Datum
silo_run_maintenance(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[2];
	bool		nulls[2] = {false, false};
	TimestampTz now = silo_now_ts();
	bool		save_nowait;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "silo: run_maintenance must return a record");
	silo_require_read_committed("silo.run_maintenance");
	/* Like the broker, never wait for a key another transaction holds. */
	save_nowait = silo_limits_nowait;
	silo_limits_nowait = true;
	PG_TRY();
	{
		silo_run_maintenance_round(now, values);
	}
	PG_CATCH();
	{
		/* Caught by a savepoint, the session must not stay in no-wait mode. */
		silo_limits_nowait = save_nowait;
		PG_RE_THROW();
	}
	PG_END_TRY();
	silo_limits_nowait = save_nowait;
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}

/*
 * silo_run_maintenance_round: run_maintenance's work: values[0] gets the
 * tasks promoted and chain tasks walked, values[1] the leases swept.
 */
static void
silo_run_maintenance_round(TimestampTz now, Datum *values)
{
	silo_spi_connect();
	{
		int64		promoted = silo_promote_due_tasks(now);
		int64		swept = 0;
		int64		offset = 0;
		bool		more;

		do
		{
			promoted += silo_run_chain_tasks(now, 1000, &offset, &more);
			CHECK_FOR_INTERRUPTS();
		} while (more);
		offset = 0;
		do
		{
			(void) silo_run_regrants(now, 1000, &offset, &more);
			CHECK_FOR_INTERRUPTS();
		} while (more);
		offset = 0;
		do
		{
			swept += silo_sweep_expired_leases(now, 1000, &offset, &more);
			CHECK_FOR_INTERRUPTS();
		} while (more);
		offset = 0;
		do
		{
			(void) silo_check_floating_limits(now, 1000, &offset, &more);
			CHECK_FOR_INTERRUPTS();
		} while (more);
		(void) silo_purge_idle_buckets(now);
		values[0] = Int64GetDatum(promoted);
		values[1] = Int64GetDatum(swept);
	}
	silo_spi_finish();
}

/*
 * silo_purge_terminal_jobs: SQL entry point silo.purge_terminal_jobs(max):
 * delete terminal jobs older than silo.retention, with their attempts,
 * metadata and flags, in batches; at most max_jobs per call.  pg_cron runs
 * it every minute.
 */
Datum
silo_purge_terminal_jobs(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {TIMESTAMPTZOID, INT4OID};
	Datum		values[2];
	int32		max_jobs;
	int64		total = 0;

	silo_require_arg(fcinfo, 0, "max_jobs");
	max_jobs = PG_GETARG_INT32(0);
	silo_check_range("max_jobs", max_jobs, 1, INT32_MAX);
	if (silo_retention_s == 0)
		PG_RETURN_INT64(0);

	values[0] = TimestampTzGetDatum(silo_now_ts() - (TimestampTz) silo_retention_s * USECS_PER_SEC);
	silo_spi_connect();
	while (total < max_jobs)
	{
		int64		n;

		values[1] = Int32GetDatum((int32) Min(PURGE_BATCH, max_jobs - total));
		silo_exec(&plan,
				  "WITH j AS ("
				  "  SELECT tenant, id, status, changed_at FROM silo.job_status"
				  "   WHERE status <> 'Pending' AND changed_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED),"
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
				  "   WHERE x.tenant = j.tenant AND x.id = j.id RETURNING 1)"
				  "SELECT count(*) FROM s",
				  2, types, values, NULL, false, 0);
		n = silo_col_int64(0, 1);
		total += n;
		if (n < DatumGetInt32(values[1]))
			break;
		CHECK_FOR_INTERRUPTS();
	}
	silo_spi_finish();
	PG_RETURN_INT64(total);
}

/*
 * silo_now: SQL entry point silo.now(): silo's clock (wall clock plus the
 * silo.clock_offset_ms test offset).
 */
Datum
silo_now(PG_FUNCTION_ARGS)
{
	PG_RETURN_TIMESTAMPTZ(silo_now_ts());
}

/*
 * silo_broker_pid: SQL entry point silo.broker_pid(): the running broker's
 * pid, or NULL when none runs (not preloaded, or restarting).
 */
Datum
silo_broker_pid(PG_FUNCTION_ARGS)
{
	int			pid = silo_shmem_broker_pid();

	if (pid == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT32(pid);
}
