/*-------------------------------------------------------------------------
 *
 * etcd_util.c
 *	  Small helpers of the etcd client: statuses and their mapping from
 *	  gRPC codes and libcurl errors, the clock, prefix ends, standard
 *	  base64 with padding, and growable byte buffers.
 *
 * The gateway carries keys and values as proto3 "bytes", which JSON spells
 * in standard base64 with '=' padding; it answers HTTP 400 to unpadded or
 * URL-safe input, so the encoder emits exactly that form and the decoder
 * accepts nothing else.
 *
 * src/etcd/etcd_util.c
 *
 *-------------------------------------------------------------------------
 */
#include "etcd_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * etcd_now_ms
 *		Monotonic milliseconds; every deadline is computed from it.
 */
int64_t
etcd_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * etcd_status_ok
 *		A success status.
 */
EtcdStatus
etcd_status_ok(void)
{
	EtcdStatus	st;

	memset(&st, 0, sizeof(st));
	return st;
}

/*
 * etcd_status_set
 *		Set a status's kind and message (other fields are left alone).
 */
void
etcd_status_set(EtcdStatus *st, EtcdStatusKind kind, const char *fmt,...)
{
	va_list		ap;

	st->kind = kind;
	va_start(ap, fmt);
	vsnprintf(st->message, sizeof(st->message), fmt, ap);
	va_end(ap);
}

/*
 * etcd_kind_name
 *		Stable names of the status kinds, for logs and the test driver.
 */
const char *
etcd_kind_name(EtcdStatusKind kind)
{
	switch (kind)
	{
		case ETCD_OK:
			return "ok";
		case ETCD_NOT_FOUND:
			return "not_found";
		case ETCD_PRECONDITION:
			return "precondition";
		case ETCD_INVALID:
			return "invalid";
		case ETCD_UNAVAILABLE:
			return "unavailable";
		case ETCD_TIMEOUT:
			return "timeout";
		case ETCD_AUTH:
			return "auth";
		case ETCD_PROTOCOL:
			return "protocol";
		case ETCD_UNSUPPORTED:
			return "unsupported";
		case ETCD_NO_MEMORY:
			return "no_memory";
	}
	return "unknown";
}

/*
 * etcd_kind_from_grpc
 *		Classify an error answer by its gRPC code, else by its HTTP status.
 *		Authentication failures come back as InvalidArgument (wrong
 *		password, missing token) and are recognised by their message.
 */
EtcdStatusKind
etcd_kind_from_grpc(int grpc_code, long http_status, const char *message)
{
	if (strstr(message, "authentication failed") != NULL ||
		strstr(message, "user name is empty") != NULL ||
		strstr(message, "invalid auth token") != NULL)
		return ETCD_AUTH;
	switch (grpc_code)
	{
		case 3:					/* InvalidArgument */
		case 11:				/* OutOfRange */
			return ETCD_INVALID;
		case 4:					/* DeadlineExceeded */
			return ETCD_TIMEOUT;
		case 5:					/* NotFound */
			return ETCD_NOT_FOUND;
		case 6:					/* AlreadyExists */
		case 9:					/* FailedPrecondition */
			return ETCD_PRECONDITION;
		case 7:					/* PermissionDenied */
		case 16:				/* Unauthenticated */
			return ETCD_AUTH;
		case 1:					/* Canceled */
		case 8:					/* ResourceExhausted (too many requests) */
		case 10:				/* Aborted */
		case 14:				/* Unavailable */
			return ETCD_UNAVAILABLE;
		case 2:					/* Unknown */
		case 12:				/* Unimplemented */
		case 13:				/* Internal */
			return ETCD_PROTOCOL;
		default:
			break;
	}
	if (http_status == 401 || http_status == 403)
		return ETCD_AUTH;
	if (http_status == 408 || http_status == 504)
		return ETCD_TIMEOUT;
	if (http_status >= 500)
		return ETCD_UNAVAILABLE;
	return ETCD_PROTOCOL;
}

/*
 * etcd_status_from_curl
 *		A transfer that failed before any HTTP answer.
 */
void
etcd_status_from_curl(EtcdStatus *st, CURLcode rc, const char *errbuf)
{
	st->curl_code = (int) rc;
	st->http_status = 0;
	st->grpc_code = 0;
	etcd_status_set(st,
					rc == CURLE_OPERATION_TIMEDOUT ? ETCD_TIMEOUT :
					rc == CURLE_OUT_OF_MEMORY ? ETCD_NO_MEMORY :
					rc == CURLE_WRITE_ERROR ? ETCD_PROTOCOL : ETCD_UNAVAILABLE,
					"%s", errbuf && errbuf[0] ? errbuf : curl_easy_strerror(rc));
}

/*
 * etcd_cstr
 *		A C string as bytes.
 */
EtcdBytes
etcd_cstr(const char *s)
{
	return etcd_bytes(s, s ? strlen(s) : 0);
}

/*
 * etcd_prefix_end
 *		The exclusive end of a prefix's range; see etcd.h.
 */
