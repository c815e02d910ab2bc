/*-------------------------------------------------------------------------
 *
 * floating.c
 *	  Floating concurrency limits: the shared per-(tenant, key) state
 *	  (silo.floating_limit, 0x0B) and its refresh lifecycle.
 *
 * The first job to use a key creates the state with its default max,
 * refresh interval, metadata and task group; later definitions are
 * ignored.  A refresh is a task delivered by silo.lease (kind 'refresh')
 * to a worker of that task group, who answers with silo.report_refresh or
 * silo.fail_refresh.  The state row carries the whole lifecycle:
 *
 *	  refresh_task_id NULL		no refresh scheduled
 *	  ... and refresh_ready		scheduled, waiting for a worker
 *	  ... and not ready			leased (a task_lease row of kind 'refresh')
 *	  refresh_check_at			when the broker must look at the row next:
 *								the next refresh, a failure's backoff, or the
 *								deadline after which a scheduled refresh is
 *								treated as lost; NULL while the key is idle
 *
 * The broker schedules a refresh only for a key in use (holders or
 * requesters); a key found idle goes dormant (check_at NULL) and the next
 * job that walks it re-arms it, so idle keys cost the broker nothing.
 * Every change happens under the key's lock (chain.c), except a lease of
 * the refresh, which only flips refresh_ready under the row's lock.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_limits.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/datum.h"

/* How long a scheduled refresh may exist beyond its interval before it
 * is treated as lost: the default lease time. */
#define FLOATING_LOST_GRACE_MS	10000
#define FLOATING_BACKOFF_MS		1000
#define FLOATING_MAX_BACKOFF_MS 60000

/*
 * silo_floating_max: the current max of a floating key, creating its
 * state from l when this is the first use, and re-arming the broker's
 * check when the key was dormant.  The key lock must be held.
 */
int32
silo_floating_max(const char *tenant, SiloLimit *l, const char *task_group, TimestampTz now)
{
	static SPIPlanPtr read_plan = NULL;
	static SPIPlanPtr create_plan = NULL;
	static SPIPlanPtr arm_plan = NULL;
	static const Oid types[7] = {
		TEXTOID, TEXTOID, INT4OID, INT8OID, JSONBOID, TEXTOID, TIMESTAMPTZOID
	};
	Datum		values[7];
	int32		max;

	values[0] = CStringGetTextDatum(tenant);
	values[1] = CStringGetTextDatum(l->key);
	silo_exec(&read_plan,
			  "SELECT current_max, refresh_check_at IS NULL AND refresh_task_id IS NULL"
			  "  FROM silo.floating_limit WHERE tenant = $1 AND queue = $2",
			  2, types, values, NULL, false, 0);
	if (SPI_processed == 1)
	{
		max = silo_col_int32(0, 1);
		if (silo_col_bool(0, 2))
		{
			/*
			 * Dormant: due again as of its last refresh (or backoff).  A row
			 * locked by a lease of its refresh is busy anyway: skip it.
			 */
			values[6] = TimestampTzGetDatum(now);
			silo_exec(&arm_plan,
					  "UPDATE silo.floating_limit SET refresh_check_at = greatest("
					  "   last_refreshed_at + refresh_interval_ms * interval '1 millisecond',"
					  "   coalesce(next_retry_at, '-infinity'))"
					  " WHERE ctid = ANY(ARRAY(SELECT ctid FROM silo.floating_limit"
					  "   WHERE tenant = $1 AND queue = $2 AND refresh_check_at IS NULL"
					  "   FOR UPDATE SKIP LOCKED))",
					  7, types, values, NULL, false, 0);
			silo_wake_broker_at_commit();
		}
		return max;
	}

	values[2] = Int32GetDatum(l->max);
	values[3] = Int64GetDatum(l->refresh_interval_ms);
	values[4] = l->metadata ? JsonbPGetDatum(l->metadata)
		: DirectFunctionCall1(jsonb_in, CStringGetDatum("{}"));
	values[5] = CStringGetTextDatum(task_group);
	values[6] = TimestampTzGetDatum(now);
	silo_exec(&create_plan,
			  "INSERT INTO silo.floating_limit (tenant, queue, current_max, default_max,"
			  "  refresh_interval_ms, metadata, task_group, created_at, last_refreshed_at,"
			  "  refresh_check_at)"
			  " VALUES ($1, $2, $3, $3, $4, $5, $6, $7, $7, $7 + $4 * interval '1 millisecond')",
			  7, types, values, NULL, false, 0);
	silo_wake_broker_at_commit();
	return l->max;
}

