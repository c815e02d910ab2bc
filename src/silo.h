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
 *	  leasemark.c	per-group lease marks: where a lease's scan starts
 *	  outcome.c		complete, fail, ack_cancel, release and the shared
 *					"finish an attempt" transition (also used by the sweep)
 *	  jobops.c		cancel, restart, expedite, delete_job, job_result
 *	  limits.c		parsing and validation of a job's limits
 *	  chain.c		the limit chain: key locks, walk, grants, releases
 *	  floating.c	floating limit state and its refresh tasks
 *	  ratelimit.c	rate-limit buckets
 *	  broker.c		the background worker: promotion, lease sweep, purge
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_H
#define SILO_H

#include "postgres.h"

#include "access/skey.h"
#include "access/tableam.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "nodes/pg_list.h"
#include "utils/jsonb.h"
#include "utils/relcache.h"
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
#define SILO_MAX_LIMITS			16
#define SILO_MAX_LIMIT_KEY_LEN	256

/* locktag_field4 of silo's key locks (user advisory locks use 1 and 2). */
#define SILO_LOCKTAG_CLASS		0x5110

/* The extension version this library implements (silo.control). */
#define SILO_EXTENSION_VERSION	"1.6"

/* The pg_cron job that runs the retention purge. */
#define SILO_PURGE_JOB_NAME		"silo-purge-terminal-jobs"

/*
 * Its command.  pg_cron runs it as the superuser that scheduled it (the
 * broker's role), in a session that takes the database's settings, so its
 * search_path is whatever the database owner chose: every name in it is
 * schema-qualified, and the only operator is pg_catalog's, named as such
 * (docs/security.md).  It does nothing once silo is dropped.  The 1.6
 * update script writes the same text, and the broker rewrites any other
 * (a restore of an older dump brings the old command back).
 */
#define SILO_PURGE_COMMAND \
	"DO $purge$ BEGIN" \
	" IF EXISTS (SELECT FROM pg_catalog.pg_extension" \
	" WHERE extname OPERATOR(pg_catalog.=) 'silo') THEN" \
	" PERFORM silo.purge_terminal_jobs(); END IF; END $purge$"

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

/* One limit of a job, as parsed by limits.c. */
typedef enum SiloLimitType
{
	SILO_LIMIT_CONCURRENCY,
	SILO_LIMIT_FLOATING,
	SILO_LIMIT_RATE
} SiloLimitType;

typedef struct SiloLimit
{
	SiloLimitType type;
	char	   *key;			/* concurrency key, or a rate limit's name */
	char	   *unique_key;		/* rate limit */
	int32		max;			/* maxConcurrency or defaultMaxConcurrency */
	int64		refresh_interval_ms;
	Jsonb	   *metadata;		/* floating; NULL means {} */
	int64		limit;			/* rate limit */
	int64		duration_ms;
	int64		hits;
	bool		leaky;
	int32		behavior;		/* accepted, ignored */
	int64		rl_initial_ms;
	int64		rl_max_ms;
	double		rl_multiplier;
	int32		rl_max_retries; /* 0: unlimited */
} SiloLimit;

/* An attempt of a job walking its limit chain (chain.c). */
typedef struct SiloChainJob
{
	char	   *tenant;
	char	   *job_id;
	char	   *task_group;
	int32		priority;
	int64		seq;
	int32		attempt;
	int32		relative_attempt;
	Datum		task_id;		/* the attempt's task; holders are keyed by it */
	TimestampTz start_at;		/* effective start: its place in every queue */
	int			nlimits;
	SiloLimit  *limits;
	List	   *holds;			/* keys held so far */
	int32		rate_checks;	/* re-checks of the current rate limit */
	bool		has_info_tid;	/* where the job's job_info row is, */
	ItemPointerData info_tid;
	bool		has_status_tid; /* and its job_status row, when known: */
	ItemPointerData status_tid; /* row hints for the task (1.5) */
} SiloChainJob;

/* Who walks a chain: its job's owner, a grant of another job, the broker. */
typedef enum SiloChainMode
{
	SILO_CHAIN_OWNER,
	SILO_CHAIN_CASCADE,
	SILO_CHAIN_BROKER
} SiloChainMode;

/* shmem.c */
extern void silo_shmem_request(void);
extern void silo_shmem_startup(void);
extern void silo_shmem_set_broker(bool attach);
extern int	silo_shmem_broker_pid(void);
extern void silo_planner_init(void);
extern bool silo_planning_own;
extern void silo_wake_broker(void);
extern void silo_wake_broker_latch(void);
extern bool silo_broker_take_tick_request(void);
extern bool silo_refresh_hint(void);
extern void silo_set_refresh_hint(bool on);
extern void silo_notify_group(const char *task_group);
extern void silo_notify_pre_commit(void);
extern void silo_notify_post_commit(void);
extern void silo_notify_forget(void);
extern void silo_notify_subxact_end(bool commit);
extern void silo_notify_shmem_request(void);
extern void silo_notify_shmem_startup(void);
extern bool silo_notify_any_pending(void);

