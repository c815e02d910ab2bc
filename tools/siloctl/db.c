/*-------------------------------------------------------------------------
 *
 * db.c
 *	  siloctl's libpq side: connecting to the node of --dsn or to a node a
 *	  NOT_OWNER hint names, running statements, and reporting their errors.
 *
 * A hint's conninfo says where the owner is ("host=10.0.0.2 port=5432
 * dbname=app"); it must hold no secret, so who to be and how (user,
 * password, sslmode, ...) come from --dsn.  The connection to a hinted
 * node therefore takes every setting of --dsn except its location (host,
 * hostaddr, port), then every setting of the hint over those.  Settings
 * neither gives come from the PG* environment and ~/.pgpass, as usual.
 *
 * Every connection uses client_encoding UTF8 (tenants are hashed as UTF-8
 * bytes here, so the server must see the same bytes) and a connect
 * timeout of 10 s unless --dsn or PGCONNECT_TIMEOUT sets one: a hint that
 * names an unreachable host must not hang siloctl.
 *
 * Parameters are sent as text with their type given (text), so a
 * statement may leave a parameter unused.
 *
 * tools/siloctl/db.c
 *
 *-------------------------------------------------------------------------
 */
#include "siloctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXTOID 25
#define MAX_PARAMS 8

/* A growing list of connection keywords and values. */
typedef struct ConnParams
{
	const char *kw[128];
	const char *val[128];
	int			n;
} ConnParams;

/*
 * params_set
 *		Set keyword to value, replacing an earlier value of it.
 */
static void
params_set(ConnParams *p, const char *kw, const char *val)
{
	for (int i = 0; i < p->n; i++)
	{
		if (strcmp(p->kw[i], kw) == 0)
		{
			p->val[i] = val;
			return;
		}
	}
	if (p->n < 127)
	{
		p->kw[p->n] = kw;
		p->val[p->n] = val;
		p->n++;
	}
}

/*
 * params_has
 *		Whether keyword has been set.
 */
static bool
params_has(const ConnParams *p, const char *kw)
{
	for (int i = 0; i < p->n; i++)
		if (strcmp(p->kw[i], kw) == 0)
			return true;
	return false;
}

/*
 * is_location
 *		Whether a connection keyword says where the server is (taken from a
 *		hint, never from --dsn, when following one).
 */
static bool
is_location(const char *kw)
{
	return strcmp(kw, "host") == 0 || strcmp(kw, "hostaddr") == 0 ||
		strcmp(kw, "port") == 0;
}

/*
 * trim_message
 *		A libpq message without its trailing newline (a copy).
 */
static char *
trim_message(const char *msg)
{
	char	   *s = xstrdup(msg ? msg : "unknown error");
	size_t		len = strlen(s);

	while (len > 0 && (s[len - 1] == '\n' || s[len - 1] == ' '))
		s[--len] = '\0';
	return s;
}

/*
 * db_check_dsn
 *		Parse --dsn once before anything else: a malformed one is a usage
 *		error, not a connection failure.
 */
void
db_check_dsn(void)
{
	char	   *err = NULL;
	PQconninfoOption *o;

	if (opt.dsn[0] == '\0')
		return;
	o = PQconninfoParse(opt.dsn, &err);
	if (o == NULL)
	{
		char	   *msg = trim_message(err);

		usage_error("invalid --dsn: %s", msg);
	}
	PQconninfoFree(o);
}

/*
 * db_connect
 *		Connect to the node of --dsn (hint_conninfo NULL) or to the node a
 *		hint names (see the file header).  Returns the connection, or NULL
 *		with *errmsg set (malloc'd).
 */
