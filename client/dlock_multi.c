/*
 * dlock_multi — libdlock's calls on several keys at once: LOCKALL and
 * UNLOCKALL.
 *
 * They send their commands and read the replies through dlock.c
 * (dlock_internal.h), which owns the connection, its timeouts and the queue
 * of lost notices; this file only knows the commands' arguments and the
 * shape of their replies. As dlock.c, it must not print, exit or abort.
 */
#include "dlock.h"
#include "dlock_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The words of a command: cmd numkeys key... then up to extra more. */
struct keys_argv {
	const char **argv;	/* the words (the keys are the caller's) */
	size_t *lens;		/* their lengths */
	int argc;		/* words so far */
	char numkeys[24];	/* nkeys, as text */
};

/*
 * Start the words of cmd for nkeys keys, with room for extra words after
 * them, into *ka (free with keys_argv_free). Checks d and every key as
 * dlock_check_key does, and that there is at least one. 0, or -1 with the
 * error set (ARG, NOMEM).
 */
static int
keys_argv_make(dlock_t *d, const char *cmd, size_t nkeys, const char *const *keys,
    int extra, struct keys_argv *ka)
{
	size_t words;

	memset(ka, 0, sizeof(*ka));
	/* clears the last error and checks d */
	if (dlock_check_key(d, cmd) < 0)
		return -1;
	if (keys == NULL || nkeys == 0) {
		dlock_err_set(d, "ARG", "no keys");
		return -1;
	}
	if (nkeys > (size_t)INT_MAX - 2 - (size_t)extra) {
		dlock_err_set(d, "ARG", "too many keys: %zu", nkeys);
		return -1;
	}
	for (size_t i = 0; i < nkeys; i++) {
		if (keys[i] == NULL || *keys[i] == '\0') {
			dlock_err_set(d, "ARG", "key %zu is %s", i, keys[i] == NULL ?
			    "NULL" : "empty");
			return -1;
		}
	}
	words = nkeys + 2 + (size_t)extra;
	ka->argv = calloc(words, sizeof(*ka->argv));
	ka->lens = calloc(words, sizeof(*ka->lens));
	if (ka->argv == NULL || ka->lens == NULL) {
		free(ka->argv);
		free(ka->lens);
		memset(ka, 0, sizeof(*ka));
		dlock_err_set(d, "NOMEM", "out of memory");
		return -1;
	}
	snprintf(ka->numkeys, sizeof(ka->numkeys), "%zu", nkeys);
	ka->argv[ka->argc++] = cmd;
	ka->argv[ka->argc++] = ka->numkeys;
	for (size_t i = 0; i < nkeys; i++)
		ka->argv[ka->argc++] = keys[i];
	return 0;
}

/* Free what keys_argv_make allocated. */
static void
keys_argv_free(struct keys_argv *ka)
{
	free(ka->argv);
	free(ka->lens);
}

/* Send ka's words; the reply (dlock_call's). Frees ka. */
static struct resp *
keys_argv_call(dlock_t *d, long long wait_ms, struct keys_argv *ka)
{
	struct resp *v;

	for (int i = 0; i < ka->argc; i++)
		ka->lens[i] = strlen(ka->argv[i]);
	v = dlock_call(d, wait_ms, ka->argc, ka->argv, ka->lens);
	keys_argv_free(ka);
	return v;
}

int
dlock_lockall(dlock_t *d, size_t nkeys, const char *const *keys,
    const struct dlock_lock_opts *opts, struct dlock_grant *grants)
{
	struct dlock_opt_args oa;
	struct keys_argv ka;
	struct resp *v;

	if (keys_argv_make(d, "LOCKALL", nkeys, keys, DLOCK_OPT_ARGS_MAX, &ka) < 0)
		return -1;
	if (dlock_opts_args(d, opts, &oa) < 0) {
		keys_argv_free(&ka);
		return -1;
	}
	for (int i = 0; i < oa.argc; i++)
		ka.argv[ka.argc++] = oa.argv[i];
	if ((v = keys_argv_call(d, oa.wait_ms, &ka)) == NULL)
		return -1;
	if (v->type == RESP_NULL) {
		dlock_resp_free(v);
		return 0;
	}
	if (v->type != RESP_ARRAY || v->n != nkeys)
		return dlock_unexpected(d, "LOCKALL", v);
	for (size_t i = 0; i < nkeys; i++)
		if (dlock_grant_read(v->elem[i], NULL) < 0)
			return dlock_unexpected(d, "LOCKALL", v);
	if (grants != NULL)
		for (size_t i = 0; i < nkeys; i++)
			(void)dlock_grant_read(v->elem[i], &grants[i]);
	dlock_resp_free(v);
	return 1;
}

int
dlock_unlockall(dlock_t *d, size_t nkeys, const char *const *keys, long long *remaining)
{
	struct keys_argv ka;
	struct resp *v;

	if (keys_argv_make(d, "UNLOCKALL", nkeys, keys, 0, &ka) < 0)
		return -1;
	if ((v = keys_argv_call(d, 0, &ka)) == NULL)
		return -1;
	if (v->type != RESP_ARRAY || v->n != nkeys)
		return dlock_unexpected(d, "UNLOCKALL", v);
	for (size_t i = 0; i < nkeys; i++)
		if (v->elem[i]->type != RESP_INT || v->elem[i]->integer < 0)
			return dlock_unexpected(d, "UNLOCKALL", v);
	if (remaining != NULL)
		for (size_t i = 0; i < nkeys; i++)
			remaining[i] = v->elem[i]->integer;
	dlock_resp_free(v);
	return 0;
}
