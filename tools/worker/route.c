/*-------------------------------------------------------------------------
 *
 * route.c
 *	  Sending a heartbeat or a report to the node that holds its task's
 *	  lease, following NOT_OWNER hints.
 *
 * Every per-task call names the task's tenant.  While the task's shard
 * stays put the call goes to the member the task was leased from.  When
 * the shard has moved, that node answers SL020 with the new owner in the
 * DETAIL; the lease moved with the shard, so the same call is sent there
 * (at most MAX_HOPS hints, never back to a node already tried in this
 * call).  The job then belongs to the new member: its next heartbeat and
 * its report go there directly.  SL021 (the shard is paused for a move, or
 * being acquired) and an SL020 without an owner (between the release and
 * the acquisition) are retried after 100 ms, doubling up to 1 s, while the
 * caller's deadline allows: for a report, its lease's end.  The report of
 * a command that ended (exec.c) does not wait here: it returns
 * QS_RETRY_LATER with the time of its next try in the job, and the loop
 * sends it again then, leasing, reaping and reporting other jobs
 * meanwhile.  The other reports (a completion of a batch that is sent
 * alone, the release of a job that could not start) wait here, sending
 * the heartbeats that fall due from the wait.  A heartbeat passes no
 * deadline and is simply sent again soon, so the wait never nests.
 *
 * tools/worker/route.c
 *
 *-------------------------------------------------------------------------
 */
#include "silo_worker.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define MAX_HOPS			3
#define RETRY_FIRST_MS		100
#define RETRY_MAX_MS		1000
#define LEASE_MARGIN_MS		200	/* give up this long before the lease ends */
#define SLEEP_STEP_MS		50	/* heartbeats are checked this often */

/*
 * route_sleep
 *		Wait ms milliseconds (a retry's delay), sending the heartbeats that
 *		fall due meanwhile, so that the other jobs' leases do not run out
 *		while one report waits for its shard.  Signals cut a step short,
 *		which only makes the retry early.
 */
static void
route_sleep(int ms)
{
	int64_t		end = now_ms() + ms,
				now;

	while ((now = now_ms()) < end)
	{
		int64_t		step = end - now < SLEEP_STEP_MS ? end - now : SLEEP_STEP_MS;
		struct timespec ts;

		ts.tv_sec = 0;
		ts.tv_nsec = (long) step * 1000000L;
		(void) nanosleep(&ts, NULL);
		lease_heartbeat_jobs(now_ms());
	}
}

/*
 * route_call
 *		db_task_call() on *mp, following SL020 hints and retrying SL021 (and
 *		SL020 without an owner) until deadline (0: no retry).  *mp becomes
 *		the member that answered last, so the caller can keep it for the
 *		task.  With defer_ms, a retry is not waited for: the call returns
 *		QS_RETRY_LATER and *defer_ms is the wait before the next try (it
 *		comes in as the one to use, 0 for the first).  Returns the last
 *		answer's status.
 */
static QueryStatus
route_call(Member **mp, const char *what, const char *sql, int nparams,
		   const char *task_id, const char *p3, const char *p4,
		   const char *tenant, int64_t deadline, PGresult **res,
		   int *defer_ms)
{
	Member	   *tried[MAX_HOPS + 1];
	int			hops = 0,
				delay = defer_ms != NULL && *defer_ms > 0 ? *defer_ms : RETRY_FIRST_MS;

	tried[0] = *mp;
	for (;;)
	{
		QueryStatus qs = db_task_call(*mp, what, sql, nparams, task_id, p3, p4,
									  tenant, res);
		Member	   *owner = NULL;
		bool		no_owner = false;
		int			i;

		if (qs == QS_NOT_OWNER && hops < MAX_HOPS)
		{
			owner = members_follow_hint(last_detail);
			no_owner = (owner == NULL);
		}
		if (owner != NULL)
		{
			for (i = 0; i <= hops; i++)
				if (tried[i] == owner)
				{
					log_msg(LOG_WARNING, "%s of task %s: the owner hint leads "
							"back to %s; not following it", what, task_id,
							member_name(owner));
					return qs;
				}
			log_msg(LOG_INFO, "%s of task %s (tenant \"%s\"): not the owner; "
					"following NOT_OWNER to %s", what, task_id, tenant,
					member_name(owner));
			stats.not_owner++;
			tried[++hops] = owner;
			*mp = owner;
			continue;
		}
		if ((qs == QS_UNAVAILABLE || no_owner) &&
			deadline > 0 && now_ms() + delay < deadline)
		{
			log_msg(LOG_VERBOSE, "%s of task %s: shard unavailable on %s; "
					"retrying in %d ms", what, task_id, member_name(*mp), delay);
			if (defer_ms != NULL)
			{
				*defer_ms = delay;
				return QS_RETRY_LATER;
			}
			route_sleep(delay);
			delay = delay * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : delay * 2;
			continue;
		}
		return qs;
	}
}

/*
 * route_task_call
 *		route_call() that waits out its retries (see the file's comment).
 */
QueryStatus
route_task_call(Member **mp, const char *what, const char *sql, int nparams,
				const char *task_id, const char *p3, const char *p4,
				const char *tenant, int64_t deadline, PGresult **res)
{
	return route_call(mp, what, sql, nparams, task_id, p3, p4, tenant,
					  deadline, res, NULL);
}

/*
 * route_job_call
 *		A report of a job or refresh task (params after the worker id: p3,
 *		p4), routed from the member that holds its lease, retried within
 *		what is left of the lease.  With job->defer_reports a retry is not
 *		waited for: QS_RETRY_LATER, and job->report_at says when to send
 *		the report again (the wait doubling from try to try).
 */
QueryStatus
route_job_call(Job *job, const char *what, const char *sql, int nparams,
			   const char *p3, const char *p4)
{
	int64_t		deadline = job->lease_until - LEASE_MARGIN_MS;
	int			delay = job->report_delay;
	QueryStatus qs;

	qs = route_call(&job->member, what, sql, nparams, job->task_id, p3, p4,
					job->tenant, deadline, NULL,
					job->defer_reports ? &delay : NULL);
	if (qs == QS_RETRY_LATER)
	{
		job->report_at = now_ms() + delay;
		job->report_delay = delay * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : delay * 2;
	}
	return qs;
}
