"""ClusterClient and AsyncClusterClient: SiloClient for a silo in cluster mode (docs/clients.md).

Given one node's connection string, the client reads that node's shard map
(silo.cluster_info, silo.node_info), keeps one pool per member, and sends
every call that names a tenant to the owner of the tenant's shard
(_routing.py: SL020 hints followed, SL021 retried).  On a single-node silo
it is SiloClient with one more statement, the first map read.  This
mirrors clients/node/src/cluster.ts.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ._routing import SQL_CLUSTER_INFO, SQL_NODE_INFO, AsyncRouter, Router, Shard, ShardMap, owner_conninfo
from ._hash import tenant_hash
from .aio import AsyncSiloClient
from .client import SiloClient
from .errors import NotOwnerError, ShardUnavailableError
from .types import UNSET, Job, JobResult, JobSpec

# get_job in cluster mode: the view raises no SL020 (a node that does not own
# the shard has none of its rows), so the statement says whether the shard is
# this node's, with its owner, in the same round trip
SQL_GET_JOB_ROUTED = ('SELECT c.is_local AS "silo$local", c.owner_node_id AS "silo$owner",'
                      ' c.owner_conninfo AS "silo$conninfo", c.shard_id AS "silo$shard", j.*'
                      ' FROM silo.cluster_info c LEFT JOIN silo.jobs j ON j.tenant = %s AND j.id = %s'
                      ' WHERE c.shard_id = silo.shard_for_tenant(%s)')


def _tenant_of(job: Union[JobSpec, Mapping[str, Any]]) -> str:
    t = job.get("tenant") if isinstance(job, Mapping) else getattr(job, "tenant", None)
    return t if isinstance(t, str) else "-"


def _routed_job(rows: List[Dict[str, Any]], tenant: str) -> Optional[Job]:
    """get_job's answer from SQL_GET_JOB_ROUTED's rows; NotOwnerError when the shard is not the node's."""
    if not rows:
        raise NotOwnerError(f'the node has no shard for tenant "{tenant}"', "SL020")
    r = rows[0]
    if r["silo$local"] is not True:
        detail = json.dumps({"shard": r["silo$shard"], "owner_node_id": r["silo$owner"],
                             "owner_conninfo": r["silo$conninfo"]})
        raise NotOwnerError(f'shard {r["silo$shard"]} of tenant "{tenant}" is not served by this node',
                            "SL020", detail)
    if r.get("id") is None:
        return None
    return Job.from_row({k: v for k, v in r.items() if not k.startswith("silo$")})


class _Grouping:
    """enqueue_many across owners: the rounds' bookkeeping both clients share."""

    def __init__(self, jobs: Sequence[Any], deadline: float):
        self.jobs = list(jobs)
        self.ids: List[Optional[str]] = [None] * len(jobs)
        self.pending = list(range(len(jobs)))
        self.deadline = deadline
        self.rounds = 0

    def groups(self, router: Any, m: ShardMap) -> List[Tuple[Any, List[int]]]:
        out: Dict[int, Tuple[Any, List[int]]] = {}
        for i in self.pending:
            member = router.member_of(m, _tenant_of(self.jobs[i]))
            out.setdefault(id(member), (member, []))[1].append(i)
        return list(out.values())

    def settle(self, router: Any, groups: List[Tuple[Any, List[int]]], outcomes: List[Any]) -> bool:
        """Record a round; True when another is needed (and whether to wait is in self.wait)."""
        again: List[int] = []
        hard: Optional[BaseException] = None
        moved: Optional[BaseException] = None
        self.wait = False
        for (member, idx), o in zip(groups, outcomes):
            if not isinstance(o, BaseException):
                for i, v in zip(idx, o):
                    self.ids[i] = v
            elif isinstance(o, NotOwnerError) and o.owner_conninfo:
                router.apply_hint(o)
                moved = o
                again += idx
            elif isinstance(o, (NotOwnerError, ShardUnavailableError)):
                self.wait = True
                moved = o
                again += idx
            elif hard is None:
                hard = o
        if hard is not None:
            raise hard
        if not again:
            return False
        self.rounds += 1
        if self.rounds > 8 or time.monotonic() >= self.deadline:
            assert moved is not None
            raise moved
        self.pending = again
        return True


