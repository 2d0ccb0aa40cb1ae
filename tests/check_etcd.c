/*
 * check_etcd — unit tests of etcd's gRPC client (daemon/etcd/etcd.c): unary
 * calls, their errors, endpoints that do not answer, failover and timeouts;
 * many calls on one connection; callbacks always from the loop; lanes
 * (etcd_call_lane: one call of a lane out at a time, in order, other lanes
 * side by side); the keepalive; authentication; a client destroyed with
 * work in flight. Its watch stream has a suite of its own (check_etcd_watch).
 *
 * No etcd: each test talks to fake gRPC servers of its own
 * (tests/fake_grpc.c: nghttp2 server sessions on 127.0.0.1, port 0) running
 * on the same event loop as the client (tests/grpc_fixture.c,
 * tests/etcd_fixture.c). A fake answers a path from its route table and
 * keeps every other request pending until the test answers it. The test
 * runs the loop itself until what it waits for happened, and fails after
 * GF_LIMIT_MS.
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>

#include "clock.h"
#include "etcd.h"
#include "etcd_fixture.h"
#include "fake_grpc.h"
#include "suite.h"

#define AUTH_REFUSED "etcdserver: authentication failed, invalid user ID or password"

/* ---- unary calls ---------------------------------------------------------- */

/* A call is a POST of the framed request to its method's path with gRPC's
 * headers; an answer with status 0 reaches the callback as ETCD_OK with the
 * message, and the client comes up. */
START_TEST(test_call_answered)
{
	struct ef_outcome o = { 0 };
	struct etcd_stats st;
	struct fake_grpc_req *req;
	Etcd__RangeRequest *rq;

	ef_route_range(gf_fake, 7, 1);
	ef_cli = ef_client_of_fake();
	ck_assert(!etcd_up(ef_cli));
	ck_assert_str_eq(etcd_endpoint(ef_cli), fake_grpc_endpoint(gf_fake));
	ef_call_range("/l/a", &o);
	ck_assert_int_eq(o.times, 0);
	GF_RUN_UNTIL(o.times > 0);
	ck_assert(!o.inside);
	ck_assert_int_eq(o.status, ETCD_OK);
	ck_assert_int_eq(o.rev, 7);
	ck_assert_int_eq(o.count, 1);
	ck_assert(etcd_up(ef_cli));
	ck_assert_ptr_null(etcd_why_down(ef_cli));
	ck_assert_int_eq(ef_nstates, 1);
	ck_assert(ef_states[0]);

	ck_assert_int_eq(fake_grpc_count(gf_fake, NULL), 1);
	req = fake_grpc_last(gf_fake, FG_RANGE);
	ck_assert_ptr_nonnull(req);
	ck_assert_str_eq(req->method, "POST");
	ck_assert_str_eq(req->scheme, "http");
	ck_assert_str_eq(req->authority, fake_grpc_endpoint(gf_fake));
	ck_assert_str_eq(req->ctype, "application/grpc");
	ck_assert_str_eq(req->te, "trailers");
	ck_assert(!req->has_token);
	ck_assert(req->ended);
	rq = (Etcd__RangeRequest *)fake_grpc_req_msg(req, &etcd__range_request__descriptor);
	ck_assert_ptr_nonnull(rq);
	ck_assert_uint_eq(rq->key.len, 4);
	ck_assert(memcmp(rq->key.data, "/l/a", 4) == 0);
	ck_assert_uint_eq(rq->range_end.len, 2);
	protobuf_c_message_free_unpacked(&rq->base, NULL);
	ck_assert_uint_eq(req->len, 5 + 10);	/* one message, nothing more */

	etcd_stats(ef_cli, &st);
	ck_assert_uint_eq(st.calls, 1);
	ck_assert_uint_eq(st.failures, 0);
	ck_assert_uint_eq(st.connects, 1);
	ck_assert_uint_eq(st.streams, 0);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(o.times, 1);
}
END_TEST

/* A status other than 0 ends the call with ETCD_FAILED, the code and the
 * grpc-message percent-decoded; in trailers after headers, or trailers-only.
 * The client is up all the same: etcd answered. */
START_TEST(test_call_error_status)
{
	struct ef_outcome o = { 0 }, p = { 0 }, q = { 0 };

	fake_grpc_route_error(gf_fake, FG_LEASE_REVOKE, 5,
	    "etcdserver: requested lease not found", false);
	fake_grpc_route_error(gf_fake, FG_TXN, 3, "100% bad: \xc3\xa9t\xc3\xa9\nline", true);
	fake_grpc_route_error(gf_fake, FG_STATUS, 14, "", true);
	ef_cli = ef_client_of_fake();

	ef_call_m(ETCD_LEASE_REVOKE, &o);
	GF_RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_FAILED);
	ck_assert_int_eq(o.code, 5);
	ck_assert_str_eq(o.why, "etcdserver: requested lease not found");
	ck_assert(etcd_up(ef_cli));
	ck_assert_int_eq(ef_nstates, 1);

	ef_call_m(ETCD_TXN, &p);
	GF_RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.status, ETCD_FAILED);
	ck_assert_int_eq(p.code, 3);
	ck_assert_str_eq(p.why, "100% bad: \xc3\xa9t\xc3\xa9\nline");

	ef_call_m(ETCD_STATUS, &q);
	GF_RUN_UNTIL(q.times > 0);
	ck_assert_int_eq(q.status, ETCD_FAILED);
	ck_assert_int_eq(q.code, 14);
	ck_assert_str_ne(q.why, "");
	ck_assert(etcd_up(ef_cli));
	ck_assert_int_eq(ef_nstates, 1);
}
END_TEST

/* A trailers-only OK (no message) and an HTTP status other than 200
 * without grpc-status are failures with a reason. */
START_TEST(test_call_without_message)
{
	struct ef_outcome o = { 0 };
	struct fake_grpc_req *req;

	ef_cli = ef_client_of_fake();
	ef_call_m(ETCD_TXN, &o);
	GF_RUN_UNTIL((req = fake_grpc_pending(gf_fake, FG_TXN)) != NULL && req->ended);
	fake_grpc_end(req, 0, NULL);
	GF_RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_FAILED);
	ck_assert_int_eq(o.code, 13);
	ck_assert_str_ne(o.why, "");
}
END_TEST

/* A response message over 16 MiB (its prefix says so) fails the stream:
 * ETCD_FAILED, RESOURCE_EXHAUSTED; one that does not unpack: INTERNAL. The
 * stream is cancelled; the connection goes on. */
