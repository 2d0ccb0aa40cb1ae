/*
 * be_etcd_leader — leaders for observers on the etcd backend: PROCLAIM,
 * which writes a new CAMPAIGN value to the holder's etcd key, and LEADER's
 * read of a lock key's range, which any daemon can make from etcd alone.
 * (The watch of observed keys is in be_etcd_watch.c.)
 *
 * A key's holders are read the way the recipe ranks them (be_etcd_recipe.c):
 * by create revision, an exclusive key first, shared keys before any other
 * kind, a semaphore's within its limit. A holder's fence is the revision of
 * the put that granted it, shifted (ET_SEQ_BITS): its key's mod revision,
 * unless a later put that was not a grant (PROCLAIM, a DETACH lock moved to
 * a longer lease) wrote the fence into the value (et_value_parse).
 *
 * A key that stands first in etcd is not always granted yet: a waiting
 * key whose predecessor has just been deleted holds in etcd, but its daemon
 * grants it only with its next put (a new fence), one round trip later.
 * Its mod revision is then that of its wait, older than the last fence
 * given. So each holder read whose fence is its mod revision is checked
 * with a read of the range as it was at that revision (one Txn for them
 * all): a key that held then was granted then; one that did not is not
 * counted, and the observer sees the key free (or with fewer holders) for
 * that round trip. When those revisions are compacted away, the holders are
 * taken as granted.
 *
 * The version of a state read is the etcd revision of the read: every
 * change of the key in etcd, through any daemon, has a higher one after it.
 *
 * A key observed here is read again at each change the watch brings
 * (be_etcd_watch.c), as the range was at the revision the watch has
 * reached, together with the range at each put the watch brought since the
 * last read: a put that made its key the first exclusive holder then (a
 * grant, or a PROCLAIM) is a leader, told before the state, even if it had
 * come and gone before the read. Reads of the watch's go one at a time per
 * key, so their states are told in revision order. A leader is missed only
 * when its revisions were compacted away before the read (the state is then
 * read as it is now).
 */
#include "be_etcd_core.h"
#include "be_etcd_leader.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "etcd.h"
#include "xmalloc.h"

#define ET_READ_CHECKS 32	/* at most this many holders are checked */
#define ET_READ_PUTS 64		/* a watched key's puts read at most, the last */

/* ---- PROCLAIM -------------------------------------------------------------- */

/* The answer to a PROCLAIM's Txn. */
static void
on_proclaim_txn(void *arg, const struct etcd_result *res)
{
	struct et_op *op = arg;
	struct et_entry *e = et_entry_find(op->k, op->token);
	const Etcd__TxnResponse *t = res->status == ETCD_OK ?
	    (const Etcd__TxnResponse *)(const void *)res->msg : NULL;
	et_op_landed(op);
	if (t == NULL) {
		et_op_answer(op, BE_ERROR, 0, 0, res->why);
	} else if (!t->succeeded) {
		if (e != NULL && e->state == E_HELD)
			e->gone = true;	/* its next renewal tells the loss */
		et_op_answer(op, BE_NOTOWNER, 0, 0, "the lock's etcd key is gone");
	} else {
		const Etcd__PutResponse *pr = t->n_responses > 0 && t->responses[0]->response_case ==
		    ETCD__RESPONSE_OP__RESPONSE_RESPONSE_PUT ? t->responses[0]->response_put : NULL;
		struct et_value v = { .by = NULL };
		if (pr != NULL && pr->prev_kv != NULL)
			et_value_parse(pr->prev_kv->value.data, pr->prev_kv->value.len, &v);
		if (e != NULL) {
			free(e->value);
			e->value = xmemdup(op->value, op->valuelen);
			e->valuelen = op->valuelen;
		}
		if (e != NULL && v.by != NULL && e->forced_by == NULL && !op->r->destroying) {
			/* the key was broken through another daemon just before
			 * (the put wrote over it): its renewal tells the holder,
			 * and the lease is released */
			e->forced_by = xmemdup(v.by, v.bylen);
			op->r->be->up.expire(op->r->be->up.arg, op->k->name, op->k->len);
		}
		et_op_answer(op, BE_OK, 0, 0, NULL);
	}
}

