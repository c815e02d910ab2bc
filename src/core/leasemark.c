/*-------------------------------------------------------------------------
 *
 * leasemark.c
 *	  Per-group lease marks: where in task_ready order a lease may start.
 *
 * A lease takes the first due tasks of its group in (priority, start_at,
 * seq) order and deletes them.  While any snapshot older than those deletes
 * is open (a long REPEATABLE READ transaction, an idle-in-transaction
 * session, a slow report), neither vacuum nor index scans may remove the
 * deleted rows' index entries, and every lease would walk all of them
 * before reaching a live task: the cost of a lease grows with the number of
 * jobs drained since the snapshot was taken.
 *
 * A mark is a key K such that no due task of the group with a key below K
 * is visible and unlocked.  The lease starts its index scan at K, past the
 * prefix it already took, and afterwards raises K to just past its last
 * task.  The mark lives in shared memory only; a missing mark is the lowest
 * key, so a restart (or a crash, which re-initialises shared memory) starts
 * from the front.
 *
 * The mark stays safe because every change that can put a due task below
 * it lowers it, through a BEFORE ROW trigger on silo.task (fired ALWAYS):
 *	- a due row inserted or updated lowers the mark at once, and again once
 *	  its transaction has committed (the first makes it visible to the next
 *	  lease without delay, the second is what a raise cannot overtake);
 *	- a due row deleted (or updated away) comes back if its transaction
 *	  rolls back, so the rollback lowers the mark to the row's key;
 *	- a lease that rolls back lowers the mark to where it started, which
 *	  also covers rows it only locked.
 * Rows that the lease's scan skipped because another transaction had
 * them locked are found by a check the lease makes before it raises
 * (lease.c, lease_raise_mark): a lock does not always end in a delete.
 * The scan and the check ran with snapshots taken after the lease read the
 * mark, so they can only have missed rows committed (or rolled back) after
 * that read; every such row's lowering after the read is recorded in the
 * entry (lowered), and the raise stops there.  Lowerings and raises are
 * ordered by the table's spinlock: a lowering after the raise simply lowers
 * the raised mark.  Each raise starts a new generation and forgets the
 * lowerings of the old one, so a lease that read the mark before another
 * lease's raise does not raise at all.
 *
 * An invalidation of silo.task's relcache entry (its triggers changed, it
 * was truncated or altered, vacuum updated its statistics) drops the
 * database's marks: rows may have changed while the trigger did not fire.
 *
 * Two-phase commit is refused for transactions that change due tasks: a
 * prepared transaction's rows become visible in another session, whose
 * commit this backend cannot see to lower the mark.
 *
 * The entry of a fair group also holds its rotation's cursor
 * (lease_tenants.c), which needs none of this: it is a hint.
 *
 * The table holds MARK_ENTRIES groups (per database); when a probe window
 * is full, the least recently leased entry is dropped, which is safe (no
 * mark is the lowest key) and makes any raise based on it fail.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_core.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/rel.h"

PG_FUNCTION_INFO_V1(silo_task_mark_trigger);

#define MARK_ENTRIES 4096
#define MARK_PROBE 8
#define MARK_NAME_BYTES SILO_NOTIFY_NAME_BYTES

typedef struct MarkEntry
{
	Oid			db;				/* InvalidOid: free */
	Oid			relid;			/* silo.task of that database */
	uint32		hash;
	uint64		gen;			/* changes with every raise and every reuse */
	uint64		used_at;		/* for eviction: the table's clock at the
								 * last lease */
	SiloMarkKey mark;			/* leases start here */
	SiloMarkKey lowered;		/* lowest key lowered to in this generation */
	char		group[MARK_NAME_BYTES];
	char		tenant[MARK_NAME_BYTES];	/* "": the whole group's mark */
	char		cursor[MARK_NAME_BYTES];	/* a fair group's last tenant
											 * served ("": none) */
} MarkEntry;

