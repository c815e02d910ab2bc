/**
 * Routing by tenant in cluster mode (docs/cluster.md): the shard map as a
 * node knows it (silo.cluster_info), the lookup of a tenant's shard, and
 * Router, which sends a call to the tenant's owner, follows SL020's hint
 * to another node, retries SL021 with a backoff, and keeps the map fresh.
 * Router is generic over what a member is (a SiloClient, a worker's
 * connection, or a test's fake), so that its rules are tested alone.
 */

import { NotOwnerError, ShardUnavailableError, isConnectionError } from './errors';
import { tenantHash } from './hash';
import { sleep } from './util';

/** One shard of the map: [start, end) of the hash line, and its owner. */
export interface Shard {
  id: number;
  start: bigint;
  end: bigint;
  ownerNodeId: string | null;
  ownerConninfo: string | null;
  state: string;
  isLocal: boolean;
}

/** A node's map: its own id and mode (silo.node_info) and its shards, by start. */
export interface ShardMapSnapshot {
  nodeId: string | null;
  mode: string;
  shards: Shard[];
}

const MIN = -(2n ** 63n);
const MAX = 2n ** 63n;

/** The shard map with a lookup by hash. */
export class ShardMap {
  readonly nodeId: string | null;
  readonly mode: string;
  readonly shards: Shard[];

  constructor(snapshot: ShardMapSnapshot) {
    this.nodeId = snapshot.nodeId;
    this.mode = snapshot.mode;
    this.shards = [...snapshot.shards].sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0));
  }

  /**
   * Whether this is a single-node silo: one local shard over the whole
   * line, so every call goes to the node it is made on.
   */
  get singleNode(): boolean {
    if (this.mode === 'single-node') return true;
    return this.shards.length === 1 && this.shards[0].isLocal && this.shards[0].start === MIN
      && this.shards[0].end === MAX;
  }

  /** The shard whose range holds hash, or null (no map yet, or a gap). */
  shardOfHash(hash: bigint): Shard | null {
    let lo = 0;
    let hi = this.shards.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const s = this.shards[mid];
      if (hash < s.start) hi = mid - 1;
      else if (hash >= s.end) lo = mid + 1;
      else return s;
    }
    return null;
  }

  /** The tenant's shard, or null. */
  shardOf(tenant: string): Shard | null {
    return this.shardOfHash(tenantHash(tenant));
  }

  /** A copy with shard id's owner replaced (an SL020's hint, newer than the map it came to). */
  withOwner(id: number, ownerNodeId: string | null, ownerConninfo: string): ShardMap {
    return new ShardMap({
      nodeId: this.nodeId,
      mode: this.mode,
      shards: this.shards.map((s) => (s.id !== id ? s : {
        ...s, ownerNodeId, ownerConninfo, isLocal: ownerNodeId !== null && ownerNodeId === this.nodeId,
      })),
    });
  }
}

/** The statements that read a node's map (both together: one round trip each). */
export const SQL_CLUSTER_INFO = 'SELECT shard_id, range_start::text AS range_start, range_end::text AS range_end,'
  + ' owner_node_id, owner_conninfo, state, is_local FROM silo.cluster_info ORDER BY range_start';
export const SQL_NODE_INFO = 'SELECT node_id, mode FROM silo.node_info';

/** A ShardMapSnapshot from the rows of SQL_NODE_INFO and SQL_CLUSTER_INFO. */
export function snapshotOf(node: Record<string, unknown> | undefined, rows: Record<string, unknown>[]): ShardMapSnapshot {
  return {
    nodeId: (node?.node_id as string | null | undefined) ?? null,
    mode: (node?.mode as string | undefined) ?? 'cluster',
    shards: rows.map((r) => ({
      id: Number(r.shard_id),
      start: BigInt(r.range_start as string),
      end: BigInt(r.range_end as string),
      ownerNodeId: (r.owner_node_id as string | null) ?? null,
      ownerConninfo: (r.owner_conninfo as string | null) ?? null,
      state: String(r.state),
      isLocal: r.is_local === true,
    })),
  };
}

