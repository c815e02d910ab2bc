/**
 * SiloWorker: leases tasks of one task group and runs a handler per task.
 *
 * One lease loop asks silo.lease for as many tasks as there are free slots
 * (at most batchSize), again at once while leases come back full, else when
 * a wake-up arrives (LISTEN silo_task_ready on a connection of its own) or
 * the poll interval has passed.  Each task runs handler(task, { signal });
 * successes are reported in batches with silo.complete_many (every success
 * that arrives while a batch is in flight joins the next one), failures with
 * silo.fail, cancelled jobs with silo.ack_cancel.  Every lease is renewed
 * every third of the lease (silo.heartbeat, one statement for all that are
 * due); a heartbeat that says the job was cancelled aborts the task's
 * signal.  Heartbeats run on a connection of their own, so reports waiting
 * on locks cannot starve them; and whatever becomes of them, a handler whose
 * lease has run out by the worker's own clock (the heartbeats did not get
 * through in time) has its signal aborted as lost.  Refresh tasks of
 * floating concurrency limits go to refreshHandler and are answered with
 * silo.report_refresh or silo.fail_refresh.
 *
 * A lost connection is replaced (with a backoff); handlers keep running and
 * their reports are retried until their lease would have expired, since a
 * lease belongs to the worker id, not to a connection.  stop() stops
 * leasing, gives running handlers a grace period, then aborts their signals
 * and hands back with silo.release the tasks whose handlers then return
 * promptly; the others' leases are left to run out.  stop() ends within
 * graceMs + stopTimeoutMs, whatever handlers and the server do.
 */

import os from 'node:os';
import { randomUUID } from 'node:crypto';

import pg from 'pg';

import {
  ConnectionError, JobCancelledError, LeaseLostError, LeaseNotFoundError, LeaseOwnerMismatchError,
  NotOwnerError, SiloError, WorkerStoppingError, isConnectionError, isStalePlanError, toSiloError,
} from './errors';
import type { Json, RefreshTask, Task } from './types';
import { SQL_LEASE, toTask } from './leasedTask';
import {
  Backoff, destroyClient, poolQuery, sleep, withTimeout,
} from './util';

/** What a handler gets besides its task. */
export interface TaskContext {
  /**
   * Aborted when the job is cancelled (reason: JobCancelledError), when the
   * worker lost the task's lease (LeaseLostError: a heartbeat found it gone,
   * or no heartbeat got through before it ran out), or when stop()'s grace
   * period ran out (WorkerStoppingError).  Stop the work when it fires: the
   * job may run elsewhere once its lease is gone.
   */
  signal: AbortSignal;
  /** This worker's id, as the leases name it. */
  workerId: string;
}

/**
 * Runs one job attempt.  What it returns (any JSON value) becomes the job's
 * result, undefined none; what it throws fails the attempt (a TaskFailure
 * chooses the error code and data), and the job retries if its policy
 * allows.
 */
export type TaskHandler<P = any, R = unknown> = (task: Task<P>, ctx: TaskContext) => R | Promise<R>;

/**
 * Computes a floating concurrency limit's new max (an integer >= 1) for a
 * refresh task; a throw keeps the old max and makes silo retry with backoff.
 */
export type RefreshHandler = (task: RefreshTask, ctx: TaskContext) => number | Promise<number>;

/** Throw this from a handler to fail the attempt with a code and data of your choice. */
export class TaskFailure extends Error {
  /** silo's error_code, 1-256 characters. */
  readonly errorCode: string;
  /** silo's error_data (any JSON value). */
  readonly data: Json | undefined;

  constructor(errorCode: string, data?: Json, message?: string) {
    super(message ?? errorCode);
    this.name = 'TaskFailure';
    this.errorCode = errorCode;
    this.data = data;
  }
}

/** Context passed to onError. */
export interface WorkerErrorContext {
  /** What the worker was doing: 'connect', 'listen', 'lease', 'heartbeat', 'complete', 'fail', ... */
  phase: string;
  taskId?: string;
  jobId?: string;
}

export interface SiloWorkerOptions<P = any, R = unknown> {
  /** A connection URL, or pg client options (host, user, ...); PG* environment variables fill in the rest. */
  connection?: string | pg.ClientConfig;
  /** The task group to lease from. */
  taskGroup: string;
  handler: TaskHandler<P, R>;
  /** For groups whose jobs use floating concurrency limits; without it a refresh keeps the current max. */
  refreshHandler?: RefreshHandler;
  /** Default: `<hostname>-<pid>-<random>`. Reports must come from the same worker id and role. */
  workerId?: string;
  /** Lease only these tenants' tasks (silo.lease's tenants filter). */
  tenants?: string[];
  /** Tasks run at once, at most (default 10). */
  concurrency?: number;
  /** Tasks asked for per lease, at most (default: concurrency, at most 1000). */
  batchSize?: number;
  /** Lease length in ms, 100-3,600,000 (default 30,000). */
  leaseMs?: number;
  /** How often each lease is renewed (default: a third of leaseMs; must be below half of it). */
  heartbeatIntervalMs?: number;
  /** Lease this often without a wake-up (default 1000 ms). */
  pollIntervalMs?: number;
  /** LISTEN silo_task_ready for wake-ups (default true; false: poll only, e.g. behind PgBouncer). */
  listen?: boolean;
  /** Report successes in batches with silo.complete_many (default true). */
  batchCompletions?: boolean;
  /** stop()'s default grace period in ms (default 10,000). */
  graceMs?: number;
  /**
   * How long stop() may take beyond the grace period, in ms (default
   * 10,000): for handlers to return after their signals were aborted, and
   * for the last reports.  Then the connections are closed regardless.
   */
  stopTimeoutMs?: number;
  /** Connections for leases and reports (default 2), besides the listening one and the heartbeating one. */
  poolSize?: number;
  /** First and largest delay between reconnection attempts (default 100 and 5000 ms). */
  reconnectDelayMs?: { initial?: number; max?: number };
  /** Errors the worker recovers from, for logging (default: console.error). */
  onError?: (error: Error, context: WorkerErrorContext) => void;
}

/** Counters since start(). */
export interface WorkerStats {
  leased: number;
  succeeded: number;
  failed: number;
  cancelled: number;
  released: number;
  /** Tasks whose lease was lost, or whose report did not land. */
  lost: number;
  refreshed: number;
  refreshFailed: number;
  /**
   * Cluster mode: heartbeats and reports that met an SL020 naming the
   * task's new owner and were sent on there (its shard moved, with the lease).
   */
  followed: number;
  /** Handlers running now (or waiting for an earlier attempt of their job). */
  running: number;
  /** Times a connection was made again after a failure. */
  reconnects: number;
}

type ExecState = 'queued' | 'running' | 'reporting' | 'done';

