/*-------------------------------------------------------------------------
 *
 * move_tail.c
 *	  The session in which each side of a move sums the shard's rows
 *	  before the pause, so that the pause sums only the rows that changed
 *	  since (silo.move_tail_setsums, src/cluster/tail.c).
 *
 * The call runs for as long as the move's last phases: it sums the
 * shard, says so with a NOTICE (TAIL_READY), then waits until
 * silo.shard_state says that the pause has ended for this side and
 * returns the setsums (TAIL_DONE).  It gets a libpq connection of its
 * own, because the moves' connection (moves_sql.c) must stay free for
 * the pause's other statements meanwhile; the loop polls it without
 * blocking.
 *
 * It is an optimisation only: any failure (no connection, no slot free,
 * an error of the call, a coordinator restart, which loses the session)
 * is TAIL_FAILED or TAIL_NONE, and the side sums the whole shard during
 * the pause as before.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_coordinator.h"

#include "libpq-fe.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

/* how long the source waits for its sum before it pauses without it */
#define TAIL_READY_LIMIT_MS	(150 * 1000)

/* the text of the NOTICE that says the sum before the pause is done */
#define TAIL_READY_TEXT		"are summed up to the tail"

/*
 * tail_notice: libpq's notice receiver for a tail session: the NOTICE of
 * a finished sum makes the run TAIL_READY.
 */
static void
tail_notice(void *arg, const PGresult *res)
{
	CoordMoveRun *run = (CoordMoveRun *) arg;
	const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

	if (run->tail_state == TAIL_SUMMING && msg != NULL && strstr(msg, TAIL_READY_TEXT) != NULL)
		run->tail_state = TAIL_READY;
}

/*
 * tail_close: end the session (cancelling a call still running).
 */
static void
tail_close(CoordMoveRun *run)
{
	PGconn	   *conn = (PGconn *) run->tail_conn;

	if (conn == NULL)
		return;
	if (PQtransactionStatus(conn) == PQTRANS_ACTIVE)
	{
		PGcancel   *cancel = PQgetCancel(conn);
		char		errbuf[256];

		if (cancel != NULL)
		{
			(void) PQcancel(cancel, errbuf, sizeof(errbuf));
			PQfreeCancel(cancel);
		}
	}
	PQfinish(conn);
	run->tail_conn = NULL;
}

/*
 * tail_fail: give the tail up for this move (logged): the side sums the
 * whole shard in the pause.
 */
static void
tail_fail(CoordMoveRun *run, int shard, const char *why)
{
	ereport(LOG,
			(errmsg("silo coordinator: shard %d: the pause sums the whole shard: %s", shard, why)));
	tail_close(run);
	run->tail_state = TAIL_FAILED;
}

/*
 * coord_tail_start: start the tail of shard's current move (once per
 * move), decoding publication and finishing when this node's
 * silo.shard_state row says finish_state with a final LSN.
 */
void
coord_tail_start(CoordState *cs, int shard, const char *publication, const char *finish_state)
{
	CoordMove  *m = &cs->moves[shard];
	CoordMoveRun *run = &cs->runs[shard];
	PGconn	   *conn;
	char		lo[32];
	char		hi[32];

	if (run->tail_move_id == m->create_revision)
		return;					/* started (or failed) once for this move */
	coord_tail_stop(cs, shard);
	run->tail_move_id = m->create_revision;
	run->tail_lsn_sent = false;
	run->tail_started_us = silo_monotonic_us();
	conn = PQconnectdb(coord_sql_conninfo("silo coordinator tail"));
	run->tail_conn = conn;
	if (PQstatus(conn) != CONNECTION_OK)
	{
		tail_fail(run, shard, psprintf("cannot connect: %s", PQerrorMessage(conn)));
		return;
	}
	PQsetNoticeReceiver(conn, tail_notice, run);
	coord_move_bounds(cs, shard, lo, hi);
	run->tail_state = TAIL_SUMMING;
	if (!PQsendQuery(conn, psprintf("SELECT silo.move_tail_setsums(%d, %lld, %s, %s, %s, %s, %d)",
									shard, (long long) m->create_revision, lo, hi,
									quote_literal_cstr(publication),
									quote_literal_cstr(finish_state),
									silo_move_pause_limit_ms + 2 * TAIL_READY_LIMIT_MS +
									5 * 60 * 1000)) ||
		PQsetnonblocking(conn, 1) != 0)
		tail_fail(run, shard, psprintf("cannot send the call: %s", PQerrorMessage(conn)));
}

/*
 * coord_tail_fail: give the tail of shard's current move up before it
 * started (logged): that side sums the whole shard in the pause.
 */
void
coord_tail_fail(CoordState *cs, int shard, const char *why)
{
	CoordMoveRun *run = &cs->runs[shard];

	coord_tail_stop(cs, shard);
	run->tail_move_id = cs->moves[shard].create_revision;
	tail_fail(run, shard, why);
}

/*
 * coord_tail_poll: read what the session sent, without blocking: the
 * NOTICE (TAIL_READY), the result (TAIL_DONE) or an error (TAIL_FAILED).
 * The source gives the sum up when it is not done within
 * TAIL_READY_LIMIT_MS, rather than keep the move from pausing.
 */
void
coord_tail_poll(CoordState *cs, int shard)
{
	CoordMoveRun *run = &cs->runs[shard];
	PGconn	   *conn = (PGconn *) run->tail_conn;

	if (conn == NULL || (run->tail_state != TAIL_SUMMING && run->tail_state != TAIL_READY))
		return;
	if (!PQconsumeInput(conn))
	{
		tail_fail(run, shard, psprintf("the session failed: %s", PQerrorMessage(conn)));
		return;
	}
	while (!PQisBusy(conn))
	{
		PGresult   *res = PQgetResult(conn);

		if (res == NULL)
		{
			tail_close(run);
			if (run->tail_state != TAIL_DONE)
				run->tail_state = TAIL_FAILED;
			return;
		}
		if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
			!PQgetisnull(res, 0, 0))
		{
			run->tail_result = MemoryContextStrdup(cs->cxt, PQgetvalue(res, 0, 0));
			run->tail_state = TAIL_DONE;
		}
		else
		{
			char	   *why = pstrdup(PQresultErrorMessage(res));

			PQclear(res);
			tail_fail(run, shard, why);
			return;
		}
		PQclear(res);
	}
	if (run->tail_state == TAIL_SUMMING &&
		silo_monotonic_us() - run->tail_started_us > (uint64) TAIL_READY_LIMIT_MS * 1000)
		tail_fail(run, shard, psprintf("the sum before the pause took more than %d s",
									   TAIL_READY_LIMIT_MS / 1000));
}

/*
 * coord_tail_stop: end shard's tail session and forget its state (the
 * move is over, gave up, or another one began).
 */
void
coord_tail_stop(CoordState *cs, int shard)
{
	CoordMoveRun *run = &cs->runs[shard];

	tail_close(run);
	run->tail_state = TAIL_NONE;
	if (run->tail_result)
		pfree(run->tail_result);
	run->tail_result = NULL;
}
