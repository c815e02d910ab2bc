/*-------------------------------------------------------------------------
 *
 * grant.c
 *	  Granting a key's waiting requesters, in order, while the key has
 *	  room (chain.c's header has the rules every grant follows).
 *
 *-------------------------------------------------------------------------
 */
#include "silo_limits.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datum.h"

/* Requesters granted per round trip. */
#define GRANT_BATCH	32

/* One requester, copied out of the grant query's result. */
typedef struct GrantRequest
{
	int32		priority;
	TimestampTz start_at;
	int64		seq;
	int32		attempt;
	char	   *job_id;
	int32		relative_attempt;
	Datum		task_id;
	char	   *task_group;
	int32		limit_index;
	int32		max;			/* 0: floating */
	List	   *holds;
} GrantRequest;

/*
 * grant_read_requests: the first requesters of a key in grant order,
 * with the key's holder count and floating max (0 when none).
 */
static int
grant_read_requests(const char *tenant, const char *queue, GrantRequest *out,
					int64 *holders, int32 *floating_max)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[3] = {TEXTOID, TEXTOID, INT4OID};
	Datum		values[3];
	uint64		i;
	bool		isnull;

	values[0] = CStringGetTextDatum(tenant);
	values[1] = CStringGetTextDatum(queue);
	values[2] = Int32GetDatum(GRANT_BATCH);
	silo_exec(&plan,
			  "SELECT r.priority, r.start_at, r.seq, r.attempt, r.job_id, r.relative_attempt,"
			  "  r.task_id, r.task_group, r.limit_index, coalesce(r.max_concurrency, 0), r.holds,"
			  "  (SELECT count(*) FROM silo.concurrency_holder h WHERE h.tenant = $1 AND h.queue = $2),"
			  "  coalesce((SELECT f.current_max FROM silo.floating_limit f"
			  "             WHERE f.tenant = $1 AND f.queue = $2), 0)"
			  "  FROM silo.concurrency_request r WHERE r.tenant = $1 AND r.queue = $2"
			  " ORDER BY r.priority, r.start_at, r.seq, r.attempt LIMIT $3",
			  3, types, values, NULL, false, 0);
	for (i = 0; i < SPI_processed; i++)
	{
		GrantRequest *r = &out[i];

		r->priority = DatumGetInt16(silo_col(i, 1, &isnull));
		r->start_at = silo_col_ts(i, 2, NULL);
		r->seq = silo_col_int64(i, 3);
		r->attempt = silo_col_int32(i, 4);
		r->job_id = silo_col_text(i, 5);
		r->relative_attempt = silo_col_int32(i, 6);
		r->task_id = datumCopy(silo_col(i, 7, &isnull), false, UUID_LEN);
		r->task_group = silo_col_text(i, 8);
		r->limit_index = DatumGetInt16(silo_col(i, 9, &isnull));
		r->max = silo_col_int32(i, 10);
		r->holds = silo_holds_list(silo_col(i, 11, &isnull));
		*holders = silo_col_int64(i, 12);
		*floating_max = silo_col_int32(i, 13);
	}
	return (int) SPI_processed;
}

/*
 * grant_take_request: delete a granted requester's row (under the key
 * lock, so it is there).
 */
static void
grant_take_request(const char *tenant, const char *queue, GrantRequest *r)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[6] = {TEXTOID, TEXTOID, INT2OID, TIMESTAMPTZOID, INT8OID, INT4OID};
	Datum		values[6];

	values[0] = CStringGetTextDatum(tenant);
	values[1] = CStringGetTextDatum(queue);
	values[2] = Int16GetDatum((int16) r->priority);
	values[3] = TimestampTzGetDatum(r->start_at);
	values[4] = Int64GetDatum(r->seq);
	values[5] = Int32GetDatum(r->attempt);
	silo_exec(&plan,
			  "DELETE FROM silo.concurrency_request WHERE tenant = $1 AND queue = $2"
			  " AND priority = $3 AND start_at = $4 AND seq = $5 AND attempt = $6",
			  6, types, values, NULL, false, 0);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_INTERNAL),
				 errmsg("requester of job \"%s\" for key \"%s\" vanished under the key lock",
						r->job_id, queue)));
}

/*
 * silo_grant_key: grant waiting requesters of a key, in order (priority,
 * effective start, enqueue order), while the key has capacity for the
 * one at the head: a fixed key compares its holders with the head job's
 * own maxConcurrency, a floating key with the shared current max.  Each
 * granted job goes on with its chain in this transaction; that walk may
 * come back to this key (nested grant passes are fine: each reads the
 * current rows), after which the batch is read again.  The key lock must
 * be held.
 */
void
silo_grant_key(const char *tenant, const char *queue, TimestampTz now)
{
	GrantRequest reqs[GRANT_BATCH];

	/* grants nest through the granted jobs' chain walks */
	check_stack_depth();
	for (;;)
	{
		int64		holders = 0;
		int32		floating_max = 0;
		int			n = grant_read_requests(tenant, queue, reqs, &holders, &floating_max);
		int			i;
		bool		stale = false;

		for (i = 0; i < n && !stale; i++)
		{
			GrantRequest *r = &reqs[i];
			SiloChainJob job;
			int32		max = r->max;

			memset(&job, 0, sizeof(job));
			job.tenant = pstrdup(tenant);
			job.job_id = r->job_id;
			job.task_group = r->task_group;
			job.priority = r->priority;
			job.seq = r->seq;
			job.attempt = r->attempt;
			job.relative_attempt = r->relative_attempt;
			job.task_id = r->task_id;
			job.start_at = r->start_at;
			job.holds = r->holds;

			if (max == 0)
			{
				/* Floating: the shared max, re-created if an operator reset it. */
				if (floating_max == 0)
				{
					silo_chain_load_limits(&job);
					floating_max = silo_floating_max(tenant, &job.limits[r->limit_index],
													 r->task_group, now);
				}
				max = floating_max;
			}
			if (holders >= max)
				return;			/* the head waits; nobody overtakes it */

			grant_take_request(tenant, queue, r);
			silo_chain_write_holder(tenant, queue, r->task_id, r->job_id, r->attempt, now);
			holders++;
			job.holds = lappend(job.holds, pstrdup(queue));
			if (job.limits == NULL)
				silo_chain_load_limits(&job);
			silo_chain_walk(&job, r->limit_index + 1, SILO_CHAIN_CASCADE, now);

			/*
			 * A job with more limits went on to other keys, whose grants may
			 * have come back to this key (a job waiting on it further down
			 * its chain) and granted or queued here: the batch and the
			 * holder count are stale, read them again.
			 */
			if (r->limit_index + 1 < job.nlimits)
				stale = true;
		}
		if (!stale && n < GRANT_BATCH)
			return;
	}
}
