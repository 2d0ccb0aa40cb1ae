/*
 * locktab — the lock table.
 *
 * It owns lock semantics: keys, holdings, FIFO waiters, reentrancy, sessions
 * (owners), leases as the backend promised them, fences it was given, and
 * the deadlines that follow from them. It must know nothing of sockets,
 * timers or any backend's wire format, nor decide anything a backend
 * decides (which daemon goes next, how long to wait for another): it asks
 * the backend through struct backend_ops and acts on the answers.
 *
 * State is list membership:
 *  - a waiter is on its key's FIFO list (and its owner's list) from LOCK until
 *    it is granted, times out or is cancelled; it is QUEUED, or ACQUIRING while
 *    the backend decides. Only a run of compatible waiters at the head of the
 *    list is ever ACQUIRING.
 *  - a holding is ACTIVE on its key's list and, when bound, on its owner's
 *    list (detached: on the list of the owner that took it, while that one
 *    lives); LOST when its lease could not be kept: off the key's holders,
 *    still on the owner's list so that the loss can be reported once; GONE
 *    when on no owner's list. A holding lost involuntarily is also a
 *    tombstone on its key's tombs list until its lease's end plus the
 *    lock-delay: the key counts it as held until then. A holding is freed
 *    when it is GONE, not a tombstone, and no backend operation refers to it.
 * Keys live in a hash table (hashtab.c) and are reference counted by their
 * waiters and holdings; a key nobody refers to is kept on an idle list (for
 * its last fence) and the oldest idle keys are freed when there are too many.
 * Deadlines live on a min-heap (heap.c).
 *
 * Leases: a holding's lease end (expires) is set from the reply to the one
 * lease operation of the holding in flight (acquire, transfer, renew or
 * EXTEND): the call's send time plus the validity the backend promises, less
 * the lock-delay (which the backend keeps on top of the holder's TTL). A
 * second EXTEND of the holding, or a renewal falling due meanwhile, waits
 * for that reply.
 *
 * Handoffs: an exclusive holding released while an exclusive waiter heads
 * the queue is handed straight to it (transfer). The table counts the
 * handoffs of a key in a row and tells the backend with each transfer; the
 * backend may refuse one to let other daemons in (BE_BUSY, see backend.h).
 */
#include "locktab.h"
#include "locktab_int.h"

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "clock.h"
#include "hashtab.h"
#include "heap.h"
#include "log.h"
#include "pool.h"
#include "token.h"
#include "who.h"
#include "xmalloc.h"

#define LT_IDLE_KEYS_MAX 4096	/* idle keys kept for their last fence */
#define LT_BUCKETS 1024		/* the key table's first size */
#define LT_RENEW_RETRY_MS 1000	/* longest pause before retrying a renewal */
#define LT_WAIT_RETRY_MIN_MS 50	/* a waiter's first retry after a backend error */
#define LT_WAIT_RETRY_MAX_MS 1000 /* its longest pause between retries */
#define LT_RENEW_QUANTUM_MS 100	/* renewals due within one quantum go together */
#define LT_LOSS_LOG_MS 1000	/* losses after a logged one are summed up this long */
#define LT_SPARE_MAX 1024	/* spare waiters, holdings and operations kept each */

_Static_assert(LT_NEVER == HEAP_NEVER, "a deadline of LT_NEVER is off the heap");

static void pump(struct locktab *lt, struct lt_key *k);
static void hold_release(struct locktab *lt, struct lt_hold *h, struct lt_owner *o,
    lt_done_cb *done, void *arg);

/* ---- time ------------------------------------------------------------- */

static uint64_t
clock_default(void *arg)
{
	(void)arg;
	return clock_ms();
}

uint64_t
locktab_now(const struct locktab *lt)
{
	return lt->clock(lt->clock_arg);
}

/* ---- deadlines ------------------------------------------------------------ */

/* A timer off the heap, for what it is embedded in. */
static void
timer_init(struct lt_timer *t, enum timer_kind kind)
{
	heap_node_init(&t->node);
	t->kind = kind;
}

/* Put t on the heap for when, or move it there (LT_NEVER takes it off). */
static void
timer_set(struct locktab *lt, struct lt_timer *t, uint64_t when)
{
	heap_set(&lt->deadlines, &t->node, when);
}

/* Take t off the heap if it is on it. */
static void
timer_clear(struct locktab *lt, struct lt_timer *t)
{
	heap_clear(&lt->deadlines, &t->node);
}

/* Whether t is on the heap. */
static bool
timer_pending(const struct lt_timer *t)
{
	return t->node.when != HEAP_NEVER;
}

uint64_t
locktab_next_deadline(const struct locktab *lt)
{
	const struct heap_node *n = heap_earliest(&lt->deadlines);
	return n != NULL ? n->when : LT_NEVER;
}

/* The end of every entry point: tell the rearm hook if the earliest
 * deadline moved. */
static void
sync_timer(struct locktab *lt)
{
	uint64_t when = locktab_next_deadline(lt);
	if (when != lt->armed) {
		lt->armed = when;
		if (lt->rearm != NULL)
			lt->rearm(lt->rearm_arg, when);
	}
}

/* ---- keys --------------------------------------------------------------- */

/* The key a hash table node is embedded in. */
static struct lt_key *
key_of(struct hashtab_node *n)
{
	return (struct lt_key *)(void *)((char *)n - offsetof(struct lt_key, hnode));
}

/* The key named name (len bytes), or NULL: it is not in the table. */
struct lt_key *
lt_key_find(const struct locktab *lt, const char *name, size_t len)
{
	struct hashtab_node *n = hashtab_find(lt->keys, name, len);
	return n != NULL ? key_of(n) : NULL;
}

/* Take k out of the table and free it. */
static void
key_free(struct locktab *lt, struct lt_key *k)
{
	hashtab_remove(lt->keys, &k->hnode);
	if (k->idle) {
		TAILQ_REMOVE(&lt->idle, k, ientry);
		lt->nidle--;
	}
	free(k);
}

/* The key named name, created (idle) if needed; the table owns it. The
 * caller must take a reference before returning to the loop. */
static struct lt_key *
key_get(struct locktab *lt, const char *name, size_t len)
{
	struct lt_key *k = lt_key_find(lt, name, len);
	if (k != NULL)
		return k;
	while (lt->nidle >= LT_IDLE_KEYS_MAX)
		key_free(lt, TAILQ_FIRST(&lt->idle));
	k = xcalloc(1, sizeof(*k) + len + 1);
	memcpy(k->name, name, len);
	k->name[len] = '\0';
	k->len = len;
	TAILQ_INIT(&k->holders);
	TAILQ_INIT(&k->tombs);
	TAILQ_INIT(&k->waiters);
	hashtab_insert(lt->keys, &k->hnode, k->name, len);
	/* new keys start idle: the first reference takes them off the list */
	k->idle = true;
	TAILQ_INSERT_TAIL(&lt->idle, k, ientry);
	lt->nidle++;
	return k;
}

/* One more waiter or holding refers to k: it is not idle. */
static void
key_ref(struct locktab *lt, struct lt_key *k)
{
	if (k->refs++ == 0) {
		assert(k->idle);
		TAILQ_REMOVE(&lt->idle, k, ientry);
		lt->nidle--;
		k->idle = false;
		lt->stats.keys++;
	}
}

/* One fewer refers to k; with none left it goes idle (kept for its fence). */
static void
key_unref(struct locktab *lt, struct lt_key *k)
{
	assert(k->refs > 0);
	if (--k->refs == 0) {
		assert(k->nholders == 0 && k->nwaiters == 0 && k->ntombs == 0);
		k->blocked = false;
		k->idle = true;
		TAILQ_INSERT_TAIL(&lt->idle, k, ientry);
		lt->nidle++;
		lt->stats.keys--;
	}
}

/* Is the key used as a semaphore, and with how many permits? From its
 * holdings, else its waiters. Returns false when it is not in use. */
bool
lt_key_kind(const struct lt_key *k, bool *sem, unsigned *limit)
{
	const struct lt_hold *h = TAILQ_FIRST(&k->holders);
	const struct lt_waiter *w = TAILQ_FIRST(&k->waiters);
	if (h != NULL) {
		*sem = h->terms.mode == LOCK_SEMAPHORE;
		*limit = h->terms.limit;
	} else if (w != NULL) {
		*sem = w->terms.mode == LOCK_SEMAPHORE;
		*limit = w->terms.limit;
	} else {
		return false;
	}
	return true;
}

/* Can a waiter of mode/limit be granted next to the holders, acquirers and
 * tombstones (which count as the holdings they were)? */
static bool
key_compatible(const struct lt_key *k, enum lock_mode mode, unsigned limit)
{
	switch (mode) {
	case LOCK_EXCLUSIVE:
		return k->nholders == 0 && k->nacquiring == 0 && k->ntombs == 0;
	case LOCK_SHARED:
		return k->nexcl == 0 && k->ntomb_excl == 0;
	case LOCK_SEMAPHORE:
		return k->nholders + k->nacquiring + k->ntombs < limit;
	}
	return false;
}

