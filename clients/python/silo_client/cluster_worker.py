"""AsyncSiloClusterWorker and SiloClusterWorker: the worker for a silo in cluster mode (docs/clients.md).

A task group's tasks live on the nodes that own their tenants' shards, so
the cluster worker leases from every member: one AsyncSiloWorker per node
(its own pool, LISTEN connection and heartbeat connection), all sharing one
concurrency budget and woken round robin as slots free up.  Each task's
heartbeats and reports go to the node it was leased from, with the task's
tenant, so that a node its shard has moved away from answers SL020 naming
the new owner, which they follow.  The map is read again every
``map_refresh`` seconds to find new members.  On a single-node silo it is
one AsyncSiloWorker, as before.  This mirrors clients/node/src/clusterWorker.ts.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Dict, List, Optional

import psycopg
from psycopg.rows import dict_row

from ._pool import AsyncPool
from ._routing import SQL_CLUSTER_INFO, SQL_NODE_INFO, ShardMap, owner_conninfo
from .errors import NotOwnerError, SiloError, to_silo_error
from .worker import (
    AsyncSiloWorker, Handler, RefreshHandler, SharedSlots, SiloWorker, WorkerErrorContext, WorkerStats, log,
)


class AsyncSiloClusterWorker:
    """AsyncSiloWorker for cluster mode: the same options, plus ``map_refresh`` (seconds, default 30)."""

    def __init__(self, conninfo: str = "", *, map_refresh: float = 30.0, **options: Any):
        self._conninfo = conninfo
        self._options = options
        self._map_refresh = map_refresh
        # validates the options once, and gives the defaults (worker id, concurrency)
        probe = AsyncSiloWorker(conninfo, **options)
        self.worker_id = probe.worker_id
        self.task_group = probe.task_group
        self.concurrency = probe.concurrency
        self._slots = SharedSlots(probe.concurrency)
        self._handler: Optional[Handler] = options.pop("handler", None)
        self._refresh_handler: Optional[RefreshHandler] = options.pop("refresh_handler", None)
        self._on_error: Optional[Callable[[BaseException, WorkerErrorContext], None]] = options.get("on_error")
        self._members: Dict[str, AsyncSiloWorker] = {}
        self._report_pools: Dict[str, AsyncPool] = {}
        self.map: Optional[ShardMap] = None
        self._refresher: Optional[asyncio.Task] = None
        self._stopping = False
        self._stop_task: Optional[asyncio.Future] = None

    def handler(self, fn: Handler) -> Handler:
        """Decorator: register fn as the handler of run tasks."""
        self._handler = fn
        return fn

    def refresh_handler(self, fn: RefreshHandler) -> RefreshHandler:
        """Decorator: register fn as the refresh handler."""
        self._refresh_handler = fn
        return fn

    @property
    def stats(self) -> WorkerStats:
        """Counters since start(), summed over the members."""
        total = WorkerStats()
        for w in self._members.values():
            s = w.stats
            for k in vars(total):
                setattr(total, k, getattr(total, k) + getattr(s, k))
        return total

    @property
    def member_nodes(self) -> List[Optional[str]]:
        """The node ids leased from ('' for the node given, in single-node mode)."""
        return list(self._members)

    @property
    def is_running(self) -> bool:
        return bool(self._members) and not self._stopping

    def _report(self, err: BaseException, ctx: WorkerErrorContext) -> None:
        try:
            if self._on_error is not None:
                self._on_error(to_silo_error(err), ctx)
            else:
                log.error("silo worker %s: %s: %s", self.worker_id, ctx.phase, err)
        except Exception:
            pass

    async def _read_map(self) -> ShardMap:
        """The map of the node given (one connection, closed after)."""
        try:
            async with await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True,
                                                             row_factory=dict_row) as c:
                node = await (await c.execute(SQL_NODE_INFO)).fetchall()
                rows = await (await c.execute(SQL_CLUSTER_INFO)).fetchall()
                return ShardMap.from_rows(node[0] if node else None, rows)
        except psycopg.Error as e:
            raise to_silo_error(e) from e

    def _conninfo_of(self, hint: Optional[str]) -> str:
        return self._conninfo if hint is None else owner_conninfo(self._conninfo, hint)

    async def start(self) -> None:
        """Read the map, start a worker for the node given and one for every other owner in it.

        Raises when the node given cannot be reached; another member that
        cannot is left out until the next map read.
        """
        if self._stopping:
            raise SiloError("a stopped worker cannot start again: make a new one")
        if self._members:
            return
        self.map = await self._read_map()
        await self._add(self.map.node_id or "", None)
        await self._add_owners(self.map)
        if not self.map.single_node and self._map_refresh > 0:
            self._refresher = asyncio.ensure_future(self._refresh_loop())

    async def _refresh_loop(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self._map_refresh)
            try:
                self.map = await self._read_map()
                await self._add_owners(self.map)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self._report(e, WorkerErrorContext("map"))

    async def _add_owners(self, m: ShardMap) -> None:
        if m.single_node or self._stopping:
            return
        for s in m.shards:
            if s.is_local or not s.owner_conninfo or s.owner_node_id == m.node_id:
                continue
            key = s.owner_node_id if s.owner_node_id is not None else f"conninfo:{s.owner_conninfo}"
            if key in self._members:
                continue
            try:
                await self._add(key, s.owner_conninfo)
            except Exception as e:
                self._report(e, WorkerErrorContext("connect"))

    async def _add(self, key: str, hint: Optional[str]) -> None:
        """Start a worker for one node (hint None: the node given)."""
        w = AsyncSiloWorker(self._conninfo_of(hint), **{**self._options, "worker_id": self.worker_id},
                            handler=self._handler, refresh_handler=self._refresh_handler)
        if self.map is not None and not self.map.single_node:
            w._slots = self._slots
            self._slots.add(w._wake)
            w._redirect = self._pool_for
            w._cluster = True
        await w.start()
        self._members[key] = w

    def _pool_for(self, err: NotOwnerError) -> Optional[AsyncPool]:
        """The pool a report follows an SL020 to: the new owner's."""
        if not err.owner_conninfo:
            return None
        key = err.owner_node_id if err.owner_node_id is not None else f"conninfo:{err.owner_conninfo}"
        pool = self._report_pools.get(key)
        if pool is None:
            me = self.map.node_id if self.map else None
            hint = None if err.owner_node_id is not None and err.owner_node_id == me else err.owner_conninfo
            pool = AsyncPool(self._conninfo_of(hint), 2, self._options.get("application_name", "silo-python-worker"))
            self._report_pools[key] = pool
        return pool

    async def stop(self, grace_period: Optional[float] = None) -> None:
        """Stop every member's worker (AsyncSiloWorker.stop, in parallel), then close the report pools."""
        if self._stop_task is None:
            self._stop_task = asyncio.ensure_future(self._shutdown(grace_period))
        await asyncio.shield(self._stop_task)

    async def _shutdown(self, grace_period: Optional[float]) -> None:
        self._stopping = True
        if self._refresher is not None:
            self._refresher.cancel()
        await asyncio.gather(*(w.stop(grace_period) for w in self._members.values()), return_exceptions=True)
        for p in self._report_pools.values():
            await p.close()

    async def __aenter__(self) -> "AsyncSiloClusterWorker":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()


class SiloClusterWorker(SiloWorker):
    """The synchronous cluster worker: AsyncSiloClusterWorker on an event loop in a thread of its own."""

    def __init__(self, conninfo: str = "", **options: Any):
        self._aw = AsyncSiloClusterWorker(conninfo, **options)  # type: ignore[assignment]
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._stop_requested = threading.Event()
        self._stop_lock = threading.Lock()

    @property
    def member_nodes(self) -> List[Optional[str]]:
        return self._aw.member_nodes  # type: ignore[attr-defined]
