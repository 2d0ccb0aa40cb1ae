/*
 * backoff — how long to wait before trying again: capped exponential
 * backoff with jitter.
 *
 * The owner embeds a struct backoff per thing it retries (a connection, a
 * watch stream, a lease's keepalive), asks backoff_next for each pause and
 * backoff_reset once it worked. Delays double from min_ms up to max_ms;
 * each gets up to a fifth more at random, so that daemons that lost the
 * same server at the same moment do not all come back at the same moment.
 * It allocates nothing and knows nothing of timers or clocks.
 */
#ifndef DLOCKD_BACKOFF_H
#define DLOCKD_BACKOFF_H

#include <stdint.h>

struct backoff {
	uint64_t min_ms;	/* first delay */
	uint64_t max_ms;	/* longest delay */
	uint64_t next_ms;	/* the delay the next call gives, before jitter */
};

/* Start at min_ms (a min_ms above max_ms counts as max_ms; 0 gives 0 every
 * time), doubling up to max_ms. */
void backoff_init(struct backoff *b, uint64_t min_ms, uint64_t max_ms);
/* The delay to wait now: next_ms plus up to a fifth more at random
 * (arc4random_uniform), never above max_ms + max_ms/5; then next_ms doubles, capped at max_ms. */
uint64_t backoff_next(struct backoff *b);
/* Back to min_ms (a connection worked). */
void backoff_reset(struct backoff *b);

#endif
