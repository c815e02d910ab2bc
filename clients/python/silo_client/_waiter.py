"""await_result's waits gathered per tenant onto one connection asleep in CALL silo.wait_any (silo 1.9).

Without this, every await holds a connection of the client's pool (and a
backend of the server) while it waits.  Here, each tenant with awaits has
one loop -- a thread for SiloClient, a task for AsyncSiloClient -- on a
connection of its own (made by the pool, outside its count, closed when no
await is left): it calls silo.wait_any with every job id awaited now, wakes
the awaits of the ids that come back (ended or gone), and calls again with
the rest and any added meanwhile.  An id added while a call sleeps would
wait for that call to end, so the adder pokes it: a cancel request
(psycopg's Connection.cancel) ends the call with 57014 and the loop calls
again with the new list.  Each await keeps its own deadline; one that gives
up leaves the list (the call in flight keeps its id until it returns).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set

import psycopg

from .errors import is_connection_error, is_stale_plan_error, to_silo_error

#: silo.wait_any's timeout per call: the loop calls again after it.
CALL_MS = 60_000
WAIT_ANY = "CALL silo.wait_any(%s::text[], %s::text, %s::interval)"


class _Entry:
    """One await: set once its job has ended or is gone (error: the loop's failure to report instead)."""

    __slots__ = ("event", "error")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.error: Optional[BaseException] = None


def _backoff(b: float) -> float:
    return min(2.0, b * 2)


class _ThreadLoop:
    """The awaits of one tenant of a SiloClient, and the thread that sleeps for them."""

    def __init__(self, connect: Callable[[], psycopg.Connection], tenant: str):
        self._connect = connect
        self._tenant = tenant
        self._lock = threading.Lock()
        self._waits: Dict[str, List[_Entry]] = {}
        self._thread: Optional[threading.Thread] = None
        self._conn: Optional[psycopg.Connection] = None
        self._in_flight = False
        self._sent: Set[str] = set()
        self._poked = False

    def add(self, id: str, e: _Entry) -> None:
        poke = None
        with self._lock:
            self._waits.setdefault(id, []).append(e)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"silo-await-{self._tenant}", daemon=True)
                self._thread.start()
            elif self._in_flight and id not in self._sent and not self._poked:
                self._poked = True
                poke = self._conn
        if poke is not None:
            self._cancel(poke)

    def remove(self, id: str, e: _Entry) -> None:
        poke = None
        with self._lock:
            left = self._waits.get(id)
            if left is not None and e in left:
                left.remove(e)
                if not left:
                    del self._waits[id]
            # nothing left to wait for: let the sleeping call end and its connection close
            if not self._waits and self._in_flight and not self._poked:
                self._poked = True
                poke = self._conn
        if poke is not None:
            self._cancel(poke)

    @staticmethod
    def _cancel(conn: psycopg.Connection) -> None:
        try:
            conn.cancel()
        except Exception:
            pass  # the call ends anyway: at its timeout, or the connection is gone

    def _fail_all(self, err: BaseException) -> None:
        with self._lock:
            waits, self._waits = self._waits, {}
        for entries in waits.values():
            for e in entries:
                e.error = err
                e.event.set()

    def _run(self) -> None:
        backoff = 0.1
        while True:
            with self._lock:
                if not self._waits:
                    conn, self._conn, self._thread = self._conn, None, None
                    break
                ids = list(self._waits)
                conn = self._conn
            if conn is None:
                try:
                    conn = self._connect()
                except Exception:
                    time.sleep(backoff)  # the awaits' own deadlines bound this
                    backoff = _backoff(backoff)
                    continue
                with self._lock:
                    self._conn = conn
            with self._lock:
                self._sent = set(ids)
                self._poked = False
                self._in_flight = True
            ended: List[str] = []
            try:
                row = conn.execute(WAIT_ANY, [ids, self._tenant, f"{CALL_MS} milliseconds"]).fetchone()
                ended = list((row or {}).get("ended") or [])
                backoff = 0.1
            except psycopg.errors.QueryCanceled:
                pass  # a poke (or statement_timeout): call again with the current list
            except psycopg.Error as err:
                if is_connection_error(err) or is_stale_plan_error(err) or conn.broken:
                    with self._lock:
                        self._conn = None
                    conn.close()
                    time.sleep(backoff)
                    backoff = _backoff(backoff)
                else:
                    self._fail_all(to_silo_error(err))
            finally:
                with self._lock:
                    self._in_flight = False
            with self._lock:
                woken = [e for id in ended for e in self._waits.pop(id, [])]
            for e in woken:
                e.event.set()
        if conn is not None:
            conn.close()


