/*
 * loadgen.h: shared declarations of silo-loadgen, the benchmark load
 * generator (libpq + pthreads).  See bench/README.md for what it measures.
 */
#ifndef SILO_LOADGEN_H
#define SILO_LOADGEN_H

#include <stdint.h>
#include <libpq-fe.h>

/* The queue systems the load generator drives. */
typedef enum { SYS_BARE, SYS_SILO } lg_system;

/* The workloads. */
typedef enum { WL_BURN, WL_LATENCY } lg_workload;

/* Options of one run (one benchmark cell). */
typedef struct lg_opts
{
	const char *conninfo;		/* libpq connection string */
	lg_system	system;
	lg_workload workload;
	int			clients;		/* burn: worker threads, one connection each */
	int			batch;			/* jobs per claim/lease */
	long		jobs;			/* burn: jobs to pre-insert (0: calibrate) */
	double		seconds;		/* burn: time budget used to scale jobs */
	long		max_jobs;		/* burn: upper bound of the scaled job count */
	int			poll_ms;		/* latency: worker's poll interval without a wake-up */
	double		max_seconds;	/* latency: stop early after this long */
	int			lease_ms;		/* silo: lease duration */
} lg_opts;

/* The figures of one cell, printed as one JSON object. */
typedef struct lg_result
{
	long		jobs;
	double		seconds;
	double		rate;
	double		p50_ms, p99_ms, p999_ms;	/* negative: not measured */
	long		errors;
} lg_result;

/* Sig-fig histogram (hist.c): 3 significant digits, like HdrHistogram. */
#define HIST_DECADES 12
typedef struct lg_hist
{
	uint64_t	counts[HIST_DECADES][1000];
	uint64_t	total;
} lg_hist;

void		hist_init(lg_hist *h);
void		hist_record(lg_hist *h, uint64_t value);
uint64_t	hist_percentile(const lg_hist *h, double pct);

/* util.c */
double		now_sec(void);
void		die(const char *fmt,...) __attribute__((format(printf, 1, 2), noreturn));
void		sleep_ms(int ms);

/* db.c */
PGconn	   *db_connect(const char *conninfo);
void		db_exec(PGconn *conn, const char *sql);
PGresult   *db_query(PGconn *conn, const char *sql);
long		db_scalar_long(PGconn *conn, const char *sql);
void		db_prepare(PGconn *conn, const char *name, const char *sql);
PGresult   *db_exec_prepared(PGconn *conn, const char *name, int nparams,
							 const char *const *params);

/* systems.c: the SQL of each system */
const char *system_name(lg_system s);
void		system_reset(PGconn *conn, lg_system s);
void		system_fill(PGconn *conn, lg_system s, long jobs);
long		system_remaining(PGconn *conn, lg_system s);
void		system_prepare_worker(PGconn *conn, lg_system s, const lg_opts *o);
int			system_take_batch(PGconn *conn, lg_system s, const char *worker,
							  const lg_opts *o);
void		system_prepare_latency(PGconn *producer, PGconn *worker, lg_system s);
void		system_enqueue_one(PGconn *conn, lg_system s, long seq);
int			system_take_one(PGconn *conn, lg_system s, const char *worker,
							const lg_opts *o, double *t_leased);
const char *system_channel(lg_system s);

/* burn.c, latency.c */
void		run_burn(const lg_opts *o, lg_result *r);
void		run_latency(const lg_opts *o, long count, lg_result *r);

#endif
