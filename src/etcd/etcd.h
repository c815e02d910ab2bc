/*-------------------------------------------------------------------------
 *
 * etcd.h
 *	  A small client for etcd 3.4's v3 JSON gateway (grpc-gateway), in plain
 *	  C over libcurl and jansson.
 *
 * Who uses it: the cluster coordinator (a background worker living in its
 * own shared library, so that ordinary backends never load libcurl) and the
 * siloctl command-line tool.  Nothing here includes a PostgreSQL header:
 * memory comes from malloc, errors are returned as values, nothing is ever
 * printed, nothing exits, and nothing blocks for longer than the configured
 * time budget.
 *
 * Threads and globals: a client and everything made from it belong to one
 * thread.  The library has no global state of its own; libcurl has, so call
 * etcd_global_init() once per process, before the first client is created
 * (in a background worker: in the worker process, not in the postmaster).
 * Every transfer sets CURLOPT_NOSIGNAL, so libcurl never raises SIGALRM;
 * libcurl then leaves SIGPIPE alone too, so the process should ignore it
 * (PostgreSQL's processes do; a tool must say signal(SIGPIPE, SIG_IGN)).
 *
 * Error model: every call returns an EtcdStatus by value.  Its kind says
 * what a caller can do about it (see EtcdStatusKind); the HTTP status, the
 * gRPC code, the libcurl code and etcd's message are there for logs.  Calls
 * that fail leave their result structs zeroed, so freeing them is always
 * safe (etcd_version_check alone fills its result when it refuses the
 * version it read).
 *
 * Memory: results (EtcdRangeResult and the like) own all their memory,
 * including the bytes of every key and value.  Free each with its _free
 * function, which also re-zeroes it; freeing a zeroed struct is a no-op.
 * Inputs (EtcdBytes, strings, request structs) are borrowed for the length
 * of the call only.
 *
 * Keys and values are byte strings that carry a length (NUL and 0xff bytes
 * are fine).  Returned ones are also NUL-terminated for convenience, one
 * byte past their length.
 *
 * Retries and failover: a call tries the current endpoint and, on a
 * connection error, a timeout, an HTTP 5xx or a "no leader" answer, moves
 * to the next endpoint (which then stays current: the client remembers the
 * endpoint that worked).  Reads are retried there; a write is retried only
 * when it cannot have been applied (it never reached a server, or the
 * server said it had no leader).  A write that may have reached etcd fails
 * with status.indeterminate set: it may or may not have been applied, and
 * the caller must read before deciding (a txn retried blindly could fail
 * only because its first attempt succeeded).  All attempts of one call stay
 * within total_timeout_ms, which defaults to well under etcd's own 7 s
 * request timeout.
 *
 * src/etcd/etcd.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_ETCD_H
#define SILO_ETCD_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ----------------------------------------------------------------------
 * Status
 * ---------------------------------------------------------------------- */

typedef enum EtcdStatusKind
{
	ETCD_OK = 0,
	ETCD_NOT_FOUND,				/* gRPC NotFound: unknown lease, and the like */
	ETCD_PRECONDITION,			/* gRPC FailedPrecondition / AlreadyExists:
								 * lease ID taken, auth prerequisites */
	ETCD_INVALID,				/* a bad request: rejected locally, or gRPC
								 * InvalidArgument / OutOfRange (compacted or
								 * future revision) */
	ETCD_UNAVAILABLE,			/* no usable answer: connection refused or
								 * reset, TLS failure, HTTP 5xx, no leader */
	ETCD_TIMEOUT,				/* the client's deadline passed first */
	ETCD_AUTH,					/* wrong password, missing or rejected token,
								 * permission denied */
	ETCD_PROTOCOL,				/* an answer this client cannot read */
	ETCD_UNSUPPORTED,			/* the etcd cluster is older than 3.4 */
	ETCD_NO_MEMORY				/* malloc failed */
} EtcdStatusKind;

