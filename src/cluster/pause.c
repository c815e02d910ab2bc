/*-------------------------------------------------------------------------
 *
 * pause.c
 *	  The wait of a move's pause: once the coordinator has published a
 *	  shard as PAUSED, wait until every transaction that had already passed
 *	  the shard's check has ended, within a bounded time, and say up to
 *	  where the WAL holds their work.
 *
 * Every call that passes a shard's check holds the shard's lock (field4
 * SILO_LOCKTAG_SHARD) in share mode until its transaction ends
 * (shardmap.c): a producer's open transaction, a lease, the broker's
 * round, the purge.  The drain takes that lock exclusively, which waits
 * for all of them, and releases it at once: calls that queued behind it
 * get the lock afterwards, check the shard again and find it paused
 * (SL021).  The wait is bounded (lock_timeout, set for the drain's
 * transaction only): a transaction that stays open past it makes the
 * move give up (SL022) rather than stall the shard.
 *
 * The LSN returned is the WAL insert position after the wait: every
 * change of the shard's rows on this node was inserted before it, so a
 * subscriber that has confirmed it has all of them.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_cluster.h"
#include "silo_ipc.h"

#include "access/xlog.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/guc.h"
#include "utils/memutils.h"

/* GUCs (registered by module.c) */
int			silo_move_drain_timeout_ms = 5000;
int			silo_move_pause_limit_ms = 30000;
bool		silo_draining = false;
int			silo_max_moves_in = 1;
char	   *silo_test_move_pause_at = NULL;

/*
 * silo_cluster_drain: the pause's wait for shard (see the header); the
 * caller is silo.shard_drain, which only the coordinator calls.  The shard
 * must be this node's and published as PAUSED.  Returns the WAL insert
 * position after the wait.
 */
XLogRecPtr
silo_cluster_drain(int shard, int timeout_ms)
{
	SiloShard	s;
	LOCKTAG		tag;
	char		buf[32];
	MemoryContext cxt = CurrentMemoryContext;

	if (!silo_cluster_mode())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("shards move only in cluster mode")));
	if (!silo_cluster_shard_by_id(shard, &s) || !s.local || s.state != SILO_SHARD_PAUSED)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("shard %d is not paused on this node", shard),
				 errdetail("The coordinator pauses a shard before it drains it.")));

	/* the wait's bound, for this transaction only */
	snprintf(buf, sizeof(buf), "%d", Max(timeout_ms, 1));
	(void) set_config_option("lock_timeout", buf, PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) shard, 0, SILO_LOCKTAG_SHARD);
	PG_TRY();
	{
		(void) LockAcquire(&tag, ExclusiveLock, false, false);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		/* a lock timeout is the move's bound running out: say so */
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			PG_RE_THROW();
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_SILO_MOVE_GAVE_UP),
				 errmsg("shard %d could not be drained within %d ms", shard, timeout_ms),
				 errdetail("A transaction that passed the shard's check before the pause was still open."),
				 errhint("The move gives up and the shard is served again; placement tries again later.")));
	}
	PG_END_TRY();
	(void) LockRelease(&tag, ExclusiveLock, false);
	/* waiters of the shard's jobs look again and learn it is moving */
	silo_wait_all_ended();
	return GetXLogInsertRecPtr();
}
