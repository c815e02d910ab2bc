/* silo--1.8--1.9.sql: silo.wait_any, one session awaiting many jobs (issue 16, section 1). */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION silo UPDATE TO '1.9'" to load this file. \quit

/* The 1.9 library has silo_wait_any; an older one still loaded does not. */
DO $$
BEGIN
	IF coalesce(string_to_array(current_setting('silo.library_version', true), '.')::int[],
				'{0,0}') < '{1,9}' THEN
		RAISE EXCEPTION 'the silo library loaded in this server is older than 1.9'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = 'PostgreSQL keeps using the library it loaded at start.',
				  HINT = 'Restart PostgreSQL after installing silo 1.9, then run ALTER EXTENSION silo UPDATE.';
	END IF;
END
$$;

/*
 * silo.wait_any(job_ids, tenant, timeout, INOUT ended): wait in one
 * session until at least one of the jobs has ended (or is gone), then
 * return the ids of those found so; an empty array at the timeout.  A
 * procedure that commits while it sleeps, as silo.wait_result is, and for
 * the same reasons neither SECURITY DEFINER nor with SET clauses: each
 * look runs as the owner with search_path pinned (src/core/wait_any.c).
 */
CREATE PROCEDURE silo.wait_any(job_ids text[], tenant text DEFAULT '-',
							   timeout interval DEFAULT '30 s',
							   INOUT ended text[] DEFAULT NULL)
AS 'MODULE_PATHNAME', 'silo_wait_any'
LANGUAGE C;

REVOKE ALL ON PROCEDURE silo.wait_any(text[], text, interval, text[]) FROM PUBLIC;
GRANT EXECUTE ON PROCEDURE silo.wait_any(text[], text, interval, text[])
	TO silo_producer, silo_admin;

COMMENT ON PROCEDURE silo.wait_any(text[], text, interval, text[]) IS
	'Waits, holding no snapshot, until one of the jobs has ended; returns the ids found ended or gone (none at the timeout).';
