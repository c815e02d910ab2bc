/*-------------------------------------------------------------------------
 *
 * silo_worker.h
 *	  Private declarations shared by the files of the reference worker.
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
 * "/bin/sh -c CMD" with the payload on stdin; opt_usage() in main.c
 * describes the contract.
 *
 * silo.lease() also hands out refresh tasks of floating concurrency limits
 * (kind 'refresh').  With --refresh-exec CMD each one runs "/bin/sh -c CMD"
 * through the same child machinery, and the integer it prints becomes the
 * key's new max (silo.report_refresh()); a failure, bad output or a run
 * past --refresh-timeout-ms is reported with silo.fail_refresh(), and so is
 * a refresh killed at shutdown (a refresh cannot be released).  Without
 * --refresh-exec every refresh is answered at once with the key's current
 * max, which keeps the limit where it is and the refresh cycle going.
 *
 * Everything happens in one thread.  A poll() loop watches the libpq
 * sockets (for notifications), a self-pipe written by the signal handlers,
 * and the stdin/stdout/stderr pipes of the children.  All queries are
 * synchronous, which is fine because every one of them is short.
 *
 * Cluster mode (docs/cluster.md, "silo-worker in cluster mode") is
 * automatic when the node of --dsn is in cluster mode, unless --no-cluster
 * is given: the worker then has one connection per owner in that node's
 * silo.cluster_info (members.c), leases from each in turn, and reads the
 * map again every few seconds.  Every heartbeat and report names the
 * task's tenant and goes to the node the task was leased from; when the
 * task's shard has moved, that node answers SL020 and route.c sends the
 * call to the owner its hint names.  In single-node mode there is one
 * member, the node of --dsn, and the worker behaves as it always did.
 *
 * Module map (each file owns the globals declared under its name):
 *	  main.c	command line, startup and the final summary
 *	  loop.c	signals, the poll() loop and shutdown
 *	  lease.c	leasing, the no-op handler, heartbeats
 *	  exec.c	child processes of --exec: pipes, outcomes, reaping
 *	  refresh.c	refresh tasks of floating limits: answers and outcomes
 *	  members.c	cluster mode: the members, discovery, following hints
 *	  route.c	a report or heartbeat sent where its task's lease is
 *	  db.c		the libpq connections, queries, reconnecting
 *	  json.c	JSON validator, string escaper, UTF-8 cleaning (self-test)
 *	  util.c	clock, logging, string buffers
 *
 * Only libpq and POSIX are needed; "make" builds tools/silo-worker, or by
 * hand, in this directory:
 *	  cc -std=gnu11 -I`pg_config --includedir` *.c -lpq
 * Building with -DSILO_WORKER_SELFTEST replaces main() by a self-test of the
 * JSON helpers.
 *
 * This header must be the first one every file includes, because it asks
 * for the GNU extensions (pipe2) before any system header is read.
 *
 * tools/worker/silo_worker.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_WORKER_H
#define SILO_WORKER_H

#define _GNU_SOURCE

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <libpq-fe.h>

#define STDOUT_CAP			(1024 * 1024)	/* stdout kept per job */
#define STDERR_TAIL			4096	/* trailing stderr bytes kept per job */
#define RECONNECT_DELAY_MS	1000
#define REFRESH_ERROR_MAX	1024	/* characters silo.fail_refresh() takes */

/*
 * Every parameter is sent as text; the casts pick the function signature.
 * The heartbeat and every report pass the leased task's tenant as their
 * last parameter, so that in cluster mode a node the task's shard has
 * moved away from answers SL020 naming the new owner (docs/api.md).
 * silo.complete_many takes no tenant: it skips a task whose lease is not
 * on the node, and the worker reports that one alone (lease.c).
 */
#define SQL_LEASE \
	"SELECT task_id, kind, tenant, job_id, attempt, relative_attempt, " \
	"is_last_attempt, task_group, payload, queue_key, " \
	"current_max_concurrency, refresh_metadata " \
	"FROM silo.lease($1::text, $2::text, $3::int, $4::int)"
#define SQL_HEARTBEAT \
	"SELECT silo.heartbeat($1::uuid, $2::text, $3::int, $4::text)"
#define SQL_HEARTBEAT_MANY \
	"SELECT t.id::text, silo.heartbeat(t.id, $1::text, $3::int, t.tenant) " \
	"FROM unnest($2::uuid[], $4::text[]) AS t(id, tenant)"
#define SQL_COMPLETE \
	"SELECT silo.complete($1::uuid, $2::text, $3::jsonb, $4::text)"
#define SQL_COMPLETE_MANY \
	"SELECT t::text FROM silo.complete_many($2::uuid[], $1::text) AS t"
#define SQL_FAIL \
	"SELECT silo.fail($1::uuid, $2::text, $3::text, $4::jsonb, $5::text)"
