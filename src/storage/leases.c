/*-------------------------------------------------------------------------
 *
 * leases.c
 *	  Rows of silo.task_lease taken whole: by a report, by the sweep, and
 *	  dropped outright; and the text[] of keys a task holds.
 *
 * Taking a lease is deleting its row: the delete is the lock, so a second
 * report, or the sweep, finds nothing.  The caller checks what it took
 * (core/outcome.c) and an error rolls the delete back.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_storage.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"

#define LEASE_COLUMNS \
	"kind, task_group, tenant, job_id, attempt, relative_attempt, priority," \
	" start_at, seq, worker_id, started_at, expires_at, task_id, holds, owner_role"

/*
 * leases_read: fill *lease from row 0 of a RETURNING LEASE_COLUMNS.
 */
static void
leases_read(SiloLease *lease)
{
	bool		isnull;

	lease->kind = silo_col_text(0, 1);
	lease->task_group = silo_col_text(0, 2);
	lease->tenant = silo_col_text(0, 3);
	lease->job_id = silo_col_text(0, 4);
	lease->attempt = silo_col_int32(0, 5);
	lease->relative_attempt = silo_col_int32(0, 6);
	lease->priority = DatumGetInt16(silo_col(0, 7, &isnull));
	lease->start_at = silo_col_ts(0, 8, NULL);
	lease->seq = silo_col_int64(0, 9);
	lease->worker_id = silo_col_text(0, 10);
	lease->started_at = silo_col_ts(0, 11, NULL);
	lease->expires_at = silo_col_ts(0, 12, NULL);
	lease->task_id = datumCopy(silo_col(0, 13, &isnull), false, UUID_LEN);
	lease->holds = NIL;
	{
		Datum		holds = silo_col(0, 14, &isnull);

		lease->limited = !isnull;
		if (!isnull)
			lease->holds = silo_holds_list(holds);
	}
	lease->owner_role = silo_col_text(0, 15);
}

/*
 * silo_lease_take: delete task_id's lease row, whatever its state, and
 * return it in *lease; false when there is none.  SPI must be connected.
 */
bool
silo_lease_take(Datum task_id, SiloLease *lease)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	values[0] = task_id;
	silo_exec(&plan,
			  "DELETE FROM silo.task_lease WHERE task_id = $1 RETURNING " LEASE_COLUMNS,
			  1, types, values, NULL, false, 0);
	if (SPI_processed == 0)
		return false;
	leases_read(lease);
	return true;
}

/*
 * silo_lease_delete_nowait: drop a lease row outright (a refresh the
 * broker treats as lost, or one reset_floating_limit forgets); its
 * worker's report then finds no lease.  The caller holds the key lock,
 * and a report in flight holds the lease row while it waits for that
 * key: so this never waits for the row (55P03 instead), or the two would
 * deadlock.
 */
void
silo_lease_delete_nowait(Datum task_id)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	values[0] = task_id;
	silo_exec(&plan,
			  "DELETE FROM silo.task_lease WHERE ctid = ANY(ARRAY("
			  " SELECT ctid FROM silo.task_lease WHERE task_id = $1 FOR UPDATE NOWAIT))",
			  1, types, values, NULL, false, 0);
}

/*
 * silo_lease_take_expired: the sweep's take: delete the lease only if it
 * has expired; false when it is gone, was renewed meanwhile, or is
 * locked by another transaction.
 */
bool
silo_lease_take_expired(Datum task_id, TimestampTz now, SiloLease *lease)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {UUIDOID, TIMESTAMPTZOID};
	Datum		values[2];

	values[0] = task_id;
	values[1] = TimestampTzGetDatum(now);
	/*
	 * SKIP LOCKED: a lease row locked by an open transaction (a heartbeat
	 * or report in progress) is left for a later sweep instead of stalling
	 * the broker behind that transaction.
	 */
	silo_exec(&plan,
			  "DELETE FROM silo.task_lease WHERE ctid = ANY(ARRAY("
			  " SELECT ctid FROM silo.task_lease WHERE task_id = $1 AND expires_at <= $2"
			  " FOR UPDATE SKIP LOCKED))"
			  " RETURNING " LEASE_COLUMNS,
			  2, types, values, NULL, false, 0);
	if (SPI_processed == 0)
		return false;
	leases_read(lease);
	return true;
}

/*
 * silo_holds_datum / silo_holds_list: a list of keys as text[] and back
 * (the holds column of task, task_lease, chain_task and requests).
 */
Datum
silo_holds_datum(List *holds)
{
	Datum	   *elems;
	ListCell   *lc;
	int			i = 0;

	if (holds == NIL)
		return PointerGetDatum(construct_empty_array(TEXTOID));
	elems = palloc(sizeof(Datum) * list_length(holds));
	foreach(lc, holds)
		elems[i++] = CStringGetTextDatum((char *) lfirst(lc));
	return PointerGetDatum(construct_array(elems, i, TEXTOID, -1, false, TYPALIGN_INT));
}

List *
silo_holds_list(Datum arr)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int			i;
	List	   *out = NIL;

	deconstruct_array(DatumGetArrayTypeP(arr), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &n);
	for (i = 0; i < n; i++)
		out = lappend(out, TextDatumGetCString(elems[i]));
	return out;
}

/*
 * silo_task_leased: whether task_id has a lease row now, read by a
 * statement of its own (a fresh snapshot): for a job operation or a
 * re-import that waited on the job's lock while a lease committed.  SPI
 * must be connected.
 */
bool
silo_task_leased(Datum task_id)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	values[0] = task_id;
	silo_exec(&plan, "SELECT 1 FROM silo.task_lease WHERE task_id = $1",
			  1, types, values, NULL, false, 1);
	return SPI_processed > 0;
}