/*
 * The (database, silo.task) pairs that have had marks, so that an
 * invalidation of any other relation (a backend processes dozens a second
 * under load, and after a reset of its invalidation queue one for every
 * cached relation) is dismissed without reading the whole table.  Pairs
 * are only ever added (nrels grows, and a pair is written before nrels
 * counts it); past MARK_RELS distinct pairs every invalidation scans.
 */
#define MARK_RELS 16

typedef struct MarkRel
{
	Oid			db;
	Oid			relid;
} MarkRel;

typedef struct MarkShared
{
	slock_t		mutex;
	uint64		clock;			/* generations and use times come from here */
	pg_atomic_uint32 nrels;		/* pairs in rels; MARK_RELS + 1: overflowed */
	MarkRel		rels[MARK_RELS];
	MarkEntry	entries[MARK_ENTRIES];
} MarkShared;

static MarkShared *mark_shared = NULL;

static void mark_forget(Oid relid);

/* the pair this backend last noted, to skip the search on every lease */
static Oid	mark_noted_db = InvalidOid;
static Oid	mark_noted_relid = InvalidOid;

/*
 * mark_note_rel: record (this database, task_relid) among the pairs that
 * have marks, before a mark of it can be raised.  Caller holds the mutex.
 */
static void
mark_note_rel(Oid task_relid)
{
	uint32		n = pg_atomic_read_u32(&mark_shared->nrels);
	uint32		i;

	if (mark_noted_db == MyDatabaseId && mark_noted_relid == task_relid)
		return;
	for (i = 0; i < n && i < MARK_RELS; i++)
		if (mark_shared->rels[i].db == MyDatabaseId &&
			mark_shared->rels[i].relid == task_relid)
			break;
	if (i == n && n < MARK_RELS)
	{
		mark_shared->rels[n].db = MyDatabaseId;
		mark_shared->rels[n].relid = task_relid;
		pg_write_barrier();
		pg_atomic_write_u32(&mark_shared->nrels, n + 1);
	}
	else if (i == n && n == MARK_RELS)
		pg_atomic_write_u32(&mark_shared->nrels, MARK_RELS + 1);
	mark_noted_db = MyDatabaseId;
	mark_noted_relid = task_relid;
}

/*
 * mark_may_have: whether relation relid of this database (InvalidOid: any
 * relation of it) may have marks; false only when it surely has none.
 */
static bool
mark_may_have(Oid relid)
{
	uint32		n = pg_atomic_read_u32(&mark_shared->nrels);
	uint32		i;

	if (n > MARK_RELS)
		return true;
	pg_read_barrier();
	for (i = 0; i < n; i++)
		if (mark_shared->rels[i].db == MyDatabaseId &&
			(relid == InvalidOid || mark_shared->rels[i].relid == relid))
			return true;
	return false;
}

/*
 * A lowering this transaction owes at commit or at rollback, per group,
 * tenant ("": the group's mark only) and kind, in a hash of the
 * transaction's memory (a batch may touch many tenants); the entry used
 * last is tried first.
 */
typedef struct MarkOwedKey
{
	char		task_group[MARK_NAME_BYTES];
	char		tenant[MARK_NAME_BYTES];
	bool		at_commit;		/* else at rollback */
} MarkOwedKey;

typedef struct MarkOwed
{
	MarkOwedKey k;				/* hash key */
	SiloMarkKey key;
} MarkOwed;

static HTAB *mark_owed = NULL;
static MarkOwed *mark_owed_last = NULL;

const SiloMarkKey silo_mark_lowest = {PG_INT16_MIN, PG_INT64_MIN, PG_INT64_MIN};
const SiloMarkKey silo_mark_highest = {PG_INT16_MAX, PG_INT64_MAX, PG_INT64_MAX};

/*
 * silo_mark_cmp: order of two keys, as task_ready orders (priority,
 * start_at, seq).
 */
