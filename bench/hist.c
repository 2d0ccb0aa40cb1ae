/*
 * hist — a log-linear histogram of durations (see hist.h).
 */
#include "hist.h"

#include <string.h>

void
hist_reset(struct hist *h)
{
	memset(h, 0, sizeof(*h));
}

unsigned
hist_bucket(uint64_t ns)
{
	if (ns < 2 * HIST_SUB)
		return (unsigned)ns;
	unsigned msb = 63u - (unsigned)__builtin_clzll(ns);
	unsigned shift = msb - HIST_SUB_BITS;		/* >= 1 */
	if (shift > HIST_MAX_SHIFT)
		return HIST_BUCKETS - 1;
	unsigned sub = (unsigned)(ns >> shift);		/* HIST_SUB .. 2 * HIST_SUB - 1 */
	return 2 * HIST_SUB + (shift - 1) * HIST_SUB + (sub - HIST_SUB);
}

void
hist_bounds(unsigned i, uint64_t *lo, uint64_t *hi)
{
	if (i < 2 * HIST_SUB) {
		*lo = *hi = i;
		return;
	}
	unsigned j = i - 2 * HIST_SUB;
	unsigned shift = j / HIST_SUB + 1;
	uint64_t sub = j % HIST_SUB + HIST_SUB;
	*lo = sub << shift;
	*hi = ((sub + 1) << shift) - 1;
}

void
hist_record(struct hist *h, uint64_t ns)
{
	h->count[hist_bucket(ns)]++;
	if (h->n == 0 || ns < h->min)
		h->min = ns;
	if (ns > h->max)
		h->max = ns;
	h->n++;
	h->sum = h->sum + ns < h->sum ? UINT64_MAX : h->sum + ns;
}

uint64_t
hist_quantile(const struct hist *h, double q)
{
	if (h->n == 0)
		return 0;
	if (q >= 1.0)
		return h->max;
	if (q <= 0.0)
		return h->min;
	uint64_t rank = (uint64_t)(q * (double)h->n);
	if ((double)rank < q * (double)h->n)
		rank++;			/* ceil */
	if (rank == 0)
		rank = 1;
	uint64_t seen = 0;
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		seen += h->count[i];
		if (seen >= rank) {
			uint64_t lo, hi;
			hist_bounds(i, &lo, &hi);
			uint64_t mid = lo + (hi - lo) / 2;
			if (mid < h->min)
				mid = h->min;
			if (mid > h->max)
				mid = h->max;
			return mid;
		}
	}
	return h->max;
}
