/*-------------------------------------------------------------------------
 *
 * waiters.c
 *	  Sessions waiting in silo.wait_result for a job to end, and the
 *	  wake-ups the transactions that end jobs send them after their
 *	  commit.
 *
 * A waiter registers the job it waits for in a shared table before it
 * looks at the job, and sleeps on its latch while the job is Pending.  A
 * transaction that ends a job -- a report, the sweep, a cancel, a rate
 * limit used up, a delete, the purge -- remembers the job's key
 * (silo_wait_job_ended); at its commit (XACT_EVENT_COMMIT, after the
 * commit is visible to new snapshots) it sets the woken flag and the
 * latch of every waiter registered for one of those keys.  Registration
 * comes before the look, so a commit either happened before the look's
 * snapshot (the look sees it) or finds the waiter registered (and wakes
 * it): none is missed.  A rolled-back subtransaction takes its keys with
 * it; an aborted transaction sends nothing.  A transaction that ended a
 * job cannot be prepared: its wake-ups would be due at a COMMIT PREPARED
 * in another session, which runs none of silo's callbacks.
 *
 * The key is a 64-bit hash of (database, tenant, job id).  Two jobs with
 * one key only cost a spurious wake-up: the waiter looks again and goes
 * back to sleep.  More than WAIT_PENDING_MAX keys in one transaction (a
 * purge of old jobs) wake every waiter instead of each one's own.
 *
 * The table has one slot per backend (MaxBackends, indexed by BackendId;
 * silo.wait_result waits for one job at a time), then a pool of
 * silo.max_wait_any_jobs slots for silo.wait_any, which waits for many:
 * a backend takes the slots it needs from the pool's free list (all or
 * none, 53400 when too few are left) and gives them back when its call
 * ends, commits or fails; a wake-up takes a pool slot out of the table as
 * it does any other, but only its owner frees it, after reading its flag.
 * Then a power-of-two array of
 * buckets, each the head of a chain of slots through next, under one
 * LWLock (tranche "silo wait").  A wake-up first walks one chain per key
 * with the lock shared; only when it found a waiter does it take the lock
 * exclusively, walk again and take the waiters it wakes out of the table
 * itself, then sets their latches after releasing the lock.  So a woken
 * waiter leaves without touching the lock, and one commit that wakes a
 * thousand waiters does not send them all, at once, to queue for it
 * (on a small machine that convoy cost seconds); a waiter that must wait
 * again registers again.  Registering, and leaving unwoken (an error, a
 * job that had ended at the first look), take the lock exclusively.  The
 * count of registered waiters is an atomic read without the lock, after
 * a memory barrier: with nobody waiting, a commit pays one read.  Inside
 * the lock: no allocation, no error.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_ipc.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/backendid.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/memutils.h"

#define WAIT_TRANCHE "silo wait"

/* keys one transaction remembers before it wakes every waiter instead */
#define WAIT_PENDING_MAX 8192

/* One backend's registration. */
typedef struct WaitSlot
{
	uint64		key;			/* the awaited job's key */
	Latch	   *latch;			/* the waiter's latch */
	int			next;			/* next slot of the same bucket (or free), or -1 */
	int			owner;			/* the waiter's BackendId - 1 */
	pg_atomic_uint32 woken;		/* set by wakers, taken by the waiter */
	bool		used;			/* registered */
} WaitSlot;

typedef struct WaitShared
{
	LWLock	   *lock;
	pg_atomic_uint32 nwaiting;	/* slots in use */
	int			nslots;			/* per-backend slots, then the pool */
	int			nbuckets;		/* a power of two */
	int			free_head;		/* the pool's free slots, chained through next */
	int			nfree;
} WaitShared;

/* GUC silo.max_wait_any_jobs: the size of the pool */
int			silo_max_wait_any_jobs = 16384;

static WaitShared *wait_shared = NULL;
static int *wait_buckets = NULL;
static WaitSlot *wait_slots = NULL;

