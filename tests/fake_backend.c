/*
 * fake_backend — a recording backend and a hand-moved clock for unit tests
 * (see fake_backend.h).
 *
 * It owns the records and the clock; it must never complete an operation
 * by itself, nor from inside the call that asked for it.
 */
#include "fake_backend.h"

#include <event2/buffer.h>

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A check for hot paths: it only calls into Check when it fails (so the
 * fuzz harness of the lock table, which runs outside Check, can use the fake
 * too). */
#define FK_REQUIRE(cond) do { \
	if (!(cond)) \
		ck_abort_msg("requirement failed: %s", #cond); \
} while (0)

struct fake fk;
struct backend fk_be;
uint64_t fk_now;

uint64_t
fk_clock(void *arg)
{
	(void)arg;
	return fk_now;
}

/* Record an operation; the pointer is valid until the next one. */
static struct fk_op *
fk_record(enum fk_kind kind, const struct be_lock *l, be_cb *cb, void *arg)
{
	if (fk.nops == fk.cap) {
		fk.cap = fk.cap ? fk.cap * 2 : 64;
		fk.ops = realloc(fk.ops, fk.cap * sizeof(*fk.ops));
		FK_REQUIRE(fk.ops != NULL);
	}
	if (fk.npend == fk.pcap) {
		fk.pcap = fk.pcap ? fk.pcap * 2 : 64;
		fk.pend = realloc(fk.pend, fk.pcap * sizeof(*fk.pend));
		FK_REQUIRE(fk.pend != NULL);
	}
	struct fk_op *op = &fk.ops[fk.nops];
	memset(op, 0, sizeof(*op));
	op->kind = kind;
	FK_REQUIRE(l->keylen < FK_KEYMAX);
	memcpy(op->key, l->key, l->keylen);
	op->keylen = l->keylen;
	op->mode = l->mode;
	op->limit = l->limit;
	FK_REQUIRE(strlen(l->token) == TOKEN_LEN);
	memcpy(op->token, l->token, TOKEN_LEN + 1);
	op->ttl_ms = l->ttl_ms;
	op->handoffs = l->handoffs;
	if (l->who != NULL)
		snprintf(op->who, sizeof(op->who), "%s", l->who);
	op->at = fk_now;
	op->cb = cb;
	op->arg = arg;
	fk.pend[fk.npend++] = fk.nops++;
	fk.count[kind]++;
	return op;
}

static void
fk_acquire(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	(void)be;
	fk_record(FK_ACQUIRE, l, cb, arg);
}

static void
fk_release(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	(void)be;
	fk_record(FK_RELEASE, l, cb, arg);
}

static void
fk_renew(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	(void)be;
	fk_record(FK_RENEW, l, cb, arg);
}

/* Record a transfer: from's token and handoffs, to's token, TTL and mode. */
static void
fk_transfer(struct backend *be, const struct be_lock *from, const struct be_lock *to,
    be_cb *cb, void *arg)
{
	(void)be;
	FK_REQUIRE(from->keylen == to->keylen);
	FK_REQUIRE(strlen(to->token) == TOKEN_LEN);
	FK_REQUIRE(to->handoffs == 0);
	struct fk_op *op = fk_record(FK_TRANSFER, from, cb, arg);
	memcpy(op->to, to->token, TOKEN_LEN + 1);
	snprintf(op->who, sizeof(op->who), "%s", to->who != NULL ? to->who : "");
	op->ttl_ms = to->ttl_ms;
	op->mode = to->mode;
}

/* INFO: the operations asked, by kind. */
static void
fk_info(struct backend *be, struct evbuffer *out)
{
	(void)be;
	evbuffer_add_printf(out, "backend_fake_ops:%zu\r\n", fk.nops);
}

/* STATUS's backend field. */
static const char *
fk_state(struct backend *be)
{
	(void)be;
	return fk.disconnected ? "disconnected" : "fake";
}

const struct backend_ops fk_ops = {
	.name = "fake",
	.acquire = fk_acquire,
	.release = fk_release,
	.renew = fk_renew,
	.transfer = fk_transfer,
	.info = fk_info,
	.state = fk_state,
};

const struct backend_ops fk_ops_nt = {
	.name = "fake-no-transfer",
	.acquire = fk_acquire,
	.release = fk_release,
	.renew = fk_renew,
	.info = fk_info,
	.state = fk_state,
};

void
fk_start(const struct backend_ops *ops)
{
	memset(&fk, 0, sizeof(fk));
	memset(&fk_be, 0, sizeof(fk_be));
	fk_be.ops = ops;
	fk_be.priv = &fk;
	fk_now = 1000;
}

void
fk_stop(void)
{
	free(fk.ops);
	free(fk.pend);
	memset(&fk, 0, sizeof(fk));
}

struct fk_op *
fk_pending(size_t pos)
{
	FK_REQUIRE(pos < fk.npend);
	return &fk.ops[fk.pend[pos]];
}

void
fk_complete_at(size_t pos, enum be_status st, uint64_t fence)
{
	FK_REQUIRE(pos < fk.npend);
	size_t i = fk.pend[pos];
	memmove(&fk.pend[pos], &fk.pend[pos + 1], (fk.npend - pos - 1) * sizeof(*fk.pend));
	fk.npend--;
	fk.ops[i].done = true;
	be_cb *cb = fk.ops[i].cb;
	void *arg = fk.ops[i].arg;
	uint64_t valid = fk.ops[i].ttl_ms > fk.valid_cut ? fk.ops[i].ttl_ms - fk.valid_cut : 0;
	struct be_reply r = { .status = st, .fence = st == BE_OK ? fence : 0,
	    .valid_ms = st == BE_OK ? valid : 0,
	    .why = st == BE_OK ? NULL : "the fake backend says so",
	    .lasting = st == BE_ERROR && fk.lasting };
	cb(arg, &r);
}

void
fk_complete(enum be_status st, uint64_t fence)
{
	fk_complete_at(0, st, fence);
}

long
fk_find(enum fk_kind kind, const char *token)
{
	for (size_t p = 0; p < fk.npend; p++) {
		const struct fk_op *op = &fk.ops[fk.pend[p]];
		if (op->kind != kind)
			continue;
		if (token == NULL || strcmp(op->token, token) == 0 ||
		    (kind == FK_TRANSFER && strcmp(op->to, token) == 0))
			return (long)p;
	}
	return -1;
}

struct fk_op *
fk_expect(size_t pos, enum fk_kind kind, const char *key)
{
	struct fk_op *op = fk_pending(pos);
	ck_assert_int_eq(op->kind, kind);
	ck_assert_str_eq(op->key, key);
	ck_assert_uint_eq(op->keylen, strlen(key));
	return op;
}

void
fk_drain(void)
{
	for (unsigned n = 0; fk.npend > 0; n++) {
		ck_assert_uint_lt(n, 1000000);
		fk_complete(BE_OK, ++fk.fence);
	}
}
