/*
 * session — one client connection: its codec, its lock-table owner, and
 * the in-order processing of its commands.
 *
 * It owns its connection, codec, owner, timers and the losses it has not
 * reported yet. It must not know what a command does (cmd.c) nor how locks
 * work (locktab.c); it reaches its server through s->srv, never a global.
 *
 * Commands are answered in order. A command that waits (LOCK in the queue,
 * UNLOCK/EXTEND until the backend confirms) asks the session to wait
 * (session_wait): the frames behind it stay buffered until its completion
 * writes the reply and calls session_resume(), which runs the session again
 * from the event loop. The session owns that state, its closing and its
 * notices; the command table only asks.
 *
 * A lost lock is told by the reply to the session's next command, "-LOST
 * key fence reason", which that command does not run for; a LOCK it is
 * waiting on is withdrawn and answered so at once. A session that asked for
 * pushes (CLIENT LOSTPUSH ON, RESP3) is told at once by a push as well: the
 * push is the early notice, the reply the one no client library can drop.
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
struct codec_frame;
struct session;

/* Runs one request of s (the command table's cmd_dispatch): it writes the
 * reply, or asks the session to wait (session_wait). */
typedef void session_dispatch_fn(struct session *s, const struct codec_frame *f);

/* How a command that cannot answer at once waits (session_wait). */
enum session_wait {
	SESSION_WAIT_BACKEND,	/* UNLOCK, EXTEND: until the backend answers */
	SESSION_WAIT_LOCK	/* LOCK: in a key's queue */
};

/* A lost lock whose -LOST reply is still to come. */
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
	/* the session's own state: set here only (session_wait, session_resume,
	 * session_close_after_reply, session_set_proto, session_set_lost_push) */
	bool pending;			/* a command waits for its completion */
	bool closing;			/* closing after the output is written */
	const char *close_reason;	/* why it closes, for the log (static);
					 * NULL: the peer left */
	bool throttled;			/* reading paused until the output drains */
	bool waiting_lock;		/* the pending command is a LOCK in a queue */
	bool lost_push;			/* CLIENT LOSTPUSH ON: losses pushed too */
	struct notice_list notices;	/* losses whose reply is due, oldest first */
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
 * connection with that context. Its requests go to srv->dispatch. */
void session_accept(struct server *srv, evutil_socket_t fd, const char *peer,
    const struct tls *tls);
/* Close a session at once: its waits are cancelled, its locks released. */
void session_destroy(struct session *s);
/* Apply the server's configuration anew after a reload: the idle timeout;
 * with no password any more, the session counts as authenticated. */
void session_reconfigure(struct session *s);
/* The running command answers later: its completion writes the reply and
 * calls session_resume(); the requests behind it wait. A LOCK in a queue
 * (SESSION_WAIT_LOCK) of a session without pushes is withdrawn when a lock
 * of the session is lost, and the loss is its answer. */
void session_wait(struct session *s, enum session_wait how);
/* Finish a waiting command: the reply was written to session_out(s)
 * (unless session_closing(s)). */
void session_resume(struct session *s);
/* Close s once the replies written so far are sent (QUIT, CLIENT KILL of
 * itself); reason (static) is logged. */
void session_close_after_reply(struct session *s, const char *reason);
/* Whether s is closing: nothing more is to be written to it. */
bool session_closing(const struct session *s);
/* Speak RESP proto (2 or 3) from now on; RESP2 has no pushes, so lost
 * pushes are turned off. */
void session_set_proto(struct session *s, int proto);
/* CLIENT LOSTPUSH ON|OFF: 0, or -1 (nothing changed) for ON without RESP3. */
int session_set_lost_push(struct session *s, bool on)
	__attribute__((warn_unused_result));
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
