"""The handler threads of a worker: one thread while handlers return at once, more when they block.

A worker with concurrency N may have N plain-function handlers running at
once, so it needs up to N threads.  concurrent.futures.ThreadPoolExecutor
starts a thread per task submitted while none is idle (a lease of 32 tasks
starts 32) and wakes its idle threads in turn, so N threads take turns on the
interpreter's lock for handlers that take microseconds; measured with a no-op
handler, one thread did 20% more jobs/s than 32.

HandlerThreads starts one thread, and adds threads only when work waits
behind handlers that are really busy: when a task has waited CHECK_S and
either handlers take SLOW_S or more on average (a moving average of their
wall time: handlers that do I/O, like an HTTP call of 10 ms) or every thread
has been inside one handler for GROW_AFTER_S (the first handler to block,
before there is an average).  Waiting for the interpreter's lock takes at
most a switch interval (5 ms by default) and seldom falls inside a handler
that takes microseconds, so a no-op load never looks blocked.  Idle threads
are woken last-in first-out, so the thread that just finished takes the next
task while the others sleep, and a thread idle for IDLE_EXIT_S ends (the
last one stays).  Threads are daemons:
a handler that never returns does not keep the process from exiting.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Any, Callable, Deque, List, Optional, Tuple

CHECK_S = 0.005
SLOW_S = 0.002
GROW_AFTER_S = 0.02
IDLE_EXIT_S = 30.0
#: weight of the last handler in the moving average of handler times
_ALPHA = 0.1

_Item = Tuple[float, asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], Tuple[Any, ...]]


class _Slot:
    """A thread's state: when its current handler started (monotonic), 0.0 between handlers."""

    __slots__ = ("since",)

    def __init__(self) -> None:
        self.since = 0.0


def _settle(fut: "asyncio.Future[Any]", ok: bool, value: Any) -> None:
    """On the loop: give the handler's outcome to its future (unless it was cancelled meanwhile)."""
    if fut.cancelled():
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


class HandlerThreads:
    """Runs plain-function handlers for an event loop on at most max_threads threads, started as needed."""

    def __init__(self, max_threads: int, name: str = "silo-handler",
                 grow_after: float = GROW_AFTER_S, idle_exit: float = IDLE_EXIT_S,
                 check: float = CHECK_S, slow: float = SLOW_S):
        self._max = max(1, int(max_threads))
        self._name = name
        self._grow_after = grow_after
        self._check_s = check
        self._slow = slow
        self._avg = 0.0  # moving average of handlers' wall time
        self._idle_exit = idle_exit
        self._lock = threading.Lock()
        self._queue: Deque[_Item] = collections.deque()
        # one per thread (compared by identity)
        self._busy: List[_Slot] = []
        # idle threads, each asleep on a lock of its own; the last to go idle is woken first
        self._sleepers: List[threading.Lock] = []
        self._serial = 0
        self._closed = False
        self._check_armed = False

    @property
    def threads(self) -> int:
        """How many threads there are now."""
        return len(self._busy)

    def submit(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> "asyncio.Future[Any]":
        """From loop's thread: run fn(*args) in a handler thread; the returned future of loop gets its outcome."""
        fut = loop.create_future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker's handler threads have been shut down")
            self._queue.append((time.monotonic(), loop, fut, fn, args))
            if self._sleepers:
                self._sleepers.pop().release()
            elif not self._busy:
                self._start_locked()
            elif not self._check_armed and len(self._busy) < self._max:
                self._check_armed = True
                loop.call_later(self._check_s, self._check, loop)
        return fut

    def _start_locked(self) -> None:
        """Start one thread (the lock is held)."""
        slot = _Slot()
        self._busy.append(slot)
        self._serial += 1
        t = threading.Thread(target=self._work, args=(slot,), name=f"{self._name}-{self._serial}", daemon=True)
        t.start()

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop, a little after work queued behind busy threads: add threads if handlers are slow or blocked."""
        with self._lock:
            self._check_armed = False
            if self._closed or not self._queue or self._sleepers:
                return
            now = time.monotonic()
            if now - self._queue[0][0] >= self._check_s and (self._avg >= self._slow or all(
                    s.since and now - s.since >= self._grow_after for s in self._busy)):
                for _ in range(min(len(self._queue), self._max - len(self._busy))):
                    self._start_locked()
            if self._queue and len(self._busy) < self._max:
                self._check_armed = True
                loop.call_later(self._check_s, self._check, loop)

    def _work(self, slot: _Slot) -> None:
        """A thread: run queued handlers; sleep when there are none; end after idle_exit or at shutdown."""
        me = threading.Lock()
        me.acquire()
        while True:
            with self._lock:
                while not self._queue:
                    if self._closed:
                        self._busy.remove(slot)
                        return
                    self._sleepers.append(me)
                    self._lock.release()
                    woken = me.acquire(timeout=self._idle_exit)
                    self._lock.acquire()
                    if not woken:
                        if me in self._sleepers:
                            self._sleepers.remove(me)
                            if len(self._busy) > 1 and not self._queue:
                                self._busy.remove(slot)
                                return
                        else:
                            me.acquire()  # released by a submit just as the wait ended: take that wake-up
                _, loop, fut, fn, args = self._queue.popleft()
            start = slot.since = time.monotonic()
            try:
                ok, value = True, fn(*args)
            except BaseException as err:  # noqa: B902 - the handler's failure goes to its future
                ok, value = False, err
            slot.since = 0.0
            self._avg += (time.monotonic() - start - self._avg) * _ALPHA
            try:
                loop.call_soon_threadsafe(_settle, fut, ok, value)
            except RuntimeError:
                pass  # the loop is closed: nobody waits for this outcome
            del fut, fn, args, value

    def shutdown(self) -> None:
        """From the loop's thread: run nothing more, cancel what waits, let idle threads end.

        Threads inside a handler are not waited for (they end when it returns)."""
        with self._lock:
            self._closed = True
            queued, self._queue = self._queue, collections.deque()
            for s in self._sleepers:
                s.release()
            self._sleepers.clear()
        for _, _, fut, _, _ in queued:
            fut.cancel()
