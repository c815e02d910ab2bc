/*-------------------------------------------------------------------------
 *
 * schedule.c
 *	  SQL entry points of recurring jobs: silo.schedule, silo.unschedule,
 *	  silo.fire_schedule (what pg_cron runs), silo.sync_schedules and
 *	  silo.cron_next (the view's next firing).  docs/api.md, "Recurring
 *	  jobs".
 *
 *-------------------------------------------------------------------------
 */
#include "silo_api.h"

#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(silo_schedule);
PG_FUNCTION_INFO_V1(silo_unschedule);
PG_FUNCTION_INFO_V1(silo_fire_schedule);
PG_FUNCTION_INFO_V1(silo_sync_schedules);
PG_FUNCTION_INFO_V1(silo_cron_next_sql);

/*
 * schedule_name_arg: the schedule's name, argument 0 of both entry points:
 * short enough that 'cron:<name>:<minute>' is a job id.
 */
static char *
schedule_name_arg(FunctionCallInfo fcinfo)
{
	char	   *name = silo_text_arg(fcinfo, 0, "name", 1, SILO_MAX_SCHEDULE_NAME_LEN);

	silo_check_name("name", name);
	return name;
}

/*
 * schedule_refuse_cluster: cluster mode has no recurring jobs yet: a
 * schedule's rows would not move with its tenant's shard.
 */
static void
schedule_refuse_cluster(void)
{
	if (silo_cluster_mode())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("recurring jobs are not supported in cluster mode"),
				 errdetail("silo.etcd_endpoints is set: schedules do not move with their tenant's shard."),
				 errhint("Schedule the enqueues from your application, or with pg_cron on each node.")));
}

/*
 * silo_schedule: SQL entry point silo.schedule(name, cron, task_group,
 * payload, tenant, priority, retry_policy, limits, metadata, skip_if_live):
 * create the schedule (tenant, name), or replace what it fires and when;
 * returns its id.
 */
Datum
silo_schedule(PG_FUNCTION_ARGS)
{
	SiloScheduleArgs a;
	SiloEnqueueArgs job;
	SiloCron	cron;

	memset(&a, 0, sizeof(a));
	a.name = schedule_name_arg(fcinfo);
	a.cron = silo_text_arg(fcinfo, 1, "cron", 1, SILO_MAX_CRON_LEN);
	silo_cron_parse(a.cron, &cron);
	a.task_group = silo_text_arg(fcinfo, 2, "task_group", 1, SILO_MAX_GROUP_LEN);
	silo_require_arg(fcinfo, 3, "payload");
	a.payload = PG_GETARG_JSONB_P(3);
	a.tenant = silo_text_arg(fcinfo, 4, "tenant", 1, SILO_MAX_TENANT_LEN);
	silo_require_arg(fcinfo, 5, "priority");
	a.priority = PG_GETARG_INT32(5);
	a.retry_policy = PG_ARGISNULL(6) ? NULL : PG_GETARG_JSONB_P(6);
	silo_require_arg(fcinfo, 7, "limits");
	a.limits = PG_GETARG_JSONB_P(7);
	silo_require_arg(fcinfo, 8, "metadata");
	a.metadata = PG_GETARG_JSONB_P(8);
	silo_require_arg(fcinfo, 9, "skip_if_live");
	a.skip_if_live = PG_GETARG_BOOL(9);

	/* the job it fires must be one enqueue takes */
	memset(&job, 0, sizeof(job));
	job.task_group = a.task_group;
	job.payload = a.payload;
	job.tenant = a.tenant;
	job.priority = a.priority;
	job.start_at = 0;
	silo_parse_retry_policy(a.retry_policy, &job.retry);
	job.limits = a.limits;
	job.metadata = a.metadata;
	silo_enqueue_check(&job);
	a.limits = job.limits;

	schedule_refuse_cluster();
	silo_api_begin("silo.schedule", SILO_API_WRITES);
	silo_api_tenant(a.tenant);
	PG_RETURN_INT64(silo_schedule_put(&a));
}

/*
 * silo_unschedule: SQL entry point silo.unschedule(name, tenant): remove
 * the schedule and its pg_cron job; false when there was none.
 */
Datum
silo_unschedule(PG_FUNCTION_ARGS)
{
	char	   *name = schedule_name_arg(fcinfo);
	char	   *tenant = silo_text_arg(fcinfo, 1, "tenant", 1, SILO_MAX_TENANT_LEN);

	silo_api_begin("silo.unschedule", SILO_API_WRITES);
	silo_tenancy_check(tenant);
	PG_RETURN_BOOL(silo_schedule_remove(tenant, name));
}

/*
 * silo_fire_schedule: SQL entry point silo.fire_schedule(schedule_id,
 * scheduled_at): one firing, for the minute of scheduled_at (NULL: now).
 * pg_cron's command passes only the id.  Returns the job's id, or NULL
 * when it enqueued nothing.
 */
Datum
silo_fire_schedule(PG_FUNCTION_ARGS)
{
	int64		id;
	TimestampTz at;
	char	   *job_id;

	silo_require_arg(fcinfo, 0, "schedule_id");
	id = PG_GETARG_INT64(0);
	at = PG_ARGISNULL(1) ? silo_now_ts() : PG_GETARG_TIMESTAMPTZ(1);
	if (TIMESTAMP_NOT_FINITE(at))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("scheduled_at must be a finite timestamp")));
	silo_api_begin("silo.fire_schedule", SILO_API_WRITES);
	job_id = silo_schedule_fire(id, at);
	if (job_id == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(job_id));
}

/*
 * silo_sync_schedules: SQL entry point silo.sync_schedules(): make
 * pg_cron's jobs match silo.schedule (the broker calls it too); returns
 * how many pg_cron jobs it removed or made.
 */
Datum
silo_sync_schedules(PG_FUNCTION_ARGS)
{
	silo_api_begin("silo.sync_schedules", SILO_API_WRITES);
	PG_RETURN_INT64(silo_schedule_sync());
}

/*
 * silo_cron_next_sql: SQL function silo.cron_next(cron, after): the first
 * minute after `after` that cron matches (GMT), NULL when none comes
 * within 10 years.  Strict.
 */
Datum
silo_cron_next_sql(PG_FUNCTION_ARGS)
{
	SiloCron	cron;
	TimestampTz next;
	TimestampTz after = PG_GETARG_TIMESTAMPTZ(1);

	silo_cron_parse(text_to_cstring(PG_GETARG_TEXT_PP(0)), &cron);
	if (TIMESTAMP_NOT_FINITE(after) || !silo_cron_next(&cron, after, &next))
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(next);
}
