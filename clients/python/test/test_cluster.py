"""Cluster mode: the tenant hash (docs/cluster.md's test vectors and the
server's silo.tenant_hash), the shard map, the routers' rules against fake
members, ClusterClient / AsyncClusterClient and the cluster workers against
the real single-node silo, and the following of SL020 / SL021 against a
stand-in member (clients/test-stub.sql: a database whose hand-made silo
raises them, pointing at the real node).  No real multi-node cluster here."""

import asyncio
import datetime as dt
import json
import os
import random
import re
import time
import unittest
import urllib.parse

import psycopg

from helpers import URL, job_status, sql, unique, value, wait_for
from silo_client import (
    AsyncClusterClient, AsyncRouter, AsyncSiloClusterWorker, ClusterClient, NotOwnerError, NotTerminalError, Router,
    Shard, ShardMap, ShardUnavailableError, SiloClient, SiloClusterWorker, owner_conninfo, tenant_hash,
)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def doc_vectors():
    """docs/cluster.md's test vectors: (tenant, hash, shard of 8)."""
    out = []
    with open(os.path.join(REPO, "docs", "cluster.md"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\| (.+?) \| `(-?\d+)` \| (\d+) \|$", line.rstrip("\n"))
            if not m:
                continue
            label = m.group(1)
            if label == "(empty string)":
                tenant = ""
            elif label == "`x` repeated 64 times":
                tenant = "x" * 64
            else:
                tenant = re.match(r"^`(.*)`$", label).group(1)
            out.append((tenant, int(m.group(2)), int(m.group(3))))
    return out


def map_of(n, owners=None, node_id="a", mode="cluster"):
    """The map silo makes of n shards (docs/cluster.md), node_id's unless owners says."""
    owners = owners or {}
    shards = []
    for i in range(n):
        start = -(1 << 63) + (i << 64) // n
        end = -(1 << 63) + ((i + 1) << 64) // n
        o = owners.get(i, node_id)
        shards.append(Shard(i, start, end, o, None if o is None else f"host={o}", "serving", o == node_id))
    return ShardMap(node_id, mode, shards)


def not_owner(shard, node):
    return NotOwnerError(f'shard {shard} of tenant "t" is not served by this node', "SL020",
                         json.dumps({"shard": shard, "owner_node_id": node,
                                     "owner_conninfo": None if node is None else f"host={node}"}))


class HashTest(unittest.TestCase):
    def test_doc_vectors(self):
        vectors = doc_vectors()
        self.assertEqual(len(vectors), 8)
        m = map_of(8)
        for tenant, h, shard in vectors:
            self.assertEqual(tenant_hash(tenant), h, tenant)
            self.assertEqual(m.shard_of(tenant).id, shard, tenant)

    def test_agrees_with_the_server(self):
        alphabet = ["a", "Z", "-", "0", "é", "ß", "€", "中", "😀", "\u0001", " "]
        rnd = random.Random(7)
        tenants = ["".join(rnd.choice(alphabet) for _ in range(i % 40)) for i in range(300)]
        rows = sql("SELECT t, silo.tenant_hash(t) AS h FROM unnest(%s::text[]) AS t", (tenants,))
        self.assertEqual(len(rows), 300)
        for r in rows:
            self.assertEqual(tenant_hash(r["t"]), r["h"], repr(r["t"]))


class MapTest(unittest.TestCase):
    def test_lookup_bounds_gap_single_node(self):
        m = map_of(4)
        self.assertEqual(m.shard_of_hash(-(1 << 63)).id, 0)
        self.assertEqual(m.shard_of_hash(-(1 << 62) - 1).id, 0)
        self.assertEqual(m.shard_of_hash(-(1 << 62)).id, 1)
        self.assertEqual(m.shard_of_hash(0).id, 2)
        self.assertEqual(m.shard_of_hash((1 << 63) - 1).id, 3)
        self.assertFalse(m.single_node)
        gap = ShardMap("a", "cluster", [s for s in m.shards if s.id != 2])
        self.assertIsNone(gap.shard_of_hash(5))
        self.assertTrue(map_of(1).single_node)
        self.assertTrue(map_of(4, mode="single-node").single_node)

    def test_owner_conninfo_keeps_credentials(self):
        got = psycopg.conninfo.conninfo_to_dict(owner_conninfo(
            "host=db1 hostaddr=10.0.0.1 port=6000 dbname=app user=me password=secret sslmode=require",
            "host=db2 dbname=app2"))
        self.assertEqual(got, {"host": "db2", "dbname": "app2", "user": "me", "password": "secret",
                               "sslmode": "require"})


class RouterTest(unittest.TestCase):
    def fake(self, m, behaviour=None, maps=None):
        behaviour = behaviour or {}
        members = {}
        calls = []
        reads = [0]

        def member(node_id, conninfo):
            key = node_id if node_id is not None else conninfo
            return members.setdefault(key, key)

        seed = member(m.node_id, "")

        def read_map(mem):
            reads[0] += 1
            return (maps or {}).get(reads[0], m)

        router = Router(seed, read_map, member, retry_delay=0.005, retry_timeout=0.3)

        def run(tenant):
            def call(mem):
                calls.append(mem)
                b = behaviour.get(mem)
                r = b(len(calls)) if callable(b) else b
                if isinstance(r, BaseException):
                    raise r
                return mem
            return router.run(tenant, call)
        return router, run, calls, reads

    def test_routes_by_tenant_one_map_read(self):
        _r, run, _calls, reads = self.fake(map_of(8, {7: "b", 6: "c"}))
        self.assertEqual(run("acme"), "b")
        self.assertEqual(run("-"), "c")
        self.assertEqual(run("tenant-1"), "a")
        self.assertEqual(reads[0], 1)

    def test_single_node(self):
        _r, run, _calls, reads = self.fake(map_of(1, node_id="s", mode="single-node"))
        for t in ("acme", "-", "x"):
            self.assertEqual(run(t), "s")
        self.assertEqual(reads[0], 1)

    def test_follows_sl020_and_keeps_the_hint(self):
        router, run, calls, _reads = self.fake(map_of(8), {"a": not_owner(7, "b")})
        self.assertEqual(run("acme"), "b")
        self.assertEqual(calls, ["a", "b"])
        self.assertEqual(run("Acme"), "b")  # shard 7 too; the map read again keeps the hint
        self.assertEqual(calls, ["a", "b", "b"])
        self.assertEqual(router.map.shards[7].owner_node_id, "b")

    def test_loop_and_max_hops(self):
        _r, run, calls, _reads = self.fake(map_of(8), {"a": not_owner(7, "b"), "b": not_owner(7, "a")})
        with self.assertRaisesRegex(NotOwnerError, "already tried"):
            run("acme")
        self.assertEqual(calls, ["a", "b"])
        chain = {"a": not_owner(7, "b"), "b": not_owner(7, "c"), "c": not_owner(7, "d"), "d": not_owner(7, "e")}
        _r, run, calls, _reads = self.fake(map_of(8), chain)
        with self.assertRaisesRegex(NotOwnerError, "more than 3 hints"):
            run("acme")
        self.assertEqual(calls, ["a", "b", "c", "d"])

    def test_sl021_retried_then_given_up(self):
        _r, run, calls, reads = self.fake(
            map_of(8), {"a": lambda n: ShardUnavailableError("paused", "SL021") if n <= 2 else None})
        self.assertEqual(run("acme"), "a")
        self.assertEqual(calls, ["a", "a", "a"])
        self.assertEqual(reads[0], 3)
        _r, run, _calls, _reads = self.fake(map_of(8), {"a": ShardUnavailableError("paused", "SL021")})
        t0 = time.monotonic()
        with self.assertRaises(ShardUnavailableError):
            run("acme")
        self.assertTrue(0.25 <= time.monotonic() - t0 < 2.0)

    def test_no_owner_retried_then_the_new_map(self):
        _r, run, calls, _reads = self.fake(map_of(8), {"a": not_owner(7, None)}, maps={2: map_of(8, {7: "b"})})
        self.assertEqual(run("acme"), "b")
        self.assertEqual(calls, ["a", "b"])

    def test_async_router(self):
        async def main():
            calls = []

            async def read_map(_m):
                return map_of(8)

            router = AsyncRouter("a", read_map, lambda n, c: n or c, retry_delay=0.005, retry_timeout=0.3)

            async def call(mem):
                calls.append(mem)
                if mem == "a":
                    raise not_owner(7, "b")
                return mem
            self.assertEqual(await router.run("acme", call), "b")
            self.assertEqual(calls, ["a", "b"])
        asyncio.run(main())


class Stub:
    """A database with clients/test-stub.sql's stand-in silo, pointing at the real node."""

    n = 0

    def __init__(self):
        Stub.n += 1
        self.db = f"silo_stub_{os.getpid()}_{Stub.n}"
        sql(f"DROP DATABASE IF EXISTS {self.db} WITH (FORCE)")
        sql(f"CREATE DATABASE {self.db}")
        host = urllib.parse.parse_qs(urllib.parse.urlsplit(URL).query)["host"][0]
        self.real = f"host={host} dbname=postgres"
        self.url = URL.replace("/postgres?", f"/{self.db}?")
        self.conn = psycopg.connect(self.url, autocommit=True)
        with open(os.path.join(REPO, "clients", "test-stub.sql"), encoding="utf-8") as f:
            text = f.read().replace("@REAL@", "'" + self.real.replace("'", "''") + "'")
        self.conn.execute(text)

    def q(self, text, params=()):
        cur = self.conn.execute(text, params)
        return cur.fetchall() if cur.description else []

    def drop(self):
        self.conn.close()
        sql(f"DROP DATABASE IF EXISTS {self.db} WITH (FORCE)")


class ClusterClientTest(unittest.TestCase):
    def test_single_node_as_silo_client(self):
        with ClusterClient(URL) as cc:
            group = unique("cc")
            jid = cc.enqueue(group, {"n": 1}, tenant="acme")
            self.assertTrue(cc.map.single_node)
            # no statement besides the first map read: the map is never read again
            cc.router._read_map = None
            ids = cc.enqueue_many([{"task_group": group, "tenant": "acme"}, {"task_group": group}])
            self.assertEqual(cc.get_job(jid, tenant="acme").status, "Waiting")
            self.assertIsNone(cc.get_job("nope", tenant="acme"))
            cc.cancel(jid, tenant="acme")
            self.assertEqual(job_status(jid, "acme"), "Cancelled")
            cc.restart(jid, tenant="acme")
            with self.assertRaises(NotTerminalError):
                cc.get_job_result(ids[1])
            cc.cancel(ids[1])
            self.assertEqual(cc.await_result(ids[1], timeout=2).status, "Cancelled")
            self.assertTrue(cc.delete_job(ids[1]))
            h, shard, seed = cc.locate("acme")
            self.assertEqual((h, seed), (7757017307627438190, True))

    def test_stub_sl020_followed_by_every_call(self):
        stub = Stub()
        try:
            with ClusterClient(stub.url, retry_delay=0.01, retry_timeout=3) as cc:
                group = unique("stub")
                jid = cc.enqueue(group, {"n": 1}, tenant="acme")
                self.assertEqual(job_status(jid, "acme"), "Waiting")
                self.assertFalse(cc.map.single_node)
                self.assertEqual(cc.locate("acme")[1].owner_node_id, "real")
                ids = cc.enqueue_many([{"task_group": group, "tenant": "tenant-1"},
                                       {"task_group": group, "tenant": "acme"},
                                       {"task_group": group, "tenant": "😀"}])
                for i, t in zip(ids, ("tenant-1", "acme", "😀")):
                    self.assertEqual(job_status(i, t), "Waiting")
                cc.cancel(ids[0], tenant="tenant-1")
                self.assertEqual(job_status(ids[0], "tenant-1"), "Cancelled")
                cc.restart(ids[0], tenant="tenant-1")
                later = cc.enqueue(group, tenant="ünïcødé",
                                   start_at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))
                cc.expedite(later, tenant="ünïcødé")
                self.assertTrue(value("SELECT next_attempt_at <= now() FROM silo.jobs WHERE tenant = 'ünïcødé'"
                                      " AND id = %s", (later,)))
                cc.cancel(later, tenant="ünïcødé")
                self.assertEqual(cc.get_job_result(later, tenant="ünïcødé").status, "Cancelled")
                self.assertEqual(cc.await_result(later, tenant="ünïcødé", timeout=3).status, "Cancelled")
                self.assertTrue(cc.delete_job(later, tenant="ünïcødé"))
                # get_job: the statement says the stub's shard 7 is not its own
                gid = SiloClient(URL).enqueue(group, tenant="Acme")
                stub.q("UPDATE silo.stub_map SET is_local = false, owner_node_id = 'real', owner_conninfo = %s,"
                       " state = 'remote' WHERE shard_id = 7", (stub.real,))
                cc.router.map = cc.router.map.with_owner(7, "stub", "host=stub.invalid")
                self.assertEqual(cc.get_job(gid, tenant="Acme").id, gid)
            # SL021 twice, then the SL020
            before = stub.q("SELECT nextval('silo.stub_calls')")[0][0]
            stub.q("UPDATE silo.stub_conf SET unavailable = %s", (before + 2,))
            with ClusterClient(stub.url, retry_delay=0.01, retry_timeout=3) as cc:
                jid = cc.enqueue(unique("stub21"), tenant="x" * 64)
                self.assertEqual(job_status(jid, "x" * 64), "Waiting")
            self.assertEqual(stub.q("SELECT last_value FROM silo.stub_calls")[0][0], before + 3)
        finally:
            stub.drop()

    def test_async_stub_sl020_followed(self):
        stub = Stub()

        async def main():
            async with AsyncClusterClient(stub.url, retry_delay=0.01, retry_timeout=3) as cc:
                group = unique("astub")
                jid = await cc.enqueue(group, tenant="acme")
                ids = await cc.enqueue_many([{"task_group": group, "tenant": "tenant-1"},
                                             {"task_group": group, "tenant": "-"}])
                await cc.cancel(ids[1])
                self.assertEqual((await cc.await_result(ids[1], timeout=3)).status, "Cancelled")
                self.assertIsNone(await cc.get_job("nope", tenant="acme"))
                return jid, ids
        try:
            jid, ids = asyncio.run(main())
            self.assertEqual(job_status(jid, "acme"), "Waiting")
            self.assertEqual(job_status(ids[0], "tenant-1"), "Waiting")
            self.assertEqual(job_status(ids[1]), "Cancelled")
        finally:
            stub.drop()


def run_six(test, url, group):
    """Six jobs (two slower than their lease, one failing) through a SiloClusterWorker on url."""
    errors = []

    def handler(task, ctx):
        if task.payload.get("slow"):
            time.sleep(2.0)  # longer than the lease: heartbeats needed
        if task.payload.get("fail"):
            raise RuntimeError("boom")
        return {"tenant": task.tenant}

    w = SiloClusterWorker(url, task_group=group, handler=handler, concurrency=4, lease_seconds=1.2,
                          heartbeat_interval=0.3, poll_interval=0.05,
                          on_error=lambda e, ctx: errors.append(f"{ctx.phase}: {e}"))
    w.start()
    c = SiloClient(URL)
    jobs = []
    for tenant, payload in (("acme", {"slow": True}), ("tenant-1", {}), ("-", {"fail": True}), ("😀", {}),
                            ("Acme", {}), ("ünïcødé", {"slow": True})):
        jobs.append((c.enqueue(group, payload, tenant=tenant), tenant, payload))
    try:
        wait_for(lambda: all(job_status(i, t) == ("Failed" if p.get("fail") else "Succeeded") for i, t, p in jobs),
                 timeout=20, message="every job to end")
    finally:
        members = sorted(w.member_nodes)
        w.stop()
        c.close()
    attempts = value("SELECT count(*) FROM silo.attempts WHERE job_id = ANY(%s)", ([j[0] for j in jobs],))
    return w.stats, errors, members, attempts


class ClusterWorkerTest(unittest.TestCase):
    def test_single_node_one_member(self):
        group = unique("cw1")

        async def main():
            w = AsyncSiloClusterWorker(URL, task_group=group, poll_interval=0.05, handler=lambda t, ctx: {"ok": 1})
            await w.start()
            self.assertEqual(len(w.member_nodes), 1)
            c = SiloClient(URL)
            ids = c.enqueue_many([{"task_group": group}, {"task_group": group, "tenant": "acme"}])
            c.close()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and w.stats.succeeded < 2:
                await asyncio.sleep(0.05)
            await w.stop()
            return w.stats, ids
        stats, ids = asyncio.run(main())
        self.assertEqual(stats.succeeded, 2)
        self.assertEqual(job_status(ids[1], "acme"), "Succeeded")

    def test_stub_tasks_follow_sl020(self):
        stub = Stub()
        try:
            stats, errors, members, attempts = run_six(self, stub.url, unique("cw2"))
            self.assertEqual(members, ["stub"])
            self.assertEqual((stats.succeeded, stats.failed, stats.lost), (5, 1, 0), "\n".join(errors))
            self.assertEqual(attempts, 6)  # one attempt each: no lease ran out
            self.assertEqual(stub.q("SELECT last_value FROM silo.stub_leased")[0][0], 6)
        finally:
            stub.drop()

    def test_leases_from_every_member(self):
        stub = Stub()
        try:
            stub.q("UPDATE silo.stub_map SET is_local = false, owner_node_id = 'real', owner_conninfo = %s,"
                   " state = 'remote' WHERE shard_id >= 4", (stub.real,))
            stats, errors, members, attempts = run_six(self, stub.url, unique("cw3"))
            self.assertEqual(members, ["real", "stub"])
            self.assertEqual((stats.succeeded, stats.failed, stats.lost), (5, 1, 0), "\n".join(errors))
            self.assertEqual(attempts, 6)
        finally:
            stub.drop()


if __name__ == "__main__":
    unittest.main()
