--
-- tenancy: tenants as a security boundary (docs/security.md, "Tenants").
-- A role per tenant tries everything against the other tenant: each
-- attempt is a documented error, nothing is written, nothing disclosed.
--
SELECT test_helpers.reset();

CREATE ROLE regress_t1_producer IN ROLE silo_producer;
CREATE ROLE regress_t1_worker IN ROLE silo_worker;
CREATE ROLE regress_t2_producer IN ROLE silo_producer;
CREATE ROLE regress_t2_worker IN ROLE silo_worker;
CREATE ROLE regress_t1_worker2 IN ROLE silo_worker;
CREATE ROLE regress_free_producer IN ROLE silo_producer;	-- bound to nothing
CREATE ROLE regress_t1_team;								-- bound, with a member
CREATE ROLE regress_t1_member IN ROLE regress_t1_team, silo_producer;
-- the roles run the test helpers (which run as the caller)
GRANT USAGE ON SCHEMA test_helpers TO regress_t1_producer, regress_t1_worker, regress_t1_worker2,
	regress_t2_producer, regress_t2_worker, regress_free_producer, regress_t1_member;

-- bindings, by silo_admin (here a superuser)
SELECT silo.grant_tenant('regress_t1_producer', 't1') AS added,
	   silo.grant_tenant('regress_t1_worker', 't1') AS added,
	   silo.grant_tenant('regress_t2_producer', 't2') AS added,
	   silo.grant_tenant('regress_t2_worker', 't2') AS added,
	   silo.grant_tenant('regress_t1_team', 't1') AS added,
	   silo.grant_tenant('regress_t1_worker2', 't1') AS added,
	   silo.grant_tenant('regress_t1_team', 't1') AS again;
SELECT role, tenant FROM silo.tenant_grants ORDER BY 1, 2;
-- bad input: nothing written
SELECT test_helpers.sqlstate_of($$SELECT silo.grant_tenant(NULL, 't1')$$) AS null_role,
	   test_helpers.sqlstate_of($$SELECT silo.grant_tenant('regress_t1_worker', NULL)$$) AS null_tenant,
	   test_helpers.sqlstate_of($$SELECT silo.grant_tenant('regress_t1_worker', '')$$) AS empty_tenant,
	   test_helpers.sqlstate_of(format('SELECT silo.grant_tenant(%L, %L)', 'regress_t1_worker', E't\n1')) AS newline,
	   test_helpers.sqlstate_of($$SELECT silo.grant_tenant('regress_no_such_role', 't1')$$) AS no_role;
SELECT count(*) AS bindings FROM silo.tenant_grants;

-- work of both tenants in one task group; j2-done is finished first
SELECT silo.enqueue('tg', tenant => 't2', id => 'j2-done');
SELECT job_id, silo.complete(task_id, 'admin') FROM silo.lease('admin', 'tg', 1, tenants => '{t2}');
SELECT silo.enqueue('tg', '{"secret": "t1"}', tenant => 't1', id => 'j1',
					metadata => '{"customer": "one"}');
SELECT silo.enqueue('tg', '{"secret": "t2"}', tenant => 't2', id => 'j2',
					metadata => '{"customer": "two"}');
SELECT silo.enqueue('tg', '{"secret": "t2"}', tenant => 't2', id => 'j2-later',
					start_at => now() + interval '1 hour');
-- t2 also has a job blocked on a concurrency limit
SELECT silo.enqueue('tg-lim', tenant => 't2', id => 'j2-lim' || g,
					limits => '[{"type": "concurrency", "key": "shared", "maxConcurrency": 1}]')
  FROM generate_series(1, 2) g;
SELECT test_helpers.rows('t1') AS t1_before, test_helpers.rows('t2') AS t2_before \gset

