/*-------------------------------------------------------------------------
 *
 * etcd.c
 *	  The etcd client: configuration, endpoints with failover, the unary
 *	  HTTP transport over one reused libcurl easy handle, authentication,
 *	  and the mapping of every failure onto an EtcdStatus.
 *
 * A unary call (etcd_call) is a loop of attempts bounded both in number
 * (max_attempts) and in time (total_timeout_ms); each attempt is one POST
 * with a timeout of at most request_timeout_ms.  An attempt that fails for
 * a reason another member might not share (connection refused, timeout,
 * HTTP 5xx, no leader) moves the client to the next endpoint, which stays
 * current afterwards.  Whether the call is then repeated depends on whether
 * repeating is safe; see the header's "Retries and failover".
 *
 * src/etcd/etcd.c
 *
 *-------------------------------------------------------------------------
 */
#include "etcd_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_REQUEST_TIMEOUT_MS 1500
#define DEFAULT_CONNECT_TIMEOUT_MS 1000

/*
 * etcd_global_init
 *		libcurl's process-wide setup; the library keeps no globals itself.
 */
EtcdStatus
etcd_global_init(void)
{
	EtcdStatus	st = etcd_status_ok();
	CURLcode	rc = curl_global_init(CURL_GLOBAL_DEFAULT);

	if (rc != CURLE_OK)
		etcd_status_from_curl(&st, rc, NULL);
	return st;
}

/*
 * etcd_global_cleanup
 *		libcurl's process-wide teardown, after the last client is freed.
 */
void
etcd_global_cleanup(void)
{
	curl_global_cleanup();
}

/*
 * parse_endpoints
 *		Split a comma-separated list into malloc'd URLs without trailing
 *		slashes; only http:// and https:// are accepted.
 */
static bool
parse_endpoints(const char *list, char **out, int *n, EtcdStatus *st)
{
	const char *p = list;

	*n = 0;
	if (list == NULL)
	{
		etcd_status_set(st, ETCD_INVALID, "no endpoints given");
		return false;
	}
	while (*p)
	{
		const char *start;
		size_t		len;

		while (*p == ',' || isspace((unsigned char) *p))
			p++;
		start = p;
		while (*p && *p != ',')
			p++;
		len = (size_t) (p - start);
		while (len > 0 && (isspace((unsigned char) start[len - 1]) || start[len - 1] == '/'))
			len--;
		if (len == 0)
			continue;
		if (*n == ETCD_MAX_ENDPOINTS)
		{
			etcd_status_set(st, ETCD_INVALID, "more than %d endpoints", ETCD_MAX_ENDPOINTS);
			return false;
		}
		if (!((len > 7 && strncmp(start, "http://", 7) == 0) ||
			  (len > 8 && strncmp(start, "https://", 8) == 0)))
		{
			etcd_status_set(st, ETCD_INVALID, "endpoint \"%.*s\" is not an http:// or https:// URL",
							(int) (len > 100 ? 100 : len), start);
			return false;
		}
		if ((out[*n] = strndup(start, len)) == NULL)
		{
			etcd_status_set(st, ETCD_NO_MEMORY, "out of memory");
			return false;
		}
		(*n)++;
	}
	if (*n == 0)
	{
		etcd_status_set(st, ETCD_INVALID, "no endpoints given");
		return false;
	}
	return true;
}

/*
 * dup_opt
 *		strdup of an optional string; false only when out of memory.
 */
static bool
dup_opt(const char *s, char **out)
{
	*out = NULL;
	if (s == NULL || s[0] == '\0')
		return true;
	*out = strdup(s);
	return *out != NULL;
}

/*
 * etcd_client_create
 *		Validate the configuration and build a client; no I/O yet.
 */
