"""Workers: AsyncSiloWorker (asyncio) and SiloWorker (the same engine in a thread of its own).

One lease loop asks silo.lease for as many tasks as there are free slots (at
most batch_size), again at once while leases come back full, else when a
wake-up arrives (LISTEN silo_task_ready on a connection of its own) or the
poll interval has passed.  Each task runs handler(task, ctx); successes are
reported in batches with silo.complete_many, failures with silo.fail,
cancelled jobs with silo.ack_cancel.  Every lease is renewed every third of
the lease (silo.heartbeat, one statement for all that are due, in task id
order) on a connection of its own; a heartbeat that says the job was
cancelled fires the task's signal.  Whatever becomes of the heartbeats, a
handler whose lease has run out by the worker's own clock has its signal
fired as lost.  Refresh tasks of floating concurrency limits go to the
refresh handler and are answered with silo.report_refresh or
silo.fail_refresh.

A lost connection is replaced (with a backoff); handlers keep running and
their reports are retried until their lease would have expired.  stop()
stops leasing, gives running handlers a grace period, then fires their
signals and hands back with silo.release the tasks whose handlers then
return promptly; the others' leases are left to run out.  stop() ends
within grace_period + stop_timeout, whatever handlers and the server do.

This mirrors clients/node/src/worker.ts; see its comments for the reasons.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import inspect
import json
import logging
import os
import random
import signal as _signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

import psycopg

from ._pool import AsyncPool
from ._threads import HandlerThreads
from .errors import (
    JobCancelledError, LeaseLostError, LeaseNotFoundError, LeaseOwnerMismatchError, NotOwnerError,
    SiloConnectionError, SiloError, UndefinedFunctionError, WorkerStoppingError, is_connection_error,
    is_stale_plan_error, to_silo_error,
)
from .types import RefreshTask, Task, task_from_row

log = logging.getLogger("silo_client")

LEASE_COLUMNS = ("task_id, kind, tenant, job_id, attempt, relative_attempt, is_last_attempt, priority, task_group,"
                 " payload, metadata, (extract(epoch FROM lease_expires_at) * 1000000)::bigint AS lease_expires_us,"
                 " queue_key, current_max_concurrency, refresh_metadata, limits, retry_policy")
# The whole lease as one JSON text: psycopg (without its C extension, as Debian ships it) reads
# each value of a result through ctypes, and 17 columns per task were 40% of a busy worker's
# time; one value per lease and one json.loads cost a fraction of that.  The columns are named
# (ALTER EXTENSION silo UPDATE may add some to silo.leased_task); the result is one text
# column whatever they are, so the statement may be prepared.  The lease's end comes as
# microseconds since the epoch: exact, and read the same on every Python version.
SQL_LEASE = (f"SELECT json_agg(l)::text AS tasks FROM (SELECT {LEASE_COLUMNS}"
             " FROM silo.lease(%s::text, %s::text, %s::int, %s::int, %s::text[])) AS l")
# One text value holds at most 1 GB: a lease whose tasks add up to more (payloads of megabytes
# times a large batch) fails with 54000, and the worker then reads its leases row by row.
SQL_LEASE_ROWS = ("SELECT task_id::text, kind, tenant, job_id, attempt, relative_attempt, is_last_attempt,"
                  " priority, task_group, payload, metadata, lease_expires_at, queue_key,"
                  " current_max_concurrency, refresh_metadata, limits, retry_policy"
                  " FROM silo.lease(%s::text, %s::text, %s::int, %s::int, %s::text[])")
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def _lease_rows(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The task rows of SQL_LEASE's one row (its tasks as JSON, NULL when it leased none), or
    SQL_LEASE_ROWS's rows as they are."""
    if rows and "tasks" not in rows[0]:
        return rows
    text = rows[0]["tasks"] if rows else None
    if text is None:
        return []
    tasks: List[Dict[str, Any]] = json.loads(text)
    for t in tasks:
        t["lease_expires_at"] = _EPOCH + _dt.timedelta(microseconds=t.pop("lease_expires_us"))
    return tasks
SQL_COMPLETE_MANY = "SELECT silo.complete_many(%s::uuid[], %s::text, %s::jsonb[])::text AS task_id"

MAX_BATCH = 1000
#: After stop() fires the signals: how long handlers get to return before their tasks are left to lapse.
SETTLE_AFTER_ABORT_S = 1.0
#: How often the listening connection is checked with SELECT 1, and how long the answer may take.
LISTENER_PING_S = 30.0
LISTENER_PING_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0


class TaskFailure(Exception):
    """Raise this from a handler to fail the attempt with an error code and data of your choice."""

    def __init__(self, error_code: str, data: Any = None, message: Optional[str] = None):
        super().__init__(message or error_code)
        self.error_code = error_code
        self.data = data


class TaskContext:
    """What a handler gets besides its task.

    ``signal`` is set when the job is cancelled (``reason``:
    JobCancelledError), when the worker lost the task's lease
    (LeaseLostError), or when stop()'s grace period ran out
    (WorkerStoppingError).  Stop the work when it fires.  It is a
    threading.Event for a plain function handler (run in a thread), an
    asyncio.Event for a coroutine handler.
    """

    def __init__(self, task: Union[Task, RefreshTask], worker_id: str, threaded: bool):
        self.task = task
        self.worker_id = worker_id
        self.reason: Optional[BaseException] = None
        self.signal: Union[threading.Event, asyncio.Event] = threading.Event() if threaded else asyncio.Event()

    @property
    def aborted(self) -> bool:
        return self.signal.is_set()

    def check(self) -> None:
        """Raise the reason once the signal has fired."""
        if self.signal.is_set():
            raise self.reason or SiloError("aborted")

    def sleep(self, seconds: float) -> bool:
        """(Thread handlers) sleep up to seconds; True if the signal fired meanwhile."""
        if not isinstance(self.signal, threading.Event):
            raise TypeError("a coroutine handler awaits ctx.wait(seconds)")
        return self.signal.wait(seconds)

    async def wait(self, seconds: Optional[float] = None) -> bool:
        """(Coroutine handlers) wait up to seconds for the signal; True if it fired."""
        if not isinstance(self.signal, asyncio.Event):
            raise TypeError("a thread handler calls ctx.sleep(seconds)")
        try:
            await asyncio.wait_for(self.signal.wait(), seconds)
        except asyncio.TimeoutError:
            pass
        return self.signal.is_set()

    def _abort(self, reason: BaseException) -> None:
        if self.signal.is_set():
            return
        self.reason = reason
        self.signal.set()


