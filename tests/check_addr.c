/*
 * check_addr — unit tests of the address parser (common/addr.c): host:port,
 * [v6addr]:port and unix:/path, what it refuses, and the default port.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "suite.h"

START_TEST(test_parse_addr_good)
{
	struct addr a;
	const char *why = NULL;
	char path[200];

	ck_assert_int_eq(addr_parse("127.0.0.1:7480", ADDR_PORT_REQUIRED, &a, &why), 0);
	ck_assert_int_eq(a.kind, ADDR_TCP);
	ck_assert_str_eq(a.host, "127.0.0.1");
	ck_assert_int_eq(a.port, 7480);
	ck_assert_str_eq(a.text, "127.0.0.1:7480");

	ck_assert_int_eq(addr_parse("localhost:0", ADDR_PORT_REQUIRED, &a, &why), 0);
	ck_assert_str_eq(a.host, "localhost");
	ck_assert_int_eq(a.port, 0);

	ck_assert_int_eq(addr_parse("db-1.example_net.org:65535", ADDR_PORT_REQUIRED, &a, &why), 0);
	ck_assert_str_eq(a.host, "db-1.example_net.org");
	ck_assert_int_eq(a.port, 65535);

	ck_assert_int_eq(addr_parse("[::1]:7480", ADDR_PORT_REQUIRED, &a, &why), 0);
	ck_assert_int_eq(a.kind, ADDR_TCP);
	ck_assert_str_eq(a.host, "::1");
	ck_assert_int_eq(a.port, 7480);
	ck_assert_str_eq(a.text, "[::1]:7480");

	ck_assert_int_eq(addr_parse("[fe80::1%eth0]:1", ADDR_PORT_REQUIRED, &a, &why), 0);
	ck_assert_str_eq(a.host, "fe80::1%eth0");
	ck_assert_int_eq(a.port, 1);

	ck_assert_int_eq(addr_parse("[::ffff:192.0.2.1]:00080", ADDR_PORT_REQUIRED, &a, &why), 0);
	ck_assert_int_eq(a.port, 80);

	ck_assert_int_eq(addr_parse("unix:/run/dlockd/dlockd.sock", ADDR_PORT_REQUIRED, &a, &why), 0);
	ck_assert_int_eq(a.kind, ADDR_UNIX);
	ck_assert_str_eq(a.path, "/run/dlockd/dlockd.sock");
	ck_assert_str_eq(a.host, "");

	/* the longest path that fits sun_path */
	memset(path, 'p', sizeof(path));
	memcpy(path, "unix:/", 6);
	path[5 + sizeof(a.path) - 1] = '\0';
	ck_assert_int_eq(addr_parse(path, ADDR_PORT_REQUIRED, &a, &why), 0);
	ck_assert_uint_eq(strlen(a.path), sizeof(a.path) - 1);
	ck_assert_ptr_null(why);
}
END_TEST

START_TEST(test_parse_addr_bad)
{
	static const struct { const char *in, *why; } bad[] = {
		{ "", "the address is empty" },
		{ "7480", "missing port (expected host:port, [v6addr]:port or unix:/path)" },
		{ "localhost", "missing port (expected host:port, [v6addr]:port or unix:/path)" },
		{ ":7480", "the host is empty" },
		{ "localhost:", "the port is missing" },
		{ "localhost:-1", "the port is not a number" },
		{ "localhost:+80", "the port is not a number" },
		{ "localhost:80 ", "the port is not a number" },
		{ "localhost:65536", "the port is out of range (0..65535)" },
		{ "localhost:99999999999999999999", "the port is out of range (0..65535)" },
		{ "a/b:80", "the host has characters a host name cannot have" },
		{ "::1:7480", "an IPv6 address must be in brackets, as in [::1]:7480" },
		{ "[::1", "missing ']' after the IPv6 address" },
		{ "[]:80", "the host is empty" },
		{ "[::1]", "missing ':port' after ']' (expected [v6addr]:port)" },
		{ "[::1]x80", "missing ':port' after ']' (expected [v6addr]:port)" },
		{ "[::1]:", "the port is missing" },
		{ "[::1]:http", "the port is not a number" },
		{ "[127.0.0.1]:80", "not an IPv6 address between the brackets" },
		{ "unix:", "the socket path is empty (expected unix:/path)" },
		{ "unix:x.sock", "the socket path must be absolute (expected unix:/path)" },
	};
	struct addr a;
	const char *why;
	char buf[400];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why = NULL;
		ck_assert_msg(addr_parse(bad[i].in, ADDR_PORT_REQUIRED, &a, &why) == -1, "'%s' accepted",
		    bad[i].in);
		ck_assert_ptr_nonnull(why);
		ck_assert_msg(strcmp(why, bad[i].why) == 0, "'%s': %s", bad[i].in, why);
	}

	/* a socket path one byte too long for sun_path */
	memset(buf, 'p', sizeof(buf));
	memcpy(buf, "unix:/", 6);
	buf[5 + sizeof(a.path)] = '\0';
	ck_assert_int_eq(addr_parse(buf, ADDR_PORT_REQUIRED, &a, &why), -1);
	ck_assert_str_eq(why, "the socket path is too long");

	/* a host longer than the field */
	memset(buf, 'h', sizeof(buf));
	strcpy(buf + sizeof(a.host), ":80");
	ck_assert_int_eq(addr_parse(buf, ADDR_PORT_REQUIRED, &a, &why), -1);
	ck_assert_str_eq(why, "the host is too long");

	/* longer than text */
	memset(buf, 'h', sizeof(buf));
	buf[sizeof(buf) - 1] = '\0';
	ck_assert_int_eq(addr_parse(buf, ADDR_PORT_REQUIRED, &a, &why), -1);
	ck_assert_str_eq(why, "the address is too long");
}
END_TEST

START_TEST(test_parse_addr_default_port)
{
	struct addr a;
	const char *why = NULL;

	ck_assert_int_eq(addr_parse("localhost", 7480, &a, &why), 0);
	ck_assert_int_eq(a.kind, ADDR_TCP);
	ck_assert_str_eq(a.host, "localhost");
	ck_assert_int_eq(a.port, 7480);
	ck_assert_int_eq(addr_parse("[::1]", 6379, &a, &why), 0);
	ck_assert_str_eq(a.host, "::1");
	ck_assert_int_eq(a.port, 6379);
	/* a port written wins */
	ck_assert_int_eq(addr_parse("db:1", 6379, &a, &why), 0);
	ck_assert_int_eq(a.port, 1);
	/* the rest is checked as ever */
	ck_assert_int_eq(addr_parse("a/b", 7480, &a, &why), -1);
	ck_assert_str_eq(why, "the host has characters a host name cannot have");
	ck_assert_int_eq(addr_parse("[::1]x", 7480, &a, &why), -1);
	ck_assert_str_eq(why, "missing ':port' after ']' (expected [v6addr]:port)");
	ck_assert_int_eq(addr_parse("[::1]", ADDR_PORT_REQUIRED, &a, &why), -1);
	ck_assert_str_eq(why, "missing ':port' after ']' (expected [v6addr]:port)");
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("addr");

	suite_case(s, "addresses", NULL, NULL, 0, SUITE_TESTS(test_parse_addr_good,
	    test_parse_addr_bad, test_parse_addr_default_port));
	return suite_run(s);
}
