/**
 * The shapes of silo's arguments and rows, in camelCase.  Field names of
 * retry policies and limits are Silo's client names, as silo's JSON
 * arguments take them (docs/api.md, docs/limits.md).
 */

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A job's retry policy (docs/api.md, "retry_policy"). Every key may be left out. */
export interface RetryPolicy {
  /** Retries after the first attempt, 0-1,000,000 (default 0). */
  retryCount?: number;
  /** Delay before the first retry in ms (default 1000). */
  initialIntervalMs?: number;
  /** Cap on every delay in ms (default 3,600,000). */
  maxIntervalMs?: number;
  /** Growth of the delay per retry, 1-1000 (default 2). */
  backoffFactor?: number;
  /** Multiply each delay by a random factor in [1, 2) (default false). */
  randomizeInterval?: boolean;
}

/** At most `maxConcurrency` jobs holding `key` run at once. */
export interface ConcurrencyLimit {
  type: 'concurrency';
  key: string;
  maxConcurrency: number;
}

/** A concurrency limit whose max a worker's refreshHandler recomputes. */
export interface FloatingConcurrencyLimit {
  type: 'floatingConcurrency';
  key: string;
  /** The max until the first refresh. */
  defaultMaxConcurrency: number;
  /** How often the key is refreshed while it is in use, in ms. */
  refreshIntervalMs: number;
  /** Handed to the refresh handler (an object of strings). */
  metadata?: Record<string, string>;
}

/** A token or leaky bucket per (tenant, name, uniqueKey). */
export interface RateLimit {
  type: 'rateLimit';
  name: string;
  uniqueKey: string;
  limit: number;
  durationMs: number;
  /** Hits this job takes (default 1). */
  hits?: number;
  /** Default 'tokenBucket'. */
  algorithm?: 'tokenBucket' | 'leakyBucket';
  /** Accepted for compatibility with Silo's client and ignored. */
  behavior?: number;
  /** How a job that was refused re-checks the bucket. */
  retryPolicy?: {
    initialBackoffMs?: number;
    maxBackoffMs?: number;
    backoffMultiplier?: number;
    /** 0 (the default) re-checks without end. */
    maxRetries?: number;
  };
}

export type Limit = ConcurrencyLimit | FloatingConcurrencyLimit | RateLimit;

/** Options of SiloClient.enqueue (silo.enqueue's arguments; each may be left out). */
export interface EnqueueOptions {
  /** Default '-' (the default tenant). */
  tenant?: string;
  /** 1-128 characters; a time-ordered UUID is generated when left out. */
  id?: string;
  /** 0-99, 0 is the highest (default 50). */
  priority?: number;
  /** When the job may start (default: now): a Date, or an ISO 8601 string such as '2030-01-01T09:00:00Z'. */
  startAt?: Date | string;
  /** No retries when left out. */
  retryPolicy?: RetryPolicy;
  /** At most 16 limits, checked in order. */
  limits?: Limit[];
  /** At most 16 string values, indexed per (tenant, key, value). */
  metadata?: Record<string, string>;
  /** 'error' (default): a job with this id raises DuplicateJobError; 'ignore': returns the existing id. */
  onConflict?: 'error' | 'ignore';
}

/** One job of SiloClient.enqueueMany. */
export interface JobSpec<P = unknown> extends EnqueueOptions {
  taskGroup: string;
  /** Any JSON value (default {}). */
  payload?: P;
}

/** One attempt a job had in the queue it comes from (SiloClient.importJobs). */
export interface ImportAttempt {
  /** Only attempts that ended; every attempt but the last must be Failed. */
  status: 'Succeeded' | 'Failed' | 'Cancelled';
  /** When it ended (not in the future, not before the attempt before it). */
  finishedAt: Date | string;
  /** When it started; left out, the attempt never started. */
  startedAt?: Date | string;
  /** Needs startedAt; 'import' when left out. */
  workerId?: string;
  /** Succeeded only. */
  result?: Json;
  /** Failed only, and required there (1-256 characters). */
  errorCode?: string;
  /** Failed only. */
  errorData?: Json;
}

/**
 * One job of SiloClient.importJobs: an enqueue's fields, its id (required)
 * and its history.  A job whose id the tenant has is re-imported: attempts
 * must then be its whole history, starting with the attempts silo holds.
 */