void
et_proclaim(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct et *r = be->priv;
	struct et_op *op = et_op_new(r, EK_PROCLAIM, l->key, l->keylen, cb, arg);
	struct et_entry *e = et_entry_find(op->k, l->token);
	size_t len;
	memcpy(op->token, l->token, TOKEN_LEN + 1);
	op->value = xmemdup(l->value != NULL ? l->value : "", l->valuelen);
	op->valuelen = l->valuelen;
	if (e == NULL || e->state != E_HELD || e->gone || e->leaving ||
	    e->mode != LOCK_EXCLUSIVE || (!e->own && e->lease != r->lease)) {
		et_op_answer(op, BE_NOTOWNER, 0, 0, "the lock's etcd key is gone");
		return;
	}
	if (e->forced_by != NULL) {
		/* broken: its renewal tells the holder (woken already) */
		et_op_answer(op, BE_NOTOWNER, 0, 0, "the lock was forced through another daemon");
		return;
	}
	if (!etcd_up(r->cli)) {
		et_op_answer(op, BE_ERROR, 0, 0, "etcd is not reachable");
		return;
	}
	/* not a grant: the fence goes with the value; the key keeps its lease
	 * (ignore_lease: a DETACH lock's may be changing on this lane) */
	char *v = et_value_make(e->mode, e->limit, (uint64_t)e->grant_rev << ET_SEQ_BITS | e->seq,
	    e->who, op->value, op->valuelen, &len);
	Etcd__Compare cmp;
	Etcd__Compare *cmps[] = { &cmp };
	Etcd__PutRequest put;
	Etcd__RequestOp rop;
	Etcd__RequestOp *ops[] = { &rop };
	Etcd__TxnRequest txn;
	etcd__compare__init(&cmp);
	cmp.key = et_bin(e->ekey, strlen(e->ekey));
	cmp.target = ETCD__COMPARE__COMPARE_TARGET__CREATE;
	cmp.result = ETCD__COMPARE__COMPARE_RESULT__EQUAL;
	cmp.target_union_case = ETCD__COMPARE__TARGET_UNION_CREATE_REVISION;
	cmp.create_revision = e->create_rev;
	etcd__put_request__init(&put);
	put.key = et_bin(e->ekey, strlen(e->ekey));
	put.value = et_bin(v, len);
	put.ignore_lease = 1;
	put.prev_kv = 1;	/* broken meanwhile through another daemon? */
	etcd__request_op__init(&rop);
	rop.request_case = ETCD__REQUEST_OP__REQUEST_REQUEST_PUT;
	rop.request_put = &put;
	etcd__txn_request__init(&txn);
	txn.compare = cmps;
	txn.n_compare = 1;
	txn.success = ops;
	txn.n_success = 1;
	et_op_call(op, ETCD_TXN, &txn.base, on_proclaim_txn);
	free(v);
}

/* ---- LEADER ---------------------------------------------------------------- */

/* A holder found by a read. */
struct et_holder {
	char *ekey;		/* its etcd key (owned) */
	size_t ekeylen;
	int64_t mod_rev;	/* its mod revision */
	uint64_t fence;		/* its fence */
	bool check;		/* the fence is its mod revision: to be checked */
	bool granted;		/* counted */
	struct et_value v;	/* its value, into val */
	char *val;		/* its value's bytes (owned) */
};

/* A LEADER read: a read of the range, then maybe one Txn of checks. */
struct et_read {
	struct et *r;
	be_leader_cb *cb;
	be_holders_cb *hcb;		/* a read of the holders (et_holders): its
					 * caller, in place of cb */
	be_list_cb *lcb;		/* a page of HELD (et_list): its caller */
	size_t prefixlen;		/* ... the key prefix's length */
	void *arg;
	char *path;			/* the range (owned) */
	size_t pathlen;
	int64_t version;		/* the revision of the first read */
	int64_t at;			/* read at this revision (0: now) */
	struct et_key *k;		/* a read of the watch's: its key (a reference) */
	int64_t *puts;			/* and the revisions of its puts read (owned) */
	size_t nputs;
	struct et_holder *h;		/* the holders read (owned) */
	size_t nh;
	TAILQ_ENTRY(et_read) entry;	/* on r->reads */
};

static void
read_free(struct et_read *rd)
{
	for (size_t i = 0; i < rd->nh; i++) {
		free(rd->h[i].ekey);
		free(rd->h[i].val);
	}
	free(rd->h);
	free(rd->puts);
	free(rd->path);
	free(rd);
}

