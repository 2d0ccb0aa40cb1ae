/*
 * tserver — a server under test and its socketpair clients (see tserver.h).
 */
#include "tserver.h"

#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "backend.h"
#include "clock.h"
#include "cmd.h"
#include "conf.h"
#include "fake_backend.h"
#include "server.h"
#include "session.h"

struct event_base *ts_base;
struct conf *ts_conf;
struct server *ts_srv;
uint64_t ts_now = 1000000;

static struct backend *ts_be;	/* the memory backend, or NULL on the fake one */

/* The memory backend's table clock: ts_now. */
static uint64_t
ts_clock(void *arg)
{
	(void)arg;
	return ts_now;
}

/* A finished default configuration, with password unless NULL, and an
 * event loop. */
static void
ts_start(const char *password)
{
	signal(SIGPIPE, SIG_IGN);	/* a test may write to a session that closed */
	ts_conf = conf_create();
	ck_assert_int_eq(conf_finish(ts_conf), 0);
	if (password != NULL)
		ts_conf->password = strdup(password);
	ts_base = event_base_new();
	ck_assert_ptr_nonnull(ts_base);
}

/* The server on the memory backend, with password unless NULL. */
static void
ts_start_memory(const char *password)
{
	ts_start(password);
	ts_be = backend_create("memory", ts_base, ts_conf->backend_settings);
	ck_assert_ptr_nonnull(ts_be);
	ts_srv = server_create(ts_base, ts_conf, ts_be, cmd_dispatch, ts_clock, NULL);
}

void
ts_setup(void)
{
	ts_start_memory(NULL);
}

void
ts_setup_auth(void)
{
	ts_start_memory(TS_PASSWORD);
}

void
ts_setup_fake(void)
{
	ts_start(NULL);
	fk_start(&fk_ops);
	ts_be = NULL;
	ts_srv = server_create(ts_base, ts_conf, &fk_be, cmd_dispatch, fk_clock, NULL);
}

void
ts_teardown(void)
{
	server_stop(ts_srv);
	if (ts_be != NULL) {
		ck_assert_int_eq(server_drain(ts_srv, 1000), 1);
		ck_assert_int_eq(server_destroy(ts_srv), 1);
		backend_destroy(ts_be);
	} else {
		fk_drain();	/* the backend confirms the releases of the stop */
		ck_assert_int_eq(server_destroy(ts_srv), 1);
		fk_stop();
	}
	event_base_free(ts_base);
	conf_destroy(ts_conf);
}

void
ts_pump(void)
{
	for (int i = 0; i < 8; i++)
		event_base_loop(ts_base, EVLOOP_NONBLOCK);
}

int
ts_client(void)
{
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	session_accept(&ts_srv->sessions, sv[1], "test", NULL);
	return sv[0];
}

struct session *
ts_session(uint64_t id)
{
	struct session *s;
	TAILQ_FOREACH(s, &ts_srv->sessions.all, entry)
		if (s->id == id)
			return s;
	return NULL;
}

int
ts_holder(long long *fence)
{
	int fd = ts_client();
	ts_send_str(fd, "LOCK k\r\n");
	long long f = ts_expect_grant(fd, NULL, NULL);
	if (fence != NULL)
		*fence = f;
	return fd;
}

void
ts_send(int fd, const void *p, size_t len)
{
	const char *b = p;
	while (len > 0) {
		ssize_t n = write(fd, b, len);
		if (n < 0 && errno == EAGAIN) {
			ts_pump();
			continue;
		}
		ck_assert_int_gt(n, 0);
		b += n;
		len -= (size_t)n;
	}
}

void
ts_send_str(int fd, const char *s)
{
	ts_send(fd, s, strlen(s));
}

void
ts_recv(int fd, char *buf, size_t len)
{
	uint64_t deadline = clock_ms() + TS_IO_LIMIT_MS;
	size_t got = 0;
	while (got < len) {
		ssize_t n = read(fd, buf + got, len - got);
		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		ck_assert_msg(n != 0, "end of stream after %zu of %zu bytes", got, len);
		ck_assert_msg(clock_ms() < deadline, "only %zu of %zu bytes", got, len);
		ts_pump();
	}
}