/* this backend's slot while it is registered, else -1 */
static int	wait_my_slot = -1;
static bool wait_exit_hooked = false;

/* the pool slots this backend holds for silo.wait_any, by position */
static int *wait_many_slots = NULL;
static int	wait_many_n = 0;
static int	wait_many_capacity = 0;

/*
 * The latches a wake-up sets after releasing the lock, one per waiting
 * backend however many of its slots were woken (MaxBackends of them), and
 * which backends have theirs in the array already.
 */
static Latch **wait_latches = NULL;
static int *wait_owners = NULL;
static bool *wait_seen = NULL;

/*
 * The keys of the jobs this transaction ended, each with the
 * subtransaction nesting level that added it (never decreasing along the
 * array: subtransactions end in the reverse order they start), in
 * TopTransactionContext; wait_all when there were too many to keep.
 */
typedef struct WaitPending
{
	uint64		key;
	int			level;
} WaitPending;

static WaitPending *wait_pending = NULL;
static int	wait_npending = 0;
static int	wait_capacity = 0;
static bool wait_all = false;
static int	wait_all_level = 0;

/*
 * wait_sizes: the table's number of slots and of buckets.
 */
static void
wait_sizes(int *nslots, int *nbuckets)
{
	int			n = 1;

	*nslots = MaxBackends + silo_max_wait_any_jobs;
	while (n < 2 * *nslots)
		n <<= 1;
	*nbuckets = n;
}

/*
 * wait_shmem_size: the bytes of the table: header, buckets, slots.
 */
static Size
wait_shmem_size(void)
{
	int			nslots;
	int			nbuckets;

	wait_sizes(&nslots, &nbuckets);
	return add_size(add_size(MAXALIGN(sizeof(WaitShared)),
							 MAXALIGN(mul_size(nbuckets, sizeof(int)))),
					mul_size(nslots, sizeof(WaitSlot)));
}

/*
 * silo_wait_shmem_request / silo_wait_shmem_startup: reserve and
 * initialise the table and its lock (from shmem.c's hooks; MaxBackends is
 * known by then).
 */
void
silo_wait_shmem_request(void)
{
	RequestAddinShmemSpace(wait_shmem_size());
	RequestNamedLWLockTranche(WAIT_TRANCHE, 1);
}

void
silo_wait_shmem_startup(void)
{
	bool		found;
	int			nslots;
	int			nbuckets;
	int			i;

	wait_sizes(&nslots, &nbuckets);
	wait_shared = ShmemInitStruct("silo wait", wait_shmem_size(), &found);
	wait_buckets = (int *) ((char *) wait_shared + MAXALIGN(sizeof(WaitShared)));
	wait_slots = (WaitSlot *) ((char *) wait_buckets +
							   MAXALIGN(mul_size(nbuckets, sizeof(int))));
	if (found)
		return;
	wait_shared->lock = &(GetNamedLWLockTranche(WAIT_TRANCHE))->lock;
	pg_atomic_init_u32(&wait_shared->nwaiting, 0);
	wait_shared->nslots = nslots;
	wait_shared->nbuckets = nbuckets;
	wait_shared->free_head = -1;
	wait_shared->nfree = nslots - MaxBackends;
	for (i = 0; i < nbuckets; i++)
		wait_buckets[i] = -1;
	for (i = nslots - 1; i >= 0; i--)
	{
		wait_slots[i].used = false;
		wait_slots[i].next = -1;
		wait_slots[i].latch = NULL;
		pg_atomic_init_u32(&wait_slots[i].woken, 0);
		if (i >= MaxBackends)
		{
			wait_slots[i].next = wait_shared->free_head;
			wait_shared->free_head = i;
		}
	}
}

/*
 * silo_wait_key: the key of job id of tenant in this database.
 */
