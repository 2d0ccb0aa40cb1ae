/*
 * conn — one buffered client connection on libevent.
 *
 * It owns the socket and its output buffer, and tells its owner everything
 * through one callback with an event kind (bytes waiting, output written,
 * peer gone). It must not parse what it carries nor decide when to close:
 * that is the session's job.
 *
 * The socket costs as few system calls as a request allows: one read per
 * readable event, into the owner's buffer; the replies of a turn leave in
 * one write when the owner flushes, with no wait for the loop; the write
 * event is added only while output waits for a full socket to drain, so
 * that an answered request costs no epoll_ctl.
 */
#include "conn.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "xmalloc.h"

#define CONN_IOV 64	/* pieces of output one write takes at most */
#define CONN_LINGER_MS 10000	/* default of conn_set_linger() */

struct conn {
	evutil_socket_t fd;		/* the socket (owned) */
	struct event *ev_read;		/* the socket is readable (persistent) */
	struct event *ev_write;		/* the socket can take more (persistent; added
					 * only while output waits for it) */
	struct event *ev_gone;		/* delivers CONN_GONE from the loop */
	struct evbuffer *out;		/* output not written yet */
	conn_cb *cb;			/* the owner */
	void *arg;			/* its argument */
	bool reading;			/* ev_read is added */
	bool waiting;			/* ev_write is added: output waits for the socket */
	bool closing;			/* conn_close() was called */
	bool failed;			/* end of stream or an error: CONN_GONE is on its way */
	unsigned linger_ms;		/* how long conn_close() waits for the peer to
					 * take the last output */
};

/* Whether a failed read or write may work later (the socket was not ready). */
static bool
retriable(int err)
{
	return err == EAGAIN || err == EWOULDBLOCK || err == EINTR;
}

/* The connection is over (end of stream, or an error): stop its events and
 * tell the owner from the loop, once. */
static void
conn_fail(struct conn *c)
{
	if (c->failed)
		return;
	c->failed = true;
	if (c->reading)
		event_del(c->ev_read);
	if (c->waiting)
		event_del(c->ev_write);
	c->reading = false;
	c->waiting = false;
	event_active(c->ev_gone, EV_TIMEOUT, 0);
}

/* One write of what the output holds: send() when it is one piece, as a
 * reply mostly is, else sendmsg() of its first CONN_IOV pieces; a peer gone
 * is an error, never a SIGPIPE. Whether it is all out now (false also when
 * the write failed: the connection has failed then). */
static bool
conn_send(struct conn *c)
{
	struct evbuffer_iovec v[CONN_IOV];
	int n = evbuffer_peek(c->out, -1, NULL, v, CONN_IOV);
	ssize_t w;
	if (n <= 0)
		return true;
	if (n == 1) {
		w = send(c->fd, v[0].iov_base, v[0].iov_len, MSG_NOSIGNAL);
	} else {
		struct iovec iov[CONN_IOV];
		struct msghdr msg = { .msg_iov = iov };
		msg.msg_iovlen = (size_t)(n < CONN_IOV ? n : CONN_IOV);
		for (size_t i = 0; i < msg.msg_iovlen; i++) {
			iov[i].iov_base = v[i].iov_base;
			iov[i].iov_len = v[i].iov_len;
		}
		w = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
	}
	if (w < 0 && !retriable(errno)) {
		conn_fail(c);
		return false;
	}
	if (w > 0)
		evbuffer_drain(c->out, (size_t)w);
	return evbuffer_get_length(c->out) == 0;
}

/* Send what waits; a rest waits for the socket to drain, and a closing
 * connection whose output is all out is done. */
static void
conn_push(struct conn *c)
{
	if (c->failed || c->waiting)
		return;	/* gone, or on_writable sends it in order */
	if (conn_send(c)) {
		if (c->closing)
			event_active(c->ev_gone, EV_TIMEOUT, 0);
	} else if (!c->failed) {
		event_add(c->ev_write, NULL);
		c->waiting = true;
	}
}

static void
on_readable(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	(void)fd;
	(void)what;
	c->cb(c->arg, CONN_READ);
}

/* The socket drained: send on; once the output is all out, stop waiting
 * and tell the owner (CONN_GONE when closing). */
static void
on_writable(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	(void)fd;
	(void)what;
	if (!conn_send(c))
		return;	/* more to wait for, or failed: CONN_GONE is queued */
	event_del(c->ev_write);
	c->waiting = false;
	c->cb(c->arg, c->closing ? CONN_GONE : CONN_WRITTEN);
}

static void
on_gone(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	(void)fd;
	(void)what;
	c->cb(c->arg, CONN_GONE);
}

struct conn *
conn_create(struct event_base *base, evutil_socket_t fd, conn_cb *cb, void *arg)
{
	struct conn *c = xcalloc(1, sizeof(*c));
	(void)evutil_make_socket_nonblocking(fd);
	c->fd = fd;
	c->cb = cb;
	c->arg = arg;
	c->linger_ms = CONN_LINGER_MS;
	c->out = evbuffer_new();
	c->ev_read = event_new(base, fd, EV_READ | EV_PERSIST, on_readable, c);
	c->ev_write = event_new(base, fd, EV_WRITE | EV_PERSIST, on_writable, c);
	c->ev_gone = event_new(base, -1, 0, on_gone, c);
	event_add(c->ev_read, NULL);
	c->reading = true;
	return c;
}

void
conn_destroy(struct conn *c)
{
	event_free(c->ev_read);
	event_free(c->ev_write);
	event_free(c->ev_gone);
	evbuffer_free(c->out);
	evutil_closesocket(c->fd);
	free(c);
}

size_t
conn_read(struct conn *c, void *buf, size_t size)
{
	if (c->failed)
		return 0;
	ssize_t n = read(c->fd, buf, size);
	if (n > 0)
		return (size_t)n;
	if (n < 0 && retriable(errno))
		return 0;
	conn_fail(c);	/* end of stream, or an error */
	return 0;
}

struct evbuffer *
conn_output(struct conn *c)
{
	return c->out;
}

void
conn_flush(struct conn *c)
{
	conn_push(c);
}

void
conn_read_enable(struct conn *c, int on)
{
	if (c->closing || c->failed || c->reading == (on != 0))
		return;
	if (on)
		event_add(c->ev_read, NULL);
	else
		event_del(c->ev_read);
	c->reading = on != 0;
}

void
conn_close(struct conn *c)
{
	if (c->closing)
		return;
	conn_read_enable(c, 0);
	c->closing = true;
	conn_push(c);
	if (c->waiting) {
		/* a peer that does not read cannot keep the socket open */
		struct timeval tv = { (time_t)(c->linger_ms / 1000),
		    (suseconds_t)(c->linger_ms % 1000) * 1000 };
		event_add(c->ev_gone, &tv);
	}
}

void
conn_set_linger(struct conn *c, unsigned ms)
{
	c->linger_ms = ms;
}

void
conn_abort(struct conn *c)
{
	evbuffer_drain(c->out, evbuffer_get_length(c->out));
	c->closing = true;
	conn_fail(c);
}
