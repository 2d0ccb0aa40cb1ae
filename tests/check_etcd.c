/*
 * check_etcd — unit tests of the etcd gRPC client (daemon/etcd.c): the
 * reading of gRPC messages and statuses; unary calls, their errors,
 * endpoints that do not answer, failover and timeouts; many calls on one
 * connection; lanes (etcd_call_lane: one call of a lane out at a time, in
 * order, other lanes side by side); the keepalive; the watch stream cut
 * into messages whatever the DATA frames; authentication; a client
 * destroyed with work in flight; and the etcd backend (be_etcd.c) on a
 * fake, for late answers about a lease or key it has given up since and
 * for its destruction with operations in flight.
 *
 * No etcd: each test talks to fake gRPC servers of its own
 * (tests/fake_grpc.c: nghttp2 server sessions on 127.0.0.1, port 0) running
 * on the same event loop as the client. A fake answers a path from its route
 * table and keeps every other request pending until the test answers it.
 * The test runs the loop itself until what it waits for happened, and fails
 * after LIMIT_MS.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>

#include "backend.h"
#include "clock.h"
#include "conf.h"
#include "etcd.h"
#include "grpc.h"
#include "fake_grpc.h"
#include "log.h"
#include "suite.h"

#define LIMIT_MS 3000		/* longest a test waits for what it expects */
#define TICK_MS 10		/* the loop wakes up at least this often */
#define SETTLE_MS 100		/* how long a test lets the loop run to see nothing happen */
#define LOG_MAX 64		/* hook calls the tests remember */
#define TIMEOUT_MS 1000		/* the clients' request timeout, unless a test says */
#define MAX (16u << 20)		/* the client's message limit */

/* Run the loop until cond holds; fail the test after LIMIT_MS. */
#define RUN_UNTIL(cond) SUITE_RUN_UNTIL(base, cond, LIMIT_MS)

#define INVALID_TOKEN "etcdserver: invalid auth token"
#define AUTH_REFUSED "etcdserver: authentication failed, invalid user ID or password"

static struct event_base *base;		/* the test's loop */
static struct event *tick;		/* wakes the loop every TICK_MS */
static struct fake_grpc *fk;		/* the fake the fixture starts */
static struct etcd *cli;		/* the client under test */

/* ---- helpers ---------------------------------------------------------------- */

/* Run what the loop has ready, without blocking. */
static void
pump(void)
{
	for (int i = 0; i < 8; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
}

/* Let the loop run for ms milliseconds. */
static void
settle(uint64_t ms)
{
	uint64_t until = clock_ms() + ms;
	while (clock_ms() < until)
		event_base_loop(base, EVLOOP_ONCE);
}

/* Let what the fake wrote reach the client and be read. */
static void
deliver(void)
{
	RUN_UNTIL(fake_grpc_flushed(fk));
	settle(TICK_MS);
	pump();
}

/* A port of 127.0.0.1 nothing listens on. */
static int
dead_port(void)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sin);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
	close(fd);
	return ntohs(sin.sin_port);
}

/* ---- messages ----------------------------------------------------------------- */

/* A response header at revision rev. */
static Etcd__ResponseHeader *
header(int64_t rev)
{
	static Etcd__ResponseHeader h[LOG_MAX];
	static int n;
	Etcd__ResponseHeader *p = &h[n++ % LOG_MAX];
	etcd__response_header__init(p);
	p->revision = rev;
	p->cluster_id = 11;
	p->member_id = 22;
	return p;
}

/* A WatchResponse: created, or with one DELETE event of key at rev. */
static void
watch_msg(Etcd__WatchResponse *w, Etcd__Event *ev, Etcd__Event **evp, Etcd__KeyValue *kv,
    int64_t rev, const char *key)
{
	etcd__watch_response__init(w);
	w->header = header(rev);
	if (key == NULL) {
		w->created = true;
		return;
	}
	etcd__event__init(ev);
	etcd__key_value__init(kv);
	ev->type = ETCD__EVENT__EVENT_TYPE__DELETE;
	kv->key.data = (uint8_t *)(uintptr_t)key;
	kv->key.len = strlen(key);
	kv->mod_revision = rev;
	ev->kv = kv;
	evp[0] = ev;
	w->events = evp;
	w->n_events = 1;
}

/* The framed bytes of a watch message (created: key NULL). */
static uint8_t *
watch_frame(int64_t rev, const char *key, size_t *len)
{
	Etcd__WatchResponse w;
	Etcd__Event ev, *evp[1];
	Etcd__KeyValue kv;
	watch_msg(&w, &ev, evp, &kv, rev, key);
	return grpc_frame(&w.base, len);
}

/* The text the watch hook records for such a message. */
static void
watch_text(char *buf, size_t size, int64_t rev, const char *key)
{
	if (key == NULL)
		snprintf(buf, size, "rev=%lld created", (long long)rev);
	else
		snprintf(buf, size, "rev=%lld DELETE %s", (long long)rev, key);
}

/* ---- the client and what it tells ----------------------------------------- */

/* The outcome of one call, as its callback saw it. */
struct outcome {
	int times;			/* callback runs */
	bool inside;			/* one ran inside etcd_call */
	enum etcd_status status;
	int code;
	char why[256];
	int64_t rev;			/* ETCD_OK: the response header's revision */
	int64_t count;			/* ETCD_OK, a RangeResponse: count */
	int64_t ttl;			/* ETCD_OK, a LeaseKeepAliveResponse: TTL */
	int seq;			/* the last run was the seq-th callback of the test */
	bool destroy;			/* the callback destroys cli */
	enum etcd_method m;		/* the method called */
	struct outcome *then;		/* the callback makes a Range of then_key on
					 * then_lane into this one (once) */
	uint64_t then_lane;
	const char *then_key;
};

static bool in_call;			/* etcd_call is running */
static bool states[LOG_MAX];		/* the state hook's calls, in order */
static int nstates;
static char msgs[LOG_MAX][128];		/* the watch hook's messages ("NULL" for NULL) */
static int nmsgs;
static int hook_stop_at;		/* the watch hook stops the stream at this message */
static int hook_restart_at;		/* or starts another one */
static int hook_destroy_at;		/* or destroys the client */
static int nresults;			/* callbacks run in this test */
static int watch_seen;			/* watch streams watch_req() returned */

static void
on_state(void *arg, bool up)
{
	(void)arg;
	ck_assert_int_lt(nstates, LOG_MAX);
	states[nstates++] = up;
}

/* The watch create request the tests start streams with (key given). */
static void
watch_start(const char *key)
{
	Etcd__WatchCreateRequest wc = ETCD__WATCH_CREATE_REQUEST__INIT;
	Etcd__WatchCreateRequest__FilterType filters[] = {
		ETCD__WATCH_CREATE_REQUEST__FILTER_TYPE__NOPUT };
	wc.key.data = (uint8_t *)(uintptr_t)key;
	wc.key.len = strlen(key);
	wc.range_end.data = (uint8_t *)(uintptr_t)"/l0";
	wc.range_end.len = 3;
	wc.start_revision = 5;
	wc.filters = filters;
	wc.n_filters = 1;
	etcd_watch(cli, &wc);
}

static void
on_watch(void *arg, const Etcd__WatchResponse *m)
{
	(void)arg;
	ck_assert_int_lt(nmsgs, LOG_MAX);
	if (m == NULL)
		snprintf(msgs[nmsgs], sizeof(msgs[nmsgs]), "NULL");
	else if (m->n_events > 0)
		snprintf(msgs[nmsgs], sizeof(msgs[nmsgs]), "rev=%lld %s %.*s",
		    (long long)m->header->revision,
		    m->events[0]->type == ETCD__EVENT__EVENT_TYPE__DELETE ? "DELETE" : "PUT",
		    (int)m->events[0]->kv->key.len, (const char *)m->events[0]->kv->key.data);
	else
		snprintf(msgs[nmsgs], sizeof(msgs[nmsgs]), "rev=%lld%s",
		    m->header != NULL ? (long long)m->header->revision : -1LL,
		    m->created ? " created" : "");
	nmsgs++;
	if (nmsgs == hook_stop_at)
		etcd_watch_stop(cli);
	if (nmsgs == hook_restart_at)
		watch_start("again");
	if (nmsgs == hook_destroy_at) {
		etcd_destroy(cli);
		cli = NULL;
	}
}

static void call_lane(uint64_t lane, const char *key, struct outcome *o);

static void
on_result(void *arg, const struct etcd_result *r)
{
	struct outcome *o = arg;
	o->times++;
	o->seq = ++nresults;
	o->inside |= in_call;
	o->status = r->status;
	o->code = r->code;
	snprintf(o->why, sizeof(o->why), "%s", r->why != NULL ? r->why : "");
	if (r->status == ETCD_OK) {
		ck_assert_ptr_nonnull(r->msg);
		switch (o->m) {
		case ETCD_RANGE: {
			const Etcd__RangeResponse *rr = (const Etcd__RangeResponse *)r->msg;
			ck_assert_ptr_eq(r->msg->descriptor, &etcd__range_response__descriptor);
			o->rev = rr->header != NULL ? rr->header->revision : -1;
			o->count = rr->count;
			break;
		}
		case ETCD_LEASE_KEEPALIVE: {
			const Etcd__LeaseKeepAliveResponse *ka =
			    (const Etcd__LeaseKeepAliveResponse *)r->msg;
			ck_assert_ptr_eq(r->msg->descriptor,
			    &etcd__lease_keep_alive_response__descriptor);
			o->rev = ka->header != NULL ? ka->header->revision : -1;
			o->ttl = ka->ttl;
			break;
		}
		default:
			break;
		}
	} else {
		ck_assert_ptr_null(r->msg);
		ck_assert_ptr_nonnull(r->why);
	}
	if (o->then != NULL) {
		struct outcome *t = o->then;
		o->then = NULL;
		call_lane(o->then_lane, o->then_key, t);
	}
	if (o->destroy) {
		etcd_destroy(cli);
		cli = NULL;
	}
}

/* A Range of key with the callback on_result into o. */
static void
call_range(const char *key, struct outcome *o)
{
	Etcd__RangeRequest rq = ETCD__RANGE_REQUEST__INIT;
	rq.key.data = (uint8_t *)(uintptr_t)key;
	rq.key.len = strlen(key);
	rq.range_end.data = (uint8_t *)(uintptr_t)"/m";
	rq.range_end.len = 2;
	o->m = ETCD_RANGE;
	in_call = true;
	etcd_call(cli, ETCD_RANGE, &rq.base, on_result, o);
	in_call = false;
}

/* The same on lane (etcd_call_lane). */
static void
call_lane(uint64_t lane, const char *key, struct outcome *o)
{
	Etcd__RangeRequest rq = ETCD__RANGE_REQUEST__INIT;
	bool was = in_call;
	rq.key.data = (uint8_t *)(uintptr_t)key;
	rq.key.len = strlen(key);
	o->m = ETCD_RANGE;
	in_call = true;
	etcd_call_lane(cli, lane, ETCD_RANGE, &rq.base, on_result, o);
	in_call = was;
}

/* A call of m with an empty request of its kind. */
static void
call_m(enum etcd_method m, struct outcome *o)
{
	Etcd__TxnRequest txn = ETCD__TXN_REQUEST__INIT;
	Etcd__LeaseRevokeRequest rev = ETCD__LEASE_REVOKE_REQUEST__INIT;
	Etcd__LeaseKeepAliveRequest ka = ETCD__LEASE_KEEP_ALIVE_REQUEST__INIT;
	Etcd__StatusRequest st = ETCD__STATUS_REQUEST__INIT;
	const ProtobufCMessage *req = &txn.base;
	rev.id = 7;
	ka.id = 7;
	if (m == ETCD_LEASE_REVOKE)
		req = &rev.base;
	else if (m == ETCD_LEASE_KEEPALIVE)
		req = &ka.base;
	else if (m == ETCD_STATUS)
		req = &st.base;
	else
		ck_assert_int_eq(m, ETCD_TXN);
	o->m = m;
	in_call = true;
	etcd_call(cli, m, req, on_result, o);
	in_call = false;
}

