/* silo--1.2--1.3.sql: lease marks, so a long-open snapshot does not slow leasing. */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION silo UPDATE TO '1.3'" to load this file. \quit

/*
 * Every change to silo.task reports the due rows it adds or removes to the
 * lease marks in shared memory (src/leasemark.c).  A lease starts its scan
 * of task_ready at its group's mark instead of at the front, so it no
 * longer walks the index entries of every task leased since the oldest
 * open snapshot.  The trigger fires ALWAYS, also under
 * session_replication_role = replica: a row it does not see could be
 * skipped by leases.  Leases use marks only while this trigger exists and
 * fires always.
 */
CREATE FUNCTION silo.task_mark_trigger() RETURNS trigger
AS 'MODULE_PATHNAME', 'silo_task_mark_trigger'
LANGUAGE C;

REVOKE ALL ON FUNCTION silo.task_mark_trigger() FROM PUBLIC;

CREATE TRIGGER task_lease_mark BEFORE INSERT OR UPDATE OR DELETE ON silo.task
	FOR EACH ROW EXECUTE FUNCTION silo.task_mark_trigger();
ALTER TABLE silo.task ENABLE ALWAYS TRIGGER task_lease_mark;
