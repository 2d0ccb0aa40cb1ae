/*
 * reply — the one RESP reply reader of dlock-bench: just enough of RESP2
 * (and RESP3's null) for the replies of LOCK, UNLOCK, PING, SET, EVALSHA and
 * SCRIPT LOAD.
 *
 * It never touches a socket and owns nothing: it is handed the bytes read so
 * far and says whether they begin with a complete reply, and how long it is.
 * The strings it returns point into those bytes.
 */
#ifndef DLOCK_BENCH_REPLY_H
#define DLOCK_BENCH_REPLY_H

#include <stddef.h>
#include <sys/types.h>

#define REPLY_MAX_DEPTH 8	/* arrays nested deeper are refused */

enum reply_kind {
	REPLY_STATUS,		/* +text */
	REPLY_ERROR,		/* -CODE sentence */
	REPLY_INTEGER,		/* :n */
	REPLY_BULK,		/* $len text */
	REPLY_NULL,		/* $-1, *-1 or _ */
	REPLY_ARRAY		/* *n elements (checked and skipped) */
};

/* One reply, as read by reply_scan(). */
struct reply {
	enum reply_kind kind;	/* what it is */
	long long integer;	/* INTEGER: the value; ARRAY: the element count */
	const char *str;	/* STATUS, ERROR, BULK: the text, inside the buffer */
	size_t len;		/* its length */
};

/*
 * Read one reply at the start of the len bytes at buf. Returns the number of
 * bytes it takes (> 0) and fills *r, 0 if the bytes end before the reply
 * does, or -1 if they are not RESP.
 */
ssize_t reply_scan(const char *buf, size_t len, struct reply *r)
	__attribute__((warn_unused_result));

#endif