/* A client of the n endpoints eps (user NULL: no authentication). */
static struct etcd *
client_ping(const char *const *eps, size_t n, uint64_t timeout_ms, const char *user,
    const char *password, uint64_t ping_ms)
{
	char *copy[4];
	struct etcd_options o = { .endpoints = copy, .nendpoints = n,
	    .request_timeout_ms = timeout_ms, .username = user, .password = password,
	    .ping_ms = ping_ms };
	struct etcd_hooks h = { .state = on_state, .watch = on_watch, .arg = NULL };
	struct etcd *c;

	ck_assert_uint_le(n, 4);
	for (size_t i = 0; i < n; i++)
		copy[i] = strdup(eps[i]);
	c = etcd_create(base, &o, &h);
	for (size_t i = 0; i < n; i++)
		free(copy[i]);
	ck_assert_ptr_nonnull(c);
	return c;
}

static struct etcd *
client(const char *const *eps, size_t n, uint64_t timeout_ms, const char *user,
    const char *password)
{
	return client_ping(eps, n, timeout_ms, user, password, 0);
}

/* A client of fk alone. */
static struct etcd *
client_of_fake(void)
{
	const char *eps[] = { fake_grpc_endpoint(fk) };
	return client(eps, 1, TIMEOUT_MS, NULL, NULL);
}

/* Route path of fk to a RangeResponse at rev with count. */
static void
route_range(struct fake_grpc *f, int64_t rev, int64_t count)
{
	Etcd__RangeResponse rr = ETCD__RANGE_RESPONSE__INIT;
	rr.header = header(rev);
	rr.count = count;
	fake_grpc_route(f, FG_RANGE, &rr.base);
}

/* Answer req with a RangeResponse at rev. */
static void
reply_range(struct fake_grpc_req *req, int64_t rev)
{
	Etcd__RangeResponse rr = ETCD__RANGE_RESPONSE__INIT;
	rr.header = header(rev);
	rr.count = rev;
	fake_grpc_reply(req, &rr.base);
}

static void
on_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
}

static void
setup(void)
{
	struct timeval tv = clock_tv(TICK_MS);
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	tick = event_new(base, -1, EV_PERSIST, on_tick, NULL);
	event_add(tick, &tv);
	fk = fake_grpc_new(base);
	cli = NULL;
	nstates = 0;
	nmsgs = 0;
	hook_stop_at = 0;
	hook_restart_at = 0;
	hook_destroy_at = 0;
	nresults = 0;
	watch_seen = 0;
}

static void
teardown(void)
{
	etcd_destroy(cli);
	cli = NULL;
	fake_grpc_free(fk);
	fk = NULL;
	event_free(tick);
	event_base_free(base);
}

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
	rr.header = header(rev);
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
	ck_assert_int_eq(grpc_next(buf, &etcd__range_response__descriptor, MAX, &msg, why,
	    sizeof(why)), 1);
	ck_assert_int_eq(((Etcd__RangeResponse *)msg)->header->revision, 7);
	ck_assert_int_eq(((Etcd__RangeResponse *)msg)->n_kvs, 2);
	ck_assert_int_eq(((Etcd__RangeResponse *)msg)->kvs[1]->create_revision, 8);
	protobuf_c_message_free_unpacked(msg, NULL);
	ck_assert_int_eq(grpc_next(buf, &etcd__range_response__descriptor, MAX, &msg, why,
	    sizeof(why)), 1);
	ck_assert_int_eq(((Etcd__RangeResponse *)msg)->header->revision, 9);
	protobuf_c_message_free_unpacked(msg, NULL);
	ck_assert_uint_eq(evbuffer_get_length(buf), 0);
	ck_assert_int_eq(grpc_next(buf, &etcd__range_response__descriptor, MAX, &msg, why,
	    sizeof(why)), 0);
	ck_assert_ptr_null(msg);

	add_range_frame(src, 11);
	n = evbuffer_get_length(src);
	p = evbuffer_pullup(src, -1);
	for (size_t i = 0; i < n; i++) {
		evbuffer_add(buf, p + i, 1);
		int rc = grpc_next(buf, &etcd__range_response__descriptor, MAX, &msg, why,
		    sizeof(why));
		ck_assert_int_eq(rc, i + 1 < n ? 0 : 1);
	}
	ck_assert_int_eq(((Etcd__RangeResponse *)msg)->header->revision, 11);
	protobuf_c_message_free_unpacked(msg, NULL);
	ck_assert_uint_eq(evbuffer_get_length(buf), 0);

	/* an empty message is a message */
	evbuffer_add(buf, "\0\0\0\0\0", 5);
	ck_assert_int_eq(grpc_next(buf, &etcd__lease_revoke_response__descriptor, MAX, &msg,
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
	ck_assert_int_eq(grpc_next(buf, &etcd__range_response__descriptor, MAX, &msg, why,
	    sizeof(why)), -1);
	ck_assert_ptr_null(msg);
	ck_assert_msg(strstr(why, "compressed") != NULL, "why: %s", why);

	evbuffer_drain(buf, evbuffer_get_length(buf));
	evbuffer_add(buf, "\0\x01\0\0\x01", 5);	/* 16 MiB + 1 */
	ck_assert_int_eq(grpc_next(buf, &etcd__range_response__descriptor, MAX, &msg, why,
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
	ck_assert_int_eq(grpc_next(buf, &etcd__range_response__descriptor, MAX, &msg, why,
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

/* ---- unary calls ---------------------------------------------------------- */

/* A call is a POST of the framed request to its method's path with gRPC's
 * headers; an answer with status 0 reaches the callback as ETCD_OK with the
 * message, and the client comes up. */
START_TEST(test_call_answered)
{
	struct outcome o = { 0 };
	struct etcd_stats st;
	struct fake_grpc_req *req;
	Etcd__RangeRequest *rq;

	route_range(fk, 7, 1);
	cli = client_of_fake();
	ck_assert(!etcd_up(cli));
	ck_assert_str_eq(etcd_endpoint(cli), fake_grpc_endpoint(fk));
	call_range("/l/a", &o);
	ck_assert_int_eq(o.times, 0);
	RUN_UNTIL(o.times > 0);
	ck_assert(!o.inside);
	ck_assert_int_eq(o.status, ETCD_OK);
	ck_assert_int_eq(o.rev, 7);
	ck_assert_int_eq(o.count, 1);
	ck_assert(etcd_up(cli));
	ck_assert_ptr_null(etcd_why_down(cli));
	ck_assert_int_eq(nstates, 1);
	ck_assert(states[0]);

	ck_assert_int_eq(fake_grpc_count(fk, NULL), 1);
	req = fake_grpc_last(fk, FG_RANGE);
	ck_assert_ptr_nonnull(req);
	ck_assert_str_eq(req->method, "POST");
	ck_assert_str_eq(req->scheme, "http");
	ck_assert_str_eq(req->authority, fake_grpc_endpoint(fk));
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

	etcd_stats(cli, &st);
	ck_assert_uint_eq(st.calls, 1);
	ck_assert_uint_eq(st.failures, 0);
	ck_assert_uint_eq(st.connects, 1);
	ck_assert_uint_eq(st.streams, 0);
	settle(SETTLE_MS);
	ck_assert_int_eq(o.times, 1);
}
END_TEST

/* A status other than 0 ends the call with ETCD_FAILED, the code and the
 * grpc-message percent-decoded; in trailers after headers, or trailers-only.
 * The client is up all the same: etcd answered. */
START_TEST(test_call_error_status)
{
	struct outcome o = { 0 }, p = { 0 }, q = { 0 };

	fake_grpc_route_error(fk, FG_LEASE_REVOKE, 5, "etcdserver: requested lease not found",
	    false);
	fake_grpc_route_error(fk, FG_TXN, 3, "100% bad: \xc3\xa9t\xc3\xa9\nline", true);
	fake_grpc_route_error(fk, FG_STATUS, 14, "", true);
	cli = client_of_fake();

	call_m(ETCD_LEASE_REVOKE, &o);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_FAILED);
	ck_assert_int_eq(o.code, 5);
	ck_assert_str_eq(o.why, "etcdserver: requested lease not found");
	ck_assert(etcd_up(cli));
	ck_assert_int_eq(nstates, 1);

	call_m(ETCD_TXN, &p);
	RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.status, ETCD_FAILED);
	ck_assert_int_eq(p.code, 3);
	ck_assert_str_eq(p.why, "100% bad: \xc3\xa9t\xc3\xa9\nline");

	call_m(ETCD_STATUS, &q);
	RUN_UNTIL(q.times > 0);
	ck_assert_int_eq(q.status, ETCD_FAILED);
	ck_assert_int_eq(q.code, 14);
	ck_assert_str_ne(q.why, "");
	ck_assert(etcd_up(cli));
	ck_assert_int_eq(nstates, 1);
}
END_TEST

/* A trailers-only OK (no message) and an HTTP status other than 200
 * without grpc-status are failures with a reason. */
START_TEST(test_call_without_message)
{
	struct outcome o = { 0 };
	struct fake_grpc_req *req;

	cli = client_of_fake();
	call_m(ETCD_TXN, &o);
	RUN_UNTIL((req = fake_grpc_pending(fk, FG_TXN)) != NULL && req->ended);
	fake_grpc_end(req, 0, NULL);
	RUN_UNTIL(o.times > 0);
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
	struct outcome o = { 0 }, p = { 0 }, q = { 0 };
	struct fake_grpc_req *req;

	cli = client_of_fake();
	call_range("/l/a", &o);
	RUN_UNTIL((req = fake_grpc_pending(fk, FG_RANGE)) != NULL);
	fake_grpc_send(req, "\0\x01\0\0\x01" "abc", 8);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_FAILED);
	ck_assert_int_eq(o.code, 8);
	RUN_UNTIL(req->closed);
	ck_assert_uint_eq(req->close_code, NGHTTP2_CANCEL);

	call_range("/l/b", &p);
	RUN_UNTIL((req = fake_grpc_pending(fk, FG_RANGE)) != NULL);
	fake_grpc_send(req, "\0\0\0\0\3\xff\xff\xff", 8);
	RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.status, ETCD_FAILED);
	ck_assert_int_eq(p.code, 13);

	route_range(fk, 3, 0);
	call_range("/l/c", &q);
	RUN_UNTIL(q.times > 0);
	ck_assert_int_eq(q.status, ETCD_OK);
	ck_assert_int_eq(fake_grpc_accepted(fk), 1);
}
END_TEST

/* 50 calls in flight at once go on one connection, each its own stream,
 * and each gets its own answer, answered in reverse order. */
START_TEST(test_many_calls_one_connection)
{
	enum { N = 50 };
	struct outcome o[N];
	struct fake_grpc_req *reqs[N];
	struct etcd_stats st;
	char key[16];

	memset(o, 0, sizeof(o));
	cli = client_of_fake();
	for (int i = 0; i < N; i++) {
		snprintf(key, sizeof(key), "/l/%d", i);
		call_range(key, &o[i]);
	}
	RUN_UNTIL(fake_grpc_npending(fk, FG_RANGE) == N);
	ck_assert_int_eq(fake_grpc_accepted(fk), 1);
	etcd_stats(cli, &st);
	ck_assert_uint_eq(st.streams, N);
	ck_assert_uint_eq(st.calls, N);
	for (int i = 0; i < N; i++) {
		Etcd__RangeRequest *rq;
		reqs[i] = fake_grpc_nth(fk, i);
		rq = (Etcd__RangeRequest *)fake_grpc_req_msg(reqs[i],
		    &etcd__range_request__descriptor);
		ck_assert_ptr_nonnull(rq);
		snprintf(key, sizeof(key), "/l/%d", i);
		ck_assert_uint_eq(rq->key.len, strlen(key));
		ck_assert(memcmp(rq->key.data, key, rq->key.len) == 0);
		protobuf_c_message_free_unpacked(&rq->base, NULL);
	}
	for (int i = N - 1; i >= 0; i--)
		reply_range(reqs[i], 100 + i);
	RUN_UNTIL(nresults == N);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(o[i].times, 1);
		ck_assert_int_eq(o[i].status, ETCD_OK);
		ck_assert_int_eq(o[i].rev, 100 + i);
		ck_assert_int_eq(o[i].seq, N - i);
	}
	etcd_stats(cli, &st);
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
	ka.header = header(9);
	ka.id = 7;
	ka.ttl = 10;
	fake_grpc_send_msg(req, &ka.base);
}

/* A keepalive is one request on a LeaseKeepAlive stream half-closed at
 * once; the first message answers it, and the stream is cancelled if etcd
 * keeps it open. */
START_TEST(test_keepalive)
{
	struct outcome o = { 0 }, p = { 0 };
	struct fake_grpc_req *req;
	Etcd__LeaseKeepAliveRequest *rq;
	Etcd__LeaseKeepAliveResponse ka = ETCD__LEASE_KEEP_ALIVE_RESPONSE__INIT;

	fake_grpc_route_fn(fk, FG_LEASE_KEEPALIVE, keepalive_fn, NULL);
	cli = client_of_fake();
	call_m(ETCD_LEASE_KEEPALIVE, &o);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_OK);
	ck_assert_int_eq(o.ttl, 10);
	ck_assert_int_eq(o.rev, 9);
	req = fake_grpc_last(fk, FG_LEASE_KEEPALIVE);
	ck_assert(req->ended);
	rq = (Etcd__LeaseKeepAliveRequest *)fake_grpc_req_msg(req,
	    &etcd__lease_keep_alive_request__descriptor);
	ck_assert_ptr_nonnull(rq);
	ck_assert_int_eq(rq->id, 7);
	protobuf_c_message_free_unpacked(&rq->base, NULL);
	RUN_UNTIL(req->closed);
	ck_assert_uint_eq(req->close_code, NGHTTP2_CANCEL);

	/* etcd ending the stream with the answer is fine too */
	ka.header = header(10);
	ka.ttl = 5;
	fake_grpc_route(fk, FG_LEASE_KEEPALIVE, &ka.base);
	call_m(ETCD_LEASE_KEEPALIVE, &p);
	RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.status, ETCD_OK);
	ck_assert_int_eq(p.ttl, 5);
	settle(SETTLE_MS);
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
	struct outcome o = { 0 };
	struct etcd_stats st;

	snprintf(ep, sizeof(ep), "127.0.0.1:%d", dead_port());
	cli = client(eps, 1, TIMEOUT_MS, NULL, NULL);
	ck_assert_ptr_nonnull(etcd_why_down(cli));
	call_range("/l/a", &o);
	ck_assert_int_eq(o.times, 0);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_DOWN);
	ck_assert_str_eq(o.why, "connection refused");
	ck_assert(!o.inside);
	ck_assert(!etcd_up(cli));
	ck_assert_int_eq(nstates, 0);
	snprintf(want, sizeof(want), "%s: connection refused", ep);
	ck_assert_str_eq(etcd_why_down(cli), want);
	ck_assert_str_eq(etcd_endpoint(cli), ep);
	etcd_stats(cli, &st);
	ck_assert_uint_eq(st.failures, 1);
	ck_assert_uint_eq(st.switches, 0);
	ck_assert_uint_eq(st.connects, 0);
	settle(SETTLE_MS);
	ck_assert_int_eq(o.times, 1);
}
END_TEST

