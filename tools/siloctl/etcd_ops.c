/*-------------------------------------------------------------------------
 *
 * etcd_ops.c
 *	  siloctl's etcd access, over the client in src/etcd/: the session,
 *	  the keys of cluster mode under the prefix, reads (one key, or every
 *	  key under a prefix, at a given revision) and the force-release txn.
 *
 * Keys (docs/cluster.md, "The coordinator and etcd"), under the prefix P:
 *	  P/coord/members/<node_id>		a live node (under its lease)
 *	  P/coord/shardmap				the shard map
 *	  P/coord/shards/<id>/owner		a shard's owner (no lease)
 *
 * Failures to reach etcd (unavailable, timeout) exit 3; other etcd errors
 * exit 1.
 *
 * tools/siloctl/etcd_ops.c
 *
 *-------------------------------------------------------------------------
 */
#include "siloctl.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd.h"

struct EtcdSession
{
	EtcdClient *client;
};

/*
 * etcd_fail
 *		Exit for a failed etcd call: 3 when etcd could not be reached, 1
 *		otherwise.
 */
static void
etcd_fail(EtcdStatus st, const char *what) __attribute__((noreturn));
static void
etcd_fail(EtcdStatus st, const char *what)
{
	int			code = (st.kind == ETCD_UNAVAILABLE || st.kind == ETCD_TIMEOUT)
		? EXIT_CONNECT : EXIT_FAILED;

	fail(code, "%s: etcd %s%s%s (%s)%s", what, etcd_kind_name(st.kind),
		 st.message[0] ? ": " : "", st.message,
		 st.endpoint[0] ? st.endpoint : opt.etcd,
		 st.indeterminate ? "; it may or may not have been applied" : "");
}

/*
 * etcdx_open
 *		A session with the etcd of --etcd (a usage error without one).
 */
EtcdSession *
etcdx_open(void)
{
	EtcdConfig	cfg;
	EtcdSession *s;
	EtcdStatus	st;

	if (opt.etcd == NULL || opt.etcd[0] == '\0')
		usage_error("this command needs --etcd URLS (or $SILOCTL_ETCD_ENDPOINTS)");
	memset(&cfg, 0, sizeof(cfg));
	cfg.endpoints = opt.etcd;
	cfg.user = opt.etcd_user;
	cfg.password = opt.etcd_user ? getenv("SILOCTL_ETCD_PASSWORD") : NULL;
	cfg.ca_file = opt.etcd_cacert;
	cfg.cert_file = opt.etcd_cert;
	cfg.key_file = opt.etcd_key;
	if (opt.etcd_user && cfg.password == NULL)
		usage_error("--etcd-user needs the password in $SILOCTL_ETCD_PASSWORD");

	st = etcd_global_init();
	if (!etcd_ok(st))
		etcd_fail(st, "initialising libcurl");
	s = xmalloc(sizeof(EtcdSession));
	st = etcd_client_create(&cfg, &s->client);
	if (!etcd_ok(st))
	{
		if (st.kind == ETCD_INVALID)
			usage_error("invalid etcd settings: %s", st.message);
		etcd_fail(st, "creating the etcd client");
	}
	return s;
}

/*
 * etcdx_close
 *		End a session.
 */
void
etcdx_close(EtcdSession *s)
{
	if (s == NULL)
		return;
	etcd_client_free(s->client);
	free(s);
	etcd_global_cleanup();
}

/*
 * etcdx_key
 *		A key under the prefix: "<prefix>/<formatted suffix>", the prefix's
 *		trailing slashes dropped (malloc'd).
 */
char *
etcdx_key(const char *fmt,...)
{
	va_list		ap;
	char	   *suffix;
	char	   *key;
	size_t		plen = strlen(opt.prefix);

	va_start(ap, fmt);
	if (vasprintf(&suffix, fmt, ap) < 0)
		suffix = NULL;
	va_end(ap);
	if (suffix == NULL)
		fail(EXIT_FAILED, "out of memory");
	while (plen > 0 && opt.prefix[plen - 1] == '/')
		plen--;
	key = xasprintf("%.*s/%s", (int) plen, opt.prefix, suffix);
	free(suffix);
	return key;
}

/*
 * etcdx_get
 *		Read one key (at revision, 0 = latest).  *header_revision (if not
 *		NULL) gets the store's revision of the read.
 */
void
etcdx_get(EtcdSession *s, const char *key, int64_t revision, EtcdValue *out,
		  int64_t *header_revision)
{
	EtcdRangeRequest req;
	EtcdRangeResult res;
	EtcdStatus	st;

	memset(&req, 0, sizeof(req));
	memset(out, 0, sizeof(*out));
	req.key = etcd_cstr(key);
	req.revision = revision;
	st = etcd_range(s->client, &req, &res);
	if (!etcd_ok(st))
		etcd_fail(st, key);
	if (header_revision)
		*header_revision = res.header.revision;
	if (res.n_kvs > 0)
	{
		const EtcdKeyValue *kv = &res.kvs[0];

		out->found = true;
		out->value = xmalloc(kv->value_len + 1);
		memcpy(out->value, kv->value, kv->value_len);
		out->value[kv->value_len] = '\0';
		out->len = kv->value_len;
		out->mod_revision = kv->mod_revision;
		out->create_revision = kv->create_revision;
		out->lease = kv->lease;
	}
	etcd_range_result_free(&res);
}

