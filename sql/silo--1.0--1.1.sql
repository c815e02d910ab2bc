/* silo--1.0--1.1.sql: concurrency, floating concurrency and rate limits. */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION silo UPDATE TO '1.1'" to load this file. \quit

/*
 * Storage for limits (docs/storage.md, docs/limits.md).  A pending attempt
 * of a job with limits is in exactly one place: a chain task, a requester
 * row, a leasable task or a lease; it holds one holder row per key it has
 * been granted.
 *
 *   0x05 internal tasks      silo.chain_task          (tenant, job_id, attempt)
 *   0x08 requesters          silo.concurrency_request (tenant, queue, priority, start_at, seq, attempt)
 *   0x09 holders             silo.concurrency_holder  (tenant, queue, task_id)
 *   0x0B floating state      silo.floating_limit      (tenant, queue)
 *        rate-limit buckets  silo.rate_limit_bucket   (tenant, name, unique_key)
 */

-- The keys a leasable task or a lease holds; NULL for a job without limits.
ALTER TABLE silo.task ADD COLUMN holds text[];
ALTER TABLE silo.task_lease ADD COLUMN holds text[];

/*
 * Silo's RequestTicket and CheckRateLimit tasks: a job with limits whose
 * start has not come, whose rate limit is re-checked later, or whose walk
 * was handed to the broker.  The broker walks it from limit_index at
 * run_at; start_at stays the attempt's effective start, its place in line.
 */
CREATE TABLE silo.chain_task (
	tenant		text NOT NULL,
	job_id		text NOT NULL,
	attempt		integer NOT NULL,
	relative_attempt integer NOT NULL,
	task_id		uuid NOT NULL,
	task_group	text NOT NULL,
	priority	smallint NOT NULL,
	seq			bigint NOT NULL,
	start_at	timestamptz NOT NULL,
	run_at		timestamptz NOT NULL,
	limit_index smallint NOT NULL,
	rate_checks integer NOT NULL DEFAULT 0,
	holds		text[] NOT NULL DEFAULT '{}',
	PRIMARY KEY (tenant, job_id, attempt)
);
CREATE INDEX chain_task_by_run_at ON silo.chain_task (run_at);

-- 0x08: jobs waiting for a slot, in grant order.
CREATE TABLE silo.concurrency_request (
	tenant		text NOT NULL,
	queue		text NOT NULL,
	priority	smallint NOT NULL,
	start_at	timestamptz NOT NULL,
	seq			bigint NOT NULL,
	attempt		integer NOT NULL,
	job_id		text NOT NULL,
	relative_attempt integer NOT NULL,
	task_id		uuid NOT NULL,
	task_group	text NOT NULL,
	limit_index smallint NOT NULL,
	max_concurrency integer,			-- the job's own max; NULL for a floating key
	holds		text[] NOT NULL,		-- keys granted before this one
	requested_at timestamptz NOT NULL,
	PRIMARY KEY (tenant, queue, priority, start_at, seq, attempt)
);

-- 0x09: slots taken, one row per key per attempt's task.
CREATE TABLE silo.concurrency_holder (
	tenant		text NOT NULL,
	queue		text NOT NULL,
	task_id		uuid NOT NULL,
	job_id		text NOT NULL,
	attempt		integer NOT NULL,
	granted_at	timestamptz NOT NULL,
	PRIMARY KEY (tenant, queue, task_id)
);

/*
 * Keys released while their lock was busy: the holder row is gone, and
 * the broker grants the key's waiters.  No unique key, so a release never
 * waits to write a marker.
 */
CREATE TABLE silo.concurrency_regrant (
	tenant		text NOT NULL,
	queue		text NOT NULL,
	marked_at	timestamptz NOT NULL
);
CREATE INDEX concurrency_regrant_key ON silo.concurrency_regrant (tenant, queue);

