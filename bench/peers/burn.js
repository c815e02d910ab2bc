#!/usr/bin/env node
// Burn-down benchmark driver for the peer systems pg-boss and graphile-worker.
//
//   node burn.js SYSTEM CONNINFO JOBS WORKERS BATCH
//
// SYSTEM   pgboss | graphile
// CONNINFO libpq keyword/value string ("host=/tmp/x port=55497 dbname=postgres")
//          or a postgres:// URL
// JOBS     number of no-op jobs pre-inserted before the drain starts
// WORKERS  concurrent worker loops / connections (see README.md per system)
// BATCH    1 = no batching; >1 = the system's documented batching options
//
// Prints exactly one JSON line on stdout; everything else goes to stderr.
// See README.md for what is timed and which options are used.
'use strict';

const pg = require('pg');
const parseUrl = require('pg-connection-string').parse;

const INSERT_CHUNK = 5000; // jobs per bulk-insert statement
const QUEUE = 'burn';
const TASK = 'noop';

function log(...args) {
  console.error(`[burn ${new Date().toISOString()}]`, ...args);
}

function usage(msg) {
  if (msg) console.error(`burn.js: ${msg}`);
  console.error('usage: burn.js pgboss|graphile CONNINFO JOBS WORKERS BATCH');
  process.exit(2);
}

// Turn a libpq conninfo (keyword=value, or URL) into a node-postgres config.
function parseConninfo(s) {
  s = (s || '').trim();
  let raw;
  if (/^postgres(ql)?:\/\//.test(s)) {
    raw = parseUrl(s);
  } else {
    raw = {};
    const re = /\s*([a-zA-Z_]+)\s*=\s*('((?:[^'\\]|\\.)*)'|\S*)/g;
    let m;
    while ((m = re.exec(s)) !== null) {
      raw[m[1]] = m[3] !== undefined ? m[3].replace(/\\(.)/g, '$1') : m[2];
    }
  }
  const env = process.env;
  const cfg = {
    host: raw.host || env.PGHOST || '/var/run/postgresql',
    port: parseInt(raw.port || env.PGPORT || '5432', 10),
    database: raw.dbname || raw.database || env.PGDATABASE || 'postgres',
    user: raw.user || env.PGUSER || 'postgres',
  };
  const password = raw.password || env.PGPASSWORD;
  if (password) cfg.password = password;
  return cfg;
}

const now = () => Number(process.hrtime.bigint()) / 1e9;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function chunks(n, size) {
  const out = [];
  for (let done = 0; done < n; done += size) out.push(Math.min(size, n - done));
  return out;
}

// Poll `sql` (returns one row with column n) until n = 0. Returns the time at
// which 0 was observed. `fast()` tells whether to poll tightly (the workers
// believe they are done) or slowly (safety net while the drain is running).
async function waitEmpty(client, sql, fast, deadline) {
  for (;;) {
    const { rows } = await client.query(sql);
    const n = Number(rows[0].n);
    if (n === 0) return now();
    if (now() > deadline) throw new Error(`timed out with ${n} jobs still incomplete`);
    await sleep(fast() ? 2 : 250);
  }
}

// ---------------------------------------------------------------- pg-boss --
async function runPgBoss(cfg, jobs, workers, batch, admin) {
  const PgBoss = require('pg-boss');
  await admin.query('drop schema if exists pgboss cascade');

  const boss = new PgBoss({
    ...cfg,
    schema: 'pgboss',
    max: workers, // one pool connection per worker loop
    migrate: true, // start() creates the schema (version 24 in pg-boss 10.x)
    supervise: false, // no maintenance/monitoring queries during the run
    schedule: false, // no cron/clock monitoring
  });
  boss.on('error', (e) => log('pg-boss error:', e.message));
  await boss.start();
  await boss.createQueue(QUEUE); // v10 requires queues to exist (standard policy)
  const { rows: ver } = await admin.query('select version from pgboss.version');
  log(`pg-boss schema version ${ver[0].version}`);

  const t0 = now();
  for (const n of chunks(jobs, INSERT_CHUNK)) {
    await boss.insert(Array.from({ length: n }, () => ({ name: QUEUE, data: {} })));
  }
  const tIns = now() - t0;
  log(`inserted ${jobs} jobs in ${tIns.toFixed(3)} s (${Math.round(jobs / tIns)}/s) via boss.insert, ${INSERT_CHUNK}/chunk`);

  const remainingSql = `select count(*) as n from pgboss.job where name = '${QUEUE}' and state in ('created','retry','active')`;
  const queuedSql = `select count(*) as n from pgboss.job where name = '${QUEUE}' and state in ('created','retry')`;
  const poller = new pg.Client(cfg);
  await poller.connect();

  let completed = 0;
  let loopsDone = 0;
  async function loop() {
    for (;;) {
      // fetch() swallows errors and returns []; only stop when nothing is queued.
      const got = await boss.fetch(QUEUE, { batchSize: batch });
      if (got.length === 0) {
        const { rows } = await poller.query(queuedSql);
        if (Number(rows[0].n) === 0) break;
        continue;
      }
      if (batch === 1) await boss.complete(QUEUE, got[0].id);
      else await boss.complete(QUEUE, got.map((j) => j.id));
      completed += got.length;
    }
    loopsDone++;
  }

  const start = now();
  const loops = Array.from({ length: workers }, loop);
  const tEnd = await waitEmpty(poller, remainingSql, () => loopsDone === workers, start + 3600);
  await Promise.all(loops);
  const seconds = tEnd - start;

  const { rows: st } = await admin.query(
    `select state, count(*) as n from pgboss.job where name = '${QUEUE}' group by 1 order by 1`);
  log('final states:', st.map((r) => `${r.state}=${r.n}`).join(' '), `completed-by-loops=${completed}`);
  if (completed !== jobs) log(`WARNING: loops completed ${completed} != ${jobs}`);

  await poller.end();
  await boss.stop({ graceful: false, wait: true, timeout: 5000 });
  return seconds;
}

