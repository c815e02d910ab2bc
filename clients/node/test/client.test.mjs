// SiloClient against a real silo: every call, its options, and the typed
// errors of each SQLSTATE family.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';

import {
  AlreadyCancelledError, AlreadyTerminalError, ConflictError, ConnectionError, DuplicateJobError,
  FeatureNotSupportedError, InconsistencyError, QueryCanceledError, UndefinedFunctionError, InvalidArgumentError, LeaseNotFoundError, LeaseOwnerMismatchError,
  NotExpeditableError, NotFoundError, NotOwnerError, NotReimportableError, NotRestartableError, NotTerminalError,
  PermissionDeniedError, PrerequisiteError, ShardUnavailableError, SiloClient, SiloError,
  TransactionStateError, WaitTimeoutError, WrongTaskKindError, toSiloError,
} from '../dist/index.js';
import { URL, admin, jobStatus, sleep, sql, unique, urlAs, value, waitFor } from './helpers.mjs';

let client;

before(() => {
  client = new SiloClient({ connectionString: URL, max: 6 });
});

after(async () => {
  await client.close();
  await admin.end();
});

/** Lease the job's task as worker w (from SQL) and return the task id. */
async function leaseOne(group, worker = 'w') {
  return value('SELECT task_id FROM silo.lease($1, $2, 1, 60000)', [worker, group]);
}

describe('enqueue', () => {
  test('returns the id and stores every option', async () => {
    const group = unique('enq');
    const startAt = new Date(Date.now() + 3_600_000);
    const id = await client.enqueue(group, { to: 'ada@example.com' }, {
      id: unique('job'),
      tenant: 'acme',
      priority: 7,
      startAt,
      retryPolicy: { retryCount: 3, initialIntervalMs: 2000 },
      limits: [{ type: 'concurrency', key: 'user:1', maxConcurrency: 2 }],
      metadata: { customer: 'globex' },
    });
    const job = await client.getJob(id, { tenant: 'acme' });
    assert.equal(job.id, id);
    assert.equal(job.tenant, 'acme');
    assert.equal(job.taskGroup, group);
    assert.equal(job.status, 'Scheduled');
    assert.equal(job.priority, 7);
    assert.deepEqual(job.payload, { to: 'ada@example.com' });
    assert.deepEqual(job.metadata, { customer: 'globex' });
    assert.equal(job.nextAttemptAt.getTime(), startAt.getTime());
    assert.ok(job.enqueuedAt instanceof Date);
    // the retry policy and the limit, seen through silo's public API: run
    // the job now, fail its first attempt, and look at what follows
    await client.expedite(id, { tenant: 'acme' });
    const leased = await sql('SELECT task_id, is_last_attempt FROM silo.lease($1, $2, 1, 60000)', ['w', group]);
    assert.equal(leased.length, 1);
    assert.equal(leased[0].is_last_attempt, false, 'retryCount 3: the first attempt is not the last');
    const queue = await sql('SELECT kind, holders FROM silo.queues WHERE tenant = $1 AND queue = $2', ['acme', 'user:1']);
    assert.deepEqual(queue.map((r) => [r.kind, Number(r.holders)]), [['concurrency', 1]]);
    await sql("SELECT silo.fail($1, 'w', 'E')", [leased[0].task_id]);
    const retry = await sql('SELECT status, extract(epoch FROM next_attempt_at - silo.now()) * 1000 AS wait_ms'
      + ' FROM silo.jobs WHERE tenant = $1 AND id = $2', ['acme', id]);
    assert.equal(retry[0].status, 'Retrying');
    const wait = Number(retry[0].wait_ms);
    assert.ok(wait > 1000 && wait <= 2000, `retry in ${wait} ms, initialIntervalMs 2000`);
    await client.cancel(id, { tenant: 'acme' });
  });

  test('startAt as an ISO 8601 string', async () => {
    const group = unique('enq');
    const at = new Date(Date.now() + 7_200_000);
    const id = await client.enqueue(group, {}, { startAt: at.toISOString() });
    assert.equal((await client.getJob(id)).nextAttemptAt.getTime(), at.getTime());
    await assert.rejects(client.enqueue(group, {}, { startAt: 12 }), InvalidArgumentError);
  });

  test('defaults: tenant "-", payload {}, a generated id, due now', async () => {
    const group = unique('enq');
    const id = await client.enqueue(group);
    assert.match(id, /^[0-9a-f-]{36}$/);
    const job = await client.getJob(id);
    assert.equal(job.tenant, '-');
    assert.deepEqual(job.payload, {});
    assert.equal(job.status, 'Waiting');
    assert.equal(job.priority, 50);
  });

  test('payloads are any JSON value, strings and null included', async () => {
    const group = unique('enq');
    for (const payload of ['text', 42, null, [1, { a: 'b' }], { nested: { deep: [true] } }]) {
      const id = await client.enqueue(group, payload);
      assert.deepEqual((await client.getJob(id)).payload, payload);
    }
  });

  test('onConflict: error raises DuplicateJobError, ignore returns the id', async () => {
    const group = unique('enq');
    const id = unique('dup');
    await client.enqueue(group, {}, { id });
    await assert.rejects(client.enqueue(group, {}, { id }), (e) => {
      assert.ok(e instanceof DuplicateJobError);
      assert.ok(e instanceof SiloError);
      assert.equal(e.code, '23505');
      assert.match(e.hint, /on_conflict/);
      return true;
    });
    assert.equal(await client.enqueue(group, { other: 1 }, { id, onConflict: 'ignore' }), id);
  });

  test('bad arguments raise InvalidArgumentError (22023) naming the argument', async () => {
    const group = unique('enq');
    await assert.rejects(client.enqueue(group, {}, { priority: 100 }),
      (e) => e instanceof InvalidArgumentError && e.code === '22023' && /priority/.test(e.message));
    await assert.rejects(client.enqueue(group, {}, { retryPolicy: { retryCount: -1 } }),
      (e) => e instanceof InvalidArgumentError && /retryCount/.test(e.message));
    await assert.rejects(client.enqueue(group, {}, { limits: [{ type: 'concurrency', key: 'k' }] }),
      (e) => e instanceof InvalidArgumentError && /limits\[0\]/.test(e.message));
    await assert.rejects(client.enqueue(group, {}, { tenant: '*' }),
      (e) => e instanceof InvalidArgumentError && /reserved/.test(e.message));
    await assert.rejects(client.enqueue('', {}), (e) => e instanceof InvalidArgumentError);
    await assert.rejects(client.enqueue(group, {}, { startAt: new Date(NaN) }), InvalidArgumentError);
  });

  test('a null required argument raises InvalidArgumentError (22004)', async () => {
    await assert.rejects(client.enqueue(null, {}), (e) => e instanceof InvalidArgumentError && e.code === '22004');
  });
});

