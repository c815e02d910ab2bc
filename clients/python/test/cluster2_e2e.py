"""Cluster mode against a real two-node silo cluster with etcd
(clients/test-cluster.sh's cluster2_start, run by test/run.sh when etcd is
installed): n1 owns all 8 shards, n2 is a live member that owns none.  The
client and the worker are given n2's connection only."""

import os
import time
import unittest

import psycopg

from helpers import unique
from silo_client import ClusterClient, ShardMap, SiloClusterWorker

N1 = os.environ.get("SILO_TEST_N1_URL")
N2 = os.environ.get("SILO_TEST_N2_URL")


def status(url, job_id, tenant):
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute("SELECT status FROM silo.jobs WHERE tenant = %s AND id = %s", (tenant, job_id)).fetchone()
        return row[0] if row else None


@unittest.skipUnless(N1 and N2, "SILO_TEST_N1_URL and SILO_TEST_N2_URL are not set")
class TwoNodeTest(unittest.TestCase):
    def test_routing_and_a_real_sl020(self):
        with ClusterClient(N2, retry_delay=0.02) as cc:
            group = unique("c2")
            jid = cc.enqueue(group, {"n": 1}, tenant="acme")
            self.assertFalse(cc.map.single_node)
            self.assertEqual(cc.map.node_id, "n2")
            self.assertEqual(cc.locate("acme")[1].owner_node_id, "n1")
            self.assertEqual(status(N1, jid, "acme"), "Waiting")
            self.assertIsNone(status(N2, jid, "acme"))
            ids = cc.enqueue_many([{"task_group": group, "tenant": "-"}, {"task_group": group, "tenant": "tenant-1"}])
            self.assertEqual(status(N1, ids[1], "tenant-1"), "Waiting")
            self.assertEqual(cc.get_job(jid, tenant="acme").status, "Waiting")
            cc.cancel(ids[0])
            self.assertEqual(cc.await_result(ids[0], timeout=3).status, "Cancelled")
            # a stale map: shard 7 (acme's) said to be n2's; n2 refuses with SL020 naming n1
            m = cc.map
            cc.router.map = ShardMap(m.node_id, m.mode, [
                s if s.id != 7 else s.__class__(s.id, s.start, s.end, "n2", "x", s.state, True) for s in m.shards])
            jid2 = cc.enqueue(unique("c2s"), tenant="acme")
            self.assertEqual(status(N1, jid2, "acme"), "Waiting")
            cc.router.map = cc.router.map.with_owner(7, "n2", "x")
            self.assertEqual(cc.get_job(jid2, tenant="acme").id, jid2)

    def test_worker_given_n2_leases_from_n1(self):
        group = unique("c2w")
        errors = []

        def handler(task, ctx):
            if task.payload.get("slow"):
                time.sleep(2.0)
            return {"tenant": task.tenant}

        w = SiloClusterWorker(N2, task_group=group, handler=handler, concurrency=4, poll_interval=0.05,
                              lease_seconds=1.5, heartbeat_interval=0.3,
                              on_error=lambda e, ctx: errors.append(f"{ctx.phase}: {e}"))
        w.start()
        try:
            self.assertEqual(sorted(w.member_nodes), ["n1", "n2"])
            with ClusterClient(N2) as cc:
                jobs = [(cc.enqueue(group, p, tenant=t), t) for t, p in
                        (("acme", {"slow": True}), ("-", {}), ("tenant-1", {}), ("😀", {}))]
            deadline = time.monotonic() + 20
            while not all(status(N1, i, t) == "Succeeded" for i, t in jobs):
                self.assertLess(time.monotonic(), deadline, "; ".join(errors))
                time.sleep(0.05)
        finally:
            w.stop()
        self.assertEqual((w.stats.succeeded, w.stats.lost), (4, 0), "\n".join(errors))


if __name__ == "__main__":
    unittest.main()
