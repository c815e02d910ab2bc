/**
 * SiloClusterClient: SiloClient for a silo in cluster mode (docs/cluster.md).
 * Given one node's connection string it reads that node's shard map
 * (silo.cluster_info, silo.node_info), keeps one pool per member, and sends
 * every call that names a tenant to the owner of the tenant's shard
 * (router.ts: SL020 hints followed, SL021 retried).  On a single-node silo
 * it is SiloClient with one more statement, the first map read.
 */

import type pg from 'pg';

import { NotOwnerError, ShardUnavailableError } from './errors';
import { SiloClient, toJob } from './client';
import {
  Conninfo, conninfoOfConfig, mergeConninfo, parseConninfo, pgConfigOf,
} from './conninfo';
import {
  RouteStats, Router, RouterOptions, SQL_CLUSTER_INFO, SQL_NODE_INFO, Shard, ShardMap, ShardMapSnapshot, snapshotOf,
} from './router';
import { tenantHash } from './hash';
import type {
  AwaitResultOptions, EnqueueOptions, Job, JobRef, JobResult, JobSpec,
} from './types';

/** How SiloClusterClient reaches the cluster: one node's connection (pool options) and the routing's bounds. */
export interface SiloClusterClientOptions extends pg.PoolConfig, RouterOptions {}

/** Where a tenant's calls go, by the client's map. */
export interface TenantLocation {
  tenant: string;
  hash: bigint;
  shard: Shard | null;
  /** Whether the calls go to the node of the connection string given. */
  seed: boolean;
}

/*
 * getJob in cluster mode: the view raises no SL020 (a node that does not own
 * the shard has none of its rows), so the statement says whether the shard
 * is this node's, with the owner, in the same round trip.
 */
const SQL_GET_JOB_ROUTED = 'SELECT c.is_local AS "silo$local", c.owner_node_id AS "silo$owner",'
  + ' c.owner_conninfo AS "silo$conninfo", c.shard_id AS "silo$shard", j.*'
  + ' FROM silo.cluster_info c LEFT JOIN silo.jobs j ON j.tenant = $1 AND j.id = $2'
  + ' WHERE c.shard_id = silo.shard_for_tenant($1)';

function tenantOf(ref: JobRef | undefined): string {
  return ref?.tenant ?? '-';
}

/** A member's map (two statements on its pool). */
async function readMap(c: SiloClient): Promise<ShardMapSnapshot> {
  const node = await c.rows(SQL_NODE_INFO, []);
  const shards = await c.rows(SQL_CLUSTER_INFO, []);
  return snapshotOf(node[0], shards);
}

export class SiloClusterClient {
  private readonly seed: SiloClient;
  private readonly seedInfo: Conninfo;
  private readonly baseConfig: pg.PoolConfig;
  private readonly members = new Map<string, { conninfo: string; client: SiloClient }>();
  private readonly router: Router<SiloClient>;
  private closed = false;

  constructor(options: SiloClusterClientOptions | string) {
    const opts: SiloClusterClientOptions = typeof options === 'string' ? { connectionString: options } : options;
    const {
      maxHops, retryTimeoutMs, retryDelayMs, ...poolConfig
    } = opts;
    this.seedInfo = conninfoOfConfig(poolConfig);
    const {
      connectionString: _c, host: _h, port: _p, database: _d, user: _u, password: _pw, ...base
    } = poolConfig;
    this.baseConfig = base;
    this.seed = new SiloClient(poolConfig);
    this.router = new Router<SiloClient>({
      seed: this.seed,
      readMap,
      member: (nodeId, conninfo) => this.member(nodeId, conninfo),
    }, { maxHops, retryTimeoutMs, retryDelayMs });
  }

  /**
   * The client for a node: one pool per node id, made again when the node's
   * advertised conninfo changes.  It connects with the hint's host, port
   * and database and this client's own credentials and settings.
   */
  private member(nodeId: string | null, conninfo: string): SiloClient {
    const key = nodeId ?? `conninfo:${conninfo}`;
    const known = this.members.get(key);
    if (known && known.conninfo === conninfo) return known.client;
    const config: pg.PoolConfig = { ...this.baseConfig, ...pgConfigOf(mergeConninfo(this.seedInfo, parseConninfo(conninfo))) };
    const client = new SiloClient(config);
    if (known) known.client.close().catch(() => undefined);
    if (this.closed) client.close().catch(() => undefined);
    this.members.set(key, { conninfo, client });
    return client;
  }

  /** Read the shard map again from the node given (or, when it is down, another member). */
  refreshMap(): Promise<ShardMap> {
    return this.router.refresh();
  }

  /**
   * What the calls met so far: SL020 hints followed to another node, and
   * retries after SL021 (or an SL020 without owner).  enqueueMany counts
   * one per statement.
   */
  get routeStats(): RouteStats {
    return { ...this.router.stats };
  }

  /** The shard map as last read (null before the first call). */
  get map(): ShardMap | null {
    return this.router.map;
  }

  /** Where the tenant's calls go, by the map (read first if needed). */
  async locate(tenant: string): Promise<TenantLocation> {
    const map = await this.router.ensureMap();
    return {
      tenant, hash: tenantHash(tenant), shard: map.shardOf(tenant), seed: this.router.memberOf(map, tenant) === this.seed,
    };
  }

