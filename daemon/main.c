/*
 * dlockd — the lock-coordination daemon: command-line options, the
 * configuration, logging, signals, and the life of one server (start, run,
 * drain, stop).
 *
 * It owns what the server does not (the event loop, the configuration, the
 * backend) and frees them after it. It must not hold state other modules
 * reach for: everything is passed down from here.
 */
#include <getopt.h>
#include <libgen.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "backend.h"
#include "clock.h"
#include "cmd.h"
#include "conf.h"
#include "listener.h"
#include "log.h"
#include "notify.h"
#include "server.h"
#include "tls.h"
#include "xmalloc.h"

#ifndef DEFAULT_CONF
#define DEFAULT_CONF "/etc/dlockd/dlockd.yaml"
#endif
#define DRAIN_MS 5000		/* how long shutdown waits for the backend */
#define READY_TICK_MS 100	/* how often start-up looks whether the backend is up */
#define READY_BOUND_MS 10000	/* READY=1 after this long even if it is not */
#define STATUS_MS 2000		/* how often STATUS= is sent (when it changed) */
#define FD_RESERVE 32		/* descriptors besides the clients' and listeners' */
#define TRIM_TICK_MS 1000	/* how often the heap's free bytes are looked at */
#define TRIM_BYTES (2u << 20)	/* free heap bytes worth giving back */
#define TRIM_CHURN 1000		/* sessions closed and locks let go since the
				 * last trim that make one worth its walk */

/* The daemon: what the command line said, the configuration in force, and
 * what it tells the service manager. */
struct dlockd {
	const char *conf_arg;		/* -c FILE, or NULL */
	char **listen;			/* every -l ADDR */
	size_t nlisten;			/* how many */
	const char *backend_url;	/* -b URL, or NULL */
	const char *level_arg;		/* -d LEVEL, or NULL */
	bool activated;			/* listens on sockets the manager passed */
	struct conf *conf;		/* the configuration in force */
	struct server *srv;		/* the server, once made */
	struct event *ev_status;	/* READY=1, then STATUS= when it changed */
	struct event *ev_watchdog;	/* WATCHDOG=1 pings; NULL: no watchdog */
	struct event *ev_trim;		/* gives free heap pages back (on_trim) */
	uint64_t trim_churn;		/* trim_churn() at the last trim */
	uint64_t started_ms;		/* clock_ms() when the listeners were bound */
	bool ready;			/* READY=1 was sent */
	char status[128];		/* the last STATUS= sent */
};

/* The help: the options, and -b's forms from every backend's own list of
 * the URLs its parser takes (a backend without URLs goes by its name). */
static void
usage(FILE *fp)
{
	const struct backend_ops *ops;
	fprintf(fp,
	    "usage: dlockd [-t] [-c FILE] [-l ADDR]... [-b URL] [-d LEVEL]\n"
	    "  -c FILE     configuration file (default " DEFAULT_CONF ")\n"
	    "  -t          check the configuration and exit\n"
	    "  -l ADDR     listen on ADDR (repeatable; replaces the file's listeners):\n"
	    "              host:port, 127.0.0.1:7480, [::1]:7480, unix:/path\n"
	    "  -b URL      the backend (replaces the file's backend.type and what the\n"
	    "              URL gives), one of:\n");
	for (size_t i = 0; (ops = backend_at(i)) != NULL; i++) {
		if (ops->urls == NULL) {
			fprintf(fp, "                %s\n", ops->name);
			continue;
		}
		for (const struct backend_url *u = ops->urls; u->scheme != NULL; u++) {
			fprintf(fp, "                %s%s\n", u->scheme, u->rest);
			if (u->note != NULL)
				fprintf(fp, "                    %s\n", u->note);
		}
	}
	fprintf(fp,
	    "  -d LEVEL    log level: debug, info, warn or error (overrides log.level)\n"
	    "  -h          print this help and exit\n"
	    "  --version   print the version and exit\n");
}

