/*
 * be_etcd_force — UNLOCK FORCE through any daemon on etcd (ops->force), and
 * how the holder's daemon hears of it.
 *
 * The daemon that breaks a key reads its range and, in one Txn guarded by
 * each holder's mod revision, puts every holder's key that another daemon
 * took with its value broken ("!<length>:<by>", its fence written, its
 * lease kept): a broken key still holds, so no waiter is granted. The same
 * Txn puts the key's signal key, "<prefix><escaped key>!" (outside every
 * lock's range), which a second request deletes: every daemon's watch
 * carries deletes, so the holder's daemon hears at once. It reads the
 * range, marks its entries whose key is broken, and has the lock table
 * renew their holdings: the renewal answers BE_NOTOWNER, forced, and the
 * lock table tells the holder, then releases the lease, whose key's delete
 * lets the next waiter in.
 */
#include "be_etcd_core.h"
#include "be_etcd_force.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "etcd.h"
#include "log.h"
#include "xmalloc.h"

#define ET_FORCE_TRIES 3	/* reads of the range when holders keep changing */

static void force_read(struct et_op *op);

/* The signal key of a range "<prefix><escaped>/": "<prefix><escaped>!",
 * NUL-terminated; the caller frees it. */
static char *
signal_key(const char *path, size_t pathlen)
{
	char *s = xmemdup(path, pathlen);
	s[pathlen - 1] = '!';
	return s;
}

/* Whether who (whoslen bytes) was taken through the daemon of instance id
 * self ("w1 TAB <id> TAB ..."). */
static bool
who_self(const char *who, size_t wholen, const char *self)
{
	size_t n = strlen(self);
	return who != NULL && wholen > 4 + n && memcmp(who, "w1\t", 3) == 0 &&
	    memcmp(who + 3, self, n) == 0 && who[3 + n] == '\t';
}

/* The signal's delete answered: the holders' daemons heard (or not). */
static void
on_force_signal(void *arg, const struct etcd_result *res)
{
	struct et_op *op = arg;
	et_op_landed(op);
	if (res->status != ETCD_OK) {
		et_op_answer(op, BE_ERROR, 0, 0, res->why != NULL ? res->why :
		    "the holders' daemons could not be woken");
		return;
	}
	et_op_answer(op, BE_OK, 0, 0, NULL);
}

/* The Txn answered: the holders broken, or some changed meanwhile (read
 * again). */
static void
on_force_txn(void *arg, const struct etcd_result *res)
{
	struct et_op *op = arg;
	const Etcd__TxnResponse *t = res->status == ETCD_OK ?
	    (const Etcd__TxnResponse *)(const void *)res->msg : NULL;
	et_op_landed(op);
	if (t == NULL) {
		op->rep.broken = 0;
		et_op_answer(op, BE_ERROR, 0, 0, res->why != NULL ? res->why :
		    "etcd is not reachable");
		return;
	}
	if (!t->succeeded) {
		op->rep.broken = 0;
		if (op->tries < ET_FORCE_TRIES) {
			force_read(op);
			return;
		}
		et_op_answer(op, BE_ERROR, 0, 0, "the key's holders kept changing");
		return;
	}
	size_t len;
	char *sig = signal_key(op->k->path, op->k->pathlen);
	len = strlen(sig);
	Etcd__DeleteRangeRequest del;
	etcd__delete_range_request__init(&del);
	del.key = et_bin(sig, len);
	et_op_call(op, ETCD_DELETE_RANGE, &del.base, on_force_signal);
	free(sig);
}

