/*-------------------------------------------------------------------------
 *
 * etcd_watch.c
 *	  Streaming watches: one POST /v3/watch per watch, driven without
 *	  blocking through the watch's own curl multi handle.
 *
 * The gateway answers a watch with a chunked HTTP 200 stream of compact
 * JSON messages, each followed by '\n'.  libcurl hands the write callback
 * arbitrary slices of it -- half a message, or several -- so the callback
 * only appends to a buffer (and counts, for the tests, how many slices a
 * message spanned); complete lines are decoded and delivered afterwards,
 * outside libcurl's callbacks, where the caller's callback may safely make
 * unary calls.  When the transfer ends, the unterminated remainder is
 * decoded too: a member shutting down sends its final error object without
 * the newline.
 *
 * How a watch ends, and what the caller sees (state, then status):
 *	- the member was killed: the stream breaks off (CURLE_PARTIAL_FILE)
 *	  -> TRANSPORT;
 *	- the member shuts down, or lost its leader (we always send
 *	  "Grpc-Metadata-hasleader: true"): an in-stream {"error":{...}} object
 *	  -> ERROR;
 *	- compaction past the start revision: a canceled message with
 *	  compact_revision, while the HTTP stream stays open -> CANCELED (the
 *	  stream is closed here);
 *	- the member hangs (SIGSTOP): TCP stays up and nothing arrives; only
 *	  the silence limit notices -> STALLED;
 *	- anything else that ends the stream without an error -> CLOSED.
 * TRANSPORT, STALLED and unavailability errors also move the client on to
 * its next endpoint, so that a restarted watch goes elsewhere.
 *
 * src/etcd/etcd_watch.c
 *
 *-------------------------------------------------------------------------
 */
#include "etcd_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>

#define ERROR_BODY_MAX 4096

struct EtcdWatch
{
	EtcdClient *client;
	char		endpoint[ETCD_ENDPOINT_SIZE];
	CURLM	   *multi;
	CURL	   *easy;			/* NULL once the transfer is torn down */
	struct curl_slist *headers;
	char		errbuf[CURL_ERROR_SIZE];
	EtcdBuf		pending;		/* stream bytes not yet framed */
	EtcdBuf		error_body;		/* body of a non-200 answer */
	long		http_status;	/* 0 until the first byte */
	bool		overflow;		/* pending grew past ETCD_MAX_BODY */
	int64_t		start_revision;
	int64_t		last_revision;
	int64_t		compact_revision;
	int			silence_limit_ms;
	int64_t		last_byte_ms;
	uint64_t	cur_parts;		/* write callbacks the open message spans */
	EtcdWatchState state;
	EtcdStatus	status;
	EtcdWatchStats stats;
};

/*
 * watch_write
 *		libcurl write callback: buffer the bytes, note the time, and count
 *		how many callbacks each message spans.  Never decodes.
 */
static size_t
watch_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
	EtcdWatch  *w = arg;
	size_t		n = size * nmemb;
	const char *last_nl;

	w->last_byte_ms = etcd_now_ms();
	w->stats.write_callbacks++;
	if (w->http_status == 0)
		curl_easy_getinfo(w->easy, CURLINFO_RESPONSE_CODE, &w->http_status);
	if (w->http_status != 200)
	{
		if (w->error_body.len < ERROR_BODY_MAX)
			etcd_buf_append(&w->error_body, ptr,
							n < ERROR_BODY_MAX - w->error_body.len ? n : ERROR_BODY_MAX - w->error_body.len);
		return n;
	}
	last_nl = n ? memrchr(ptr, '\n', n) : NULL;
	if (last_nl == NULL)
		w->cur_parts += n ? 1 : 0;
	else
	{
		uint64_t	parts = w->cur_parts + 1;

		if (parts > w->stats.max_message_parts)
			w->stats.max_message_parts = parts;
		w->cur_parts = (last_nl + 1 < ptr + n) ? 1 : 0;
	}
	if (!etcd_buf_append(&w->pending, ptr, n))
	{
		w->overflow = true;
		return 0;				/* fails the transfer: CURLE_WRITE_ERROR */
	}
	return n;
}

