/**
 * SiloClient: the producer's side of silo -- enqueue jobs, look at them,
 * cancel, restart, expedite or delete them, and read or await their results.
 * Each method is one SQL call (docs/api.md); errors come back as the typed
 * classes of errors.ts.
 */

import pg from 'pg';

import {
  InvalidArgumentError, NotTerminalError, WaitTimeoutError, isConnectionError, isStalePlanError, toSiloError,
} from './errors';
import type {
  AwaitResultOptions, EnqueueOptions, ImportJobSpec, ImportResult, Job, JobRef, JobResult, JobSpec,
} from './types';
import {
  KeptAnswer, Queryable, camelRow, cancelBackend, jsonParam, poolQuery, sleep,
} from './util';
import { AwaitMux } from './waiter';

/** How SiloClient reaches the database. */
export interface SiloClientOptions extends pg.PoolConfig {
  /**
   * An existing pool to use (close() leaves it open).  Without pool or db the
   * client makes a pool of its own from the other options (connectionString,
   * host, ...; PG* environment variables fill in the rest).
   */
  pool?: pg.Pool;
  /**
   * Run every call through this connection instead, e.g. a client checked
   * out of your pool inside a transaction: the jobs enqueued then commit or
   * roll back with your own writes.  (awaitResult needs a connection that is
   * not inside a transaction block, and its signal cannot stop the wait in
   * the server: see awaitResult.)
   */
  db?: Queryable;
}

const WAIT_RESULT_SIGNATURE =
  'silo.wait_result(text,text,interval,text,jsonb,text,jsonb,timestamptz)';
const WAIT_ANY_SIGNATURE = 'silo.wait_any(text[],text,interval,text[])';
/** The most job ids one gathered silo.wait_any call names (beyond: silo.wait_result per await). */
const WAIT_ANY_MAX_IDS = 4096;
/** silo.wait_result waits at most a day per call. */
const WAIT_RESULT_MAX_MS = 86_400_000;
/** After an abort, how long the cancelled wait may take to come back before it is given up. */
const ABORT_GRACE_MS = 2000;
/** How long hasWaitResult() and hasWaitAny() trust a "no" (silo may be updated meanwhile). */
const WAIT_RESULT_RECHECK_MS = 60_000;

function tenantOf(ref: JobRef | undefined): string {
  return ref?.tenant ?? '-';
}

export function toJob<P>(row: Record<string, unknown>): Job<P> {
  return camelRow(row) as unknown as Job<P>;
}

function toResult<R>(row: Record<string, unknown>): JobResult<R> {
  return {
    status: row.status as JobResult['status'],
    result: (row.result ?? null) as R | null,
    errorCode: (row.error_code ?? null) as string | null,
    errorData: (row.error_data ?? null) as JobResult['errorData'],
    finishedAt: row.finished_at as Date,
  };
}

/** A time given as a Date or an ISO 8601 string, as the JSON string silo reads. */
function timeParam(name: string, v: Date | string): string {
  if (typeof v !== 'string' && !(v instanceof Date)) {
    throw new InvalidArgumentError(`${name} must be a Date or an ISO 8601 string`, { code: '22023' });
  }
  if (v instanceof Date) {
    if (Number.isNaN(v.getTime())) throw new InvalidArgumentError(`${name} must be a valid Date`, { code: '22023' });
    return v.toISOString();
  }
  return v;
}

function startAtParam(v: Date | string): string {
  return timeParam('startAt', v);
}

/** The job object of silo.enqueue_many for one JobSpec. */
function jobObject(spec: JobSpec): Record<string, unknown> {
  return {
    task_group: spec.taskGroup,
    payload: spec.payload === undefined ? {} : spec.payload,
    tenant: spec.tenant,
    id: spec.id,
    priority: spec.priority,
    start_at: spec.startAt === undefined ? undefined : startAtParam(spec.startAt),
    retry_policy: spec.retryPolicy,
    limits: spec.limits,
    metadata: spec.metadata,
    on_conflict: spec.onConflict,
  };
}