/* ---- helpers ------------------------------------------------------------ */

/* Whether leases live in this process (the memory backend). */
static bool
local_leases(const struct locktab *lt)
{
	return lt->be->ops->local_leases != 0;
}

/* The safety margin of a lease of ttl_ms: how long before the lease ends a
 * holding is declared lost, and how much must be left for a grant to be
 * delivered. It covers the drift between this host's clock rate and the
 * backend's over one lease, and the time a holder needs to hear of a loss. */
static uint64_t
lease_margin(const struct locktab *lt, uint64_t ttl_ms)
{
	return ttl_ms * lt->limits.margin_percent / 100;
}

/* The end of a holder's lease set by a call made at sent_at whose reply
 * promised valid_ms: the lock-delay at its end is for nobody. */
static uint64_t
lease_end(const struct locktab *lt, uint64_t sent_at, uint64_t valid_ms)
{
	uint64_t delay = lt->limits.lock_delay_ms;
	return valid_ms > delay ? sent_at + valid_ms - delay : sent_at;
}

/* The margin of a lease of a holder's ttl_ms that the backend promised for
 * span_ms at most: of the shorter of the two (a backend whose lease is the
 * daemon's, not the holder's, may promise less than the TTL). */
static uint64_t
hold_margin(const struct locktab *lt, uint64_t ttl_ms, uint64_t span_ms)
{
	return lease_margin(lt, span_ms < ttl_ms ? span_ms : ttl_ms);
}

/* When a bound holding is declared lost if no renewal succeeded. */
static uint64_t
hold_lost_at(const struct locktab *lt, const struct lt_hold *h)
{
	uint64_t m = hold_margin(lt, h->ttl_ms, h->span);
	return h->expires > m ? h->expires - m : 0;
}

/* Whether an ACTIVE holding's lease can be relied on at now. */
bool
lt_hold_valid(const struct locktab *lt, const struct lt_hold *h, uint64_t now)
{
	if (h->owner != NULL && local_leases(lt))
		return true;
	return now < (h->owner != NULL ? hold_lost_at(lt, h) : h->expires);
}

/* The validity a holder is told of: what is left of its lease, or the whole
 * TTL of a session lease that lives in this process. */
uint64_t
lt_hold_left(const struct locktab *lt, const struct lt_hold *h, uint64_t now)
{
	if (h->owner != NULL && local_leases(lt))
		return h->ttl_ms;
	return h->expires > now ? h->expires - now : 0;
}

/* When to renew a lease valid for span_ms from sent_at: after a third of it,
 * rounded up to a quantum so that the renewals falling due together go to
 * the backend in one batch (one pipeline). Short leases are not rounded. */
static uint64_t
renew_time(uint64_t sent_at, uint64_t span_ms)
{
	uint64_t t = sent_at + span_ms / 3;
	if (span_ms / 3 >= 2 * LT_RENEW_QUANTUM_MS)
		t = (t + LT_RENEW_QUANTUM_MS - 1) / LT_RENEW_QUANTUM_MS * LT_RENEW_QUANTUM_MS;
	return t;
}

/* The backend's view of the lease t of key k for a holder's ttl_ms: the
 * backend keeps it for the lock-delay on top. The one place a be_lock is
 * built; its strings point into k and t. */
static struct be_lock
lease_of(const struct locktab *lt, const struct lt_key *k, const struct lt_terms *t,
    uint64_t ttl_ms)
{
	struct be_lock l = {
		.key = k->name,
		.keylen = k->len,
		.mode = t->mode,
		.limit = t->limit,
		.token = t->token,
		.ttl_ms = ttl_ms + lt->limits.lock_delay_ms,
		.handoffs = 0,
		.detached = t->detached,
	};
	return l;
}

/* A new operation record, in flight until op_free; the table owns it. The
 * command of o waits on it when done is not NULL. */
static struct lt_op *
op_new(struct locktab *lt, enum op_kind kind, struct lt_owner *o, lt_done_cb *done,
    void *arg)
{
	struct lt_op *op = pool_get(&lt->op_pool);
	op->lt = lt;
	op->kind = kind;
	op->sent_at = locktab_now(lt);
	if (o != NULL && done != NULL) {
		op->owner = o;
		op->done = done;
		op->arg = arg;
		TAILQ_INSERT_TAIL(&o->ops, op, oentry);
	}
	lt->inflight++;
	return op;
}

/* Forget an operation record; its owner no longer waits on it. */
static void
op_free(struct lt_op *op)
{
	struct locktab *lt = op->lt;
	if (op->owner != NULL)
		TAILQ_REMOVE(&op->owner->ops, op, oentry);
	lt->inflight--;
	pool_put(&lt->op_pool, op);
}

/* Tell the command waiting on op, if its owner still lives. */
static void
op_done(struct lt_op *op, enum lt_status st, const struct lt_grant *g, long long value)
{
	if (op->done != NULL)
		op->done(op->arg, st, g, value);
}

/* ---- logging ------------------------------------------------------------ */

/* Tell the measure hook that what took from start until now. */
static void
measure(struct locktab *lt, enum lt_measure what, uint64_t start)
{
	uint64_t now;
	if (lt->measure == NULL)
		return;
	now = locktab_now(lt);
	lt->measure(lt->measure_arg, what, now > start ? now - start : 0);
}

/* k's name escaped for a key=value log line (spaces too); returns buf. */
static const char *
key_log(char *buf, size_t size, const struct lt_key *k)
{
	return log_escape(buf, size, k->name, k->len, LOG_ESC_SPACE);
}

/* The id of owner o for logs, 0 for none. */
static unsigned long long
owner_log_id(const struct lt_owner *o)
{
	return o != NULL ? (unsigned long long)o->id : 0;
}

/* Log a loss: the first of a burst at once, the others of the next
 * LT_LOSS_LOG_MS in one summary line, so that an outage that takes many
 * locks logs two lines. Each loss is logged alone at debug level. */
static void
note_loss(struct locktab *lt, const struct lt_hold *h, const char *reason)
{
	char kb[LOG_KEY_BUF], rb[LOG_KEY_BUF];
	if (log_min_level <= LOG_LEVEL_DEBUG)
		log_debug("lost key=%s fence=%llu session=%llu reason=\"%s\"",
		    key_log(kb, sizeof(kb), h->key), (unsigned long long)h->fence,
		    (unsigned long long)h->owner_id,
		    log_escape(rb, sizeof(rb), reason, strlen(reason), 0));
	log_escape(kb, sizeof(kb), h->key->name, h->key->len, 0);
	if (!timer_pending(&lt->log_timer)) {
		log_warn("lock lost: key '%s' fence %llu: %s", kb, (unsigned long long)h->fence,
		    reason);
		timer_set(lt, &lt->log_timer, locktab_now(lt) + LT_LOSS_LOG_MS);
	} else if (lt->unlogged_losses++ == 0) {
		memcpy(lt->loss_key, kb, sizeof(kb));
		snprintf(lt->loss_reason, sizeof(lt->loss_reason), "%s", reason);
	}
}

/* The end of a loss window: sum up what it held back. */
static void
log_losses(struct locktab *lt)
{
	if (lt->unlogged_losses > 0)
		log_warn("%llu more lock%s lost within %d ms, the first key '%s': %s",
		    (unsigned long long)lt->unlogged_losses, lt->unlogged_losses > 1 ? "s" : "",
		    LT_LOSS_LOG_MS, lt->loss_key, lt->loss_reason);
	lt->unlogged_losses = 0;
}

/* Renewals started failing, or work again: one line per change. */
static void
note_renewal(struct locktab *lt, bool ok, const char *why)
{
	if (ok && lt->renew_failing)
		log_info("lease renewals succeed again");
	else if (!ok && !lt->renew_failing)
		log_warn("lease renewals are failing (%s); each lock is lost if its renewals "
		    "fail until only its safety margin is left", why ? why : "backend error");
	lt->renew_failing = !ok;
}

/* ---- holdings ----------------------------------------------------------- */

/* Reschedule a holding's timer from its state. */
static void
hold_schedule(struct locktab *lt, struct lt_hold *h)
{
	uint64_t when;
	if (h->tomb)
		when = h->tomb_until;
	else if (h->state != H_ACTIVE)
		when = LT_NEVER;
	else if (h->owner != NULL && local_leases(lt))
		when = LT_NEVER;	/* lives exactly as long as its session */
	else if (h->owner == NULL)
		when = h->expires;
	else {
		uint64_t lost_at = hold_lost_at(lt, h);
		when = h->lease_op != NULL || h->renew_at > lost_at ? lost_at : h->renew_at;
	}
	timer_set(lt, &h->timer, when);
}

/* Free a holding that is GONE, not a tombstone, and that no operation
 * refers to. */
