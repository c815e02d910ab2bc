"""Typed errors.

Every error a silo function raises carries a SQLSTATE (docs/sqlstates.md);
:func:`to_silo_error` turns psycopg's exceptions into the class of that
SQLSTATE's family, keeping the code, DETAIL, HINT and CONTEXT, and the
original exception as ``__cause__``.  Branch with ``except``/``isinstance``
(or on ``code``), never on the message.
"""

from __future__ import annotations

import json
import re
from typing import Dict, Optional, Type

import psycopg


class SQLSTATE:
    """The SQLSTATEs silo raises, by name."""

    LEASE_NOT_FOUND = "SL001"
    LEASE_OWNER_MISMATCH = "SL002"
    JOB_NOT_FOUND = "SL003"
    JOB_NOT_TERMINAL = "SL004"
    JOB_ALREADY_CANCELLED = "SL005"
    JOB_ALREADY_TERMINAL = "SL006"
    JOB_NOT_RESTARTABLE = "SL007"
    JOB_NOT_EXPEDITABLE = "SL008"
    INTERNAL_INCONSISTENCY = "SL009"
    WRONG_TASK_KIND = "SL010"
    WAIT_TIMEOUT = "SL011"
    JOB_NOT_REIMPORTABLE = "SL013"
    NOT_OWNER = "SL020"
    SHARD_UNAVAILABLE = "SL021"
    NULL_VALUE_NOT_ALLOWED = "22004"
    INVALID_PARAMETER_VALUE = "22023"
    UNIQUE_VIOLATION = "23505"
    INVALID_TRANSACTION_STATE = "25000"
    ACTIVE_SQL_TRANSACTION = "25001"
    READ_ONLY_SQL_TRANSACTION = "25006"
    INSUFFICIENT_PRIVILEGE = "42501"
    UNDEFINED_FUNCTION = "42883"
    FEATURE_NOT_SUPPORTED = "0A000"
    OBJECT_NOT_IN_PREREQUISITE_STATE = "55000"
    LOCK_NOT_AVAILABLE = "55P03"
    QUERY_CANCELED = "57014"
    SERIALIZATION_FAILURE = "40001"
    DEADLOCK_DETECTED = "40P01"


