/*-------------------------------------------------------------------------
 *
 * attempts.c
 *	  The one writer of silo.attempt rows (0x07, finished attempts): a
 *	  report's, a batch's, the sweep's, a rate limit's -- and of the
 *	  cancellation flags (0x0A).
 *
 * Attempt rows are written directly (direct.c): one at a time in a piece
 * of work of their own, or many in the caller's batched work
 * (complete_many).
 *
 *-------------------------------------------------------------------------
 */
#include "silo_storage.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

/* silo.attempt, every column */
static const char *const attempt_cols[] = {
	"tenant", "job_id", "attempt", "relative_attempt", "task_id", "worker_id", "status",
	"started_at", "finished_at", "result", "error_code", "error_data"
};
#define ATTEMPT_NCOLS 12

/*
 * silo_attempt_open: silo.attempt, opened for inserts in a piece of
 * direct work.
 */
SiloTable *
silo_attempt_open(SiloDirect *d)
{
	return silo_table_open(d, "attempt", attempt_cols, ATTEMPT_NCOLS, NULL, SILO_TABLE_WRITE);
}

/*
 * silo_attempt_put: insert one attempt row through a table opened with
 * silo_attempt_open.  Text columns are given as datums (the caller often
 * has them as such already); worker_id NULL for an attempt that never
 * started, and started_at then ignored.
 */
void
silo_attempt_put(SiloTable *t, const SiloAttemptRow *row)
{
	Datum		values[ATTEMPT_NCOLS];
	bool		nulls[ATTEMPT_NCOLS];

	memset(nulls, false, sizeof(nulls));
	values[0] = row->tenant;
	values[1] = row->job_id;
	values[2] = Int32GetDatum(row->attempt);
	values[3] = Int32GetDatum(row->relative_attempt);
	values[4] = row->task_id;
	values[5] = row->worker_id;
	nulls[5] = row->worker_id == (Datum) 0;
	values[6] = row->status;
	values[7] = TimestampTzGetDatum(row->started_at);
	nulls[7] = nulls[5];
	values[8] = TimestampTzGetDatum(row->finished_at);
	values[9] = row->result;
	nulls[9] = row->result == (Datum) 0;
	values[10] = row->error_code ? CStringGetTextDatum(row->error_code) : (Datum) 0;
	nulls[10] = row->error_code == NULL;
	values[11] = JsonbPGetDatum(row->error_data);
	nulls[11] = row->error_data == NULL;
	silo_table_insert(t, values, nulls);
}

/*
 * silo_attempt_insert: insert one attempt row in a piece of direct work
 * of its own.
 */
void
silo_attempt_insert(const SiloAttemptRow *row)
{
	SiloDirect *d = silo_direct_begin();

	silo_attempt_put(silo_attempt_open(d), row);
	silo_direct_end(d);
}

/*
 * silo_cancellation_insert: flag job (tenant, job_id) cancelled at at; if
 * if_absent, an existing flag is kept (else it is a unique violation: the
 * caller checked there was none).  SPI must be connected.
 */
void
silo_cancellation_insert(const char *tenant, const char *job_id, TimestampTz at, bool if_absent)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr absent_plan = NULL;
	static const Oid types[3] = {TEXTOID, TEXTOID, TIMESTAMPTZOID};
	Datum		values[3];

#define CANCELLATION_INSERT \
	"INSERT INTO silo.job_cancellation (tenant, job_id, cancelled_at) VALUES ($1, $2, $3)"

	values[0] = CStringGetTextDatum(tenant);
	values[1] = CStringGetTextDatum(job_id);
	values[2] = TimestampTzGetDatum(at);
	if (if_absent)
		silo_exec(&absent_plan, CANCELLATION_INSERT " ON CONFLICT DO NOTHING",
				  3, types, values, NULL, false, 0);
	else
		silo_exec(&plan, CANCELLATION_INSERT, 3, types, values, NULL, false, 0);
}
