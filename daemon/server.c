/*
 * server — one daemon instance: the lock table's timer, the listeners, the
 * sessions, start and stop.
 *
 * It owns the lock table, the listeners and the session list; it must not
 * parse requests (session, cmd), know lock semantics (locktab) or any
 * backend's wire format.
 */
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "backend.h"
#include "clock.h"
#include "conf.h"
#include "listener.h"
#include "log.h"
#include "metrics.h"
#include "notify.h"
#include "session.h"
#include "tls.h"
#include "xmalloc.h"

#define CLOCK_CHECK_MS 1000	/* how often a suspend of the machine is looked for */
#define DRAIN_TICK_MS 100	/* how often a drain looks at the backend */

/* Point the table's timer at its next deadline (the table's rearm hook). */
static void
lt_rearm(void *arg, uint64_t when)
{
	struct server *srv = arg;
	if (when == LT_NEVER) {
		evtimer_del(srv->lt_timer);
		return;
	}
	uint64_t now = locktab_now(srv->lt);
	struct timeval tv = clock_tv(when > now ? when - now : 0);
	evtimer_add(srv->lt_timer, &tv);
}

/* Do what the table has due, and set the timer again: tick only re-arms
 * when the deadline moved, and a timer that fired a hair early must be set
 * again all the same. */
static void
lt_run(struct server *srv)
{
	locktab_tick(srv->lt);
	lt_rearm(srv, locktab_next_deadline(srv->lt));
}

static void
on_lt_timer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	lt_run(arg);
}

/* Every CLOCK_CHECK_MS: libevent's timers count on CLOCK_MONOTONIC, which
 * stops while the machine is suspended, so after a resume the table's timer
 * would fire late by the time slept while leases ran on in the backend.
 * When that time grew, do what is due at once. */
static void
on_clock_check(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;
	uint64_t now = clock_suspended_ms();
	(void)fd;
	(void)what;
	if (srv->suspended_ms != 0 && now > srv->suspended_ms + 100) {
		log_info("the machine was suspended for %llu ms: catching up",
		    (unsigned long long)(now - srv->suspended_ms));
		lt_run(srv);
	}
	srv->suspended_ms = now != 0 ? now : 1;
}

/* The lock table's limits that conf sets. */
static struct lt_limits
server_limits(const struct conf *conf)
{
	return (struct lt_limits){ (uint64_t)conf->max_waiters_per_key,
	    (uint64_t)conf->max_locks_per_session, (uint64_t)conf->margin_percent,
	    (uint64_t)conf->lock_delay_ms, (uint64_t)conf->max_keys };
}

/* The TCP keepalive of accepted connections that conf sets. */
static struct listener_keepalive
server_keepalive(const struct conf *conf)
{
	return (struct listener_keepalive){ (int)conf->tcp_keepalive_s,
	    (int)conf->tcp_keepalive_interval_s, (int)conf->tcp_keepalive_probes };
}

struct server *
server_create(struct event_base *base, const struct conf *conf, struct backend *be,
    session_dispatch_fn *dispatch, lt_clock_fn *clock, void *clock_arg)
{
	struct server *srv = xcalloc(1, sizeof(*srv));
	struct lt_limits limits = server_limits(conf);
	struct timeval tv = clock_tv(CLOCK_CHECK_MS);

	srv->base = base;
	srv->conf = conf;
	srv->be = be;
	srv->lt_timer = evtimer_new(base, on_lt_timer, srv);
	srv->lt = locktab_create(be, &limits, clock, clock_arg, lt_rearm, srv);
	session_hub_init(&srv->sessions, base, conf, be, srv->lt, dispatch, clock_ms());
	srv->ev_clock = event_new(base, -1, EV_PERSIST, on_clock_check, srv);
	evtimer_add(srv->ev_clock, &tv);
	return srv;
}

/* A connection accepted on fd, with TLS context tls or none: a new session,
 * unless the server is stopping. */
static void
server_accept(struct server *srv, evutil_socket_t fd, const char *peer, const struct tls *tls)
{
	if (srv->stopping)
		evutil_closesocket(fd);
	else
		session_accept(&srv->sessions, fd, peer, tls);
}

/* A plain listener's accept callback. */
static void
on_accept(void *arg, evutil_socket_t fd, const char *peer)
{
	server_accept(arg, fd, peer, NULL);
}

/* A TLS listener's accept callback: the context in force now. */
static void
on_accept_tls(void *arg, evutil_socket_t fd, const char *peer)
{
	struct server *srv = arg;
	server_accept(srv, fd, peer, srv->tls);
}

/* Add l, listening (or NULL: it could not), to the listeners. 0 or -1. */
static int
server_add_listener(struct server *srv, struct listener *l, bool tls)
{
	if (l == NULL)
		return -1;
	srv->listeners[srv->nlisteners++] = l;
	log_info("listening on %s%s", listener_name(l), tls ? " (TLS)" : "");
	return 0;
}

/* Listen on the n addresses of list, with TLS or not. 0, or -1 after
 * logging why. */
static int
server_listen_list(struct server *srv, char *const *list, size_t n, bool tls)
{
	const struct conf *conf = srv->conf;
	struct listener_keepalive ka = server_keepalive(conf);

	for (size_t i = 0; i < n; i++) {
		struct addr addr;
		const char *why;
		struct listener *l;
		if (addr_parse(list[i], ADDR_PORT_REQUIRED, &addr, &why) != 0) {
			log_error("listen %s: %s", list[i], why);
			return -1;
		}
		l = listener_create(srv->base, &addr, (int)conf->unix_socket_mode,
		    conf->unix_socket_gid, &ka, tls ? on_accept_tls : on_accept, srv);
		if (l == NULL)
			log_error("cannot listen on %s", list[i]);
		if (server_add_listener(srv, l, tls) != 0)
			return -1;
	}
	return 0;
}

