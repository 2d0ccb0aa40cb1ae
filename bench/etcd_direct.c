/*
 * etcd_direct — the requests of dlock-bench's direct-etcd mode; see
 * etcd_direct.h. Requests are built on the stack: etcd_call packs them at
 * once.
 */
#include "etcd_direct.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "etcd.h"
#include "log.h"

/* The state of the shared client. */
struct ed {
	struct etcd *cli;
};

/* The etcd client's hooks: the mode neither watches nor reacts to the
 * client's state (a call that fails says why itself). */
static void
on_state(void *arg, bool up)
{
	(void)arg;
	(void)up;
}

static void
on_watch(void *arg, const Etcd__WatchResponse *msg)
{
	(void)arg;
	(void)msg;
}

struct ed *
ed_create(struct event_base *base, const char *endpoint, uint64_t timeout_ms)
{
	char *eps[1];
	struct etcd_options o;
	struct etcd_hooks h = { .state = on_state, .watch = on_watch, .arg = NULL };
	struct ed *d = calloc(1, sizeof(*d));

	if (d == NULL)
		return NULL;
	/* the client's own lines: warnings only (an endpoint down, and why) */
	log_set_level(LOG_LEVEL_WARN);
	eps[0] = (char *)(uintptr_t)endpoint;
	memset(&o, 0, sizeof(o));
	o.endpoints = eps;
	o.nendpoints = 1;
	o.request_timeout_ms = timeout_ms;
	d->cli = etcd_create(base, &o, &h);
	if (d->cli == NULL) {
		fprintf(stderr, "dlock-bench: no etcd client for %s\n", endpoint);
		free(d);
		return NULL;
	}
	return d;
}

void
ed_destroy(struct ed *d)
{
	if (d == NULL)
		return;
	etcd_destroy(d->cli);
	free(d);
}

/* Whether byte c stays as it is in an etcd key (etcd/be_etcd_core.c's
 * key_plain). */
static bool
key_plain(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	    c == '.' || c == '_' || c == ':' || c == '-';
}

size_t
ed_key(char out[ED_KEY_SIZE], const char *key, size_t len, const char *token,
    size_t *pathlen)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t plen = sizeof(ED_KEY_PREFIX) - 1, tlen = strlen(token), n = plen;

	if (ED_KEY_MAX(len, tlen) > ED_KEY_SIZE)
		return 0;
	memcpy(out, ED_KEY_PREFIX, plen);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)key[i];
		if (key_plain(c)) {
			out[n++] = (char)c;
		} else {
			out[n++] = '%';
			out[n++] = hex[c >> 4];
			out[n++] = hex[c & 15];
		}
	}
	out[n++] = '/';
	*pathlen = n;
	memcpy(out + n, token, tlen);
	n += tlen;
	out[n] = '\0';
	return n;
}

/* The len bytes at p as a protobuf bytes field (not copied). */
static ProtobufCBinaryData
bin(const void *p, size_t len)
{
	return (ProtobufCBinaryData){ .len = len, .data = (uint8_t *)(uintptr_t)p };
}

/* A gRPC answer of the wrong shape. */
static void
odd(struct ed_call *call, const char *what)
{
	call->fn(call->arg, ED_FAILED, 0, what);
}

/* Every call's answer: what it says, for the call's method. */
static void
on_answer(void *arg, const struct etcd_result *r)
{
	struct ed_call *call = arg;
	char why[256];

	if (r->status != ETCD_OK) {
		if (r->status == ETCD_FAILED)
			snprintf(why, sizeof(why), "gRPC status %d: %s", r->code,
			    r->why != NULL ? r->why : "");
		else
			snprintf(why, sizeof(why), "etcd did not answer: %s",
			    r->why != NULL ? r->why : "");
		if (call->method == ETCD_LEASE_KEEPALIVE && r->status == ETCD_FAILED &&
		    r->why != NULL && strstr(r->why, "lease not found") != NULL) {
			call->fn(call->arg, ED_GONE, 0, why);
			return;
		}
		call->fn(call->arg, ED_FAILED, 0, why);
		return;
	}
	switch ((enum etcd_method)call->method) {
	case ETCD_LEASE_GRANT: {
		const Etcd__LeaseGrantResponse *g = (const void *)r->msg;
		if (g->error != NULL && g->error[0] != '\0') {
			snprintf(why, sizeof(why), "LeaseGrant: %s", g->error);
			call->fn(call->arg, ED_FAILED, 0, why);
		} else if (g->id == 0) {
			odd(call, "LeaseGrant answered lease 0");
		} else {
			call->fn(call->arg, ED_OK, g->id, NULL);
		}
		return;
	}
	case ETCD_LEASE_KEEPALIVE: {
		const Etcd__LeaseKeepAliveResponse *ka = (const void *)r->msg;
		/* a TTL of 0 or less: etcd no longer has the lease */
		call->fn(call->arg, ka->ttl > 0 ? ED_OK : ED_GONE, ka->ttl,
		    ka->ttl > 0 ? NULL : "LeaseKeepAlive: the lease is gone");
		return;
	}
	case ETCD_LEASE_REVOKE:
		call->fn(call->arg, ED_OK, 0, NULL);
		return;
	case ETCD_TXN:
		break;
	case ETCD_RANGE:
	case ETCD_DELETE_RANGE:
	case ETCD_STATUS:
		odd(call, "an answer to a call never made");
		return;
	}

	const Etcd__TxnResponse *t = (const void *)r->msg;
	if (!t->succeeded) {
		odd(call, "Txn: not succeeded (it has no compare)");
		return;
	}
	if (t->n_responses == 2) {
		/* an acquire: put, then the range by create revision */
		const Etcd__ResponseOp *op = t->responses[1];
		if (op->response_case != ETCD__RESPONSE_OP__RESPONSE_RESPONSE_RANGE ||
		    op->response_range == NULL) {
			odd(call, "Txn: the second answer is not a range's");
			return;
		}
		/* where the key put stands among the range's keys
		 * (etcd/be_etcd_recipe.c's decide(), for an exclusive lock): it
		 * holds when it is first */
		const Etcd__RangeResponse *rr = op->response_range;
		size_t before = 0;
		while (before < rr->n_kvs && (rr->kvs[before]->key.len != call->keylen ||
		    memcmp(rr->kvs[before]->key.data, call->key, call->keylen) != 0))
			before++;
		if (before == rr->n_kvs) {
			odd(call, "Txn: the range misses the key just put");
			return;
		}
		int64_t rev = t->header != NULL ? t->header->revision : 0;
		if (before == 0)
			call->fn(call->arg, ED_OK, rev, NULL);
		else
			call->fn(call->arg, ED_BEHIND, (int64_t)before, "another key is first");
		return;
	}
	if (t->n_responses == 1) {
		/* a release */
		const Etcd__ResponseOp *op = t->responses[0];
		if (op->response_case != ETCD__RESPONSE_OP__RESPONSE_RESPONSE_DELETE_RANGE ||
		    op->response_delete_range == NULL) {
			odd(call, "Txn: the answer is not a delete's");
			return;
		}
		if (op->response_delete_range->deleted > 0)
			call->fn(call->arg, ED_OK, op->response_delete_range->deleted, NULL);
		else
			call->fn(call->arg, ED_GONE, 0, "the key was gone");
		return;
	}
	odd(call, "Txn: as many answers as no request made");
}

