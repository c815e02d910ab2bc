/*-------------------------------------------------------------------------
 *
 * main.c
 *	  Reference worker for the silo job queue: command line, startup and
 *	  the final summary.
 *
 * silo_worker.h describes how the worker behaves and which file does what;
 * opt_usage() below describes the command line and the contracts of --exec
 * and --refresh-exec.
 *
 * tools/worker/main.c
 *
 *-------------------------------------------------------------------------
 */
#include "silo_worker.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_BATCH			1000	/* silo.lease() accepts up to 1000 */

WorkerOptions opt = {
	.dsn = "", .concurrency = 8, .lease_ms = 10000, .poll_ms = 1000,
	.grace_ms = 10000, .refresh_timeout_ms = 30000
};

WorkerStats stats;

/*
 * Everything below is left out of the JSON self-test build (see json.c),
 * which brings its own main().
 */
#ifndef SILO_WORKER_SELFTEST

/*
 * opt_usage
 *		Print the --help text.
 */
static void
opt_usage(void)
{
	printf("silo-worker: run jobs from a silo task group\n\n"
		   "Usage: silo-worker --task-group G [OPTION]...\n\n"
		   "Options:\n"
		   "  -d, --dsn DSN            connection string (default: PG* env); in\n"
		   "                           cluster mode any one node of the cluster\n"
		   "  -g, --task-group G       task group to lease from (required)\n"
		   "  -w, --worker-id ID       worker id (default: HOSTNAME-PID)\n"
		   "  -c, --concurrency N      max jobs in flight (default 8)\n"
		   "  -b, --batch N            max tasks per lease (default: concurrency,\n"
		   "                           at most 1000)\n"
		   "      --lease-ms MS        lease length, 100..3600000 (default 10000)\n"
		   "      --poll-ms MS         lease this often without NOTIFY (default 1000)\n"
		   "      --grace-ms MS        time running jobs get on SIGTERM, and\n"
		   "                           cancelled jobs get after SIGTERM (default 10000)\n"
		   "  -e, --exec CMD           run \"/bin/sh -c CMD\" per job (default: no-op)\n"
		   "      --refresh-exec CMD   run \"/bin/sh -c CMD\" per refresh task of a\n"
		   "                           floating limit (default: keep the current max)\n"
		   "      --refresh-timeout-ms MS\n"
		   "                           kill a refresh command after MS ms and fail the\n"
		   "                           refresh, 100..86400000 (default 30000)\n"
		   "      --max-jobs N         exit after N tasks reported: jobs ended, failed\n"
		   "                           attempts to be retried, releases (0 = unlimited)\n"
		   "      --exit-when-idle MS  exit after MS ms without work (0 = never)\n"
		   "      --no-cluster         lease only from the node of --dsn, even when\n"
		   "                           it is in cluster mode\n"
		   "      --progress           print a progress line to stderr every second\n"
		   "  -q, --quiet              only print warnings and errors\n"
		   "  -v, --verbose            also print per-task details\n"
		   "  -h, --help               show this help\n\n"
		   "With --exec the payload JSON is written to the command's stdin and\n"
		   "SILO_TASK_ID, SILO_JOB_ID, SILO_TENANT, SILO_ATTEMPT, SILO_TASK_GROUP,\n"
		   "SILO_TASK_KIND, SILO_RELATIVE_ATTEMPT, SILO_IS_LAST_ATTEMPT and\n"
		   "SILO_WORKER_ID are set.  Exit 0 completes the job: empty stdout gives\n"
		   "a NULL result, JSON stdout is the result, other text becomes a JSON\n"
		   "string.  A non-zero exit fails it with error code EXIT_<code>, death by\n"
		   "a signal with SIGNAL_<n>; the end of stderr goes into the error data.\n"
		   "A cancelled job gets SIGTERM, then SIGKILL after --grace-ms.\n\n"
		   "Refresh tasks of floating concurrency limits come from the same task\n"
		   "group and take a slot like a job.  With --refresh-exec the key's\n"
		   "metadata JSON is written to the command's stdin and SILO_TASK_ID,\n"
		   "SILO_TENANT, SILO_QUEUE_KEY, SILO_CURRENT_MAX, SILO_REFRESH_METADATA\n"
		   "(JSON), SILO_TASK_GROUP, SILO_TASK_KIND (refresh) and SILO_WORKER_ID\n"
		   "are set.  Exit 0 with stdout an integer >= 1 (whitespace around it is\n"
		   "ignored) makes that the key's max (silo.report_refresh); a non-zero\n"
		   "exit, death by a signal, other output or a timeout keeps the old max\n"
		   "and fails the refresh (silo.fail_refresh), which the server retries\n"
		   "with backoff.  Without --refresh-exec a refresh is answered at once\n"
		   "with the current max, unchanged.\n\n"
		   "SIGTERM/SIGINT stop leasing and wait up to --grace-ms for running jobs\n"
		   "and refresh commands; the rest are killed: jobs are released, refresh\n"
		   "tasks failed with \"worker shutting down\".  A second signal ends the\n"
		   "wait.\n\n"
		   "Cluster mode is automatic: when the node of --dsn is in cluster mode\n"
		   "(silo.node_info), the worker connects to every owner in its shard map\n"
		   "(silo.cluster_info; owner_conninfo laid over --dsn, which keeps user,\n"
		   "password and TLS settings), LISTENs and leases on each in turn, and\n"
		   "reads the map again every 5 s, after a lost connection and after an\n"
		   "SL020.  Heartbeats and reports name the task's tenant and go to the\n"
		   "node that leased it; when its shard has moved that node answers SL020\n"
		   "and the call follows the hint to the new owner (at most 3 hops).\n"
		   "SL021 (a shard paused for a move) is retried within the lease.\n");
}