class ClusterClient:
    """SiloClient for cluster mode: one pool per member, calls routed by tenant.

    ``ClusterClient("host=db1 dbname=app user=me")``: the node given is
    asked for the map; the others are reached with their advertised
    host, port and database and your credentials and settings.  Keyword
    arguments go to each member's SiloClient (``max_connections``, ...).
    ``max_hops`` SL020 hints are followed per call (default 3); SL021 is
    retried for ``retry_timeout`` seconds in all (default 5).
    """

    def __init__(self, conninfo: str = "", *, max_hops: int = 3, retry_timeout: float = 5.0,
                 retry_delay: float = 0.1, **kwargs: Any):
        self._conninfo = conninfo
        self._kwargs = kwargs
        self.seed = SiloClient(conninfo, **kwargs)
        self._members: Dict[str, Tuple[str, SiloClient]] = {}
        self._members_lock = threading.Lock()
        self.router: Router[SiloClient] = Router(self.seed, self._read_map, self._member, max_hops=max_hops,
                                                 retry_timeout=retry_timeout, retry_delay=retry_delay)

    def _member(self, node_id: Optional[str], conninfo: str) -> SiloClient:
        """The client of a node: one per node id, made again when its advertised conninfo changes."""
        key = node_id if node_id is not None else f"conninfo:{conninfo}"
        with self._members_lock:
            known = self._members.get(key)
            if known is not None and known[0] == conninfo:
                return known[1]
            client = SiloClient(owner_conninfo(self._conninfo, conninfo), **self._kwargs)
            self._members[key] = (conninfo, client)
        if known is not None:
            known[1].close()
        return client

    @staticmethod
    def _read_map(c: SiloClient) -> ShardMap:
        node = c._query((SQL_NODE_INFO, [], None))
        return ShardMap.from_rows(node[0] if node else None, c._query((SQL_CLUSTER_INFO, [], None)))

    @property
    def map(self) -> Optional[ShardMap]:
        """The shard map as last read (None before the first call)."""
        return self.router.map

    def refresh_map(self) -> ShardMap:
        """Read the shard map again."""
        return self.router.refresh()

    def locate(self, tenant: str) -> Tuple[int, Optional[Shard], bool]:
        """(hash, shard, whether the calls go to the node given) of a tenant, by the map."""
        m = self.router.ensure_map()
        return tenant_hash(tenant), m.shard_of(tenant), self.router.member_of(m, tenant) is self.seed

    def close(self) -> None:
        """Close every pool."""
        self.seed.close()
        for _c, client in self._members.values():
            client.close()

    def __enter__(self) -> "ClusterClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def enqueue(self, task_group: str, payload: Any = UNSET, *, tenant: Optional[str] = None,
                **options: Any) -> str:
        """SiloClient.enqueue on the owner of the tenant's shard."""
        return self.router.run(tenant or "-", lambda c: c.enqueue(task_group, payload, tenant=tenant, **options))

    def enqueue_many(self, jobs: Sequence[Union[JobSpec, Mapping[str, Any]]]) -> List[str]:
        """SiloClient.enqueue_many, one statement per owner; ids in input order.

        All or none per owner, not across owners: when one owner refuses its
        jobs, those of the others may have been enqueued.  Jobs whose owner
        said SL020 or SL021 are sent again (to the hint, or after a pause).
        """
        if not jobs:
            return []
        m = self.router.ensure_map()
        if m.single_node:
            return self.seed.enqueue_many(jobs)
        g = _Grouping(jobs, time.monotonic() + self.router.retry_timeout)
        pause = self.router.retry_delay
        while True:
            groups = g.groups(self.router, self.router.map or m)
            outcomes: List[Any] = []
            for member, idx in groups:
                try:
                    outcomes.append(member.enqueue_many([jobs[i] for i in idx]))
                except Exception as e:
                    outcomes.append(e)
            if not g.settle(self.router, groups, outcomes):
                return [i for i in g.ids if i is not None]
            if g.wait:
                time.sleep(min(pause, max(0.0, g.deadline - time.monotonic())))
                pause = min(pause * 2, 2.0)
                try:
                    self.router.refresh()
                except Exception:
                    pass

    def get_job(self, id: str, *, tenant: str = "-") -> Optional[Job]:
        """SiloClient.get_job on the owner (the statement checks the shard is the node's)."""
        if self.router.ensure_map().single_node:
            return self.seed.get_job(id, tenant=tenant)
        return self.router.run(tenant, lambda c: _routed_job(
            c._query((SQL_GET_JOB_ROUTED, [tenant, id, tenant], False)), tenant))

    def cancel(self, id: str, *, tenant: str = "-") -> None:
        """SiloClient.cancel on the owner."""
        self.router.run(tenant, lambda c: c.cancel(id, tenant=tenant))

    def restart(self, id: str, *, tenant: str = "-") -> None:
        """SiloClient.restart on the owner."""
        self.router.run(tenant, lambda c: c.restart(id, tenant=tenant))

    def expedite(self, id: str, *, tenant: str = "-") -> None:
        """SiloClient.expedite on the owner."""
        self.router.run(tenant, lambda c: c.expedite(id, tenant=tenant))

    def delete_job(self, id: str, *, tenant: str = "-") -> bool:
        """SiloClient.delete_job on the owner."""
        return self.router.run(tenant, lambda c: c.delete_job(id, tenant=tenant))

    def get_job_result(self, id: str, *, tenant: str = "-") -> JobResult:
        """SiloClient.get_job_result on the owner."""
        return self.router.run(tenant, lambda c: c.get_job_result(id, tenant=tenant))

    def await_result(self, id: str, *, tenant: str = "-", **options: Any) -> JobResult:
        """SiloClient.await_result on the owner (the wait happens there)."""
        return self.router.run(tenant, lambda c: c.await_result(id, tenant=tenant, **options))


