/*-------------------------------------------------------------------------
 *
 * hash.c
 *	  The tenant hash, computed on the client: PostgreSQL's
 *	  hash_bytes_extended (common/hashfn.c) of the tenant's UTF-8 bytes
 *	  with seed 0, read as a signed 64-bit integer.  That is what
 *	  hashtextextended(tenant, 0) gives for silo's tenant columns (collation
 *	  "C"), and what shard ranges are ranges of (docs/cluster.md).
 *
 * The function is Bob Jenkins' lookup3-style hash ("hashlittle"), in the
 * 64-bit form PostgreSQL uses for its extended hashes: three 32-bit
 * registers start at 0x9e3779b9 + length + 3923095; a seed, if any, is
 * added to a (high half) and b (low half) and mixed in; the key is taken
 * 12 bytes at a time into a, b and c (little-endian words), each block
 * followed by mix(); the last 0-11 bytes are added byte by byte into the
 * same positions (c's lowest byte stays zero: it was reserved for the
 * length in lookup2), and final() runs even on an empty key.  The result
 * is b in the high half and c in the low half.
 *
 * The server reads the key's words in native byte order; every supported
 * server is little-endian, so this reads bytes explicitly little-endian
 * and gives the server's numbers on any client.
 *
 * Also here: shard bounds as 128-bit integers (ranges run to 2^63, one
 * past int64), and small parsers.
 *
 * tools/siloctl/hash.c
 *
 *-------------------------------------------------------------------------
 */
#include "siloctl.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* rotate a 32-bit word left by k bits */
#define ROT(x, k) (((x) << (k)) | ((x) >> (32 - (k))))

/* mix three registers reversibly (lookup3's mix) */
#define MIX(a, b, c) \
do { \
	a -= c; a ^= ROT(c, 4); c += b; \
	b -= a; b ^= ROT(a, 6); a += c; \
	c -= b; c ^= ROT(b, 8); b += a; \
	a -= c; a ^= ROT(c, 16); c += b; \
	b -= a; b ^= ROT(a, 19); a += c; \
	c -= b; c ^= ROT(b, 4); b += a; \
} while (0)

/* final mixing of three registers (lookup3's final) */
#define FINAL(a, b, c) \
do { \
	c ^= b; c -= ROT(b, 14); \
	a ^= c; a -= ROT(c, 11); \
	b ^= a; b -= ROT(a, 25); \
	c ^= b; c -= ROT(b, 16); \
	a ^= c; a -= ROT(c, 4); \
	b ^= a; b -= ROT(a, 14); \
	c ^= b; c -= ROT(b, 24); \
} while (0)

/*
 * le32
 *		Four bytes as a little-endian 32-bit word.
 */
static inline uint32_t
le32(const unsigned char *p)
{
	return (uint32_t) p[0] | ((uint32_t) p[1] << 8) |
		((uint32_t) p[2] << 16) | ((uint32_t) p[3] << 24);
}

/*
 * hash_bytes_extended
 *		PostgreSQL's 64-bit hash of keylen bytes at k with a seed (see the
 *		file header for the algorithm).  The server takes the length as an
 *		int; tenants are at most 64 characters, far below that.
 */
