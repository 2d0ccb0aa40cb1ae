/*
 * be_etcd_recipe — the etcd backend's lock recipe: acquire, renew, release,
 * transfer and withdraw as etcd Txns on a lock key's range, and the wakeups
 * of waiting keys.
 *
 * The recipe is etcd's concurrency.Mutex, extended to shared locks and
 * semaphores. A lock key K is the range of etcd keys "<prefix><K escaped>/"
 * (be_etcd_core.c); each holder or waiting head of a daemon's local queue has
 * one etcd key "<range><token>" in it, whose value is its kind ("x0"
 * exclusive, "s0" shared, "n<limit>" semaphore), with a CAMPAIGN's value
 * after it (struct et_value). The keys are ranked by
 * create revision: an exclusive key holds when it is first, a shared one
 * when no key before it is exclusive (the read-write recipe), a semaphore's
 * when fewer than its limit are before it. An acquire is one Txn: put the
 * key (a put keeps the create revision of a key that exists, so a waiter
 * keeps its place) and read the range. When the key does not hold yet, the
 * acquire answers BE_BUSY and the key stays in etcd, waiting for the delete
 * of the one key before it that stands in its way (any key before it, for a
 * semaphore, matched by name and revision); the daemon's watch stream
 * (be_etcd_watch.c) reports the deletes, and the lock table's queue is woken
 * and asks again, taking over the waiting key even when its first waiter
 * has left (the key keeps the daemon's place; see entry_claim).
 *
 * Session-bound keys and waiting keys are on the daemon's lease
 * (be_etcd_lease.c). A DETACH lock's key is on a lease of its own with the
 * lock's TTL (etcd counts whole seconds: rounded up), kept alive while the
 * key waits and not after. A release deletes the key; a delete that gets no
 * answer is kept and sent again until etcd confirms it (r->deferred).
 *
 * Fences are etcd revisions shifted left by ET_SEQ_BITS, plus the local
 * handoffs since: the revision of the Txn that found the key holding (for
 * a key that held at once, its create revision). Every grant's Txn comes
 * after the release or handoff that let it hold, so fences strictly
 * increase per key across daemons and restarts.
 *
 * Handoff of an exclusive session lease to an exclusive session waiter:
 * first a read of the range; when the holder's key is alone there, no other
 * daemon waits, and the waiter takes the key over in place (a local
 * handoff: fence + 1, nothing written; not for a CAMPAIGN nor an observed
 * key, whose new term other daemons must see). Otherwise, and for the other kinds,
 * one Txn, guarded by the holder's create revision, deletes the holder's
 * key and puts the next local waiter's at the end of the range: it holds at
 * once when no other daemon's key waits, else the first of those holds (the
 * delete is what it waits for) and the local waiter waits its turn
 * (BE_BUSY). The key is never free in between, and no run of local handoffs
 * can pass a waiting daemon (a key put after the read came after the local
 * waiter, queued before it), so etcd needs no handoff limit.
 */
#include "be_etcd_core.h"
#include "be_etcd_lease.h"
#include "be_etcd_recipe.h"

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "clock.h"
#include "etcd.h"
#include "xmalloc.h"

#define ET_DELETE_RETRY_MS 1000	/* deletes that failed are sent again then */

static void op_send(struct et_op *op);

/* ---- requests ------------------------------------------------------------- */

/* Requests are built on the caller's stack: etcd_call packs them at once. */

/* A put of an etcd key, as one operation of a Txn. */
struct req_put {
	Etcd__RequestOp op;
	Etcd__PutRequest put;
	char *value;		/* its value, freed by req_put_done */
};

/* p: the put of ekey on lease, with the value of a lease of mode/limit
 * taken by who (et_value_make: fence 0 at a grant; who NULL: not told;
 * value NULL for a plain lock). */
static Etcd__RequestOp *
req_put(struct req_put *p, const char *ekey, enum lock_mode mode, unsigned limit,
    int64_t lease, uint64_t fence, const char *who, const char *value, size_t valuelen)
{
	size_t len;
	etcd__request_op__init(&p->op);
	etcd__put_request__init(&p->put);
	p->value = et_value_make(mode, limit, fence, who, value, valuelen, &len);
	p->put.key = et_bin(ekey, strlen(ekey));
	p->put.value = et_bin(p->value, len);
	p->put.lease = lease;
	p->op.request_case = ETCD__REQUEST_OP__REQUEST_REQUEST_PUT;
	p->op.request_put = &p->put;
	return &p->op;
}

static void
req_put_done(struct req_put *p)
{
	free(p->value);
}

/* A read of a lock key's whole range, as one operation of a Txn. */
struct req_range {
	Etcd__RequestOp op;
	Etcd__RangeRequest range;
	char *end;		/* the range's end, freed by req_range_done */
};

/* p: the read of k's whole range, by create revision. */
static Etcd__RequestOp *
req_range(struct req_range *p, const struct et_key *k)
{
	etcd__request_op__init(&p->op);
	etcd__range_request__init(&p->range);
	p->end = xmemdup(k->path, k->pathlen);
	p->end[k->pathlen - 1]++;	/* '/' + 1: the end of the prefix range */
	p->range.key = et_bin(k->path, k->pathlen);
	p->range.range_end = et_bin(p->end, k->pathlen);
	p->range.sort_order = ETCD__RANGE_REQUEST__SORT_ORDER__ASCEND;
	p->range.sort_target = ETCD__RANGE_REQUEST__SORT_TARGET__CREATE;
	p->op.request_case = ETCD__REQUEST_OP__REQUEST_REQUEST_RANGE;
	p->op.request_range = &p->range;
	return &p->op;
}

