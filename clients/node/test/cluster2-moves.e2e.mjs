// Shards really moving under the cluster client and worker, on the real
// two-node cluster with etcd (clients/test-cluster.sh's cluster2_start, run
// by test/run.sh after cluster2.e2e.mjs).  n1 owns all 8 shards and n2 is a
// live member that takes no moves (silo.max_moves_in = 0).  While a
// SiloClusterClient given n1 enqueues jobs of 48 tenants (every shard) and a
// SiloClusterWorker given n1 runs them, n2 joins the placement
// (silo.max_moves_in = 1 on both nodes: the shards placement gives n2 move
// there, with their rows) and then leaves it gracefully (silo.draining = on
// on n2: they move back to n1).  The settings are reset at the end.  A job of each moving shard is held running across its move, so
// that its heartbeats and its completion must follow NOT_OWNER to the new
// owner.  In the end every job is on the one node that owns its shard,
// Succeeded with exactly one attempt, and the handler ran it exactly once.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';

import { SiloClusterClient, SiloClusterWorker } from '../dist/index.js';

const N1 = process.env.SILO_TEST_N1_URL;
const N2 = process.env.SILO_TEST_N2_URL;
if (!N1 || !N2) throw new Error('SILO_TEST_N1_URL and SILO_TEST_N2_URL are not set: run clients/node/test/run.sh');

const n1 = new pg.Pool({ connectionString: N1, max: 3 });
const n2 = new pg.Pool({ connectionString: N2, max: 3 });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const one = async (pool, sql, args = []) => (await pool.query(sql, args)).rows[0];

/* a node's settings for the test (reloaded); reset at the end whatever happens */
async function set(pool, settings) {
  for (const [name, value] of Object.entries(settings)) {
    await pool.query(value === null ? `ALTER SYSTEM RESET ${name}` : `ALTER SYSTEM SET ${name} = '${value}'`);
  }
  await pool.query('SELECT pg_reload_conf()');
}

after(async () => {
  await set(n2, { 'silo.draining': null, 'silo.max_moves_in': null }).catch(() => undefined);
  await set(n1, { 'silo.max_moves_in': null }).catch(() => undefined);
  await n1.end();
  await n2.end();
});

/* poll check() every 100 ms until it returns true, for at most ms */
async function until(what, ms, check) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    last = await check();
    if (last === true) return;
    if (Date.now() > deadline) throw new Error(`waited ${ms / 1000} s for ${what} (last: ${JSON.stringify(last)})`);
    await sleep(100);
  }
}

/* shard -> owner on node pool's map; and the shards node serves */
const owners = async (pool) => new Map((await pool.query(
  'SELECT shard_id, owner_node_id FROM silo.cluster_info')).rows.map((r) => [r.shard_id, r.owner_node_id]));
const serving = async (pool) => (await one(pool, 'SELECT serving_shards FROM silo.node_info')).serving_shards ?? [];