uint64
silo_wait_key(const char *tenant, int tenant_len, const char *id, int id_len)
{
	uint64		h = hash_bytes_extended((const unsigned char *) tenant, tenant_len,
										(uint64) MyDatabaseId);

	return hash_bytes_extended((const unsigned char *) id, id_len, h);
}

/*
 * wait_unlink: take slot i out of its bucket's chain and free it.
 * Caller holds the lock exclusively.
 */
static void
wait_unlink(int i)
{
	int		   *link = &wait_buckets[wait_slots[i].key & (wait_shared->nbuckets - 1)];

	while (*link != -1 && *link != i)
		link = &wait_slots[*link].next;
	if (*link == i)
		*link = wait_slots[i].next;
	wait_slots[i].next = -1;
	wait_slots[i].used = false;
	pg_atomic_fetch_sub_u32(&wait_shared->nwaiting, 1);
}

/*
 * wait_at_exit: a backend that exits while registered (FATAL) frees its
 * slot.
 */
static void
wait_at_exit(int code, Datum arg)
{
	silo_wait_unregister();
	silo_wait_many_end();
}

/*
 * wait_require_table: 55000 without silo's shared memory (not
 * preloaded); the exit hook that frees this backend's slots, once.
 */
static void
wait_require_table(const char *fn)
{
	if (wait_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s needs silo in shared_preload_libraries", fn)));
	if (!wait_exit_hooked)
	{
		before_shmem_exit(wait_at_exit, (Datum) 0);
		wait_exit_hooked = true;
	}
}

/*
 * wait_link: put slot s, woken flag cleared, into the chain of its key's
 * bucket.  Caller holds the lock exclusively.
 */
static void
wait_link(int s)
{
	int		   *head = &wait_buckets[wait_slots[s].key & (wait_shared->nbuckets - 1)];

	wait_slots[s].owner = MyBackendId - 1;
	wait_slots[s].latch = MyLatch;
	pg_atomic_write_u32(&wait_slots[s].woken, 0);
	wait_slots[s].next = *head;
	*head = s;
	wait_slots[s].used = true;
	pg_atomic_fetch_add_u32(&wait_shared->nwaiting, 1);
}

/*
 * silo_wait_register: this backend waits for the job of key from now
 * on, until a wake-up takes it out of the table, silo_wait_unregister, or
 * the end of its transaction by an error.  A registration still in place
 * (for this key or, after an error that was somehow survived, another
 * one) is replaced, never trusted.  55000 without silo's shared memory
 * (not preloaded).
 */
void
silo_wait_register(uint64 key)
{
	int			i = MyBackendId - 1;

	wait_require_table("silo.wait_result");
	if (i < 0 || i >= MaxBackends)
		elog(ERROR, "silo: backend id %d has no wait slot", MyBackendId);
	StaticAssertStmt(sizeof(WaitSlot) == 32, "a wait slot takes 32 bytes (docs/operations.md)");

	LWLockAcquire(wait_shared->lock, LW_EXCLUSIVE);
	/* our own registration, or one left by a backend that had this id */
	if (wait_slots[i].used)
		wait_unlink(i);
	wait_slots[i].key = key;
	wait_link(i);
	LWLockRelease(wait_shared->lock);
	wait_my_slot = i;
}

/*
 * silo_wait_unregister: this backend waits no more (nothing to do when
 * it is not registered; a slot a wake-up has just taken out is left as
 * it is).
 */
void
silo_wait_unregister(void)
{
	if (wait_my_slot < 0 || wait_shared == NULL)
		return;
	LWLockAcquire(wait_shared->lock, LW_EXCLUSIVE);
	if (wait_slots[wait_my_slot].used)
		wait_unlink(wait_my_slot);
	LWLockRelease(wait_shared->lock);
	pg_atomic_write_u32(&wait_slots[wait_my_slot].woken, 0);
	wait_my_slot = -1;
}

/*
 * silo_wait_take_wake: whether a commit woke this backend since the last
 * call (the flag is cleared).  A woken backend is no longer registered:
 * the wake-up took its slot out of the table.
 */
bool
silo_wait_take_wake(void)
{
	if (wait_my_slot < 0)
		return false;
	if (pg_atomic_exchange_u32(&wait_slots[wait_my_slot].woken, 0) == 0)
		return false;
	wait_my_slot = -1;
	return true;
}

/*
 * silo_wait_many_register: this backend waits for the jobs of keys[0..n)
 * from now on (position i for keys[i]), on n slots of the pool, until
 * silo_wait_many_end or the end of its transaction by an error; a wake-up
 * takes a position out of the table (silo_wait_many_take says which).
 * 53400 when the pool has fewer than n free slots; nothing is registered
 * then.  Holdings left by an earlier call are given back first.
 */
void
silo_wait_many_register(const uint64 *keys, int n)
{
	int			i;

	wait_require_table("silo.wait_any");
	if (MyBackendId < 1 || MyBackendId > MaxBackends)
		elog(ERROR, "silo: backend id %d has no wait slot", MyBackendId);
	silo_wait_many_end();
	/* no allocation under the lock */
	if (n > wait_many_capacity)
	{
		int		   *a = MemoryContextAlloc(TopMemoryContext, n * sizeof(int));

		if (wait_many_slots != NULL)
			pfree(wait_many_slots);
		wait_many_slots = a;
		wait_many_capacity = n;
	}

	LWLockAcquire(wait_shared->lock, LW_EXCLUSIVE);
	if (wait_shared->nfree < n)
	{
		int			nfree = wait_shared->nfree;

		LWLockRelease(wait_shared->lock);
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("too many jobs awaited at once"),
				 errdetail("This call awaits %d jobs; %d of the %d places of silo.max_wait_any_jobs are free.",
						   n, nfree, silo_max_wait_any_jobs),
				 errhint("Await fewer jobs per call, or raise silo.max_wait_any_jobs (a restart).")));
	}
	for (i = 0; i < n; i++)
	{
		int			s = wait_shared->free_head;

		wait_shared->free_head = wait_slots[s].next;
		wait_slots[s].key = keys[i];
		wait_link(s);
		wait_many_slots[i] = s;
	}
	wait_shared->nfree -= n;
	wait_many_n = n;
	LWLockRelease(wait_shared->lock);
}

