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
 * The table maps a group to its last NOTIFY time, whether a wake-up is
 * pending and when it is due (the deferring session's window), one entry
 * per group (open addressing; entries are never reused for another group,
 * so at most NOTIFY_ENTRIES groups are coalesced and any further ones are
 * always notified), under one spinlock held for a few instructions.  A
 * transaction notifies without coalescing when no broker is running.  A
 * clock that stepped back counts as the window having passed.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_ipc.h"

#include "access/xact.h"
#include "commands/async.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "port/atomics.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/memutils.h"

#define NOTIFY_ENTRIES SILO_NOTIFY_ENTRIES
#define NOTIFY_NAME_BYTES SILO_NOTIFY_NAME_BYTES

typedef struct NotifyEntry
{
	bool		used;
	bool		pending;		/* a skipped wake-up awaits the broker */
	TimestampTz last;			/* when the group's last NOTIFY was queued */
	TimestampTz due;			/* when the pending wake-up is to be sent */
	int			inflight;		/* NOTIFYs queued whose commit is not done */
	TimestampTz inflight_at;	/* when the last of them was queued */
	char		group[NOTIFY_NAME_BYTES];
} NotifyEntry;

/* an in-flight count older than this is a backend that died mid-commit */
#define NOTIFY_INFLIGHT_STALE_US ((TimestampTz) 10 * 1000 * 1000)

typedef struct NotifyShared
{
	slock_t		mutex;
	pg_atomic_uint32 any_pending;	/* broker's fast check */
	NotifyEntry entries[NOTIFY_ENTRIES];
} NotifyShared;

static NotifyShared *notify_shared = NULL;

/* GUC silo.notify_coalesce_ms (registered by module.c) */
int			silo_notify_coalesce_ms = 1;

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
	TimestampTz due;			/* deferred: when the window ends */
} NotifyGroup;

static List *notify_groups = NIL;

/*
 * silo_notify_shmem_request / silo_notify_shmem_startup: reserve and
 * initialise the table (called from shmem.c's hooks, under
 * AddinShmemInitLock).
 */
void
silo_notify_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(NotifyShared)));
}

void
silo_notify_shmem_startup(void)
{
	bool		found;

	notify_shared = ShmemInitStruct("silo notify", sizeof(NotifyShared), &found);
	if (!found)
	{
		memset(notify_shared, 0, sizeof(NotifyShared));
		SpinLockInit(&notify_shared->mutex);
		pg_atomic_init_u32(&notify_shared->any_pending, 0);
	}
}

/*
 * notify_find: the group's entry, claimed if it has none yet; NULL when
 * the table is full.  Caller holds the mutex.
 */
static NotifyEntry *
notify_find(const char *task_group)
{
	size_t		len = strlen(task_group);
	uint32		h = hash_bytes((const unsigned char *) task_group, len);
	int			i;

	if (len >= NOTIFY_NAME_BYTES)
		return NULL;			/* never truncate: such a group is not coalesced */
	for (i = 0; i < NOTIFY_ENTRIES; i++)
	{
		NotifyEntry *e = &notify_shared->entries[(h + i) % NOTIFY_ENTRIES];

		if (!e->used)
		{
			e->used = true;
			e->pending = false;
			e->last = 0;
			e->inflight = 0;
			strlcpy(e->group, task_group, sizeof(e->group));
			return e;
		}
		if (strcmp(e->group, task_group) == 0)
			return e;
	}
	return NULL;
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
 * silo_notify_group: remember that task_group has new due work, so that
 * the transaction's commit wakes its workers.  The NOTIFY itself is only
 * ever sent by a committing transaction.
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
	g->due = 0;
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

		if (coalesce)
		{
			NotifyEntry *e;

			SpinLockAcquire(&notify_shared->mutex);
			e = notify_find(g->task_group);
			if (e != NULL)
			{
				bool		busy = e->inflight > 0 &&
					!notify_window_passed(e->inflight_at, now, NOTIFY_INFLIGHT_STALE_US);
				bool		recent = !notify_window_passed(e->last, now, window);

				if (busy || recent)
				{
					g->deferred = true;
					g->due = recent ? e->last + window : now;
				}
				else
				{
					e->last = now;
					e->inflight++;
					e->inflight_at = now;
					g->inflight = true;
				}
			}
			SpinLockRelease(&notify_shared->mutex);
		}
		if (!g->deferred)
			Async_Notify(SILO_NOTIFY_CHANNEL, g->task_group);
	}
}

