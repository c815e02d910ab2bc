/*
 * systems.c: the SQL that drives each queue system.
 *
 * bare  a minimal table bench_bare(id bigserial primary key, payload jsonb,
 *       run_at timestamptz).  A worker claims a batch with
 *       SELECT ... ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED and deletes the
 *       claimed ids in the same transaction (BEGIN; claim; DELETE; COMMIT),
 *       the same shape as silo's lease-then-complete.  In the latency
 *       workload the claim is one autocommit DELETE ... RETURNING.
 * silo  silo.lease(worker, group, n, lease_ms) then silo.complete for every
 *       leased task, one transaction per batch (BEGIN; lease; complete all;
 *       COMMIT), through prepared statements.  In the latency workload the
 *       lease is autocommit, as a real worker does it, and the completion
 *       follows in its own transaction.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen.h"

#define BURN_GROUP "bench"
#define LAT_GROUP "latency"
#define FILL_CHUNK 1000

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
	/* every table of schema silo holds queue data: truncate them all */
	db_exec(conn,
			"DO $$ BEGIN EXECUTE (SELECT 'TRUNCATE ' || string_agg("
			"format('%I.%I', schemaname, tablename), ', ') FROM pg_tables"
			" WHERE schemaname = 'silo'); END $$");
}

/* system_fill: pre-insert jobs with the system's bulk path, then vacuum,
 * analyze and checkpoint so every cell starts from the same state. */
void
system_fill(PGconn *conn, lg_system s, long jobs)
{
	char		sql[512];

	if (s == SYS_BARE)
	{
		snprintf(sql, sizeof(sql),
				 "INSERT INTO bench_bare (payload, run_at)"
				 " SELECT jsonb_build_object('i', g), now()"
				 " FROM generate_series(1, %ld) g", jobs);
		db_exec(conn, sql);
	}
	else
	{
		for (long from = 1; from <= jobs; from += FILL_CHUNK)
		{
			long		to = from + FILL_CHUNK - 1;

			if (to > jobs)
				to = jobs;
			snprintf(sql, sizeof(sql),
					 "SELECT count(*) FROM silo.enqueue_many((SELECT jsonb_agg("
					 "jsonb_build_object('task_group', '" BURN_GROUP "',"
					 " 'payload', jsonb_build_object('i', g)))"
					 " FROM generate_series(%ld, %ld) g))", from, to);
			db_exec(conn, sql);
		}
	}
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

/* system_prepare_worker: prepare a burn worker's statements. */
void
system_prepare_worker(PGconn *conn, lg_system s, const lg_opts *o)
{
	(void) o;
	if (s == SYS_BARE)
	{
		db_prepare(conn, "claim",
				   "SELECT id, payload FROM bench_bare WHERE run_at <= now()"
				   " ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED");
		db_prepare(conn, "finish", "DELETE FROM bench_bare WHERE id = ANY($1::bigint[])");
	}
	else
	{
		db_prepare(conn, "claim",
				   "SELECT task_id, payload FROM silo.lease($1, '" BURN_GROUP "', $2::int, $3::int)");
		db_prepare(conn, "finish",
				   "SELECT count(silo.complete(t, $1)) FROM unnest($2::uuid[]) t");
	}
}

/* ids_to_array: the first column of res as a PostgreSQL array literal
 * (malloc'd). */
static char *
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

/* system_take_batch: one burn transaction: claim up to o->batch jobs and
 * complete them.  Returns the number of jobs completed (committed). */
int
system_take_batch(PGconn *conn, lg_system s, const char *worker, const lg_opts *o)
{
	char		batch[16],
				lease[16];
	PGresult   *res;
	int			n;

	snprintf(batch, sizeof(batch), "%d", o->batch);
	snprintf(lease, sizeof(lease), "%d", o->lease_ms);
	db_exec(conn, "BEGIN");
	if (s == SYS_BARE)
	{
		const char *p[1] = {batch};

		res = db_exec_prepared(conn, "claim", 1, p);
	}
	else
	{
		const char *p[3] = {worker, batch, lease};

		res = db_exec_prepared(conn, "claim", 3, p);
	}
	n = PQntuples(res);
	if (n > 0)
	{
		char	   *arr = ids_to_array(res);

		if (s == SYS_BARE)
		{
			const char *p[1] = {arr};

			PQclear(db_exec_prepared(conn, "finish", 1, p));
		}
		else
		{
			const char *p[2] = {worker, arr};

			PQclear(db_exec_prepared(conn, "finish", 2, p));
		}
		free(arr);
	}
	PQclear(res);
	db_exec(conn, "COMMIT");
	return n;
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
				   "SELECT silo.enqueue('" LAT_GROUP "', jsonb_build_object('seq', $1::bigint))");
	if (worker != NULL && s == SYS_BARE)
		db_prepare(worker, "take",
				   "DELETE FROM bench_bare WHERE id = ANY(ARRAY("
				   "SELECT id FROM bench_bare WHERE run_at <= now()"
				   " ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)) RETURNING id");
	else if (worker != NULL)
	{
		db_prepare(worker, "take",
				   "SELECT task_id FROM silo.lease($1, '" LAT_GROUP "', 1, $2::int)");
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

/* system_take_one: claim (bare) or lease and then complete (silo) at most
 * one job.  *t_leased is set to when the claim/lease call returned.
 * Returns the number of jobs taken (0 or 1). */
int
system_take_one(PGconn *conn, lg_system s, const char *worker,
				const lg_opts *o, double *t_leased)
{
	PGresult   *res;
	int			n;

	if (s == SYS_BARE)
	{
		res = db_exec_prepared(conn, "take", 0, NULL);
		*t_leased = now_sec();
		n = PQntuples(res);
	}
	else
	{
		char		lease[16];
		const char *p[2] = {worker, lease};

		snprintf(lease, sizeof(lease), "%d", o->lease_ms);
		res = db_exec_prepared(conn, "take", 2, p);
		*t_leased = now_sec();
		n = PQntuples(res);
		for (int i = 0; i < n; i++)
		{
			const char *c[2] = {PQgetvalue(res, i, 0), worker};

			PQclear(db_exec_prepared(conn, "complete", 2, c));
		}
	}
	PQclear(res);
	return n;
}
