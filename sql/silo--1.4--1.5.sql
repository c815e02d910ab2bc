/* silo--1.4--1.5.sql: 0x03 in a table of its own; status changes are HOT. */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION silo UPDATE TO '1.5'" to load this file. \quit

/*
 * The 1.5 library moves a job's 0x03 row with every status change; an
 * older library still loaded in this server (installed, not restarted)
 * would change statuses without it.  It has no silo.library_version.
 */
DO $$
BEGIN
	IF current_setting('silo.library_version', true) IS NULL THEN
		RAISE EXCEPTION 'the silo library loaded in this server is older than 1.5'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = 'PostgreSQL keeps using the library it loaded at start, and the 1.4 library does not keep the new status index.',
				  HINT = 'Restart PostgreSQL after installing silo 1.5, then run ALTER EXTENSION silo UPDATE.';
	END IF;
END
$$;

/*
 * No status row may change while 0x03 is filled from them: an enqueue
 * that committed after the copy's snapshot would have no 0x03 row.  The
 * indexes dropped below need this lock anyway.
 */
LOCK TABLE silo.job_status IN ACCESS EXCLUSIVE MODE;

/*
 * 0x03, the status/time index, becomes the table Silo's layout has:
 * (tenant, status, changed_at, id), one row per job, the status and time
 * of its job_status row.  Until now it was an index on job_status, and so
 * was the list of a tenant's pending jobs (job_status_pending); both
 * cover status, so every status change rewrote the row's index entries.
 * Without them a status change is a HOT update, and the transition moves
 * the job's 0x03 row instead (src/statusindex.c, docs/performance.md §12).
 * Pending jobs have rows too: a tenant's live jobs are its 'Pending' range.
 */
CREATE TABLE silo.job_status_index (
	tenant		text COLLATE "C" NOT NULL,
	status		text COLLATE "C" NOT NULL
		CHECK (status IN ('Pending', 'Succeeded', 'Failed', 'Cancelled')),
	changed_at	timestamptz NOT NULL,
	id			text COLLATE "C" NOT NULL,
	CONSTRAINT job_status_index_pkey PRIMARY KEY (tenant, status, changed_at, id)
		WITH (deduplicate_items = off)
);

INSERT INTO silo.job_status_index (tenant, status, changed_at, id)
SELECT tenant, status, changed_at, id FROM silo.job_status;

DROP INDEX silo.job_status_by_status;
DROP INDEX silo.job_status_pending;

/*
 * Row hints: where a row was written, so that the next step finds it by
 * TID instead of an index search (docs/storage.md, "Row hints").  A hint
 * is checked against the row's key before use, and ignored when it is
 * stale (the row moved: VACUUM FULL, a restore) or NULL (rows written
 * before 1.5, and by the slower paths).
 */
ALTER TABLE silo.job_status ADD COLUMN status_index_tid tid;	-- its 0x03 row
ALTER TABLE silo.task ADD COLUMN job_info_tid tid,				-- its job's job_info row
					  ADD COLUMN job_status_tid tid;			-- its job's job_status row
ALTER TABLE silo.task_lease ADD COLUMN job_status_tid tid;

/*
 * A batch of completions updates neighbouring status rows in one
 * transaction, and a page takes a HOT version of a row only while it has
 * room for it next to the old one: half of each page is left free for
 * them.  Pages written from now on; existing ones empty out as their jobs
 * end.
 */
ALTER TABLE silo.job_status SET (fillfactor = 50);

-- 0x03 churns like the task tables: entries of finished jobs are deleted
ALTER TABLE silo.job_status_index SET (autovacuum_vacuum_scale_factor = 0.01,
									   autovacuum_vacuum_threshold = 1000,
									   autovacuum_vacuum_cost_delay = 0);

SELECT pg_catalog.pg_extension_config_dump('silo.job_status_index', '');

REVOKE ALL ON silo.job_status_index FROM PUBLIC;
GRANT SELECT ON silo.job_status_index TO silo_admin;

