#!/usr/bin/env node
// Benchmark driver for the peer systems pg-boss and graphile-worker.
//
//   node burn.js SYSTEM CONNINFO JOBS WORKERS BATCH                 (burn-down)
//   node burn.js SYSTEM CONNINFO steady WORKERS BATCH RATE SECONDS  (steady state)
//
// SYSTEM   pgboss | graphile
// CONNINFO libpq keyword/value string ("host=/tmp/x port=55497 dbname=postgres")
//          or a postgres:// URL
// JOBS     number of no-op jobs pre-inserted before the drain starts
// WORKERS  concurrent worker loops / connections (see README.md per system)
// BATCH    1 = no batching; >1 = the system's documented batching options
// RATE     steady: total enqueue rate, jobs/s (single-job enqueue calls)
// SECONDS  steady: length of the producing window
//
// Environment: PEER_MAX_SECONDS (default 60) caps a burn drain, and the drain
// after a steady window; PEER_PRODUCERS (steady: concurrent producer calls),
// PEER_POLL_MS (steady, pg-boss: sleep after an empty fetch, default 10),
// GRAPHILE_LOCAL_QUEUE_SIZE (override of graphile's localQueue size).
//
// Prints exactly one JSON line on stdout; everything else goes to stderr.
// See README.md for what is timed and which options are used.
//
// Internal: `node burn.js --producer SYSTEM CONNINFO RATE SECONDS PRODUCERS QUEUE`
// is the steady-mode producer, forked by the steady driver (IPC channel).
'use strict';

const pg = require('pg');
const parseUrl = require('pg-connection-string').parse;
const { fork } = require('node:child_process');

const INSERT_CHUNK = 5000; // jobs per bulk-insert statement (burn)
const TASK = 'noop'; // graphile task identifier
const DEPTH_SAMPLE_MS = 200;

const ROLE = process.argv[2] === '--producer' ? 'producer' : 'driver';

function log(...args) {
  console.error(`[${ROLE === 'producer' ? 'producer' : 'peer'} ${new Date().toISOString()}]`, ...args);
}

function usage(msg) {
  if (msg) console.error(`burn.js: ${msg}`);
  console.error('usage: burn.js pgboss|graphile CONNINFO JOBS WORKERS BATCH');
  console.error('       burn.js pgboss|graphile CONNINFO steady WORKERS BATCH RATE SECONDS');
  process.exit(2);
}

function envNumber(name, dflt) {
  const v = process.env[name];
  if (v === undefined || v === '') return dflt;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) usage(`${name} must be a positive number`);
  return n;
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

const now = () => Number(process.hrtime.bigint()) / 1e9; // seconds, monotonic
// Epoch milliseconds with sub-ms resolution; comparable across processes.
const nowMs = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function chunks(n, size) {
  const out = [];
  for (let done = 0; done < n; done += size) out.push(Math.min(size, n - done));
  return out;
}

// Sig-fig histogram, same buckets as loadgen/hist.c: values in integer
// microseconds keep their 3 most significant digits (below 1000 exact, above
// in buckets of width 10^k); a percentile is reported as the top of its bucket.
class SigFigHist {
  constructor() { this.counts = new Map(); this.total = 0; this.sum = 0; this.max = 0; }
  record(us) {
    let v = Math.max(0, Math.floor(us));
    this.sum += v;
    if (v > this.max) this.max = v;
    let d = 0;
    while (v >= 1000) { v = Math.floor(v / 10); d++; }
    const key = d * 1000 + v; // key order = value order (v >= 100 when d > 0)
    this.counts.set(key, (this.counts.get(key) || 0) + 1);
    this.total++;
  }
  percentile(pct) { // microseconds; null when empty
    if (this.total === 0) return null;
    const want = Math.max(1, Math.floor((pct / 100) * this.total + 0.999999));
    let seen = 0;
    for (const key of [...this.counts.keys()].sort((a, b) => a - b)) {
      seen += this.counts.get(key);
      if (seen >= want) {
        const scale = 10 ** Math.floor(key / 1000);
        return (key % 1000) * scale + (scale - 1);
      }
    }
    return null;
  }
  ms(pct) { const us = this.percentile(pct); return us === null ? null : us / 1000; }
}

