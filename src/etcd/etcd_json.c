/*-------------------------------------------------------------------------
 *
 * etcd_json.c
 *	  Every request body of the etcd client, in JSON; the answers are
 *	  decoded in etcd_json_dec.c.
 *
 * With etcd_json_dec.c, the only file that includes jansson.h.  The
 * gateway speaks proto3 JSON, whose traps decide how both are written:
 *
 *	- every int64 arrives as a JSON string ("revision":"9"): numbers go
 *	  through etcd_json_dec.c's get_i64 / get_u64, which also take plain
 *	  integers;
 *	- fields equal to their default are omitted: an absent number is 0, an
 *	  absent boolean false, an absent key list empty (a failed txn has no
 *	  "succeeded", a PUT watch event no "type", a dead lease's keepalive no
 *	  "TTL");
 *	- unknown fields are silently ignored by etcd, so field names appear
 *	  once each, in the encoder that needs them;
 *	- enum names are exact and case-sensitive, and a missing enum is value
 *	  0 (a compare's target VERSION, result EQUAL): compares always send
 *	  both;
 *	- int64 values are sent as strings too, so no intermediary can round
 *	  them through a double.
 *
 * Out of memory while building a document is reported as ETCD_NO_MEMORY;
 * a field of the wrong type in an answer as ETCD_PROTOCOL.
 *
 * src/etcd/etcd_json.c
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
 * Encoding
 * ---------------------------------------------------------------------- */

/* an encoder's state: the first failure sticks */
typedef struct Enc
{
	EtcdStatus *st;
	bool		failed;
} Enc;

/*
 * enc_set
 *		Attach v to obj under name, remembering any failure (a NULL v means
 *		its constructor ran out of memory).
 */
static void
enc_set(Enc *e, json_t *obj, const char *name, json_t *v)
{
	if (v == NULL || obj == NULL || json_object_set_new(obj, name, v) != 0)
	{
		if (!e->failed)
			etcd_status_set(e->st, ETCD_NO_MEMORY, "out of memory encoding a request");
		e->failed = true;
	}
}

/*
 * enc_append
 *		Append v to the array arr, remembering any failure.
 */
static void
enc_append(Enc *e, json_t *arr, json_t *v)
{
	if (v == NULL || arr == NULL || json_array_append_new(arr, v) != 0)
	{
		if (!e->failed)
			etcd_status_set(e->st, ETCD_NO_MEMORY, "out of memory encoding a request");
		e->failed = true;
	}
}

/*
 * enc_invalid
 *		Reject the request being encoded (a caller's mistake).
 */
static void
enc_invalid(Enc *e, const char *what)
{
	if (!e->failed)
		etcd_status_set(e->st, ETCD_INVALID, "%s", what);
	e->failed = true;
}

/*
 * j_bytes
 *		A byte string as a JSON string of base64.
 */
static json_t *
j_bytes(EtcdBytes b)
{
	char	   *s = etcd_b64_encode(b.data ? b.data : "", b.data ? b.len : 0);
	json_t	   *v;

	if (s == NULL)
		return NULL;
	v = json_string(s);
	free(s);
	return v;
}

/*
 * j_i64
 *		An int64 as a JSON string of decimal digits, the way proto3 JSON
 *		writes it.
 */
static json_t *
j_i64(int64_t n)
{
	char		buf[32];

	snprintf(buf, sizeof(buf), "%" PRId64, n);
	return json_string(buf);
}

/*
 * enc_keys
 *		Set "key" and "range_end" of obj from a key, an explicit range end,
 *		or a prefix (whose end is computed here; an empty prefix means the
 *		whole keyspace).
 */
static void
enc_keys(Enc *e, json_t *obj, EtcdBytes key, EtcdBytes range_end, bool prefix)
{
	if (prefix && range_end.len > 0)
	{
		enc_invalid(e, "prefix and range_end are mutually exclusive");
		return;
	}
	if (prefix && key.len == 0)
	{
		enc_set(e, obj, "key", j_bytes(etcd_bytes("", 1)));
		enc_set(e, obj, "range_end", j_bytes(etcd_bytes("", 1)));
		return;
	}
	if (key.len == 0 || key.data == NULL)
	{
		enc_invalid(e, "empty key");
		return;
	}
	enc_set(e, obj, "key", j_bytes(key));
	if (prefix)
	{
		char	   *end = malloc(key.len);
		size_t		n;

		if (end == NULL)
		{
			enc_set(e, obj, "range_end", NULL);
			return;
		}
		n = etcd_prefix_end(key.data, key.len, end);
		enc_set(e, obj, "range_end", j_bytes(etcd_bytes(end, n)));
		free(end);
	}
	else if (range_end.len > 0)
		enc_set(e, obj, "range_end", j_bytes(range_end));
}

