/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  Silo's shared memory for its processes: where the broker's latch is
 *	  published, its round requests, and the floating-limit refresh hint.
 *	  The wake-up coalescing table lives in notify.c, the waiters of
 *	  silo.wait_result in waiters.c.
 *
 * Locking: broker_pid and broker_latch are written under the tranche's
 * LWLock and read under it; the refresh hint is an atomic.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_ipc.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

typedef struct SiloShared
{
	LWLock	   *lock;
	pid_t		broker_pid;
	Latch	   *broker_latch;
	pg_atomic_uint32 refresh_hint;	/* 0: no refresh task is ready */
	pg_atomic_uint32 tick_requested;	/* 1: new work for the broker's tick */
	pg_atomic_uint64 config_generation; /* bumped by every committed change
										 * of silo's configuration */
} SiloShared;

static SiloShared *silo_shared = NULL;

/* Set by a transaction that created a future task; read at commit. */
static bool silo_broker_wake_pending = false;

/* Set by a transaction that changed silo's configuration (tenant
 * bindings, task group settings); read at commit. */
static bool silo_config_changed_pending = false;

/*
 * Transactions of this backend that changed the configuration and rolled
 * back: what the backend cached within them is wrong now, so they count
 * in the generation it sees (both counts only grow, so their sum changes
 * whenever either does).
 */
static uint64 silo_config_aborts = 0;

static void silo_shmem_detach_broker(int code, Datum arg);

/*
 * silo_ipc_shmem_request: reserve the struct and one named LWLock, the
 * wake-up table and the waiters' table.
 */
void
silo_ipc_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(SiloShared)));
	RequestNamedLWLockTranche("silo", 1);
	silo_notify_shmem_request();
	silo_wait_shmem_request();
}

/*
 * silo_ipc_shmem_startup: create the struct on first start (and again
 * after a crash restart, when shared memory is re-initialised).  The
 * caller holds AddinShmemInitLock.
 */
void
silo_ipc_shmem_startup(void)
{
	bool		found;

	silo_shared = NULL;
	silo_shared = ShmemInitStruct("silo", sizeof(SiloShared), &found);
	if (!found)
	{
		silo_shared->lock = &(GetNamedLWLockTranche("silo"))->lock;
		silo_shared->broker_pid = 0;
		silo_shared->broker_latch = NULL;
		pg_atomic_init_u32(&silo_shared->refresh_hint, 1);
		pg_atomic_init_u32(&silo_shared->tick_requested, 0);
		pg_atomic_init_u64(&silo_shared->config_generation, 1);
	}
	silo_notify_shmem_startup();
	silo_wait_shmem_startup();
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
 * silo_wake_broker: ask the broker for a round of its work (new work is
 * due, or a key must be regranted) and set its latch, if it is running.
 */
void
silo_wake_broker(void)
{
	if (silo_shared == NULL)
		return;
	pg_atomic_write_u32(&silo_shared->tick_requested, 1);
	silo_wake_broker_latch();
}

/*
 * silo_wake_broker_latch: only set the broker's latch, for work outside
 * its rounds (deferred wake-up notifications).
 */
void
silo_wake_broker_latch(void)
{
	if (silo_shared == NULL)
		return;
	LWLockAcquire(silo_shared->lock, LW_SHARED);
	if (silo_shared->broker_latch != NULL)
		SetLatch(silo_shared->broker_latch);
	LWLockRelease(silo_shared->lock);
}

/*
 * silo_broker_take_tick_request: the broker consumes a round request.
 */
bool
silo_broker_take_tick_request(void)
{
	return silo_shared != NULL &&
		pg_atomic_exchange_u32(&silo_shared->tick_requested, 0) != 0;
}

/*
 * silo_wake_broker_at_commit: ask for the broker's latch to be set when the
 * current transaction commits, so a newly created future task is timed
 * precisely instead of at the next periodic tick.
 */
void
silo_wake_broker_at_commit(void)
{
	silo_broker_wake_pending = true;
}

/*
 * silo_ipc_xact_end: at the end of a transaction, wake the broker if a
 * committed transaction asked for it; forget the request otherwise.
 */
void
silo_ipc_xact_end(bool commit)
{
	if (commit && silo_broker_wake_pending)
		silo_wake_broker();
	silo_broker_wake_pending = false;
	if (commit && silo_config_changed_pending && silo_shared != NULL)
		pg_atomic_fetch_add_u64(&silo_shared->config_generation, 1);
	else if (silo_config_changed_pending)
		silo_config_aborts++;	/* this backend may have cached the change */
	silo_config_changed_pending = false;
}

/*
 * silo_ipc_subxact_abort: a rolled-back subtransaction may have changed
 * the configuration this backend cached since: it is read again (the
 * transaction, should it commit, still tells every backend).
 */
void
silo_ipc_subxact_abort(void)
{
	if (silo_config_changed_pending)
		silo_config_aborts++;
}

/*
 * silo_config_changed_at_commit: the current transaction changed silo's
 * configuration (tenant bindings, task group settings): every backend
 * drops what it cached of it once it has committed (tenancy/, core/).
 */
void
silo_config_changed_at_commit(void)
{
	silo_config_changed_pending = true;
}

/*
 * silo_config_generation: changes with every committed change of silo's
 * configuration (0 without shared memory: cached for one transaction
 * at most then).  Read it before the snapshot that reads the
 * configuration: the bump comes after the commit is visible.
 */
uint64
silo_config_generation(void)
{
	if (silo_shared == NULL)
		return 0;
	return pg_atomic_read_u64(&silo_shared->config_generation) + silo_config_aborts;
}
