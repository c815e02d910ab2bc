/*-------------------------------------------------------------------------
 *
 * util.c
 *	  Small helpers of the reference worker: the clock, logging, copying
 *	  strings and growable string buffers.
 *
 * Out-of-memory is fatal everywhere in the worker, so these helpers exit
 * instead of returning an error the callers would have to check.
 *
 * tools/worker/util.c
 *
 *-------------------------------------------------------------------------
 */
#include "silo_worker.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * now_ms
 *		Monotonic time in milliseconds; every deadline is computed from it.
 */
int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * log_msg
 *		Print one diagnostic line to stderr, filtered by --quiet/--verbose.
 */
void
log_msg(LogLevel level, const char *fmt,...)
{
	va_list		ap;

	if ((level == LOG_VERBOSE && !opt.verbose) ||
		(level == LOG_INFO && opt.quiet))
		return;
	fputs(level == LOG_ERROR ? "silo-worker: error: " :
		  level == LOG_WARNING ? "silo-worker: warning: " : "silo-worker: ",
		  stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/*
 * msglen
 *		Length of the first line of a libpq message, for "%.*s"; the rest
 *		(hints, context) would only clutter a one-line log.
 */
int
msglen(const char *msg)
{
	size_t		len = strcspn(msg, "\n");

	while (len > 0 && msg[len - 1] == ' ')
		len--;
	return (int) len;
}

/*
 * xstrdup
 *		strdup() that exits on out-of-memory and maps NULL to NULL, so lease
 *		columns that may be SQL NULL can be copied without special cases.
 */
char *
xstrdup(const char *s)
{
	char	   *r;

	if (s == NULL)
		return NULL;
	if ((r = strdup(s)) == NULL)
	{
		log_msg(LOG_ERROR, "out of memory");
		exit(1);
	}
	return r;
}

/*
 * sb_append
 *		Append n bytes to a growable string buffer, keeping it terminated.
 */
void
sb_append(StrBuf *sb, const char *s, size_t n)
{
	if (sb->len + n + 1 > sb->cap)
	{
		size_t		cap = sb->cap ? sb->cap : 256;
		char	   *d;

		while (cap < sb->len + n + 1)
			cap *= 2;
		if ((d = realloc(sb->data, cap)) == NULL)
		{
			log_msg(LOG_ERROR, "out of memory");
			exit(1);
		}
		sb->data = d;
		sb->cap = cap;
	}
	memcpy(sb->data + sb->len, s, n);
	sb->len += n;
	sb->data[sb->len] = '\0';
}

/*
 * sb_puts
 *		Append a C string; shorthand used when building SQL parameters.
 */
void
sb_puts(StrBuf *sb, const char *s)
{
	sb_append(sb, s, strlen(s));
}

/*
 * sb_free
 *		Release a buffer's memory and make it empty again.
 */
void
sb_free(StrBuf *sb)
{
	free(sb->data);
	sb->data = NULL;
	sb->len = sb->cap = 0;
}
