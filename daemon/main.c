/*
 * dlockd — the lock-coordination daemon: start-up, signals, shutdown.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "backend.h"
#include "clock.h"
#include "conf.h"
#include "conn.h"
#include "locktab.h"
#include "log.h"
#include "metrics.h"
#include "server.h"
#include "session.h"

#define DEFAULT_CONF "/etc/dlockd/dlockd.yaml"
#define DRAIN_MS 5000		/* how long shutdown waits for the backend */
#define CLOCK_CHECK_MS 1000	/* how often a suspend of the machine is looked for */

struct server server;
struct metrics metrics;

static void
usage(FILE *fp)
{
	fprintf(fp,
	    "usage: dlockd [-t] [-c FILE] [-l ADDR]... [-b URL] [-d LEVEL]\n"
	    "  -c FILE     configuration file (default " DEFAULT_CONF ")\n"
	    "  -t          check the configuration and exit\n"
	    "  -l ADDR     listen on ADDR (repeatable; replaces the file's listeners):\n"
	    "              127.0.0.1:7480, [::1]:7480, unix:/path\n"
	    "  -b URL      backend: memory, or redis://[:password@]host[:port][/db]\n"
	    "  -d LEVEL    log level: debug, info, warn or error (overrides log.level)\n"
	    "  -h          print this help and exit\n"
	    "  --version   print the version and exit\n");
}

/* Point the table's timer at its next deadline. */
static void
lt_rearm(void *arg, uint64_t when)
{
	(void)arg;
	if (when == LT_NEVER) {
		evtimer_del(server.lt_timer);
		return;
	}
	uint64_t now = clock_ms();
	uint64_t delay = when > now ? when - now : 0;
	struct timeval tv = { (time_t)(delay / 1000), (suseconds_t)(delay % 1000) * 1000 };
	evtimer_add(server.lt_timer, &tv);
}

/* Every CLOCK_CHECK_MS: libevent's timers count on CLOCK_MONOTONIC, which
 * stops while the machine is suspended, so after a resume the table's timer
 * would fire late by the time slept while leases ran on in the backend.
 * When that time grew, do what is due at once. */
static void
on_clock_check(evutil_socket_t fd, short what, void *arg)
{
	static uint64_t slept;
	uint64_t now = clock_suspended_ms();
	(void)fd;
	(void)what;
	(void)arg;
	if (now > slept + 100 && slept != 0) {
		log_info("the machine was suspended for %llu ms: catching up",
		    (unsigned long long)(now - slept));
		locktab_tick(server.lt);
		lt_rearm(NULL, locktab_next_deadline(server.lt));
	}
	slept = now != 0 ? now : 1;
}

static void
on_lt_timer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	locktab_tick(server.lt);
	/* tick only re-arms when the deadline moved; a timer that fired a
	 * hair early must be set again all the same */
	lt_rearm(NULL, locktab_next_deadline(server.lt));
}

/* SIGTERM, SIGINT: stop accepting, drop every session (releasing its
 * locks), release detached locks, and leave the loop. */
static void
on_stop_signal(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	(void)arg;
	if (server.stopping)
		return;
	log_info("signal %d: shutting down", (int)sig);
	server.stopping = true;
	for (size_t i = 0; i < server.nlisteners; i++)
		listener_enable(server.listeners[i], 0);
	locktab_shutdown(server.lt);
	struct session *s;
	while ((s = TAILQ_FIRST(&server.sessions)) != NULL)
		session_destroy(s);
	event_base_loopbreak(server.base);
}

static void
on_hup(evutil_socket_t sig, short what, void *arg)
{
	(void)sig;
	(void)what;
	(void)arg;
	log_info("SIGHUP: configuration reload is not supported; restart to apply changes");
}

static void
on_drain_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
}

/* Releases the backend has not confirmed yet (kept while it is down, or in
 * flight), and the table's own operations. */
static int
draining(void)
{
	return !locktab_idle(server.lt) ||
	    (server.be->ops->pending != NULL && server.be->ops->pending(server.be) > 0);
}

