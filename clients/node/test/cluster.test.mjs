// Cluster mode: the tenant hash (docs/cluster.md's test vectors and the
// server's silo.tenant_hash), the shard map, the router's rules against
// fake members, SiloClusterClient and SiloClusterWorker against the real
// single-node silo, and the following of SL020 / SL021 against a stand-in
// member (clients/test-stub.sql: a database whose hand-made silo raises
// them, pointing at the real node).  No real multi-node cluster here.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

import {
  NotOwnerError, NotTerminalError, Router, ShardMap, ShardUnavailableError, SiloClient, SiloClusterClient,
  SiloClusterWorker, mergeConninfo, parseConninfo, tenantHash,
} from '../dist/index.js';
import { URL, admin, jobStatus, sql, unique, value, waitFor } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '../../..');

/** docs/cluster.md's test vectors: [tenant, hash, shard of 8]. */
function docVectors() {
  const doc = fs.readFileSync(path.join(repo, 'docs/cluster.md'), 'utf8');
  const out = [];
  for (const line of doc.split('\n')) {
    const m = /^\| (.+?) \| `(-?\d+)` \| (\d+) \|$/.exec(line);
    if (!m) continue;
    let tenant;
    if (m[1] === '(empty string)') tenant = '';
    else if (/^`x` repeated 64 times$/.test(m[1])) tenant = 'x'.repeat(64);
    else tenant = /^`(.*)`$/.exec(m[1])[1];
    out.push([tenant, BigInt(m[2]), Number(m[3])]);
  }
  return out;
}

/** The map silo makes of n shards (docs/cluster.md), all owned by node "a" (local) unless owners says. */
function mapOf(n, owners = {}, nodeId = 'a') {
  const shards = [];
  for (let i = 0; i < n; i++) {
    const start = -(2n ** 63n) + (BigInt(i) * 2n ** 64n) / BigInt(n);
    const end = -(2n ** 63n) + (BigInt(i + 1) * 2n ** 64n) / BigInt(n);
    const owner = owners[i] ?? nodeId;
    shards.push({
      id: i, start, end, ownerNodeId: owner, ownerConninfo: `host=${owner}`, state: 'serving', isLocal: owner === nodeId,
    });
  }
  return { nodeId, mode: 'cluster', shards };
}

const sqlstateError = (code, message, detail) => (code === 'SL020'
  ? new NotOwnerError(message, { code, detail }) : new ShardUnavailableError(message, { code, detail }));

describe('the tenant hash', () => {
  test("docs/cluster.md's test vectors, hash and shard of 8", () => {
    const vectors = docVectors();
    assert.equal(vectors.length, 8);
    const map = new ShardMap(mapOf(8));
    for (const [tenant, hash, shard] of vectors) {
      assert.equal(tenantHash(tenant), hash, `hash of ${JSON.stringify(tenant)}`);
      assert.equal(map.shardOf(tenant).id, shard, `shard of ${JSON.stringify(tenant)}`);
    }
  });

  test("agrees with the server's silo.tenant_hash on 300 random tenants (ASCII, multibyte, every tail length)", async () => {
    const alphabet = ['a', 'Z', '-', '0', 'é', 'ß', '€', '中', '😀', '\u0001', ' '];
    const tenants = [];
    for (let i = 0; i < 300; i++) {
      const len = i % 40;
      let t = '';
      for (let j = 0; j < len; j++) t += alphabet[Math.floor(Math.random() * alphabet.length)];
      tenants.push(t);
    }
    const rows = await sql('SELECT t, silo.tenant_hash(t)::text AS h FROM unnest($1::text[]) AS t', [tenants]);
    for (const r of rows) assert.equal(tenantHash(r.t).toString(), r.h, `hash of ${JSON.stringify(r.t)}`);
  });
});

describe('the shard map', () => {
  test('lookup at the bounds, a gap, single-node detection', () => {
    const map = new ShardMap(mapOf(4));
    assert.equal(map.shardOfHash(-(2n ** 63n)).id, 0);
    assert.equal(map.shardOfHash(-(2n ** 62n) - 1n).id, 0);
    assert.equal(map.shardOfHash(-(2n ** 62n)).id, 1);
    assert.equal(map.shardOfHash(-1n).id, 1);
    assert.equal(map.shardOfHash(0n).id, 2);
    assert.equal(map.shardOfHash(2n ** 63n - 1n).id, 3);
    assert.equal(map.singleNode, false);
    const gap = new ShardMap({ ...mapOf(4), shards: mapOf(4).shards.filter((s) => s.id !== 2) });
    assert.equal(gap.shardOfHash(5n), null);
    assert.equal(new ShardMap(mapOf(1)).singleNode, true);
    assert.equal(new ShardMap({ ...mapOf(1), mode: 'single-node' }).singleNode, true);
  });

  test('a hint replaces one shard\'s owner', () => {
    const map = new ShardMap(mapOf(4)).withOwner(2, 'b', 'host=b');
    assert.deepEqual(map.shards.map((s) => [s.ownerNodeId, s.isLocal]), [['a', true], ['a', true], ['b', false], ['a', true]]);
  });
});

