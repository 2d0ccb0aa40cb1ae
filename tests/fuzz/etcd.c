/*
 * etcd — fuzz the etcd backend's reading of the JSON gateway's responses
 * (daemon/etcd.c, daemon/be_etcd.c), through jansson as the daemon reads
 * them.
 *
 * The input is a few steering bytes, then a response body. It is read:
 *   - as a unary call's answer with an HTTP status (etcd_result_of): an
 *     answer read as ETCD_OK has a JSON object body, any other a reason;
 *   - as the bytes of a watch stream (etcd_stream_next), whole and cut in
 *     pieces (seeded by the input): both give the same messages and end the
 *     same way, whatever the cuts;
 *   - every JSON object met that holds "kvs" (a range response), when etcd
 *     could have sent it (create revisions positive and increasing), is
 *     read by the acquire's decision (be_etcd_decide) for each of its keys
 *     and each mode: the first key holds an exclusive lock, a shared one
 *     holds while no exclusive key is before it, a semaphore while fewer than
 *     its permits are; one that waits, waits for the key just before (for
 *     the last exclusive one before, when shared); a key not in kvs is
 *     found not to be there;
 *   - base64 keys of "kvs" and of watch events decode to what encodes back
 *     to the same bytes.
 * ASan and the leak check watch the rest.
 */
#include <stdbool.h>
#include <string.h>

#include <event2/buffer.h>

#include "be_etcd_internal.h"
#include "etcd.h"
#include "etcd_internal.h"
#include "fuzz.h"

/* A key of kvs decodes and encodes back to itself. */
static void
check_b64(const char *text)
{
	size_t n, m;
	char *raw = etcd_b64_decode(text, &n);
	if (raw == NULL)
		return;
	char *again = etcd_b64_encode(raw, n);
	char *raw2 = etcd_b64_decode(again, &m);
	FUZZ_CHECK(raw2 != NULL && m == n && memcmp(raw, raw2, n) == 0);
	free(raw);
	free(again);
	free(raw2);
}

/* Whether kvs is what etcd sends: objects by increasing create revision. */
static bool
plausible(const json_t *kvs)
{
	int64_t last = 0;
	size_t i;
	json_t *kv;

	json_array_foreach(kvs, i, kv) {
		int64_t c = etcd_int(kv, "create_revision");
		if (!json_is_object(kv) || c <= last)
			return false;
		last = c;
	}
	return true;
}

/* The acquire's decision for each key of kvs in each mode. */
static void
check_kvs(const json_t *kvs)
{
	static const unsigned limits[] = { 1, 2, 5 };
	size_t i, n;
	json_t *kv;
	int64_t created, wait;
	bool holds;

	json_array_foreach(kvs, i, kv) {
		const char *text = json_string_value(json_object_get(kv, "key"));
		if (text != NULL)
			check_b64(text);
	}
	if (!plausible(kvs))
		return;
	FUZZ_CHECK(be_etcd_decide(kvs, "/dlock/never/there", LOCK_EXCLUSIVE, 0, &created,
	    &holds, &wait) == -1 || json_array_size(kvs) > 0);
	json_array_foreach(kvs, i, kv) {
		const char *text = json_string_value(json_object_get(kv, "key"));
		char *ekey = text != NULL ? etcd_b64_decode(text, &n) : NULL, *again;
		if (ekey == NULL)
			continue;
		again = etcd_b64_encode(ekey, strlen(ekey));
		/* only a key written the way be_etcd writes it can be ours */
		if (strlen(ekey) != n || strcmp(again, text) != 0) {
			free(ekey);
			free(again);
			continue;
		}
		free(again);
		/* the first entry of the key is where it stands */
		size_t at = 0;
		while (!json_equal(json_object_get(json_array_get(kvs, at), "key"),
		    json_object_get(kv, "key")))
			at++;
		int64_t prev = at > 0 ? etcd_int(json_array_get(kvs, at - 1), "create_revision") : 0;
		int64_t excl = 0;
		for (size_t j = 0; j < at; j++) {
			const char *val = json_string_value(json_object_get(json_array_get(kvs, j),
			    "value"));
			if (val == NULL || strcmp(val, "czA=") != 0)
				excl = etcd_int(json_array_get(kvs, j), "create_revision");
		}
		int64_t mine = etcd_int(json_array_get(kvs, at), "create_revision");

		FUZZ_CHECK(be_etcd_decide(kvs, ekey, LOCK_EXCLUSIVE, 0, &created, &holds,
		    &wait) == 0);
		FUZZ_CHECK(created == mine && holds == (at == 0) && (holds || wait == prev));
		FUZZ_CHECK(be_etcd_decide(kvs, ekey, LOCK_SHARED, 0, &created, &holds,
		    &wait) == 0);
		FUZZ_CHECK(holds == (excl == 0) && (holds || wait == excl));
		for (size_t l = 0; l < 3; l++) {
			FUZZ_CHECK(be_etcd_decide(kvs, ekey, LOCK_SEMAPHORE, limits[l], &created,
			    &holds, &wait) == 0);
			FUZZ_CHECK(holds == (at < limits[l]) && wait == -1);
		}
		free(ekey);
	}
}

