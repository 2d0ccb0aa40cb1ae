/*
 * suite — making and running a Check suite (see suite.h).
 */
#include "suite.h"

#include <stddef.h>
#include <stdlib.h>

TCase *
suite_case(Suite *s, const char *name, SFun setup, SFun teardown, double timeout_s,
    const TTest *const *tests)
{
	TCase *tc = tcase_create(name);

	if (setup != NULL || teardown != NULL)
		tcase_add_checked_fixture(tc, setup, teardown);
	if (timeout_s > 0)
		tcase_set_timeout(tc, timeout_s);
	for (size_t i = 0; tests != NULL && tests[i] != NULL; i++)
		tcase_add_test(tc, tests[i]);
	suite_add_tcase(s, tc);
	return tc;
}

int
suite_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