/** The job object of silo.import_jobs for one ImportJobSpec. */
function importObject(spec: ImportJobSpec): Record<string, unknown> {
  const { on_conflict: _ignored, ...job } = jobObject(spec as JobSpec);
  return {
    ...job,
    enqueued_at: spec.enqueuedAt === undefined ? undefined : timeParam('enqueuedAt', spec.enqueuedAt),
    attempts: spec.attempts?.map((a) => ({
      status: a.status,
      finished_at: timeParam('finishedAt', a.finishedAt),
      started_at: a.startedAt === undefined ? undefined : timeParam('startedAt', a.startedAt),
      worker_id: a.workerId,
      result: a.result,
      error_code: a.errorCode,
      error_data: a.errorData,
    })),
  };
}

export class SiloClient {
  private readonly db: Queryable;
  private readonly pool: pg.Pool | undefined;
  private readonly ownsPool: boolean;
  private readonly waitResultAnswer = new KeptAnswer(WAIT_RESULT_RECHECK_MS);
  private readonly waitAnyAnswer = new KeptAnswer(WAIT_RESULT_RECHECK_MS);
  private waitAnyMaxIds = 0;
  private mux: AwaitMux | undefined;

  constructor(options: SiloClientOptions | string = {}) {
    const opts: SiloClientOptions = typeof options === 'string' ? { connectionString: options } : options;
    if (opts.db) {
      this.db = opts.db;
      this.pool = undefined;
      this.ownsPool = false;
    } else if (opts.pool) {
      this.db = opts.pool;
      this.pool = opts.pool;
      this.ownsPool = false;
    } else {
      const { pool: _p, db: _d, ...config } = opts;
      const pool = new pg.Pool({ application_name: 'silo-node-client', keepAlive: true, ...config });
      /* an idle client that dies (server restart) must not crash the process */
      pool.on('error', () => undefined);
      this.db = pool;
      this.pool = pool;
      this.ownsPool = true;
    }
  }

  /**
   * A client that runs its calls through db (a pg.Client or a pooled client,
   * e.g. inside your transaction); it shares nothing else with this one.
   */
  withConnection(db: Queryable): SiloClient {
    return new SiloClient({ db });
  }

  /**
   * Close the pool this client made (a pool or connection passed in stays
   * open); gathered awaits still waiting fail, and their connections close.
   */
  async close(): Promise<void> {
    this.mux?.close();
    if (this.ownsPool && this.pool && !this.pool.ended) await this.pool.end();
  }

  /**
   * Rows of one statement on this client's connection (errors typed as
   * SiloError): for SiloClusterClient's own statements.
   * @internal
   */
  async rows<R extends Record<string, unknown>>(text: string, values: unknown[], name?: string): Promise<R[]> {
    return this.query<R>(text, values, name);
  }

  private async query<R extends Record<string, unknown>>(
    text: string, values: unknown[], name?: string,
  ): Promise<R[]> {
    try {
      const res = this.pool ? await poolQuery<R>(this.pool, { text, values, name })
        : await this.db.query<R>({ text, values, name });
      return res.rows;
    } catch (err) {
      throw toSiloError(err);
    }
  }

  /**
   * Enqueue a job (silo.enqueue) and return its id.  The job can be leased
   * once the statement commits (at once, outside a transaction).
   */
  async enqueue<P = unknown>(taskGroup: string, payload?: P, options: EnqueueOptions = {}): Promise<string> {
    const args = ['task_group => $1::text', 'payload => $2::jsonb'];
    const values: unknown[] = [taskGroup, payload === undefined ? '{}' : JSON.stringify(payload)];
    const add = (name: string, cast: string, value: unknown): void => {
      if (value === undefined) return;
      values.push(value);
      args.push(`${name} => $${values.length}::${cast}`);
    };
    add('tenant', 'text', options.tenant);
    add('id', 'text', options.id);
    add('priority', 'int', options.priority);
    add('start_at', 'timestamptz', options.startAt === undefined ? undefined : startAtParam(options.startAt));
    add('retry_policy', 'jsonb', jsonParam(options.retryPolicy));
    add('limits', 'jsonb', jsonParam(options.limits));
    add('metadata', 'jsonb', jsonParam(options.metadata));
    add('on_conflict', 'text', options.onConflict);
    const rows = await this.query<{ id: string }>(`SELECT silo.enqueue(${args.join(', ')}) AS id`, values);
    return rows[0].id;
  }

