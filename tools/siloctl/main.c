/*-------------------------------------------------------------------------
 *
 * main.c
 *	  siloctl: options, help texts, the command table and dispatch (the
 *	  ways out -- errors, usage errors, exit codes -- are in util.c).
 *
 * The command line is "siloctl [OPTION]... COMMAND [ARG]...".  Options may
 * come anywhere (getopt permutes them out of the way), so the whole line
 * is parsed first and the words left over name the command and its
 * arguments.  Each command declares the options it takes; any other one is
 * a usage error rather than silently ignored.
 *
 * tools/siloctl/main.c
 *
 *-------------------------------------------------------------------------
 */
#include "siloctl.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

Options		opt = {
	.dsn = "", .prefix = "silo", .tenant = "-",
	.max_hops = DEFAULT_MAX_HOPS, .retries = DEFAULT_RETRIES
};

/* One command: its words, arguments, options, handler and help. */
typedef struct Command
{
	const char *name;			/* "job cancel" */
	int			min_args;
	int			max_args;		/* -1: any number */
	unsigned	options;		/* OPT_* bits it takes besides OPT_COMMON */
	int			(*run) (char **args, int nargs);
	const char *synopsis;
	const char *summary;		/* one line for the general --help */
	const char *help;
} Command;

#define JOB_HELP_TAIL \
	"The call goes to the node of --dsn.  When that node answers NOT_OWNER\n" \
	"(SQLSTATE SL020), siloctl reads the owner from the error's DETAIL,\n" \
	"connects there (host, hostaddr and port from the hint, your --dsn's\n" \
	"user, password and other settings kept) and sends the call again, at\n" \
	"most --max-hops times (default 3); a hint that leads back to a node\n" \
	"already tried is a loop.  SHARD_UNAVAILABLE (SL021), or a NOT_OWNER\n" \
	"naming no owner, is retried on the same node after 100 ms, 200 ms, ...\n" \
	"(at most 2 s each), --retries times (default 5).\n\n" \
	"Options: -t, --tenant T (default \"-\"), --max-hops N, --retries N,\n" \
	"         --json, -v (show each hop on stderr), -d, --dsn.\n\n" \
	"Exit status: 0 done; 1 the call failed (job not found, wrong state:\n" \
	"the server's message and SQLSTATE are shown); 3 no node reachable;\n" \
	"4 NOT_OWNER not resolved (loop, too many hops, no owner);\n" \
	"5 the shard stayed unavailable.\n"

