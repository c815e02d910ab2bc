/**
 * Typed errors.  Every error a silo function raises carries a SQLSTATE
 * (docs/sqlstates.md); toSiloError() turns node-postgres' DatabaseError into
 * the class of that SQLSTATE's family, keeping the code, DETAIL and HINT, and
 * the original error as `cause`.  Branch with `instanceof` (or on `code`),
 * never on the message.
 */

/** The SQLSTATEs silo raises, by name. */
export const SQLSTATE = {
  LEASE_NOT_FOUND: 'SL001',
  LEASE_OWNER_MISMATCH: 'SL002',
  JOB_NOT_FOUND: 'SL003',
  JOB_NOT_TERMINAL: 'SL004',
  JOB_ALREADY_CANCELLED: 'SL005',
  JOB_ALREADY_TERMINAL: 'SL006',
  JOB_NOT_RESTARTABLE: 'SL007',
  JOB_NOT_EXPEDITABLE: 'SL008',
  INTERNAL_INCONSISTENCY: 'SL009',
  WRONG_TASK_KIND: 'SL010',
  WAIT_TIMEOUT: 'SL011',
  JOB_NOT_REIMPORTABLE: 'SL013',
  NOT_OWNER: 'SL020',
  SHARD_UNAVAILABLE: 'SL021',
  NULL_VALUE_NOT_ALLOWED: '22004',
  INVALID_PARAMETER_VALUE: '22023',
  UNIQUE_VIOLATION: '23505',
  INVALID_TRANSACTION_STATE: '25000',
  ACTIVE_SQL_TRANSACTION: '25001',
  READ_ONLY_SQL_TRANSACTION: '25006',
  INSUFFICIENT_PRIVILEGE: '42501',
  UNDEFINED_FUNCTION: '42883',
  FEATURE_NOT_SUPPORTED: '0A000',
  OBJECT_NOT_IN_PREREQUISITE_STATE: '55000',
  LOCK_NOT_AVAILABLE: '55P03',
  QUERY_CANCELED: '57014',
  SERIALIZATION_FAILURE: '40001',
  DEADLOCK_DETECTED: '40P01',
} as const;

/** What the server said besides the message. */
export interface SiloErrorFields {
  /** The SQLSTATE, e.g. `SL003`; undefined for errors that did not come from the server. */
  code?: string;
  detail?: string;
  hint?: string;
  /** PostgreSQL's CONTEXT line (enqueueMany: which element of the array). */
  where?: string;
  cause?: unknown;
}

/** The base class of every error this library throws. */
export class SiloError extends Error {
  /** The SQLSTATE, when the server raised the error. */
  readonly code: string | undefined;
  readonly detail: string | undefined;
  readonly hint: string | undefined;
  readonly where: string | undefined;

  constructor(message: string, fields: SiloErrorFields = {}) {
    super(message, fields.cause === undefined ? undefined : { cause: fields.cause });
    this.name = new.target.name;
    this.code = fields.code;
    this.detail = fields.detail;
    this.hint = fields.hint;
    this.where = fields.where;
  }

  /** Whether the same call may succeed if made again a little later. */
  get retryable(): boolean {
    return false;
  }
}

/** SL001: the lease is gone (never taken, already reported, expired or swept). */
export class LeaseNotFoundError extends SiloError {}
/** SL002: the lease is held by another worker id or another role. */
export class LeaseOwnerMismatchError extends SiloError {}
/** SL003: no such job in that tenant. */
export class NotFoundError extends SiloError {}
/** SL004: the job has not ended (job_result, delete_job). */
export class NotTerminalError extends SiloError {}
/** SL005: cancel of a job that is cancelled or has a cancel pending. */
export class AlreadyCancelledError extends SiloError {}
/** SL006: cancel of a job that already Succeeded or Failed. */
export class AlreadyTerminalError extends SiloError {}
/** SL007: restart of a job that is not Failed or Cancelled. */
export class NotRestartableError extends SiloError {}
/** SL008: expedite of a job that waits for no future start. */
export class NotExpeditableError extends SiloError {}
/** SL009: silo's bookkeeping contradicts itself (a bug: report it). */
export class InconsistencyError extends SiloError {}
/** SL010: a job report on a refresh task, or a refresh report on a job's task. */
export class WrongTaskKindError extends SiloError {}
/** SL011 (or the library's own deadline): the job did not end in time. */
export class WaitTimeoutError extends SiloError {}
/**
 * SL013 (silo 1.8): importJobs met a running job, so no job of the call was
 * imported (a refused re-import of one job is that job's result instead).
 */