size_t
etcd_prefix_end(const void *prefix, size_t len, char *out)
{
	const unsigned char *p = prefix;

	while (len > 0 && p[len - 1] == 0xff)
		len--;
	if (len == 0)
	{
		out[0] = '\0';
		return 1;
	}
	memcpy(out, p, len);
	out[len - 1] = (char) (p[len - 1] + 1);
	return len;
}

static const char b64_alphabet[] =
"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/*
 * etcd_b64_encode
 *		Encode len bytes; returns a malloc'd NUL-terminated string, or NULL
 *		when out of memory.
 */
char *
etcd_b64_encode(const void *data, size_t len)
{
	const unsigned char *in = data;
	size_t		out_len = (len + 2) / 3 * 4;
	char	   *out = malloc(out_len + 1);
	char	   *p = out;
	size_t		i;

	if (out == NULL)
		return NULL;
	for (i = 0; i + 2 < len; i += 3)
	{
		uint32_t	v = ((uint32_t) in[i] << 16) | ((uint32_t) in[i + 1] << 8) | in[i + 2];

		*p++ = b64_alphabet[(v >> 18) & 0x3f];
		*p++ = b64_alphabet[(v >> 12) & 0x3f];
		*p++ = b64_alphabet[(v >> 6) & 0x3f];
		*p++ = b64_alphabet[v & 0x3f];
	}
	if (i < len)
	{
		uint32_t	v = (uint32_t) in[i] << 16;

		if (i + 1 < len)
			v |= (uint32_t) in[i + 1] << 8;
		*p++ = b64_alphabet[(v >> 18) & 0x3f];
		*p++ = b64_alphabet[(v >> 12) & 0x3f];
		*p++ = (i + 1 < len) ? b64_alphabet[(v >> 6) & 0x3f] : '=';
		*p++ = '=';
	}
	*p = '\0';
	return out;
}

/*
 * b64_value
 *		The 6-bit value of one alphabet character, or -1.
 */
static int
b64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/*
 * etcd_b64_decode
 *		Decode padded standard base64.  On success *out is a malloc'd buffer
 *		of *out_len bytes plus a terminating NUL; false on malformed input
 *		(or out of memory, which the caller cannot tell apart and reports as
 *		a bad answer -- both are fatal to the call anyway).
 */
bool
etcd_b64_decode(const char *in, size_t len, char **out, size_t *out_len)
{
	size_t		pad = 0;
	size_t		n;
	unsigned char *buf;
	size_t		i;
	size_t		o = 0;

	*out = NULL;
	*out_len = 0;
	if (len % 4 != 0)
		return false;
	if (len > 0 && in[len - 1] == '=')
		pad++;
	if (len > 1 && in[len - 2] == '=')
		pad++;
	n = len / 4 * 3 - pad;
	buf = malloc(n + 1);
	if (buf == NULL)
		return false;
	for (i = 0; i < len; i += 4)
	{
		int			v[4];
		int			k;
		bool		last = (i + 4 == len);

		for (k = 0; k < 4; k++)
		{
			v[k] = b64_value((unsigned char) in[i + k]);
			/* '=' only as the last one or two characters */
			if (v[k] < 0 && !(last && in[i + k] == '=' && k >= 4 - (int) pad))
			{
				free(buf);
				return false;
			}
		}
		buf[o++] = (unsigned char) ((v[0] << 2) | (v[1] >> 4));
		if (o < n)
			buf[o++] = (unsigned char) (((v[1] & 0xf) << 4) | (v[2] >> 2));
		if (o < n)
			buf[o++] = (unsigned char) (((v[2] & 0x3) << 6) | v[3]);
	}
	buf[n] = '\0';
	*out = (char *) buf;
	*out_len = n;
	return true;
}

/*
 * etcd_buf_append
 *		Append len bytes, growing geometrically, and keep a NUL after them;
 *		false when out of memory or past ETCD_MAX_BODY.
 */
bool
etcd_buf_append(EtcdBuf *buf, const void *data, size_t len)
{
	if (len > ETCD_MAX_BODY || buf->len > ETCD_MAX_BODY - len)
		return false;
	if (buf->len + len + 1 > buf->cap)
	{
		size_t		cap = buf->cap ? buf->cap : 1024;
		char	   *p;

		while (cap < buf->len + len + 1)
			cap *= 2;
		p = realloc(buf->data, cap);
		if (p == NULL)
			return false;
		buf->data = p;
		buf->cap = cap;
	}
	if (len > 0)
		memcpy(buf->data + buf->len, data, len);
	buf->len += len;
	buf->data[buf->len] = '\0';
	return true;
}

/*
 * etcd_buf_consume
 *		Drop the first n bytes (a framed message that has been handled).
 */
void
etcd_buf_consume(EtcdBuf *buf, size_t n)
{
	if (n >= buf->len)
		buf->len = 0;
	else
	{
		memmove(buf->data, buf->data + n, buf->len - n);
		buf->len -= n;
	}
	if (buf->data)
		buf->data[buf->len] = '\0';
}

/*
 * etcd_buf_free
 *		Release the buffer's memory and leave it empty.
 */
void
etcd_buf_free(EtcdBuf *buf)
{
	free(buf->data);
	buf->data = NULL;
	buf->len = 0;
	buf->cap = 0;
}
