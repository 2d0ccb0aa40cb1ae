/*
 * check_session — unit tests of sessions and commands (daemon/session.c,
 * daemon/cmd.c) on a server of the test's own.
 *
 * Each test makes a server on the memory backend whose lock table runs on a
 * clock the test moves by hand, and talks to it through socketpairs: one end
 * is a session, the other the test's client. The test runs the event loop
 * itself (never blocking), so every interleaving is chosen by the test; a
 * deadline of the lock table is reached by moving the clock and ticking the
 * table, not by waiting. No listener, no daemon process, no network.
 *
 * The "backend" cases run the server on the fake backend (fake_backend.c),
 * which completes an operation only when the test says so: a session can
 * then go away, or lose its lock, while its request is at the backend.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "backend.h"
#include "fake_backend.h"
#include "clock.h"
#include "cmd.h"
#include "conf.h"
#include "locktab.h"
#include "server.h"
#include "session.h"
#include "suite.h"

#define REPLY_MAX 4096		/* longest reply a test reads whole */
#define IO_LIMIT_MS 5000	/* longest a test waits for bytes it expects */

static struct event_base *base;	/* the test's event loop */
static struct conf *conf;	/* defaults, changed by some tests before setup_with */
static struct backend *be;	/* the memory backend */
static struct server *srv;	/* the server under test */
static uint64_t clk = 1000000;	/* the lock table's clock, in ms */

static uint64_t
test_clock(void *arg)
{
	(void)arg;
	return clk;
}

/* A server with the configuration conf (already finished). */
static void
server_up(void)
{
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	be = backend_create("memory", base, conf->backend_settings);
	ck_assert_ptr_nonnull(be);
	srv = server_create(base, conf, be, cmd_dispatch, test_clock, NULL);
}

static void
setup(void)
{
	conf = conf_create();
	ck_assert_int_eq(conf_finish(conf), 0);
	server_up();
}

/* A setup for tests that need a password. */
static void
setup_auth(void)
{
	conf = conf_create();
	ck_assert_int_eq(conf_finish(conf), 0);
	conf->password = strdup("sesame");
	server_up();
}

static void
teardown(void)
{
	server_stop(srv);
	ck_assert_int_eq(server_drain(srv, 1000), 1);
	ck_assert_int_eq(server_destroy(srv), 1);
	backend_destroy(be);
	event_base_free(base);
	conf_destroy(conf);
}

