/*-------------------------------------------------------------------------
 *
 * wait_any.c
 *	  The work of silo.wait_any: one session waits for the first of many
 *	  jobs to end, holding neither a snapshot nor an xid while asleep.
 *
 * silo.wait_result needs a session per awaited job, and a session is a
 * backend: a thousand callers awaiting a thousand jobs keep a thousand
 * backends, which cost every other backend of the server something
 * (docs/performance.md measures it), whether they sleep or not.
 * silo.wait_any lets one session await many jobs: client libraries
 * gather their callers' awaits onto a few sessions.
 *
 * It works as silo.wait_result does (wait.c), with many keys: a look at
 * every job (one statement: the positions of the jobs that are no longer
 * Pending, or are gone); when none has ended, every job's key goes into
 * the waiters' table (a pool slot each, ipc/waiters.c), a second look
 * under a snapshot taken after that closes the race with a commit in
 * between, and the procedure commits and sleeps on its latch.  A wake-up
 * names the positions whose jobs a commit ended; only those are looked at
 * again.  One that is still Pending (a key shared by two jobs, a job
 * ended and restarted, every waiter woken by a shard that left) is put
 * back in the table and looked at once more.  The call returns the ids
 * of the jobs found ended or gone at the first look that found any, or
 * none at the timeout.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_core.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#define WAIT_ANY_FN "silo.wait_any"

/*
 * any_look: look, as owner, at the jobs at positions which[0..nwhich) of
 * ids (of tenant): mark in ended[] those that are no longer Pending or
 * that do not exist, and return how many were newly marked.
 */
static int
any_look(const char *tenant, char **ids, const int *which, int nwhich,
		 Oid owner, bool *ended)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {TEXTOID, TEXTARRAYOID};
	SiloWaitLook look;
	Datum	   *elems = palloc(nwhich * sizeof(Datum));
	Datum		args[2];
	uint64		r;
	int			i;
	int			k = 0;

	for (i = 0; i < nwhich; i++)
		elems[i] = CStringGetTextDatum(ids[which[i]]);
	args[0] = CStringGetTextDatum(tenant);
	args[1] = PointerGetDatum(construct_array(elems, nwhich, TEXTOID, -1, false, TYPALIGN_INT));

	silo_wait_look_enter(WAIT_ANY_FN, tenant, owner, &look);
	silo_spi_connect();
	silo_exec(&plan,
			  "SELECT u.i::int4 FROM unnest($2) WITH ORDINALITY AS u(id, i)"
			  " WHERE NOT EXISTS (SELECT 1 FROM silo.job_status s"
			  "   WHERE s.tenant = $1 AND s.id = u.id AND s.status = 'Pending')",
			  2, types, args, NULL, true, 0);
	for (r = 0; r < SPI_processed; r++)
	{
		int			pos = which[silo_col_int32((int) r, 1) - 1];

		if (!ended[pos])
		{
			ended[pos] = true;
			k++;
		}
	}
	silo_spi_finish();
	silo_wait_look_leave(&look);
	return k;
}

/*
 * any_sleep: sleep until a commit wakes some of this backend's positions
 * (put into which[]; their count is returned), or 0 once timeout_us have
 * passed since start.
 */
static int
any_sleep(int *which, instr_time start, int64 timeout_us)
{
	int			n;

	while ((n = silo_wait_many_take(which)) == 0)
		if (!silo_wait_nap(start, timeout_us))
			return 0;
	return n;
}

/*
 * any_look_twice: look at positions which[0..nwhich) (any_look); when
 * none has ended, put them in the waiters' table -- all n of keys the
 * first time (keys given), the woken ones again after a wake-up (keys
 * NULL) -- and look again under a snapshot taken after that, so that an
 * end committed in between is seen or wakes them.  Returns how many
 * were found ended.
 */
static int
any_look_twice(const char *tenant, char **ids, const int *which, int nwhich,
			   const uint64 *keys, Oid owner, bool *ended)
{
	int			found = any_look(tenant, ids, which, nwhich, owner, ended);

	if (found > 0)
		return found;
	if (keys != NULL)
		silo_wait_many_register(keys, nwhich);
	else
		silo_wait_many_relink(which, nwhich);
	return any_look(tenant, ids, which, nwhich, owner, ended);
}

/*
 * silo_job_wait_any: the work of silo.wait_any (api/jobs.c checked the
 * arguments, ran the prologue in the CALL's transaction and made sure the
 * call may commit): wait at most timeout_us for one of the jobs ids[0..n)
 * of tenant to end, then mark in ended[] every job found ended or gone by
 * that look and return how many; 0 at the timeout.  owner is the
 * procedure's owner, whose rights each look uses.  53400 when the pool of
 * silo.max_wait_any_jobs has too few free places.  On return the caller
 * is in a transaction that may be a new one.
 */
int
silo_job_wait_any(const char *tenant, char **ids, int n, int64 timeout_us, Oid owner,
				  bool *ended)
{
	MemoryContext callcxt = CurrentMemoryContext;
	MemoryContext lookcxt;
	MemoryContext old;
	instr_time	start;
	uint64	   *keys;
	int		   *all;
	int		   *which;
	int			nwhich;
	int			found;
	int			i;

	INSTR_TIME_SET_CURRENT(start);
	keys = palloc(n * sizeof(uint64));
	all = palloc(n * sizeof(int));
	which = palloc(n * sizeof(int));
	for (i = 0; i < n; i++)
	{
		keys[i] = silo_wait_key(tenant, strlen(tenant), ids[i], strlen(ids[i]));
		all[i] = i;
		ended[i] = false;
	}
	lookcxt = AllocSetContextCreate(callcxt, "silo wait_any look", ALLOCSET_DEFAULT_SIZES);
	if (SPI_connect_ext(SPI_OPT_NONATOMIC) != SPI_OK_CONNECT)
		elog(ERROR, "silo: SPI_connect_ext failed");

	/* the first look does not register: nothing to undo when one has ended */
	old = MemoryContextSwitchTo(lookcxt);
	found = any_look_twice(tenant, ids, all, n, keys, owner, ended);
	MemoryContextSwitchTo(old);
	if (found == 0 && RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("silo.wait_any cannot wait on a standby"),
				 errdetail("None of the %d jobs has ended; their ends will be replayed from the primary, which wakes no waiter here.", n),
				 errhint("Wait on the primary, or poll silo.job_result here.")));

	while (found == 0)
	{
		/* no snapshot, no lock and no xid while asleep */
		SPI_commit();
		nwhich = any_sleep(which, start, timeout_us);
		if (nwhich == 0)
			break;
		MemoryContextReset(lookcxt);
		old = MemoryContextSwitchTo(lookcxt);
		/* still Pending (a shared key, a restarted job): wait for them again */
		found = any_look_twice(tenant, ids, which, nwhich, NULL, owner, ended);
		MemoryContextSwitchTo(old);
	}

	silo_wait_many_end();
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "silo: SPI_finish failed");
	MemoryContextSwitchTo(callcxt);
	MemoryContextDelete(lookcxt);
	return found;
}
