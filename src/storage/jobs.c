/*-------------------------------------------------------------------------
 *
 * jobs.c
 *	  The rows a new job starts with: its job_info row (0x01), its
 *	  job_status row (0x02, Pending, attempt 1; an imported job's in the
 *	  state its history leads to), its 0x03 row, and its metadata index
 *	  rows (0x04).  Its first task is written by tasks.c.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_storage.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

/*
 * jobs_lock_status: take the lock the insert takes anyway, first: an
 * ALTER EXTENSION silo UPDATE in progress holds job_status exclusively
 * until it commits, and once this has the lock its catalog changes are
 * seen, so what silo_schema() says holds for the statement that follows.
 */
static void
jobs_lock_status(void)
{
	Oid			status_relid = get_relname_relid("job_status", get_namespace_oid("silo", false));

	if (OidIsValid(status_relid))
		LockRelationOid(status_relid, RowExclusiveLock);
}

/*
 * jobs_info_values: the parameters $1..$15 of the job_info statements
 * (both enqueue's and import's): the row's columns, the retry policy's
 * five as NULLs when it has none, and the first task's id.  The caller
 * has set every entry of nulls to ' ' and fills its own parameters past
 * $15.
 */
static void
jobs_info_values(const SiloJobRow *row, Datum *values, char *nulls)
{
	int			i;

	values[0] = CStringGetTextDatum(row->tenant);
	values[1] = CStringGetTextDatum(row->id);
	values[2] = CStringGetTextDatum(row->task_group);
	values[3] = Int16GetDatum((int16) row->priority);
	values[4] = TimestampTzGetDatum(row->start_at);
	values[5] = TimestampTzGetDatum(row->enqueued_at);
	values[6] = JsonbPGetDatum(row->payload);
	if (row->retry.count < 0)
	{
		for (i = 7; i <= 11; i++)
			nulls[i] = 'n';
	}
	else
	{
		values[7] = Int32GetDatum(row->retry.count);
		values[8] = Int64GetDatum(row->retry.initial_ms);
		values[9] = Int64GetDatum(row->retry.max_ms);
		values[10] = Float8GetDatum(row->retry.factor);
		values[11] = BoolGetDatum(row->retry.randomize);
	}
	values[12] = JsonbPGetDatum(row->limits);
	values[13] = JsonbPGetDatum(row->metadata);
	values[14] = row->task_id;
}

/* silo.job_status and silo.job_status_index, every column, for the direct writes */
static const char *const jobs_status_cols[] = {
	"tenant", "id", "status", "changed_at", "attempt", "relative_attempt", "task_id",
	"next_attempt_at", "status_index_tid"
};
#define JOBS_STATUS_NCOLS 9
static const char *const jobs_index_cols[] = {"tenant", "status", "changed_at", "id"};

/*
 * jobs_write_rest: after the job_info row, the new job's job_status row
 * (Pending, attempt 1), its 0x03 row and, when the row carries one, its
 * first task, in one piece of direct work: none of them can conflict once
 * the job_info row is in (its key is the job's), and as SQL their
 * executor start, with a CHECK constraint read back from the catalog for
 * each of the two status tables, cost more than the rows themselves.  The
 * values are silo's own (the status is 'Pending'; the rest was checked by
 * enqueue), which is what lets the direct writer skip the constraints.
 */
