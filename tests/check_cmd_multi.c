/*
 * check_cmd_multi — unit tests of LOCKALL and UNLOCKALL (daemon/cmd_multi.c):
 * their syntax and limits, the answer in the order the keys were given, all
 * or none within WAIT, the one order keys are taken in (no deadlock, FIFO per
 * key), reentrancy, a session that goes while it waits, and, on the fake
 * backend, a key that fails or is lost half-way: the keys taken are given
 * back before the answer, which is never a part.
 *
 * Each test talks to a server of its own (tserver.h) on the memory backend
 * with a clock it moves by hand, or on the fake backend.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "conf.h"
#include "fake_backend.h"
#include "locktab.h"
#include "server.h"
#include "session.h"
#include "suite.h"
#include "tserver.h"

#define SYNTAX "-ERR syntax error: LOCKALL numkeys key [key ...] [TTL ms] [WAIT ms] " \
	"[SHARED | LIMIT n] [DETACH]\r\n"

/* Send STATUS key on fd and assert its mode, holders and waiters. */
static void
expect_status(int fd, const char *key, const char *mode, int holders, int waiters)
{
	char line[256], cmd[128];
	snprintf(cmd, sizeof(cmd), "STATUS %s\r\n", key);
	ts_send_str(fd, cmd);
	/* *14, then mode, holders, waiters, fence, ttl_ms, limit, backend */
	for (int i = 0; i < 24; i++) {
		ts_recv_line(fd, line, sizeof(line));
		if (i == 4)
			ck_assert_str_eq(line, mode);
		else if (i == 7)
			ck_assert_int_eq(atoi(line + 1), holders);
		else if (i == 10)
			ck_assert_int_eq(atoi(line + 1), waiters);
	}
}

/* Read a LOCKALL answer of n grants; fences[i] gets the i-th's fence and
 * tokens (unless NULL) its token. */
static void
expect_set(int fd, int n, long long *fences, char (*tokens)[TOKEN_LEN + 1])
{
	char line[64];
	snprintf(line, sizeof(line), "*%d\r\n", n);
	ts_expect(fd, line);
	for (int i = 0; i < n; i++)
		fences[i] = ts_expect_grant(fd, tokens != NULL ? tokens[i] : NULL, NULL);
}

START_TEST(test_syntax_and_limits)
{
	static const struct { const char *req, *reply; } cases[] = {
		{ "LOCKALL 0 a\r\n", "-ERR numkeys must be a number of keys, 1 or more\r\n" },
		{ "LOCKALL x a\r\n", "-ERR numkeys must be a number of keys, 1 or more\r\n" },
		{ "LOCKALL -1 a\r\n", "-ERR numkeys must be a number of keys, 1 or more\r\n" },
		{ "LOCKALL 3 a b\r\n", SYNTAX },
		{ "LOCKALL 2 a b TTL\r\n", SYNTAX },
		{ "LOCKALL 2 a b WAIT 5 BOGUS\r\n", SYNTAX },
		{ "LOCKALL 2 a b DETACH\r\n", "-ERR DETACH needs an explicit TTL\r\n" },
		{ "LOCKALL 2 a b TTL 5\r\n", "-ERR invalid TTL: must be 10 to 86400000 ms\r\n" },
		{ "LOCKALL 3 a b a\r\n", "-ERR LOCKALL names key 'a' twice\r\n" },
		{ "LOCKALL 2 a \"\"\r\n", "-ERR key is empty or too long (1 to 1024 bytes)\r\n" },
		{ "LOCKALL 5 a b c d e\r\n", "-LIMIT too many keys in one LOCKALL "
		    "(limits.max_lockall_keys is 4)\r\n" },
		{ "UNLOCKALL 2 a\r\n", "-ERR syntax error: UNLOCKALL numkeys key [key ...]\r\n" },
		{ "UNLOCKALL 1 a b\r\n", "-ERR syntax error: UNLOCKALL numkeys key [key ...]\r\n" },
		{ "UNLOCKALL 2 a a\r\n", "-ERR UNLOCKALL names key 'a' twice\r\n" },
		{ "UNLOCKALL 1 a\r\n", "-NOTHELD key 'a' is not held by this session; nothing "
		    "was unlocked\r\n" },
		{ "LOCKALL 1\r\n", "-ERR wrong number of arguments for 'LOCKALL' command\r\n" },
	};
	ts_conf->max_lockall_keys = 4;
	int c = ts_client();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ts_send_str(c, cases[i].req);
		ts_expect(c, cases[i].reply);
	}
	/* nothing was taken nor queued by any of them */
	expect_status(c, "a", "free", 0, 0);
	expect_status(c, "b", "free", 0, 0);
	ck_assert_uint_eq(ts_srv->sessions.multi.lockall_waiting, 0);
	close(c);
}
END_TEST

