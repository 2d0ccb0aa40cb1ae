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
 *
 * A TLS connection (conn_create_tls) goes through an OpenSSL bufferevent
 * instead, behind the same calls and events: the bufferevent reads,
 * decrypts, encrypts and writes; a flush hands the output to it when it has
 * written what it had (the rest waits in the output, where the owner sees
 * it), and its callbacks only schedule events of ours, so that no call here
 * runs the owner. What the owner did not take of the input asks for another
 * CONN_READ (the plain path gets that from level-triggered readiness). The handshake has a deadline; a failed handshake or an error
 * is logged at info with OpenSSL's reason and told as CONN_GONE.
 */
#include "conn.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "clock.h"
#include "log.h"
#include "tls.h"
#include "xmalloc.h"

#define CONN_IOV 64	/* pieces of output one write takes at most */
#define CONN_LINGER_MS 10000	/* default of conn_set_linger() */
#define CONN_TLS_INPUT (4 * CONN_READ_MAX) /* decrypted input a TLS connection
				 * buffers before it stops reading (not a
				 * bufferevent watermark: one that suspends
				 * reading strands what OpenSSL decrypted) */

struct conn {
	evutil_socket_t fd;		/* the socket (owned; TLS: by bev) */
	struct event *ev_read;		/* the socket is readable (persistent); NULL
					 * for TLS, as ev_write */
	struct event *ev_write;		/* the socket can take more (persistent; added
					 * only while output waits for it) */
	struct event *ev_gone;		/* delivers CONN_GONE from the loop */
	struct evbuffer *out;		/* output not written yet (TLS: not handed
					 * to the bufferevent yet) */
	struct bufferevent *bev;	/* TLS: the OpenSSL bufferevent (owns the
					 * socket and the SSL); NULL: plain */
	struct conn_tls *x;		/* TLS: the rest of its state; NULL: plain
					 * (a plain connection pays nothing for TLS) */
	conn_cb *cb;			/* the owner */
	void *arg;			/* its argument */
	bool reading;			/* ev_read is added (TLS: bev reads) */
	bool waiting;			/* ev_write is added: output waits for the socket
					 * (TLS: flushed output is not all written) */
	bool closing;			/* conn_close() was called */
	bool failed;			/* end of stream or an error: CONN_GONE is on its way */
	unsigned linger_ms;		/* how long conn_close() waits for the peer to
					 * take the last output */
};

/* What only a TLS connection has. */
struct conn_tls {
	struct event *ev_more;		/* CONN_READ (again, for input left) */
	struct event *ev_written;	/* the bufferevent wrote all it had */
	struct event *ev_handshake;	/* the handshake's deadline */
	char name[100];			/* who the peer is, for logs */
	bool secure;			/* the handshake is done */
	bool bev_reading;		/* bev reads (reading, and its input is
					 * below CONN_TLS_INPUT) */
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
	if (c->bev != NULL) {
		bufferevent_disable(c->bev, EV_READ | EV_WRITE);
		evtimer_del(c->x->ev_handshake);
	} else {
		if (c->reading)
			event_del(c->ev_read);
		if (c->waiting)
			event_del(c->ev_write);
	}
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

/* ---- TLS ------------------------------------------------------------------ */

/* Why the TLS connection failed, into buf: OpenSSL's reasons (its error
 * queue for this connection, oldest first), else the socket's error. */
static const char *
conn_tls_reason(struct conn *c, char *buf, size_t size)
{
	if (tls_bev_failure(c->bev, buf, size) == NULL)
		snprintf(buf, size, "%s", EVUTIL_SOCKET_ERROR() != 0 ?
		    evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()) : "connection reset");
	return buf;
}

/* A closing connection's output is all out: a close_notify (best effort,
 * one non-blocking write), then CONN_GONE from the loop. */
static void
conn_tls_finish(struct conn *c)
{
	if (c->x->secure)
		(void)SSL_shutdown(bufferevent_openssl_get_ssl(c->bev));
	ERR_clear_error();
	conn_fail(c);
}

/* Hand what the owner flushed to the bufferevent when it has written all it
 * had (it writes at once what the socket takes: one TLS record per hand-over
 * rather than per reply); else it waits in c->out, where the owner sees it,
 * until the bufferevent drains. */
static void
conn_tls_push(struct conn *c)
{
	struct evbuffer *wire = bufferevent_get_output(c->bev);

	if (c->failed || evbuffer_get_length(c->out) == 0)
		return;
	if (evbuffer_get_length(wire) == 0)
		evbuffer_add_buffer(wire, c->out);
	if (evbuffer_get_length(wire) > 0 || evbuffer_get_length(c->out) > 0)
		c->waiting = true;
}

/* Let the bufferevent read while the owner reads and the input it has not
 * taken is below CONN_TLS_INPUT; what it has not taken, while it reads,
 * asks for another CONN_READ from the loop. */
static void
conn_tls_more(struct conn *c)
{
	size_t left = evbuffer_get_length(bufferevent_get_input(c->bev));
	bool want = c->reading && !c->failed && left < CONN_TLS_INPUT;

	if (want != c->x->bev_reading) {
		if (want)
			bufferevent_enable(c->bev, EV_READ);
		else
			bufferevent_disable(c->bev, EV_READ);
		c->x->bev_reading = want;
	}
	if (c->reading && !c->failed && left > 0)
		event_active(c->x->ev_more, EV_TIMEOUT, 0);
}

/* The bufferevent decrypted input. It may call this from inside a write
 * (OpenSSL needed a read to write), so the owner is told from the loop. */