/* The lock mode of a value's kind. */
static enum lock_mode
kind_mode(char kind)
{
	return kind == 's' ? LOCK_SHARED : kind == 'n' ? LOCK_SEMAPHORE : LOCK_EXCLUSIVE;
}

/* Tell a read of the holders its answer (why: failed) and free it. */
static void
holders_answer(struct et_read *rd, const char *why, bool failed)
{
	struct be_holders hs = { .status = failed ? BE_ERROR : BE_OK, .why = why };
	struct be_holder *h = xcalloc(rd->nh + 1, sizeof(*h));
	for (size_t i = 0; !failed && i < rd->nh; i++) {
		const struct et_holder *x = &rd->h[i];
		if (!x->granted)
			continue;
		/* the lease's end is the daemon's (its keepalives): not read */
		h[hs.n++] = (struct be_holder){ .mode = kind_mode(x->v.kind), .fence = x->fence,
		    .lease_ms = -1, .who = x->v.who, .wholen = x->v.wholen };
	}
	hs.h = h;
	rd->hcb(rd->arg, &hs);
	free(h);
	read_free(rd);
}

/* Tell rd's answer (why NULL: the holders granted) and free it. */
static void
read_answer(struct et_read *rd, const char *why, bool failed)
{
	struct be_leader l = { .status = BE_OK, .version = (uint64_t)rd->version };
	const struct et_holder *first = NULL;
	TAILQ_REMOVE(&rd->r->reads, rd, entry);
	if (rd->lcb != NULL) {
		struct be_list ls = { .status = BE_ERROR, .why = why };
		rd->lcb(rd->arg, &ls);
		read_free(rd);
		return;
	}
	if (rd->hcb != NULL) {
		holders_answer(rd, why, failed);
		return;
	}
	if (failed) {
		l.status = BE_ERROR;
		l.why = why;
	} else {
		for (size_t i = 0; i < rd->nh; i++) {
			const struct et_holder *h = &rd->h[i];
			if (!h->granted)
				continue;
			if (first == NULL)
				first = h;
			l.holders++;
			if (h->fence > l.term)
				l.term = h->fence;
		}
		if (first != NULL) {
			l.mode = kind_mode(first->v.kind);
			if (l.mode == LOCK_EXCLUSIVE && first->v.value != NULL) {
				l.value = first->v.value;
				l.valuelen = first->v.valuelen;
			}
		}
	}
	if (rd->k != NULL) {
		struct et *r = rd->r;
		struct et_key *k = rd->k;
		/* failed: the observers read it as it is now */
		if (k->watched && !r->destroying)
			r->be->up.changed(r->be->up.arg, k->name, k->len, failed ? NULL : &l);
		read_free(rd);
		k->reading = false;
		if (k->read_again && k->watched && !r->destroying)
			et_leader_watched(r, k);
		et_key_put(r, k);
		return;
	}
	if (failed) {
		/* an observer's read: its key is read again once the watch is
		 * created */
		struct et_key *k = et_key_find_path(rd->r, rd->path, rd->pathlen);
		if (k != NULL && k->watched)
			k->stale = true;
	}
	rd->cb(rd->arg, &l);
	read_free(rd);
}

/* The answer to the checks: a holder is granted if it held at its mod
 * revision. */
static void
on_read_checks(void *arg, const struct etcd_result *res)
{
	struct et_read *rd = arg;
	const Etcd__TxnResponse *t = res->status == ETCD_OK ?
	    (const Etcd__TxnResponse *)(const void *)res->msg : NULL;
	size_t at = 0;
	if (t == NULL) {
		/* revisions compacted away: the keys have stood still since */
		bool compacted = res->status == ETCD_FAILED && res->why != NULL &&
		    strstr(res->why, "compacted") != NULL;
		read_answer(rd, res->why != NULL ? res->why : "etcd is not reachable", !compacted);
		return;
	}
	for (size_t i = 0; i < rd->nh; i++) {
		struct et_holder *h = &rd->h[i];
		const Etcd__RangeResponse *rr;
		if (!h->check)
			continue;
		rr = at < t->n_responses && t->responses[at]->response_case ==
		    ETCD__RESPONSE_OP__RESPONSE_RESPONSE_RANGE ? t->responses[at]->response_range :
		    NULL;
		at++;
		h->granted = false;
		if (rr == NULL)
			continue;
		for (size_t j = 0; j < rr->n_kvs; j++)
			if (rr->kvs[j]->key.len == h->ekeylen &&
			    memcmp(rr->kvs[j]->key.data, h->ekey, h->ekeylen) == 0) {
				h->granted = rr->kvs[j]->mod_revision == h->mod_rev &&
				    et_kv_holds(rr->kvs, rr->n_kvs, j);
				break;
			}
	}
	read_answer(rd, NULL, false);
}

