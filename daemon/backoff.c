/*
 * backoff — capped exponential backoff with jitter (see backoff.h).
 */
#include "backoff.h"

#include <stdlib.h>

void
backoff_init(struct backoff *b, uint64_t min_ms, uint64_t max_ms)
{
	b->min_ms = min_ms < max_ms ? min_ms : max_ms;
	b->max_ms = max_ms;
	b->next_ms = b->min_ms;
}

uint64_t
backoff_next(struct backoff *b)
{
	uint64_t d = b->next_ms, fifth = d / 5;

	/* arc4random_uniform(n) is below n: d + 0 .. d + d/5, in range */
	if (fifth > UINT64_MAX - d)
		fifth = UINT64_MAX - d;
	if (fifth >= UINT32_MAX)
		fifth = UINT32_MAX - 1;
	b->next_ms = d > b->max_ms / 2 ? b->max_ms : 2 * d;
	return d + arc4random_uniform((uint32_t)fifth + 1);
}

void
backoff_reset(struct backoff *b)
{
	b->next_ms = b->min_ms;
}
