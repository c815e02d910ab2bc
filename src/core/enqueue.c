/*-------------------------------------------------------------------------
 *
 * enqueue.c
 *	  Creating a job (silo.enqueue and silo.enqueue_many, api/enqueue.c).
 *
 * An enqueue writes, in the caller's transaction, the job_info row (one
 * statement), then the job_status row (Pending, attempt 1), its 0x03 row
 * and the job's first task directly (storage/jobs.c, storage/tasks.c)
 * and, when there is metadata, its metadata index rows.  A due job
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
 * silo_enqueue_check: check a job's arguments (22023), normalizing its
 * limits; schedules check the job they will fire with it too.
 */
void
silo_enqueue_check(SiloEnqueueArgs *args)
{
	silo_check_length("task_group", args->task_group, 1, SILO_MAX_GROUP_LEN);
	silo_check_name("task_group", args->task_group);
	silo_check_length("tenant", args->tenant, 1, SILO_MAX_TENANT_LEN);
	silo_check_name("tenant", args->tenant);
	if (strcmp(args->tenant, "-") == 0 && silo_group_fair(args->task_group))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("task group \"%s\" dispatches in turns across tenants: a tenant must be given",
						args->task_group),
				 errdetail("The default tenant \"-\" has no turn in a fair task group."),
				 errhint("Pass the tenant argument, or set the group's fairness to 'none'.")));
	if (strcmp(args->tenant, SILO_ALL_TENANTS) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tenant \"%s\" is reserved", SILO_ALL_TENANTS),
				 errdetail("In tenant bindings \"%s\" stands for every tenant (silo.grant_tenant).",
						   SILO_ALL_TENANTS)));
	if (args->id != NULL)
	{
		silo_check_length("id", args->id, 1, SILO_MAX_ID_LEN);
		silo_check_name("id", args->id);
	}
	silo_check_range("priority", args->priority, 0, 99);
	if (TIMESTAMP_NOT_FINITE(args->start_at))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("start_at must be a finite timestamp")));
	args->nlimits = silo_parse_limits(args->limits, &args->parsed_limits, &args->limits);
	silo_check_metadata(args->metadata);
}

/*
 * enqueue_validate: the checks of silo_enqueue_check, and the isolation
 * level a job with limits needs.
 */
static void
enqueue_validate(SiloEnqueueArgs *args)
{
	silo_enqueue_check(args);

	/*
	 * Counting a key's holders must see every committed grant: under
	 * REPEATABLE READ the count would come from the transaction's old
	 * snapshot and could over-grant.
	 */
	if (args->nlimits > 0)
		silo_require_read_committed("silo.enqueue with limits");
}

/*
 * silo_enqueue_job: write one validated job; returns its id.  The caller
 * has not connected SPI.
 */
char *
silo_enqueue_job(SiloEnqueueArgs *args)
{
	TimestampTz now = silo_now_ts();
	SiloJobRow	job;
	SiloTaskRow task;
	bool		due;
	int64		seq;
	bool		has_hints;
	ItemPointerData info_tid;
	ItemPointerData status_tid;

	enqueue_validate(args);

	/* Back-dated jobs start now: they must not jump the queue. */
	due = args->start_at <= now;
	memset(&job, 0, sizeof(job));
	job.tenant = args->tenant;
	job.id = args->id ? args->id : silo_uuid_to_cstring(silo_new_uuid());
	job.task_group = args->task_group;
	job.priority = args->priority;
	job.start_at = args->start_at;
	job.enqueued_at = now;
	job.payload = args->payload;
	job.retry = args->retry;
	job.limits = args->limits;
	job.metadata = args->metadata;
	job.task_id = silo_new_uuid();
	job.next_attempt_at = due ? now : args->start_at;

	/*
	 * A job without limits gets its task now, written with the job's rows,
	 * with hints of where its job_info and job_status rows are (the lease
	 * and the completion find them without an index search:
	 * docs/storage.md, "Row hints"); a job with limits gets it at the end of
	 * its limit walk.
	 */
	if (args->nlimits == 0)
	{
		memset(&task, 0, sizeof(task));
		task.task_group = job.task_group;
		task.start_at = job.next_attempt_at;
		task.priority = job.priority;
		task.tenant = job.tenant;
		task.job_id = job.id;
		task.attempt = 1;
		task.relative_attempt = 1;
		task.task_id = job.task_id;
		task.due = due;
		job.first_task = &task;
	}

	silo_spi_connect();
	if (!silo_job_insert(&job, &seq, &has_hints, &info_tid, &status_tid))
	{
		silo_spi_finish();
		if (args->ignore_conflict)
			return (char *) job.id;
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("job \"%s\" already exists in tenant \"%s\"", job.id, args->tenant),
				 errhint("Pass on_conflict => 'ignore' to get the existing id back instead.")));
	}

	/*
	 * The task went in without firing task_lease_mark (direct writes fire
	 * no trigger): a due task lowers its group's lease mark here instead.
	 */
	if (job.first_task != NULL && due)
		silo_mark_task_appeared(&task);
	if (JB_ROOT_COUNT(args->metadata) > 0)
		silo_job_metadata_insert(job.tenant, job.id, job.metadata);
	if (args->nlimits > 0)
	{
		SiloChainJob chain;

		memset(&chain, 0, sizeof(chain));
		chain.tenant = args->tenant;
		chain.job_id = (char *) job.id;
		chain.task_group = args->task_group;
		chain.priority = args->priority;
		chain.seq = seq;
		chain.attempt = 1;
		chain.relative_attempt = 1;
		chain.task_id = job.task_id;
		chain.start_at = job.next_attempt_at;
		chain.nlimits = args->nlimits;
		chain.limits = args->parsed_limits;
		chain.has_info_tid = chain.has_status_tid = has_hints;
		chain.info_tid = info_tid;
		chain.status_tid = status_tid;
		if (args->chains)
		{
			/*
			 * The caller starts it later, after SPI_finish: everything it
			 * points to was allocated before SPI_connect, and the struct
			 * and the list cell go to the caller's context too.
			 */
			SiloChainJob *chainp = SPI_palloc(sizeof(SiloChainJob));
			MemoryContext spicxt = MemoryContextSwitchTo(GetMemoryChunkContext(chainp));

			*chainp = chain;
			*args->chains = lappend(*args->chains, chainp);
			MemoryContextSwitchTo(spicxt);
		}
		else
			silo_chain_start(&chain, now);
	}
	silo_spi_finish();

	if (args->nlimits > 0)
		;						/* the chain woke whoever needs waking */
	else if (due)
		silo_notify_group(args->task_group);
	else
		silo_wake_broker_at_commit();
	return (char *) job.id;
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