/* the tail of silo_floating_lease's statement, in both of its forms */
#define FLOATING_LEASE_REST \
	"  RETURNING refresh_task_id, tenant, queue, current_max, metadata, refresh_scheduled_at)," \
	" l AS (" \
	"  INSERT INTO silo.task_lease (task_id, kind, task_group, tenant, job_id, attempt," \
	"    relative_attempt, priority, start_at, seq, worker_id, started_at, expires_at," \
	"    owner_role)" \
	"  SELECT refresh_task_id, 'refresh', $1, tenant, queue, 0, 0, 0," \
	"    refresh_scheduled_at, 0, $3, $4, $5, $7 FROM f)" \
	"SELECT refresh_task_id, tenant, queue, current_max, metadata FROM f" \
	" ORDER BY refresh_scheduled_at"

/*
 * silo_floating_lease: hand up to max ready refresh tasks of a task group
 * to worker_id (only those of the given tenants when ntenants >= 0), its
 * leases recorded as the calling role's; the rows (task_id, tenant,
 * queue, current_max, metadata) are left in SPI_tuptable.  Rows locked by
 * another lease are skipped.
 */
uint64
silo_floating_lease(const char *task_group, int32 max, const char *worker_id,
					TimestampTz now, TimestampTz expires, int ntenants, char **tenants)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr cluster_plan = NULL;
	static const Oid types[7] = {
		TEXTOID, INT4OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTARRAYOID, TEXTOID
	};
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};

	values[0] = CStringGetTextDatum(task_group);
	values[1] = Int32GetDatum(max);
	values[2] = CStringGetTextDatum(worker_id);
	values[3] = TimestampTzGetDatum(now);
	values[4] = TimestampTzGetDatum(expires);
	if (ntenants >= 0)
	{
		List	   *l = NIL;
		int			i;

		for (i = 0; i < ntenants; i++)
			l = lappend(l, tenants[i]);
		values[5] = silo_holds_datum(l);
	}
	else
		nulls[5] = 'n';
	values[6] = CStringGetTextDatum(silo_caller_name());
	silo_exec(silo_limits_shard_filter ? &cluster_plan : &plan,
			  silo_limits_shard_filter
			  ? "WITH f AS ("
			  "  UPDATE silo.floating_limit SET refresh_ready = false WHERE ctid = ANY(ARRAY("
			  "    SELECT ctid FROM silo.floating_limit WHERE task_group = $1 AND refresh_ready"
			  "       AND ($6 IS NULL OR tenant = ANY($6)) AND silo.shard_served(tenant)"
			  "     ORDER BY refresh_scheduled_at LIMIT $2 FOR UPDATE SKIP LOCKED))"
			  FLOATING_LEASE_REST
			  : "WITH f AS ("
			  "  UPDATE silo.floating_limit SET refresh_ready = false WHERE ctid = ANY(ARRAY("
			  "    SELECT ctid FROM silo.floating_limit WHERE task_group = $1 AND refresh_ready"
			  "       AND ($6 IS NULL OR tenant = ANY($6))"
			  "     ORDER BY refresh_scheduled_at LIMIT $2 FOR UPDATE SKIP LOCKED))"
			  FLOATING_LEASE_REST,
			  7, types, values, nulls, false, 0);
	return SPI_processed;
}

/*
 * silo_floating_finish: record a refresh's end on the key's state, which
 * must still name the lease's task.  A report sets the new max and resets
 * the failure count; a failure keeps the max and backs off 1 s, 2 s, 4 s
 * ... 60 s; an expired lease just frees the refresh to be scheduled again.
 */
