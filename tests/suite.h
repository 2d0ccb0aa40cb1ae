/*
 * suite — what every Check suite's main() does: run the suite, free it,
 * and turn the failures into an exit status.
 */
#ifndef DLOCKD_TEST_SUITE_H
#define DLOCKD_TEST_SUITE_H

#include <check.h>

/* Run every test of s (CK_FORK as the environment says), free it, and
 * return EXIT_SUCCESS when none failed, else EXIT_FAILURE. */
int suite_run(Suite *s);

#endif
