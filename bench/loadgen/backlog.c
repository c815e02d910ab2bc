/*
 * backlog.c: the backlog-scale workload.
 *
 * For each depth B of --backlogs (ascending), the queue is topped up to B
 * due jobs of one priority with the system's bulk path (silo:
 * silo.enqueue_many in chunks of 1,000 from FILL_THREADS connections; bare:
 * INSERT ... SELECT), then VACUUM ANALYZE and CHECKPOINT.  Then for each
 * batch size of --batches, --clients threads lease (claim) and complete in
 * one transaction per batch, as in the burn-down (BEGIN; lease; complete;
 * COMMIT), while REFILL_THREADS refill threads enqueue as many jobs as
 * were taken (in calls of up to REFILL_MAX); workers pause while the depth
 * (counted from the totals) is below LOW_WATER * B, so it stays within
 * 10% of B even when the refill is slower than the workers.  A sample is
 * the duration of one lease/claim call alone (the statement inside the
 * transaction, not the COMMIT's flush).  The first WARMUP_S seconds are not
 * recorded; then --seconds are.  One JSON line per (depth, batch).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "loadgen.h"

#define WARMUP_S 1.0			/* unrecorded start of each window */
#define REFILL_MIN 50			/* refill when this many were taken */
#define REFILL_MAX 2000			/* jobs per refill call */
#define FILL_THREADS 2			/* silo top-up connections */
#define REFILL_THREADS 2		/* refill connections during a window */
#define LOW_WATER 0.9			/* workers pause below this share of B */

/* State shared by the threads of one window. */
typedef struct backlog_shared
{
	const lg_opts *o;
	int			batch;
	long		backlog;		/* B */
	atomic_long next_seq;		/* payload "i" of the next refilled job */
	pthread_barrier_t ready;
	double		t_record;		/* record samples from here */
	double		t_stop;			/* ... until here */
	atomic_long taken;			/* jobs completed since the window began */
	atomic_long recorded;		/* of which inside the recorded part */
	atomic_long requested;		/* jobs the refill threads took on */
	atomic_long refilled;		/* ... and enqueued (committed) */
	atomic_long paused;			/* worker turns skipped at low water */
	long		min_depth;		/* lowest estimated depth (refill thread) */
	long		depth0;			/* depth at the start */
} backlog_shared;

/* One thread's arguments. */
typedef struct backlog_thread
{
	backlog_shared *sh;
	int			index;
	pthread_t	tid;
	lg_hist    *hist;
} backlog_thread;

/* One top-up connection's share of a fill. */
typedef struct fill_part
{
	const lg_opts *o;
	long		from,
				to;
	pthread_t	tid;
} fill_part;

/* fill_thread: enqueue one share of a top-up on its own connection. */
static void *
fill_thread(void *arg)
{
	fill_part  *f = arg;
	PGconn	   *conn = db_connect(f->o->conninfo);

	if (f->to >= f->from)
		system_fill_range(conn, f->o->system, f->from, f->to);
	PQfinish(conn);
	return NULL;
}

/* top_up: enqueue jobs from..to (silo: split over FILL_THREADS
 * connections, since one enqueue_many stream leaves a core idle). */
static void
top_up(const lg_opts *o, PGconn *admin, long from, long to)
{
	int			nt = o->system == SYS_SILO ? FILL_THREADS : 1;
	fill_part	parts[FILL_THREADS];
	long		per = (to - from + nt) / nt;

	if (nt == 1)
	{
		system_fill_range(admin, o->system, from, to);
		return;
	}
	for (int i = 0; i < nt; i++)
	{
		parts[i].o = o;
		parts[i].from = from + i * per;
		parts[i].to = from + (i + 1) * per - 1 > to ? to : from + (i + 1) * per - 1;
		if (pthread_create(&parts[i].tid, NULL, fill_thread, &parts[i]) != 0)
			die("pthread_create failed");
	}
	for (int i = 0; i < nt; i++)
		pthread_join(parts[i].tid, NULL);
}

/* worker_thread: lease and complete until the window ends, timing each
 * lease call. */
static void *
worker_thread(void *arg)
{
	backlog_thread *t = arg;
	backlog_shared *sh = t->sh;
	const lg_opts *o = sh->o;
	PGconn	   *conn = db_connect(o->conninfo);
	char		worker[32];

	snprintf(worker, sizeof(worker), "loadgen-%d", t->index);
	system_prepare_worker(conn, o->system);
	pthread_barrier_wait(&sh->ready);
	for (;;)
	{
		PGresult   *res;
		double		t0,
					t1;
		int			n;

		if (now_sec() >= sh->t_stop)
			break;
		/* the refill is behind: let it catch up, so the depth stays ~B */
		if (sh->depth0 + atomic_load(&sh->refilled) - atomic_load(&sh->taken) <
			LOW_WATER * sh->backlog)
		{
			atomic_fetch_add(&sh->paused, 1);
			sleep_ms(1);
			continue;
		}
		db_exec(conn, "BEGIN");
		t0 = now_sec();
		res = system_claim(conn, o->system, worker, sh->batch, o->lease_ms);
		t1 = now_sec();
		n = PQntuples(res);
		system_finish(conn, o->system, worker, res);
		PQclear(res);
		db_exec(conn, "COMMIT");
		atomic_fetch_add(&sh->taken, n);
		if (t0 >= sh->t_record && n > 0)
		{
			hist_record(t->hist, (uint64_t) ((t1 - t0) * 1e6));
			atomic_fetch_add(&sh->recorded, n);
		}
		if (n == 0)
			sleep_ms(1);		/* the refill is behind */
	}
	PQfinish(conn);
	return NULL;
}

