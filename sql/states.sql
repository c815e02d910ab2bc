--
-- states: the differences from Silo's job model that docs/states.md
-- lists as deliberate ("Other differences", 1.8), each as silo does it.
--
SELECT test_helpers.reset();

-- a metadata key of exactly 64 characters is accepted (Silo refuses keys
-- of 64 and more); 65 is refused
SELECT silo.enqueue('st', id => 'k64', metadata => jsonb_build_object(repeat('k', 64), 'v'));
SELECT silo.enqueue('st', id => 'k65', metadata => jsonb_build_object(repeat('k', 65), 'v'));

-- current_attempt is the attempt running while Running (Silo clears it on
-- lease), and NULL once the job was cancelled (Silo keeps it); so is
-- next_attempt_at
SELECT silo.enqueue('st-run', id => 'run');
SELECT task_id AS t FROM silo.lease('w', 'st-run') \gset
SELECT status, current_attempt, next_attempt_at FROM silo.jobs WHERE id = 'run';
SELECT silo.cancel('run');
SELECT silo.ack_cancel(:'t', 'w');
SELECT status, current_attempt, next_attempt_at FROM silo.jobs WHERE id = 'run';

-- a job cancelled while Scheduled keeps no next_attempt_at (Silo keeps
-- its scheduling fields) ...
SELECT silo.enqueue('st-fut', id => 'future', start_at => silo.now() + interval '1 hour');
SELECT status, current_attempt, next_attempt_at > silo.now() AS future FROM silo.jobs WHERE id = 'future';
SELECT silo.cancel('future');
SELECT status, current_attempt, next_attempt_at FROM silo.jobs WHERE id = 'future';
-- ... and a restart makes it due now (Silo restarts at max(stored enqueue
-- time, now), and stores the requested start as the enqueue time)
SELECT silo.restart('future');
SELECT status, current_attempt, next_attempt_at <= silo.now() AS due_now FROM silo.jobs WHERE id = 'future';
SELECT job_id FROM silo.lease('w', 'st-fut');

-- the sweep of an expired lease of a cancelled job: the job ends
-- Cancelled (as in Silo), the attempt is recorded as it ended, Failed
-- WORKER_CRASHED (Silo records it Cancelled), as a fail with a cancel
-- pending is
SELECT silo.enqueue('st-sw', id => 'swept');
SELECT count(*) AS leased FROM silo.lease('w', 'st-sw', 1, 1000);
SELECT silo.cancel('swept');
SET silo.clock_offset_ms = 5000;
SELECT expired FROM silo.run_maintenance();
RESET silo.clock_offset_ms;
SELECT j.status, j.cancelled_at IS NOT NULL AS cancel_flag, a.attempt, a.status AS attempt_status,
	   a.error_code
  FROM silo.jobs j JOIN silo.attempts a ON a.tenant = j.tenant AND a.job_id = j.id
 WHERE j.id = 'swept';
SELECT status, error_code FROM silo.job_result('swept');
