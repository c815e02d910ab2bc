/*-------------------------------------------------------------------------
 *
 * silo-worker.c
 *	  Reference worker for the silo job queue.
 *
 * The worker LISTENs on the silo_task_ready channel, leases tasks of one
 * task group in batches with silo.lease(), keeps the leases alive with
 * silo.heartbeat() every third of the lease, runs a handler per task and
 * reports the outcome with silo.complete(), silo.fail() or silo.ack_cancel().
 * On SIGTERM or SIGINT it stops leasing, lets running jobs finish for up to
 * --grace-ms, then kills what is left and hands those tasks back with
 * silo.release().
 *
 * Without --exec the handler is a no-op that succeeds at once, and a whole
 * batch is completed in a single round trip.  With --exec CMD each task runs
 * "/bin/sh -c CMD" with the payload on stdin; usage() describes the contract.
 *
 * Everything happens in one thread.  A poll() loop watches the libpq socket
 * (for notifications), a self-pipe written by the signal handlers, and the
 * stdin/stdout/stderr pipes of the children.  All queries are synchronous on
 * one connection, which is fine because every one of them is short.
 *
 * Only libpq and POSIX are needed:
 *	  cc -std=gnu11 -I`pg_config --includedir` silo-worker.c -lpq
 * Building with -DSILO_WORKER_SELFTEST replaces main() by a self-test of the
 * JSON helpers.
 *
 * tools/silo-worker.c
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#define NOTIFY_CHANNEL		"silo_task_ready"
#define STDOUT_CAP			(1024 * 1024)	/* stdout kept per job */
#define STDERR_TAIL			4096	/* trailing stderr bytes kept per job */
#define JSON_MAX_DEPTH		512 /* deeper output is treated as plain text */
#define RECONNECT_DELAY_MS	1000
#define MAX_BATCH			1000	/* silo.lease() accepts up to 1000 */

/* Every parameter is sent as text; the casts pick the function signature. */
#define SQL_LEASE \
	"SELECT task_id, kind, tenant, job_id, attempt, relative_attempt, " \
	"is_last_attempt, task_group, payload " \
	"FROM silo.lease($1::text, $2::text, $3::int, $4::int)"
#define SQL_HEARTBEAT "SELECT silo.heartbeat($1::uuid, $2::text, $3::int)"
#define SQL_HEARTBEAT_MANY \
	"SELECT t::text, silo.heartbeat(t, $1::text, $3::int) " \
	"FROM unnest($2::uuid[]) AS t"
#define SQL_COMPLETE "SELECT silo.complete($1::uuid, $2::text, $3::jsonb)"
#define SQL_COMPLETE_MANY \
	"SELECT silo.complete(t, $1::text, NULL) FROM unnest($2::uuid[]) AS t"
#define SQL_FAIL "SELECT silo.fail($1::uuid, $2::text, $3::text, $4::jsonb)"
#define SQL_ACK_CANCEL "SELECT silo.ack_cancel($1::uuid, $2::text)"
#define SQL_RELEASE "SELECT silo.release($1::uuid, $2::text)"

/* Column numbers in the result of SQL_LEASE. */
enum
{
	COL_TASK_ID, COL_KIND, COL_TENANT, COL_JOB_ID, COL_ATTEMPT,
	COL_REL_ATTEMPT, COL_IS_LAST, COL_TASK_GROUP, COL_PAYLOAD
};

typedef struct StrBuf
{
	char	   *data;			/* always NUL-terminated once allocated */
	size_t		len;
	size_t		cap;
} StrBuf;

typedef enum LogLevel
{
	LOG_VERBOSE, LOG_INFO, LOG_WARNING, LOG_ERROR
} LogLevel;

typedef enum QueryStatus
{
	QS_OK,
	QS_LEASE_LOST,				/* SL001/SL002: drop the task silently */
	QS_ERROR,					/* other SQL error; the connection is fine */
	QS_CONN_LOST				/* the connection is gone and was dropped */
} QueryStatus;

/* What a pollfd slot stands for. */
typedef enum FdKind
{
	FD_WAKE, FD_PQ, FD_STDIN, FD_STDOUT, FD_STDERR
} FdKind;

/* One task being run by a child process (--exec mode only). */
typedef struct Job
{
	char	   *task_id;
	char	   *job_id;
	char	   *tenant;
	char	   *kind;
	char	   *task_group;
	char	   *attempt;
	char	   *relative_attempt;
	bool		is_last_attempt;
	char	   *input;			/* payload plus newline, fed to stdin */
	size_t		input_len;
	size_t		input_off;
	pid_t		pid;
	int			in_fd;			/* our ends of the child's pipes, or -1 */
	int			out_fd;
	int			err_fd;
	StrBuf		out;			/* first STDOUT_CAP bytes of stdout */
	bool		out_truncated;
	char		err_tail[STDERR_TAIL];	/* last bytes of stderr */
	size_t		err_len;
	bool		err_truncated;
	int64_t		next_heartbeat;
	int64_t		kill_at;		/* SIGKILL a cancelled job then; 0 = never */
	bool		cancelled;		/* a heartbeat reported a cancellation */
	bool		lost;			/* lease lost: kill the child, report nothing */
	bool		shutdown_kill;	/* killed when the grace period ran out */
	bool		in_round;		/* part of the current heartbeat round */
} Job;

static struct
{
	const char *dsn;
	const char *task_group;
	char	   *worker_id;
	int			concurrency;
	int			batch;
	int			lease_ms;
	int			poll_ms;
	int			grace_ms;
	const char *exec_cmd;
	long		max_jobs;
	int			exit_when_idle_ms;
	bool		progress;
	bool		quiet;
	bool		verbose;
}			opt = {
	.dsn = "", .concurrency = 8, .lease_ms = 10000, .poll_ms = 1000,
	.grace_ms = 10000
};

static struct
{
	long		succeeded;
	long		failed;
	long		cancelled;
	long		released;
	long		lost;			/* leases lost or reports that did not land */
}			stats;

