/*
 * rdeleg — local delegation and the lease cache of the Redis backends.
 *
 * An acquire or transfer of an exclusive lease with local waiters queued
 * behind reserves a block of fences (at most handoff_limit). Until they are
 * used, the lease goes from one local holder to the next without Redis
 * (struct rd_deleg): the lease in Redis keeps its member, and renewals and
 * the release of whoever holds it locally go to that member. A local grant
 * is valid for what is left of the lease as counted from the last confirmed
 * call's send time; docs/design.md has the argument. With lease_cache_ms,
 * a released delegation is kept that long (cached) for a local LOCK of the
 * key; a busy answer publishes the key on the "wanted" channel, and a daemon
 * that caches its lease releases it at once.
 *
 * When a connection to a server drops, Redis may have restarted without its
 * data, and another daemon may take a key from the new Redis at once, with
 * a fence above every one reserved here: what was reserved before is
 * trusted no more (deleg_distrust).
 */
#include "rd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "clock.h"
#include "xmalloc.h"

/* The delegation a node of r->delegs is embedded in (NULL for NULL). */
static struct rd_deleg *
deleg_node(struct hashtab_node *n)
{
	return n != NULL ? (struct rd_deleg *)(void *)((char *)n -
	    offsetof(struct rd_deleg, hnode)) : NULL;
}

struct rd_deleg *
deleg_find(const struct rd *r, const char *key, size_t keylen)
{
	if (hashtab_count(r->delegs) == 0)
		return NULL;
	return deleg_node(hashtab_find(r->delegs, key, keylen));
}

/* d is cached no more (it is held again, or goes). */
static void
deleg_uncache(struct rd *r, struct rd_deleg *d)
{
	if (d->cache_until == 0)
		return;
	TAILQ_REMOVE(&r->cached, d, centry);
	d->cache_until = 0;
}

/* Forget d (its lease was released, handed on through Redis, or is gone);
 * a local handoff of it not answered yet will be answered BE_NOTOWNER. */
void
deleg_drop(struct rd *r, struct rd_deleg *d)
{
	struct rd_local *lo;
	TAILQ_FOREACH(lo, &r->locals, entry)
		if (lo->d == d)
			lo->d = NULL;
	deleg_uncache(r, d);
	hashtab_remove(r->delegs, &d->hnode);
	free(d);
}

void
deleg_forget(struct rd *r, const char *key, size_t keylen)
{
	struct rd_deleg *d = deleg_find(r, key, keylen);
	if (d != NULL)
		deleg_drop(r, d);
}

struct rd_deleg *
deleg_of(const struct rd *r, const struct be_lock *l)
{
	struct rd_deleg *d = deleg_find(r, l->key, l->keylen);
	return d != NULL && memcmp(d->holder, l->token, TOKEN_LEN) == 0 ? d : NULL;
}

/* The end of a lease of op's that Redis granted or renewed: its send time
 * plus what is sure of its TTL. */
static uint64_t
lease_end(const struct rd *r, const struct rd_op *op)
{
	return op->sent_ms + rquorum_valid(op->ttl_ms, r->drift, r->drift_ms);
}

/*
 * The reply to op (an acquire or a transfer that reserved op->fences fences,
 * the first being fence) granted op->member's exclusive lease: with fences
 * left over, the key is delegated to this daemon until the lease's end as
 * the call's send time tells it. Whatever the key had before is forgotten.
 */
void
deleg_granted(struct rd *r, const struct rd_op *op, uint64_t fence)
{
	struct rd_deleg *d;
	deleg_forget(r, op->key, op->keylen);
	if (op->fences < 2)
		return;
	d = xcalloc(1, sizeof(*d) + op->keylen);
	snprintf(d->member, sizeof(d->member), "%s", op->member);
	memcpy(d->holder, op->member + 3, TOKEN_LEN);	/* after "x0:" */
	d->lease_end = lease_end(r, op);
	d->fence_next = fence + 1;
	d->fence_last = fence + op->fences - 1;
	d->keylen = op->keylen;
	memcpy(d->key, op->key, op->keylen);
	hashtab_insert(r->delegs, &d->hnode, d->key, d->keylen);
}

/* A renewal of op's key was decided (st): a delegated lease renewed lasts
 * longer; one that is gone ends its delegation, and the key's holdings are
 * renewed at once, so that the one that holds the key here now hears of it;
 * one broken by UNLOCK FORCE is released (its holder, which renewed it, is
 * told next). */
