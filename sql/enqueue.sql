--
-- enqueue: silo.enqueue and silo.enqueue_many -- arguments, defaults,
-- bounds, conflicts, and that a failed call writes nothing.
--
SELECT test_helpers.reset();

-- defaults: a generated id (a version 7 UUID), tenant '-', priority 50, empty
-- payload and metadata, no retry policy, no limits, due now
SELECT silo.enqueue('enq') AS j1 \gset
SELECT test_helpers.is_uuid(:'j1') AS generated_id_is_uuid;
SELECT tenant, task_group, status, priority, payload, metadata, current_attempt,
	   cancelled_at IS NULL AS not_cancelled
  FROM silo.jobs WHERE id = :'j1';
SELECT retry_count IS NULL AS no_retry_policy, limits, start_at <= enqueued_at AS start_not_future
  FROM silo.job_info WHERE id = :'j1';
SELECT test_helpers.rows('-');

-- two generated ids differ
SELECT silo.enqueue('enq') <> silo.enqueue('enq') AS ids_differ;
-- generated ids sort in the order they were made, within a call and
-- across calls (their 60 time bits are kept increasing), so a
-- new job's index entries go to the right-hand edge of each index (rolled
-- back: the counts below stay as they are)
BEGIN;
SELECT silo.enqueue('enq') AS j_before \gset
SELECT bool_and(prev IS NULL OR id COLLATE "C" > prev COLLATE "C") AS ids_increase,
       bool_and(id COLLATE "C" > :'j_before' COLLATE "C") AS after_earlier_call, count(*) AS ids
  FROM (SELECT id, lag(id) OVER (ORDER BY ord) AS prev
          FROM silo.enqueue_many((SELECT jsonb_agg(jsonb_build_object('task_group', 'enq'))
                                    FROM generate_series(1, 200))) WITH ORDINALITY AS e(id, ord)) x;
ROLLBACK;

-- every argument, by name
SELECT silo.enqueue(task_group => 'enq',
					payload => '{"n": 1, "list": [1, 2]}',
					tenant => 'acme',
					id => 'job-1',
					priority => 7,
					start_at => now() + interval '1 hour',
					retry_policy => '{"retryCount": 3, "initialIntervalMs": 250, "maxIntervalMs": 9000, "backoffFactor": 1.5, "randomizeInterval": true}',
					limits => '[]',
					metadata => '{"customer": "c1", "region": "eu"}',
					on_conflict => 'error') AS id;
SELECT tenant, id, task_group, status, priority, payload, metadata, current_attempt
  FROM silo.jobs WHERE tenant = 'acme';
SELECT retry_count, retry_initial_ms, retry_max_ms, retry_factor, retry_randomize, limits,
	   start_at > enqueued_at AS start_in_future
  FROM silo.job_info WHERE tenant = 'acme' AND id = 'job-1';
SELECT key, value FROM silo.job_metadata WHERE tenant = 'acme' AND job_id = 'job-1' ORDER BY key;
SELECT test_helpers.rows('acme');

-- start_at is kept as given; a future job's task starts then
SELECT silo.enqueue('enq', tenant => 'acme', id => 'fixed-start',
					start_at => '2031-02-03 04:05:06+00');
SELECT i.start_at = '2031-02-03 04:05:06+00' AS start_kept,
	   t.start_at = '2031-02-03 04:05:06+00' AS task_starts_then,
	   j.status, j.next_attempt_at = '2031-02-03 04:05:06+00' AS next_attempt_at_kept
  FROM silo.job_info i
  JOIN silo.task t ON t.tenant = i.tenant AND t.job_id = i.id
  JOIN silo.jobs j ON j.tenant = i.tenant AND j.id = i.id
 WHERE i.tenant = 'acme' AND i.id = 'fixed-start';

-- a back-dated start_at is kept in job_info, but the task's effective
-- start is the enqueue time, and the job is Waiting
SELECT silo.enqueue('enq', tenant => 'acme', id => 'back-dated',
					start_at => now() - interval '1 day');
