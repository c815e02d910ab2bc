#!/usr/bin/env bash
# bench/plans.sh: the query plans of silo's views over a large history, as
# docs/storage.md ("Query plans at 1M jobs") shows them.
#
#   bash bench/plans.sh
#
# Builds a throwaway cluster with JOBS (default 1,000,000) terminal jobs:
# half in tenant 'big', the rest spread over 100 tenants, a third each
# Succeeded, Failed and Cancelled, one metadata entry per job (customer =
# one of 5,000 values), plus 1,000 pending jobs of 'big' (200 of them
# running).  The rows are written straight into silo's tables, in the shape
# the API leaves them, so that the fill takes seconds; then VACUUM ANALYZE,
# and each query's EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF... ) is
# printed.  Environment: PGBIN, JOBS.

set -euo pipefail

JOBS=${JOBS:-1000000}

# shellcheck source=bench/scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh"

scratch_begin
scratch_initdb data "silo.broker_paused = on"
scratch_start data
psql_ -c "CREATE EXTENSION silo CASCADE" 2>/dev/null
psql_ <<SQL
CREATE TEMP TABLE j AS
SELECT CASE WHEN g % 2 = 0 THEN 'big' ELSE 't' || (g % 100) END AS tenant,
	   'job-' || g AS id,
	   (ARRAY['Succeeded', 'Failed', 'Cancelled'])[1 + g % 3] AS status,
	   now() - interval '1 day' + g * interval '10 ms' AS at,
	   'c' || (g % 5000) AS customer,
	   g
  FROM generate_series(1, $JOBS) g;
INSERT INTO silo.job_info (tenant, id, task_group, priority, start_at, enqueued_at, seq, payload,
						   metadata)
SELECT tenant, id, 'g', 50, at, at, g, jsonb_build_object('i', g),
	   jsonb_build_object('customer', customer) FROM j;
INSERT INTO silo.job_status (tenant, id, status, changed_at, attempt, relative_attempt)
SELECT tenant, id, status, at + interval '1 s', 1, 1 FROM j;
INSERT INTO silo.job_status_index (tenant, status, changed_at, id)
SELECT tenant, status, at + interval '1 s', id FROM j;
INSERT INTO silo.job_metadata (tenant, key, value, job_id)
SELECT tenant, 'customer', customer, id FROM j;
INSERT INTO silo.attempt (tenant, job_id, attempt, relative_attempt, task_id, worker_id, status,
						  started_at, finished_at)
SELECT tenant, id, 1, 1, gen_random_uuid(), 'w', status, at, at + interval '1 s'
  FROM j WHERE status <> 'Cancelled';
SQL
# pending jobs of 'big' through the API: 800 waiting, 200 running
psql_ -c "SELECT count(*) FROM silo.enqueue_many((SELECT jsonb_agg(jsonb_build_object(
			'task_group', 'live', 'tenant', 'big', 'id', 'live-' || g)) FROM generate_series(1, 1000) g))" >/dev/null
psql_ -c "SELECT count(*) FROM silo.lease('w', 'live', 200, 3600000)" >/dev/null
psql_ -c "VACUUM ANALYZE" -c "CHECKPOINT"
psql_ -c "SELECT 'tables: ' || string_agg(relname || ' ' || pg_size_pretty(pg_total_relation_size(oid)), ', ' ORDER BY relname)
		  FROM pg_class WHERE relnamespace = 'silo'::regnamespace AND relkind = 'r'
		   AND relname IN ('job_info', 'job_status', 'job_status_index', 'job_metadata')"

explain()
{
	printf '\n-- %s\n%s\n' "$1" "$2"
	psql_ -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) $2"
}

explain "newest Failed jobs of a tenant" \
"SELECT id, task_group, finished_at FROM silo.finished_jobs
 WHERE tenant = 'big' AND status = 'Failed' ORDER BY finished_at DESC LIMIT 50"
explain "jobs of a tenant with metadata k = v" \
"SELECT j.id, j.status, j.status_changed_at FROM silo.job_metadata m
  JOIN silo.jobs j ON j.tenant = m.tenant AND j.id = m.job_id
 WHERE m.tenant = 'big' AND m.key = 'customer' AND m.value = 'c42' ORDER BY j.id LIMIT 50"
explain "one job by id, through silo.jobs" \
"SELECT status, status_changed_at FROM silo.jobs WHERE tenant = 'big' AND id = 'job-500000'"
explain "a pending job by id, through silo.jobs" \
"SELECT status FROM silo.jobs WHERE tenant = 'big' AND id = 'live-7'"
explain "a tenant's running jobs, through silo.jobs" \
"SELECT count(*) FROM silo.jobs WHERE tenant = 'big' AND status = 'Running'"
explain "a tenant's running jobs, through silo.live_jobs" \
"SELECT count(*) FROM silo.live_jobs WHERE tenant = 'big' AND status = 'Running'"
explain "one finished job by id, through silo.finished_jobs (use silo.jobs for this)" \
"SELECT status, finished_at FROM silo.finished_jobs WHERE tenant = 'big' AND id = 'job-500000'"
explain "a tenant's Failed jobs, newest first, through silo.finished_jobs" \
"SELECT count(*) FROM (SELECT id FROM silo.finished_jobs WHERE tenant = 't41' AND status = 'Failed'
  ORDER BY finished_at DESC) f"
explain "a 10,000-job tenant's Failed jobs, through silo.jobs" \
"SELECT count(*) FROM silo.jobs WHERE tenant = 't41' AND status = 'Failed'"
