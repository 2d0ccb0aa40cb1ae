/*
 * hist — a log-linear histogram of durations in nanoseconds, for the wait
 * times of dlock-bench.
 *
 * Values below 128 ns have a bucket each; above, every power of two is cut
 * into 64 buckets of equal width, so a bucket is at most 1/64 (1.6 %) of
 * its value wide, from 1 ns up to about 2^46 ns (19 hours; larger values
 * land in the last bucket). The exact count, sum, minimum and maximum are
 * kept beside the buckets. A histogram is a fixed-size struct: it owns no
 * memory and can be zeroed to reset it.
 */
#ifndef DLOCK_BENCH_HIST_H
#define DLOCK_BENCH_HIST_H

#include <stdint.h>

#define HIST_SUB_BITS	6			/* 64 buckets per power of two */
#define HIST_SUB	(1u << HIST_SUB_BITS)
#define HIST_MAX_SHIFT	40			/* values up to 2^(40+7) ns */
#define HIST_BUCKETS	(2 * HIST_SUB + HIST_MAX_SHIFT * HIST_SUB)

/* Counts of durations by bucket, with their exact sum and extremes. */
struct hist {
	uint64_t count[HIST_BUCKETS];	/* values per bucket */
	uint64_t n;			/* values recorded */
	uint64_t sum;			/* their sum, ns (saturates) */
	uint64_t min;			/* the smallest; meaningless while n is 0 */
	uint64_t max;			/* the largest */
};

/* Forget every value. */
void hist_reset(struct hist *h);

/* Record one duration of ns nanoseconds. */
void hist_record(struct hist *h, uint64_t ns);

/* The bucket that holds ns. */
unsigned hist_bucket(uint64_t ns);

/* The smallest and largest value bucket i holds. */
void hist_bounds(unsigned i, uint64_t *lo, uint64_t *hi);

/*
 * The q-quantile (0 <= q <= 1) of the values: the middle of the bucket that
 * holds the ceil(q * n)-th smallest value, kept within [min, max]. q = 1
 * gives the exact maximum; 0 while the histogram is empty.
 */
uint64_t hist_quantile(const struct hist *h, double q);

#endif
