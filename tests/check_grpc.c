/*
 * check_grpc — unit tests of the gRPC transport (daemon/grpc.c): the
 * reading of messages, grpc-status and grpc-message; then calls on a
 * connection to a fake server: unary calls answered, refused with a status,
 * reset, garbled; a call answered by its first message; a streaming call
 * whose messages come whole whatever the DATA frames; a stream detached; a
 * connection freed from a hook; a connection refused, closed by the server,
 * checked with PINGs, told GOAWAY.
 *
 * The messages are etcd's RangeRequest and RangeResponse, as any protobuf
 * would do; the methods are the tests' own. The fake (tests/fake_grpc.c)
 * keeps every request to them pending until the test answers it, on the
 * test's own loop (tests/grpc_fixture.c).
 */
#include <check.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>

#include "clock.h"
#include "etcd.pb-c.h"
#include "etcd_fixture.h"
#include "fake_grpc.h"
#include "grpc.h"
#include "grpc_fixture.h"
#include "suite.h"

/* ---- gRPC messages ------------------------------------------------------------ */

/* A RangeResponse with two keys, framed, in buf. */
static void
add_range_frame(struct evbuffer *buf, int64_t rev)
{
	Etcd__RangeResponse rr = ETCD__RANGE_RESPONSE__INIT;
	Etcd__KeyValue kv[2], *kvp[2] = { &kv[0], &kv[1] };
	size_t len;
	uint8_t *p;
	for (int i = 0; i < 2; i++) {
		etcd__key_value__init(&kv[i]);
		kv[i].key.data = (uint8_t *)(uintptr_t)(i == 0 ? "/l/a" : "/l/b");
		kv[i].key.len = 4;
		kv[i].create_revision = rev + i;
	}
	rr.header = ef_header(rev);
	rr.kvs = kvp;
	rr.n_kvs = 2;
	rr.count = 2;
	p = grpc_frame(&rr.base, &len);
	evbuffer_add(buf, p, len);
	free(p);
}

/* Messages read whole, two in a row, then one byte at a time: each comes
 * once it has all come, and its bytes are drained. */
START_TEST(test_grpc_next_whole_and_cut)
{
	struct evbuffer *buf = evbuffer_new(), *src = evbuffer_new();
	ProtobufCMessage *msg;
	char why[128];
	size_t n;
	const uint8_t *p;

	add_range_frame(buf, 7);
	add_range_frame(buf, 9);
	ck_assert_int_eq(grpc_next(buf, &etcd__range_response__descriptor, GRPC_MESSAGE_MAX, &msg, why,
	    sizeof(why)), 1);
	ck_assert_int_eq(((Etcd__RangeResponse *)msg)->header->revision, 7);
	ck_assert_int_eq(((Etcd__RangeResponse *)msg)->n_kvs, 2);
	ck_assert_int_eq(((Etcd__RangeResponse *)msg)->kvs[1]->create_revision, 8);
	protobuf_c_message_free_unpacked(msg, NULL);
	ck_assert_int_eq(grpc_next(buf, &etcd__range_response__descriptor, GRPC_MESSAGE_MAX, &msg, why,
	    sizeof(why)), 1);
	ck_assert_int_eq(((Etcd__RangeResponse *)msg)->header->revision, 9);
	protobuf_c_message_free_unpacked(msg, NULL);
	ck_assert_uint_eq(evbuffer_get_length(buf), 0);
	ck_assert_int_eq(grpc_next(buf, &etcd__range_response__descriptor, GRPC_MESSAGE_MAX, &msg, why,
	    sizeof(why)), 0);
	ck_assert_ptr_null(msg);

	add_range_frame(src, 11);
	n = evbuffer_get_length(src);
	p = evbuffer_pullup(src, -1);
	for (size_t i = 0; i < n; i++) {
		evbuffer_add(buf, p + i, 1);
		int rc = grpc_next(buf, &etcd__range_response__descriptor, GRPC_MESSAGE_MAX, &msg, why,
		    sizeof(why));
		ck_assert_int_eq(rc, i + 1 < n ? 0 : 1);
	}
	ck_assert_int_eq(((Etcd__RangeResponse *)msg)->header->revision, 11);
	protobuf_c_message_free_unpacked(msg, NULL);
	ck_assert_uint_eq(evbuffer_get_length(buf), 0);

	/* an empty message is a message */
	evbuffer_add(buf, "\0\0\0\0\0", 5);
	ck_assert_int_eq(grpc_next(buf, &etcd__lease_revoke_response__descriptor, GRPC_MESSAGE_MAX, &msg,
	    why, sizeof(why)), 1);
	ck_assert_ptr_null(((Etcd__LeaseRevokeResponse *)msg)->header);
	protobuf_c_message_free_unpacked(msg, NULL);
	evbuffer_free(buf);
	evbuffer_free(src);
}
END_TEST