/* Let the backend finish the releases of shutdown, those kept from an
 * outage included, for at most DRAIN_MS. */
static void
drain(void)
{
	struct event *tick = event_new(server.base, -1, EV_PERSIST, on_drain_tick, NULL);
	struct timeval tv = { 0, 100000 };
	uint64_t deadline = clock_ms() + DRAIN_MS;
	if (tick != NULL)
		evtimer_add(tick, &tv);
	while (draining() && clock_ms() < deadline)
		event_base_loop(server.base, EVLOOP_ONCE);
	if (draining())
		log_warn("releases still unconfirmed by the backend after %d ms; their leases "
		    "end at their TTL", DRAIN_MS);
	if (tick != NULL)
		event_free(tick);
}

/* Raise the descriptor limit to what max_clients needs, as far as allowed;
 * warn when that is not enough. */
static void
raise_fd_limit(long long max_clients)
{
	struct rlimit rl;
	rlim_t want = (rlim_t)max_clients + 64;	/* listeners, log, backend */
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
		return;
	rlim_t cur = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
	if (rl.rlim_cur > cur && setrlimit(RLIMIT_NOFILE, &rl) == 0)
		cur = rl.rlim_cur;
	if (cur < want)
		log_warn("open files limit is %llu: fewer than limits.max_clients (%lld) "
		    "clients can connect", (unsigned long long)cur, max_clients);
}

