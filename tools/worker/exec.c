/*-------------------------------------------------------------------------
 *
 * exec.c
 *	  Child processes of --exec and --refresh-exec: starting them, feeding
 *	  their stdin, collecting their output, and reporting how they ended.
 *
 * Each task runs "/bin/sh -c CMD" in its own process group, with the
 * payload on stdin and the task described in SILO_* environment variables.
 * Our ends of its pipes are non-blocking and serviced by the event loop;
 * children are reaped there too, after SIGCHLD wakes it.  The outcome is
 * reported with silo.complete(), silo.fail(), silo.ack_cancel() or
 * silo.release(), or not at all when the lease was lost.  Refresh tasks of
 * floating limits run --refresh-exec the same way (with the key's metadata
 * on stdin); refresh.c turns their outcome into silo.report_refresh() or
 * silo.fail_refresh().
 *
 * tools/worker/exec.c
 *
 *-------------------------------------------------------------------------
 */
#include "silo_worker.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

Job		  **jobs;
int			njobs;

/*
 * exec_signal_job
 *		Send a signal to a child's whole process group (the shell and what it
 *		started), falling back to the child alone if the group is gone.
 */
void
exec_signal_job(Job *job, int signo)
{
	if (job->pid <= 0)
		return;					/* reaped already: the pid may be reused */
	if (kill(-job->pid, signo) != 0)
		(void) kill(job->pid, signo);
}

/*
 * exec_mark_lost
 *		The lease of a job is gone: kill its child and remember to report
 *		nothing when it is reaped (the server hands the task out again).
 */
void
exec_mark_lost(Job *job)
{
	if (job->lost)
		return;
	job->lost = true;
	exec_signal_job(job, SIGKILL);
}

/*
 * exec_child
 *		In the forked child: become a process-group leader (so signals reach
 *		the whole command), wire up the pipes, export the task description
 *		and exec the shell.  Never returns.
 */
static void
exec_child(const Job *job, const int *in, const int *out, const int *err)
{
	static const int sigs[] = {SIGTERM, SIGINT, SIGCHLD, SIGPIPE};
	size_t		i;

	(void) setpgid(0, 0);
	for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], SIG_DFL);
	if (dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0)
		_exit(127);
	/* the original pipe fds are O_CLOEXEC and vanish at exec */
	setenv("SILO_TASK_ID", job->task_id, 1);
	setenv("SILO_TENANT", job->tenant ? job->tenant : "", 1);
	setenv("SILO_TASK_GROUP", job->task_group ? job->task_group : "", 1);
	setenv("SILO_TASK_KIND", job->kind ? job->kind : "", 1);
	setenv("SILO_WORKER_ID", opt.worker_id, 1);
	if (job->is_refresh)
	{
		/* only what describes a refresh; nothing inherited may pose as a job */
		setenv("SILO_QUEUE_KEY", job->queue_key ? job->queue_key : "", 1);
		setenv("SILO_CURRENT_MAX", job->current_max ? job->current_max : "", 1);
		setenv("SILO_REFRESH_METADATA",
			   job->refresh_metadata ? job->refresh_metadata : "{}", 1);
		unsetenv("SILO_JOB_ID");
		unsetenv("SILO_ATTEMPT");
		unsetenv("SILO_RELATIVE_ATTEMPT");
		unsetenv("SILO_IS_LAST_ATTEMPT");
	}
	else
	{
		setenv("SILO_JOB_ID", job->job_id ? job->job_id : "", 1);
		setenv("SILO_ATTEMPT", job->attempt ? job->attempt : "", 1);
		setenv("SILO_RELATIVE_ATTEMPT",
			   job->relative_attempt ? job->relative_attempt : "", 1);
		setenv("SILO_IS_LAST_ATTEMPT", job->is_last_attempt ? "true" : "false", 1);
		unsetenv("SILO_QUEUE_KEY");
		unsetenv("SILO_CURRENT_MAX");
		unsetenv("SILO_REFRESH_METADATA");
	}
	execl("/bin/sh", "sh", "-c",
		  job->is_refresh ? opt.refresh_exec_cmd : opt.exec_cmd, (char *) NULL);
	fprintf(stderr, "silo-worker: could not run /bin/sh: %s\n", strerror(errno));
	_exit(127);
}

