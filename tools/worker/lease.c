/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  Leasing tasks, the no-op handler, and keeping leases alive with
 *	  heartbeats.
 *
 * lease_tasks() asks silo.lease() for as many tasks as there is room for
 * and either completes them at once (no-op mode) or starts a child per task
 * (--exec, see exec.c).  Refresh tasks of floating limits, which come first
 * in a lease, go to refresh.c.  lease_heartbeat_jobs() extends the leases of
 * the running children (refresh commands included) every third of the lease
 * and notices cancellations.
 *
 * tools/worker/lease.c
 *
 *-------------------------------------------------------------------------
 */
#include "silo_worker.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool ever_leased;		/* a lease has worked since startup */

/* Whether row of a SQL_LEASE result is a retry (relative_attempt > 1). */
#define ROW_IS_RETRY(res, row) \
	(!PQgetisnull((res), (row), COL_REL_ATTEMPT) && \
	 atoi(PQgetvalue((res), (row), COL_REL_ATTEMPT)) > 1)

/*
 * lease_complete_one
 *		Complete one no-op task alone, with its tenant, following the shard
 *		if it moved since the lease (route.c).
 */
static void
lease_complete_one(Member *m, PGresult *res, int row, int64_t now)
{
	if (route_task_call(&m, "complete", SQL_COMPLETE, 3,
						PQgetvalue(res, row, COL_TASK_ID), NULL, NULL,
						PQgetvalue(res, row, COL_TENANT),
						now + opt.lease_ms - 200, NULL) == QS_OK)
	{
		stats.succeeded++;
		if (ROW_IS_RETRY(res, row))
			stats.after_retries++;
	}
	else
		stats.lost++;
}

/*
 * lease_complete_noop_batch
 *		Complete the first n leased tasks of a no-op batch, refresh tasks
 *		left out, in one round trip with silo.complete_many on the member
 *		they were leased from.  It skips tasks whose lease is not there:
 *		single-node, that is a lost lease (counted as lost); in cluster
 *		mode the shard may have moved with the lease, so each skipped task
 *		is completed alone with its tenant, which finds the new owner.  The
 *		retries among those it completed count as jobs ended after retries.
 *		If the call fails (an extension older than 1.2, or a shard paused
 *		or moved since the lease), complete them one at a time.
 */
static void
lease_complete_noop_batch(Member *m, PGresult *res, int n, int64_t now)
{
	int			i,
				j,
				njob = 0;
	StrBuf		ids = {0};
	const char *params[2];
	QueryStatus qs;
	PGresult   *done = NULL;

	sb_puts(&ids, "{");
	for (i = 0; i < n; i++)
	{
		if (ROW_IS_REFRESH(res, i))
			continue;
		if (njob++ > 0)
			sb_puts(&ids, ",");
		sb_puts(&ids, PQgetvalue(res, i, COL_TASK_ID));
	}
	sb_puts(&ids, "}");
	if (njob == 0)
	{
		sb_free(&ids);
		return;
	}
	params[0] = opt.worker_id;
	params[1] = ids.data;
	qs = db_query(m, "complete batch", SQL_COMPLETE_MANY, 2, params, &done);
	sb_free(&ids);
	if (qs == QS_OK)
	{
		int			completed = PQntuples(done);

		stats.succeeded += completed;
		if (!cluster_mode)
			stats.lost += njob - completed;
		for (i = 0; i < n; i++)
		{
			bool		was_done = false;

			if (ROW_IS_REFRESH(res, i))
				continue;
			for (j = 0; j < completed && !was_done; j++)
				was_done = strcmp(PQgetvalue(done, j, 0),
								  PQgetvalue(res, i, COL_TASK_ID)) == 0;
			if (was_done && ROW_IS_RETRY(res, i))
				stats.after_retries++;
			else if (!was_done && cluster_mode)
				lease_complete_one(m, res, i, now);
		}
		PQclear(done);
		return;
	}
	if (qs == QS_CONN_LOST)
	{
		stats.lost += njob;
		return;
	}
	for (i = 0; i < n; i++)
		if (!ROW_IS_REFRESH(res, i))
			lease_complete_one(m, res, i, now);
}

