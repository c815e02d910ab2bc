/*-------------------------------------------------------------------------
 *
 * db.c
 *	  The worker's database connections: connecting and LISTENing, running
 *	  queries, notifications, and dropping a broken connection.
 *
 * There is one connection per member (members.c; one in single-node mode)
 * and every query on it is synchronous and short.  db_query() sorts each
 * outcome into a QueryStatus, so the rest of the worker never looks at a
 * PGresult's error fields (except the DETAIL of SL020, kept in
 * last_detail for route.c).  When a connection breaks it is dropped at
 * once, the jobs leased through it are abandoned, and the event loop
 * reconnects after a delay that doubles up to RECONNECT_MAX_MS.
 *
 * A member other than the seed is reached with its advertised conninfo
 * (host, port, dbname, ...) laid over the --dsn, so that user, password
 * and TLS settings come from the worker's own DSN, never from the server.
 *
 * tools/worker/db.c
 *
 *-------------------------------------------------------------------------
 */
#include "silo_worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOTIFY_CHANNEL		"silo_task_ready"
#define RECONNECT_MAX_MS	16000
#define MEMBER_CONNECT_TIMEOUT "10"

char		last_sqlstate[6];	/* SQLSTATE of the last failed query, or "" */
char	   *last_detail;		/* its DETAIL, or NULL */

/*
 * db_open
 *		Open a connection to m.  The seed uses the --dsn, expanded last so it
 *		can override our defaults (an empty DSN means the PG* environment).
 *		Another member gets the --dsn's settings with its advertised
 *		conninfo's settings on top (its host, hostaddr and port only from
 *		there, so that none of --dsn's can point elsewhere), and a connect
 *		timeout unless either sets one.
 */
static PGconn *
db_open(Member *m)
{
	const char *keys[64],
			   *vals[64];
	PQconninfoOption *dsn,
			   *adv,
			   *o,
			   *a;
	char	   *err = NULL;
	int			n = 0;
	bool		timeout = false;
	PGconn	   *c;

	if (m->conninfo == NULL)
	{
		const char *k[] = {"fallback_application_name", "client_encoding",
		"dbname", NULL};
		const char *v[] = {"silo-worker", "UTF8", opt.dsn, NULL};

		return PQconnectdbParams(k, v, 1);
	}
	dsn = PQconninfoParse(opt.dsn, &err);
	if (dsn == NULL)
	{
		PQfreemem(err);
		return NULL;			/* the seed connected with it: cannot happen */
	}
	adv = PQconninfoParse(m->conninfo, &err);
	if (adv == NULL)
	{
		log_msg(LOG_WARNING, "node \"%s\" advertises an unreadable conninfo: "
				"%.*s", member_name(m), err ? msglen(err) : 0, err ? err : "");
		PQfreemem(err);
		PQconninfoFree(dsn);
		return NULL;
	}
	keys[n] = "fallback_application_name";
	vals[n++] = "silo-worker";
	for (o = dsn, a = adv; o->keyword != NULL && n < 62; o++, a++)
	{
		/* both lists hold every keyword libpq knows, in the same order */
		bool		where = strcmp(o->keyword, "host") == 0 ||
			strcmp(o->keyword, "hostaddr") == 0 || strcmp(o->keyword, "port") == 0;
		const char *v = (a->val != NULL && a->val[0] != '\0') ? a->val :
			where ? NULL : o->val;

		if (v == NULL || strcmp(o->keyword, "client_encoding") == 0)
			continue;
		if (strcmp(o->keyword, "connect_timeout") == 0)
			timeout = true;
		keys[n] = o->keyword;
		vals[n++] = v;
	}
	keys[n] = "client_encoding";
	vals[n++] = "UTF8";
	if (!timeout && getenv("PGCONNECT_TIMEOUT") == NULL)
	{
		keys[n] = "connect_timeout";
		vals[n++] = MEMBER_CONNECT_TIMEOUT;
	}
	keys[n] = vals[n] = NULL;
	c = PQconnectdbParams(keys, vals, 0);
	PQconninfoFree(dsn);
	PQconninfoFree(adv);
	return c;
}

/*
 * db_connect
 *		Open m's connection and LISTEN.  A failure leaves m disconnected
 *		with its next attempt scheduled (the delay doubles each time).
 */
bool
db_connect(Member *m, bool initial)
{
	PGconn	   *c = db_open(m);
	PGresult   *res;
	LogLevel	level = initial ? LOG_ERROR : LOG_WARNING;

	m->reconnect_at = now_ms() + m->backoff_ms;
	m->backoff_ms = m->backoff_ms * 2 > RECONNECT_MAX_MS ?
		RECONNECT_MAX_MS : m->backoff_ms * 2;
	if (c == NULL || PQstatus(c) != CONNECTION_OK)
	{
		const char *msg = c ? PQerrorMessage(c) : "out of memory";

		log_msg(level, "could not connect to %s: %.*s", member_name(m),
				msglen(msg), msg);
		PQfinish(c);
		return false;
	}
	res = PQexec(c, "LISTEN " NOTIFY_CHANNEL);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		log_msg(level, "LISTEN failed on %s: %.*s", member_name(m),
				msglen(PQerrorMessage(c)), PQerrorMessage(c));
		PQclear(res);
		PQfinish(c);
		return false;
	}
	PQclear(res);
	m->conn = c;
	m->backoff_ms = RECONNECT_DELAY_MS;
	m->lease_wanted = true;		/* look for work right away */
	if (!initial)
		log_msg(LOG_INFO, "connected to %s", member_name(m));
	return true;
}

