/*
 * session — one client connection: its codec, its lock-table owner, and
 * the in-order processing of its commands.
 *
 * It owns its connection, codec, owner, timers and the losses it has not
 * reported yet. It must not know what a command does (cmd.c) nor how locks
 * work (locktab.c); it reaches its server through s->srv, never a global.
 *
 * Commands are answered in order. A command that waits (LOCK in the queue,
 * UNLOCK/EXTEND until the backend confirms) makes the session pending: the
 * frames behind it stay buffered until its completion writes the reply and
 * schedules the session to run again from the event loop.
 *
 * A lost lock is told at once as a push to a session that asked for pushes
 * (CLIENT LOSTPUSH ON, RESP3). Any other session is told by the reply to its
 * next command, "-LOST key fence reason", which that command does not run
 * for; a LOCK it is waiting on is withdrawn and answered so at once.
 */
#ifndef DLOCKD_SESSION_H
#define DLOCKD_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

#include <event2/util.h>

#include "hashtab.h"

#define SESSION_MAX_ARGS 1024		/* arguments in one request */
#define SESSION_PIPELINE_FRAMES 16	/* request frames buffered behind a wait */
#define SESSION_PIPELINE_MIN (1u << 20)	/* ... and at least this many bytes */
#define SESSION_OUTPUT_HIGH (1u << 20)	/* unsent reply bytes that pause the session */

struct conn;
struct server;
struct tls;
struct codec;
struct lt_owner;
struct event;
struct evbuffer;

/* A lost lock not yet reported to a session that takes no pushes. */
struct lost_notice {
	char *key;			/* the key (binary-safe copy) */
	size_t keylen;
	uint64_t fence;			/* the lost holding's fence */
	char *reason;			/* why, for people */
	STAILQ_ENTRY(lost_notice) entry; /* on session->notices */
};
STAILQ_HEAD(notice_list, lost_notice);

struct session {
	struct server *srv;		/* the server it belongs to */
	uint64_t id;			/* unique for the daemon's life */
	struct hashtab_node hnode;	/* in srv->session_ids, keyed by id */
	char peer[80];			/* peer address, for logs */
	char laddr[120];		/* the local address it came in on */
	bool peer_cred;			/* a Unix socket peer: uid, gid, groups known */
	uid_t uid;			/* the peer's user (SO_PEERCRED) */
	gid_t gid;			/* its primary group */
	gid_t *groups;			/* its supplementary groups (SO_PEERGROUPS) */
	size_t ngroups;			/* how many */
	uint64_t created_ms;		/* clock_ms() when it was accepted */
	struct conn *conn;		/* the socket */
	bool tls;			/* it came in on a TLS listener */
	struct codec *codec;		/* request frames */
	struct lt_owner *owner;		/* its locks in the table */
	struct event *ev_resume;	/* runs the session again after a wait */
	int proto;			/* 2 or 3 */
	bool authed;			/* AUTH passed (or none needed) */
	bool admin;			/* AUTH admin passed */
	bool pending;			/* a command waits for its completion */
	bool closing;			/* closing after the output is written */
	const char *close_reason;	/* why it closes, for the log (static);
					 * NULL: the peer left */
	bool throttled;			/* reading paused until the output drains */
	bool waiting_lock;		/* the pending command is a LOCK */
	bool lost_push;			/* CLIENT LOSTPUSH ON: losses come as pushes */
	struct notice_list notices;	/* losses to report, oldest first */
	uint64_t last_active_ms;	/* last input, or the end of the last wait */
	struct event *ev_idle;		/* sessions.idle_timeout_ms, or NULL */
	uint64_t frame_since_ms;	/* when an unfinished request was seen
					 * first; 0: none */
	uint64_t throttled_ms;		/* when reading was paused (throttled) */
	uint64_t guard_at;		/* when ev_guard fires; 0: not armed */
	struct event *ev_guard;		/* the request, login and output
					 * timeouts; made when first needed */
	char *name;			/* CLIENT SETNAME, or NULL */
	char *lib_name;			/* CLIENT SETINFO LIB-NAME, or NULL */
	char *lib_ver;			/* CLIENT SETINFO LIB-VER, or NULL */
	TAILQ_ENTRY(session) entry;	/* on srv->sessions */
};

/* Accept a connection on fd (owned from here on) for srv; with tls, a TLS
 * connection with that context. */
void session_accept(struct server *srv, evutil_socket_t fd, const char *peer,
    const struct tls *tls);
/* Close a session at once: its waits are cancelled, its locks released. */
void session_destroy(struct session *s);
/* Apply the server's configuration anew after a reload: the idle timeout;
 * with no password any more, the session counts as authenticated. */
void session_reconfigure(struct session *s);
/* Finish a waiting command: the reply was written to session_out(s). */
void session_resume(struct session *s);
/* Drop the losses queued for s (it takes pushes from now on). */
void session_clear_notices(struct session *s);
/* Where replies go. */
struct evbuffer *session_out(struct session *s);
/* The session with id on srv, or NULL. */
struct session *session_find(struct server *srv, uint64_t id);
/* Close another session at once, as if its peer had gone (CLIENT KILL):
 * its locks are released. who is logged. Not for the session running. */
void session_kill(struct session *s, const char *who);
/* Whether s has admin rights: AUTH admin passed, or a Unix socket peer with
 * uid 0 or in auth.admin_group (the configuration in force now). */
bool session_is_admin(const struct session *s);

/* Per-session logging: prefixes the session id and peer. */
void session_log(const struct session *s, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