START_TEST(test_message_over_the_limit)
{
	struct ef_outcome o = { 0 }, p = { 0 }, q = { 0 };
	struct fake_grpc_req *req;

	ef_cli = ef_client_of_fake();
	ef_call_range("/l/a", &o);
	GF_RUN_UNTIL((req = fake_grpc_pending(gf_fake, FG_RANGE)) != NULL);
	fake_grpc_send(req, "\0\x01\0\0\x01" "abc", 8);
	GF_RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_FAILED);
	ck_assert_int_eq(o.code, 8);
	GF_RUN_UNTIL(req->closed);
	ck_assert_uint_eq(req->close_code, NGHTTP2_CANCEL);

	ef_call_range("/l/b", &p);
	GF_RUN_UNTIL((req = fake_grpc_pending(gf_fake, FG_RANGE)) != NULL);
	fake_grpc_send(req, "\0\0\0\0\3\xff\xff\xff", 8);
	GF_RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.status, ETCD_FAILED);
	ck_assert_int_eq(p.code, 13);

	ef_route_range(gf_fake, 3, 0);
	ef_call_range("/l/c", &q);
	GF_RUN_UNTIL(q.times > 0);
	ck_assert_int_eq(q.status, ETCD_OK);
	ck_assert_int_eq(fake_grpc_accepted(gf_fake), 1);
}
END_TEST

/* 50 calls in flight at once go on one connection, each its own stream,
 * and each gets its own answer, answered in reverse order. */
START_TEST(test_many_calls_one_connection)
{
	enum { N = 50 };
	struct ef_outcome o[N];
	struct fake_grpc_req *reqs[N];
	struct etcd_stats st;
	char key[16];

	memset(o, 0, sizeof(o));
	ef_cli = ef_client_of_fake();
	for (int i = 0; i < N; i++) {
		snprintf(key, sizeof(key), "/l/%d", i);
		ef_call_range(key, &o[i]);
	}
	GF_RUN_UNTIL(fake_grpc_npending(gf_fake, FG_RANGE) == N);
	ck_assert_int_eq(fake_grpc_accepted(gf_fake), 1);
	etcd_stats(ef_cli, &st);
	ck_assert_uint_eq(st.streams, N);
	ck_assert_uint_eq(st.calls, N);
	for (int i = 0; i < N; i++) {
		Etcd__RangeRequest *rq;
		reqs[i] = fake_grpc_nth(gf_fake, i);
		rq = (Etcd__RangeRequest *)fake_grpc_req_msg(reqs[i],
		    &etcd__range_request__descriptor);
		ck_assert_ptr_nonnull(rq);
		snprintf(key, sizeof(key), "/l/%d", i);
		ck_assert_uint_eq(rq->key.len, strlen(key));
		ck_assert(memcmp(rq->key.data, key, rq->key.len) == 0);
		protobuf_c_message_free_unpacked(&rq->base, NULL);
	}
	for (int i = N - 1; i >= 0; i--)
		ef_reply_range(reqs[i], 100 + i);
	GF_RUN_UNTIL(ef_nresults == N);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(o[i].times, 1);
		ck_assert_int_eq(o[i].status, ETCD_OK);
		ck_assert_int_eq(o[i].rev, 100 + i);
		ck_assert_int_eq(o[i].seq, N - i);
	}
	etcd_stats(ef_cli, &st);
	ck_assert_uint_eq(st.streams, 0);
	ck_assert_uint_eq(st.connects, 1);
}
END_TEST

/* Send a keepalive answer and keep the stream open, as etcd may. */
static void
keepalive_fn(void *arg, struct fake_grpc_req *req)
{
	Etcd__LeaseKeepAliveResponse ka = ETCD__LEASE_KEEP_ALIVE_RESPONSE__INIT;
	(void)arg;
	ka.header = ef_header(9);
	ka.id = 7;
	ka.ttl = 10;
	fake_grpc_send_msg(req, &ka.base);
}

/* A keepalive is one request on a LeaseKeepAlive stream half-closed at
 * once; the first message answers it, and the stream is cancelled if etcd
 * keeps it open. */
START_TEST(test_keepalive)
{
	struct ef_outcome o = { 0 }, p = { 0 };
	struct fake_grpc_req *req;
	Etcd__LeaseKeepAliveRequest *rq;
	Etcd__LeaseKeepAliveResponse ka = ETCD__LEASE_KEEP_ALIVE_RESPONSE__INIT;

	fake_grpc_route_fn(gf_fake, FG_LEASE_KEEPALIVE, keepalive_fn, NULL);
	ef_cli = ef_client_of_fake();
	ef_call_m(ETCD_LEASE_KEEPALIVE, &o);
	GF_RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_OK);
	ck_assert_int_eq(o.ttl, 10);
	ck_assert_int_eq(o.rev, 9);
	req = fake_grpc_last(gf_fake, FG_LEASE_KEEPALIVE);
	ck_assert(req->ended);
	rq = (Etcd__LeaseKeepAliveRequest *)fake_grpc_req_msg(req,
	    &etcd__lease_keep_alive_request__descriptor);
	ck_assert_ptr_nonnull(rq);
	ck_assert_int_eq(rq->id, 7);
	protobuf_c_message_free_unpacked(&rq->base, NULL);
	GF_RUN_UNTIL(req->closed);
	ck_assert_uint_eq(req->close_code, NGHTTP2_CANCEL);

	/* etcd ending the stream with the answer is fine too */
	ka.header = ef_header(10);
	ka.ttl = 5;
	fake_grpc_route(gf_fake, FG_LEASE_KEEPALIVE, &ka.base);
	ef_call_m(ETCD_LEASE_KEEPALIVE, &p);
	GF_RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.status, ETCD_OK);
	ck_assert_int_eq(p.ttl, 5);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(o.times, 1);
	ck_assert_int_eq(p.times, 1);
}
END_TEST

/* ---- endpoints that do not answer ----------------------------------------- */

/* A call to an endpoint nothing listens on ends with ETCD_DOWN, "connection
 * refused", from the loop; the client was never up, so the state hook is
 * not called; etcd_why_down says where and why. */
START_TEST(test_unreachable_endpoint)
{
	char ep[32], want[64];
	const char *eps[] = { ep };
	struct ef_outcome o = { 0 };
	struct etcd_stats st;

	snprintf(ep, sizeof(ep), "127.0.0.1:%d", gf_dead_port());
	ef_cli = ef_client(eps, 1, EF_TIMEOUT_MS, NULL, NULL);
	ck_assert_ptr_nonnull(etcd_why_down(ef_cli));
	ef_call_range("/l/a", &o);
	ck_assert_int_eq(o.times, 0);
	GF_RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_DOWN);
	ck_assert_str_eq(o.why, "connection refused");
	ck_assert(!o.inside);
	ck_assert(!etcd_up(ef_cli));
	ck_assert_int_eq(ef_nstates, 0);
	snprintf(want, sizeof(want), "%s: connection refused", ep);
	ck_assert_str_eq(etcd_why_down(ef_cli), want);
	ck_assert_str_eq(etcd_endpoint(ef_cli), ep);
	etcd_stats(ef_cli, &st);
	ck_assert_uint_eq(st.failures, 1);
	ck_assert_uint_eq(st.switches, 0);
	ck_assert_uint_eq(st.connects, 0);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(o.times, 1);
}
END_TEST

