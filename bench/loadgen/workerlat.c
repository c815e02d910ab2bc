/*
 * workerlat.c: the latency workload through silo-worker (tools/worker),
 * silo's reference worker, instead of this program's own SQL worker.
 *
 * The load generator starts `silo-worker -g latency -c 1 -b 1 -v` (no-op
 * jobs, LISTEN on silo_task_ready plus its --poll-ms poll) with its stderr
 * on a pipe.  With -v the worker prints "leased N task(s)" right after each
 * silo.lease call that returned work, before it completes the batch; a
 * reader thread timestamps each such line when it arrives.  A producer
 * connection runs sequential autocommit silo.enqueue calls as in latency.c;
 * a sample is enqueue call start -> the worker's "leased" line read (the
 * pipe adds microseconds).  The next enqueue starts once the line is read.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loadgen.h"

#define WL_WARMUP 50			/* samples discarded before recording */

extern char **environ;

/* State shared by the producer and the pipe reader. */
typedef struct wl_shared
{
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int			fd;				/* read end of silo-worker's stderr */
	double		t_leased;		/* when the last "leased" line arrived */
	long		leased;			/* tasks the worker reported leased */
	int			eof;
} wl_shared;

/* reader_thread: read silo-worker's stderr line by line; count "leased N
 * task(s)" lines with their arrival time and pass other lines on to our
 * stderr. */
static void *
reader_thread(void *arg)
{
	wl_shared  *sh = arg;
	char		buf[4096];
	size_t		len = 0;

	for (;;)
	{
		ssize_t		got = read(sh->fd, buf + len, sizeof(buf) - 1 - len);
		double		t = now_sec();
		char	   *line,
				   *nl;

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		len += (size_t) got;
		buf[len] = '\0';
		line = buf;
		while ((nl = strchr(line, '\n')) != NULL)
		{
			const char *p = strstr(line, "leased ");

			*nl = '\0';
			if (p != NULL && p < nl)
			{
				pthread_mutex_lock(&sh->mu);
				sh->t_leased = t;
				sh->leased += strtol(p + 7, NULL, 10);
				pthread_cond_broadcast(&sh->cv);
				pthread_mutex_unlock(&sh->mu);
			}
			else
				fprintf(stderr, "%s\n", line);
			line = nl + 1;
		}
		len = strlen(line);
		memmove(buf, line, len + 1);
		if (len >= sizeof(buf) - 1)
			len = 0;			/* an endless line: drop it */
	}
	pthread_mutex_lock(&sh->mu);
	sh->eof = 1;
	pthread_cond_broadcast(&sh->cv);
	pthread_mutex_unlock(&sh->mu);
	return NULL;
}

/* spawn_worker: start silo-worker with its stderr on a new pipe (read end
 * in *fd) and its stdout on our stderr; returns its pid. */
static pid_t
spawn_worker(const lg_opts *o, int *fd)
{
	char		poll_s[16],
				lease_s[16];
	char	   *argv[] = {
		(char *) o->silo_worker, "-d", (char *) o->conninfo, "-g", LG_LAT_GROUP,
		"-w", "loadgen-silo-worker", "-c", "1", "-b", "1", "--lease-ms", lease_s,
		"--poll-ms", poll_s, "-v", NULL
	};
	posix_spawn_file_actions_t fa;
	int			p[2];
	pid_t		pid;

	snprintf(poll_s, sizeof(poll_s), "%d", o->poll_ms);
	snprintf(lease_s, sizeof(lease_s), "%d", o->lease_ms);
	if (pipe(p) != 0)
		die("pipe failed");
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, 2, 1);
	posix_spawn_file_actions_adddup2(&fa, p[1], 2);
	posix_spawn_file_actions_addclose(&fa, p[0]);
	posix_spawn_file_actions_addclose(&fa, p[1]);
	if (posix_spawn(&pid, o->silo_worker, &fa, NULL, argv, environ) != 0)
		die("cannot start %s", o->silo_worker);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	*fd = p[0];
	return pid;
}

/* run_worker_latency: o->jobs sequential enqueues (after WL_WARMUP
 * unrecorded ones), each awaited until silo-worker reports it leased;
 * prints the line (system "silo-worker"). */
void
run_worker_latency(const lg_opts *o)
{
	wl_shared	sh = {.leased = 0};
	PGconn	   *prod = db_connect(o->conninfo);
	lg_hist    *hist = hist_new();
	long		total = o->jobs + WL_WARMUP;
	pthread_t	tid;
	pid_t		pid;
	double		t0;
	lg_result	r;
	int			status;

	result_init(&r, o);
	r.system = "silo-worker";
	pthread_mutex_init(&sh.mu, NULL);
	pthread_cond_init(&sh.cv, NULL);
	system_reset(prod, SYS_SILO);
	system_prime(o->conninfo, SYS_SILO, 2000);
	system_prepare_latency(prod, NULL, SYS_SILO);
	pid = spawn_worker(o, &sh.fd);
	if (pthread_create(&tid, NULL, reader_thread, &sh) != 0)
		die("pthread_create failed");

	t0 = now_sec();
	for (long i = 0; i < total; i++)
	{
		double		t_enqueue;

		if (now_sec() - t0 > o->max_seconds)
		{
			fprintf(stderr, "silo-loadgen: silo-worker latency stopped after %.0f s at %ld of %ld\n",
					o->max_seconds, i, total);
			total = i;
			break;
		}
		t_enqueue = now_sec();
		system_enqueue_one(prod, SYS_SILO, i);
		pthread_mutex_lock(&sh.mu);
		while (sh.leased < i + 1 && !sh.eof)
			pthread_cond_wait(&sh.cv, &sh.mu);
		if (sh.eof)
			die("silo-worker exited early");
		if (i >= WL_WARMUP)
		{
			double		us = (sh.t_leased - t_enqueue) * 1e6;

			hist_record(hist, us < 0 ? 0 : (uint64_t) us);
		}
		pthread_mutex_unlock(&sh.mu);
	}
	r.seconds = now_sec() - t0;

	kill(pid, SIGTERM);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fprintf(stderr, "silo-loadgen: silo-worker ended with status 0x%x\n", status);
	pthread_join(tid, NULL);
	close(sh.fd);
	system_reset(prod, SYS_SILO);
	PQfinish(prod);

	r.jobs = (long) hist->total;
	r.rate = total / r.seconds;
	hist_to_result(hist, &r);
	result_add(&r, ",\"partial\":%s", r.jobs < o->jobs ? "true" : "false");
	result_print(o, &r);
	free(hist);
	pthread_mutex_destroy(&sh.mu);
	pthread_cond_destroy(&sh.cv);
}