#define SQL_ACK_CANCEL "SELECT silo.ack_cancel($1::uuid, $2::text, $3::text)"
#define SQL_RELEASE "SELECT silo.release($1::uuid, $2::text, $3::text)"
#define SQL_REPORT_REFRESH \
	"SELECT silo.report_refresh($1::uuid, $2::text, $3::int, $4::text)"
#define SQL_FAIL_REFRESH \
	"SELECT silo.fail_refresh($1::uuid, $2::text, $3::text, $4::text)"

/* The shard map's owners, and the node's own id and mode (members.c). */
#define SQL_NODE_INFO "SELECT node_id, mode FROM silo.node_info"
#define SQL_OWNERS \
	"SELECT DISTINCT owner_node_id, owner_conninfo, is_local " \
	"FROM silo.cluster_info WHERE owner_node_id IS NOT NULL " \
	"ORDER BY owner_node_id"

/* Column numbers in the result of SQL_LEASE. */
enum
{
	COL_TASK_ID, COL_KIND, COL_TENANT, COL_JOB_ID, COL_ATTEMPT,
	COL_REL_ATTEMPT, COL_IS_LAST, COL_TASK_GROUP, COL_PAYLOAD,
	COL_QUEUE_KEY, COL_CURRENT_MAX, COL_REFRESH_METADATA
};

/* Whether row of a SQL_LEASE result is a floating-limit refresh task. */
#define ROW_IS_REFRESH(res, row) \
	(strcmp(PQgetvalue((res), (row), COL_KIND), "refresh") == 0)

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
	QS_NOT_OWNER,				/* SL020: the tenant's shard is elsewhere */
	QS_UNAVAILABLE,				/* SL021: the shard cannot be served now */
	QS_ERROR,					/* other SQL error; the connection is fine */
	QS_CONN_LOST,				/* the connection is gone and was dropped */
	QS_RETRY_LATER				/* SL021 or SL020 without owner: a job's report
								 * is sent again from the loop at report_at */
} QueryStatus;

/*
 * A node the worker talks to.  In single-node mode there is one, the node
 * of --dsn (the seed).  In cluster mode every owner named by the shard
 * map is one (members.c); a member is never freed, so jobs may point at
 * it: one that leaves the map is only marked unlisted and disconnected
 * once no job reports to it.
 */
typedef struct Member
{
	char	   *node_id;		/* silo.node_id, NULL until known */
	char	   *conninfo;		/* advertised conninfo; NULL: the seed (--dsn) */
	PGconn	   *conn;			/* NULL while disconnected */
	int64_t		reconnect_at;	/* next attempt while conn is NULL */
	int			backoff_ms;		/* delay after the next failed attempt */
	bool		listed;			/* lease from it: the seed, or a map owner */
	bool		lease_wanted;	/* last lease came back full: lease again */
	bool		notified;		/* a NOTIFY for our group arrived */
	int64_t		next_poll_at;	/* fallback lease time when not woken */
} Member;

/*
 * One task being run by a child process: a job (--exec) or a refresh task
 * (--refresh-exec).
 */
typedef struct Job
{
	Member	   *member;			/* the node that holds the lease now */
	int64_t		lease_until;	/* the lease lasts at least until then */
	char	   *task_id;
	bool		is_refresh;		/* a floating-limit refresh, not a job */
	char	   *job_id;
	char	   *tenant;
	char	   *kind;
	char	   *task_group;
	char	   *attempt;
	char	   *relative_attempt;
	bool		is_last_attempt;
	char	   *queue_key;		/* refresh tasks: the floating key, */
	char	   *current_max;	/* its max now, */
	char	   *refresh_metadata;	/* and its metadata (JSON) */
	char	   *input;			/* payload (or metadata) plus newline */
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
	int64_t		timeout_at;		/* SIGKILL a refresh then; 0 = never */
	bool		timed_out;		/* killed at timeout_at */
	bool		cancelled;		/* a heartbeat reported a cancellation */
	bool		lost;			/* lease lost: kill the child, report nothing */
	bool		shutdown_kill;	/* killed when the grace period ran out */
	bool		in_round;		/* part of the current heartbeat round */
	/* a command that ended: its report, possibly waiting for its shard */
	char		report;			/* the report chosen (exec.c), or '\0' */
	int			exit_status;	/* the command's wait status */
	bool		defer_reports;	/* SL021 gives QS_RETRY_LATER, no wait */
	int64_t		report_at;		/* send the report again then; 0 = not waiting */
	int			report_delay;	/* the wait after the next SL021 (ms) */
} Job;

/* The command line, after defaults are applied. */
typedef struct WorkerOptions
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
	const char *refresh_exec_cmd;
	int			refresh_timeout_ms;
	long		max_jobs;
	int			exit_when_idle_ms;
	bool		progress;
	bool		quiet;
	bool		verbose;
	bool		no_cluster;		/* --no-cluster: only the node of --dsn */
} WorkerOptions;

