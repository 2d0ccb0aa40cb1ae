/*
 * backoff — capped exponential backoff with jitter.
 */
#include "backoff.h"

#include <stdlib.h>

void
backoff_init(struct backoff *b, uint64_t min_ms, uint64_t max_ms)
{
	b->min_ms = min_ms;
	b->max_ms = max_ms;
	b->next_ms = min_ms;
}

uint64_t
backoff_next(struct backoff *b)
{
	uint64_t d = b->next_ms + arc4random_uniform((uint32_t)(b->next_ms / 5 + 1));
	b->next_ms = b->next_ms * 2 > b->max_ms ? b->max_ms : b->next_ms * 2;
	return d;
}

void
backoff_reset(struct backoff *b)
{
	b->next_ms = b->min_ms;
}