Handler = Callable[[Task, TaskContext], Any]
RefreshHandler = Callable[[RefreshTask, TaskContext], Any]


@dataclass
class WorkerErrorContext:
    """What the worker was doing when on_error was called."""

    phase: str
    task_id: Optional[str] = None
    job_id: Optional[str] = None


@dataclass
class WorkerStats:
    leased: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    released: int = 0
    lost: int = 0
    """Tasks whose lease was lost, or whose report did not land."""
    refreshed: int = 0
    refresh_failed: int = 0
    running: int = 0
    reconnects: int = 0
    followed: int = 0
    """Cluster mode: heartbeats and reports sent on to a task's new owner after an SL020."""


class _Backoff:
    def __init__(self, initial: float, maximum: float):
        self.initial, self.maximum, self.n = initial, maximum, 0

    def next(self) -> float:
        base = min(self.maximum, self.initial * 2 ** min(self.n, 30))
        self.n += 1
        return base * (0.5 + random.random() / 2)

    def reset(self) -> None:
        self.n = 0


#: SL020 hints a heartbeat or report follows, at most (cluster mode).
MAX_REPORT_HOPS = 3


class SharedSlots:
    """The concurrency budget the members' workers of a cluster worker share.

    Each reserves slots before it leases, gives back what the lease did not
    fill, and frees one when a handler returns; wake_all wakes the members'
    lease loops, from the next one each time (round robin).  Internal.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self._wakers: List[Callable[[], None]] = []
        self._next = 0

    def add(self, wake: Callable[[], None]) -> None:
        self._wakers.append(wake)

    @property
    def free(self) -> int:
        return self.limit - self.used

    def wake_all(self) -> None:
        n = len(self._wakers)
        if n:
            start = self._next % n
            self._next += 1
            for i in range(n):
                self._wakers[(start + i) % n]()


class _Exec:
    __slots__ = ("task", "ctx", "state", "cancelled", "lost", "released", "lease_deadline", "next_heartbeat",
                 "stop_aborted", "abandoned", "handler_done", "settled", "target")

    def __init__(self, task: Union[Task, RefreshTask], ctx: TaskContext, leased_at: float, lease_s: float,
                 hb_s: float):
        self.task = task
        self.ctx = ctx
        self.state = "queued"  # queued, running, reporting, done
        self.cancelled = False
        self.lost = False
        self.released = False
        self.lease_deadline = leased_at + lease_s  # our clock (monotonic)
        self.next_heartbeat = leased_at + hb_s
        self.stop_aborted = False
        self.abandoned = False
        self.handler_done = False
        self.settled = asyncio.Event()
        self.target: Optional[AsyncPool] = None  # after an SL020: the new owner's pool (cluster mode)

    @property
    def job_id(self) -> Optional[str]:
        return self.task.job_id if isinstance(self.task, Task) else None


def _truncate(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def _json_or_note(value: Any) -> Optional[str]:
    try:
        return json.dumps(value, allow_nan=False)
    except Exception as e:  # not JSON: say so instead
        return json.dumps({"message": f"not JSON: {_safe(e)}"})


def _safe(err: Any) -> str:
    try:
        return str(err)
    except Exception:
        return "unprintable error"


def _failure_of(err: BaseException) -> Tuple[str, Optional[str]]:
    """silo.fail's error_code and error_data for what a handler raised."""
    if isinstance(err, TaskFailure):
        code = err.error_code if isinstance(err.error_code, str) and err.error_code else "ERROR"
        return _truncate(code, 256), None if err.data is None else _json_or_note(err.data)
    name = type(err).__name__ or "Error"
    own = getattr(err, "code", None)
    code = own if isinstance(own, str) and own else name
    return _truncate(code, 256), _json_or_note({"name": name, "message": _safe(err)})


def _int_option(name: str, v: Any, lo: float, hi: float) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise ValueError(f"{name} must be a number between {lo} and {hi}")
    return v


