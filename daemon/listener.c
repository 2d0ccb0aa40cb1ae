/*
 * listener — listening sockets (TCP, IPv6, Unix) and accepting on them.
 *
 * It owns the listening sockets and the Unix socket files it created; it
 * hands each accepted socket, with TCP_NODELAY and keepalive set and the
 * peer's address as text, to its owner's callback, which owns it from then
 * on. It must not read from or write to an accepted socket.
 */
#include "listener.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "log.h"
#include "xmalloc.h"

struct listener {
	struct evconnlistener *ev;	/* libevent's listener */
	struct event *ev_retry;		/* resumes accepting after EMFILE and friends */
	bool enabled;			/* accepting, as listener_enable() last said */
	accept_cb *cb;			/* told of each connection */
	void *arg;
	bool is_unix;			/* remove path on destroy */
	struct listener_keepalive ka;	/* TCP keepalive of accepted sockets */
	char path[108];			/* Unix socket path */
	char name[300];			/* address for logs */
};

void
listener_sockaddr_name(const struct sockaddr *sa, socklen_t salen, char *out, size_t outlen)
{
	char host[INET6_ADDRSTRLEN];
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
		evutil_inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		snprintf(out, outlen, "%s:%u", host, ntohs(in->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
		evutil_inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		snprintf(out, outlen, "[%s]:%u", host, ntohs(in6->sin6_port));
	} else if (sa->sa_family == AF_UNIX &&
	    salen > (socklen_t)offsetof(struct sockaddr_un, sun_path) &&
	    ((const struct sockaddr_un *)(const void *)sa)->sun_path[0] != '\0') {
		const struct sockaddr_un *un = (const struct sockaddr_un *)(const void *)sa;
		size_t n = (size_t)salen - offsetof(struct sockaddr_un, sun_path);
		snprintf(out, outlen, "%.*s", (int)strnlen(un->sun_path, n), un->sun_path);
	} else {
		snprintf(out, outlen, "unix");
	}
}

/* Turn on TCP keepalive with ka's timings; best effort (logged). */
static void
keepalive_set(evutil_socket_t fd, const struct listener_keepalive *ka)
{
	int one = 1;
	unsigned user_ms = (unsigned)(ka->idle_s + ka->interval_s * ka->probes) * 1000u;
	if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) != 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &ka->idle_s, sizeof(ka->idle_s)) != 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &ka->interval_s,
	    sizeof(ka->interval_s)) != 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &ka->probes, sizeof(ka->probes)) != 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof(user_ms)) != 0)
		log_warn("cannot set TCP keepalive: %s", strerror(errno));
}

static void
on_accept(struct evconnlistener *ev, evutil_socket_t fd, struct sockaddr *sa, int salen,
    void *arg)
{
	struct listener *l = arg;
	char peer[80];
	(void)ev;
	listener_sockaddr_name(sa, (socklen_t)salen, peer, sizeof(peer));
	if (!l->is_unix) {
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (l->ka.idle_s > 0)
			keepalive_set(fd, &l->ka);
	}
	l->cb(l->arg, fd, peer);
}

static void
on_accept_retry(evutil_socket_t fd, short what, void *arg)
{
	struct listener *l = arg;
	(void)fd;
	(void)what;
	if (l->enabled)
		evconnlistener_enable(l->ev);
}

static void
on_accept_error(struct evconnlistener *ev, void *arg)
{
	static const struct timeval pause = { 0, 100000 };
	struct listener *l = arg;
	int err = EVUTIL_SOCKET_ERROR();
	/* EMFILE and friends: the connection stays in the backlog and the
	 * socket stays readable, so retrying at once would spin the loop */
	log_error("accept on %s: %s; pausing accepts for 100 ms", l->name,
	    evutil_socket_error_to_string(err));
	evconnlistener_disable(ev);
	evtimer_add(l->ev_retry, &pause);
}

/* Remove a Unix socket file left by a daemon that is gone. 0 if the path is
 * free now, -1 (logged) if it is in use or not a socket. */