static PGconn *conn;
static int64_t reconnect_at;
static Job **jobs;				/* opt.concurrency slots, NULL when free */
static int	njobs;
static bool lease_wanted;		/* last lease came back full: lease again */
static bool notified;			/* a NOTIFY for our group arrived */
static int64_t next_poll_at;	/* fallback lease time when not woken */
static bool ever_leased;
static char last_sqlstate[6];
static volatile sig_atomic_t stop_signals;
static int	wake_pipe[2] = {-1, -1};

#define FINISHED() \
	(stats.succeeded + stats.failed + stats.cancelled + stats.released)

static void log_msg(LogLevel level, const char *fmt,...)
			__attribute__((format(printf, 2, 3)));

/*
 * now_ms
 *		Monotonic time in milliseconds; every deadline is computed from it.
 */
static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * log_msg
 *		Print one diagnostic line to stderr, filtered by --quiet/--verbose.
 */
static void
log_msg(LogLevel level, const char *fmt,...)
{
	va_list		ap;

	if ((level == LOG_VERBOSE && !opt.verbose) ||
		(level == LOG_INFO && opt.quiet))
		return;
	fputs(level == LOG_ERROR ? "silo-worker: error: " :
		  level == LOG_WARNING ? "silo-worker: warning: " : "silo-worker: ",
		  stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/*
 * msglen
 *		Length of the first line of a libpq message, for "%.*s"; the rest
 *		(hints, context) would only clutter a one-line log.
 */
static int
msglen(const char *msg)
{
	size_t		len = strcspn(msg, "\n");

	while (len > 0 && msg[len - 1] == ' ')
		len--;
	return (int) len;
}

/*
 * xstrdup
 *		strdup() that exits on out-of-memory and maps NULL to NULL, so lease
 *		columns that may be SQL NULL can be copied without special cases.
 */
static char *
xstrdup(const char *s)
{
	char	   *r;

	if (s == NULL)
		return NULL;
	if ((r = strdup(s)) == NULL)
	{
		log_msg(LOG_ERROR, "out of memory");
		exit(1);
	}
	return r;
}

/*
 * sb_append
 *		Append n bytes to a growable string buffer, keeping it terminated.
 */
static void
sb_append(StrBuf *sb, const char *s, size_t n)
{
	if (sb->len + n + 1 > sb->cap)
	{
		size_t		cap = sb->cap ? sb->cap : 256;
		char	   *d;

		while (cap < sb->len + n + 1)
			cap *= 2;
		if ((d = realloc(sb->data, cap)) == NULL)
		{
			log_msg(LOG_ERROR, "out of memory");
			exit(1);
		}
		sb->data = d;
		sb->cap = cap;
	}
	memcpy(sb->data + sb->len, s, n);
	sb->len += n;
	sb->data[sb->len] = '\0';
}

/*
 * sb_puts
 *		Append a C string; shorthand used when building SQL parameters.
 */
static void
sb_puts(StrBuf *sb, const char *s)
{
	sb_append(sb, s, strlen(s));
}

/*
 * sb_free
 *		Release a buffer's memory and make it empty again.
 */
static void
sb_free(StrBuf *sb)
{
	free(sb->data);
	sb->data = NULL;
	sb->len = sb->cap = 0;
}

/* ----------------------------------------------------------------
 *		JSON helpers
 * ----------------------------------------------------------------
 */

/*
 * utf8_len
 *		Length of the well-formed UTF-8 sequence at s, or 0 if it is not one
 *		(overlongs, surrogates and code points past U+10FFFF are rejected).
 *		PostgreSQL refuses such bytes, so they must never reach it.
 */
static size_t
utf8_len(const unsigned char *s, size_t avail)
{
	unsigned char lo = 0x80,
				hi = 0xBF;
	size_t		n,
				i;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xC2 && s[0] <= 0xDF)
		n = 2;
	else if (s[0] >= 0xE0 && s[0] <= 0xEF)
	{
		n = 3;
		if (s[0] == 0xE0)
			lo = 0xA0;
		else if (s[0] == 0xED)
			hi = 0x9F;
	}
	else if (s[0] >= 0xF0 && s[0] <= 0xF4)
	{
		n = 4;
		if (s[0] == 0xF0)
			lo = 0x90;
		else if (s[0] == 0xF4)
			hi = 0x8F;
	}
	else
		return 0;
	if (avail < n || s[1] < lo || s[1] > hi)
		return 0;
	for (i = 2; i < n; i++)
		if ((s[i] & 0xC0) != 0x80)
			return 0;
	return n;
}

/*
 * json_append_string
 *		Append text as a quoted JSON string.  Invalid UTF-8 and NUL bytes
 *		become U+FFFD because jsonb can store neither.
 */
static void
json_append_string(StrBuf *sb, const char *text, size_t len)
{
	const unsigned char *s = (const unsigned char *) text;
	size_t		i = 0;
	char		esc[8];

	sb_append(sb, "\"", 1);
	while (i < len)
	{
		unsigned char c = s[i];
		size_t		n;

		if (c >= 0x80)
		{
			if ((n = utf8_len(s + i, len - i)) == 0)
			{
				sb_puts(sb, "\\ufffd");
				n = 1;
			}
			else
				sb_append(sb, text + i, n);
			i += n;
			continue;
		}
		if (c == '"' || c == '\\')
		{
			esc[0] = '\\';
			esc[1] = (char) c;
			sb_append(sb, esc, 2);
		}
		else if (c == '\n')
			sb_puts(sb, "\\n");
		else if (c == '\r')
			sb_puts(sb, "\\r");
		else if (c == '\t')
			sb_puts(sb, "\\t");
		else if (c == '\0')
			sb_puts(sb, "\\ufffd");
		else if (c < 0x20)
		{
			snprintf(esc, sizeof(esc), "\\u%04x", c);
			sb_puts(sb, esc);
		}
		else
			sb_append(sb, text + i, 1);
		i++;
	}
	sb_append(sb, "\"", 1);
}

/* Cursor of the JSON syntax checker. */
typedef struct JsonCursor
{
	const unsigned char *p;
	const unsigned char *end;
	int			depth;
} JsonCursor;

static bool json_value(JsonCursor *c);

/*
 * json_ws
 *		Skip the four whitespace characters JSON allows between tokens.
 */
static void
json_ws(JsonCursor *c)
{
	while (c->p < c->end &&
		   (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
		c->p++;
}

/*
 * json_hex4
 *		Read the four hex digits of a \u escape into *cp.
 */
static bool
json_hex4(JsonCursor *c, unsigned int *cp)
{
	int			i;

	if (c->end - c->p < 4)
		return false;
	*cp = 0;
	for (i = 0; i < 4; i++)
	{
		unsigned char h = *c->p++;

		*cp <<= 4;
		if (h >= '0' && h <= '9')
			*cp |= h - '0';
		else if (h >= 'a' && h <= 'f')
			*cp |= h - 'a' + 10;
		else if (h >= 'A' && h <= 'F')
			*cp |= h - 'A' + 10;
		else
			return false;
	}
	return true;
}

/*
 * json_string
 *		Check a string token starting at its opening quote.  Besides the RFC
 *		rules it refuses what jsonb would refuse: \u0000 and lone surrogates.
 */
static bool
json_string(JsonCursor *c)
{
	c->p++;
	while (c->p < c->end)
	{
		unsigned char ch = *c->p;
		unsigned int cp,
					lo;
		size_t		n;

		if (ch == '"')
		{
			c->p++;
			return true;
		}
		if (ch < 0x20)
			return false;
		if (ch >= 0x80)
		{
			if ((n = utf8_len(c->p, (size_t) (c->end - c->p))) == 0)
				return false;
			c->p += n;
			continue;
		}
		c->p++;
		if (ch != '\\')
			continue;
		if (c->p >= c->end)
			return false;
		ch = *c->p++;
		if (strchr("\"\\/bfnrt", ch) != NULL && ch != '\0')
			continue;
		if (ch != 'u' || !json_hex4(c, &cp) || cp == 0 ||
			(cp >= 0xDC00 && cp <= 0xDFFF))
			return false;
		if (cp >= 0xD800 && cp <= 0xDBFF)
		{
			if (c->end - c->p < 2 || c->p[0] != '\\' || c->p[1] != 'u')
				return false;
			c->p += 2;
			if (!json_hex4(c, &lo) || lo < 0xDC00 || lo > 0xDFFF)
				return false;
		}
	}
	return false;
}

/*
 * json_digits
 *		Skip a run of decimal digits; false if there is not at least one.
 */
static bool
json_digits(JsonCursor *c)
{
	const unsigned char *start = c->p;

	while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
		c->p++;
	return c->p > start;
}

/*
 * json_number
 *		Check a number: -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?
 */
static bool
json_number(JsonCursor *c)
{
	if (c->p < c->end && *c->p == '-')
		c->p++;
	if (c->p < c->end && *c->p == '0')
		c->p++;
	else if (c->p >= c->end || *c->p < '1' || *c->p > '9' || !json_digits(c))
		return false;
	if (c->p < c->end && *c->p == '.')
	{
		c->p++;
		if (!json_digits(c))
			return false;
	}
	if (c->p < c->end && (*c->p == 'e' || *c->p == 'E'))
	{
		c->p++;
		if (c->p < c->end && (*c->p == '+' || *c->p == '-'))
			c->p++;
		if (!json_digits(c))
			return false;
	}
	return true;
}

/*
 * json_container
 *		Check an object or array starting at its opening bracket.  Objects
 *		and arrays share the comma/closer logic; objects add "key":.
 */
static bool
json_container(JsonCursor *c)
{
	bool		is_object = (*c->p == '{');
	unsigned char closer = is_object ? '}' : ']';

	if (++c->depth > JSON_MAX_DEPTH)
		return false;
	c->p++;
	json_ws(c);
	if (c->p < c->end && *c->p == closer)
	{
		c->p++;
		c->depth--;
		return true;
	}
	for (;;)
	{
		if (is_object)
		{
			json_ws(c);
			if (c->p >= c->end || *c->p != '"' || !json_string(c))
				return false;
			json_ws(c);
			if (c->p >= c->end || *c->p++ != ':')
				return false;
		}
		if (!json_value(c))
			return false;
		json_ws(c);
		if (c->p >= c->end)
			return false;
		if (*c->p == ',')
		{
			c->p++;
			continue;
		}
		if (*c->p++ != closer)
			return false;
		c->depth--;
		return true;
	}
}

/*
 * json_value
 *		Check any JSON value, with leading whitespace.
 */
static bool
json_value(JsonCursor *c)
{
	static const char *const words[] = {"true", "false", "null"};
	int			i;

	json_ws(c);
	if (c->p >= c->end)
		return false;
	if (*c->p == '{' || *c->p == '[')
		return json_container(c);
	if (*c->p == '"')
		return json_string(c);
	for (i = 0; i < 3; i++)
	{
		size_t		n = strlen(words[i]);

		if (*c->p == (unsigned char) words[i][0])
		{
			if ((size_t) (c->end - c->p) < n || memcmp(c->p, words[i], n) != 0)
				return false;
			c->p += n;
			return true;
		}
	}
	return json_number(c);
}

/*
 * json_is_valid
 *		True if text is exactly one JSON value (surrounding whitespace ok)
 *		that jsonb will accept.  Used to decide whether a command's stdout
 *		can be stored as the result as-is.
 */
static bool
json_is_valid(const char *text, size_t len)
{
	JsonCursor	c;

	c.p = (const unsigned char *) text;
	c.end = c.p + len;
	c.depth = 0;
	if (!json_value(&c))
		return false;
	json_ws(&c);
	return c.p == c.end;
}

/* ----------------------------------------------------------------
 *		Signals and the database connection
 * ----------------------------------------------------------------
 */

/*
 * wake_loop
 *		Write a byte to the self-pipe so poll() returns.  Called from signal
 *		handlers, hence only async-signal-safe calls and errno preserved.
 */
static void
wake_loop(void)
{
	int			save_errno = errno;
	ssize_t		rc = write(wake_pipe[1], "x", 1);

	(void) rc;					/* a full pipe already means "wake up" */
	errno = save_errno;
}

/*
 * handle_stop_signal
 *		SIGTERM/SIGINT: ask the loop to shut down (a second one skips the
 *		rest of the grace period).
 */
static void
handle_stop_signal(int signo)
{
	(void) signo;
	stop_signals = stop_signals + 1;
	wake_loop();
}

/*
 * handle_sigchld
 *		SIGCHLD: only wake the loop; children are reaped there.
 */
static void
handle_sigchld(int signo)
{
	(void) signo;
	wake_loop();
}

/*
 * setup_signals
 *		Create the self-pipe and install the handlers.  SIGPIPE is ignored so
 *		that a child closing its stdin early shows up as EPIPE, not death.
 */
static void
setup_signals(void)
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
	sa.sa_handler = handle_stop_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sa.sa_handler = handle_sigchld;
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sa.sa_flags = 0;
	sigaction(SIGPIPE, &sa, NULL);
}

/*
 * signal_job
 *		Send a signal to a child's whole process group (the shell and what it
 *		started), falling back to the child alone if the group is gone.
 */
static void
signal_job(Job *job, int signo)
{
	if (kill(-job->pid, signo) != 0)
		(void) kill(job->pid, signo);
}

/*
 * mark_lost
 *		The lease of a job is gone: kill its child and remember to report
 *		nothing when it is reaped (the server hands the task out again).
 */
static void
mark_lost(Job *job)
{
	if (job->lost)
		return;
	job->lost = true;
	signal_job(job, SIGKILL);
}

/*
 * connect_db
 *		Open the connection and LISTEN.  The DSN is expanded last, so it can
 *		override our defaults; an empty DSN means the PG* environment.
 */
static bool
connect_db(bool initial)
{
	const char *keys[] = {"fallback_application_name", "client_encoding",
	"dbname", NULL};
	const char *vals[] = {"silo-worker", "UTF8", opt.dsn, NULL};
	PGconn	   *c = PQconnectdbParams(keys, vals, 1);
	PGresult   *res;

	if (c == NULL || PQstatus(c) != CONNECTION_OK)
	{
		const char *msg = c ? PQerrorMessage(c) : "out of memory";

		log_msg(initial ? LOG_ERROR : LOG_WARNING, "could not connect: %.*s",
				msglen(msg), msg);
		PQfinish(c);
		return false;
	}
	res = PQexec(c, "LISTEN " NOTIFY_CHANNEL);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		log_msg(initial ? LOG_ERROR : LOG_WARNING, "LISTEN failed: %.*s",
				msglen(PQerrorMessage(c)), PQerrorMessage(c));
		PQclear(res);
		PQfinish(c);
		return false;
	}
	PQclear(res);
	conn = c;
	lease_wanted = true;		/* look for work right away */
	if (!initial)
		log_msg(LOG_INFO, "reconnected");
	return true;
}

/*
 * drop_connection
 *		Forget a broken connection.  Leases of in-flight jobs cannot be kept
 *		alive now, so those children are killed and their tasks left for the
 *		server to sweep; we reconnect after RECONNECT_DELAY_MS.
 */
static void
drop_connection(void)
{
	int			i,
				n = 0;

	PQfinish(conn);
	conn = NULL;
	reconnect_at = now_ms() + RECONNECT_DELAY_MS;
	for (i = 0; i < opt.concurrency; i++)
		if (jobs[i] && !jobs[i]->lost)
		{
			mark_lost(jobs[i]);
			n++;
		}
	log_msg(LOG_WARNING, "connection lost; abandoned %d running job(s), "
			"reconnecting in %d ms", n, RECONNECT_DELAY_MS);
}

/*
 * drain_notifies
 *		Consume queued notifications; one for our task group (or with no
 *		payload) means new work may be due, so lease without waiting.
 */
static void
drain_notifies(void)
{
	PGnotify   *n;

	while (conn && (n = PQnotifies(conn)) != NULL)
	{
		if (n->extra == NULL || n->extra[0] == '\0' ||
			strcmp(n->extra, opt.task_group) == 0)
			notified = true;
		PQfreemem(n);
	}
}

/*
 * run_query
 *		Execute one statement with text parameters and classify the result,
 *		so callers only handle success, lost lease, other error, or a dead
 *		connection.  On QS_OK and res != NULL the caller owns *res.
 */
static QueryStatus
run_query(const char *what, const char *sql, int nparams,
		  const char *const *params, PGresult **res)
{
	PGresult   *r;
	const char *state,
			   *msg;
	ExecStatusType st;

	last_sqlstate[0] = '\0';
	if (conn == NULL)
		return QS_CONN_LOST;
	r = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
	st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
	drain_notifies();
	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
	{
		if (res)
			*res = r;
		else
			PQclear(r);
		return QS_OK;
	}
	if (PQstatus(conn) == CONNECTION_BAD)
	{
		log_msg(LOG_WARNING, "%s: %.*s", what, msglen(PQerrorMessage(conn)),
				PQerrorMessage(conn));
		PQclear(r);
		drop_connection();
		return QS_CONN_LOST;
	}
	state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	msg = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	if (msg == NULL)
		msg = PQerrorMessage(conn);
	snprintf(last_sqlstate, sizeof(last_sqlstate), "%s", state ? state : "");
	if (strcmp(last_sqlstate, "SL001") == 0 || strcmp(last_sqlstate, "SL002") == 0)
	{
		log_msg(LOG_VERBOSE, "%s: %.*s", what, msglen(msg), msg);
		PQclear(r);
		return QS_LEASE_LOST;
	}
	log_msg(LOG_WARNING, "%s failed: %.*s (SQLSTATE %s)", what, msglen(msg),
			msg, last_sqlstate);
	PQclear(r);
	return QS_ERROR;
}

/*
 * task_call
 *		Run a per-task reporting function: params are task id, worker id,
 *		then up to two more (NULL = SQL NULL).
 */
static QueryStatus
task_call(const char *what, const char *sql, int nparams,
		  const char *task_id, const char *p3, const char *p4)
{
	const char *params[4] = {task_id, opt.worker_id, p3, p4};

	return run_query(what, sql, nparams, params, NULL);
}

/* ----------------------------------------------------------------
 *		Leasing and the no-op handler
 * ----------------------------------------------------------------
 */

/*
 * complete_noop_batch
 *		Complete every leased task of a no-op batch in one round trip.  If
 *		that fails (typically one lease was lost and the whole statement
 *		rolled back), complete them one at a time instead.
 */
static void
complete_noop_batch(PGresult *res)
{
	int			n = PQntuples(res),
				i;
	StrBuf		ids = {0};
	const char *params[2];
	QueryStatus qs;

	sb_puts(&ids, "{");
	for (i = 0; i < n; i++)
	{
		if (i > 0)
			sb_puts(&ids, ",");
		sb_puts(&ids, PQgetvalue(res, i, COL_TASK_ID));
	}
	sb_puts(&ids, "}");
	params[0] = opt.worker_id;
	params[1] = ids.data;
	qs = run_query("complete batch", SQL_COMPLETE_MANY, 2, params, NULL);
	sb_free(&ids);
	if (qs == QS_OK)
	{
		stats.succeeded += n;
		return;
	}
	for (i = 0; i < n; i++)
	{
		if (task_call("complete", SQL_COMPLETE, 3,
					  PQgetvalue(res, i, COL_TASK_ID), NULL, NULL) == QS_OK)
			stats.succeeded++;
		else
			stats.lost++;
	}
}

/*
 * child_exec
 *		In the forked child: become a process-group leader (so signals reach
 *		the whole command), wire up the pipes, export the task description
 *		and exec the shell.  Never returns.
 */
static void
child_exec(const Job *job, const int *in, const int *out, const int *err)
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
	setenv("SILO_JOB_ID", job->job_id ? job->job_id : "", 1);
	setenv("SILO_TENANT", job->tenant ? job->tenant : "", 1);
	setenv("SILO_ATTEMPT", job->attempt ? job->attempt : "", 1);
	setenv("SILO_RELATIVE_ATTEMPT",
		   job->relative_attempt ? job->relative_attempt : "", 1);
	setenv("SILO_IS_LAST_ATTEMPT", job->is_last_attempt ? "true" : "false", 1);
	setenv("SILO_TASK_GROUP", job->task_group ? job->task_group : "", 1);
	setenv("SILO_TASK_KIND", job->kind ? job->kind : "", 1);
	setenv("SILO_WORKER_ID", opt.worker_id, 1);
	execl("/bin/sh", "sh", "-c", opt.exec_cmd, (char *) NULL);
	fprintf(stderr, "silo-worker: could not run /bin/sh: %s\n", strerror(errno));
	_exit(127);
}

