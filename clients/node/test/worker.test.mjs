// SiloWorker end to end against a real silo: outcomes, retries, cancel,
// stop, refresh tasks, reconnects, the guard against running a job twice,
// and LISTEN wake-ups.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import {
  ConnectionError, JobCancelledError, LeaseLostError, SiloClient, SiloWorker, TaskFailure, WorkerStoppingError,
} from '../dist/index.js';
import {
  URL, admin, deferred, errorSink, jobStatus, sleep, sql, unique, urlAs, value, waitFor,
} from './helpers.mjs';

let client;
const workers = new Set();

before(() => {
  client = new SiloClient(URL);
});

after(async () => {
  await Promise.all([...workers].map((w) => w.stop({ graceMs: 0 })));
  await client.close();
  await admin.end();
});

/** A started worker, stopped after the file if a test does not stop it. */
async function startWorker(options) {
  const sink = errorSink();
  const w = new SiloWorker({ connection: URL, onError: sink.onError, ...options });
  w.errors = sink.errors;
  workers.add(w);
  await w.start();
  return w;
}

async function stopWorker(w, options) {
  await w.stop(options);
  workers.delete(w);
}

/** Wrap the worker's query function to record (statement name, values). */
function spy(w) {
  const calls = [];
  const q = w.q.bind(w);
  w.q = (text, values, name) => {
    calls.push({ name, values });
    return q(text, values, name);
  };
  return calls;
}

function abortedWith(signal) {
  return new Promise((resolve) => {
    if (signal.aborted) resolve(signal.reason);
    else signal.addEventListener('abort', () => resolve(signal.reason), { once: true });
  });
}

async function waitForStatus(ids, statuses, timeoutMs = 15000, tenant = '-') {
  await waitFor(async () => {
    const n = await value('SELECT count(*)::int FROM silo.jobs WHERE tenant = $1 AND id = ANY($2) AND status = ANY($3)',
      [tenant, ids, statuses]);
    return n === ids.length;
  }, { timeoutMs, message: `${ids.length} job(s) ${statuses.join('/')}` });
}

async function attempts(id) {
  return sql('SELECT attempt, status, error_code, error_data, result FROM silo.attempts'
    + " WHERE tenant = '-' AND job_id = $1 ORDER BY attempt", [id]);
}

