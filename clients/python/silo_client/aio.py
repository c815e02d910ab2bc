"""The asyncio API: AsyncSiloClient (here) and AsyncSiloWorker (worker.py).

AsyncSiloClient is SiloClient's twin on psycopg.AsyncConnection: the same
methods, as coroutines.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Dict, List, Mapping, Optional, Sequence, Union

import psycopg
from psycopg.rows import dict_row

from . import _sql
from ._pool import AsyncPool
from .client import KeptAnswer
from .errors import NotTerminalError, WaitTimeoutError, to_silo_error
from ._waiter import TaskMux
from .types import UNSET, ImportResult, Job, JobResult, JobSpec, Limit, RetryPolicy
from .worker import AsyncSiloWorker

__all__ = ["AsyncSiloClient", "AsyncSiloWorker"]


class AsyncSiloClient:
    """SiloClient on asyncio: a pool of AsyncConnections, or one AsyncConnection of yours (``conn=``).

    ``async with AsyncSiloClient(url) as client: ...``, or call close().
    """

    def __init__(self, conninfo: str = "", *, conn: Optional[psycopg.AsyncConnection] = None,
                 max_connections: int = 4, application_name: str = "silo-python-client", **kwargs: Any):
        self._conn = conn
        self._pool = None if conn is not None else AsyncPool(conninfo, max_connections, application_name, **kwargs)
        self._has_wait_result = KeptAnswer()
        self._has_wait_any = KeptAnswer()
        self._wait_any_max_ids = 0
        self._mux: Optional[TaskMux] = None

    def with_connection(self, conn: psycopg.AsyncConnection) -> "AsyncSiloClient":
        """A client that runs its calls on conn (e.g. inside your transaction)."""
        return AsyncSiloClient(conn=conn)

    async def close(self) -> None:
        """Close the pool this client made (a connection passed in stays open); gathered awaits still waiting fail."""
        if self._mux is not None:
            await self._mux.close()
        if self._pool is not None:
            await self._pool.close()

    async def __aenter__(self) -> "AsyncSiloClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @asynccontextmanager
    async def _connection(self, deadline: Optional[float] = None) -> AsyncIterator[psycopg.AsyncConnection]:
        if self._conn is not None:
            yield self._conn
        else:
            assert self._pool is not None
            async with self._pool.connection(deadline) as c:
                yield c

    async def _query(self, stmt: _sql.Stmt, deadline: Optional[float] = None) -> List[Dict[str, Any]]:
        text, params, prepare = stmt
        try:
            async with self._connection(deadline) as conn:
                async with conn.cursor(row_factory=dict_row) as cur:
                    await cur.execute(text, params, prepare=prepare)
                    return await cur.fetchall() if cur.description else []
        except psycopg.Error as e:
            raise to_silo_error(e) from e

    async def enqueue(self, task_group: str, payload: Any = UNSET, *, tenant: Optional[str] = None,
                      id: Optional[str] = None, priority: Optional[int] = None, start_at: Any = None,
                      retry_policy: Union[RetryPolicy, Dict[str, Any], None] = None,
                      limits: Optional[Sequence[Limit]] = None, metadata: Optional[Mapping[str, str]] = None,
                      on_conflict: Optional[str] = None) -> str:
        """Enqueue a job (silo.enqueue) and return its id (see SiloClient.enqueue)."""
        rows = await self._query(_sql.enqueue(task_group, payload, tenant, id, priority, start_at, retry_policy,
                                              limits, metadata, on_conflict))
        return rows[0]["id"]

    async def enqueue_many(self, jobs: Sequence[Union[JobSpec, Mapping[str, Any]]]) -> List[str]:
        """Enqueue many jobs in one statement (silo.enqueue_many): all or none; ids in input order."""
        if not jobs:
            return []
        return [r["id"] for r in await self._query(_sql.enqueue_many(jobs))]

    async def import_jobs(self, jobs: Sequence[Mapping[str, Any]]) -> List[ImportResult]:
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
        return [ImportResult.from_row(r) for r in await self._query(_sql.import_jobs(jobs))]

    async def get_job(self, id: str, *, tenant: str = "-") -> Optional[Job]:
        rows = await self._query(_sql.get_job(id, tenant))
        return Job.from_row(rows[0]) if rows else None

    async def cancel(self, id: str, *, tenant: str = "-") -> None:
        await self._query(_sql.job_op("cancel", id, tenant))

    async def restart(self, id: str, *, tenant: str = "-") -> None:
        await self._query(_sql.job_op("restart", id, tenant))

    async def expedite(self, id: str, *, tenant: str = "-") -> None:
        await self._query(_sql.job_op("expedite", id, tenant))

    async def delete_job(self, id: str, *, tenant: str = "-") -> bool:
        return bool((await self._query(_sql.job_op("delete_job", id, tenant)))[0]["r"])

    async def get_job_result(self, id: str, *, tenant: str = "-") -> JobResult:
        return JobResult.from_row((await self._query(_sql.job_result(id, tenant)))[0])

    async def has_wait_result(self) -> bool:
        if self._has_wait_result.stale():
            self._has_wait_result.set(bool((await self._query(_sql.has_wait_result()))[0]["ok"]))
        return bool(self._has_wait_result.value)

    async def has_wait_any(self) -> bool:
        if self._has_wait_any.stale():
            self._wait_any_max_ids = _sql.wait_any_ids((await self._query(_sql.has_wait_any()))[0])
            self._has_wait_any.set(self._wait_any_max_ids > 0)
        return bool(self._has_wait_any.value)

    async def await_result(self, id: str, *, tenant: str = "-", timeout: float = 30.0,
                           max_poll_interval: float = 1.0) -> JobResult:
        """Wait until the job has ended and return its outcome.

        As SiloClient.await_result: with silo 1.9 and the client's own
        pool, the awaits of all tasks are gathered per tenant onto one
        connection asleep in CALL silo.wait_any; else CALL silo.wait_result
        on a connection of the pool.  Cancelling the awaiting task (or
        asyncio.wait_for around it) ends its wait (a wait_result in the
        server is cancelled and its connection dropped).
        """
        _sql.check_timeout(timeout)
        deadline = time.monotonic() + timeout
        if self._pool is not None and await self.has_wait_any():
            return await self._await_gathered(id, tenant, deadline)
        if not await self.has_wait_result():
            return await self._poll(id, tenant, deadline, max_poll_interval)
        return await self._wait_in_server(id, tenant, deadline)

    async def _wait_in_server(self, id: str, tenant: str, deadline: float) -> JobResult:
        """await_result on silo.wait_result, on a connection of the pool."""
        while True:
            left = deadline - time.monotonic()
            try:
                rows = await self._query(_sql.wait_result(id, tenant, max(left, 0.001)), deadline)
                return JobResult.from_row(rows[0])
            except WaitTimeoutError:
                if deadline - time.monotonic() > 0.001:
                    continue
                raise

    async def _await_gathered(self, id: str, tenant: str, deadline: float) -> JobResult:
        """await_result on silo.wait_any (see _waiter.py)."""
        if self._mux is None:
            assert self._pool is not None
            self._mux = TaskMux(self._pool.connect, self._wait_any_max_ids)
        while True:
            try:
                return JobResult.from_row((await self._query(_sql.job_result(id, tenant), deadline))[0])
            except NotTerminalError:
                pass
            gathered = await self._mux.until(id, tenant, deadline)
            if gathered is None:
                return await self._wait_in_server(id, tenant, deadline)  # more than the gathering takes
            if not gathered:
                raise WaitTimeoutError("job did not end within the timeout", code="SL011",
                                       detail=f'Job "{id}" of tenant "{tenant}" was still pending.')

    async def _poll(self, id: str, tenant: str, deadline: float, max_pause: float) -> JobResult:
        pause = 0.05
        while True:
            try:
                return await self.get_job_result(id, tenant=tenant)
            except NotTerminalError:
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeoutError("job did not end within the timeout",
                                       detail=f'Job "{id}" of tenant "{tenant}" was still pending.')
            await asyncio.sleep(min(pause, left))
            pause = min(max(0.01, max_pause), pause * 1.5)
