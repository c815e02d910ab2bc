/*-------------------------------------------------------------------------
 *
 * etcd_client_test.c
 *	  Test driver of the etcd client (src/etcd): one subcommand per
 *	  scenario, run by test/t/013_etcd_client.pl against real etcd members.
 *
 *	  etcd_client_test [options] SCENARIO [args]
 *
 *	  -e URLS        endpoints (comma-separated)
 *	  -u USER -p PW  credentials
 *	  --ca F --cert F --key F   TLS files
 *	  -t MS          request timeout (default 1500)
 *	  -P PREFIX      key namespace of this run (default "silotest/")
 *
 * Scenarios (see usage()): unit kv lock lease lease-expire watch watch-end
 * failover hung put status auth-enable auth tls.
 *
 * Every scenario prints what it observed as key=value lines on stdout and
 * exits 0; a violated expectation prints "FAIL: ..." on stderr and exits
 * 1.  Scenarios whose outcome the TAP test judges (watch-end, put, hung)
 * print and exit 0 whatever happened.
 *
 * test/etcd/etcd_client_test.c
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE

#include "etcd.h"
#include "etcd_int.h"

#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static EtcdConfig config;
static const char *prefix = "silotest/";
static int	checks;

/*
 * fail
 *		Report a violated expectation and exit 1.
 */