// Poll `sql` (one row, column n = incomplete jobs) until n = 0 or `deadline`
// (monotonic seconds) passes. Returns { t, remaining } at the last observation.
// `fast()` tells whether to poll tightly (the workers believe they are done)
// or slowly (safety net while the drain is running).
async function waitEmpty(client, sql, fast, deadline) {
  for (;;) {
    const { rows } = await client.query(sql);
    const t = now();
    const n = Number(rows[0].n);
    if (n === 0 || t >= deadline) return { t, remaining: n };
    await sleep(Math.max(0, Math.min(fast() ? 2 : 250, (deadline - t) * 1000)));
  }
}

// Resolve with `p`, or with undefined after `ms` (logged as `what`).
function bounded(p, ms, what) {
  let timer;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise((r) => { timer = setTimeout(() => { log(`WARNING: ${what} still pending after ${ms} ms; going on`); r(); }, ms); }),
  ]);
}

// ------------------------------------------------------------- systems --
// Each system object: schema, remainingSql (incomplete jobs), depthSql (jobs
// waiting to be fetched), setup (drop + migrate), bulkInsert, startWorkers,
// and the producer side (openProducer) used by the steady mode.

function pgbossSystem(cfg, queue) {
  const PgBoss = require('pg-boss');
  const open = async (max, migrate) => {
    const boss = new PgBoss({
      ...cfg,
      schema: 'pgboss',
      max, // pool size
      migrate, // start() creates the schema (version 24 in pg-boss 10.x)
      supervise: false, // no maintenance/monitoring queries during the run
      schedule: false, // no cron/clock monitoring
    });
    boss.on('error', (e) => log('pg-boss error:', e.message));
    await boss.start();
    return boss;
  };
  let boss = null;
  return {
    name: 'pgboss',
    schema: 'pgboss',
    remainingSql: `select count(*) as n from pgboss.job where name = '${queue}' and state in ('created','retry','active')`,
    depthSql: `select count(*) as n from pgboss.job where name = '${queue}' and state in ('created','retry')`,
    async setup(admin, workers) {
      await admin.query('drop schema if exists pgboss cascade');
      boss = await open(workers, true); // one pool connection per worker loop
      await boss.createQueue(queue); // v10 requires queues to exist (standard policy)
      const { rows } = await admin.query('select version from pgboss.version');
      log(`pg-boss schema version ${rows[0].version}, queue '${queue}'`);
    },
    async bulkInsert(n) {
      await boss.insert(Array.from({ length: n }, () => ({ name: queue, data: {} })));
    },
    bulkApi: 'boss.insert',
    // WORKERS async loops of fetch({batchSize}) + complete(). `onJobs(jobs)`
    // is called as soon as fetch() returns. Burn (idleMs = null): a loop exits
    // when a fetch returns nothing and `queuedEmpty()` says nothing is queued.
    // Steady: a loop sleeps idleMs after an empty fetch and runs until stop().
    async startWorkers({ workers, batch, onJobs, idleMs = null, queuedEmpty = null }) {
      let stopping = false;
      let completed = 0;
      let loopsDone = 0;
      async function loop() {
        while (!stopping) {
          // fetch() swallows errors and returns [].
          const got = await boss.fetch(queue, { batchSize: batch });
          if (got.length === 0) {
            if (idleMs === null) {
              if (await queuedEmpty()) break;
            } else {
              await sleep(idleMs);
            }
            continue;
          }
          if (onJobs) onJobs(got);
          if (batch === 1) await boss.complete(queue, got[0].id);
          else await boss.complete(queue, got.map((j) => j.id));
          completed += got.length;
        }
        loopsDone++;
      }
      const loops = Array.from({ length: workers }, loop);
      const all = Promise.all(loops);
      return {
        completed: () => completed,
        allExited: () => loopsDone === workers,
        done: all,
        async stop() {
          stopping = true;
          await bounded(all, 15000, 'pg-boss worker loops');
          await boss.stop({ graceful: false, wait: true, timeout: 5000 });
        },
      };
    },
    async finalStates(admin) {
      const { rows } = await admin.query(
        `select state, count(*) as n from pgboss.job where name = '${queue}' group by 1 order by 1`);
      return rows.map((r) => `${r.state}=${r.n}`).join(' ');
    },
    // Producer side (forked process): its own PgBoss instance, no migration.
    async openProducer(producers) {
      const b = await open(producers, false);
      const db = b.getDb();
      await Promise.all(Array.from({ length: producers }, () => db.executeSql('select 1')));
      return {
        api: `boss.send('${queue}', {t})`,
        send: (data) => b.send(queue, data),
        close: () => b.stop({ graceful: false, wait: true, timeout: 5000 }),
      };
    },
  };
}

