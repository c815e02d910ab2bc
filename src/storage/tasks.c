/*-------------------------------------------------------------------------
 *
 * tasks.c
 *	  The one writer of silo.task rows (0x05): every leasable or future
 *	  task, whichever transition makes it -- a new job, a retry, a release,
 *	  a restart, the end of a limit walk -- is written here, with every
 *	  column it has, row hints included when the caller knows them.
 *	  A new job's first task is written directly (silo_task_insert_direct)
 *	  with the job's other rows; every other task through SQL.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_storage.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

/*
 * task_values: a task row's 13 columns, in the order of task_cols below
 * (and of silo_task_insert's parameters): holds NULL for a job without
 * limits, each row hint NULL when the caller does not know it.
 */
static void
task_values(const SiloTaskRow *row, Datum *values, bool *nulls)
{
	memset(nulls, 0, sizeof(bool) * 13);
	values[0] = CStringGetTextDatum(row->task_group);
	values[1] = TimestampTzGetDatum(row->start_at);
	values[2] = Int16GetDatum((int16) row->priority);
	values[3] = CStringGetTextDatum(row->tenant);
	values[4] = CStringGetTextDatum(row->job_id);
	values[5] = Int32GetDatum(row->attempt);
	values[6] = Int32GetDatum(row->relative_attempt);
	values[7] = row->task_id;
	values[8] = Int64GetDatum(row->seq);
	values[9] = BoolGetDatum(row->due);
	if (row->limited)
		values[10] = silo_holds_datum(row->holds);
	else
		nulls[10] = true;
	values[11] = PointerGetDatum(&row->info_tid);
	nulls[11] = !row->has_info_tid;
	values[12] = PointerGetDatum(&row->status_tid);
	nulls[12] = !row->has_status_tid;
}

/*
 * silo_task_insert: write one task row.  On this library's schema every
 * column is written; enqueue, which also runs on older schemas until
 * ALTER EXTENSION silo UPDATE, writes there without the row hints (before
 * 1.5) and, for a job without limits, without holds (before 1.1).  SPI
 * must be connected.
 */
void
silo_task_insert(const SiloTaskRow *row)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr plan_pre15 = NULL;
	static SPIPlanPtr plan_pre11 = NULL;
	static const Oid types[13] = {
		TEXTOID, TIMESTAMPTZOID, INT2OID, TEXTOID, TEXTOID, INT4OID, INT4OID,
		UUIDOID, INT8OID, BOOLOID, TEXTARRAYOID, TIDOID, TIDOID
	};
	Datum		values[13];
	char		nulls[13];
	bool		isnull[13];
	int			i;

#define TASK_COLUMNS \
	"INSERT INTO silo.task (task_group, start_at, priority, tenant, job_id, attempt," \
	"  relative_attempt, task_id, seq, due"

	task_values(row, values, isnull);
	for (i = 0; i < 13; i++)
		nulls[i] = isnull[i] ? 'n' : ' ';

	if (silo_schema()->has_status_index)
		silo_exec(&plan,
				  TASK_COLUMNS ", holds, job_info_tid, job_status_tid)"
				  " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
				  13, types, values, nulls, false, 0);
	else if (row->limited)
		silo_exec(&plan_pre15,
				  TASK_COLUMNS ", holds) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
				  11, types, values, nulls, false, 0);
	else
		silo_exec(&plan_pre11,
				  TASK_COLUMNS ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
				  10, types, values, nulls, false, 0);
}

/* silo.task, every column, in the order silo_task_insert_direct gives them */
static const char *const task_cols[] = {
	"task_group", "start_at", "priority", "tenant", "job_id", "attempt", "relative_attempt",
	"task_id", "seq", "due", "holds", "job_info_tid", "job_status_tid"
};
#define TASK_NCOLS 13

/*
 * silo_task_insert_direct: write one task row in a piece of direct work,
 * on a schema with row hints (1.5 on), without SQL: for enqueue, where the
 * statement's executor start and the checks of silo.task's partial
 * indexes' predicates were most of the task's cost.  The direct writer
 * fires no trigger: the caller answers task_lease_mark's part itself (a
 * due task lowers its group's lease mark: silo_mark_task_appeared).
 */
void
silo_task_insert_direct(SiloDirect *d, const SiloTaskRow *row)
{
	SiloTable  *t = silo_table_open(d, "task", task_cols, TASK_NCOLS, NULL, SILO_TABLE_WRITE);
	Datum		values[TASK_NCOLS];
	bool		nulls[TASK_NCOLS];

	task_values(row, values, nulls);
	silo_table_insert(t, values, nulls);
}
