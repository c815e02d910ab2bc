"""Routing by tenant in cluster mode (docs/cluster.md), shared by the sync and asyncio clients.

The shard map as a node knows it (silo.cluster_info, silo.node_info), the
lookup of a tenant's shard, the connection string of an owner (the hint's
address, your credentials), and Router / AsyncRouter, which send a call to
the tenant's owner, follow SL020's hint, retry SL021 with a backoff and keep
the map fresh.  The routers are generic over what a member is (a client, a
worker's pool, or a test's fake), so that their rules are tested alone.
This mirrors clients/node/src/router.ts.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Awaitable, Callable, Dict, Generic, List, Mapping, Optional, TypeVar

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ._hash import tenant_hash
from .errors import NotOwnerError, ShardUnavailableError, is_connection_error

M = TypeVar("M")
T = TypeVar("T")

MIN = -(1 << 63)
MAX = 1 << 63

SQL_CLUSTER_INFO = ("SELECT shard_id, range_start::text AS range_start, range_end::text AS range_end,"
                    " owner_node_id, owner_conninfo, state, is_local FROM silo.cluster_info ORDER BY range_start")
SQL_NODE_INFO = "SELECT node_id, mode FROM silo.node_info"


@dataclass(frozen=True)
class Shard:
    """One shard of the map: [start, end) of the hash line, and its owner."""

    id: int
    start: int
    end: int
    owner_node_id: Optional[str]
    owner_conninfo: Optional[str]
    state: str
    is_local: bool


class ShardMap:
    """A node's map: its own id and mode, and its shards by start, with a lookup by hash."""

    def __init__(self, node_id: Optional[str], mode: str, shards: List[Shard]):
        self.node_id = node_id
        self.mode = mode
        self.shards = sorted(shards, key=lambda s: s.start)

    @classmethod
    def from_rows(cls, node: Optional[Mapping[str, Any]], rows: List[Mapping[str, Any]]) -> "ShardMap":
        """The map of SQL_NODE_INFO's row and SQL_CLUSTER_INFO's rows."""
        return cls(node.get("node_id") if node else None, (node or {}).get("mode") or "cluster",
                   [Shard(int(r["shard_id"]), int(r["range_start"]), int(r["range_end"]), r["owner_node_id"],
                          r["owner_conninfo"], str(r["state"]), r["is_local"] is True) for r in rows])

    @property
    def single_node(self) -> bool:
        """A single-node silo: one local shard over the whole line, every call goes to the node asked."""
        if self.mode == "single-node":
            return True
        return (len(self.shards) == 1 and self.shards[0].is_local and self.shards[0].start == MIN
                and self.shards[0].end == MAX)

    def shard_of_hash(self, h: int) -> Optional[Shard]:
        """The shard whose range holds h, or None."""
        lo, hi = 0, len(self.shards) - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            s = self.shards[mid]
            if h < s.start:
                hi = mid - 1
            elif h >= s.end:
                lo = mid + 1
            else:
                return s
        return None

    def shard_of(self, tenant: str) -> Optional[Shard]:
        """The tenant's shard, or None."""
        return self.shard_of_hash(tenant_hash(tenant))

    def with_owner(self, shard_id: int, node_id: Optional[str], conninfo: str) -> "ShardMap":
        """A copy with one shard's owner replaced (an SL020's hint)."""
        return ShardMap(self.node_id, self.mode, [
            s if s.id != shard_id else replace(s, owner_node_id=node_id, owner_conninfo=conninfo,
                                               is_local=node_id is not None and node_id == self.node_id)
            for s in self.shards])


def owner_conninfo(seed: str, hint: str) -> str:
    """The connection to an owner: seed's keywords without host, hostaddr and port, then every keyword of hint.

    An advertised conninfo says where a node is, never who you are: your
    user, password and sslmode stay (as siloctl does).
    """
    base = conninfo_to_dict(seed) if seed else {}
    for k in ("host", "hostaddr", "port"):
        base.pop(k, None)
    base.update(conninfo_to_dict(hint))
    return make_conninfo("", **{k: v for k, v in base.items() if v is not None})


