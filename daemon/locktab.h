/*
 * locktab — the lock table: keys, holders, FIFO waiters, reentrancy,
 * sessions, fences and deadlines.
 *
 * It knows nothing of sockets, of event-loop timers, of any backend's wire
 * format, or of how a backend shares keys with other daemons. Each key has
 * a list of holdings and a strict FIFO list of waiters; only waiters at the
 * head that can be granted together are sent to the backend, so only they
 * contend there. Holdings bound to an owner (a session) are renewed every
 * TTL/3 while the owner lives and released when it is destroyed; detached
 * holdings end at their TTL or by token.
 *
 * A lease is what the backend says it is: a holding's lease ends valid_ms
 * (the backend's reply) after the call that set it was made, less the
 * lock-delay. At most one lease operation (renewal or EXTEND) of a holding is
 * in flight; only its reply moves the lease end. A grant is delivered only
 * with more than the safety margin of its lease left; a bound holding whose
 * renewals fail is declared lost when only the margin is left. A holding
 * lost that way keeps its key from everyone until its lease has ended, plus
 * the lock-delay; one released on purpose frees the key at once.
 *
 * Time comes from an injectable clock (milliseconds, never stepping back,
 * counting through suspend). The table does not run timers: it tells through
 * the rearm hook when its earliest deadline changes, and locktab_tick() does
 * what is due.
 *
 * Callbacks (done, lost) must not call back into the table: they record the
 * outcome and return; the caller acts on it later from the event loop. A done
 * callback always comes later, from the event loop, never before the call
 * that returned LT_PENDING has returned. Allocations do not fail (xmalloc).
 */
#ifndef DLOCKD_LOCKTAB_H
#define DLOCKD_LOCKTAB_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

struct locktab;
struct lt_owner;

#define LT_NEVER UINT64_MAX	/* no deadline */

/* Outcomes of the table's operations, immediate or through a callback. */
enum lt_status {
	LT_OK,			/* done: the out values are set */
	LT_PENDING,		/* the done callback will tell */
	LT_NOT_GRANTED,		/* LOCK: not granted within WAIT */
	LT_E_NOTHELD,		/* not held by this owner (or that token) */
	LT_E_LOST,		/* the holding was lost */
	LT_E_MODE,		/* the owner holds the key in another mode (or asks DETACH) */
	LT_E_KIND,		/* semaphore vs lock, or another LIMIT */
	LT_E_WAITERS,		/* max_waiters_per_key reached */
	LT_E_LOCKS,		/* max_locks_per_session reached */
	LT_E_KEYS,		/* max_keys reached */
	LT_E_BACKEND,		/* the backend failed */
	LT_E_CLOSING		/* the table is shutting down */
};

/* A LOCK request. */
struct lt_lock_req {
	const char *key;	/* binary-safe; copied */
	size_t keylen;
	enum lock_mode mode;
	unsigned limit;		/* permits for LOCK_SEMAPHORE */
	uint64_t ttl_ms;	/* lease */
	int64_t wait_ms;	/* -1 wait forever, 0 try once */
	int detach;		/* 1: not bound to the owner */
	const char *value;	/* CAMPAIGN: the leader's value (binary-safe,
				 * copied), NULL for a plain LOCK */
	size_t valuelen;	/* its length */
};

/* A granted LOCK. */
struct lt_grant {
	char token[TOKEN_LEN + 1];	/* the holding's token */
	uint64_t fence;			/* its fence */
	uint64_t ttl_ms;		/* the validity left on its lease now (the
					 * whole TTL for a session lease that lives
					 * in this process) */
	unsigned count;			/* hold count (reentrancy) */
	enum lock_mode mode;		/* held mode (also set with LT_E_MODE) */
};

/* STATUS of a key. */
struct lt_key_status {
	const char *mode;	/* "free", "exclusive", "shared" or "semaphore" */
	unsigned holders;	/* holdings */
	unsigned waiters;	/* queued LOCKs */
	uint64_t fence;		/* last fence known for the key, 0 if none */
	int64_t ttl_ms;		/* exclusive holder's remaining lease, -1 if none */
	unsigned limit;		/* semaphore permits, 0 otherwise */
};

/*
 * X(field, name, type, info, help) for every number of struct lt_stats, in
 * the order /metrics shows them: its field; its name in INFO's # Locks and,
 * after "dlockd_", in /metrics; gauge (a number now) or counter (since the
 * start); its place among INFO's # Locks lines, from 0 (the order of
 * docs/protocol.md's table, which is not this one); its HELP in /metrics.
 */
