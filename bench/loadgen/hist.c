/*
 * hist.c: a sig-fig histogram.  A value keeps its 3 most significant
 * decimal digits: values below 1000 are exact, larger ones fall in a bucket
 * of width 10^k, so every recorded value is within 0.1% of its bucket
 * (the precision HdrHistogram calls "3 significant digits").  Values are
 * in microseconds here.
 */
#include <string.h>

#include "loadgen.h"

/* hist_init: empty the histogram. */
void
hist_init(lg_hist *h)
{
	memset(h, 0, sizeof(*h));
}

/* hist_record: count one value. */
void
hist_record(lg_hist *h, uint64_t value)
{
	int			decade = 0;

	if (value > h->max)
		h->max = value;
	h->sum += (double) value;

	while (value >= 1000 && decade < HIST_DECADES - 1)
	{
		value /= 10;
		decade++;
	}
	if (value >= 1000)
		value = 999;			/* beyond the range: clamp */
	h->counts[decade][value]++;
	h->total++;
}

/* hist_new: a new empty histogram on the heap (one is ~100 kB, too big for
 * a thread's stack). */
lg_hist *
hist_new(void)
{
	return xcalloc(1, sizeof(lg_hist));
}

/* hist_merge: add src's counts to dst (per-thread histograms are merged at
 * the end of a run, so recording needs no lock). */
void
hist_merge(lg_hist *dst, const lg_hist *src)
{
	for (int d = 0; d < HIST_DECADES; d++)
		for (int m = 0; m < 1000; m++)
			dst->counts[d][m] += src->counts[d][m];
	dst->total += src->total;
	dst->sum += src->sum;
	if (src->max > dst->max)
		dst->max = src->max;
}

/* hist_to_result: p50, p99, p99.9 and max of a histogram of microseconds,
 * in milliseconds, into a result; the mean goes into its extra fields. */
void
hist_to_result(const lg_hist *h, lg_result *r)
{
	if (h->total == 0)
		return;
	/* a bucket's top can lie above the largest value: report that instead */
	r->p50_ms = (hist_percentile(h, 50) < h->max ? hist_percentile(h, 50) : h->max) / 1000.0;
	r->p99_ms = (hist_percentile(h, 99) < h->max ? hist_percentile(h, 99) : h->max) / 1000.0;
	r->p999_ms = (hist_percentile(h, 99.9) < h->max ? hist_percentile(h, 99.9) : h->max) / 1000.0;
	r->max_ms = h->max / 1000.0;
	result_add(r, ",\"mean_ms\":%.3f,\"samples\":%llu",
			   h->sum / h->total / 1000.0, (unsigned long long) h->total);
}

/* hist_percentile: the value at or below which pct percent of the counts lie
 * (the top of that bucket); 0 for an empty histogram. */
uint64_t
hist_percentile(const lg_hist *h, double pct)
{
	uint64_t	want,
				seen = 0;

	if (h->total == 0)
		return 0;
	want = (uint64_t) (pct / 100.0 * h->total + 0.999999);
	if (want < 1)
		want = 1;
	for (int d = 0; d < HIST_DECADES; d++)
	{
		uint64_t	scale = 1;

		for (int i = 0; i < d; i++)
			scale *= 10;
		for (int m = (d == 0 ? 0 : 100); m < 1000; m++)
		{
			seen += h->counts[d][m];
			if (seen >= want)
				return (uint64_t) m * scale + (scale - 1);
		}
	}
	return 0;
}