/*
 * exec_free_job
 *		Close whatever pipes are still open and free a job.
 */
static void
exec_free_job(Job *job)
{
	if (job->in_fd >= 0)
		close(job->in_fd);
	if (job->out_fd >= 0)
		close(job->out_fd);
	if (job->err_fd >= 0)
		close(job->err_fd);
	free(job->task_id);
	free(job->job_id);
	free(job->tenant);
	free(job->kind);
	free(job->task_group);
	free(job->attempt);
	free(job->relative_attempt);
	free(job->queue_key);
	free(job->current_max);
	free(job->refresh_metadata);
	free(job->input);
	sb_free(&job->out);
	free(job);
}

/*
 * exec_write_stdin
 *		Feed as much of the payload to the child as its pipe takes; the rest
 *		waits for POLLOUT, so a child that writes before reading all its
 *		input cannot deadlock us.  A child that closes stdin early is fine.
 */
void
exec_write_stdin(Job *job)
{
	while (job->in_fd >= 0 && job->input_off < job->input_len)
	{
		ssize_t		n = write(job->in_fd, job->input + job->input_off,
							  job->input_len - job->input_off);

		if (n > 0)
			job->input_off += (size_t) n;
		else if (n < 0 && errno == EINTR)
			continue;
		else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		else
			break;				/* EPIPE: the child does not want it */
	}
	if (job->in_fd >= 0)
		close(job->in_fd);
	job->in_fd = -1;
}

/*
 * exec_read
 *		Read what is available from a child's stdout or stderr, up to a
 *		bounded amount so one chatty child cannot starve the loop.  stdout
 *		keeps its head (the result), stderr its tail (the interesting end).
 */
void
exec_read(Job *job, bool is_stderr)
{
	int		   *fd = is_stderr ? &job->err_fd : &job->out_fd;
	char		buf[65536];
	int			round;

	for (round = 0; round < 64 && *fd >= 0; round++)
	{
		ssize_t		got = read(*fd, buf, sizeof(buf));
		size_t		n = got > 0 ? (size_t) got : 0;

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (got <= 0)
		{
			close(*fd);			/* EOF or error: done with this pipe */
			*fd = -1;
			return;
		}
		if (!is_stderr)
		{
			if (n > STDOUT_CAP - job->out.len)
			{
				n = STDOUT_CAP - job->out.len;
				job->out_truncated = true;
			}
			if (n > 0)
				sb_append(&job->out, buf, n);
		}
		else if (n >= STDERR_TAIL)
		{
			memcpy(job->err_tail, buf + n - STDERR_TAIL, STDERR_TAIL);
			job->err_len = STDERR_TAIL;
			job->err_truncated = true;
		}
		else
		{
			if (job->err_len + n > STDERR_TAIL)
			{
				size_t		drop = job->err_len + n - STDERR_TAIL;

				memmove(job->err_tail, job->err_tail + drop, job->err_len - drop);
				job->err_len -= drop;
				job->err_truncated = true;
			}
			memcpy(job->err_tail + job->err_len, buf, n);
			job->err_len += n;
		}
	}
}

/*
 * exec_spawn_job
 *		Start the --exec command for one leased row (--refresh-exec for a
 *		refresh task) and put it in a free slot.  If the child cannot be
 *		started a job's task is released, since that is our problem rather
 *		than the job's; a refresh cannot be released, so it is failed.
 */
