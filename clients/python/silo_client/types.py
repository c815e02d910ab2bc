"""The shapes of silo's arguments and rows.

Options are dataclasses with snake_case fields; they become the JSON silo's
functions take (Silo's camelCase key names: docs/api.md, docs/limits.md).
Plain dicts with those JSON keys are accepted wherever an option object is.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Union

from .errors import InvalidArgumentError

JobStatus = Literal["Scheduled", "Retrying", "Waiting", "Running", "Succeeded", "Failed", "Cancelled"]


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


#: "not given": the payload default ({}), distinct from None (JSON null).
UNSET: Any = _Unset()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _to_json(obj: Any) -> Any:
    """A dataclass option as silo's JSON (camelCase keys, None fields left out)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: Dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if v is None:
                continue
            out[f.metadata.get("json", _camel(f.name))] = _to_json(v)
        return out
    if isinstance(obj, Mapping):
        return {k: _to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_json(v) for v in obj]
    return obj


@dataclass
class RetryPolicy:
    """A job's retry policy (docs/api.md, "retry_policy"). Every field may be left out."""

    retry_count: Optional[int] = None
    """Retries after the first attempt, 0-1,000,000 (default 0)."""
    initial_interval_ms: Optional[int] = None
    """Delay before the first retry in ms (default 1000)."""
    max_interval_ms: Optional[int] = None
    """Cap on every delay in ms (default 3,600,000)."""
    backoff_factor: Optional[float] = None
    """Growth of the delay per retry, 1-1000 (default 2)."""
    randomize_interval: Optional[bool] = None
    """Multiply each delay by a random factor in [1, 2) (default false)."""

    def to_json(self) -> Dict[str, Any]:
        return _to_json(self)


@dataclass
class ConcurrencyLimit:
    """At most ``max_concurrency`` jobs holding ``key`` run at once."""

    key: str
    max_concurrency: int
    type: str = field(default="concurrency", init=False)

    def to_json(self) -> Dict[str, Any]:
        return _to_json(self)


@dataclass
class FloatingConcurrencyLimit:
    """A concurrency limit whose max a worker's refresh handler recomputes."""

    key: str
    default_max_concurrency: int
    refresh_interval_ms: int
    metadata: Optional[Dict[str, str]] = None
    type: str = field(default="floatingConcurrency", init=False)

    def to_json(self) -> Dict[str, Any]:
        return _to_json(self)


@dataclass
class RateLimitRetryPolicy:
    """How a job that a rate limit refused re-checks the bucket."""

    initial_backoff_ms: Optional[int] = None
    max_backoff_ms: Optional[int] = None
    backoff_multiplier: Optional[float] = None
    max_retries: Optional[int] = None
    """0 (the default) re-checks without end."""


@dataclass
class RateLimit:
    """A token or leaky bucket per (tenant, name, unique_key)."""

    name: str
    unique_key: str
    limit: int
    duration_ms: int
    hits: Optional[int] = None
    algorithm: Optional[Literal["tokenBucket", "leakyBucket"]] = None
    behavior: Optional[int] = None
    retry_policy: Optional[Union[RateLimitRetryPolicy, Dict[str, Any]]] = None
    type: str = field(default="rateLimit", init=False)

    def to_json(self) -> Dict[str, Any]:
        return _to_json(self)


Limit = Union[ConcurrencyLimit, FloatingConcurrencyLimit, RateLimit, Dict[str, Any]]


@dataclass
class JobSpec:
    """One job of ``enqueue_many``: ``enqueue``'s arguments."""

    task_group: str
    payload: Any = UNSET
    """Any JSON value (default {}); None stores JSON null."""
    tenant: Optional[str] = None
    id: Optional[str] = None
    priority: Optional[int] = None
    start_at: Optional[Union[_dt.datetime, str]] = None
    retry_policy: Optional[Union[RetryPolicy, Dict[str, Any]]] = None
    limits: Optional[Sequence[Limit]] = None
    metadata: Optional[Dict[str, str]] = None
    on_conflict: Optional[Literal["error", "ignore"]] = None


