/*-------------------------------------------------------------------------
 *
 * etcd_api.c
 *	  The typed calls of the etcd client: KV, txn, compaction, leases,
 *	  cluster information and auth administration.
 *
 * Each call is the same three steps -- encode the request (etcd_json.c),
 * run it through etcd_call (etcd.c: retries, failover, auth), decode the
 * answer -- plus the call's own flags: reads may be repeated anywhere,
 * writes only when they cannot have been applied.
 *
 * src/etcd/etcd_api.c
 *
 *-------------------------------------------------------------------------
 */
#include "etcd_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * run
 *		Send an encoded body (consumed) and leave the answer in resp; false
 *		with st set when encoding or the call failed.
 */
static bool
run(EtcdClient *c, const char *path, char *body, int flags, EtcdBuf *resp, EtcdStatus *st)
{
	bool		ok;

	if (body == NULL)
		return false;			/* the encoder set st */
	ok = etcd_call(c, path, body, flags, resp, st);
	free(body);
	return ok;
}

/*
 * etcd_range
 *		Read one key, a range or a prefix (linearizable unless serializable).
 */
EtcdStatus
etcd_range(EtcdClient *c, const EtcdRangeRequest *req, EtcdRangeResult *out)
{
	EtcdStatus	st = etcd_status_ok();
	EtcdBuf		resp = {0};

	memset(out, 0, sizeof(*out));
	if (run(c, "/v3/kv/range", etcdj_range(req, &st), ETCD_CALL_READ, &resp, &st))
		etcdj_decode_range(&resp, out, &st);
	etcd_buf_free(&resp);
	return st;
}

/*
 * etcd_put
 *		Write one key (optionally attached to a lease).
 */
EtcdStatus
etcd_put(EtcdClient *c, const EtcdPutRequest *req, EtcdPutResult *out)
{
	EtcdStatus	st = etcd_status_ok();
	EtcdBuf		resp = {0};

	memset(out, 0, sizeof(*out));
	if (run(c, "/v3/kv/put", etcdj_put(req, &st), 0, &resp, &st))
		etcdj_decode_put(&resp, out, &st);
	etcd_buf_free(&resp);
	return st;
}

/*
 * etcd_delete_range
 *		Delete one key, a range or a prefix.
 */
EtcdStatus
etcd_delete_range(EtcdClient *c, const EtcdDeleteRequest *req, EtcdDeleteResult *out)
{
	EtcdStatus	st = etcd_status_ok();
	EtcdBuf		resp = {0};

	memset(out, 0, sizeof(*out));
	if (run(c, "/v3/kv/deleterange", etcdj_delete(req, &st), 0, &resp, &st))
		etcdj_decode_delete(&resp, out, &st);
	etcd_buf_free(&resp);
	return st;
}

/*
 * etcd_txn
 *		Compare-and-swap: run success or failure ops depending on compares.
 *		A txn with only range ops is a read and may be retried anywhere.
 */
EtcdStatus
etcd_txn(EtcdClient *c, const EtcdTxnRequest *req, EtcdTxnResult *out)
{
	EtcdStatus	st = etcd_status_ok();
	EtcdBuf		resp = {0};
	int			flags = ETCD_CALL_READ;
	size_t		i;

	memset(out, 0, sizeof(*out));
	for (i = 0; i < req->n_success && req->success; i++)
		if (req->success[i].type != ETCD_OP_RANGE)
			flags = 0;
	for (i = 0; i < req->n_failure && req->failure; i++)
		if (req->failure[i].type != ETCD_OP_RANGE)
			flags = 0;
	if (run(c, "/v3/kv/txn", etcdj_txn(req, &st), flags, &resp, &st))
		etcdj_decode_txn(&resp, out, &st);
	etcd_buf_free(&resp);
	return st;
}

/*
 * etcd_compact
 *		Drop the history before revision.
 */
EtcdStatus
etcd_compact(EtcdClient *c, int64_t revision, bool physical)
{
	EtcdStatus	st = etcd_status_ok();
	EtcdBuf		resp = {0};
	EtcdHeader	h;

	if (run(c, "/v3/kv/compaction", etcdj_compaction(revision, physical, &st), 0, &resp, &st))
		etcdj_decode_header(&resp, &h, &st);
	etcd_buf_free(&resp);
	return st;
}

/*
 * etcd_kv_free
 *		Free a key-value pair's bytes and zero it.
 */
void
etcd_kv_free(EtcdKeyValue *kv)
{
	free(kv->key);
	free(kv->value);
	memset(kv, 0, sizeof(*kv));
}

/*
 * kvs_free
 *		Free n key-value pairs and their array.
 */
static void
kvs_free(EtcdKeyValue *kvs, size_t n)
{
	size_t		i;

	for (i = 0; i < n; i++)
		etcd_kv_free(&kvs[i]);
	free(kvs);
}

/*
 * etcd_range_result_free
 *		Release a range result's memory and zero it (freeing a zeroed result,
 *		as every free function here, is a no-op).
 */
void
etcd_range_result_free(EtcdRangeResult *res)
{
	kvs_free(res->kvs, res->n_kvs);
	memset(res, 0, sizeof(*res));
}

