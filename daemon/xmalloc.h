/*
 * xmalloc — the daemon's one allocation-failure policy: allocations do not
 * fail. When memory is gone these functions log and abort, as Redis's
 * zmalloc and tmux's xmalloc do, so that no caller threads an out-of-memory
 * status through its paths. main() hands them to libevent as well
 * (event_set_mem_functions), so the event loop's own buffers follow the same
 * policy.
 *
 * Sizes a client controls must be checked against their limits before they
 * reach these functions. The client library does not use them: a library
 * reports errors to its caller instead.
 */
#ifndef DLOCKD_XMALLOC_H
#define DLOCKD_XMALLOC_H

#include <stddef.h>

/* malloc(n) (at least one byte); never NULL. */
void *xmalloc(size_t n) __attribute__((malloc, alloc_size(1), returns_nonnull));
/* calloc(n, size); never NULL. */
void *xcalloc(size_t n, size_t size) __attribute__((malloc, alloc_size(1, 2), returns_nonnull));
/* realloc(p, n); never NULL. */
void *xrealloc(void *p, size_t n) __attribute__((alloc_size(2), returns_nonnull));
/* realloc(p, n * size), checking the product; never NULL. */
void *xreallocarray(void *p, size_t n, size_t size) __attribute__((returns_nonnull));
/* strdup(s); never NULL. */
char *xstrdup(const char *s) __attribute__((malloc, returns_nonnull));
/* A NUL-terminated copy of the len bytes at p; never NULL. */
char *xmemdup(const void *p, size_t len) __attribute__((malloc, returns_nonnull));
/* asprintf() into a new string; never NULL. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2), returns_nonnull));

#endif
