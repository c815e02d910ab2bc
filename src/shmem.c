/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  Silo's shared memory: where the broker's latch is published, and the
 *	  per-task-group slots that coalesce wake-up notifications.
 *
 * Locking: broker_pid and broker_latch are written under the tranche's
 * LWLock and read under it.  The notification slots are lock-free atomics:
 * a compare-and-swap on a slot's last-sent (group, time) decides which
 * backend sends the next NOTIFY.  Slots are indexed by a hash of the task
 * group and remember which group they last notified, so two groups that
 * share a slot only cost each other an extra notification.  Coalescing is
 * leading-edge: the last commit of a burst may send none, and workers
 * also poll, so no work is lost.
 *
 *-------------------------------------------------------------------------
 */
#include "silo.h"

#include "access/xact.h"
#include "commands/async.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "utils/memutils.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#define SILO_NOTIFY_SLOTS 1024

typedef struct SiloShared
{
	LWLock	   *lock;
	pid_t		broker_pid;
	Latch	   *broker_latch;
	pg_atomic_uint64 notify_slots[SILO_NOTIFY_SLOTS];
	pg_atomic_uint32 refresh_hint;	/* 0: no refresh task is ready */
} SiloShared;

static SiloShared *silo_shared = NULL;

static void silo_shmem_detach_broker(int code, Datum arg);

/*
 * silo_shmem_request: reserve the struct and one named LWLock.
 */
void
silo_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(SiloShared)));
	RequestNamedLWLockTranche("silo", 1);
}

/*
 * silo_shmem_startup: create the struct on first start (and again after a
 * crash restart, when shared memory is re-initialised).
 */
