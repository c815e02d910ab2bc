/*-------------------------------------------------------------------------
 *
 * notify.c
 *	  Wake-up notifications on channel silo_task_ready, coalesced per task
 *	  group, with a trailing edge sent by the broker.
 *
 * A transaction that makes work due for a task group remembers the group
 * (silo_notify_group); at pre-commit it queues one NOTIFY per group.  In
 * PostgreSQL 15 every notifying commit takes a cluster-wide lock, so a
 * NOTIFY per enqueue would serialize producers' commits.  A group is not
 * notified again while another transaction's NOTIFY for it is still in
 * flight (queued at pre-commit, commit not yet done: that is exactly when
 * notifying commits would queue up behind each other), nor within
 * silo.notify_coalesce_ms of the last one.  Skipping alone would lose
 * wake-ups -- the workers woken by the earlier NOTIFY may have looked
 * before this transaction's work was visible -- so after the commit the
 * skipped group is marked pending, and the broker sends the NOTIFY: at
 * once if it was skipped for one in flight, else when the window has
 * passed.  No wake-up is lost; at low rates nothing is delayed, and none
 * comes later than one window after the commit (plus the broker's
 * wake-up).
 *
 * The table is a shared hash keyed by (database OID, task group name) that
 * maps a group to its last NOTIFY time, whether a wake-up is pending and
 * when it is due (the deferring session's window).  A transaction
 * coalesces only in the database the broker serves (silo.database): the
 * broker sends deferred wake-ups in its own database, and a NOTIFY reaches
 * only the listeners of the database it is sent in, so a wake-up deferred
 * in any other database would be lost; there every commit notifies.  A
 * transaction also notifies without coalescing when no broker is running.
 * A clock that stepped back counts as the window having passed.
 *
 * Locking.  The table has an LWLock of its own (tranche "silo notify").
 * Looking an entry up takes it in shared mode, and the entry's fields are
 * then read and written under the entry's spinlock; inserting and removing
 * entries take it in exclusive mode (which also excludes every spinlock
 * holder).  Inside either: no allocation, no error, a few instructions per
 * entry; keys and their hashes are computed before the lock is taken.
 *
 * Freeing.  An entry is idle when no wake-up is pending for it, no NOTIFY
 * for it is in flight (or the count is stale, see below), no transaction
 * that deferred it is between its pre-commit and its commit or abort, no
 * NOTIFY the broker queued for it is waiting for the broker's commit, and
 * its coalescing window -- the largest silo.notify_coalesce_ms of the
 * sessions that used the entry -- has passed since its last NOTIFY.  An
 * idle entry holds nothing but the fact that nothing is happening, so
 * removing it changes no decision (a session with a larger window than
 * every session that used the entry may notify a little earlier than it
 * would have; never later).  Idle entries are removed when a new group
 * finds the table full: the inserting transaction sweeps the whole table
 * under the exclusive lock, at most once a millisecond and not before the
 * earliest moment an entry there can have gone idle (the sweep records
 * it).  The table's capacity (SILO_NOTIFY_ENTRIES) therefore bounds the
 * groups active at once, not the groups ever seen.  A group that finds the
 * table full of active groups is notified at every commit, without
 * coalescing, as before.  The entries a transaction deferred, and those
 * the broker sent in a transaction not yet committed, are never removed,
 * so that the commit's pending mark and the broker's requeue always find
 * them.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_ipc.h"

#include "access/xact.h"
#include "commands/async.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#define NOTIFY_ENTRIES SILO_NOTIFY_ENTRIES
#define NOTIFY_NAME_BYTES SILO_NOTIFY_NAME_BYTES
#define NOTIFY_TRANCHE "silo notify"

/*
 * The hash key.  Hashed and compared as bytes (HASH_BLOBS), so every key
 * is zeroed before the name is copied in: padding and the bytes after the
 * name's terminator are part of the key.
 */
typedef struct NotifyKey
{
	Oid			dbid;
	char		group[NOTIFY_NAME_BYTES];
} NotifyKey;

/*
 * One task group's coalescing state.  Its fields are read and written
 * under its mutex while the table's lock is held shared, or under the
 * lock held exclusively.
 */