class AsyncSiloWorker:
    """Leases tasks of one task group and runs a handler per task (asyncio).

    ``handler(task, ctx)`` may be a coroutine function (run on the loop,
    ctx.signal an asyncio.Event) or a plain function (run in a thread of
    the worker's executor, ctx.signal a threading.Event).  What it returns
    (any JSON value) becomes the job's result; what it raises fails the
    attempt (a TaskFailure chooses the error code and data).

    Times are in seconds.  Register handlers with the constructor or the
    ``@worker.handler`` / ``@worker.refresh_handler`` decorators; use
    ``async with worker:`` (start/stop) or ``await worker.run()`` (until
    SIGINT/SIGTERM).
    """

    def __init__(self, conninfo: str = "", *, task_group: str, handler: Optional[Handler] = None,
                 refresh_handler: Optional[RefreshHandler] = None, worker_id: Optional[str] = None,
                 tenants: Optional[Sequence[str]] = None, concurrency: int = 10, batch_size: Optional[int] = None,
                 lease_seconds: float = 30.0, heartbeat_interval: Optional[float] = None,
                 poll_interval: float = 1.0, listen: bool = True, batch_completions: bool = True,
                 grace_period: float = 10.0, stop_timeout: float = 10.0, pool_size: int = 2,
                 reconnect_delay: Tuple[float, float] = (0.1, 5.0),
                 on_error: Optional[Callable[[BaseException, WorkerErrorContext], None]] = None,
                 application_name: str = "silo-python-worker", **connect_kwargs: Any):
        if not isinstance(task_group, str) or not task_group:
            raise ValueError("task_group is required")
        self.conninfo = conninfo
        self.task_group = task_group
        self._handler = handler
        self._refresh_handler = refresh_handler
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.tenants = list(tenants) if tenants is not None else None
        self.concurrency = int(_int_option("concurrency", concurrency, 1, 100000))
        self.batch_size = int(_int_option("batch_size", batch_size if batch_size is not None
                                          else min(self.concurrency, MAX_BATCH), 1, MAX_BATCH))
        self.lease_s = float(_int_option("lease_seconds", lease_seconds, 0.1, 3600))
        self.heartbeat_s = float(_int_option("heartbeat_interval", heartbeat_interval if heartbeat_interval
                                             is not None else self.lease_s / 3, 0.001, 3600))
        if self.heartbeat_s * 2 >= self.lease_s:
            raise ValueError(f"heartbeat_interval ({self.heartbeat_s}) must be below half of lease_seconds"
                             f" ({self.lease_s}), so that a lease survives a heartbeat that fails once")
        self.poll_s = float(_int_option("poll_interval", poll_interval, 0.001, 3600))
        self.listen = listen
        self.batch_completions = batch_completions
        self.grace_s = float(_int_option("grace_period", grace_period, 0, 1e9))
        self.stop_timeout_s = float(_int_option("stop_timeout", stop_timeout, 0, 1e9))
        self.pool_size = int(_int_option("pool_size", pool_size, 1, 100))
        self.reconnect_initial = float(_int_option("reconnect_delay[0]", reconnect_delay[0], 0.001, 600))
        self.reconnect_max = float(_int_option("reconnect_delay[1]", reconnect_delay[1], self.reconnect_initial,
                                               600))
        self._on_error = on_error
        self.application_name = application_name
        self.connect_kwargs = connect_kwargs
        self.lease_ms = max(100, min(3600000, int(round(self.lease_s * 1000))))

        self._pool: Optional[AsyncPool] = None
        self._hb_conn: Optional[psycopg.AsyncConnection] = None
        self._listener_task: Optional[asyncio.Task] = None
        self._lease_task: Optional[asyncio.Task] = None
        self._hb_task: Optional[asyncio.Task] = None
        self._threads: Optional[HandlerThreads] = None
        self._lease_sql = SQL_LEASE
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._tenant_args = True

        self._started = False
        self._stopping = False
        self._closed = False
        self._start_task: Optional[asyncio.Future] = None
        self._stop_task: Optional[asyncio.Future] = None
        self._hard_deadline = float("inf")
        self._executions: Dict[str, _Exec] = {}
        self._threaded_fn: Any = None
        self._threaded_is = True
        self._active_jobs: Dict[Tuple[str, str], asyncio.Task] = {}
        self._slots_used = 0
        self._idle: Optional[asyncio.Event] = None
        self._reports: Set[asyncio.Task] = set()
        self._pending: List[Tuple[_Exec, Optional[str]]] = []
        self._flushing = False
        self._flush_scheduled = False
        self._lease_wanted = True
        self._notified = False
        self._next_poll_at = 0.0
        self._lease_not_before = 0.0
        self._wake_ev: Optional[asyncio.Event] = None
        self._hb_wake: Optional[asyncio.Event] = None
        self._counters = WorkerStats()
        self._listener_conn: Optional[psycopg.AsyncConnection] = None
        self._listening = False
        # set by a cluster worker (cluster_worker.py) for each member's worker
        self._slots: Optional[SharedSlots] = None
        self._redirect: Optional[Callable[[NotOwnerError], Optional[AsyncPool]]] = None
        self._cluster = False

    # -- registration ------------------------------------------------------

    def handler(self, fn: Handler) -> Handler:
        """Decorator: register fn as the handler of run tasks."""
        self._handler = fn
        return fn

    def refresh_handler(self, fn: RefreshHandler) -> RefreshHandler:
        """Decorator: register fn as the handler of floating-limit refresh tasks (returns the new max)."""
        self._refresh_handler = fn
        return fn

    @property
    def stats(self) -> WorkerStats:
        s = WorkerStats(**self._counters.__dict__)
        s.running = self._slots_used
        return s

    @property
    def is_running(self) -> bool:
        return self._started and not self._stopping

    # -- starting and stopping ---------------------------------------------

    async def start(self) -> None:
        """Connect (and LISTEN), then lease in the background.

        Raises SiloConnectionError when the first connection fails; later
        failures are retried.  A worker starts once: after stop(), make a
        new one.
        """
        if self._handler is None:
            raise ValueError("no handler: pass handler= or decorate one with @worker.handler")
        if self._stopping:
            raise SiloError("a stopped worker cannot start again: make a new one")
        if self._started:
            if self._start_task is not None:
                await asyncio.shield(self._start_task)
            return
        self._started = True
        self._loop = asyncio.get_running_loop()
        self._start_task = asyncio.ensure_future(self._begin())
        await asyncio.shield(self._start_task)

    async def _begin(self) -> None:
        self._idle = asyncio.Event()
        self._idle.set()
        self._wake_ev = asyncio.Event()
        self._hb_wake = asyncio.Event()
        self._threads = HandlerThreads(self.concurrency)
        pool = AsyncPool(self.conninfo, self.pool_size, self.application_name, **self.connect_kwargs)
        self._pool = pool
        try:
            if self.listen:
                await self._connect_listener()
            else:
                async with pool.connection(time.monotonic() + CONNECT_TIMEOUT_S) as c:
                    await c.execute("SELECT 1")
        except BaseException as err:
            self._closed = True
            self._stopping = True
            self._pool = None
            await pool.close(abort_busy=True)
            self._threads.shutdown()
            e = to_silo_error(err)
            if e is err:
                raise
            raise e from err
        if self._stopping:
            return
        if self.listen:
            self._listener_task = asyncio.ensure_future(self._listen_loop())
        self._lease_task = asyncio.ensure_future(self._lease_loop())
        self._hb_task = asyncio.ensure_future(self._heartbeat_loop())

    async def stop(self, grace_period: Optional[float] = None) -> None:
        """Stop: lease no more, let running handlers finish for the grace period, then fire their signals.

        Handlers that return within a second of that have their tasks handed
        back with silo.release (a refresh task is failed with "worker
        shutting down"); the tasks of handlers still running then are not
        released: nothing is reported for them and their leases run out.
        Then report what has finished and close the connections.  Returns
        within grace_period + stop_timeout.  Calling it again waits for the
        same stop.
        """
        if self._stop_task is None:
            self._stop_task = asyncio.ensure_future(
                self._shutdown(self.grace_s if grace_period is None else float(grace_period)))
        await asyncio.shield(self._stop_task)

    async def __aenter__(self) -> "AsyncSiloWorker":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    async def run(self, signals: Sequence[int] = (_signal.SIGINT, _signal.SIGTERM)) -> None:
        """Start, run until one of signals arrives (or the task is cancelled), then stop()."""
        await self.start()
        loop = asyncio.get_running_loop()
        stop_ev = asyncio.Event()
        installed = []
        for s in signals:
            try:
                loop.add_signal_handler(s, stop_ev.set)
                installed.append(s)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        try:
            await stop_ev.wait()
        finally:
            for s in installed:
                loop.remove_signal_handler(s)
            await self.stop()

    # -- helpers -----------------------------------------------------------

    def _report(self, err: BaseException, ctx: WorkerErrorContext) -> None:
        e = to_silo_error(err)
        try:
            if self._on_error is not None:
                self._on_error(e, ctx)
            else:
                where = f" (task {ctx.task_id})" if ctx.task_id else ""
                log.error("silo worker %s: %s%s: %s", self.worker_id, ctx.phase, where, e)
        except Exception:
            pass  # a raising on_error must not stop the worker

    async def _q(self, text: str, params: Sequence[Any], prepare: Optional[bool] = None,
                 target: Optional[AsyncPool] = None) -> List[Dict[str, Any]]:
        pool = target or self._pool
        if self._pool is None or self._closed or pool is None:
            raise SiloError("the worker is stopped")
        try:
            async with pool.connection(time.monotonic() + CONNECT_TIMEOUT_S) as conn:
                cur = await conn.execute(text, params, prepare=prepare)
                return await cur.fetchall() if cur.description else []
        except psycopg.Error as e:
            raise to_silo_error(e) from e

    def _wake(self) -> None:
        if self._wake_ev is not None:
            self._wake_ev.set()

    async def _wait_wake(self, seconds: float) -> None:
        assert self._wake_ev is not None
        try:
            await asyncio.wait_for(self._wake_ev.wait(), max(0.0, seconds))
        except asyncio.TimeoutError:
            pass
        self._wake_ev.clear()

    def _track(self, coro: Awaitable[Any]) -> None:
        t = asyncio.ensure_future(coro)
        self._reports.add(t)

        def forget(f: asyncio.Future) -> None:
            self._reports.discard(t)
            if not f.cancelled() and f.exception() is not None:
                self._report(f.exception(), WorkerErrorContext("report"))  # type: ignore[arg-type]

        t.add_done_callback(forget)

    @staticmethod
    async def _until(aw: Awaitable[Any], deadline: float) -> bool:
        """True once aw is done, False if deadline (monotonic) comes first; aw is not cancelled."""
        fut = asyncio.ensure_future(aw)
        if fut.done():
            return True
        left = deadline - time.monotonic()
        done, _ = await asyncio.wait({fut}, timeout=None if left == float("inf") else max(0.0, left))
        return bool(done)

    # -- listening ---------------------------------------------------------

    def _on_notify(self, n: psycopg.Notify) -> None:
        if n.channel == "silo_task_ready" and (not n.payload or n.payload == self.task_group):
            self._notified = True
            self._wake()

    async def _connect_listener(self) -> None:
        assert self._pool is not None
        conn = await asyncio.wait_for(self._pool.connect(), CONNECT_TIMEOUT_S + 1)
        try:
            conn.add_notify_handler(self._on_notify)
            await conn.execute("LISTEN silo_task_ready")
        except BaseException:
            await conn.close()
            raise
        self._listener_conn = conn

    async def _listen_loop(self) -> None:
        backoff = _Backoff(self.reconnect_initial, self.reconnect_max)
        while not self._closed:
            conn = self._listener_conn
            if conn is None:
                try:
                    await self._connect_listener()
                    backoff.reset()
                    self._counters.reconnects += 1
                    # wake-ups sent while we were away are lost: look now
                    self._notified = True
                    self._wake()
                except asyncio.CancelledError:
                    raise
                except BaseException as err:
                    self._report(err, WorkerErrorContext("listen"))
                    await asyncio.sleep(backoff.next())
                continue
            try:
                gen = conn.notifies()
                try:
                    while not self._closed:
                        n = await asyncio.wait_for(gen.__anext__(), LISTENER_PING_S)
                        self._on_notify(n)
                except asyncio.TimeoutError:
                    # a half-open connection would wait forever: ask it something
                    await asyncio.wait_for(conn.execute("SELECT 1"), LISTENER_PING_TIMEOUT_S)
            except asyncio.CancelledError:
                raise
            except BaseException as err:
                self._listener_conn = None
                try:
                    await conn.close()
                except Exception:
                    pass
                if self._closed:
                    return
                self._report(SiloConnectionError(f"the listening connection was lost: {_safe(err)}")
                             if not isinstance(err, SiloError) else err, WorkerErrorContext("listen"))
                await asyncio.sleep(backoff.next())

    # -- leasing -----------------------------------------------------------

    async def _lease_loop(self) -> None:
        backoff = _Backoff(self.reconnect_initial, self.reconnect_max)
        failing = False
        while not self._stopping:
            now = time.monotonic()
            free = self.concurrency - self._slots_used
            if self._slots is not None:
                free = min(free, self._slots.free)
            if free <= 0 or len(self._pending) >= max(self.concurrency, self.batch_size):
                await self._wait_wake(self.poll_s)
                continue
            if now < self._lease_not_before:
                await self._wait_wake(self._lease_not_before - now)
                continue
            if not (self._lease_wanted or self._notified or now >= self._next_poll_at):
                await self._wait_wake(self._next_poll_at - now)
                continue
            self._notified = False
            want = min(self.batch_size, free)
            leased_at = now
            if self._slots is not None:
                self._slots.used += want  # the shared budget: what the lease does not fill is given back
            try:
                try:
                    rows = _lease_rows(await self._q(self._lease_sql, [self.worker_id, self.task_group, want,
                                                                       self.lease_ms, self.tenants]))
                except SiloError as err:
                    if err.code != "54000" or self._lease_sql is SQL_LEASE_ROWS:
                        raise
                    # the lease did not fit in one text value (and was rolled back): row by row from now on
                    self._report(err, WorkerErrorContext("lease"))
                    self._lease_sql = SQL_LEASE_ROWS
                    rows = await self._q(SQL_LEASE_ROWS, [self.worker_id, self.task_group, want, self.lease_ms,
                                                          self.tenants], prepare=False)
                if failing:
                    failing = False
                    self._counters.reconnects += 1
                backoff.reset()
            except asyncio.CancelledError:
                raise
            except BaseException as err:
                self._unreserve(want)
                if self._stopping:
                    break
                failing = failing or is_connection_error(err)
                self._report(err, WorkerErrorContext("lease"))
                self._lease_wanted = False
                self._lease_not_before = time.monotonic() + backoff.next()
                continue
            if self._closed:
                self._unreserve(want)
                self._counters.lost += len(rows)  # stop() gave up waiting for this lease
                break
            self._unreserve(want - len(rows))
            for row in rows:
                if not self._run_task(row, leased_at):
                    self._unreserve(1)
            self._lease_wanted = len(rows) >= want
            if not self._lease_wanted:
                self._next_poll_at = time.monotonic() + self.poll_s

    def _threaded(self, fn: Any) -> bool:
        """Whether fn runs in a thread (not a coroutine function); the last answer is kept, asked per task."""
        if fn is not self._threaded_fn:
            self._threaded_is = not (inspect.iscoroutinefunction(fn)
                                     or inspect.iscoroutinefunction(getattr(fn, "__call__", None)))
            self._threaded_fn = fn
        return self._threaded_is

    def _unreserve(self, n: int) -> None:
        """Give back n reserved slots of the shared budget."""
        if self._slots is not None and n > 0:
            self._slots.used -= n
            self._slots.wake_all()

    def _run_task(self, row: Dict[str, Any], leased_at: float) -> bool:
        """Start a leased task; False when it was not started (it already runs here)."""
        task = task_from_row(row)
        if task.id in self._executions:
            # never run one task twice
            self._report(SiloError(f"task {task.id} was leased again while this worker holds it"),
                         WorkerErrorContext("lease", task.id))
            return False
        fn = self._handler if isinstance(task, Task) else self._refresh_handler
        ctx = TaskContext(task, self.worker_id, threaded=fn is None or self._threaded(fn))
        ex = _Exec(task, ctx, leased_at, self.lease_s, self.heartbeat_s)
        self._executions[task.id] = ex
        self._slots_used += 1
        assert self._idle is not None
        self._idle.clear()
        self._counters.leased += 1
        if not isinstance(task, Task):
            asyncio.ensure_future(self._execute(ex))
            return True
        # an earlier attempt of the same job may still run here (its lease was
        # lost and the retry came back to us): wait for it, never run a job twice at once
        key = (task.tenant, task.job_id)
        prev = self._active_jobs.get(key)

        async def run() -> None:
            if prev is not None:
                await asyncio.wait({prev})
            await self._execute(ex)

        # without an earlier attempt to wait for, no wrapper coroutine
        t = asyncio.ensure_future(run() if prev is not None else self._execute(ex))
        self._active_jobs[key] = t

        def forget(_f: asyncio.Future) -> None:
            if self._active_jobs.get(key) is t:
                del self._active_jobs[key]

        t.add_done_callback(forget)
        return True

    def _free_slot(self) -> None:
        self._slots_used -= 1
        if self._slots_used == 0 and self._idle is not None:
            self._idle.set()
        if self._slots is not None:
            self._slots.used -= 1
            self._slots.wake_all()
        self._wake()

    async def _execute(self, ex: _Exec) -> None:
        """Run one task's handler and report its outcome; never raises."""
        task = ex.task
        try:
            if ex.lost or ex.released or ex.abandoned:
                ex.handler_done = True
                ex.settled.set()
                self._free_slot()
                if ex.lost or ex.abandoned:
                    self._done(ex, "lost")
                return
            if isinstance(task, Task) and ex.cancelled:
                # cancelled while it waited for an earlier attempt: do not start it
                ex.handler_done = True
                ex.settled.set()
                self._free_slot()
                self._track(self._call(ex, "ack_cancel", (), "cancelled"))
                return
            ex.state = "running"
            ok = True
            value: Any = None
            try:
                if isinstance(task, Task):
                    value = await self._invoke(self._handler, task, ex.ctx)
                elif self._refresh_handler is not None:
                    value = await self._invoke(self._refresh_handler, task, ex.ctx)
                else:
                    value = task.current_max_concurrency
            except asyncio.CancelledError:
                raise
            except BaseException as err:  # noqa: B902 - a handler's failure, whatever it is
                ok = False
                value = err
            ex.handler_done = True
            ex.settled.set()
            self._free_slot()
            self._finish(ex, ok, value)
        except Exception as err:
            self._report(err, WorkerErrorContext("execute", task.id, ex.job_id))

    async def _invoke(self, fn: Any, task: Any, ctx: TaskContext) -> Any:
        if ctx.signal.__class__ is threading.Event:
            assert self._threads is not None and self._loop is not None
            value = await self._threads.submit(self._loop, fn, task, ctx)
        else:
            value = fn(task, ctx)
        if inspect.isawaitable(value):
            value = await value
        return value

    def _finish(self, ex: _Exec, ok: bool, value: Any) -> None:
        task = ex.task
        if ex.abandoned or ex.lost or self._closed:
            self._done(ex, "lost")  # stop() gave up on it, or the lease is gone: nothing to report
            return
        if ex.released or ex.stop_aborted:
            return  # stop() hands the task back
        if isinstance(task, RefreshTask):
            if ok and isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 2147483647:
                self._track(self._call(ex, "report_refresh", (value,), "refreshed"))
                return
            msg = (f"refresh handler returned {_json_or_note(value) if ok else ''}, not an integer between 1 and"
                   " 2147483647") if ok else (_safe(value) or "refresh handler failed")
            self._track(self._call(ex, "fail_refresh", (_truncate(msg, 1024),), "refresh_failed"))
            return
        if ex.cancelled:
            self._track(self._call(ex, "ack_cancel", (), "cancelled"))
            return
        if ok:
            if value is None:
                result = None
            else:
                try:
                    result = json.dumps(value, allow_nan=False)
                except Exception as e:
                    data = json.dumps({"message": f"the handler's result is not JSON: {_safe(e)}"})
                    self._track(self._call(ex, "fail", ("RESULT_NOT_JSON", data), "failed"))
                    return
            self._queue_completion(ex, result)
            return
        code, data = _failure_of(value)
        self._track(self._call(ex, "fail", (code, data), "failed"))

    def _done(self, ex: _Exec, counter: Optional[str]) -> None:
        if ex.state == "done":
            return
        ex.state = "done"
        self._executions.pop(ex.task.id, None)
        if counter:
            setattr(self._counters, counter, getattr(self._counters, counter) + 1)

    # -- reports -----------------------------------------------------------

    _REPORTS = {
        "complete": ("silo.complete", "%s::uuid, %s::text, %s::jsonb"),
        "fail": ("silo.fail", "%s::uuid, %s::text, %s::text, %s::jsonb"),
        "ack_cancel": ("silo.ack_cancel", "%s::uuid, %s::text"),
        "release": ("silo.release", "%s::uuid, %s::text"),
        "report_refresh": ("silo.report_refresh", "%s::uuid, %s::text, %s::int"),
        "fail_refresh": ("silo.fail_refresh", "%s::uuid, %s::text, %s::text"),
    }

    def _report_stmt(self, what: str, task: Any, args: Sequence[Any]) -> Tuple[str, List[Any]]:
        fn, sig = self._REPORTS[what]
        params = [task.id, self.worker_id, *args]
        if self._tenant_args:
            # the task's tenant: in cluster mode a moved lease's old node answers SL020
            return f"SELECT {fn}({sig}, tenant => %s::text)", params + [task.tenant]
        return f"SELECT {fn}({sig})", params

    def _may_retry(self, err: BaseException, deadline: float) -> bool:
        now = time.monotonic()
        return (getattr(err, "retryable", False) is True and not self._closed and now < deadline
                and now < self._hard_deadline)

    async def _call(self, ex: _Exec, what: str, args: Sequence[Any], counter: str, fallback: bool = True) -> None:
        """One report, retried after a connection failure while the lease can still be alive."""
        ex.state = "reporting"
        backoff = _Backoff(self.reconnect_initial, self.reconnect_max)
        hops = 0
        while True:
            try:
                text, params = self._report_stmt(what, ex.task, args)
                await self._q(text, params, target=ex.target)
                self._done(ex, counter)
                return
            except asyncio.CancelledError:
                raise
            except BaseException as err:
                e = to_silo_error(err)
                ctx = WorkerErrorContext(what, ex.task.id, ex.job_id)
                if isinstance(e, NotOwnerError) and hops < MAX_REPORT_HOPS and self._follow(ex, e):
                    hops += 1
                    continue  # the task's shard moved, and its lease with it
                if isinstance(e, UndefinedFunctionError) and self._tenant_args:
                    self._tenant_args = False  # a silo whose reports take no tenant
                    continue
                if isinstance(e, (LeaseNotFoundError, LeaseOwnerMismatchError)):
                    self._report(e, ctx)  # the task is no longer ours
                    self._done(ex, "lost")
                    return
                if self._may_retry(e, ex.lease_deadline):
                    wait = min(backoff.next(), ex.lease_deadline - time.monotonic(),
                               self._hard_deadline - time.monotonic())
                    await asyncio.sleep(max(0.001, wait))
                    continue
                self._report(e, ctx)
                refused = getattr(e, "code", None) is not None and not is_connection_error(e) and not self._closed
                if refused and fallback and what in ("complete", "fail"):
                    data = _json_or_note({"message": f"silo refused the {what} report: {_safe(e)}"})
                    await self._call(ex, "fail", ("ERROR", data), "failed", fallback=False)
                    return
                self._done(ex, "lost")
                return

    def _follow(self, ex: _Exec, err: NotOwnerError) -> bool:
        """After an SL020 with an owner: the task's heartbeats and reports go there from now on."""
        if self._redirect is None or not err.owner_conninfo:
            return False
        pool = self._redirect(err)
        if pool is None:
            return False
        ex.target = pool
        self._counters.followed += 1
        return True

    def _queue_completion(self, ex: _Exec, result: Optional[str]) -> None:
        ex.state = "reporting"
        if not self.batch_completions:
            self._track(self._call(ex, "complete", (result,), "succeeded"))
            return
        self._pending.append((ex, result))
        if not self._flush_scheduled and not self._flushing:
            self._flush_scheduled = True
            assert self._loop is not None
            # after the other handlers that settled in this turn of the loop
            self._loop.call_soon(lambda: self._track(self._flush()))

    async def _flush(self) -> None:
        self._flush_scheduled = False
        if self._flushing:
            return
        self._flushing = True
        try:
            while self._pending:
                batch = self._pending[:MAX_BATCH]
                del self._pending[:MAX_BATCH]
                self._wake()
                await self._complete_batch(batch)
        finally:
            self._flushing = False

    async def _complete_batch(self, batch: List[Tuple[_Exec, Optional[str]]]) -> None:
        backoff = _Backoff(self.reconnect_initial, self.reconnect_max)
        # a task whose shard moved away reports to its new owner, alone
        for ex, result in [c for c in batch if c[0].target is not None]:
            self._track(self._call(ex, "complete", (result,), "succeeded"))
        batch = [c for c in batch if c[0].target is None]
        if not batch:
            return
        while True:
            if not self.batch_completions:
                for ex, result in batch:
                    self._track(self._call(ex, "complete", (result,), "succeeded"))
                return
            ids = [ex.task.id for ex, _ in batch]
            results = [r for _, r in batch] if any(r is not None for _, r in batch) else None
            try:
                rows = await self._q(SQL_COMPLETE_MANY, [ids, self.worker_id, results])
                completed = {r["task_id"] for r in rows}
                for ex, result in batch:
                    if ex.task.id in completed:
                        self._done(ex, "succeeded")
                    elif self._cluster:
                        # not here: alone with its tenant, a node its shard moved from says where it went
                        self._track(self._call(ex, "complete", (result,), "succeeded"))
                    else:
                        self._report(LeaseNotFoundError(f"task {ex.task.id} was not completed: its lease was gone"),
                                     WorkerErrorContext("complete", ex.task.id, ex.job_id))
                        self._done(ex, "lost")
                return
            except asyncio.CancelledError:
                raise
            except BaseException as err:
                e = to_silo_error(err)
                if getattr(e, "code", None) == "42883":
                    self.batch_completions = False  # a silo older than 1.2
                    continue
                deadline = min(ex.lease_deadline for ex, _ in batch)
                if self._may_retry(e, deadline):
                    await asyncio.sleep(max(0.001, min(backoff.next(), deadline - time.monotonic(),
                                                       self._hard_deadline - time.monotonic())))
                    continue
                # anything else: report one by one, so each task gets its own answer
                self._report(e, WorkerErrorContext("complete"))
                for ex, result in batch:
                    self._track(self._call(ex, "complete", (result,), "succeeded"))
                return

    # -- heartbeats --------------------------------------------------------

    async def _hq(self, text: str, params: Sequence[Any]) -> Tuple[List[Dict[str, Any]], float]:
        """One heartbeat statement on the heartbeating connection; returns the rows and when it was sent.

        An answer slower than the heartbeat interval counts as a lost
        connection: the connection is dropped and made again.
        """
        if self._closed or self._pool is None:
            raise SiloError("the worker is stopped")
        limit = max(0.5, self.heartbeat_s)
        conn = self._hb_conn
        if conn is None:
            try:
                conn = await asyncio.wait_for(self._pool.connect(), limit)
            except asyncio.TimeoutError:
                raise SiloConnectionError(f"could not connect for the heartbeat within {limit} s") from None
            if self._closed:
                await conn.close()
                raise SiloError("the worker is stopped")
            self._hb_conn = conn
        sent = time.monotonic()
        try:
            cur = await asyncio.wait_for(conn.execute(text, params), limit)
            return await cur.fetchall(), sent
        except asyncio.TimeoutError:
            self._drop_hb(conn)
            raise SiloConnectionError(f"no answer to the heartbeat within {limit} s") from None
        except psycopg.Error as err:
            if is_connection_error(err) or is_stale_plan_error(err) or conn.broken or conn.closed:
                self._drop_hb(conn)
            raise to_silo_error(err) from err

    def _drop_hb(self, conn: psycopg.AsyncConnection) -> None:
        if self._hb_conn is conn:
            self._hb_conn = None
        try:
            conn.pgconn.finish()
        except Exception:
            pass

    async def _heartbeat_loop(self) -> None:
        tick = max(0.01, min(1.0, self.heartbeat_s / 4))
        in_flight: Optional[asyncio.Task] = None
        assert self._hb_wake is not None
        while not self._closed:
            try:
                await asyncio.wait_for(self._hb_wake.wait(), tick)
            except asyncio.TimeoutError:
                pass
            self._hb_wake.clear()
            if self._closed:
                break
            now = time.monotonic()
            self._expire_leases(now)
            if in_flight is not None and not in_flight.done():
                continue
            slack = self.heartbeat_s / 4
            due = [e for e in self._executions.values()
                   if e.state != "done" and not e.lost and not e.released and not e.abandoned
                   and e.next_heartbeat <= now + slack]
            if not due:
                continue
            # in task id order, the order complete_many locks leases in
            due.sort(key=lambda e: e.task.id)
            for e in due:
                e.next_heartbeat = now + self.heartbeat_s
            in_flight = asyncio.ensure_future(self._heartbeat(due))
            in_flight.add_done_callback(
                lambda f: None if f.cancelled() or f.exception() is None
                else self._report(f.exception(), WorkerErrorContext("heartbeat")))  # type: ignore[arg-type]
        if in_flight is not None and not in_flight.done():
            await self._until(in_flight, self._hard_deadline)

    def _expire_leases(self, now: float) -> None:
        """Fire, as lost, the signals of handlers whose lease has run out by our clock."""
        for e in list(self._executions.values()):
            if e.lost or e.released or e.abandoned or now < e.lease_deadline:
                continue
            if e.state not in ("queued", "running"):
                continue
            cause = SiloError(f"no heartbeat renewed the lease of task {e.task.id} in time"
                              f" (it ran out {int((now - e.lease_deadline) * 1000)} ms ago)")
            self._lease_lost(e, cause)
            self._report(cause, WorkerErrorContext("heartbeat", e.task.id, e.job_id))

    def _hb_many_stmt(self, due: List[_Exec]) -> Tuple[str, List[Any]]:
        ids = [e.task.id for e in due]
        if self._tenant_args:
            return ("SELECT t.id::text AS task_id, silo.heartbeat(t.id, %s::text, %s::int, t.tenant) AS cancelled"
                    " FROM unnest(%s::uuid[], %s::text[]) AS t(id, tenant)",
                    [self.worker_id, self.lease_ms, ids, [e.task.tenant for e in due]])
        return ("SELECT t.id::text AS task_id, silo.heartbeat(t.id, %s::text, %s::int) AS cancelled"
                " FROM unnest(%s::uuid[]) AS t(id)", [self.worker_id, self.lease_ms, ids])

    def _hb_one_stmt(self, e: _Exec) -> Tuple[str, List[Any]]:
        if self._tenant_args:
            return ("SELECT silo.heartbeat(%s::uuid, %s::text, %s::int, %s::text) AS cancelled",
                    [e.task.id, self.worker_id, self.lease_ms, e.task.tenant])
        return "SELECT silo.heartbeat(%s::uuid, %s::text, %s::int) AS cancelled", [e.task.id, self.worker_id,
                                                                                 self.lease_ms]

    async def _heartbeat(self, every: List[_Exec]) -> None:
        # tasks whose shard moved away are renewed on their new owner, one by one
        for e in [x for x in every if x.target is not None]:
            await self._heartbeat_one(e)
        due = [x for x in every if x.target is None]
        if not due:
            return
        try:
            rows, sent = await self._hq(*self._hb_many_stmt(due))
            by_id = {r["task_id"]: r["cancelled"] for r in rows}
            for e in due:
                e.lease_deadline = sent + self.lease_s
                if by_id.get(e.task.id) is True:
                    self._cancelled(e)
            return
        except UndefinedFunctionError:
            if not self._tenant_args:
                raise
            self._tenant_args = False
            for e in due:
                e.next_heartbeat = time.monotonic()
            return
        except BaseException as err:
            if is_connection_error(err) or is_stale_plan_error(err):
                for e in due:
                    e.next_heartbeat = time.monotonic() + min(self.heartbeat_s, 0.5)
                raise
            # one of them failed (a lost lease, most likely): find out which
        for e in due:
            await self._heartbeat_one(e)

    async def _heartbeat_one(self, e: _Exec) -> None:
        """Renew one lease: on the heartbeating connection, or on the new owner's pool after an SL020."""
        for hops in range(MAX_REPORT_HOPS + 1):
            if e.state == "done" or e.lost or self._closed:
                return
            try:
                if e.target is not None:
                    sent = time.monotonic()
                    rows = await self._q(*self._hb_one_stmt(e), target=e.target)
                else:
                    rows, sent = await self._hq(*self._hb_one_stmt(e))
                e.lease_deadline = sent + self.lease_s
                if rows and rows[0]["cancelled"] is True:
                    self._cancelled(e)
                return
            except BaseException as err:
                x = to_silo_error(err)
                if isinstance(x, NotOwnerError) and hops < MAX_REPORT_HOPS and self._follow(e, x):
                    continue
                if isinstance(x, (LeaseNotFoundError, LeaseOwnerMismatchError)):
                    self._lease_lost(e, x)
                    self._report(x, WorkerErrorContext("heartbeat", e.task.id, e.job_id))
                else:
                    if is_connection_error(x):
                        e.next_heartbeat = time.monotonic() + min(self.heartbeat_s, 0.5)
                    self._report(x, WorkerErrorContext("heartbeat", e.task.id, e.job_id))
                return

    def _cancelled(self, e: _Exec) -> None:
        if e.cancelled or not isinstance(e.task, Task):
            return
        e.cancelled = True
        if e.state in ("queued", "running"):
            e.ctx._abort(JobCancelledError(f"job {e.task.job_id} was cancelled"))

    def _lease_lost(self, e: _Exec, cause: BaseException) -> None:
        if e.state not in ("queued", "running"):
            return  # a report in flight decides for itself
        e.lost = True
        err = LeaseLostError(f"the lease of task {e.task.id} was lost")
        err.__cause__ = cause
        e.ctx._abort(err)

    # -- stopping ----------------------------------------------------------

    def _hand_back(self, e: _Exec) -> None:
        e.released = True
        if isinstance(e.task, Task):
            self._track(self._call(e, "release", (), "released"))
        else:
            self._track(self._call(e, "fail_refresh", ("worker shutting down",), "refresh_failed"))

    async def _shutdown(self, grace: float) -> None:
        self._stopping = True
        if not self._started or self._closed:
            return
        grace_end = time.monotonic() + grace
        self._hard_deadline = grace_end + self.stop_timeout_s
        self._wake()
        if self._start_task is not None:
            await self._until(self._start_task, self._hard_deadline)
            if self._start_task.done() and not self._start_task.cancelled() and self._start_task.exception():
                return  # start() failed and closed what it had opened
        if self._closed:
            return
        if self._lease_task is not None:
            await self._until(self._lease_task, self._hard_deadline)
        assert self._idle is not None
        settled = await self._until(self._idle.wait(), grace_end)
        if not settled:
            aborted: List[_Exec] = []
            for e in list(self._executions.values()):
                if e.lost or e.abandoned or e.released:
                    continue
                if e.state == "queued":
                    e.ctx._abort(WorkerStoppingError("the worker is stopping"))
                    self._hand_back(e)
                elif e.state == "running":
                    e.stop_aborted = True
                    e.ctx._abort(WorkerStoppingError("the worker is stopping"))
                    aborted.append(e)
            if aborted:
                waits = [asyncio.ensure_future(e.settled.wait()) for e in aborted]
                left = min(time.monotonic() + SETTLE_AFTER_ABORT_S, self._hard_deadline) - time.monotonic()
                _, late = await asyncio.wait(waits, timeout=max(0.0, left))
                for t in late:
                    t.cancel()
            for e in aborted:
                if e.state == "done":
                    continue
                if e.lost:
                    if e.handler_done:
                        self._done(e, "lost")
                    continue
                if e.handler_done:
                    self._hand_back(e)
                else:
                    # its handler still runs: releasing would let another worker run the
                    # same attempt meanwhile; report nothing, the lease runs out
                    e.abandoned = True
                    self._report(WorkerStoppingError(
                        f"the handler of task {e.task.id} did not return after its signal fired:"
                        " its task is not released, its lease will run out"),
                        WorkerErrorContext("stop", e.task.id, e.job_id))
        # let every report land, completions first, until the deadline
        while ((self._pending or self._flushing or self._flush_scheduled or self._reports)
               and time.monotonic() < self._hard_deadline):
            if self._pending and not self._flushing and not self._flush_scheduled:
                self._track(self._flush())
            if self._reports:
                await self._until(asyncio.wait(set(self._reports)), self._hard_deadline)
            await asyncio.sleep(0)
        self._closed = True
        if self._hb_wake is not None:
            self._hb_wake.set()
        if self._hb_task is not None:
            await self._until(self._hb_task, self._hard_deadline)
            self._hb_task.cancel()
        for t in list(self._reports):
            t.cancel()  # given up: their leases run out
        if self._listener_task is not None:
            self._listener_task.cancel()
            await self._until(self._listener_task, time.monotonic() + 1)
        for c in (self._listener_conn, self._hb_conn):
            if c is not None:
                try:
                    c.pgconn.finish()
                except Exception:
                    pass
        self._listener_conn = self._hb_conn = None
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close(abort_busy=True)
        if self._threads is not None:
            # a handler thread that ignores its signal is not waited for
            self._threads.shutdown()