SELECT i.start_at < i.enqueued_at AS start_kept_in_past,
	   t.start_at >= i.enqueued_at AS effective_start_is_enqueue_time,
	   j.status
  FROM silo.job_info i
  JOIN silo.task t ON t.tenant = i.tenant AND t.job_id = i.id
  JOIN silo.jobs j ON j.tenant = i.tenant AND j.id = i.id
 WHERE i.tenant = 'acme' AND i.id = 'back-dated';

-- payload: any JSON value
SELECT silo.enqueue('enq', tenant => 'payloads', id => 'p-' || n, payload => p)
  FROM (VALUES (1, '42'::jsonb), (2, '"text"'), (3, '[1, "two", null]'), (4, 'null'),
			   (5, 'true'), (6, '{}')) v(n, p) ORDER BY n;
SELECT id, payload FROM silo.jobs WHERE tenant = 'payloads' ORDER BY id;

-- enqueue is part of the caller's transaction
BEGIN;
SELECT silo.enqueue('enq', tenant => 'txn', id => 'rolled-back');
SELECT test_helpers.rows('txn');
ROLLBACK;
SELECT test_helpers.rows('txn');

-- ids: the same id may exist in two tenants
SELECT silo.enqueue('enq', tenant => 'ta', id => 'same', payload => '{"v": "first"}');
SELECT silo.enqueue('enq', tenant => 'tb', id => 'same');
SELECT tenant, id FROM silo.jobs WHERE id = 'same' ORDER BY tenant;

-- a duplicate id raises 23505 and writes nothing
SELECT test_helpers.rows('ta');
SELECT silo.enqueue('enq', tenant => 'ta', id => 'same', payload => '{"v": "second"}');
\echo :LAST_ERROR_SQLSTATE
SELECT test_helpers.rows('ta');

-- on_conflict => 'ignore' returns the existing id, writes nothing and
-- leaves the existing job as it was
SELECT silo.enqueue('enq', tenant => 'ta', id => 'same', payload => '{"v": "second"}',
					metadata => '{"k": "v"}', on_conflict => 'ignore') AS id;
SELECT test_helpers.rows('ta');
SELECT payload, metadata FROM silo.jobs WHERE tenant = 'ta' AND id = 'same';

-- on_conflict => 'ignore' with a new id enqueues normally
SELECT silo.enqueue('enq', tenant => 'ta', id => 'new', on_conflict => 'ignore') AS id;
SELECT test_helpers.rows('ta');

-- on_conflict accepts only 'error' and 'ignore'
SELECT silo.enqueue('enq', tenant => 'ta', id => 'x', on_conflict => 'replace');
\echo :LAST_ERROR_SQLSTATE

-- lengths: tenant and task_group 1-64 characters, id 1-128
SELECT silo.enqueue('enq', tenant => repeat('t', 64)) IS NOT NULL AS tenant_64_ok;
SELECT silo.enqueue(repeat('g', 64)) IS NOT NULL AS group_64_ok;
SELECT silo.enqueue('enq', id => repeat('i', 128)) = repeat('i', 128) AS id_128_ok;
-- characters, not bytes: 64 two-byte characters are allowed
SELECT silo.enqueue('enq', tenant => repeat('é', 64)) IS NOT NULL AS tenant_64_multibyte_ok;
SELECT silo.enqueue('enq', tenant => repeat('t', 65));
\echo :LAST_ERROR_SQLSTATE
SELECT silo.enqueue('enq', tenant => repeat('é', 65));
\echo :LAST_ERROR_SQLSTATE
SELECT silo.enqueue('enq', tenant => '');
\echo :LAST_ERROR_SQLSTATE
SELECT silo.enqueue(repeat('g', 65));
\echo :LAST_ERROR_SQLSTATE
SELECT silo.enqueue('');
\echo :LAST_ERROR_SQLSTATE
SELECT silo.enqueue('enq', id => repeat('i', 129));
\echo :LAST_ERROR_SQLSTATE
SELECT silo.enqueue('enq', id => '');
\echo :LAST_ERROR_SQLSTATE

-- priority: 0-99
SELECT silo.enqueue('enq', tenant => 'prio', id => 'p0', priority => 0),
	   silo.enqueue('enq', tenant => 'prio', id => 'p99', priority => 99);