describe('conninfo', () => {
  test('parse URLs and keyword strings', () => {
    assert.deepEqual(parseConninfo('postgresql://u:p%40ss@db1:5433/app?sslmode=require&application_name=x'),
      { user: 'u', password: 'p@ss', host: 'db1', port: '5433', dbname: 'app', sslmode: 'require', application_name: 'x' });
    assert.deepEqual(parseConninfo("host=10.0.0.2 port = 5432 dbname='my app' password='it\\'s'"),
      { host: '10.0.0.2', port: '5432', dbname: 'my app', password: "it's" });
    assert.deepEqual(parseConninfo('postgresql://postgres@/postgres?host=/tmp/x'),
      { user: 'postgres', dbname: 'postgres', host: '/tmp/x' });
  });

  test("an owner's connection: the hint's address, the seed's credentials", () => {
    const seed = parseConninfo('host=db1 hostaddr=10.0.0.1 port=6000 dbname=app user=me password=secret sslmode=require');
    assert.deepEqual(mergeConninfo(seed, parseConninfo('host=db2 dbname=app2')),
      { dbname: 'app2', user: 'me', password: 'secret', sslmode: 'require', host: 'db2' });
  });
});

describe('the router (fake members)', () => {
  /** A router over fake members named by node id; calls records [member, tenant]. */
  function fake(snapshot, { behaviour = {}, maps = {} } = {}) {
    const members = new Map();
    const calls = [];
    let reads = 0;
    const member = (id) => {
      if (!members.has(id)) members.set(id, { id });
      return members.get(id);
    };
    const seed = member(snapshot.nodeId);
    const router = new Router({
      seed,
      readMap: async (m) => {
        reads++;
        return maps[m.id] ?? snapshot;
      },
      member: (nodeId, conninfo) => member(nodeId ?? conninfo),
    }, { retryDelayMs: 5, retryTimeoutMs: 300 });
    const run = (tenant) => router.run(tenant, async (m) => {
      calls.push(m.id);
      const b = behaviour[m.id];
      const r = typeof b === 'function' ? b(calls.length) : b;
      if (r instanceof Error) throw r;
      return m.id;
    });
    return { router, run, calls, reads: () => reads };
  }

  const notOwner = (shard, node) => sqlstateError('SL020', `shard ${shard} of tenant "t" is not served by this node`,
    JSON.stringify({ shard, owner_node_id: node, owner_conninfo: node === null ? null : `host=${node}` }));

  test('a tenant goes to its shard\'s owner; the map is read once', async () => {
    const owners = { 7: 'b', 6: 'c' };
    const f = fake(mapOf(8, owners));
    assert.equal(await f.run('acme'), 'b'); /* shard 7 */
    assert.equal(await f.run('-'), 'c'); /* shard 6 */
    assert.equal(await f.run('tenant-1'), 'a'); /* shard 1, local */
    assert.equal(f.reads(), 1);
  });

  test('single node: every call to the seed, one map read in all', async () => {
    const f = fake({ nodeId: 's', mode: 'single-node', shards: mapOf(1, {}, 's').shards });
    for (const t of ['acme', '-', 'x']) assert.equal(await f.run(t), 's');
    assert.equal(f.reads(), 1);
  });

  test('SL020 is followed to the hint, which the map keeps for the next call', async () => {
    const f = fake(mapOf(8), { behaviour: { a: notOwner(7, 'b') } });
    assert.equal(await f.run('acme'), 'b');
    assert.deepEqual(f.calls, ['a', 'b']);
    assert.equal(await f.run('Acme'), 'b'); /* shard 7 too: straight there */
    assert.deepEqual(f.calls, ['a', 'b', 'b']);
    assert.equal(f.router.map.shards[7].ownerNodeId, 'b');
  });

  test('a hint back to a node already tried is a loop: NotOwnerError', async () => {
    const f = fake(mapOf(8), { behaviour: { a: notOwner(7, 'b'), b: notOwner(7, 'a') } });
    await assert.rejects(f.run('acme'), (e) => e instanceof NotOwnerError && /already tried/.test(e.message));
    assert.deepEqual(f.calls, ['a', 'b']);
  });

  test('at most maxHops hints', async () => {
    const f = fake(mapOf(8), {
      behaviour: {
        a: notOwner(7, 'b'), b: notOwner(7, 'c'), c: notOwner(7, 'd'), d: notOwner(7, 'e'), e: undefined,
      },
    });
    await assert.rejects(f.run('acme'), (e) => e instanceof NotOwnerError && /more than 3 hints/.test(e.message));
    assert.deepEqual(f.calls, ['a', 'b', 'c', 'd']);
  });

  test('SL021 is retried after a pause with the map read again; given up at the deadline', async () => {
    const f = fake(mapOf(8), {
      behaviour: { a: (n) => (n <= 2 ? sqlstateError('SL021', 'paused') : undefined) },
    });
    assert.equal(await f.run('acme'), 'a');
    assert.deepEqual(f.calls, ['a', 'a', 'a']);
    assert.equal(f.reads(), 3);
    const g = fake(mapOf(8), { behaviour: { a: sqlstateError('SL021', 'paused') } });
    const t0 = Date.now();
    await assert.rejects(g.run('acme'), ShardUnavailableError);
    const took = Date.now() - t0;
    assert.ok(took >= 250 && took < 2000, `gave up after ${took} ms`);
  });

  test('an SL020 without owner is retried like SL021, then goes where the new map says', async () => {
    const f = fake(mapOf(8), {
      behaviour: { a: notOwner(7, null) },
      maps: {},
    });
    let n = 0;
    f.router.deps.readMap = async () => {
      n++;
      return n === 1 ? mapOf(8) : mapOf(8, { 7: 'b' });
    };
    assert.equal(await f.run('acme'), 'b');
    assert.deepEqual(f.calls, ['a', 'b']);
  });
});