static void
hold_maybe_free(struct locktab *lt, struct lt_hold *h)
{
	if (h->state != H_GONE || h->tomb || h->ops > 0)
		return;
	key_unref(lt, h->key);
	free(h->value);
	pool_put(&lt->hold_pool, h);
}

/* h's renewals fail (suspended), or succeed again: count it, and tell its
 * owner when tell (it stays held). */
static void
hold_suspend(struct locktab *lt, struct lt_hold *h, bool suspended, const char *reason,
    bool tell)
{
	struct lt_owner *o = h->owner;
	if (h->suspended == suspended || o == NULL)
		return;
	h->suspended = suspended;
	if (suspended && o->nsuspended++ == 0)
		lt->stats.suspended++;
	else if (!suspended && --o->nsuspended == 0)
		lt->stats.suspended--;
	if (tell && o->suspend != NULL)
		o->suspend(o->arg, h->key->name, h->key->len, h->fence, suspended,
		    suspended ? reason : NULL);
}

/* Take an ACTIVE holding off its key, and a detached one off its creator. */
static void
hold_unlink_key(struct locktab *lt, struct lt_hold *h)
{
	struct lt_key *k = h->key;
	assert(h->state == H_ACTIVE);
	hold_suspend(lt, h, false, NULL, false);	/* what follows is told */
	TAILQ_REMOVE(&k->holders, h, kentry);
	k->nholders--;
	if (h->terms.mode == LOCK_EXCLUSIVE)
		k->nexcl--;
	lt->stats.holds--;
	lt_changed(lt, k);
	timer_clear(lt, &h->timer);
	if (h->owner != NULL)
		h->owner->nholds--;
	if (h->creator != NULL) {
		TAILQ_REMOVE(&h->creator->detached, h, oentry);
		h->creator->ndetached--;
		h->creator = NULL;
	}
}

/* Move a holding to GONE: off its key and its owner; freed when no
 * operation needs it and its tombstone (if any) has ended. */
static void
hold_gone(struct locktab *lt, struct lt_hold *h)
{
	if (h->state == H_ACTIVE)
		hold_unlink_key(lt, h);
	if (h->owner != NULL)
		TAILQ_REMOVE(&h->owner->holds, h, oentry);
	h->owner = NULL;
	h->state = H_GONE;
	hold_maybe_free(lt, h);
}

/* ---- backend completions ------------------------------------------------ */

static void waiter_free(struct locktab *lt, struct lt_waiter *w);
static void waiter_fail(struct locktab *lt, struct lt_waiter *w, enum lt_status st);
static bool waiter_requeue(struct locktab *lt, struct lt_waiter *w);

/* Tell the command waiting on op the outcome of a release or a PROCLAIM:
 * done, lost (the lease was not ours), or the backend failed. */
static void
op_done_simple(struct lt_op *op, const struct be_reply *r)
{
	if (r->status == BE_OK) {
		op_done(op, LT_OK, NULL, 0);
	} else if (r->status == BE_NOTOWNER) {
		op_done(op, LT_E_LOST, NULL, 0);
	} else {
		op->lt->stats.backend_errors++;
		op_done(op, LT_E_BACKEND, NULL, 0);
	}
}

/* The backend answered a release: tell the command waiting on it, if any. */
static void
on_release(void *arg, const struct be_reply *r)
{
	struct lt_op *op = arg;
	struct locktab *lt = op->lt;
	measure(lt, LT_M_RELEASE, op->sent_at);
	op_done_simple(op, r);
	op_free(op);
	sync_timer(lt);
}

/* Release a lease: done (if not NULL) is told when the backend answers. */
static void
release_lease(struct locktab *lt, const struct be_lock *l, struct lt_owner *o,
    lt_done_cb *done, void *arg)
{
	struct lt_op *op = op_new(lt, OP_RELEASE, o, done, arg);
	lt->be->ops->release(lt->be, l, on_release, op);
}

/* Fire-and-forget release of a lease nobody holds. */
static void
release_quietly(struct locktab *lt, const struct be_lock *l)
{
	release_lease(lt, l, NULL, NULL, NULL);
}

/*
 * A holding's lease could not be kept: take it off the key and tell its
 * owner. The key stays held by its tombstone, here and (through the lease,
 * which is not released) elsewhere, until the lease has ended plus the
 * lock-delay: the holder may not have heard yet. gone: the backend says the
 * lease has already ended (another owner has it).
 */
static void
hold_lose(struct locktab *lt, struct lt_hold *h, const char *reason, bool gone)
{
	struct lt_key *k = h->key;
	uint64_t now = locktab_now(lt);
	uint64_t until = (gone ? now : h->expires) + lt->limits.lock_delay_ms;

	note_loss(lt, h, reason);
	lt->stats.lost++;
	key_ref(lt, k);
	hold_unlink_key(lt, h);
	if (until > now) {
		h->tomb = true;
		h->tomb_until = until;
		TAILQ_INSERT_TAIL(&k->tombs, h, kentry);
		k->ntombs++;
		if (h->terms.mode == LOCK_EXCLUSIVE)
			k->ntomb_excl++;
		hold_schedule(lt, h);
	} else if (!gone) {
		/* its end has passed already: a renewal that was still on its
		 * way may have kept the lease, so let it go */
		struct be_lock l = lease_of(lt, h->key, &h->terms, h->ttl_ms);
		release_quietly(lt, &l);
	}
	if (h->owner != NULL) {
		h->state = H_LOST;
		if (h->owner->lost != NULL)
			h->owner->lost(h->owner->arg, k->name, k->len, h->fence, reason);
	} else {
		h->state = H_GONE;
	}
	pump(lt, k);
	hold_maybe_free(lt, h);
	key_unref(lt, k);
}

/* h's lease was broken by UNLOCK FORCE through another daemon (why: by
 * whom): logged, whatever the rate of losses (an audit line), its holder
 * told, then the broken lease released (it keeps the key from others until
 * then), in this same turn of the loop. */
static void
hold_forced(struct locktab *lt, struct lt_hold *h, const char *why)
{
	char kb[LOG_KEY_BUF];
	struct lt_key *k = h->key;
	struct lt_terms terms = h->terms;
	uint64_t ttl_ms = h->ttl_ms;
	log_warn("UNLOCK FORCE through another daemon: key '%s' fence %llu of session %llu "
	    "broken (%s)", log_escape(kb, sizeof(kb), k->name, k->len, 0),
	    (unsigned long long)h->fence, (unsigned long long)h->owner_id,
	    why != NULL ? why : "forced");
	key_ref(lt, k);		/* h may go with the loss; the key stays */
	hold_lose(lt, h, why != NULL ? why : "forced through another daemon", true);
	struct be_lock l = lease_of(lt, k, &terms, ttl_ms);
	release_quietly(lt, &l);
	key_unref(lt, k);
}

/* A tombstone's time is over: the key is free of it. The lease is released
 * in case a renewal that was on its way when the holding was lost kept it. */
static void
tomb_end(struct locktab *lt, struct lt_hold *h)
{
	struct lt_key *k = h->key;
	struct be_lock l = lease_of(lt, h->key, &h->terms, h->ttl_ms);
	assert(h->tomb);
	TAILQ_REMOVE(&k->tombs, h, kentry);
	k->ntombs--;
	if (h->terms.mode == LOCK_EXCLUSIVE)
		k->ntomb_excl--;
	h->tomb = false;
	release_quietly(lt, &l);
	key_ref(lt, k);
	hold_maybe_free(lt, h);
	pump(lt, k);
	key_unref(lt, k);
}

/*
 * The backend granted w (fence, lease promised by r) for a call made at
 * sent_at. Deliver it, unless the waiter is gone, or too little of the lease
 * is left to be of use: then the lease is given back, and w stays queued for
 * another try (or is told LT_NOT_GRANTED when its WAIT is over).
 */