/* The daemon's address in the leases it describes: its first listener. */
static void
server_named(struct server *srv)
{
	struct who_daemon *d = &srv->sessions.daemon;
	if (srv->nlisteners > 0)
		snprintf(d->addr, sizeof(d->addr), "%s", listener_name(srv->listeners[0]));
}

int
server_listen(struct server *srv)
{
	const struct conf *conf = srv->conf;

	srv->listeners = xcalloc(conf->nlisten + conf->ntls_listen, sizeof(*srv->listeners));
	if (server_listen_list(srv, conf->listen, conf->nlisten, false) != 0 ||
	    server_listen_list(srv, conf->tls_listen, conf->ntls_listen, true) != 0)
		return -1;
	server_named(srv);
	if (conf->metrics.text[0] != '\0') {
		srv->mx = metrics_create(&srv->sessions);
		if (metrics_listen(srv->mx, &conf->metrics) != 0)
			return -1;
	}
	return 0;
}

int
server_listen_fds(struct server *srv, int first, int n)
{
	struct listener_keepalive ka = server_keepalive(srv->conf);

	srv->listeners = xcalloc((size_t)n + srv->conf->ntls_listen, sizeof(*srv->listeners));
	for (int fd = first; fd < first + n; fd++) {
		if (!notify_is_listener(fd)) {
			log_error("socket %d from the service manager is not a listening TCP or "
			    "Unix stream socket", fd);
			return -1;
		}
		if (server_add_listener(srv, listener_adopt(srv->base, fd, &ka, on_accept, srv),
		    false) != 0)
			return -1;
		const char *name = listener_name(srv->listeners[srv->nlisteners - 1]);
		if (srv->conf->protected_mode && srv->conf->password == NULL &&
		    conf_addr_exposed(name)) {
			log_error("socket %d from the service manager listens on %s, which is not "
			    "a loopback address, and no 'auth.password' is set: set one, or "
			    "'protected_mode: false'", fd, name);
			return -1;
		}
	}
	log_info("socket activation: %d socket%s from the service manager, in place of "
	    "'listen'", n, n == 1 ? "" : "s");
	if (server_listen_list(srv, srv->conf->tls_listen, srv->conf->ntls_listen, true) != 0)
		return -1;
	server_named(srv);
	return 0;
}

void
server_set_tls(struct server *srv, struct tls *tls)
{
	tls_destroy(srv->tls);
	srv->tls = tls;
	if (tls != NULL)
		log_info("TLS: %s", tls_describe(tls));
}

bool
server_backend_up(const struct server *srv)
{
	return strcmp(srv->be->ops->state(srv->be), "disconnected") != 0;
}

void
server_status(const struct server *srv, char *buf, size_t size)
{
	struct lt_stats st;

	locktab_stats(srv->lt, &st);
	snprintf(buf, size, "%llu client%s, %llu lock%s held, backend %s",
	    (unsigned long long)srv->sessions.count, srv->sessions.count == 1 ? "" : "s",
	    (unsigned long long)st.holds, st.holds == 1 ? "" : "s",
	    server_backend_up(srv) ? "up" : "down");
}

void
server_reconfigure(struct server *srv)
{
	struct lt_limits limits = server_limits(srv->conf);
	struct listener_keepalive ka = server_keepalive(srv->conf);
	struct session *s;

	locktab_set_limits(srv->lt, &limits);
	for (size_t i = 0; i < srv->nlisteners; i++)
		listener_set_keepalive(srv->listeners[i], &ka);
	TAILQ_FOREACH(s, &srv->sessions.all, entry)
		session_reconfigure(s);
}

void
server_stop(struct server *srv)
{
	if (srv->stopping)
		return;
	srv->stopping = true;
	for (size_t i = 0; i < srv->nlisteners; i++)
		listener_enable(srv->listeners[i], 0);
	locktab_shutdown(srv->lt);
	session_hub_close_all(&srv->sessions, "shutdown");
}

/* Releases the backend has not confirmed yet (kept while it is down, or in
 * flight), and the table's own operations. */
static int
draining(const struct server *srv)
{
	return !locktab_idle(srv->lt) ||
	    (srv->be->ops->pending != NULL && srv->be->ops->pending(srv->be) > 0);
}

static void
on_drain_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
}

int
server_drain(struct server *srv, uint64_t ms)
{
	struct event *tick = event_new(srv->base, -1, EV_PERSIST, on_drain_tick, NULL);
	struct timeval tv = clock_tv(DRAIN_TICK_MS);
	uint64_t deadline = clock_ms() + ms;

	if (srv->be->ops->drain != NULL)
		srv->be->ops->drain(srv->be);
	evtimer_add(tick, &tv);
	while (draining(srv) && clock_ms() < deadline)
		event_base_loop(srv->base, EVLOOP_ONCE);
	event_free(tick);
	return !draining(srv);
}

int
server_destroy(struct server *srv)
{
	int idle = locktab_idle(srv->lt);
	metrics_destroy(srv->mx);
	for (size_t i = 0; i < srv->nlisteners; i++)
		listener_destroy(srv->listeners[i]);
	free(srv->listeners);
	tls_destroy(srv->tls);
	session_hub_fini(&srv->sessions);	/* before the table it observes */
	if (idle)
		locktab_destroy(srv->lt);
	event_free(srv->lt_timer);
	event_free(srv->ev_clock);
	free(srv);
	return idle;
}