static void
jobs_write_rest(const SiloJobRow *row, Datum tenant, Datum id, int64 seq,
				ItemPointer info_tid, ItemPointer status_tid)
{
	SiloDirect *d = silo_direct_begin();
	SiloTable  *idx = silo_table_open(d, "job_status_index", jobs_index_cols, 4, NULL,
									  SILO_TABLE_WRITE);
	SiloTable  *st = silo_table_open(d, "job_status", jobs_status_cols, JOBS_STATUS_NCOLS,
									 NULL, SILO_TABLE_WRITE);
	Datum		pending = CStringGetTextDatum("Pending");
	Datum		key[4];
	Datum		values[JOBS_STATUS_NCOLS];
	bool		nulls[JOBS_STATUS_NCOLS];
	ItemPointerData index_tid;

	key[0] = tenant;
	key[1] = pending;
	key[2] = TimestampTzGetDatum(row->enqueued_at);
	key[3] = id;
	silo_table_insert(idx, key, NULL);
	ItemPointerCopy(silo_table_inserted_tid(idx), &index_tid);

	memset(nulls, 0, sizeof(nulls));
	values[0] = tenant;
	values[1] = id;
	values[2] = pending;
	values[3] = TimestampTzGetDatum(row->enqueued_at);
	values[4] = Int32GetDatum(1);
	values[5] = Int32GetDatum(1);
	values[6] = row->task_id;
	values[7] = TimestampTzGetDatum(row->next_attempt_at);
	values[8] = PointerGetDatum(&index_tid);
	silo_table_insert(st, values, nulls);
	ItemPointerCopy(silo_table_inserted_tid(st), status_tid);

	if (row->first_task != NULL)
	{
		SiloTaskRow *task = row->first_task;

		task->seq = seq;
		task->has_info_tid = task->has_status_tid = true;
		ItemPointerCopy(info_tid, &task->info_tid);
		ItemPointerCopy(status_tid, &task->status_tid);
		silo_task_insert_direct(d, task);
	}
	silo_direct_end(d);
}

/*
 * silo_job_insert: write a new job's job_info, job_status and 0x03 rows,
 * and its first task when row->first_task is set; false when the tenant
 * already has a job with that id (nothing written).  *seq gets the job's
 * enqueue order; on a schema with row hints (1.5 on) *info_tid and
 * *status_tid get where its job_info and job_status rows went and
 * *has_hints is set (the first task, if written here, has them too).  The
 * job_info row goes in by SQL (its ON CONFLICT and its sequence), the
 * rest directly (jobs_write_rest).  Until ALTER EXTENSION silo UPDATE runs
 * after an upgrade of the library, this keeps working on the older schema
 * (docs/operations.md, "Upgrades"), all in SQL: no 0x03 row and no hints
 * before 1.5; the update copies the status rows into 0x03.  SPI must be
 * connected.
 */
bool
silo_job_insert(const SiloJobRow *row, int64 *seq, bool *has_hints,
				ItemPointer info_tid, ItemPointer status_tid)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr plan_pre15 = NULL;
	static const Oid types[16] = {
		TEXTOID, TEXTOID, TEXTOID, INT2OID, TIMESTAMPTZOID, TIMESTAMPTZOID,
		JSONBOID, INT4OID, INT8OID, INT8OID, FLOAT8OID, BOOLOID, JSONBOID,
		JSONBOID, UUIDOID, TIMESTAMPTZOID
	};
	Datum		values[16];
	char		nulls[16];

	memset(nulls, ' ', sizeof(nulls));
	jobs_info_values(row, values, nulls);
	values[15] = TimestampTzGetDatum(row->next_attempt_at);

	/* the job_info row, both ways; the RETURNING list is left open */
#define JOBS_INFO \
	"INSERT INTO silo.job_info (tenant, id, task_group, priority, start_at," \
	"  enqueued_at, seq, payload, retry_count, retry_initial_ms, retry_max_ms," \
	"  retry_factor, retry_randomize, limits, metadata)" \
	"VALUES ($1, $2, $3, $4, $5, $6, nextval('silo.job_seq'), $7, $8, $9, $10," \
	"  $11, $12, $13, $14)" \
	"ON CONFLICT DO NOTHING RETURNING seq"

	jobs_lock_status();
	*has_hints = silo_schema()->has_status_index;
	if (*has_hints)
	{
		bool		isnull;

		silo_exec(&plan, JOBS_INFO ", ctid", 14, types, values, nulls, false, 0);
		if (SPI_processed == 0)
			return false;
		*seq = silo_col_int64(0, 1);
		ItemPointerCopy((ItemPointer) DatumGetPointer(silo_col(0, 2, &isnull)), info_tid);
		jobs_write_rest(row, values[0], values[1], *seq, info_tid, status_tid);
		return true;
	}

	silo_exec(&plan_pre15,
			  "WITH j AS (" JOBS_INFO "),"
			  " s AS ("
			  "  INSERT INTO silo.job_status (tenant, id, status, changed_at, attempt,"
			  "    relative_attempt, task_id, next_attempt_at)"
			  "  SELECT $1, $2, 'Pending', $6, 1, 1, $15, $16 FROM j)"
			  "SELECT seq FROM j",
			  16, types, values, nulls, false, 0);
	if (SPI_processed == 0)
		return false;
	*seq = silo_col_int64(0, 1);
	if (row->first_task != NULL)
	{
		row->first_task->seq = *seq;
		silo_task_insert(row->first_task);
	}
	return true;
}