int
silo_mark_cmp(const SiloMarkKey *a, const SiloMarkKey *b)
{
	if (a->priority != b->priority)
		return a->priority < b->priority ? -1 : 1;
	if (a->start_at != b->start_at)
		return a->start_at < b->start_at ? -1 : 1;
	if (a->seq != b->seq)
		return a->seq < b->seq ? -1 : 1;
	return 0;
}

/*
 * silo_mark_shmem_request / silo_mark_shmem_startup: reserve and
 * initialise the table (from shmem.c's hooks, under AddinShmemInitLock).
 */
void
silo_mark_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(MarkShared)));
}

void
silo_mark_shmem_startup(void)
{
	bool		found;

	mark_shared = ShmemInitStruct("silo lease marks", sizeof(MarkShared), &found);
	if (!found)
	{
		memset(mark_shared, 0, sizeof(MarkShared));
		SpinLockInit(&mark_shared->mutex);
		mark_shared->clock = 1;
		pg_atomic_init_u32(&mark_shared->nrels, 0);
	}
}

/*
 * mark_find: the entry of (this database, group, tenant) -- tenant "" for
 * the group's own mark -- or NULL.  With create, claims a free slot of the
 * probe window, or the least recently used one.  Caller holds the mutex.
 */
static MarkEntry *
mark_find(const char *task_group, const char *tenant, bool create)
{
	size_t		len = strlen(task_group);
	size_t		tlen = strlen(tenant);
	uint32		h;
	MarkEntry  *victim = NULL;
	int			i;

	if (len >= MARK_NAME_BYTES || tlen >= MARK_NAME_BYTES)
		return NULL;
	h = hash_combine(hash_bytes((const unsigned char *) task_group, len),
					 hash_bytes((const unsigned char *) tenant, tlen)) ^ MyDatabaseId;
	for (i = 0; i < MARK_PROBE; i++)
	{
		MarkEntry  *e = &mark_shared->entries[(h + i) % MARK_ENTRIES];

		if (e->db == MyDatabaseId && e->hash == h && strcmp(e->group, task_group) == 0 &&
			strcmp(e->tenant, tenant) == 0)
			return e;
		if (victim == NULL || (victim->db != InvalidOid &&
							   (e->db == InvalidOid || e->used_at < victim->used_at)))
			victim = e;
	}
	if (!create)
		return NULL;
	victim->db = MyDatabaseId;
	victim->hash = h;
	victim->gen = mark_shared->clock++;
	victim->used_at = 0;
	victim->mark = silo_mark_lowest;
	victim->lowered = silo_mark_highest;
	strlcpy(victim->group, task_group, sizeof(victim->group));
	strlcpy(victim->tenant, tenant, sizeof(victim->tenant));
	victim->cursor[0] = '\0';
	return victim;
}

/*
 * mark_lower_entry: lower one entry's mark to key; with record, also
 * remember the lowering for raises in flight.  Caller holds the mutex.
 */
static void
mark_lower_entry(MarkEntry *e, const SiloMarkKey *key, bool record)
{
	if (e == NULL)
		return;
	if (silo_mark_cmp(key, &e->mark) < 0)
		e->mark = *key;
	if (record && silo_mark_cmp(key, &e->lowered) < 0)
		e->lowered = *key;
}

/*
 * mark_lower: a due task of tenant at key appeared (or may have): lower
 * the group's mark and the tenant's to key.  tenant NULL: the group's
 * only (a tenant's mark is owed its own lowering).
 */
static void
mark_lower(const char *task_group, const char *tenant, const SiloMarkKey *key, bool record)
{
	if (mark_shared == NULL)
		return;
	SpinLockAcquire(&mark_shared->mutex);
	mark_lower_entry(mark_find(task_group, "", false), key, record);
	if (tenant != NULL && tenant[0] != '\0')
		mark_lower_entry(mark_find(task_group, tenant, false), key, record);
	SpinLockRelease(&mark_shared->mutex);
}