test('jobs run exactly once while shards move to n2 and back', { timeout: 150_000 }, async () => {
  const group = `moves-${process.pid}`;
  const tenants = Array.from({ length: 48 }, (_x, i) => `mv-${i}`);
  const shardOf = new Map();
  for (const t of tenants) shardOf.set(t, (await one(n1, 'SELECT silo.shard_for_tenant($1) AS s', [t])).s);
  assert.equal(new Set(shardOf.values()).size, 8, 'the tenants cover every shard');
  assert.deepEqual((await serving(n1)).length, 8, 'n1 serves every shard at the start');
  /* the shards placement gives n2 (rendezvous over n1 and n2, as the coordinator computes it) */
  const placed = (await n1.query(`SELECT s FROM generate_series(0, 7) s WHERE (SELECT m FROM unnest(ARRAY['n1', 'n2']) m
    ORDER BY (hashtextextended(m || ':' || s, 0)::numeric + CASE WHEN hashtextextended(m || ':' || s, 0) < 0
    THEN 18446744073709551616 ELSE 0 END) DESC, m LIMIT 1) = 'n2' ORDER BY s`)).rows.map((r) => r.s);
  assert.ok(placed.length > 0 && placed.length < 8, `placement splits the shards (n2 gets ${placed})`);
  const movers = placed.map((s) => tenants.find((t) => shardOf.get(t) === s));

  const runs = new Map();
  const errors = [];
  const holds = new Map();
  let released = null;
  const worker = new SiloClusterWorker({
    connection: N1,
    taskGroup: group,
    concurrency: 12,
    pollIntervalMs: 50,
    leaseMs: 5000,
    heartbeatIntervalMs: 400,
    mapRefreshMs: 300,
    onError: (e, ctx) => errors.push(`${ctx.phase}: ${e.code ?? ''} ${e.message}`),
    handler: async (t) => {
      const key = `${t.tenant}/${t.jobId}`;
      runs.set(key, (runs.get(key) ?? 0) + 1);
      if (t.payload.hold) {
        /* held running until the test lets its phase's jobs go */
        holds.set(key, t.payload.hold);
        while (released !== t.payload.hold) await sleep(50);
      } else {
        await sleep(100 + (t.payload.i % 5) * 60);
      }
      return { tenant: t.tenant };
    },
  });
  const cc = new SiloClusterClient({ connectionString: N1, retryDelayMs: 50, retryTimeoutMs: 30_000 });
  const jobs = [];
  const enqueue = async (tenant, payload) => {
    jobs.push([tenant, await cc.enqueue(group, payload, { tenant })]);
  };

  await worker.start();
  /* the producer: a job every 40 ms, round robin over the tenants, until told to stop */
  let producing = true;
  const producer = (async () => {
    for (let i = 0; producing; i++) {
      await enqueue(tenants[i % tenants.length], { i });
      await sleep(40);
    }
  })();

  try {
    /* a held job in each shard that will move, running before the move */
    for (const t of movers) await enqueue(t, { hold: 'in' });
    await until('the held jobs to run', 30_000, () => holds.size === movers.length);

    /* n2 joins the placement: the shards move to it */
    const t0 = Date.now();
    await set(n1, { 'silo.max_moves_in': '1' });
    await set(n2, { 'silo.max_moves_in': '1' });
    await until('n2 to serve the shards placement gives it', 90_000, async () => {
      const own = await owners(n1);
      const s = await serving(n2);
      return (placed.every((x) => own.get(x) === 'n2') && s.length === placed.length) || { n1: [...own], n2: s };
    });
    const movedIn = Date.now() - t0;
    released = 'in';
    await until('the held jobs of the move in to finish', 30_000, async () => {
      const done = await Promise.all(movers.map((t) => one(n2,
        "SELECT count(*)::int AS n FROM silo.jobs WHERE task_group = $1 AND tenant = $2 AND payload->>'hold' = 'in' AND status = 'Succeeded'",
        [group, t])));
      return done.every((r) => r.n === 1) || done.map((r) => r.n);
    });
    assert.ok(worker.memberNodes.includes('n2'), `the worker leases from n2 too (${worker.memberNodes})`);

    /* a held job in each of n2's shards, then n2 leaves gracefully: they move back */
    holds.clear();
    for (const t of movers) await enqueue(t, { hold: 'out' });
    await until('the held jobs to run on n2', 30_000, () => holds.size === movers.length);
    /* the client has called every moved shard since its move (the held jobs just now) */
    const routeIn = cc.routeStats;
    const t1 = Date.now();
    await set(n2, { 'silo.draining': 'on' });
    await until('n1 to serve every shard again', 90_000, async () => {
      const s1 = await serving(n1);
      const s2 = await serving(n2);
      return (s1.length === 8 && s2.length === 0) || { n1: s1, n2: s2 };
    });
    const movedOut = Date.now() - t1;
    /* a call to each shard that moved back, on the client's map of before */
    for (const t of movers) await enqueue(t, { i: 0 });
    released = 'out';
    producing = false;
    await producer;

    /* every job finished, on the one node that owns its shard */
    const ids = new Set(jobs.map(([t, id]) => `${t}/${id}`));
    assert.equal(ids.size, jobs.length, 'every enqueue gave a new job');
    await until('every job to succeed', 60_000, async () => {
      const r = await one(n1, `SELECT count(*) FILTER (WHERE status = 'Succeeded')::int AS ok, count(*)::int AS n
        FROM silo.jobs WHERE task_group = $1`, [group]);
      return r.ok === jobs.length || r;
    });
    await worker.stop();
    const onN1 = (await n1.query(`SELECT j.tenant || '/' || j.id AS key, j.status,
        (SELECT count(*)::int FROM silo.attempts a WHERE a.tenant = j.tenant AND a.job_id = j.id) AS attempts,
        (SELECT count(*)::int FROM silo.attempts a WHERE a.tenant = j.tenant AND a.job_id = j.id
          AND a.status = 'Succeeded') AS succeeded
      FROM silo.jobs j WHERE j.task_group = $1`, [group])).rows;
    const onN2 = (await n2.query('SELECT count(*)::int AS n FROM silo.jobs WHERE task_group = $1', [group])).rows[0].n;
    assert.equal(onN2, 0, 'n2 shows none of the jobs once it owns no shard');
    assert.equal(onN1.length, jobs.length, '0 jobs lost or duplicated');
    assert.deepEqual(new Set(onN1.map((r) => r.key)), ids);
    const bad = onN1.filter((r) => r.status !== 'Succeeded' || r.attempts !== 1 || r.succeeded !== 1);
    assert.deepEqual(bad, [], 'every job Succeeded with exactly one attempt');
    const twice = [...runs].filter(([, n]) => n !== 1);
    assert.deepEqual(twice, [], 'the handler ran every job exactly once');
    assert.equal(runs.size, jobs.length);

    const st = worker.stats;
    const route = cc.routeStats;
    console.log(`# ${jobs.length} jobs; ${placed.length} shards moved in (${movedIn} ms) and back (${movedOut} ms);`
      + ` worker: ${st.succeeded} succeeded, ${st.lost} lost, ${st.followed} reports and heartbeats followed NOT_OWNER;`
      + ` client: ${route.followed} SL020 hints followed, ${route.retried} retries after SL021`
      + ` (moving in: ${routeIn.followed} and ${routeIn.retried})`);
    assert.equal(st.succeeded, jobs.length);
    assert.equal(st.failed, 0);
    assert.equal(st.lost, 0, errors.join('\n'));
    /* each held job's completion (at least) went to its shard's new owner */
    assert.ok(st.followed >= 2 * movers.length, `the worker followed NOT_OWNER (${st.followed})`);
    /*
     * the client's map named the old owner at least once per direction: that
     * call got SL020 (followed) or, during the pause, SL021 (retried; the map
     * read again before the retry may already name the new owner)
     */
    assert.ok(routeIn.followed + routeIn.retried >= 1, `the client met the move in (${JSON.stringify(routeIn)})`);
    assert.ok(route.followed + route.retried - routeIn.followed - routeIn.retried >= 1,
      `the client met the move back (${JSON.stringify(route)})`);
  } finally {
    producing = false;
    released = 'out';
    await producer.catch(() => undefined);
    await worker.stop();
    await cc.close();
  }
});
