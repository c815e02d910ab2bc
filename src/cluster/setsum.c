/*-------------------------------------------------------------------------
 *
 * setsum.c
 *	  A composable checksum of a multiset ("setsum"): cluster mode moves a
 *	  shard's rows to another node and checks, table by table, that both
 *	  nodes hold the same multiset of rows.  The checksum of a table can be
 *	  computed in parts and the parts added (the rows copied before a pause
 *	  plus the tail written during it), and rows deleted meanwhile can be
 *	  subtracted.
 *
 *	  An item is hashed with SHA-256 (PostgreSQL's cryptohash, OpenSSL
 *	  here); the digest is read as 8 little-endian 32-bit lanes, and lane i
 *	  is added modulo the prime silo_setsum_primes[i].  The empty multiset
 *	  is all zeros; union is lane-wise addition, removal lane-wise
 *	  subtraction, both O(1) and independent of order.  silo_cluster.h
 *	  documents the text form (64 hexadecimal digits).
 *
 *	  The idea is Dropbox's setsum, which hashes with SHA3-256: values
 *	  computed here are not comparable with theirs, only with silo's.
 *
 *	  SQL (sql/silo--1.6--1.7.sql): the aggregate silo.setsum(text), and
 *	  silo.setsum_add, silo.setsum_sub, silo.setsum_item.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_cluster.h"

#include "common/cryptohash.h"
#include "common/sha2.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

PG_FUNCTION_INFO_V1(silo_setsum_accum);
PG_FUNCTION_INFO_V1(silo_setsum_combine);
PG_FUNCTION_INFO_V1(silo_setsum_serialize);
PG_FUNCTION_INFO_V1(silo_setsum_deserialize);
PG_FUNCTION_INFO_V1(silo_setsum_final);
PG_FUNCTION_INFO_V1(silo_setsum_add);
PG_FUNCTION_INFO_V1(silo_setsum_sub);
PG_FUNCTION_INFO_V1(silo_setsum_item);

/*
 * The moduli: the 8 largest primes below 2^32 (2^32 - 5, - 17, - 65,
 * - 99, - 107, - 135, - 153, - 185), lane 0 first.  Each is above 2^31,
 * so a lane of a digest (below 2^32) is reduced by at most one
 * subtraction, and the sum of two reduced lanes fits in 33 bits.
 * Changing one changes every setsum: the regress test pins values.
 */
const uint32 silo_setsum_primes[SILO_SETSUM_LANES] = {
	4294967291U,				/* 0xfffffffb */
	4294967279U,				/* 0xffffffef */
	4294967231U,				/* 0xffffffbf */
	4294967197U,				/* 0xffffff9d */
	4294967189U,				/* 0xffffff95 */
	4294967161U,				/* 0xffffff79 */
	4294967143U,				/* 0xffffff67 */
	4294967111U,				/* 0xffffff47 */
};

/* the size of the aggregate's state once serialized (parallel aggregation) */
#define SETSUM_SERIAL_LEN		(SILO_SETSUM_LANES * 4)

/*
 * One SHA-256 context per backend, reused for every item (init, update,
 * final).  Creating and freeing a context per item made the aggregate
 * about 45% slower: 636 against 436 ms over a million 109-byte texts
 * (src/cluster/README.md).
 *
 * With OpenSSL, PostgreSQL ties a cryptohash context to the resource owner
 * current at its creation and frees it when that owner is released, so a
 * context made under a query's owner could not outlive the query; without
 * OpenSSL, it is palloc'd in the current memory context.  This one is made
 * in TopMemoryContext under a resource owner of silo's that is never
 * released: it lives as long as the backend, whatever query or transaction
 * uses it, and an error in the middle of a hash leaves nothing to clean up
 * (the next item starts with init).
 */
static ResourceOwner setsum_owner = NULL;
static pg_cryptohash_ctx *setsum_sha256 = NULL;

/*
 * setsum_hasher: the backend's SHA-256 context, created on first use
 * (see above).
 */
static pg_cryptohash_ctx *
setsum_hasher(void)
{
	ResourceOwner saved_owner;
	MemoryContext saved_context;

	if (setsum_sha256 != NULL)
		return setsum_sha256;

	if (setsum_owner == NULL)
		setsum_owner = ResourceOwnerCreate(NULL, "silo setsum");

	saved_owner = CurrentResourceOwner;
	saved_context = MemoryContextSwitchTo(TopMemoryContext);
	CurrentResourceOwner = setsum_owner;
	PG_TRY();
	{
		setsum_sha256 = pg_cryptohash_create(PG_SHA256);
	}
	PG_FINALLY();
	{
		CurrentResourceOwner = saved_owner;
		MemoryContextSwitchTo(saved_context);
	}
	PG_END_TRY();

	if (setsum_sha256 == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	return setsum_sha256;
}

/*
 * setsum_digest: SHA-256 of len bytes at data, into digest.  A failing
 * context is dropped (the next item makes a new one) before the error.
 */
static void
setsum_digest(const char *data, size_t len, uint8 *digest)
{
	pg_cryptohash_ctx *ctx = setsum_hasher();

	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) data, len) < 0 ||
		pg_cryptohash_final(ctx, digest, PG_SHA256_DIGEST_LENGTH) < 0)
	{
		/* the reason is a static string: it survives the free */
		const char *reason = pg_cryptohash_error(ctx);

		pg_cryptohash_free(ctx);
		setsum_sha256 = NULL;
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not compute a SHA-256 hash: %s", reason)));
	}
}