class SiloWorker:
    """The synchronous worker: AsyncSiloWorker's engine on an event loop in a thread of its own.

    Handlers are plain functions run in handler threads (up to
    ``concurrency``, started as handlers block: _threads.HandlerThreads);
    ``ctx.signal`` is a threading.Event (``ctx.sleep(s)`` waits on it).  Coroutine handlers work too (they run on the worker's loop).
    Options are AsyncSiloWorker's.  ``with SiloWorker(...) as w:`` starts
    and stops it; ``worker.run()`` blocks until Ctrl-C or SIGTERM, then
    stops gracefully.
    """

    def __init__(self, conninfo: str = "", **options: Any):
        self._aw = AsyncSiloWorker(conninfo, **options)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._stop_requested = threading.Event()
        self._stop_lock = threading.Lock()

    def handler(self, fn: Handler) -> Handler:
        """Decorator: register fn as the handler of run tasks."""
        return self._aw.handler(fn)

    def refresh_handler(self, fn: RefreshHandler) -> RefreshHandler:
        """Decorator: register fn as the refresh handler (returns the floating limit's new max)."""
        return self._aw.refresh_handler(fn)

    @property
    def worker_id(self) -> str:
        return self._aw.worker_id

    @property
    def task_group(self) -> str:
        return self._aw.task_group

    @property
    def stats(self) -> WorkerStats:
        return self._aw.stats

    @property
    def is_running(self) -> bool:
        return self._aw.is_running

    def _submit(self, coro: Awaitable[Any]) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()  # type: ignore[arg-type]

    def start(self) -> None:
        """Connect (and LISTEN), then lease in the background thread; raises if the first connection fails."""
        if self._thread is not None:
            raise SiloError("a worker starts once: make a new one")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name=f"silo-worker-{self._aw.task_group}",
                                        daemon=True)
        self._thread.start()
        try:
            self._submit(self._aw.start())
        except BaseException:
            self._end_loop()
            raise

    def _end_loop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return

        async def cancel_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=1)

        try:
            self._submit(cancel_rest())
        except BaseException:
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        if not thread.is_alive():
            loop.close()

    def stop(self, grace_period: Optional[float] = None) -> None:
        """Graceful stop (see AsyncSiloWorker.stop); returns within grace_period + stop_timeout."""
        self._stop_requested.set()
        with self._stop_lock:
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                return
            try:
                self._submit(self._aw.stop(grace_period))
            finally:
                self._end_loop()

    def __enter__(self) -> "SiloWorker":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def run(self) -> None:
        """Start, block until Ctrl-C (KeyboardInterrupt), SIGTERM or stop() from another thread, then stop."""
        self.start()
        old = None
        if threading.current_thread() is threading.main_thread():
            old = _signal.signal(_signal.SIGTERM, lambda *_: self._stop_requested.set())
        try:
            while not self._stop_requested.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            if old is not None:
                _signal.signal(_signal.SIGTERM, old)
            self.stop()

    def request_stop(self) -> None:
        """Make run() return (after a graceful stop); safe from any thread or a signal handler."""
        self._stop_requested.set()