EtcdStatus
etcd_client_create(const EtcdConfig *config, EtcdClient **out)
{
	EtcdStatus	st = etcd_status_ok();
	EtcdClient *c;

	*out = NULL;
	c = calloc(1, sizeof(EtcdClient));
	if (c == NULL)
	{
		etcd_status_set(&st, ETCD_NO_MEMORY, "out of memory");
		return st;
	}
	c->request_timeout_ms = config->request_timeout_ms ? config->request_timeout_ms
		: DEFAULT_REQUEST_TIMEOUT_MS;
	c->connect_timeout_ms = config->connect_timeout_ms ? config->connect_timeout_ms
		: DEFAULT_CONNECT_TIMEOUT_MS;
	if (c->connect_timeout_ms > c->request_timeout_ms)
		c->connect_timeout_ms = c->request_timeout_ms;
	c->total_timeout_ms = config->total_timeout_ms ? config->total_timeout_ms
		: 2 * c->request_timeout_ms;
	if (c->request_timeout_ms < 50 || c->request_timeout_ms > 5000 ||
		c->connect_timeout_ms < 10 || c->total_timeout_ms < c->request_timeout_ms ||
		config->max_attempts < 0)
		etcd_status_set(&st, ETCD_INVALID,
						"timeouts out of range (request 50..5000 ms, total >= request)");
	else if ((config->user == NULL) != (config->password == NULL))
		etcd_status_set(&st, ETCD_INVALID, "user and password go together");
	else if (parse_endpoints(config->endpoints, c->endpoints, &c->n_endpoints, &st))
	{
		c->max_attempts = config->max_attempts ? config->max_attempts
			: (c->n_endpoints + 1 > 2 ? c->n_endpoints + 1 : 2);
		if (!dup_opt(config->user, &c->user) ||
			!dup_opt(config->password, &c->password) ||
			!dup_opt(config->ca_file, &c->ca_file) ||
			!dup_opt(config->cert_file, &c->cert_file) ||
			!dup_opt(config->key_file, &c->key_file) ||
			(c->easy = curl_easy_init()) == NULL)
			etcd_status_set(&st, ETCD_NO_MEMORY, "out of memory");
	}
	if (st.kind != ETCD_OK)
	{
		etcd_client_free(c);
		return st;
	}
	*out = c;
	return st;
}

/*
 * etcd_client_free
 *		Free a client (its watches must be freed first).
 */
void
etcd_client_free(EtcdClient *c)
{
	int			i;

	if (c == NULL)
		return;
	for (i = 0; i < c->n_endpoints; i++)
		free(c->endpoints[i]);
	free(c->user);
	if (c->password)
		memset(c->password, 0, strlen(c->password));
	free(c->password);
	free(c->token);
	free(c->ca_file);
	free(c->cert_file);
	free(c->key_file);
	if (c->easy)
		curl_easy_cleanup(c->easy);
	free(c);
}

/*
 * etcd_client_set_endpoints
 *		Replace the endpoint list; the first new endpoint becomes current.
 */
EtcdStatus
etcd_client_set_endpoints(EtcdClient *c, const char *endpoints)
{
	EtcdStatus	st = etcd_status_ok();
	char	   *parsed[ETCD_MAX_ENDPOINTS];
	int			n = 0;
	int			i;

	if (!parse_endpoints(endpoints, parsed, &n, &st))
	{
		for (i = 0; i < n; i++)
			free(parsed[i]);
		return st;
	}
	for (i = 0; i < c->n_endpoints; i++)
		free(c->endpoints[i]);
	memcpy(c->endpoints, parsed, sizeof(char *) * n);
	c->n_endpoints = n;
	c->current = 0;
	return st;
}

/*
 * etcd_client_endpoint
 *		The endpoint the next call tries first.
 */
const char *
etcd_client_endpoint(const EtcdClient *c)
{
	return c->endpoints[c->current];
}

/*
 * etcd_client_stats
 *		Copy the client's counters.
 */
void
etcd_client_stats(const EtcdClient *c, EtcdClientStats *out)
{
	*out = c->stats;
}

/*
 * etcd_endpoint_failed
 *		Move on from an endpoint that just failed, unless another failure
 *		has already moved the client elsewhere.
 */
void
etcd_endpoint_failed(EtcdClient *c, const char *endpoint)
{
	if (c->n_endpoints > 1 && strcmp(c->endpoints[c->current], endpoint) == 0)
	{
		c->current = (c->current + 1) % c->n_endpoints;
		c->stats.failovers++;
	}
}

/*
 * etcd_set_common_options
 *		Options every transfer shares: no signals, HTTP(S) only, no
 *		redirects, TLS files, TCP keepalive.
 */
void
etcd_set_common_options(EtcdClient *c, CURL *easy)
{
	curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
#else
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(easy, CURLOPT_TCP_KEEPIDLE, 5L);
	curl_easy_setopt(easy, CURLOPT_TCP_KEEPINTVL, 2L);
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, (long) c->connect_timeout_ms);
	if (c->ca_file)
		curl_easy_setopt(easy, CURLOPT_CAINFO, c->ca_file);
	if (c->cert_file)
		curl_easy_setopt(easy, CURLOPT_SSLCERT, c->cert_file);
	if (c->key_file)
		curl_easy_setopt(easy, CURLOPT_SSLKEY, c->key_file);
}