-- the producer of t1 acts in t1 ...
SET ROLE regress_t1_producer;
SELECT silo.enqueue('tg', tenant => 't1', id => 'j1b');
SELECT id, status FROM silo.jobs ORDER BY id;
SELECT id FROM silo.live_jobs ORDER BY id;
SELECT id FROM silo.finished_jobs ORDER BY id;
SELECT job_id, status FROM silo.attempts ORDER BY job_id;
SELECT key, value, job_id FROM silo.job_metadata ORDER BY job_id;
-- ... and in nothing else: every call for t2 is refused (42501) the same
-- way whether the job exists or not
SELECT label, test_helpers.sqlstate_of(sql) AS refused FROM (VALUES
  ('enqueue', $$SELECT silo.enqueue('tg', tenant => 't2', id => 'squat')$$),
  ('enqueue_many', $$SELECT silo.enqueue_many('[{"task_group": "tg", "tenant": "t2"}]')$$),
  ('cancel', $$SELECT silo.cancel('j2', 't2')$$),
  ('cancel missing', $$SELECT silo.cancel('nope', 't2')$$),
  ('restart', $$SELECT silo.restart('j2-done', 't2')$$),
  ('expedite', $$SELECT silo.expedite('j2-later', 't2')$$),
  ('delete_job', $$SELECT silo.delete_job('j2-done', 't2')$$),
  ('job_result', $$SELECT * FROM silo.job_result('j2-done', 't2')$$),
  ('job_result missing', $$SELECT * FROM silo.job_result('nope', 't2')$$)
  ) t(label, sql);