describe('running jobs', () => {
  test('successes: results stored, leases sized to free slots, completions batched', async () => {
    const group = unique('ok');
    const jobs = Array.from({ length: 40 }, (_, n) => ({ taskGroup: group, payload: { n } }));
    const ids = await client.enqueueMany(jobs);
    const runs = new Map();
    const w = new SiloWorker({
      connection: URL, taskGroup: group, concurrency: 8, batchSize: 5,
      handler: async (task, ctx) => {
        runs.set(task.jobId, (runs.get(task.jobId) ?? 0) + 1);
        assert.equal(task.kind, 'run');
        assert.equal(task.attempt, 1);
        assert.equal(task.isLastAttempt, true);
        assert.equal(ctx.workerId, w.workerId);
        assert.ok(ctx.signal instanceof AbortSignal);
        await sleep(task.payload.n % 3);
        return { double: task.payload.n * 2 };
      },
    });
    workers.add(w);
    const calls = spy(w);
    await w.start();
    await waitForStatus(ids, ['Succeeded']);
    await stopWorker(w);
    for (const [i, id] of ids.entries()) {
      assert.equal(runs.get(id), 1);
      assert.deepEqual((await client.getJobResult(id)).result, { double: i * 2 });
    }
    const leases = calls.filter((c) => c.name === 'silo_lease');
    assert.ok(leases.length >= 8, `${leases.length} leases`);
    assert.equal(leases[0].values[2], 5, 'the first lease asks for batchSize');
    for (const l of leases) assert.ok(l.values[2] >= 1 && l.values[2] <= 5);
    const completes = calls.filter((c) => c.name === 'silo_complete_many');
    const completed = completes.reduce((n, c) => n + c.values[0].length, 0);
    assert.equal(completed, 40);
    assert.ok(completes.length < 40, `${completes.length} complete_many calls for 40 jobs`);
    assert.equal(calls.filter((c) => c.name === 'silo_complete').length, 0);
    assert.equal(w.stats.succeeded, 40);
    assert.equal(w.stats.leased, 40);
    assert.equal(w.isRunning, false);
  });

  test('concurrency bounds the handlers running at once', async () => {
    const group = unique('conc');
    const ids = await client.enqueueMany(Array.from({ length: 12 }, () => ({ taskGroup: group })));
    let running = 0;
    let most = 0;
    const w = await startWorker({
      taskGroup: group, concurrency: 3, batchSize: 10,
      handler: async () => {
        running++;
        most = Math.max(most, running);
        await sleep(60);
        running--;
      },
    });
    await waitForStatus(ids, ['Succeeded']);
    await stopWorker(w);
    assert.equal(most, 3);
  });

  test('failures: TaskFailure and thrown errors, retried by the policy', async () => {
    const group = unique('fail');
    const id = await client.enqueue(group, {}, { retryPolicy: { retryCount: 2, initialIntervalMs: 0 } });
    const last = await client.enqueue(group, {}, { id: unique('final') });
    const seen = [];
    const w = await startWorker({
      taskGroup: group,
      handler: async (task) => {
        if (task.jobId === last) throw new Error('no retries left');
        seen.push([task.attempt, task.relativeAttempt, task.isLastAttempt]);
        if (task.attempt === 1) throw new TaskFailure('SMTP_DOWN', { host: 'mx1' });
        if (task.attempt === 2) throw Object.assign(new Error('refused'), { code: 'ECONNREFUSED' });
        return 'third time';
      },
    });
    await waitForStatus([id], ['Succeeded']);
    await waitForStatus([last], ['Failed']);
    await stopWorker(w);
    assert.deepEqual(seen, [[1, 1, false], [2, 2, false], [3, 3, true]]);
    const a = await attempts(id);
    assert.deepEqual(a.map((r) => [r.attempt, r.status, r.error_code]),
      [[1, 'Failed', 'SMTP_DOWN'], [2, 'Failed', 'ECONNREFUSED'], [3, 'Succeeded', null]]);
    assert.deepEqual(a[0].error_data, { host: 'mx1' });
    assert.deepEqual(a[1].error_data, { name: 'Error', message: 'refused' });
    assert.equal(a[2].result, 'third time');
    const r = await client.getJobResult(last);
    assert.equal(r.status, 'Failed');
    assert.equal(r.errorCode, 'Error');
    assert.deepEqual(r.errorData, { name: 'Error', message: 'no retries left' });
    assert.equal(w.stats.failed, 3);
    assert.equal(w.stats.succeeded, 1);
  });

  test("a task carries its job's limits and retry policy, as enqueue takes them", async () => {
    const group = unique('shape');
    const key = unique('key');
    const limits = [{ type: 'concurrency', key, maxConcurrency: 2 }];
    const withBoth = await client.enqueue(group, {}, { limits, retryPolicy: { retryCount: 2, initialIntervalMs: 50 } });
    const bare = await client.enqueue(group, {});
    const seen = new Map();
    const w = await startWorker({
      taskGroup: group,
      handler: async (task) => {
        seen.set(task.jobId, { limits: task.limits, retryPolicy: task.retryPolicy });
      },
    });
    await waitForStatus([withBoth, bare], ['Succeeded']);
    await stopWorker(w);
    const policy = {
      retryCount: 2, initialIntervalMs: 50, maxIntervalMs: 3600000, backoffFactor: 2, randomizeInterval: false,
    };
    assert.deepEqual(seen.get(withBoth), { limits, retryPolicy: policy });
    assert.deepEqual(seen.get(bare), { limits: [], retryPolicy: null });
    // silo.jobs (getJob) shows the same, and the values enqueue a job with the same policy and limits
    const job = await client.getJob(withBoth);
    assert.deepEqual([job.limits, job.retryPolicy], [limits, policy]);
    const copy = await client.enqueue(unique('copy'), {}, { limits: job.limits, retryPolicy: job.retryPolicy });
    const c = await client.getJob(copy);
    assert.deepEqual([c.limits, c.retryPolicy], [limits, policy]);
  });

  test('cancel: the heartbeat aborts the signal, the worker acknowledges', async () => {
    const group = unique('cancel');
    const id = await client.enqueue(group);
    const started = deferred();
    let reason;
    const w = await startWorker({
      taskGroup: group, leaseMs: 1500,
      handler: async (task, { signal }) => {
        started.resolve();
        reason = await abortedWith(signal);
        throw reason;
      },
    });
    await started.promise;
    await client.cancel(id);
    assert.equal(await jobStatus(id), 'Running');
    await waitForStatus([id], ['Cancelled'], 10000);
    await stopWorker(w);
    assert.ok(reason instanceof JobCancelledError);
    assert.deepEqual((await attempts(id)).map((r) => [r.status, r.error_code]), [['Cancelled', null]]);
    assert.equal(w.stats.cancelled, 1);
  });

  test('cancelled before the handler looks at its signal: the signal it then reads is aborted already', async () => {
    const group = unique('cancel-unread');
    const id = await client.enqueue(group);
    const started = deferred();
    const look = deferred();
    let seen;
    const w = await startWorker({
      taskGroup: group, leaseMs: 1500,
      handler: async (task, ctx) => {
        started.resolve();
        await look.promise; // ctx.signal not read until the cancel has been noticed
        const { signal } = ctx;
        seen = { aborted: signal.aborted, reason: signal.reason, same: ctx.signal === signal };
        throw signal.reason;
      },
    });
    // the heartbeats' answers: one that says the job was cancelled
    let cancelledBeats = 0;
    const hq = w.hq.bind(w);
    w.hq = async (...args) => {
      const rows = await hq(...args);
      if (rows.some((r) => r.cancelled === true)) cancelledBeats++;
      return rows;
    };
    await started.promise;
    await client.cancel(id);
    await waitFor(() => cancelledBeats > 0, { message: 'a heartbeat that found the job cancelled' });
    look.resolve();
    await waitForStatus([id], ['Cancelled'], 10000);
    await stopWorker(w);
    assert.equal(seen.aborted, true);
    assert.ok(seen.reason instanceof JobCancelledError, String(seen.reason));
    assert.equal(seen.same, true, 'the same signal each time');
    assert.equal(w.stats.cancelled, 1);
  });

  test('heartbeats keep a job longer than its lease alive', async () => {
    const group = unique('long');
    const id = await client.enqueue(group, {}, { retryPolicy: { retryCount: 3, initialIntervalMs: 0 } });
    const w = await startWorker({ taskGroup: group, leaseMs: 1500, handler: async () => { await sleep(3500); } });
    await waitForStatus([id], ['Succeeded'], 15000);
    await stopWorker(w);
    assert.deepEqual((await attempts(id)).map((r) => r.status), ['Succeeded']);
  });

  test('tenants: a filtered worker leases only its tenants', async () => {
    const group = unique('tenants');
    const mine = await client.enqueue(group, {}, { tenant: 'acme' });
    const theirs = await client.enqueue(group, {}, { tenant: 'globex', priority: 0 });
    const w = await startWorker({ taskGroup: group, tenants: ['acme'], pollIntervalMs: 50, handler: async () => {} });
    await waitForStatus([mine], ['Succeeded'], 15000, 'acme');
    await sleep(300);
    assert.equal(await jobStatus(theirs, 'globex'), 'Waiting');
    await stopWorker(w);
  });
});

