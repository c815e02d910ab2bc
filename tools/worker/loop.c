/*-------------------------------------------------------------------------
 *
 * loop.c
 *	  Signals, the worker's event loop, and shutdown.
 *
 * Everything happens in one thread.  loop_run() sleeps in poll() on the
 * libpq socket of every member (for notifications), a self-pipe written
 * by the signal handlers, and the pipes of the children, until the next
 * deadline: a heartbeat, a fallback lease, the end of the grace period, a
 * refresh command's timeout, a progress line, the idle timeout, a
 * reconnect or (cluster mode) the next read of the shard map.  Members
 * with work due lease in turn, starting one further each turn, so that
 * no node's queue starves the others of free slots.
 *
 * On SIGTERM or SIGINT the loop stops leasing, lets running jobs (and
 * refresh commands) finish for up to --grace-ms, then kills what is left;
 * exec.c releases those tasks, or fails the refresh tasks among them.
 * A second signal ends the wait at once.
 *
 * tools/worker/loop.c
 *
 *-------------------------------------------------------------------------
 */
#include "silo_worker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What a pollfd slot stands for. */
typedef enum FdKind
{
	FD_WAKE, FD_PQ, FD_STDIN, FD_STDOUT, FD_STDERR
} FdKind;

static volatile sig_atomic_t stop_signals;
static int	wake_pipe[2] = {-1, -1};

/*
 * loop_wake
 *		Write a byte to the self-pipe so poll() returns.  Called from signal
 *		handlers, hence only async-signal-safe calls and errno preserved.
 */
static void
loop_wake(void)
{
	int			save_errno = errno;
	ssize_t		rc = write(wake_pipe[1], "x", 1);

	(void) rc;					/* a full pipe already means "wake up" */
	errno = save_errno;
}

/*
 * loop_handle_stop_signal
 *		SIGTERM/SIGINT: ask the loop to shut down (a second one skips the
 *		rest of the grace period).
 */
static void
loop_handle_stop_signal(int signo)
{
	(void) signo;
	stop_signals = stop_signals + 1;
	loop_wake();
}

/*
 * loop_handle_sigchld
 *		SIGCHLD: only wake the loop; children are reaped there.
 */
static void
loop_handle_sigchld(int signo)
{
	(void) signo;
	loop_wake();
}

/*
 * loop_setup_signals
 *		Create the self-pipe and install the handlers.  SIGPIPE is ignored so
 *		that a child closing its stdin early shows up as EPIPE, not death.
 */
void
loop_setup_signals(void)
{
	struct sigaction sa;

	if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
	{
		log_msg(LOG_ERROR, "could not create pipe: %s", strerror(errno));
		exit(1);
	}
	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sa.sa_handler = loop_handle_stop_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sa.sa_handler = loop_handle_sigchld;
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sa.sa_flags = 0;
	sigaction(SIGPIPE, &sa, NULL);
}

/*
 * loop_print_progress
 *		The --progress line: totals plus the rate since the previous line.
 *		It counts jobs ended, not attempts: a failed attempt with a retry to
 *		come is shown apart.
 */
static void
loop_print_progress(int64_t now, int64_t *last_time, long *last_finished)
{
	long		finished = JOBS_ENDED();
	double		secs = (now - *last_time) / 1000.0;

	fprintf(stderr, "silo-worker: %ld jobs finished (%ld succeeded, "
			"%ld failed, %ld cancelled), %ld attempts to retry, "
			"%d in flight, %.1f jobs/s\n", finished, stats.succeeded,
			stats.failed, stats.cancelled, stats.retried, njobs,
			secs > 0 ? (finished - *last_finished) / secs : 0.0);
	*last_time = now;
	*last_finished = finished;
}

/*
 * loop_may_lease
 *		True when leasing is allowed at all: connected somewhere, not
 *		shutting down, a free slot, and --max-jobs not yet covered by
 *		reported + running.
 */
static bool
loop_may_lease(bool stopping)
{
	return members_any_connected() && !stopping && njobs < opt.concurrency &&
		(opt.max_jobs == 0 || TASKS_DONE() + njobs < opt.max_jobs);
}

/*
 * loop_member_due
 *		Whether member m should lease now: connected, listed, and woken by
 *		a full batch, a notification or its fallback timer.
 */
static bool
loop_member_due(const Member *m, int64_t now)
{
	return m->conn != NULL && m->listed &&
		(m->lease_wanted || m->notified || now >= m->next_poll_at);
}

/*
 * loop_lease_round
 *		Let every member that is due lease once, starting one member further
 *		each round (round robin), while there is room.  Returns the number
 *		of tasks leased.
 */