typedef struct NotifyEntry
{
	NotifyKey	key;			/* hash key: must be first */
	slock_t		mutex;			/* protects the rest under a shared lock */
	bool		pending;		/* a skipped wake-up awaits the broker */
	TimestampTz last;			/* when the group's last NOTIFY was queued */
	TimestampTz due;			/* when the pending wake-up is to be sent */
	TimestampTz window;			/* largest coalescing window used on it, us */
	int			inflight;		/* NOTIFYs queued whose commit is not done */
	TimestampTz inflight_at;	/* when the last of them was queued */
	int			deferring;		/* deferred at pre-commit, not yet ended */
	int			sender_pid;		/* broker whose NOTIFY awaits its commit */
} NotifyEntry;

/* an in-flight count older than this is a backend that died mid-commit */
#define NOTIFY_INFLIGHT_STALE_US ((TimestampTz) 10 * 1000 * 1000)

/* a full table is swept at most this often */
#define NOTIFY_SWEEP_MIN_US ((TimestampTz) 1000)

typedef struct NotifyShared
{
	LWLock	   *lock;			/* the table's lock */
	pg_atomic_uint32 any_pending;	/* broker's fast check */
	TimestampTz sweep_at;		/* when the last sweep ran (exclusive lock) */
	TimestampTz sweep_after;	/* no entry can go idle before (same) */
} NotifyShared;

static NotifyShared *notify_shared = NULL;
static HTAB *notify_hash = NULL;

/* GUC silo.notify_coalesce_ms (registered by module.c) */
int			silo_notify_coalesce_ms = 1;

/*
 * Whether this backend's database is the one the broker serves: 0 not
 * known yet, 1 yes (its commits coalesce), -1 no (they always notify).
 */
static int	notify_db_state = 0;

/*
 * Task groups this transaction made work for, each with the subtransaction
 * nesting level that added it (a rolled-back subtransaction's groups are
 * forgotten), and whether pre-commit skipped its NOTIFY.
 */
typedef struct NotifyGroup
{
	char	   *task_group;
	int			level;
	bool		deferred;
	bool		inflight;		/* counted in its entry's inflight */
	bool		pinned;			/* counted in its entry's deferring */
	TimestampTz due;			/* deferred: when the window ends */
	bool		keyed;			/* key and hash are set: may be coalesced */
	uint32		hash;
	NotifyKey	key;
} NotifyGroup;

static List *notify_groups = NIL;

/*
 * The names the broker's last silo_notify_send_deferred sent, until its
 * transaction commits (silo_notify_post_commit) or it requeues them: their
 * entries are pinned by sender_pid meanwhile.  The array is the broker's.
 */
static char (*notify_sent)[NOTIFY_NAME_BYTES] = NULL;
static int	notify_nsent = 0;

/*
 * silo_notify_shmem_request / silo_notify_shmem_startup: reserve and
 * initialise the table and its lock (called from shmem.c's hooks, under
 * AddinShmemInitLock).
 */
void
silo_notify_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(NotifyShared)));
	RequestAddinShmemSpace(hash_estimate_size(NOTIFY_ENTRIES, sizeof(NotifyEntry)));
	RequestNamedLWLockTranche(NOTIFY_TRANCHE, 1);
}

void
silo_notify_shmem_startup(void)
{
	bool		found;
	HASHCTL		info;

	notify_shared = ShmemInitStruct("silo notify", sizeof(NotifyShared), &found);
	if (!found)
	{
		notify_shared->lock = &(GetNamedLWLockTranche(NOTIFY_TRANCHE))->lock;
		pg_atomic_init_u32(&notify_shared->any_pending, 0);
		notify_shared->sweep_at = 0;
		notify_shared->sweep_after = 0;
	}

	/* every element is allocated here: the table never asks for more */
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(NotifyKey);
	info.entrysize = sizeof(NotifyEntry);
	notify_hash = ShmemInitHash("silo notify table", NOTIFY_ENTRIES, NOTIFY_ENTRIES,
								&info, HASH_ELEM | HASH_BLOBS);
}

/*
 * notify_key_init: the key of task_group in database dbid.  False when the
 * name does not fit: such a group is never truncated, it is not coalesced.
 */
