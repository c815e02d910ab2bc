/*-------------------------------------------------------------------------
 *
 * jobs.c
 *	  The job commands (get, result, cancel, restart, expedite, delete) and
 *	  query: a tenant's calls, each sent to the node that owns the tenant's
 *	  shard through route.c.
 *
 * The calls that are silo functions (job_result, cancel, restart,
 * expedite, delete_job) run as plain SQL on the node given: the server
 * checks the tenant's shard before anything else and answers NOT_OWNER
 * (SL020) with the owner, which the router follows.  Reads of views (job
 * get, query) raise no NOT_OWNER -- a node that does not own the shard
 * just has no rows of it -- so they first look the shard up in the node's
 * silo.cluster_info and go to the owner it names, checking again there.
 *
 * tools/siloctl/jobs.c
 *
 *-------------------------------------------------------------------------
 */
#include "siloctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SQL_JOB_GET \
	"SELECT tenant, id, task_group, status, priority, enqueued_at, " \
	"status_changed_at, current_attempt, next_attempt_at, cancelled_at, " \
	"payload, metadata FROM silo.jobs WHERE tenant = $1 AND id = $2"
#define SQL_JOB_ATTEMPTS \
	"SELECT attempt, relative_attempt, status, worker_id, started_at, " \
	"finished_at, error_code, error_data, result FROM silo.attempts " \
	"WHERE tenant = $1 AND job_id = $2 ORDER BY attempt"
#define SQL_JOB_RESULT \
	"SELECT status, result, error_code, error_data, finished_at " \
	"FROM silo.job_result($2, $1)"
#define SQL_JOB_STATUS \
	"SELECT status FROM silo.jobs WHERE tenant = $1 AND id = $2"

/* What one job command does. */
typedef struct JobAction
{
	const char *name;			/* the command word */
	const char *sql;			/* $1 tenant, $2 job id */
	const char *done;			/* the text output's verb */
} JobAction;

static const JobAction actions[] = {
	{"cancel", "SELECT silo.cancel($2, $1)", "cancelled"},
	{"restart", "SELECT silo.restart($2, $1)", "restarted"},
	{"expedite", "SELECT silo.expedite($2, $1)", "expedited"},
	{"delete", "SELECT silo.delete_job($2, $1)", "deleted"},
};

/* The state of one job command across attempts. */
typedef struct JobCall
{
	const char *id;
	const JobAction *action;	/* NULL for get and result */
	Table	   *rows;			/* the main result */
	Table	   *attempts;		/* get: the job's attempts */
	char	   *status;			/* the actions: the job's status after */
} JobCall;

/* The state of one query across attempts. */
typedef struct QueryCall
{
	const char *sql;
	Table	   *rows;
	char	   *command;		/* the command tag */
	int			shard;
	bool		has_rows;
} QueryCall;

/*
 * attempt_error
 *		Record a failed statement in the attempt.
 */
static void
attempt_error(Attempt *a, PGresult *res)
{
	a->status = ATTEMPT_ERROR;
	a->res = res;
}

/*
 * attempt_get
 *		job get, one attempt: the shard must be this node's (by its
 *		cluster_info), then the job's row and attempts.
 */
static void
attempt_get(Route *r, void *arg, Attempt *a)
{
	JobCall    *call = arg;
	const char *params[2] = {r->tenant, call->id};
	PGresult   *res;
	int			shard;

	if (!route_locate(r->conn, r->tenant, a, &shard))
		return;
	res = db_exec(r->conn, SQL_JOB_GET, 2, params);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		attempt_error(a, res);
		return;
	}
	call->rows = table_from_result(res);
	PQclear(res);
	res = db_exec(r->conn, SQL_JOB_ATTEMPTS, 2, params);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		table_free(call->rows);
		call->rows = NULL;
		attempt_error(a, res);
		return;
	}
	call->attempts = table_from_result(res);
	PQclear(res);
	a->status = ATTEMPT_DONE;
}

/*
 * attempt_result
 *		job result, one attempt: silo.job_result.
 */