class ThreadMux:
    """The gathered awaits of one SiloClient: a _ThreadLoop per tenant."""

    def __init__(self, connect: Callable[[], psycopg.Connection]):
        self._connect = connect
        self._loops: Dict[str, _ThreadLoop] = {}
        self._lock = threading.Lock()

    def until(self, id: str, tenant: str, deadline: float) -> bool:
        """Block until job id of tenant has ended or is gone (True), or the deadline has passed (False).

        Raises the loop's error (a refused tenant, say)."""
        with self._lock:
            loop = self._loops.get(tenant)
            if loop is None:
                loop = self._loops[tenant] = _ThreadLoop(self._connect, tenant)
        e = _Entry()
        loop.add(id, e)
        done = False
        try:
            done = e.event.wait(max(0.0, deadline - time.monotonic()))
        finally:
            if not done:
                loop.remove(id, e)
        if e.error is not None:
            raise e.error
        return done


class _TaskLoop:
    """The awaits of one tenant of an AsyncSiloClient, and the task that sleeps for them."""

    def __init__(self, connect: Callable[[], Any], tenant: str):
        self._connect = connect
        self._tenant = tenant
        self._waits: Dict[str, List[asyncio.Future]] = {}
        self._task: Optional[asyncio.Task] = None
        self._conn: Optional[psycopg.AsyncConnection] = None
        self._in_flight = False
        self._sent: Set[str] = set()
        self._poked = False

    def add(self, id: str, fut: asyncio.Future) -> None:
        self._waits.setdefault(id, []).append(fut)
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        elif self._in_flight and id not in self._sent:
            self._poke()

    def remove(self, id: str, fut: asyncio.Future) -> None:
        left = self._waits.get(id)
        if left is not None and fut in left:
            left.remove(fut)
            if not left:
                del self._waits[id]
        if not self._waits and self._in_flight:
            self._poke()

    def _poke(self) -> None:
        if self._poked or self._conn is None:
            return
        self._poked = True
        conn = self._conn

        def cancel() -> None:
            try:
                conn.cancel()
            except Exception:
                pass

        # the cancel request is a blocking libpq call: off the loop
        asyncio.get_running_loop().run_in_executor(None, cancel)

    def _settle(self, ids: List[str], err: Optional[BaseException] = None) -> None:
        for id in ids:
            for fut in self._waits.pop(id, []):
                if not fut.done():
                    if err is None:
                        fut.set_result(True)
                    else:
                        fut.set_exception(err)

    async def _run(self) -> None:
        backoff = 0.1
        try:
            while self._waits:
                if self._conn is None:
                    try:
                        self._conn = await self._connect()
                    except Exception:
                        await asyncio.sleep(backoff)
                        backoff = _backoff(backoff)
                        continue
                conn = self._conn
                ids = list(self._waits)
                self._sent = set(ids)
                self._poked = False
                self._in_flight = True
                ended: List[str] = []
                try:
                    cur = await conn.execute(WAIT_ANY, [ids, self._tenant, f"{CALL_MS} milliseconds"])
                    row = await cur.fetchone()
                    ended = list((row or {}).get("ended") or [])
                    backoff = 0.1
                except psycopg.errors.QueryCanceled:
                    pass
                except psycopg.Error as err:
                    if is_connection_error(err) or is_stale_plan_error(err) or conn.broken:
                        self._conn = None
                        await conn.close()
                        await asyncio.sleep(backoff)
                        backoff = _backoff(backoff)
                    else:
                        self._settle(list(self._waits), to_silo_error(err))
                finally:
                    self._in_flight = False
                self._settle(ended)
        finally:
            self._task = None
            conn, self._conn = self._conn, None
            if conn is not None:
                await conn.close()


class TaskMux:
    """The gathered awaits of one AsyncSiloClient: a _TaskLoop per tenant (on the client's loop)."""

    def __init__(self, connect: Callable[[], Any]):
        self._connect = connect
        self._loops: Dict[str, _TaskLoop] = {}

    async def until(self, id: str, tenant: str, deadline: float) -> bool:
        """Until job id of tenant has ended or is gone (True) or the deadline passed (False)."""
        loop = self._loops.get(tenant)
        if loop is None:
            loop = self._loops[tenant] = _TaskLoop(self._connect, tenant)
        fut = asyncio.get_running_loop().create_future()
        loop.add(id, fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), max(0.0, deadline - time.monotonic()))
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            if not fut.done():
                fut.cancel()
                loop.remove(id, fut)
