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

bool		lease_wanted;
bool		notified;
int64_t		next_poll_at;
static bool ever_leased;		/* a lease has worked since startup */

/* Whether row of a SQL_LEASE result is a retry (relative_attempt > 1). */
#define ROW_IS_RETRY(res, row) \
	(!PQgetisnull((res), (row), COL_REL_ATTEMPT) && \
	 atoi(PQgetvalue((res), (row), COL_REL_ATTEMPT)) > 1)

/*
 * lease_complete_noop_batch
 *		Complete the first n leased tasks of a no-op batch, refresh tasks
 *		left out, in one round trip with silo.complete_many, which skips
 *		tasks whose lease was lost (counted as lost).  The retries among
 *		them are passed too, so that the jobs they end count as ended after
 *		retries.  If the call fails (an extension older than 1.2), complete
 *		them one at a time.
 */
static void
lease_complete_noop_batch(PGresult *res, int n)
{
	int			i,
				njob = 0,
				nretry = 0;
	StrBuf		ids = {0},
				retries = {0};
	const char *params[3];
	QueryStatus qs;
	PGresult   *done = NULL;

	sb_puts(&ids, "{");
	sb_puts(&retries, "{");
	for (i = 0; i < n; i++)
	{
		if (ROW_IS_REFRESH(res, i))
			continue;
		if (njob++ > 0)
			sb_puts(&ids, ",");
		sb_puts(&ids, PQgetvalue(res, i, COL_TASK_ID));
		if (ROW_IS_RETRY(res, i))
		{
			if (nretry++ > 0)
				sb_puts(&retries, ",");
			sb_puts(&retries, PQgetvalue(res, i, COL_TASK_ID));
		}
	}
	sb_puts(&ids, "}");
	sb_puts(&retries, "}");
	if (njob == 0)
	{
		sb_free(&ids);
		sb_free(&retries);
		return;
	}
	params[0] = opt.worker_id;
	params[1] = ids.data;
	params[2] = retries.data;
	qs = db_query("complete batch", SQL_COMPLETE_MANY, 3, params, &done);
	sb_free(&ids);
	sb_free(&retries);
	if (qs == QS_OK)
	{
		int			completed = atoi(PQgetvalue(done, 0, 0));

		stats.after_retries += atoi(PQgetvalue(done, 0, 1));
		PQclear(done);
		stats.succeeded += completed;
		stats.lost += njob - completed;
		return;
	}
	for (i = 0; i < n; i++)
	{
		if (ROW_IS_REFRESH(res, i))
			continue;
		if (db_task_call("complete", SQL_COMPLETE, 3,
						 PQgetvalue(res, i, COL_TASK_ID), NULL, NULL) == QS_OK)
		{
			stats.succeeded++;
			if (ROW_IS_RETRY(res, i))
				stats.after_retries++;
		}
		else
			stats.lost++;
	}
}

/*
 * lease_tasks
 *		Ask for as many tasks as we have room for (bounded by --batch and
 *		--max-jobs) and hand them to the handler.  A full batch means more
 *		work is probably waiting, so the loop leases again without sleeping;
 *		a short one means the queue is drained, so wait for NOTIFY or timer.
 *		Returns the number of tasks leased.
 */
int
lease_tasks(int64_t now)
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
	notified = false;
	qs = db_query("lease", SQL_LEASE, 4, params, &res);
	if (qs != QS_OK)
	{
		/* a missing extension or privilege will not fix itself */
		if (qs == QS_ERROR && !ever_leased &&
			(strncmp(last_sqlstate, "42", 2) == 0 ||
			 strncmp(last_sqlstate, "3F", 2) == 0))
		{
			log_msg(LOG_ERROR, "cannot lease from task group \"%s\"; "
					"is the silo extension installed and usable?",
					opt.task_group);
			exit(1);
		}
		lease_wanted = false;
		next_poll_at = now + (opt.poll_ms > 1000 ? opt.poll_ms : 1000);
		return 0;
	}
	ever_leased = true;
	n = PQntuples(res) < want ? PQntuples(res) : (int) want;	/* never more */
	lease_wanted = (n == want);
	if (!lease_wanted)
		next_poll_at = now + opt.poll_ms;
	if (n > 0)
		log_msg(LOG_VERBOSE, "leased %d task(s)", n);
	for (i = 0; i < n && conn != NULL; i++)
	{
		if (ROW_IS_REFRESH(res, i))
			refresh_handle_row(res, i, now);
		else if (opt.exec_cmd != NULL)
			exec_spawn_job(res, i, now);
	}
	if (n > 0 && opt.exec_cmd == NULL)
		lease_complete_noop_batch(res, n);
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
 * lease_heartbeat_jobs
 *		Extend the leases of jobs whose heartbeat is due.  Jobs due within
 *		a short slack are included so their heartbeats coalesce into one
 *		statement; if that fails (one lease lost) go one by one to find out
 *		which, killing the children whose lease is gone.
 */
void
lease_heartbeat_jobs(int64_t now)
{
	int			interval = opt.lease_ms / 3 > 0 ? opt.lease_ms / 3 : 1;
	int			i,
				j,
				n = 0;
	bool		any_due = false;
	StrBuf		ids = {0};
	char		lease_s[16];
	const char *params[3];
	PGresult   *res;
	QueryStatus qs = QS_ERROR;

	for (i = 0; i < opt.concurrency; i++)
		if (jobs[i] && !jobs[i]->lost && jobs[i]->next_heartbeat <= now)
			any_due = true;
	if (!any_due || conn == NULL)
		return;
	snprintf(lease_s, sizeof(lease_s), "%d", opt.lease_ms);
	sb_puts(&ids, "{");
	for (i = 0; i < opt.concurrency; i++)
		if (jobs[i] && !jobs[i]->lost &&
			jobs[i]->next_heartbeat <= now + interval / 4)
		{
			sb_puts(&ids, n++ ? "," : "");
			sb_puts(&ids, jobs[i]->task_id);
			jobs[i]->next_heartbeat = now + interval;
			jobs[i]->in_round = true;
		}
		else if (jobs[i])
			jobs[i]->in_round = false;
	sb_puts(&ids, "}");

	if (n > 1)
	{
		params[0] = opt.worker_id;
		params[1] = ids.data;
		params[2] = lease_s;
		qs = db_query("heartbeat batch", SQL_HEARTBEAT_MANY, 3, params, &res);
		if (qs == QS_OK)
		{
			for (j = 0; j < PQntuples(res); j++)
				for (i = 0; i < opt.concurrency; i++)
					if (jobs[i] && strcmp(jobs[i]->task_id,
										  PQgetvalue(res, j, 0)) == 0)
						lease_apply_heartbeat(jobs[i], PQgetvalue(res, j, 1),
											  now);
			PQclear(res);
		}
	}
	sb_free(&ids);
	if (qs == QS_OK || qs == QS_CONN_LOST)
		return;

	for (i = 0; i < opt.concurrency && conn != NULL; i++)
	{
		Job		   *job = jobs[i];

		if (job == NULL || job->lost || !job->in_round)
			continue;
		params[0] = job->task_id;
		params[1] = opt.worker_id;
		params[2] = lease_s;
		qs = db_query("heartbeat", SQL_HEARTBEAT, 3, params, &res);
		if (qs == QS_OK)
		{
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
	}
}