/* The configuration file to read: -c's, else DEFAULT_CONF if it exists,
 * else NULL (built-in defaults). */
static const char *
conf_path(const struct dlockd *d)
{
	if (d->conf_arg != NULL)
		return d->conf_arg;
	return access(DEFAULT_CONF, F_OK) == 0 ? DEFAULT_CONF : NULL;
}

/* Add to c an error for each address of list (the setting called name)
 * that this host cannot listen on, as far as that is known without a side
 * effect (see listener_check()). */
static void
check_listen(struct conf *c, const char *name, char *const *list, size_t n)
{
	char why[256];

	for (size_t i = 0; i < n; i++) {
		struct addr a;
		const char *bad;

		if (addr_parse(list[i], ADDR_PORT_REQUIRED, &a, &bad) == 0 &&
		    listener_check(&a, why, sizeof(why)) < 0)
			(void)conf_setting_error(c, name, "cannot listen on '%s': %s", list[i],
			    why);
	}
}

/* Add to c an error for each of its settings that this host cannot serve,
 * as far as that is known without a side effect: a listen address (unless
 * the service manager passes the sockets), a tls.listen address (at start),
 * the directory of log.file. */
static void
check_host(struct conf *c, bool listen, bool start)
{
	char why[256], path[4096];

	if (listen)
		check_listen(c, "listen", c->listen, c->nlisten);
	if (start)
		check_listen(c, "tls.listen", c->tls_listen, c->ntls_listen);
	if (c->log_file != NULL && strcmp(c->log_file, "-") != 0) {
		snprintf(path, sizeof(path), "%s", c->log_file);
		if (listener_check_dir(dirname(path), why, sizeof(why)) < 0)
			(void)conf_setting_error(c, "log.file", "cannot write log file '%s': %s",
			    c->log_file, why);
	}
}

/* Read the configuration as the command line says: the file, then -l and
 * -b, defaults, the rules between settings and check_host() (the listen
 * addresses only with listen, the TLS ones only at start: they may need a
 * name resolved, which must not block the loop on a reload, where they
 * cannot change anyway). Without an error so far, *tls is the TLS context
 * the result's files make if TLS is served (tls.listen at start, the one
 * in force on a reload), else NULL; a file that cannot be used is an error.
 * The caller owns the result (conf_destroy), errors or not, and *tls. */
static struct conf *
load(const struct dlockd *d, bool listen, bool start, struct tls **tls)
{
	struct conf *c = conf_create();
	const char *path = conf_path(d);

	if (path != NULL)
		(void)conf_load(c, path);
	for (size_t i = 0; i < d->nlisten; i++)
		(void)conf_override_listen(c, d->listen[i]);
	if (d->backend_url != NULL)
		(void)conf_override_backend(c, d->backend_url);
	*tls = NULL;
	if (conf_finish(c) == 0)
		check_host(c, listen, start);
	if (c->nerrors == 0 && (start ? c->ntls_listen : d->conf->ntls_listen) > 0)
		*tls = tls_create(c);
	return c;
}

/* The log level in force: -d's, else log.level's. */
static enum log_level
log_level(const struct dlockd *d)
{
	int level = log_level_parse(d->level_arg != NULL ? d->level_arg : d->conf->log_level);

	return level < 0 ? LOG_LEVEL_INFO : (enum log_level)level;
}

/* SIGTERM, SIGINT: stop accepting, drop every session (releasing its
 * locks), release detached locks, and leave the loop. */
static void
on_stop_signal(evutil_socket_t sig, short what, void *arg)
{
	struct dlockd *d = arg;
	(void)what;
	if (d->srv->stopping)
		return;
	notify_stopping();
	log_info("signal %d: shutting down", (int)sig);
	server_stop(d->srv);
	event_base_loopbreak(d->srv->base);
}