static void
waiter_granted(struct locktab *lt, struct lt_waiter *w, const struct be_reply *r,
    uint64_t sent_at)
{
	struct lt_key *k = w->key;
	struct lt_owner *o = w->owner;
	struct be_lock l = lease_of(lt, w->key, &w->terms, w->ttl_ms);
	uint64_t now = locktab_now(lt);

	if (local_leases(lt))
		sent_at = now;	/* a lease in this process starts when granted */
	uint64_t end = lease_end(lt, sent_at, r->valid_ms);

	if (r->fence > k->last_fence)
		k->last_fence = r->fence;
	if (o == NULL || lt->closing) {
		/* cancelled while the backend decided, or the table is shutting
		 * down: give it back (a cancelled waiter is not told) */
		release_quietly(lt, &l);
		waiter_fail(lt, w, LT_E_CLOSING);
		return;
	}
	if (!local_leases(lt) && (end <= now ||
	    end - now <= hold_margin(lt, w->ttl_ms, r->valid_ms))) {
		char kb[LOG_KEY_BUF];
		log_debug("grant of '%s' came with %lld ms of its lease left: not delivered",
		    log_escape(kb, sizeof(kb), k->name, k->len, 0),
		    (long long)end - (long long)now);
		lt->stats.late_grants++;
		release_quietly(lt, &l);
		if (waiter_requeue(lt, w))
			token_new(w->terms.token);	/* the next try is a new lease */
		return;
	}
	struct lt_hold *h = pool_get(&lt->hold_pool);
	timer_init(&h->timer, TIMER_HOLD);
	h->key = k;
	key_ref(lt, k);
	h->terms = w->terms;
	h->fence = r->fence;
	h->ttl_ms = w->ttl_ms;
	h->count = 1;
	h->owner_id = o->id;
	h->granted_at = now;
	h->expires = end;
	h->span = r->valid_ms;
	h->renew_at = renew_time(sent_at, end - sent_at);
	h->state = H_ACTIVE;
	h->value = w->value;	/* the holding takes it over */
	h->valuelen = w->valuelen;
	w->value = NULL;
	TAILQ_INIT(&h->lease_queue);
	TAILQ_INSERT_TAIL(&k->holders, h, kentry);
	k->nholders++;
	if (h->terms.mode == LOCK_EXCLUSIVE)
		k->nexcl++;
	lt_changed(lt, k);
	if (w->detach) {
		h->creator = o;
		TAILQ_INSERT_TAIL(&o->detached, h, oentry);
		o->ndetached++;
	} else {
		h->owner = o;
		TAILQ_INSERT_TAIL(&o->holds, h, oentry);
		o->nholds++;
	}
	lt->stats.holds++;
	lt->stats.grants++;
	hold_schedule(lt, h);
	measure(lt, LT_M_WAIT, w->queued_at);
	if (log_min_level <= LOG_LEVEL_DEBUG) {
		char kb[LOG_KEY_BUF];
		log_debug("grant key=%s fence=%llu session=%llu mode=%s waited_ms=%llu",
		    key_log(kb, sizeof(kb), k), (unsigned long long)h->fence, owner_log_id(o),
		    locktab_mode_name(h->terms.mode), (unsigned long long)(now - w->queued_at));
	}

	struct lt_grant g;
	memcpy(g.token, h->terms.token, sizeof(g.token));
	g.fence = h->fence;
	g.ttl_ms = lt_hold_left(lt, h, now);
	g.count = 1;
	g.mode = h->terms.mode;
	lt_done_cb *done = w->done;
	void *arg = w->arg;
	waiter_free(lt, w);
	done(arg, LT_OK, &g, 0);
}

/* A waiter leaves without a grant: tell its LOCK st (if it still waits). */
static void
waiter_fail(struct locktab *lt, struct lt_waiter *w, enum lt_status st)
{
	lt_done_cb *done = w->owner != NULL ? w->done : NULL;
	void *arg = w->arg;
	if (st == LT_NOT_GRANTED) {
		lt->stats.timeouts++;
		if (log_min_level <= LOG_LEVEL_DEBUG) {
			char kb[LOG_KEY_BUF];
			log_debug("timeout key=%s session=%llu waited_ms=%llu",
			    key_log(kb, sizeof(kb), w->key), owner_log_id(w->owner),
			    (unsigned long long)(locktab_now(lt) - w->queued_at));
		}
	}
	waiter_free(lt, w);
	if (done != NULL)
		done(arg, st, NULL, 0);
}

/* A try of w (QUEUED again) did not grant it: it waits on until its WAIT is
 * over, or is told LT_NOT_GRANTED now when that is over, when it was WAIT 0,
 * or (not told) when it was cancelled. Whether it still waits. */
static bool
waiter_requeue(struct locktab *lt, struct lt_waiter *w)
{
	assert(w->state == W_QUEUED);
	if (w->owner == NULL || w->try_once || w->deadline <= locktab_now(lt)) {
		waiter_fail(lt, w, LT_NOT_GRANTED);
		return false;
	}
	timer_set(lt, &w->timer, w->deadline);
	return true;
}

/* The backend answered about k (not an error): its queue waits no more
 * for the backend to come back. */
static void
backend_answers(struct lt_key *k)
{
	k->backend_failing = false;
	k->backend_retries = 0;
}

/*
 * The backend failed w's try (QUEUED again) with r. A waiter with WAIT left
 * waits through the outage: its key's queue is blocked until the backend's
 * wakeup (it came back) or w's retry, backed off from LT_WAIT_RETRY_MIN_MS to
 * LT_WAIT_RETRY_MAX_MS, and a WAIT that runs out meanwhile is answered
 * -BACKEND. Whether w waits on; false for WAIT 0, a cancelled or expired
 * waiter, a closing table, or an error that lasts (the configuration),
 * which the caller answers at once.
 */
static bool
waiter_wait_through(struct locktab *lt, struct lt_waiter *w, const struct be_reply *r)
{
	struct lt_key *k = w->key;
	uint64_t now = locktab_now(lt), delay = LT_WAIT_RETRY_MIN_MS, at;
	if (r->lasting || w->owner == NULL || w->try_once || lt->closing || w->deadline <= now)
		return false;
	for (unsigned i = 0; i < k->backend_retries && delay < LT_WAIT_RETRY_MAX_MS; i++)
		delay *= 2;
	if (delay > LT_WAIT_RETRY_MAX_MS)
		delay = LT_WAIT_RETRY_MAX_MS;
	/* the next try is a new lease: what the failed one may have left is
	 * being given back under the old token, and must not take the new
	 * one with it */
	token_new(w->terms.token);
	k->backend_retries++;
	k->backend_failing = true;
	k->blocked = true;
	at = now + delay;
	w->retrying = at < w->deadline;
	timer_set(lt, &w->timer, w->retrying ? at : w->deadline);
	lt->stats.backend_waits++;
	return true;
}

/* The backend answered w BE_BUSY: the key is taken beyond this process, or
 * the backend gave way to other daemons. The key's queue waits for the
 * backend's wakeup; w waits on as waiter_requeue says. A try (WAIT 0) left
 * no wait in the backend, which owes it no wakeup: the waiter behind it
 * asks for itself. */
static void
waiter_busy(struct locktab *lt, struct lt_waiter *w)
{
	backend_answers(w->key);
	if (!w->try_once)
		w->key->blocked = true;
	if (lt->closing)
		waiter_fail(lt, w, LT_E_CLOSING);
	else
		waiter_requeue(lt, w);
}

/* The end of an ACQUIRING state, whatever the outcome. */
static void
waiter_settle(struct lt_waiter *w)
{
	assert(w->state == W_ACQUIRING);
	w->state = W_QUEUED;
	w->key->nacquiring--;
	if (w->terms.mode == LOCK_EXCLUSIVE)
		w->key->nexcl--;
}

/* The backend answered an acquire of op->w: grant it, keep it waiting for a
 * wakeup (BE_BUSY), or fail it. */
static void
on_acquire(void *arg, const struct be_reply *r)
{
	struct lt_op *op = arg;
	struct locktab *lt = op->lt;
	struct lt_waiter *w = op->w;
	struct lt_key *k = w->key;
	uint64_t sent_at = op->sent_at;
	measure(lt, LT_M_ACQUIRE, sent_at);
	op_free(op);
	waiter_settle(w);
	key_ref(lt, k);	/* keep k while its waiter may go */
	switch (r->status) {
	case BE_OK:
		k->handoffs = 0;	/* a new run of handoffs starts */
		backend_answers(k);
		waiter_granted(lt, w, r, sent_at);
		break;
	case BE_BUSY:
		/* held beyond this process: the head waits for a wakeup */
		waiter_busy(lt, w);
		break;
	case BE_NOTOWNER:
	case BE_ERROR: {
		char kb[LOG_KEY_BUF];
		lt->stats.backend_errors++;
		log_debug("backend could not lock '%s': %s",
		    log_escape(kb, sizeof(kb), k->name, k->len, 0), r->why ? r->why : "error");
		if (r->status == BE_NOTOWNER || !waiter_wait_through(lt, w, r))
			waiter_fail(lt, w, LT_E_BACKEND);
		break;
	}
	}
	pump(lt, k);
	key_unref(lt, k);
	sync_timer(lt);
}

/* The backend answered a transfer from op->h to op->w: the UNLOCK that
 * started it is told of the old lease, the waiter of the new one. */
