/*-------------------------------------------------------------------------
 *
 * jobs.c
 *	  SQL entry points on a whole job: silo.cancel, silo.restart,
 *	  silo.expedite, silo.delete_job and silo.job_result
 *	  (core/jobops.c).
 *
 *-------------------------------------------------------------------------
 */
#include "silo_api.h"

#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(silo_cancel);
PG_FUNCTION_INFO_V1(silo_restart);
PG_FUNCTION_INFO_V1(silo_expedite);
PG_FUNCTION_INFO_V1(silo_delete_job);
PG_FUNCTION_INFO_V1(silo_job_result);

/*
 * job_args: the job_id and tenant arguments (0 and 1) every job operation
 * takes, checked, then the prologue of fn.
 */
static void
job_args(FunctionCallInfo fcinfo, const char *fn, int flags, char **tenant, char **id)
{
	*id = silo_text_arg(fcinfo, 0, "job_id", 1, SILO_MAX_ID_LEN);
	*tenant = silo_text_arg(fcinfo, 1, "tenant", 1, SILO_MAX_TENANT_LEN);
	silo_api_begin(fn, flags);
	silo_api_tenant(*tenant);
}

/*
 * silo_cancel: SQL entry point silo.cancel(job_id, tenant).
 */
Datum
silo_cancel(PG_FUNCTION_ARGS)
{
	char	   *tenant;
	char	   *id;

	job_args(fcinfo, "silo.cancel", SILO_API_WRITES, &tenant, &id);
	silo_job_cancel(tenant, id, "silo.cancel");
	PG_RETURN_VOID();
}

/*
 * silo_restart: SQL entry point silo.restart(job_id, tenant).
 */
Datum
silo_restart(PG_FUNCTION_ARGS)
{
	char	   *tenant;
	char	   *id;

	job_args(fcinfo, "silo.restart", SILO_API_WRITES, &tenant, &id);
	silo_job_restart(tenant, id, "silo.restart");
	PG_RETURN_VOID();
}

/*
 * silo_expedite: SQL entry point silo.expedite(job_id, tenant).
 */
Datum
silo_expedite(PG_FUNCTION_ARGS)
{
	char	   *tenant;
	char	   *id;

	job_args(fcinfo, "silo.expedite", SILO_API_WRITES, &tenant, &id);
	silo_job_expedite(tenant, id, "silo.expedite");
	PG_RETURN_VOID();
}

/*
 * silo_delete_job: SQL entry point silo.delete_job(job_id, tenant).
 * Returns false when there is no such job.
 */
Datum
silo_delete_job(PG_FUNCTION_ARGS)
{
	char	   *tenant;
	char	   *id;

	job_args(fcinfo, "silo.delete_job", SILO_API_WRITES, &tenant, &id);
	PG_RETURN_BOOL(silo_job_delete(tenant, id));
}

/*
 * silo_job_result: SQL entry point silo.job_result(job_id, tenant).  The
 * outcome of a terminal job; it writes nothing.
 */
Datum
silo_job_result(PG_FUNCTION_ARGS)
{
	char	   *tenant;
	char	   *id;

	job_args(fcinfo, "silo.job_result", 0, &tenant, &id);
	InitMaterializedSRF(fcinfo, 0);
	silo_job_read_result((ReturnSetInfo *) fcinfo->resultinfo, tenant, id);
	return (Datum) 0;
}