void
exec_spawn_job(Member *m, PGresult *res, int row, int64_t now)
{
	Job		   *job = calloc(1, sizeof(Job));
	int			in[2] = {-1, -1},
				out[2] = {-1, -1},
				err[2] = {-1, -1};
	int			i;

	if (job == NULL)
	{
		log_msg(LOG_ERROR, "out of memory");
		exit(1);
	}
	job->member = m;
	job->lease_until = now + opt.lease_ms;
	job->task_id = xstrdup(PQgetvalue(res, row, COL_TASK_ID));
#define COLUMN(col) (PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col))
	job->kind = xstrdup(COLUMN(COL_KIND));
	job->tenant = xstrdup(COLUMN(COL_TENANT));
	job->job_id = xstrdup(COLUMN(COL_JOB_ID));
	job->attempt = xstrdup(COLUMN(COL_ATTEMPT));
	job->relative_attempt = xstrdup(COLUMN(COL_REL_ATTEMPT));
	job->is_last_attempt = strcmp(PQgetvalue(res, row, COL_IS_LAST), "t") == 0;
	job->task_group = xstrdup(COLUMN(COL_TASK_GROUP));
	job->is_refresh = ROW_IS_REFRESH(res, row);
	if (job->is_refresh)
	{
		job->queue_key = xstrdup(COLUMN(COL_QUEUE_KEY));
		job->current_max = xstrdup(COLUMN(COL_CURRENT_MAX));
		job->refresh_metadata = xstrdup(COLUMN(COL_REFRESH_METADATA));
		job->timeout_at = now + opt.refresh_timeout_ms;
	}
#undef COLUMN
	job->in_fd = job->out_fd = job->err_fd = -1;
	if (job->is_refresh ? job->refresh_metadata != NULL :
		!PQgetisnull(res, row, COL_PAYLOAD))
	{
		StrBuf		input = {0};

		sb_puts(&input, job->is_refresh ? job->refresh_metadata :
				PQgetvalue(res, row, COL_PAYLOAD));
		sb_puts(&input, "\n");
		job->input = input.data;
		job->input_len = input.len;
	}

	if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 ||
		pipe2(err, O_CLOEXEC) != 0 || (job->pid = fork()) < 0)
	{
		int			save_errno = errno;

		log_msg(LOG_WARNING, "could not start %s %s: %s; %s it",
				job->is_refresh ? "refresh" : "job", job->task_id,
				strerror(save_errno), job->is_refresh ? "failing" : "releasing");
		for (i = 0; i < 2; i++)
		{
			if (in[i] >= 0)
				close(in[i]);
			if (out[i] >= 0)
				close(out[i]);
			if (err[i] >= 0)
				close(err[i]);
		}
		if (job->is_refresh)
			refresh_spawn_failed(job, strerror(save_errno));
		else if (route_job_call(job, "release", SQL_RELEASE, 2,
								NULL, NULL) == QS_OK)
			stats.released++;
		else
			stats.lost++;
		exec_free_job(job);
		m->lease_wanted = false;	/* back off: fork or pipe limits are hit */
		m->next_poll_at = now + (opt.poll_ms > 1000 ? opt.poll_ms : 1000);
		return;
	}
	if (job->pid == 0)
		exec_child(job, in, out, err);

	/* parent: keep our ends, non-blocking; the child's ends are closed */
	(void) setpgid(job->pid, job->pid);
	close(in[0]);
	close(out[1]);
	close(err[1]);
	job->in_fd = in[1];
	job->out_fd = out[0];
	job->err_fd = err[0];
	fcntl(job->in_fd, F_SETFL, O_NONBLOCK);
	fcntl(job->out_fd, F_SETFL, O_NONBLOCK);
	fcntl(job->err_fd, F_SETFL, O_NONBLOCK);
	job->next_heartbeat = now + (opt.lease_ms / 3 > 0 ? opt.lease_ms / 3 : 1);
	for (i = 0; i < opt.concurrency; i++)
		if (jobs[i] == NULL)
		{
			jobs[i] = job;
			njobs++;
			break;
		}
	if (job->is_refresh)
		log_msg(LOG_VERBOSE, "started refresh of key %s (task %s) as pid %d",
				job->queue_key ? job->queue_key : "?", job->task_id,
				(int) job->pid);
	else
		log_msg(LOG_VERBOSE, "started job %s (task %s) as pid %d",
				job->job_id ? job->job_id : "?", job->task_id, (int) job->pid);
	exec_write_stdin(job);
}

