/*
 * check_dlock_elect — tests of libdlock's election calls (client/dlock_elect.c):
 * dlock_campaign, dlock_proclaim, dlock_resign, dlock_leader and dlock_observe.
 *
 * Two groups, as in check_dlock:
 *  - "reader": the calls' requests and replies against a canned server
 *    started by the test itself. They need no daemon.
 *  - "live": the calls against a running dlockd whose address is in
 *    DLOCK_TEST_ADDR (and password, if it has one, in DLOCK_TEST_PASSWORD).
 *    Without DLOCK_TEST_ADDR every live test fails and says so.
 *
 * The canned server and the live tests' helpers are dlock_fixture.c's.
 * Run with CK_FORK=yes: every test runs in its own process.
 */
#include <sys/types.h>
#include <sys/wait.h>

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

/* The election calls: their requests (values binary-safe) and replies. */
START_TEST(test_reader_elect)
{
	/* LEADER's reply with a value one byte too long for struct dlock_leader */
	static const char tail[] = "\r\n:7\r\n:12\r\n$9\r\nexclusive\r\n:1\r\n";
	static char big[1100];
	size_t n = (size_t)snprintf(big, sizeof(big), "*5\r\n$1025\r\n");
	const struct df_step steps[] = {
		DF_HANDSHAKE(DF_HELLO_REPLY),
		{ .expect = "*3\r\n$8\r\nCAMPAIGN\r\n$1\r\nk\r\n$3\r\na",	/* "a\0b" */
		  .reply = "*3\r\n$32\r\n" DF_TOKEN32 "\r\n:7\r\n:30000\r\n" },
		{ .expect = "$8\r\nCAMPAIGN\r\n$1\r\nk\r\n$0\r\n\r\n$4\r\nWAIT\r\n$1\r\n0\r\n",
		  .reply = "_\r\n" },
		{ .expect = "*3\r\n$8\r\nPROCLAIM\r\n$1\r\nk\r\n$4\r\nv\r\n2\r\n", .reply = ":12\r\n" },
		{ .expect = "*2\r\n$6\r\nLEADER\r\n$1\r\nk\r\n",
		  .reply = "*5\r\n$5\r\nv\r\n2 \r\n:7\r\n:12\r\n$9\r\nexclusive\r\n:1\r\n" },
		{ .reply = "*5\r\n_\r\n:0\r\n:13\r\n+free\r\n:0\r\n" },		/* LEADER */
		{ .expect = "*2\r\n$7\r\nOBSERVE\r\n$1\r\nk\r\n", .reply = ":1\r\n" },
		{ .expect = "$5\r\nAFTER\r\n$2\r\n13\r\n$4\r\nWAIT\r\n$3\r\n100\r\n",
		  .reply = "_\r\n" },
		{ .expect = "*4\r\n$7\r\nOBSERVE\r\n$1\r\nk\r\n$5\r\nAFTER\r\n$2\r\n13\r\n",
		  .reply = "*5\r\n$0\r\n\r\n:9\r\n:14\r\n$6\r\nshared\r\n:2\r\n" },
		{ .reply = big, .len = n + 1025 + sizeof(tail) - 1 },		/* LEADER */
		{ .reply = "*4\r\n_\r\n:0\r\n:13\r\n+free\r\n" },		/* LEADER */
		{ .reply = "*5\r\n_\r\n:-1\r\n:13\r\n+free\r\n:0\r\n" },	/* LEADER */
		{ .expect = "*2\r\n$6\r\nRESIGN\r\n$1\r\nk\r\n", .reply = ":0\r\n" },
		{ .reply = "-NOTHELD key is not held by this session\r\n" },	/* PROCLAIM */
	};
	struct dlock_lock_opts o = df_opts(0, 0, 0, 0, 0);
	struct dlock_leader l;
	struct dlock_grant g;
	struct df_canned c;
	char err[256];
	long long rev = 0;
	dlock_t *d;

	memset(big + n, 'x', 1025);
	memcpy(big + n + 1025, tail, sizeof(tail) - 1);
	df_canned_start(&c, steps, sizeof(steps) / sizeof(steps[0]), 0, 1);
	d = dlock_connect(c.addr, NULL, err, sizeof(err));
	ck_assert_msg(d != NULL, "%s", err);
	ck_assert_int_eq(dlock_campaign(d, "k", "a\0b", 3, NULL, &g), 1);
	ck_assert_str_eq(g.token, DF_TOKEN32);
	ck_assert_int_eq(g.fence, 7);
	ck_assert_int_eq(dlock_campaign(d, "k", NULL, 0, &o, &g), 0);
	ck_assert_int_eq(dlock_proclaim(d, "k", "v\r\n2", 4, &rev), 0);
	ck_assert_int_eq(rev, 12);

	ck_assert_int_eq(dlock_leader(d, "k", &l), 0);
	ck_assert_int_eq(l.has_value, 1);
	ck_assert_uint_eq(l.valuelen, 5);
	ck_assert_mem_eq(l.value, "v\r\n2 ", 6);	/* NUL-terminated */
	ck_assert_int_eq(l.term, 7);
	ck_assert_int_eq(l.revision, 12);
	ck_assert_str_eq(l.kind, "exclusive");
	ck_assert_int_eq(l.holders, 1);
	ck_assert_int_eq(dlock_leader(d, "k", &l), 0);
	ck_assert_int_eq(l.has_value, 0);
	ck_assert_uint_eq(l.valuelen, 0);
	ck_assert_int_eq(l.term, 0);
	ck_assert_int_eq(l.revision, 13);
	ck_assert_str_eq(l.kind, "free");

	/* OBSERVE without AFTER is LEADER; one that waits may get nil */
	ck_assert_int_eq(dlock_observe(d, "k", -1, 5000, &l), -1);	/* ":1": wrong shape */
	df_assert_code(d, "PROTO");
	ck_assert_int_eq(dlock_observe(d, "k", 13, 100, &l), 0);
	ck_assert_int_eq(dlock_observe(d, "k", 13, -1, &l), 1);
	ck_assert_int_eq(l.has_value, 1);	/* an empty value is a value */
	ck_assert_uint_eq(l.valuelen, 0);
	ck_assert_int_eq(l.term, 9);
	ck_assert_int_eq(l.revision, 14);
	ck_assert_str_eq(l.kind, "shared");
	ck_assert_int_eq(l.holders, 2);

	ck_assert_int_eq(dlock_leader(d, "k", &l), -1);
	df_assert_code(d, "PROTO");
	ck_assert_msg(strstr(dlock_error(d), "1025 bytes") != NULL, "%s", dlock_error(d));
	ck_assert_int_eq(dlock_leader(d, "k", &l), -1);	/* 4 elements */
	df_assert_code(d, "PROTO");
	ck_assert_int_eq(dlock_leader(d, "k", &l), -1);	/* a negative term */
	df_assert_code(d, "PROTO");
	ck_assert_int_eq(dlock_resign(d, "k"), 0);
	ck_assert_int_eq(dlock_proclaim(d, "k", "v", 1, NULL), -1);
	df_assert_code(d, "NOTHELD");

	/* Bad arguments: nothing is sent. */
	o.shared = 1;
	ck_assert_int_eq(dlock_campaign(d, "k", "v", 1, &o, &g), -1);
	df_assert_code(d, "ARG");
	o = df_opts(0, -1, 0, 2, 0);
	ck_assert_int_eq(dlock_campaign(d, "k", "v", 1, &o, &g), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_campaign(d, "k", NULL, 1, NULL, &g), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_campaign(d, "", "v", 1, NULL, &g), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_proclaim(d, "k", NULL, 2, NULL), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_resign(d, NULL), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_leader(d, "k", NULL), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_observe(d, "k", -2, -1, &l), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_observe(d, "k", 1, -2, &l), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_observe(d, "k", 1, -1, NULL), -1);
	df_assert_code(d, "ARG");
	ck_assert_int_eq(dlock_leader(NULL, "k", &l), -1);
	ck_assert_int_eq(errno, EINVAL);
	dlock_close(d);
	df_canned_wait(&c);
}
END_TEST

