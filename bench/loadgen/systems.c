/*
 * systems.c: the SQL that drives each queue system.
 *
 * bare  a minimal table bench_bare(id bigserial primary key, payload jsonb,
 *       run_at timestamptz).  A worker claims a batch with
 *       SELECT ... ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED and deletes the
 *       claimed ids in the same transaction (BEGIN; claim; DELETE; COMMIT),
 *       the same shape as silo's lease-then-complete.  In the latency
 *       workload the claim is one autocommit DELETE ... RETURNING.
 * silo  silo.lease(worker, group, n, lease_ms) then silo.complete_many of
 *       the leased tasks (or, on a silo without complete_many, silo.complete
 *       for each of them in one statement), one transaction per batch
 *       (BEGIN; lease; complete; COMMIT), through prepared statements.  In
 *       the latency workload the lease is autocommit, as a real worker does
 *       it, and the completion follows in its own transaction.
 *
 * Every payload written here is a flat JSON object with integer values
 * ("i": fill order, "t": enqueue time in microseconds, "k": limit key),
 * which the workloads read back with json_long.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen.h"

#define FILL_CHUNK 1000

/* silo.complete_many exists in the database (system_detect). */
static int	have_complete_many = -1;	/* -1: not looked up yet */

/* system_name: the name used on the command line and in the output. */
const char *
system_name(lg_system s)
{
	return s == SYS_BARE ? "bare" : "silo";
}

/* system_channel: the LISTEN channel on which the system wakes workers. */
const char *
system_channel(lg_system s)
{
	return s == SYS_BARE ? "bench_bare_ready" : "silo_task_ready";
}

/* system_detect: look up once whether silo.complete_many exists and works
 * (one call with an empty array), so that workers use the batched
 * completion when the installed silo has it; a broken one is reported on
 * stderr and the per-task fallback is used. */
void
system_detect(PGconn *conn, lg_system s)
{
	PGresult   *res;

	have_complete_many = 0;
	if (s != SYS_SILO ||
		!db_scalar_long(conn,
						"SELECT (to_regprocedure('silo.complete_many(uuid[],text,jsonb[])')"
						" IS NOT NULL)::int"))
		return;
	res = PQexec(conn, "SELECT count(*) FROM silo.complete_many('{}'::uuid[], 'loadgen-probe')");
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
		have_complete_many = 1;
	else
	{
		const char *msg = PQresultErrorMessage(res);

		fprintf(stderr, "silo-loadgen: WARNING: silo.complete_many fails (%.*s);"
				" finishing with silo.complete\n", (int) strcspn(msg, "\n"), msg);
	}
	PQclear(res);
}

/* system_finish_kind: how batches are finished, for the JSON output. */
const char *
system_finish_kind(lg_system s)
{
	if (s == SYS_BARE)
		return "delete";
	if (have_complete_many < 0)
		die("system_detect was not called");
	return have_complete_many ? "complete_many" : "complete";
}

/* system_reset: empty the system's queue (bare: recreate its table). */
void
system_reset(PGconn *conn, lg_system s)
{
	if (s == SYS_BARE)
	{
		db_exec(conn, "DROP TABLE IF EXISTS bench_bare");
		db_exec(conn, "CREATE TABLE bench_bare (id bigserial PRIMARY KEY,"
				" payload jsonb NOT NULL DEFAULT '{}',"
				" run_at timestamptz NOT NULL DEFAULT now())");
		return;
	}
	/*
	 * every table of schema silo holds queue data: truncate them all.  The
	 * broker and pg_cron's purge lock some of them in another order, so a
	 * deadlock is retried.
	 */
	db_exec(conn,
			"DO $$ BEGIN"
			" FOR i IN 1 .. 50 LOOP"
			"  BEGIN"
			"   EXECUTE (SELECT 'TRUNCATE ' || string_agg("
			"     format('%I.%I', schemaname, tablename), ', ') FROM pg_tables"
			"     WHERE schemaname = 'silo');"
			"   RETURN;"
			"  EXCEPTION WHEN deadlock_detected THEN PERFORM pg_sleep(0.1);"
			"  END;"
			" END LOOP;"
			" RAISE EXCEPTION 'could not empty schema silo: deadlocks';"
			" END $$");
}

