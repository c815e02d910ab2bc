/*
 * main.c: silo-loadgen's command line and output.
 *
 *   silo-loadgen --system bare|silo --workload WORKLOAD [options]
 *
 * Runs one benchmark cell (backlog, limits and held: a short series of
 * cells) against the database named by --conninfo and prints one JSON
 * object per cell on stdout:
 *   {"system","workload","clients","batch","jobs","seconds","rate",
 *    "p50_ms","p99_ms","p999_ms","max_ms", ...workload fields}
 * (latency figures are null where not measured).  Progress goes to stderr.
 */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen.h"

static const char *const workload_names[] = {
	"burn", "latency", "steady", "backlog", "limits", "held"
};

/* usage: print the options and exit with status. */
static void
usage(int status)
{
	fprintf(status ? stderr : stdout,
			"usage: silo-loadgen --system bare|silo --workload WORKLOAD [options]\n"
			"workloads: burn, latency, steady, backlog, limits (silo), held\n"
			"  --conninfo STR     libpq connection string (default: environment)\n"
			"  --clients N        worker threads/connections (default 4)\n"
			"  --batch N          jobs per claim/lease (default 1)\n"
			"  --jobs N           burn/held/limits: jobs to pre-insert (burn default:\n"
			"                     calibrate to --seconds); latency: samples (2000)\n"
			"  --seconds S        burn: target drain time when calibrating (default 15);\n"
			"                     steady: producing time; backlog: window per cell\n"
			"  --max-jobs N       burn: cap of the calibrated job count (default 2000000)\n"
			"  --max-seconds S    stop a latency, burn, held or limits drain early\n"
			"                     (default 120; a stopped drain is reported as partial)\n"
			"  --poll-ms N        wait for a wake-up at most N ms (default 1000)\n"
			"  --idle-ms N        steady, bare: sleep after a short claim (default 5)\n"
			"  --lease-ms N       silo: lease duration (default 30000)\n"
			"  --rate R           steady: total enqueue rate, jobs/s\n"
			"  --producers N      steady: producer threads (default 4)\n"
			"  --backlogs LIST    backlog: depths, ascending (default 10000,100000,1000000)\n"
			"  --batches LIST     backlog: batch sizes per depth (default 1,32)\n"
			"  --modes LIST       limits: modes (default none,k100k,k1k,hot)\n"
			"  --silo-worker PATH latency, silo: drive this silo-worker binary\n"
			"  --label NAME       print NAME as the system (a variant of a cell)\n");
	exit(status);
}

/* parse_long: a non-negative integer option value, or die. */
static long
parse_long(const char *opt, const char *v)
{
	char	   *end;
	long		n = strtol(v, &end, 10);

	if (*end != '\0' || n < 0)
		die("%s: not a non-negative integer: %s", opt, v);
	return n;
}

/* print_ms: a latency figure as JSON (null when not measured). */
static void
print_ms(const char *key, double v)
{
	if (v < 0)
		printf(",\"%s\":null", key);
	else
		printf(",\"%s\":%.3f", key, v);
}

/* result_init: an empty result for the run's system, workload, clients and
 * batch, with no latency figures. */
void
result_init(lg_result *r, const lg_opts *o)
{
	memset(r, 0, sizeof(*r));
	r->clients = o->clients;
	r->batch = o->batch;
	r->p50_ms = r->p99_ms = r->p999_ms = r->max_ms = -1;
}

/* result_add: append ,"key":value text (printf-formatted) to a result's
 * workload-specific fields. */
void
result_add(lg_result *r, const char *fmt,...)
{
	size_t		len = strlen(r->extra);
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(r->extra + len, sizeof(r->extra) - len, fmt, ap);
	va_end(ap);
}

/* result_print: print a result as one JSON line and flush it, so a run
 * that prints several lines shows each as soon as it is measured. */
void
result_print(const lg_opts *o, const lg_result *r)
{
	printf("{\"system\":\"%s\",\"workload\":\"%s\",\"clients\":%d,\"batch\":%d,"
		   "\"jobs\":%ld,\"seconds\":%.3f,\"rate\":%.1f",
		   o->label ? o->label : r->system ? r->system : system_name(o->system),
		   r->workload ? r->workload : workload_names[o->workload],
		   r->clients, r->batch, r->jobs, r->seconds, r->rate);
	print_ms("p50_ms", r->p50_ms);
	print_ms("p99_ms", r->p99_ms);
	print_ms("p999_ms", r->p999_ms);
	print_ms("max_ms", r->max_ms);
	printf("%s}\n", r->extra);
	fflush(stdout);
}

