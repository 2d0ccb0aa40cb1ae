/*
 * check_hashtab — unit tests of the hash table (daemon/hashtab.c): insert,
 * find and remove; keys with NUL bytes and of every length 0..64; growth
 * keeps every entry findable; iteration visits each entry once, and the
 * entry it just returned may be removed; each table has its own seed; and
 * SipHash-2-4 gives the reference outputs of the SipHash paper.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hashtab.h"
#include "suite.h"

/* A check for hot paths: it only calls into Check when it fails. */
#define REQUIRE(cond) do { \
	if (!(cond)) \
		ck_abort_msg("requirement failed: %s", #cond); \
} while (0)

/* An entry of the tests' tables. */
struct ent {
	struct hashtab_node node;	/* first member: a node is its entry */
	unsigned char key[80];		/* the key's bytes */
	size_t len;			/* their length */
	int visits;			/* times an iteration returned it */
	bool in;			/* in the table */
};

static struct ent *
ent_of(struct hashtab_node *n)
{
	return (struct ent *)(void *)n;
}

/* Make entry e's key: len (at least 4) bytes, id in the first four
 * (little-endian: small ids give NUL bytes), then a pattern with NULs. */
static void
ent_key(struct ent *e, unsigned id, size_t len)
{
	REQUIRE(len >= 4 && len <= sizeof(e->key));
	for (size_t i = 0; i < len; i++)
		e->key[i] = i < 4 ? (unsigned char)(id >> (8 * i)) :
		    i % 3 == 0 ? 0 : (unsigned char)i;
	e->len = len;
}

static void
ent_insert(struct hashtab *t, struct ent *e)
{
	hashtab_insert(t, &e->node, e->key, e->len);
	e->in = true;
}

static void
ent_remove(struct hashtab *t, struct ent *e)
{
	hashtab_remove(t, &e->node);
	e->in = false;
}

/* Each entry of es is found in t exactly when it is in. */
static void
check_all(const struct hashtab *t, struct ent *es, size_t n)
{
	size_t in = 0;
	for (size_t i = 0; i < n; i++) {
		struct hashtab_node *f = hashtab_find(t, es[i].key, es[i].len);
		REQUIRE(f == (es[i].in ? &es[i].node : NULL));
		in += es[i].in;
	}
	REQUIRE(hashtab_count(t) == in);
}

START_TEST(insert_find_remove)
{
	struct hashtab *t = hashtab_create(16);
	struct ent a = { 0 }, b = { 0 }, c = { 0 };
	memcpy(a.key, "alpha", a.len = 5);
	memcpy(b.key, "beta", b.len = 4);
	memcpy(c.key, "alphabet", c.len = 8);
	ck_assert_ptr_null(hashtab_find(t, "alpha", 5));
	ck_assert_uint_eq(hashtab_count(t), 0);
	ent_insert(t, &a);
	ent_insert(t, &b);
	ent_insert(t, &c);
	ck_assert_uint_eq(hashtab_count(t), 3);
	ck_assert_ptr_eq(hashtab_find(t, "alpha", 5), &a.node);
	ck_assert_ptr_eq(hashtab_find(t, "beta", 4), &b.node);
	ck_assert_ptr_eq(hashtab_find(t, "alphabet", 8), &c.node);
	/* a prefix, a longer key, another case are other keys */
	ck_assert_ptr_null(hashtab_find(t, "alph", 4));
	ck_assert_ptr_null(hashtab_find(t, "alphas", 6));
	ck_assert_ptr_null(hashtab_find(t, "Alpha", 5));
	/* the node keeps the key it was given */
	ck_assert_ptr_eq(a.node.key, a.key);
	ck_assert_uint_eq(a.node.keylen, 5);
	ent_remove(t, &a);
	ck_assert_ptr_null(hashtab_find(t, "alpha", 5));
	ck_assert_ptr_eq(hashtab_find(t, "alphabet", 8), &c.node);
	ck_assert_uint_eq(hashtab_count(t), 2);
	/* back in */
	ent_insert(t, &a);
	ck_assert_ptr_eq(hashtab_find(t, "alpha", 5), &a.node);
	ent_remove(t, &b);
	ent_remove(t, &c);
	ent_remove(t, &a);
	ck_assert_uint_eq(hashtab_count(t), 0);
	hashtab_destroy(t);
}
END_TEST

