/* silo--1.3--1.4.sql: byte-order ("C") collation for every text column. */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION silo UPDATE TO '1.4'" to load this file. \quit

/*
 * Silo's keys are tuples of strings compared byte by byte.  Under a
 * database collation other than C or POSIX (C.UTF-8 and en_US.UTF-8
 * included), PostgreSQL 15 compares text through the C library's strcoll,
 * and every descent of a key index (tenant, id), (task_group, ...) pays for
 * it: about 5% of a leased-and-completed job's CPU, measured in
 * docs/performance.md §9.  Every text column of silo's tables, and its
 * indexes, switch to the "C" collation: comparisons become memcmp, and key
 * order becomes byte order, as in Silo's storekeys (and as C.UTF-8 already
 * sorted).  Query text needs no change: a column's "C" collation wins over
 * the database default of a parameter or literal.
 *
 * ALTER COLUMN TYPE refuses columns that views read, so the views are
 * dropped first and recreated afterwards from their own definitions, with
 * their grants.  Nothing depends on the views.
 */
DO $$
DECLARE
	v			record;
	stmts		text[] := '{}';
	t			record;
BEGIN
	FOR v IN
		SELECT c.oid, c.relname,
			   rtrim(pg_catalog.pg_get_viewdef(c.oid), ';') AS def,
			   ARRAY(SELECT format('GRANT %s ON silo.%I TO %I', a.privilege_type,
								   c.relname, r.rolname)
					   FROM pg_catalog.aclexplode(c.relacl) a
					   JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
					  WHERE a.grantee <> c.relowner
					  ORDER BY r.rolname, a.privilege_type) AS grants
		  FROM pg_catalog.pg_class c
		 WHERE c.relnamespace = 'silo'::regnamespace AND c.relkind = 'v'
		 ORDER BY c.oid
	LOOP
		stmts := stmts || format('CREATE VIEW silo.%I AS %s', v.relname, v.def) || v.grants;
		EXECUTE format('DROP VIEW silo.%I', v.relname);
	END LOOP;

	FOR t IN
		SELECT c.relname,
			   string_agg(format('ALTER COLUMN %I TYPE %s COLLATE "C"', a.attname,
								 pg_catalog.format_type(a.atttypid, a.atttypmod)),
						  ', ' ORDER BY a.attnum) AS alters
		  FROM pg_catalog.pg_class c
		  JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
		 WHERE c.relnamespace = 'silo'::regnamespace AND c.relkind = 'r'
		   AND a.attnum > 0 AND NOT a.attisdropped
		   AND a.atttypid IN ('text'::regtype, 'text[]'::regtype)
		   AND a.attcollation <> '"C"'::regcollation
		 GROUP BY c.relname
	LOOP
		EXECUTE format('ALTER TABLE silo.%I %s', t.relname, t.alters);
	END LOOP;

	FOR i IN 1 .. coalesce(array_length(stmts, 1), 0)
	LOOP
		EXECUTE stmts[i];
	END LOOP;
END
$$;

/*
 * 0x03 in key order.  Entries of a terminal job arrive with ever later
 * changed_at; ascending, they land at the right end of their (tenant,
 * status) range, where the B-tree splits pages full instead of in half.
 * "Newest first" reads the index backwards.  Its keys are unique (id), so
 * deduplication only ever costs a wasted pass before a page split.
 */
DROP INDEX silo.job_status_by_status;
CREATE INDEX job_status_by_status ON silo.job_status (tenant, status, changed_at, id)
	WITH (deduplicate_items = off) WHERE status <> 'Pending';
