/**
 * AwaitMux: SiloClient.awaitResult's waits, gathered per tenant onto one
 * connection asleep in CALL silo.wait_any (silo 1.9), instead of one pooled
 * connection per await.
 *
 * Each tenant with awaits has one loop (MAX_LOOPS at most per client): it
 * opens a connection of its own with the pool's settings (outside the
 * pool, so that the awaits it wakes can always fetch their results from
 * the pool), calls silo.wait_any with every job id awaited now, wakes the
 * awaits of the ids that come back, and calls again with the rest (and any
 * added meanwhile) until none is left; then it closes the connection.  An
 * id added while a call sleeps would wait for that call to end, so the
 * loop is poked: after POKE_DELAY_MS (awaits added together share one
 * poke) the sleeping call is cancelled with pg_cancel_backend from another
 * connection, and the loop calls again with the new list; a poke that did
 * not end the call within REPOKE_MS (its connection failed, or it reached
 * the backend before the call did) is sent again.  Each await has its own
 * deadline and signal; one that gives up leaves the list (the call in
 * flight keeps its id until it returns, which is harmless).  An await the
 * mux cannot take (MAX_LOOPS tenants already, or maxIds ids in its
 * tenant's list) is left to the caller, which waits with silo.wait_result.
 */

import pg from 'pg';

import { SiloError, isConnectionError, isStalePlanError, toSiloError } from './errors';
import { cancelBackend, sleep } from './util';

/** How long a poke waits for more awaits to share it. */
const POKE_DELAY_MS = 5;
/** A poke that has not ended the call after this long is sent again. */
const REPOKE_MS = 250;
/** Tenants with a loop (a connection each) per client, at most. */
export const MAX_LOOPS = 4;
/** silo.wait_any's timeout per call: the loop calls again after it. */
const CALL_MS = 60_000;

interface Waiter {
  resolve: () => void;
  reject: (err: unknown) => void;
}

class TenantLoop {
  readonly waits = new Map<string, Set<Waiter>>();
  private conn: pg.Client | undefined;
  private pid: number | undefined;
  private running = false;
  private inFlight = false;
  private sent = new Set<string>();
  private pokeTimer: NodeJS.Timeout | undefined;
  private poked = false;

  constructor(private readonly config: pg.ClientConfig, private readonly tenant: string,
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

  /**
   * Soon, cancel the sleeping call so that the loop calls again with the
   * current list; again after REPOKE_MS while the call goes on.
   */
  private poke(delay = POKE_DELAY_MS): void {
    if (this.pokeTimer || this.poked) return;
    this.pokeTimer = setTimeout(() => {
      this.pokeTimer = undefined;
      if (!this.inFlight || this.pid === undefined) return;
      this.poked = true;
      cancelBackend(this.config, this.pid);
      this.pokeTimer = setTimeout(() => {
        this.pokeTimer = undefined;
        this.poked = false;
        if (this.inFlight) this.poke(0);
      }, REPOKE_MS);
    }, delay);
  }

  /** The client is closing: every await fails with err, and the sleeping call ends. */
  close(err: unknown): void {
    this.failAll(err);
    if (this.inFlight) this.poke(0);
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
          const c = new pg.Client(this.config);
          c.on('error', () => undefined);
          try {
            await c.connect();
          } catch {
            c.end().catch(() => undefined);
            /* the awaits' own deadlines bound how long this goes on */
            await sleep(backoff);
            backoff = Math.min(2000, backoff * 2);
            continue;
          }
          this.conn = c;
          this.pid = (c as unknown as { processID?: number }).processID;
        }
        const conn = this.conn;
        const ids = [...this.waits.keys()];
        this.sent = new Set(ids);
        this.poked = false;
        this.inFlight = true;
        let ended: string[] = [];
        let pause = 0;
        try {
          const res = await conn.query({
            name: 'silo_wait_any',
            text: 'CALL silo.wait_any($1::text[], $2::text, $3::interval)',
            values: [ids, this.tenant, `${CALL_MS} milliseconds`],
          });
          ended = (res.rows[0]?.ended as string[] | null) ?? [];
          backoff = 100;
        } catch (err) {
          const e = toSiloError(err);
          const code = e instanceof SiloError ? e.code : undefined;
          if (code === '57014') {
            /* a poke: call again with the current list (after a statement_timeout, a little later) */
            if (!this.poked) pause = backoff;
          } else if (code === '53400' || isConnectionError(e) || isStalePlanError(e)) {
            /* the pool of silo.max_wait_any_jobs is full, or the connection went: again later */
            if (code !== '53400') {
              conn.end().catch(() => undefined);
              this.conn = undefined;
            }
            pause = backoff;
          } else {
            /* anything else (42501, SL020, ...) is every await's answer */
            this.failAll(e);
          }
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
        if (pause > 0) {
          await sleep(pause);
          backoff = Math.min(2000, backoff * 2);
        }
      }
    } finally {
      this.running = false;
      this.conn?.end().catch(() => undefined);
      this.conn = undefined;
      this.onIdle();
    }
  }
}

/** The awaits of one SiloClient (with a pool), one loop per tenant. */
export class AwaitMux {
  private readonly loops = new Map<string, TenantLoop>();

  /** Fail every await (the client is closing); the loops end their calls and close their connections. */
  close(): void {
    for (const l of this.loops.values()) l.close(new SiloError('the client was closed while the job was awaited'));
  }

  /** maxIds: the most ids one call may name (silo.max_wait_any_jobs, capped). */
  constructor(private readonly config: pg.ClientConfig, private readonly maxIds: number) {}

  /**
   * Resolves once job id of tenant has ended or is gone, as silo.wait_any
   * sees it; rejects with onTimeout() at the deadline, with the signal's
   * reason when it is aborted, or with the error of the loop's call.
   * Returns undefined when the mux cannot take this await (see the header).
   */
  until(id: string, tenant: string, deadline: number, signal: AbortSignal | undefined,
    onTimeout: () => SiloError): Promise<void> | undefined {
    let loop = this.loops.get(tenant);
    if (!loop) {
      if (this.loops.size >= MAX_LOOPS) return undefined;
      const made = new TenantLoop(this.config, tenant, () => {
        if (this.loops.get(tenant) === made && made.waits.size === 0) this.loops.delete(tenant);
      });
      loop = made;
      this.loops.set(tenant, loop);
    } else if (loop.waits.size >= this.maxIds && !loop.waits.has(id)) {
      return undefined;
    }
    const l = loop;
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
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