/* Run what the loop has ready, without blocking. */
static void
pump(void)
{
	for (int i = 0; i < 8; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
}

/* A new session; returns the client's end. */
static int
client(void)
{
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	session_accept(&srv->sessions, sv[1], "test", NULL);
	return sv[0];
}

/* The session with id (the n-th accepted, from 1). */
static struct session *
session_by_id(uint64_t id)
{
	struct session *s;
	TAILQ_FOREACH(s, &srv->sessions.all, entry)
		if (s->id == id)
			return s;
	return NULL;
}

static void
send_bytes(int fd, const void *p, size_t len)
{
	const char *b = p;
	while (len > 0) {
		ssize_t n = write(fd, b, len);
		if (n < 0 && errno == EAGAIN) {
			pump();
			continue;
		}
		ck_assert_int_gt(n, 0);
		b += n;
		len -= (size_t)n;
	}
}

static void
send_str(int fd, const char *s)
{
	send_bytes(fd, s, strlen(s));
}

/* Read exactly len bytes into buf, running the loop; fails after
 * IO_LIMIT_MS or at end of stream. */
static void
recv_exact(int fd, char *buf, size_t len)
{
	uint64_t deadline = clock_ms() + IO_LIMIT_MS;
	size_t got = 0;
	while (got < len) {
		ssize_t n = read(fd, buf + got, len - got);
		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		ck_assert_msg(n != 0, "end of stream after %zu of %zu bytes", got, len);
		ck_assert_msg(clock_ms() < deadline, "only %zu of %zu bytes", got, len);
		pump();
	}
}

/* Assert that the next len bytes from fd are exactly want. */
static void
expect_bytes(int fd, const char *want, size_t len)
{
	char buf[REPLY_MAX + 1];
	ck_assert_uint_le(len, REPLY_MAX);
	recv_exact(fd, buf, len);
	buf[len] = '\0';
	ck_assert_msg(memcmp(buf, want, len) == 0, "got '%s', expected '%s'", buf, want);
}

/* Assert that the next bytes from fd are exactly the string want. */
static void
expect(int fd, const char *want)
{
	expect_bytes(fd, want, strlen(want));
}

/* Assert that the next bytes are HELLO's reply to session id in proto. */
static void
expect_hello(int fd, int id, int proto)
{
	const char *name = srv->be->ops->name;
	char want[512];
	snprintf(want, sizeof(want), "%s\r\n$6\r\nserver\r\n$6\r\ndlockd\r\n"
	    "$7\r\nversion\r\n$%zu\r\n%s\r\n$5\r\nproto\r\n:%d\r\n$2\r\nid\r\n:%d\r\n"
	    "$7\r\nbackend\r\n$%zu\r\n%s\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n",
	    proto == 3 ? "%6" : "*12", strlen(DLOCKD_VERSION), DLOCKD_VERSION, proto, id,
	    strlen(name), name);
	expect(fd, want);
}

/* Assert that nothing is to be read from fd once the loop is idle. */
static void
expect_nothing(int fd)
{
	char c;
	pump();
	ck_assert_int_eq(read(fd, &c, 1), -1);
	ck_assert_int_eq(errno, EAGAIN);
}

/* Assert that the session behind fd closed its end (after what was read). */
static void
expect_closed(int fd)
{
	uint64_t deadline = clock_ms() + IO_LIMIT_MS;
	char c;
	for (;;) {
		ssize_t n = read(fd, &c, 1);
		if (n == 0)
			return;
		ck_assert_msg(n < 0, "unexpected byte 0x%02x", (unsigned char)c);
		ck_assert_msg(clock_ms() < deadline, "the session stayed open");
		pump();
	}
}

/* Read one line ending in CRLF (the CRLF not kept). */
static void
recv_line(int fd, char *buf, size_t size)
{
	size_t n = 0;
	for (;;) {
		ck_assert_uint_lt(n + 1, size);
		recv_exact(fd, buf + n, 1);
		if (n > 0 && buf[n - 1] == '\r' && buf[n] == '\n') {
			buf[n - 1] = '\0';
			return;
		}
		n++;
	}
}

/* Read a LOCK grant in RESP2 or RESP3 ([token, fence, ttl]); returns the
 * fence, copies the token into token (33 bytes) and the ttl into *ttl. */
static long long
expect_grant(int fd, char *token, long long *ttl)
{
	char line[128];
	long long fence;
	recv_line(fd, line, sizeof(line));
	ck_assert_str_eq(line, "*3");
	recv_line(fd, line, sizeof(line));
	ck_assert_str_eq(line, "$32");
	recv_line(fd, line, sizeof(line));
	ck_assert_uint_eq(strlen(line), TOKEN_LEN);
	ck_assert_uint_eq(strspn(line, "0123456789abcdef"), TOKEN_LEN);
	if (token != NULL)
		memcpy(token, line, TOKEN_LEN + 1);
	recv_line(fd, line, sizeof(line));
	ck_assert_int_eq(sscanf(line, ":%lld", &fence), 1);
	recv_line(fd, line, sizeof(line));
	long long t;
	ck_assert_int_eq(sscanf(line, ":%lld", &t), 1);
	if (ttl != NULL)
		*ttl = t;
	return fence;
}

/* A new session that holds key "k" exclusively; *fence gets its fence. */
static int
holder(long long *fence)
{
	int fd = client();
	send_str(fd, "LOCK k\r\n");
	long long f = expect_grant(fd, NULL, NULL);
	if (fence != NULL)
		*fence = f;
	return fd;
}

/* Assert the head of a RESP2 STATUS reply: mode, holders, waiters. */
static void
expect_status(int fd, const char *mode, int holders, int waiters)
{
	char want[256];
	snprintf(want, sizeof(want), "*14\r\n$4\r\nmode\r\n$%zu\r\n%s\r\n$7\r\nholders\r\n"
	    ":%d\r\n$7\r\nwaiters\r\n:%d\r\n", strlen(mode), mode, holders, waiters);
	send_str(fd, "STATUS k\r\n");
	expect(fd, want);
}

/* ---- command parsing and reply shapes ------------------------------------ */

START_TEST(test_ping_and_unknown)
{
	int c = client();
	send_str(c, "PING\r\n");
	expect(c, "+PONG\r\n");
	send_str(c, "ping hello\r\n");
	expect(c, "$5\r\nhello\r\n");
	send_bytes(c, "*2\r\n$4\r\nPING\r\n$3\r\na\0b\r\n", 23);
	expect_bytes(c, "$3\r\na\0b\r\n", 9);
	send_str(c, "FROB x\r\n");
	expect(c, "-ERR unknown command 'FROB'\r\n");
	/* a name that is no text is shown safely */
	send_bytes(c, "*1\r\n$3\r\na\r\x01\r\n", 13);
	expect(c, "-ERR unknown command 'a?" "?'\r\n");
	send_str(c, "PING a b\r\n");
	expect(c, "-ERR wrong number of arguments for 'PING' command\r\n");
	send_str(c, "LOCK\r\n");
	expect(c, "-ERR wrong number of arguments for 'LOCK' command\r\n");
	/* the session is still usable after every one of them */
	send_str(c, "PING\r\n");
	expect(c, "+PONG\r\n");
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
	int c = client();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		send_str(c, cases[i].req);
		expect(c, cases[i].reply);
	}
	/* a key one byte too long */
	char big[1100];
	memset(big, 'k', sizeof(big));
	snprintf(big, sizeof(big), "LOCK %01025d\r\n", 0);
	send_str(c, big);
	expect(c, "-ERR key is empty or too long (1 to 1024 bytes)\r\n");
	/* nothing was queued by any of them */
	send_str(c, "STATUS k\r\n");
	expect(c, "*14\r\n$4\r\nmode\r\n$4\r\nfree\r\n$7\r\nholders\r\n:0\r\n$7\r\nwaiters\r\n"
	    ":0\r\n$5\r\nfence\r\n:0\r\n$6\r\nttl_ms\r\n:-1\r\n$5\r\nlimit\r\n:0\r\n"
	    "$7\r\nbackend\r\n$5\r\nlocal\r\n");
	close(c);
}
END_TEST

