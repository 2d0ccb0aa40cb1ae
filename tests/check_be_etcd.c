/*
 * check_be_etcd — unit tests of the etcd backend (daemon/etcd/be_etcd*.c) on
 * a fake etcd: late answers about a lease or a key it has given up since,
 * the observers' changes when the watch stream goes on from where it
 * stopped, and its destruction with operations in flight. Its recipe's decision on a
 * range is fuzzed (tests/fuzz/etcd.c); the rest is tested against real etcd
 * by the integration tests (tests/integration/test_etcd.py).
 *
 * No etcd: the backend's client talks to a fake gRPC server
 * (tests/fake_grpc.c) on the test's own loop (tests/grpc_fixture.c,
 * tests/etcd_fixture.c).
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

#include "backend.h"
#include "be_etcd_core.h"
#include "clock.h"
#include "conf.h"
#include "etcd.h"
#include "etcd_fixture.h"
#include "fake_grpc.h"
#include "suite.h"

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

/* Route gf_fake's LeaseGrant and LeaseKeepAlive to lease id, TTL 10 s. */
static void
route_lease(int64_t id)
{
	Etcd__LeaseGrantResponse g = ETCD__LEASE_GRANT_RESPONSE__INIT;
	Etcd__LeaseKeepAliveResponse ka = ETCD__LEASE_KEEP_ALIVE_RESPONSE__INIT;
	g.header = ef_header(9);
	g.id = id;
	g.ttl = 10;
	ka.header = ef_header(9);
	ka.id = id;
	ka.ttl = 10;
	fake_grpc_route(gf_fake, FG_LEASE_GRANT, &g.base);
	fake_grpc_route(gf_fake, FG_LEASE_KEEPALIVE, &ka.base);
}

/* The etcd backend (default settings) on gf_fake, just created, with the
 * test's up hooks; *conf gets its configuration. The caller destroys both. */
static struct backend *
backend_new(struct conf **conf)
{
	char url[64];
	struct conf *c = conf_create();
	struct backend *be;

	snprintf(url, sizeof(url), "etcd://%s", fake_grpc_endpoint(gf_fake));
	ck_assert_int_eq(conf_override_backend(c, url), 0);
	ck_assert_int_eq(conf_finish(c), 0);
	be = backend_create("etcd", gf_base, c->backend_settings);
	ck_assert_ptr_nonnull(be);
	be->up.wakeup = be_wakeup;
	be->up.expire = be_expire;
	be->up.arg = NULL;
	nexpires = 0;
	*conf = c;
	return be;
}

/* The same once gf_fake's routes answered its lease grant, its watch stream
 * is created (at revision 10), and it counts as connected. */
static struct backend *
backend_of_fake(struct conf **conf)
{
	struct backend *be = backend_new(conf);
	struct fake_grpc_req *req;
	Etcd__WatchResponse w;
	Etcd__Event ev, *evp[1];
	Etcd__KeyValue kv;

	req = ef_watch_req();
	ef_watch_msg(&w, &ev, evp, &kv, 10, NULL);
	fake_grpc_send_msg(req, &w.base);
	GF_RUN_UNTIL(strcmp(be->ops->state(be), "connected") == 0);
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
	GF_RUN_UNTIL(fake_grpc_count(gf_fake, FG_TXN) >= n);
	for (int i = 0, seen = 0; (req = fake_grpc_nth(gf_fake, i)) != NULL; i++)
		if (strcmp(req->path, FG_TXN) == 0 && ++seen == n)
			break;
	ck_assert_ptr_nonnull(req);
	GF_RUN_UNTIL(req->ended);
	return req;
}

/* The backend on gf_fake (backend_of_fake) with lease 7, its revokes
 * answered. */
static struct backend *
backend_on_lease_7(struct conf **conf)
{
	Etcd__LeaseRevokeResponse rv = ETCD__LEASE_REVOKE_RESPONSE__INIT;
	route_lease(7);
	fake_grpc_route(gf_fake, FG_LEASE_REVOKE, &rv.base);
	return backend_of_fake(conf);
}

/* Two acquires' Txns put on lease 7, both kept pending (other keys: other
 * lanes, so both are out at once). The first fails with "lease not found":
 * lease 7 is lost and lease 8 granted. The second, answered the same after
 * that, is about lease 7 too: lease 8 stays (lease 7 was declared lost,
 * and its revoke made every Txn on it fail the same way). */
