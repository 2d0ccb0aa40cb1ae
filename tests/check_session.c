/*
 * check_session — unit tests of sessions (daemon/session.c): requests
 * answered in order behind a waiting command, the FIFO across sessions, a
 * closing session's locks released and waits withdrawn, QUIT and protocol
 * errors, the login, request and output timeouts, back-pressure and the
 * output limit, and, on the fake backend, a session that goes away or
 * loses its lock while its request is at the backend.
 *
 * Each test makes a server of its own (tserver.h) on the memory backend,
 * whose lock table runs on a clock the test moves by hand, or on the fake
 * backend (fake_backend.c), which completes an operation only when the test
 * says so; it talks to the server through socketpairs, one end a session,
 * the other the test's client, and runs the event loop itself (never
 * blocking), so every interleaving is chosen by the test; a deadline of the
 * lock table is reached by moving the clock and ticking the table, not by
 * waiting. No listener, no daemon process, no network.
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "backend.h"
#include "fake_backend.h"
#include "clock.h"
#include "conf.h"
#include "locktab.h"
#include "server.h"
#include "session.h"
#include "suite.h"
#include "tserver.h"

/* ---- the login timeout ------------------------------------------------------ */

/* With a password, a connection must authenticate within
 * sessions.login_timeout_ms; one that did stays. */
START_TEST(test_login_timeout)
{
	ts_conf->login_timeout_ms = 100;
	int a = ts_client(), b = ts_client();
	ts_send_str(b, "AUTH sesame\r\n");
	ts_expect(b, "+OK\r\n");
	ts_send_str(a, "PING\r\n");
	ts_expect(a, "+PONG\r\n");
	ts_expect_closed(a);
	ck_assert_uint_eq(ts_srv->sessions.counters.login_timeouts_total, 1);
	ts_send_str(b, "PING\r\n");
	ts_expect(b, "+PONG\r\n");
	close(a);
	close(b);
}
END_TEST

/* ---- ordering ---------------------------------------------------------------- */

START_TEST(test_pipeline_waits_behind_a_lock)
{
	long long f1;
	int a = ts_holder(&f1), b = ts_client();
	/* b's LOCK waits; the PING behind it is not answered before it */
	ts_send_str(b, "LOCK k\r\nPING\r\nCLIENT ID\r\n");
	ts_expect_nothing(b);
	struct session *sb = ts_session(2);
	ck_assert_ptr_nonnull(sb);
	ck_assert(sb->pending);
	/* a's own commands go on meanwhile */
	ts_send_str(a, "PING\r\n");
	ts_expect(a, "+PONG\r\n");
	ts_send_str(a, "UNLOCK k\r\n");
	ts_expect(a, ":0\r\n");
	ck_assert_int_gt(ts_expect_grant(b, NULL, NULL), f1);
	ts_expect(b, "+PONG\r\n:2\r\n");
	close(a);
	close(b);
}
END_TEST

START_TEST(test_wait_runs_out_on_the_table_clock)
{
	int a = ts_holder(NULL), b = ts_client();
	ts_send_str(b, "LOCK k WAIT 100\r\nPING\r\n");
	ts_expect_nothing(b);
	ts_now += 99;
	locktab_tick(ts_srv->lt);
	ts_expect_nothing(b);
	ts_now += 1;
	locktab_tick(ts_srv->lt);
	ts_expect(b, "*-1\r\n+PONG\r\n");
	ts_expect_status(b, "exclusive", 1, 0);
	close(a);
	close(b);
}
END_TEST

START_TEST(test_fifo_across_sessions)
{
	long long last;
	int c[5];
	c[0] = ts_holder(&last);
	for (int i = 1; i < 5; i++)
		c[i] = ts_client();
	for (int i = 1; i < 5; i++) {
		ts_send_str(c[i], "LOCK k\r\n");
		ts_pump();
	}
	for (int i = 0; i < 4; i++) {
		ts_send_str(c[i], "UNLOCK k\r\n");
		ts_expect(c[i], ":0\r\n");
		for (int j = i + 2; j < 5; j++)
			ts_expect_nothing(c[j]);
		long long f = ts_expect_grant(c[i + 1], NULL, NULL);
		ck_assert_int_gt(f, last);
		last = f;
	}
	for (int i = 0; i < 5; i++)
		close(c[i]);
}
END_TEST

