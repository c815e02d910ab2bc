--
-- fairness: a task group's fair dispatch across tenants (docs/api.md,
-- "Fair dispatch"): turns across the tenants with due tasks, priority
-- within a tenant, the default tenant served when no named tenant has a
-- task, the turns shared by every lease of the group.
--
SELECT test_helpers.reset();

-- tenant "big" has a burst of priority-0 work; "mid" and "small" have a
-- little, at a lower priority (a larger number); '-' has two
SELECT count(silo.enqueue('fg', tenant => 'big', id => 'b' || lpad(g::text, 2, '0'), priority => 0))
  FROM generate_series(1, 12) g;
SELECT silo.enqueue('fg', tenant => 'small', id => 's1', priority => 9),
	   silo.enqueue('fg', tenant => 'small', id => 's0', priority => 1),
	   silo.enqueue('fg', tenant => 'mid', id => 'm1', priority => 5),
	   silo.enqueue('fg', id => 'd1', priority => 0),
	   silo.enqueue('fg', id => 'd2', priority => 0);

-- without fairness the ready order puts the burst first
BEGIN;
SELECT string_agg(job_id, ' ') AS ready_order FROM silo.lease('w', 'fg', 8);
ROLLBACK;

-- fairness on (silo_admin only; returns the setting the group had)
SELECT silo.configure_task_group('fg', 'round_robin') AS had;
SELECT task_group, fairness FROM silo.task_group_settings;

-- one task per tenant per turn, tenants in name order, each tenant's own
-- tasks in priority order (small's s0, priority 1, before s1, priority
-- 9); the turns are the group's, shared by every lease: leases of one
-- task each go round the tenants
SELECT tenant || ':' || job_id AS turn_1 FROM silo.lease('w', 'fg', 1);
SELECT tenant || ':' || job_id AS turn_2 FROM silo.lease('w', 'fg', 1);
SELECT tenant || ':' || job_id AS turn_3 FROM silo.lease('w', 'fg', 1);
SELECT tenant || ':' || job_id AS turn_4 FROM silo.lease('w', 'fg', 1);
SELECT tenant || ':' || job_id AS turn_5 FROM silo.lease('w', 'fg', 1);

-- once big alone has due tasks they come in one ready-order run; what
-- the named tenants leave goes in the group's ready order: the default
-- tenant '-' has no turn of its own
SELECT string_agg(tenant || ':' || job_id, ' ') AS rest FROM silo.lease('w', 'fg', 20);
SELECT count(*) AS left_over FROM silo.tasks WHERE task_group = 'fg';

-- the same in one lease of a fresh group
SELECT silo.configure_task_group('fg2', 'round_robin') AS had;
SELECT count(silo.enqueue('fg2', tenant => 'big', id => 'b' || g)) FROM generate_series(1, 5) g;
SELECT silo.enqueue('fg2', tenant => 'small', id => 't1', priority => 9),
	   silo.enqueue('fg2', tenant => 'small', id => 't0', priority => 1),
	   silo.enqueue('fg2', tenant => 'mid', id => 'n1', priority => 5);
SELECT string_agg(tenant || ':' || job_id, ' ') AS turns FROM silo.lease('w', 'fg2', 8);

-- a lease of some tenants takes turns across them, in the array's order
SELECT count(silo.enqueue('fg', tenant => t, id => t || g)) FROM generate_series(1, 3) g,
	   unnest(ARRAY['x', 'y', 'z']) t;
SELECT string_agg(tenant || ':' || job_id, ' ') AS filtered
  FROM silo.lease('w', 'fg', 5, tenants => '{z,x}');
-- leases of one task each with a filter go round the filter's tenants
SELECT count(silo.enqueue('fg', tenant => t, id => t || g)) FROM generate_series(1, 2) g,
	   unnest(ARRAY['u', 'v']) t;
SELECT tenant || ':' || job_id AS filtered_1 FROM silo.lease('w', 'fg', 1, tenants => '{u,v}');
SELECT tenant || ':' || job_id AS filtered_2 FROM silo.lease('w', 'fg', 1, tenants => '{u,v}');
SELECT tenant || ':' || job_id AS filtered_3 FROM silo.lease('w', 'fg', 1, tenants => '{u,v}');
-- the default tenant has no turn in a fair group: it must be named
SELECT test_helpers.sqlstate_of($$SELECT silo.enqueue('fg')$$) AS default_tenant;
-- one tenant only: its tasks in ready order
SELECT string_agg(tenant || ':' || job_id, ' ') AS one_tenant
  FROM silo.lease('w', 'fg', 5, tenants => '{y}');

-- back to the ready order (x's x3 is left from the filtered lease)
SELECT silo.configure_task_group('fg', 'none') AS had;
SELECT count(silo.enqueue('fg', tenant => 'p', id => 'p' || g)) FROM generate_series(1, 3) g;
SELECT count(silo.enqueue('fg', tenant => 'q', id => 'q' || g)) FROM generate_series(1, 3) g;
SELECT string_agg(tenant || ':' || job_id, ' ') AS ready_again FROM silo.lease('w', 'fg', 6);
-- a lease of some tenants, not fair, takes their tasks in ready order
-- across them: q's priority-0 task before p's
SELECT silo.enqueue('fg', tenant => 'q', id => 'q-urgent', priority => 0),
	   silo.enqueue('fg', tenant => 'p', id => 'p-late', priority => 9);
SELECT string_agg(tenant || ':' || job_id, ' ') AS merged
  FROM silo.lease('w', 'fg', 10, tenants => '{p,q}');

-- a group never configured has no row and the ready order
SELECT count(*) AS rows_for_other FROM silo.task_group_settings WHERE task_group = 'other';

-- bad input: a documented error, nothing written
SELECT test_helpers.sqlstate_of($$SELECT silo.configure_task_group('fg', 'fair')$$) AS bad_mode,
	   test_helpers.sqlstate_of($$SELECT silo.configure_task_group('fg', NULL)$$) AS null_mode,
	   test_helpers.sqlstate_of($$SELECT silo.configure_task_group(NULL, 'none')$$) AS null_group,
	   test_helpers.sqlstate_of($$SELECT silo.configure_task_group('', 'none')$$) AS empty_group,
	   test_helpers.sqlstate_of(format('SELECT silo.configure_task_group(%L, %L)', E'f\ng', 'none')) AS newline;
SELECT task_group, fairness FROM silo.task_group_settings ORDER BY 1;
-- silo_admin's only
CREATE ROLE regress_fair_producer IN ROLE silo_producer;
GRANT USAGE ON SCHEMA test_helpers TO regress_fair_producer;
SET ROLE regress_fair_producer;
SELECT test_helpers.sqlstate_of($$SELECT silo.configure_task_group('fg', 'round_robin')$$) AS producer;
SELECT count(*) AS producer_reads_settings FROM silo.task_group_settings;
RESET ROLE;
REVOKE USAGE ON SCHEMA test_helpers FROM regress_fair_producer;
DROP ROLE regress_fair_producer;

SELECT test_helpers.status_index_mismatches();
SELECT test_helpers.views_disagree();
SELECT test_helpers.reset();
