/*-------------------------------------------------------------------------
 *
 * ratelimit.c
 *	  Rate-limit buckets, with Gubernator's semantics, kept in
 *	  silo.rate_limit_bucket (tenant, name, unique_key).
 *
 * Token bucket: a bucket holds `limit` tokens and is refilled to full at
 * reset_at; a hit that finds the bucket past its reset starts a new window
 * ending durationMs later.  Leaky bucket: the level drains continuously at
 * limit / durationMs per millisecond, and a job is admitted when level +
 * hits <= limit.  A bucket's idle_at is when it becomes equivalent to no
 * bucket at all (full, or drained); the broker deletes idle buckets, so
 * keys that stop being used leave nothing behind.
 *
 * The caller holds the bucket's key lock (keys.c), so the read and the
 * write below cannot interleave with another check of the same bucket.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_limits.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "utils/builtins.h"

/*
 * silo_rate_limit_admit: take l->hits from the bucket if it has room.
 * Returns true when admitted; otherwise *next_admit is the earliest time
 * the same request could be admitted.
 */
bool
silo_rate_limit_admit(const char *tenant, SiloLimit *l, TimestampTz now, TimestampTz *next_admit)
{
	static SPIPlanPtr read_plan = NULL;
	static SPIPlanPtr write_plan = NULL;
	static const Oid types[10] = {
		TEXTOID, TEXTOID, TEXTOID, TEXTOID, INT8OID, INT8OID, FLOAT8OID,
		TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID
	};
	Datum		values[10];
	bool		found;
	double		level;			/* token: tokens left; leaky: level */
	TimestampTz reset_at = 0;
	TimestampTz idle_at;
	bool		admit;
	double		rate = (double) l->limit / (double) l->duration_ms;	/* per ms */

	values[0] = CStringGetTextDatum(tenant);
	values[1] = CStringGetTextDatum(l->key);
	values[2] = CStringGetTextDatum(l->unique_key);
	silo_exec(&read_plan,
			  "SELECT level, reset_at, updated_at FROM silo.rate_limit_bucket"
			  " WHERE tenant = $1 AND name = $2 AND unique_key = $3",
			  3, types, values, NULL, false, 0);
	found = SPI_processed == 1;

	if (!l->leaky)
	{
		bool		isnull;

		level = 0;
		if (found)
		{
			level = DatumGetFloat8(silo_col(0, 1, &isnull));
			reset_at = silo_col_ts(0, 2, NULL);
		}
		if (!found || now >= reset_at)
		{
			level = (double) l->limit;
			reset_at = now + (TimestampTz) l->duration_ms * 1000;
		}
		admit = level >= (double) l->hits;
		if (admit)
			level -= (double) l->hits;
		else
			*next_admit = reset_at;
		idle_at = reset_at;
	}
	else
	{
		level = 0;
		if (found)
		{
			bool		isnull;
			TimestampTz updated = silo_col_ts(0, 3, NULL);

			level = DatumGetFloat8(silo_col(0, 1, &isnull));
			level -= (double) (now - updated) / 1000.0 * rate;
			if (level < 0)
				level = 0;
		}
		admit = level + (double) l->hits <= (double) l->limit;
		if (admit)
			level += (double) l->hits;
		else
			*next_admit = now + (TimestampTz) ceil((level + (double) l->hits - (double) l->limit)
												   / rate * 1000.0);
		idle_at = now + (TimestampTz) ceil(level / rate * 1000.0);
		reset_at = idle_at;
	}

	values[3] = CStringGetTextDatum(l->leaky ? "leakyBucket" : "tokenBucket");
	values[4] = Int64GetDatum(l->limit);
	values[5] = Int64GetDatum(l->duration_ms);
	values[6] = Float8GetDatum(level);
	values[7] = TimestampTzGetDatum(reset_at);
	values[8] = TimestampTzGetDatum(now);
	values[9] = TimestampTzGetDatum(idle_at);
	silo_exec(&write_plan,
			  "INSERT INTO silo.rate_limit_bucket (tenant, name, unique_key, algorithm, \"limit\","
			  "  duration_ms, level, reset_at, updated_at, idle_at)"
			  " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
			  " ON CONFLICT (tenant, name, unique_key) DO UPDATE SET algorithm = $4,"
			  "  \"limit\" = $5, duration_ms = $6, level = $7, reset_at = $8, updated_at = $9,"
			  "  idle_at = $10",
			  10, types, values, NULL, false, 0);
	return admit;
}

/*
 * silo_purge_idle_buckets: delete buckets that are full (token) or
 * drained (leaky) -- equivalent to absent.  Returns the number deleted.
 */
int64
silo_purge_idle_buckets(TimestampTz now)
{
	static SPIPlanPtr plans[2] = {NULL, NULL};
	static const char *const sql[2] = {
		"DELETE FROM silo.rate_limit_bucket WHERE ctid = ANY(ARRAY("
		" SELECT ctid FROM silo.rate_limit_bucket WHERE idle_at < $1"
		"  LIMIT 5000 FOR UPDATE SKIP LOCKED))",
		"DELETE FROM silo.rate_limit_bucket WHERE ctid = ANY(ARRAY("
		" SELECT ctid FROM silo.rate_limit_bucket WHERE idle_at < $1"
		"  AND silo.shard_served(tenant) LIMIT 5000 FOR UPDATE SKIP LOCKED))"
	};
	static const Oid types[1] = {TIMESTAMPTZOID};
	Datum		values[1];
	int			c = silo_limits_shard_filter ? 1 : 0;

	values[0] = TimestampTzGetDatum(now);
	silo_exec(&plans[c], sql[c], 1, types, values, NULL, false, 0);
	return (int64) SPI_processed;
}
