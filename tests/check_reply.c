/*
 * check_reply — unit tests of dlock-bench's RESP reply reader
 * (bench/reply.c): every reply kind whole and cut at every byte, two
 * replies in a row, and malformed input.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "reply.h"
#include "suite.h"

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
	Suite *s = suite_create("reply");

	suite_case(s, "reply", NULL, NULL, 0, SUITE_TESTS(reply_kinds, reply_two_in_a_row,
	    reply_malformed));
	return suite_run(s);
}
