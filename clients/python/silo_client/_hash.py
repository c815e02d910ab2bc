"""The tenant hash of cluster mode (docs/cluster.md, "Tenants, shards and the hash").

PostgreSQL's hash_bytes_extended of the tenant's UTF-8 bytes with seed 0,
read as a signed 64-bit integer: what silo.tenant_hash and
hashtextextended(tenant, 0) return, and what shard ranges are ranges of.
The mixing is Bob Jenkins' lookup3 on 32-bit words (as tools/siloctl's
hash.c does it), words read little-endian as every supported server reads
them; Python's integers are masked to 32 and 64 bits.
"""

from __future__ import annotations

from typing import List

_M32 = 0xFFFFFFFF


def _rot(x: int, k: int) -> int:
    """x rotated left by k bits (32-bit)."""
    return ((x << k) | (x >> (32 - k))) & _M32


def _mix(r: List[int]) -> None:
    """lookup3's reversible mix of the three registers."""
    a, b, c = r
    a = (a - c) & _M32; a ^= _rot(c, 4); c = (c + b) & _M32  # noqa: E702
    b = (b - a) & _M32; b ^= _rot(a, 6); a = (a + c) & _M32  # noqa: E702
    c = (c - b) & _M32; c ^= _rot(b, 8); b = (b + a) & _M32  # noqa: E702
    a = (a - c) & _M32; a ^= _rot(c, 16); c = (c + b) & _M32  # noqa: E702
    b = (b - a) & _M32; b ^= _rot(a, 19); a = (a + c) & _M32  # noqa: E702
    c = (c - b) & _M32; c ^= _rot(b, 4); b = (b + a) & _M32  # noqa: E702
    r[:] = [a, b, c]


def _final(r: List[int]) -> None:
    """lookup3's final mixing of the three registers."""
    a, b, c = r
    c ^= b; c = (c - _rot(b, 14)) & _M32  # noqa: E702
    a ^= c; a = (a - _rot(c, 11)) & _M32  # noqa: E702
    b ^= a; b = (b - _rot(a, 25)) & _M32  # noqa: E702
    c ^= b; c = (c - _rot(b, 16)) & _M32  # noqa: E702
    a ^= c; a = (a - _rot(c, 4)) & _M32  # noqa: E702
    b ^= a; b = (b - _rot(a, 14)) & _M32  # noqa: E702
    c ^= b; c = (c - _rot(b, 24)) & _M32  # noqa: E702
    r[:] = [a, b, c]


def hash_bytes_extended(k: bytes) -> int:
    """PostgreSQL's hash_bytes_extended(k, len, seed 0) as an unsigned 64-bit int."""
    n = len(k)
    init = (0x9E3779B9 + n + 3923095) & _M32
    r = [init, init, init]
    i = 0
    while n >= 12:
        r[0] = (r[0] + int.from_bytes(k[i:i + 4], "little")) & _M32
        r[1] = (r[1] + int.from_bytes(k[i + 4:i + 8], "little")) & _M32
        r[2] = (r[2] + int.from_bytes(k[i + 8:i + 12], "little")) & _M32
        _mix(r)
        i += 12
        n -= 12
    tail = k[i:]
    # the C switch's fall-through: bytes 0-3 into a, 4-7 into b, 8-10 into c's upper three bytes
    for j, byte in enumerate(tail):
        reg, shift = (0, 8 * j) if j < 4 else (1, 8 * (j - 4)) if j < 8 else (2, 8 * (j - 7))
        r[reg] = (r[reg] + (byte << shift)) & _M32
    _final(r)
    return (r[1] << 32) | r[2]


def tenant_hash(tenant: str) -> int:
    """A tenant's hash: what silo.tenant_hash(tenant) returns (a signed 64-bit int)."""
    h = hash_bytes_extended(tenant.encode("utf-8"))
    return h - (1 << 64) if h >= (1 << 63) else h
