--
-- adversarial: hostile and boundary input to every entry point.  Each
-- failing call must raise the documented SQLSTATE with a message that
-- names the argument, and leave every silo table exactly as it was; odd
-- but valid input must round-trip unchanged; no input may crash a backend
-- or make the retry delay overflow, go negative or jump.
--
SELECT test_helpers.reset();

-- fingerprint(except_tenant): every row of every silo table (but those of
-- except_tenant), hashed.  A section takes one before its failing calls
-- and compares it afterwards.
CREATE FUNCTION pg_temp.fingerprint(except_tenant text DEFAULT NULL) RETURNS text
LANGUAGE sql AS $$
	SELECT md5(concat_ws('/',
		(SELECT string_agg(t::text, ',' ORDER BY t::text) FROM silo.job_info t WHERE tenant IS DISTINCT FROM except_tenant),
		(SELECT string_agg(t::text, ',' ORDER BY t::text) FROM silo.job_status t WHERE tenant IS DISTINCT FROM except_tenant),
		(SELECT string_agg(t::text, ',' ORDER BY t::text) FROM silo.job_metadata t WHERE tenant IS DISTINCT FROM except_tenant),
		(SELECT string_agg(t::text, ',' ORDER BY t::text) FROM silo.task t WHERE tenant IS DISTINCT FROM except_tenant),
		(SELECT string_agg(t::text, ',' ORDER BY t::text) FROM silo.task_lease t WHERE tenant IS DISTINCT FROM except_tenant),
		(SELECT string_agg(t::text, ',' ORDER BY t::text) FROM silo.attempt t WHERE tenant IS DISTINCT FROM except_tenant),
		(SELECT string_agg(t::text, ',' ORDER BY t::text) FROM silo.job_cancellation t WHERE tenant IS DISTINCT FROM except_tenant)))
$$;

-- counts(): rows per silo table, all tenants
CREATE FUNCTION pg_temp.counts() RETURNS text
LANGUAGE sql AS $$
	SELECT format('info=%s status=%s task=%s lease=%s attempt=%s meta=%s cancel=%s',
		(SELECT count(*) FROM silo.job_info), (SELECT count(*) FROM silo.job_status),
		(SELECT count(*) FROM silo.task), (SELECT count(*) FROM silo.task_lease),
		(SELECT count(*) FROM silo.attempt), (SELECT count(*) FROM silo.job_metadata),
		(SELECT count(*) FROM silo.job_cancellation))
$$;

--
-- 1. identifiers: lengths are counted in characters (code points), for
-- 4-byte characters too; any non-empty string is an identifier
--
SELECT pg_temp.fingerprint() AS fp \gset

-- the limits, in 4-byte characters (a 128-emoji id is 512 bytes)
SELECT silo.enqueue(repeat('😀', 64), tenant => repeat('😀', 64), id => repeat('😀', 128))
	   = repeat('😀', 128) AS emoji_at_every_limit_ok;
SELECT task_group = repeat('😀', 64) AS group_kept, tenant = repeat('😀', 64) AS tenant_kept,
	   octet_length(job_id) AS id_bytes, silo.complete(task_id, 'w') IS NOT NULL AS completed
  FROM silo.lease('w', repeat('😀', 64));
-- (complete ended the attempt and the job: Succeeded, one Succeeded
-- attempt of worker w, no lease or task left)
SELECT j.status, a.attempt, a.status AS attempt_status, a.worker_id, a.finished_at IS NOT NULL AS finished,
	   a.result IS NULL AS no_result, test_helpers.job_rows(j.tenant, j.id) AS job_rows
  FROM silo.jobs j JOIN silo.attempts a ON a.tenant = j.tenant AND a.job_id = j.id
 WHERE j.tenant = repeat('😀', 64) AND j.id = repeat('😀', 128);
SELECT pg_temp.counts();
SELECT pg_temp.fingerprint() AS fp \gset