START_TEST(test_lock_reply_shapes)
{
	char tok[TOKEN_LEN + 1], line[128];
	long long ttl, f1, f2;
	int c = client();

	send_str(c, "LOCK a TTL 5000\r\n");
	f1 = expect_grant(c, tok, &ttl);
	ck_assert_int_eq(ttl, 5000);
	/* reentrant: the same token and fence */
	send_str(c, "LOCK a TTL 5000\r\n");
	char tok2[TOKEN_LEN + 1];
	ck_assert_int_eq(expect_grant(c, tok2, NULL), f1);
	ck_assert_str_eq(tok, tok2);
	send_str(c, "LOCK b SHARED\r\n");
	f2 = expect_grant(c, NULL, &ttl);
	ck_assert_int_gt(f2, f1);
	ck_assert_int_eq(ttl, 30000);	/* locks.default_ttl_ms */
	send_str(c, "LOCK a SHARED\r\n");
	expect(c, "-ERR key is held by this session in exclusive mode; unlock it first\r\n");

	/* LOCKS: [key, token, fence, mode, count] per holding, oldest first */
	send_str(c, "LOCKS\r\n");
	snprintf(line, sizeof(line), ":%lld\r\n", f1);
	expect(c, "*2\r\n*5\r\n$1\r\na\r\n$32\r\n");
	recv_exact(c, tok2, TOKEN_LEN);
	ck_assert_int_eq(memcmp(tok, tok2, TOKEN_LEN), 0);
	expect(c, "\r\n");
	expect(c, line);
	expect(c, "$9\r\nexclusive\r\n:2\r\n*5\r\n$1\r\nb\r\n$32\r\n");
	recv_exact(c, tok2, TOKEN_LEN);
	snprintf(line, sizeof(line), "\r\n:%lld\r\n$6\r\nshared\r\n:1\r\n", f2);
	expect(c, line);

	/* VALIDATE, UNLOCK counts down, then frees */
	snprintf(line, sizeof(line), "VALIDATE a %lld\r\nVALIDATE a %lld\r\n", f1, f1 + 100);
	send_str(c, line);
	expect(c, ":1\r\n:0\r\n");
	send_str(c, "UNLOCK a\r\nUNLOCK a\r\nUNLOCK a\r\n");
	expect(c, ":1\r\n:0\r\n-NOTHELD key is not held by this session\r\n");

	/* RESP3: a null for a LOCK not granted, a map for STATUS */
	send_str(c, "HELLO 3\r\n");
	expect_hello(c, 1, 3);
	int d = client();
	send_str(d, "HELLO\r\nLOCK b WAIT 0\r\n");
	expect_hello(d, 2, 2);
	expect(d, "*-1\r\n");
	send_str(d, "HELLO 3\r\nLOCK b WAIT 0\r\n");
	expect_hello(d, 2, 3);
	expect(d, "_\r\n");
	send_str(c, "STATUS b\r\n");
	expect(c, "%7\r\n$4\r\nmode\r\n$6\r\nshared\r\n$7\r\nholders\r\n:1\r\n"
	    "$7\r\nwaiters\r\n:0\r\n$5\r\nfence\r\n");
	snprintf(line, sizeof(line), ":%lld\r\n", f2);
	expect(c, line);
	expect(c, "$6\r\nttl_ms\r\n:-1\r\n$5\r\nlimit\r\n:0\r\n$7\r\nbackend\r\n$5\r\nlocal\r\n");
	close(c);
	close(d);
}
END_TEST

