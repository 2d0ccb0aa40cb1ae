/*
 * libdlock — a blocking client for dlockd.
 *
 *	dlock_t *d = dlock_connect("127.0.0.1:7480", NULL, err, sizeof(err));
 *	struct dlock_lock_opts o = DLOCK_LOCK_OPTS_INIT;
 *	struct dlock_grant g;
 *	o.wait_ms = 5000;
 *	if (dlock_lock(d, "jobs/nightly", &o, &g) == 1) {
 *		... critical section, pass g.fence to the resource ...
 *		dlock_unlock(d, "jobs/nightly", NULL);
 *	}
 *	dlock_close(d);
 *
 * Locks are bound to the connection: the daemon renews them while it is open
 * and releases them when it closes (unless DETACH was asked). A dlock_t is not
 * thread-safe; use one per thread.
 *
 * No call blocks for ever on a daemon that stopped answering: each waits for
 * its reply at most the handle's timeout (dlock_set_timeout, 10 s by
 * default), and TCP connections use keepalive probes, so a daemon whose host
 * vanished fails the connection in about 30 s even while a LOCK waits for
 * ever (see dlock_set_timeout).
 */
#ifndef DLOCK_H
#define DLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DLOCK_EXPORT __attribute__((visibility("default")))

typedef struct dlock dlock_t;

/* Options of dlock_lock(). Start from DLOCK_LOCK_OPTS_INIT. */
struct dlock_lock_opts {
	long long ttl_ms;	/* lease; 0 = the daemon's default */
	long long wait_ms;	/* -1 = wait until granted, 0 = try once */
	int shared;		/* 1: shared (reader) mode */
	int limit;		/* > 0: semaphore with this many permits */
	int detach;		/* 1: not bound to the connection (needs ttl_ms) */
};
#define DLOCK_LOCK_OPTS_INIT { 0, -1, 0, 0, 0 }

/* What a granted LOCK returns. */
struct dlock_grant {
	char token[128];	/* identifies the holding (for UNLOCK/EXTEND by token) */
	long long fence;	/* fencing token: strictly increasing per key */
	long long ttl_ms;	/* the lease granted */
};

/* What STATUS returns. */
struct dlock_status {
	char mode[16];		/* free, exclusive, shared or semaphore */
	long long holders;	/* current holdings */
	long long waiters;	/* queued LOCKs */
	long long fence;	/* last fence issued for the key */
	long long ttl_ms;	/* exclusive holder's remaining lease, -1 when none */
	long long limit;	/* semaphore permits, 0 otherwise */
	char backend[16];	/* backend state: local, connected or disconnected */
};

/* One holding of a key, as STATUS key FULL tells it. */
struct dlock_holder {
	long long session;	/* the holding session's id */
	char name[128];		/* its name (CLIENT SETNAME), "" if none */
	char addr[128];		/* its peer address */
	char mode[16];		/* exclusive, shared or semaphore */
	long long fence;	/* the holding's fence */
	long long count;	/* reentrant holds */
	long long held_ms;	/* held for so long */
	long long lease_ms;	/* lease left */
	int detached;		/* 1: a DETACH lock */
};

/* One queued LOCK of a key, as STATUS key FULL tells it. */
struct dlock_waiter {
	long long session;	/* the waiting session's id */
	char name[128];		/* its name, "" if none */
	char addr[128];		/* its peer address */
	char mode[16];		/* the mode it asks for */
	long long waited_ms;	/* queued for so long */
	long long wait_ms;	/* how long it waits in all, -1: until granted */
	int detach;		/* 1: it asks for a DETACH lock */
};

/* What STATUS key FULL returns (dlock_status_full_free frees the lists). */
struct dlock_status_full {
	struct dlock_status status;	/* what STATUS returns */
	struct dlock_holder *holders;	/* the holdings */
	size_t nholders;		/* how many */
	struct dlock_waiter *waiters;	/* the queue, head first */
	size_t nwaiters;		/* how many */
};

/* A page of HELD: keys held through any daemon (dlock_held_free frees it). */
struct dlock_held {
	char next[520];		/* the cursor of the next page; "0" after the last */
	char **keys;		/* the keys of this page (NUL-terminated copies) */
	size_t *lens;		/* their lengths (keys are binary-safe) */
	size_t n;		/* how many */
};

/* The daemon a holding of STATUS key FULL is held through: on a shared
 * backend, any daemon of the fleet ("" when not told). */