/* A compressed message, a message over the limit (said by its prefix,
 * before it comes), a message that does not unpack: -1 with a reason. */
START_TEST(test_grpc_next_refused)
{
	struct evbuffer *buf = evbuffer_new();
	ProtobufCMessage *msg = (ProtobufCMessage *)1;
	char why[128] = "";

	evbuffer_add(buf, "\1\0\0\0\2\x08\x01", 7);
	ck_assert_int_eq(grpc_next(buf, &etcd__range_response__descriptor, GRPC_MESSAGE_MAX, &msg, why,
	    sizeof(why)), -1);
	ck_assert_ptr_null(msg);
	ck_assert_msg(strstr(why, "compressed") != NULL, "why: %s", why);

	evbuffer_drain(buf, evbuffer_get_length(buf));
	evbuffer_add(buf, "\0\x01\0\0\x01", 5);	/* 16 MiB + 1 */
	ck_assert_int_eq(grpc_next(buf, &etcd__range_response__descriptor, GRPC_MESSAGE_MAX, &msg, why,
	    sizeof(why)), -1);
	ck_assert_msg(strstr(why, "16777217") != NULL, "why: %s", why);
	evbuffer_drain(buf, evbuffer_get_length(buf));
	evbuffer_add(buf, "\0\0\0\0\x0b", 5);	/* 11 bytes, limit 10 */
	ck_assert_int_eq(grpc_next(buf, &etcd__range_response__descriptor, 10, &msg, why,
	    sizeof(why)), -1);
	evbuffer_drain(buf, evbuffer_get_length(buf));
	evbuffer_add(buf, "\0\0\0\0\x0a", 5);	/* 10 bytes, limit 10: not all come */
	ck_assert_int_eq(grpc_next(buf, &etcd__range_response__descriptor, 10, &msg, why,
	    sizeof(why)), 0);

	evbuffer_drain(buf, evbuffer_get_length(buf));
	evbuffer_add(buf, "\0\0\0\0\3\xff\xff\xff", 8);	/* not protobuf */
	why[0] = '\0';
	ck_assert_int_eq(grpc_next(buf, &etcd__range_response__descriptor, GRPC_MESSAGE_MAX, &msg, why,
	    sizeof(why)), -1);
	ck_assert_ptr_null(msg);
	ck_assert_str_ne(why, "");
	evbuffer_free(buf);
}
END_TEST

/* grpc-status: a number 0..16, else -1. */
START_TEST(test_grpc_status)
{
	ck_assert_int_eq(grpc_parse_status("0", 1), 0);
	ck_assert_int_eq(grpc_parse_status("5", 1), 5);
	ck_assert_int_eq(grpc_parse_status("16", 2), 16);
	ck_assert_int_eq(grpc_parse_status("165", 2), 16);	/* len counts */
	ck_assert_int_eq(grpc_parse_status("17", 2), -1);
	ck_assert_int_eq(grpc_parse_status("", 0), -1);
	ck_assert_int_eq(grpc_parse_status("-1", 2), -1);
	ck_assert_int_eq(grpc_parse_status("1a", 2), -1);
	ck_assert_int_eq(grpc_parse_status("003", 3), -1);
	ck_assert_int_eq(grpc_parse_status(" 3", 2), -1);
}
END_TEST

/* grpc-message: %XX undone, a broken escape kept, cut to the buffer. */
START_TEST(test_grpc_message)
{
	char out[64];
	const char *in = "etcdserver: 100%25 sure%3A %C3%A9t%C3%A9 %zz %4";
	grpc_parse_message(in, strlen(in), out, sizeof(out));
	ck_assert_str_eq(out, "etcdserver: 100% sure: \xc3\xa9t\xc3\xa9 %zz %4");
	grpc_parse_message("abcdef", 6, out, 4);
	ck_assert_str_eq(out, "abc");
	grpc_parse_message("%41%42", 6, out, 2);
	ck_assert_str_eq(out, "A");
	grpc_parse_message("", 0, out, sizeof(out));
	ck_assert_str_eq(out, "");
	grpc_parse_message("x%", 2, out, sizeof(out));
	ck_assert_str_eq(out, "x%");
}
END_TEST