/*
 * free_job
 *		Close whatever pipes are still open and free a job.
 */
static void
free_job(Job *job)
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
	free(job->input);
	sb_free(&job->out);
	free(job);
}

static void job_write_stdin(Job *job);

/*
 * spawn_job
 *		Start the --exec command for one leased row and put it in a free
 *		slot.  If the child cannot be started the task is released, since
 *		that is our problem rather than the job's.
 */
static void
spawn_job(PGresult *res, int row, int64_t now)
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
	job->task_id = xstrdup(PQgetvalue(res, row, COL_TASK_ID));
#define COLUMN(col) (PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col))
	job->kind = xstrdup(COLUMN(COL_KIND));
	job->tenant = xstrdup(COLUMN(COL_TENANT));
	job->job_id = xstrdup(COLUMN(COL_JOB_ID));
	job->attempt = xstrdup(COLUMN(COL_ATTEMPT));
	job->relative_attempt = xstrdup(COLUMN(COL_REL_ATTEMPT));
	job->is_last_attempt = strcmp(PQgetvalue(res, row, COL_IS_LAST), "t") == 0;
	job->task_group = xstrdup(COLUMN(COL_TASK_GROUP));
#undef COLUMN
	job->in_fd = job->out_fd = job->err_fd = -1;
	if (!PQgetisnull(res, row, COL_PAYLOAD))
	{
		StrBuf		input = {0};

		sb_puts(&input, PQgetvalue(res, row, COL_PAYLOAD));
		sb_puts(&input, "\n");
		job->input = input.data;
		job->input_len = input.len;
	}

	if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 ||
		pipe2(err, O_CLOEXEC) != 0 || (job->pid = fork()) < 0)
	{
		log_msg(LOG_WARNING, "could not start job %s: %s; releasing it",
				job->task_id, strerror(errno));
		for (i = 0; i < 2; i++)
		{
			if (in[i] >= 0)
				close(in[i]);
			if (out[i] >= 0)
				close(out[i]);
			if (err[i] >= 0)
				close(err[i]);
		}
		if (task_call("release", SQL_RELEASE, 2, job->task_id, NULL, NULL) == QS_OK)
			stats.released++;
		else
			stats.lost++;
		free_job(job);
		lease_wanted = false;	/* back off: fork or pipe limits are hit */
		next_poll_at = now + (opt.poll_ms > 1000 ? opt.poll_ms : 1000);
		return;
	}
	if (job->pid == 0)
		child_exec(job, in, out, err);

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
	log_msg(LOG_VERBOSE, "started job %s (task %s) as pid %d",
			job->job_id ? job->job_id : "?", job->task_id, (int) job->pid);
	job_write_stdin(job);
}