let stubs = 0;
/** A database with clients/test-stub.sql's stand-in silo, pointing at the real node; its URL. */
async function makeStub() {
  stubs += 1;
  const db = `silo_stub_${process.pid}_${stubs}`;
  await admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
  await admin.query(`CREATE DATABASE ${db}`);
  const host = new globalThis.URL(URL.replace(/^postgresql:/, 'http:').replace('@/', '@x/')).searchParams.get('host');
  const real = `host=${host} dbname=postgres`;
  const stubUrl = URL.replace('/postgres?', `/${db}?`);
  const c = new pg.Client({ connectionString: stubUrl });
  await c.connect();
  const text = fs.readFileSync(path.join(repo, 'clients/test-stub.sql'), 'utf8')
    .replace('@REAL@', `'${real.replace(/'/g, "''")}'`);
  await c.query(text);
  return {
    db, url: stubUrl, real, client: c,
    async drop() {
      await c.end();
      await admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
    },
  };
}

describe('SiloClusterClient on a single node', () => {
  let cc;
  before(() => {
    cc = new SiloClusterClient({ connectionString: URL, max: 4 });
  });
  after(async () => {
    await cc.close();
  });

  test('every call works as SiloClient\'s, with no statement besides the first map read', async () => {
    const seed = cc.seed;
    let extra = 0;
    const orig = seed.rows.bind(seed);
    seed.rows = (...a) => {
      extra++;
      return orig(...a);
    };
    const group = unique('cc');
    const id = await cc.enqueue(group, { n: 1 }, { tenant: 'acme' });
    assert.equal(cc.map.singleNode, true);
    assert.equal(extra, 2); /* node_info and cluster_info, once */
    const ids = await cc.enqueueMany([{ taskGroup: group, tenant: 'acme' }, { taskGroup: group, tenant: '-' }]);
    assert.equal(ids.length, 2);
    assert.equal((await cc.getJob(id, { tenant: 'acme' })).status, 'Waiting');
    assert.equal(await cc.getJob('nope', { tenant: 'acme' }), null);
    await cc.cancel(id, { tenant: 'acme' });
    assert.equal(await jobStatus(id, 'acme'), 'Cancelled');
    await cc.restart(id, { tenant: 'acme' });
    await assert.rejects(cc.getJobResult(ids[1]), NotTerminalError);
    await cc.cancel(ids[1]);
    assert.equal((await cc.awaitResult(ids[1], { timeoutMs: 2000 })).status, 'Cancelled');
    assert.equal(await cc.deleteJob(ids[1]), true);
    assert.equal(extra, 2);
    const loc = await cc.locate('acme');
    assert.equal(loc.seed, true);
    assert.equal(loc.hash, 7757017307627438190n);
  });
});

