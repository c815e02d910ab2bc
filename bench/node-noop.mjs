// bench/node-noop.mjs: the Node side of bench/clients.sh.  Drains a task
// group with SiloWorker (clients/node) and a no-op handler, then exits.
//
//   node bench/node-noop.mjs URL GROUP JOBS CONCURRENCY BATCH [POOL_SIZE]
//
// Exits once JOBS tasks have been reported (or nothing was leased for 2 s
// after the first task), printing one JSON line: {"jobs", "seconds",
// "rate", "stats"}; seconds run from the first lease to the last report as
// this process saw them.  bench/clients.sh takes its figures from the
// database instead, the same way for both workers.
import { SiloWorker } from '../clients/node/dist/index.js';

const [url, group, jobsArg, concArg, batchArg, poolArg] = process.argv.slice(2);
if (!url || !group || !jobsArg || !concArg || !batchArg) {
  console.error('usage: node bench/node-noop.mjs URL GROUP JOBS CONCURRENCY BATCH [POOL_SIZE]');
  process.exit(2);
}
const jobs = Number(jobsArg);

const worker = new SiloWorker({
  connection: url,
  taskGroup: group,
  concurrency: Number(concArg),
  batchSize: Number(batchArg),
  leaseMs: 30_000,
  poolSize: poolArg ? Number(poolArg) : undefined,
  handler: async () => undefined,
  onError: (error, ctx) => console.error(`node-noop: ${ctx.phase}: ${error.message}`),
});

await worker.start();
let first = 0;
let last = 0;
let lastCount = 0;
await new Promise((resolve) => {
  const timer = setInterval(() => {
    const s = worker.stats;
    const reported = s.succeeded + s.lost + s.failed;
    const now = Date.now();
    if (s.leased > 0 && first === 0) {
      first = now;
      last = now;
    }
    if (reported !== lastCount) {
      lastCount = reported;
      last = now;
    }
    if (reported >= jobs || (first > 0 && now - last > 2000)) {
      clearInterval(timer);
      resolve();
    }
  }, 10); /* as bench/python-noop.py: a tighter poll takes the event loop from the worker */
});
await worker.stop();
const seconds = (last - first) / 1000;
const s = worker.stats;
console.log(JSON.stringify({ jobs: s.succeeded, seconds, rate: seconds > 0 ? s.succeeded / seconds : 0, stats: s }));
