/*-------------------------------------------------------------------------
 *
 * silo_storage.h
 *	  How silo reaches its tables: statements through SPI, rows through
 *	  the access methods (direct.c), the status/time index 0x03, the
 *	  lease rows, and the paged batch runner the broker's passes use.
 *	  Calls only util/ (src/README.md has the layers).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_STORAGE_H
#define SILO_STORAGE_H

#include "silo_util.h"

#include "access/skey.h"
#include "access/tableam.h"
#include "executor/spi.h"
#include "nodes/pg_list.h"
#include "utils/relcache.h"

/* spi.c */
extern void silo_spi_connect(void);
extern void silo_spi_finish(void);
extern int	silo_exec(SPIPlanPtr *plan, const char *sql, int nargs,
					  const Oid *argtypes, Datum *values, const char *nulls,
					  bool read_only, long count);
extern Datum silo_col(int row, int col, bool *isnull);
extern char *silo_col_text(int row, int col);
extern int32 silo_col_int32(int row, int col);
extern int64 silo_col_int64(int row, int col);
extern bool silo_col_bool(int row, int col);
extern TimestampTz silo_col_ts(int row, int col, bool *isnull);

/* schema.c: what the installed schema has */
typedef struct SiloSchema
{
	bool		installed;		/* extension silo is installed */
	char		version[16];	/* its version, e.g. "1.6" */
	int			version_num;	/* 106 */
	bool		current;		/* the version this library implements */
	bool		has_status_index;	/* 0x03 as a table, row hints (1.5) */
} SiloSchema;

extern const SiloSchema *silo_schema(void);
extern bool silo_schema_current(void);
extern void silo_schema_require_current(const char *fn);

/* planner.c */
extern bool silo_planning_own;
extern void silo_planner_init(void);

/* direct.c: rows read and written through the access methods */
typedef struct SiloDirect SiloDirect;
typedef struct SiloTable SiloTable;

typedef enum SiloTableMode
{
	SILO_TABLE_READ,			/* rows are read */
	SILO_TABLE_DELETE,			/* rows are read, locked and deleted */
	SILO_TABLE_WRITE			/* rows are also inserted and updated */
} SiloTableMode;

extern SiloDirect *silo_direct_begin(void);
extern void silo_direct_end(SiloDirect *d);
extern Snapshot silo_direct_snapshot(SiloDirect *d);
extern void silo_direct_new_snapshot(SiloDirect *d);
extern SiloTable *silo_table_open(SiloDirect *d, const char *relname,
								  const char *const *cols, int ncols,
								  const char *index, SiloTableMode mode);
extern bool silo_table_fetch(SiloTable *t, int nkeys, const Datum *keys);
extern bool silo_table_fetch_tid(SiloTable *t, ItemPointer tid);
extern bool silo_table_fetch_ascending(SiloTable *t, Datum key);
extern bool silo_table_fetch_hinted(SiloTable *t, Datum hint, bool hint_null, int nkeys,
									const Datum *keys);
extern void silo_table_scan_start(SiloTable *t, ScanKey keys, int nkeys);
extern bool silo_table_scan_next(SiloTable *t);
extern bool silo_table_peek(SiloTable *t, ScanKey keys, int nkeys, int attno, Datum *value);
extern Datum silo_table_get(SiloTable *t, int col, bool *isnull);
extern ItemPointer silo_table_tid(SiloTable *t);
extern void silo_table_insert(SiloTable *t, const Datum *values, const bool *nulls);
extern ItemPointer silo_table_inserted_tid(SiloTable *t);
extern void silo_table_batch(SiloTable *t);
extern void silo_table_flush(SiloTable *t);
extern TM_Result silo_table_delete(SiloTable *t);
extern TM_Result silo_table_delete_skip_locked(SiloTable *t);
extern TM_Result silo_table_update(SiloTable *t, int n, const int *cols,
								   const Datum *values, const bool *nulls);
extern bool silo_text_datum_is(Datum d, const char *s);
extern bool silo_text_datums_equal(Datum a, Datum b);

/* statusindex.c: 0x03 */
extern SiloTable *silo_status_index_open(SiloDirect *d);
extern void silo_status_index_move_in(SiloTable *idx, Datum tenant, Datum id,
									  Datum old_status, TimestampTz old_at,
									  Datum hint, bool hint_null,
									  Datum new_status, TimestampTz new_at);
extern void silo_status_index_move(const char *tenant, const char *id,
								   const char *old_status, TimestampTz old_at,
								   const char *new_status, TimestampTz new_at);

/* leases.c: rows of silo.task_lease */
extern bool silo_task_leased(Datum task_id);

