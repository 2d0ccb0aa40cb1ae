/*
 * be_etcd — leases in an etcd v3 cluster, through its gRPC API (etcd.c).
 *
 * The recipe is etcd's concurrency.Mutex, extended to shared locks and
 * semaphores. A lock key K is the range of etcd keys "<prefix><K escaped>/"
 * (bytes outside [A-Za-z0-9._:-] written %XX, so no key's range holds
 * another's); each holder or waiting head of a daemon's local queue has one
 * etcd key "<range><token>" in it, whose value is its kind ("x0" exclusive,
 * "s0" shared, "n<limit>" semaphore). The keys are ranked by create
 * revision: an exclusive key holds when it is first, a shared one when no
 * key before it is exclusive (the read-write recipe), a semaphore's when
 * fewer than its limit are before it. An acquire is one Txn: put the key
 * (a put keeps the create revision of a key that exists, so a waiter keeps
 * its place) and read the range. When the key does not hold yet, the
 * acquire answers BE_BUSY and the key stays in etcd, waiting for the delete
 * of the one key before it that stands in its way (any key before it, for a
 * semaphore, matched by name and revision); one prefix watch stream per
 * daemon (deletes only) reports the deletes, and the lock table's queue is woken
 * and asks again, taking over the waiting key even when its first waiter
 * has left (the key keeps the daemon's place; see claim below).
 *
 * Leases: the keys of session-bound locks and of every waiting key are on
 * one lease of the daemon (backend.lease_ttl_ms), granted at start and kept
 * alive every third of its TTL; a daemon that dies loses them all when it
 * ends. The lease is valid until the send time of the last keepalive that
 * etcd answered plus the TTL it answered, on this host's clock; renewals of
 * bound holdings are answered from that, so a lease that cannot be kept
 * alive makes the lock table declare its holdings lost before etcd can have
 * expired it. If etcd says the lease is gone, every holding on it is told
 * it is no longer the owner (BE_NOTOWNER through the next renewal, which
 * up.expire asks for at once) and a new lease is granted. A DETACH lock's
 * key is on a lease of its own with the lock's TTL (etcd counts whole
 * seconds: rounded up), kept alive while the key waits and not after.
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
 * handoff: fence + 1, nothing written). Otherwise, and for the other kinds,
 * one Txn, guarded by the holder's create revision, deletes the holder's
 * key and puts the next local waiter's at the end of the range: it holds at
 * once when no other daemon's key waits, else the first of those holds (the
 * delete is what it waits for) and the local waiter waits its turn
 * (BE_BUSY). The key is never free in between, and no run of local handoffs
 * can pass a waiting daemon (a key put after the read came after the local
 * waiter, queued before it), so etcd needs no handoff limit.
 *
 * It owns its etcd keys, leases and the watch stream; it never blocks the
 * loop (names are resolved at start), never completes an operation from
 * inside the call that asked for it, and knows the lock table only through
 * the calls it gets and struct backend_up.
 */
#include "backend.h"
#include "be_etcd_internal.h"

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "backoff.h"
#include "clock.h"
#include "conf.h"
#include "etcd.h"
#include "hashtab.h"
#include "later.h"
#include "log.h"
#include "tls.h"
#include "xmalloc.h"

#define ET_BACKOFF_MIN_MS 100	/* first pause after a keepalive or grant failed */
#define ET_BACKOFF_MAX_MS 2000	/* longest such pause before jitter (and at most a
				 * quarter lease) */
#define ET_DELETE_RETRY_MS 1000	/* deletes that failed are sent again then */
#define ET_KIND_MAX 16		/* "x0", "s0", "n<limit>" and a NUL */
#define ET_SEQ_BITS 16		/* a fence is the grant's revision << this, plus
				 * the local handoffs since (fewer than 2^this) */
#define ET_WATCH_RETRY_MIN_MS 100	/* first pause before starting a lost watch again */
#define ET_WATCH_RETRY_MAX_MS 2000	/* longest such pause before jitter */

/* The settings of the backend (backend.* keys; see et_settings_table). */
struct et_settings {
	char **endpoints;		/* "host:port", tried in order */
	size_t nendpoints;		/* how many */
	char *key_prefix;		/* prefix of every etcd key dlockd uses */
	long long lease_ttl_ms;		/* the daemon's lease */
	long long request_timeout_ms;	/* a call without an answer by then fails */
	char *username;			/* NULL: no authentication */
	char *password;			/* its password */
	char *password_file;		/* where password was read from, or NULL */
	long long tls;			/* 1: connect with TLS */
	char *tls_ca_file;		/* CAs that sign etcd's certificates; NULL: the
					 * system's */
	char *tls_cert_file;		/* client certificate, or NULL */
	char *tls_key_file;		/* its key, or NULL */
	char *tls_server_name;		/* the name etcd's certificates must carry,
					 * NULL: each endpoint's host */
};

enum et_state {
	E_NEW,		/* its first put is on its way */
	E_WAITING,	/* in etcd, not holding: waits for a delete */
	E_HELD		/* holds */
};

struct et_key;

/* One etcd key of this daemon. */
struct et_entry {
	struct et_key *k;		/* its lock key */
	char token[TOKEN_LEN + 1];	/* the lock table's lease it stands for */
	char *ekey;			/* the etcd key, NUL-terminated */
	enum et_state state;
	enum lock_mode mode;		/* as last put */
	unsigned limit;
	int64_t create_rev;		/* its create revision, 0 until known */
	int64_t lease;			/* the lease it was last put with */
	bool own;			/* lease is its own (DETACH), not the daemon's */
	uint64_t own_until;		/* own: the lease is valid until then */
	uint64_t own_ttl_ms;		/* own: its TTL as granted */
	char *wait_key;			/* E_WAITING: the etcd key whose delete wakes it,
					 * NULL: any key before it */
	size_t wait_keylen;
	int64_t wait_rev;		/* E_WAITING: woken by the delete of the key with
					 * this create revision; -1: of any before it */
	bool busy;			/* an acquire of it is in flight */
	bool claimable;			/* in a wakeup: not asked for again yet */
	bool gone;			/* E_HELD: its key or lease is gone */
	bool leaving;			/* E_HELD: a handoff deletes its key */
	int64_t grant_rev;		/* E_HELD: the revision it was found holding at */
	unsigned seq;			/* E_HELD: local handoffs of its key since */
	TAILQ_ENTRY(et_entry) entry;	/* on k->entries */
};
TAILQ_HEAD(et_entry_list, et_entry);

/* A lock key with etcd keys of this daemon. */
struct et_key {
	struct hashtab_node node;	/* in r->keys, keyed by path */
	char *name;			/* the lock key (binary-safe) */
	size_t len;
	char *path;			/* "<prefix><escaped key>/" */
	size_t pathlen;
	int64_t last_delete;		/* revision of the last delete seen in its range */
	struct et_entry_list entries;	/* its etcd keys */
	unsigned refs;			/* operations in flight that use it */
};

enum et_kind { EK_ACQUIRE, EK_RELEASE, EK_RENEW, EK_TRANSFER, EK_DELETE, EK_WAKE };

struct et;

/* An operation of the lock table, or one of the backend's own. */
struct et_op {
	struct et *r;			/* the backend */
	enum et_kind kind;		/* what it is */
	be_cb *cb;			/* whom to tell, NULL for none */
	void *arg;
	struct et_key *k;		/* the lock key (a reference) */
	char token[TOKEN_LEN + 1];	/* the lease it is about (transfer: to's) */
	char from[TOKEN_LEN + 1];	/* transfer: from's */
	enum lock_mode mode;		/* acquire, transfer: the kind asked for */
	unsigned limit;
	bool detach;			/* acquire, renew, transfer: on a lease of its own */
	bool try_once;			/* acquire: a try, which leaves nothing behind */
	uint64_t ttl_ms;		/* the lease asked for */
	uint64_t t_call;		/* when the lock table called */
	uint64_t sent;			/* when the current request went out */
	int64_t lease;			/* an own lease granted for it, 0 none */
	int64_t put_lease;		/* the lease its Txn put the key on */
	uint64_t lease_until;		/* its validity */
	char *ekey;			/* EK_DELETE, EK_RELEASE: the etcd key */
	int64_t revoke;			/* EK_DELETE: a lease to revoke after, 0 none */
	struct be_reply rep;		/* answered: the answer */
	char why[160];			/* its sentence */
	bool in_flight;			/* a request of it is out */
	bool granting;			/* own_lease: a grant, not a keepalive, is out */
	TAILQ_ENTRY(et_op) entry;	/* on r->ops, r->waiting or r->deferred */
	struct later_item done;		/* answered: on r->done until it is given */
};
TAILQ_HEAD(et_op_list, et_op);

