/*
 * conn — listeners and buffered connections.
 *
 * A connection moves bytes between its socket and two evbuffers and calls
 * its owner through one callback with an event kind; the peer going away is
 * just another event. It never parses anything.
 */
#ifndef DLOCKD_CONN_H
#define DLOCKD_CONN_H

#include <event2/util.h>

#include "addr.h"

struct event_base;
struct evbuffer;
struct conn;
struct listener;

enum conn_event {
	CONN_READ,	/* bytes arrived: see conn_input() */
	CONN_WRITTEN,	/* the output buffer was written out completely */
	CONN_GONE	/* the peer closed, an error, or conn_close() completed */
};

/* The owner's callback. On CONN_GONE the owner must conn_destroy() it. */
typedef void conn_cb(void *arg, enum conn_event ev);

/* A new connection was accepted; fd is the caller's. peer is its address. */
typedef void accept_cb(void *arg, evutil_socket_t fd, const char *peer);

/* TCP keepalive of accepted connections, so that a peer whose host vanished
 * without a reset is noticed: probes after idle_s of silence (0: off), every
 * interval_s, dropped after probes unanswered ones. The same total bounds
 * how long sent data may stay unacknowledged (TCP_USER_TIMEOUT). */
struct conn_keepalive {
	int idle_s;
	int interval_s;
	int probes;
};

/*
 * Listen on addr (TCP or Unix; a Unix socket file left by a dead daemon is
 * replaced, a live one or a non-socket file is an error). NULL after logging
 * why. The caller owns it (listener_destroy, which removes a Unix socket file).
 */
struct listener *listener_create(struct event_base *base, const struct addr *addr,
    int unix_mode, const struct conn_keepalive *ka, accept_cb *cb, void *arg);
void listener_destroy(struct listener *l);
/* Stop or resume accepting. */
void listener_enable(struct listener *l, int on);
/* The address it listens on, with the real port if 0 was asked. */
const char *listener_name(const struct listener *l);

/* Wrap an accepted socket; NULL when out of memory (fd is then closed). */
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