/*
 * teardown
 *		Stop the transfer and close its connection.
 */
static void
teardown(EtcdWatch *w)
{
	if (w->easy != NULL)
	{
		curl_multi_remove_handle(w->multi, w->easy);
		curl_easy_cleanup(w->easy);
		w->easy = NULL;
	}
}

/*
 * end_watch
 *		Record how the watch ended, close the stream, and move the client
 *		off an endpoint that broke or hung.
 */
static void
end_watch(EtcdWatch *w, EtcdWatchState state)
{
	w->state = state;
	snprintf(w->status.endpoint, sizeof(w->status.endpoint), "%s", w->endpoint);
	teardown(w);
	if (state == ETCD_WATCH_TRANSPORT || state == ETCD_WATCH_STALLED ||
		(state == ETCD_WATCH_ERROR && w->status.kind == ETCD_UNAVAILABLE))
		etcd_endpoint_failed(w->client, w->endpoint);
}

/*
 * deliver
 *		Hand one event to the callback (if any).
 */
static void
deliver(EtcdWatchCallback cb, void *arg, EtcdWatchEventType type, int64_t revision,
		const EtcdHeader *header, const EtcdKeyValue *kv, const EtcdKeyValue *prev_kv)
{
	EtcdWatchEvent ev;

	if (cb == NULL)
		return;
	ev.type = type;
	ev.revision = revision;
	ev.header = header;
	ev.kv = kv;
	ev.prev_kv = prev_kv;
	cb(&ev, arg);
}

/*
 * cancel_kind
 *		Classify a cancel_reason ("rpc error: code = Unauthenticated desc =
 *		..."): refusals for auth reasons are ETCD_AUTH.
 */
static EtcdStatusKind
cancel_kind(const char *reason)
{
	if (strstr(reason, "Unauthenticated") || strstr(reason, "PermissionDenied") ||
		etcd_kind_from_grpc(0, 0, reason) == ETCD_AUTH)
		return ETCD_AUTH;
	return ETCD_UNAVAILABLE;
}

/*
 * handle_message
 *		Decode one framed message and act on it: deliver its events or
 *		progress, or end the watch.
 */
static void
handle_message(EtcdWatch *w, const char *line, size_t len, EtcdWatchCallback cb, void *arg)
{
	EtcdWatchMsg msg;
	size_t		i;

	w->stats.messages++;
	if (!etcdj_decode_watch(line, len, &msg, &w->status))
	{
		end_watch(w, ETCD_WATCH_ERROR);
		return;
	}
	if (msg.is_error)
	{
		w->status = msg.error;
		end_watch(w, ETCD_WATCH_ERROR);
	}
	else if (msg.canceled)
	{
		w->compact_revision = msg.compact_revision;
		if (msg.compact_revision > 0)
			etcd_status_set(&w->status, ETCD_INVALID,
							"watch canceled: revision %lld has been compacted",
							(long long) msg.compact_revision);
		else
			etcd_status_set(&w->status, cancel_kind(msg.cancel_reason), "watch canceled: %s",
							msg.cancel_reason[0] ? msg.cancel_reason : "no reason given");
		end_watch(w, ETCD_WATCH_CANCELED);
	}
	else if (msg.created)
	{
		if (w->start_revision == 0)
			w->last_revision = msg.header.revision;
		deliver(cb, arg, ETCD_EVENT_CREATED, msg.header.revision, &msg.header, NULL, NULL);
	}
	else if (msg.n_events == 0)
	{
		/* a progress notification: everything up to this revision is in */
		if (msg.header.revision > w->last_revision)
			w->last_revision = msg.header.revision;
		w->stats.progress++;
		deliver(cb, arg, ETCD_EVENT_PROGRESS, msg.header.revision, &msg.header, NULL, NULL);
	}
	for (i = 0; i < msg.n_events && w->state == ETCD_WATCH_RUNNING; i++)
	{
		EtcdWatchMsgEvent *e = &msg.events[i];

		/* not the header's revision: a replay may be cut into batches */
		if (e->kv.mod_revision > w->last_revision)
			w->last_revision = e->kv.mod_revision;
		w->stats.events++;
		deliver(cb, arg, e->is_delete ? ETCD_EVENT_DELETE : ETCD_EVENT_PUT,
				e->kv.mod_revision, &msg.header, &e->kv, e->has_prev_kv ? &e->prev_kv : NULL);
	}
	etcdj_watch_msg_free(&msg);
}