START_TEST(test_client_subcommands)
{
	int c = client();
	send_str(c, "CLIENT ID\r\nCLIENT GETNAME\r\nCLIENT SETNAME worker-1\r\n"
	    "CLIENT GETNAME\r\nCLIENT SETINFO lib-name redis-py\r\n");
	expect(c, ":1\r\n$-1\r\n+OK\r\n$8\r\nworker-1\r\n+OK\r\n");
	send_str(c, "CLIENT LOSTPUSH ON\r\n");
	expect(c, "-ERR lost pushes need RESP3: send HELLO 3 first\r\n");
	send_str(c, "CLIENT NOPE\r\n");
	expect(c, "-ERR unknown CLIENT subcommand or wrong number of arguments (ID, GETNAME, "
	    "SETNAME name, SETINFO attr value, LIST, INFO, KILL ID id, KILL ADDR ip:port, "
	    "LOSTPUSH ON|OFF)\r\n");
	send_str(c, "HELLO 4\r\n");
	expect(c, "-NOPROTO unsupported protocol version\r\n");
	send_str(c, "HELLO 2 SETNAME\r\n");
	expect(c, "-ERR syntax error in HELLO\r\n");
	/* a second session gets the next id */
	int d = client();
	send_str(d, "CLIENT ID\r\n");
	expect(d, ":2\r\n");
	close(c);
	close(d);
}
END_TEST

