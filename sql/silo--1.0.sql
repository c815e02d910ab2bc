/* silo--1.0.sql: the first release of the silo extension. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION silo CASCADE" to load this file. \quit

/*
 * silo must live in the database its broker serves; pg_cron, which it
 * requires, has the same rule for cron.database_name.
 */
DO $$
BEGIN
	IF current_setting('silo.database', true) IS NULL THEN
		RAISE EXCEPTION 'silo is not loaded'
			USING ERRCODE = '55000',
				  DETAIL = 'The silo library must be preloaded so that its broker runs.',
				  HINT = 'Add silo to shared_preload_libraries (after pg_cron) and restart the server.';
	END IF;
	IF current_database() <> current_setting('silo.database') THEN
		RAISE EXCEPTION 'silo can only be installed in database "%"', current_setting('silo.database')
			USING ERRCODE = '55000',
				  DETAIL = 'The silo broker serves only the database named by silo.database.',
				  HINT = 'Set silo.database (and cron.database_name) to this database, or create the extension there.';
	END IF;
END
$$;

/*
 * Storage.  One table per key prefix of Silo's storekey layout; the primary
 * key of each table is that prefix's key tuple.  docs/storage.md explains
 * which rows each state transition writes and why.
 *
 *   0x01 job info            silo.job_info        (tenant, id)
 *   0x02 job status          silo.job_status      (tenant, id)
 *   0x03 status/time index   index job_status_by_status on silo.job_status
 *   0x04 metadata index      silo.job_metadata    (tenant, key, value, job_id)
 *   0x05 tasks               silo.task            (task_group, start_at, priority, tenant, job_id, attempt)
 *   0x06 leases              silo.task_lease      (task_id)
 *   0x07 attempts            silo.attempt         (tenant, job_id, attempt)
 *   0x0A cancellation flags  silo.job_cancellation (tenant, job_id)
 */

-- Enqueue order: the last tie-breaker of the ready order.
CREATE SEQUENCE silo.job_seq;

-- 0x01: the immutable part of a job, written once at enqueue.
CREATE TABLE silo.job_info (
	tenant		text NOT NULL,
	id			text NOT NULL,
	task_group	text NOT NULL,
	priority	smallint NOT NULL,
	start_at	timestamptz NOT NULL,	-- as requested by the producer
	enqueued_at timestamptz NOT NULL,
	seq			bigint NOT NULL,		-- enqueue order
	payload		jsonb NOT NULL,
	retry_count integer,				-- NULL: no retry policy
	retry_initial_ms bigint,
	retry_max_ms bigint,
	retry_factor float8,
	retry_randomize boolean,
	limits		jsonb NOT NULL DEFAULT '[]',
	metadata	jsonb NOT NULL DEFAULT '{}',
	PRIMARY KEY (tenant, id)
);

/*
 * 0x02: the mutable part of a job.  status is 'Pending' for every job that
 * has not ended, or the terminal status.  Whether a pending job is Waiting,
 * Scheduled, Retrying or Running is derived (see silo.jobs): leasing writes
 * no job_status row, which keeps the hot path to one tuple per table.
 */
CREATE TABLE silo.job_status (
	tenant		text NOT NULL,
	id			text NOT NULL,
	status		text NOT NULL CHECK (status IN ('Pending', 'Succeeded', 'Failed', 'Cancelled')),
	changed_at	timestamptz NOT NULL,
	attempt		integer NOT NULL,		-- absolute number of the current or last attempt
	relative_attempt integer NOT NULL,	-- resets to 1 on restart
	task_id		uuid,					-- the current task, pending or leased
	next_attempt_at timestamptz,		-- start of the pending task
	PRIMARY KEY (tenant, id)
) WITH (fillfactor = 90);

-- 0x03: "newest jobs of tenant X in status S" is an index scan.
CREATE INDEX job_status_by_status ON silo.job_status (tenant, status, changed_at DESC, id);

-- 0x04: "jobs of tenant X with metadata k = v" is an index scan.
CREATE TABLE silo.job_metadata (
	tenant		text NOT NULL,
	key			text NOT NULL,
	value		text NOT NULL,
	job_id		text NOT NULL,
	PRIMARY KEY (tenant, key, value, job_id)
);

/*
 * 0x05: pending tasks.  A task is "due" once its start time has passed and
 * the broker (or a leasing worker) has promoted it; due tasks are taken in
 * priority order through task_ready, tasks not yet promoted are found in
 * start order through task_future.  Keeping the two apart means future
 * tasks of a high priority never slow down leasing.
 */
