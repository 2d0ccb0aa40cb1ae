/*
 * check_dlock — tests of libdlock's connection, replies, timeouts and lock
 * calls (client/dlock.c, and LOCKALL and UNLOCKALL of client/dlock_multi.c);
 * its election calls have check_dlock_elect.
 *
 * Two groups:
 *  - "reader": libdlock against a canned server started by the test itself
 *    (bad addresses, refused connections, replies split byte by byte, pushes
 *    between replies, RESP3 attributes, verbatim and blob error strings,
 *    malformed replies). They need no daemon.
 *  - "live": libdlock against a running dlockd whose address is in
 *    DLOCK_TEST_ADDR (and password, if it has one, in DLOCK_TEST_PASSWORD).
 *    Without DLOCK_TEST_ADDR every live test fails and says so.
 *
 * The canned server and the live tests' helpers are dlock_fixture.c's.
 * Run with CK_FORK=yes: every test runs in its own process.
 */
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "clock.h"
#include "dlock.h"
#include "dlock_fixture.h"
#include "suite.h"

/* ---- reader tests (no daemon) ---- */

START_TEST(test_connect_bad_address)
{
	static const char *const bad[] = {
		"", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:port",
		"127.0.0.1:", "::1:7480", "[::1", "[::1]x", "[]:7480", ":7480",
		"unix:",
	};
	char err[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		errno = 0;
		ck_assert_ptr_null(dlock_connect(bad[i], NULL, err, sizeof(err)));
		ck_assert_msg(errno == EINVAL, "%s: errno %d", bad[i], errno);
		ck_assert_msg(strstr(err, "bad address") != NULL, "%s: %s", bad[i], err);
	}
	/* No room for the message is fine. */
	ck_assert_ptr_null(dlock_connect("[::1", NULL, NULL, 0));
}
END_TEST

START_TEST(test_connect_refused)
{
	char addr[64], err[256];

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", df_free_port());
	ck_assert_ptr_null(dlock_connect(addr, NULL, err, sizeof(err)));
	ck_assert_int_eq(errno, ECONNREFUSED);
	ck_assert_msg(strstr(err, "cannot connect to") != NULL &&
	    strstr(err, addr) != NULL && strstr(err, strerror(ECONNREFUSED)) != NULL,
	    "%s", err);

	ck_assert_ptr_null(dlock_connect("unix:/nonexistent/dlockd.sock", NULL,
	    err, sizeof(err)));
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_msg(strstr(err, "/nonexistent/dlockd.sock") != NULL, "%s", err);
}
END_TEST

START_TEST(test_reader_split_and_push)
{
	static const struct df_step steps[] = {
		/* HELLO, with an attribute in front to be skipped */
		DF_HANDSHAKE("|1\r\n+hint\r\n:1\r\n" DF_HELLO_REPLY),
		/* PING: a push arrives first, then the reply */
		{ .reply = ">4\r\n$4\r\nlost\r\n$3\r\na b\r\n:42\r\n$7\r\nexpired\r\n+PONG\r\n" },
		/* INFO as a RESP3 verbatim string */
		{ .reply = "=17\r\ntxt:version:0.1.0\r\n" },
		/* unasked: another push, then the server closes */
		{ .reply = ">4\r\n+lost\r\n$1\r\nk\r\n:7\r\n+gone\r\n", .no_read = 1 },
	};
	struct df_canned c;
	char key[8], err[256], *info;
	long long fence = 0;
	dlock_t *d;
	int r, got_k = 0;

	df_canned_start(&c, steps, sizeof(steps) / sizeof(steps[0]), 1, 1);
	d = dlock_connect(c.addr, NULL, err, sizeof(err));
	ck_assert_msg(d != NULL, "%s", err);
	ck_assert_int_eq(dlock_ping(d), 0);
	ck_assert_int_eq(dlock_poll_lost(d, key, sizeof(key), &fence), 1);
	ck_assert_str_eq(key, "a b");
	ck_assert_int_eq(fence, 42);
	info = dlock_info(d);
	ck_assert_ptr_nonnull(info);
	ck_assert_str_eq(info, "version:0.1.0");
	free(info);

	/* Poll until the close is seen; the last push comes before it. */
	for (int i = 0; i < 100; i++) {
		r = dlock_poll_lost(d, key, 2, &fence);	/* key truncated to "k" */
		if (r == 1) {
			ck_assert_str_eq(key, "k");
			ck_assert_int_eq(fence, 7);
			got_k = 1;
			continue;
		}
		if (r < 0)
			break;
		ck_assert_msg(df_wait_readable(dlock_fd(d)), "no close seen");
	}
	ck_assert_int_eq(r, -1);
	ck_assert_int_eq(got_k, 1);
	df_assert_code(d, "IO");
	ck_assert_str_eq(dlock_error(d), "connection closed by dlockd");
	/* Dead from now on: every call fails the same way, without I/O. */
	ck_assert_int_eq(dlock_ping(d), -1);
	df_assert_code(d, "IO");
	ck_assert_int_eq(dlock_poll_lost(d, NULL, 0, NULL), -1);
	dlock_close(d);
	df_canned_wait(&c);
}
END_TEST

/* dlock_suspend_notices sends CLIENT SUSPENDPUSH; "suspended" and
 * "resumed" pushes are queued for dlock_poll_suspend, apart from losses. */
START_TEST(test_reader_suspend_pushes)
{
	static const struct df_step steps[] = {
		DF_HANDSHAKE(DF_HELLO_REPLY),
		{ .reply = "+OK\r\n", .expect = "SUSPENDPUSH\r\n$2\r\nON" },
		/* PING: pushes arrive first, then the reply */
		{ .reply = ">4\r\n$9\r\nsuspended\r\n$1\r\nk\r\n:7\r\n$4\r\nslow\r\n"
		  ">4\r\n$4\r\nlost\r\n$1\r\nj\r\n:8\r\n$4\r\ngone\r\n"
		  ">3\r\n$7\r\nresumed\r\n$1\r\nk\r\n:7\r\n+PONG\r\n" },
		{ .reply = "+OK\r\n", .expect = "SUSPENDPUSH\r\n$3\r\nOFF" },
	};
	struct df_canned c;
	char key[8], err[256];
	long long fence = 0;
	int suspended = -1;
	dlock_t *d;

	df_canned_start(&c, steps, sizeof(steps) / sizeof(steps[0]), 1, 1);
	d = dlock_connect(c.addr, NULL, err, sizeof(err));
	ck_assert_msg(d != NULL, "%s", err);
	ck_assert_int_eq(dlock_poll_suspend(d, key, sizeof(key), &fence, &suspended), 0);
	ck_assert_int_eq(dlock_suspend_notices(d, 1), 0);
	ck_assert_int_eq(dlock_ping(d), 0);
	ck_assert_int_eq(dlock_poll_suspend(d, key, sizeof(key), &fence, &suspended), 1);
	ck_assert_str_eq(key, "k");
	ck_assert_int_eq(fence, 7);
	ck_assert_int_eq(suspended, 1);
	ck_assert_int_eq(dlock_poll_suspend(d, key, sizeof(key), &fence, &suspended), 1);
	ck_assert_int_eq(suspended, 0);
	ck_assert_int_eq(dlock_poll_suspend(d, key, sizeof(key), &fence, &suspended), 0);
	/* the loss is told apart */
	ck_assert_int_eq(dlock_poll_lost(d, key, sizeof(key), &fence), 1);
	ck_assert_str_eq(key, "j");
	ck_assert_int_eq(dlock_suspend_notices(d, 0), 0);
	dlock_close(d);
	df_canned_wait(&c);
}
END_TEST

