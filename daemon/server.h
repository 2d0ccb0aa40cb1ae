/*
 * server — the daemon's one instance: the event loop it runs on, the
 * configuration in force, the backend, the lock table and its timer, the
 * listeners, the sessions and their counters.
 *
 * Nothing here is global: main() makes one server and every module gets it,
 * or the part of it that it uses, as an argument (a session keeps a pointer
 * to the server's session hub), so that a test can make a server of its own
 * on a fake backend with an injected clock.
 * The server owns the lock table and the listeners; it does not own the
 * event loop, the configuration or the backend, which its creator frees
 * after it.
 */
#ifndef DLOCKD_SERVER_H
#define DLOCKD_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "locktab.h"
#include "session.h"

struct event_base;
struct event;
struct conf;
struct backend;
struct listener;
struct metrics;
struct tls;

struct server {
	struct event_base *base;	/* the event loop (not owned) */
	const struct conf *conf;	/* configuration in force (not owned) */
	struct backend *be;		/* the backend (not owned) */
	struct locktab *lt;		/* the lock table */
	struct event *lt_timer;		/* fires at the table's next deadline */
	struct event *ev_clock;		/* looks for a suspend of the machine */
	uint64_t suspended_ms;		/* time suspended as last seen, 0 at first */
	struct listener **listeners;	/* one per conf->listen entry (or socket
					 * passed), then one per conf->tls_listen */
	size_t nlisteners;
	struct tls *tls;		/* the TLS listeners' context, or NULL */
	struct metrics *mx;		/* the metrics HTTP listener, or NULL (off) */
	struct session_hub sessions;	/* every connected session, their
					 * counters, and the server's start */
	bool stopping;			/* server_stop() was called: no more
					 * connections are taken */
};

/*
 * A server on base with configuration conf and backend be (neither owned;
 * they must outlive it). Its sessions' requests go to dispatch (the command
 * table's cmd_dispatch). Its lock table runs on clock (NULL: clock_ms()).
 * It does not listen yet (server_listen). The caller owns it
 * (server_destroy).
 */
struct server *server_create(struct event_base *base, const struct conf *conf,
    struct backend *be, session_dispatch_fn *dispatch, lt_clock_fn *clock, void *clock_arg);
/* Listen on every conf->listen address, with TLS on every conf->tls_listen
 * one (server_set_tls() first), and for metrics on conf->metrics if it is
 * set; 0, or -1 after logging why. */
int server_listen(struct server *srv) __attribute__((warn_unused_result));
/* Listen on the n sockets from descriptor first on that the service manager
 * passed (socket activation), in place of conf->listen, and with TLS on
 * every conf->tls_listen address; 0, or -1 after logging why. */
int server_listen_fds(struct server *srv, int first, int n)
	__attribute__((warn_unused_result));
/* The TLS context of the TLS listeners from now on (owned from here on; the
 * one before is freed, its connections keep it until they end). */
void server_set_tls(struct server *srv, struct tls *tls);
/* One line on how the server stands, for the service manager: clients,
 * locks held, whether the backend is up. */
void server_status(const struct server *srv, char *buf, size_t size);
/* Whether the backend is up: the memory backend always, another once
 * connected (its state is not "disconnected"). */
bool server_backend_up(const struct server *srv);
/* The configuration in force changed in place (a reload): apply its
 * limits, lease rules, keepalive and idle timeout to the lock table, the
 * listeners and the sessions there are. */
void server_reconfigure(struct server *srv);
/* Stop: no more connections, every session closed (releasing its locks),
 * detached locks released. The backend may still be finishing releases. */
void server_stop(struct server *srv);
/* Run the loop until the backend has confirmed the releases of the stop, or
 * ms have passed; 1 if it has, 0 if not. */
int server_drain(struct server *srv, uint64_t ms);
/* Free the server. Frees the lock table only when nothing of it is in
 * flight in the backend; returns 1 then, 0 if it was left to the exit. */
int server_destroy(struct server *srv);

#endif