function graphileSystem(cfg) {
  const { run, makeWorkerUtils, Logger } = require('graphile-worker');
  // graphile logs every completed job at info level; keep warnings and errors only.
  const logger = new Logger(() => (level, message) => {
    if (level === 'error' || level === 'warning') log(`graphile ${level}:`, message);
  });
  const makePool = (max) => {
    const pool = new pg.Pool({ ...cfg, max });
    pool.on('error', (e) => log('pool error:', e.message));
    pool.on('connect', (client) => client.on('error', (e) => log('client error:', e.message)));
    return pool;
  };
  let pgPool = null;
  let utils = null;
  return {
    name: 'graphile',
    schema: 'graphile_worker',
    remainingSql: 'select count(*) as n from graphile_worker._private_jobs',
    depthSql: 'select count(*) as n from graphile_worker._private_jobs where locked_at is null',
    async setup(admin, workers) {
      await admin.query('drop schema if exists graphile_worker cascade');
      // graphile's documented default pool is 10 and it recommends
      // concurrency + 2; one connection is held for LISTEN.
      pgPool = makePool(Math.max(10, workers + 2));
      utils = await makeWorkerUtils({ pgPool, schema: 'graphile_worker', logger });
      await utils.migrate(); // creates the graphile_worker schema
      const { rows } = await admin.query('select max(id) as id from graphile_worker.migrations');
      log(`graphile-worker migration ${rows[0].id}`);
    },
    async bulkInsert(n) {
      await utils.addJobs(Array.from({ length: n }, () => ({ identifier: TASK, payload: {} })));
    },
    bulkApi: 'workerUtils.addJobs',
    // run({concurrency: WORKERS}); BATCH > 1 adds localQueue + batched completion.
    // `onJob(payload)` is called when the task handler is called.
    async startWorkers({ workers, batch, onJob }) {
      await utils.release();
      const worker = {};
      if (batch > 1) {
        // Documented batching: one pooled fetch locks `size` jobs, workers are
        // served from memory; completions made in the same tick are deleted by
        // one statement. size = WORKERS * BATCH, i.e. the same number of jobs in
        // flight per fetch round as pg-boss's WORKERS loops of fetch(batchSize: BATCH).
        const size = parseInt(process.env.GRAPHILE_LOCAL_QUEUE_SIZE || String(workers * batch), 10);
        worker.localQueue = { size };
        worker.completeJobBatchDelay = 0;
        log(`graphile batching: localQueue.size=${size} completeJobBatchDelay=0`);
      }
      let succeeded = 0;
      const t = now();
      const runner = await run({
        pgPool,
        concurrency: workers,
        noHandleSignals: true,
        pollInterval: 2000, // default; LISTEN/NOTIFY drives fetching
        taskList: { [TASK]: async (payload) => { if (onJob) onJob(payload); } },
        logger,
        preset: { worker },
      });
      runner.events.on('job:success', () => { succeeded++; });
      log(`runner started in ${((now() - t) * 1000).toFixed(1)} ms`);
      return {
        completed: () => succeeded,
        allExited: () => false,
        async stop() {
          await bounded(runner.stop(), 15000, 'graphile runner.stop()');
          await pgPool.end();
        },
      };
    },
    async finalStates(admin) {
      const { rows } = await admin.query(
        'select count(*) as n, count(locked_at) as locked from graphile_worker._private_jobs');
      return `rows left=${rows[0].n} (locked ${rows[0].locked})`;
    },
    async openProducer(producers) {
      const pool = makePool(producers);
      const u = await makeWorkerUtils({ pgPool: pool, schema: 'graphile_worker', logger });
      await Promise.all(Array.from({ length: producers }, () => pool.query('select 1')));
      return {
        api: `workerUtils.addJob('${TASK}', {t})`,
        send: (data) => u.addJob(TASK, data),
        close: async () => { await u.release(); await pool.end(); },
      };
    },
  };
}

