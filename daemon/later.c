/*
 * later — complete from the event loop, later (see later.h).
 *
 * It owns the queue's event and list head; it must not free, copy or look
 * inside anything but the later_item its owner embeds.
 *
 * A pass puts a mark of its own at the tail of the list and runs items from
 * the head until it takes the mark: what is added meanwhile lands after the
 * mark and waits for the next pass. Cancelling stays O(1) whatever the
 * item's place, as every queued item is on the one list.
 */
#include "later.h"

#include <assert.h>
#include <stdlib.h>

#include <event2/event.h>

#include "log.h"
#include "xmalloc.h"

#define LATER_CHAIN_MAX 64	/* passes in a row in one turn of the loop, at most */

TAILQ_HEAD(later_list, later_item);

struct later {
	struct event *ev;		/* runs a pass; active while items wait */
	struct later_list items;	/* queued, oldest first (and a pass's mark) */
	size_t n;			/* items queued, the mark not counted */
	struct later_item mark;		/* on items during a pass: where the pass ends */
	bool in_pass;			/* later_pass is running */
	unsigned chain;			/* passes in a row that left items behind */
	bool *gone;			/* while items run: set when q is destroyed */
};

/* Take it, queued, off q. */
static void
later_take(struct later *q, struct later_item *it)
{
	TAILQ_REMOVE(&q->items, it, entry);
	it->queued = false;
	if (it != &q->mark)
		q->n--;
}

/* Run it (taken off q already), telling whether q outlived it: false when
 * q was destroyed meanwhile (the caller returns at once). */
static bool
later_call(struct later *q, struct later_item *it)
{
	bool gone = false, *outer = q->gone;

	q->gone = &gone;
	it->fn(it);
	if (gone) {
		if (outer != NULL)
			*outer = true;
		return false;
	}
	q->gone = outer;
	return true;
}

/* The event: run the items queued before this pass, oldest first; those
 * added meanwhile wait for the next pass: at once (as the event made active
 * again runs in this turn of the loop), or after the loop has polled once a
 * chain of passes is LATER_CHAIN_MAX long. */
static void
later_pass(evutil_socket_t fd, short what, void *arg)
{
	struct later *q = arg;
	struct later_item *it;
	(void)fd;
	(void)what;

	q->in_pass = true;
	q->mark.queued = true;
	TAILQ_INSERT_TAIL(&q->items, &q->mark, entry);
	/* later_run from an item takes the mark with the rest */
	while (q->mark.queued && (it = TAILQ_FIRST(&q->items)) != &q->mark) {
		later_take(q, it);
		if (!later_call(q, it))
			return;
	}
	if (q->mark.queued)
		later_take(q, &q->mark);
	q->in_pass = false;
	if (q->n == 0) {
		q->chain = 0;
	} else if (++q->chain < LATER_CHAIN_MAX) {
		event_active(q->ev, EV_TIMEOUT, 0);
	} else {
		static const struct timeval now = { 0, 0 };

		q->chain = 0;
		event_add(q->ev, &now);	/* due at once: run in the next turn */
	}
}

struct later *
later_create(struct event_base *base)
{
	struct later *q = xcalloc(1, sizeof(*q));

	TAILQ_INIT(&q->items);
	if ((q->ev = event_new(base, -1, 0, later_pass, q)) == NULL)
		log_fatal("out of memory (a queue of deferred calls)");
	return q;
}

void
later_destroy(struct later *q)
{
	if (q == NULL)
		return;
	if (q->gone != NULL)
		*q->gone = true;	/* destroyed by an item: its pass stops */
	event_free(q->ev);
	free(q);
}

void
later_add(struct later *q, struct later_item *it, void (*fn)(struct later_item *it))
{
	assert(!it->queued);
	it->fn = fn;
	it->queued = true;
	TAILQ_INSERT_TAIL(&q->items, it, entry);
	/* outside a pass the event is active whenever items wait; a pass
	 * makes it active again at its end */
	if (q->n++ == 0 && !q->in_pass)
		event_active(q->ev, EV_TIMEOUT, 0);
}

void
later_cancel(struct later *q, struct later_item *it)
{
	if (it->queued)
		later_take(q, it);
}

void
later_run(struct later *q)
{
	struct later_item *it;

	while ((it = TAILQ_FIRST(&q->items)) != NULL) {
		later_take(q, it);
		if (it != &q->mark && !later_call(q, it))
			return;
	}
}

size_t
later_count(const struct later *q)
{
	return q->n;
}