PGconn *
db_connect(const char *hint_conninfo, char **errmsg)
{
	ConnParams	p = {.n = 0};
	PQconninfoOption *base = NULL;
	PQconninfoOption *over = NULL;
	char	   *err = NULL;
	PGconn	   *conn;

	*errmsg = NULL;
	if (opt.dsn[0] != '\0')
	{
		base = PQconninfoParse(opt.dsn, &err);
		if (base == NULL)
		{
			*errmsg = xasprintf("invalid --dsn: %s", err ? err : "out of memory");
			PQfreemem(err);
			return NULL;
		}
	}
	if (hint_conninfo != NULL)
	{
		over = PQconninfoParse(hint_conninfo, &err);
		if (over == NULL)
		{
			char	   *msg = trim_message(err);

			*errmsg = xasprintf("unreadable conninfo \"%s\": %s", hint_conninfo, msg);
			free(msg);
			PQfreemem(err);
			PQconninfoFree(base);
			return NULL;
		}
	}
	for (PQconninfoOption *o = base; o && o->keyword; o++)
	{
		if (o->val == NULL || (over != NULL && is_location(o->keyword)))
			continue;
		params_set(&p, o->keyword, o->val);
	}
	for (PQconninfoOption *o = over; o && o->keyword; o++)
	{
		if (o->val != NULL)
			params_set(&p, o->keyword, o->val);
	}
	params_set(&p, "client_encoding", "UTF8");
	params_set(&p, "fallback_application_name", "siloctl");
	if (!params_has(&p, "connect_timeout") && getenv("PGCONNECT_TIMEOUT") == NULL)
		params_set(&p, "connect_timeout", DEFAULT_CONNECT_TIMEOUT);
	p.kw[p.n] = NULL;
	p.val[p.n] = NULL;

	conn = PQconnectdbParams(p.kw, p.val, 0);
	PQconninfoFree(base);
	PQconninfoFree(over);
	if (conn == NULL || PQstatus(conn) != CONNECTION_OK)
	{
		*errmsg = trim_message(conn ? PQerrorMessage(conn) : "out of memory");
		PQfinish(conn);
		return NULL;
	}
	return conn;
}

/*
 * db_connect_or_exit
 *		The node of --dsn, or exit 3.
 */
PGconn *
db_connect_or_exit(void)
{
	char	   *err;
	PGconn	   *conn;

	db_check_dsn();
	conn = db_connect(NULL, &err);
	if (conn == NULL)
		fail(EXIT_CONNECT, "cannot connect to the node of --dsn: %s", err);
	return conn;
}

/*
 * db_exec
 *		Run one statement with text parameters (extended protocol: a single
 *		statement).  Never NULL.
 */
PGresult *
db_exec(PGconn *conn, const char *sql, int nparams, const char *const *params)
{
	Oid			types[MAX_PARAMS];
	PGresult   *res;

	for (int i = 0; i < nparams && i < MAX_PARAMS; i++)
		types[i] = TEXTOID;
	res = PQexecParams(conn, sql, nparams, nparams ? types : NULL, params, NULL, NULL, 0);
	if (res == NULL)
	{
		fputs("siloctl: out of memory\n", stderr);
		exit(EXIT_FAILED);
	}
	return res;
}

/*
 * db_ok
 *		Whether a statement succeeded (with or without rows).
 */
bool
db_ok(const PGresult *res)
{
	ExecStatusType st = PQresultStatus(res);

	return st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK;
}

/*
 * db_sqlstate
 *		The SQLSTATE of a failed statement, or "" (a client-side failure).
 */
const char *
db_sqlstate(const PGresult *res)
{
	const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	return s ? s : "";
}

/*
 * db_conn_lost
 *		Whether the connection broke (the server went away mid-call).
 */
bool
db_conn_lost(PGconn *conn)
{
	return PQstatus(conn) != CONNECTION_OK;
}

/*
 * db_fail_result
 *		Report a failed statement and exit: 3 when the connection broke, 1
 *		otherwise, with the server's message, SQLSTATE, DETAIL and HINT,
 *		prefixed with what (when not NULL).
 */
void
db_fail_result(PGconn *conn, PGresult *res, const char *what)
{
	const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	char	   *msg;

	if (db_conn_lost(conn))
	{
		msg = trim_message(PQerrorMessage(conn));
		fail(EXIT_CONNECT, "%s: lost the connection: %s", what, msg);
	}
	msg = trim_message(primary ? primary : PQresultErrorMessage(res));
	fail_full(EXIT_FAILED, sqlstate,
			  PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL),
			  PQresultErrorField(res, PG_DIAG_MESSAGE_HINT),
			  "%s%s%s", what ? what : "", what ? ": " : "", msg);
}

/*
 * db_expect_tuples
 *		Exit through db_fail_result unless res holds rows.
 */
void
db_expect_tuples(PGconn *conn, PGresult *res, const char *what)
{
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		db_fail_result(conn, res, what);
}