/* main: parse options, run the workload (it prints its JSON lines). */
int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"system", required_argument, NULL, 's'},
		{"workload", required_argument, NULL, 'w'},
		{"conninfo", required_argument, NULL, 'd'},
		{"clients", required_argument, NULL, 'c'},
		{"batch", required_argument, NULL, 'b'},
		{"jobs", required_argument, NULL, 'n'},
		{"seconds", required_argument, NULL, 'S'},
		{"max-jobs", required_argument, NULL, 'M'},
		{"poll-ms", required_argument, NULL, 'p'},
		{"idle-ms", required_argument, NULL, 'i'},
		{"lease-ms", required_argument, NULL, 'l'},
		{"max-seconds", required_argument, NULL, 'X'},
		{"rate", required_argument, NULL, 'r'},
		{"producers", required_argument, NULL, 'P'},
		{"backlogs", required_argument, NULL, 'B'},
		{"batches", required_argument, NULL, 'K'},
		{"modes", required_argument, NULL, 'm'},
		{"silo-worker", required_argument, NULL, 'W'},
		{"label", required_argument, NULL, 'L'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	lg_opts		o = {.conninfo = "", .system = SYS_SILO, .workload = WL_BURN,
		.clients = 4, .batch = 1, .jobs = 0, .seconds = 15, .max_jobs = 2000000,
		.poll_ms = 1000, .idle_ms = 5, .max_seconds = 120, .lease_ms = 30000,
		.rate = 0, .producers = 4, .backlogs = "10000,100000,1000000",
	.batches = "1,32", .modes = "none,k100k,k1k,hot", .silo_worker = NULL, .label = NULL};
	int			c,
				have_system = 0,
				have_workload = 0;
	PGconn	   *conn;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 's':
				if (strcmp(optarg, "bare") == 0)
					o.system = SYS_BARE;
				else if (strcmp(optarg, "silo") == 0)
					o.system = SYS_SILO;
				else
					die("--system must be bare or silo");
				have_system = 1;
				break;
			case 'w':
				have_workload = 0;
				for (int i = 0; i < (int) (sizeof(workload_names) / sizeof(workload_names[0])); i++)
					if (strcmp(optarg, workload_names[i]) == 0)
					{
						o.workload = (lg_workload) i;
						have_workload = 1;
					}
				if (!have_workload)
					die("unknown --workload %s", optarg);
				break;
			case 'd':
				o.conninfo = optarg;
				break;
			case 'c':
				o.clients = (int) parse_long("--clients", optarg);
				break;
			case 'b':
				o.batch = (int) parse_long("--batch", optarg);
				break;
			case 'n':
				o.jobs = parse_long("--jobs", optarg);
				break;
			case 'S':
				o.seconds = atof(optarg);
				break;
			case 'M':
				o.max_jobs = parse_long("--max-jobs", optarg);
				break;
			case 'p':
				o.poll_ms = (int) parse_long("--poll-ms", optarg);
				break;
			case 'i':
				o.idle_ms = (int) parse_long("--idle-ms", optarg);
				break;
			case 'l':
				o.lease_ms = (int) parse_long("--lease-ms", optarg);
				break;
			case 'X':
				o.max_seconds = atof(optarg);
				break;
			case 'r':
				o.rate = atof(optarg);
				break;
			case 'P':
				o.producers = (int) parse_long("--producers", optarg);
				break;
			case 'B':
				o.backlogs = optarg;
				break;
			case 'K':
				o.batches = optarg;
				break;
			case 'm':
				o.modes = optarg;
				break;
			case 'W':
				o.silo_worker = optarg;
				break;
			case 'L':
				o.label = optarg;
				break;
			case 'h':
				usage(0);
				break;
			default:
				usage(2);
		}
	}
	if (!have_system || !have_workload || optind != argc)
		usage(2);
	if (o.clients < 1 || o.batch < 1 || o.batch > 1000 || o.seconds <= 0 ||
		o.producers < 1 || o.max_seconds <= 0)
		die("--clients and --producers must be >= 1, --batch 1..1000,"
			" --seconds and --max-seconds > 0");
	if (o.workload == WL_STEADY && o.rate <= 0)
		die("steady needs --rate > 0");
	if (o.workload == WL_LIMITS && o.system != SYS_SILO)
		die("the limits workload is silo only");

	conn = db_connect(o.conninfo);
	system_detect(conn, o.system);
	PQfinish(conn);

	switch (o.workload)
	{
		case WL_BURN:
			run_burn(&o);
			break;
		case WL_LATENCY:
			o.clients = 1;
			o.batch = 1;
			if (o.jobs <= 0)
				o.jobs = 2000;
			if (o.silo_worker != NULL)
			{
				if (o.system != SYS_SILO)
					die("--silo-worker goes with --system silo");
				run_worker_latency(&o);
			}
			else
				run_latency(&o);
			break;
		case WL_STEADY:
			run_steady(&o);
			break;
		case WL_BACKLOG:
			run_backlog(&o);
			break;
		case WL_LIMITS:
			run_limits(&o);
			break;
		case WL_HELD:
			run_held(&o);
			break;
	}
	return 0;
}