describe('enqueueMany', () => {
  test('one round trip, ids in input order, options per job', async () => {
    const group = unique('many');
    const calls = [];
    const pool = new pg.Pool({ connectionString: URL, max: 1 });
    const counting = { query: (cfg) => { calls.push(cfg.text); return pool.query(cfg); } };
    const c = new SiloClient({ db: counting });
    const startAt = new Date(Date.now() + 3_600_000);
    const ids = await c.enqueueMany([
      { taskGroup: group, payload: { n: 1 }, id: unique('m1') },
      { taskGroup: group, payload: { n: 2 }, priority: 0, tenant: 'acme' },
      { taskGroup: group, startAt, metadata: { k: 'v' }, retryPolicy: { retryCount: 1 } },
    ]);
    assert.equal(calls.length, 1);
    assert.equal(ids.length, 3);
    assert.match(ids[0], /^m1-/);
    assert.deepEqual((await client.getJob(ids[0])).payload, { n: 1 });
    const second = await client.getJob(ids[1], { tenant: 'acme' });
    assert.equal(second.priority, 0);
    const third = await client.getJob(ids[2]);
    assert.equal(third.status, 'Scheduled');
    assert.equal(third.nextAttemptAt.getTime(), startAt.getTime());
    assert.deepEqual(third.payload, {});
    assert.deepEqual(await c.enqueueMany([]), []);
    assert.equal(calls.length, 1);
    await pool.end();
  });

  test('all or nothing: an invalid element writes no job and says which', async () => {
    const group = unique('many');
    const id = unique('ok');
    await assert.rejects(client.enqueueMany([
      { taskGroup: group, id },
      { taskGroup: group, priority: 500 },
    ]), (e) => e instanceof InvalidArgumentError && /job 1 of the jobs array/.test(e.where ?? ''));
    assert.equal(await client.getJob(id), null);
  });
});