static void
req_range_done(struct req_range *p)
{
	free(p->end);
}

/* A delete of one etcd key, as one operation of a Txn. */
struct req_delete {
	Etcd__RequestOp op;
	Etcd__DeleteRangeRequest del;
};

static Etcd__RequestOp *
req_delete(struct req_delete *p, const char *ekey)
{
	etcd__request_op__init(&p->op);
	etcd__delete_range_request__init(&p->del);
	p->del.key = et_bin(ekey, strlen(ekey));
	p->op.request_case = ETCD__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
	p->op.request_delete_range = &p->del;
	return &p->op;
}

/* c: a compare of key's (len bytes, through range_end when not NULL)
 * create revision with rev. */
static Etcd__Compare *
cmp_created(Etcd__Compare *c, const char *key, size_t len, const char *range_end,
    size_t endlen, int64_t rev)
{
	etcd__compare__init(c);
	c->key = et_bin(key, len);
	if (range_end != NULL)
		c->range_end = et_bin(range_end, endlen);
	c->target = ETCD__COMPARE__COMPARE_TARGET__CREATE;
	c->result = ETCD__COMPARE__COMPARE_RESULT__EQUAL;
	c->target_union_case = ETCD__COMPARE__TARGET_UNION_CREATE_REVISION;
	c->create_revision = rev;
	return c;
}

/* Send a Txn for op: compares (ncmp of them), then ops (nops). */
static void
op_txn(struct et_op *op, Etcd__Compare **cmp, size_t ncmp, Etcd__RequestOp **ops, size_t nops,
    etcd_cb *cb)
{
	Etcd__TxnRequest txn;
	etcd__txn_request__init(&txn);
	txn.compare = cmp;
	txn.n_compare = ncmp;
	txn.success = ops;
	txn.n_success = nops;
	et_op_call(op, ETCD_TXN, &txn.base, cb);
}

/* A Txn's answer (ETCD_OK) and what it says. */
static const Etcd__TxnResponse *
txn_of(const struct etcd_result *res)
{
	return (const Etcd__TxnResponse *)(const void *)res->msg;
}

static int64_t
txn_revision(const Etcd__TxnResponse *t)
{
	return t->header != NULL ? t->header->revision : 0;
}

/* The i-th response of a Txn's answer if it is a range's, else NULL. */
static const Etcd__RangeResponse *
txn_range(const Etcd__TxnResponse *t, size_t i)
{
	return i < t->n_responses && t->responses[i]->response_case ==
	    ETCD__RESPONSE_OP__RESPONSE_RESPONSE_RANGE ? t->responses[i]->response_range : NULL;
}

/* ---- deletes -------------------------------------------------------------- */

static void on_delete(void *arg, const struct etcd_result *res);

/* Send (or send again) the delete of op->ekey, and the revoke of its lease. */
static void
delete_send(struct et_op *op)
{
	struct req_delete d;
	Etcd__RequestOp *ops[] = { req_delete(&d, op->ekey) };
	op_txn(op, NULL, 0, ops, 1, on_delete);
}

/* Delete etcd key ekey (and revoke lease, if not 0) until etcd confirms it,
 * telling cb (if not NULL) whether it was there. */
static void
delete_start(struct et *r, struct et_key *k, const char *ekey, int64_t lease, be_cb *cb,
    void *arg)
{
	struct et_op *op = et_op_new(r, cb != NULL ? EK_RELEASE : EK_DELETE, k->name, k->len, cb, arg);
	op->ekey = xstrdup(ekey);
	op->revoke = lease;
	if (!etcd_up(r->cli) && !r->destroying) {
		if (cb != NULL) {
			struct et_op *tell = et_op_new(r, EK_RELEASE, k->name, k->len, cb, arg);
			op->cb = NULL;
			et_op_answer(tell, BE_ERROR, 0, 0, "etcd is not reachable");
		}
		op->kind = EK_DELETE;
		TAILQ_INSERT_TAIL(&r->deferred, op, entry);
		if (!evtimer_pending(r->ev_deferred, NULL)) {
			struct timeval tv = clock_tv(ET_DELETE_RETRY_MS);
			evtimer_add(r->ev_deferred, &tv);
		}
		return;
	}
	delete_send(op);
}

/* Send the deletes kept for later again. */
void
et_on_deferred(evutil_socket_t fd, short what, void *arg)
{
	struct et *r = arg;
	struct et_op_list again;
	struct et_op *op;
	(void)fd;
	(void)what;
	if (!etcd_up(r->cli)) {
		struct timeval tv = clock_tv(ET_DELETE_RETRY_MS);
		if (!TAILQ_EMPTY(&r->deferred))
			evtimer_add(r->ev_deferred, &tv);
		return;
	}
	TAILQ_INIT(&again);
	TAILQ_CONCAT(&again, &r->deferred, entry);
	while ((op = TAILQ_FIRST(&again)) != NULL) {
		TAILQ_REMOVE(&again, op, entry);
		delete_send(op);
	}
}