static int
loop_lease_round(bool stopping, int64_t now)
{
	static int	first;
	int			i,
				n = 0;

	for (i = 0; i < nmembers && loop_may_lease(stopping); i++)
	{
		Member	   *m = members[(first + i) % nmembers];

		if (loop_member_due(m, now))
			n += lease_tasks(m, now);
	}
	first = nmembers > 0 ? (first + 1) % nmembers : 0;
	return n;
}

/*
 * loop_reconnect
 *		Try again to connect to the members we lease from whose connection
 *		is down and whose back-off has passed.
 */
static void
loop_reconnect(bool stopping, int64_t now)
{
	int			i;

	for (i = 0; i < nmembers && !stopping; i++)
		if (members[i]->conn == NULL && members[i]->listed &&
			now >= members[i]->reconnect_at)
			(void) db_connect(members[i], false);
}

/*
 * loop_wait_for_events
 *		Sleep in poll() for at most timeout_ms on the self-pipe, the libpq
 *		socket and every open child pipe, then service what became ready:
 *		notifications, payload writes, output reads.
 */
static void
loop_wait_for_events(int timeout_ms)
{
	static struct pollfd *pfds;
	static Job **pjob;
	static Member **pmember;
	static FdKind *pkind;
	static int	cap;
	int			nfds = 0,
				i;

	if (cap < 1 + nmembers + 3 * opt.concurrency)
	{
		cap = 1 + nmembers + 3 * opt.concurrency;
		pfds = realloc(pfds, cap * sizeof(struct pollfd));
		pjob = realloc(pjob, cap * sizeof(Job *));
		pmember = realloc(pmember, cap * sizeof(Member *));
		pkind = realloc(pkind, cap * sizeof(FdKind));
		if (pfds == NULL || pjob == NULL || pmember == NULL || pkind == NULL)
		{
			log_msg(LOG_ERROR, "out of memory");
			exit(1);
		}
	}
#define WATCH(fd_, ev_, job_, member_, kind_) \
	do { pfds[nfds].fd = (fd_); pfds[nfds].events = (ev_); \
		 pfds[nfds].revents = 0; pjob[nfds] = (job_); \
		 pmember[nfds] = (member_); pkind[nfds++] = (kind_); } while (0)
	WATCH(wake_pipe[0], POLLIN, NULL, NULL, FD_WAKE);
	for (i = 0; i < nmembers; i++)
		if (members[i]->conn != NULL && PQsocket(members[i]->conn) >= 0)
			WATCH(PQsocket(members[i]->conn), POLLIN, NULL, members[i], FD_PQ);
	for (i = 0; i < opt.concurrency; i++)
	{
		if (jobs[i] == NULL)
			continue;
		if (jobs[i]->in_fd >= 0)
			WATCH(jobs[i]->in_fd, POLLOUT, jobs[i], NULL, FD_STDIN);
		if (jobs[i]->out_fd >= 0)
			WATCH(jobs[i]->out_fd, POLLIN, jobs[i], NULL, FD_STDOUT);
		if (jobs[i]->err_fd >= 0)
			WATCH(jobs[i]->err_fd, POLLIN, jobs[i], NULL, FD_STDERR);
	}
#undef WATCH
	if (poll(pfds, nfds, timeout_ms) < 0)
	{
		if (errno == EINTR)
			return;				/* a signal: the loop looks at it next */
		log_msg(LOG_ERROR, "poll failed: %s", strerror(errno));
		exit(1);
	}
	for (i = 0; i < nfds; i++)
	{
		if (pfds[i].revents == 0)
			continue;
		switch (pkind[i])
		{
			case FD_WAKE:
				break;			/* drained at the top of the loop */
			case FD_PQ:
				if (pmember[i]->conn == NULL)
					break;
				if (!PQconsumeInput(pmember[i]->conn) ||
					PQstatus(pmember[i]->conn) == CONNECTION_BAD)
				{
					log_msg(LOG_WARNING, "%s: %.*s", member_name(pmember[i]),
							msglen(PQerrorMessage(pmember[i]->conn)),
							PQerrorMessage(pmember[i]->conn));
					db_drop_connection(pmember[i]);
				}
				else
					db_drain_notifies(pmember[i]);
				break;
			case FD_STDIN:
				exec_write_stdin(pjob[i]);
				break;
			case FD_STDOUT:
				exec_read(pjob[i], false);
				break;
			case FD_STDERR:
				exec_read(pjob[i], true);
				break;
		}
	}
}

/*
 * loop_run
 *		The event loop.  Each turn reaps children, advances the shutdown
 *		state, checks the exit conditions, sends due heartbeats and the
 *		reports that waited for their shard, leases if there is room and a
 *		reason to, then sleeps in poll() until the next deadline, a
 *		notification, a signal or child I/O.
 */
