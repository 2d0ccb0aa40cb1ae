/*
 * etcd_fixture — etcd's messages, the client under test and its recorders,
 * for the etcd suites; see etcd_fixture.h.
 */
#include "etcd_fixture.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_grpc.h"
#include "grpc.h"

/* A response header at revision rev. */
Etcd__ResponseHeader *
ef_header(int64_t rev)
{
	static Etcd__ResponseHeader h[EF_LOG_MAX];
	static int n;
	Etcd__ResponseHeader *p = &h[n++ % EF_LOG_MAX];
	etcd__response_header__init(p);
	p->revision = rev;
	p->cluster_id = 11;
	p->member_id = 22;
	return p;
}

/* A WatchResponse: created, or with one DELETE event of key at rev. */
void
ef_watch_msg(Etcd__WatchResponse *w, Etcd__Event *ev, Etcd__Event **evp, Etcd__KeyValue *kv,
    int64_t rev, const char *key)
{
	etcd__watch_response__init(w);
	w->header = ef_header(rev);
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
uint8_t *
ef_watch_frame(int64_t rev, const char *key, size_t *len)
{
	Etcd__WatchResponse w;
	Etcd__Event ev, *evp[1];
	Etcd__KeyValue kv;
	ef_watch_msg(&w, &ev, evp, &kv, rev, key);
	return grpc_frame(&w.base, len);
}

struct etcd *ef_cli;
bool ef_states[EF_LOG_MAX];
int ef_nstates;
char ef_msgs[EF_LOG_MAX][128];
int ef_nmsgs;
int ef_stop_at;
int ef_restart_at;
int ef_destroy_at;
int ef_nresults;
static bool in_call;			/* etcd_call is running */
static int watch_seen;			/* watch streams ef_watch_req() returned */

/* The state hook: records it. */
static void
ef_on_state(void *arg, bool up)
{
	(void)arg;
	ck_assert_int_lt(ef_nstates, EF_LOG_MAX);
	ef_states[ef_nstates++] = up;
}

/* The watch create request the tests start streams with (key given). */
void
ef_watch_start(const char *key)
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
	etcd_watch(ef_cli, &wc);
}

/* The watch hook: records the message, and stops, restarts or destroys
 * as the test asked. */
static void
ef_on_watch(void *arg, const Etcd__WatchResponse *m)
{
	(void)arg;
	ck_assert_int_lt(ef_nmsgs, EF_LOG_MAX);
	if (m == NULL)
		snprintf(ef_msgs[ef_nmsgs], sizeof(ef_msgs[ef_nmsgs]), "NULL");
	else if (m->n_events > 0)
		snprintf(ef_msgs[ef_nmsgs], sizeof(ef_msgs[ef_nmsgs]), "rev=%lld %s %.*s",
		    (long long)m->header->revision,
		    m->events[0]->type == ETCD__EVENT__EVENT_TYPE__DELETE ? "DELETE" : "PUT",
		    (int)m->events[0]->kv->key.len, (const char *)m->events[0]->kv->key.data);
	else
		snprintf(ef_msgs[ef_nmsgs], sizeof(ef_msgs[ef_nmsgs]), "rev=%lld%s",
		    m->header != NULL ? (long long)m->header->revision : -1LL,
		    m->created ? " created" : "");
	ef_nmsgs++;
	if (ef_nmsgs == ef_stop_at)
		etcd_watch_stop(ef_cli);
	if (ef_nmsgs == ef_restart_at)
		ef_watch_start("again");
	if (ef_nmsgs == ef_destroy_at) {
		etcd_destroy(ef_cli);
		ef_cli = NULL;
	}
}

/* A call's callback: records its end into its outcome, then makes the
 * call or destroys the client the outcome asks for. */
static void
ef_on_result(void *arg, const struct etcd_result *r)
{
	struct ef_outcome *o = arg;
	o->times++;
	o->seq = ++ef_nresults;
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
		struct ef_outcome *t = o->then;
		o->then = NULL;
		ef_call_lane(o->then_lane, o->then_key, t);
	}
	if (o->destroy) {
		etcd_destroy(ef_cli);
		ef_cli = NULL;
	}
}

/* A Range of key with the callback ef_on_result into o. */
void
ef_call_range(const char *key, struct ef_outcome *o)
{
	Etcd__RangeRequest rq = ETCD__RANGE_REQUEST__INIT;
	rq.key.data = (uint8_t *)(uintptr_t)key;
	rq.key.len = strlen(key);
	rq.range_end.data = (uint8_t *)(uintptr_t)"/m";
	rq.range_end.len = 2;
	o->m = ETCD_RANGE;
	in_call = true;
	etcd_call(ef_cli, ETCD_RANGE, &rq.base, ef_on_result, o);
	in_call = false;
}