/*
 * silo_mark_begin: a lease's first step.  Returns the key its scan starts
 * at and the generation a raise must find unchanged, and owes a lowering
 * back to that key should the lease's transaction roll back.  Must run
 * before the scan takes its snapshot.  tenant "" is the group's mark, a
 * tenant's the mark of its range of task_ready_tenant.
 */
void
silo_mark_begin(const char *task_group, const char *tenant, Oid task_relid,
				SiloMarkKey *start, uint64 *gen)
{
	MarkEntry  *e = NULL;

	*start = silo_mark_lowest;
	*gen = 0;
	if (mark_shared == NULL)
		return;
	SpinLockAcquire(&mark_shared->mutex);
	mark_note_rel(task_relid);
	e = mark_find(task_group, tenant, true);
	if (e != NULL)
	{
		if (e->relid != task_relid)
		{
			/* a new silo.task (the extension was re-created): start over */
			e->relid = task_relid;
			e->mark = silo_mark_lowest;
			e->lowered = silo_mark_highest;
			e->gen = mark_shared->clock++;
		}
		*start = e->mark;
		*gen = e->gen;
		e->used_at = mark_shared->clock++;
	}
	SpinLockRelease(&mark_shared->mutex);
	silo_mark_owe(task_group, tenant, start, false);
}

/*
 * silo_mark_raise: after a lease whose scan started at the mark read by
 * silo_mark_begin (generation gen) and took tasks up to just below key:
 * raise the mark to key, or to the lowest lowering since, unless another
 * raise came first.
 */
void
silo_mark_raise(const char *task_group, const char *tenant, uint64 gen, const SiloMarkKey *key)
{
	MarkEntry  *e;

	if (mark_shared == NULL || gen == 0)
		return;
	SpinLockAcquire(&mark_shared->mutex);
	e = mark_find(task_group, tenant, false);
	if (e != NULL && e->gen == gen)
	{
		const SiloMarkKey *to = silo_mark_cmp(&e->lowered, key) < 0 ? &e->lowered : key;

		if (silo_mark_cmp(to, &e->mark) > 0)
			e->mark = *to;
		e->lowered = silo_mark_highest;
		e->gen = mark_shared->clock++;
	}
	SpinLockRelease(&mark_shared->mutex);
}

/*
 * silo_mark_cursor_get: where a fair group's rotation stands: the tenant
 * served last (palloc'd), or NULL to start from the first tenant.  A hint
 * only (lease_tenants.c): a lost entry restarts the rotation.
 */
char *
silo_mark_cursor_get(const char *task_group)
{
	MarkEntry  *e;
	char	   *cursor = NULL;
	char		copy[MARK_NAME_BYTES];

	if (mark_shared == NULL)
		return NULL;
	SpinLockAcquire(&mark_shared->mutex);
	e = mark_find(task_group, "", true);
	if (e != NULL && e->cursor[0] != '\0')
	{
		memcpy(copy, e->cursor, sizeof(copy));
		cursor = copy;
	}
	SpinLockRelease(&mark_shared->mutex);
	return cursor ? pstrdup(cursor) : NULL;
}

/*
 * silo_mark_cursor_set: a fair group's rotation has served tenant; the
 * next turn, of whichever lease, goes to the tenant after it.
 */
void
silo_mark_cursor_set(const char *task_group, const char *tenant)
{
	MarkEntry  *e;

	if (mark_shared == NULL || strlen(tenant) >= MARK_NAME_BYTES)
		return;
	SpinLockAcquire(&mark_shared->mutex);
	e = mark_find(task_group, "", false);
	if (e != NULL)
		strlcpy(e->cursor, tenant, sizeof(e->cursor));
	SpinLockRelease(&mark_shared->mutex);
}

