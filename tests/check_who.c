/*
 * check_who — unit tests of the holder descriptions kept with leases in a
 * shared backend (daemon/who.c): written and read back, fields that hold a
 * tab or a line end, fields cut to their bounds, text that is not one, and
 * whose daemon wrote one.
 */
#include <check.h>
#include <string.h>

#include "suite.h"
#include "who.h"

/* Field f of w equals s. */
static void
field_is(const struct who *w, enum who_field f, const char *s)
{
	ck_assert_uint_eq(w->len[f], strlen(s));
	ck_assert_int_eq(memcmp(w->f[f], s, w->len[f]), 0);
}

static struct who_daemon
daemon_of(const char *addr)
{
	struct who_daemon d;
	who_daemon_init(&d, addr);
	return d;
}

START_TEST(round_trip)
{
	struct who_daemon d = daemon_of("127.0.0.1:7480");
	char buf[WHO_MAX];
	struct who w;
	ck_assert_uint_eq(strlen(d.id), WHO_ID_LEN);
	ck_assert_uint_eq(strspn(d.id, "0123456789abcdef"), WHO_ID_LEN);
	size_t n = who_format(buf, sizeof(buf), &d, 42, "worker-1", "10.0.0.7:5000",
	    1796669977962ull, 30000, 1);
	ck_assert_uint_eq(n, strlen(buf));
	ck_assert(who_parse(buf, n, &w));
	field_is(&w, WHO_DAEMON, d.id);
	field_is(&w, WHO_HOST, d.host);
	field_is(&w, WHO_DAEMON_ADDR, "127.0.0.1:7480");
	field_is(&w, WHO_NAME, "worker-1");
	field_is(&w, WHO_ADDR, "10.0.0.7:5000");
	ck_assert_uint_eq(who_num(&w, WHO_SESSION), 42);
	ck_assert_uint_eq(who_num(&w, WHO_SINCE), 1796669977962ull);
	ck_assert_uint_eq(who_num(&w, WHO_TTL), 30000);
	ck_assert_uint_eq(who_num(&w, WHO_DETACHED), 1);
	ck_assert(who_is(&w, &d));
	struct who_daemon other = daemon_of(NULL);
	ck_assert(!who_is(&w, &other));
	field_is(&w, WHO_DAEMON, d.id);
}
END_TEST

START_TEST(no_name_no_peer)
{
	struct who_daemon d = daemon_of(NULL);
	char buf[WHO_MAX];
	struct who w;
	ck_assert(who_parse(buf, who_format(buf, sizeof(buf), &d, 7, NULL, NULL, 1, 2, 0), &w));
	field_is(&w, WHO_NAME, "");
	field_is(&w, WHO_ADDR, "");
	field_is(&w, WHO_DAEMON_ADDR, "");
	ck_assert_uint_eq(who_num(&w, WHO_DETACHED), 0);
}
END_TEST

START_TEST(separators_replaced_and_cut)
{
	struct who_daemon d = daemon_of("a\tb");
	char buf[WHO_MAX], name[400];
	struct who w;
	memset(name, 'n', sizeof(name));
	name[sizeof(name) - 1] = '\0';
	name[3] = '\t';
	name[4] = '\n';
	name[5] = '\r';
	size_t n = who_format(buf, sizeof(buf), &d, 1, name, "p\tq", 1, 2, 0);
	ck_assert(who_parse(buf, n, &w));
	field_is(&w, WHO_DAEMON_ADDR, "a?b");
	field_is(&w, WHO_ADDR, "p?q");
	ck_assert_uint_eq(w.len[WHO_NAME], 128);	/* cut */
	ck_assert_int_eq(memcmp(w.f[WHO_NAME], "nnn???nn", 8), 0);
	ck_assert_uint_eq(who_num(&w, WHO_TTL), 2);
}
END_TEST

START_TEST(not_a_description)
{
	struct who w;
	ck_assert(!who_parse("", 0, &w));
	ck_assert(!who_parse("w2\ta\tb", 7, &w));
	ck_assert(!who_parse("w1\ta\tb\tc", 9, &w));	/* too few fields */
	/* fields after the known ones (a later format) are left alone */
	const char *later = "w1\td\th\ta\t5\tn\tp\t9\t10\t0\textra";
	ck_assert(who_parse(later, strlen(later), &w));
	field_is(&w, WHO_DETACHED, "0");
	ck_assert_uint_eq(who_num(&w, WHO_SESSION), 5);
	/* a number field that is not one reads 0 */
	const char *bad = "w1\td\th\ta\tx5\tn\tp\t9\t10\t0";
	ck_assert(who_parse(bad, strlen(bad), &w));
	ck_assert_uint_eq(who_num(&w, WHO_SESSION), 0);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("who");

	suite_case(s, "who", NULL, NULL, 0, SUITE_TESTS(round_trip, no_name_no_peer,
	    separators_replaced_and_cut, not_a_description));
	return suite_run(s);
}
