/*-------------------------------------------------------------------------
 *
 * silo_errcodes.h
 *	  The SQLSTATEs silo raises for job-state errors: class "SL".
 *
 * Argument errors use PostgreSQL's own codes (22004 null value not
 * allowed, 22023 invalid parameter value, 23505 unique violation).  Every code is listed in docs/sqlstates.md;
 * clients match on the code, and on the texts "lease not found" and
 * "lease owner mismatch", which are kept verbatim from Silo.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_ERRCODES_H
#define SILO_ERRCODES_H

#include "utils/elog.h"

/* SL001: the lease does not exist, has expired, or was already reported */
#define ERRCODE_SILO_LEASE_NOT_FOUND		MAKE_SQLSTATE('S','L','0','0','1')
/* SL002: the lease belongs to another worker */
#define ERRCODE_SILO_LEASE_OWNER_MISMATCH	MAKE_SQLSTATE('S','L','0','0','2')
/* SL003: no job with that id in that tenant */
#define ERRCODE_SILO_JOB_NOT_FOUND			MAKE_SQLSTATE('S','L','0','0','3')
/* SL004: the operation needs a terminal job (job_result, delete_job) */
#define ERRCODE_SILO_JOB_NOT_TERMINAL		MAKE_SQLSTATE('S','L','0','0','4')
/* SL005: cancel of a job that is already cancelled */
#define ERRCODE_SILO_JOB_ALREADY_CANCELLED	MAKE_SQLSTATE('S','L','0','0','5')
/* SL006: cancel of a job that already succeeded or failed */
#define ERRCODE_SILO_JOB_ALREADY_TERMINAL	MAKE_SQLSTATE('S','L','0','0','6')
/* SL007: restart of a job that is not Failed or Cancelled */
#define ERRCODE_SILO_JOB_NOT_RESTARTABLE	MAKE_SQLSTATE('S','L','0','0','7')
/* SL008: expedite of a job that has no future task to move */
#define ERRCODE_SILO_JOB_NOT_EXPEDITABLE	MAKE_SQLSTATE('S','L','0','0','8')
/* SL009: the extension's bookkeeping is inconsistent (a bug; report it) */
#define ERRCODE_SILO_INTERNAL				MAKE_SQLSTATE('S','L','0','0','9')
/* SL010: a report of the wrong kind (a job report on a refresh task, or
 * a refresh report on a job's task) */
#define ERRCODE_SILO_WRONG_TASK_KIND		MAKE_SQLSTATE('S','L','0','1','0')
/* SL011: silo.wait_result's timeout passed before the job ended */
#define ERRCODE_SILO_WAIT_TIMEOUT			MAKE_SQLSTATE('S','L','0','1','1')
/* SL012: silo.lease_job of a job that has no due task to lease (1.8) */
#define ERRCODE_SILO_JOB_NOT_LEASABLE		MAKE_SQLSTATE('S','L','0','1','2')
/* SL013: silo.import_jobs cannot re-import an existing job: it is running
 * (the whole batch is refused), it succeeded, or its history differs */
#define ERRCODE_SILO_JOB_NOT_REIMPORTABLE	MAKE_SQLSTATE('S','L','0','1','3')

/* SL020: cluster mode: the tenant's shard is owned by another node; the
 * DETAIL is a JSON object naming the owner (docs/cluster.md) */
#define ERRCODE_SILO_NOT_OWNER				MAKE_SQLSTATE('S','L','0','2','0')
/* SL021: cluster mode: the tenant's shard cannot be served here right now
 * (paused for a move, being acquired, membership not proven); retry */
#define ERRCODE_SILO_SHARD_UNAVAILABLE		MAKE_SQLSTATE('S','L','0','2','1')
/* SL022: cluster mode, internal: a move's pause could not drain its shard
 * within its bound (silo.shard_drain, called by the coordinator only); the
 * move gives up and the shard is served again */
#define ERRCODE_SILO_MOVE_GAVE_UP			MAKE_SQLSTATE('S','L','0','2','2')

#endif							/* SILO_ERRCODES_H */
