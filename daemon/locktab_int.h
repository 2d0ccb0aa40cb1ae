/*
 * locktab_int.h — the lock table's records, shared by its files and no
 * others: locktab.c changes them (locking, leases, the backend's answers),
 * locktab_view.c answers questions about them (STATUS, LEADER, LOCKS,
 * VALIDATE) without changing anything. See locktab.c for their states.
 */
#ifndef DLOCKD_LOCKTAB_INT_H
#define DLOCKD_LOCKTAB_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "hashtab.h"
#include "heap.h"
#include "locktab.h"
#include "log.h"
#include "pool.h"

enum timer_kind { TIMER_WAITER, TIMER_HOLD, TIMER_LOG };

/* A deadline on the table's heap. */
struct lt_timer {
	struct heap_node node;	/* due time and heap position (first member) */
	enum timer_kind kind;	/* what it is embedded in */
};

enum waiter_state { W_QUEUED, W_ACQUIRING };
enum hold_state { H_ACTIVE, H_LOST, H_GONE };
enum op_kind { OP_ACQUIRE, OP_RELEASE, OP_RENEW, OP_EXTEND, OP_TRANSFER, OP_PROCLAIM };

/* What a lease is of, as a waiter asks for it and its holding keeps it. */
struct lt_terms {
	enum lock_mode mode;		/* wanted or held mode */
	unsigned limit;			/* permits, for a semaphore */
	bool detached;			/* DETACH: not bound to a session */
	char token[TOKEN_LEN + 1];	/* identifies the lease */
};

struct lt_key;
struct lt_op;
TAILQ_HEAD(op_list, lt_op);

/* A queued LOCK. */
struct lt_waiter {
	struct lt_timer timer;		/* WAIT deadline (first member) */
	struct lt_key *key;		/* its key (a reference) */
	struct lt_owner *owner;		/* who asked; NULL once cancelled */
	struct lt_terms terms;		/* the lease it asks for */
	uint64_t ttl_ms;		/* the holder's TTL */
	uint64_t deadline;		/* end of WAIT, LT_NEVER for none */
	uint64_t queued_at;		/* when the LOCK was queued */
	bool detach;			/* not bound to the owner once granted */
	bool try_once;			/* WAIT 0 */
	bool retrying;			/* its timer is a retry after a backend
					 * error, not the end of its WAIT */
	enum waiter_state state;	/* QUEUED or ACQUIRING */
	lt_done_cb *done;		/* the LOCK's completion */
	void *arg;			/* its argument */
	char *value;			/* CAMPAIGN: the value (owned), else NULL */
	size_t valuelen;		/* its length */
	TAILQ_ENTRY(lt_waiter) kentry;	/* on key->waiters */
	TAILQ_ENTRY(lt_waiter) oentry;	/* on owner->waiters */
};
TAILQ_HEAD(waiter_list, lt_waiter);

/* A granted LOCK. */
struct lt_hold {
	struct lt_timer timer;		/* renewal, loss, expiry or the end of the
					 * tombstone (first member) */
	struct lt_key *key;		/* its key (a reference) */
	struct lt_owner *owner;		/* bound owner; NULL when detached or GONE */
	struct lt_owner *creator;	/* detached and ACTIVE: the owner that took it,
					 * while that one lives */
	struct lt_terms terms;		/* the lease held */
	uint64_t fence;			/* fence of the grant */
	uint64_t ttl_ms;		/* the holder's TTL */
	unsigned count;			/* hold count (reentrancy) */
	uint64_t owner_id;		/* id of the owner that took it, for logs */
	uint64_t granted_at;		/* when it was granted */
	uint64_t expires;		/* end of the holder's lease */
	uint64_t span;			/* the longest validity a lease reply promised */
	uint64_t renew_at;		/* next renewal (bound holdings) */
	uint64_t tomb_until;		/* a tombstone: the key is held until then */
	struct lt_op *lease_op;		/* the renewal or EXTEND in flight, or NULL */
	struct op_list lease_queue;	/* EXTENDs waiting for it, in order */
	enum hold_state state;		/* ACTIVE, LOST or GONE */
	bool tomb;			/* on key->tombs */
	bool suspended;			/* its renewals fail (the owner was told
					 * "suspended"), until one succeeds */
	unsigned ops;			/* backend operations referring to it */
	char *value;			/* CAMPAIGN: the leader's value (owned),
					 * else NULL */
	size_t valuelen;		/* its length */
	TAILQ_ENTRY(lt_hold) kentry;	/* on key->holders or key->tombs */
	TAILQ_ENTRY(lt_hold) oentry;	/* on owner->holds or creator->detached */
};
TAILQ_HEAD(hold_list, lt_hold);

/* A key in use, or idle and remembered for its fence. */
struct lt_key {
	struct hashtab_node hnode;	/* in lt->keys, keyed by name */
	struct hold_list holders;	/* ACTIVE holdings */
	struct hold_list tombs;		/* lost holdings whose lease may still run */
	struct waiter_list waiters;	/* FIFO */
	unsigned nholders;		/* on holders */
	unsigned ntombs;		/* on tombs */
	unsigned nwaiters;		/* on waiters */
	unsigned nacquiring;		/* waiters ACQUIRING */
	unsigned nexcl;			/* exclusive holders and acquirers */
	unsigned ntomb_excl;		/* exclusive tombstones */
	unsigned refs;			/* waiters and holdings referring to it */
	uint64_t last_fence;		/* last fence granted */
	unsigned handoffs;		/* handoffs in a row since the last acquire
					 * or release, told to the backend */
	bool blocked;			/* backend said BUSY: wait for a wakeup; or
					 * it failed: wait for a wakeup or a retry */
	bool backend_failing;		/* the backend's last answer about the key was
					 * an error: the head retries, and a WAIT
					 * that runs out is answered -BACKEND */
	unsigned backend_retries;	/* retries since, for their backoff */
	bool idle;			/* on lt->idle */
	TAILQ_ENTRY(lt_key) ientry;	/* on lt->idle */
	size_t len;			/* the name's length */
	char name[];			/* the key, NUL-terminated (binary-safe) */
};
TAILQ_HEAD(key_list, lt_key);

