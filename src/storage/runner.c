/*-------------------------------------------------------------------------
 *
 * runner.c
 *	  The broker's paged passes: list due items with one statement, then
 *	  handle each in a subtransaction of its own, so that one bad item is
 *	  logged and skipped instead of stopping the pass.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_storage.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/resowner.h"

/*
 * silo_run_isolated: run fn on items 0..n-1, each in a subtransaction of
 * its own, so that one bad item is logged and skipped instead of stopping
 * the broker.  fn returns whether it handled the item; an item it could
 * not handle (or whose row or key another transaction holds: 55P03, retried
 * quietly) stays in place, and *offset grows by their number so the next
 * round looks past them.  Returns the number handled.
 */
int64
silo_run_isolated(int n, SiloItemFn fn, SiloItemDescribeFn describe, void *arg,
				  TimestampTz now, int64 *offset)
{
	volatile int64 done = 0;
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile int i;

	for (i = 0; i < n; i++)
	{
		BeginInternalSubTransaction(NULL);
		MemoryContextSwitchTo(cxt);
		PG_TRY();
		{
			if (fn(i, arg, now))
				done++;
			ReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(cxt);
			CurrentResourceOwner = owner;
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(cxt);
			edata = CopyErrorData();
			FlushErrorState();
			RollbackAndReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(cxt);
			CurrentResourceOwner = owner;

			/* A cancel or shutdown is not a bad row: let it through. */
			if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) == ERRCODE_OPERATOR_INTERVENTION)
				ReThrowError(edata);
			/* A busy row or key is retried next round, quietly; anything else is logged. */
			if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
				ereport(WARNING,
						(errcode(edata->sqlerrcode),
						 errmsg("silo: could not %s: %s", describe(i, arg), edata->message),
						 errdetail("It stays in place and the broker retries it.")));
			FreeErrorData(edata);
		}
		PG_END_TRY();
	}
	*offset += (int64) n - done;
	return done;
}

/*
 * silo_run_listed: one paged pass of the broker: list due items with sql
 * (parameters $1 now, $2 limit, $3 offset; every column is read as text),
 * then run fn on each in isolation (silo_run_isolated).  *more says
 * whether a full page came back.  Returns the number handled.
 */
int64
silo_run_listed(SPIPlanPtr *plan, const char *sql, TimestampTz now, int limit,
				int64 *offset, bool *more, SiloItemFn fn, SiloItemDescribeFn describe)
{
	static const Oid types[3] = {TIMESTAMPTZOID, INT4OID, INT8OID};
	Datum		values[3];
	SiloListed *listed = palloc(sizeof(SiloListed));
	uint64		n;
	uint64		i;
	int			c;

	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(limit);
	values[2] = Int64GetDatum(*offset);
	silo_exec(plan, sql, 3, types, values, NULL, false, 0);
	n = SPI_processed;
	*more = n == (uint64) limit;
	listed->ncols = SPI_tuptable->tupdesc->natts;
	listed->cells = palloc(sizeof(char *) * (n * listed->ncols + 1));
	for (i = 0; i < n; i++)
		for (c = 0; c < listed->ncols; c++)
			SILO_CELL(listed, i, c) = SPI_getvalue(SPI_tuptable->vals[i],
												   SPI_tuptable->tupdesc, c + 1);
	return silo_run_isolated((int) n, fn, describe, listed, now, offset);
}