#define ETCD_MESSAGE_SIZE 256
#define ETCD_ENDPOINT_SIZE 128

typedef struct EtcdStatus
{
	EtcdStatusKind kind;
	bool		indeterminate;	/* a write that may have been applied */
	long		http_status;	/* 0: no HTTP answer */
	int			grpc_code;		/* 0: none (or OK) */
	int			curl_code;		/* 0: CURLE_OK */
	char		message[ETCD_MESSAGE_SIZE];	/* etcd's or libcurl's text */
	char		endpoint[ETCD_ENDPOINT_SIZE];	/* the last endpoint tried */
} EtcdStatus;

/* the stable lower-case name of a kind ("ok", "not_found", ...) */
extern const char *etcd_kind_name(EtcdStatusKind kind);

/* did the call succeed? */
static inline bool
etcd_ok(EtcdStatus st)
{
	return st.kind == ETCD_OK;
}

/* ----------------------------------------------------------------------
 * Bytes, keys, headers
 * ---------------------------------------------------------------------- */

/* a borrowed byte string */
typedef struct EtcdBytes
{
	const void *data;
	size_t		len;
} EtcdBytes;

/* bytes from a pointer and a length */
static inline EtcdBytes
etcd_bytes(const void *data, size_t len)
{
	EtcdBytes	b = {data, len};

	return b;
}

/* a NUL-terminated string as bytes (without the NUL) */
extern EtcdBytes etcd_cstr(const char *s);

/*
 * The range_end that selects every key starting with prefix: the prefix
 * with trailing 0xff bytes dropped and its last byte incremented; "\0"
 * (everything to the end of the keyspace) when nothing is left.  out must
 * have room for max(len, 1) bytes; returns the length written.
 */
extern size_t etcd_prefix_end(const void *prefix, size_t len, char *out);

/* the response header; cluster and member IDs are unsigned 64-bit */
typedef struct EtcdHeader
{
	uint64_t	cluster_id;
	uint64_t	member_id;
	int64_t		revision;		/* 0 when etcd omitted it */
	int64_t		raft_term;
} EtcdHeader;

/* one key-value pair, as etcd returns it (absent fields are 0 / empty) */
typedef struct EtcdKeyValue
{
	char	   *key;
	size_t		key_len;
	char	   *value;			/* never NULL once decoded; "" when absent */
	size_t		value_len;
	int64_t		create_revision;
	int64_t		mod_revision;
	int64_t		version;
	int64_t		lease;
} EtcdKeyValue;

/* ----------------------------------------------------------------------
 * Client
 * ---------------------------------------------------------------------- */

typedef struct EtcdConfig
{
	/* required: comma-separated http:// or https:// URLs */
	const char *endpoints;
	/* one HTTP request; 0 = 1500; 50..5000 (stay far below etcd's 7 s) */
	int			request_timeout_ms;
	/* TCP (and TLS) connect; 0 = 1000; capped by request_timeout_ms */
	int			connect_timeout_ms;
	/* one call, all attempts; 0 = 2 * request_timeout_ms */
	int			total_timeout_ms;
	/* attempts per call; 0 = number of endpoints + 1 (at least 2) */
	int			max_attempts;
	/* optional: authenticate as this user (both or neither) */
	const char *user;
	const char *password;
	/* optional TLS: CA bundle to verify servers, client certificate + key */
	const char *ca_file;
	const char *cert_file;
	const char *key_file;
} EtcdConfig;

typedef struct EtcdClient EtcdClient;

typedef struct EtcdClientStats
{
	uint64_t	requests;		/* HTTP requests sent (all attempts) */
	uint64_t	failovers;		/* moves to the next endpoint */
	uint64_t	authentications;	/* tokens obtained */
} EtcdClientStats;

/* curl_global_init for the process; call once before any client */
extern EtcdStatus etcd_global_init(void);
extern void etcd_global_cleanup(void);