// -------------------------------------------------------- graphile-worker --
async function runGraphile(cfg, jobs, workers, batch, admin) {
  const { run, makeWorkerUtils, Logger } = require('graphile-worker');
  // graphile logs every completed job at info level; keep warnings and errors only.
  const logger = new Logger((scope) => (level, message) => {
    if (level === 'error' || level === 'warning') log(`graphile ${level}:`, message);
  });
  await admin.query('drop schema if exists graphile_worker cascade');

  // graphile's documented default pool is 10 and it recommends concurrency + 2;
  // one connection is held for LISTEN.
  const pgPool = new pg.Pool({ ...cfg, max: Math.max(10, workers + 2) });
  pgPool.on('error', (e) => log('pool error:', e.message));
  pgPool.on('connect', (client) => client.on('error', (e) => log('client error:', e.message)));

  const utils = await makeWorkerUtils({ pgPool, schema: 'graphile_worker', logger });
  await utils.migrate(); // creates the graphile_worker schema
  const { rows: mig } = await admin.query('select max(id) as id from graphile_worker.migrations');
  log(`graphile-worker migration ${mig[0].id}`);

  const t0 = now();
  for (const n of chunks(jobs, INSERT_CHUNK)) {
    await utils.addJobs(Array.from({ length: n }, () => ({ identifier: TASK, payload: {} })));
  }
  const tIns = now() - t0;
  log(`inserted ${jobs} jobs in ${tIns.toFixed(3)} s (${Math.round(jobs / tIns)}/s) via addJobs, ${INSERT_CHUNK}/chunk`);
  await utils.release();

  const worker = {};
  if (batch > 1) {
    // Documented batching: one pooled fetch locks `size` jobs, workers are
    // served from memory; completions made in the same tick are deleted by one
    // statement. size = WORKERS * BATCH, i.e. the same number of jobs in flight
    // per fetch round as pg-boss's WORKERS loops of fetch(batchSize: BATCH).
    const size = parseInt(process.env.GRAPHILE_LOCAL_QUEUE_SIZE || String(workers * batch), 10);
    worker.localQueue = { size };
    worker.completeJobBatchDelay = 0;
    log(`graphile batching: localQueue.size=${size} completeJobBatchDelay=0`);
  }

  let succeeded = 0;
  const remainingSql = 'select count(*) as n from graphile_worker._private_jobs';
  const poller = new pg.Client(cfg);
  await poller.connect();

  const start = now();
  const runner = await run({
    pgPool,
    concurrency: workers,
    noHandleSignals: true,
    pollInterval: 2000, // default; LISTEN/NOTIFY plus the pre-filled queue drive fetching
    taskList: { [TASK]: async () => {} },
    logger,
    preset: { worker },
  });
  runner.events.on('job:success', () => { succeeded++; });
  log(`runner started in ${((now() - start) * 1000).toFixed(1)} ms (included in the timing)`);

  const tEnd = await waitEmpty(poller, remainingSql, () => succeeded >= jobs, start + 3600);
  const seconds = tEnd - start;
  log(`handlers succeeded: ${succeeded}`);

  await runner.stop();
  await poller.end();
  await pgPool.end();
  return seconds;
}

// ------------------------------------------------------------------ main --
async function main() {
  const [system, conninfo, jobsS, workersS, batchS] = process.argv.slice(2);
  if (!system || !conninfo || !jobsS || !workersS || !batchS) usage();
  const jobs = parseInt(jobsS, 10);
  const workers = parseInt(workersS, 10);
  const batch = parseInt(batchS, 10);
  if (!(jobs > 0 && workers > 0 && batch > 0)) usage('JOBS, WORKERS and BATCH must be positive integers');
  if (system !== 'pgboss' && system !== 'graphile') usage(`unknown system ${system}`);

  const cfg = parseConninfo(conninfo);
  const admin = new pg.Client(cfg);
  await admin.connect();
  const { rows } = await admin.query(
    "select current_setting('fsync') as fsync, current_setting('synchronous_commit') as sc, current_setting('server_version') as v");
  log(`${system}: jobs=${jobs} workers=${workers} batch=${batch}; server ${rows[0].v} fsync=${rows[0].fsync} synchronous_commit=${rows[0].sc}`);

  const seconds = system === 'pgboss'
    ? await runPgBoss(cfg, jobs, workers, batch, admin)
    : await runGraphile(cfg, jobs, workers, batch, admin);
  await admin.end();

  const rate = jobs / seconds;
  log(`drained ${jobs} jobs in ${seconds.toFixed(3)} s = ${Math.round(rate)} jobs/s`);
  process.stdout.write(JSON.stringify({
    system,
    workload: 'burn',
    clients: workers,
    batch,
    jobs,
    seconds: Number(seconds.toFixed(4)),
    rate: Number(rate.toFixed(1)),
  }) + '\n');
}

main().then(
  () => process.exit(0),
  (e) => { console.error('burn.js failed:', e && e.stack || e); process.exit(1); },
);
