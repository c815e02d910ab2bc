/*
 * test/stress/limits_stress.sql: the clients of the randomized limits stress
 * test (test/t/009_limits_stress.pl), as procedures in schema stress.
 *
 * Each client is one psql session running one CALL; a procedure commits
 * after every operation (so every silo call is its own transaction, as a
 * real client's would be), and catches each call's error in a savepoint,
 * recording it in stress.error.  The Perl side starts the clients, flips
 * the flags in stress.control, and checks what they left behind.
 *
 *   stress.producer(p, njobs, seed, mode, backlog)
 *       enqueues jobs p<P>-1 .. p<P>-<njobs>, one by one (mode 'single',
 *       silo.enqueue) or in batches of 1-8 (mode 'many', enqueue_many); the
 *       job's whole definition is a function of (seed, id): stress.job_spec.
 *       Pauses while more than backlog jobs are pending.
 *   stress.worker(w, seed)
 *       leases 1-6 tasks from task group ga or gb and reports each in its
 *       own transaction (or, 3 times in 10, all of them in one transaction,
 *       a savepoint each): complete, fail, release, heartbeat (then
 *       ack_cancel if cancelled, else complete) or ack_cancel.  Refresh
 *       tasks (floating limits) get report_refresh with a max >= the current
 *       one (never lowered: the invariant check reads the current max), or
 *       fail_refresh.  One lease call in 25 uses a 150-400 ms lease and
 *       never reports: those leases expire and the broker sweeps them.
 *   stress.chaos(seed)
 *       keeps cancels, restarts (at most 2 per job) and expedites at fixed
 *       ratios of the jobs enqueued so far.
 *   stress.sampler()
 *       every 200 ms, stress.sample(n): one statement (one snapshot) that
 *       records every invariant violation in stress.violation and a line of
 *       counts in stress.sample.
 *
 * Keys: fixed concurrency keys k0..k39 with maxConcurrency 1 + N % 4 (one
 * max per key, derived from its name); floating keys f0..f2 with default
 * max 1 + N % 3, raised by the refresh handler up to 4 + N % 3.  A job's
 * concurrency and floating keys are listed in one global order (by name)
 * and rate limits go anywhere among them: a job holds its earlier keys
 * while it waits for a later one, so jobs listing two keys in opposite
 * orders could wait for each other forever (as in Silo); one global order
 * rules that out and lets every job finish.
 */

CREATE SCHEMA stress;

CREATE TABLE stress.control (
	one			boolean PRIMARY KEY DEFAULT true CHECK (one),
	stop_producers boolean NOT NULL DEFAULT false,
	stop_chaos	boolean NOT NULL DEFAULT false,
	stop_workers boolean NOT NULL DEFAULT false,
	stop_sampler boolean NOT NULL DEFAULT false
);
INSERT INTO stress.control DEFAULT VALUES;

-- every acknowledged enqueue, written in the enqueue's transaction
CREATE TABLE stress.enqueued (
	tenant		text NOT NULL,
	id			text NOT NULL,
	producer	int NOT NULL,
	nlimits		int NOT NULL,
	PRIMARY KEY (tenant, id)
);