function makeSystem(name, cfg, queue) {
  return name === 'pgboss' ? pgbossSystem(cfg, queue) : graphileSystem(cfg);
}

// ---------------------------------------------------------------- burn --
async function runBurn(sys, admin, cfg, jobs, workers, batch, maxSeconds) {
  await sys.setup(admin, workers);

  const t0 = now();
  for (const n of chunks(jobs, INSERT_CHUNK)) await sys.bulkInsert(n);
  const tIns = now() - t0;
  log(`inserted ${jobs} jobs in ${tIns.toFixed(3)} s (${Math.round(jobs / tIns)}/s) via ${sys.bulkApi}, ${INSERT_CHUNK}/chunk`);

  const poller = new pg.Client(cfg);
  await poller.connect();
  const queuedEmpty = async () => {
    const { rows } = await poller.query(sys.depthSql);
    return Number(rows[0].n) === 0;
  };

  // The clock starts when the first fetch is issued (pg-boss) / run() is called
  // (graphile; runner start-up is inside the window).
  const start = now();
  const w = await sys.startWorkers({ workers, batch, queuedEmpty });
  const fast = () => w.allExited() || w.completed() >= jobs;
  const { t, remaining } = await waitEmpty(poller, sys.remainingSql, fast, start + maxSeconds);
  const seconds = t - start;
  const partial = remaining > 0;
  const done = jobs - remaining; // committed completions at time t
  if (partial) log(`PEER_MAX_SECONDS=${maxSeconds} reached: ${done} of ${jobs} jobs completed; stopping the workers`);

  log(`workers completed ${w.completed()} (handler/loop count)`);
  await w.stop();
  log('final states:', await sys.finalStates(admin));
  await poller.end();
  if (!partial && w.completed() !== jobs) log(`WARNING: workers report ${w.completed()} != ${jobs}`);

  const rate = done / seconds;
  log(`${partial ? 'PARTIAL: ' : ''}drained ${done} jobs in ${seconds.toFixed(3)} s = ${Math.round(rate)} jobs/s`);
  return {
    system: sys.name,
    workload: 'burn',
    clients: workers,
    batch,
    jobs: done,
    seconds: Number(seconds.toFixed(4)),
    rate: Number(rate.toFixed(1)),
    partial,
  };
}

// -------------------------------------------------------------- steady --
// Forked producer: opens its connections, waits for {go, t0}, sends job i of
// N = RATE * SECONDS at t0 + i / RATE (absolute schedule) from PRODUCERS
// concurrent promises, never starting a send after t0 + SECONDS.
async function producerMain(args) {
  const [system, conninfo, rateS, secondsS, producersS, queue] = args;
  const rate = Number(rateS);
  const seconds = Number(secondsS);
  const producers = parseInt(producersS, 10);
  const sys = makeSystem(system, parseConninfo(conninfo), queue);
  const prod = await sys.openProducer(producers);

  const msg = (type) => new Promise((resolve) => {
    const h = (m) => { if (m.type === type) { process.off('message', h); resolve(m); } };
    process.on('message', h);
  });
  process.on('message', (m) => { if (m.type === 'ping') process.send({ type: 'pong', tp: m.tp, tc: nowMs() }); });
  let finished = false;
  process.on('disconnect', () => { if (!finished) process.exit(3); }); // the driver died
  const go = msg('go');
  process.send({ type: 'ready', api: prod.api });
  const { t0 } = await go;

  const total = Math.round(rate * seconds);
  const interval = 1000 / rate;
  const stopAt = t0 + seconds * 1000;
  let next = 0;
  let sent = 0;
  let lastEnd = t0;
  let lagMax = 0;
  let lagSum = 0;
  let sendSum = 0;
  async function one() {
    for (;;) {
      if (next >= total) return;
      const due = t0 + next * interval;
      if (nowMs() >= stopAt) return;
      next++;
      const ahead = due - nowMs();
      if (ahead >= 1) await sleep(ahead);
      const ts = nowMs();
      const lag = Math.max(0, ts - due);
      lagSum += lag;
      if (lag > lagMax) lagMax = lag;
      await prod.send({ t: ts });
      sent++;
      const te = nowMs();
      sendSum += te - ts;
      if (te > lastEnd) lastEnd = te;
    }
  }
  await Promise.all(Array.from({ length: producers }, one));
  await new Promise((r) => process.send({ type: 'done', sent, total, lastEnd, lagMax, lagMean: sent ? lagSum / sent : 0, sendMean: sent ? sendSum / sent : 0 }, r));
  await prod.close();
  finished = true;
  process.disconnect();
  process.exit(0);
}