START_TEST(test_close_releases_and_withdraws)
{
	int a = ts_holder(NULL), b = ts_client(), c = ts_client();
	ts_send_str(b, "LOCK k\r\n");
	ts_send_str(c, "LOCK k\r\n");
	ts_pump();
	/* a waiter that goes away leaves the queue; a holder that goes away
	 * hands the key on */
	close(b);
	ts_pump();
	close(a);
	ts_expect_grant(c, NULL, NULL);
	ts_expect_status(c, "exclusive", 1, 0);
	ck_assert_uint_eq(ts_srv->sessions.count, 1);
	close(c);
}
END_TEST

START_TEST(test_quit_and_protocol_error)
{
	int a = ts_client(), b = ts_client();
	ts_send_str(a, "PING\r\nQUIT\r\nPING\r\n");
	ts_expect(a, "+PONG\r\n+OK\r\n");
	ts_expect_closed(a);
	ts_send_str(b, "PING\r\n*1\r\n$x\r\nPING\r\n");
	ts_expect(b, "+PONG\r\n-ERR Protocol error: ");
	char line[256];
	ts_recv_line(b, line, sizeof(line));
	ts_expect_closed(b);
	ck_assert_uint_eq(ts_srv->sessions.counters.protocol_errors_total, 1);
	close(a);
	close(b);
}
END_TEST

/* ---- back-pressure ----------------------------------------------------------- */

enum { FLOOD_N = 3000, FLOOD_PAYLOAD = 1000 };

/* Send PINGs of FLOOD_PAYLOAD bytes on c without reading, until session s
 * stops reading (SESSION_OUTPUT_HIGH bytes of replies wait for the peer).
 * Returns how many whole requests were sent. */
static int
flood(int c, struct session *s)
{
	static char req[FLOOD_PAYLOAD + 32];
	ck_assert_ptr_nonnull(s);
	int len = snprintf(req, sizeof(req), "PING %0*d\r\n", FLOOD_PAYLOAD, 7);
	size_t written = 0;
	while (written < (size_t)FLOOD_N * (size_t)len && !s->throttled) {
		size_t off = written % (size_t)len;
		ssize_t n = write(c, req + off, (size_t)len - off);
		if (n > 0)
			written += (size_t)n;
		else
			ck_assert_int_eq(errno, EAGAIN);
		ts_pump();
	}
	return (int)(written / (size_t)len);
}

START_TEST(test_output_backpressure)
{
	enum { PAYLOAD = FLOOD_PAYLOAD };
	int c = ts_client();
	struct session *s = ts_session(1);
	size_t reply = (size_t)snprintf(NULL, 0, "$%d\r\n%0*d\r\n", PAYLOAD, PAYLOAD, 7);

	ck_assert_ptr_nonnull(s);
	int sent = flood(c, s);
	ck_assert(s->throttled);
	ck_assert_uint_ge(evbuffer_get_length(session_out(s)), SESSION_OUTPUT_HIGH);
	/* it stays so while nobody reads */
	uint64_t answered = ts_srv->sessions.counters.commands_total;
	ts_pump();
	ck_assert_uint_eq(ts_srv->sessions.counters.commands_total, answered);
	/* reading resumes it: every reply arrives, in order, none lost */
	static char buf[PAYLOAD + 32];
	for (int i = 0; i < sent; i++) {
		ts_recv(c, buf, reply);
		ck_assert_int_eq(memcmp(buf, "$1000\r\n", 7), 0);
	}
	ck_assert(!s->throttled);
	ts_expect_nothing(c);
	close(c);
}
END_TEST

/* Wait, running the loop, until session id is gone; fails after
 * TS_IO_LIMIT_MS. */
static void
expect_session_gone(uint64_t id)
{
	uint64_t deadline = clock_ms() + TS_IO_LIMIT_MS;
	while (ts_session(id) != NULL) {
		ck_assert_msg(clock_ms() < deadline, "session %llu stayed",
		    (unsigned long long)id);
		ts_pump();
	}
}

/* A peer that never reads what it asked for is closed after
 * sessions.output_timeout_ms, which releases its locks. */