/*
 * lease_tasks
 *		Ask for as many tasks as we have room for (bounded by --batch and
 *		--max-jobs) and hand them to the handler.  A full batch means more
 *		work is probably waiting, so the loop leases again without sleeping;
 *		a short one means the queue is drained, so wait for NOTIFY or timer.
 *		Returns the number of tasks leased.
 */
static int
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
	if (opt.max_jobs > 0 && want > opt.max_jobs - FINISHED() - njobs)
		want = opt.max_jobs - FINISHED() - njobs;
	if (want <= 0)
		return 0;
	snprintf(want_s, sizeof(want_s), "%ld", want);
	snprintf(lease_s, sizeof(lease_s), "%d", opt.lease_ms);
	params[0] = opt.worker_id;
	params[1] = opt.task_group;
	params[2] = want_s;
	params[3] = lease_s;
	notified = false;
	qs = run_query("lease", SQL_LEASE, 4, params, &res);
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
	if (n > 0 && opt.exec_cmd == NULL)
		complete_noop_batch(res);
	else
		for (i = 0; i < n && conn != NULL; i++)
			spawn_job(res, i, now);
	PQclear(res);
	return n;
}

/* ----------------------------------------------------------------
 *		Running jobs: heartbeats, pipes, outcomes
 * ----------------------------------------------------------------
 */