CREATE TABLE silo.task (
	task_group	text NOT NULL,
	start_at	timestamptz NOT NULL,	-- effective start
	priority	smallint NOT NULL,
	tenant		text NOT NULL,
	job_id		text NOT NULL,
	attempt		integer NOT NULL,
	relative_attempt integer NOT NULL,
	task_id		uuid NOT NULL,
	seq			bigint NOT NULL,
	due			boolean NOT NULL,
	PRIMARY KEY (task_group, start_at, priority, tenant, job_id, attempt)
) WITH (fillfactor = 90);
CREATE INDEX task_ready ON silo.task (task_group, priority, start_at, seq) WHERE due;
CREATE INDEX task_future ON silo.task (start_at) WHERE NOT due;

-- 0x06: leased tasks.  Heartbeats touch only expires_at, which is not
-- indexed, so they are HOT updates.
CREATE TABLE silo.task_lease (
	task_id		uuid PRIMARY KEY,
	kind		text NOT NULL DEFAULT 'run',
	task_group	text NOT NULL,
	tenant		text NOT NULL,
	job_id		text NOT NULL,
	attempt		integer NOT NULL,
	relative_attempt integer NOT NULL,
	priority	smallint NOT NULL,
	start_at	timestamptz NOT NULL,
	seq			bigint NOT NULL,
	worker_id	text NOT NULL,
	started_at	timestamptz NOT NULL,
	expires_at	timestamptz NOT NULL
) WITH (fillfactor = 70);

-- 0x07: finished attempts.  A running attempt is its lease row.
CREATE TABLE silo.attempt (
	tenant		text NOT NULL,
	job_id		text NOT NULL,
	attempt		integer NOT NULL,
	relative_attempt integer NOT NULL,
	task_id		uuid NOT NULL,
	worker_id	text,
	status		text NOT NULL CHECK (status IN ('Succeeded', 'Failed', 'Cancelled')),
	started_at	timestamptz,
	finished_at timestamptz NOT NULL,
	result		jsonb,
	error_code	text,
	error_data	jsonb,
	PRIMARY KEY (tenant, job_id, attempt)
);

-- 0x0A: cancellation flags, orthogonal to status.
CREATE TABLE silo.job_cancellation (
	tenant		text NOT NULL,
	job_id		text NOT NULL,
	cancelled_at timestamptz NOT NULL,
	PRIMARY KEY (tenant, job_id)
);

-- The churn tables are vacuumed early so dead tuples do not pile up.
ALTER TABLE silo.task SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
						   autovacuum_vacuum_cost_delay = 0);
ALTER TABLE silo.task_lease SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
								 autovacuum_vacuum_cost_delay = 0);

-- pg_dump keeps the jobs.
SELECT pg_catalog.pg_extension_config_dump('silo.job_seq', '');
SELECT pg_catalog.pg_extension_config_dump('silo.job_info', '');
SELECT pg_catalog.pg_extension_config_dump('silo.job_status', '');
SELECT pg_catalog.pg_extension_config_dump('silo.job_metadata', '');
SELECT pg_catalog.pg_extension_config_dump('silo.task', '');
SELECT pg_catalog.pg_extension_config_dump('silo.task_lease', '');
SELECT pg_catalog.pg_extension_config_dump('silo.attempt', '');
SELECT pg_catalog.pg_extension_config_dump('silo.job_cancellation', '');

/* ---------------------------------------------------------------------
 * Types
 * ------------------------------------------------------------------- */

CREATE TYPE silo.leased_task AS (
	task_id		uuid,
	kind		text,
	tenant		text,
	job_id		text,
	attempt		integer,
	relative_attempt integer,
	is_last_attempt boolean,
	priority	integer,
	task_group	text,
	payload		jsonb,
	metadata	jsonb,
	lease_expires_at timestamptz,
	queue_key	text,
	current_max_concurrency integer,
	refresh_metadata jsonb
);

/* ---------------------------------------------------------------------
 * SQL API.  Every function is implemented in C (src/), runs as the
 * extension owner and pins its search_path.
 * ------------------------------------------------------------------- */

CREATE FUNCTION silo.enqueue(task_group text,
							 payload jsonb DEFAULT '{}',
							 tenant text DEFAULT '-',
							 id text DEFAULT NULL,
							 priority integer DEFAULT 50,
							 start_at timestamptz DEFAULT now(),
							 retry_policy jsonb DEFAULT NULL,
							 limits jsonb DEFAULT '[]',
							 metadata jsonb DEFAULT '{}',
							 on_conflict text DEFAULT 'error')
RETURNS text
AS 'MODULE_PATHNAME', 'silo_enqueue'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION silo.enqueue_many(jobs jsonb)
RETURNS SETOF text
AS 'MODULE_PATHNAME', 'silo_enqueue_many'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION silo.lease(worker_id text,
						   task_group text,
						   max_tasks integer DEFAULT 1,
						   lease_ms integer DEFAULT 10000)