/*
 * exec_report_success
 *		Complete a task whose command exited 0.  The result is NULL for empty
 *		stdout, the stdout itself if it is JSON, and otherwise stdout as a
 *		JSON string.  Should jsonb still reject our "valid" JSON (a number
 *		beyond numeric's range, say), retry with the string form.
 */
static QueryStatus
exec_report_success(Job *job)
{
	char	   *text = job->out.data ? job->out.data : "";
	size_t		len = job->out.len;
	StrBuf		wrapped = {0};
	const char *result = NULL;
	bool		raw = false;
	QueryStatus qs;

	while (len > 0 && strchr(" \t\r\n\f\v", text[0]) != NULL)
	{
		text++;
		len--;
	}
	while (len > 0 && strchr(" \t\r\n\f\v", text[len - 1]) != NULL)
		len--;
	if (job->out_truncated)
		log_msg(LOG_WARNING, "stdout of job %s exceeded %d bytes; truncated",
				job->task_id, STDOUT_CAP);
	if (len > 0 && json_is_valid(text, len))
	{
		text[len] = '\0';
		result = text;
		raw = true;
	}
	else if (len > 0)
	{
		json_append_string(&wrapped, text, len);
		result = wrapped.data;
	}
	qs = route_job_call(job, "complete", SQL_COMPLETE, 3, result, NULL);
	if (qs == QS_ERROR && raw && strncmp(last_sqlstate, "22", 2) == 0)
	{
		json_append_string(&wrapped, text, len);
		qs = route_job_call(job, "complete", SQL_COMPLETE, 3, wrapped.data,
							NULL);
	}
	sb_free(&wrapped);
	return qs;
}

/*
 * exec_report_failure
 *		Fail a task whose command exited non-zero (EXIT_<code>) or died from a
 *		signal (SIGNAL_<n>), attaching the tail of its stderr.
 */
static QueryStatus
exec_report_failure(Job *job, int status)
{
	char		code[32],
				num[32];
	StrBuf		data = {0};
	const char *tail = job->err_tail;
	size_t		tail_len = job->err_len;
	QueryStatus qs;

	/* a cut-off tail may start inside a UTF-8 sequence: skip that part */
	while (job->err_truncated && tail_len > 0 &&
		   ((unsigned char) tail[0] & 0xC0) == 0x80)
	{
		tail++;
		tail_len--;
	}
	if (WIFEXITED(status))
	{
		snprintf(code, sizeof(code), "EXIT_%d", WEXITSTATUS(status));
		snprintf(num, sizeof(num), "{\"exit_code\":%d", WEXITSTATUS(status));
	}
	else
	{
		snprintf(code, sizeof(code), "SIGNAL_%d", WTERMSIG(status));
		snprintf(num, sizeof(num), "{\"signal\":%d", WTERMSIG(status));
	}
	sb_puts(&data, num);
	sb_puts(&data, ",\"stderr\":");
	json_append_string(&data, tail, tail_len);
	sb_puts(&data, "}");
	qs = route_job_call(job, "fail", SQL_FAIL, 4, code, data.data);
	sb_free(&data);
	return qs;
}

/*
 * exec_finish_job
 *		Collect the last output of a reaped child and report its outcome.
 *		Precedence: lost lease (say nothing), cancellation (ack it), killed
 *		at shutdown (release), then the exit status; chosen once, when the
 *		child is reaped.  A report that does not land counts as lost: the
 *		server will sweep the lease.  A failure ends the job only on its
 *		last attempt; before that it counts as a retried attempt, not a job.
 *		Refresh tasks are answered by refresh_finish().  Returns false when
 *		the report met SL021 (or SL020 without owner) and waits for
 *		job->report_at (route.c): the job keeps its slot and its heartbeats
 *		until exec_retry_reports() sends it again.
 */