/* Raise the soft limit of open files to what limits.max_clients needs (one
 * descriptor a client, and FD_RESERVE more for the listeners, the backend's
 * connections, the log, the metrics endpoint and the event loop, as Redis
 * reserves 32), as far as the hard limit allows; warn when that falls short,
 * saying how many clients can really connect and what to change. */
static void
raise_fd_limit(const struct conf *c)
{
	struct rlimit rl;
	rlim_t want = (rlim_t)c->max_clients + FD_RESERVE + (rlim_t)c->nlisten;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
		return;
	rlim_t cur = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
	if (rl.rlim_cur > cur && setrlimit(RLIMIT_NOFILE, &rl) == 0)
		cur = rl.rlim_cur;
	if (cur >= want)
		return;
	rlim_t room = cur > FD_RESERVE + (rlim_t)c->nlisten ?
	    cur - FD_RESERVE - (rlim_t)c->nlisten : 0;
	log_warn("open files limit is %llu (hard limit %llu): at most about %llu clients can "
	    "connect, not limits.max_clients (%lld); raise LimitNOFILE= in the service "
	    "(or ulimit -n) to %llu, or lower limits.max_clients", (unsigned long long)cur,
	    (unsigned long long)rl.rlim_max, (unsigned long long)room, c->max_clients,
	    (unsigned long long)want);
}

/* SIGHUP: read the configuration again (the command line still wins). With
 * an error, log every one and keep the configuration in force; else apply
 * what may change live (conf_reload) and log what needs a restart. The log
 * file is opened anew either way (after a rotation). No connection or lock
 * is dropped. */
static void
on_hup(evutil_socket_t sig, short what, void *arg)
{
	struct dlockd *d = arg;
	const char *path = conf_path(d);
	struct conf *next;
	struct tls *tls;
	int changed = 0;
	(void)sig;
	(void)what;

	if (d->srv->stopping)
		return;
	if (d->ready)		/* else READY=1 is still to come from on_status */
		notify_reloading();
	log_info("SIGHUP: reloading the configuration from %s",
	    path != NULL ? path : "built-in defaults");
	next = load(d, false, false, &tls);
	if (next->nerrors == 0) {
		changed = conf_reload(d->conf, next);
		if (tls != NULL)	/* new connections from now on */
			server_set_tls(d->srv, tls);
		backend_reload(d->srv->be);
		log_set_level(log_level(d));
		server_reconfigure(d->srv);
		raise_fd_limit(d->conf);
	}
	if (log_open(d->conf->log_file) != 0)
		log_warn("log file not reopened: still writing to the one open");
	for (size_t i = 0; i < next->nerrors; i++)
		log_error("%s", next->errors[i]);
	if (next->nerrors > 0)
		log_error("configuration not reloaded (%zu error%s): keeping the one in force",
		    next->nerrors, next->nerrors == 1 ? "" : "s");
	else
		log_info("configuration reloaded from %s (%d setting%s changed)",
		    path != NULL ? path : "built-in defaults", changed, changed == 1 ? "" : "s");
	conf_destroy(next);
	if (d->ready) {
		server_status(d->srv, d->status, sizeof(d->status));
		notify_ready(d->status);
	}
}

/* READY=1 once the backend is up, or READY_BOUND_MS after start-up without
 * it (the daemon answers BACKEND until it comes); then STATUS= every
 * STATUS_MS when it changed. */
static void
on_status(evutil_socket_t fd, short what, void *arg)
{
	struct dlockd *d = arg;
	struct timeval tv = clock_tv(STATUS_MS);
	char status[sizeof(d->status)];
	(void)fd;
	(void)what;

	server_status(d->srv, status, sizeof(status));
	if (!d->ready && server_backend_up(d->srv)) {
		notify_ready(status);
	} else if (!d->ready && clock_ms() - d->started_ms >= READY_BOUND_MS) {
		log_warn("the %s backend is not up after %d ms: ready all the same; requests "
		    "get BACKEND errors until it is", d->srv->be->ops->name, READY_BOUND_MS);
		snprintf(status, sizeof(status), "backend unreachable: %s",
		    d->srv->be->ops->name);
		notify_ready(status);
	} else if (!d->ready) {
		return;
	} else if (strcmp(status, d->status) != 0) {
		notify_status(status);
	}
	if (!d->ready)
		evtimer_add(d->ev_status, &tv);	/* from now on every STATUS_MS */
	d->ready = true;
	snprintf(d->status, sizeof(d->status), "%s", status);
}

