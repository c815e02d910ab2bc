/*-------------------------------------------------------------------------
 *
 * release.c
 *	  Freeing the slots a job holds: on a report (silo_limits_release), on
 *	  a batch of reports (silo_limits_release_many), on a cancel of a
 *	  waiting job (silo_chain_cancel), and the broker's pass over keys
 *	  whose release could not take their lock (silo_run_regrants).
 *
 * A release deletes the job's holder rows in the caller's transaction and
 * grants each freed key's waiters at once (silo_grant_key, grant.c).  It
 * follows the global lock order of keys.c (rules in chain.c): it waits for a key only above
 * every key it holds; a key busy out of order is not waited for, its
 * holder row is deleted all the same and a regrant marker hands its
 * waiters to the broker.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_limits.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"

/*
 * release_mark_regrant: a released key whose lock was busy: the holder row
 * is gone, but its waiters must be looked at by whoever can take the
 * lock.  The marker is a plain insert (no unique key), so writing it never
 * waits; the broker grants and deletes markers.
 */
static void
release_mark_regrant(const char *tenant, const char *queue, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[3] = {TEXTOID, TEXTOID, TIMESTAMPTZOID};
	Datum		values[3];

	values[0] = CStringGetTextDatum(tenant);
	values[1] = CStringGetTextDatum(queue);
	values[2] = TimestampTzGetDatum(now);
	silo_exec(&plan,
			  "INSERT INTO silo.concurrency_regrant (tenant, queue, marked_at) VALUES ($1, $2, $3)",
			  3, types, values, NULL, false, 0);
	silo_wake_broker_at_commit();
}

/*
 * silo_limits_release: free the slots task_id holds on queues, in the
 * caller's transaction: a batch of one for silo_limits_release_many.  Keys
 * are taken in hash order, waiting only where the global order allows; a
 * key that is busy out of order is not waited for (a transaction
 * completing a batch of jobs would otherwise deadlock with another): its
 * holder row is deleted all the same -- a concurrent grant can only
 * over-count it, never over-grant -- and a regrant marker hands its
 * waiters to the broker.  Keys taken are granted at once.
 */
void
silo_limits_release(const char *tenant, List *queues, Datum task_id, TimestampTz now)
{
	char	   *tenants[1];

	tenants[0] = pstrdup(tenant);
	silo_limits_release_many(1, tenants, &queues, &task_id, now);
}

/* One key a batch releases: its lock hash, and whether the lock was had. */
typedef struct ReleasedKey
{
	uint64		hash;
	const char *tenant;
	const char *queue;
	Datum		task_id;		/* the attempt whose holder row goes */
	bool		locked;
	bool		regrant;		/* busy: leave a marker for the broker */
} ReleasedKey;

/*
 * release_key_cmp: qsort comparator of released keys, in hash order
 * (the global lock order), equal keys together.
 */
static int
release_key_cmp(const void *a, const void *b)
{
	const ReleasedKey *x = (const ReleasedKey *) a;
	const ReleasedKey *y = (const ReleasedKey *) b;
	int			c;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	c = strcmp(x->tenant, y->tenant);
	return c != 0 ? c : strcmp(x->queue, y->queue);
}

/*
 * silo_limits_release_many: free the slots of the tasks of a batch
 * (complete_many; silo_limits_release is a batch of one): tenants[i] is
 * NULL for a task that holds nothing.  The keys of the whole batch are
 * locked in one pass in hash order, under the rules above (wait only in
 * order; a busy key gets a regrant marker); then, with no SQL (direct.c),
 * each holder row is deleted by its key and each released key is probed
 * for a waiter, so that only keys with waiters are granted.
 */
