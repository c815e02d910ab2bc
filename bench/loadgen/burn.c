/*
 * burn.c: the burn-down workload.  Pre-insert N jobs with the system's bulk
 * path, then `clients` threads (one connection each) drain them in batches.
 * The clock starts when every thread is connected and prepared (a barrier)
 * and stops when the completion that brings the committed count to N has
 * returned from COMMIT; rate = N / that time.  Afterwards the queue is
 * checked to be empty.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "loadgen.h"

/* State shared by the drain threads of one run. */
typedef struct burn_shared
{
	const lg_opts *o;
	long		jobs;
	pthread_barrier_t ready;	/* all connected and prepared */
	atomic_long done;			/* jobs whose completion has committed */
	atomic_long last_progress_ms;	/* for the stall check */
	double		t_start;
	double		t_end;			/* set by the thread that reached jobs */
} burn_shared;

/* One drain thread's arguments. */
typedef struct burn_thread
{
	burn_shared *sh;
	int			index;
	pthread_t	tid;
} burn_thread;

/* drain_thread: claim and complete batches until every job is done. */
static void *
drain_thread(void *arg)
{
	burn_thread *t = arg;
	burn_shared *sh = t->sh;
	char		worker[32];
	PGconn	   *conn = db_connect(sh->o->conninfo);
	double		idle_since = 0;

	snprintf(worker, sizeof(worker), "loadgen-%d", t->index);
	system_prepare_worker(conn, sh->o->system, sh->o);
	pthread_barrier_wait(&sh->ready);
	while (atomic_load(&sh->done) < sh->jobs)
	{
		int			n = system_take_batch(conn, sh->o->system, worker, sh->o);

		if (n > 0)
		{
			long		before = atomic_fetch_add(&sh->done, n);

			if (before < sh->jobs && before + n >= sh->jobs)
				sh->t_end = now_sec();
			idle_since = 0;
			continue;
		}
		/* nothing claimable: the rest is held by other threads, or lost */
		if (idle_since == 0)
			idle_since = now_sec();
		else if (now_sec() - idle_since > 30)
			die("burn: no job claimable for 30 s with %ld of %ld done",
				atomic_load(&sh->done), sh->jobs);
		sleep_ms(1);
	}
	PQfinish(conn);
	return NULL;
}

/* burn_once: fill `jobs` jobs, drain them, and return the seconds taken. */
static double
burn_once(const lg_opts *o, PGconn *admin, long jobs)
{
	burn_shared sh = {.o = o, .jobs = jobs};
	burn_thread *th = calloc(o->clients, sizeof(burn_thread));
	long		left;

	if (th == NULL)
		die("out of memory");
	system_reset(admin, o->system);
	system_fill(admin, o->system, jobs);
	atomic_init(&sh.done, 0);
	pthread_barrier_init(&sh.ready, NULL, o->clients + 1);
	for (int i = 0; i < o->clients; i++)
	{
		th[i].sh = &sh;
		th[i].index = i;
		if (pthread_create(&th[i].tid, NULL, drain_thread, &th[i]) != 0)
			die("pthread_create failed");
	}
	pthread_barrier_wait(&sh.ready);
	sh.t_start = now_sec();
	for (int i = 0; i < o->clients; i++)
		pthread_join(th[i].tid, NULL);
	pthread_barrier_destroy(&sh.ready);
	free(th);
	left = system_remaining(admin, o->system);
	if (left != 0)
		die("burn: %ld jobs left in the queue after the drain", left);
	return sh.t_end - sh.t_start;
}

/* run_burn: the burn workload.  With o->jobs == 0, calibration drains
 * first size N so that the measured drain takes about o->seconds: the
 * calibration size grows 4x until a drain lasts at least a tenth of the
 * budget (tiny queues drain faster than big ones, so extrapolating from a
 * drain of a few milliseconds overshoots badly). */
void
run_burn(const lg_opts *o, lg_result *r)
{
	PGconn	   *admin = db_connect(o->conninfo);
	long		jobs = o->jobs;
	double		secs;

	if (jobs <= 0)
	{
		long		calib = 25L * o->batch * o->clients;

		if (calib < 300)
			calib = 300;
		if (calib > 5000)
			calib = 5000;
		for (;;)
		{
			secs = burn_once(o, admin, calib);
			fprintf(stderr, "silo-loadgen: calibration %ld jobs in %.3f s\n", calib, secs);
			if (secs >= o->seconds / 10 || calib * 4 > o->max_jobs)
				break;
			calib *= 4;
		}
		jobs = (long) (calib / secs * o->seconds);
		if (jobs < 300)
			jobs = 300;
		if (jobs > o->max_jobs)
			jobs = o->max_jobs;
		fprintf(stderr, "silo-loadgen: measuring with %ld jobs\n", jobs);
	}
	secs = burn_once(o, admin, jobs);
	system_reset(admin, o->system);
	PQfinish(admin);
	r->jobs = jobs;
	r->seconds = secs;
	r->rate = jobs / secs;
}