/*
 * mark_appeared: a due task of tenant ("" for "-") at key was written:
 * lower the marks now, and owe the lowering again at commit, when the task
 * becomes visible to the leases that raised the marks meanwhile.
 */
static void
mark_appeared(const char *task_group, const char *tenant, const SiloMarkKey *key)
{
	mark_lower(task_group, tenant, key, false);
	silo_mark_owe(task_group, tenant, key, true);
}

/*
 * silo_mark_task_appeared: what task_lease_mark does for an inserted row,
 * for a due task written without the trigger (storage's direct writer).
 */
void
silo_mark_task_appeared(const SiloTaskRow *task)
{
	SiloMarkKey key;

	Assert(task->due);
	key.priority = (int16) task->priority;
	key.start_at = task->start_at;
	key.seq = task->seq;
	mark_appeared(task->task_group, strcmp(task->tenant, "-") == 0 ? "" : task->tenant, &key);
}

/*
 * silo_mark_owe: remember a lowering to key that this transaction owes at
 * commit (at_commit) or at rollback: of the group's mark and, unless
 * tenant is "", of the tenant's.  Keeps the lowest key per group, tenant
 * and kind.
 */
void
silo_mark_owe(const char *task_group, const char *tenant, const SiloMarkKey *key,
			  bool at_commit)
{
	MarkOwed   *o = mark_owed_last;
	MarkOwedKey k;
	bool		found;

	if (o == NULL || o->k.at_commit != at_commit || strcmp(o->k.task_group, task_group) != 0 ||
		strcmp(o->k.tenant, tenant) != 0)
	{
		if (strlen(task_group) >= MARK_NAME_BYTES || strlen(tenant) >= MARK_NAME_BYTES)
			elog(ERROR, "silo: task group or tenant name too long for a lease mark");
		if (mark_owed == NULL)
		{
			HASHCTL		ctl;

			ctl.keysize = sizeof(MarkOwedKey);
			ctl.entrysize = sizeof(MarkOwed);
			ctl.hcxt = TopTransactionContext;
			mark_owed = hash_create("silo owed lease mark lowerings", 16, &ctl,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		}
		memset(&k, 0, sizeof(k));
		strlcpy(k.task_group, task_group, sizeof(k.task_group));
		strlcpy(k.tenant, tenant, sizeof(k.tenant));
		k.at_commit = at_commit;
		o = hash_search(mark_owed, &k, HASH_ENTER, &found);
		if (!found)
			o->key = *key;
		mark_owed_last = o;
	}
	if (silo_mark_cmp(key, &o->key) < 0)
		o->key = *key;
}

/*
 * mark_pay: carry out the owed lowerings of one kind.
 */
static void
mark_pay(bool at_commit)
{
	HASH_SEQ_STATUS seq;
	MarkOwed   *o;

	if (mark_owed == NULL)
		return;
	hash_seq_init(&seq, mark_owed);
	while ((o = hash_seq_search(&seq)) != NULL)
		if (o->k.at_commit == at_commit)
			mark_lower(o->k.task_group, o->k.tenant, &o->key, true);
}

/*
 * silo_mark_xact_end: at the end of the top-level transaction, pay what
 * its outcome owes and forget the rest (the hash's memory goes with the
 * transaction).
 */
void
silo_mark_xact_end(bool commit)
{
	mark_pay(commit);
	mark_owed = NULL;
	mark_owed_last = NULL;
}

/*
 * silo_mark_subxact_abort: rows deleted in a rolled-back subtransaction
 * are back.  Pays every rollback lowering owed so far (more than needed,
 * never too little) and keeps them owed for the top-level transaction.
 */
void
silo_mark_subxact_abort(void)
{
	mark_pay(false);
}

/*
 * silo_mark_pre_prepare: refuse PREPARE TRANSACTION when the transaction
 * changed due tasks (see the file header).
 */
void
silo_mark_pre_prepare(void)
{
	if (mark_owed != NULL && hash_get_num_entries(mark_owed) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot prepare a transaction that changed silo's due tasks"),
				 errdetail("Silo's lease marks are kept in the session that commits a change to silo.task."),
				 errhint("Enqueue, lease and report outside two-phase transactions.")));
}