/* An etcd that answered and then went away: the next call ends with
 * ETCD_DOWN and the state hook is told false once, after true. */
START_TEST(test_down_after_up)
{
	struct ef_outcome o = { 0 }, p = { 0 };

	ef_route_range(gf_fake, 1, 0);
	ef_cli = ef_client_of_fake();
	ef_call_range("/l/a", &o);
	GF_RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_OK);
	fake_grpc_free(gf_fake);
	gf_fake = NULL;
	gf_settle(GF_SETTLE_MS);
	ef_call_range("/l/a", &p);
	GF_RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.status, ETCD_DOWN);
	ck_assert(!p.inside);
	ck_assert(!etcd_up(ef_cli));
	ck_assert_ptr_nonnull(etcd_why_down(ef_cli));
	ck_assert_int_eq(ef_nstates, 2);
	ck_assert(ef_states[0]);
	ck_assert(!ef_states[1]);
	gf_fake = fake_grpc_new(gf_base);
}
END_TEST

/* A connection that breaks with calls in flight ends them ETCD_DOWN. */
START_TEST(test_connection_lost_with_calls)
{
	struct ef_outcome o = { 0 }, p = { 0 };

	ef_cli = ef_client_of_fake();
	ef_call_range("/l/a", &o);
	ef_call_range("/l/b", &p);
	GF_RUN_UNTIL(fake_grpc_npending(gf_fake, FG_RANGE) == 2);
	fake_grpc_drop(gf_fake);
	GF_RUN_UNTIL(o.times > 0 && p.times > 0);
	ck_assert_int_eq(o.status, ETCD_DOWN);
	ck_assert_int_eq(p.status, ETCD_DOWN);
	ck_assert_msg(strcmp(o.why, "closed by etcd") == 0 ||
	    strcmp(o.why, "connection reset") == 0, "why: %s", o.why);
	ck_assert(!etcd_up(ef_cli));
}
END_TEST

/* With a dead endpoint first and a live one second: the first call fails
 * (ETCD_DOWN) and moves the client to the second; the next call is answered
 * there and the client comes up. */
START_TEST(test_failover_to_next_endpoint)
{
	char dead[32];
	const char *eps[] = { dead, fake_grpc_endpoint(gf_fake) };
	struct ef_outcome o = { 0 }, p = { 0 };
	struct etcd_stats st;

	snprintf(dead, sizeof(dead), "127.0.0.1:%d", gf_dead_port());
	ef_route_range(gf_fake, 1, 0);
	ef_cli = ef_client(eps, 2, EF_TIMEOUT_MS, NULL, NULL);
	ck_assert_str_eq(etcd_endpoint(ef_cli), dead);
	ef_call_range("/l/a", &o);
	GF_RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_DOWN);
	ck_assert_str_eq(etcd_endpoint(ef_cli), fake_grpc_endpoint(gf_fake));
	ck_assert_int_eq(ef_nstates, 0);
	ck_assert_int_eq(fake_grpc_count(gf_fake, NULL), 0);

	ef_call_range("/l/a", &p);
	GF_RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.status, ETCD_OK);
	ck_assert(etcd_up(ef_cli));
	ck_assert_int_eq(ef_nstates, 1);
	ck_assert(ef_states[0]);
	ck_assert_int_eq(fake_grpc_count(gf_fake, NULL), 1);
	etcd_stats(ef_cli, &st);
	ck_assert_uint_eq(st.switches, 1);
	ck_assert_uint_eq(st.failures, 1);
}
END_TEST

/* A call etcd never answers ends with ETCD_DOWN "timed out" after the
 * request timeout (200 ms here), not much later; its stream is cancelled,
 * the connection given up; the client goes down, and comes up again with
 * the next call, answered on a new connection. */
START_TEST(test_timeout)
{
	const char *eps[] = { fake_grpc_endpoint(gf_fake) };
	struct ef_outcome o = { 0 }, p = { 0 }, q = { 0 };
	struct fake_grpc_req *req;
	uint64_t t0, took;

	ef_route_range(gf_fake, 1, 0);
	ef_cli = ef_client(eps, 1, 200, NULL, NULL);
	ef_call_range("/l/a", &o);
	GF_RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_OK);

	t0 = clock_ms();
	ef_call_m(ETCD_TXN, &p);	/* no route: the fake keeps it */
	GF_RUN_UNTIL(p.times > 0);
	took = clock_ms() - t0;
	ck_assert_int_eq(p.status, ETCD_DOWN);
	ck_assert_str_eq(p.why, "timed out");
	ck_assert_msg(took >= 150 && took < 1000, "timed out after %llu ms",
	    (unsigned long long)took);
	req = fake_grpc_last(gf_fake, FG_TXN);
	ck_assert_ptr_nonnull(req);
	GF_RUN_UNTIL(req->closed || req->conn == NULL);
	GF_RUN_UNTIL(fake_grpc_open(gf_fake) == 0);
	ck_assert(!etcd_up(ef_cli));
	ck_assert_int_eq(ef_nstates, 2);
	ck_assert(!ef_states[1]);

	ef_call_range("/l/a", &q);
	GF_RUN_UNTIL(q.times > 0);
	ck_assert_int_eq(q.status, ETCD_OK);
	ck_assert_int_eq(ef_nstates, 3);
	ck_assert(ef_states[2]);
	ck_assert_int_eq(fake_grpc_accepted(gf_fake), 2);
}
END_TEST

/* A server that accepts and never speaks HTTP/2: calls made meanwhile fail
 * ETCD_DOWN at the request timeout. */
START_TEST(test_connect_timeout)
{
	const char *eps[] = { fake_grpc_endpoint(gf_fake) };
	struct ef_outcome o = { 0 };

	fake_grpc_deaf(gf_fake, true);
	ef_cli = ef_client(eps, 1, 200, NULL, NULL);
	ef_call_range("/l/a", &o);
	GF_RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_DOWN);
	ck_assert_str_eq(o.why, "timed out");
}
END_TEST

/* ---- callbacks from the loop ---------------------------------------------- */

/* A callback never runs inside etcd_call, whether the call is answered,
 * refused by etcd, or cannot reach it; and each runs once. */