/* Keys of every length 0..64, full of NUL bytes, all distinct, some the
 * prefixes of others. */
START_TEST(binary_keys)
{
	/* the empty key, then for each length 1..64: all NUL bytes, a pattern
	 * with NULs in it, and that pattern with its last byte changed */
	enum { N = 1 + 64 * 3 };
	static struct ent es[N];
	struct hashtab *t = hashtab_create(1);
	memset(es, 0, sizeof(es));
	ent_insert(t, &es[0]);
	for (size_t len = 1; len <= 64; len++) {
		struct ent *e = &es[1 + 3 * (len - 1)];
		for (size_t i = 0; i < len; i++) {
			e[1].key[i] = i % 2 == 1 ? 0 : (unsigned char)('a' + i % 26);
			e[2].key[i] = e[1].key[i];
		}
		e[2].key[len - 1] ^= 0x80;
		for (int j = 0; j < 3; j++) {
			e[j].len = len;
			ent_insert(t, &e[j]);
		}
	}
	check_all(t, es, N);
	/* a key of n NUL bytes is neither the empty key nor one of n + 1 */
	unsigned char zeros[65] = { 0 };
	ck_assert_ptr_eq(hashtab_find(t, zeros, 0), &es[0].node);
	for (size_t len = 1; len <= 64; len++)
		ck_assert_ptr_eq(hashtab_find(t, zeros, len), &es[1 + 3 * (len - 1)].node);
	ck_assert_ptr_null(hashtab_find(t, zeros, 65));
	/* the empty key with no bytes behind it at all */
	ck_assert_ptr_eq(hashtab_find(t, NULL, 0), &es[0].node);
	for (size_t i = 0; i < N; i++)
		if (es[i].in)
			ent_remove(t, &es[i]);
	check_all(t, es, N);
	hashtab_destroy(t);
}
END_TEST

/* The table grows by doubling from one bucket: every entry stays findable
 * at every size, and after removals. */
START_TEST(growth_keeps_entries)
{
	enum { N = 5000 };
	struct ent *es = calloc(N, sizeof(*es));
	ck_assert_ptr_nonnull(es);
	struct hashtab *t = hashtab_create(1);
	for (unsigned i = 0; i < N; i++) {
		ent_key(&es[i], i, 4 + i % 40);
		ent_insert(t, &es[i]);
		/* right after each doubling, and now and then */
		if ((i & (i + 1)) == 0 || i % 977 == 0)
			check_all(t, es, i + 1);
	}
	check_all(t, es, N);
	for (unsigned i = 0; i < N; i += 2)
		ent_remove(t, &es[i]);
	check_all(t, es, N);
	for (unsigned i = 0; i < N; i += 2)
		ent_insert(t, &es[i]);
	check_all(t, es, N);
	hashtab_destroy(t);
	free(es);
}
END_TEST

/* A table that grew for a crowd shrinks at the insert that follows the
 * crowd's departure, never under its first size, and keeps every entry
 * findable; removing alone never resizes. */
START_TEST(shrinks_when_sparse)
{
	enum { N = 4096 };
	struct ent *es = calloc(N + 1, sizeof(*es));
	ck_assert_ptr_nonnull(es);
	struct hashtab *t = hashtab_create(16);
	for (unsigned i = 0; i <= N; i++)
		ent_key(&es[i], i, 4 + i % 40);
	for (unsigned i = 0; i < N; i++)
		ent_insert(t, &es[i]);
	size_t peak = hashtab_buckets(t);
	ck_assert_uint_ge(peak, N);
	for (unsigned i = 10; i < N; i++)
		ent_remove(t, &es[i]);
	ck_assert_uint_eq(hashtab_buckets(t), peak);
	check_all(t, es, N);
	ent_insert(t, &es[N]);
	ck_assert_uint_eq(hashtab_buckets(t), 32);	/* twice the 11 entries, rounded up */
	check_all(t, es, N + 1);
	/* not under the first size */
	for (unsigned i = 0; i < 10; i++)
		ent_remove(t, &es[i]);
	ent_remove(t, &es[N]);
	ent_insert(t, &es[0]);
	ck_assert_uint_eq(hashtab_buckets(t), 16);
	check_all(t, es, N + 1);
	/* a table at its first size does not shrink, however empty */
	ent_remove(t, &es[0]);
	ent_insert(t, &es[1]);
	ck_assert_uint_eq(hashtab_buckets(t), 16);
	hashtab_destroy(t);
	free(es);
}
END_TEST