describe('stop', () => {
  test('a handler that finishes within the grace period completes', async () => {
    const group = unique('grace');
    const id = await client.enqueue(group);
    const started = deferred();
    const w = await startWorker({
      taskGroup: group,
      handler: async () => {
        started.resolve();
        await sleep(400);
        return 'finished';
      },
    });
    await started.promise;
    await stopWorker(w, { graceMs: 5000 });
    assert.equal(await jobStatus(id), 'Succeeded');
    // no more leasing once stopped
    const later = await client.enqueue(group);
    await sleep(300);
    assert.equal(await jobStatus(later), 'Waiting');
    await client.cancel(later);
  });

  test('past the grace period: signal aborted, task released, no attempt used', async () => {
    const group = unique('release');
    const id = await client.enqueue(group);
    const started = deferred();
    let reason;
    const w = await startWorker({
      taskGroup: group,
      handler: async (task, { signal }) => {
        started.resolve();
        reason = await abortedWith(signal);
      },
    });
    await started.promise;
    const t0 = Date.now();
    await stopWorker(w, { graceMs: 300 });
    assert.ok(Date.now() - t0 < 10000);
    assert.ok(reason instanceof WorkerStoppingError);
    assert.equal(w.stats.released, 1);
    const job = await client.getJob(id);
    assert.equal(job.status, 'Waiting');
    assert.equal(job.currentAttempt, 1);
    assert.equal((await attempts(id)).length, 0);
    // another worker runs it, as attempt 1
    const w2 = await startWorker({ taskGroup: group, handler: async (task) => task.attempt });
    await waitForStatus([id], ['Succeeded']);
    await stopWorker(w2);
    assert.equal((await client.getJobResult(id)).result, 1);
  });
});

