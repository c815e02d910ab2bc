/*-------------------------------------------------------------------------
 *
 * etcd_json_dec.c
 *	  Every answer of the etcd client, decoded from JSON (the requests are
 *	  encoded in etcd_json.c, whose header lists the gateway's proto3 JSON
 *	  traps both files are written around).
 *
 * A field of the wrong type in an answer is reported as ETCD_PROTOCOL;
 * out of memory as ETCD_NO_MEMORY.
 *
 * src/etcd/etcd_json_dec.c
 *
 *-------------------------------------------------------------------------
 */
#include "etcd_int.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------------
 * Decoding
 *
 * Answers are flat objects of a few kinds of fields, so they are decoded
 * by tables: a FieldSet lists, for one C struct, each JSON field's name,
 * kind and place in the struct.  A field that is absent is left zero
 * (bytes become an empty string), which is exactly proto3's rule; a field
 * of the wrong type makes the whole answer ETCD_PROTOCOL.  Counts of
 * arrays grow element by element, so the result's _free function can
 * release a half-decoded answer.
 * ---------------------------------------------------------------------- */

typedef enum FieldKind
{
	FK_I64,						/* int64_t from "123" or 123 */
	FK_U64,						/* uint64_t (cluster and member IDs) */
	FK_BOOL,					/* bool: only true is true */
	FK_TEXT,					/* char[aux], truncated */
	FK_STR,						/* char *, malloc'd; absent: "" */
	FK_BYTES,					/* char * base64-decoded, length at aux */
	FK_IS_DELETE,				/* bool from an event's "type" */
	FK_OBJECT,					/* a nested struct; presence flag at aux */
	FK_ARRAY,					/* a malloc'd array of structs, count at aux */
	FK_STRINGS					/* char ** of strings, count at aux */
} FieldKind;

#define NO_AUX ((size_t) -1)

typedef struct FieldSet FieldSet;

typedef struct Field
{
	const char *name;
	FieldKind	kind;
	size_t		off;
	size_t		aux;
	const FieldSet *sub;		/* FK_OBJECT and FK_ARRAY */
} Field;

struct FieldSet
{
	const Field *fields;
	size_t		n;
	size_t		size;			/* of one struct, for arrays */
};

#define FLD(T, name, kind, m) {name, kind, offsetof(T, m), NO_AUX, NULL}
#define FLD2(T, name, kind, m, a) {name, kind, offsetof(T, m), offsetof(T, a), NULL}
#define SUB(T, name, kind, m, a, set) {name, kind, offsetof(T, m), a, &set}
#define SET(T, arr) {arr, sizeof(arr) / sizeof(arr[0]), sizeof(T)}

static const Field header_f[] = {
	FLD(EtcdHeader, "cluster_id", FK_U64, cluster_id),
	FLD(EtcdHeader, "member_id", FK_U64, member_id),
	FLD(EtcdHeader, "revision", FK_I64, revision),
	FLD(EtcdHeader, "raft_term", FK_I64, raft_term),
};
static const FieldSet header_set = SET(EtcdHeader, header_f);

static const Field kv_f[] = {
	FLD2(EtcdKeyValue, "key", FK_BYTES, key, key_len),
	FLD2(EtcdKeyValue, "value", FK_BYTES, value, value_len),
	FLD(EtcdKeyValue, "create_revision", FK_I64, create_revision),
	FLD(EtcdKeyValue, "mod_revision", FK_I64, mod_revision),
	FLD(EtcdKeyValue, "version", FK_I64, version),
	FLD(EtcdKeyValue, "lease", FK_I64, lease),
};
static const FieldSet kv_set = SET(EtcdKeyValue, kv_f);

static const Field range_f[] = {
	SUB(EtcdRangeResult, "header", FK_OBJECT, header, NO_AUX, header_set),
	SUB(EtcdRangeResult, "kvs", FK_ARRAY, kvs, offsetof(EtcdRangeResult, n_kvs), kv_set),
	FLD(EtcdRangeResult, "count", FK_I64, count),
	FLD(EtcdRangeResult, "more", FK_BOOL, more),
};
static const FieldSet range_set = SET(EtcdRangeResult, range_f);

static const Field put_f[] = {
	SUB(EtcdPutResult, "header", FK_OBJECT, header, NO_AUX, header_set),
	SUB(EtcdPutResult, "prev_kv", FK_OBJECT, prev_kv, offsetof(EtcdPutResult, has_prev_kv),
		kv_set),
};
static const FieldSet put_set = SET(EtcdPutResult, put_f);

