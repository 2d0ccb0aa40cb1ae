/*
 * check_num — unit tests of the integer parser (common/num.c): numbers in
 * range, what it refuses (signs, spaces, overflow, empty), and hex digits.
 */
#include <check.h>
#include <ctype.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "num.h"
#include "suite.h"

/* num_parse over a C string. */
static enum num_status
num(const char *s, long long min, long long max, long long *out)
{
	return num_parse(s, strlen(s), min, max, out);
}

START_TEST(test_num_good)
{
	long long v = 1;

	ck_assert_int_eq(num("0", 0, 10, &v), NUM_OK);
	ck_assert_int_eq(v, 0);
	ck_assert_int_eq(num("007", 0, 10, &v), NUM_OK);
	ck_assert_int_eq(v, 7);
	ck_assert_int_eq(num("-5", -10, 10, &v), NUM_OK);
	ck_assert_int_eq(v, -5);
	ck_assert_int_eq(num("9223372036854775807", LLONG_MIN, LLONG_MAX, &v), NUM_OK);
	ck_assert_int_eq(v, LLONG_MAX);
	ck_assert_int_eq(num("-9223372036854775808", LLONG_MIN, LLONG_MAX, &v), NUM_OK);
	ck_assert_int_eq(v, LLONG_MIN);
	/* only the len bytes given are read */
	ck_assert_int_eq(num_parse("12345", 2, 0, 100, &v), NUM_OK);
	ck_assert_int_eq(v, 12);
}
END_TEST

START_TEST(test_num_bad)
{
	static const char *const syntax[] = { "", "-", "+1", " 1", "1 ", "1.5", "0x10", "1e3",
	    "--1", "1-", "12a" };
	long long v = 42;

	for (size_t i = 0; i < sizeof(syntax) / sizeof(syntax[0]); i++)
		ck_assert_msg(num(syntax[i], LLONG_MIN, LLONG_MAX, &v) == NUM_SYNTAX, "'%s'",
		    syntax[i]);
	ck_assert_int_eq(num("9223372036854775808", LLONG_MIN, LLONG_MAX, &v), NUM_RANGE);
	ck_assert_int_eq(num("-9223372036854775809", LLONG_MIN, LLONG_MAX, &v), NUM_RANGE);
	ck_assert_int_eq(num("99999999999999999999999", 0, 10, &v), NUM_RANGE);
	ck_assert_int_eq(num("11", 0, 10, &v), NUM_RANGE);
	ck_assert_int_eq(num("-1", 0, 10, &v), NUM_RANGE);
	ck_assert_int_eq(num_parse("1\0", 2, 0, 10, &v), NUM_SYNTAX);
	ck_assert_int_eq(v, 42);	/* untouched on failure */
}
END_TEST

START_TEST(test_hex_digits)
{
	static const char digits[] = "0123456789abcdef";
	for (int i = 0; i < 16; i++) {
		ck_assert_int_eq(num_hex_digit(digits[i]), i);
		ck_assert_int_eq(num_hex_digit(toupper((unsigned char)digits[i])), i);
	}
	for (int ch = 0; ch < 256; ch++)
		if (strchr("0123456789abcdefABCDEF", ch) == NULL || ch == 0)
			ck_assert_int_eq(num_hex_digit(ch), -1);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("num");

	suite_case(s, "integers", NULL, NULL, 0, SUITE_TESTS(test_num_good, test_num_bad,
	    test_hex_digits));
	return suite_run(s);
}
