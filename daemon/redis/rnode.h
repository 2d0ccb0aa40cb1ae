/*
 * rnode — a client of one Redis server (a node): every backend that talks
 * to Redis holds one per server and never reaches into it.
 *
 * A node keeps a command connection and, when it is given channels, a
 * subscriber connection. Each connection resolves the server's name at
 * every connect (libevent's evdns, never blocking the loop), connects,
 * speaks TLS when it is given a client context, and sends AUTH (with a
 * user when one is set), then SELECT, SCRIPT LOAD of the scripts and the
 * maxmemory-policy check on the command connection, or SUBSCRIBE on the
 * other; the command connection is up once all that is answered. Commands
 * issued in one turn of the event loop leave in one write; replies are read
 * by hiredis's reader, fed the bytes. A reply later than command_timeout_ms,
 * or a connection not up within connect_timeout_ms, drops the connection; a
 * dropped connection is made again after a capped, jittered backoff.
 *
 * A call is answered exactly once: by its reply (error replies included,
 * but NOSCRIPT, which the node handles by sending the script whole and
 * loading it again), or with no reply when the connection goes (before the
 * down hook runs) or the node is destroyed. A connection whose server
 * answers READONLY (a primary turned replica) is dropped and made again.
 *
 * Kept calls (rnode_keep) are the node's own: calls that must reach the
 * server (releases), sent whenever the command connection is up, sent again
 * after an error reply every RN_KEEP_RETRY_MS, dropped once answered or
 * once they no longer matter (their drop time).
 */
#ifndef DLOCKD_RNODE_H
#define DLOCKD_RNODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct evdns_base;
struct evbuffer;
struct redisReply;
struct rnode;
struct tls_client;

/* What a node connects to, and how. rnode_create copies the strings. */
struct rnode_conf {
	const char *what;		/* for log lines: "redis", "sentinel", ... */
	const char *host;		/* name or address, resolved at every connect */
	int port;			/* its port */
	const char *username;		/* AUTH user; NULL: AUTH with the password alone */
	const char *password;		/* NULL: no AUTH */
	long long db;			/* SELECT on the command connection; 0: none */
	struct tls_client *tls;		/* NULL: plain TCP (the node takes a reference) */
	const char *tls_name;		/* name the certificate must carry (and SNI);
					 * NULL: host */
	uint64_t connect_timeout_ms;	/* resolve, connect, handshake, AUTH: up within */
	uint64_t command_timeout_ms;	/* a reply later than this drops the connection */
	const char *const *scripts;	/* Lua scripts, called by index (kept by the caller) */
	size_t nscripts;		/* how many */
	const char *const *channels;	/* channels a subscriber connection listens
					 * to (kept by the caller) */
	size_t nchannels;		/* how many; 0: no subscriber connection */
	bool sharded;			/* a node of a cluster: shard channels
					 * (SSUBSCRIBE, "smessage"), and MOVED, ASK and
					 * TRYAGAIN replies are not logged (the owner
					 * follows them) */
	size_t channel_group;		/* channels per SUBSCRIBE command (a shard
					 * channel's command: one slot's); 0: all in one */
	bool check_policy;		/* read maxmemory-policy at each connect, warn
					 * unless it is noeviction */
	bool check_persistence;		/* read appendonly and appendfsync at each
					 * connect, warn unless a restart keeps
					 * every write (yes, always) */
	bool read_uptime;		/* read the server's uptime at each connect
					 * (rnode_uptime) */
	bool require_master;		/* ROLE must say master, else the connection
					 * is dropped (a replica, or a stale master) */
	long long min_replicas_ack;	/* rnode_eval_acked: replicas that must
					 * acknowledge (WAIT), 0: none */
	long long replica_ack_timeout_ms; /* how long WAIT waits for them */
	const char *acl;		/* the ACL its calls need, named in the log
					 * when Redis refuses one for want of a
					 * permission (kept by the caller) */
};

/* What a node tells its owner; any may be NULL. */
struct rnode_hooks {
	/* The command connection is up (scripts may be called). */
	void (*up)(void *arg);
	/* It went down (after every call in flight was answered with no
	 * reply): why, for the log. */
	void (*down)(void *arg, const char *why);
	/* The subscriber connection listens to every channel (again):
	 * messages may have been missed before. */
	void (*subscribed)(void *arg);
	/* A message on one of the channels. */
	void (*message)(void *arg, const char *channel, size_t channellen, const char *msg,
	    size_t msglen);
};

/* The answer to a call: rep, the reply (an error reply too), freed after
 * the callback returns; or rep NULL when no reply will come, why saying why
 * (the connection went, timed out, the node is destroyed). */
typedef void rnode_cb(void *arg, const struct redisReply *rep, const char *why);

