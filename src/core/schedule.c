/*-------------------------------------------------------------------------
 *
 * schedule.c
 *	  Recurring jobs (docs/api.md, "Recurring jobs"): the rows of
 *	  silo.schedule, one pg_cron job per row, and a firing, which enqueues
 *	  one job whose id names the schedule and the minute.
 *
 * pg_cron does the timing.  Its job for schedule 42 is named
 * "silo-schedule-42" and its command is SILO_SCHEDULE_COMMAND with the
 * number: no user text ever reaches a command that pg_cron runs as the
 * extension owner, a superuser, in a session whose search_path the
 * database owner chooses (docs/security.md, rule 2).  silo.fire_schedule
 * pins its own search_path.  The pg_cron jobs are made by this file's
 * functions only, which run as the extension owner (they are reached
 * through SECURITY DEFINER functions, the broker's included), so that
 * every job has the same username.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_core.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#define SCHEDULE_JOB_PREFIX		"silo-schedule-"
#define SCHEDULE_COMMAND(id)	psprintf("SELECT silo.fire_schedule(" INT64_FORMAT ")", (id))

/*
 * schedule_cron_put: make (or fix) schedule id's pg_cron job, with
 * silo's command, in this database.  SPI is connected.
 */
static void
schedule_cron_put(int64 id, const char *cron)
{
	static SPIPlanPtr drop_plan = NULL;
	static SPIPlanPtr put_plan = NULL;
	static const Oid types[3] = {TEXTOID, TEXTOID, TEXTOID};
	Datum		values[3];

	values[0] = CStringGetTextDatum(psprintf(SCHEDULE_JOB_PREFIX INT64_FORMAT, id));
	values[1] = CStringGetTextDatum(cron);
	values[2] = CStringGetTextDatum(SCHEDULE_COMMAND(id));
	/* a job of that name by another role (a restore) would fire twice */
	silo_exec(&drop_plan,
			  "SELECT cron.unschedule(j.jobid) FROM cron.job j"
			  " WHERE j.jobname = $1 AND j.username <> current_user",
			  1, types, values, NULL, false, 0);
	silo_exec(&put_plan,
			  "SELECT cron.schedule_in_database($1, $2, $3, current_database())",
			  3, types, values, NULL, false, 0);
}

/*
 * schedule_cron_drop: remove every pg_cron job named for schedule id.
 * SPI is connected.
 */
static void
schedule_cron_drop(int64 id)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[1] = {TEXTOID};
	Datum		values[1];

	values[0] = CStringGetTextDatum(psprintf(SCHEDULE_JOB_PREFIX INT64_FORMAT, id));
	silo_exec(&plan,
			  "SELECT cron.unschedule(j.jobid) FROM cron.job j WHERE j.jobname = $1",
			  1, types, values, NULL, false, 0);
}

/*
 * silo_schedule_put: create or replace the schedule (tenant, name) with
 * the job it fires (checked by the caller), and its pg_cron job; returns
 * its id, which a replaced schedule keeps.
 */
int64
silo_schedule_put(const SiloScheduleArgs *a)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[10] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID,
	INT4OID, JSONBOID, JSONBOID, JSONBOID, BOOLOID};
	Datum		values[10];
	char		nulls[10];
	int64		id;

	memset(nulls, ' ', sizeof(nulls));
	values[0] = CStringGetTextDatum(a->tenant);
	values[1] = CStringGetTextDatum(a->name);
	values[2] = CStringGetTextDatum(a->cron);
	values[3] = CStringGetTextDatum(a->task_group);
	values[4] = JsonbPGetDatum(a->payload);
	values[5] = Int32GetDatum(a->priority);
	values[6] = a->retry_policy ? JsonbPGetDatum(a->retry_policy) : (Datum) 0;
	nulls[6] = a->retry_policy ? ' ' : 'n';
	values[7] = JsonbPGetDatum(a->limits);
	values[8] = JsonbPGetDatum(a->metadata);
	values[9] = BoolGetDatum(a->skip_if_live);
	silo_spi_connect();
	silo_exec(&plan,
			  "INSERT INTO silo.schedule AS s (tenant, name, cron, task_group, payload, priority,"
			  "                                retry_policy, limits, metadata, skip_if_live)"
			  " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
			  " ON CONFLICT (tenant, name) DO UPDATE"
			  " SET cron = excluded.cron, task_group = excluded.task_group,"
			  "     payload = excluded.payload, priority = excluded.priority,"
			  "     retry_policy = excluded.retry_policy, limits = excluded.limits,"
			  "     metadata = excluded.metadata, skip_if_live = excluded.skip_if_live,"
			  "     updated_at = now()"
			  " RETURNING s.schedule_id",
			  10, types, values, nulls, false, 1);
	id = silo_col_int64(0, 1);
	schedule_cron_put(id, a->cron);
	silo_spi_finish();
	return id;
}

/*
 * silo_schedule_remove: delete the schedule (tenant, name) and its
 * pg_cron job; false when there was none.  Jobs it enqueued stay.
 */
bool
silo_schedule_remove(const char *tenant, const char *name)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	bool		found;

	values[0] = CStringGetTextDatum(tenant);
	values[1] = CStringGetTextDatum(name);
	silo_spi_connect();
	silo_exec(&plan,
			  "DELETE FROM silo.schedule WHERE tenant = $1 AND name = $2 RETURNING schedule_id",
			  2, types, values, NULL, false, 0);
	found = SPI_processed == 1;
	if (found)
		schedule_cron_drop(silo_col_int64(0, 1));
	silo_spi_finish();
	return found;
}

/*
 * schedule_jsonb: column col of row 0 as a Jsonb that outlives SPI
 * (NULL for SQL NULL).  The value is detoasted (a short header made long)
 * before it is copied out: detoasting after the copy would make its
 * result in SPI's memory, which SPI_finish frees under the caller.
 */