/* ---- calls on a connection ------------------------------------------------ */

#define PEER "fake"			/* what the connections call the server */
#define UNARY "/test.Echo/Unary"	/* the methods the tests call */
#define STREAM "/test.Echo/Stream"
#define NCALLS 4			/* calls of a test at most */

/* One call of a test, and what the transport told about it. */
struct call {
	struct grpc_stream st;		/* the stream */
	bool live;			/* initialized, and not finished yet */
	int done;			/* hooks.done runs */
	enum grpc_end end;		/* and what they said */
	int code;
	int status;
	char why[256];
	char message[256];		/* grpc-message, "" if none */
	int64_t rev;			/* code 0: the response's revision */
	int nmsgs;			/* a streaming call's messages */
	int64_t revs[16];		/* their revisions */
	bool free_at_msg;		/* its message hook detaches it and frees the
					 * connection */
};

static struct grpc_conn *conn;		/* the connection under test */
static struct call calls[NCALLS];
static int nready, nsettings, ndraining, ndrained, nfailed;	/* hook runs */
static char failed_why[256];

static struct call *
call_of(struct grpc_stream *st)
{
	return (struct call *)(void *)((char *)st - offsetof(struct call, st));
}

static void
hook_ready(void *arg)
{
	(void)arg;
	nready++;
}

static void
hook_settings(void *arg)
{
	(void)arg;
	nsettings++;
}

static void
hook_draining(void *arg)
{
	(void)arg;
	ndraining++;
}

/* Every stream ended after a GOAWAY: the connection is freed, as its
 * owner should. */
static void
hook_drained(void *arg)
{
	(void)arg;
	ndrained++;
	grpc_conn_free(conn);
	conn = NULL;
}

static void
hook_failed(void *arg, const char *why)
{
	(void)arg;
	nfailed++;
	snprintf(failed_why, sizeof(failed_why), "%s", why);
}

/* A streaming call's message: its revision is recorded. */
static void
hook_message(void *arg, struct grpc_stream *st, const ProtobufCMessage *msg)
{
	struct call *c = call_of(st);
	const Etcd__RangeResponse *rr = (const Etcd__RangeResponse *)(const void *)msg;
	(void)arg;
	ck_assert_ptr_eq(msg->descriptor, &etcd__range_response__descriptor);
	ck_assert_int_lt(c->nmsgs, 16);
	c->revs[c->nmsgs++] = rr->header != NULL ? rr->header->revision : -1;
	if (c->free_at_msg) {
		grpc_stream_detach(st, true);
		grpc_conn_free(conn);
		conn = NULL;
	}
}

/* A call's end: recorded. */
static void
hook_done(void *arg, struct grpc_stream *st, const struct grpc_result *r)
{
	struct call *c = call_of(st);
	(void)arg;
	ck_assert_ptr_null(st->conn);	/* detached first */
	c->done++;
	c->end = r->end;
	c->code = r->code;
	c->status = r->status;
	snprintf(c->why, sizeof(c->why), "%s", r->why != NULL ? r->why : "");
	snprintf(c->message, sizeof(c->message), "%s", r->message != NULL ? r->message : "");
	c->rev = -1;
	if (r->msg != NULL) {
		const Etcd__RangeResponse *rr = (const Etcd__RangeResponse *)(const void *)r->msg;
		ck_assert_int_eq(r->code, GRPC_OK);
		c->rev = rr->header != NULL ? rr->header->revision : -1;
	}
}

static const struct grpc_hooks hooks = {
	.ready = hook_ready,
	.settings = hook_settings,
	.draining = hook_draining,
	.drained = hook_drained,
	.failed = hook_failed,
	.message = hook_message,
	.done = hook_done,
};

/* A connection to 127.0.0.1:port with the tests' hooks. */
static struct grpc_conn *
connect_port(int port, uint64_t timeout_ms, uint64_t ping_ms)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
	    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	char authority[32], why[128] = "";
	struct grpc_options o = { .addr = (const struct sockaddr *)&sin, .addrlen = sizeof(sin),
	    .authority = authority, .peer = PEER, .timeout_ms = timeout_ms, .ping_ms = ping_ms };
	struct grpc_conn *g;

	snprintf(authority, sizeof(authority), "127.0.0.1:%d", port);
	g = grpc_conn_create(gf_base, &o, &hooks, why, sizeof(why));
	ck_assert_msg(g != NULL, "no connection: %s", why);
	return g;
}

