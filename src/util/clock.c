/*-------------------------------------------------------------------------
 *
 * clock.c
 *	  silo's clock, and the ids it makes.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_util.h"

#include "utils/builtins.h"
#include "utils/uuid.h"

/* GUC silo.clock_offset_ms (a test hook; registered by module.c) */
int			silo_clock_offset_ms = 0;

/*
 * silo_now_ts: silo's clock.  Wall-clock time (not the transaction start,
 * so a long transaction does not see leases as younger than they are)
 * shifted by the silo.clock_offset_ms test hook.
 */
TimestampTz
silo_now_ts(void)
{
	return GetCurrentTimestamp() + (TimestampTz) silo_clock_offset_ms * 1000;
}

/*
 * silo_new_uuid: a new time-ordered (version 7, RFC 9562) UUID as a uuid
 * Datum, palloc'd in the current context.  The first 48 bits are the Unix
 * time in milliseconds and, after the version nibble, 12 bits hold the
 * fraction of the millisecond; those 60 bits are kept strictly increasing
 * within a backend.  The last 62 bits (after the variant) are random.
 * Ids made one after another therefore sort together, so the B-tree
 * entries of new jobs and tasks go to the right-hand edge of their
 * indexes instead of to random leaf pages.
 */
Datum
silo_new_uuid(void)
{
	static uint64 last = 0;		/* (ms << 12 | fraction) of the last id */
	pg_uuid_t  *uuid = palloc(sizeof(pg_uuid_t));
	TimestampTz now = GetCurrentTimestamp();
	int64		us = now + ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) *
							SECS_PER_DAY * USECS_PER_SEC);
	uint64		stamp;

	stamp = ((uint64) (us / 1000) << 12) | (uint64) ((us % 1000) * 4096 / 1000);
	if (stamp <= last)
		stamp = last + 1;
	last = stamp;

	if (!pg_strong_random(uuid->data + 8, UUID_LEN - 8))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random job id")));
	uuid->data[0] = (uint8) (stamp >> 52);
	uuid->data[1] = (uint8) (stamp >> 44);
	uuid->data[2] = (uint8) (stamp >> 36);
	uuid->data[3] = (uint8) (stamp >> 28);
	uuid->data[4] = (uint8) (stamp >> 20);
	uuid->data[5] = (uint8) (stamp >> 12);
	uuid->data[6] = 0x70 | (uint8) ((stamp >> 8) & 0x0f);
	uuid->data[7] = (uint8) stamp;
	uuid->data[8] = (uuid->data[8] & 0x3f) | 0x80;
	return UUIDPGetDatum(uuid);
}

/*
 * silo_uuid_to_cstring: the canonical text form of a uuid Datum.
 */
char *
silo_uuid_to_cstring(Datum uuid)
{
	return DatumGetCString(DirectFunctionCall1(uuid_out, uuid));
}
