/*
 * hashtab — a SipHash-keyed hash table of byte-string keys (see hashtab.h).
 *
 * It owns its bucket array and seed; it must not free, copy or look inside
 * entries beyond the hashtab_node its owner embeds and the key bytes that
 * node points to.
 */
#include "hashtab.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

/* The table. */
struct hashtab {
	struct hashtab_node **buckets;	/* chains, by hash & (nbuckets - 1) */
	size_t nbuckets;		/* a power of two */
	size_t minbuckets;		/* never fewer: the size it was made with */
	size_t count;			/* entries in the table */
	unsigned char seed[16];		/* the SipHash key, random */
};

/* ---- SipHash-2-4 ---------------------------------------------------------- */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND do { \
	v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32); \
	v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2; \
	v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0; \
	v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32); \
} while (0)

/* The n (at most 8) bytes at p as a little-endian integer. */
static uint64_t
load_le(const unsigned char *p, size_t n)
{
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

uint64_t
hashtab_siphash(const unsigned char k[16], const void *data, size_t len)
{
	const unsigned char *p = data;
	uint64_t k0 = load_le(k, 8), k1 = load_le(k + 8, 8);
	uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
	uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
	uint64_t m;
	size_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		m = load_le(p + i, 8);
		v3 ^= m;
		SIPROUND;
		SIPROUND;
		v0 ^= m;
	}
	m = (uint64_t)len << 56;
	if (len > i)
		m |= load_le(p + i, len - i);
	v3 ^= m;
	SIPROUND;
	SIPROUND;
	v0 ^= m;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

/* ---- the table -------------------------------------------------------------- */

struct hashtab *
hashtab_create(size_t nbuckets)
{
	struct hashtab *t = xcalloc(1, sizeof(*t));
	t->nbuckets = 1;
	while (t->nbuckets < nbuckets)
		t->nbuckets *= 2;
	t->minbuckets = t->nbuckets;
	t->buckets = xcalloc(t->nbuckets, sizeof(*t->buckets));
	arc4random_buf(t->seed, sizeof(t->seed));
	return t;
}

void
hashtab_destroy(struct hashtab *t)
{
	free(t->buckets);
	free(t);
}

/* The head of the chain a hash goes in. */
static struct hashtab_node **
bucket_of(const struct hashtab *t, uint64_t hash)
{
	return &t->buckets[hash & (t->nbuckets - 1)];
}

struct hashtab_node *
hashtab_find(const struct hashtab *t, const void *key, size_t len)
{
	uint64_t h = hashtab_siphash(t->seed, key, len);
	for (struct hashtab_node *n = *bucket_of(t, h); n != NULL; n = n->next)
		if (n->hash == h && n->keylen == len &&
		    (len == 0 || memcmp(n->key, key, len) == 0))
			return n;
	return NULL;
}

/* Move every entry to a new array of nbuckets buckets (a power of two). */
static void
resize(struct hashtab *t, size_t nbuckets)
{
	struct hashtab_node **old = t->buckets;
	size_t oldn = t->nbuckets;
	t->nbuckets = nbuckets;
	t->buckets = xcalloc(t->nbuckets, sizeof(*t->buckets));
	for (size_t i = 0; i < oldn; i++) {
		struct hashtab_node *n, *next;
		for (n = old[i]; n != NULL; n = next) {
			struct hashtab_node **b = bucket_of(t, n->hash);
			next = n->next;
			n->next = *b;
			*b = n;
		}
	}
	free(old);
}

/* Make room for one more entry: double the buckets when there would be
 * more entries than buckets; when fewer than an eighth are used (a crowd of
 * entries has gone), cut them to twice the entries, never under the first
 * size. Growing at full and shrinking at an eighth leave a fourfold gap, so
 * that a table does not resize back and forth. */
static void
fit(struct hashtab *t)
{
	size_t n = t->minbuckets;

	if (t->count >= t->nbuckets) {
		resize(t, t->nbuckets * 2);
	} else if (t->nbuckets > t->minbuckets && t->count < t->nbuckets / 8) {
		while (n < 2 * (t->count + 1))
			n *= 2;
		resize(t, n);
	}
}

void
hashtab_insert(struct hashtab *t, struct hashtab_node *n, const void *key, size_t len)
{
	assert(hashtab_find(t, key, len) == NULL);
	fit(t);
	n->key = key;
	n->keylen = len;
	n->hash = hashtab_siphash(t->seed, key, len);
	struct hashtab_node **b = bucket_of(t, n->hash);
	n->next = *b;
	*b = n;
	t->count++;
}

void
hashtab_remove(struct hashtab *t, struct hashtab_node *n)
{
	struct hashtab_node **pp = bucket_of(t, n->hash);
	while (*pp != n) {
		assert(*pp != NULL);
		pp = &(*pp)->next;
	}
	*pp = n->next;
	n->next = NULL;
	t->count--;
}

size_t
hashtab_count(const struct hashtab *t)
{
	return t->count;
}

#ifdef DLOCKD_TEST_HOOKS	/* test and fuzz objects only (Makefile) */
size_t
hashtab_buckets(const struct hashtab *t)
{
	return t->nbuckets;
}
#endif

/* Point it at the first node of the first non-empty bucket from b on. */
static void
iter_seek(struct hashtab_iter *it, size_t b)
{
	const struct hashtab *t = it->t;
	for (; b < t->nbuckets; b++)
		if (t->buckets[b] != NULL) {
			it->bucket = b;
			it->next = t->buckets[b];
			return;
		}
	it->bucket = t->nbuckets;
	it->next = NULL;
}

/* The bits of v in reverse order. */
static uint64_t
rev64(uint64_t v)
{
	uint64_t r = 0;
	for (int i = 0; i < 64; i++, v >>= 1)
		r = r << 1 | (v & 1);
	return r;
}

uint64_t
hashtab_scan(const struct hashtab *t, uint64_t cursor, hashtab_scan_fn *fn, void *arg)
{
	uint64_t mask = (uint64_t)t->nbuckets - 1;
	for (struct hashtab_node *n = t->buckets[cursor & mask]; n != NULL; n = n->next)
		fn(arg, n);
	/* the next bucket: the cursor's high bits (its low bits reversed)
	 * counted up, so that the buckets a resize splits or merges are
	 * visited once either way */
	cursor |= ~mask;
	cursor = rev64(cursor);
	cursor++;
	return rev64(cursor);
}

void
hashtab_iter_init(struct hashtab_iter *it, const struct hashtab *t)
{
	it->t = t;
	iter_seek(it, 0);
}

struct hashtab_node *
hashtab_next(struct hashtab_iter *it)
{
	struct hashtab_node *n = it->next;
	if (n == NULL)
		return NULL;
	/* step past n now, so that n may be removed before the next call */
	if (n->next != NULL)
		it->next = n->next;
	else
		iter_seek(it, it->bucket + 1);
	return n;
}