describe('importJobs', () => {
  test('jobs with their history: states, attempts, results in input order', async () => {
    const group = unique('imp');
    const [done, retry, fresh] = [unique('done'), unique('retry'), unique('fresh')];
    const results = await client.importJobs([
      {
        taskGroup: group, id: done, payload: { n: 1 }, enqueuedAt: '2026-01-01T09:00:00Z',
        attempts: [
          { status: 'Failed', startedAt: new Date('2026-01-01T10:00:00Z'), finishedAt: '2026-01-01T10:01:00Z',
            errorCode: 'E1', errorData: { why: 'flaky' }, workerId: 'old' },
          { status: 'Succeeded', finishedAt: new Date('2026-01-01T10:06:00Z'), result: { sum: 42 } },
        ],
      },
      {
        taskGroup: group, id: retry, retryPolicy: { retryCount: 2 }, startAt: new Date(Date.now() + 3_600_000),
        attempts: [{ status: 'Failed', finishedAt: '2026-01-01T10:01:00Z', errorCode: 'E1' }],
      },
      { taskGroup: group, id: fresh },
    ]);
    assert.deepEqual(results.map((r) => [r.id, r.success, r.status, r.error, r.sqlstate]), [
      [done, true, 'Succeeded', null, null],
      [retry, true, 'Retrying', null, null],
      [fresh, true, 'Waiting', null, null],
    ]);
    const r = await client.getJobResult(done);
    assert.deepEqual(r.result, { sum: 42 });
    assert.equal(r.finishedAt.toISOString(), '2026-01-01T10:06:00.000Z');
    assert.equal((await client.getJob(retry)).currentAttempt, 2);
    assert.equal(await value('SELECT count(*)::int FROM silo.attempts WHERE job_id = $1', [done]), 2);
    assert.deepEqual(await client.importJobs([]), []);
  });

  test('a refused re-import is its result; a running job refuses the call', async () => {
    const group = unique('imp');
    const [done, other] = [unique('done'), unique('other')];
    await client.importJobs([{ taskGroup: group, id: done,
      attempts: [{ status: 'Succeeded', finishedAt: '2026-01-01T10:00:00Z' }] }]);
    const results = await client.importJobs([
      { taskGroup: group, id: done, attempts: [
        { status: 'Failed', finishedAt: '2026-01-01T09:00:00Z', errorCode: 'E' },
        { status: 'Succeeded', finishedAt: '2026-01-01T10:00:00Z' }] },
      { taskGroup: group, id: other },
    ]);
    assert.deepEqual(results.map((x) => [x.success, x.sqlstate, x.error]),
      [[false, 'SL013', 'job already succeeded'], [true, null, null]]);
    await leaseOne(group);
    const third = unique('third');
    await assert.rejects(client.importJobs([{ taskGroup: group, id: third }, { taskGroup: group, id: other }]),
      (e) => e instanceof NotReimportableError && e.code === 'SL013');
    assert.equal(await client.getJob(third), null);
    await assert.rejects(client.importJobs([{ taskGroup: group, id: third, attempts: [{ status: 'Running', finishedAt: '2026-01-01T10:00:00Z' }] }]),
      (e) => e instanceof InvalidArgumentError && /job 0 of the jobs array/.test(e.where ?? ''));
  });
});

describe('job operations', () => {
  test('getJob returns null for a missing job', async () => {
    assert.equal(await client.getJob(unique('missing')), null);
  });

  test('cancel: pending job ends Cancelled; errors SL005, SL006, SL003', async () => {
    const group = unique('ops');
    const id = await client.enqueue(group, {}, { startAt: new Date(Date.now() + 3_600_000) });
    await client.cancel(id);
    assert.equal(await jobStatus(id), 'Cancelled');
    await assert.rejects(client.cancel(id), (e) => e instanceof AlreadyCancelledError && e.code === 'SL005');
    const done = await client.enqueue(group);
    const task = await leaseOne(group);
    await sql("SELECT silo.complete($1, 'w')", [task]);
    await assert.rejects(client.cancel(done), (e) => e instanceof AlreadyTerminalError && e.code === 'SL006');
    await assert.rejects(client.cancel(unique('missing')), (e) => e instanceof NotFoundError && e.code === 'SL003');
  });

  test('restart and expedite, and their refusals (SL007, SL008)', async () => {
    const group = unique('ops');
    const id = await client.enqueue(group, {}, { startAt: new Date(Date.now() + 3_600_000) });
    await assert.rejects(client.restart(id), (e) => e instanceof NotRestartableError && e.code === 'SL007');
    await client.expedite(id);
    assert.equal(await jobStatus(id), 'Waiting');
    await assert.rejects(client.expedite(id), (e) => e instanceof NotExpeditableError && e.code === 'SL008');
    await client.cancel(id);
    await client.restart(id);
    assert.equal(await jobStatus(id), 'Waiting');
  });

  test('deleteJob: true, then false; NotTerminalError while pending', async () => {
    const group = unique('ops');
    const id = await client.enqueue(group);
    await assert.rejects(client.deleteJob(id), (e) => e instanceof NotTerminalError && e.code === 'SL004');
    await client.cancel(id);
    assert.equal(await client.deleteJob(id), true);
    assert.equal(await client.deleteJob(id), false);
    assert.equal(await client.getJob(id), null);
  });

  test('getJobResult: Succeeded with result, Failed with error; NotTerminal, NotFound', async () => {
    const group = unique('res');
    const ok = await client.enqueue(group, {}, { priority: 0 });
    const bad = await client.enqueue(group);
    await assert.rejects(client.getJobResult(ok), (e) => e instanceof NotTerminalError);
    const t1 = await leaseOne(group);
    await sql(`SELECT silo.complete($1, 'w', '{"sent": true}')`, [t1]);
    const t2 = await leaseOne(group);
    await sql(`SELECT silo.fail($1, 'w', 'SMTP_DOWN', '{"host": "mx1"}')`, [t2]);
    const r1 = await client.getJobResult(ok);
    assert.equal(r1.status, 'Succeeded');
    assert.deepEqual(r1.result, { sent: true });
    assert.equal(r1.errorCode, null);
    assert.ok(r1.finishedAt instanceof Date);
    const r2 = await client.getJobResult(bad);
    assert.equal(r2.status, 'Failed');
    assert.equal(r2.errorCode, 'SMTP_DOWN');
    assert.deepEqual(r2.errorData, { host: 'mx1' });
    await assert.rejects(client.getJobResult(unique('missing')), NotFoundError);
  });

  test('withConnection: an enqueue inside your transaction rolls back with it', async () => {
    const group = unique('tx');
    const conn = await admin.connect();
    try {
      await conn.query('BEGIN');
      const id = await client.withConnection(conn).enqueue(group, { in: 'tx' });
      assert.equal((await client.withConnection(conn).getJob(id)).status, 'Waiting');
      await conn.query('ROLLBACK');
      assert.equal(await client.getJob(id), null);
      await conn.query('BEGIN');
      const kept = await client.withConnection(conn).enqueue(group, { in: 'tx' });
      await conn.query('COMMIT');
      assert.equal(await jobStatus(kept), 'Waiting');
    } finally {
      conn.release();
    }
  });
});

