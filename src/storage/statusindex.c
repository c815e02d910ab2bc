/*-------------------------------------------------------------------------
 *
 * statusindex.c
 *	  0x03, the status/time index: silo.job_status_index holds one row
 *	  (tenant, status, changed_at, id) per job, the same status and time
 *	  as the job's silo.job_status row.
 *
 * Until 1.5 the index was an index on silo.job_status itself, and so was
 * the list of a tenant's pending jobs.  Both cover status and changed_at,
 * so every status change was an update that rewrote the row's index
 * entries: two B-tree insertions, and the unique index's clean-up passes
 * over the versions they left behind.  As a table of its own, 0x03 lets a
 * status change be a HOT update of silo.job_status (docs/performance.md
 * §12), and a transition moves the job's 0x03 row instead: delete the old
 * one, insert the new one, in the transaction that changes the status.
 *
 * Every change of a job_status row's status or changed_at goes through
 * here (or, for new and deleted jobs, through the same statement that
 * inserts or deletes the status row), so the two tables always agree;
 * the regress suite and the stress test check that they do.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_storage.h"

#include "catalog/namespace.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

static const char *const status_index_cols[] = {"tenant", "status", "changed_at", "id"};

/*
 * silo_status_index_open: silo.job_status_index, opened for moves in a
 * piece of direct work.
 */
SiloTable *
silo_status_index_open(SiloDirect *d)
{
	return silo_table_open(d, "job_status_index", status_index_cols, 4, NULL,
						   SILO_TABLE_WRITE);
}

/*
 * silo_status_index_move_in: move job (tenant, id)'s 0x03 row from
 * (old_status, old_at) to (new_status, new_at), in the piece of direct
 * work the table was opened in.  hint, unless hint_null, is where the old
 * row was written (job_status.status_index_tid), tried before the index.
 * A missing old row means the two tables disagree: SL009.  The caller
 * holds the job's status row locked, so no one else moves this job's row.
 */
void
silo_status_index_move_in(SiloTable *idx, Datum tenant, Datum id,
						  Datum old_status, TimestampTz old_at, Datum hint, bool hint_null,
						  Datum new_status, TimestampTz new_at)
{
	Datum		key[4];

	key[0] = tenant;
	key[1] = old_status;
	key[2] = TimestampTzGetDatum(old_at);
	key[3] = id;
	if (!silo_table_fetch_hinted(idx, hint, hint_null, 4, key))
		ereport(ERROR,
				(errcode(ERRCODE_SILO_INTERNAL),
				 errmsg("job \"%s\" of tenant \"%s\" has no status index entry for %s at %s",
						TextDatumGetCString(id), TextDatumGetCString(tenant),
						TextDatumGetCString(old_status), timestamptz_to_str(old_at))));

	/*
	 * 0x03 rows are only ever inserted and deleted, each by the holder of
	 * its job's row lock: nobody else can have deleted this one.
	 */
	if (silo_table_delete(idx) != TM_Ok)
		ereport(ERROR,
				(errcode(ERRCODE_SILO_INTERNAL),
				 errmsg("status index entry of job \"%s\" of tenant \"%s\" was removed by another transaction",
						TextDatumGetCString(id), TextDatumGetCString(tenant))));
	key[1] = new_status;
	key[2] = TimestampTzGetDatum(new_at);
	silo_table_insert(idx, key, NULL);
}

/*
 * silo_status_index_move: the same as a piece of work of its own, for the
 * transitions written in SQL: called right after the statement that
 * changed the job's status row (which it locked), with the status and
 * time that statement replaced.  Nothing to do when neither changed.
 */
void
silo_status_index_move(const char *tenant, const char *id,
					   const char *old_status, TimestampTz old_at,
					   const char *new_status, TimestampTz new_at)
{
	SiloDirect *d;

	if (strcmp(old_status, new_status) == 0 && old_at == new_at)
		return;
	d = silo_direct_begin();
	silo_status_index_move_in(silo_status_index_open(d),
							  CStringGetTextDatum(tenant), CStringGetTextDatum(id),
							  CStringGetTextDatum(old_status), old_at, (Datum) 0, true,
							  CStringGetTextDatum(new_status), new_at);
	silo_direct_end(d);
}
