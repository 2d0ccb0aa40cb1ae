/*
 * check_cmd — unit tests of the command table (daemon/cmd.c): parsing and
 * arity, the shapes of replies in RESP2 and RESP3 (LOCK, LOCKS, STATUS,
 * VALIDATE, UNLOCK, HELLO), CLIENT's subcommands, INFO, and AUTH.
 *
 * Each test talks to a server of its own on the memory backend through
 * sessions on socketpairs (tserver.h), running the event loop itself.
 */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "suite.h"
#include "tserver.h"

START_TEST(test_ping_and_unknown)
{
	int c = ts_client();
	ts_send_str(c, "PING\r\n");
	ts_expect(c, "+PONG\r\n");
	ts_send_str(c, "ping hello\r\n");
	ts_expect(c, "$5\r\nhello\r\n");
	ts_send(c, "*2\r\n$4\r\nPING\r\n$3\r\na\0b\r\n", 23);
	ts_expect_bytes(c, "$3\r\na\0b\r\n", 9);
	ts_send_str(c, "FROB x\r\n");
	ts_expect(c, "-ERR unknown command 'FROB'\r\n");
	/* a name that is no text is shown safely */
	ts_send(c, "*1\r\n$3\r\na\r\x01\r\n", 13);
	ts_expect(c, "-ERR unknown command 'a?" "?'\r\n");
	ts_send_str(c, "PING a b\r\n");
	ts_expect(c, "-ERR wrong number of arguments for 'PING' command\r\n");
	ts_send_str(c, "LOCK\r\n");
	ts_expect(c, "-ERR wrong number of arguments for 'LOCK' command\r\n");
	/* the session is still usable after every one of them */
	ts_send_str(c, "PING\r\n");
	ts_expect(c, "+PONG\r\n");
	close(c);
}
END_TEST

START_TEST(test_lock_syntax_errors)
{
	static const struct { const char *req, *reply; } cases[] = {
		{ "LOCK k TTL\r\n", "-ERR syntax error: LOCK key [TTL ms] [WAIT ms] "
		    "[SHARED | LIMIT n] [DETACH]\r\n" },
		{ "LOCK k BOGUS\r\n", "-ERR syntax error: LOCK key [TTL ms] [WAIT ms] "
		    "[SHARED | LIMIT n] [DETACH]\r\n" },
		{ "LOCK k TTL 5 TTL 5\r\n", "-ERR invalid TTL: must be 10 to 86400000 ms\r\n" },
		{ "LOCK k TTL 100 TTL 100\r\n", "-ERR syntax error: LOCK key [TTL ms] [WAIT ms] "
		    "[SHARED | LIMIT n] [DETACH]\r\n" },
		{ "LOCK k TTL 86400001\r\n", "-ERR invalid TTL: must be 10 to 86400000 ms\r\n" },
		{ "LOCK k TTL x\r\n", "-ERR invalid TTL: must be 10 to 86400000 ms\r\n" },
		{ "LOCK k WAIT -1\r\n", "-ERR WAIT must be a number of ms, 0 or more\r\n" },
		{ "LOCK k LIMIT 0\r\n", "-ERR LIMIT must be 1 to 1000000\r\n" },
		{ "LOCK k SHARED LIMIT 2\r\n", "-ERR syntax error: LOCK key [TTL ms] [WAIT ms] "
		    "[SHARED | LIMIT n] [DETACH]\r\n" },
		{ "LOCK k DETACH\r\n", "-ERR DETACH needs an explicit TTL\r\n" },
		{ "LOCK \"\"\r\n", "-ERR key is empty or too long (1 to 1024 bytes)\r\n" },
		{ "EXTEND k 5\r\n", "-ERR invalid TTL: must be 10 to 86400000 ms\r\n" },
		{ "VALIDATE k -1\r\n", "-ERR fence must be a number, 0 or more\r\n" },
		{ "UNLOCK k\r\n", "-NOTHELD key is not held by this session\r\n" },
		{ "UNLOCK k 0123\r\n", "-NOTHELD key is not held by that token\r\n" },
		{ "EXTEND k 100\r\n", "-NOTHELD key is not held by this session\r\n" },
	};
	int c = ts_client();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ts_send_str(c, cases[i].req);
		ts_expect(c, cases[i].reply);
	}
	/* a key one byte too long */
	char big[1100];
	memset(big, 'k', sizeof(big));
	snprintf(big, sizeof(big), "LOCK %01025d\r\n", 0);
	ts_send_str(c, big);
	ts_expect(c, "-ERR key is empty or too long (1 to 1024 bytes)\r\n");
	/* nothing was queued by any of them */
	ts_send_str(c, "STATUS k\r\n");
	ts_expect(c, "*14\r\n$4\r\nmode\r\n$4\r\nfree\r\n$7\r\nholders\r\n:0\r\n$7\r\nwaiters\r\n"
	    ":0\r\n$5\r\nfence\r\n:0\r\n$6\r\nttl_ms\r\n:-1\r\n$5\r\nlimit\r\n:0\r\n"
	    "$7\r\nbackend\r\n$5\r\nlocal\r\n");
	close(c);
}
END_TEST