static void
on_transfer(void *arg, const struct be_reply *r)
{
	struct lt_op *op = arg;
	struct locktab *lt = op->lt;
	struct lt_waiter *w = op->w;
	struct lt_hold *h = op->h;
	struct lt_key *k = w->key;
	uint64_t sent_at = op->sent_at;
	measure(lt, LT_M_TRANSFER, sent_at);
	waiter_settle(w);
	key_ref(lt, k);
	switch (r->status) {
	case BE_OK:
		lt->stats.handoffs++;
		k->handoffs++;
		backend_answers(k);
		if (log_min_level <= LOG_LEVEL_DEBUG) {
			char kb[LOG_KEY_BUF];
			log_debug("handoff key=%s from=%llu to=%llu fence=%llu",
			    key_log(kb, sizeof(kb), k), (unsigned long long)h->owner_id,
			    owner_log_id(w->owner), (unsigned long long)r->fence);
		}
		op_done(op, LT_OK, NULL, 0);
		waiter_granted(lt, w, r, sent_at);
		break;
	case BE_BUSY:
		/* the backend released the old lease and gave way to other
		 * daemons: the UNLOCK is done, and the waiter waits for the
		 * wakeup that follows, as after a busy acquire */
		k->handoffs = 0;
		op_done(op, LT_OK, NULL, 0);
		waiter_busy(lt, w);
		break;
	case BE_NOTOWNER:
		/* the old lease had ended: the waiter acquires as usual,
		 * unless the table is shutting down */
		op_done(op, LT_E_LOST, NULL, 0);
		if (lt->closing)
			waiter_fail(lt, w, LT_E_CLOSING);
		break;
	case BE_ERROR: {
		/* the old lease may still be there: release it (a backend
		 * that is down sends that when it is back) */
		struct be_lock l = lease_of(lt, h->key, &h->terms, h->ttl_ms);
		lt->stats.backend_errors++;
		release_quietly(lt, &l);
		op_done(op, LT_E_BACKEND, NULL, 0);
		if (!waiter_wait_through(lt, w, r))
			waiter_fail(lt, w, LT_E_BACKEND);
		break;
	}
	}
	op_free(op);
	h->ops--;
	hold_maybe_free(lt, h);
	pump(lt, k);
	key_unref(lt, k);
	sync_timer(lt);
}

static void on_lease(void *arg, const struct be_reply *r);

/* Send a renewal or EXTEND of h: it is the one lease operation of h in
 * flight until its reply. */
static void
lease_send(struct locktab *lt, struct lt_hold *h, struct lt_op *op)
{
	struct be_lock l = lease_of(lt, h->key, &h->terms, op->ttl_ms);
	assert(h->lease_op == NULL);
	h->lease_op = op;
	op->sent_at = locktab_now(lt);
	lt->be->ops->renew(lt->be, &l, on_lease, op);
}

/* h's lease operation is over: send the next EXTEND waiting for it, or,
 * when h is no longer held, answer them all. */
static void
lease_next(struct locktab *lt, struct lt_hold *h)
{
	struct lt_op *op;
	while (h->lease_op == NULL && (op = TAILQ_FIRST(&h->lease_queue)) != NULL) {
		TAILQ_REMOVE(&h->lease_queue, op, qentry);
		if (h->state == H_ACTIVE) {
			lease_send(lt, h, op);
			hold_schedule(lt, h);
			return;
		}
		op_done(op, LT_E_LOST, NULL, 0);
		op_free(op);
		h->ops--;
	}
}

/* The reply to a renewal or an EXTEND: only it may move the lease's end. */
static void
on_lease(void *arg, const struct be_reply *r)
{
	struct lt_op *op = arg;
	struct locktab *lt = op->lt;
	struct lt_hold *h = op->h;
	uint64_t now = locktab_now(lt);

	assert(h->lease_op == op);
	h->lease_op = NULL;
	measure(lt, LT_M_RENEW, op->sent_at);
	if (h->state == H_ACTIVE) {
		switch (r->status) {
		case BE_OK:
			if (op->kind == OP_RENEW)
				note_renewal(lt, true, NULL);
			else
				h->ttl_ms = op->ttl_ms;
			if (local_leases(lt))
				op->sent_at = now;	/* in this process: from now */
			h->expires = lease_end(lt, op->sent_at, r->valid_ms);
			if (r->valid_ms > h->span)
				h->span = r->valid_ms;
			h->renew_at = renew_time(op->sent_at, h->expires - op->sent_at);
			hold_suspend(lt, h, false, NULL, true);
			break;
		case BE_BUSY:
		case BE_NOTOWNER:
			if (r->status == BE_NOTOWNER && r->forced)
				hold_forced(lt, h, r->why);
			else
				hold_lose(lt, h, r->why ? r->why :
				    "the lease is held by another owner", true);
			break;
		case BE_ERROR: {
			uint64_t retry = h->ttl_ms / 10;
			lt->stats.backend_errors++;
			if (op->kind == OP_RENEW) {
				note_renewal(lt, false, r->why);
				hold_suspend(lt, h, true, r->why != NULL ? r->why :
				    "the backend failed", true);
				if (retry > LT_RENEW_RETRY_MS)
					retry = LT_RENEW_RETRY_MS;
				h->renew_at = now + (retry ? retry : 1);
			}
			break;
		}
		}
		if (h->state == H_ACTIVE)
			hold_schedule(lt, h);
	}
	if (op->kind == OP_EXTEND) {
		if (h->state != H_ACTIVE)
			/* lost or released while the EXTEND was out */
			op_done(op, LT_E_LOST, NULL, 0);
		else if (r->status == BE_OK)
			op_done(op, LT_OK, NULL, (long long)lt_hold_left(lt, h, now));
		else if (r->status == BE_ERROR)
			op_done(op, LT_E_BACKEND, NULL, 0);
		else
			op_done(op, LT_E_LOST, NULL, 0);
	}
	op_free(op);
	h->ops--;
	lease_next(lt, h);
	hold_maybe_free(lt, h);
	sync_timer(lt);
}

/* ---- waiters ------------------------------------------------------------ */

/* Take w off every list and free it. */
static void
waiter_free(struct locktab *lt, struct lt_waiter *w)
{
	struct lt_key *k = w->key;
	assert(w->state == W_QUEUED);
	timer_clear(lt, &w->timer);
	TAILQ_REMOVE(&k->waiters, w, kentry);
	k->nwaiters--;
	if (TAILQ_EMPTY(&k->waiters)) {
		k->blocked = false;
		if (lt->be->ops->withdraw != NULL)
			lt->be->ops->withdraw(lt->be, k->name, k->len);
	}
	if (w->owner != NULL) {
		TAILQ_REMOVE(&w->owner->waiters, w, oentry);
		w->owner->nwaiters--;
	}
	lt->stats.waiters--;
	key_unref(lt, k);
	free(w->value);
	pool_put(&lt->waiter_pool, w);
}

/* Send w to the backend: an acquire, or a transfer from holding from (whose
 * release the command of o waits on with done, if not NULL). */
static void
waiter_start(struct locktab *lt, struct lt_waiter *w, struct lt_hold *from,
    struct lt_owner *o, lt_done_cb *done, void *arg)
{
	struct lt_key *k = w->key;
	struct lt_op *op = op_new(lt, from ? OP_TRANSFER : OP_ACQUIRE, o, done, arg);
	timer_clear(lt, &w->timer);
	w->retrying = false;
	w->state = W_ACQUIRING;
	k->nacquiring++;
	if (w->terms.mode == LOCK_EXCLUSIVE)
		k->nexcl++;
	op->w = w;
	struct be_lock to = lease_of(lt, k, &w->terms, w->ttl_ms);
	char who[WHO_MAX];
	/* only a backend other daemons read keeps it: none on memory's path */
	if (lt->describe != NULL && w->owner != NULL && !local_leases(lt)) {
		lt->describe(lt->describe_arg, w->owner->id, w->ttl_ms, w->terms.detached, who,
		    sizeof(who));
		to.who = who;
	}
	to.value = w->value;
	to.valuelen = w->valuelen;
	to.try_once = w->try_once;
	to.queued = k->nwaiters - 1;	/* w is on the list */
	if (from != NULL) {
		struct be_lock fl = lease_of(lt, k, &from->terms, from->ttl_ms);
		fl.handoffs = k->handoffs;
		op->h = from;
		from->ops++;
		lt->be->ops->transfer(lt->be, &fl, &to, on_transfer, op);
	} else {
		lt->be->ops->acquire(lt->be, &to, on_acquire, op);
	}
}

/* Start every waiter at the head of k's queue that can now be granted:
 * strictly in order, stopping at the first that cannot. */
static void
pump(struct locktab *lt, struct lt_key *k)
{
	struct lt_waiter *w, *next;
	if (k->blocked || lt->closing)
		return;
	for (w = TAILQ_FIRST(&k->waiters); w != NULL; w = next) {
		next = TAILQ_NEXT(w, kentry);
		if (w->state == W_ACQUIRING)
			continue;
		if (!key_compatible(k, w->terms.mode, w->terms.limit))
			break;
		waiter_start(lt, w, NULL, NULL, NULL, NULL);
	}
}

/* A waiter's WAIT ran out. */
static void
waiter_expire(struct locktab *lt, struct lt_waiter *w)
{
	struct lt_key *k = w->key;
	assert(w->state == W_QUEUED);
	if (w->retrying) {
		/* a retry after a backend error, its WAIT not over */
		w->retrying = false;
		timer_set(lt, &w->timer, w->deadline);
		k->blocked = false;
		pump(lt, k);
		return;
	}
	key_ref(lt, k);
	waiter_fail(lt, w, k->backend_failing ? LT_E_BACKEND : LT_NOT_GRANTED);
	/* a waiter that left the head may let those behind it go */
	pump(lt, k);
	key_unref(lt, k);
}