/* The answer to a delete: a release is told whether its key was there; a
 * delete that got no answer is kept and sent again. */
static void
on_delete(void *arg, const struct etcd_result *res)
{
	struct et_op *op = arg;
	struct et *r = op->r;
	const Etcd__TxnResponse *t = res->status == ETCD_OK ? txn_of(res) : NULL;
	bool deleted = t != NULL && t->n_responses > 0 && t->responses[0]->response_case ==
	    ETCD__RESPONSE_OP__RESPONSE_RESPONSE_DELETE_RANGE &&
	    t->responses[0]->response_delete_range->deleted > 0;
	et_op_landed(op);
	if (res->status == ETCD_OK) {
		et_revoke(r, op->revoke);
		if (op->kind == EK_RELEASE && deleted)
			et_op_answer(op, BE_OK, 0, 0, NULL);
		else if (op->kind == EK_RELEASE)
			et_op_answer(op, BE_NOTOWNER, 0, 0, "the lock's etcd key was gone");
		else
			et_op_answer(op, BE_OK, 0, 0, NULL);
		return;
	}
	if (op->kind == EK_RELEASE) {
		struct et_op *tell = et_op_new(r, EK_RELEASE, op->k->name, op->k->len, op->cb, op->arg);
		et_op_answer(tell, BE_ERROR, 0, 0, res->why);
		op->cb = NULL;
		op->kind = EK_DELETE;
	}
	if (r->destroying) {
		et_op_answer(op, BE_ERROR, 0, 0, NULL);
		return;
	}
	TAILQ_INSERT_TAIL(&r->deferred, op, entry);
	if (!evtimer_pending(r->ev_deferred, NULL)) {
		struct timeval tv = clock_tv(ET_DELETE_RETRY_MS);
		evtimer_add(r->ev_deferred, &tv);
	}
}

/* Let entry e go: forget it and delete its etcd key (revoking its own
 * lease), telling cb if not NULL. */
static void
entry_drop(struct et *r, struct et_entry *e, be_cb *cb, void *arg)
{
	struct et_key *k = e->k;
	k->refs++;
	delete_start(r, k, e->ekey, e->own ? e->lease : 0, cb, arg);
	et_entry_free(r, e);
	et_key_put(r, k);
}

/* ---- acquiring ---------------------------------------------------------------- */

/*
 * Where the etcd key ekey stands in kvs (a range's keys by create
 * revision) for a lease of mode/limit: whether it holds, and if not the
 * create revision of the key whose delete it waits for (-1: any before it)
 * and, in *wait_at, its place in kvs (n: any before it). 0, or -1 if ekey
 * is not in kvs.
 */
static int
decide(Etcd__KeyValue *const *kvs, size_t n, const char *ekey, enum lock_mode mode,
    unsigned limit, int64_t *created, bool *holds, int64_t *wait_rev, size_t *wait_at)
{
	size_t mine = strlen(ekey), prev_at = n, excl_at = n;
	int64_t prev = 0, last_excl = 0;
	struct et_value v;
	unsigned before = 0;
	int rc = -1;

	for (size_t i = 0; i < n; i++) {
		const Etcd__KeyValue *kv = kvs[i];
		int64_t c = kv->create_revision;
		if (kv->key.len == mine && memcmp(kv->key.data, ekey, mine) == 0) {
			*created = c;
			rc = 0;
			break;
		}
		before++;
		prev = c;
		prev_at = i;
		/* any kind but "s0" excludes readers */
		et_value_parse(kv->value.data, kv->value.len, &v);
		if (v.kind != 's') {
			last_excl = c;
			excl_at = i;
		}
	}
	switch (mode) {
	case LOCK_EXCLUSIVE:
		*holds = before == 0;
		*wait_rev = prev;
		*wait_at = prev_at;
		break;
	case LOCK_SHARED:
		*holds = last_excl == 0;
		*wait_rev = last_excl;
		*wait_at = excl_at;
		break;
	case LOCK_SEMAPHORE:
		*holds = before < limit;
		*wait_rev = -1;
		*wait_at = n;
		break;
	}
	return rc;
}

/* How long the lease op put its key on is still valid, from the call. */
static uint64_t
op_valid(const struct et_op *op)
{
	struct et *r = op->r;
	uint64_t until = op->detach ? op->lease_until : r->lease_until, v;
	if (until <= op->t_call)
		return 0;
	v = until - op->t_call;
	return op->detach && v > op->ttl_ms ? op->ttl_ms : v;
}

/* The delete of a try's key: the try is answered BE_BUSY now; a delete
 * that got no answer is sent again until it is confirmed. */
static void
on_try_delete(void *arg, const struct etcd_result *res)
{
	struct et_op *op = arg;
	et_op_landed(op);
	if (res->status != ETCD_OK)
		delete_start(op->r, op->k, op->ekey, 0, NULL, NULL);
	et_op_answer(op, BE_BUSY, 0, 0, NULL);
}

/* Entry e (E_NEW or E_WAITING) was put at revision rev with created as its
 * create revision: it holds (answer BE_OK with fence rev) or waits (BE_BUSY). */
