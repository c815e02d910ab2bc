/*-------------------------------------------------------------------------
 *
 * silo.h
 *	  Declarations shared by the silo extension's modules.
 *
 * Where things live:
 *	  silo.c		module load, GUCs, transaction callback
 *	  shmem.c		shared memory: broker latch, notification coalescing
 *	  spi_util.c	cached SPI plans, clock, UUIDs, argument helpers
 *	  validate.c	checks of user-supplied arguments
 *	  enqueue.c		silo.enqueue, silo.enqueue_many
 *	  lease.c		silo.lease, silo.heartbeat
 *	  outcome.c		complete, fail, ack_cancel, release and the shared
 *					"finish an attempt" transition (also used by the sweep)
 *	  jobops.c		cancel, restart, expedite, delete_job, job_result
 *	  broker.c		the background worker: promotion, lease sweep, purge
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_H
#define SILO_H

#include "postgres.h"

#include "executor/spi.h"
#include "fmgr.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "silo_errcodes.h"

/* GUCs (silo.c) */
extern char *silo_database;
extern int	silo_retention_s;
extern bool silo_broker_paused;
extern int	silo_notify_coalesce_ms;
extern int	silo_clock_offset_ms;

/* Bounds of the SQL API, documented in docs/api.md */
#define SILO_MAX_TENANT_LEN		64
#define SILO_MAX_GROUP_LEN		64
#define SILO_MAX_ID_LEN			128
#define SILO_MAX_WORKER_LEN		256
#define SILO_MAX_ERROR_CODE_LEN 256
#define SILO_MAX_METADATA		16
#define SILO_MAX_META_KEY_LEN	64
#define SILO_MAX_META_VALUE_LEN 1024
#define SILO_MAX_LEASE_BATCH	1000
#define SILO_MIN_LEASE_MS		100
#define SILO_MAX_LEASE_MS		3600000

/* The pg_cron job that runs the retention purge. */
#define SILO_PURGE_JOB_NAME		"silo-purge-terminal-jobs"

/* The channel every wake-up goes to; the payload is the task group. */
#define SILO_NOTIFY_CHANNEL		"silo_task_ready"

/* A normalized retry policy; count < 0 means "no policy". */
typedef struct SiloRetryPolicy
{
	int32		count;
	int64		initial_ms;
	int64		max_ms;
	double		factor;
	bool		randomize;
} SiloRetryPolicy;

/* shmem.c */
extern void silo_shmem_request(void);
extern void silo_shmem_startup(void);
extern void silo_shmem_set_broker(bool attach);
extern int	silo_shmem_broker_pid(void);
extern void silo_wake_broker(void);
extern void silo_notify_group(const char *task_group);
extern void silo_notify_pre_commit(void);
extern void silo_notify_forget(void);
extern void silo_notify_subxact_end(bool commit);

/* silo.c */
extern void silo_wake_broker_at_commit(void);

/* spi_util.c */
extern int	silo_exec(SPIPlanPtr *plan, const char *sql, int nargs,
					  const Oid *argtypes, Datum *values, const char *nulls,
					  bool read_only, long count);
extern Datum silo_col(int row, int col, bool *isnull);
extern char *silo_col_text(int row, int col);
extern int32 silo_col_int32(int row, int col);
extern int64 silo_col_int64(int row, int col);
extern bool silo_col_bool(int row, int col);
extern TimestampTz silo_col_ts(int row, int col, bool *isnull);
extern TimestampTz silo_now_ts(void);
extern Datum silo_new_uuid(void);
extern char *silo_uuid_to_cstring(Datum uuid);
extern void silo_spi_connect(void);
extern void silo_spi_finish(void);

/* validate.c */
extern void silo_require_arg(FunctionCallInfo fcinfo, int argno, const char *name);
extern void silo_require_read_committed(const char *fn);
extern void silo_check_length(const char *name, const char *value, int min, int max);
extern void silo_check_range(const char *name, int64 value, int64 min, int64 max);
extern void silo_parse_retry_policy(Jsonb *policy, SiloRetryPolicy *out);
extern void silo_check_metadata(Jsonb *metadata);
extern void silo_check_limits(Jsonb *limits);
extern char *silo_text_arg(FunctionCallInfo fcinfo, int argno, const char *name,
						   int minlen, int maxlen);

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
	Jsonb	   *limits;
	Jsonb	   *metadata;
	bool		ignore_conflict;
} SiloEnqueueArgs;

extern char *silo_enqueue_job(SiloEnqueueArgs *args);

/* outcome.c */
typedef enum SiloOutcome
{
	SILO_OUTCOME_SUCCEEDED,
	SILO_OUTCOME_FAILED,
	SILO_OUTCOME_CANCELLED
} SiloOutcome;

/* A lease row, as taken (deleted) by a report or by the sweep. */
typedef struct SiloLease
{
	Datum		task_id;
	char	   *kind;
	char	   *task_group;
	char	   *tenant;
	char	   *job_id;
	int32		attempt;
	int32		relative_attempt;
	int32		priority;
	TimestampTz start_at;
	int64		seq;
	char	   *worker_id;
	TimestampTz started_at;
	TimestampTz expires_at;
} SiloLease;

extern bool silo_take_expired_lease(Datum task_id, TimestampTz now, SiloLease *lease);
extern void silo_finish_attempt(SiloLease *lease, SiloOutcome outcome,
								Jsonb *result, const char *error_code,
								Jsonb *error_data, TimestampTz now, bool nowait);
extern int64 silo_retry_delay_ms(const SiloRetryPolicy *policy, int32 retry_number);

/* broker.c */
extern int64 silo_promote_due_tasks(TimestampTz now);
extern int64 silo_sweep_expired_leases(TimestampTz now, int limit, int64 *offset,
										 bool *more);

#endif							/* SILO_H */
