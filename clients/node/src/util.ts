/** Small helpers shared by the client and the worker. */

import pg from 'pg';
import type { ClientConfig, Pool, QueryConfig, QueryResult, QueryResultRow } from 'pg';

import { isConnectionError, isStalePlanError } from './errors';

const { Client } = pg;

/**
 * Anything that runs a query the way node-postgres does: a pg.Pool, a
 * pg.Client or a client checked out of a pool (for a transaction of yours).
 */
export interface Queryable {
  query<R extends QueryResultRow = any>(
    queryConfig: QueryConfig<any[]>,
  ): Promise<QueryResult<R>>;
}

/** snake_case column names to camelCase keys. */
export function camelRow(row: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(row)) {
    out[k.replace(/_([a-z0-9])/g, (_m, c: string) => c.toUpperCase())] = row[k];
  }
  return out;
}

/** JSON text for a jsonb parameter; undefined stays undefined. */
export function jsonParam(value: unknown): string | undefined {
  return value === undefined ? undefined : JSON.stringify(value);
}

/** A promise that resolves after ms, or rejects with signal's reason once it is aborted. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, Math.max(0, ms));
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Exponential backoff with jitter: next() gives the next delay (from
 * initialMs, doubling, at most maxMs, each scaled by a random factor in
 * [0.5, 1]); reset() starts over after a success.
 */
export class Backoff {
  private attempt = 0;

  constructor(private readonly initialMs: number, private readonly maxMs: number) {}

  next(): number {
    const base = Math.min(this.maxMs, this.initialMs * 2 ** Math.min(this.attempt, 30));
    this.attempt++;
    return Math.round(base * (0.5 + Math.random() / 2));
  }

  reset(): void {
    this.attempt = 0;
  }
}

/**
 * Run one query on a client checked out of pool.  Unlike pool.query, a
 * server error (a lost lease, a job not found) keeps the connection: only
 * a broken connection is dropped, and one whose prepared statements went
 * stale (0A000 "cached plan must not change result type").
 */
export async function poolQuery<R extends QueryResultRow = any>(
  pool: Pool, config: QueryConfig<any[]>,
): Promise<QueryResult<R>> {
  const client = await pool.connect();
  let broken = false;
  try {
    return await client.query<R>(config);
  } catch (err) {
    broken = isConnectionError(err) || isStalePlanError(err);
    throw err;
  } finally {
    client.release(broken ? true : undefined);
  }
}

/**
 * Ask the server to cancel what backend pid runs (pg_cancel_backend), from
 * a connection of its own made with config; errors are ignored.
 */
/**
 * A yes or no asked of the server: a yes is kept; a no is asked again once
 * recheckMs have passed (the server may have been updated meanwhile); a
 * failed question is asked again next time.
 */
export class KeptAnswer {
  private known: Promise<boolean> | undefined;
  /** when a kept no expires (0: no no is kept) */
  falseUntil = 0;

  constructor(private readonly recheckMs: number) {}

  get(ask: () => Promise<boolean>): Promise<boolean> {
    if (this.known && this.falseUntil > 0 && Date.now() >= this.falseUntil) {
      this.known = undefined;
      this.falseUntil = 0;
    }
    if (!this.known) {
      this.known = ask().then((ok) => {
        if (!ok) this.falseUntil = Date.now() + this.recheckMs;
        return ok;
      }, (err: unknown) => {
        this.known = undefined;
        throw err;
      });
    }
    return this.known;
  }
}

export function cancelBackend(config: ClientConfig, pid: number): void {
  const c = new Client(config);
  c.on('error', () => undefined);
  c.connect()
    .then(() => c.query('SELECT pg_cancel_backend($1)', [pid]))
    .catch(() => undefined)
    .finally(() => { c.end().catch(() => undefined); });
}

/**
 * Close c without waiting for it: end() (which destroys the socket when a
 * query is in flight), and destroy the socket at once, or after gentleMs if
 * it has not closed by then (a half-open socket).  Errors are ignored.
 */
export function destroyClient(client: pg.Client | pg.PoolClient, gentleMs = 0): void {
  const c = client as pg.Client;
  c.removeAllListeners('notification');
  c.on('error', () => undefined);
  const stream = (c as unknown as { connection?: { stream?: { destroy?: () => void } } }).connection?.stream;
  const destroy = (): void => {
    try {
      stream?.destroy?.();
    } catch {
      /* already gone */
    }
  };
  if (gentleMs <= 0) {
    c.end().catch(() => undefined);
    destroy();
    return;
  }
  const timer = setTimeout(destroy, gentleMs);
  timer.unref();
  c.end().catch(() => undefined).finally(() => clearTimeout(timer));
}

/**
 * p, or a rejection with onTimeout() once ms have passed (ms <= 0: at
 * once).  Does not cancel p.
 */
export function withTimeout<T>(p: Promise<T>, ms: number, onTimeout: () => Error): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(onTimeout()), Math.max(0, ms));
    p.then((v) => {
      clearTimeout(timer);
      resolve(v);
    }, (err: unknown) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}
