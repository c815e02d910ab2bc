/*
 * loadgen.h: shared declarations of silo-loadgen, the benchmark load
 * generator (libpq + pthreads).  See bench/README.md for what it measures.
 */
#ifndef SILO_LOADGEN_H
#define SILO_LOADGEN_H

#include <pthread.h>
#include <stdint.h>
#include <libpq-fe.h>

/* The queue systems the load generator drives. */
typedef enum { SYS_BARE, SYS_SILO } lg_system;

/* The workloads. */
typedef enum
{
	WL_BURN, WL_LATENCY, WL_STEADY, WL_BACKLOG, WL_LIMITS, WL_HELD
} lg_workload;

/* Options of one run (one benchmark cell, or one series of cells). */
typedef struct lg_opts
{
	const char *conninfo;		/* libpq connection string */
	lg_system	system;
	lg_workload workload;
	int			clients;		/* worker threads, one connection each */
	int			batch;			/* jobs per claim/lease */
	long		jobs;			/* burn/held/limits: jobs to pre-insert (0:
								 * calibrate); latency: samples */
	double		seconds;		/* burn: drain time to calibrate for; steady,
								 * backlog: measured window */
	long		max_jobs;		/* burn: upper bound of the scaled job count */
	int			poll_ms;		/* wait for a wake-up at most this long */
	int			idle_ms;		/* steady, bare: sleep after a short claim */
	double		max_seconds;	/* stop a latency/burn/limits run early */
	int			lease_ms;		/* silo: lease duration */
	double		rate;			/* steady: total enqueue rate, jobs/s */
	int			producers;		/* steady: producer threads */
	const char *backlogs;		/* backlog: comma-separated depths */
	const char *batches;		/* backlog: comma-separated batch sizes */
	const char *modes;			/* limits: comma-separated modes */
	const char *silo_worker;	/* latency: drive this silo-worker binary */
	const char *label;			/* printed as the system when set */
} lg_opts;

/* The figures of one cell, printed as one JSON object (main.c). */
typedef struct lg_result
{
	const char *system;			/* label; NULL: the system's name */
	const char *workload;		/* label; NULL: the workload's name */
	int			clients;
	int			batch;
	long		jobs;
	double		seconds;
	double		rate;
	double		p50_ms, p99_ms, p999_ms, max_ms;	/* negative: not measured */
	char		extra[1024];	/* more ,"key":value pairs (result_add) */
} lg_result;

/* Sig-fig histogram (hist.c): 3 significant digits, like HdrHistogram. */
#define HIST_DECADES 12
typedef struct lg_hist
{
	uint64_t	counts[HIST_DECADES][1000];
	uint64_t	total;
	uint64_t	max;			/* largest value recorded */
	double		sum;			/* for the mean */
} lg_hist;

void		hist_init(lg_hist *h);
lg_hist    *hist_new(void);
void		hist_record(lg_hist *h, uint64_t value);
void		hist_merge(lg_hist *dst, const lg_hist *src);
uint64_t	hist_percentile(const lg_hist *h, double pct);
void		hist_to_result(const lg_hist *h, lg_result *r);

/* util.c */
double		now_sec(void);
void		sleep_until(double t);
void		die(const char *fmt,...) __attribute__((format(printf, 1, 2), noreturn));
void		sleep_ms(int ms);
void		note_stop(pthread_mutex_t *mu, double *t_stopped);
void	   *xcalloc(size_t n, size_t size);
long		json_long(const char *json, const char *key, long dflt);
int			parse_list(const char *s, long *out, int max);

/* main.c */
void		result_init(lg_result *r, const lg_opts *o);
void		result_add(lg_result *r, const char *fmt,...) __attribute__((format(printf, 2, 3)));
void		result_print(const lg_opts *o, const lg_result *r);

/* db.c */
PGconn	   *db_connect(const char *conninfo);
PGconn	   *db_connect_as(const char *conninfo, const char *appname);
void		db_exec(PGconn *conn, const char *sql);
PGresult   *db_query(PGconn *conn, const char *sql);
long		db_scalar_long(PGconn *conn, const char *sql);
void		db_prepare(PGconn *conn, const char *name, const char *sql);
PGresult   *db_exec_prepared(PGconn *conn, const char *name, int nparams,
							 const char *const *params);
void		db_wait_for_backends(PGconn *conn);
void		db_wait_for_wakeup(PGconn *conn, int poll_ms);

/* systems.c: the SQL of each system */
#define LG_GROUP "bench"
#define LG_LAT_GROUP "latency"
const char *system_name(lg_system s);
const char *system_channel(lg_system s);
void		system_detect(PGconn *conn, lg_system s);
const char *system_finish_kind(lg_system s);
void		system_reset(PGconn *conn, lg_system s);
void		system_fill(PGconn *conn, lg_system s, long jobs);
void		system_fill_range(PGconn *conn, lg_system s, long from, long to);
void		system_prime(const char *conninfo, lg_system s, long n);
void		system_fill_limited(PGconn *conn, const char *mode, long jobs);
long		system_remaining(PGconn *conn, lg_system s);
long		system_depth(PGconn *conn, lg_system s);
long		system_dead_tuples(PGconn *conn, lg_system s);
long		system_size(PGconn *conn, lg_system s);
void		system_prepare_worker(PGconn *conn, lg_system s);
void		system_prepare_limits(PGconn *conn);
char	   *ids_to_array(PGresult *res);
PGresult   *system_claim(PGconn *conn, lg_system s, const char *worker,
						 int batch, int lease_ms);
void		system_finish(PGconn *conn, lg_system s, const char *worker,
						  PGresult *claimed);
int			system_take_batch(PGconn *conn, lg_system s, const char *worker,
							  const lg_opts *o);
void		system_prepare_enqueue(PGconn *conn, lg_system s);
void		system_enqueue(PGconn *conn, lg_system s, long n, long stamp);
void		system_prepare_latency(PGconn *producer, PGconn *worker, lg_system s);
void		system_enqueue_one(PGconn *conn, lg_system s, long seq);
typedef void (*lg_leased_cb) (void *arg, int n, double t_leased);
int			system_take_one(PGconn *conn, lg_system s, const char *worker,
							const lg_opts *o, lg_leased_cb leased, void *arg);

/* the workloads: each prints its JSON line(s) with result_print */
typedef struct burn_stats
{
	long		jobs;			/* jobs filled */
	long		done;			/* jobs completed (< jobs: stopped early) */
	double		seconds;		/* drain time */
	long		dead_tuples;	/* n_dead_tup of the churn tables after */
	long		size_before;	/* their total size after the fill */
	long		size_after;		/* ... and after the drain */
} burn_stats;
void		burn_once(const lg_opts *o, PGconn *admin, long jobs, int hold,
					  burn_stats *st);
void		run_burn(const lg_opts *o);
void		run_held(const lg_opts *o);
void		run_latency(const lg_opts *o);
void		run_worker_latency(const lg_opts *o);
void		run_steady(const lg_opts *o);
void		run_backlog(const lg_opts *o);
void		run_limits(const lg_opts *o);

#endif