START_TEST(test_answer_in_the_order_given)
{
	long long f[3], g[2];
	char tok[3][TOKEN_LEN + 1];
	int c = ts_client(), d = ts_client();

	ts_send_str(c, "LOCKALL 3 zeta alpha mid TTL 5000\r\n");
	expect_set(c, 3, f, tok);
	/* each grant is its key's: VALIDATE by key and fence, UNLOCK by token */
	char req[256];
	snprintf(req, sizeof(req), "VALIDATE zeta %lld\r\nVALIDATE alpha %lld\r\n"
	    "VALIDATE mid %lld\r\nVALIDATE alpha %lld\r\n", f[0], f[1], f[2], f[0]);
	ts_send_str(c, req);
	ts_expect(c, ":1\r\n:1\r\n:1\r\n:0\r\n");
	expect_status(d, "alpha", "exclusive", 1, 0);
	/* UNLOCK of one key of the set; UNLOCKALL of the rest */
	snprintf(req, sizeof(req), "UNLOCK mid %s\r\n", tok[2]);
	ts_send_str(c, req);
	ts_expect(c, ":0\r\n");
	ts_send_str(c, "UNLOCKALL 2 alpha zeta\r\n");
	ts_expect(c, "*2\r\n:0\r\n:0\r\n");
	expect_status(d, "zeta", "free", 0, 0);
	/* a set of shared locks, held with another session's */
	ts_send_str(d, "LOCK s1 SHARED\r\n");
	ts_expect_grant(d, NULL, NULL);
	ts_send_str(c, "LOCKALL 2 s2 s1 SHARED WAIT 0\r\n");
	expect_set(c, 2, g, NULL);
	expect_status(d, "s1", "shared", 2, 0);
	ck_assert_uint_eq(ts_srv->sessions.multi.lockall_granted_total, 2);
	close(c);
	close(d);
}
END_TEST

START_TEST(test_all_or_none_within_wait)
{
	int a = ts_client(), b = ts_client();
	ts_send_str(a, "LOCK b\r\n");
	ts_expect_grant(a, NULL, NULL);
	/* WAIT 0: "a" is free, "b" is not: nothing is held after */
	ts_send_str(b, "LOCKALL 3 c b a WAIT 0\r\n");
	ts_expect(b, "*-1\r\n");
	expect_status(a, "a", "free", 0, 0);
	expect_status(a, "c", "free", 0, 0);
	/* WAIT 100: it holds "a" while it waits for "b", then gives it back */
	ts_send_str(b, "LOCKALL 3 c b a WAIT 100\r\nPING\r\n");
	ts_expect_nothing(b);
	expect_status(a, "a", "exclusive", 1, 0);
	expect_status(a, "b", "exclusive", 1, 1);
	expect_status(a, "c", "free", 0, 0);
	ck_assert_uint_eq(ts_srv->sessions.multi.lockall_waiting, 1);
	ts_now += 100;
	locktab_tick(ts_srv->lt);
	ts_expect(b, "*-1\r\n+PONG\r\n");
	expect_status(a, "a", "free", 0, 0);
	expect_status(a, "b", "exclusive", 1, 0);
	/* the WAIT is the whole set's: "a" is waited for first, "b" gets the rest */
	ts_send_str(a, "LOCK a\r\n");
	ts_expect_grant(a, NULL, NULL);
	ts_send_str(b, "LOCKALL 2 b a WAIT 100\r\n");
	ts_expect_nothing(b);
	ts_now += 60;
	locktab_tick(ts_srv->lt);
	ts_send_str(a, "UNLOCK a\r\n");
	ts_expect(a, ":0\r\n");
	ts_expect_nothing(b);	/* has "a", waits 40 ms more for "b" */
	ts_now += 40;
	locktab_tick(ts_srv->lt);
	ts_expect(b, "*-1\r\n");
	expect_status(a, "a", "free", 0, 0);
	ck_assert_uint_eq(ts_srv->sessions.multi.lockall_not_granted_total, 3);
	ck_assert_uint_eq(ts_srv->sessions.multi.lockall_waiting, 0);
	close(a);
	close(b);
}
END_TEST

