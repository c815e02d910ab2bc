/*-------------------------------------------------------------------------
 *
 * etcd_int.h
 *	  Private declarations shared by the files of the etcd client.
 *
 * Module map:
 *	  etcd.c		the client: configuration, endpoints and failover, the
 *					unary HTTP transport, authentication, status mapping
 *	  etcd_api.c	the typed calls (KV, txn, leases, cluster, auth admin)
 *	  etcd_json.c	every JSON encoder; etcd_json_dec.c every decoder (the
 *					only jansson users)
 *	  etcd_watch.c	streaming watches on a curl multi handle
 *	  etcd_util.c	statuses, the clock, prefix ends, base64, byte buffers
 *
 * Nothing here is part of the API; the test driver includes this header
 * only to check the encoders against etcd's wire format.
 *
 * src/etcd/etcd_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_ETCD_INT_H
#define SILO_ETCD_INT_H

/* first include of every file here: memrchr and strndup are GNU/POSIX */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "etcd.h"

#include <curl/curl.h>

#define ETCD_MAX_ENDPOINTS 32
#define ETCD_MAX_BODY ((size_t) 256 * 1024 * 1024)

/* a growable byte buffer, always NUL-terminated when non-empty */
typedef struct EtcdBuf
{
	char	   *data;
	size_t		len;
	size_t		cap;
} EtcdBuf;

extern bool etcd_buf_append(EtcdBuf *buf, const void *data, size_t len);
extern void etcd_buf_consume(EtcdBuf *buf, size_t n);
extern void etcd_buf_free(EtcdBuf *buf);
extern void etcd_kv_free(EtcdKeyValue *kv);

/* base64, standard alphabet with padding (etcd rejects anything else) */
extern char *etcd_b64_encode(const void *data, size_t len);
extern bool etcd_b64_decode(const char *in, size_t len, char **out, size_t *out_len);

struct EtcdClient
{
	char	   *endpoints[ETCD_MAX_ENDPOINTS];
	int			n_endpoints;
	int			current;		/* index of the endpoint tried first */
	int			request_timeout_ms;
	int			connect_timeout_ms;
	int			total_timeout_ms;
	int			max_attempts;
	char	   *user;
	char	   *password;
	char	   *token;			/* NULL until authenticated */
	char	   *ca_file;
	char	   *cert_file;
	char	   *key_file;
	CURL	   *easy;			/* reused by unary calls (keep-alive) */
	EtcdClientStats stats;
};

/* flags of etcd_call */
#define ETCD_CALL_READ		0x01	/* safe to repeat: retried anywhere */
#define ETCD_CALL_NO_AUTH	0x02	/* send no token (authenticate itself) */
#define ETCD_CALL_GET		0x04	/* GET instead of POST (/version) */
#define ETCD_CALL_STREAM	0x08	/* a 200 body may hold an error object */

extern bool etcd_call(EtcdClient *client, const char *path, const char *body,
					  int flags, EtcdBuf *resp, EtcdStatus *st);
extern bool etcd_ensure_token(EtcdClient *client, int64_t deadline_ms, EtcdStatus *st);
extern void etcd_set_common_options(EtcdClient *client, CURL *easy);
extern struct curl_slist *etcd_request_headers(EtcdClient *client, bool watch);
extern void etcd_endpoint_failed(EtcdClient *client, const char *endpoint);

extern int64_t etcd_now_ms(void);
extern EtcdStatus etcd_status_ok(void);
extern void etcd_status_set(EtcdStatus *st, EtcdStatusKind kind, const char *fmt,...)
			__attribute__((format(printf, 3, 4)));
extern EtcdStatusKind etcd_kind_from_grpc(int grpc_code, long http_status,
										  const char *message);
extern void etcd_status_from_curl(EtcdStatus *st, CURLcode rc, const char *errbuf);

/* ---- etcd_json.c: encoders (malloc'd JSON text, or NULL with *st set) ---- */
extern char *etcdj_range(const EtcdRangeRequest *req, EtcdStatus *st);
extern char *etcdj_put(const EtcdPutRequest *req, EtcdStatus *st);
extern char *etcdj_delete(const EtcdDeleteRequest *req, EtcdStatus *st);
extern char *etcdj_txn(const EtcdTxnRequest *req, EtcdStatus *st);
extern char *etcdj_watch_create(const EtcdWatchRequest *req, EtcdStatus *st);
extern char *etcdj_lease(int64_t id, int64_t ttl, bool with_ttl, EtcdStatus *st);
extern char *etcdj_compaction(int64_t revision, bool physical, EtcdStatus *st);
extern char *etcdj_strings(EtcdStatus *st, int n, const char *const *names,
						   const char *const *values);

/* ---- etcd_json_dec.c: decoders (false with *st set: ETCD_PROTOCOL etc.) ---- */
extern bool etcdj_decode_range(const EtcdBuf *body, EtcdRangeResult *out, EtcdStatus *st);
extern bool etcdj_decode_put(const EtcdBuf *body, EtcdPutResult *out, EtcdStatus *st);
extern bool etcdj_decode_delete(const EtcdBuf *body, EtcdDeleteResult *out, EtcdStatus *st);
extern bool etcdj_decode_txn(const EtcdBuf *body, EtcdTxnResult *out, EtcdStatus *st);
extern bool etcdj_decode_lease(const EtcdBuf *body, bool keepalive, EtcdLease *out,
							   EtcdStatus *st);
extern bool etcdj_decode_header(const EtcdBuf *body, EtcdHeader *out, EtcdStatus *st);
extern bool etcdj_decode_members(const EtcdBuf *body, EtcdMemberList *out, EtcdStatus *st);
extern bool etcdj_decode_status(const EtcdBuf *body, EtcdServerStatus *out, EtcdStatus *st);
extern bool etcdj_decode_version(const EtcdBuf *body, EtcdVersion *out, EtcdStatus *st);
extern bool etcdj_decode_token(const EtcdBuf *body, char **token, EtcdStatus *st);

/* an error answer (either shape) into st: grpc code, message and kind */
extern void etcdj_decode_error(const char *body, size_t len, long http_status,
							   EtcdStatus *st);

/* is this 200 body an in-stream {"error":{...}} object?  fills st if so */
extern bool etcdj_stream_error(const char *body, size_t len, EtcdStatus *st);


/* one decoded watch message */
typedef struct EtcdWatchMsgEvent
{
	bool		is_delete;
	EtcdKeyValue kv;
	bool		has_prev_kv;
	EtcdKeyValue prev_kv;
} EtcdWatchMsgEvent;

typedef struct EtcdWatchMsg
{
	bool		is_error;		/* an in-stream error object; see error */
	EtcdStatus	error;
	EtcdHeader	header;
	bool		created;
	bool		canceled;
	int64_t		compact_revision;
	char		cancel_reason[ETCD_MESSAGE_SIZE];
	EtcdWatchMsgEvent *events;
	size_t		n_events;
} EtcdWatchMsg;

extern bool etcdj_decode_watch(const char *line, size_t len, EtcdWatchMsg *out,
							   EtcdStatus *st);
extern void etcdj_watch_msg_free(EtcdWatchMsg *msg);

#endif							/* SILO_ETCD_INT_H */
