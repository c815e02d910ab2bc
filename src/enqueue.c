/*-------------------------------------------------------------------------
 *
 * enqueue.c
 *	  silo.enqueue and silo.enqueue_many: create jobs.
 *
 * An enqueue writes, in the caller's transaction, the job_info row, the
 * job_status row (Pending, attempt 1), its 0x03 row and the job's first
 * task, in one statement; metadata index rows follow when there is metadata.  A due job
 * queues a (coalesced) wake-up notification for its task group; a future
 * job wakes the broker at commit so it is promoted on time.
 *
 *-------------------------------------------------------------------------
 */
#include "silo.h"

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

PG_FUNCTION_INFO_V1(silo_enqueue);
PG_FUNCTION_INFO_V1(silo_enqueue_many);

static void enqueue_validate(SiloEnqueueArgs *args);
static bool enqueue_parse_on_conflict(const char *value);
static void enqueue_from_json(JsonbValue *obj, SiloEnqueueArgs *args);
static void enqueue_many_error_context(void *arg);

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
 * enqueue_parse_on_conflict: 'error' or 'ignore'.
 */
static bool
enqueue_parse_on_conflict(const char *value)
{
	if (strcmp(value, "ignore") == 0)
		return true;
	if (strcmp(value, "error") == 0)
		return false;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("on_conflict must be 'error' or 'ignore'"),
			 errdetail("The value given is \"%s\".", value)));
	return false;				/* keep compiler quiet */
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
	return silo_status_index_exists();
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
 * silo_enqueue: SQL entry point silo.enqueue(task_group, payload, tenant,
 * id, priority, start_at, retry_policy, limits, metadata, on_conflict).
 */
Datum
silo_enqueue(PG_FUNCTION_ARGS)
{
	SiloEnqueueArgs args;

	memset(&args, 0, sizeof(args));
	args.task_group = silo_text_arg(fcinfo, 0, "task_group", 1, SILO_MAX_GROUP_LEN);
	silo_require_arg(fcinfo, 1, "payload");
	args.payload = PG_GETARG_JSONB_P(1);
	args.tenant = silo_text_arg(fcinfo, 2, "tenant", 1, SILO_MAX_TENANT_LEN);
	args.id = PG_ARGISNULL(3) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(3));
	silo_require_arg(fcinfo, 4, "priority");
	args.priority = PG_GETARG_INT32(4);
	silo_require_arg(fcinfo, 5, "start_at");
	args.start_at = PG_GETARG_TIMESTAMPTZ(5);
	silo_parse_retry_policy(PG_ARGISNULL(6) ? NULL : PG_GETARG_JSONB_P(6), &args.retry);
	silo_require_arg(fcinfo, 7, "limits");
	args.limits = PG_GETARG_JSONB_P(7);
	silo_require_arg(fcinfo, 8, "metadata");
	args.metadata = PG_GETARG_JSONB_P(8);
	silo_require_arg(fcinfo, 9, "on_conflict");
	args.ignore_conflict = enqueue_parse_on_conflict(text_to_cstring(PG_GETARG_TEXT_PP(9)));

	PG_RETURN_TEXT_P(cstring_to_text(silo_enqueue_job(&args)));
}

/*
 * enqueue_json_string: a required JSON string field as a C string.
 */
static char *
enqueue_json_string(const char *key, JsonbValue *v)
{
	if (v->type == jbvNull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", key)));
	if (v->type != jbvString)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a JSON string", key)));
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/*
 * enqueue_parse_timestamp: an ISO 8601 start_at from enqueue_many.  The
 * datetime parser leaves no state behind when it fails, so its error can
 * be caught and re-raised as 22023 without a subtransaction.
 */
static TimestampTz
enqueue_parse_timestamp(const char *s)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	volatile TimestampTz result = 0;

	PG_TRY();
	{
		result = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in,
														 CStringGetDatum(s),
														 ObjectIdGetDatum(InvalidOid),
														 Int32GetDatum(-1)));
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("start_at must be a timestamp such as an ISO 8601 string"),
				 errdetail("%s", edata->message),
				 errhint("Example: \"2026-11-22T10:00:00Z\".")));
	}
	PG_END_TRY();
	return result;
}

/*
 * enqueue_from_json: fill args from one object of the enqueue_many array.
 * Keys are enqueue's argument names; anything else is rejected.
 */
