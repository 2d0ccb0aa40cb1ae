/*
 * check_etcd_watch — unit tests of the watch stream of etcd's gRPC client
 * (daemon/etcd/etcd.c): one Watch stream, its messages cut into DATA frames
 * any way, garbage, its end by etcd, stopped or started again or the client
 * destroyed from the hook, an endpoint unreachable or given up, and the
 * PING of an idle watch's connection.
 *
 * No etcd: each test talks to a fake gRPC server (tests/fake_grpc.c) on
 * the client's own loop (tests/grpc_fixture.c, tests/etcd_fixture.c).
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>

#include "clock.h"
#include "etcd.h"
#include "etcd_fixture.h"
#include "fake_grpc.h"
#include "grpc.h"
#include "suite.h"

/* The text the watch hook records for such a message. */
static void
watch_text(char *buf, size_t size, int64_t rev, const char *key)
{
	if (key == NULL)
		snprintf(buf, size, "rev=%lld created", (long long)rev);
	else
		snprintf(buf, size, "rev=%lld DELETE %s", (long long)rev, key);
}

/* Assert that the hook's n-th message is that of rev and key. */
static void
assert_msg(int n, int64_t rev, const char *key)
{
	char want[128];
	watch_text(want, sizeof(want), rev, key);
	ck_assert_int_gt(ef_nmsgs, n);
	ck_assert_msg(strcmp(ef_msgs[n], want) == 0, "message %d: got %s, expected %s", n,
	    ef_msgs[n], want);
}

/* A client of gf_fake with a watch stream the fake has its create request of. */
static struct fake_grpc_req *
watch_up(void)
{
	ef_cli = ef_client_of_fake();
	ef_watch_start("/l/");
	ck_assert(etcd_watching(ef_cli));
	return ef_watch_req();
}

/* The stream is one Watch/Watch stream with the create request, left open;
 * each message reaches the hook once, in order: a message in a DATA frame of
 * its own, one cut across three frames, two in one frame. */
START_TEST(test_watch_messages)
{
	struct fake_grpc_req *req = watch_up();
	Etcd__WatchRequest *wr;
	struct etcd_stats st;
	size_t len, l2;
	uint8_t *p, *q;

	ck_assert_str_eq(req->ctype, "application/grpc");
	ck_assert(!req->ended);
	wr = (Etcd__WatchRequest *)fake_grpc_req_msg(req, &etcd__watch_request__descriptor);
	ck_assert_int_eq(wr->request_union_case,
	    ETCD__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST);
	ck_assert_uint_eq(wr->create_request->key.len, 3);
	ck_assert(memcmp(wr->create_request->key.data, "/l/", 3) == 0);
	ck_assert_int_eq(wr->create_request->start_revision, 5);
	ck_assert_uint_eq(wr->create_request->n_filters, 1);
	protobuf_c_message_free_unpacked(&wr->base, NULL);

	ef_watch_send(req, 5, NULL);
	GF_RUN_UNTIL(ef_nmsgs == 1);
	assert_msg(0, 5, NULL);
	ck_assert(etcd_up(ef_cli));	/* etcd answered */

	p = ef_watch_frame(6, "/l/a", &len);
	fake_grpc_send(req, p, 3);
	gf_deliver();
	fake_grpc_send(req, p + 3, len / 2 - 3);
	gf_deliver();
	ck_assert_int_eq(ef_nmsgs, 1);
	fake_grpc_send(req, p + len / 2, len - len / 2);
	gf_deliver();
	GF_RUN_UNTIL(ef_nmsgs == 2);
	assert_msg(1, 6, "/l/a");
	free(p);

	p = ef_watch_frame(7, "/l/b", &len);
	q = ef_watch_frame(8, "/l/c", &l2);
	p = realloc(p, len + l2);
	memcpy(p + len, q, l2);
	fake_grpc_send(req, p, len + l2);
	free(p);
	free(q);
	GF_RUN_UNTIL(ef_nmsgs >= 3);
	ck_assert_int_eq(ef_nmsgs, 3 + 1);
	assert_msg(2, 7, "/l/b");
	assert_msg(3, 8, "/l/c");

	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(ef_nmsgs, 4);
	ck_assert(etcd_watching(ef_cli));
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_WATCH), 1);
	etcd_stats(ef_cli, &st);
	ck_assert_uint_eq(st.messages, 4);
	ck_assert_uint_eq(st.watches, 1);
	ck_assert_uint_eq(st.streams, 1);
}
END_TEST

