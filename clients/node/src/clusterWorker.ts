/**
 * SiloClusterWorker: SiloWorker for a silo in cluster mode
 * (docs/clients.md, "Cluster mode").  A task group's tasks live on the
 * nodes that own their tenants' shards, so it leases from every member: one
 * SiloWorker per node (its own pool, LISTEN connection and heartbeat
 * connection), all sharing one concurrency budget, woken round robin as
 * slots free up.  Each task's heartbeats and reports go to the node it was
 * leased from, with the task's tenant, so that a node its shard has moved
 * away from answers SL020 naming the new owner, which they follow.  The
 * shard map is read again every mapRefreshMs to find new members.  On a
 * single-node silo it is one SiloWorker, exactly as before.
 */

import pg from 'pg';

import { NotOwnerError, SiloError, toSiloError } from './errors';
import {
  Conninfo, conninfoOfConfig, mergeConninfo, parseConninfo, pgConfigOf,
} from './conninfo';
import { SQL_CLUSTER_INFO, SQL_NODE_INFO, ShardMap, snapshotOf } from './router';
import {
  SharedSlots, SiloWorker, SiloWorkerOptions, WorkerErrorContext, WorkerStats,
} from './worker';

export interface SiloClusterWorkerOptions<P = any, R = unknown> extends SiloWorkerOptions<P, R> {
  /** How often the shard map is read again to find members (default 30,000 ms). */
  mapRefreshMs?: number;
}

interface Member {
  nodeId: string | null;
  conninfo: string | null;
  worker: SiloWorker;
  started: Promise<void> | null;
}

export class SiloClusterWorker<P = any, R = unknown> {
  readonly workerId: string;
  readonly taskGroup: string;
  private readonly options: SiloClusterWorkerOptions<P, R>;
  private readonly seedConfig: pg.ClientConfig;
  private readonly seedInfo: Conninfo;
  private readonly slots: SharedSlots;
  private readonly members = new Map<string, Member>();
  /** Pools that reports follow SL020 to, for nodes that are not (yet) members. */
  private readonly reportPools = new Map<string, pg.Pool>();
  private readonly onError: (error: Error, context: WorkerErrorContext) => void;
  private map: ShardMap | null = null;
  private refreshTimer: NodeJS.Timeout | null = null;
  private stopping = false;
  private stopPromise: Promise<void> | null = null;

  constructor(options: SiloClusterWorkerOptions<P, R>) {
    this.options = options;
    /* validates the options once, and gives the defaults (worker id, concurrency) */
    const probe = new SiloWorker<P, R>(options);
    this.workerId = probe.workerId;
    this.taskGroup = probe.taskGroup;
    this.slots = new SharedSlots(options.concurrency ?? 10);
    const conn = options.connection;
    this.seedConfig = typeof conn === 'string' ? { connectionString: conn } : conn ?? {};
    this.seedInfo = conninfoOfConfig(this.seedConfig);
    this.onError = options.onError ?? ((error, ctx) => {
      console.error(`silo worker ${this.workerId}: ${ctx.phase}:`, error.message);
    });
  }

  /** Counters since start(), summed over the members. */
  get stats(): WorkerStats {
    const sum: WorkerStats = {
      leased: 0, succeeded: 0, failed: 0, cancelled: 0, released: 0, lost: 0, refreshed: 0, refreshFailed: 0,
      running: 0, reconnects: 0, followed: 0,
    };
    for (const m of this.members.values()) {
      const s = m.worker.stats;
      for (const k of Object.keys(sum) as Array<keyof WorkerStats>) sum[k] += s[k];
    }
    return sum;
  }

  /** The nodes leased from: their ids (null: the node of the connection given, in single-node mode). */
  get memberNodes(): Array<string | null> {
    return [...this.members.values()].map((m) => m.nodeId);
  }

  /** Whether start() has run and stop() has not begun. */
  get isRunning(): boolean {
    return this.members.size > 0 && !this.stopping;
  }

  /**
   * Read the map from the node given, start a worker for it and one for
   * every other owner in the map.  Rejects when the node given cannot be
   * reached; another member that cannot is retried by its own worker.
   */
  async start(): Promise<void> {
    if (this.stopping) throw new SiloError('a stopped worker cannot start again: make a new one');
    if (this.members.size > 0) return;
    this.map = await this.readMap();
    const seed = this.addMember(this.map.nodeId, null);
    await seed.started;
    this.addOwners(this.map);
    const every = this.options.mapRefreshMs ?? 30_000;
    if (!this.map.singleNode && every > 0) {
      this.refreshTimer = setInterval(() => {
        this.readMap().then((m) => {
          this.map = m;
          this.addOwners(m);
        }, (err: unknown) => this.report(err, { phase: 'map' }));
      }, Math.max(100, every));
      this.refreshTimer.unref();
    }
  }