/* What a node counted, for INFO. */
struct rnode_stats {
	bool up;			/* the command connection is up */
	bool subscribed;		/* the subscriber connection listens */
	uint64_t reconnects;		/* connections made after the first (both) */
	uint64_t calls;			/* calls sent (scripts and commands) */
	uint64_t errors;		/* error replies */
	uint64_t unacked;		/* calls too few replicas acknowledged */
	size_t inflight;		/* calls sent and not answered yet */
	size_t kept;			/* kept calls not answered yet */
	size_t scripts_loaded;		/* scripts known to the server by their SHA1 */
	const char *policy;		/* maxmemory-policy as last read, "unknown" */
	const char *persistence;	/* check_persistence: "aof-always",
					 * "aof-everysec", "aof-no", "no-aof" as
					 * last read, or "unknown" */
	const char *address;		/* the address last connected to, or the name */
};

/* A node of conf, told through hooks with arg, on base's loop, resolving
 * names with dns (the caller keeps base and dns alive longer than it). It
 * does not connect before rnode_start. The caller owns it (rnode_destroy). */
struct rnode *rnode_create(struct event_base *base, struct evdns_base *dns,
    const struct rnode_conf *conf, const struct rnode_hooks *hooks, void *arg);
/* Start connecting. */
void rnode_start(struct rnode *n);
/* Close the connections, answering every call in flight with no reply
 * (from inside this call), and free n and its kept calls. Not from one of
 * n's callbacks. */
void rnode_destroy(struct rnode *n);

/* Whether the command connection is up. */
bool rnode_up(const struct rnode *n);
/* conf.read_uptime: how long the server has run at least, at now
 * (clock_ms()), from its uptime as read at the last connect, into *ms;
 * false when that could not be read. */
bool rnode_uptime(const struct rnode *n, uint64_t now, uint64_t *ms);
/* Why it is not, in a few words that hold no secret ("connection refused",
 * "authentication refused", "certificate not verified: ..."), and since
 * when (clock_ms(), into *since: when it went down, or when the first
 * attempt failed; 0 before that). When it is up: the error reply to the
 * last script that failed (a missing permission, READONLY...), until one
 * succeeds; else NULL. */
const char *rnode_problem(const struct rnode *n, uint64_t *since);
/* Whether n is refused for its settings, which only a change of them can
 * cure: its last connection was refused (authentication, SELECT, a
 * certificate) and none is up since, or its last script failed for a
 * missing permission (ACL) and none ran since. */
bool rnode_refused(const struct rnode *n);

/* Call script (an index into conf->scripts) with argc arguments (numkeys,
 * the keys, the arguments): EVALSHA when the server has it, else EVAL. argv
 * and argvlen must stay valid until cb runs (a NOSCRIPT sends them again).
 * 0; -1 when the command connection is not up (cb is not called). */
int rnode_eval(struct rnode *n, size_t script, int argc, const char *const *argv,
    const size_t *argvlen, rnode_cb *cb, void *arg) __attribute__((warn_unused_result));
/* As rnode_eval, and when conf->min_replicas_ack > 0 a WAIT as soon as
 * the reply comes: cb gets the reply only once that many replicas acknowledged the
 * call within replica_ack_timeout_ms; else no reply, why saying "replica
 * without acknowledgement (...)" (the call ran: what it did is the
 * caller's to undo). An error reply comes at once. */
int rnode_eval_acked(struct rnode *n, size_t script, int argc, const char *const *argv,
    const size_t *argvlen, rnode_cb *cb, void *arg) __attribute__((warn_unused_result));
/* Send a command (argv[0] its name) on the command connection; cb may be
 * NULL. argv is copied. 0; -1 when it is not up. */
int rnode_command(struct rnode *n, int argc, const char *const *argv, const size_t *argvlen,
    rnode_cb *cb, void *arg) __attribute__((warn_unused_result));
/* Keep a call of script for the server (argv copied): sent now or when the
 * command connection is up, and again after an error reply, until it is
 * answered or drop_at (clock_ms()) has passed. */
void rnode_keep(struct rnode *n, size_t script, int argc, const char *const *argv,
    const size_t *argvlen, uint64_t drop_at);
/* The server is now host:port (a failover): the connections are made
 * again at once (starting n if it was not), kept calls go to the new one. */
void rnode_set_address(struct rnode *n, const char *host, int port);
/* Connect with tls (a reference taken) from the next connect on. */
void rnode_set_tls(struct rnode *n, struct tls_client *tls);
/* Listen to channels (kept by the caller) from now on: the subscriber
 * connection is made again (none with none); subscribed tells when it
 * listens. */
void rnode_set_channels(struct rnode *n, const char *const *channels, size_t nchannels);
/* Drop the command connection now and make it again (backoff applies). */
void rnode_drop(struct rnode *n, const char *why);

/* What n counted. */
void rnode_stats(const struct rnode *n, struct rnode_stats *st);

#ifdef DLOCKD_TEST_HOOKS
/* Give n rep as an unsolicited reply: on the subscriber connection (sub),
 * or as the answer to CONFIG GET maxmemory-policy. */
void rnode_unsolicited(struct rnode *n, int sub, const struct redisReply *rep);
#endif

#endif
