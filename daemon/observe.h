/*
 * observe — who leads each key, and the changes of it, as LEADER and
 * OBSERVE tell them.
 *
 * The lock table tells of every change of a key's holdings or leader's
 * value (locktab_set_change); this module numbers the changes with a
 * revision that only grows (one counter for the daemon's life) and, for the
 * keys someone asked about, remembers the last OBS_HISTORY states, so that
 * an observer that asks "after revision r" is given the first state it has
 * not seen, and sees every change of leader though it asks again only after
 * each answer. A client (a session) may wait for one change at a time (an
 * OBSERVE with AFTER) and follow any number of keys (a push per change).
 *
 * On a backend whose leases live in this process (memory) the lock table
 * knows every holder, and tells every change. On one shared by daemons that
 * tells leaders (backend_ops.leader), a key's record watches it in the
 * backend (ops->watch): its first state is read (ops->leader), the next
 * ones are those the backend tells (backend_up.changed), this daemon's own
 * changes included, and it is read again when the backend may have missed
 * some. Until the first read has answered, a key has no state: LEADER
 * waits for it.
 *
 * It knows nothing of sessions or the protocol: it calls its clients back.
 * Answers come from the event loop or from inside the lock table's change
 * hook; a callback must not call into the lock table.
 */
#ifndef DLOCKD_OBSERVE_H
#define DLOCKD_OBSERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OBS_HISTORY 8		/* states a key remembers */
#define OBS_IDLE_MAX 4096	/* keys remembered that nobody waits on or follows */

struct backend;
struct event_base;
struct locktab;
struct obs;
struct obs_client;

/* One state of a key. Strings are valid during the call they are given in. */
struct obs_state {
	const char *value;	/* the leader's value, NULL when none */
	size_t valuelen;	/* its length */
	uint64_t term;		/* see struct lt_leader */
	uint64_t revision;	/* the change that made this state */
	const char *kind;	/* "free", "exclusive", "shared", "semaphore" */
	unsigned holders;	/* holdings */
};

/* What a client is told. */
enum obs_event {
	OBS_CHANGED,		/* its wait: the state after its revision */
	OBS_TIMEOUT,		/* its wait: WAIT ran out (st NULL) */
	OBS_ERROR,		/* its obs_client_now: the backend could not be
				 * read (st NULL) */
	OBS_PUSH		/* a followed key changed */
};
typedef void obs_cb(void *arg, enum obs_event ev, const char *key, size_t keylen,
    const struct obs_state *st);

/* A registry over lt (whose change hooks it takes) and its backend be, on
 * base. The caller owns it and destroys it before lt, after every client. */
struct obs *obs_create(struct event_base *base, struct locktab *lt, struct backend *be);
void obs_destroy(struct obs *o);

/* The state of key now: 1 with *out set, or 0 while the backend is being
 * read (see obs_client_now). */
int obs_now(struct obs *o, const char *key, size_t keylen, struct obs_state *out);
/* The first state of key remembered after revision after: 1 with *out set,
 * or 0 when there is none yet. A revision older than what is remembered
 * gets the oldest state remembered. */
int obs_after(struct obs *o, const char *key, size_t keylen, uint64_t after,
    struct obs_state *out);

/* A client telling cb(arg, ...). Never NULL; the caller owns it. */
struct obs_client *obs_client_create(struct obs *o, obs_cb *cb, void *arg);
/* Its wait is cancelled and its follows end; cb is not called again. */
void obs_client_destroy(struct obs_client *c);
/* LEADER: the state of key now: 1 with *out set; or 0: the backend is read
 * first, and c is told OBS_CHANGED with the state, or OBS_ERROR (as a wait
 * of c, which it replaces). */
int obs_client_now(struct obs_client *c, const char *key, size_t keylen,
    struct obs_state *out);
/* Wait for a state of key after revision after (obs_after found none):
 * OBS_CHANGED when it comes, OBS_TIMEOUT after wait_ms (-1: never). One
 * wait per client: a second replaces the first, which is not told. */
void obs_client_wait(struct obs_client *c, const char *key, size_t keylen, uint64_t after,
    int64_t wait_ms);
/* Withdraw the client's wait, untold: 1 if it waited, else 0. */
int obs_client_cancel(struct obs_client *c);
/* Follow key: OBS_PUSH with each new state. 0, or -1 if it already did. */
int obs_client_follow(struct obs_client *c, const char *key, size_t keylen);
/* Stop following key: 1 if it did, else 0. */
int obs_client_unfollow(struct obs_client *c, const char *key, size_t keylen);

/*
 * X(field, name, type, help) for every number of struct obs_stats, in the
 * order INFO's # Observe and /metrics show them: its field; its name in
 * INFO and, after "dlockd_", in /metrics; gauge or counter; its HELP there.
 */
#define OBS_STATS(X) \
	X(keys, observe_keys, gauge, "keys whose changes are remembered for OBSERVE") \
	X(waiting, observe_waiting, gauge, "OBSERVEs waiting for a change now") \
	X(follows, observe_follows, gauge, \
	    "keys followed with OBSERVE FOLLOW now, summed over sessions") \
	X(revision, observe_revision, gauge, "the last revision: changes of keys numbered") \
	X(changes, observe_changes_total, counter, "changes remembered since the start")

/* The numbers for INFO and /metrics (OBS_STATS). */
struct obs_stats {
#define OBS_STATS_FIELD(field, name, type, help) uint64_t field;
	OBS_STATS(OBS_STATS_FIELD)
#undef OBS_STATS_FIELD
};
void obs_stats(const struct obs *o, struct obs_stats *out);

#endif