/* The key's range read: break every holder another daemon took. */
static void
on_force_range(void *arg, const struct etcd_result *res)
{
	struct et_op *op = arg;
	struct et *r = op->r;
	const Etcd__RangeResponse *rr = res->status == ETCD_OK ?
	    (const Etcd__RangeResponse *)(const void *)res->msg : NULL;
	et_op_landed(op);
	if (rr == NULL) {
		et_op_answer(op, BE_ERROR, 0, 0, res->why != NULL ? res->why :
		    "etcd is not reachable");
		return;
	}
	size_t n = rr->n_kvs, nb = 0;
	Etcd__Compare *cmp = xcalloc(n + 1, sizeof(*cmp));
	Etcd__Compare **cmps = xcalloc(n + 1, sizeof(*cmps));
	Etcd__PutRequest *put = xcalloc(n + 1, sizeof(*put));
	Etcd__RequestOp *rop = xcalloc(n + 1, sizeof(*rop));
	Etcd__RequestOp **ops = xcalloc(n + 1, sizeof(*ops));
	char **vals = xcalloc(n + 1, sizeof(*vals));
	for (size_t i = 0; i < n; i++) {
		const Etcd__KeyValue *kv = rr->kvs[i];
		struct et_value v;
		size_t len;
		if (!et_kv_holds(rr->kvs, n, i))
			continue;
		et_value_parse(kv->value.data, kv->value.len, &v);
		if (v.by != NULL || who_self(v.who, v.wholen, op->who))
			continue;	/* broken already, or this daemon's */
		vals[nb] = et_value_broken(&v, v.fence != 0 ? v.fence :
		    (uint64_t)kv->mod_revision << ET_SEQ_BITS, op->value, &len);
		etcd__compare__init(&cmp[nb]);
		cmp[nb].key = kv->key;
		cmp[nb].target = ETCD__COMPARE__COMPARE_TARGET__MOD;
		cmp[nb].result = ETCD__COMPARE__COMPARE_RESULT__EQUAL;
		cmp[nb].target_union_case = ETCD__COMPARE__TARGET_UNION_MOD_REVISION;
		cmp[nb].mod_revision = kv->mod_revision;
		cmps[nb] = &cmp[nb];
		etcd__put_request__init(&put[nb]);
		put[nb].key = kv->key;
		put[nb].value = et_bin(vals[nb], len);
		put[nb].ignore_lease = 1;	/* the holder's lease stays */
		etcd__request_op__init(&rop[nb]);
		rop[nb].request_case = ETCD__REQUEST_OP__REQUEST_REQUEST_PUT;
		rop[nb].request_put = &put[nb];
		ops[nb] = &rop[nb];
		nb++;
	}
	op->rep.broken = (unsigned)nb;
	if (nb == 0) {
		et_op_answer(op, BE_OK, 0, 0, NULL);
	} else {
		/* and the signal, on this daemon's lease: it goes with it */
		char *sig = signal_key(op->k->path, op->k->pathlen);
		Etcd__TxnRequest txn;
		etcd__put_request__init(&put[nb]);
		put[nb].key = et_bin(sig, strlen(sig));
		put[nb].lease = r->lease;
		etcd__request_op__init(&rop[nb]);
		rop[nb].request_case = ETCD__REQUEST_OP__REQUEST_REQUEST_PUT;
		rop[nb].request_put = &put[nb];
		ops[nb] = &rop[nb];
		etcd__txn_request__init(&txn);
		txn.compare = cmps;
		txn.n_compare = nb;
		txn.success = ops;
		txn.n_success = nb + 1;
		et_op_call(op, ETCD_TXN, &txn.base, on_force_txn);
		free(sig);
	}
	for (size_t i = 0; i < nb; i++)
		free(vals[i]);
	free(vals);
	free(ops);
	free(rop);
	free(put);
	free(cmps);
	free(cmp);
}

/* Read the range of op's key (its holders and waiters by create revision). */
static void
force_read(struct et_op *op)
{
	Etcd__RangeRequest req;
	char *end = xmemdup(op->k->path, op->k->pathlen);
	end[op->k->pathlen - 1]++;
	op->tries++;
	etcd__range_request__init(&req);
	req.key = et_bin(op->k->path, op->k->pathlen);
	req.range_end = et_bin(end, op->k->pathlen);
	req.sort_order = ETCD__RANGE_REQUEST__SORT_ORDER__ASCEND;
	req.sort_target = ETCD__RANGE_REQUEST__SORT_TARGET__CREATE;
	et_op_call(op, ETCD_RANGE, &req.base, on_force_range);
	free(end);
}