START_TEST(test_lock_reply_shapes)
{
	char tok[TOKEN_LEN + 1], line[128];
	long long ttl, f1, f2;
	int c = ts_client();

	ts_send_str(c, "LOCK a TTL 5000\r\n");
	f1 = ts_expect_grant(c, tok, &ttl);
	ck_assert_int_eq(ttl, 5000);
	/* reentrant: the same token and fence */
	ts_send_str(c, "LOCK a TTL 5000\r\n");
	char tok2[TOKEN_LEN + 1];
	ck_assert_int_eq(ts_expect_grant(c, tok2, NULL), f1);
	ck_assert_str_eq(tok, tok2);
	ts_send_str(c, "LOCK b SHARED\r\n");
	f2 = ts_expect_grant(c, NULL, &ttl);
	ck_assert_int_gt(f2, f1);
	ck_assert_int_eq(ttl, 30000);	/* locks.default_ttl_ms */
	ts_send_str(c, "LOCK a SHARED\r\n");
	ts_expect(c, "-ERR key is held by this session in exclusive mode; unlock it first\r\n");

	/* LOCKS: [key, token, fence, mode, count] per holding, oldest first */
	ts_send_str(c, "LOCKS\r\n");
	snprintf(line, sizeof(line), ":%lld\r\n", f1);
	ts_expect(c, "*2\r\n*5\r\n$1\r\na\r\n$32\r\n");
	ts_recv(c, tok2, TOKEN_LEN);
	ck_assert_int_eq(memcmp(tok, tok2, TOKEN_LEN), 0);
	ts_expect(c, "\r\n");
	ts_expect(c, line);
	ts_expect(c, "$9\r\nexclusive\r\n:2\r\n*5\r\n$1\r\nb\r\n$32\r\n");
	ts_recv(c, tok2, TOKEN_LEN);
	snprintf(line, sizeof(line), "\r\n:%lld\r\n$6\r\nshared\r\n:1\r\n", f2);
	ts_expect(c, line);

	/* VALIDATE, UNLOCK counts down, then frees */
	snprintf(line, sizeof(line), "VALIDATE a %lld\r\nVALIDATE a %lld\r\n", f1, f1 + 100);
	ts_send_str(c, line);
	ts_expect(c, ":1\r\n:0\r\n");
	ts_send_str(c, "UNLOCK a\r\nUNLOCK a\r\nUNLOCK a\r\n");
	ts_expect(c, ":1\r\n:0\r\n-NOTHELD key is not held by this session\r\n");

	/* RESP3: a null for a LOCK not granted, a map for STATUS */
	ts_send_str(c, "HELLO 3\r\n");
	ts_expect_hello(c, 1, 3);
	int d = ts_client();
	ts_send_str(d, "HELLO\r\nLOCK b WAIT 0\r\n");
	ts_expect_hello(d, 2, 2);
	ts_expect(d, "*-1\r\n");
	ts_send_str(d, "HELLO 3\r\nLOCK b WAIT 0\r\n");
	ts_expect_hello(d, 2, 3);
	ts_expect(d, "_\r\n");
	ts_send_str(c, "STATUS b\r\n");
	ts_expect(c, "%7\r\n$4\r\nmode\r\n$6\r\nshared\r\n$7\r\nholders\r\n:1\r\n"
	    "$7\r\nwaiters\r\n:0\r\n$5\r\nfence\r\n");
	snprintf(line, sizeof(line), ":%lld\r\n", f2);
	ts_expect(c, line);
	ts_expect(c, "$6\r\nttl_ms\r\n:-1\r\n$5\r\nlimit\r\n:0\r\n$7\r\nbackend\r\n$5\r\nlocal\r\n");
	close(c);
	close(d);
}
END_TEST