  /**
   * Enqueue many jobs in one statement (silo.enqueue_many): all of them or,
   * when one is invalid, none.  Returns their ids in the order given.
   */
  async enqueueMany(jobs: JobSpec[]): Promise<string[]> {
    if (jobs.length === 0) return [];
    const rows = await this.query<{ id: string }>(
      'SELECT e.id FROM silo.enqueue_many($1::jsonb) WITH ORDINALITY AS e(id, n) ORDER BY e.n',
      [JSON.stringify(jobs.map(jobObject))], 'silo_enqueue_many');
    return rows.map((r) => r.id);
  }

  /**
   * Import jobs from another queue with their attempt history
   * (silo.import_jobs, silo 1.8), each in the state its history leads to.
   * Returns one result per job, in the order given.  Invalid input, a tenant
   * the role may not act in, or a running job among them refuses the whole
   * call (an error; no job imported: NotReimportableError for a running
   * job); a refused re-import of one job is that job's result (success
   * false) and the others are imported.
   */
  async importJobs(jobs: ImportJobSpec[]): Promise<ImportResult[]> {
    if (jobs.length === 0) return [];
    const rows = await this.query<Record<string, unknown>>(
      'SELECT r.id, r.tenant, r.success, r.status, r.error, r.sqlstate'
      + ' FROM silo.import_jobs($1::jsonb) WITH ORDINALITY AS r(id, tenant, success, status, error, sqlstate, n)'
      + ' ORDER BY r.n',
      [JSON.stringify(jobs.map(importObject))], 'silo_import_jobs');
    return rows.map((r) => ({
      id: r.id as string,
      tenant: r.tenant as string,
      success: r.success as boolean,
      status: (r.status ?? null) as ImportResult['status'],
      error: (r.error ?? null) as string | null,
      sqlstate: (r.sqlstate ?? null) as string | null,
    }));
  }

  /** The job's row of silo.jobs, or null when there is no such job. */
  async getJob<P = unknown>(id: string, ref?: JobRef): Promise<Job<P> | null> {
    /* not a named statement: SELECT * of a view whose columns a later silo may change */
    const rows = await this.query('SELECT * FROM silo.jobs WHERE tenant = $1 AND id = $2',
      [tenantOf(ref), id]);
    return rows.length ? toJob<P>(rows[0]) : null;
  }

  /**
   * Cancel a job (silo.cancel).  A pending job ends Cancelled at once; a
   * running one is flagged and its worker's signal fires at the next
   * heartbeat.  Throws AlreadyCancelledError, AlreadyTerminalError or
   * NotFoundError.
   */
  async cancel(id: string, ref?: JobRef): Promise<void> {
    await this.query('SELECT silo.cancel($1::text, $2::text)', [id, tenantOf(ref)], 'silo_cancel');
  }

  /** Run a Failed or Cancelled job again (silo.restart); NotRestartableError otherwise. */
  async restart(id: string, ref?: JobRef): Promise<void> {
    await this.query('SELECT silo.restart($1::text, $2::text)', [id, tenantOf(ref)], 'silo_restart');
  }

  /** Make a Scheduled or Retrying job due now (silo.expedite); NotExpeditableError otherwise. */
  async expedite(id: string, ref?: JobRef): Promise<void> {
    await this.query('SELECT silo.expedite($1::text, $2::text)', [id, tenantOf(ref)], 'silo_expedite');
  }

  /**
   * Delete a terminal job with its attempts (silo.delete_job; silo_admin
   * only).  False when there is no such job; NotTerminalError while it runs.
   */
  async deleteJob(id: string, ref?: JobRef): Promise<boolean> {
    const rows = await this.query<{ deleted: boolean }>(
      'SELECT silo.delete_job($1::text, $2::text) AS deleted', [id, tenantOf(ref)], 'silo_delete_job');
    return rows[0].deleted;
  }

  /**
   * The outcome of a terminal job (silo.job_result).  Throws
   * NotTerminalError while it has not ended, NotFoundError if it does not
   * exist.
   */
  async getJobResult<R = unknown>(id: string, ref?: JobRef): Promise<JobResult<R>> {
    const rows = await this.query(
      'SELECT status, result, error_code, error_data, finished_at FROM silo.job_result($1::text, $2::text)',
      [id, tenantOf(ref)]);
    return toResult<R>(rows[0]);
  }