static const Field delete_f[] = {
	SUB(EtcdDeleteResult, "header", FK_OBJECT, header, NO_AUX, header_set),
	FLD(EtcdDeleteResult, "deleted", FK_I64, deleted),
	SUB(EtcdDeleteResult, "prev_kvs", FK_ARRAY, prev_kvs,
		offsetof(EtcdDeleteResult, n_prev_kvs), kv_set),
};
static const FieldSet delete_set = SET(EtcdDeleteResult, delete_f);

static const Field txn_f[] = {
	SUB(EtcdTxnResult, "header", FK_OBJECT, header, NO_AUX, header_set),
	FLD(EtcdTxnResult, "succeeded", FK_BOOL, succeeded),
};
static const FieldSet txn_set = SET(EtcdTxnResult, txn_f);

static const Field lease_f[] = {
	SUB(EtcdLease, "header", FK_OBJECT, header, NO_AUX, header_set),
	FLD(EtcdLease, "ID", FK_I64, id),
	FLD(EtcdLease, "TTL", FK_I64, ttl),
	FLD(EtcdLease, "grantedTTL", FK_I64, granted_ttl),
};
static const FieldSet lease_set = SET(EtcdLease, lease_f);

static const Field member_f[] = {
	FLD(EtcdMember, "ID", FK_U64, id),
	FLD(EtcdMember, "name", FK_STR, name),
	FLD2(EtcdMember, "clientURLs", FK_STRINGS, client_urls, n_client_urls),
	FLD2(EtcdMember, "peerURLs", FK_STRINGS, peer_urls, n_peer_urls),
	FLD(EtcdMember, "isLearner", FK_BOOL, is_learner),
};
static const FieldSet member_set = SET(EtcdMember, member_f);

static const Field members_f[] = {
	SUB(EtcdMemberList, "header", FK_OBJECT, header, NO_AUX, header_set),
	SUB(EtcdMemberList, "members", FK_ARRAY, members, offsetof(EtcdMemberList, n_members),
		member_set),
};
static const FieldSet members_set = SET(EtcdMemberList, members_f);

/* maintenance/status uses the proto's camelCase names */
static const Field status_f[] = {
	SUB(EtcdServerStatus, "header", FK_OBJECT, header, NO_AUX, header_set),
	{"version", FK_TEXT, offsetof(EtcdServerStatus, version), sizeof(((EtcdServerStatus *) 0)->version), NULL},
	FLD(EtcdServerStatus, "leader", FK_U64, leader),
	FLD(EtcdServerStatus, "raftIndex", FK_I64, raft_index),
	FLD(EtcdServerStatus, "raftTerm", FK_I64, raft_term),
	FLD(EtcdServerStatus, "dbSize", FK_I64, db_size),
};
static const FieldSet status_set = SET(EtcdServerStatus, status_f);

static const Field version_f[] = {
	{"etcdserver", FK_TEXT, offsetof(EtcdVersion, server), sizeof(((EtcdVersion *) 0)->server), NULL},
	{"etcdcluster", FK_TEXT, offsetof(EtcdVersion, cluster), sizeof(((EtcdVersion *) 0)->cluster), NULL},
};
static const FieldSet version_set = SET(EtcdVersion, version_f);

static const Field event_f[] = {
	FLD(EtcdWatchMsgEvent, "type", FK_IS_DELETE, is_delete),
	SUB(EtcdWatchMsgEvent, "kv", FK_OBJECT, kv, NO_AUX, kv_set),
	SUB(EtcdWatchMsgEvent, "prev_kv", FK_OBJECT, prev_kv,
		offsetof(EtcdWatchMsgEvent, has_prev_kv), kv_set),
};
static const FieldSet event_set = SET(EtcdWatchMsgEvent, event_f);

static const Field watch_f[] = {
	SUB(EtcdWatchMsg, "header", FK_OBJECT, header, NO_AUX, header_set),
	FLD(EtcdWatchMsg, "created", FK_BOOL, created),
	FLD(EtcdWatchMsg, "canceled", FK_BOOL, canceled),
	FLD(EtcdWatchMsg, "compact_revision", FK_I64, compact_revision),
	{"cancel_reason", FK_TEXT, offsetof(EtcdWatchMsg, cancel_reason), ETCD_MESSAGE_SIZE, NULL},
	SUB(EtcdWatchMsg, "events", FK_ARRAY, events, offsetof(EtcdWatchMsg, n_events), event_set),
};
static const FieldSet watch_set = SET(EtcdWatchMsg, watch_f);