/*
 * apply_heartbeat
 *		Act on one heartbeat answer: true means the job was cancelled, so ask
 *		the command to stop (SIGTERM), escalating to SIGKILL after --grace-ms.
 */
static void
apply_heartbeat(Job *job, const char *value, int64_t now)
{
	if (strcmp(value, "t") != 0 || job->cancelled)
		return;
	log_msg(LOG_INFO, "job %s was cancelled; stopping it",
			job->job_id ? job->job_id : job->task_id);
	job->cancelled = true;
	job->kill_at = now + opt.grace_ms;
	signal_job(job, SIGTERM);
}

/*
 * heartbeat_jobs
 *		Extend the leases of jobs whose heartbeat is due.  Jobs due within
 *		a short slack are included so their heartbeats coalesce into one
 *		statement; if that fails (one lease lost) go one by one to find out
 *		which, killing the children whose lease is gone.
 */
static void
heartbeat_jobs(int64_t now)
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
		qs = run_query("heartbeat batch", SQL_HEARTBEAT_MANY, 3, params, &res);
		if (qs == QS_OK)
		{
			for (j = 0; j < PQntuples(res); j++)
				for (i = 0; i < opt.concurrency; i++)
					if (jobs[i] && strcmp(jobs[i]->task_id,
										  PQgetvalue(res, j, 0)) == 0)
						apply_heartbeat(jobs[i], PQgetvalue(res, j, 1), now);
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
		qs = run_query("heartbeat", SQL_HEARTBEAT, 3, params, &res);
		if (qs == QS_OK)
		{
			apply_heartbeat(job, PQntuples(res) ? PQgetvalue(res, 0, 0) : "f", now);
			PQclear(res);
		}
		else if (qs == QS_LEASE_LOST)
		{
			log_msg(LOG_VERBOSE, "lease of task %s lost; killing its job",
					job->task_id);
			mark_lost(job);
		}
	}
}