  /** Stop every member's worker (SiloWorker.stop, in parallel) and close the report pools. */
  stop(options: { graceMs?: number } = {}): Promise<void> {
    if (!this.stopPromise) {
      this.stopping = true;
      if (this.refreshTimer) clearInterval(this.refreshTimer);
      this.stopPromise = Promise.all([...this.members.values()].map((m) => m.worker.stop(options)))
        .then(() => Promise.all([...this.reportPools.values()].map((p) => p.end().catch(() => undefined))))
        .then(() => undefined);
    }
    return this.stopPromise;
  }

  private report(error: unknown, context: WorkerErrorContext): void {
    try {
      this.onError(toSiloError(error), context);
    } catch {
      /* a throwing onError must not stop the worker */
    }
  }

  /** The seed's map (one connection, closed after). */
  private async readMap(): Promise<ShardMap> {
    const c = new pg.Client({ ...this.seedConfig, application_name: 'silo-node-worker' });
    c.on('error', () => undefined);
    try {
      await c.connect();
      const node = await c.query(SQL_NODE_INFO);
      const shards = await c.query(SQL_CLUSTER_INFO);
      return new ShardMap(snapshotOf(node.rows[0], shards.rows));
    } catch (err) {
      throw toSiloError(err);
    } finally {
      c.end().catch(() => undefined);
    }
  }

  /** The connection options of a node (its hint's address, the seed's credentials). */
  private configOf(conninfo: string | null): pg.ClientConfig {
    if (conninfo === null) return this.seedConfig;
    const {
      connectionString: _c, host: _h, port: _p, database: _d, user: _u, password: _pw, ...base
    } = this.seedConfig;
    return { ...base, ...pgConfigOf(mergeConninfo(this.seedInfo, parseConninfo(conninfo))) };
  }

  /** A member for every owner of the map that is not one yet. */
  private addOwners(map: ShardMap): void {
    if (map.singleNode || this.stopping) return;
    for (const s of map.shards) {
      if (s.isLocal || !s.ownerConninfo || s.ownerNodeId === map.nodeId) continue;
      const key = s.ownerNodeId ?? `conninfo:${s.ownerConninfo}`;
      if (this.members.has(key)) continue;
      this.addMember(s.ownerNodeId, s.ownerConninfo);
    }
  }

  /** Start a worker for one node (conninfo null: the node given). */
  private addMember(nodeId: string | null, conninfo: string | null): Member {
    const single = this.map?.singleNode === true;
    const worker = new SiloWorker<P, R>({
      ...this.options,
      workerId: this.workerId,
      connection: this.configOf(conninfo),
      concurrency: this.options.concurrency ?? 10,
      onError: (error, ctx) => this.report(error, ctx),
    }, single ? {} : {
      slots: this.slots,
      passTenant: true,
      redirect: (err) => this.poolFor(err),
    });
    const member: Member = {
      nodeId, conninfo, worker, started: null,
    };
    member.started = worker.start();
    if (conninfo !== null) {
      member.started.catch((err: unknown) => {
        /* the node cannot be reached now: try again at the next map read */
        this.report(err, { phase: 'connect' });
        const key = nodeId ?? `conninfo:${conninfo}`;
        if (this.members.get(key) === member) this.members.delete(key);
      });
    }
    this.members.set(nodeId ?? (conninfo === null ? '' : `conninfo:${conninfo}`), member);
    return member;
  }

  /** The pool a report follows an SL020 to: the new owner's. */
  private poolFor(err: NotOwnerError): pg.Pool | null {
    if (!err.ownerConninfo) return null;
    const key = err.ownerNodeId ?? `conninfo:${err.ownerConninfo}`;
    let pool = this.reportPools.get(key);
    if (!pool) {
      pool = new pg.Pool({
        ...this.configOf(err.ownerNodeId !== null && err.ownerNodeId === this.map?.nodeId ? null : err.ownerConninfo),
        max: 2, idleTimeoutMillis: 60_000, application_name: 'silo-node-worker',
      });
      pool.on('error', () => undefined);
      this.reportPools.set(key, pool);
    }
    return pool;
  }
}
