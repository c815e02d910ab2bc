/*-------------------------------------------------------------------------
 *
 * spi.c
 *	  Statements through SPI: cached plans, and reading result columns.
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
#include "silo_storage.h"

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