class _RouterBase(Generic[M]):
    """The state and rules Router and AsyncRouter share."""

    def __init__(self, seed: M, member: Callable[[Optional[str], str], M], max_hops: int = 3,
                 retry_timeout: float = 5.0, retry_delay: float = 0.1):
        self.seed = seed
        self._member = member
        self.max_hops = max_hops
        self.retry_timeout = retry_timeout
        self.retry_delay = retry_delay
        self.map: Optional[ShardMap] = None
        # SL020 hints by shard, with the owner the map named before: kept over a
        # map read that still names that owner, dropped once a read names another
        self._hints: Dict[int, Any] = {}

    def member_of(self, m: ShardMap, tenant: str) -> M:
        """The member a tenant's calls go to by the map (the seed when the shard has no owner)."""
        if m.single_node:
            return self.seed
        s = m.shard_of(tenant)
        if s is None or s.is_local or not s.owner_conninfo:
            return self.seed
        return self._member(s.owner_node_id, s.owner_conninfo)

    def apply_hint(self, err: NotOwnerError) -> None:
        """Apply an SL020's hint to the map, so that the next call goes there at once."""
        if self.map is None or err.shard is None or not err.owner_conninfo:
            return
        old = next((s for s in self.map.shards if s.id == err.shard), None)
        before = self._hints[err.shard][0] if err.shard in self._hints else (old.owner_node_id if old else None)
        self._hints[err.shard] = (before, err.owner_node_id, err.owner_conninfo)
        self.map = self.map.with_owner(err.shard, err.owner_node_id, err.owner_conninfo)

    def _adopt(self, m: ShardMap, from_seed: bool) -> ShardMap:
        """Make a map just read the current one (the seed's view of is_local, hints kept or dropped)."""
        if not from_seed:
            me = self.map.node_id if self.map else None
            m = ShardMap(me, m.mode, [replace(s, is_local=s.owner_node_id is not None and s.owner_node_id == me)
                                      for s in m.shards])
        for sid, (before, node, conninfo) in list(self._hints.items()):
            s = next((x for x in m.shards if x.id == sid), None)
            if s is not None and s.owner_node_id == before and node != before:
                m = m.with_owner(sid, node, conninfo)
            else:
                del self._hints[sid]
        self.map = m
        return m

    def _candidates(self) -> List[M]:
        out = [self.seed]
        for s in (self.map.shards if self.map else []):
            if s.owner_conninfo and not s.is_local:
                c = self._member(s.owner_node_id, s.owner_conninfo)
                if all(c is not x for x in out):
                    out.append(c)
        return out

    def _next_after(self, err: NotOwnerError, hops: int, tried: List[M]) -> M:
        """Where an SL020 with an owner sends the call; NotOwnerError for a loop or too many hops."""
        self.apply_hint(err)
        me = self.map.node_id if self.map else None
        nxt = self.seed if err.owner_node_id is not None and err.owner_node_id == me else \
            self._member(err.owner_node_id, err.owner_conninfo or "")
        if hops > self.max_hops or any(nxt is t for t in tried):
            why = f"more than {self.max_hops} hints followed" if hops > self.max_hops else \
                "the hint leads back to a node already tried"
            raise NotOwnerError(f"{err.message} ({why})", err.code, err.detail, err.hint, err.where) from err
        return nxt