/* Iterate t; each entry of es must be visited once when in, never when not;
 * returns how many were visited. */
static size_t
iterate_once(const struct hashtab *t, struct ent *es, size_t n)
{
	struct hashtab_iter it;
	struct hashtab_node *node;
	size_t seen = 0;
	for (size_t i = 0; i < n; i++)
		es[i].visits = 0;
	hashtab_iter_init(&it, t);
	while ((node = hashtab_next(&it)) != NULL) {
		struct ent *e = ent_of(node);
		REQUIRE(e >= es && e < es + n);
		e->visits++;
		seen++;
	}
	ck_assert_ptr_null(hashtab_next(&it));
	for (size_t i = 0; i < n; i++)
		REQUIRE(es[i].visits == (es[i].in ? 1 : 0));
	return seen;
}

START_TEST(iteration_visits_each_once)
{
	enum { N = 3000 };
	struct ent *es = calloc(N, sizeof(*es));
	ck_assert_ptr_nonnull(es);
	struct hashtab *t = hashtab_create(64);
	ck_assert_uint_eq(iterate_once(t, es, 0), 0);
	for (unsigned i = 0; i < N; i++) {
		ent_key(&es[i], i, 4 + i % 9);
		ent_insert(t, &es[i]);
		if (i == 0 || i == 63 || i == 64 || i == 999)
			ck_assert_uint_eq(iterate_once(t, es, i + 1), i + 1);
	}
	ck_assert_uint_eq(iterate_once(t, es, N), N);
	for (unsigned i = 0; i < N; i += 3)
		ent_remove(t, &es[i]);
	ck_assert_uint_eq(iterate_once(t, es, N), N - (N + 2) / 3);
	hashtab_destroy(t);
	free(es);
}
END_TEST

/* hashtab_scan's visit: count it. */
static void
scan_visit(void *arg, struct hashtab_node *n)
{
	(void)arg;
	ent_of(n)->visits++;
}

/* A scan from start to end over a table that grows (every step inserts a
 * few entries) or shrinks (entries removed, then an insert shrinks it)
 * between steps: every entry in the table throughout is visited at least
 * once; with no change, exactly once. */
START_TEST(scan_survives_resizes)
{
	enum { N = 4000, FIRST = 600 };
	struct ent *es = calloc(N, sizeof(*es));
	ck_assert_ptr_nonnull(es);
	for (int round = 0; round < 3; round++) {
		struct hashtab *t = hashtab_create(16);
		unsigned next = FIRST;
		for (unsigned i = 0; i < N; i++) {
			ent_key(&es[i], i, 4 + i % 11);
			es[i].visits = 0;
			es[i].in = false;
		}
		for (unsigned i = 0; i < FIRST; i++)
			ent_insert(t, &es[i]);
		size_t before = hashtab_buckets(t), steps = 0;
		uint64_t c = 0;
		do {
			c = hashtab_scan(t, c, scan_visit, NULL);
			steps++;
			if (round == 1 && next < N) {
				/* growing: the table doubles several times */
				for (int k = 0; k < 8 && next < N; k++)
					ent_insert(t, &es[next++]);
			} else if (round == 2 && steps == 5) {
				/* shrinking: most entries go, an insert shrinks it */
				for (unsigned i = 100; i < FIRST; i++)
					ent_remove(t, &es[i]);
				ent_insert(t, &es[next++]);
			}
			REQUIRE(steps < 1000000);
		} while (c != 0);
		if (round == 1)
			ck_assert_uint_gt(hashtab_buckets(t), before);
		if (round == 2)
			ck_assert_uint_lt(hashtab_buckets(t), before);
		/* the first 100 were in throughout, in every round */
		for (unsigned i = 0; i < (round == 2 ? 100u : (unsigned)FIRST); i++)
			REQUIRE(es[i].visits >= 1);
		if (round == 0)
			for (unsigned i = 0; i < FIRST; i++)
				REQUIRE(es[i].visits == 1);
		hashtab_destroy(t);
	}
	free(es);
}
END_TEST