-- 0x0B: shared floating-limit state and its refresh lifecycle (floating.c).
CREATE TABLE silo.floating_limit (
	tenant		text NOT NULL,
	queue		text NOT NULL,
	current_max integer NOT NULL CHECK (current_max >= 1),
	default_max integer NOT NULL,
	refresh_interval_ms bigint NOT NULL,
	metadata	jsonb NOT NULL,
	task_group	text NOT NULL,			-- where refresh tasks are delivered
	created_at	timestamptz NOT NULL,
	last_refreshed_at timestamptz NOT NULL,
	retry_count integer NOT NULL DEFAULT 0,
	next_retry_at timestamptz,
	last_error	text,
	refresh_task_id uuid,				-- NULL: no refresh scheduled
	refresh_ready boolean NOT NULL DEFAULT false,
	refresh_scheduled_at timestamptz,
	refresh_check_at timestamptz,		-- NULL: idle key, dormant
	PRIMARY KEY (tenant, queue)
);
CREATE INDEX floating_limit_ready ON silo.floating_limit (task_group, refresh_scheduled_at)
	WHERE refresh_ready;
CREATE INDEX floating_limit_check ON silo.floating_limit (refresh_check_at)
	WHERE refresh_check_at IS NOT NULL;

-- Rate-limit buckets; idle_at: when the bucket is equivalent to none.
CREATE TABLE silo.rate_limit_bucket (
	tenant		text NOT NULL,
	name		text NOT NULL,
	unique_key	text NOT NULL,
	algorithm	text NOT NULL CHECK (algorithm IN ('tokenBucket', 'leakyBucket')),
	"limit"		bigint NOT NULL,
	duration_ms bigint NOT NULL,
	level		float8 NOT NULL,		-- tokens left, or the leaky bucket's level
	reset_at	timestamptz NOT NULL,	-- token bucket: refill time
	updated_at	timestamptz NOT NULL,
	idle_at		timestamptz NOT NULL,
	PRIMARY KEY (tenant, name, unique_key)
);
CREATE INDEX rate_limit_bucket_idle ON silo.rate_limit_bucket (idle_at);

ALTER TABLE silo.chain_task SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000);
ALTER TABLE silo.concurrency_request SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000);
ALTER TABLE silo.concurrency_holder SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000);

SELECT pg_catalog.pg_extension_config_dump('silo.chain_task', '');
SELECT pg_catalog.pg_extension_config_dump('silo.concurrency_request', '');
SELECT pg_catalog.pg_extension_config_dump('silo.concurrency_holder', '');
SELECT pg_catalog.pg_extension_config_dump('silo.concurrency_regrant', '');
SELECT pg_catalog.pg_extension_config_dump('silo.floating_limit', '');
SELECT pg_catalog.pg_extension_config_dump('silo.rate_limit_bucket', '');

/* ---------------------------------------------------------------------
 * Functions
 * ------------------------------------------------------------------- */