/* system_fill_range: enqueue jobs from..to (payload {"i": n}) with the
 * system's bulk path, without vacuuming: silo.enqueue_many in chunks of
 * FILL_CHUNK, bare one INSERT ... SELECT. */
void
system_fill_range(PGconn *conn, lg_system s, long from, long to_incl)
{
	char		sql[512];

	if (s == SYS_BARE)
	{
		snprintf(sql, sizeof(sql),
				 "INSERT INTO bench_bare (payload, run_at)"
				 " SELECT jsonb_build_object('i', g), now()"
				 " FROM generate_series(%ld, %ld) g", from, to_incl);
		db_exec(conn, sql);
		return;
	}
	for (long lo = from; lo <= to_incl; lo += FILL_CHUNK)
	{
		long		hi = lo + FILL_CHUNK - 1;

		if (hi > to_incl)
			hi = to_incl;
		snprintf(sql, sizeof(sql),
				 "SELECT count(*) FROM silo.enqueue_many((SELECT jsonb_agg("
				 "jsonb_build_object('task_group', '" LG_GROUP "',"
				 " 'payload', jsonb_build_object('i', g)))"
				 " FROM generate_series(%ld, %ld) g))", lo, hi);
		db_exec(conn, sql);
	}
}

/* system_fill: pre-insert jobs with the system's bulk path, then vacuum,
 * analyze and checkpoint so every cell starts from the same state. */
void
system_fill(PGconn *conn, lg_system s, long jobs)
{
	system_fill_range(conn, s, 1, jobs);
	db_exec(conn, "VACUUM ANALYZE");
	db_exec(conn, "CHECKPOINT");
}

/* system_prime: give an emptied queue the statistics of one with a
 * history: enqueue n jobs, ANALYZE, then drain them all (BEGIN; claim 1000;
 * complete; COMMIT) on a connection of its own.  silo keeps finished jobs
 * in job_info, and a plan that silo caches while ANALYZE says job_info is
 * empty can join it by a full index scan per leased task, which gets
 * slower as the table grows (see bench/README.md); a real deployment's
 * tables are rarely analyzed empty, so the steady and latency workloads
 * start from this state. */
void
system_prime(const char *conninfo, lg_system s, long n)
{
	PGconn	   *conn = db_connect(conninfo);
	PGresult   *res;
	int			got;

	system_prepare_worker(conn, s);
	system_fill_range(conn, s, 1, n);
	db_exec(conn, "ANALYZE");
	do
	{
		db_exec(conn, "BEGIN");
		res = system_claim(conn, s, "loadgen-prime", 1000, 30000);
		got = PQntuples(res);
		system_finish(conn, s, "loadgen-prime", res);
		PQclear(res);
		db_exec(conn, "COMMIT");
	} while (got > 0);
	PQfinish(conn);
}

/* system_fill_limited: enqueue `jobs` silo jobs with one concurrency limit
 * each, chosen by mode (none: no limit; k100k: key out of 100,000 max 1;
 * k1k: key out of 1,000 max 10; hot: one key max 50), keys uniform; the
 * payload carries the key number ("k") so the worker knows it.  Then waits
 * for the broker to walk deferred grants, vacuums and checkpoints. */