/*
 * enc_finish
 *		Serialize a finished document (compact) and free it; NULL with the
 *		status set when encoding failed.
 */
static char *
enc_finish(Enc *e, json_t *root)
{
	char	   *text = NULL;

	if (root == NULL && !e->failed)
		etcd_status_set(e->st, ETCD_NO_MEMORY, "out of memory encoding a request");
	else if (!e->failed)
	{
		text = json_dumps(root, JSON_COMPACT);
		if (text == NULL)
			etcd_status_set(e->st, ETCD_NO_MEMORY, "out of memory encoding a request");
	}
	json_decref(root);
	return text;
}

/*
 * enc_range_obj
 *		The RangeRequest object, shared by /kv/range and txn request_range.
 */
static json_t *
enc_range_obj(Enc *e, const EtcdRangeRequest *req)
{
	json_t	   *o = json_object();

	enc_keys(e, o, req->key, req->range_end, req->prefix);
	if (req->limit < 0 || req->revision < 0)
		enc_invalid(e, "negative limit or revision");
	if (req->limit > 0)
		enc_set(e, o, "limit", j_i64(req->limit));
	if (req->revision > 0)
		enc_set(e, o, "revision", j_i64(req->revision));
	if (req->serializable)
		enc_set(e, o, "serializable", json_true());
	if (req->keys_only)
		enc_set(e, o, "keys_only", json_true());
	if (req->count_only)
		enc_set(e, o, "count_only", json_true());
	return o;
}

/*
 * enc_put_obj
 *		The PutRequest object; the value is always sent, even when empty.
 */
static json_t *
enc_put_obj(Enc *e, const EtcdPutRequest *req)
{
	json_t	   *o = json_object();

	enc_keys(e, o, req->key, etcd_bytes(NULL, 0), false);
	enc_set(e, o, "value", j_bytes(req->value));
	if (req->lease < 0)
		enc_invalid(e, "negative lease ID");
	if (req->lease != 0)
		enc_set(e, o, "lease", j_i64(req->lease));
	if (req->prev_kv)
		enc_set(e, o, "prev_kv", json_true());
	return o;
}

/*
 * enc_delete_obj
 *		The DeleteRangeRequest object.
 */
static json_t *
enc_delete_obj(Enc *e, const EtcdDeleteRequest *req)
{
	json_t	   *o = json_object();

	enc_keys(e, o, req->key, req->range_end, req->prefix);
	if (req->prev_kv)
		enc_set(e, o, "prev_kv", json_true());
	return o;
}

/*
 * etcdj_range
 *		Body of /v3/kv/range.
 */
char *
etcdj_range(const EtcdRangeRequest *req, EtcdStatus *st)
{
	Enc			e = {st, false};

	return enc_finish(&e, enc_range_obj(&e, req));
}

/*
 * etcdj_put
 *		Body of /v3/kv/put.
 */
char *
etcdj_put(const EtcdPutRequest *req, EtcdStatus *st)
{
	Enc			e = {st, false};

	return enc_finish(&e, enc_put_obj(&e, req));
}

/*
 * etcdj_delete
 *		Body of /v3/kv/deleterange.
 */
char *
etcdj_delete(const EtcdDeleteRequest *req, EtcdStatus *st)
{
	Enc			e = {st, false};

	return enc_finish(&e, enc_delete_obj(&e, req));
}

/*
 * enc_compare
 *		One Compare: key, target, result and the operand field that belongs
 *		to the target, all explicit.
 */
static json_t *
enc_compare(Enc *e, const EtcdCompare *c)
{
	static const char *const targets[] = {NULL, "VERSION", "CREATE", "MOD", "VALUE", "LEASE"};
	static const char *const fields[] = {NULL, "version", "create_revision", "mod_revision", "value", "lease"};
	static const char *const results[] = {NULL, "EQUAL", "NOT_EQUAL", "GREATER", "LESS"};
	json_t	   *o = json_object();

	if (c->target <= ETCD_TARGET_UNSET || c->target > ETCD_TARGET_LEASE)
	{
		enc_invalid(e, "compare without a valid target");
		return o;
	}
	if (c->result <= ETCD_RESULT_UNSET || c->result > ETCD_RESULT_LESS)
	{
		enc_invalid(e, "compare without a valid result");
		return o;
	}
	enc_keys(e, o, c->key, c->range_end, false);
	enc_set(e, o, "target", json_string(targets[c->target]));
	enc_set(e, o, "result", json_string(results[c->result]));
	if (c->target == ETCD_TARGET_VALUE)
		enc_set(e, o, fields[c->target], j_bytes(c->value));
	else
		enc_set(e, o, fields[c->target], j_i64(c->number));
	return o;
}

