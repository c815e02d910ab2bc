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