class Router(_RouterBase[M]):
    """Sends a tenant's calls to its shard's owner (threads welcome).

    The map is read once from the seed and again when routing fails: after
    an SL020 (whose hint is applied at once), before each retry of an SL021,
    and after a member's connection failed.  On a single-node silo every
    call goes to the seed with no extra round trip.
    """

    def __init__(self, seed: M, read_map: Callable[[M], ShardMap], member: Callable[[Optional[str], str], M],
                 **options: Any):
        super().__init__(seed, member, **options)
        self._read_map = read_map
        self._lock = threading.Lock()
        self._stale = False

    def refresh(self) -> ShardMap:
        """Read the map again (from the seed; when it cannot be reached, from another member)."""
        first: Optional[BaseException] = None
        with self._lock:
            for m in self._candidates():
                try:
                    got = self._adopt(self._read_map(m), m is self.seed)
                    self._stale = False
                    return got
                except Exception as e:
                    first = first or e
                    if not is_connection_error(e):
                        break
        assert first is not None
        raise first

    def ensure_map(self) -> ShardMap:
        """The map, read first if it has not been (or when a failure asked for a new read)."""
        if self.map is None or self._stale:
            try:
                return self.refresh()
            except Exception:
                if self.map is None:
                    raise
        return self.map

    def run(self, tenant: str, call: Callable[[M], T]) -> T:
        """call(member) on the tenant's owner; SL020 followed, SL021 retried (see the module's doc)."""
        member = self.member_of(self.ensure_map(), tenant)
        deadline = time.monotonic() + self.retry_timeout
        pause = self.retry_delay
        hops = 0
        tried = [member]
        while True:
            try:
                return call(member)
            except NotOwnerError as err:
                if err.owner_conninfo:
                    hops += 1
                    member = self._next_after(err, hops, tried)
                    self._stale = True
                    tried.append(member)
                    continue
                last: BaseException = err
            except ShardUnavailableError as err:
                last = err
            except Exception as err:
                if is_connection_error(err) and member is not self.seed:
                    self._stale = True
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                raise last
            time.sleep(min(pause, left))
            pause = min(pause * 2, 2.0)
            try:
                member = self.member_of(self.refresh(), tenant)
            except Exception:
                pass  # the map could not be read: the same member again
            tried = [member]


class AsyncRouter(_RouterBase[M]):
    """Router on asyncio: the same rules, call and read_map coroutines."""

    def __init__(self, seed: M, read_map: Callable[[M], Awaitable[ShardMap]],
                 member: Callable[[Optional[str], str], M], **options: Any):
        super().__init__(seed, member, **options)
        self._read_map = read_map
        self._stale = False

    async def refresh(self) -> ShardMap:
        """Read the map again (from the seed; when it cannot be reached, from another member)."""
        first: Optional[BaseException] = None
        for m in self._candidates():
            try:
                got = await self._read_map(m)
                self._stale = False
                return self._adopt(got, m is self.seed)
            except Exception as e:
                first = first or e
                if not is_connection_error(e):
                    break
        assert first is not None
        raise first

    async def ensure_map(self) -> ShardMap:
        """The map, read first if it has not been (or when a failure asked for a new read)."""
        if self.map is None or self._stale:
            try:
                return await self.refresh()
            except Exception:
                if self.map is None:
                    raise
        return self.map

    async def run(self, tenant: str, call: Callable[[M], Awaitable[T]]) -> T:
        """await call(member) on the tenant's owner; SL020 followed, SL021 retried."""
        member = self.member_of(await self.ensure_map(), tenant)
        deadline = time.monotonic() + self.retry_timeout
        pause = self.retry_delay
        hops = 0
        tried = [member]
        while True:
            try:
                return await call(member)
            except NotOwnerError as err:
                if err.owner_conninfo:
                    hops += 1
                    member = self._next_after(err, hops, tried)
                    self._stale = True
                    tried.append(member)
                    continue
                last: BaseException = err
            except ShardUnavailableError as err:
                last = err
            except Exception as err:
                if is_connection_error(err) and member is not self.seed:
                    self._stale = True
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                raise last
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, 2.0)
            try:
                member = self.member_of(await self.refresh(), tenant)
            except Exception:
                pass
            tried = [member]


__all__ = ["Shard", "ShardMap", "Router", "AsyncRouter", "owner_conninfo", "tenant_hash", "SQL_CLUSTER_INFO",
           "SQL_NODE_INFO"]