/* refill_thread: enqueue as many jobs as the workers took (sharing the
 * work with the other refill threads), until the window ends; tracks the
 * lowest depth (estimated from the counts). */
static void *
refill_thread(void *arg)
{
	backlog_thread *t = arg;
	backlog_shared *sh = t->sh;
	PGconn	   *conn = db_connect(sh->o->conninfo);

	pthread_barrier_wait(&sh->ready);
	while (now_sec() < sh->t_stop)
	{
		long		taken = atomic_load(&sh->taken),
					refilled = atomic_load(&sh->refilled),
					want = taken - atomic_load(&sh->requested),
					from;

		if (t->index == sh->o->clients && sh->depth0 + refilled - taken < sh->min_depth)
			sh->min_depth = sh->depth0 + refilled - taken;
		if (want < REFILL_MIN)
		{
			sleep_ms(2);
			continue;
		}
		if (want > REFILL_MAX)
			want = REFILL_MAX;
		atomic_fetch_add(&sh->requested, want);
		from = atomic_fetch_add(&sh->next_seq, want);
		system_fill_range(conn, sh->o->system, from, from + want - 1);
		atomic_fetch_add(&sh->refilled, want);
	}
	PQfinish(conn);
	return NULL;
}

/* window: one measured window at the current depth with one batch size;
 * returns the next payload sequence number. */
static long
window(const lg_opts *o, PGconn *admin, long backlog, int batch, long seq,
	   double fill_s)
{
	backlog_shared sh = {.o = o, .batch = batch, .backlog = backlog};
	int			nthreads = o->clients + REFILL_THREADS;
	backlog_thread *th = xcalloc(nthreads, sizeof(backlog_thread));
	lg_hist    *all = hist_new();
	lg_opts		oc = *o;
	lg_result	r;
	long		depth_end;

	sh.depth0 = system_depth(admin, o->system);
	sh.min_depth = sh.depth0;
	atomic_init(&sh.taken, 0);
	atomic_init(&sh.recorded, 0);
	atomic_init(&sh.refilled, 0);
	atomic_init(&sh.requested, 0);
	atomic_init(&sh.paused, 0);
	atomic_init(&sh.next_seq, seq);
	pthread_barrier_init(&sh.ready, NULL, nthreads + 1);
	sh.t_record = sh.t_stop = 1e300;	/* set below, before anyone reads them */
	for (int i = 0; i < nthreads; i++)
	{
		th[i].sh = &sh;
		th[i].index = i;
		th[i].hist = hist_new();
		if (pthread_create(&th[i].tid, NULL,
						   i < o->clients ? worker_thread : refill_thread, &th[i]) != 0)
			die("pthread_create failed");
	}
	sh.t_record = now_sec() + 0.5 + 0.05 * o->clients + WARMUP_S;
	sh.t_stop = sh.t_record + o->seconds;
	pthread_barrier_wait(&sh.ready);
	for (int i = 0; i < nthreads; i++)
	{
		pthread_join(th[i].tid, NULL);
		hist_merge(all, th[i].hist);
		free(th[i].hist);
	}
	pthread_barrier_destroy(&sh.ready);
	depth_end = system_depth(admin, o->system);

	oc.batch = batch;
	result_init(&r, &oc);
	r.jobs = atomic_load(&sh.recorded);
	r.seconds = o->seconds;
	r.rate = r.jobs / o->seconds;
	hist_to_result(all, &r);
	result_add(&r, ",\"backlog\":%ld,\"depth_start\":%ld,\"depth_end\":%ld,"
			   "\"depth_min_est\":%ld,\"refilled\":%ld,\"paused\":%ld,\"fill_s\":%.1f,"
			   "\"finish\":\"%s\"",
			   backlog, sh.depth0, depth_end, sh.min_depth,
			   atomic_load(&sh.refilled), atomic_load(&sh.paused), fill_s,
			   system_finish_kind(o->system));
	result_print(o, &r);
	free(all);
	free(th);
	return atomic_load(&sh.next_seq);
}

/* run_backlog: the backlog workload over every depth and batch size. */
void
run_backlog(const lg_opts *o)
{
	long		backlogs[16],
				batches[16],
				seq = 1;
	int			nb = parse_list(o->backlogs, backlogs, 16),
				nk = parse_list(o->batches, batches, 16);
	PGconn	   *admin = db_connect(o->conninfo);

	system_reset(admin, o->system);
	for (int i = 0; i < nb; i++)
	{
		long		have = system_depth(admin, o->system);
		double		t0 = now_sec(),
					fill_s;

		if (backlogs[i] > have)
		{
			top_up(o, admin, seq, seq + backlogs[i] - have - 1);
			seq += backlogs[i] - have;
		}
		db_exec(admin, "VACUUM ANALYZE");
		db_exec(admin, "CHECKPOINT");
		fill_s = now_sec() - t0;
		fprintf(stderr, "silo-loadgen: backlog %ld ready in %.1f s\n", backlogs[i], fill_s);
		for (int k = 0; k < nk; k++)
		{
			if (batches[k] < 1 || batches[k] > 1000)
				die("--batches: 1..1000");
			seq = window(o, admin, backlogs[i], (int) batches[k], seq, fill_s);
		}
	}
	system_reset(admin, o->system);
	PQfinish(admin);
}