/* An etcd that answered and then went away: the next call ends with
 * ETCD_DOWN and the state hook is told false once, after true. */
START_TEST(test_down_after_up)
{
	struct outcome o = { 0 }, p = { 0 };

	route_range(fk, 1, 0);
	cli = client_of_fake();
	call_range("/l/a", &o);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_OK);
	fake_grpc_free(fk);
	fk = NULL;
	settle(SETTLE_MS);
	call_range("/l/a", &p);
	RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.status, ETCD_DOWN);
	ck_assert(!p.inside);
	ck_assert(!etcd_up(cli));
	ck_assert_ptr_nonnull(etcd_why_down(cli));
	ck_assert_int_eq(nstates, 2);
	ck_assert(states[0]);
	ck_assert(!states[1]);
	fk = fake_grpc_new(base);
}
END_TEST

/* A connection that breaks with calls in flight ends them ETCD_DOWN. */
START_TEST(test_connection_lost_with_calls)
{
	struct outcome o = { 0 }, p = { 0 };

	cli = client_of_fake();
	call_range("/l/a", &o);
	call_range("/l/b", &p);
	RUN_UNTIL(fake_grpc_npending(fk, FG_RANGE) == 2);
	fake_grpc_drop(fk);
	RUN_UNTIL(o.times > 0 && p.times > 0);
	ck_assert_int_eq(o.status, ETCD_DOWN);
	ck_assert_int_eq(p.status, ETCD_DOWN);
	ck_assert_msg(strcmp(o.why, "closed by etcd") == 0 ||
	    strcmp(o.why, "connection reset") == 0, "why: %s", o.why);
	ck_assert(!etcd_up(cli));
}
END_TEST

/* With a dead endpoint first and a live one second: the first call fails
 * (ETCD_DOWN) and moves the client to the second; the next call is answered
 * there and the client comes up. */
START_TEST(test_failover_to_next_endpoint)
{
	char dead[32];
	const char *eps[] = { dead, fake_grpc_endpoint(fk) };
	struct outcome o = { 0 }, p = { 0 };
	struct etcd_stats st;

	snprintf(dead, sizeof(dead), "127.0.0.1:%d", dead_port());
	route_range(fk, 1, 0);
	cli = client(eps, 2, TIMEOUT_MS, NULL, NULL);
	ck_assert_str_eq(etcd_endpoint(cli), dead);
	call_range("/l/a", &o);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_DOWN);
	ck_assert_str_eq(etcd_endpoint(cli), fake_grpc_endpoint(fk));
	ck_assert_int_eq(nstates, 0);
	ck_assert_int_eq(fake_grpc_count(fk, NULL), 0);

	call_range("/l/a", &p);
	RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.status, ETCD_OK);
	ck_assert(etcd_up(cli));
	ck_assert_int_eq(nstates, 1);
	ck_assert(states[0]);
	ck_assert_int_eq(fake_grpc_count(fk, NULL), 1);
	etcd_stats(cli, &st);
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
	const char *eps[] = { fake_grpc_endpoint(fk) };
	struct outcome o = { 0 }, p = { 0 }, q = { 0 };
	struct fake_grpc_req *req;
	uint64_t t0, took;

	route_range(fk, 1, 0);
	cli = client(eps, 1, 200, NULL, NULL);
	call_range("/l/a", &o);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_OK);

	t0 = clock_ms();
	call_m(ETCD_TXN, &p);	/* no route: the fake keeps it */
	RUN_UNTIL(p.times > 0);
	took = clock_ms() - t0;
	ck_assert_int_eq(p.status, ETCD_DOWN);
	ck_assert_str_eq(p.why, "timed out");
	ck_assert_msg(took >= 150 && took < 1000, "timed out after %llu ms",
	    (unsigned long long)took);
	req = fake_grpc_last(fk, FG_TXN);
	ck_assert_ptr_nonnull(req);
	RUN_UNTIL(req->closed || req->conn == NULL);
	RUN_UNTIL(fake_grpc_open(fk) == 0);
	ck_assert(!etcd_up(cli));
	ck_assert_int_eq(nstates, 2);
	ck_assert(!states[1]);

	call_range("/l/a", &q);
	RUN_UNTIL(q.times > 0);
	ck_assert_int_eq(q.status, ETCD_OK);
	ck_assert_int_eq(nstates, 3);
	ck_assert(states[2]);
	ck_assert_int_eq(fake_grpc_accepted(fk), 2);
}
END_TEST

/* A server that accepts and never speaks HTTP/2: calls made meanwhile fail
 * ETCD_DOWN at the request timeout. */
START_TEST(test_connect_timeout)
{
	const char *eps[] = { fake_grpc_endpoint(fk) };
	struct outcome o = { 0 };

	fake_grpc_deaf(fk, true);
	cli = client(eps, 1, 200, NULL, NULL);
	call_range("/l/a", &o);
	RUN_UNTIL(o.times > 0);
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
	struct outcome o[6] = { { 0 } };
	struct etcd *live;

	route_range(fk, 1, 0);
	fake_grpc_route_error(fk, FG_TXN, 3, "bad", true);
	cli = client_of_fake();
	call_range("/l/a", &o[0]);
	call_m(ETCD_TXN, &o[1]);
	call_range("/l/a", &o[2]);
	ck_assert_int_eq(o[0].times + o[1].times + o[2].times, 0);
	RUN_UNTIL(o[0].times > 0 && o[1].times > 0 && o[2].times > 0);
	/* once up, on the connection made */
	call_range("/l/a", &o[3]);
	ck_assert_int_eq(o[3].times, 0);
	RUN_UNTIL(o[3].times > 0);

	live = cli;
	snprintf(dead, sizeof(dead), "127.0.0.1:%d", dead_port());
	cli = client(deps, 1, TIMEOUT_MS, NULL, NULL);
	call_range("/l/a", &o[4]);
	call_range("/l/a", &o[5]);
	ck_assert_int_eq(o[4].times + o[5].times, 0);
	RUN_UNTIL(o[4].times > 0 && o[5].times > 0);
	etcd_destroy(cli);
	cli = live;

	settle(SETTLE_MS);
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
calls_without_fds_lane(struct outcome *o, int n, uint64_t lane)
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
			call_range("/l/a", &o[i]);
		else
			call_lane(lane, "/l/a", &o[i]);
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
}

static void
calls_without_fds(struct outcome *o, int n)
{
	calls_without_fds_lane(o, n, 0);
}

/* A call whose connection cannot even be started (no file descriptor left
 * for its socket) fails with ETCD_DOWN, from the loop like any other. */
START_TEST(test_callback_from_the_loop_when_connect_fails_at_once)
{
	struct outcome o = { 0 };

	cli = client_of_fake();
	calls_without_fds(&o, 1);
	ck_assert_msg(!o.inside, "the callback ran inside etcd_call");
	ck_assert_int_eq(o.times, 0);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_DOWN);
	settle(SETTLE_MS);
	ck_assert_int_eq(o.times, 1);
}
END_TEST

/* Calls that fail before they are sent are told from the loop, once each,
 * in the order they were made. */
START_TEST(test_failed_at_once_in_order)
{
	struct outcome o[4] = { { 0 } };

	cli = client_of_fake();
	calls_without_fds(o, 4);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(o[i].times, 0);
	RUN_UNTIL(o[3].times > 0);
	settle(SETTLE_MS);
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
	RUN_UNTIL(fake_grpc_count(fk, FG_RANGE) >= n &&
	    (req = fake_grpc_last(fk, FG_RANGE)) != NULL && req->ended);
	ck_assert_int_eq(fake_grpc_count(fk, FG_RANGE), n);
	return req;
}

/* Calls of one lane reach etcd one after the other, in the order they were
 * made: the next is sent once the one before is answered, never earlier. */