describe('stop, bounded', () => {
  test('a handler that ignores its signal: stop() ends within grace + stopTimeoutMs, its task is not released', async () => {
    const group = unique('stuck');
    const stuckId = await client.enqueue(group, {}, { priority: 0 });
    const quickId = await client.enqueue(group, {}, { priority: 1 });
    const started = deferred();
    const quickDone = deferred();
    const never = deferred();
    let reason;
    const w = await startWorker({
      taskGroup: group, concurrency: 2, leaseMs: 3000, stopTimeoutMs: 1500,
      handler: async (task, { signal }) => {
        if (task.jobId === quickId) {
          quickDone.resolve();
          return 'quick';
        }
        void abortedWith(signal).then((r) => { reason = r; });
        started.resolve();
        await never.promise; // ignores its signal
        return 'late';
      },
    });
    // the quick job's completion never comes back (a server that does not answer)
    const q = w.q.bind(w);
    w.q = (text, values, name, prepared) => (name === 'silo_complete_many' || name === 'silo_complete'
      ? new Promise(() => {}) : q(text, values, name, prepared));
    await started.promise;
    await quickDone.promise;
    const t0 = Date.now();
    await stopWorker(w, { graceMs: 300 });
    const took = Date.now() - t0;
    assert.ok(took >= 290, `stop() took ${took} ms, less than the grace period`);
    assert.ok(took < 300 + 1500 + 700, `stop() took ${took} ms`);
    assert.ok(reason instanceof WorkerStoppingError);
    // not released: another worker cannot start the attempt while the handler runs
    assert.equal(w.stats.released, 0);
    assert.equal(await jobStatus(stuckId), 'Running');
    assert.ok(w.errors.some((e) => e.ctx.phase === 'stop' && e.ctx.jobId === stuckId), 'the abandoned task was reported');
    // when the handler returns at last, nothing is reported for it
    never.resolve();
    await waitFor(() => w.stats.lost >= 1, { message: 'the late handler counted as lost' });
    assert.equal(w.stats.succeeded, 0);
    assert.equal(w.stats.running, 0);
  });

  test('stop() during start() leaves no connection open', async () => {
    const app = unique('app');
    const w = new SiloWorker({ connection: urlAs('postgres', app), taskGroup: unique('x'), handler: () => undefined });
    const starting = w.start();
    const stopping = w.stop();
    await Promise.allSettled([starting]);
    await stopping;
    await waitFor(async () => await value('SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1',
      [app]) === 0, { message: 'no connection of the worker left' });
    assert.equal(w.isRunning, false);
  });

  test('heartbeatIntervalMs must be below half of leaseMs', () => {
    const base = { taskGroup: 'x', handler: () => undefined, leaseMs: 1000 };
    assert.throws(() => new SiloWorker({ ...base, heartbeatIntervalMs: 500 }), /heartbeatIntervalMs.*below half of leaseMs/);
    assert.throws(() => new SiloWorker({ ...base, heartbeatIntervalMs: 900 }), RangeError);
    assert.ok(new SiloWorker({ ...base, heartbeatIntervalMs: 499 }));
  });
});