describe('awaitResult', () => {
  test('silo.wait_result is installed and used', async () => {
    assert.equal(await client.hasWaitResult(), true);
  });

  test('waits in the server until another session ends the job', async () => {
    const group = unique('await');
    const id = await client.enqueue(group);
    const started = Date.now();
    const waiting = client.awaitResult(id, { timeoutMs: 10_000 });
    // end the job a little later, from another session (a failure here fails the test)
    const ender = sleep(300).then(async () => {
      const t = await leaseOne(group);
      await sql(`SELECT silo.complete($1, 'w', '"done"')`, [t]);
    });
    const [r] = await Promise.all([waiting, ender]);
    assert.equal(r.status, 'Succeeded');
    assert.equal(r.result, 'done');
    const took = Date.now() - started;
    assert.ok(took >= 250 && took < 5000, `took ${took} ms`);
  });

  test('an ended job returns at once; a missing one raises NotFoundError', async () => {
    const group = unique('await');
    const id = await client.enqueue(group);
    await client.cancel(id);
    const r = await client.awaitResult(id);
    assert.equal(r.status, 'Cancelled');
    await assert.rejects(client.awaitResult(unique('missing')), NotFoundError);
  });

  test('timeout: WaitTimeoutError (SL011), the job untouched', async () => {
    const group = unique('await');
    const id = await client.enqueue(group);
    const started = Date.now();
    await assert.rejects(client.awaitResult(id, { timeoutMs: 200 }),
      (e) => e instanceof WaitTimeoutError && e.code === 'SL011');
    assert.ok(Date.now() - started < 3000);
    assert.equal(await jobStatus(id), 'Waiting');
  });

  test('an AbortSignal ends the wait with its reason, and the server stops waiting', async () => {
    const group = unique('await');
    const id = await client.enqueue(group);
    const ac = new AbortController();
    const reason = new Error('stop waiting');
    setTimeout(() => ac.abort(reason), 200);
    const started = Date.now();
    await assert.rejects(client.awaitResult(id, { timeoutMs: 20_000, signal: ac.signal }), (e) => e === reason);
    assert.ok(Date.now() - started < 5000);
    // the call that slept for it is cancelled, and its connection goes back to the pool
    await waitFor(async () => (await value(
      "SELECT count(*)::int FROM pg_stat_activity WHERE query LIKE 'CALL silo.wait_%' AND state = 'active'")) === 0,
    { message: 'no session asleep in silo.wait_any or silo.wait_result' });
  });

  test('no free connection in the pool: the timeout and the signal still end the wait', async () => {
    const group = unique('await');
    const id = await client.enqueue(group);
    const pool = new pg.Pool({ connectionString: URL, max: 1 });
    const c = new SiloClient({ pool });
    try {
      assert.equal(await c.hasWaitResult(), true);
      const held = await pool.connect();
      try {
        let t0 = Date.now();
        await assert.rejects(c.awaitResult(id, { timeoutMs: 300 }), WaitTimeoutError);
        assert.ok(Date.now() - t0 < 3000, `timed out after ${Date.now() - t0} ms`);
        const ac = new AbortController();
        const reason = new Error('no more waiting');
        const waiting = c.awaitResult(id, { timeoutMs: 60_000, signal: ac.signal });
        t0 = Date.now();
        ac.abort(reason);
        await assert.rejects(waiting, (e) => e === reason);
        assert.ok(Date.now() - t0 < 3000, `aborted after ${Date.now() - t0} ms`);
      } finally {
        held.release();
      }
      // the pool's one connection was handed back each time: a wait works again
      await client.cancel(id);
      assert.equal((await c.awaitResult(id, { timeoutMs: 5000 })).status, 'Cancelled');
    } finally {
      await pool.end();
    }
  });

  test('hasWaitResult asks again a while after a no', async () => {
    const c = new SiloClient(URL);
    try {
      let asked = 0;
      const query = c.query.bind(c);
      c.query = (...args) => { asked++; return asked === 1 ? Promise.resolve([{ ok: false }]) : query(...args); };
      assert.equal(await c.hasWaitResult(), false);
      assert.equal(await c.hasWaitResult(), false);
      assert.equal(asked, 1, 'a no is kept for a while');
      c.waitResultAnswer.falseUntil = Date.now() - 1; // as if the while had passed
      assert.equal(await c.hasWaitResult(), true);
      assert.equal(asked, 2);
      assert.equal(await c.hasWaitResult(), true);
      assert.equal(asked, 2, 'a yes is kept');
    } finally {
      await c.close();
    }
  });

  test('inside a transaction block: TransactionStateError (25001)', async () => {
    const conn = await admin.connect();
    try {
      await conn.query('BEGIN');
      await assert.rejects(client.withConnection(conn).awaitResult(unique('x'), { timeoutMs: 100 }),
        (e) => e instanceof TransactionStateError && e.code === '25001');
      await conn.query('ROLLBACK');
    } finally {
      conn.release();
    }
  });

  test('without silo.wait_any it waits in silo.wait_result, a connection per await', async () => {
    const group = unique('await');
    const c = new SiloClient(URL);
    c.hasWaitAny = async () => false;
    try {
      const ids = await c.enqueueMany([{ taskGroup: group }, { taskGroup: group }]);
      const waiting = ids.map((id) => c.awaitResult(id, { timeoutMs: 10_000 }));
      await waitFor(async () => (await value(
        "SELECT count(*)::int FROM pg_stat_activity WHERE query LIKE 'CALL silo.wait_result%' AND state = 'active'"
        + " AND wait_event = 'Extension'")) === 2, { message: 'two sessions asleep in silo.wait_result' });
      for (const id of ids) await c.cancel(id);
      assert.deepEqual((await Promise.all(waiting)).map((r) => r.status), ['Cancelled', 'Cancelled']);
    } finally {
      await c.close();
    }
  });

  test('without silo.wait_result it polls job_result', async () => {
    const group = unique('poll');
    const c = new SiloClient(URL);
    c.hasWaitResult = async () => false;
    c.hasWaitAny = async () => false;
    try {
      const id = await c.enqueue(group);
      const ender = sleep(200).then(async () => {
        const t = await leaseOne(group);
        await sql(`SELECT silo.fail($1, 'w', 'E1')`, [t]);
      });
      const [r] = await Promise.all([c.awaitResult(id, { timeoutMs: 5000, maxPollIntervalMs: 100 }), ender]);
      assert.equal(r.status, 'Failed');
      assert.equal(r.errorCode, 'E1');
      const pending = await c.enqueue(group, {}, { startAt: new Date(Date.now() + 3_600_000) });
      await assert.rejects(c.awaitResult(pending, { timeoutMs: 150 }), WaitTimeoutError);
    } finally {
      await c.close();
    }
  });
});