struct dlock_holder_daemon {
	char daemon[24];	/* its instance id (INFO's daemon_id) */
	char host[72];		/* its host name */
	char daemon_addr[136];	/* where its clients reach it */
};

/*
 * Connect to addr: "host:port", "[v6]:port", "host" (port 7480), "unix:/path"
 * or a path starting with '/'; NULL uses $DLOCK_ADDR, else 127.0.0.1:7480.
 * With a password (NULL or "" for none), authenticates (HELLO 3 AUTH). Then
 * asks for lost pushes (CLIENT LOSTPUSH ON), which dlockd sends only to
 * sessions that opt in (without the password dlockd requires, the handle
 * connects without them, and every call but dlock_ping fails with the code
 * NOAUTH: such a session can hold no lock). On failure returns NULL, writes why into err (errlen
 * bytes, may be 0) and sets errno: EINVAL for a malformed address; EACCES
 * when dlockd refused the handshake (a wrong password, say), but EAGAIN when
 * it has too many clients and EPROTO when the peer does not speak the
 * protocol or refuses lost pushes (a dlockd too old for them); else the
 * system error of the connection (ECONNREFUSED, ENOENT, ETIMEDOUT after 10 s,
 * ...). The caller owns the handle (dlock_close).
 */
DLOCK_EXPORT dlock_t *dlock_connect(const char *addr, const char *password,
    char *err, size_t errlen);
/* Close the connection: every lock it holds that is not detached is released. */
DLOCK_EXPORT void dlock_close(dlock_t *d);

/*
 * How long each later call of d waits for its reply, in ms (0: no limit).
 * The default is 10000, as for connecting. A LOCK with a wait_ms of w waits
 * w + ms, since the daemon holds its reply back that long on purpose; a LOCK
 * that waits until granted (wait_ms -1) has no limit: on TCP, keepalive
 * probes (first after 15 s of silence, then every 5 s, 3 unanswered fail the
 * connection) and a 30 s bound on unacknowledged data (TCP_USER_TIMEOUT)
 * notice a daemon host that vanished; Unix sockets need neither. The limit
 * covers the whole call, sending included, however the reply is split.
 *
 * When a reply is overdue the call fails with the code IO, errno ETIMEDOUT
 * and the message "dlockd did not answer within N ms", and the connection
 * is dead (see dlock_error): its socket is shut down, so that the daemon
 * sees the session end and releases its locks, and a late reply cannot be
 * taken for the answer to a later command. Returns 0, or -1 (ms negative:
 * code ARG; d NULL: errno EINVAL).
 */
DLOCK_EXPORT int dlock_set_timeout(dlock_t *d, long long ms);

/*
 * Lock key. Returns 1 granted (*out filled unless out is NULL), 0 not granted
 * within wait_ms, -1 error (dlock_error). opts NULL means defaults. Without
 * a wait_ms it blocks until granted.
 */
DLOCK_EXPORT int dlock_lock(dlock_t *d, const char *key,
    const struct dlock_lock_opts *opts, struct dlock_grant *out);
/* Unlock key (by token if not NULL). Holds remaining (0 = released), or -1. */
DLOCK_EXPORT long long dlock_unlock(dlock_t *d, const char *key, const char *token);
/* Extend key's lease to ms (by token if not NULL). The new TTL, or -1. */
DLOCK_EXPORT long long dlock_extend(dlock_t *d, const char *key, long long ms,
    const char *token);
/* Status of key. 0, or -1. */
DLOCK_EXPORT int dlock_status(dlock_t *d, const char *key, struct dlock_status *out);
/*
 * STATUS key FULL: the status plus every holder and waiter. 0, or -1; a
 * dlockd that predates FULL fails with the code ERR. Free *out's lists with
 * dlock_status_full_free (also after a failure: nothing to free then).
 */
DLOCK_EXPORT int dlock_status_full(dlock_t *d, const char *key,
    struct dlock_status_full *out);
DLOCK_EXPORT void dlock_status_full_free(struct dlock_status_full *st);
/*
 * dlock_status_full, and in *daemons (out->nholders of them, in the order
 * of out->holders; NULL when there is none) the daemon each holding is held
 * through. Free *out with dlock_status_full_free and *daemons with free().
 */
DLOCK_EXPORT int dlock_status_fleet(dlock_t *d, const char *key,
    struct dlock_status_full *out, struct dlock_holder_daemon **daemons);
/*
 * HELD cursor [MATCH pattern] [COUNT count]: one page of the keys held
 * through any daemon; cursor "0" starts, out->next "0" ends. pattern NULL:
 * every key; count 0: the daemon's default. 0, or -1. Free *out with
 * dlock_held_free (also after a failure: nothing to free then).
 */
