/* db.c: libpq helpers for silo-loadgen; every failure is fatal. */
#include <stdlib.h>

#include "loadgen.h"

/* db_connect: open a connection or die. */
PGconn *
db_connect(const char *conninfo)
{
	PGconn	   *conn = PQconnectdb(conninfo);

	if (PQstatus(conn) != CONNECTION_OK)
		die("connection failed: %s", PQerrorMessage(conn));
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
