"""SiloClient (sync): every call, its options and its typed errors."""

import datetime as dt
import threading
import time
import unittest

import psycopg

from helpers import URL, job_status, sql, unique, url_as, value, wait_for
from silo_client import (
    AlreadyCancelledError, AlreadyTerminalError, ConcurrencyLimit, DuplicateJobError, InvalidArgumentError, JobSpec,
    LeaseNotFoundError, LeaseOwnerMismatchError, NotExpeditableError, NotFoundError, NotOwnerError,
    NotReimportableError, NotRestartableError, NotTerminalError, PermissionDeniedError, RetryPolicy, SiloClient, SiloConnectionError,
    SiloError, TransactionStateError, WaitTimeoutError, to_silo_error,
)
from silo_client.errors import ConflictError, ShardUnavailableError


def lease_one(group, worker="w-test"):
    rows = sql("SELECT task_id::text AS task_id, tenant FROM silo.lease(%s, %s, 1, 30000)", (worker, group))
    return rows[0]["task_id"] if rows else None


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = SiloClient(URL)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    # -- enqueue -----------------------------------------------------------

    def test_enqueue_stores_every_option(self):
        c = self.client
        group, jid = unique("opts"), unique("job")
        start = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
        got = c.enqueue(group, {"to": "bob"}, tenant="acme", id=jid, priority=7, start_at=start,
                        retry_policy=RetryPolicy(retry_count=3, initial_interval_ms=2000),
                        limits=[ConcurrencyLimit("user:7", 2)], metadata={"customer": "globex"})
        self.assertEqual(got, jid)
        job = c.get_job(jid, tenant="acme")
        self.assertEqual((job.status, job.priority, job.task_group), ("Scheduled", 7, group))
        self.assertEqual(job.payload, {"to": "bob"})
        self.assertEqual(job.metadata, {"customer": "globex"})
        self.assertLess(abs((job.next_attempt_at - start).total_seconds()), 0.01)
        self.assertIsNone(c.get_job(jid))  # tenant "-" has no such job

    def test_enqueue_defaults_and_payloads(self):
        c = self.client
        group = unique("defaults")
        jid = c.enqueue(group)
        job = c.get_job(jid)
        self.assertEqual((job.tenant, job.payload, job.status, job.priority), ("-", {}, "Waiting", 50))
        self.assertEqual(len(jid), 36)  # a generated uuid
        for p in ["text", None, 3, [1, {"a": None}], True]:
            self.assertEqual(c.get_job(c.enqueue(group, p)).payload, p)

    def test_on_conflict(self):
        c = self.client
        jid = unique("dup")
        c.enqueue(unique("g"), id=jid)
        with self.assertRaises(DuplicateJobError) as cm:
            c.enqueue(unique("g"), id=jid)
        self.assertEqual(cm.exception.code, "23505")
        self.assertIsNotNone(cm.exception.hint)
        self.assertEqual(c.enqueue(unique("g"), id=jid, on_conflict="ignore"), jid)

    def test_bad_arguments(self):
        c = self.client
        with self.assertRaises(InvalidArgumentError) as cm:
            c.enqueue("g", priority=100)
        self.assertEqual(cm.exception.code, "22023")
        self.assertIn("priority", str(cm.exception))
        with self.assertRaisesRegex(InvalidArgumentError, "retryCount"):
            c.enqueue("g", retry_policy={"retryCount": -1})
        with self.assertRaisesRegex(InvalidArgumentError, r"limits\[0\]"):
            c.enqueue("g", limits=[{"type": "concurrency", "key": "k"}])
        with self.assertRaisesRegex(InvalidArgumentError, "reserved"):
            c.enqueue("g", tenant="*")
        with self.assertRaisesRegex(InvalidArgumentError, "timezone"):
            c.enqueue("g", start_at=dt.datetime(2030, 1, 1))
        with self.assertRaises(InvalidArgumentError):
            c.enqueue("g", {"x": float("nan")})
        # a ValueError too, as Python code expects of a bad argument
        with self.assertRaises(ValueError):
            c.enqueue("", {})

    def test_null_argument_is_22004(self):
        with self.assertRaises(InvalidArgumentError) as cm:
            self.client._query(("SELECT silo.enqueue(NULL::text)", [], None))
        self.assertEqual(cm.exception.code, "22004")

    def test_enqueue_many(self):
        c = self.client
        group = unique("many")
        ids = c.enqueue_many([
            JobSpec(group, {"n": 0}, id=unique("m")),
            {"task_group": group, "payload": {"n": 1}, "priority": 0},
            JobSpec(group, tenant="acme", start_at="2030-01-01T09:00:00Z", metadata={"k": "v"},
                    retry_policy=RetryPolicy(retry_count=1)),
        ])
        self.assertEqual(len(ids), 3)
        self.assertEqual(c.get_job(ids[0]).payload, {"n": 0})
        self.assertEqual(c.get_job(ids[1]).priority, 0)
        j = c.get_job(ids[2], tenant="acme")
        self.assertEqual((j.status, j.metadata), ("Scheduled", {"k": "v"}))
        self.assertEqual(c.enqueue_many([]), [])

    def test_enqueue_many_all_or_nothing(self):
        c = self.client
        group = unique("aon")
        with self.assertRaises(InvalidArgumentError) as cm:
            c.enqueue_many([JobSpec(group), JobSpec(group, priority=500)])
        self.assertIn("job 1 of the jobs array", cm.exception.where or "")
        self.assertEqual(value("SELECT count(*) FROM silo.jobs WHERE task_group = %s", (group,)), 0)

    # -- import_jobs (silo 1.8) ----------------------------------------------

    def test_import_jobs(self):
        c = self.client
        group = unique("imp")
        done, retry, fresh = unique("done"), unique("retry"), unique("fresh")
        res = c.import_jobs([
            {"task_group": group, "id": done, "payload": {"n": 1},
             "enqueued_at": dt.datetime(2026, 1, 1, 9, tzinfo=dt.timezone.utc),
             "attempts": [
                 {"status": "Failed", "started_at": "2026-01-01T10:00:00Z",
                  "finished_at": dt.datetime(2026, 1, 1, 10, 1, tzinfo=dt.timezone.utc),
                  "error_code": "E1", "error_data": {"why": "flaky"}},
                 {"status": "Succeeded", "finished_at": "2026-01-01T10:06:00Z", "result": {"sum": 42}}]},
            {"task_group": group, "id": retry, "retry_policy": {"retryCount": 2},
             "start_at": dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1),
             "attempts": [{"status": "Failed", "finished_at": "2026-01-01T10:01:00Z", "error_code": "E1"}]},
            {"task_group": group, "id": fresh},
        ])
        self.assertEqual([(r.id, r.success, r.status, r.error, r.sqlstate) for r in res], [
            (done, True, "Succeeded", None, None),
            (retry, True, "Retrying", None, None),
            (fresh, True, "Waiting", None, None),
        ])
        r = c.get_job_result(done)
        self.assertEqual((r.result, r.finished_at), ({"sum": 42}, dt.datetime(2026, 1, 1, 10, 6, tzinfo=dt.timezone.utc)))
        self.assertEqual(c.get_job(retry).current_attempt, 2)
        self.assertEqual(value("SELECT count(*) FROM silo.attempts WHERE job_id = %s", (done,)), 2)
        self.assertEqual(c.import_jobs([]), [])
        # a refused re-import is that job's result; the other job is imported
        other = unique("other")
        res = c.import_jobs([
            {"task_group": group, "id": done, "attempts": [
                {"status": "Failed", "finished_at": "2026-01-01T09:00:00Z", "error_code": "E"},
                {"status": "Succeeded", "finished_at": "2026-01-01T10:00:00Z"}]},
            {"task_group": group, "id": other},
        ])
        self.assertEqual([(x.success, x.sqlstate, x.error) for x in res],
                         [(False, "SL013", "job already succeeded"), (True, None, None)])
        # a running job refuses the whole call
        sql("SELECT count(*) FROM silo.lease('w-test', %s, 5, 30000)", (group,))
        third = unique("third")
        with self.assertRaises(NotReimportableError) as cm:
            c.import_jobs([{"task_group": group, "id": third}, {"task_group": group, "id": fresh}])
        self.assertEqual(cm.exception.code, "SL013")
        self.assertIsNone(c.get_job(third))
        with self.assertRaises(InvalidArgumentError):
            c.import_jobs([{"task_group": group, "id": third,
                            "attempts": [{"status": "Running", "finished_at": "2026-01-01T10:00:00Z"}]}])

    # -- job operations ----------------------------------------------------

    def test_cancel(self):
        c = self.client
        group = unique("cancel")
        jid = c.enqueue(group)
        c.cancel(jid)
        self.assertEqual(job_status(jid), "Cancelled")
        with self.assertRaises(AlreadyCancelledError) as cm:
            c.cancel(jid)
        self.assertEqual(cm.exception.code, "SL005")
        with self.assertRaises(NotFoundError):
            c.cancel(unique("missing"))
        done = c.enqueue(group)
        sql("SELECT silo.complete(%s::uuid, 'w-test')", (lease_one(group),))
        with self.assertRaises(AlreadyTerminalError):
            c.cancel(done)

    def test_restart_and_expedite(self):
        c = self.client
        group = unique("restart")
        jid = c.enqueue(group, start_at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))
        with self.assertRaises(NotRestartableError) as cm:
            c.restart(jid)
        self.assertEqual(cm.exception.code, "SL007")
        c.expedite(jid)
        self.assertEqual(job_status(jid), "Waiting")
        with self.assertRaises(NotExpeditableError):
            c.expedite(jid)
        c.cancel(jid)
        c.restart(jid)
        self.assertEqual(job_status(jid), "Waiting")
        with self.assertRaises(NotFoundError):
            c.restart(unique("missing"))

    def test_delete_job(self):
        c = self.client
        jid = c.enqueue(unique("del"))
        with self.assertRaises(NotTerminalError):
            c.delete_job(jid)
        c.cancel(jid)
        self.assertTrue(c.delete_job(jid))
        self.assertFalse(c.delete_job(jid))
        self.assertIsNone(c.get_job(jid))

    def test_get_job_result(self):
        c = self.client
        group = unique("res")
        ok = c.enqueue(group)
        with self.assertRaises(NotTerminalError) as cm:
            c.get_job_result(ok)
        self.assertEqual(cm.exception.code, "SL004")
        sql("SELECT silo.complete(%s::uuid, 'w-test', '{\"rows\": 3}')", (lease_one(group),))
        r = c.get_job_result(ok)
        self.assertEqual((r.status, r.result, r.error_code), ("Succeeded", {"rows": 3}, None))
        bad = c.enqueue(group)
        sql("SELECT silo.fail(%s::uuid, 'w-test', 'BOOM', '{\"x\": 1}')", (lease_one(group),))
        r = c.get_job_result(bad)
        self.assertEqual((r.status, r.error_code, r.error_data), ("Failed", "BOOM", {"x": 1}))
        with self.assertRaises(NotFoundError):
            c.get_job_result(unique("missing"))

    def test_with_connection_rolls_back_with_your_transaction(self):
        group = unique("tx")
        with psycopg.connect(URL) as conn:
            with conn.transaction(force_rollback=True):
                jid = self.client.with_connection(conn).enqueue(group)
                self.assertEqual(conn.execute("SELECT count(*) FROM silo.jobs WHERE id = %s", (jid,)).fetchone()[0], 1)
        self.assertIsNone(self.client.get_job(jid))
        with psycopg.connect(URL) as conn:
            with conn.transaction():
                jid = self.client.with_connection(conn).enqueue(group)
        self.assertEqual(job_status(jid), "Waiting")

    # -- await_result ------------------------------------------------------

    def test_has_wait_result(self):
        self.assertTrue(self.client.has_wait_result())

    def test_await_result_wakes_when_another_session_ends_the_job(self):
        c = self.client
        group = unique("wait")
        jid = c.enqueue(group)
        out = {}

        def waiter():
            t0 = time.monotonic()
            out["r"] = c.await_result(jid, timeout=20)
            out["t"] = time.monotonic()

        th = threading.Thread(target=waiter)
        th.start()
        # it sleeps in the server
        wait_for(lambda: value("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'Extension'"
                               " AND query LIKE 'CALL silo.wait_any%%'") >= 1, message="the waiter asleep")
        sql("SELECT silo.complete(%s::uuid, 'w-test', '42')", (lease_one(group),))
        ended = time.monotonic()
        th.join(10)
        self.assertFalse(th.is_alive())
        self.assertEqual((out["r"].status, out["r"].result), ("Succeeded", 42))
        self.assertLess(out["t"] - ended, 2.0)

    def test_await_result_ended_missing_timeout(self):
        c = self.client
        group = unique("wait2")
        jid = c.enqueue(group)
        c.cancel(jid)
        self.assertEqual(c.await_result(jid).status, "Cancelled")
        with self.assertRaises(NotFoundError):
            c.await_result(unique("missing"))
        pending = c.enqueue(group)
        t0 = time.monotonic()
        with self.assertRaises(WaitTimeoutError) as cm:
            c.await_result(pending, timeout=0.3)
        self.assertEqual(cm.exception.code, "SL011")
        self.assertIsInstance(cm.exception, TimeoutError)
        self.assertLess(time.monotonic() - t0, 3)
        self.assertEqual(job_status(pending), "Waiting")
        with self.assertRaises(ValueError):
            c.await_result(pending, timeout=0)

    def test_await_result_in_a_transaction_block(self):
        jid = self.client.enqueue(unique("tx"))
        with psycopg.connect(URL) as conn:
            conn.execute("SELECT 1")  # opens a transaction (not autocommit)
            with self.assertRaises(TransactionStateError) as cm:
                self.client.with_connection(conn).await_result(jid, timeout=1)
            self.assertEqual(cm.exception.code, "25001")

    def test_await_result_with_the_pool_full(self):
        # silo.wait_result (silo 1.7-1.8): each await holds a connection of the pool
        group = unique("full")
        with SiloClient(URL, max_connections=1) as c:
            c._has_wait_any.set(False)
            a, b = c.enqueue(group), c.enqueue(group)
            th = threading.Thread(target=lambda: self.assertRaises(WaitTimeoutError, c.await_result, a,
                                                                   timeout=2))
            th.start()
            wait_for(lambda: value("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'Extension'"
                                   " AND query LIKE 'CALL silo.wait_result%%'") >= 1, message="the waiter asleep")
            t0 = time.monotonic()
            with self.assertRaisesRegex(WaitTimeoutError, "no connection"):
                c.await_result(b, timeout=0.3)
            self.assertLess(time.monotonic() - t0, 1.5)
            th.join(10)

    def test_polls_without_wait_result(self):
        group = unique("poll")
        with SiloClient(URL) as c:
            c._has_wait_result.set(False)
            c._has_wait_any.set(False)
            jid = c.enqueue(group)
            threading.Timer(0.3, lambda: sql("SELECT silo.complete(%s::uuid, 'w-test')",
                                             (lease_one(group),))).start()
            r = c.await_result(jid, timeout=10, max_poll_interval=0.05)
            self.assertEqual(r.status, "Succeeded")
            with self.assertRaises(WaitTimeoutError):
                c.await_result(c.enqueue(group), timeout=0.2)

    def test_awaits_of_many_threads_share_one_wait_any(self):
        group = unique("many")
        app = unique("many").replace("-", "_")
        asleep = ("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'Extension'"
                  f" AND query LIKE 'CALL silo.wait_any%%' AND application_name = '{app}'")
        with SiloClient(URL, max_connections=2, application_name=app) as c:
            self.assertTrue(c.has_wait_any())
            ids = c.enqueue_many([JobSpec(group, i) for i in range(100)])
            out = {}

            def waiter(jid):
                out[jid] = c.await_result(jid, timeout=30)

            threads = [threading.Thread(target=waiter, args=(j,)) for j in ids]
            for th in threads:
                th.start()
            wait_for(lambda: value(asleep) == 1, message="one session asleep in silo.wait_any")
            # one session of this client calls silo.wait_any, and none silo.wait_result
            self.assertEqual(value("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CALL silo.wait_%%'"
                                   " AND application_name = %s", (app,)), 1)
            # a late joiner is heard at once, while the others sleep on
            late = c.enqueue(group, "late")
            th_late = threading.Thread(target=waiter, args=(late,))
            th_late.start()
            time.sleep(0.2)
            t0 = time.monotonic()
            c.cancel(late)
            th_late.join(5)
            self.assertFalse(th_late.is_alive())
            self.assertEqual(out[late].status, "Cancelled")
            self.assertLess(time.monotonic() - t0, 3)
            self.assertEqual(len(out), 1)
            tasks = {r["job_id"]: r["task_id"] for r in sql(
                "SELECT job_id, task_id::text AS task_id FROM silo.lease('w-test', %s, 100, 30000)", (group,))}
            for k, jid in enumerate(ids):
                if k % 2:
                    sql("SELECT silo.complete(%s::uuid, 'w-test', %s::jsonb)", (tasks[jid], str(k)))
                else:
                    sql("SELECT silo.fail(%s::uuid, 'w-test', %s)", (tasks[jid], f"E{k}"))
            for th in threads:
                th.join(20)
            wrong = [(k, out.get(j)) for k, j in enumerate(ids)
                     if out.get(j) is None or (out[j].status, out[j].result, out[j].error_code)
                     != (("Succeeded", k, None) if k % 2 else ("Failed", None, f"E{k}"))]
            self.assertEqual(wrong, [])
            # nothing left to wait for: the session ends
            wait_for(lambda: value(asleep) == 0, message="the wait_any session ended")

    # -- errors ------------------------------------------------------------

    def test_tenant_bound_role_is_refused_elsewhere(self):
        role = unique("app").replace("-", "_")
        sql(f'CREATE ROLE "{role}" LOGIN IN ROLE silo_producer')
        sql("SELECT silo.grant_tenant(%s, 'acme')", (role,))
        try:
            with SiloClient(url_as(role)) as c:
                c.enqueue(unique("g"), tenant="acme")
                with self.assertRaises(PermissionDeniedError) as cm:
                    c.cancel("whatever")
                self.assertEqual(cm.exception.code, "42501")
                self.assertIn("may not act in tenant", str(cm.exception))
        finally:
            sql("SELECT silo.revoke_tenant(%s, 'acme')", (role,))

    def test_lease_errors_map_to_their_classes(self):
        group = unique("lease")
        self.client.enqueue(group)
        tid = lease_one(group, "w-a")
        try:
            sql("SELECT silo.complete(%s::uuid, 'w-b')", (tid,))
        except psycopg.Error as e:
            orig, err = e, to_silo_error(e)
        self.assertIsInstance(err, LeaseOwnerMismatchError)
        self.assertIs(err.__cause__, orig)
        sql("SELECT silo.complete(%s::uuid, 'w-a')", (tid,))
        try:
            sql("SELECT silo.complete(%s::uuid, 'w-a')", (tid,))
        except psycopg.Error as e:
            err = to_silo_error(e)
        self.assertIsInstance(err, LeaseNotFoundError)
        self.assertEqual(err.code, "SL001")
        self.assertIn("has no lease", err.detail)

    def test_error_classes_offline(self):
        e = NotOwnerError('shard 3 of tenant "a""b" is not owned by this node', code="SL020",
                          detail='{"shard": 3, "owner_node_id": "n2", "owner_conninfo": "host=h2"}')
        self.assertEqual((e.shard, e.owner_node_id, e.owner_conninfo, e.tenant), (3, "n2", "host=h2", 'a"b'))
        self.assertFalse(e.retryable)
        self.assertTrue(NotOwnerError('shard 1 of tenant "x" is not owned', detail="x").retryable)
        self.assertTrue(ShardUnavailableError("x").retryable)
        self.assertTrue(ConflictError("x").retryable)
        self.assertFalse(NotFoundError("x").retryable)
        self.assertIsInstance(NotFoundError("x"), SiloError)

    def test_refused_connection(self):
        with SiloClient("host=/nonexistent-silo-dir user=postgres dbname=postgres") as c:
            with self.assertRaises(SiloConnectionError) as cm:
                c.enqueue("g")
        self.assertTrue(cm.exception.retryable)
        self.assertIsInstance(cm.exception, ConnectionError)


if __name__ == "__main__":
    unittest.main()
