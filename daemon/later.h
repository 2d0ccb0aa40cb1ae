/*
 * later — complete from the event loop, later.
 *
 * A backend must never complete an operation from inside the call that
 * asked for it: its caller may not be ready for the callback yet (tmux's
 * event_once, hiredis's REDIS_IN_CALLBACK). A later queue is that deferral,
 * once: the owner embeds a struct later_item in whatever is to be run (an
 * operation, a failed call), adds it, and its function runs from the loop
 * after the current callback has returned, items in the order they were
 * added. One event per queue, made active while items wait; adding one
 * allocates nothing. An item starts zeroed (queued false), as calloc or a
 * compound literal leaves it; later_add and the queue keep its fields.
 *
 * A pass runs the items queued when it started; an item added by a
 * function running in a pass runs in the next pass. That pass follows in the
 * same turn of the loop (after the other events already active), as a
 * chained completion always has; but after 64 such passes in a row the next
 * waits for the loop's next turn (after it has polled), so an item that keeps
 * adding itself runs once a pass and never keeps the loop from its sockets
 * and timers. later_run is the exception: it drains the queue, items added
 * meanwhile included (a destroy path).
 *
 * The queue owns neither its items nor their memory: a function may free
 * its own item, add others, cancel others, run or even destroy the queue.
 */
#ifndef DLOCKD_LATER_H
#define DLOCKD_LATER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/queue.h>

struct event_base;
struct later;			/* a queue of things to run from the loop */

/* One deferred call, embedded in the caller's own struct (container via offsetof). */
struct later_item {
	void (*fn)(struct later_item *it);	/* what to run; set by later_add */
	bool queued;				/* on a queue now */
	TAILQ_ENTRY(later_item) entry;		/* on the queue */
};

/* A queue on base's loop; the caller owns it (later_destroy). */
struct later *later_create(struct event_base *base);
/* Free q; items still queued are not run (the owner frees them). */
void later_destroy(struct later *q);
/* Run fn(it) from the loop, after the current callback has returned, in the
 * order items were added. it must stay valid until fn runs or it is cancelled.
 * Adding an item already queued is a bug (assert). */
void later_add(struct later *q, struct later_item *it, void (*fn)(struct later_item *it));
/* Take it off q if queued (it will not run). */
void later_cancel(struct later *q, struct later_item *it);
/* Run every queued item now, including those added while running (a destroy path). */
void later_run(struct later *q);
/* Items queued. */
size_t later_count(const struct later *q);

#endif