/*
 * etcd_put_result_free
 *		Release a put result (its prev_kv) and zero it.
 */
void
etcd_put_result_free(EtcdPutResult *res)
{
	etcd_kv_free(&res->prev_kv);
	memset(res, 0, sizeof(*res));
}

/*
 * etcd_delete_result_free
 *		Release a delete result (its prev_kvs) and zero it.
 */
void
etcd_delete_result_free(EtcdDeleteResult *res)
{
	kvs_free(res->prev_kvs, res->n_prev_kvs);
	memset(res, 0, sizeof(*res));
}

/*
 * etcd_txn_result_free
 *		Release a txn result, every response included, and zero it.
 */
void
etcd_txn_result_free(EtcdTxnResult *res)
{
	size_t		i;

	for (i = 0; i < res->n_responses; i++)
	{
		etcd_range_result_free(&res->responses[i].range);
		etcd_put_result_free(&res->responses[i].put);
		etcd_delete_result_free(&res->responses[i].delete_range);
	}
	free(res->responses);
	memset(res, 0, sizeof(*res));
}

/*
 * lease_call
 *		The lease calls share one shape: {"ID"[, "TTL"]} in, a lease out.
 */
static EtcdStatus
lease_call(EtcdClient *c, const char *path, int64_t id, int64_t ttl, bool grant,
		   int flags, EtcdLease *out)
{
	EtcdStatus	st = etcd_status_ok();
	EtcdBuf		resp = {0};

	memset(out, 0, sizeof(*out));
	if (run(c, path, etcdj_lease(id, ttl, grant, &st), flags, &resp, &st))
		etcdj_decode_lease(&resp, (flags & ETCD_CALL_STREAM) != 0, out, &st);
	etcd_buf_free(&resp);
	return st;
}

/*
 * etcd_lease_grant
 *		A new lease; see etcd.h for the minimum TTL.
 */
EtcdStatus
etcd_lease_grant(EtcdClient *c, int64_t ttl, int64_t id, EtcdLease *out)
{
	if (ttl <= 0 || id < 0)
	{
		EtcdStatus	st = etcd_status_ok();

		memset(out, 0, sizeof(*out));
		etcd_status_set(&st, ETCD_INVALID, "lease TTL must be positive and ID non-negative");
		return st;
	}
	return lease_call(c, "/v3/lease/grant", id, ttl, true, 0, out);
}

/*
 * etcd_lease_keepalive
 *		One unary keepalive: one request on the keepalive stream, whose one
 *		{"result":...} line ends it.  TTL 0 in an HTTP 200: the lease is gone.
 */
EtcdStatus
etcd_lease_keepalive(EtcdClient *c, int64_t id, EtcdLease *out)
{
	return lease_call(c, "/v3/lease/keepalive", id, 0, false,
					  ETCD_CALL_READ | ETCD_CALL_STREAM, out);
}

/*
 * etcd_lease_revoke
 *		Revoke a lease and delete its keys.
 */
EtcdStatus
etcd_lease_revoke(EtcdClient *c, int64_t id)
{
	EtcdLease	unused;

	return lease_call(c, "/v3/lease/revoke", id, 0, false, 0, &unused);
}

/*
 * etcd_lease_timetolive
 *		Remaining and granted TTL; TTL -1 for a lease that is gone.
 */
EtcdStatus
etcd_lease_timetolive(EtcdClient *c, int64_t id, EtcdLease *out)
{
	return lease_call(c, "/v3/lease/timetolive", id, 0, false, ETCD_CALL_READ, out);
}

/*
 * etcd_member_list
 *		The cluster's members and their client URLs.
 */
EtcdStatus
etcd_member_list(EtcdClient *c, EtcdMemberList *out)
{
	EtcdStatus	st = etcd_status_ok();
	EtcdBuf		resp = {0};
	char	   *body = strdup("{}");

	memset(out, 0, sizeof(*out));
	if (body == NULL)
		etcd_status_set(&st, ETCD_NO_MEMORY, "out of memory");
	else if (run(c, "/v3/cluster/member/list", body, ETCD_CALL_READ, &resp, &st))
		etcdj_decode_members(&resp, out, &st);
	etcd_buf_free(&resp);
	return st;
}

/*
 * etcd_member_list_free
 *		Release a member list and zero it.
 */
void
etcd_member_list_free(EtcdMemberList *list)
{
	size_t		i;
	size_t		j;

	for (i = 0; i < list->n_members; i++)
	{
		EtcdMember *m = &list->members[i];

		free(m->name);
		for (j = 0; j < m->n_client_urls; j++)
			free(m->client_urls[j]);
		free(m->client_urls);
		for (j = 0; j < m->n_peer_urls; j++)
			free(m->peer_urls[j]);
		free(m->peer_urls);
	}
	free(list->members);
	memset(list, 0, sizeof(*list));
}

/*
 * etcd_member_list_endpoints
 *		Every member's client URLs joined with commas (malloc'd; NULL when
 *		out of memory).  Learners are left out: they serve no requests.
 */