void
silo_shmem_startup(void)
{
	bool		found;

	silo_shared = NULL;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	silo_shared = ShmemInitStruct("silo", sizeof(SiloShared), &found);
	if (!found)
	{
		int			i;

		silo_shared->lock = &(GetNamedLWLockTranche("silo"))->lock;
		silo_shared->broker_pid = 0;
		silo_shared->broker_latch = NULL;
		for (i = 0; i < SILO_NOTIFY_SLOTS; i++)
			pg_atomic_init_u64(&silo_shared->notify_slots[i], 0);
		pg_atomic_init_u32(&silo_shared->refresh_hint, 1);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * silo_shmem_set_broker: the broker publishes its latch so that committing
 * transactions can wake it; it withdraws it when it exits.
 */
void
silo_shmem_set_broker(bool attach)
{
	if (silo_shared == NULL)
		return;
	LWLockAcquire(silo_shared->lock, LW_EXCLUSIVE);
	silo_shared->broker_pid = attach ? MyProcPid : 0;
	silo_shared->broker_latch = attach ? MyLatch : NULL;
	LWLockRelease(silo_shared->lock);
	if (attach)
		before_shmem_exit(silo_shmem_detach_broker, (Datum) 0);
}

/*
 * silo_shmem_detach_broker: exit callback clearing the broker's entry.
 */
static void
silo_shmem_detach_broker(int code, Datum arg)
{
	if (silo_shared == NULL)
		return;
	LWLockAcquire(silo_shared->lock, LW_EXCLUSIVE);
	if (silo_shared->broker_pid == MyProcPid)
	{
		silo_shared->broker_pid = 0;
		silo_shared->broker_latch = NULL;
	}
	LWLockRelease(silo_shared->lock);
}

/*
 * silo_shmem_broker_pid: the running broker's pid, or 0.
 */
int
silo_shmem_broker_pid(void)
{
	int			pid;

	if (silo_shared == NULL)
		return 0;
	LWLockAcquire(silo_shared->lock, LW_SHARED);
	pid = silo_shared->broker_pid;
	LWLockRelease(silo_shared->lock);
	return pid;
}

/*
 * silo_refresh_hint / silo_set_refresh_hint: whether a floating-limit
 * refresh task may be ready for leasing.  silo.lease skips its refresh
 * query while the hint is off, so installations without floating limits
 * pay nothing for them.  Scheduling a refresh turns the hint on before
 * its transaction commits; only the broker turns it off, each round,
 * after finding no ready refresh (a refresh scheduled concurrently by
 * run_maintenance turns it on again within one round).  Without shared
 * memory (not preloaded) the hint is always on.
 */
bool
silo_refresh_hint(void)
{
	return silo_shared == NULL || pg_atomic_read_u32(&silo_shared->refresh_hint) != 0;
}

void
silo_set_refresh_hint(bool on)
{
	if (silo_shared != NULL)
		pg_atomic_write_u32(&silo_shared->refresh_hint, on ? 1 : 0);
}

/*
 * silo_wake_broker: set the broker's latch, if a broker is running.
 */
void
silo_wake_broker(void)
{
	if (silo_shared == NULL)
		return;
	LWLockAcquire(silo_shared->lock, LW_SHARED);
	if (silo_shared->broker_latch != NULL)
		SetLatch(silo_shared->broker_latch);
	LWLockRelease(silo_shared->lock);
}

/*
 * Task groups this transaction made work for, each with the subtransaction
 * nesting level that added it, so that a rolled-back subtransaction's
 * groups are forgotten.  Decided on at pre-commit.
 */
typedef struct SiloPendingGroup
{
	char	   *task_group;
	int			level;
} SiloPendingGroup;

static List *silo_pending_groups = NIL;

/*
 * silo_notify_group: remember that task_group has new due work, so that
 * silo_notify_pre_commit can wake its workers when the transaction
 * commits.  The NOTIFY itself is only ever sent by a committing
 * transaction.
 */
void
silo_notify_group(const char *task_group)
{
	ListCell   *lc;
	MemoryContext old;
	SiloPendingGroup *pg;

	foreach(lc, silo_pending_groups)
	{
		pg = (SiloPendingGroup *) lfirst(lc);
		if (strcmp(pg->task_group, task_group) == 0)
			return;
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	pg = palloc(sizeof(SiloPendingGroup));
	pg->task_group = pstrdup(task_group);
	pg->level = GetCurrentTransactionNestLevel();
	silo_pending_groups = lappend(silo_pending_groups, pg);
	MemoryContextSwitchTo(old);
}

/*
 * silo_notify_subxact_end: a subtransaction at the current nesting level
 * ends.  If it commits, its groups now belong to its parent; if it aborts,
 * its work is gone and so are its wake-ups.
 */
void
silo_notify_subxact_end(bool commit)
{
	int			level = GetCurrentTransactionNestLevel();
	ListCell   *lc;

	foreach(lc, silo_pending_groups)
	{
		SiloPendingGroup *pg = (SiloPendingGroup *) lfirst(lc);

		if (pg->level < level)
			continue;
		if (commit)
			pg->level = level - 1;
		else
			silo_pending_groups = foreach_delete_current(silo_pending_groups, lc);
	}
}

/*
 * silo_notify_pre_commit: queue a NOTIFY on silo_task_ready for each
 * remembered group, unless one was sent for the same slot within
 * silo.notify_coalesce_ms.
 *
 * In PostgreSQL 15 every notifying commit takes a cluster-wide lock, so a
 * notification per enqueue would serialize producers' commits.  Stamping
 * the slot here, at pre-commit, rather than at enqueue time means a
 * transaction that later aborts, or stays open for a long time, cannot
 * suppress the wake-up of another transaction's work.
 */
void
silo_notify_pre_commit(void)
{
	ListCell   *lc;

	foreach(lc, silo_pending_groups)
	{
		const char *task_group = ((SiloPendingGroup *) lfirst(lc))->task_group;
		uint32		hash;
		uint32		now_ms;
		uint64		last;
		pg_atomic_uint64 *slot;

		if (silo_shared == NULL || silo_notify_coalesce_ms == 0)
		{
			Async_Notify(SILO_NOTIFY_CHANNEL, task_group);
			continue;
		}
		/*
		 * A slot holds the last notified group's hash (high 32 bits) and
		 * the time in ms (low 32 bits, wrapping): only a notification for
		 * the same group within the window is skipped, so two groups that
		 * share a slot cannot starve each other.
		 */
		hash = hash_bytes((const unsigned char *) task_group, strlen(task_group));
		slot = &silo_shared->notify_slots[hash % SILO_NOTIFY_SLOTS];
		now_ms = (uint32) (GetCurrentTimestamp() / 1000);
		last = pg_atomic_read_u64(slot);
		if ((uint32) (last >> 32) == hash &&
			(uint32) (now_ms - (uint32) last) < (uint32) silo_notify_coalesce_ms)
			continue;
		if (pg_atomic_compare_exchange_u64(slot, &last, ((uint64) hash << 32) | now_ms))
			Async_Notify(SILO_NOTIFY_CHANNEL, task_group);
	}
	silo_pending_groups = NIL;
}

/*
 * silo_notify_forget: the transaction ended without committing; its list
 * went away with TopTransactionContext.
 */
void
silo_notify_forget(void)
{
	silo_pending_groups = NIL;
}