/* groups coalesced at most; a task group name is at most SILO_MAX_GROUP_LEN
 * characters, not bytes */
#define SILO_NOTIFY_ENTRIES 512
#define SILO_NOTIFY_NAME_BYTES (SILO_MAX_GROUP_LEN * MAX_MULTIBYTE_CHAR_LEN + 1)
extern long silo_notify_send_deferred(char (*sent)[SILO_NOTIFY_NAME_BYTES], int *nsent);
extern void silo_notify_requeue(char (*sent)[SILO_NOTIFY_NAME_BYTES], int nsent);

/* silo.c */
extern void silo_wake_broker_at_commit(void);

/* leasemark.c: a position in task_ready order (priority, start_at, seq) */
typedef struct SiloMarkKey
{
	int16		priority;
	int64		start_at;
	int64		seq;
} SiloMarkKey;

extern const SiloMarkKey silo_mark_lowest;
extern int	silo_mark_cmp(const SiloMarkKey *a, const SiloMarkKey *b);
extern void silo_mark_shmem_request(void);
extern void silo_mark_shmem_startup(void);
extern void silo_mark_init(void);
extern bool silo_mark_enabled(Relation task_rel);
extern void silo_mark_begin(const char *task_group, Oid task_relid, SiloMarkKey *start,
							uint64 *gen);
extern void silo_mark_raise(const char *task_group, uint64 gen, const SiloMarkKey *key);
extern void silo_mark_owe(const char *task_group, const SiloMarkKey *key, bool at_commit);
extern void silo_mark_xact_end(bool commit);
extern void silo_mark_subxact_abort(void);
extern void silo_mark_pre_prepare(void);

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

/* direct.c: rows read and written through the access methods */
typedef struct SiloDirect SiloDirect;
typedef struct SiloTable SiloTable;

typedef enum SiloTableMode
{
	SILO_TABLE_READ,			/* rows are read */
	SILO_TABLE_DELETE,			/* rows are read, locked and deleted */
	SILO_TABLE_WRITE			/* rows are also inserted and updated */
} SiloTableMode;

extern SiloDirect *silo_direct_begin(void);
extern void silo_direct_end(SiloDirect *d);
extern Snapshot silo_direct_snapshot(SiloDirect *d);
extern void silo_direct_new_snapshot(SiloDirect *d);
extern SiloTable *silo_table_open(SiloDirect *d, const char *relname,
								  const char *const *cols, int ncols,
								  const char *index, SiloTableMode mode);
extern bool silo_table_fetch(SiloTable *t, int nkeys, const Datum *keys);
extern bool silo_table_fetch_tid(SiloTable *t, ItemPointer tid);
extern bool silo_table_fetch_ascending(SiloTable *t, Datum key);
extern bool silo_table_fetch_hinted(SiloTable *t, Datum hint, bool hint_null, int nkeys,
									const Datum *keys);
extern void silo_table_scan_start(SiloTable *t, ScanKey keys, int nkeys);
extern bool silo_table_scan_next(SiloTable *t);
extern Datum silo_table_get(SiloTable *t, int col, bool *isnull);
extern ItemPointer silo_table_tid(SiloTable *t);
extern void silo_table_insert(SiloTable *t, const Datum *values, const bool *nulls);
extern void silo_table_batch(SiloTable *t);
extern void silo_table_flush(SiloTable *t);
extern TM_Result silo_table_delete(SiloTable *t);
extern TM_Result silo_table_delete_skip_locked(SiloTable *t);
extern TM_Result silo_table_update(SiloTable *t, int n, const int *cols,
								   const Datum *values, const bool *nulls);
extern bool silo_text_datum_is(Datum d, const char *s);
extern bool silo_text_datums_equal(Datum a, Datum b);

/* statusindex.c: 0x03 */
extern SiloTable *silo_status_index_open(SiloDirect *d);
extern void silo_status_index_move_in(SiloTable *idx, Datum tenant, Datum id,
									  Datum old_status, TimestampTz old_at,
									  Datum hint, bool hint_null,
									  Datum new_status, TimestampTz new_at);
extern bool silo_status_index_exists(void);
extern void silo_status_index_move(const char *tenant, const char *id,
								   const char *old_status, TimestampTz old_at,
								   const char *new_status, TimestampTz new_at);

