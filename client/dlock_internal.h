/*
 * dlock_internal — what libdlock's files share, and functions for its own
 * tests: not part of its interface, hidden from the shared library (it is
 * built with -fvisibility=hidden and they are not marked DLOCK_EXPORT),
 * reachable only by linking libdlock.a.
 *
 * dlock.c owns the connection and the RESP3 reader; the files of other
 * commands (dlock_elect.c, dlock_multi.c) send a command with dlock_call()
 * and read the reply it returns.
 */
#ifndef DLOCK_INTERNAL_H
#define DLOCK_INTERNAL_H

#include "dlock.h"

#include <stddef.h>

/* Kinds of RESP values (RESP2 and RESP3). */
enum resp_type {
	RESP_SIMPLE,	/* +text */
	RESP_ERROR,	/* -CODE text, or !len blob error */
	RESP_INT,	/* :n */
	RESP_BULK,	/* $len, or =len verbatim (format prefix removed) */
	RESP_NULL,	/* _, $-1, *-1 */
	RESP_DOUBLE,	/* ,text (kept as text) */
	RESP_BOOL,	/* #t / #f (integer 1 / 0) */
	RESP_BIGNUM,	/* (digits (kept as text) */
	RESP_ARRAY,	/* *n */
	RESP_MAP,	/* %n: 2n elements, key then value */
	RESP_SET,	/* ~n */
	RESP_PUSH	/* >n */
};

/* One parsed value; the tree owns its strings and elements. */
struct resp {
	enum resp_type type;	/* what it is */
	long long integer;	/* RESP_INT, RESP_BOOL */
	char *str;		/* string kinds: NUL-terminated copy, binary-safe with len */
	size_t len;		/* length of str */
	struct resp **elem;	/* aggregates: the elements (a map: keys and values) */
	size_t n;		/* number of elem */
};

/*
 * Send argv[0..argc) as a RESP array of bulk strings, argv[i] being lens[i]
 * bytes (lens NULL: every argv[i] is a C string), and wait for the reply:
 * d's timeout, plus wait_ms for a command the daemon may hold back on
 * purpose (a LOCK's WAIT; -1: for ever, and so no limit). Returns the reply
 * (the caller frees it with dlock_resp_free), or NULL with the error set:
 * locally, or from the daemon's error reply. A loss notice in place of the
 * reply is queued for dlock_poll_lost() and fails the call (LOST), unless
 * its push came first: then the command, which did not run, is sent again.
 * d must not be NULL (dlock_check_key checks it).
 */
struct resp *dlock_call(dlock_t *d, long long wait_ms, int argc, const char *const argv[],
    const size_t lens[]);
/*
 * dlock_call, for a command whose reply is an integer 0 or more (cmd names
 * it in the error): the integer, or -1 (error set; a negative one or a reply
 * of another type is PROTO).
 */
long long dlock_call_int(dlock_t *d, const char *cmd, int argc, const char *const argv[],
    const size_t lens[]);
/*
 * Send cmd key [value] [TTL ms] [WAIT ms] [SHARED | LIMIT n] [DETACH] as
 * opts asks (NULL: defaults; value NULL: none, else valuelen bytes) and read
 * its reply as LOCK's: 1 granted (*out filled unless NULL), 0 not granted
 * within opts->wait_ms, -1 error. The waiting is not cut by d's timeout
 * (see dlock_call).
 */
int dlock_acquire(dlock_t *d, const char *cmd, const char *key, const void *value,
    size_t valuelen, const struct dlock_lock_opts *opts, struct dlock_grant *out);
/* The most words dlock_opts_args() gives: TTL ms WAIT ms LIMIT n DETACH. */
#define DLOCK_OPT_ARGS_MAX 7

/* The option words of a LOCK-like command, as dlock_opts_args() makes them. */
struct dlock_opt_args {
	const char *argv[DLOCK_OPT_ARGS_MAX];	/* the words (some point into the buffers) */
	int argc;				/* how many */
	long long wait_ms;			/* opts->wait_ms, for dlock_call() */
	char ttl[24], wait[24], limit[24];	/* the numbers, as text */
};

/*
 * Check opts (NULL: defaults) as dlock_lock() does and make its words
 * [TTL ms] [WAIT ms] [SHARED | LIMIT n] [DETACH] into *oa, which must stay
 * where it is while oa->argv is used. 0, or -1 with the error set (ARG).
 */
int dlock_opts_args(dlock_t *d, const struct dlock_lock_opts *opts, struct dlock_opt_args *oa);
/*
 * Read v, one LOCK answer [token, fence, ttl_ms], into *out (unless NULL).
 * 0, or -1 when v has another shape (nothing set; v is not freed).
 */
int dlock_grant_read(const struct resp *v, struct dlock_grant *out);
/* Free a reply and everything in it. NULL is allowed. */
void dlock_resp_free(struct resp *v);
/* Start a call on d with key: clear the last error and check d (NULL:
 * errno EINVAL) and key (NULL or empty: ARG). 0, or -1. */
int dlock_check_key(dlock_t *d, const char *key);
/* Record a local error: code word and a printf-formatted sentence. */
void dlock_err_set(dlock_t *d, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Record a reply of an unexpected shape to cmd (PROTO). Frees v. Returns -1. */
int dlock_unexpected(dlock_t *d, const char *cmd, struct resp *v);

/*
 * A handle on fd, a socket already connected to something that speaks as
 * dlockd (a test's socketpair), which it takes over: with handshake, HELLO
 * and CLIENT LOSTPUSH ON are sent and their replies read as dlock_connect()
 * does (password as there); without, the handle is ready at once. NULL with
 * err set (fd closed) on failure.
 */
dlock_t *dlock_open_fd(int fd, int handshake, const char *password, char *err,
    size_t errlen);

#endif