/* rd's range read, rr: its holders, then the checks of those whose fence
 * is their mod revision. */
static void
read_holders(struct et_read *rd, const Etcd__RangeResponse *rr)
{
	size_t nchecks = 0;
	rd->version = rd->at > 0 ? rd->at : rr->header != NULL ? rr->header->revision : 0;
	rd->h = xcalloc(rr->n_kvs > 0 ? rr->n_kvs : 1, sizeof(*rd->h));
	for (size_t i = 0; i < rr->n_kvs; i++) {
		const Etcd__KeyValue *kv = rr->kvs[i];
		struct et_holder *h;
		if (!et_kv_holds(rr->kvs, rr->n_kvs, i))
			continue;
		h = &rd->h[rd->nh++];
		h->ekey = xmemdup(kv->key.data, kv->key.len);
		h->ekeylen = kv->key.len;
		h->mod_rev = kv->mod_revision;
		h->val = xmemdup(kv->value.data, kv->value.len);
		et_value_parse(h->val, kv->value.len, &h->v);
		h->granted = true;
		if (h->v.fence != 0) {
			h->fence = h->v.fence;
		} else {
			h->fence = (uint64_t)kv->mod_revision << ET_SEQ_BITS;
			/* a read of the holders is one round trip: a grant's
			 * Txn puts its key, so the fence is the key's put
			 * (local handoffs since not counted) */
			h->check = rd->hcb == NULL && nchecks < ET_READ_CHECKS;
			nchecks += h->check;
		}
	}
	if (nchecks == 0) {
		read_answer(rd, NULL, false);
		return;
	}
	/* one Txn of reads of the range as it was at each mod revision */
	Etcd__RangeRequest *ranges = xcalloc(nchecks, sizeof(*ranges));
	Etcd__RequestOp *rops = xcalloc(nchecks, sizeof(*rops));
	Etcd__RequestOp **ops = xcalloc(nchecks, sizeof(*ops));
	char *end = xmemdup(rd->path, rd->pathlen);
	size_t n = 0;
	Etcd__TxnRequest txn;
	end[rd->pathlen - 1]++;	/* '/' + 1: the end of the prefix range */
	for (size_t i = 0; i < rd->nh; i++) {
		if (!rd->h[i].check)
			continue;
		etcd__range_request__init(&ranges[n]);
		ranges[n].key = et_bin(rd->path, rd->pathlen);
		ranges[n].range_end = et_bin(end, rd->pathlen);
		ranges[n].sort_order = ETCD__RANGE_REQUEST__SORT_ORDER__ASCEND;
		ranges[n].sort_target = ETCD__RANGE_REQUEST__SORT_TARGET__CREATE;
		ranges[n].revision = rd->h[i].mod_rev;
		etcd__request_op__init(&rops[n]);
		rops[n].request_case = ETCD__REQUEST_OP__REQUEST_REQUEST_RANGE;
		rops[n].request_range = &ranges[n];
		ops[n] = &rops[n];
		n++;
	}
	etcd__txn_request__init(&txn);
	txn.success = ops;
	txn.n_success = n;
	etcd_call(rd->r->cli, ETCD_TXN, &txn.base, on_read_checks, rd);
	free(end);
	free(ops);
	free(rops);
	free(ranges);
}