static Jsonb *
schedule_jsonb(int col)
{
	bool		isnull;
	Datum		d = silo_col(0, col, &isnull);

	if (isnull)
		return NULL;
	return (Jsonb *) DatumGetPointer(SPI_datumTransfer(PointerGetDatum(DatumGetJsonbP(d)),
													   false, -1));
}

/*
 * silo_schedule_fire: one firing of schedule id for the minute of `at`:
 * enqueue its job with the id 'cron:<name>:<minute>', unless a job of
 * that id exists (a repeated firing: nothing happens), the previous job
 * is still live and the schedule skips then, the schedule is gone, or
 * (cluster mode) this node does not serve its tenant.  Returns the job's
 * id, or NULL when nothing was enqueued.  The row stays locked to the
 * end of the transaction, so firings of one schedule go one at a time.
 */
char *
silo_schedule_fire(int64 id, TimestampTz at)
{
	static SPIPlanPtr read_plan = NULL;
	static SPIPlanPtr done_plan = NULL;
	static const Oid types[3] = {INT8OID, TIMESTAMPTZOID, TEXTOID};
	Datum		values[3];
	SiloEnqueueArgs args;
	char	   *name;
	char	   *job_id;
	bool		live;
	bool		isnull;
	TimestampTz minute = silo_minute_floor(at);

	values[0] = Int64GetDatum(id);
	silo_spi_connect();
	silo_exec(&read_plan,
			  "SELECT s.tenant, s.name, s.task_group, s.payload, s.priority, s.retry_policy,"
			  "       s.limits, s.metadata,"
			  "       s.skip_if_live AND EXISTS (SELECT 1 FROM silo.job_status j"
			  "                                   WHERE j.tenant = s.tenant"
			  "                                     AND j.id = s.last_job_id"
			  "                                     AND j.status = 'Pending')"
			  "  FROM silo.schedule s WHERE s.schedule_id = $1 FOR UPDATE",
			  1, types, values, NULL, false, 1);
	if (SPI_processed != 1)
	{
		silo_spi_finish();
		return NULL;			/* unscheduled: its pg_cron job goes soon */
	}
	memset(&args, 0, sizeof(args));
	args.tenant = silo_col_text(0, 1);
	name = silo_col_text(0, 2);
	args.task_group = silo_col_text(0, 3);
	args.payload = schedule_jsonb(4);
	args.priority = DatumGetInt32(silo_col(0, 5, &isnull));
	silo_parse_retry_policy(schedule_jsonb(6), &args.retry);
	args.limits = schedule_jsonb(7);
	args.metadata = schedule_jsonb(8);
	live = silo_col_bool(0, 9);
	silo_spi_finish();

	if (live || !silo_cluster_serves_tenant(args.tenant))
		return NULL;
	silo_tenancy_check(args.tenant);
	args.id = psprintf("cron:%s:%s", name, silo_minute_text(minute));
	args.start_at = silo_now_ts();
	args.ignore_conflict = true;
	job_id = silo_enqueue_job(&args);

	values[1] = TimestampTzGetDatum(minute);
	values[2] = CStringGetTextDatum(job_id);
	silo_spi_connect();
	silo_exec(&done_plan,
			  "UPDATE silo.schedule SET last_fired_at = $2, last_job_id = $3"
			  " WHERE schedule_id = $1",
			  3, types, values, NULL, false, 0);
	silo_spi_finish();
	return job_id;
}

/*
 * silo_schedule_sync: make pg_cron's jobs match silo.schedule: remove the
 * jobs named for a schedule that is gone (or made by another role), make
 * the missing ones, fix the ones whose cron, command, database or state
 * differ (a restore brings back cron.job as it was dumped).  Returns how
 * many jobs it removed or made.
 */
int64
silo_schedule_sync(void)
{
	static SPIPlanPtr stale_plan = NULL;
	static SPIPlanPtr missing_plan = NULL;
	int64		changed = 0;
	uint64		n;
	uint64		i;

	silo_spi_connect();
	silo_exec(&stale_plan,
			  "SELECT cron.unschedule(j.jobid) FROM cron.job j"
			  " WHERE j.jobname LIKE '" SCHEDULE_JOB_PREFIX "%'"
			  "   AND NOT EXISTS (SELECT 1 FROM silo.schedule s"
			  "        WHERE j.jobname = '" SCHEDULE_JOB_PREFIX "' || s.schedule_id"
			  "          AND j.username = current_user AND j.schedule = s.cron"
			  "          AND j.command = 'SELECT silo.fire_schedule(' || s.schedule_id || ')'"
			  "          AND j.database = current_database() AND j.active)",
			  0, NULL, NULL, NULL, false, 0);
	changed += SPI_processed;
	silo_exec(&missing_plan,
			  "SELECT s.schedule_id, s.cron FROM silo.schedule s"
			  " WHERE NOT EXISTS (SELECT 1 FROM cron.job j"
			  "        WHERE j.jobname = '" SCHEDULE_JOB_PREFIX "' || s.schedule_id"
			  "          AND j.username = current_user)"
			  " ORDER BY s.schedule_id",
			  0, NULL, NULL, NULL, false, 0);
	n = SPI_processed;
	if (n > 0)
	{
		SPITupleTable *missing = SPI_tuptable;

		for (i = 0; i < n; i++)
		{
			bool		isnull;
			int64		id = DatumGetInt64(SPI_getbinval(missing->vals[i], missing->tupdesc,
														 1, &isnull));
			char	   *cron = SPI_getvalue(missing->vals[i], missing->tupdesc, 2);

			schedule_cron_put(id, cron);
		}
		changed += n;
	}
	silo_spi_finish();
	return changed;
}