/* ---- live tests ---- */

/* Assert l's kind and holders, and its value (NULL: none). */
static void
assert_leader(const struct dlock_leader *l, const char *kind, long long holders,
    const char *value)
{
	ck_assert_str_eq(l->kind, kind);
	ck_assert_int_eq(l->holders, holders);
	ck_assert_int_eq(l->has_value, value != NULL);
	if (value != NULL) {
		ck_assert_uint_eq(l->valuelen, strlen(value));
		ck_assert_mem_eq(l->value, value, l->valuelen);
	} else {
		ck_assert_uint_eq(l->valuelen, 0);
	}
}

/*
 * A campaign leads the key; LEADER tells everyone its value and term, a
 * second campaign (WAIT 0, WAIT 200) is not granted, PROCLAIM changes the
 * value and the revision, RESIGN frees the key.
 */
START_TEST(test_campaign_leader)
{
	struct dlock_lock_opts o = df_opts(0, 0, 0, 0, 0);
	struct dlock_leader l;
	struct dlock_grant g;
	char key[128];
	long long rev, t0, dt;
	dlock_t *a = df_conn(), *b = df_conn();

	df_key(key, sizeof(key), "campaign");
	ck_assert_msg(dlock_leader(b, key, &l) == 0, "%s", dlock_error(b));
	assert_leader(&l, "free", 0, NULL);
	ck_assert_int_eq(l.term, 0);
	rev = l.revision;

	ck_assert_msg(dlock_campaign(a, key, "10.0.0.5:8080", 13, NULL, &g) == 1, "%s",
	    dlock_error(a));
	ck_assert_int_gt(g.fence, 0);
	ck_assert_uint_eq(strlen(g.token), 32);
	ck_assert_int_eq(dlock_leader(b, key, &l), 0);
	assert_leader(&l, "exclusive", 1, "10.0.0.5:8080");
	ck_assert_int_eq(l.term, g.fence);
	ck_assert_int_gt(l.revision, rev);
	rev = l.revision;

	/* led: a second campaign is not granted */
	ck_assert_int_eq(dlock_campaign(b, key, "10.0.0.6:8080", 13, &o, NULL), 0);
	ck_assert_str_eq(dlock_error_code(b), "");
	o.wait_ms = 200;
	t0 = (long long)clock_ms();
	ck_assert_int_eq(dlock_campaign(b, key, "10.0.0.6:8080", 13, &o, NULL), 0);
	dt = (long long)clock_ms() - t0;
	ck_assert_msg(dt >= 180 && dt < 5000, "WAIT 200 took %lld ms", dt);

	/* the leader changes its value; nobody else may */
	ck_assert_int_eq(dlock_proclaim(a, key, "10.0.0.5:9090", 13, &rev), 0);
	ck_assert_int_eq(dlock_leader(b, key, &l), 0);
	assert_leader(&l, "exclusive", 1, "10.0.0.5:9090");
	ck_assert_int_eq(l.revision, rev);
	ck_assert_int_eq(l.term, g.fence);
	ck_assert_int_eq(dlock_proclaim(b, key, "x", 1, NULL), -1);
	df_assert_code(b, "NOTHELD");
	ck_assert_int_eq(dlock_resign(b, key), -1);
	df_assert_code(b, "NOTHELD");

	ck_assert_int_eq(dlock_resign(a, key), 0);
	ck_assert_int_eq(dlock_leader(b, key, &l), 0);
	assert_leader(&l, "free", 0, NULL);
	ck_assert_int_eq(l.term, 0);
	ck_assert_int_gt(l.revision, rev);
	ck_assert_int_eq(dlock_resign(a, key), -1);
	df_assert_code(a, "NOTHELD");
	/* now b may lead: a new term */
	o.wait_ms = 0;
	ck_assert_int_eq(dlock_campaign(b, key, "10.0.0.6:8080", 13, &o, &g), 1);
	ck_assert_int_eq(dlock_leader(a, key, &l), 0);
	assert_leader(&l, "exclusive", 1, "10.0.0.6:8080");
	ck_assert_int_eq(l.term, g.fence);
	dlock_close(a);
	dlock_close(b);
}
END_TEST

