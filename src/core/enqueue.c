/*-------------------------------------------------------------------------
 *
 * enqueue.c
 *	  Creating a job (silo.enqueue and silo.enqueue_many, api/enqueue.c).
 *
 * An enqueue writes, in the caller's transaction, the job_info row, the
 * job_status row (Pending, attempt 1), its 0x03 row and the job's first
 * task, in one statement; metadata index rows follow when there is metadata.  A due job
 * queues a (coalesced) wake-up notification for its task group; a future
 * job wakes the broker at commit so it is promoted on time.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_core.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"

static void enqueue_validate(SiloEnqueueArgs *args);

/*
 * enqueue_validate: the checks both entry points share; nothing has been
 * written when they fail.
 */
static void
enqueue_validate(SiloEnqueueArgs *args)
{
	silo_check_length("task_group", args->task_group, 1, SILO_MAX_GROUP_LEN);
	silo_check_length("tenant", args->tenant, 1, SILO_MAX_TENANT_LEN);
	if (args->id != NULL)
		silo_check_length("id", args->id, 1, SILO_MAX_ID_LEN);
	silo_check_range("priority", args->priority, 0, 99);
	if (TIMESTAMP_NOT_FINITE(args->start_at))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("start_at must be a finite timestamp")));
	args->nlimits = silo_parse_limits(args->limits, &args->parsed_limits, &args->limits);
	silo_check_metadata(args->metadata);

	/*
	 * Counting a key's holders must see every committed grant: under
	 * REPEATABLE READ the count would come from the transaction's old
	 * snapshot and could over-grant.
	 */
	if (args->nlimits > 0)
		silo_require_read_committed("silo.enqueue with limits");
}

/*
 * enqueue_has_status_index: whether the installed schema has 0x03 as a
 * table (1.5 on).  Until ALTER EXTENSION silo UPDATE has run after an
 * upgrade of the library, enqueues keep working on the older schema
 * (docs/operations.md, "Upgrades"); the update copies their status rows
 * into 0x03.
 */
static bool
enqueue_has_status_index(void)
{
	Oid			nsp = get_namespace_oid("silo", false);
	Oid			status_relid = get_relname_relid("job_status", nsp);

	/*
	 * The lock the insert takes anyway, taken first: an update in progress
	 * holds job_status exclusively until it commits, and once we have the
	 * lock its catalog changes are seen, so the answer below holds for the
	 * statement that follows.
	 */
	if (OidIsValid(status_relid))
		LockRelationOid(status_relid, RowExclusiveLock);
	return silo_schema()->has_status_index;
}

/*
 * silo_enqueue_job: write one validated job; returns its id.  The caller
 * has not connected SPI.
 */
