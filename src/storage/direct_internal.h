/*-------------------------------------------------------------------------
 *
 * direct_internal.h
 *	  Private to direct.c, direct_read.c and direct_write.c: the state of
 *	  a piece of direct work and of each table it has open.  Everything
 *	  else uses silo_storage.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_DIRECT_INTERNAL_H
#define SILO_DIRECT_INTERNAL_H

#include "silo_storage.h"

#include "access/genam.h"
#include "nodes/execnodes.h"

#define DIRECT_MAX_TABLES	80	/* a lease merging 64 tenants' ranges opens 68 */
#define DIRECT_BATCH_ROWS	32		/* rows a batched table holds at most */
#define DIRECT_WALK_STEPS	8		/* rows silo_table_fetch_ascending walks
									 * before it searches again */

struct SiloTable
{
	SiloDirect *d;
	Relation	rel;
	ResultRelInfo *rri;			/* indexes open (SILO_TABLE_WRITE) */
	Relation	index;			/* the index silo_table_fetch and scans use */
	int			index_nkeys;	/* its key columns */
	FmgrInfo	eq[INDEX_MAX_KEYS]; /* = for each key column */
	IndexScanDesc scan;			/* reused across fetches; ended when the
								 * snapshot changes */
	Snapshot	scan_snapshot;
	bool		walking;		/* silo_table_fetch_ascending: the scan
								 * stands on a row whose first key column
								 * is walk_key */
	Datum		walk_key;
	Datum		walk_asked;		/* the key it was last asked for */
	FmgrInfo	ge;				/* >= of the index's first key column */
	IndexFetchTableData *fetch; /* for fetches by TID */
	BlockNumber nblocks;		/* the table's size when last looked at */
	TupleTableSlot *row;		/* the row last fetched or scanned */
	TupleTableSlot *out;		/* the row to insert or update to */
	Datum	   *values;			/* the table's columns, to form it from */
	bool	   *isnull;
	int			ncols;
	AttrNumber *attnum;			/* the caller's column i is attnum[i] */
	bool		delete_checked; /* a delete was found to be replicable */
	bool		update_checked; /* an update was */
	bool		batched;		/* inserts wait for silo_table_flush */
	TupleTableSlot **pending;	/* the rows waiting, npending of them */
	int			npending;
	int			maxpending;
};

struct SiloDirect
{
	EState	   *estate;
	CommandId	cid;
	Snapshot	snapshot;		/* registered; taken at begin, renewed by
								 * silo_direct_new_snapshot */
	int			ntables;
	SiloTable  *tables[DIRECT_MAX_TABLES];
};

/* direct_write.c */
extern void silo_direct_check_writable(SiloTable *t);

#endif							/* SILO_DIRECT_INTERNAL_H */
