"""AsyncSiloWorker end to end against the throwaway cluster."""

import asyncio
import datetime
import time
import unittest
import uuid

from helpers import URL, ErrorSink, all_status, await_for, sql, unique, url_as, value
from silo_client import (
    AsyncSiloClient, AsyncSiloWorker, ConcurrencyLimit, FloatingConcurrencyLimit, JobCancelledError, JobSpec, LeaseLostError,
    LeaseOwnerMismatchError,
    RetryPolicy, SiloConnectionError, TaskFailure, WorkerStoppingError,
)
from silo_client import worker as worker_module


class WorkerTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.client = AsyncSiloClient(URL)
        self.workers = []

    async def asyncTearDown(self):
        for w in self.workers:
            await w.stop(grace_period=0)
        await self.client.close()

    async def start(self, **opts):
        sink = ErrorSink()
        opts.setdefault("on_error", sink)
        conninfo = opts.pop("conninfo", URL)
        w = AsyncSiloWorker(conninfo, **opts)
        w.errors = sink.errors
        self.workers.append(w)
        await w.start()
        return w

    async def wait_status(self, ids, wanted, timeout=15.0):
        await await_for(lambda: all_status(ids, wanted), timeout=timeout, message=f"{len(ids)} jobs {wanted}")

    async def test_successes_batched(self):
        group = unique("ok")
        seen = []

        async def handler(task, ctx):
            seen.append(task.job_id)
            return {"n": task.payload, "attempt": task.attempt}

        ids = await self.client.enqueue_many([JobSpec(group, i) for i in range(50)])
        w = await self.start(task_group=group, handler=handler, concurrency=8)
        await self.wait_status(ids, {"Succeeded"})
        r = await self.client.get_job_result(ids[7])
        self.assertEqual(r.result, {"n": 7, "attempt": 1})
        await await_for(lambda: w.stats.succeeded == 50, message="50 successes counted")
        self.assertEqual(sorted(seen), sorted(ids))
        self.assertEqual(w.stats.lost, 0)
        self.assertEqual(w.errors, [])

    async def test_task_fields_as_leased(self):
        # the lease comes as one JSON text (worker.SQL_LEASE): every field keeps its type
        group = unique("fields")
        payload = {"s": "zoë ✓", "n": 12345678901234567890, "f": 1.5, "l": [None, True], "o": {}}
        seen = []

        async def handler(task, ctx):
            # the lease's end to the microsecond, as the server holds it while the task runs
            seen.append((task, value("SELECT (extract(epoch FROM expires_at) * 1000000)::bigint"
                                     " FROM silo.task_lease WHERE task_id = %s", (task.id,))))

        jid = await self.client.enqueue(group, payload, priority=7, metadata={"k": "v"},
                                        retry_policy=RetryPolicy(retry_count=1, initial_interval_ms=0))
        before = time.time()
        await self.start(task_group=group, handler=handler, lease_seconds=90)
        await self.wait_status([jid], {"Succeeded"})
        after = time.time()
        t, server_us = seen[0]
        self.assertEqual((t.tenant, t.job_id, t.attempt, t.relative_attempt, t.is_last_attempt, t.priority,
                          t.task_group, t.payload, t.metadata, t.kind),
                         ("-", jid, 1, 1, False, 7, group, payload, {"k": "v"}, "run"))
        self.assertEqual(str(uuid.UUID(t.id)), t.id)
        self.assertEqual([type(v) for v in (t.id, t.attempt, t.relative_attempt, t.priority, t.is_last_attempt,
                                            t.payload["n"], t.payload["f"])], [str, int, int, int, bool, int, float])
        self.assertEqual((t.limits, t.retry_policy),
                         ([], {"retryCount": 1, "initialIntervalMs": 0, "maxIntervalMs": 3600000, "backoffFactor": 2,
                               "randomizeInterval": False}))
        self.assertEqual(t.lease_expires_at.utcoffset(), datetime.timedelta(0))
        self.assertIsNotNone(t.lease_expires_at.tzinfo)
        expires = t.lease_expires_at.timestamp()
        self.assertTrue(before + 89 <= expires <= after + 91, f"lease ends {expires - before:.3f} s after the start")
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        self.assertEqual(t.lease_expires_at, epoch + datetime.timedelta(microseconds=server_us))

    async def test_lease_too_large_for_one_text_reads_rows(self):
        # a lease over 1 GB of JSON fails with 54000 (as repeat's length check does here): the worker
        # reports it once and leases row by row from then on
        group = unique("rows")
        seen = {}

        async def handler(task, ctx):
            seen[task.job_id] = (task.payload, task.lease_expires_at.tzinfo is not None)

        ids = await self.client.enqueue_many([JobSpec(group, {"i": i}) for i in range(5)])
        sink = ErrorSink()
        w = AsyncSiloWorker(URL, task_group=group, handler=handler, on_error=sink)
        w._lease_sql = ("SELECT repeat('x', 1073741824) AS tasks"
                        " FROM (SELECT %s::text, %s::text, %s::int, %s::int, %s::text[]) AS p")
        self.workers.append(w)
        await w.start()
        await self.wait_status(ids, {"Succeeded"})
        self.assertIs(w._lease_sql, worker_module.SQL_LEASE_ROWS)
        self.assertEqual([(e.code, c.phase) for e, c in sink.errors], [("54000", "lease")])
        self.assertEqual(seen, {jid: ({"i": i}, True) for i, jid in enumerate(ids)})

    async def test_task_carries_limits_and_retry_policy(self):
        group = unique("shape")
        key = unique("key")
        limits = [{"type": "concurrency", "key": key, "maxConcurrency": 2}]
        seen = {}

        async def handler(task, ctx):
            seen[task.job_id] = (task.limits, task.retry_policy)

        both = await self.client.enqueue(group, limits=[ConcurrencyLimit(key, 2)],
                                         retry_policy=RetryPolicy(retry_count=2, initial_interval_ms=50))
        bare = await self.client.enqueue(group)
        await self.start(task_group=group, handler=handler)
        await self.wait_status([both, bare], {"Succeeded"})
        policy = {"retryCount": 2, "initialIntervalMs": 50, "maxIntervalMs": 3600000, "backoffFactor": 2,
                  "randomizeInterval": False}
        self.assertEqual(seen[both], (limits, policy))
        self.assertEqual(seen[bare], ([], None))
        # get_job (silo.jobs) shows the same; the values enqueue a job with the same policy and limits
        job = await self.client.get_job(both)
        self.assertEqual((job.limits, job.retry_policy), (limits, policy))
        copy = await self.client.enqueue(unique("copy"), limits=job.limits, retry_policy=job.retry_policy)
        c = await self.client.get_job(copy)
        self.assertEqual((c.limits, c.retry_policy, c.extra), (limits, policy, {}))

    async def test_concurrency_bounds_running_handlers(self):
        group = unique("conc")
        running = 0
        peak = 0

        async def handler(task, ctx):
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.05)
            running -= 1

        ids = await self.client.enqueue_many([JobSpec(group) for _ in range(20)])
        await self.start(task_group=group, handler=handler, concurrency=3)
        await self.wait_status(ids, {"Succeeded"})
        self.assertEqual(peak, 3)

    async def test_failures_and_retries(self):
        group = unique("fail")
        attempts = {}

        async def handler(task, ctx):
            attempts[task.job_id] = task.attempt
            if task.payload == "task-failure":
                raise TaskFailure("BAD_ADDRESS", {"to": "nobody"})
            if task.payload == "retry" and task.attempt < 3:
                raise KeyError("flaky")
            if task.payload == "retry":
                return "third time"
            raise RuntimeError("plain")

        tf = await self.client.enqueue(group, "task-failure")
        plain = await self.client.enqueue(group, "plain")
        retry = await self.client.enqueue(group, "retry", retry_policy=RetryPolicy(retry_count=3, initial_interval_ms=0))
        w = await self.start(task_group=group, handler=handler)
        await self.wait_status([tf, plain, retry], {"Succeeded", "Failed"})
        r = await self.client.get_job_result(tf)
        self.assertEqual((r.status, r.error_code, r.error_data), ("Failed", "BAD_ADDRESS", {"to": "nobody"}))
        r = await self.client.get_job_result(plain)
        self.assertEqual((r.error_code, r.error_data), ("RuntimeError", {"name": "RuntimeError", "message": "plain"}))
        r = await self.client.get_job_result(retry)
        self.assertEqual((r.status, r.result, attempts[retry]), ("Succeeded", "third time", 3))
        codes = [x["error_code"] for x in sql("SELECT error_code FROM silo.attempts WHERE job_id = %s ORDER BY attempt",
                                               (retry,))]
        self.assertEqual(codes, ["KeyError", "KeyError", None])
        await await_for(lambda: w.stats.failed == 4, message="4 failures counted")

    async def test_cancel_fires_the_signal_via_heartbeat(self):
        group = unique("cancel")
        started = asyncio.Event()
        reasons = []

        async def handler(task, ctx):
            started.set()
            await ctx.wait(20)
            reasons.append(ctx.reason)
            return "ignored"

        jid = await self.client.enqueue(group)
        w = await self.start(task_group=group, handler=handler, lease_seconds=0.9)
        await asyncio.wait_for(started.wait(), 10)
        t0 = time.monotonic()
        await self.client.cancel(jid)
        r = await self.client.await_result(jid, timeout=10)
        self.assertEqual(r.status, "Cancelled")
        self.assertLess(time.monotonic() - t0, 2)
        self.assertIsInstance(reasons[0], JobCancelledError)
        self.assertEqual(value("SELECT status FROM silo.attempts WHERE job_id = %s", (jid,)), "Cancelled")
        await await_for(lambda: w.stats.cancelled == 1, message="counted cancelled")

    async def test_heartbeats_keep_a_long_job_alive(self):
        group = unique("long")

        async def handler(task, ctx):
            await asyncio.sleep(3.5)
            return "done"

        jid = await self.client.enqueue(group, retry_policy=RetryPolicy(retry_count=3, initial_interval_ms=0))
        w = await self.start(task_group=group, handler=handler, lease_seconds=1.5)
        r = await self.client.await_result(jid, timeout=15)
        self.assertEqual((r.status, r.result), ("Succeeded", "done"))
        self.assertEqual(value("SELECT count(*) FROM silo.attempts WHERE job_id = %s", (jid,)), 1)
        self.assertEqual(w.stats.lost, 0)

    async def test_tenants_filter(self):
        group = unique("tenants")
        a = await self.client.enqueue(group, tenant="acme")
        b = await self.client.enqueue(group, tenant="initech")
        await self.start(task_group=group, handler=lambda t, c: t.tenant, tenants=["acme"])
        self.assertEqual((await self.client.await_result(a, tenant="acme", timeout=10)).result, "acme")
        self.assertEqual(value("SELECT status FROM silo.jobs WHERE tenant = 'initech' AND id = %s", (b,)), "Waiting")

    async def test_lease_expiry_by_our_clock_aborts_the_handler(self):
        group = unique("lapse")
        app = unique("app")
        started = asyncio.Event()
        out = {}

        async def handler(task, ctx):
            started.set()
            await ctx.wait(30)
            out["reason"] = ctx.reason
            out["at"] = time.monotonic()
            out["left"] = value("SELECT (extract(epoch FROM expires_at - silo.now()) * 1000)::int FROM silo.leases"
                                " WHERE task_id = %s", (task.id,))
            return "too late"

        jid = await self.client.enqueue(group)
        w = await self.start(task_group=group, handler=handler, lease_seconds=1.0, heartbeat_interval=0.3,
                             reconnect_delay=(0.05, 0.2), conninfo=url_as("postgres", app))
        await asyncio.wait_for(started.wait(), 10)
        # every connection made from now on fails, and the ones there are now are cut
        w._pool.conninfo = "host=/nonexistent-silo-socket-dir user=postgres dbname=postgres"
        cut = time.monotonic()
        sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,))
        await await_for(lambda: "reason" in out, timeout=5, message="the handler aborted")
        self.assertIsInstance(out["reason"], LeaseLostError)
        self.assertTrue(out["left"] is None or out["left"] <= 300, f"server still held the lease {out['left']} ms")
        self.assertLess(out["at"] - cut, 2.0)
        await await_for(lambda: w.stats.lost == 1, message="counted lost")
        self.assertEqual(w.stats.succeeded, 0)
        self.assertTrue(any(c.phase == "heartbeat" and c.job_id == jid for _, c in w.errors))
        await w.stop(grace_period=0)
        self.assertNotEqual(value("SELECT result FROM silo.attempts WHERE job_id = %s AND attempt = 1", (jid,)),
                            "too late")

    async def test_a_lease_taken_over_fires_the_signal_and_goes_to_on_error(self):
        group = unique("stolen")
        started = asyncio.Event()
        out = {}

        async def handler(task, ctx):
            out["task"] = task.id
            started.set()
            await ctx.wait(30)
            out["reason"] = ctx.reason

        jid = await self.client.enqueue(group)
        w = await self.start(task_group=group, handler=handler, lease_seconds=0.9)
        await asyncio.wait_for(started.wait(), 10)
        # another worker id holds the lease now: the next heartbeat gets SL002
        sql("UPDATE silo.task_lease SET worker_id = 'someone-else' WHERE task_id = %s", (out["task"],))
        await await_for(lambda: "reason" in out, timeout=5, message="the handler aborted")
        self.assertIsInstance(out["reason"], LeaseLostError)
        self.assertIsInstance(out["reason"].__cause__, LeaseOwnerMismatchError)
        self.assertTrue(any(isinstance(e, LeaseOwnerMismatchError) and c.phase == "heartbeat" and c.job_id == jid
                            for e, c in w.errors))
        await await_for(lambda: w.stats.lost == 1, message="counted lost")
        self.assertEqual(value("SELECT worker_id FROM silo.task_lease WHERE task_id = %s", (out["task"],)),
                         "someone-else")

    async def test_finishing_within_the_grace_period_completes(self):
        group = unique("grace")
        started = asyncio.Event()

        async def handler(task, ctx):
            started.set()
            await asyncio.sleep(0.3)
            return "finished"

        jid = await self.client.enqueue(group)
        w = await self.start(task_group=group, handler=handler)
        await asyncio.wait_for(started.wait(), 10)
        await w.stop(grace_period=5)
        self.assertEqual((await self.client.get_job_result(jid)).result, "finished")

    async def test_past_the_grace_period_the_task_is_released(self):
        group = unique("release")
        started = asyncio.Event()
        reasons = []

        async def handler(task, ctx):
            started.set()
            await ctx.wait(30)
            reasons.append(ctx.reason)
            raise RuntimeError("interrupted")

        jid = await self.client.enqueue(group, retry_policy=RetryPolicy(retry_count=0))
        w = await self.start(task_group=group, handler=handler)
        await asyncio.wait_for(started.wait(), 10)
        t0 = time.monotonic()
        await w.stop(grace_period=0.2)
        self.assertLess(time.monotonic() - t0, 3)
        self.assertIsInstance(reasons[0], WorkerStoppingError)
        row = sql("SELECT status, current_attempt FROM silo.jobs WHERE id = %s", (jid,))[0]
        self.assertEqual((row["status"], row["current_attempt"]), ("Waiting", 1))  # no attempt used
        self.assertEqual(w.stats.released, 1)

    async def test_a_handler_ignoring_its_signal_does_not_hold_stop(self):
        group = unique("ignore")
        started = asyncio.Event()

        async def handler(task, ctx):
            started.set()
            await asyncio.sleep(3)  # ignores ctx.signal
            return "late"

        jid = await self.client.enqueue(group)
        w = await self.start(task_group=group, handler=handler, stop_timeout=0.5)
        await asyncio.wait_for(started.wait(), 10)
        t0 = time.monotonic()
        await w.stop(grace_period=0.2)
        took = time.monotonic() - t0
        self.assertLess(took, 0.2 + 0.5 + 0.5, f"stop took {took:.2f} s")
        # not released (another worker could run it meanwhile): still Running, the lease runs out
        self.assertEqual(value("SELECT status FROM silo.jobs WHERE id = %s", (jid,)), "Running")
        self.assertTrue(any(c.phase == "stop" for _, c in w.errors))
        await asyncio.sleep(3.2)  # the handler returns now: nothing may be reported
        self.assertEqual(value("SELECT count(*) FROM silo.attempts WHERE job_id = %s AND status = 'Succeeded'",
                               (jid,)), 0)

    async def test_refresh_handler(self):
        group = unique("refresh")
        key = unique("key")
        limit = FloatingConcurrencyLimit(key, default_max_concurrency=1, refresh_interval_ms=200,
                                         metadata={"api": "x"})
        seen = []

        def refresh(task, ctx):  # a plain function: runs in a thread
            seen.append((task.queue_key, task.metadata))
            return 5

        running = 0
        peak = 0

        async def handler(task, ctx):
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.4)
            running -= 1

        ids = await self.client.enqueue_many([JobSpec(group, limits=[limit]) for _ in range(6)])
        w = await self.start(task_group=group, handler=handler, refresh_handler=refresh, poll_interval=0.1)
        await self.wait_status(ids, {"Succeeded"}, timeout=30)
        self.assertTrue(seen)
        self.assertEqual(seen[0], (key, {"api": "x"}))
        self.assertGreaterEqual(w.stats.refreshed, 1)
        self.assertEqual(value("SELECT current_max FROM silo.floating_limits WHERE key = %s", (key,)), 5)
        self.assertGreater(peak, 1)

    async def test_reconnect_after_pg_terminate_backend(self):
        group = unique("reconnect")
        app = unique("app")
        first = await self.client.enqueue(group)
        started = asyncio.Event()
        finish = asyncio.Event()
        runs = {}

        async def handler(task, ctx):
            runs[task.job_id] = runs.get(task.job_id, 0) + 1
            if task.job_id == first:
                started.set()
                await finish.wait()

        w = await self.start(task_group=group, handler=handler, poll_interval=60, reconnect_delay=(0.05, 0.5),
                             conninfo=url_as("postgres", app))
        await asyncio.wait_for(started.wait(), 10)
        before = sql("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,))
        self.assertGreaterEqual(len(before), 2)
        killed = sql("SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE application_name = %s", (app,))
        self.assertEqual(sum(1 for r in killed if r["ok"]), len(before))
        finish.set()
        await self.wait_status([first], {"Succeeded"})
        await await_for(lambda: sql("SELECT 1 FROM pg_stat_activity WHERE application_name = %s"
                                    " AND query = 'LISTEN silo_task_ready'", (app,)), message="LISTEN again")
        t0 = time.monotonic()
        more = await self.client.enqueue_many([JobSpec(group) for _ in range(5)])
        await self.wait_status(more, {"Succeeded"}, timeout=20)
        self.assertLess(time.monotonic() - t0, 5)  # a wake-up, not the 60 s poll
        await w.stop()
        self.assertEqual([runs[i] for i in [first, *more]], [1] * 6)
        self.assertGreaterEqual(w.stats.reconnects, 1)
        self.assertGreaterEqual(len(w.errors), 1)
        self.assertEqual(w.stats.lost, 0)

    async def test_no_job_runs_twice_with_two_workers(self):
        group = unique("once")
        ids = await self.client.enqueue_many([JobSpec(group, n) for n in range(300)])
        runs = {}

        async def handler(task, ctx):
            runs[task.job_id] = runs.get(task.job_id, 0) + 1
            await asyncio.sleep(0)

        await self.start(task_group=group, handler=handler, concurrency=16, batch_size=8)
        await self.start(task_group=group, handler=handler, concurrency=16, batch_size=8)
        await self.wait_status(ids, {"Succeeded"}, timeout=30)
        self.assertEqual(len(runs), 300)
        self.assertEqual(set(runs.values()), {1})

    async def test_listen_wakes_well_under_the_poll_interval(self):
        group = unique("listen")
        await self.start(task_group=group, handler=lambda t, c: None, poll_interval=60)
        await asyncio.sleep(0.2)  # the first (empty) lease is done
        t0 = time.monotonic()
        jid = await self.client.enqueue(group)
        await self.client.await_result(jid, timeout=10)
        self.assertLess(time.monotonic() - t0, 2)

    async def test_listen_false_polls(self):
        group = unique("poll")
        await self.start(task_group=group, handler=lambda t, c: "polled", listen=False, poll_interval=0.1)
        jid = await self.client.enqueue(group)
        self.assertEqual((await self.client.await_result(jid, timeout=10)).result, "polled")

    async def test_decorator_and_context_manager(self):
        group = unique("deco")
        w = AsyncSiloWorker(URL, task_group=group)

        @w.handler
        async def handle(task, ctx):
            return task.payload * 2

        async with w:
            self.assertTrue(w.is_running)
            jid = await self.client.enqueue(group, 21)
            self.assertEqual((await self.client.await_result(jid, timeout=10)).result, 42)
        self.assertFalse(w.is_running)

    async def test_options_are_checked(self):
        with self.assertRaisesRegex(ValueError, "below half"):
            AsyncSiloWorker(URL, task_group="x", lease_seconds=1, heartbeat_interval=0.5)
        AsyncSiloWorker(URL, task_group="x", lease_seconds=1, heartbeat_interval=0.499)
        with self.assertRaises(ValueError):
            AsyncSiloWorker(URL, task_group="")
        with self.assertRaisesRegex(ValueError, "handler"):
            await AsyncSiloWorker(URL, task_group="x").start()

    async def test_first_connection_failing(self):
        w = AsyncSiloWorker("host=/nonexistent-silo-dir user=postgres dbname=postgres", task_group="x",
                            handler=lambda t, c: None)
        with self.assertRaises(SiloConnectionError):
            await w.start()
        await w.stop()


if __name__ == "__main__":
    unittest.main()
