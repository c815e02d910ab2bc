/* silo--1.3--1.4.sql: byte-order ("C") collation for every text column. */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION silo UPDATE TO '1.4'" to load this file. \quit

/*
 * Silo's keys are tuples of strings compared byte by byte.  Under a
 * database collation other than C or POSIX (C.UTF-8 and en_US.UTF-8
 * included), PostgreSQL 15 compares text through the C library's strcoll,
 * and every descent of a key index (tenant, id), (task_group, ...) pays for
 * it: about 5% of a leased-and-completed job's instructions, measured in
 * docs/performance.md §9.  Every text column of silo's tables, and its
 * indexes, switch to the "C" collation: comparisons become memcmp, and key
 * order becomes byte order, as in Silo's storekeys (and as C.UTF-8 already
 * sorted).  Query text needs no change: a column's "C" collation wins over
 * the database default of a parameter or literal.
 *
 * 0x03 is rebuilt below anyway; dropping it first spares building it twice.
 */
DROP INDEX silo.job_status_by_status;

/*
 * ALTER COLUMN TYPE refuses columns that views read, so silo's own views
 * (the extension's members) are dropped first and re-created afterwards
 * from their own definitions, each put back as it was: owner, options,
 * comments, grants as they stand, and the extension's record of its
 * initial grants (pg_init_privs), which pg_dump compares the grants with.
 * An object outside the extension that reads one of these views stops the
 * update here, naming it; one that reads a silo table's text column is
 * refused by ALTER COLUMN TYPE itself.
 */
DO $$
DECLARE
	ext_oid		oid := (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'silo');
	vw			record;
	saved		jsonb := '[]';
	deps		text;
	stmt		text;
	tb			record;
	gr			record;
	new_oid		oid;
BEGIN
	SELECT string_agg(DISTINCT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid)
					  || ' reads view ' || d.refobjid::regclass::text, '; ')
	  INTO deps
	  FROM pg_catalog.pg_depend d
	  JOIN pg_catalog.pg_class c ON c.oid = d.refobjid
	 WHERE d.refclassid = 'pg_catalog.pg_class'::regclass
	   AND c.relnamespace = 'silo'::regnamespace AND c.relkind = 'v'
	   AND d.deptype = 'n'
	   AND NOT (d.classid = 'pg_catalog.pg_rewrite'::regclass
				AND (SELECT r.ev_class FROM pg_catalog.pg_rewrite r WHERE r.oid = d.objid) = c.oid);
	IF deps IS NOT NULL THEN
		RAISE EXCEPTION 'objects outside extension silo depend on its views'
			USING ERRCODE = 'dependent_objects_still_exist', DETAIL = deps || '.',
				  HINT = 'Drop them, run ALTER EXTENSION silo UPDATE, and create them again.';
	END IF;

	FOR vw IN
		SELECT c.relname, c.relowner::regrole::text AS owner, c.relacl::text AS relacl,
			   array_to_string(c.reloptions, ', ') AS reloptions,
			   rtrim(pg_catalog.pg_get_viewdef(c.oid), ';') AS def,
			   (SELECT ip.initprivs::text FROM pg_catalog.pg_init_privs ip
				 WHERE ip.objoid = c.oid AND ip.classoid = 'pg_catalog.pg_class'::regclass
				   AND ip.objsubid = 0) AS initprivs,
			   to_jsonb(ARRAY(
				   SELECT CASE WHEN ds.objsubid = 0
							   THEN format('COMMENT ON VIEW silo.%I IS %L', c.relname, ds.description)
							   ELSE format('COMMENT ON COLUMN silo.%I.%I IS %L', c.relname,
										   (SELECT at.attname FROM pg_catalog.pg_attribute at
											 WHERE at.attrelid = c.oid AND at.attnum = ds.objsubid),
										   ds.description) END
					 FROM pg_catalog.pg_description ds
					WHERE ds.objoid = c.oid AND ds.classoid = 'pg_catalog.pg_class'::regclass)) AS comments
		  FROM pg_catalog.pg_class c
		  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_class'::regclass
									 AND d.objid = c.oid AND d.refobjid = ext_oid AND d.deptype = 'e'
		 WHERE c.relnamespace = 'silo'::regnamespace AND c.relkind = 'v'
		 ORDER BY c.oid
	LOOP
		saved := saved || jsonb_build_array(to_jsonb(vw));
		EXECUTE format('DROP VIEW silo.%I', vw.relname);
	END LOOP;

	FOR tb IN
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
		EXECUTE format('ALTER TABLE silo.%I %s', tb.relname, tb.alters);
	END LOOP;

	FOR vw IN
		SELECT * FROM jsonb_to_recordset(saved)
			AS x(relname text, owner text, relacl text, reloptions text, def text,
				 initprivs text, comments jsonb)
	LOOP
		EXECUTE format('CREATE VIEW silo.%I%s AS %s', vw.relname,
					   CASE WHEN vw.reloptions IS NOT NULL
							THEN ' WITH (' || vw.reloptions || ')' ELSE '' END,
					   vw.def);
		new_oid := format('silo.%I', vw.relname)::regclass;
		EXECUTE format('ALTER VIEW silo.%I OWNER TO %s', vw.relname, vw.owner);

		/* exactly the grants it had: none of the new view's defaults */
		EXECUTE format('REVOKE ALL ON silo.%I FROM PUBLIC', vw.relname);
		FOR gr IN
			SELECT DISTINCT x.grantee::regrole::text AS grantee
			  FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) x
			 WHERE c.oid = new_oid AND x.grantee <> 0 AND x.grantee <> c.relowner
		LOOP
			EXECUTE format('REVOKE ALL ON silo.%I FROM %s', vw.relname, gr.grantee);
		END LOOP;
		FOR gr IN
			SELECT x.privilege_type, x.is_grantable,
				   CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE x.grantee::regrole::text END AS grantee
			  FROM pg_catalog.aclexplode(vw.relacl::aclitem[]) x
			 WHERE x.grantee <> (SELECT relowner FROM pg_catalog.pg_class WHERE oid = new_oid)
		LOOP
			EXECUTE format('GRANT %s ON silo.%I TO %s%s', gr.privilege_type, vw.relname, gr.grantee,
						   CASE WHEN gr.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
		END LOOP;
		FOR stmt IN SELECT jsonb_array_elements_text(vw.comments)
		LOOP
			EXECUTE stmt;
		END LOOP;

		/* what pg_dump takes for the extension's own grants, unchanged */
		DELETE FROM pg_catalog.pg_init_privs
		 WHERE objoid = new_oid AND classoid = 'pg_catalog.pg_class'::regclass;
		IF vw.initprivs IS NOT NULL THEN
			INSERT INTO pg_catalog.pg_init_privs (objoid, classoid, objsubid, privtype, initprivs)
			VALUES (new_oid, 'pg_catalog.pg_class'::regclass, 0, 'e', vw.initprivs::aclitem[]);
		END IF;
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
CREATE INDEX job_status_by_status ON silo.job_status (tenant, status, changed_at, id)
	WITH (deduplicate_items = off) WHERE status <> 'Pending';