static void
entry_placed(struct et_op *op, struct et_entry *e, const Etcd__RangeResponse *range,
    int64_t rev)
{
	struct et *r = op->r;
	int64_t created = 0, wait_rev = 0;
	size_t wait_at = 0;
	bool holds = false;
	uint64_t valid;

	if (range == NULL || decide(range->kvs, range->n_kvs, e->ekey, op->mode, op->limit,
	    &created, &holds, &wait_rev, &wait_at) < 0) {
		entry_drop(r, e, NULL, NULL);
		et_op_answer(op, BE_ERROR, 0, 0, "the etcd key was not there after its put");
		return;
	}
	if (!op->detach && op->put_lease != r->lease) {
		/* the daemon's lease was given up while the Txn was out: the key
		 * is on a lease that may end any time */
		entry_drop(r, e, NULL, NULL);
		et_op_answer(op, BE_ERROR, 0, 0, "the daemon's etcd lease was lost meanwhile");
		return;
	}
	if (e->own && e->lease != op->lease)
		et_revoke(r, e->lease);	/* it was on an own lease it leaves */
	e->create_rev = created;
	e->lease = op->detach ? op->lease : r->lease;
	e->own = op->detach;
	e->own_until = op->lease_until;
	e->own_ttl_ms = op->detach ? op->ttl_ms : 0;
	e->mode = op->mode;
	e->limit = op->limit;
	free(e->value);
	e->value = op->value != NULL ? xmemdup(op->value, op->valuelen) : NULL;
	e->valuelen = op->valuelen;
	free(e->who);
	e->who = op->who != NULL ? xstrdup(op->who) : NULL;
	if (!holds && op->try_once) {
		/* a try leaves nothing behind: its key goes before the answer */
		struct req_delete d;
		Etcd__RequestOp *ops[1];
		free(op->ekey);
		op->ekey = xstrdup(e->ekey);
		et_entry_free(r, e);
		ops[0] = req_delete(&d, op->ekey);
		op_txn(op, NULL, 0, ops, 1, on_try_delete);
		return;
	}
	if (!holds) {
		struct et_key *k = e->k;
		e->state = E_WAITING;
		e->wait_rev = wait_rev;
		free(e->wait_key);
		e->wait_key = NULL;
		e->wait_keylen = 0;
		if (wait_at < range->n_kvs) {
			e->wait_keylen = range->kvs[wait_at]->key.len;
			e->wait_key = xmemdup(range->kvs[wait_at]->key.data, e->wait_keylen);
		}
		/* the answer goes first, so that the lock table waits for the
		 * wakeup before it comes */
		et_op_answer(op, BE_BUSY, 0, 0, NULL);
		if (k->last_delete > rev)
			et_wake_later(r, k);	/* a delete came before this answer */
		return;
	}
	valid = op_valid(op);
	if (valid == 0) {
		/* never grant on a lease that may have ended (etcd issue 9921) */
		entry_drop(r, e, NULL, NULL);
		et_op_answer(op, BE_ERROR, 0, 0, "the etcd lease ran out before the grant");
		return;
	}
	e->state = E_HELD;
	e->gone = false;
	e->grant_rev = rev;
	e->seq = 0;
	et_op_answer(op, BE_OK, (uint64_t)rev << ET_SEQ_BITS, valid, NULL);
}

/* A Txn of op failed (st ETCD_FAILED or ETCD_DOWN, why): e was changed or
 * not. The lease a put named may be gone: then it is given up, if it is
 * still the daemon's lease. A Txn put on a lease given up since (etcd
 * stalled past it) fails so when etcd runs again, after the new lease was
 * granted: that says nothing of the new one. */
static void
txn_failed(struct et_op *op, struct et_entry *e, const struct etcd_result *res)
{
	struct et *r = op->r;
	bool lease_gone = res->status == ETCD_FAILED && res->why != NULL &&
	    strstr(res->why, "lease not found") != NULL;
	if (lease_gone && !op->detach && op->put_lease != 0 && op->put_lease == r->lease)
		et_lease_lost(r, "etcd says it is not found");
	if (e != NULL && e->state == E_NEW) {
		/* a Txn is all or nothing: a refused one put nothing */
		if (res->status == ETCD_FAILED)
			et_entry_free(r, e);
		else
			entry_drop(r, e, NULL, NULL);
	}
	if (op->detach && op->lease != 0 && (e == NULL || e->lease != op->lease))
		et_revoke(r, op->lease);
	et_op_answer(op, BE_ERROR, 0, 0, res->why);
}

/* The answer to an acquire's Txn: put the key, read the range. */
static void
on_acquire_txn(void *arg, const struct etcd_result *res)
{
	struct et_op *op = arg;
	struct et_entry *e = et_entry_find(op->k, op->token);
	et_op_landed(op);
	if (res->status != ETCD_OK) {
		txn_failed(op, e, res);
		return;
	}
	if (!txn_of(res)->succeeded) {
		/* an exclusive try found the range taken: nothing was put */
		if (e != NULL && e->state == E_NEW)
			et_entry_free(op->r, e);
		et_op_answer(op, BE_BUSY, 0, 0, NULL);
		return;
	}
	if (e == NULL) {
		/* released meanwhile: what was put goes too */
		delete_start(op->r, op->k, op->ekey, 0, NULL, NULL);
		et_op_answer(op, BE_ERROR, 0, 0, "released while being acquired");
		return;
	}
	entry_placed(op, e, txn_range(txn_of(res), 1), txn_revision(txn_of(res)));
}

