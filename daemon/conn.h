/*
 * conn — one buffered client connection.
 *
 * A connection moves bytes between its socket and two evbuffers and calls
 * its owner through one callback with an event kind; the peer going away is
 * just another event. It never parses anything.
 */
#ifndef DLOCKD_CONN_H
#define DLOCKD_CONN_H

#include <event2/util.h>

struct event_base;
struct evbuffer;
struct conn;

enum conn_event {
	CONN_READ,	/* bytes arrived: see conn_input() */
	CONN_WRITTEN,	/* the output buffer was written out completely */
	CONN_GONE	/* the peer closed, an error, or conn_close() completed */
};

/* The owner's callback. On CONN_GONE the owner must conn_destroy() it. */
typedef void conn_cb(void *arg, enum conn_event ev);

/* Wrap an accepted socket, which it owns from now on. */
struct conn *conn_create(struct event_base *base, evutil_socket_t fd, conn_cb *cb, void *arg);
/* Close now; no callback follows. */
void conn_destroy(struct conn *c);
struct evbuffer *conn_input(struct conn *c);
struct evbuffer *conn_output(struct conn *c);
/* Pause (on = 0) or resume (on = 1) reading from the peer. */
void conn_read_enable(struct conn *c, int on);
/* Stop reading; CONN_GONE follows once the output is written (or fails). */
void conn_close(struct conn *c);

#endif
