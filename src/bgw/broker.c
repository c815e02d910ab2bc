/*-------------------------------------------------------------------------
 *
 * broker.c
 *	  The silo broker background worker: its main loop, the transactions
 *	  it runs core/'s and limits/' passes in, the deferred wake-ups, and
 *	  the pg_cron job of the retention purge.
 *
 * The broker serves one database (silo.database).  Each tick it promotes
 * due tasks and notifies their task groups (one transaction), then walks
 * parked limit chains, regrants, sweeps expired leases and checks
 * floating limits (small transactions of BROKER_SWEEP_BATCH items); it
 * then sleeps until the next future task is due, at most one second, or
 * until a committing transaction that created a future task sets its
 * latch.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_bgw.h"

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

#define BROKER_SWEEP_BATCH		50
#define BROKER_MAX_SLEEP_MS		1000
#define BROKER_MAX_SWEEP_ROUNDS 200
#define BROKER_LOCKED_RETRY_MS	50
#define BROKER_ENSURE_INTERVAL_MS 1000
/* how often pg_cron's jobs of recurring schedules are checked */
#define BROKER_SCHEDULES_INTERVAL_MS 10000

/* GUCs silo.database and silo.broker_paused (registered by module.c) */
char	   *silo_database = NULL;
bool		silo_broker_paused = false;

/*
 * broker_next_sleep_ms: how long the broker may sleep: until the earliest
 * future task, chain task or floating-limit check is due, at most
 * BROKER_MAX_SLEEP_MS.  SPI must be connected.
 */
static long
broker_next_sleep_ms(TimestampTz now)
{
	TimestampTz next;
	long		ms;

	if (!silo_next_due_at(&next))
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
	static bool warned = false;

	if (silo_schema_current())
	{
		warned = false;
		return true;
	}
	if (!warned)
		ereport(LOG,
				(errmsg("silo broker is waiting: extension silo is at version %s, the library at %s",
						silo_schema()->version, SILO_EXTENSION_VERSION),
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
 * broker_sync_schedules: make pg_cron's jobs of recurring schedules match
 * silo.schedule (missing after a restore into another cluster, a stale
 * command or database, a schedule that is gone).  Through the SQL
 * function, so that the jobs are made as the extension owner, as
 * silo.schedule makes them, and never twice under two usernames.
 */
static void
broker_sync_schedules(void *arg)
{
	static SPIPlanPtr plan = NULL;
	int64		changed;

	silo_exec(&plan,
			  "SELECT silo.sync_schedules()"
			  " WHERE to_regprocedure('cron.schedule_in_database(text,text,text,text,text,boolean)')"
			  "       IS NOT NULL",
			  0, NULL, NULL, NULL, false, 0);
	if (SPI_processed != 1)
		return;
	changed = silo_col_int64(0, 1);
	if (changed > 0)
		ereport(LOG,
				(errmsg("silo broker made or removed %lld pg_cron jobs of recurring schedules",
						(long long) changed)));
}

/*
 * silo_broker_main: entry point of the broker background worker.
 */
void
silo_broker_main(Datum main_arg)
{
	MemoryContext loopcxt;
	TimestampTz last_ensure = 0;
	TimestampTz last_schedules = 0;
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
		if (!silo_broker_paused &&
			GetCurrentTimestamp() - last_schedules >= BROKER_SCHEDULES_INTERVAL_MS * 1000)
		{
			(void) broker_run(loopcxt, "silo broker: schedules", broker_sync_schedules, NULL);
			last_schedules = GetCurrentTimestamp();
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

