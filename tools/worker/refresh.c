/*-------------------------------------------------------------------------
 *
 * refresh.c
 *	  Refresh tasks of floating concurrency limits: answering them, and
 *	  turning the outcome of a --refresh-exec command into a report.
 *
 * silo.lease() hands out a refresh task (kind 'refresh') when a floating
 * key's refresh interval has passed while the key is in use.  The task
 * carries the key (queue_key), its current max and its metadata, and must
 * be answered with silo.report_refresh(task_id, worker_id, new_max) or
 * silo.fail_refresh(task_id, worker_id, error); the job reports
 * (complete, fail, ack_cancel, release) refuse it with SQLSTATE SL010.
 *
 * With --refresh-exec CMD the task runs as a child like a job (exec.c),
 * heartbeated like a job, and:
 *	  exit 0, stdout an integer >= 1 (surrounding whitespace ignored)
 *								-> report_refresh with that integer
 *	  exit 0 with other output, a non-zero exit, death by a signal, or a
 *	  run past --refresh-timeout-ms (the command is killed)
 *								-> fail_refresh with a description
 *	  killed when the shutdown grace period ran out
 *								-> fail_refresh "worker shutting down"
 *	  lease lost				-> nothing (the server reschedules it)
 * fail_refresh keeps the old max and makes the server retry with backoff.
 *
 * Without --refresh-exec each refresh task is answered at once with its
 * current max, so the key keeps its value and its refresh cycle goes on.
 *
 * tools/worker/refresh.c
 *
 *-------------------------------------------------------------------------
 */
#include "silo_worker.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#define WHITESPACE	" \t\r\n\f\v"

/*
 * refresh_fail_with
 *		fail_refresh() with the error "what", followed by ": " and text when
 *		text is not empty.  The error must be valid UTF-8 of at most
 *		REFRESH_ERROR_MAX characters, so text is cleaned and, when too long,
 *		cut: keeping its end (keep_tail, for stderr) or its start.
 */
static QueryStatus
refresh_fail_with(Job *job, const char *what, const char *text,
				  size_t len, bool keep_tail)
{
	StrBuf		clean = {0},
				msg = {0};
	const char *part;
	size_t		room,
				nchars;
	QueryStatus qs;

	while (len > 0 && strchr(WHITESPACE, text[0]) != NULL && text[0] != '\0')
	{
		text++;
		len--;
	}
	while (len > 0 && strchr(WHITESPACE, text[len - 1]) != NULL &&
		   text[len - 1] != '\0')
		len--;
	sb_puts(&msg, what);
	if (len > 0)
	{
		utf8_append_clean(&clean, text, len);
		sb_puts(&msg, ": ");
		room = REFRESH_ERROR_MAX - utf8_chars(msg.data);
		nchars = utf8_chars(clean.data);
		part = clean.data;
		if (nchars > room && keep_tail)
		{
			sb_puts(&msg, "...");
			part = utf8_skip_chars(clean.data, nchars - (room - 3));
			sb_puts(&msg, part);
		}
		else if (nchars > room)
		{
			sb_append(&msg, part,
					  (size_t) (utf8_skip_chars(part, room - 3) - part));
			sb_puts(&msg, "...");
		}
		else
			sb_puts(&msg, part);
	}
	qs = route_job_call(job, "fail_refresh", SQL_FAIL_REFRESH, 3, msg.data,
						NULL);
	log_msg(LOG_VERBOSE, "refresh task %s failed: %s", job->task_id, msg.data);
	sb_free(&clean);
	sb_free(&msg);
	return qs;
}

/*
 * refresh_report
 *		report_refresh() with the new max (a decimal string).
 */
static QueryStatus
refresh_report(Job *job, const char *new_max)
{
	return route_job_call(job, "report_refresh", SQL_REPORT_REFRESH, 3,
						  new_max, NULL);
}

/*
 * refresh_handle_row
 *		Answer one leased refresh task: start --refresh-exec for it, or
 *		without that option report its current max unchanged.
 */
