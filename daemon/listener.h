/*
 * listener — listening sockets and accepting on them.
 *
 * A listener accepts connections on one address and hands each socket to its
 * owner's callback; it never reads or writes an accepted socket.
 */
#ifndef DLOCKD_LISTENER_H
#define DLOCKD_LISTENER_H

#include <stddef.h>
#include <sys/socket.h>

#include <event2/util.h>

#include "addr.h"

struct event_base;
struct listener;

/* A new connection was accepted; fd is the caller's. peer is its address. */
typedef void accept_cb(void *arg, evutil_socket_t fd, const char *peer);

/* TCP keepalive of accepted connections, so that a peer whose host vanished
 * without a reset is noticed: probes after idle_s of silence (0: off), every
 * interval_s, dropped after probes unanswered ones. The same total bounds
 * how long sent data may stay unacknowledged (TCP_USER_TIMEOUT). */
struct listener_keepalive {
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
    int unix_mode, const struct listener_keepalive *ka, accept_cb *cb, void *arg);
void listener_destroy(struct listener *l);
/* Stop or resume accepting. */
void listener_enable(struct listener *l, int on);
/* Write a socket address as text: "ip:port", "[ip6]:port", a Unix socket's
 * path, or "unix" for an unnamed Unix socket (a client's). */
void listener_sockaddr_name(const struct sockaddr *sa, socklen_t salen, char *out,
    size_t outlen);
/* The address it listens on, with the real port if 0 was asked. */
const char *listener_name(const struct listener *l);

#endif