void
ts_recv_line(int fd, char *buf, size_t size)
{
	size_t n = 0;
	for (;;) {
		ck_assert_uint_lt(n + 1, size);
		ts_recv(fd, buf + n, 1);
		if (n > 0 && buf[n - 1] == '\r' && buf[n] == '\n') {
			buf[n - 1] = '\0';
			return;
		}
		n++;
	}
}

void
ts_expect_bytes(int fd, const char *want, size_t len)
{
	char buf[TS_REPLY_MAX + 1];
	ck_assert_uint_le(len, TS_REPLY_MAX);
	ts_recv(fd, buf, len);
	buf[len] = '\0';
	ck_assert_msg(memcmp(buf, want, len) == 0, "got '%s', expected '%s'", buf, want);
}

void
ts_expect(int fd, const char *want)
{
	ts_expect_bytes(fd, want, strlen(want));
}

void
ts_expect_nothing(int fd)
{
	char c;
	ts_pump();
	ck_assert_int_eq(read(fd, &c, 1), -1);
	ck_assert_int_eq(errno, EAGAIN);
}

void
ts_expect_closed(int fd)
{
	uint64_t deadline = clock_ms() + TS_IO_LIMIT_MS;
	char c;
	for (;;) {
		ssize_t n = read(fd, &c, 1);
		if (n == 0)
			return;
		ck_assert_msg(n < 0, "unexpected byte 0x%02x", (unsigned char)c);
		ck_assert_msg(clock_ms() < deadline, "the session stayed open");
		ts_pump();
	}
}

void
ts_expect_hello(int fd, int id, int proto)
{
	const char *name = ts_srv->be->ops->name;
	char want[512];
	snprintf(want, sizeof(want), "%s\r\n$6\r\nserver\r\n$6\r\ndlockd\r\n"
	    "$7\r\nversion\r\n$%zu\r\n%s\r\n$5\r\nproto\r\n:%d\r\n$2\r\nid\r\n:%d\r\n"
	    "$7\r\nbackend\r\n$%zu\r\n%s\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n",
	    proto == 3 ? "%6" : "*12", strlen(DLOCKD_VERSION), DLOCKD_VERSION, proto, id,
	    strlen(name), name);
	ts_expect(fd, want);
}

long long
ts_expect_grant(int fd, char *token, long long *ttl)
{
	char line[128];
	long long fence, t;
	ts_recv_line(fd, line, sizeof(line));
	ck_assert_str_eq(line, "*3");
	ts_recv_line(fd, line, sizeof(line));
	ck_assert_str_eq(line, "$32");
	ts_recv_line(fd, line, sizeof(line));
	ck_assert_uint_eq(strlen(line), TOKEN_LEN);
	ck_assert_uint_eq(strspn(line, "0123456789abcdef"), TOKEN_LEN);
	if (token != NULL)
		memcpy(token, line, TOKEN_LEN + 1);
	ts_recv_line(fd, line, sizeof(line));
	ck_assert_int_eq(sscanf(line, ":%lld", &fence), 1);
	ts_recv_line(fd, line, sizeof(line));
	ck_assert_int_eq(sscanf(line, ":%lld", &t), 1);
	if (ttl != NULL)
		*ttl = t;
	return fence;
}

void
ts_expect_status(int fd, const char *mode, int holders, int waiters)
{
	char want[256];
	snprintf(want, sizeof(want), "*14\r\n$4\r\nmode\r\n$%zu\r\n%s\r\n$7\r\nholders\r\n"
	    ":%d\r\n$7\r\nwaiters\r\n:%d\r\n", strlen(mode), mode, holders, waiters);
	ts_send_str(fd, "STATUS k\r\n");
	ts_expect(fd, want);
}
