/*-------------------------------------------------------------------------
 *
 * module.c
 *	  Module load: GUCs, shared memory hooks, the broker's registration and
 *	  the transaction callbacks.  The only place that knows every
 *	  subsystem: each keeps its own state, and this file calls each at the
 *	  moments PostgreSQL gives (src/README.md has the layers).
 *
 *-------------------------------------------------------------------------
 */
#include "silo_module.h"

#include <limits.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "replication/logicallauncher.h"
#include "replication/slot.h"
#include "replication/walsender.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

static char *silo_library_version = NULL;

static shmem_request_hook_type silo_prev_shmem_request_hook = NULL;
static shmem_startup_hook_type silo_prev_shmem_startup_hook = NULL;

void		_PG_init(void);
static void silo_define_gucs(void);
static void silo_register_broker(void);
static void silo_define_cluster_gucs(void);
static void silo_check_cluster_settings(void);
static void silo_register_coordinator(void);
static void silo_xact_callback(XactEvent event, void *arg);
static void silo_subxact_callback(SubXactEvent event, SubTransactionId my_subid,
								  SubTransactionId parent_subid, void *arg);
static void silo_request_shmem_hook(void);
static void silo_startup_shmem_hook(void);

/*
 * _PG_init: define the GUCs, and when preloaded, request shared memory and
 * register the broker.  Without preloading the SQL functions still work;
 * only the broker and the notification coalescing are missing.
 */
void
_PG_init(void)
{
	silo_define_gucs();
	/* the limits' passes look only at served shards in cluster mode */
	silo_limits_shard_filter = silo_cluster_mode();

	/* Every backend that loads silo needs this, preloaded or not. */
	RegisterXactCallback(silo_xact_callback, NULL);
	silo_planner_init();
	RegisterSubXactCallback(silo_subxact_callback, NULL);
	silo_mark_init();
	silo_tenancy_init();
	silo_groups_init();

	if (!process_shared_preload_libraries_in_progress)
		return;

	silo_prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = silo_request_shmem_hook;
	silo_prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = silo_startup_shmem_hook;

	if (!IsBinaryUpgrade)
	{
		silo_register_broker();
		if (silo_cluster_mode())
		{
			silo_check_cluster_settings();
			silo_register_coordinator();
		}
	}
}

/*
 * silo_define_gucs: every silo.* setting, documented in docs/operations.md.
 */