/*
 * enc_ops
 *		An array of RequestOp objects.
 */
static json_t *
enc_ops(Enc *e, const EtcdOp *ops, size_t n)
{
	json_t	   *arr = json_array();
	size_t		i;

	for (i = 0; i < n && !e->failed; i++)
	{
		json_t	   *op = json_object();

		switch (ops[i].type)
		{
			case ETCD_OP_RANGE:
				enc_set(e, op, "request_range", enc_range_obj(e, &ops[i].range));
				break;
			case ETCD_OP_PUT:
				enc_set(e, op, "request_put", enc_put_obj(e, &ops[i].put));
				break;
			case ETCD_OP_DELETE:
				enc_set(e, op, "request_delete_range", enc_delete_obj(e, &ops[i].delete_range));
				break;
			default:
				enc_invalid(e, "txn operation without a valid type");
				break;
		}
		enc_append(e, arr, op);
	}
	return arr;
}

/*
 * etcdj_txn
 *		Body of /v3/kv/txn.
 */
char *
etcdj_txn(const EtcdTxnRequest *req, EtcdStatus *st)
{
	Enc			e = {st, false};
	json_t	   *root = json_object();
	json_t	   *cmp = json_array();
	size_t		i;

	if ((req->n_compare && !req->compare) || (req->n_success && !req->success) ||
		(req->n_failure && !req->failure))
		enc_invalid(&e, "txn array pointer missing");
	for (i = 0; i < req->n_compare && !e.failed; i++)
		enc_append(&e, cmp, enc_compare(&e, &req->compare[i]));
	enc_set(&e, root, "compare", cmp);
	if (!e.failed)
		enc_set(&e, root, "success", enc_ops(&e, req->success, req->n_success));
	if (!e.failed)
		enc_set(&e, root, "failure", enc_ops(&e, req->failure, req->n_failure));
	return enc_finish(&e, root);
}

/*
 * etcdj_watch_create
 *		The first (and only) message of a watch stream: a create_request
 *		asking for prev_kv and progress notifications.
 */
char *
etcdj_watch_create(const EtcdWatchRequest *req, EtcdStatus *st)
{
	Enc			e = {st, false};
	json_t	   *root = json_object();
	json_t	   *cr = json_object();

	enc_keys(&e, cr, req->key, req->range_end, req->prefix);
	if (req->start_revision < 0)
		enc_invalid(&e, "negative start revision");
	if (req->start_revision > 0)
		enc_set(&e, cr, "start_revision", j_i64(req->start_revision));
	enc_set(&e, cr, "prev_kv", json_true());
	enc_set(&e, cr, "progress_notify", json_true());
	enc_set(&e, root, "create_request", cr);
	return enc_finish(&e, root);
}

/*
 * etcdj_lease
 *		Body of the lease calls: {"ID"} and, for a grant, {"TTL"} (both
 *		capitalized: "ttl" would be ignored and grant the minimum TTL).
 */
char *
etcdj_lease(int64_t id, int64_t ttl, bool with_ttl, EtcdStatus *st)
{
	Enc			e = {st, false};
	json_t	   *root = json_object();

	if (with_ttl)
		enc_set(&e, root, "TTL", j_i64(ttl));
	if (id != 0 || !with_ttl)
		enc_set(&e, root, "ID", j_i64(id));
	return enc_finish(&e, root);
}

/*
 * etcdj_compaction
 *		Body of /v3/kv/compaction.
 */
char *
etcdj_compaction(int64_t revision, bool physical, EtcdStatus *st)
{
	Enc			e = {st, false};
	json_t	   *root = json_object();

	enc_set(&e, root, "revision", j_i64(revision));
	if (physical)
		enc_set(&e, root, "physical", json_true());
	return enc_finish(&e, root);
}

/*
 * etcdj_strings
 *		An object of n string fields (the auth administration bodies).
 */
char *
etcdj_strings(EtcdStatus *st, int n, const char *const *names, const char *const *values)
{
	Enc			e = {st, false};
	json_t	   *root = json_object();
	int			i;

	for (i = 0; i < n; i++)
	{
		if (values[i] == NULL)
			enc_invalid(&e, "missing name or password");
		else
			enc_set(&e, root, names[i], json_string(values[i]));
	}
	return enc_finish(&e, root);
}