/*
 * A leader that campaigns again holds the key once more with the new value;
 * values are binary-safe; a plain LOCK and shared holders have no value.
 */
START_TEST(test_campaign_again_and_plain_locks)
{
	struct dlock_lock_opts sh = df_opts(0, 0, 1, 0, 0);
	struct dlock_leader l;
	struct dlock_grant g1, g2;
	char key[128], big[2048];
	dlock_t *a = df_conn(), *b = df_conn();

	df_key(key, sizeof(key), "again");
	ck_assert_int_eq(dlock_campaign(a, key, "one", 3, NULL, &g1), 1);
	ck_assert_int_eq(dlock_campaign(a, key, "t\0o\r\n", 5, NULL, &g2), 1);
	ck_assert_int_eq(g2.fence, g1.fence);
	ck_assert_int_eq(dlock_leader(b, key, &l), 0);
	ck_assert_uint_eq(l.valuelen, 5);
	ck_assert_mem_eq(l.value, "t\0o\r\n", 5);
	ck_assert_int_eq(dlock_resign(a, key), 1);
	ck_assert_int_eq(dlock_resign(a, key), 0);
	/* a value longer than dlockd's limit (1024 by default) */
	memset(big, 'v', sizeof(big));
	ck_assert_int_eq(dlock_campaign(a, key, big, sizeof(big), NULL, NULL), -1);
	df_assert_code(a, "ERR");

	ck_assert_int_eq(dlock_lock(a, key, NULL, &g1), 1);
	ck_assert_int_eq(dlock_leader(b, key, &l), 0);
	assert_leader(&l, "exclusive", 1, NULL);
	ck_assert_int_eq(l.term, g1.fence);
	ck_assert_int_eq(dlock_unlock(a, key, NULL), 0);
	ck_assert_int_eq(dlock_lock(a, key, &sh, &g1), 1);
	ck_assert_int_eq(dlock_lock(b, key, &sh, &g2), 1);
	ck_assert_int_eq(dlock_leader(b, key, &l), 0);
	assert_leader(&l, "shared", 2, NULL);
	ck_assert_int_eq(l.term, g2.fence > g1.fence ? g2.fence : g1.fence);
	dlock_close(a);
	dlock_close(b);
}
END_TEST