class SiloError(Exception):
    """The base class of every error this library raises.

    ``code`` is the SQLSTATE when the server raised the error (else None);
    ``detail``, ``hint`` and ``where`` (PostgreSQL's CONTEXT: which element
    of an enqueue_many array) are what the server said besides the message.
    """

    def __init__(self, message: str, code: Optional[str] = None, detail: Optional[str] = None,
                 hint: Optional[str] = None, where: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.detail = detail
        self.hint = hint
        self.where = where

    @property
    def retryable(self) -> bool:
        """Whether the same call may succeed if made again a little later."""
        return False


class LeaseNotFoundError(SiloError):
    """SL001: the lease is gone (never taken, already reported, expired or swept)."""


class LeaseOwnerMismatchError(SiloError):
    """SL002: the lease is held by another worker id or another role."""


class NotFoundError(SiloError):
    """SL003: no such job in that tenant."""


class NotTerminalError(SiloError):
    """SL004: the job has not ended (job_result, delete_job)."""


class AlreadyCancelledError(SiloError):
    """SL005: cancel of a job that is cancelled or has a cancel pending."""


class AlreadyTerminalError(SiloError):
    """SL006: cancel of a job that already Succeeded or Failed."""


class NotRestartableError(SiloError):
    """SL007: restart of a job that is not Failed or Cancelled."""


class NotExpeditableError(SiloError):
    """SL008: expedite of a job that waits for no future start."""


class InconsistencyError(SiloError):
    """SL009: silo's bookkeeping contradicts itself (a bug: report it)."""


class WrongTaskKindError(SiloError):
    """SL010: a job report on a refresh task, or a refresh report on a job's task."""


class WaitTimeoutError(SiloError, TimeoutError):
    """SL011 (or the library's own deadline): the job did not end in time."""


class NotReimportableError(SiloError):
    """SL013 (silo 1.8): import_jobs met a running job, so no job of the call was imported.

    A refused re-import of one job is that job's ImportResult instead."""


class NotOwnerError(SiloError):
    """SL020, cluster mode: the tenant's shard is owned by another node.

    ``shard``, ``owner_node_id``, ``owner_conninfo`` come from the JSON
    DETAIL, ``tenant`` from the message.
    """

    def __init__(self, message: str, code: Optional[str] = None, detail: Optional[str] = None,
                 hint: Optional[str] = None, where: Optional[str] = None):
        super().__init__(message, code, detail, hint, where)
        self.shard: Optional[int] = None
        self.owner_node_id: Optional[str] = None
        self.owner_conninfo: Optional[str] = None
        self.tenant: Optional[str] = None
        try:
            d = json.loads(detail) if detail else None
        except ValueError:
            d = None
        if isinstance(d, dict):
            if isinstance(d.get("shard"), int):
                self.shard = d["shard"]
            if isinstance(d.get("owner_node_id"), str):
                self.owner_node_id = d["owner_node_id"]
            if isinstance(d.get("owner_conninfo"), str):
                self.owner_conninfo = d["owner_conninfo"]
        m = re.match(r'^shard (\d+) of tenant "((?:[^"]|"")*)"', message or "")
        if m:
            if self.shard is None:
                self.shard = int(m.group(1))
            self.tenant = m.group(2).replace('""', '"')

    @property
    def retryable(self) -> bool:
        return self.owner_conninfo is None  # no owner yet: retry in a moment


class ShardUnavailableError(SiloError):
    """SL021, cluster mode: the shard is this node's but cannot be served right now."""

    @property
    def retryable(self) -> bool:
        return True


class InvalidArgumentError(SiloError, ValueError):
    """22023 or 22004: an argument is out of bounds, of the wrong shape, or NULL."""


class DuplicateJobError(SiloError):
    """23505: a job with this id already exists in the tenant."""


class PermissionDeniedError(SiloError, PermissionError):
    """42501: the role lacks the grant, or may not act in that tenant."""


class TransactionStateError(SiloError):
    """25000, 25001, 25006: wrong isolation level, inside a transaction block, or read only."""


class PrerequisiteError(SiloError):
    """55000: silo is not ready (schema and library versions differ, not preloaded, ...)."""


class QueryCanceledError(SiloError):
    """57014: the statement was cancelled (statement_timeout, pg_cancel_backend)."""


class UndefinedFunctionError(SiloError):
    """42883: a function silo should have is missing (an older silo, or no extension here)."""


class FeatureNotSupportedError(SiloError):
    """0A000: silo refused the call, or "cached plan must not change result type" (retryable)."""

    @property
    def retryable(self) -> bool:
        return is_stale_plan_error(self)


class ConflictError(SiloError):
    """40001, 40P01, 55P03: the transaction met another one; retrying it may work."""

    @property
    def retryable(self) -> bool:
        return True


class SiloConnectionError(SiloError, ConnectionError):
    """The connection failed or was lost (no SQLSTATE, class 08, 57P01-57P03)."""

    @property
    def retryable(self) -> bool:
        return True


class LeaseLostError(SiloError):
    """The worker lost a task's lease while its handler ran: the context's reason."""


class JobCancelledError(SiloError):
    """The job was cancelled (a heartbeat said so): the context's reason."""


class WorkerStoppingError(SiloError):
    """The worker is stopping and the grace period ran out: the context's reason."""


BY_CODE: Dict[str, Type[SiloError]] = {
    "SL001": LeaseNotFoundError,
    "SL002": LeaseOwnerMismatchError,
    "SL003": NotFoundError,
    "SL004": NotTerminalError,
    "SL005": AlreadyCancelledError,
    "SL006": AlreadyTerminalError,
    "SL007": NotRestartableError,
    "SL008": NotExpeditableError,
    "SL009": InconsistencyError,
    "SL010": WrongTaskKindError,
    "SL011": WaitTimeoutError,
    "SL013": NotReimportableError,
    "SL020": NotOwnerError,
    "SL021": ShardUnavailableError,
    "22004": InvalidArgumentError,
    "22023": InvalidArgumentError,
    "23505": DuplicateJobError,
    "42501": PermissionDeniedError,
    "25000": TransactionStateError,
    "25001": TransactionStateError,
    "25006": TransactionStateError,
    "55000": PrerequisiteError,
    "40001": ConflictError,
    "40P01": ConflictError,
    "55P03": ConflictError,
    "57014": QueryCanceledError,
    "42883": UndefinedFunctionError,
    "0A000": FeatureNotSupportedError,
}

_CONNECTION_CODES = {"57P01", "57P02", "57P03"}


def is_stale_plan_error(err: BaseException) -> bool:
    """Whether err is 0A000 "cached plan must not change result type" (drop the connection)."""
    code = getattr(err, "code", None) or getattr(err, "sqlstate", None)
    return code == "0A000" and "cached plan must not change result type" in str(err)


def is_connection_error(err: BaseException) -> bool:
    """Whether err means the connection is unusable rather than that the call failed."""
    if isinstance(err, SiloConnectionError):
        return True
    if isinstance(err, SiloError):
        return False
    if isinstance(err, psycopg.Error):
        code = err.sqlstate
        if code is None:
            # OperationalError / InterfaceError without SQLSTATE: the connection broke
            return isinstance(err, (psycopg.OperationalError, psycopg.InterfaceError))
        return code.startswith("08") or code in _CONNECTION_CODES
    return isinstance(err, (OSError, EOFError))


def to_silo_error(err: BaseException) -> BaseException:
    """The typed error for err.

    A :class:`SiloError` subclass for a server error (by SQLSTATE),
    :class:`SiloConnectionError` for a lost or refused connection, err itself
    when it is already a SiloError or not a database error at all.  The
    original exception is set as ``__cause__``.
    """
    if isinstance(err, SiloError):
        return err
    if not isinstance(err, (psycopg.Error, OSError, EOFError)):
        return err
    if isinstance(err, psycopg.Error):
        diag = err.diag
        message = diag.message_primary or str(err).strip()
        code = err.sqlstate
        fields = dict(code=code, detail=diag.message_detail, hint=diag.message_hint, where=diag.context)
    else:
        message, code, fields = str(err), None, {}
    if is_connection_error(err):
        out: SiloError = SiloConnectionError(message, **fields)
    elif code and re.fullmatch(r"[0-9A-Z]{5}", code):
        out = BY_CODE.get(code, SiloError)(message, **fields)
    else:
        out = SiloError(message, **fields)
    out.__cause__ = err
    return out
