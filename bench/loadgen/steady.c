/*
 * steady.c: the steady-state workload.
 *
 * --producers threads enqueue at a fixed total --rate for --seconds, paced
 * by an absolute schedule: producer p's k-th job is due at
 * t0 + p/rate + k*P/rate, and each turn the producer enqueues every job
 * that is due by now (up to MAX_PER_CALL in one call: silo.enqueue for one
 * job, silo.enqueue_many for more; bare one INSERT), then sleeps until the
 * next one is due.  A producer that falls behind catches up in bigger calls
 * rather than drifting; jobs still unsent when the window closes are not
 * sent, so the achieved rate shows it.  Each job's payload carries the
 * start time of the enqueue call that wrote it ("t", microseconds of the
 * monotonic clock; every thread is in this process).
 *
 * --clients worker threads claim batches of --batch as in the burn-down
 * (BEGIN; lease/claim; complete; COMMIT).  A sample is enqueue call start
 * -> the lease/claim call that returned the job returned.  When a claim
 * returns fewer than --batch jobs the worker waits: silo workers LISTEN on
 * silo_task_ready and wait for a notification (at most --poll-ms, as
 * docs/api.md asks); bare workers sleep --idle-ms (bare has no NOTIFY:
 * pg_notify in every enqueue would serialize the producers' commits on
 * PostgreSQL 15's notification lock).  --poll-ms 0 makes silo workers poll
 * like bare ones (a diagnostic variant).  After the window the workers drain
 * what was enqueued (at most 15 s more).
 *
 * A sampler connection counts the queue depth every 200 ms; dead tuples of
 * the system's tables are read at the end.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "loadgen.h"

#define MAX_PER_CALL 100		/* jobs one producer call may catch up */
#define SAMPLE_MS 200			/* queue depth sampling interval */
#define DRAIN_SECONDS 15		/* time allowed to drain after the window */
#define PRIME_JOBS 2000			/* system_prime before the window */

/* State shared by the threads of one run. */
typedef struct steady_shared
{
	const lg_opts *o;
	pthread_barrier_t ready;	/* every thread connected and prepared */
	double		t0;				/* start of the window (set before ready) */
	double		t_end;			/* end of the producing window */
	atomic_long enqueued;		/* jobs enqueued (committed) */
	atomic_long taken;			/* jobs claimed and completed */
	atomic_int	stop;			/* workers and sampler: finish */
	long		max_depth;		/* sampler */
	double		sum_depth;
	long		depth_samples;
} steady_shared;

/* One thread's arguments. */
typedef struct steady_thread
{
	steady_shared *sh;
	int			index;
	pthread_t	tid;
	lg_hist    *hist;			/* worker: its latency samples */
} steady_thread;

/* producer_thread: enqueue this producer's share of the schedule. */
static void *
producer_thread(void *arg)
{
	steady_thread *t = arg;
	steady_shared *sh = t->sh;
	const lg_opts *o = sh->o;
	PGconn	   *conn = db_connect(o->conninfo);
	double		per = o->producers / o->rate,	/* seconds between my jobs */
				first;
	long		sent = 0,
				mine;			/* my jobs scheduled inside the window */

	system_prepare_enqueue(conn, o->system);
	pthread_barrier_wait(&sh->ready);
	first = sh->t0 + t->index / o->rate;
	mine = (long) ceil((sh->t_end - first) / per);
	for (;;)
	{
		double		now = now_sec(),
					next = first + sent * per;
		long		due;

		if (sent >= mine)
			break;
		if (now < next)
		{
			sleep_until(next);
			continue;
		}
		/* every job scheduled at or before now and inside the window */
		due = (long) floor((now - first) / per) + 1;
		if (due > mine)
			due = mine;
		due -= sent;
		if (due > MAX_PER_CALL)
			due = MAX_PER_CALL;
		if (due < 1)
			due = 1;
		system_enqueue(conn, o->system, due, (long) (now * 1e6));
		sent += due;
		atomic_fetch_add(&sh->enqueued, due);
	}
	PQfinish(conn);
	return NULL;
}

/* worker_thread: claim, time and complete batches until told to stop. */
static void *
worker_thread(void *arg)
{
	steady_thread *t = arg;
	steady_shared *sh = t->sh;
	const lg_opts *o = sh->o;
	PGconn	   *conn = db_connect(o->conninfo);
	char		worker[32];

	snprintf(worker, sizeof(worker), "loadgen-%d", t->index);
	system_prepare_worker(conn, o->system);
	if (o->system == SYS_SILO && o->poll_ms > 0)
		db_exec(conn, "LISTEN silo_task_ready");
	pthread_barrier_wait(&sh->ready);
	while (!atomic_load(&sh->stop))
	{
		PGresult   *res;
		double		t_ret;
		int			n;

		db_exec(conn, "BEGIN");
		res = system_claim(conn, o->system, worker, o->batch, o->lease_ms);
		t_ret = now_sec();
		n = PQntuples(res);
		for (int i = 0; i < n; i++)
		{
			long		stamp = json_long(PQgetvalue(res, i, 1), "t", -1);
			double		us = t_ret * 1e6 - (double) stamp;

			if (stamp < 0)
				die("steady: a job without its enqueue time: %s", PQgetvalue(res, i, 1));
			hist_record(t->hist, us < 0 ? 0 : (uint64_t) us);
		}
		system_finish(conn, o->system, worker, res);
		PQclear(res);
		db_exec(conn, "COMMIT");
		atomic_fetch_add(&sh->taken, n);
		if (n < o->batch && !atomic_load(&sh->stop))
		{
			if (o->system == SYS_SILO && o->poll_ms > 0)
				db_wait_for_wakeup(conn, o->poll_ms);
			else
				sleep_ms(o->idle_ms);
		}
	}
	PQfinish(conn);
	return NULL;
}