void
system_fill_limited(PGconn *conn, const char *mode, long jobs)
{
	const char *keys = "0";
	int			max = 0;
	char		limits[256],
				sql[1024];

	if (strcmp(mode, "k100k") == 0)
		keys = "floor(random() * 100000)::int", max = 1;
	else if (strcmp(mode, "k1k") == 0)
		keys = "floor(random() * 1000)::int", max = 10;
	else if (strcmp(mode, "hot") == 0)
		max = 50;
	else if (strcmp(mode, "none") != 0)
		die("unknown limits mode %s", mode);
	if (max == 0)
		snprintf(limits, sizeof(limits), "'[]'::jsonb");
	else
		snprintf(limits, sizeof(limits),
				 "jsonb_build_array(jsonb_build_object('type', 'concurrency',"
				 " 'key', 'k' || k, 'maxConcurrency', %d))", max);
	for (long lo = 1; lo <= jobs; lo += FILL_CHUNK)
	{
		long		hi = lo + FILL_CHUNK - 1;

		if (hi > jobs)
			hi = jobs;
		snprintf(sql, sizeof(sql),
				 "SELECT count(*) FROM silo.enqueue_many((SELECT jsonb_agg("
				 "jsonb_build_object('task_group', '" LG_GROUP "',"
				 " 'payload', jsonb_build_object('k', k), 'limits', %s))"
				 " FROM (SELECT %s AS k FROM generate_series(%ld, %ld)) g))",
				 limits, keys, lo, hi);
		db_exec(conn, sql);
	}
	/* the broker walks the grants enqueue handed to it */
	for (int i = 0; i < 600 &&
		 db_scalar_long(conn, "SELECT count(*) FROM silo.chain_task") > 0; i++)
		sleep_ms(100);
	db_exec(conn, "VACUUM ANALYZE");
	db_exec(conn, "CHECKPOINT");
}

/* system_remaining: jobs not yet completed (bare: rows left; silo: jobs not
 * in a terminal state). */
long
system_remaining(PGconn *conn, lg_system s)
{
	if (s == SYS_BARE)
		return db_scalar_long(conn, "SELECT count(*) FROM bench_bare");
	return db_scalar_long(conn,
						  "SELECT count(*) FROM silo.jobs"
						  " WHERE status NOT IN ('Succeeded', 'Failed', 'Cancelled')");
}

/* system_depth: the queue depth, jobs enqueued and not yet finished (bare:
 * rows; silo: pending tasks plus leased ones). */
long
system_depth(PGconn *conn, lg_system s)
{
	if (s == SYS_BARE)
		return db_scalar_long(conn, "SELECT count(*) FROM bench_bare");
	return db_scalar_long(conn,
						  "SELECT (SELECT count(*) FROM silo.task)"
						  " + (SELECT count(*) FROM silo.task_lease)");
}

/* system_dead_tuples: n_dead_tup summed over the system's tables (silo:
 * every table of schema silo; bare: bench_bare), as the statistics know it
 * now; call db_wait_for_backends first. */
long
system_dead_tuples(PGconn *conn, lg_system s)
{
	if (s == SYS_BARE)
		return db_scalar_long(conn,
							  "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables"
							  " WHERE schemaname = 'public' AND relname = 'bench_bare'");
	return db_scalar_long(conn,
						  "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables"
						  " WHERE schemaname = 'silo'");
}

/* system_size: total bytes (heap, indexes, TOAST) of the system's tables. */
long
system_size(PGconn *conn, lg_system s)
{
	if (s == SYS_BARE)
		return db_scalar_long(conn, "SELECT pg_total_relation_size('bench_bare')");
	return db_scalar_long(conn,
						  "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint"
						  " FROM pg_class c WHERE c.relkind = 'r'"
						  " AND c.relnamespace = 'silo'::regnamespace");
}

/* system_prepare_worker: prepare a worker's claim and finish statements. */
void
system_prepare_worker(PGconn *conn, lg_system s)
{
	if (s == SYS_BARE)
	{
		db_prepare(conn, "claim",
				   "SELECT id, payload FROM bench_bare WHERE run_at <= now()"
				   " ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED");
		db_prepare(conn, "finish", "DELETE FROM bench_bare WHERE id = ANY($1::bigint[])");
		return;
	}
	db_prepare(conn, "claim",
			   "SELECT task_id, payload FROM silo.lease($1, '" LG_GROUP "', $2::int, $3::int)");
	if (have_complete_many < 0)
		die("system_detect was not called");
	if (have_complete_many)
		db_prepare(conn, "finish",
				   "SELECT count(*) FROM silo.complete_many($2::uuid[], $1)");
	else
		db_prepare(conn, "finish",
				   "SELECT count(silo.complete(t, $1)) FROM unnest($2::uuid[]) t");
}

/* ids_to_array: the first column of res as a PostgreSQL array literal
 * (malloc'd). */