/*
 * silo_wait_many_take: the positions a commit woke since the last call,
 * into which[] (as many as were registered, at most); returns how many.
 * A woken position is out of the table until silo_wait_many_relink.
 */
int
silo_wait_many_take(int *which)
{
	int			i;
	int			k = 0;

	for (i = 0; i < wait_many_n; i++)
		if (pg_atomic_read_u32(&wait_slots[wait_many_slots[i]].woken) != 0 &&
			pg_atomic_exchange_u32(&wait_slots[wait_many_slots[i]].woken, 0) != 0)
			which[k++] = i;
	return k;
}

/*
 * silo_wait_many_relink: wait again for positions which[0..n), woken
 * before (a second job with the same key, or a look that found the job
 * still pending).
 */
void
silo_wait_many_relink(const int *which, int n)
{
	int			i;

	LWLockAcquire(wait_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < n; i++)
		if (!wait_slots[wait_many_slots[which[i]]].used)
			wait_link(wait_many_slots[which[i]]);
	LWLockRelease(wait_shared->lock);
}

/*
 * silo_wait_many_end: this backend waits for none of its jobs any more;
 * its pool slots go back to the free list.
 */
void
silo_wait_many_end(void)
{
	int			i;

	if (wait_many_n == 0 || wait_shared == NULL)
		return;
	LWLockAcquire(wait_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < wait_many_n; i++)
	{
		int			s = wait_many_slots[i];

		if (wait_slots[s].used)
			wait_unlink(s);
		pg_atomic_write_u32(&wait_slots[s].woken, 0);
		wait_slots[s].next = wait_shared->free_head;
		wait_shared->free_head = s;
	}
	wait_shared->nfree += wait_many_n;
	LWLockRelease(wait_shared->lock);
	wait_many_n = 0;
}

