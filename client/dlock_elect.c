/*
 * dlock_elect — libdlock's election calls: CAMPAIGN, PROCLAIM, RESIGN,
 * LEADER and OBSERVE.
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
#include <string.h>

/* The elements of a LEADER or OBSERVE reply: [value, term, revision, kind, holders]. */
enum {
	LEADER_VALUE,
	LEADER_TERM,
	LEADER_REVISION,
	LEADER_KIND,
	LEADER_HOLDERS,
	LEADER_N
};

/* 1 if v is a string kind. */
static int
is_text(const struct resp *v)
{
	return v->type == RESP_BULK || v->type == RESP_SIMPLE;
}

/* 1 if v is an integer 0 or more. */
static int
is_count(const struct resp *v)
{
	return v->type == RESP_INT && v->integer >= 0;
}

/*
 * Read the reply v of cmd, the 5-array of LEADER, into out. Frees
 * v. 0, or -1 with the error set (a shape other than the protocol's, or a
 * value that does not fit out->value: PROTO).
 */
static int
leader_read(dlock_t *d, const char *cmd, struct resp *v, struct dlock_leader *out)
{
	const struct resp *val, *kind;
	size_t n;

	if (v->type != RESP_ARRAY || v->n < LEADER_N)
		return dlock_unexpected(d, cmd, v);
	val = v->elem[LEADER_VALUE];
	kind = v->elem[LEADER_KIND];
	/* the kind is a word: no NUL in it */
	if ((val->type != RESP_NULL && !is_text(val)) || !is_count(v->elem[LEADER_TERM]) ||
	    !is_count(v->elem[LEADER_REVISION]) || !is_text(kind) || kind->len == 0 ||
	    memchr(kind->str, '\0', kind->len) != NULL || !is_count(v->elem[LEADER_HOLDERS]))
		return dlock_unexpected(d, cmd, v);
	if (is_text(val) && val->len > sizeof(out->value)) {
		dlock_err_set(d, "PROTO", "%s: the leader's value is %zu bytes, more than "
		    "the %zu libdlock can return", cmd, val->len, sizeof(out->value));
		dlock_resp_free(v);
		return -1;
	}
	memset(out, 0, sizeof(*out));
	if (is_text(val)) {
		out->has_value = 1;
		out->valuelen = val->len;
		memcpy(out->value, val->str, val->len);
	}
	out->term = v->elem[LEADER_TERM]->integer;
	out->revision = v->elem[LEADER_REVISION]->integer;
	n = kind->len < sizeof(out->kind) - 1 ? kind->len : sizeof(out->kind) - 1;
	memcpy(out->kind, kind->str, n);
	out->holders = v->elem[LEADER_HOLDERS]->integer;
	dlock_resp_free(v);
	return 0;
}

/*
 * Check a value argument: NULL is "" when len is 0. The value to send, or
 * NULL with the error set (ARG).
 */
static const char *
value_arg(dlock_t *d, const void *value, size_t len)
{
	if (value != NULL)
		return value;
	if (len > 0) {
		dlock_err_set(d, "ARG", "value is NULL");
		return NULL;
	}
	return "";
}

int
dlock_campaign(dlock_t *d, const char *key, const void *value, size_t valuelen,
    const struct dlock_lock_opts *opts, struct dlock_grant *out)
{
	const char *val;

	if (dlock_check_key(d, key) < 0 || (val = value_arg(d, value, valuelen)) == NULL)
		return -1;
	if (opts != NULL && (opts->shared || opts->limit != 0)) {
		dlock_err_set(d, "ARG", "a campaign is exclusive: shared and limit are "
		    "not for it");
		return -1;
	}
	return dlock_acquire(d, "CAMPAIGN", key, val, valuelen, opts, out);
}

int
dlock_proclaim(dlock_t *d, const char *key, const void *value, size_t len,
    long long *revision)
{
	const char *argv[3] = { "PROCLAIM", key, NULL };
	size_t lens[3];
	long long rev;

	if (dlock_check_key(d, key) < 0 || (argv[2] = value_arg(d, value, len)) == NULL)
		return -1;
	lens[0] = strlen(argv[0]);
	lens[1] = strlen(key);
	lens[2] = len;
	if ((rev = dlock_call_int(d, "PROCLAIM", 3, argv, lens)) < 0)
		return -1;
	if (revision != NULL)
		*revision = rev;
	return 0;
}

int
dlock_resign(dlock_t *d, const char *key)
{
	const char *argv[2] = { "RESIGN", key };
	long long n;

	if (dlock_check_key(d, key) < 0)
		return -1;
	if ((n = dlock_call_int(d, "RESIGN", 2, argv, NULL)) < 0)
		return -1;
	return n > INT_MAX ? INT_MAX : (int)n;
}

int
dlock_leader(dlock_t *d, const char *key, struct dlock_leader *out)
{
	const char *argv[2] = { "LEADER", key };
	struct resp *v;

	if (dlock_check_key(d, key) < 0)
		return -1;
	if (out == NULL) {
		dlock_err_set(d, "ARG", "out is NULL");
		return -1;
	}
	if ((v = dlock_call(d, 0, 2, argv, NULL)) == NULL)
		return -1;
	return leader_read(d, "LEADER", v, out);
}

int
dlock_observe(dlock_t *d, const char *key, long long after, long long wait_ms,
    struct dlock_leader *out)
{
	const char *argv[6] = { "OBSERVE", key };
	char abuf[24], wbuf[24];
	struct resp *v;
	int argc = 2;

	if (dlock_check_key(d, key) < 0)
		return -1;
	if (out == NULL) {
		dlock_err_set(d, "ARG", "out is NULL");
		return -1;
	}
	if (after < -1) {
		dlock_err_set(d, "ARG", "after must be -1 (none), 0 or more");
		return -1;
	}
	if (wait_ms < -1) {
		dlock_err_set(d, "ARG", "wait_ms must be -1 (forever), 0 or more");
		return -1;
	}
	if (after >= 0) {
		snprintf(abuf, sizeof(abuf), "%lld", after);
		argv[argc++] = "AFTER";
		argv[argc++] = abuf;
		if (wait_ms >= 0) {
			snprintf(wbuf, sizeof(wbuf), "%lld", wait_ms);
			argv[argc++] = "WAIT";
			argv[argc++] = wbuf;
		}
	} else {
		wait_ms = 0;	/* answered at once */
	}
	if ((v = dlock_call(d, wait_ms, argc, argv, NULL)) == NULL)
		return -1;
	/* nil: WAIT ran out, which only a wait with an end can */
	if (v->type == RESP_NULL && after >= 0 && wait_ms >= 0) {
		dlock_resp_free(v);
		return 0;
	}
	return leader_read(d, "OBSERVE", v, out) < 0 ? -1 : 1;
}