char *
ids_to_array(PGresult *res)
{
	int			n = PQntuples(res);
	size_t		len = 3,
				pos = 0;
	char	   *buf;

	for (int i = 0; i < n; i++)
		len += strlen(PQgetvalue(res, i, 0)) + 1;
	buf = malloc(len);
	if (buf == NULL)
		die("out of memory");
	buf[pos++] = '{';
	for (int i = 0; i < n; i++)
	{
		size_t		l = strlen(PQgetvalue(res, i, 0));

		if (i > 0)
			buf[pos++] = ',';
		memcpy(buf + pos, PQgetvalue(res, i, 0), l);
		pos += l;
	}
	buf[pos++] = '}';
	buf[pos] = '\0';
	return buf;
}

/* system_prepare_limits: the limits workload's silo statements, which
 * also return their transaction's id, so that the commit timestamps of
 * every lease and completion can be read afterwards: lclaim (lease) and
 * lfinish (complete the tasks of an array). */
void
system_prepare_limits(PGconn *conn)
{
	db_prepare(conn, "lclaim",
			   "SELECT task_id, payload, txid_current()"
			   " FROM silo.lease($1, '" LG_GROUP "', $2::int, $3::int)");
	if (have_complete_many < 0)
		die("system_detect was not called");
	if (have_complete_many)
		db_prepare(conn, "lfinish",
				   "SELECT count(*), txid_current() FROM silo.complete_many($2::uuid[], $1)");
	else
		db_prepare(conn, "lfinish",
				   "SELECT count(silo.complete(t, $1)), txid_current() FROM unnest($2::uuid[]) t");
}

/* system_claim: claim (bare) or lease (silo) up to batch jobs; the result
 * has the job's id in column 0 and its payload in column 1. */
PGresult *
system_claim(PGconn *conn, lg_system s, const char *worker, int batch,
			 int lease_ms)
{
	char		b[16],
				l[16];

	snprintf(b, sizeof(b), "%d", batch);
	snprintf(l, sizeof(l), "%d", lease_ms);
	if (s == SYS_BARE)
	{
		const char *p[1] = {b};

		return db_exec_prepared(conn, "claim", 1, p);
	}
	else
	{
		const char *p[3] = {worker, b, l};

		return db_exec_prepared(conn, "claim", 3, p);
	}
}

/* system_finish: complete (silo) or delete (bare) every job of a claim
 * result, in one statement; a silo completion that finds a task no longer
 * leased to this worker is fatal (the count would not match). */
void
system_finish(PGconn *conn, lg_system s, const char *worker, PGresult *claimed)
{
	int			n = PQntuples(claimed);
	char	   *arr;
	PGresult   *res;

	if (n == 0)
		return;
	arr = ids_to_array(claimed);
	if (s == SYS_BARE)
	{
		const char *p[1] = {arr};

		res = db_exec_prepared(conn, "finish", 1, p);
	}
	else
	{
		const char *p[2] = {worker, arr};

		res = db_exec_prepared(conn, "finish", 2, p);
		if (strtol(PQgetvalue(res, 0, 0), NULL, 10) != n)
			die("silo completed %s of %d leased tasks", PQgetvalue(res, 0, 0), n);
	}
	PQclear(res);
	free(arr);
}

/* system_take_batch: one burn transaction: claim up to o->batch jobs and
 * complete them.  Returns the number of jobs completed (committed). */
int
system_take_batch(PGconn *conn, lg_system s, const char *worker, const lg_opts *o)
{
	PGresult   *res;
	int			n;

	db_exec(conn, "BEGIN");
	res = system_claim(conn, s, worker, o->batch, o->lease_ms);
	n = PQntuples(res);
	system_finish(conn, s, worker, res);
	PQclear(res);
	db_exec(conn, "COMMIT");
	return n;
}

/* system_prepare_enqueue: prepare a producer's statements: enq1 enqueues
 * one job, enqn $2 jobs; payload {"t": $1}.  silo: silo.enqueue for one
 * job (what a producer normally calls), silo.enqueue_many for more; bare:
 * INSERT (no NOTIFY: the steady workers poll bare). */