/*
 * OBSERVE: without AFTER the state now; with AFTER the state that follows,
 * made by another client, whether it came before the call or while it
 * waited; nil (0) when WAIT runs out first.
 */
START_TEST(test_observe)
{
	struct dlock_leader now, l;
	char key[128];
	dlock_t *a = df_conn(), *b = df_conn();
	long long t0, dt;
	pid_t pid;
	int status;

	df_key(key, sizeof(key), "observe");
	ck_assert_msg(dlock_observe(a, key, -1, -1, &now) == 1, "%s", dlock_error(a));
	assert_leader(&now, "free", 0, NULL);

	/* nothing changes: WAIT runs out */
	t0 = (long long)clock_ms();
	ck_assert_int_eq(dlock_observe(a, key, now.revision, 200, &l), 0);
	dt = (long long)clock_ms() - t0;
	ck_assert_msg(dt >= 180 && dt < 5000, "WAIT 200 took %lld ms", dt);
	ck_assert_str_eq(dlock_error_code(a), "");

	/* a change made before the call is told at once */
	ck_assert_int_eq(dlock_campaign(b, key, "b", 1, NULL, NULL), 1);
	ck_assert_int_eq(dlock_observe(a, key, now.revision, 5000, &l), 1);
	ck_assert_int_gt(l.revision, now.revision);
	assert_leader(&l, "exclusive", 1, "b");
	now = l;

	/* one made while it waits: another process proclaims, then resigns */
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int ok;

		usleep(200000);
		ok = dlock_proclaim(b, key, "b2", 2, NULL) == 0 && dlock_resign(b, key) == 0;
		_exit(ok ? 0 : 1);
	}
	ck_assert_int_eq(dlock_observe(a, key, now.revision, 10000, &l), 1);
	ck_assert_int_gt(l.revision, now.revision);
	assert_leader(&l, "exclusive", 1, "b2");
	ck_assert_int_eq(l.term, now.term);
	ck_assert_int_eq(dlock_observe(a, key, l.revision, 10000, &l), 1);
	assert_leader(&l, "free", 0, NULL);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	    "the other client could not proclaim and resign");
	dlock_close(a);
	dlock_close(b);
}
END_TEST

/*
 * A campaign that waits is granted when the leader's connection closes,
 * with a new term.
 */
START_TEST(test_campaign_waits_for_leader)
{
	struct dlock_status st;
	struct dlock_grant g;
	char key[128];
	dlock_t *a = df_conn();
	pid_t pid;
	int status;

	df_key(key, sizeof(key), "succession");
	ck_assert_int_eq(dlock_campaign(a, key, "a", 1, NULL, &g), 1);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* Another client campaigns: exit 0 once it leads, with a new term. */
		struct dlock_lock_opts o = df_opts(0, 10000, 0, 0, 0);
		struct dlock_leader l;
		struct dlock_grant g2;
		dlock_t *b;
		int led;

		dlock_close(a);	/* the parent's, copied: the leader's connection ends
				 * when the parent closes it */
		b = dlock_connect(df_addr(), getenv("DLOCK_TEST_PASSWORD"), NULL, 0);
		led = b != NULL && dlock_campaign(b, key, "b", 1, &o, &g2) == 1 &&
		    g2.fence > g.fence && dlock_leader(b, key, &l) == 0 && l.has_value &&
		    l.valuelen == 1 && l.value[0] == 'b' && l.term == g2.fence;

		dlock_close(b);
		_exit(led ? 0 : 1);
	}
	df_wait_waiters(a, key, 1, &st);
	dlock_close(a);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	    "the waiting campaign did not lead");
}
END_TEST

int
main(void)
{
	df_warn_addr("check_dlock_elect");

	Suite *s = suite_create("dlock_elect");

	suite_case(s, "reader", NULL, NULL, 30, SUITE_TESTS(test_reader_elect));
	suite_case(s, "live", NULL, NULL, 30, SUITE_TESTS(test_campaign_leader,
	    test_campaign_again_and_plain_locks, test_observe, test_campaign_waits_for_leader));
	return suite_run(s);
}