/* A connection to the fake. */
static struct grpc_conn *
connect_fake(uint64_t timeout_ms, uint64_t ping_ms)
{
	return connect_port(atoi(strrchr(fake_grpc_endpoint(gf_fake), ':') + 1), timeout_ms,
	    ping_ms);
}

/* Start c on conn once it is set up: a call of path (flags) with a
 * RangeRequest of key and the metadata token: t0k. */
static void
call_start(struct call *c, const char *path, const char *key, unsigned flags)
{
	Etcd__RangeRequest rq = ETCD__RANGE_REQUEST__INIT;
	struct grpc_meta meta = { "token", "t0k" };

	rq.key.data = (uint8_t *)(uintptr_t)key;
	rq.key.len = strlen(key);
	memset(c, 0, sizeof(*c));
	grpc_stream_init(&c->st, path, &rq.base, &etcd__range_response__descriptor, flags);
	c->live = true;
	GF_RUN_UNTIL(grpc_conn_ready(conn));
	ck_assert_int_eq(grpc_stream_submit(conn, &c->st, &meta, 1), 0);
	ck_assert(grpc_stream_sent(&c->st));
	grpc_conn_flush(conn);
}

/* A RangeResponse at revision rev, framed; the caller frees it. */
static uint8_t *
frame_rev(int64_t rev, size_t *len)
{
	Etcd__RangeResponse rr = ETCD__RANGE_RESPONSE__INIT;
	rr.header = ef_header(rev);
	return grpc_frame(&rr.base, len);
}

/* Send a RangeResponse at revision rev on req; its stream stays open. */
static void
send_rev(struct fake_grpc_req *req, int64_t rev)
{
	size_t len;
	uint8_t *p = frame_rev(rev, &len);
	fake_grpc_send(req, p, len);
	free(p);
}

/* The fake's request to path not answered yet, once it has come (whole
 * when ended). */
static struct fake_grpc_req *
pending(const char *path, bool ended)
{
	struct fake_grpc_req *req;
	GF_RUN_UNTIL((req = fake_grpc_pending(gf_fake, path)) != NULL && req->len > 0 &&
	    (!ended || req->ended));
	return req;
}

/* A connection to the fake with one call on it, calls[0] (of path, with
 * flags): the fake's request, whole unless the call is streaming. */
static struct fake_grpc_req *
call_up(const char *path, unsigned flags)
{
	conn = connect_fake(1000, 0);
	call_start(&calls[0], path, "/k/a", flags);
	return pending(path, !(flags & GRPC_STREAMING));
}

static void
setup(void)
{
	gf_setup();
	conn = NULL;
	memset(calls, 0, sizeof(calls));
	nready = nsettings = ndraining = ndrained = nfailed = 0;
	failed_why[0] = '\0';
}

static void
teardown(void)
{
	for (int i = 0; i < NCALLS; i++) {
		if (!calls[i].live)
			continue;
		grpc_stream_detach(&calls[i].st, false);
		grpc_stream_fini(&calls[i].st);
	}
	grpc_conn_free(conn);
	conn = NULL;
	gf_teardown();
}

/* A unary call is a POST of its framed request to its path with gRPC's
 * headers and its metadata, half-closed; the answer reaches hooks.done
 * once, with the message, after the connection was set up (its hooks once
 * each); the stream is closed. */
