// Cluster mode against a real two-node silo cluster with etcd
// (clients/test-cluster.sh's cluster2_start, run by test/run.sh when etcd is
// installed): n1 owns all 8 shards, n2 is a live member that owns none.  The
// client and the worker are given n2's connection only.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';

import { ShardMap, SiloClusterClient, SiloClusterWorker } from '../dist/index.js';

const N1 = process.env.SILO_TEST_N1_URL;
const N2 = process.env.SILO_TEST_N2_URL;
if (!N1 || !N2) throw new Error('SILO_TEST_N1_URL and SILO_TEST_N2_URL are not set: run clients/node/test/run.sh');

const n1 = new pg.Pool({ connectionString: N1, max: 2 });
const n2 = new pg.Pool({ connectionString: N2, max: 2 });
const status = async (pool, id, tenant) => (await pool.query(
  'SELECT status FROM silo.jobs WHERE tenant = $1 AND id = $2', [tenant, id])).rows[0]?.status;
let seq = 0;
const unique = (p) => `${p}-${process.pid}-${++seq}`;

after(async () => {
  await n1.end();
  await n2.end();
});

describe('a real two-node cluster', () => {
  let cc;
  before(() => {
    cc = new SiloClusterClient({ connectionString: N2, retryDelayMs: 20 });
  });
  after(async () => {
    await cc.close();
  });

  test('calls given to n2 run on n1, the owner, by the map', async () => {
    const group = unique('c2');
    const id = await cc.enqueue(group, { n: 1 }, { tenant: 'acme' });
    assert.equal(cc.map.singleNode, false);
    assert.equal(cc.map.nodeId, 'n2');
    assert.equal((await cc.locate('acme')).shard.ownerNodeId, 'n1');
    assert.equal(await status(n1, id, 'acme'), 'Waiting');
    assert.equal(await status(n2, id, 'acme'), undefined);
    const ids = await cc.enqueueMany([{ taskGroup: group, tenant: '-' }, { taskGroup: group, tenant: 'tenant-1' }]);
    assert.equal(await status(n1, ids[1], 'tenant-1'), 'Waiting');
    assert.equal((await cc.getJob(id, { tenant: 'acme' })).status, 'Waiting');
    await cc.cancel(ids[0]);
    assert.equal((await cc.awaitResult(ids[0], { timeoutMs: 3000 })).status, 'Cancelled');
  });

  test("a stale map: n2 answers SL020 naming n1, and the call follows it", async () => {
    const map = cc.map;
    /* pretend shard 7 (acme's) is n2's: the call goes to n2, which refuses it */
    cc.router.current = new ShardMap({
      nodeId: map.nodeId,
      mode: map.mode,
      shards: map.shards.map((s) => (s.id === 7 ? { ...s, ownerNodeId: 'n2', ownerConninfo: 'x', isLocal: true } : s)),
    });
    const id = await cc.enqueue(unique('c2s'), {}, { tenant: 'acme' });
    assert.equal(await status(n1, id, 'acme'), 'Waiting');
    assert.equal(cc.map.shards.find((s) => s.id === 7).ownerNodeId, 'n1');
    /* getJob on a stale map: n2's statement says the shard is not its own */
    cc.router.current = cc.map.withOwner(7, 'n2', 'x');
    assert.equal((await cc.getJob(id, { tenant: 'acme' })).id, id);
  });

  test('the worker given n2 leases from n1 too, and reports there', async () => {
    const group = unique('c2w');
    const errors = [];
    const w = new SiloClusterWorker({
      connection: N2,
      taskGroup: group,
      concurrency: 4,
      pollIntervalMs: 50,
      leaseMs: 1500,
      heartbeatIntervalMs: 300,
      onError: (e, ctx) => errors.push(`${ctx.phase}: ${e.message}`),
      handler: async (t) => {
        if (t.payload.slow) await new Promise((r) => setTimeout(r, 2000));
        return { tenant: t.tenant };
      },
    });
    await w.start();
    assert.deepEqual(w.memberNodes.sort(), ['n1', 'n2']);
    const jobs = [];
    for (const [tenant, payload] of [['acme', { slow: true }], ['-', {}], ['tenant-1', {}], ['😀', {}]]) {
      jobs.push([await cc.enqueue(group, payload, { tenant }), tenant]);
    }
    const deadline = Date.now() + 20000;
    for (;;) {
      const states = await Promise.all(jobs.map(([id, t]) => status(n1, id, t)));
      if (states.every((s) => s === 'Succeeded')) break;
      if (Date.now() > deadline) throw new Error(`jobs did not succeed: ${states.join(',')}; ${errors.join('; ')}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    await w.stop();
    assert.equal(w.stats.succeeded, 4);
    assert.equal(w.stats.lost, 0, errors.join('\n'));
  });
});