/* A backend operation in flight, or an EXTEND waiting for its holding's
 * lease operation in flight. */
struct lt_op {
	struct locktab *lt;		/* the table */
	enum op_kind kind;		/* what was asked */
	struct lt_waiter *w;		/* ACQUIRE, TRANSFER: the waiter */
	struct lt_hold *h;		/* RENEW, EXTEND, TRANSFER: the holding */
	struct lt_owner *owner;		/* whose command waits on it, or NULL */
	lt_done_cb *done;		/* that command's completion */
	void *arg;			/* its argument */
	uint64_t sent_at;		/* when the backend was called */
	uint64_t ttl_ms;		/* RENEW, EXTEND: the holder's TTL asked for */
	char *value;			/* PROCLAIM: the value (owned) */
	size_t valuelen;		/* its length */
	TAILQ_ENTRY(lt_op) oentry;	/* on owner->ops */
	TAILQ_ENTRY(lt_op) qentry;	/* on h->lease_queue */
};

/* A session. */
struct lt_owner {
	struct locktab *lt;		/* the table */
	uint64_t id;			/* for logs */
	lt_lost_cb *lost;		/* told of lost holdings */
	lt_suspend_cb *suspend;		/* told of suspended and resumed ones */
	void *arg;			/* its argument */
	unsigned nsuspended;		/* its holdings suspended */
	struct hold_list holds;		/* bound holdings, ACTIVE and LOST */
	struct hold_list detached;	/* ACTIVE detached holdings it took */
	struct waiter_list waiters;	/* its waiting LOCKs */
	struct op_list ops;		/* operations its commands wait on */
	unsigned nholds;		/* ACTIVE ones on holds */
	unsigned ndetached;		/* on detached */
	unsigned nwaiters;		/* on waiters */
};

struct locktab {
	struct backend *be;		/* where leases are agreed */
	struct lt_limits limits;	/* what is enforced */
	lt_clock_fn *clock;		/* time source */
	void *clock_arg;		/* its argument */
	lt_rearm_cb *rearm;		/* told when the earliest deadline moves */
	void *rearm_arg;		/* its argument */
	uint64_t armed;			/* the deadline last told */
	struct hashtab *keys;		/* every struct lt_key, idle ones too */
	struct key_list idle;		/* keys nobody refers to, oldest first */
	size_t nidle;			/* on idle */
	struct heap deadlines;		/* every lt_timer set, earliest first */
	uint64_t inflight;		/* backend operations in flight */
	bool closing;			/* locktab_shutdown was called */
	bool renew_failing;		/* the last renewal failed (logged once) */
	struct lt_timer log_timer;	/* end of the window in which losses are
					 * summed up, not logged one by one */
	uint64_t unlogged_losses;	/* losses in that window */
	char loss_key[LOG_KEY_BUF];	/* the first of them, escaped */
	char loss_reason[128];		/* and why */
	struct lt_stats stats;		/* counters */
	lt_measure_cb *measure;		/* told of durations, or NULL */
	lt_describe_fn *describe;	/* describes holders, or NULL */
	void *describe_arg;		/* its argument */
	lt_change_cb *change;		/* told of changes of keys, or NULL */
	lt_remote_cb *remote;		/* told of the backend's, or NULL */
	void *change_arg;		/* its argument */
	void *measure_arg;		/* its argument */
	struct pool waiter_pool;	/* spare struct lt_waiter records */
	struct pool hold_pool;		/* spare struct lt_hold records */
	struct pool op_pool;		/* spare struct lt_op records */
};

/* The key named name (len bytes), or NULL: it is not in the table. */
struct lt_key *lt_key_find(const struct locktab *lt, const char *name, size_t len);
/* Is the key used as a semaphore, and with how many permits? From its
 * holdings, else its waiters. Returns false when it is not in use. */
bool lt_key_kind(const struct lt_key *k, bool *sem, unsigned *limit);
/* Whether an ACTIVE holding's lease can be relied on at now. */
bool lt_hold_valid(const struct locktab *lt, const struct lt_hold *h, uint64_t now);
/* The validity a holder is told of: what is left of its lease, or the whole
 * TTL of a session lease that lives in this process. */
uint64_t lt_hold_left(const struct locktab *lt, const struct lt_hold *h, uint64_t now);
/* What STATUS FULL shows of an ACTIVE holding at now. */
void lt_hold_describe(const struct locktab *lt, const struct lt_hold *h, uint64_t now,
    struct lt_holder_info *out);
/* Tell the change hook that k changed. */
void lt_changed(struct locktab *lt, const struct lt_key *k);
/* Do what is due if the event loop has not got round to it yet, so that no
 * answer relies on a lease whose deadline has passed. */
void lt_catch_up(struct locktab *lt);

#endif
