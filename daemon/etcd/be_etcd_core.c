/*
 * be_etcd_core — the etcd backend's records: a lock key (struct et_key) and
 * its etcd range, "<prefix><K escaped>/" (bytes outside [A-Za-z0-9._:-]
 * written %XX, so no key's range holds another's); each etcd key of this
 * daemon in that range (struct et_entry); and the operations (struct et_op),
 * whose requests go out on their lock key's lane of the client and whose
 * answers are given from the loop (r->done), never from inside the call
 * that asked for them.
 */
#include "be_etcd_core.h"

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "clock.h"
#include "etcd.h"
#include "hashtab.h"
#include "later.h"
#include "xmalloc.h"

/* ---- keys and entries ----------------------------------------------------- */

/* Whether byte c is written as itself in an etcd key. */
static bool
key_plain(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	    c == '.' || c == '_' || c == ':' || c == '-';
}

/* The lock key k's etcd range, "<prefix><escaped>/"; the caller frees it. */
char *
et_key_path(const struct et *r, const char *name, size_t len, size_t *pathlen)
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

struct et_key *
et_key_find_path(struct et *r, const char *path, size_t pathlen)
{
	struct hashtab_node *n = hashtab_find(r->keys, path, pathlen);
	return n != NULL ? (struct et_key *)(void *)n : NULL;
}

/* The lock key name's record, made if need be; a reference for the caller. */
struct et_key *
et_key_get(struct et *r, const char *name, size_t len)
{
	size_t pathlen;
	char *path = et_key_path(r, name, len, &pathlen);
	struct et_key *k = et_key_find_path(r, path, pathlen);
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
void
et_key_put(struct et *r, struct et_key *k)
{
	assert(k->refs > 0);
	if (--k->refs > 0 || !TAILQ_EMPTY(&k->entries))
		return;
	hashtab_remove(r->keys, &k->node);
	free(k->puts);
	free(k->name);
	free(k->path);
	free(k);
}

/* The entry of k that stands for token, or NULL. */
struct et_entry *
et_entry_find(struct et_key *k, const char *token)
{
	struct et_entry *e;
	TAILQ_FOREACH(e, &k->entries, entry)
		if (strcmp(e->token, token) == 0)
			return e;
	return NULL;
}

/* A new entry of k (a reference is taken) for token, not in etcd yet. */
struct et_entry *
et_entry_new(struct et_key *k, const char *token)
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
void
et_entry_free(struct et *r, struct et_entry *e)
{
	struct et_key *k = e->k;
	TAILQ_REMOVE(&k->entries, e, entry);
	free(e->ekey);
	free(e->wait_key);
	free(e->value);
	free(e->who);
	free(e->forced_by);
	free(e);
	et_key_put(r, k);
}

/* ---- values ---------------------------------------------------------------- */

/* "<c><length>:<bytes>" at q (before end): *s and *len point to the bytes;
 * where it ends (q itself when it is cut). */
static const char *
counted(const char *q, const char *end, const char **s, size_t *len)
{
	const char *at = q;
	size_t n = 0;
	for (q++; q < end && *q >= '0' && *q <= '9' && n < 1u << 20; q++)
		n = n * 10 + (size_t)(*q - '0');
	if (q >= end || *q != ':' || (size_t)(end - q - 1) < n)
		return at;
	*s = q + 1;
	*len = n;
	return q + 1 + n;
}

void
et_value_parse(const void *p, size_t len, struct et_value *out)
{
	*out = (struct et_value){ .kind = '?' };
	if (p == NULL || len == 0)
		return;	/* an empty value (protobuf gives no bytes): no kind */
	const char *s = p, *end = s + len, *q = s, *kend;
	while (q < end && *q != '@' && *q != '~' && *q != '=')
		q++;
	kend = q;
	if (q < end && *q == '@')
		for (q++; q < end && *q >= '0' && *q <= '9'; q++)
			out->fence = out->fence * 10 + (uint64_t)(*q - '0');
	if (q < end && *q == '~')
		q = counted(q, end, &out->who, &out->wholen);
	if (q < end && *q == '!')
		q = counted(q, end, &out->by, &out->bylen);
	if (q < end && *q == '=') {
		out->value = q + 1;
		out->valuelen = (size_t)(end - q - 1);
	}
	if (kend - s == 2 && (s[0] == 'x' || s[0] == 's') && s[1] == '0') {
		out->kind = s[0];
	} else if (kend - s >= 2 && s[0] == 'n') {
		unsigned lim = 0;
		for (const char *d = s + 1; d < kend && *d >= '0' && *d <= '9' && lim < 1u << 24; d++)
			lim = lim * 10 + (unsigned)(*d - '0');
		out->kind = 'n';
		out->limit = lim;
	}
}

char *
et_value_make(enum lock_mode mode, unsigned limit, uint64_t fence, const char *who,
    const char *value, size_t valuelen, size_t *len)
{
	char head[96];
	int n = 0;
	size_t wl = who != NULL ? strlen(who) : 0;
	char *out;
	switch (mode) {
	case LOCK_EXCLUSIVE: n = snprintf(head, sizeof(head), "x0"); break;
	case LOCK_SHARED: n = snprintf(head, sizeof(head), "s0"); break;
	case LOCK_SEMAPHORE: n = snprintf(head, sizeof(head), "n%u", limit); break;
	}
	if (fence != 0)
		n += snprintf(head + n, sizeof(head) - (size_t)n, "@%llu",
		    (unsigned long long)fence);
	if (who != NULL)
		n += snprintf(head + n, sizeof(head) - (size_t)n, "~%zu:", wl);
	*len = (size_t)n + wl + (value != NULL ? 1 + valuelen : 0);
	out = xmalloc(*len + 1);
	memcpy(out, head, (size_t)n);
	if (wl > 0)
		memcpy(out + n, who, wl);
	if (value != NULL) {
		out[(size_t)n + wl] = '=';
		memcpy(out + n + wl + 1, value, valuelen);
	}
	out[*len] = '\0';
	return out;
}

char *
et_value_broken(const struct et_value *v, uint64_t fence, const char *by, size_t *len)
{
	char head[96];
	size_t bl = strlen(by), n;
	int k;
	if (v->kind == 'n')
		k = snprintf(head, sizeof(head), "n%u@%llu", v->limit, (unsigned long long)fence);
	else
		k = snprintf(head, sizeof(head), "%c0@%llu", v->kind == 's' ? 's' : 'x',
		    (unsigned long long)fence);
	n = (size_t)k;
	*len = n + (v->who != NULL ? 24 + v->wholen : 0) + 24 + bl +
	    (v->value != NULL ? 1 + v->valuelen : 0);
	char *out = xmalloc(*len + 1), *p = out;
	memcpy(p, head, n);
	p += n;
	if (v->who != NULL) {
		p += sprintf(p, "~%zu:", v->wholen);
		memcpy(p, v->who, v->wholen);
		p += v->wholen;
	}
	p += sprintf(p, "!%zu:", bl);
	memcpy(p, by, bl);
	p += bl;
	if (v->value != NULL) {
		*p++ = '=';
		memcpy(p, v->value, v->valuelen);
		p += v->valuelen;
	}
	*p = '\0';
	*len = (size_t)(p - out);
	return out;
}

bool
et_kv_holds(Etcd__KeyValue *const *kvs, size_t n, size_t i)
{
	struct et_value v, w;
	if (i >= n)
		return false;
	et_value_parse(kvs[i]->value.data, kvs[i]->value.len, &v);
	switch (v.kind) {
	case 's':
		for (size_t j = 0; j < i; j++) {
			et_value_parse(kvs[j]->value.data, kvs[j]->value.len, &w);
			if (w.kind != 's')
				return false;
		}
		return true;
	case 'n':
		return i < v.limit;
	default:
		return i == 0;
	}
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
		struct et_entry *e = et_entry_find(op->k, op->token);
		if (e != NULL)
			e->busy = false;
	}
	if (op->kind == EK_WAKE) {
		/* not while destroying: the lock table has gone first */
		if (!r->destroying)
			r->recipe.wake(r, op->k);
	} else if (op->cb != NULL) {
		op->rep.why = op->why[0] != '\0' ? op->why : NULL;
		op->cb(op->arg, &op->rep);
	}
	et_key_put(r, op->k);
	free(op->ekey);
	free(op->value);
	free(op->who);
	free(op);
}