/*
 * job_read
 *		Read what is available from a child's stdout or stderr, up to a
 *		bounded amount so one chatty child cannot starve the loop.  stdout
 *		keeps its head (the result), stderr its tail (the interesting end).
 */
static void
job_read(Job *job, bool is_stderr)
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
 * job_write_stdin
 *		Feed as much of the payload to the child as its pipe takes; the rest
 *		waits for POLLOUT, so a child that writes before reading all its
 *		input cannot deadlock us.  A child that closes stdin early is fine.
 */
static void
job_write_stdin(Job *job)
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
 * report_success
 *		Complete a task whose command exited 0.  The result is NULL for empty
 *		stdout, the stdout itself if it is JSON, and otherwise stdout as a
 *		JSON string.  Should jsonb still reject our "valid" JSON (a number
 *		beyond numeric's range, say), retry with the string form.
 */
static QueryStatus
report_success(Job *job)
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
	qs = task_call("complete", SQL_COMPLETE, 3, job->task_id, result, NULL);
	if (qs == QS_ERROR && raw && strncmp(last_sqlstate, "22", 2) == 0)
	{
		json_append_string(&wrapped, text, len);
		qs = task_call("complete", SQL_COMPLETE, 3, job->task_id,
					   wrapped.data, NULL);
	}
	sb_free(&wrapped);
	return qs;
}

/*
 * report_failure
 *		Fail a task whose command exited non-zero (EXIT_<code>) or died from a
 *		signal (SIGNAL_<n>), attaching the tail of its stderr.
 */
static QueryStatus
report_failure(Job *job, int status)
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
	qs = task_call("fail", SQL_FAIL, 4, job->task_id, code, data.data);
	sb_free(&data);
	return qs;
}

/*
 * finish_job
 *		Collect the last output of a reaped child and report its outcome.
 *		Precedence: lost lease (say nothing), cancellation (ack it), killed
 *		at shutdown (release), then the exit status.  A report that does not
 *		land counts as lost: the server will sweep the lease.
 */
static void
finish_job(Job *job, int status)
{
	QueryStatus qs;
	long	   *counter;

	/* the child is gone, so whatever it wrote is already in the pipes */
	job_read(job, false);
	job_read(job, true);

	if (job->lost)
	{
		log_msg(LOG_VERBOSE, "dropped task %s (lease lost)", job->task_id);
		stats.lost++;
		return;
	}
	if (job->cancelled)
	{
		qs = task_call("ack_cancel", SQL_ACK_CANCEL, 2, job->task_id, NULL, NULL);
		counter = &stats.cancelled;
	}
	else if (job->shutdown_kill && WIFSIGNALED(status))
	{
		qs = task_call("release", SQL_RELEASE, 2, job->task_id, NULL, NULL);
		counter = &stats.released;
	}
	else if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
	{
		qs = report_success(job);
		counter = &stats.succeeded;
	}
	else
	{
		qs = report_failure(job, status);
		counter = &stats.failed;
	}
	if (qs == QS_OK)
		(*counter)++;
	else
		stats.lost++;
	log_msg(LOG_VERBOSE, "job %s finished (status 0x%x)%s",
			job->task_id, status, qs == QS_OK ? "" : ", not reported");
}

/*
 * reap_children
 *		Collect every exited child without blocking, report it and free its
 *		slot.  SIGCHLD only wakes the loop; the real work happens here.
 */
static void
reap_children(void)
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

				finish_job(job, status);
				free_job(job);
				jobs[i] = NULL;
				njobs--;
				break;
			}
	}
}

/* ----------------------------------------------------------------
 *		Main loop and command line
 * ----------------------------------------------------------------
 */

/*
 * print_progress
 *		The --progress line: totals plus the rate since the previous line.
 */
