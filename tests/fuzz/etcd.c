/*
 * etcd — fuzz the reading of etcd's gRPC responses (the gRPC transport,
 * daemon/grpc.c) and the acquire's decision on a range response
 * (daemon/etcd/be_etcd_recipe.c through be_etcd_recipe.h).
 *
 * The input is two steering bytes (a seed for the cuts), then the bytes of
 * a gRPC stream: 5-byte prefixes and protobuf messages. They are read:
 *   - as a stream of TxnResponse, of WatchResponse and of RangeResponse
 *     messages (grpc_next), whole and fed in pieces (seeded by the
 *     input): both give the same messages (packed again, byte for byte),
 *     end the same way (-1 with a reason, or waiting for more) and leave the
 *     same bytes; a message never comes from more bytes than its prefix
 *     says, nor over the limit;
 *   - every RangeResponse met (alone, or in a TxnResponse), when etcd could
 *     have sent it (create revisions positive and increasing), is read by
 *     the acquire's decision (be_etcd_decide) for each of its keys and each
 *     mode: the first key holds an exclusive lock, a shared one holds while
 *     no exclusive key is before it, a semaphore while fewer than its permits
 *     are; one that waits, waits for the key just before (for the last
 *     exclusive one before, when shared); a key not among them is found not
 *     to be there.
 * ASan and the leak check watch the rest.
 */
#include <stdbool.h>
#include <string.h>

#include <event2/buffer.h>

#include "be_etcd_recipe.h"
#include "etcd.h"
#include "grpc.h"
#include "fuzz.h"

#define LIMIT (1u << 16)	/* the message limit the harness reads with */

/* Whether kvs are what etcd sends for a lock: by increasing create revision. */
static bool
plausible(Etcd__KeyValue *const *kvs, size_t n)
{
	int64_t last = 0;
	for (size_t i = 0; i < n; i++) {
		if (kvs[i]->create_revision <= last)
			return false;
		last = kvs[i]->create_revision;
	}
	return true;
}

/* Whether kv's key is a (NUL-free) string equal to s. */
/* Whether kv's value is of a shared lease: its kind, before any "@fence"
 * or "=value", is "s0". */
static bool
is_shared(const Etcd__KeyValue *kv)
{
	size_t n = 0;
	while (n < kv->value.len && kv->value.data[n] != '@' && kv->value.data[n] != '=')
		n++;
	return n == 2 && memcmp(kv->value.data, "s0", 2) == 0;
}

static bool
key_is(const Etcd__KeyValue *kv, const char *s)
{
	return kv->key.len == strlen(s) && memcmp(kv->key.data, s, kv->key.len) == 0;
}

/* The acquire's decision for each key of a range response in each mode. */
static void
check_kvs(Etcd__KeyValue *const *kvs, size_t n)
{
	static const unsigned limits[] = { 1, 2, 5 };
	int64_t created, wait;
	bool holds;

	if (!plausible(kvs, n))
		return;
	FUZZ_CHECK(be_etcd_decide(kvs, n, "/dlock/never/there", LOCK_EXCLUSIVE, 0, &created,
	    &holds, &wait) == -1 || n > 0);
	for (size_t i = 0; i < n; i++) {
		char ekey[256];
		size_t at = 0;
		int64_t prev, excl = 0, mine;

		if (kvs[i]->key.len == 0 || kvs[i]->key.len >= sizeof(ekey) ||
		    memchr(kvs[i]->key.data, '\0', kvs[i]->key.len) != NULL)
			continue;
		memcpy(ekey, kvs[i]->key.data, kvs[i]->key.len);
		ekey[kvs[i]->key.len] = '\0';
		/* the first entry of the key is where it stands */
		while (!key_is(kvs[at], ekey))
			at++;
		prev = at > 0 ? kvs[at - 1]->create_revision : 0;
		for (size_t j = 0; j < at; j++)
			if (!is_shared(kvs[j]))
				excl = kvs[j]->create_revision;
		mine = kvs[at]->create_revision;

		FUZZ_CHECK(be_etcd_decide(kvs, n, ekey, LOCK_EXCLUSIVE, 0, &created, &holds,
		    &wait) == 0);
		FUZZ_CHECK(created == mine && holds == (at == 0) && (holds || wait == prev));
		FUZZ_CHECK(be_etcd_decide(kvs, n, ekey, LOCK_SHARED, 0, &created, &holds,
		    &wait) == 0);
		FUZZ_CHECK(holds == (excl == 0) && (holds || wait == excl));
		for (size_t l = 0; l < 3; l++) {
			FUZZ_CHECK(be_etcd_decide(kvs, n, ekey, LOCK_SEMAPHORE, limits[l], &created,
			    &holds, &wait) == 0);
			FUZZ_CHECK(holds == (at < limits[l]) && wait == -1);
		}
	}
}