/*
 * etcd_request_headers
 *		JSON content type, no "Expect: 100-continue" round trip, the auth
 *		token if any, and for watches the hasleader demand.  NULL when out
 *		of memory.
 */
struct curl_slist *
etcd_request_headers(EtcdClient *c, bool watch)
{
	struct curl_slist *h = NULL;
	struct curl_slist *t;

	if ((t = curl_slist_append(h, "Content-Type: application/json")) == NULL)
		return NULL;
	h = t;
	if ((t = curl_slist_append(h, "Expect:")) == NULL)
		goto fail;
	if (watch && (t = curl_slist_append(h, "Grpc-Metadata-hasleader: true")) == NULL)
		goto fail;
	if (c->token)
	{
		size_t		n = strlen(c->token) + sizeof("Authorization: ");
		char	   *line = malloc(n);

		if (line == NULL)
			goto fail;
		snprintf(line, n, "Authorization: %s", c->token);
		t = curl_slist_append(h, line);
		free(line);
		if (t == NULL)
			goto fail;
	}
	return h;
fail:
	curl_slist_free_all(h);
	return NULL;
}

/*
 * write_body
 *		libcurl write callback of unary calls: collect the body (a short
 *		count makes libcurl fail the transfer with CURLE_WRITE_ERROR).
 */
static size_t
write_body(char *ptr, size_t size, size_t nmemb, void *arg)
{
	return etcd_buf_append((EtcdBuf *) arg, ptr, size * nmemb) ? size * nmemb : 0;
}

/*
 * attempt
 *		One HTTP request to one endpoint.  True on HTTP 200 (and no error
 *		object in a streamed answer); otherwise st describes the failure and
 *		*sent says whether any of the request may have reached the server.
 */
static bool
attempt(EtcdClient *c, const char *endpoint, const char *path, const char *body,
		int flags, long timeout_ms, EtcdBuf *resp, EtcdStatus *st, bool *sent)
{
	char		url[ETCD_ENDPOINT_SIZE + 64];
	char		errbuf[CURL_ERROR_SIZE];
	struct curl_slist *headers;
	CURLcode	rc;
	long		http = 0;
	long		request_size = 0;

	*sent = false;
	resp->len = 0;
	snprintf(url, sizeof(url), "%s%s", endpoint, path);
	snprintf(st->endpoint, sizeof(st->endpoint), "%s", endpoint);
	headers = etcd_request_headers(c, false);
	if (headers == NULL)
	{
		etcd_status_set(st, ETCD_NO_MEMORY, "out of memory");
		return false;
	}
	curl_easy_reset(c->easy);
	etcd_set_common_options(c, c->easy);
	errbuf[0] = '\0';
	curl_easy_setopt(c->easy, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(c->easy, CURLOPT_URL, url);
	curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(c->easy, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, write_body);
	curl_easy_setopt(c->easy, CURLOPT_WRITEDATA, resp);
	if (flags & ETCD_CALL_GET)
		curl_easy_setopt(c->easy, CURLOPT_HTTPGET, 1L);
	else
	{
		curl_easy_setopt(c->easy, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c->easy, CURLOPT_POSTFIELDSIZE, (long) strlen(body));
	}
	c->stats.requests++;
	rc = curl_easy_perform(c->easy);
	curl_easy_getinfo(c->easy, CURLINFO_REQUEST_SIZE, &request_size);
	curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &http);
	curl_slist_free_all(headers);
	*sent = request_size > 0;
	if (rc != CURLE_OK)
	{
		etcd_status_from_curl(st, rc, errbuf);
		return false;
	}
	if (http != 200)
	{
		etcd_status_set(st, ETCD_PROTOCOL, "HTTP %ld", http);
		etcdj_decode_error(resp->data, resp->len, http, st);
		return false;
	}
	if ((flags & ETCD_CALL_STREAM) && etcdj_stream_error(resp->data, resp->len, st))
		return false;
	return true;
}

/*
 * not_applied
 *		Did etcd say it could not even start on the request?  Then a write
 *		may safely be repeated elsewhere.
 */