/*
 * frame
 *		Decode every complete line in the buffer; at the end of the transfer
 *		(final) also the unterminated rest.  Returns messages handled.
 */
static int
frame(EtcdWatch *w, bool final, EtcdWatchCallback cb, void *arg)
{
	size_t		off = 0;
	int			handled = 0;

	while (w->state == ETCD_WATCH_RUNNING && off < w->pending.len)
	{
		const char *start = w->pending.data + off;
		const char *nl = memchr(start, '\n', w->pending.len - off);
		size_t		len;
		size_t		k;

		if (nl == NULL && !final)
			break;
		len = nl ? (size_t) (nl - start) : w->pending.len - off;
		off += len + (nl ? 1 : 0);
		for (k = 0; k < len && (start[k] == ' ' || start[k] == '\r' || start[k] == '\t'); k++)
			;
		if (k == len)
			continue;			/* a blank line */
		handle_message(w, start, len, cb, arg);
		handled++;
	}
	etcd_buf_consume(&w->pending, off);
	return handled;
}

/*
 * finish_transfer
 *		The HTTP transfer ended: decide how the watch ended.
 */
static void
finish_transfer(EtcdWatch *w, CURLcode rc, EtcdWatchCallback cb, void *arg)
{
	if (w->http_status == 0)
		curl_easy_getinfo(w->easy, CURLINFO_RESPONSE_CODE, &w->http_status);
	if (w->http_status != 0 && w->http_status != 200)
	{
		etcdj_decode_error(w->error_body.data, w->error_body.len, w->http_status, &w->status);
		end_watch(w, ETCD_WATCH_ERROR);
		return;
	}
	frame(w, true, cb, arg);
	if (w->state != ETCD_WATCH_RUNNING)
		return;
	if (rc == CURLE_OK)
	{
		w->status.http_status = w->http_status;
		etcd_status_set(&w->status, ETCD_UNAVAILABLE, "the watch stream ended");
		end_watch(w, ETCD_WATCH_CLOSED);
	}
	else
	{
		etcd_status_from_curl(&w->status, rc, w->errbuf);
		w->status.http_status = w->http_status;
		if (w->overflow)
			etcd_status_set(&w->status, ETCD_PROTOCOL, "watch message too large");
		end_watch(w, ETCD_WATCH_TRANSPORT);
	}
}

/*
 * step
 *		Let libcurl move data, then deliver what arrived and check for the
 *		end of the transfer and for silence.  Returns messages handled.
 */
static int
step(EtcdWatch *w, EtcdWatchCallback cb, void *arg)
{
	int			running = 0;
	int			handled;
	int			left;
	CURLMsg    *m;

	curl_multi_perform(w->multi, &running);
	handled = frame(w, false, cb, arg);
	while (w->state == ETCD_WATCH_RUNNING && (m = curl_multi_info_read(w->multi, &left)) != NULL)
	{
		if (m->msg == CURLMSG_DONE)
			finish_transfer(w, m->data.result, cb, arg);
	}
	if (w->state == ETCD_WATCH_RUNNING && w->silence_limit_ms > 0 &&
		etcd_now_ms() - w->last_byte_ms > w->silence_limit_ms)
	{
		etcd_status_set(&w->status, ETCD_TIMEOUT, "no data from etcd for %d ms",
						w->silence_limit_ms);
		end_watch(w, ETCD_WATCH_STALLED);
	}
	return handled;
}