/* Messages sent one byte per DATA frame reach the hook once each, whole. */
START_TEST(test_watch_one_byte_per_frame)
{
	struct fake_grpc_req *req = watch_up();
	size_t l1, l2;
	uint8_t *a = ef_watch_frame(5, NULL, &l1), *b = ef_watch_frame(6, "/l/a", &l2);

	for (size_t i = 0; i < l1 + l2; i++) {
		fake_grpc_send(req, i < l1 ? a + i : b + i - l1, 1);
		gf_deliver();
		/* a message comes once its last byte has */
		ck_assert_int_eq(ef_nmsgs, i + 1 < l1 ? 0 : i + 1 < l1 + l2 ? 1 : 2);
	}
	GF_RUN_UNTIL(ef_nmsgs == 2);
	assert_msg(0, 5, NULL);
	assert_msg(1, 6, "/l/a");
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(ef_nmsgs, 2);
	ck_assert(etcd_watching(ef_cli));
	free(a);
	free(b);
}
END_TEST

/* A compressed message or one that does not unpack ends the stream: the
 * hook gets NULL, from the loop, once; the client is no longer watching,
 * and the stream is cancelled. */
START_TEST(test_watch_garbage)
{
	struct fake_grpc_req *req = watch_up();

	ef_watch_send(req, 5, NULL);
	GF_RUN_UNTIL(ef_nmsgs == 1);
	fake_grpc_send(req, "\1\0\0\0\2\x08\x01", 7);
	GF_RUN_UNTIL(ef_nmsgs == 2);
	ck_assert_str_eq(ef_msgs[1], "NULL");
	ck_assert(!etcd_watching(ef_cli));
	GF_RUN_UNTIL(req->closed);
	ck_assert_uint_eq(req->close_code, NGHTTP2_CANCEL);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(ef_nmsgs, 2);

	ef_watch_start("/l/");
	req = ef_watch_req();
	fake_grpc_send(req, "\0\0\0\0\3\xff\xff\xff", 8);
	GF_RUN_UNTIL(ef_nmsgs == 3);
	ck_assert_str_eq(ef_msgs[2], "NULL");
	ck_assert(!etcd_watching(ef_cli));
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(ef_nmsgs, 3);
}
END_TEST

/* etcd ending the stream (OK or an error status): the hook gets NULL, once. */
START_TEST(test_watch_stream_ends)
{
	struct fake_grpc_req *req = watch_up();

	ef_watch_send(req, 5, NULL);
	GF_RUN_UNTIL(ef_nmsgs == 1);
	fake_grpc_end(req, 0, NULL);
	GF_RUN_UNTIL(ef_nmsgs == 2);
	ck_assert_str_eq(ef_msgs[1], "NULL");
	ck_assert(!etcd_watching(ef_cli));
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(ef_nmsgs, 2);

	ef_watch_start("/l/");
	req = ef_watch_req();
	fake_grpc_fail(req, 16, EF_INVALID_TOKEN, true);
	GF_RUN_UNTIL(ef_nmsgs == 3);
	ck_assert_str_eq(ef_msgs[2], "NULL");
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(ef_nmsgs, 3);
}
END_TEST

/* etcd_watch_stop ends the stream (cancelled) without a NULL message;
 * etcd_watch on a running stream replaces it, without a NULL message
 * either. */
