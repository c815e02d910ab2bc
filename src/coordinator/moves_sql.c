/*-------------------------------------------------------------------------
 *
 * moves_sql.c
 *	  The connection to this node over which the coordinator runs a
 *	  move's SQL, and the mirror of silo.shard_state.
 *
 * Moves run SQL that cannot run in the coordinator's own backend:
 * CREATE SUBSCRIPTION with a slot and DROP SUBSCRIPTION of one must not
 * run inside a transaction block or a function, and a table's delete, a
 * setsum or the pause's wait may take seconds, while the loop must keep
 * the membership alive every few hundred milliseconds.  So the
 * coordinator opens a libpq connection to its own node and sends one
 * statement at a time asynchronously; the loop polls for the result and
 * hands it to the step that sent it (shard and tag).  An error of a
 * statement is a result like any other; a broken connection is an error
 * of the statement in flight, and the next statement connects again.
 *
 * The session is a superuser's (CREATE SUBSCRIPTION needs one in
 * PostgreSQL 15): the bootstrap superuser over the first Unix-domain
 * socket of the server (or localhost), database silo.database.  Like every
 * superuser context of silo (docs/security.md) it pins search_path and the
 * other settings in the startup packet, whose settings win over ALTER
 * DATABASE/ROLE ... SET, and every name its statements use is qualified:
 * role = none (a database's SET role would make it act as that role),
 * synchronous_commit = on (a shard_state row it reports written must
 * survive a crash: the move goes on from it), standard_conforming_strings
 * = on (a backslash in a literal is a backslash, as silo's SQL expects),
 * and no statement, idle or lock timeout (its statements are bounded by
 * their own arguments, and the loop waits for them without blocking).
 *
 * silo.shard_state is read whole once the connection is up
 * (coord_local_load); afterwards each function that changes a row returns
 * the new state, which the step that called it stores in the mirror.
 * Nothing is served until the mirror is loaded: a source paused before a
 * restart stays paused.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_coordinator.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "lib/stringinfo.h"
#include "libpq-fe.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"

/*
 * sql_quote: a conninfo value in single quotes, with \ and ' escaped.
 */
static char *
sql_quote(const char *v)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '\'');
	for (; *v; v++)
	{
		if (*v == '\'' || *v == '\\')
			appendStringInfoChar(&buf, '\\');
		appendStringInfoChar(&buf, *v);
	}
	appendStringInfoChar(&buf, '\'');
	return buf.data;
}

/*
 * coord_sql_conninfo: how to reach this node as the bootstrap superuser,
 * with the session's settings pinned, as application_name (also used by
 * the tail's session, move_tail.c).  client_connection_check_interval:
 * a statement still running when the coordinator has gone ends within a
 * second; client_min_messages: the tail's NOTICE must arrive.
 */
char *
coord_sql_conninfo(const char *application_name)
{
	const char *dirs = GetConfigOption("unix_socket_directories", false, false);
	char	   *host = pstrdup(dirs && dirs[0] ? dirs : "localhost");
	char	   *comma = strchr(host, ',');
	static char *user = NULL;	/* read once: it needs a transaction */

	if (comma)
		*comma = '\0';
	if (user == NULL)
	{
		StartTransactionCommand();
		user = MemoryContextStrdup(TopMemoryContext, GetUserNameFromId(BOOTSTRAP_SUPERUSERID, false));
		CommitTransactionCommand();
	}
	return psprintf("host=%s port=%d dbname=%s user=%s application_name=%s "
					"connect_timeout=2 options='-c search_path=pg_catalog,pg_temp -c role=none "
					"-c default_transaction_isolation=read\\\\ committed "
					"-c default_transaction_read_only=off -c statement_timeout=0 "
					"-c lock_timeout=0 -c idle_in_transaction_session_timeout=0 "
					"-c idle_session_timeout=0 -c synchronous_commit=on "
					"-c standard_conforming_strings=on -c session_replication_role=origin "
					"-c client_connection_check_interval=1000 -c client_min_messages=notice'",
					sql_quote(host), PostPortNumber,
					sql_quote(GetConfigOption("silo.database", false, false)), sql_quote(user),
					sql_quote(application_name));
}

/*
 * sql_connect: connect when there is no connection (blocking: a local
 * connection, bounded by connect_timeout); false, logged once per run of
 * failures and retried a second later, when it fails.
 */
