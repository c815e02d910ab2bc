/*-------------------------------------------------------------------------
 *
 * wait.c
 *	  The work of silo.wait_result: wait inside the server for a job to
 *	  end, holding neither a snapshot nor an xid while asleep.
 *
 * A statement that sleeps keeps its snapshot, and its xmin holds back
 * the clean-up of every table: a thousand sleeping SELECTs would bloat the
 * queue as a long transaction does.  So silo.wait_result is a procedure,
 * and it commits before it sleeps.  It looks at the job: when the job has
 * ended, the look's result is returned.  While it is Pending, it
 * registers the job in the waiters' table (ipc/waiters.c) and looks again
 * under a snapshot taken after the registration; still Pending, the
 * procedure commits its transaction (SPI_commit: the snapshot and every
 * lock go, no xid was ever taken, and a new transaction without a
 * snapshot starts) and sleeps on its latch until the transaction that
 * ends the job wakes it after its commit (and takes it out of the table),
 * then starts over.  The timeout, a cancel and statement_timeout
 * interrupt the sleep (CHECK_FOR_INTERRUPTS); the error aborts the
 * current transaction, which ends the registration.
 *
 * PostgreSQL makes a SECURITY DEFINER procedure, and one with SET clauses,
 * atomic: it cannot commit.  So the procedure is neither, and each look
 * runs as a SECURITY DEFINER function would: as the procedure's owner
 * (the extension owner), with search_path pinned to pg_catalog, pg_temp
 * at a GUC nesting level of its own (docs/security.md, rules 3 and 5);
 * both are undone before the commit.  The checks of the prologue that a
 * new transaction could change are made again at every look: the
 * schema's version, READ COMMITTED, the tenant (its bindings, its shard
 * in cluster mode, whose lock is then held until the look's commit, so a
 * sleeping waiter never holds up a shard's move).  On a hot standby a job
 * that has ended is returned, but a pending one is refused: its end comes
 * by replay, and replay runs no commit of this server's.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_core.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/latch.h"
#include "storage/sinval.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/wait_event.h"

#define WAIT_FN "silo.wait_result"

/*
 * silo_wait_require_read_committed: 25000 from fn in a REPEATABLE READ or
 * SERIALIZABLE transaction, whose snapshot would never show the end of
 * the job.
 */
void
silo_wait_require_read_committed(const char *fn)
{
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("%s requires the READ COMMITTED isolation level", fn),
				 errdetail("Under %s its looks at the job would never see the commit that ends it.",
						   IsolationIsSerializable() ? "SERIALIZABLE" : "REPEATABLE READ"),
				 errhint("CALL it on its own in autocommit mode, with default_transaction_isolation at read committed.")));
}

/*
 * silo_wait_look_enter: begin a look of fn (silo.wait_result,
 * silo.wait_any) at jobs of tenant: a fresh snapshot, the rights of
 * owner and search_path pinned to pg_catalog, pg_temp at a GUC nesting
 * level of its own, as a SECURITY DEFINER body would have; then the
 * checks a new transaction could change (see the header).
 * silo_wait_look_leave undoes it all.
 */
void
silo_wait_look_enter(const char *fn, const char *tenant, Oid owner, SiloWaitLook *look)
{
	silo_wait_require_read_committed(fn);
	PushActiveSnapshot(GetTransactionSnapshot());
	GetUserIdAndSecContext(&look->save_user, &look->save_sec);
	look->nest = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	SetUserIdAndSecContext(owner, look->save_sec | SECURITY_LOCAL_USERID_CHANGE);

	silo_schema_require_current(fn);
	silo_tenancy_check(tenant);
	silo_cluster_check_tenant(tenant);
}

/*
 * silo_wait_look_leave: end the look silo_wait_look_enter began.
 */
void
silo_wait_look_leave(SiloWaitLook *look)
{
	AtEOXact_GUC(true, look->nest);
	SetUserIdAndSecContext(look->save_user, look->save_sec);
	PopActiveSnapshot();
}

/*
 * wait_look: one look at job (tenant, id) as the procedure's owner, under
 * a fresh snapshot that is gone when it returns; see silo_job_look_result.
 */
static bool
wait_look(const char *tenant, const char *id, Oid owner, MemoryContext cxt,
		  Datum *values, bool *nulls)
{
	SiloWaitLook look;
	bool		ended;

	silo_wait_look_enter(WAIT_FN, tenant, owner, &look);
	ended = silo_job_look_result(tenant, id, cxt, values, nulls);
	silo_wait_look_leave(&look);
	return ended;
}

/*
 * silo_wait_nap: one sleep of a waiter, holding no snapshot: false at
 * once when timeout_us have passed since start; else sleep on the latch
 * until it is set (a wake-up, or anything else: the caller checks its
 * flags) or the timeout comes, and return true.  Interrupts (a cancel,
 * statement_timeout, a termination) are served after the sleep, and so
 * is PostgreSQL's own check of the client connection
 * (client_connection_check_interval, which docs/api.md recommends to
 * callers that may vanish: a dropped caller otherwise keeps its backend
 * until the timeout).  Then the shared invalidation queue is caught up
 * with, as an idle session does when asked: a waiter that lags holds the
 * queue full, which makes every backend that queues an invalidation clean
 * it up (a walk over every backend) and resets the laggard, whose caches
 * then all rebuild when it wakes.
 */