void
deleg_renewed(struct rd *r, const struct rd_op *op, enum be_status st)
{
	struct rd_deleg *d = deleg_find(r, op->key, op->keylen);
	uint64_t end = lease_end(r, op);
	if (d == NULL || strcmp(d->member, op->member) != 0)
		return;
	if (st == BE_OK && end > d->lease_end) {
		d->lease_end = end;
	} else if (st == BE_NOTOWNER && op->forced_by != NULL) {
		/* broken by UNLOCK FORCE: given back (the member is the
		 * delegation's, which the holder's release would not name) */
		deleg_release(r, d);
	} else if (st == BE_NOTOWNER) {
		deleg_drop(r, d);
		r->be->up.expire(r->be->up.arg, op->key, op->keylen);
	}
}

/*
 * Whether d's lease can go to to without Redis at now: a fence is left, and
 * what is left of the lease is at least half of to's TTL (the grant is of
 * use, and to renews it in time) and at most its TTL (the lease does not
 * outlive to's TTL if this daemon dies). A DETACH holder is promised its
 * whole TTL: it goes through Redis.
 */
bool
deleg_can_hand(const struct rd_deleg *d, const struct be_lock *to, uint64_t now)
{
	uint64_t left = d->lease_end > now ? d->lease_end - now : 0;
	return !to->detached && to->mode == LOCK_EXCLUSIVE && d->fence_next <= d->fence_last &&
	    left >= to->ttl_ms / 2 && left > 0 && left <= to->ttl_ms;
}

/* Answer a local handoff from the loop (BE_ERROR when the backend is being
 * destroyed, BE_NOTOWNER when its delegation went meanwhile). */
static void
on_local(struct later_item *it)
{
	struct rd_local *lo = (struct rd_local *)(void *)((char *)it -
	    offsetof(struct rd_local, later));
	struct rd *r = lo->r;
	struct be_reply rep = { .status = BE_OK, .fence = lo->fence, .valid_ms = lo->valid_ms };
	if (r->destroying)
		rep = (struct be_reply){ .status = BE_ERROR, .why = "the backend is shutting down" };
	else if (lo->grant && lo->d == NULL)
		rep = (struct be_reply){ .status = BE_NOTOWNER, .why = "the lease had ended in redis" };
	TAILQ_REMOVE(&r->locals, lo, entry);
	lo->cb(lo->arg, &rep);
	free(lo);
}

/* Answer cb from the loop: BE_OK, with a grant under d's lease (fence,
 * valid_ms) when d is not NULL. */
static void
local_answer(struct rd *r, be_cb *cb, void *arg, struct rd_deleg *d, uint64_t fence,
    uint64_t valid_ms)
{
	struct rd_local *lo = xcalloc(1, sizeof(*lo));
	lo->r = r;
	lo->cb = cb;
	lo->arg = arg;
	lo->grant = d != NULL;
	lo->d = d;
	lo->fence = fence;
	lo->valid_ms = valid_ms;
	TAILQ_INSERT_TAIL(&r->locals, lo, entry);
	later_add(r->later, &lo->later, on_local);
}

void
deleg_answer(struct rd *r, be_cb *cb, void *arg)
{
	local_answer(r, cb, arg, NULL, 0, 0);
}

/* Grant d's lease to l locally: l holds it with the next fence reserved,
 * until the lease's end; cb is told from the loop. */
void
deleg_hand(struct rd *r, struct rd_deleg *d, const struct be_lock *l, uint64_t now,
    be_cb *cb, void *arg)
{
	deleg_uncache(r, d);
	memcpy(d->holder, l->token, TOKEN_LEN);
	local_answer(r, cb, arg, d, d->fence_next++, d->lease_end - now);
}

/* The fences an acquire or transfer for l reserves: one, or for an exclusive
 * lease with waiters queued behind, one for each at most, and no more than
 * handoff_limit (a call to Redis at least every handoff_limit grants, where
 * a waiting daemon is seen); handoff_limit when released leases are cached,
 * for the LOCKs that may come while it is. */
unsigned
deleg_fences(const struct rd *r, const struct be_lock *l)
{
	uint64_t n = (uint64_t)l->queued + 1;
	if (l->mode != LOCK_EXCLUSIVE)
		return 1;
	if (r->set->lease_cache_ms > 0 && !l->detached)
		n = (uint64_t)r->set->handoff_limit;	/* for LOCKs after the release */
	return n < (uint64_t)r->set->handoff_limit ? (unsigned)n : (unsigned)r->set->handoff_limit;
}

/* The member of l's lease in Redis: its own, or the delegated lease's when
 * l holds the key's delegation. */