START_TEST(test_reader_replies)
{
	static const struct df_step steps[] = {
		DF_HANDSHAKE(DF_HELLO_REPLY),
		{ .reply = "*3\r\n$32\r\n" DF_TOKEN32 "\r\n:7\r\n:30000\r\n" },	/* LOCK */
		{ .reply = "_\r\n" },						/* LOCK */
		{ .reply = "*-1\r\n" },						/* LOCK (RESP2 null) */
		{ .reply = "-NOTHELD key is not held by this session\r\n" },	/* UNLOCK */
		{ .reply = ":2\r\n" },						/* UNLOCK */
		{ .reply = ":-1\r\n" },					/* UNLOCK: negative */
		{ .reply = "%7\r\n+mode\r\n$6\r\nshared\r\n+holders\r\n:2\r\n"
		  "+waiters\r\n:1\r\n+fence\r\n:99\r\n+ttl_ms\r\n:-1\r\n"
		  "+limit\r\n:0\r\n+future\r\n#t\r\n" },		/* STATUS */
		{ .reply = ":1\r\n" },						/* VALIDATE */
		{ .reply = "+OK\r\n" },						/* EXTEND: wrong type */
		{ .reply = "$4\r\nPONG\r\n" },					/* PING */
		{ .reply = "!21\r\nSYNTAX invalid syntax\r\n" },			/* PING: blob error */
		{ .reply = ":12x\r\n" },						/* PING: malformed */
	};
	struct dlock_grant g;
	struct dlock_status st;
	struct df_canned c;
	char err[256];
	dlock_t *d;

	df_canned_start(&c, steps, sizeof(steps) / sizeof(steps[0]), 0, 1);
	d = dlock_connect(c.addr, NULL, err, sizeof(err));
	ck_assert_msg(d != NULL, "%s", err);
	ck_assert_int_eq(dlock_lock(d, "k", NULL, &g), 1);
	ck_assert_str_eq(g.token, DF_TOKEN32);
	ck_assert_int_eq(g.fence, 7);
	ck_assert_int_eq(g.ttl_ms, 30000);
	ck_assert_int_eq(dlock_lock(d, "k", NULL, &g), 0);
	ck_assert_int_eq(dlock_lock(d, "k", NULL, NULL), 0);
	ck_assert_int_eq(dlock_unlock(d, "k", NULL), -1);
	df_assert_code(d, "NOTHELD");
	ck_assert_str_eq(dlock_error(d), "NOTHELD key is not held by this session");
	ck_assert_int_eq(dlock_unlock(d, "k", NULL), 2);
	ck_assert_str_eq(dlock_error_code(d), "");
	/* a negative count is no answer: a failure that says so */
	ck_assert_int_eq(dlock_unlock(d, "k", NULL), -1);
	df_assert_code(d, "PROTO");
	ck_assert_int_eq(dlock_status(d, "k", &st), 0);
	SUITE_ASSERT_STATUS(st, "shared", 2, 1, 99, -1, 0);
	ck_assert_int_eq(dlock_validate(d, "k", 99), 1);
	ck_assert_int_eq(dlock_extend(d, "k", 1000, NULL), -1);
	df_assert_code(d, "PROTO");
	/* A reply of the wrong type leaves the connection usable. */
	ck_assert_int_eq(dlock_ping(d), 0);
	ck_assert_int_eq(dlock_ping(d), -1);
	df_assert_code(d, "SYNTAX");
	ck_assert_str_eq(dlock_error(d), "SYNTAX invalid syntax");
	ck_assert_int_eq(dlock_ping(d), -1);
	df_assert_code(d, "PROTO");
	ck_assert_msg(strstr(dlock_error(d), "bad integer") != NULL, "%s", dlock_error(d));
	dlock_close(d);
	df_canned_wait(&c);
}
END_TEST

/* LOCKALL and UNLOCKALL: their requests, and replies of every shape. */
START_TEST(test_reader_lockall)
{
	static const struct df_step steps[] = {
		DF_HANDSHAKE(DF_HELLO_REPLY),
		{ .expect = "*8\r\n$7\r\nLOCKALL\r\n$1\r\n2\r\n$1\r\na\r\n$2\r\nbb\r\n"
		  "$3\r\nTTL\r\n$4\r\n5000\r\n$4\r\nWAIT\r\n$3\r\n100\r\n",
		  .reply = "*2\r\n*3\r\n$32\r\n" DF_TOKEN32 "\r\n:7\r\n:5000\r\n"
		  "*3\r\n$2\r\nt2\r\n:9\r\n:4999\r\n" },
		{ .reply = "_\r\n" },						/* LOCKALL */
		{ .reply = "*-1\r\n" },					/* LOCKALL (RESP2) */
		{ .reply = "*1\r\n*3\r\n$2\r\nt1\r\n:7\r\n:5000\r\n" },	/* one short */
		{ .reply = "*2\r\n*3\r\n$2\r\nt1\r\n:7\r\n:5000\r\n:1\r\n" },	/* no grant */
		{ .reply = "-LIMIT too many keys\r\n" },				/* LOCKALL */
		{ .expect = "*4\r\n$9\r\nUNLOCKALL\r\n$1\r\n2\r\n$1\r\na\r\n$2\r\nbb\r\n",
		  .reply = "*2\r\n:0\r\n:1\r\n" },
		{ .reply = "*2\r\n:0\r\n:-1\r\n" },				/* negative */
		{ .reply = "-NOTHELD bb is not held by this session\r\n" },	/* UNLOCKALL */
	};
	static const char *const keys[] = { "a", "bb" };
	const struct dlock_lock_opts o = df_opts(5000, 100, 0, 0, 0);
	struct dlock_grant g[2];
	long long left[2];
	struct df_canned c;
	char err[256];
	dlock_t *d;

	df_canned_start(&c, steps, sizeof(steps) / sizeof(steps[0]), 0, 1);
	d = dlock_connect(c.addr, NULL, err, sizeof(err));
	ck_assert_msg(d != NULL, "%s", err);
	ck_assert_int_eq(dlock_lockall(d, 2, keys, &o, g), 1);
	ck_assert_str_eq(g[0].token, DF_TOKEN32);
	ck_assert_int_eq(g[0].fence, 7);
	ck_assert_int_eq(g[0].ttl_ms, 5000);
	ck_assert_str_eq(g[1].token, "t2");
	ck_assert_int_eq(g[1].fence, 9);
	ck_assert_int_eq(g[1].ttl_ms, 4999);
	ck_assert_int_eq(dlock_lockall(d, 2, keys, NULL, g), 0);
	ck_assert_str_eq(dlock_error_code(d), "");
	ck_assert_int_eq(dlock_lockall(d, 2, keys, NULL, NULL), 0);
	ck_assert_int_eq(dlock_lockall(d, 2, keys, NULL, g), -1);
	df_assert_code(d, "PROTO");
	ck_assert_int_eq(dlock_lockall(d, 2, keys, NULL, g), -1);
	df_assert_code(d, "PROTO");
	ck_assert_int_eq(dlock_lockall(d, 2, keys, NULL, g), -1);
	df_assert_code(d, "LIMIT");
	ck_assert_int_eq(dlock_unlockall(d, 2, keys, left), 0);
	ck_assert_int_eq(left[0], 0);
	ck_assert_int_eq(left[1], 1);
	ck_assert_int_eq(dlock_unlockall(d, 2, keys, left), -1);
	df_assert_code(d, "PROTO");
	ck_assert_int_eq(dlock_unlockall(d, 2, keys, NULL), -1);
	df_assert_code(d, "NOTHELD");
	dlock_close(d);
	df_canned_wait(&c);
}
END_TEST

