/* util.c: clock, sleeping and fatal errors for silo-loadgen. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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

/* sleep_ms: sleep for ms milliseconds. */
void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}