/*
 * silo_wait_job_ended: the current transaction ended (or removed) job id
 * of tenant: its waiters are woken after the commit.
 */
void
silo_wait_job_ended(const char *tenant, const char *id)
{
	silo_wait_key_ended(silo_wait_key(tenant, strlen(tenant), id, strlen(id)));
}

/*
 * silo_wait_job_ended_text: the same, for text datums (the batched
 * paths, which hold the names as text).
 */
void
silo_wait_job_ended_text(Datum tenant, Datum id)
{
	text	   *t = (text *) pg_detoast_datum_packed((struct varlena *) DatumGetPointer(tenant));
	text	   *j = (text *) pg_detoast_datum_packed((struct varlena *) DatumGetPointer(id));

	silo_wait_key_ended(silo_wait_key(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t),
									  VARDATA_ANY(j), VARSIZE_ANY_EXHDR(j)));
}

/*
 * wait_prepare_wake: the arrays a wake-up after the commit uses, which
 * must not be allocated then.
 */
static void
wait_prepare_wake(void)
{
	if (wait_latches != NULL || wait_shared == NULL)
		return;
	wait_owners = MemoryContextAlloc(TopMemoryContext, MaxBackends * sizeof(int));
	wait_seen = MemoryContextAllocZero(TopMemoryContext, MaxBackends * sizeof(bool));
	wait_latches = MemoryContextAlloc(TopMemoryContext, MaxBackends * sizeof(Latch *));
}

/*
 * silo_wait_key_ended: remember key for the wake-up at commit.
 */
void
silo_wait_key_ended(uint64 key)
{
	int			level = GetCurrentTransactionNestLevel();

	/* the wake-up after the commit must not allocate: do it now */
	wait_prepare_wake();

	if (wait_all)
		return;
	if (wait_npending >= WAIT_PENDING_MAX)
	{
		wait_all = true;
		wait_all_level = level;
		return;
	}
	if (wait_npending == wait_capacity)
	{
		int			n = wait_capacity == 0 ? 16 : 2 * wait_capacity;

		if (wait_pending == NULL)
			wait_pending = MemoryContextAlloc(TopTransactionContext, n * sizeof(WaitPending));
		else
			wait_pending = repalloc(wait_pending, n * sizeof(WaitPending));
		wait_capacity = n;
	}
	wait_pending[wait_npending].key = key;
	wait_pending[wait_npending].level = level;
	wait_npending++;
}

/*
 * silo_wait_all_ended: the commit of the current transaction wakes every
 * waiter of this server, whatever job it waits for.  For a change that
 * may end every wait without ending a job: a shard that stops being
 * served here (cluster/pause.c), whose waiters must look again and learn
 * where it went instead of sleeping until their timeout.
 */
void
silo_wait_all_ended(void)
{
	wait_prepare_wake();
	if (!wait_all)
	{
		wait_all = true;
		wait_all_level = GetCurrentTransactionNestLevel();
	}
}

/*
 * wait_find: whether a waiter of a key this transaction ended (any
 * waiter, after too many keys) is registered.  Caller holds the lock.
 */
static bool
wait_find(void)
{
	int			i;

	if (wait_all)
		return pg_atomic_read_u32(&wait_shared->nwaiting) > 0;
	for (i = 0; i < wait_npending; i++)
	{
		uint64		key = wait_pending[i].key;
		int			s;

		for (s = wait_buckets[key & (wait_shared->nbuckets - 1)]; s != -1;
			 s = wait_slots[s].next)
			if (wait_slots[s].used && wait_slots[s].key == key)
				return true;
	}
	return false;
}

/*
 * wait_take: take slot s out of the table as woken, and remember its
 * latch in wait_latches[*n] unless its backend's is there already.
 * Caller holds the lock exclusively.
 */