void
ed_grant(struct ed *d, int64_t ttl_s, struct ed_call *call)
{
	Etcd__LeaseGrantRequest req;

	etcd__lease_grant_request__init(&req);
	req.ttl = ttl_s;
	call->method = ETCD_LEASE_GRANT;
	etcd_call(d->cli, ETCD_LEASE_GRANT, &req.base, on_answer, call);
}

void
ed_keepalive(struct ed *d, int64_t lease, struct ed_call *call)
{
	Etcd__LeaseKeepAliveRequest req;

	etcd__lease_keep_alive_request__init(&req);
	req.id = lease;
	call->method = ETCD_LEASE_KEEPALIVE;
	etcd_call(d->cli, ETCD_LEASE_KEEPALIVE, &req.base, on_answer, call);
}

void
ed_revoke(struct ed *d, int64_t lease, struct ed_call *call)
{
	Etcd__LeaseRevokeRequest req;

	etcd__lease_revoke_request__init(&req);
	req.id = lease;
	call->method = ETCD_LEASE_REVOKE;
	etcd_call(d->cli, ETCD_LEASE_REVOKE, &req.base, on_answer, call);
}

void
ed_acquire(struct ed *d, const char *ekey, size_t len, size_t pathlen, int64_t lease,
    struct ed_call *call)
{
	Etcd__TxnRequest txn;
	Etcd__RequestOp put_op, range_op, *ops[2];
	Etcd__PutRequest put;
	Etcd__RangeRequest range;
	char end[ED_KEY_SIZE];

	/* the range: every key of the lock key, "<path>" up to "<path>" with
	 * its last byte, the '/', one higher */
	memcpy(end, ekey, pathlen);
	end[pathlen - 1]++;
	etcd__put_request__init(&put);
	put.key = bin(ekey, len);
	put.value = bin("x0", 2);
	put.lease = lease;
	etcd__request_op__init(&put_op);
	put_op.request_case = ETCD__REQUEST_OP__REQUEST_REQUEST_PUT;
	put_op.request_put = &put;
	etcd__range_request__init(&range);
	range.key = bin(ekey, pathlen);
	range.range_end = bin(end, pathlen);
	range.sort_order = ETCD__RANGE_REQUEST__SORT_ORDER__ASCEND;
	range.sort_target = ETCD__RANGE_REQUEST__SORT_TARGET__CREATE;
	etcd__request_op__init(&range_op);
	range_op.request_case = ETCD__REQUEST_OP__REQUEST_REQUEST_RANGE;
	range_op.request_range = &range;
	ops[0] = &put_op;
	ops[1] = &range_op;
	etcd__txn_request__init(&txn);
	txn.success = ops;
	txn.n_success = 2;
	call->method = ETCD_TXN;
	call->key = ekey;
	call->keylen = len;
	etcd_call(d->cli, ETCD_TXN, &txn.base, on_answer, call);
}

void
ed_release(struct ed *d, const char *ekey, size_t len, struct ed_call *call)
{
	Etcd__TxnRequest txn;
	Etcd__RequestOp del_op, *ops[1];
	Etcd__DeleteRangeRequest del;

	etcd__delete_range_request__init(&del);
	del.key = bin(ekey, len);
	etcd__request_op__init(&del_op);
	del_op.request_case = ETCD__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
	del_op.request_delete_range = &del;
	ops[0] = &del_op;
	etcd__txn_request__init(&txn);
	txn.success = ops;
	txn.n_success = 1;
	call->method = ETCD_TXN;
	call->key = NULL;
	call->keylen = 0;
	etcd_call(d->cli, ETCD_TXN, &txn.base, on_answer, call);
}