struct et {
	struct backend *be;		/* our backend */
	const struct et_settings *set;	/* its settings */
	struct etcd *cli;		/* the gateway client */
	struct hashtab *keys;		/* struct et_key by path */
	int64_t lease;			/* the daemon's lease, 0 none */
	uint64_t lease_until;		/* valid until then (clock_ms) */
	uint64_t lease_ttl_ms;		/* its TTL as etcd granted it */
	bool granting;			/* a grant is in flight */
	bool keeping;			/* a keepalive is in flight */
	uint64_t grant_sent;		/* when it was sent */
	uint64_t keep_sent;		/* when it was sent */
	struct backoff backoff;		/* pauses while etcd does not answer */
	struct event *ev_lease;		/* next keepalive or grant */
	int64_t watch_rev;		/* revision the watch stream has reached */
	bool watch_ready;		/* the stream is created */
	struct backoff watch_backoff;	/* pauses before starting it again */
	struct event *ev_watch;		/* starts it again */
	bool rewake;			/* wake every waiting key once it is */
	struct et_op_list ops;		/* operations with a request out */
	struct et_op_list waiting;	/* acquires waiting for the lease and watch */
	struct later *done;		/* answers to give from the loop */
	struct et_op_list deferred;	/* deletes to send again */
	struct event *ev_deferred;	/* sends r->deferred */
	uint64_t nrenewals;		/* keepalives etcd answered with a TTL */
	uint64_t nlost;			/* daemon leases lost */
	uint64_t nwakeups;		/* waiting keys woken by a delete */
	uint64_t nups;			/* times etcd came back */
	uint64_t nlocal;		/* handoffs done without a Txn */
	bool destroying;		/* et_destroy runs */
};

static void lease_schedule(struct et *r, uint64_t ms);
static void wake_now(struct et *r, struct et_key *k);
static void flush_waiting(struct et *r);
static void op_send(struct et_op *op);

/* ---- keys and entries ----------------------------------------------------- */

/* Whether byte c is written as itself in an etcd key. */
static bool
key_plain(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	    c == '.' || c == '_' || c == ':' || c == '-';
}

/* The lock key k's etcd range, "<prefix><escaped>/"; the caller frees it. */
static char *
key_path(const struct et *r, const char *name, size_t len, size_t *pathlen)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t plen = strlen(r->set->key_prefix), n = plen;
	char *p = xmalloc(plen + 3 * len + 2);
	memcpy(p, r->set->key_prefix, plen);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];
		if (key_plain(c)) {
			p[n++] = (char)c;
		} else {
			p[n++] = '%';
			p[n++] = hex[c >> 4];
			p[n++] = hex[c & 15];
		}
	}
	p[n++] = '/';
	p[n] = '\0';
	*pathlen = n;
	return p;
}

static struct et_key *
key_find_path(struct et *r, const char *path, size_t pathlen)
{
	struct hashtab_node *n = hashtab_find(r->keys, path, pathlen);
	return n != NULL ? (struct et_key *)(void *)n : NULL;
}

/* The lock key name's record, made if need be; a reference for the caller. */
static struct et_key *
key_get(struct et *r, const char *name, size_t len)
{
	size_t pathlen;
	char *path = key_path(r, name, len, &pathlen);
	struct et_key *k = key_find_path(r, path, pathlen);
	if (k != NULL) {
		free(path);
	} else {
		k = xcalloc(1, sizeof(*k));
		k->name = xmemdup(name, len);
		k->len = len;
		k->path = path;
		k->pathlen = pathlen;
		TAILQ_INIT(&k->entries);
		hashtab_insert(r->keys, &k->node, k->path, k->pathlen);
	}
	k->refs++;
	return k;
}

/* Drop a reference to k; k is freed once nothing refers to it. */
static void
key_put(struct et *r, struct et_key *k)
{
	assert(k->refs > 0);
	if (--k->refs > 0 || !TAILQ_EMPTY(&k->entries))
		return;
	hashtab_remove(r->keys, &k->node);
	free(k->name);
	free(k->path);
	free(k);
}

/* The entry of k that stands for token, or NULL. */
static struct et_entry *
entry_find(struct et_key *k, const char *token)
{
	struct et_entry *e;
	TAILQ_FOREACH(e, &k->entries, entry)
		if (strcmp(e->token, token) == 0)
			return e;
	return NULL;
}

/* A new entry of k (a reference is taken) for token, not in etcd yet. */
static struct et_entry *
entry_new(struct et_key *k, const char *token)
{
	struct et_entry *e = xcalloc(1, sizeof(*e));
	e->k = k;
	k->refs++;
	memcpy(e->token, token, TOKEN_LEN + 1);
	e->ekey = xasprintf("%s%s", k->path, token);
	e->state = E_NEW;
	TAILQ_INSERT_TAIL(&k->entries, e, entry);
	return e;
}

/* Forget e (its etcd key is deleted, or will be, by the caller). */
static void
entry_free(struct et *r, struct et_entry *e)
{
	struct et_key *k = e->k;
	TAILQ_REMOVE(&k->entries, e, entry);
	free(e->ekey);
	free(e->wait_key);
	free(e);
	key_put(r, k);
}

/* The value stored for a lease of mode: its kind. */
static void
kind_of(enum lock_mode mode, unsigned limit, char out[ET_KIND_MAX])
{
	switch (mode) {
	case LOCK_EXCLUSIVE: snprintf(out, ET_KIND_MAX, "x0"); break;
	case LOCK_SHARED: snprintf(out, ET_KIND_MAX, "s0"); break;
	case LOCK_SEMAPHORE: snprintf(out, ET_KIND_MAX, "n%u", limit); break;
	}
}

/* ---- requests ------------------------------------------------------------- */

/* Requests are built on the caller's stack: etcd_call packs them at once. */

/* The len bytes at p as a protobuf bytes field (not copied). */
static ProtobufCBinaryData
bin(const void *p, size_t len)
{
	return (ProtobufCBinaryData){ .len = len, .data = (uint8_t *)(uintptr_t)p };
}

/* A put of an etcd key, as one operation of a Txn. */
struct req_put {
	Etcd__RequestOp op;
	Etcd__PutRequest put;
	char kind[ET_KIND_MAX];
};

/* p: the put of ekey with kind mode/limit on lease. */
static Etcd__RequestOp *
req_put(struct req_put *p, const char *ekey, enum lock_mode mode, unsigned limit,
    int64_t lease)
{
	etcd__request_op__init(&p->op);
	etcd__put_request__init(&p->put);
	kind_of(mode, limit, p->kind);
	p->put.key = bin(ekey, strlen(ekey));
	p->put.value = bin(p->kind, strlen(p->kind));
	p->put.lease = lease;
	p->op.request_case = ETCD__REQUEST_OP__REQUEST_REQUEST_PUT;
	p->op.request_put = &p->put;
	return &p->op;
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
	p->range.key = bin(k->path, k->pathlen);
	p->range.range_end = bin(p->end, k->pathlen);
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
	p->del.key = bin(ekey, strlen(ekey));
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
	c->key = bin(key, len);
	if (range_end != NULL)
		c->range_end = bin(range_end, endlen);
	c->target = ETCD__COMPARE__COMPARE_TARGET__CREATE;
	c->result = ETCD__COMPARE__COMPARE_RESULT__EQUAL;
	c->target_union_case = ETCD__COMPARE__TARGET_UNION_CREATE_REVISION;
	c->create_revision = rev;
	return c;
}

/* Send a Txn for op: compares (ncmp of them), then ops (nops). */
static void op_call(struct et_op *op, enum etcd_method m, const ProtobufCMessage *req,
    etcd_cb *cb);

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
	op_call(op, ETCD_TXN, &txn.base, cb);
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

/* ---- completing operations ------------------------------------------------ */