static const Command commands[] = {
	{"cluster info", 0, 0, OPT_DSN | OPT_FROM_ETCD | OPT_ETCD, cmd_cluster_info,
		"cluster info [--from-etcd]",
		"the shard map as a node (or etcd) knows it",
		"Show the shard map as the node of --dsn knows it (silo.cluster_info):\n"
		"a summary line for the node (silo.node_info), then one row per shard:\n"
		"its id, hash range [start, end), owner node, state (serving, paused,\n"
		"acquiring on the owner; remote or unowned elsewhere), whether it is\n"
		"this node's, and the owner's conninfo.\n\n"
		"With --from-etcd (and --etcd URLS) the map is read from etcd instead,\n"
		"at one revision, without any node: P/coord/shardmap, every\n"
		"P/coord/shards/<id>/owner and every P/coord/members/<id>.  A shard's\n"
		"state is then owned (its owner is a live member), owner-down (its\n"
		"owner's member key is gone: see \"shard force-release\") or unowned.\n\n"
		"--json: {\"node\": {...}, \"shards\": [{\"shard_id\", \"range_start\",\n"
		"\"range_end\", \"owner_node_id\", \"owner_conninfo\", \"state\",\n"
		"\"is_local\"}]}; range bounds are decimal strings (they reach 2^63).\n"
		"With --from-etcd: {\"source\": \"etcd\", \"revision\", \"shards\": [...],\n"
		"\"members\": [...]}.\n\n"
		"Exit status: 0; 1 no shard map in etcd; 3 no node (or etcd) reachable.\n\n"
		"Example: siloctl cluster info --dsn 'host=db1 dbname=app'\n"},
	{"node info", 0, 0, OPT_DSN, cmd_node_info,
		"node info",
		"this node: id, mode, membership, its shards",
		"Show the node of --dsn (silo.node_info): its node id, mode\n"
		"(single-node or cluster), membership (alive, lost, or none in\n"
		"single-node mode), the shards it owns and those it serves now.\n\n"
		"--json: {\"node_id\", \"mode\", \"membership\", \"owned_shards\": [..],\n"
		"\"serving_shards\": [..]}.\n\n"
		"Exit status: 0; 1 the query failed; 3 the node is not reachable.\n"},
	{"shard list", 0, 0, OPT_DSN, cmd_shard_list,
		"shard list",
		"one line per shard",
		"One line per shard of the node's map (silo.cluster_info): id, range\n"
		"start and end, owner, state, local, conninfo.\n\n"
		"--json: an array of shard objects (as in \"cluster info\").\n\n"
		"Exit status: 0; 1 the query failed; 3 the node is not reachable.\n"},
	{"shard force-release", 1, 1, OPT_ETCD | OPT_YES, cmd_shard_force_release,
		"shard force-release ID [--yes]",
		"delete a dead node's ownership of a shard",
		"Delete the owner key P/coord/shards/ID/owner of a shard whose owner\n"
		"is dead, so that placement can give the shard to a live node.\n\n"
		"An owner key never expires: a node that crashed keeps its shards,\n"
		"and nobody serves them, until it comes back.  Releasing the shard\n"
		"instead LOSES what that node's database held of the shard (its\n"
		"tenants' jobs), unless you restore it from the node's standby or\n"
		"backups: the next owner starts the shard empty.  If the node can\n"
		"come back, restart it instead: it reclaims its shards.\n\n"
		"siloctl reads the owner key, refuses while the owner's member key\n"
		"P/coord/members/<owner> exists (the owner is alive, or its lease has\n"
		"not expired yet: at most silo.lease_ttl_s), shows the owner and this\n"
		"warning, asks you to type \"yes\" (unless --yes), and deletes the key\n"
		"with one txn that succeeds only while the member key is still absent\n"
		"(CREATE == 0) and the owner key is unchanged (MOD == the revision\n"
		"read).  Without --yes, stdin must be a terminal.\n\n"
		"Options: -e, --etcd URLS (required, or $SILOCTL_ETCD_ENDPOINTS),\n"
		"--prefix P (default silo), --etcd-user U ($SILOCTL_ETCD_PASSWORD),\n"
		"--etcd-cacert, --etcd-cert, --etcd-key, -y, --yes, --json.\n\n"
		"--json: {\"shard\", \"released\": true, \"owner\": {\"node_id\",\n"
		"\"conninfo\", \"acquired_at\"}, \"owner_mod_revision\", \"revision\"}.\n\n"
		"Exit status: 0 released; 1 refused (no owner key, the owner is\n"
		"alive, the key changed meanwhile, you did not confirm); 2 usage, or\n"
		"no --yes and stdin is not a terminal; 3 etcd not reachable.\n\n"
		"Example: siloctl shard force-release 3 --etcd http://10.0.0.5:2379\n"},
	{"tenant hash", 1, -1, OPT_DSN | OPT_CHECK, cmd_tenant_hash,
		"tenant hash TENANT... [--check]",
		"a tenant's 64-bit hash, computed here",
		"Print each tenant's 64-bit hash, computed here: PostgreSQL's\n"
		"hash_bytes_extended of the tenant's UTF-8 bytes with seed 0, as a\n"
		"signed integer (what silo.tenant_hash returns, on little-endian\n"
		"servers).  No connection is made unless --check, which also asks the\n"
		"node of --dsn (silo.tenant_hash) and fails when they differ.\n\n"
		"Output: the hash.  With several tenants, or --check, one line per\n"
		"tenant: the hash, a tab, the tenant, and with --check a tab and\n"
		"\"server agrees\" or \"server DIFFERS\".  --json: {\"tenant\", \"hash\"}\n"
		"(with --check also \"server_hash\" and \"agrees\"); for several\n"
		"tenants an array of them.  Put \"--\" before tenants starting with \"-\".\n\n"
		"Exit status: 0; 1 --check found a difference; 2 a tenant is not\n"
		"valid UTF-8; 3 --check could not connect.\n\n"
		"Example: siloctl tenant hash acme      prints 7757017307627438190\n"},
	{"tenant locate", 1, 1, OPT_DSN, cmd_tenant_locate,
		"tenant locate TENANT",
		"a tenant's shard and its owner",
		"Find a tenant's shard and owner: the hash is computed here and\n"
		"looked up among the ranges of the node's silo.cluster_info.\n\n"
		"--json: {\"tenant\", \"hash\", \"shard_id\", \"range_start\",\n"
		"\"range_end\", \"owner_node_id\", \"owner_conninfo\", \"state\",\n"
		"\"is_local\"}.\n\n"
		"Exit status: 0; 1 no shard of the node's map holds the hash (no map\n"
		"yet); 3 the node is not reachable.\n"},
	{"job get", 1, 1, OPT_DSN | OPT_TENANT | OPT_ROUTING, NULL,
		"job get ID [--tenant T]",
		"a job's row of silo.jobs and its attempts",
		"Show a job's row of silo.jobs (tenant, id, task group, status,\n"
		"priority, times, current attempt, payload, metadata, cancellation)\n"
		"and its attempts (silo.attempts), read on the node that owns the\n"
		"tenant's shard: silo.jobs is a view and raises no NOT_OWNER, so\n"
		"siloctl first finds the owner in the node's silo.cluster_info (the\n"
		"hash computed here), following the owner's conninfo (same budget\n"
		"as the hints below), and checks again there.\n\n"
		"--json: {\"job\": {...}, \"attempts\": [...], \"hops\": [...]}.\n\n"
		JOB_HELP_TAIL},
	{"job result", 1, 1, OPT_DSN | OPT_TENANT | OPT_ROUTING, NULL,
		"job result ID [--tenant T]",
		"a finished job's outcome (silo.job_result)",
		"Show a finished job's outcome: silo.job_result(ID, T): status,\n"
		"result, error_code, error_data, finished_at.  A job that has not\n"
		"finished is an error (SL004).\n\n"
		"--json: {\"job_id\", \"tenant\", \"status\", \"result\", \"error_code\",\n"
		"\"error_data\", \"finished_at\", \"hops\"}.\n\n"
		JOB_HELP_TAIL},
	{"job cancel", 1, 1, OPT_DSN | OPT_TENANT | OPT_ROUTING, NULL,
		"job cancel ID [--tenant T]",
		"cancel a job (silo.cancel)",
		"Cancel a job: silo.cancel(ID, T).  A pending job ends Cancelled at\n"
		"once; a Running one is flagged and its worker learns of it at its\n"
		"next heartbeat.  Then shows the job's status.\n\n"
		"--json: {\"job_id\", \"tenant\", \"action\": \"cancel\", \"status\",\n"
		"\"hops\"}.\n\n"
		JOB_HELP_TAIL},
	{"job restart", 1, 1, OPT_DSN | OPT_TENANT | OPT_ROUTING, NULL,
		"job restart ID [--tenant T]",
		"run a Failed or Cancelled job again",
		"Run a Failed or Cancelled job again: silo.restart(ID, T).\n\n"
		"--json: {\"job_id\", \"tenant\", \"action\": \"restart\", \"status\",\n"
		"\"hops\"}.\n\n"
		JOB_HELP_TAIL},
	{"job expedite", 1, 1, OPT_DSN | OPT_TENANT | OPT_ROUTING, NULL,
		"job expedite ID [--tenant T]",
		"make a Scheduled or Retrying job due now",
		"Make a Scheduled or Retrying job due now: silo.expedite(ID, T).\n\n"
		"--json: {\"job_id\", \"tenant\", \"action\": \"expedite\", \"status\",\n"
		"\"hops\"}.\n\n"
		JOB_HELP_TAIL},
	{"job delete", 1, 1, OPT_DSN | OPT_TENANT | OPT_ROUTING, NULL,
		"job delete ID [--tenant T]",
		"delete a finished job (silo.delete_job)",
		"Delete a finished job with its attempts: silo.delete_job(ID, T).\n"
		"No such job is a failure (exit 1), like a job that has not finished\n"
		"(SL004).\n\n"
		"--json: {\"job_id\", \"tenant\", \"action\": \"delete\", \"deleted\": true,\n"
		"\"hops\"}.\n\n"
		JOB_HELP_TAIL},
	{"query", 2, 2, OPT_DSN | OPT_ROUTING, cmd_query,
		"query TENANT SQL",
		"read-only SQL on the owner of TENANT's shard",
		"Run one read-only SQL statement on the node that owns TENANT's shard\n"
		"and print its rows.  The owner is found as for \"job get\" (the node's\n"
		"silo.cluster_info, the hash computed here, NOT_OWNER hints followed);\n"
		"the statement runs in a READ ONLY transaction that first checks the\n"
		"shard is local, and is rolled back afterwards.  It is sent alone\n"
		"(extended protocol: one statement, no \"COMMIT; ...\"), with $1 bound\n"
		"to TENANT as text, so \"WHERE tenant = $1\" works.\n\n"
		"Output: an aligned table and \"(N rows)\".  --json: {\"tenant\",\n"
		"\"shard\", \"columns\": [...], \"rows\": [{column: value}], \"command\",\n"
		"\"hops\"}; integers and booleans as JSON, json/jsonb embedded,\n"
		"numeric as strings, the rest as strings.\n\n"
		"Exit status: 0; 1 the statement failed (a write: 25006); 3, 4, 5 as\n"
		"for the job commands.\n\n"
		"Example: siloctl query acme 'SELECT status, count(*) FROM silo.jobs\n"
		"         WHERE tenant = $1 GROUP BY status'\n"},
};