/* Send an acquire's Txn. */
static void
acquire_txn(struct et_op *op)
{
	struct et *r = op->r;
	struct et_entry *e = et_entry_find(op->k, op->token);
	struct req_put put;
	struct req_range range;
	Etcd__Compare cmp, *cmps[1];
	Etcd__RequestOp *ops[2];
	assert(e != NULL);
	free(op->ekey);
	op->ekey = xstrdup(e->ekey);
	op->put_lease = op->detach ? op->lease : r->lease;
	ops[0] = req_put(&put, e->ekey, op->mode, op->limit, op->put_lease, 0, op->who,
	    op->value, op->valuelen);
	ops[1] = req_range(&range, op->k);
	/* an exclusive try puts its key only into an empty range */
	cmps[0] = cmp_created(&cmp, op->k->path, op->k->pathlen, range.end, op->k->pathlen, 0);
	op_txn(op, cmps, op->try_once && op->mode == LOCK_EXCLUSIVE && e->state == E_NEW ? 1 : 0,
	    ops, 2, on_acquire_txn);
	req_range_done(&range);
	req_put_done(&put);
}

static void transfer_txn(struct et_op *op);
static void renew_own_txn(struct et_op *op);

/* The answer to the grant or keepalive of an op's own lease; then the
 * op's Txn. */
static void
on_own_lease(void *arg, const struct etcd_result *res)
{
	struct et_op *op = arg;
	struct et_entry *e = et_entry_find(op->k, op->kind == EK_TRANSFER ? op->from : op->token);
	int64_t id = 0, ttl = 0;
	if (res->status == ETCD_OK && op->granting) {
		const Etcd__LeaseGrantResponse *g = (const void *)res->msg;
		id = g->id;
		ttl = g->ttl;
	} else if (res->status == ETCD_OK) {
		const Etcd__LeaseKeepAliveResponse *ka = (const void *)res->msg;
		id = ka->id;
		ttl = ka->ttl;
	}
	et_op_landed(op);
	if (res->status != ETCD_OK) {
		txn_failed(op, op->kind == EK_ACQUIRE ? e : NULL, res);
		return;
	}
	if (ttl <= 0 || id <= 0) {
		/* a keepalive of a lease that is gone */
		if (op->kind == EK_RENEW) {
			if (e != NULL)
				e->gone = true;
			et_op_answer(op, BE_NOTOWNER, 0, 0, "the lock's etcd lease has expired");
			return;
		}
		if (e != NULL && op->kind == EK_ACQUIRE) {
			e->own = false;	/* its key went with it: a new lease */
			e->lease = 0;
		}
		op->lease = 0;
		op_send(op);
		return;
	}
	op->lease = id;
	op->lease_until = op->sent + (uint64_t)ttl * 1000;
	switch (op->kind) {
	case EK_ACQUIRE:
		acquire_txn(op);
		break;
	case EK_TRANSFER:
		transfer_txn(op);
		break;
	default:
		if (e != NULL && e->lease == id) {
			/* a keepalive of the lease it has */
			e->own_until = op->lease_until;
			et_op_answer(op, BE_OK, 0, op_valid(op), NULL);
		} else {
			renew_own_txn(op);
		}
		break;
	}
}

/* Keep alive (lease not 0) or grant a lease of its own for op. */
static void
own_lease(struct et_op *op, int64_t lease)
{
	op->granting = lease == 0;
	if (lease != 0) {
		Etcd__LeaseKeepAliveRequest req;
		etcd__lease_keep_alive_request__init(&req);
		req.id = lease;
		et_op_call(op, ETCD_LEASE_KEEPALIVE, &req.base, on_own_lease);
	} else {
		Etcd__LeaseGrantRequest req;
		etcd__lease_grant_request__init(&req);
		req.ttl = (int64_t)((op->ttl_ms + 999) / 1000);
		et_op_call(op, ETCD_LEASE_GRANT, &req.base, on_own_lease);
	}
}

/* Send an acquire or transfer that was ready (or became ready). */
static void
op_send(struct et_op *op)
{
	struct et_entry *e = et_entry_find(op->k, op->token);
	if (op->kind == EK_TRANSFER) {
		if (op->detach)
			own_lease(op, 0);
		else
			transfer_txn(op);
		return;
	}
	if (op->detach)
		own_lease(op, e != NULL && e->own ? e->lease : 0);
	else
		acquire_txn(op);
}

/* The entry for an acquire of token: its own, or a waiting one of the
 * key's whose waiter has gone (it keeps its place), or a new one. */
static struct et_entry *
entry_claim(struct et_key *k, const char *token)
{
	struct et_entry *e = et_entry_find(k, token);
	if (e == NULL)
		TAILQ_FOREACH(e, &k->entries, entry)
			if (e->state == E_WAITING && !e->busy)
				break;
	if (e != NULL)
		memcpy(e->token, token, TOKEN_LEN + 1);
	else
		e = et_entry_new(k, token);
	e->claimable = false;
	return e;
}