/* The entry just returned may be removed (and freed) before the next call:
 * the rest are still visited once each. */
START_TEST(remove_during_iteration)
{
	enum { N = 2000 };
	struct ent **es = calloc(N, sizeof(*es));
	bool *gone = calloc(N, sizeof(*gone));
	int *visits = calloc(N, sizeof(*visits));
	ck_assert(es != NULL && gone != NULL && visits != NULL);
	struct hashtab *t = hashtab_create(8);
	for (unsigned i = 0; i < N; i++) {
		es[i] = calloc(1, sizeof(*es[i]));
		ck_assert_ptr_nonnull(es[i]);
		ent_key(es[i], i, 4 + i % 17);
		es[i]->visits = (int)i;	/* its index, for after it is freed */
		ent_insert(t, es[i]);
	}
	struct hashtab_iter it;
	struct hashtab_node *node;
	hashtab_iter_init(&it, t);
	while ((node = hashtab_next(&it)) != NULL) {
		unsigned i = (unsigned)ent_of(node)->visits;
		visits[i]++;
		if (i % 2 == 0) {
			hashtab_remove(t, node);
			free(node);
			gone[i] = true;
		}
	}
	for (unsigned i = 0; i < N; i++) {
		ck_assert_int_eq(visits[i], 1);
		if (gone[i])
			es[i] = NULL;
	}
	ck_assert_uint_eq(hashtab_count(t), N / 2);
	/* what is left is found and iterated; then remove it all the same way */
	hashtab_iter_init(&it, t);
	unsigned left = 0;
	while ((node = hashtab_next(&it)) != NULL) {
		struct ent *e = ent_of(node);
		unsigned i = (unsigned)e->visits;
		ck_assert(i % 2 == 1);
		ck_assert_ptr_eq(hashtab_find(t, e->key, e->len), node);
		hashtab_remove(t, node);
		free(node);
		es[i] = NULL;
		left++;
	}
	ck_assert_uint_eq(left, N / 2);
	ck_assert_uint_eq(hashtab_count(t), 0);
	hashtab_iter_init(&it, t);
	ck_assert_ptr_null(hashtab_next(&it));
	hashtab_destroy(t);
	free(es);
	free(gone);
	free(visits);
}
END_TEST

/* Each table draws its own seed: the same key hashes differently (the odds
 * of two equal 64-bit hashes are 2^-64). */
START_TEST(seed_per_table)
{
	struct hashtab *t1 = hashtab_create(4), *t2 = hashtab_create(4);
	struct ent a = { 0 }, b = { 0 };
	memcpy(a.key, "same key", a.len = 8);
	memcpy(b.key, "same key", b.len = 8);
	ent_insert(t1, &a);
	ent_insert(t2, &b);
	ck_assert_uint_ne(a.node.hash, b.node.hash);
	ck_assert_ptr_eq(hashtab_find(t1, "same key", 8), &a.node);
	ck_assert_ptr_eq(hashtab_find(t2, "same key", 8), &b.node);
	hashtab_destroy(t1);
	hashtab_destroy(t2);
}
END_TEST

/*
 * SipHash-2-4 with the key 00 01 .. 0f of messages 00 01 .. of length
 * 0..63: the outputs of the reference implementation (vectors_sip64 in
 * vectors.h of the SipHash repository, from the paper by Aumasson and
 * Bernstein), as the little-endian bytes of the 64-bit result.
 */
