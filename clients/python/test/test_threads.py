"""HandlerThreads (the sync handlers' threads) on its own: growth, blocking concurrency, failures, shutdown, idle exit."""

import asyncio
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from silo_client._threads import HandlerThreads  # noqa: E402


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


class HandlerThreadsTest(unittest.TestCase):
    def test_quick_handlers_stay_on_one_thread(self):
        names = set()

        async def go():
            ht = HandlerThreads(32, grow_after=0.2)  # a loaded machine may pause a thread for some ms
            loop = asyncio.get_running_loop()
            for _ in range(50):  # bursts of 32, as leases come
                await asyncio.gather(*(ht.submit(loop, lambda: names.add(threading.current_thread().name))
                                       for _ in range(32)))
            n = ht.threads
            ht.shutdown()
            return n

        self.assertEqual(run(go()), 1)
        self.assertEqual(len(names), 1, names)

    def test_blocking_handlers_get_their_threads(self):
        # 8 handlers that can only return together: each needs a thread of its own
        barrier = threading.Barrier(8, timeout=10)

        async def go():
            ht = HandlerThreads(8)
            loop = asyncio.get_running_loop()
            t0 = time.monotonic()
            got = await asyncio.gather(*(ht.submit(loop, barrier.wait) for _ in range(8)))
            took = time.monotonic() - t0
            n = ht.threads
            ht.shutdown()
            return sorted(got), took, n

        got, took, n = run(go())
        self.assertEqual(got, list(range(8)))
        self.assertEqual(n, 8)
        self.assertLess(took, 2.0)

    def test_short_blocking_handlers_get_threads_too(self):
        # 40 handlers that each wait 20 ms on I/O (a sleep): on one thread 0.8 s; on 8 about 0.1 s
        async def go():
            ht = HandlerThreads(8)
            loop = asyncio.get_running_loop()
            t0 = time.monotonic()
            await asyncio.gather(*(ht.submit(loop, time.sleep, 0.02) for _ in range(40)))
            took = time.monotonic() - t0
            n = ht.threads
            ht.shutdown()
            return took, n

        took, n = run(go())
        self.assertGreaterEqual(n, 4)
        self.assertLess(took, 0.5)

    def test_never_more_threads_than_the_maximum(self):
        # 12 handlers blocked one after the other, 3 threads at most: 3 at a time
        running, peak, lock = [0], [0], threading.Lock()

        def handler():
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(0.05)
            with lock:
                running[0] -= 1

        async def go():
            ht = HandlerThreads(3)
            loop = asyncio.get_running_loop()
            await asyncio.gather(*(ht.submit(loop, handler) for _ in range(12)))
            n = ht.threads
            ht.shutdown()
            return n

        self.assertEqual(run(go()), 3)
        self.assertEqual(peak[0], 3)

    def test_outcomes_and_failures_reach_their_futures(self):
        def fail(x):
            raise ValueError(x)

        async def go():
            ht = HandlerThreads(2)
            loop = asyncio.get_running_loop()
            ok = await ht.submit(loop, lambda a, b: a + b, 2, 3)
            with self.assertRaises(ValueError) as cm:
                await ht.submit(loop, fail, "bad")
            ht.shutdown()
            return ok, cm.exception.args

        self.assertEqual(run(go()), (5, ("bad",)))

    def test_shutdown_cancels_what_waits_and_refuses_more(self):
        release = threading.Event()
        ran = []

        async def go():
            ht = HandlerThreads(1)
            loop = asyncio.get_running_loop()
            first = ht.submit(loop, release.wait, 10)
            queued = [ht.submit(loop, ran.append, i) for i in range(3)]
            await asyncio.sleep(0.05)
            ht.shutdown()
            self.assertTrue(all(f.cancelled() for f in queued))
            with self.assertRaises(RuntimeError):
                ht.submit(loop, ran.append, 9)
            release.set()
            self.assertTrue(await first)  # the running handler finishes and reports
            deadline = time.monotonic() + 5
            while ht.threads and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            return ht.threads

        self.assertEqual(run(go()), 0)
        self.assertEqual(ran, [])

    def test_idle_threads_end_but_the_last(self):
        barrier = threading.Barrier(4, timeout=10)

        async def go():
            ht = HandlerThreads(4, idle_exit=0.2)
            loop = asyncio.get_running_loop()
            await asyncio.gather(*(ht.submit(loop, barrier.wait) for _ in range(4)))
            self.assertEqual(ht.threads, 4)
            deadline = time.monotonic() + 5
            while ht.threads > 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            n = ht.threads
            self.assertEqual(await ht.submit(loop, lambda: "still"), "still")
            ht.shutdown()
            return n

        self.assertEqual(run(go()), 1)


if __name__ == "__main__":
    unittest.main()