class AsyncClusterClient:
    """ClusterClient on asyncio: AsyncSiloClient per member, the same methods as coroutines."""

    def __init__(self, conninfo: str = "", *, max_hops: int = 3, retry_timeout: float = 5.0,
                 retry_delay: float = 0.1, **kwargs: Any):
        self._conninfo = conninfo
        self._kwargs = kwargs
        self.seed = AsyncSiloClient(conninfo, **kwargs)
        self._members: Dict[str, Tuple[str, AsyncSiloClient]] = {}
        self._closing: List[Any] = []
        self.router: AsyncRouter[AsyncSiloClient] = AsyncRouter(
            self.seed, self._read_map, self._member, max_hops=max_hops, retry_timeout=retry_timeout,
            retry_delay=retry_delay)

    def _member(self, node_id: Optional[str], conninfo: str) -> AsyncSiloClient:
        """The client of a node: one per node id, made again when its advertised conninfo changes."""
        key = node_id if node_id is not None else f"conninfo:{conninfo}"
        known = self._members.get(key)
        if known is not None and known[0] == conninfo:
            return known[1]
        client = AsyncSiloClient(owner_conninfo(self._conninfo, conninfo), **self._kwargs)
        if known is not None:
            self._closing.append(known[1])
        self._members[key] = (conninfo, client)
        return client

    @staticmethod
    async def _read_map(c: AsyncSiloClient) -> ShardMap:
        node = await c._query((SQL_NODE_INFO, [], None))
        return ShardMap.from_rows(node[0] if node else None, await c._query((SQL_CLUSTER_INFO, [], None)))

    @property
    def map(self) -> Optional[ShardMap]:
        """The shard map as last read (None before the first call)."""
        return self.router.map

    async def refresh_map(self) -> ShardMap:
        """Read the shard map again."""
        return await self.router.refresh()

    async def close(self) -> None:
        """Close every pool."""
        await self.seed.close()
        for c in [m[1] for m in self._members.values()] + self._closing:
            await c.close()

    async def __aenter__(self) -> "AsyncClusterClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def enqueue(self, task_group: str, payload: Any = UNSET, *, tenant: Optional[str] = None,
                      **options: Any) -> str:
        """AsyncSiloClient.enqueue on the owner of the tenant's shard."""
        return await self.router.run(tenant or "-",
                                     lambda c: c.enqueue(task_group, payload, tenant=tenant, **options))

    async def enqueue_many(self, jobs: Sequence[Union[JobSpec, Mapping[str, Any]]]) -> List[str]:
        """AsyncSiloClient.enqueue_many, one statement per owner, in parallel (see ClusterClient.enqueue_many)."""
        if not jobs:
            return []
        m = await self.router.ensure_map()
        if m.single_node:
            return await self.seed.enqueue_many(jobs)
        g = _Grouping(jobs, time.monotonic() + self.router.retry_timeout)
        pause = self.router.retry_delay
        while True:
            groups = g.groups(self.router, self.router.map or m)
            outcomes = await asyncio.gather(*(member.enqueue_many([jobs[i] for i in idx]) for member, idx in groups),
                                            return_exceptions=True)
            if not g.settle(self.router, groups, list(outcomes)):
                return [i for i in g.ids if i is not None]
            if g.wait:
                await asyncio.sleep(min(pause, max(0.0, g.deadline - time.monotonic())))
                pause = min(pause * 2, 2.0)
                try:
                    await self.router.refresh()
                except Exception:
                    pass

    async def get_job(self, id: str, *, tenant: str = "-") -> Optional[Job]:
        """AsyncSiloClient.get_job on the owner (the statement checks the shard is the node's)."""
        if (await self.router.ensure_map()).single_node:
            return await self.seed.get_job(id, tenant=tenant)

        async def call(c: AsyncSiloClient) -> Optional[Job]:
            return _routed_job(await c._query((SQL_GET_JOB_ROUTED, [tenant, id, tenant], False)), tenant)
        return await self.router.run(tenant, call)

    async def cancel(self, id: str, *, tenant: str = "-") -> None:
        """AsyncSiloClient.cancel on the owner."""
        await self.router.run(tenant, lambda c: c.cancel(id, tenant=tenant))

    async def restart(self, id: str, *, tenant: str = "-") -> None:
        """AsyncSiloClient.restart on the owner."""
        await self.router.run(tenant, lambda c: c.restart(id, tenant=tenant))

    async def expedite(self, id: str, *, tenant: str = "-") -> None:
        """AsyncSiloClient.expedite on the owner."""
        await self.router.run(tenant, lambda c: c.expedite(id, tenant=tenant))

    async def delete_job(self, id: str, *, tenant: str = "-") -> bool:
        """AsyncSiloClient.delete_job on the owner."""
        return await self.router.run(tenant, lambda c: c.delete_job(id, tenant=tenant))

    async def get_job_result(self, id: str, *, tenant: str = "-") -> JobResult:
        """AsyncSiloClient.get_job_result on the owner."""
        return await self.router.run(tenant, lambda c: c.get_job_result(id, tenant=tenant))

    async def await_result(self, id: str, *, tenant: str = "-", **options: Any) -> JobResult:
        """AsyncSiloClient.await_result on the owner (the wait happens there)."""
        return await self.router.run(tenant, lambda c: c.await_result(id, tenant=tenant, **options))