uint64_t
hash_bytes_extended(const unsigned char *k, size_t keylen, uint64_t seed)
{
	uint32_t	a,
				b,
				c;
	size_t		len = keylen;

	a = b = c = 0x9e3779b9 + (uint32_t) len + 3923095;
	if (seed != 0)
	{
		a += (uint32_t) (seed >> 32);
		b += (uint32_t) seed;
		MIX(a, b, c);
	}

	while (len >= 12)
	{
		a += le32(k);
		b += le32(k + 4);
		c += le32(k + 8);
		MIX(a, b, c);
		k += 12;
		len -= 12;
	}

	switch (len)
	{
		case 11:
			c += (uint32_t) k[10] << 24;
			/* fall through */
		case 10:
			c += (uint32_t) k[9] << 16;
			/* fall through */
		case 9:
			/* c's lowest byte is left alone */
			c += (uint32_t) k[8] << 8;
			/* fall through */
		case 8:
			b += (uint32_t) k[7] << 24;
			/* fall through */
		case 7:
			b += (uint32_t) k[6] << 16;
			/* fall through */
		case 6:
			b += (uint32_t) k[5] << 8;
			/* fall through */
		case 5:
			b += k[4];
			/* fall through */
		case 4:
			a += (uint32_t) k[3] << 24;
			/* fall through */
		case 3:
			a += (uint32_t) k[2] << 16;
			/* fall through */
		case 2:
			a += (uint32_t) k[1] << 8;
			/* fall through */
		case 1:
			a += k[0];
			/* fall through */
		case 0:
			break;
	}
	FINAL(a, b, c);
	return ((uint64_t) b << 32) | c;
}

/*
 * tenant_hash
 *		A tenant's hash: hash_bytes_extended of its bytes, seed 0, as a
 *		signed 64-bit integer (what silo.tenant_hash returns).
 */
int64_t
tenant_hash(const char *tenant, size_t len)
{
	return (int64_t) hash_bytes_extended((const unsigned char *) tenant, len, 0);
}

/*
 * parse_int128
 *		A decimal integer (optional sign, digits only, as numeric's text
 *		form of a shard bound) into a 128-bit integer; false when it is not
 *		one or has more than 38 digits.
 */
bool
parse_int128(const char *s, int128_t *out)
{
	bool		neg = false;
	int128_t	v = 0;
	int			digits = 0;

	if (*s == '-' || *s == '+')
		neg = *s++ == '-';
	for (; *s >= '0' && *s <= '9'; s++)
	{
		if (++digits > 38)
			return false;
		v = v * 10 + (*s - '0');
	}
	if (*s != '\0' || digits == 0)
		return false;
	*out = neg ? -v : v;
	return true;
}

/*
 * format_int128
 *		A 128-bit integer as decimal text.
 */
void
format_int128(int128_t v, char *buf, size_t size)
{
	char		tmp[48];
	char	   *p = tmp + sizeof(tmp) - 1;
	bool		neg = v < 0;
	unsigned __int128 u = neg ? (unsigned __int128) (-(v + 1)) + 1 : (unsigned __int128) v;

	*p = '\0';
	do
	{
		*--p = (char) ('0' + (int) (u % 10));
		u /= 10;
	} while (u > 0);
	if (neg)
		*--p = '-';
	snprintf(buf, size, "%s", p);
}

/*
 * utf8_valid
 *		Whether len bytes at s are well-formed UTF-8 (no overlong forms, no
 *		surrogates, nothing above U+10FFFF, no NUL), as PostgreSQL requires
 *		of a UTF-8 database's text.
 */
bool
utf8_valid(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *) s;
	const unsigned char *end = p + len;

	while (p < end)
	{
		unsigned char c = *p;
		int			n;
		uint32_t	cp;

		if (c == 0)
			return false;
		if (c < 0x80)
		{
			p++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
		{
			n = 1;
			cp = c & 0x1f;
		}
		else if (c >= 0xe0 && c <= 0xef)
		{
			n = 2;
			cp = c & 0x0f;
		}
		else if (c >= 0xf0 && c <= 0xf4)
		{
			n = 3;
			cp = c & 0x07;
		}
		else
			return false;
		if (end - p <= n)
			return false;
		for (int i = 1; i <= n; i++)
		{
			if ((p[i] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (p[i] & 0x3f);
		}
		if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
			(cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
			return false;
		p += n + 1;
	}
	return true;
}

/*
 * parse_shard_id
 *		A shard id: a decimal integer 0..INT_MAX.
 */
bool
parse_shard_id(const char *s, int *out)
{
	char	   *end;
	long		v;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < 0 || v > INT_MAX)
		return false;
	*out = (int) v;
	return true;
}