/* A lease row, as taken (deleted) by a report or by the sweep. */
typedef struct SiloLease
{
	Datum		task_id;
	char	   *kind;
	char	   *task_group;
	char	   *tenant;
	char	   *job_id;
	int32		attempt;
	int32		relative_attempt;
	int32		priority;
	TimestampTz start_at;
	int64		seq;
	char	   *worker_id;
	TimestampTz started_at;
	TimestampTz expires_at;
	bool		limited;		/* the job has limits: holds is set */
	List	   *holds;			/* keys the task holds */
	char	   *owner_role;		/* the role that took it (NULL: before 1.7) */
} SiloLease;

extern bool silo_lease_take(Datum task_id, SiloLease *lease);
extern bool silo_lease_take_expired(Datum task_id, TimestampTz now, SiloLease *lease);
extern void silo_lease_delete_nowait(Datum task_id);
extern Datum silo_holds_datum(List *holds);
extern List *silo_holds_list(Datum arr);

/* jobs.c: a new job's rows */
typedef struct SiloJobRow
{
	const char *tenant;
	const char *id;
	const char *task_group;
	int32		priority;
	TimestampTz start_at;		/* as the producer asked */
	TimestampTz enqueued_at;
	Jsonb	   *payload;
	SiloRetryPolicy retry;
	Jsonb	   *limits;			/* normalized */
	Jsonb	   *metadata;
	Datum		task_id;		/* its first attempt's task */
	TimestampTz next_attempt_at;	/* when that attempt may start */
	struct SiloTaskRow *first_task; /* NULL, or that task, written with the
									 * job (its seq and row hints filled in) */
} SiloJobRow;

extern bool silo_job_insert(const SiloJobRow *row, int64 *seq, bool *has_hints,
							ItemPointer info_tid, ItemPointer status_tid);
extern bool silo_job_insert_imported(const SiloJobRow *row, const char *status,
									 TimestampTz changed_at, int32 attempt,
									 int32 relative_attempt, int64 *seq,
									 ItemPointer info_tid, ItemPointer status_tid);
extern void silo_job_metadata_insert(const char *tenant, const char *id, Jsonb *metadata);

/* attempts.c: the one writer of attempt rows and cancellation flags */
typedef struct SiloAttemptRow
{
	Datum		tenant;			/* text */
	Datum		job_id;			/* text */
	int32		attempt;
	int32		relative_attempt;
	Datum		task_id;		/* uuid */
	Datum		worker_id;		/* text; 0: the attempt never started */
	Datum		status;			/* text: Succeeded, Failed or Cancelled */
	TimestampTz started_at;
	TimestampTz finished_at;
	Datum		result;			/* jsonb; 0: none */
	const char *error_code;
	Jsonb	   *error_data;
} SiloAttemptRow;

extern SiloTable *silo_attempt_open(SiloDirect *d);
extern void silo_attempt_put(SiloTable *t, const SiloAttemptRow *row);
extern void silo_attempt_insert(const SiloAttemptRow *row);
extern void silo_cancellation_insert(const char *tenant, const char *job_id, TimestampTz at,
									 bool if_absent);

/* tasks.c: the one writer of silo.task rows */
typedef struct SiloTaskRow
{
	const char *task_group;
	TimestampTz start_at;
	int32		priority;
	const char *tenant;
	const char *job_id;
	int32		attempt;
	int32		relative_attempt;
	Datum		task_id;
	int64		seq;
	bool		due;
	bool		limited;		/* the job has limits: holds is written */
	List	   *holds;
	bool		has_info_tid;	/* row hints, when the caller knows them */
	ItemPointerData info_tid;
	bool		has_status_tid;
	ItemPointerData status_tid;
} SiloTaskRow;

extern void silo_task_insert(const SiloTaskRow *row);
extern void silo_task_insert_direct(SiloDirect *d, const SiloTaskRow *row);

/* runner.c: the broker's paged passes, one subtransaction per item */
typedef bool (*SiloItemFn) (int i, void *arg, TimestampTz now);
typedef char *(*SiloItemDescribeFn) (int i, void *arg);

/* Rows listed by silo_run_listed: every column as text, row-major. */
typedef struct SiloListed
{
	int			ncols;
	char	  **cells;
} SiloListed;
#define SILO_CELL(l, i, c)	((l)->cells[(i) * (l)->ncols + (c)])

extern int64 silo_run_isolated(int n, SiloItemFn fn, SiloItemDescribeFn describe, void *arg,
							   TimestampTz now, int64 *offset);
extern int64 silo_run_listed(SPIPlanPtr *plan, const char *sql, TimestampTz now, int limit,
							 int64 *offset, bool *more, SiloItemFn fn,
							 SiloItemDescribeFn describe);

#endif							/* SILO_STORAGE_H */
