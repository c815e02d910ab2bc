/* db.c: libpq helpers for silo-loadgen; every failure is fatal. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>

#include "loadgen.h"

#define LG_APPNAME "silo-loadgen"

/* ignore_notice: drop NOTICEs ("table does not exist, skipping" and the
 * like); errors still reach the caller. */
static void
ignore_notice(void *arg, const char *message)
{
	(void) arg;
	(void) message;
}

/* db_connect: open a worker connection (application_name silo-loadgen, which
 * db_wait_for_backends looks for) or die. */
PGconn *
db_connect(const char *conninfo)
{
	return db_connect_as(conninfo, LG_APPNAME);
}

/* db_connect_as: open a connection with the given application_name; the
 * conninfo string is expanded first, so the name wins over one in it. */
PGconn *
db_connect_as(const char *conninfo, const char *appname)
{
	const char *const keys[] = {"dbname", "application_name", NULL};
	const char *const values[] = {conninfo, appname, NULL};
	PGconn	   *conn = PQconnectdbParams(keys, values, 1);

	if (PQstatus(conn) != CONNECTION_OK)
		die("connection failed: %s", PQerrorMessage(conn));
	PQsetNoticeProcessor(conn, ignore_notice, NULL);
	return conn;
}

/* db_exec: run a command that returns no rows (or whose rows are ignored). */
void
db_exec(PGconn *conn, const char *sql)
{
	PQclear(db_query(conn, sql));
}

/* db_query: run a statement and return its result; dies on an error. */
PGresult *
db_query(PGconn *conn, const char *sql)
{
	PGresult   *res = PQexec(conn, sql);
	ExecStatusType st = PQresultStatus(res);

	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
		die("query failed: %s\n  %s", PQerrorMessage(conn), sql);
	return res;
}

/* db_scalar_long: the first column of the first row as a long. */
long
db_scalar_long(PGconn *conn, const char *sql)
{
	PGresult   *res = db_query(conn, sql);
	long		v;

	if (PQntuples(res) < 1 || PQgetisnull(res, 0, 0))
		die("expected a value from: %s", sql);
	v = strtol(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return v;
}

/* db_prepare: prepare a named statement (parameter types inferred). */
void
db_prepare(PGconn *conn, const char *name, const char *sql)
{
	PGresult   *res = PQprepare(conn, name, sql, 0, NULL);

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		die("prepare %s failed: %s", name, PQerrorMessage(conn));
	PQclear(res);
}

/* db_exec_prepared: run a prepared statement with text parameters. */
PGresult *
db_exec_prepared(PGconn *conn, const char *name, int nparams,
				 const char *const *params)
{
	PGresult   *res = PQexecPrepared(conn, name, nparams, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(res);

	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
		die("execute %s failed: %s", name, PQerrorMessage(conn));
	return res;
}

/* db_wait_for_backends: wait (at most 5 s) until no other silo-loadgen
 * backend is left: a backend reports its table statistics (dead tuples)
 * when it exits, which happens a little after PQfinish returns. */
void
db_wait_for_backends(PGconn *conn)
{
	double		give_up = now_sec() + 5;

	while (db_scalar_long(conn,
						  "SELECT count(*) FROM pg_stat_activity"
						  " WHERE application_name = '" LG_APPNAME "'"
						  " AND pid <> pg_backend_pid()") > 0)
	{
		if (now_sec() > give_up)
			break;
		sleep_ms(20);
	}
	db_exec(conn, "SELECT pg_stat_clear_snapshot()");
}

/* db_wait_for_wakeup: wait until a notification arrives on conn or poll_ms
 * pass; notifications already buffered end the wait at once. */
void
db_wait_for_wakeup(PGconn *conn, int poll_ms)
{
	PGnotify   *n;
	struct pollfd pfd = {.fd = PQsocket(conn), .events = POLLIN};
	int			got = 0;

	while ((n = PQnotifies(conn)) != NULL)
	{
		PQfreemem(n);
		got = 1;
	}
	if (got)
		return;
	if (poll(&pfd, 1, poll_ms) < 0 && errno != EINTR)
		die("poll failed");
	if (!PQconsumeInput(conn))
		die("connection lost: %s", PQerrorMessage(conn));
	while ((n = PQnotifies(conn)) != NULL)
		PQfreemem(n);
}