/*
 * bad
 *		Report an answer this client cannot read; always returns false.
 */
static bool
bad(EtcdStatus *st, const char *what)
{
	etcd_status_set(st, ETCD_PROTOCOL, "unexpected answer from etcd: bad %s", what);
	return false;
}

/*
 * no_memory
 *		Report an allocation failure while decoding; returns false.
 */
static bool
no_memory(EtcdStatus *st)
{
	etcd_status_set(st, ETCD_NO_MEMORY, "out of memory decoding an answer");
	return false;
}

/*
 * parse_root
 *		Parse a whole body into an object; NULL (with st set) otherwise.
 */
static json_t *
parse_root(const char *text, size_t len, EtcdStatus *st)
{
	json_error_t err;
	json_t	   *root = json_loadb(text ? text : "", len, 0, &err);

	if (root == NULL)
		etcd_status_set(st, ETCD_PROTOCOL, "unexpected answer from etcd: %s", err.text);
	else if (!json_is_object(root))
	{
		json_decref(root);
		root = NULL;
		bad(st, "answer (not an object)");
	}
	return root;
}

/*
 * get_i64
 *		An integer that proto3 JSON writes as a string of digits (plain
 *		numbers are taken too).  json_integer_value() of a string would
 *		silently be 0, hence these.
 */
static bool
get_i64(json_t *v, int64_t *out)
{
	const char *s;
	char	   *end;

	if (json_is_integer(v))
	{
		*out = (int64_t) json_integer_value(v);
		return true;
	}
	if (!json_is_string(v))
		return false;
	s = json_string_value(v);
	errno = 0;
	*out = (int64_t) strtoll(s, &end, 10);
	return errno == 0 && end != s && *end == '\0';
}

/*
 * get_u64
 *		An unsigned one: cluster and member IDs exceed INT64_MAX.
 */
static bool
get_u64(json_t *v, uint64_t *out)
{
	const char *s;
	char	   *end;

	if (json_is_integer(v) && json_integer_value(v) >= 0)
	{
		*out = (uint64_t) json_integer_value(v);
		return true;
	}
	if (!json_is_string(v) || json_string_value(v)[0] == '-')
		return false;
	s = json_string_value(v);
	errno = 0;
	*out = (uint64_t) strtoull(s, &end, 10);
	return errno == 0 && end != s && *end == '\0';
}

static bool dec_set(json_t *obj, void *out, const FieldSet *set, EtcdStatus *st);

/*
 * dec_array
 *		A JSON array of objects into a malloc'd array of set->size structs,
 *		its count growing as elements are decoded.
 */
static bool
dec_array(json_t *arr, void **out, size_t *count, const FieldSet *set, EtcdStatus *st)
{
	size_t		n = json_array_size(arr);
	size_t		i;

	if (!json_is_array(arr))
		return false;
	if (n == 0)
		return true;
	if ((*out = calloc(n, set->size)) == NULL)
		return no_memory(st);
	for (i = 0; i < n; i++)
	{
		(*count)++;
		if (!dec_set(json_array_get(arr, i), (char *) *out + i * set->size, set, st))
			return false;
	}
	return true;
}

/*
 * dec_strings
 *		A JSON array of strings into a malloc'd array of copies.
 */
static bool
dec_strings(json_t *arr, char ***out, size_t *count, EtcdStatus *st)
{
	size_t		n = json_array_size(arr);
	size_t		i;

	if (!json_is_array(arr))
		return false;
	if (n == 0)
		return true;
	if ((*out = calloc(n, sizeof(char *))) == NULL)
		return no_memory(st);
	for (i = 0; i < n; i++)
	{
		json_t	   *s = json_array_get(arr, i);

		if (!json_is_string(s))
			return false;
		if (((*out)[i] = strdup(json_string_value(s))) == NULL)
			return no_memory(st);
		(*count)++;
	}
	return true;
}

/*
 * dec_field
 *		One present field into its place; false (st set by the caller
 *		unless set here) when it has the wrong type.
 */