def start_at_param(v: Union[_dt.datetime, str]) -> str:
    """start_at as an ISO 8601 string; a datetime must carry its time zone."""
    if isinstance(v, _dt.datetime):
        if v.tzinfo is None or v.utcoffset() is None:
            raise InvalidArgumentError("start_at must be a timezone-aware datetime", code="22023")
        return v.isoformat()
    if isinstance(v, str):
        return v
    raise InvalidArgumentError("start_at must be a datetime or an ISO 8601 string", code="22023")


def job_object(spec: Union[JobSpec, Mapping[str, Any]]) -> Dict[str, Any]:
    """The job object of silo.enqueue_many for one JobSpec (or a dict of JobSpec's fields)."""
    if isinstance(spec, Mapping):
        # silo's own key names; an unknown key goes to silo, which names it (22023)
        d = {k: v for k, v in spec.items() if v is not None or k == "payload"}
        d.setdefault("payload", {})
        if d.get("start_at") is not None:
            d["start_at"] = start_at_param(d["start_at"])
        for k in ("retry_policy", "limits"):
            if k in d:
                d[k] = _to_json(d[k])
        return d
    obj: Dict[str, Any] = {
        "task_group": spec.task_group,
        "payload": {} if spec.payload is UNSET else spec.payload,
    }
    for name in ("tenant", "id", "priority", "metadata", "on_conflict"):
        v = getattr(spec, name)
        if v is not None:
            obj[name] = v
    if spec.start_at is not None:
        obj["start_at"] = start_at_param(spec.start_at)
    if spec.retry_policy is not None:
        obj["retry_policy"] = _to_json(spec.retry_policy)
    if spec.limits is not None:
        obj["limits"] = _to_json(list(spec.limits))
    return obj


@dataclass
class Job:
    """A row of silo.jobs."""

    tenant: str
    id: str
    task_group: str
    status: JobStatus
    priority: int
    enqueued_at: _dt.datetime
    status_changed_at: _dt.datetime
    current_attempt: Optional[int]
    """The attempt running or coming next; None for a terminal job."""
    next_attempt_at: Optional[_dt.datetime]
    """When the pending task is due; None when Running or terminal."""
    payload: Any
    metadata: Dict[str, str]
    cancelled_at: Optional[_dt.datetime]
    """Set when the job was cancelled (also on a job that Succeeded after a cancel)."""
    limits: Optional[List[Dict[str, Any]]] = None
    """The job's limits as stored, in enqueue's JSON shape ([] for none; None before silo 1.8)."""
    retry_policy: Optional[Dict[str, Any]] = None
    """The job's retry policy with every key given (enqueue's JSON shape), or None for none."""
    extra: Dict[str, Any] = field(default_factory=dict)
    """Columns a later silo adds."""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Job":
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: row.get(k) for k in names}
        extra = {k: v for k, v in row.items() if k not in names}
        return cls(**known, extra=extra)


@dataclass
class JobResult:
    """The outcome of a terminal job (silo.job_result)."""

    status: Literal["Succeeded", "Failed", "Cancelled"]
    result: Any
    """The last attempt's result when Succeeded, else None."""
    error_code: Optional[str]
    """From the attempt that ended the job: the code passed to fail, WORKER_CRASHED, RELEASED, or None."""
    error_data: Any
    finished_at: _dt.datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "JobResult":
        return cls(status=row["status"], result=row.get("result"), error_code=row.get("error_code"),
                   error_data=row.get("error_data"), finished_at=row["finished_at"])


_IMPORT_TIMES = ("start_at", "enqueued_at")
_ATTEMPT_TIMES = ("started_at", "finished_at")


def _time_param(name: str, v: Any) -> Any:
    """A time of an imported job as an ISO 8601 string (a datetime must carry its time zone)."""
    if isinstance(v, _dt.datetime):
        if v.tzinfo is None or v.utcoffset() is None:
            raise InvalidArgumentError(f"{name} must be a timezone-aware datetime", code="22023")
        return v.isoformat()
    return v