/* The range responses of msg (a message of desc). */
static void
walk(const ProtobufCMessage *msg)
{
	if (msg->descriptor == &etcd__range_response__descriptor) {
		const Etcd__RangeResponse *r = (const Etcd__RangeResponse *)msg;
		check_kvs(r->kvs, r->n_kvs);
	} else if (msg->descriptor == &etcd__txn_response__descriptor) {
		const Etcd__TxnResponse *t = (const Etcd__TxnResponse *)msg;
		for (size_t i = 0; i < t->n_responses; i++)
			if (t->responses[i]->response_case ==
			    ETCD__RESPONSE_OP__RESPONSE_RESPONSE_RANGE)
				walk(&t->responses[i]->response_range->base);
	}
}

/* Read the stream's bytes as messages of desc, in pieces (cut 0: whole);
 * each message packed again into out; what is left into left. The end:
 * 0 more to come, -1 stopped. */
static int
stream(const uint8_t *p, size_t n, const ProtobufCMessageDescriptor *desc, int cut,
    uint32_t seed, struct evbuffer *out, struct evbuffer *left)
{
	struct evbuffer *buf = evbuffer_new();
	size_t off = 0;
	int rc = 0;
	ProtobufCMessage *msg;
	char why[128];

	while (off < n && rc >= 0) {
		size_t k = n - off;
		if (cut) {
			seed = seed * 1103515245u + 12345u;
			k = 1 + (seed >> 16) % (k < 32 ? k : 32);
		}
		evbuffer_add(buf, p + off, k);
		off += k;
		for (;;) {
			size_t before = evbuffer_get_length(buf);
			why[0] = '\0';
			rc = grpc_next(buf, desc, LIMIT, &msg, why, sizeof(why));
			if (rc != 1)
				break;
			size_t used = before - evbuffer_get_length(buf);
			size_t len = protobuf_c_message_get_packed_size(msg);
			uint8_t *packed = malloc(len + 1);
			FUZZ_CHECK(msg->descriptor == desc && used >= 5 && used - 5 <= LIMIT);
			FUZZ_CHECK(packed != NULL);
			protobuf_c_message_pack(msg, packed);
			evbuffer_add_printf(out, "%zu:%zu:", used, len);
			evbuffer_add(out, packed, len);
			free(packed);
			if (!cut)
				walk(msg);
			protobuf_c_message_free_unpacked(msg, NULL);
		}
		FUZZ_CHECK(msg == NULL);
		if (rc < 0)
			FUZZ_CHECK(why[0] != '\0');
		else
			FUZZ_CHECK(rc == 0);
	}
	evbuffer_add_buffer(left, buf);
	evbuffer_free(buf);
	return rc;
}

/* Two buffers hold the same bytes. */
static bool
same(struct evbuffer *a, struct evbuffer *b)
{
	size_t n = evbuffer_get_length(a);
	return n == evbuffer_get_length(b) &&
	    (n == 0 || memcmp(evbuffer_pullup(a, -1), evbuffer_pullup(b, -1), n) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const ProtobufCMessageDescriptor *const descs[] = {
		&etcd__txn_response__descriptor,
		&etcd__watch_response__descriptor,
		&etcd__range_response__descriptor,
	};
	struct fuzz_in in = { data, size };

	fuzz_quiet();
	uint32_t seed = fuzz_u16(&in);
	for (size_t d = 0; d < sizeof(descs) / sizeof(descs[0]); d++) {
		struct evbuffer *whole = evbuffer_new(), *parts = evbuffer_new();
		struct evbuffer *lw = evbuffer_new(), *lp = evbuffer_new();
		int a = stream(in.p, in.n, descs[d], 0, 0, whole, lw);
		int b = stream(in.p, in.n, descs[d], 1, seed, parts, lp);
		FUZZ_CHECK(a == b);
		FUZZ_CHECK(same(whole, parts));
		/* fed whole, what is left is the same; fed in pieces, the pieces
		 * after a failure were never fed */
		if (a == 0)
			FUZZ_CHECK(same(lw, lp));
		evbuffer_free(whole);
		evbuffer_free(parts);
		evbuffer_free(lw);
		evbuffer_free(lp);
	}
	return 0;
}