static void
fail(const char *fmt,...)
{
	va_list		ap;

	fflush(stdout);
	fprintf(stderr, "FAIL: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(1);
}

/*
 * say
 *		Print one observation line (flushed: the TAP test reads it live).
 */
static void
say(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

#define expect(cond, ...) \
	do { checks++; if (!(cond)) fail(__VA_ARGS__); } while (0)

/*
 * expect_ok
 *		A call that must succeed.
 */
static void
expect_ok(EtcdStatus st, const char *what)
{
	checks++;
	if (st.kind != ETCD_OK)
		fail("%s: %s (http %ld, grpc %d, curl %d, endpoint %s): %s", what,
			 etcd_kind_name(st.kind), st.http_status, st.grpc_code, st.curl_code,
			 st.endpoint, st.message);
}

/*
 * expect_kind
 *		A call that must fail in a particular way.
 */
static void
expect_kind(EtcdStatus st, EtcdStatusKind kind, const char *what)
{
	checks++;
	if (st.kind != kind)
		fail("%s: expected %s, got %s (http %ld, grpc %d): %s", what, etcd_kind_name(kind),
			 etcd_kind_name(st.kind), st.http_status, st.grpc_code, st.message);
}

/*
 * status_line
 *		Print a status as NAME.kind=... lines on one line.
 */
static void
status_line(const char *name, EtcdStatus st)
{
	say("%s.kind=%s %s.indeterminate=%d %s.http=%ld %s.grpc=%d %s.curl=%d %s.message=%s",
		name, etcd_kind_name(st.kind), name, st.indeterminate, name, st.http_status,
		name, st.grpc_code, name, st.curl_code, name, st.message);
}

/*
 * now_ms, wall_ms
 *		Monotonic and wall-clock milliseconds.
 */
static int64_t
now_ms(void)
{
	return etcd_now_ms();
}

/*
 * wall_ms
 *		Wall-clock milliseconds, comparable with the TAP test's clock.
 */
static int64_t
wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * sleep_ms
 *		Sleep that long.
 */
static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/*
 * client_with
 *		A client from the global config, overridden by cfg when given.
 */
static EtcdClient *
client_with(const EtcdConfig *cfg)
{
	EtcdClient *c;

	expect_ok(etcd_client_create(cfg ? cfg : &config, &c), "client_create");
	return c;
}

/*
 * key_of
 *		prefix + name (+ extra bytes), in a static rotating buffer.
 */
static EtcdBytes
key_of(const char *name, const void *extra, size_t extra_len)
{
	static char bufs[8][512];
	static int	next;
	char	   *b = bufs[next++ % 8];
	size_t		n = (size_t) snprintf(b, 400, "%s%s", prefix, name);

	memcpy(b + n, extra, extra_len);
	return etcd_bytes(b, n + extra_len);
}

/*
 * bytes_eq
 *		Do a returned byte string and an expected one match?
 */
static bool
bytes_eq(const char *a, size_t alen, EtcdBytes b)
{
	return alen == b.len && memcmp(a, b.data, alen) == 0;
}

/* ---- small call wrappers used by several scenarios ---- */

/*
 * put_bytes
 *		A put that must succeed; returns its revision.
 */
static int64_t
put_bytes(EtcdClient *c, EtcdBytes key, EtcdBytes value, int64_t lease)
{
	EtcdPutRequest req = {.key = key, .value = value, .lease = lease};
	EtcdPutResult res;

	int64_t		rev;

	expect_ok(etcd_put(c, &req, &res), "put");
	rev = res.header.revision;
	etcd_put_result_free(&res);
	return rev;
}

/*
 * get_key
 *		A single-key range that must succeed (caller frees).
 */
static EtcdRangeResult
get_key(EtcdClient *c, EtcdBytes key)
{
	EtcdRangeRequest req = {.key = key};
	EtcdRangeResult res;

	expect_ok(etcd_range(c, &req, &res), "range");
	return res;
}

/*
 * delete_prefix
 *		Delete every key under a prefix.
 */
static void
delete_prefix(EtcdClient *c, EtcdBytes key)
{
	EtcdDeleteRequest req = {.key = key, .prefix = true};
	EtcdDeleteResult res;

	expect_ok(etcd_delete_range(c, &req, &res), "delete prefix");
	etcd_delete_result_free(&res);
}


/* ----------------------------------------------------------------------
 * unit: no server needed
 * ---------------------------------------------------------------------- */

/*
 * check_prefix_end
 *		One etcd_prefix_end case.
 */
static void
check_prefix_end(const char *in, size_t len, const char *want, size_t want_len)
{
	char		out[64];
	size_t		n = etcd_prefix_end(in, len, out);

	expect(n == want_len && memcmp(out, want, n) == 0,
		   "prefix_end of %zu bytes gave %zu bytes", len, n);
}

/*
 * check_encoding
 *		An encoder's output must equal etcd's verbatim wire form.
 */
static void
check_encoding(char *got, const char *want, const char *what)
{
	expect(got != NULL && strcmp(got, want) == 0, "%s encodes as %s, expected %s", what,
		   got ? got : "(null)", want);
	free(got);
}

/*
 * scenario_unit
 *		Prefix ends, base64, version parsing, the encoders against the
 *		bodies verified on etcd 3.4, local rejection of unset enums, the
 *		decoders on omitted fields, and configuration checks.
 */
static int
scenario_unit(void)
{
	EtcdStatus	st = etcd_status_ok();
	EtcdBytes	shard = etcd_cstr("coord/shards/7/owner");
	char	   *enc;
	char	   *dec;
	size_t		dec_len;
	EtcdBuf		body = {0};
	EtcdClient *c;
	EtcdConfig	cfg = {0};
	int			i;

	/* prefix ends: trailing 0xff dropped, "\0" when nothing is left */
	check_prefix_end("coord/", 6, "coord0", 6);
	check_prefix_end("a\xff", 2, "b", 1);
	check_prefix_end("a\x01\xff\xff", 4, "a\x02", 2);
	check_prefix_end("\xff\xff", 2, "\0", 1);
	check_prefix_end("", 0, "\0", 1);

	/* base64: etcd's vectors; padding required, URL-safe refused */
	enc = etcd_b64_encode("coord/members/node-a", 20);
	expect(strcmp(enc, "Y29vcmQvbWVtYmVycy9ub2RlLWE=") == 0, "b64 of a key: %s", enc);
	free(enc);
	enc = etcd_b64_encode("", 1);
	expect(strcmp(enc, "AA==") == 0, "b64 of NUL: %s", enc);
	free(enc);
	for (i = 0; i < 64; i++)
	{
		char		raw[64];
		int			k;

		for (k = 0; k < i; k++)
			raw[k] = (char) (k * 37 + i);
		enc = etcd_b64_encode(raw, (size_t) i);
		expect(etcd_b64_decode(enc, strlen(enc), &dec, &dec_len) &&
			   dec_len == (size_t) i && memcmp(dec, raw, (size_t) i) == 0,
			   "b64 round trip of %d bytes", i);
		free(enc);
		free(dec);
	}
	expect(!etcd_b64_decode("Zm9vYQ", 6, &dec, &dec_len), "unpadded base64 accepted");
	expect(!etcd_b64_decode("Zm9v-_==", 8, &dec, &dec_len), "URL-safe base64 accepted");
	expect(!etcd_b64_decode("Zm=vYQ==", 8, &dec, &dec_len), "inner padding accepted");

	/* versions */
	expect(etcd_version_at_least("3.4.0", 3, 4), "3.4.0 >= 3.4");
	expect(etcd_version_at_least("3.5.9", 3, 4), "3.5.9 >= 3.4");
	expect(etcd_version_at_least("4.0.0", 3, 4), "4.0.0 >= 3.4");
	expect(!etcd_version_at_least("3.3.25", 3, 4), "3.3.25 < 3.4");
	expect(!etcd_version_at_least("not_decided", 3, 4), "not_decided is no version");

	/* encoders against the bodies of the notes (put-if-absent, prefix range) */
	{
		EtcdCompare cmp = {.key = shard, .target = ETCD_TARGET_CREATE,
		.result = ETCD_RESULT_EQUAL, .number = 0};
		EtcdOp		ok_op = {.type = ETCD_OP_PUT, .put = {.key = shard, .value = etcd_cstr("node-a")}};
		EtcdOp		ko_op = {.type = ETCD_OP_RANGE, .range = {.key = shard}};
		EtcdTxnRequest txn = {&cmp, 1, &ok_op, 1, &ko_op, 1};
		EtcdRangeRequest rr = {.key = etcd_cstr("coord/members/"), .prefix = true};
		EtcdRangeRequest all = {.prefix = true, .count_only = true};
		EtcdCompare unset = {.key = shard, .result = ETCD_RESULT_EQUAL};
		EtcdCompare noresult = {.key = shard, .target = ETCD_TARGET_MOD};
		EtcdOp		unset_op = {.type = ETCD_OP_UNSET};
		EtcdTxnRequest bad1 = {&unset, 1, NULL, 0, NULL, 0};
		EtcdTxnRequest bad2 = {&noresult, 1, NULL, 0, NULL, 0};
		EtcdTxnRequest bad3 = {NULL, 0, &unset_op, 1, NULL, 0};
		EtcdRangeRequest both = {.key = shard, .range_end = shard, .prefix = true};
		EtcdPutRequest nokey = {.value = etcd_cstr("x")};

		check_encoding(etcdj_txn(&txn, &st),
					   "{\"compare\":[{\"key\":\"Y29vcmQvc2hhcmRzLzcvb3duZXI=\",\"target\":\"CREATE\","
					   "\"result\":\"EQUAL\",\"create_revision\":\"0\"}],"
					   "\"success\":[{\"request_put\":{\"key\":\"Y29vcmQvc2hhcmRzLzcvb3duZXI=\","
					   "\"value\":\"bm9kZS1h\"}}],"
					   "\"failure\":[{\"request_range\":{\"key\":\"Y29vcmQvc2hhcmRzLzcvb3duZXI=\"}}]}",
					   "put-if-absent txn");
		check_encoding(etcdj_range(&rr, &st),
					   "{\"key\":\"Y29vcmQvbWVtYmVycy8=\",\"range_end\":\"Y29vcmQvbWVtYmVyczA=\"}",
					   "prefix range");
		check_encoding(etcdj_range(&all, &st),
					   "{\"key\":\"AA==\",\"range_end\":\"AA==\",\"count_only\":true}",
					   "whole keyspace");
		check_encoding(etcdj_lease(0, 10, true, &st), "{\"TTL\":\"10\"}", "grant");
		check_encoding(etcdj_lease(4242, 0, false, &st), "{\"ID\":\"4242\"}", "keepalive");

		/* unset enums and contradictory requests never reach etcd */
		expect(etcdj_txn(&bad1, &st) == NULL && st.kind == ETCD_INVALID, "unset target encoded");
		expect(etcdj_txn(&bad2, &st) == NULL && st.kind == ETCD_INVALID, "unset result encoded");
		expect(etcdj_txn(&bad3, &st) == NULL && st.kind == ETCD_INVALID, "unset op encoded");
		expect(etcdj_range(&both, &st) == NULL && st.kind == ETCD_INVALID, "prefix+range_end");
		expect(etcdj_put(&nokey, &st) == NULL && st.kind == ETCD_INVALID, "empty key encoded");
	}

	/* decoders: omitted defaults, int64 strings, uint64 IDs */
	{
		EtcdTxnResult txr;
		EtcdLease	lease;
		EtcdWatchMsg msg;
		EtcdRangeResult rr;
		const char *failed_txn = "{\"header\":{\"cluster_id\":\"18227813460964793158\","
		"\"revision\":\"10\"}}";
		const char *dead_keepalive = "{\"result\":{\"header\":{\"revision\":\"17\"},\"ID\":\"4242\"}}";
		const char *put_event = "{\"result\":{\"header\":{\"revision\":\"18\"},\"events\":[{\"kv\":"
		"{\"key\":\"YQ==\",\"create_revision\":\"18\",\"mod_revision\":\"18\",\"version\":\"1\","
		"\"value\":\"e30=\"}}]}}";
		const char *del_event = "{\"result\":{\"header\":{\"revision\":\"20\"},\"events\":[{\"type\":"
		"\"DELETE\",\"kv\":{\"key\":\"YQ==\",\"mod_revision\":\"20\"},\"prev_kv\":{\"key\":\"YQ==\","
		"\"value\":\"e30=\"}}]}}";
		const char *truncated = "{\"result\":{\"header\":{\"revision\":1}";
		const char *stream_err = "{\"error\":{\"grpc_code\":14,\"http_code\":503,\"message\":"
		"\"etcdserver: no leader\",\"http_status\":\"Service Unavailable\"}}";

		body.len = 0;
		etcd_buf_append(&body, failed_txn, strlen(failed_txn));
		expect(etcdj_decode_txn(&body, &txr, &st) && !txr.succeeded && txr.n_responses == 0 &&
			   txr.header.cluster_id == UINT64_C(18227813460964793158) &&
			   txr.header.revision == 10, "failed txn decoding");
		etcd_txn_result_free(&txr);
		body.len = 0;
		etcd_buf_append(&body, "{\"header\":{}}", 13);
		expect(etcdj_decode_range(&body, &rr, &st) && rr.n_kvs == 0 && rr.count == 0,
			   "empty range decoding");
		etcd_range_result_free(&rr);
		body.len = 0;
		etcd_buf_append(&body, dead_keepalive, strlen(dead_keepalive));
		expect(etcdj_decode_lease(&body, true, &lease, &st) && lease.ttl == 0 && lease.id == 4242,
			   "keepalive of a dead lease decoding");
		expect(etcdj_decode_watch(put_event, strlen(put_event), &msg, &st) && msg.n_events == 1 &&
			   !msg.events[0].is_delete && msg.events[0].kv.mod_revision == 18 &&
			   msg.events[0].kv.value_len == 2 && !msg.events[0].has_prev_kv,
			   "PUT event without type");
		etcdj_watch_msg_free(&msg);
		expect(etcdj_decode_watch(del_event, strlen(del_event), &msg, &st) && msg.n_events == 1 &&
			   msg.events[0].is_delete && msg.events[0].has_prev_kv &&
			   msg.events[0].kv.value_len == 0, "DELETE event");
		etcdj_watch_msg_free(&msg);
		expect(etcdj_decode_watch(stream_err, strlen(stream_err), &msg, &st) && msg.is_error &&
			   msg.error.kind == ETCD_UNAVAILABLE && msg.error.grpc_code == 14 &&
			   msg.error.http_status == 503, "in-stream error object");
		etcdj_watch_msg_free(&msg);
		expect(!etcdj_decode_watch(truncated, strlen(truncated), &msg, &st) &&
			   st.kind == ETCD_PROTOCOL, "truncated message accepted");
		etcd_buf_free(&body);
	}

	/* configuration */
	cfg.endpoints = "ftp://127.0.0.1:1";
	expect_kind(etcd_client_create(&cfg, &c), ETCD_INVALID, "ftp endpoint");
	cfg.endpoints = "http://127.0.0.1:1";
	cfg.request_timeout_ms = 8000;
	expect_kind(etcd_client_create(&cfg, &c), ETCD_INVALID, "8 s request timeout");
	cfg.request_timeout_ms = 0;
	cfg.user = "root";
	expect_kind(etcd_client_create(&cfg, &c), ETCD_INVALID, "user without password");
	cfg.user = NULL;
	cfg.endpoints = " http://127.0.0.1:1/ , https://127.0.0.1:2 ";
	expect_ok(etcd_client_create(&cfg, &c), "two endpoints");
	expect(strcmp(etcd_client_endpoint(c), "http://127.0.0.1:1") == 0, "endpoint trimming");
	expect_ok(etcd_client_set_endpoints(c, "http://127.0.0.1:3"), "set_endpoints");
	expect(strcmp(etcd_client_endpoint(c), "http://127.0.0.1:3") == 0, "new endpoint");
	etcd_client_free(c);

	say("unit=ok checks=%d", checks);
	return 0;
}

/* ----------------------------------------------------------------------
 * kv: binary-safe round trips
 * ---------------------------------------------------------------------- */

/*
 * scenario_kv
 *		put / range / prefix range / delete with keys and values holding NUL
 *		and 0xff bytes and a 6000-byte value; limit, keys_only, count_only,
 *		serializable reads, reads at an old revision, prev_kv.
 */
static int
scenario_kv(void)
{
	EtcdClient *c = client_with(NULL);
	EtcdBytes	base = key_of("kv/", "", 0);
	EtcdBytes	k_bin = key_of("kv/bin", "\0\xff\xff", 3);
	EtcdBytes	k_big = key_of("kv/big", "", 0);
	EtcdBytes	k_ff = key_of("kv/", "\xff\xff", 2);
	EtcdBytes	v_bin = etcd_bytes("v\0\xff\0end\xff", 9);
	char		big[6000];
	EtcdRangeResult rr;
	EtcdRangeRequest req;
	EtcdPutRequest preq;
	EtcdPutResult pres;
	EtcdDeleteRequest dreq;
	EtcdDeleteResult dres;
	int64_t		rev1;
	size_t		i;

	for (i = 0; i < sizeof(big); i++)
		big[i] = (char) ((i * 7) & 0xff);
	delete_prefix(c, base);

	rev1 = put_bytes(c, k_bin, v_bin, 0);
	put_bytes(c, k_big, etcd_bytes(big, sizeof(big)), 0);
	put_bytes(c, k_ff, etcd_cstr("ff"), 0);

	rr = get_key(c, k_bin);
	expect(rr.n_kvs == 1 && rr.count == 1, "binary key: %zu kvs", rr.n_kvs);
	expect(bytes_eq(rr.kvs[0].key, rr.kvs[0].key_len, k_bin), "binary key bytes differ");
	expect(bytes_eq(rr.kvs[0].value, rr.kvs[0].value_len, v_bin), "binary value bytes differ");
	expect(rr.kvs[0].create_revision == rev1 && rr.kvs[0].mod_revision == rev1 &&
		   rr.kvs[0].version == 1 && rr.kvs[0].lease == 0, "binary key metadata");
	etcd_range_result_free(&rr);

	rr = get_key(c, k_big);
	expect(rr.n_kvs == 1 && bytes_eq(rr.kvs[0].value, rr.kvs[0].value_len,
									 etcd_bytes(big, sizeof(big))), "6000-byte value differs");
	say("big_value_len=%zu", rr.kvs[0].value_len);
	etcd_range_result_free(&rr);

	/* prefix: keys in byte order, 0xff last */
	memset(&req, 0, sizeof(req));
	req.key = base;
	req.prefix = true;
	expect_ok(etcd_range(c, &req, &rr), "prefix range");
	expect(rr.n_kvs == 3 && rr.count == 3, "prefix range found %zu keys", rr.n_kvs);
	expect(bytes_eq(rr.kvs[0].key, rr.kvs[0].key_len, k_big) &&
		   bytes_eq(rr.kvs[1].key, rr.kvs[1].key_len, k_bin) &&
		   bytes_eq(rr.kvs[2].key, rr.kvs[2].key_len, k_ff), "prefix range order");
	say("prefix_count=%" PRId64 " prefix_kvs=%zu", rr.count, rr.n_kvs);
	etcd_range_result_free(&rr);

	req.keys_only = true;
	expect_ok(etcd_range(c, &req, &rr), "keys_only");
	expect(rr.n_kvs == 3 && rr.kvs[1].value_len == 0 && rr.kvs[1].key_len == k_bin.len,
		   "keys_only returned values");
	etcd_range_result_free(&rr);
	req.keys_only = false;
	req.count_only = true;
	expect_ok(etcd_range(c, &req, &rr), "count_only");
	expect(rr.n_kvs == 0 && rr.count == 3, "count_only: %zu kvs, count %" PRId64, rr.n_kvs, rr.count);
	etcd_range_result_free(&rr);
	req.count_only = false;
	req.limit = 1;
	expect_ok(etcd_range(c, &req, &rr), "limit");
	expect(rr.n_kvs == 1 && rr.more && rr.count == 3, "limit 1: more=%d", rr.more);
	say("limit_more=%d", rr.more);
	etcd_range_result_free(&rr);
	req.limit = 0;
	req.serializable = true;
	expect_ok(etcd_range(c, &req, &rr), "serializable");
	expect(rr.n_kvs == 3, "serializable read");
	etcd_range_result_free(&rr);

	/* the whole keyspace (empty prefix) */
	memset(&req, 0, sizeof(req));
	req.prefix = true;
	req.count_only = true;
	expect_ok(etcd_range(c, &req, &rr), "whole keyspace");
	expect(rr.count >= 3, "whole keyspace count %" PRId64, rr.count);
	etcd_range_result_free(&rr);

	/* overwrite with prev_kv; the old value stays readable at its revision */
	memset(&preq, 0, sizeof(preq));
	preq.key = k_bin;
	preq.value = etcd_cstr("second");
	preq.prev_kv = true;
	expect_ok(etcd_put(c, &preq, &pres), "put prev_kv");
	expect(pres.has_prev_kv && bytes_eq(pres.prev_kv.value, pres.prev_kv.value_len, v_bin),
		   "prev_kv of the overwrite");
	expect(pres.header.revision > rev1, "revision did not advance");
	etcd_put_result_free(&pres);
	memset(&req, 0, sizeof(req));
	req.key = k_bin;
	req.revision = rev1;
	expect_ok(etcd_range(c, &req, &rr), "range at a revision");
	expect(rr.n_kvs == 1 && bytes_eq(rr.kvs[0].value, rr.kvs[0].value_len, v_bin),
		   "old value at revision %" PRId64, rev1);
	etcd_range_result_free(&rr);

	/* delete: a prefix ending in 0xff, one key with prev_kv, the rest */
	memset(&dreq, 0, sizeof(dreq));
	dreq.key = key_of("kv/", "\xff", 1);
	dreq.prefix = true;
	expect_ok(etcd_delete_range(c, &dreq, &dres), "delete 0xff prefix");
	expect(dres.deleted == 1, "0xff prefix deleted %" PRId64, dres.deleted);
	etcd_delete_result_free(&dres);
	memset(&dreq, 0, sizeof(dreq));
	dreq.key = k_bin;
	dreq.prev_kv = true;
	expect_ok(etcd_delete_range(c, &dreq, &dres), "delete prev_kv");
	expect(dres.deleted == 1 && dres.n_prev_kvs == 1 &&
		   bytes_eq(dres.prev_kvs[0].value, dres.prev_kvs[0].value_len, etcd_cstr("second")),
		   "delete prev_kv");
	etcd_delete_result_free(&dres);
	rr = get_key(c, k_bin);
	expect(rr.n_kvs == 0 && rr.count == 0, "deleted key still there");
	etcd_range_result_free(&rr);
	delete_prefix(c, base);
	memset(&req, 0, sizeof(req));
	req.key = base;
	req.prefix = true;
	expect_ok(etcd_range(c, &req, &rr), "prefix after delete");
	expect(rr.n_kvs == 0, "prefix not empty after delete");
	etcd_range_result_free(&rr);

	say("kv=ok checks=%d", checks);
	etcd_client_free(c);
	return 0;
}

/* ----------------------------------------------------------------------
 * lock: put-if-absent, fenced release, ABA, LEASE compares
 * ---------------------------------------------------------------------- */

/*
 * acquire
 *		Put-if-absent of key = node; on failure *owner_value and
 *		*owner_create describe the current owner (from the failure branch).
 */
static bool
acquire(EtcdClient *c, EtcdBytes key, const char *node, int64_t *rev,
		char *owner_value, int64_t *owner_create)
{
	EtcdCompare cmp = {.key = key, .target = ETCD_TARGET_CREATE, .result = ETCD_RESULT_EQUAL,
	.number = 0};
	EtcdOp		put = {.type = ETCD_OP_PUT, .put = {.key = key, .value = etcd_cstr(node)}};
	EtcdOp		get = {.type = ETCD_OP_RANGE, .range = {.key = key}};
	EtcdTxnRequest txn = {&cmp, 1, &put, 1, &get, 1};
	EtcdTxnResult res;
	bool		won;

	expect_ok(etcd_txn(c, &txn, &res), "acquire txn");
	won = res.succeeded;
	*rev = res.header.revision;
	expect(res.n_responses == 1, "acquire: %zu responses", res.n_responses);
	if (won)
		expect(res.responses[0].type == ETCD_OP_PUT, "acquire success branch");
	else
	{
		const EtcdRangeResult *r = &res.responses[0].range;

		expect(res.responses[0].type == ETCD_OP_RANGE && r->n_kvs == 1, "acquire failure branch");
		snprintf(owner_value, 64, "%.*s", (int) r->kvs[0].value_len, r->kvs[0].value);
		*owner_create = r->kvs[0].create_revision;
	}
	etcd_txn_result_free(&res);
	return won;
}

/*
 * release
 *		Delete key if its create_revision is still token (the fencing
 *		token of the acquisition).
 */
static bool
release(EtcdClient *c, EtcdBytes key, int64_t token)
{
	EtcdCompare cmp = {.key = key, .target = ETCD_TARGET_CREATE, .result = ETCD_RESULT_EQUAL,
	.number = token};
	EtcdOp		del = {.type = ETCD_OP_DELETE, .delete_range = {.key = key, .prev_kv = true}};
	EtcdOp		get = {.type = ETCD_OP_RANGE, .range = {.key = key}};
	EtcdTxnRequest txn = {&cmp, 1, &del, 1, &get, 1};
	EtcdTxnResult res;
	bool		ok;

	expect_ok(etcd_txn(c, &txn, &res), "release txn");
	ok = res.succeeded;
	if (ok)
		expect(res.responses[0].type == ETCD_OP_DELETE &&
			   res.responses[0].delete_range.deleted == 1, "release deleted nothing");
	etcd_txn_result_free(&res);
	return ok;
}

/*
 * txn_lease_guarded
 *		Put target only if member is attached to lease (a LEASE compare),
 *		optionally also only if target is absent.
 */
static bool
txn_lease_guarded(EtcdClient *c, EtcdBytes member, int64_t lease, EtcdBytes target,
				  bool if_absent)
{
	EtcdCompare cmp[2] = {
		{.key = member, .target = ETCD_TARGET_LEASE, .result = ETCD_RESULT_EQUAL, .number = lease},
		{.key = target, .target = ETCD_TARGET_CREATE, .result = ETCD_RESULT_EQUAL, .number = 0},
	};
	EtcdOp		put = {.type = ETCD_OP_PUT, .put = {.key = target, .value = etcd_cstr("node-a")}};
	EtcdTxnRequest txn = {cmp, if_absent ? 2 : 1, &put, 1, NULL, 0};
	EtcdTxnResult res;
	bool		ok;

	expect_ok(etcd_txn(c, &txn, &res), "lease-guarded txn");
	ok = res.succeeded;
	etcd_txn_result_free(&res);
	return ok;
}

/*
 * scenario_lock
 *		Shard ownership as the coordinator will do it.
 */
static int
scenario_lock(void)
{
	EtcdClient *c = client_with(NULL);
	EtcdBytes	shard = key_of("lock/shards/7/owner", "", 0);
	EtcdBytes	shard6 = key_of("lock/shards/6/owner", "", 0);
	EtcdBytes	member = key_of("lock/members/node-a", "", 0);
	char		owner[64] = "";
	int64_t		owner_create = 0;
	int64_t		rev1;
	int64_t		rev2;
	int64_t		rev3;
	int64_t		unused;
	EtcdLease	lease;
	EtcdClientStats before;
	EtcdClientStats after;
	EtcdRangeResult rr;
	EtcdCompare unset = {.key = shard, .result = ETCD_RESULT_EQUAL};
	EtcdTxnRequest bad = {&unset, 1, NULL, 0, NULL, 0};
	EtcdTxnResult tres;

	delete_prefix(c, key_of("lock/", "", 0));

	/* put-if-absent: one winner; the loser learns the owner */
	expect(acquire(c, shard, "node-a", &rev1, owner, &owner_create), "node-a lost the acquire");
	expect(!acquire(c, shard, "node-b", &unused, owner, &owner_create), "node-b won too");
	expect(strcmp(owner, "node-a") == 0 && owner_create == rev1,
		   "owner hint %s@%" PRId64 ", expected node-a@%" PRId64, owner, owner_create, rev1);
	say("acquire_a=won acquire_b=lost owner_hint=%s token=%" PRId64, owner, rev1);

	/* release fenced on the acquisition revision */
	expect(release(c, shard, rev1), "fenced release refused");
	say("release_fenced=ok");

	/* ABA: acquire, force-release, re-acquire; the stale release must fail */
	expect(acquire(c, shard, "node-a", &rev2, owner, &owner_create), "second acquire");
	delete_prefix(c, shard);	/* an operator's force-release */
	expect(acquire(c, shard, "node-a", &rev3, owner, &owner_create), "re-acquire");
	expect(rev3 > rev2, "re-acquire revision");
	expect(!release(c, shard, rev2), "stale release (token %" PRId64 ") deleted the key of token %"
		   PRId64, rev2, rev3);
	rr = get_key(c, shard);
	expect(rr.n_kvs == 1 && rr.kvs[0].create_revision == rev3, "owner gone after stale release");
	etcd_range_result_free(&rr);
	say("stale_release=refused");
	expect(release(c, shard, rev3), "current release refused");

	/* LEASE compares on a member key */
	expect_ok(etcd_lease_grant(c, 10, 0, &lease), "grant");
	put_bytes(c, member, etcd_cstr("{}"), lease.id);
	expect(txn_lease_guarded(c, member, lease.id, shard6, false), "LEASE == mine failed");
	expect(!txn_lease_guarded(c, member, lease.id + 1, shard6, false), "LEASE == other succeeded");
	expect(!txn_lease_guarded(c, member, lease.id, shard6, true), "absent AND lease succeeded");
	expect_ok(etcd_lease_revoke(c, lease.id), "revoke");
	expect(!txn_lease_guarded(c, member, lease.id, shard6, false), "LEASE compare after revoke");
	say("lease_compare=ok");

	/* an unset compare target is refused locally, before any request */
	etcd_client_stats(c, &before);
	expect_kind(etcd_txn(c, &bad, &tres), ETCD_INVALID, "unset compare target");
	etcd_client_stats(c, &after);
	expect(after.requests == before.requests, "an invalid txn was sent");

	delete_prefix(c, key_of("lock/", "", 0));
	say("lock=ok checks=%d", checks);
	etcd_client_free(c);
	return 0;
}

/* ----------------------------------------------------------------------
 * lease: grant, keepalive, timetolive, revoke
 * ---------------------------------------------------------------------- */

/*
 * scenario_lease
 *		The lease calls and their "gone" answers.
 */
static int
scenario_lease(void)
{
	EtcdClient *c = client_with(NULL);
	EtcdLease	l;
	EtcdLease	k;
	EtcdLease	chosen;
	EtcdPutRequest preq = {.key = key_of("lease/orphan", "", 0), .value = etcd_cstr("x"),
	.lease = INT64_C(0x7ee1000000000001)};
	EtcdPutResult pres;
	int64_t		id = INT64_C(0x51100000) + getpid();

	expect_ok(etcd_lease_grant(c, 10, 0, &l), "grant");
	expect(l.id > 0 && l.ttl == 10, "grant: id %" PRId64 " ttl %" PRId64, l.id, l.ttl);
	expect_ok(etcd_lease_keepalive(c, l.id, &k), "keepalive");
	expect(k.ttl == 10 && k.id == l.id, "keepalive ttl %" PRId64, k.ttl);
	say("grant_ttl=%" PRId64 " keepalive_ttl=%" PRId64, l.ttl, k.ttl);
	expect_ok(etcd_lease_timetolive(c, l.id, &k), "timetolive");
	expect(k.granted_ttl == 10 && k.ttl > 0 && k.ttl <= 10, "timetolive %" PRId64 "/%" PRId64,
		   k.ttl, k.granted_ttl);

	/* a client-chosen ID, and that ID again */
	expect_ok(etcd_lease_grant(c, 5, id, &chosen), "grant chosen ID");
	expect(chosen.id == id, "chosen ID %" PRId64 " came back as %" PRId64, id, chosen.id);
	expect_kind(etcd_lease_grant(c, 5, id, &chosen), ETCD_PRECONDITION, "duplicate lease ID");
	expect_ok(etcd_lease_revoke(c, id), "revoke chosen");

	/* a put with an unknown lease */
	expect_kind(etcd_put(c, &preq, &pres), ETCD_NOT_FOUND, "put with unknown lease");

	/* revoke; a keepalive then answers TTL 0 with success */
	expect_ok(etcd_lease_revoke(c, l.id), "revoke");
	expect_ok(etcd_lease_keepalive(c, l.id, &k), "keepalive after revoke");
	expect(k.ttl == 0, "keepalive after revoke: ttl %" PRId64, k.ttl);
	say("keepalive_after_revoke_ttl=%" PRId64, k.ttl);
	expect_ok(etcd_lease_timetolive(c, l.id, &k), "timetolive after revoke");
	expect(k.ttl == -1, "timetolive after revoke: %" PRId64, k.ttl);
	expect_kind(etcd_lease_revoke(c, l.id), ETCD_NOT_FOUND, "second revoke");

	/* the server raises a TTL below its minimum */
	expect_ok(etcd_lease_grant(c, 1, 0, &l), "grant ttl 1");
	expect(l.ttl >= 1, "ttl 1 granted as %" PRId64, l.ttl);
	say("ttl1_granted=%" PRId64, l.ttl);
	expect_ok(etcd_lease_revoke(c, l.id), "revoke ttl 1");

	say("lease=ok checks=%d", checks);
	etcd_client_free(c);
	return 0;
}

/* collects watch events for the scenarios */
typedef struct Seen
{
	int			n;
	EtcdWatchEventType type[64];
	int64_t		rev[64];
	size_t		value_len[64];
	char		value[64][16];
	bool		has_prev[64];
	char		prev[64][16];
	size_t		prev_len[64];
	int			created;
	int			progress;
	int64_t		progress_rev;
} Seen;

/*
 * collect
 *		Watch callback: remember the first 64 events.
 */
static void
collect(const EtcdWatchEvent *ev, void *arg)
{
	Seen	   *s = arg;
	int			i = s->n;

	if (ev->type == ETCD_EVENT_CREATED)
	{
		s->created++;
		return;
	}
	if (ev->type == ETCD_EVENT_PROGRESS)
	{
		s->progress++;
		s->progress_rev = ev->revision;
		return;
	}
	if (i >= 64)
		return;
	s->type[i] = ev->type;
	s->rev[i] = ev->revision;
	s->value_len[i] = ev->kv->value_len;
	snprintf(s->value[i], 16, "%.*s", (int) ev->kv->value_len, ev->kv->value);
	s->has_prev[i] = ev->prev_kv != NULL;
	s->prev_len[i] = ev->prev_kv ? ev->prev_kv->value_len : 0;
	if (ev->prev_kv)
		snprintf(s->prev[i], 16, "%.*s", (int) ev->prev_kv->value_len, ev->prev_kv->value);
	s->n++;
}

/*
 * poll_until
 *		Poll w until cond(seen) holds, the watch ends or ms pass.
 */
static bool
poll_until(EtcdWatch *w, Seen *s, int ms, bool (*cond) (const Seen *, int64_t), int64_t arg)
{
	int64_t		deadline = now_ms() + ms;

	while (!cond(s, arg))
	{
		if (etcd_watch_state(w) != ETCD_WATCH_RUNNING || now_ms() > deadline)
			return false;
		etcd_watch_poll(w, 100, collect, s);
	}
	return true;
}

/*
 * has_created
 *		poll_until condition: the watch is established.
 */
static bool
has_created(const Seen *s, int64_t n)
{
	return s->created >= (n > 0 ? n : 1);
}

/*
 * has_events
 *		poll_until condition: at least n events.
 */
static bool
has_events(const Seen *s, int64_t n)
{
	return s->n >= n;
}

/*
 * has_progress
 *		poll_until condition: at least n progress notifications.
 */
static bool
has_progress(const Seen *s, int64_t n)
{
	return s->progress >= n;
}

/*
 * watch_key
 *		Start a watch (must succeed).
 */
static EtcdWatch *
watch_key(EtcdClient *c, EtcdBytes key, bool prefix, int64_t from, int silence, int bufsize)
{
	EtcdWatchRequest req = {.key = key, .prefix = prefix, .start_revision = from,
	.silence_limit_ms = silence, .recv_buffer_size = bufsize};
	EtcdStatus	st;
	EtcdWatch  *w = etcd_watch_start(c, &req, &st);

	expect_ok(st, "watch_start");
	return w;
}

/*
 * scenario_lease_expire
 *		A TTL-2 lease left alone expires, its key disappears, and a watch
 *		sees the DELETE.
 */
static int
scenario_lease_expire(void)
{
	EtcdClient *c = client_with(NULL);
	EtcdBytes	key = key_of("expire/member", "", 0);
	EtcdLease	l;
	EtcdLease	k;
	Seen		seen = {0};
	EtcdWatch  *w;
	int64_t		t0;
	int64_t		gone_ms = -1;

	w = watch_key(c, key, false, 0, 0, 0);
	expect(poll_until(w, &seen, 3000, has_created, 0), "watch not created");
	expect_ok(etcd_lease_grant(c, 2, 0, &l), "grant ttl 2");
	t0 = now_ms();
	put_bytes(c, key, etcd_cstr("alive"), l.id);
	while (now_ms() - t0 < 8000)
	{
		EtcdRangeResult rr = get_key(c, key);
		bool		gone = rr.n_kvs == 0;

		etcd_range_result_free(&rr);
		if (gone)
		{
			gone_ms = now_ms() - t0;
			break;
		}
		etcd_watch_poll(w, 100, collect, &seen);
	}
	expect(gone_ms >= 0, "the key of a TTL-%" PRId64 " lease outlived 8 s", l.ttl);
	expect(gone_ms >= 1500, "the key vanished after %" PRId64 " ms, before its TTL", gone_ms);
	expect(poll_until(w, &seen, 2000, has_events, 2), "no DELETE event");
	expect(seen.type[0] == ETCD_EVENT_PUT && seen.type[1] == ETCD_EVENT_DELETE &&
		   seen.has_prev[1] && strcmp(seen.prev[1], "alive") == 0, "expiry events");
	expect_ok(etcd_lease_keepalive(c, l.id, &k), "keepalive of an expired lease");
	expect(k.ttl == 0, "keepalive of an expired lease: ttl %" PRId64, k.ttl);
	say("granted_ttl=%" PRId64 " expired_after_ms=%" PRId64 " delete_event=1 keepalive_ttl=%" PRId64,
		l.ttl, gone_ms, k.ttl);
	etcd_watch_free(w);
	etcd_client_free(c);
	return 0;
}

/* ----------------------------------------------------------------------
 * watch: events, prev_kv, split messages, progress, resume, compaction
 * ---------------------------------------------------------------------- */

/*
 * outer_poll
 *		Like poll_until, but the way a background worker would do it: wait
 *		in poll() on the watch's descriptors, then poll the watch with
 *		timeout 0.
 */
static bool
outer_poll(EtcdWatch *w, Seen *s, int ms, bool (*cond) (const Seen *, int64_t), int64_t arg)
{
	int64_t		deadline = now_ms() + ms;

	while (!cond(s, arg))
	{
		struct pollfd fds[8];
		int			timeout;
		int			n;

		if (etcd_watch_state(w) != ETCD_WATCH_RUNNING || now_ms() > deadline)
			return false;
		n = etcd_watch_wait_fds(w, fds, 8, &timeout);
		expect(timeout >= 0 && timeout <= 1000, "wait_fds timeout %d", timeout);
		if (timeout > 200)
			timeout = 200;
		poll(fds, (nfds_t) n, timeout);
		etcd_watch_poll(w, 0, collect, s);
	}
	return true;
}

/*
 * delete_key
 *		Delete one key; returns the revision of the deletion.
 */
static int64_t
delete_key(EtcdClient *c, EtcdBytes key)
{
	EtcdDeleteRequest req = {.key = key};
	EtcdDeleteResult res;
	int64_t		rev;

	expect_ok(etcd_delete_range(c, &req, &res), "delete");
	rev = res.header.revision;
	etcd_delete_result_free(&res);
	return rev;
}

/*
 * scenario_watch
 *		See the section title; run last on a single member (it compacts).
 */
static int
scenario_watch(void)
{
	EtcdClient *c = client_with(NULL);
	EtcdBytes	base = key_of("watch/", "", 0);
	EtcdBytes	ka = key_of("watch/a", "", 0);
	EtcdBytes	kbig = key_of("watch/big", "", 0);
	char		big[6000];
	Seen		s1 = {0};
	Seen		s2 = {0};
	Seen		s3 = {0};
	EtcdWatch  *w;
	EtcdWatchStats ws;
	EtcdRangeRequest old = {.key = ka};
	EtcdRangeResult rr;
	int64_t		r1,
				r2,
				r3,
				r4,
				r5;
	size_t		i;

	for (i = 0; i < sizeof(big); i++)
		big[i] = (char) (i % 251);
	delete_prefix(c, base);

	/* a prefix watch, driven from an outer poll() loop, 1 KB receive buffer */
	w = watch_key(c, base, true, 0, 5000, 1024);
	expect(outer_poll(w, &s1, 3000, has_created, 0), "watch not created: %s",
		   etcd_watch_status(w)->message);
	r1 = put_bytes(c, ka, etcd_cstr("1"), 0);
	r2 = put_bytes(c, ka, etcd_cstr("2"), 0);
	r3 = delete_key(c, ka);
	r4 = put_bytes(c, kbig, etcd_bytes(big, sizeof(big)), 0);
	r5 = put_bytes(c, kbig, etcd_bytes(big, sizeof(big)), 0);
	expect(outer_poll(w, &s1, 5000, has_events, 5), "only %d of 5 events arrived (%s)", s1.n,
		   etcd_watch_state_name(etcd_watch_state(w)));
	expect(s1.type[0] == ETCD_EVENT_PUT && s1.rev[0] == r1 && strcmp(s1.value[0], "1") == 0 &&
		   !s1.has_prev[0], "first PUT");
	expect(s1.type[1] == ETCD_EVENT_PUT && s1.rev[1] == r2 && s1.has_prev[1] &&
		   strcmp(s1.prev[1], "1") == 0, "second PUT with prev_kv");
	expect(s1.type[2] == ETCD_EVENT_DELETE && s1.rev[2] == r3 && s1.has_prev[2] &&
		   strcmp(s1.prev[2], "2") == 0, "DELETE with prev_kv");
	expect(s1.type[3] == ETCD_EVENT_PUT && s1.rev[3] == r4 && s1.value_len[3] == sizeof(big),
		   "big PUT");
	expect(s1.type[4] == ETCD_EVENT_PUT && s1.rev[4] == r5 && s1.value_len[4] == sizeof(big) &&
		   s1.prev_len[4] == sizeof(big), "big PUT with big prev_kv");
	etcd_watch_stats(w, &ws);
	expect(ws.max_message_parts >= 4, "the big message spanned only %" PRIu64 " callbacks",
		   ws.max_message_parts);
	say("events=%d put_no_type=1 delete_prev_kv=%s write_callbacks=%" PRIu64
		" max_message_parts=%" PRIu64, s1.n, s1.prev[2], ws.write_callbacks, ws.max_message_parts);

	/* an idle watch gets progress notifications (small server interval) */
	expect(poll_until(w, &s1, 5000, has_progress, 1), "no progress notification in 5 s");
	expect(s1.progress_rev >= r5, "progress revision %" PRId64 " < %" PRId64, s1.progress_rev, r5);
	expect(etcd_watch_last_revision(w) == r5, "last revision %" PRId64 ", expected %" PRId64,
		   etcd_watch_last_revision(w), r5);
	say("progress=%d progress_revision=%" PRId64 " last_revision=%" PRId64, s1.progress,
		s1.progress_rev, etcd_watch_last_revision(w));
	etcd_watch_free(w);

	/* resume from r2: r2..r5 are replayed */
	w = watch_key(c, base, true, r2, 5000, 0);
	expect(poll_until(w, &s2, 5000, has_events, 4), "resume: %d events", s2.n);
	expect(s2.rev[0] == r2 && s2.rev[1] == r3 && s2.type[1] == ETCD_EVENT_DELETE &&
		   s2.rev[3] == r5, "resumed events");
	expect(etcd_watch_last_revision(w) == r5, "resumed last revision");
	say("resumed_from=%" PRId64 " resumed_events=%d first=%" PRId64, r2, s2.n, s2.rev[0]);
	etcd_watch_free(w);

	/* compact past the resume point: the resumed watch is canceled */
	expect_ok(etcd_compact(c, r4, true), "compaction");
	w = watch_key(c, base, true, r2, 5000, 0);
	poll_until(w, &s3, 5000, has_events, 1000);
	expect(etcd_watch_state(w) == ETCD_WATCH_CANCELED, "after compaction the watch is %s",
		   etcd_watch_state_name(etcd_watch_state(w)));
	expect(etcd_watch_compact_revision(w) == r4, "compact_revision %" PRId64 ", expected %" PRId64,
		   etcd_watch_compact_revision(w), r4);
	expect(s3.n == 0, "events from a compacted revision");
	say("end=%s compact_revision=%" PRId64, etcd_watch_state_name(etcd_watch_state(w)),
		etcd_watch_compact_revision(w));
	etcd_watch_free(w);
	old.revision = r1;
	expect_kind(etcd_range(c, &old, &rr), ETCD_INVALID, "range at a compacted revision");

	delete_prefix(c, base);
	say("watch=ok checks=%d", checks);
	etcd_client_free(c);
	return 0;
}

/* ----------------------------------------------------------------------
 * Fault scenarios (the TAP test injects the faults)
 * ---------------------------------------------------------------------- */

/* counts events for watch-end */
/*
 * count_event
 *		Watch callback of watch-end: count by type, announce creation.
 */
static void
count_event(const EtcdWatchEvent *ev, void *arg)
{
	int		   *counts = arg;

	counts[ev->type]++;
	if (ev->type == ETCD_EVENT_CREATED)
		say("watch=created revision=%" PRId64, ev->revision);
}

/*
 * scenario_watch_end
 *		Watch the prefix on the first endpoint until the watch ends (or
 *		max_ms pass) and report how: end=<state> plus the status and the
 *		wall-clock time of the end, for the TAP test to judge.
 */
static int
scenario_watch_end(int silence_ms, int max_ms)
{
	EtcdClient *c = client_with(NULL);
	int			counts[4] = {0};
	EtcdWatch  *w = watch_key(c, key_of("", "", 0), true, 0, silence_ms, 0);
	int64_t		deadline = now_ms() + max_ms;
	EtcdWatchState state;

	while ((state = etcd_watch_poll(w, 100, count_event, counts)) == ETCD_WATCH_RUNNING &&
		   now_ms() < deadline)
		;
	say("end=%s ended_at_ms=%" PRId64 " progress=%d events=%d", etcd_watch_state_name(state),
		wall_ms(), counts[ETCD_EVENT_PROGRESS], counts[ETCD_EVENT_PUT] + counts[ETCD_EVENT_DELETE]);
	status_line("status", *etcd_watch_status(w));
	say("endpoint_after=%s", etcd_client_endpoint(c));
	etcd_watch_free(w);
	etcd_client_free(c);
	return state == ETCD_WATCH_RUNNING ? 2 : 0;
}

/*
 * timed_put, timed_get
 *		One call, printed with its elapsed time and where the client went.
 */
static EtcdStatus
timed_put(EtcdClient *c, const char *name, EtcdBytes key, EtcdBytes value)
{
	EtcdPutRequest req = {.key = key, .value = value};
	EtcdPutResult res;
	int64_t		t0 = now_ms();
	EtcdStatus	st = etcd_put(c, &req, &res);

	etcd_put_result_free(&res);
	say("call=%s elapsed_ms=%" PRId64 " endpoint_after=%s", name, now_ms() - t0,
		etcd_client_endpoint(c));
	status_line(name, st);
	return st;
}

/*
 * timed_get
 *		A single-key read, timed and printed; checks the value if want is given.
 */
static EtcdStatus
timed_get(EtcdClient *c, const char *name, EtcdBytes key, EtcdBytes want)
{
	EtcdRangeRequest req = {.key = key};
	EtcdRangeResult res;
	int64_t		t0 = now_ms();
	EtcdStatus	st = etcd_range(c, &req, &res);

	say("call=%s elapsed_ms=%" PRId64 " endpoint_after=%s", name, now_ms() - t0,
		etcd_client_endpoint(c));
	status_line(name, st);
	if (st.kind == ETCD_OK && want.data)
		expect(res.n_kvs == 1 && bytes_eq(res.kvs[0].value, res.kvs[0].value_len, want),
			   "%s read something else", name);
	etcd_range_result_free(&res);
	return st;
}

/*
 * scenario_failover
 *		With the first endpoint dead: a read, a write and a read succeed,
 *		only the first call moves on (the client remembers the endpoint
 *		that worked), and each stays within the call budget.
 */
static int
scenario_failover(void)
{
	EtcdClient *c = client_with(NULL);
	EtcdBytes	key = key_of("failover", "", 0);
	char		value[32];
	int64_t		t0 = now_ms();
	EtcdClientStats stats;
	const char *first;

	snprintf(value, sizeof(value), "v%d", (int) getpid());
	first = strdup(etcd_client_endpoint(c));
	expect_ok(timed_get(c, "get1", key, etcd_bytes(NULL, 0)), "get through failover");
	expect_ok(timed_put(c, "put", key, etcd_cstr(value)), "put after failover");
	expect_ok(timed_get(c, "get2", key, etcd_cstr(value)), "get after failover");
	etcd_client_stats(c, &stats);
	expect(strcmp(first, etcd_client_endpoint(c)) != 0, "still on the dead endpoint");
	expect(stats.failovers == 1, "%" PRIu64 " failovers, expected 1", stats.failovers);
	say("failovers=%" PRIu64 " requests=%" PRIu64 " total_ms=%" PRId64, stats.failovers,
		stats.requests, now_ms() - t0);
	free((void *) first);
	etcd_client_free(c);
	return 0;
}

/*
 * scenario_hung
 *		With the first endpoint hung (SIGSTOP): a read fails over after the
 *		request timeout; on a fresh client a write times out as
 *		indeterminate (it may be applied once the member resumes) and the
 *		next write goes to the next endpoint.  Printed, judged by the test.
 */
static int
scenario_hung(void)
{
	EtcdClient *c = client_with(NULL);
	EtcdBytes	key = key_of("hung", "", 0);

	timed_get(c, "get", key, etcd_bytes(NULL, 0));
	etcd_client_free(c);
	c = client_with(NULL);
	timed_put(c, "put1", key, etcd_cstr("1"));
	timed_put(c, "put2", key, etcd_cstr("2"));
	etcd_client_free(c);
	return 0;
}

/*
 * scenario_put
 *		One put (repeated until it succeeds, for at most until_ms), printed.
 */
static int
scenario_put(int until_ms)
{
	EtcdClient *c = client_with(NULL);
	int64_t		deadline = now_ms() + until_ms;
	int			tries = 0;
	EtcdStatus	st;

	do
	{
		if (tries++ > 0)
			sleep_ms(200);
		st = timed_put(c, "put", key_of("put", "", 0), etcd_cstr("x"));
	} while (st.kind != ETCD_OK && now_ms() < deadline);
	say("tries=%d", tries);
	etcd_client_free(c);
	return 0;
}

/* ----------------------------------------------------------------------
 * Cluster information, auth, TLS
 * ---------------------------------------------------------------------- */

/*
 * scenario_status
 *		Per endpoint: which member answers and whom it takes for leader;
 *		then the member list and the version check.
 */
static int
scenario_status(void)
{
	char	   *list = strdup(config.endpoints);
	char	   *save = NULL;
	char	   *ep;
	EtcdClient *c;
	EtcdMemberList ml;
	EtcdVersion v;
	char	   *joined;
	size_t		i;

	for (ep = strtok_r(list, ",", &save); ep; ep = strtok_r(NULL, ",", &save))
	{
		EtcdConfig	one = config;
		EtcdServerStatus ss;

		one.endpoints = ep;
		c = client_with(&one);
		expect_ok(etcd_server_status(c, &ss), "status");
		say("status endpoint=%s member_id=%" PRIu64 " leader=%" PRIu64 " version=%s", ep,
			ss.header.member_id, ss.leader, ss.version);
		etcd_client_free(c);
	}
	free(list);
	c = client_with(NULL);
	expect_ok(etcd_member_list(c, &ml), "member list");
	for (i = 0; i < ml.n_members; i++)
		say("member id=%" PRIu64 " name=%s client_url=%s", ml.members[i].id, ml.members[i].name,
			ml.members[i].n_client_urls ? ml.members[i].client_urls[0] : "");
	joined = etcd_member_list_endpoints(&ml);
	expect_ok(etcd_client_set_endpoints(c, joined), "set_endpoints from member list");
	say("members=%zu endpoints=%s", ml.n_members, joined);
	free(joined);
	etcd_member_list_free(&ml);
	expect_ok(etcd_version_check(c, &v), "version check");
	say("version server=%s cluster=%s", v.server, v.cluster);
	etcd_client_free(c);
	return 0;
}

/*
 * scenario_auth_enable
 *		What "etcdctl user add root; role add root; user grant-role root
 *		root; auth enable" does, through the gateway.
 */
static int
scenario_auth_enable(const char *password)
{
	EtcdClient *c = client_with(NULL);

	expect_ok(etcd_user_add(c, "root", password), "user add root");
	expect_ok(etcd_role_add(c, "root"), "role add root");
	expect_ok(etcd_user_grant_role(c, "root", "root"), "grant root");
	expect_ok(etcd_auth_enable(c), "auth enable");
	say("auth=enabled");
	etcd_client_free(c);
	return 0;
}

/*
 * scenario_auth
 *		Against an etcd with auth enabled (and a short token TTL): the
 *		configured user works, survives its token's expiry by
 *		re-authenticating once, and others are refused with ETCD_AUTH.
 *		Disables auth at the end.
 */
static int
scenario_auth(int token_wait_ms)
{
	EtcdClient *c = client_with(NULL);
	EtcdClient *anon;
	EtcdClient *wrong;
	EtcdConfig	cfg = config;
	EtcdClientStats stats;
	EtcdBytes	key = key_of("auth", "", 0);
	EtcdWatchRequest wreq = {.key = key};
	EtcdWatch  *w;
	EtcdStatus	st;
	Seen		seen = {0};

	expect(config.user != NULL, "auth needs -u and -p");
	expect_ok(timed_put(c, "put", key, etcd_cstr("secret")), "authenticated put");
	expect_ok(timed_get(c, "get", key, etcd_cstr("secret")), "authenticated get");
	etcd_client_stats(c, &stats);
	expect(stats.authentications == 1, "%" PRIu64 " authentications", stats.authentications);

	/* let the token expire: the next call re-authenticates once */
	sleep_ms(token_wait_ms);
	expect_ok(timed_get(c, "get_after_expiry", key, etcd_cstr("secret")), "get after expiry");
	etcd_client_stats(c, &stats);
	expect(stats.authentications == 2, "%" PRIu64 " authentications after expiry",
		   stats.authentications);
	say("authentications=%" PRIu64, stats.authentications);

	cfg.user = cfg.password = NULL;
	anon = client_with(&cfg);
	expect_kind(timed_put(anon, "anon_put", key, etcd_cstr("x")), ETCD_AUTH, "anonymous put");
	w = etcd_watch_start(anon, &wreq, &st);
	expect_ok(st, "anonymous watch start");
	poll_until(w, &seen, 3000, has_events, 1000);
	expect(etcd_watch_state(w) == ETCD_WATCH_CANCELED && etcd_watch_status(w)->kind == ETCD_AUTH,
		   "anonymous watch ended as %s/%s", etcd_watch_state_name(etcd_watch_state(w)),
		   etcd_kind_name(etcd_watch_status(w)->kind));
	say("anon_watch=%s anon_watch.kind=%s", etcd_watch_state_name(etcd_watch_state(w)),
		etcd_kind_name(etcd_watch_status(w)->kind));
	etcd_watch_free(w);

	cfg.user = config.user;
	cfg.password = "wrong password";
	wrong = client_with(&cfg);
	expect_kind(timed_get(wrong, "wrong_get", key, etcd_bytes(NULL, 0)), ETCD_AUTH,
				"wrong password");

	expect_ok(etcd_auth_disable(c), "auth disable");
	expect_ok(timed_get(anon, "anon_get_after_disable", key, etcd_cstr("secret")),
			  "anonymous get after auth disable");
	say("auth=ok checks=%d", checks);
	etcd_client_free(wrong);
	etcd_client_free(anon);
	etcd_client_free(c);
	return 0;
}

/*
 * scenario_tls
 *		Over https with the CA and a client certificate: calls and a watch
 *		work; without the CA, or without the client certificate, they are
 *		refused as unavailable.
 */
static int
scenario_tls(void)
{
	EtcdClient *c = client_with(NULL);
	EtcdConfig	cfg = config;
	EtcdClient *other;
	EtcdVersion v;
	EtcdBytes	key = key_of("tls", "", 0);
	EtcdWatch  *w;
	Seen		seen = {0};
	EtcdStatus	st;

	expect(strncmp(config.endpoints, "https://", 8) == 0, "tls needs an https endpoint");
	expect_ok(etcd_version_check(c, &v), "version over TLS");
	w = watch_key(c, key, false, 0, 0, 0);
	expect(poll_until(w, &seen, 3000, has_created, 0), "TLS watch not created");
	expect_ok(timed_put(c, "put", key, etcd_cstr("over tls")), "put over TLS");
	expect_ok(timed_get(c, "get", key, etcd_cstr("over tls")), "get over TLS");
	expect(poll_until(w, &seen, 3000, has_events, 1) && strcmp(seen.value[0], "over tls") == 0,
		   "TLS watch event");
	etcd_watch_free(w);
	say("tls=ok server=%s", v.server);

	cfg.ca_file = NULL;
	other = client_with(&cfg);
	st = timed_put(other, "no_ca_put", key, etcd_cstr("x"));
	expect(st.kind == ETCD_UNAVAILABLE && st.curl_code != 0 && !st.indeterminate,
		   "without the CA: %s (curl %d, indeterminate %d)", etcd_kind_name(st.kind),
		   st.curl_code, st.indeterminate);
	etcd_client_free(other);

	cfg = config;
	cfg.cert_file = cfg.key_file = NULL;
	other = client_with(&cfg);
	st = timed_get(other, "no_cert_get", key, etcd_bytes(NULL, 0));
	expect(st.kind == ETCD_UNAVAILABLE && st.curl_code != 0,
		   "without a client certificate: %s (curl %d)", etcd_kind_name(st.kind), st.curl_code);
	etcd_client_free(other);
	etcd_client_free(c);
	return 0;
}

/*
 * usage
 *		The command line, on stderr.
 */
static void
usage(void)
{
	fprintf(stderr,
			"usage: etcd_client_test [-e URLS] [-u USER -p PW] [--ca F --cert F --key F]\n"
			"                        [-t MS] [-P PREFIX] SCENARIO [ARGS]\n"
			"scenarios:\n"
			"  unit                       offline checks (encoders, decoders, base64...)\n"
			"  kv | lock | lease | lease-expire | watch\n"
			"                             single-member scenarios (watch compacts: run it last)\n"
			"  watch-end SILENCE_MS MAX_MS  watch until it ends; print how\n"
			"  failover                   first endpoint dead: calls must fail over\n"
			"  hung                       first endpoint hung: print what happens\n"
			"  put UNTIL_MS               put until it succeeds or UNTIL_MS pass\n"
			"  status                     members, leader, version\n"
			"  auth-enable ROOT_PASSWORD  create root and enable auth\n"
			"  auth TOKEN_WAIT_MS         auth checks (needs -u/-p); disables auth\n"
			"  tls                        TLS checks (needs an https endpoint and files)\n");
	exit(64);
}

/*
 * main
 *		Parse the options and run one scenario.
 */
int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"ca", required_argument, NULL, 'C'},
		{"cert", required_argument, NULL, 'T'},
		{"key", required_argument, NULL, 'K'},
		{NULL, 0, NULL, 0}
	};
	const char *cmd;
	int			opt;
	int			rc;

	signal(SIGPIPE, SIG_IGN);	/* libcurl leaves it to us (NOSIGNAL) */
	config.endpoints = "http://127.0.0.1:2379";
	while ((opt = getopt_long(argc, argv, "+e:u:p:t:P:", longopts, NULL)) != -1)
	{
		switch (opt)
		{
			case 'e':
				config.endpoints = optarg;
				break;
			case 'u':
				config.user = optarg;
				break;
			case 'p':
				config.password = optarg;
				break;
			case 't':
				config.request_timeout_ms = atoi(optarg);
				break;
			case 'P':
				prefix = optarg;
				break;
			case 'C':
				config.ca_file = optarg;
				break;
			case 'T':
				config.cert_file = optarg;
				break;
			case 'K':
				config.key_file = optarg;
				break;
			default:
				usage();
		}
	}
	if (optind >= argc)
		usage();
	cmd = argv[optind];
	expect_ok(etcd_global_init(), "global init");