START_TEST(test_reader_status_full)
{
	static const struct df_step steps[] = {
		DF_HANDSHAKE(DF_HELLO_REPLY),
		/* RESP3: STATUS's counts, then the lists under the same names */
		{ .expect = "*3\r\n$6\r\nSTATUS\r\n$1\r\nk\r\n$4\r\nFULL\r\n",
		  .reply = "%9\r\n+mode\r\n+exclusive\r\n+holders\r\n:1\r\n+waiters\r\n:2\r\n"
		  "+fence\r\n:17\r\n+ttl_ms\r\n:900\r\n+limit\r\n:0\r\n+backend\r\n+local\r\n"
		  "+holders\r\n*1\r\n%10\r\n+session\r\n:7\r\n+name\r\n$8\r\nworker-1\r\n"
		  "+addr\r\n$14\r\n10.0.0.5:51234\r\n+mode\r\n+exclusive\r\n+fence\r\n:17\r\n"
		  "+count\r\n:2\r\n+held_ms\r\n:12345\r\n+lease_ms\r\n:900\r\n"
		  "+detached\r\n:1\r\n+future\r\n%0\r\n"
		  "+waiters\r\n*2\r\n"
		  "%7\r\n+session\r\n:9\r\n+name\r\n$0\r\n\r\n+addr\r\n$4\r\nunix\r\n"
		  "+mode\r\n+shared\r\n+waited_ms\r\n:5\r\n+wait_ms\r\n:-1\r\n+detach\r\n#f\r\n"
		  "%7\r\n+session\r\n:10\r\n+name\r\n_\r\n+addr\r\n$0\r\n\r\n"
		  "+mode\r\n+exclusive\r\n+waited_ms\r\n:1\r\n+wait_ms\r\n:300\r\n+detach\r\n#t\r\n" },
		/* RESP2, the lists in place of the counts, both empty */
		{ .reply = "*14\r\n$4\r\nmode\r\n$4\r\nfree\r\n$7\r\nholders\r\n*0\r\n"
		  "$7\r\nwaiters\r\n*0\r\n$5\r\nfence\r\n:0\r\n$6\r\nttl_ms\r\n:-1\r\n"
		  "$5\r\nlimit\r\n:0\r\n$7\r\nbackend\r\n$5\r\nlocal\r\n" },
		/* a dlockd that predates FULL */
		{ .reply = "-ERR wrong number of arguments for 'STATUS' command\r\n" },
		/* a holder that is not a map */
		{ .reply = "%3\r\n+mode\r\n+exclusive\r\n+holders\r\n*1\r\n:1\r\n"
		  "+waiters\r\n*0\r\n" },
		/* no waiters list */
		{ .reply = "%2\r\n+mode\r\n+free\r\n+holders\r\n*0\r\n" },
	};
	struct dlock_status_full f;
	struct df_canned c;
	char err[256];
	dlock_t *d;

	df_canned_start(&c, steps, sizeof(steps) / sizeof(steps[0]), 0, 1);
	d = dlock_connect(c.addr, NULL, err, sizeof(err));
	ck_assert_msg(d != NULL, "%s", err);
	ck_assert_int_eq(dlock_status_full(d, "k", &f), 0);
	ck_assert_str_eq(f.status.mode, "exclusive");
	ck_assert_int_eq(f.status.holders, 1);
	ck_assert_int_eq(f.status.waiters, 2);
	ck_assert_int_eq(f.status.fence, 17);
	ck_assert_str_eq(f.status.backend, "local");
	ck_assert_uint_eq(f.nholders, 1);
	ck_assert_int_eq(f.holders[0].session, 7);
	ck_assert_str_eq(f.holders[0].name, "worker-1");
	ck_assert_str_eq(f.holders[0].addr, "10.0.0.5:51234");
	ck_assert_str_eq(f.holders[0].mode, "exclusive");
	ck_assert_int_eq(f.holders[0].fence, 17);
	ck_assert_int_eq(f.holders[0].count, 2);
	ck_assert_int_eq(f.holders[0].held_ms, 12345);
	ck_assert_int_eq(f.holders[0].lease_ms, 900);
	ck_assert_int_eq(f.holders[0].detached, 1);
	ck_assert_uint_eq(f.nwaiters, 2);
	ck_assert_int_eq(f.waiters[0].session, 9);
	ck_assert_str_eq(f.waiters[0].name, "");
	ck_assert_str_eq(f.waiters[0].addr, "unix");
	ck_assert_str_eq(f.waiters[0].mode, "shared");
	ck_assert_int_eq(f.waiters[0].waited_ms, 5);
	ck_assert_int_eq(f.waiters[0].wait_ms, -1);
	ck_assert_int_eq(f.waiters[0].detach, 0);
	ck_assert_int_eq(f.waiters[1].session, 10);
	ck_assert_str_eq(f.waiters[1].name, "");
	ck_assert_int_eq(f.waiters[1].wait_ms, 300);
	ck_assert_int_eq(f.waiters[1].detach, 1);
	dlock_status_full_free(&f);
	ck_assert_ptr_null(f.holders);
	ck_assert_int_eq(dlock_status_full(d, "k", &f), 0);
	ck_assert_str_eq(f.status.mode, "free");
	ck_assert_uint_eq(f.nholders, 0);
	ck_assert_uint_eq(f.nwaiters, 0);
	ck_assert_int_eq(f.status.holders, 0);
	dlock_status_full_free(&f);
	ck_assert_int_eq(dlock_status_full(d, "k", &f), -1);
	df_assert_code(d, "ERR");
	ck_assert_int_eq(dlock_status_full(d, "k", &f), -1);
	df_assert_code(d, "PROTO");
	ck_assert_int_eq(dlock_status_full(d, "k", &f), -1);
	df_assert_code(d, "PROTO");
	ck_assert_uint_eq(f.nholders, 0);
	ck_assert_ptr_null(f.holders);
	dlock_status_full_free(&f);
	ck_assert_int_eq(dlock_status_full(d, "k", NULL), -1);
	df_assert_code(d, "ARG");
	dlock_close(d);
	df_canned_wait(&c);
}
END_TEST

START_TEST(test_reader_handshake_failures)
{
	static const struct df_step garbage[] = {
		{ .reply = "HTTP/1.1 400 Bad Request\r\n\r\n" },
	};
	static const struct df_step closed[] = {
		{ .reply = NULL },
	};
	static const struct df_step wrongpass[] = {
		{ .reply = "-WRONGPASS invalid password\r\n" },
	};
	static const struct df_step notmap[] = {
		{ .reply = "+OK\r\n" },
	};
	static const struct df_step nolostpush[] = {
		{ .reply = DF_HELLO_REPLY },
		{ .reply = "-ERR unknown CLIENT subcommand or wrong number of arguments\r\n", .expect = DF_LOSTPUSH_REQ },
	};
	static const struct df_step lostpush_notok[] = {
		{ .reply = DF_HELLO_REPLY },
		{ .reply = ":1\r\n", .expect = DF_LOSTPUSH_REQ },
	};
	static const struct df_step lostpush_noauth[] = {
		{ .reply = DF_HELLO_REPLY },
		{ .reply = "-NOAUTH Authentication required.\r\n", .expect = DF_LOSTPUSH_REQ },
		{ .reply = "-NOAUTH Authentication required.\r\n", .expect = "STATUS" },
	};
	static const struct df_step lostpush_closed[] = {
		{ .reply = DF_HELLO_REPLY },
		{ .reply = NULL, .expect = DF_LOSTPUSH_REQ },
	};
	struct dlock_status st;
	struct df_canned c;
	char err[256];
	dlock_t *d;

	df_canned_start(&c, garbage, 1, 0, 1);
	ck_assert_ptr_null(dlock_connect(c.addr, NULL, err, sizeof(err)));
	ck_assert_int_eq(errno, EPROTO);
	ck_assert_msg(strstr(err, "unreadable reply") != NULL, "%s", err);
	df_canned_wait(&c);

	df_canned_start(&c, closed, 1, 0, 1);
	ck_assert_ptr_null(dlock_connect(c.addr, NULL, err, sizeof(err)));
	ck_assert_int_eq(errno, ECONNRESET);
	ck_assert_msg(strstr(err, "connection closed by dlockd") != NULL, "%s", err);
	df_canned_wait(&c);

	df_canned_start(&c, wrongpass, 1, 0, 1);
	ck_assert_ptr_null(dlock_connect(c.addr, "secret", err, sizeof(err)));
	ck_assert_int_eq(errno, EACCES);
	ck_assert_msg(strstr(err, "WRONGPASS invalid password") != NULL, "%s", err);
	df_canned_wait(&c);

	df_canned_start(&c, notmap, 1, 0, 1);
	ck_assert_ptr_null(dlock_connect(c.addr, NULL, err, sizeof(err)));
	ck_assert_int_eq(errno, EPROTO);
	ck_assert_msg(strstr(err, "unexpected reply to HELLO") != NULL, "%s", err);
	df_canned_wait(&c);

	/* A daemon that will not push lost locks is refused. */
	df_canned_start(&c, nolostpush, 2, 0, 1);
	ck_assert_ptr_null(dlock_connect(c.addr, NULL, err, sizeof(err)));
	ck_assert_int_eq(errno, EPROTO);
	ck_assert_msg(strstr(err, "CLIENT LOSTPUSH ON refused") != NULL &&
	    strstr(err, "ERR unknown CLIENT subcommand") != NULL, "%s", err);
	df_canned_wait(&c);

	df_canned_start(&c, lostpush_notok, 2, 0, 1);
	ck_assert_ptr_null(dlock_connect(c.addr, NULL, err, sizeof(err)));
	ck_assert_int_eq(errno, EPROTO);
	ck_assert_msg(strstr(err, "unexpected reply to CLIENT LOSTPUSH ON") != NULL, "%s", err);
	df_canned_wait(&c);

	/* Without the password: connected, but every command is refused. */
	df_canned_start(&c, lostpush_noauth, 3, 0, 1);
	d = dlock_connect(c.addr, NULL, err, sizeof(err));
	ck_assert_msg(d != NULL, "%s", err);
	ck_assert_int_eq(dlock_status(d, "k", &st), -1);
	df_assert_code(d, "NOAUTH");
	dlock_close(d);
	df_canned_wait(&c);

	df_canned_start(&c, lostpush_closed, 2, 0, 1);
	ck_assert_ptr_null(dlock_connect(c.addr, NULL, err, sizeof(err)));
	ck_assert_int_eq(errno, ECONNRESET);
	ck_assert_msg(strstr(err, "connection closed by dlockd") != NULL, "%s", err);
	df_canned_wait(&c);
}
END_TEST

/*
 * dlock_connect asks for lost pushes (the canned server checks the request),
 * and a loss notice given as an error reply ("-LOST key fence reason", what
 * a session without pushes gets) is queued for dlock_poll_lost too.
 */