describe('awaitResult gathered on silo.wait_any', () => {
  /* the sessions asleep in silo.wait_any of the clients made with application_name app */
  const asleep = (app) => value("SELECT count(*)::int FROM pg_stat_activity WHERE query LIKE 'CALL silo.wait_any%'"
    + " AND state = 'active' AND wait_event = 'Extension' AND application_name = $1", [app]);

  test('silo.wait_any is installed', async () => {
    assert.equal(await client.hasWaitAny(), true);
  });

  test('300 awaits on a pool of 3 sleep on one connection and each gets its own outcome', async () => {
    const group = unique('many');
    const app = unique('many');
    const pool = new pg.Pool({ connectionString: URL, max: 3, application_name: app });
    const c = new SiloClient({ pool });
    try {
      const ids = await c.enqueueMany(Array.from({ length: 300 }, (_, i) => ({ taskGroup: group, payload: i })));
      const waiting = ids.map((id) => c.awaitResult(id, { timeoutMs: 30_000 }));
      await waitFor(async () => (await asleep(app)) === 1, { message: 'one session asleep in silo.wait_any' });
      assert.equal(await value(
        "SELECT count(*)::int FROM pg_stat_activity WHERE query LIKE 'CALL silo.wait_%'"
        + ' AND application_name = $1', [app]), 1, 'one session calls silo.wait_any, none silo.wait_result');
      // end them in three ways, a transaction per 10 jobs
      const tasks = await sql('SELECT task_id, job_id FROM silo.lease($1, $2, 300)', ['w', group]);
      const byJob = new Map(tasks.map((t) => [t.job_id, t.task_id]));
      for (let i = 0; i < 300; i += 10) {
        const stmts = ids.slice(i, i + 10).map((id, k) => {
          const j = i + k;
          if (j % 3 === 0) return `SELECT silo.complete('${byJob.get(id)}', 'w', '${j}')`;
          if (j % 3 === 1) return `SELECT silo.fail('${byJob.get(id)}', 'w', 'E${j}')`;
          // a cancel flags a running job; the worker's ack ends it
          return `SELECT silo.cancel('${id}'); PERFORM silo.ack_cancel('${byJob.get(id)}', 'w')`;
        });
        await sql(`DO $$ BEGIN ${stmts.map((q) => `PERFORM ${q.slice(7)};`).join(' ')} END $$`);
      }
      const got = await Promise.all(waiting);
      const wrong = got.map((r, j) => {
        const want = j % 3 === 0 ? ['Succeeded', j, null] : j % 3 === 1 ? ['Failed', null, `E${j}`] : ['Cancelled', null];
        const have = j % 3 === 2 ? [r.status, r.result] : [r.status, r.result, r.errorCode];
        return JSON.stringify(have) === JSON.stringify(want) ? null : `${ids[j]}: ${JSON.stringify(have)}`;
      }).filter((x) => x);
      assert.deepEqual(wrong, []);
      // nothing left to wait for: the connection went back to the pool
      await waitFor(async () => (await asleep(app)) === 0, { message: 'the wait_any session ended' });
    } finally {
      await c.close();
    }
  });

  test('an await added while the call sleeps is heard at once; the others sleep on', async () => {
    const group = unique('late');
    const app = unique('app');
    const c = new SiloClient({ connectionString: URL, application_name: app });
    try {
      const [a, b] = await c.enqueueMany([{ taskGroup: group }, { taskGroup: group }]);
      const waitA = c.awaitResult(a, { timeoutMs: 30_000 });
      await waitFor(async () => (await asleep(app)) === 1, { message: 'asleep on a' });
      const waitB = c.awaitResult(b, { timeoutMs: 30_000 });
      await sleep(100); // b's await interrupts the sleeping call and joins the next one
      const t0 = Date.now();
      await c.cancel(b);
      assert.equal((await waitB).status, 'Cancelled');
      assert.ok(Date.now() - t0 < 3000, `b's end was heard after ${Date.now() - t0} ms`);
      let aDone = false;
      waitA.then(() => { aDone = true; }, () => { aDone = true; });
      await waitFor(async () => (await asleep(app)) === 1, { message: 'still asleep on a' });
      assert.equal(aDone, false);
      await c.cancel(a);
      assert.equal((await waitA).status, 'Cancelled');
    } finally {
      await c.close();
    }
  });

  test('each await has its own timeout and signal; a missing job raises NotFoundError', async () => {
    const group = unique('own');
    const app = unique('app');
    const c = new SiloClient({ connectionString: URL, application_name: app });
    try {
      const [a, b, d] = await c.enqueueMany([{ taskGroup: group }, { taskGroup: group }, { taskGroup: group }]);
      const ac = new AbortController();
      const reason = new Error('enough');
      const waitA = c.awaitResult(a, { timeoutMs: 300 });
      const waitB = c.awaitResult(b, { timeoutMs: 30_000, signal: ac.signal });
      const waitD = c.awaitResult(d, { timeoutMs: 30_000 });
      await assert.rejects(waitA, (e) => e instanceof WaitTimeoutError && e.code === 'SL011');
      ac.abort(reason);
      await assert.rejects(waitB, (e) => e === reason);
      await assert.rejects(c.awaitResult(unique('missing'), { timeoutMs: 5000 }), NotFoundError);
      await c.cancel(d);
      assert.equal((await waitD).status, 'Cancelled');
      assert.equal(await jobStatus(a), 'Waiting', 'a timed-out await leaves its job alone');
    } finally {
      await c.close();
    }
  });

  test('a pool of one: the sleeping call has a connection of its own, woken awaits fetch their results', async () => {
    const group = unique('one');
    const app = unique('one');
    const pool = new pg.Pool({ connectionString: URL, max: 1, application_name: app });
    const c = new SiloClient({ pool });
    try {
      const ids = await c.enqueueMany(Array.from({ length: 20 }, () => ({ taskGroup: group })));
      const waiting = ids.map((id) => c.awaitResult(id, { timeoutMs: 20_000 }));
      await waitFor(async () => (await asleep(app)) === 1, { message: 'one session asleep in silo.wait_any' });
      for (const id of ids) await c.cancel(id);
      assert.deepEqual(new Set((await Promise.all(waiting)).map((r) => r.status)), new Set(['Cancelled']));
    } finally {
      await c.close();
    }
  });

  test('more tenants than the gathering takes (4): the others wait in silo.wait_result', async () => {
    const group = unique('fivet');
    const app = unique('app');
    const c = new SiloClient({ connectionString: URL, application_name: app });
    try {
      const tenants = ['t1', 't2', 't3', 't4', 't5'];
      const ids = [];
      for (const t of tenants) ids.push(await c.enqueue(group, {}, { tenant: t }));
      const waiting = ids.map((id, i) => c.awaitResult(id, { tenant: tenants[i], timeoutMs: 20_000 }));
      await waitFor(async () => (await asleep(app)) === 4 && (await value(
        "SELECT count(*)::int FROM pg_stat_activity WHERE query LIKE 'CALL silo.wait_result%'"
        + " AND wait_event = 'Extension' AND application_name = $1", [app])) === 1, { message: '4 sessions in wait_any, 1 in wait_result' });
      for (let i = 0; i < 5; i++) await c.cancel(ids[i], { tenant: tenants[i] });
      assert.deepEqual((await Promise.all(waiting)).map((r) => r.status), Array(5).fill('Cancelled'));
    } finally {
      await c.close();
    }
  });

  test('tenants: one sleeping call per tenant; a refused tenant fails its awaits only', async () => {
    const group = unique('tenants');
    const app = unique('app');
    const c = new SiloClient({ connectionString: URL, application_name: app });
    try {
      const x = await c.enqueue(group, {}, { tenant: 'tx' });
      const y = await c.enqueue(group, {}, { tenant: 'ty' });
      const wx = c.awaitResult(x, { tenant: 'tx', timeoutMs: 30_000 });
      const wy = c.awaitResult(y, { tenant: 'ty', timeoutMs: 30_000 });
      await waitFor(async () => (await asleep(app)) === 2, { message: 'two sessions asleep, one per tenant' });
      await c.cancel(y, { tenant: 'ty' });
      assert.equal((await wy).status, 'Cancelled');
      await c.cancel(x, { tenant: 'tx' });
      assert.equal((await wx).status, 'Cancelled');
    } finally {
      await c.close();
    }
  });
});