START_TEST(test_info)
{
	char line[256];
	bool clients = false, commands = false, held = false;
	int c = client();
	send_str(c, "LOCK x\r\n");
	expect_grant(c, NULL, NULL);
	send_str(c, "INFO\r\n");
	recv_line(c, line, sizeof(line));
	long long len;
	ck_assert_int_eq(sscanf(line, "$%lld", &len), 1);
	ck_assert_int_gt(len, 0);
	ck_assert_int_lt(len, REPLY_MAX);
	char text[REPLY_MAX + 1];
	recv_exact(c, text, (size_t)len + 2);
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

/* With a password, a connection must authenticate within
 * sessions.login_timeout_ms; one that did stays. */
START_TEST(test_login_timeout)
{
	conf->login_timeout_ms = 100;
	int a = client(), b = client();
	send_str(b, "AUTH sesame\r\n");
	expect(b, "+OK\r\n");
	send_str(a, "PING\r\n");
	expect(a, "+PONG\r\n");
	expect_closed(a);
	ck_assert_uint_eq(srv->sessions.counters.login_timeouts_total, 1);
	send_str(b, "PING\r\n");
	expect(b, "+PONG\r\n");
	close(a);
	close(b);
}
END_TEST

START_TEST(test_auth)
{
	int c = client();
	send_str(c, "LOCK k\r\n");
	expect(c, "-NOAUTH Authentication required.\r\n");
	send_str(c, "PING\r\nAUTH wrong\r\nAUTH other sesame\r\n");
	expect(c, "+PONG\r\n-WRONGPASS invalid password\r\n-WRONGPASS invalid password\r\n");
	/* HELLO with a bad argument after AUTH changes nothing */
	send_str(c, "HELLO 2 AUTH default sesame BOGUS\r\nLOCK k\r\n");
	expect(c, "-ERR syntax error in HELLO\r\n-NOAUTH Authentication required.\r\n");
	send_str(c, "AUTH default sesame\r\nLOCK k WAIT 0\r\n");
	expect(c, "+OK\r\n");
	expect_grant(c, NULL, NULL);
	close(c);
}
END_TEST

/* ---- ordering ---------------------------------------------------------------- */

START_TEST(test_pipeline_waits_behind_a_lock)
{
	long long f1;
	int a = holder(&f1), b = client();
	/* b's LOCK waits; the PING behind it is not answered before it */
	send_str(b, "LOCK k\r\nPING\r\nCLIENT ID\r\n");
	expect_nothing(b);
	struct session *sb = session_by_id(2);
	ck_assert_ptr_nonnull(sb);
	ck_assert(sb->pending);
	/* a's own commands go on meanwhile */
	send_str(a, "PING\r\n");
	expect(a, "+PONG\r\n");
	send_str(a, "UNLOCK k\r\n");
	expect(a, ":0\r\n");
	ck_assert_int_gt(expect_grant(b, NULL, NULL), f1);
	expect(b, "+PONG\r\n:2\r\n");
	close(a);
	close(b);
}
END_TEST

START_TEST(test_wait_runs_out_on_the_table_clock)
{
	int a = holder(NULL), b = client();
	send_str(b, "LOCK k WAIT 100\r\nPING\r\n");
	expect_nothing(b);
	clk += 99;
	locktab_tick(srv->lt);
	expect_nothing(b);
	clk += 1;
	locktab_tick(srv->lt);
	expect(b, "*-1\r\n+PONG\r\n");
	expect_status(b, "exclusive", 1, 0);
	close(a);
	close(b);
}
END_TEST

START_TEST(test_fifo_across_sessions)
{
	long long last;
	int c[5];
	c[0] = holder(&last);
	for (int i = 1; i < 5; i++)
		c[i] = client();
	for (int i = 1; i < 5; i++) {
		send_str(c[i], "LOCK k\r\n");
		pump();
	}
	for (int i = 0; i < 4; i++) {
		send_str(c[i], "UNLOCK k\r\n");
		expect(c[i], ":0\r\n");
		for (int j = i + 2; j < 5; j++)
			expect_nothing(c[j]);
		long long f = expect_grant(c[i + 1], NULL, NULL);
		ck_assert_int_gt(f, last);
		last = f;
	}
	for (int i = 0; i < 5; i++)
		close(c[i]);
}
END_TEST

START_TEST(test_close_releases_and_withdraws)
{
	int a = holder(NULL), b = client(), c = client();
	send_str(b, "LOCK k\r\n");
	send_str(c, "LOCK k\r\n");
	pump();
	/* a waiter that goes away leaves the queue; a holder that goes away
	 * hands the key on */
	close(b);
	pump();
	close(a);
	expect_grant(c, NULL, NULL);
	expect_status(c, "exclusive", 1, 0);
	ck_assert_uint_eq(srv->sessions.count, 1);
	close(c);
}
END_TEST

START_TEST(test_quit_and_protocol_error)
{
	int a = client(), b = client();
	send_str(a, "PING\r\nQUIT\r\nPING\r\n");
	expect(a, "+PONG\r\n+OK\r\n");
	expect_closed(a);
	send_str(b, "PING\r\n*1\r\n$x\r\nPING\r\n");
	expect(b, "+PONG\r\n-ERR Protocol error: ");
	char line[256];
	recv_line(b, line, sizeof(line));
	expect_closed(b);
	ck_assert_uint_eq(srv->sessions.counters.protocol_errors_total, 1);
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
		pump();
	}
	return (int)(written / (size_t)len);
}

START_TEST(test_output_backpressure)
{
	enum { PAYLOAD = FLOOD_PAYLOAD };
	int c = client();
	struct session *s = session_by_id(1);
	size_t reply = (size_t)snprintf(NULL, 0, "$%d\r\n%0*d\r\n", PAYLOAD, PAYLOAD, 7);

	ck_assert_ptr_nonnull(s);
	int sent = flood(c, s);
	ck_assert(s->throttled);
	ck_assert_uint_ge(evbuffer_get_length(session_out(s)), SESSION_OUTPUT_HIGH);
	/* it stays so while nobody reads */
	uint64_t answered = srv->sessions.counters.commands_total;
	pump();
	ck_assert_uint_eq(srv->sessions.counters.commands_total, answered);
	/* reading resumes it: every reply arrives, in order, none lost */
	static char buf[PAYLOAD + 32];
	for (int i = 0; i < sent; i++) {
		recv_exact(c, buf, reply);
		ck_assert_int_eq(memcmp(buf, "$1000\r\n", 7), 0);
	}
	ck_assert(!s->throttled);
	expect_nothing(c);
	close(c);
}
END_TEST