/* Give an answer queued on r->done, from the loop, and free its op. */
static void
on_done(struct later_item *it)
{
	struct et_op *op = (struct et_op *)(void *)((char *)it - offsetof(struct et_op, done));
	struct et *r = op->r;

	if (op->kind == EK_ACQUIRE || op->kind == EK_TRANSFER) {
		/* its entry may be taken over by another acquire now */
		struct et_entry *e = entry_find(op->k, op->token);
		if (e != NULL)
			e->busy = false;
	}
	if (op->kind == EK_WAKE) {
		/* not while destroying: the lock table has gone first */
		if (!r->destroying)
			wake_now(r, op->k);
	} else if (op->cb != NULL) {
		op->rep.why = op->why[0] != '\0' ? op->why : NULL;
		op->cb(op->arg, &op->rep);
	}
	key_put(r, op->k);
	free(op->ekey);
	free(op);
}

/* Answer op (on no list) with st from the loop; op is freed after. */
static void
op_answer(struct et_op *op, enum be_status st, uint64_t fence, uint64_t valid_ms,
    const char *why)
{
	struct et *r = op->r;
	op->rep.status = st;
	op->rep.fence = fence;
	op->rep.valid_ms = st == BE_OK ? valid_ms : 0;
	snprintf(op->why, sizeof(op->why), "%s", why != NULL ? why : "");
	later_add(r->done, &op->done, on_done);
}

/* A new operation on the lock key of l (a reference is taken). */
static struct et_op *
op_new(struct et *r, enum et_kind kind, const char *key, size_t keylen, be_cb *cb, void *arg)
{
	struct et_op *op = xcalloc(1, sizeof(*op));
	op->r = r;
	op->kind = kind;
	op->cb = cb;
	op->arg = arg;
	op->k = key_get(r, key, keylen);
	op->t_call = clock_ms();
	return op;
}

/* Wake the lock table's queue of k from the loop. */
static void
wake_later(struct et *r, struct et_key *k)
{
	struct et_op *op = op_new(r, EK_WAKE, k->name, k->len, NULL, NULL);
	op_answer(op, BE_OK, 0, 0, NULL);
}

/* Send op's request req of method m; its answer goes to cb. */
static void
op_call(struct et_op *op, enum etcd_method m, const ProtobufCMessage *req, etcd_cb *cb)
{
	struct et *r = op->r;
	op->sent = clock_ms();
	op->in_flight = true;
	TAILQ_INSERT_TAIL(&r->ops, op, entry);
	/* the requests about one key reach etcd one after the other */
	etcd_call_lane(r->cli, op->k->node.hash, m, req, cb, op);
}

/* An answer to op's request arrived: it is not in flight any more. */
static void
op_landed(struct et_op *op)
{
	op->in_flight = false;
	TAILQ_REMOVE(&op->r->ops, op, entry);
}

/* Whether the daemon's lease can be relied on now. */
static bool
lease_ok(const struct et *r, uint64_t now)
{
	return r->lease != 0 && now < r->lease_until;
}

/* Whether acquires can be sent: etcd answers, the lease is valid and the
 * watch stream is created (so that no delete after the answer is missed). */