/*
 * Create a client (no I/O happens yet).  On success *out is set and must
 * be freed with etcd_client_free(); on failure *out is NULL.
 */
extern EtcdStatus etcd_client_create(const EtcdConfig *config, EtcdClient **out);
extern void etcd_client_free(EtcdClient *client);

/* replace the endpoint list (say, from etcd_member_list) */
extern EtcdStatus etcd_client_set_endpoints(EtcdClient *client, const char *endpoints);

/* the endpoint the next call will try first (owned by the client) */
extern const char *etcd_client_endpoint(const EtcdClient *client);
extern void etcd_client_stats(const EtcdClient *client, EtcdClientStats *out);

/* ----------------------------------------------------------------------
 * KV
 * ---------------------------------------------------------------------- */

/*
 * Which keys a request covers: key alone; key..range_end (exclusive); or,
 * with prefix set (and range_end empty), every key starting with key (an
 * empty key then means every key).
 */
typedef struct EtcdRangeRequest
{
	EtcdBytes	key;
	EtcdBytes	range_end;
	bool		prefix;
	int64_t		limit;			/* 0 = no limit */
	int64_t		revision;		/* 0 = latest */
	bool		serializable;	/* a possibly stale local read */
	bool		keys_only;
	bool		count_only;
} EtcdRangeRequest;

typedef struct EtcdRangeResult
{
	EtcdHeader	header;
	EtcdKeyValue *kvs;
	size_t		n_kvs;
	int64_t		count;			/* keys in the range (ignoring limit) */
	bool		more;			/* limit cut the answer short */
} EtcdRangeResult;

typedef struct EtcdPutRequest
{
	EtcdBytes	key;
	EtcdBytes	value;
	int64_t		lease;			/* 0 = no lease */
	bool		prev_kv;
} EtcdPutRequest;

typedef struct EtcdPutResult
{
	EtcdHeader	header;
	bool		has_prev_kv;
	EtcdKeyValue prev_kv;
} EtcdPutResult;

typedef struct EtcdDeleteRequest
{
	EtcdBytes	key;
	EtcdBytes	range_end;
	bool		prefix;
	bool		prev_kv;
} EtcdDeleteRequest;

typedef struct EtcdDeleteResult
{
	EtcdHeader	header;
	int64_t		deleted;
	EtcdKeyValue *prev_kvs;
	size_t		n_prev_kvs;
} EtcdDeleteResult;

extern EtcdStatus etcd_range(EtcdClient *client, const EtcdRangeRequest *req,
							 EtcdRangeResult *out);
extern EtcdStatus etcd_put(EtcdClient *client, const EtcdPutRequest *req,
						   EtcdPutResult *out);
extern EtcdStatus etcd_delete_range(EtcdClient *client, const EtcdDeleteRequest *req,
									EtcdDeleteResult *out);
extern void etcd_range_result_free(EtcdRangeResult *res);
extern void etcd_put_result_free(EtcdPutResult *res);
extern void etcd_delete_result_free(EtcdDeleteResult *res);

/*
 * Txn.  Every compare names its target and result explicitly: the zero
 * values are deliberately invalid, so a forgotten field is an ETCD_INVALID
 * error here instead of etcd's silent default (VERSION, EQUAL).  The
 * operand is number for VERSION, CREATE, MOD and LEASE and value for VALUE.
 * A VALUE compare on an absent key is always false, even NOT_EQUAL.
 */
typedef enum EtcdCompareTarget
{
	ETCD_TARGET_UNSET = 0,
	ETCD_TARGET_VERSION,
	ETCD_TARGET_CREATE,			/* create_revision; 0 = the key is absent */
	ETCD_TARGET_MOD,			/* mod_revision */
	ETCD_TARGET_VALUE,
	ETCD_TARGET_LEASE
} EtcdCompareTarget;