// Fork the producer and talk to it; rejects if it dies before 'done'.
function startProducer(sysName, conninfo, rate, seconds, producers, queue) {
  const child = fork(__filename, ['--producer', sysName, conninfo, String(rate), String(seconds), String(producers), queue],
    { stdio: ['ignore', 2, 2, 'ipc'] });
  const waiters = new Map();
  let failed = null;
  const failAll = (e) => { failed = e; for (const [, w] of waiters) w.reject(e); waiters.clear(); };
  child.on('message', (m) => {
    const w = waiters.get(m.type);
    if (w) { waiters.delete(m.type); w.resolve(m); }
  });
  child.on('exit', (code, signal) => {
    if (code !== 0) failAll(new Error(`producer exited with ${signal || code}`));
  });
  const exited = new Promise((r) => child.once('exit', r));
  return {
    expect(type) {
      if (failed) return Promise.reject(failed);
      return new Promise((resolve, reject) => waiters.set(type, { resolve, reject }));
    },
    send: (m) => child.send(m),
    exited,
    kill: () => { if (child.exitCode === null) child.kill('SIGTERM'); },
  };
}

async function runSteady(sys, admin, cfg, conninfo, workers, batch, rate, seconds, maxSeconds) {
  const producers = Math.round(envNumber('PEER_PRODUCERS', Math.max(4, Math.min(32, Math.ceil(rate / 50)))));
  const pollMs = envNumber('PEER_POLL_MS', 10);
  await sys.setup(admin, workers);
  const sizeBefore = await schemaSize(admin, sys.schema);

  const hist = new SigFigHist();
  let received = 0;
  let recording = true; // off once the drain is over (or capped)
  const record = (data, tRecv) => {
    if (!recording) return;
    received++;
    if (data && typeof data.t === 'number') hist.record((tRecv - data.t) * 1000);
    else log('WARNING: job without an enqueue timestamp');
  };
  const w = await sys.startWorkers({
    workers,
    batch,
    idleMs: pollMs,
    onJobs: (jobs) => { const t = nowMs(); for (const j of jobs) record(j.data, t); }, // pg-boss: fetch returned
    onJob: (payload) => record(payload, nowMs()), // graphile: handler called
  });
  if (sys.name === 'pgboss') log(`pg-boss steady workers: ${workers} fetch loops, batchSize ${batch}, sleep ${pollMs} ms after an empty fetch`);

  const prod = startProducer(sys.name, conninfo, rate, seconds, producers, sys.queue || 'steady');
  let out;
  try {
    const ready = await prod.expect('ready');
    // Clock check: both processes stamp epoch ms from performance.timeOrigin.
    let best = null;
    for (let i = 0; i < 10; i++) {
      const tp = nowMs();
      const pong = prod.expect('pong');
      prod.send({ type: 'ping', tp });
      const m = await pong;
      const tr = nowMs();
      if (!best || tr - tp < best.rtt) best = { rtt: tr - tp, offset: m.tc - (tp + tr) / 2 };
    }
    log(`producer ready: ${producers} concurrent ${ready.api} calls, target ${rate}/s for ${seconds} s; ` +
      `clock offset producer-driver ${(best.offset * 1000).toFixed(0)} us (ipc rtt ${(best.rtt * 1000).toFixed(0)} us)`);

    // Queue depth sampler on its own connection, every 200 ms of the window.
    const sampler = new pg.Client(cfg);
    await sampler.connect();
    const poller = new pg.Client(cfg);
    await poller.connect();

    const t0 = nowMs() + 50;
    const doneMsg = prod.expect('done');
    prod.send({ type: 'go', t0 });
    const depths = [];
    const windowEnd = t0 + seconds * 1000;
    const sampling = (async () => {
      for (let k = 0; ; k++) {
        let due = t0 + k * DEPTH_SAMPLE_MS;
        if (due < nowMs()) { k = Math.ceil((nowMs() - t0) / DEPTH_SAMPLE_MS); due = t0 + k * DEPTH_SAMPLE_MS; }
        if (due > windowEnd) return;
        await sleep(Math.max(0, due - nowMs()));
        const { rows } = await sampler.query(sys.depthSql);
        depths.push(Number(rows[0].n));
      }
    })();

    const done = await doneMsg;
    const tProdEnd = now();
    const sent = done.sent;
    if (sent === 0) throw new Error('the producer sent no job');
    const prodSeconds = (done.lastEnd - t0) / 1000;
    log(`producer: sent ${sent} of ${done.total} in ${prodSeconds.toFixed(3)} s = ${(sent / prodSeconds).toFixed(1)}/s; ` +
      `send call mean ${done.sendMean.toFixed(3)} ms; start lag vs schedule mean ${done.lagMean.toFixed(3)} ms max ${done.lagMax.toFixed(3)} ms`);
    await sampling;
    await sampler.end();

    // Drain: every sent job received by a worker and no incomplete job left.
    const deadline = tProdEnd + maxSeconds;
    let remaining = null;
    for (;;) {
      if (received >= sent) {
        const { rows } = await poller.query(sys.remainingSql);
        remaining = Number(rows[0].n);
        if (remaining === 0) break;
      }
      if (now() >= deadline) break;
      await sleep(received >= sent ? 2 : 20);
    }
    recording = false;
    const drainSeconds = now() - tProdEnd;
    const partial = received < sent || remaining !== 0;
    if (partial) log(`PEER_MAX_SECONDS=${maxSeconds} reached in the drain: received ${received} of ${sent} jobs, ${remaining ?? '?'} incomplete in the table`);
    log(`drain after the window: ${drainSeconds.toFixed(3)} s; workers completed ${w.completed()}`);

    await w.stop();
    await prod.exited;
    await poller.end();
    log('final states:', await sys.finalStates(admin));

    const dead = await deadTuples(admin, sys.schema);
    const sizeAfter = await schemaSize(admin, sys.schema);
    const maxDepth = depths.length ? Math.max(...depths) : null;
    const meanDepth = depths.length ? depths.reduce((a, b) => a + b, 0) / depths.length : null;
    const r3 = (x) => (x === null ? null : Number(x.toFixed(3)));
    log(`latency samples ${hist.total}: p50 ${hist.ms(50)} ms p99 ${hist.ms(99)} ms p99.9 ${hist.ms(99.9)} ms; ` +
      `depth samples ${depths.length}: max ${maxDepth} mean ${r3(meanDepth)}; dead tuples ${dead}`);
    out = {
      system: sys.name,
      workload: 'steady',
      clients: workers,
      batch,
      target_rate: rate,
      rate: Number((sent / prodSeconds).toFixed(1)),
      jobs: sent,
      seconds: Number(prodSeconds.toFixed(4)),
      p50_ms: hist.ms(50),
      p99_ms: hist.ms(99),
      p999_ms: hist.ms(99.9),
      max_ms: hist.total ? hist.max / 1000 : null,
      mean_ms: hist.total ? Number((hist.sum / hist.total / 1000).toFixed(3)) : null,
      max_depth: maxDepth,
      mean_depth: r3(meanDepth),
      dead_tuples: dead,
      samples: hist.total,
      completed: w.completed(),
      undrained: Math.max(0, sent - received),
      producers,
      lag_max_ms: Number(done.lagMax.toFixed(3)),
      drain_s: Number(drainSeconds.toFixed(3)),
      size_before: sizeBefore,
      size_after: sizeAfter,
      partial,
    };
    if (sys.name === 'pgboss') out.idle_poll_ms = pollMs;
  } catch (e) {
    prod.kill();
    throw e;
  }
  return out;
}