START_TEST(test_callbacks_from_the_loop)
{
	char dead[32];
	const char *deps[] = { dead };
	struct ef_outcome o[6] = { { 0 } };
	struct etcd *live;

	ef_route_range(gf_fake, 1, 0);
	fake_grpc_route_error(gf_fake, FG_TXN, 3, "bad", true);
	ef_cli = ef_client_of_fake();
	ef_call_range("/l/a", &o[0]);
	ef_call_m(ETCD_TXN, &o[1]);
	ef_call_range("/l/a", &o[2]);
	ck_assert_int_eq(o[0].times + o[1].times + o[2].times, 0);
	GF_RUN_UNTIL(o[0].times > 0 && o[1].times > 0 && o[2].times > 0);
	/* once up, on the connection made */
	ef_call_range("/l/a", &o[3]);
	ck_assert_int_eq(o[3].times, 0);
	GF_RUN_UNTIL(o[3].times > 0);

	live = ef_cli;
	snprintf(dead, sizeof(dead), "127.0.0.1:%d", gf_dead_port());
	ef_cli = ef_client(deps, 1, EF_TIMEOUT_MS, NULL, NULL);
	ef_call_range("/l/a", &o[4]);
	ef_call_range("/l/a", &o[5]);
	ck_assert_int_eq(o[4].times + o[5].times, 0);
	GF_RUN_UNTIL(o[4].times > 0 && o[5].times > 0);
	etcd_destroy(ef_cli);
	ef_cli = live;

	gf_settle(GF_SETTLE_MS);
	for (int i = 0; i < 6; i++) {
		ck_assert_msg(!o[i].inside, "call %d: callback inside etcd_call", i);
		ck_assert_int_eq(o[i].times, 1);
	}
	ck_assert_int_eq(o[1].status, ETCD_FAILED);
	ck_assert_int_eq(o[4].status, ETCD_DOWN);
	ck_assert_int_eq(o[5].status, ETCD_DOWN);
}
END_TEST

/* Make calls o[0, n) with no file descriptor left, so that each fails
 * inside etcd_call (or etcd_call_lane on lane, if not 0), before it is
 * sent (a lane's first; the others wait for it). */
static void
calls_without_fds_lane(struct ef_outcome *o, int n, uint64_t lane)
{
	struct rlimit old, low;
	int fds[64], nfds = 0, fd;

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = 64;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	while (nfds < 64 && (fd = dup(0)) >= 0)
		fds[nfds++] = fd;
	ck_assert_int_eq(errno, EMFILE);
	for (int i = 0; i < n; i++) {
		if (lane == 0)
			ef_call_range("/l/a", &o[i]);
		else
			ef_call_lane(lane, "/l/a", &o[i]);
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
}

static void
calls_without_fds(struct ef_outcome *o, int n)
{
	calls_without_fds_lane(o, n, 0);
}

/* A call whose connection cannot even be started (no file descriptor left
 * for its socket) fails with ETCD_DOWN, from the loop like any other. */
START_TEST(test_callback_from_the_loop_when_connect_fails_at_once)
{
	struct ef_outcome o = { 0 };

	ef_cli = ef_client_of_fake();
	calls_without_fds(&o, 1);
	ck_assert_msg(!o.inside, "the callback ran inside etcd_call");
	ck_assert_int_eq(o.times, 0);
	GF_RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_DOWN);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(o.times, 1);
}
END_TEST

/* Calls that fail before they are sent are told from the loop, once each,
 * in the order they were made. */
START_TEST(test_failed_at_once_in_order)
{
	struct ef_outcome o[4] = { { 0 } };

	ef_cli = ef_client_of_fake();
	calls_without_fds(o, 4);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(o[i].times, 0);
	GF_RUN_UNTIL(o[3].times > 0);
	gf_settle(GF_SETTLE_MS);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(o[i].times, 1);
		ck_assert_int_eq(o[i].seq, i + 1);
		ck_assert_int_eq(o[i].status, ETCD_DOWN);
		ck_assert(!o[i].inside);
	}
}
END_TEST


/* ---- lanes ---------------------------------------------------------------- */

/* Assert that req is a Range of key. */
static void
assert_range_key(const struct fake_grpc_req *req, const char *key)
{
	Etcd__RangeRequest *rq = (Etcd__RangeRequest *)fake_grpc_req_msg(req,
	    &etcd__range_request__descriptor);
	ck_assert_ptr_nonnull(rq);
	ck_assert_msg(rq->key.len == strlen(key) && memcmp(rq->key.data, key, rq->key.len) == 0,
	    "a Range of %.*s, expected %s", (int)rq->key.len, (const char *)rq->key.data, key);
	protobuf_c_message_free_unpacked(&rq->base, NULL);
}

/* The n-th Range the fake received (from 1), once it has all come. */
static struct fake_grpc_req *
nth_range(int n)
{
	struct fake_grpc_req *req;
	GF_RUN_UNTIL(fake_grpc_count(gf_fake, FG_RANGE) >= n &&
	    (req = fake_grpc_last(gf_fake, FG_RANGE)) != NULL && req->ended);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_RANGE), n);
	return req;
}

/* Calls of one lane reach etcd one after the other, in the order they were
 * made: the next is sent once the one before is answered, never earlier. */
START_TEST(test_lane_one_at_a_time)
{
	static const char *keys[] = { "/l/1", "/l/2", "/l/3" };
	struct ef_outcome o[3] = { { 0 } };
	struct fake_grpc_req *req;

	ef_cli = ef_client_of_fake();
	for (int i = 0; i < 3; i++)
		ef_call_lane(5, keys[i], &o[i]);
	for (int i = 0; i < 3; i++) {
		req = nth_range(i + 1);
		gf_settle(GF_SETTLE_MS);
		/* the next waits */
		ck_assert_int_eq(fake_grpc_count(gf_fake, FG_RANGE), i + 1);
		ck_assert_int_eq(fake_grpc_npending(gf_fake, FG_RANGE), 1);
		assert_range_key(req, keys[i]);
		ck_assert_int_eq(ef_nresults, i);
		ef_reply_range(req, 10 + i);
		GF_RUN_UNTIL(o[i].times > 0);
	}
	gf_settle(GF_SETTLE_MS);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(o[i].times, 1);
		ck_assert_int_eq(o[i].seq, i + 1);
		ck_assert_int_eq(o[i].status, ETCD_OK);
		ck_assert_int_eq(o[i].rev, 10 + i);
		ck_assert(!o[i].inside);
	}
	ck_assert_int_eq(fake_grpc_count(gf_fake, NULL), 3);
	ck_assert_int_eq(fake_grpc_accepted(gf_fake), 1);
}
END_TEST

