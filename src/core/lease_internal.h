/*-------------------------------------------------------------------------
 *
 * lease_internal.h
 *	  What lease.c shares with the other ways of taking tasks
 *	  (lease_tenants.c): the task columns a lease reads, the lease in
 *	  progress, and the taking of one task.  Private to core/.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_LEASE_INTERNAL_H
#define SILO_LEASE_INTERNAL_H

#include "silo_core.h"

/*
 * silo.leased_task's columns: task_id .. refresh_metadata (1.0), then
 * limits and retry_policy (1.8)
 */
#define LEASED_TASK_NATTS 17

/* silo.task columns a lease reads, in this order */
extern const char *const silo_lease_task_cols[];
enum
{
	LT_TASK_ID, LT_TASK_GROUP, LT_TENANT, LT_JOB_ID, LT_ATTEMPT, LT_RELATIVE_ATTEMPT,
	LT_PRIORITY, LT_START_AT, LT_SEQ, LT_HOLDS, LT_JOB_INFO_TID, LT_JOB_STATUS_TID, LT_NCOLS
};

/* A lease in progress: the tables it works on and what it writes. */
typedef struct LeaseWork
{
	ReturnSetInfo *rsinfo;
	SiloTable  *lease;
	SiloTable  *info;
	Datum		worker_text;
	Datum		owner;			/* the role taking the lease */
	Datum		run;
	TimestampTz now;
	TimestampTz expires;
	bool		cluster;
	bool		no_default;		/* silo.tenant_isolation: pass over '-' */
} LeaseWork;

/* lease.c */
extern void silo_lease_begin(LeaseWork *w, SiloDirect *d, ReturnSetInfo *rsinfo,
							 const char *worker_id, TimestampTz now, TimestampTz expires);
extern bool silo_lease_take_row(LeaseWork *w, SiloTable *task);
extern void silo_lease_row_key(SiloTable *task, SiloMarkKey *key);

/* lease_tenants.c; task_relid InvalidOid: no lease marks */
extern int	silo_lease_take_tenants(SiloDirect *d, LeaseWork *w, const char *task_group,
									int32 max_tasks, int ntenants, char **tenants, bool fair,
									Oid task_relid);
extern int	silo_lease_take_fair(SiloDirect *d, LeaseWork *w, const char *task_group,
								 int32 max_tasks, Oid task_relid);

#endif							/* SILO_LEASE_INTERNAL_H */