/*
 * etcdx_list
 *		Every key under prefix (at revision, 0 = latest), with the prefix
 *		removed from the returned keys.  Returns the count; *out is
 *		malloc'd.
 */
int
etcdx_list(EtcdSession *s, const char *prefix, int64_t revision, EtcdEntry **out)
{
	EtcdRangeRequest req;
	EtcdRangeResult res;
	EtcdStatus	st;
	size_t		plen = strlen(prefix);
	int			n;

	memset(&req, 0, sizeof(req));
	req.key = etcd_cstr(prefix);
	req.prefix = true;
	req.revision = revision;
	st = etcd_range(s->client, &req, &res);
	if (!etcd_ok(st))
		etcd_fail(st, prefix);
	*out = xmalloc(sizeof(EtcdEntry) * (res.n_kvs + 1));
	for (size_t i = 0; i < res.n_kvs; i++)
	{
		const EtcdKeyValue *kv = &res.kvs[i];
		size_t		klen = kv->key_len > plen ? kv->key_len - plen : 0;

		(*out)[i].key = xmalloc(klen + 1);
		memcpy((*out)[i].key, kv->key + (kv->key_len - klen), klen);
		(*out)[i].key[klen] = '\0';
		(*out)[i].value = xmalloc(kv->value_len + 1);
		memcpy((*out)[i].value, kv->value, kv->value_len);
		(*out)[i].value[kv->value_len] = '\0';
		(*out)[i].len = kv->value_len;
	}
	n = (int) res.n_kvs;
	etcd_range_result_free(&res);
	return n;
}

/*
 * etcdx_force_release
 *		Delete owner_key in one txn that succeeds only while member_key is
 *		absent (CREATE == 0) and owner_key is unchanged (MOD == owner_mod).
 *		On a refusal, its failure branch reads the member key to say why.
 *		*revision gets the txn's revision.
 *
 *		A txn whose answer was lost (indeterminate) is judged by reading the
 *		owner key again: gone means it was applied (or someone else deleted
 *		it); unchanged means it was not, and siloctl exits 3.
 */
ReleaseOutcome
etcdx_force_release(EtcdSession *s, const char *owner_key, int64_t owner_mod,
					const char *member_key, int64_t *revision)
{
	EtcdCompare cmp[2];
	EtcdOp		del;
	EtcdOp		get;
	EtcdTxnRequest txn;
	EtcdTxnResult res;
	EtcdStatus	st;
	ReleaseOutcome outcome;

	memset(cmp, 0, sizeof(cmp));
	cmp[0].key = etcd_cstr(member_key);
	cmp[0].target = ETCD_TARGET_CREATE;
	cmp[0].result = ETCD_RESULT_EQUAL;
	cmp[0].number = 0;
	cmp[1].key = etcd_cstr(owner_key);
	cmp[1].target = ETCD_TARGET_MOD;
	cmp[1].result = ETCD_RESULT_EQUAL;
	cmp[1].number = owner_mod;
	memset(&del, 0, sizeof(del));
	del.type = ETCD_OP_DELETE;
	del.delete_range.key = etcd_cstr(owner_key);
	del.delete_range.prev_kv = true;
	memset(&get, 0, sizeof(get));
	get.type = ETCD_OP_RANGE;
	get.range.key = etcd_cstr(member_key);
	memset(&txn, 0, sizeof(txn));
	txn.compare = cmp;
	txn.n_compare = 2;
	txn.success = &del;
	txn.n_success = 1;
	txn.failure = &get;
	txn.n_failure = 1;

	*revision = 0;
	st = etcd_txn(s->client, &txn, &res);
	if (!etcd_ok(st))
	{
		EtcdValue	now;

		if (!st.indeterminate)
			etcd_fail(st, "the force-release txn");
		verbose("etcd did not answer the txn (%s); reading the owner key again",
				etcd_kind_name(st.kind));
		etcdx_get(s, owner_key, 0, &now, revision);
		outcome = !now.found ? RELEASE_DONE : RELEASE_OWNER_CHANGED;
		if (now.found && now.mod_revision == owner_mod)
			fail(EXIT_CONNECT, "etcd did not answer the force-release txn, and the owner key %s is unchanged: nothing was released",
				 owner_key);
		etcd_value_free(&now);
		return outcome;
	}
	*revision = res.header.revision;
	if (res.succeeded)
		outcome = RELEASE_DONE;
	else if (res.n_responses == 1 && res.responses[0].type == ETCD_OP_RANGE &&
			 res.responses[0].range.n_kvs > 0)
		outcome = RELEASE_OWNER_ALIVE;
	else
		outcome = RELEASE_OWNER_CHANGED;
	etcd_txn_result_free(&res);
	return outcome;
}

/*
 * etcd_value_free, etcd_entries_free
 *		Free what the reads returned.
 */
void
etcd_value_free(EtcdValue *v)
{
	free(v->value);
	memset(v, 0, sizeof(*v));
}

void
etcd_entries_free(EtcdEntry *e, int n)
{
	for (int i = 0; i < n; i++)
	{
		free(e[i].key);
		free(e[i].value);
	}
	free(e);
}
