/* silo--1.1--1.2.sql: batched completion and plans that survive an empty queue. */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION silo UPDATE TO '1.2'" to load this file. \quit

/*
 * silo.complete_many: one call ends a whole batch of tasks as Succeeded
 * (src/batch.c).  Tasks whose lease is gone, expired or another worker's
 * are skipped; the function returns the task ids it completed.
 */
CREATE FUNCTION silo.complete_many(task_ids uuid[], worker_id text, results jsonb[] DEFAULT NULL)
RETURNS SETOF uuid
AS 'MODULE_PATHNAME', 'silo_complete_many'
LANGUAGE C VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp ROWS 32;

REVOKE ALL ON FUNCTION silo.complete_many(uuid[], text, jsonb[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION silo.complete_many(uuid[], text, jsonb[]) TO silo_worker, silo_admin;

/*
 * 0x03, the status/time index, now holds terminal jobs only: it serves
 * "the newest jobs of tenant X in status S" for ended jobs; pending jobs
 * get their own partial index below.  A look-up of a pending job by (tenant, id,
 * status) can no longer be planned through this index, which walked every
 * pending job of the tenant.
 */
-- The new indexes are built first (writes wait, reads go on); the old one
-- is dropped, which locks the table outright, only at the end.
CREATE INDEX job_status_by_status_new ON silo.job_status (tenant, status, changed_at DESC, id)
	WHERE status <> 'Pending';

-- A tenant's live jobs (the Pending branch of silo.jobs) keep an index of
-- their own, keyed like the primary key, so a look-up of one pending job
-- through it is exact too.
CREATE INDEX job_status_pending ON silo.job_status (tenant, id) WHERE status = 'Pending';

DROP INDEX silo.job_status_by_status;
ALTER INDEX silo.job_status_by_status_new RENAME TO job_status_by_status;

/*
 * Queue tables swing between empty and huge, so their statistics are
 * usually wrong, and a plan cached while a table was empty (a sequential
 * scan is cheapest there) stays in the backend's SPI plan cache after the
 * table has grown: measured here, a completion's lease delete took 0.5 ms
 * instead of 13 us.  Every statement these functions run is designed
 * around an index, so they plan with sequential scans disabled; a table
 * with no usable index is still scanned (docs/performance.md).  JIT is off
 * too: such a scan is costed at 1e10, over every JIT threshold, and short
 * queue statements never gain from compiling.
 */
-- (Only the extension's own functions.  A later script that re-creates
-- one of them with CREATE OR REPLACE must give it both settings again.)
DO $$
DECLARE
	f regprocedure;
BEGIN
	FOR f IN
		SELECT p.oid::regprocedure FROM pg_proc p
		  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
						  AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
		  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'silo'
		 WHERE p.pronamespace = 'silo'::regnamespace AND p.prosecdef
	LOOP
		EXECUTE format('ALTER FUNCTION %s SET enable_seqscan = off SET jit = off', f);
	END LOOP;
END
$$;
