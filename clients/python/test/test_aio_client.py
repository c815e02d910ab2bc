"""AsyncSiloClient: the same calls on asyncio, and a cancelled wait."""

import asyncio
import time
import unittest

import psycopg

from helpers import URL, await_for, job_status, sql, unique, value
from silo_client import (
    AlreadyCancelledError, AsyncSiloClient, DuplicateJobError, InvalidArgumentError, JobSpec, NotExpeditableError,
    NotFoundError, NotRestartableError, NotTerminalError, RetryPolicy, WaitTimeoutError,
)


def lease_one(group, worker="w-test"):
    rows = sql("SELECT task_id::text AS task_id FROM silo.lease(%s, %s, 1, 30000)", (worker, group))
    return rows[0]["task_id"] if rows else None


def waiting_in_server(app=None):
    """Sessions asleep in silo.wait_result or silo.wait_any (of application_name app, if given)."""
    return value("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'Extension'"
                 " AND query LIKE 'CALL silo.wait_%%' AND application_name = coalesce(%s, application_name)",
                 (app,))


class AsyncClientTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.client = AsyncSiloClient(URL)

    async def asyncTearDown(self):
        await self.client.close()

    async def test_every_call(self):
        c = self.client
        group = unique("aio")
        jid = await c.enqueue(group, {"a": 1}, id=unique("j"), priority=3, metadata={"k": "v"},
                              retry_policy=RetryPolicy(retry_count=2))
        job = await c.get_job(jid)
        self.assertEqual((job.status, job.priority, job.payload, job.metadata), ("Waiting", 3, {"a": 1}, {"k": "v"}))
        self.assertIsNone(await c.get_job(unique("missing")))
        with self.assertRaises(DuplicateJobError):
            await c.enqueue(group, id=jid)
        self.assertEqual(await c.enqueue(group, id=jid, on_conflict="ignore"), jid)
        ids = await c.enqueue_many([JobSpec(group, i) for i in range(4)])
        self.assertEqual([(await c.get_job(i)).payload for i in ids], [0, 1, 2, 3])
        with self.assertRaises(InvalidArgumentError):
            await c.enqueue_many([JobSpec(group), {"task_group": group, "bogus": 1}])
        with self.assertRaises(NotExpeditableError):
            await c.expedite(jid)
        with self.assertRaises(NotRestartableError):
            await c.restart(jid)
        with self.assertRaises(NotTerminalError):
            await c.get_job_result(jid)
        with self.assertRaises(NotTerminalError):
            await c.delete_job(jid)
        await c.cancel(jid)
        with self.assertRaises(AlreadyCancelledError):
            await c.cancel(jid)
        self.assertEqual((await c.get_job_result(jid)).status, "Cancelled")
        await c.restart(jid)
        self.assertEqual(job_status(jid), "Waiting")
        await c.cancel(jid)
        self.assertTrue(await c.delete_job(jid))
        self.assertFalse(await c.delete_job(jid))
        with self.assertRaises(NotFoundError):
            await c.cancel(jid)
        # import_jobs (silo 1.8): a job with its history
        imp = unique("imp")
        res = await c.import_jobs([{"task_group": group, "id": imp, "attempts": [
            {"status": "Succeeded", "finished_at": "2026-01-01T10:00:00Z", "result": 7}]}])
        self.assertEqual([(r.id, r.success, r.status) for r in res], [(imp, True, "Succeeded")])
        self.assertEqual((await c.get_job_result(imp)).result, 7)

    async def test_await_result_wakes_on_completion(self):
        c = self.client
        group = unique("aiowait")
        jid = await c.enqueue(group)
        waiter = asyncio.ensure_future(c.await_result(jid, timeout=20))
        await await_for(lambda: waiting_in_server() >= 1, message="the waiter asleep")
        self.assertFalse(waiter.done())
        sql("SELECT silo.complete(%s::uuid, 'w-test', '{\"ok\": true}')", (lease_one(group),))
        r = await asyncio.wait_for(waiter, 5)
        self.assertEqual((r.status, r.result), ("Succeeded", {"ok": True}))
        with self.assertRaises(WaitTimeoutError):
            await c.await_result(await c.enqueue(group), timeout=0.2)

    async def test_cancelling_the_wait_stops_it_in_the_server(self):
        c = self.client
        jid = await c.enqueue(unique("aiocancel"))
        before = waiting_in_server()
        t0 = time.monotonic()
        with self.assertRaises(asyncio.TimeoutError):
            await asyncio.wait_for(c.await_result(jid, timeout=60), 0.5)
        self.assertLess(time.monotonic() - t0, 3)
        await await_for(lambda: waiting_in_server() <= before, message="the server wait ended")
        # the client still works
        self.assertEqual((await c.get_job(jid)).status, "Waiting")

    async def test_awaits_of_many_tasks_share_one_wait_any(self):
        app = unique("aiomany").replace("-", "_")
        c = AsyncSiloClient(URL, application_name=app)
        self.addAsyncCleanup(c.close)
        group = unique("aiomany")
        self.assertTrue(await c.has_wait_any())
        ids = await c.enqueue_many([JobSpec(group, i) for i in range(100)])
        waits = [asyncio.ensure_future(c.await_result(j, timeout=30)) for j in ids]
        await await_for(lambda: waiting_in_server(app) == 1, message="one session asleep")
        late = await c.enqueue(group, "late")
        late_wait = asyncio.ensure_future(c.await_result(late, timeout=30))
        await asyncio.sleep(0.2)
        await c.cancel(late)
        self.assertEqual((await asyncio.wait_for(late_wait, 3)).status, "Cancelled")
        self.assertFalse(any(w.done() for w in waits))
        for k, jid in enumerate(ids):
            await c.cancel(jid) if k % 2 else sql("SELECT silo.complete(%s::uuid, 'w-test', %s::jsonb)",
                                                   (lease_one(group), "0"))
        got = await asyncio.wait_for(asyncio.gather(*waits), 20)
        self.assertEqual(sorted({r.status for r in got}), ["Cancelled", "Succeeded"])
        self.assertEqual(sum(r.status == "Succeeded" for r in got), 50)
        await await_for(lambda: waiting_in_server(app) == 0, message="the wait_any session ended")

    async def test_with_connection_in_your_transaction(self):
        group = unique("aiotx")
        async with await psycopg.AsyncConnection.connect(URL) as conn:
            async with conn.transaction(force_rollback=True):
                jid = await self.client.with_connection(conn).enqueue(group)
        self.assertIsNone(await self.client.get_job(jid))


if __name__ == "__main__":
    unittest.main()
