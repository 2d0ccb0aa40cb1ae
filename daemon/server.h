/*
 * server — the daemon's one instance: loop, config, backend, lock table,
 * listeners and sessions.
 */
#ifndef DLOCKD_SERVER_H
#define DLOCKD_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

struct event_base;
struct event;
struct conf;
struct backend;
struct locktab;
struct listener;
struct session;

TAILQ_HEAD(session_list, session);

struct server {
	struct event_base *base;	/* the event loop */
	struct conf *conf;		/* configuration in force */
	struct backend *be;		/* the backend */
	struct locktab *lt;		/* the lock table */
	struct event *lt_timer;		/* fires at the table's next deadline */
	struct listener **listeners;	/* one per conf->listen entry */
	size_t nlisteners;
	struct session_list sessions;	/* every connected session */
	uint64_t nsessions;		/* on sessions */
	uint64_t next_id;		/* id of the next session */
	uint64_t started_ms;		/* monotonic start time */
	bool stopping;			/* shutting down */
};

extern struct server server;

#endif