#define LT_STATS(X) \
	X(holds, locks_held, gauge, 1, "holdings of locks now") \
	X(waiters, waiters, gauge, 2, "LOCKs waiting in a queue now") \
	X(keys, keys, gauge, 0, "keys with holders or waiters now") \
	X(grants, grants_total, counter, 3, "LOCKs granted (reentrant ones not counted)") \
	X(reentrant, reentrant_total, counter, 4, "reentrant LOCKs of a key already held") \
	X(timeouts, timeouts_total, counter, 5, "LOCKs not granted within their WAIT") \
	X(releases, releases_total, counter, 6, "holdings released") \
	X(expired, expired_total, counter, 7, "detached holdings that reached their TTL") \
	X(lost, lost_total, counter, 8, "holdings lost (their lease could not be kept)") \
	X(late_grants, late_grants_total, counter, 11, \
	    "grants not delivered: too little of the lease left") \
	X(handoffs, handoffs_total, counter, 9, "releases handed straight to the next waiter") \
	X(backend_errors, backend_errors_total, counter, 10, "backend operations that failed") \
	X(backend_waits, backend_waits_total, counter, 12, \
	    "LOCKs that waited on through a backend error, their WAIT not over") \
	X(suspended, sessions_suspended, gauge, 13, \
	    "sessions with a holding whose renewals fail now")

/* The lock table's numbers for INFO and /metrics (LT_STATS). */
struct lt_stats {
#define LT_STATS_FIELD(field, name, type, info, help) uint64_t field;
	LT_STATS(LT_STATS_FIELD)
#undef LT_STATS_FIELD
};

/* A finished operation: st is LT_OK (g for LOCK, value for UNLOCK/EXTEND),
 * LT_NOT_GRANTED or an error. g is valid during the call only. */
typedef void lt_done_cb(void *arg, enum lt_status st, const struct lt_grant *g,
    long long value);
/* A holding of the owner was lost; strings valid during the call only. */
typedef void lt_lost_cb(void *arg, const char *key, size_t keylen, uint64_t fence,
    const char *reason);
/* The renewals of a holding of the owner fail (suspended 1: the first
 * failed, with reason), or succeed again (0, reason NULL). The holding is
 * still the owner's, as long as it is not lost; strings valid during the
 * call only. */
typedef void lt_suspend_cb(void *arg, const char *key, size_t keylen, uint64_t fence,
    int suspended, const char *reason);
/* The earliest deadline is now when (LT_NEVER: none). */
typedef void lt_rearm_cb(void *arg, uint64_t when);
/* The clock: milliseconds, monotonic. */
typedef uint64_t lt_clock_fn(void *arg);

/* Limits and lease rules the table enforces. */
struct lt_limits {
	uint64_t max_waiters_per_key;	/* queued LOCKs per key */
	uint64_t max_locks_per_owner;	/* holdings (detached ones it took
					 * included) and waits per owner */
	uint64_t margin_percent;	/* safety margin, percent of the TTL */
	uint64_t lock_delay_ms;		/* after a loss, the key stays taken this
					 * long past the lease's end */
	uint64_t max_keys;		/* keys with holders or waiters; 0: no limit */
};

/*
 * A new table on backend be (not owned; the table sets be->up). clock NULL
 * uses clock_ms() (CLOCK_BOOTTIME). Never NULL; the caller owns it.
 */
struct locktab *locktab_create(struct backend *be, const struct lt_limits *limits,
    lt_clock_fn *clock, void *clock_arg, lt_rearm_cb *rearm, void *rearm_arg);
/* Free the table. Every owner must have been destroyed and no backend
 * operation may be in flight (locktab_idle()). */
void locktab_destroy(struct locktab *lt);

/* Enforce limits from now on (a reload): a wait or holding already there
 * stays, a new one is checked against them. */
void locktab_set_limits(struct locktab *lt, const struct lt_limits *limits);

/* 1 when no backend operation of the table is in flight. */
int locktab_idle(const struct locktab *lt);
/* The table's clock now. */
uint64_t locktab_now(const struct locktab *lt);

/* A new owner (session) with an id for logs and a lost callback (may be
 * NULL). Never NULL; locktab_owner_destroy frees it. */
struct lt_owner *locktab_owner_create(struct locktab *lt, uint64_t id, lt_lost_cb *lost,
    void *arg);
/* Destroy an owner: its waits are cancelled, its bound holdings released,
 * and none of its callbacks is called again. Detached holdings stay. */
void locktab_owner_destroy(struct lt_owner *o);
/* Tell o's suspend callback (NULL: none) of its holdings whose renewals
 * start failing and succeed again; its argument is the lost callback's. */
void locktab_owner_on_suspend(struct lt_owner *o, lt_suspend_cb *suspend);

/*
 * LOCK. Returns LT_OK with *g set (reentrant), LT_NOT_GRANTED (WAIT 0 and the
 * key is taken), an error (LT_E_MODE sets g->mode to the mode held), or LT_PENDING: done(arg, ...) will be called once
 * with LT_OK and the grant, LT_NOT_GRANTED or an error.
 */
