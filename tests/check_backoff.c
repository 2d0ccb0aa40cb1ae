/*
 * check_backoff — unit tests of the capped exponential backoff
 * (daemon/backoff.c): delays double from the first to the cap, each with
 * at most a fifth more at random, the jitter does vary, reset starts over,
 * and odd bounds (a first delay above the cap, 0, the largest values) stay
 * in range.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "backoff.h"
#include "suite.h"

/* backoff_next(b), checked to be next_ms plus at most a fifth; returns the
 * delay before jitter. */
static uint64_t
next_checked(struct backoff *b)
{
	uint64_t base = b->next_ms, d = backoff_next(b);
	uint64_t most = b->max_ms > UINT64_MAX - b->max_ms / 5 ? UINT64_MAX :
	    b->max_ms + b->max_ms / 5;

	ck_assert_uint_ge(d, base);
	ck_assert_uint_le(d - base, base / 5);
	ck_assert_uint_le(d, most);
	return base;
}

START_TEST(doubles_then_caps)
{
	static const uint64_t want[] = { 100, 200, 400, 800, 1600, 2000, 2000, 2000 };
	struct backoff b;

	backoff_init(&b, 100, 2000);
	ck_assert_uint_eq(b.min_ms, 100);
	ck_assert_uint_eq(b.max_ms, 2000);
	ck_assert_uint_eq(b.next_ms, 100);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		ck_assert_uint_eq(next_checked(&b), want[i]);
	ck_assert_uint_eq(b.next_ms, 2000);
}
END_TEST

START_TEST(cap_not_a_power_of_two)
{
	static const uint64_t want[] = { 3, 6, 12, 24, 25, 25 };
	struct backoff b;

	backoff_init(&b, 3, 25);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		ck_assert_uint_eq(next_checked(&b), want[i]);
}
END_TEST

/* Over many delays at the cap, the jitter stays within a fifth and is not
 * always the same. */
START_TEST(jitter_bounds)
{
	struct backoff b;
	uint64_t lo = UINT64_MAX, hi = 0;

	backoff_init(&b, 1000, 1000);
	for (int i = 0; i < 10000; i++) {
		uint64_t d = backoff_next(&b);

		ck_assert_uint_ge(d, 1000);
		ck_assert_uint_le(d, 1200);
		lo = d < lo ? d : lo;
		hi = d > hi ? d : hi;
	}
	ck_assert_uint_lt(lo, 1050);
	ck_assert_uint_gt(hi, 1150);
	/* below 5 ms a fifth is nothing: no jitter */
	backoff_init(&b, 4, 4);
	for (int i = 0; i < 100; i++)
		ck_assert_uint_eq(backoff_next(&b), 4);
}
END_TEST

START_TEST(reset)
{
	struct backoff b;

	backoff_init(&b, 50, 400);
	for (int i = 0; i < 6; i++)
		next_checked(&b);
	ck_assert_uint_eq(b.next_ms, 400);
	backoff_reset(&b);
	ck_assert_uint_eq(b.next_ms, 50);
	ck_assert_uint_eq(next_checked(&b), 50);
	ck_assert_uint_eq(next_checked(&b), 100);
	/* a reset before any delay changes nothing */
	backoff_reset(&b);
	backoff_reset(&b);
	ck_assert_uint_eq(next_checked(&b), 50);
}
END_TEST

START_TEST(odd_bounds)
{
	struct backoff b;

	/* a first delay above the cap is the cap */
	backoff_init(&b, 5000, 2000);
	ck_assert_uint_eq(next_checked(&b), 2000);
	ck_assert_uint_eq(next_checked(&b), 2000);
	backoff_reset(&b);
	ck_assert_uint_eq(b.next_ms, 2000);
	/* 0 stays 0 */
	backoff_init(&b, 0, 1000);
	ck_assert_uint_eq(backoff_next(&b), 0);
	ck_assert_uint_eq(backoff_next(&b), 0);
	/* the largest values neither overflow nor pass the largest delay */
	backoff_init(&b, UINT64_MAX / 3, UINT64_MAX);
	ck_assert_uint_eq(next_checked(&b), UINT64_MAX / 3);
	ck_assert_uint_eq(b.next_ms, UINT64_MAX / 3 * 2);
	ck_assert_uint_eq(next_checked(&b), UINT64_MAX / 3 * 2);
	ck_assert_uint_eq(b.next_ms, UINT64_MAX);
	ck_assert_uint_eq(backoff_next(&b), UINT64_MAX);
	ck_assert_uint_eq(b.next_ms, UINT64_MAX);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("backoff");

	suite_case(s, "core", NULL, NULL, 0, SUITE_TESTS(doubles_then_caps,
	    cap_not_a_power_of_two, jitter_bounds, reset, odd_bounds));
	return suite_run(s);
}
