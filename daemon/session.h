/*
 * session — one client connection: its codec, its lock-table owner, and
 * the in-order processing of its commands.
 *
 * It owns its connection, codec, owner, timers and the losses it has not
 * reported yet. It must not know what a command does (cmd.c) nor how locks
 * work (locktab.c); it reaches its server's loop, configuration and lock
 * table through its hub (s->hub), never a global, and knows no more of the
 * server.
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
#include "who.h"

#define SESSION_MAX_ARGS 1024		/* arguments in one request */
#define SESSION_PIPELINE_FRAMES 16	/* request frames buffered behind a wait */
#define SESSION_PIPELINE_MIN (1u << 20)	/* ... and at least this many bytes */
#define SESSION_OUTPUT_HIGH (1u << 20)	/* unsent reply bytes that pause the session */

struct conn;
struct conf;
struct backend;
struct locktab;
struct tls;
struct codec;
struct lt_owner;
struct obs;
struct obs_client;
struct event;
struct event_base;
struct evbuffer;
struct codec_frame;
struct session;

/* Runs one request of s (the command table's cmd_dispatch): it writes the
 * reply, or asks the session to wait (session_wait). */
typedef void session_dispatch_fn(struct session *s, const struct codec_frame *f);

/*
 * X(name, metric, help) for every counter of the sessions: its INFO field
 * (# Clients), its name in /metrics after "dlockd_", and its HELP there.
 */
#define SESSION_COUNTERS(X) \
	X(total_connections, connections_accepted_total, "client connections accepted") \
	X(rejected_connections, connections_rejected_total, \
	    "client connections refused at limits.max_clients") \
	X(commands_total, commands_total, "commands processed") \
	X(protocol_errors_total, protocol_errors_total, \
	    "connections closed for a protocol error") \
	X(idle_timeouts_total, idle_timeouts_total, \
	    "sessions closed for sessions.idle_timeout_ms") \
	X(request_timeouts_total, request_timeouts_total, "connections closed for a request " \
	    "unfinished within sessions.request_timeout_ms") \
	X(login_timeouts_total, login_timeouts_total, "connections closed for no AUTH within " \
	    "sessions.login_timeout_ms") \
	X(output_drops_total, output_drops_total, "connections closed for replies they did " \
	    "not read (limits.max_output_bytes, sessions.output_timeout_ms)")

/* The sessions' counters, since the start. */
struct session_counters {
#define SESSION_COUNTER_FIELD(name, metric, help) uint64_t name;
	SESSION_COUNTERS(SESSION_COUNTER_FIELD)
#undef SESSION_COUNTER_FIELD
};

/*
 * X(name, type, help) for the numbers the command table keeps of LOCKALL
 * (cmd_multi.c): its INFO field (# Locks, after the lock table's) and its
 * name in /metrics after "dlockd_"; gauge (now) or counter (since the
 * start); its HELP there.
 */
#define SESSION_MULTI_STATS(X) \
	X(lockall_granted_total, counter, "LOCKALLs granted: every key of the set") \
	X(lockall_not_granted_total, counter, "LOCKALLs not granted within their WAIT") \
	X(lockall_errors_total, counter, "LOCKALLs answered with an error") \
	X(lockall_waiting, gauge, "LOCKALLs taking their keys now")
/* The LOCKALL numbers (SESSION_MULTI_STATS). */
struct session_multi_stats {
#define SESSION_MULTI_FIELD(name, type, help) uint64_t name;
	SESSION_MULTI_STATS(SESSION_MULTI_FIELD)
#undef SESSION_MULTI_FIELD
};
TAILQ_HEAD(session_list, session);

/*
 * A server's sessions, and what they and the command table running their
 * requests use of the server. The server embeds one and sets it up with
 * session_hub_init(); every session of it points to it. The session module
 * keeps the list, the index and the counters; the rest is the server's and
 * outlives the hub.
 */
struct session_hub {
	struct event_base *base;	/* the event loop */
	const struct conf *conf;	/* configuration in force */
	struct backend *be;		/* the backend (the commands name it) */
	struct locktab *lt;		/* the lock table the sessions' owners are in */
	struct obs *obs;		/* who leads lt's keys (LEADER, OBSERVE);
					 * the hub's */
	session_dispatch_fn *dispatch;	/* runs a session's requests */
	uint64_t started_ms;		/* clock_ms() at the server's start */
	struct session_list all;	/* every connected session */
	struct hashtab *ids;		/* the same, by id */
	uint64_t count;			/* on all */
	uint64_t next_id;		/* id of the next session */
	struct session_counters counters; /* for INFO and /metrics */
	struct session_multi_stats multi; /* the same, the command table's */
	struct who_daemon daemon;	/* this daemon, as leases name it */
};