typedef enum EtcdCompareResult
{
	ETCD_RESULT_UNSET = 0,
	ETCD_RESULT_EQUAL,
	ETCD_RESULT_NOT_EQUAL,
	ETCD_RESULT_GREATER,
	ETCD_RESULT_LESS
} EtcdCompareResult;

typedef struct EtcdCompare
{
	EtcdBytes	key;
	EtcdBytes	range_end;		/* optional: compare every key in a range */
	EtcdCompareTarget target;
	EtcdCompareResult result;
	int64_t		number;
	EtcdBytes	value;
} EtcdCompare;

typedef enum EtcdOpType
{
	ETCD_OP_UNSET = 0,
	ETCD_OP_RANGE,
	ETCD_OP_PUT,
	ETCD_OP_DELETE
} EtcdOpType;

/* one txn operation: set type and the matching member */
typedef struct EtcdOp
{
	EtcdOpType	type;
	EtcdRangeRequest range;
	EtcdPutRequest put;
	EtcdDeleteRequest delete_range;
} EtcdOp;

typedef struct EtcdTxnRequest
{
	const EtcdCompare *compare;
	size_t		n_compare;
	const EtcdOp *success;
	size_t		n_success;
	const EtcdOp *failure;
	size_t		n_failure;
} EtcdTxnRequest;

/* one response per executed op, in order; the member matching type is set */
typedef struct EtcdTxnResponse
{
	EtcdOpType	type;
	EtcdRangeResult range;
	EtcdPutResult put;
	EtcdDeleteResult delete_range;
} EtcdTxnResponse;

typedef struct EtcdTxnResult
{
	EtcdHeader	header;			/* header.revision: the fencing token of a
								 * txn that wrote */
	bool		succeeded;		/* which branch ran (absent = false) */
	EtcdTxnResponse *responses;
	size_t		n_responses;
} EtcdTxnResult;

extern EtcdStatus etcd_txn(EtcdClient *client, const EtcdTxnRequest *req,
						   EtcdTxnResult *out);
extern void etcd_txn_result_free(EtcdTxnResult *res);

/* compact the history up to revision (physical: wait until it is done) */
extern EtcdStatus etcd_compact(EtcdClient *client, int64_t revision, bool physical);

/* ----------------------------------------------------------------------
 * Leases
 * ---------------------------------------------------------------------- */

typedef struct EtcdLease
{
	EtcdHeader	header;
	int64_t		id;
	int64_t		ttl;			/* seconds left; see each call */
	int64_t		granted_ttl;	/* timetolive only */
} EtcdLease;

/*
 * Grant a lease of ttl seconds (etcd raises small TTLs to its minimum, 2 s
 * with default settings: check out->ttl).  id 0 lets etcd choose the ID;
 * a taken ID fails with ETCD_PRECONDITION.
 */
extern EtcdStatus etcd_lease_grant(EtcdClient *client, int64_t ttl, int64_t id,
								   EtcdLease *out);

/*
 * One keepalive.  ETCD_OK with out->ttl > 0: renewed for that long.
 * ETCD_OK with out->ttl == 0: the lease is gone (expired or revoked) -- etcd
 * answers that with HTTP 200, not with an error.
 */
extern EtcdStatus etcd_lease_keepalive(EtcdClient *client, int64_t id, EtcdLease *out);

/* revoke (deletes the lease's keys); an unknown lease is ETCD_NOT_FOUND */
extern EtcdStatus etcd_lease_revoke(EtcdClient *client, int64_t id);

/* time left: out->ttl is -1 when the lease is gone */
extern EtcdStatus etcd_lease_timetolive(EtcdClient *client, int64_t id, EtcdLease *out);