/* ---- the table ---------------------------------------------------------- */

/* The backend says key may be free now (key NULL: any key may be): the
 * queues that wait for a wakeup try again. */
static void
on_wakeup(void *arg, const char *key, size_t keylen)
{
	struct locktab *lt = arg;
	if (key == NULL) {
		struct hashtab_iter it;
		struct hashtab_node *n;
		hashtab_iter_init(&it, lt->keys);
		while ((n = hashtab_next(&it)) != NULL) {
			struct lt_key *k = key_of(n);
			if (k->blocked) {
				k->blocked = false;
				pump(lt, k);
			}
		}
		sync_timer(lt);
		return;
	}
	struct lt_key *k = lt_key_find(lt, key, keylen);
	if (k == NULL || k->refs == 0)
		return;
	k->blocked = false;
	pump(lt, k);
	sync_timer(lt);
}

/* Renew the bound holdings of k now (their timers fire at once). */
static void
key_expire(struct locktab *lt, struct lt_key *k, uint64_t now)
{
	struct lt_hold *h;
	TAILQ_FOREACH(h, &k->holders, kentry)
		if (h->owner != NULL && !local_leases(lt)) {
			h->renew_at = now;
			hold_schedule(lt, h);
		}
}

/* The backend says the leases of key (NULL: of every key) may have ended:
 * renewals tell which. */
static void
on_expire(void *arg, const char *key, size_t keylen)
{
	struct locktab *lt = arg;
	uint64_t now = locktab_now(lt);
	if (key == NULL) {
		struct hashtab_iter it;
		struct hashtab_node *n;
		hashtab_iter_init(&it, lt->keys);
		while ((n = hashtab_next(&it)) != NULL)
			key_expire(lt, key_of(n), now);
	} else {
		struct lt_key *k = lt_key_find(lt, key, keylen);
		if (k != NULL)
			key_expire(lt, k, now);
	}
	sync_timer(lt);
}

/* The backend saw a change of a watched key: tell the observers. */
static void
on_changed(void *arg, const char *key, size_t keylen, const struct be_leader *l)
{
	struct locktab *lt = arg;
	if (lt->remote != NULL)
		lt->remote(lt->change_arg, key, keylen, l);
}

struct locktab *
locktab_create(struct backend *be, const struct lt_limits *limits, lt_clock_fn *clock,
    void *clock_arg, lt_rearm_cb *rearm, void *rearm_arg)
{
	struct locktab *lt = xcalloc(1, sizeof(*lt));
	lt->keys = hashtab_create(LT_BUCKETS);
	heap_init(&lt->deadlines);
	lt->be = be;
	lt->limits = *limits;
	lt->clock = clock != NULL ? clock : clock_default;
	lt->clock_arg = clock_arg;
	lt->rearm = rearm;
	lt->rearm_arg = rearm_arg;
	lt->armed = LT_NEVER;
	timer_init(&lt->log_timer, TIMER_LOG);
	TAILQ_INIT(&lt->idle);
	pool_init(&lt->waiter_pool, sizeof(struct lt_waiter), LT_SPARE_MAX);
	pool_init(&lt->hold_pool, sizeof(struct lt_hold), LT_SPARE_MAX);
	pool_init(&lt->op_pool, sizeof(struct lt_op), LT_SPARE_MAX);
	be->up.wakeup = on_wakeup;
	be->up.expire = on_expire;
	be->up.changed = on_changed;
	be->up.arg = lt;
	return lt;
}

void
locktab_destroy(struct locktab *lt)
{
	if (lt == NULL)
		return;
	assert(lt->inflight == 0);
	log_losses(lt);
	struct hashtab_iter it;
	struct hashtab_node *n;
	hashtab_iter_init(&it, lt->keys);
	while ((n = hashtab_next(&it)) != NULL) {
		struct lt_key *k = key_of(n);
		struct lt_hold *h;
		/* detached holdings that outlived every owner */
		while ((h = TAILQ_FIRST(&k->holders)) != NULL) {
			hold_unlink_key(lt, h);
			free(h);
		}
		/* tombstones whose time has not come */
		while ((h = TAILQ_FIRST(&k->tombs)) != NULL) {
			TAILQ_REMOVE(&k->tombs, h, kentry);
			free(h);
		}
		free(k);
	}
	hashtab_destroy(lt->keys);
	heap_fini(&lt->deadlines);
	pool_fini(&lt->waiter_pool);
	pool_fini(&lt->hold_pool);
	pool_fini(&lt->op_pool);
	free(lt);
}

void
locktab_set_limits(struct locktab *lt, const struct lt_limits *limits)
{
	lt->limits = *limits;
}

int
locktab_idle(const struct locktab *lt)
{
	return lt->inflight == 0;
}

struct lt_owner *
locktab_owner_create(struct locktab *lt, uint64_t id, lt_lost_cb *lost, void *arg)
{
	struct lt_owner *o = xcalloc(1, sizeof(*o));
	o->lt = lt;
	o->id = id;
	o->lost = lost;
	o->suspend = NULL;
	o->nsuspended = 0;
	o->arg = arg;
	TAILQ_INIT(&o->holds);
	TAILQ_INIT(&o->detached);
	TAILQ_INIT(&o->waiters);
	TAILQ_INIT(&o->ops);
	return o;
}

void
locktab_owner_on_suspend(struct lt_owner *o, lt_suspend_cb *suspend)
{
	o->suspend = suspend;
}

/* Withdraw every waiter of o without telling it. Returns how many. */
static unsigned
owner_drop_waiters(struct lt_owner *o)
{
	struct locktab *lt = o->lt;
	struct lt_waiter *w;
	unsigned n = 0;
	while ((w = TAILQ_FIRST(&o->waiters)) != NULL) {
		struct lt_key *k = w->key;
		n++;
		if (w->state == W_ACQUIRING) {
			/* the backend answers later; waiter_granted gives it back */
			TAILQ_REMOVE(&o->waiters, w, oentry);
			o->nwaiters--;
			w->owner = NULL;
			w->done = NULL;
			continue;
		}
		key_ref(lt, k);
		w->done = NULL;
		waiter_free(lt, w);
		pump(lt, k);
		key_unref(lt, k);
	}
	return n;
}

unsigned
locktab_owner_cancel(struct lt_owner *o)
{
	unsigned n = owner_drop_waiters(o);
	sync_timer(o->lt);
	return n;
}

void
locktab_owner_destroy(struct lt_owner *o)
{
	struct locktab *lt = o->lt;
	struct lt_op *op;
	struct lt_hold *h;

	while ((op = TAILQ_FIRST(&o->ops)) != NULL) {
		TAILQ_REMOVE(&o->ops, op, oentry);
		op->owner = NULL;
		op->done = NULL;
	}
	owner_drop_waiters(o);
	while ((h = TAILQ_FIRST(&o->detached)) != NULL) {
		/* they live on, counted against nobody */
		TAILQ_REMOVE(&o->detached, h, oentry);
		h->creator = NULL;
	}
	o->ndetached = 0;
	while ((h = TAILQ_FIRST(&o->holds)) != NULL) {
		if (h->state == H_ACTIVE) {
			lt->stats.releases++;
			hold_release(lt, h, NULL, NULL, NULL);
		} else
			hold_gone(lt, h);
	}
	free(o);
	sync_timer(lt);
}

/* The owner's ACTIVE holding of k (not detached ones), or NULL. */
static struct lt_hold *
owner_hold(const struct lt_owner *o, const struct lt_key *k)
{
	struct lt_hold *h;
	if (k == NULL)
		return NULL;
	TAILQ_FOREACH(h, &k->holders, kentry)
		if (h->owner == o)
			return h;
	return NULL;
}

/* The owner's LOST record for key (with token, if not NULL), or NULL. */
static struct lt_hold *
owner_lost(const struct lt_owner *o, const char *key, size_t keylen, const char *token)
{
	struct lt_hold *h;
	TAILQ_FOREACH(h, &o->holds, oentry)
		if (h->state == H_LOST && h->key->len == keylen &&
		    memcmp(h->key->name, key, keylen) == 0 &&
		    (token == NULL || strcmp(h->terms.token, token) == 0))
			return h;
	return NULL;
}

int
locktab_held(const struct lt_owner *o, const char *key, size_t keylen)
{
	const struct lt_hold *h = owner_hold(o, lt_key_find(o->lt, key, keylen));
	if (h != NULL)
		return (int)h->count;
	return owner_lost(o, key, keylen, NULL) != NULL ? -1 : 0;
}