interface Execution {
  task: Task | RefreshTask;
  /**
   * Made when the handler first reads ctx.signal (most never do): until
   * then an abort only records its reason, which the signal then carries.
   */
  controller: AbortController | null;
  /** The signal was aborted (or will be, once made), with abortReason. */
  aborted: boolean;
  abortReason: unknown;
  state: ExecState;
  cancelled: boolean;
  lost: boolean;
  released: boolean;
  /** Our estimate of when the lease ends (renewed by each heartbeat). */
  leaseDeadline: number;
  nextHeartbeat: number;
  /** stop() aborted the signal: stop() decides what is reported. */
  stopAborted: boolean;
  /** stop() gave up on the handler: no more heartbeats, nothing reported, the lease runs out. */
  abandoned: boolean;
  /** The handler has returned or thrown (or will never run). */
  handlerDone: boolean;
  /** Resolves once handlerDone is set; made only when something waits for it (settledOf). */
  settled: Promise<void> | null;
  resolveSettled: (() => void) | null;
  /** tenant NUL job id: its key in activeJobs (null for a refresh task). */
  jobKey: string | null;
  /** What complete reports for it (JSON text or null), once queued for a batched completion. */
  result: string | null;
  /** Where its heartbeats and reports go after an SL020 (cluster mode): the new owner's pool. */
  target: pg.Pool | null;
}

/**
 * The concurrency budget the members' workers of a SiloClusterWorker share:
 * each reserves slots before it leases, gives back what the lease did not
 * fill, and frees a slot when a handler returns.  wakeAll wakes the members'
 * lease loops, starting from the next one each time (round robin).
 * @internal
 */
export class SharedSlots {
  used = 0;
  private readonly wakers: Array<() => void> = [];
  private next = 0;

  constructor(readonly limit: number) {}

  /** Register a member's wake-up. */
  add(wake: () => void): void {
    this.wakers.push(wake);
  }

  /** Slots not reserved or in use. */
  get free(): number {
    return this.limit - this.used;
  }

  /** Wake every member's lease loop, round robin. */
  wakeAll(): void {
    const n = this.wakers.length;
    if (n === 0) return;
    const start = this.next++ % n;
    for (let i = 0; i < n; i++) this.wakers[(start + i) % n]();
  }
}

/**
 * What a SiloClusterWorker gives each of its members' workers.
 * @internal
 */
export interface WorkerInternals {
  /** The concurrency budget shared by the members. */
  slots?: SharedSlots;
  /** Pass the task's tenant on heartbeats and reports (cluster mode: a moved shard answers SL020). */
  passTenant?: boolean;
  /** The pool of the node an SL020 names (null: do not follow). */
  redirect?: (err: NotOwnerError) => pg.Pool | null;
}

const SQL_HEARTBEAT_MANY = 'SELECT t::text AS task_id, silo.heartbeat(t, $1::text, $3::int) AS cancelled'
  + ' FROM unnest($2::uuid[]) AS t';
const SQL_HEARTBEAT = 'SELECT silo.heartbeat($1::uuid, $2::text, $3::int) AS cancelled';
const SQL_COMPLETE_MANY = 'SELECT silo.complete_many($1::uuid[], $2::text, $3::jsonb[]) AS task_id';
const SQL_COMPLETE = 'SELECT silo.complete($1::uuid, $2::text, $3::jsonb)';
const SQL_FAIL = 'SELECT silo.fail($1::uuid, $2::text, $3::text, $4::jsonb)';
const SQL_ACK_CANCEL = 'SELECT silo.ack_cancel($1::uuid, $2::text)';
const SQL_RELEASE = 'SELECT silo.release($1::uuid, $2::text)';
const SQL_REPORT_REFRESH = 'SELECT silo.report_refresh($1::uuid, $2::text, $3::int)';
const SQL_FAIL_REFRESH = 'SELECT silo.fail_refresh($1::uuid, $2::text, $3::text)';

/*
 * The same statements with the task's tenant as the last argument (silo
 * 1.7; cluster mode): a node the task's shard moved away from answers
 * SL020 with the new owner instead of SL001.
 */
const SQL_HEARTBEAT_MANY_T = 'SELECT u.t::text AS task_id, silo.heartbeat(u.t, $1::text, $3::int, u.tn) AS cancelled'
  + ' FROM unnest($2::uuid[], $4::text[]) AS u(t, tn)';
const SQL_HEARTBEAT_T = 'SELECT silo.heartbeat($1::uuid, $2::text, $3::int, $4::text) AS cancelled';
const WITH_TENANT = new Map<string, string>([
  [SQL_COMPLETE, 'SELECT silo.complete($1::uuid, $2::text, $3::jsonb, $4::text)'],
  [SQL_FAIL, 'SELECT silo.fail($1::uuid, $2::text, $3::text, $4::jsonb, $5::text)'],
  [SQL_ACK_CANCEL, 'SELECT silo.ack_cancel($1::uuid, $2::text, $3::text)'],
  [SQL_RELEASE, 'SELECT silo.release($1::uuid, $2::text, $3::text)'],
  [SQL_REPORT_REFRESH, 'SELECT silo.report_refresh($1::uuid, $2::text, $3::int, $4::text)'],
  [SQL_FAIL_REFRESH, 'SELECT silo.fail_refresh($1::uuid, $2::text, $3::text, $4::text)'],
]);
/** SL020 hints a report follows, at most. */
const MAX_REPORT_HOPS = 3;

const MAX_BATCH = 1000;
/** After stop() aborts the signals: how long handlers get to return before their tasks are left to lapse. */
const SETTLE_AFTER_ABORT_MS = 1000;
/** How often the listening connection is checked with SELECT 1, and how long the answer may take. */
const LISTENER_PING_MS = 30_000;
const LISTENER_PING_TIMEOUT_MS = 10_000;
/** How long the pool's connect (or the wait for a free connection) may take. */
const CONNECT_TIMEOUT_MS = 10_000;

function truncate(s: string, max: number): string {
  const chars = Array.from(s);
  return chars.length <= max ? s : `${chars.slice(0, max - 3).join('')}...`;
}

/** JSON text of value, or of a note saying why it is not JSON (BigInt, a cycle, a throwing toJSON). */
function jsonOrNote(value: unknown): string | null {
  try {
    return JSON.stringify(value) ?? null;
  } catch (err) {
    return JSON.stringify({ message: `not JSON: ${safeMessage(err)}` });
  }
}

function safeMessage(err: unknown): string {
  try {
    return err instanceof Error ? String(err.message) : String(err);
  } catch {
    return 'unprintable error';
  }
}

/** silo.fail's error_code and error_data for what a handler threw. */
function failureOf(err: unknown): { code: string; data: string | null } {
  if (err instanceof TaskFailure) {
    const own: unknown = err.errorCode;
    const code = typeof own === 'string' && own.length > 0 ? own : 'ERROR';
    return { code: truncate(code, 256), data: err.data === undefined ? null : jsonOrNote(err.data) };
  }
  if (err instanceof Error) {
    const own = (err as { code?: unknown }).code;
    const name = typeof err.name === 'string' && err.name.length > 0 ? err.name : 'Error';
    const code = typeof own === 'string' && own.length > 0 ? own : name;
    return { code: truncate(code, 256), data: jsonOrNote({ name, message: safeMessage(err) }) };
  }
  return { code: 'ERROR', data: jsonOrNote({ message: safeMessage(err) }) };
}

