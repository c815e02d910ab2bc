/*-------------------------------------------------------------------------
 *
 * coordinator.c
 *	  The coordinator background worker: its entry point, signals, pinned
 *	  session settings, the etcd client's timeouts, the main loop, reload
 *	  and the graceful stop.
 *
 * module.c registers the worker (library silo_coordinator, function
 * silo_coordinator_main) only in cluster mode.  Each loop iteration keeps
 * the membership (register or keepalive when due), reads the cluster state
 * again when the mirror is stale, runs the freshness check, reconciles
 * the owner keys with placement and publishes to shared memory; then it
 * waits on the watch (at most COORD_WATCH_POLL_MS) and on the latch.  No
 * call blocks for longer than the client's total timeout, twice the
 * request timeout: max(300 ms, min(TTL/5, 1 s)) per request, far below
 * the 7 s etcd waits without a quorum.
 *
 * SIGTERM is a graceful stop: stop serving, revoke the membership lease
 * (the member key goes at once; owner keys stay, so the node keeps its
 * shards across a restart) and exit with status 1, so that the postmaster
 * starts the worker again a second later unless it is shutting down.
 * SIGHUP reloads the configuration (silo.advertise_conninfo may change).
 * An error ends the worker (bgworker.c's handler exits on an ERROR: nothing
 * here runs SQL, and all state worth keeping is in etcd); on the way out
 * it stops serving and, unless the postmaster died, revokes its lease, and
 * the postmaster starts it again a second later.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_coordinator.h"

#include "common/pg_prng.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/pmsignal.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"

PG_MODULE_MAGIC;

/* the process's state, for the exit callback */
static CoordState *coord_state = NULL;

/*
 * coord_jitter_ms: base_ms scaled by a random factor in [0.5, 1.5), so that
 * nodes retrying after the same failure do not retry together.
 */
uint64
coord_jitter_ms(int base_ms)
{
	return (uint64) base_ms / 2 + pg_prng_uint64_range(&pg_global_prng_state, 0, base_ms);
}

/*
 * coord_pin_settings: the coordinator is a superuser session: pin the
 * settings every superuser context of silo pins (docs/security.md), as
 * the broker does, before anything runs, so that ALTER DATABASE/ROLE ...
 * SET by a database owner cannot reach it once it runs SQL.
 */
