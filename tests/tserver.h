/*
 * tserver — a server under test, of the test's own, and clients that talk
 * to it over socketpairs: for the suites of the command table, the sessions
 * and the metrics.
 *
 * The server runs on the memory backend with its lock table on a clock the
 * test moves by hand (ts_now), or on the fake backend and its clock
 * (fake_backend.h). The test runs the event loop itself, never blocking
 * (ts_pump): every interleaving is the test's choice. No listener, no daemon
 * process, no network. It is linked into every suite: its global names all
 * start with ts_.
 */
#ifndef DLOCKD_TESTS_TSERVER_H
#define DLOCKD_TESTS_TSERVER_H

#include <stddef.h>
#include <stdint.h>

struct conf;
struct event_base;
struct server;
struct session;

#define TS_REPLY_MAX 4096	/* longest reply a test reads whole */
#define TS_IO_LIMIT_MS 5000	/* longest a test waits for what it expects */
#define TS_PASSWORD "sesame"	/* auth.password of ts_setup_auth() */

extern struct event_base *ts_base;	/* the test's event loop */
extern struct conf *ts_conf;		/* the defaults; a test may change them */
extern struct server *ts_srv;		/* the server under test */
extern uint64_t ts_now;			/* the memory backend's table clock, ms */

/* Check fixtures: a server on the default configuration and the memory
 * backend; the same with auth.password TS_PASSWORD; one on the fake backend
 * (fk_start(&fk_ops)); and the end of any of them, which checks that the
 * server stops with nothing left in flight. */
void ts_setup(void);
void ts_setup_auth(void);
void ts_setup_fake(void);
void ts_teardown(void);

/* Run what the loop has ready, without blocking. */
void ts_pump(void);
/* A new session; returns the client's end (non-blocking). */
int ts_client(void);
/* The session with id (the n-th accepted, from 1), or NULL. */
struct session *ts_session(uint64_t id);
/* A new session that holds key "k" exclusively; *fence (unless NULL) gets
 * its fence. */
int ts_holder(long long *fence);

/* Write all len bytes at p to fd, running the loop when it is full. */
void ts_send(int fd, const void *p, size_t len);
/* Write the string s to fd. */
void ts_send_str(int fd, const char *s);
/* Read exactly len bytes into buf, running the loop; fails after
 * TS_IO_LIMIT_MS or at the end of the stream. */
void ts_recv(int fd, char *buf, size_t len);
/* Read one line ending in CRLF into buf (size bytes), the CRLF not kept. */
void ts_recv_line(int fd, char *buf, size_t size);

/* Assert that the next len bytes from fd are exactly want. */
void ts_expect_bytes(int fd, const char *want, size_t len);
/* Assert that the next bytes from fd are exactly the string want. */
void ts_expect(int fd, const char *want);
/* Assert that nothing is to be read from fd once the loop is idle. */
void ts_expect_nothing(int fd);
/* Assert that the session behind fd closes its end (after what was read). */
void ts_expect_closed(int fd);
/* Assert that the next bytes are HELLO's reply to session id in proto. */
void ts_expect_hello(int fd, int id, int proto);
/* Read a LOCK grant in RESP2 or RESP3 ([token, fence, ttl]); returns the
 * fence, copies the token into token (TOKEN_LEN + 1 bytes) and the ttl into
 * *ttl, each unless NULL. */
long long ts_expect_grant(int fd, char *token, long long *ttl);
/* Send STATUS k on fd and assert the head of its RESP2 reply: mode, holders,
 * waiters. */
void ts_expect_status(int fd, const char *mode, int holders, int waiters);

#endif