START_TEST(test_reader_lost_notice)
{
	static const struct df_step steps[] = {
		DF_HANDSHAKE(DF_HELLO_REPLY),
		/* UNLOCK: a notice for an escaped key */
		{ .reply = "-LOST jobs\\x20nightly\\x5c\\xFF\\x22 42 the lease could not be "
		  "renewed in time\r\n", .expect = "UNLOCK" },
		/* UNLOCK: its own LOST error is no notice */
		{ .reply = "-LOST the lock on this key was lost: its lease ended\r\n" },
		/* PING: malformed notices are plain errors */
		{ .reply = "-LOST k x7 reason\r\n" },
		{ .reply = "-LOST k 7\r\n" },
		{ .reply = "-LOST a\\q 7 reason\r\n" },
		{ .reply = "-LOST a\\x2 7 reason\r\n" },
		/* PING: a notice with a plain key */
		{ .reply = "-LOST k 9 redis holds the lease for another owner, or it ended\r\n" },
	};
	struct df_canned c;
	char key[64], err[256];
	long long fence = 0;
	dlock_t *d;

	df_canned_start(&c, steps, sizeof(steps) / sizeof(steps[0]), 0, 0);
	d = dlock_connect(c.addr, NULL, err, sizeof(err));
	ck_assert_msg(d != NULL, "%s", err);
	ck_assert_int_eq(dlock_unlock(d, "jobs nightly", NULL), -1);
	df_assert_code(d, "LOST");
	ck_assert_str_eq(dlock_error(d), "LOST jobs\\x20nightly\\x5c\\xFF\\x22 42 the lease "
	    "could not be renewed in time");
	ck_assert_int_eq(dlock_poll_lost(d, key, sizeof(key), &fence), 1);
	ck_assert_str_eq(key, "jobs nightly\\\xff\"");
	ck_assert_int_eq(fence, 42);
	ck_assert_int_eq(dlock_poll_lost(d, key, sizeof(key), &fence), 0);

	ck_assert_int_eq(dlock_unlock(d, "jobs nightly", NULL), -1);
	df_assert_code(d, "LOST");
	ck_assert_int_eq(dlock_poll_lost(d, NULL, 0, NULL), 0);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(dlock_ping(d), -1);
		df_assert_code(d, "LOST");
		ck_assert_int_eq(dlock_poll_lost(d, NULL, 0, NULL), 0);
	}
	ck_assert_int_eq(dlock_ping(d), -1);
	ck_assert_int_eq(dlock_poll_lost(d, key, sizeof(key), &fence), 1);
	ck_assert_str_eq(key, "k");
	ck_assert_int_eq(fence, 9);
	/* An error reply leaves the connection usable. */
	ck_assert_int_eq(dlock_poll_lost(d, key, sizeof(key), &fence), 0);
	dlock_close(d);
	df_canned_wait(&c);
}
END_TEST

/*
 * dlockd answers the command after a loss it pushed with the loss again
 * ("-LOST key fence reason", for clients whose library drops pushes): the
 * loss is queued once, and the command, which was not run, is sent again.
 */
START_TEST(test_reader_notice_after_push)
{
	static const struct df_step steps[] = {
		DF_HANDSHAKE(DF_HELLO_REPLY),
		/* unasked: two losses pushed */
		{ .reply = ">4\r\n$4\r\nlost\r\n$1\r\nk\r\n:7\r\n$4\r\ngone\r\n"
		  ">4\r\n$4\r\nlost\r\n$1\r\nj\r\n:8\r\n$4\r\ngone\r\n", .no_read = 1 },
		/* PING: answered by both notices, then by itself */
		{ .reply = "-LOST k 7 gone\r\n", .expect = "PING" },
		{ .reply = "-LOST j 8 gone\r\n", .expect = "PING" },
		{ .reply = "+PONG\r\n", .expect = "PING" },
		/* a notice with no push before it fails its command, as ever */
		{ .reply = "-LOST m 9 gone\r\n", .expect = "PING" },
	};
	struct df_canned c;
	char key[8], err[256];
	long long fence = 0;
	dlock_t *d;

	df_canned_start(&c, steps, sizeof(steps) / sizeof(steps[0]), 0, 0);
	d = dlock_connect(c.addr, NULL, err, sizeof(err));
	ck_assert_msg(d != NULL, "%s", err);
	ck_assert_msg(dlock_ping(d) == 0, "%s", dlock_error(d));
	ck_assert_int_eq(dlock_poll_lost(d, key, sizeof(key), &fence), 1);
	ck_assert_str_eq(key, "k");
	ck_assert_int_eq(fence, 7);
	ck_assert_int_eq(dlock_poll_lost(d, key, sizeof(key), &fence), 1);
	ck_assert_str_eq(key, "j");
	ck_assert_int_eq(fence, 8);
	ck_assert_int_eq(dlock_poll_lost(d, key, sizeof(key), &fence), 0);
	ck_assert_int_eq(dlock_ping(d), -1);
	df_assert_code(d, "LOST");
	ck_assert_int_eq(dlock_poll_lost(d, key, sizeof(key), &fence), 1);
	ck_assert_str_eq(key, "m");
	ck_assert_int_eq(dlock_poll_lost(d, key, sizeof(key), &fence), 0);
	dlock_close(d);
	df_canned_wait(&c);
}
END_TEST

/*
 * A daemon that takes requests and never answers: dlock_ping gives up after
 * the handle's timeout, the connection is dead from then on, and its socket
 * is shut down at once (the server sees the end before dlock_close).
 */
START_TEST(test_call_timeout)
{
	static const struct df_step steps[] = {
		DF_HANDSHAKE(DF_HELLO_REPLY),
		{ .reply = NULL, .expect = "PING" },	/* no answer */
		{ .eof = 1 },
	};
	struct df_canned c;
	char err[256];
	long long t0, dt;
	dlock_t *d;

	df_canned_start(&c, steps, sizeof(steps) / sizeof(steps[0]), 0, 1);
	d = dlock_connect(c.addr, NULL, err, sizeof(err));
	ck_assert_msg(d != NULL, "%s", err);
	ck_assert_int_eq(dlock_set_timeout(d, 300), 0);
	t0 = (long long)clock_ms();
	errno = 0;
	ck_assert_int_eq(dlock_ping(d), -1);
	dt = (long long)clock_ms() - t0;
	ck_assert_int_eq(errno, ETIMEDOUT);
	df_assert_code(d, "IO");
	ck_assert_str_eq(dlock_error(d), "dlockd did not answer within 300 ms");
	ck_assert_msg(dt >= 290 && dt < 2000, "PING gave up after %lld ms", dt);
	df_canned_wait(&c);	/* the server saw the connection end */

	/* Dead: every call fails at once, the same way. */
	t0 = (long long)clock_ms();
	errno = 0;
	ck_assert_int_eq(dlock_ping(d), -1);
	ck_assert_int_eq(errno, ETIMEDOUT);
	df_assert_code(d, "IO");
	ck_assert_str_eq(dlock_error(d), "dlockd did not answer within 300 ms");
	ck_assert_int_eq(dlock_lock(d, "k", NULL, NULL), -1);
	df_assert_code(d, "IO");
	ck_assert_int_eq(dlock_poll_lost(d, NULL, 0, NULL), -1);
	ck_assert_msg((long long)clock_ms() - t0 < 100, "a dead handle waited");
	dlock_close(d);
}
END_TEST

/*
 * The timeout covers the whole reply, not each read: a reply that trickles in
 * a byte every 50 ms, 17 bytes in all, is overdue at 400 ms. 0 means no
 * timeout; a negative timeout is refused.
 */
START_TEST(test_call_timeout_whole_reply)
{
	static const struct df_step steps[] = {
		DF_HANDSHAKE(DF_HELLO_REPLY),
		{ .reply = "+PONG\r\n", .expect = "PING", .delay_ms = 600 },
		{ .reply = "+PONG\r\n", .expect = "PING", .gap_ms = 40 },
		{ .reply = "$10\r\n0123456789\r\n", .expect = "PING", .gap_ms = 50 },
		{ .eof = 1 },
	};
	struct df_canned c;
	char err[256];
	long long t0, dt;
	dlock_t *d;

	df_canned_start(&c, steps, sizeof(steps) / sizeof(steps[0]), 0, 1);
	d = dlock_connect(c.addr, NULL, err, sizeof(err));
	ck_assert_msg(d != NULL, "%s", err);
	ck_assert_int_eq(dlock_set_timeout(d, -1), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_set_timeout(NULL, 100), -1);
	ck_assert_int_eq(errno, EINVAL);

	/* 0: a reply 600 ms late is waited for. */
	ck_assert_int_eq(dlock_set_timeout(d, 0), 0);
	t0 = (long long)clock_ms();
	ck_assert_int_eq(dlock_ping(d), 0);
	dt = (long long)clock_ms() - t0;
	ck_assert_msg(dt >= 550, "PING answered after %lld ms", dt);

	/* Within the timeout, however slowly it comes. */
	ck_assert_int_eq(dlock_set_timeout(d, 1500), 0);
	ck_assert_int_eq(dlock_ping(d), 0);

	ck_assert_int_eq(dlock_set_timeout(d, 400), 0);
	t0 = (long long)clock_ms();
	ck_assert_int_eq(dlock_ping(d), -1);
	dt = (long long)clock_ms() - t0;
	df_assert_code(d, "IO");
	ck_assert_str_eq(dlock_error(d), "dlockd did not answer within 400 ms");
	ck_assert_msg(dt >= 390 && dt < 800, "PING gave up after %lld ms", dt);
	df_canned_wait(&c);
	dlock_close(d);
}
END_TEST

