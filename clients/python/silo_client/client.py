"""SiloClient: the producer's side of silo, synchronous (threads welcome).

Enqueue jobs, look at them, cancel, restart, expedite or delete them, and
read or await their results.  Each method is one SQL call (docs/api.md);
errors come back as the typed classes of silo_client.errors.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

import psycopg
from psycopg.rows import dict_row

from . import _sql
from ._pool import Pool
from .errors import NotTerminalError, WaitTimeoutError, to_silo_error
from ._waiter import ThreadMux
from .types import UNSET, ImportResult, Job, JobResult, JobSpec, Limit, RetryPolicy

#: How long has_wait_result() and has_wait_any() trust a "no" (silo may be updated meanwhile).
WAIT_RESULT_RECHECK_S = 60.0


class KeptAnswer:
    """A yes or no asked of the server: a yes is kept, a no is asked again after WAIT_RESULT_RECHECK_S."""

    def __init__(self) -> None:
        self.value: Optional[bool] = None
        self.recheck = 0.0

    def stale(self) -> bool:
        return self.value is None or (not self.value and time.monotonic() >= self.recheck)

    def set(self, ok: bool) -> bool:
        self.value = ok
        self.recheck = time.monotonic() + WAIT_RESULT_RECHECK_S
        return ok


class SiloClient:
    """A client on a small pool of its own, or on one connection of yours.

    ``SiloClient("postgresql://me@/app?host=/var/run/postgresql")`` makes a
    pool of at most ``max_connections`` connections (autocommit), opened on
    demand; keyword arguments go to ``psycopg.connect``.  ``conn=`` runs
    every call on that connection instead, e.g. inside your transaction:
    the jobs enqueued then commit or roll back with your own writes.  Use it
    as a context manager, or call close().
    """

    def __init__(self, conninfo: str = "", *, conn: Optional[psycopg.Connection] = None,
                 max_connections: int = 4, application_name: str = "silo-python-client", **kwargs: Any):
        self._conn = conn
        self._pool = None if conn is not None else Pool(conninfo, max_connections, application_name, **kwargs)
        self._has_wait_result = KeptAnswer()
        self._has_wait_any = KeptAnswer()
        self._wait_any_max_ids = 0
        self._mux: Optional[ThreadMux] = None
        self._mux_lock = threading.Lock()

    def with_connection(self, conn: psycopg.Connection) -> "SiloClient":
        """A client that runs its calls on conn (e.g. inside your transaction)."""
        return SiloClient(conn=conn)

    def close(self) -> None:
        """Close the pool this client made (a connection passed in stays open); gathered awaits still waiting fail."""
        if self._mux is not None:
            self._mux.close()
        if self._pool is not None:
            self._pool.close()

    def __enter__(self) -> "SiloClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @contextmanager
    def _connection(self, deadline: Optional[float] = None) -> Iterator[psycopg.Connection]:
        if self._conn is not None:
            yield self._conn
        else:
            assert self._pool is not None
            with self._pool.connection(deadline) as c:
                yield c

    def _query(self, stmt: _sql.Stmt, deadline: Optional[float] = None) -> List[Dict[str, Any]]:
        text, params, prepare = stmt
        try:
            with self._connection(deadline) as conn:
                with conn.cursor(row_factory=dict_row) as cur:
                    cur.execute(text, params, prepare=prepare)
                    return cur.fetchall() if cur.description else []
        except psycopg.Error as e:
            raise to_silo_error(e) from e

    # -- producing ---------------------------------------------------------

    def enqueue(self, task_group: str, payload: Any = UNSET, *, tenant: Optional[str] = None,
                id: Optional[str] = None, priority: Optional[int] = None, start_at: Any = None,
                retry_policy: Union[RetryPolicy, Dict[str, Any], None] = None,
                limits: Optional[Sequence[Limit]] = None, metadata: Optional[Mapping[str, str]] = None,
                on_conflict: Optional[str] = None) -> str:
        """Enqueue a job (silo.enqueue) and return its id.

        payload is any JSON value (default {}; None stores JSON null).
        Options left None take silo's defaults.  DuplicateJobError for an
        existing id unless ``on_conflict="ignore"``.
        """
        rows = self._query(_sql.enqueue(task_group, payload, tenant, id, priority, start_at, retry_policy,
                                        limits, metadata, on_conflict))
        return rows[0]["id"]

    def enqueue_many(self, jobs: Sequence[Union[JobSpec, Mapping[str, Any]]]) -> List[str]:
        """Enqueue many jobs in one statement (silo.enqueue_many): all or none; ids in input order."""
        if not jobs:
            return []
        return [r["id"] for r in self._query(_sql.enqueue_many(jobs))]

    # -- looking and changing ------------------------------------------------

    def import_jobs(self, jobs: Sequence[Mapping[str, Any]]) -> List[ImportResult]:
        """Import jobs from another queue with their attempt history (silo.import_jobs, silo 1.8).

        Each job is a dict in silo's key names (docs/api.md, "silo.import_jobs"): enqueue's,
        with ``id`` required, ``enqueued_at`` and ``attempts`` (dicts with ``status``,
        ``finished_at``, ``started_at``, ``worker_id``, ``result``, ``error_code``,
        ``error_data``); times may be timezone-aware datetimes.  Returns one ImportResult per
        job, in order.  Invalid input, a tenant the role may not act in, or a running job
        among them refuses the whole call (an error, no job imported: NotReimportableError for
        a running job); a refused re-import of one job is its result (success False).
        """
        if not jobs:
            return []
        return [ImportResult.from_row(r) for r in self._query(_sql.import_jobs(jobs))]

    def get_job(self, id: str, *, tenant: str = "-") -> Optional[Job]:
        """The job's row of silo.jobs, or None when there is no such job."""
        rows = self._query(_sql.get_job(id, tenant))
        return Job.from_row(rows[0]) if rows else None

    def cancel(self, id: str, *, tenant: str = "-") -> None:
        """Cancel a job (silo.cancel); AlreadyCancelledError, AlreadyTerminalError, NotFoundError."""
        self._query(_sql.job_op("cancel", id, tenant))

    def restart(self, id: str, *, tenant: str = "-") -> None:
        """Run a Failed or Cancelled job again (silo.restart); NotRestartableError otherwise."""
        self._query(_sql.job_op("restart", id, tenant))

    def expedite(self, id: str, *, tenant: str = "-") -> None:
        """Make a Scheduled or Retrying job due now (silo.expedite); NotExpeditableError otherwise."""
        self._query(_sql.job_op("expedite", id, tenant))

    def delete_job(self, id: str, *, tenant: str = "-") -> bool:
        """Delete a terminal job (silo.delete_job, silo_admin); False when there is no such job."""
        return bool(self._query(_sql.job_op("delete_job", id, tenant))[0]["r"])

    def get_job_result(self, id: str, *, tenant: str = "-") -> JobResult:
        """The outcome of a terminal job (silo.job_result); NotTerminalError, NotFoundError."""
        return JobResult.from_row(self._query(_sql.job_result(id, tenant))[0])

    # -- waiting -------------------------------------------------------------

    def has_wait_result(self) -> bool:
        """Whether the installed silo has CALL silo.wait_result (1.7); a no is asked again after a minute."""
        if self._has_wait_result.stale():
            self._has_wait_result.set(bool(self._query(_sql.has_wait_result())[0]["ok"]))
        return bool(self._has_wait_result.value)

    def has_wait_any(self) -> bool:
        """Whether silo.wait_any (1.9) is there and this role may call it; a no is asked again after a minute."""
        if self._has_wait_any.stale():
            self._wait_any_max_ids = _sql.wait_any_ids(self._query(_sql.has_wait_any())[0])
            self._has_wait_any.set(self._wait_any_max_ids > 0)
        return bool(self._has_wait_any.value)

    def await_result(self, id: str, *, tenant: str = "-", timeout: float = 30.0,
                     max_poll_interval: float = 1.0) -> JobResult:
        """Wait until the job has ended and return its outcome.

        With silo 1.9 and the client's own pool, the awaits of all threads
        are gathered, per tenant, onto one connection (of its own, outside
        the pool) asleep in ``CALL silo.wait_any``: a thousand threads
        awaiting hold one connection, not a thousand; a job that has ended
        returns after one silo.job_result.  With silo 1.7-1.8, or on a
        client made with ``conn=``, it waits inside the server with ``CALL
        silo.wait_result`` on a connection of the pool, woken by the commit
        that ends the job.  WaitTimeoutError after ``timeout`` seconds
        (also when no connection of the pool came free in time),
        NotFoundError for a missing job.  Ctrl-C cancels the wait in the
        server.  Without either procedure (silo before 1.7) it polls
        silo.job_result.
        """
        _sql.check_timeout(timeout)
        deadline = time.monotonic() + timeout
        if self._pool is not None and self.has_wait_any():
            return self._await_gathered(id, tenant, deadline)
        if not self.has_wait_result():
            return self._poll(id, tenant, deadline, max_poll_interval)
        return self._wait_in_server(id, tenant, deadline)

    def _wait_in_server(self, id: str, tenant: str, deadline: float) -> JobResult:
        """await_result on silo.wait_result, on a connection of the pool."""
        while True:
            left = deadline - time.monotonic()
            try:
                rows = self._query(_sql.wait_result(id, tenant, max(left, 0.001)), deadline)
                return JobResult.from_row(rows[0])
            except WaitTimeoutError:
                if deadline - time.monotonic() > 0.001:
                    continue  # a wait longer than a day: go on
                raise

    def _await_gathered(self, id: str, tenant: str, deadline: float) -> JobResult:
        """await_result on silo.wait_any (see _waiter.py)."""
        with self._mux_lock:
            if self._mux is None:
                assert self._pool is not None
                self._mux = ThreadMux(self._pool.connect, self._wait_any_max_ids)
        while True:
            try:
                return JobResult.from_row(self._query(_sql.job_result(id, tenant), deadline)[0])
            except NotTerminalError:
                pass
            # ended or gone as silo.wait_any saw it: job_result says which (a restarted job waits again)
            gathered = self._mux.until(id, tenant, deadline)
            if gathered is None:
                return self._wait_in_server(id, tenant, deadline)  # more than the gathering takes
            if not gathered:
                raise WaitTimeoutError("job did not end within the timeout", code="SL011",
                                       detail=f'Job "{id}" of tenant "{tenant}" was still pending.')

    def _poll(self, id: str, tenant: str, deadline: float, max_pause: float) -> JobResult:
        pause = 0.05
        while True:
            try:
                return self.get_job_result(id, tenant=tenant)
            except NotTerminalError:
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeoutError("job did not end within the timeout",
                                       detail=f'Job "{id}" of tenant "{tenant}" was still pending.')
            time.sleep(min(pause, left))
            pause = min(max(0.01, max_pause), pause * 1.5)