START_TEST(test_lane_one_at_a_time)
{
	static const char *keys[] = { "/l/1", "/l/2", "/l/3" };
	struct outcome o[3] = { { 0 } };
	struct fake_grpc_req *req;

	cli = client_of_fake();
	for (int i = 0; i < 3; i++)
		call_lane(5, keys[i], &o[i]);
	for (int i = 0; i < 3; i++) {
		req = nth_range(i + 1);
		settle(SETTLE_MS);
		ck_assert_int_eq(fake_grpc_count(fk, FG_RANGE), i + 1);	/* the next waits */
		ck_assert_int_eq(fake_grpc_npending(fk, FG_RANGE), 1);
		assert_range_key(req, keys[i]);
		ck_assert_int_eq(nresults, i);
		reply_range(req, 10 + i);
		RUN_UNTIL(o[i].times > 0);
	}
	settle(SETTLE_MS);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(o[i].times, 1);
		ck_assert_int_eq(o[i].seq, i + 1);
		ck_assert_int_eq(o[i].status, ETCD_OK);
		ck_assert_int_eq(o[i].rev, 10 + i);
		ck_assert(!o[i].inside);
	}
	ck_assert_int_eq(fake_grpc_count(fk, NULL), 3);
	ck_assert_int_eq(fake_grpc_accepted(fk), 1);
}
END_TEST

/* Calls of other lanes, of lane 0 and etcd_call go out at once, side by
 * side on one connection; only the second call of each lane waits, for
 * the first of its own lane alone. */
START_TEST(test_lanes_multiplexed)
{
	struct outcome o[7] = { { 0 } };
	struct fake_grpc_req *reqs[5];
	static const char *first[] = { "/l/a1", "/l/b1", "/l/c", "/l/d", "/l/e" };

	cli = client_of_fake();
	call_lane(1, "/l/a1", &o[0]);
	call_lane(2, "/l/b1", &o[1]);
	call_range("/l/c", &o[2]);
	call_lane(0, "/l/d", &o[3]);
	call_lane(0, "/l/e", &o[4]);
	call_lane(1, "/l/a2", &o[5]);
	call_lane(2, "/l/b2", &o[6]);
	RUN_UNTIL(fake_grpc_count(fk, FG_RANGE) == 5 && fake_grpc_nth(fk, 4)->ended);
	settle(SETTLE_MS);
	ck_assert_int_eq(fake_grpc_count(fk, FG_RANGE), 5);
	ck_assert_int_eq(fake_grpc_npending(fk, FG_RANGE), 5);
	for (int i = 0; i < 5; i++) {
		reqs[i] = fake_grpc_nth(fk, i);
		assert_range_key(reqs[i], first[i]);
		ck_assert_int_eq(reqs[i]->conn_no, 1);
	}

	/* lane 0 and lane 2 answered: b2 goes, a2 still waits for a1 */
	for (int i = 4; i >= 1; i--)
		reply_range(reqs[i], 20 + i);
	RUN_UNTIL(o[1].times > 0 && o[2].times > 0 && o[3].times > 0 && o[4].times > 0);
	assert_range_key(nth_range(6), "/l/b2");
	settle(SETTLE_MS);
	ck_assert_int_eq(fake_grpc_count(fk, FG_RANGE), 6);
	ck_assert_int_eq(o[0].times + o[5].times + o[6].times, 0);

	reply_range(reqs[0], 30);
	RUN_UNTIL(o[0].times > 0);
	assert_range_key(nth_range(7), "/l/a2");
	reply_range(fake_grpc_nth(fk, 5), 31);
	reply_range(fake_grpc_nth(fk, 6), 32);
	RUN_UNTIL(o[5].times > 0 && o[6].times > 0);
	settle(SETTLE_MS);
	for (int i = 0; i < 7; i++) {
		ck_assert_int_eq(o[i].times, 1);
		ck_assert_int_eq(o[i].status, ETCD_OK);
	}
	ck_assert_int_eq(o[6].rev, 31);
	ck_assert_int_eq(o[5].rev, 32);
	ck_assert_int_eq(fake_grpc_accepted(fk), 1);
}
END_TEST

/* The next call of a lane is sent when the one before it ends however it
 * ends: refused by etcd (ETCD_FAILED), timed out, its connection lost; its
 * own request timeout starts when it is sent. */
START_TEST(test_lane_after_failures)
{
	const char *eps[] = { fake_grpc_endpoint(fk) };
	struct outcome o[4] = { { 0 } };
	struct fake_grpc_req *req;
	uint64_t t0, took;

	cli = client(eps, 1, 200, NULL, NULL);
	call_lane(3, "/l/1", &o[0]);
	call_lane(3, "/l/2", &o[1]);
	call_lane(3, "/l/3", &o[2]);
	call_lane(3, "/l/4", &o[3]);

	req = nth_range(1);
	assert_range_key(req, "/l/1");
	t0 = clock_ms();	/* before the next is sent */
	fake_grpc_fail(req, 9, "refused", true);
	RUN_UNTIL(o[0].times > 0);
	ck_assert_int_eq(o[0].status, ETCD_FAILED);
	ck_assert_int_eq(o[0].code, 9);

	req = nth_range(2);	/* left unanswered: it times out */
	assert_range_key(req, "/l/2");
	ck_assert_int_eq(o[1].times, 0);
	RUN_UNTIL(o[1].times > 0);
	took = clock_ms() - t0;
	ck_assert_int_eq(o[1].status, ETCD_DOWN);
	ck_assert_str_eq(o[1].why, "timed out");
	ck_assert_msg(took >= 150, "timed out after %llu ms", (unsigned long long)took);

	req = nth_range(3);	/* on a new connection */
	assert_range_key(req, "/l/3");
	ck_assert_int_eq(req->conn_no, 2);
	fake_grpc_drop(fk);
	RUN_UNTIL(o[2].times > 0);
	ck_assert_int_eq(o[2].status, ETCD_DOWN);

	req = nth_range(4);
	assert_range_key(req, "/l/4");
	ck_assert_int_eq(req->conn_no, 3);
	settle(100);		/* more than 200 ms since it was made */
	reply_range(req, 40);
	RUN_UNTIL(o[3].times > 0);
	ck_assert_int_eq(o[3].status, ETCD_OK);
	ck_assert_int_eq(o[3].rev, 40);
	settle(SETTLE_MS);
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
	struct outcome o[3] = { { 0 } };

	snprintf(ep, sizeof(ep), "127.0.0.1:%d", dead_port());
	cli = client(eps, 1, TIMEOUT_MS, NULL, NULL);
	for (int i = 0; i < 3; i++)
		call_lane(9, "/l/a", &o[i]);
	RUN_UNTIL(o[2].times > 0);
	settle(SETTLE_MS);
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
	struct outcome o[2] = { { 0 } };

	route_range(fk, 3, 0);
	cli = client_of_fake();
	calls_without_fds_lane(o, 2, 6);
	ck_assert_int_eq(o[0].times + o[1].times, 0);
	RUN_UNTIL(o[1].times > 0);
	settle(SETTLE_MS);
	ck_assert_int_eq(o[0].times, 1);
	ck_assert_int_eq(o[0].status, ETCD_DOWN);
	ck_assert_int_eq(o[1].times, 1);
	ck_assert_int_eq(o[1].status, ETCD_OK);
	ck_assert_int_eq(o[1].seq, 2);
	ck_assert(!o[0].inside && !o[1].inside);
	ck_assert_int_eq(fake_grpc_count(fk, FG_RANGE), 1);
}
END_TEST

/* A call of a lane made by the callback of the call before it in that lane
 * goes after the calls already queued there; made when none is queued, it
 * is sent once that callback returns. */
START_TEST(test_lane_call_from_the_callback_keeps_order)
{
	static const char *keys[] = { "/l/A", "/l/B", "/l/C", "/l/D", "/l/E" };
	struct outcome o[5] = { { 0 } }, other = { 0 };
	struct fake_grpc_req *req;

	cli = client_of_fake();
	call_lane(7, "/l/A", &o[0]);
	call_lane(7, "/l/B", &o[1]);
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
		settle(SETTLE_MS);
		ck_assert_int_eq(fake_grpc_count(fk, FG_RANGE), i + 1);
		ck_assert_int_eq(fake_grpc_npending(fk, FG_RANGE), 1);
		assert_range_key(req, keys[i]);
		reply_range(req, 50 + i);
		RUN_UNTIL(o[i].times > 0);
	}
	settle(SETTLE_MS);
	ck_assert_int_eq(fake_grpc_count(fk, FG_RANGE), 5);
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(o[i].times, 1);
		ck_assert_int_eq(o[i].seq, i + 1);
		ck_assert_int_eq(o[i].rev, 50 + i);
		ck_assert(!o[i].inside);
	}

	/* a call of another lane from a callback goes at once */
	o[0] = (struct outcome){ .then = &other, .then_lane = 8, .then_key = "/l/X" };
	memset(&o[1], 0, sizeof(o[1]));
	call_lane(7, "/l/A", &o[0]);
	call_lane(7, "/l/B", &o[1]);
	req = nth_range(6);
	reply_range(req, 60);
	RUN_UNTIL(fake_grpc_count(fk, FG_RANGE) == 8 && fake_grpc_nth(fk, 7)->ended);
	ck_assert_int_eq(fake_grpc_npending(fk, FG_RANGE), 2);
	reply_range(fake_grpc_nth(fk, 6), 61);
	reply_range(fake_grpc_nth(fk, 7), 62);
	RUN_UNTIL(o[1].times > 0 && other.times > 0);
	ck_assert_int_eq(other.status, ETCD_OK);
}
END_TEST

/* etcd_destroy with lane calls sent and others queued behind them, from
 * the test or from the callback of a lane's first call: the queued ones
 * are never sent nor told, and are freed. */
START_TEST(test_destroy_with_lane_calls_queued)
{
	struct outcome o[6] = { { 0 } }, p[3] = { { 0 } }, q[3] = { { 0 } };

	cli = client_of_fake();
	for (int i = 0; i < 6; i++)
		call_lane(i < 3 ? 1 : 2, "/l/a", &o[i]);
	RUN_UNTIL(fake_grpc_count(fk, FG_RANGE) == 2);
	etcd_destroy(cli);
	cli = NULL;
	settle(SETTLE_MS);
	for (int i = 0; i < 6; i++)
		ck_assert_msg(o[i].times == 0, "call %d: callback after etcd_destroy", i);
	ck_assert_int_eq(fake_grpc_count(fk, FG_RANGE), 2);

	/* before the loop ran */
	cli = client_of_fake();
	for (int i = 0; i < 3; i++)
		call_lane(4, "/l/b", &p[i]);
	etcd_destroy(cli);
	cli = NULL;
	settle(SETTLE_MS);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(p[i].times, 0);
	ck_assert_int_eq(fake_grpc_count(fk, FG_RANGE), 2);

	/* from the callback of the first */
	cli = client_of_fake();
	q[0].destroy = true;
	for (int i = 0; i < 3; i++)
		call_lane(5, "/l/c", &q[i]);
	reply_range(nth_range(3), 1);
	RUN_UNTIL(q[0].times > 0);
	ck_assert_ptr_null(cli);
	settle(SETTLE_MS);
	ck_assert_int_eq(q[0].times, 1);
	ck_assert_int_eq(q[1].times, 0);
	ck_assert_int_eq(q[2].times, 0);
	ck_assert_int_eq(fake_grpc_count(fk, FG_RANGE), 3);
}
END_TEST

/* ---- the watch stream ----------------------------------------------------- */