#define NCOMMANDS ((int) (sizeof(commands) / sizeof(commands[0])))

/* ----------------------------------------------------------------------
 * Help
 * ---------------------------------------------------------------------- */

/*
 * print_usage
 *		The general --help: commands, options, exit codes.
 */
static void
print_usage(void)
{
	printf("siloctl: the operator's tool for silo's cluster mode\n\n"
		   "Usage: siloctl [OPTION]... COMMAND [ARG]...\n\n"
		   "Commands:\n");
	for (int i = 0; i < NCOMMANDS; i++)
		printf("  %-32s %s\n", commands[i].synopsis, commands[i].summary);
	printf("  %-32s %s\n\n", "help [COMMAND]", "help on a command (or: COMMAND --help)");
	printf("Connection options:\n"
		   "  -d, --dsn CONNSTR      any node of the cluster (default: the PG*\n"
		   "                         environment, as for psql)\n"
		   "  -e, --etcd URLS        etcd client URLs, comma-separated, for\n"
		   "                         force-release and cluster info --from-etcd\n"
		   "                         (default: $SILOCTL_ETCD_ENDPOINTS)\n"
		   "      --prefix P         key prefix in etcd (default silo, as\n"
		   "                         silo.cluster_prefix)\n"
		   "      --etcd-user USER   authenticate to etcd; the password comes from\n"
		   "                         $SILOCTL_ETCD_PASSWORD\n"
		   "      --etcd-cacert FILE, --etcd-cert FILE, --etcd-key FILE\n"
		   "                         TLS to etcd\n\n"
		   "Other options:\n"
		   "  -t, --tenant T         the job's tenant (job commands; default \"-\")\n"
		   "      --max-hops N       NOT_OWNER hints to follow, 0..20 (default %d)\n"
		   "      --retries N        retries of an unavailable shard (SL021), with\n"
		   "                         back-off, 0..100 (default %d)\n"
		   "      --check            tenant hash: compare with the server's\n"
		   "      --from-etcd        cluster info: read the map from etcd\n"
		   "  -y, --yes              shard force-release: do not ask\n"
		   "      --json             machine-readable output: one JSON document on\n"
		   "                         stdout (an {\"error\": ...} one on failure)\n"
		   "  -v, --verbose          show on stderr the nodes a call is routed to\n"
		   "  -h, --help             this help\n\n"
		   "Options may come before or after the command; \"--\" ends them (put it\n"
		   "before an argument that starts with \"-\"; \"-\" alone is fine).\n\n"
		   "Exit status: 0 ok; 1 the operation failed; 2 usage error; 3 cannot\n"
		   "connect (no node or etcd reachable); 4 NOT_OWNER could not be resolved\n"
		   "(a loop, too many hops, no owner); 5 the shard stayed unavailable\n"
		   "(SL021) through every retry.\n\n"
		   "docs/cluster.md, section \"siloctl\", has every command with examples.\n",
		   DEFAULT_MAX_HOPS, DEFAULT_RETRIES);
}

