/*
 * backoff — capped exponential backoff with jitter.
 */
#ifndef DLOCKD_BACKOFF_H
#define DLOCKD_BACKOFF_H

#include <stdint.h>

struct backoff {
	uint64_t min_ms;	/* first delay */
	uint64_t max_ms;	/* longest delay */
	uint64_t next_ms;	/* the delay the next call gives, before jitter */
};

void backoff_init(struct backoff *b, uint64_t min_ms, uint64_t max_ms);
/* The delay to wait now: next_ms plus up to a fifth more at random; then
 * next_ms doubles, capped at max_ms. */
uint64_t backoff_next(struct backoff *b);
/* Back to min_ms (a connection worked). */
void backoff_reset(struct backoff *b);

#endif
