/**
 * The tenant hash of cluster mode (docs/cluster.md, "Tenants, shards and the
 * hash"): PostgreSQL's hash_bytes_extended of the tenant's UTF-8 bytes with
 * seed 0, read as a signed 64-bit integer -- what silo.tenant_hash and
 * hashtextextended(tenant, 0) return, and what shard ranges are ranges of.
 * The mixing is Bob Jenkins' lookup3 on 32-bit words (as tools/siloctl's
 * hash.c does it); the words are read little-endian, as every supported
 * server reads them.
 */

/** The 32-bit words of the hash; all arithmetic wraps at 2^32. */
interface Regs {
  a: number;
  b: number;
  c: number;
}

/** x rotated left by k bits, as an unsigned 32-bit number. */
function rot(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

/** lookup3's reversible mix of the three registers. */
function mix(r: Regs): void {
  let { a, b, c } = r;
  a = (a - c) >>> 0; a = (a ^ rot(c, 4)) >>> 0; c = (c + b) >>> 0;
  b = (b - a) >>> 0; b = (b ^ rot(a, 6)) >>> 0; a = (a + c) >>> 0;
  c = (c - b) >>> 0; c = (c ^ rot(b, 8)) >>> 0; b = (b + a) >>> 0;
  a = (a - c) >>> 0; a = (a ^ rot(c, 16)) >>> 0; c = (c + b) >>> 0;
  b = (b - a) >>> 0; b = (b ^ rot(a, 19)) >>> 0; a = (a + c) >>> 0;
  c = (c - b) >>> 0; c = (c ^ rot(b, 4)) >>> 0; b = (b + a) >>> 0;
  r.a = a; r.b = b; r.c = c;
}

/** lookup3's final mixing of the three registers. */
function final(r: Regs): void {
  let { a, b, c } = r;
  c = (c ^ b) >>> 0; c = (c - rot(b, 14)) >>> 0;
  a = (a ^ c) >>> 0; a = (a - rot(c, 11)) >>> 0;
  b = (b ^ a) >>> 0; b = (b - rot(a, 25)) >>> 0;
  c = (c ^ b) >>> 0; c = (c - rot(b, 16)) >>> 0;
  a = (a ^ c) >>> 0; a = (a - rot(c, 4)) >>> 0;
  b = (b ^ a) >>> 0; b = (b - rot(a, 14)) >>> 0;
  c = (c ^ b) >>> 0; c = (c - rot(b, 24)) >>> 0;
  r.a = a; r.b = b; r.c = c;
}

/** The little-endian 32-bit word of k at offset i. */
function le32(k: Uint8Array, i: number): number {
  return (k[i] | (k[i + 1] << 8) | (k[i + 2] << 16) | (k[i + 3] << 24)) >>> 0;
}

/**
 * PostgreSQL's hash_bytes_extended(k, length, seed 0), as an unsigned
 * 64-bit BigInt.
 */
export function hashBytesExtended(k: Uint8Array): bigint {
  let len = k.length;
  const init = (0x9e3779b9 + len + 3923095) >>> 0;
  const r: Regs = { a: init, b: init, c: init };
  let i = 0;
  while (len >= 12) {
    r.a = (r.a + le32(k, i)) >>> 0;
    r.b = (r.b + le32(k, i + 4)) >>> 0;
    r.c = (r.c + le32(k, i + 8)) >>> 0;
    mix(r);
    i += 12;
    len -= 12;
  }
  /* the tail, as the C switch's fall-through adds it (c's lowest byte is left alone) */
  const at = (j: number): number => k[i + j];
  if (len >= 11) r.c = (r.c + (at(10) << 24 >>> 0)) >>> 0;
  if (len >= 10) r.c = (r.c + (at(9) << 16)) >>> 0;
  if (len >= 9) r.c = (r.c + (at(8) << 8)) >>> 0;
  if (len >= 8) r.b = (r.b + (at(7) << 24 >>> 0)) >>> 0;
  if (len >= 7) r.b = (r.b + (at(6) << 16)) >>> 0;
  if (len >= 6) r.b = (r.b + (at(5) << 8)) >>> 0;
  if (len >= 5) r.b = (r.b + at(4)) >>> 0;
  if (len >= 4) r.a = (r.a + (at(3) << 24 >>> 0)) >>> 0;
  if (len >= 3) r.a = (r.a + (at(2) << 16)) >>> 0;
  if (len >= 2) r.a = (r.a + (at(1) << 8)) >>> 0;
  if (len >= 1) r.a = (r.a + at(0)) >>> 0;
  final(r);
  return (BigInt(r.b) << 32n) | BigInt(r.c);
}

const encoder = new TextEncoder();

/**
 * A tenant's hash: what silo.tenant_hash(tenant) returns, a signed 64-bit
 * BigInt (the tenant's UTF-8 bytes, hashed as above).
 */
export function tenantHash(tenant: string): bigint {
  return BigInt.asIntN(64, hashBytesExtended(encoder.encode(tenant)));
}