def import_object(job: Mapping[str, Any]) -> Dict[str, Any]:
    """The job object of silo.import_jobs for one dict in silo's key names (datetimes made ISO 8601)."""
    d = job_object(job)
    for k in _IMPORT_TIMES:
        if d.get(k) is not None:
            d[k] = _time_param(k, d[k])
    if d.get("attempts") is not None:
        d["attempts"] = [{k: (_time_param(k, v) if k in _ATTEMPT_TIMES else v)
                          for k, v in a.items() if v is not None} for a in d["attempts"]]
    return d


@dataclass
class ImportResult:
    """What import_jobs says of one job (a row of silo.import_jobs), in the order given."""

    id: str
    tenant: str
    success: bool
    status: Optional[str]
    """The job's state after the import, as silo.jobs names it; None when refused."""
    error: Optional[str]
    """Why the job was refused (nothing of it written); None on success."""
    sqlstate: Optional[str]
    """SL013 (a refused re-import) or 23505; None on success."""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "ImportResult":
        return cls(id=row["id"], tenant=row["tenant"], success=row["success"], status=row.get("status"),
                   error=row.get("error"), sqlstate=row.get("sqlstate"))


@dataclass
class Task:
    """A run task handed to a worker's handler (a row of silo.lease of kind 'run')."""

    id: str
    """Identifies this attempt; new for every attempt."""
    tenant: str
    job_id: str
    attempt: int
    relative_attempt: int
    is_last_attempt: bool
    """True when a failure of this attempt is final."""
    priority: int
    task_group: str
    payload: Any
    metadata: Dict[str, str]
    lease_expires_at: _dt.datetime
    """When the lease ends unless renewed (the server's time, in UTC)."""
    kind: str = "run"
    limits: List[Dict[str, Any]] = field(default_factory=list)
    """The job's limits in enqueue's JSON shape (normalized: every key given; [] for none). The task
    holds them already: a handler reads them, it does not acquire them."""
    retry_policy: Optional[Dict[str, Any]] = None
    """The job's retry policy with every key given (enqueue's JSON shape), or None when the job has
    none (its first failure is final). Either can be passed back to enqueue as it is."""


@dataclass
class RefreshTask:
    """A refresh task of a floating concurrency limit (a row of silo.lease of kind 'refresh')."""

    id: str
    tenant: str
    task_group: str
    queue_key: str
    """The floating limit's key."""
    current_max_concurrency: int
    metadata: Dict[str, str]
    """The limit's metadata ({} if none was given)."""
    lease_expires_at: _dt.datetime
    kind: str = "refresh"


def task_from_row(row: Mapping[str, Any]) -> Union[Task, RefreshTask]:
    if row["kind"] == "refresh":
        return RefreshTask(id=str(row["task_id"]), tenant=row["tenant"], task_group=row["task_group"],
                           queue_key=row["queue_key"], current_max_concurrency=row["current_max_concurrency"],
                           metadata=row.get("refresh_metadata") or {}, lease_expires_at=row["lease_expires_at"])
    return Task(id=str(row["task_id"]), tenant=row["tenant"], job_id=row["job_id"], attempt=row["attempt"],
                relative_attempt=row["relative_attempt"], is_last_attempt=row["is_last_attempt"],
                priority=row["priority"], task_group=row["task_group"], payload=row["payload"],
                metadata=row.get("metadata") or {}, lease_expires_at=row["lease_expires_at"],
                limits=row.get("limits") or [], retry_policy=row.get("retry_policy"))


__all__ = [
    "UNSET", "JobStatus", "RetryPolicy", "ConcurrencyLimit", "FloatingConcurrencyLimit", "RateLimit",
    "RateLimitRetryPolicy", "Limit", "JobSpec", "Job", "JobResult", "Task", "RefreshTask",
]