/* WATCHDOG=1: the loop runs. */
static void
on_watchdog(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	notify_watchdog();
}

/* Sessions closed and holdings let go (released, expired, lost) since the
 * start: counters that only grow, so that a crowd that came and went
 * between two ticks is seen all the same. */
static uint64_t
trim_churn(const struct server *srv)
{
	struct lt_stats st;

	locktab_stats(srv->lt, &st);
	return srv->sessions.counters.total_connections - srv->sessions.count + st.releases +
	    st.expired + st.lost;
}

/* Every TRIM_TICK_MS: free the idle keys the lock table keeps beyond its
 * bound; then, when TRIM_CHURN sessions or holdings went since the last
 * trim (many clients gone, a session of many locks closed) and the heap
 * holds TRIM_BYTES free, give its free pages back to the system. glibc
 * returns only the top of the heap by itself, and the records of a crowd
 * freed at once leave holes under what stays: without this the daemon would
 * keep the size of its busiest moment. At most once a tick, never on a
 * request's path. */
static void
on_trim(evutil_socket_t fd, short what, void *arg)
{
	struct dlockd *d = arg;
	uint64_t churn = trim_churn(d->srv);
	(void)fd;
	(void)what;
	locktab_trim(d->srv->lt);
	if (churn - d->trim_churn < TRIM_CHURN)
		return;
	d->trim_churn = churn;
#ifdef __GLIBC__
	if (mallinfo2().fordblks >= TRIM_BYTES)
		malloc_trim(0);
#endif
}

/* Start telling the service manager: on_status at once and every
 * READY_TICK_MS until ready; watchdog pings every half of its interval. */
static void
notify_start(struct dlockd *d, struct event_base *base)
{
	struct timeval tv = clock_tv(READY_TICK_MS);
	uint64_t usec = notify_watchdog_usec();

	d->started_ms = clock_ms();
	d->ev_status = event_new(base, -1, EV_PERSIST, on_status, d);
	evtimer_add(d->ev_status, &tv);
	on_status(-1, 0, d);
	if (usec == 0)
		return;
	tv = clock_tv(usec / 2000 > 0 ? usec / 2000 : 1);
	d->ev_watchdog = event_new(base, -1, EV_PERSIST, on_watchdog, d);
	evtimer_add(d->ev_watchdog, &tv);
	log_info("watchdog: pinging the service manager every %llu ms",
	    (unsigned long long)(usec / 2000));
}