int
locktab_forget_lost(struct lt_owner *o, const char *key, size_t keylen, uint64_t fence)
{
	struct lt_hold *h;
	TAILQ_FOREACH(h, &o->holds, oentry)
		if (h->state == H_LOST && h->fence == fence && h->key->len == keylen &&
		    memcmp(h->key->name, key, keylen) == 0) {
			hold_gone(o->lt, h);
			sync_timer(o->lt);
			return 1;
		}
	return 0;
}

/* The ACTIVE holding of k whose token is token, or NULL. */
static struct lt_hold *
token_hold(const struct lt_key *k, const char *token)
{
	struct lt_hold *h;
	if (k == NULL)
		return NULL;
	TAILQ_FOREACH(h, &k->holders, kentry)
		if (strcmp(h->terms.token, token) == 0)
			return h;
	return NULL;
}

static void proclaim_send(struct locktab *lt, struct lt_owner *o, struct lt_key *k,
    struct lt_hold *h, const char *value, size_t valuelen, lt_done_cb *done, void *arg);

/* A holding's CAMPAIGN value is now value (copied). */
static void
hold_set_value(struct locktab *lt, struct lt_hold *h, const char *value, size_t len)
{
	free(h->value);
	h->value = xmemdup(value, len);
	h->valuelen = len;
	lt_changed(lt, h->key);
}

void
lt_changed(struct locktab *lt, const struct lt_key *k)
{
	if (lt->change != NULL)
		lt->change(lt->change_arg, k->name, k->len);
}

/* Do what is due if the event loop has not got round to it yet, so that no
 * answer relies on a lease whose deadline has passed. */
void
lt_catch_up(struct locktab *lt)
{
	uint64_t next = locktab_next_deadline(lt);
	if (next != LT_NEVER && next <= locktab_now(lt))
		locktab_tick(lt);
}

enum lt_status
locktab_lock(struct lt_owner *o, const struct lt_lock_req *req, struct lt_grant *g,
    lt_done_cb *done, void *arg)
{
	struct locktab *lt = o->lt;
	struct lt_key *k;
	struct lt_hold *h;
	bool sem;
	unsigned limit;

	if (lt->closing)
		return LT_E_CLOSING;
	lt_catch_up(lt);
	k = lt_key_find(lt, req->key, req->keylen);
	/* a LOST record refers to its key: none without one (and no walk of
	 * the owner's holdings, which would make a session of many locks slow) */
	if (k != NULL && (h = owner_lost(o, req->key, req->keylen, NULL)) != NULL)
		hold_gone(lt, h);	/* locking again forgets the loss */
	if ((h = owner_hold(o, k)) != NULL) {
		g->mode = h->terms.mode;
		/* another mode, or a detached lock queued behind the session's
		 * own holding: it would wait for itself */
		if (h->terms.mode != req->mode || h->terms.limit != req->limit || req->detach)
			return LT_E_MODE;
		h->count++;
		lt->stats.reentrant++;
		if (req->value != NULL && !local_leases(lt) && lt->be->ops->proclaim != NULL)
			/* a CAMPAIGN again: its value is the new one, in the
			 * backend too, for other daemons' observers */
			proclaim_send(lt, o, k, h, req->value, req->valuelen, NULL, NULL);
		else if (req->value != NULL)
			hold_set_value(lt, h, req->value, req->valuelen);
		memcpy(g->token, h->terms.token, sizeof(g->token));
		g->fence = h->fence;
		g->ttl_ms = lt_hold_left(lt, h, locktab_now(lt));
		g->count = h->count;
		return LT_OK;
	}
	if (k != NULL && lt_key_kind(k, &sem, &limit) &&
	    (sem != (req->mode == LOCK_SEMAPHORE) || (sem && limit != req->limit)))
		return LT_E_KIND;
	if (k != NULL && k->nwaiters >= lt->limits.max_waiters_per_key)
		return LT_E_WAITERS;
	if ((uint64_t)o->nholds + o->nwaiters + o->ndetached >= lt->limits.max_locks_per_owner)
		return LT_E_LOCKS;
	if ((k == NULL || k->idle) && lt->limits.max_keys != 0 &&
	    lt->stats.keys >= lt->limits.max_keys)
		return LT_E_KEYS;
	if (req->wait_ms == 0 && k != NULL && k->backend_failing && k->blocked)
		return LT_E_BACKEND;	/* its queue waits for the backend */
	if (req->wait_ms == 0 && k != NULL &&
	    (!TAILQ_EMPTY(&k->waiters) || k->blocked ||
	    !key_compatible(k, req->mode, req->limit))) {
		char kb[LOG_KEY_BUF];
		lt->stats.timeouts++;
		log_debug("timeout key=%s session=%llu waited_ms=0",
		    key_log(kb, sizeof(kb), k), owner_log_id(o));
		return LT_NOT_GRANTED;
	}

	if (k == NULL)
		k = key_get(lt, req->key, req->keylen);
	struct lt_waiter *w = pool_get(&lt->waiter_pool);
	timer_init(&w->timer, TIMER_WAITER);
	w->key = k;
	key_ref(lt, k);
	w->owner = o;
	w->terms.mode = req->mode;
	w->terms.limit = req->limit;
	w->terms.detached = req->detach != 0;
	w->ttl_ms = req->ttl_ms;
	w->detach = req->detach != 0;
	w->try_once = req->wait_ms == 0;
	w->retrying = false;
	w->queued_at = locktab_now(lt);
	w->deadline = req->wait_ms > 0 ? w->queued_at + (uint64_t)req->wait_ms : LT_NEVER;
	w->state = W_QUEUED;
	w->done = done;
	w->arg = arg;
	w->value = req->value != NULL ? xmemdup(req->value, req->valuelen) : NULL;
	w->valuelen = req->valuelen;
	token_new(w->terms.token);
	TAILQ_INSERT_TAIL(&k->waiters, w, kentry);
	k->nwaiters++;
	TAILQ_INSERT_TAIL(&o->waiters, w, oentry);
	o->nwaiters++;
	lt->stats.waiters++;
	timer_set(lt, &w->timer, w->deadline);
	pump(lt, k);
	sync_timer(lt);
	return LT_PENDING;
}

/*
 * Take an ACTIVE holding off its key and let its lease go: hand it straight
 * to the next waiter when the backend can (transfer), else release it and
 * wake the queue. done (if not NULL) is told when the backend has confirmed.
 * The holding stays on its owner's list; the caller says what it becomes.
 */
static void
hold_let_go(struct locktab *lt, struct lt_hold *h, struct lt_owner *o, lt_done_cb *done,
    void *arg)
{
	struct lt_key *k = h->key;
	struct lt_waiter *w = TAILQ_FIRST(&k->waiters);

	if (log_min_level <= LOG_LEVEL_DEBUG) {
		char kb[LOG_KEY_BUF];
		log_debug("release key=%s fence=%llu session=%llu held_ms=%llu",
		    key_log(kb, sizeof(kb), k), (unsigned long long)h->fence,
		    o != NULL ? owner_log_id(o) : (unsigned long long)h->owner_id,
		    (unsigned long long)(locktab_now(lt) - h->granted_at));
	}
	hold_unlink_key(lt, h);
	if (lt->be->ops->transfer != NULL && h->terms.mode == LOCK_EXCLUSIVE && w != NULL &&
	    w->state == W_QUEUED && w->terms.mode == LOCK_EXCLUSIVE && !k->blocked &&
	    !lt->closing && k->nholders == 0 && k->nacquiring == 0 && k->ntombs == 0) {
		waiter_start(lt, w, h, o, done, arg);
	} else {
		struct be_lock l = lease_of(lt, k, &h->terms, h->ttl_ms);
		k->handoffs = 0;	/* a release ends the run of handoffs */
		release_lease(lt, &l, o, done, arg);
		pump(lt, k);
	}
}

/* Release an ACTIVE holding (hold_let_go); it is GONE after. */
static void
hold_release(struct locktab *lt, struct lt_hold *h, struct lt_owner *o, lt_done_cb *done,
    void *arg)
{
	struct lt_key *k = h->key;

	key_ref(lt, k);
	hold_let_go(lt, h, o, done, arg);
	if (h->owner != NULL)
		TAILQ_REMOVE(&h->owner->holds, h, oentry);
	h->owner = NULL;
	h->state = H_GONE;
	hold_maybe_free(lt, h);
	key_unref(lt, k);
}

/*
 * Break an ACTIVE holding (UNLOCK FORCE): its lease is let go at once, as for
 * a release, and a bound holding is LOST for its owner, who is told as for
 * any loss, so that its next UNLOCK, EXTEND or VALIDATE sees it. No
 * tombstone: the lease was given back on purpose, and the key goes on.
 */
static void
hold_break(struct locktab *lt, struct lt_hold *h, const char *reason)
{
	struct lt_key *k = h->key;
	struct lt_owner *o = h->owner;

	key_ref(lt, k);
	lt->stats.releases++;
	hold_let_go(lt, h, NULL, NULL, NULL);
	if (o != NULL) {
		h->state = H_LOST;
		if (o->lost != NULL)
			o->lost(o->arg, k->name, k->len, h->fence, reason);
	} else {
		h->state = H_GONE;
		hold_maybe_free(lt, h);
	}
	key_unref(lt, k);
}