export class NotReimportableError extends SiloError {}

/** SL020, cluster mode: the tenant's shard is owned by another node. */
export class NotOwnerError extends SiloError {
  /** The shard the tenant hashes to. */
  readonly shard: number | null;
  /** The owning node's id, or null when the shard has no owner right now. */
  readonly ownerNodeId: string | null;
  /** A conninfo string for the owner (send the call there), or null. */
  readonly ownerConninfo: string | null;
  /** The tenant named in the message. */
  readonly tenant: string | null;

  constructor(message: string, fields: SiloErrorFields = {}) {
    super(message, fields);
    let shard: number | null = null;
    let node: string | null = null;
    let conninfo: string | null = null;
    try {
      const d: unknown = fields.detail ? JSON.parse(fields.detail) : null;
      if (d !== null && typeof d === 'object') {
        const o = d as Record<string, unknown>;
        if (typeof o.shard === 'number') shard = o.shard;
        if (typeof o.owner_node_id === 'string') node = o.owner_node_id;
        if (typeof o.owner_conninfo === 'string') conninfo = o.owner_conninfo;
      }
    } catch {
      /* a DETAIL that is not JSON leaves the fields null */
    }
    const m = /^shard (\d+) of tenant "((?:[^"]|"")*)"/.exec(message);
    if (shard === null && m) shard = Number(m[1]);
    this.shard = shard;
    this.ownerNodeId = node;
    this.ownerConninfo = conninfo;
    this.tenant = m ? m[2].replace(/""/g, '"') : null;
  }

  override get retryable(): boolean {
    return this.ownerConninfo === null; /* no owner yet: retry in a moment */
  }
}

/** SL021, cluster mode: the shard is this node's but cannot be served right now. */
export class ShardUnavailableError extends SiloError {
  override get retryable(): boolean {
    return true;
  }
}

/** 22023 or 22004: an argument is out of bounds, of the wrong shape, or NULL. */
export class InvalidArgumentError extends SiloError {}
/** 23505: a job with this id already exists in the tenant. */
export class DuplicateJobError extends SiloError {}
/** 42501: the role lacks the grant, or may not act in that tenant. */
export class PermissionDeniedError extends SiloError {}
/** 25000, 25001, 25006: wrong isolation level, inside a transaction block, or read only. */
export class TransactionStateError extends SiloError {}
/** 55000: silo is not ready (schema and library versions differ, not preloaded, ...). */
export class PrerequisiteError extends SiloError {}
/**
 * 57014: the statement was cancelled (statement_timeout, pg_cancel_backend,
 * or silo.wait_result's wait cancelled).
 */
export class QueryCanceledError extends SiloError {}
/**
 * 42883: a function silo should have is missing (an older silo, or the
 * extension is not installed in this database).
 */
export class UndefinedFunctionError extends SiloError {}
/**
 * 0A000: silo refused the call (PREPARE TRANSACTION after silo calls, a silo
 * table altered), or PostgreSQL's "cached plan must not change result type"
 * after an ALTER EXTENSION UPDATE changed a prepared statement's result:
 * that one is retryable (on another connection, which the library takes).
 */
export class FeatureNotSupportedError extends SiloError {
  override get retryable(): boolean {
    return isStalePlanError(this);
  }
}
/** 40001, 40P01, 55P03: the transaction met another one; retrying it may work. */
export class ConflictError extends SiloError {
  override get retryable(): boolean {
    return true;
  }
}

/** The connection failed or was lost (no SQLSTATE, class 08, 57P01-57P03). */
export class ConnectionError extends SiloError {
  override get retryable(): boolean {
    return true;
  }
}