static bool
notify_key_init(NotifyKey *key, Oid dbid, const char *task_group)
{
	if (strlen(task_group) >= NOTIFY_NAME_BYTES)
		return false;
	memset(key, 0, sizeof(NotifyKey));
	key->dbid = dbid;
	strlcpy(key->group, task_group, sizeof(key->group));
	return true;
}

/*
 * notify_window_passed: whether a NOTIFY at now may follow one at last
 * with window between them.  A clock that stepped back (last in the
 * future) counts as passed, so a clock step never silences a group.
 */
static bool
notify_window_passed(TimestampTz last, TimestampTz now, TimestampTz window)
{
	return now < last || now - last >= window;
}

/*
 * notify_idle: whether e holds nothing but its history, so that removing
 * it changes no decision (the header comment has the conditions).  Caller
 * holds the lock exclusively.
 */
static bool
notify_idle(NotifyEntry *e, TimestampTz now)
{
	return !e->pending && e->deferring == 0 && e->sender_pid == 0 &&
		(e->inflight == 0 ||
		 notify_window_passed(e->inflight_at, now, NOTIFY_INFLIGHT_STALE_US)) &&
		notify_window_passed(e->last, now, e->window);
}

/*
 * notify_sweep: remove every idle entry of the full table, unless the last
 * sweep showed none can be idle yet; records when the next sweep may find
 * one.  Returns whether anything was removed.  Caller holds the lock
 * exclusively.
 */
static bool
notify_sweep(TimestampTz now)
{
	HASH_SEQ_STATUS scan;
	NotifyEntry *e;
	TimestampTz next = 0;
	bool		removed = false;

	/* a clock that stepped back since the last sweep voids its bound */
	if (now < notify_shared->sweep_after && now >= notify_shared->sweep_at)
		return false;
	hash_seq_init(&scan, notify_hash);
	while ((e = (NotifyEntry *) hash_seq_search(&scan)) != NULL)
	{
		TimestampTz idle_at;

		if (notify_idle(e, now))
		{
			hash_search(notify_hash, &e->key, HASH_REMOVE, NULL);
			removed = true;
			continue;
		}
		/* busy for another reason than its window: may end at any time */
		if (notify_window_passed(e->last, now, e->window))
			idle_at = now;
		else
			idle_at = e->last + e->window;
		if (next == 0 || idle_at < next)
			next = idle_at;
	}
	notify_shared->sweep_at = now;
	notify_shared->sweep_after = Max(next, now + NOTIFY_SWEEP_MIN_US);
	return removed;
}

/*
 * notify_enter: the entry for key, inserted (sweeping a full table first)
 * if there is none; NULL when the table is full of active groups.  A new
 * entry has no history, so its first NOTIFY goes out at once.  Caller
 * holds the lock exclusively.
 */
static NotifyEntry *
notify_enter(const NotifyKey *key, uint32 hash, TimestampTz now, TimestampTz window)
{
	NotifyEntry *e;
	bool		found;

	e = (NotifyEntry *) hash_search_with_hash_value(notify_hash, key, hash,
													HASH_FIND, NULL);
	if (e != NULL)
		return e;
	if (hash_get_num_entries(notify_hash) >= NOTIFY_ENTRIES && !notify_sweep(now))
		return NULL;
	e = (NotifyEntry *) hash_search_with_hash_value(notify_hash, key, hash,
													HASH_ENTER_NULL, &found);
	if (e == NULL || found)
		return e;
	SpinLockInit(&e->mutex);
	e->pending = false;
	e->last = 0;
	e->due = 0;
	e->window = window;
	e->inflight = 0;
	e->inflight_at = 0;
	e->deferring = 0;
	e->sender_pid = 0;
	/* it can go idle one window from now: the next sweep must not wait longer */
	if (notify_shared->sweep_after > now + window)
		notify_shared->sweep_after = now + window;
	return e;
}

/*
 * notify_decide: pre-commit's decision for g on its entry: defer it (and
 * pin the entry until the commit) when a NOTIFY for the group is in flight
 * or was queued within the window, else count this one in flight.  Caller
 * holds the lock in either mode.
 */
