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
#include <ifaddrs.h>
#include <libgen.h>
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

#include "clock.h"
#include "log.h"
#include "xmalloc.h"

#define ACCEPT_PAUSE_MS 100	/* accepts rest this long after an error */
#define ACCEPT_LOG_MS 1000	/* accept errors are logged at most this often */

struct listener {
	struct evconnlistener *ev;	/* libevent's listener */
	struct event *ev_retry;		/* resumes accepting after EMFILE and friends */
	bool enabled;			/* accepting, as listener_enable() last said */
	uint64_t err_logged_ms;		/* clock_ms() of the last accept error logged */
	unsigned long err_unlogged;	/* accept errors since, not logged */
	accept_cb *cb;			/* told of each connection */
	void *arg;
	bool is_unix;			/* a Unix socket */
	bool owns_path;			/* created path: remove it on destroy */
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

/* accept() failed: with EMFILE and friends the connection stays in the
 * backlog and the socket stays readable, so retrying at once would spin the
 * loop; rest ACCEPT_PAUSE_MS instead, and log at most every ACCEPT_LOG_MS
 * (with the count of errors not logged meanwhile). */
static void
on_accept_error(struct evconnlistener *ev, void *arg)
{
	struct listener *l = arg;
	struct timeval pause = clock_tv(ACCEPT_PAUSE_MS);
	int err = EVUTIL_SOCKET_ERROR();
	uint64_t now = clock_ms();

	if (l->err_logged_ms == 0 || now - l->err_logged_ms >= ACCEPT_LOG_MS) {
		log_error("accept on %s: %s; pausing accepts for %d ms (%lu more error%s "
		    "since the last logged)", l->name, evutil_socket_error_to_string(err),
		    ACCEPT_PAUSE_MS, l->err_unlogged, l->err_unlogged == 1 ? "" : "s");
		l->err_logged_ms = now;
		l->err_unlogged = 0;
	} else {
		l->err_unlogged++;
	}
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

/* Whether sa is a wildcard or loopback address, or one of this host's
 * interfaces has it. */
static bool
addr_is_local(const struct sockaddr *sa)
{
	const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
	const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
	struct ifaddrs *ifs, *i;
	bool local = false;

	if (sa->sa_family == AF_INET && (in->sin_addr.s_addr == htonl(INADDR_ANY) ||
	    (ntohl(in->sin_addr.s_addr) >> 24) == 127))
		return true;
	if (sa->sa_family == AF_INET6 && (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr) ||
	    IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)))
		return true;
	if (getifaddrs(&ifs) != 0)
		return true;	/* cannot tell: the bind will */
	for (i = ifs; i != NULL && !local; i = i->ifa_next) {
		const struct sockaddr *ia = i->ifa_addr;

		if (ia == NULL || ia->sa_family != sa->sa_family)
			continue;
		if (sa->sa_family == AF_INET)
			local = ((const struct sockaddr_in *)(const void *)ia)->sin_addr.s_addr ==
			    in->sin_addr.s_addr;
		else
			local = memcmp(&((const struct sockaddr_in6 *)(const void *)ia)->sin6_addr,
			    &in6->sin6_addr, sizeof(in6->sin6_addr)) == 0;
	}
	freeifaddrs(ifs);
	return local;
}

int
listener_check_dir(const char *dir, char *why, size_t size)
{
	struct stat st;

	if (stat(dir, &st) != 0)
		snprintf(why, size, "directory %s: %s", dir, strerror(errno));
	else if (!S_ISDIR(st.st_mode))
		snprintf(why, size, "%s is not a directory", dir);
	else
		return 0;
	return -1;
}

