/*
 * etcd_fixture — what the suites of etcd's client and backend share (check_etcd,
 * check_etcd_watch, check_be_etcd), on top of grpc_fixture.h: etcd's messages
 * as the fake sends them, the client under test (ef_cli) with hooks that
 * record what it tells, and calls whose callback records how they ended.
 *
 * Test code only (linked into every suite): a failed expectation fails the
 * running test (Check).
 */
#ifndef DLOCKD_TESTS_ETCD_FIXTURE_H
#define DLOCKD_TESTS_ETCD_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "etcd.h"
#include "grpc_fixture.h"

struct fake_grpc;
struct fake_grpc_req;

#define EF_LOG_MAX 64		/* hook calls the suites remember */
#define EF_TIMEOUT_MS 1000	/* the clients' request timeout, unless a test says */
#define EF_INVALID_TOKEN "etcdserver: invalid auth token"

/* The outcome of one call, as its callback saw it. */
struct ef_outcome {
	int times;			/* callback runs */
	bool inside;			/* one ran inside etcd_call */
	enum etcd_status status;
	int code;
	char why[256];
	int64_t rev;			/* ETCD_OK: the response header's revision */
	int64_t count;			/* ETCD_OK, a RangeResponse: count */
	int64_t ttl;			/* ETCD_OK, a LeaseKeepAliveResponse: TTL */
	int seq;			/* the last run was the seq-th callback of the test */
	bool destroy;			/* the callback destroys ef_cli */
	enum etcd_method m;		/* the method called */
	struct ef_outcome *then;	/* the callback makes a Range of then_key on
					 * then_lane into this one (once) */
	uint64_t then_lane;
	const char *then_key;
};

extern struct etcd *ef_cli;		/* the client under test, NULL: none */
extern bool ef_states[EF_LOG_MAX];	/* the state hook's calls, in order */
extern int ef_nstates;
extern char ef_msgs[EF_LOG_MAX][128];	/* the watch hook's messages ("NULL" for NULL) */
extern int ef_nmsgs;
extern int ef_stop_at;			/* the watch hook stops the stream at this
					 * message */
extern int ef_restart_at;		/* or starts another one */
extern int ef_destroy_at;		/* or destroys the client */
extern int ef_nresults;			/* callbacks run in this test */

/* A checked fixture's setup (the loop, the fake, nothing recorded) and
 * teardown (ef_cli destroyed too). */
void ef_setup(void);
void ef_teardown(void);

/* A response header at revision rev (one of a few kept statically). */
Etcd__ResponseHeader *ef_header(int64_t rev);
/* A WatchResponse: created (key NULL), or with one DELETE event of key at
 * rev; ev, evp and kv are its parts. */
void ef_watch_msg(Etcd__WatchResponse *w, Etcd__Event *ev, Etcd__Event **evp,
    Etcd__KeyValue *kv, int64_t rev, const char *key);
/* The framed bytes of such a message; the caller frees them. */
uint8_t *ef_watch_frame(int64_t rev, const char *key, size_t *len);
/* Route gf_fake's Range to a RangeResponse at rev with count. */
void ef_route_range(struct fake_grpc *f, int64_t rev, int64_t count);
/* Answer req with a RangeResponse at rev. */
void ef_reply_range(struct fake_grpc_req *req, int64_t rev);

/* A client of the n endpoints eps (user NULL: no authentication), PINGing
 * a silent watch's connection after ping_ms (0: the client's default). */
struct etcd *ef_client_ping(const char *const *eps, size_t n, uint64_t timeout_ms,
    const char *user, const char *password, uint64_t ping_ms);
struct etcd *ef_client(const char *const *eps, size_t n, uint64_t timeout_ms,
    const char *user, const char *password);
/* A client of gf_fake alone. */
struct etcd *ef_client_of_fake(void);

/* A Range of key by ef_cli, told into o. */
void ef_call_range(const char *key, struct ef_outcome *o);
/* The same on lane (etcd_call_lane). */
void ef_call_lane(uint64_t lane, const char *key, struct ef_outcome *o);
/* A call of m (Txn, LeaseRevoke, LeaseKeepAlive, Status) with an empty
 * request of its kind. */
void ef_call_m(enum etcd_method m, struct ef_outcome *o);

/* Start ef_cli's watch stream with the tests' create request (key given). */
void ef_watch_start(const char *key);
/* The fake's next watch stream, once its create request has come. */
struct fake_grpc_req *ef_watch_req(void);
/* Send the watch message (rev, key: NULL for created) on req, and let it
 * reach the client. */
void ef_watch_send(struct fake_grpc_req *req, int64_t rev, const char *key);

#endif