START_TEST(test_client_subcommands)
{
	int c = ts_client();
	ts_send_str(c, "CLIENT ID\r\nCLIENT GETNAME\r\nCLIENT SETNAME worker-1\r\n"
	    "CLIENT GETNAME\r\nCLIENT SETINFO lib-name redis-py\r\n");
	ts_expect(c, ":1\r\n$-1\r\n+OK\r\n$8\r\nworker-1\r\n+OK\r\n");
	ts_send_str(c, "CLIENT LOSTPUSH ON\r\n");
	ts_expect(c, "-ERR lost pushes need RESP3: send HELLO 3 first\r\n");
	ts_send_str(c, "CLIENT NOPE\r\n");
	ts_expect(c, "-ERR unknown CLIENT subcommand or wrong number of arguments (ID, GETNAME, "
	    "SETNAME name, SETINFO attr value, LIST, INFO, KILL ID id, KILL ADDR ip:port, "
	    "LOSTPUSH ON|OFF, SUSPENDPUSH ON|OFF)\r\n");
	ts_send_str(c, "HELLO 4\r\n");
	ts_expect(c, "-NOPROTO unsupported protocol version\r\n");
	ts_send_str(c, "HELLO 2 SETNAME\r\n");
	ts_expect(c, "-ERR syntax error in HELLO\r\n");
	/* a second session gets the next id */
	int d = ts_client();
	ts_send_str(d, "CLIENT ID\r\n");
	ts_expect(d, ":2\r\n");
	close(c);
	close(d);
}
END_TEST

START_TEST(test_info)
{
	char line[256];
	bool clients = false, commands = false, held = false;
	int c = ts_client();
	ts_send_str(c, "LOCK x\r\n");
	ts_expect_grant(c, NULL, NULL);
	ts_send_str(c, "INFO\r\n");
	ts_recv_line(c, line, sizeof(line));
	long long len;
	ck_assert_int_eq(sscanf(line, "$%lld", &len), 1);
	ck_assert_int_gt(len, 0);
	ck_assert_int_lt(len, TS_REPLY_MAX);
	char text[TS_REPLY_MAX + 1];
	ts_recv(c, text, (size_t)len + 2);
	text[len] = '\0';
	ck_assert_ptr_nonnull(strstr(text, "# Server\r\nversion:" DLOCKD_VERSION "\r\n"
	    "backend:memory\r\n"));
	for (char *l = strtok(text, "\r\n"); l != NULL; l = strtok(NULL, "\r\n")) {
		clients |= strcmp(l, "connected_clients:1") == 0;
		commands |= strcmp(l, "commands_total:2") == 0;
		held |= strcmp(l, "locks_held:1") == 0;
	}
	ck_assert(clients && commands && held);
	close(c);
}
END_TEST

/* ---- authentication -------------------------------------------------------- */

START_TEST(test_auth)
{
	int c = ts_client();
	ts_send_str(c, "LOCK k\r\n");
	ts_expect(c, "-NOAUTH Authentication required.\r\n");
	ts_send_str(c, "PING\r\nAUTH wrong\r\nAUTH other sesame\r\n");
	ts_expect(c, "+PONG\r\n-WRONGPASS invalid password\r\n-WRONGPASS invalid password\r\n");
	/* HELLO with a bad argument after AUTH changes nothing */
	ts_send_str(c, "HELLO 2 AUTH default sesame BOGUS\r\nLOCK k\r\n");
	ts_expect(c, "-ERR syntax error in HELLO\r\n-NOAUTH Authentication required.\r\n");
	ts_send_str(c, "AUTH default sesame\r\nLOCK k WAIT 0\r\n");
	ts_expect(c, "+OK\r\n");
	ts_expect_grant(c, NULL, NULL);
	close(c);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("cmd");

	suite_case(s, "commands", ts_setup, ts_teardown, 0, SUITE_TESTS(test_ping_and_unknown,
	    test_lock_syntax_errors, test_lock_reply_shapes, test_client_subcommands,
	    test_info));
	suite_case(s, "auth", ts_setup_auth, ts_teardown, 0, SUITE_TESTS(test_auth));
	return suite_run(s);
}
