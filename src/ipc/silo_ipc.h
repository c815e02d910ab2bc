/*-------------------------------------------------------------------------
 *
 * silo_ipc.h
 *	  What silo's processes tell each other: wake-up notifications for
 *	  workers (coalesced per task group), the broker's latch and round
 *	  requests, shared hints, and the wake-ups of silo.wait_result's
 *	  waiters.  Calls only util/ (src/README.md has
 *	  the layers).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_IPC_H
#define SILO_IPC_H

#include "silo_util.h"

#include "mb/pg_wchar.h"

/* The channel every wake-up goes to; the payload is the task group. */
#define SILO_NOTIFY_CHANNEL		"silo_task_ready"

/* capacity of the coalescing table: task groups coalesced at once (idle
 * ones are freed, notify.c); a task group name is at most SILO_MAX_GROUP_LEN
 * characters, not bytes */
#define SILO_NOTIFY_ENTRIES 512
#define SILO_NOTIFY_NAME_BYTES (SILO_MAX_GROUP_LEN * MAX_MULTIBYTE_CHAR_LEN + 1)

/* shmem.c */
extern void silo_ipc_shmem_request(void);
extern void silo_ipc_shmem_startup(void);
extern void silo_shmem_set_broker(bool attach);
extern int	silo_shmem_broker_pid(void);
extern void silo_wake_broker(void);
extern void silo_wake_broker_latch(void);
extern void silo_wake_broker_at_commit(void);
extern void silo_ipc_xact_end(bool commit);
extern void silo_ipc_subxact_abort(void);
extern void silo_config_changed_at_commit(void);
extern uint64 silo_config_generation(void);
extern bool silo_broker_take_tick_request(void);
extern bool silo_refresh_hint(void);
extern void silo_set_refresh_hint(bool on);

/* notify.c */
extern int	silo_notify_coalesce_ms;	/* GUC silo.notify_coalesce_ms */
extern void silo_notify_shmem_request(void);
extern void silo_notify_shmem_startup(void);
extern void silo_notify_group(const char *task_group);
extern void silo_notify_pre_commit(void);
extern void silo_notify_post_commit(void);
extern void silo_notify_forget(void);
extern void silo_notify_subxact_end(bool commit);
extern bool silo_notify_any_pending(void);
extern long silo_notify_send_deferred(char (*sent)[SILO_NOTIFY_NAME_BYTES], int *nsent);
extern void silo_notify_requeue(char (*sent)[SILO_NOTIFY_NAME_BYTES], int nsent);

/* waiters.c: silo.wait_result's and silo.wait_any's waiters and their wake-ups at commit */
extern int	silo_max_wait_any_jobs;	/* GUC silo.max_wait_any_jobs */
extern void silo_wait_shmem_request(void);
extern void silo_wait_shmem_startup(void);
extern uint64 silo_wait_key(const char *tenant, int tenant_len, const char *id, int id_len);
extern void silo_wait_register(uint64 key);
extern void silo_wait_unregister(void);
extern bool silo_wait_take_wake(void);
extern void silo_wait_many_register(const uint64 *keys, int n);
extern int	silo_wait_many_take(int *which);
extern void silo_wait_many_relink(const int *which, int n);
extern void silo_wait_many_end(void);
extern void silo_wait_job_ended(const char *tenant, const char *id);
extern void silo_wait_job_ended_text(Datum tenant, Datum id);
extern void silo_wait_key_ended(uint64 key);
extern void silo_wait_all_ended(void);
extern void silo_wait_xact_end(bool commit);
extern void silo_wait_subxact_end(bool commit);
extern void silo_wait_pre_prepare(void);

#endif							/* SILO_IPC_H */
