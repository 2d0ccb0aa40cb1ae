/*
 * suite — what every Check suite's main() does: run the suite, free it,
 * and turn the failures into an exit status.
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

/* Run every test of s (CK_FORK as the environment says), free it, and
 * return EXIT_SUCCESS when none failed, else EXIT_FAILURE. */
int suite_run(Suite *s);

#endif