void
system_prepare_enqueue(PGconn *conn, lg_system s)
{
	if (s == SYS_BARE)
	{
		db_prepare(conn, "enq1",
				   "INSERT INTO bench_bare (payload) VALUES (jsonb_build_object('t', $1::bigint))");
		db_prepare(conn, "enqn",
				   "INSERT INTO bench_bare (payload) SELECT jsonb_build_object('t', $1::bigint)"
				   " FROM generate_series(1, $2::int)");
		return;
	}
	db_prepare(conn, "enq1",
			   "SELECT silo.enqueue('" LG_GROUP "', jsonb_build_object('t', $1::bigint))");
	db_prepare(conn, "enqn",
			   "SELECT count(*) FROM silo.enqueue_many((SELECT jsonb_agg(jsonb_build_object("
			   "'task_group', '" LG_GROUP "', 'payload', jsonb_build_object('t', $1::bigint)))"
			   " FROM generate_series(1, $2::int)))");
}

/* system_enqueue: enqueue n jobs stamped `stamp` in one autocommit call. */
void
system_enqueue(PGconn *conn, lg_system s, long n, long stamp)
{
	char		t[32],
				k[32];
	const char *p[2] = {t, k};

	(void) s;
	snprintf(t, sizeof(t), "%ld", stamp);
	snprintf(k, sizeof(k), "%ld", n);
	if (n == 1)
		PQclear(db_exec_prepared(conn, "enq1", 1, p));
	else
		PQclear(db_exec_prepared(conn, "enqn", 2, p));
}

/* system_prepare_latency: prepare the latency producer's and/or worker's
 * statements (either connection may be NULL). */
void
system_prepare_latency(PGconn *producer, PGconn *worker, lg_system s)
{
	if (producer != NULL && s == SYS_BARE)
		db_prepare(producer, "enqueue",
				   "WITH i AS (INSERT INTO bench_bare (payload, run_at)"
				   " VALUES (jsonb_build_object('seq', $1::bigint), now()) RETURNING id)"
				   " SELECT pg_notify('bench_bare_ready', 'latency') FROM i");
	else if (producer != NULL)
		db_prepare(producer, "enqueue",
				   "SELECT silo.enqueue('" LG_LAT_GROUP "', jsonb_build_object('seq', $1::bigint))");
	if (worker != NULL && s == SYS_BARE)
		db_prepare(worker, "take",
				   "DELETE FROM bench_bare WHERE id = ANY(ARRAY("
				   "SELECT id FROM bench_bare WHERE run_at <= now()"
				   " ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)) RETURNING id");
	else if (worker != NULL)
	{
		db_prepare(worker, "take",
				   "SELECT task_id FROM silo.lease($1, '" LG_LAT_GROUP "', 1, $2::int)");
		db_prepare(worker, "complete", "SELECT silo.complete($1::uuid, $2)");
	}
}

/* system_enqueue_one: enqueue one job (autocommit) for the latency workload. */
void
system_enqueue_one(PGconn *conn, lg_system s, long seq)
{
	char		v[32];
	const char *p[1] = {v};

	(void) s;
	snprintf(v, sizeof(v), "%ld", seq);
	PQclear(db_exec_prepared(conn, "enqueue", 1, p));
}

/* system_take_one: claim (bare) or lease (silo) at most one job, call
 * leased(arg, n, when the claim/lease call returned) at once, then (silo)
 * complete the job in its own transaction.  Returns the number of jobs
 * taken (0 or 1). */
int
system_take_one(PGconn *conn, lg_system s, const char *worker,
				const lg_opts *o, lg_leased_cb leased, void *arg)
{
	PGresult   *res;
	int			n;

	if (s == SYS_BARE)
	{
		res = db_exec_prepared(conn, "take", 0, NULL);
		n = PQntuples(res);
		leased(arg, n, now_sec());
	}
	else
	{
		char		lease[16];
		const char *p[2] = {worker, lease};

		snprintf(lease, sizeof(lease), "%d", o->lease_ms);
		res = db_exec_prepared(conn, "take", 2, p);
		n = PQntuples(res);
		leased(arg, n, now_sec());
		for (int i = 0; i < n; i++)
		{
			const char *c[2] = {PQgetvalue(res, i, 0), worker};

			PQclear(db_exec_prepared(conn, "complete", 2, c));
		}
	}
	PQclear(res);
	return n;
}
