/*
 * limits.c: the concurrency-limits workload (silo only).
 *
 * For each mode of --modes the queue is filled with --jobs jobs (default
 * 20,000) through silo.enqueue_many, each with one concurrency limit whose
 * key is drawn uniformly (none: no limit; k100k: 100,000 keys, max 1; k1k:
 * 1,000 keys, max 10; hot: one key, max 50) and written into the payload
 * too; then VACUUM ANALYZE and CHECKPOINT.  --clients threads drain it like
 * a real worker, in separate transactions: an autocommit silo.lease of
 * --batch tasks, then one autocommit completion of the batch (its return is
 * the COMMIT returning, which is what frees the slots).  Every job's
 * interval [lease returned, completion returned] is recorded with its key
 * (monotonic clock, per-thread arrays merged at the end).  Overshoot = for
 * each key, the largest number of overlapping intervals minus the key's
 * max, maximised over keys; it must be <= 0.  Since a slot is free for
 * other workers as soon as the completion commits, a little before its
 * reply arrives, the same count over [lease returned, completion call
 * started] (intervals that certainly lie inside the slot's true holding
 * time) is reported too as "overshoot_certain".  And since both
 * statements also return their transaction id, the exact interval
 * [lease committed, completion committed] is read afterwards from
 * pg_xact_commit_timestamp (needs track_commit_timestamp = on, else null):
 * "overshoot_commit" counts those.  Rate = jobs / time until the last
 * completion returned.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen.h"

/* One job's holding interval. */
typedef struct hold
{
	long		key;
	double		leased;			/* lease call returned */
	double		completing;		/* completion call started */
	double		completed;		/* completion call (its COMMIT) returned */
	long		lease_xid;		/* txid_current() of the lease */
	long		done_xid;		/* ... and of the completion */
} hold;

/* Which interval of a hold the overlap sweep counts. */
typedef enum
{
	IV_RETURNED,				/* [lease returned, completion returned] */
	IV_CERTAIN,					/* [lease returned, completion started] */
	IV_COMMIT					/* [lease committed, completion committed] */
} interval_kind;

/* A transaction id and its commit time. */
typedef struct xid_time
{
	long		xid;
	double		t;
} xid_time;

/* One event of the overlap sweep. */
typedef struct sweep_event
{
	long		key;
	double		t;
	int			delta;			/* +1 lease, -1 completion */
} sweep_event;

/* State shared by the drain threads. */
typedef struct limits_shared
{
	const lg_opts *o;
	long		jobs;
	pthread_barrier_t ready;
	atomic_long done;
	double		t_start,
				t_end;
	pthread_mutex_t mu;
	double		t_stopped;
} limits_shared;

/* One drain thread: its arguments and its intervals. */
typedef struct limits_thread
{
	limits_shared *sh;
	int			index;
	pthread_t	tid;
	hold	   *holds;
	long		nholds,
				cap;
} limits_thread;

/* lease_batch: one autocommit silo.lease of o->batch tasks; the rows carry
 * task_id, payload and the lease's transaction id. */
static PGresult *
lease_batch(PGconn *conn, const char *worker, const lg_opts *o)
{
	char		b[16],
				l[16];
	const char *p[3] = {worker, b, l};

	snprintf(b, sizeof(b), "%d", o->batch);
	snprintf(l, sizeof(l), "%d", o->lease_ms);
	return db_exec_prepared(conn, "lclaim", 3, p);
}

/* finish_batch: complete every task of a lease result in one autocommit
 * statement (its return is its COMMIT returning); returns the completing
 * transaction's id. */
static long
finish_batch(PGconn *conn, const char *worker, PGresult *leased)
{
	char	   *arr = ids_to_array(leased);
	const char *p[2] = {worker, arr};
	PGresult   *res = db_exec_prepared(conn, "lfinish", 2, p);
	long		xid;

	if (strtol(PQgetvalue(res, 0, 0), NULL, 10) != PQntuples(leased))
		die("silo completed %s of %d leased tasks", PQgetvalue(res, 0, 0), PQntuples(leased));
	xid = strtol(PQgetvalue(res, 0, 1), NULL, 10);
	PQclear(res);
	free(arr);
	return xid;
}

/* drain_thread: lease, then complete, in separate transactions, recording
 * every job's interval, until all jobs are done or the time is up. */