/* Calls of other lanes, of lane 0 and etcd_call go out at once, side by
 * side on one connection; only the second call of each lane waits, for
 * the first of its own lane alone. */
START_TEST(test_lanes_multiplexed)
{
	struct ef_outcome o[7] = { { 0 } };
	struct fake_grpc_req *reqs[5];
	static const char *first[] = { "/l/a1", "/l/b1", "/l/c", "/l/d", "/l/e" };

	ef_cli = ef_client_of_fake();
	ef_call_lane(1, "/l/a1", &o[0]);
	ef_call_lane(2, "/l/b1", &o[1]);
	ef_call_range("/l/c", &o[2]);
	ef_call_lane(0, "/l/d", &o[3]);
	ef_call_lane(0, "/l/e", &o[4]);
	ef_call_lane(1, "/l/a2", &o[5]);
	ef_call_lane(2, "/l/b2", &o[6]);
	GF_RUN_UNTIL(fake_grpc_count(gf_fake, FG_RANGE) == 5 &&
	    fake_grpc_nth(gf_fake, 4)->ended);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_RANGE), 5);
	ck_assert_int_eq(fake_grpc_npending(gf_fake, FG_RANGE), 5);
	for (int i = 0; i < 5; i++) {
		reqs[i] = fake_grpc_nth(gf_fake, i);
		assert_range_key(reqs[i], first[i]);
		ck_assert_int_eq(reqs[i]->conn_no, 1);
	}

	/* lane 0 and lane 2 answered: b2 goes, a2 still waits for a1 */
	for (int i = 4; i >= 1; i--)
		ef_reply_range(reqs[i], 20 + i);
	GF_RUN_UNTIL(o[1].times > 0 && o[2].times > 0 && o[3].times > 0 && o[4].times > 0);
	assert_range_key(nth_range(6), "/l/b2");
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_RANGE), 6);
	ck_assert_int_eq(o[0].times + o[5].times + o[6].times, 0);

	ef_reply_range(reqs[0], 30);
	GF_RUN_UNTIL(o[0].times > 0);
	assert_range_key(nth_range(7), "/l/a2");
	ef_reply_range(fake_grpc_nth(gf_fake, 5), 31);
	ef_reply_range(fake_grpc_nth(gf_fake, 6), 32);
	GF_RUN_UNTIL(o[5].times > 0 && o[6].times > 0);
	gf_settle(GF_SETTLE_MS);
	for (int i = 0; i < 7; i++) {
		ck_assert_int_eq(o[i].times, 1);
		ck_assert_int_eq(o[i].status, ETCD_OK);
	}
	ck_assert_int_eq(o[6].rev, 31);
	ck_assert_int_eq(o[5].rev, 32);
	ck_assert_int_eq(fake_grpc_accepted(gf_fake), 1);
}
END_TEST

/* The next call of a lane is sent when the one before it ends however it
 * ends: refused by etcd (ETCD_FAILED), timed out, its connection lost; its
 * own request timeout starts when it is sent. */
START_TEST(test_lane_after_failures)
{
	const char *eps[] = { fake_grpc_endpoint(gf_fake) };
	struct ef_outcome o[4] = { { 0 } };
	struct fake_grpc_req *req;
	uint64_t t0, took;

	ef_cli = ef_client(eps, 1, 200, NULL, NULL);
	ef_call_lane(3, "/l/1", &o[0]);
	ef_call_lane(3, "/l/2", &o[1]);
	ef_call_lane(3, "/l/3", &o[2]);
	ef_call_lane(3, "/l/4", &o[3]);

	req = nth_range(1);
	assert_range_key(req, "/l/1");
	t0 = clock_ms();	/* before the next is sent */
	fake_grpc_fail(req, 9, "refused", true);
	GF_RUN_UNTIL(o[0].times > 0);
	ck_assert_int_eq(o[0].status, ETCD_FAILED);
	ck_assert_int_eq(o[0].code, 9);

	req = nth_range(2);	/* left unanswered: it times out */
	assert_range_key(req, "/l/2");
	ck_assert_int_eq(o[1].times, 0);
	GF_RUN_UNTIL(o[1].times > 0);
	took = clock_ms() - t0;
	ck_assert_int_eq(o[1].status, ETCD_DOWN);
	ck_assert_str_eq(o[1].why, "timed out");
	ck_assert_msg(took >= 150, "timed out after %llu ms", (unsigned long long)took);

	req = nth_range(3);	/* on a new connection */
	assert_range_key(req, "/l/3");
	ck_assert_int_eq(req->conn_no, 2);
	fake_grpc_drop(gf_fake);
	GF_RUN_UNTIL(o[2].times > 0);
	ck_assert_int_eq(o[2].status, ETCD_DOWN);

	req = nth_range(4);
	assert_range_key(req, "/l/4");
	ck_assert_int_eq(req->conn_no, 3);
	gf_settle(100);		/* more than 200 ms since it was made */
	ef_reply_range(req, 40);
	GF_RUN_UNTIL(o[3].times > 0);
	ck_assert_int_eq(o[3].status, ETCD_OK);
	ck_assert_int_eq(o[3].rev, 40);
	gf_settle(GF_SETTLE_MS);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(o[i].times, 1);
		ck_assert_int_eq(o[i].seq, i + 1);
	}
}
END_TEST

/* Lane calls to an endpoint nothing listens on fail one after the other,
 * each once, in order, from the loop. */
START_TEST(test_lane_unreachable_in_order)
{
	char ep[32];
	const char *eps[] = { ep };
	struct ef_outcome o[3] = { { 0 } };

	snprintf(ep, sizeof(ep), "127.0.0.1:%d", gf_dead_port());
	ef_cli = ef_client(eps, 1, EF_TIMEOUT_MS, NULL, NULL);
	for (int i = 0; i < 3; i++)
		ef_call_lane(9, "/l/a", &o[i]);
	GF_RUN_UNTIL(o[2].times > 0);
	gf_settle(GF_SETTLE_MS);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(o[i].times, 1);
		ck_assert_int_eq(o[i].seq, i + 1);
		ck_assert_int_eq(o[i].status, ETCD_DOWN);
		ck_assert(!o[i].inside);
	}
}
END_TEST

/* A lane's first call fails before it is sent (no file descriptor for
 * its connection): it is told from the loop, and then the next of its lane
 * goes out and is answered. */