START_TEST(test_watch_stop_is_silent)
{
	struct fake_grpc_req *req = watch_up(), *r2;
	Etcd__WatchRequest *wr;

	ef_watch_send(req, 5, NULL);
	GF_RUN_UNTIL(ef_nmsgs == 1);
	etcd_watch_stop(ef_cli);
	ck_assert(!etcd_watching(ef_cli));
	GF_RUN_UNTIL(req->closed);
	ck_assert_uint_eq(req->close_code, NGHTTP2_CANCEL);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(ef_nmsgs, 1);

	ef_watch_start("YQ");
	req = ef_watch_req();
	ef_watch_send(req, 5, NULL);
	GF_RUN_UNTIL(ef_nmsgs == 2);
	ef_watch_start("Yg");
	r2 = ef_watch_req();
	wr = (Etcd__WatchRequest *)fake_grpc_req_msg(r2, &etcd__watch_request__descriptor);
	ck_assert(memcmp(wr->create_request->key.data, "Yg", 2) == 0);
	protobuf_c_message_free_unpacked(&wr->base, NULL);
	GF_RUN_UNTIL(req->closed);
	ef_watch_send(r2, 6, "/l/a");
	GF_RUN_UNTIL(ef_nmsgs == 3);
	assert_msg(2, 6, "/l/a");
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(ef_nmsgs, 3);
	ck_assert(etcd_watching(ef_cli));
	etcd_watch_stop(ef_cli);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(ef_nmsgs, 3);
	ck_assert_int_eq(fake_grpc_accepted(gf_fake), 1);
}
END_TEST

/* Send a created message (revision 5) and a DELETE of /l/a (6) in one
 * DATA frame on req. */
static void
send_two_in_one_frame(struct fake_grpc_req *req)
{
	size_t l1, l2;
	uint8_t *a = ef_watch_frame(5, NULL, &l1), *b = ef_watch_frame(6, "/l/a", &l2);

	a = realloc(a, l1 + l2);
	memcpy(a + l1, b, l2);
	fake_grpc_send(req, a, l1 + l2);
	free(a);
	free(b);
}

/* The hook may stop the stream while it is given a message: the messages
 * after it in the same frame are dropped, and no NULL message follows. */
START_TEST(test_watch_stopped_from_the_hook)
{
	struct fake_grpc_req *req = watch_up();

	ef_stop_at = 1;
	send_two_in_one_frame(req);
	GF_RUN_UNTIL(ef_nmsgs == 1);
	ck_assert(!etcd_watching(ef_cli));
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(ef_nmsgs, 1);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_WATCH), 1);
}
END_TEST

/* The hook may start another stream while it is given a message: the
 * messages after it in the same frame belong to the stream replaced and
 * are dropped; no NULL message follows, and the new stream's messages come. */
START_TEST(test_watch_restarted_from_the_hook)
{
	struct fake_grpc_req *req = watch_up();

	ef_restart_at = 1;
	send_two_in_one_frame(req);
	GF_RUN_UNTIL(fake_grpc_count(gf_fake, FG_WATCH) == 2);
	req = ef_watch_req();
	ck_assert_msg(ef_nmsgs == 1, "%d messages after the restart, the last %s", ef_nmsgs,
	    ef_msgs[ef_nmsgs - 1]);
	ck_assert(etcd_watching(ef_cli));
	ef_watch_send(req, 8, "/l/c");
	GF_RUN_UNTIL(ef_nmsgs == 2);
	assert_msg(1, 8, "/l/c");
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(ef_nmsgs, 2);
}
END_TEST

/* The hook may destroy the client: nothing more is told. */
START_TEST(test_watch_destroyed_from_the_hook)
{
	struct fake_grpc_req *req = watch_up();

	ef_destroy_at = 1;
	send_two_in_one_frame(req);
	GF_RUN_UNTIL(ef_nmsgs == 1);
	ck_assert_ptr_null(ef_cli);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(ef_nmsgs, 1);
}
END_TEST