void
deleg_member(const struct rd *r, const struct be_lock *l, char out[RSCRIPT_MEMBER_MAX])
{
	const struct rd_deleg *d = deleg_of(r, l);
	if (d != NULL)
		memcpy(out, d->member, RSCRIPT_MEMBER_MAX);
	else
		rscript_member(l, out);
}

/* ---- the lease cache ---------------------------------------------------- */

/* Release d's lease in Redis (kept for later while disconnected) and forget
 * d. Nobody here holds it. */
void
deleg_release(struct rd *r, struct rd_deleg *d)
{
	uint64_t now = clock_ms();
	struct be_lock l = { .key = d->key, .keylen = d->keylen,
	    .ttl_ms = d->lease_end > now ? d->lease_end - now : 1 };
	r->give_back(r, &l, d->member);
	deleg_drop(r, d);
}

/* Arm ev_cache for the oldest cached lease. */
static void
cache_arm(struct rd *r)
{
	struct rd_deleg *d = TAILQ_FIRST(&r->cached);
	uint64_t now = clock_ms();
	if (d == NULL) {
		evtimer_del(r->ev_cache);
		return;
	}
	struct timeval tv = clock_tv(d->cache_until > now ? d->cache_until - now : 0);
	evtimer_add(r->ev_cache, &tv);
}

void
deleg_on_cache(evutil_socket_t fd, short what, void *arg)
{
	struct rd *r = arg;
	struct rd_deleg *d;
	uint64_t now = clock_ms();
	(void)fd;
	(void)what;
	while ((d = TAILQ_FIRST(&r->cached)) != NULL && d->cache_until <= now)
		deleg_release(r, d);
	cache_arm(r);
}

/*
 * l's holder releases d's lease: keep it for lease_cache_ms, for a LOCK of
 * the key from this daemon to take without Redis, when that can be of use
 * (a fence is left, the lease outlasts the cache time, no other daemon asked
 * for the key, the daemon is not shutting down). Whether it was kept.
 */
bool
deleg_cache_keep(struct rd *r, struct rd_deleg *d)
{
	uint64_t now = clock_ms(), keep = (uint64_t)r->set->lease_cache_ms;
	if (keep == 0 || r->draining || d->wanted || d->fence_next > d->fence_last ||
	    d->lease_end <= now + keep)
		return false;
	d->holder[0] = '\0';
	d->cache_until = now + keep;
	TAILQ_INSERT_TAIL(&r->cached, d, centry);	/* keep is the same for all */
	if (TAILQ_FIRST(&r->cached) == d)
		cache_arm(r);
	return true;
}

/* Another daemon asked for key (a message on the "wanted" channel): a
 * cached lease of it goes at once; a held one is not cached when released. */
void
deleg_wanted(struct rd *r, const char *key, size_t keylen)
{
	struct rd_deleg *d = deleg_find(r, key, keylen);
	if (d == NULL)
		return;
	if (d->cache_until != 0)
		deleg_release(r, d);
	else
		d->wanted = true;
}

void
deleg_release_cached(struct rd *r)
{
	struct rd_deleg *d;
	while ((d = TAILQ_FIRST(&r->cached)) != NULL)
		deleg_release(r, d);
	cache_arm(r);
}

size_t
deleg_cached(const struct rd *r)
{
	const struct rd_deleg *d;
	size_t n = 0;
	TAILQ_FOREACH(d, &r->cached, centry)
		n++;
	return n;
}

/*
 * The command connection dropped: Redis may have restarted without its
 * data, and another daemon may take a key from the new Redis at once, with
 * a fence above every one reserved here. So what this daemon reserved
 * before is trusted no more: cached leases are released (when the
 * connection is back), and the fences left of a held delegation are given
 * up, so that the next handoff or LOCK of the key asks Redis, which tells
 * whether the lease survived. A holder keeps its lock until its renewal
 * says otherwise, as any holder does.
 */
void
deleg_distrust(struct rd *r)
{
	struct hashtab_iter it;
	struct hashtab_node *n;
	deleg_release_cached(r);
	hashtab_iter_init(&it, r->delegs);
	while ((n = hashtab_next(&it)) != NULL) {
		struct rd_deleg *d = deleg_node(n);
		d->fence_next = d->fence_last + 1;
	}
}

void
deleg_free_all(struct rd *r)
{
	struct hashtab_iter it;
	struct hashtab_node *n;
	hashtab_iter_init(&it, r->delegs);
	while ((n = hashtab_next(&it)) != NULL)
		deleg_drop(r, deleg_node(n));
}