/* Wait, running the loop, until session id is gone; fails after
 * IO_LIMIT_MS. */
static void
expect_session_gone(uint64_t id)
{
	uint64_t deadline = clock_ms() + IO_LIMIT_MS;
	while (session_by_id(id) != NULL) {
		ck_assert_msg(clock_ms() < deadline, "session %llu stayed",
		    (unsigned long long)id);
		pump();
	}
}

/* A peer that never reads what it asked for is closed after
 * sessions.output_timeout_ms, which releases its locks. */
START_TEST(test_output_timeout)
{
	conf->output_timeout_ms = 100;
	int c = holder(NULL);
	struct session *s = session_by_id(1);
	ck_assert_ptr_nonnull(s);
	flood(c, s);
	ck_assert(s->throttled);
	expect_session_gone(1);
	ck_assert_uint_eq(srv->sessions.counters.output_drops_total, 1);
	int d = client();
	send_str(d, "LOCK k WAIT 0\r\n");
	expect_grant(d, NULL, NULL);
	close(c);
	close(d);
}
END_TEST

/* A session closed for a protocol error whose replies the peer does not
 * read goes after sessions.output_timeout_ms all the same. */
START_TEST(test_close_without_reader)
{
	static char req[FLOOD_PAYLOAD + 32];
	conf->output_timeout_ms = 100;
	int c = client();
	int len = snprintf(req, sizeof(req), "PING %0*d\r\n", FLOOD_PAYLOAD, 7);
	for (int i = 0; i < 800; i++)
		send_bytes(c, req, (size_t)len);
	send_str(c, "$5\r\n");
	pump();
	struct session *s = session_by_id(1);
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
	conf->max_output_bytes = 65536;
	conf->max_request_bytes = 200000;
	int c = client(), d = client();
	int len = snprintf(req, sizeof(req), "*2\r\n$4\r\nPING\r\n$%d\r\n%0*d\r\n", BIG,
	    BIG, 7);
	send_str(c, "PING\r\n");
	expect(c, "+PONG\r\n");
	send_bytes(c, req, (size_t)len);
	expect_closed(c);
	ck_assert_uint_eq(srv->sessions.counters.output_drops_total, 1);
	/* a reply under the limit is sent */
	len = snprintf(req, sizeof(req), "*2\r\n$4\r\nPING\r\n$%d\r\n%0*d\r\n", 60000, 60000,
	    7);
	send_bytes(d, req, (size_t)len);
	expect(d, "$60000\r\n0000");
	close(c);
	close(d);
}
END_TEST

/* A request begun and never finished closes the connection after
 * sessions.request_timeout_ms; a connection with nothing unfinished stays,
 * however long it is silent, and so does one waiting for a lock. */
START_TEST(test_request_timeout)
{
	conf->request_timeout_ms = 100;
	int a = client(), b = client(), h = holder(NULL), w = client();
	send_str(a, "PING\r\n*2\r\n$4\r\nPING\r\n$3\r\nab");
	expect(a, "+PONG\r\n");
	send_str(b, "PING\r\n");
	expect(b, "+PONG\r\n");
	/* a request unfinished behind a waiting LOCK does not count */
	send_str(w, "LOCK k\r\n*1\r\n$4\r\nPI");
	expect_closed(a);
	ck_assert_uint_eq(srv->sessions.counters.request_timeouts_total, 1);
	send_str(b, "PING\r\n");
	expect(b, "+PONG\r\n");
	ck_assert_ptr_nonnull(session_by_id(4));
	/* once the LOCK is answered, the unfinished one has its time */
	send_str(h, "UNLOCK k\r\n");
	expect(h, ":0\r\n");
	expect_grant(w, NULL, NULL);
	expect_closed(w);
	ck_assert_uint_eq(srv->sessions.counters.request_timeouts_total, 2);
	close(a);
	close(b);
	close(h);
	close(w);
}
END_TEST