START_TEST(test_output_timeout)
{
	ts_conf->output_timeout_ms = 100;
	int c = ts_holder(NULL);
	struct session *s = ts_session(1);
	ck_assert_ptr_nonnull(s);
	flood(c, s);
	ck_assert(s->throttled);
	expect_session_gone(1);
	ck_assert_uint_eq(ts_srv->sessions.counters.output_drops_total, 1);
	int d = ts_client();
	ts_send_str(d, "LOCK k WAIT 0\r\n");
	ts_expect_grant(d, NULL, NULL);
	close(c);
	close(d);
}
END_TEST

/* A session closed for a protocol error whose replies the peer does not
 * read goes after sessions.output_timeout_ms all the same. */
START_TEST(test_close_without_reader)
{
	static char req[FLOOD_PAYLOAD + 32];
	ts_conf->output_timeout_ms = 100;
	int c = ts_client();
	int len = snprintf(req, sizeof(req), "PING %0*d\r\n", FLOOD_PAYLOAD, 7);
	for (int i = 0; i < 800; i++)
		ts_send(c, req, (size_t)len);
	ts_send_str(c, "$5\r\n");
	ts_pump();
	struct session *s = ts_session(1);
	ck_assert_ptr_nonnull(s);
	ck_assert(s->closing);
	ck_assert_uint_gt(evbuffer_get_length(session_out(s)), 0);
	expect_session_gone(1);
	close(c);
}
END_TEST

/* A reply that would take the unsent output past limits.max_output_bytes
 * closes the session at once, the reply not sent. */
START_TEST(test_output_limit)
{
	enum { BIG = 70000 };
	static char req[BIG + 64];
	ts_conf->max_output_bytes = 65536;
	ts_conf->max_request_bytes = 200000;
	int c = ts_client(), d = ts_client();
	int len = snprintf(req, sizeof(req), "*2\r\n$4\r\nPING\r\n$%d\r\n%0*d\r\n", BIG,
	    BIG, 7);
	ts_send_str(c, "PING\r\n");
	ts_expect(c, "+PONG\r\n");
	ts_send(c, req, (size_t)len);
	ts_expect_closed(c);
	ck_assert_uint_eq(ts_srv->sessions.counters.output_drops_total, 1);
	/* a reply under the limit is sent */
	len = snprintf(req, sizeof(req), "*2\r\n$4\r\nPING\r\n$%d\r\n%0*d\r\n", 60000, 60000,
	    7);
	ts_send(d, req, (size_t)len);
	ts_expect(d, "$60000\r\n0000");
	close(c);
	close(d);
}
END_TEST

/* A request begun and never finished closes the connection after
 * sessions.request_timeout_ms; a connection with nothing unfinished stays,
 * however long it is silent, and so does one waiting for a lock. */
START_TEST(test_request_timeout)
{
	ts_conf->request_timeout_ms = 100;
	int a = ts_client(), b = ts_client(), h = ts_holder(NULL), w = ts_client();
	ts_send_str(a, "PING\r\n*2\r\n$4\r\nPING\r\n$3\r\nab");
	ts_expect(a, "+PONG\r\n");
	ts_send_str(b, "PING\r\n");
	ts_expect(b, "+PONG\r\n");
	/* a request unfinished behind a waiting LOCK does not count */
	ts_send_str(w, "LOCK k\r\n*1\r\n$4\r\nPI");
	ts_expect_closed(a);
	ck_assert_uint_eq(ts_srv->sessions.counters.request_timeouts_total, 1);
	ts_send_str(b, "PING\r\n");
	ts_expect(b, "+PONG\r\n");
	ck_assert_ptr_nonnull(ts_session(4));
	/* once the LOCK is answered, the unfinished one has its time */
	ts_send_str(h, "UNLOCK k\r\n");
	ts_expect(h, ":0\r\n");
	ts_expect_grant(w, NULL, NULL);
	ts_expect_closed(w);
	ck_assert_uint_eq(ts_srv->sessions.counters.request_timeouts_total, 2);
	close(a);
	close(b);
	close(h);
	close(w);
}
END_TEST