static void *
drain_thread(void *arg)
{
	limits_thread *t = arg;
	limits_shared *sh = t->sh;
	const lg_opts *o = sh->o;
	PGconn	   *conn = db_connect(o->conninfo);
	char		worker[32];
	double		idle_since = 0,
				deadline;

	snprintf(worker, sizeof(worker), "loadgen-%d", t->index);
	system_prepare_limits(conn);
	pthread_barrier_wait(&sh->ready);
	deadline = now_sec() + o->max_seconds;
	while (atomic_load(&sh->done) < sh->jobs)
	{
		PGresult   *res;
		double		t_leased,
					t_completing,
					t_completed;
		int			n;
		long		before,
					xid;

		if (now_sec() > deadline)
		{
			note_stop(&sh->mu, &sh->t_stopped);
			break;
		}
		res = lease_batch(conn, worker, o);
		t_leased = now_sec();
		n = PQntuples(res);
		if (n == 0)
		{
			PQclear(res);
			if (idle_since == 0)
				idle_since = now_sec();
			else if (now_sec() - idle_since > 30)
				die("limits: no job leasable for 30 s with %ld of %ld done",
					atomic_load(&sh->done), sh->jobs);
			sleep_ms(1);
			continue;
		}
		idle_since = 0;
		if (t->nholds + n > t->cap)
		{
			t->cap = (t->cap + n) * 2;
			t->holds = realloc(t->holds, t->cap * sizeof(hold));
			if (t->holds == NULL)
				die("out of memory");
		}
		for (int i = 0; i < n; i++)
		{
			t->holds[t->nholds + i].key = json_long(PQgetvalue(res, i, 1), "k", -1);
			t->holds[t->nholds + i].lease_xid = strtol(PQgetvalue(res, i, 2), NULL, 10);
		}
		t_completing = now_sec();
		xid = finish_batch(conn, worker, res);
		t_completed = now_sec();
		PQclear(res);
		for (int i = 0; i < n; i++)
		{
			hold	   *h = &t->holds[t->nholds++];

			h->leased = t_leased;
			h->completing = t_completing;
			h->completed = t_completed;
			h->done_xid = xid;
		}
		before = atomic_fetch_add(&sh->done, n);
		if (before < sh->jobs && before + n >= sh->jobs)
			sh->t_end = t_completed;
	}
	PQfinish(conn);
	return NULL;
}

/* event_cmp: order sweep events by key, then time, completions first at
 * equal times (an interval that ends when another starts does not
 * overlap it). */
static int
event_cmp(const void *a, const void *b)
{
	const sweep_event *x = a,
			   *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return x->delta - y->delta;
}

/* xid_cmp: order xid_time entries by transaction id. */
static int
xid_cmp(const void *a, const void *b)
{
	const xid_time *x = a,
			   *y = b;

	return x->xid < y->xid ? -1 : x->xid > y->xid;
}

/* commit_times: the commit time (epoch seconds) of every transaction id of
 * the holds, sorted by xid, or NULL when the server does not record commit
 * timestamps; *n gets their number. */
static xid_time *
commit_times(PGconn *conn, const hold *h, long nh, long *n)
{
	xid_time   *xt = xcalloc(2 * nh, sizeof(xid_time));
	long		m = 0;
	char	   *buf,
			   *pos;
	const char *p[1];
	PGresult   *res;

	*n = 0;
	if (db_scalar_long(conn, "SELECT (current_setting('track_commit_timestamp') = 'on')::int") == 0)
	{
		free(xt);
		return NULL;
	}
	for (long i = 0; i < nh; i++)
	{
		xt[m++].xid = h[i].lease_xid;
		xt[m++].xid = h[i].done_xid;
	}
	qsort(xt, m, sizeof(xid_time), xid_cmp);
	buf = pos = xcalloc(m + 1, 24);
	*pos++ = '{';
	for (long i = 0, k = 0; i < m; i++)
		if (i == 0 || xt[i].xid != xt[i - 1].xid)
		{
			xt[k++] = xt[i];
			pos += sprintf(pos, "%s%ld", *n > 0 ? "," : "", xt[i].xid);
			*n = k;
		}
	strcpy(pos, "}");
	p[0] = buf;
	res = PQexecParams(conn,
					   "SELECT x, extract(epoch FROM pg_xact_commit_timestamp("
					   "(x % 4294967296)::text::xid)) FROM unnest($1::bigint[]) x ORDER BY x",
					   1, NULL, p, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != *n)
		die("commit timestamps: %s", PQerrorMessage(conn));
	for (long i = 0; i < *n; i++)
	{
		if (PQgetisnull(res, i, 1))
			die("no commit timestamp for transaction %s", PQgetvalue(res, i, 0));
		xt[i].t = strtod(PQgetvalue(res, i, 1), NULL);
	}
	PQclear(res);
	free(buf);
	return xt;
}

/* commit_time: the commit time of xid in a commit_times array. */
static double
commit_time(const xid_time *xt, long n, long xid)
{
	xid_time	key = {.xid = xid};
	xid_time   *hit = bsearch(&key, xt, n, sizeof(xid_time), xid_cmp);

	if (hit == NULL)
		die("transaction %ld lost", xid);
	return hit->t;
}

/* max_overlap: the largest number of intervals of one key that overlap,
 * over all keys, counting the intervals of the given kind (IV_COMMIT needs
 * xt).  *keys gets the number of distinct keys. */
