/*
 * pool — records of one size kept for reuse.
 *
 * A hot path that makes and drops many small records of one kind (the lock
 * table's waiters, holdings and backend operations, several per request)
 * takes them from a pool and gives them back, instead of a calloc() and a
 * free() each: glibc's calloc() bypasses its per-thread cache, and a turn of
 * the event loop that serves many sessions makes more records than that
 * cache keeps. A pool keeps at most a set number of spare records and frees
 * the rest. Spare records are poisoned for AddressSanitizer and valgrind, so
 * that a use after pool_put() is caught as a use after free() would be.
 */
#ifndef DLOCKD_POOL_H
#define DLOCKD_POOL_H

#include <stddef.h>

/* A pool; its fields are the pool's own. */
struct pool {
	void *spare;		/* spare records, each linked through its first bytes */
	size_t nspare;		/* records on spare */
	size_t size;		/* bytes in one record */
	size_t keep;		/* most records kept on spare */
};

/* A pool of records of size bytes (at least a pointer's), keeping at most
 * keep spare ones. */
void pool_init(struct pool *p, size_t size, size_t keep);
/* Free the spare records. Records still out are the caller's (free()). */
void pool_fini(struct pool *p);
/* A zeroed record of p->size bytes; never NULL. The caller gives it back
 * with pool_put(), or free(). */
void *pool_get(struct pool *p) __attribute__((returns_nonnull));
/* Give a record back: kept for the next pool_get(), or freed. */
void pool_put(struct pool *p, void *rec);

#endif