  /**
   * Whether the installed silo has the procedure silo.wait_result (1.7).
   * A yes is kept; a no is asked again after a minute (silo may have been
   * updated meanwhile).
   */
  async hasWaitResult(): Promise<boolean> {
    return this.waitResultAnswer.get(async () => (await this.query<{ ok: boolean }>(
      'SELECT to_regprocedure($1) IS NOT NULL AS ok', [WAIT_RESULT_SIGNATURE]))[0].ok === true);
  }

  /**
   * Whether the installed silo has the procedure silo.wait_any (1.9) and
   * this client's role may call it; kept as hasWaitResult's answer is.
   */
  async hasWaitAny(): Promise<boolean> {
    return this.waitAnyAnswer.get(async () => {
      const rows = await this.query<{ ok: boolean, max_ids: number | null }>(
        'SELECT coalesce(has_function_privilege(to_regprocedure($1), \'EXECUTE\'), false) AS ok,'
        + " current_setting('silo.max_wait_any_jobs', true)::int AS max_ids", [WAIT_ANY_SIGNATURE]);
      this.waitAnyMaxIds = Math.min(rows[0].max_ids ?? 0, WAIT_ANY_MAX_IDS);
      return rows[0].ok === true && this.waitAnyMaxIds > 0;
    });
  }

  /**
   * Wait until the job has ended and return its outcome.  With silo 1.9
   * and a pool, the awaits of this client are gathered, per tenant, onto
   * one connection asleep in CALL silo.wait_any (a thousand concurrent
   * awaits hold one connection, not a thousand; an await added while it
   * sleeps interrupts it with a cancel from another connection); a job
   * that has ended returns at once, after one silo.job_result.  With silo
   * 1.7-1.8, on a client made with `db`, or beyond what the gathering
   * takes (4 tenants at once, 4096 ids per tenant), the wait happens in
   * silo.wait_result, woken by the commit that ends the job, holding one
   * connection of the pool and no snapshot; without either, job_result is polled with a backoff
   * (50 ms growing to maxPollIntervalMs).  Throws WaitTimeoutError after
   * timeoutMs (also when no connection of the pool came free in time),
   * NotFoundError for a job that does not exist, and the signal's reason
   * once options.signal is aborted.  On a client made with `db` (one
   * connection of yours) an abort rejects at once, but the wait in the
   * server goes on until the job ends or the timeout passes, and keeps
   * that connection busy meanwhile: nothing here can cancel it.
   */
  async awaitResult<R = unknown>(id: string, options: AwaitResultOptions = {}): Promise<JobResult<R>> {
    const timeoutMs = options.timeoutMs ?? 30_000;
    if (!(timeoutMs > 0)) throw new InvalidArgumentError('timeoutMs must be positive', { code: '22023' });
    options.signal?.throwIfAborted();
    const deadline = Date.now() + timeoutMs;
    const tenant = tenantOf(options);
    if (this.pool && await beforeDeadline(this.hasWaitAny(), deadline, options.signal, id, tenant)) {
      return this.waitGathered<R>(id, tenant, deadline, options.signal);
    }
    if (await beforeDeadline(this.hasWaitResult(), deadline, options.signal, id, tenant)) {
      return this.waitInServer<R>(id, tenant, deadline, options.signal);
    }
    return this.poll<R>(id, tenant, deadline, options);
  }

  /** awaitResult on silo.wait_any: see AwaitMux (waiter.ts). */
  private async waitGathered<R>(
    id: string, tenant: string, deadline: number, signal: AbortSignal | undefined,
  ): Promise<JobResult<R>> {
    if (!this.mux) this.mux = new AwaitMux((this.pool as pg.Pool).options, this.waitAnyMaxIds);
    for (;;) {
      try {
        return await beforeDeadline(this.getJobResult<R>(id, { tenant }), deadline, signal, id, tenant);
      } catch (err) {
        if (!(err instanceof NotTerminalError)) throw err;
      }
      /* ended or gone by silo.wait_any's look: job_result says which (a restarted job waits again) */
      const gathered = this.mux.until(id, tenant, deadline, signal, () => new WaitTimeoutError(
        'job did not end within the timeout',
        { code: 'SL011', detail: `Job "${id}" of tenant "${tenant}" was still pending.` }));
      /* more tenants or ids than the mux takes: this one waits on its own */
      if (!gathered) return this.waitInServer<R>(id, tenant, deadline, signal);
      await gathered;
    }
  }