START_TEST(test_unary_answered)
{
	struct fake_grpc_req *req = call_up(UNARY, 0);
	Etcd__RangeRequest *rq;
	char authority[32];

	ck_assert_str_eq(req->method, "POST");
	ck_assert_str_eq(req->scheme, "http");
	snprintf(authority, sizeof(authority), "%s", fake_grpc_endpoint(gf_fake));
	ck_assert_str_eq(req->authority, authority);
	ck_assert_str_eq(req->ctype, "application/grpc");
	ck_assert_str_eq(req->te, "trailers");
	ck_assert(req->has_token);
	ck_assert_str_eq(req->token, "t0k");
	rq = (Etcd__RangeRequest *)fake_grpc_req_msg(req, &etcd__range_request__descriptor);
	ck_assert_ptr_nonnull(rq);
	ck_assert_uint_eq(req->len, GRPC_PREFIX + protobuf_c_message_get_packed_size(&rq->base));
	ck_assert_uint_eq(rq->key.len, 4);
	protobuf_c_message_free_unpacked(&rq->base, NULL);
	ck_assert_uint_eq(grpc_conn_streams(conn), 1);

	ef_reply_range(req, 7);
	GF_RUN_UNTIL(calls[0].done > 0);
	ck_assert_int_eq(calls[0].end, GRPC_ANSWERED);
	ck_assert_int_eq(calls[0].code, GRPC_OK);
	ck_assert_int_eq(calls[0].status, GRPC_OK);
	ck_assert_int_eq(calls[0].rev, 7);
	ck_assert_int_eq(nready, 1);
	ck_assert_int_eq(nsettings, 1);
	ck_assert(grpc_conn_h2up(conn));
	GF_RUN_UNTIL(grpc_conn_streams(conn) == 0);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(calls[0].done, 1);
	ck_assert_int_eq(nfailed, 0);
}
END_TEST

/* A status other than 0 ends the call with its code and grpc-message
 * percent-decoded (trailers-only, or trailers after the headers), "gRPC
 * status N" without a message; status 0 without a message is INTERNAL. */
START_TEST(test_unary_error_status)
{
	fake_grpc_fail(call_up(UNARY, 0), 3, "100% bad: \xc3\xa9t\xc3\xa9", true);
	GF_RUN_UNTIL(calls[0].done > 0);
	ck_assert_int_eq(calls[0].end, GRPC_ANSWERED);
	ck_assert_int_eq(calls[0].code, GRPC_INVALID_ARGUMENT);
	ck_assert_int_eq(calls[0].status, 3);
	ck_assert_str_eq(calls[0].why, "100% bad: \xc3\xa9t\xc3\xa9");
	ck_assert_str_eq(calls[0].message, calls[0].why);

	call_start(&calls[1], UNARY, "/k/b", 0);
	fake_grpc_fail(pending(UNARY, true), 14, "", false);
	GF_RUN_UNTIL(calls[1].done > 0);
	ck_assert_int_eq(calls[1].code, GRPC_UNAVAILABLE);
	ck_assert_str_eq(calls[1].why, "gRPC status 14");

	call_start(&calls[2], UNARY, "/k/c", 0);
	fake_grpc_end(pending(UNARY, true), 0, NULL);
	GF_RUN_UNTIL(calls[2].done > 0);
	ck_assert_int_eq(calls[2].end, GRPC_ANSWERED);
	ck_assert_int_eq(calls[2].code, GRPC_INTERNAL);
	ck_assert_int_eq(calls[2].status, 0);
	ck_assert_str_eq(calls[2].why, "no message in the response");
	ck_assert_int_eq(nfailed, 0);
}
END_TEST

/* A stream the server resets before its status ends GRPC_RESET, with the
 * reason; the connection goes on. */
START_TEST(test_unary_reset)
{
	fake_grpc_reset(call_up(UNARY, 0), NGHTTP2_REFUSED_STREAM);
	GF_RUN_UNTIL(calls[0].done > 0);
	ck_assert_int_eq(calls[0].end, GRPC_RESET);
	ck_assert_msg(strncmp(calls[0].why, "stream reset by " PEER " (", 17) == 0, "why: %s",
	    calls[0].why);
	ck_assert_int_eq(calls[0].status, -1);
	ck_assert_int_eq(nfailed, 0);
	ck_assert(grpc_conn_ready(conn));
}
END_TEST

/* A message over GRPC_MESSAGE_MAX (its prefix says so) ends the call
 * GRPC_GARBLED, RESOURCE_EXHAUSTED; one that does not unpack, INTERNAL.
 * Each stream is cancelled; the connection goes on. */
