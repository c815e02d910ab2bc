/* util.c: clock, sleeping and fatal errors for silo-loadgen. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loadgen.h"

/* now_sec: the monotonic clock in seconds. */
double
now_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* die: print a message to stderr and exit with status 1. */
void
die(const char *fmt,...)
{
	va_list		ap;

	fputs("silo-loadgen: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* note_stop: a worker hit the time cap; record the latest such moment in
 * *t_stopped (shared by the workers, guarded by mu). */
void
note_stop(pthread_mutex_t *mu, double *t_stopped)
{
	pthread_mutex_lock(mu);
	if (now_sec() > *t_stopped)
		*t_stopped = now_sec();
	pthread_mutex_unlock(mu);
}

/* sleep_ms: sleep for ms milliseconds. */
void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* sleep_until: sleep until the monotonic clock reads t seconds (an absolute
 * deadline, so a paced loop does not drift by its own overhead). */
void
sleep_until(double t)
{
	struct timespec ts;

	if (t <= 0)
		return;
	ts.tv_sec = (time_t) t;
	ts.tv_nsec = (long) ((t - (double) ts.tv_sec) * 1e9);
	if (ts.tv_nsec >= 1000000000L)
	{
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
		;
}

/* xcalloc: calloc that dies when memory runs out. */
void *
xcalloc(size_t n, size_t size)
{
	void	   *p = calloc(n ? n : 1, size ? size : 1);

	if (p == NULL)
		die("out of memory");
	return p;
}

/* json_long: the integer value of "key" in a flat JSON object's text (as
 * jsonb prints it: "key": value), or dflt when absent; enough for the
 * payloads this program writes itself. */
long
json_long(const char *json, const char *key, long dflt)
{
	char		pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(json, pat);
	if (p == NULL)
		return dflt;
	p += strlen(pat);
	while (*p == ' ')
		p++;
	return strtol(p, NULL, 10);
}

/* parse_list: a comma-separated list of non-negative integers into out
 * (at most max); returns how many, or dies on a malformed list. */
int
parse_list(const char *s, long *out, int max)
{
	int			n = 0;

	while (*s != '\0')
	{
		char	   *end;
		long		v = strtol(s, &end, 10);

		if (end == s || v < 0 || n >= max || (*end != ',' && *end != '\0'))
			die("bad list: %s", s);
		out[n++] = v;
		s = *end == ',' ? end + 1 : end;
	}
	return n;
}