-- one character too many, whatever its width; a base letter plus a
-- combining accent is two code points
SELECT silo.enqueue('adv', tenant => repeat('😀', 65));
SELECT label, test_helpers.sqlstate_of(sql) AS result
  FROM (VALUES ('task_group 65 emoji', format('SELECT silo.enqueue(%L)', repeat('😀', 65))),
			   ('id 129 emoji', format('SELECT silo.enqueue(%L, id => %L)', 'adv', repeat('😀', 129))),
			   ('tenant 33 x (e + U+0301)', format('SELECT silo.enqueue(%L, tenant => %L)', 'adv', repeat(E'e\u0301', 33))),
			   ('task_group empty', 'SELECT silo.enqueue('''')'),
			   ('tenant empty', 'SELECT silo.enqueue(''adv'', tenant => '''')'),
			   ('id empty', 'SELECT silo.enqueue(''adv'', id => '''')'),
			   ('lease worker_id 257 emoji', format('SELECT * FROM silo.lease(%L, %L)', repeat('😀', 257), 'adv')),
			   ('lease task_group 65 emoji', format('SELECT * FROM silo.lease(%L, %L)', 'w', repeat('😀', 65))),
			   ('cancel job_id 129 emoji', format('SELECT silo.cancel(%L)', repeat('😀', 129))),
			   ('job_result tenant 65 emoji', format('SELECT * FROM silo.job_result(%L, %L)', 'x', repeat('😀', 65)))
	   ) t(label, sql);
SELECT pg_temp.fingerprint() = :'fp' AS nothing_written;
SELECT silo.enqueue('adv', tenant => repeat(E'e\u0301', 32)) IS NOT NULL AS combining_64_code_points_ok;
-- (the fingerprint does see a write)
SELECT pg_temp.fingerprint() <> :'fp' AS fingerprint_sees_writes;

-- whitespace-only and look-alike ids are distinct, valid ids; they come
-- back byte for byte (tab and newline were valid too until 1.7: see below)
SELECT to_json(silo.enqueue('ws', tenant => 'ws', id => v)) AS id
  FROM (VALUES (1, ' '), (2, '  '), (5, ' a'), (6, 'a '), (7, 'a'), (8, 'A'),
			   (9, E'\u00e9'), (10, E'e\u0301')) t(n, v)
 ORDER BY n;

-- since 1.7 a new tenant, id, task group or limit key must not hold a
-- control or format character (they reach logs and notifications as they
-- are: a newline forges a log line, U+202E reverses what a reader sees):
-- 22023, nothing written
SELECT test_helpers.rows('ctl') AS before;
SELECT label, test_helpers.sqlstate_of(sql) AS refused FROM (VALUES
  ('tab id', format('SELECT silo.enqueue(%L, tenant => %L, id => %L)', 'ctl', 'ctl', E'a\tb')),
  ('newline id', format('SELECT silo.enqueue(%L, tenant => %L, id => %L)', 'ctl', 'ctl', E'a\nb')),
  ('DEL id', format('SELECT silo.enqueue(%L, tenant => %L, id => %L)', 'ctl', 'ctl', E'a\u007fb')),
  ('C1 id', format('SELECT silo.enqueue(%L, tenant => %L, id => %L)', 'ctl', 'ctl', E'a\u0085b')),
  ('RLO tenant', format('SELECT silo.enqueue(%L, tenant => %L)', 'ctl', E'\u202Ectl')),
  ('zero-width tenant', format('SELECT silo.enqueue(%L, tenant => %L)', 'ctl', E'c\u200Btl')),
  ('BOM group', format('SELECT silo.enqueue(%L, tenant => %L)', E'\uFEFFctl', 'ctl')),
  ('line separator group', format('SELECT silo.enqueue(%L, tenant => %L)', E'ctl\u2028', 'ctl')),
  ('CR limit key', format('SELECT silo.enqueue(%L, tenant => %L, limits => %L)', 'ctl', 'ctl',
	 '[{"type": "concurrency", "key": "k\r", "maxConcurrency": 1}]')),
  ('enqueue_many', format('SELECT silo.enqueue_many(%L)',
	 jsonb_build_array(jsonb_build_object('task_group', 'ctl', 'tenant', 'ctl', 'id', E'x\ny'))))
  ) t(label, sql);
SELECT test_helpers.rows('ctl') AS after;
-- a job whose id holds one, written before 1.7 (made here by renaming a
-- job's rows), can still be looked up, cancelled, read and deleted
SELECT silo.enqueue('ctl', tenant => 'ctl', id => 'legacy');
UPDATE silo.job_info SET id = E'leg\tacy' WHERE tenant = 'ctl' AND id = 'legacy';
UPDATE silo.job_status SET id = E'leg\tacy' WHERE tenant = 'ctl' AND id = 'legacy';
UPDATE silo.job_status_index SET id = E'leg\tacy' WHERE tenant = 'ctl' AND id = 'legacy';
UPDATE silo.task SET job_id = E'leg\tacy' WHERE tenant = 'ctl' AND job_id = 'legacy';
SELECT to_json(id) AS id, status FROM silo.jobs WHERE tenant = 'ctl';
SELECT silo.cancel(E'leg\tacy', 'ctl');
SELECT status FROM silo.job_result(E'leg\tacy', 'ctl');
SELECT silo.delete_job(E'leg\tacy', 'ctl') AS deleted;
SELECT test_helpers.rows('ctl') AS gone;
SELECT count(*) AS distinct_jobs FROM silo.job_info WHERE tenant = 'ws';
SELECT to_json(job_id) AS leased_id FROM silo.lease('w', 'ws', 10, 3600000) ORDER BY job_id COLLATE "C";
-- a duplicate of a whitespace id is still a duplicate
SELECT test_helpers.sqlstate_of('SELECT silo.enqueue(''ws'', tenant => ''ws'', id => '' '')') AS duplicate_space_id;
-- quotes, backslashes, percent signs and braces go through messages and
-- lookups unchanged
SELECT silo.enqueue('adv', tenant => E'it''s "%s" \\', id => E'%d %s {} \\" it''s') AS odd_id;
SELECT test_helpers.sqlstate_of(format('SELECT silo.enqueue(%L, tenant => %L, id => %L)',
									   'adv', E'it''s "%s" \\', E'%d %s {} \\" it''s')) AS duplicate_odd_id;
SELECT test_helpers.sqlstate_of(format('SELECT silo.restart(%L, %L)', E'%d %s {} \\" it''s', E'it''s "%s" \\')) AS restart_odd_id;
SELECT silo.cancel(E'%d %s {} \\" it''s', E'it''s "%s" \\');
SELECT status FROM silo.job_result(E'%d %s {} \\" it''s', E'it''s "%s" \\');
-- (a Waiting job is cancelled at once: flagged, its task deleted, no
-- attempt written)
SELECT status, cancelled_at IS NOT NULL AS flagged, test_helpers.job_rows(tenant, id) AS job_rows
  FROM silo.jobs WHERE tenant = E'it''s "%s" \\' AND id = E'%d %s {} \\" it''s';
SELECT silo.delete_job(E'%d %s {} \\" it''s', E'it''s "%s" \\') AS deleted;
SELECT test_helpers.rows(E'it''s "%s" \\');

--
-- 2. numbers and times
--
SELECT pg_temp.fingerprint() AS fp \gset
SELECT label, test_helpers.sqlstate_of(sql) AS result
  FROM (VALUES ('priority int max', 'SELECT silo.enqueue(''adv'', priority => 2147483647)'),
			   ('priority int min', 'SELECT silo.enqueue(''adv'', priority => -2147483648)'),
			   ('priority 100', 'SELECT silo.enqueue(''adv'', priority => 100)'),
			   ('start_at infinity', 'SELECT silo.enqueue(''adv'', start_at => ''infinity'')'),
			   ('start_at -infinity', 'SELECT silo.enqueue(''adv'', start_at => ''-infinity'')')
	   ) t(label, sql);
SELECT pg_temp.fingerprint() = :'fp' AS nothing_written;

-- the largest and smallest finite timestamps are valid starts
SELECT silo.enqueue('times', tenant => 'times', id => 'last-microsecond', start_at => '294276-12-31 23:59:59.999999+00'),
	   silo.enqueue('times', tenant => 'times', id => 'last-second', start_at => '294276-12-31 23:59:59+00'),
	   silo.enqueue('times-past', tenant => 'times', id => 'first-day', start_at => '4714-11-24 00:00:00+00 BC');
SELECT j.id, j.status, j.next_attempt_at = i.start_at AS starts_as_given, i.start_at
  FROM silo.jobs j JOIN silo.job_info i USING (tenant, id) WHERE tenant = 'times' ORDER BY id;
-- the broker (here: one maintenance round) does not promote them; a lease
-- does not take them; expedite and cancel still find their tasks
SELECT promoted FROM silo.run_maintenance();
SELECT job_id FROM silo.lease('w', 'times', 10, 3600000);
SELECT silo.expedite('last-microsecond', 'times');
-- (its task is due now -- made due in silo.task, start = now -- and it
-- is still attempt 1; job_info keeps the start the producer asked for)
SELECT j.status, j.current_attempt, t.attempt AS task_attempt, t.relative_attempt, t.due,
	   t.start_at BETWEEN silo.now() - interval '1 minute' AND silo.now() AS starts_now,
	   t.start_at = j.next_attempt_at AS task_start_is_next_attempt,
	   i.start_at = '294276-12-31 23:59:59.999999+00' AS requested_start_kept
  FROM silo.jobs j
  JOIN silo.task t ON t.tenant = j.tenant AND t.job_id = j.id
  JOIN silo.job_info i ON i.tenant = j.tenant AND i.id = j.id
 WHERE j.tenant = 'times' AND j.id = 'last-microsecond';
SELECT silo.cancel('last-second', 'times');
-- (a Scheduled job is cancelled at once: flagged, its future task
-- deleted, no attempt written)
SELECT status, cancelled_at IS NOT NULL AS flagged, test_helpers.job_rows(tenant, id) AS job_rows
  FROM silo.jobs WHERE tenant = 'times' AND id = 'last-second';
SELECT id, status FROM silo.jobs WHERE tenant = 'times' ORDER BY id;
SELECT job_id FROM silo.lease('w', 'times', 10, 3600000) ORDER BY job_id;
SELECT test_helpers.rows('times');

--
-- 3. retry_policy: JSON numbers at the edges, wrong types, duplicate keys
--
SELECT pg_temp.fingerprint() AS fp \gset
SELECT v AS retry_policy,
	   test_helpers.sqlstate_of(format('SELECT silo.enqueue(%L, tenant => %L, id => %L, retry_policy => %L)',
									   'rp', 'rp', v, v)) AS result
  FROM (VALUES (1, '{"retryCount": 1000000}'),
			   (2, '{"retryCount": 1000001}'),
			   (3, '{"retryCount": 1e308}'),
			   (4, '{"retryCount": 1e400}'),
			   (5, '{"retryCount": -1e400}'),
			   (6, '{"retryCount": -0}'),
			   (7, '{"retryCount": 3.0}'),
			   (8, '{"retryCount": 1e2}'),
			   (9, '{"retryCount": 0.5}'),
			   (10, '{"retryCount": true}'),
			   (11, '{"retryCount": [1]}'),
			   (12, '{"retryCount": {"n": 1}}'),
			   (13, '{"initialIntervalMs": 31536000000}'),
			   (14, '{"initialIntervalMs": 31536000001}'),
			   (15, '{"initialIntervalMs": 1e308}'),
			   (16, '{"maxIntervalMs": -0}'),
			   (17, '{"maxIntervalMs": 31536000000.5}'),
			   (18, '{"backoffFactor": 1000}'),
			   (19, '{"backoffFactor": 1000.5}'),
			   (20, '{"backoffFactor": 1e308}'),
			   (21, '{"backoffFactor": 1e400}'),
			   (22, '{"backoffFactor": 0.999999}'),
			   (23, '{"backoffFactor": null}'),
			   (24, '{"randomizeInterval": null}'),
			   (25, '{"randomizeInterval": 0}'),
			   (26, '{"": 1}'),
			   (27, '{"RetryCount": 1}'),
			   (28, '{"retryCount": 1, "retryCount": 2}'),
			   (29, '{"retryCount": "x", "retryCount": 4}'),
			   (30, '{"retryCount": 4, "retryCount": "x"}'),
			   (31, 'null'),
			   (32, '"{}"'),
			   (33, '[{"retryCount": 1}]')) t(n, v)
 ORDER BY n;
-- what the accepted ones stored (duplicate keys: the last one wins)
SELECT id AS retry_policy, retry_count, retry_initial_ms, retry_max_ms, retry_factor, retry_randomize
  FROM silo.job_info WHERE tenant = 'rp' ORDER BY id COLLATE "C";
-- the messages say what to fix
SELECT silo.enqueue('adv', retry_policy => '{"retryCount": 1e400}');
SELECT silo.enqueue('adv', retry_policy => '{"backoffFactor": true}');
SELECT silo.enqueue('adv', retry_policy => '{"RetryCount": 1}');
-- a JSON null is not SQL NULL: it is not a policy object
SELECT silo.enqueue('adv', retry_policy => 'null');
-- one job per accepted policy, nothing anywhere else
SELECT pg_temp.fingerprint('rp') = :'fp' AS nothing_else_written, test_helpers.rows('rp');

--
-- 4. the retry delay, min(initialIntervalMs * backoffFactor^(k-1), maxIntervalMs),
-- never overflows, never goes negative and never jumps, however many
-- retries: factor^(k-1) overflows a double at k = 104 for factor 1000
--
SELECT silo.enqueue('rd-zero', tenant => 'rd', id => 'zero',
					retry_policy => '{"retryCount": 1000000, "initialIntervalMs": 0, "backoffFactor": 1000, "maxIntervalMs": 5000}'),
	   silo.enqueue('rd-grow', tenant => 'rd', id => 'grow',
					retry_policy => '{"retryCount": 1000000, "initialIntervalMs": 1, "backoffFactor": 1000, "maxIntervalMs": 31536000000}'),
	   silo.enqueue('rd-max', tenant => 'rd', id => 'max',
					retry_policy => '{"retryCount": 1000000, "initialIntervalMs": 31536000000, "backoffFactor": 1000, "maxIntervalMs": 31536000000, "randomizeInterval": true}');
CREATE TEMP TABLE delays (id text, k int, delay_ms bigint, due boolean);
DO $$
DECLARE
	j record;
	t uuid;
	k int;
BEGIN
	FOR k IN 1..110 LOOP
		FOR j IN SELECT * FROM (VALUES ('zero'), ('grow'), ('max')) v(id) LOOP
			SELECT task_id INTO t FROM silo.lease('w', 'rd-' || j.id);
			IF t IS NULL THEN
				BEGIN
					PERFORM silo.expedite(j.id, 'rd');
				EXCEPTION WHEN SQLSTATE 'SL008' THEN
					NULL;			-- became due meanwhile
				END;
				SELECT task_id INTO t FROM silo.lease('w', 'rd-' || j.id);
			END IF;
			IF t IS NULL THEN
				RAISE EXCEPTION 'retry % of job % could not be leased', k, j.id;
			END IF;
			PERFORM silo.fail(t, 'w', 'RETRY_ME');
			INSERT INTO delays
			SELECT j.id, k, (extract(epoch FROM s.next_attempt_at - s.changed_at) * 1000)::bigint, t2.due
			  FROM silo.job_status s JOIN silo.task t2 ON t2.task_id = s.task_id
			 WHERE s.tenant = 'rd' AND s.id = j.id;
		END LOOP;
	END LOOP;
END
$$;
-- one row per run of equal delays: zero stays 0 (and due at once) for
-- every retry; grow rises 1 ms, 1 s, 1000 s, then stays at the maximum;
-- max (randomized) never exceeds its maximum
SELECT id, delay_ms, due, min(k) AS from_retry, max(k) AS to_retry
  FROM delays GROUP BY id, delay_ms, due ORDER BY id, min(k);
SELECT id, status, current_attempt FROM silo.jobs WHERE tenant = 'rd' ORDER BY id;

--
-- 5. payloads: any JSON, of any depth and size, round-trips exactly
--
SELECT silo.enqueue('pl', tenant => 'pl', id => 'deep-array', payload => (repeat('[', 5000) || repeat(']', 5000))::jsonb),
	   silo.enqueue('pl', tenant => 'pl', id => 'big-number', payload => '1e400'),
	   silo.enqueue('pl', tenant => 'pl', id => 'escapes', payload => E'{"s": "\\ud83d\\ude00 \\" \\\\ \\n \\u00e9", "k\\"": null}'),
	   silo.enqueue('pl', tenant => 'pl', id => 'ten-mb', payload => jsonb_build_object('blob', repeat('x', 10 * 1024 * 1024)));
SELECT * FROM silo.enqueue_many(('[{"task_group": "pl", "tenant": "pl", "id": "deep-object", "payload": '
								 || repeat('{"a": ', 5000) || '1' || repeat('}', 5000) || '}]')::jsonb);
CREATE TEMP TABLE pl_leased AS SELECT * FROM silo.lease('w', 'pl', 10, 3600000);
SELECT job_id,
	   CASE job_id
		   WHEN 'deep-array' THEN payload = (repeat('[', 5000) || repeat(']', 5000))::jsonb
		   WHEN 'deep-object' THEN payload = (repeat('{"a": ', 5000) || '1' || repeat('}', 5000))::jsonb
		   WHEN 'big-number' THEN payload = '1e400'::jsonb
		   WHEN 'escapes' THEN payload = E'{"s": "\\ud83d\\ude00 \\" \\\\ \\n \\u00e9", "k\\"": null}'::jsonb
		   WHEN 'ten-mb' THEN payload = jsonb_build_object('blob', repeat('x', 10 * 1024 * 1024))
	   END AS payload_round_trips,
	   octet_length(payload::text) AS payload_bytes
  FROM pl_leased ORDER BY job_id;
SELECT payload->>'s' = E'\U0001F600 " \\ \n \u00e9' AS escapes_decoded FROM pl_leased WHERE job_id = 'escapes';
-- results and error data of any shape and size round-trip too
SELECT silo.complete(task_id, 'w', jsonb_build_object('blob', repeat('y', 10 * 1024 * 1024)))
  FROM pl_leased WHERE job_id = 'ten-mb';
-- (the Succeeded attempt holds the whole result; no lease or task left)
SELECT j.status, a.attempt, a.status AS attempt_status, a.worker_id,
	   a.result = jsonb_build_object('blob', repeat('y', 10 * 1024 * 1024)) AS result_stored,
	   test_helpers.job_rows(j.tenant, j.id) AS job_rows
  FROM silo.jobs j JOIN silo.attempts a ON a.tenant = j.tenant AND a.job_id = j.id
 WHERE j.tenant = 'pl' AND j.id = 'ten-mb';
SELECT silo.fail(task_id, 'w', 'DEEP', (repeat('[', 5000) || repeat(']', 5000))::jsonb)
  FROM pl_leased WHERE job_id = 'deep-array';
-- (no retry policy: the failure is final; the Failed attempt holds the
-- code and the whole error data; no lease, no retry task)
SELECT j.status, a.attempt, a.status AS attempt_status, a.error_code,
	   a.error_data = (repeat('[', 5000) || repeat(']', 5000))::jsonb AS error_data_stored,
	   test_helpers.job_rows(j.tenant, j.id) AS job_rows
  FROM silo.jobs j JOIN silo.attempts a ON a.tenant = j.tenant AND a.job_id = j.id
 WHERE j.tenant = 'pl' AND j.id = 'deep-array';
SELECT status, octet_length(result->>'blob') AS result_blob_bytes FROM silo.job_result('ten-mb', 'pl');
SELECT status, error_code, error_data = (repeat('[', 5000) || repeat(']', 5000))::jsonb AS error_data_round_trips
  FROM silo.job_result('deep-array', 'pl');
SELECT silo.delete_job('ten-mb', 'pl') AS deleted_ten_mb;
-- (and took its attempt with it)
SELECT test_helpers.job_rows('pl', 'ten-mb') AS ten_mb_rows;
-- every kind of JSON result; a JSON null result is not SQL NULL
SELECT silo.enqueue('res', tenant => 'res', id => 'r' || n) FROM generate_series(1, 8) n;
CREATE TEMP TABLE res_leased AS SELECT * FROM silo.lease('w', 'res', 8, 3600000);
SELECT job_id, silo.complete(task_id, 'w', r::jsonb) IS NOT NULL AS completed
  FROM res_leased
  JOIN (VALUES ('r1', 'null'), ('r2', '0'), ('r3', '-1.5'), ('r4', '"s"'), ('r5', '[]'),
			   ('r6', '{}'), ('r7', 'false'), ('r8', NULL)) v(id, r) ON v.id = job_id
 ORDER BY job_id;
-- (eight Succeeded attempts, no lease or task left)
SELECT count(*) AS attempts, count(*) FILTER (WHERE status = 'Succeeded') AS succeeded,
	   (SELECT count(*) FROM silo.leases WHERE tenant = 'res') AS leases,
	   (SELECT count(*) FROM silo.tasks WHERE tenant = 'res') AS tasks
  FROM silo.attempts WHERE tenant = 'res';
SELECT id, r.status, r.result, r.result IS NULL AS sql_null, jsonb_typeof(r.result) AS json_type
  FROM silo.job_info i, silo.job_result(i.id, 'res') r WHERE i.tenant = 'res' ORDER BY id;

--
-- 6. metadata: odd keys, values and duplicates
--
SELECT pg_temp.fingerprint() AS fp \gset
SELECT v AS metadata,
	   test_helpers.sqlstate_of(format('SELECT silo.enqueue(%L, tenant => %L, id => %L, metadata => %L)',
									   'md', 'md', v, v)) AS result
  FROM (VALUES (1, '{"k": ""}'),
			   (2, '{"": "v"}'),
			   (3, '{"k": "a", "k": "b"}'),
			   (4, '{"k": 1, "k": "c"}'),
			   (5, '{"k": "d", "k": 1}'),
			   (6, '{"a\"b": 1}'),
			   (7, '{"k": "\u00e9\ud83d\ude00"}'),
			   (8, '{"k": ["v"]}'),
			   (9, '{"k": false}'),
			   (10, '[]'),
			   (11, '"{}"'),
			   (12, '0')) t(n, v)
 ORDER BY n;
SELECT job_id AS metadata, to_json(key) AS key, to_json(value) AS value
  FROM silo.job_metadata WHERE tenant = 'md' ORDER BY job_id COLLATE "C", key COLLATE "C";
-- keys count characters, values count bytes
SELECT label, test_helpers.sqlstate_of(format('SELECT silo.enqueue(%L, metadata => %L)', 'adv', m)) AS result
  FROM (VALUES ('key 65 emoji', jsonb_build_object(repeat('😀', 65), 'v')),
			   ('value 256 emoji + 1 byte', jsonb_build_object('k', repeat('😀', 256) || 'x'))) t(label, m);
SELECT silo.enqueue('adv', metadata => jsonb_build_object('k', repeat('😀', 256) || 'x'));
-- one job per accepted object, nothing anywhere else
SELECT pg_temp.fingerprint('md') = :'fp' AS nothing_else_written, test_helpers.rows('md');
-- everything at its maximum at once: a 64-emoji tenant, a 128-emoji id,
-- 16 distinct 64-emoji keys with 1024-byte values (the metadata index
-- entries are the widest silo writes); the whole lifecycle works
SELECT silo.enqueue(repeat('😀', 64), tenant => repeat('😀', 64), id => repeat('😃', 128),
					metadata => (SELECT jsonb_object_agg(repeat('😀', 63) || chr(128512 + i), repeat('😀', 256))
								   FROM generate_series(1, 16) i)) = repeat('😃', 128) AS widest_job_ok;
SELECT count(*) AS metadata_rows, max(octet_length(key)) AS key_bytes, max(octet_length(value)) AS value_bytes
  FROM silo.job_metadata WHERE tenant = repeat('😀', 64);
SELECT silo.fail(task_id, repeat('😀', 256), repeat('😀', 256), jsonb_build_object('w', repeat('😀', 256)))
  FROM silo.lease(repeat('😀', 256), repeat('😀', 64), 1, 3600000);
-- (the Failed attempt keeps the widest worker id, error code and data;
-- no retry policy, so no lease or task is left)
SELECT j.status, a.status AS attempt_status, length(a.worker_id) AS worker_id_chars,
	   length(a.error_code) AS error_code_chars,
	   a.error_data = jsonb_build_object('w', repeat('😀', 256)) AS error_data_stored,
	   test_helpers.job_rows(j.tenant, j.id) AS job_rows
  FROM silo.jobs j JOIN silo.attempts a ON a.tenant = j.tenant AND a.job_id = j.id
 WHERE j.tenant = repeat('😀', 64) AND j.id = repeat('😃', 128);
SELECT status, octet_length(error_code) AS error_code_bytes FROM silo.job_result(repeat('😃', 128), repeat('😀', 64));
SELECT silo.delete_job(repeat('😃', 128), repeat('😀', 64)) AS deleted,
	   silo.delete_job(repeat('😀', 128), repeat('😀', 64)) AS deleted_first;
SELECT test_helpers.rows(repeat('😀', 64));

--
-- 7. limits: only the empty array
--
SELECT pg_temp.fingerprint() AS fp \gset
SELECT v AS limits, test_helpers.sqlstate_of(format('SELECT silo.enqueue(%L, limits => %L)', 'adv', v)) AS result
  FROM (VALUES (1, 'null'), (2, '[null]'), (3, '[[]]'), (4, '[{}]'), (5, '{}'), (6, '""'), (7, '0'),
			   (8, '{"0": {"key": "k"}}')) t(n, v)
 ORDER BY n;
SELECT pg_temp.fingerprint() = :'fp' AS nothing_written;

--
-- 8. on_conflict: only 'error' and 'ignore', spelled exactly
--
-- (whatever its length: the message must name the two valid values)
SELECT label AS on_conflict, test_helpers.sqlstate_of(format('SELECT silo.enqueue(%L, on_conflict => %L)', 'adv', v)) AS result
  FROM (VALUES (1, 'empty', ''), (2, 'IGNORE', 'IGNORE'), (3, 'ignore + space', 'ignore '), (4, 'Error', 'Error'),
			   (5, '16 characters', repeat('x', 16)), (6, '17 characters', repeat('x', 17)),
			   (7, 'ignore x 100', repeat('ignore', 100))) t(n, label, v)
 ORDER BY n;
SELECT pg_temp.fingerprint() = :'fp' AS nothing_written;

--
-- 9. enqueue_many: shapes, nulls, types, garbage timestamps, size
--
SELECT label, test_helpers.sqlstate_of(format('SELECT * FROM silo.enqueue_many(%L)', jobs)) AS result
  FROM (VALUES (1, 'object', '{}'),
			   (2, 'string', '"[]"'),
			   (3, 'number', '0'),
			   (4, 'JSON null', 'null'),
			   (5, 'boolean', 'true'),
			   (6, 'array of numbers', '[1]'),
			   (7, 'array of null', '[null]'),
			   (8, 'array of arrays', '[[{"task_group": "m"}]]'),
			   (9, 'array of booleans', '[true]'),
			   (10, 'valid, then a string', '[{"task_group": "m"}, "m"]'),
			   (11, 'valid, then invalid, then valid', '[{"task_group": "m"}, {"task_group": "m", "id": ""}, {"task_group": "m"}]'),
			   (12, 'key with other case', '[{"Task_Group": "m"}]'),
			   (13, 'empty key', '[{"task_group": "m", "": 1}]'),
			   (14, 'task_group object', '[{"task_group": {"name": "m"}}]'),
			   (15, 'tenant number', '[{"task_group": "m", "tenant": 1}]'),
			   (16, 'id array', '[{"task_group": "m", "id": ["a"]}]'),
			   (17, 'id empty', '[{"task_group": "m", "id": ""}]'),
			   (18, 'priority 1e400', '[{"task_group": "m", "priority": 1e400}]'),
			   (19, 'priority -1e400', '[{"task_group": "m", "priority": -1e400}]'),
			   (20, 'priority 9.3e18', '[{"task_group": "m", "priority": 9.3e18}]'),
			   (21, 'priority 99.5', '[{"task_group": "m", "priority": 99.5}]'),
			   (22, 'priority 1e2', '[{"task_group": "m", "priority": 1e2}]'),
			   (23, 'priority true', '[{"task_group": "m", "priority": true}]'),
			   (24, 'payload undefined key', '[{"task_group": "m", "payloads": {}}]'),
			   (25, 'retry_policy string', '[{"task_group": "m", "retry_policy": "{}"}]'),
			   (26, 'retry_policy array', '[{"task_group": "m", "retry_policy": []}]'),
			   (27, 'limits string', '[{"task_group": "m", "limits": "[]"}]'),
			   (28, 'metadata array', '[{"task_group": "m", "metadata": []}]'),
			   (29, 'on_conflict true', '[{"task_group": "m", "on_conflict": true}]'),
			   (30, 'on_conflict long', format('[{"task_group": "m", "on_conflict": "%s"}]', repeat('x', 17)))
	   ) t(n, label, jobs)
 ORDER BY n;
-- null for each key: id and retry_policy mean "not given", payload is the
-- JSON value null, everything else raises 22004
SELECT k AS key, test_helpers.sqlstate_of(format('SELECT * FROM silo.enqueue_many(%L)',
		jsonb_build_array(jsonb_build_object('task_group', 'mnull', 'tenant', 'mnull') || jsonb_build_object(k, null)))) AS result
  FROM unnest(ARRAY['task_group', 'payload', 'tenant', 'id', 'priority', 'start_at', 'retry_policy',
					'limits', 'metadata', 'on_conflict']) WITH ORDINALITY u(k, n)
 ORDER BY n;
SELECT payload, retry_count, test_helpers.is_uuid(id) AS generated_id FROM silo.job_info WHERE tenant = 'mnull' ORDER BY payload::text;
-- start_at: strings the timestamp parser rejects, or non-finite, or not strings
SELECT pg_temp.fingerprint() AS fp \gset
SELECT j AS start_at, test_helpers.sqlstate_of(format('SELECT * FROM silo.enqueue_many(%L)',
		jsonb_build_array(jsonb_build_object('task_group', 'mts', 'start_at', s)))) AS result
  FROM (VALUES (1, '"infinity"'), (2, '"-infinity"'), (3, '"294277-01-01T00:00:00Z"'), (4, '"4714-11-23 00:00:00+00 BC"'),
			   (5, '"2024-02-30T00:00:00Z"'), (6, '""'), (7, '" "'), (8, '"allballs"'),
			   (9, '"2024-01-01T00:00:00+25:00"'), (10, '"2024-01-01 00:00:00 Mars/Olympus"'),
			   (11, '"NaN"'), (12, '"1e10"'), (13, '1700000000'), (14, '{"iso": "2024-01-01"}'),
			   (15, '["2024-01-01"]'), (16, 'true')) t(n, j),
	   LATERAL (SELECT j::jsonb AS s) x
 ORDER BY n;
-- the message says what to fix, with the parser's reason in the detail
SELECT * FROM silo.enqueue_many('[{"task_group": "mts"}, {"task_group": "mts", "start_at": "2024-02-30T00:00:00Z"}]');
SELECT pg_temp.fingerprint() = :'fp' AS nothing_written;
-- the extreme valid timestamps are accepted
SELECT * FROM silo.enqueue_many('[{"task_group": "mts", "tenant": "mts", "id": "max", "start_at": "294276-12-31T23:59:59.999999Z"},
								  {"task_group": "mts", "tenant": "mts", "id": "min", "start_at": "4714-11-24 00:00:00+00 BC"}]');
SELECT id, start_at FROM silo.job_info WHERE tenant = 'mts' ORDER BY id;
-- an empty array enqueues nothing
SELECT count(*) AS ids FROM silo.enqueue_many('[]');
-- 10000 jobs: one call, ids in input order, leased in input order
SELECT count(*) AS ids, bool_and(id = 'b' || ord) AS in_input_order
  FROM silo.enqueue_many((SELECT jsonb_agg(jsonb_build_object('task_group', 'bulk', 'tenant', 'bulk', 'id', 'b' || i) ORDER BY i)
							FROM generate_series(1, 10000) i)) WITH ORDINALITY AS t(id, ord);
SELECT count(*) AS leased, bool_and(job_id = 'b' || ord) AS in_input_order
  FROM silo.lease('w', 'bulk', 1000, 3600000) WITH ORDINALITY AS l(task_id, kind, tenant, job_id, attempt, relative_attempt,
														  is_last_attempt, priority, task_group, payload, metadata,
														  lease_expires_at, queue_key, current_max_concurrency,
														  refresh_metadata, limits, retry_policy, ord);
-- 10000 jobs whose last one is invalid: nothing is written, and the
-- context names the element
SELECT pg_temp.fingerprint() AS fp \gset
SELECT count(*) FROM silo.enqueue_many((SELECT jsonb_agg(jsonb_build_object('task_group', 'bulk', 'tenant', 'bulk2', 'id', 'b' || i,
																		  'priority', CASE WHEN i = 10000 THEN 100 ELSE 1 END) ORDER BY i)
										  FROM generate_series(1, 10000) i));
-- ... and a duplicate id as the last one: the same
SELECT count(*) FROM silo.enqueue_many((SELECT jsonb_agg(jsonb_build_object('task_group', 'bulk', 'tenant', 'bulk2', 'id', 'b' || least(i, 9999)) ORDER BY i)
										  FROM generate_series(1, 10000) i));
SELECT pg_temp.fingerprint() = :'fp' AS nothing_written, test_helpers.rows('bulk2');

--
-- 10. lease: arguments at and past their bounds
--
SELECT pg_temp.fingerprint() AS fp \gset
SELECT label, test_helpers.sqlstate_of(format('SELECT * FROM silo.lease(%s)', args)) AS result
  FROM (VALUES (1, 'max_tasks int max', '''w'', ''lz'', 2147483647'),
			   (2, 'max_tasks int min', '''w'', ''lz'', -2147483648'),
			   (3, 'max_tasks 0', '''w'', ''lz'', 0'),
			   (4, 'max_tasks 1001', '''w'', ''lz'', 1001'),
			   (5, 'lease_ms int max', '''w'', ''lz'', 1, 2147483647'),
			   (6, 'lease_ms int min', '''w'', ''lz'', 1, -2147483648'),
			   (7, 'lease_ms 0', '''w'', ''lz'', 1, 0'),
			   (8, 'worker_id empty', ''''', ''lz'''),
			   (9, 'worker_id NULL', 'NULL, ''lz'''),
			   (10, 'task_group NULL', '''w'', NULL'),
			   (11, 'all NULL', 'NULL, NULL, NULL, NULL')) t(n, label, args)
 ORDER BY n;
SELECT pg_temp.fingerprint() = :'fp' AS nothing_written;
-- the bounds themselves are valid; an empty group returns no rows
SELECT count(*) AS leased FROM silo.lease(repeat('😀', 256), 'lz', 1000, 3600000);
SELECT count(*) AS leased FROM silo.lease(' ', 'lz', 1, 100);
-- task groups match exactly: no case folding, no trimming
SELECT silo.enqueue('g', tenant => 'lg', id => 'exact');
SELECT count(*) AS leased FROM silo.lease('w', 'G');
SELECT count(*) AS leased FROM silo.lease('w', 'g ');
SELECT count(*) AS leased FROM silo.lease('w', ' g');
SELECT job_id FROM silo.lease('w', 'g', 1, 3600000);
SELECT pg_temp.fingerprint() AS fp \gset

--
-- 11. heartbeat and reports: unknown tasks, pending tasks, look-alike
-- workers, bad arguments -- each fails and changes nothing
--
SELECT silo.enqueue('rep', tenant => 'rep', id => 'held'),
	   silo.enqueue('rep', tenant => 'rep', id => 'waiting-task', start_at => now() + interval '1 day');
SELECT task_id AS t FROM silo.lease('worker', 'rep', 1, 3600000) \gset
SELECT task_id AS pending_t FROM silo.job_status WHERE tenant = 'rep' AND id = 'waiting-task' \gset
SELECT pg_temp.fingerprint() AS fp \gset
SELECT label, test_helpers.sqlstate_of(format(sql, :'t', :'pending_t')) AS result
  FROM (VALUES (1, 'heartbeat nil uuid', 'SELECT silo.heartbeat(''00000000-0000-0000-0000-000000000000'', ''worker'')'),
			   (2, 'complete max uuid', 'SELECT silo.complete(''ffffffff-ffff-ffff-ffff-ffffffffffff'', ''worker'')'),
			   (3, 'heartbeat pending task', 'SELECT silo.heartbeat(%2$L, ''worker'')'),
			   (4, 'complete pending task', 'SELECT silo.complete(%2$L, ''worker'')'),
			   (5, 'fail pending task', 'SELECT silo.fail(%2$L, ''worker'', ''E'')'),
			   (6, 'ack_cancel pending task', 'SELECT silo.ack_cancel(%2$L, ''worker'')'),
			   (7, 'release pending task', 'SELECT silo.release(%2$L, ''worker'')'),
			   (8, 'heartbeat worker in upper case', 'SELECT silo.heartbeat(%1$L, ''WORKER'')'),
			   (9, 'complete worker with a trailing space', 'SELECT silo.complete(%1$L, ''worker '')'),
			   (10, 'fail worker with a leading space', 'SELECT silo.fail(%1$L, '' worker'', ''E'')'),
			   (11, 'release worker prefix', 'SELECT silo.release(%1$L, ''work'')'),
			   (12, 'ack_cancel worker empty', 'SELECT silo.ack_cancel(%1$L, '''')'),
			   (13, 'heartbeat lease_ms 99', 'SELECT silo.heartbeat(%1$L, ''worker'', 99)'),
			   (14, 'heartbeat lease_ms int max', 'SELECT silo.heartbeat(%1$L, ''worker'', 2147483647)'),
			   (15, 'heartbeat lease_ms int min', 'SELECT silo.heartbeat(%1$L, ''worker'', -2147483648)'),
			   (16, 'heartbeat lease_ms NULL', 'SELECT silo.heartbeat(%1$L, ''worker'', NULL)'),
			   (17, 'fail error_code NULL', 'SELECT silo.fail(%1$L, ''worker'', NULL)'),
			   (18, 'fail error_code empty', 'SELECT silo.fail(%1$L, ''worker'', '''')'),
			   (19, 'fail error_code 257 emoji', format('SELECT silo.fail(%%1$L, ''worker'', %L)', repeat('😀', 257))),
			   (20, 'fail all NULL', 'SELECT silo.fail(NULL, NULL, NULL, NULL)'),
			   (21, 'complete all NULL', 'SELECT silo.complete(NULL, NULL, NULL)'),
			   (22, 'ack_cancel all NULL', 'SELECT silo.ack_cancel(NULL, NULL)'),
			   (23, 'release all NULL', 'SELECT silo.release(NULL, NULL)'),
			   (24, 'heartbeat all NULL', 'SELECT silo.heartbeat(NULL, NULL, NULL)'),
			   (25, 'complete, then complete again in one statement', 'SELECT silo.complete(%1$L, ''worker''), silo.complete(%1$L, ''worker'')'),
			   (26, 'fail, then heartbeat in one statement', 'SELECT silo.fail(%1$L, ''worker'', ''E''), silo.heartbeat(%1$L, ''worker'')')
	   ) v(n, label, sql)
 ORDER BY n;
SELECT pg_temp.fingerprint() = :'fp' AS nothing_written, test_helpers.rows('rep');
SELECT id, status FROM silo.jobs WHERE tenant = 'rep' ORDER BY id;
-- the owner's lease still works after all that
SELECT silo.heartbeat(:'t', 'worker', 100) AS cancelled, silo.heartbeat(:'t', 'worker', 3600000) AS cancelled;
-- (the fingerprint sees a heartbeat, which changes only expires_at: the
-- failed heartbeats above really changed nothing)
SELECT pg_temp.fingerprint() <> :'fp' AS fingerprint_sees_heartbeat;
-- (the last heartbeat set the expiry to an hour from now)
SELECT expires_at - silo.now() BETWEEN interval '59 minutes' AND interval '60 minutes' AS expires_in_an_hour, expired
  FROM silo.leases WHERE task_id = :'t';
SELECT silo.fail(:'t', 'worker', repeat('😀', 256));
-- (no retry policy: the job Failed at once; the leased task's attempt
-- is recorded Failed with its worker and code; no lease or task left)
SELECT j.status, a.attempt, a.status AS attempt_status, a.task_id = :'t' AS leased_task, a.worker_id,
	   length(a.error_code) AS error_code_chars, a.error_data IS NULL AS no_error_data,
	   test_helpers.job_rows(j.tenant, j.id) AS job_rows
  FROM silo.jobs j JOIN silo.attempts a ON a.tenant = j.tenant AND a.job_id = j.id
 WHERE j.tenant = 'rep' AND j.id = 'held';
SELECT status, length(error_code) AS error_code_chars FROM silo.job_result('held', 'rep');

--
-- 12. job operations: missing jobs, other tenants, bad arguments
--
SELECT silo.enqueue('ops', tenant => 'Acme', id => 'shared-id'),
	   silo.enqueue('ops', tenant => 'acme', id => 'shared-id', start_at => now() + interval '1 hour');
SELECT pg_temp.fingerprint() AS fp \gset
SELECT label, test_helpers.sqlstate_of(sql) AS result
  FROM (VALUES (1, 'cancel in tenant ACME', 'SELECT silo.cancel(''shared-id'', ''ACME'')'),
			   (2, 'cancel in tenant "acme "', 'SELECT silo.cancel(''shared-id'', ''acme '')'),
			   (3, 'cancel id with other case', 'SELECT silo.cancel(''SHARED-ID'', ''acme'')'),
			   (4, 'cancel in the default tenant', 'SELECT silo.cancel(''shared-id'')'),
			   (5, 'restart in another tenant', 'SELECT silo.restart(''shared-id'', ''other'')'),
			   (6, 'restart of a waiting job', 'SELECT silo.restart(''shared-id'', ''Acme'')'),
			   (7, 'expedite in another tenant', 'SELECT silo.expedite(''shared-id'', ''other'')'),
			   (8, 'expedite of a due job', 'SELECT silo.expedite(''shared-id'', ''Acme'')'),
			   (9, 'delete_job of a pending job', 'SELECT silo.delete_job(''shared-id'', ''acme'')'),
			   (10, 'job_result in another tenant', 'SELECT * FROM silo.job_result(''shared-id'', ''other'')'),
			   (11, 'job_result of a pending job', 'SELECT * FROM silo.job_result(''shared-id'', ''acme'')'),
			   (12, 'cancel all NULL', 'SELECT silo.cancel(NULL, NULL)'),
			   (13, 'restart all NULL', 'SELECT silo.restart(NULL, NULL)'),
			   (14, 'expedite all NULL', 'SELECT silo.expedite(NULL, NULL)'),
			   (15, 'delete_job all NULL', 'SELECT silo.delete_job(NULL, NULL)'),
			   (16, 'job_result all NULL', 'SELECT * FROM silo.job_result(NULL, NULL)'),
			   (17, 'cancel id empty', 'SELECT silo.cancel('''', ''acme'')'),
			   (18, 'delete_job tenant empty', 'SELECT silo.delete_job(''shared-id'', '''')')
	   ) t(n, label, sql)
 ORDER BY n;
-- a job in another tenant is not there: delete_job says false
SELECT silo.delete_job('shared-id', 'other') AS deleted;
SELECT pg_temp.fingerprint() = :'fp' AS nothing_written;
SELECT tenant, id, status FROM silo.jobs WHERE id = 'shared-id' ORDER BY tenant COLLATE "C";
-- the right tenant works
SELECT silo.expedite('shared-id', 'acme'), silo.cancel('shared-id', 'Acme');
SELECT tenant, id, status FROM silo.jobs WHERE id = 'shared-id' ORDER BY tenant COLLATE "C";
-- (acme's task is due now, still attempt 1, not flagged; Acme's job is
-- flagged and its task deleted, with no attempt written)
SELECT j.tenant, j.current_attempt, j.cancelled_at IS NOT NULL AS flagged,
	   (SELECT bool_and(t.due AND t.start_at BETWEEN silo.now() - interval '1 minute' AND silo.now())
		  FROM silo.task t WHERE t.tenant = j.tenant AND t.job_id = j.id) AS task_due_now,
	   test_helpers.job_rows(j.tenant, j.id) AS job_rows
  FROM silo.jobs j WHERE j.id = 'shared-id' ORDER BY j.tenant COLLATE "C";

--
-- 13. maintenance and purge
--
SELECT pg_temp.fingerprint() AS fp \gset
SELECT label, test_helpers.sqlstate_of(sql) AS result
  FROM (VALUES (1, 'purge max_jobs 0', 'SELECT silo.purge_terminal_jobs(0)'),
			   (2, 'purge max_jobs -1', 'SELECT silo.purge_terminal_jobs(-1)'),
			   (3, 'purge max_jobs int min', 'SELECT silo.purge_terminal_jobs(-2147483648)'),
			   (4, 'purge max_jobs NULL', 'SELECT silo.purge_terminal_jobs(NULL)')) t(n, label, sql)
 ORDER BY n;
-- nothing is old enough to purge; an idle maintenance round does nothing
SELECT silo.purge_terminal_jobs(2147483647) AS purged, silo.purge_terminal_jobs(1) AS purged_one;
SELECT * FROM silo.run_maintenance();
SELECT pg_temp.fingerprint() = :'fp' AS nothing_written;

-- what is left (a backend crash anywhere above would have cut the output
-- short)
SELECT pg_temp.counts();

-- 0x03 agrees with every status row the file left behind
SELECT test_helpers.status_index_mismatches();