/* ----------------------------------------------------------------------
 * Watch
 *
 * A watch is one streaming HTTP request, driven without blocking through
 * its own curl multi handle: call etcd_watch_poll() often (or wait on
 * etcd_watch_wait_fds() and then poll with timeout 0).  Events are handed
 * to a callback during etcd_watch_poll(); the callback may make unary
 * calls on the client but must not poll or free the watch.
 *
 * Once a watch has ended it stays ended: free it and start a new one from
 * etcd_watch_last_revision() + 1 (after compaction: re-list first).
 * ---------------------------------------------------------------------- */

typedef struct EtcdWatchRequest
{
	EtcdBytes	key;
	EtcdBytes	range_end;
	bool		prefix;
	int64_t		start_revision; /* 0 = from now on; else replay from here */

	/*
	 * End the watch as stalled when no byte arrives for this long; 0 turns
	 * the check off.  It must exceed etcd's progress notification interval
	 * (--experimental-watch-progress-notify-interval; 10 min by default),
	 * because progress notifications are all an idle watch receives.
	 */
	int			silence_limit_ms;
	/* libcurl's receive buffer; 0 = its default (tests use 1024) */
	int			recv_buffer_size;
} EtcdWatchRequest;

typedef enum EtcdWatchEventType
{
	ETCD_EVENT_CREATED,			/* the watch is established */
	ETCD_EVENT_PUT,
	ETCD_EVENT_DELETE,
	ETCD_EVENT_PROGRESS			/* nothing new up to revision */
} EtcdWatchEventType;

typedef struct EtcdWatchEvent
{
	EtcdWatchEventType type;
	int64_t		revision;		/* PUT/DELETE: kv->mod_revision; else the
								 * header's revision */
	const EtcdHeader *header;
	const EtcdKeyValue *kv;		/* PUT/DELETE (a DELETE's kv has only the key
								 * and mod_revision) */
	const EtcdKeyValue *prev_kv;	/* NULL when etcd sent none */
} EtcdWatchEvent;

/* events are borrowed: copy what you keep */
typedef void (*EtcdWatchCallback) (const EtcdWatchEvent *event, void *arg);

typedef enum EtcdWatchState
{
	ETCD_WATCH_RUNNING = 0,
	ETCD_WATCH_CLOSED,			/* the stream ended cleanly with no error */
	ETCD_WATCH_TRANSPORT,		/* connection failed or broke (a SIGKILLed
								 * member: CURLE_PARTIAL_FILE) */
	ETCD_WATCH_ERROR,			/* etcd reported an error: an HTTP error
								 * status, or an in-stream error object
								 * (member shutting down, no leader) */
	ETCD_WATCH_CANCELED,		/* etcd canceled the watch: compacted
								 * (etcd_watch_compact_revision() > 0),
								 * or refused (auth) */
	ETCD_WATCH_STALLED			/* no byte for silence_limit_ms (a hung
								 * member: TCP stays up, nothing arrives) */
} EtcdWatchState;

typedef struct EtcdWatch EtcdWatch;

typedef struct EtcdWatchStats
{
	uint64_t	write_callbacks;	/* libcurl write callbacks */
	uint64_t	messages;			/* JSON messages framed */
	uint64_t	max_message_parts;	/* most callbacks one message spanned */
	uint64_t	events;
	uint64_t	progress;
} EtcdWatchStats;

/*
 * Start a watch on the client's current endpoint, with prev_kv and progress
 * notifications requested and "Grpc-Metadata-hasleader: true" sent (so a
 * member without a leader ends the watch instead of keeping it open).
 * Authenticates first if the client has credentials and no token.  Returns
 * NULL with *st set on failure.  The client must outlive the watch.
 */
extern EtcdWatch *etcd_watch_start(EtcdClient *client, const EtcdWatchRequest *req,
								   EtcdStatus *st);

/*
 * Drive the watch: wait at most timeout_ms for data, hand every complete
 * message's events to cb, and return as soon as something was delivered,
 * the watch ended, or the time is up.  Returns the state afterwards.
 */