void
et_acquire(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct et *r = be->priv;
	struct et_op *op = et_op_new(r, EK_ACQUIRE, l->key, l->keylen, cb, arg);
	struct et_entry *e;
	memcpy(op->token, l->token, TOKEN_LEN + 1);
	op->mode = l->mode;
	op->limit = l->limit;
	op->ttl_ms = l->ttl_ms;
	op->detach = l->detached;
	op->try_once = l->try_once != 0;
	if (l->value != NULL) {
		op->value = xmemdup(l->value, l->valuelen);
		op->valuelen = l->valuelen;
	}
	if (l->who != NULL)
		op->who = xstrdup(l->who);
	if (!etcd_up(r->cli)) {
		et_op_answer(op, BE_ERROR, 0, 0, "etcd is not reachable");
		return;
	}
	e = entry_claim(op->k, op->token);
	e->busy = true;
	if (et_ready(r))
		op_send(op);
	else
		TAILQ_INSERT_TAIL(&r->waiting, op, entry);
}

/* Send or fail the acquires waiting for the lease and the watch. */
void
et_flush_waiting(struct et *r)
{
	struct et_op_list list;
	struct et_op *op;
	if (TAILQ_EMPTY(&r->waiting))
		return;
	TAILQ_INIT(&list);
	TAILQ_CONCAT(&list, &r->waiting, entry);
	while ((op = TAILQ_FIRST(&list)) != NULL) {
		TAILQ_REMOVE(&list, op, entry);
		if (et_ready(r))
			op_send(op);
		else if (etcd_up(r->cli) && (r->lease != 0 || r->granting) &&
		    clock_ms() - op->t_call < (uint64_t)r->set->request_timeout_ms)
			TAILQ_INSERT_TAIL(&r->waiting, op, entry);
		else {
			struct et_entry *e = et_entry_find(op->k, op->token);
			if (e != NULL) {
				e->busy = false;
				if (e->state == E_NEW)
					et_entry_free(r, e);
			}
			et_op_answer(op, BE_ERROR, 0, 0, etcd_up(r->cli) ?
			    "etcd did not grant a lease or start the watch in time" :
			    "etcd is not reachable");
		}
	}
}

/* ---- releasing, renewing -------------------------------------------------- */

void
et_release(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct et *r = be->priv;
	struct et_key *k = et_key_get(r, l->key, l->keylen);
	struct et_entry *e = et_entry_find(k, l->token);
	if (e != NULL) {
		entry_drop(r, e, cb, arg);
	} else {
		/* not known (an acquire whose answer was lost): its key, if any */
		char *ekey = xasprintf("%s%s", k->path, l->token);
		delete_start(r, k, ekey, 0, cb, arg);
		free(ekey);
	}
	et_key_put(r, k);
}

/* The answer to the Txn that moves a renewed DETACH key to a longer lease
 * of its own. */
static void
on_renew_own_txn(void *arg, const struct etcd_result *res)
{
	struct et_op *op = arg;
	struct et *r = op->r;
	struct et_entry *e = et_entry_find(op->k, op->token);
	et_op_landed(op);
	if (res->status != ETCD_OK) {
		et_revoke(r, op->lease);
		et_op_answer(op, BE_ERROR, 0, 0, res->why);
	} else if (!txn_of(res)->succeeded || e == NULL) {
		et_revoke(r, op->lease);
		if (e != NULL)
			e->gone = true;
		et_op_answer(op, BE_NOTOWNER, 0, 0, "the lock's etcd key is gone");
	} else {
		et_revoke(r, e->lease);
		e->lease = op->lease;
		e->own_until = op->lease_until;
		e->own_ttl_ms = op->ttl_ms;
		et_op_answer(op, BE_OK, 0, op_valid(op), NULL);
	}
}

/* Move a DETACH key to the new lease op->lease, if it is still ours. */
static void
renew_own_txn(struct et_op *op)
{
	struct et_entry *e = et_entry_find(op->k, op->token);
	if (e == NULL) {
		et_revoke(op->r, op->lease);
		et_op_answer(op, BE_NOTOWNER, 0, 0, "the lock's etcd key is gone");
		return;
	}
	struct req_put put;
	Etcd__Compare cmp, *cmps[] = { cmp_created(&cmp, e->ekey, strlen(e->ekey), NULL, 0,
	    e->create_rev) };
	/* not a grant: the fence is written with the value (observers') */
	Etcd__RequestOp *ops[] = { req_put(&put, e->ekey, e->mode, e->limit, op->lease,
	    (uint64_t)e->grant_rev << ET_SEQ_BITS | e->seq, e->who, e->value, e->valuelen) };
	op_txn(op, cmps, 1, ops, 1, on_renew_own_txn);
	req_put_done(&put);
}

/*
 * A renewal. A session-bound key is on the daemon's lease, which is kept
 * alive apart: the answer is what is left of it. A DETACH key's own lease
 * is kept alive, or, for a longer TTL than it has, replaced by a longer
 * one (etcd cannot change a lease's TTL).
 */