static void
print_progress(int64_t now, int64_t *last_time, long *last_finished)
{
	long		finished = FINISHED();
	double		secs = (now - *last_time) / 1000.0;

	fprintf(stderr, "silo-worker: %ld finished (%ld succeeded, %ld failed), "
			"%d in flight, %.1f jobs/s\n", finished, stats.succeeded,
			stats.failed, njobs,
			secs > 0 ? (finished - *last_finished) / secs : 0.0);
	*last_time = now;
	*last_finished = finished;
}

/*
 * may_lease
 *		True when leasing is allowed at all: connected, not shutting down,
 *		a free slot, and --max-jobs not yet covered by finished + running.
 */
static bool
may_lease(bool stopping)
{
	return conn != NULL && !stopping && njobs < opt.concurrency &&
		(opt.max_jobs == 0 || FINISHED() + njobs < opt.max_jobs);
}

/*
 * wait_for_events
 *		Sleep in poll() for at most timeout_ms on the self-pipe, the libpq
 *		socket and every open child pipe, then service what became ready:
 *		notifications, payload writes, output reads.
 */
static void
wait_for_events(int timeout_ms)
{
	static struct pollfd *pfds;
	static Job **pjob;
	static FdKind *pkind;
	int			nfds = 0,
				i;

	if (pfds == NULL)
	{
		pfds = calloc(2 + 3 * opt.concurrency, sizeof(struct pollfd));
		pjob = calloc(2 + 3 * opt.concurrency, sizeof(Job *));
		pkind = calloc(2 + 3 * opt.concurrency, sizeof(FdKind));
		if (pfds == NULL || pjob == NULL || pkind == NULL)
		{
			log_msg(LOG_ERROR, "out of memory");
			exit(1);
		}
	}
#define WATCH(fd_, ev_, job_, kind_) \
	do { pfds[nfds].fd = (fd_); pfds[nfds].events = (ev_); \
		 pfds[nfds].revents = 0; pjob[nfds] = (job_); pkind[nfds++] = (kind_); } while (0)
	WATCH(wake_pipe[0], POLLIN, NULL, FD_WAKE);
	if (conn != NULL && PQsocket(conn) >= 0)
		WATCH(PQsocket(conn), POLLIN, NULL, FD_PQ);
	for (i = 0; i < opt.concurrency; i++)
	{
		if (jobs[i] == NULL)
			continue;
		if (jobs[i]->in_fd >= 0)
			WATCH(jobs[i]->in_fd, POLLOUT, jobs[i], FD_STDIN);
		if (jobs[i]->out_fd >= 0)
			WATCH(jobs[i]->out_fd, POLLIN, jobs[i], FD_STDOUT);
		if (jobs[i]->err_fd >= 0)
			WATCH(jobs[i]->err_fd, POLLIN, jobs[i], FD_STDERR);
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
				if (conn == NULL)
					break;
				if (!PQconsumeInput(conn) || PQstatus(conn) == CONNECTION_BAD)
				{
					log_msg(LOG_WARNING, "%.*s", msglen(PQerrorMessage(conn)),
							PQerrorMessage(conn));
					drop_connection();
				}
				else
					drain_notifies();
				break;
			case FD_STDIN:
				job_write_stdin(pjob[i]);
				break;
			case FD_STDOUT:
				job_read(pjob[i], false);
				break;
			case FD_STDERR:
				job_read(pjob[i], true);
				break;
		}
	}
}

/*
 * run_loop
 *		The event loop.  Each turn reaps children, advances the shutdown
 *		state, checks the exit conditions, sends due heartbeats, leases if
 *		there is room and a reason to, then sleeps in poll() until the next
 *		deadline, a notification, a signal or child I/O.
 */
static void
run_loop(int64_t start)
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
		long		done_before = FINISHED() + stats.lost;

		while (read(wake_pipe[0], drain, sizeof(drain)) > 0)
			;
		reap_children();
		now = now_ms();
		if (FINISHED() + stats.lost != done_before)
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
				if (jobs[i] && !jobs[i]->lost)
				{
					jobs[i]->shutdown_kill = true;
					signal_job(jobs[i], SIGKILL);
				}
		}

		if (njobs > 0)
			last_busy = now;
		else if (stopping)
			break;
		else if (opt.max_jobs > 0 && FINISHED() >= opt.max_jobs)
			break;
		else if (opt.exit_when_idle_ms > 0 &&
				 now - last_busy >= opt.exit_when_idle_ms)
		{
			log_msg(LOG_INFO, "idle for %d ms; exiting", opt.exit_when_idle_ms);
			break;
		}

		if (conn == NULL && !stopping && now >= reconnect_at &&
			!connect_db(false))
			reconnect_at = now + RECONNECT_DELAY_MS;

		heartbeat_jobs(now);
		for (i = 0; i < opt.concurrency; i++)
			if (jobs[i] && jobs[i]->kill_at > 0 && now >= jobs[i]->kill_at)
			{
				signal_job(jobs[i], SIGKILL);
				jobs[i]->kill_at = 0;
			}

		if (may_lease(stopping) &&
			(lease_wanted || notified || now >= next_poll_at))
		{
			if (lease_tasks(now) > 0)
				last_busy = now;
			now = now_ms();
		}

		if (opt.progress && now >= progress_time + 1000)
			print_progress(now, &progress_time, &progress_finished);

		/* work out how long we may sleep */
		drain_notifies();
		wake = now + 1000;
		if (may_lease(stopping))
			wake = (lease_wanted || notified) ? now :
				(next_poll_at < wake ? next_poll_at : wake);
		for (i = 0; i < opt.concurrency; i++)
		{
			if (jobs[i] && !jobs[i]->lost && jobs[i]->next_heartbeat < wake)
				wake = jobs[i]->next_heartbeat;
			if (jobs[i] && jobs[i]->kill_at > 0 && jobs[i]->kill_at < wake)
				wake = jobs[i]->kill_at;
		}
		if (stopping && !killed && grace_end < wake)
			wake = grace_end;
		if (opt.progress && progress_time + 1000 < wake)
			wake = progress_time + 1000;
		if (opt.exit_when_idle_ms > 0 && njobs == 0 &&
			last_busy + opt.exit_when_idle_ms < wake)
			wake = last_busy + opt.exit_when_idle_ms;
		if (conn == NULL && !stopping && reconnect_at < wake)
			wake = reconnect_at;

		wait_for_events(wake > now ? (int) (wake - now) : 0);
	}
}

