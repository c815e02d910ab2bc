/*
 * burn.c: the burn-down and held-snapshot workloads.
 *
 * Burn-down: pre-insert N jobs with the system's bulk path, then `clients`
 * threads (one connection each) drain them in batches.  The clock starts
 * when every thread is connected and prepared (a barrier) and stops when
 * the completion that brings the committed count to N has returned from
 * COMMIT; rate = N / that time.  Afterwards the queue is checked to be
 * empty.  A drain still running after --max-seconds is stopped and reported
 * as partial (rate = jobs done / time).
 *
 * Held snapshot: the same burn-down twice with the same N, first as is,
 * then while another session sits idle in a REPEATABLE READ transaction
 * whose snapshot was taken before the drain started, so vacuum can remove
 * nothing the drain deletes.
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
	double		t_start;
	double		t_end;			/* set by the thread that reached jobs */
	pthread_mutex_t mu;
	double		t_stopped;		/* latest early stop (max_seconds) */
} burn_shared;

/* One drain thread's arguments. */
typedef struct burn_thread
{
	burn_shared *sh;
	int			index;
	pthread_t	tid;
} burn_thread;

/* drain_thread: claim and complete batches until every job is done or the
 * time is up. */
static void *
drain_thread(void *arg)
{
	burn_thread *t = arg;
	burn_shared *sh = t->sh;
	char		worker[32];
	PGconn	   *conn = db_connect(sh->o->conninfo);
	double		idle_since = 0,
				deadline;

	snprintf(worker, sizeof(worker), "loadgen-%d", t->index);
	system_prepare_worker(conn, sh->o->system);
	pthread_barrier_wait(&sh->ready);
	deadline = now_sec() + sh->o->max_seconds;
	while (atomic_load(&sh->done) < sh->jobs)
	{
		int			n;

		if (now_sec() > deadline)
		{
			note_stop(&sh->mu, &sh->t_stopped);
			break;
		}
		n = system_take_batch(conn, sh->o->system, worker, sh->o);
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

/* burn_once: fill `jobs` jobs, drain them (with hold: while another session
 * holds a REPEATABLE READ snapshot taken after the fill), and fill st with
 * the time taken, dead tuples and table sizes. */
void
burn_once(const lg_opts *o, PGconn *admin, long jobs, int hold, burn_stats *st)
{
	burn_shared sh = {.o = o, .jobs = jobs};
	burn_thread *th = xcalloc(o->clients, sizeof(burn_thread));
	PGconn	   *held = NULL;

	system_reset(admin, o->system);
	system_fill(admin, o->system, jobs);
	st->jobs = jobs;
	st->size_before = system_size(admin, o->system);
	if (hold)
	{
		held = db_connect_as(o->conninfo, "silo-loadgen-held");
		db_exec(held, "BEGIN ISOLATION LEVEL REPEATABLE READ");
		db_exec(held, "SELECT 1");	/* the snapshot is taken here */
	}
	atomic_init(&sh.done, 0);
	pthread_mutex_init(&sh.mu, NULL);
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
	pthread_mutex_destroy(&sh.mu);
	free(th);
	st->done = atomic_load(&sh.done);
	if (st->done >= jobs)
		st->seconds = sh.t_end - sh.t_start;
	else
	{
		st->seconds = sh.t_stopped - sh.t_start;
		fprintf(stderr, "silo-loadgen: drain stopped after %.1f s with %ld of %ld done\n",
				st->seconds, st->done, jobs);
	}
	db_wait_for_backends(admin);
	st->dead_tuples = system_dead_tuples(admin, o->system);
	st->size_after = system_size(admin, o->system);
	if (held != NULL)
	{
		db_exec(held, "COMMIT");
		PQfinish(held);
	}
	if (st->done >= jobs)
	{
		long		left = system_remaining(admin, o->system);

		if (left != 0)
			die("burn: %ld jobs left in the queue after the drain", left);
	}
}

/* add_burn_fields: the burn figures every burn-like line carries. */
static void
add_burn_fields(const lg_opts *o, const burn_stats *st, lg_result *r)
{
	r->jobs = st->done;
	r->seconds = st->seconds;
	r->rate = st->done / st->seconds;
	result_add(r, ",\"finish\":\"%s\",\"filled\":%ld,\"partial\":%s,"
			   "\"dead_tuples\":%ld,\"size_before\":%ld,\"size_after\":%ld",
			   system_finish_kind(o->system), st->jobs,
			   st->done < st->jobs ? "true" : "false",
			   st->dead_tuples, st->size_before, st->size_after);
}

/* calibrate: with o->jobs == 0, size N so that the measured drain takes
 * about o->seconds: the calibration size grows 4x until a drain lasts at
 * least a tenth of the budget (tiny queues drain faster than big ones, so
 * extrapolating from a drain of a few milliseconds overshoots badly). */
static long
calibrate(const lg_opts *o, PGconn *admin)
{
	long		calib = 25L * o->batch * o->clients,
				jobs;
	burn_stats	st;

	if (o->jobs > 0)
		return o->jobs;
	if (calib < 300)
		calib = 300;
	if (calib > 5000)
		calib = 5000;
	for (;;)
	{
		burn_once(o, admin, calib, 0, &st);
		fprintf(stderr, "silo-loadgen: calibration %ld jobs in %.3f s\n", calib, st.seconds);
		if (st.done < calib || st.seconds >= o->seconds / 10 || calib * 4 > o->max_jobs)
			break;
		calib *= 4;
	}
	jobs = (long) (st.done / st.seconds * o->seconds);
	if (jobs < 300)
		jobs = 300;
	if (jobs > o->max_jobs)
		jobs = o->max_jobs;
	fprintf(stderr, "silo-loadgen: measuring with %ld jobs\n", jobs);
	return jobs;
}

/* run_burn: the burn workload: calibrate (unless --jobs), drain, print. */
void
run_burn(const lg_opts *o)
{
	PGconn	   *admin = db_connect(o->conninfo);
	long		jobs = calibrate(o, admin);
	burn_stats	st;
	lg_result	r;

	burn_once(o, admin, jobs, 0, &st);
	system_reset(admin, o->system);
	PQfinish(admin);
	result_init(&r, o);
	add_burn_fields(o, &st, &r);
	result_print(o, &r);
}

/* run_held: the held-snapshot workload: the burn-down without, then with a
 * session idle in a REPEATABLE READ transaction; one line for each, the
 * second also with the ratio of the two rates. */
void
run_held(const lg_opts *o)
{
	PGconn	   *admin = db_connect(o->conninfo);
	long		jobs = calibrate(o, admin);
	burn_stats	st[2];
	lg_result	r;

	for (int hold = 0; hold <= 1; hold++)
	{
		burn_once(o, admin, jobs, hold, &st[hold]);
		result_init(&r, o);
		add_burn_fields(o, &st[hold], &r);
		result_add(&r, ",\"held\":%s", hold ? "true" : "false");
		if (hold)
			result_add(&r, ",\"ratio\":%.3f",
					   (st[1].done / st[1].seconds) / (st[0].done / st[0].seconds));
		result_print(o, &r);
	}
	system_reset(admin, o->system);
	PQfinish(admin);
}