void
et_renew(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct et *r = be->priv;
	struct et_op *op = et_op_new(r, EK_RENEW, l->key, l->keylen, cb, arg);
	struct et_entry *e = et_entry_find(op->k, l->token);
	uint64_t now = op->t_call;
	memcpy(op->token, l->token, TOKEN_LEN + 1);
	op->ttl_ms = l->ttl_ms;
	op->detach = e != NULL && e->own;
	if (e != NULL && e->state == E_HELD && !e->gone && e->forced_by != NULL) {
		/* broken by UNLOCK FORCE through another daemon: its holder is
		 * told, then the lock table releases it (its key's delete) */
		char why[sizeof(op->why)];
		snprintf(why, sizeof(why), "forced by %s", e->forced_by);
		op->rep.forced = 1;
		et_op_answer(op, BE_NOTOWNER, 0, 0, why);
	} else if (e == NULL || e->state != E_HELD || e->gone ||
	    (!e->own && e->lease != r->lease)) {
		/* the holding ends here: its entry goes (and its key, if any) */
		const char *why = e != NULL && !e->own && e->lease != r->lease ?
		    "the daemon's etcd lease was lost" : "the lock's etcd key is gone";
		if (e != NULL && e->state == E_HELD)
			entry_drop(r, e, NULL, NULL);
		et_op_answer(op, BE_NOTOWNER, 0, 0, why);
	} else if (!e->own) {
		if (!et_lease_ok(r, now))
			et_op_answer(op, BE_ERROR, 0, 0, "the etcd lease is not confirmed");
		else
			et_op_answer(op, BE_OK, 0, r->lease_until - now, NULL);
	} else if (!etcd_up(r->cli)) {
		et_op_answer(op, BE_ERROR, 0, 0, "etcd is not reachable");
	} else {
		uint64_t need = (op->ttl_ms + 999) / 1000 * 1000;
		own_lease(op, need <= e->own_ttl_ms ? e->lease : 0);
	}
}

/* ---- handing over ----------------------------------------------------------- */

/* The answer to a transfer's Txn. */
static void
on_transfer_txn(void *arg, const struct etcd_result *res)
{
	struct et_op *op = arg;
	struct et *r = op->r;
	struct et_entry *from = et_entry_find(op->k, op->from);
	struct et_entry *to = et_entry_find(op->k, op->token);
	int64_t rev;
	et_op_landed(op);
	if (res->status != ETCD_OK) {
		txn_failed(op, to, res);
		return;
	}
	rev = txn_revision(txn_of(res));
	if (!txn_of(res)->succeeded) {
		/* from's key is gone: nothing was changed */
		if (from != NULL)
			et_entry_free(r, from);
		if (to != NULL)
			et_entry_free(r, to);
		if (op->detach)
			et_revoke(r, op->lease);
		et_op_answer(op, BE_NOTOWNER, 0, 0, "the lock's etcd key is gone");
		return;
	}
	if (to == NULL) {
		/* released meanwhile: what was put goes too */
		delete_start(r, op->k, op->ekey, 0, NULL, NULL);
		if (from != NULL)
			et_entry_free(r, from);
		et_op_answer(op, BE_ERROR, 0, 0, "released while being handed over");
		return;
	}
	/* from's key was deleted, to's put at the end of the range */
	if (from != NULL) {
		if (from->own)
			et_revoke(r, from->lease);
		et_entry_free(r, from);
	}
	entry_placed(op, to, txn_range(txn_of(res), 2), rev);
}

/* Send a transfer's Txn: from's key is deleted and to's put in one Txn,
 * guarded by from's create revision. to holds at once unless another
 * daemon's key waits before it: the key is never free, and daemons are
 * served in revision order, local handoffs included. */
static void
transfer_txn(struct et_op *op)
{
	struct et *r = op->r;
	struct et_entry *from = et_entry_find(op->k, op->from), *to;
	int64_t lease = op->detach ? op->lease : r->lease;
	if (from == NULL || from->state != E_HELD || from->gone) {
		if (op->detach)
			et_revoke(r, op->lease);
		et_op_answer(op, BE_NOTOWNER, 0, 0, "the lock's etcd key is gone");
		return;
	}
	from->leaving = true;
	to = et_entry_new(op->k, op->token);
	to->busy = true;
	op->put_lease = lease;
	free(op->ekey);
	op->ekey = xstrdup(to->ekey);
	{
		struct req_delete d;
		struct req_put put;
		struct req_range range;
		Etcd__Compare cmp, *cmps[] = { cmp_created(&cmp, from->ekey, strlen(from->ekey),
		    NULL, 0, from->create_rev) };
		Etcd__RequestOp *ops[] = { req_delete(&d, from->ekey),
		    req_put(&put, to->ekey, op->mode, op->limit, lease, 0, op->who, op->value,
		    op->valuelen),
		    req_range(&range, op->k) };
		op_txn(op, cmps, 1, ops, 3, on_transfer_txn);
		req_range_done(&range);
		req_put_done(&put);
	}
}

/* Whether from's key can go to an exclusive session lock without a Txn:
 * it holds, exclusive, on the daemon's lease, with fences left. Not a
 * CAMPAIGN's (from or to), nor a key this daemon observes: a handoff in
 * place writes nothing, so other daemons could not tell its term. */
static bool
local_handoff_ok(const struct et_op *op, const struct et_entry *from)
{
	return from != NULL && !op->detach && op->mode == LOCK_EXCLUSIVE &&
	    op->value == NULL && from->value == NULL && op->k->watched == 0 &&
	    from->state == E_HELD && from->mode == LOCK_EXCLUSIVE && !from->gone &&
	    from->forced_by == NULL &&
	    !from->leaving && !from->own && from->lease == op->r->lease &&
	    from->seq + 1 < (1u << ET_SEQ_BITS);
}