/* Print every configuration error; 0 if there was none. */
static int
report_conf(const struct conf *c)
{
	for (size_t i = 0; i < c->nerrors; i++)
		fprintf(stderr, "%s\n", c->errors[i]);
	return c->nerrors ? -1 : 0;
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *path = NULL;
	int test = 0, ch;
	struct conf *conf = conf_create();
	if (conf == NULL) {
		fprintf(stderr, "dlockd: out of memory\n");
		return 1;
	}

	/* -l and -b are applied after the file: collect them first */
	char **listen = calloc((size_t)argc, sizeof(char *));
	size_t nlisten = 0;
	const char *backend_url = NULL;
	const char *level_arg = NULL;
	if (listen == NULL) {
		fprintf(stderr, "dlockd: out of memory\n");
		return 1;
	}
	while ((ch = getopt_long(argc, argv, "c:tl:b:d:hV", longopts, NULL)) != -1) {
		switch (ch) {
		case 'c': path = optarg; break;
		case 't': test = 1; break;
		case 'l': listen[nlisten++] = optarg; break;
		case 'b': backend_url = optarg; break;
		case 'd': level_arg = optarg; break;
		case 'V':
			printf("dlockd %s\n", DLOCKD_VERSION);
			free(listen);
			conf_destroy(conf);
			return 0;
		case 'h':
			usage(stdout);
			free(listen);
			conf_destroy(conf);
			return 0;
		default:
			usage(stderr);
			free(listen);
			conf_destroy(conf);
			return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		free(listen);
		conf_destroy(conf);
		return 2;
	}
	if (path != NULL || access(DEFAULT_CONF, F_OK) == 0)
		(void)conf_load(conf, path != NULL ? path : DEFAULT_CONF);
	for (size_t i = 0; i < nlisten; i++)
		(void)conf_override_listen(conf, listen[i]);
	free(listen);
	if (backend_url != NULL)
		(void)conf_override_backend(conf, backend_url);
	(void)conf_finish(conf);
	if (level_arg != NULL && log_level_parse(level_arg) < 0) {
		fprintf(stderr, "command line: unknown log level '%s' (expected debug, info, "
		    "warn or error)\n", level_arg);
		report_conf(conf);
		conf_destroy(conf);
		return 1;
	}
	if (report_conf(conf) != 0) {
		conf_destroy(conf);
		return 1;
	}
	if (test) {
		printf("configuration OK\n");
		conf_destroy(conf);
		return 0;
	}

	int level = log_level_parse(level_arg != NULL ? level_arg : conf->log_level);
	if (log_init(level < 0 ? LOG_LEVEL_INFO : (enum log_level)level, conf->log_file) != 0)
		return 1;
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit(conf->max_clients);

	server.conf = conf;
	server.started_ms = clock_ms();
	TAILQ_INIT(&server.sessions);
	server.base = event_base_new();
	if (server.base == NULL)
		log_fatal("cannot create the event loop");
	server.be = backend_create(conf->backend_type, server.base, conf->backend_settings);
	if (server.be == NULL)
		log_fatal("cannot start the %s backend", conf->backend_type);
	server.lt_timer = evtimer_new(server.base, on_lt_timer, NULL);
	/* backend.handoff_limit is the redis backend's; 0 (none) elsewhere */
	const long long *handoff_limit = conf_backend_value(conf, "handoff_limit");
	struct lt_limits limits = { (uint64_t)conf->max_waiters_per_key,
	    (uint64_t)conf->max_locks_per_session,
	    handoff_limit != NULL ? (uint64_t)*handoff_limit : 0,
	    (uint64_t)conf->margin_percent, (uint64_t)conf->lock_delay_ms };
	server.lt = locktab_create(server.be, &limits, NULL, NULL, lt_rearm, NULL);
	struct event *ev_clock = event_new(server.base, -1, EV_PERSIST, on_clock_check, NULL);
	struct timeval clock_tv = { CLOCK_CHECK_MS / 1000, (CLOCK_CHECK_MS % 1000) * 1000 };
	if (server.lt_timer == NULL || server.lt == NULL || ev_clock == NULL ||
	    evtimer_add(ev_clock, &clock_tv) != 0)
		log_fatal("out of memory");

	struct event *ev_term = evsignal_new(server.base, SIGTERM, on_stop_signal, NULL);
	struct event *ev_int = evsignal_new(server.base, SIGINT, on_stop_signal, NULL);
	struct event *ev_hup = evsignal_new(server.base, SIGHUP, on_hup, NULL);
	if (ev_term == NULL || ev_int == NULL || ev_hup == NULL ||
	    evsignal_add(ev_term, NULL) != 0 || evsignal_add(ev_int, NULL) != 0 ||
	    evsignal_add(ev_hup, NULL) != 0)
		log_fatal("cannot install signal handlers");

	server.listeners = calloc(conf->nlisten, sizeof(*server.listeners));
	if (server.listeners == NULL)
		log_fatal("out of memory");
	struct conn_keepalive ka = { (int)conf->tcp_keepalive_s,
	    (int)conf->tcp_keepalive_interval_s, (int)conf->tcp_keepalive_probes };
	for (size_t i = 0; i < conf->nlisten; i++) {
		struct addr addr;
		const char *why;
		if (addr_parse(conf->listen[i], ADDR_PORT_REQUIRED, &addr, &why) != 0)
			log_fatal("listen %s: %s", conf->listen[i], why);
		server.listeners[i] = listener_create(server.base, &addr,
		    (int)conf->unix_socket_mode, &ka, session_accept, NULL);
		if (server.listeners[i] == NULL)
			log_fatal("cannot listen on %s", conf->listen[i]);
		server.nlisteners++;
		log_info("listening on %s", listener_name(server.listeners[i]));
	}

	log_info("dlockd %s started (pid %ld, backend %s)", DLOCKD_VERSION, (long)getpid(),
	    server.be->ops->name);
	event_base_dispatch(server.base);

	drain();
	for (size_t i = 0; i < server.nlisteners; i++)
		listener_destroy(server.listeners[i]);
	free(server.listeners);
	event_free(ev_term);
	event_free(ev_int);
	event_free(ev_hup);
	event_free(ev_clock);
	if (locktab_idle(server.lt)) {
		backend_destroy(server.be);
		locktab_destroy(server.lt);
	}
	event_free(server.lt_timer);
	event_base_free(server.base);
	log_info("stopped");
	log_close();
	conf_destroy(conf);
	return 0;
}
