/*
 * fuzz — what every fuzz harness shares: a check that aborts (so that
 * libFuzzer and the replay driver both see a crash), a reader of the bytes
 * that steer a harness, and the quiet log.
 *
 * Each harness is one file defining LLVMFuzzerTestOneInput; it is linked
 * with libFuzzer by make fuzz, and with replay.c by make check.
 */
#ifndef DLOCKD_TESTS_FUZZ_H
#define DLOCKD_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant of the code under test: a violation is a crash. */
#define FUZZ_CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
		abort(); \
	} \
} while (0)

/* The bytes that steer a harness, read from the front. */
struct fuzz_in {
	const uint8_t *p;	/* next byte */
	size_t n;		/* bytes left */
};

/* The next byte, 0 once they are used up. */
static inline unsigned
fuzz_byte(struct fuzz_in *in)
{
	if (in->n == 0)
		return 0;
	in->n--;
	return *in->p++;
}

/* The next two bytes as a number, 0 once they are used up. */
static inline unsigned
fuzz_u16(struct fuzz_in *in)
{
	unsigned hi = fuzz_byte(in);
	return hi << 8 | fuzz_byte(in);
}

/* Send the daemon's log nowhere: the harnesses make it warn a lot. */
static inline void
fuzz_quiet(void)
{
	static int done;
	if (!done && log_open("/dev/null") != 0)
		abort();
	done = 1;
}

#endif
