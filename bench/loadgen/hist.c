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
