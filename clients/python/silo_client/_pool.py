"""Small connection pools (sync and asyncio) for the client and the worker.

psycopg's own pool is a separate package (python3-psycopg-pool); these are
enough for silo's one-statement calls: connections in autocommit mode, made
on demand up to max_size, dropped when broken (a lost connection, a stale
prepared statement) or after a call that did not end cleanly.
"""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Dict, Iterator, List, Optional

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from .errors import SiloConnectionError, WaitTimeoutError, is_connection_error, is_stale_plan_error, to_silo_error

CONNECT_TIMEOUT_S = 10


def _connect_kwargs(conninfo: str, kwargs: Dict[str, Any], application_name: str) -> Dict[str, Any]:
    """psycopg.connect's keyword arguments: ours, unless conninfo or kwargs set them."""
    given = set(conninfo_to_dict(conninfo)) if conninfo else set()
    out: Dict[str, Any] = {"autocommit": True, "row_factory": dict_row}
    for k, v in (("connect_timeout", CONNECT_TIMEOUT_S), ("application_name", application_name),
                 ("keepalives", 1), ("keepalives_idle", 30)):
        if k not in given:
            out[k] = v
    out.update(kwargs)
    return out


def _keep(conn: Any, err: Optional[BaseException]) -> bool:
    """Whether conn may go back to the pool after a call that raised err (or None)."""
    if conn.closed or conn.broken:
        return False
    if err is None:
        return conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    if isinstance(err, psycopg.Error):
        if is_connection_error(err) or is_stale_plan_error(err):
            return False
        return conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    return False  # interrupted (KeyboardInterrupt, cancellation): the state is unknown


class Pool:
    """Connections made with psycopg.connect(conninfo, **kwargs), at most max_size."""

    def __init__(self, conninfo: str, max_size: int = 4, application_name: str = "silo-python-client",
                 **kwargs: Any):
        self.conninfo = conninfo
        self.max_size = max_size
        self.kwargs = _connect_kwargs(conninfo, kwargs, application_name)
        self._idle: List[psycopg.Connection] = []
        self._count = 0
        self._cond = threading.Condition()
        self._closed = False

    def connect(self) -> psycopg.Connection:
        """A new connection of the pool's settings, not counted in the pool."""
        try:
            return psycopg.connect(self.conninfo, **self.kwargs)
        except psycopg.Error as e:
            raise to_silo_error(e) from e

    def _get(self, deadline: Optional[float]) -> psycopg.Connection:
        with self._cond:
            while True:
                if self._closed:
                    raise SiloConnectionError("the pool is closed")
                if self._idle:
                    return self._idle.pop()
                if self._count < self.max_size:
                    self._count += 1
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise WaitTimeoutError("no connection of the pool came free in time")
                self._cond.wait(left)
        try:
            return self.connect()
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def _put(self, conn: psycopg.Connection, keep: bool) -> None:
        with self._cond:
            if keep and not self._closed:
                self._idle.append(conn)
            else:
                self._count -= 1
            self._cond.notify()
        if not keep or self._closed:
            try:
                conn.close()
            except Exception:
                pass

    @contextmanager
    def connection(self, deadline: Optional[float] = None) -> Iterator[psycopg.Connection]:
        conn = self._get(deadline)
        err: Optional[BaseException] = None
        try:
            yield conn
        except BaseException as e:
            err = e
            raise
        finally:
            self._put(conn, _keep(conn, err))

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._cond.notify_all()
        for c in idle:
            try:
                c.close()
            except Exception:
                pass


class AsyncPool:
    """The asyncio twin of Pool: psycopg.AsyncConnection, at most max_size."""

    def __init__(self, conninfo: str, max_size: int = 4, application_name: str = "silo-python-client",
                 **kwargs: Any):
        self.conninfo = conninfo
        self.max_size = max_size
        self.kwargs = _connect_kwargs(conninfo, kwargs, application_name)
        self._idle: List[psycopg.AsyncConnection] = []
        self._busy: List[psycopg.AsyncConnection] = []
        self._count = 0
        self._cond: Optional[asyncio.Condition] = None
        self._closed = False

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    async def connect(self) -> psycopg.AsyncConnection:
        """A new connection of the pool's settings, not counted in the pool."""
        try:
            return await psycopg.AsyncConnection.connect(self.conninfo, **self.kwargs)
        except psycopg.Error as e:
            raise to_silo_error(e) from e

    async def _get(self, deadline: Optional[float]) -> psycopg.AsyncConnection:
        cond = self._condition()
        async with cond:
            while True:
                if self._closed:
                    raise SiloConnectionError("the pool is closed")
                if self._idle:
                    return self._idle.pop()
                if self._count < self.max_size:
                    self._count += 1
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise WaitTimeoutError("no connection of the pool came free in time")
                try:
                    await asyncio.wait_for(cond.wait(), left)
                except asyncio.TimeoutError:
                    pass
        try:
            return await self.connect()
        except BaseException:
            async with cond:
                self._count -= 1
                cond.notify()
            raise

    async def _put(self, conn: psycopg.AsyncConnection, keep: bool) -> None:
        cond = self._condition()
        if not keep or self._closed:
            try:
                await conn.close()
            except Exception:
                pass
        async with cond:
            if keep and not self._closed:
                self._idle.append(conn)
            else:
                self._count -= 1
            cond.notify()

    @asynccontextmanager
    async def connection(self, deadline: Optional[float] = None) -> AsyncIterator[psycopg.AsyncConnection]:
        conn = await self._get(deadline)
        self._busy.append(conn)
        err: Optional[BaseException] = None
        try:
            yield conn
        except BaseException as e:
            err = e
            if isinstance(e, asyncio.CancelledError) and not conn.closed:
                # a statement may still run in the server: ask it to stop
                try:
                    conn.cancel()
                except Exception:
                    pass
            raise
        finally:
            if conn in self._busy:
                self._busy.remove(conn)
            await asyncio.shield(self._put(conn, _keep(conn, err)))

    async def close(self, abort_busy: bool = False) -> None:
        """Close the idle connections (and with abort_busy, those in use too, under their queries)."""
        self._closed = True
        idle, self._idle = self._idle, []
        self._count -= len(idle)
        for c in idle:
            try:
                await c.close()
            except Exception:
                pass
        if abort_busy:
            for c in list(self._busy):
                try:
                    c.pgconn.finish()
                except Exception:
                    pass
        if self._cond is not None:
            async with self._cond:
                self._cond.notify_all()
