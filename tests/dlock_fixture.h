/*
 * dlock_fixture — what the suites of libdlock share (check_dlock,
 * check_dlock_elect): a canned server that plays a script of replies to one
 * client, and the helpers of the live tests, which talk to a running dlockd
 * whose address is in DLOCK_TEST_ADDR (and password, if it has one, in
 * DLOCK_TEST_PASSWORD).
 *
 * Test code only (linked into every suite): a failed expectation fails the
 * running test (Check). Its global names all start with df_.
 */
#ifndef DLOCKD_TESTS_DLOCK_FIXTURE_H
#define DLOCKD_TESTS_DLOCK_FIXTURE_H

#include <sys/types.h>

#include <stddef.h>

#include "dlock.h"

#define DF_TOKEN32 "0123456789abcdef0123456789abcdef"

#define DF_HELLO_REPLY "%2\r\n+server\r\n$6\r\ndlockd\r\n+proto\r\n:3\r\n"
#define DF_LOSTPUSH_REQ "*3\r\n$6\r\nCLIENT\r\n$8\r\nLOSTPUSH\r\n$2\r\nON\r\n"
/* The handshake of dlock_connect: HELLO 3, then CLIENT LOSTPUSH ON. */
#define DF_HANDSHAKE(hello) \
	{ .reply = hello, .expect = "*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n" }, \
	{ .reply = "+OK\r\n", .expect = DF_LOSTPUSH_REQ }

/* ---- the live tests ---- */

/* Say on stderr, as prog, that the live tests will fail when DLOCK_TEST_ADDR
 * is unset (a suite's first words). */
void df_warn_addr(const char *prog);

/* The daemon's address; fails the test when DLOCK_TEST_ADDR is unset. */
const char *df_addr(void);

/* A new connection to the test daemon; fails the test if there is none. */
dlock_t *df_conn(void);

/* A key no other test (or earlier run) uses: "check_dlock/<pid>.<ns>/name". */
void df_key(char *buf, size_t len, const char *name);

/* Options for one LOCK. */
struct dlock_lock_opts df_opts(long long ttl_ms, long long wait_ms, int shared, int limit,
    int detach);

/*
 * Poll STATUS key on d until it shows n waiters, its status then in *st;
 * fails the test after 5 s.
 */
void df_wait_waiters(dlock_t *d, const char *key, long long n, struct dlock_status *st);

/* Assert that d's last call failed with code. */
void df_assert_code(const dlock_t *d, const char *code);

/* ---- the canned server ---- */

/* One step of a canned server. */
struct df_step {
	const char *reply;	/* bytes to write (NULL: none) */
	size_t len;		/* their length; 0 means strlen(reply) */
	int no_read;		/* 1: write without reading a request first */
	const char *expect;	/* the request must hold these bytes (NULL: any) */
	int delay_ms;		/* wait this long before replying */
	int gap_ms;		/* > 0: write the reply a byte at a time, this far apart
				 * (the client may close before the end) */
	int eof;		/* 1: instead, the client must close or shut down within 5 s */
};

/* A canned server process. */
struct df_canned {
	pid_t pid;		/* the server process */
	char addr[128];		/* its address, "127.0.0.1:port" or "unix:/path" */
	char dir[64];		/* the directory of its Unix socket, or "" */
};

/* Wait until fd is readable, at most 5 s. 1 readable, 0 timeout. */
int df_wait_readable(int fd);

/*
 * Start a canned server on a free loopback port that accepts one
 * connection and plays steps: for each, it reads a request (unless no_read)
 * and writes the reply (one byte at a time when drip). Then it closes at
 * once (close_at_end) or when the client does.
 */
void df_canned_start(struct df_canned *c, const struct df_step *steps, size_t nsteps,
    int drip, int close_at_end);

/* df_canned_start on a Unix socket in a new temporary directory. */
void df_canned_start_unix(struct df_canned *c, const struct df_step *steps, size_t nsteps);

/*
 * Wait for the canned server (5 s at most, else it is killed); assert that
 * it played every step.
 */
void df_canned_wait(struct df_canned *c);

/* A free loopback TCP port nothing listens on. */
int df_free_port(void);

#endif
