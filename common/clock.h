/*
 * clock — the one clock of dlockd, libdlock and dlock for deadlines, leases
 * and timeouts.
 *
 * Milliseconds of CLOCK_BOOTTIME: it never steps back and keeps counting
 * while the machine is suspended, so a lease measured with it is not
 * believed to last longer than it does in a backend whose clock ran on, and
 * a client's timeout is not stretched by a suspend. It owns nothing and must
 * not be used for wall-clock dates (logs, fences).
 */
#ifndef DLOCK_CLOCK_H
#define DLOCK_CLOCK_H

#include <stdint.h>
#include <sys/time.h>

/* Milliseconds since boot, suspended time included. */
uint64_t clock_ms(void);

/* How far CLOCK_BOOTTIME is ahead of CLOCK_MONOTONIC, in milliseconds: the
 * time spent suspended since boot. libevent's timers count on
 * CLOCK_MONOTONIC, so a change of this value means they fired late. */
uint64_t clock_suspended_ms(void);

/* A duration of ms milliseconds as a struct timeval (for timers). */
struct timeval clock_tv(uint64_t ms);

#endif