RETURNS SETOF silo.leased_task
AS 'MODULE_PATHNAME', 'silo_lease'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp ROWS 10;

CREATE FUNCTION silo.heartbeat(task_id uuid, worker_id text, lease_ms integer DEFAULT 10000)
RETURNS boolean
AS 'MODULE_PATHNAME', 'silo_heartbeat'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION silo.complete(task_id uuid, worker_id text, result jsonb DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'silo_complete'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION silo.fail(task_id uuid, worker_id text, error_code text, error_data jsonb DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'silo_fail'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION silo.ack_cancel(task_id uuid, worker_id text)
RETURNS void
AS 'MODULE_PATHNAME', 'silo_ack_cancel'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION silo.release(task_id uuid, worker_id text)
RETURNS void
AS 'MODULE_PATHNAME', 'silo_release'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION silo.cancel(job_id text, tenant text DEFAULT '-')
RETURNS void
AS 'MODULE_PATHNAME', 'silo_cancel'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION silo.restart(job_id text, tenant text DEFAULT '-')
RETURNS void
AS 'MODULE_PATHNAME', 'silo_restart'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION silo.expedite(job_id text, tenant text DEFAULT '-')
RETURNS void
AS 'MODULE_PATHNAME', 'silo_expedite'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION silo.delete_job(job_id text, tenant text DEFAULT '-')
RETURNS boolean
AS 'MODULE_PATHNAME', 'silo_delete_job'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION silo.job_result(job_id text, tenant text DEFAULT '-',
								OUT status text, OUT result jsonb, OUT error_code text,
								OUT error_data jsonb, OUT finished_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'silo_job_result'
LANGUAGE C STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp ROWS 1;

CREATE FUNCTION silo.run_maintenance(OUT promoted bigint, OUT expired bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'silo_run_maintenance'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION silo.purge_terminal_jobs(max_jobs integer DEFAULT 10000)
RETURNS bigint
AS 'MODULE_PATHNAME', 'silo_purge_terminal_jobs'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

-- STABLE so that views using it stay simple for the planner; the value is
-- the wall clock at each call.
CREATE FUNCTION silo.now()
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'silo_now'
LANGUAGE C STABLE;

CREATE FUNCTION silo.broker_pid()
RETURNS integer
AS 'MODULE_PATHNAME', 'silo_broker_pid'
LANGUAGE C VOLATILE;

/* ---------------------------------------------------------------------
 * Views
 * ------------------------------------------------------------------- */

/*
 * silo.jobs: one row per job.  The UNION ALL splits jobs by stored status
 * so that a filter on a terminal status reaches the job_status_by_status
 * index: the first branch passes the stored status through, the second
 * derives the live status of a pending job (Running when its current task
 * has a lease row).  Joins sit outside the UNION ALL, and the lease is
 * read by primary key per pending row, so neither branch scans a table.
 */
CREATE VIEW silo.jobs AS
SELECT x.tenant, x.id, i.task_group, x.status, i.priority::integer AS priority,
	   i.enqueued_at, x.status_changed_at, x.current_attempt, x.next_attempt_at,
	   i.payload, i.metadata, c.cancelled_at
  FROM (SELECT s.tenant, s.id, s.status, s.changed_at AS status_changed_at,
			   NULL::integer AS current_attempt, NULL::timestamptz AS next_attempt_at
		  FROM silo.job_status s
		 WHERE s.status <> 'Pending'
		UNION ALL
		SELECT s.tenant, s.id,
			   CASE WHEN EXISTS (SELECT 1 FROM silo.task_lease l WHERE l.task_id = s.task_id)
						THEN 'Running'
					WHEN s.next_attempt_at > silo.now()
						THEN CASE WHEN s.relative_attempt > 1 THEN 'Retrying' ELSE 'Scheduled' END
					ELSE 'Waiting' END,
			   coalesce((SELECT l.started_at FROM silo.task_lease l WHERE l.task_id = s.task_id),
						s.changed_at),
			   s.attempt,
			   CASE WHEN NOT EXISTS (SELECT 1 FROM silo.task_lease l WHERE l.task_id = s.task_id)
						THEN s.next_attempt_at END
		  FROM silo.job_status s
		 WHERE s.status = 'Pending') x
  JOIN silo.job_info i ON i.tenant = x.tenant AND i.id = x.id
  LEFT JOIN silo.job_cancellation c ON c.tenant = x.tenant AND c.job_id = x.id;

/*
 * silo.finished_jobs: terminal jobs only, as a plain join (no UNION), so
 * history queries -- the newest Failed jobs of a tenant, the jobs with a
 * given metadata value -- walk job_status_by_status or the primary keys
 * and stop after the rows they return, however large the tenant.
 */
CREATE VIEW silo.finished_jobs AS
SELECT s.tenant, s.id, i.task_group, s.status, i.priority::integer AS priority,
	   i.enqueued_at, s.changed_at AS finished_at, s.attempt AS last_attempt,
	   i.payload, i.metadata, c.cancelled_at
  FROM silo.job_status s
  JOIN silo.job_info i ON i.tenant = s.tenant AND i.id = s.id
  LEFT JOIN silo.job_cancellation c ON c.tenant = s.tenant AND c.job_id = s.id
 WHERE s.status <> 'Pending';

CREATE VIEW silo.attempts AS
SELECT tenant, job_id, attempt, relative_attempt, task_id, worker_id, status,
	   started_at, finished_at, result, error_code, error_data
  FROM silo.attempt
UNION ALL
SELECT tenant, job_id, attempt, relative_attempt, task_id, worker_id, 'Running',
	   started_at, NULL::timestamptz, NULL::jsonb, NULL::text, NULL::jsonb
  FROM silo.task_lease
 WHERE kind = 'run';

CREATE VIEW silo.tasks AS
SELECT task_id, task_group, tenant, job_id, attempt, relative_attempt,
	   priority::integer AS priority, start_at, start_at <= silo.now() AS is_due, seq
  FROM silo.task;

CREATE VIEW silo.leases AS
SELECT task_id, kind, task_group, tenant, job_id, attempt, relative_attempt,
	   worker_id, started_at, expires_at, expires_at <= silo.now() AS expired
  FROM silo.task_lease;

-- Per task group: what is due, scheduled, running; one clock read per query.
CREATE VIEW silo.task_groups AS
WITH c AS (
	SELECT silo.now() AS now
), t AS (
	SELECT task_group,
		   count(*) FILTER (WHERE start_at <= c.now) AS due,
		   count(*) FILTER (WHERE start_at > c.now) AS scheduled,
		   c.now - min(start_at) FILTER (WHERE start_at <= c.now) AS oldest_due_age
	  FROM silo.task, c GROUP BY task_group, c.now
), l AS (
	SELECT task_group,
		   count(*) FILTER (WHERE expires_at > c.now) AS running,
		   count(*) FILTER (WHERE expires_at <= c.now) AS expired_leases
	  FROM silo.task_lease, c GROUP BY task_group
)
SELECT coalesce(t.task_group, l.task_group) AS task_group,
	   coalesce(t.due, 0) AS due, coalesce(t.scheduled, 0) AS scheduled,
	   coalesce(l.running, 0) AS running, coalesce(l.expired_leases, 0) AS expired_leases,
	   t.oldest_due_age
  FROM t FULL JOIN l ON l.task_group = t.task_group;

/* ---------------------------------------------------------------------
 * Privileges: nothing for PUBLIC; three roles.
 * ------------------------------------------------------------------- */

DO $$
DECLARE
	r text;
BEGIN
	FOREACH r IN ARRAY ARRAY['silo_producer', 'silo_worker', 'silo_admin'] LOOP
		IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
			EXECUTE format('CREATE ROLE %I NOLOGIN', r);
		END IF;
	END LOOP;
END
$$;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA silo FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA silo FROM PUBLIC;
GRANT USAGE ON SCHEMA silo TO silo_producer, silo_worker, silo_admin;

GRANT EXECUTE ON FUNCTION silo.enqueue(text, jsonb, text, text, integer, timestamptz, jsonb, jsonb, jsonb, text),
	silo.enqueue_many(jsonb), silo.cancel(text, text), silo.restart(text, text),
	silo.expedite(text, text), silo.job_result(text, text), silo.now()
	TO silo_producer;
GRANT SELECT ON silo.jobs, silo.finished_jobs, silo.attempts, silo.job_metadata TO silo_producer;

GRANT EXECUTE ON FUNCTION silo.lease(text, text, integer, integer), silo.heartbeat(uuid, text, integer),
	silo.complete(uuid, text, jsonb), silo.fail(uuid, text, text, jsonb),
	silo.ack_cancel(uuid, text), silo.release(uuid, text), silo.now()
	TO silo_worker;

GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA silo TO silo_admin;
GRANT SELECT ON ALL TABLES IN SCHEMA silo TO silo_admin;

/*
 * Retention: pg_cron runs silo.purge_terminal_jobs() every minute, and
 * silo.retention decides what is old enough (0 keeps everything).  The
 * broker schedules that pg_cron job once silo holds jobs, not this script:
 * pg_dump keeps pg_cron's job table, and a row inserted here would collide
 * with the restored one.
 */