/* The answer to a local handoff's read of the range: when from's key is
 * the only one there, no other daemon waits, and to takes from's key over
 * (fence: from's grant revision, shifted, plus one more handoff). Else, or
 * without an answer, the handoff is a Txn after all. */
static void
on_local_range(void *arg, const struct etcd_result *res)
{
	struct et_op *op = arg;
	struct et *r = op->r;
	struct et_entry *from = et_entry_find(op->k, op->from);
	const Etcd__RangeResponse *rr = res->status == ETCD_OK ?
	    (const Etcd__RangeResponse *)(const void *)res->msg : NULL;
	uint64_t valid;
	et_op_landed(op);
	if (rr == NULL || rr->count != 1 || rr->n_kvs != 1 || !local_handoff_ok(op, from) ||
	    rr->kvs[0]->key.len != strlen(from->ekey) ||
	    memcmp(rr->kvs[0]->key.data, from->ekey, rr->kvs[0]->key.len) != 0 ||
	    rr->kvs[0]->create_revision != from->create_rev) {
		transfer_txn(op);
		return;
	}
	valid = op_valid(op);
	if (valid == 0) {
		transfer_txn(op);	/* it fails there, as a Txn would */
		return;
	}
	memcpy(from->token, op->token, TOKEN_LEN + 1);
	from->seq++;
	r->nlocal++;
	et_op_answer(op, BE_OK, (uint64_t)from->grant_rev << ET_SEQ_BITS | from->seq, valid, NULL);
}

/* Hand from's key over locally if the range holds nothing else: one read,
 * no write, and no other daemon is passed (one whose key came after the
 * read came after this daemon's waiter too). */
static void
local_handoff(struct et_op *op)
{
	struct req_range range;
	(void)req_range(&range, op->k);
	range.range.keys_only = 1;
	range.range.limit = 2;
	et_op_call(op, ETCD_RANGE, &range.range.base, on_local_range);
	req_range_done(&range);
}

void
et_transfer(struct backend *be, const struct be_lock *from, const struct be_lock *to,
    be_cb *cb, void *arg)
{
	struct et *r = be->priv;
	struct et_op *op = et_op_new(r, EK_TRANSFER, to->key, to->keylen, cb, arg);
	memcpy(op->token, to->token, TOKEN_LEN + 1);
	memcpy(op->from, from->token, TOKEN_LEN + 1);
	op->mode = to->mode;
	op->limit = to->limit;
	op->ttl_ms = to->ttl_ms;
	op->detach = to->detached;
	if (to->value != NULL) {
		op->value = xmemdup(to->value, to->valuelen);
		op->valuelen = to->valuelen;
	}
	if (to->who != NULL)
		op->who = xstrdup(to->who);
	if (!etcd_up(r->cli) || (!op->detach && !et_lease_ok(r, op->t_call))) {
		et_op_answer(op, BE_ERROR, 0, 0, "etcd is not reachable");
		return;
	}
	if (local_handoff_ok(op, et_entry_find(op->k, op->from))) {
		local_handoff(op);
		return;
	}
	op_send(op);
}

/* The lock table waits for key no more: its waiting keys go. */
void
et_withdraw(struct backend *be, const char *key, size_t keylen)
{
	struct et *r = be->priv;
	size_t pathlen;
	char *path = et_key_path(r, key, keylen, &pathlen);
	struct et_key *k = et_key_find_path(r, path, pathlen);
	struct et_entry *e, *next;
	free(path);
	if (k == NULL)
		return;
	k->refs++;
	for (e = TAILQ_FIRST(&k->entries); e != NULL; e = next) {
		next = TAILQ_NEXT(e, entry);
		if (e->state == E_WAITING && !e->busy)
			entry_drop(r, e, NULL, NULL);
	}
	et_key_put(r, k);
}

/* A delete this key's waiting entries waited for came: the lock table's
 * queue asks again, taking over the entries it still wants (entry_claim);
 * the others go. */
void
et_wake_now(struct et *r, struct et_key *k)
{
	struct et_entry *e, *next;
	k->refs++;
	TAILQ_FOREACH(e, &k->entries, entry)
		e->claimable = e->state == E_WAITING && !e->busy;
	r->be->up.wakeup(r->be->up.arg, k->name, k->len);
	for (e = TAILQ_FIRST(&k->entries); e != NULL; e = next) {
		next = TAILQ_NEXT(e, entry);
		if (e->claimable)
			entry_drop(r, e, NULL, NULL);
	}
	et_key_put(r, k);
}

#ifdef DLOCKD_TEST_HOOKS	/* test and fuzz objects only (Makefile) */
/* ---- for the fuzz harness (be_etcd_recipe.h) -------------------------------- */

int
be_etcd_decide(Etcd__KeyValue *const *kvs, size_t n, const char *ekey, enum lock_mode mode,
    unsigned limit, int64_t *created, bool *holds, int64_t *wait_rev)
{
	size_t wait_at;
	return decide(kvs, n, ekey, mode, limit, created, holds, wait_rev, &wait_at);
}
#endif