static bool
dec_field(json_t *v, char *base, const Field *f, EtcdStatus *st)
{
	void	   *p = base + f->off;
	const char *s;

	switch (f->kind)
	{
		case FK_I64:
			return get_i64(v, p);
		case FK_U64:
			return get_u64(v, p);
		case FK_BOOL:
			*(bool *) p = json_is_true(v);
			return json_is_boolean(v);
		case FK_TEXT:
			if (!json_is_string(v))
				return false;
			snprintf(p, f->aux, "%s", json_string_value(v));
			return true;
		case FK_STR:
			if (!json_is_string(v))
				return false;
			return (*(char **) p = strdup(json_string_value(v))) != NULL || no_memory(st);
		case FK_BYTES:
			return json_is_string(v) &&
				etcd_b64_decode(json_string_value(v), json_string_length(v), p,
								(size_t *) (base + f->aux));
		case FK_IS_DELETE:
			if (!json_is_string(v))
				return false;
			s = json_string_value(v);
			*(bool *) p = strcmp(s, "DELETE") == 0;
			return *(bool *) p || strcmp(s, "PUT") == 0;
		case FK_OBJECT:
			if (!dec_set(v, p, f->sub, st))
				return false;
			if (f->aux != NO_AUX)
				*(bool *) (base + f->aux) = true;
			return true;
		case FK_ARRAY:
			return dec_array(v, p, (size_t *) (base + f->aux), f->sub, st);
		case FK_STRINGS:
			return dec_strings(v, p, (size_t *) (base + f->aux), st);
	}
	return false;
}

/*
 * dec_set
 *		Decode obj into the struct at out by the table set; absent fields
 *		stay zero, except bytes and strings, which become "".
 */
static bool
dec_set(json_t *obj, void *out, const FieldSet *set, EtcdStatus *st)
{
	size_t		i;

	if (!json_is_object(obj))
		return bad(st, "object");
	for (i = 0; i < set->n; i++)
	{
		const Field *f = &set->fields[i];
		json_t	   *v = json_object_get(obj, f->name);
		char	   *p = (char *) out + f->off;

		if (v != NULL && !json_is_null(v))
		{
			if (!dec_field(v, out, f, st))
				return st->kind == ETCD_NO_MEMORY ? false : bad(st, f->name);
		}
		else if (f->kind == FK_STR || f->kind == FK_BYTES)
		{
			if ((*(char **) p = calloc(1, 1)) == NULL)
				return no_memory(st);
		}
	}
	return true;
}

/*
 * decode_body
 *		Parse a body and decode it by a table; out is zeroed first.
 */
static bool
decode_body(const EtcdBuf *body, void *out, const FieldSet *set, EtcdStatus *st)
{
	json_t	   *root;
	bool		ok;

	memset(out, 0, set->size);
	root = parse_root(body->data, body->len, st);
	ok = root != NULL && dec_set(root, out, set, st);
	json_decref(root);
	return ok;
}

/*
 * etcdj_decode_range
 *		Answer of /v3/kv/range.  Like every decoder of a result with owned
 *		memory, it frees (and zeroes) the result on failure.
 */
bool
etcdj_decode_range(const EtcdBuf *body, EtcdRangeResult *out, EtcdStatus *st)
{
	if (decode_body(body, out, &range_set, st))
		return true;
	etcd_range_result_free(out);
	return false;
}

/*
 * etcdj_decode_put
 *		Answer of /v3/kv/put (prev_kv when asked for).
 */
bool
etcdj_decode_put(const EtcdBuf *body, EtcdPutResult *out, EtcdStatus *st)
{
	if (decode_body(body, out, &put_set, st))
		return true;
	etcd_put_result_free(out);
	return false;
}

/*
 * etcdj_decode_delete
 *		Answer of /v3/kv/deleterange.
 */
bool
etcdj_decode_delete(const EtcdBuf *body, EtcdDeleteResult *out, EtcdStatus *st)
{
	if (decode_body(body, out, &delete_set, st))
		return true;
	etcd_delete_result_free(out);
	return false;
}

/*
 * dec_txn_responses
 *		A txn's "responses": one object per op, keyed by the op's kind.
 */
