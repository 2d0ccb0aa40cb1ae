/*
 * check_conn — unit tests of client connections (daemon/conn.c) over
 * socketpairs, with the test running the event loop itself.
 *
 * What is checked: bytes read reach the owner through conn_read(); a flush
 * writes at once, without the loop; output that a full socket cannot take
 * waits for it to drain and is then told as CONN_WRITTEN; conn_close()
 * sends what is left before CONN_GONE; the end of the stream and a peer
 * gone while writing are told as CONN_GONE from the loop, never from inside
 * conn_read() or conn_flush(), and never as a SIGPIPE (this suite leaves
 * SIGPIPE at its default, which would kill it); reading can be paused.
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "conn.h"
#include "suite.h"

#define PUMP_ROUNDS 8		/* loop turns one pump() runs */

/* The connection's owner, as the test sees it. */
struct owner {
	struct conn *c;		/* NULL once destroyed on CONN_GONE */
	char got[1 << 16];	/* bytes taken with conn_read */
	size_t gotlen;
	int reads;		/* CONN_READ events */
	int written;		/* CONN_WRITTEN events */
	int gone;		/* CONN_GONE events */
};

static struct event_base *base;
static struct owner own;
static int peer;		/* the test's end of the socketpair */

static void
on_conn(void *arg, enum conn_event ev)
{
	struct owner *o = arg;
	switch (ev) {
	case CONN_READ: {
		o->reads++;
		size_t room = sizeof(o->got) - o->gotlen;
		size_t n = conn_read(o->c, o->got + o->gotlen, room < CONN_READ_MAX ? room :
		    CONN_READ_MAX);
		o->gotlen += n;
		/* the end of the stream is told later, from the loop */
		ck_assert_int_eq(o->gone, 0);
		break;
	}
	case CONN_WRITTEN:
		o->written++;
		break;
	case CONN_GONE:
		o->gone++;
		conn_destroy(o->c);
		o->c = NULL;
		break;
	}
}

static void
setup(void)
{
	int sv[2];
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	memset(&own, 0, sizeof(own));
	own.c = conn_create(base, sv[1], on_conn, &own);
	ck_assert_ptr_nonnull(own.c);
	peer = sv[0];
}

static void
teardown(void)
{
	if (own.c != NULL)
		conn_destroy(own.c);
	if (peer >= 0)
		close(peer);
	event_base_free(base);
}