/*
 * etcd_watch_start
 *		Open the stream and send the create request; see etcd.h.
 */
EtcdWatch *
etcd_watch_start(EtcdClient *c, const EtcdWatchRequest *req, EtcdStatus *st)
{
	EtcdWatch  *w;
	char		url[ETCD_ENDPOINT_SIZE + 16];
	char	   *body;

	*st = etcd_status_ok();
	if (req->silence_limit_ms < 0 || req->recv_buffer_size < 0)
	{
		etcd_status_set(st, ETCD_INVALID, "negative silence limit or buffer size");
		return NULL;
	}
	if ((body = etcdj_watch_create(req, st)) == NULL)
		return NULL;
	if (!etcd_ensure_token(c, etcd_now_ms() + c->total_timeout_ms, st))
	{
		free(body);
		return NULL;
	}
	w = calloc(1, sizeof(EtcdWatch));
	if (w == NULL || (w->multi = curl_multi_init()) == NULL ||
		(w->easy = curl_easy_init()) == NULL ||
		(w->headers = etcd_request_headers(c, true)) == NULL)
	{
		etcd_status_set(st, ETCD_NO_MEMORY, "out of memory");
		etcd_watch_free(w);
		free(body);
		return NULL;
	}
	w->client = c;
	snprintf(w->endpoint, sizeof(w->endpoint), "%s", etcd_client_endpoint(c));
	snprintf(url, sizeof(url), "%s/v3/watch", w->endpoint);
	etcd_set_common_options(c, w->easy);
	curl_easy_setopt(w->easy, CURLOPT_URL, url);
	curl_easy_setopt(w->easy, CURLOPT_HTTPHEADER, w->headers);
	curl_easy_setopt(w->easy, CURLOPT_COPYPOSTFIELDS, body);
	curl_easy_setopt(w->easy, CURLOPT_TIMEOUT_MS, 0L);
	curl_easy_setopt(w->easy, CURLOPT_ERRORBUFFER, w->errbuf);
	curl_easy_setopt(w->easy, CURLOPT_WRITEFUNCTION, watch_write);
	curl_easy_setopt(w->easy, CURLOPT_WRITEDATA, w);
	if (req->recv_buffer_size > 0)
		curl_easy_setopt(w->easy, CURLOPT_BUFFERSIZE, (long) req->recv_buffer_size);
	free(body);
	if (curl_multi_add_handle(w->multi, w->easy) != CURLM_OK)
	{
		etcd_status_set(st, ETCD_NO_MEMORY, "could not add the watch transfer");
		etcd_watch_free(w);
		return NULL;
	}
	w->client->stats.requests++;
	w->start_revision = req->start_revision;
	w->last_revision = req->start_revision > 0 ? req->start_revision - 1 : 0;
	w->silence_limit_ms = req->silence_limit_ms;
	w->last_byte_ms = etcd_now_ms();
	w->state = ETCD_WATCH_RUNNING;
	w->status = etcd_status_ok();
	snprintf(w->status.endpoint, sizeof(w->status.endpoint), "%s", w->endpoint);
	step(w, NULL, NULL);		/* start connecting now */
	return w;
}

/*
 * etcd_watch_poll
 *		Wait up to timeout_ms for data and deliver it; see etcd.h.
 */
EtcdWatchState
etcd_watch_poll(EtcdWatch *w, int timeout_ms, EtcdWatchCallback cb, void *arg)
{
	int64_t		deadline = etcd_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);

	while (w->state == ETCD_WATCH_RUNNING)
	{
		int64_t		now;
		int64_t		wait;

		if (step(w, cb, arg) > 0 || w->state != ETCD_WATCH_RUNNING)
			break;
		now = etcd_now_ms();
		if (now >= deadline)
			break;
		wait = deadline - now;
		if (w->silence_limit_ms > 0)
		{
			int64_t		stall_in = w->last_byte_ms + w->silence_limit_ms + 1 - now;

			if (stall_in < wait)
				wait = stall_in > 1 ? stall_in : 1;
		}
		curl_multi_poll(w->multi, NULL, 0, (int) wait, NULL);
	}
	return w->state;
}