enum lt_status locktab_lock(struct lt_owner *o, const struct lt_lock_req *req,
    struct lt_grant *g, lt_done_cb *done, void *arg);
/*
 * UNLOCK key: the owner's holding, or the holding with token (any owner) if
 * token is not NULL. LT_OK with *remaining > 0 (hold count went down), an
 * error, or LT_PENDING until the backend confirms the release (value 0).
 */
enum lt_status locktab_unlock(struct lt_owner *o, const char *key, size_t keylen,
    const char *token, long long *remaining, lt_done_cb *done, void *arg);
/* EXTEND: make the lease last ttl_ms from now (after any lease operation of
 * the holding in flight). LT_PENDING (value: the validity left, as for a
 * grant) or an error. */
enum lt_status locktab_extend(struct lt_owner *o, const char *key, size_t keylen,
    uint64_t ttl_ms, const char *token, lt_done_cb *done, void *arg);

void locktab_status(struct locktab *lt, const char *key, size_t keylen,
    struct lt_key_status *out);
/* The owner's hold count of key (not counting DETACH locks it took), or -1
 * when its holding was lost and UNLOCK would say so, or 0. */
int locktab_held(const struct lt_owner *o, const char *key, size_t keylen);
/* 1 if fence is a current holding of key, else 0. */
int locktab_validate(struct locktab *lt, const char *key, size_t keylen, uint64_t fence);

/* Who leads a key, as LEADER and OBSERVE tell it. */
struct lt_leader {
	const char *value;	/* the exclusive holder's CAMPAIGN value, NULL
				 * when there is none (a plain LOCK, or free);
				 * valid until the table next changes */
	size_t valuelen;	/* its length */
	uint64_t term;		/* the exclusive holder's fence, the highest
				 * fence held of a shared key, 0 when free */
	const char *kind;	/* "free", "exclusive", "shared" or "semaphore" */
	unsigned holders;	/* holdings */
};
/* Who leads key now (a key not in use: free, term 0). */
void locktab_leader(struct locktab *lt, const char *key, size_t keylen,
    struct lt_leader *out);
/* The same, from inside the change hook: it does nothing that is due first
 * (locktab_leader may), so it changes nothing. */
void locktab_leader_now(const struct locktab *lt, const char *key, size_t keylen,
    struct lt_leader *out);
/*
 * PROCLAIM: the owner's exclusive holding of key takes value (copied) as
 * its CAMPAIGN value. LT_OK, LT_E_NOTHELD (not held by o), LT_E_LOST,
 * LT_E_MODE (held shared or as a semaphore: it has no leader), or, on a
 * backend that keeps values for other daemons (ops->proclaim),
 * LT_PENDING: done(arg, ...) tells LT_OK once the backend has it (then the
 * holding's value changes), LT_E_LOST or LT_E_BACKEND.
 */
enum lt_status locktab_proclaim(struct lt_owner *o, const char *key, size_t keylen,
    const char *value, size_t valuelen, lt_done_cb *done, void *arg);
/* Told that key's holdings here, or a local leader's value, changed: a
 * grant, a release, a loss, a PROCLAIM. It must not call into the table
 * but for locktab_leader_now(). */
typedef void lt_change_cb(void *arg, const char *key, size_t keylen);
/* Told of a change of a watched key the backend saw, through any daemon
 * (backend_up.changed): l its state, or NULL when the backend does not know
 * it. The same rules. */
typedef void lt_remote_cb(void *arg, const char *key, size_t keylen,
    const struct be_leader *l);
/* Tell cb and remote of the changes from now on; NULL: none. */
void locktab_set_change(struct locktab *lt, lt_change_cb *cb, lt_remote_cb *remote,
    void *arg);

/* One holding of a key, for STATUS FULL and UNLOCK FORCE. */
struct lt_holder_info {
	uint64_t owner_id;	/* its owner's id, or the id of the owner that
				 * took it when detached; 0 if that one is gone */
	enum lock_mode mode;	/* held mode */
	uint64_t fence;		/* fence of the grant */
	unsigned count;		/* hold count */
	uint64_t held_ms;	/* since it was granted */
	int64_t lease_ms;	/* validity left of its lease, as for a grant */
	int detached;		/* 1: not bound to a session */
	int suspended;		/* 1: its renewals fail now */
};
/* One waiter of a key, for STATUS FULL. */
struct lt_waiter_info {
	uint64_t owner_id;	/* its owner's id */
	enum lock_mode mode;	/* wanted mode */
	uint64_t waited_ms;	/* since it was queued */
	int64_t wait_ms;	/* left of its WAIT, -1 for ever */
	int detach;		/* 1: asks DETACH */
};
typedef void lt_holder_fn(void *arg, const struct lt_holder_info *h);
typedef void lt_waiter_fn(void *arg, const struct lt_waiter_info *w);