/*
 * usage
 *		Print the --help text.
 */
static void
usage(void)
{
	printf("silo-worker: run jobs from a silo task group\n\n"
		   "Usage: silo-worker --task-group G [OPTION]...\n\n"
		   "Options:\n"
		   "  -d, --dsn DSN            connection string (default: PG* env)\n"
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
		   "      --max-jobs N         exit after N jobs finished (0 = unlimited)\n"
		   "      --exit-when-idle MS  exit after MS ms without work (0 = never)\n"
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
		   "SIGTERM/SIGINT stop leasing and wait up to --grace-ms for running jobs;\n"
		   "the rest are killed and released.  A second signal ends the wait.\n");
}

/*
 * usage_error
 *		Complain about the command line and exit with status 2.
 */
static void
usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "silo-worker: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry \"silo-worker --help\" for more information.\n");
	exit(2);
}

/*
 * parse_int
 *		Parse a whole-number option value within [min, max], or exit 2.
 */
static long
parse_int(const char *name, const char *value, long min, long max)
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
 * parse_args
 *		Fill opt from the command line and derive the defaults that depend
 *		on other options (batch size, worker id).
 */
static void
parse_args(int argc, char **argv)
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
		{"max-jobs", required_argument, NULL, 'M'},
		{"exit-when-idle", required_argument, NULL, 'I'},
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
				opt.concurrency = (int) parse_int("concurrency", optarg, 1, 100000);
				break;
			case 'b':
				opt.batch = (int) parse_int("batch", optarg, 1, MAX_BATCH);
				break;
			case 'L':
				opt.lease_ms = (int) parse_int("lease-ms", optarg, 100, 3600000);
				break;
			case 'P':
				opt.poll_ms = (int) parse_int("poll-ms", optarg, 1, 3600000);
				break;
			case 'G':
				opt.grace_ms = (int) parse_int("grace-ms", optarg, 0, INT_MAX);
				break;
			case 'e':
				opt.exec_cmd = optarg;
				break;
			case 'M':
				opt.max_jobs = parse_int("max-jobs", optarg, 0, LONG_MAX);
				break;
			case 'I':
				opt.exit_when_idle_ms = (int) parse_int("exit-when-idle", optarg,
														0, INT_MAX);
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
				usage();
				exit(0);
			default:
				fprintf(stderr, "Try \"silo-worker --help\" for more information.\n");
				exit(2);
		}
	}
	if (optind < argc)
		usage_error("unexpected argument \"%s\"", argv[optind]);
	if (opt.task_group == NULL || opt.task_group[0] == '\0')
		usage_error("%s", "--task-group is required");
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

#ifndef SILO_WORKER_SELFTEST
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

	parse_args(argc, argv);

	/* make sure fds 0-2 exist, so pipes never land on them */
	while ((fd = open("/dev/null", O_RDWR)) >= 0 && fd <= 2)
		;
	if (fd > 2)
		close(fd);

	setup_signals();
	jobs = calloc(opt.concurrency, sizeof(Job *));
	if (jobs == NULL)
	{
		log_msg(LOG_ERROR, "out of memory");
		return 1;
	}
	if (!connect_db(true))
		return 1;
	start = now_ms();
	log_msg(LOG_INFO, "worker %s leasing from task group \"%s\" "
			"(concurrency %d, batch %d, %s)", opt.worker_id, opt.task_group,
			opt.concurrency, opt.batch, opt.exec_cmd ? "exec" : "no-op");

	run_loop(start);

	secs = (now_ms() - start) / 1000.0;
	if (stats.lost > 0)
		log_msg(LOG_INFO, "%ld task(s) abandoned after losing their lease",
				stats.lost);
	printf("silo-worker: finished %ld jobs (%ld succeeded, %ld failed, "
		   "%ld cancelled, %ld released) in %.2f s, %.1f jobs/s\n",
		   FINISHED(), stats.succeeded, stats.failed, stats.cancelled,
		   stats.released, secs, secs > 0 ? FINISHED() / secs : 0.0);
	fflush(stdout);
	if (conn != NULL)
		PQfinish(conn);
	return 0;
}
#else							/* SILO_WORKER_SELFTEST */
/*
 * main (self-test)
 *		Check the JSON validator and string escaper against a few cases.
 */
int
main(void)
{
	static const struct
	{
		const char *text;
		bool		valid;
	}			cases[] = {
		{"{}", true}, {" [1, -0.5e+3, \"a\\n\\u00e9\", true, null] ", true},
		{"{\"a\":{\"b\":[]}}", true}, {"\"\\ud83d\\ude00\"", true},
		{"0", true}, {"\"caf\xc3\xa9\"", true}, {"", false}, {"01", false},
		{"[1,]", false}, {"{\"a\" 1}", false}, {"tru", false}, {"1.", false},
		{"\"\\u0000\"", false}, {"\"\\ud800\"", false}, {"\"\\x\"", false},
		{"\"\xc3\"", false}, {"[1] x", false}, {"hello", false}, {"-", false},
		{"\"a\tb\"", false}, {"{\"a\":1,}", false}, {"nul", false},
	};
	StrBuf		sb = {0};
	int			bad = 0;
	size_t		i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (json_is_valid(cases[i].text, strlen(cases[i].text)) != cases[i].valid)
		{
			printf("FAIL: %s\n", cases[i].text);
			bad++;
		}
	json_append_string(&sb, "q\"b\\\n\x01\xff\xc3\xa9", 9);
	if (strcmp(sb.data, "\"q\\\"b\\\\\\n\\u0001\\ufffd\xc3\xa9\"") != 0 ||
		!json_is_valid(sb.data, sb.len))
	{
		printf("FAIL: escape gave %s\n", sb.data);
		bad++;
	}
	printf("%s\n", bad ? "self-test FAILED" : "self-test ok");
	return bad ? 1 : 0;
}
#endif							/* SILO_WORKER_SELFTEST */