bool
silo_wait_nap(instr_time start, int64 timeout_us)
{
	instr_time	now;
	int64		elapsed_us;

	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, start);
	elapsed_us = (int64) INSTR_TIME_GET_MICROSEC(now);
	if (elapsed_us >= timeout_us)
		return false;
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 (long) ((timeout_us - elapsed_us + 999) / 1000), PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
	if (catchupInterruptPending)
	{
		catchupInterruptPending = false;
		AcceptInvalidationMessages();
	}
	return true;
}

/*
 * wait_timed_out: raise SL011 for job (tenant, id) after timeout_us.
 */
static void
wait_timed_out(const char *tenant, const char *id, int64 timeout_us)
{
	ereport(ERROR,
			(errcode(ERRCODE_SILO_WAIT_TIMEOUT),
			 errmsg("job did not end within the timeout"),
			 errdetail("Job \"%s\" of tenant \"%s\" was still pending after %.3f s.",
					   id, tenant, (double) timeout_us / 1000000.0),
			 errhint("Call silo.wait_result again to go on waiting.")));
}

/*
 * wait_sleep: sleep until a commit wakes this backend's registration --
 * or raise SL011 once timeout_us have passed since start.  Other reasons
 * to set the latch only cost a check of the flag.
 */
static void
wait_sleep(const char *tenant, const char *id, instr_time start, int64 timeout_us)
{
	while (!silo_wait_take_wake())
		if (!silo_wait_nap(start, timeout_us))
			wait_timed_out(tenant, id, timeout_us);
}

/*
 * silo_job_wait_result: the work of silo.wait_result (api/jobs.c checked
 * the arguments, ran the prologue in the CALL's transaction and made sure
 * the call may commit): wait at most timeout_us for job (tenant, id) to
 * end, then put silo.job_result's five columns into values and nulls, in
 * the caller's memory context.  owner is the procedure's owner, whose
 * rights each look uses.  SL003 for a missing job, SL011 at the timeout.
 * On return the caller is in a transaction that may be a new one.
 */
void
silo_job_wait_result(const char *tenant, const char *id, int64 timeout_us, Oid owner,
					 Datum *values, bool *nulls)
{
	MemoryContext callcxt = CurrentMemoryContext;
	MemoryContext lookcxt;
	instr_time	start;
	char	   *tenant_copy;
	char	   *id_copy;
	uint64		key;

	INSTR_TIME_SET_CURRENT(start);
	/* the caller's context survives the commits; the looks' garbage goes */
	tenant_copy = pstrdup(tenant);
	id_copy = pstrdup(id);
	lookcxt = AllocSetContextCreate(callcxt, "silo wait_result look",
									ALLOCSET_SMALL_SIZES);
	key = silo_wait_key(tenant, strlen(tenant), id, strlen(id));
	if (SPI_connect_ext(SPI_OPT_NONATOMIC) != SPI_OK_CONNECT)
		elog(ERROR, "silo: SPI_connect_ext failed");

	for (;;)
	{
		MemoryContext old;
		bool		ended;

		CHECK_FOR_INTERRUPTS();

		/*
		 * A first look without registering: a job that has ended (the call
		 * for a finished job, and nearly every wake-up) costs no trip to the
		 * waiters' lock.  A thousand waiters woken by one commit would
		 * otherwise queue for it twice each, and on a small machine each
		 * hand-over of the lock waits for the scheduler.
		 */
		MemoryContextReset(lookcxt);
		old = MemoryContextSwitchTo(lookcxt);
		ended = wait_look(tenant_copy, id_copy, owner, callcxt, values, nulls);
		MemoryContextSwitchTo(old);
		if (ended)
			break;

		/*
		 * Pending: register, then look again under a snapshot taken after
		 * the registration, so that an end committed in between is seen by
		 * this look or wakes the registration (a wake-up took the previous
		 * one with it).
		 */
		silo_wait_register(key);
		MemoryContextReset(lookcxt);
		old = MemoryContextSwitchTo(lookcxt);
		ended = wait_look(tenant_copy, id_copy, owner, callcxt, values, nulls);
		MemoryContextSwitchTo(old);
		if (ended)
			break;
		/* on a standby the end is replayed: no commit here would wake us */
		if (RecoveryInProgress())
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("silo.wait_result cannot wait on a standby"),
					 errdetail("Job \"%s\" of tenant \"%s\" is still pending; its end will be replayed from the primary, which wakes no waiter here.",
							   id_copy, tenant_copy),
					 errhint("Wait on the primary, or poll silo.job_result here.")));
		/* no snapshot, no lock and no xid while asleep */
		SPI_commit();
		wait_sleep(tenant_copy, id_copy, start, timeout_us);
	}

	silo_wait_unregister();
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "silo: SPI_finish failed");
	MemoryContextSwitchTo(callcxt);
	MemoryContextDelete(lookcxt);
}