/** The worker lost a task's lease while its handler ran: the signal's reason. */
export class LeaseLostError extends SiloError {}
/** The job was cancelled (a heartbeat said so): the signal's reason. */
export class JobCancelledError extends SiloError {}
/** The worker is stopping and the grace period ran out: the signal's reason. */
export class WorkerStoppingError extends SiloError {}

type ErrorClass = new (message: string, fields?: SiloErrorFields) => SiloError;

const BY_CODE: Record<string, ErrorClass> = {
  SL001: LeaseNotFoundError,
  SL002: LeaseOwnerMismatchError,
  SL003: NotFoundError,
  SL004: NotTerminalError,
  SL005: AlreadyCancelledError,
  SL006: AlreadyTerminalError,
  SL007: NotRestartableError,
  SL008: NotExpeditableError,
  SL009: InconsistencyError,
  SL010: WrongTaskKindError,
  SL011: WaitTimeoutError,
  SL013: NotReimportableError,
  SL020: NotOwnerError,
  SL021: ShardUnavailableError,
  '22004': InvalidArgumentError,
  '22023': InvalidArgumentError,
  '23505': DuplicateJobError,
  '42501': PermissionDeniedError,
  '25000': TransactionStateError,
  '25001': TransactionStateError,
  '25006': TransactionStateError,
  '55000': PrerequisiteError,
  '40001': ConflictError,
  '40P01': ConflictError,
  '55P03': ConflictError,
  '57014': QueryCanceledError,
  '42883': UndefinedFunctionError,
  '0A000': FeatureNotSupportedError,
};

const SOCKET_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ENOENT', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH',
  'ENETUNREACH', 'EAI_AGAIN', 'ECONNABORTED',
]);

interface PgErrorLike {
  message?: unknown;
  code?: unknown;
  detail?: unknown;
  hint?: unknown;
  where?: unknown;
}

function str(v: unknown): string | undefined {
  return typeof v === 'string' ? v : undefined;
}

/**
 * Whether err is PostgreSQL's 0A000 "cached plan must not change result
 * type": a prepared statement of this connection outlived a change of the
 * result's type (ALTER EXTENSION silo UPDATE).  The connection should be
 * dropped; the call may be retried on another one.
 */
export function isStalePlanError(err: unknown): boolean {
  if (err === null || typeof err !== 'object') return false;
  const e = err as PgErrorLike;
  return e.code === '0A000' && /cached plan must not change result type/.test(str(e.message) ?? '');
}

/**
 * Whether an error means the connection is unusable (lost, refused,
 * terminated by the server) rather than that the call itself failed.
 */
export function isConnectionError(err: unknown): boolean {
  if (err instanceof ConnectionError) return true;
  if (err === null || typeof err !== 'object') return false;
  const e = err as PgErrorLike;
  const code = str(e.code);
  if (code !== undefined) {
    if (SOCKET_CODES.has(code)) return true;
    if (/^08/.test(code) || code === '57P01' || code === '57P02' || code === '57P03') return true;
    if (/^[0-9A-Z]{5}$/.test(code)) return false;
  }
  const msg = str(e.message) ?? '';
  return /Connection terminated|connection terminated|Client has encountered a connection error|Client was closed and is not queryable|Cannot use a pool after calling end|timeout exceeded when trying to connect|Connection ended unexpectedly|^timeout expired$/.test(msg);
}

/**
 * The typed error for err: a SiloError subclass for a server error (by
 * SQLSTATE), ConnectionError for a lost or refused connection, err itself
 * when it is already a SiloError or not a database error at all.
 */
export function toSiloError(err: unknown): Error {
  if (err instanceof SiloError) return err;
  if (err === null || typeof err !== 'object') return new SiloError(String(err));
  const e = err as PgErrorLike;
  const message = str(e.message) ?? String(err);
  const code = str(e.code);
  const fields: SiloErrorFields = {
    code, detail: str(e.detail), hint: str(e.hint), where: str(e.where), cause: err,
  };
  if (isConnectionError(err)) return new ConnectionError(message, fields);
  if (code !== undefined && /^[0-9A-Z]{5}$/.test(code)) {
    const cls = BY_CODE[code] ?? SiloError;
    return new cls(message, fields);
  }
  return err instanceof Error ? err : new SiloError(message, fields);
}
