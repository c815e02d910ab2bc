/*-------------------------------------------------------------------------
 *
 * silo_core.h
 *	  Job state changes: enqueue, lease, heartbeat, the end of an attempt
 *	  (alone, in a batch, by the sweep), operations on a whole job, the
 *	  wait for a job's end, the broker's maintenance passes and the lease
 *	  marks.  Called by api/,
 *	  bgw/ and module/; calls limits/, ipc/, storage/ and util/
 *	  (src/README.md has the layers).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_CORE_H
#define SILO_CORE_H

#include "silo_cluster.h"
#include "silo_limits.h"
#include "silo_tenancy.h"

#include "funcapi.h"
#include "portability/instr_time.h"

/* leasemark.c: a position in task_ready order (priority, start_at, seq) */
typedef struct SiloMarkKey
{
	int16		priority;
	int64		start_at;
	int64		seq;
} SiloMarkKey;

extern const SiloMarkKey silo_mark_lowest;
extern const SiloMarkKey silo_mark_highest;
extern int	silo_mark_cmp(const SiloMarkKey *a, const SiloMarkKey *b);
extern void silo_mark_shmem_request(void);
extern void silo_mark_shmem_startup(void);
extern void silo_mark_init(void);
extern bool silo_mark_enabled(Relation task_rel);
extern void silo_mark_forget_database(void);
extern void silo_mark_begin(const char *task_group, const char *tenant, Oid task_relid,
							SiloMarkKey *start,
							uint64 *gen);
extern void silo_mark_raise(const char *task_group, const char *tenant, uint64 gen,
							const SiloMarkKey *key);
extern void silo_mark_owe(const char *task_group, const char *tenant, const SiloMarkKey *key,
						  bool at_commit);
extern void silo_mark_task_appeared(const SiloTaskRow *task);
extern void silo_mark_xact_end(bool commit);
extern void silo_mark_subxact_abort(void);
extern void silo_mark_pre_prepare(void);
extern char *silo_mark_cursor_get(const char *task_group);
extern void silo_mark_cursor_set(const char *task_group, const char *tenant);

/* groups.c: task group settings */
extern bool silo_group_fair(const char *task_group);
extern void silo_group_settings_changed(Oid relid);
extern void silo_groups_init(void);
extern char *silo_group_configure(const char *task_group, const char *fairness);

/* enqueue.c */
typedef struct SiloEnqueueArgs
{
	char	   *task_group;
	Jsonb	   *payload;
	char	   *tenant;
	char	   *id;				/* NULL: generate a UUID */
	int32		priority;
	TimestampTz start_at;
	SiloRetryPolicy retry;
	Jsonb	   *limits;			/* normalized by enqueue_validate */
	Jsonb	   *metadata;
	bool		ignore_conflict;
	int			nlimits;		/* set by enqueue_validate */
	SiloLimit  *parsed_limits;
	List	  **chains;			/* if set, limit walks are appended here for
								 * the caller to start, not started */
} SiloEnqueueArgs;

extern char *silo_enqueue_job(SiloEnqueueArgs *args);
extern void silo_enqueue_check(SiloEnqueueArgs *args);
extern void silo_enqueue_start_chains(List *chains);

/* import.c, reimport.c: jobs with their history (silo.import_jobs) */

/* the most attempts one imported job may bring */
#define SILO_MAX_IMPORT_ATTEMPTS	1000

typedef struct SiloImportAttempt
{
	const char *status;			/* Succeeded, Failed or Cancelled */
	bool		has_started;	/* started_at was given */
	TimestampTz started_at;
	TimestampTz finished_at;
	char	   *worker_id;		/* NULL: "import" (when it started) */
	Jsonb	   *result;			/* Succeeded only; NULL: none */
	char	   *error_code;		/* Failed only, required there */
	Jsonb	   *error_data;		/* Failed only; NULL: none */
} SiloImportAttempt;

typedef struct SiloImportJob
{
	SiloEnqueueArgs job;		/* enqueue's fields; id required */
	bool		has_enqueued_at;
	TimestampTz enqueued_at;
	int			nattempts;
	SiloImportAttempt *attempts;
	/* the job's result, set by silo_import_batch */
	bool		success;
	const char *status;			/* as silo.jobs names it; NULL on failure */
	char	   *error;			/* on failure */
	const char *sqlstate;
} SiloImportJob;

/* What a job's imported history leads to (import.c). */
typedef struct SiloImportOutcome
{
	const char *status;			/* job_status.status: Pending or terminal */
	TimestampTz changed_at;
	int32		attempt;		/* the status row's attempt numbers */
	int32		relative_attempt;
	bool		pending;
	bool		due;
	TimestampTz next_attempt_at;	/* pending: its next attempt's start */
} SiloImportOutcome;

/* Where a pending imported job's next attempt goes (import.c). */
typedef struct SiloImportTarget
{
	char	   *tenant;
	char	   *id;
	char	   *task_group;
	int32		priority;
	int64		seq;
	int			nlimits;
	SiloLimit  *limits;
	bool		has_hints;
	ItemPointerData info_tid;
	ItemPointerData status_tid;
} SiloImportTarget;

extern void silo_import_check(SiloImportJob *job);
extern void silo_import_batch(int njobs, SiloImportJob *jobs);
extern void silo_import_outcome(SiloImportJob *job, const SiloRetryPolicy *policy,
								int32 first_attempt, TimestampTz now, SiloImportOutcome *out);
