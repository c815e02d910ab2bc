/**
 * silo-client: a Node.js client and worker for silo, the job queue that
 * lives inside PostgreSQL (docs/api.md of the silo repository).
 */
export * from './errors';
export * from './types';
export { SiloClient } from './client';
export type { SiloClientOptions } from './client';
export { SiloWorker, TaskFailure } from './worker';
export type {
  RefreshHandler, SiloWorkerOptions, TaskContext, TaskHandler, WorkerErrorContext, WorkerStats,
} from './worker';
export type { Queryable } from './util';
export { SiloClusterClient } from './cluster';
export type { SiloClusterClientOptions, TenantLocation } from './cluster';
export { SiloClusterWorker } from './clusterWorker';
export type { SiloClusterWorkerOptions } from './clusterWorker';
export { ShardMap, Router } from './router';
export type {
  RouteStats, RouteTrace, RouterDeps, RouterOptions, Shard, ShardMapSnapshot,
} from './router';
export { tenantHash, hashBytesExtended } from './hash';
export { mergeConninfo, parseConninfo } from './conninfo';