/* The same on lane (etcd_call_lane). */
void
ef_call_lane(uint64_t lane, const char *key, struct ef_outcome *o)
{
	Etcd__RangeRequest rq = ETCD__RANGE_REQUEST__INIT;
	bool was = in_call;
	rq.key.data = (uint8_t *)(uintptr_t)key;
	rq.key.len = strlen(key);
	o->m = ETCD_RANGE;
	in_call = true;
	etcd_call_lane(ef_cli, lane, ETCD_RANGE, &rq.base, ef_on_result, o);
	in_call = was;
}

/* A call of m with an empty request of its kind. */
void
ef_call_m(enum etcd_method m, struct ef_outcome *o)
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
	etcd_call(ef_cli, m, req, ef_on_result, o);
	in_call = false;
}

/* A client of the n endpoints eps (user NULL: no authentication). */
struct etcd *
ef_client_ping(const char *const *eps, size_t n, uint64_t timeout_ms, const char *user,
    const char *password, uint64_t ping_ms)
{
	char *copy[4];
	struct etcd_options o = { .endpoints = copy, .nendpoints = n,
	    .request_timeout_ms = timeout_ms, .username = user, .password = password,
	    .ping_ms = ping_ms };
	struct etcd_hooks h = { .state = ef_on_state, .watch = ef_on_watch, .arg = NULL };
	struct etcd *c;

	ck_assert_uint_le(n, 4);
	for (size_t i = 0; i < n; i++)
		copy[i] = strdup(eps[i]);
	c = etcd_create(gf_base, &o, &h);
	for (size_t i = 0; i < n; i++)
		free(copy[i]);
	ck_assert_ptr_nonnull(c);
	return c;
}

struct etcd *
ef_client(const char *const *eps, size_t n, uint64_t timeout_ms, const char *user,
    const char *password)
{
	return ef_client_ping(eps, n, timeout_ms, user, password, 0);
}

/* A client of gf_fake alone. */
struct etcd *
ef_client_of_fake(void)
{
	const char *eps[] = { fake_grpc_endpoint(gf_fake) };
	return ef_client(eps, 1, EF_TIMEOUT_MS, NULL, NULL);
}

/* Route path of gf_fake to a RangeResponse at rev with count. */
void
ef_route_range(struct fake_grpc *f, int64_t rev, int64_t count)
{
	Etcd__RangeResponse rr = ETCD__RANGE_RESPONSE__INIT;
	rr.header = ef_header(rev);
	rr.count = count;
	fake_grpc_route(f, FG_RANGE, &rr.base);
}

/* Answer req with a RangeResponse at rev. */
void
ef_reply_range(struct fake_grpc_req *req, int64_t rev)
{
	Etcd__RangeResponse rr = ETCD__RANGE_RESPONSE__INIT;
	rr.header = ef_header(rev);
	rr.count = rev;
	fake_grpc_reply(req, &rr.base);
}

/* The fake's next watch stream, once its create request has come. */
struct fake_grpc_req *
ef_watch_req(void)
{
	struct fake_grpc_req *req;
	ProtobufCMessage *m;
	GF_RUN_UNTIL(fake_grpc_count(gf_fake, FG_WATCH) > watch_seen &&
	    (req = fake_grpc_last(gf_fake, FG_WATCH)) != NULL &&
	    (m = fake_grpc_req_msg(req, &etcd__watch_request__descriptor)) != NULL);
	watch_seen = fake_grpc_count(gf_fake, FG_WATCH);
	protobuf_c_message_free_unpacked(m, NULL);
	return req;
}

/* Send the watch message (rev, key: NULL for created) on req; let it come. */
void
ef_watch_send(struct fake_grpc_req *req, int64_t rev, const char *key)
{
	size_t len;
	uint8_t *p = ef_watch_frame(rev, key, &len);
	fake_grpc_send(req, p, len);
	free(p);
	gf_deliver();
}

void
ef_setup(void)
{
	gf_setup();
	ef_cli = NULL;
	ef_nstates = 0;
	ef_nmsgs = 0;
	ef_stop_at = 0;
	ef_restart_at = 0;
	ef_destroy_at = 0;
	ef_nresults = 0;
	watch_seen = 0;
}

void
ef_teardown(void)
{
	etcd_destroy(ef_cli);
	ef_cli = NULL;
	gf_teardown();
}