START_TEST(test_lane_after_a_call_failed_at_once)
{
	struct ef_outcome o[2] = { { 0 } };

	ef_route_range(gf_fake, 3, 0);
	ef_cli = ef_client_of_fake();
	calls_without_fds_lane(o, 2, 6);
	ck_assert_int_eq(o[0].times + o[1].times, 0);
	GF_RUN_UNTIL(o[1].times > 0);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(o[0].times, 1);
	ck_assert_int_eq(o[0].status, ETCD_DOWN);
	ck_assert_int_eq(o[1].times, 1);
	ck_assert_int_eq(o[1].status, ETCD_OK);
	ck_assert_int_eq(o[1].seq, 2);
	ck_assert(!o[0].inside && !o[1].inside);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_RANGE), 1);
}
END_TEST

/* A call of a lane made by the callback of the call before it in that lane
 * goes after the calls already queued there; made when none is queued, it
 * is sent once that callback returns. */
START_TEST(test_lane_call_from_the_callback_keeps_order)
{
	static const char *keys[] = { "/l/A", "/l/B", "/l/C", "/l/D", "/l/E" };
	struct ef_outcome o[5] = { { 0 } }, other = { 0 };
	struct fake_grpc_req *req;

	ef_cli = ef_client_of_fake();
	ef_call_lane(7, "/l/A", &o[0]);
	ef_call_lane(7, "/l/B", &o[1]);
	o[0].then = &o[2];		/* A's callback: C, after B */
	o[0].then_lane = 7;
	o[0].then_key = "/l/C";
	o[1].then = &o[3];		/* B's: D, after C */
	o[1].then_lane = 7;
	o[1].then_key = "/l/D";
	o[3].then = &o[4];		/* D's, with nothing queued: E */
	o[3].then_lane = 7;
	o[3].then_key = "/l/E";
	for (int i = 0; i < 5; i++) {
		req = nth_range(i + 1);
		gf_settle(GF_SETTLE_MS);
		ck_assert_int_eq(fake_grpc_count(gf_fake, FG_RANGE), i + 1);
		ck_assert_int_eq(fake_grpc_npending(gf_fake, FG_RANGE), 1);
		assert_range_key(req, keys[i]);
		ef_reply_range(req, 50 + i);
		GF_RUN_UNTIL(o[i].times > 0);
	}
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_RANGE), 5);
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(o[i].times, 1);
		ck_assert_int_eq(o[i].seq, i + 1);
		ck_assert_int_eq(o[i].rev, 50 + i);
		ck_assert(!o[i].inside);
	}

	/* a call of another lane from a callback goes at once */
	o[0] = (struct ef_outcome){ .then = &other, .then_lane = 8, .then_key = "/l/X" };
	memset(&o[1], 0, sizeof(o[1]));
	ef_call_lane(7, "/l/A", &o[0]);
	ef_call_lane(7, "/l/B", &o[1]);
	req = nth_range(6);
	ef_reply_range(req, 60);
	GF_RUN_UNTIL(fake_grpc_count(gf_fake, FG_RANGE) == 8 &&
	    fake_grpc_nth(gf_fake, 7)->ended);
	ck_assert_int_eq(fake_grpc_npending(gf_fake, FG_RANGE), 2);
	ef_reply_range(fake_grpc_nth(gf_fake, 6), 61);
	ef_reply_range(fake_grpc_nth(gf_fake, 7), 62);
	GF_RUN_UNTIL(o[1].times > 0 && other.times > 0);
	ck_assert_int_eq(other.status, ETCD_OK);
}
END_TEST

/* etcd_destroy with lane calls sent and others queued behind them, from
 * the test or from the callback of a lane's first call: the queued ones
 * are never sent nor told, and are freed. */
START_TEST(test_destroy_with_lane_calls_queued)
{
	struct ef_outcome o[6] = { { 0 } }, p[3] = { { 0 } }, q[3] = { { 0 } };

	ef_cli = ef_client_of_fake();
	for (int i = 0; i < 6; i++)
		ef_call_lane(i < 3 ? 1 : 2, "/l/a", &o[i]);
	GF_RUN_UNTIL(fake_grpc_count(gf_fake, FG_RANGE) == 2);
	etcd_destroy(ef_cli);
	ef_cli = NULL;
	gf_settle(GF_SETTLE_MS);
	for (int i = 0; i < 6; i++)
		ck_assert_msg(o[i].times == 0, "call %d: callback after etcd_destroy", i);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_RANGE), 2);

	/* before the loop ran */
	ef_cli = ef_client_of_fake();
	for (int i = 0; i < 3; i++)
		ef_call_lane(4, "/l/b", &p[i]);
	etcd_destroy(ef_cli);
	ef_cli = NULL;
	gf_settle(GF_SETTLE_MS);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(p[i].times, 0);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_RANGE), 2);

	/* from the callback of the first */
	ef_cli = ef_client_of_fake();
	q[0].destroy = true;
	for (int i = 0; i < 3; i++)
		ef_call_lane(5, "/l/c", &q[i]);
	ef_reply_range(nth_range(3), 1);
	GF_RUN_UNTIL(q[0].times > 0);
	ck_assert_ptr_null(ef_cli);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(q[0].times, 1);
	ck_assert_int_eq(q[1].times, 0);
	ck_assert_int_eq(q[2].times, 0);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_RANGE), 3);
}
END_TEST


/* ---- authentication ------------------------------------------------------- */

/* Route gf_fake's Authenticate to answer token. */
static void
route_auth(const char *token)
{
	Etcd__AuthenticateResponse ar = ETCD__AUTHENTICATE_RESPONSE__INIT;
	ar.header = ef_header(1);
	ar.token = (char *)(uintptr_t)token;
	fake_grpc_route(gf_fake, FG_AUTH, &ar.base);
}

/* With a user name, the first calls wait for one Authenticate with the name
 * and password, then go out with the token as "token" metadata; so do later
 * calls, without authenticating again. */
START_TEST(test_auth_token)
{
	const char *eps[] = { fake_grpc_endpoint(gf_fake) };
	struct ef_outcome o = { 0 }, p = { 0 }, q = { 0 };
	Etcd__AuthenticateRequest *ar;
	struct fake_grpc_req *req;

	route_auth("T1");
	ef_route_range(gf_fake, 1, 0);
	ef_cli = ef_client(eps, 1, EF_TIMEOUT_MS, "alice", "s3cret");
	ef_call_range("/l/a", &o);
	ef_call_range("/l/b", &p);
	GF_RUN_UNTIL(o.times > 0 && p.times > 0);
	ck_assert(!o.inside && !p.inside);
	ck_assert_int_eq(o.status, ETCD_OK);
	ck_assert_int_eq(p.status, ETCD_OK);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_AUTH), 1);
	req = fake_grpc_nth(gf_fake, 0);
	ck_assert_str_eq(req->path, FG_AUTH);
	ck_assert(!req->has_token);
	ar = (Etcd__AuthenticateRequest *)fake_grpc_req_msg(req,
	    &etcd__authenticate_request__descriptor);
	ck_assert_str_eq(ar->name, "alice");
	ck_assert_str_eq(ar->password, "s3cret");
	protobuf_c_message_free_unpacked(&ar->base, NULL);
	ck_assert_int_eq(fake_grpc_count(gf_fake, NULL), 3);
	for (int i = 1; i < 3; i++) {
		req = fake_grpc_nth(gf_fake, i);
		ck_assert_str_eq(req->path, FG_RANGE);
		ck_assert(req->has_token);
		ck_assert_str_eq(req->token, "T1");
	}

	ef_call_range("/l/c", &q);
	GF_RUN_UNTIL(q.times > 0);
	ck_assert_int_eq(q.status, ETCD_OK);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_AUTH), 1);
	ck_assert_str_eq(fake_grpc_last(gf_fake, FG_RANGE)->token, "T1");
}
END_TEST