static void
silo_define_gucs(void)
{
	DefineCustomStringVariable("silo.database",
							   "Database the silo broker serves.",
							   "Must equal cron.database_name: pg_cron installs only there.",
							   &silo_database,
							   "postgres",
							   PGC_POSTMASTER,
							   0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("silo.retention",
							"How long terminal jobs are kept before the purge removes them.",
							"0 keeps terminal jobs forever.",
							&silo_retention_s,
							7 * 24 * 3600,
							0, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("silo.broker_paused",
							 "Pauses the broker's promotion and lease sweep.",
							 "For tests that drive silo.run_maintenance() themselves.",
							 &silo_broker_paused,
							 false,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("silo.notify_coalesce_ms",
							"Minimum interval between two wake-up notifications for one task group.",
							"0 notifies on every enqueue of a due job.",
							&silo_notify_coalesce_ms,
							1,
							0, 60000,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("silo.max_wait_any_jobs",
							"Jobs that silo.wait_any calls of all sessions may await at once.",
							"Each takes 32 bytes of shared memory; silo.wait_result needs none of them.",
							&silo_max_wait_any_jobs,
							16384,
							0, 1 << 20,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("silo.clock_offset_ms",
							"Test hook: shifts silo's clock by this many milliseconds.",
							"Read by every SQL function and by the broker.",
							&silo_clock_offset_ms,
							0,
							INT_MIN, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_MS | GUC_SUPERUSER_ONLY,
							NULL, NULL, NULL);

	silo_define_cluster_gucs();

	DefineCustomBoolVariable("silo.tenant_isolation",
							 "Tenants are a boundary every role must be bound across.",
							 "On: the tenant argument is required and a role bound to no tenant may do nothing. Off: only bound roles are restricted.",
							 &silo_tenant_isolation,
							 false,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	/*
	 * Read-only: the version of the library this server runs (since 1.5),
	 * which an upgrade script checks before changing what the library
	 * reads and writes.
	 */
	DefineCustomStringVariable("silo.library_version",
							   "Version of the silo library loaded in this server.",
							   NULL,
							   &silo_library_version,
							   SILO_EXTENSION_VERSION,
							   PGC_INTERNAL,
							   GUC_NOT_IN_SAMPLE | GUC_DISALLOW_IN_FILE,
							   NULL, NULL, NULL);

	MarkGUCPrefixReserved("silo");
}

/*
 * silo_define_cluster_gucs: the settings of cluster mode (docs/cluster.md).
 * Single-node mode is silo.etcd_endpoints empty.
 */
static void
silo_define_cluster_gucs(void)
{
	DefineCustomStringVariable("silo.etcd_endpoints",
							   "etcd client URLs of cluster mode, comma-separated.",
							   "Empty (the default) is single-node mode.",
							   &silo_etcd_endpoints,
							   "",
							   PGC_POSTMASTER,
							   GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("silo.node_id",
							   "This node's stable id in the cluster.",
							   "A restarted node with the same id reclaims its shards.",
							   &silo_node_id,
							   "",
							   PGC_POSTMASTER,
							   0,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("silo.cluster_prefix",
							   "Prefix of every key silo keeps in etcd.",
							   NULL,
							   &silo_cluster_prefix,
							   "silo",
							   PGC_POSTMASTER,
							   0,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("silo.advertise_conninfo",
							   "How clients and peers reach this node (shown in NOT_OWNER errors).",
							   "Must hold no secret: put passwords in a password file.",
							   &silo_advertise_conninfo,
							   "",
							   PGC_SIGHUP,
							   0,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("silo.replication_conninfo",
							   "How peers connect to this node to replicate a shard from it.",
							   "Empty uses silo.advertise_conninfo.",
							   &silo_replication_conninfo,
							   "",
							   PGC_SIGHUP,
							   GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);
	DefineCustomIntVariable("silo.initial_shard_count",
							"Number of shards of a new cluster's shard map.",
							"Read only by the node that creates the map.",
							&silo_initial_shard_count,
							8,
							1, SILO_MAX_SHARDS,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("silo.move_drain_timeout_ms",
							"How long a move's pause waits for the transactions already in its shard.",
							"Past it the move gives up and the shard is served again.",
							&silo_move_drain_timeout_ms,
							5000,
							10, 600000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("silo.move_pause_limit_ms",
							"How long a move's source stays paused waiting for its target.",
							"Past it the move gives up and the shard is served again.",
							&silo_move_pause_limit_ms,
							30000,
							100, 3600000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("silo.max_moves_in",
							"How many shards this node moves in at once (0: none).",
							"Each takes a subscription's workers (max_logical_replication_workers).",
							&silo_max_moves_in,
							1,
							0, 16,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("silo.draining",
							 "This node is leaving the cluster: placement moves its shards away.",
							 NULL,
							 &silo_draining,
							 false,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);
	DefineCustomStringVariable("silo.test_move_pause_at",
							   "Tests only: the coordinator holds every move at this phase.",
							   "Empty (the default) holds nothing.",
							   &silo_test_move_pause_at,
							   "",
							   PGC_SIGHUP,
							   GUC_SUPERUSER_ONLY | GUC_NOT_IN_SAMPLE,
							   NULL, NULL, NULL);
	DefineCustomIntVariable("silo.lease_ttl_s",
							"TTL of this node's membership lease in etcd.",
							"The node stops serving before it can expire elsewhere.",
							&silo_lease_ttl_s,
							10,
							2, 300,
							PGC_POSTMASTER,
							GUC_UNIT_S,
							NULL, NULL, NULL);
}

/*
 * silo_check_cluster_settings: cluster mode needs settings that only a
 * restart changes: refuse to start without them, saying which.
 */
static void
silo_check_cluster_settings(void)
{
	if (silo_node_id == NULL || silo_node_id[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("silo.node_id must be set in cluster mode"),
				 errdetail("silo.etcd_endpoints is set, so this server is a node of a cluster, and a node needs a stable id."),
				 errhint("Set silo.node_id in postgresql.conf to a name unique in the cluster (docs/cluster.md).")));
	if (strlen(silo_node_id) >= SILO_NODE_ID_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("silo.node_id must be shorter than %d bytes", SILO_NODE_ID_LEN)));
	if (wal_level < WAL_LEVEL_LOGICAL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cluster mode needs wal_level = logical"),
				 errdetail("A shard's rows move between nodes by logical replication, and wal_level changes only with a restart."),
				 errhint("Set wal_level = logical in postgresql.conf (docs/cluster.md).")));
	if (max_logical_replication_workers < 2)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cluster mode needs max_logical_replication_workers of at least 2"),
				 errdetail("A shard moving in takes a subscription's apply worker and its table synchronization."),
				 errhint("Set max_logical_replication_workers = 4 (the default) or more.")));
	/* the broker, the coordinator, and the logical replication workers */
	if (max_worker_processes < max_logical_replication_workers + 2)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cluster mode needs max_worker_processes of at least max_logical_replication_workers + 2 (%d)",
						max_logical_replication_workers + 2),
				 errdetail("The broker, the coordinator and the workers of a shard moving in are background workers."),
				 errhint("Set max_worker_processes = %d or more.",
						 max_logical_replication_workers + 2)));
	/*
	 * A move out takes a slot and a WAL sender, and its table copy two more:
	 * without them this node's shards cannot move away (it can still serve
	 * them, and take shards in).
	 */
	if (max_replication_slots < 3 || max_wal_senders < 3)
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cluster mode needs max_replication_slots and max_wal_senders of at least 3 to move shards away"),
				 errdetail("A shard moving out takes a replication slot and a WAL sender, and the copy of its tables up to two more of each."),
				 errhint("Keep the defaults (10 of each) or more.")));
}

/*
 * silo_register_coordinator: the coordinator lives in a library of its
 * own (silo_coordinator, linked with libcurl), so that backends that only
 * load silo never load libcurl; it restarts a second after it exits.
 */
static void
silo_register_coordinator(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "silo_coordinator");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "silo_coordinator_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "silo coordinator");
	snprintf(worker.bgw_type, BGW_MAXLEN, "silo coordinator");
	RegisterBackgroundWorker(&worker);
}

/*
 * silo_register_broker: the broker is a static background worker that
 * restarts a second after it exits or crashes.
 */
static void
silo_register_broker(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "silo");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "silo_broker_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "silo broker");
	snprintf(worker.bgw_type, BGW_MAXLEN, "silo broker");
	RegisterBackgroundWorker(&worker);
}

/*
 * silo_xact_callback: sends the transaction's coalesced wake-up
 * notifications at pre-commit (hands the skipped ones to the broker after
 * the commit), wakes the broker and the waiters of the jobs it ended
 * after a commit that asked for it, and forgets them on abort (which
 * also ends this session's own wait); settles the lease marks the
 * transaction owes (leasemark.c) either way.
 */
static void
silo_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			silo_notify_pre_commit();
			break;
		case XACT_EVENT_PRE_PREPARE:
			/* NOTIFY cannot be prepared; workers will find the work by polling. */
			silo_notify_forget();
			silo_mark_pre_prepare();
			/* nor can wake-ups: a job's end is refused in a prepared one */
			silo_wait_pre_prepare();
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			silo_wait_xact_end(true);
			silo_mark_xact_end(true);
			silo_notify_post_commit();
			silo_ipc_xact_end(true);
			silo_limits_xact_end();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			silo_planning_own = false;	/* an error inside silo_exec */
			silo_wait_xact_end(false);
			silo_ipc_xact_end(false);
			silo_mark_xact_end(false);
			silo_notify_forget();
			silo_limits_xact_end();
			break;
		default:
			break;
	}
}

/*
 * silo_subxact_callback: a rolled-back subtransaction (a savepoint, a
 * plpgsql exception block) takes its wake-ups with it, the waiters' too.
 */
static void
silo_subxact_callback(SubXactEvent event, SubTransactionId my_subid,
					  SubTransactionId parent_subid, void *arg)
{
	if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		silo_notify_subxact_end(true);
		silo_wait_subxact_end(true);
	}
	else if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		silo_notify_subxact_end(false);
		silo_wait_subxact_end(false);
		silo_mark_subxact_abort();
		silo_ipc_subxact_abort();
		silo_planning_own = false;	/* an error caught inside silo_exec */
	}
}

/*
 * silo_request_shmem_hook: chain, then reserve silo's shared memory.
 */
static void
silo_request_shmem_hook(void)
{
	if (silo_prev_shmem_request_hook)
		silo_prev_shmem_request_hook();
	silo_ipc_shmem_request();
	silo_mark_shmem_request();
	silo_cluster_shmem_request();
}

/*
 * silo_startup_shmem_hook: chain, then attach to (or create) silo's
 * shared memory.
 */
static void
silo_startup_shmem_hook(void)
{
	if (silo_prev_shmem_startup_hook)
		silo_prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	silo_ipc_shmem_startup();
	silo_mark_shmem_startup();
	silo_cluster_shmem_startup();
	LWLockRelease(AddinShmemInitLock);
}
