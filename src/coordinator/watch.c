/*-------------------------------------------------------------------------
 *
 * watch.c
 *	  The watch of P/coord/ (members, owners, the shard map), started from
 *	  the revision of the last full read + 1, and the periodic freshness
 *	  check that catches a watch that went quiet without ending.
 *
 * A watch ends in one of four ways (etcd-gateway-notes §0.9): the stream
 * breaks (a killed member), etcd sends an error in the stream (a member
 * shutting down, or "no leader": the watch asks with hasleader), etcd
 * cancels it (compaction), or nothing arrives for the silence limit (a
 * hung member).  Whatever the end, the coordinator reads everything again
 * and watches again from that read, after a jittered backoff.
 *
 * The silence limit must exceed etcd's progress notification interval,
 * which is 10 minutes by default, so it is 11 minutes; shorter stalls are
 * caught by the freshness check: every 2 keepalive intervals a
 * linearizable keys-only read of P/coord/ is compared with the mirror
 * (keys and their mod revisions).  A disagreement may be an event still
 * in flight, so it is checked once more a keepalive interval later, and a
 * second disagreement restarts the watch from a full read.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_coordinator.h"

/*
 * watch_event: the watch's callback: members, owners and the map change
 * in the mirror.  Runs inside libcurl's write callback: nothing here may
 * poll or free the watch.
 */
static void
watch_event(const EtcdWatchEvent *event, void *arg)
{
	CoordState *cs = (CoordState *) arg;

	switch (event->type)
	{
		case ETCD_EVENT_PUT:
			coord_view_apply_kv(cs, event->kv, false);
			break;
		case ETCD_EVENT_DELETE:
			coord_view_apply_kv(cs, event->kv, true);
			break;
		case ETCD_EVENT_CREATED:
		case ETCD_EVENT_PROGRESS:
			break;
	}
}

/*
 * coord_watch_start: watch P/coord/ from the revision after the last
 * full read (only while the mirror is current).
 */
void
coord_watch_start(CoordState *cs)
{
	EtcdWatchRequest req = {0};
	EtcdStatus	st;

	if (!cs->synced || cs->watch != NULL)
		return;
	req.key = etcd_cstr(cs->prefix);
	req.prefix = true;
	req.start_revision = cs->view_revision + 1;
	req.silence_limit_ms = COORD_WATCH_SILENCE_MS;
	cs->watch = etcd_watch_start(cs->client, &req, &st);
	if (cs->watch == NULL)
		coord_view_read_failed(cs, "start a watch", st);
}

/*
 * coord_watch_stop: end the watch, if any.
 */
void
coord_watch_stop(CoordState *cs)
{
	if (cs->watch != NULL)
		etcd_watch_free(cs->watch);
	cs->watch = NULL;
}

/*
 * coord_watch_poll: wait at most timeout_ms for the watch's events and
 * apply them; a watch that ended is freed and a full read scheduled.
 */
void
coord_watch_poll(CoordState *cs, int timeout_ms)
{
	EtcdWatchState state;

	if (cs->watch == NULL)
		return;
	state = etcd_watch_poll(cs->watch, timeout_ms, watch_event, cs);
	if (state == ETCD_WATCH_RUNNING)
		return;
	{
		const EtcdStatus *st = etcd_watch_status(cs->watch);
		int64		compacted = etcd_watch_compact_revision(cs->watch);

		ereport(LOG,
				(errmsg("silo coordinator: the watch of \"%s\" ended (%s%s%s); reading the cluster state again",
						cs->prefix, etcd_watch_state_name(state),
						st->message[0] ? ": " : "", st->message),
				 compacted > 0
				 ? errdetail("etcd compacted its history up to revision %lld.", (long long) compacted)
				 : errdetail("Endpoint %s.", st->endpoint)));
	}
	coord_watch_stop(cs);
	cs->synced = false;
	cs->next_sync_us = silo_monotonic_us() + coord_jitter_ms(cs->backoff_ms) * 1000;
	cs->backoff_ms = Min(cs->backoff_ms * 2, COORD_BACKOFF_MAX_MS);
}

/*
 * coord_watch_check_fresh: the periodic freshness check (see the header
 * comment).  A failed read changes nothing: the keepalive decides about
 * serving, and the next check comes anyway.
 */
void
coord_watch_check_fresh(CoordState *cs)
{
	EtcdRangeRequest req = {0};
	EtcdRangeResult res = {0};
	EtcdStatus	st;
	uint64		now = silo_monotonic_us();
	bool		matches;

	if (!cs->synced || cs->watch == NULL || now < cs->next_fresh_us)
		return;
	req.key = etcd_cstr(cs->prefix);
	req.prefix = true;
	req.keys_only = true;
	st = etcd_range(cs->client, &req, &res);
	if (!etcd_ok(st))
	{
		cs->next_fresh_us = now + cs->interval_us;
		return;
	}
	matches = coord_view_matches(cs, &res);
	etcd_range_result_free(&res);
	if (matches)
	{
		cs->fresh_suspect = false;
		cs->next_fresh_us = now + 2 * cs->interval_us;
	}
	else if (!cs->fresh_suspect)
	{
		cs->fresh_suspect = true;
		cs->next_fresh_us = now + cs->interval_us;
	}
	else
	{
		ereport(LOG,
				(errmsg("silo coordinator: the watch of \"%s\" missed changes; reading the cluster state again",
						cs->prefix)));
		coord_watch_stop(cs);
		cs->synced = false;
		cs->next_sync_us = 0;
	}
}