START_TEST(test_backend_late_lease_not_found_keeps_new_lease)
{
	struct be_outcome a = { 0 }, b = { 0 };
	struct fake_grpc_req *ra, *rb;
	struct conf *conf;
	struct backend *be = backend_on_lease_7(&conf);
	char key[128];

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
	GF_RUN_UNTIL(be_info(be, "backend_lease_id") == 8);
	ck_assert_int_eq(be_info(be, "backend_lost_total"), 1);
	GF_RUN_UNTIL(a.times > 0);
	ck_assert_int_eq(a.status, BE_ERROR);

	fake_grpc_fail(rb, GRPC_NOT_FOUND, LEASE_NOT_FOUND, true);
	GF_RUN_UNTIL(b.times > 0);
	ck_assert_int_eq(b.status, BE_ERROR);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(be_info(be, "backend_lost_total"), 1);
	ck_assert_int_eq(be_info(be, "backend_lease_id"), 8);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_LEASE_GRANT), 2);
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
	struct fake_grpc_req *ra, *rb;
	struct conf *conf;
	struct backend *be = backend_on_lease_7(&conf);
	char key[128];

	be_acquire(be, "a", TOKEN_A, &a);
	be_acquire(be, "a", TOKEN_B, &b);
	ra = nth_txn(1);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_TXN), 1);	/* B waits for A */
	ck_assert_int_eq(txn_put_lease(ra, key, sizeof(key)), 7);
	ck_assert_str_eq(key, "dlock/a/" TOKEN_A);

	route_lease(8);
	fake_grpc_fail(ra, GRPC_NOT_FOUND, LEASE_NOT_FOUND, true);
	GF_RUN_UNTIL(be_info(be, "backend_lease_id") == 8);
	ck_assert_int_eq(be_info(be, "backend_lost_total"), 1);

	rb = nth_txn(2);	/* on one lane: sent now */
	ck_assert_int_eq(txn_put_lease(rb, key, sizeof(key)), 7);
	ck_assert_str_eq(key, "dlock/a/" TOKEN_B);
	fake_grpc_fail(rb, GRPC_NOT_FOUND, LEASE_NOT_FOUND, true);
	GF_RUN_UNTIL(a.times > 0 && b.times > 0);
	ck_assert_int_eq(a.status, BE_ERROR);
	ck_assert_int_eq(b.status, BE_ERROR);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(be_info(be, "backend_lost_total"), 1);
	ck_assert_int_eq(be_info(be, "backend_lease_id"), 8);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_LEASE_GRANT), 2);
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
	ef_watch_msg(&w, &ev, evp, &kv, rev, key);
	etcd__key_value__init(&prev);
	prev.key = kv.key;
	prev.create_revision = created;
	prev.mod_revision = created;
	prev.value.data = (uint8_t *)(uintptr_t)"x0";
	prev.value.len = 2;
	ev.prev_kv = &prev;
	fake_grpc_send_msg(req, &w.base);
	gf_deliver();
}

/* kv, the etcd key ekey created and last put at rev with value, on lease. */
static void
kv_set(Etcd__KeyValue *kv, const char *ekey, int64_t rev, const char *value, int64_t lease)
{
	etcd__key_value__init(kv);
	kv->key.data = (uint8_t *)(uintptr_t)ekey;
	kv->key.len = strlen(ekey);
	kv->create_revision = rev;
	kv->mod_revision = rev;
	kv->value.data = (uint8_t *)(uintptr_t)value;
	kv->value.len = strlen(value);
	kv->lease = lease;
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
	kv_set(&kv, ekey, 20, "x0", 7);
	range.header = ef_header(20);
	range.kvs = kvs;
	range.n_kvs = 1;
	range.count = 1;
	put.header = ef_header(20);
	op[0].response_case = ETCD__RESPONSE_OP__RESPONSE_RESPONSE_PUT;
	op[0].response_put = &put;
	op[1].response_case = ETCD__RESPONSE_OP__RESPONSE_RESPONSE_RANGE;
	op[1].response_range = &range;
	t.header = ef_header(20);
	t.succeeded = true;
	t.responses = ops;
	t.n_responses = 2;
	route_lease(7);
	fake_grpc_route(gf_fake, FG_TXN, &t.base);
	be = backend_of_fake(&conf);
	watch = fake_grpc_last(gf_fake, FG_WATCH);
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
	GF_RUN_UNTIL(a.times > 0);
	ck_assert_int_eq(a.status, BE_OK);
	ck_assert_uint_eq(a.fence, (uint64_t)20 << 16);	/* the revision, shifted */
	ck_assert_int_eq(be_info(be, "backend_keys_held"), 1);

	watch_send_delete(watch, ekey, 15, 12);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(nexpires, 0);
	ck_assert_int_eq(be_info(be, "backend_keys_held"), 1);

	watch_send_delete(watch, ekey, 25, 20);
	GF_RUN_UNTIL(nexpires == 1);
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
	GF_RUN_UNTIL(fake_grpc_npending(gf_fake, FG_TXN) == 3);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_TXN), 3);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(o[i].times, 0);
	backend_destroy(be);
	for (int i = 0; i < 4; i++) {
		ck_assert_msg(o[i].times == 1, "operation %d: told %d times", i, o[i].times);
		ck_assert_int_eq(o[i].status, BE_ERROR);
	}
	gf_settle(GF_SETTLE_MS);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(o[i].times, 1);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_TXN), 3);
	conf_destroy(conf);
}
END_TEST