/*
 * lease_tasks
 *		Ask member m for as many tasks as we have room for (bounded by
 *		--batch and --max-jobs) and hand them to the handler.  A full batch
 *		means more work is probably waiting there, so the loop leases again
 *		without sleeping; a short one means its queue is drained, so wait
 *		for NOTIFY or timer.  Returns the number of tasks leased.
 */
int
lease_tasks(Member *m, int64_t now)
{
	long		want = opt.batch;
	char		want_s[24],
				lease_s[16];
	const char *params[4];
	PGresult   *res;
	QueryStatus qs;
	int			n,
				i;

	if (want > opt.concurrency - njobs)
		want = opt.concurrency - njobs;
	if (opt.max_jobs > 0 && want > opt.max_jobs - TASKS_DONE() - njobs)
		want = opt.max_jobs - TASKS_DONE() - njobs;
	if (want <= 0)
		return 0;
	snprintf(want_s, sizeof(want_s), "%ld", want);
	snprintf(lease_s, sizeof(lease_s), "%d", opt.lease_ms);
	params[0] = opt.worker_id;
	params[1] = opt.task_group;
	params[2] = want_s;
	params[3] = lease_s;
	m->notified = false;
	qs = db_query(m, "lease", SQL_LEASE, 4, params, &res);
	if (qs != QS_OK)
	{
		/* a missing extension or privilege will not fix itself */
		if (qs == QS_ERROR && !ever_leased && !cluster_mode &&
			(strncmp(last_sqlstate, "42", 2) == 0 ||
			 strncmp(last_sqlstate, "3F", 2) == 0))
		{
			log_msg(LOG_ERROR, "cannot lease from task group \"%s\"; "
					"is the silo extension installed and usable?",
					opt.task_group);
			exit(1);
		}
		m->lease_wanted = false;
		m->next_poll_at = now + (opt.poll_ms > 1000 ? opt.poll_ms : 1000);
		return 0;
	}
	ever_leased = true;
	n = PQntuples(res) < want ? PQntuples(res) : (int) want;	/* never more */
	m->lease_wanted = (n == want);
	if (!m->lease_wanted)
		m->next_poll_at = now + opt.poll_ms;
	if (n > 0)
		log_msg(LOG_VERBOSE, "leased %d task(s) from %s", n, member_name(m));
	for (i = 0; i < n && m->conn != NULL; i++)
	{
		if (ROW_IS_REFRESH(res, i))
			refresh_handle_row(m, res, i, now);
		else if (opt.exec_cmd != NULL)
			exec_spawn_job(m, res, i, now);
	}
	if (n > 0 && opt.exec_cmd == NULL && m->conn != NULL)
		lease_complete_noop_batch(m, res, n, now);
	PQclear(res);
	return n;
}

/*
 * lease_apply_heartbeat
 *		Act on one heartbeat answer: true means the job was cancelled, so ask
 *		the command to stop (SIGTERM), escalating to SIGKILL after --grace-ms.
 */
static void
lease_apply_heartbeat(Job *job, const char *value, int64_t now)
{
	if (strcmp(value, "t") != 0 || job->cancelled)
		return;
	log_msg(LOG_INFO, "job %s was cancelled; stopping it",
			job->job_id ? job->job_id : job->task_id);
	job->cancelled = true;
	job->kill_at = now + opt.grace_ms;
	exec_signal_job(job, SIGTERM);
}

/*
 * lease_heartbeat_one
 *		Heartbeat one job alone, with its tenant, following its shard to a
 *		new owner (route.c; the job then reports there).  SL021 (its shard
 *		is paused for a move) is tried again shortly, while the lease lasts.
 */
static void
lease_heartbeat_one(Job *job, const char *lease_s, int64_t now)
{
	PGresult   *res = NULL;
	QueryStatus qs;

	job->in_round = false;		/* done for this round, wherever it goes */
	qs = route_task_call(&job->member, "heartbeat", SQL_HEARTBEAT, 3,
						 job->task_id, lease_s, NULL, job->tenant, 0, &res);
	if (qs == QS_OK)
	{
		job->lease_until = now + opt.lease_ms;
		lease_apply_heartbeat(job, PQntuples(res) ?
							  PQgetvalue(res, 0, 0) : "f", now);
		PQclear(res);
	}
	else if (qs == QS_LEASE_LOST)
	{
		log_msg(LOG_VERBOSE, "lease of task %s lost; killing its job",
				job->task_id);
		exec_mark_lost(job);
	}
	else if (qs == QS_UNAVAILABLE || qs == QS_NOT_OWNER)
		job->next_heartbeat = now + 250;
}