static void
wait_take(int s, int *n)
{
	int			owner = wait_slots[s].owner;

	if (!wait_seen[owner])
	{
		wait_seen[owner] = true;
		wait_owners[*n] = owner;
		wait_latches[(*n)++] = wait_slots[s].latch;
	}
	wait_unlink(s);
	pg_atomic_write_u32(&wait_slots[s].woken, 1);
}

/*
 * wait_wake: wake the waiters of the jobs this transaction ended (all of
 * them after too many): take them out of the table, then set their
 * latches.  Runs after the commit: it cannot fail.
 */
static void
wait_wake(void)
{
	int			n = 0;
	int			i;
	bool		found;

	/* the commit is visible before the count is read (see the header) */
	pg_memory_barrier();
	if (wait_shared == NULL || wait_latches == NULL ||
		pg_atomic_read_u32(&wait_shared->nwaiting) == 0)
		return;
	LWLockAcquire(wait_shared->lock, LW_SHARED);
	found = wait_find();
	LWLockRelease(wait_shared->lock);
	if (!found)
		return;

	LWLockAcquire(wait_shared->lock, LW_EXCLUSIVE);
	if (wait_all)
	{
		for (i = 0; i < wait_shared->nslots; i++)
			if (wait_slots[i].used)
				wait_take(i, &n);
	}
	else
	{
		for (i = 0; i < wait_npending; i++)
		{
			uint64		key = wait_pending[i].key;
			int			s = wait_buckets[key & (wait_shared->nbuckets - 1)];

			while (s != -1)
			{
				int			next = wait_slots[s].next;

				if (wait_slots[s].used && wait_slots[s].key == key)
					wait_take(s, &n);
				s = next;
			}
		}
	}
	LWLockRelease(wait_shared->lock);
	/* a latch stays valid: at worst a backend that reused it wakes once */
	for (i = 0; i < n; i++)
	{
		wait_seen[wait_owners[i]] = false;
		SetLatch(wait_latches[i]);
	}
}

/*
 * silo_wait_xact_end: at the end of a top-level transaction, wake the
 * waiters of the jobs a committed one ended; forget the keys either way.
 * An abort (an error, a cancel, a timeout) also ends this backend's own
 * waits: silo.wait_result and silo.wait_any only leave their
 * transactions by committing them.
 */
void
silo_wait_xact_end(bool commit)
{
	if (commit && (wait_npending > 0 || wait_all))
		wait_wake();
	wait_pending = NULL;		/* TopTransactionContext goes with it */
	wait_npending = 0;
	wait_capacity = 0;
	wait_all = false;
	if (!commit)
	{
		silo_wait_unregister();
		silo_wait_many_end();
	}
}

/*
 * silo_wait_subxact_end: a rolled-back subtransaction's keys are
 * forgotten (the jobs it ended are not ended); a committed one's belong
 * to its parent from now on.
 */
void
silo_wait_subxact_end(bool commit)
{
	int			level = GetCurrentTransactionNestLevel();

	if (commit)
	{
		int			i;

		for (i = wait_npending - 1; i >= 0 && wait_pending[i].level >= level; i--)
			wait_pending[i].level = level - 1;
		if (wait_all && wait_all_level >= level)
			wait_all_level = level - 1;
		return;
	}
	while (wait_npending > 0 && wait_pending[wait_npending - 1].level >= level)
		wait_npending--;
	if (wait_all && wait_all_level >= level)
		wait_all = false;
}

/*
 * silo_wait_pre_prepare: refuse PREPARE TRANSACTION when the transaction
 * ended a job (see the header).
 */
void
silo_wait_pre_prepare(void)
{
	if (wait_npending > 0 || wait_all)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot prepare a transaction that ended silo jobs"),
				 errdetail("Sessions waiting in silo.wait_result are woken by the session that commits the end of a job."),
				 errhint("Report, cancel, delete and purge outside two-phase transactions.")));
}