static bool
exec_finish_job(Job *job, int status)
{
	QueryStatus qs;
	long	   *counter;

	/* the child is gone, so whatever it wrote is already in the pipes */
	exec_read(job, false);
	exec_read(job, true);

	if (job->lost)
	{
		log_msg(LOG_VERBOSE, "dropped task %s (lease lost)", job->task_id);
		stats.lost++;
		return true;
	}
	if (job->report == '\0')
	{
		job->exit_status = status;
		if (job->is_refresh)
			job->report = 'r';
		else if (job->cancelled)
			job->report = 'c';
		else if (job->shutdown_kill && WIFSIGNALED(status))
			job->report = 'x';
		else if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
			job->report = 's';
		else
			job->report = 'f';
	}
	job->defer_reports = true;
	switch (job->report)
	{
		case 'r':
			qs = refresh_finish(job, status, &counter);
			break;
		case 'c':
			qs = route_job_call(job, "ack_cancel", SQL_ACK_CANCEL, 2, NULL, NULL);
			counter = &stats.cancelled;
			break;
		case 'x':
			qs = route_job_call(job, "release", SQL_RELEASE, 2, NULL, NULL);
			counter = &stats.released;
			break;
		case 's':
			qs = exec_report_success(job);
			counter = &stats.succeeded;
			break;
		default:
			qs = exec_report_failure(job, status);
			counter = job->is_last_attempt ? &stats.failed : &stats.retried;
			break;
	}
	job->defer_reports = false;
	if (qs == QS_RETRY_LATER)
	{
		if (job->in_fd >= 0)
		{
			close(job->in_fd);	/* nobody reads it any more */
			job->in_fd = -1;
		}
		log_msg(LOG_VERBOSE, "report of task %s waits for its shard; "
				"sending it again in %d ms", job->task_id,
				(int) (job->report_at - now_ms()));
		return false;
	}
	if (qs == QS_OK)
	{
		(*counter)++;
		/* a job ended (not a release, a retry or a refresh) by a retry */
		if ((counter == &stats.succeeded || counter == &stats.failed ||
			 counter == &stats.cancelled) &&
			job->relative_attempt != NULL && atoi(job->relative_attempt) > 1)
			stats.after_retries++;
	}
	else
		stats.lost++;
	log_msg(LOG_VERBOSE, "job %s finished (status 0x%x)%s",
			job->task_id, status, qs == QS_OK ? "" : ", not reported");
	return true;
}

/*
 * exec_reap_children
 *		Collect every exited child without blocking, report it and free its
 *		slot.  SIGCHLD only wakes the loop; the real work happens here.
 */
void
exec_reap_children(void)
{
	int			status,
				i;
	pid_t		pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) != 0)
	{
		if (pid < 0)
		{
			if (errno == EINTR)
				continue;
			break;				/* ECHILD: no children at all */
		}
		for (i = 0; i < opt.concurrency; i++)
			if (jobs[i] && jobs[i]->pid == pid)
			{
				Job		   *job = jobs[i];

				job->pid = 0;	/* reaped: never signal that pid again */
				if (exec_finish_job(job, status))
				{
					exec_free_job(job);
					jobs[i] = NULL;
					njobs--;
				}
				break;
			}
	}
}

/*
 * exec_retry_reports
 *		Send again the reports that waited for their shard (SL021) and are
 *		due; free the slots of those that are done (landed, given up, or
 *		their lease lost meanwhile).
 */
void
exec_retry_reports(int64_t now)
{
	int			i;

	for (i = 0; i < opt.concurrency; i++)
	{
		Job		   *job = jobs[i];

		if (job == NULL || job->report_at == 0 || job->report_at > now)
			continue;
		job->report_at = 0;
		if (exec_finish_job(job, job->exit_status))
		{
			exec_free_job(job);
			jobs[i] = NULL;
			njobs--;
		}
	}
}