/* Two sessions name the same keys in opposite orders while a third holds
 * the first of them: both wait in "x"'s queue holding nothing, the first
 * to come is served whole, then the other. */
START_TEST(test_one_order_no_deadlock)
{
	long long f1[2], f2[2];
	int h = ts_client(), a = ts_client(), b = ts_client();
	ts_send_str(h, "LOCK x\r\n");
	ts_expect_grant(h, NULL, NULL);
	ts_send_str(a, "LOCKALL 2 y x\r\n");
	ts_expect_nothing(a);
	ts_send_str(b, "LOCKALL 2 x y\r\n");
	ts_expect_nothing(b);
	/* neither holds "y": each waits for "x", in the order they came */
	expect_status(h, "y", "free", 0, 0);
	expect_status(h, "x", "exclusive", 1, 2);
	ts_send_str(h, "UNLOCK x\r\n");
	ts_expect(h, ":0\r\n");
	expect_set(a, 2, f1, NULL);
	ts_expect_nothing(b);
	ts_send_str(a, "UNLOCKALL 2 x y\r\n");
	ts_expect(a, "*2\r\n:0\r\n:0\r\n");
	expect_set(b, 2, f2, NULL);
	ck_assert_int_gt(f2[0], f1[1]);	/* x: b's after a's */
	ck_assert_int_gt(f2[1], f1[0]);	/* y */
	close(h);
	close(a);
	close(b);
}
END_TEST

/* A single LOCK that comes after a waiting LOCKALL waits behind it in the
 * key's queue, and the reverse. */
START_TEST(test_fifo_with_single_locks)
{
	long long f[2];
	int h = ts_client(), m = ts_client(), s = ts_client();
	ts_send_str(h, "LOCK b\r\n");
	ts_expect_grant(h, NULL, NULL);
	ts_send_str(m, "LOCKALL 2 a b\r\n");	/* holds a, waits for b */
	ts_expect_nothing(m);
	ts_send_str(s, "LOCK b\r\n");		/* behind it */
	ts_expect_nothing(s);
	ts_send_str(h, "UNLOCK b\r\n");
	ts_expect(h, ":0\r\n");
	expect_set(m, 2, f, NULL);
	ts_expect_nothing(s);
	ts_send_str(m, "UNLOCK b\r\n");
	ts_expect(m, ":0\r\n");
	ts_expect_grant(s, NULL, NULL);
	/* and a LOCKALL behind a single LOCK's wait */
	ts_send_str(h, "LOCK a\r\n");		/* m holds a: h waits */
	ts_expect_nothing(h);
	ts_send_str(s, "LOCKALL 2 a c\r\n");	/* behind h for a */
	ts_expect_nothing(s);
	ts_send_str(m, "UNLOCK a\r\n");
	ts_expect(m, ":0\r\n");
	ts_expect_grant(h, NULL, NULL);
	ts_expect_nothing(s);
	ts_send_str(h, "UNLOCK a\r\n");
	ts_expect(h, ":0\r\n");
	expect_set(s, 2, f, NULL);
	close(h);
	close(m);
	close(s);
}
END_TEST