describe('permissions and tenants', () => {
  const role = `node_acme_${process.pid}`;

  before(async () => {
    await sql(`CREATE ROLE ${role} LOGIN IN ROLE silo_producer`);
    await sql('SELECT silo.grant_tenant($1, $2)', [role, 'acme']);
  });

  after(async () => {
    await sql('SELECT silo.revoke_tenant($1, $2)', [role, 'acme']);
    await sql(`DROP ROLE ${role}`);
  });

  test('a role bound to a tenant: PermissionDeniedError (42501) elsewhere', async () => {
    const c = new SiloClient(urlAs(role));
    try {
      const group = unique('perm');
      const id = await c.enqueue(group, {}, { tenant: 'acme' });
      assert.equal((await c.getJob(id, { tenant: 'acme' })).tenant, 'acme');
      await assert.rejects(c.enqueue(group, {}), (e) => e instanceof PermissionDeniedError && e.code === '42501'
        && /may not act in tenant/.test(e.message));
      // delete_job is silo_admin's: PostgreSQL's own 42501
      await assert.rejects(c.deleteJob(id, { tenant: 'acme' }), PermissionDeniedError);
    } finally {
      await c.close();
    }
  });
});

describe('error mapping', () => {
  const cases = [
    ['SL001', LeaseNotFoundError], ['SL002', LeaseOwnerMismatchError], ['SL003', NotFoundError],
    ['SL004', NotTerminalError], ['SL005', AlreadyCancelledError], ['SL006', AlreadyTerminalError],
    ['SL007', NotRestartableError], ['SL008', NotExpeditableError], ['SL009', InconsistencyError],
    ['SL010', WrongTaskKindError], ['SL011', WaitTimeoutError], ['SL013', NotReimportableError],
    ['SL020', NotOwnerError],
    ['SL021', ShardUnavailableError], ['22004', InvalidArgumentError], ['22023', InvalidArgumentError],
    ['23505', DuplicateJobError], ['42501', PermissionDeniedError], ['25000', TransactionStateError],
    ['25001', TransactionStateError], ['25006', TransactionStateError], ['55000', PrerequisiteError],
    ['40P01', ConflictError], ['40001', ConflictError], ['57P01', ConnectionError], ['08006', ConnectionError],
    ['57014', QueryCanceledError], ['0A000', FeatureNotSupportedError], ['42883', UndefinedFunctionError],
  ];

  test('each SQLSTATE family has its class', () => {
    for (const [code, cls] of cases) {
      const e = toSiloError(Object.assign(new Error(`m ${code}`), { code, detail: 'd', hint: 'h' }));
      assert.ok(e instanceof cls, `${code} -> ${e.constructor.name}`);
      assert.ok(e instanceof SiloError);
      assert.equal(e.code, code);
      assert.equal(e.detail, 'd');
      assert.equal(e.hint, 'h');
      assert.equal(e.name, cls.name);
    }
    const other = toSiloError(Object.assign(new Error('x'), { code: 'XX000' }));
    assert.equal(other.constructor, SiloError);
    assert.ok(toSiloError(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })) instanceof ConnectionError);
    assert.ok(toSiloError(new Error('Connection terminated unexpectedly')) instanceof ConnectionError);
    const plain = new TypeError('not a database error');
    assert.equal(toSiloError(plain), plain);
  });

  test('retryable: shard unavailable, conflicts and connections', () => {
    const r = (code) => toSiloError(Object.assign(new Error('m'), { code })).retryable;
    assert.equal(r('SL021'), true);
    assert.equal(r('40P01'), true);
    assert.equal(r('57P01'), true);
    assert.equal(r('SL003'), false);
    assert.equal(r('22023'), false);
  });

  test('NotOwnerError parses the owner from DETAIL', () => {
    const e = toSiloError(Object.assign(new Error('shard 3 of tenant "acme" is not owned by this node'), {
      code: 'SL020',
      detail: '{"shard": 3, "owner_node_id": "b", "owner_conninfo": "host=10.0.0.2 port=5432 dbname=app"}',
    }));
    assert.ok(e instanceof NotOwnerError);
    assert.equal(e.shard, 3);
    assert.equal(e.ownerNodeId, 'b');
    assert.equal(e.ownerConninfo, 'host=10.0.0.2 port=5432 dbname=app');
    assert.equal(e.tenant, 'acme');
    assert.equal(e.retryable, false);
    const none = toSiloError(Object.assign(new Error('shard 5 of tenant "x" is not owned by this node'), {
      code: 'SL020', detail: '{"shard": 5, "owner_node_id": null, "owner_conninfo": null}',
    }));
    assert.equal(none.shard, 5);
    assert.equal(none.ownerConninfo, null);
    assert.equal(none.retryable, true);
  });

  test('a real lease error from the server maps to its class', async () => {
    const group = unique('map');
    await client.enqueue(group);
    const t = await leaseOne(group);
    const err = await admin.query("SELECT silo.complete($1, 'someone-else')", [t]).catch((e) => e);
    assert.ok(toSiloError(err) instanceof LeaseOwnerMismatchError);
    await sql("SELECT silo.complete($1, 'w')", [t]);
    const again = await admin.query("SELECT silo.complete($1, 'w')", [t]).catch((e) => e);
    assert.ok(toSiloError(again) instanceof LeaseNotFoundError);
  });

  test('a stale prepared statement (0A000) is retryable, and its connection is dropped', async () => {
    const table = `node_stale_${process.pid}`;
    await sql(`CREATE TABLE ${table} (a int)`);
    const pool = new pg.Pool({ connectionString: URL, max: 1 });
    try {
      const c = new SiloClient({ pool });
      const pidOf = () => pool.query({ name: 'pid', text: 'SELECT pg_backend_pid() AS pid' }).then((r) => r.rows[0].pid);
      const first = await pidOf();
      const stmt = { name: 'node_stale', text: `SELECT * FROM ${table}` };
      await pool.query(stmt);
      await sql(`ALTER TABLE ${table} ADD COLUMN b text`);
      // through the client's own query path (what every method uses)
      const err = await c.query(stmt.text, [], stmt.name).catch((e) => e);
      assert.ok(err instanceof FeatureNotSupportedError, `${err}`);
      assert.equal(err.code, '0A000');
      assert.equal(err.retryable, true);
      assert.notEqual(await pidOf(), first, 'the connection with the stale statement was dropped');
      assert.deepEqual(await c.query(stmt.text, [], stmt.name), []);
      const other = toSiloError(Object.assign(new Error('cannot prepare a transaction that changed silo\'s due tasks'),
        { code: '0A000' }));
      assert.equal(other.retryable, false);
    } finally {
      await pool.end();
      await sql(`DROP TABLE ${table}`);
    }
  });

  test('a refused connection is a ConnectionError', async () => {
    const c = new SiloClient({ host: '/nonexistent-silo-socket-dir', user: 'postgres', database: 'postgres' });
    await assert.rejects(c.getJob('x'), (e) => e instanceof ConnectionError && e.retryable);
    await c.close();
  });
});