/*
 * print_command_help
 *		Help for the commands named by the words: the command's own help
 *		when they name one, the list of a group ("job") otherwise.
 */
static void
print_command_help(char **words, int nwords)
{
	char		name[128] = "";
	int			shown = 0;

	for (int i = 0; i < nwords && i < 2; i++)
	{
		if (i > 0)
			strcat(name, " ");
		strncat(name, words[i], sizeof(name) - strlen(name) - 2);
	}
	for (int i = 0; i < NCOMMANDS; i++)
	{
		if (strcmp(commands[i].name, name) == 0 ||
			(nwords >= 1 && strcmp(commands[i].name, words[0]) == 0))
		{
			printf("Usage: siloctl %s\n\n%s", commands[i].synopsis, commands[i].help);
			if (commands[i].options & OPT_DSN)
				printf("\n-d, --dsn CONNSTR: the node to ask (default: the PG* environment).");
			printf("\nEvery command takes --json, -v (--verbose) and -h (--help).\n");
			return;
		}
	}
	for (int i = 0; i < NCOMMANDS; i++)
	{
		size_t		len = strlen(words[0]);

		if (strncmp(commands[i].name, words[0], len) == 0 &&
			commands[i].name[len] == ' ')
		{
			if (shown++ == 0)
				printf("siloctl %s commands (siloctl %s COMMAND --help for one):\n\n",
					   words[0], words[0]);
			printf("  siloctl %s\n", commands[i].synopsis);
		}
	}
	if (shown == 0)
		usage_error("unknown command \"%s\"", name);
}