void
refresh_handle_row(Member *m, PGresult *res, int row, int64_t now)
{
	static bool told;
	const char *task_id = PQgetvalue(res, row, COL_TASK_ID);
	Job			task = {0};		/* what the reports need of it */

	if (opt.refresh_exec_cmd != NULL)
	{
		exec_spawn_job(m, res, row, now);
		return;
	}
	task.member = m;
	task.lease_until = now + opt.lease_ms;
	task.task_id = (char *) task_id;
	task.tenant = PQgetvalue(res, row, COL_TENANT);
	if (!told)
	{
		log_msg(LOG_INFO, "no --refresh-exec: answering refresh tasks of "
				"floating limits with their current max, unchanged");
		told = true;
	}
	if (PQgetisnull(res, row, COL_CURRENT_MAX))
	{
		/* cannot happen; fail it rather than guess a limit */
		if (refresh_fail_with(&task, "refresh task without a current max",
							  "", 0, false) == QS_OK)
			stats.refresh_failed++;
		else
			stats.lost++;
		return;
	}
	log_msg(LOG_VERBOSE, "refresh of key %s (task %s): keeping max %s",
			PQgetvalue(res, row, COL_QUEUE_KEY), task_id,
			PQgetvalue(res, row, COL_CURRENT_MAX));
	if (refresh_report(&task, PQgetvalue(res, row, COL_CURRENT_MAX)) == QS_OK)
		stats.refreshed++;
	else
		stats.lost++;
}

/*
 * refresh_spawn_failed
 *		The refresh command could not be started at all.
 */
void
refresh_spawn_failed(Job *job, const char *error)
{
	if (refresh_fail_with(job, "could not start the refresh command",
						  error, strlen(error), false) == QS_OK)
		stats.refresh_failed++;
	else
		stats.lost++;
}

/*
 * refresh_parse_max
 *		Whether text (len bytes, whitespace around it allowed) is a decimal
 *		integer in 1..INT_MAX; if so, store its canonical form in out.
 */
static bool
refresh_parse_max(const char *text, size_t len, char *out, size_t outsize)
{
	long long	v = 0;
	size_t		i;

	while (len > 0 && strchr(WHITESPACE, text[0]) != NULL && text[0] != '\0')
	{
		text++;
		len--;
	}
	while (len > 0 && strchr(WHITESPACE, text[len - 1]) != NULL &&
		   text[len - 1] != '\0')
		len--;
	if (len == 0)
		return false;
	for (i = 0; i < len; i++)
	{
		if (text[i] < '0' || text[i] > '9')
			return false;
		v = v * 10 + (text[i] - '0');
		if (v > INT_MAX)
			return false;
	}
	if (v < 1)
		return false;
	snprintf(out, outsize, "%lld", v);
	return true;
}

/*
 * refresh_finish
 *		Report the outcome of a reaped --refresh-exec child whose lease is
 *		still ours (see the table at the top of the file), and point
 *		*counter at the statistic a successful report counts in.
 */
QueryStatus
refresh_finish(Job *job, int status, long **counter)
{
	const char *out = job->out.data ? job->out.data : "";
	const char *tail = job->err_tail;
	size_t		tail_len = job->err_len;
	char		what[128],
				new_max[24];

	/* a cut-off stderr tail may start inside a UTF-8 sequence: skip that */
	while (job->err_truncated && tail_len > 0 &&
		   ((unsigned char) tail[0] & 0xC0) == 0x80)
	{
		tail++;
		tail_len--;
	}
	*counter = &stats.refresh_failed;
	if (job->timed_out && WIFSIGNALED(status))
	{
		snprintf(what, sizeof(what), "refresh command timed out after %d ms",
				 opt.refresh_timeout_ms);
		return refresh_fail_with(job, what, tail, tail_len, true);
	}
	if (job->shutdown_kill && WIFSIGNALED(status))
		return refresh_fail_with(job, "worker shutting down", "", 0,
								 false);
	if (WIFSIGNALED(status))
	{
		snprintf(what, sizeof(what), "refresh command was killed by signal %d",
				 WTERMSIG(status));
		return refresh_fail_with(job, what, tail, tail_len, true);
	}
	if (WEXITSTATUS(status) != 0)
	{
		snprintf(what, sizeof(what), "refresh command exited with status %d",
				 WEXITSTATUS(status));
		return refresh_fail_with(job, what, tail, tail_len, true);
	}
	if (job->out.len == 0)
		return refresh_fail_with(job, "refresh command printed "
								 "nothing; expected an integer >= 1", "", 0,
								 false);
	if (job->out_truncated ||
		!refresh_parse_max(out, job->out.len, new_max, sizeof(new_max)))
		return refresh_fail_with(job, "refresh command output is "
								 "not an integer >= 1", out, job->out.len,
								 false);
	log_msg(LOG_VERBOSE, "refresh of key %s (task %s): max %s -> %s",
			job->queue_key ? job->queue_key : "?", job->task_id,
			job->current_max ? job->current_max : "?", new_max);
	*counter = &stats.refreshed;
	return refresh_report(job, new_max);
}
