/* silo--1.6--1.7.sql: every table keyed with its tenant (replication), and a lease's probe of its own group's overdue tasks. */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION silo UPDATE TO '1.7'" to load this file. \quit

/*
 * The 1.7 library reads the index added below; an older library still
 * loaded in this server would keep writing regrant markers the 1.6 way
 * (which still works) but would not know it must not run on 1.7.
 */
DO $$
BEGIN
	IF coalesce(string_to_array(current_setting('silo.library_version', true), '.')::int[],
				'{0,0}') < '{1,7}' THEN
		RAISE EXCEPTION 'the silo library loaded in this server is older than 1.7'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = 'PostgreSQL keeps using the library it loaded at start.',
				  HINT = 'Restart PostgreSQL after installing silo 1.7, then run ALTER EXTENSION silo UPDATE.';
	END IF;
END
$$;

/*
 * Every table has a primary key with tenant in it, which is its replica
 * identity: a publication of a shard's rows filters on tenant, and
 * PostgreSQL refuses an UPDATE or DELETE on a table whose row filter uses
 * a column outside the replica identity (docs/storage.md, "Replication").
 *
 * task_lease was keyed by task_id alone.  Its key becomes (task_id,
 * tenant): task ids are unique by construction (version 7 UUIDs), every
 * look-up by task_id still uses the key's first column, and no index is
 * added to the lease's hot path (an extra unique index used as REPLICA
 * IDENTITY USING INDEX would cost every lease and completion one more
 * B-tree insertion).
 */
ALTER TABLE silo.task_lease
	DROP CONSTRAINT task_lease_pkey,
	ADD CONSTRAINT task_lease_pkey PRIMARY KEY (task_id, tenant);

/*
 * concurrency_regrant had no key at all: under a publication that
 * publishes deletes its DELETE fails, and the broker would retry it
 * forever while the key's waiters starve.  A marker must never wait to be
 * written and the same key may be marked twice, so the key is (tenant,
 * queue, mark_id) with a random mark_id (no sequence: sequences do not
 * replicate).
 */
ALTER TABLE silo.concurrency_regrant
	ADD COLUMN mark_id uuid NOT NULL DEFAULT gen_random_uuid();
ALTER TABLE silo.concurrency_regrant
	ADD CONSTRAINT concurrency_regrant_pkey PRIMARY KEY (tenant, queue, mark_id);
DROP INDEX silo.concurrency_regrant_key;

/*
 * A lease first checks its own group for due tasks the broker has not
 * promoted yet.  With only task_future (start_at WHERE NOT due) that probe
 * walked every group's overdue tasks: 200 leases of an empty group took
 * 378 ms with 20,000 overdue tasks in another group, against 35 ms
 * without.  The broker keeps task_future for its cross-group order.
 * Future tasks only: a due task's insert never touches either index.
 */
CREATE INDEX task_future_group ON silo.task (task_group, start_at) WHERE NOT due;