/* The fake's next watch stream, once its create request has come. */
static struct fake_grpc_req *
watch_req(void)
{
	struct fake_grpc_req *req;
	ProtobufCMessage *m;
	RUN_UNTIL(fake_grpc_count(fk, FG_WATCH) > watch_seen &&
	    (req = fake_grpc_last(fk, FG_WATCH)) != NULL &&
	    (m = fake_grpc_req_msg(req, &etcd__watch_request__descriptor)) != NULL);
	watch_seen = fake_grpc_count(fk, FG_WATCH);
	protobuf_c_message_free_unpacked(m, NULL);
	return req;
}

/* Send the watch message (rev, key: NULL for created) on req. */
static void
watch_send(struct fake_grpc_req *req, int64_t rev, const char *key)
{
	size_t len;
	uint8_t *p = watch_frame(rev, key, &len);
	fake_grpc_send(req, p, len);
	free(p);
	deliver();
}

/* Assert that the hook's n-th message is that of rev and key. */
static void
assert_msg(int n, int64_t rev, const char *key)
{
	char want[128];
	watch_text(want, sizeof(want), rev, key);
	ck_assert_int_gt(nmsgs, n);
	ck_assert_msg(strcmp(msgs[n], want) == 0, "message %d: got %s, expected %s", n,
	    msgs[n], want);
}

/* A client of fk with a watch stream the fake has its create request of. */
static struct fake_grpc_req *
watch_up(void)
{
	cli = client_of_fake();
	watch_start("/l/");
	ck_assert(etcd_watching(cli));
	return watch_req();
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

	watch_send(req, 5, NULL);
	RUN_UNTIL(nmsgs == 1);
	assert_msg(0, 5, NULL);
	ck_assert(etcd_up(cli));	/* etcd answered */

	p = watch_frame(6, "/l/a", &len);
	fake_grpc_send(req, p, 3);
	deliver();
	fake_grpc_send(req, p + 3, len / 2 - 3);
	deliver();
	ck_assert_int_eq(nmsgs, 1);
	fake_grpc_send(req, p + len / 2, len - len / 2);
	deliver();
	RUN_UNTIL(nmsgs == 2);
	assert_msg(1, 6, "/l/a");
	free(p);

	p = watch_frame(7, "/l/b", &len);
	q = watch_frame(8, "/l/c", &l2);
	p = realloc(p, len + l2);
	memcpy(p + len, q, l2);
	fake_grpc_send(req, p, len + l2);
	free(p);
	free(q);
	RUN_UNTIL(nmsgs >= 3);
	ck_assert_int_eq(nmsgs, 3 + 1);
	assert_msg(2, 7, "/l/b");
	assert_msg(3, 8, "/l/c");

	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 4);
	ck_assert(etcd_watching(cli));
	ck_assert_int_eq(fake_grpc_count(fk, FG_WATCH), 1);
	etcd_stats(cli, &st);
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
	uint8_t *a = watch_frame(5, NULL, &l1), *b = watch_frame(6, "/l/a", &l2);

	for (size_t i = 0; i < l1 + l2; i++) {
		fake_grpc_send(req, i < l1 ? a + i : b + i - l1, 1);
		deliver();
		/* a message comes once its last byte has */
		ck_assert_int_eq(nmsgs, i + 1 < l1 ? 0 : i + 1 < l1 + l2 ? 1 : 2);
	}
	RUN_UNTIL(nmsgs == 2);
	assert_msg(0, 5, NULL);
	assert_msg(1, 6, "/l/a");
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 2);
	ck_assert(etcd_watching(cli));
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

	watch_send(req, 5, NULL);
	RUN_UNTIL(nmsgs == 1);
	fake_grpc_send(req, "\1\0\0\0\2\x08\x01", 7);
	RUN_UNTIL(nmsgs == 2);
	ck_assert_str_eq(msgs[1], "NULL");
	ck_assert(!etcd_watching(cli));
	RUN_UNTIL(req->closed);
	ck_assert_uint_eq(req->close_code, NGHTTP2_CANCEL);
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 2);

	watch_start("/l/");
	req = watch_req();
	fake_grpc_send(req, "\0\0\0\0\3\xff\xff\xff", 8);
	RUN_UNTIL(nmsgs == 3);
	ck_assert_str_eq(msgs[2], "NULL");
	ck_assert(!etcd_watching(cli));
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 3);
}
END_TEST

/* etcd ending the stream (OK or an error status): the hook gets NULL, once. */
START_TEST(test_watch_stream_ends)
{
	struct fake_grpc_req *req = watch_up();

	watch_send(req, 5, NULL);
	RUN_UNTIL(nmsgs == 1);
	fake_grpc_end(req, 0, NULL);
	RUN_UNTIL(nmsgs == 2);
	ck_assert_str_eq(msgs[1], "NULL");
	ck_assert(!etcd_watching(cli));
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 2);

	watch_start("/l/");
	req = watch_req();
	fake_grpc_fail(req, 16, INVALID_TOKEN, true);
	RUN_UNTIL(nmsgs == 3);
	ck_assert_str_eq(msgs[2], "NULL");
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 3);
}
END_TEST

/* etcd_watch_stop ends the stream (cancelled) without a NULL message;
 * etcd_watch on a running stream replaces it, without a NULL message
 * either. */
START_TEST(test_watch_stop_is_silent)
{
	struct fake_grpc_req *req = watch_up(), *r2;
	Etcd__WatchRequest *wr;

	watch_send(req, 5, NULL);
	RUN_UNTIL(nmsgs == 1);
	etcd_watch_stop(cli);
	ck_assert(!etcd_watching(cli));
	RUN_UNTIL(req->closed);
	ck_assert_uint_eq(req->close_code, NGHTTP2_CANCEL);
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 1);

	watch_start("YQ");
	req = watch_req();
	watch_send(req, 5, NULL);
	RUN_UNTIL(nmsgs == 2);
	watch_start("Yg");
	r2 = watch_req();
	wr = (Etcd__WatchRequest *)fake_grpc_req_msg(r2, &etcd__watch_request__descriptor);
	ck_assert(memcmp(wr->create_request->key.data, "Yg", 2) == 0);
	protobuf_c_message_free_unpacked(&wr->base, NULL);
	RUN_UNTIL(req->closed);
	watch_send(r2, 6, "/l/a");
	RUN_UNTIL(nmsgs == 3);
	assert_msg(2, 6, "/l/a");
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 3);
	ck_assert(etcd_watching(cli));
	etcd_watch_stop(cli);
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 3);
	ck_assert_int_eq(fake_grpc_accepted(fk), 1);
}
END_TEST

/* The hook may stop the stream while it is given a message: the messages
 * after it in the same frame are dropped, and no NULL message follows. */
START_TEST(test_watch_stopped_from_the_hook)
{
	struct fake_grpc_req *req = watch_up();
	size_t l1, l2;
	uint8_t *a = watch_frame(5, NULL, &l1), *b = watch_frame(6, "/l/a", &l2);

	a = realloc(a, l1 + l2);
	memcpy(a + l1, b, l2);
	hook_stop_at = 1;
	fake_grpc_send(req, a, l1 + l2);
	RUN_UNTIL(nmsgs == 1);
	ck_assert(!etcd_watching(cli));
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 1);
	ck_assert_int_eq(fake_grpc_count(fk, FG_WATCH), 1);
	free(a);
	free(b);
}
END_TEST

/* The hook may start another stream while it is given a message: the
 * messages after it in the same frame belong to the stream replaced and
 * are dropped; no NULL message follows, and the new stream's messages come. */
START_TEST(test_watch_restarted_from_the_hook)
{
	struct fake_grpc_req *req = watch_up();
	size_t l1, l2;
	uint8_t *a = watch_frame(5, NULL, &l1), *b = watch_frame(6, "/l/a", &l2);

	a = realloc(a, l1 + l2);
	memcpy(a + l1, b, l2);
	hook_restart_at = 1;
	fake_grpc_send(req, a, l1 + l2);
	RUN_UNTIL(fake_grpc_count(fk, FG_WATCH) == 2);
	req = watch_req();
	ck_assert_msg(nmsgs == 1, "%d messages after the restart, the last %s", nmsgs,
	    msgs[nmsgs - 1]);
	ck_assert(etcd_watching(cli));
	watch_send(req, 8, "/l/c");
	RUN_UNTIL(nmsgs == 2);
	assert_msg(1, 8, "/l/c");
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 2);
	free(a);
	free(b);
}
END_TEST

/* The hook may destroy the client: nothing more is told. */
START_TEST(test_watch_destroyed_from_the_hook)
{
	struct fake_grpc_req *req = watch_up();
	size_t l1, l2;
	uint8_t *a = watch_frame(5, NULL, &l1), *b = watch_frame(6, "/l/a", &l2);

	a = realloc(a, l1 + l2);
	memcpy(a + l1, b, l2);
	hook_destroy_at = 1;
	fake_grpc_send(req, a, l1 + l2);
	RUN_UNTIL(nmsgs == 1);
	ck_assert_ptr_null(cli);
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 1);
	free(a);
	free(b);
}
END_TEST

/* A stream to an endpoint nothing listens on ends with a NULL message. */
START_TEST(test_watch_unreachable)
{
	char dead[32];
	const char *deps[] = { dead };

	snprintf(dead, sizeof(dead), "127.0.0.1:%d", dead_port());
	cli = client(deps, 1, TIMEOUT_MS, NULL, NULL);
	watch_start("/l/");
	ck_assert_int_eq(nmsgs, 0);
	RUN_UNTIL(nmsgs == 1);
	ck_assert_str_eq(msgs[0], "NULL");
	ck_assert(!etcd_watching(cli));
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 1);
}
END_TEST

/* When a call times out on the connection the stream is on, the client
 * moves to the next endpoint and the stream ends (NULL) so that its owner
 * starts it again there. */
START_TEST(test_watch_ends_when_its_endpoint_is_given_up)
{
	struct fake_grpc *other = fake_grpc_new(base);
	const char *eps[] = { fake_grpc_endpoint(fk), fake_grpc_endpoint(other) };
	struct outcome o = { 0 };
	struct fake_grpc_req *req;

	cli = client(eps, 2, 200, NULL, NULL);
	watch_start("/l/");
	req = watch_req();
	watch_send(req, 5, NULL);
	RUN_UNTIL(nmsgs == 1);

	call_m(ETCD_TXN, &o);	/* fk keeps it: it times out */
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_DOWN);
	ck_assert_str_eq(etcd_endpoint(cli), fake_grpc_endpoint(other));
	RUN_UNTIL(nmsgs == 2);
	ck_assert_str_eq(msgs[1], "NULL");
	ck_assert(!etcd_watching(cli));
	etcd_destroy(cli);
	cli = NULL;
	fake_grpc_free(other);
}
END_TEST

/* An idle watch's connection is checked with a PING: answered, it lives
 * on; unanswered within the request timeout, the connection is given up
 * and the stream ends. */
START_TEST(test_watch_idle_ping)
{
	const char *eps[] = { fake_grpc_endpoint(fk) };
	struct fake_grpc_req *req;
	uint64_t t0;

	cli = client_ping(eps, 1, 200, NULL, NULL, 100);
	watch_start("/l/");
	req = watch_req();
	watch_send(req, 5, NULL);
	RUN_UNTIL(nmsgs == 1);
	settle(600);	/* PINGs answered */
	ck_assert_int_eq(nmsgs, 1);
	ck_assert(etcd_watching(cli));
	ck_assert_int_eq(fake_grpc_accepted(fk), 1);

	fake_grpc_deaf(fk, true);
	t0 = clock_ms();
	RUN_UNTIL(nmsgs == 2);
	ck_assert_str_eq(msgs[1], "NULL");
	ck_assert_msg(clock_ms() - t0 < 1000, "given up after %llu ms",
	    (unsigned long long)(clock_ms() - t0));
	ck_assert(!etcd_up(cli));
	ck_assert_msg(strstr(etcd_why_down(cli), "timed out") != NULL, "why: %s",
	    etcd_why_down(cli));
}
END_TEST