void
silo_floating_finish(SiloLease *lease, SiloFloatingEnd how, int32 new_max, const char *error,
					 TimestampTz now)
{
	static SPIPlanPtr plans[3] = {NULL, NULL, NULL};
	static const Oid types[6] = {TEXTOID, TEXTOID, UUIDOID, TIMESTAMPTZOID, INT4OID, TEXTOID};
	static const char *const sql[3] = {
		"UPDATE silo.floating_limit SET current_max = $5, last_refreshed_at = $4,"
		"  retry_count = 0, next_retry_at = NULL, last_error = NULL,"
		"  refresh_task_id = NULL, refresh_ready = false, refresh_scheduled_at = NULL,"
		"  refresh_check_at = $4 + refresh_interval_ms * interval '1 millisecond'"
		" WHERE tenant = $1 AND queue = $2 AND refresh_task_id = $3",
		"UPDATE silo.floating_limit SET retry_count = retry_count + 1,"
		"  next_retry_at = $4 + least(1000 * power(2, least(retry_count, 16)), 60000)"
		"    * interval '1 millisecond',"
		"  refresh_check_at = $4 + least(1000 * power(2, least(retry_count, 16)), 60000)"
		"    * interval '1 millisecond',"
		"  last_error = $6, refresh_task_id = NULL, refresh_ready = false,"
		"  refresh_scheduled_at = NULL"
		" WHERE tenant = $1 AND queue = $2 AND refresh_task_id = $3",
		"UPDATE silo.floating_limit SET refresh_task_id = NULL, refresh_ready = false,"
		"  refresh_scheduled_at = NULL, refresh_check_at = $4"
		" WHERE tenant = $1 AND queue = $2 AND refresh_task_id = $3"
	};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};

	/* The key lock first, as every writer of the state takes it. */
	silo_limits_lock_key(lease->tenant, lease->job_id);
	values[0] = CStringGetTextDatum(lease->tenant);
	values[1] = CStringGetTextDatum(lease->job_id);	/* a refresh lease's job_id is its key */
	values[2] = lease->task_id;
	values[3] = TimestampTzGetDatum(now);
	values[4] = Int32GetDatum(new_max);
	values[5] = error ? CStringGetTextDatum(error) : (Datum) 0;
	nulls[5] = error ? ' ' : 'n';
	silo_exec(&plans[how], sql[how], 6, types, values, nulls, false, 0);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_INTERNAL),
				 errmsg("floating limit \"%s\" of tenant \"%s\" has no refresh %s scheduled",
						lease->job_id, lease->tenant, silo_uuid_to_cstring(lease->task_id))));
	if (how == SILO_FLOATING_REPORTED)
		silo_grant_key(lease->tenant, lease->job_id, now);
	else
		silo_wake_broker_at_commit();
}

/*
 * silo_floating_reset: forget a key's state and any scheduled refresh
 * (silo.reset_floating_limit).  The next job that needs the key re-creates
 * it from its own definition (default max, interval, metadata, task
 * group); waiting jobs are granted against that.  Returns whether there
 * was state.  SPI must be connected.
 */
bool
silo_floating_reset(const char *tenant, const char *key, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	bool		found;

	silo_limits_lock_key(tenant, key);
	values[0] = CStringGetTextDatum(tenant);
	values[1] = CStringGetTextDatum(key);
	silo_exec(&plan,
			  "DELETE FROM silo.floating_limit WHERE tenant = $1 AND queue = $2"
			  " RETURNING refresh_task_id",
			  2, types, values, NULL, false, 0);
	found = SPI_processed > 0;
	if (found)
	{
		bool		isnull;
		Datum		task = silo_col(0, 1, &isnull);

		/* A worker reporting this refresh right now makes this 55P03: retry. */
		if (!isnull)
			silo_lease_delete_nowait(datumCopy(task, false, UUID_LEN));
	}
	/* Waiting jobs re-create the state with their own default. */
	silo_grant_key(tenant, key, now);
	return found;
}

/*
 * floating_check_key: the broker's decision for one key (its lock and
 * row taken without waiting): schedule a refresh for a key in use,
 * recover a lost one, or let an idle key go dormant.  Returns false
 * when the key no longer needed a look.
 */
