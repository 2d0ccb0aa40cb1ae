/*
 * xmalloc — allocations that do not fail (see xmalloc.h). It owns nothing;
 * it must not be used by the client library, which reports errors instead.
 */
#include "xmalloc.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* Memory is gone: nothing sensible is left to do. */
static void __attribute__((noreturn))
xmalloc_fail(size_t n)
{
	log_error("out of memory allocating %zu bytes", n);
	abort();
}

void *
xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (p == NULL)
		xmalloc_fail(n);
	return p;
}

void *
xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (p == NULL)
		xmalloc_fail(n * size);
	return p;
}

void *
xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (q == NULL)
		xmalloc_fail(n);
	return q;
}

void *
xreallocarray(void *p, size_t n, size_t size)
{
	if (size != 0 && n > SIZE_MAX / size)
		xmalloc_fail(SIZE_MAX);
	return xrealloc(p, n * size);
}

char *
xstrdup(const char *s)
{
	return xmemdup(s, strlen(s));
}

char *
xmemdup(const void *p, size_t len)
{
	char *s = xmalloc(len + 1);
	memcpy(s, p, len);
	s[len] = '\0';
	return s;
}

char *
xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	va_start(ap, fmt);
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		xmalloc_fail(strlen(fmt));
	return s;
}
