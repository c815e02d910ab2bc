// bench/node-fakepool.mjs: the Node worker's own CPU per job, without a
// server.  pg.Pool's connect hands out a fake connection whose lease
// returns made-up rows (32 at a time, as node-postgres would parse them)
// and whose complete_many completes whatever it is given, each answer a
// turn of the event loop later; SiloWorker (clients/node, built) drains N
// such tasks with a no-op handler.  What it prints is the worker's code
// and the promises and timers it makes, not node-postgres nor the kernel
// (bench/clients.sh measures those, against a real server).
//
//   node bench/node-fakepool.mjs [N [DIST]]
//
// N: jobs (default 200000); DIST: the package's dist folder (default
// clients/node/dist), e.g. an older build to compare with.
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const N = Number(process.argv[2] ?? 200000);
const dist = path.resolve(process.argv[3] ?? path.join(here, '../clients/node/dist'));
const require = createRequire(path.join(dist, 'index.js'));
const pg = require('pg');
const { SiloWorker } = require(path.join(dist, 'index.js'));

let seq = 0;
let left = N;
const calls = { lease: 0, complete: 0 };
const now = Date.now();

/** n rows of silo.lease, parsed as node-postgres parses them. */
function leaseRows(n) {
  const rows = [];
  for (let i = 0; i < n && left > 0; i++, left--) {
    const k = seq++;
    rows.push({
      task_id: `00000000-0000-4000-8000-${String(k).padStart(12, '0')}`, kind: 'run', tenant: '-',
      job_id: `job-${k}`, attempt: 1, relative_attempt: 1, is_last_attempt: true, priority: 50, task_group: 'g',
      payload: JSON.parse('{}'), metadata: JSON.parse('{}'), lease_expires_at: new Date(now + 30000),
      queue_key: null, current_max_concurrency: null, refresh_metadata: null, limits: JSON.parse('[]'),
      retry_policy: null,
    });
  }
  return rows;
}

const fake = {
  query(config) {
    return new Promise((resolve) => setImmediate(() => {
      if (config.text.includes('silo.lease(')) {
        calls.lease++;
        resolve({ rows: leaseRows(config.values[2]) });
      } else if (config.text.includes('complete_many')) {
        calls.complete++;
        resolve({ rows: config.values[0].map((id) => ({ task_id: id })) });
      } else {
        resolve({ rows: [{}] });
      }
    }));
  },
  release() {},
};
pg.Pool.prototype.connect = () => Promise.resolve(fake);
pg.Pool.prototype.end = () => Promise.resolve();

const worker = new SiloWorker({
  connection: 'postgresql://fake@/fake', taskGroup: 'g', concurrency: 32, batchSize: 32, listen: false,
  handler: async () => undefined, onError: (e, ctx) => console.error(`node-fakepool: ${ctx.phase}: ${e.message}`),
});
const cpu0 = process.cpuUsage();
const t0 = performance.now();
await worker.start();
await new Promise((resolve) => {
  const timer = setInterval(() => {
    if (worker.stats.succeeded >= N) {
      clearInterval(timer);
      resolve();
    }
  }, 10);
});
const ms = performance.now() - t0;
const cpu = process.cpuUsage(cpu0);
await worker.stop();
const us = (cpu.user + cpu.system) / N;
console.log(`${N} jobs in ${ms.toFixed(0)} ms, ${calls.lease} leases, ${calls.complete} complete_many,`
  + ` worker CPU ${us.toFixed(1)} us/job (${dist})`);