-- (delete_job and reset_floating_limit are silo_admin's, who acts everywhere)
-- the views show nothing of t2, by id either (a primary-key probe: below)
SELECT count(*) AS t2_jobs FROM silo.jobs WHERE tenant = 't2';
SELECT count(*) AS t2_job FROM silo.jobs WHERE tenant = 't2' AND id = 'j2';
-- a function of the user's in a WHERE clause sees only t1's rows
CREATE FUNCTION pg_temp.peek(t text, p jsonb) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN RAISE NOTICE 'peek saw % %', t, p; RETURN true; END $$;
SELECT id FROM silo.jobs WHERE pg_temp.peek(tenant, payload) ORDER BY id;
-- nor one cheaper than the filter, on the views made of a union
CREATE FUNCTION pg_temp.cheap_peek(t text, j text) RETURNS boolean LANGUAGE plpgsql
COST 0.0001 AS $$ BEGIN RAISE NOTICE 'cheap peek saw % %', t, j; RETURN true; END $$;
SELECT count(*) AS attempts FROM silo.attempts WHERE pg_temp.cheap_peek(tenant, job_id);
SELECT count(*) AS blocked FROM silo.blocked_jobs WHERE pg_temp.cheap_peek(tenant, job_id);
RESET ROLE;

-- a bound login cannot shed its tenants by SET ROLE to an unbound role
-- it is a member of (silo_producer): the session's user stays bound
SET SESSION AUTHORIZATION regress_t1_producer;
SET ROLE silo_producer;
SELECT count(*) AS t2_jobs FROM silo.jobs WHERE tenant = 't2';
SELECT silo.enqueue('tg', tenant => 't2', id => 'escaped');
RESET ROLE;
RESET SESSION AUTHORIZATION;
-- while an unbound login (a pooler's) acts as the bound role it sets
CREATE ROLE regress_pooler IN ROLE regress_t2_producer, regress_t1_producer;
SET SESSION AUTHORIZATION regress_pooler;
SET ROLE regress_t1_producer;
SELECT count(*) FILTER (WHERE tenant = 't1') AS t1_jobs,
	   count(*) FILTER (WHERE tenant = 't2') AS t2_jobs FROM silo.jobs;
RESET ROLE;
RESET SESSION AUTHORIZATION;
DROP ROLE regress_pooler;

-- the bindings are read without SQL: an operator planted in the caller's
-- search_path never runs, whatever reloads them
CREATE SCHEMA regress_plant AUTHORIZATION regress_t1_producer;
SET ROLE regress_t1_producer;
CREATE FUNCTION regress_plant.name_eq_text(a name, b text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN RAISE NOTICE 'planted operator ran as %', current_user; RETURN true; END $$;
CREATE OPERATOR regress_plant.= (LEFTARG = name, RIGHTARG = text, FUNCTION = regress_plant.name_eq_text);
RESET ROLE;
SELECT silo.grant_tenant('regress_t1_team', 't1-more') AS reload;
SET search_path = regress_plant, pg_catalog;
SET ROLE regress_t1_producer;
SELECT count(*) AS visible FROM silo.jobs;
SELECT silo.tenant_visible('t2') AS t2_visible;
RESET ROLE;
RESET search_path;
DROP SCHEMA regress_plant CASCADE;
SELECT silo.revoke_tenant('regress_t1_team', 't1-more') AS reloaded;

-- a binding rolled back is forgotten by the session that made it
BEGIN;
SELECT silo.grant_tenant('regress_t1_producer', 't9') AS bound_for_now;
SET ROLE regress_t1_producer;
SELECT silo.enqueue('tg', tenant => 't9', id => 'j9') AS enqueued_in_t9;
RESET ROLE;
ROLLBACK;
SET ROLE regress_t1_producer;
SELECT test_helpers.sqlstate_of($$SELECT silo.enqueue('tg', tenant => 't9')$$) AS after_rollback;
RESET ROLE;

-- '*' stands for every tenant in bindings: no tenant may be named so
SELECT test_helpers.sqlstate_of($$SELECT silo.enqueue('tg', tenant => '*')$$) AS star_tenant;
-- the tenants filter's checks
SELECT label, test_helpers.sqlstate_of(sql) AS refused FROM (VALUES
  ('two dimensions', $$SELECT silo.lease('w', 'tg', 1, tenants => '{{a},{b}}')$$),
  ('too many', $$SELECT silo.lease('w', 'tg', 1, tenants => (SELECT array_agg(g::text) FROM generate_series(1, 1001) g))$$),
  ('null', $$SELECT silo.lease('w', 'tg', 1, tenants => '{a,NULL}')$$),
  ('empty', $$SELECT silo.lease('w', 'tg', 1, tenants => '{a,""}')$$)
  ) t(label, sql);

-- a member of a bound role is bound too
SET ROLE regress_t1_member;
SELECT test_helpers.sqlstate_of($$SELECT silo.enqueue('tg', tenant => 't2')$$) AS member_in_t2;
SELECT count(*) AS visible FROM silo.jobs;
RESET ROLE;

-- a role bound to nothing acts everywhere while isolation is off
SET ROLE regress_free_producer;
SELECT count(*) AS visible FROM silo.jobs;
SELECT silo.enqueue('tg', tenant => 't3', id => 'j3');
RESET ROLE;

-- nothing of t2 was written or changed by t1's producer
SELECT test_helpers.rows('t2') = :'t2_before' AS t2_untouched;

-- workers: t1's worker leases only t1's tasks, whatever it asks for
SET ROLE regress_t1_worker;
SELECT count(*) AS leased_t2 FROM silo.lease('w1', 'tg', 10, tenants => '{t2}');
SELECT tenant, job_id FROM silo.lease('w1', 'tg', 10) ORDER BY job_id;
RESET ROLE;
-- a lease belongs to the role that took it: another worker role of t1,
-- with the right worker_id, gets "lease owner mismatch" on every report
SELECT task_id AS t1_task FROM silo.task_lease WHERE job_id = 'j1' \gset
SET ROLE regress_t1_worker2;
SELECT label, test_helpers.sqlstate_of(sql) AS refused FROM (VALUES
  ('heartbeat', format('SELECT silo.heartbeat(%L, %L)', :'t1_task', 'w1')),
  ('complete', format('SELECT silo.complete(%L, %L)', :'t1_task', 'w1')),
  ('fail', format('SELECT silo.fail(%L, %L, %L)', :'t1_task', 'w1', 'X')),
  ('release', format('SELECT silo.release(%L, %L)', :'t1_task', 'w1')),
  ('ack_cancel', format('SELECT silo.ack_cancel(%L, %L)', :'t1_task', 'w1'))
  ) t(label, sql);
SELECT count(*) AS completed FROM silo.complete_many(ARRAY[:'t1_task']::uuid[], 'w1');
RESET ROLE;
-- t2's worker is told nothing of t1's lease: "lease not found", as for a
-- task id nobody leased
SET ROLE regress_t2_worker;
SELECT label, test_helpers.sqlstate_of(sql) AS refused FROM (VALUES
  ('heartbeat', format('SELECT silo.heartbeat(%L, %L)', :'t1_task', 'w1')),
  ('heartbeat, wrong worker', format('SELECT silo.heartbeat(%L, %L)', :'t1_task', 'wx')),
  ('complete', format('SELECT silo.complete(%L, %L)', :'t1_task', 'w1')),
  ('complete, wrong worker', format('SELECT silo.complete(%L, %L)', :'t1_task', 'wx')),
  ('fail', format('SELECT silo.fail(%L, %L, %L)', :'t1_task', 'w1', 'X')),
  ('release', format('SELECT silo.release(%L, %L)', :'t1_task', 'w1')),
  ('ack_cancel', format('SELECT silo.ack_cancel(%L, %L)', :'t1_task', 'w1')),
  ('never leased', format('SELECT silo.complete(%L, %L)', gen_random_uuid(), 'w1'))
  ) t(label, sql);
SELECT count(*) AS completed FROM silo.complete_many(ARRAY[:'t1_task']::uuid[], 'w1');
-- and it leases only t2's
SELECT tenant, job_id FROM silo.lease('w2', 'tg', 10) ORDER BY job_id;
RESET ROLE;
SELECT job_id, worker_id FROM silo.leases WHERE job_id = 'j1';
-- producers no longer see the task id of a running attempt
SET ROLE regress_t1_producer;
SELECT job_id, status, task_id IS NULL AS task_id_hidden FROM silo.attempts WHERE status = 'Running';
RESET ROLE;
SELECT count(*) AS admin_sees_task_ids FROM silo.attempts WHERE status = 'Running' AND task_id IS NOT NULL;
-- a report may name the task's tenant (cluster mode routes by it): a
-- tenant the role is not bound to is refused (42501) before the lease is
-- looked up, a bad one is 22023, and the report writes nothing
SET ROLE regress_t1_worker;
SELECT label, test_helpers.sqlstate_of(sql) AS refused FROM (VALUES
  ('heartbeat, t2', format('SELECT silo.heartbeat(%L, %L, 10000, %L)', :'t1_task', 'w1', 't2')),
  ('complete, t2', format('SELECT silo.complete(%L, %L, NULL, %L)', :'t1_task', 'w1', 't2')),
  ('fail, t2', format('SELECT silo.fail(%L, %L, %L, NULL, %L)', :'t1_task', 'w1', 'X', 't2')),
  ('release, t2', format('SELECT silo.release(%L, %L, %L)', :'t1_task', 'w1', 't2')),
  ('ack_cancel, t2', format('SELECT silo.ack_cancel(%L, %L, %L)', :'t1_task', 'w1', 't2')),
  ('report_refresh, t2', format('SELECT silo.report_refresh(%L, %L, 1, %L)', :'t1_task', 'w1', 't2')),
  ('fail_refresh, t2', format('SELECT silo.fail_refresh(%L, %L, %L, %L)', :'t1_task', 'w1', 'e', 't2')),
  ('complete, empty tenant', format('SELECT silo.complete(%L, %L, NULL, %L)', :'t1_task', 'w1', ''))
  ) t(label, sql);
RESET ROLE;
SELECT status FROM silo.jobs WHERE tenant = 't1' AND id = 'j1';
SET ROLE regress_t1_worker;
-- t1's worker reports its own lease, naming its tenant
SELECT silo.heartbeat(:'t1_task', 'w1', tenant => 't1') AS cancelled;
SELECT silo.complete(:'t1_task', 'w1', tenant => 't1');
RESET ROLE;
SELECT status FROM silo.jobs WHERE tenant = 't1' AND id = 'j1';

-- isolation mode: the tenant is required everywhere, and a role bound to
-- nothing can do nothing
SELECT silo.enqueue('tg', id => 'd-iso') AS default_tenant_job;
ALTER SYSTEM SET silo.tenant_isolation = on;
SELECT pg_reload_conf();
\c
SHOW silo.tenant_isolation;
SET ROLE regress_free_producer;
SELECT label, test_helpers.sqlstate_of(sql) AS refused FROM (VALUES
  ('enqueue', $$SELECT silo.enqueue('tg', tenant => 't3')$$),
  ('default tenant', $$SELECT silo.enqueue('tg')$$),
  ('cancel', $$SELECT silo.cancel('j3', 't3')$$)) t(label, sql);
SELECT count(*) AS visible FROM silo.jobs;
RESET ROLE;
-- the default tenant's tasks wait, even for an administrator's lease
SELECT count(*) AS default_leased FROM silo.lease('admin', 'tg', 10, tenants => '{-}');
SELECT count(*) FILTER (WHERE tenant = '-') AS default_leased FROM silo.lease('admin', 'tg', 10);
CREATE ROLE regress_free_worker IN ROLE silo_worker;
SET ROLE regress_free_worker;
SELECT count(*) AS unbound_worker_leased FROM silo.lease('w3', 'tg', 10);
RESET ROLE;
DROP ROLE regress_free_worker;
SELECT count(*) AS still_waiting FROM silo.jobs WHERE status = 'Waiting';
SET ROLE regress_t1_producer;
SELECT test_helpers.sqlstate_of($$SELECT silo.enqueue('tg')$$) AS bound_default_tenant;
SELECT silo.enqueue('tg', tenant => 't1', id => 'j1c') AS bound_named_tenant;
RESET ROLE;
SELECT test_helpers.sqlstate_of($$SELECT silo.enqueue('tg')$$) AS admin_default_tenant;
ALTER SYSTEM RESET silo.tenant_isolation;
SELECT pg_reload_conf();
\c
SHOW silo.tenant_isolation;

-- '*' binds to every tenant; revoking the last binding unbinds
SELECT silo.grant_tenant('regress_t2_producer', '*') AS star;
SET ROLE regress_t2_producer;
SELECT count(DISTINCT tenant) AS tenants_visible FROM silo.jobs;
RESET ROLE;
SELECT silo.revoke_tenant('regress_t2_producer', '*') AS revoked,
	   silo.revoke_tenant('regress_t2_producer', 't2') AS revoked,
	   silo.revoke_tenant('regress_t2_producer', 't2') AS again;
SET ROLE regress_t2_producer;
SELECT count(DISTINCT tenant) AS tenants_visible FROM silo.jobs;
RESET ROLE;

-- a lease of the default tenant's tasks among others' (task_ready_tenant
-- leaves tenant '-' out: it is found on the group's ready order)
SELECT silo.enqueue('mix', tenant => 't1', id => 'm1', priority => 10),
	   silo.enqueue('mix', id => 'm2', priority => 20),
	   silo.enqueue('mix', tenant => 't2', id => 'm3', priority => 5),
	   silo.enqueue('mix', id => 'm4', priority => 1);
SELECT tenant, job_id FROM silo.lease('admin', 'mix', 10, tenants => '{-}');
SELECT tenant, job_id FROM silo.lease('admin', 'mix', 1, tenants => '{t2,t1}');
SELECT tenant, job_id FROM silo.lease('admin', 'mix', 10);

-- a job by id through the filtered view is still a primary-key probe
SET ROLE regress_t1_producer;
EXPLAIN (COSTS OFF) SELECT id, status FROM silo.jobs WHERE tenant = 't1' AND id = 'j1';
RESET ROLE;

SELECT test_helpers.status_index_mismatches();
SELECT test_helpers.views_disagree();
SELECT test_helpers.reset();
REVOKE USAGE ON SCHEMA test_helpers FROM regress_t1_producer, regress_t1_worker, regress_t1_worker2,
	regress_t2_producer, regress_t2_worker, regress_free_producer, regress_t1_member;
DROP ROLE regress_t1_producer, regress_t1_worker, regress_t1_worker2, regress_t2_producer, regress_t2_worker,
	regress_free_producer, regress_t1_member, regress_t1_team;