/* Answer a Range with UNAUTHENTICATED when its token is T1 (or always
 * when arg is not NULL), else with a RangeResponse. */
static void
range_needs_new_token(void *arg, struct fake_grpc_req *req)
{
	if (arg != NULL || strcmp(req->token, "T1") == 0)
		fake_grpc_fail(req, 16, EF_INVALID_TOKEN, true);
	else
		ef_reply_range(req, 42);
}

/* A token etcd no longer takes (code 16, "invalid auth token"): the client
 * authenticates again and sends the call once more with the new token; a
 * call refused twice fails with code 16. */
START_TEST(test_auth_token_expired)
{
	const char *eps[] = { fake_grpc_endpoint(gf_fake) };
	struct ef_outcome o = { 0 }, p = { 0 }, q = { 0 };
	static int always = 1;

	route_auth("T1");
	ef_route_range(gf_fake, 1, 0);
	ef_cli = ef_client(eps, 1, EF_TIMEOUT_MS, "alice", "s3cret");
	ef_call_range("/l/a", &o);
	GF_RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_OK);

	fake_grpc_route_fn(gf_fake, FG_RANGE, range_needs_new_token, NULL);
	route_auth("T2");
	ef_call_range("/l/a", &p);
	GF_RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.status, ETCD_OK);
	ck_assert_int_eq(p.rev, 42);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_AUTH), 2);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_RANGE), 3);
	ck_assert_str_eq(fake_grpc_last(gf_fake, FG_RANGE)->token, "T2");

	fake_grpc_route_fn(gf_fake, FG_RANGE, range_needs_new_token, &always);
	route_auth("T3");
	ef_call_range("/l/a", &q);
	GF_RUN_UNTIL(q.times > 0);
	ck_assert_int_eq(q.status, ETCD_FAILED);
	ck_assert_int_eq(q.code, 16);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_RANGE), 5);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_AUTH), 3);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(q.times, 1);
}
END_TEST

/* A lane call refused for an expired token is sent again with the new one
 * before the next call of its lane goes out, with the new token too. */
START_TEST(test_auth_lane_call_resent_first)
{
	const char *eps[] = { fake_grpc_endpoint(gf_fake) };
	struct ef_outcome o[2] = { { 0 } };
	struct fake_grpc_req *req;

	route_auth("T1");
	ef_cli = ef_client(eps, 1, EF_TIMEOUT_MS, "alice", "s3cret");
	ef_call_lane(4, "/l/1", &o[0]);
	ef_call_lane(4, "/l/2", &o[1]);
	req = nth_range(1);
	ck_assert_str_eq(req->token, "T1");
	route_auth("T2");
	fake_grpc_fail(req, 16, EF_INVALID_TOKEN, true);
	req = nth_range(2);
	assert_range_key(req, "/l/1");
	ck_assert_str_eq(req->token, "T2");
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_RANGE), 2);
	ck_assert_int_eq(o[0].times, 0);
	ef_reply_range(req, 5);
	GF_RUN_UNTIL(o[0].times > 0);
	ck_assert_int_eq(o[0].status, ETCD_OK);
	req = nth_range(3);
	assert_range_key(req, "/l/2");
	ck_assert_str_eq(req->token, "T2");
	ef_reply_range(req, 6);
	GF_RUN_UNTIL(o[1].times > 0);
	ck_assert_int_eq(o[1].status, ETCD_OK);
	ck_assert_int_eq(o[1].seq, 2);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_AUTH), 2);
}
END_TEST

/* etcd refusing the user (code 3, as etcd answers a wrong password) fails
 * the calls that waited for the token with ETCD_FAILED and the reason;
 * none of them is sent; the client is down for that reason. */
START_TEST(test_auth_refused)
{
	const char *eps[] = { fake_grpc_endpoint(gf_fake) };
	struct ef_outcome o = { 0 }, p = { 0 };

	fake_grpc_route_error(gf_fake, FG_AUTH, 3, AUTH_REFUSED, true);
	ef_route_range(gf_fake, 1, 0);
	ef_cli = ef_client(eps, 1, EF_TIMEOUT_MS, "alice", "wrong");
	ef_call_range("/l/a", &o);
	ef_call_range("/l/b", &p);
	GF_RUN_UNTIL(o.times > 0 && p.times > 0);
	ck_assert(!o.inside && !p.inside);
	ck_assert_int_eq(o.status, ETCD_FAILED);
	ck_assert_int_eq(p.status, ETCD_FAILED);
	ck_assert_int_eq(o.code, 3);
	ck_assert_str_eq(o.why, "authentication failed: " AUTH_REFUSED);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_AUTH), 1);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_RANGE), 0);
	ck_assert(!etcd_up(ef_cli));
	ck_assert_ptr_nonnull(strstr(etcd_why_down(ef_cli), "authentication failed: "));
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(o.times, 1);
	ck_assert_int_eq(p.times, 1);
}
END_TEST

/* The watch waits for the token too, and carries it. */
START_TEST(test_auth_watch)
{
	const char *eps[] = { fake_grpc_endpoint(gf_fake) };
	struct fake_grpc_req *req;

	route_auth("T1");
	ef_cli = ef_client(eps, 1, EF_TIMEOUT_MS, "alice", "s3cret");
	ef_watch_start("/l/");
	req = ef_watch_req();
	ck_assert_str_eq(req->token, "T1");
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_AUTH), 1);
	ef_watch_send(req, 5, NULL);
	GF_RUN_UNTIL(ef_nmsgs == 1);
}
END_TEST


/* ---- destroy -------------------------------------------------------------- */

/* etcd_destroy with calls in flight (sent and unanswered, waiting for a
 * token) and a watch stream running with a message begun: no callback or
 * hook runs afterwards, and everything is freed. */
