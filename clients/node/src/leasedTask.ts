/**
 * The worker's lease statement and the tasks it builds from its rows.
 *
 * A lease brings up to a thousand rows, and a busy worker leases thousands
 * of tasks a second: each row becomes its Task (or RefreshTask) in one
 * object literal of a fixed shape, read column by column, without renaming
 * keys or deleting the other kind's fields afterwards.
 */

import type { Json, Limit, RefreshTask, RetryPolicy, Task } from './types';

/*
 * The columns are named (not *): ALTER EXTENSION silo UPDATE may add
 * columns to silo.leased_task, and this statement's result stays what it
 * was.  It is prepared under a name, parsed and planned once per
 * connection rather than once per lease (a busy worker leases hundreds of
 * times a second).  Should an update change the type of a column named
 * here, the server answers 0A000 ("cached plan must not change result
 * type"): poolQuery drops that connection, the lease loop reports the
 * error and leases again after its backoff, on a new connection where the
 * statement is prepared afresh.
 */
const LEASE_COLUMNS = ['task_id', 'kind', 'tenant', 'job_id', 'attempt', 'relative_attempt', 'is_last_attempt',
  'priority', 'task_group', 'payload', 'metadata', 'lease_expires_at', 'queue_key', 'current_max_concurrency',
  'refresh_metadata', 'limits', 'retry_policy'];

/** silo.lease(worker_id, task_group, max_tasks, lease_ms, tenants), its columns named. */
export const SQL_LEASE = `SELECT ${LEASE_COLUMNS.join(', ')} FROM silo.lease($1::text, $2::text, $3::int, $4::int, $5::text[])`;

/** A row of SQL_LEASE, as node-postgres parses it. */
interface LeaseRow {
  task_id: string;
  kind: string;
  tenant: string;
  job_id: string | null;
  attempt: number | null;
  relative_attempt: number | null;
  is_last_attempt: boolean | null;
  priority: number;
  task_group: string;
  payload: Json;
  metadata: Record<string, string>;
  lease_expires_at: Date;
  queue_key: string | null;
  current_max_concurrency: number | null;
  refresh_metadata: Record<string, string> | null;
  limits: Limit[];
  retry_policy: Required<RetryPolicy> | null;
}

/**
 * A row of silo.lease as a Task or a RefreshTask (camelCase keys; a refresh
 * task's metadata is its limit's, {} when it has none).
 */
export function toTask(r: Record<string, unknown>): Task | RefreshTask {
  const row = r as unknown as LeaseRow;
  if (row.kind === 'refresh') {
    const refresh = {
      kind: 'refresh',
      tenant: row.tenant,
      priority: row.priority,
      taskGroup: row.task_group,
      metadata: row.refresh_metadata ?? {},
      leaseExpiresAt: row.lease_expires_at,
      queueKey: row.queue_key,
      currentMaxConcurrency: row.current_max_concurrency,
      id: row.task_id,
    };
    return refresh as RefreshTask;
  }
  const task = {
    kind: 'run',
    tenant: row.tenant,
    jobId: row.job_id,
    attempt: row.attempt,
    relativeAttempt: row.relative_attempt,
    isLastAttempt: row.is_last_attempt,
    priority: row.priority,
    taskGroup: row.task_group,
    payload: row.payload,
    metadata: row.metadata,
    leaseExpiresAt: row.lease_expires_at,
    limits: row.limits,
    retryPolicy: row.retry_policy,
    id: row.task_id,
  };
  return task as Task;
}