static void
on_tls_read(struct bufferevent *bev, void *arg)
{
	(void)bev;
	conn_tls_more(arg);
}

static void
on_tls_more(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	(void)fd;
	(void)what;
	if (c->reading && !c->failed)
		c->cb(c->arg, CONN_READ);
}

/* The bufferevent wrote all it had, maybe from inside conn_flush(): what
 * waits goes on from the loop. */
static void
on_tls_written(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	(void)bev;
	if (!c->failed && (c->waiting || c->closing))
		event_active(c->x->ev_written, EV_TIMEOUT, 0);
}

/* Hand over what waits; once everything is written, tell the owner
 * (CONN_WRITTEN, or CONN_GONE when closing). */
static void
on_tls_drained(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	struct evbuffer *wire = bufferevent_get_output(c->bev);
	(void)fd;
	(void)what;
	if (c->failed || (!c->waiting && !c->closing))
		return;
	if (evbuffer_get_length(wire) == 0)
		evbuffer_add_buffer(wire, c->out);
	if (evbuffer_get_length(wire) > 0 || evbuffer_get_length(c->out) > 0)
		return;		/* on_tls_written tells when it is out */
	c->waiting = false;
	if (c->closing)
		conn_tls_finish(c);
	else
		c->cb(c->arg, CONN_WRITTEN);
}

/* The handshake is done, the peer left, or an error (a failed handshake
 * too): the last two are CONN_GONE, from the loop. */
static void
on_tls_event(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	char why[512];
	(void)bev;
	if (what & BEV_EVENT_CONNECTED) {
		SSL *ssl = bufferevent_openssl_get_ssl(c->bev);
		c->x->secure = true;
		evtimer_del(c->x->ev_handshake);
		log_debug("TLS %s: %s, %s", c->x->name, SSL_get_version(ssl),
		    SSL_get_cipher_name(ssl));
		return;
	}
	if (what & BEV_EVENT_ERROR)
		log_info("TLS %s: %s%s", c->x->name, c->x->secure ? "" : "handshake failed: ",
		    conn_tls_reason(c, why, sizeof(why)));
	else if (!c->x->secure)
		log_info("TLS %s: the peer left during the handshake", c->x->name);
	conn_fail(c);
}

static void
on_tls_handshake_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	(void)fd;
	(void)what;
	log_info("TLS %s: handshake not finished in time (tls.handshake_timeout_ms): closing",
	    c->x->name);
	conn_fail(c);
}

struct conn *
conn_create_tls(struct event_base *base, evutil_socket_t fd, const struct tls *tls,
    const char *name, conn_cb *cb, void *arg)
{
	struct conn *c = xcalloc(1, sizeof(*c));
	struct timeval tv = clock_tv(tls_handshake_ms(tls));

	(void)evutil_make_socket_nonblocking(fd);
	c->cb = cb;
	c->linger_ms = CONN_LINGER_MS;
	c->arg = arg;
	c->x = xcalloc(1, sizeof(*c->x));
	snprintf(c->x->name, sizeof(c->x->name), "%s", name);
	/* callbacks not deferred: they come from libevent's handlers, or from
	 * inside an evbuffer_add_buffer() of conn_tls_push(), and only schedule
	 * the events that call the owner */
	c->bev = bufferevent_openssl_socket_new(base, fd, tls_new_ssl(tls),
	    BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
	if (c->bev == NULL)
		log_fatal("cannot make a TLS connection: out of memory");
	/* a peer that closes without close_notify only ends its stream: it
	 * cannot truncate a reply of ours, and its requests are framed */
	bufferevent_openssl_set_allow_dirty_shutdown(c->bev, 1);
	bufferevent_setcb(c->bev, on_tls_read, on_tls_written, on_tls_event, c);
	c->fd = fd;
	c->out = evbuffer_new();
	c->x->ev_more = event_new(base, -1, 0, on_tls_more, c);
	c->x->ev_written = event_new(base, -1, 0, on_tls_drained, c);
	c->ev_gone = event_new(base, -1, 0, on_gone, c);
	c->x->ev_handshake = evtimer_new(base, on_tls_handshake_timeout, c);
	evtimer_add(c->x->ev_handshake, &tv);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	c->reading = true;
	c->x->bev_reading = true;
	return c;
}

/* Free a TLS connection. */
static void
conn_tls_destroy(struct conn *c)
{
	event_free(c->x->ev_more);
	event_free(c->x->ev_written);
	event_free(c->x->ev_handshake);
	event_free(c->ev_gone);
	bufferevent_free(c->bev);	/* the SSL and the socket with it */
	evbuffer_free(c->out);
	free(c->x);
	free(c);
}

/* ---- the API: plain, or TLS ------------------------------------------------ */

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
	if (c->bev != NULL) {
		conn_tls_destroy(c);
		return;
	}
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
	if (c->bev != NULL) {
		size_t got = bufferevent_read(c->bev, buf, size);
		conn_tls_more(c);
		return got;
	}
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
	if (c->bev == NULL)
		conn_push(c);
	else
		conn_tls_push(c);
}

void
conn_read_enable(struct conn *c, int on)
{
	if (c->closing || c->failed || c->reading == (on != 0))
		return;
	if (c->bev != NULL) {
		c->reading = on != 0;
		conn_tls_more(c);
		return;
	}
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
	if (c->bev == NULL) {
		conn_push(c);
	} else {
		conn_tls_push(c);
		if (!c->failed && !c->waiting) {
			conn_tls_finish(c);	/* all written */
			return;
		}
	}
	if (c->waiting && !c->failed) {
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
