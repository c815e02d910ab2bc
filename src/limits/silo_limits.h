/*-------------------------------------------------------------------------
 *
 * silo_limits.h
 *	  Concurrency, floating concurrency and rate limits: parsing a job's
 *	  limits, key locks, walking a job's chain of limits, granting and
 *	  releasing slots, floating-limit state and refreshes, rate buckets.
 *	  Calls ipc/, storage/ and util/ (src/README.md has the layers).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_LIMITS_H
#define SILO_LIMITS_H

#include "silo_ipc.h"
#include "silo_storage.h"
#include "silo_tenancy.h"

/* locktag_field4 of silo's key locks (user advisory locks use 1 and 2). */
#define SILO_LOCKTAG_CLASS		0x5110

/* One limit of a job, as parsed by parse.c. */
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

/* parse.c */
extern int	silo_parse_limits(Jsonb *limits, SiloLimit **out, Jsonb **normalized);

/* keys.c */
extern bool silo_limits_nowait;

/*
 * Cluster mode: the limits' passes of the broker and the lease of refresh
 * tasks look only at rows of the shards this node serves (the SQL function
 * silo.shard_served).  Set by module.c at start; limits/ does not call
 * cluster/.
 */
extern bool silo_limits_shard_filter;
extern void silo_limits_xact_end(void);
extern void silo_limits_set_broker(void);
extern uint64 silo_key_hash(char domain, const char *tenant, const char *a, const char *b);
extern bool silo_key_lock(uint64 h, bool always_wait);
extern void silo_limits_lock_key(const char *tenant, const char *queue);
extern void silo_limits_lock_all(const char *tenant, List *queues);
extern List *silo_limit_queues(SiloLimit *limits, int n);
extern void silo_limits_key_busy(const char *tenant, const char *key);

/* chain.c */
extern void silo_chain_load_limits(SiloChainJob *job);
extern void silo_chain_start(SiloChainJob *job, TimestampTz now);
extern int	silo_chain_resume(SiloChainJob *job, int at, SiloChainMode mode, TimestampTz now);
extern void silo_chain_walk(SiloChainJob *job, int from, SiloChainMode mode, TimestampTz now);
extern void silo_chain_write_holder(const char *tenant, const char *queue, Datum task_id,
									const char *job_id, int32 attempt, TimestampTz now);

/* grant.c */
extern void silo_grant_key(const char *tenant, const char *queue, TimestampTz now);

/* release.c */
extern void silo_limits_release(const char *tenant, List *queues, Datum task_id, TimestampTz now);
extern void silo_limits_release_many(int ntasks, char **tenants, List **holds, Datum *task_ids,
									 TimestampTz now);
extern bool silo_chain_cancel(SiloChainJob *job, TimestampTz now);
extern int64 silo_run_regrants(TimestampTz now, int limit, int64 *offset, bool *more);

/* floating.c */
typedef enum SiloFloatingEnd
{
	SILO_FLOATING_REPORTED,
	SILO_FLOATING_FAILED,
	SILO_FLOATING_EXPIRED
} SiloFloatingEnd;

extern int32 silo_floating_max(const char *tenant, SiloLimit *l, const char *task_group,
							   TimestampTz now);
extern uint64 silo_floating_lease(const char *task_group, int32 max, const char *worker_id,
								  TimestampTz now, TimestampTz expires, int ntenants,
								  char **tenants);
extern void silo_floating_finish(SiloLease *lease, SiloFloatingEnd how, int32 new_max,
								 const char *error, TimestampTz now);
extern bool silo_floating_reset(const char *tenant, const char *key, TimestampTz now);
extern int64 silo_check_floating_limits(TimestampTz now, int limit, int64 *offset, bool *more);
extern bool silo_floating_any_ready(void);

/* ratelimit.c */
extern bool silo_rate_limit_admit(const char *tenant, SiloLimit *l, TimestampTz now,
								  TimestampTz *next_admit);
extern int64 silo_purge_idle_buckets(TimestampTz now);

#endif							/* SILO_LIMITS_H */