/* Call holder (if not NULL) for each holding of key, oldest grant first,
 * then waiter (if not NULL) for each waiter, in queue order. The callbacks
 * must not call into the table. */
void locktab_key_walk(struct locktab *lt, const char *key, size_t keylen,
    lt_holder_fn *holder, lt_waiter_fn *waiter, void *arg);
/*
 * UNLOCK key FORCE: break every holding of key, bound or detached. fn (if not
 * NULL) is shown each one first. Each lease is released (or handed to the
 * next waiter) as by UNLOCK; a bound holding is lost for its owner, whose
 * lost callback gets reason, and its UNLOCK, EXTEND and VALIDATE see the
 * loss. Returns how many holdings were broken.
 */
unsigned locktab_force(struct locktab *lt, const char *key, size_t keylen,
    const char *reason, lt_holder_fn *fn, void *arg);

/* One holding of an owner, for LOCKS. */
struct lt_hold_info {
	const char *key;	/* valid during the callback */
	size_t keylen;
	const char *token;
	uint64_t fence;
	enum lock_mode mode;
	unsigned count;		/* hold count */
};
/* Call fn for each live holding of o, oldest first; returns how many. */
size_t locktab_owner_holds(const struct lt_owner *o,
    void (*fn)(void *arg, const struct lt_hold_info *h), void *arg);

/* The key the owner's LOCK waits on (*keylen set), or NULL; valid until the
 * table is next called. */
const char *locktab_owner_waiting(const struct lt_owner *o, size_t *keylen);

/*
 * Withdraw the owner's waiting LOCK (at most one waits per session): its done
 * callback is not called. A waiter the backend is deciding on is given back
 * when the answer comes. Returns how many were withdrawn.
 */
unsigned locktab_owner_cancel(struct lt_owner *o);
/* The owner was told of the loss of its holding of key with fence by other
 * means: forget the loss, so that UNLOCK answers NOTHELD. 1 if it was known. */
int locktab_forget_lost(struct lt_owner *o, const char *key, size_t keylen, uint64_t fence);

/* Do everything due now: WAIT timeouts, renewals, detached expiry, loss, the
 * end of a lock-delay. */
void locktab_tick(struct locktab *lt);
/* The earliest deadline, LT_NEVER if none. */
uint64_t locktab_next_deadline(const struct locktab *lt);

/* Stop: every waiter gets LT_E_CLOSING, detached holdings are released too,
 * and no new LOCK is accepted. Owners must still be destroyed. */
void locktab_shutdown(struct locktab *lt);

void locktab_stats(const struct locktab *lt, struct lt_stats *out);
/* Free the idle keys beyond those kept for their fence (a crowd of keys
 * released at once leaves them all idle). From the loop only, never from
 * inside a call into the table. */
void locktab_trim(struct locktab *lt);

/* What the table measures, for metrics. */
enum lt_measure {
	LT_M_WAIT,		/* a LOCK granted: from queued to granted */
	LT_M_ACQUIRE,		/* a backend operation: from the call to its reply */
	LT_M_RELEASE,
	LT_M_RENEW,		/* renewals and EXTENDs */
	LT_M_TRANSFER,
	LT_M_COUNT		/* how many kinds */
};
/* Told that what took ms milliseconds (the table's clock). It must not call
 * back into the table. */
typedef void lt_measure_cb(void *arg, enum lt_measure what, uint64_t ms);
/* Tell cb of every duration measured from now on; cb NULL: none. */
void locktab_set_measure(struct locktab *lt, lt_measure_cb *cb, void *arg);
/* A key's name (HELD). */
typedef void lt_key_fn(void *arg, const char *key, size_t keylen);
/* HELD on a table that knows every holder: the keys held now, from cursor
 * (0: the start), about count of the table's slots at a time, each told to
 * fn; the cursor to go on from, 0 when every key was seen. A key held from
 * the first call to the last is told at least once (hashtab_scan). */
uint64_t locktab_scan(struct locktab *lt, uint64_t cursor, size_t count, lt_key_fn *fn,
    void *arg);
/* Describe the holder of a lease that owner asks for (who.h) into buf
 * (len bytes); its length. It must not call back into the table. */
typedef size_t lt_describe_fn(void *arg, uint64_t owner_id, uint64_t ttl_ms, int detached,
    char *buf, size_t len);
/* Keep fn's description with every lease asked of the backend from now on
 * (be_lock.who); fn NULL: none. */
void locktab_set_describe(struct locktab *lt, lt_describe_fn *fn, void *arg);
const char *locktab_mode_name(enum lock_mode mode);

#endif