/*
 * db_drop_connection
 *		Forget m's broken connection.  The leases of in-flight jobs leased
 *		through it cannot be kept alive now, so those children are killed
 *		and their tasks left for the server to sweep; we reconnect later,
 *		and in cluster mode read the shard map again soon.
 */
void
db_drop_connection(Member *m)
{
	int			i,
				n = 0;

	PQfinish(m->conn);
	m->conn = NULL;
	m->reconnect_at = now_ms() + m->backoff_ms;
	for (i = 0; i < opt.concurrency; i++)
		if (jobs[i] && jobs[i]->member == m && !jobs[i]->lost)
		{
			exec_mark_lost(jobs[i]);
			n++;
		}
	if (cluster_mode)
		members_refresh_at = now_ms();
	log_msg(LOG_WARNING, "connection to %s lost; abandoned %d running job(s), "
			"reconnecting in %d ms", member_name(m), n, m->backoff_ms);
}

/*
 * db_drain_notifies
 *		Consume m's queued notifications; one for our task group (or with no
 *		payload) means new work may be due there, so lease without waiting.
 */
void
db_drain_notifies(Member *m)
{
	PGnotify   *n;

	while (m->conn && (n = PQnotifies(m->conn)) != NULL)
	{
		if (n->extra == NULL || n->extra[0] == '\0' ||
			strcmp(n->extra, opt.task_group) == 0)
			m->notified = true;
		PQfreemem(n);
	}
}

/*
 * db_query
 *		Execute one statement on m with text parameters and classify the
 *		result, so callers only handle success, lost lease, not owner,
 *		unavailable, other error, or a dead connection.  On QS_OK and
 *		res != NULL the caller owns *res.
 */
QueryStatus
db_query(Member *m, const char *what, const char *sql, int nparams,
		 const char *const *params, PGresult **res)
{
	PGresult   *r;
	const char *state,
			   *msg,
			   *detail;
	ExecStatusType st;
	QueryStatus qs;

	last_sqlstate[0] = '\0';
	free(last_detail);
	last_detail = NULL;
	if (m == NULL || m->conn == NULL)
		return QS_CONN_LOST;
	r = PQexecParams(m->conn, sql, nparams, NULL, params, NULL, NULL, 0);
	st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
	db_drain_notifies(m);
	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
	{
		if (res)
			*res = r;
		else
			PQclear(r);
		return QS_OK;
	}
	if (PQstatus(m->conn) == CONNECTION_BAD)
	{
		log_msg(LOG_WARNING, "%s on %s: %.*s", what, member_name(m),
				msglen(PQerrorMessage(m->conn)), PQerrorMessage(m->conn));
		PQclear(r);
		db_drop_connection(m);
		return QS_CONN_LOST;
	}
	state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	msg = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	detail = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL) : NULL;
	if (msg == NULL)
		msg = PQerrorMessage(m->conn);
	snprintf(last_sqlstate, sizeof(last_sqlstate), "%s", state ? state : "");
	last_detail = xstrdup(detail);
	if (strcmp(last_sqlstate, "SL001") == 0 || strcmp(last_sqlstate, "SL002") == 0)
		qs = QS_LEASE_LOST;
	else if (strcmp(last_sqlstate, "SL020") == 0)
		qs = QS_NOT_OWNER;
	else if (strcmp(last_sqlstate, "SL021") == 0)
		qs = QS_UNAVAILABLE;
	else
	{
		log_msg(LOG_WARNING, "%s failed on %s: %.*s (SQLSTATE %s)", what,
				member_name(m), msglen(msg), msg, last_sqlstate);
		PQclear(r);
		return QS_ERROR;
	}
	/* expected answers: the callers decide what they mean */
	log_msg(LOG_VERBOSE, "%s on %s: %.*s (SQLSTATE %s)", what, member_name(m),
			msglen(msg), msg, last_sqlstate);
	PQclear(r);
	return qs;
}

/*
 * db_task_call
 *		Run a per-task function on m: params are task id, worker id, up to
 *		two more (nparams counts these; NULL = SQL NULL), then the task's
 *		tenant.  On QS_OK and res != NULL the caller owns *res.
 */
QueryStatus
db_task_call(Member *m, const char *what, const char *sql, int nparams,
			 const char *task_id, const char *p3, const char *p4,
			 const char *tenant, PGresult **res)
{
	const char *params[5] = {task_id, opt.worker_id, p3, p4, NULL};

	params[nparams] = tenant;
	return db_query(m, what, sql, nparams + 1, params, res);
}