export class SiloWorker<P = any, R = unknown> {
  readonly workerId: string;
  readonly taskGroup: string;

  private readonly handler: TaskHandler<P, R>;
  private readonly refreshHandler: RefreshHandler | undefined;
  private readonly tenants: string[] | null;
  private readonly concurrency: number;
  private readonly batchSize: number;
  private readonly leaseMs: number;
  private readonly heartbeatMs: number;
  private readonly pollMs: number;
  private readonly listen: boolean;
  private batchCompletions: boolean;
  private readonly graceMs: number;
  private readonly stopTimeoutMs: number;
  private readonly reconnectInitial: number;
  private readonly reconnectMax: number;
  private readonly onError: (error: Error, context: WorkerErrorContext) => void;
  private readonly config: pg.ClientConfig;

  private pool: pg.Pool | null = null;
  private listener: pg.Client | null = null;
  private listenerBackoff: Backoff;
  private listenerTimer: NodeJS.Timeout | null = null;
  private listenerPing: NodeJS.Timeout | null = null;
  /** The connection heartbeats run on (made again when it fails). */
  private hbClient: pg.Client | null = null;
  /** When the last heartbeat statement was sent (after connecting): leases are renewed from then on. */
  private hbSentAt = 0;

  private started = false;
  private stopping = false;
  private closed = false;
  private stopPromise: Promise<void> | null = null;
  private startPromise: Promise<void> | null = null;
  /** stop()'s last moment: reports are not retried past it. */
  private hardDeadline = Infinity;
  private leaseLoopDone: Promise<void> = Promise.resolve();
  private heartbeatLoopDone: Promise<void> = Promise.resolve();
  private heartbeatWake: (() => void) | null = null;

  /** Every task from its lease until its report is settled, by task id. */
  private readonly executions = new Map<string, Execution>();
  /** The latest attempt of each job running (or waiting to run) here, by tenant and job id. */
  private readonly activeJobs = new Map<string, Execution>();
  private slotsUsed = 0;
  private readonly idleWaiters: Array<() => void> = [];
  private readonly reports = new Set<Promise<unknown>>();

  /** Successes waiting for the next silo.complete_many (each exec's result says what it returned). */
  private pending: Execution[] = [];
  private flushing = false;
  private flushScheduled = false;

  private leaseWanted = true;
  private notified = false;
  private nextPollAt = 0;
  private leaseNotBefore = 0;
  private wakeLoop: (() => void) | null = null;

  private readonly slots: SharedSlots | null;
  private readonly passTenant: boolean;
  private readonly redirect: ((err: NotOwnerError) => pg.Pool | null) | null;

  private readonly counters: Omit<WorkerStats, 'running'> = {
    leased: 0, succeeded: 0, failed: 0, cancelled: 0, released: 0, lost: 0,
    refreshed: 0, refreshFailed: 0, reconnects: 0, followed: 0,
  };

