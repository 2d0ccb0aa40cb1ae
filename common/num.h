/*
 * num — the one parser of decimal integers given as text by clients, on the
 * command line or in the configuration.
 *
 * It owns nothing. Protocol framing (RESP length headers) has its own
 * incremental reader in the codec: that one must judge bytes as they arrive.
 */
#ifndef DLOCK_NUM_H
#define DLOCK_NUM_H

#include <stddef.h>

enum num_status {
	NUM_OK = 0,		/* *out is set */
	NUM_SYNTAX = -1,	/* not a decimal integer: an optional '-', then digits */
	NUM_RANGE = -2		/* a decimal integer, outside [min, max] */
};

/* Parse the len bytes at s as a decimal integer in [min, max]. */
enum num_status num_parse(const char *s, size_t len, long long min, long long max,
    long long *out) __attribute__((warn_unused_result));

/* The value of the hexadecimal digit ch (either case), or -1. */
int num_hex_digit(int ch);

#endif