/** How Router reaches the members. */
export interface RouterDeps<M> {
  /** The member of the connection string the user gave. */
  seed: M;
  /** Read a member's map. */
  readMap(member: M): Promise<ShardMapSnapshot>;
  /** The member for a node (by its id, or its conninfo when the id is unknown). */
  member(nodeId: string | null, conninfo: string): M;
}

export interface RouterOptions {
  /** SL020 hints followed per call, at most (default 3). */
  maxHops?: number;
  /** How long a call retries SL021 (and an SL020 without owner) in all, in ms (default 5000). */
  retryTimeoutMs?: number;
  /** The first pause before such a retry, in ms (default 100; doubling, at most 2000). */
  retryDelayMs?: number;
}

/** Counts over a router's life: SL020 hints followed, and retries after SL021 (or an SL020 without owner). */
export interface RouteStats {
  followed: number;
  retried: number;
}

/** Where a call went: each SL020 hint followed, and the retries. */
export interface RouteTrace {
  hops: Array<{ shard: number | null; ownerNodeId: string | null; ownerConninfo: string }>;
  retries: number;
}

/**
 * Sends a tenant's calls to the owner of its shard.  The map is read once
 * (from the seed) and again when routing fails: after an SL020 (the hint
 * is applied at once, the map read in the background), before each retry
 * of an SL021, and after a member's connection failed.  On a single-node
 * silo every call goes to the seed with no extra round trip.
 */
export class Router<M> {
  private current: ShardMap | null = null;
  /**
   * SL020 hints by shard, with the owner the map named before: kept over
   * a map read that still names that owner (a node whose map lags behind
   * the one that answered), dropped once a read names another.
   */
  private readonly hints = new Map<number, { before: string | null; nodeId: string | null; conninfo: string }>();
  private loading: Promise<ShardMap> | null = null;
  private readonly maxHops: number;
  /** How long a call retries SL021 in all (ms). */
  readonly retryTimeoutMs: number;
  private readonly retryDelayMs: number;
  /** What the calls met so far (SiloClusterClient.routeStats). */
  readonly stats: RouteStats = { followed: 0, retried: 0 };

  constructor(private readonly deps: RouterDeps<M>, options: RouterOptions = {}) {
    this.maxHops = options.maxHops ?? 3;
    this.retryTimeoutMs = options.retryTimeoutMs ?? 5000;
    this.retryDelayMs = options.retryDelayMs ?? 100;
  }

  /** The map as last read, or null before the first read. */
  get map(): ShardMap | null {
    return this.current;
  }

  /**
   * Read the map again (from the seed; when the seed cannot be reached,
   * from the member of each other shard in turn).  Concurrent calls share
   * one read.
   */
  refresh(): Promise<ShardMap> {
    if (!this.loading) {
      this.loading = this.load().finally(() => {
        this.loading = null;
      });
    }
    return this.loading;
  }

  private async load(): Promise<ShardMap> {
    const tried = new Set<M>();
    let firstError: unknown;
    const candidates: M[] = [this.deps.seed];
    for (const s of this.current?.shards ?? []) {
      if (s.ownerConninfo && !s.isLocal) candidates.push(this.deps.member(s.ownerNodeId, s.ownerConninfo));
    }
    for (const m of candidates) {
      if (tried.has(m)) continue;
      tried.add(m);
      try {
        let map = new ShardMap(await this.deps.readMap(m));
        /* a map read from another node says is_local for that node: keep the seed's view */
        if (m !== this.deps.seed) {
          map = new ShardMap({
            nodeId: this.current?.nodeId ?? null,
            mode: map.mode,
            shards: map.shards.map((s) => ({ ...s, isLocal: s.ownerNodeId !== null && s.ownerNodeId === this.current?.nodeId })),
          });
        }
        for (const [id, h] of [...this.hints]) {
          const s = map.shards.find((x) => x.id === id);
          if (s && s.ownerNodeId === h.before && h.nodeId !== h.before) map = map.withOwner(id, h.nodeId, h.conninfo);
          else this.hints.delete(id);
        }
        this.current = map;
        return map;
      } catch (err) {
        firstError ??= err;
        if (!isConnectionError(err)) break;
      }
    }
    throw firstError;
  }