/* ----------------------------------------------------------------------
 * Options and dispatch
 * ---------------------------------------------------------------------- */

/*
 * parse_count
 *		A whole-number option value in [min, max], or a usage error.
 */
static int
parse_count(const char *name, const char *value, int min, int max)
{
	char	   *end;
	long		v;

	errno = 0;
	v = strtol(value, &end, 10);
	if (errno != 0 || end == value || *end != '\0' || v < min || v > max)
		usage_error("invalid value \"%s\" for --%s (expected %d..%d)", value, name, min, max);
	return (int) v;
}

/*
 * option_name
 *		The option behind an OPT_* bit, for "does not apply" errors.
 */
static const char *
option_name(unsigned bit)
{
	switch (bit)
	{
		case OPT_DSN:
			return "--dsn";
		case OPT_ETCD:
			return "--etcd (or --prefix, --etcd-user, --etcd-cacert, --etcd-cert, --etcd-key)";
		case OPT_TENANT:
			return "--tenant";
		case OPT_YES:
			return "--yes";
		case OPT_CHECK:
			return "--check";
		case OPT_FROM_ETCD:
			return "--from-etcd";
		case OPT_ROUTING:
			return "--max-hops (or --retries)";
	}
	return "?";
}

/*
 * parse_args
 *		Fill opt; returns the index in argv of the first word left over (the
 *		command), getopt having moved every option before it.
 */