static void
attempt_result(Route *r, void *arg, Attempt *a)
{
	JobCall    *call = arg;
	const char *params[2] = {r->tenant, call->id};
	PGresult   *res = db_exec(r->conn, SQL_JOB_RESULT, 2, params);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		attempt_error(a, res);
		return;
	}
	call->rows = table_from_result(res);
	PQclear(res);
	a->status = ATTEMPT_DONE;
}

/*
 * attempt_action
 *		cancel / restart / expedite / delete, one attempt: the function,
 *		then (not for delete) the job's status now, for the output.
 */
static void
attempt_action(Route *r, void *arg, Attempt *a)
{
	JobCall    *call = arg;
	const char *params[2] = {r->tenant, call->id};
	PGresult   *res = db_exec(r->conn, call->action->sql, 2, params);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		attempt_error(a, res);
		return;
	}
	call->rows = table_from_result(res);
	PQclear(res);
	a->status = ATTEMPT_DONE;
	if (strcmp(call->action->name, "delete") == 0)
		return;
	res = db_exec(r->conn, SQL_JOB_STATUS, 2, params);
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		call->status = xstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
}

/*
 * job_base_doc
 *		The start of a job command's JSON document.
 */
static JsonValue *
job_base_doc(const JobCall *call, const Route *r)
{
	JsonValue  *doc = jv_object();

	jv_set(doc, "job_id", jv_string(call->id));
	jv_set(doc, "tenant", jv_string(r->tenant));
	return doc;
}

/*
 * job_not_found
 *		Exit 1: no such job (job get, job delete).
 */
static void
job_not_found(const JobCall *call, const Route *r)
{
	char	   *detail = xasprintf("There is no job \"%s\" in tenant \"%s\" on %s.",
								   call->id, r->tenant, r->where);

	fail_full(EXIT_FAILED, NULL, detail, NULL, "job not found");
}

/*
 * print_get
 *		job get's output: the job's row (as a record) and its attempts.
 */
static void
print_get(JobCall *call, Route *r)
{
	if (call->rows->nrows == 0)
		job_not_found(call, r);
	if (opt.json)
	{
		JsonValue  *doc = jv_object();

		jv_set(doc, "job", jv_row(call->rows, 0));
		jv_set(doc, "attempts", jv_rows(call->attempts));
		jv_set(doc, "hops", r->trail);
		r->trail = NULL;
		jv_print(doc);
		return;
	}
	print_record(call->rows, 0);
	if (call->attempts->nrows > 0)
	{
		putchar('\n');
		print_table(call->attempts);
	}
	else
		printf("\n(no attempts yet)\n");
}

/*
 * print_result
 *		job result's output: the outcome as a record.
 */
static void
print_result(JobCall *call, Route *r)
{
	if (opt.json)
	{
		JsonValue  *doc = job_base_doc(call, r);

		for (int c = 0; c < call->rows->ncols; c++)
			jv_set(doc, call->rows->names[c],
				   call->rows->nrows ? jv_cell(call->rows, 0, c) : jv_null());
		jv_set(doc, "hops", r->trail);
		r->trail = NULL;
		jv_print(doc);
		return;
	}
	if (call->rows->nrows > 0)
		print_record(call->rows, 0);
}

/*
 * print_action
 *		cancel / restart / expedite / delete: what was done, and the status.
 */
static void
print_action(JobCall *call, Route *r)
{
	bool		deleted = strcmp(call->action->name, "delete") == 0;

	if (deleted && !(call->rows->nrows == 1 && table_get(call->rows, 0, "delete_job") &&
					 strcmp(table_get(call->rows, 0, "delete_job"), "t") == 0))
		job_not_found(call, r);
	if (opt.json)
	{
		JsonValue  *doc = job_base_doc(call, r);

		jv_set(doc, "action", jv_string(call->action->name));
		if (deleted)
			jv_set(doc, "deleted", jv_bool(true));
		else
			jv_set(doc, "status", jv_string(call->status));
		jv_set(doc, "hops", r->trail);
		r->trail = NULL;
		jv_print(doc);
		return;
	}
	printf("%s job \"%s\" of tenant \"%s\"", call->action->done, call->id, r->tenant);
	if (call->status)
		printf("; its status is now %s", call->status);
	if (r->hops > 0)
		printf(" (on %s)", r->where);
	putchar('\n');
}