START_TEST(test_input_behind_a_wait_is_bounded)
{
	int a = ts_holder(NULL), b = ts_client();
	ts_send_str(b, "LOCK k\r\n");
	ts_pump();
	/* more than SESSION_PIPELINE_MIN bytes pipelined behind the wait */
	static char junk[64 * 1024];
	memset(junk, 0, sizeof(junk));
	for (size_t i = 0; i + 6 <= sizeof(junk); i += 6)
		memcpy(junk + i, "PING\r\n", 6);
	size_t total = 0;
	while (total <= SESSION_PIPELINE_MIN && ts_session(2) != NULL) {
		ssize_t n = write(b, junk, sizeof(junk) - sizeof(junk) % 6);
		if (n > 0)
			total += (size_t)n;
		ts_pump();
	}
	char line[256];
	ts_recv_line(b, line, sizeof(line));
	ck_assert_str_eq(line, "-ERR Protocol error: too much input pipelined behind a "
	    "waiting command");
	ts_expect_closed(b);
	/* the lock is a's still, and free of b's wait */
	ts_expect_status(a, "exclusive", 1, 0);
	close(a);
	close(b);
}
END_TEST

/* ---- on the fake backend: requests in flight, losses --------------------- */

START_TEST(test_close_while_acquire_in_flight)
{
	int a = ts_client();
	ts_send_str(a, "LOCK k\r\n");
	ts_pump();
	fk_expect(0, FK_ACQUIRE, "k");
	/* the session goes away while the backend decides */
	close(a);
	ts_pump();
	ck_assert_uint_eq(ts_srv->sessions.count, 0);
	/* the grant comes to nobody: the lease is given back at once */
	fk_complete(BE_OK, 7);
	fk_expect(0, FK_RELEASE, "k");
	fk_complete(BE_OK, 0);
	/* and the key is free for the next session */
	int b = ts_client();
	ts_send_str(b, "LOCK k\r\n");
	ts_pump();
	fk_expect(0, FK_ACQUIRE, "k");
	fk_complete(BE_OK, 8);
	ck_assert_int_eq(ts_expect_grant(b, NULL, NULL), 8);
	close(b);
}
END_TEST

START_TEST(test_close_while_unlock_in_flight)
{
	int a = ts_client();
	ts_send_str(a, "LOCK k\r\nUNLOCK k\r\nPING\r\n");
	ts_pump();
	fk_complete(BE_OK, 3);
	ts_expect_grant(a, NULL, NULL);
	fk_expect(0, FK_RELEASE, "k");
	ts_expect_nothing(a);	/* the PING waits behind the UNLOCK */
	close(a);
	ts_pump();
	fk_complete(BE_OK, 0);	/* to a session that is gone */
	ts_pump();
	ck_assert_uint_eq(ts_srv->sessions.count, 0);
	ck_assert(locktab_idle(ts_srv->lt));
}
END_TEST

/* Make a's lock on k (fence 5) be lost: its renewal finds another owner. */
static void
lose_lock(void)
{
	fk_now += 10000;	/* a third of the default 30 s TTL */
	locktab_tick(ts_srv->lt);
	fk_expect(0, FK_RENEW, "k");
	fk_complete(BE_NOTOWNER, 0);
	ts_pump();
}

START_TEST(test_loss_told_in_place_of_the_next_command)
{
	int a = ts_client();
	ts_send_str(a, "LOCK k\r\n");
	ts_pump();
	fk_complete(BE_OK, 5);
	ts_expect_grant(a, NULL, NULL);
	lose_lock();
	ts_expect_nothing(a);	/* nothing unasked */
	ts_send_str(a, "PING\r\nPING\r\nUNLOCK k\r\n");
	ts_expect(a, "-LOST k 5 the fake backend says so\r\n+PONG\r\n");
	/* told once: the loss is forgotten after it */
	ts_expect(a, "-NOTHELD key is not held by this session\r\n");
	close(a);
}
END_TEST

START_TEST(test_loss_withdraws_a_waiting_lock)
{
	int a = ts_client(), b = ts_client();
	ts_send_str(a, "LOCK k\r\n");
	ts_pump();
	fk_complete(BE_OK, 5);
	ts_expect_grant(a, NULL, NULL);
	ts_send_str(b, "LOCK other\r\n");
	ts_pump();
	fk_complete(BE_OK, 6);
	ts_expect_grant(b, NULL, NULL);
	/* a waits for "other"; its loss of k answers that LOCK at once */
	ts_send_str(a, "LOCK other\r\nPING\r\n");
	ts_expect_nothing(a);
	lose_lock();
	ts_expect(a, "-LOST k 5 the fake backend says so\r\n+PONG\r\n");
	ts_expect_status(b, "free", 0, 0);	/* STATUS k: nobody holds or waits */
	close(a);
	close(b);
}
END_TEST