static void
enqueue_from_json(JsonbValue *obj, SiloEnqueueArgs *args)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *key = NULL;
	bool		have_group = false;

	if (obj->type != jbvBinary || JsonContainerIsArray(obj->val.binary.data) ||
		JsonContainerIsScalar(obj->val.binary.data))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("each element of jobs must be a JSON object")));

	/* Defaults, as in silo.enqueue. */
	args->payload = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")));
	args->tenant = "-";
	args->id = NULL;
	args->priority = 50;
	args->start_at = GetCurrentTransactionStartTimestamp();
	silo_parse_retry_policy(NULL, &args->retry);
	args->limits = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("[]")));
	args->metadata = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")));
	args->ignore_conflict = false;

	it = JsonbIteratorInit(obj->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			key = pnstrdup(v.val.string.val, v.val.string.len);
			continue;
		}
		if (tok != WJB_VALUE)
			continue;

		if (strcmp(key, "task_group") == 0)
		{
			args->task_group = enqueue_json_string(key, &v);
			have_group = true;
		}
		else if (strcmp(key, "payload") == 0)
			args->payload = JsonbValueToJsonb(&v);
		else if (strcmp(key, "tenant") == 0)
			args->tenant = enqueue_json_string(key, &v);
		else if (strcmp(key, "id") == 0)
			args->id = v.type == jbvNull ? NULL : enqueue_json_string(key, &v);
		else if (strcmp(key, "priority") == 0)
		{
			double		d;

			if (v.type == jbvNull)
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("priority must not be null")));
			if (v.type != jbvNumeric)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("priority must be a JSON number")));
			d = DatumGetFloat8(DirectFunctionCall1(numeric_float8_no_overflow,
												   NumericGetDatum(v.val.numeric)));
			if (!(d >= -1e9 && d <= 1e9) || d != floor(d))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("priority must be an integer between 0 and 99")));
			args->priority = (int32) d;
		}
		else if (strcmp(key, "start_at") == 0)
		{
			args->start_at = enqueue_parse_timestamp(enqueue_json_string(key, &v));
		}
		else if (strcmp(key, "retry_policy") == 0)
			silo_parse_retry_policy(v.type == jbvNull ? NULL : JsonbValueToJsonb(&v),
									&args->retry);
		else if (strcmp(key, "limits") == 0 || strcmp(key, "metadata") == 0)
		{
			if (v.type == jbvNull)
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("%s must not be null", key)));
			if (key[0] == 'l')
				args->limits = JsonbValueToJsonb(&v);
			else
				args->metadata = JsonbValueToJsonb(&v);
		}
		else if (strcmp(key, "on_conflict") == 0)
			args->ignore_conflict = enqueue_parse_on_conflict(enqueue_json_string(key, &v));
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unknown key \"%s\" in a job object", key),
					 errhint("Keys are silo.enqueue's argument names: task_group, payload, tenant, id, priority, start_at, retry_policy, limits, metadata, on_conflict.")));
	}
	if (!have_group)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("task_group must not be null"),
				 errdetail("Every job object needs a \"task_group\" key.")));
}

/*
 * enqueue_many_error_context: say which array element an error is about.
 */
static void
enqueue_many_error_context(void *arg)
{
	errcontext("job %d of the jobs array (counting from 0)", *(int *) arg);
}

/*
 * silo_enqueue_many: SQL entry point silo.enqueue_many(jobs jsonb).  All
 * or nothing: any invalid element aborts the statement.  Ids come back in
 * input order; jobs walk their limits in input order, after every job row
 * is written.
 */
Datum
silo_enqueue_many(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Jsonb	   *jobs;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	ErrorContextCallback errcb;
	int			index = 0;
	List	   *chains = NIL;

	silo_require_arg(fcinfo, 0, "jobs");
	jobs = PG_GETARG_JSONB_P(0);
	if (!JB_ROOT_IS_ARRAY(jobs) || JB_ROOT_IS_SCALAR(jobs))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("jobs must be a JSON array of job objects")));

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);

	errcb.callback = enqueue_many_error_context;
	errcb.arg = &index;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;

	it = JsonbIteratorInit(&jobs->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		SiloEnqueueArgs args;
		Datum		id;
		bool		isnull = false;

		if (tok != WJB_ELEM)
			continue;
		memset(&args, 0, sizeof(args));
		enqueue_from_json(&v, &args);
		args.chains = &chains;
		id = CStringGetTextDatum(silo_enqueue_job(&args));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &id, &isnull);
		index++;
		CHECK_FOR_INTERRUPTS();
	}
	error_context_stack = errcb.previous;

	/*
	 * Limits are walked once every job row is in: a job row insert can wait
	 * for another transaction inserting the same id, and must not do so
	 * while this one holds key locks (the two could deadlock).
	 */
	if (chains != NIL)
	{
		TimestampTz now = silo_now_ts();
		ListCell   *lc;

		silo_spi_connect();
		foreach(lc, chains)
		{
			silo_chain_start((SiloChainJob *) lfirst(lc), now);
			CHECK_FOR_INTERRUPTS();
		}
		silo_spi_finish();
	}
	return (Datum) 0;
}