/*
 * A LOCK with WAIT w may wait w + the timeout for its reply; one without
 * WAIT has no reply timeout. So do CAMPAIGN and OBSERVE (... AFTER r).
 */
START_TEST(test_lock_wait_timeout)
{
	static const struct df_step steps[] = {
		DF_HANDSHAKE(DF_HELLO_REPLY),
		{ .reply = "_\r\n", .expect = "$4\r\nWAIT\r\n$3\r\n600\r\n", .delay_ms = 700 },
		{ .reply = "*3\r\n$32\r\n" DF_TOKEN32 "\r\n:7\r\n:30000\r\n",
		  .expect = "*2\r\n$4\r\nLOCK\r\n$1\r\nk\r\n", .delay_ms = 700 },
		{ .reply = "_\r\n", .expect = "$1\r\nv\r\n$4\r\nWAIT\r\n$3\r\n600\r\n",
		  .delay_ms = 700 },						/* CAMPAIGN */
		{ .reply = "*3\r\n$32\r\n" DF_TOKEN32 "\r\n:7\r\n:30000\r\n",
		  .expect = "*3\r\n$8\r\nCAMPAIGN\r\n$1\r\nk\r\n$1\r\nv\r\n", .delay_ms = 700 },
		{ .reply = "_\r\n", .expect = "$4\r\nWAIT\r\n$3\r\n600\r\n", .delay_ms = 700 },
		{ .reply = "*5\r\n$1\r\nv\r\n:3\r\n:8\r\n+exclusive\r\n:1\r\n",
		  .expect = "*4\r\n$7\r\nOBSERVE\r\n$1\r\nk\r\n$5\r\nAFTER\r\n$1\r\n7\r\n",
		  .delay_ms = 700 },
		{ .reply = NULL, .expect = "$4\r\nWAIT\r\n$3\r\n200\r\n" },	/* no answer */
		{ .eof = 1 },
	};
	struct dlock_lock_opts o = df_opts(0, 600, 0, 0, 0);
	struct dlock_leader l;
	struct dlock_grant g;
	struct df_canned c;
	char err[256];
	long long t0, dt;
	dlock_t *d;

	df_canned_start(&c, steps, sizeof(steps) / sizeof(steps[0]), 0, 1);
	d = dlock_connect(c.addr, NULL, err, sizeof(err));
	ck_assert_msg(d != NULL, "%s", err);
	ck_assert_int_eq(dlock_set_timeout(d, 300), 0);
	t0 = (long long)clock_ms();
	ck_assert_msg(dlock_lock(d, "k", &o, &g) == 0, "%s", dlock_error(d));
	ck_assert_msg((long long)clock_ms() - t0 >= 650, "LOCK WAIT 600 answered too soon");

	o.wait_ms = -1;
	ck_assert_msg(dlock_lock(d, "k", &o, &g) == 1, "%s", dlock_error(d));
	ck_assert_str_eq(g.token, DF_TOKEN32);

	o.wait_ms = 600;
	t0 = (long long)clock_ms();
	ck_assert_msg(dlock_campaign(d, "k", "v", 1, &o, &g) == 0, "%s", dlock_error(d));
	ck_assert_msg((long long)clock_ms() - t0 >= 650, "CAMPAIGN WAIT 600 answered too soon");
	ck_assert_msg(dlock_campaign(d, "k", "v", 1, NULL, &g) == 1, "%s", dlock_error(d));
	t0 = (long long)clock_ms();
	ck_assert_msg(dlock_observe(d, "k", 7, 600, &l) == 0, "%s", dlock_error(d));
	ck_assert_msg((long long)clock_ms() - t0 >= 650, "OBSERVE WAIT 600 answered too soon");
	ck_assert_msg(dlock_observe(d, "k", 7, -1, &l) == 1, "%s", dlock_error(d));
	ck_assert_int_eq(l.revision, 8);

	o.wait_ms = 200;
	t0 = (long long)clock_ms();
	ck_assert_int_eq(dlock_lock(d, "k", &o, &g), -1);
	dt = (long long)clock_ms() - t0;
	df_assert_code(d, "IO");
	ck_assert_str_eq(dlock_error(d), "dlockd did not answer within 500 ms");
	ck_assert_msg(dt >= 490 && dt < 2000, "LOCK WAIT 200 gave up after %lld ms", dt);
	df_canned_wait(&c);
	dlock_close(d);
}
END_TEST

/* No TCP options on a Unix socket (keepalive is for TCP only). */
START_TEST(test_unix_no_keepalive)
{
	static const struct df_step steps[] = {
		DF_HANDSHAKE(DF_HELLO_REPLY),
		{ .reply = "+PONG\r\n", .expect = "PING" },
		{ .eof = 1 },
	};
	struct df_canned c;
	char err[256];
	int v = -1;
	socklen_t vlen = sizeof(v);
	dlock_t *d;

	df_canned_start_unix(&c, steps, sizeof(steps) / sizeof(steps[0]));
	d = dlock_connect(c.addr, NULL, err, sizeof(err));
	ck_assert_msg(d != NULL, "%s", err);
	ck_assert_int_eq(dlock_ping(d), 0);
	ck_assert_int_eq(getsockopt(dlock_fd(d), SOL_SOCKET, SO_KEEPALIVE, &v, &vlen), 0);
	ck_assert_int_eq(v, 0);
	dlock_close(d);
	df_canned_wait(&c);
}
END_TEST

/* ---- live tests ---- */

/* TCP connections probe a silent daemon (keepalive) and bound unacked data. */
START_TEST(test_tcp_keepalive)
{
	dlock_t *d = df_conn();
	int v;
	unsigned int uv;
	socklen_t vlen;

#define SOCKOPT(level, name, want) do { \
		v = -1; \
		vlen = sizeof(v); \
		ck_assert_int_eq(getsockopt(dlock_fd(d), level, name, &v, &vlen), 0); \
		ck_assert_msg(v == (want), #name " is %d, not %d", v, want); \
	} while (0)
	SOCKOPT(SOL_SOCKET, SO_KEEPALIVE, 1);
	SOCKOPT(IPPROTO_TCP, TCP_KEEPIDLE, 15);
	SOCKOPT(IPPROTO_TCP, TCP_KEEPINTVL, 5);
	SOCKOPT(IPPROTO_TCP, TCP_KEEPCNT, 3);
	SOCKOPT(IPPROTO_TCP, TCP_NODELAY, 1);
#undef SOCKOPT
	vlen = sizeof(uv);
	ck_assert_int_eq(getsockopt(dlock_fd(d), IPPROTO_TCP, TCP_USER_TIMEOUT, &uv, &vlen), 0);
	ck_assert_uint_eq(uv, 30000);
	dlock_close(d);
}
END_TEST

/*
 * Against the daemon: a call within the timeout works, a LOCK that waits in
 * the queue longer than the timeout (but within WAIT + timeout) is answered.
 */
START_TEST(test_timeout_live)
{
	struct dlock_lock_opts o = df_opts(0, 1500, 0, 0, 0);
	char key[128];
	dlock_t *a = df_conn(), *b = df_conn();
	long long t0;

	df_key(key, sizeof(key), "timeout");
	ck_assert_int_eq(dlock_set_timeout(b, 1000), 0);
	ck_assert_int_eq(dlock_ping(b), 0);
	ck_assert_int_eq(dlock_lock(a, key, NULL, NULL), 1);
	t0 = (long long)clock_ms();
	ck_assert_msg(dlock_lock(b, key, &o, NULL) == 0, "%s", dlock_error(b));
	ck_assert_msg((long long)clock_ms() - t0 >= 1450, "WAIT 1500 ended early");
	ck_assert_int_eq(dlock_ping(b), 0);
	dlock_close(a);
	dlock_close(b);
}
END_TEST