void
silo_limits_release_many(int ntasks, char **tenants, List **holds, Datum *task_ids,
						 TimestampTz now)
{
	static const char *const holder_cols[] = {"tenant", "queue", "task_id"};
	static const char *const request_cols[] = {"tenant", "queue"};
	ReleasedKey *keys;
	int		   *waiting;
	int			nwaiting = 0;
	int			n = 0;
	int			i;
	SiloDirect *d;
	SiloTable  *holder;
	SiloTable  *request;

	for (i = 0; i < ntasks; i++)
		if (tenants[i] != NULL)
			n += list_length(holds[i]);
	if (n == 0)
		return;

	keys = palloc(sizeof(ReleasedKey) * n);
	n = 0;
	for (i = 0; i < ntasks; i++)
	{
		ListCell   *lc;

		if (tenants[i] == NULL)
			continue;
		foreach(lc, holds[i])
		{
			keys[n].tenant = tenants[i];
			keys[n].queue = (const char *) lfirst(lc);
			keys[n].hash = silo_key_hash('c', tenants[i], keys[n].queue, NULL);
			keys[n].task_id = task_ids[i];
			keys[n].regrant = false;
			n++;
		}
	}

	/* lock each distinct key once, in the global order */
	qsort(keys, n, sizeof(ReleasedKey), release_key_cmp);
	for (i = 0; i < n; i++)
	{
		if (i > 0 && release_key_cmp(&keys[i - 1], &keys[i]) == 0)
			keys[i].locked = keys[i - 1].locked;
		else
			keys[i].locked = silo_key_lock(keys[i].hash, false);
	}

	/*
	 * Begun after the key locks: a waiter that queued while this
	 * transaction waited for a key's lock has committed, and must be seen,
	 * as the grant's own read sees it.
	 */
	d = silo_direct_begin();
	holder = silo_table_open(d, "concurrency_holder", holder_cols, 3, NULL, SILO_TABLE_DELETE);
	request = silo_table_open(d, "concurrency_request", request_cols, 2, NULL, SILO_TABLE_READ);
	waiting = palloc(sizeof(int) * n);
	for (i = 0; i < n; i++)
	{
		Datum		key[3];

		key[0] = CStringGetTextDatum(keys[i].tenant);
		key[1] = CStringGetTextDatum(keys[i].queue);
		key[2] = keys[i].task_id;

		/*
		 * Every holder row of the batch, found by its key (one already gone
		 * is passed over, as before 1.5).
		 */
		if (silo_table_fetch(holder, 3, key))
		{
			TM_Result	res PG_USED_FOR_ASSERTS_ONLY = silo_table_delete(holder);

			/* holder rows are never updated: deleted, or gone already */
			Assert(res == TM_Ok || res == TM_Deleted || res == TM_SelfModified);
		}

		/* once per distinct key: busy keys go to the broker, others are
		 * granted if anyone waits */
		if (i > 0 && release_key_cmp(&keys[i - 1], &keys[i]) == 0)
			continue;
		if (!keys[i].locked)
		{
			keys[i].regrant = true;
			continue;
		}
		if (silo_table_fetch(request, 2, key))
			waiting[nwaiting++] = i;
	}
	silo_direct_end(d);

	for (i = 0; i < n; i++)
		if (keys[i].regrant)
			release_mark_regrant(keys[i].tenant, keys[i].queue, now);
	for (i = 0; i < nwaiting; i++)
		silo_grant_key(keys[waiting[i]].tenant, keys[waiting[i]].queue, now);
}

/*
 * release_regrant_item: the broker's handling of one marked key: take its
 * lock (without waiting: a busy key is retried), drop its markers and
 * grant its waiters.
 */
static bool
release_regrant_item(int i, void *arg, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {TEXTOID, TEXTOID};
	char	   *tenant = SILO_CELL((SiloListed *) arg, i, 0);
	char	   *queue = SILO_CELL((SiloListed *) arg, i, 1);
	Datum		values[2];

	silo_limits_lock_key(tenant, queue);
	values[0] = CStringGetTextDatum(tenant);
	values[1] = CStringGetTextDatum(queue);
	silo_exec(&plan, "DELETE FROM silo.concurrency_regrant WHERE tenant = $1 AND queue = $2",
			  2, types, values, NULL, false, 0);
	silo_grant_key(tenant, queue, now);
	return true;
}