static bool
dec_txn_responses(json_t *arr, EtcdTxnResult *out, EtcdStatus *st)
{
	size_t		n = json_array_size(arr);
	size_t		i;

	if (arr == NULL || n == 0)
		return arr == NULL || json_is_array(arr) || bad(st, "responses");
	if ((out->responses = calloc(n, sizeof(EtcdTxnResponse))) == NULL)
		return no_memory(st);
	for (i = 0; i < n; i++)
	{
		json_t	   *r = json_array_get(arr, i);
		EtcdTxnResponse *tr = &out->responses[i];
		json_t	   *v;

		out->n_responses++;
		if ((v = json_object_get(r, "response_range")) != NULL)
			tr->type = ETCD_OP_RANGE;
		else if ((v = json_object_get(r, "response_put")) != NULL)
			tr->type = ETCD_OP_PUT;
		else if ((v = json_object_get(r, "response_delete_range")) != NULL)
			tr->type = ETCD_OP_DELETE;
		else
			return bad(st, "txn response");
		if (!dec_set(v, tr->type == ETCD_OP_RANGE ? (void *) &tr->range :
					 tr->type == ETCD_OP_PUT ? (void *) &tr->put : (void *) &tr->delete_range,
					 tr->type == ETCD_OP_RANGE ? &range_set :
					 tr->type == ETCD_OP_PUT ? &put_set : &delete_set, st))
			return false;
	}
	return true;
}

/*
 * etcdj_decode_txn
 *		Answer of /v3/kv/txn: succeeded is absent when the failure branch
 *		ran.
 */
bool
etcdj_decode_txn(const EtcdBuf *body, EtcdTxnResult *out, EtcdStatus *st)
{
	json_t	   *root;
	bool		ok;

	memset(out, 0, sizeof(*out));
	root = parse_root(body->data, body->len, st);
	ok = root != NULL && dec_set(root, out, &txn_set, st) &&
		dec_txn_responses(json_object_get(root, "responses"), out, st);
	json_decref(root);
	if (!ok)
		etcd_txn_result_free(out);
	return ok;
}

/*
 * etcdj_decode_lease
 *		Answers of grant, revoke, timetolive and (keepalive) the one-line
 *		stream {"result":{...}}.  An absent TTL is 0: after a keepalive that
 *		means the lease is gone.  A grant may carry an "error" string.
 */
bool
etcdj_decode_lease(const EtcdBuf *body, bool keepalive, EtcdLease *out, EtcdStatus *st)
{
	json_t	   *root;
	json_t	   *o;
	json_t	   *err;
	bool		ok = false;

	memset(out, 0, sizeof(*out));
	root = parse_root(body->data, body->len, st);
	if (root == NULL)
		return false;
	o = keepalive ? json_object_get(root, "result") : root;
	err = json_object_get(o, "error");
	if (json_is_string(err) && json_string_length(err) > 0)
		etcd_status_set(st, ETCD_UNAVAILABLE, "%s", json_string_value(err));
	else
		ok = dec_set(o, out, &lease_set, st);
	json_decref(root);
	if (!ok)
		memset(out, 0, sizeof(*out));
	return ok;
}

/*
 * etcdj_decode_header
 *		An answer that carries nothing but its header.
 */
bool
etcdj_decode_header(const EtcdBuf *body, EtcdHeader *out, EtcdStatus *st)
{
	json_t	   *root = parse_root(body->data, body->len, st);
	bool		ok;

	memset(out, 0, sizeof(*out));
	ok = root != NULL && (json_object_get(root, "header") == NULL ||
						  dec_set(json_object_get(root, "header"), out, &header_set, st));
	json_decref(root);
	return ok;
}

/*
 * etcdj_decode_members
 *		Answer of /v3/cluster/member/list.
 */
bool
etcdj_decode_members(const EtcdBuf *body, EtcdMemberList *out, EtcdStatus *st)
{
	if (decode_body(body, out, &members_set, st))
		return true;
	etcd_member_list_free(out);
	return false;
}

/*
 * etcdj_decode_status
 *		Answer of /v3/maintenance/status.
 */
bool
etcdj_decode_status(const EtcdBuf *body, EtcdServerStatus *out, EtcdStatus *st)
{
	if (decode_body(body, out, &status_set, st))
		return true;
	memset(out, 0, sizeof(*out));
	return false;
}

/*
 * etcdj_decode_version
 *		Answer of GET /version.
 */
bool
etcdj_decode_version(const EtcdBuf *body, EtcdVersion *out, EtcdStatus *st)
{
	if (decode_body(body, out, &version_set, st) &&
		(out->server[0] != '\0' || bad(st, "version")))
		return true;
	memset(out, 0, sizeof(*out));
	return false;
}

/*
 * etcdj_decode_token
 *		The token of /v3/auth/authenticate (malloc'd).
 */