extern EtcdWatchState etcd_watch_poll(EtcdWatch *watch, int timeout_ms,
									  EtcdWatchCallback cb, void *arg);

/*
 * For an outer wait loop: fill fds (at most max_fds) with the sockets to
 * wait on and *timeout_ms with how long to wait at most; then call
 * etcd_watch_poll(watch, 0, ...).  Returns the number of fds; 0 means wait
 * only for the timeout (never longer than 100 ms then).
 */
extern int	etcd_watch_wait_fds(EtcdWatch *watch, struct pollfd *fds, int max_fds,
								int *timeout_ms);

extern EtcdWatchState etcd_watch_state(const EtcdWatch *watch);
extern const char *etcd_watch_state_name(EtcdWatchState state);

/* why it ended: kind, HTTP / gRPC / curl codes and message */
extern const EtcdStatus *etcd_watch_status(const EtcdWatch *watch);

/* the revision up to which every event was delivered (resume after it) */
extern int64_t etcd_watch_last_revision(const EtcdWatch *watch);

/* the compaction revision of a watch canceled by compaction, else 0 */
extern int64_t etcd_watch_compact_revision(const EtcdWatch *watch);
extern void etcd_watch_stats(const EtcdWatch *watch, EtcdWatchStats *out);
extern void etcd_watch_free(EtcdWatch *watch);

/* ----------------------------------------------------------------------
 * Cluster
 * ---------------------------------------------------------------------- */

typedef struct EtcdMember
{
	uint64_t	id;
	char	   *name;			/* "" for a member that has not started */
	char	  **client_urls;
	size_t		n_client_urls;
	char	  **peer_urls;
	size_t		n_peer_urls;
	bool		is_learner;
} EtcdMember;

typedef struct EtcdMemberList
{
	EtcdHeader	header;
	EtcdMember *members;
	size_t		n_members;
} EtcdMemberList;

extern EtcdStatus etcd_member_list(EtcdClient *client, EtcdMemberList *out);
extern void etcd_member_list_free(EtcdMemberList *list);

/* every client URL, comma-separated, for etcd_client_set_endpoints (malloc) */
extern char *etcd_member_list_endpoints(const EtcdMemberList *list);

/* maintenance status of the member that answers */
typedef struct EtcdServerStatus
{
	EtcdHeader	header;			/* header.member_id: who answered */
	char		version[32];
	uint64_t	leader;			/* member ID of the leader; 0 = none */
	int64_t		raft_index;
	int64_t		raft_term;
	int64_t		db_size;
} EtcdServerStatus;

extern EtcdStatus etcd_server_status(EtcdClient *client, EtcdServerStatus *out);

typedef struct EtcdVersion
{
	char		server[32];		/* "3.4.23" */
	char		cluster[32];	/* "3.4.0" */
} EtcdVersion;

/*
 * GET /version.  ETCD_UNSUPPORTED when the cluster version is below 3.4
 * (whose gateway lives under another prefix); ETCD_UNAVAILABLE while a new
 * cluster has not decided its version yet.
 */
extern EtcdStatus etcd_version_check(EtcdClient *client, EtcdVersion *out);

/* does "X.Y[.Z]" denote at least major.minor?  false when unparsable */
extern bool etcd_version_at_least(const char *version, int major, int minor);

/* ----------------------------------------------------------------------
 * Auth administration (tools and tests).  etcd needs a user "root" holding
 * the role "root" before auth can be enabled.
 * ---------------------------------------------------------------------- */

extern EtcdStatus etcd_user_add(EtcdClient *client, const char *name, const char *password);
extern EtcdStatus etcd_role_add(EtcdClient *client, const char *name);
extern EtcdStatus etcd_user_grant_role(EtcdClient *client, const char *user,
									   const char *role);
extern EtcdStatus etcd_auth_enable(EtcdClient *client);
extern EtcdStatus etcd_auth_disable(EtcdClient *client);

#endif							/* SILO_ETCD_H */
