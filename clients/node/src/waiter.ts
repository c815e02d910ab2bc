/**
 * AwaitMux: SiloClient.awaitResult's waits, gathered per tenant onto one
 * connection asleep in CALL silo.wait_any (silo 1.9), instead of one pooled
 * connection per await.
 *
 * Each tenant with awaits has one loop: it checks a connection out of the
 * pool, calls silo.wait_any with every job id awaited now, wakes the
 * awaits of the ids that come back, and calls again with the rest (and any
 * added meanwhile) until none is left; then it gives the connection back.
 * An id added while a call sleeps would wait for that call to end, so the
 * loop is poked: after POKE_DELAY_MS (awaits added together share one
 * poke) the sleeping call is cancelled with pg_cancel_backend from another
 * connection, and the loop calls again with the new list.  Each await has
 * its own deadline and signal; one that gives up leaves the list (the call
 * in flight keeps its id until it returns, which is harmless).
 */

import pg from 'pg';

import { SiloError, isConnectionError, isStalePlanError, toSiloError } from './errors';
import { cancelBackend, sleep } from './util';

/** How long a poke waits for more awaits to share it. */
const POKE_DELAY_MS = 5;
/** silo.wait_any's timeout per call: the loop calls again after it. */
const CALL_MS = 60_000;

interface Waiter {
  resolve: () => void;
  reject: (err: unknown) => void;
}

class TenantLoop {
  readonly waits = new Map<string, Set<Waiter>>();
  private conn: pg.PoolClient | undefined;
  private pid: number | undefined;
  private running = false;
  private inFlight = false;
  private sent = new Set<string>();
  private pokeTimer: NodeJS.Timeout | undefined;
  private poked = false;
  /** a cancel was sent that this connection has not yet answered with 57014 */
  private cancelPending = false;

  constructor(private readonly pool: pg.Pool, private readonly tenant: string,
    private readonly onIdle: () => void) {}

  add(id: string, w: Waiter): void {
    let set = this.waits.get(id);
    if (!set) {
      set = new Set();
      this.waits.set(id, set);
    }
    set.add(w);
    if (!this.running) {
      this.running = true;
      void this.run();
    } else if (this.inFlight && !this.sent.has(id)) {
      this.poke();
    }
  }

  remove(id: string, w: Waiter): void {
    const set = this.waits.get(id);
    if (!set) return;
    set.delete(w);
    if (set.size === 0) this.waits.delete(id);
    /* nothing left to wait for: let the sleeping call end, and its connection go back */
    if (this.waits.size === 0 && this.inFlight) this.poke();
  }

  /** Soon, cancel the sleeping call so that the loop calls again with the current list. */
  private poke(): void {
    if (this.pokeTimer || this.poked) return;
    this.pokeTimer = setTimeout(() => {
      this.pokeTimer = undefined;
      if (!this.inFlight || this.pid === undefined) return;
      this.poked = true;
      this.cancelPending = true;
      cancelBackend(this.pool.options, this.pid);
    }, POKE_DELAY_MS);
  }

  private failAll(err: unknown): void {
    const all = [...this.waits.values()];
    this.waits.clear();
    for (const set of all) for (const w of set) w.reject(err);
  }

  private async run(): Promise<void> {
    let backoff = 100;
    try {
      while (this.waits.size > 0) {
        if (!this.conn) {
          try {
            this.conn = await this.pool.connect();
            this.pid = (this.conn as unknown as { processID?: number }).processID;
            this.cancelPending = false;
          } catch (err) {
            /* the awaits' own deadlines bound how long this goes on */
            await sleep(backoff);
            backoff = Math.min(2000, backoff * 2);
            continue;
          }
        }
        const ids = [...this.waits.keys()];
        this.sent = new Set(ids);
        this.poked = false;
        this.inFlight = true;
        let ended: string[] = [];
        try {
          const res = await this.conn.query({
            name: 'silo_wait_any',
            text: 'CALL silo.wait_any($1::text[], $2::text, $3::interval)',
            values: [ids, this.tenant, `${CALL_MS} milliseconds`],
          });
          ended = (res.rows[0]?.ended as string[] | null) ?? [];
          backoff = 100;
        } catch (err) {
          const e = toSiloError(err);
          if (e instanceof SiloError && e.code === '57014') {
            /* a poke (or statement_timeout): call again with the current list */
            this.cancelPending = false;
            continue;
          }
          if (isConnectionError(e) || isStalePlanError(e)) {
            this.conn.release(true);
            this.conn = undefined;
            await sleep(backoff);
            backoff = Math.min(2000, backoff * 2);
            continue;
          }
          /* anything else (42501, SL020, 53400, ...) is every await's answer */
          this.failAll(e);
          continue;
        } finally {
          this.inFlight = false;
          clearTimeout(this.pokeTimer);
          this.pokeTimer = undefined;
        }
        for (const id of ended) {
          const set = this.waits.get(id);
          if (!set) continue;
          this.waits.delete(id);
          for (const w of set) w.resolve();
        }
      }
    } finally {
      this.running = false;
      /* a cancel still on its way could hit the next user of the connection: drop it */
      this.conn?.release(this.cancelPending ? true : undefined);
      this.conn = undefined;
      this.onIdle();
    }
  }
}

/** The awaits of one SiloClient (with a pool), one loop per tenant. */
export class AwaitMux {
  private readonly loops = new Map<string, TenantLoop>();

  constructor(private readonly pool: pg.Pool) {}

  /**
   * Resolves once job id of tenant has ended or is gone, as silo.wait_any
   * sees it; rejects with onTimeout() at the deadline, with the signal's
   * reason when it is aborted, or with the error of the loop's call.
   */
  until(id: string, tenant: string, deadline: number, signal: AbortSignal | undefined,
    onTimeout: () => SiloError): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let loop = this.loops.get(tenant);
      if (!loop) {
        const made = new TenantLoop(this.pool, tenant, () => {
          if (this.loops.get(tenant) === made && made.waits.size === 0) this.loops.delete(tenant);
        });
        loop = made;
        this.loops.set(tenant, loop);
      }
      const l = loop;
      const done = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      };
      const w: Waiter = {
        resolve: () => { done(); resolve(); },
        reject: (err) => { done(); reject(err); },
      };
      const giveUp = (err: unknown): void => {
        l.remove(id, w);
        w.reject(err);
      };
      const onAbort = (): void => giveUp(signal?.reason);
      const timer = setTimeout(() => giveUp(onTimeout()), Math.max(0, deadline - Date.now()));
      signal?.addEventListener('abort', onAbort, { once: true });
      l.add(id, w);
    });
  }
}