static bool
sql_connect(CoordState *cs)
{
	CoordSql   *q = &cs->sql;

	if (q->conn != NULL && PQstatus(q->conn) == CONNECTION_OK)
		return true;
	if (silo_monotonic_us() < q->next_connect_us)
		return false;
	coord_sql_close(cs);
	q->conn = PQconnectdb(coord_sql_conninfo("silo coordinator moves"));
	if (PQstatus(q->conn) != CONNECTION_OK)
	{
		if (!q->connect_failing)
			ereport(LOG,
					(errmsg("silo coordinator: cannot connect to this node to run moves: %s",
							PQerrorMessage(q->conn)),
					 errdetail("It connects as the bootstrap superuser over the server's first Unix-domain socket; nothing is served until it can."),
					 errhint("Allow that connection in pg_hba.conf (peer or trust for local connections).")));
		q->connect_failing = true;
		PQfinish(q->conn);
		q->conn = NULL;
		q->next_connect_us = silo_monotonic_us() + 1000 * 1000;
		return false;
	}
	q->connect_failing = false;
	return true;
}

/*
 * coord_sql_close: drop the connection (a statement in flight ends as an
 * error).  A statement in flight is cancelled first: without it the
 * backend would run it to its end after the coordinator has left it (a
 * CREATE SUBSCRIPTION of a move that gave up meanwhile, say).
 */
void
coord_sql_close(CoordState *cs)
{
	CoordSql   *q = &cs->sql;

	if (q->conn != NULL && q->busy)
	{
		PGcancel   *cancel = PQgetCancel(q->conn);
		char		errbuf[256];

		if (cancel != NULL)
		{
			(void) PQcancel(cancel, errbuf, sizeof(errbuf));
			PQfreeCancel(cancel);
		}
	}
	if (q->conn != NULL)
		PQfinish(q->conn);
	q->conn = NULL;
	if (q->busy)
	{
		q->busy = false;
		q->done = true;
		q->ok = false;
		q->value = NULL;
		q->error = MemoryContextStrdup(cs->cxt, "the connection to this node was closed");
	}
}

/*
 * coord_sql_send: send sql for shard's step tag; false when a statement
 * is already in flight (or its result not taken) or there is no
 * connection.
 */
bool
coord_sql_send(CoordState *cs, int shard, int tag, const char *sql)
{
	CoordSql   *q = &cs->sql;

	if (q->busy || q->done || !sql_connect(cs))
		return false;
	if (!PQsendQuery(q->conn, sql))
	{
		ereport(LOG,
				(errmsg("silo coordinator: could not send a move's statement to this node: %s",
						PQerrorMessage(q->conn))));
		coord_sql_close(cs);
		return false;
	}
	q->busy = true;
	q->done = false;
	q->unclaimed = 0;
	q->shard = shard;
	q->tag = tag;
	q->sent_us = silo_monotonic_us();
	ereport(DEBUG1, (errmsg("silo coordinator: shard %d: %s", shard, sql)));
	return true;
}

/*
 * sql_store: keep a finished statement's outcome in the coordinator's
 * context: its first value, or its error message.
 */
static void
sql_store(CoordState *cs, PGresult *res)
{
	CoordSql   *q = &cs->sql;
	ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;

	q->ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
	q->value = NULL;
	q->error = NULL;
	if (q->ok && st == PGRES_TUPLES_OK && PQntuples(res) > 0 && PQnfields(res) > 0 &&
		!PQgetisnull(res, 0, 0))
		q->value = MemoryContextStrdup(cs->cxt, PQgetvalue(res, 0, 0));
	if (!q->ok)
		q->error = MemoryContextStrdup(cs->cxt, res ? PQresultErrorMessage(res)
									   : PQerrorMessage(q->conn));
}

/*
 * coord_sql_poll: read what the node sent for the statement in flight;
 * once its last result is in, it is done and waits to be taken.  A
 * simple query of several statements ends with the result of the last
 * one, or the first error.
 */