#define ARG(i) (optind + (i) < argc ? atoi(argv[optind + (i)]) : (usage(), 0))
	if (strcmp(cmd, "unit") == 0)
		rc = scenario_unit();
	else if (strcmp(cmd, "kv") == 0)
		rc = scenario_kv();
	else if (strcmp(cmd, "lock") == 0)
		rc = scenario_lock();
	else if (strcmp(cmd, "lease") == 0)
		rc = scenario_lease();
	else if (strcmp(cmd, "lease-expire") == 0)
		rc = scenario_lease_expire();
	else if (strcmp(cmd, "watch") == 0)
		rc = scenario_watch();
	else if (strcmp(cmd, "watch-end") == 0)
		rc = scenario_watch_end(ARG(1), ARG(2));
	else if (strcmp(cmd, "failover") == 0)
		rc = scenario_failover();
	else if (strcmp(cmd, "hung") == 0)
		rc = scenario_hung();
	else if (strcmp(cmd, "put") == 0)
		rc = scenario_put(ARG(1));
	else if (strcmp(cmd, "status") == 0)
		rc = scenario_status();
	else if (strcmp(cmd, "auth-enable") == 0)
		rc = optind + 1 < argc ? scenario_auth_enable(argv[optind + 1]) : (usage(), 1);
	else if (strcmp(cmd, "auth") == 0)
		rc = scenario_auth(ARG(1));
	else if (strcmp(cmd, "tls") == 0)
		rc = scenario_tls();
	else
	{
		usage();
		rc = 64;
	}
	etcd_global_cleanup();
	return rc;
}