/* Find the holding an UNLOCK or EXTEND is about. */
static enum lt_status
find_hold(struct lt_owner *o, const char *key, size_t keylen, const char *token,
    struct lt_hold **out)
{
	struct lt_key *k = lt_key_find(o->lt, key, keylen);
	struct lt_hold *h = token != NULL ? token_hold(k, token) : owner_hold(o, k);
	if (h != NULL) {
		*out = h;
		return LT_OK;
	}
	if ((h = owner_lost(o, key, keylen, token)) != NULL) {
		*out = h;
		return LT_E_LOST;
	}
	return LT_E_NOTHELD;
}

enum lt_status
locktab_unlock(struct lt_owner *o, const char *key, size_t keylen, const char *token,
    long long *remaining, lt_done_cb *done, void *arg)
{
	struct locktab *lt = o->lt;
	struct lt_hold *h;
	enum lt_status st = find_hold(o, key, keylen, token, &h);
	if (st == LT_E_LOST) {
		hold_gone(lt, h);	/* told once */
		sync_timer(lt);
		return st;
	}
	if (st != LT_OK)
		return st;
	if (--h->count > 0) {
		*remaining = h->count;
		return LT_OK;
	}
	lt->stats.releases++;
	hold_release(lt, h, o, done, arg);
	sync_timer(lt);
	return LT_PENDING;
}

/* The backend answered a PROCLAIM: the holding takes the value. */
static void
on_proclaim(void *arg, const struct be_reply *r)
{
	struct lt_op *op = arg;
	struct locktab *lt = op->lt;
	struct lt_hold *h = op->h;

	h->ops--;
	if (r->status == BE_OK && h->state == H_ACTIVE)
		hold_set_value(lt, h, op->value, op->valuelen);
	op_done_simple(op, r);
	free(op->value);
	op->value = NULL;
	op_free(op);
	hold_maybe_free(lt, h);
	sync_timer(lt);
}

/* Store h's new value in the backend (its proclaim op); done (NULL: nobody)
 * is told, and h takes the value once the backend has it. */
static void
proclaim_send(struct locktab *lt, struct lt_owner *o, struct lt_key *k, struct lt_hold *h,
    const char *value, size_t valuelen, lt_done_cb *done, void *arg)
{
	struct lt_op *op = op_new(lt, OP_PROCLAIM, o, done, arg);
	struct be_lock l = lease_of(lt, k, &h->terms, h->ttl_ms);
	op->h = h;
	h->ops++;
	op->value = xmemdup(value, valuelen);
	op->valuelen = valuelen;
	l.value = op->value;
	l.valuelen = valuelen;
	lt->be->ops->proclaim(lt->be, &l, on_proclaim, op);
}

enum lt_status
locktab_proclaim(struct lt_owner *o, const char *key, size_t keylen, const char *value,
    size_t valuelen, lt_done_cb *done, void *arg)
{
	struct locktab *lt = o->lt;
	struct lt_key *k;
	struct lt_hold *h;

	lt_catch_up(lt);
	k = lt_key_find(lt, key, keylen);
	if (k != NULL)
		TAILQ_FOREACH(h, &k->holders, kentry)
			if (h->owner == o || h->creator == o) {
				if (h->terms.mode != LOCK_EXCLUSIVE)
					return LT_E_MODE;
				if (local_leases(lt) || lt->be->ops->proclaim == NULL) {
					hold_set_value(lt, h, value, valuelen);
					return LT_OK;
				}
				proclaim_send(lt, o, k, h, value, valuelen, done, arg);
				return LT_PENDING;
			}
	return owner_lost(o, key, keylen, NULL) != NULL ? LT_E_LOST : LT_E_NOTHELD;
}

void
locktab_set_change(struct locktab *lt, lt_change_cb *cb, lt_remote_cb *remote, void *arg)
{
	lt->change = cb;
	lt->remote = remote;
	lt->change_arg = arg;
}

enum lt_status
locktab_extend(struct lt_owner *o, const char *key, size_t keylen, uint64_t ttl_ms,
    const char *token, lt_done_cb *done, void *arg)
{
	struct locktab *lt = o->lt;
	struct lt_hold *h;
	enum lt_status st = find_hold(o, key, keylen, token, &h);
	if (st != LT_OK)
		return st;
	struct lt_op *op = op_new(lt, OP_EXTEND, o, done, arg);
	op->h = h;
	op->ttl_ms = ttl_ms;
	h->ops++;
	if (h->lease_op != NULL)
		TAILQ_INSERT_TAIL(&h->lease_queue, op, qentry);	/* after it */
	else
		lease_send(lt, h, op);
	hold_schedule(lt, h);
	sync_timer(lt);
	return LT_PENDING;
}

unsigned
locktab_force(struct locktab *lt, const char *key, size_t keylen, const char *reason,
    lt_holder_fn *fn, void *arg)
{
	struct lt_key *k;
	struct lt_hold *h;
	unsigned n = 0, held;

	lt_catch_up(lt);
	if ((k = lt_key_find(lt, key, keylen)) == NULL)
		return 0;
	key_ref(lt, k);
	/* grants come from the event loop, never from in here: the holders
	 * taken off now are all there are */
	for (held = k->nholders; n < held && (h = TAILQ_FIRST(&k->holders)) != NULL; n++) {
		struct lt_holder_info info;
		lt_hold_describe(lt, h, locktab_now(lt), &info);
		if (fn != NULL)
			fn(arg, &info);
		hold_break(lt, h, reason);
	}
	key_unref(lt, k);
	sync_timer(lt);
	return n;
}

/* A holding's deadline came: end its tombstone, expire it, declare it lost,
 * or renew it. */
static void
hold_due(struct locktab *lt, struct lt_hold *h, uint64_t now)
{
	if (h->tomb) {
		tomb_end(lt, h);
		return;
	}
	if (h->owner == NULL) {
		char kb[LOG_KEY_BUF];
		log_debug("detached lock on '%s' reached its TTL",
		    log_escape(kb, sizeof(kb), h->key->name, h->key->len, 0));
		lt->stats.expired++;
		hold_release(lt, h, NULL, NULL, NULL);
		return;
	}
	if (now >= hold_lost_at(lt, h)) {
		hold_lose(lt, h, "the lease could not be renewed in time", false);
		return;
	}
	if (h->lease_op == NULL && now >= h->renew_at) {
		struct lt_op *op = op_new(lt, OP_RENEW, NULL, NULL, NULL);
		op->h = h;
		op->ttl_ms = h->ttl_ms;
		h->ops++;
		lease_send(lt, h, op);
	}
	hold_schedule(lt, h);
}

void
locktab_tick(struct locktab *lt)
{
	uint64_t now = locktab_now(lt);
	struct heap_node *n;
	while ((n = heap_earliest(&lt->deadlines)) != NULL && n->when <= now) {
		/* the node is the first member of a timer, the timer the first
		 * member of what it is embedded in */
		struct lt_timer *t = (struct lt_timer *)(void *)n;
		timer_clear(lt, t);
		if (t->kind == TIMER_WAITER)
			waiter_expire(lt, (struct lt_waiter *)t);
		else if (t->kind == TIMER_HOLD)
			hold_due(lt, (struct lt_hold *)t, now);
		else
			log_losses(lt);
	}
	sync_timer(lt);
}

void
locktab_shutdown(struct locktab *lt)
{
	struct hashtab_iter it;
	struct hashtab_node *n;
	lt->closing = true;
	hashtab_iter_init(&it, lt->keys);
	while ((n = hashtab_next(&it)) != NULL) {
		struct lt_key *k = key_of(n);
		struct lt_waiter *w, *wn;
		struct lt_hold *h, *hn;
		key_ref(lt, k);
		for (w = TAILQ_FIRST(&k->waiters); w; w = wn) {
			wn = TAILQ_NEXT(w, kentry);
			if (w->state == W_QUEUED)
				waiter_fail(lt, w, LT_E_CLOSING);
		}
		for (h = TAILQ_FIRST(&k->holders); h; h = hn) {
			hn = TAILQ_NEXT(h, kentry);
			if (h->owner == NULL) {
				lt->stats.releases++;
				hold_release(lt, h, NULL, NULL, NULL);
			}
		}
		key_unref(lt, k);
	}
	sync_timer(lt);
}

void
locktab_trim(struct locktab *lt)
{
	while (lt->nidle > LT_IDLE_KEYS_MAX)
		key_free(lt, TAILQ_FIRST(&lt->idle));
}

void
locktab_set_measure(struct locktab *lt, lt_measure_cb *cb, void *arg)
{
	lt->measure = cb;
	lt->measure_arg = arg;
}

void
locktab_set_describe(struct locktab *lt, lt_describe_fn *fn, void *arg)
{
	lt->describe = fn;
	lt->describe_arg = arg;
}