static void
notify_decide(NotifyEntry *e, NotifyGroup *g, TimestampTz now, TimestampTz window)
{
	bool		busy;
	bool		recent;

	SpinLockAcquire(&e->mutex);
	busy = e->inflight > 0 &&
		!notify_window_passed(e->inflight_at, now, NOTIFY_INFLIGHT_STALE_US);
	recent = !notify_window_passed(e->last, now, window);
	if (window > e->window)
		e->window = window;
	if (busy || recent)
	{
		g->deferred = true;
		g->due = recent ? e->last + window : now;
		e->deferring++;
		g->pinned = true;
	}
	else
	{
		e->last = now;
		e->inflight++;
		e->inflight_at = now;
		g->inflight = true;
	}
	SpinLockRelease(&e->mutex);
}

/*
 * notify_coalesce: look g's entry up under the shared lock and decide; a
 * group without an entry takes the exclusive lock to get one.  A group
 * the full table has no room for is left undecided: it is notified.
 */
static void
notify_coalesce(NotifyGroup *g, TimestampTz now, TimestampTz window)
{
	NotifyEntry *e;

	LWLockAcquire(notify_shared->lock, LW_SHARED);
	e = (NotifyEntry *) hash_search_with_hash_value(notify_hash, &g->key, g->hash,
													HASH_FIND, NULL);
	if (e != NULL)
		notify_decide(e, g, now, window);
	LWLockRelease(notify_shared->lock);
	if (e != NULL)
		return;

	LWLockAcquire(notify_shared->lock, LW_EXCLUSIVE);
	e = notify_enter(&g->key, g->hash, now, window);
	if (e != NULL)
		notify_decide(e, g, now, window);
	LWLockRelease(notify_shared->lock);
}

/*
 * notify_in_brokers_database: whether this backend's database is the one
 * the broker serves (silo.database), so that a deferred wake-up reaches
 * its listeners.  Looked up once per backend, inside a transaction.
 */
static bool
notify_in_brokers_database(void)
{
	if (notify_db_state == 0)
	{
		const char *served = GetConfigOption("silo.database", true, false);
		char	   *mine = get_database_name(MyDatabaseId);

		notify_db_state =
			served != NULL && mine != NULL && strcmp(served, mine) == 0 ? 1 : -1;
		if (mine != NULL)
			pfree(mine);
	}
	return notify_db_state > 0;
}

/*
 * silo_notify_group: remember that task_group has new due work, so that
 * the transaction's commit wakes its workers.  The NOTIFY itself is only
 * ever sent by a committing transaction.  The group's key and hash are
 * computed here, outside any lock.
 */