extern const char *silo_import_state_name(const SiloImportOutcome *out, TimestampTz now);
extern void silo_import_write_attempts(const char *tenant, const char *id, SiloImportJob *job,
									   int from, int32 first_attempt);
extern void silo_import_settle(SiloImportTarget *t, SiloImportOutcome *o, Datum task_id,
							   List **chains);
extern void silo_import_refuse(SiloImportJob *job, const char *sqlstate, char *error);
extern void silo_import_running(const char *tenant, const char *id);
extern void silo_import_new(SiloImportJob *job, TimestampTz now, List **chains);
extern bool silo_reimport_job(SiloImportJob *job, Datum *key, TimestampTz now, List **chains);

/* schedule.c: recurring jobs */
typedef struct SiloScheduleArgs
{
	char	   *tenant;
	char	   *name;
	char	   *cron;
	char	   *task_group;
	Jsonb	   *payload;
	int32		priority;
	Jsonb	   *retry_policy;	/* NULL: no retries */
	Jsonb	   *limits;
	Jsonb	   *metadata;
	bool		skip_if_live;
} SiloScheduleArgs;

extern int64 silo_schedule_put(const SiloScheduleArgs *a);
extern bool silo_schedule_remove(const char *tenant, const char *name);
extern char *silo_schedule_fire(int64 id, TimestampTz at);
extern int64 silo_schedule_sync(void);

/* lease.c */
extern void silo_lease_tasks(ReturnSetInfo *rsinfo, const char *worker_id,
							 const char *task_group, int32 max_tasks, int32 lease_ms,
							 int ntenants, char **tenants);
extern bool silo_heartbeat_lease(Datum task_id, const char *worker_id, int32 lease_ms);

/* lease_job.c */
extern void silo_lease_one_job(ReturnSetInfo *rsinfo, const char *worker_id, const char *tenant,
							   const char *id, int32 lease_ms);

/* outcome.c */
typedef enum SiloOutcome
{
	SILO_OUTCOME_SUCCEEDED,
	SILO_OUTCOME_FAILED,
	SILO_OUTCOME_CANCELLED
} SiloOutcome;

extern void silo_take_reported_lease(Datum task_id, const char *worker_id, TimestampTz now,
									 const char *kind, SiloLease *lease);
extern void silo_finish_attempt(SiloLease *lease, SiloOutcome outcome,
								Jsonb *result, const char *error_code,
								Jsonb *error_data, TimestampTz now, bool nowait);
extern int64 silo_retry_delay_ms(const SiloRetryPolicy *policy, int32 retry_number);
extern void silo_report_outcome(Datum task_id, const char *worker_id, SiloOutcome outcome,
								Jsonb *result, const char *error_code, Jsonb *error_data);
extern void silo_release_task(Datum task_id, const char *worker_id);
extern void silo_report_refresh_end(Datum task_id, const char *worker_id,
									SiloFloatingEnd how, int32 new_max, const char *error);
extern void silo_fail_rate_limited(SiloChainJob *job, int at, TimestampTz now);

/* batch.c */
extern void silo_complete_batch(ReturnSetInfo *rsinfo, int ntasks, Datum *ids,
								Datum *results, bool *result_nulls, const char *worker_id);

/* jobops.c */
extern void silo_job_cancel(const char *tenant, const char *id, const char *fn);
extern void silo_job_restart(const char *tenant, const char *id, const char *fn);
extern void silo_job_expedite(const char *tenant, const char *id, const char *fn);
extern bool silo_job_delete(const char *tenant, const char *id);
extern void silo_job_read_result(ReturnSetInfo *rsinfo, const char *tenant, const char *id);
extern bool silo_job_look_result(const char *tenant, const char *id, MemoryContext cxt,
								 Datum *values, bool *nulls);

/* wait.c */
typedef struct SiloWaitLook
{
	Oid			save_user;
	int			save_sec;
	int			nest;
} SiloWaitLook;
extern void silo_wait_require_read_committed(const char *fn);
extern void silo_wait_look_enter(const char *fn, const char *tenant, Oid owner,
								 SiloWaitLook *look);
extern void silo_wait_look_leave(SiloWaitLook *look);
extern bool silo_wait_nap(instr_time start, int64 timeout_us);
extern void silo_job_wait_result(const char *tenant, const char *id, int64 timeout_us,
								 Oid owner, Datum *values, bool *nulls);

/* wait_any.c */
extern int	silo_job_wait_any(const char *tenant, char **ids, int n, int64 timeout_us,
							  Oid owner, bool *ended);

/* maintenance.c */

/* items one silo.run_maintenance looks at, at most (a subtransaction each) */
#define SILO_MAINTENANCE_ITEMS	50

extern int	silo_retention_s;	/* GUC silo.retention */
extern int64 silo_promote_due_tasks(TimestampTz now);
extern int64 silo_sweep_expired_leases(TimestampTz now, int limit, int64 *offset,
									   bool *more);
extern int64 silo_run_chain_tasks(TimestampTz now, int limit, int64 *offset, bool *more);
extern void silo_maintenance_round(TimestampTz now, int64 *promoted, int64 *swept);
extern int64 silo_purge_jobs(int32 max_jobs, TimestampTz before);
extern bool silo_next_due_at(TimestampTz *next);

#endif							/* SILO_CORE_H */