static bool
ready(const struct et *r)
{
	return etcd_up(r->cli) && lease_ok(r, clock_ms()) && r->watch_ready;
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
	struct et_op *op = op_new(r, cb != NULL ? EK_RELEASE : EK_DELETE, k->name, k->len, cb, arg);
	op->ekey = xstrdup(ekey);
	op->revoke = lease;
	if (!etcd_up(r->cli) && !r->destroying) {
		if (cb != NULL) {
			struct et_op *tell = op_new(r, EK_RELEASE, k->name, k->len, cb, arg);
			op->cb = NULL;
			op_answer(tell, BE_ERROR, 0, 0, "etcd is not reachable");
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
static void
on_deferred(evutil_socket_t fd, short what, void *arg)
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

/* Revoke lease (fire and forget). */
static void
revoke(struct et *r, int64_t lease)
{
	if (lease != 0) {
		Etcd__LeaseRevokeRequest req;
		etcd__lease_revoke_request__init(&req);
		req.id = lease;
		etcd_call(r->cli, ETCD_LEASE_REVOKE, &req.base, NULL, NULL);
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
	op_landed(op);
	if (res->status == ETCD_OK) {
		revoke(r, op->revoke);
		if (op->kind == EK_RELEASE && deleted)
			op_answer(op, BE_OK, 0, 0, NULL);
		else if (op->kind == EK_RELEASE)
			op_answer(op, BE_NOTOWNER, 0, 0, "the lock's etcd key was gone");
		else
			op_answer(op, BE_OK, 0, 0, NULL);
		return;
	}
	if (op->kind == EK_RELEASE) {
		struct et_op *tell = op_new(r, EK_RELEASE, op->k->name, op->k->len, op->cb, op->arg);
		op_answer(tell, BE_ERROR, 0, 0, res->why);
		op->cb = NULL;
		op->kind = EK_DELETE;
	}
	if (r->destroying) {
		op_answer(op, BE_ERROR, 0, 0, NULL);
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
	entry_free(r, e);
	key_put(r, k);
}

/* ---- the daemon's lease ----------------------------------------------------- */

/* The lease cannot be relied on any more: every entry on it is gone, the
 * lock table is asked to renew (and so to learn it), waiting keys are
 * forgotten (their queues try again, on the new lease), and a new lease is
 * granted. */
static void
lease_lost(struct et *r, const char *why)
{
	int64_t old = r->lease;
	struct hashtab_iter it;
	struct hashtab_node *n;

	if (old == 0)
		return;
	log_warn("etcd lease %llx lost: %s", (unsigned long long)old, why);
	r->nlost++;
	r->lease = 0;
	r->lease_until = 0;
	hashtab_iter_init(&it, r->keys);
	while ((n = hashtab_next(&it)) != NULL) {
		struct et_key *k = (struct et_key *)(void *)n;
		struct et_entry *e, *next;
		bool wake = false;
		k->refs++;
		for (e = TAILQ_FIRST(&k->entries); e != NULL; e = next) {
			next = TAILQ_NEXT(e, entry);
			if (e->own)
				continue;	/* on a lease of its own */
			if (e->state == E_HELD) {
				e->gone = true;
			} else if (!e->busy) {
				/* its key went with the lease (revoked below): the
				 * queue asks again, on the new lease */
				wake = true;
				entry_free(r, e);
			}
		}
		if (wake)
			wake_later(r, k);
		key_put(r, k);
	}
	revoke(r, old);	/* in case etcd still has it */
	r->be->up.expire(r->be->up.arg, NULL, 0);
	lease_schedule(r, 0);
}

static void on_grant(void *arg, const struct etcd_result *res);
static void on_keepalive(void *arg, const struct etcd_result *res);

/* Keep lease alive, telling cb (if not NULL). */
static void
keepalive(struct et *r, int64_t lease, etcd_cb *cb, void *arg)
{
	Etcd__LeaseKeepAliveRequest req;
	etcd__lease_keep_alive_request__init(&req);
	req.id = lease;
	etcd_call(r->cli, ETCD_LEASE_KEEPALIVE, &req.base, cb, arg);
}

/* Time for a keepalive, or for a grant when there is no lease. */
static void
on_lease_timer(evutil_socket_t fd, short what, void *arg)
{
	struct et *r = arg;
	uint64_t now = clock_ms();
	(void)fd;
	(void)what;
	if (r->lease != 0 && now >= r->lease_until)
		lease_lost(r, "it could not be kept alive in time");
	if (r->lease == 0) {
		if (!r->granting) {
			Etcd__LeaseGrantRequest req;
			etcd__lease_grant_request__init(&req);
			req.ttl = (int64_t)(((uint64_t)r->set->lease_ttl_ms + 999) / 1000);
			r->granting = true;
			r->grant_sent = now;
			etcd_call(r->cli, ETCD_LEASE_GRANT, &req.base, on_grant, r);
		}
	} else if (!r->keeping) {
		r->keeping = true;
		r->keep_sent = now;
		keepalive(r, r->lease, on_keepalive, r);
	}
	/* keep the own leases of waiting DETACH keys alive too */
	struct hashtab_iter it;
	struct hashtab_node *n;
	hashtab_iter_init(&it, r->keys);
	while ((n = hashtab_next(&it)) != NULL) {
		struct et_entry *e;
		TAILQ_FOREACH(e, &((struct et_key *)(void *)n)->entries, entry)
			if (e->own && e->state == E_WAITING)
				keepalive(r, e->lease, NULL, NULL);
	}
	flush_waiting(r);
	if (!ready(r)) {
		/* etcd does not answer, or no lease yet: try again, backing off */
		lease_schedule(r, backoff_next(&r->backoff));
	}
	else
		lease_schedule(r, r->lease_ttl_ms / 3);
}

/* The next keepalive (or grant) in ms. */
static void
lease_schedule(struct et *r, uint64_t ms)
{
	struct timeval tv = clock_tv(ms);
	if (r->destroying)
		return;
	evtimer_del(r->ev_lease);
	evtimer_add(r->ev_lease, &tv);
}

/* Send or fail the acquires waiting for the lease and the watch. */
static void
flush_waiting(struct et *r)
{
	struct et_op_list list;
	struct et_op *op;
	if (TAILQ_EMPTY(&r->waiting))
		return;
	TAILQ_INIT(&list);
	TAILQ_CONCAT(&list, &r->waiting, entry);
	while ((op = TAILQ_FIRST(&list)) != NULL) {
		TAILQ_REMOVE(&list, op, entry);
		if (ready(r))
			op_send(op);
		else if (etcd_up(r->cli) && (r->lease != 0 || r->granting) &&
		    clock_ms() - op->t_call < (uint64_t)r->set->request_timeout_ms)
			TAILQ_INSERT_TAIL(&r->waiting, op, entry);
		else {
			struct et_entry *e = entry_find(op->k, op->token);
			if (e != NULL) {
				e->busy = false;
				if (e->state == E_NEW)
					entry_free(r, e);
			}
			op_answer(op, BE_ERROR, 0, 0, etcd_up(r->cli) ?
			    "etcd did not grant a lease or start the watch in time" :
			    "etcd is not reachable");
		}
	}
}


/* The answer to the grant of the daemon's lease. */
static void
on_grant(void *arg, const struct etcd_result *res)
{
	struct et *r = arg;
	const Etcd__LeaseGrantResponse *g = res->status == ETCD_OK ?
	    (const Etcd__LeaseGrantResponse *)(const void *)res->msg : NULL;
	int64_t id = g != NULL ? g->id : 0, ttl = g != NULL ? g->ttl : 0;
	r->granting = false;
	if (id > 0 && ttl > 0) {
		r->lease = id;
		r->lease_ttl_ms = (uint64_t)ttl * 1000;
		r->lease_until = r->grant_sent + r->lease_ttl_ms;
		backoff_reset(&r->backoff);
		log_info("etcd lease %llx granted, TTL %lld s", (unsigned long long)id,
		    (long long)ttl);
		lease_schedule(r, r->lease_ttl_ms / 3);
	} else if (res->status != ETCD_DOWN) {
		log_warn("etcd did not grant a lease: %s", res->why != NULL ? res->why :
		    g != NULL && g->error != NULL && *g->error != '\0' ? g->error :
		    "no ID or TTL in its answer");
	}
	flush_waiting(r);
}

/* The answer to a keepalive of the daemon's lease: it is valid until the
 * keepalive's send time plus the TTL etcd answers; no TTL: it is gone. */
static void
on_keepalive(void *arg, const struct etcd_result *res)
{
	struct et *r = arg;
	const Etcd__LeaseKeepAliveResponse *ka;
	int64_t ttl;
	r->keeping = false;
	if (res->status != ETCD_OK || r->lease == 0)
		return;	/* the timer tries again; lease_until stays */
	ka = (const Etcd__LeaseKeepAliveResponse *)(const void *)res->msg;
	if (ka->id != r->lease)
		return;	/* an answer about a lease given up since */
	ttl = ka->ttl;
	if (ttl <= 0) {
		lease_lost(r, "etcd says it has expired");
		return;
	}
	r->nrenewals++;
	backoff_reset(&r->backoff);
	if (r->keep_sent + (uint64_t)ttl * 1000 > r->lease_until)
		r->lease_until = r->keep_sent + (uint64_t)ttl * 1000;
}

/* ---- the watch stream ----------------------------------------------------- */

/* The end of the prefix range of s (len bytes): the caller frees it. */
static char *
prefix_end(const char *s, size_t len, size_t *endlen)
{
	char *e = xmemdup(s, len);
	while (len > 0 && (unsigned char)e[len - 1] == 0xff)
		len--;
	if (len == 0) {
		e[0] = '\0';	/* every key */
		*endlen = 1;
		return e;
	}
	e[len - 1]++;
	*endlen = len;
	return e;
}

/* (Re)start the watch of every key under the prefix: deletes only, from
 * where it stopped. */
static void
watch_start(struct et *r)
{
	const char *p = r->set->key_prefix;
	size_t endlen;
	char *end = prefix_end(p, strlen(p), &endlen);
	Etcd__WatchCreateRequest__FilterType noput = ETCD__WATCH_CREATE_REQUEST__FILTER_TYPE__NOPUT;
	Etcd__WatchCreateRequest req;
	etcd__watch_create_request__init(&req);
	req.key = bin(p, strlen(p));
	req.range_end = bin(end, endlen);
	req.filters = &noput;
	req.n_filters = 1;
	if (r->watch_rev > 0)
		req.start_revision = r->watch_rev + 1;
	r->watch_ready = false;
	etcd_watch(r->cli, &req);
	free(end);
}


/* Wake every key with a waiting entry (after a gap in the stream). */
static void
wake_all(struct et *r)
{
	struct hashtab_iter it;
	struct hashtab_node *n;
	hashtab_iter_init(&it, r->keys);
	while ((n = hashtab_next(&it)) != NULL) {
		struct et_key *k = (struct et_key *)(void *)n;
		struct et_entry *e;
		TAILQ_FOREACH(e, &k->entries, entry)
			if (e->state == E_WAITING) {
				wake_later(r, k);
				break;
			}
	}
}

/* A delete in the range of a lock key of ours, at revision rev, of the
 * etcd key ekey (len bytes). The watch does not ask for the previous value
 * (prev_kv costs etcd a read per event): keys are told apart by name and by
 * revision, a delete at rev being of a key created before rev. */
static void
watch_delete(struct et *r, const char *ekey, size_t len, int64_t rev)
{
	const char *slash = memrchr(ekey, '/', len);
	struct et_key *k = slash != NULL ? key_find_path(r, ekey, (size_t)(slash - ekey) + 1) : NULL;
	struct et_entry *e;
	bool wake = false, expire = false;
	if (k == NULL)
		return;
	if (rev > k->last_delete)
		k->last_delete = rev;
	TAILQ_FOREACH(e, &k->entries, entry) {
		bool own = strlen(e->ekey) == len && memcmp(e->ekey, ekey, len) == 0;
		/* the key it waits for (a later one of the same name, put
		 * after it, ranks after this entry: waking is right), or, for a
		 * semaphore, any other (some after it: spurious, it asks again) */
		if (e->state == E_WAITING && (e->wait_key != NULL ?
		    e->wait_keylen == len && memcmp(e->wait_key, ekey, len) == 0 &&
		    rev > e->wait_rev : !own))
			wake = true;
		if (e->state == E_HELD && !e->gone && !e->leaving && own && rev > e->create_rev) {
			/* not by us: ours are forgotten before their delete. A
			 * delete of an older key of the same name (a waiter's,
			 * gone with a lost lease and put again since) may come
			 * after the answer that put this one: a stream started
			 * again from an older revision replays it late, at a
			 * revision before this key's create revision */
			e->gone = true;
			expire = true;
		}
	}
	if (wake) {
		r->nwakeups++;
		wake_later(r, k);
	}
	if (expire) {
		char kb[LOG_KEY_BUF];
		log_warn("etcd key of lock '%s' was deleted by someone else",
		    log_escape(kb, sizeof(kb), k->name, k->len, 0));
		r->be->up.expire(r->be->up.arg, k->name, k->len);
	}
}

/* One message of the watch stream, or NULL: the stream ended. */
static void
on_watch(void *arg, const Etcd__WatchResponse *res)
{
	struct et *r = arg;
	int64_t head;

	if (res == NULL) {
		/* start it again after a pause that grows while it keeps failing */
		struct timeval tv = clock_tv(backoff_next(&r->watch_backoff));
		r->watch_ready = false;
		if (!r->destroying) {
			evtimer_add(r->ev_watch, &tv);
			/* is etcd there at all? a keepalive tells at once */
			if (!r->keeping && !r->granting)
				lease_schedule(r, 0);
		}
		return;
	}
	backoff_reset(&r->watch_backoff);
	head = res->header != NULL ? res->header->revision : 0;
	if (res->canceled || res->compact_revision > 0) {
		/* the revision to resume from is compacted: read state anew */
		log_warn("etcd watch from revision %lld cancelled (compacted to %lld%s%s): "
		    "waiting locks look again", (long long)r->watch_rev + 1,
		    (long long)res->compact_revision, res->cancel_reason != NULL &&
		    *res->cancel_reason != '\0' ? "; " : "",
		    res->cancel_reason != NULL ? res->cancel_reason : "");
		r->watch_rev = 0;
		r->rewake = true;
		watch_start(r);
		return;
	}
	if (res->created) {
		if (r->watch_rev == 0)
			r->watch_rev = head;
		r->watch_ready = true;
		if (r->rewake) {
			r->rewake = false;
			wake_all(r);
		}
		flush_waiting(r);
		return;
	}
	for (size_t i = 0; i < res->n_events; i++) {
		const Etcd__Event *ev = res->events[i];
		int64_t rev;
		if (ev->kv == NULL)
			continue;
		rev = ev->kv->mod_revision;
		if (rev > r->watch_rev)
			r->watch_rev = rev;
		if (ev->type != ETCD__EVENT__EVENT_TYPE__DELETE || ev->kv->key.len == 0)
			continue;
		watch_delete(r, (const char *)ev->kv->key.data, ev->kv->key.len, rev);
	}
	if (res->n_events == 0 && head > r->watch_rev)
		r->watch_rev = head;	/* progress: nothing before head is missing */
}

/* Time to start the watch stream again, if etcd answers. */
static void
on_watch_timer(evutil_socket_t fd, short what, void *arg)
{
	struct et *r = arg;
	(void)fd;
	(void)what;
	if (etcd_up(r->cli) && !etcd_watching(r->cli))
		watch_start(r);
}

/* etcd came up or went down. */
static void
on_state(void *arg, bool up)
{
	struct et *r = arg;
	if (!up) {
		flush_waiting(r);
		return;
	}
	r->nups++;
	if (!etcd_watching(r->cli))
		watch_start(r);
	if (!r->keeping && !r->granting)
		lease_schedule(r, 0);
	flush_waiting(r);
	if (!TAILQ_EMPTY(&r->deferred)) {
		evtimer_del(r->ev_deferred);
		struct timeval tv = clock_tv(0);
		evtimer_add(r->ev_deferred, &tv);
	}
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
		if (kv->value.len != 2 || memcmp(kv->value.data, "s0", 2) != 0) {
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
	op_landed(op);
	if (res->status != ETCD_OK)
		delete_start(op->r, op->k, op->ekey, 0, NULL, NULL);
	op_answer(op, BE_BUSY, 0, 0, NULL);
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
		op_answer(op, BE_ERROR, 0, 0, "the etcd key was not there after its put");
		return;
	}
	if (!op->detach && op->put_lease != r->lease) {
		/* the daemon's lease was given up while the Txn was out: the key
		 * is on a lease that may end any time */
		entry_drop(r, e, NULL, NULL);
		op_answer(op, BE_ERROR, 0, 0, "the daemon's etcd lease was lost meanwhile");
		return;
	}
	if (e->own && e->lease != op->lease)
		revoke(r, e->lease);	/* it was on an own lease it leaves */
	e->create_rev = created;
	e->lease = op->detach ? op->lease : r->lease;
	e->own = op->detach;
	e->own_until = op->lease_until;
	e->own_ttl_ms = op->detach ? op->ttl_ms : 0;
	e->mode = op->mode;
	e->limit = op->limit;
	if (!holds && op->try_once) {
		/* a try leaves nothing behind: its key goes before the answer */
		struct req_delete d;
		Etcd__RequestOp *ops[1];
		free(op->ekey);
		op->ekey = xstrdup(e->ekey);
		entry_free(r, e);
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
		op_answer(op, BE_BUSY, 0, 0, NULL);
		if (k->last_delete > rev)
			wake_later(r, k);	/* a delete came before this answer */
		return;
	}
	valid = op_valid(op);
	if (valid == 0) {
		/* never grant on a lease that may have ended (etcd issue 9921) */
		entry_drop(r, e, NULL, NULL);
		op_answer(op, BE_ERROR, 0, 0, "the etcd lease ran out before the grant");
		return;
	}
	e->state = E_HELD;
	e->gone = false;
	e->grant_rev = rev;
	e->seq = 0;
	op_answer(op, BE_OK, (uint64_t)rev << ET_SEQ_BITS, valid, NULL);
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
		lease_lost(r, "etcd says it is not found");
	if (e != NULL && e->state == E_NEW) {
		/* a Txn is all or nothing: a refused one put nothing */
		if (res->status == ETCD_FAILED)
			entry_free(r, e);
		else
			entry_drop(r, e, NULL, NULL);
	}
	if (op->detach && op->lease != 0 && (e == NULL || e->lease != op->lease))
		revoke(r, op->lease);
	op_answer(op, BE_ERROR, 0, 0, res->why);
}

/* The answer to an acquire's Txn: put the key, read the range. */
static void
on_acquire_txn(void *arg, const struct etcd_result *res)
{
	struct et_op *op = arg;
	struct et_entry *e = entry_find(op->k, op->token);
	op_landed(op);
	if (res->status != ETCD_OK) {
		txn_failed(op, e, res);
		return;
	}
	if (!txn_of(res)->succeeded) {
		/* an exclusive try found the range taken: nothing was put */
		if (e != NULL && e->state == E_NEW)
			entry_free(op->r, e);
		op_answer(op, BE_BUSY, 0, 0, NULL);
		return;
	}
	if (e == NULL) {
		/* released meanwhile: what was put goes too */
		delete_start(op->r, op->k, op->ekey, 0, NULL, NULL);
		op_answer(op, BE_ERROR, 0, 0, "released while being acquired");
		return;
	}
	entry_placed(op, e, txn_range(txn_of(res), 1), txn_revision(txn_of(res)));
}

/* Send an acquire's Txn. */
static void
acquire_txn(struct et_op *op)
{
	struct et *r = op->r;
	struct et_entry *e = entry_find(op->k, op->token);
	struct req_put put;
	struct req_range range;
	Etcd__Compare cmp, *cmps[1];
	Etcd__RequestOp *ops[2];
	assert(e != NULL);
	free(op->ekey);
	op->ekey = xstrdup(e->ekey);
	op->put_lease = op->detach ? op->lease : r->lease;
	ops[0] = req_put(&put, e->ekey, op->mode, op->limit, op->put_lease);
	ops[1] = req_range(&range, op->k);
	/* an exclusive try puts its key only into an empty range */
	cmps[0] = cmp_created(&cmp, op->k->path, op->k->pathlen, range.end, op->k->pathlen, 0);
	op_txn(op, cmps, op->try_once && op->mode == LOCK_EXCLUSIVE && e->state == E_NEW ? 1 : 0,
	    ops, 2, on_acquire_txn);
	req_range_done(&range);
}

static void transfer_txn(struct et_op *op);
static void renew_own_txn(struct et_op *op);

/* The answer to the grant or keepalive of an op's own lease; then the
 * op's Txn. */
static void
on_own_lease(void *arg, const struct etcd_result *res)
{
	struct et_op *op = arg;
	struct et_entry *e = entry_find(op->k, op->kind == EK_TRANSFER ? op->from : op->token);
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
	op_landed(op);
	if (res->status != ETCD_OK) {
		txn_failed(op, op->kind == EK_ACQUIRE ? e : NULL, res);
		return;
	}
	if (ttl <= 0 || id <= 0) {
		/* a keepalive of a lease that is gone */
		if (op->kind == EK_RENEW) {
			if (e != NULL)
				e->gone = true;
			op_answer(op, BE_NOTOWNER, 0, 0, "the lock's etcd lease has expired");
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
			op_answer(op, BE_OK, 0, op_valid(op), NULL);
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
		op_call(op, ETCD_LEASE_KEEPALIVE, &req.base, on_own_lease);
	} else {
		Etcd__LeaseGrantRequest req;
		etcd__lease_grant_request__init(&req);
		req.ttl = (int64_t)((op->ttl_ms + 999) / 1000);
		op_call(op, ETCD_LEASE_GRANT, &req.base, on_own_lease);
	}
}

/* Send an acquire or transfer that was ready (or became ready). */
static void
op_send(struct et_op *op)
{
	struct et_entry *e = entry_find(op->k, op->token);
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
	struct et_entry *e = entry_find(k, token);
	if (e == NULL)
		TAILQ_FOREACH(e, &k->entries, entry)
			if (e->state == E_WAITING && !e->busy)
				break;
	if (e != NULL)
		memcpy(e->token, token, TOKEN_LEN + 1);
	else
		e = entry_new(k, token);
	e->claimable = false;
	return e;
}

static void
et_acquire(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct et *r = be->priv;
	struct et_op *op = op_new(r, EK_ACQUIRE, l->key, l->keylen, cb, arg);
	struct et_entry *e;
	memcpy(op->token, l->token, TOKEN_LEN + 1);
	op->mode = l->mode;
	op->limit = l->limit;
	op->ttl_ms = l->ttl_ms;
	op->detach = l->detached;
	op->try_once = l->try_once != 0;
	if (!etcd_up(r->cli)) {
		op_answer(op, BE_ERROR, 0, 0, "etcd is not reachable");
		return;
	}
	e = entry_claim(op->k, op->token);
	e->busy = true;
	if (ready(r))
		op_send(op);
	else
		TAILQ_INSERT_TAIL(&r->waiting, op, entry);
}

/* ---- releasing, renewing -------------------------------------------------- */

static void
et_release(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct et *r = be->priv;
	struct et_key *k = key_get(r, l->key, l->keylen);
	struct et_entry *e = entry_find(k, l->token);
	if (e != NULL) {
		entry_drop(r, e, cb, arg);
	} else {
		/* not known (an acquire whose answer was lost): its key, if any */
		char *ekey = xasprintf("%s%s", k->path, l->token);
		delete_start(r, k, ekey, 0, cb, arg);
		free(ekey);
	}
	key_put(r, k);
}

/* The answer to the Txn that moves a renewed DETACH key to a longer lease
 * of its own. */
static void
on_renew_own_txn(void *arg, const struct etcd_result *res)
{
	struct et_op *op = arg;
	struct et *r = op->r;
	struct et_entry *e = entry_find(op->k, op->token);
	op_landed(op);
	if (res->status != ETCD_OK) {
		revoke(r, op->lease);
		op_answer(op, BE_ERROR, 0, 0, res->why);
	} else if (!txn_of(res)->succeeded || e == NULL) {
		revoke(r, op->lease);
		if (e != NULL)
			e->gone = true;
		op_answer(op, BE_NOTOWNER, 0, 0, "the lock's etcd key is gone");
	} else {
		revoke(r, e->lease);
		e->lease = op->lease;
		e->own_until = op->lease_until;
		e->own_ttl_ms = op->ttl_ms;
		op_answer(op, BE_OK, 0, op_valid(op), NULL);
	}
}

/* Move a DETACH key to the new lease op->lease, if it is still ours. */
static void
renew_own_txn(struct et_op *op)
{
	struct et_entry *e = entry_find(op->k, op->token);
	if (e == NULL) {
		revoke(op->r, op->lease);
		op_answer(op, BE_NOTOWNER, 0, 0, "the lock's etcd key is gone");
		return;
	}
	struct req_put put;
	Etcd__Compare cmp, *cmps[] = { cmp_created(&cmp, e->ekey, strlen(e->ekey), NULL, 0,
	    e->create_rev) };
	Etcd__RequestOp *ops[] = { req_put(&put, e->ekey, e->mode, e->limit, op->lease) };
	op_txn(op, cmps, 1, ops, 1, on_renew_own_txn);
}

/*
 * A renewal. A session-bound key is on the daemon's lease, which is kept
 * alive apart: the answer is what is left of it. A DETACH key's own lease
 * is kept alive, or, for a longer TTL than it has, replaced by a longer
 * one (etcd cannot change a lease's TTL).
 */
static void
et_renew(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct et *r = be->priv;
	struct et_op *op = op_new(r, EK_RENEW, l->key, l->keylen, cb, arg);
	struct et_entry *e = entry_find(op->k, l->token);
	uint64_t now = op->t_call;
	memcpy(op->token, l->token, TOKEN_LEN + 1);
	op->ttl_ms = l->ttl_ms;
	op->detach = e != NULL && e->own;
	if (e == NULL || e->state != E_HELD || e->gone || (!e->own && e->lease != r->lease)) {
		/* the holding ends here: its entry goes (and its key, if any) */
		const char *why = e != NULL && !e->own && e->lease != r->lease ?
		    "the daemon's etcd lease was lost" : "the lock's etcd key is gone";
		if (e != NULL && e->state == E_HELD)
			entry_drop(r, e, NULL, NULL);
		op_answer(op, BE_NOTOWNER, 0, 0, why);
	} else if (!e->own) {
		if (!lease_ok(r, now))
			op_answer(op, BE_ERROR, 0, 0, "the etcd lease is not confirmed");
		else
			op_answer(op, BE_OK, 0, r->lease_until - now, NULL);
	} else if (!etcd_up(r->cli)) {
		op_answer(op, BE_ERROR, 0, 0, "etcd is not reachable");
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
	struct et_entry *from = entry_find(op->k, op->from);
	struct et_entry *to = entry_find(op->k, op->token);
	int64_t rev;
	op_landed(op);
	if (res->status != ETCD_OK) {
		txn_failed(op, to, res);
		return;
	}
	rev = txn_revision(txn_of(res));
	if (!txn_of(res)->succeeded) {
		/* from's key is gone: nothing was changed */
		if (from != NULL)
			entry_free(r, from);
		if (to != NULL)
			entry_free(r, to);
		if (op->detach)
			revoke(r, op->lease);
		op_answer(op, BE_NOTOWNER, 0, 0, "the lock's etcd key is gone");
		return;
	}
	if (to == NULL) {
		/* released meanwhile: what was put goes too */
		delete_start(r, op->k, op->ekey, 0, NULL, NULL);
		if (from != NULL)
			entry_free(r, from);
		op_answer(op, BE_ERROR, 0, 0, "released while being handed over");
		return;
	}
	/* from's key was deleted, to's put at the end of the range */
	if (from != NULL) {
		if (from->own)
			revoke(r, from->lease);
		entry_free(r, from);
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
	struct et_entry *from = entry_find(op->k, op->from), *to;
	int64_t lease = op->detach ? op->lease : r->lease;
	if (from == NULL || from->state != E_HELD || from->gone) {
		if (op->detach)
			revoke(r, op->lease);
		op_answer(op, BE_NOTOWNER, 0, 0, "the lock's etcd key is gone");
		return;
	}
	from->leaving = true;
	to = entry_new(op->k, op->token);
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
		    req_put(&put, to->ekey, op->mode, op->limit, lease), req_range(&range, op->k) };
		op_txn(op, cmps, 1, ops, 3, on_transfer_txn);
		req_range_done(&range);
	}
}

/* Whether from's key can go to an exclusive session lock without a Txn:
 * it holds, exclusive, on the daemon's lease, with fences left. */
static bool
local_handoff_ok(const struct et_op *op, const struct et_entry *from)
{
	return from != NULL && !op->detach && op->mode == LOCK_EXCLUSIVE &&
	    from->state == E_HELD && from->mode == LOCK_EXCLUSIVE && !from->gone &&
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
	struct et_entry *from = entry_find(op->k, op->from);
	const Etcd__RangeResponse *rr = res->status == ETCD_OK ?
	    (const Etcd__RangeResponse *)(const void *)res->msg : NULL;
	uint64_t valid;
	op_landed(op);
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
	op_answer(op, BE_OK, (uint64_t)from->grant_rev << ET_SEQ_BITS | from->seq, valid, NULL);
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
	op_call(op, ETCD_RANGE, &range.range.base, on_local_range);
	req_range_done(&range);
}

static void
et_transfer(struct backend *be, const struct be_lock *from, const struct be_lock *to,
    be_cb *cb, void *arg)
{
	struct et *r = be->priv;
	struct et_op *op = op_new(r, EK_TRANSFER, to->key, to->keylen, cb, arg);
	memcpy(op->token, to->token, TOKEN_LEN + 1);
	memcpy(op->from, from->token, TOKEN_LEN + 1);
	op->mode = to->mode;
	op->limit = to->limit;
	op->ttl_ms = to->ttl_ms;
	op->detach = to->detached;
	if (!etcd_up(r->cli) || (!op->detach && !lease_ok(r, op->t_call))) {
		op_answer(op, BE_ERROR, 0, 0, "etcd is not reachable");
		return;
	}
	if (local_handoff_ok(op, entry_find(op->k, op->from))) {
		local_handoff(op);
		return;
	}
	op_send(op);
}

/* The lock table waits for key no more: its waiting keys go. */
static void
et_withdraw(struct backend *be, const char *key, size_t keylen)
{
	struct et *r = be->priv;
	size_t pathlen;
	char *path = key_path(r, key, keylen, &pathlen);
	struct et_key *k = key_find_path(r, path, pathlen);
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
	key_put(r, k);
}

/* A delete this key's waiting entries waited for came: the lock table's
 * queue asks again, taking over the entries it still wants (entry_claim);
 * the others go. */
static void
wake_now(struct et *r, struct et_key *k)
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
	key_put(r, k);
}

/* ---- the backend ---------------------------------------------------------- */

static void
et_info(struct backend *be, struct evbuffer *out)
{
	struct et *r = be->priv;
	struct etcd_stats st;
	struct hashtab_iter it;
	struct hashtab_node *n;
	size_t held = 0, waiting = 0, deferred = 0, inflight = 0;
	uint64_t now = clock_ms();
	struct et_op *op;

	hashtab_iter_init(&it, r->keys);
	while ((n = hashtab_next(&it)) != NULL) {
		struct et_entry *e;
		TAILQ_FOREACH(e, &((struct et_key *)(void *)n)->entries, entry) {
			held += e->state == E_HELD;
			waiting += e->state == E_WAITING;
		}
	}
	TAILQ_FOREACH(op, &r->deferred, entry)
		deferred++;
	TAILQ_FOREACH(op, &r->ops, entry)
		inflight++;
	etcd_stats(r->cli, &st);
	evbuffer_add_printf(out,
	    "backend_endpoint:%s\r\nbackend_connected:%d\r\nbackend_reconnects_total:%llu\r\n"
	    "backend_endpoint_switches_total:%llu\r\nbackend_lease_id:%lld\r\n"
	    "backend_lease_ttl_ms:%llu\r\nbackend_lease_valid_ms:%llu\r\n"
	    "backend_watching:%d\r\nbackend_watch_revision:%lld\r\n"
	    "backend_requests_total:%llu\r\nbackend_request_failures_total:%llu\r\n"
	    "backend_inflight:%zu\r\nbackend_keys_held:%zu\r\nbackend_keys_waiting:%zu\r\n"
	    "backend_deferred_releases:%zu\r\nbackend_renewals_total:%llu\r\n"
	    "backend_lost_total:%llu\r\nbackend_wakeups_total:%llu\r\n"
	    "backend_watch_messages_total:%llu\r\nbackend_tls:%d\r\n"
	    "backend_streams:%llu\r\nbackend_local_handoffs_total:%llu\r\n",
	    etcd_endpoint(r->cli), etcd_up(r->cli),
	    (unsigned long long)(r->nups > 0 ? r->nups - 1 : 0),
	    (unsigned long long)st.switches, (long long)r->lease,
	    (unsigned long long)r->lease_ttl_ms,
	    (unsigned long long)(lease_ok(r, now) ? r->lease_until - now : 0),
	    r->watch_ready, (long long)r->watch_rev, (unsigned long long)st.calls,
	    (unsigned long long)st.failures, inflight, held, waiting, deferred,
	    (unsigned long long)r->nrenewals, (unsigned long long)r->nlost,
	    (unsigned long long)r->nwakeups, (unsigned long long)st.messages, r->set->tls != 0,
	    (unsigned long long)st.streams, (unsigned long long)r->nlocal);
}

static const char *
et_state(struct backend *be)
{
	struct et *r = be->priv;
	return etcd_up(r->cli) && lease_ok(r, clock_ms()) ? "connected" : "disconnected";
}

/* Why LOCK answers -BACKEND now, in a few words: the endpoint and why it is
 * down, or the lease or watch not there yet. */
static const char *
et_problem(struct backend *be, char *buf, size_t len)
{
	struct et *r = be->priv;
	const char *down = etcd_why_down(r->cli);
	if (down != NULL)
		snprintf(buf, len, "etcd %s", down);
	else if (!lease_ok(r, clock_ms()))
		snprintf(buf, len, "no etcd lease yet");
	else if (!r->watch_ready)
		snprintf(buf, len, "the etcd watch is not started yet");
	else
		return NULL;
	return buf;
}

/* Releases in flight or kept for later: shutdown waits for them. */
static size_t
et_pending(struct backend *be)
{
	struct et *r = be->priv;
	struct et_op *op;
	size_t n = 0;
	TAILQ_FOREACH(op, &r->ops, entry)
		n += op->kind == EK_RELEASE || op->kind == EK_DELETE;
	/* the deletes kept for later wait for etcd: not while it is down (the
	 * daemon's lease takes the keys with it) */
	if (etcd_up(r->cli))
		TAILQ_FOREACH(op, &r->deferred, entry)
			n++;
	return n;
}

/* Set up be->priv: resolve the endpoints (start-up may block), grant the
 * daemon's lease and start the watch stream. */
static int
et_create(struct backend *be)
{
	const struct et_settings *set = be->settings;
	struct et *r = xcalloc(1, sizeof(*r));
	struct etcd_options o = {
		.endpoints = set->endpoints,
		.nendpoints = set->nendpoints,
		.request_timeout_ms = (uint64_t)set->request_timeout_ms,
		.username = set->username,
		.password = set->password,
	};
	struct etcd_hooks h = { .state = on_state, .watch = on_watch, .arg = r };
	struct tls_client *tls = NULL;

	if (set->tls) {
		char why[512];
		if ((tls = tls_client_create(set->tls_ca_file, set->tls_cert_file,
		    set->tls_key_file, why, sizeof(why))) == NULL) {
			log_error("etcd backend: TLS: %s", why);
			free(r);
			return -1;
		}
		o.tls = tls;
		o.tls_server_name = set->tls_server_name;
	}

	r->be = be;
	r->set = set;
	TAILQ_INIT(&r->ops);
	TAILQ_INIT(&r->waiting);
	TAILQ_INIT(&r->deferred);
	r->cli = etcd_create(be->base, &o, &h);
	tls_client_unref(tls);	/* the client holds its own reference */
	if (r->cli == NULL) {
		free(r);
		return -1;
	}
	r->keys = hashtab_create(64);
	r->ev_lease = evtimer_new(be->base, on_lease_timer, r);
	r->done = later_create(be->base);
	r->ev_deferred = evtimer_new(be->base, on_deferred, r);
	r->ev_watch = evtimer_new(be->base, on_watch_timer, r);
	backoff_init(&r->watch_backoff, ET_WATCH_RETRY_MIN_MS, ET_WATCH_RETRY_MAX_MS);
	/* at most a quarter lease, so that a few tries fit in one */
	backoff_init(&r->backoff, ET_BACKOFF_MIN_MS,
	    (uint64_t)set->lease_ttl_ms / 4 < ET_BACKOFF_MAX_MS ?
	    (uint64_t)set->lease_ttl_ms / 4 : ET_BACKOFF_MAX_MS);
	if (r->ev_lease == NULL || r->ev_deferred == NULL || r->ev_watch == NULL)
		log_fatal("out of memory (the etcd backend)");
	be->priv = r;
	lease_schedule(r, 0);
	if (set->lease_ttl_ms < 3 * set->request_timeout_ms)
		log_warn("etcd backend: lease_ttl_ms %lld is less than three request timeouts "
		    "(%lld ms): a keepalive that gets no answer may cost the lease",
		    set->lease_ttl_ms, 3 * set->request_timeout_ms);
	log_info("etcd backend: %s%s%s, key prefix '%s', lease TTL %lld ms",
	    set->endpoints[0], set->nendpoints > 1 ? " (and others in order)" : "",
	    set->tls ? " over TLS" : "", set->key_prefix, set->lease_ttl_ms);
	return 0;
}

/* Stop the client (its calls in flight are dropped), complete every
 * operation with BE_ERROR, forget the keys (their lease ends in etcd). */
static void
et_destroy(struct backend *be)
{
	struct et *r = be->priv;
	struct et_op *op;
	struct hashtab_iter it;
	struct hashtab_node *n;

	r->destroying = true;
	etcd_destroy(r->cli);
	while ((op = TAILQ_FIRST(&r->ops)) != NULL) {
		op_landed(op);
		op_answer(op, BE_ERROR, 0, 0, "shutting down");
	}
	while ((op = TAILQ_FIRST(&r->waiting)) != NULL) {
		TAILQ_REMOVE(&r->waiting, op, entry);
		op_answer(op, BE_ERROR, 0, 0, "shutting down");
	}
	while ((op = TAILQ_FIRST(&r->deferred)) != NULL) {
		TAILQ_REMOVE(&r->deferred, op, entry);
		op_answer(op, BE_ERROR, 0, 0, "shutting down");
	}
	later_run(r->done);
	hashtab_iter_init(&it, r->keys);
	while ((n = hashtab_next(&it)) != NULL) {
		struct et_key *k = (struct et_key *)(void *)n;
		struct et_entry *e;
		hashtab_remove(r->keys, n);
		while ((e = TAILQ_FIRST(&k->entries)) != NULL) {
			TAILQ_REMOVE(&k->entries, e, entry);
			free(e->ekey);
			free(e->wait_key);
			free(e);
		}
		free(k->name);
		free(k->path);
		free(k);
	}
	hashtab_destroy(r->keys);
	event_free(r->ev_lease);
	later_destroy(r->done);
	event_free(r->ev_deferred);
	event_free(r->ev_watch);
	free(r);
	be->priv = NULL;
}

/* ---- settings -------------------------------------------------------------- */

#define ET_PORT 2379			/* the port of an endpoint that gives none */
#define ET_SET(field) offsetof(struct et_settings, field)

/* The keys under "backend." that this backend reads, into struct et_settings. */
static const struct conf_setting et_settings_table[] = {
	{ .name = "endpoints", .type = CONF_SERVERLIST, .off = ET_SET(endpoints),
	  .count = ET_SET(nendpoints), .def = ET_PORT, .defstr = "127.0.0.1:2379" },
	{ .name = "key_prefix", .type = CONF_SHORTSTR, .off = ET_SET(key_prefix), .max = 128,
	  .defstr = "dlock/" },
	{ .name = "lease_ttl_ms", .type = CONF_INT, .off = ET_SET(lease_ttl_ms),
	  .min = 2000, .max = 3600000, .def = 10000 },
	{ .name = "request_timeout_ms", .type = CONF_INT, .off = ET_SET(request_timeout_ms),
	  .min = 10, .max = 600000, .def = 2000 },
	{ .name = "username", .type = CONF_STR, .off = ET_SET(username) },
	{ .name = "password", .type = CONF_SECRET, .off = ET_SET(password) },
	{ .name = "password_file", .type = CONF_SECRET_FILE, .off = ET_SET(password_file),
	  .pair = "password" },
	{ .name = "tls.enabled", .type = CONF_BOOL, .off = ET_SET(tls), .def = 0 },
	{ .name = "tls.ca_file", .type = CONF_PATH, .off = ET_SET(tls_ca_file) },
	{ .name = "tls.cert_file", .type = CONF_PATH, .off = ET_SET(tls_cert_file) },
	{ .name = "tls.key_file", .type = CONF_PATH, .off = ET_SET(tls_key_file) },
	{ .name = "tls.server_name", .type = CONF_STR, .off = ET_SET(tls_server_name) },
};

/* dlockd -t and start-up: the TLS files go together and load. */
static void
et_check(struct conf *c, const void *settings, int deep)
{
	const struct et_settings *set = settings;
	if ((set->tls_cert_file == NULL) != (set->tls_key_file == NULL))
		(void)conf_setting_error(c, set->tls_cert_file != NULL ? "backend.tls.cert_file" :
		    "backend.tls.key_file", "'backend.tls.cert_file' and 'backend.tls.key_file' "
		    "go together (a client certificate and its key)");
	if (deep && c->nerrors == 0 && set->tls) {
		char why[512];
		/* the CAs alone first, so that each file is named where it is set */
		struct tls_client *tls = tls_client_create(set->tls_ca_file, NULL, NULL, why,
		    sizeof(why));
		if (tls == NULL) {
			(void)conf_setting_error(c, "backend.tls.ca_file", "TLS: %s", why);
			return;
		}
		tls_client_unref(tls);
		tls = tls_client_create(set->tls_ca_file, set->tls_cert_file, set->tls_key_file, why,
		    sizeof(why));
		if (tls == NULL)
			(void)conf_setting_error(c, "backend.tls.cert_file", "TLS: %s", why);
		tls_client_unref(tls);
	}
}

/* -b etcd://[user[:password]@]host[:port][,host[:port]...], or etcds://
 * for TLS (verified against the system's CAs unless backend.tls says
 * otherwise): port 2379 when left out; user and password may hold %XX
 * escapes. The URL gives the endpoints, the credentials (none when it has
 * none) and whether TLS is on. 1 if url is not an etcd URL; else 0, or -1
 * with *why a sentence that never holds the password. */
static int
et_parse_url(const char *url, backend_url_set *set, void *arg, const char **why)
{
	bool tls = strncasecmp(url, "etcds://", 8) == 0;
	const char *info = url + (tls ? strlen("etcds://") : strlen("etcd://")), *s;
	char *user = NULL, *pw = NULL;
	if (!tls && strncasecmp(url, "etcd://", 7) != 0)
		return 1;
	*why = NULL;
	if (conf_url_userinfo(info, &user, &pw, &s, why) < 0) {
		/* a bad password after an empty user name: the name is told */
		if (*info == ':')
			*why = "the user name is empty";
		return -1;
	}
	if (user != NULL && *user == '\0')
		*why = "the user name is empty";
	if (*why == NULL && strpbrk(s, "/?#") != NULL)
		*why = "a path or query is not supported (etcd://host:port[,host:port...])";
	if (*why == NULL && *s == '\0')
		*why = "the host is missing";
	if (*why == NULL) {
		set(arg, "endpoints", s);
		set(arg, "username", user != NULL ? user : "");
		set(arg, "password", pw != NULL ? pw : "");
		set(arg, "password_file", "");
		set(arg, "tls.enabled", tls ? "true" : "false");
	}
	if (pw != NULL)
		explicit_bzero(pw, strlen(pw));
	free(pw);
	free(user);
	return *why == NULL ? 0 : -1;
}

const struct backend_ops be_etcd_ops = {
	.name = "etcd",
	.local_leases = 0,
	.settings = et_settings_table,
	.nsettings = sizeof(et_settings_table) / sizeof(et_settings_table[0]),
	.settings_size = sizeof(struct et_settings),
	.parse_url = et_parse_url,
	.url_form = "etcd[s]://host:port[,host:port...]",
	.create = et_create,
	.destroy = et_destroy,
	.acquire = et_acquire,
	.release = et_release,
	.renew = et_renew,
	.transfer = et_transfer,
	.withdraw = et_withdraw,
	.info = et_info,
	.state = et_state,
	.pending = et_pending,
	.problem = et_problem,
	.check = et_check,
};

#ifdef DLOCKD_TEST_HOOKS	/* test and fuzz objects only (Makefile) */
/* ---- for the fuzz harness (be_etcd_internal.h) ----------------------------- */

int
be_etcd_decide(Etcd__KeyValue *const *kvs, size_t n, const char *ekey, enum lock_mode mode,
    unsigned limit, int64_t *created, bool *holds, int64_t *wait_rev)
{
	size_t wait_at;
	return decide(kvs, n, ekey, mode, limit, created, holds, wait_rev, &wait_at);
}
#endif