static long
max_overlap(const hold *h, long n, interval_kind kind, const xid_time *xt,
			long nxt, long *keys)
{
	sweep_event *ev = xcalloc(2 * n, sizeof(sweep_event));
	long		best = 0,
				cur = 0;

	for (long i = 0; i < n; i++)
	{
		double		a = h[i].leased,
					b = kind == IV_CERTAIN ? h[i].completing : h[i].completed;

		if (kind == IV_COMMIT)
		{
			a = commit_time(xt, nxt, h[i].lease_xid);
			b = commit_time(xt, nxt, h[i].done_xid);
		}
		ev[2 * i] = (sweep_event) {h[i].key, a, +1};
		ev[2 * i + 1] = (sweep_event) {h[i].key, b, -1};
	}
	qsort(ev, 2 * n, sizeof(sweep_event), event_cmp);
	*keys = 0;
	for (long i = 0; i < 2 * n; i++)
	{
		if (i == 0 || ev[i].key != ev[i - 1].key)
		{
			cur = 0;
			(*keys)++;
		}
		cur += ev[i].delta;
		if (cur > best)
			best = cur;
	}
	free(ev);
	return best;
}

/* limits_once: fill and drain one mode; prints its line and returns its
 * rate. */
static double
limits_once(const lg_opts *o, PGconn *admin, const char *mode, long jobs,
			double base_rate)
{
	limits_shared sh = {.o = o, .jobs = jobs};
	limits_thread *th = xcalloc(o->clients, sizeof(limits_thread));
	hold	   *all;
	xid_time   *xt;
	long		n = 0,
				done,
				keys,
				over,
				over_certain,
				over_commit = -1,
				nxt;
	int			key_max = strcmp(mode, "k100k") == 0 ? 1 :
		strcmp(mode, "k1k") == 0 ? 10 : strcmp(mode, "hot") == 0 ? 50 : 0;
	double		t0 = now_sec(),
				fill_s,
				secs;
	lg_result	r;

	system_reset(admin, SYS_SILO);
	system_fill_limited(admin, mode, jobs);
	fill_s = now_sec() - t0;
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
	{
		pthread_join(th[i].tid, NULL);
		n += th[i].nholds;
	}
	pthread_barrier_destroy(&sh.ready);
	pthread_mutex_destroy(&sh.mu);
	all = xcalloc(n, sizeof(hold));
	n = 0;
	for (int i = 0; i < o->clients; i++)
	{
		memcpy(all + n, th[i].holds, th[i].nholds * sizeof(hold));
		n += th[i].nholds;
		free(th[i].holds);
	}
	free(th);
	done = atomic_load(&sh.done);
	secs = done >= jobs ? sh.t_end - sh.t_start : sh.t_stopped - sh.t_start;
	if (done >= jobs && system_remaining(admin, SYS_SILO) != 0)
		die("limits %s: jobs left in the queue after the drain", mode);
	over = max_overlap(all, n, IV_RETURNED, NULL, 0, &keys);
	over_certain = max_overlap(all, n, IV_CERTAIN, NULL, 0, &keys);
	xt = commit_times(admin, all, n, &nxt);
	if (xt != NULL)
		over_commit = max_overlap(all, n, IV_COMMIT, xt, nxt, &keys);
	free(xt);
	free(all);

	result_init(&r, o);
	r.jobs = done;
	r.seconds = secs;
	r.rate = done / secs;
	result_add(&r, ",\"mode\":\"%s\",\"key_max\":%d,\"keys\":%ld,\"max_overlap\":%ld,"
			   "\"max_overlap_certain\":%ld",
			   mode, key_max, keys, over, over_certain);
	if (over_commit >= 0)
		result_add(&r, ",\"max_overlap_commit\":%ld", over_commit);
	if (key_max > 0)
		result_add(&r, ",\"overshoot\":%ld,\"overshoot_certain\":%ld",
				   over - key_max, over_certain - key_max);
	else
		result_add(&r, ",\"overshoot\":null,\"overshoot_certain\":null");
	if (key_max > 0 && over_commit >= 0)
		result_add(&r, ",\"overshoot_commit\":%ld", over_commit - key_max);
	else
		result_add(&r, ",\"overshoot_commit\":null");
	if (base_rate > 0)
		result_add(&r, ",\"ratio\":%.3f", r.rate / base_rate);
	result_add(&r, ",\"partial\":%s,\"fill_s\":%.1f,\"finish\":\"%s\"",
			   done < jobs ? "true" : "false", fill_s, system_finish_kind(SYS_SILO));
	result_print(o, &r);
	return r.rate;
}

/* run_limits: every mode of o->modes, in order; "none" first gives the
 * others their ratio. */
void
run_limits(const lg_opts *o)
{
	PGconn	   *admin = db_connect(o->conninfo);
	char	   *modes = strdup(o->modes),
			   *save = NULL;
	long		jobs = o->jobs > 0 ? o->jobs : 20000;
	double		base = 0;

	for (char *m = strtok_r(modes, ",", &save); m != NULL; m = strtok_r(NULL, ",", &save))
	{
		double		rate = limits_once(o, admin, m, jobs, base);

		if (strcmp(m, "none") == 0)
			base = rate;
	}
	system_reset(admin, SYS_SILO);
	PQfinish(admin);
	free(modes);
}