static bool
not_applied(const EtcdStatus *st)
{
	return st->kind == ETCD_UNAVAILABLE && st->http_status != 0 &&
		(strstr(st->message, "no leader") != NULL ||
		 strstr(st->message, "too many requests") != NULL);
}

/*
 * call_until
 *		etcd_call with an explicit deadline (authentication shares it).
 */
static bool
call_until(EtcdClient *c, const char *path, const char *body, int flags,
		   int64_t deadline, EtcdBuf *resp, EtcdStatus *st)
{
	bool		reauthenticated = false;
	int			tries = 0;

	*st = etcd_status_ok();
	while (tries < c->max_attempts)
	{
		const char *endpoint;
		int64_t		left = deadline - etcd_now_ms();
		bool		sent;
		bool		transport;

		if (left <= 0)
		{
			/* out of time: report the last failure, or the timeout itself */
			if (tries == 0)
				etcd_status_set(st, ETCD_TIMEOUT, "no time left for the request");
			break;
		}
		if (c->user && c->token == NULL && !(flags & ETCD_CALL_NO_AUTH))
		{
			if (!etcd_ensure_token(c, deadline, st))
				return false;
			if ((left = deadline - etcd_now_ms()) <= 0)
			{
				etcd_status_set(st, ETCD_TIMEOUT, "no time left after authenticating");
				break;
			}
		}
		endpoint = c->endpoints[c->current];
		tries++;
		*st = etcd_status_ok();
		if (attempt(c, endpoint, path, body, flags,
					left < c->request_timeout_ms ? (long) left : (long) c->request_timeout_ms,
					resp, st, &sent))
			return true;

		/* a rejected token: get a new one, once per call */
		if (st->kind == ETCD_AUTH && st->grpc_code == 16 && c->user &&
			!(flags & ETCD_CALL_NO_AUTH) && !reauthenticated)
		{
			free(c->token);
			c->token = NULL;
			reauthenticated = true;
			tries--;
			continue;
		}
		transport = st->http_status == 0;
		if (st->kind != ETCD_UNAVAILABLE && st->kind != ETCD_TIMEOUT)
			return false;		/* a definite answer */
		etcd_endpoint_failed(c, endpoint);
		if (!(flags & ETCD_CALL_READ) && !(transport && !sent) && !not_applied(st))
		{
			st->indeterminate = true;
			return false;
		}
	}
	return false;
}

/*
 * etcd_call
 *		One unary call with retries and failover within the client's budget;
 *		true with the 200 body in resp, else false with st set.
 */
bool
etcd_call(EtcdClient *c, const char *path, const char *body, int flags,
		  EtcdBuf *resp, EtcdStatus *st)
{
	return call_until(c, path, body, flags, etcd_now_ms() + c->total_timeout_ms, resp, st);
}

/*
 * etcd_ensure_token
 *		Authenticate (user and password) when the client has no token yet.
 *		Every failure of the authentication itself is an ETCD_AUTH error
 *		unless etcd could not be reached at all.  If etcd has auth disabled,
 *		the call goes ahead without a token (and the next one asks again).
 */
bool
etcd_ensure_token(EtcdClient *c, int64_t deadline, EtcdStatus *st)
{
	static const char *const names[] = {"name", "password"};
	const char *values[2];
	EtcdBuf		resp = {0};
	char	   *body;
	bool		ok;

	if (c->user == NULL || c->token != NULL)
		return true;
	values[0] = c->user;
	values[1] = c->password;
	body = etcdj_strings(st, 2, names, values);
	if (body == NULL)
		return false;
	ok = call_until(c, "/v3/auth/authenticate", body, ETCD_CALL_READ | ETCD_CALL_NO_AUTH,
					deadline, &resp, st) &&
		etcdj_decode_token(&resp, &c->token, st);
	memset(body, 0, strlen(body));
	free(body);
	etcd_buf_free(&resp);
	if (ok)
		c->stats.authentications++;
	else if (strstr(st->message, "authentication is not enabled") != NULL)
	{
		/* credentials for an etcd without auth: go on without a token */
		*st = etcd_status_ok();
		return true;
	}
	else if (st->kind != ETCD_UNAVAILABLE && st->kind != ETCD_TIMEOUT &&
			 st->kind != ETCD_NO_MEMORY)
		st->kind = ETCD_AUTH;
	return ok;
}