/*
 * silo_job_insert_imported: write an imported job's job_info, job_status
 * and 0x03 rows in one statement, in the state its history leads to
 * (silo.import_jobs): status at changed_at, attempt and relative attempt;
 * row->task_id (0: none, a terminal job) and row->next_attempt_at are its
 * pending task's.  False when the tenant already has a job with that id
 * (nothing written).  *seq, *info_tid and *status_tid as for
 * silo_job_insert.  Needs the current schema (1.5 on: row hints).  SPI
 * must be connected.
 */
bool
silo_job_insert_imported(const SiloJobRow *row, const char *status, TimestampTz changed_at,
						 int32 attempt, int32 relative_attempt, int64 *seq,
						 ItemPointer info_tid, ItemPointer status_tid)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[20] = {
		TEXTOID, TEXTOID, TEXTOID, INT2OID, TIMESTAMPTZOID, TIMESTAMPTZOID,
		JSONBOID, INT4OID, INT8OID, INT8OID, FLOAT8OID, BOOLOID, JSONBOID,
		JSONBOID, UUIDOID, TIMESTAMPTZOID, TEXTOID, TIMESTAMPTZOID, INT4OID, INT4OID
	};
	Datum		values[20];
	char		nulls[20];
	bool		isnull;

	memset(nulls, ' ', sizeof(nulls));
	jobs_info_values(row, values, nulls);
	nulls[14] = row->task_id == (Datum) 0 ? 'n' : ' ';
	values[15] = TimestampTzGetDatum(row->next_attempt_at);
	nulls[15] = nulls[14];
	values[16] = CStringGetTextDatum(status);
	values[17] = TimestampTzGetDatum(changed_at);
	values[18] = Int32GetDatum(attempt);
	values[19] = Int32GetDatum(relative_attempt);

	jobs_lock_status();
	silo_exec(&plan,
			  "WITH j AS (" JOBS_INFO ", ctid),"
			  " x AS ("
			  "  INSERT INTO silo.job_status_index (tenant, status, changed_at, id)"
			  "  SELECT $1, $17, $18, $2 FROM j RETURNING ctid),"
			  " s AS ("
			  "  INSERT INTO silo.job_status (tenant, id, status, changed_at, attempt,"
			  "    relative_attempt, task_id, next_attempt_at, status_index_tid)"
			  "  SELECT $1, $2, $17, $18, $19, $20, $15, $16, x.ctid FROM x RETURNING ctid)"
			  "SELECT j.seq, j.ctid, s.ctid FROM j, s",
			  20, types, values, nulls, false, 0);
	if (SPI_processed == 0)
		return false;
	*seq = silo_col_int64(0, 1);
	ItemPointerCopy((ItemPointer) DatumGetPointer(silo_col(0, 2, &isnull)), info_tid);
	ItemPointerCopy((ItemPointer) DatumGetPointer(silo_col(0, 3, &isnull)), status_tid);
	return true;
}

/*
 * silo_job_metadata_insert: the metadata index rows (0x04) of a new job,
 * one per key of metadata.  SPI must be connected.
 */
void
silo_job_metadata_insert(const char *tenant, const char *id, Jsonb *metadata)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[3] = {TEXTOID, TEXTOID, JSONBOID};
	Datum		values[3];

	values[0] = CStringGetTextDatum(tenant);
	values[1] = CStringGetTextDatum(id);
	values[2] = JsonbPGetDatum(metadata);
	silo_exec(&plan,
			  "INSERT INTO silo.job_metadata (tenant, key, value, job_id)"
			  " SELECT $1, key, value, $2 FROM jsonb_each_text($3)",
			  3, types, values, NULL, false, 0);
}