static const unsigned char sip64[64][8] = {
	{ 0x31, 0x0e, 0x0e, 0xdd, 0x47, 0xdb, 0x6f, 0x72 },
	{ 0xfd, 0x67, 0xdc, 0x93, 0xc5, 0x39, 0xf8, 0x74 },
	{ 0x5a, 0x4f, 0xa9, 0xd9, 0x09, 0x80, 0x6c, 0x0d },
	{ 0x2d, 0x7e, 0xfb, 0xd7, 0x96, 0x66, 0x67, 0x85 },
	{ 0xb7, 0x87, 0x71, 0x27, 0xe0, 0x94, 0x27, 0xcf },
	{ 0x8d, 0xa6, 0x99, 0xcd, 0x64, 0x55, 0x76, 0x18 },
	{ 0xce, 0xe3, 0xfe, 0x58, 0x6e, 0x46, 0xc9, 0xcb },
	{ 0x37, 0xd1, 0x01, 0x8b, 0xf5, 0x00, 0x02, 0xab },
	{ 0x62, 0x24, 0x93, 0x9a, 0x79, 0xf5, 0xf5, 0x93 },
	{ 0xb0, 0xe4, 0xa9, 0x0b, 0xdf, 0x82, 0x00, 0x9e },
	{ 0xf3, 0xb9, 0xdd, 0x94, 0xc5, 0xbb, 0x5d, 0x7a },
	{ 0xa7, 0xad, 0x6b, 0x22, 0x46, 0x2f, 0xb3, 0xf4 },
	{ 0xfb, 0xe5, 0x0e, 0x86, 0xbc, 0x8f, 0x1e, 0x75 },
	{ 0x90, 0x3d, 0x84, 0xc0, 0x27, 0x56, 0xea, 0x14 },
	{ 0xee, 0xf2, 0x7a, 0x8e, 0x90, 0xca, 0x23, 0xf7 },
	{ 0xe5, 0x45, 0xbe, 0x49, 0x61, 0xca, 0x29, 0xa1 },
	{ 0xdb, 0x9b, 0xc2, 0x57, 0x7f, 0xcc, 0x2a, 0x3f },
	{ 0x94, 0x47, 0xbe, 0x2c, 0xf5, 0xe9, 0x9a, 0x69 },
	{ 0x9c, 0xd3, 0x8d, 0x96, 0xf0, 0xb3, 0xc1, 0x4b },
	{ 0xbd, 0x61, 0x79, 0xa7, 0x1d, 0xc9, 0x6d, 0xbb },
	{ 0x98, 0xee, 0xa2, 0x1a, 0xf2, 0x5c, 0xd6, 0xbe },
	{ 0xc7, 0x67, 0x3b, 0x2e, 0xb0, 0xcb, 0xf2, 0xd0 },
	{ 0x88, 0x3e, 0xa3, 0xe3, 0x95, 0x67, 0x53, 0x93 },
	{ 0xc8, 0xce, 0x5c, 0xcd, 0x8c, 0x03, 0x0c, 0xa8 },
	{ 0x94, 0xaf, 0x49, 0xf6, 0xc6, 0x50, 0xad, 0xb8 },
	{ 0xea, 0xb8, 0x85, 0x8a, 0xde, 0x92, 0xe1, 0xbc },
	{ 0xf3, 0x15, 0xbb, 0x5b, 0xb8, 0x35, 0xd8, 0x17 },
	{ 0xad, 0xcf, 0x6b, 0x07, 0x63, 0x61, 0x2e, 0x2f },
	{ 0xa5, 0xc9, 0x1d, 0xa7, 0xac, 0xaa, 0x4d, 0xde },
	{ 0x71, 0x65, 0x95, 0x87, 0x66, 0x50, 0xa2, 0xa6 },
	{ 0x28, 0xef, 0x49, 0x5c, 0x53, 0xa3, 0x87, 0xad },
	{ 0x42, 0xc3, 0x41, 0xd8, 0xfa, 0x92, 0xd8, 0x32 },
	{ 0xce, 0x7c, 0xf2, 0x72, 0x2f, 0x51, 0x27, 0x71 },
	{ 0xe3, 0x78, 0x59, 0xf9, 0x46, 0x23, 0xf3, 0xa7 },
	{ 0x38, 0x12, 0x05, 0xbb, 0x1a, 0xb0, 0xe0, 0x12 },
	{ 0xae, 0x97, 0xa1, 0x0f, 0xd4, 0x34, 0xe0, 0x15 },
	{ 0xb4, 0xa3, 0x15, 0x08, 0xbe, 0xff, 0x4d, 0x31 },
	{ 0x81, 0x39, 0x62, 0x29, 0xf0, 0x90, 0x79, 0x02 },
	{ 0x4d, 0x0c, 0xf4, 0x9e, 0xe5, 0xd4, 0xdc, 0xca },
	{ 0x5c, 0x73, 0x33, 0x6a, 0x76, 0xd8, 0xbf, 0x9a },
	{ 0xd0, 0xa7, 0x04, 0x53, 0x6b, 0xa9, 0x3e, 0x0e },
	{ 0x92, 0x59, 0x58, 0xfc, 0xd6, 0x42, 0x0c, 0xad },
	{ 0xa9, 0x15, 0xc2, 0x9b, 0xc8, 0x06, 0x73, 0x18 },
	{ 0x95, 0x2b, 0x79, 0xf3, 0xbc, 0x0a, 0xa6, 0xd4 },
	{ 0xf2, 0x1d, 0xf2, 0xe4, 0x1d, 0x45, 0x35, 0xf9 },
	{ 0x87, 0x57, 0x75, 0x19, 0x04, 0x8f, 0x53, 0xa9 },
	{ 0x10, 0xa5, 0x6c, 0xf5, 0xdf, 0xcd, 0x9a, 0xdb },
	{ 0xeb, 0x75, 0x09, 0x5c, 0xcd, 0x98, 0x6c, 0xd0 },
	{ 0x51, 0xa9, 0xcb, 0x9e, 0xcb, 0xa3, 0x12, 0xe6 },
	{ 0x96, 0xaf, 0xad, 0xfc, 0x2c, 0xe6, 0x66, 0xc7 },
	{ 0x72, 0xfe, 0x52, 0x97, 0x5a, 0x43, 0x64, 0xee },
	{ 0x5a, 0x16, 0x45, 0xb2, 0x76, 0xd5, 0x92, 0xa1 },
	{ 0xb2, 0x74, 0xcb, 0x8e, 0xbf, 0x87, 0x87, 0x0a },
	{ 0x6f, 0x9b, 0xb4, 0x20, 0x3d, 0xe7, 0xb3, 0x81 },
	{ 0xea, 0xec, 0xb2, 0xa3, 0x0b, 0x22, 0xa8, 0x7f },
	{ 0x99, 0x24, 0xa4, 0x3c, 0xc1, 0x31, 0x57, 0x24 },
	{ 0xbd, 0x83, 0x8d, 0x3a, 0xaf, 0xbf, 0x8d, 0xb7 },
	{ 0x0b, 0x1a, 0x2a, 0x32, 0x65, 0xd5, 0x1a, 0xea },
	{ 0x13, 0x50, 0x79, 0xa3, 0x23, 0x1c, 0xe6, 0x60 },
	{ 0x93, 0x2b, 0x28, 0x46, 0xe4, 0xd7, 0x06, 0x66 },
	{ 0xe1, 0x91, 0x5f, 0x5c, 0xb1, 0xec, 0xa4, 0x6c },
	{ 0xf3, 0x25, 0x96, 0x5c, 0xa1, 0x6d, 0x62, 0x9f },
	{ 0x57, 0x5f, 0xf2, 0x8e, 0x60, 0x38, 0x1b, 0xe5 },
	{ 0x72, 0x45, 0x06, 0xeb, 0x4c, 0x32, 0x8a, 0x95 },
};

START_TEST(siphash_reference_vectors)
{
	unsigned char k[16], msg[64];
	for (int i = 0; i < 16; i++)
		k[i] = (unsigned char)i;
	for (int i = 0; i < 64; i++)
		msg[i] = (unsigned char)i;
	/* the paper's own example, as a number */
	ck_assert_uint_eq(hashtab_siphash(k, msg, 15), 0xa129ca6149be45e5ULL);
	for (size_t len = 0; len < 64; len++) {
		uint64_t h = hashtab_siphash(k, msg, len);
		unsigned char out[8];
		for (int i = 0; i < 8; i++)
			out[i] = (unsigned char)(h >> (8 * i));
		ck_assert_msg(memcmp(out, sip64[len], 8) == 0,
		    "SipHash-2-4 of %zu bytes: %016llx", len, (unsigned long long)h);
	}
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("hashtab");

	suite_case(s, "hashtab", NULL, NULL, 0, SUITE_TESTS(siphash_reference_vectors,
	    insert_find_remove, binary_keys, growth_keeps_entries, shrinks_when_sparse,
	    iteration_visits_each_once, remove_during_iteration, scan_survives_resizes,
	    seed_per_table));
	return suite_run(s);
}