START_TEST(test_garbled)
{
	struct fake_grpc_req *req = call_up(UNARY, 0);

	fake_grpc_send(req, "\0\x01\0\0\x01" "abc", 8);
	GF_RUN_UNTIL(calls[0].done > 0);
	ck_assert_int_eq(calls[0].end, GRPC_GARBLED);
	ck_assert_int_eq(calls[0].code, GRPC_RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(calls[0].why, "16777217") != NULL, "why: %s", calls[0].why);
	GF_RUN_UNTIL(req->closed);
	ck_assert_uint_eq(req->close_code, NGHTTP2_CANCEL);

	call_start(&calls[1], UNARY, "/k/b", 0);
	fake_grpc_send(pending(UNARY, true), "\0\0\0\0\3\xff\xff\xff", 8);
	GF_RUN_UNTIL(calls[1].done > 0);
	ck_assert_int_eq(calls[1].end, GRPC_GARBLED);
	ck_assert_int_eq(calls[1].code, GRPC_INTERNAL);

	call_start(&calls[2], UNARY, "/k/c", 0);
	ef_reply_range(pending(UNARY, true), 3);
	GF_RUN_UNTIL(calls[2].done > 0);
	ck_assert_int_eq(calls[2].code, GRPC_OK);
	ck_assert_int_eq(fake_grpc_accepted(gf_fake), 1);
	ck_assert_int_eq(nfailed, 0);
}
END_TEST

/* A GRPC_FIRST_ENDS call is answered by its first message; a stream the
 * server keeps open is cancelled. */
START_TEST(test_first_message_ends)
{
	struct fake_grpc_req *req = call_up(UNARY, GRPC_FIRST_ENDS);

	send_rev(req, 9);
	GF_RUN_UNTIL(calls[0].done > 0);
	ck_assert_int_eq(calls[0].end, GRPC_ANSWERED);
	ck_assert_int_eq(calls[0].code, GRPC_OK);
	ck_assert_int_eq(calls[0].rev, 9);
	GF_RUN_UNTIL(req->closed);
	ck_assert_uint_eq(req->close_code, NGHTTP2_CANCEL);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(calls[0].done, 1);
}
END_TEST

/* A streaming call keeps its request side open; its messages come whole
 * and once each, in order, whatever the DATA frames (one byte each here);
 * the server's end (an error status) ends it, with the status. */
START_TEST(test_streaming)
{
	size_t la, lb;
	uint8_t *a = frame_rev(5, &la), *b = frame_rev(6, &lb);
	struct fake_grpc_req *req = call_up(STREAM, GRPC_STREAMING);

	gf_settle(GF_SETTLE_MS);
	ck_assert(!req->ended);
	for (size_t i = 0; i < la + lb; i++) {
		fake_grpc_send(req, i < la ? a + i : b + i - la, 1);
		gf_deliver();
		ck_assert_int_eq(calls[0].nmsgs, i + 1 < la ? 0 : i + 1 < la + lb ? 1 : 2);
	}
	free(a);
	free(b);
	ck_assert_int_eq(calls[0].revs[0], 5);
	ck_assert_int_eq(calls[0].revs[1], 6);
	ck_assert_int_eq(calls[0].done, 0);

	fake_grpc_end(req, 16, "bye");
	GF_RUN_UNTIL(calls[0].done > 0);
	ck_assert_int_eq(calls[0].end, GRPC_ANSWERED);
	ck_assert_int_eq(calls[0].status, 16);
	ck_assert_str_eq(calls[0].message, "bye");
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(calls[0].done, 1);
	ck_assert_int_eq(calls[0].nmsgs, 2);
}
END_TEST

/* Nothing more is told for a while: calls[0] had n messages and no end,
 * and no connection failed. */
static void
assert_quiet(int n)
{
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(calls[0].nmsgs, n);
	ck_assert_int_eq(calls[0].done, 0);
	ck_assert_int_eq(nfailed, 0);
}

/* A streaming call detached with cancel: the server is told (CANCEL), and
 * nothing more about it is told. */
START_TEST(test_detached)
{
	struct fake_grpc_req *req = call_up(STREAM, GRPC_STREAMING);

	send_rev(req, 5);
	GF_RUN_UNTIL(calls[0].nmsgs == 1);
	grpc_stream_detach(&calls[0].st, true);
	grpc_conn_flush(conn);
	GF_RUN_UNTIL(req->closed);
	ck_assert_uint_eq(req->close_code, NGHTTP2_CANCEL);
	GF_RUN_UNTIL(grpc_conn_streams(conn) == 0);
	assert_quiet(1);
}
END_TEST

/* A message hook may free the connection: the messages after it in the
 * same DATA frame are dropped, and no hook runs any more. */
