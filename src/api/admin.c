/*-------------------------------------------------------------------------
 *
 * admin.c
 *	  SQL entry points for operators and tests: silo.run_maintenance,
 *	  silo.purge_terminal_jobs, silo.reset_floating_limit, silo.now and
 *	  silo.broker_pid.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_api.h"

#include "access/htup_details.h"
#include "silo_ipc.h"

PG_FUNCTION_INFO_V1(silo_run_maintenance);
PG_FUNCTION_INFO_V1(silo_purge_terminal_jobs);
PG_FUNCTION_INFO_V1(silo_reset_floating_limit);
PG_FUNCTION_INFO_V1(silo_now);
PG_FUNCTION_INFO_V1(silo_broker_pid);

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
	int64		promoted = 0;
	int64		swept = 0;
	bool		save_nowait;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "silo: run_maintenance must return a record");
	silo_api_begin("silo.run_maintenance", SILO_API_READ_COMMITTED | SILO_API_WRITES);
	/* Like the broker, never wait for a key another transaction holds. */
	save_nowait = silo_limits_nowait;
	silo_limits_nowait = true;
	PG_TRY();
	{
		silo_maintenance_round(now, &promoted, &swept);
	}
	PG_CATCH();
	{
		/* Caught by a savepoint, the session must not stay in no-wait mode. */
		silo_limits_nowait = save_nowait;
		PG_RE_THROW();
	}
	PG_END_TRY();
	silo_limits_nowait = save_nowait;
	values[0] = Int64GetDatum(promoted);
	values[1] = Int64GetDatum(swept);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
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
	int32		max_jobs;

	silo_require_arg(fcinfo, 0, "max_jobs");
	max_jobs = PG_GETARG_INT32(0);
	silo_check_range("max_jobs", max_jobs, 1, INT32_MAX);
	if (silo_retention_s == 0)
		PG_RETURN_INT64(0);
	silo_api_begin("silo.purge_terminal_jobs", SILO_API_WRITES);
	PG_RETURN_INT64(silo_purge_jobs(max_jobs, silo_now_ts() -
									(TimestampTz) silo_retention_s * USECS_PER_SEC));
}

/*
 * silo_reset_floating_limit: SQL entry point silo.reset_floating_limit(
 * tenant, key): forget a key's state and any scheduled refresh
 * (limits/floating.c).  Returns whether there was state.
 */
Datum
silo_reset_floating_limit(PG_FUNCTION_ARGS)
{
	char	   *tenant = silo_text_arg(fcinfo, 0, "tenant", 1, SILO_MAX_TENANT_LEN);
	char	   *key = silo_text_arg(fcinfo, 1, "key", 1, SILO_MAX_LIMIT_KEY_LEN);
	bool		found;

	silo_api_begin("silo.reset_floating_limit", SILO_API_READ_COMMITTED | SILO_API_WRITES);
	silo_api_tenant(tenant);
	silo_spi_connect();
	found = silo_floating_reset(tenant, key, silo_now_ts());
	silo_spi_finish();
	PG_RETURN_BOOL(found);
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