/*
 * Outcome counters for --progress and the summary line.  succeeded, failed
 * and cancelled count jobs this worker ended; an attempt that failed with a
 * retry to come (is_last_attempt false) ended no job and counts in retried.
 * The worker knows only what it was told: a job whose cancel arrived after
 * its last heartbeat ends Cancelled on silo.fail() but counts as failed or
 * retried here.
 */
typedef struct WorkerStats
{
	long		succeeded;		/* jobs ended Succeeded */
	long		failed;			/* jobs ended Failed: their last attempt */
	long		cancelled;		/* jobs ended Cancelled (ack_cancel) */
	long		after_retries;	/* ... of those, ended by a retry */
	long		retried;		/* failed attempts with a retry to come */
	long		released;		/* tasks handed back (release): no attempt */
	long		lost;			/* leases lost or reports that did not land */
	long		refreshed;		/* refresh tasks answered: report_refresh */
	long		refresh_failed; /* ... and fail_refresh */
	long		not_owner;		/* SL020 hints followed */
} WorkerStats;

/* Jobs this worker ended. */
#define JOBS_ENDED() (stats.succeeded + stats.failed + stats.cancelled)

/*
 * Job tasks reported (jobs ended, retried attempts, releases): what
 * --max-jobs counts; refresh tasks are not jobs (--max-jobs ignores them).
 */
#define TASKS_DONE() (JOBS_ENDED() + stats.retried + stats.released)
#define REFRESHES() (stats.refreshed + stats.refresh_failed)

/* main.c */
extern WorkerOptions opt;
extern WorkerStats stats;

/* loop.c */
extern void loop_setup_signals(void);
extern void loop_run(int64_t start);

/* lease.c */
extern int	lease_tasks(Member *m, int64_t now);
extern void lease_heartbeat_jobs(int64_t now);

/* exec.c */
extern Job **jobs;				/* opt.concurrency slots, NULL when free */
extern int	njobs;
extern void exec_signal_job(Job *job, int signo);
extern void exec_mark_lost(Job *job);
extern void exec_spawn_job(Member *m, PGresult *res, int row, int64_t now);
extern void exec_read(Job *job, bool is_stderr);
extern void exec_write_stdin(Job *job);
extern void exec_reap_children(void);
extern void exec_retry_reports(int64_t now);

/* refresh.c */
extern void refresh_handle_row(Member *m, PGresult *res, int row,
							   int64_t now);
extern void refresh_spawn_failed(Job *job, const char *error);
extern QueryStatus refresh_finish(Job *job, int status, long **counter);

/* db.c */
extern char last_sqlstate[6];
extern char *last_detail;
extern bool db_connect(Member *m, bool initial);
extern void db_drop_connection(Member *m);
extern void db_drain_notifies(Member *m);
extern QueryStatus db_query(Member *m, const char *what, const char *sql,
							int nparams, const char *const *params,
							PGresult **res);
extern QueryStatus db_task_call(Member *m, const char *what, const char *sql,
								int nparams, const char *task_id,
								const char *p3, const char *p4,
								const char *tenant, PGresult **res);

/* members.c */
extern Member **members;
extern int	nmembers;
extern bool cluster_mode;
extern int64_t members_refresh_at;
extern bool members_start(void);
extern void members_refresh(int64_t now);
extern bool members_any_connected(void);
extern bool members_in_use(const Member *m);
extern const char *member_name(const Member *m);
extern void members_close_all(void);
extern Member *members_follow_hint(const char *detail);

/* route.c */
extern QueryStatus route_task_call(Member **mp, const char *what,
								   const char *sql, int nparams,
								   const char *task_id, const char *p3,
								   const char *p4, const char *tenant,
								   int64_t deadline, PGresult **res);
extern QueryStatus route_job_call(Job *job, const char *what, const char *sql,
								  int nparams, const char *p3, const char *p4);

/* json.c */
extern void json_append_string(StrBuf *sb, const char *text, size_t len);
extern bool json_is_valid(const char *text, size_t len);
extern void utf8_append_clean(StrBuf *sb, const char *text, size_t len);
extern size_t utf8_chars(const char *s);
extern const char *utf8_skip_chars(const char *s, size_t n);
extern bool json_flat_get(const char *text, const char *key, char **value);

/* util.c */
extern int64_t now_ms(void);
extern void log_msg(LogLevel level, const char *fmt,...)
			__attribute__((format(printf, 2, 3)));
extern int	msglen(const char *msg);
extern char *xstrdup(const char *s);
extern void sb_append(StrBuf *sb, const char *s, size_t n);
extern void sb_puts(StrBuf *sb, const char *s);
extern void sb_free(StrBuf *sb);

#endif							/* SILO_WORKER_H */