void
silo_notify_group(const char *task_group)
{
	ListCell   *lc;
	MemoryContext old;
	NotifyGroup *g;

	foreach(lc, notify_groups)
	{
		g = (NotifyGroup *) lfirst(lc);
		if (strcmp(g->task_group, task_group) == 0)
			return;
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	g = palloc(sizeof(NotifyGroup));
	g->task_group = pstrdup(task_group);
	g->level = GetCurrentTransactionNestLevel();
	g->deferred = false;
	g->inflight = false;
	g->pinned = false;
	g->due = 0;
	g->keyed = notify_hash != NULL && notify_in_brokers_database() &&
		notify_key_init(&g->key, MyDatabaseId, task_group);
	g->hash = g->keyed ? get_hash_value(notify_hash, &g->key) : 0;
	notify_groups = lappend(notify_groups, g);
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

	foreach(lc, notify_groups)
	{
		NotifyGroup *g = (NotifyGroup *) lfirst(lc);

		if (g->level < level)
			continue;
		if (commit)
			g->level = level - 1;
		else
			notify_groups = foreach_delete_current(notify_groups, lc);
	}
}

/*
 * silo_notify_pre_commit: queue a NOTIFY for each remembered group, or
 * mark it deferred when a NOTIFY for the group is in flight or was queued
 * within the window.  The decision is stamped here, at pre-commit, so
 * that a transaction that aborts, or stays open for long, never
 * suppresses another's wake-up.
 */
void
silo_notify_pre_commit(void)
{
	ListCell   *lc;
	bool		coalesce;
	TimestampTz now = 0;
	TimestampTz window = (TimestampTz) silo_notify_coalesce_ms * 1000;

	/* Most commits in the cluster have nothing to do with silo. */
	if (notify_groups == NIL)
		return;
	coalesce = notify_shared != NULL && window > 0 && silo_shmem_broker_pid() != 0;
	if (coalesce)
		now = GetCurrentTimestamp();
	foreach(lc, notify_groups)
	{
		NotifyGroup *g = (NotifyGroup *) lfirst(lc);

		if (coalesce && g->keyed)
			notify_coalesce(g, now, window);
		if (!g->deferred)
			Async_Notify(SILO_NOTIFY_CHANNEL, g->task_group);
	}
}

/*
 * notify_settle: the transaction that decided g at pre-commit ended.  Its
 * NOTIFY, if it queued one, is sent (committed) or dropped (aborted) and
 * no longer holds others back; a deferred group is unpinned and, on
 * commit, becomes pending.  Returns whether it newly became pending.  No
 * errors, no allocation: runs in the commit and abort callbacks.
 */
static bool
notify_settle(NotifyGroup *g, bool commit)
{
	NotifyEntry *e;
	bool		newly = false;

	LWLockAcquire(notify_shared->lock, LW_SHARED);
	/* a pinned entry is never removed; a stale in-flight one may be */
	e = (NotifyEntry *) hash_search_with_hash_value(notify_hash, &g->key, g->hash,
													HASH_FIND, NULL);
	Assert(e != NULL || !g->pinned);
	if (e != NULL)
	{
		SpinLockAcquire(&e->mutex);
		if (g->inflight && e->inflight > 0)
			e->inflight--;
		if (g->pinned && e->deferring > 0)
			e->deferring--;
		if (g->pinned && commit)
		{
			if (!e->pending)
			{
				e->pending = true;
				e->due = g->due;
				newly = true;
			}
			else if (g->due < e->due)
				e->due = g->due;
		}
		SpinLockRelease(&e->mutex);
	}
	LWLockRelease(notify_shared->lock);
	g->inflight = false;
	g->pinned = false;
	return newly;
}

/*
 * notify_unpin_sent: the broker's transaction that queued the NOTIFYs in
 * notify_sent committed; their entries may be removed again.
 */
static void
notify_unpin_sent(void)
{
	NotifyKey	key;
	int			i;

	LWLockAcquire(notify_shared->lock, LW_SHARED);
	for (i = 0; i < notify_nsent; i++)
	{
		NotifyEntry *e;

		if (!notify_key_init(&key, MyDatabaseId, notify_sent[i]))
			continue;
		e = (NotifyEntry *) hash_search(notify_hash, &key, HASH_FIND, NULL);
		if (e == NULL)
			continue;
		SpinLockAcquire(&e->mutex);
		if (e->sender_pid == MyProcPid)
			e->sender_pid = 0;
		SpinLockRelease(&e->mutex);
	}
	LWLockRelease(notify_shared->lock);
	notify_sent = NULL;
	notify_nsent = 0;
}

/*
 * silo_notify_post_commit: the transaction committed; its deferred groups
 * become pending, and the broker is woken to send their NOTIFY when the
 * window has passed.  In the broker, the NOTIFYs it sent are out, and
 * their entries unpinned.  Runs in the commit callback: no errors, no
 * allocation.
 */
void
silo_notify_post_commit(void)
{
	ListCell   *lc;
	bool		wake = false;

	if (notify_nsent > 0)
		notify_unpin_sent();
	foreach(lc, notify_groups)
	{
		NotifyGroup *g = (NotifyGroup *) lfirst(lc);

		if ((g->inflight || g->pinned) && notify_settle(g, true))
			wake = true;
	}
	notify_groups = NIL;
	if (wake)
	{
		pg_atomic_write_u32(&notify_shared->any_pending, 1);
		silo_wake_broker_latch();
	}
}

/*
 * silo_notify_forget: the transaction ended without committing (possibly
 * after its pre-commit queued NOTIFYs, which are now never sent): its
 * in-flight counts and pins are dropped, and the list goes away with
 * TopTransactionContext, which still exists in the abort callback.  The
 * broker's sent names stay pinned: silo_notify_requeue follows.
 */
void
silo_notify_forget(void)
{
	ListCell   *lc;

	foreach(lc, notify_groups)
	{
		NotifyGroup *g = (NotifyGroup *) lfirst(lc);

		if (g->inflight || g->pinned)
			notify_settle(g, false);
	}
	notify_groups = NIL;
}

/*
 * silo_notify_any_pending: whether a deferred wake-up waits for the
 * broker (a lock-free check, so an idle broker starts no transaction).
 */
bool
silo_notify_any_pending(void)
{
	return notify_shared != NULL && pg_atomic_read_u32(&notify_shared->any_pending) != 0;
}

/*
 * silo_notify_send_deferred: the broker's side.  Queues, in the current
 * transaction, a NOTIFY for every pending group of its database whose
 * wake-up is due, and returns how long until the next one is due (-1:
 * none pending).  The groups sent are copied to *sent (up to
 * NOTIFY_ENTRIES names), so that silo_notify_requeue can mark them
 * pending again if the transaction fails to commit; their entries stay
 * pinned until then, or until the commit.  The caller keeps sent until
 * either.
 */
long
silo_notify_send_deferred(char (*sent)[SILO_NOTIFY_NAME_BYTES], int *nsent)
{
	long		next_ms = -1;
	TimestampTz now;
	HASH_SEQ_STATUS scan;
	NotifyEntry *e;
	int			i;

	*nsent = 0;
	if (notify_shared == NULL ||
		pg_atomic_exchange_u32(&notify_shared->any_pending, 0) == 0)
		return -1;
	now = GetCurrentTimestamp();
	LWLockAcquire(notify_shared->lock, LW_SHARED);
	hash_seq_init(&scan, notify_hash);
	while ((e = (NotifyEntry *) hash_seq_search(&scan)) != NULL)
	{
		SpinLockAcquire(&e->mutex);
		/* a pin left by a broker that exited before settling its round */
		e->sender_pid = 0;
		if (e->pending && e->key.dbid == MyDatabaseId)
		{
			if (*nsent < NOTIFY_ENTRIES &&
				(now >= e->due || e->due - now > (TimestampTz) 60000 * 1000))
			{
				/* due (or due absurdly late after a clock step): send now */
				memcpy(sent[(*nsent)++], e->key.group, NOTIFY_NAME_BYTES);
				e->pending = false;
				e->last = now;
				e->sender_pid = MyProcPid;
			}
			else
			{
				long		ms = now >= e->due ? 0 : (long) ((e->due - now + 999) / 1000);

				if (next_ms < 0 || ms < next_ms)
					next_ms = ms;
			}
		}
		SpinLockRelease(&e->mutex);
	}
	LWLockRelease(notify_shared->lock);
	notify_sent = sent;
	notify_nsent = *nsent;
	if (next_ms >= 0)
		pg_atomic_write_u32(&notify_shared->any_pending, 1);
	for (i = 0; i < *nsent; i++)
		Async_Notify(SILO_NOTIFY_CHANNEL, sent[i]);
	return next_ms;
}

/*
 * silo_notify_requeue: the broker's transaction that was to send these
 * wake-ups failed; they are pending again, due at once.  Their entries
 * were pinned, so they are all still there; the exclusive lock lets a
 * missing one be entered anyway.
 */
void
silo_notify_requeue(char (*sent)[SILO_NOTIFY_NAME_BYTES], int nsent)
{
	NotifyKey	key;
	TimestampTz now;
	int			i;

	notify_sent = NULL;
	notify_nsent = 0;
	if (notify_shared == NULL || nsent == 0)
		return;
	now = GetCurrentTimestamp();
	LWLockAcquire(notify_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < nsent; i++)
	{
		NotifyEntry *e;

		if (!notify_key_init(&key, MyDatabaseId, sent[i]))
			continue;
		e = notify_enter(&key, get_hash_value(notify_hash, &key), now,
						 (TimestampTz) silo_notify_coalesce_ms * 1000);
		if (e != NULL)
		{
			e->pending = true;
			e->due = 0;
			if (e->sender_pid == MyProcPid)
				e->sender_pid = 0;
		}
	}
	LWLockRelease(notify_shared->lock);
	pg_atomic_write_u32(&notify_shared->any_pending, 1);
}