/* A stream to an endpoint nothing listens on ends with a NULL message. */
START_TEST(test_watch_unreachable)
{
	char dead[32];
	const char *deps[] = { dead };

	snprintf(dead, sizeof(dead), "127.0.0.1:%d", gf_dead_port());
	ef_cli = ef_client(deps, 1, EF_TIMEOUT_MS, NULL, NULL);
	ef_watch_start("/l/");
	ck_assert_int_eq(ef_nmsgs, 0);
	GF_RUN_UNTIL(ef_nmsgs == 1);
	ck_assert_str_eq(ef_msgs[0], "NULL");
	ck_assert(!etcd_watching(ef_cli));
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(ef_nmsgs, 1);
}
END_TEST

/* When a call times out on the connection the stream is on, the client
 * moves to the next endpoint and the stream ends (NULL) so that its owner
 * starts it again there. */
START_TEST(test_watch_ends_when_its_endpoint_is_given_up)
{
	struct fake_grpc *other = fake_grpc_new(gf_base);
	const char *eps[] = { fake_grpc_endpoint(gf_fake), fake_grpc_endpoint(other) };
	struct ef_outcome o = { 0 };
	struct fake_grpc_req *req;

	ef_cli = ef_client(eps, 2, 200, NULL, NULL);
	ef_watch_start("/l/");
	req = ef_watch_req();
	ef_watch_send(req, 5, NULL);
	GF_RUN_UNTIL(ef_nmsgs == 1);

	ef_call_m(ETCD_TXN, &o);	/* gf_fake keeps it: it times out */
	GF_RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_DOWN);
	ck_assert_str_eq(etcd_endpoint(ef_cli), fake_grpc_endpoint(other));
	GF_RUN_UNTIL(ef_nmsgs == 2);
	ck_assert_str_eq(ef_msgs[1], "NULL");
	ck_assert(!etcd_watching(ef_cli));
	etcd_destroy(ef_cli);
	ef_cli = NULL;
	fake_grpc_free(other);
}
END_TEST

/* An idle watch's connection is checked with a PING: answered, it lives
 * on; unanswered within the request timeout, the connection is given up
 * and the stream ends. */
START_TEST(test_watch_idle_ping)
{
	const char *eps[] = { fake_grpc_endpoint(gf_fake) };
	struct fake_grpc_req *req;
	uint64_t t0;

	ef_cli = ef_client_ping(eps, 1, 200, NULL, NULL, 100);
	ef_watch_start("/l/");
	req = ef_watch_req();
	ef_watch_send(req, 5, NULL);
	GF_RUN_UNTIL(ef_nmsgs == 1);
	gf_settle(600);	/* PINGs answered */
	ck_assert_int_eq(ef_nmsgs, 1);
	ck_assert(etcd_watching(ef_cli));
	ck_assert_int_eq(fake_grpc_accepted(gf_fake), 1);

	fake_grpc_deaf(gf_fake, true);
	t0 = clock_ms();
	GF_RUN_UNTIL(ef_nmsgs == 2);
	ck_assert_str_eq(ef_msgs[1], "NULL");
	ck_assert_msg(clock_ms() - t0 < 1000, "given up after %llu ms",
	    (unsigned long long)(clock_ms() - t0));
	ck_assert(!etcd_up(ef_cli));
	ck_assert_msg(strstr(etcd_why_down(ef_cli), "timed out") != NULL, "why: %s",
	    etcd_why_down(ef_cli));
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("etcd_watch");

	suite_case(s, "watch", ef_setup, ef_teardown, 0, SUITE_TESTS(test_watch_messages,
	    test_watch_one_byte_per_frame, test_watch_garbage, test_watch_stream_ends,
	    test_watch_stop_is_silent, test_watch_stopped_from_the_hook,
	    test_watch_restarted_from_the_hook, test_watch_destroyed_from_the_hook,
	    test_watch_unreachable, test_watch_ends_when_its_endpoint_is_given_up,
	    test_watch_idle_ping));
	return gf_main(s);
}
