/*
 * locktab_view — the lock table's answers that change nothing: a key's
 * status, holders and waiters, its leader, an owner's holdings, the
 * counters. Before answering from leases it lets the table do what is due
 * (lt_catch_up), so that no answer relies on a deadline that has passed.
 */
#include "locktab.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/queue.h>

#include "locktab_int.h"

void
locktab_status(struct locktab *lt, const char *key, size_t keylen, struct lt_key_status *out)
{
	struct lt_key *k;
	struct lt_hold *h;
	bool sem = false;
	unsigned limit = 0;

	lt_catch_up(lt);
	k = lt_key_find(lt, key, keylen);
	h = k != NULL ? TAILQ_FIRST(&k->holders) : NULL;
	memset(out, 0, sizeof(*out));
	out->mode = "free";
	out->ttl_ms = -1;
	if (k == NULL)
		return;
	out->holders = k->nholders;
	out->waiters = k->nwaiters;
	out->fence = k->last_fence;
	if (lt_key_kind(k, &sem, &limit) && sem)
		out->limit = limit;
	if (h == NULL)
		return;
	out->mode = locktab_mode_name(h->terms.mode);
	if (h->terms.mode == LOCK_EXCLUSIVE)
		out->ttl_ms = (int64_t)lt_hold_left(lt, h, locktab_now(lt));
}

int
locktab_validate(struct locktab *lt, const char *key, size_t keylen, uint64_t fence)
{
	struct lt_key *k = lt_key_find(lt, key, keylen);
	struct lt_hold *h;
	if (k == NULL)
		return 0;
	TAILQ_FOREACH(h, &k->holders, kentry)
		if (h->fence == fence)
			return lt_hold_valid(lt, h, locktab_now(lt));
	return 0;
}

/* What STATUS FULL shows of an ACTIVE holding at now. */
void
lt_hold_describe(const struct locktab *lt, const struct lt_hold *h, uint64_t now,
    struct lt_holder_info *out)
{
	const struct lt_owner *o = h->owner != NULL ? h->owner : h->creator;
	out->owner_id = o != NULL ? o->id : 0;
	out->mode = h->terms.mode;
	out->fence = h->fence;
	out->count = h->count;
	out->held_ms = now > h->granted_at ? now - h->granted_at : 0;
	out->lease_ms = (int64_t)lt_hold_left(lt, h, now);
	out->detached = h->owner == NULL;
	out->suspended = h->suspended;
}

void
locktab_key_walk(struct locktab *lt, const char *key, size_t keylen, lt_holder_fn *holder,
    lt_waiter_fn *waiter, void *arg)
{
	struct lt_key *k;
	const struct lt_hold *h;
	const struct lt_waiter *w;
	uint64_t now;

	lt_catch_up(lt);
	now = locktab_now(lt);
	if ((k = lt_key_find(lt, key, keylen)) == NULL)
		return;
	TAILQ_FOREACH(h, &k->holders, kentry) {
		struct lt_holder_info info;
		lt_hold_describe(lt, h, now, &info);
		if (holder != NULL)
			holder(arg, &info);
	}
	TAILQ_FOREACH(w, &k->waiters, kentry) {
		if (w->owner == NULL)
			continue;	/* cancelled, given back when the backend answers */
		struct lt_waiter_info info = {
			.owner_id = w->owner->id,
			.mode = w->terms.mode,
			.waited_ms = now > w->queued_at ? now - w->queued_at : 0,
			.wait_ms = w->deadline == LT_NEVER ? -1 :
			    w->deadline > now ? (int64_t)(w->deadline - now) : 0,
			.detach = w->detach,
		};
		if (waiter != NULL)
			waiter(arg, &info);
	}
}

size_t
locktab_owner_holds(const struct lt_owner *o, void (*fn)(void *arg,
    const struct lt_hold_info *h), void *arg)
{
	const struct lt_hold *h;
	size_t n = 0;
	TAILQ_FOREACH(h, &o->holds, oentry) {
		if (h->state != H_ACTIVE)
			continue;
		struct lt_hold_info info = { h->key->name, h->key->len, h->terms.token, h->fence,
		    h->terms.mode, h->count };
		if (fn != NULL)
			fn(arg, &info);
		n++;
	}
	return n;
}

const char *
locktab_owner_waiting(const struct lt_owner *o, size_t *keylen)
{
	const struct lt_waiter *w = TAILQ_FIRST(&o->waiters);
	if (w == NULL)
		return NULL;
	*keylen = w->key->len;
	return w->key->name;
}

void
locktab_stats(const struct locktab *lt, struct lt_stats *out)
{
	*out = lt->stats;
}

const char *
locktab_mode_name(enum lock_mode mode)
{
	switch (mode) {
	case LOCK_EXCLUSIVE: return "exclusive";
	case LOCK_SHARED: return "shared";
	case LOCK_SEMAPHORE: return "semaphore";
	}
	return "?";
}

void
locktab_leader_now(const struct locktab *lt, const char *key, size_t keylen,
    struct lt_leader *out)
{
	const struct lt_key *k = lt_key_find(lt, key, keylen);
	const struct lt_hold *h;

	memset(out, 0, sizeof(*out));
	out->kind = "free";
	if (k == NULL || (h = TAILQ_FIRST(&k->holders)) == NULL)
		return;
	out->kind = locktab_mode_name(h->terms.mode);
	out->holders = k->nholders;
	if (h->terms.mode == LOCK_EXCLUSIVE) {
		out->term = h->fence;
		out->value = h->value;
		out->valuelen = h->valuelen;
		return;
	}
	TAILQ_FOREACH(h, &k->holders, kentry)
		if (h->fence > out->term)
			out->term = h->fence;
}

void
locktab_leader(struct locktab *lt, const char *key, size_t keylen, struct lt_leader *out)
{
	lt_catch_up(lt);
	locktab_leader_now(lt, key, keylen, out);
}

/* locktab_scan's walk: its callback. */
struct scan_walk {
	lt_key_fn *fn;
	void *arg;
};

static void
scan_visit(void *arg, struct hashtab_node *n)
{
	const struct scan_walk *w = arg;
	const struct lt_key *k = (const struct lt_key *)(const void *)((const char *)n -
	    offsetof(struct lt_key, hnode));
	if (k->nholders > 0)
		w->fn(w->arg, k->name, k->len);
}

uint64_t
locktab_scan(struct locktab *lt, uint64_t cursor, size_t count, lt_key_fn *fn, void *arg)
{
	struct scan_walk w = { fn, arg };
	lt_catch_up(lt);
	for (size_t i = 0; i < (count > 0 ? count : 1); i++) {
		cursor = hashtab_scan(lt->keys, cursor, scan_visit, &w);
		if (cursor == 0)
			break;
	}
	return cursor;
}
