/*
 * latency.c: the latency workload.  A producer connection enqueues jobs one
 * at a time (autocommit); a worker thread on its own connection LISTENs on
 * the system's channel and, after every wake-up (or every poll_ms without
 * one), claims/leases until nothing is left.  Each sample is enqueue call
 * start -> claim/lease call returned, recorded in a sig-fig histogram in
 * microseconds.  The producer starts the next enqueue as soon as the worker
 * has leased the previous job (silo: while the worker completes it, as with
 * silo-worker in workerlat.c).  The run stops
 * early after --max-seconds; the output then counts the samples taken.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "loadgen.h"

#define LAT_WARMUP 50			/* samples discarded before recording */

/* State shared by the producer and the worker thread. */
typedef struct lat_shared
{
	const lg_opts *o;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	double		t_enqueue;		/* start of the current enqueue call */
	long		taken;			/* jobs taken so far */
	long		recording_from; /* record samples of jobs >= this */
	int			stop;
	int			ready;
	lg_hist		hist;
} lat_shared;

/* on_leased: a lease/claim returned n jobs at t_leased: record the sample
 * and let the producer go on (before the worker completes the job). */
static void
on_leased(void *arg, int n, double t_leased)
{
	lat_shared *sh = arg;

	if (n == 0)
		return;
	pthread_mutex_lock(&sh->mu);
	if (sh->taken >= sh->recording_from)
	{
		double		us = (t_leased - sh->t_enqueue) * 1e6;

		hist_record(&sh->hist, us < 0 ? 0 : (uint64_t) us);
	}
	sh->taken += n;
	pthread_cond_broadcast(&sh->cv);
	pthread_mutex_unlock(&sh->mu);
}

/* worker_thread: LISTEN, then take jobs whenever woken, timing each take. */
static void *
worker_thread(void *arg)
{
	lat_shared *sh = arg;
	PGconn	   *conn = db_connect(sh->o->conninfo);
	char		listen[96];

	snprintf(listen, sizeof(listen), "LISTEN %s", system_channel(sh->o->system));
	db_exec(conn, listen);
	system_prepare_latency(NULL, conn, sh->o->system);
	pthread_mutex_lock(&sh->mu);
	sh->ready = 1;
	pthread_cond_broadcast(&sh->cv);
	pthread_mutex_unlock(&sh->mu);
	for (;;)
	{
		pthread_mutex_lock(&sh->mu);
		if (sh->stop)
		{
			pthread_mutex_unlock(&sh->mu);
			break;
		}
		pthread_mutex_unlock(&sh->mu);
		if (system_take_one(conn, sh->o->system, "loadgen-lat", sh->o, on_leased, sh) == 0)
			db_wait_for_wakeup(conn, sh->o->poll_ms);
	}
	PQfinish(conn);
	return NULL;
}

/* run_latency: o->jobs sequential enqueues (after LAT_WARMUP unrecorded
 * ones), each awaited until the worker has taken it; prints the line. */
void
run_latency(const lg_opts *o)
{
	long		count = o->jobs;
	lg_result	res,
			   *r = &res;
	lat_shared *sh = xcalloc(1, sizeof(lat_shared));
	PGconn	   *prod = db_connect(o->conninfo);
	pthread_t	tid;
	long		total = count + LAT_WARMUP;
	double		t0;

	result_init(r, o);
	sh->o = o;
	sh->recording_from = LAT_WARMUP;
	hist_init(&sh->hist);
	pthread_mutex_init(&sh->mu, NULL);
	pthread_cond_init(&sh->cv, NULL);
	system_reset(prod, o->system);
	system_prime(o->conninfo, o->system, 2000);
	system_prepare_latency(prod, NULL, o->system);
	if (pthread_create(&tid, NULL, worker_thread, sh) != 0)
		die("pthread_create failed");
	pthread_mutex_lock(&sh->mu);
	while (!sh->ready)
		pthread_cond_wait(&sh->cv, &sh->mu);
	pthread_mutex_unlock(&sh->mu);

	t0 = now_sec();
	for (long i = 0; i < total; i++)
	{
		if (now_sec() - t0 > o->max_seconds)
		{
			fprintf(stderr, "silo-loadgen: latency stopped after %.0f s at %ld of %ld\n",
					o->max_seconds, i, total);
			total = i;
			break;
		}
		pthread_mutex_lock(&sh->mu);
		sh->t_enqueue = now_sec();
		pthread_mutex_unlock(&sh->mu);
		system_enqueue_one(prod, o->system, i);
		pthread_mutex_lock(&sh->mu);
		while (sh->taken < i + 1)
			pthread_cond_wait(&sh->cv, &sh->mu);
		pthread_mutex_unlock(&sh->mu);
	}
	r->seconds = now_sec() - t0;

	pthread_mutex_lock(&sh->mu);
	sh->stop = 1;
	pthread_mutex_unlock(&sh->mu);
	/* wake the worker out of its poll */
	if (o->system == SYS_BARE)
		db_exec(prod, "NOTIFY bench_bare_ready");
	else
		db_exec(prod, "NOTIFY silo_task_ready, 'loadgen-stop'");
	pthread_join(tid, NULL);
	system_reset(prod, o->system);
	PQfinish(prod);

	r->jobs = (long) sh->hist.total;
	r->rate = total / r->seconds;
	hist_to_result(&sh->hist, r);
	result_add(r, ",\"partial\":%s", r->jobs < count ? "true" : "false");
	result_print(o, r);
	pthread_mutex_destroy(&sh->mu);
	pthread_cond_destroy(&sh->cv);
	free(sh);
}