/*
 * etcd_watch_wait_fds
 *		The sockets and timeout an outer wait loop should use; see etcd.h.
 *		Built on curl_multi_fdset, which cannot report descriptors at or
 *		above FD_SETSIZE: the 100 ms cap then keeps the watch moving.
 */
int
etcd_watch_wait_fds(EtcdWatch *w, struct pollfd *fds, int max_fds, int *timeout_ms)
{
	fd_set		rd;
	fd_set		wr;
	fd_set		ex;
	int			maxfd = -1;
	long		curl_timeout = -1;
	int			n = 0;
	int			fd;
	int64_t		t;

	*timeout_ms = 0;
	if (w->state != ETCD_WATCH_RUNNING || w->easy == NULL)
		return 0;
	FD_ZERO(&rd);
	FD_ZERO(&wr);
	FD_ZERO(&ex);
	curl_multi_fdset(w->multi, &rd, &wr, &ex, &maxfd);
	curl_multi_timeout(w->multi, &curl_timeout);
	for (fd = 0; fd <= maxfd && n < max_fds; fd++)
	{
		short		events = (FD_ISSET(fd, &rd) ? POLLIN : 0) | (FD_ISSET(fd, &wr) ? POLLOUT : 0);

		if (events == 0)
			continue;
		fds[n].fd = fd;
		fds[n].events = events;
		fds[n].revents = 0;
		n++;
	}
	t = (curl_timeout < 0) ? 1000 : curl_timeout;
	if (n == 0 && t > 100)
		t = 100;
	if (w->silence_limit_ms > 0)
	{
		int64_t		stall_in = w->last_byte_ms + w->silence_limit_ms + 1 - etcd_now_ms();

		if (stall_in < t)
			t = stall_in > 0 ? stall_in : 0;
	}
	*timeout_ms = (int) t;
	return n;
}

/*
 * etcd_watch_state
 *		Running, or how the watch ended.
 */
EtcdWatchState
etcd_watch_state(const EtcdWatch *w)
{
	return w->state;
}

/*
 * etcd_watch_state_name
 *		Stable lower-case names of the states.
 */
const char *
etcd_watch_state_name(EtcdWatchState state)
{
	switch (state)
	{
		case ETCD_WATCH_RUNNING:
			return "running";
		case ETCD_WATCH_CLOSED:
			return "closed";
		case ETCD_WATCH_TRANSPORT:
			return "transport";
		case ETCD_WATCH_ERROR:
			return "error";
		case ETCD_WATCH_CANCELED:
			return "canceled";
		case ETCD_WATCH_STALLED:
			return "stalled";
	}
	return "unknown";
}

/*
 * etcd_watch_status
 *		Why the watch ended (kind, codes, message).
 */
const EtcdStatus *
etcd_watch_status(const EtcdWatch *w)
{
	return &w->status;
}

/*
 * etcd_watch_last_revision
 *		The revision to resume after.
 */
int64_t
etcd_watch_last_revision(const EtcdWatch *w)
{
	return w->last_revision;
}

/*
 * etcd_watch_compact_revision
 *		The compaction revision that canceled the watch, or 0.
 */
int64_t
etcd_watch_compact_revision(const EtcdWatch *w)
{
	return w->compact_revision;
}

/*
 * etcd_watch_stats
 *		Copy the watch's counters.
 */
void
etcd_watch_stats(const EtcdWatch *w, EtcdWatchStats *out)
{
	*out = w->stats;
}

/*
 * etcd_watch_free
 *		Close the stream (if still open) and free everything.
 */
void
etcd_watch_free(EtcdWatch *w)
{
	if (w == NULL)
		return;
	teardown(w);
	if (w->multi)
		curl_multi_cleanup(w->multi);
	curl_slist_free_all(w->headers);
	etcd_buf_free(&w->pending);
	etcd_buf_free(&w->error_body);
	free(w);
}
