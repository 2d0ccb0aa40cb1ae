/*
 * clock — CLOCK_BOOTTIME in milliseconds (see clock.h). It owns nothing and
 * must not be used for dates.
 */
#include "clock.h"

#include <time.h>

static uint64_t
ts_ms(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * 1000u + (uint64_t)ts->tv_nsec / 1000000u;
}

uint64_t
clock_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return ts_ms(&ts);
}

uint64_t
clock_suspended_ms(void)
{
	struct timespec boot, mono;
	clock_gettime(CLOCK_BOOTTIME, &boot);
	clock_gettime(CLOCK_MONOTONIC, &mono);
	uint64_t b = ts_ms(&boot), m = ts_ms(&mono);
	return b > m ? b - m : 0;
}

struct timeval
clock_tv(uint64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };
	return tv;
}