  private async waitInServer<R>(
    id: string, tenant: string, deadline: number, signal: AbortSignal | undefined,
  ): Promise<JobResult<R>> {
    /* a connection of its own, so that an abort can cancel just this wait */
    let conn: pg.PoolClient | undefined;
    let db: Queryable = this.db;
    if (this.pool) {
      conn = await beforeDeadline(this.pool.connect().catch((err: unknown) => {
        throw toSiloError(err);
      }), deadline, signal, id, tenant, (late) => late.release());
      db = conn;
    }
    let aborted = false;
    let broken = false;
    let abortNow: (reason: unknown) => void = () => undefined;
    const abortion = new Promise<never>((_resolve, reject) => {
      abortNow = reject;
    });
    abortion.catch(() => undefined);
    const pid = (conn as unknown as { processID?: number } | undefined)?.processID;
    let abortTimer: NodeJS.Timeout | undefined;
    const onAbort = (): void => {
      aborted = true;
      if (pid !== undefined && this.pool) {
        /*
         * On a connection of its own (the pool's may all be waiting): the
         * cancel ends the wait in the server, and the call returns then;
         * should the cancel not get through, give up on it after a while.
         */
        cancelBackend(this.pool.options, pid);
        abortTimer = setTimeout(() => abortNow(signal?.reason), ABORT_GRACE_MS);
      } else {
        abortNow(signal?.reason);
      }
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    /* aborted while we waited for the connection: the listener came too late to hear it */
    if (signal?.aborted) onAbort();
    try {
      for (;;) {
        if (aborted) throw signal?.reason;
        const left = deadline - Date.now();
        const chunk = Math.max(1, Math.min(left, WAIT_RESULT_MAX_MS));
        try {
          const query = db.query({
            name: 'silo_wait_result',
            text: 'CALL silo.wait_result($1::text, $2::text, $3::interval)',
            values: [id, tenant, `${chunk} milliseconds`],
          });
          query.catch(() => undefined); /* an abort may leave it behind */
          const res = await Promise.race([query, abortion]);
          if (aborted) throw signal?.reason;
          return toResult<R>(res.rows[0]);
        } catch (err) {
          if (aborted) throw signal?.reason;
          const e = toSiloError(err);
          if (isConnectionError(e) || isStalePlanError(e)) broken = true;
          if (e instanceof WaitTimeoutError && deadline - Date.now() > 0) continue;
          throw e;
        }
      }
    } finally {
      clearTimeout(abortTimer);
      signal?.removeEventListener('abort', onAbort);
      /* after a cancel request the connection could still receive it: drop it */
      conn?.release(aborted || broken ? true : undefined);
    }
  }

  private async poll<R>(
    id: string, tenant: string, deadline: number, options: AwaitResultOptions,
  ): Promise<JobResult<R>> {
    const maxPause = Math.max(10, options.maxPollIntervalMs ?? 1000);
    let pause = 50;
    for (;;) {
      try {
        return await this.getJobResult<R>(id, { tenant });
      } catch (err) {
        if (!(err instanceof NotTerminalError)) throw err;
      }
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new WaitTimeoutError('job did not end within the timeout', {
          detail: `Job "${id}" of tenant "${tenant}" was still pending.`,
        });
      }
      await sleep(Math.min(pause, left), options.signal);
      pause = Math.min(maxPause, Math.ceil(pause * 1.5));
    }
  }
}

/**
 * p's value, unless the deadline passes first (WaitTimeoutError) or signal
 * is aborted (its reason).  A value that comes too late goes to onLate.
 */
function beforeDeadline<T>(
  p: Promise<T>, deadline: number, signal: AbortSignal | undefined, id: string, tenant: string,
  onLate?: (value: T) => void,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let over = false;
    const end = (): boolean => {
      if (over) return false;
      over = true;
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      return true;
    };
    const onAbort = (): void => {
      if (end()) reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      if (end()) {
        reject(new WaitTimeoutError('job did not end within the timeout (no connection came free in time)', {
          detail: `Job "${id}" of tenant "${tenant}" was not waited for.`,
        }));
      }
    }, Math.max(0, deadline - Date.now()));
    signal?.addEventListener('abort', onAbort, { once: true });
    if (signal?.aborted) onAbort();
    p.then((v) => {
      if (end()) resolve(v);
      else onLate?.(v);
    }, (err: unknown) => {
      if (end()) reject(err);
    });
  });
}