START_TEST(test_reentrant_and_mode)
{
	long long f[2], fa;
	char tok[TOKEN_LEN + 1];
	int c = ts_client(), d = ts_client();
	ts_send_str(c, "LOCK a\r\n");
	fa = ts_expect_grant(c, tok, NULL);
	ts_send_str(c, "LOCKALL 2 b a\r\n");
	expect_set(c, 2, f, NULL);
	ck_assert_int_eq(f[1], fa);	/* a: the holding the session had */
	ts_send_str(c, "UNLOCKALL 2 a b\r\n");
	ts_expect(c, "*2\r\n:1\r\n:0\r\n");
	expect_status(d, "a", "exclusive", 1, 0);
	/* a key held in another mode: an error, and nothing else kept */
	ts_send_str(c, "LOCKALL 2 a b SHARED\r\n");
	ts_expect(c, "-ERR a key is held by this session in exclusive mode; unlock it "
	    "first\r\n");
	expect_status(d, "b", "free", 0, 0);
	ts_send_str(c, "UNLOCK a\r\n");
	ts_expect(c, ":0\r\n");
	/* DETACH: given back by token when the set cannot be had */
	ts_send_str(d, "LOCK b\r\n");
	ts_expect_grant(d, NULL, NULL);
	ts_send_str(c, "LOCKALL 2 a b TTL 1000 DETACH WAIT 0\r\n");
	ts_expect(c, "*-1\r\n");
	expect_status(d, "a", "free", 0, 0);
	ck_assert_uint_eq(ts_srv->sessions.multi.lockall_errors_total, 1);
	close(c);
	close(d);
}
END_TEST

START_TEST(test_counted_in_the_session_limit)
{
	ts_conf->max_locks_per_session = 3;	/* the check before any key is taken */
	int c = ts_client();
	ts_send_str(c, "LOCK a\r\n");
	ts_expect_grant(c, NULL, NULL);
	ts_send_str(c, "LOCKALL 4 a b c d\r\n");
	ts_expect(c, "-LIMIT too many locks held by this session "
	    "(limits.max_locks_per_session is 3, waits included)\r\n");
	expect_status(c, "b", "free", 0, 0);
	/* a key held already does not count again */
	ts_send_str(c, "LOCKALL 3 a b c\r\n");
	ts_expect(c, "*3\r\n");
	for (int i = 0; i < 3; i++)
		ts_expect_grant(c, NULL, NULL);
	close(c);
}
END_TEST

START_TEST(test_close_while_waiting)
{
	int h = ts_client(), c = ts_client();
	ts_send_str(h, "LOCK b\r\n");
	ts_expect_grant(h, NULL, NULL);
	ts_send_str(c, "LOCKALL 2 a b\r\n");
	ts_expect_nothing(c);
	expect_status(h, "a", "exclusive", 1, 0);
	close(c);
	ts_pump();
	expect_status(h, "a", "free", 0, 0);
	expect_status(h, "b", "exclusive", 1, 0);
	ck_assert_uint_eq(ts_srv->sessions.multi.lockall_waiting, 0);
	close(h);
}
END_TEST

/* ---- on the fake backend ------------------------------------------------- */

/* The second key fails in the backend, for good (a WAIT left would wait
 * through an error that may pass): the first is given back, and the answer
 * waits until the backend has it. */
START_TEST(test_backend_error_gives_back_first)
{
	int c = ts_client();
	fk.lasting = 1;
	ts_send_str(c, "LOCKALL 2 b a\r\nPING\r\n");
	ts_pump();
	fk_expect(0, FK_ACQUIRE, "a");
	fk_complete(BE_OK, 7);
	ts_pump();
	fk_expect(0, FK_ACQUIRE, "b");
	fk_complete(BE_ERROR, 0);
	ts_pump();
	/* the try failed: a is given back and the keys are taken in order,
	 * where b fails again */
	fk_expect(0, FK_RELEASE, "a");
	fk_complete(BE_OK, 0);
	ts_pump();
	fk_expect(0, FK_ACQUIRE, "a");
	fk_complete(BE_OK, 8);
	ts_pump();
	fk_expect(0, FK_ACQUIRE, "b");
	fk_complete(BE_ERROR, 0);
	ts_pump();
	fk_expect(0, FK_RELEASE, "a");
	ts_expect_nothing(c);
	fk_complete(BE_OK, 0);
	ts_pump();
	char line[256];
	ts_recv_line(c, line, sizeof(line));
	ck_assert_msg(strncmp(line, "-BACKEND ", 9) == 0, "%s", line);
	ts_expect(c, "+PONG\r\n");
	ck_assert_uint_eq(ts_srv->sessions.multi.lockall_errors_total, 1);
	close(c);
}
END_TEST