// n_dead_tup summed over the system's tables, read after every worker and
// producer connection has been closed (a backend flushes its table stats when
// it exits; the statistics of live backends reach pg_stat_* up to ~1 s late).
// Polled every 100 ms until two readings agree (at least 300 ms, at most 3 s).
async function deadTuples(admin, schema) {
  await admin.query('select pg_stat_force_next_flush()');
  const sql = `select relname, n_dead_tup, n_live_tup, autovacuum_count, vacuum_count
               from pg_stat_user_tables where schemaname = $1 order by relname`;
  const t0 = now();
  let prev = null;
  let rows = [];
  for (;;) {
    await sleep(100);
    ({ rows } = await admin.query(sql, [schema]));
    const sum = rows.reduce((a, r) => a + Number(r.n_dead_tup), 0);
    if ((prev === sum && now() - t0 >= 0.3) || now() - t0 >= 3) {
      log(`dead tuples (${schema}): ` + rows.filter((r) => Number(r.n_dead_tup) || Number(r.n_live_tup))
        .map((r) => `${r.relname} dead=${r.n_dead_tup} live=${r.n_live_tup} autovacuums=${r.autovacuum_count}`).join('; '));
      return sum;
    }
    prev = sum;
  }
}

// Bytes of the system's tables (heap + indexes + TOAST; partitions included).
async function schemaSize(admin, schema) {
  const { rows } = await admin.query(
    `select coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint as b
       from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = $1 and c.relkind = 'r'`, [schema]);
  return Number(rows[0].b);
}

