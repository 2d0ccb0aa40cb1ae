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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "backend.h"
#include "conf.h"
#include "log.h"
#include "server.h"
#include "xmalloc.h"

#ifndef DEFAULT_CONF
#define DEFAULT_CONF "/etc/dlockd/dlockd.yaml"
#endif
#define DRAIN_MS 5000		/* how long shutdown waits for the backend */

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

/* SIGTERM, SIGINT: stop accepting, drop every session (releasing its
 * locks), release detached locks, and leave the loop. */
static void
on_stop_signal(evutil_socket_t sig, short what, void *arg)
{
	struct server *srv = arg;
	(void)what;
	if (srv->stopping)
		return;
	log_info("signal %d: shutting down", (int)sig);
	server_stop(srv);
	event_base_loopbreak(srv->base);
}

static void
on_hup(evutil_socket_t sig, short what, void *arg)
{
	(void)sig;
	(void)what;
	(void)arg;
	log_info("SIGHUP: configuration reload is not supported; restart to apply changes");
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
	struct conf *conf;

	/* one allocation policy for the daemon and its event loop */
	event_set_mem_functions(xmalloc, xrealloc, free);
	conf = conf_create();

	/* -l and -b are applied after the file: collect them first */
	char **listen = xcalloc((size_t)argc, sizeof(char *));
	size_t nlisten = 0;
	const char *backend_url = NULL;
	const char *level_arg = NULL;
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

	struct event_base *base = event_base_new();
	if (base == NULL)
		log_fatal("cannot create the event loop");
	struct backend *be = backend_create(conf->backend_type, base, conf->backend_settings);
	if (be == NULL)
		log_fatal("cannot start the %s backend", conf->backend_type);
	struct server *srv = server_create(base, conf, be, NULL, NULL);

	struct event *ev_term = evsignal_new(base, SIGTERM, on_stop_signal, srv);
	struct event *ev_int = evsignal_new(base, SIGINT, on_stop_signal, srv);
	struct event *ev_hup = evsignal_new(base, SIGHUP, on_hup, srv);
	if (evsignal_add(ev_term, NULL) != 0 || evsignal_add(ev_int, NULL) != 0 ||
	    evsignal_add(ev_hup, NULL) != 0)
		log_fatal("cannot install signal handlers");
	if (server_listen(srv) != 0)
		return 1;	/* logged */

	log_info("dlockd %s started (pid %ld, backend %s)", DLOCKD_VERSION, (long)getpid(),
	    be->ops->name);
	event_base_dispatch(base);

	if (!server_drain(srv, DRAIN_MS))
		log_warn("releases still unconfirmed by the backend after %d ms; their leases "
		    "end at their TTL", DRAIN_MS);
	event_free(ev_term);
	event_free(ev_int);
	event_free(ev_hup);
	if (server_destroy(srv))
		backend_destroy(be);
	event_base_free(base);
	log_info("stopped");
	log_close();
	conf_destroy(conf);
	return 0;
}