START_TEST(test_free_from_a_hook)
{
	size_t la, lb;
	uint8_t *a = frame_rev(5, &la), *b = frame_rev(6, &lb);
	struct fake_grpc_req *req = call_up(STREAM, GRPC_STREAMING);

	a = realloc(a, la + lb);
	memcpy(a + la, b, lb);
	calls[0].free_at_msg = true;
	fake_grpc_send(req, a, la + lb);
	free(a);
	free(b);
	GF_RUN_UNTIL(calls[0].nmsgs > 0);
	ck_assert_ptr_null(conn);
	assert_quiet(1);
}
END_TEST

/* ---- connections ------------------------------------------------------------ */

/* A connection to a port nothing listens on fails once, "connection
 * refused", never set up. */
START_TEST(test_refused)
{
	conn = connect_port(gf_dead_port(), 1000, 0);
	ck_assert_int_eq(nfailed, 0);	/* never from grpc_conn_create */
	GF_RUN_UNTIL(nfailed > 0);
	ck_assert_str_eq(failed_why, "connection refused");
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(nfailed, 1);
	ck_assert_int_eq(nready, 0);
	ck_assert(!grpc_conn_ready(conn));
}
END_TEST

/* A server that closes the connection with a call in flight: the
 * connection fails once, with the reason; the call is not told (its owner
 * learns it from hooks.failed). */
START_TEST(test_closed_by_the_server)
{
	call_up(UNARY, 0);
	fake_grpc_drop(gf_fake);
	GF_RUN_UNTIL(nfailed > 0);
	ck_assert_msg(strcmp(failed_why, "closed by " PEER) == 0 ||
	    strcmp(failed_why, "connection reset") == 0, "why: %s", failed_why);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(nfailed, 1);
	ck_assert_int_eq(calls[0].done, 0);
}
END_TEST

/* A streaming connection is checked with PINGs while silent: answered, it
 * lives on; unanswered within the timeout, it fails, "timed out". */
START_TEST(test_idle_ping)
{
	uint64_t t0;

	conn = connect_fake(200, 100);
	call_start(&calls[0], STREAM, "/k/", GRPC_STREAMING);
	pending(STREAM, false);
	gf_settle(600);		/* PINGs answered */
	ck_assert_int_eq(nfailed, 0);
	ck_assert_int_eq(fake_grpc_accepted(gf_fake), 1);

	fake_grpc_deaf(gf_fake, true);
	t0 = clock_ms();
	GF_RUN_UNTIL(nfailed > 0);
	ck_assert_str_eq(failed_why, "timed out");
	ck_assert_msg(clock_ms() - t0 < 1000, "given up after %llu ms",
	    (unsigned long long)(clock_ms() - t0));
	ck_assert_int_eq(calls[0].done, 0);
}
END_TEST

/* GOAWAY without error: hooks.draining; the call in flight is answered,
 * and then hooks.drained, where the connection is freed. GOAWAY with an
 * error fails the connection. */
START_TEST(test_goaway)
{
	struct fake_grpc_req *req = call_up(UNARY, 0);

	fake_grpc_goaway(gf_fake, NGHTTP2_NO_ERROR);
	GF_RUN_UNTIL(ndraining > 0);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(ndrained, 0);
	ef_reply_range(req, 4);
	GF_RUN_UNTIL(calls[0].done > 0 && ndrained > 0);
	ck_assert_int_eq(calls[0].code, GRPC_OK);
	ck_assert_int_eq(ndraining, 1);
	ck_assert_int_eq(ndrained, 1);
	ck_assert_ptr_null(conn);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(nfailed, 0);

	conn = connect_fake(1000, 0);
	GF_RUN_UNTIL(grpc_conn_ready(conn) && grpc_conn_h2up(conn));
	fake_grpc_goaway(gf_fake, NGHTTP2_PROTOCOL_ERROR);
	GF_RUN_UNTIL(nfailed > 0);
	ck_assert_str_eq(failed_why, "closed by " PEER " (PROTOCOL_ERROR)");
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("grpc");

	suite_case(s, "messages", NULL, NULL, 0, SUITE_TESTS(test_grpc_next_whole_and_cut,
	    test_grpc_next_refused, test_grpc_status, test_grpc_message));
	suite_case(s, "calls", setup, teardown, 0, SUITE_TESTS(test_unary_answered,
	    test_unary_error_status, test_unary_reset, test_garbled, test_first_message_ends,
	    test_streaming, test_detached, test_free_from_a_hook));
	suite_case(s, "connections", setup, teardown, 0, SUITE_TESTS(test_refused,
	    test_closed_by_the_server, test_idle_ping, test_goaway));
	return gf_main(s);
}