  /** Read the map in the background (errors are dropped: the next call reads it again). */
  private refreshSoon(): void {
    this.refresh().catch(() => undefined);
  }

  /** The map, read first if it has not been. */
  async ensureMap(): Promise<ShardMap> {
    return this.current ?? this.refresh();
  }

  /** The member a tenant's calls go to by the map (the seed when the shard has no owner). */
  memberOf(map: ShardMap, tenant: string): M {
    if (map.singleNode) return this.deps.seed;
    const s = map.shardOf(tenant);
    if (!s || s.isLocal || !s.ownerConninfo) return this.deps.seed;
    return this.deps.member(s.ownerNodeId, s.ownerConninfo);
  }

  /** Apply an SL020's hint to the map, so that the next call goes there at once. */
  applyHint(err: NotOwnerError): void {
    if (this.current && err.shard !== null && err.ownerConninfo) {
      const s = this.current.shards.find((x) => x.id === err.shard);
      const before = this.hints.get(err.shard)?.before ?? s?.ownerNodeId ?? null;
      this.hints.set(err.shard, { before, nodeId: err.ownerNodeId, conninfo: err.ownerConninfo });
      this.current = this.current.withOwner(err.shard, err.ownerNodeId, err.ownerConninfo);
    }
  }

  /**
   * Run call(member) on the tenant's owner.  SL020 with an owner: follow
   * the hint (at most maxHops times, never back to a member already tried
   * in this round); SL021, or SL020 without an owner: wait (100 ms
   * doubling, at most 2 s), read the map again and retry, until
   * retryTimeoutMs has passed.  Other errors are the call's own (a
   * connection error also has the map read again for the next call).
   * Nothing was written by a call that got SL020 or SL021, so no retry
   * applies a call twice.
   */
  async run<T>(tenant: string, call: (member: M) => Promise<T>, trace?: RouteTrace): Promise<T> {
    const map = await this.ensureMap();
    let member = this.memberOf(map, tenant);
    const deadline = Date.now() + this.retryTimeoutMs;
    let pause = this.retryDelayMs;
    let hops = 0;
    let tried = new Set<M>([member]);
    for (;;) {
      try {
        return await call(member);
      } catch (err) {
        if (err instanceof NotOwnerError && err.ownerConninfo) {
          this.applyHint(err);
          this.refreshSoon();
          const next = err.ownerNodeId !== null && err.ownerNodeId === this.current?.nodeId
            ? this.deps.seed : this.deps.member(err.ownerNodeId, err.ownerConninfo);
          hops++;
          if (hops > this.maxHops || tried.has(next)) {
            throw new NotOwnerError(`${err.message} (${hops > this.maxHops ? `more than ${this.maxHops} hints followed`
              : 'the hint leads back to a node already tried'})`, {
              code: err.code, detail: err.detail, hint: err.hint, where: err.where, cause: err,
            });
          }
          trace?.hops.push({ shard: err.shard, ownerNodeId: err.ownerNodeId, ownerConninfo: err.ownerConninfo });
          this.stats.followed++;
          tried.add(next);
          member = next;
          continue;
        }
        if (err instanceof ShardUnavailableError || err instanceof NotOwnerError) {
          const left = deadline - Date.now();
          if (left <= 0) throw err;
          await sleep(Math.min(pause, left));
          pause = Math.min(pause * 2, 2000);
          if (trace) trace.retries++;
          this.stats.retried++;
          try {
            member = this.memberOf(await this.refresh(), tenant);
          } catch {
            /* the map could not be read: try the same member again */
          }
          tried = new Set<M>([member]);
          continue;
        }
        if (isConnectionError(err) && member !== this.deps.seed) this.refreshSoon();
        throw err;
      }
    }
  }
}
