/*
 * main.c: silo-loadgen's command line and output.
 *
 *   silo-loadgen --system bare|silo --workload burn|latency [options]
 *
 * Runs one benchmark cell against the database named by --conninfo and
 * prints one JSON object on stdout:
 *   {"system","workload","clients","batch","jobs","seconds","rate",
 *    "p50_ms","p99_ms","p999_ms"}
 * (latency figures are null for burn).  Progress goes to stderr.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen.h"

/* usage: print the options and exit with status. */
static void
usage(int status)
{
	fprintf(status ? stderr : stdout,
			"usage: silo-loadgen --system bare|silo --workload burn|latency [options]\n"
			"  --conninfo STR   libpq connection string (default: environment)\n"
			"  --clients N      burn: worker threads/connections (default 4)\n"
			"  --batch N        burn: jobs per claim/lease (default 1)\n"
			"  --jobs N         burn: jobs to pre-insert; latency: samples (default:\n"
			"                   burn calibrates to --seconds, latency 2000)\n"
			"  --seconds S      burn: target drain time when calibrating (default 15)\n"
			"  --max-jobs N     burn: cap of the calibrated job count (default 2000000)\n"
			"  --poll-ms N      latency: worker poll interval without wake-up (default 1000)\n"
			"  --max-seconds S  latency: stop early after S seconds (default 120)\n"
			"  --lease-ms N     silo: lease duration (default 30000)\n");
	exit(status);
}

/* parse_long: a positive integer option value, or die. */
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

/* main: parse options, run the cell, print its JSON line. */
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
		{"lease-ms", required_argument, NULL, 'l'},
		{"max-seconds", required_argument, NULL, 'X'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	lg_opts		o = {.conninfo = "", .system = SYS_SILO, .workload = WL_BURN,
		.clients = 4, .batch = 1, .jobs = 0, .seconds = 15, .max_jobs = 2000000,
	.poll_ms = 1000, .max_seconds = 120, .lease_ms = 30000};
	lg_result	r = {.p50_ms = -1, .p99_ms = -1, .p999_ms = -1};
	int			c,
				have_system = 0,
				have_workload = 0;

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
				if (strcmp(optarg, "burn") == 0)
					o.workload = WL_BURN;
				else if (strcmp(optarg, "latency") == 0)
					o.workload = WL_LATENCY;
				else
					die("--workload must be burn or latency");
				have_workload = 1;
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
			case 'l':
				o.lease_ms = (int) parse_long("--lease-ms", optarg);
				break;
			case 'X':
				o.max_seconds = atof(optarg);
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
	if (o.clients < 1 || o.batch < 1 || o.batch > 1000 || o.seconds <= 0)
		die("--clients must be >= 1, --batch 1..1000, --seconds > 0");

	if (o.workload == WL_BURN)
		run_burn(&o, &r);
	else
	{
		o.clients = 1;
		o.batch = 1;
		run_latency(&o, o.jobs > 0 ? o.jobs : 2000, &r);
	}

	printf("{\"system\":\"%s\",\"workload\":\"%s\",\"clients\":%d,\"batch\":%d,"
		   "\"jobs\":%ld,\"seconds\":%.3f,\"rate\":%.1f",
		   system_name(o.system), o.workload == WL_BURN ? "burn" : "latency",
		   o.clients, o.batch, r.jobs, r.seconds, r.rate);
	print_ms("p50_ms", r.p50_ms);
	print_ms("p99_ms", r.p99_ms);
	print_ms("p999_ms", r.p999_ms);
	printf("}\n");
	return 0;
}