char *
etcd_member_list_endpoints(const EtcdMemberList *list)
{
	size_t		size = 1;
	size_t		i;
	size_t		j;
	char	   *out;

	for (i = 0; i < list->n_members; i++)
		for (j = 0; j < list->members[i].n_client_urls; j++)
			size += strlen(list->members[i].client_urls[j]) + 1;
	out = malloc(size);
	if (out == NULL)
		return NULL;
	out[0] = '\0';
	for (i = 0; i < list->n_members; i++)
	{
		if (list->members[i].is_learner)
			continue;
		for (j = 0; j < list->members[i].n_client_urls; j++)
		{
			if (out[0] != '\0')
				strcat(out, ",");
			strcat(out, list->members[i].client_urls[j]);
		}
	}
	return out;
}

/*
 * etcd_server_status
 *		Maintenance status of whichever member answers.
 */
EtcdStatus
etcd_server_status(EtcdClient *c, EtcdServerStatus *out)
{
	EtcdStatus	st = etcd_status_ok();
	EtcdBuf		resp = {0};
	char	   *body = strdup("{}");

	memset(out, 0, sizeof(*out));
	if (body == NULL)
		etcd_status_set(&st, ETCD_NO_MEMORY, "out of memory");
	else if (run(c, "/v3/maintenance/status", body, ETCD_CALL_READ, &resp, &st))
		etcdj_decode_status(&resp, out, &st);
	etcd_buf_free(&resp);
	return st;
}

/*
 * etcd_version_at_least
 *		Compare "X.Y[.Z...]" with major.minor.
 */
bool
etcd_version_at_least(const char *version, int major, int minor)
{
	int			x;
	int			y;

	if (version == NULL || sscanf(version, "%d.%d", &x, &y) != 2)
		return false;
	return x > major || (x == major && y >= minor);
}

/*
 * etcd_version_check
 *		GET /version, refusing clusters older than 3.4: their gateway lives
 *		under /v3beta or /v3alpha, which this client never uses.
 */
EtcdStatus
etcd_version_check(EtcdClient *c, EtcdVersion *out)
{
	EtcdStatus	st = etcd_status_ok();
	EtcdBuf		resp = {0};

	memset(out, 0, sizeof(*out));
	if (etcd_call(c, "/version", NULL, ETCD_CALL_READ | ETCD_CALL_GET | ETCD_CALL_NO_AUTH,
				  &resp, &st) &&
		etcdj_decode_version(&resp, out, &st))
	{
		if (strcmp(out->cluster, "not_decided") == 0 || out->cluster[0] == '\0')
			etcd_status_set(&st, ETCD_UNAVAILABLE, "the etcd cluster has not decided its version yet");
		else if (!etcd_version_at_least(out->cluster, 3, 4))
			etcd_status_set(&st, ETCD_UNSUPPORTED, "etcd cluster version %s is older than 3.4",
							out->cluster);
	}
	etcd_buf_free(&resp);
	return st;
}

/*
 * admin_call
 *		An auth administration call: string fields in, a header out.
 */
static EtcdStatus
admin_call(EtcdClient *c, const char *path, int n, const char *const *names,
		   const char *const *values)
{
	EtcdStatus	st = etcd_status_ok();
	EtcdBuf		resp = {0};
	EtcdHeader	h;

	if (run(c, path, etcdj_strings(&st, n, names, values), 0, &resp, &st))
		etcdj_decode_header(&resp, &h, &st);
	etcd_buf_free(&resp);
	return st;
}

/*
 * etcd_user_add
 *		Create a user (etcdctl user add).  This and the next four are the
 *		auth administration etcdctl does, through the gateway.
 */
EtcdStatus
etcd_user_add(EtcdClient *c, const char *name, const char *password)
{
	static const char *const names[] = {"name", "password"};
	const char *values[] = {name, password};

	return admin_call(c, "/v3/auth/user/add", 2, names, values);
}

/*
 * etcd_role_add
 *		Create a role (etcdctl role add).
 */
EtcdStatus
etcd_role_add(EtcdClient *c, const char *name)
{
	static const char *const names[] = {"name"};
	const char *values[] = {name};

	return admin_call(c, "/v3/auth/role/add", 1, names, values);
}

/*
 * etcd_user_grant_role
 *		Give a user a role (etcdctl user grant-role).
 */
EtcdStatus
etcd_user_grant_role(EtcdClient *c, const char *user, const char *role)
{
	static const char *const names[] = {"user", "role"};
	const char *values[] = {user, role};

	return admin_call(c, "/v3/auth/user/grant", 2, names, values);
}

/*
 * etcd_auth_enable
 *		Turn authentication on (needs user root with role root).
 */
EtcdStatus
etcd_auth_enable(EtcdClient *c)
{
	return admin_call(c, "/v3/auth/enable", 0, NULL, NULL);
}

/*
 * etcd_auth_disable
 *		Turn authentication off (as root).
 */
EtcdStatus
etcd_auth_disable(EtcdClient *c)
{
	return admin_call(c, "/v3/auth/disable", 0, NULL, NULL);
}
