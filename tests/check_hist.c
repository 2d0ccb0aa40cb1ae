/*
 * check_hist — unit tests of dlock-bench's wait-time histogram
 * (bench/hist.c): buckets cover every value without gaps, a bucket is at
 * most 1/64 of its value wide, quantiles against sorted samples, small
 * values exact.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "hist.h"
#include "suite.h"

START_TEST(hist_buckets_tile)
{
	uint64_t next = 0;

	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		uint64_t lo, hi;
		hist_bounds(i, &lo, &hi);
		ck_assert_uint_eq(lo, next);		/* no gap, no overlap */
		ck_assert_uint_ge(hi, lo);
		ck_assert_uint_eq(hist_bucket(lo), i);
		ck_assert_uint_eq(hist_bucket(hi), i);
		if (lo >= 128)
			ck_assert_uint_le((hi - lo + 1) * 64, lo);	/* at most 1/64 wide */
		next = hi + 1;
	}
	ck_assert_uint_eq(hist_bucket(UINT64_MAX), HIST_BUCKETS - 1);
}
END_TEST

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

START_TEST(hist_quantiles)
{
	static struct hist h;
	enum { N = 10000 };
	static uint64_t v[N];
	uint64_t s = 88172645463325252ull, sum = 0;

	hist_reset(&h);
	ck_assert_uint_eq(hist_quantile(&h, 0.5), 0);
	for (int i = 0; i < N; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		v[i] = s % 50000000;		/* up to 50 ms */
		hist_record(&h, v[i]);
		sum += v[i];
	}
	qsort(v, N, sizeof(v[0]), cmp_u64);
	ck_assert_uint_eq(h.n, N);
	ck_assert_uint_eq(h.sum, sum);
	ck_assert_uint_eq(h.min, v[0]);
	ck_assert_uint_eq(h.max, v[N - 1]);
	ck_assert_uint_eq(hist_quantile(&h, 1.0), v[N - 1]);
	ck_assert_uint_eq(hist_quantile(&h, 0.0), v[0]);
	const double qs[] = { 0.5, 0.9, 0.99, 0.999 };
	for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
		uint64_t want = v[(size_t)(qs[i] * N) - 1];	/* the ceil(q n)-th smallest */
		uint64_t got = hist_quantile(&h, qs[i]);
		uint64_t diff = got > want ? got - want : want - got;
		ck_assert_msg(diff * 64 <= want, "q %.3f: %llu, want %llu", qs[i],
		    (unsigned long long)got, (unsigned long long)want);
	}
}
END_TEST

START_TEST(hist_small_values_exact)
{
	static struct hist h;

	hist_reset(&h);
	for (uint64_t i = 1; i <= 100; i++)
		hist_record(&h, i);
	ck_assert_uint_eq(hist_quantile(&h, 0.5), 50);
	ck_assert_uint_eq(hist_quantile(&h, 0.99), 99);
	ck_assert_uint_eq(hist_quantile(&h, 0.01), 1);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("hist");

	suite_case(s, "hist", NULL, NULL, 0, SUITE_TESTS(hist_buckets_tile, hist_quantiles,
	    hist_small_values_exact));
	return suite_run(s);
}
