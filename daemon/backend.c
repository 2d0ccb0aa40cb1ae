/*
 * backend — the registry of backends: adding one is its own file plus one
 * line in backends[] below. Everything else (conf's backend.type and -b,
 * the backend's settings) finds it through backend_find() and backend_at().
 */
#include "backend.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "xmalloc.h"

/* Every backend this build has, one line each: the operations table its
 * file defines. */
#define BACKENDS(X) \
	X(be_memory_ops) \
	X(be_redis_ops) \
	X(be_redlock_ops) \
	X(be_redis_cluster_ops) \
	X(be_etcd_ops)

#define BACKEND_DECLARE(ops) extern const struct backend_ops ops;
#define BACKEND_ENTRY(ops) &ops,
BACKENDS(BACKEND_DECLARE)
static const struct backend_ops *const backends[] = { BACKENDS(BACKEND_ENTRY) };

#define NBACKENDS (sizeof(backends) / sizeof(backends[0]))

int
backend_url_row(const struct backend_url *urls, const char *url)
{
	for (int i = 0; urls[i].scheme != NULL; i++)
		if (strncasecmp(url, urls[i].scheme, strlen(urls[i].scheme)) == 0)
			return i;
	return -1;
}

const struct backend_ops *
backend_find(const char *name)
{
	for (size_t i = 0; i < NBACKENDS; i++)
		if (strcmp(backends[i]->name, name) == 0)
			return backends[i];
	return NULL;
}

const struct backend_ops *
backend_at(size_t i)
{
	return i < NBACKENDS ? backends[i] : NULL;
}

struct backend *
backend_create(const char *type, struct event_base *base, const void *settings)
{
	const struct backend_ops *ops = backend_find(type);
	if (ops == NULL) {
		log_error("unknown backend '%s'", type);
		return NULL;
	}
	struct backend *be = xcalloc(1, sizeof(*be));
	be->ops = ops;
	be->base = base;
	be->settings = settings;
	be->min_ttl_ms = ops->min_lease_ms != NULL ? ops->min_lease_ms(settings) : 0;
	if (ops->create(be) != 0) {
		free(be);
		return NULL;
	}
	return be;
}

void
backend_destroy(struct backend *be)
{
	if (be == NULL)
		return;
	be->ops->destroy(be);
	free(be);
}

void
backend_reload(struct backend *be)
{
	if (be->ops->reload != NULL)
		be->ops->reload(be);
}

const char *
backend_problem(struct backend *be, char *buf, size_t len)
{
	return be->ops->problem != NULL ? be->ops->problem(be, buf, len) : NULL;
}