/*
 * notify_inflight_done: the NOTIFY this transaction queued for g is sent
 * (committed) or dropped (aborted); it no longer holds others back.
 */
static void
notify_inflight_done(NotifyGroup *g)
{
	NotifyEntry *e;

	SpinLockAcquire(&notify_shared->mutex);
	e = notify_find(g->task_group);
	if (e != NULL && e->inflight > 0)
		e->inflight--;
	SpinLockRelease(&notify_shared->mutex);
	g->inflight = false;
}

/*
 * silo_notify_post_commit: the transaction committed; its deferred groups
 * become pending, and the broker is woken to send their NOTIFY when the
 * window has passed.  Runs in the commit callback: no errors, no
 * allocation.
 */
void
silo_notify_post_commit(void)
{
	ListCell   *lc;
	bool		wake = false;

	foreach(lc, notify_groups)
	{
		NotifyGroup *g = (NotifyGroup *) lfirst(lc);
		NotifyEntry *e;

		if (g->inflight)
			notify_inflight_done(g);
		if (!g->deferred)
			continue;
		SpinLockAcquire(&notify_shared->mutex);
		e = notify_find(g->task_group);
		if (e != NULL && !e->pending)
		{
			e->pending = true;
			e->due = g->due;
			wake = true;
		}
		else if (e != NULL && g->due < e->due)
			e->due = g->due;
		SpinLockRelease(&notify_shared->mutex);
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
 * in-flight counts are dropped, and the list goes away with
 * TopTransactionContext, which still exists in the abort callback.
 */
void
silo_notify_forget(void)
{
	ListCell   *lc;

	foreach(lc, notify_groups)
	{
		NotifyGroup *g = (NotifyGroup *) lfirst(lc);

		if (g->inflight)
			notify_inflight_done(g);
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
 * transaction, a NOTIFY for every pending group whose wake-up is due,
 * and returns how long until the next one is due (-1: none pending).  The
 * groups sent are copied to *sent (up to NOTIFY_ENTRIES names), so that
 * silo_notify_requeue can mark them pending again if the transaction
 * fails to commit.
 */
long
silo_notify_send_deferred(char (*sent)[SILO_NOTIFY_NAME_BYTES], int *nsent)
{
	long		next_ms = -1;
	TimestampTz now;
	int			i;

	*nsent = 0;
	if (notify_shared == NULL ||
		pg_atomic_exchange_u32(&notify_shared->any_pending, 0) == 0)
		return -1;
	now = GetCurrentTimestamp();
	SpinLockAcquire(&notify_shared->mutex);
	for (i = 0; i < NOTIFY_ENTRIES; i++)
	{
		NotifyEntry *e = &notify_shared->entries[i];

		if (!e->used || !e->pending)
			continue;
		if (now >= e->due || e->due - now > (TimestampTz) 60000 * 1000)
		{
			/* due (or due absurdly late after a clock step): send now */
			memcpy(sent[(*nsent)++], e->group, NOTIFY_NAME_BYTES);
			e->pending = false;
			e->last = now;
		}
		else
		{
			long		ms = (long) ((e->due - now + 999) / 1000);

			if (next_ms < 0 || ms < next_ms)
				next_ms = ms;
		}
	}
	SpinLockRelease(&notify_shared->mutex);
	if (next_ms >= 0)
		pg_atomic_write_u32(&notify_shared->any_pending, 1);
	for (i = 0; i < *nsent; i++)
		Async_Notify(SILO_NOTIFY_CHANNEL, sent[i]);
	return next_ms;
}

/*
 * silo_notify_requeue: the broker's transaction that was to send these
 * wake-ups failed; they are pending again, due at once.
 */
void
silo_notify_requeue(char (*sent)[SILO_NOTIFY_NAME_BYTES], int nsent)
{
	int			i;

	if (notify_shared == NULL || nsent == 0)
		return;
	SpinLockAcquire(&notify_shared->mutex);
	for (i = 0; i < nsent; i++)
	{
		NotifyEntry *e = notify_find(sent[i]);

		if (e != NULL)
		{
			e->pending = true;
			e->due = 0;
		}
	}
	SpinLockRelease(&notify_shared->mutex);
	pg_atomic_write_u32(&notify_shared->any_pending, 1);
}