  constructor(options: SiloWorkerOptions<P, R>, internals: WorkerInternals = {}) {
    this.slots = internals.slots ?? null;
    this.passTenant = internals.passTenant ?? false;
    this.redirect = internals.redirect ?? null;
    this.slots?.add(() => this.wake());
    if (!options || typeof options.handler !== 'function') throw new TypeError('handler is required');
    if (typeof options.taskGroup !== 'string' || options.taskGroup === '') {
      throw new TypeError('taskGroup is required');
    }
    const int = (name: string, v: number | undefined, dflt: number, min: number, max: number): number => {
      const n = v ?? dflt;
      if (!Number.isInteger(n) || n < min || n > max) {
        throw new RangeError(`${name} must be an integer between ${min} and ${max}`);
      }
      return n;
    };
    this.taskGroup = options.taskGroup;
    this.handler = options.handler;
    this.refreshHandler = options.refreshHandler;
    this.workerId = options.workerId ?? `${os.hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
    this.tenants = options.tenants ? [...options.tenants] : null;
    this.concurrency = int('concurrency', options.concurrency, 10, 1, 100_000);
    this.batchSize = int('batchSize', options.batchSize, Math.min(this.concurrency, MAX_BATCH), 1, MAX_BATCH);
    this.leaseMs = int('leaseMs', options.leaseMs, 30_000, 100, 3_600_000);
    this.heartbeatMs = int('heartbeatIntervalMs', options.heartbeatIntervalMs,
      Math.max(1, Math.floor(this.leaseMs / 3)), 1, 3_600_000);
    if (this.heartbeatMs * 2 >= this.leaseMs) {
      throw new RangeError(`heartbeatIntervalMs (${this.heartbeatMs}) must be below half of leaseMs (${this.leaseMs}),`
        + ' so that a lease survives a heartbeat that fails once');
    }
    this.pollMs = int('pollIntervalMs', options.pollIntervalMs, 1000, 1, 3_600_000);
    this.listen = options.listen ?? true;
    this.batchCompletions = options.batchCompletions ?? true;
    this.graceMs = int('graceMs', options.graceMs, 10_000, 0, 2_147_483_647);
    this.stopTimeoutMs = int('stopTimeoutMs', options.stopTimeoutMs, 10_000, 0, 2_147_483_647);
    this.reconnectInitial = int('reconnectDelayMs.initial', options.reconnectDelayMs?.initial, 100, 1, 600_000);
    this.reconnectMax = int('reconnectDelayMs.max', options.reconnectDelayMs?.max, 5000, this.reconnectInitial, 600_000);
    this.listenerBackoff = new Backoff(this.reconnectInitial, this.reconnectMax);
    this.onError = options.onError ?? ((error, ctx) => {
      console.error(`silo worker ${this.workerId}: ${ctx.phase}${ctx.taskId ? ` (task ${ctx.taskId})` : ''}:`, error.message);
    });
    const poolSize = int('poolSize', options.poolSize, 2, 1, 100);
    const conn = options.connection;
    this.config = {
      application_name: 'silo-node-worker',
      keepAlive: true,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
      ...(typeof conn === 'string' ? { connectionString: conn } : conn ?? {}),
    };
    this.poolConfig = { ...this.config, max: poolSize, idleTimeoutMillis: 60_000 };
  }

  private readonly poolConfig: pg.PoolConfig;

  /** Counters since start(), and the handlers running now. */
  get stats(): WorkerStats {
    return { ...this.counters, running: this.slotsUsed };
  }

  /** Whether start() has run and stop() has not begun. */
  get isRunning(): boolean {
    return this.started && !this.stopping;
  }

  /**
   * Connect (and LISTEN), then lease in the background.  Rejects when the
   * first connection fails (ConnectionError); later failures are retried.
   * A worker starts once: after stop(), make a new one.
   */
  async start(): Promise<void> {
    if (this.stopping) throw new SiloError('a stopped worker cannot start again: make a new one');
    if (this.started) return this.startPromise ?? undefined;
    this.started = true;
    this.startPromise = this.begin();
    return this.startPromise;
  }

  private async begin(): Promise<void> {
    const pool = new pg.Pool(this.poolConfig);
    pool.on('error', () => undefined); /* an idle connection died: the pool drops it */
    this.pool = pool;
    try {
      if (this.listen) {
        await this.connectListener();
      } else {
        await poolQuery(pool, { text: 'SELECT 1' });
      }
    } catch (err) {
      this.closed = true;
      this.stopping = true;
      this.pool = null;
      await pool.end().catch(() => undefined);
      throw toSiloError(err);
    }
    if (this.stopping) return; /* stop() was called meanwhile: it closes what we opened */
    this.leaseLoopDone = this.leaseLoop();
    this.heartbeatLoopDone = this.heartbeatLoop();
  }

  /**
   * Stop: lease no more, let running handlers finish for graceMs (default:
   * the graceMs option), then abort their signals (WorkerStoppingError).
   * Handlers that return within a second of that have their tasks handed
   * back with silo.release (a refresh task is failed with "worker shutting
   * down"); the tasks of handlers still running then are not released
   * (another worker could run the same attempt while they go on): nothing
   * is reported for them and their leases run out.  Then report what has
   * finished and close the connections.  Resolves within graceMs +
   * stopTimeoutMs, whatever handlers and the server do (reports still
   * unanswered then are given up).  Calling it again returns the same
   * promise.
   */
  stop(options: { graceMs?: number } = {}): Promise<void> {
    if (!this.stopPromise) this.stopPromise = this.shutdown(options.graceMs ?? this.graceMs);
    return this.stopPromise;
  }

  // ---------------------------------------------------------------------
  // connections

  /** One statement on a pooled connection; name labels it, and names the prepared statement when prepared. */
  private async q<T extends Record<string, unknown> = Record<string, unknown>>(
    text: string, values: unknown[], name?: string, prepared = true, target: pg.Pool | null = null,
  ): Promise<T[]> {
    if (!this.pool || this.closed) throw new SiloError('the worker is stopped');
    const res = await poolQuery<T>(target ?? this.pool, { text, values, name: prepared ? name : undefined });
    return res.rows;
  }

  /**
   * One heartbeat statement on the heartbeating connection (made when
   * missing).  An answer slower than the heartbeat interval counts as a
   * lost connection: the connection is dropped and made again.
   */
  private async hq<T extends Record<string, unknown> = Record<string, unknown>>(
    text: string, values: unknown[], name: string,
  ): Promise<T[]> {
    if (this.closed) throw new SiloError('the worker is stopped');
    const limit = Math.max(500, this.heartbeatMs);
    const timedOut = (): Error => new ConnectionError(`no answer to the heartbeat within ${limit} ms`);
    let c = this.hbClient;
    if (!c) {
      const fresh = new pg.Client(this.config);
      const drop = (): void => {
        if (this.hbClient === fresh) this.hbClient = null;
      };
      fresh.on('error', drop);
      fresh.on('end', drop);
      this.hbClient = fresh;
      try {
        await withTimeout(fresh.connect(), limit, timedOut);
      } catch (err) {
        drop();
        destroyClient(fresh);
        throw err;
      }
      if (this.closed) {
        drop();
        destroyClient(fresh);
        throw new SiloError('the worker is stopped');
      }
      c = fresh;
    }
    try {
      this.hbSentAt = Date.now();
      return (await withTimeout(c.query<T>({ text, values, name }), limit, timedOut)).rows;
    } catch (err) {
      if (err instanceof ConnectionError || isConnectionError(err) || isStalePlanError(err)) {
        if (this.hbClient === c) this.hbClient = null;
        destroyClient(c);
      }
      throw err;
    }
  }

  private closeHeartbeatClient(): void {
    const c = this.hbClient;
    this.hbClient = null;
    if (c) destroyClient(c, 1000);
  }

  private report(error: unknown, context: WorkerErrorContext): void {
    try {
      this.onError(toSiloError(error), context);
    } catch {
      /* a throwing onError must not stop the worker */
    }
  }

  private async connectListener(): Promise<void> {
    const client = new pg.Client(this.config);
    const lost = (err?: Error): void => {
      if (this.listener !== client) return;
      this.listener = null;
      this.stopListenerPing();
      destroyClient(client);
      if (this.closed) return;
      if (err) this.report(err, { phase: 'listen' });
      this.scheduleListenerReconnect();
    };
    client.on('error', (err) => lost(err));
    client.on('end', () => lost(new SiloError('the listening connection ended')));
    client.on('notification', (msg) => {
      if (msg.channel !== 'silo_task_ready') return;
      if (!msg.payload || msg.payload === this.taskGroup) {
        this.notified = true;
        this.wake();
      }
    });
    try {
      await client.connect();
      await client.query('LISTEN silo_task_ready');
    } catch (err) {
      client.removeAllListeners();
      destroyClient(client);
      throw err;
    }
    if (this.closed) {
      client.removeAllListeners();
      destroyClient(client);
      return;
    }
    this.listener = client;
    /*
     * A half-open connection (the server or the network gone without a
     * word) would wait for notifications forever: ask it something now and
     * then (keepAlive helps as well), and make it again if no answer comes.
     */
    this.stopListenerPing();
    this.listenerPing = setInterval(() => {
      if (this.listener !== client) return;
      withTimeout(client.query('SELECT 1'), LISTENER_PING_TIMEOUT_MS,
        () => new ConnectionError(`the listening connection did not answer within ${LISTENER_PING_TIMEOUT_MS} ms`))
        .catch((err: unknown) => lost(toSiloError(err)));
    }, LISTENER_PING_MS);
    this.listenerPing.unref();
  }

  private stopListenerPing(): void {
    if (this.listenerPing) {
      clearInterval(this.listenerPing);
      this.listenerPing = null;
    }
  }

  private scheduleListenerReconnect(): void {
    if (this.closed || this.listenerTimer) return;
    const delay = this.listenerBackoff.next();
    this.listenerTimer = setTimeout(() => {
      this.listenerTimer = null;
      if (this.closed) return;
      this.connectListener().then(() => {
        this.listenerBackoff.reset();
        this.counters.reconnects++;
        /* wake-ups sent while we were away are lost: look now */
        this.notified = true;
        this.wake();
        if (this.closed) this.closeListener();
      }, (err) => {
        this.report(err, { phase: 'listen' });
        this.scheduleListenerReconnect();
      });
    }, delay);
  }

  private closeListener(): void {
    if (this.listenerTimer) {
      clearTimeout(this.listenerTimer);
      this.listenerTimer = null;
    }
    this.stopListenerPing();
    const l = this.listener;
    this.listener = null;
    if (l) {
      l.removeAllListeners('end');
      destroyClient(l, 1000);
    }
  }

  // ---------------------------------------------------------------------
  // leasing

  private wake(): void {
    const w = this.wakeLoop;
    this.wakeLoop = null;
    if (w) w();
  }

  private waitForWake(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        if (this.wakeLoop === done) this.wakeLoop = null;
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      this.wakeLoop = done;
    });
  }

  private async leaseLoop(): Promise<void> {
    const backoff = new Backoff(this.reconnectInitial, this.reconnectMax);
    let failing = false;
    while (!this.stopping) {
      const now = Date.now();
      const free = Math.min(this.concurrency - this.slotsUsed, this.slots ? this.slots.free : Infinity);
      if (free <= 0 || this.pending.length >= Math.max(this.concurrency, this.batchSize)) {
        await this.waitForWake(this.pollMs);
        continue;
      }
      if (now < this.leaseNotBefore) {
        await this.waitForWake(this.leaseNotBefore - now);
        continue;
      }
      if (!(this.leaseWanted || this.notified || now >= this.nextPollAt)) {
        await this.waitForWake(this.nextPollAt - now);
        continue;
      }
      this.notified = false;
      const want = Math.min(this.batchSize, free);
      /* the shared budget: reserved now, what the lease does not fill given back below */
      if (this.slots) this.slots.used += want;
      let rows: Record<string, unknown>[];
      try {
        rows = await this.q(SQL_LEASE, [this.workerId, this.taskGroup, want, this.leaseMs, this.tenants], 'silo_lease');
        if (failing) {
          failing = false;
          this.counters.reconnects++;
        }
        backoff.reset();
      } catch (err) {
        this.unreserve(want);
        if (this.stopping) break;
        failing = failing || isConnectionError(err);
        this.report(err, { phase: 'lease' });
        this.leaseWanted = false;
        this.leaseNotBefore = Date.now() + backoff.next();
        continue;
      }
      const leasedAt = now;
      if (this.closed) {
        /* stop() gave up waiting for this lease: its tasks are left to lapse */
        this.unreserve(want);
        this.counters.lost += rows.length;
        break;
      }
      this.unreserve(want - rows.length);
      for (const row of rows) {
        if (!this.startTask(row, leasedAt)) this.unreserve(1);
      }
      this.leaseWanted = rows.length >= want;
      if (!this.leaseWanted) this.nextPollAt = Date.now() + this.pollMs;
    }
  }

  /** Give back n reserved slots of the shared budget. */
  private unreserve(n: number): void {
    if (!this.slots || n <= 0) return;
    this.slots.used -= n;
    this.slots.wakeAll();
  }

  /** Start a leased task; false when it was not started (it is already running here). */
  private startTask(row: Record<string, unknown>, leasedAt: number): boolean {
    const task = toTask(row);
    if (this.executions.has(task.id)) {
      /* never run one task twice */
      this.report(new SiloError(`task ${task.id} was leased again while this worker holds it`),
        { phase: 'lease', taskId: task.id });
      return false;
    }
    const exec: Execution = {
      task,
      controller: null,
      aborted: false,
      abortReason: undefined,
      state: 'queued',
      cancelled: false,
      lost: false,
      released: false,
      leaseDeadline: leasedAt + this.leaseMs,
      nextHeartbeat: leasedAt + this.heartbeatMs,
      stopAborted: false,
      abandoned: false,
      handlerDone: false,
      settled: null,
      resolveSettled: null,
      jobKey: task.kind === 'run' ? `${task.tenant}\u0000${task.jobId}` : null,
      result: null,
      target: null,
    };
    this.executions.set(task.id, exec);
    this.slotsUsed++;
    this.counters.leased++;
    /*
     * An earlier attempt of the same job may still run here (its lease was
     * lost, swept, and the retry came back to us): the new attempt waits
     * until that handler has returned, so a job never runs twice at once.
     * Attempts of one job thus run one after the other, each once the
     * handler of the one leased before it has returned.
     */
    const prev = exec.jobKey === null ? undefined : this.activeJobs.get(exec.jobKey);
    if (exec.jobKey !== null) this.activeJobs.set(exec.jobKey, exec);
    if (prev && !prev.handlerDone) {
      const go = (): void => this.run(exec);
      this.settledOf(prev).then(go, go);
    } else {
      this.run(exec);
    }
    return true;
  }

  /** Run exec's handler and report its outcome (execute), reporting what should never happen. */
  private run(exec: Execution): void {
    this.execute(exec).catch((err: unknown) => this.report(err,
      { phase: 'execute', taskId: exec.task.id, jobId: this.jobIdOf(exec) }));
  }

  /** A promise that resolves once exec's handler has returned (made on demand: few are ever awaited). */
  private settledOf(exec: Execution): Promise<void> {
    if (exec.handlerDone) return Promise.resolve();
    if (!exec.settled) {
      exec.settled = new Promise<void>((resolve) => {
        exec.resolveSettled = resolve;
      });
    }
    return exec.settled;
  }

  /** exec's handler has returned (or will never run): wake what waits for it, free its job's key. */
  private settle(exec: Execution): void {
    exec.handlerDone = true;
    exec.resolveSettled?.();
    if (exec.jobKey !== null && this.activeJobs.get(exec.jobKey) === exec) this.activeJobs.delete(exec.jobKey);
  }

  /**
   * The handler's view of exec's signal, made when first asked for: an
   * AbortController per task costs more than a no-op handler does, and
   * most handlers never look.  Aborted already if exec was aborted before.
   */
  private signalOf(exec: Execution): AbortSignal {
    if (!exec.controller) {
      exec.controller = new AbortController();
      if (exec.aborted) exec.controller.abort(exec.abortReason);
    }
    return exec.controller.signal;
  }

  /** Abort exec's signal with reason (the first reason stays, as AbortController's does). */
  private abort(exec: Execution, reason: Error): void {
    if (exec.aborted) return;
    exec.aborted = true;
    exec.abortReason = reason;
    exec.controller?.abort(reason);
  }

  private freeSlot(): void {
    this.slotsUsed--;
    if (this.slotsUsed === 0) {
      for (const w of this.idleWaiters.splice(0)) w();
    }
    if (this.slots) {
      this.slots.used--;
      this.slots.wakeAll();
    }
    this.wake();
  }

  /** Run one task's handler and report its outcome; never rejects. */
  private async execute(exec: Execution): Promise<void> {
    if (exec.lost || exec.released || exec.abandoned) {
      /* lost, or handed back by stop() (whose release settles it), before it ran */
      this.settle(exec);
      this.freeSlot();
      if (exec.lost || exec.abandoned) this.done(exec, 'lost');
      return;
    }
    const task = exec.task;
    if (task.kind === 'run' && exec.cancelled) {
      /* cancelled while it waited for an earlier attempt: do not start it */
      this.settle(exec);
      this.freeSlot();
      this.track(this.call(exec, 'ack_cancel', SQL_ACK_CANCEL, [task.id, this.workerId], 'cancelled'));
      return;
    }
    exec.state = 'running';
    /* the signal is made when the handler first reads it (signalOf) */
    const signalOf = (): AbortSignal => this.signalOf(exec);
    const ctx: TaskContext = {
      get signal(): AbortSignal {
        return signalOf();
      },
      workerId: this.workerId,
    };
    let ok = true;
    let value: unknown;
    try {
      if (task.kind === 'run') {
        value = await this.handler(task as Task<P>, ctx);
      } else {
        value = this.refreshHandler ? await this.refreshHandler(task, ctx) : task.currentMaxConcurrency;
      }
    } catch (err) {
      ok = false;
      value = err;
    }
    this.settle(exec);
    this.freeSlot();
    try {
      this.finish(exec, ok, value);
    } catch (err) {
      /* a result or an error we could not even describe: fail the attempt plainly */
      this.report(err, { phase: 'report', taskId: task.id, jobId: this.jobIdOf(exec) });
      const state = exec.state as ExecState;
      if (state === 'done' || state === 'reporting') return;
      if (task.kind === 'refresh') {
        this.track(this.call(exec, 'fail_refresh', SQL_FAIL_REFRESH, [task.id, this.workerId, 'refresh handler failed'],
          'refreshFailed'));
      } else {
        this.track(this.call(exec, 'fail', SQL_FAIL, [task.id, this.workerId, 'ERROR', null], 'failed'));
      }
    }
  }

  /** Report what the handler did (ok: it returned value; else it threw value). */
  private finish(exec: Execution, ok: boolean, value: unknown): void {
    const task = exec.task;
    if (exec.abandoned || exec.lost || this.closed) {
      /* stop() gave up on it, or the lease is gone: nothing to report */
      this.done(exec, 'lost');
      return;
    }
    if (exec.released || exec.stopAborted) return; /* stop() hands the task back: its release settles it */
    if (task.kind === 'refresh') {
      this.finishRefresh(exec, ok, value);
      return;
    }
    if (exec.cancelled) {
      this.track(this.call(exec, 'ack_cancel', SQL_ACK_CANCEL, [task.id, this.workerId], 'cancelled'));
      return;
    }
    if (ok) {
      let result: string | null;
      try {
        result = value === undefined ? null : JSON.stringify(value) ?? null;
      } catch (err) {
        const data = JSON.stringify({ message: `the handler's result is not JSON: ${safeMessage(err)}` });
        this.track(this.call(exec, 'fail', SQL_FAIL, [task.id, this.workerId, 'RESULT_NOT_JSON', data], 'failed'));
        return;
      }
      this.queueCompletion(exec, result);
      return;
    }
    const f = failureOf(value);
    this.track(this.call(exec, 'fail', SQL_FAIL, [task.id, this.workerId, f.code, f.data], 'failed'));
  }

  private finishRefresh(exec: Execution, ok: boolean, value: unknown): void {
    const id = exec.task.id;
    if (ok && Number.isInteger(value) && (value as number) >= 1 && (value as number) <= 2_147_483_647) {
      this.track(this.call(exec, 'report_refresh', SQL_REPORT_REFRESH, [id, this.workerId, value], 'refreshed'));
      return;
    }
    const msg = ok
      ? `refresh handler returned ${jsonOrNote(value) ?? safeMessage(value)}, not an integer between 1 and 2147483647`
      : safeMessage(value) || 'refresh handler failed';
    this.track(this.call(exec, 'fail_refresh', SQL_FAIL_REFRESH, [id, this.workerId, truncate(msg, 1024)], 'refreshFailed'));
  }

  private track(p: Promise<unknown>): void {
    this.reports.add(p);
    const forget = (): void => {
      this.reports.delete(p);
    };
    p.then(forget, (err: unknown) => {
      forget();
      this.report(err, { phase: 'report' });
    });
  }

  /** The task is settled: forget it, counting it under counter. */
  private done(exec: Execution, counter: keyof WorkerStats | null): void {
    if (exec.state === 'done') return;
    exec.state = 'done';
    this.executions.delete(exec.task.id);
    if (counter && counter !== 'running') this.counters[counter]++;
  }

  /** Whether a report may be tried again after a failure that may pass (a lost connection, ...). */
  private mayRetry(err: Error, deadline: number): boolean {
    const now = Date.now();
    return (err as SiloError).retryable === true && !this.closed && now < deadline && now < this.hardDeadline;
  }

  /**
   * One report (fail, ack_cancel, release, report_refresh, ...), retried
   * after a connection failure as long as the lease can still be alive
   * (and stop()'s deadline has not passed).  A complete or fail that the
   * server refuses for its arguments (a result jsonb will not take, ...) is
   * made a fail with error code ERROR instead, so that the attempt ends.
   */
  private async call(exec: Execution, what: string, text: string, values: unknown[],
    counter: keyof WorkerStats, fallback = true): Promise<void> {
    exec.state = 'reporting';
    const backoff = new Backoff(this.reconnectInitial, this.reconnectMax);
    const withTenant = this.passTenant ? WITH_TENANT.get(text) : undefined;
    const sql = withTenant ?? text;
    const args = withTenant ? [...values, exec.task.tenant] : values;
    let hops = 0;
    for (;;) {
      try {
        await this.q(sql, args, withTenant ? `silo_${what}_t` : `silo_${what}`, true, exec.target);
        this.done(exec, counter);
        return;
      } catch (err) {
        const e = toSiloError(err);
        const context = { phase: what, taskId: exec.task.id, jobId: this.jobIdOf(exec) };
        if (e instanceof NotOwnerError && this.follow(exec, e) && hops++ < MAX_REPORT_HOPS) {
          continue; /* the task's shard moved: its lease did too */
        }
        if (e instanceof LeaseNotFoundError || e instanceof LeaseOwnerMismatchError) {
          /* the task is no longer ours (its lease ran out, or was taken back): say so */
          this.report(e, context);
          this.done(exec, 'lost');
          return;
        }
        if (this.mayRetry(e, exec.leaseDeadline)) {
          const wait = Math.min(backoff.next(), exec.leaseDeadline - Date.now(), this.hardDeadline - Date.now());
          await sleep(Math.max(1, wait));
          continue;
        }
        this.report(e, context);
        const refused = (e as SiloError).code !== undefined && !isConnectionError(e) && !this.closed;
        if (refused && fallback && (what === 'complete' || what === 'fail')) {
          const data = jsonOrNote({ message: `silo refused the ${what} report: ${safeMessage(e)}` });
          return this.call(exec, 'fail', SQL_FAIL, [exec.task.id, this.workerId, 'ERROR', data], 'failed', false);
        }
        this.done(exec, 'lost');
        return;
      }
    }
  }

  /**
   * After an SL020 with an owner: send the task's heartbeats and reports
   * to that node from now on.  False when there is nowhere to go.
   */
  private follow(exec: Execution, err: NotOwnerError): boolean {
    if (!this.redirect || !err.ownerConninfo) return false;
    const pool = this.redirect(err);
    if (!pool) return false;
    exec.target = pool;
    this.counters.followed++;
    return true;
  }

  private jobIdOf(exec: Execution): string | undefined {
    return exec.task.kind === 'run' ? exec.task.jobId : undefined;
  }

  // ---------------------------------------------------------------------
  // completions

  private queueCompletion(exec: Execution, result: string | null): void {
    exec.state = 'reporting';
    if (!this.batchCompletions) {
      this.track(this.call(exec, 'complete', SQL_COMPLETE, [exec.task.id, this.workerId, result], 'succeeded'));
      return;
    }
    exec.result = result;
    this.pending.push(exec);
    if (!this.flushScheduled && !this.flushing) {
      this.flushScheduled = true;
      /* after the other handlers settled in this turn of the event loop */
      setImmediate(() => this.track(this.flush()));
    }
  }

  private async flush(): Promise<void> {
    this.flushScheduled = false;
    if (this.flushing) return;
    this.flushing = true;
    try {
      while (this.pending.length > 0) {
        const batch = this.pending.splice(0, MAX_BATCH);
        /* the backlog is in flight now: leasing may go on meanwhile */
        this.wake();
        await this.completeBatch(batch);
      }
    } finally {
      this.flushing = false;
    }
  }

  private async completeBatch(items: Execution[]): Promise<void> {
    let batch = items;
    const backoff = new Backoff(this.reconnectInitial, this.reconnectMax);
    /* a task whose shard moved away reports to its new owner, alone */
    if (batch.some((c) => c.target !== null)) {
      for (const c of batch.filter((x) => x.target !== null)) {
        this.track(this.call(c, 'complete', SQL_COMPLETE, [c.task.id, this.workerId, c.result], 'succeeded'));
      }
      batch = batch.filter((x) => x.target === null);
      if (batch.length === 0) return;
    }
    for (;;) {
      if (!this.batchCompletions) {
        for (const c of batch) {
          this.track(this.call(c, 'complete', SQL_COMPLETE, [c.task.id, this.workerId, c.result], 'succeeded'));
        }
        return;
      }
      const ids = batch.map((c) => c.task.id);
      const results = batch.some((c) => c.result !== null) ? batch.map((c) => c.result) : null;
      try {
        const rows = await this.q<{ task_id: string }>(SQL_COMPLETE_MANY, [ids, this.workerId, results],
          'silo_complete_many');
        const completed = new Set(rows.map((r) => r.task_id));
        for (const c of batch) {
          if (completed.has(c.task.id)) {
            this.done(c, 'succeeded');
          } else if (this.passTenant) {
            /* not here: alone with its tenant, a node its shard moved from says where it went */
            this.track(this.call(c, 'complete', SQL_COMPLETE, [c.task.id, this.workerId, c.result], 'succeeded'));
          } else {
            this.report(new LeaseNotFoundError(`task ${c.task.id} was not completed: its lease was gone`),
              { phase: 'complete', taskId: c.task.id, jobId: this.jobIdOf(c) });
            this.done(c, 'lost');
          }
        }
        return;
      } catch (err) {
        const e = toSiloError(err);
        if ((e as SiloError).code === '42883') {
          /* a silo older than 1.2: no complete_many */
          this.batchCompletions = false;
          continue;
        }
        const deadline = Math.min(...batch.map((c) => c.leaseDeadline));
        if (this.mayRetry(e, deadline)) {
          await sleep(Math.max(1, Math.min(backoff.next(), deadline - Date.now(), this.hardDeadline - Date.now())));
          continue;
        }
        /* anything else: report one by one, so each task gets its own answer */
        this.report(e, { phase: 'complete' });
        for (const c of batch) {
          this.track(this.call(c, 'complete', SQL_COMPLETE, [c.task.id, this.workerId, c.result], 'succeeded'));
        }
        return;
      }
    }
  }

  // ---------------------------------------------------------------------
  // heartbeats

  /**
   * Every tick: give up the tasks whose lease has run out by our clock,
   * then, unless a heartbeat is still in flight, renew the leases that are
   * due.  The first step does not wait for the second, so a heartbeat that
   * hangs (or a server out of reach) cannot keep a handler running past
   * its lease.
   */
  private async heartbeatLoop(): Promise<void> {
    const tick = Math.max(10, Math.min(1000, Math.floor(this.heartbeatMs / 4)));
    let inFlight: Promise<void> | null = null;
    while (!this.closed) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(done, tick);
        function done(): void {
          clearTimeout(t);
          resolve();
        }
        this.heartbeatWake = done;
      });
      this.heartbeatWake = null;
      if (this.closed) break;
      const now = Date.now();
      this.expireLeases(now);
      if (inFlight) continue;
      const slack = Math.floor(this.heartbeatMs / 4);
      const due: Execution[] = [];
      for (const e of this.executions.values()) {
        if (e.state !== 'done' && !e.lost && !e.released && !e.abandoned && e.nextHeartbeat <= now + slack) due.push(e);
      }
      if (due.length === 0) continue;
      /* in task id order, the order complete_many locks leases in: two statements never wait for each other */
      due.sort((a, b) => (a.task.id < b.task.id ? -1 : a.task.id > b.task.id ? 1 : 0));
      for (const e of due) e.nextHeartbeat = now + this.heartbeatMs;
      inFlight = this.heartbeat(due, now)
        .catch((err: unknown) => this.report(err, { phase: 'heartbeat' }))
        .finally(() => {
          inFlight = null;
        });
    }
    if (inFlight) await inFlight;
  }

  /** Abort, as lost, the handlers whose lease has run out by our clock (no heartbeat got through in time). */
  private expireLeases(now: number): void {
    for (const e of this.executions.values()) {
      if (e.lost || e.released || e.abandoned || now < e.leaseDeadline) continue;
      if (e.state !== 'queued' && e.state !== 'running') continue;
      const cause = new SiloError(`no heartbeat renewed the lease of task ${e.task.id} in time`
        + ` (it ran out ${now - e.leaseDeadline} ms ago)`);
      this.leaseLost(e, cause);
      this.report(cause, { phase: 'heartbeat', taskId: e.task.id, jobId: this.jobIdOf(e) });
    }
  }

  private async heartbeat(all: Execution[], sentAt: number): Promise<void> {
    /* tasks whose shard moved away are renewed on their new owner, one by one */
    const moved = all.filter((e) => e.target !== null);
    const due = moved.length ? all.filter((e) => e.target === null) : all;
    for (const e of moved) await this.heartbeatOne(e);
    if (due.length === 0) return;
    try {
      const rows = await this.hq<{ task_id: string; cancelled: boolean }>(
        this.passTenant ? SQL_HEARTBEAT_MANY_T : SQL_HEARTBEAT_MANY,
        this.passTenant ? [this.workerId, due.map((e) => e.task.id), this.leaseMs, due.map((e) => e.task.tenant)]
          : [this.workerId, due.map((e) => e.task.id), this.leaseMs],
        this.passTenant ? 'silo_heartbeat_many_t' : 'silo_heartbeat_many');
      const byId = new Map(rows.map((r) => [r.task_id, r.cancelled]));
      for (const e of due) {
        e.leaseDeadline = Math.max(sentAt, this.hbSentAt) + this.leaseMs;
        if (byId.get(e.task.id) === true) this.cancelled(e);
      }
      return;
    } catch (err) {
      if (err instanceof ConnectionError || isConnectionError(err) || isStalePlanError(err)) {
        /* try again soon, on a new connection */
        for (const e of due) e.nextHeartbeat = Date.now() + Math.min(this.heartbeatMs, 500);
        throw err;
      }
      /* one of them failed (a lost lease, most likely): find out which */
    }
    for (const e of due) await this.heartbeatOne(e);
  }

  /**
   * Renew one lease: on the heartbeating connection, or on the new owner's
   * pool once an SL020 said the task's shard moved (followed here too).
   */
  private async heartbeatOne(e: Execution): Promise<void> {
    for (let hops = 0; ; hops++) {
      if (e.state === 'done' || e.lost || this.closed) return;
      const sent = Date.now();
      const sql = this.passTenant ? SQL_HEARTBEAT_T : SQL_HEARTBEAT;
      const args = this.passTenant ? [e.task.id, this.workerId, this.leaseMs, e.task.tenant]
        : [e.task.id, this.workerId, this.leaseMs];
      const name = this.passTenant ? 'silo_heartbeat_t' : 'silo_heartbeat';
      try {
        const rows = e.target
          ? await this.q<{ cancelled: boolean }>(sql, args, name, true, e.target)
          : await this.hq<{ cancelled: boolean }>(sql, args, name);
        e.leaseDeadline = Math.max(sent, e.target ? sent : this.hbSentAt) + this.leaseMs;
        if (rows[0]?.cancelled === true) this.cancelled(e);
        return;
      } catch (err) {
        const x = toSiloError(err);
        if (x instanceof NotOwnerError && hops < MAX_REPORT_HOPS && this.follow(e, x)) continue;
        if (x instanceof LeaseNotFoundError || x instanceof LeaseOwnerMismatchError) {
          this.leaseLost(e, x);
        } else {
          if (isConnectionError(x)) e.nextHeartbeat = Date.now() + Math.min(this.heartbeatMs, 500);
          this.report(x, { phase: 'heartbeat', taskId: e.task.id, jobId: this.jobIdOf(e) });
        }
        return;
      }
    }
  }

  private cancelled(e: Execution): void {
    if (e.cancelled || e.task.kind !== 'run') return;
    e.cancelled = true;
    if (e.state === 'queued' || e.state === 'running') {
      this.abort(e, new JobCancelledError(`job ${e.task.jobId} was cancelled`));
    }
  }

  private leaseLost(e: Execution, cause: Error): void {
    /* a report in flight decides for itself (it may have just landed) */
    if (e.state !== 'queued' && e.state !== 'running') return;
    e.lost = true;
    this.abort(e, new LeaseLostError(`the lease of task ${e.task.id} was lost`, { cause }));
  }

  // ---------------------------------------------------------------------
  // stopping

  private handlersSettled(): Promise<void> {
    if (this.slotsUsed === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Resolves true once p settles, false if deadline comes first. */
  private until(p: Promise<unknown>, deadline: number): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      const ms = deadline - Date.now();
      const timer = ms <= 2_147_483_647 ? setTimeout(() => resolve(false), Math.max(0, ms)) : undefined;
      const settled = (): void => {
        clearTimeout(timer);
        resolve(true);
      };
      p.then(settled, settled);
    });
  }

  /** Hand a task back (release; a refresh task: fail_refresh). */
  private handBack(e: Execution): void {
    e.released = true;
    if (e.task.kind === 'run') {
      this.track(this.call(e, 'release', SQL_RELEASE, [e.task.id, this.workerId], 'released'));
    } else {
      this.track(this.call(e, 'fail_refresh', SQL_FAIL_REFRESH, [e.task.id, this.workerId, 'worker shutting down'],
        'refreshFailed'));
    }
  }

  private async shutdown(graceMs: number): Promise<void> {
    this.stopping = true;
    if (!this.started || this.closed) return;
    const t0 = Date.now();
    const graceEnd = t0 + graceMs;
    this.hardDeadline = graceEnd + this.stopTimeoutMs;
    this.wake();
    /* a start() in progress: let it finish (it starts nothing once stopping) */
    if (this.startPromise) await this.until(this.startPromise.catch(() => undefined), this.hardDeadline);
    if (this.closed) return; /* start() failed and closed what it had opened */
    await this.until(this.leaseLoopDone, this.hardDeadline);
    const settled = await this.until(this.handlersSettled(), graceEnd);
    if (!settled) {
      const aborted: Execution[] = [];
      for (const e of [...this.executions.values()]) {
        if (e.lost || e.abandoned || e.released) continue;
        if (e.state === 'queued') {
          /* never started (it waits for an earlier attempt): hand it back */
          this.abort(e, new WorkerStoppingError('the worker is stopping'));
          this.handBack(e);
        } else if (e.state === 'running') {
          e.stopAborted = true;
          this.abort(e, new WorkerStoppingError('the worker is stopping'));
          aborted.push(e);
        }
      }
      if (aborted.length > 0) {
        await this.until(Promise.all(aborted.map((e) => this.settledOf(e))),
          Math.min(Date.now() + SETTLE_AFTER_ABORT_MS, this.hardDeadline));
      }
      for (const e of aborted) {
        if (e.state === 'done') continue;
        if (e.lost) {
          if (e.handlerDone) this.done(e, 'lost');
          continue;
        }
        if (e.handlerDone) {
          this.handBack(e);
        } else {
          /*
           * Its handler still runs: releasing the task would let another
           * worker run the same attempt meanwhile.  Stop heartbeating it and
           * report nothing; the lease runs out and the sweep retries the job.
           */
          e.abandoned = true;
          this.report(new WorkerStoppingError(`the handler of task ${e.task.id} did not return after its signal`
            + ' was aborted: its task is not released, its lease will run out'),
          { phase: 'stop', taskId: e.task.id, jobId: this.jobIdOf(e) });
        }
      }
    }
    /* let every report land, completions first, until the deadline */
    while ((this.pending.length > 0 || this.flushing || this.flushScheduled || this.reports.size > 0)
      && Date.now() < this.hardDeadline) {
      if (this.pending.length > 0 && !this.flushing && !this.flushScheduled) this.track(this.flush());
      await this.until(Promise.allSettled([...this.reports]), this.hardDeadline);
      await new Promise((r) => setImmediate(r));
    }
    this.closed = true;
    this.heartbeatWake?.();
    await this.until(this.heartbeatLoopDone, this.hardDeadline);
    this.closeHeartbeatClient();
    this.closeListener();
    const pool = this.pool;
    this.pool = null;
    if (pool) {
      const ended = pool.end().catch(() => undefined);
      if (!(await this.until(ended, Math.max(this.hardDeadline, Date.now() + 100)))) {
        /* queries that never came back hold their connections: close them under them */
        const clients = (pool as unknown as { _clients?: pg.PoolClient[] })._clients ?? [];
        for (const c of clients) destroyClient(c);
      }
    }
  }
}