/*
 * lane_add: (a + b) mod p for a, b < p; in 64 bits, as a + b may not fit
 * in 32.
 */
static inline uint32
lane_add(uint32 a, uint32 b, uint32 p)
{
	uint64		s = (uint64) a + b;

	return (uint32) (s >= p ? s - p : s);
}

/*
 * lane_sub: (a - b) mod p for a, b < p, i.e. a plus the additive inverse
 * of b.
 */
static inline uint32
lane_sub(uint32 a, uint32 b, uint32 p)
{
	return a >= b ? a - b : a + (p - b);
}

/*
 * silo_setsum_clear: make s the setsum of the empty multiset.
 */
void
silo_setsum_clear(SiloSetsum *s)
{
	memset(s, 0, sizeof(SiloSetsum));
}

/*
 * silo_setsum_add_item: add one item (len bytes at data) to s.  Lane i of
 * the item is digest bytes 4i..4i+3 read little-endian, reduced modulo
 * its prime (one subtraction: the primes are above 2^31).
 */
void
silo_setsum_add_item(SiloSetsum *s, const char *data, size_t len)
{
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	int			i;

	StaticAssertStmt(PG_SHA256_DIGEST_LENGTH == SILO_SETSUM_LANES * 4,
					 "a SHA-256 digest fills the lanes exactly");

	setsum_digest(data, len, digest);
	for (i = 0; i < SILO_SETSUM_LANES; i++)
	{
		const uint8 *b = digest + 4 * i;
		uint32		p = silo_setsum_primes[i];
		uint32		v = (uint32) b[0] | (uint32) b[1] << 8 |
			(uint32) b[2] << 16 | (uint32) b[3] << 24;

		if (v >= p)
			v -= p;
		s->lane[i] = lane_add(s->lane[i], v, p);
	}
}

/*
 * silo_setsum_union: into becomes the setsum of the union (as multisets)
 * of what into and other summarize.
 */
void
silo_setsum_union(SiloSetsum *into, const SiloSetsum *other)
{
	int			i;

	for (i = 0; i < SILO_SETSUM_LANES; i++)
		into->lane[i] = lane_add(into->lane[i], other->lane[i],
								 silo_setsum_primes[i]);
}

/*
 * silo_setsum_subtract: from loses the items other summarizes.  Correct
 * when other's items are a sub-multiset of from's; otherwise the result
 * is the setsum of nothing real, but (from - other) + other is from again.
 */
void
silo_setsum_subtract(SiloSetsum *from, const SiloSetsum *other)
{
	int			i;

	for (i = 0; i < SILO_SETSUM_LANES; i++)
		from->lane[i] = lane_sub(from->lane[i], other->lane[i],
								 silo_setsum_primes[i]);
}

/*
 * silo_setsum_to_hex: the text form of s into out (SILO_SETSUM_HEX_LEN
 * digits and a terminating zero): per lane, lane 0 first, 8 lowercase
 * digits, most significant first.
 */
void
silo_setsum_to_hex(const SiloSetsum *s, char *out)
{
	static const char digits[] = "0123456789abcdef";
	int			i;
	int			j;

	for (i = 0; i < SILO_SETSUM_LANES; i++)
		for (j = 0; j < 8; j++)
			out[i * 8 + j] = digits[(s->lane[i] >> (28 - 4 * j)) & 0xf];
	out[SILO_SETSUM_HEX_LEN] = '\0';
}

/*
 * hex_value: the value of one hexadecimal digit (either case), or -1.
 */
static inline int
hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * setsum_bad_text: 22023 for a text that is not a setsum (argument
 * argname of the SQL call): either it is not 64 characters long, or the
 * first character that is not a hexadecimal digit (counted in characters,
 * not bytes).  Does not return.
 */
static void setsum_bad_text(const char *s, int len, const char *argname) pg_attribute_noreturn();