describe('SL020 and SL021 from a stand-in member (clients/test-stub.sql)', () => {
  let stub;
  let cc;
  before(async () => {
    stub = await makeStub();
    cc = new SiloClusterClient({ connectionString: stub.url, retryDelayMs: 10, retryTimeoutMs: 3000 });
  });
  after(async () => {
    await cc?.close();
    await stub?.drop();
  });

  test('every tenant-naming call follows the hint to the real node', async () => {
    const group = unique('stub');
    const id = await cc.enqueue(group, { n: 1 }, { tenant: 'acme' });
    assert.equal(await jobStatus(id, 'acme'), 'Waiting');
    assert.equal(cc.map.singleNode, false);
    /* the hint went into the map: acme's shard is the real node's now */
    assert.equal((await cc.locate('acme')).shard.ownerNodeId, 'real');
    /* another shard's tenant: the stub first, then the real node */
    const ids = await cc.enqueueMany([
      { taskGroup: group, tenant: 'tenant-1', id: unique('m') },
      { taskGroup: group, tenant: 'acme', id: unique('m') },
      { taskGroup: group, tenant: '😀', id: unique('m') },
    ]);
    for (const [i, t] of [[0, 'tenant-1'], [1, 'acme'], [2, '😀']]) assert.equal(await jobStatus(ids[i], t), 'Waiting');
    await cc.cancel(ids[0], { tenant: 'tenant-1' });
    assert.equal(await jobStatus(ids[0], 'tenant-1'), 'Cancelled');
    await cc.restart(ids[0], { tenant: 'tenant-1' });
    assert.equal(await jobStatus(ids[0], 'tenant-1'), 'Waiting');
    const later = await cc.enqueue(group, {}, { tenant: 'ünïcødé', startAt: new Date(Date.now() + 3_600_000) });
    await cc.expedite(later, { tenant: 'ünïcødé' });
    assert.equal(await value("SELECT next_attempt_at <= now() FROM silo.jobs WHERE tenant = 'ünïcødé' AND id = $1",
      [later]), true);
    await cc.cancel(later, { tenant: 'ünïcødé' });
    assert.equal((await cc.getJobResult(later, { tenant: 'ünïcødé' })).status, 'Cancelled');
    assert.equal((await cc.awaitResult(later, { tenant: 'ünïcødé', timeoutMs: 3000 })).status, 'Cancelled');
    assert.equal(await cc.deleteJob(later, { tenant: 'ünïcødé' }), true);
  });

  test('getJob asks the stub whether the shard is its own, and goes to the owner it names', async () => {
    const group = unique('stubget');
    const id = await new SiloClient(URL).enqueue(group, {}, { tenant: 'Acme' });
    await stub.client.query("UPDATE silo.stub_map SET is_local = false, owner_node_id = 'real', owner_conninfo = $1,"
      + " state = 'remote' WHERE shard_id = 7", [stub.real]);
    try {
      const fresh = new SiloClusterClient({ connectionString: stub.url });
      /* the fresh client reads the new map: straight to the real node */
      assert.equal((await fresh.getJob(id, { tenant: 'Acme' })).id, id);
      await fresh.close();
      /* cc's map still says shard 7 is the stub's: the statement says it is not */
      cc.router.current = cc.router.current.withOwner(7, 'stub', 'host=stub.invalid');
      cc.router.current.shards[7].isLocal = true;
      assert.equal((await cc.getJob(id, { tenant: 'Acme' })).id, id);
    } finally {
      await stub.client.query("UPDATE silo.stub_map SET is_local = true, owner_node_id = 'stub',"
        + " owner_conninfo = 'host=stub.invalid', state = 'serving' WHERE shard_id = 7");
    }
  });

  test('SL021 is retried, then the SL020 followed', async () => {
    const fresh = new SiloClusterClient({ connectionString: stub.url, retryDelayMs: 10, retryTimeoutMs: 3000 });
    const before = Number((await stub.client.query('SELECT nextval(\'silo.stub_calls\') AS n')).rows[0].n);
    await stub.client.query('UPDATE silo.stub_conf SET unavailable = $1', [before + 2]);
    const id = await fresh.enqueue(unique('stub21'), {}, { tenant: 'x'.repeat(64) });
    assert.equal(await jobStatus(id, 'x'.repeat(64)), 'Waiting');
    /* two SL021, then the SL020 */
    assert.equal(Number((await stub.client.query('SELECT last_value FROM silo.stub_calls')).rows[0].last_value), before + 3);
    await fresh.close();
  });
});