char *
silo_enqueue_job(SiloEnqueueArgs *args)
{
	static SPIPlanPtr insert_plan = NULL;
	static SPIPlanPtr insert_plan_pre15 = NULL;
	static SPIPlanPtr meta_plan = NULL;
	static const Oid insert_types[18] = {
		TEXTOID, TEXTOID, TEXTOID, INT2OID, TIMESTAMPTZOID, TIMESTAMPTZOID,
		JSONBOID, INT4OID, INT8OID, INT8OID, FLOAT8OID, BOOLOID, JSONBOID,
		JSONBOID, UUIDOID, TIMESTAMPTZOID, BOOLOID, BOOLOID
	};
	static const Oid meta_types[3] = {TEXTOID, TEXTOID, JSONBOID};
	Datum		values[18];
	char		nulls[18];
	TimestampTz now = silo_now_ts();
	TimestampTz effective_start;
	bool		due;
	char	   *id;
	int64		seq;
	int			i;
	bool		has_hints = false;
	ItemPointerData info_tid;
	ItemPointerData status_tid;

	enqueue_validate(args);

	/* Back-dated jobs start now: they must not jump the queue. */
	due = args->start_at <= now;
	effective_start = due ? now : args->start_at;
	id = args->id ? args->id : silo_uuid_to_cstring(silo_new_uuid());

	for (i = 0; i < 18; i++)
		nulls[i] = ' ';
	values[0] = CStringGetTextDatum(args->tenant);
	values[1] = CStringGetTextDatum(id);
	values[2] = CStringGetTextDatum(args->task_group);
	values[3] = Int16GetDatum((int16) args->priority);
	values[4] = TimestampTzGetDatum(args->start_at);
	values[5] = TimestampTzGetDatum(now);
	values[6] = JsonbPGetDatum(args->payload);
	if (args->retry.count < 0)
	{
		for (i = 7; i <= 11; i++)
			nulls[i] = 'n';
	}
	else
	{
		values[7] = Int32GetDatum(args->retry.count);
		values[8] = Int64GetDatum(args->retry.initial_ms);
		values[9] = Int64GetDatum(args->retry.max_ms);
		values[10] = Float8GetDatum(args->retry.factor);
		values[11] = BoolGetDatum(args->retry.randomize);
	}
	values[12] = JsonbPGetDatum(args->limits);
	values[13] = JsonbPGetDatum(args->metadata);
	values[14] = silo_new_uuid();
	values[15] = TimestampTzGetDatum(effective_start);
	values[16] = BoolGetDatum(due);
	values[17] = BoolGetDatum(args->nlimits == 0);	/* limits: the chain writes the task */

	silo_spi_connect();

	/* the job_info row, both ways; the CTE's RETURNING list is left open */
#define ENQUEUE_JOB_INFO \
	"WITH j AS (" \
	"  INSERT INTO silo.job_info (tenant, id, task_group, priority, start_at," \
	"    enqueued_at, seq, payload, retry_count, retry_initial_ms, retry_max_ms," \
	"    retry_factor, retry_randomize, limits, metadata)" \
	"  VALUES ($1, $2, $3, $4, $5, $6, nextval('silo.job_seq'), $7, $8, $9, $10," \
	"    $11, $12, $13, $14)" \
	"  ON CONFLICT DO NOTHING RETURNING seq"

	/*
	 * The task row carries hints of where its job_info and job_status rows
	 * are, and the status row one of where its 0x03 row is: the lease and
	 * the completion find them without an index search (docs/storage.md,
	 * "Row hints").
	 */
	if (enqueue_has_status_index())
		silo_exec(&insert_plan,
				  ENQUEUE_JOB_INFO ", ctid),"
				  " x AS ("
				  "  INSERT INTO silo.job_status_index (tenant, status, changed_at, id)"
				  "  SELECT $1, 'Pending', $6, $2 FROM j RETURNING ctid),"
				  " s AS ("
				  "  INSERT INTO silo.job_status (tenant, id, status, changed_at, attempt,"
				  "    relative_attempt, task_id, next_attempt_at, status_index_tid)"
				  "  SELECT $1, $2, 'Pending', $6, 1, 1, $15, $16, x.ctid FROM x RETURNING ctid),"
				  " t AS ("
				  "  INSERT INTO silo.task (task_group, start_at, priority, tenant, job_id, attempt,"
				  "    relative_attempt, task_id, seq, due, job_info_tid, job_status_tid)"
				  "  SELECT $3, $16, $4, $1, $2, 1, 1, $15, j.seq, $17, j.ctid, s.ctid"
				  "    FROM j, s WHERE $18)"
				  "SELECT j.seq, j.ctid, s.ctid FROM j, s",
				  18, insert_types, values, nulls, false, 0);
	else
		silo_exec(&insert_plan_pre15,
				  ENQUEUE_JOB_INFO "),"
				  " s AS ("
				  "  INSERT INTO silo.job_status (tenant, id, status, changed_at, attempt,"
				  "    relative_attempt, task_id, next_attempt_at)"
				  "  SELECT $1, $2, 'Pending', $6, 1, 1, $15, $16 FROM j),"
				  " t AS ("
				  "  INSERT INTO silo.task (task_group, start_at, priority, tenant, job_id, attempt,"
				  "    relative_attempt, task_id, seq, due)"
				  "  SELECT $3, $16, $4, $1, $2, 1, 1, $15, j.seq, $17 FROM j WHERE $18)"
				  "SELECT seq FROM j",
				  18, insert_types, values, nulls, false, 0);

	if (SPI_processed == 0)
	{
		silo_spi_finish();
		if (args->ignore_conflict)
			return id;
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("job \"%s\" already exists in tenant \"%s\"", id, args->tenant),
				 errhint("Pass on_conflict => 'ignore' to get the existing id back instead.")));
	}

	seq = silo_col_int64(0, 1);
	if (SPI_tuptable->tupdesc->natts == 3)
	{
		bool		isnull;

		/* where the rows went (1.5): the task a limit walk writes gets them */
		has_hints = true;
		ItemPointerCopy((ItemPointer) DatumGetPointer(silo_col(0, 2, &isnull)), &info_tid);
		ItemPointerCopy((ItemPointer) DatumGetPointer(silo_col(0, 3, &isnull)), &status_tid);
	}
	if (JB_ROOT_COUNT(args->metadata) > 0)
	{
		Datum		mvalues[3];

		mvalues[0] = values[0];
		mvalues[1] = values[1];
		mvalues[2] = values[13];
		silo_exec(&meta_plan,
				  "INSERT INTO silo.job_metadata (tenant, key, value, job_id)"
				  " SELECT $1, key, value, $2 FROM jsonb_each_text($3)",
				  3, meta_types, mvalues, NULL, false, 0);
	}
	if (args->nlimits > 0)
	{
		SiloChainJob job;

		memset(&job, 0, sizeof(job));
		job.tenant = args->tenant;
		job.job_id = id;
		job.task_group = args->task_group;
		job.priority = args->priority;
		job.seq = seq;
		job.attempt = 1;
		job.relative_attempt = 1;
		job.task_id = values[14];
		job.start_at = effective_start;
		job.nlimits = args->nlimits;
		job.limits = args->parsed_limits;
		job.has_info_tid = job.has_status_tid = has_hints;
		job.info_tid = info_tid;
		job.status_tid = status_tid;
		if (args->chains)
		{
			/*
			 * The caller starts it later, after SPI_finish: everything it
			 * points to was allocated before SPI_connect, and the struct
			 * and the list cell go to the caller's context too.
			 */
			SiloChainJob *jobp = SPI_palloc(sizeof(SiloChainJob));
			MemoryContext spicxt = MemoryContextSwitchTo(GetMemoryChunkContext(jobp));

			*jobp = job;
			*args->chains = lappend(*args->chains, jobp);
			MemoryContextSwitchTo(spicxt);
		}
		else
			silo_chain_start(&job, now);
	}
	silo_spi_finish();

	if (args->nlimits > 0)
		;						/* the chain woke whoever needs waking */
	else if (due)
		silo_notify_group(args->task_group);
	else
		silo_wake_broker_at_commit();
	return id;
}

/*
 * silo_enqueue_start_chains: start the limit walks enqueue_many collected
 * (SiloEnqueueArgs.chains), once every job row is in: a job row insert
 * can wait for another transaction inserting the same id, and must not do
 * so while this one holds key locks (the two could deadlock).
 */
void
silo_enqueue_start_chains(List *chains)
{
	TimestampTz now = silo_now_ts();
	ListCell   *lc;

	if (chains == NIL)
		return;
	silo_spi_connect();
	foreach(lc, chains)
	{
		silo_chain_start((SiloChainJob *) lfirst(lc), now);
		CHECK_FOR_INTERRUPTS();
	}
	silo_spi_finish();
}
