/*
 * pool — records of one size kept for reuse (see pool.h).
 *
 * It owns the spare records, linked through their first bytes; it must not
 * keep more of them than it was told, nor hand out a record that is not
 * zeroed.
 */
#include "pool.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#elif defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define POISON(p, n) (void)VALGRIND_MAKE_MEM_NOACCESS((p), (n))
#define UNPOISON(p, n) (void)VALGRIND_MAKE_MEM_DEFINED((p), (n))
#endif
#endif
#ifndef POISON
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

void
pool_init(struct pool *p, size_t size, size_t keep)
{
	assert(size >= sizeof(void *));
	p->spare = NULL;
	p->nspare = 0;
	p->size = size;
	p->keep = keep;
}

/* Take the first spare record off the list (p->spare is not NULL). */
static void *
pool_pop(struct pool *p)
{
	void *rec = p->spare;
	UNPOISON(rec, p->size);
	memcpy(&p->spare, rec, sizeof(void *));
	p->nspare--;
	return rec;
}

void
pool_fini(struct pool *p)
{
	while (p->spare != NULL)
		free(pool_pop(p));
}

void *
pool_get(struct pool *p)
{
	if (p->spare == NULL)
		return xcalloc(1, p->size);
	void *rec = pool_pop(p);
	memset(rec, 0, p->size);
	return rec;
}

void
pool_put(struct pool *p, void *rec)
{
	if (p->nspare >= p->keep) {
		free(rec);
		return;
	}
	memcpy(rec, &p->spare, sizeof(void *));
	POISON(rec, p->size);
	p->spare = rec;
	p->nspare++;
}
