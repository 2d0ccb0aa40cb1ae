/*
 * suite — what every Check suite does: make its test cases from lists of
 * tests, run the suite, free it, and turn the failures into an exit status.
 */
#ifndef DLOCKD_TEST_SUITE_H
#define DLOCKD_TEST_SUITE_H

#include <check.h>

/* Run base's loop until cond holds; fail the test after limit_ms (the
 * suite includes clock.h and <event2/event.h>). */
#define SUITE_RUN_UNTIL(base, cond, limit_ms) do { \
	uint64_t until_ = clock_ms() + (limit_ms); \
	while (!(cond)) { \
		ck_assert_msg(clock_ms() < until_, "waited in vain for: %s", #cond); \
		event_base_loop((base), EVLOOP_ONCE); \
	} \
} while (0)

/* Assert a key's status, st: the lock table's struct lt_key_status or
 * libdlock's struct dlock_status, whose fields have the same names. */
#define SUITE_ASSERT_STATUS(st, mode_, holders_, waiters_, fence_, ttl_ms_, limit_) do { \
	ck_assert_str_eq((st).mode, (mode_)); \
	ck_assert_int_eq((st).holders, (holders_)); \
	ck_assert_int_eq((st).waiters, (waiters_)); \
	ck_assert_int_eq((st).fence, (fence_)); \
	ck_assert_int_eq((st).ttl_ms, (ttl_ms_)); \
	ck_assert_int_eq((st).limit, (limit_)); \
} while (0)

/* The tests of a test case, for suite_case(): SUITE_TESTS(test_a, test_b). */
#define SUITE_TESTS(...) ((const TTest *const[]){ __VA_ARGS__, NULL })

/*
 * Add to s a test case called name with the tests of the NULL-ended list
 * tests (SUITE_TESTS; NULL: none). Each test runs setup before it and
 * teardown after it in its own process (Check's checked fixture; NULL for
 * none) and must end within timeout_s seconds (0: Check's default).
 * Returns the case, for what else it has (loop tests, an unchecked fixture).
 */
TCase *suite_case(Suite *s, const char *name, SFun setup, SFun teardown, double timeout_s,
    const TTest *const *tests);

/* Run every test of s (CK_FORK as the environment says), free it, and
 * return EXIT_SUCCESS when none failed, else EXIT_FAILURE. */
int suite_run(Suite *s);

#endif