START_TEST(test_ping_info)
{
	dlock_t *d = df_conn();
	char *info;

	ck_assert_int_ge(dlock_fd(d), 0);
	ck_assert_int_eq(dlock_ping(d), 0);
	info = dlock_info(d);
	ck_assert_msg(info != NULL, "INFO failed: %s", dlock_error(d));
	ck_assert_msg(strstr(info, "version:") != NULL, "no version in INFO: %s", info);
	free(info);
	/* Nothing is pushed to an idle connection. */
	ck_assert_int_eq(dlock_poll_lost(d, NULL, 0, NULL), 0);
	dlock_close(d);
}
END_TEST

START_TEST(test_connect_default_addr_and_password)
{
	char err[256];
	dlock_t *d;

	/* NULL uses $DLOCK_ADDR. */
	ck_assert_int_eq(setenv("DLOCK_ADDR", df_addr(), 1), 0);
	d = dlock_connect(NULL, getenv("DLOCK_TEST_PASSWORD"), err, sizeof(err));
	ck_assert_msg(d != NULL, "%s", err);
	ck_assert_int_eq(dlock_ping(d), 0);
	dlock_close(d);

	/* A wrong password is refused by the daemon, with or without auth set. */
	ck_assert_ptr_null(dlock_connect(df_addr(), "surely-not-the-password",
	    err, sizeof(err)));
	ck_assert_int_eq(errno, EACCES);
	ck_assert_msg(strstr(err, "WRONGPASS") != NULL || strstr(err, "ERR") != NULL,
	    "%s", err);
}
END_TEST

START_TEST(test_lock_unlock_reentrant)
{
	struct dlock_grant g1, g2;
	char key[128];
	dlock_t *d = df_conn();

	df_key(key, sizeof(key), "reentrant");
	ck_assert_int_eq(dlock_lock(d, key, NULL, &g1), 1);
	ck_assert_uint_eq(strlen(g1.token), 32);
	ck_assert_uint_eq(strspn(g1.token, "0123456789abcdef"), 32);
	ck_assert_int_gt(g1.fence, 0);
	ck_assert_int_gt(g1.ttl_ms, 0);
	/* Again on the same connection: the same holding, count 2. */
	ck_assert_int_eq(dlock_lock(d, key, NULL, &g2), 1);
	ck_assert_str_eq(g2.token, g1.token);
	ck_assert_int_eq(g2.fence, g1.fence);
	ck_assert_int_eq(dlock_unlock(d, key, NULL), 1);
	ck_assert_int_eq(dlock_unlock(d, key, NULL), 0);
	ck_assert_int_eq(dlock_unlock(d, key, NULL), -1);
	df_assert_code(d, "NOTHELD");
	/* Fences strictly increase with every grant of a key. */
	ck_assert_int_eq(dlock_lock(d, key, NULL, &g2), 1);
	ck_assert_int_gt(g2.fence, g1.fence);
	ck_assert_str_ne(g2.token, g1.token);
	ck_assert_int_eq(dlock_unlock(d, key, NULL), 0);
	dlock_close(d);
}
END_TEST

START_TEST(test_wait_not_granted)
{
	struct dlock_lock_opts o;
	struct dlock_grant g;
	char key[128];
	dlock_t *a = df_conn(), *b = df_conn();
	long long t0, dt;

	df_key(key, sizeof(key), "wait");
	ck_assert_int_eq(dlock_lock(a, key, NULL, &g), 1);
	o = df_opts(0, 0, 0, 0, 0);
	ck_assert_int_eq(dlock_lock(b, key, &o, &g), 0);
	ck_assert_str_eq(dlock_error_code(b), "");
	o.wait_ms = 200;
	t0 = (long long)clock_ms();
	ck_assert_int_eq(dlock_lock(b, key, &o, &g), 0);
	dt = (long long)clock_ms() - t0;
	ck_assert_msg(dt >= 180 && dt < 5000, "WAIT 200 took %lld ms", dt);
	ck_assert_int_eq(dlock_unlock(a, key, NULL), 0);
	o.wait_ms = 0;
	ck_assert_int_eq(dlock_lock(b, key, &o, &g), 1);
	ck_assert_int_eq(dlock_unlock(b, key, NULL), 0);
	dlock_close(a);
	dlock_close(b);
}
END_TEST

START_TEST(test_waiter_is_granted_on_release)
{
	struct dlock_status st;
	struct dlock_grant g;
	char key[128];
	dlock_t *a = df_conn();
	pid_t pid;
	int status;

	df_key(key, sizeof(key), "waiter");
	ck_assert_int_eq(dlock_lock(a, key, NULL, &g), 1);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* Another client queues for the key: exit 0 once granted. */
		struct dlock_lock_opts o = df_opts(0, 10000, 0, 0, 0);
		dlock_t *b = dlock_connect(df_addr(), getenv("DLOCK_TEST_PASSWORD"), NULL, 0);
		int granted = b != NULL && dlock_lock(b, key, &o, NULL) == 1;

		dlock_close(b);
		dlock_close(a);	/* the parent's, copied: its connection stays open */
		_exit(granted ? 0 : 1);
	}
	df_wait_waiters(a, key, 1, &st);
	ck_assert_str_eq(st.mode, "exclusive");
	ck_assert_int_eq(st.holders, 1);
	ck_assert_int_eq(dlock_unlock(a, key, NULL), 0);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	    "the waiter was not granted");
	dlock_close(a);
}
END_TEST

START_TEST(test_shared)
{
	struct dlock_lock_opts sh = df_opts(0, 0, 1, 0, 0), ex = df_opts(0, 0, 0, 0, 0);
	struct dlock_status st;
	struct dlock_grant ga, gb;
	char key[128];
	dlock_t *a = df_conn(), *b = df_conn(), *c = df_conn();

	df_key(key, sizeof(key), "shared");
	ck_assert_int_eq(dlock_lock(a, key, &sh, &ga), 1);
	ck_assert_int_eq(dlock_lock(b, key, &sh, &gb), 1);
	ck_assert_str_ne(ga.token, gb.token);
	ck_assert_int_eq(dlock_lock(c, key, &ex, NULL), 0);
	ck_assert_int_eq(dlock_status(c, key, &st), 0);
	ck_assert_str_eq(st.mode, "shared");
	ck_assert_int_eq(st.holders, 2);
	ck_assert_int_eq(st.limit, 0);
	ck_assert_int_eq(dlock_validate(c, key, ga.fence), 1);
	ck_assert_int_eq(dlock_validate(c, key, gb.fence), 1);
	/* A shared holder cannot re-lock exclusively on the same connection. */
	ck_assert_int_eq(dlock_lock(a, key, &ex, NULL), -1);
	df_assert_code(a, "ERR");
	ck_assert_int_eq(dlock_unlock(a, key, NULL), 0);
	ck_assert_int_eq(dlock_unlock(b, key, NULL), 0);
	ck_assert_int_eq(dlock_lock(c, key, &ex, NULL), 1);
	dlock_close(a);
	dlock_close(b);
	dlock_close(c);
}
END_TEST

START_TEST(test_semaphore)
{
	struct dlock_lock_opts two = df_opts(0, 0, 0, 2, 0);
	struct dlock_lock_opts three = df_opts(0, 0, 0, 3, 0);
	struct dlock_lock_opts ex = df_opts(0, 0, 0, 0, 0);
	struct dlock_status st;
	char key[128];
	dlock_t *a = df_conn(), *b = df_conn(), *c = df_conn();

	df_key(key, sizeof(key), "semaphore");
	ck_assert_int_eq(dlock_lock(a, key, &two, NULL), 1);
	ck_assert_int_eq(dlock_lock(b, key, &two, NULL), 1);
	ck_assert_int_eq(dlock_lock(c, key, &two, NULL), 0);
	ck_assert_int_eq(dlock_status(c, key, &st), 0);
	ck_assert_str_eq(st.mode, "semaphore");
	ck_assert_int_eq(st.holders, 2);
	ck_assert_int_eq(st.limit, 2);
	/* Every locker must use the same LIMIT, and only LIMIT lockers. */
	ck_assert_int_eq(dlock_lock(c, key, &three, NULL), -1);
	df_assert_code(c, "ERR");
	ck_assert_int_eq(dlock_lock(c, key, &ex, NULL), -1);
	df_assert_code(c, "ERR");
	ck_assert_int_eq(dlock_unlock(a, key, NULL), 0);
	ck_assert_int_eq(dlock_lock(c, key, &two, NULL), 1);
	dlock_close(a);
	dlock_close(b);
	dlock_close(c);
}
END_TEST