/* Answer op (on no list) with st from the loop; op is freed after. */
void
et_op_answer(struct et_op *op, enum be_status st, uint64_t fence, uint64_t valid_ms,
    const char *why)
{
	struct et *r = op->r;
	op->rep.status = st;
	op->rep.fence = fence;
	op->rep.valid_ms = st == BE_OK ? valid_ms : 0;
	/* (the client is gone once et_destroy runs) */
	op->rep.lasting = st == BE_ERROR && !r->destroying && etcd_refused(r->cli);
	snprintf(op->why, sizeof(op->why), "%s", why != NULL ? why : "");
	later_add(r->done, &op->done, on_done);
}

/* A new operation on the lock key of l (a reference is taken). */
struct et_op *
et_op_new(struct et *r, enum et_kind kind, const char *key, size_t keylen, be_cb *cb, void *arg)
{
	struct et_op *op = xcalloc(1, sizeof(*op));
	op->r = r;
	op->kind = kind;
	op->cb = cb;
	op->arg = arg;
	op->k = et_key_get(r, key, keylen);
	op->t_call = clock_ms();
	return op;
}

/* Wake the lock table's queue of k from the loop. */
void
et_wake_later(struct et *r, struct et_key *k)
{
	struct et_op *op = et_op_new(r, EK_WAKE, k->name, k->len, NULL, NULL);
	et_op_answer(op, BE_OK, 0, 0, NULL);
}

/* Send op's request req of method m; its answer goes to cb. */
void
et_op_call(struct et_op *op, enum etcd_method m, const ProtobufCMessage *req, etcd_cb *cb)
{
	struct et *r = op->r;
	op->sent = clock_ms();
	op->in_flight = true;
	TAILQ_INSERT_TAIL(&r->ops, op, entry);
	/* the requests about one key reach etcd one after the other */
	etcd_call_lane(r->cli, op->k->node.hash, m, req, cb, op);
}

/* An answer to op's request arrived: it is not in flight any more. */
void
et_op_landed(struct et_op *op)
{
	op->in_flight = false;
	TAILQ_REMOVE(&op->r->ops, op, entry);
}

/* Whether the daemon's lease can be relied on now. */
bool
et_lease_ok(const struct et *r, uint64_t now)
{
	return r->lease != 0 && now < r->lease_until;
}

/* Whether acquires can be sent: etcd answers, the lease is valid and the
 * watch stream is created (so that no delete after the answer is missed). */
bool
et_ready(const struct et *r)
{
	return etcd_up(r->cli) && et_lease_ok(r, clock_ms()) && r->watch_ready;
}