static int
parse_args(int argc, char **argv)
{
	enum
	{
		O_PREFIX = 256, O_ETCD_USER, O_ETCD_CACERT, O_ETCD_CERT, O_ETCD_KEY,
		O_MAX_HOPS, O_RETRIES, O_CHECK, O_FROM_ETCD, O_JSON
	};
	static const struct option longopts[] = {
		{"dsn", required_argument, NULL, 'd'},
		{"etcd", required_argument, NULL, 'e'},
		{"prefix", required_argument, NULL, O_PREFIX},
		{"etcd-user", required_argument, NULL, O_ETCD_USER},
		{"etcd-cacert", required_argument, NULL, O_ETCD_CACERT},
		{"etcd-cert", required_argument, NULL, O_ETCD_CERT},
		{"etcd-key", required_argument, NULL, O_ETCD_KEY},
		{"tenant", required_argument, NULL, 't'},
		{"max-hops", required_argument, NULL, O_MAX_HOPS},
		{"retries", required_argument, NULL, O_RETRIES},
		{"check", no_argument, NULL, O_CHECK},
		{"from-etcd", no_argument, NULL, O_FROM_ETCD},
		{"yes", no_argument, NULL, 'y'},
		{"json", no_argument, NULL, O_JSON},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int			c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":d:e:t:yvh", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'd':
				opt.dsn = optarg;
				opt.given |= OPT_DSN;
				break;
			case 'e':
				opt.etcd = optarg;
				opt.given |= OPT_ETCD;
				break;
			case O_PREFIX:
				opt.prefix = optarg;
				opt.given |= OPT_ETCD;
				break;
			case O_ETCD_USER:
				opt.etcd_user = optarg;
				opt.given |= OPT_ETCD;
				break;
			case O_ETCD_CACERT:
				opt.etcd_cacert = optarg;
				opt.given |= OPT_ETCD;
				break;
			case O_ETCD_CERT:
				opt.etcd_cert = optarg;
				opt.given |= OPT_ETCD;
				break;
			case O_ETCD_KEY:
				opt.etcd_key = optarg;
				opt.given |= OPT_ETCD;
				break;
			case 't':
				opt.tenant = optarg;
				opt.given |= OPT_TENANT;
				break;
			case O_MAX_HOPS:
				opt.max_hops = parse_count("max-hops", optarg, 0, 20);
				opt.given |= OPT_ROUTING;
				break;
			case O_RETRIES:
				opt.retries = parse_count("retries", optarg, 0, 100);
				opt.given |= OPT_ROUTING;
				break;
			case O_CHECK:
				opt.check = true;
				opt.given |= OPT_CHECK;
				break;
			case O_FROM_ETCD:
				opt.from_etcd = true;
				opt.given |= OPT_FROM_ETCD;
				break;
			case 'y':
				opt.yes = true;
				opt.given |= OPT_YES;
				break;
			case O_JSON:
				opt.json = true;
				break;
			case 'v':
				opt.verbose = true;
				break;
			case 'h':
				opt.help = true;
				break;
			case ':':
				usage_error("option %s needs a value", argv[optind - 1]);
			default:
				if (optopt)
					usage_error("unknown option -%c", optopt);
				usage_error("unknown option %s", argv[optind - 1]);
		}
	}
	if (opt.etcd == NULL)
	{
		const char *env = getenv("SILOCTL_ETCD_ENDPOINTS");

		if (env && *env)
			opt.etcd = env;
	}
	return optind;
}