START_TEST(test_input_behind_a_wait_is_bounded)
{
	int a = holder(NULL), b = client();
	send_str(b, "LOCK k\r\n");
	pump();
	/* more than SESSION_PIPELINE_MIN bytes pipelined behind the wait */
	static char junk[64 * 1024];
	memset(junk, 0, sizeof(junk));
	for (size_t i = 0; i + 6 <= sizeof(junk); i += 6)
		memcpy(junk + i, "PING\r\n", 6);
	size_t total = 0;
	while (total <= SESSION_PIPELINE_MIN && session_by_id(2) != NULL) {
		ssize_t n = write(b, junk, sizeof(junk) - sizeof(junk) % 6);
		if (n > 0)
			total += (size_t)n;
		pump();
	}
	char line[256];
	recv_line(b, line, sizeof(line));
	ck_assert_str_eq(line, "-ERR Protocol error: too much input pipelined behind a "
	    "waiting command");
	expect_closed(b);
	/* the lock is a's still, and free of b's wait */
	expect_status(a, "exclusive", 1, 0);
	close(a);
	close(b);
}
END_TEST

/* ---- on the fake backend: requests in flight, losses --------------------- */

static void
setup_fake(void)
{
	conf = conf_create();
	ck_assert_int_eq(conf_finish(conf), 0);
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	fk_start(&fk_ops);
	be = &fk_be;
	srv = server_create(base, conf, be, cmd_dispatch, fk_clock, NULL);
}

static void
teardown_fake(void)
{
	server_stop(srv);
	fk_drain();	/* the backend confirms the releases of the stop */
	ck_assert_int_eq(server_destroy(srv), 1);
	fk_stop();
	event_base_free(base);
	conf_destroy(conf);
}

START_TEST(test_close_while_acquire_in_flight)
{
	int a = client();
	send_str(a, "LOCK k\r\n");
	pump();
	fk_expect(0, FK_ACQUIRE, "k");
	/* the session goes away while the backend decides */
	close(a);
	pump();
	ck_assert_uint_eq(srv->sessions.count, 0);
	/* the grant comes to nobody: the lease is given back at once */
	fk_complete(BE_OK, 7);
	fk_expect(0, FK_RELEASE, "k");
	fk_complete(BE_OK, 0);
	/* and the key is free for the next session */
	int b = client();
	send_str(b, "LOCK k\r\n");
	pump();
	fk_expect(0, FK_ACQUIRE, "k");
	fk_complete(BE_OK, 8);
	ck_assert_int_eq(expect_grant(b, NULL, NULL), 8);
	close(b);
}
END_TEST

START_TEST(test_close_while_unlock_in_flight)
{
	int a = client();
	send_str(a, "LOCK k\r\nUNLOCK k\r\nPING\r\n");
	pump();
	fk_complete(BE_OK, 3);
	expect_grant(a, NULL, NULL);
	fk_expect(0, FK_RELEASE, "k");
	expect_nothing(a);	/* the PING waits behind the UNLOCK */
	close(a);
	pump();
	fk_complete(BE_OK, 0);	/* to a session that is gone */
	pump();
	ck_assert_uint_eq(srv->sessions.count, 0);
	ck_assert(locktab_idle(srv->lt));
}
END_TEST

/* Make a's lock on k (fence 5) be lost: its renewal finds another owner. */
static void
lose_lock(void)
{
	fk_now += 10000;	/* a third of the default 30 s TTL */
	locktab_tick(srv->lt);
	fk_expect(0, FK_RENEW, "k");
	fk_complete(BE_NOTOWNER, 0);
	pump();
}

START_TEST(test_loss_told_in_place_of_the_next_command)
{
	int a = client();
	send_str(a, "LOCK k\r\n");
	pump();
	fk_complete(BE_OK, 5);
	expect_grant(a, NULL, NULL);
	lose_lock();
	expect_nothing(a);	/* nothing unasked */
	send_str(a, "PING\r\nPING\r\nUNLOCK k\r\n");
	expect(a, "-LOST k 5 the fake backend says so\r\n+PONG\r\n");
	/* told once: the loss is forgotten after it */
	expect(a, "-NOTHELD key is not held by this session\r\n");
	close(a);
}
END_TEST

START_TEST(test_loss_withdraws_a_waiting_lock)
{
	int a = client(), b = client();
	send_str(a, "LOCK k\r\n");
	pump();
	fk_complete(BE_OK, 5);
	expect_grant(a, NULL, NULL);
	send_str(b, "LOCK other\r\n");
	pump();
	fk_complete(BE_OK, 6);
	expect_grant(b, NULL, NULL);
	/* a waits for "other"; its loss of k answers that LOCK at once */
	send_str(a, "LOCK other\r\nPING\r\n");
	expect_nothing(a);
	lose_lock();
	expect(a, "-LOST k 5 the fake backend says so\r\n+PONG\r\n");
	expect_status(b, "free", 0, 0);	/* STATUS k: nobody holds or waits */
	close(a);
	close(b);
}
END_TEST