START_TEST(test_detach_unlock_by_token)
{
	struct dlock_lock_opts det = df_opts(10000, 0, 0, 0, 1), try = df_opts(0, 0, 0, 0, 0);
	struct dlock_status st;
	struct dlock_grant g;
	char key[128];
	dlock_t *a = df_conn(), *b = df_conn();

	df_key(key, sizeof(key), "detach");
	ck_assert_int_eq(dlock_lock(a, key, &det, &g), 1);
	ck_assert_int_eq(g.ttl_ms, 10000);
	dlock_close(a);	/* a detached lock outlives its connection */
	ck_assert_int_eq(dlock_lock(b, key, &try, NULL), 0);
	ck_assert_int_eq(dlock_status(b, key, &st), 0);
	ck_assert_str_eq(st.mode, "exclusive");
	ck_assert_int_eq(st.holders, 1);
	ck_assert_msg(st.ttl_ms > 0 && st.ttl_ms <= 10000, "ttl_ms %lld", st.ttl_ms);
	/* Not held by b's session, but b has the token. */
	ck_assert_int_eq(dlock_unlock(b, key, NULL), -1);
	df_assert_code(b, "NOTHELD");
	ck_assert_int_eq(dlock_extend(b, key, 20000, g.token), 20000);
	ck_assert_int_eq(dlock_unlock(b, key, g.token), 0);
	ck_assert_int_eq(dlock_unlock(b, key, g.token), -1);
	df_assert_code(b, "NOTHELD");
	ck_assert_int_eq(dlock_lock(b, key, &try, NULL), 1);
	dlock_close(b);
}
END_TEST

START_TEST(test_extend)
{
	struct dlock_lock_opts o = df_opts(1000, -1, 0, 0, 0);
	struct dlock_status st;
	struct dlock_grant g;
	char key[128];
	dlock_t *d = df_conn();

	df_key(key, sizeof(key), "extend");
	ck_assert_int_eq(dlock_lock(d, key, &o, &g), 1);
	ck_assert_int_eq(g.ttl_ms, 1000);
	ck_assert_int_eq(dlock_extend(d, key, 60000, NULL), 60000);
	ck_assert_int_eq(dlock_status(d, key, &st), 0);
	ck_assert_msg(st.ttl_ms > 1000 && st.ttl_ms <= 60000, "ttl_ms %lld", st.ttl_ms);
	ck_assert_int_eq(dlock_extend(d, key, 30000, g.token), 30000);
	ck_assert_int_eq(dlock_unlock(d, key, NULL), 0);
	ck_assert_int_eq(dlock_extend(d, key, 60000, NULL), -1);
	df_assert_code(d, "NOTHELD");
	dlock_close(d);
}
END_TEST

START_TEST(test_status_fields)
{
	struct dlock_lock_opts o = df_opts(30000, -1, 0, 0, 0);
	struct dlock_status st;
	struct dlock_grant g;
	char key[128];
	dlock_t *d = df_conn();

	df_key(key, sizeof(key), "status");
	ck_assert_int_eq(dlock_status(d, key, &st), 0);
	SUITE_ASSERT_STATUS(st, "free", 0, 0, 0, -1, 0);
	ck_assert_int_eq(dlock_lock(d, key, &o, &g), 1);
	ck_assert_int_eq(dlock_status(d, key, &st), 0);
	ck_assert_str_eq(st.mode, "exclusive");
	ck_assert_int_eq(st.holders, 1);
	ck_assert_int_eq(st.waiters, 0);
	ck_assert_int_eq(st.fence, g.fence);
	ck_assert_msg(st.ttl_ms > 0 && st.ttl_ms <= 30000, "ttl_ms %lld", st.ttl_ms);
	ck_assert_int_eq(st.limit, 0);
	dlock_close(d);
}
END_TEST

/* STATUS FULL through dlock_status_full: the counts, and one entry per
 * holding, oldest first, a detached one marked so. */
START_TEST(test_status_full)
{
	struct dlock_lock_opts sh = df_opts(0, -1, 1, 0, 0), shd = df_opts(20000, -1, 1, 0, 1);
	struct dlock_status_full st;
	struct dlock_grant ga, gb;
	char key[128];
	dlock_t *a = df_conn(), *b = df_conn();

	df_key(key, sizeof(key), "full");
	ck_assert_int_eq(dlock_status_full(a, key, &st), 0);
	ck_assert_str_eq(st.status.mode, "free");
	ck_assert_uint_eq(st.nholders, 0);
	ck_assert_uint_eq(st.nwaiters, 0);
	dlock_status_full_free(&st);
	ck_assert_int_eq(dlock_lock(a, key, &sh, &ga), 1);
	ck_assert_int_eq(dlock_lock(b, key, &shd, &gb), 1);
	ck_assert_int_eq(dlock_status_full(a, key, &st), 0);
	ck_assert_str_eq(st.status.mode, "shared");
	ck_assert_int_eq(st.status.holders, 2);
	ck_assert_uint_eq(st.nholders, 2);
	ck_assert_uint_eq(st.nwaiters, 0);
	ck_assert_int_eq(st.holders[0].fence, ga.fence);
	ck_assert_str_eq(st.holders[0].mode, "shared");
	ck_assert_int_gt(st.holders[0].session, 0);
	ck_assert_str_ne(st.holders[0].addr, "");
	ck_assert_int_eq(st.holders[0].count, 1);
	ck_assert_int_eq(st.holders[0].detached, 0);
	ck_assert_int_ge(st.holders[0].held_ms, 0);
	ck_assert_int_eq(st.holders[1].fence, gb.fence);
	ck_assert_int_eq(st.holders[1].detached, 1);
	ck_assert_int_ne(st.holders[1].session, st.holders[0].session);
	ck_assert_msg(st.holders[1].lease_ms > 0 && st.holders[1].lease_ms <= 20000,
	    "lease_ms %lld", st.holders[1].lease_ms);
	dlock_status_full_free(&st);
	dlock_status_full_free(&st);	/* twice is harmless */
	ck_assert_int_eq(dlock_unlock(b, key, gb.token), 0);
	ck_assert_int_eq(dlock_unlock(a, key, NULL), 0);
	dlock_close(a);
	dlock_close(b);
}
END_TEST

START_TEST(test_validate)
{
	struct dlock_grant g;
	char key[128];
	dlock_t *d = df_conn(), *other = df_conn();

	df_key(key, sizeof(key), "validate");
	ck_assert_int_eq(dlock_lock(d, key, NULL, &g), 1);
	ck_assert_int_eq(dlock_validate(other, key, g.fence), 1);
	ck_assert_int_eq(dlock_validate(other, key, g.fence + 1), 0);
	ck_assert_int_eq(dlock_validate(other, key, g.fence - 1), 0);
	ck_assert_int_eq(dlock_unlock(d, key, NULL), 0);
	ck_assert_int_eq(dlock_validate(other, key, g.fence), 0);
	dlock_close(d);
	dlock_close(other);
}
END_TEST

START_TEST(test_notheld)
{
	char key[128];
	dlock_t *d = df_conn();

	df_key(key, sizeof(key), "notheld");
	ck_assert_int_eq(dlock_unlock(d, key, NULL), -1);
	df_assert_code(d, "NOTHELD");
	ck_assert_msg(strncmp(dlock_error(d), "NOTHELD ", 8) == 0 &&
	    strstr(dlock_error(d), "not held") != NULL, "%s", dlock_error(d));
	ck_assert_int_eq(dlock_unlock(d, key, DF_TOKEN32), -1);
	df_assert_code(d, "NOTHELD");
	/* An error reply leaves the connection usable. */
	ck_assert_int_eq(dlock_ping(d), 0);
	ck_assert_str_eq(dlock_error(d), "");
	dlock_close(d);
}
END_TEST

START_TEST(test_binary_key)
{
	struct dlock_lock_opts try = df_opts(0, 0, 0, 0, 0);
	struct dlock_status st;
	char key[192], prefix[128];
	dlock_t *a = df_conn(), *b = df_conn();

	df_key(prefix, sizeof(prefix), "bin");
	snprintf(key, sizeof(key), "%s sp ace\x01\x7f\xff\r\n\"'*3$-:", prefix);
	ck_assert_int_eq(dlock_lock(a, key, NULL, NULL), 1);
	ck_assert_int_eq(dlock_lock(b, key, &try, NULL), 0);
	ck_assert_int_eq(dlock_status(b, key, &st), 0);
	ck_assert_int_eq(st.holders, 1);
	/* The prefix up to the blank is another key. */
	ck_assert_int_eq(dlock_lock(b, prefix, &try, NULL), 1);
	ck_assert_int_eq(dlock_unlock(a, key, NULL), 0);
	ck_assert_int_eq(dlock_lock(b, key, &try, NULL), 1);
	dlock_close(a);
	dlock_close(b);
}
END_TEST

START_TEST(test_close_releases)
{
	struct dlock_lock_opts try = df_opts(0, 0, 0, 0, 0), wait = df_opts(0, 5000, 0, 0, 0);
	char key[128];
	dlock_t *a = df_conn(), *b = df_conn();

	df_key(key, sizeof(key), "close");
	ck_assert_int_eq(dlock_lock(a, key, NULL, NULL), 1);
	ck_assert_int_eq(dlock_lock(b, key, &try, NULL), 0);
	dlock_close(a);
	ck_assert_int_eq(dlock_lock(b, key, &wait, NULL), 1);
	dlock_close(b);
}
END_TEST

