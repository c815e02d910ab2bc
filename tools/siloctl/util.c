/*-------------------------------------------------------------------------
 *
 * util.c
 *	  siloctl's ways out (errors, usage errors, exit codes) and small
 *	  helpers: memory that cannot fail, formatted strings, sleeps.
 *
 * tools/siloctl/util.c
 *
 *-------------------------------------------------------------------------
 */
#include "siloctl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ----------------------------------------------------------------------
 * Ways out
 * ---------------------------------------------------------------------- */

/*
 * fail_full
 *		Report a failure and exit: the message (with DETAIL and HINT lines)
 *		on stderr, and with --json an error document on stdout, so a script
 *		reading stdout always gets one JSON document.
 */
void
fail_full(int code, const char *sqlstate, const char *detail, const char *hint,
		  const char *fmt,...)
{
	va_list		ap;
	char	   *msg;

	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	va_end(ap);
	fflush(stdout);
	fprintf(stderr, "siloctl: %s", msg ? msg : "out of memory");
	if (sqlstate)
		fprintf(stderr, " (SQLSTATE %s)", sqlstate);
	fputc('\n', stderr);
	if (detail && *detail)
		fprintf(stderr, "DETAIL:  %s\n", detail);
	if (hint && *hint)
		fprintf(stderr, "HINT:  %s\n", hint);
	if (opt.json && code != EXIT_USAGE)
	{
		JsonValue  *doc = jv_object();
		JsonValue  *err = jv_object();

		jv_set(err, "message", jv_string(msg));
		jv_set(err, "sqlstate", jv_string(sqlstate));
		jv_set(err, "detail", jv_string(detail));
		jv_set(err, "hint", jv_string(hint));
		jv_set(err, "exit_code", jv_int(code));
		jv_set(doc, "error", err);
		jv_print(doc);
	}
	free(msg);
	exit(code);
}

/*
 * usage_error
 *		A mistake on the command line: say so, point at --help, exit 2.
 */
void
usage_error(const char *fmt,...)
{
	va_list		ap;

	fputs("siloctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry \"siloctl --help\" for more information.\n", stderr);
	exit(EXIT_USAGE);
}

/*
 * verbose
 *		A progress note on stderr, only with --verbose.
 */
void
verbose(const char *fmt,...)
{
	va_list		ap;

	if (!opt.verbose)
		return;
	fputs("siloctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/*
 * xmalloc, xrealloc, xstrdup, xasprintf
 *		Allocation that cannot fail: running out of memory ends siloctl.
 */
void *
xmalloc(size_t n)
{
	void	   *p = malloc(n ? n : 1);

	if (p == NULL)
	{
		fputs("siloctl: out of memory\n", stderr);
		exit(EXIT_FAILED);
	}
	return p;
}

void *
xrealloc(void *p, size_t n)
{
	void	   *q = realloc(p, n ? n : 1);

	if (q == NULL)
	{
		fputs("siloctl: out of memory\n", stderr);
		exit(EXIT_FAILED);
	}
	return q;
}

char *
xstrdup(const char *s)
{
	char	   *p = xmalloc(strlen(s) + 1);

	strcpy(p, s);
	return p;
}

char *
xasprintf(const char *fmt,...)
{
	va_list		ap;
	char	   *s;
	int			n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
	{
		fputs("siloctl: out of memory\n", stderr);
		exit(EXIT_FAILED);
	}
	return s;
}

/*
 * sleep_ms
 *		Sleep for ms milliseconds (a back-off), resuming after signals.
 */
void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