/* validate.c */
extern void silo_require_arg(FunctionCallInfo fcinfo, int argno, const char *name);
extern void silo_require_read_committed(const char *fn);
extern void silo_check_length(const char *name, const char *value, int min, int max);
extern void silo_check_range(const char *name, int64 value, int64 min, int64 max);
extern void silo_parse_retry_policy(Jsonb *policy, SiloRetryPolicy *out);
extern void silo_check_metadata(Jsonb *metadata);
extern const char *silo_json_type_name(JsonbValue *v);
extern double silo_json_number(const char *what, JsonbValue *v);

/* limits.c */
extern int	silo_parse_limits(Jsonb *limits, SiloLimit **out, Jsonb **normalized);

/* chain.c */
extern bool silo_limits_nowait;
extern void silo_limits_xact_end(void);
extern void silo_limits_set_broker(void);
extern void silo_limits_lock_key(const char *tenant, const char *queue);
extern void silo_limits_lock_all(const char *tenant, List *queues);
extern Datum silo_holds_datum(List *holds);
extern List *silo_holds_list(Datum arr);
extern List *silo_limit_queues(SiloLimit *limits, int n);
extern void silo_chain_load_limits(SiloChainJob *job);
extern void silo_chain_start(SiloChainJob *job, TimestampTz now);
extern void silo_chain_resume(SiloChainJob *job, int at, SiloChainMode mode, TimestampTz now);
extern uint64 silo_key_hash(char domain, const char *tenant, const char *a, const char *b);
extern bool silo_key_lock(uint64 h, bool always_wait);
extern void silo_grant_key(const char *tenant, const char *queue, TimestampTz now);
extern void silo_limits_release(const char *tenant, List *queues, Datum task_id, TimestampTz now);
extern void silo_limits_release_many(int ntasks, char **tenants, List **holds, Datum *task_ids,
									 TimestampTz now);
extern bool silo_chain_cancel(SiloChainJob *job, TimestampTz now);
extern int64 silo_run_regrants(TimestampTz now, int limit, int64 *offset, bool *more);

/* ratelimit.c */
extern bool silo_rate_limit_admit(const char *tenant, SiloLimit *l, TimestampTz now,
								  TimestampTz *next_admit);
extern int64 silo_purge_idle_buckets(TimestampTz now);
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
	Jsonb	   *limits;			/* normalized by enqueue_validate */
	Jsonb	   *metadata;
	bool		ignore_conflict;
	int			nlimits;		/* set by enqueue_validate */
	SiloLimit  *parsed_limits;
	List	  **chains;			/* if set, limit walks are appended here for
								 * the caller to start, not started */
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
	bool		limited;		/* the job has limits: holds is set */
	List	   *holds;			/* keys the task holds */
} SiloLease;

extern bool silo_take_expired_lease(Datum task_id, TimestampTz now, SiloLease *lease);
extern void silo_finish_attempt(SiloLease *lease, SiloOutcome outcome,
								Jsonb *result, const char *error_code,
								Jsonb *error_data, TimestampTz now, bool nowait);
extern int64 silo_retry_delay_ms(const SiloRetryPolicy *policy, int32 retry_number);
extern void silo_take_reported_lease(FunctionCallInfo fcinfo, TimestampTz now,
									 const char *kind, SiloLease *lease);
extern void silo_delete_lease(Datum task_id);
extern void silo_chain_fail_rate_limited(SiloChainJob *job, int at, TimestampTz now);

/* floating.c */
extern int32 silo_floating_max(const char *tenant, SiloLimit *l, const char *task_group,
							   TimestampTz now);
extern uint64 silo_floating_lease(const char *task_group, int32 max, const char *worker_id,
								  TimestampTz now, TimestampTz expires);
extern void silo_floating_refresh_expired(SiloLease *lease, TimestampTz now);
extern int64 silo_check_floating_limits(TimestampTz now, int limit, int64 *offset, bool *more);
extern bool silo_floating_any_ready(void);

/* broker.c */
typedef bool (*SiloItemFn) (int i, void *arg, TimestampTz now);
typedef char *(*SiloItemDescribeFn) (int i, void *arg);
extern int64 silo_run_isolated(int n, SiloItemFn fn, SiloItemDescribeFn describe, void *arg,
							   TimestampTz now, int64 *offset);

/* Rows listed by silo_run_listed: every column as text, row-major. */
typedef struct SiloListed
{
	int			ncols;
	char	  **cells;
} SiloListed;
#define SILO_CELL(l, i, c)	((l)->cells[(i) * (l)->ncols + (c)])

extern int64 silo_run_listed(SPIPlanPtr *plan, const char *sql, TimestampTz now, int limit,
							 int64 *offset, bool *more, SiloItemFn fn,
							 SiloItemDescribeFn describe);
extern int64 silo_run_chain_tasks(TimestampTz now, int limit, int64 *offset, bool *more);
extern int64 silo_promote_due_tasks(TimestampTz now);
extern int64 silo_sweep_expired_leases(TimestampTz now, int limit, int64 *offset,
										 bool *more);

#endif							/* SILO_H */