/* ---- authentication ------------------------------------------------------- */

/* Route fk's Authenticate to answer token. */
static void
route_auth(const char *token)
{
	Etcd__AuthenticateResponse ar = ETCD__AUTHENTICATE_RESPONSE__INIT;
	ar.header = header(1);
	ar.token = (char *)(uintptr_t)token;
	fake_grpc_route(fk, FG_AUTH, &ar.base);
}

/* With a user name, the first calls wait for one Authenticate with the name
 * and password, then go out with the token as "token" metadata; so do later
 * calls, without authenticating again. */
START_TEST(test_auth_token)
{
	const char *eps[] = { fake_grpc_endpoint(fk) };
	struct outcome o = { 0 }, p = { 0 }, q = { 0 };
	Etcd__AuthenticateRequest *ar;
	struct fake_grpc_req *req;

	route_auth("T1");
	route_range(fk, 1, 0);
	cli = client(eps, 1, TIMEOUT_MS, "alice", "s3cret");
	call_range("/l/a", &o);
	call_range("/l/b", &p);
	RUN_UNTIL(o.times > 0 && p.times > 0);
	ck_assert(!o.inside && !p.inside);
	ck_assert_int_eq(o.status, ETCD_OK);
	ck_assert_int_eq(p.status, ETCD_OK);
	ck_assert_int_eq(fake_grpc_count(fk, FG_AUTH), 1);
	req = fake_grpc_nth(fk, 0);
	ck_assert_str_eq(req->path, FG_AUTH);
	ck_assert(!req->has_token);
	ar = (Etcd__AuthenticateRequest *)fake_grpc_req_msg(req,
	    &etcd__authenticate_request__descriptor);
	ck_assert_str_eq(ar->name, "alice");
	ck_assert_str_eq(ar->password, "s3cret");
	protobuf_c_message_free_unpacked(&ar->base, NULL);
	ck_assert_int_eq(fake_grpc_count(fk, NULL), 3);
	for (int i = 1; i < 3; i++) {
		req = fake_grpc_nth(fk, i);
		ck_assert_str_eq(req->path, FG_RANGE);
		ck_assert(req->has_token);
		ck_assert_str_eq(req->token, "T1");
	}

	call_range("/l/c", &q);
	RUN_UNTIL(q.times > 0);
	ck_assert_int_eq(q.status, ETCD_OK);
	ck_assert_int_eq(fake_grpc_count(fk, FG_AUTH), 1);
	ck_assert_str_eq(fake_grpc_last(fk, FG_RANGE)->token, "T1");
}
END_TEST

/* Answer a Range with UNAUTHENTICATED when its token is T1 (or always
 * when arg is not NULL), else with a RangeResponse. */
static void
range_needs_new_token(void *arg, struct fake_grpc_req *req)
{
	if (arg != NULL || strcmp(req->token, "T1") == 0)
		fake_grpc_fail(req, 16, INVALID_TOKEN, true);
	else
		reply_range(req, 42);
}

/* A token etcd no longer takes (code 16, "invalid auth token"): the client
 * authenticates again and sends the call once more with the new token; a
 * call refused twice fails with code 16. */
START_TEST(test_auth_token_expired)
{
	const char *eps[] = { fake_grpc_endpoint(fk) };
	struct outcome o = { 0 }, p = { 0 }, q = { 0 };
	static int always = 1;

	route_auth("T1");
	route_range(fk, 1, 0);
	cli = client(eps, 1, TIMEOUT_MS, "alice", "s3cret");
	call_range("/l/a", &o);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_OK);

	fake_grpc_route_fn(fk, FG_RANGE, range_needs_new_token, NULL);
	route_auth("T2");
	call_range("/l/a", &p);
	RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.status, ETCD_OK);
	ck_assert_int_eq(p.rev, 42);
	ck_assert_int_eq(fake_grpc_count(fk, FG_AUTH), 2);
	ck_assert_int_eq(fake_grpc_count(fk, FG_RANGE), 3);
	ck_assert_str_eq(fake_grpc_last(fk, FG_RANGE)->token, "T2");

	fake_grpc_route_fn(fk, FG_RANGE, range_needs_new_token, &always);
	route_auth("T3");
	call_range("/l/a", &q);
	RUN_UNTIL(q.times > 0);
	ck_assert_int_eq(q.status, ETCD_FAILED);
	ck_assert_int_eq(q.code, 16);
	ck_assert_int_eq(fake_grpc_count(fk, FG_RANGE), 5);
	ck_assert_int_eq(fake_grpc_count(fk, FG_AUTH), 3);
	settle(SETTLE_MS);
	ck_assert_int_eq(q.times, 1);
}
END_TEST

/* A lane call refused for an expired token is sent again with the new one
 * before the next call of its lane goes out, with the new token too. */
START_TEST(test_auth_lane_call_resent_first)
{
	const char *eps[] = { fake_grpc_endpoint(fk) };
	struct outcome o[2] = { { 0 } };
	struct fake_grpc_req *req;

	route_auth("T1");
	cli = client(eps, 1, TIMEOUT_MS, "alice", "s3cret");
	call_lane(4, "/l/1", &o[0]);
	call_lane(4, "/l/2", &o[1]);
	req = nth_range(1);
	ck_assert_str_eq(req->token, "T1");
	route_auth("T2");
	fake_grpc_fail(req, 16, INVALID_TOKEN, true);
	req = nth_range(2);
	assert_range_key(req, "/l/1");
	ck_assert_str_eq(req->token, "T2");
	settle(SETTLE_MS);
	ck_assert_int_eq(fake_grpc_count(fk, FG_RANGE), 2);
	ck_assert_int_eq(o[0].times, 0);
	reply_range(req, 5);
	RUN_UNTIL(o[0].times > 0);
	ck_assert_int_eq(o[0].status, ETCD_OK);
	req = nth_range(3);
	assert_range_key(req, "/l/2");
	ck_assert_str_eq(req->token, "T2");
	reply_range(req, 6);
	RUN_UNTIL(o[1].times > 0);
	ck_assert_int_eq(o[1].status, ETCD_OK);
	ck_assert_int_eq(o[1].seq, 2);
	ck_assert_int_eq(fake_grpc_count(fk, FG_AUTH), 2);
}
END_TEST

/* etcd refusing the user (code 3, as etcd answers a wrong password) fails
 * the calls that waited for the token with ETCD_FAILED and the reason;
 * none of them is sent; the client is down for that reason. */
START_TEST(test_auth_refused)
{
	const char *eps[] = { fake_grpc_endpoint(fk) };
	struct outcome o = { 0 }, p = { 0 };

	fake_grpc_route_error(fk, FG_AUTH, 3, AUTH_REFUSED, true);
	route_range(fk, 1, 0);
	cli = client(eps, 1, TIMEOUT_MS, "alice", "wrong");
	call_range("/l/a", &o);
	call_range("/l/b", &p);
	RUN_UNTIL(o.times > 0 && p.times > 0);
	ck_assert(!o.inside && !p.inside);
	ck_assert_int_eq(o.status, ETCD_FAILED);
	ck_assert_int_eq(p.status, ETCD_FAILED);
	ck_assert_int_eq(o.code, 3);
	ck_assert_str_eq(o.why, "authentication failed: " AUTH_REFUSED);
	ck_assert_int_eq(fake_grpc_count(fk, FG_AUTH), 1);
	ck_assert_int_eq(fake_grpc_count(fk, FG_RANGE), 0);
	ck_assert(!etcd_up(cli));
	ck_assert_ptr_nonnull(strstr(etcd_why_down(cli), "authentication failed: "));
	settle(SETTLE_MS);
	ck_assert_int_eq(o.times, 1);
	ck_assert_int_eq(p.times, 1);
}
END_TEST

/* The watch waits for the token too, and carries it. */
START_TEST(test_auth_watch)
{
	const char *eps[] = { fake_grpc_endpoint(fk) };
	struct fake_grpc_req *req;

	route_auth("T1");
	cli = client(eps, 1, TIMEOUT_MS, "alice", "s3cret");
	watch_start("/l/");
	req = watch_req();
	ck_assert_str_eq(req->token, "T1");
	ck_assert_int_eq(fake_grpc_count(fk, FG_AUTH), 1);
	watch_send(req, 5, NULL);
	RUN_UNTIL(nmsgs == 1);
}
END_TEST

/* ---- the etcd backend on a fake ------------------------------------------ */

#define TOKEN_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define TOKEN_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define LEASE_NOT_FOUND "etcdserver: requested lease not found"
#define GRPC_NOT_FOUND 5

static int nexpires;			/* the backend's up.expire calls */

static void
be_wakeup(void *arg, const char *key, size_t keylen)
{
	(void)arg;
	(void)key;
	(void)keylen;
}

static void
be_expire(void *arg, const char *key, size_t keylen)
{
	(void)arg;
	(void)key;
	(void)keylen;
	nexpires++;
}

/* The answer to a backend operation, as its callback saw it. */
struct be_outcome {
	int times;			/* callback runs */
	enum be_status status;
	uint64_t fence;
};

static void
on_be(void *arg, const struct be_reply *r)
{
	struct be_outcome *o = arg;
	o->times++;
	o->status = r->status;
	o->fence = r->fence;
}

/* Route fk's LeaseGrant and LeaseKeepAlive to lease id, TTL 10 s. */
static void
route_lease(int64_t id)
{
	Etcd__LeaseGrantResponse g = ETCD__LEASE_GRANT_RESPONSE__INIT;
	Etcd__LeaseKeepAliveResponse ka = ETCD__LEASE_KEEP_ALIVE_RESPONSE__INIT;
	g.header = header(9);
	g.id = id;
	g.ttl = 10;
	ka.header = header(9);
	ka.id = id;
	ka.ttl = 10;
	fake_grpc_route(fk, FG_LEASE_GRANT, &g.base);
	fake_grpc_route(fk, FG_LEASE_KEEPALIVE, &ka.base);
}

/* The etcd backend (default settings) on fk, whose routes answer its lease
 * grant: once its watch stream is created (at revision 10) and it counts as
 * connected. The caller destroys both. */
static struct backend *
backend_of_fake(struct conf **conf)
{
	char url[64];
	struct conf *c = conf_create();
	struct backend *be;
	struct fake_grpc_req *req;
	Etcd__WatchResponse w;
	Etcd__Event ev, *evp[1];
	Etcd__KeyValue kv;

	snprintf(url, sizeof(url), "etcd://%s", fake_grpc_endpoint(fk));
	ck_assert_int_eq(conf_override_backend(c, url), 0);
	ck_assert_int_eq(conf_finish(c), 0);
	be = backend_create("etcd", base, c->backend_settings);
	ck_assert_ptr_nonnull(be);
	be->up.wakeup = be_wakeup;
	be->up.expire = be_expire;
	be->up.arg = NULL;
	nexpires = 0;
	req = watch_req();
	watch_msg(&w, &ev, evp, &kv, 10, NULL);
	fake_grpc_send_msg(req, &w.base);
	RUN_UNTIL(strcmp(be->ops->state(be), "connected") == 0);
	*conf = c;
	return be;
}

/* The backend's INFO field name ("backend_lost_total"), a number. */
static long long
be_info(struct backend *be, const char *name)
{
	struct evbuffer *b = evbuffer_new();
	char pat[64];
	const char *t, *p;
	long long v;

	be->ops->info(be, b);
	evbuffer_add(b, "", 1);
	t = (const char *)evbuffer_pullup(b, -1);
	snprintf(pat, sizeof(pat), "%s:", name);
	p = strstr(t, pat);
	ck_assert_msg(p != NULL && (p == t || p[-1] == '\n'), "no %s in %s", name, t);
	v = strtoll(p + strlen(pat), NULL, 10);
	evbuffer_free(b);
	return v;
}