/* backend_destroy right after it was created and asked for an acquire and
 * a release, before the loop ran: each is told once, BE_ERROR, before it
 * returns, and nothing runs afterwards. */
START_TEST(test_backend_destroy_before_the_loop)
{
	struct be_outcome o[2] = { { 0 } };
	struct be_lock rel = { .key = "c", .keylen = 1, .mode = LOCK_EXCLUSIVE,
	    .token = TOKEN_B, .ttl_ms = 10000 };
	struct conf *conf;
	struct backend *be;

	route_lease(7);
	be = backend_new(&conf);
	be_acquire(be, "a", TOKEN_A, &o[0]);
	be->ops->release(be, &rel, on_be, &o[1]);
	ck_assert_int_eq(o[0].times + o[1].times, 0);
	backend_destroy(be);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(o[i].times, 1);
		ck_assert_int_eq(o[i].status, BE_ERROR);
	}
	gf_settle(GF_SETTLE_MS);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(o[i].times, 1);
	ck_assert_int_eq(nexpires, 0);
	conf_destroy(conf);
}
END_TEST

/* The backend's up.changed calls: how many, how many without a state, and
 * the states told (version, term and value), the first CHANGED_MAX. */
#define CHANGED_MAX 8
static int nchanged, nchanged_unknown;
static struct {
	uint64_t version, term;
	char value[32];
} changed[CHANGED_MAX];

static void
be_changed(void *arg, const char *key, size_t keylen, const struct be_leader *l)
{
	(void)arg;
	(void)key;
	(void)keylen;
	if (l == NULL) {
		nchanged_unknown++;
		return;
	}
	if (nchanged < CHANGED_MAX) {
		changed[nchanged].version = l->version;
		changed[nchanged].term = l->term;
		snprintf(changed[nchanged].value, sizeof(changed[nchanged].value), "%.*s",
		    (int)l->valuelen, l->value != NULL ? l->value : "");
	}
	nchanged++;
}

/* The revision of the last range of Txn request req, and how many it has. */
static int64_t
txn_last_range_rev(const struct fake_grpc_req *req, size_t *n)
{
	Etcd__TxnRequest *t = (Etcd__TxnRequest *)fake_grpc_req_msg(req,
	    &etcd__txn_request__descriptor);
	int64_t rev;
	ck_assert_ptr_nonnull(t);
	ck_assert_uint_ge(t->n_success, 1);
	ck_assert_int_eq(t->success[t->n_success - 1]->request_case,
	    ETCD__REQUEST_OP__REQUEST_REQUEST_RANGE);
	rev = t->success[t->n_success - 1]->request_range->revision;
	*n = t->n_success;
	protobuf_c_message_free_unpacked(&t->base, NULL);
	return rev;
}

/* Answer a read's Txn req of nranges ranges at rev: range i holds kv[i]
 * (NULL: none). */
static void
reply_ranges(struct fake_grpc_req *req, size_t nranges, int64_t rev, Etcd__KeyValue **kv)
{
	Etcd__TxnResponse t = ETCD__TXN_RESPONSE__INIT;
	Etcd__ResponseOp op[4], *ops[4];
	Etcd__RangeResponse range[4];
	ck_assert_uint_le(nranges, 4);
	for (size_t i = 0; i < nranges; i++) {
		etcd__range_response__init(&range[i]);
		range[i].header = ef_header(rev);
		range[i].kvs = kv[i] != NULL ? &kv[i] : NULL;
		range[i].n_kvs = kv[i] != NULL;
		range[i].count = kv[i] != NULL;
		etcd__response_op__init(&op[i]);
		op[i].response_case = ETCD__RESPONSE_OP__RESPONSE_RESPONSE_RANGE;
		op[i].response_range = &range[i];
		ops[i] = &op[i];
	}
	t.header = ef_header(rev);
	t.succeeded = true;
	t.responses = ops;
	t.n_responses = nranges;
	fake_grpc_reply(req, &t.base);
}

