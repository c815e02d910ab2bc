"""Shards really moving under the cluster client and worker, on the real
two-node cluster with etcd (clients/test-cluster.sh's cluster2_start, run by
test/run.sh after cluster2_e2e).  The same scenario as the Node suite's
cluster2-moves.e2e.mjs: n1 owns all 8 shards and n2 takes no moves; while a
ClusterClient given n1 enqueues jobs of 48 tenants (every shard) from a
thread and a SiloClusterWorker given n1 runs them, n2 joins the placement
(silo.max_moves_in = 1 on both nodes: the shards placement gives n2 move
there with their rows) and then leaves it gracefully (silo.draining = on on
n2: they move back).  A job of each moving shard is held running across its
move, so that its heartbeats and its completion must follow NOT_OWNER.  In
the end every job is on the one node owning its shard, Succeeded with
exactly one attempt, and the handler ran it exactly once.  The settings are
reset at the end."""

import os
import threading
import time
import unittest

import psycopg

import helpers  # noqa: F401 (puts the package on sys.path)
from silo_client import ClusterClient, SiloClusterWorker

N1 = os.environ.get("SILO_TEST_N1_URL")
N2 = os.environ.get("SILO_TEST_N2_URL")

PLACED_SQL = """SELECT s FROM generate_series(0, 7) s WHERE (SELECT m FROM unnest(ARRAY['n1', 'n2']) m
    ORDER BY (hashtextextended(m || ':' || s, 0)::numeric + CASE WHEN hashtextextended(m || ':' || s, 0) < 0
    THEN 18446744073709551616 ELSE 0 END) DESC, m LIMIT 1) = 'n2' ORDER BY s"""


def query(url, sql, args=()):
    with psycopg.connect(url, autocommit=True) as c:
        return c.execute(sql, args).fetchall()


def setting(url, **values):
    """ALTER SYSTEM SET (RESET for None) and reload, on the node of url."""
    with psycopg.connect(url, autocommit=True) as c:
        for name, value in values.items():
            name = "silo." + name
            if value is None:
                c.execute(f"ALTER SYSTEM RESET {name}")
            else:
                c.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        c.execute("SELECT pg_reload_conf()")


def serving(url):
    return query(url, "SELECT serving_shards FROM silo.node_info")[0][0] or []


def until(what, seconds, check):
    deadline = time.monotonic() + seconds
    while True:
        last = check()
        if last is True:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {seconds} s for {what} (last: {last!r})")
        time.sleep(0.1)