/* sampler_thread: count the queue depth every SAMPLE_MS until stopped. */
static void *
sampler_thread(void *arg)
{
	steady_thread *t = arg;
	steady_shared *sh = t->sh;
	PGconn	   *conn = db_connect(sh->o->conninfo);
	double		next;

	pthread_barrier_wait(&sh->ready);
	next = sh->t0;
	while (!atomic_load(&sh->stop))
	{
		long		d;

		sleep_until(next);
		d = system_depth(conn, sh->o->system);
		if (d > sh->max_depth)
			sh->max_depth = d;
		sh->sum_depth += d;
		sh->depth_samples++;
		next += SAMPLE_MS / 1000.0;
		if (next < now_sec())
			next = now_sec();
	}
	PQfinish(conn);
	return NULL;
}

/* start_threads: create n threads of one kind starting at th[0]. */
static void
start_threads(steady_thread *th, int n, steady_shared *sh,
			  void *(*fn) (void *))
{
	for (int i = 0; i < n; i++)
	{
		th[i].sh = sh;
		th[i].index = i;
		if (pthread_create(&th[i].tid, NULL, fn, &th[i]) != 0)
			die("pthread_create failed");
	}
}

/* run_steady: the steady-state workload; prints one line. */
void
run_steady(const lg_opts *o)
{
	steady_shared sh = {.o = o};
	steady_thread *prod = xcalloc(o->producers, sizeof(steady_thread)),
			   *work = xcalloc(o->clients, sizeof(steady_thread)),
				samp = {0};
	PGconn	   *admin = db_connect(o->conninfo);
	lg_hist    *all = hist_new();
	long		enqueued,
				taken,
				size_before;
	double		t_drained;
	lg_result	r;

	system_reset(admin, o->system);
	system_prime(o->conninfo, o->system, PRIME_JOBS);
	size_before = system_size(admin, o->system);
	atomic_init(&sh.enqueued, 0);
	atomic_init(&sh.taken, 0);
	atomic_init(&sh.stop, 0);
	for (int i = 0; i < o->clients; i++)
		work[i].hist = hist_new();
	pthread_barrier_init(&sh.ready, NULL, o->producers + o->clients + 2);
	/* t0 leaves the threads time to connect: they start together */
	sh.t0 = now_sec() + 1.0 + 0.02 * (o->producers + o->clients);
	sh.t_end = sh.t0 + o->seconds;
	start_threads(prod, o->producers, &sh, producer_thread);
	start_threads(work, o->clients, &sh, worker_thread);
	start_threads(&samp, 1, &sh, sampler_thread);
	pthread_barrier_wait(&sh.ready);
	if (now_sec() > sh.t0)
		die("steady: threads took too long to connect");
	for (int i = 0; i < o->producers; i++)
		pthread_join(prod[i].tid, NULL);
	/* the window is over: wait for the workers to drain it */
	while (atomic_load(&sh.taken) < atomic_load(&sh.enqueued) &&
		   now_sec() < sh.t_end + DRAIN_SECONDS)
		sleep_ms(5);
	t_drained = now_sec();
	atomic_store(&sh.stop, 1);
	if (o->system == SYS_SILO)
		db_exec(admin, "NOTIFY silo_task_ready, 'loadgen-stop'");
	for (int i = 0; i < o->clients; i++)
	{
		pthread_join(work[i].tid, NULL);
		hist_merge(all, work[i].hist);
		free(work[i].hist);
	}
	pthread_join(samp.tid, NULL);
	pthread_barrier_destroy(&sh.ready);
	enqueued = atomic_load(&sh.enqueued);
	taken = atomic_load(&sh.taken);

	db_wait_for_backends(admin);
	result_init(&r, o);
	r.jobs = enqueued;
	r.seconds = o->seconds;
	r.rate = enqueued / o->seconds;
	hist_to_result(all, &r);
	result_add(&r, ",\"target_rate\":%.1f,\"producers\":%d,\"completed\":%ld,"
			   "\"undrained\":%ld,\"drain_s\":%.3f,\"max_depth\":%ld,\"mean_depth\":%.1f,"
			   "\"dead_tuples\":%ld,\"size_before\":%ld,\"size_after\":%ld,\"finish\":\"%s\"",
			   o->rate, o->producers, taken, enqueued - taken, t_drained - sh.t_end,
			   sh.max_depth, sh.depth_samples ? sh.sum_depth / sh.depth_samples : 0.0,
			   system_dead_tuples(admin, o->system), size_before,
			   system_size(admin, o->system), system_finish_kind(o->system));
	system_reset(admin, o->system);
	PQfinish(admin);
	free(all);
	free(prod);
	free(work);
	result_print(o, &r);
}