-- jobs requested so far, per producer (the chaos client's ratios)
CREATE TABLE stress.progress (
	producer	int PRIMARY KEY,
	n			int NOT NULL DEFAULT 0
);

-- operation counts per client (flushed every few iterations)
CREATE TABLE stress.counter (
	client		text NOT NULL,
	op			text NOT NULL,
	n			bigint NOT NULL,
	PRIMARY KEY (client, op)
);

-- every error a silo call raised
CREATE TABLE stress.error (
	client		text NOT NULL,
	op			text NOT NULL,
	sqlstate	text NOT NULL,
	message		text,
	detail		text,
	at			timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE stress.restarted (
	tenant		text NOT NULL,
	id			text NOT NULL,
	n			int NOT NULL,
	PRIMARY KEY (tenant, id)
);

CREATE TABLE stress.sample (
	n			int PRIMARY KEY,
	at			timestamptz NOT NULL,
	pending		bigint NOT NULL,
	holders		bigint NOT NULL,
	requesters	bigint NOT NULL,
	chain_tasks bigint NOT NULL,
	run_leases	bigint NOT NULL,
	refresh_leases bigint NOT NULL,
	full_keys_with_waiters bigint NOT NULL,	-- fixed keys at their max with requesters
	regrant_markers bigint NOT NULL,
	violations	bigint NOT NULL
);

CREATE TABLE stress.violation (
	sample		int NOT NULL,
	at			timestamptz NOT NULL,
	kind		text NOT NULL,
	detail		jsonb
);

/* ---------------------------------------------------------------------
 * The workload: a pure function of (seed, job id)
 * ------------------------------------------------------------------- */

-- a number in [0, 1) drawn from (seed, id, tag)
CREATE FUNCTION stress.rnd(seed bigint, id text, tag text) RETURNS float8
LANGUAGE sql IMMUTABLE AS $$
	SELECT ((hashtextextended(id || '/' || tag, seed) >> 11) & ((1::bigint << 52) - 1))::float8
		   / (1::bigint << 52)::float8
$$;

-- a setseed() argument in [-1, 1) for a client
CREATE FUNCTION stress.client_seed(seed bigint, client text) RETURNS float8
LANGUAGE sql IMMUTABLE AS $$
	SELECT stress.rnd(seed, client, 'setseed') * 2 - 1
$$;

-- the max of a fixed key (k<N>), the cap of a floating key's max (f<N>)
CREATE FUNCTION stress.fixed_max(key text) RETURNS int
LANGUAGE sql IMMUTABLE AS $$ SELECT 1 + substr(key, 2)::int % 4 $$;
CREATE FUNCTION stress.floating_default(key text) RETURNS int
LANGUAGE sql IMMUTABLE AS $$ SELECT 1 + substr(key, 2)::int % 3 $$;
CREATE FUNCTION stress.floating_cap(key text) RETURNS int
LANGUAGE sql IMMUTABLE AS $$ SELECT 4 + substr(key, 2)::int % 3 $$;

/*
 * stress.job_spec(seed, id): the job object for silo.enqueue_many
 * (task_group, tenant, id, priority, start_at, retry_policy, limits,
 * payload).  start_at is only set for a job due in the future.
 */
CREATE FUNCTION stress.job_spec(seed bigint, id text) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	nkeys		constant int := 40;
	nfloating	constant int := 3;
	r			float8;
	nl			int;
	i			int;
	idx			int;
	key			text;
	keys		text[] := '{}';
	rates		jsonb := '[]';
	rate		jsonb;
	lim			jsonb := '[]';
	spec		jsonb;
	pos			int;
BEGIN
	r := stress.rnd(seed, id, 'nlimits');
	nl := CASE WHEN r < 0.2 THEN 0 WHEN r < 0.5 THEN 1 WHEN r < 0.8 THEN 2 ELSE 3 END;
	FOR i IN 1 .. nl LOOP
		r := stress.rnd(seed, id, 'type' || i);
		IF r < 0.62 THEN
			-- fixed key, skewed towards the low (hot) numbers
			idx := floor(nkeys * power(stress.rnd(seed, id, 'key' || i), 1.5))::int;
			WHILE ('k' || idx) = ANY (keys) LOOP
				idx := (idx + 1) % nkeys;
			END LOOP;
			keys := keys || ('k' || idx);
		ELSIF r < 0.84 THEN
			key := 'f' || floor(nfloating * stress.rnd(seed, id, 'key' || i))::int;
			IF NOT key = ANY (keys) THEN
				keys := keys || key;
			END IF;
		ELSIF stress.rnd(seed, id, 'tight' || i) < 0.25 THEN
			-- a tight rate limit: over it, a job is re-checked twice, then fails RATE_LIMITED
			IF NOT rates @> '[{"name": "tight"}]' THEN
				rates := rates || jsonb_build_array(jsonb_build_object(
					'type', 'rateLimit', 'name', 'tight', 'uniqueKey', 'x', 'limit', 1,
					'durationMs', 1000, 'algorithm', 'leakyBucket',
					'retryPolicy', jsonb_build_object('initialBackoffMs', 50, 'maxBackoffMs', 300,
													  'backoffMultiplier', 2, 'maxRetries', 2)));
			END IF;
		ELSE
			-- a generous one (re-checked until admitted)
			key := 'u' || floor(4 * stress.rnd(seed, id, 'unique' || i))::int;
			IF NOT rates @> jsonb_build_array(jsonb_build_object('name', 'gen', 'uniqueKey', key)) THEN
				rates := rates || jsonb_build_array(jsonb_build_object(
					'type', 'rateLimit', 'name', 'gen', 'uniqueKey', key, 'limit', 40,
					'durationMs', 1000,
					'algorithm', CASE WHEN stress.rnd(seed, id, 'algo' || i) < 0.5
									  THEN 'tokenBucket' ELSE 'leakyBucket' END,
					'retryPolicy', jsonb_build_object('initialBackoffMs', 20, 'maxBackoffMs', 500)));
			END IF;
		END IF;
	END LOOP;

	-- keys in one global order (by name), rate limits at random places
	SELECT coalesce(jsonb_agg(
			 CASE WHEN k LIKE 'k%' THEN
					  jsonb_build_object('type', 'concurrency', 'key', k,
										 'maxConcurrency', stress.fixed_max(k))
				  ELSE
					  jsonb_build_object('type', 'floatingConcurrency', 'key', k,
										 'defaultMaxConcurrency', stress.floating_default(k),
										 'refreshIntervalMs', 300 + 100 * substr(k, 2)::int,
										 'metadata', jsonb_build_object('pool', k))
			 END ORDER BY k COLLATE "C"), '[]')
	  INTO lim FROM unnest(keys) k;
	FOR i IN 0 .. jsonb_array_length(rates) - 1 LOOP
		rate := rates -> i;
		pos := floor((jsonb_array_length(lim) + 1) * stress.rnd(seed, id, 'pos' || i))::int;
		SELECT coalesce(jsonb_agg(e ORDER BY o), '[]') INTO lim
		  FROM (SELECT e, CASE WHEN o - 1 < pos THEN o ELSE o + 1 END AS o
				  FROM jsonb_array_elements(lim) WITH ORDINALITY x(e, o)
				UNION ALL SELECT rate, pos + 1) y;
	END LOOP;

	spec := jsonb_build_object(
		'task_group', CASE WHEN stress.rnd(seed, id, 'group') < 0.5 THEN 'ga' ELSE 'gb' END,
		'tenant', CASE WHEN stress.rnd(seed, id, 'tenant') < 0.8 THEN '-' ELSE 'tb' END,
		'id', id,
		'priority', (ARRAY[10, 50, 50, 90])[1 + floor(4 * stress.rnd(seed, id, 'priority'))::int],
		'payload', jsonb_build_object('id', id),
		'limits', lim,
		'retry_policy', CASE WHEN stress.rnd(seed, id, 'retry') < 0.7 THEN
			jsonb_build_object('retryCount', floor(4 * stress.rnd(seed, id, 'retries'))::int,
							   'initialIntervalMs', floor(150 * stress.rnd(seed, id, 'interval'))::int,
							   'maxIntervalMs', 400, 'backoffFactor', 2)
			ELSE 'null' END);
	IF stress.rnd(seed, id, 'future') < 0.1 THEN
		spec := spec || jsonb_build_object('start_at', to_jsonb(clock_timestamp()
			+ (50 + 1450 * stress.rnd(seed, id, 'start')) * interval '1 millisecond'));
	END IF;
	RETURN spec;
END
$$;

-- add n to a client's counter of op
CREATE PROCEDURE stress.flush_counts(client text, counts jsonb)
LANGUAGE sql AS $$
	INSERT INTO stress.counter (client, op, n)
	SELECT client, key, value::bigint FROM jsonb_each_text(counts)
	ON CONFLICT ON CONSTRAINT counter_pkey DO UPDATE SET n = stress.counter.n + excluded.n
$$;

CREATE FUNCTION stress.bump(counts jsonb, op text, n int DEFAULT 1) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
	SELECT jsonb_set(counts, ARRAY[op], to_jsonb(coalesce((counts ->> op)::bigint, 0) + n))
$$;

/* ---------------------------------------------------------------------
 * Producers
 * ------------------------------------------------------------------- */

CREATE PROCEDURE stress.producer(p int, njobs int, seed bigint, mode text, backlog int)
LANGUAGE plpgsql AS $$
DECLARE
	client		text := 'producer' || p;
	done		int := 0;
	b			int;
	spec		jsonb;
	batch		jsonb;
	jid			text;
	st			text;
	msg			text;
	det			text;
	counts		jsonb := '{}';
BEGIN
	PERFORM setseed(stress.client_seed(seed, client));
	INSERT INTO stress.progress (producer) VALUES (p);
	COMMIT;
	WHILE done < njobs LOOP
		EXIT WHEN (SELECT stop_producers FROM stress.control);
		IF (SELECT count(*) FROM silo.job_status
			 WHERE tenant IN ('-', 'tb') AND status = 'Pending') > backlog THEN
			counts := stress.bump(counts, 'backlog_wait');
			PERFORM pg_sleep(0.02);
			COMMIT;
			CONTINUE;
		END IF;
		b := CASE WHEN mode = 'single' THEN 1 ELSE 1 + floor(8 * random())::int END;
		b := least(b, njobs - done);
		BEGIN
			IF mode = 'single' THEN
				spec := stress.job_spec(seed, format('p%s-%s', p, done + 1));
				jid := silo.enqueue(spec ->> 'task_group', spec -> 'payload',
									tenant => spec ->> 'tenant',
									id => spec ->> 'id',
									priority => (spec ->> 'priority')::int,
									start_at => coalesce((spec ->> 'start_at')::timestamptz, now()),
									retry_policy => nullif(spec -> 'retry_policy', 'null'::jsonb),
									limits => spec -> 'limits');
				INSERT INTO stress.enqueued VALUES (spec ->> 'tenant', jid, p,
													jsonb_array_length(spec -> 'limits'));
			ELSE
				SELECT jsonb_agg(stress.job_spec(seed, format('p%s-%s', p, k)) ORDER BY k)
				  INTO batch FROM generate_series(done + 1, done + b) k;
				INSERT INTO stress.enqueued
				SELECT batch -> (k::int - 1) ->> 'tenant', e.id, p,
					   jsonb_array_length(batch -> (k::int - 1) -> 'limits')
				  FROM silo.enqueue_many(batch) WITH ORDINALITY e(id, k);
			END IF;
			counts := stress.bump(counts, 'enqueued', b);
		EXCEPTION WHEN OTHERS THEN
			GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
			INSERT INTO stress.error VALUES (client, 'enqueue', st, msg, det);
		END;
		done := done + b;
		UPDATE stress.progress SET n = done WHERE producer = p;
		COMMIT;
		IF done % 200 < b THEN
			CALL stress.flush_counts(client, counts);
			counts := '{}';
			COMMIT;
		END IF;
	END LOOP;
	CALL stress.flush_counts(client, counts);
	COMMIT;
END
$$;

/* ---------------------------------------------------------------------
 * Workers (and the floating-limit refresh handler)
 * ------------------------------------------------------------------- */

CREATE PROCEDURE stress.worker(w text, seed bigint)
LANGUAGE plpgsql AS $$
DECLARE
	tasks		silo.leased_task[];
	t			silo.leased_task;
	grp			text;
	abandon		boolean;
	batched		boolean;
	r			float8;
	op			text;
	st			text;
	msg			text;
	det			text;
	iter		int := 0;
	counts		jsonb := '{}';
BEGIN
	PERFORM setseed(stress.client_seed(seed, w));
	LOOP
		iter := iter + 1;
		IF iter % 25 = 0 THEN
			CALL stress.flush_counts(w, counts);
			counts := '{}';
			COMMIT;
		END IF;
		EXIT WHEN (SELECT stop_workers FROM stress.control);
		grp := CASE WHEN random() < 0.5 THEN 'ga' ELSE 'gb' END;
		abandon := random() < 0.04;
		tasks := NULL;
		BEGIN
			op := 'lease';
			SELECT array_agg(l) INTO tasks
			  FROM silo.lease(w, grp, 1 + floor(6 * random())::int,
							  CASE WHEN abandon THEN 150 + floor(250 * random())::int ELSE 20000 END) l;
		EXCEPTION WHEN OTHERS THEN
			GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
			INSERT INTO stress.error VALUES (w, op, st, msg, det);
		END;
		COMMIT;
		IF tasks IS NULL THEN
			counts := stress.bump(counts, 'idle');
			PERFORM pg_sleep(0.005);
			COMMIT;
			CONTINUE;
		END IF;
		IF abandon THEN
			-- never reported: the lease expires and the broker sweeps it
			FOREACH t IN ARRAY tasks LOOP
				counts := stress.bump(counts, 'abandon_' || t.kind);
			END LOOP;
			CONTINUE;
		END IF;
		-- Reports go one per transaction, or (3 batches in 10) all in one
		-- transaction, a savepoint each: a transaction that releases one
		-- job's keys already holds the keys of the jobs before it.
		batched := cardinality(tasks) > 1 AND random() < 0.3;
		IF batched THEN
			counts := stress.bump(counts, 'batched_reports', cardinality(tasks));
		END IF;
		-- Half the batches complete their run tasks in one complete_many
		-- call, which frees the keys of the whole batch set-wise; half of
		-- those complete one task alone first, so that complete_many starts
		-- holding a key and may only try the keys below it.
		IF batched AND random() < 0.5 THEN
			BEGIN
				IF random() < 0.5 AND EXISTS (SELECT 1 FROM unnest(tasks) x WHERE x.kind = 'run') THEN
					op := 'complete';
					t := (SELECT x FROM unnest(tasks) x WHERE x.kind = 'run' LIMIT 1);
					PERFORM silo.complete(t.task_id, w);
					counts := stress.bump(counts, 'complete_before_many');
					tasks := ARRAY(SELECT x FROM unnest(tasks) x WHERE x.task_id <> t.task_id);
				END IF;
				op := 'complete_many';
				counts := stress.bump(counts, 'complete_many',
					(SELECT count(*)::int FROM silo.complete_many(
						ARRAY(SELECT x.task_id FROM unnest(tasks) x WHERE x.kind = 'run'), w)));
			EXCEPTION WHEN OTHERS THEN
				GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
				INSERT INTO stress.error VALUES (w, op, st, msg, det);
			END;
			tasks := ARRAY(SELECT x FROM unnest(tasks) x WHERE x.kind <> 'run');
		END IF;
		FOREACH t IN ARRAY tasks LOOP
			IF NOT batched THEN
				-- the work itself: a few milliseconds
				PERFORM pg_sleep(0.01 * random());
				COMMIT;
			END IF;
			r := random();
			BEGIN
				IF t.kind = 'refresh' THEN
					IF r < 0.75 THEN
						op := 'report_refresh';
						PERFORM silo.report_refresh(t.task_id, w,
							greatest(t.current_max_concurrency,
									 least(t.current_max_concurrency + (random() < 0.35)::int,
										   stress.floating_cap(t.queue_key))));
					ELSE
						op := 'fail_refresh';
						PERFORM silo.fail_refresh(t.task_id, w, 'E_REFRESH_STRESS');
					END IF;
				ELSIF r < 0.58 THEN
					op := 'complete';
					PERFORM silo.complete(t.task_id, w, jsonb_build_object('w', w));
				ELSIF r < 0.73 THEN
					op := 'fail';
					PERFORM silo.fail(t.task_id, w, 'E_STRESS');
				ELSIF r < 0.80 THEN
					op := 'release';
					PERFORM silo.release(t.task_id, w);
				ELSIF r < 0.93 THEN
					op := 'heartbeat';
					IF silo.heartbeat(t.task_id, w, 20000) THEN
						op := 'ack_cancel';
						PERFORM silo.ack_cancel(t.task_id, w);
					ELSE
						op := 'complete_after_heartbeat';
						PERFORM silo.complete(t.task_id, w);
					END IF;
				ELSE
					op := 'ack_cancel_self';
					PERFORM silo.ack_cancel(t.task_id, w);
				END IF;
				counts := stress.bump(counts, op);
			EXCEPTION WHEN OTHERS THEN
				GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
				INSERT INTO stress.error VALUES (w, op, st, msg, det);
			END;
			IF NOT batched THEN
				COMMIT;
			END IF;
		END LOOP;
		COMMIT;
	END LOOP;
	CALL stress.flush_counts(w, counts);
	COMMIT;
END
$$;

/* ---------------------------------------------------------------------
 * Cancels, restarts and expedites
 * ------------------------------------------------------------------- */

CREATE PROCEDURE stress.chaos(seed bigint, cancel_ratio float8, restart_ratio float8,
							  expedite_ratio float8)
LANGUAGE plpgsql AS $$
DECLARE
	client		text := 'chaos';
	target		bigint;
	cancels		int := 0;
	restarts	int := 0;
	expedites	int := 0;
	busy		boolean;
	jt			text;
	jid			text;
	op			text;
	st			text;
	msg			text;
	det			text;
	counts		jsonb := '{}';
	iter		int := 0;
BEGIN
	PERFORM setseed(stress.client_seed(seed, client));
	LOOP
		iter := iter + 1;
		IF iter % 25 = 0 THEN
			CALL stress.flush_counts(client, counts);
			counts := '{}';
			COMMIT;
		END IF;
		EXIT WHEN (SELECT stop_chaos FROM stress.control);
		SELECT coalesce(sum(n), 0) INTO target FROM stress.progress;
		busy := false;
		BEGIN
			jid := NULL;
			IF cancels < target * cancel_ratio THEN
				busy := true;
				cancels := cancels + 1;
				op := 'cancel';
				IF random() < 0.5 THEN
					-- a running job (its worker learns of it, or its lease expires)
					SELECT l.tenant, l.job_id INTO jt, jid FROM silo.task_lease l
					 WHERE l.kind = 'run' ORDER BY random() LIMIT 1;
				ELSE
					-- one of the 40 pending jobs that changed last
					SELECT s.tenant, s.id INTO jt, jid FROM silo.job_status s
					 WHERE s.tenant = CASE WHEN random() < 0.8 THEN '-' ELSE 'tb' END
					   AND s.status = 'Pending'
					 ORDER BY s.changed_at DESC, s.id OFFSET floor(40 * random())::int LIMIT 1;
				END IF;
				IF jid IS NOT NULL THEN
					PERFORM silo.cancel(jid, jt);
				END IF;
			ELSIF restarts < target * restart_ratio THEN
				busy := true;
				restarts := restarts + 1;
				op := 'restart';
				SELECT s.tenant, s.id INTO jt, jid FROM silo.job_status s
				  LEFT JOIN stress.restarted x ON x.tenant = s.tenant AND x.id = s.id
				 WHERE s.tenant = CASE WHEN random() < 0.8 THEN '-' ELSE 'tb' END
				   AND s.status = CASE WHEN random() < 0.5 THEN 'Failed' ELSE 'Cancelled' END
				   AND coalesce(x.n, 0) < 2
				 ORDER BY s.changed_at DESC, s.id OFFSET floor(20 * random())::int LIMIT 1;
				IF jid IS NOT NULL THEN
					PERFORM silo.restart(jid, jt);
					INSERT INTO stress.restarted VALUES (jt, jid, 1)
					ON CONFLICT (tenant, id) DO UPDATE SET n = restarted.n + 1;
				END IF;
			ELSIF expedites < target * expedite_ratio THEN
				busy := true;
				expedites := expedites + 1;
				op := 'expedite';
				-- a job waiting for a future start or a retry
				SELECT s.tenant, s.id INTO jt, jid FROM silo.job_status s
				 WHERE s.tenant IN ('-', 'tb') AND s.status = 'Pending'
				   AND s.next_attempt_at > clock_timestamp()
				 ORDER BY random() LIMIT 1;
				IF jid IS NOT NULL THEN
					PERFORM silo.expedite(jid, jt);
				END IF;
			END IF;
			IF jid IS NOT NULL THEN
				counts := stress.bump(counts, op);
			ELSIF busy THEN
				counts := stress.bump(counts, op || '_no_candidate');
			END IF;
		EXCEPTION WHEN OTHERS THEN
			GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
			INSERT INTO stress.error VALUES (client, op, st, msg, det);
		END;
		COMMIT;
		IF NOT busy THEN
			PERFORM pg_sleep(0.01);
			COMMIT;
		END IF;
	END LOOP;
	CALL stress.flush_counts(client, counts);
	COMMIT;
END
$$;

/* ---------------------------------------------------------------------
 * The invariants, sampled
 * ------------------------------------------------------------------- */

/*
 * stress.regrant: keys whose holder row a release deleted without the key's
 * lock (it was busy), leaving the grant of their waiters to the broker
 * (silo.concurrency_regrant, where that table exists).  Until the broker
 * gets to it, such a key may have a free slot and waiters.
 */
DO $$
BEGIN
	IF to_regclass('silo.concurrency_regrant') IS NOT NULL THEN
		EXECUTE 'CREATE VIEW stress.regrant AS SELECT tenant, queue FROM silo.concurrency_regrant';
	ELSE
		EXECUTE 'CREATE VIEW stress.regrant AS SELECT NULL::text AS tenant, NULL::text AS queue WHERE false';
	END IF;
END
$$;

/*
 * stress.status_index: 0x03 (silo.job_status_index, 1.5 on; before, the
 * status rows themselves, so that nothing can disagree).
 */
DO $$
BEGIN
	IF to_regclass('silo.job_status_index') IS NOT NULL THEN
		EXECUTE 'CREATE VIEW stress.status_index AS'
			' SELECT tenant, status, changed_at, id FROM silo.job_status_index';
	ELSE
		EXECUTE 'CREATE VIEW stress.status_index AS'
			' SELECT tenant, status, changed_at, id FROM silo.job_status';
	END IF;
END
$$;

/*
 * stress.sample(n): one INSERT statement, so every check reads the same
 * snapshot.  Violations (kind, detail):
 *   over_max                a key has more holders than its max (fixed:
 *                           derived from its name; floating: current_max,
 *                           which only ever rises here)
 *   waiting_with_free_slot  a key has requesters but fewer holders than its
 *                           max: every release grants in its transaction
 *                           (or, for a key it could not lock, leaves a
 *                           regrant marker for the broker)
 *   place_not_current       a task, lease, chain task or requester row of a
 *                           job that is not pending, or of another attempt
 *                           or task than the job's current one
 *   holder_not_current      the same for a holder row
 *   pending_job_places      a pending job is not in exactly one place
 *   holds_mismatch          the holder rows of a task id differ from the
 *                           holds list of its place (or it has no place)
 *   holds_vs_limits         a place's holds list differs from the job's
 *                           concurrency keys before its limit index (all of
 *                           them for a task or lease)
 *   request_wrong_key       a requester row's limit index does not name its key
 *   job_holds_key_twice     one job holds one key twice
 *   refresh_lease_not_current  a refresh lease that is not its key's
 *                           scheduled, delivered refresh
 *   status_index_mismatch   a job's 0x03 row is missing, extra, or
 *                           disagrees with its status row's status or time
 *   rate_bucket_out_of_range   a bucket's level below 0, or above its limit
 *                           (a leaky bucket's level drained to now: a check
 *                           whose clock reading predates the last update
 *                           may store a level above the limit as of its
 *                           earlier updated_at, which is consistent)
 */
CREATE FUNCTION stress.sample(sample_no int) RETURNS bigint
LANGUAGE sql AS $$
WITH
places AS MATERIALIZED (
	SELECT 'task' AS place, tenant, job_id, attempt, task_id, holds, NULL::int AS limit_index,
		   NULL::text AS queue
	  FROM silo.task
	UNION ALL
	SELECT 'lease', tenant, job_id, attempt, task_id, holds, NULL, NULL
	  FROM silo.task_lease WHERE kind = 'run'
	UNION ALL
	SELECT 'chain_task', tenant, job_id, attempt, task_id, holds, limit_index, NULL
	  FROM silo.chain_task
	UNION ALL
	SELECT 'requester', tenant, job_id, attempt, task_id, holds, limit_index, queue
	  FROM silo.concurrency_request
),
holders AS MATERIALIZED (
	SELECT tenant, queue, task_id, job_id, attempt, granted_at FROM silo.concurrency_holder
),
requesters AS MATERIALIZED (
	SELECT tenant, queue, count(*) AS n FROM silo.concurrency_request GROUP BY 1, 2
),
keys AS MATERIALIZED (
	SELECT k.tenant, k.queue,
		   coalesce(h.n, 0) AS holders, coalesce(r.n, 0) AS requesters,
		   CASE WHEN k.queue ~ '^k[0-9]+$' THEN stress.fixed_max(k.queue) ELSE f.current_max END AS max,
		   f.queue IS NOT NULL AS floating
	  FROM (SELECT tenant, queue FROM holders UNION SELECT tenant, queue FROM requesters) k
	  LEFT JOIN (SELECT tenant, queue, count(*) AS n FROM holders GROUP BY 1, 2) h
			 ON h.tenant = k.tenant AND h.queue = k.queue
	  LEFT JOIN requesters r ON r.tenant = k.tenant AND r.queue = k.queue
	  LEFT JOIN silo.floating_limit f ON f.tenant = k.tenant AND f.queue = k.queue
),
v AS (
	SELECT 'over_max' AS kind,
		   to_jsonb(k) || jsonb_build_object('holder_rows',
			   (SELECT jsonb_agg(to_jsonb(h) ORDER BY h.granted_at) FROM holders h
				 WHERE h.tenant = k.tenant AND h.queue = k.queue)) AS detail
	  FROM keys k WHERE k.max IS NULL OR k.holders > k.max
	UNION ALL
	SELECT 'waiting_with_free_slot',
		   to_jsonb(k) || jsonb_build_object('requester_rows',
			   (SELECT jsonb_agg(to_jsonb(r) ORDER BY r.priority, r.start_at, r.seq) FROM silo.concurrency_request r
				 WHERE r.tenant = k.tenant AND r.queue = k.queue))
	  FROM keys k WHERE k.requesters > 0 AND k.holders < k.max
	   AND NOT EXISTS (SELECT 1 FROM stress.regrant g WHERE g.tenant = k.tenant AND g.queue = k.queue)
	UNION ALL
	SELECT 'place_not_current',
		   to_jsonb(p) || jsonb_build_object('job_status', s.status, 'job_attempt', s.attempt,
											 'job_task_id', s.task_id)
	  FROM places p LEFT JOIN silo.job_status s ON s.tenant = p.tenant AND s.id = p.job_id
	 WHERE s.status IS DISTINCT FROM 'Pending' OR s.task_id IS DISTINCT FROM p.task_id
		OR s.attempt IS DISTINCT FROM p.attempt
	UNION ALL
	SELECT 'holder_not_current',
		   to_jsonb(h) || jsonb_build_object('job_status', s.status, 'job_attempt', s.attempt,
											 'job_task_id', s.task_id)
	  FROM holders h LEFT JOIN silo.job_status s ON s.tenant = h.tenant AND s.id = h.job_id
	 WHERE s.status IS DISTINCT FROM 'Pending' OR s.task_id IS DISTINCT FROM h.task_id
		OR s.attempt IS DISTINCT FROM h.attempt
	UNION ALL
	SELECT 'pending_job_places',
		   jsonb_build_object('tenant', s.tenant, 'job_id', s.id, 'attempt', s.attempt,
							  'task_id', s.task_id, 'places', coalesce(pl.places, '[]'))
	  FROM silo.job_status s
	  LEFT JOIN (SELECT tenant, job_id, count(*) AS n, jsonb_agg(to_jsonb(p)) AS places
				   FROM places p GROUP BY 1, 2) pl ON pl.tenant = s.tenant AND pl.job_id = s.id
	 WHERE s.tenant IN ('-', 'tb') AND s.status = 'Pending' AND coalesce(pl.n, 0) <> 1
	UNION ALL
	SELECT 'holds_mismatch',
		   jsonb_build_object('tenant', coalesce(p.tenant, h.tenant), 'task_id', coalesce(p.task_id, h.task_id),
							  'place', p.place, 'job_id', coalesce(p.job_id, h.job_id),
							  'holds', p.holds, 'holder_rows', h.queues)
	  FROM (SELECT place, tenant, task_id, job_id,
				   ARRAY(SELECT x FROM unnest(coalesce(holds, '{}')) x ORDER BY x COLLATE "C") AS holds
			  FROM places) p
	  FULL JOIN (SELECT tenant, task_id, min(job_id) AS job_id,
						array_agg(queue ORDER BY queue COLLATE "C") AS queues
				   FROM holders GROUP BY 1, 2) h
			 ON h.tenant = p.tenant AND h.task_id = p.task_id
	 WHERE p.task_id IS NULL OR coalesce(p.holds, '{}') <> coalesce(h.queues, '{}')
	UNION ALL
	SELECT 'holds_vs_limits',
		   to_jsonb(p) || jsonb_build_object('limits', i.limits, 'expected', e.keys)
	  FROM places p
	  JOIN silo.job_info i ON i.tenant = p.tenant AND i.id = p.job_id
	  CROSS JOIN LATERAL (
		  SELECT ARRAY(SELECT l ->> 'key' FROM jsonb_array_elements(i.limits) WITH ORDINALITY x(l, o)
						WHERE l ->> 'type' <> 'rateLimit'
						  AND o - 1 < coalesce(p.limit_index, jsonb_array_length(i.limits))
						ORDER BY (l ->> 'key') COLLATE "C") AS keys) e
	 WHERE ARRAY(SELECT x FROM unnest(coalesce(p.holds, '{}')) x ORDER BY x COLLATE "C") <> e.keys
	UNION ALL
	SELECT 'request_wrong_key', to_jsonb(p) || jsonb_build_object('limits', i.limits)
	  FROM places p
	  JOIN silo.job_info i ON i.tenant = p.tenant AND i.id = p.job_id
	 WHERE p.place = 'requester'
	   AND (i.limits -> p.limit_index ->> 'key') IS DISTINCT FROM p.queue
	UNION ALL
	SELECT 'job_holds_key_twice',
		   jsonb_build_object('tenant', tenant, 'queue', queue, 'job_id', job_id,
							  'holder_rows', jsonb_agg(to_jsonb(h)))
	  FROM holders h GROUP BY tenant, queue, job_id HAVING count(*) > 1
	UNION ALL
	SELECT 'refresh_lease_not_current',
		   to_jsonb(l) || jsonb_build_object('floating', to_jsonb(f))
	  FROM silo.task_lease l
	  LEFT JOIN silo.floating_limit f ON f.tenant = l.tenant AND f.queue = l.job_id
	 WHERE l.kind = 'refresh'
	   AND (f.refresh_task_id IS DISTINCT FROM l.task_id OR f.refresh_ready)
	UNION ALL
	SELECT 'status_index_mismatch',
		   jsonb_build_object('status_row', to_jsonb(s), 'index_row', to_jsonb(x))
	  FROM (SELECT tenant, id, status, changed_at FROM silo.job_status) s
	  FULL JOIN stress.status_index x
		ON x.tenant = s.tenant AND x.id = s.id AND x.status = s.status
	   AND x.changed_at = s.changed_at
	 WHERE s.id IS NULL OR x.id IS NULL
	UNION ALL
	SELECT 'rate_bucket_out_of_range', to_jsonb(b) || jsonb_build_object('level_now', x.level_now)
	  FROM silo.rate_limit_bucket b
	 CROSS JOIN LATERAL (
		 SELECT CASE WHEN b.algorithm = 'leakyBucket'
					 THEN b.level - extract(epoch FROM clock_timestamp() - b.updated_at) * 1000
									* b."limit" / b.duration_ms
					 ELSE b.level END AS level_now) x
	 WHERE b.level < -1e-9 OR x.level_now > b."limit" + 1e-9
),
ins AS (
	INSERT INTO stress.violation (sample, at, kind, detail)
	SELECT sample_no, clock_timestamp(), kind, detail FROM v
	RETURNING 1
)
INSERT INTO stress.sample
SELECT sample_no, clock_timestamp(),
	   (SELECT count(*) FROM silo.job_status WHERE tenant IN ('-', 'tb') AND status = 'Pending'),
	   (SELECT count(*) FROM holders),
	   (SELECT coalesce(sum(n), 0) FROM requesters),
	   (SELECT count(*) FROM places WHERE place = 'chain_task'),
	   (SELECT count(*) FROM places WHERE place = 'lease'),
	   (SELECT count(*) FROM silo.task_lease WHERE kind = 'refresh'),
	   (SELECT count(*) FROM keys WHERE NOT floating AND requesters > 0 AND holders >= max),
	   (SELECT count(*) FROM stress.regrant),
	   (SELECT count(*) FROM ins)
RETURNING violations
$$;

CREATE PROCEDURE stress.sampler()
LANGUAGE plpgsql AS $$
DECLARE
	i			int := 0;
BEGIN
	LOOP
		EXIT WHEN (SELECT stop_sampler FROM stress.control);
		i := i + 1;
		PERFORM stress.sample(i);
		COMMIT;
		PERFORM pg_sleep(0.2);
		COMMIT;
	END LOOP;
END
$$;