@unittest.skipUnless(N1 and N2, "SILO_TEST_N1_URL and SILO_TEST_N2_URL are not set")
class MovesTest(unittest.TestCase):
    def tearDown(self):
        setting(N2, draining=None, max_moves_in=None)
        setting(N1, max_moves_in=None)

    def test_jobs_run_exactly_once_while_shards_move(self):
        group = f"moves-py-{os.getpid()}"
        tenants = [f"mvp-{i}" for i in range(48)]
        shard_of = {t: query(N1, "SELECT silo.shard_for_tenant(%s)", (t,))[0][0] for t in tenants}
        self.assertEqual(len(set(shard_of.values())), 8, "the tenants cover every shard")
        self.assertEqual(len(serving(N1)), 8, "n1 serves every shard at the start")
        placed = [r[0] for r in query(N1, PLACED_SQL)]
        self.assertTrue(0 < len(placed) < 8, f"placement splits the shards (n2 gets {placed})")
        movers = [next(t for t in tenants if shard_of[t] == s) for s in placed]

        lock = threading.Lock()
        runs, holds, errors, jobs = {}, {}, [], []
        released = {"phase": None}

        def handler(task, ctx):
            key = f"{task.tenant}/{task.job_id}"
            with lock:
                runs[key] = runs.get(key, 0) + 1
            hold = task.payload.get("hold")
            if hold:
                with lock:
                    holds[key] = hold
                while released["phase"] != hold:
                    time.sleep(0.05)
            else:
                time.sleep(0.1 + (task.payload["i"] % 5) * 0.06)
            return {"tenant": task.tenant}

        w = SiloClusterWorker(N1, task_group=group, handler=handler, concurrency=12, poll_interval=0.05,
                              lease_seconds=5, heartbeat_interval=0.4, map_refresh=0.3,
                              on_error=lambda e, ctx: errors.append(f"{ctx.phase}: {e}"))
        cc = ClusterClient(N1, retry_delay=0.05, retry_timeout=30)
        producing = threading.Event()
        producing.set()
        produced_error = []

        def enqueue(tenant, payload):
            jid = cc.enqueue(group, payload, tenant=tenant)
            with lock:
                jobs.append((tenant, jid))

        def produce():
            i = 0
            try:
                while producing.is_set():
                    enqueue(tenants[i % len(tenants)], {"i": i})
                    i += 1
                    time.sleep(0.04)
            except BaseException as e:  # reported by the test
                produced_error.append(e)

        w.start()
        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        try:
            for t in movers:
                enqueue(t, {"hold": "in"})
            until("the held jobs to run", 30, lambda: len(holds) == len(movers) or len(holds))

            setting(N1, max_moves_in=1)
            setting(N2, max_moves_in=1)

            def moved_in():
                own = dict(query(N1, "SELECT shard_id, owner_node_id FROM silo.cluster_info"))
                s2 = serving(N2)
                return (all(own[x] == "n2" for x in placed) and len(s2) == len(placed)) or (own, s2)
            until("n2 to serve the shards placement gives it", 90, moved_in)
            released["phase"] = "in"
            until("the held jobs of the move in to finish", 30, lambda: query(
                N2, "SELECT count(*) FROM silo.jobs WHERE task_group = %s AND payload->>'hold' = 'in'"
                " AND status = 'Succeeded'", (group,))[0][0] == len(movers) or "not yet")
            self.assertIn("n2", w.member_nodes)

            with lock:
                holds.clear()
            for t in movers:
                enqueue(t, {"hold": "out"})
            until("the held jobs to run on n2", 30, lambda: len(holds) == len(movers) or len(holds))
            setting(N2, draining="on")
            until("n1 to serve every shard again", 90,
                  lambda: (len(serving(N1)) == 8 and serving(N2) == []) or (serving(N1), serving(N2)))
            released["phase"] = "out"
            producing.clear()
            producer.join(60)
            self.assertEqual(produced_error, [])

            ids = {f"{t}/{j}" for t, j in jobs}
            self.assertEqual(len(ids), len(jobs), "every enqueue gave a new job")
            until("every job to succeed", 60, lambda: query(
                N1, "SELECT count(*) FROM silo.jobs WHERE task_group = %s AND status = 'Succeeded'",
                (group,))[0][0] == len(jobs) or "not yet")
        finally:
            producing.clear()
            released["phase"] = "out"
            producer.join(60)
            w.stop()
            cc.close()

        rows = query(N1, """SELECT j.tenant || '/' || j.id, j.status,
              (SELECT count(*) FROM silo.attempts a WHERE a.tenant = j.tenant AND a.job_id = j.id),
              (SELECT count(*) FROM silo.attempts a WHERE a.tenant = j.tenant AND a.job_id = j.id
                AND a.status = 'Succeeded')
            FROM silo.jobs j WHERE j.task_group = %s""", (group,))
        self.assertEqual(query(N2, "SELECT count(*) FROM silo.jobs WHERE task_group = %s", (group,))[0][0], 0)
        self.assertEqual(len(rows), len(jobs), "0 jobs lost or duplicated")
        self.assertEqual({r[0] for r in rows}, ids)
        self.assertEqual([r for r in rows if r[1:] != ("Succeeded", 1, 1)], [],
                         "every job Succeeded with exactly one attempt")
        self.assertEqual([k for k, n in runs.items() if n != 1], [], "the handler ran every job exactly once")
        self.assertEqual(len(runs), len(jobs))
        st = w.stats
        print(f"\n# {len(jobs)} jobs; {len(placed)} shards moved in and back; worker: {st.succeeded} succeeded,"
              f" {st.lost} lost, {st.followed} reports and heartbeats followed NOT_OWNER", flush=True)
        self.assertEqual((st.succeeded, st.failed, st.lost), (len(jobs), 0, 0), "\n".join(errors))
        self.assertGreaterEqual(st.followed, 2 * len(movers), "the worker followed NOT_OWNER")


if __name__ == "__main__":
    unittest.main()