CREATE FUNCTION silo.report_refresh(task_id uuid, worker_id text, new_max_concurrency integer)
RETURNS void
AS 'MODULE_PATHNAME', 'silo_report_refresh'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION silo.fail_refresh(task_id uuid, worker_id text, error text)
RETURNS void
AS 'MODULE_PATHNAME', 'silo_fail_refresh'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION silo.reset_floating_limit(tenant text, key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'silo_reset_floating_limit'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

/* ---------------------------------------------------------------------
 * Views
 * ------------------------------------------------------------------- */

-- A job is Running while its task is leased, whatever else it waits on.
CREATE OR REPLACE VIEW silo.leases AS
SELECT task_id, kind, task_group, tenant,
	   CASE WHEN kind = 'run' THEN job_id END AS job_id,
	   CASE WHEN kind = 'run' THEN attempt END AS attempt,
	   CASE WHEN kind = 'run' THEN relative_attempt END AS relative_attempt,
	   worker_id, started_at, expires_at,
	   expires_at <= silo.now() AS expired,
	   CASE WHEN kind = 'refresh' THEN job_id END AS queue_key,
	   holds
  FROM silo.task_lease;

/*
 * silo.queues: every concurrency key in use, and every floating key, with
 * its holders, its requesters and (floating) its current max.
 */
CREATE VIEW silo.queues AS
WITH k AS (
	SELECT tenant, queue FROM silo.concurrency_holder
	UNION
	SELECT tenant, queue FROM silo.concurrency_request
	UNION
	SELECT tenant, queue FROM silo.floating_limit
)
SELECT k.tenant, k.queue,
	   CASE WHEN f.queue IS NULL THEN 'concurrency' ELSE 'floatingConcurrency' END AS kind,
	   (SELECT count(*) FROM silo.concurrency_holder h
		 WHERE h.tenant = k.tenant AND h.queue = k.queue) AS holders,
	   (SELECT count(*) FROM silo.concurrency_request r
		 WHERE r.tenant = k.tenant AND r.queue = k.queue) AS requesters,
	   f.current_max
  FROM k LEFT JOIN silo.floating_limit f ON f.tenant = k.tenant AND f.queue = k.queue;

CREATE VIEW silo.floating_limits AS
SELECT f.tenant, f.queue AS key, f.current_max, f.default_max, f.refresh_interval_ms,
	   f.metadata, f.task_group, f.created_at, f.last_refreshed_at, f.retry_count,
	   f.next_retry_at, f.last_error,
	   CASE WHEN f.refresh_task_id IS NULL THEN
				CASE WHEN f.refresh_check_at IS NULL THEN 'idle' ELSE 'waiting' END
			WHEN f.refresh_ready THEN 'ready'
			ELSE 'leased' END AS refresh_state,
	   f.refresh_task_id, f.refresh_scheduled_at,
	   CASE WHEN f.refresh_task_id IS NULL THEN f.refresh_check_at END AS next_refresh_at
  FROM silo.floating_limit f;

/*
 * silo.blocked_jobs: "why isn't my job running?" -- for each job waiting
 * on a limit, the limit (its index in the job's limits) and key it waits
 * on.  A job waits as a requester of a concurrency key, or as a chain task
 * (a rate limit to re-check, or a step the broker has yet to walk).
 */
CREATE VIEW silo.blocked_jobs AS
SELECT r.tenant, r.job_id, r.task_group, r.attempt, r.limit_index::integer AS limit_index,
	   CASE WHEN r.max_concurrency IS NULL THEN 'floatingConcurrency' ELSE 'concurrency' END AS limit_type,
	   r.queue AS key,
	   (SELECT count(*) FROM silo.concurrency_holder h
		 WHERE h.tenant = r.tenant AND h.queue = r.queue) AS holders,
	   coalesce(r.max_concurrency,
				(SELECT f.current_max FROM silo.floating_limit f
				  WHERE f.tenant = r.tenant AND f.queue = r.queue)) AS max_concurrency,
	   r.requested_at AS waiting_since,
	   NULL::timestamptz AS next_check_at
  FROM silo.concurrency_request r
UNION ALL
SELECT c.tenant, c.job_id, c.task_group, c.attempt, c.limit_index::integer,
	   l ->> 'type',
	   CASE WHEN l ->> 'type' = 'rateLimit' THEN (l ->> 'name') || '/' || (l ->> 'uniqueKey')
			ELSE l ->> 'key' END,
	   NULL::bigint, NULL::integer, c.start_at, c.run_at
  FROM silo.chain_task c
  JOIN silo.job_info i ON i.tenant = c.tenant AND i.id = c.job_id
  CROSS JOIN LATERAL (SELECT i.limits -> c.limit_index::integer AS l) x
 WHERE c.run_at <= silo.now() OR c.rate_checks > 0 OR c.limit_index > 0;

/* ---------------------------------------------------------------------
 * Privileges
 * ------------------------------------------------------------------- */

REVOKE ALL ON FUNCTION silo.report_refresh(uuid, text, integer), silo.fail_refresh(uuid, text, text),
	silo.reset_floating_limit(text, text) FROM PUBLIC;
REVOKE ALL ON silo.chain_task, silo.concurrency_request, silo.concurrency_holder, silo.concurrency_regrant,
	silo.floating_limit, silo.rate_limit_bucket, silo.queues, silo.floating_limits,
	silo.blocked_jobs FROM PUBLIC;

GRANT EXECUTE ON FUNCTION silo.report_refresh(uuid, text, integer), silo.fail_refresh(uuid, text, text)
	TO silo_worker, silo_admin;
GRANT EXECUTE ON FUNCTION silo.reset_floating_limit(text, text) TO silo_admin;
GRANT SELECT ON silo.queues, silo.floating_limits, silo.blocked_jobs TO silo_producer;
GRANT SELECT ON silo.chain_task, silo.concurrency_request, silo.concurrency_holder, silo.concurrency_regrant,
	silo.floating_limit, silo.rate_limit_bucket, silo.queues, silo.floating_limits,
	silo.blocked_jobs, silo.leases TO silo_admin;