/* Acquire an exclusive lease of key for token on be. */
static void
be_acquire(struct backend *be, const char *key, const char *token, struct be_outcome *o)
{
	struct be_lock l = { .key = key, .keylen = strlen(key), .mode = LOCK_EXCLUSIVE,
	    .token = token, .ttl_ms = 10000 };
	be->ops->acquire(be, &l, on_be, o);
}

/* The lease the put of Txn request req names, and its key into key. */
static int64_t
txn_put_lease(const struct fake_grpc_req *req, char *key, size_t size)
{
	Etcd__TxnRequest *t = (Etcd__TxnRequest *)fake_grpc_req_msg(req,
	    &etcd__txn_request__descriptor);
	int64_t lease;
	ck_assert_ptr_nonnull(t);
	ck_assert_uint_ge(t->n_success, 1);
	ck_assert_int_eq(t->success[0]->request_case, ETCD__REQUEST_OP__REQUEST_REQUEST_PUT);
	lease = t->success[0]->request_put->lease;
	snprintf(key, size, "%.*s", (int)t->success[0]->request_put->key.len,
	    (const char *)t->success[0]->request_put->key.data);
	protobuf_c_message_free_unpacked(&t->base, NULL);
	return lease;
}

/* The n-th Txn the fake received (from 1), once it has all come. */
static struct fake_grpc_req *
nth_txn(int n)
{
	struct fake_grpc_req *req = NULL;
	RUN_UNTIL(fake_grpc_count(fk, FG_TXN) >= n);
	for (int i = 0, seen = 0; (req = fake_grpc_nth(fk, i)) != NULL; i++)
		if (strcmp(req->path, FG_TXN) == 0 && ++seen == n)
			break;
	ck_assert_ptr_nonnull(req);
	RUN_UNTIL(req->ended);
	return req;
}

/* Two acquires' Txns put on lease 7, both kept pending (other keys: other
 * lanes, so both are out at once). The first fails with "lease not found":
 * lease 7 is lost and lease 8 granted. The second, answered the same after
 * that, is about lease 7 too: lease 8 stays (lease 7 was declared lost,
 * and its revoke made every Txn on it fail the same way). */
START_TEST(test_backend_late_lease_not_found_keeps_new_lease)
{
	struct be_outcome a = { 0 }, b = { 0 };
	Etcd__LeaseRevokeResponse rv = ETCD__LEASE_REVOKE_RESPONSE__INIT;
	struct fake_grpc_req *ra, *rb;
	struct conf *conf;
	struct backend *be;
	char key[128];

	route_lease(7);
	fake_grpc_route(fk, FG_LEASE_REVOKE, &rv.base);
	be = backend_of_fake(&conf);
	ck_assert_int_eq(be_info(be, "backend_lease_id"), 7);
	be_acquire(be, "a", TOKEN_A, &a);
	be_acquire(be, "b", TOKEN_B, &b);
	ra = nth_txn(1);
	rb = nth_txn(2);
	ck_assert_int_eq(txn_put_lease(ra, key, sizeof(key)), 7);
	ck_assert_str_eq(key, "dlock/a/" TOKEN_A);
	ck_assert_int_eq(txn_put_lease(rb, key, sizeof(key)), 7);
	ck_assert_str_eq(key, "dlock/b/" TOKEN_B);

	route_lease(8);
	fake_grpc_fail(ra, GRPC_NOT_FOUND, LEASE_NOT_FOUND, true);
	RUN_UNTIL(be_info(be, "backend_lease_id") == 8);
	ck_assert_int_eq(be_info(be, "backend_lost_total"), 1);
	RUN_UNTIL(a.times > 0);
	ck_assert_int_eq(a.status, BE_ERROR);

	fake_grpc_fail(rb, GRPC_NOT_FOUND, LEASE_NOT_FOUND, true);
	RUN_UNTIL(b.times > 0);
	ck_assert_int_eq(b.status, BE_ERROR);
	settle(SETTLE_MS);
	ck_assert_int_eq(be_info(be, "backend_lost_total"), 1);
	ck_assert_int_eq(be_info(be, "backend_lease_id"), 8);
	ck_assert_int_eq(fake_grpc_count(fk, FG_LEASE_GRANT), 2);
	ck_assert_int_eq(nexpires, 1);
	ck_assert_int_eq(a.times, 1);
	ck_assert_int_eq(b.times, 1);
	backend_destroy(be);
	conf_destroy(conf);
}
END_TEST

/* The same with both acquires on one key (one lane): the second Txn, put
 * on lease 7, goes out only once the first was answered, after lease 7 was
 * declared lost; its "lease not found" keeps lease 8. */
START_TEST(test_backend_late_lease_not_found_on_one_lane)
{
	struct be_outcome a = { 0 }, b = { 0 };
	Etcd__LeaseRevokeResponse rv = ETCD__LEASE_REVOKE_RESPONSE__INIT;
	struct fake_grpc_req *ra, *rb;
	struct conf *conf;
	struct backend *be;
	char key[128];

	route_lease(7);
	fake_grpc_route(fk, FG_LEASE_REVOKE, &rv.base);
	be = backend_of_fake(&conf);
	be_acquire(be, "a", TOKEN_A, &a);
	be_acquire(be, "a", TOKEN_B, &b);
	ra = nth_txn(1);
	settle(SETTLE_MS);
	ck_assert_int_eq(fake_grpc_count(fk, FG_TXN), 1);	/* B waits for A */
	ck_assert_int_eq(txn_put_lease(ra, key, sizeof(key)), 7);
	ck_assert_str_eq(key, "dlock/a/" TOKEN_A);

	route_lease(8);
	fake_grpc_fail(ra, GRPC_NOT_FOUND, LEASE_NOT_FOUND, true);
	RUN_UNTIL(be_info(be, "backend_lease_id") == 8);
	ck_assert_int_eq(be_info(be, "backend_lost_total"), 1);

	rb = nth_txn(2);	/* on one lane: sent now */
	ck_assert_int_eq(txn_put_lease(rb, key, sizeof(key)), 7);
	ck_assert_str_eq(key, "dlock/a/" TOKEN_B);
	fake_grpc_fail(rb, GRPC_NOT_FOUND, LEASE_NOT_FOUND, true);
	RUN_UNTIL(a.times > 0 && b.times > 0);
	ck_assert_int_eq(a.status, BE_ERROR);
	ck_assert_int_eq(b.status, BE_ERROR);
	settle(SETTLE_MS);
	ck_assert_int_eq(be_info(be, "backend_lost_total"), 1);
	ck_assert_int_eq(be_info(be, "backend_lease_id"), 8);
	ck_assert_int_eq(fake_grpc_count(fk, FG_LEASE_GRANT), 2);
	backend_destroy(be);
	conf_destroy(conf);
}
END_TEST

/* A watch message with one DELETE of key at rev, whose previous value was
 * created at created, sent on req. */
static void
watch_send_delete(struct fake_grpc_req *req, const char *key, int64_t rev, int64_t created)
{
	Etcd__WatchResponse w;
	Etcd__Event ev, *evp[1];
	Etcd__KeyValue kv, prev;
	watch_msg(&w, &ev, evp, &kv, rev, key);
	etcd__key_value__init(&prev);
	prev.key = kv.key;
	prev.create_revision = created;
	prev.mod_revision = created;
	prev.value.data = (uint8_t *)(uintptr_t)"x0";
	prev.value.len = 2;
	ev.prev_kv = &prev;
	fake_grpc_send_msg(req, &w.base);
	deliver();
}

/* A lock's etcd key holds at revision 20. The watch stream then reports a
 * delete of a key of the same name created at 12 (an older one: a waiter's
 * that went with a lost lease and was put again, replayed late by a stream
 * started again from an older revision): the lock is not lost. A delete of
 * the key created at 20 is someone else's: it is. */
START_TEST(test_backend_late_delete_of_older_key_keeps_lock)
{
	static const char ekey[] = "dlock/w/" TOKEN_A;
	Etcd__TxnResponse t = ETCD__TXN_RESPONSE__INIT;
	Etcd__ResponseOp op[2], *ops[2] = { &op[0], &op[1] };
	Etcd__PutResponse put = ETCD__PUT_RESPONSE__INIT;
	Etcd__RangeResponse range = ETCD__RANGE_RESPONSE__INIT;
	Etcd__KeyValue kv, *kvs[1] = { &kv };
	struct be_outcome a = { 0 };
	struct fake_grpc_req *watch;
	struct conf *conf;
	struct backend *be;

	etcd__response_op__init(&op[0]);
	etcd__response_op__init(&op[1]);
	etcd__key_value__init(&kv);
	kv.key.data = (uint8_t *)(uintptr_t)ekey;
	kv.key.len = strlen(ekey);
	kv.create_revision = 20;
	kv.mod_revision = 20;
	kv.value.data = (uint8_t *)(uintptr_t)"x0";
	kv.value.len = 2;
	kv.lease = 7;
	range.header = header(20);
	range.kvs = kvs;
	range.n_kvs = 1;
	range.count = 1;
	put.header = header(20);
	op[0].response_case = ETCD__RESPONSE_OP__RESPONSE_RESPONSE_PUT;
	op[0].response_put = &put;
	op[1].response_case = ETCD__RESPONSE_OP__RESPONSE_RESPONSE_RANGE;
	op[1].response_range = &range;
	t.header = header(20);
	t.succeeded = true;
	t.responses = ops;
	t.n_responses = 2;
	route_lease(7);
	fake_grpc_route(fk, FG_TXN, &t.base);
	be = backend_of_fake(&conf);
	watch = fake_grpc_last(fk, FG_WATCH);
	{
		/* the prefix watch: deletes only, without previous values (etcd
		 * would read each one) */
		Etcd__WatchRequest *wr = (Etcd__WatchRequest *)fake_grpc_req_msg(watch,
		    &etcd__watch_request__descriptor);
		ck_assert_ptr_nonnull(wr);
		ck_assert_int_eq(wr->request_union_case,
		    ETCD__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST);
		ck_assert(!wr->create_request->prev_kv);
		ck_assert_uint_eq(wr->create_request->n_filters, 1);
		ck_assert_int_eq(wr->create_request->filters[0],
		    ETCD__WATCH_CREATE_REQUEST__FILTER_TYPE__NOPUT);
		protobuf_c_message_free_unpacked(&wr->base, NULL);
	}
	be_acquire(be, "w", TOKEN_A, &a);
	RUN_UNTIL(a.times > 0);
	ck_assert_int_eq(a.status, BE_OK);
	ck_assert_uint_eq(a.fence, (uint64_t)20 << 16);	/* the revision, shifted */
	ck_assert_int_eq(be_info(be, "backend_keys_held"), 1);

	watch_send_delete(watch, ekey, 15, 12);
	settle(SETTLE_MS);
	ck_assert_int_eq(nexpires, 0);
	ck_assert_int_eq(be_info(be, "backend_keys_held"), 1);

	watch_send_delete(watch, ekey, 25, 20);
	RUN_UNTIL(nexpires == 1);
	backend_destroy(be);
	conf_destroy(conf);
}
END_TEST

/* backend_destroy with operations in flight (acquires' Txns sent, one
 * queued behind another of its key, a release's delete sent) tells each
 * once, BE_ERROR, before it returns, and nothing afterwards. */