void
et_force(struct backend *be, const char *key, size_t keylen, const char *by,
    const char *self, be_cb *cb, void *arg)
{
	struct et *r = be->priv;
	struct et_op *op = et_op_new(r, EK_FORCE, key, keylen, cb, arg);
	op->value = xstrdup(by);
	op->valuelen = strlen(by);
	op->who = xstrdup(self);
	if (!etcd_up(r->cli)) {
		et_op_answer(op, BE_ERROR, 0, 0, "etcd is not reachable");
		return;
	}
	force_read(op);
}

/* ---- the holder's daemon ------------------------------------------------- */

/* The range read (op, an EK_FORCE op of the key that nobody waits for):
 * this daemon's holders whose key is broken are marked, and the lock table
 * renews the key's holdings, which tells them. */
static void
on_heard_range(void *arg, const struct etcd_result *res)
{
	struct et_op *op = arg;
	struct et *r = op->r;
	struct et_key *k = op->k;
	const Etcd__RangeResponse *rr = res->status == ETCD_OK ?
	    (const Etcd__RangeResponse *)(const void *)res->msg : NULL;
	bool any = false;
	et_op_landed(op);
	if (rr == NULL && !r->destroying) {
		char kb[LOG_KEY_BUF];
		log_warn("etcd: lock '%s' may have been broken through another daemon, but its "
		    "keys could not be read: %s", log_escape(kb, sizeof(kb), k->name, k->len, 0),
		    res->why != NULL ? res->why : "etcd is not reachable");
	}
	for (size_t i = 0; rr != NULL && i < rr->n_kvs; i++) {
		const Etcd__KeyValue *kv = rr->kvs[i];
		struct et_entry *e;
		struct et_value v;
		TAILQ_FOREACH(e, &k->entries, entry)
			if (e->state == E_HELD && !e->gone && e->forced_by == NULL &&
			    strlen(e->ekey) == kv->key.len &&
			    memcmp(e->ekey, kv->key.data, kv->key.len) == 0)
				break;
		if (e == NULL)
			continue;
		et_value_parse(kv->value.data, kv->value.len, &v);
		if (v.by == NULL)
			continue;
		e->forced_by = xmemdup(v.by, v.bylen);
		any = true;
	}
	if (any && !r->destroying)
		r->be->up.expire(r->be->up.arg, k->name, k->len);
	et_op_answer(op, rr != NULL ? BE_OK : BE_ERROR, 0, 0, NULL);
}

bool
et_force_heard(struct et *r, const char *ekey, size_t len)
{
	size_t plen = strlen(r->set->key_prefix);
	if (len <= plen + 1 || ekey[len - 1] != '!' ||
	    memchr(ekey + plen, '/', len - plen) != NULL ||
	    memcmp(ekey, r->set->key_prefix, plen) != 0)
		return false;
	char *path = xmemdup(ekey, len);
	path[len - 1] = '/';
	struct et_key *k = et_key_find_path(r, path, len);
	struct et_entry *e = NULL;
	if (k != NULL)
		TAILQ_FOREACH(e, &k->entries, entry)
			if (e->state == E_HELD && !e->gone)
				break;
	if (e != NULL && !r->destroying) {
		/* an op (nobody waits for it), so that shutting down frees it */
		struct et_op *op = et_op_new(r, EK_FORCE, k->name, k->len, NULL, NULL);
		Etcd__RangeRequest req;
		char *end = xmemdup(path, len);
		end[len - 1]++;
		etcd__range_request__init(&req);
		req.key = et_bin(path, len);
		req.range_end = et_bin(end, len);
		et_op_call(op, ETCD_RANGE, &req.base, on_heard_range);
		free(end);
	}
	free(path);
	return true;
}