START_TEST(test_destroy_with_work_in_flight)
{
	const char *eps[] = { fake_grpc_endpoint(gf_fake) };
	struct ef_outcome o[5] = { { 0 } };
	struct fake_grpc_req *req;
	struct etcd *authed;
	size_t len;
	uint8_t *p;

	ef_cli = ef_client_of_fake();
	ef_call_m(ETCD_TXN, &o[0]);
	ef_call_m(ETCD_TXN, &o[1]);
	ef_watch_start("/l/");
	req = ef_watch_req();
	GF_RUN_UNTIL(fake_grpc_npending(gf_fake, FG_TXN) == 2);
	ef_watch_send(req, 5, NULL);
	GF_RUN_UNTIL(ef_nmsgs == 1);
	p = ef_watch_frame(6, "/l/a", &len);
	fake_grpc_send(req, p, 10);	/* a message begun */
	free(p);
	gf_deliver();
	ef_call_m(ETCD_TXN, &o[2]);	/* not sent yet */

	/* the fake keeps the auth */
	authed = ef_client(eps, 1, EF_TIMEOUT_MS, "alice", "s3cret");
	{
		struct etcd *keep = ef_cli;
		ef_cli = authed;
		ef_call_range("/l/a", &o[3]);
		ef_call_range("/l/a", &o[4]);
		ef_cli = keep;
	}
	GF_RUN_UNTIL(fake_grpc_count(gf_fake, FG_AUTH) == 1);

	etcd_destroy(ef_cli);
	ef_cli = NULL;
	etcd_destroy(authed);
	gf_settle(GF_SETTLE_MS);
	for (int i = 0; i < 5; i++)
		ck_assert_msg(o[i].times == 0, "call %d: callback after etcd_destroy", i);
	ck_assert_int_eq(ef_nmsgs, 1);
}
END_TEST

/* etcd_destroy right after calls and a watch were asked for, before the
 * loop ran: nothing runs afterwards. */
START_TEST(test_destroy_before_the_loop)
{
	struct ef_outcome o = { 0 }, p = { 0 };
	char dead[32];
	const char *deps[] = { dead };
	struct etcd *down;

	ef_route_range(gf_fake, 1, 0);
	ef_cli = ef_client_of_fake();
	ef_call_range("/l/a", &o);
	ef_watch_start("/l/");
	snprintf(dead, sizeof(dead), "127.0.0.1:%d", gf_dead_port());
	down = ef_client(deps, 1, EF_TIMEOUT_MS, NULL, NULL);
	{
		struct etcd *keep = ef_cli;
		ef_cli = down;
		ef_call_range("/l/a", &p);
		ef_cli = keep;
	}
	etcd_destroy(ef_cli);
	ef_cli = NULL;
	etcd_destroy(down);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(o.times, 0);
	ck_assert_int_eq(p.times, 0);
	ck_assert_int_eq(ef_nmsgs, 0);
	ck_assert_int_eq(ef_nstates, 0);
}
END_TEST

/* A client destroyed by the callback of an answered call, with others
 * answered in the same read and others pending: nobody else is told. */
START_TEST(test_destroy_from_a_callback)
{
	struct ef_outcome o[4] = { { 0 } };
	struct fake_grpc_req *reqs[4];

	ef_cli = ef_client_of_fake();
	for (int i = 0; i < 4; i++)
		ef_call_range("/l/a", &o[i]);
	ef_watch_start("/l/");
	GF_RUN_UNTIL(fake_grpc_npending(gf_fake, FG_RANGE) == 4);
	for (int i = 0; i < 4; i++)
		reqs[i] = fake_grpc_nth(gf_fake, i);
	o[1].destroy = true;
	ef_reply_range(reqs[0], 1);
	ef_reply_range(reqs[1], 2);
	ef_reply_range(reqs[2], 3);
	GF_RUN_UNTIL(o[1].times > 0);
	ck_assert_ptr_null(ef_cli);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(o[0].times, 1);
	ck_assert_int_eq(o[1].times, 1);
	ck_assert_int_eq(o[2].times, 0);
	ck_assert_int_eq(o[3].times, 0);
	ck_assert_int_eq(ef_nmsgs, 0);
}
END_TEST

/* A client destroyed with failed calls not told yet tells none of them. */
START_TEST(test_destroy_with_failed_calls)
{
	struct ef_outcome o[3] = { { 0 } };

	ef_cli = ef_client_of_fake();
	calls_without_fds(o, 3);
	etcd_destroy(ef_cli);
	ef_cli = NULL;
	gf_settle(GF_SETTLE_MS);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(o[i].times, 0);
}
END_TEST

/* A client destroyed by the callback of a failed call tells the others
 * nothing. */
START_TEST(test_destroy_from_a_failed_call)
{
	struct ef_outcome o[3] = { { 0 } };

	ef_cli = ef_client_of_fake();
	o[1].destroy = true;
	calls_without_fds(o, 3);
	GF_RUN_UNTIL(o[1].times > 0);
	ck_assert_ptr_null(ef_cli);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(o[0].times, 1);
	ck_assert_int_eq(o[1].times, 1);
	ck_assert_int_eq(o[2].times, 0);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("etcd");

	suite_case(s, "calls", ef_setup, ef_teardown, 0, SUITE_TESTS(test_call_answered,
	    test_call_error_status, test_call_without_message, test_message_over_the_limit,
	    test_many_calls_one_connection, test_keepalive, test_unreachable_endpoint,
	    test_down_after_up, test_connection_lost_with_calls, test_failover_to_next_endpoint,
	    test_timeout, test_connect_timeout, test_callbacks_from_the_loop,
	    test_callback_from_the_loop_when_connect_fails_at_once,
	    test_failed_at_once_in_order));
	suite_case(s, "lanes", ef_setup, ef_teardown, 0, SUITE_TESTS(test_lane_one_at_a_time,
	    test_lanes_multiplexed, test_lane_after_failures, test_lane_unreachable_in_order,
	    test_lane_after_a_call_failed_at_once, test_lane_call_from_the_callback_keeps_order,
	    test_destroy_with_lane_calls_queued));
	suite_case(s, "auth", ef_setup, ef_teardown, 0, SUITE_TESTS(test_auth_token,
	    test_auth_token_expired, test_auth_refused, test_auth_watch,
	    test_auth_lane_call_resent_first));
	suite_case(s, "destroy", ef_setup, ef_teardown, 0,
	    SUITE_TESTS(test_destroy_with_work_in_flight, test_destroy_before_the_loop,
	    test_destroy_from_a_callback, test_destroy_with_failed_calls,
	    test_destroy_from_a_failed_call));
	return gf_main(s);
}