// ------------------------------------------------------------------ main --
const posInt = (s) => (/^[0-9]+$/.test(s || '') ? parseInt(s, 10) : NaN);

async function main() {
  const args = process.argv.slice(2);
  const [system, conninfo, third, workersS, batchS] = args;
  const steady = third === 'steady';
  if (args.length !== (steady ? 7 : 5)) usage();
  if (system !== 'pgboss' && system !== 'graphile') usage(`unknown system ${system}`);
  const workers = posInt(workersS);
  const batch = posInt(batchS);
  if (!(workers > 0 && batch > 0)) usage('WORKERS and BATCH must be positive integers');
  const maxSeconds = envNumber('PEER_MAX_SECONDS', 60);

  const cfg = parseConninfo(conninfo);
  const admin = new pg.Client(cfg);
  await admin.connect();
  const { rows } = await admin.query(
    "select current_setting('fsync') as fsync, current_setting('synchronous_commit') as sc, current_setting('server_version') as v");
  const settings = `server ${rows[0].v} fsync=${rows[0].fsync} synchronous_commit=${rows[0].sc}`;

  let out;
  if (steady) {
    const rate = Number(args[5]);
    const seconds = Number(args[6]);
    if (!(rate > 0 && seconds > 0)) usage('RATE and SECONDS must be positive numbers');
    log(`${system} steady: workers=${workers} batch=${batch} rate=${rate}/s seconds=${seconds} max drain=${maxSeconds} s; ${settings}`);
    const sys = makeSystem(system, cfg, 'steady');
    sys.queue = 'steady';
    out = await runSteady(sys, admin, cfg, conninfo, workers, batch, rate, seconds, maxSeconds);
  } else {
    const jobs = posInt(third);
    if (!(jobs > 0)) usage('JOBS must be a positive integer');
    log(`${system} burn: jobs=${jobs} workers=${workers} batch=${batch} max=${maxSeconds} s; ${settings}`);
    out = await runBurn(makeSystem(system, cfg, 'burn'), admin, cfg, jobs, workers, batch, maxSeconds);
  }
  await admin.end();
  process.stdout.write(JSON.stringify(out) + '\n');
}

if (ROLE === 'producer') {
  producerMain(process.argv.slice(3)).catch((e) => {
    console.error('producer failed:', (e && e.stack) || e);
    process.exit(1);
  });
} else {
  main().then(
    () => process.exit(0),
    (e) => { console.error('burn.js failed:', (e && e.stack) || e); process.exit(1); },
  );
}