/* Look through a JSON value for range responses and watch events. */
static void
walk(const json_t *j, int depth)
{
	const char *name;
	json_t *v;
	size_t i;

	if (depth > 16)
		return;
	if (json_is_object(j)) {
		json_object_foreach((json_t *)j, name, v) {
			if (strcmp(name, "kvs") == 0 && json_is_array(v))
				check_kvs(v);
			if ((strcmp(name, "kv") == 0 || strcmp(name, "prev_kv") == 0) &&
			    json_is_string(json_object_get(v, "key")))
				check_b64(json_string_value(json_object_get(v, "key")));
			(void)etcd_int(j, name);
			walk(v, depth + 1);
		}
	} else if (json_is_array(j)) {
		json_array_foreach(j, i, v)
			walk(v, depth + 1);
	}
}

/* Read the stream's bytes in pieces (cut 0: whole); the messages, as text,
 * into out; the end: 0 more to come, -1 stopped. */
static int
stream(const uint8_t *p, size_t n, int cut, uint32_t seed, struct evbuffer *out)
{
	struct evbuffer *buf = evbuffer_new();
	size_t off = 0;
	int rc = 0;
	json_t *msg;
	char why[64];

	while (off < n && rc >= 0) {
		size_t k = n - off;
		if (cut) {
			seed = seed * 1103515245u + 12345u;
			k = 1 + (seed >> 16) % (k < 32 ? k : 32);
		}
		evbuffer_add(buf, p + off, k);
		off += k;
		while ((rc = etcd_stream_next(buf, &msg, why, sizeof(why))) == 1) {
			char *text = json_dumps(msg, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY);
			FUZZ_CHECK(text != NULL);
			evbuffer_add_printf(out, "%s\n", text);
			free(text);
			if (!cut)
				walk(msg, 0);
			json_decref(msg);
		}
		FUZZ_CHECK(msg == NULL);
		if (rc < 0)
			FUZZ_CHECK(why[0] != '\0');
	}
	evbuffer_free(buf);
	return rc;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int codes[] = { 200, 200, 200, 400, 401, 404, 500, 503 };
	struct fuzz_in in = { data, size };
	struct etcd_result r;
	json_t *body;
	char why[256];

	fuzz_quiet();
	unsigned s = fuzz_byte(&in);
	uint32_t seed = fuzz_u16(&in);

	memset(&r, 0, sizeof(r));
	why[0] = '\0';
	etcd_result_of(codes[s & 7], (const char *)in.p, in.n, &body, &r, why, sizeof(why));
	if (r.status == ETCD_OK) {
		FUZZ_CHECK(codes[s & 7] == 200 && json_is_object(r.body) && body != NULL);
		walk(r.body, 0);
	} else {
		FUZZ_CHECK(r.status == ETCD_FAILED && r.why == why && why[0] != '\0');
	}
	json_decref(body);

	struct evbuffer *whole = evbuffer_new(), *parts = evbuffer_new();
	int a = stream(in.p, in.n, 0, 0, whole), b = stream(in.p, in.n, 1, seed, parts);
	FUZZ_CHECK(a == b);
	size_t n = evbuffer_get_length(whole);
	FUZZ_CHECK(n == evbuffer_get_length(parts));
	FUZZ_CHECK(n == 0 || memcmp(evbuffer_pullup(whole, -1), evbuffer_pullup(parts, -1),
	    n) == 0);
	evbuffer_free(whole);
	evbuffer_free(parts);
	return 0;
}
