/* silo--1.7--1.8.sql: what the original Silo has that 1.7 lacked (issue 16, section 5). */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION silo UPDATE TO '1.8'" to load this file. \quit

/*
 * The 1.8 library answers the functions below; an older library still
 * loaded in this server does not have their C symbols.
 */
DO $$
BEGIN
	IF coalesce(string_to_array(current_setting('silo.library_version', true), '.')::int[],
				'{0,0}') < '{1,8}' THEN
		RAISE EXCEPTION 'the silo library loaded in this server is older than 1.8'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = 'PostgreSQL keeps using the library it loaded at start.',
				  HINT = 'Restart PostgreSQL after installing silo 1.8, then run ALTER EXTENSION silo UPDATE.';
	END IF;
END
$$;

/* ---- Leased tasks carry limits and retry policy; lease one named job ---- */

/*
 * A leased task carries its job's limits (as Silo's Task does) and retry
 * policy (which Silo's GetJob shows), in the shapes silo.enqueue accepts: limits as stored (normalized,
 * '[]' for none), retry_policy with every key given, NULL for a job
 * without one.  Both are NULL on refresh tasks.  The functions that
 * return SETOF silo.leased_task (silo.lease, silo.lease_job) fill them.
 */
ALTER TYPE silo.leased_task ADD ATTRIBUTE limits jsonb, ADD ATTRIBUTE retry_policy jsonb;

/* silo.jobs: the same two columns, at the end (1.7's view otherwise). */
CREATE OR REPLACE VIEW silo.jobs WITH (security_barrier) AS
SELECT s.tenant, s.id, i.task_group,
	   CASE WHEN s.status <> 'Pending' THEN s.status
			WHEN EXISTS (SELECT 1 FROM silo.task_lease l WHERE l.task_id = s.task_id)
				THEN 'Running'
			WHEN s.next_attempt_at > silo.now()
				THEN CASE WHEN s.relative_attempt > 1 THEN 'Retrying' ELSE 'Scheduled' END
			ELSE 'Waiting' END COLLATE "C" AS status,
	   i.priority::integer AS priority, i.enqueued_at,
	   CASE WHEN s.status <> 'Pending' THEN s.changed_at
			ELSE coalesce((SELECT l.started_at FROM silo.task_lease l WHERE l.task_id = s.task_id),
						  s.changed_at) END AS status_changed_at,
	   CASE WHEN s.status = 'Pending' THEN s.attempt END AS current_attempt,
	   CASE WHEN s.status = 'Pending'
				 AND NOT EXISTS (SELECT 1 FROM silo.task_lease l WHERE l.task_id = s.task_id)
				THEN s.next_attempt_at END AS next_attempt_at,
	   i.payload, i.metadata, c.cancelled_at,
	   i.limits,
	   CASE WHEN i.retry_count IS NOT NULL
				THEN pg_catalog.jsonb_build_object('retryCount', i.retry_count,
												   'initialIntervalMs', i.retry_initial_ms,
												   'maxIntervalMs', i.retry_max_ms,
												   'backoffFactor', i.retry_factor,
												   'randomizeInterval', i.retry_randomize)
			END AS retry_policy
  FROM silo.job_status s
  JOIN silo.job_info i ON i.tenant = s.tenant AND i.id = s.id
  LEFT JOIN silo.job_cancellation c ON c.tenant = s.tenant AND c.job_id = s.id
 WHERE silo.tenant_visible(s.tenant);

/*
 * silo.lease_job: Silo's LeaseTask, the lease of one named job's due task
 * (tests, tooling).  Unlike Silo's it does not skip limits: a job still
 * waiting on one is refused (docs/api.md).  Zero rows when another
 * transaction holds the task at that moment.
 */
CREATE FUNCTION silo.lease_job(worker_id text,
							   job_id text,
							   tenant text DEFAULT '-',
							   lease_ms integer DEFAULT 10000)
RETURNS SETOF silo.leased_task
AS 'MODULE_PATHNAME', 'silo_lease_job'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off ROWS 1;
REVOKE ALL ON FUNCTION silo.lease_job(text, text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION silo.lease_job(text, text, text, integer) TO silo_worker, silo_admin;

/* ---- Import of jobs with their history (silo.import_jobs) ---- */

/*
 * Jobs with their history, from another queue (Silo's ImportJobs;
 * docs/api.md, "silo.import_jobs"): one result row per job, in input order.
 * A job whose id the tenant has is re-imported.
 */
CREATE FUNCTION silo.import_jobs(jobs jsonb)
RETURNS TABLE (id text, tenant text, success boolean, status text, error text, sqlstate text)
AS 'MODULE_PATHNAME', 'silo_import_jobs'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off;

REVOKE ALL ON FUNCTION silo.import_jobs(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION silo.import_jobs(jsonb) TO silo_producer, silo_admin;

/* ---- Cluster mode: a move's setsums with only the tail summed in the pause ---- */

/*
 * A move's setsums, in silo.shard_setsums' form, with the shard's rows
 * summed before the pause and only the rows changed since summed again
 * during it (src/cluster/tail.c; docs/cluster.md, "The setsums and the
 * tail").  The coordinator's, over a session of its own; it returns once
 * silo.shard_state says finish_state with a final LSN for the move, and
 * fails past limit_ms.  The same output settings as silo.shard_setsums;
 * log_min_messages: each round's decoding would log two lines.
 */
CREATE FUNCTION silo.move_tail_setsums(shard integer, move bigint, lo bigint, hi bigint,
									   publication text, finish_state text, limit_ms integer)
RETURNS text
AS 'MODULE_PATHNAME', 'silo_move_tail_setsums'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp SET "TimeZone" = 'UTC' SET "DateStyle" = 'ISO, YMD'
SET "IntervalStyle" = 'postgres' SET extra_float_digits = 1 SET bytea_output = 'hex'
SET log_min_messages = 'warning';

/*
 * (Re)create publication pub of a hash range's rows of every shard table:
 * row-filtered, no TRUNCATE (a row filter does not apply to it), no row
 * hints.  The source's of a move (silo_move_<S>, which the target
 * subscribes to) and the target's for its tail (silo_tail_<S>, which only
 * the tail's decoding reads; dropped with the move's subscription).
 */
CREATE FUNCTION silo.shard_publish(pub text, lo bigint, hi bigint)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM pg_publication p WHERE p.pubname = pub) THEN
		EXECUTE format('DROP PUBLICATION %I', pub);
	END IF;
	EXECUTE (SELECT format('CREATE PUBLICATION %I FOR ', pub)
					|| string_agg(format('TABLE %s (%s) WHERE (%s)', t, silo.shard_columns(t),
										 silo.shard_filter(lo, hi)), ', ')
					|| ' WITH (publish = ''insert, update, delete'')'
			   FROM silo.shard_tables() t);
END
$$;

/* the source: publish the shard's rows for the move */
CREATE OR REPLACE FUNCTION silo.move_source_prepare(shard integer, move bigint, peer_node text,
													lo bigint, hi bigint)
RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM silo.shard_publish(format('silo_move_%s', shard), lo, hi);
	RETURN silo.shard_state_set(shard, 'sending', move, peer_node, NULL);
END
$$;

REVOKE ALL ON FUNCTION silo.move_tail_setsums(integer, bigint, bigint, bigint, text, text, integer),
	silo.shard_publish(text, bigint, bigint) FROM PUBLIC;
