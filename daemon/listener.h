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
 * replaced, a live one or a non-socket file is an error). A Unix socket gets
 * the permission bits unix_mode and, unless unix_gid is negative, the group
 * unix_gid. NULL after logging why. The caller owns it (listener_destroy,
 * which removes a Unix socket file).
 */
struct listener *listener_create(struct event_base *base, const struct addr *addr,
    int unix_mode, long long unix_gid, const struct listener_keepalive *ka, accept_cb *cb,
    void *arg);
/*
 * Whether addr could be listened on, as far as that is known without a side
 * effect: a Unix socket's directory exists; a TCP host (resolved as
 * listener_create() does) is a wildcard, a loopback address or an address of
 * one of this host's interfaces. Nothing is bound. 0, or -1 with why (size
 * bytes) saying what is wrong.
 */
int listener_check(const struct addr *addr, char *why, size_t size)
	__attribute__((warn_unused_result));
/* Whether dir is a directory (where a socket or a log file is to be made):
 * 0, or -1 with why (size bytes) saying what is wrong. */
int listener_check_dir(const char *dir, char *why, size_t size)
	__attribute__((warn_unused_result));

/*
 * Accept on fd, a socket already bound and listening that the service
 * manager passed (socket activation), TCP or Unix; the listener owns it from
 * then on, but never removes its socket file. NULL after logging why.
 */
struct listener *listener_adopt(struct event_base *base, evutil_socket_t fd,
    const struct listener_keepalive *ka, accept_cb *cb, void *arg);
void listener_destroy(struct listener *l);
/* TCP keepalive of the connections accepted from now on. */
void listener_set_keepalive(struct listener *l, const struct listener_keepalive *ka);
/* Stop or resume accepting. */
void listener_enable(struct listener *l, int on);
/* Write a socket address as text: "ip:port", "[ip6]:port", a Unix socket's
 * path, or "unix" for an unnamed Unix socket (a client's). */
void listener_sockaddr_name(const struct sockaddr *sa, socklen_t salen, char *out,
    size_t outlen);
/* The address it listens on, with the real port if 0 was asked. */
const char *listener_name(const struct listener *l);

#endif