DLOCK_EXPORT int dlock_held(dlock_t *d, const char *cursor, const char *pattern,
    long long count, struct dlock_held *out);
DLOCK_EXPORT void dlock_held_free(struct dlock_held *h);
/* 1 if fence is a current holding of key, 0 if not, -1 on error. */
DLOCK_EXPORT int dlock_validate(dlock_t *d, const char *key, long long fence);
/* PING: 0 or -1. */
DLOCK_EXPORT int dlock_ping(dlock_t *d);
/* INFO text; the caller frees it. NULL on error. */
DLOCK_EXPORT char *dlock_info(dlock_t *d);

/*
 * Several keys at once (LOCKALL, UNLOCKALL): all of them or none.
 *
 * Lock keys[0..nkeys) with the same opts (as dlock_lock's; NULL: defaults)
 * in one request: dlockd takes them in an order of its own, so that two
 * callers naming the same keys in different orders cannot deadlock, and
 * grants the set only whole. Returns 1 granted, with grants[i] (unless
 * grants is NULL: nkeys entries) the grant of keys[i]; 0 not granted within
 * wait_ms, and then nothing of the set is held or queued; -1 error
 * (dlock_error), nothing held either: no keys or an empty one (ARG), a key
 * named twice (ERR, from dlockd), more keys than dlockd allows
 * (limits.max_lockall_keys, default 64: LIMIT), a dlockd too old for LOCKALL
 * (ERR). The wait and the handle's timeout are as dlock_lock's. Each key of
 * the set is then an ordinary holding: dlock_unlock, dlock_extend,
 * dlock_validate work on it, and a loss is told per key (LOST,
 * dlock_poll_lost) while the rest stays held. Reentrant as dlock_lock: a key
 * this session holds already in the same mode is held once more.
 */
DLOCK_EXPORT int dlock_lockall(dlock_t *d, size_t nkeys, const char *const *keys,
    const struct dlock_lock_opts *opts, struct dlock_grant *grants);
/*
 * Unlock keys[0..nkeys) once each in one request. 0 with the holds left of
 * keys[i] (0: released) in remaining[i] (unless remaining is NULL: nkeys
 * entries), or -1: when one key is not held by this session NOTHELD names
 * it, and nothing is released; a key named twice: ERR.
 */
DLOCK_EXPORT int dlock_unlockall(dlock_t *d, size_t nkeys, const char *const *keys,
    long long *remaining);

/*
 * Elections (CAMPAIGN, PROCLAIM, RESIGN, LEADER, OBSERVE). A key's leader is
 * the session that holds it exclusively through CAMPAIGN; it has a value
 * (its address, say) that LEADER and OBSERVE tell everyone. The key's
 * revision grows with every change of its holders or value.
 */

/* What LEADER and OBSERVE return: the state of a key. */
struct dlock_leader {
	char value[1024];	/* the leader's value: valuelen bytes, any byte
				 * (a NUL follows when valuelen < sizeof(value)) */
	size_t valuelen;	/* its length */
	int has_value;		/* 0: nobody leads, or a plain LOCK holds the key */
	long long term;		/* the exclusive holder's fence (shared, semaphore:
				 * the highest fence held); 0 when free */
	long long revision;	/* the key's revision (for dlock_observe's after) */
	char kind[16];		/* free, exclusive, shared or semaphore */
	long long holders;	/* how many holdings */
};

/*
 * Campaign to lead key with value (valuelen bytes, any byte; NULL when
 * valuelen is 0): wait in the key's queue as an exclusive dlock_lock would,
 * then hold the key with value as its leader's. opts as dlock_lock's (ttl_ms,
 * wait_ms, detach; shared or limit are an error, code ARG); out->fence is the
 * term. As dlock_lock, a wait_ms w waits w plus the handle's timeout, and -1
 * waits with no limit. A session that leads key already holds it once more
 * (dlock_resign as many times) and its value is replaced. Returns 1 leader,
 * 0 not within wait_ms, -1 error (a value longer than dlockd's limit: ERR).
 */
DLOCK_EXPORT int dlock_campaign(dlock_t *d, const char *key, const void *value,
    size_t valuelen, const struct dlock_lock_opts *opts, struct dlock_grant *out);
/*
 * As the leader of key, replace its value with value (len bytes; NULL when
 * len is 0). 0 with the key's revision after the change in *revision (unless
 * NULL), or -1: NOTHELD when this session does not hold key, LOST when it
 * lost it.
 */