static void
setsum_bad_text(const char *s, int len, const char *argname)
{
	int			nchars = pg_mbstrlen_with_len(s, len);
	int			pos = 1;
	const char *p;

	if (nchars != SILO_SETSUM_HEX_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" is not a setsum", argname),
				 errdetail("A setsum is %d hexadecimal digits; the value given has %d characters.",
						   SILO_SETSUM_HEX_LEN, nchars)));

	for (p = s; p < s + len && hex_value(*p) >= 0; p += pg_mblen(p))
		pos++;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("argument \"%s\" is not a setsum", argname),
			 errdetail("Character %d is not a hexadecimal digit.", pos)));
}

/*
 * silo_setsum_from_text: parse the text form of a setsum (argument
 * argname of the SQL call) into out.  22023 unless it is exactly 64
 * hexadecimal digits (either case) whose lanes are each below their
 * prime: a lane at or above it comes from no setsum, and accepting it
 * would give two spellings of the same value.
 */
void
silo_setsum_from_text(text *t, const char *argname, SiloSetsum *out)
{
	const char *s = VARDATA_ANY(t);
	int			len = VARSIZE_ANY_EXHDR(t);
	int			i;

	if (len != SILO_SETSUM_HEX_LEN)
		setsum_bad_text(s, len, argname);

	for (i = 0; i < SILO_SETSUM_LANES; i++)
	{
		uint32		v = 0;
		int			j;

		for (j = 0; j < 8; j++)
		{
			int			d = hex_value(s[i * 8 + j]);

			if (d < 0)
				setsum_bad_text(s, len, argname);
			v = v << 4 | (uint32) d;
		}
		if (v >= silo_setsum_primes[i])
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("argument \"%s\" is not a setsum", argname),
					 errdetail("Lane %d (characters %d to %d) is %08x; it must be below its prime, %08x.",
							   i, i * 8 + 1, i * 8 + 8, v, silo_setsum_primes[i]),
					 errhint("A setsum comes from silo.setsum, silo.setsum_item, silo.setsum_add or silo.setsum_sub.")));
		out->lane[i] = v;
	}
}

/*
 * setsum_text: a setsum as a text Datum.
 */
static Datum
setsum_text(const SiloSetsum *s)
{
	char		hex[SILO_SETSUM_HEX_LEN + 1];

	silo_setsum_to_hex(s, hex);
	PG_RETURN_TEXT_P(cstring_to_text_with_len(hex, SILO_SETSUM_HEX_LEN));
}

/*
 * setsum_aggcontext: the aggregate's memory context; these functions keep
 * their state there and are called by nothing else.
 */
static MemoryContext
setsum_aggcontext(FunctionCallInfo fcinfo, const char *fn)
{
	MemoryContext aggcontext;

	if (!AggCheckCallContext(fcinfo, &aggcontext))
		elog(ERROR, "%s called in non-aggregate context", fn);
	return aggcontext;
}

/*
 * silo_setsum_accum(state internal, item text) -> internal: the
 * aggregate's transition.  Not strict: the first call makes the state (in
 * the aggregate's context), and a NULL item is skipped, not an error.
 * Reads the item in place; only a toasted item is copied, by detoasting.
 */
Datum
silo_setsum_accum(PG_FUNCTION_ARGS)
{
	SiloSetsum *state;

	if (PG_ARGISNULL(0))
		state = MemoryContextAllocZero(setsum_aggcontext(fcinfo, "silo_setsum_accum"),
									   sizeof(SiloSetsum));
	else
		state = (SiloSetsum *) PG_GETARG_POINTER(0);

	if (!PG_ARGISNULL(1))
	{
		text	   *item = PG_GETARG_TEXT_PP(1);

		silo_setsum_add_item(state, VARDATA_ANY(item), VARSIZE_ANY_EXHDR(item));
		PG_FREE_IF_COPY(item, 1);
	}
	PG_RETURN_POINTER(state);
}

/*
 * silo_setsum_combine(internal, internal) -> internal: adds two partial
 * states (parallel aggregation).  Not strict, so that a state made here
 * from a NULL one is allocated in the aggregate's context.
 */
Datum
silo_setsum_combine(PG_FUNCTION_ARGS)
{
	MemoryContext aggcontext = setsum_aggcontext(fcinfo, "silo_setsum_combine");
	SiloSetsum *a = PG_ARGISNULL(0) ? NULL : (SiloSetsum *) PG_GETARG_POINTER(0);
	SiloSetsum *b = PG_ARGISNULL(1) ? NULL : (SiloSetsum *) PG_GETARG_POINTER(1);

	if (b == NULL)
	{
		if (a == NULL)
			PG_RETURN_NULL();
		PG_RETURN_POINTER(a);
	}
	if (a == NULL)
	{
		a = MemoryContextAlloc(aggcontext, sizeof(SiloSetsum));
		*a = *b;
		PG_RETURN_POINTER(a);
	}
	silo_setsum_union(a, b);
	PG_RETURN_POINTER(a);
}