void
coord_sql_poll(CoordState *cs)
{
	CoordSql   *q = &cs->sql;

	if (!q->busy)
		return;
	if (!PQconsumeInput(q->conn))
	{
		coord_sql_close(cs);
		return;
	}
	while (!PQisBusy(q->conn))
	{
		PGresult   *res = PQgetResult(q->conn);

		if (res == NULL)
		{
			if (!q->done)
			{
				q->ok = true;
				q->value = q->error = NULL;
			}
			q->busy = false;
			q->done = true;
			q->sent_us = silo_monotonic_us();	/* from now on: when it ended */
			return;
		}
		/* while busy, done says a result is stored: the first error wins */
		if (!q->done || q->ok)
		{
			sql_store(cs, res);
			q->done = true;
		}
		PQclear(res);
	}
}

/*
 * coord_sql_take: the result of shard's statement tag, if it is done:
 * *ok, and *value (the first column of the first row, or the error
 * message; palloc'd in the coordinator's context).  Consumed.
 */
bool
coord_sql_take(CoordState *cs, int shard, int tag, bool *ok, char **value)
{
	CoordSql   *q = &cs->sql;

	if (!q->done || q->busy || q->shard != shard || q->tag != tag)
		return false;
	*ok = q->ok;
	*value = q->ok ? q->value : q->error;
	q->done = false;
	if (!q->ok)
		ereport(LOG,
				(errmsg("silo coordinator: shard %d: a move's statement failed: %s", shard,
						q->error ? q->error : "")));
	return true;
}

/*
 * coord_sql_discard_unclaimed: a result no step took within two seconds
 * of its statement's end belongs to a step the move has left (its phase changed
 * meanwhile): drop it, so the connection serves the next statement.  (A
 * step that waits for its result looks at least every 200 ms.)
 */
void
coord_sql_discard_unclaimed(CoordState *cs)
{
	CoordSql   *q = &cs->sql;

	if (!q->done || q->busy)
		return;
	if (q->unclaimed == 0)
		q->unclaimed = 1;
	else if (silo_monotonic_us() - q->sent_us < 2 * 1000 * 1000)
		return;
	ereport(DEBUG1,
			(errmsg("silo coordinator: shard %d: dropped the result of a move's statement (tag %d) no step waits for",
					q->shard, q->tag)));
	q->done = false;
}

/*
 * coord_sql_pending: whether shard has a statement in flight or a result
 * not taken yet.
 */
bool
coord_sql_pending(CoordState *cs, int shard)
{
	return (cs->sql.busy || cs->sql.done) && cs->sql.shard == shard;
}

/*
 * coord_local_state_of: a state of silo.shard_state by name.
 */
CoordLocalState
coord_local_state_of(const char *name)
{
	static const char *const names[] = {
		"", "owned", "sending", "paused", "released", "receiving", "received", "stale"
	};
	int			i;

	for (i = 1; i < (int) lengthof(names); i++)
		if (name != NULL && strcmp(name, names[i]) == 0)
			return (CoordLocalState) i;
	return LOCAL_NONE;
}

/*
 * coord_local_load: read silo.shard_state whole into the mirror (once,
 * blocking: a small table on a local connection).  false until it could.
 */
bool
coord_local_load(CoordState *cs)
{
	PGresult   *res;
	int			i;

	if (cs->local_loaded)
		return true;
	if (cs->sql.busy || cs->sql.done || !sql_connect(cs))
		return false;
	res = PQexec(cs->sql.conn,
				 "SELECT shard_id, state, move_id FROM silo.shard_state ORDER BY shard_id");
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		ereport(LOG,
				(errmsg("silo coordinator: cannot read silo.shard_state: %s",
						PQresultErrorMessage(res)),
				 errhint("Run ALTER EXTENSION silo UPDATE; nothing is served until it can be read.")));
		PQclear(res);
		cs->sql.next_connect_us = silo_monotonic_us() + 1000 * 1000;
		coord_sql_close(cs);
		return false;
	}
	memset(cs->local, 0, sizeof(CoordLocal) * SILO_MAX_SHARDS);
	for (i = 0; i < PQntuples(res); i++)
	{
		int			s = atoi(PQgetvalue(res, i, 0));

		if (s < 0 || s >= SILO_MAX_SHARDS)
			continue;
		cs->local[s].state = coord_local_state_of(PQgetvalue(res, i, 1));
		cs->local[s].move_id = strtoll(PQgetvalue(res, i, 2), NULL, 10);
	}
	PQclear(res);
	cs->local_loaded = true;
	cs->dirty = true;
	return true;
}