static char *
release_regrant_describe(int i, void *arg)
{
	SiloListed *l = (SiloListed *) arg;

	return psprintf("grant the waiters of key \"%s\" of tenant \"%s\"",
					SILO_CELL(l, i, 1), SILO_CELL(l, i, 0));
}

/*
 * silo_run_regrants: the broker's pass over keys with regrant markers, at
 * most limit keys after skipping *offset busy ones.  Returns the number
 * of keys granted.
 */
int64
silo_run_regrants(TimestampTz now, int limit, int64 *offset, bool *more)
{
	static SPIPlanPtr plans[2] = {NULL, NULL};
	static const char *const sql[2] = {
		"SELECT tenant, queue FROM silo.concurrency_regrant"
		" WHERE $1 IS NOT NULL GROUP BY tenant, queue"
		" ORDER BY min(marked_at) OFFSET $3 LIMIT $2",
		"SELECT tenant, queue FROM silo.concurrency_regrant"
		" WHERE $1 IS NOT NULL AND silo.shard_served(tenant) GROUP BY tenant, queue"
		" ORDER BY min(marked_at) OFFSET $3 LIMIT $2"
	};
	int			c = silo_limits_shard_filter ? 1 : 0;

	/* $1 (now) is not needed: every marker is due. */
	return silo_run_listed(&plans[c], sql[c],
						   now, limit, offset, more, release_regrant_item, release_regrant_describe);
}

/*
 * silo_chain_cancel: remove a waiting attempt of a job with limits from
 * wherever it waits -- leasable task, chain task or requester row -- and
 * free every slot it holds.  The caller holds the job's status row.  The
 * job's keys are locked first, so a grant in flight has committed (and
 * its task is seen) or has not started.  Returns false when the attempt
 * was found nowhere (a worker leased it meanwhile).
 */
bool
silo_chain_cancel(SiloChainJob *job, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr holders_plan = NULL;
	static const Oid types[9] = {
		TEXTOID, TEXTOID, INT4OID, TEXTARRAYOID, INT2OID, TIMESTAMPTZOID, INT8OID, UUIDOID,
		TEXTOID
	};
	Datum		values[9];
	List	   *queues = silo_limit_queues(job->limits, job->nlimits);
	ListCell   *lc;

	silo_limits_lock_all(job->tenant, queues);
	values[0] = CStringGetTextDatum(job->tenant);
	values[1] = CStringGetTextDatum(job->job_id);
	values[2] = Int32GetDatum(job->attempt);
	values[3] = silo_holds_datum(queues);
	values[4] = Int16GetDatum((int16) job->priority);
	values[5] = TimestampTzGetDatum(job->start_at);
	values[6] = Int64GetDatum(job->seq);
	values[7] = job->task_id;
	values[8] = CStringGetTextDatum(job->task_group);
	silo_exec(&plan,
			  "WITH t AS (DELETE FROM silo.task WHERE task_group = $9 AND start_at = $6"
			  "    AND priority = $5 AND tenant = $1 AND job_id = $2 AND attempt = $3 RETURNING 1),"
			  " c AS (DELETE FROM silo.chain_task WHERE tenant = $1 AND job_id = $2 AND attempt = $3"
			  "    RETURNING 1),"
			  " r AS (DELETE FROM silo.concurrency_request WHERE tenant = $1 AND queue = ANY($4)"
			  "    AND priority = $5 AND start_at = $6 AND seq = $7 AND attempt = $3 RETURNING 1)"
			  "SELECT (SELECT count(*) FROM t) + (SELECT count(*) FROM c) + (SELECT count(*) FROM r)",
			  9, types, values, NULL, false, 0);
	if (silo_col_int64(0, 1) == 0)
		return false;			/* running: its slots stay with the worker */

	silo_exec(&holders_plan,
			  "DELETE FROM silo.concurrency_holder WHERE tenant = $1 AND queue = ANY($4)"
			  " AND task_id = $8",
			  9, types, values, NULL, false, 0);
	foreach(lc, queues)
		silo_grant_key(job->tenant, (char *) lfirst(lc), now);
	return true;
}
