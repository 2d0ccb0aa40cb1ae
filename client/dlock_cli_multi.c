/*
 * dlock_cli_multi — what dlock run and dlock lock do with several keys
 * (-k KEY -k KEY...): take them all or none with one LOCKALL, say whom they
 * wait for (-v), and give run's COMMAND the keys' variables. The parsing,
 * the running of COMMAND and the release are dlock_cli.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "dlock.h"
#include "dlock_cli.h"

/* The variables of one key, and of several (with _1.._N after the names). */
static const char *const env_names[] = { "DLOCK_KEY", "DLOCK_TOKEN", "DLOCK_FENCE" };
#define ENV_NAMES (sizeof(env_names) / sizeof(env_names[0]))
#define ENV_COUNT "DLOCK_KEYS"

/* See dlock_cli.h. */
char *
keys_label(size_t n, const char *const *keys)
{
	size_t len = 1;
	char *s;

	for (size_t i = 0; i < n; i++)
		len += strlen(keys[i]) + 2;
	if ((s = malloc(len)) == NULL)
		return NULL;
	s[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			strcat(s, ", ");
		strcat(s, keys[i]);
	}
	return s;
}

/* See dlock_cli.h. */
int
take_all(dlock_t *d, size_t n, const char *const *keys, const struct dlock_lock_opts *o,
    int verbose, struct dlock_grant *g)
{
	struct dlock_lock_opts once = *o;
	unsigned long long t0 = clock_ms();
	int r;

	if (!verbose)
		return dlock_lockall(d, n, keys, o, g);
	once.wait_ms = 0;
	r = dlock_lockall(d, n, keys, &once, g);
	if (r == 0 && o->wait_ms != 0) {
		for (size_t i = 0; i < n; i++) {
			struct dlock_status st;

			/* the keys that are free need no words */
			if (dlock_status(d, keys[i], &st) < 0 || st.holders > 0)
				describe_wait(d, keys[i]);
		}
		once.wait_ms = o->wait_ms;
		if (once.wait_ms > 0) {
			long long spent = (long long)(clock_ms() - t0);
			once.wait_ms = spent < once.wait_ms ? once.wait_ms - spent : 0;
		}
		r = dlock_lockall(d, n, keys, &once, g);
	}
	if (r > 0) {
		fprintf(stderr, "dlock: got ");
		for (size_t i = 0; i < n; i++)
			fprintf(stderr, "%s%s (fence %lld)", i == 0 ? "" : ", ", keys[i],
			    g[i].fence);
		fprintf(stderr, " after %.1f s\n", secs_since(t0));
	}
	return r;
}

/* Set NAME_i (i from 1) to value, or remove it (value NULL). 0, or -1. */
static int
env_nth(const char *name, size_t i, const char *value)
{
	char var[64];

	snprintf(var, sizeof(var), "%s_%zu", name, i);
	return value != NULL ? setenv(var, value, 1) : unsetenv(var);
}

/* Remove the variables of several keys that COMMAND would inherit. 0, or -1. */
static int
env_clear_several(void)
{
	const char *have = getenv(ENV_COUNT);
	long long n = have != NULL ? strtoll(have, NULL, 10) : 0;

	/* no set is larger than dlockd's largest limits.max_lockall_keys */
	for (long long i = 1; i <= n && i <= 1000; i++)
		for (size_t k = 0; k < ENV_NAMES; k++)
			if (env_nth(env_names[k], (size_t)i, NULL) < 0)
				return -1;
	return unsetenv(ENV_COUNT);
}

/* See dlock_cli.h. */
int
keys_env(size_t n, const char *const *keys, const struct dlock_grant *g)
{
	char num[24];

	if (env_clear_several() < 0)
		return -1;
	if (n == 1) {
		snprintf(num, sizeof(num), "%lld", g[0].fence);
		return setenv("DLOCK_KEY", keys[0], 1) < 0 ||
		    setenv("DLOCK_TOKEN", g[0].token, 1) < 0 ||
		    setenv("DLOCK_FENCE", num, 1) < 0 ? -1 : 0;
	}
	for (size_t k = 0; k < ENV_NAMES; k++)
		if (unsetenv(env_names[k]) < 0)
			return -1;
	snprintf(num, sizeof(num), "%zu", n);
	if (setenv(ENV_COUNT, num, 1) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		snprintf(num, sizeof(num), "%lld", g[i].fence);
		if (env_nth("DLOCK_KEY", i + 1, keys[i]) < 0 ||
		    env_nth("DLOCK_TOKEN", i + 1, g[i].token) < 0 ||
		    env_nth("DLOCK_FENCE", i + 1, num) < 0)
			return -1;
	}
	return 0;
}
