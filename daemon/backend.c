/*
 * backend — the registry of backends.
 */
#include "backend.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

/* Every backend this build has, by name. */
static const struct backend_ops *const backends[] = {
	&be_memory_ops,
	&be_redis_ops,
};

struct backend *
backend_create(const char *type, struct event_base *base, const struct conf *conf)
{
	const struct backend_ops *ops = NULL;
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
		if (strcmp(backends[i]->name, type) == 0)
			ops = backends[i];
	if (ops == NULL) {
		log_error("unknown backend '%s'", type);
		return NULL;
	}
	struct backend *be = calloc(1, sizeof(*be));
	if (be == NULL) {
		log_error("out of memory creating the %s backend", type);
		return NULL;
	}
	be->ops = ops;
	be->base = base;
	be->conf = conf;
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