/* The columns mark_row_key reads, by number, for one version of silo.task. */
enum
{
	MC_DUE, MC_GROUP, MC_TENANT, MC_PRIORITY, MC_START_AT, MC_SEQ, MC_NCOLS
};
static const char *const mark_col_names[MC_NCOLS] = {
	"due", "task_group", "tenant", "priority", "start_at", "seq"
};
static Oid	mark_cols_relid = InvalidOid;
static TupleDesc mark_cols_desc = NULL;
static int	mark_cols[MC_NCOLS];

/*
 * mark_cols_valid: whether the remembered column numbers still name the
 * columns in desc (a descriptor at a reused address may be another).
 */
static bool
mark_cols_valid(TupleDesc desc)
{
	int			i;

	for (i = 0; i < MC_NCOLS; i++)
	{
		Form_pg_attribute att;

		if (mark_cols[i] <= 0 || mark_cols[i] > desc->natts)
			return false;
		att = TupleDescAttr(desc, mark_cols[i] - 1);
		if (att->attisdropped || strcmp(NameStr(att->attname), mark_col_names[i]) != 0)
			return false;
	}
	return true;
}

/*
 * mark_row_key: the group, tenant and key of a silo.task row; false when
 * the row is not due (it is not in task_ready).  The default tenant's
 * rows have no tenant mark: *tenant is "" for them.  The column numbers
 * are looked up once per descriptor, and checked by name each time.
 */
static bool
mark_row_key(Relation rel, HeapTuple tup, char **task_group, char **tenant, SiloMarkKey *key)
{
	TupleDesc	desc = RelationGetDescr(rel);
	bool		isnull;
	Datum		d;
	int			i;

	if (mark_cols_relid != RelationGetRelid(rel) || mark_cols_desc != desc ||
		!mark_cols_valid(desc))
	{
		for (i = 0; i < MC_NCOLS; i++)
			mark_cols[i] = SPI_fnumber(desc, mark_col_names[i]);
		mark_cols_relid = RelationGetRelid(rel);
		mark_cols_desc = desc;
	}
	d = heap_getattr(tup, mark_cols[MC_DUE], desc, &isnull);
	if (isnull || !DatumGetBool(d))
		return false;
	*task_group = TextDatumGetCString(heap_getattr(tup, mark_cols[MC_GROUP], desc, &isnull));
	*tenant = TextDatumGetCString(heap_getattr(tup, mark_cols[MC_TENANT], desc, &isnull));
	if (strcmp(*tenant, "-") == 0)
		*tenant = "";
	key->priority = DatumGetInt16(heap_getattr(tup, mark_cols[MC_PRIORITY], desc, &isnull));
	key->start_at = DatumGetTimestampTz(heap_getattr(tup, mark_cols[MC_START_AT], desc,
													 &isnull));
	key->seq = DatumGetInt64(heap_getattr(tup, mark_cols[MC_SEQ], desc, &isnull));
	return true;
}

/*
 * silo_task_mark_trigger: BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW
 * on silo.task.  A due row that appears lowers its group's mark now and
 * owes it again at commit; a due row that goes owes a lowering at
 * rollback.
 */
Datum
silo_task_mark_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	char	   *task_group;
	char	   *tenant;
	SiloMarkKey key;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BEFORE(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("silo_task_mark_trigger must be a BEFORE ROW trigger")));

	if (!TRIGGER_FIRED_BY_INSERT(td->tg_event) &&
		mark_row_key(td->tg_relation, td->tg_trigtuple, &task_group, &tenant, &key))
		silo_mark_owe(task_group, tenant, &key, false);

	if (TRIGGER_FIRED_BY_DELETE(td->tg_event))
		return PointerGetDatum(td->tg_trigtuple);
	else
	{
		HeapTuple	newtup = TRIGGER_FIRED_BY_INSERT(td->tg_event)
			? td->tg_trigtuple : td->tg_newtuple;

		if (mark_row_key(td->tg_relation, newtup, &task_group, &tenant, &key))
			mark_appeared(task_group, tenant, &key);
		return PointerGetDatum(newtup);
	}
}

