/*-------------------------------------------------------------------------
 *
 * db.c
 *	  The worker's database connection: connecting and LISTENing, running
 *	  queries, notifications, and dropping a broken connection.
 *
 * There is one connection and every query on it is synchronous and short.
 * db_query() sorts each outcome into a QueryStatus, so the rest of the
 * worker never looks at a PGresult's error fields.  When the connection
 * breaks it is dropped at once and the event loop reconnects after
 * RECONNECT_DELAY_MS.
 *
 * tools/worker/db.c
 *
 *-------------------------------------------------------------------------
 */
#include "silo_worker.h"

#include <stdio.h>
#include <string.h>

#define NOTIFY_CHANNEL		"silo_task_ready"

PGconn	   *conn;
int64_t		reconnect_at;		/* when to try again while conn is NULL */
char		last_sqlstate[6];	/* SQLSTATE of the last failed query, or "" */

/*
 * db_connect
 *		Open the connection and LISTEN.  The DSN is expanded last, so it can
 *		override our defaults; an empty DSN means the PG* environment.
 */
bool
db_connect(bool initial)
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
 * db_drop_connection
 *		Forget a broken connection.  Leases of in-flight jobs cannot be kept
 *		alive now, so those children are killed and their tasks left for the
 *		server to sweep; we reconnect after RECONNECT_DELAY_MS.
 */
void
db_drop_connection(void)
{
	int			i,
				n = 0;

	PQfinish(conn);
	conn = NULL;
	reconnect_at = now_ms() + RECONNECT_DELAY_MS;
	for (i = 0; i < opt.concurrency; i++)
		if (jobs[i] && !jobs[i]->lost)
		{
			exec_mark_lost(jobs[i]);
			n++;
		}
	log_msg(LOG_WARNING, "connection lost; abandoned %d running job(s), "
			"reconnecting in %d ms", n, RECONNECT_DELAY_MS);
}

/*
 * db_drain_notifies
 *		Consume queued notifications; one for our task group (or with no
 *		payload) means new work may be due, so lease without waiting.
 */
void
db_drain_notifies(void)
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
 * db_query
 *		Execute one statement with text parameters and classify the result,
 *		so callers only handle success, lost lease, other error, or a dead
 *		connection.  On QS_OK and res != NULL the caller owns *res.
 */
QueryStatus
db_query(const char *what, const char *sql, int nparams,
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
	db_drain_notifies();
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
		db_drop_connection();
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
 * db_task_call
 *		Run a per-task reporting function: params are task id, worker id,
 *		then up to two more (NULL = SQL NULL).
 */
QueryStatus
db_task_call(const char *what, const char *sql, int nparams,
			 const char *task_id, const char *p3, const char *p4)
{
	const char *params[4] = {task_id, opt.worker_id, p3, p4};

	return db_query(what, sql, nparams, params, NULL);
}