/* Print every configuration error; 0 if there was none. */
static int
report_conf(const struct conf *c)
{
	for (size_t i = 0; i < c->nwarnings; i++)
		fprintf(stderr, "%s\n", c->warnings[i]);
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
	struct dlockd d = { .conf_arg = NULL };
	struct tls *tls = NULL;
	int test = 0, ch, rc = -1, nfds = 0;

	/* one allocation policy for the daemon and its event loop */
	event_set_mem_functions(xmalloc, xrealloc, free);

	/* -l and -b are applied after the file: collect them first */
	d.listen = xcalloc((size_t)argc, sizeof(char *));
	while (rc < 0 && (ch = getopt_long(argc, argv, "c:tl:b:d:hV", longopts, NULL)) != -1) {
		switch (ch) {
		case 'c': d.conf_arg = optarg; break;
		case 't': test = 1; break;
		case 'l': d.listen[d.nlisten++] = optarg; break;
		case 'b': d.backend_url = optarg; break;
		case 'd': d.level_arg = optarg; break;
		case 'V':
			printf("dlockd %s\n", DLOCKD_VERSION);
			rc = 0;
			break;
		case 'h':
			usage(stdout);
			rc = 0;
			break;
		default:
			usage(stderr);
			rc = 2;
			break;
		}
	}
	if (rc < 0 && optind < argc) {
		usage(stderr);
		rc = 2;
	}
	if (rc >= 0) {
		free(d.listen);
		return rc;
	}
	/* sockets the service manager passed replace 'listen' (not for -t) */
	if (!test && (nfds = notify_listen_fds()) > 0)
		d.activated = true;
	d.conf = load(&d, !d.activated, true, &tls);
	if (test && d.conf->nerrors == 0)
		conf_check_deep(d.conf);	/* names, certificate files */
	if (d.level_arg != NULL && log_level_parse(d.level_arg) < 0) {
		fprintf(stderr, "command line: unknown log level '%s' (expected debug, info, "
		    "warn or error)\n", d.level_arg);
		report_conf(d.conf);
		rc = 1;
	} else if (report_conf(d.conf) != 0) {
		rc = 1;
	} else if (test) {
		printf("configuration OK\n");
		rc = 0;
	}
	if (rc >= 0) {
		tls_destroy(tls);
		conf_destroy(d.conf);
		free(d.listen);
		return rc;
	}

	if (log_init(log_level(&d), d.conf->log_file) != 0) {
		tls_destroy(tls);
		conf_destroy(d.conf);
		free(d.listen);
		return 1;
	}
	if (conf_path(&d) != NULL)
		log_info("configuration: %s", conf_path(&d));
	else
		log_info("no configuration file at %s: built-in defaults", DEFAULT_CONF);
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit(d.conf);

	struct event_base *base = event_base_new();
	if (base == NULL)
		log_fatal("cannot create the event loop");
	struct backend *be = backend_create(d.conf->backend_type, base, d.conf->backend_settings);
	if (be == NULL)
		log_fatal("cannot start the %s backend", d.conf->backend_type);
	d.srv = server_create(base, d.conf, be, cmd_dispatch, NULL, NULL);
	server_set_tls(d.srv, tls);

	struct event *ev_term = evsignal_new(base, SIGTERM, on_stop_signal, &d);
	struct event *ev_int = evsignal_new(base, SIGINT, on_stop_signal, &d);
	struct event *ev_hup = evsignal_new(base, SIGHUP, on_hup, &d);
	if (evsignal_add(ev_term, NULL) != 0 || evsignal_add(ev_int, NULL) != 0 ||
	    evsignal_add(ev_hup, NULL) != 0)
		log_fatal("cannot install signal handlers");
	if ((d.activated ? server_listen_fds(d.srv, NOTIFY_FD_FIRST, nfds) :
	    server_listen(d.srv)) != 0) {
		free(d.listen);
		return 1;	/* logged */
	}

	log_info("dlockd %s started (pid %ld, backend %s)", DLOCKD_VERSION, (long)getpid(),
	    be->ops->name);
	notify_start(&d, base);
	struct timeval trim_tv = clock_tv(TRIM_TICK_MS);
	d.ev_trim = event_new(base, -1, EV_PERSIST, on_trim, &d);
	evtimer_add(d.ev_trim, &trim_tv);
	event_base_dispatch(base);

	if (!server_drain(d.srv, DRAIN_MS))
		log_warn("releases still unconfirmed by the backend after %d ms; their leases "
		    "end at their TTL", DRAIN_MS);
	event_free(ev_term);
	event_free(ev_int);
	event_free(ev_hup);
	event_free(d.ev_status);
	event_free(d.ev_trim);
	if (d.ev_watchdog != NULL)
		event_free(d.ev_watchdog);
	if (server_destroy(d.srv))
		backend_destroy(be);
	event_base_free(base);
	log_info("stopped");
	log_close();
	conf_destroy(d.conf);
	free(d.listen);
	return 0;
}