/* A key is observed: the watch stream goes on from revision 10 with puts.
 * Before it is created, another daemon's leader comes and goes (a put at
 * 12, a delete at 13; etcd is at 30 when the stream is created). Nothing
 * was missed: the stream's creation tells the observers nothing (a read of
 * now, at 30, would pass the put it replays, and the leader's state, older
 * than that read, would never be told); the replayed put is read and told
 * as a leader at 12, then the key free at 13. */
START_TEST(test_backend_watch_going_on_tells_every_leader)
{
	static const char ekey[] = "dlock/k/" TOKEN_B;
	Etcd__WatchResponse w;
	Etcd__Event ev, *evp[1];
	Etcd__KeyValue kv, held;
	Etcd__KeyValue *none[1] = { NULL }, *put[2] = { &held, &held };
	struct fake_grpc_req *watch, *read;
	struct conf *conf;
	struct backend *be;
	size_t n;

	route_lease(7);
	be = backend_of_fake(&conf);
	be->up.changed = be_changed;
	nchanged = nchanged_unknown = 0;
	GF_RUN_UNTIL(be_info(be, "backend_watch_revision") == 10);
	be->ops->watch(be, "k", 1, 1);
	GF_RUN_UNTIL(fake_grpc_count(gf_fake, FG_WATCH) == 2);
	watch = fake_grpc_last(gf_fake, FG_WATCH);
	{
		/* puts too, from where the deletes-only stream stopped */
		Etcd__WatchRequest *wr = (Etcd__WatchRequest *)fake_grpc_req_msg(watch,
		    &etcd__watch_request__descriptor);
		ck_assert_ptr_nonnull(wr);
		ck_assert_uint_eq(wr->create_request->n_filters, 0);
		ck_assert_int_eq(wr->create_request->start_revision, 11);
		protobuf_c_message_free_unpacked(&wr->base, NULL);
	}
	ef_watch_msg(&w, &ev, evp, &kv, 30, NULL);
	fake_grpc_send_msg(watch, &w.base);
	gf_settle(GF_SETTLE_MS);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_TXN), 0);
	ck_assert_int_eq(fake_grpc_count(gf_fake, FG_RANGE), 0);
	ck_assert_int_eq(nchanged, 0);
	ck_assert_int_eq(nchanged_unknown, 0);

	/* the replayed put of the leader, its delete */
	ef_watch_msg(&w, &ev, evp, &kv, 12, ekey);
	ev.type = ETCD__EVENT__EVENT_TYPE__PUT;
	kv_set(&kv, ekey, 12, "x0@786432=v0", 9);
	fake_grpc_send_msg(watch, &w.base);
	ef_watch_msg(&w, &ev, evp, &kv, 13, ekey);
	fake_grpc_send_msg(watch, &w.base);

	/* the put's range at 12, and the key then */
	GF_RUN_UNTIL(fake_grpc_npending(gf_fake, FG_TXN) == 1);
	read = fake_grpc_pending(gf_fake, FG_TXN);
	GF_RUN_UNTIL(read->ended);
	ck_assert_int_eq(txn_last_range_rev(read, &n), 12);
	ck_assert_uint_eq(n, 2);
	kv_set(&held, ekey, 12, "x0@786432=v0", 9);
	reply_ranges(read, 2, 30, put);
	GF_RUN_UNTIL(nchanged == 2);
	ck_assert_uint_eq(changed[0].version, 12);
	ck_assert_uint_eq(changed[0].term, (uint64_t)12 << 16);
	ck_assert_str_eq(changed[0].value, "v0");

	/* then the key at 13: free */
	GF_RUN_UNTIL(fake_grpc_npending(gf_fake, FG_TXN) == 1);
	read = fake_grpc_pending(gf_fake, FG_TXN);
	GF_RUN_UNTIL(read->ended);
	ck_assert_int_eq(txn_last_range_rev(read, &n), 13);
	ck_assert_uint_eq(n, 1);
	reply_ranges(read, 1, 30, none);
	GF_RUN_UNTIL(nchanged == 3);
	ck_assert_uint_eq(changed[2].version, 13);
	ck_assert_uint_eq(changed[2].term, 0);
	ck_assert_int_eq(nchanged_unknown, 0);
	backend_destroy(be);
	conf_destroy(conf);
}
END_TEST