static bool
floating_check_key(const char *tenant, const char *queue, TimestampTz now)
{
	static SPIPlanPtr read_plan = NULL;
	static SPIPlanPtr set_plan = NULL;
	static const Oid types[5] = {TEXTOID, TEXTOID, TIMESTAMPTZOID, UUIDOID, TIMESTAMPTZOID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	bool		isnull;
	bool		scheduled;
	bool		in_use;
	char	   *task_group;
	int64		interval_ms;

	silo_limits_lock_key(tenant, queue);
	values[0] = CStringGetTextDatum(tenant);
	values[1] = CStringGetTextDatum(queue);
	values[2] = TimestampTzGetDatum(now);
	silo_exec(&read_plan,
			  "SELECT f.refresh_task_id IS NOT NULL, f.refresh_ready, l.expires_at, f.task_group,"
			  "  f.refresh_interval_ms, f.refresh_task_id,"
			  "  EXISTS (SELECT 1 FROM silo.concurrency_holder h WHERE h.tenant = $1 AND h.queue = $2)"
			  "  OR EXISTS (SELECT 1 FROM silo.concurrency_request r WHERE r.tenant = $1 AND r.queue = $2)"
			  "  FROM silo.floating_limit f LEFT JOIN silo.task_lease l"
			  "    ON l.task_id = f.refresh_task_id AND l.kind = 'refresh'"
			  " WHERE f.tenant = $1 AND f.queue = $2 AND f.refresh_check_at <= $3"
			  " FOR UPDATE OF f NOWAIT",
			  3, types, values, NULL, false, 0);
	if (SPI_processed != 1)
		return false;
	scheduled = silo_col_bool(0, 1);
	task_group = silo_col_text(0, 4);
	interval_ms = silo_col_int64(0, 5);
	in_use = silo_col_bool(0, 7);

	if (scheduled)
	{
		TimestampTz lease_expires = silo_col_ts(0, 3, &isnull);
		Datum		old_task = silo_col(0, 6, &isnull);

		/* A refresh leased to a live worker is not lost: look again later. */
		if (!silo_col_bool(0, 2) && lease_expires > now)
		{
			values[3] = old_task;
			values[4] = TimestampTzGetDatum(lease_expires);
			in_use = true;
		}
		else
		{
			ereport(LOG,
					(errmsg("silo: refresh %s of floating limit \"%s\" (tenant \"%s\") was not answered in time; %s",
							silo_uuid_to_cstring(old_task), queue, tenant,
							in_use ? "scheduling a new one" : "the key is idle now")));
			silo_lease_delete_nowait(old_task);
			values[3] = in_use ? silo_new_uuid() : (Datum) 0;
			values[4] = TimestampTzGetDatum(now + (interval_ms + FLOATING_LOST_GRACE_MS) * 1000);
		}
	}
	else
	{
		values[3] = in_use ? silo_new_uuid() : (Datum) 0;
		values[4] = TimestampTzGetDatum(now + (interval_ms + FLOATING_LOST_GRACE_MS) * 1000);
	}
	nulls[3] = in_use ? ' ' : 'n';
	nulls[4] = in_use ? ' ' : 'n';

	/*
	 * $4 NULL: idle, dormant until a job re-arms it.  Otherwise $4 is the
	 * scheduled refresh and $5 the time to look again.
	 */
	silo_exec(&set_plan,
			  "UPDATE silo.floating_limit SET refresh_check_at = $5,"
			  "  refresh_ready = CASE WHEN $4 IS NULL THEN false"
			  "                       WHEN $4 = refresh_task_id THEN refresh_ready ELSE true END,"
			  "  refresh_scheduled_at = CASE WHEN $4 IS NULL THEN NULL"
			  "                       WHEN $4 = refresh_task_id THEN refresh_scheduled_at ELSE $3 END,"
			  "  refresh_task_id = $4"
			  " WHERE tenant = $1 AND queue = $2",
			  5, types, values, nulls, false, 0);
	if (in_use)
	{
		silo_set_refresh_hint(true);
		silo_notify_group(task_group);
	}
	return true;
}

/*
 * silo_floating_any_ready: whether any refresh task waits for a worker
 * (the broker's input to the refresh hint).
 */
bool
silo_floating_any_ready(void)
{
	static SPIPlanPtr plan = NULL;

	silo_exec(&plan, "SELECT 1 FROM silo.floating_limit WHERE refresh_ready LIMIT 1",
			  0, NULL, NULL, NULL, true, 1);
	return SPI_processed > 0;
}

/*
 * floating_check_item / floating_describe_item: silo_run_listed's
 * callbacks over (tenant, queue) rows.
 */
static bool
floating_check_item(int i, void *arg, TimestampTz now)
{
	SiloListed *l = (SiloListed *) arg;

	return floating_check_key(SILO_CELL(l, i, 0), SILO_CELL(l, i, 1), now);
}

static char *
floating_describe_item(int i, void *arg)
{
	SiloListed *l = (SiloListed *) arg;

	return psprintf("check the floating limit \"%s\" of tenant \"%s\"",
					SILO_CELL(l, i, 1), SILO_CELL(l, i, 0));
}

/*
 * silo_check_floating_limits: the broker's refresh pass over keys whose
 * check time has come, at most limit of them after skipping *offset busy
 * ones.  Returns the number of keys looked at.
 */
int64
silo_check_floating_limits(TimestampTz now, int limit, int64 *offset, bool *more)
{
	static SPIPlanPtr plans[2] = {NULL, NULL};
	static const char *const sql[2] = {
		"SELECT tenant, queue FROM silo.floating_limit WHERE refresh_check_at <= $1"
		" ORDER BY refresh_check_at OFFSET $3 LIMIT $2",
		"SELECT tenant, queue FROM silo.floating_limit WHERE refresh_check_at <= $1"
		" AND silo.shard_served(tenant) ORDER BY refresh_check_at OFFSET $3 LIMIT $2"
	};
	int			c = silo_limits_shard_filter ? 1 : 0;

	return silo_run_listed(&plans[c], sql[c],
						   now, limit, offset, more, floating_check_item, floating_describe_item);
}