/*
 * lease_append_array_element
 *		Append text as a quoted element of a PostgreSQL array literal.
 */
static void
lease_append_array_element(StrBuf *sb, const char *text)
{
	sb_puts(sb, "\"");
	for (; *text; text++)
	{
		if (*text == '"' || *text == '\\')
			sb_puts(sb, "\\");
		sb_append(sb, text, 1);
	}
	sb_puts(sb, "\"");
}

/*
 * lease_heartbeat_member
 *		Extend, in one statement, the leases on member m of the jobs in the
 *		current round; if that fails (one lease lost, or a shard moved), go
 *		one by one to find out which.
 */
static void
lease_heartbeat_member(Member *m, const char *lease_s, int64_t now)
{
	int			i,
				j,
				n = 0;
	StrBuf		ids = {0},
				tenants = {0};
	const char *params[4];
	PGresult   *res;
	QueryStatus qs = QS_ERROR;

	sb_puts(&ids, "{");
	sb_puts(&tenants, "{");
	for (i = 0; i < opt.concurrency; i++)
		if (jobs[i] && jobs[i]->in_round && jobs[i]->member == m)
		{
			sb_puts(&ids, n ? "," : "");
			sb_puts(&ids, jobs[i]->task_id);
			sb_puts(&tenants, n++ ? "," : "");
			lease_append_array_element(&tenants, jobs[i]->tenant);
		}
	sb_puts(&ids, "}");
	sb_puts(&tenants, "}");
	if (n > 1)
	{
		params[0] = opt.worker_id;
		params[1] = ids.data;
		params[2] = lease_s;
		params[3] = tenants.data;
		qs = db_query(m, "heartbeat batch", SQL_HEARTBEAT_MANY, 4, params, &res);
		if (qs == QS_OK)
		{
			for (j = 0; j < PQntuples(res); j++)
				for (i = 0; i < opt.concurrency; i++)
					if (jobs[i] && jobs[i]->in_round && jobs[i]->member == m &&
						strcmp(jobs[i]->task_id, PQgetvalue(res, j, 0)) == 0)
					{
						jobs[i]->lease_until = now + opt.lease_ms;
						lease_apply_heartbeat(jobs[i], PQgetvalue(res, j, 1),
											  now);
					}
			PQclear(res);
		}
	}
	sb_free(&ids);
	sb_free(&tenants);
	if (qs == QS_OK || qs == QS_CONN_LOST)
		return;
	for (i = 0; i < opt.concurrency && m->conn != NULL; i++)
		if (jobs[i] && !jobs[i]->lost && jobs[i]->in_round &&
			jobs[i]->member == m)
			lease_heartbeat_one(jobs[i], lease_s, now);
}

/*
 * lease_heartbeat_jobs
 *		Extend the leases of jobs whose heartbeat is due.  Jobs due within
 *		a short slack are included so their heartbeats coalesce into one
 *		statement per member (the node that holds their leases).
 */
void
lease_heartbeat_jobs(int64_t now)
{
	int			interval = opt.lease_ms / 3 > 0 ? opt.lease_ms / 3 : 1;
	int			i,
				k;
	bool		any_due = false;
	char		lease_s[16];

	for (i = 0; i < opt.concurrency; i++)
		if (jobs[i] && !jobs[i]->lost && jobs[i]->next_heartbeat <= now)
			any_due = true;
	if (!any_due)
		return;
	snprintf(lease_s, sizeof(lease_s), "%d", opt.lease_ms);
	for (i = 0; i < opt.concurrency; i++)
		if (jobs[i] && !jobs[i]->lost && jobs[i]->member->conn != NULL &&
			jobs[i]->next_heartbeat <= now + interval / 4)
		{
			jobs[i]->next_heartbeat = now + interval;
			jobs[i]->in_round = true;
		}
		else if (jobs[i])
			jobs[i]->in_round = false;
	for (k = 0; k < nmembers; k++)
		if (members[k]->conn != NULL)
			lease_heartbeat_member(members[k], lease_s, now);
}