static int
unix_clear_stale(const char *path)
{
	struct stat st;
	if (lstat(path, &st) != 0)
		return errno == ENOENT ? 0 : -1;
	if (!S_ISSOCK(st.st_mode)) {
		log_error("%s exists and is not a socket; not replacing it", path);
		return -1;
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	int rc = connect(fd, (struct sockaddr *)&sun, sizeof(sun));
	int err = errno;
	close(fd);
	if (rc == 0) {
		log_error("%s is in use by a running server", path);
		return -1;
	}
	if (err != ECONNREFUSED) {
		log_error("cannot check %s: %s", path, strerror(err));
		return -1;
	}
	log_info("removing stale socket %s", path);
	if (unlink(path) != 0 && errno != ENOENT) {
		log_error("cannot remove %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

struct listener *
listener_create(struct event_base *base, const struct addr *addr, int unix_mode,
    const struct listener_keepalive *ka, accept_cb *cb, void *arg)
{
	struct listener *l = xcalloc(1, sizeof(*l));
	struct sockaddr_storage ss;
	socklen_t sslen = 0;
	unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC;
	l->cb = cb;
	l->arg = arg;
	l->ka = *ka;
	memset(&ss, 0, sizeof(ss));
	if (addr->kind == ADDR_UNIX) {
		struct sockaddr_un *sun = (struct sockaddr_un *)&ss;
		l->is_unix = true;
		snprintf(l->path, sizeof(l->path), "%s", addr->path);
		snprintf(l->name, sizeof(l->name), "unix:%s", addr->path);
		if (unix_clear_stale(addr->path) != 0) {
			free(l);
			return NULL;
		}
		sun->sun_family = AF_UNIX;
		snprintf(sun->sun_path, sizeof(sun->sun_path), "%s", addr->path);
		sslen = sizeof(*sun);
	} else {
		/* start-up only: a host name may be resolved here */
		struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
		    .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
		char port[8];
		snprintf(port, sizeof(port), "%d", addr->port);
		int rc = getaddrinfo(addr->host, port, &hints, &ai);
		if (rc != 0) {
			log_error("listen %s: %s", addr->text, gai_strerror(rc));
			free(l);
			return NULL;
		}
		memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
		sslen = ai->ai_addrlen;
		freeaddrinfo(ai);
		flags |= LEV_OPT_REUSEABLE;
	}
	mode_t old = 0;
	if (l->is_unix)
		old = umask(0777 & ~(mode_t)unix_mode);
	l->ev = evconnlistener_new_bind(base, on_accept, l, flags, 511,
	    (struct sockaddr *)&ss, (int)sslen);
	int err = errno;
	if (l->is_unix)
		umask(old);
	if (l->ev == NULL) {
		log_error("listen %s: %s", addr->text, strerror(err));
		free(l);
		return NULL;
	}
	if (l->is_unix && chmod(l->path, (mode_t)unix_mode) != 0)
		log_warn("chmod %s: %s", l->path, strerror(errno));
	if (!l->is_unix) {
		struct sockaddr_storage bound;
		socklen_t blen = sizeof(bound);
		if (getsockname(evconnlistener_get_fd(l->ev), (struct sockaddr *)&bound,
		    &blen) == 0)
			listener_sockaddr_name((struct sockaddr *)&bound, blen, l->name,
			    sizeof(l->name));
	}
	l->ev_retry = evtimer_new(base, on_accept_retry, l);
	l->enabled = true;
	evconnlistener_set_error_cb(l->ev, on_accept_error);
	return l;
}

void
listener_destroy(struct listener *l)
{
	evconnlistener_free(l->ev);
	event_free(l->ev_retry);
	if (l->is_unix)
		unlink(l->path);
	free(l);
}

void
listener_enable(struct listener *l, int on)
{
	l->enabled = on != 0;
	if (on)
		evconnlistener_enable(l->ev);
	else
		evconnlistener_disable(l->ev);
}

const char *
listener_name(const struct listener *l)
{
	return l->name;
}