/* A session that takes pushes hears of a loss at once, and its next command
 * is still answered -LOST (a library may drop the push); then it is over. */
START_TEST(test_loss_pushed_in_resp3)
{
	int a = client();
	send_str(a, "HELLO 3\r\nCLIENT LOSTPUSH ON\r\nLOCK k\r\n");
	expect_hello(a, 1, 3);
	expect(a, "+OK\r\n");
	pump();
	fk_complete(BE_OK, 5);
	expect_grant(a, NULL, NULL);
	lose_lock();
	expect(a, ">4\r\n$4\r\nlost\r\n$1\r\nk\r\n:5\r\n$24\r\nthe fake backend says so\r\n");
	send_str(a, "PING\r\nPING\r\nUNLOCK k\r\n");
	expect(a, "-LOST k 5 the fake backend says so\r\n+PONG\r\n"
	    "-NOTHELD key is not held by this session\r\n");
	close(a);
}
END_TEST

/* With pushes, a LOCK the session waits on is not withdrawn by a loss: the
 * push tells at once, the reply to the command after it tells again. */
START_TEST(test_loss_pushed_keeps_a_waiting_lock)
{
	int a = client(), b = client();
	send_str(a, "HELLO 3\r\nCLIENT LOSTPUSH ON\r\nLOCK k\r\n");
	expect_hello(a, 1, 3);
	expect(a, "+OK\r\n");
	pump();
	fk_complete(BE_OK, 5);
	expect_grant(a, NULL, NULL);
	send_str(b, "LOCK other\r\n");
	pump();
	fk_complete(BE_OK, 6);
	expect_grant(b, NULL, NULL);
	send_str(a, "LOCK other\r\nPING\r\n");
	expect_nothing(a);
	lose_lock();
	expect(a, ">4\r\n$4\r\nlost\r\n$1\r\nk\r\n:5\r\n$24\r\nthe fake backend says so\r\n");
	expect_nothing(a);
	fk_complete_at((size_t)fk_find(FK_RENEW, NULL), BE_OK, 0);	/* b's renewal */
	send_str(b, "UNLOCK other\r\n");
	pump();
	fk_complete_at((size_t)fk_find(FK_TRANSFER, NULL), BE_OK, 7);	/* b hands to a */
	pump();
	expect(b, ":0\r\n");
	expect_grant(a, NULL, NULL);
	expect(a, "-LOST k 5 the fake backend says so\r\n");
	send_str(a, "PING\r\n");
	expect(a, "+PONG\r\n");
	close(a);
	close(b);
}
END_TEST

/* The session suite, the tests of session.c: commands, auth, ordering, backend,
 * back-pressure. */
int
main(void)
{
	signal(SIGPIPE, SIG_IGN);	/* a test writes to a session that closed */

	Suite *s = suite_create("session");

	suite_case(s, "commands", setup, teardown, 0, SUITE_TESTS(test_ping_and_unknown,
	    test_lock_syntax_errors, test_lock_reply_shapes, test_client_subcommands,
	    test_info));
	suite_case(s, "auth", setup_auth, teardown, 0, SUITE_TESTS(test_auth,
	    test_login_timeout));
	suite_case(s, "ordering", setup, teardown, 0,
	    SUITE_TESTS(test_pipeline_waits_behind_a_lock,
	    test_wait_runs_out_on_the_table_clock, test_fifo_across_sessions,
	    test_close_releases_and_withdraws, test_quit_and_protocol_error));
	suite_case(s, "backend", setup_fake, teardown_fake, 0,
	    SUITE_TESTS(test_close_while_acquire_in_flight, test_close_while_unlock_in_flight,
	    test_loss_told_in_place_of_the_next_command, test_loss_withdraws_a_waiting_lock,
	    test_loss_pushed_in_resp3, test_loss_pushed_keeps_a_waiting_lock));
	suite_case(s, "back-pressure", setup, teardown, 30,
	    SUITE_TESTS(test_output_backpressure, test_input_behind_a_wait_is_bounded,
	    test_output_timeout, test_output_limit, test_close_without_reader,
	    test_request_timeout));
	return suite_run(s);
}