/* An etcd key's value made and read back, who and a CAMPAIGN value in it
 * (either may hold '=', '@', '~' or ':'), a value broken by UNLOCK FORCE,
 * and the values of daemons that tell nobody, which read as before. */
START_TEST(test_value_who_round_trip)
{
	struct et_value v;
	size_t len;
	char *s = et_value_make(LOCK_SEMAPHORE, 3, 12345, "w1\tid=@~:x", "v=a@~", 5, &len);
	ck_assert_str_eq(s, "n3@12345~10:w1\tid=@~:x=v=a@~");
	et_value_parse(s, len, &v);
	ck_assert_int_eq(v.kind, 'n');
	ck_assert_uint_eq(v.limit, 3);
	ck_assert_uint_eq(v.fence, 12345);
	ck_assert_uint_eq(v.wholen, 10);
	ck_assert_int_eq(memcmp(v.who, "w1\tid=@~:x", 10), 0);
	ck_assert_uint_eq(v.valuelen, 5);
	ck_assert_int_eq(memcmp(v.value, "v=a@~", 5), 0);
	free(s);
	s = et_value_make(LOCK_SHARED, 0, 0, "w", NULL, 0, &len);
	ck_assert_str_eq(s, "s0~1:w");
	et_value_parse(s, len, &v);
	ck_assert_int_eq(v.kind, 's');
	ck_assert_ptr_null(v.value);
	ck_assert_uint_eq(v.wholen, 1);
	free(s);
	/* without who: the values of before */
	s = et_value_make(LOCK_EXCLUSIVE, 0, 7, NULL, "x", 1, &len);
	ck_assert_str_eq(s, "x0@7=x");
	et_value_parse(s, len, &v);
	ck_assert_int_eq(v.kind, 'x');
	ck_assert_uint_eq(v.fence, 7);
	ck_assert_ptr_null(v.who);
	ck_assert_uint_eq(v.valuelen, 1);
	free(s);
	/* broken by UNLOCK FORCE: kind, fence, who and value kept, by added */
	et_value_parse("s0~3:w\tx=v", 10, &v);
	s = et_value_broken(&v, 99, "adm!~=", &len);
	ck_assert_str_eq(s, "s0@99~3:w\tx!6:adm!~==v");
	et_value_parse(s, len, &v);
	ck_assert_int_eq(v.kind, 's');
	ck_assert_uint_eq(v.fence, 99);
	ck_assert_uint_eq(v.wholen, 3);
	ck_assert_uint_eq(v.bylen, 6);
	ck_assert_int_eq(memcmp(v.by, "adm!~=", 6), 0);
	ck_assert_uint_eq(v.valuelen, 1);
	ck_assert_int_eq(v.value[0], 'v');
	free(s);
	et_value_parse("n3", 2, &v);
	s = et_value_broken(&v, 7, "b", &len);
	ck_assert_str_eq(s, "n3@7!1:b");
	et_value_parse(s, len, &v);
	ck_assert_int_eq(v.kind, 'n');
	ck_assert_uint_eq(v.limit, 3);
	ck_assert_ptr_null(v.who);
	ck_assert_ptr_null(v.value);
	ck_assert_uint_eq(v.bylen, 1);
	free(s);
	/* a length past the end: no who, nothing read beyond */
	et_value_parse("x0~99:ab", 8, &v);
	ck_assert_int_eq(v.kind, 'x');
	ck_assert_ptr_null(v.who);
	ck_assert_ptr_null(v.value);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("be_etcd");

	suite_case(s, "value", NULL, NULL, 0, SUITE_TESTS(test_value_who_round_trip));
	suite_case(s, "backend", ef_setup, ef_teardown, 0,
	    SUITE_TESTS(test_backend_late_lease_not_found_keeps_new_lease,
	    test_backend_late_lease_not_found_on_one_lane,
	    test_backend_late_delete_of_older_key_keeps_lock,
	    test_backend_destroy_with_work_in_flight, test_backend_destroy_before_the_loop,
	    test_backend_watch_going_on_tells_every_leader));
	return gf_main(s);
}