/*
 * silo_setsum_serialize(internal) -> bytea: a partial state as 32 bytes
 * (each lane little-endian, lane 0 first), sent from a parallel worker to
 * the leader.
 */
Datum
silo_setsum_serialize(PG_FUNCTION_ARGS)
{
	SiloSetsum *state;
	bytea	   *out;
	uint8	   *p;
	int			i;

	setsum_aggcontext(fcinfo, "silo_setsum_serialize");
	state = (SiloSetsum *) PG_GETARG_POINTER(0);
	out = (bytea *) palloc(VARHDRSZ + SETSUM_SERIAL_LEN);
	SET_VARSIZE(out, VARHDRSZ + SETSUM_SERIAL_LEN);
	p = (uint8 *) VARDATA(out);
	for (i = 0; i < SILO_SETSUM_LANES; i++)
	{
		uint32		v = state->lane[i];

		p[4 * i] = (uint8) v;
		p[4 * i + 1] = (uint8) (v >> 8);
		p[4 * i + 2] = (uint8) (v >> 16);
		p[4 * i + 3] = (uint8) (v >> 24);
	}
	PG_RETURN_BYTEA_P(out);
}

/*
 * silo_setsum_deserialize(bytea, internal) -> internal: the state that
 * silo_setsum_serialize wrote, in the aggregate's context.  Only silo
 * writes these bytes; a wrong length or lane is a bug, not bad input.
 */
Datum
silo_setsum_deserialize(PG_FUNCTION_ARGS)
{
	MemoryContext aggcontext = setsum_aggcontext(fcinfo, "silo_setsum_deserialize");
	bytea	   *in = PG_GETARG_BYTEA_PP(0);
	const uint8 *p = (const uint8 *) VARDATA_ANY(in);
	SiloSetsum *state;
	int			i;

	if (VARSIZE_ANY_EXHDR(in) != SETSUM_SERIAL_LEN)
		elog(ERROR, "serialized setsum state has %d bytes, not %d",
			 (int) VARSIZE_ANY_EXHDR(in), SETSUM_SERIAL_LEN);

	state = MemoryContextAlloc(aggcontext, sizeof(SiloSetsum));
	for (i = 0; i < SILO_SETSUM_LANES; i++)
	{
		uint32		v = (uint32) p[4 * i] | (uint32) p[4 * i + 1] << 8 |
			(uint32) p[4 * i + 2] << 16 | (uint32) p[4 * i + 3] << 24;

		if (v >= silo_setsum_primes[i])
			elog(ERROR, "serialized setsum state has lane %d out of range", i);
		state->lane[i] = v;
	}
	PG_RETURN_POINTER(state);
}

/*
 * silo_setsum_final(internal) -> text: the aggregate's result.  Not
 * strict: with no rows (or only NULL items) the result is the empty
 * multiset's setsum, 64 zeros, not NULL, so that an empty table's setsum
 * adds and compares like any other.
 */
Datum
silo_setsum_final(PG_FUNCTION_ARGS)
{
	SiloSetsum	empty;

	if (PG_ARGISNULL(0))
	{
		silo_setsum_clear(&empty);
		return setsum_text(&empty);
	}
	return setsum_text((SiloSetsum *) PG_GETARG_POINTER(0));
}

/*
 * silo_setsum_add(a text, b text) -> text: the setsum of the union of the
 * multisets a and b summarize (a table checksummed in parts).
 */
Datum
silo_setsum_add(PG_FUNCTION_ARGS)
{
	SiloSetsum	a;
	SiloSetsum	b;

	silo_setsum_from_text(PG_GETARG_TEXT_PP(0), "a", &a);
	silo_setsum_from_text(PG_GETARG_TEXT_PP(1), "b", &b);
	silo_setsum_union(&a, &b);
	return setsum_text(&a);
}

/*
 * silo_setsum_sub(a text, b text) -> text: a without the items b
 * summarizes (rows deleted while a table was being copied).
 */
Datum
silo_setsum_sub(PG_FUNCTION_ARGS)
{
	SiloSetsum	a;
	SiloSetsum	b;

	silo_setsum_from_text(PG_GETARG_TEXT_PP(0), "a", &a);
	silo_setsum_from_text(PG_GETARG_TEXT_PP(1), "b", &b);
	silo_setsum_subtract(&a, &b);
	return setsum_text(&a);
}

/*
 * silo_setsum_item(item text) -> text: the setsum of the multiset holding
 * item once (the same as silo.setsum over one row), for tests and tools.
 */
Datum
silo_setsum_item(PG_FUNCTION_ARGS)
{
	text	   *item = PG_GETARG_TEXT_PP(0);
	SiloSetsum	s;

	silo_setsum_clear(&s);
	silo_setsum_add_item(&s, VARDATA_ANY(item), VARSIZE_ANY_EXHDR(item));
	return setsum_text(&s);
}