/* The keys name0 .. name<n-1> of this test, in keys[] (room in bufs). */
static void
multi_keys(char bufs[][128], const char **keys, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++) {
		char part[64];

		snprintf(part, sizeof(part), "%s%zu", name, i);
		df_key(bufs[i], sizeof(bufs[i]), part);
		keys[i] = bufs[i];
	}
}

/* LOCKALL grants every key, each an ordinary holding; UNLOCKALL counts. */
START_TEST(test_lockall_unlockall)
{
	struct dlock_grant g[3], one;
	struct dlock_status st;
	char bufs[3][128];
	const char *keys[3];
	long long left[3];
	dlock_t *d = df_conn();

	multi_keys(bufs, keys, 3, "all");
	/* the first key held already: LOCKALL takes it once more */
	ck_assert_int_eq(dlock_lock(d, keys[0], NULL, &one), 1);
	ck_assert_int_eq(dlock_lockall(d, 3, keys, NULL, g), 1);
	ck_assert_str_eq(g[0].token, one.token);
	ck_assert_int_eq(g[0].fence, one.fence);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_gt(g[i].fence, 0);
		ck_assert_int_gt(g[i].ttl_ms, 0);
		ck_assert_int_eq(dlock_validate(d, keys[i], g[i].fence), 1);
		ck_assert_int_eq(dlock_status(d, keys[i], &st), 0);
		ck_assert_str_eq(st.mode, "exclusive");
		ck_assert_int_eq(st.fence, g[i].fence);
	}
	ck_assert_str_ne(g[1].token, g[2].token);
	ck_assert_int_eq(dlock_unlockall(d, 3, keys, left), 0);
	ck_assert_int_eq(left[0], 1);
	ck_assert_int_eq(left[1], 0);
	ck_assert_int_eq(left[2], 0);
	ck_assert_int_eq(dlock_status(d, keys[1], &st), 0);
	ck_assert_str_eq(st.mode, "free");
	/* nothing held of the set: NOTHELD, and the first key stays held */
	ck_assert_int_eq(dlock_unlockall(d, 3, keys, NULL), -1);
	df_assert_code(d, "NOTHELD");
	ck_assert_int_eq(dlock_unlock(d, keys[0], NULL), 0);
	dlock_close(d);
}
END_TEST

/* A key held on another connection: not granted within WAIT, and nothing
 * of the set is held meanwhile or after. */
START_TEST(test_lockall_wait_not_granted)
{
	struct dlock_lock_opts o = df_opts(0, 0, 0, 0, 0);
	struct dlock_grant g[2], h;
	struct dlock_status st;
	char bufs[2][128];
	const char *keys[2];
	dlock_t *a = df_conn(), *b = df_conn();
	long long t0, dt;

	multi_keys(bufs, keys, 2, "allwait");
	ck_assert_int_eq(dlock_lock(a, keys[1], NULL, &h), 1);
	ck_assert_int_eq(dlock_lockall(b, 2, keys, &o, g), 0);
	ck_assert_str_eq(dlock_error_code(b), "");
	o.wait_ms = 200;
	t0 = (long long)clock_ms();
	ck_assert_int_eq(dlock_lockall(b, 2, keys, &o, g), 0);
	dt = (long long)clock_ms() - t0;
	ck_assert_msg(dt >= 180 && dt < 5000, "WAIT 200 took %lld ms", dt);
	ck_assert_int_eq(dlock_status(a, keys[0], &st), 0);
	ck_assert_str_eq(st.mode, "free");
	ck_assert_int_eq(st.waiters, 0);
	/* the other connection may take the free key at once */
	o.wait_ms = 0;
	ck_assert_int_eq(dlock_lock(a, keys[0], &o, &h), 1);
	ck_assert_int_eq(dlock_unlockall(a, 2, keys, NULL), 0);
	ck_assert_int_eq(dlock_lockall(b, 2, keys, &o, g), 1);
	ck_assert_int_eq(dlock_unlockall(b, 2, keys, NULL), 0);
	dlock_close(a);
	dlock_close(b);
}
END_TEST

/* A key named twice, no keys, an empty key: errors, nothing held. */
START_TEST(test_lockall_errors)
{
	struct dlock_grant g[2];
	struct dlock_status st;
	char bufs[1][128];
	const char *keys[2], *bad[2];
	dlock_t *d = df_conn();

	multi_keys(bufs, keys, 1, "alldup");
	keys[1] = keys[0];
	ck_assert_int_eq(dlock_lockall(d, 2, keys, NULL, g), -1);
	df_assert_code(d, "ERR");
	ck_assert_int_eq(dlock_status(d, keys[0], &st), 0);
	ck_assert_str_eq(st.mode, "free");
	ck_assert_int_eq(dlock_unlockall(d, 2, keys, NULL), -1);
	df_assert_code(d, "ERR");
	ck_assert_int_eq(dlock_lockall(d, 0, keys, NULL, g), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_lockall(d, 1, NULL, NULL, g), -1);
	df_assert_code(d, "ARG");
	bad[0] = keys[0];
	bad[1] = "";
	ck_assert_int_eq(dlock_lockall(d, 2, bad, NULL, g), -1);
	df_assert_code(d, "ARG");
	bad[1] = NULL;
	ck_assert_int_eq(dlock_unlockall(d, 2, bad, NULL), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_lockall(NULL, 1, keys, NULL, g), -1);
	ck_assert_int_eq(dlock_ping(d), 0);
	dlock_close(d);
}
END_TEST

START_TEST(test_bad_arguments)
{
	struct dlock_lock_opts o;
	struct dlock_status st;
	char key[128];
	dlock_t *d = df_conn();

	df_key(key, sizeof(key), "args");
	ck_assert_int_eq(dlock_lock(d, NULL, NULL, NULL), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_lock(d, "", NULL, NULL), -1);
	df_assert_code(d, "ARG");
	o = df_opts(0, -1, 1, 2, 0);	/* shared and limit */
	ck_assert_int_eq(dlock_lock(d, key, &o, NULL), -1);
	df_assert_code(d, "ARG");
	o = df_opts(0, -1, 0, 0, 1);	/* detach without ttl */
	ck_assert_int_eq(dlock_lock(d, key, &o, NULL), -1);
	df_assert_code(d, "ARG");
	o = df_opts(0, -2, 0, 0, 0);
	ck_assert_int_eq(dlock_lock(d, key, &o, NULL), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_unlock(d, NULL, NULL), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_unlock(d, key, ""), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_extend(d, key, 0, NULL), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_status(d, "", &st), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_status(d, key, NULL), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_validate(d, NULL, 1), -1);
	df_assert_code(d, "ARG");
	/* The daemon checks the rest: a TTL below its minimum. */
	o = df_opts(5, 0, 0, 0, 0);
	ck_assert_int_eq(dlock_lock(d, key, &o, NULL), -1);
	df_assert_code(d, "ERR");
	/* None of it broke the connection; NULL handles are refused. */
	ck_assert_int_eq(dlock_ping(d), 0);
	ck_assert_int_eq(dlock_ping(NULL), -1);
	ck_assert_int_eq(dlock_lock(NULL, key, NULL, NULL), -1);
	ck_assert_int_eq(dlock_fd(NULL), -1);
	dlock_close(NULL);
	dlock_close(d);
}
END_TEST
int
main(void)
{
	df_warn_addr("check_dlock");

	Suite *s = suite_create("dlock");

	suite_case(s, "reader", NULL, NULL, 30, SUITE_TESTS(test_connect_bad_address,
	    test_connect_refused, test_reader_split_and_push, test_reader_suspend_pushes,
	    test_reader_replies,
	    test_reader_lockall, test_reader_status_full, test_reader_handshake_failures, test_reader_lost_notice,
	    test_reader_notice_after_push, test_call_timeout, test_call_timeout_whole_reply,
	    test_lock_wait_timeout, test_unix_no_keepalive));
	suite_case(s, "live", NULL, NULL, 30, SUITE_TESTS(test_ping_info, test_tcp_keepalive,
	    test_timeout_live, test_connect_default_addr_and_password,
	    test_lock_unlock_reentrant, test_wait_not_granted,
	    test_waiter_is_granted_on_release, test_shared, test_semaphore,
	    test_detach_unlock_by_token, test_extend, test_status_fields, test_status_full,
	    test_validate, test_notheld, test_binary_key, test_close_releases,
	    test_lockall_unlockall, test_lockall_wait_not_granted, test_lockall_errors,
	    test_bad_arguments));
	return suite_run(s);
}