describe('SiloClusterWorker', () => {
  test('on a single node: one member, as SiloWorker', async () => {
    const group = unique('cw1');
    const done = [];
    const w = new SiloClusterWorker({
      connection: URL, taskGroup: group, pollIntervalMs: 50, handler: async (t) => { done.push(t.jobId); return { ok: 1 }; },
    });
    await w.start();
    assert.deepEqual(w.memberNodes.length, 1);
    const c = new SiloClient(URL);
    const ids = await c.enqueueMany([{ taskGroup: group }, { taskGroup: group, tenant: 'acme' }]);
    await waitFor(async () => (await jobStatus(ids[0])) === 'Succeeded' && (await jobStatus(ids[1], 'acme')) === 'Succeeded',
      { message: 'both jobs to succeed' });
    await w.stop();
    await c.close();
    assert.equal(w.stats.succeeded, 2);
  });

  /** Run six jobs (two slower than their lease, one failing) with a SiloClusterWorker on the stub; its stats. */
  async function runSix(stub, group) {
    const errors = [];
    const w = new SiloClusterWorker({
      connection: stub.url,
      taskGroup: group,
      concurrency: 4,
      leaseMs: 1200,
      heartbeatIntervalMs: 300,
      pollIntervalMs: 50,
      onError: (e, ctx) => errors.push(`${ctx.phase}: ${e.message}`),
      handler: async (t) => {
        if (t.payload.slow) await new Promise((r) => setTimeout(r, 2000)); /* longer than the lease: heartbeats needed */
        if (t.payload.fail) throw new Error('boom');
        return { tenant: t.tenant };
      },
    });
    await w.start();
    const c = new SiloClient(URL);
    const jobs = [];
    for (const [tenant, payload] of [['acme', { slow: true }], ['tenant-1', {}], ['-', { fail: true }], ['😀', {}],
      ['Acme', {}], ['ünïcødé', { slow: true }]]) {
      jobs.push([await c.enqueue(group, payload, { tenant }), tenant, payload]);
    }
    await waitFor(async () => {
      for (const [id, tenant, payload] of jobs) {
        if ((await jobStatus(id, tenant)) !== (payload.fail ? 'Failed' : 'Succeeded')) return false;
      }
      return true;
    }, { timeoutMs: 20000, message: 'every job to end' });
    const members = w.memberNodes.sort();
    await w.stop();
    await c.close();
    const attempts = Number(await value('SELECT count(*) FROM silo.attempts WHERE job_id = ANY($1)', [jobs.map((j) => j[0])]));
    return { stats: w.stats, errors, members, attempts };
  }

  test("the stub's tasks: heartbeats and reports follow SL020 to the real node, with the tenant", async () => {
    const stub = await makeStub();
    try {
      const r = await runSix(stub, unique('cw2'));
      assert.deepEqual(r.members, ['stub']);
      assert.equal(r.stats.succeeded, 5);
      assert.equal(r.stats.failed, 1);
      assert.equal(r.stats.lost, 0, r.errors.join('\n'));
      assert.equal(r.attempts, 6); /* one attempt each: no lease ran out */
      assert.equal(Number((await stub.client.query('SELECT last_value FROM silo.stub_leased')).rows[0].last_value), 6);
      assert.ok(r.errors.every((e) => !/lease/.test(e)), r.errors.join('\n'));
    } finally {
      await stub.drop();
    }
  });

  test('leases from every member of the map', async () => {
    const stub = await makeStub();
    try {
      await stub.client.query("UPDATE silo.stub_map SET is_local = false, owner_node_id = 'real', owner_conninfo = $1,"
        + " state = 'remote' WHERE shard_id >= 4", [stub.real]);
      const r = await runSix(stub, unique('cw3'));
      assert.deepEqual(r.members, ['real', 'stub']);
      assert.equal(r.stats.succeeded, 5);
      assert.equal(r.stats.failed, 1);
      assert.equal(r.stats.lost, 0, r.errors.join('\n'));
      assert.equal(r.attempts, 6);
    } finally {
      await stub.drop();
    }
  });
});

after(async () => {
  await admin.end();
});