/*
 * silo_mark_enabled: whether leases may use marks, i.e. whether the
 * trigger that keeps them safe is installed on silo.task and fires always
 * (an extension still at 1.2 under this library has none).  Found in the
 * relation's cached trigger list; a table without it also forgets the
 * database's marks, which may have missed changes meanwhile.
 */
bool
silo_mark_enabled(Relation task_rel)
{
	TriggerDesc *trig = task_rel->trigdesc;
	int			i;
	bool		enabled = false;

	for (i = 0; trig != NULL && i < trig->numtriggers; i++)
	{
		Trigger    *t = &trig->triggers[i];

		if (strcmp(t->tgname, "task_lease_mark") == 0 &&
			t->tgenabled == TRIGGER_FIRES_ALWAYS)
			enabled = true;
	}
	if (!enabled)
		mark_forget(InvalidOid);
	return enabled;
}

/*
 * mark_forget: drop the marks of this database kept for relation relid,
 * or all of them for InvalidOid (no mark is the lowest key, always safe).
 * It runs for every relcache invalidation of any relation, so it first
 * looks without the lock: an entry's relid only changes when a lease
 * (re)starts it at the lowest key, which leaves nothing to drop.  The
 * entries stay, reset to the lowest key in a new generation (a raise
 * based on the old one fails, as for a freed entry): a fair group's
 * rotation cursor is a hint that no invalidation makes wrong, and losing
 * it whenever autovacuum updated silo.task's statistics restarted the
 * rotation at the first tenant at random moments.
 */
static void
mark_forget(Oid relid)
{
	int			i;

	if (mark_shared == NULL || !mark_may_have(relid))
		return;
	for (i = 0; i < MARK_ENTRIES; i++)
	{
		volatile MarkEntry *e = &mark_shared->entries[i];

		if (e->db == MyDatabaseId && (relid == InvalidOid || e->relid == relid))
			break;
	}
	if (i == MARK_ENTRIES)
		return;
	SpinLockAcquire(&mark_shared->mutex);
	for (i = 0; i < MARK_ENTRIES; i++)
	{
		MarkEntry  *e = &mark_shared->entries[i];

		if (e->db == MyDatabaseId && (relid == InvalidOid || e->relid == relid))
		{
			e->mark = silo_mark_lowest;
			e->lowered = silo_mark_highest;
			e->gen = mark_shared->clock++;
		}
	}
	SpinLockRelease(&mark_shared->mutex);
}

/*
 * silo_mark_forget_database: drop every lease mark of this database (a
 * shard's rows arrived from another node: leases start from the front).
 */
void
silo_mark_forget_database(void)
{
	mark_forget(InvalidOid);
}

/*
 * mark_relcache_callback: silo.task's cached definition is being
 * invalidated -- its triggers changed (disabled, re-enabled, dropped,
 * re-created), it was truncated or altered, or vacuum updated its
 * statistics.  Rows may have changed while the trigger did not fire, so
 * the marks go.  Every backend that sees the invalidation does this; a
 * lease sees it when it locks the table, before it reads its mark.
 */
static void
mark_relcache_callback(Datum arg, Oid relid)
{
	mark_forget(relid);
}

/*
 * silo_mark_init: register the invalidation callback (from _PG_init, so
 * every backend has it).
 */
void
silo_mark_init(void)
{
	CacheRegisterRelcacheCallback(mark_relcache_callback, (Datum) 0);
}