/* Run what the loop has ready, without blocking. */
static void
pump(void)
{
	for (int i = 0; i < PUMP_ROUNDS; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
}

/* Read what the peer end has now, without blocking; returns how much. */
static size_t
peer_read(char *buf, size_t size)
{
	ssize_t n = recv(peer, buf, size, MSG_DONTWAIT);
	if (n < 0) {
		ck_assert_msg(errno == EAGAIN || errno == EWOULDBLOCK, "recv: %s",
		    strerror(errno));
		return 0;
	}
	return (size_t)n;
}

START_TEST(read_then_flush_at_once)
{
	char buf[64];
	ck_assert_int_eq(send(peer, "hello", 5, 0), 5);
	pump();
	ck_assert_int_ge(own.reads, 1);
	ck_assert_uint_eq(own.gotlen, 5);
	ck_assert_mem_eq(own.got, "hello", 5);
	/* replies leave on the flush, before the loop runs again */
	evbuffer_add(conn_output(own.c), "wor", 3);
	evbuffer_add(conn_output(own.c), "ld", 2);
	conn_flush(own.c);
	ck_assert_uint_eq(evbuffer_get_length(conn_output(own.c)), 0);
	ck_assert_uint_eq(peer_read(buf, sizeof(buf)), 5);
	ck_assert_mem_eq(buf, "world", 5);
	/* nothing to tell about output that never waited */
	pump();
	ck_assert_int_eq(own.written, 0);
	ck_assert_int_eq(own.gone, 0);
	/* a flush of nothing writes nothing */
	conn_flush(own.c);
	ck_assert_uint_eq(peer_read(buf, sizeof(buf)), 0);
}
END_TEST

START_TEST(end_of_stream_is_gone_from_the_loop)
{
	ck_assert_int_eq(send(peer, "abc", 3, 0), 3);
	close(peer);
	peer = -1;
	pump();	/* on_conn asserts that gone comes after conn_read returns */
	ck_assert_uint_eq(own.gotlen, 3);
	ck_assert_int_eq(own.gone, 1);
	ck_assert_ptr_null(own.c);
}
END_TEST

START_TEST(full_socket_drains_then_written)
{
	enum { LEN = 4 << 20 };
	char *data = malloc(LEN), *back = malloc(LEN);
	ck_assert_ptr_nonnull(data);
	ck_assert_ptr_nonnull(back);
	for (size_t i = 0; i < LEN; i++)
		data[i] = (char)(i * 31 + i / 4099);
	evbuffer_add(conn_output(own.c), data, LEN);
	conn_flush(own.c);
	/* more than a socket holds: the rest waits, and nobody is told yet */
	ck_assert_uint_gt(evbuffer_get_length(conn_output(own.c)), 0);
	ck_assert_int_eq(own.written, 0);
	conn_flush(own.c);	/* again while it waits: no harm, no reorder */
	size_t have = 0;
	for (int spins = 0; have < LEN && spins < 100000; spins++) {
		have += peer_read(back + have, LEN - have);
		pump();
	}
	ck_assert_uint_eq(have, LEN);
	ck_assert_int_eq(memcmp(back, data, LEN), 0);
	pump();
	ck_assert_int_eq(own.written, 1);
	ck_assert_uint_eq(evbuffer_get_length(conn_output(own.c)), 0);
	free(data);
	free(back);
}
END_TEST

START_TEST(close_sends_the_rest_first)
{
	enum { LEN = 1 << 20 };
	char *data = malloc(LEN), *back = malloc(LEN + 1);
	ck_assert_ptr_nonnull(data);
	ck_assert_ptr_nonnull(back);
	memset(data, 'x', LEN);
	evbuffer_add(conn_output(own.c), data, LEN);
	conn_close(own.c);
	ck_assert_int_eq(own.gone, 0);
	size_t have = 0;
	for (int spins = 0; own.gone == 0 && spins < 100000; spins++) {
		have += peer_read(back + have, LEN + 1 - have);
		pump();
	}
	ck_assert_int_eq(own.gone, 1);
	ck_assert_int_eq(own.written, 0);
	have += peer_read(back + have, LEN + 1 - have);
	ck_assert_uint_eq(have, LEN);
	ck_assert_int_eq(memcmp(back, data, LEN), 0);
	/* and the socket is closed after it */
	ck_assert_int_eq(recv(peer, back, 1, MSG_DONTWAIT), 0);
	free(data);
	free(back);
}
END_TEST

START_TEST(close_with_nothing_to_send)
{
	conn_close(own.c);
	conn_close(own.c);	/* twice is once */
	ck_assert_int_eq(own.gone, 0);
	pump();
	ck_assert_int_eq(own.gone, 1);
}
END_TEST

START_TEST(write_to_a_gone_peer)
{
	close(peer);
	peer = -1;
	evbuffer_add(conn_output(own.c), "late", 4);
	conn_flush(own.c);	/* EPIPE, not a SIGPIPE; told from the loop */
	ck_assert_int_eq(own.gone, 0);
	pump();
	ck_assert_int_eq(own.gone, 1);
}
END_TEST

START_TEST(reading_paused_and_resumed)
{
	conn_read_enable(own.c, 0);
	conn_read_enable(own.c, 0);
	ck_assert_int_eq(send(peer, "wait", 4, 0), 4);
	pump();
	ck_assert_int_eq(own.reads, 0);
	conn_read_enable(own.c, 1);
	pump();
	ck_assert_uint_eq(own.gotlen, 4);
	ck_assert_mem_eq(own.got, "wait", 4);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("conn");

	suite_case(s, "conn", setup, teardown, 0, SUITE_TESTS(read_then_flush_at_once,
	    end_of_stream_is_gone_from_the_loop, full_socket_drains_then_written,
	    close_sends_the_rest_first, close_with_nothing_to_send, write_to_a_gone_peer,
	    reading_paused_and_resumed));
	return suite_run(s);
}