/*
 * find_command
 *		The command the words name (its words are consumed), or NULL.
 */
static const Command *
find_command(char **words, int nwords, int *used)
{
	for (int i = 0; i < NCOMMANDS; i++)
	{
		const char *name = commands[i].name;
		const char *space = strchr(name, ' ');

		if (space == NULL)
		{
			if (nwords >= 1 && strcmp(words[0], name) == 0)
			{
				*used = 1;
				return &commands[i];
			}
		}
		else if (nwords >= 2 &&
				 strlen(words[0]) == (size_t) (space - name) &&
				 strncmp(words[0], name, space - name) == 0 &&
				 strcmp(words[1], space + 1) == 0)
		{
			*used = 2;
			return &commands[i];
		}
	}
	return NULL;
}

/*
 * find_group
 *		Whether word is the first word of two-word commands ("job").
 */
static bool
find_group(const char *word)
{
	size_t		len = strlen(word);

	for (int i = 0; i < NCOMMANDS; i++)
		if (strncmp(commands[i].name, word, len) == 0 && commands[i].name[len] == ' ')
			return true;
	return false;
}

/*
 * group_list
 *		The second words of a group's commands, comma-separated (a static
 *		buffer).
 */
static const char *
group_list(const char *word)
{
	static char buf[256];
	size_t		len = strlen(word);

	buf[0] = '\0';
	for (int i = 0; i < NCOMMANDS; i++)
	{
		if (strncmp(commands[i].name, word, len) != 0 || commands[i].name[len] != ' ')
			continue;
		if (buf[0])
			strncat(buf, ", ", sizeof(buf) - strlen(buf) - 1);
		strncat(buf, commands[i].name + len + 1, sizeof(buf) - strlen(buf) - 1);
	}
	return buf;
}

/*
 * run_job_command
 *		The job commands share one handler in jobs.c, told the action.
 */
static int
run_job_command(const Command *cmd, char **args, int nargs)
{
	const char *action = strchr(cmd->name, ' ') + 1;

	return cmd_job(action, args, nargs);
}

/*
 * main
 *		Parse, pick the command, check its arguments and options, run it.
 */
int
main(int argc, char **argv)
{
	const Command *cmd;
	char	  **words;
	int			nwords;
	int			used = 0;
	int			first;
	unsigned	extra;

	signal(SIGPIPE, SIG_IGN);	/* libcurl leaves it to us (NOSIGNAL) */
	first = parse_args(argc, argv);
	words = argv + first;
	nwords = argc - first;

	if (nwords > 0 && strcmp(words[0], "help") == 0)
	{
		if (nwords == 1)
			print_usage();
		else
			print_command_help(words + 1, nwords - 1);
		return EXIT_OK;
	}
	if (nwords == 0)
	{
		if (opt.help)
		{
			print_usage();
			return EXIT_OK;
		}
		usage_error("no command given");
	}
	if (opt.help)
	{
		print_command_help(words, nwords);
		return EXIT_OK;
	}

	cmd = find_command(words, nwords, &used);
	if (cmd == NULL && find_group(words[0]))
		usage_error("\"%s\" needs one of: %s", words[0], group_list(words[0]));
	if (cmd == NULL)
	{
		if (nwords >= 2)
			usage_error("unknown command \"%s %s\"", words[0], words[1]);
		usage_error("unknown command \"%s\"", words[0]);
	}
	words += used;
	nwords -= used;
	if (nwords < cmd->min_args || (cmd->max_args >= 0 && nwords > cmd->max_args))
		usage_error("wrong number of arguments\nUsage: siloctl %s", cmd->synopsis);
	extra = opt.given & ~cmd->options;
	for (unsigned bit = 1; extra != 0; bit <<= 1)
	{
		if (extra & bit)
			usage_error("%s does not apply to \"%s\"", option_name(bit), cmd->name);
	}
	if (cmd->run == NULL)
		return run_job_command(cmd, words, nwords);
	return cmd->run(words, nwords);
}
