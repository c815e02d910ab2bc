/* silo--1.5--1.6.sql: pg_cron's purge command no longer trusts the database's search_path. */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION silo UPDATE TO '1.6'" to load this file. \quit

/*
 * The 1.6 library is the one that keeps the purge command safe (its
 * broker rewrites any other command it finds); an older library still
 * loaded in this server would not, and would wait for its own version.
 */
DO $$
BEGIN
	IF coalesce(current_setting('silo.library_version', true), '') IN ('', '1.5') THEN
		RAISE EXCEPTION 'the silo library loaded in this server is older than 1.6'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = 'PostgreSQL keeps using the library it loaded at start.',
				  HINT = 'Restart PostgreSQL after installing silo 1.6, then run ALTER EXTENSION silo UPDATE.';
	END IF;
END
$$;

/*
 * Up to 1.5 the pg_cron job that runs the purge was a DO block calling
 * to_regprocedure() by its bare name.  pg_cron runs it as the superuser
 * that scheduled it (the broker's role) with the database's settings, so a
 * database owner who set the database's search_path to a schema of theirs
 * had their own to_regprocedure() run as a superuser.  The new command
 * names everything by schema (docs/security.md); it is the text of
 * SILO_PURGE_COMMAND in src/bgw/silo_bgw.h, and the broker writes it too.  Only
 * jobs run by a superuser are silo's (the broker schedules it as itself).
 */
SELECT cron.alter_job(j.jobid,
					  command => $cmd$DO $purge$ BEGIN IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'silo') THEN PERFORM silo.purge_terminal_jobs(); END IF; END $purge$$cmd$)
  FROM cron.job j JOIN pg_catalog.pg_roles r ON r.rolname = j.username
 WHERE j.jobname = 'silo-purge-terminal-jobs' AND r.rolsuper;