/* A session that takes pushes hears of a loss at once, and its next command
 * is still answered -LOST (a library may drop the push); then it is over. */
START_TEST(test_loss_pushed_in_resp3)
{
	int a = ts_client();
	ts_send_str(a, "HELLO 3\r\nCLIENT LOSTPUSH ON\r\nLOCK k\r\n");
	ts_expect_hello(a, 1, 3);
	ts_expect(a, "+OK\r\n");
	ts_pump();
	fk_complete(BE_OK, 5);
	ts_expect_grant(a, NULL, NULL);
	lose_lock();
	ts_expect(a, ">4\r\n$4\r\nlost\r\n$1\r\nk\r\n:5\r\n$24\r\nthe fake backend says so\r\n");
	ts_send_str(a, "PING\r\nPING\r\nUNLOCK k\r\n");
	ts_expect(a, "-LOST k 5 the fake backend says so\r\n+PONG\r\n"
	    "-NOTHELD key is not held by this session\r\n");
	close(a);
}
END_TEST

/* With pushes, a LOCK the session waits on is not withdrawn by a loss: the
 * push tells at once, the reply to the command after it tells again. */
START_TEST(test_loss_pushed_keeps_a_waiting_lock)
{
	int a = ts_client(), b = ts_client();
	ts_send_str(a, "HELLO 3\r\nCLIENT LOSTPUSH ON\r\nLOCK k\r\n");
	ts_expect_hello(a, 1, 3);
	ts_expect(a, "+OK\r\n");
	ts_pump();
	fk_complete(BE_OK, 5);
	ts_expect_grant(a, NULL, NULL);
	ts_send_str(b, "LOCK other\r\n");
	ts_pump();
	fk_complete(BE_OK, 6);
	ts_expect_grant(b, NULL, NULL);
	ts_send_str(a, "LOCK other\r\nPING\r\n");
	ts_expect_nothing(a);
	lose_lock();
	ts_expect(a, ">4\r\n$4\r\nlost\r\n$1\r\nk\r\n:5\r\n$24\r\nthe fake backend says so\r\n");
	ts_expect_nothing(a);
	fk_complete_at((size_t)fk_find(FK_RENEW, NULL), BE_OK, 0);	/* b's renewal */
	ts_send_str(b, "UNLOCK other\r\n");
	ts_pump();
	fk_complete_at((size_t)fk_find(FK_TRANSFER, NULL), BE_OK, 7);	/* b hands to a */
	ts_pump();
	ts_expect(b, ":0\r\n");
	ts_expect_grant(a, NULL, NULL);
	ts_expect(a, "-LOST k 5 the fake backend says so\r\n");
	ts_send_str(a, "PING\r\n");
	ts_expect(a, "+PONG\r\n");
	close(a);
	close(b);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("session");

	suite_case(s, "login", ts_setup_auth, ts_teardown, 0, SUITE_TESTS(test_login_timeout));
	suite_case(s, "ordering", ts_setup, ts_teardown, 0,
	    SUITE_TESTS(test_pipeline_waits_behind_a_lock,
	    test_wait_runs_out_on_the_table_clock, test_fifo_across_sessions,
	    test_close_releases_and_withdraws, test_quit_and_protocol_error));
	suite_case(s, "backend", ts_setup_fake, ts_teardown, 0,
	    SUITE_TESTS(test_close_while_acquire_in_flight, test_close_while_unlock_in_flight,
	    test_loss_told_in_place_of_the_next_command, test_loss_withdraws_a_waiting_lock,
	    test_loss_pushed_in_resp3, test_loss_pushed_keeps_a_waiting_lock));
	suite_case(s, "back-pressure", ts_setup, ts_teardown, 30,
	    SUITE_TESTS(test_output_backpressure, test_input_behind_a_wait_is_bounded,
	    test_output_timeout, test_output_limit, test_close_without_reader,
	    test_request_timeout));
	return suite_run(s);
}