START_TEST(test_backend_destroy_with_work_in_flight)
{
	struct be_outcome o[4] = { { 0 } };
	struct be_lock rel = { .key = "c", .keylen = 1, .mode = LOCK_EXCLUSIVE,
	    .token = TOKEN_B, .ttl_ms = 10000 };
	struct conf *conf;
	struct backend *be;

	route_lease(7);
	be = backend_of_fake(&conf);
	be_acquire(be, "a", TOKEN_A, &o[0]);
	be_acquire(be, "a", TOKEN_B, &o[1]);	/* waits for the first */
	be_acquire(be, "b", TOKEN_A, &o[2]);
	be->ops->release(be, &rel, on_be, &o[3]);
	RUN_UNTIL(fake_grpc_npending(fk, FG_TXN) == 3);
	settle(SETTLE_MS);
	ck_assert_int_eq(fake_grpc_count(fk, FG_TXN), 3);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(o[i].times, 0);
	backend_destroy(be);
	for (int i = 0; i < 4; i++) {
		ck_assert_msg(o[i].times == 1, "operation %d: told %d times", i, o[i].times);
		ck_assert_int_eq(o[i].status, BE_ERROR);
	}
	settle(SETTLE_MS);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(o[i].times, 1);
	ck_assert_int_eq(fake_grpc_count(fk, FG_TXN), 3);
	conf_destroy(conf);
}
END_TEST

/* backend_destroy right after it was created and asked for an acquire and
 * a release, before the loop ran: each is told once, BE_ERROR, before it
 * returns, and nothing runs afterwards. */
START_TEST(test_backend_destroy_before_the_loop)
{
	char url[64];
	struct be_outcome o[2] = { { 0 } };
	struct be_lock rel = { .key = "c", .keylen = 1, .mode = LOCK_EXCLUSIVE,
	    .token = TOKEN_B, .ttl_ms = 10000 };
	struct conf *conf = conf_create();
	struct backend *be;

	route_lease(7);
	snprintf(url, sizeof(url), "etcd://%s", fake_grpc_endpoint(fk));
	ck_assert_int_eq(conf_override_backend(conf, url), 0);
	ck_assert_int_eq(conf_finish(conf), 0);
	be = backend_create("etcd", base, conf->backend_settings);
	ck_assert_ptr_nonnull(be);
	be->up.wakeup = be_wakeup;
	be->up.expire = be_expire;
	nexpires = 0;
	be_acquire(be, "a", TOKEN_A, &o[0]);
	be->ops->release(be, &rel, on_be, &o[1]);
	ck_assert_int_eq(o[0].times + o[1].times, 0);
	backend_destroy(be);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(o[i].times, 1);
		ck_assert_int_eq(o[i].status, BE_ERROR);
	}
	settle(SETTLE_MS);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(o[i].times, 1);
	ck_assert_int_eq(nexpires, 0);
	conf_destroy(conf);
}
END_TEST

/* ---- destroy -------------------------------------------------------------- */

/* etcd_destroy with calls in flight (sent and unanswered, waiting for a
 * token) and a watch stream running with a message begun: no callback or
 * hook runs afterwards, and everything is freed. */
START_TEST(test_destroy_with_work_in_flight)
{
	const char *eps[] = { fake_grpc_endpoint(fk) };
	struct outcome o[5] = { { 0 } };
	struct fake_grpc_req *req;
	struct etcd *authed;
	size_t len;
	uint8_t *p;

	cli = client_of_fake();
	call_m(ETCD_TXN, &o[0]);
	call_m(ETCD_TXN, &o[1]);
	watch_start("/l/");
	req = watch_req();
	RUN_UNTIL(fake_grpc_npending(fk, FG_TXN) == 2);
	watch_send(req, 5, NULL);
	RUN_UNTIL(nmsgs == 1);
	p = watch_frame(6, "/l/a", &len);
	fake_grpc_send(req, p, 10);	/* a message begun */
	free(p);
	deliver();
	call_m(ETCD_TXN, &o[2]);	/* not sent yet */

	authed = client(eps, 1, TIMEOUT_MS, "alice", "s3cret");	/* the fake keeps the auth */
	{
		struct etcd *keep = cli;
		cli = authed;
		call_range("/l/a", &o[3]);
		call_range("/l/a", &o[4]);
		cli = keep;
	}
	RUN_UNTIL(fake_grpc_count(fk, FG_AUTH) == 1);

	etcd_destroy(cli);
	cli = NULL;
	etcd_destroy(authed);
	settle(SETTLE_MS);
	for (int i = 0; i < 5; i++)
		ck_assert_msg(o[i].times == 0, "call %d: callback after etcd_destroy", i);
	ck_assert_int_eq(nmsgs, 1);
}
END_TEST

/* etcd_destroy right after calls and a watch were asked for, before the
 * loop ran: nothing runs afterwards. */
START_TEST(test_destroy_before_the_loop)
{
	struct outcome o = { 0 }, p = { 0 };
	char dead[32];
	const char *deps[] = { dead };
	struct etcd *down;

	route_range(fk, 1, 0);
	cli = client_of_fake();
	call_range("/l/a", &o);
	watch_start("/l/");
	snprintf(dead, sizeof(dead), "127.0.0.1:%d", dead_port());
	down = client(deps, 1, TIMEOUT_MS, NULL, NULL);
	{
		struct etcd *keep = cli;
		cli = down;
		call_range("/l/a", &p);
		cli = keep;
	}
	etcd_destroy(cli);
	cli = NULL;
	etcd_destroy(down);
	settle(SETTLE_MS);
	ck_assert_int_eq(o.times, 0);
	ck_assert_int_eq(p.times, 0);
	ck_assert_int_eq(nmsgs, 0);
	ck_assert_int_eq(nstates, 0);
}
END_TEST

/* A client destroyed by the callback of an answered call, with others
 * answered in the same read and others pending: nobody else is told. */
START_TEST(test_destroy_from_a_callback)
{
	struct outcome o[4] = { { 0 } };
	struct fake_grpc_req *reqs[4];

	cli = client_of_fake();
	for (int i = 0; i < 4; i++)
		call_range("/l/a", &o[i]);
	watch_start("/l/");
	RUN_UNTIL(fake_grpc_npending(fk, FG_RANGE) == 4);
	for (int i = 0; i < 4; i++)
		reqs[i] = fake_grpc_nth(fk, i);
	o[1].destroy = true;
	reply_range(reqs[0], 1);
	reply_range(reqs[1], 2);
	reply_range(reqs[2], 3);
	RUN_UNTIL(o[1].times > 0);
	ck_assert_ptr_null(cli);
	settle(SETTLE_MS);
	ck_assert_int_eq(o[0].times, 1);
	ck_assert_int_eq(o[1].times, 1);
	ck_assert_int_eq(o[2].times, 0);
	ck_assert_int_eq(o[3].times, 0);
	ck_assert_int_eq(nmsgs, 0);
}
END_TEST

/* A client destroyed with failed calls not told yet tells none of them. */
START_TEST(test_destroy_with_failed_calls)
{
	struct outcome o[3] = { { 0 } };

	cli = client_of_fake();
	calls_without_fds(o, 3);
	etcd_destroy(cli);
	cli = NULL;
	settle(SETTLE_MS);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(o[i].times, 0);
}
END_TEST

/* A client destroyed by the callback of a failed call tells the others
 * nothing. */
START_TEST(test_destroy_from_a_failed_call)
{
	struct outcome o[3] = { { 0 } };

	cli = client_of_fake();
	o[1].destroy = true;
	calls_without_fds(o, 3);
	RUN_UNTIL(o[1].times > 0);
	ck_assert_ptr_null(cli);
	settle(SETTLE_MS);
	ck_assert_int_eq(o[0].times, 1);
	ck_assert_int_eq(o[1].times, 1);
	ck_assert_int_eq(o[2].times, 0);
}
END_TEST

static Suite *
etcd_suite(void)
{
	Suite *s = suite_create("etcd");
	TCase *tc = tcase_create("grpc");

	tcase_add_test(tc, test_grpc_next_whole_and_cut);
	tcase_add_test(tc, test_grpc_next_refused);
	tcase_add_test(tc, test_grpc_status);
	tcase_add_test(tc, test_grpc_message);
	suite_add_tcase(s, tc);

	tc = tcase_create("calls");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_call_answered);
	tcase_add_test(tc, test_call_error_status);
	tcase_add_test(tc, test_call_without_message);
	tcase_add_test(tc, test_message_over_the_limit);
	tcase_add_test(tc, test_many_calls_one_connection);
	tcase_add_test(tc, test_keepalive);
	tcase_add_test(tc, test_unreachable_endpoint);
	tcase_add_test(tc, test_down_after_up);
	tcase_add_test(tc, test_connection_lost_with_calls);
	tcase_add_test(tc, test_failover_to_next_endpoint);
	tcase_add_test(tc, test_timeout);
	tcase_add_test(tc, test_connect_timeout);
	tcase_add_test(tc, test_callbacks_from_the_loop);
	tcase_add_test(tc, test_callback_from_the_loop_when_connect_fails_at_once);
	tcase_add_test(tc, test_failed_at_once_in_order);
	suite_add_tcase(s, tc);

	tc = tcase_create("lanes");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_lane_one_at_a_time);
	tcase_add_test(tc, test_lanes_multiplexed);
	tcase_add_test(tc, test_lane_after_failures);
	tcase_add_test(tc, test_lane_unreachable_in_order);
	tcase_add_test(tc, test_lane_after_a_call_failed_at_once);
	tcase_add_test(tc, test_lane_call_from_the_callback_keeps_order);
	tcase_add_test(tc, test_destroy_with_lane_calls_queued);
	suite_add_tcase(s, tc);

	tc = tcase_create("watch");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_watch_messages);
	tcase_add_test(tc, test_watch_one_byte_per_frame);
	tcase_add_test(tc, test_watch_garbage);
	tcase_add_test(tc, test_watch_stream_ends);
	tcase_add_test(tc, test_watch_stop_is_silent);
	tcase_add_test(tc, test_watch_stopped_from_the_hook);
	tcase_add_test(tc, test_watch_restarted_from_the_hook);
	tcase_add_test(tc, test_watch_destroyed_from_the_hook);
	tcase_add_test(tc, test_watch_unreachable);
	tcase_add_test(tc, test_watch_ends_when_its_endpoint_is_given_up);
	tcase_add_test(tc, test_watch_idle_ping);
	suite_add_tcase(s, tc);

	tc = tcase_create("auth");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_auth_token);
	tcase_add_test(tc, test_auth_token_expired);
	tcase_add_test(tc, test_auth_refused);
	tcase_add_test(tc, test_auth_watch);
	tcase_add_test(tc, test_auth_lane_call_resent_first);
	suite_add_tcase(s, tc);

	tc = tcase_create("backend");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_backend_late_lease_not_found_keeps_new_lease);
	tcase_add_test(tc, test_backend_late_lease_not_found_on_one_lane);
	tcase_add_test(tc, test_backend_late_delete_of_older_key_keeps_lock);
	tcase_add_test(tc, test_backend_destroy_with_work_in_flight);
	tcase_add_test(tc, test_backend_destroy_before_the_loop);
	suite_add_tcase(s, tc);

	tc = tcase_create("destroy");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_destroy_with_work_in_flight);
	tcase_add_test(tc, test_destroy_before_the_loop);
	tcase_add_test(tc, test_destroy_from_a_callback);
	tcase_add_test(tc, test_destroy_with_failed_calls);
	tcase_add_test(tc, test_destroy_from_a_failed_call);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	signal(SIGPIPE, SIG_IGN);	/* a fake writes to a client that went away */
	if (log_init(LOG_LEVEL_ERROR, NULL) != 0)
		return EXIT_FAILURE;
	return suite_run(etcd_suite());
}