/*
 * cmd_job
 *		siloctl job ACTION ID [--tenant T].
 */
int
cmd_job(const char *action, char **args, int nargs)
{
	JobCall		call = {.id = args[0]};
	Route		r;

	(void) nargs;
	if (!utf8_valid(opt.tenant, strlen(opt.tenant)))
		usage_error("the tenant is not valid UTF-8");
	route_begin(&r, opt.tenant);
	if (strcmp(action, "get") == 0)
	{
		route_run(&r, attempt_get, &call);
		print_get(&call, &r);
	}
	else if (strcmp(action, "result") == 0)
	{
		route_run(&r, attempt_result, &call);
		print_result(&call, &r);
	}
	else
	{
		for (size_t i = 0; i < sizeof(actions) / sizeof(actions[0]); i++)
			if (strcmp(actions[i].name, action) == 0)
				call.action = &actions[i];
		if (call.action == NULL)
			usage_error("unknown command \"job %s\"", action);
		route_run(&r, attempt_action, &call);
		print_action(&call, &r);
	}
	table_free(call.rows);
	table_free(call.attempts);
	free(call.status);
	route_end(&r);
	return EXIT_OK;
}

/*
 * rollback
 *		End query's read-only transaction.
 */
static void
rollback(PGconn *conn)
{
	PQclear(PQexec(conn, "ROLLBACK"));
}

/*
 * attempt_query
 *		query, one attempt: BEGIN READ ONLY, the shard must be this node's,
 *		then the statement (alone, $1 = the tenant), then ROLLBACK.
 */
static void
attempt_query(Route *r, void *arg, Attempt *a)
{
	QueryCall  *q = arg;
	const char *params[1] = {r->tenant};
	PGresult   *res = PQexec(r->conn, "BEGIN READ ONLY");
	ExecStatusType st;

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		attempt_error(a, res);
		return;
	}
	PQclear(res);
	if (!route_locate(r->conn, r->tenant, a, &q->shard))
	{
		rollback(r->conn);
		return;
	}
	res = db_exec(r->conn, q->sql, 1, params);
	st = PQresultStatus(res);
	if (st == PGRES_COPY_OUT || st == PGRES_COPY_IN || st == PGRES_COPY_BOTH)
		fail(EXIT_FAILED, "query: COPY is not supported; use SELECT");
	if (!db_ok(res))
	{
		if (!db_conn_lost(r->conn))
			rollback(r->conn);
		attempt_error(a, res);
		return;
	}
	q->has_rows = st == PGRES_TUPLES_OK;
	q->rows = table_from_result(res);
	q->command = xstrdup(PQcmdStatus(res));
	PQclear(res);
	rollback(r->conn);
	a->status = ATTEMPT_DONE;
}

/*
 * cmd_query
 *		siloctl query TENANT SQL.
 */
int
cmd_query(char **args, int nargs)
{
	QueryCall	q = {.sql = args[1], .shard = -1};
	Route		r;

	(void) nargs;
	if (!utf8_valid(args[0], strlen(args[0])))
		usage_error("the tenant is not valid UTF-8");
	route_begin(&r, args[0]);
	route_run(&r, attempt_query, &q);
	if (opt.json)
	{
		JsonValue  *doc = jv_object();
		JsonValue  *cols = jv_array();

		for (int c = 0; c < q.rows->ncols; c++)
			jv_append(cols, jv_string(q.rows->names[c]));
		jv_set(doc, "tenant", jv_string(r.tenant));
		jv_set(doc, "shard", jv_int(q.shard));
		jv_set(doc, "columns", cols);
		jv_set(doc, "rows", jv_rows(q.rows));
		jv_set(doc, "command", jv_string(q.command));
		jv_set(doc, "hops", r.trail);
		r.trail = NULL;
		jv_print(doc);
	}
	else if (q.has_rows)
	{
		print_table(q.rows);
		printf("(%d row%s)\n", q.rows->nrows, q.rows->nrows == 1 ? "" : "s");
	}
	else
		printf("%s\n", q.command);
	table_free(q.rows);
	free(q.command);
	route_end(&r);
	return EXIT_OK;
}
