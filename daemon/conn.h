/*
 * conn — one buffered client connection.
 *
 * A connection moves bytes between its socket and its owner: the owner
 * takes what arrived with conn_read() when told CONN_READ, and appends its
 * replies to conn_output(), which conn_flush() sends. It calls its owner
 * through one callback with an event kind; the peer going away is just
 * another event. It never parses anything. A connection is plain
 * (conn_create) or TLS (conn_create_tls): the calls and events are the same.
 */
#ifndef DLOCKD_CONN_H
#define DLOCKD_CONN_H

#include <stddef.h>

#include <event2/util.h>

struct event_base;
struct evbuffer;
struct conn;
struct tls;

#define CONN_READ_MAX 16384	/* bytes an owner should take per CONN_READ */

enum conn_event {
	CONN_READ,	/* bytes are waiting: take them with conn_read() */
	CONN_WRITTEN,	/* output that had to wait for the socket is all written */
	CONN_GONE	/* the peer closed, an error, or conn_close() completed */
};

/* The owner's callback. On CONN_GONE the owner must conn_destroy() it. */
typedef void conn_cb(void *arg, enum conn_event ev);

/* Wrap an accepted socket, which it owns from now on (it is made
 * non-blocking). Never NULL; the caller owns it (conn_destroy). */
struct conn *conn_create(struct event_base *base, evutil_socket_t fd, conn_cb *cb, void *arg);
/* The same for a TLS connection: the server's side of a handshake with
 * tls's context starts now, and must end within its handshake timeout;
 * bytes flow once it is done. name is who the peer is, for the log lines
 * on a failed handshake (copied). */
struct conn *conn_create_tls(struct event_base *base, evutil_socket_t fd,
    const struct tls *tls, const char *name, conn_cb *cb, void *arg);
/* Close now; no callback follows. */
void conn_destroy(struct conn *c);
/*
 * Take up to size bytes the peer sent into buf: one read from the socket.
 * Returns how many, or 0 when none is waiting now. The end of the stream and
 * errors return 0 and are told as CONN_GONE from the event loop.
 */
size_t conn_read(struct conn *c, void *buf, size_t size);
/* Where replies go; they leave on conn_flush() or conn_close(). */
struct evbuffer *conn_output(struct conn *c);
/*
 * Send what the output holds, as far as the socket takes it now (one write);
 * the rest goes as the socket drains (CONN_WRITTEN then). It never calls the
 * owner back, so that it may be called from inside any callback: a failed
 * write is told as CONN_GONE from the event loop.
 */
void conn_flush(struct conn *c);
/* Pause (on = 0) or resume (on = 1) reading from the peer. */
void conn_read_enable(struct conn *c, int on);
/* Stop reading; CONN_GONE follows once the output is written (or fails),
 * or when the peer has not taken it within the linger time. */
void conn_close(struct conn *c);
/* How long conn_close() waits for the peer to take the last output, in
 * milliseconds (10 s unless set). */
void conn_set_linger(struct conn *c, unsigned ms);
/* Drop the output unsent and stop; CONN_GONE follows from the loop. Never
 * calls the owner back. */
void conn_abort(struct conn *c);

#endif
