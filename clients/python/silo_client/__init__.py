"""silo_client: the Python client and worker for silo, the job queue inside PostgreSQL.

Synchronous: SiloClient, SiloWorker.  asyncio: AsyncSiloClient,
AsyncSiloWorker (also importable from silo_client.aio).  Cluster mode:
ClusterClient, AsyncClusterClient, SiloClusterWorker, AsyncSiloClusterWorker
(calls routed by tenant to the owner of its shard).  Built on psycopg 3.
"""

from ._hash import tenant_hash
from ._routing import AsyncRouter, Router, Shard, ShardMap, owner_conninfo
from .aio import AsyncSiloClient
from .client import SiloClient
from .cluster import AsyncClusterClient, ClusterClient
from .cluster_worker import AsyncSiloClusterWorker, SiloClusterWorker
from .errors import (
    SQLSTATE, AlreadyCancelledError, AlreadyTerminalError, ConflictError, DuplicateJobError,
    FeatureNotSupportedError, InconsistencyError, InvalidArgumentError, JobCancelledError, LeaseLostError,
    LeaseNotFoundError, LeaseOwnerMismatchError, NotExpeditableError, NotFoundError, NotOwnerError,
    NotReimportableError, NotRestartableError, NotTerminalError, PermissionDeniedError, PrerequisiteError, QueryCanceledError,
    ShardUnavailableError, SiloConnectionError, SiloError, TransactionStateError, UndefinedFunctionError,
    WaitTimeoutError, WorkerStoppingError, WrongTaskKindError, is_connection_error, to_silo_error,
)
from .types import (
    UNSET, ConcurrencyLimit, FloatingConcurrencyLimit, ImportResult, Job, JobResult, JobSpec, RateLimit, RateLimitRetryPolicy,
    RefreshTask, RetryPolicy, Task,
)
from .worker import (
    AsyncSiloWorker, SiloWorker, TaskContext, TaskFailure, WorkerErrorContext, WorkerStats,
)

__version__ = "0.1.0"

__all__ = [
    "SiloClient", "AsyncSiloClient", "SiloWorker", "AsyncSiloWorker", "TaskContext", "TaskFailure",
    "ClusterClient", "AsyncClusterClient", "SiloClusterWorker", "AsyncSiloClusterWorker", "ShardMap", "Shard",
    "Router", "AsyncRouter", "tenant_hash", "owner_conninfo",
    "WorkerErrorContext", "WorkerStats",
    "UNSET", "ConcurrencyLimit", "FloatingConcurrencyLimit", "ImportResult", "Job", "JobResult", "JobSpec", "RateLimit",
    "RateLimitRetryPolicy", "RefreshTask", "RetryPolicy", "Task",
    "SQLSTATE", "SiloError", "AlreadyCancelledError", "AlreadyTerminalError", "ConflictError", "DuplicateJobError",
    "FeatureNotSupportedError", "InconsistencyError", "InvalidArgumentError", "JobCancelledError",
    "LeaseLostError", "LeaseNotFoundError", "LeaseOwnerMismatchError", "NotExpeditableError", "NotFoundError",
    "NotOwnerError", "NotReimportableError", "NotRestartableError", "NotTerminalError", "PermissionDeniedError", "PrerequisiteError",
    "QueryCanceledError", "ShardUnavailableError", "SiloConnectionError", "TransactionStateError",
    "UndefinedFunctionError", "WaitTimeoutError", "WorkerStoppingError", "WrongTaskKindError",
    "is_connection_error", "to_silo_error",
]