  /** Close every pool. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([this.seed.close(), ...[...this.members.values()].map((m) => m.client.close())]);
  }

  /** SiloClient.enqueue on the owner of the tenant's shard. */
  enqueue<P = unknown>(taskGroup: string, payload?: P, options: EnqueueOptions = {}): Promise<string> {
    return this.router.run(options.tenant ?? '-', (c) => c.enqueue(taskGroup, payload, options));
  }

  /**
   * SiloClient.enqueueMany, one statement per owner (in parallel); ids in
   * the order given.  All or none per owner, not across owners: when one
   * owner refuses its jobs, those of the others may have been enqueued (the
   * error is thrown after every statement ended).  Jobs whose owner said
   * SL020 or SL021 are sent again, to the new owner or after a pause.
   */
  async enqueueMany(jobs: JobSpec[]): Promise<string[]> {
    if (jobs.length === 0) return [];
    const map = await this.router.ensureMap();
    if (map.singleNode) return this.router.run('-', (c) => c.enqueueMany(jobs));
    const ids: string[] = new Array<string>(jobs.length);
    let pending = jobs.map((_j, i) => i);
    const deadline = Date.now() + this.router.retryTimeoutMs;
    let pause = 100;
    for (let round = 0; ; round++) {
      const current = this.router.map ?? map;
      const groups = new Map<SiloClient, number[]>();
      for (const i of pending) {
        const m = this.router.memberOf(current, jobs[i].tenant ?? '-');
        const g = groups.get(m);
        if (g) g.push(i);
        else groups.set(m, [i]);
      }
      const entries = [...groups.entries()];
      const outcomes = await Promise.allSettled(entries.map(([m, idx]) => m.enqueueMany(idx.map((i) => jobs[i]))));
      const again: number[] = [];
      let hard: unknown;
      let moved: unknown;
      let wait = false;
      outcomes.forEach((o, k) => {
        const idx = entries[k][1];
        if (o.status === 'fulfilled') {
          idx.forEach((i, n) => {
            ids[i] = o.value[n];
          });
          return;
        }
        const err = o.reason;
        if (err instanceof NotOwnerError && err.ownerConninfo) {
          this.router.applyHint(err);
          this.router.stats.followed++;
          moved = err;
          again.push(...idx);
        } else if (err instanceof NotOwnerError || err instanceof ShardUnavailableError) {
          wait = true;
          moved = err;
          again.push(...idx);
        } else {
          hard ??= err;
        }
      });
      if (hard !== undefined) throw hard;
      if (again.length === 0) return ids;
      if (round >= 8 || Date.now() >= deadline) throw moved;
      if (wait) {
        this.router.stats.retried++;
        await new Promise((r) => setTimeout(r, Math.min(pause, Math.max(0, deadline - Date.now()))));
        pause = Math.min(pause * 2, 2000);
        await this.router.refresh().catch(() => undefined);
      } else {
        this.router.refresh().catch(() => undefined);
      }
      pending = again;
    }
  }

  /**
   * SiloClient.getJob on the owner.  Views raise no SL020, so in cluster
   * mode the statement also says whether the shard is the node's, and the
   * call goes on to the owner it names when not.
   */
  async getJob<P = unknown>(id: string, ref?: JobRef): Promise<Job<P> | null> {
    const tenant = tenantOf(ref);
    const map = await this.router.ensureMap();
    if (map.singleNode) return this.seed.getJob<P>(id, ref);
    return this.router.run(tenant, async (c) => {
      const rows = await c.rows(SQL_GET_JOB_ROUTED, [tenant, id]);
      const r = rows[0];
      if (!r) throw new NotOwnerError(`the node has no shard for tenant "${tenant}"`, { code: 'SL020' });
      if (r['silo$local'] !== true) {
        const detail = JSON.stringify({
          shard: r['silo$shard'], owner_node_id: r['silo$owner'], owner_conninfo: r['silo$conninfo'],
        });
        throw new NotOwnerError(`shard ${String(r['silo$shard'])} of tenant "${tenant.replace(/"/g, '""')}"`
          + ' is not served by this node', { code: 'SL020', detail });
      }
      if (r.id === null) return null;
      const row: Record<string, unknown> = {};
      for (const k of Object.keys(r)) if (!k.startsWith('silo$')) row[k] = r[k];
      return toJob<P>(row);
    });
  }

  /** SiloClient.cancel on the owner. */
  cancel(id: string, ref?: JobRef): Promise<void> {
    return this.router.run(tenantOf(ref), (c) => c.cancel(id, ref));
  }

  /** SiloClient.restart on the owner. */
  restart(id: string, ref?: JobRef): Promise<void> {
    return this.router.run(tenantOf(ref), (c) => c.restart(id, ref));
  }

  /** SiloClient.expedite on the owner. */
  expedite(id: string, ref?: JobRef): Promise<void> {
    return this.router.run(tenantOf(ref), (c) => c.expedite(id, ref));
  }

  /** SiloClient.deleteJob on the owner. */
  deleteJob(id: string, ref?: JobRef): Promise<boolean> {
    return this.router.run(tenantOf(ref), (c) => c.deleteJob(id, ref));
  }

  /** SiloClient.getJobResult on the owner. */
  getJobResult<R = unknown>(id: string, ref?: JobRef): Promise<JobResult<R>> {
    return this.router.run(tenantOf(ref), (c) => c.getJobResult<R>(id, ref));
  }

  /** SiloClient.awaitResult on the owner (the wait happens there). */
  awaitResult<R = unknown>(id: string, options: AwaitResultOptions = {}): Promise<JobResult<R>> {
    return this.router.run(tenantOf(options), (c) => c.awaitResult<R>(id, options));
  }
}