bool
etcdj_decode_token(const EtcdBuf *body, char **token, EtcdStatus *st)
{
	json_t	   *root = parse_root(body->data, body->len, st);
	json_t	   *t = root ? json_object_get(root, "token") : NULL;

	*token = NULL;
	if (root != NULL && (!json_is_string(t) || json_string_length(t) == 0))
		bad(st, "token");
	else if (root != NULL && (*token = strdup(json_string_value(t))) == NULL)
		no_memory(st);
	json_decref(root);
	return *token != NULL;
}

/*
 * dec_error_obj
 *		Fill st from an error object of either shape: unary
 *		{"error":"…","message":"…","code":N} or in-stream
 *		{"grpc_code":N,"http_code":N,"message":"…"} (the inner object).
 */
static void
dec_error_obj(json_t *o, long http_status, EtcdStatus *st)
{
	json_t	   *msg = json_object_get(o, "message");
	json_t	   *code = json_object_get(o, "code");
	json_t	   *grpc = json_object_get(o, "grpc_code");
	json_t	   *http = json_object_get(o, "http_code");
	const char *text;

	if (!json_is_string(msg))
		msg = json_object_get(o, "error");
	text = json_is_string(msg) ? json_string_value(msg) : "";
	st->grpc_code = json_is_integer(grpc) ? (int) json_integer_value(grpc) :
		json_is_integer(code) ? (int) json_integer_value(code) : 0;
	st->http_status = json_is_integer(http) ? (long) json_integer_value(http) : http_status;
	st->kind = etcd_kind_from_grpc(st->grpc_code, st->http_status, text);
	snprintf(st->message, sizeof(st->message), "%s", text[0] ? text : "error without a message");
}

/*
 * etcdj_decode_error
 *		An answer with an HTTP error status: etcd's JSON error body, or for
 *		the gateway's own plain-text ones (unknown path, wrong method) the
 *		start of the text.
 */
void
etcdj_decode_error(const char *body, size_t len, long http_status, EtcdStatus *st)
{
	json_t	   *root = json_loadb(body ? body : "", len, 0, NULL);
	json_t	   *inner = root ? json_object_get(root, "error") : NULL;

	if (json_is_object(inner))
		dec_error_obj(inner, http_status, st);
	else if (json_is_object(root))
		dec_error_obj(root, http_status, st);
	else
	{
		st->http_status = http_status;
		st->grpc_code = 0;
		st->kind = etcd_kind_from_grpc(0, http_status, "");
		snprintf(st->message, sizeof(st->message), "HTTP %ld: %.*s", http_status,
				 (int) (len > 120 ? 120 : len), body ? body : "");
	}
	json_decref(root);
}

/*
 * etcdj_stream_error
 *		Whether a 200 body of a streaming call is an error object
 *		({"error":{...}}); fills st when it is.
 */
bool
etcdj_stream_error(const char *body, size_t len, EtcdStatus *st)
{
	json_t	   *root = json_loadb(body ? body : "", len, JSON_DISABLE_EOF_CHECK, NULL);
	json_t	   *inner = root ? json_object_get(root, "error") : NULL;
	bool		is_error = json_is_object(inner);

	if (is_error)
		dec_error_obj(inner, 200, st);
	json_decref(root);
	return is_error;
}

/*
 * etcdj_watch_msg_free
 *		Free a decoded watch message's events and zero it.
 */
void
etcdj_watch_msg_free(EtcdWatchMsg *msg)
{
	size_t		i;

	for (i = 0; i < msg->n_events; i++)
	{
		etcd_kv_free(&msg->events[i].kv);
		etcd_kv_free(&msg->events[i].prev_kv);
	}
	free(msg->events);
	memset(msg, 0, sizeof(*msg));
}

/*
 * etcdj_decode_watch
 *		One framed message of a watch stream: {"result":{WatchResponse}}
 *		(a PUT event has no "type"), or an in-stream {"error":{...}}, which
 *		sets out->is_error and out->error.
 */
bool
etcdj_decode_watch(const char *line, size_t len, EtcdWatchMsg *out, EtcdStatus *st)
{
	json_t	   *root;
	json_t	   *err;
	bool		ok = false;

	memset(out, 0, sizeof(*out));
	if ((root = parse_root(line, len, st)) == NULL)
		return false;
	err = json_object_get(root, "error");
	if (json_is_object(err))
	{
		out->is_error = true;
		out->error = etcd_status_ok();
		dec_error_obj(err, 200, &out->error);
		ok = true;
	}
	else
		ok = dec_set(json_object_get(root, "result"), out, &watch_set, st);
	json_decref(root);
	if (!ok)
		etcdj_watch_msg_free(out);
	return ok;
}