void
loop_run(int64_t start)
{
	int64_t		last_busy = start,
				progress_time = start,
				grace_end = 0;
	long		progress_finished = 0;
	bool		stopping = false,
				killed = false;

	for (;;)
	{
		char		drain[64];
		int64_t		now,
					wake;
		int			i;
		long		done_before = TASKS_DONE() + REFRESHES() + stats.lost;

		while (read(wake_pipe[0], drain, sizeof(drain)) > 0)
			;
		exec_reap_children();
		now = now_ms();
		if (TASKS_DONE() + REFRESHES() + stats.lost != done_before)
			last_busy = now;

		/* shutdown: stop leasing, wait out the grace period, then kill */
		if (stop_signals > 0 && !stopping)
		{
			stopping = true;
			grace_end = now + opt.grace_ms;
			if (njobs > 0)
				log_msg(LOG_INFO, "stopping; waiting up to %d ms for %d job(s)",
						opt.grace_ms, njobs);
		}
		if (stop_signals > 1 && grace_end > now)
			grace_end = now;
		if (stopping && !killed && now >= grace_end)
		{
			killed = true;
			for (i = 0; i < opt.concurrency; i++)
				if (jobs[i] && !jobs[i]->lost && jobs[i]->pid > 0)
				{
					jobs[i]->shutdown_kill = true;
					exec_signal_job(jobs[i], SIGKILL);
				}
		}

		if (njobs > 0)
			last_busy = now;
		else if (stopping)
			break;
		else if (opt.max_jobs > 0 && TASKS_DONE() >= opt.max_jobs)
			break;
		else if (opt.exit_when_idle_ms > 0 &&
				 now - last_busy >= opt.exit_when_idle_ms)
		{
			log_msg(LOG_INFO, "idle for %d ms; exiting", opt.exit_when_idle_ms);
			break;
		}

		loop_reconnect(stopping, now);
		if (cluster_mode && !stopping && now >= members_refresh_at)
			members_refresh(now);

		lease_heartbeat_jobs(now);
		exec_retry_reports(now_ms());
		for (i = 0; i < opt.concurrency; i++)
			if (jobs[i] && jobs[i]->kill_at > 0 && now >= jobs[i]->kill_at)
			{
				exec_signal_job(jobs[i], SIGKILL);
				jobs[i]->kill_at = 0;
			}
		for (i = 0; i < opt.concurrency; i++)
			if (jobs[i] && jobs[i]->timeout_at > 0 && now >= jobs[i]->timeout_at)
			{
				if (!jobs[i]->lost)
				{
					log_msg(LOG_WARNING, "refresh command for key %s (task %s) "
							"timed out after %d ms; killing it",
							jobs[i]->queue_key ? jobs[i]->queue_key : "?",
							jobs[i]->task_id, opt.refresh_timeout_ms);
					jobs[i]->timed_out = true;
					exec_signal_job(jobs[i], SIGKILL);
				}
				jobs[i]->timeout_at = 0;
			}

		if (loop_may_lease(stopping))
		{
			if (loop_lease_round(stopping, now) > 0)
				last_busy = now;
			now = now_ms();
		}

		if (opt.progress && now >= progress_time + 1000)
			loop_print_progress(now, &progress_time, &progress_finished);

		/* work out how long we may sleep */
		wake = now + 1000;
		for (i = 0; i < nmembers; i++)
		{
			Member	   *m = members[i];

			db_drain_notifies(m);
			if (!loop_may_lease(stopping) || m->conn == NULL || !m->listed)
				continue;
			if (m->lease_wanted || m->notified)
				wake = now;
			else if (m->next_poll_at < wake)
				wake = m->next_poll_at;
		}
		if (cluster_mode && !stopping && members_refresh_at < wake)
			wake = members_refresh_at;
		for (i = 0; i < opt.concurrency; i++)
		{
			if (jobs[i] && !jobs[i]->lost && jobs[i]->next_heartbeat < wake)
				wake = jobs[i]->next_heartbeat;
			if (jobs[i] && jobs[i]->kill_at > 0 && jobs[i]->kill_at < wake)
				wake = jobs[i]->kill_at;
			if (jobs[i] && jobs[i]->timeout_at > 0 && jobs[i]->timeout_at < wake)
				wake = jobs[i]->timeout_at;
			if (jobs[i] && jobs[i]->report_at > 0 && jobs[i]->report_at < wake)
				wake = jobs[i]->report_at;
		}
		if (stopping && !killed && grace_end < wake)
			wake = grace_end;
		if (opt.progress && progress_time + 1000 < wake)
			wake = progress_time + 1000;
		if (opt.exit_when_idle_ms > 0 && njobs == 0 &&
			last_busy + opt.exit_when_idle_ms < wake)
			wake = last_busy + opt.exit_when_idle_ms;
		for (i = 0; i < nmembers && !stopping; i++)
			if (members[i]->conn == NULL && members[i]->listed &&
				members[i]->reconnect_at < wake)
				wake = members[i]->reconnect_at;

		loop_wait_for_events(wake > now ? (int) (wake - now) : 0);
	}
}