/* The value of hex digit c, or -1. */
static int
hex_val(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
	    c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The lock key of etcd key kv (after the prefix, up to its '/', %XX
 * unescaped) into out (as long as the etcd key at least); its length, or
 * -1 when kv is not a lock's. *seglen: the escaped part's length. */
static long
list_name(const Etcd__KeyValue *kv, size_t prefixlen, char *out, size_t *seglen)
{
	const char *s = (const char *)kv->key.data + prefixlen;
	size_t len = kv->key.len - prefixlen, n = 0;
	const char *slash = memchr(s, '/', len);
	if (kv->key.len < prefixlen || slash == NULL)
		return -1;
	*seglen = (size_t)(slash - s);
	for (const char *p = s; p < slash; p++) {
		if (*p != '%') {
			out[n++] = *p;
			continue;
		}
		int hi = p + 2 < slash ? hex_val(p[1]) : -1, lo = hi >= 0 ? hex_val(p[2]) : -1;
		if (lo < 0)
			return -1;
		out[n++] = (char)(hi << 4 | lo);
		p += 2;
	}
	return (long)n;
}

/* A page of HELD came (rr): its lock keys, each once, and the cursor: the
 * end of the last one's range, in hex, when etcd has more. */
static void
list_page(struct et_read *rd, const Etcd__RangeResponse *rr)
{
	static const char hex[] = "0123456789abcdef";
	size_t total = 0, n = 0, seg = 0, lastseg = 0;
	const Etcd__KeyValue *last = NULL;
	for (size_t i = 0; i < rr->n_kvs; i++)
		total += rr->kvs[i]->key.len;
	char *buf = xmalloc(total + 1), *next = NULL;
	const char **keys = xcalloc(rr->n_kvs + 1, sizeof(*keys));
	size_t *lens = xcalloc(rr->n_kvs + 1, sizeof(*lens));
	total = 0;
	for (size_t i = 0; i < rr->n_kvs; i++) {
		long len = list_name(rr->kvs[i], rd->prefixlen, buf + total, &seg);
		if (len < 0)
			continue;
		last = rr->kvs[i];
		lastseg = seg;
		if (n > 0 && lens[n - 1] == (size_t)len && memcmp(keys[n - 1], buf + total,
		    (size_t)len) == 0)
			continue;	/* another holder or waiter of the same key */
		keys[n] = buf + total;
		lens[n++] = (size_t)len;
		total += (size_t)len;
	}
	if (rr->more && last != NULL) {
		/* "<prefix><escaped>0": just after the range "<prefix><escaped>/" */
		size_t klen = rd->prefixlen + lastseg + 1;
		next = xmalloc(2 * klen + 1);
		for (size_t i = 0; i < klen; i++) {
			unsigned char c = i + 1 < klen ? last->key.data[i] : (unsigned char)'/' + 1;
			next[2 * i] = hex[c >> 4];
			next[2 * i + 1] = hex[c & 15];
		}
		next[2 * klen] = '\0';
	}
	struct be_list ls = { .status = BE_OK, .next = next != NULL ? next : "0", .n = n,
		.keys = keys, .lens = lens };
	TAILQ_REMOVE(&rd->r->reads, rd, entry);
	rd->lcb(rd->arg, &ls);
	free(next);
	free(keys);
	free(lens);
	free(buf);
	read_free(rd);
}

/* The answer to the read of the range. */
static void
on_read_range(void *arg, const struct etcd_result *res)
{
	struct et_read *rd = arg;
	const Etcd__RangeResponse *rr = res->status == ETCD_OK ?
	    (const Etcd__RangeResponse *)(const void *)res->msg : NULL;
	if (rr == NULL) {
		read_answer(rd, res->why != NULL ? res->why : "etcd is not reachable", true);
		return;
	}
	if (rd->lcb != NULL)
		list_page(rd, rr);
	else
		read_holders(rd, rr);
}

/* rr, the range of rd's key as it was at rev, a put of it: if the put made
 * its etcd key the first exclusive holder (a grant, or a PROCLAIM), tell
 * the key's observers that leader. */
static void
tell_put(struct et_read *rd, const Etcd__RangeResponse *rr, int64_t rev)
{
	struct et *r = rd->r;
	struct et_value v;
	if (rr == NULL || rr->n_kvs == 0 || rr->kvs[0]->mod_revision != rev ||
	    !rd->k->watched || r->destroying)
		return;
	et_value_parse(rr->kvs[0]->value.data, rr->kvs[0]->value.len, &v);
	if (v.kind == 's' || v.kind == 'n')
		return;
	struct be_leader l = { .status = BE_OK, .version = (uint64_t)rev, .holders = 1,
		.mode = LOCK_EXCLUSIVE, .value = v.value, .valuelen = v.valuelen,
		.term = v.fence != 0 ? v.fence : (uint64_t)rev << ET_SEQ_BITS };
	r->be->up.changed(r->be->up.arg, rd->k->name, rd->k->len, &l);
}

/* The answer to a read of the watch's: the puts' leaders, then the range
 * at the watch's revision. */
static void
on_read_watched(void *arg, const struct etcd_result *res)
{
	struct et_read *rd = arg;
	const Etcd__TxnResponse *t = res->status == ETCD_OK ?
	    (const Etcd__TxnResponse *)(const void *)res->msg : NULL;
	size_t n = t != NULL ? t->n_responses : 0;
	const Etcd__RangeResponse **rr = xcalloc(n > 0 ? n : 1, sizeof(*rr));
	for (size_t i = 0; i < n; i++)
		if (t->responses[i]->response_case == ETCD__RESPONSE_OP__RESPONSE_RESPONSE_RANGE)
			rr[i] = t->responses[i]->response_range;
	if (n != rd->nputs + 1 || rr[n - 1] == NULL) {
		free(rr);
		/* compacted away, or etcd is not reachable: read as it is now */
		read_answer(rd, res->why != NULL ? res->why : "no range in the answer", true);
		return;
	}
	for (size_t i = 0; i < rd->nputs; i++)
		tell_put(rd, rr[i], rd->puts[i]);
	read_holders(rd, rr[n - 1]);
	free(rr);
}

/* A range request of rd's key's range (end: its end, the caller's) at rev
 * (0: now), into *req. */
static void
range_init(Etcd__RangeRequest *req, const struct et_read *rd, char *end, int64_t rev)
{
	etcd__range_request__init(req);
	req->key = et_bin(rd->path, rd->pathlen);
	req->range_end = et_bin(end, rd->pathlen);
	req->sort_order = ETCD__RANGE_REQUEST__SORT_ORDER__ASCEND;
	req->sort_target = ETCD__RANGE_REQUEST__SORT_TARGET__CREATE;
	req->revision = rev;
}

void
et_leader_watched(struct et *r, struct et_key *k)
{
	if (k->reading) {
		k->read_again = true;
		return;
	}
	struct et_read *rd = xcalloc(1, sizeof(*rd));
	k->reading = true;
	k->read_again = false;
	k->refs++;
	rd->r = r;
	rd->k = k;
	rd->path = xmemdup(k->path, k->pathlen);
	rd->pathlen = k->pathlen;
	rd->at = r->watch_rev;
	/* the puts up to the watch's revision, the last ET_READ_PUTS */
	rd->nputs = k->nputs > ET_READ_PUTS ? ET_READ_PUTS : k->nputs;
	rd->puts = xcalloc(rd->nputs + 1, sizeof(*rd->puts));
	if (rd->nputs > 0)
		memcpy(rd->puts, k->puts + (k->nputs - rd->nputs), rd->nputs * sizeof(*rd->puts));
	free(k->puts);
	k->puts = NULL;
	k->nputs = 0;
	TAILQ_INSERT_TAIL(&r->reads, rd, entry);

	size_t n = rd->nputs + 1;
	Etcd__RangeRequest *ranges = xcalloc(n, sizeof(*ranges));
	Etcd__RequestOp *rops = xcalloc(n, sizeof(*rops));
	Etcd__RequestOp **ops = xcalloc(n, sizeof(*ops));
	char *end = xmemdup(rd->path, rd->pathlen);
	Etcd__TxnRequest txn;
	end[rd->pathlen - 1]++;
	for (size_t i = 0; i < n; i++) {
		range_init(&ranges[i], rd, end, i < rd->nputs ? rd->puts[i] : rd->at);
		if (i < rd->nputs)
			ranges[i].limit = 1;	/* the first by create revision */
		etcd__request_op__init(&rops[i]);
		rops[i].request_case = ETCD__REQUEST_OP__REQUEST_REQUEST_RANGE;
		rops[i].request_range = &ranges[i];
		ops[i] = &rops[i];
	}
	etcd__txn_request__init(&txn);
	txn.success = ops;
	txn.n_success = n;
	etcd_call(r->cli, ETCD_TXN, &txn.base, on_read_watched, rd);
	free(end);
	free(ops);
	free(rops);
	free(ranges);
}

/* Read key's range for cb or hcb. */
static void
read_key(struct et *r, const char *key, size_t keylen, be_leader_cb *cb, be_holders_cb *hcb,
    void *arg)
{
	struct et_read *rd = xcalloc(1, sizeof(*rd));
	Etcd__RangeRequest req;
	char *end;
	rd->r = r;
	rd->cb = cb;
	rd->hcb = hcb;
	rd->arg = arg;
	rd->path = et_key_path(r, key, keylen, &rd->pathlen);
	TAILQ_INSERT_TAIL(&r->reads, rd, entry);
	end = xmemdup(rd->path, rd->pathlen);
	end[rd->pathlen - 1]++;
	range_init(&req, rd, end, 0);
	/* the client answers from the loop, also when etcd is down */
	etcd_call(r->cli, ETCD_RANGE, &req.base, on_read_range, rd);
	free(end);
}

void
et_leader(struct backend *be, const char *key, size_t keylen, be_leader_cb *cb, void *arg)
{
	read_key(be->priv, key, keylen, cb, NULL, arg);
}

void
et_holders(struct backend *be, const char *key, size_t keylen, be_holders_cb *cb, void *arg)
{
	read_key(be->priv, key, keylen, NULL, cb, arg);
}

/* A cursor that et_list did not make: answered from the loop. */
static void
list_refused(evutil_socket_t fd, short what, void *arg)
{
	struct et_read *rd = arg;
	struct be_list ls = { .status = BE_ERROR, .why = "invalid cursor", .bad_cursor = 1 };
	(void)fd;
	(void)what;
	rd->lcb(rd->arg, &ls);
	read_free(rd);
}

void
et_list(struct backend *be, const char *cursor, size_t count, be_list_cb *cb, void *arg)
{
	struct et *r = be->priv;
	struct et_read *rd = xcalloc(1, sizeof(*rd));
	size_t plen = strlen(r->set->key_prefix), clen = strlen(cursor);
	Etcd__RangeRequest req;
	rd->r = r;
	rd->lcb = cb;
	rd->arg = arg;
	rd->prefixlen = plen;
	/* from the prefix, or from the cursor: an etcd key under it, in hex */
	if (strcmp(cursor, "0") == 0) {
		rd->path = xmemdup(r->set->key_prefix, plen);
		rd->pathlen = plen;
	} else {
		bool ok = clen % 2 == 0 && clen / 2 > plen;
		rd->path = xmalloc(clen / 2 + 1);
		rd->pathlen = clen / 2;
		for (size_t i = 0; ok && i < rd->pathlen; i++) {
			int hi = hex_val(cursor[2 * i]), lo = hex_val(cursor[2 * i + 1]);
			ok = hi >= 0 && lo >= 0;
			rd->path[i] = (char)(hi << 4 | lo);
		}
		if (!ok || memcmp(rd->path, r->set->key_prefix, plen) != 0) {
			struct timeval now = { 0, 0 };
			if (event_base_once(be->base, -1, EV_TIMEOUT, list_refused, rd, &now) != 0)
				list_refused(-1, 0, rd);
			return;
		}
	}
	/* up to the end of the prefix's range */
	char *end = xmalloc(plen + 1);
	size_t endlen = plen;
	memcpy(end, r->set->key_prefix, plen);
	while (endlen > 0 && (unsigned char)end[endlen - 1] == 0xff)
		endlen--;
	if (endlen > 0) {
		end[endlen - 1]++;
	} else {
		end[0] = '\0';	/* every key from the start on */
		endlen = 1;
	}
	TAILQ_INSERT_TAIL(&r->reads, rd, entry);
	etcd__range_request__init(&req);
	req.key = et_bin(rd->path, rd->pathlen);
	req.range_end = et_bin(end, endlen);
	req.limit = (int64_t)count;
	req.keys_only = 1;
	etcd_call(r->cli, ETCD_RANGE, &req.base, on_read_range, rd);
	free(end);
}

void
et_leader_destroy(struct et *r)
{
	struct et_read *rd;
	while ((rd = TAILQ_FIRST(&r->reads)) != NULL)
		read_answer(rd, "shutting down", true);
}