describe('leases that run out', () => {
  test('no heartbeat gets through: the signal fires with LeaseLostError once the lease has run out', async () => {
    const group = unique('lapse');
    const app = unique('app');
    const id = await client.enqueue(group);
    const started = deferred();
    const aborted = deferred();
    const w = await startWorker({
      connection: urlAs('postgres', app), taskGroup: group, leaseMs: 1000, heartbeatIntervalMs: 300,
      reconnectDelayMs: { initial: 50, max: 200 },
      handler: async (task, { signal }) => {
        started.resolve();
        const reason = await abortedWith(signal);
        // how long the server still gives the lease (none: already swept)
        const left = await value('SELECT (extract(epoch FROM expires_at - silo.now()) * 1000)::int FROM silo.leases'
          + ' WHERE task_id = $1', [task.id]);
        aborted.resolve({ reason, left, at: Date.now() });
        return 'too late';
      },
    });
    await started.promise;
    // every connection made from now on fails (the heartbeats' included),
    // and the heartbeating connection there is now is cut
    w.config = { host: '/nonexistent-silo-socket-dir', user: 'postgres', database: 'postgres' };
    const cutAt = Date.now();
    await sql('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [app]);
    const { reason, left, at } = await aborted.promise;
    assert.ok(reason instanceof LeaseLostError, `reason: ${reason}`);
    // not long before the server's lease ran out (our clock counts from when the heartbeat was sent)
    assert.ok(left === undefined || left <= 300, `the server still held the lease for ${left} ms`);
    assert.ok(at - cutAt < 1000 + 1000, `aborted ${at - cutAt} ms after the cut`);
    await waitFor(() => w.stats.lost === 1, { message: 'the task counted as lost' });
    assert.equal(w.stats.succeeded, 0);
    assert.ok(w.errors.some((e) => e.ctx.phase === 'heartbeat' && e.ctx.jobId === id));
    await stopWorker(w, { graceMs: 0 });
    assert.notEqual(await value('SELECT result FROM silo.attempts WHERE job_id = $1 AND attempt = 1', [id]), 'too late');
  });
});

describe('what a handler throws or returns cannot crash the worker', () => {
  test('unserialisable failure data, a non-string error code, a cyclic result', async () => {
    const group = unique('odd');
    const ids = await client.enqueueMany([
      { taskGroup: group, payload: 'bigint' }, { taskGroup: group, payload: 'code' },
      { taskGroup: group, payload: 'cycle' }, { taskGroup: group, payload: 'nul' },
    ]);
    const unhandled = [];
    const onUnhandled = (err) => unhandled.push(err);
    process.on('unhandledRejection', onUnhandled);
    try {
      const w = await startWorker({
        taskGroup: group,
        handler: async (task) => {
          const cyclic = {};
          cyclic.self = cyclic;
          if (task.payload === 'bigint') throw new TaskFailure('BIG', { n: 10n });
          if (task.payload === 'code') throw new TaskFailure(42, cyclic);
          if (task.payload === 'nul') return { text: 'a\u0000b' }; // jsonb refuses \u0000
          return cyclic;
        },
      });
      await waitForStatus(ids, ['Failed']);
      await stopWorker(w);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
    assert.deepEqual(unhandled, []);
    const byPayload = {};
    for (const [i, p] of ['bigint', 'code', 'cycle', 'nul'].entries()) byPayload[p] = await client.getJobResult(ids[i]);
    assert.equal(byPayload.bigint.errorCode, 'BIG');
    assert.match(byPayload.bigint.errorData.message, /not JSON/);
    assert.equal(byPayload.code.errorCode, 'ERROR');
    assert.equal(byPayload.cycle.errorCode, 'RESULT_NOT_JSON');
    assert.equal(byPayload.nul.errorCode, 'ERROR');
    assert.match(byPayload.nul.errorData.message, /refused the complete report/);
  });
});

describe('refresh tasks of floating limits', () => {
  test('refreshHandler raises the max; waiting jobs run; a throw fails the refresh', async () => {
    const group = unique('float');
    const up = unique('key-up');
    const down = unique('key-down');
    const limit = (key) => [{
      type: 'floatingConcurrency', key, defaultMaxConcurrency: 1, refreshIntervalMs: 200, metadata: { api: key },
    }];
    const ids = await client.enqueueMany(Array.from({ length: 3 }, () => ({ taskGroup: group, limits: limit(up) })));
    const stuck = await client.enqueueMany(Array.from({ length: 2 }, () => ({ taskGroup: group, limits: limit(down) })));
    const refreshed = deferred();
    const refreshes = [];
    const release = deferred();
    let running = 0;
    let most = 0;
    const w = await startWorker({
      taskGroup: group, concurrency: 6,
      handler: async (task) => {
        if (stuck.includes(task.jobId)) {
          await release.promise;
          return;
        }
        running++;
        most = Math.max(most, running);
        await refreshed.promise;
        await sleep(300);
        running--;
      },
      refreshHandler: async (task, ctx) => {
        refreshes.push(task);
        assert.equal(task.kind, 'refresh');
        assert.equal('limits' in task || 'retryPolicy' in task, false);
        assert.ok(ctx.signal instanceof AbortSignal);
        if (task.queueKey === down) throw new Error('quota API down');
        refreshed.resolve();
        return 3;
      },
    });
    await waitForStatus(ids, ['Succeeded'], 15000);
    assert.deepEqual(w.errors.map((e) => `${e.ctx.phase}: ${e.error.message}`), []);
    const t = refreshes.find((r) => r.queueKey === up);
    assert.equal(t.currentMaxConcurrency, 1);
    assert.deepEqual(t.metadata, { api: up });
    assert.equal(t.taskGroup, group);
    assert.equal(t.tenant, '-');
    await waitFor(async () => await value("SELECT current_max FROM silo.floating_limits"
      + " WHERE tenant = '-' AND key = $1", [up]) === 3, { message: 'current_max 3' });
    assert.ok(most >= 2, `${most} jobs of the key at once after the refresh`);
    await waitFor(() => value("SELECT retry_count > 0 AND last_error = 'quota API down'"
      + " FROM silo.floating_limits WHERE tenant = '-' AND key = $1", [down]), { message: 'a failed refresh' });
    assert.equal(await value("SELECT current_max FROM silo.floating_limits WHERE tenant = '-' AND key = $1", [down]), 1);
    release.resolve();
    await waitForStatus(stuck, ['Succeeded'], 15000);
    await stopWorker(w);
    assert.ok(w.stats.refreshed >= 1);
    assert.ok(w.stats.refreshFailed >= 1);
  });

  test('without a refreshHandler a refresh keeps the current max', async () => {
    const group = unique('float');
    const key = unique('key');
    const release = deferred();
    const ids = await client.enqueueMany([{
      taskGroup: group,
      limits: [{ type: 'floatingConcurrency', key, defaultMaxConcurrency: 2, refreshIntervalMs: 200 }],
    }]);
    const w = await startWorker({ taskGroup: group, handler: () => release.promise });
    await waitFor(() => w.stats.refreshed >= 1, { message: 'a refresh answered' });
    assert.equal(await value("SELECT current_max FROM silo.floating_limits WHERE tenant = '-' AND key = $1", [key]), 2);
    release.resolve();
    await waitForStatus(ids, ['Succeeded']);
    await stopWorker(w);
  });
});

describe('connections', () => {
  test('reconnects after pg_terminate_backend; in-flight work completes, new work runs', async () => {
    const group = unique('reconnect');
    const app = unique('app');
    const first = await client.enqueue(group);
    const started = deferred();
    const finish = deferred();
    const runs = new Map();
    const w = await startWorker({
      connection: urlAs('postgres', app), taskGroup: group, leaseMs: 10000, pollIntervalMs: 60_000,
      reconnectDelayMs: { initial: 50, max: 500 },
      handler: async (task) => {
        runs.set(task.jobId, (runs.get(task.jobId) ?? 0) + 1);
        if (task.jobId === first) {
          started.resolve();
          await finish.promise;
        }
      },
    });
    await started.promise;
    const before = await sql('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [app]);
    assert.ok(before.length >= 2, `${before.length} connections`);
    const killed = await sql('SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity'
      + ' WHERE application_name = $1', [app]);
    assert.equal(killed.filter((r) => r.ok).length, before.length);
    finish.resolve();
    await waitForStatus([first], ['Succeeded'], 10000);
    // the listening connection is back: new jobs are picked up long before the 60 s poll
    await waitFor(async () => (await sql('SELECT 1 FROM pg_stat_activity WHERE application_name = $1'
      + " AND query = 'LISTEN silo_task_ready'", [app])).length > 0, { message: 'LISTEN again' });
    const t0 = Date.now();
    const more = await client.enqueueMany(Array.from({ length: 5 }, () => ({ taskGroup: group })));
    await waitForStatus(more, ['Succeeded'], 20000);
    // a wake-up, not the 60 s poll (nor a lease after a reconnect's backoff) found them
    assert.ok(Date.now() - t0 < 5000, `${Date.now() - t0} ms`);
    await stopWorker(w);
    for (const id of [first, ...more]) assert.equal(runs.get(id), 1);
    assert.ok(w.stats.reconnects >= 1);
    assert.ok(w.errors.length >= 1, 'the lost connection was reported to onError');
    assert.equal(w.stats.lost, 0);
  });

  test('a batch of completions whose connection drops is sent again: no job lost, none run twice', async () => {
    const group = unique('batch-drop');
    const app = unique('app');
    const ids = await client.enqueueMany(Array.from({ length: 6 }, () => ({ taskGroup: group })));
    const gate = deferred();
    const runs = new Map();
    const w = await startWorker({
      connection: urlAs('postgres', app), taskGroup: group, concurrency: 6, batchSize: 6, leaseMs: 20000,
      reconnectDelayMs: { initial: 50, max: 200 },
      handler: async (task) => {
        runs.set(task.jobId, (runs.get(task.jobId) ?? 0) + 1);
        await gate.promise;
        return task.jobId;
      },
    });
    const calls = spy(w);
    await waitFor(() => runs.size === 6, { message: 'six handlers running' });
    // hold the six lease rows: the completion waits for them, and its connection is cut meanwhile
    const holder = await admin.connect();
    try {
      await holder.query('BEGIN');
      const held = await holder.query('SELECT 1 FROM silo.task_lease WHERE job_id = ANY($1) FOR UPDATE', [ids]);
      assert.equal(held.rowCount, 6);
      gate.resolve();
      const pid = await waitFor(() => value('SELECT pid FROM pg_stat_activity WHERE application_name = $1'
        + " AND wait_event_type = 'Lock' AND query LIKE '%complete_many%'", [app]),
      { message: 'silo.complete_many waiting for the held leases' });
      assert.equal(await value('SELECT pg_terminate_backend($1)', [pid]), true);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    await waitForStatus(ids, ['Succeeded'], 15000);
    await stopWorker(w);
    const batches = calls.filter((c) => c.name === 'silo_complete_many').map((c) => [...c.values[0]].sort());
    assert.ok(batches.length >= 2, `${batches.length} complete_many calls`);
    assert.equal(batches[0].length, 6, 'the six successes went in one batch');
    assert.deepEqual(batches[1], batches[0], 'the same batch, sent again');
    assert.equal(calls.filter((c) => c.name === 'silo_complete').length, 0);
    for (const id of ids) {
      assert.equal(runs.get(id), 1);
      assert.equal((await client.getJobResult(id)).result, id);
    }
    assert.equal(w.stats.succeeded, 6);
    assert.equal(w.stats.lost, 0);
  });

  test('no job runs twice: two workers, many jobs', async () => {
    const group = unique('once');
    const ids = await client.enqueueMany(Array.from({ length: 300 }, (_, n) => ({ taskGroup: group, payload: n })));
    const runs = new Map();
    const handler = async (task) => {
      runs.set(task.jobId, (runs.get(task.jobId) ?? 0) + 1);
      await sleep(task.payload % 4);
    };
    const a = await startWorker({ taskGroup: group, concurrency: 8, batchSize: 4, handler });
    const b = await startWorker({ taskGroup: group, concurrency: 8, batchSize: 4, handler });
    await waitForStatus(ids, ['Succeeded'], 20000);
    await Promise.all([stopWorker(a), stopWorker(b)]);
    assert.equal(runs.size, 300);
    for (const n of runs.values()) assert.equal(n, 1);
    assert.equal(a.stats.succeeded + b.stats.succeeded, 300);
    assert.ok(a.stats.succeeded > 0 && b.stats.succeeded > 0);
  });

  test('a job back while its old handler still runs waits for it (never twice at once)', async () => {
    const group = unique('guard');
    const id = await client.enqueue(group);
    const events = [];
    const firstStarted = deferred();
    const finishFirst = deferred();
    let firstReason;
    const w = await startWorker({
      taskGroup: group, leaseMs: 1500,
      handler: async (task, { signal }) => {
        const n = events.filter((e) => e.startsWith('start')).length + 1;
        events.push(`start ${n}`);
        if (n === 1) {
          firstStarted.resolve();
          void abortedWith(signal).then((r) => { firstReason = r; });
          await finishFirst.promise;     // ignores the signal for a while
        }
        events.push(`end ${n}`);
        return n;
      },
    });
    await firstStarted.promise;
    // hand the task back behind the worker's back: the job is due again,
    // and the same worker leases it (a new task) while handler 1 runs
    const released = await sql("SELECT silo.release(task_id, worker_id) FROM silo.leases WHERE tenant = '-' AND job_id = $1",
      [id]);
    assert.equal(released.length, 1);
    await waitFor(() => value("SELECT count(*)::int FROM silo.leases WHERE job_id = $1", [id]),
      { message: 'the job leased again' });
    await waitFor(() => firstReason, { message: "the old lease's loss noticed" });
    assert.ok(firstReason instanceof LeaseLostError);
    await sleep(200);
    assert.deepEqual(events, ['start 1']);
    finishFirst.resolve();
    await waitForStatus([id], ['Succeeded']);
    await stopWorker(w);
    assert.deepEqual(events, ['start 1', 'end 1', 'start 2', 'end 2']);
    assert.equal((await client.getJobResult(id)).result, 2);
    assert.equal(w.stats.lost, 1);
  });
});

describe('start', () => {
  test('the first connection failing rejects start() with ConnectionError', async () => {
    const w = new SiloWorker({
      connection: { host: '/nonexistent-silo-socket-dir', user: 'postgres', database: 'postgres' },
      taskGroup: 'x', handler: () => undefined,
    });
    await assert.rejects(w.start(), (e) => e instanceof ConnectionError);
    await w.stop();
    await assert.rejects(w.start(), /cannot start again/);
  });

  test('listen: false polls', async () => {
    const group = unique('poll');
    const id = await client.enqueue(group);
    const w = await startWorker({ taskGroup: group, listen: false, pollIntervalMs: 50, handler: () => 'polled' });
    await waitForStatus([id], ['Succeeded']);
    await stopWorker(w);
    assert.equal((await client.getJobResult(id)).result, 'polled');
  });
});

describe('wake-ups', () => {
  test('LISTEN: a job is picked up well under the poll interval', async (t) => {
    const group = unique('wake');
    let started = null;
    const w = await startWorker({ taskGroup: group, pollIntervalMs: 60_000, handler: async () => { started(Date.now()); } });
    await sleep(300); // the first lease found nothing: the worker sleeps until a wake-up or 60 s
    const latencies = [];
    for (let i = 0; i < 5; i++) {
      const ran = new Promise((resolve) => { started = resolve; });
      const t0 = Date.now();
      await client.enqueue(group);
      latencies.push((await ran) - t0);
      await sleep(50);
    }
    await stopWorker(w);
    latencies.sort((x, y) => x - y);
    t.diagnostic(`enqueue to handler start (ms): ${latencies.join(', ')}`);
    assert.ok(latencies[4] < 5000, `slowest ${latencies[4]} ms`);
    assert.ok(latencies[2] < 1000, `median ${latencies[2]} ms`);
  });
});