static void
coord_pin_settings(void)
{
	SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_read_only", "off", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("lock_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("idle_in_transaction_session_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("role", "none", PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * coord_on_exit: however the worker ends, nothing is served past its
 * life; unless the postmaster died (a crashed node keeps its lease until
 * it expires, as if the machine had died), the lease is revoked.
 */
static void
coord_on_exit(int code, Datum arg)
{
	CoordState *cs = coord_state;

	silo_cluster_serve_until(0);
	if (cs != NULL && cs->lease_id != 0 && cs->client != NULL && PostmasterIsAlive())
		coord_membership_revoke(cs);
	if (cs != NULL && cs->moves != NULL)
		coord_sql_close(cs);
	silo_cluster_set_coordinator(0);
}

/*
 * coord_timing: the keepalive interval, the self-fencing margin and the
 * request timeout, from silo.lease_ttl_s.
 */
static void
coord_timing(CoordState *cs)
{
	int			ttl_ms = silo_lease_ttl_s * 1000;

	cs->ttl_s = silo_lease_ttl_s;
	cs->interval_us = (uint64) (ttl_ms / 5) * 1000;
	cs->margin_us = (uint64) Max(COORD_MIN_MARGIN_MS, ttl_ms / 5) * 1000;
	cs->request_timeout_ms = Min(Max(ttl_ms / 5, 300), 1000);
}

/*
 * coord_keys: the keys of this node under silo.cluster_prefix.
 */
static void
coord_keys(CoordState *cs)
{
	MemoryContext old = MemoryContextSwitchTo(cs->cxt);

	cs->prefix = psprintf("%s/coord/", silo_cluster_prefix);
	cs->member_prefix = psprintf("%smembers/", cs->prefix);
	cs->shard_prefix = psprintf("%sshards/", cs->prefix);
	cs->member_key = psprintf("%s%s", cs->member_prefix, silo_node_id);
	cs->map_key = psprintf("%sshardmap", cs->prefix);
	MemoryContextSwitchTo(old);
}

/*
 * coord_client: the etcd client over silo.etcd_endpoints.  A client that
 * cannot be made (a malformed endpoint list) is reported once: the
 * worker then serves nothing until the setting is fixed (a restart).
 */
static void
coord_client(CoordState *cs)
{
	EtcdConfig	cfg;
	EtcdStatus	st;

	memset(&cfg, 0, sizeof(cfg));
	cfg.endpoints = silo_etcd_endpoints;
	cfg.request_timeout_ms = cs->request_timeout_ms;
	cfg.connect_timeout_ms = Min(cs->request_timeout_ms, 500);
	cfg.total_timeout_ms = 2 * cs->request_timeout_ms;
	st = etcd_global_init();
	if (etcd_ok(st))
		st = etcd_client_create(&cfg, &cs->client);
	if (!etcd_ok(st))
	{
		cs->client = NULL;
		ereport(WARNING,
				(errmsg("silo coordinator: cannot use silo.etcd_endpoints \"%s\": %s: %s",
						silo_etcd_endpoints, etcd_kind_name(st.kind), st.message),
				 errdetail("This node serves nothing until the setting is fixed and the server restarted.")));
	}
}

/*
 * coord_check_version: etcd's cluster version must be 3.4 or later (the
 * gateway lives under /v3 from 3.4 on).  Checked until it passes; only a
 * version known to be too old stops the coordinator from going on.
 */
static bool
coord_check_version(CoordState *cs)
{
	static bool refused = false;
	EtcdVersion v;
	EtcdStatus	st;

	if (cs->version_ok)
		return true;
	if (silo_monotonic_us() < cs->next_version_us)
		return !refused;
	memset(&v, 0, sizeof(v));
	st = etcd_version_check(cs->client, &v);
	refused = st.kind == ETCD_UNSUPPORTED;
	if (etcd_ok(st))
		cs->version_ok = true;
	else if (refused)
	{
		ereport(WARNING,
				(errmsg("silo coordinator: etcd's cluster version is %s; cluster mode needs 3.4 or later",
						v.cluster),
				 errdetail("This node serves nothing.")));
		cs->next_version_us = silo_monotonic_us() + 10 * 1000000;
	}
	else
	{
		/* etcd unreachable: the other calls say so; check again later */
		cs->next_version_us = silo_monotonic_us() + 1000000;
	}
	return !refused;
}

/*
 * coord_step: one round of work (see the header comment).
 */
static void
coord_step(CoordState *cs)
{
	if (!coord_check_version(cs))
		return;
	coord_membership_step(cs);
	if (!cs->synced && silo_monotonic_us() >= cs->next_sync_us && !ShutdownRequestPending)
	{
		coord_watch_stop(cs);
		if (coord_view_resync(cs))
			coord_watch_start(cs);
	}
	if (!ShutdownRequestPending)
		coord_watch_check_fresh(cs);
	if (cs->reconcile && silo_monotonic_us() >= cs->next_reconcile_us)
		(void) coord_owners_reconcile(cs);
	if (cs->registered && !cs->member_gone && cs->synced && !ShutdownRequestPending)
		coord_moves_step(cs);
	else
		coord_sql_poll(cs);
	if (cs->dirty)
		coord_publish(cs);
}

/*
 * coord_wait_ms: how long the loop may wait before the next work is due,
 * at most COORD_WATCH_POLL_MS with a watch and COORD_MAX_WAIT_MS without.
 */
static int
coord_wait_ms(CoordState *cs)
{
	uint64		now = silo_monotonic_us();
	uint64		next = now + (uint64) COORD_MAX_WAIT_MS * 1000;
	int			cap = cs->watch != NULL ? COORD_WATCH_POLL_MS : COORD_MAX_WAIT_MS;

	if (cs->client == NULL)
		return COORD_MAX_WAIT_MS;
	if (cs->dirty)
		return 0;
	next = Min(next, cs->registered ? cs->next_keepalive_us : cs->next_register_us);
	if (!cs->synced)
		next = Min(next, cs->next_sync_us);
	else if (cs->watch != NULL)
		next = Min(next, cs->next_fresh_us);
	if (cs->reconcile)
		next = Min(next, cs->next_reconcile_us);
	/* a move under way: look again soon (a pause is short) */
	if (coord_moves_busy(cs))
		cap = Min(cap, 5);
	if (!cs->version_ok)
		next = Min(next, cs->next_version_us);
	if (next <= now)
		return 0;
	return (int) Min((next - now + 999) / 1000, (uint64) cap);
}

/*
 * coord_reload: SIGHUP.  A new silo.advertise_conninfo goes into the
 * member key and, by re-stamping, into this node's owner keys.
 */
static void
coord_reload(CoordState *cs)
{
	const char *conninfo;
	const char *repl;

	ConfigReloadPending = false;
	ProcessConfigFile(PGC_SIGHUP);
	conninfo = silo_advertise_conninfo ? silo_advertise_conninfo : "";
	repl = silo_replication_conninfo && silo_replication_conninfo[0]
		? silo_replication_conninfo : conninfo;
	/* what peers replicate from, and whether this node is leaving */
	if (strncmp(repl, cs->repl_conninfo, sizeof(cs->repl_conninfo) - 1) != 0 ||
		cs->draining != silo_draining)
	{
		strlcpy(cs->repl_conninfo, repl, sizeof(cs->repl_conninfo));
		if (cs->draining != silo_draining)
			ereport(LOG,
					(errmsg("silo coordinator: node \"%s\" %s", silo_node_id,
							silo_draining ? "is draining: placement moves its shards away"
							: "no longer drains")));
		cs->draining = silo_draining;
		cs->member_value_stale = cs->registered;
		cs->reconcile = true;
		cs->next_reconcile_us = 0;
	}
	if (strncmp(conninfo, cs->conninfo, sizeof(cs->conninfo) - 1) == 0)
		return;
	strlcpy(cs->conninfo, conninfo, sizeof(cs->conninfo));
	ereport(LOG,
			(errmsg("silo coordinator: silo.advertise_conninfo changed to \"%s\"", cs->conninfo)));
	cs->member_value_stale = cs->registered;
	cs->reconcile = true;
	cs->next_reconcile_us = 0;
}

/*
 * coord_stop: SIGTERM (see the header comment).
 */
static void
coord_stop(CoordState *cs)
{
	ereport(LOG, (errmsg("silo coordinator stopping")));
	coord_watch_stop(cs);
	coord_membership_revoke(cs);
	if (cs->client != NULL)
		coord_publish(cs);
	silo_cluster_set_coordinator(0);
	proc_exit(1);
}

/*
 * silo_coordinator_main: entry point of the coordinator background worker.
 */
void
silo_coordinator_main(Datum main_arg)
{
	CoordState *cs;
	MemoryContext loopcxt;
	SiloShard	none;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	/* later work (moving a shard's rows) runs SQL in silo.database */
	BackgroundWorkerInitializeConnection(GetConfigOption("silo.database", false, false), NULL, 0);
	pgstat_report_appname("silo coordinator");
	coord_pin_settings();

	cs = MemoryContextAllocZero(TopMemoryContext, sizeof(CoordState));
	cs->cxt = AllocSetContextCreate(TopMemoryContext, "silo coordinator",
									ALLOCSET_DEFAULT_SIZES);
	coord_state = cs;
	before_shmem_exit(coord_on_exit, (Datum) 0);

	/* nothing is served until this process knows better */
	memset(&none, 0, sizeof(none));
	silo_cluster_serve_until(0);
	silo_cluster_publish(&none, 0, false);
	silo_cluster_set_coordinator(MyProcPid);

	coord_timing(cs);
	coord_keys(cs);
	coord_view_init(cs);
	coord_membership_init(cs);
	coord_moves_init(cs);
	coord_client(cs);
	ereport(LOG,
			(errmsg("silo coordinator started: node \"%s\", etcd %s, prefix \"%s\", lease TTL %d s (keepalive every %d ms, margin %d ms)",
					silo_node_id, silo_etcd_endpoints, cs->prefix, cs->ttl_s,
					(int) (cs->interval_us / 1000), (int) (cs->margin_us / 1000))));

	loopcxt = AllocSetContextCreate(TopMemoryContext, "silo coordinator loop",
									ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		int			wait_ms;

		/* no statement to cancel: a query cancel is dropped, as in the broker */
		QueryCancelPending = false;
		CHECK_FOR_INTERRUPTS();
		if (ShutdownRequestPending)
			coord_stop(cs);
		if (ConfigReloadPending)
			coord_reload(cs);

		MemoryContextSwitchTo(loopcxt);
		if (cs->client != NULL)
			coord_step(cs);
		wait_ms = coord_wait_ms(cs);
		if (cs->watch != NULL && !ShutdownRequestPending)
		{
			coord_watch_poll(cs, wait_ms);
			wait_ms = 0;
		}
		MemoryContextSwitchTo(TopMemoryContext);
		MemoryContextReset(loopcxt);

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 wait_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
