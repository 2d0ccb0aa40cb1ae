/*
 * token — lease tokens from a pool of random bytes (see token.h).
 *
 * It owns the pool: bytes drawn from getrandom() and not yet used. It must
 * not hand out a byte twice nor let a forked child use its parent's pool,
 * and it must not call the kernel per token.
 */
#include "token.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/random.h>

#include "log.h"

/* The pool: its bytes not used yet are pool[used, TOKEN_POOL_BYTES). */
static unsigned char pool[TOKEN_POOL_BYTES];
static size_t used = TOKEN_POOL_BYTES;	/* all used: the first token draws */
static bool atfork_set;			/* pool_forget is registered */

_Static_assert(TOKEN_POOL_BYTES % (TOKEN_LEN / 2) == 0, "a pool holds whole tokens");

/* In a forked child: the parent's bytes are the parent's. */
static void
pool_forget(void)
{
	explicit_bzero(pool, sizeof(pool));
	used = TOKEN_POOL_BYTES;
}

/* Fill the pool from the kernel's CSPRNG (which blocks only until it is
 * seeded, early at boot). Failing that, nothing is safe to hand out. */
static void
pool_fill(void)
{
	size_t got = 0;
	if (!atfork_set) {
		if (pthread_atfork(NULL, NULL, pool_forget) != 0)
			log_fatal("token: cannot register the fork handler");
		atfork_set = true;
	}
	while (got < sizeof(pool)) {
		ssize_t n = getrandom(pool + got, sizeof(pool) - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			log_fatal("token: getrandom: %s", strerror(errno));
		got += (size_t)n;
	}
	used = 0;
}

void
token_new(char out[TOKEN_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	if (used == TOKEN_POOL_BYTES)
		pool_fill();
	unsigned char *raw = pool + used;
	for (size_t i = 0; i < TOKEN_LEN / 2; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 15];
	}
	out[TOKEN_LEN] = '\0';
	explicit_bzero(raw, TOKEN_LEN / 2);
	used += TOKEN_LEN / 2;
}
