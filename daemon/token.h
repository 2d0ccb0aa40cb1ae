/*
 * token — the lease tokens a LOCK hands out: 128 bits from the kernel's
 * CSPRNG, in lower-case hex.
 *
 * Random bytes are drawn from getrandom() in bulk, a pool at a time, so that
 * a token costs no system call of its own; each byte is used once and wiped
 * as it is taken. A forked child starts with an empty pool: it never hands
 * out the tokens its parent will.
 */
#ifndef DLOCKD_TOKEN_H
#define DLOCKD_TOKEN_H

#include "backend.h"

#define TOKEN_POOL_BYTES 4096	/* random bytes drawn per getrandom() */

/* Write a fresh token into out: TOKEN_LEN hex characters and a NUL. */
void token_new(char out[TOKEN_LEN + 1]);

#endif