/*
 * The views.  silo.jobs is now a plain join over job_status, read by its
 * primary key: a job by id, and jobs joined by id (from job_metadata, say),
 * which the planner can probe row by row.  The live status of a pending job
 * is derived as before.  Until 1.4 it was a UNION ALL of terminal and
 * pending status rows, so that a filter on a status reached an index on
 * job_status; that index is gone (HOT updates), and the UNION ALL, whose
 * second branch reads the clock, could not be probed by key from a join:
 * such a join read every status row of the tenant.  Lists of a tenant's
 * jobs in one status come from 0x03: silo.finished_jobs for history, newest
 * first, joining the status row by (tenant, id) only.  (Joined on all four
 * columns, the planner would take them for independent, expect almost no
 * rows, and sort a tenant's whole status range to find the newest 50
 * instead of reading the index backwards.)  docs/storage.md, "Query plans
 * at 1M jobs".
 */
CREATE OR REPLACE VIEW silo.jobs AS
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
	   i.payload, i.metadata, c.cancelled_at
  FROM silo.job_status s
  JOIN silo.job_info i ON i.tenant = s.tenant AND i.id = s.id
  LEFT JOIN silo.job_cancellation c ON c.tenant = s.tenant AND c.job_id = s.id;

CREATE OR REPLACE VIEW silo.finished_jobs AS
SELECT x.tenant, x.id, i.task_group, x.status, i.priority::integer AS priority,
	   i.enqueued_at, x.changed_at AS finished_at, s.attempt AS last_attempt,
	   i.payload, i.metadata, c.cancelled_at
  FROM silo.job_status_index x
  JOIN silo.job_status s ON s.tenant = x.tenant AND s.id = x.id
  JOIN silo.job_info i ON i.tenant = x.tenant AND i.id = x.id
  LEFT JOIN silo.job_cancellation c ON c.tenant = x.tenant AND c.job_id = x.id
 WHERE x.status <> 'Pending';

/*
 * silo.live_jobs: a tenant's pending jobs (Waiting, Scheduled, Retrying,
 * Running) from 0x03's 'Pending' range, with silo.jobs' columns.  silo.jobs
 * finds them too, but by reading every status row of the tenant.  The join
 * is on all four columns, so a job can also be found by id here.
 */
CREATE VIEW silo.live_jobs AS
SELECT s.tenant, s.id, i.task_group,
	   CASE WHEN EXISTS (SELECT 1 FROM silo.task_lease l WHERE l.task_id = s.task_id)
				THEN 'Running'
			WHEN s.next_attempt_at > silo.now()
				THEN CASE WHEN s.relative_attempt > 1 THEN 'Retrying' ELSE 'Scheduled' END
			ELSE 'Waiting' END COLLATE "C" AS status,
	   i.priority::integer AS priority, i.enqueued_at,
	   coalesce((SELECT l.started_at FROM silo.task_lease l WHERE l.task_id = s.task_id),
				s.changed_at) AS status_changed_at,
	   s.attempt AS current_attempt,
	   CASE WHEN NOT EXISTS (SELECT 1 FROM silo.task_lease l WHERE l.task_id = s.task_id)
				THEN s.next_attempt_at END AS next_attempt_at,
	   i.payload, i.metadata, c.cancelled_at
  FROM silo.job_status_index x
  JOIN silo.job_status s ON s.tenant = x.tenant AND s.id = x.id
					   AND s.status = x.status AND s.changed_at = x.changed_at
  JOIN silo.job_info i ON i.tenant = s.tenant AND i.id = s.id
  LEFT JOIN silo.job_cancellation c ON c.tenant = s.tenant AND c.job_id = s.id
 WHERE x.status = 'Pending';

REVOKE ALL ON silo.live_jobs FROM PUBLIC;
GRANT SELECT ON silo.live_jobs TO silo_producer, silo_admin;