export interface ImportJobSpec<P = unknown> extends Omit<JobSpec<P>, 'id' | 'onConflict'> {
  id: string;
  /** When the job was first enqueued (default: now). */
  enqueuedAt?: Date | string;
  /** Oldest first; none: the job runs as after an enqueue. */
  attempts?: ImportAttempt[];
}

/** What SiloClient.importJobs says of one job, in the order given. */
export interface ImportResult {
  id: string;
  tenant: string;
  success: boolean;
  /** The job's state after the import, as silo.jobs names it; null when refused. */
  status: JobStatus | null;
  /** Why the job was refused (nothing of it written); null on success. */
  error: string | null;
  /** SL013 (a refused re-import) or 23505; null on success. */
  sqlstate: string | null;
}

export type JobStatus =
  | 'Scheduled' | 'Retrying' | 'Waiting' | 'Running'
  | 'Succeeded' | 'Failed' | 'Cancelled';

/** A row of silo.jobs. */
export interface Job<P = unknown> {
  tenant: string;
  id: string;
  taskGroup: string;
  status: JobStatus;
  priority: number;
  enqueuedAt: Date;
  statusChangedAt: Date;
  /** The attempt running or coming next; null for a terminal job. */
  currentAttempt: number | null;
  /** When the pending task is due; null when Running or terminal. */
  nextAttemptAt: Date | null;
  payload: P;
  metadata: Record<string, string>;
  /** Set when the job was cancelled (also on a job that Succeeded after a cancel). */
  cancelledAt: Date | null;
  /** The job's limits as stored, in enqueue's shape ([] for none; silo 1.8). */
  limits: Limit[];
  /** The job's retry policy with every key given, or null for none (the first failure is final; silo 1.8). */
  retryPolicy: Required<RetryPolicy> | null;
}

/** The outcome of a terminal job (silo.job_result). */
export interface JobResult<R = unknown> {
  status: 'Succeeded' | 'Failed' | 'Cancelled';
  /** The last attempt's result when Succeeded, else null. */
  result: R | null;
  /** From the attempt that ended the job: the code passed to fail, WORKER_CRASHED, RELEASED, or null. */
  errorCode: string | null;
  errorData: Json | null;
  finishedAt: Date;
}

/** Which tenant a job operation is about. */
export interface JobRef {
  /** Default '-'. */
  tenant?: string;
}

/** Options of SiloClient.awaitResult. */
export interface AwaitResultOptions extends JobRef {
  /** Give up after this many ms with WaitTimeoutError (default 30,000). */
  timeoutMs?: number;
  /** Abort the wait; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Without silo.wait_result: the longest pause between two polls (default 1000 ms). */
  maxPollIntervalMs?: number;
}

/** A run task handed to a worker's handler (a row of silo.lease of kind 'run'). */
export interface Task<P = unknown> {
  kind: 'run';
  /** Identifies this attempt; new for every attempt. */
  id: string;
  tenant: string;
  jobId: string;
  /** 1-based, rising across restarts. */
  attempt: number;
  /** Attempt number within the current run (1 after a restart). */
  relativeAttempt: number;
  /** True when a failure of this attempt is final. */
  isLastAttempt: boolean;
  priority: number;
  taskGroup: string;
  payload: P;
  metadata: Record<string, string>;
  /** When the lease ends unless renewed (the worker renews it). */
  leaseExpiresAt: Date;
  /**
   * The job's limits, in enqueue's shape (normalized: every key given; [] for none). The task
   * holds them already: a worker reads them, it does not acquire them (silo 1.8).
   */
  limits: Limit[];
  /**
   * The job's retry policy with every key given, or null when the job has none (its first
   * failure is final). Can be passed back to enqueue as it is (silo 1.8).
   */
  retryPolicy: Required<RetryPolicy> | null;
}

/** A refresh task of a floating concurrency limit (a row of silo.lease of kind 'refresh'). */
export interface RefreshTask {
  kind: 'refresh';
  id: string;
  tenant: string;
  taskGroup: string;
  /** The floating limit's key. */
  queueKey: string;
  /** The key's max now. */
  currentMaxConcurrency: number;
  /** The limit's metadata ({} if none was given). */
  metadata: Record<string, string>;
  leaseExpiresAt: Date;
}