DLOCK_EXPORT int dlock_proclaim(dlock_t *d, const char *key, const void *value,
    size_t len, long long *revision);
/* Give up a campaign of key: the holds left (0: no longer the leader), or
 * -1 (NOTHELD when this session does not hold key). */
DLOCK_EXPORT int dlock_resign(dlock_t *d, const char *key);
/*
 * The state of key now into *out. 0, or -1; a value longer than
 * sizeof(out->value) fails the call (PROTO), as does a dlockd without
 * elections (ERR).
 */
DLOCK_EXPORT int dlock_leader(dlock_t *d, const char *key, struct dlock_leader *out);
/*
 * Watch key: with after -1, its state now, as dlock_leader (returns 1).
 * Else the first state of key with a revision above after (one dlockd
 * remembers, or the next change), waiting wait_ms at most (-1: until there
 * is one). A follower loops: after = out->revision. Returns 1 with *out
 * filled, 0 when wait_ms ran out first, -1 error. As a LOCK's wait, the
 * daemon's holding the reply back is not cut by the handle's timeout: the
 * call waits wait_ms plus it, and with -1 for ever (on TCP, keepalive
 * notices a daemon host that vanished; see dlock_set_timeout).
 */
DLOCK_EXPORT int dlock_observe(dlock_t *d, const char *key, long long after,
    long long wait_ms, struct dlock_leader *out);

/*
 * The connection's file descriptor, to poll() for pushes while holding a lock
 * (the connection speaks RESP3 and has asked for lost pushes), and a
 * non-blocking check for one: returns 1 and fills key/fence when a "lost"
 * push arrived (key, keylen bytes, gets the key NUL-terminated and truncated
 * to fit; key or fence may be NULL), 0 if none is pending, -1 when the
 * connection failed or closed (its locks are then gone too; stop polling the
 * descriptor, it stays readable). Pushes that arrived during other calls are
 * queued and returned first, oldest first.
 *
 * dlockd also answers the next command after a loss with "LOST key fence
 * reason" in place of its reply (the key with \xHH escapes), so that a
 * client whose library drops pushes cannot miss it. When the loss was
 * pushed first it is queued already: the call sends its command again (it
 * was not run) and answers as if nothing came between. A notice without a
 * push before it is queued here as well, besides failing that call with the
 * code LOST. UNLOCK's and EXTEND's own "LOST the lock on this key was lost
 * ..." is not queued.
 */
DLOCK_EXPORT int dlock_fd(const dlock_t *d);
DLOCK_EXPORT int dlock_poll_lost(dlock_t *d, char *key, size_t keylen, long long *fence);

/*
 * Ask dlockd (on 1, off 0) to push "suspended" when the first renewal of a
 * lock of this connection fails, and "resumed" when one succeeds again
 * (CLIENT SUSPENDPUSH): the lock is in doubt meanwhile, still held until it
 * is lost. 0, or -1 with the error set. dlock_poll_suspend() returns them
 * as dlock_poll_lost() returns losses: 1 with key/fence filled and
 * *suspended 1 (suspended) or 0 (resumed), 0 if none is pending, -1 when
 * the connection failed. A loss is told by dlock_poll_lost() only; no
 * "resumed" follows it.
 */
DLOCK_EXPORT int dlock_suspend_notices(dlock_t *d, int on);
DLOCK_EXPORT int dlock_poll_suspend(dlock_t *d, char *key, size_t keylen, long long *fence,
    int *suspended);

/*
 * The error of d's last call ("" after a call that succeeded): the daemon's
 * reply ("NOTHELD key is not held ...") or a local reason ("connection closed
 * by dlockd", "dlockd did not answer within 10000 ms"). Once the connection
 * itself failed (IO, or a reply that could not be read) every later call
 * fails at once with the same error, and sets errno to the one that stands
 * for it (ETIMEDOUT, ECONNRESET, EPROTO, ...).
 */
DLOCK_EXPORT const char *dlock_error(const dlock_t *d);
/*
 * The code word of the last error or "": the daemon's (ERR, NOTHELD, LOST,
 * LIMIT, BACKEND, NOAUTH, ...) or a local one: ARG (bad argument, nothing
 * sent), IO (connection failed or closed), PROTO (unexpected reply), NOMEM.
 */
DLOCK_EXPORT const char *dlock_error_code(const dlock_t *d);

#ifdef __cplusplus
}
#endif
#endif