/* How a command that cannot answer at once waits (session_wait). */
enum session_wait {
	SESSION_WAIT_BACKEND,	/* UNLOCK, EXTEND: until the backend answers */
	SESSION_WAIT_LOCK,	/* LOCK: in a key's queue */
	SESSION_WAIT_OBSERVE	/* OBSERVE: for a change of a key */
};

/* The end of a waiting command that will never complete (session_wait_abort):
 * its wait was withdrawn for a loss, which is its answer (gone false: what
 * the command took is still the session's to give back), or the session is
 * being destroyed (gone true: its owner already is, with its locks). arg is
 * the command's. It writes no reply. */
typedef void session_abort_fn(void *arg, bool gone);
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
	struct session_hub *hub;	/* the sessions it is one of */
	uint64_t id;			/* unique for the daemon's life */
	struct hashtab_node hnode;	/* in hub->ids, keyed by id */
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
	struct obs_client *observer;	/* its OBSERVE wait and follows, made by
					 * the command table when first needed;
					 * NULL: none */
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
	bool waiting_observe;		/* the pending command is an OBSERVE */
	long long pending_value;	/* the command table's, for the reply of
					 * the command that waits */
	session_abort_fn *abort;	/* the waiting command's end if it never
					 * completes; NULL: none */
	void *abort_arg;		/* its argument */
	bool lost_push;			/* CLIENT LOSTPUSH ON: losses pushed too */
	bool suspend_push;		/* CLIENT SUSPENDPUSH ON: suspended and
					 * resumed holdings pushed */
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
	TAILQ_ENTRY(session) entry;	/* on hub->all */
};

/* Set up hub with no sessions yet, for a server of base, conf, be and lt
 * (none owned), with started_ms its start; requests go to dispatch. */
void session_hub_init(struct session_hub *hub, struct event_base *base,
    const struct conf *conf, struct backend *be, struct locktab *lt,
    session_dispatch_fn *dispatch, uint64_t started_ms);
/* Close every session of hub at once (their locks released), logging
 * reason (static) as each one's. */
void session_hub_close_all(struct session_hub *hub, const char *reason);
/* Free what hub holds; its sessions must be gone (session_hub_close_all). */
void session_hub_fini(struct session_hub *hub);

/* Accept a connection on fd (owned from here on) for hub; with tls, a TLS
 * connection with that context. Its requests go to hub->dispatch. */
void session_accept(struct session_hub *hub, evutil_socket_t fd, const char *peer,
    const struct tls *tls);
/* Describe a lease asked for by the session with owner id id (an
 * lt_describe_fn; arg: the hub). */
size_t session_describe(void *arg, uint64_t id, uint64_t ttl_ms, int detached, char *buf,
    size_t len);
/* Close a session at once: its waits are cancelled, its locks released. */
void session_destroy(struct session *s);
/* Apply the server's configuration anew after a reload: the idle timeout;
 * with no password any more, the session counts as authenticated. */
void session_reconfigure(struct session *s);
/* The running command answers later: its completion writes the reply and
 * calls session_resume(); the requests behind it wait. A LOCK in a queue
 * (SESSION_WAIT_LOCK) or an OBSERVE waiting for a change
 * (SESSION_WAIT_OBSERVE) of a session without pushes is withdrawn when a
 * lock of the session is lost, and the loss is its answer. */
void session_wait(struct session *s, enum session_wait how);
/* While the command waits, call fn(arg, gone) if it will never complete
 * (session_abort_fn); session_resume() forgets it. */
void session_wait_abort(struct session *s, session_abort_fn *fn, void *arg);
/* A push was written to session_out(s): send it now (or close s if its
 * unsent output is over the limit). */
void session_pushed(struct session *s);
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
/* CLIENT SUSPENDPUSH ON|OFF: 0, or -1 (nothing changed) for ON without
 * RESP3. */
int session_set_suspend_push(struct session *s, bool on)
	__attribute__((warn_unused_result));
/* Where replies go. */
struct evbuffer *session_out(struct session *s);
/* The session with id in hub, or NULL. */
struct session *session_find(struct session_hub *hub, uint64_t id);
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