/* The position of the pending operation of kind on key; fails if none. */
static size_t
pending_on(enum fk_kind kind, const char *key)
{
	for (size_t i = 0; i < fk.npend; i++) {
		struct fk_op *op = fk_pending(i);
		if (op->kind == kind && strcmp(op->key, key) == 0)
			return i;
	}
	ck_abort_msg("no pending operation of kind %d on %s", (int)kind, key);
	return 0;
}

/* Free keys are tried at once: one round trip for the set. One taken
 * elsewhere: those had are given back, and the keys are taken in order. */
START_TEST(test_tried_at_once_then_in_order)
{
	long long f[2];
	int c = ts_client();
	ts_send_str(c, "LOCKALL 2 b a WAIT 5000\r\n");
	ts_pump();
	ck_assert_uint_eq(fk.npend, 2);		/* both asked before any answer */
	fk_complete_at(pending_on(FK_ACQUIRE, "a"), BE_OK, 7);
	fk_complete_at(pending_on(FK_ACQUIRE, "b"), BE_BUSY, 0);
	ts_pump();
	ts_expect_nothing(c);
	fk_complete_at(pending_on(FK_RELEASE, "a"), BE_OK, 0);
	ts_pump();
	fk_complete_at(pending_on(FK_ACQUIRE, "a"), BE_OK, 9);
	ts_pump();
	ck_assert_uint_eq(fk.npend, 1);		/* b only after a */
	fk_complete_at(pending_on(FK_ACQUIRE, "b"), BE_OK, 10);
	ts_pump();
	expect_set(c, 2, f, NULL);
	ck_assert_int_eq(f[0], 10);
	ck_assert_int_eq(f[1], 9);
	/* WAIT 0: the try is the only one */
	int d = ts_client();
	ts_send_str(d, "LOCKALL 2 x y WAIT 0\r\n");
	ts_pump();
	ck_assert_uint_eq(fk.npend, 2);
	fk_complete_at(pending_on(FK_ACQUIRE, "x"), BE_OK, 11);
	fk_complete_at(pending_on(FK_ACQUIRE, "y"), BE_BUSY, 0);
	ts_pump();
	fk_complete_at(pending_on(FK_RELEASE, "x"), BE_OK, 0);
	ts_pump();
	ts_expect(d, "*-1\r\n");
	ck_assert_uint_eq(fk.npend, 0);
	close(d);
	close(c);
	ts_pump();
	fk_drain();
}
END_TEST

/* The session goes while its second key is in the backend: the first is
 * released, the second given back when it comes. */
START_TEST(test_close_while_a_key_is_in_flight)
{
	int c = ts_client();
	ts_send_str(c, "LOCKALL 2 a b\r\n");
	ts_pump();
	fk_complete(BE_OK, 7);
	ts_pump();
	fk_expect(0, FK_ACQUIRE, "b");
	close(c);
	ts_pump();
	ck_assert_uint_eq(ts_srv->sessions.count, 0);
	fk_expect(1, FK_RELEASE, "a");
	fk_complete_at(1, BE_OK, 0);
	fk_complete(BE_OK, 8);		/* b's grant, to nobody */
	fk_expect(0, FK_RELEASE, "b");
	fk_complete(BE_OK, 0);
	ts_pump();
	ck_assert(locktab_idle(ts_srv->lt));
	ck_assert_uint_eq(ts_srv->sessions.multi.lockall_waiting, 0);
}
END_TEST

/* A key of the set is lost while the next is awaited: the LOCKALL is
 * withdrawn, the loss is its answer, and nothing of the set is kept. */
