/*
 * check_bench — unit tests of dlock-bench's two small modules: the wait-time
 * histogram (bench/hist.c: buckets cover every value without gaps, a bucket
 * is at most 1/64 of its value wide, quantiles against sorted samples) and
 * the RESP reply reader (bench/reply.c: every reply kind whole, cut at every
 * byte, and malformed input).
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hist.h"
#include "reply.h"
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

/* Scan text whole, then every proper prefix of it (all incomplete). */
static struct reply
scan_all_ways(const char *text)
{
	size_t len = strlen(text);
	struct reply r;

	for (size_t cut = 0; cut < len; cut++) {
		char *part = malloc(cut + 1);
		memcpy(part, text, cut);
		ck_assert_msg(reply_scan(part, cut, &r) == 0, "%zu bytes of %s", cut, text);
		free(part);
	}
	ck_assert_int_eq(reply_scan(text, len, &r), (ssize_t)len);
	return r;
}

START_TEST(reply_kinds)
{
	struct reply r;

	r = scan_all_ways("+PONG\r\n");
	ck_assert_int_eq(r.kind, REPLY_STATUS);
	ck_assert_uint_eq(r.len, 4);
	ck_assert_int_eq(memcmp(r.str, "PONG", 4), 0);
	r = scan_all_ways("-NOTHELD key is not held by this session\r\n");
	ck_assert_int_eq(r.kind, REPLY_ERROR);
	ck_assert_uint_eq(r.len, 39);
	r = scan_all_ways(":-42\r\n");
	ck_assert_int_eq(r.kind, REPLY_INTEGER);
	ck_assert_int_eq(r.integer, -42);
	r = scan_all_ways("$5\r\na\r\nbc\r\n");
	ck_assert_int_eq(r.kind, REPLY_BULK);
	ck_assert_uint_eq(r.len, 5);
	ck_assert_int_eq(memcmp(r.str, "a\r\nbc", 5), 0);
	r = scan_all_ways("$0\r\n\r\n");
	ck_assert_int_eq(r.kind, REPLY_BULK);
	ck_assert_uint_eq(r.len, 0);
	ck_assert_int_eq(scan_all_ways("$-1\r\n").kind, REPLY_NULL);
	ck_assert_int_eq(scan_all_ways("*-1\r\n").kind, REPLY_NULL);
	ck_assert_int_eq(scan_all_ways("_\r\n").kind, REPLY_NULL);
	/* a LOCK grant */
	r = scan_all_ways("*3\r\n$32\r\n90d062002d5cc8459774cffb528ee550\r\n"
	    ":1795311811742097\r\n:10000\r\n");
	ck_assert_int_eq(r.kind, REPLY_ARRAY);
	ck_assert_int_eq(r.integer, 3);
	r = scan_all_ways("*2\r\n*1\r\n+a\r\n*0\r\n");
	ck_assert_int_eq(r.kind, REPLY_ARRAY);
	ck_assert_int_eq(r.integer, 2);
}
END_TEST

START_TEST(reply_two_in_a_row)
{
	const char *two = ":0\r\n+OK\r\n";
	struct reply r;

	ck_assert_int_eq(reply_scan(two, strlen(two), &r), 4);
	ck_assert_int_eq(r.kind, REPLY_INTEGER);
	ck_assert_int_eq(reply_scan(two + 4, strlen(two) - 4, &r), 5);
	ck_assert_int_eq(r.kind, REPLY_STATUS);
}
END_TEST

START_TEST(reply_malformed)
{
	const char *bad[] = {
		"?what\r\n", ":12x\r\n", "$abc\r\n", "$-2\r\n", "$3\r\nabcd\r\n", "*x\r\n",
		"+OK\rX", "\r\n", "_x\r\n", ":\r\n",
		"*1*1*1*1*1*1*1*1*1\r\n",	/* not RESP either */
	};
	struct reply r;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(reply_scan(bad[i], strlen(bad[i]), &r) == -1, "%s", bad[i]);
	/* nested deeper than REPLY_MAX_DEPTH */
	char deep[64] = "";
	for (int i = 0; i <= REPLY_MAX_DEPTH; i++)
		strcat(deep, "*1\r\n");
	strcat(deep, ":1\r\n");
	ck_assert_int_eq(reply_scan(deep, strlen(deep), &r), -1);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("bench");

	suite_case(s, "hist", NULL, NULL, 0, SUITE_TESTS(hist_buckets_tile, hist_quantiles,
	    hist_small_values_exact));
	suite_case(s, "reply", NULL, NULL, 0, SUITE_TESTS(reply_kinds, reply_two_in_a_row,
	    reply_malformed));
	return suite_run(s);
}