/*
 * opt_usage_error
 *		Complain about the command line and exit with status 2.
 */
static void
opt_usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "silo-worker: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry \"silo-worker --help\" for more information.\n");
	exit(2);
}

/*
 * opt_parse_int
 *		Parse a whole-number option value within [min, max], or exit 2.
 */
static long
opt_parse_int(const char *name, const char *value, long min, long max)
{
	char	   *end;
	long		v;

	errno = 0;
	v = strtol(value, &end, 10);
	if (errno != 0 || end == value || *end != '\0' || v < min || v > max)
	{
		fprintf(stderr, "silo-worker: invalid value \"%s\" for --%s "
				"(expected %ld..%ld)\n", value, name, min, max);
		exit(2);
	}
	return v;
}

/*
 * opt_parse_args
 *		Fill opt from the command line and derive the defaults that depend
 *		on other options (batch size, worker id).
 */
static void
opt_parse_args(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"dsn", required_argument, NULL, 'd'},
		{"task-group", required_argument, NULL, 'g'},
		{"worker-id", required_argument, NULL, 'w'},
		{"concurrency", required_argument, NULL, 'c'},
		{"batch", required_argument, NULL, 'b'},
		{"lease-ms", required_argument, NULL, 'L'},
		{"poll-ms", required_argument, NULL, 'P'},
		{"grace-ms", required_argument, NULL, 'G'},
		{"exec", required_argument, NULL, 'e'},
		{"refresh-exec", required_argument, NULL, 'R'},
		{"refresh-timeout-ms", required_argument, NULL, 'T'},
		{"max-jobs", required_argument, NULL, 'M'},
		{"exit-when-idle", required_argument, NULL, 'I'},
		{"no-cluster", no_argument, NULL, 'N'},
		{"progress", no_argument, NULL, 'p'},
		{"quiet", no_argument, NULL, 'q'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int			c;

	while ((c = getopt_long(argc, argv, "d:g:w:c:b:e:qvh", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'd':
				opt.dsn = optarg;
				break;
			case 'g':
				opt.task_group = optarg;
				break;
			case 'w':
				opt.worker_id = xstrdup(optarg);
				break;
			case 'c':
				opt.concurrency = (int) opt_parse_int("concurrency", optarg,
													  1, 100000);
				break;
			case 'b':
				opt.batch = (int) opt_parse_int("batch", optarg, 1, MAX_BATCH);
				break;
			case 'L':
				opt.lease_ms = (int) opt_parse_int("lease-ms", optarg,
												   100, 3600000);
				break;
			case 'P':
				opt.poll_ms = (int) opt_parse_int("poll-ms", optarg,
												  1, 3600000);
				break;
			case 'G':
				opt.grace_ms = (int) opt_parse_int("grace-ms", optarg,
												   0, INT_MAX);
				break;
			case 'e':
				opt.exec_cmd = optarg;
				break;
			case 'R':
				opt.refresh_exec_cmd = optarg;
				break;
			case 'T':
				opt.refresh_timeout_ms = (int) opt_parse_int("refresh-timeout-ms",
															 optarg, 100, 86400000);
				break;
			case 'M':
				opt.max_jobs = opt_parse_int("max-jobs", optarg, 0, LONG_MAX);
				break;
			case 'I':
				opt.exit_when_idle_ms = (int) opt_parse_int("exit-when-idle",
															optarg, 0, INT_MAX);
				break;
			case 'N':
				opt.no_cluster = true;
				break;
			case 'p':
				opt.progress = true;
				break;
			case 'q':
				opt.quiet = true;
				break;
			case 'v':
				opt.verbose = true;
				break;
			case 'h':
				opt_usage();
				exit(0);
			default:
				fprintf(stderr, "Try \"silo-worker --help\" for more information.\n");
				exit(2);
		}
	}
	if (optind < argc)
		opt_usage_error("unexpected argument \"%s\"", argv[optind]);
	if (opt.task_group == NULL || opt.task_group[0] == '\0')
		opt_usage_error("%s", "--task-group is required");
	if (opt.worker_id == NULL || opt.worker_id[0] == '\0')
	{
		char		host[256],
					id[300];

		if (gethostname(host, sizeof(host)) != 0)
			strcpy(host, "localhost");
		host[sizeof(host) - 1] = '\0';
		snprintf(id, sizeof(id), "%s-%d", host, (int) getpid());
		opt.worker_id = xstrdup(id);
	}
	if (opt.batch == 0)
		opt.batch = opt.concurrency < MAX_BATCH ? opt.concurrency : MAX_BATCH;
}

/*
 * main
 *		Parse options, connect (a failure here is fatal), run the loop and
 *		print the one-line summary.
 */
int
main(int argc, char **argv)
{
	int64_t		start;
	double		secs;
	int			fd;

	opt_parse_args(argc, argv);

	/* make sure fds 0-2 exist, so pipes never land on them */
	while ((fd = open("/dev/null", O_RDWR)) >= 0 && fd <= 2)
		;
	if (fd > 2)
		close(fd);

	loop_setup_signals();
	jobs = calloc(opt.concurrency, sizeof(Job *));
	if (jobs == NULL)
	{
		log_msg(LOG_ERROR, "out of memory");
		return 1;
	}
	if (!members_start())
		return 1;
	start = now_ms();
	log_msg(LOG_INFO, "worker %s leasing from task group \"%s\" "
			"(concurrency %d, batch %d, %s%s%s)", opt.worker_id, opt.task_group,
			opt.concurrency, opt.batch, opt.exec_cmd ? "exec" : "no-op",
			opt.refresh_exec_cmd ? ", refresh-exec" : "",
			cluster_mode ? ", cluster" : "");

	loop_run(start);

	secs = (now_ms() - start) / 1000.0;
	if (stats.lost > 0)
		log_msg(LOG_INFO, "%ld task(s) abandoned after losing their lease",
				stats.lost);
	if (stats.not_owner > 0)
		log_msg(LOG_INFO, "%ld call(s) followed a NOT_OWNER hint to a shard's "
				"new owner", stats.not_owner);
	printf("silo-worker: finished %ld jobs (%ld succeeded, %ld failed, "
		   "%ld cancelled; %ld of them after retries) in %.2f s, "
		   "%.1f jobs/s\n",
		   JOBS_ENDED(), stats.succeeded, stats.failed, stats.cancelled,
		   stats.after_retries, secs, secs > 0 ? JOBS_ENDED() / secs : 0.0);
	if (stats.retried > 0 || stats.released > 0)
		printf("silo-worker: also %ld failed attempt(s) to be retried and "
			   "%ld task(s) released unfinished\n",
			   stats.retried, stats.released);
	if (REFRESHES() > 0)
		printf("silo-worker: answered %ld refresh task(s) (%ld reported, "
			   "%ld failed)\n", REFRESHES(), stats.refreshed,
			   stats.refresh_failed);
	fflush(stdout);
	members_close_all();
	return 0;
}
#endif							/* !SILO_WORKER_SELFTEST */