SELECT id, priority FROM silo.jobs WHERE tenant = 'prio' ORDER BY id;
SELECT silo.enqueue('enq', priority => -1);
\echo :LAST_ERROR_SQLSTATE
SELECT silo.enqueue('enq', priority => 100);
\echo :LAST_ERROR_SQLSTATE

-- start_at must be finite
SELECT silo.enqueue('enq', start_at => 'infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT silo.enqueue('enq', start_at => '-infinity');
\echo :LAST_ERROR_SQLSTATE

-- metadata: at most 16 entries, keys at most 64 characters, values
-- strings of at most 1024 bytes
SELECT silo.enqueue('enq', tenant => 'meta', id => 'sixteen',
					metadata => (SELECT jsonb_object_agg('k' || i, 'v' || i) FROM generate_series(1, 16) i));
SELECT count(*) AS metadata_rows FROM silo.job_metadata WHERE tenant = 'meta' AND job_id = 'sixteen';
SELECT silo.enqueue('enq', tenant => 'meta', id => 'long-key-and-value',
					metadata => jsonb_build_object(repeat('k', 64), repeat('v', 1024),
												   'two-byte', repeat('é', 512)));
SELECT length(key) AS key_chars, octet_length(value) AS value_bytes
  FROM silo.job_metadata WHERE tenant = 'meta' AND job_id = 'long-key-and-value' ORDER BY 1, 2;
SELECT silo.enqueue('enq', metadata => (SELECT jsonb_object_agg('k' || i, 'v') FROM generate_series(1, 17) i));
\echo :LAST_ERROR_SQLSTATE
SELECT silo.enqueue('enq', metadata => jsonb_build_object(repeat('k', 65), 'v'));
\echo :LAST_ERROR_SQLSTATE
SELECT silo.enqueue('enq', metadata => jsonb_build_object('k', repeat('v', 1025)));
\echo :LAST_ERROR_SQLSTATE
-- bytes, not characters: 513 two-byte characters are 1026 bytes
SELECT silo.enqueue('enq', metadata => jsonb_build_object('k', repeat('é', 513)));
\echo :LAST_ERROR_SQLSTATE
-- values must be strings; metadata must be an object
SELECT v AS metadata, test_helpers.sqlstate_of(format('SELECT silo.enqueue(%L, metadata => %L)', 'enq', v)) AS result
  FROM (VALUES ('{"k": 1}'), ('{"k": true}'), ('{"k": null}'), ('{"k": {"a": "b"}}'),
			   ('{"k": ["a"]}'), ('["k", "v"]'), ('"k=v"'), ('null')) t(v);

-- retry_policy: NULL means no policy; {} is a policy with Silo's defaults
SELECT silo.enqueue('enq', tenant => 'retry', id => 'none', retry_policy => NULL),
	   silo.enqueue('enq', tenant => 'retry', id => 'defaults', retry_policy => '{}'),
	   silo.enqueue('enq', tenant => 'retry', id => 'factor-one', retry_policy => '{"backoffFactor": 1, "initialIntervalMs": 0, "maxIntervalMs": 0}');
SELECT id, retry_count, retry_initial_ms, retry_max_ms, retry_factor, retry_randomize
  FROM silo.job_info WHERE tenant = 'retry' ORDER BY id;

-- retry_policy validation: unknown keys, wrong types, out of range
SELECT v AS retry_policy, test_helpers.sqlstate_of(format('SELECT silo.enqueue(%L, retry_policy => %L)', 'enq', v)) AS result
  FROM (VALUES ('{"retries": 3}'),
			   ('{"retryCount": "3"}'),
			   ('{"retryCount": 1.5}'),
			   ('{"retryCount": -1}'),
			   ('{"retryCount": null}'),
			   ('{"initialIntervalMs": -1}'),
			   ('{"initialIntervalMs": "1000"}'),
			   ('{"maxIntervalMs": -5}'),
			   ('{"maxIntervalMs": 2.5}'),
			   ('{"backoffFactor": 0.5}'),
			   ('{"backoffFactor": 0}'),
			   ('{"backoffFactor": -2}'),
			   ('{"backoffFactor": "2"}'),
			   ('{"randomizeInterval": "true"}'),
			   ('{"randomizeInterval": 1}'),
			   ('[]'),
			   ('3')) t(v);
-- the messages say what to fix
SELECT silo.enqueue('enq', retry_policy => '{"retries": 3}');
SELECT silo.enqueue('enq', retry_policy => '{"backoffFactor": 0.5}');

-- limits: must be an array of limit objects (every shape is in limits.sql)
SELECT silo.enqueue('enq', limits => '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT silo.enqueue('enq', limits => '"none"');
\echo :LAST_ERROR_SQLSTATE
SELECT silo.enqueue('enq', limits => '[{"key": "db", "maxConcurrency": 1}]');
\echo :LAST_ERROR_SQLSTATE

-- a NULL where a value is required raises 22004
SELECT arg, test_helpers.sqlstate_of(format('SELECT silo.enqueue(%s)', call)) AS result
  FROM (VALUES ('task_group', 'NULL'),
			   ('payload', '''enq'', payload => NULL'),
			   ('tenant', '''enq'', tenant => NULL'),
			   ('priority', '''enq'', priority => NULL'),
			   ('start_at', '''enq'', start_at => NULL'),
			   ('limits', '''enq'', limits => NULL'),
			   ('metadata', '''enq'', metadata => NULL'),
			   ('on_conflict', '''enq'', on_conflict => NULL')) t(arg, call);
SELECT silo.enqueue(NULL);
\echo :LAST_ERROR_SQLSTATE

-- none of the failed calls above wrote anything: every job here is one
-- that succeeded
SELECT count(*) AS jobs FROM silo.job_info;
SELECT tenant, count(*) AS jobs FROM silo.job_info GROUP BY tenant ORDER BY tenant COLLATE "C";
SELECT count(*) = (SELECT count(*) FROM silo.job_info) AS one_status_per_job FROM silo.job_status;
SELECT count(*) = (SELECT count(*) FROM silo.job_info) AS one_task_per_job FROM silo.task;

-- a failed call inside a transaction writes nothing either
BEGIN;
SELECT silo.enqueue('enq', tenant => 'sp', id => 'kept');
SAVEPOINT s;
SELECT silo.enqueue('enq', tenant => 'sp', id => 'bad', metadata => '{"k": 1}');
ROLLBACK TO SAVEPOINT s;
SELECT test_helpers.rows('sp');
COMMIT;
SELECT test_helpers.rows('sp');

--
-- enqueue_many
--

-- ids come back in input order; missing ids are generated
SELECT ord, id ~ '^(m3|m1|m2)$' OR test_helpers.is_uuid(id) AS ok, CASE WHEN id LIKE 'm_' THEN id END AS explicit_id
  FROM silo.enqueue_many('[{"task_group": "many", "tenant": "many", "id": "m3"},
						   {"task_group": "many", "tenant": "many", "id": "m1"},
						   {"task_group": "many", "tenant": "many"},
						   {"task_group": "many", "tenant": "many", "id": "m2"}]') WITH ORDINALITY AS t(id, ord);
-- enqueue order follows input order
SELECT CASE WHEN id LIKE 'm_' THEN id ELSE 'generated' END AS id
  FROM silo.job_info WHERE tenant = 'many' ORDER BY seq;

-- every key of silo.enqueue is accepted, with the same meaning
SELECT * FROM silo.enqueue_many($$[
	{"task_group": "many", "payload": {"a": 1}, "tenant": "keys", "id": "all-keys", "priority": 3,
	 "start_at": "2031-02-03T04:05:06Z",
	 "retry_policy": {"retryCount": 2, "initialIntervalMs": 100, "maxIntervalMs": 400, "backoffFactor": 3, "randomizeInterval": false},
	 "limits": [], "metadata": {"m": "v"}, "on_conflict": "error"},
	{"task_group": "many", "tenant": "keys", "id": "nulls", "retry_policy": null},
	{"task_group": "many", "tenant": "keys", "id": "offset-start", "start_at": "2031-02-03T06:05:06+02:00"}
]$$);
SELECT id, task_group, payload, priority, start_at = '2031-02-03 04:05:06+00' AS starts_at_given_instant,
	   retry_count, retry_initial_ms, retry_max_ms, retry_factor, retry_randomize, metadata
  FROM silo.job_info WHERE tenant = 'keys' ORDER BY id;
SELECT id, status FROM silo.jobs WHERE tenant = 'keys' ORDER BY id;
SELECT test_helpers.rows('keys');

-- an empty array enqueues nothing
SELECT count(*) FROM silo.enqueue_many('[]');

-- all or nothing: a bad element aborts the whole call; the error context
-- names the element (counting from 0)
SELECT count(*) AS jobs_before FROM silo.job_info;
SELECT * FROM silo.enqueue_many('[{"task_group": "many", "tenant": "aon", "id": "a"},
								  {"task_group": "many", "tenant": "aon", "id": "b"},
								  {"task_group": "many", "tenant": "aon", "id": "c", "priority": 100}]');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS jobs_after FROM silo.job_info;
SELECT test_helpers.rows('aon');

-- a duplicate id inside one call is a conflict too, and nothing is kept
SELECT * FROM silo.enqueue_many('[{"task_group": "many", "tenant": "aon", "id": "dup"},
								  {"task_group": "many", "tenant": "aon", "id": "dup"}]');
\echo :LAST_ERROR_SQLSTATE
SELECT test_helpers.rows('aon');
-- ... unless the element says on_conflict "ignore": the existing id comes back
SELECT * FROM silo.enqueue_many('[{"task_group": "many", "tenant": "aon", "id": "dup"},
								  {"task_group": "many", "tenant": "aon", "id": "dup", "on_conflict": "ignore"}]');
SELECT test_helpers.rows('aon');

-- unknown keys are rejected
SELECT * FROM silo.enqueue_many('[{"task_group": "many", "taskGroup": "many"}]');
\echo :LAST_ERROR_SQLSTATE

-- start_at must be an ISO 8601 string
SELECT * FROM silo.enqueue_many('[{"task_group": "many", "start_at": "next tuesday-ish"}]');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM silo.enqueue_many('[{"task_group": "many", "start_at": 1700000000000}]');
\echo :LAST_ERROR_SQLSTATE

-- element and argument shapes
SELECT label, test_helpers.sqlstate_of(format('SELECT * FROM silo.enqueue_many(%L)', jobs)) AS result
  FROM (VALUES ('not an array', '{"task_group": "many"}'),
			   ('scalar', '"many"'),
			   ('element not an object', '["many"]'),
			   ('element is an array', '[["many"]]'),
			   ('no task_group', '[{"tenant": "x"}]'),
			   ('task_group null', '[{"task_group": null}]'),
			   ('task_group not a string', '[{"task_group": 5}]'),
			   ('task_group empty', '[{"task_group": ""}]'),
			   ('tenant null', '[{"task_group": "many", "tenant": null}]'),
			   ('tenant too long', format('[{"task_group": "many", "tenant": "%s"}]', repeat('t', 65))),
			   ('id too long', format('[{"task_group": "many", "id": "%s"}]', repeat('i', 129))),
			   ('id not a string', '[{"task_group": "many", "id": 7}]'),
			   ('priority null', '[{"task_group": "many", "priority": null}]'),
			   ('priority string', '[{"task_group": "many", "priority": "5"}]'),
			   ('priority fraction', '[{"task_group": "many", "priority": 1.5}]'),
			   ('priority -1', '[{"task_group": "many", "priority": -1}]'),
			   ('start_at null', '[{"task_group": "many", "start_at": null}]'),
			   ('bad retry_policy', '[{"task_group": "many", "retry_policy": {"retryCount": -1}}]'),
			   ('limits null', '[{"task_group": "many", "limits": null}]'),
			   ('limits not empty', '[{"task_group": "many", "limits": [{"key": "k"}]}]'),
			   ('metadata null', '[{"task_group": "many", "metadata": null}]'),
			   ('metadata number', '[{"task_group": "many", "metadata": {"k": 1}}]'),
			   ('on_conflict bad', '[{"task_group": "many", "on_conflict": "merge"}]')) t(label, jobs);
SELECT * FROM silo.enqueue_many(NULL);
\echo :LAST_ERROR_SQLSTATE

-- none of the failed enqueue_many calls wrote anything
SELECT count(*) AS jobs FROM silo.job_info;

-- 0x03 agrees with every status row the file left behind, and the views
-- that read it with silo.jobs
SELECT test_helpers.status_index_mismatches();
SELECT test_helpers.views_disagree();
