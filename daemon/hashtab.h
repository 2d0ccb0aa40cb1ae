/*
 * hashtab — a hash table of byte-string keys, intrusive.
 *
 * It owns its buckets and the order of its chains, nothing else: the owner
 * embeds a struct hashtab_node in each entry and keeps the entry, and the
 * key bytes the node points to, alive and unchanged while the entry is in
 * the table. The table never frees, copies or calls back, and knows
 * nothing of what its entries are.
 *
 * Keys are binary-safe (any bytes, any length, 0 included). They are hashed
 * with SipHash-2-4 under a random key drawn per table: keys may come from
 * clients, who must not be able to choose collisions. The buckets double
 * when there are as many entries as buckets, and shrink back (never under
 * the size the table was made with) when an insert finds fewer than an
 * eighth of them used; resizing never fails (xmalloc). Removing never
 * resizes, so that an iteration may remove what it visits.
 */
#ifndef DLOCKD_HASHTAB_H
#define DLOCKD_HASHTAB_H

#include <stddef.h>
#include <stdint.h>

struct hashtab;

/* What an owner embeds in each entry. */
struct hashtab_node {
	struct hashtab_node *next;	/* the bucket's chain */
	uint64_t hash;			/* SipHash of the key under the table's seed */
	const void *key;		/* the key's bytes, owned by the entry */
	size_t keylen;			/* their length */
};

/* Where an iteration is; see hashtab_next. */
struct hashtab_iter {
	const struct hashtab *t;	/* the table */
	size_t bucket;			/* the bucket of next */
	struct hashtab_node *next;	/* the node hashtab_next returns next */
};

/* A new empty table with at least nbuckets buckets (rounded up to a power
 * of two) and a random seed. Never NULL; the caller owns it. */
struct hashtab *hashtab_create(size_t nbuckets);
/* Free the table; the entries still in it are forgotten, not freed. */
void hashtab_destroy(struct hashtab *t);

/* The entry whose key is the len bytes at key, or NULL. */
struct hashtab_node *hashtab_find(const struct hashtab *t, const void *key, size_t len);
/* Add n with the key at key (len bytes, which must stay valid and unchanged
 * while n is in the table). No entry with that key may be in the table. */
void hashtab_insert(struct hashtab *t, struct hashtab_node *n, const void *key, size_t len);
/* Take n, which is in t, out of it. */
void hashtab_remove(struct hashtab *t, struct hashtab_node *n);
/* How many entries t holds. */
size_t hashtab_count(const struct hashtab *t);
/* How many buckets t has now (for tests: DLOCKD_TEST_HOOKS builds only). */
size_t hashtab_buckets(const struct hashtab *t);

/* Start an iteration over t. Each entry is visited once, in no particular
 * order. The node last returned may be removed (and freed) before the next
 * call; nothing else may be inserted or removed until the iteration ends. */
void hashtab_iter_init(struct hashtab_iter *it, const struct hashtab *t);
/* The next entry, or NULL when every entry has been visited. */
struct hashtab_node *hashtab_next(struct hashtab_iter *it);

/* Visit the entries of a few buckets of t, from cursor (0: the start), with
 * fn(arg, n); the cursor to go on from, 0 when every bucket was visited.
 * Between calls the table may change and resize: an entry that stays in it
 * from the first call to the last is visited at least once, maybe more (the
 * cursor counts the buckets' bits reversed, as Redis's SCAN does). fn must
 * not insert or remove. */
typedef void hashtab_scan_fn(void *arg, struct hashtab_node *n);
uint64_t hashtab_scan(const struct hashtab *t, uint64_t cursor, hashtab_scan_fn *fn, void *arg);

/* SipHash-2-4 of the len bytes at data under the 16-byte key k, as the
 * reference implementation computes it (read as a little-endian integer).
 * The table's own hash; given for tests. */
uint64_t hashtab_siphash(const unsigned char k[16], const void *data, size_t len);

#endif
