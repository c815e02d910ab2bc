"""SiloWorker (sync, handlers in threads) end to end, and run()'s SIGTERM/Ctrl-C shutdown."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import unittest

from helpers import URL, ErrorSink, job_status, sql, unique, value, wait_for
from silo_client import (
    JobCancelledError, JobSpec, LeaseLostError, SiloClient, SiloWorker, TaskFailure, WorkerStoppingError,
)

HERE = os.path.dirname(os.path.abspath(__file__))


class SyncWorkerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = SiloClient(URL)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def make(self, **opts):
        sink = ErrorSink()
        opts.setdefault("on_error", sink)
        w = SiloWorker(URL, **opts)
        w.errors = sink.errors
        self.addCleanup(w.stop, 0)
        return w

    def test_success_failure_and_decorator(self):
        group = unique("sync")
        w = self.make(task_group=group, concurrency=4)
        threads = set()

        @w.handler
        def handle(task, ctx):
            threads.add(threading.current_thread().name)
            if task.payload == "bad":
                raise TaskFailure("BAD", {"why": "asked"})
            time.sleep(0.02)
            return {"echo": task.payload}

        with w:
            ids = self.client.enqueue_many([JobSpec(group, i) for i in range(20)])
            bad = self.client.enqueue(group, "bad")
            for i, jid in enumerate(ids):
                self.assertEqual(self.client.await_result(jid, timeout=10).result, {"echo": i})
            r = self.client.await_result(bad, timeout=10)
            self.assertEqual((r.status, r.error_code, r.error_data), ("Failed", "BAD", {"why": "asked"}))
        self.assertTrue(all(n.startswith("silo-handler") for n in threads))
        self.assertEqual((w.stats.succeeded, w.stats.failed), (20, 1))

    def test_blocking_handlers_run_at_once(self):
        # four handlers that can only return together: the worker must give each a thread
        group = unique("syncblock")
        barrier = threading.Barrier(4, timeout=10)
        w = self.make(task_group=group, concurrency=4, handler=lambda task, ctx: barrier.wait())
        ids = self.client.enqueue_many([JobSpec(group, i) for i in range(4)])
        with w:
            got = sorted(self.client.await_result(jid, timeout=15).result for jid in ids)
        self.assertEqual(got, [0, 1, 2, 3])
        self.assertEqual(w.stats.succeeded, 4)

    def test_cancel_sets_the_threading_event(self):
        group = unique("synccancel")
        started = threading.Event()
        reasons = []

        def handle(task, ctx):
            started.set()
            self.assertIsInstance(ctx.signal, threading.Event)
            ctx.sleep(20)
            reasons.append(ctx.reason)

        jid = self.client.enqueue(group)
        with self.make(task_group=group, handler=handle, lease_seconds=0.9):
            self.assertTrue(started.wait(10))
            self.client.cancel(jid)
            self.assertEqual(self.client.await_result(jid, timeout=10).status, "Cancelled")
        self.assertIsInstance(reasons[0], JobCancelledError)

    def test_lease_expiry_aborts_a_thread_handler(self):
        group = unique("synclapse")
        app = unique("app")
        started = threading.Event()
        out = {}

        def handle(task, ctx):
            started.set()
            ctx.sleep(30)
            out["reason"] = ctx.reason

        jid = self.client.enqueue(group)
        w = SiloWorker(URL + "&application_name=" + app, task_group=group, handler=handle, lease_seconds=1.0,
                       heartbeat_interval=0.3, on_error=ErrorSink())
        self.addCleanup(w.stop, 0)
        w.start()
        self.assertTrue(started.wait(10))
        w._aw._pool.conninfo = "host=/nonexistent-silo-socket-dir user=postgres dbname=postgres"
        sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,))
        wait_for(lambda: "reason" in out, timeout=5, message="the handler aborted")
        self.assertIsInstance(out["reason"], LeaseLostError)
        wait_for(lambda: w.stats.lost == 1, message="counted lost")
        w.stop(0)
        # nothing reported by the worker: the job is still Running, or the
        # broker's sweep of the lapsed lease has already ended it
        status = job_status(jid)
        if status != "Running":
            self.assertEqual(status, "Failed")
            self.assertEqual(self.client.get_job_result(jid).error_code, "WORKER_CRASHED")

    def test_stop_is_bounded_with_a_thread_ignoring_its_signal(self):
        group = unique("syncignore")
        started = threading.Event()

        def handle(task, ctx):
            started.set()
            time.sleep(2)  # ignores ctx.signal
            return "late"

        jid = self.client.enqueue(group)
        w = self.make(task_group=group, handler=handle, stop_timeout=0.5)
        w.start()
        self.assertTrue(started.wait(10))
        t0 = time.monotonic()
        w.stop(grace_period=0.2)
        took = time.monotonic() - t0
        self.assertLess(took, 0.2 + 0.5 + 0.8, f"stop took {took:.2f} s")
        self.assertEqual(job_status(jid), "Running")
        time.sleep(2.2)
        self.assertEqual(value("SELECT count(*) FROM silo.attempts WHERE job_id = %s AND status = 'Succeeded'",
                               (jid,)), 0)

    def test_release_past_the_grace_period(self):
        group = unique("syncrelease")
        started = threading.Event()
        reasons = []

        def handle(task, ctx):
            started.set()
            ctx.sleep(30)
            reasons.append(ctx.reason)

        jid = self.client.enqueue(group)
        w = self.make(task_group=group, handler=handle)
        w.start()
        self.assertTrue(started.wait(10))
        w.stop(grace_period=0.1)
        self.assertIsInstance(reasons[0], WorkerStoppingError)
        self.assertEqual(job_status(jid), "Waiting")
        self.assertEqual(w.stats.released, 1)

    def run_script(self, sig):
        group = unique("sigterm")
        script = textwrap.dedent(f"""
            import sys, time
            sys.path.insert(0, {os.path.join(HERE, '..')!r})
            from silo_client import SiloWorker
            w = SiloWorker({URL!r}, task_group={group!r}, grace_period=5)
            @w.handler
            def handle(task, ctx):
                print("started", flush=True)
                ctx.sleep(1.0)
                return "finished"
            w.run()
            print("stopped", w.stats.succeeded, flush=True)
        """)
        jid = self.client.enqueue(group)
        p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
        try:
            self.assertEqual(p.stdout.readline().strip(), "started")
            os.kill(p.pid, sig)
            out, _ = p.communicate(timeout=20)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 0, out)
        self.assertIn("stopped 1", out)
        self.assertEqual(self.client.get_job_result(jid).result, "finished")

    def test_run_stops_gracefully_on_sigterm(self):
        self.run_script(signal.SIGTERM)

    def test_run_stops_gracefully_on_ctrl_c(self):
        self.run_script(signal.SIGINT)


if __name__ == "__main__":
    unittest.main()
