/*
 * check_clock — unit tests of the clock (common/clock.c): it never steps
 * back, and nothing counts as suspended while the test runs.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "clock.h"
#include "suite.h"

START_TEST(test_clock_never_steps_back)
{
	uint64_t last = clock_ms();

	ck_assert_uint_gt(last, 0);
	for (int i = 0; i < 100000; i++) {
		uint64_t now = clock_ms();
		ck_assert_uint_ge(now, last);
		last = now;
	}
	/* nothing was suspended during the test: a few ms at most of slack */
	uint64_t s1 = clock_suspended_ms(), s2 = clock_suspended_ms();
	ck_assert_uint_le(s1, s2 + 1);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("clock");

	suite_case(s, "clock", NULL, NULL, 0, SUITE_TESTS(test_clock_never_steps_back));
	return suite_run(s);
}
