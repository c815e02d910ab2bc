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

/* ---- helper B: import_jobs ---- */

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