int
listener_check(const struct addr *addr, char *why, size_t size)
{
	struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
	    .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	char path[sizeof(addr->path)], port[8];
	int rc;

	if (addr->kind == ADDR_UNIX) {
		snprintf(path, sizeof(path), "%s", addr->path);
		return listener_check_dir(dirname(path), why, size);
	}
	snprintf(port, sizeof(port), "%d", addr->port);
	if ((rc = getaddrinfo(addr->host, port, &hints, &ai)) != 0) {
		snprintf(why, size, "%s", gai_strerror(rc));
		return -1;
	}
	rc = addr_is_local(ai->ai_addr) ? 0 : -1;
	freeaddrinfo(ai);
	if (rc != 0)
		snprintf(why, size, "%s is not an address of this host", addr->host);
	return rc;
}

/* Finish l, whose l->ev listens: its name for logs (a TCP socket's bound
 * address), the retry timer, the error callback. Returns l. */
static struct listener *
listener_start(struct listener *l, struct event_base *base)
{
	struct sockaddr_storage bound;
	socklen_t blen = sizeof(bound);

	if (!l->is_unix && getsockname(evconnlistener_get_fd(l->ev), (struct sockaddr *)&bound,
	    &blen) == 0)
		listener_sockaddr_name((struct sockaddr *)&bound, blen, l->name,
		    sizeof(l->name));
	l->ev_retry = evtimer_new(base, on_accept_retry, l);
	l->enabled = true;
	evconnlistener_set_error_cb(l->ev, on_accept_error);
	return l;
}

struct listener *
listener_create(struct event_base *base, const struct addr *addr, int unix_mode,
    long long unix_gid, const struct listener_keepalive *ka, accept_cb *cb, void *arg)
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
	/* a Unix socket is made for its owner only, then given its group, then
	 * its mode: nobody outside the group may connect in between */
	if (l->is_unix)
		old = umask(0777 & ~((mode_t)unix_mode & 0700));
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
	l->owns_path = l->is_unix;
	if (l->is_unix && unix_gid >= 0 && chown(l->path, (uid_t)-1, (gid_t)unix_gid) != 0) {
		log_error("listen %s: cannot give the socket group %lld (unix_socket_group): %s",
		    addr->text, unix_gid, strerror(errno));
		listener_start(l, base);
		listener_destroy(l);
		return NULL;
	}
	if (l->is_unix && chmod(l->path, (mode_t)unix_mode) != 0)
		log_warn("chmod %s: %s", l->path, strerror(errno));
	return listener_start(l, base);
}

struct listener *
listener_adopt(struct event_base *base, evutil_socket_t fd, const struct listener_keepalive *ka,
    accept_cb *cb, void *arg)
{
	struct listener *l = xcalloc(1, sizeof(*l));
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);

	l->cb = cb;
	l->arg = arg;
	l->ka = *ka;
	memset(&ss, 0, sizeof(ss));
	if (getsockname(fd, (struct sockaddr *)&ss, &sslen) != 0) {
		log_error("socket %d from the service manager: %s", (int)fd, strerror(errno));
		free(l);
		return NULL;
	}
	if (ss.ss_family == AF_UNIX) {
		const struct sockaddr_un *sun = (const struct sockaddr_un *)&ss;

		l->is_unix = true;
		snprintf(l->name, sizeof(l->name), "unix:%.*s", (int)sizeof(sun->sun_path),
		    sun->sun_path[0] != '\0' ? sun->sun_path : "(unnamed)");
	}
	if (evutil_make_socket_nonblocking(fd) != 0 || evutil_make_socket_closeonexec(fd) != 0) {
		log_error("socket %d from the service manager: %s", (int)fd, strerror(errno));
		free(l);
		return NULL;
	}
	l->ev = evconnlistener_new(base, on_accept, l, LEV_OPT_CLOSE_ON_FREE, -1, fd);
	if (l->ev == NULL) {
		log_error("cannot accept on socket %d from the service manager", (int)fd);
		free(l);
		return NULL;
	}
	return listener_start(l, base);
}

void
listener_destroy(struct listener *l)
{
	evconnlistener_free(l->ev);
	event_free(l->ev_retry);
	if (l->owns_path)
		unlink(l->path);
	free(l);
}

void
listener_set_keepalive(struct listener *l, const struct listener_keepalive *ka)
{
	l->ka = *ka;
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