START_TEST(test_loss_while_waiting_withdraws)
{
	int h = ts_client(), c = ts_client();
	ts_send_str(h, "LOCK k\r\n");
	ts_pump();
	fk_complete(BE_OK, 3);
	ts_expect_grant(h, NULL, NULL);
	ts_send_str(c, "LOCKALL 2 k a\r\nPING\r\n");
	ts_pump();
	char tok[TOKEN_LEN + 1];
	memcpy(tok, fk_expect(0, FK_ACQUIRE, "a")->token, sizeof(tok));
	fk_complete(BE_OK, 5);
	ts_pump();
	ts_expect_nothing(c);	/* holds a, waits for k */
	fk_now += 10000;	/* a's renewal finds another owner */
	locktab_tick(ts_srv->lt);
	long r = fk_find(FK_RENEW, tok);
	ck_assert_int_ge(r, 0);
	fk_complete_at((size_t)r, BE_NOTOWNER, 0);
	ts_pump();
	ts_expect(c, "-LOST a 5 the fake backend says so\r\n+PONG\r\n");
	fk_drain();
	ts_pump();
	expect_status(c, "k", "exclusive", 1, 0);	/* its wait is gone */
	ck_assert_uint_eq(ts_srv->sessions.multi.lockall_waiting, 0);
	fk_drain();
	close(c);
	close(h);
	ts_pump();
	fk_drain();
}
END_TEST

/* With lost pushes the wait goes on, but a set with a key lost meanwhile is
 * never granted: the rest is given back and the answer is -LOST. */
START_TEST(test_loss_pushed_set_never_partly)
{
	int h = ts_client(), c = ts_client();
	ts_send_str(h, "LOCK k\r\n");
	ts_pump();
	fk_complete(BE_OK, 3);
	ts_expect_grant(h, NULL, NULL);
	ts_send_str(c, "HELLO 3\r\nCLIENT LOSTPUSH ON\r\n");
	ts_expect_hello(c, 2, 3);
	ts_expect(c, "+OK\r\n");
	ts_send_str(c, "LOCKALL 2 k a\r\n");
	ts_pump();
	char tok[TOKEN_LEN + 1];
	memcpy(tok, fk_expect(0, FK_ACQUIRE, "a")->token, sizeof(tok));
	fk_complete(BE_OK, 5);
	ts_pump();
	fk_now += 10000;
	locktab_tick(ts_srv->lt);
	fk_complete_at((size_t)fk_find(FK_RENEW, tok), BE_NOTOWNER, 0);
	ts_pump();
	ts_expect(c, ">4\r\n$4\r\nlost\r\n$1\r\na\r\n:5\r\n$24\r\nthe fake backend says so\r\n");
	/* h lets k go: c takes it, finds a gone, and gives k back */
	ts_send_str(h, "UNLOCK k\r\n");
	ts_pump();
	long t = fk_find(FK_TRANSFER, NULL);
	ck_assert_int_ge(t, 0);
	fk_complete_at((size_t)t, BE_OK, 6);
	ts_pump();
	ts_expect(h, ":0\r\n");
	long rel = fk_find(FK_RELEASE, NULL);
	ck_assert_int_ge(rel, 0);
	ck_assert_str_eq(fk_pending((size_t)rel)->key, "k");
	ts_expect_nothing(c);	/* the answer waits for the release */
	fk_complete_at((size_t)rel, BE_OK, 0);
	ts_pump();
	char line[256];
	ts_recv_line(c, line, sizeof(line));
	ck_assert_msg(strncmp(line, "-LOST ", 6) == 0, "%s", line);
	close(c);
	close(h);
	ts_pump();
	fk_drain();
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("cmd_multi");

	suite_case(s, "memory", ts_setup, ts_teardown, 0,
	    SUITE_TESTS(test_syntax_and_limits, test_answer_in_the_order_given,
	    test_all_or_none_within_wait, test_one_order_no_deadlock,
	    test_fifo_with_single_locks, test_reentrant_and_mode,
	    test_counted_in_the_session_limit, test_close_while_waiting));
	suite_case(s, "backend", ts_setup_fake, ts_teardown, 0,
	    SUITE_TESTS(test_backend_error_gives_back_first, test_tried_at_once_then_in_order,
	    test_close_while_a_key_is_in_flight,
	    test_loss_while_waiting_withdraws, test_loss_pushed_set_never_partly));
	return suite_run(s);
}
