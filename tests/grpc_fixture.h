/*
 * grpc_fixture — the Check fixture of the suites that run a gRPC client
 * against the fake server (check_grpc, check_etcd, check_etcd_watch,
 * check_be_etcd): a loop of the test's own, woken every GF_TICK_MS, a fake
 * (tests/fake_grpc.c) on it, and the waits that run the loop.
 *
 * Test code only (linked into every suite): a wait that runs out fails the
 * running test (Check).
 */
#ifndef DLOCKD_TESTS_GRPC_FIXTURE_H
#define DLOCKD_TESTS_GRPC_FIXTURE_H

#include <stdint.h>

#include <check.h>
#include <event2/event.h>

#include "clock.h"
#include "suite.h"

#define GF_LIMIT_MS 3000	/* longest a test waits for what it expects */
#define GF_TICK_MS 10		/* the loop wakes up at least this often */
#define GF_SETTLE_MS 100	/* how long a test lets the loop run to see nothing happen */

struct fake_grpc;

extern struct event_base *gf_base;	/* the test's loop */
extern struct fake_grpc *gf_fake;	/* the fake gf_setup starts (a test may
					 * free it and start another) */

/* Run the loop until cond holds; fail the test after GF_LIMIT_MS. */
#define GF_RUN_UNTIL(cond) SUITE_RUN_UNTIL(gf_base, cond, GF_LIMIT_MS)

/* A checked fixture's setup and teardown: the loop and the fake. */
void gf_setup(void);
void gf_teardown(void);
/* Run what the loop has ready, without blocking. */
void gf_pump(void);
/* Let the loop run for ms milliseconds. */
void gf_settle(uint64_t ms);
/* Let what the fake wrote reach the client and be read. */
void gf_deliver(void);
/* A port of 127.0.0.1 nothing listens on. */
int gf_dead_port(void);
/* main() of such a suite: run s (suite_run) with SIGPIPE ignored (a fake
 * writes to clients that went away) and the daemon's log at errors only. */
int gf_main(Suite *s);

#endif
