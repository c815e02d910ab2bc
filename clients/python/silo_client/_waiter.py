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
again with the new list; a poke that has not ended the call within
REPOKE_S (it reached the backend before the call did) is sent again.  Each
await keeps its own deadline; one that gives up leaves the list (the call
in flight keeps its id until it returns).  A full pool of
silo.max_wait_any_jobs (53400) is retried with a backoff.  An await the
mux cannot take -- MAX_LOOPS tenants have loops already, or its tenant's
list holds max_ids ids -- is left to the caller (silo.wait_result).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set

import psycopg

from .errors import SiloConnectionError, is_connection_error, is_stale_plan_error, to_silo_error

#: silo.wait_any's timeout per call: the loop calls again after it.
CALL_MS = 60_000
#: A poke that has not ended the call after this long is sent again.
REPOKE_S = 0.25
#: Tenants with a loop (a connection each) per client, at most.
MAX_LOOPS = 4
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
        self._call = 0  # the number of the call in flight
        self._sent: Set[str] = set()
        self._poked = False

    def size(self) -> int:
        return len(self._waits)

    def add(self, id: str, e: _Entry) -> None:
        with self._lock:
            self._waits.setdefault(id, []).append(e)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"silo-await-{self._tenant}", daemon=True)
                try:
                    self._thread.start()
                except BaseException:
                    self._thread = None
                    self._waits[id].remove(e)
                    if not self._waits[id]:
                        del self._waits[id]
                    raise
            elif self._in_flight and id not in self._sent:
                self._poke_locked()

    def remove(self, id: str, e: _Entry) -> None:
        with self._lock:
            left = self._waits.get(id)
            if left is not None and e in left:
                left.remove(e)
                if not left:
                    del self._waits[id]
            # nothing left to wait for: let the sleeping call end and its connection close
            if not self._waits and self._in_flight:
                self._poke_locked()

    def _poke_locked(self) -> None:
        """Cancel the call in flight (the lock is held: the connection is not closed meanwhile)."""
        if self._poked or self._conn is None:
            return
        self._poked = True
        try:
            self._conn.cancel()
        except Exception:
            pass
        call = self._call
        t = threading.Timer(REPOKE_S, self._repoke, args=(call,))
        t.daemon = True
        t.start()

    def _repoke(self, call: int) -> None:
        with self._lock:
            if self._in_flight and self._call == call:
                self._poked = False
                self._poke_locked()

    def close(self, err: BaseException) -> None:
        """The client is closing: every await fails with err, and the sleeping call ends."""
        self._fail_all(err)
        with self._lock:
            if self._in_flight:
                self._poke_locked()

    def _fail_all(self, err: BaseException) -> None:
        with self._lock:
            waits, self._waits = self._waits, {}
        for entries in waits.values():
            for e in entries:
                e.error = err
                e.event.set()

    def _close_locked(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as err:  # noqa: B902 - never leave awaits hanging on a dead thread
            self._fail_all(err)
            with self._lock:
                self._close_locked()
                self._thread = None
            raise

    def _loop(self) -> None:
        backoff = 0.1
        while True:
            pause = 0.0
            with self._lock:
                if not self._waits:
                    self._close_locked()
                    self._thread = None
                    return
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
                self._call += 1
                self._in_flight = True
            ended: List[str] = []
            try:
                row = conn.execute(WAIT_ANY, [ids, self._tenant, f"{CALL_MS} milliseconds"]).fetchone()
                ended = list((row or {}).get("ended") or [])
                backoff = 0.1
            except psycopg.errors.QueryCanceled:
                if not self._poked:
                    pause = backoff  # statement_timeout, not a poke: not in a tight loop
            except psycopg.errors.ConfigurationLimitExceeded:
                pause = backoff  # the pool of silo.max_wait_any_jobs is full now
            except psycopg.Error as err:
                if is_connection_error(err) or is_stale_plan_error(err) or conn.broken:
                    with self._lock:
                        self._close_locked()
                    pause = backoff
                else:
                    self._fail_all(to_silo_error(err))
            finally:
                with self._lock:
                    self._in_flight = False
            with self._lock:
                woken = [e for id in ended for e in self._waits.pop(id, [])]
            for e in woken:
                e.event.set()
            if pause:
                time.sleep(pause)
                backoff = _backoff(backoff)


class ThreadMux:
    """The gathered awaits of one SiloClient: a _ThreadLoop per tenant, MAX_LOOPS at most."""

    def __init__(self, connect: Callable[[], psycopg.Connection], max_ids: int):
        self._connect = connect
        self._max_ids = max_ids
        self._loops: Dict[str, _ThreadLoop] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        """Fail every await (the client is closing); the loops end their calls and close their connections."""
        with self._lock:
            loops = list(self._loops.values())
        for lp in loops:
            lp.close(SiloConnectionError("the client was closed while the job was awaited"))

    def until(self, id: str, tenant: str, deadline: float) -> Optional[bool]:
        """Block until job id of tenant has ended or is gone (True), or the deadline has passed (False).

        None when the mux cannot take this await (see the module's doc).
        Raises the loop's error (a refused tenant, say)."""
        with self._lock:
            loop = self._loops.get(tenant)
            if loop is None:
                if sum(1 for lp in self._loops.values() if lp.size() > 0) >= MAX_LOOPS:
                    return None
                loop = self._loops[tenant] = _ThreadLoop(self._connect, tenant)
            elif loop.size() >= self._max_ids:
                return None
        e = _Entry()
        loop.add(id, e)
        done = False
        try:
            done = e.event.wait(max(0.0, deadline - time.monotonic()))
        finally:
            if not done:
                loop.remove(id, e)
                done = e.event.is_set()  # set just as the wait ended
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
        self._call = 0
        self._sent: Set[str] = set()
        self._poked = False
        self._cancelling: Optional[asyncio.Future] = None

    def size(self) -> int:
        return len(self._waits)

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
        loop = asyncio.get_running_loop()
        # the cancel request is a blocking libpq call: off the loop; the
        # connection is not closed before it is done (_close)
        self._cancelling = loop.run_in_executor(None, self._cancel, conn)
        loop.call_later(REPOKE_S, self._repoke, self._call)

    @staticmethod
    def _cancel(conn: psycopg.AsyncConnection) -> None:
        try:
            conn.cancel()
        except Exception:
            pass

    async def _close(self, conn: psycopg.AsyncConnection) -> None:
        """Close conn once no cancel request of ours is using it."""
        if self._cancelling is not None:
            await asyncio.wait({self._cancelling})
            self._cancelling = None
        await conn.close()

    def _repoke(self, call: int) -> None:
        if self._in_flight and self._call == call:
            self._poked = False
            self._poke()

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
                self._call += 1
                self._in_flight = True
                ended: List[str] = []
                pause = 0.0
                try:
                    cur = await conn.execute(WAIT_ANY, [ids, self._tenant, f"{CALL_MS} milliseconds"])
                    row = await cur.fetchone()
                    ended = list((row or {}).get("ended") or [])
                    backoff = 0.1
                except psycopg.errors.QueryCanceled:
                    if not self._poked:
                        pause = backoff
                except psycopg.errors.ConfigurationLimitExceeded:
                    pause = backoff
                except psycopg.Error as err:
                    if is_connection_error(err) or is_stale_plan_error(err) or conn.broken:
                        self._conn = None
                        await self._close(conn)
                        pause = backoff
                    else:
                        self._settle(list(self._waits), to_silo_error(err))
                finally:
                    self._in_flight = False
                self._settle(ended)
                if pause:
                    await asyncio.sleep(pause)
                    backoff = _backoff(backoff)
        except BaseException as err:  # noqa: B902 - never leave awaits hanging on a dead task
            self._settle(list(self._waits), err if isinstance(err, Exception) else asyncio.CancelledError())
            raise
        finally:
            self._task = None
            conn, self._conn = self._conn, None
            if conn is not None:
                await self._close(conn)


class TaskMux:
    """The gathered awaits of one AsyncSiloClient: a _TaskLoop per tenant (on the client's loop), MAX_LOOPS at most."""

    def __init__(self, connect: Callable[[], Any], max_ids: int):
        self._connect = connect
        self._max_ids = max_ids
        self._loops: Dict[str, _TaskLoop] = {}

    async def close(self) -> None:
        """Fail every await (the client is closing), end the loops and close their connections."""
        err = SiloConnectionError("the client was closed while the job was awaited")
        tasks = []
        for lp in self._loops.values():
            lp._settle(list(lp._waits), err)
            if lp._task is not None:
                lp._task.cancel()
                tasks.append(lp._task)
        if tasks:
            await asyncio.wait(tasks, timeout=5)

    async def until(self, id: str, tenant: str, deadline: float) -> Optional[bool]:
        """Until job id of tenant has ended or is gone (True) or the deadline passed (False); None when not taken."""
        loop = self._loops.get(tenant)
        if loop is None:
            if sum(1 for lp in self._loops.values() if lp.size() > 0) >= MAX_LOOPS:
                return None
            loop = self._loops[tenant] = _TaskLoop(self._connect, tenant)
        elif loop.size() >= self._max_ids:
            return None
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
