/*-------------------------------------------------------------------------
 *
 * spi_util.c
 *	  Small helpers every module uses: cached SPI plans, reading result
 *	  columns, silo's clock, and UUID generation.
 *
 * Every statement silo runs is prepared once per backend and kept
 * (SPI_keepplan) as a generic plan, so the hot paths pay no parse or plan
 * cost.  The plans are generic on purpose: queue statements are written
 * for one index path each, and the plan cache's habit of re-planning a
 * statement whose generic cost looks worse than its custom plans (which
 * an ORDER BY ... LIMIT $n or an = ANY($1) easily triggers) cost a tenth
 * of the CPU of a lease-and-complete batch (docs/performance.md).
 *
 *-------------------------------------------------------------------------
 */
#include "silo.h"

#include "utils/builtins.h"

/*
 * silo_spi_connect / silo_spi_finish: SPI bracketing with error checks.
 */
void
silo_spi_connect(void)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "silo: SPI_connect failed");
}

void
silo_spi_finish(void)
{
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "silo: SPI_finish failed");
}

/*
 * silo_exec: run sql through a plan cached in *plan (prepared on first
 * use), returning the SPI result code.  Errors other than the statement's
 * own are internal and raised with elog.
 */
int
silo_exec(SPIPlanPtr *plan, const char *sql, int nargs, const Oid *argtypes,
		  Datum *values, const char *nulls, bool read_only, long count)
{
	int			rc;

	if (*plan == NULL)
	{
		SPIPlanPtr	p = SPI_prepare_cursor(sql, nargs, (Oid *) argtypes,
										   CURSOR_OPT_GENERIC_PLAN);

		if (p == NULL)
			elog(ERROR, "silo: could not prepare \"%s\": %s",
				 sql, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(p) != 0)
			elog(ERROR, "silo: could not keep plan for \"%s\"", sql);
		*plan = p;
	}
	/*
	 * The plan is made (or remade) inside SPI_execute_plan: let planner.c
	 * apply its size floors.  An error leaves the flag set; the
	 * transaction's abort clears it.
	 */
	{
		bool		save = silo_planning_own;

		silo_planning_own = true;
		rc = SPI_execute_plan(*plan, values, nulls, read_only, count);
		silo_planning_own = save;
	}
	if (rc < 0)
		elog(ERROR, "silo: could not execute \"%s\": %s",
			 sql, SPI_result_code_string(rc));
	return rc;
}

/*
 * silo_col: column col (1-based) of row row of the last SPI result.
 */
Datum
silo_col(int row, int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, isnull);
}

/*
 * silo_col_text: a text column copied into the memory of the SPI caller
 * (so it survives SPI_finish), or NULL.
 */
char *
silo_col_text(int row, int col)
{
	bool		isnull;
	Datum		d = silo_col(row, col, &isnull);
	char	   *s;
	char	   *copy;

	if (isnull)
		return NULL;
	s = text_to_cstring(DatumGetTextPP(d));
	copy = SPI_palloc(strlen(s) + 1);
	strcpy(copy, s);
	return copy;
}

/*
 * silo_col_int32 / int64 / bool: non-null scalar columns.
 */
int32
silo_col_int32(int row, int col)
{
	bool		isnull;
	Datum		d = silo_col(row, col, &isnull);

	if (isnull)
		elog(ERROR, "silo: unexpected null in column %d", col);
	return DatumGetInt32(d);
}

int64
silo_col_int64(int row, int col)
{
	bool		isnull;
	Datum		d = silo_col(row, col, &isnull);

	if (isnull)
		elog(ERROR, "silo: unexpected null in column %d", col);
	return DatumGetInt64(d);
}

bool
silo_col_bool(int row, int col)
{
	bool		isnull;
	Datum		d = silo_col(row, col, &isnull);

	return !isnull && DatumGetBool(d);
}

/*
 * silo_col_ts: a timestamptz column.
 */
TimestampTz
silo_col_ts(int row, int col, bool *isnull)
{
	bool		n;
	Datum		d = silo_col(row, col, &n);

	if (isnull)
		*isnull = n;
	return n ? 0 : DatumGetTimestampTz(d);
}

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
