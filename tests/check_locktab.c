/*
 * check_locktab — unit tests of the lock table (daemon/locktab.c).
 *
 * Most tests drive the table through the fake backend (tests/fake_backend.c)
 * that records every operation the table asks for (kind, key, token, ttl,
 * mode, handoffs) and completes it only when the test says so, and through
 * its clock, which the test moves by hand: every interleaving is chosen by
 * the test and every outcome is exact. A few
 * tests run on the memory backend and a real event loop. A randomized test
 * with a fixed seed checks the table against a simple model.
 *
 * Every owner the tests create has a context with a "dead" flag, set before
 * the owner is destroyed: a callback that reaches a dead owner fails the test.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "backend.h"
#include "fake_backend.h"
#include "locktab.h"
#include "log.h"
#include "suite.h"

#define EXCL LOCK_EXCLUSIVE
#define SHRD LOCK_SHARED
#define SEMA LOCK_SEMAPHORE

/* A check for hot paths: it only calls into Check when it fails (a passing
 * ck_assert records its location, which costs a write). */
#define REQUIRE(cond) do { \
	if (!(cond)) \
		ck_abort_msg("requirement failed: %s", #cond); \
} while (0)

#define NOWN 8			/* owners every fixture creates */
#define WAIT_FOREVER (-1)

static uint64_t delay_ms;	/* the table's lock-delay */

/* ---- the table under test, its owners and callbacks ---------------------- */

/* A test's view of one owner. */
struct octx {
	struct lt_owner *o;		/* the owner, NULL once destroyed */
	bool dead;			/* destroyed: its callbacks must not run */
	int nlost;			/* lost callbacks */
	char lost_key[FK_KEYMAX];	/* the last one's key */
	uint64_t lost_fence;		/* its fence */
	uint64_t lost_clock;		/* the clock when it came */
	char lost_reason[128];		/* its reason */
	int nsuspended;			/* suspend callbacks: suspended */
	int nresumed;			/* and resumed */
	char suspend_reason[128];	/* the last suspended one's reason */
};

/* The outcome of one LOCK, UNLOCK or EXTEND. */
struct res {
	struct octx *owner;		/* who asked */
	int calls;			/* done callbacks */
	enum lt_status st;		/* the last one's status */
	struct lt_grant g;		/* its grant (or an immediate one) */
	long long value;		/* its value, or UNLOCK's remaining count */
	unsigned seq;			/* order of the callback among all */
};

static struct locktab *lt;		/* the table of the running test */
static struct octx O[NOWN];		/* its owners */
static unsigned seq;			/* done callbacks so far */
static unsigned rearm_calls;		/* rearm hook calls */
static uint64_t rearm_when;		/* the last deadline it was told */
static struct event_base *base;		/* memory backend tests: the loop */
static struct backend *mbe;		/* and the backend */
static const struct lt_limits limits_default = { 10000, 10000, 10, 0, 0 };	/* the daemon's */

static void
test_rearm(void *arg, uint64_t when)
{
	(void)arg;
	rearm_calls++;
	rearm_when = when;
}

/* The done callback of every LOCK, UNLOCK and EXTEND of the tests. */
static void
on_done(void *arg, enum lt_status st, const struct lt_grant *g, long long value)
{
	struct res *r = arg;
	ck_assert_msg(r->owner == NULL || !r->owner->dead,
	    "a done callback of a destroyed owner was called");
	r->calls++;
	r->st = st;
	if (g != NULL)
		r->g = *g;
	r->value = value;
	r->seq = ++seq;
}

/* The lost callback of every owner of the tests. */
static void
on_lost(void *arg, const char *key, size_t keylen, uint64_t fence, const char *reason)
{
	struct octx *c = arg;
	ck_assert_msg(!c->dead, "a lost callback of a destroyed owner was called");
	ck_assert_uint_lt(keylen, sizeof(c->lost_key));
	ck_assert_ptr_nonnull(reason);
	c->nlost++;
	memcpy(c->lost_key, key, keylen);
	c->lost_key[keylen] = '\0';
	c->lost_fence = fence;
	c->lost_clock = fk_now;
	snprintf(c->lost_reason, sizeof(c->lost_reason), "%s", reason);
}

/* The suspend callback of every owner of the tests. */
static void
on_suspend(void *arg, const char *key, size_t keylen, uint64_t fence, int suspended,
    const char *reason)
{
	struct octx *c = arg;
	(void)key;
	(void)keylen;
	(void)fence;
	ck_assert_msg(!c->dead, "a suspend callback of a destroyed owner was called");
	if (suspended) {
		ck_assert_ptr_nonnull(reason);
		c->nsuspended++;
		snprintf(c->suspend_reason, sizeof(c->suspend_reason), "%s", reason);
	} else {
		ck_assert_ptr_null(reason);
		c->nresumed++;
	}
}

/* Create the table on be with limits, and the owners. */
static void
table_start(struct backend *be, const struct lt_limits *limits)
{
	seq = 0;
	rearm_calls = 0;
	rearm_when = LT_NEVER;
	memset(O, 0, sizeof(O));
	lt = locktab_create(be, limits, fk_clock, NULL, test_rearm, NULL);
	ck_assert_ptr_nonnull(lt);
	ck_assert_ptr_eq(be->up.arg, lt);
	ck_assert_ptr_nonnull(be->up.wakeup);
	for (int i = 0; i < NOWN; i++) {
		O[i].o = locktab_owner_create(lt, (uint64_t)i + 1, on_lost, &O[i]);
		ck_assert_ptr_nonnull(O[i].o);
		locktab_owner_on_suspend(O[i].o, on_suspend);
	}
}

/* Destroy owner i; from now on none of its callbacks may run. */
static void
kill_owner(int i)
{
	ck_assert_ptr_nonnull(O[i].o);
	O[i].dead = true;
	locktab_owner_destroy(O[i].o);
	O[i].o = NULL;
}

static void
kill_all(void)
{
	for (int i = 0; i < NOWN; i++)
		if (O[i].o != NULL)
			kill_owner(i);
}

static void
fake_start(const struct backend_ops *ops)
{
	fk_start(ops);
	delay_ms = 0;
	table_start(&fk_be, &limits_default);
}

static void
setup_fake(void)
{
	fake_start(&fk_ops);
}

static void
setup_fake_nt(void)
{
	fake_start(&fk_ops_nt);
}

/* End a fake backend test: destroy the owners, complete every operation,
 * and the table must be idle and free cleanly. */
static void
teardown_fake(void)
{
	kill_all();
	fk_drain();
	ck_assert(locktab_idle(lt));
	locktab_destroy(lt);
	lt = NULL;
	fk_stop();
}

/* Start again with other limits (before anything was locked). */
static void
restart(const struct lt_limits *limits)
{
	kill_all();
	ck_assert(locktab_idle(lt));
	locktab_destroy(lt);
	table_start(&fk_be, limits);
}

/* Run the memory backend's completions until the table is idle. */
static void
flush(void)
{
	for (int n = 0; !locktab_idle(lt); n++) {
		ck_assert_int_lt(n, 1000);
		ck_assert_int_ge(event_base_loop(base, EVLOOP_NONBLOCK), 0);
	}
}

static void
setup_mem(void)
{
	fk_now = 1000;
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	mbe = backend_create("memory", base, NULL);
	ck_assert_ptr_nonnull(mbe);
	table_start(mbe, &limits_default);
}

static void
teardown_mem(void)
{
	kill_all();
	flush();
	locktab_destroy(lt);
	lt = NULL;
	backend_destroy(mbe);
	mbe = NULL;
	event_base_free(base);
	base = NULL;
}

/* LOCK key for owner i; the outcome goes to r (reset first). */
static enum lt_status
lock(int i, const char *key, enum lock_mode mode, unsigned limit, uint64_t ttl,
    int64_t wait, int detach, struct res *r)
{
	struct lt_lock_req q = { key, strlen(key), mode, limit, ttl, wait, detach, NULL, 0 };
	memset(r, 0, sizeof(*r));
	r->owner = &O[i];
	ck_assert_ptr_nonnull(O[i].o);
	return locktab_lock(O[i].o, &q, &r->g, on_done, r);
}

/* UNLOCK key (by token if not NULL) for owner i; an immediate remaining
 * count goes to r->value. */
static enum lt_status
unlock(int i, const char *key, const char *token, struct res *r)
{
	memset(r, 0, sizeof(*r));
	r->owner = &O[i];
	return locktab_unlock(O[i].o, key, strlen(key), token, &r->value, on_done, r);
}

static enum lt_status
extend(int i, const char *key, uint64_t ttl, const char *token, struct res *r)
{
	memset(r, 0, sizeof(*r));
	r->owner = &O[i];
	return locktab_extend(O[i].o, key, strlen(key), ttl, token, on_done, r);
}

static struct lt_key_status
status(const char *key)
{
	struct lt_key_status s;
	locktab_status(lt, key, strlen(key), &s);
	return s;
}

static struct lt_stats
stats(void)
{
	struct lt_stats s;
	locktab_stats(lt, &s);
	return s;
}

static int
validate(const char *key, uint64_t fence)
{
	return locktab_validate(lt, key, strlen(key), fence);
}

/* Check that r was told exactly once that it was granted with fence. */
static void
assert_granted(const struct res *r, uint64_t fence)
{
	ck_assert_int_eq(r->calls, 1);
	ck_assert_int_eq(r->st, LT_OK);
	ck_assert_uint_eq(r->g.fence, fence);
	ck_assert_uint_eq(strlen(r->g.token), TOKEN_LEN);
	ck_assert_uint_eq(strspn(r->g.token, "0123456789abcdef"), TOKEN_LEN);
	ck_assert_uint_eq(r->g.count, 1);
}

/* Owner i locks key and the fake backend grants it at once with fence. */
static void
hold(int i, const char *key, enum lock_mode mode, unsigned limit, uint64_t ttl, int detach,
    uint64_t fence, struct res *r)
{
	size_t before = fk.npend;
	ck_assert_int_eq(lock(i, key, mode, limit, ttl, WAIT_FOREVER, detach, r), LT_PENDING);
	ck_assert_uint_eq(fk.npend, before + 1);
	struct fk_op *op = fk_expect(before, FK_ACQUIRE, key);
	ck_assert_int_eq(op->mode, mode);
	ck_assert_uint_eq(op->limit, limit);
	ck_assert_uint_eq(op->ttl_ms, ttl + delay_ms);
	char token[TOKEN_LEN + 1];
	memcpy(token, op->token, sizeof(token));
	fk_complete_at(before, BE_OK, fence);
	assert_granted(r, fence);
	ck_assert_str_eq(r->g.token, token);
	ck_assert_uint_eq(r->g.ttl_ms, ttl);
}

/* Owner i unlocks its last hold of key; the backend confirms the release. */
static void
release(int i, const char *key)
{
	struct res u;
	ck_assert_int_eq(unlock(i, key, NULL, &u), LT_PENDING);
	long p = fk_find(FK_RELEASE, NULL);
	ck_assert_int_ge(p, 0);
	fk_complete_at((size_t)p, BE_OK, 0);
	ck_assert_int_eq(u.calls, 1);
	ck_assert_int_eq(u.st, LT_OK);
	ck_assert_int_eq(u.value, 0);
}

/* Copy the token of the pending operation at pos. */
static void
pending_token(size_t pos, char out[TOKEN_LEN + 1])
{
	memcpy(out, fk_pending(pos)->token, TOKEN_LEN + 1);
}

/* ---- exclusive locks: FIFO ----------------------------------------------- */

START_TEST(excl_fifo_five_owners)
{
	struct res r[5], u;
	char tok[TOKEN_LEN + 1];

	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(lock(i, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &r[i]),
		    LT_PENDING);
	/* only the head of the queue contends at the backend */
	ck_assert_uint_eq(fk.count[FK_ACQUIRE], 1);
	ck_assert_uint_eq(fk.npend, 1);
	ck_assert_int_eq(fk_expect(0, FK_ACQUIRE, "k")->mode, EXCL);
	ck_assert_uint_eq(fk_pending(0)->ttl_ms, 30000);
	pending_token(0, tok);
	fk_complete(BE_OK, 100);
	assert_granted(&r[0], 100);
	ck_assert_str_eq(r[0].g.token, tok);

	for (int i = 0; i < 5; i++) {
		struct lt_key_status s = status("k");
		ck_assert_str_eq(s.mode, "exclusive");
		ck_assert_uint_eq(s.holders, 1);
		ck_assert_uint_eq(s.waiters, 4 - i);
		ck_assert_uint_eq(s.fence, 100 + i);
		ck_assert_int_eq(validate("k", 100 + i), 1);
		for (int j = i + 1; j < 5; j++)
			ck_assert_int_eq(r[j].calls, 0);

		ck_assert_int_eq(unlock(i, "k", NULL, &u), LT_PENDING);
		ck_assert_int_eq(validate("k", 100 + i), 0);
		if (i == 4) {
			ck_assert_uint_eq(fk.npend, 1);
			ck_assert_str_eq(fk_expect(0, FK_RELEASE, "k")->token, r[i].g.token);
			fk_complete(BE_OK, 0);
			ck_assert_int_eq(u.calls, 1);
			ck_assert_int_eq(u.st, LT_OK);
			break;
		}
		/* the release, and an acquire for the next waiter only */
		ck_assert_uint_eq(fk.npend, 2);
		ck_assert_str_eq(fk_expect(0, FK_RELEASE, "k")->token, r[i].g.token);
		fk_expect(1, FK_ACQUIRE, "k");
		ck_assert_uint_eq(fk.count[FK_ACQUIRE], (unsigned)i + 2);
		pending_token(1, tok);
		s = status("k");
		ck_assert_uint_eq(s.holders, 0);
		ck_assert_uint_eq(s.waiters, 4 - i);
		fk_complete(BE_OK, 0);
		ck_assert_int_eq(u.calls, 1);
		ck_assert_int_eq(u.st, LT_OK);
		ck_assert_int_eq(u.value, 0);
		ck_assert_int_eq(r[i + 1].calls, 0);
		fk_complete(BE_OK, 101 + (uint64_t)i);
		assert_granted(&r[i + 1], 101 + (uint64_t)i);
		ck_assert_str_eq(r[i + 1].g.token, tok);
	}
	/* granted in arrival order, each exactly once */
	for (int i = 0; i < 4; i++)
		ck_assert_uint_lt(r[i].seq, r[i + 1].seq);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(r[i].calls, 1);
	struct lt_key_status s = status("k");
	ck_assert_str_eq(s.mode, "free");
	ck_assert_uint_eq(s.holders, 0);
	ck_assert_uint_eq(s.waiters, 0);
	ck_assert_uint_eq(s.fence, 104);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.grants, 5);
	ck_assert_uint_eq(st.releases, 5);
	ck_assert_uint_eq(st.holds, 0);
	ck_assert_uint_eq(st.waiters, 0);
	ck_assert_uint_eq(st.keys, 0);
	ck_assert_uint_eq(fk.count[FK_ACQUIRE], 5);
	ck_assert_uint_eq(fk.count[FK_TRANSFER], 0);
}
END_TEST

/* A release sends one acquire, for the head, and nothing for those behind
 * it, even when the head's acquire stays unanswered a long time. */
START_TEST(release_wakes_only_head)
{
	struct res h, r[4];
	hold(0, "k", EXCL, 0, 30000, 0, 1, &h);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(lock(i + 1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &r[i]),
		    LT_PENDING);
	ck_assert_uint_eq(fk.count[FK_ACQUIRE], 1);
	release(0, "k");
	ck_assert_uint_eq(fk.count[FK_ACQUIRE], 2);
	ck_assert_uint_eq(fk.npend, 1);
	/* more time, ticks and spurious wakeups do not start anyone else */
	fk_now += 5000;
	locktab_tick(lt);
	fk_be.up.wakeup(fk_be.up.arg, "k", 1);
	ck_assert_uint_eq(fk.count[FK_ACQUIRE], 2);
	fk_complete(BE_OK, 2);
	assert_granted(&r[0], 2);
	for (int i = 1; i < 4; i++)
		ck_assert_int_eq(r[i].calls, 0);
	ck_assert_uint_eq(fk.npend, 0);
}
END_TEST

/* ---- shared locks -------------------------------------------------------- */

START_TEST(shared_granted_together)
{
	struct res r[3];
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(lock(i, "s", SHRD, 0, 30000, WAIT_FOREVER, 0, &r[i]), LT_PENDING);
	/* all three are sent at once */
	ck_assert_uint_eq(fk.npend, 3);
	for (size_t p = 0; p < 3; p++)
		ck_assert_int_eq(fk_expect(p, FK_ACQUIRE, "s")->mode, SHRD);
	/* whatever order the backend answers in */
	fk_complete_at(2, BE_OK, 10);
	fk_complete_at(0, BE_OK, 11);
	fk_complete_at(0, BE_OK, 12);
	assert_granted(&r[2], 10);
	assert_granted(&r[0], 11);
	assert_granted(&r[1], 12);
	struct lt_key_status s = status("s");
	ck_assert_str_eq(s.mode, "shared");
	ck_assert_uint_eq(s.holders, 3);
	ck_assert_uint_eq(s.waiters, 0);
	ck_assert_int_eq(s.ttl_ms, -1);
	ck_assert_uint_eq(s.limit, 0);
	ck_assert_uint_eq(s.fence, 12);
	for (uint64_t f = 10; f <= 12; f++)
		ck_assert_int_eq(validate("s", f), 1);
	ck_assert_str_ne(r[0].g.token, r[1].g.token);
	ck_assert_str_ne(r[1].g.token, r[2].g.token);
}
END_TEST

/* Shared holders; an exclusive waiter waits; shared lockers behind it wait
 * too (no barging); the exclusive goes when the last shared one leaves; then
 * the shared run behind it goes together. */
START_TEST(shared_exclusive_no_barging)
{
	struct res s0, s1, x, s3, s4, t, u;

	hold(0, "k", SHRD, 0, 30000, 0, 1, &s0);
	hold(1, "k", SHRD, 0, 30000, 0, 2, &s1);
	ck_assert_int_eq(lock(2, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &x), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 0);
	ck_assert_int_eq(lock(3, "k", SHRD, 0, 30000, WAIT_FOREVER, 0, &s3), LT_PENDING);
	ck_assert_int_eq(lock(4, "k", SHRD, 0, 30000, WAIT_FOREVER, 0, &s4), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 0);
	ck_assert_uint_eq(fk.count[FK_ACQUIRE], 2);
	/* compatible with the holders, but there is a queue: try-once fails */
	ck_assert_int_eq(lock(5, "k", SHRD, 0, 30000, 0, 0, &t), LT_NOT_GRANTED);
	ck_assert_int_eq(t.calls, 0);
	struct lt_key_status s = status("k");
	ck_assert_str_eq(s.mode, "shared");
	ck_assert_uint_eq(s.holders, 2);
	ck_assert_uint_eq(s.waiters, 3);

	/* one shared holder leaves: the exclusive still waits */
	ck_assert_int_eq(unlock(0, "k", NULL, &u), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 1);
	fk_expect(0, FK_RELEASE, "k");
	fk_complete(BE_OK, 0);
	ck_assert_uint_eq(fk.count[FK_ACQUIRE], 2);
	ck_assert_int_eq(x.calls, 0);

	/* the last one leaves: exactly the exclusive one is sent */
	ck_assert_int_eq(unlock(1, "k", NULL, &u), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 2);
	fk_expect(0, FK_RELEASE, "k");
	ck_assert_int_eq(fk_expect(1, FK_ACQUIRE, "k")->mode, EXCL);
	fk_complete(BE_OK, 0);
	fk_complete(BE_OK, 3);
	assert_granted(&x, 3);
	ck_assert_int_eq(s3.calls, 0);
	ck_assert_int_eq(s4.calls, 0);
	s = status("k");
	ck_assert_str_eq(s.mode, "exclusive");
	ck_assert_uint_eq(s.holders, 1);
	ck_assert_uint_eq(s.waiters, 2);

	/* the exclusive leaves: both shared waiters are sent together */
	ck_assert_int_eq(unlock(2, "k", NULL, &u), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 3);
	fk_expect(0, FK_RELEASE, "k");
	ck_assert_int_eq(fk_expect(1, FK_ACQUIRE, "k")->mode, SHRD);
	ck_assert_int_eq(fk_expect(2, FK_ACQUIRE, "k")->mode, SHRD);
	ck_assert_uint_eq(fk.count[FK_TRANSFER], 0);
	fk_complete(BE_OK, 0);
	fk_complete(BE_OK, 4);
	fk_complete(BE_OK, 5);
	assert_granted(&s3, 4);
	assert_granted(&s4, 5);
	s = status("k");
	ck_assert_str_eq(s.mode, "shared");
	ck_assert_uint_eq(s.holders, 2);
	ck_assert_uint_eq(s.waiters, 0);
}
END_TEST

/* An exclusive waiter that gives up lets the shared waiters behind it go. */
START_TEST(exclusive_timeout_lets_shared_run)
{
	struct res s0, x, s2, s3;
	hold(0, "k", SHRD, 0, 30000, 0, 1, &s0);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, 100, 0, &x), LT_PENDING);
	ck_assert_int_eq(lock(2, "k", SHRD, 0, 30000, WAIT_FOREVER, 0, &s2), LT_PENDING);
	ck_assert_int_eq(lock(3, "k", SHRD, 0, 30000, WAIT_FOREVER, 0, &s3), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 0);
	fk_now += 100;
	locktab_tick(lt);
	ck_assert_int_eq(x.calls, 1);
	ck_assert_int_eq(x.st, LT_NOT_GRANTED);
	ck_assert_uint_eq(fk.npend, 2);
	fk_complete(BE_OK, 2);
	fk_complete(BE_OK, 3);
	assert_granted(&s2, 2);
	assert_granted(&s3, 3);
	ck_assert_uint_eq(status("k").holders, 3);
}
END_TEST

/* ---- semaphores ---------------------------------------------------------- */

START_TEST(semaphore_limit_fifo)
{
	struct res r[5], u;
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(lock(i, "m", SEMA, 3, 30000, WAIT_FOREVER, 0, &r[i]), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 3);
	for (size_t p = 0; p < 3; p++) {
		struct fk_op *op = fk_expect(p, FK_ACQUIRE, "m");
		ck_assert_int_eq(op->mode, SEMA);
		ck_assert_uint_eq(op->limit, 3);
	}
	for (int i = 0; i < 3; i++)
		fk_complete(BE_OK, 10 + (uint64_t)i);
	for (int i = 0; i < 3; i++)
		assert_granted(&r[i], 10 + (uint64_t)i);
	ck_assert_int_eq(r[3].calls, 0);
	ck_assert_int_eq(r[4].calls, 0);
	struct lt_key_status s = status("m");
	ck_assert_str_eq(s.mode, "semaphore");
	ck_assert_uint_eq(s.holders, 3);
	ck_assert_uint_eq(s.waiters, 2);
	ck_assert_uint_eq(s.limit, 3);
	ck_assert_int_eq(s.ttl_ms, -1);

	/* a permit comes back: the first waiter, only it, gets it */
	ck_assert_int_eq(unlock(1, "m", NULL, &u), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 2);
	fk_expect(0, FK_RELEASE, "m");
	fk_expect(1, FK_ACQUIRE, "m");
	fk_complete(BE_OK, 0);
	fk_complete(BE_OK, 13);
	assert_granted(&r[3], 13);
	ck_assert_int_eq(r[4].calls, 0);
	s = status("m");
	ck_assert_uint_eq(s.holders, 3);
	ck_assert_uint_eq(s.waiters, 1);

	ck_assert_int_eq(unlock(0, "m", NULL, &u), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 2);
	fk_complete(BE_OK, 0);
	fk_complete(BE_OK, 14);
	assert_granted(&r[4], 14);
	ck_assert_uint_lt(r[3].seq, r[4].seq);
	s = status("m");
	ck_assert_uint_eq(s.holders, 3);
	ck_assert_uint_eq(s.waiters, 0);
	ck_assert_uint_eq(fk.count[FK_TRANSFER], 0);
}
END_TEST

START_TEST(semaphore_kind_mismatch)
{
	struct res r, w;
	hold(0, "s", SEMA, 3, 30000, 0, 1, &r);
	ck_assert_int_eq(lock(1, "s", SEMA, 4, 30000, WAIT_FOREVER, 0, &w), LT_E_KIND);
	ck_assert_int_eq(lock(1, "s", SEMA, 2, 30000, 0, 0, &w), LT_E_KIND);
	ck_assert_int_eq(lock(1, "s", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_E_KIND);
	ck_assert_int_eq(lock(1, "s", SHRD, 0, 30000, WAIT_FOREVER, 0, &w), LT_E_KIND);

	hold(0, "x", EXCL, 0, 30000, 0, 2, &r);
	ck_assert_int_eq(lock(1, "x", SEMA, 2, 30000, WAIT_FOREVER, 0, &w), LT_E_KIND);
	hold(0, "sh", SHRD, 0, 30000, 0, 3, &r);
	ck_assert_int_eq(lock(1, "sh", SEMA, 1, 30000, WAIT_FOREVER, 0, &w), LT_E_KIND);

	/* a key with only a waiter (its acquire in flight) has a kind too */
	ck_assert_int_eq(lock(2, "w", SEMA, 2, 30000, WAIT_FOREVER, 0, &r), LT_PENDING);
	ck_assert_int_eq(lock(1, "w", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_E_KIND);
	ck_assert_int_eq(lock(1, "w", SEMA, 5, 30000, WAIT_FOREVER, 0, &w), LT_E_KIND);
	ck_assert_uint_eq(fk.npend, 1);
	ck_assert_int_eq(lock(1, "w", SEMA, 2, 30000, WAIT_FOREVER, 0, &w), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 2);
	fk_complete(BE_OK, 4);
	fk_complete(BE_OK, 5);
	assert_granted(&r, 4);
	assert_granted(&w, 5);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.waiters, 0);
	ck_assert_uint_eq(st.holds, 5);
}
END_TEST

/* ---- reentrancy ---------------------------------------------------------- */

START_TEST(reentrant_lock_unlock)
{
	struct res r, again, u;
	hold(0, "k", EXCL, 0, 30000, 0, 7, &r);
	for (unsigned n = 2; n <= 3; n++) {
		ck_assert_int_eq(lock(0, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &again), LT_OK);
		ck_assert_int_eq(again.calls, 0);
		ck_assert_str_eq(again.g.token, r.g.token);
		ck_assert_uint_eq(again.g.fence, 7);
		ck_assert_uint_eq(again.g.ttl_ms, 30000);
		ck_assert_uint_eq(again.g.count, n);
	}
	/* a different TTL does not change the lease */
	ck_assert_int_eq(lock(0, "k", EXCL, 0, 5000, 0, 0, &again), LT_OK);
	ck_assert_uint_eq(again.g.count, 4);
	ck_assert_uint_eq(again.g.ttl_ms, 30000);
	ck_assert_uint_eq(fk.count[FK_ACQUIRE], 1);
	ck_assert_uint_eq(fk.npend, 0);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.grants, 1);
	ck_assert_uint_eq(st.reentrant, 3);
	ck_assert_uint_eq(st.holds, 1);
	ck_assert_uint_eq(status("k").holders, 1);

	for (long long left = 3; left >= 1; left--) {
		ck_assert_int_eq(unlock(0, "k", NULL, &u), LT_OK);
		ck_assert_int_eq(u.value, left);
		ck_assert_int_eq(u.calls, 0);
		ck_assert_uint_eq(fk.npend, 0);
		ck_assert_int_eq(validate("k", 7), 1);
	}
	ck_assert_int_eq(unlock(0, "k", NULL, &u), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 1);
	ck_assert_str_eq(fk_expect(0, FK_RELEASE, "k")->token, r.g.token);
	ck_assert_int_eq(u.calls, 0);
	fk_complete(BE_OK, 0);
	ck_assert_int_eq(u.calls, 1);
	ck_assert_int_eq(u.st, LT_OK);
	ck_assert_int_eq(u.value, 0);
	ck_assert_str_eq(status("k").mode, "free");
	ck_assert_int_eq(unlock(0, "k", NULL, &u), LT_E_NOTHELD);
	st = stats();
	ck_assert_uint_eq(st.releases, 1);
	ck_assert_uint_eq(st.holds, 0);

	/* a semaphore permit is reentrant with the same LIMIT */
	hold(1, "m", SEMA, 2, 30000, 0, 8, &r);
	ck_assert_int_eq(lock(1, "m", SEMA, 2, 30000, WAIT_FOREVER, 0, &again), LT_OK);
	ck_assert_uint_eq(again.g.count, 2);
	ck_assert_uint_eq(again.g.fence, 8);
	ck_assert_uint_eq(status("m").holders, 1);
	/* and so is a shared hold */
	hold(2, "s", SHRD, 0, 30000, 0, 9, &r);
	ck_assert_int_eq(lock(2, "s", SHRD, 0, 30000, WAIT_FOREVER, 0, &again), LT_OK);
	ck_assert_uint_eq(again.g.count, 2);
	ck_assert_str_eq(again.g.token, r.g.token);
}
END_TEST

START_TEST(relock_other_mode)
{
	struct res r, w;
	hold(0, "k", EXCL, 0, 30000, 0, 1, &r);
	ck_assert_int_eq(lock(0, "k", SHRD, 0, 30000, WAIT_FOREVER, 0, &w), LT_E_MODE);
	ck_assert_int_eq(lock(0, "k", SEMA, 3, 30000, WAIT_FOREVER, 0, &w), LT_E_MODE);
	hold(0, "s", SHRD, 0, 30000, 0, 2, &r);
	ck_assert_int_eq(lock(0, "s", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_E_MODE);
	hold(0, "m", SEMA, 3, 30000, 0, 3, &r);
	ck_assert_int_eq(lock(0, "m", SEMA, 4, 30000, WAIT_FOREVER, 0, &w), LT_E_MODE);
	ck_assert_int_eq(lock(0, "m", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_E_MODE);
	/* a detached lock behind the session's own holding would wait for
	 * itself, whatever the mode */
	ck_assert_int_eq(lock(0, "k", EXCL, 0, 30000, WAIT_FOREVER, 1, &w), LT_E_MODE);
	ck_assert_int_eq(lock(0, "s", SHRD, 0, 30000, WAIT_FOREVER, 1, &w), LT_E_MODE);
	ck_assert_int_eq(w.calls, 0);
	ck_assert_uint_eq(fk.npend, 0);
	ck_assert_uint_eq(fk.count[FK_ACQUIRE], 3);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.reentrant, 0);
	ck_assert_uint_eq(st.waiters, 0);
}
END_TEST

/* ---- WAIT ---------------------------------------------------------------- */

START_TEST(wait_timeout)
{
	struct res h, w;
	fk_now = 5000;
	hold(0, "k", EXCL, 0, 30000, 0, 1, &h);	/* renewal due at 15000 */
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, 500, 0, &w), LT_PENDING);
	ck_assert_uint_eq(locktab_next_deadline(lt), 5500);
	fk_now = 5499;
	locktab_tick(lt);
	ck_assert_int_eq(w.calls, 0);
	ck_assert_uint_eq(status("k").waiters, 1);
	fk_now = 5500;
	locktab_tick(lt);
	ck_assert_int_eq(w.calls, 1);
	ck_assert_int_eq(w.st, LT_NOT_GRANTED);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.timeouts, 1);
	ck_assert_uint_eq(st.waiters, 0);
	ck_assert_uint_eq(status("k").waiters, 0);
	ck_assert_uint_eq(fk.count[FK_ACQUIRE], 1);
	ck_assert_uint_eq(fk.npend, 0);
	ck_assert_uint_eq(locktab_next_deadline(lt), 15000);
	/* more ticks do not tell it again */
	fk_now = 6000;
	locktab_tick(lt);
	ck_assert_int_eq(w.calls, 1);
}
END_TEST

START_TEST(wait0_held_key)
{
	struct res h, w;
	hold(0, "k", EXCL, 0, 30000, 0, 1, &h);
	size_t nops = fk.nops;
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, 0, 0, &w), LT_NOT_GRANTED);
	ck_assert_int_eq(lock(1, "k", SHRD, 0, 30000, 0, 0, &w), LT_NOT_GRANTED);
	ck_assert_int_eq(w.calls, 0);
	ck_assert_uint_eq(fk.nops, nops);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.timeouts, 2);
	ck_assert_uint_eq(st.waiters, 0);
	ck_assert_uint_eq(status("k").waiters, 0);

	/* a full semaphore */
	hold(0, "m", SEMA, 1, 30000, 0, 2, &h);
	nops = fk.nops;
	ck_assert_int_eq(lock(1, "m", SEMA, 1, 30000, 0, 0, &w), LT_NOT_GRANTED);
	ck_assert_uint_eq(fk.nops, nops);

	/* a key whose acquire is in flight is taken */
	ck_assert_int_eq(lock(2, "f", EXCL, 0, 30000, WAIT_FOREVER, 0, &h), LT_PENDING);
	nops = fk.nops;
	ck_assert_int_eq(lock(3, "f", EXCL, 0, 30000, 0, 0, &w), LT_NOT_GRANTED);
	ck_assert_uint_eq(fk.nops, nops);

	/* shared next to shared holders is tried */
	hold(0, "s", SHRD, 0, 30000, 0, 3, &h);
	ck_assert_int_eq(lock(1, "s", SHRD, 0, 30000, 0, 0, &w), LT_PENDING);
	ck_assert_int_eq(fk_expect(fk.npend - 1, FK_ACQUIRE, "s")->mode, SHRD);
	fk_complete_at(fk.npend - 1, BE_OK, 4);
	assert_granted(&w, 4);
	ck_assert_uint_eq(stats().timeouts, 4);
}
END_TEST

START_TEST(wait0_free_key_busy)
{
	struct res w, w2;
	ck_assert_int_eq(lock(0, "k", EXCL, 0, 30000, 0, 0, &w), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 1);
	fk_expect(0, FK_ACQUIRE, "k");
	fk_complete(BE_BUSY, 0);
	ck_assert_int_eq(w.calls, 1);
	ck_assert_int_eq(w.st, LT_NOT_GRANTED);
	ck_assert_uint_eq(fk.npend, 0);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.timeouts, 1);
	ck_assert_uint_eq(st.waiters, 0);
	ck_assert_uint_eq(st.holds, 0);
	struct lt_key_status s = status("k");
	ck_assert_uint_eq(s.holders, 0);
	ck_assert_uint_eq(s.waiters, 0);
	/* the key is not left waiting for a wakeup: the next LOCK is sent */
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &w2), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 1);
	fk_complete(BE_OK, 1);
	assert_granted(&w2, 1);

	/* the same next to a holder that keeps the key in use */
	struct res h, w3, w4;
	hold(0, "m", SEMA, 2, 30000, 0, 2, &h);
	ck_assert_int_eq(lock(1, "m", SEMA, 2, 30000, 0, 0, &w3), LT_PENDING);
	fk_complete(BE_BUSY, 0);
	ck_assert_int_eq(w3.st, LT_NOT_GRANTED);
	ck_assert_int_eq(lock(2, "m", SEMA, 2, 30000, 0, 0, &w4), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 1);
	fk_complete(BE_OK, 3);
	assert_granted(&w4, 3);

	/* a LOCK queued behind a try in flight is sent when the try is
	 * refused: a backend owes no wakeup to a try, which left no wait in it
	 * (etcd deletes a try's key) */
	struct res t5, w5;
	ck_assert_int_eq(lock(0, "n", EXCL, 0, 30000, 0, 0, &t5), LT_PENDING);
	ck_assert_int_eq(lock(1, "n", EXCL, 0, 30000, WAIT_FOREVER, 0, &w5), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 1);
	fk_complete(BE_BUSY, 0);
	ck_assert_int_eq(t5.st, LT_NOT_GRANTED);
	ck_assert_uint_eq(fk.npend, 1);
	fk_expect(0, FK_ACQUIRE, "n");
	fk_complete(BE_OK, 5);
	assert_granted(&w5, 5);
}
END_TEST

/* ---- BUSY, wakeups and backend errors ------------------------------------ */

START_TEST(busy_then_wakeup)
{
	struct res a, b, c;
	char t0[TOKEN_LEN + 1];
	ck_assert_int_eq(lock(0, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &a), LT_PENDING);
	pending_token(0, t0);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &b), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 1);
	fk_complete(BE_BUSY, 0);
	ck_assert_int_eq(a.calls, 0);
	ck_assert_uint_eq(fk.npend, 0);
	struct lt_key_status s = status("k");
	ck_assert_uint_eq(s.holders, 0);
	ck_assert_uint_eq(s.waiters, 2);
	/* the key is taken elsewhere: try-once fails at once */
	ck_assert_int_eq(lock(2, "k", EXCL, 0, 30000, 0, 0, &c), LT_NOT_GRANTED);
	/* neither time nor a wakeup for another key retries */
	fk_now += 10000;
	locktab_tick(lt);
	fk_be.up.wakeup(fk_be.up.arg, "other", 5);
	fk_be.up.wakeup(fk_be.up.arg, "kk", 2);
	ck_assert_uint_eq(fk.npend, 0);
	ck_assert_uint_eq(fk.count[FK_ACQUIRE], 1);
	/* the wakeup retries the head only, with the same token */
	fk_be.up.wakeup(fk_be.up.arg, "k", 1);
	ck_assert_uint_eq(fk.npend, 1);
	ck_assert_str_eq(fk_expect(0, FK_ACQUIRE, "k")->token, t0);
	ck_assert_uint_eq(fk.count[FK_ACQUIRE], 2);
	/* a spurious wakeup while it is decided sends nothing more */
	fk_be.up.wakeup(fk_be.up.arg, "k", 1);
	ck_assert_uint_eq(fk.npend, 1);
	fk_complete(BE_OK, 9);
	assert_granted(&a, 9);
	ck_assert_str_eq(a.g.token, t0);
	ck_assert_int_eq(b.calls, 0);
	ck_assert_uint_eq(fk.npend, 0);
	ck_assert_uint_eq(status("k").waiters, 1);
}
END_TEST

START_TEST(busy_wait_deadline)
{
	struct res c, d, e;
	fk_now = 1000;
	ck_assert_int_eq(lock(0, "b", EXCL, 0, 30000, 1000, 0, &c), LT_PENDING);
	/* while the backend decides there is no WAIT deadline */
	ck_assert_uint_eq(locktab_next_deadline(lt), LT_NEVER);
	fk_complete(BE_BUSY, 0);
	ck_assert_int_eq(c.calls, 0);
	ck_assert_uint_eq(locktab_next_deadline(lt), 2000);
	ck_assert_uint_eq(rearm_when, 2000);
	fk_now = 1999;
	locktab_tick(lt);
	ck_assert_int_eq(c.calls, 0);
	fk_now = 2000;
	locktab_tick(lt);
	ck_assert_int_eq(c.calls, 1);
	ck_assert_int_eq(c.st, LT_NOT_GRANTED);
	ck_assert_uint_eq(stats().timeouts, 1);
	ck_assert_uint_eq(fk.npend, 0);

	/* WAIT runs out while the backend decides: its answer decides */
	ck_assert_int_eq(lock(1, "c", EXCL, 0, 30000, 100, 0, &d), LT_PENDING);
	ck_assert_int_eq(lock(2, "e", EXCL, 0, 30000, 100, 0, &e), LT_PENDING);
	fk_now += 200;
	locktab_tick(lt);
	ck_assert_int_eq(d.calls, 0);
	ck_assert_int_eq(e.calls, 0);
	fk_complete(BE_BUSY, 0);
	ck_assert_int_eq(d.calls, 1);
	ck_assert_int_eq(d.st, LT_NOT_GRANTED);
	fk_complete(BE_OK, 5);
	assert_granted(&e, 5);
}
END_TEST

START_TEST(backend_error_on_acquire)
{
	struct res a, b, c;
	/* an error that lasts (the configuration) is answered at once */
	fk.lasting = 1;
	ck_assert_int_eq(lock(0, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &a), LT_PENDING);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &b), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 1);
	fk_complete(BE_ERROR, 0);
	ck_assert_int_eq(a.calls, 1);
	ck_assert_int_eq(a.st, LT_E_BACKEND);
	ck_assert_uint_eq(stats().backend_errors, 1);
	ck_assert_uint_eq(stats().backend_waits, 0);
	/* the one behind it is tried next */
	ck_assert_uint_eq(fk.npend, 1);
	fk_expect(0, FK_ACQUIRE, "k");
	fk_complete(BE_OK, 3);
	assert_granted(&b, 3);
	/* NOTOWNER on an acquire is a backend failure too */
	fk.lasting = 0;
	ck_assert_int_eq(lock(2, "n", EXCL, 0, 30000, WAIT_FOREVER, 0, &c), LT_PENDING);
	fk_complete(BE_NOTOWNER, 0);
	ck_assert_int_eq(c.calls, 1);
	ck_assert_int_eq(c.st, LT_E_BACKEND);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.backend_errors, 2);
	ck_assert_uint_eq(st.grants, 1);
	ck_assert_uint_eq(st.holds, 1);
	ck_assert_uint_eq(st.waiters, 0);
	ck_assert_uint_eq(status("n").holders, 0);
}
END_TEST

/* A LOCK with WAIT left waits through a backend outage: the head of the
 * queue tries again, backed off, and is granted once the backend answers;
 * those behind it keep their places. */
START_TEST(backend_error_waits_through)
{
	struct res a, b;
	fk_now = 1000;
	ck_assert_int_eq(lock(0, "k", EXCL, 0, 30000, 10000, 0, &a), LT_PENDING);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, 10000, 0, &b), LT_PENDING);
	char first[TOKEN_LEN + 1];
	memcpy(first, fk_expect(0, FK_ACQUIRE, "k")->token, sizeof(first));
	fk_complete(BE_ERROR, 0);
	ck_assert_int_eq(a.calls + b.calls, 0);
	ck_assert_uint_eq(fk.npend, 0);
	ck_assert_uint_eq(stats().backend_waits, 1);
	ck_assert_uint_eq(status("k").waiters, 2);
	/* retries: 50, then 100, 200 ms later */
	ck_assert_uint_eq(locktab_next_deadline(lt), 1050);
	fk_now = 1050;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.npend, 1);
	/* a new lease: the failed one may be given back under its token */
	ck_assert_str_ne(fk_expect(0, FK_ACQUIRE, "k")->token, first);
	fk_complete(BE_ERROR, 0);
	ck_assert_uint_eq(locktab_next_deadline(lt), 1150);
	fk_now = 1150;
	locktab_tick(lt);
	fk_complete(BE_ERROR, 0);
	ck_assert_uint_eq(locktab_next_deadline(lt), 1350);
	/* the backend came back and said so (a wakeup): tried at once */
	fk_be.up.wakeup(fk_be.up.arg, NULL, 0);
	ck_assert_uint_eq(fk.npend, 1);
	fk_complete(BE_OK, 7);
	assert_granted(&a, 7);
	ck_assert_int_eq(b.calls, 0);
	ck_assert_uint_eq(stats().backend_waits, 3);
	/* the backoff starts again after an answer */
	struct res u;
	ck_assert_int_eq(unlock(0, "k", NULL, &u), LT_PENDING);
	fk_complete(BE_ERROR, 0);	/* the transfer to b */
	ck_assert_int_eq(b.calls, 0);
	ck_assert_uint_eq(locktab_next_deadline(lt), fk_now + 50);
}
END_TEST

/* Its WAIT runs out while the backend is down: -BACKEND, not nil, for the
 * head and those behind it; WAIT 0 is answered at once. */
START_TEST(backend_error_wait_runs_out)
{
	struct res a, b, c, d;
	fk_now = 1000;
	ck_assert_int_eq(lock(0, "k", EXCL, 0, 30000, 120, 0, &a), LT_PENDING);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, 400, 0, &b), LT_PENDING);
	fk_complete(BE_ERROR, 0);
	/* WAIT 0 on the key while its queue waits for the backend */
	ck_assert_int_eq(lock(2, "k", EXCL, 0, 30000, 0, 0, &c), LT_E_BACKEND);
	/* WAIT 0 on another key: tried, and answered at once */
	ck_assert_int_eq(lock(3, "m", EXCL, 0, 30000, 0, 0, &d), LT_PENDING);
	fk_complete(BE_ERROR, 0);
	ck_assert_int_eq(d.calls, 1);
	ck_assert_int_eq(d.st, LT_E_BACKEND);
	fk_now = 1050;
	locktab_tick(lt);
	fk_complete(BE_ERROR, 0);
	/* the next retry would come after a's WAIT: a is answered then */
	ck_assert_uint_eq(locktab_next_deadline(lt), 1120);
	fk_now = 1120;
	locktab_tick(lt);
	ck_assert_int_eq(a.calls, 1);
	ck_assert_int_eq(a.st, LT_E_BACKEND);
	/* b, never tried, keeps waiting; its WAIT ends while the key is
	 * still failing: -BACKEND */
	ck_assert_int_eq(b.calls, 0);
	fk_now = 1400;
	locktab_tick(lt);
	ck_assert_int_eq(b.calls, 1);
	ck_assert_int_eq(b.st, LT_E_BACKEND);
	ck_assert_uint_eq(stats().timeouts, 0);
	ck_assert_uint_eq(status("k").waiters, 0);
}
END_TEST

/* A holder whose renewals fail is told "suspended" at the first failure,
 * once, and "resumed" when one succeeds; a loss after a suspension tells
 * only the loss. */
START_TEST(renewal_failures_suspend)
{
	struct res h, g;
	fk_now = 10000;
	hold(0, "k", EXCL, 0, 3000, 0, 1, &h);
	hold(1, "m", EXCL, 0, 3000, 0, 2, &g);
	fk_now = 11000;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.npend, 2);
	fk_complete(BE_ERROR, 0);
	ck_assert_int_eq(O[0].nsuspended, 1);
	ck_assert_str_eq(O[0].suspend_reason, "the fake backend says so");
	ck_assert_uint_eq(stats().suspended, 1);
	fk_complete(BE_ERROR, 0);
	ck_assert_uint_eq(stats().suspended, 2);
	/* the retry fails too: told once */
	fk_now = 11300;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.npend, 2);
	fk_complete(BE_ERROR, 0);
	ck_assert_int_eq(O[0].nsuspended, 1);
	ck_assert_int_eq(O[0].nresumed, 0);
	/* then one succeeds: resumed */
	fk_complete(BE_OK, 0);
	ck_assert_int_eq(O[1].nresumed, 1);
	ck_assert_uint_eq(stats().suspended, 1);
	/* the other is lost: no resumed, the gauge is back to 0 */
	fk_now = 12800;
	locktab_tick(lt);
	ck_assert_int_eq(O[0].nlost, 1);
	ck_assert_int_eq(O[0].nresumed, 0);
	ck_assert_uint_eq(stats().suspended, 0);
	ck_assert_int_eq(O[1].nlost, 0);
}
END_TEST

/* ---- owners destroyed ---------------------------------------------------- */

START_TEST(destroy_queued_waiter)
{
	struct res h, b, c;
	hold(0, "k", EXCL, 0, 30000, 0, 1, &h);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &b), LT_PENDING);
	ck_assert_int_eq(lock(2, "k", EXCL, 0, 30000, 5000, 0, &c), LT_PENDING);
	kill_owner(1);
	ck_assert_uint_eq(fk.npend, 0);
	ck_assert_uint_eq(status("k").waiters, 1);
	ck_assert_uint_eq(stats().waiters, 1);
	release(0, "k");
	/* exactly one acquire: the next live waiter */
	ck_assert_uint_eq(fk.npend, 1);
	ck_assert_uint_eq(fk.count[FK_ACQUIRE], 2);
	fk_complete(BE_OK, 2);
	assert_granted(&c, 2);
	ck_assert_int_eq(b.calls, 0);
}
END_TEST

START_TEST(destroy_while_acquiring)
{
	struct res a, b, c, d;
	char t0[TOKEN_LEN + 1];
	ck_assert_int_eq(lock(0, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &a), LT_PENDING);
	pending_token(0, t0);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &b), LT_PENDING);
	kill_owner(0);
	ck_assert_uint_eq(fk.npend, 1);
	/* granted to nobody: the lease is given back, the next one goes */
	fk_complete(BE_OK, 5);
	ck_assert_int_eq(a.calls, 0);
	ck_assert_uint_eq(fk.npend, 2);
	ck_assert_str_eq(fk_expect(0, FK_RELEASE, "k")->token, t0);
	ck_assert_str_ne(fk_expect(1, FK_ACQUIRE, "k")->token, t0);
	fk_complete(BE_OK, 0);
	fk_complete(BE_OK, 6);
	assert_granted(&b, 6);
	struct lt_key_status s = status("k");
	ck_assert_uint_eq(s.holders, 1);
	ck_assert_uint_eq(s.waiters, 0);
	ck_assert_uint_eq(s.fence, 6);
	ck_assert_int_eq(validate("k", 5), 0);
	ck_assert_uint_eq(stats().grants, 1);

	/* the backend answers BUSY instead: nothing to give back */
	ck_assert_int_eq(lock(2, "j", EXCL, 0, 30000, WAIT_FOREVER, 0, &c), LT_PENDING);
	ck_assert_int_eq(lock(3, "j", EXCL, 0, 30000, WAIT_FOREVER, 0, &d), LT_PENDING);
	kill_owner(2);
	fk_complete(BE_BUSY, 0);
	ck_assert_uint_eq(fk.npend, 0);
	ck_assert_uint_eq(status("j").waiters, 1);
	fk_be.up.wakeup(fk_be.up.arg, "j", 1);
	ck_assert_uint_eq(fk.npend, 1);
	fk_complete(BE_OK, 7);
	assert_granted(&d, 7);
	ck_assert_int_eq(c.calls, 0);
	ck_assert_uint_eq(stats().waiters, 0);
}
END_TEST

START_TEST(destroy_while_holding)
{
	struct res h, s, b;
	hold(0, "k", EXCL, 0, 30000, 0, 1, &h);
	hold(0, "s", SHRD, 0, 30000, 0, 2, &s);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &b), LT_PENDING);
	kill_owner(0);
	/* no transfer in this fake: a release each, and the waiter's acquire */
	ck_assert_uint_eq(fk.npend, 3);
	ck_assert_uint_eq(fk.count[FK_RELEASE], 2);
	ck_assert_int_ge(fk_find(FK_RELEASE, h.g.token), 0);
	ck_assert_int_ge(fk_find(FK_RELEASE, s.g.token), 0);
	ck_assert_int_ge(fk_find(FK_ACQUIRE, NULL), 0);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.releases, 2);
	ck_assert_uint_eq(st.holds, 0);
	ck_assert_str_eq(status("s").mode, "free");
	fk_drain();
	ck_assert_int_eq(b.calls, 1);
	ck_assert_int_eq(b.st, LT_OK);
	ck_assert_int_eq(validate("k", b.g.fence), 1);
	ck_assert_uint_eq(status("k").holders, 1);
}
END_TEST

START_TEST(destroy_while_holding_transfer)
{
	struct res h, b;
	hold(0, "k", EXCL, 0, 30000, 0, 1, &h);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &b), LT_PENDING);
	kill_owner(0);
	ck_assert_uint_eq(fk.npend, 1);
	struct fk_op *op = fk_expect(0, FK_TRANSFER, "k");
	ck_assert_str_eq(op->token, h.g.token);
	char to[TOKEN_LEN + 1];
	memcpy(to, op->to, sizeof(to));
	fk_complete(BE_OK, 2);
	assert_granted(&b, 2);
	ck_assert_str_eq(b.g.token, to);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.handoffs, 1);
	ck_assert_uint_eq(st.releases, 1);
	ck_assert_uint_eq(fk.count[FK_RELEASE], 0);
}
END_TEST

/* An owner with a hold, a queued LOCK, a LOCK being decided, an UNLOCK and
 * an EXTEND in flight is destroyed: whatever happens next, none of its
 * callbacks runs (the dead flag would fail the test). */
START_TEST(destroyed_owner_never_called)
{
	struct res u0, e0, q0, h1, w0, a0, ul, ex;
	hold(0, "u", EXCL, 0, 60000, 0, 1, &u0);
	hold(0, "e", EXCL, 0, 60000, 0, 2, &e0);
	hold(1, "q", EXCL, 0, 60000, 0, 3, &h1);
	hold(0, "held", EXCL, 0, 60000, 0, 4, &q0);
	ck_assert_int_eq(lock(0, "q", EXCL, 0, 60000, 9000, 0, &w0), LT_PENDING);
	ck_assert_int_eq(lock(0, "a", EXCL, 0, 60000, WAIT_FOREVER, 0, &a0), LT_PENDING);
	ck_assert_int_eq(unlock(0, "u", NULL, &ul), LT_PENDING);
	ck_assert_int_eq(extend(0, "e", 90000, NULL, &ex), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 3);
	kill_owner(0);
	fk_drain();
	fk_now += 10000;
	locktab_tick(lt);
	fk_drain();
	ck_assert_int_eq(w0.calls, 0);
	ck_assert_int_eq(a0.calls, 0);
	ck_assert_int_eq(ul.calls, 0);
	ck_assert_int_eq(ex.calls, 0);
	ck_assert_str_eq(status("u").mode, "free");
	ck_assert_str_eq(status("e").mode, "free");
	ck_assert_str_eq(status("a").mode, "free");
	ck_assert_str_eq(status("held").mode, "free");
	struct lt_key_status s = status("q");
	ck_assert_uint_eq(s.holders, 1);
	ck_assert_uint_eq(s.waiters, 0);
	ck_assert_int_eq(validate("q", 3), 1);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.holds, 1);
	ck_assert_uint_eq(st.waiters, 0);
	ck_assert_uint_eq(st.keys, 1);
	ck_assert(locktab_idle(lt));
}
END_TEST

/* ---- detached holdings --------------------------------------------------- */

START_TEST(detach_expires_at_ttl)
{
	struct res d, b;
	fk_now = 1000;
	hold(0, "d", EXCL, 0, 2000, 1, 9, &d);
	ck_assert_uint_eq(locktab_owner_holds(O[0].o, NULL, NULL), 0);
	ck_assert_int_eq(lock(1, "d", EXCL, 0, 30000, WAIT_FOREVER, 0, &b), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 0);
	ck_assert_uint_eq(locktab_next_deadline(lt), 3000);
	fk_now = 2999;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.npend, 0);
	ck_assert_int_eq(validate("d", 9), 1);
	fk_now = 3000;
	locktab_tick(lt);
	ck_assert_uint_eq(stats().expired, 1);
	ck_assert_int_eq(validate("d", 9), 0);
	/* no transfer in this fake: the release, then the waiter's acquire */
	ck_assert_uint_eq(fk.npend, 2);
	ck_assert_str_eq(fk_expect(0, FK_RELEASE, "d")->token, d.g.token);
	fk_expect(1, FK_ACQUIRE, "d");
	fk_complete(BE_OK, 0);
	fk_complete(BE_OK, 10);
	assert_granted(&b, 10);
	/* a detached lease is never renewed */
	ck_assert_uint_eq(fk.count[FK_RENEW], 0);
}
END_TEST

START_TEST(detach_unlock_by_token)
{
	struct res d, u;
	static const char wrong[] = "0123456789abcdef0123456789abcdef";
	hold(0, "d", EXCL, 0, 5000, 1, 9, &d);
	ck_assert_str_ne(d.g.token, wrong);
	ck_assert_int_eq(unlock(1, "d", NULL, &u), LT_E_NOTHELD);
	ck_assert_int_eq(unlock(0, "d", NULL, &u), LT_E_NOTHELD);
	ck_assert_int_eq(unlock(1, "d", wrong, &u), LT_E_NOTHELD);
	ck_assert_uint_eq(fk.npend, 0);
	ck_assert_int_eq(unlock(1, "d", d.g.token, &u), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 1);
	ck_assert_str_eq(fk_expect(0, FK_RELEASE, "d")->token, d.g.token);
	fk_complete(BE_OK, 0);
	ck_assert_int_eq(u.calls, 1);
	ck_assert_int_eq(u.st, LT_OK);
	ck_assert_int_eq(u.value, 0);
	ck_assert_str_eq(status("d").mode, "free");
	ck_assert_uint_eq(stats().releases, 1);
	ck_assert_int_eq(unlock(1, "d", d.g.token, &u), LT_E_NOTHELD);
	/* a detached LOCK is not reentrant: it queues behind the holding */
	hold(0, "e", EXCL, 0, 5000, 1, 10, &d);
	ck_assert_int_eq(lock(0, "e", EXCL, 0, 5000, 0, 1, &u), LT_NOT_GRANTED);
}
END_TEST

START_TEST(detach_survives_owner)
{
	struct res d, b;
	fk_now = 1000;
	hold(0, "d", EXCL, 0, 5000, 1, 9, &d);
	kill_owner(0);
	ck_assert_uint_eq(fk.npend, 0);
	struct lt_key_status s = status("d");
	ck_assert_str_eq(s.mode, "exclusive");
	ck_assert_uint_eq(s.holders, 1);
	ck_assert_int_eq(s.ttl_ms, 5000);
	ck_assert_int_eq(validate("d", 9), 1);
	ck_assert_int_eq(lock(1, "d", EXCL, 0, 30000, WAIT_FOREVER, 0, &b), LT_PENDING);
	fk_now = 6000;
	locktab_tick(lt);
	/* expiry hands the key straight to the exclusive waiter */
	ck_assert_uint_eq(fk.npend, 1);
	struct fk_op *op = fk_expect(0, FK_TRANSFER, "d");
	ck_assert_str_eq(op->token, d.g.token);
	fk_complete(BE_OK, 10);
	assert_granted(&b, 10);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.expired, 1);
	ck_assert_uint_eq(st.handoffs, 1);
}
END_TEST

START_TEST(unlock_not_held)
{
	struct res h, w, u;
	static const char wrong[] = "ffffffffffffffffffffffffffffffff";
	ck_assert_int_eq(unlock(0, "nokey", NULL, &u), LT_E_NOTHELD);
	ck_assert_int_eq(unlock(0, "nokey", wrong, &u), LT_E_NOTHELD);
	hold(0, "k", EXCL, 0, 30000, 0, 1, &h);
	ck_assert_int_eq(unlock(1, "k", NULL, &u), LT_E_NOTHELD);
	ck_assert_int_eq(unlock(1, "k", wrong, &u), LT_E_NOTHELD);
	ck_assert_int_eq(unlock(0, "k", wrong, &u), LT_E_NOTHELD);
	ck_assert_int_eq(extend(1, "k", 1000, NULL, &u), LT_E_NOTHELD);
	ck_assert_int_eq(extend(0, "k", 1000, wrong, &u), LT_E_NOTHELD);
	ck_assert_int_eq(extend(0, "nokey", 1000, NULL, &u), LT_E_NOTHELD);
	/* waiting for a key is not holding it */
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_PENDING);
	ck_assert_int_eq(unlock(1, "k", NULL, &u), LT_E_NOTHELD);
	ck_assert_int_eq(u.calls, 0);
	ck_assert_uint_eq(fk.npend, 0);
	ck_assert_int_eq(validate("k", 1), 1);
	ck_assert_uint_eq(status("k").waiters, 1);
	ck_assert_uint_eq(stats().releases, 0);
}
END_TEST

/* ---- leases: EXTEND, renewal, loss --------------------------------------- */

START_TEST(extend_sets_ttl)
{
	struct res h, e, d;
	fk_now = 10000;
	hold(0, "k", EXCL, 0, 3000, 0, 1, &h);
	ck_assert_int_eq(status("k").ttl_ms, 3000);
	fk_now = 10100;
	ck_assert_int_eq(status("k").ttl_ms, 2900);
	ck_assert_int_eq(extend(0, "k", 9000, NULL, &e), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 1);
	struct fk_op *op = fk_expect(0, FK_RENEW, "k");
	ck_assert_str_eq(op->token, h.g.token);
	ck_assert_uint_eq(op->ttl_ms, 9000);
	ck_assert_int_eq(e.calls, 0);
	fk_complete(BE_OK, 0);
	ck_assert_int_eq(e.calls, 1);
	ck_assert_int_eq(e.st, LT_OK);
	ck_assert_int_eq(e.value, 9000);
	ck_assert_int_eq(status("k").ttl_ms, 9000);
	/* renewals follow the new TTL: a third of it from the EXTEND */
	ck_assert_uint_eq(locktab_next_deadline(lt), 13100);
	fk_now = 11100;
	ck_assert_int_eq(status("k").ttl_ms, 8000);
	fk_now = 13100;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.npend, 1);
	ck_assert_uint_eq(fk_expect(0, FK_RENEW, "k")->ttl_ms, 9000);
	fk_complete(BE_OK, 0);
	ck_assert_int_eq(status("k").ttl_ms, 9000);

	/* a failed EXTEND leaves the lease as it was */
	ck_assert_int_eq(extend(0, "k", 1000, NULL, &e), LT_PENDING);
	fk_complete(BE_ERROR, 0);
	ck_assert_int_eq(e.calls, 1);
	ck_assert_int_eq(e.st, LT_E_BACKEND);
	ck_assert_int_eq(status("k").ttl_ms, 9000);
	release(0, "k");

	/* a detached lease, by token, from another owner */
	hold(1, "d", EXCL, 0, 2000, 1, 5, &d);
	ck_assert_int_eq(extend(2, "d", 7000, d.g.token, &e), LT_PENDING);
	ck_assert_str_eq(fk_expect(0, FK_RENEW, "d")->token, d.g.token);
	fk_complete(BE_OK, 0);
	ck_assert_int_eq(e.st, LT_OK);
	ck_assert_int_eq(e.value, 7000);
	ck_assert_int_eq(status("d").ttl_ms, 7000);
	ck_assert_uint_eq(locktab_next_deadline(lt), 20100);
	fk_now = 20099;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.npend, 0);
	fk_now = 20100;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.npend, 1);
	ck_assert_str_eq(fk_expect(0, FK_RELEASE, "d")->token, d.g.token);
	ck_assert_uint_eq(stats().expired, 1);
}
END_TEST

START_TEST(renewal_every_third)
{
	struct res h, d, s;
	fk_now = 1000;
	hold(0, "k", EXCL, 0, 3000, 0, 1, &h);
	hold(1, "d", EXCL, 0, 3000, 1, 2, &d);
	ck_assert_uint_eq(locktab_next_deadline(lt), 2000);
	ck_assert_uint_eq(rearm_when, 2000);
	fk_now = 1999;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.count[FK_RENEW], 0);
	fk_now = 2000;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.count[FK_RENEW], 1);
	struct fk_op *op = fk_expect(0, FK_RENEW, "k");
	ck_assert_str_eq(op->token, h.g.token);
	ck_assert_uint_eq(op->ttl_ms, 3000);
	ck_assert_int_eq(op->mode, EXCL);
	/* while it is out, the next deadline is the point of loss */
	ck_assert_uint_eq(locktab_next_deadline(lt), 3700);
	fk_now = 2500;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.count[FK_RENEW], 1);
	fk_complete(BE_OK, 0);
	/* the lease now runs from when the renewal was sent */
	ck_assert_int_eq(status("k").ttl_ms, 2500);
	ck_assert_uint_eq(locktab_next_deadline(lt), 3000);
	fk_now = 3000;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.count[FK_RENEW], 2);
	fk_complete(BE_OK, 0);
	/* at 4000: the third renewal, and the detached lease ends */
	fk_now = 4000;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.count[FK_RENEW], 3);
	ck_assert_int_ge(fk_find(FK_RELEASE, d.g.token), 0);
	ck_assert_int_lt(fk_find(FK_RENEW, d.g.token), 0);
	fk_drain();
	for (size_t i = 0; i < fk.nops; i++)
		if (fk.ops[i].kind == FK_RENEW)
			ck_assert_str_eq(fk.ops[i].token, h.g.token);
	ck_assert_int_eq(O[0].nlost, 0);
	ck_assert_int_eq(validate("k", 1), 1);

	/* shared holds are renewed too */
	hold(2, "s", SHRD, 0, 600, 0, 3, &s);
	fk_now += 200;
	locktab_tick(lt);
	ck_assert_int_ge(fk_find(FK_RENEW, s.g.token), 0);
}
END_TEST

START_TEST(renew_notowner_lost)
{
	struct res h, b, e, u;
	fk_now = 1000;
	hold(0, "k", EXCL, 0, 3000, 0, 42, &h);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &b), LT_PENDING);
	fk_now = 2000;
	locktab_tick(lt);
	fk_expect(0, FK_RENEW, "k");
	fk_complete(BE_NOTOWNER, 0);
	ck_assert_int_eq(O[0].nlost, 1);
	ck_assert_str_eq(O[0].lost_key, "k");
	ck_assert_uint_eq(O[0].lost_fence, 42);
	ck_assert_str_eq(O[0].lost_reason, "the fake backend says so");
	ck_assert_uint_eq(stats().lost, 1);
	/* the backend says the lease is not ours: nothing to release, and
	 * (without a lock-delay) the waiter is served */
	ck_assert_uint_eq(fk.npend, 1);
	fk_expect(0, FK_ACQUIRE, "k");
	ck_assert_uint_eq(locktab_owner_holds(O[0].o, NULL, NULL), 0);
	ck_assert_int_eq(validate("k", 42), 0);
	ck_assert_uint_eq(status("k").holders, 0);
	ck_assert_uint_eq(stats().holds, 0);
	/* EXTEND says LOST; UNLOCK says it once, then NOTHELD */
	ck_assert_int_eq(extend(0, "k", 5000, NULL, &e), LT_E_LOST);
	ck_assert_int_eq(unlock(0, "k", NULL, &u), LT_E_LOST);
	ck_assert_int_eq(unlock(0, "k", NULL, &u), LT_E_NOTHELD);
	ck_assert_int_eq(e.calls, 0);
	ck_assert_int_eq(u.calls, 0);
	fk_complete(BE_OK, 43);
	assert_granted(&b, 43);
	ck_assert_int_eq(O[0].nlost, 1);
	ck_assert_int_eq(O[1].nlost, 0);
}
END_TEST

/* A LOST record is forgotten when the owner locks the key again, and when
 * the owner goes. */
START_TEST(lost_then_relock)
{
	struct res h, again, u;
	fk_now = 1000;
	hold(0, "k", EXCL, 0, 3000, 0, 1, &h);
	fk_now = 2000;
	locktab_tick(lt);
	fk_complete(BE_NOTOWNER, 0);
	ck_assert_int_eq(O[0].nlost, 1);
	fk_drain();
	hold(0, "k", EXCL, 0, 3000, 0, 2, &again);
	ck_assert_str_ne(again.g.token, h.g.token);
	ck_assert_int_eq(unlock(0, "k", h.g.token, &u), LT_E_NOTHELD);
	release(0, "k");
	ck_assert_int_eq(unlock(0, "k", NULL, &u), LT_E_NOTHELD);
}
END_TEST

/* Move the clock in steps of 10 ms, failing every renewal, until owner i is
 * told of a loss (before the clock reaches limit). Returns the renewals. */
static unsigned
fail_renewals_until_lost(int i, uint64_t limit)
{
	unsigned renews = 0;
	while (O[i].nlost == 0) {
		ck_assert_uint_lt(fk_now, limit);
		fk_now += 10;
		locktab_tick(lt);
		long p;
		while ((p = fk_find(FK_RENEW, NULL)) >= 0) {
			fk_complete_at((size_t)p, BE_ERROR, 0);
			renews++;
		}
	}
	return renews;
}

START_TEST(renew_error_until_margin)
{
	struct res h;
	unsigned renews;
	fk_now = 1000;
	hold(0, "k", EXCL, 0, 3000, 0, 1, &h);
	renews = fail_renewals_until_lost(0, 1000 + 3000 + 1000);
	/* declared lost before the lease could have run out at the backend */
	ck_assert_uint_lt(O[0].lost_clock, 1000 + 3000);
	ck_assert_uint_ge(O[0].lost_clock, 1000 + 3000 - 300);
	ck_assert_uint_eq(O[0].lost_fence, 1);
	ck_assert_str_eq(O[0].lost_key, "k");
	ck_assert_uint_ge(renews, 2);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.backend_errors, renews);
	ck_assert_uint_eq(st.lost, 1);
	/* the lease is not released before its end: the holder may not have
	 * heard yet; at its end it is released, in case a late renewal kept it */
	ck_assert_int_lt(fk_find(FK_RELEASE, h.g.token), 0);
	fk_now = 1000 + 3000 - 1;
	locktab_tick(lt);
	ck_assert_int_lt(fk_find(FK_RELEASE, h.g.token), 0);
	fk_now = 1000 + 3000;
	locktab_tick(lt);
	ck_assert_int_ge(fk_find(FK_RELEASE, h.g.token), 0);
}
END_TEST

START_TEST(renew_unanswered_lost)
{
	struct res h, u;
	fk_now = 1000;
	hold(0, "k", EXCL, 0, 3000, 0, 1, &h);
	fk_now = 2000;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.npend, 1);
	fk_now = 3699;
	locktab_tick(lt);
	ck_assert_int_eq(O[0].nlost, 0);
	ck_assert_uint_eq(fk.count[FK_RENEW], 1);
	fk_now = 3700;
	locktab_tick(lt);
	ck_assert_int_eq(O[0].nlost, 1);
	ck_assert_uint_eq(O[0].lost_clock, 3700);
	/* the renewal comes back too late: the holding stays lost */
	long p = fk_find(FK_RENEW, NULL);
	ck_assert_int_ge(p, 0);
	fk_complete_at((size_t)p, BE_OK, 0);
	ck_assert_int_eq(validate("k", 1), 0);
	ck_assert_uint_eq(status("k").holders, 0);
	fk_drain();
	fk_now = 10000;
	locktab_tick(lt);
	ck_assert_int_eq(O[0].nlost, 1);
	ck_assert_int_eq(unlock(0, "k", NULL, &u), LT_E_LOST);
}
END_TEST

/* The holding goes while an EXTEND of it is out: the EXTEND must not report
 * a new TTL for a lock that is no longer held. */
START_TEST(extend_in_flight_when_lost)
{
	struct res h, d, e, e2, u;
	fk_now = 1000;
	hold(0, "k", EXCL, 0, 3000, 0, 1, &h);
	ck_assert_int_eq(extend(0, "k", 60000, NULL, &e), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 1);
	/* the backend is slow: at 3700 the lease is declared lost */
	fk_now = 3700;
	locktab_tick(lt);
	ck_assert_int_eq(O[0].nlost, 1);
	long p = fk_find(FK_RENEW, h.g.token);
	ck_assert_int_ge(p, 0);
	ck_assert_uint_eq(fk_pending((size_t)p)->ttl_ms, 60000);
	fk_complete_at((size_t)p, BE_OK, 0);
	ck_assert_int_eq(e.calls, 1);
	ck_assert_int_eq(e.st, LT_E_LOST);
	ck_assert_int_eq(validate("k", 1), 0);

	/* a detached holding unlocked by token while an EXTEND is out */
	hold(1, "d", EXCL, 0, 5000, 1, 2, &d);
	ck_assert_int_eq(extend(2, "d", 9000, d.g.token, &e2), LT_PENDING);
	ck_assert_int_eq(unlock(3, "d", d.g.token, &u), LT_PENDING);
	p = fk_find(FK_RENEW, d.g.token);
	ck_assert_int_ge(p, 0);
	fk_complete_at((size_t)p, BE_OK, 0);
	ck_assert_int_eq(e2.calls, 1);
	ck_assert_int_ne(e2.st, LT_OK);
	fk_drain();
	ck_assert_int_eq(u.st, LT_OK);
	ck_assert_str_eq(status("d").mode, "free");
}
END_TEST

/* ---- handing an exclusive lock over (transfer) --------------------------- */

/* Owner 0 holds "k" and owner 1 waits for it; owner 0 unlocks: the table asks
 * for a transfer. Returns the new lease's token in to. */
static void
start_transfer(struct res *h, struct res *b, struct res *u, char to[TOKEN_LEN + 1])
{
	hold(0, "k", EXCL, 0, 30000, 0, 1, h);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 20000, WAIT_FOREVER, 0, b), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 0);
	ck_assert_int_eq(unlock(0, "k", NULL, u), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 1);
	struct fk_op *op = fk_expect(0, FK_TRANSFER, "k");
	ck_assert_str_eq(op->token, h->g.token);
	ck_assert_uint_eq(strlen(op->to), TOKEN_LEN);
	ck_assert_str_ne(op->to, h->g.token);
	ck_assert_uint_eq(op->ttl_ms, 20000);
	ck_assert_int_eq(op->mode, EXCL);
	memcpy(to, op->to, TOKEN_LEN + 1);
	ck_assert_uint_eq(fk.count[FK_ACQUIRE], 1);
	ck_assert_uint_eq(fk.count[FK_RELEASE], 0);
	ck_assert_int_eq(validate("k", 1), 0);
	struct lt_key_status s = status("k");
	ck_assert_uint_eq(s.holders, 0);
	ck_assert_uint_eq(s.waiters, 1);
}

/* Handoffs of a key in a row are counted and told to the backend with each
 * transfer (from's be_lock.handoffs); the table sets no limit of its own.
 * The backend may refuse a transfer to let other daemons in (BE_BUSY). */
static struct res alt[2];	/* alternate_handoffs: outlive the call */

/* Owner from unlocks "k": the table asks for a transfer that says handoffs
 * came before it, the backend grants it with fence, to is told so, and the
 * UNLOCK is done. */
static void
handoff(int from, unsigned handoffs, uint64_t fence, struct res *to)
{
	struct res u;
	ck_assert_int_eq(unlock(from, "k", NULL, &u), LT_PENDING);
	struct fk_op *op = fk_expect(0, FK_TRANSFER, "k");
	ck_assert_uint_eq(op->handoffs, handoffs);
	fk_complete(BE_OK, fence);
	ck_assert_int_eq(u.calls, 1);
	ck_assert_int_eq(u.st, LT_OK);
	assert_granted(to, fence);
}

/* Owner 0 holds "k" (fence 1) and owners 0 and 1 hand it to each other n
 * times in a row (fences 2 ..), each locking again at once: transfer i says
 * that i handoffs came before it. Then owner n % 2 holds the key (fence
 * n + 1) and the other waits. */
static void
alternate_handoffs(int n)
{
	struct res *r = alt;
	hold(0, "k", EXCL, 0, 30000, 0, 1, &r[0]);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &r[1]), LT_PENDING);
	for (int i = 0; i < n; i++) {
		int from = i % 2, to = 1 - from;
		handoff(from, (unsigned)i, (uint64_t)i + 2, &r[to]);
		ck_assert_str_ne(r[to].g.token, r[from].g.token);
		ck_assert_int_eq(lock(from, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &r[from]),
		    LT_PENDING);
	}
}

/* describe: "<owner> <ttl> <detached>" (an lt_describe_fn). */
static size_t
describe_test(void *arg, uint64_t id, uint64_t ttl_ms, int detached, char *buf, size_t len)
{
	(void)arg;
	return (size_t)snprintf(buf, len, "%llu %llu %d", (unsigned long long)id,
	    (unsigned long long)ttl_ms, detached);
}

/* The holder's description goes with each lease asked of the backend: an
 * acquire's is its owner's, a transfer's the waiter's it goes to; none
 * without a describe function, and none with a release or a renewal. */
START_TEST(lease_described)
{
	struct res h, g, w, u;
	hold(0, "k", EXCL, 0, 30000, 0, 5, &h);
	ck_assert_str_eq(fk.ops[0].who, "");
	release(0, "k");
	locktab_set_describe(lt, describe_test, NULL);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 7000, WAIT_FOREVER, 0, &g), LT_PENDING);
	ck_assert_str_eq(fk_expect(0, FK_ACQUIRE, "k")->who, "2 7000 0");
	fk_complete(BE_OK, 6);
	ck_assert_int_eq(lock(2, "k", EXCL, 0, 9000, WAIT_FOREVER, 0, &w), LT_PENDING);
	ck_assert_int_eq(unlock(1, "k", NULL, &u), LT_PENDING);
	ck_assert_str_eq(fk_expect(0, FK_TRANSFER, "k")->who, "3 9000 0");
	fk_complete(BE_OK, 7);
	ck_assert_int_eq(w.st, LT_OK);
	for (size_t i = 0; i < fk.nops; i++)
		if (fk.ops[i].kind == FK_RELEASE || fk.ops[i].kind == FK_RENEW)
			ck_assert_str_eq(fk.ops[i].who, "");
}
END_TEST

START_TEST(handoffs_counted_and_passed)
{
	struct res u;
	alternate_handoffs(40);
	ck_assert_uint_eq(stats().handoffs, 40);
	/* the 41st is a transfer too, after 40 in a row */
	ck_assert_int_eq(unlock(0, "k", NULL, &u), LT_PENDING);
	ck_assert_uint_eq(fk_expect(0, FK_TRANSFER, "k")->handoffs, 40);
	/* nothing but a transfer carries a count */
	for (size_t i = 0; i < fk.nops; i++)
		if (fk.ops[i].kind != FK_TRANSFER)
			ck_assert_uint_eq(fk.ops[i].handoffs, 0);
}
END_TEST

/* An acquire starts a new run: here after a transfer that found the old
 * lease ended, with no release in between. */
START_TEST(handoffs_reset_by_acquire)
{
	struct res u, w;
	alternate_handoffs(3);		/* owner 1 holds, owner 0 waits */
	ck_assert_int_eq(unlock(1, "k", NULL, &u), LT_PENDING);
	ck_assert_uint_eq(fk_expect(0, FK_TRANSFER, "k")->handoffs, 3);
	fk_complete(BE_NOTOWNER, 0);
	ck_assert_int_eq(u.st, LT_E_LOST);
	ck_assert_uint_eq(fk_expect(0, FK_ACQUIRE, "k")->handoffs, 0);
	fk_complete(BE_OK, 10);
	assert_granted(&alt[0], 10);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_PENDING);
	handoff(0, 0, 11, &w);
}
END_TEST

/* A release (nobody to hand the key to) ends the run too. */
START_TEST(handoffs_reset_by_release)
{
	struct res h, w;
	alternate_handoffs(3);		/* owner 1 holds, owner 0 waits */
	ck_assert_uint_eq(locktab_owner_cancel(O[0].o), 1);
	release(1, "k");
	hold(0, "k", EXCL, 0, 30000, 0, 10, &h);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_PENDING);
	handoff(0, 0, 11, &w);
}
END_TEST

/*
 * The backend gives way to other daemons: BE_BUSY to a transfer means the
 * old lease was released and the waiter not granted. The UNLOCK is done;
 * the waiter keeps its place, nobody is granted the key here until the
 * backend's wakeup, which starts the waiter again.
 */
START_TEST(transfer_busy_gives_way)
{
	struct res u, t, n;
	alternate_handoffs(4);		/* owner 0 holds (fence 5), owner 1 waits */
	ck_assert_int_eq(unlock(0, "k", NULL, &u), LT_PENDING);
	struct fk_op *op = fk_expect(0, FK_TRANSFER, "k");
	ck_assert_uint_eq(op->handoffs, 4);
	char to[TOKEN_LEN + 1];
	memcpy(to, op->to, sizeof(to));
	fk_complete(BE_BUSY, 0);
	ck_assert_int_eq(u.calls, 1);
	ck_assert_int_eq(u.st, LT_OK);
	ck_assert_int_eq(u.value, 0);
	ck_assert_int_eq(alt[1].calls, 0);
	ck_assert_uint_eq(fk.npend, 0);
	struct lt_key_status s = status("k");
	ck_assert_uint_eq(s.holders, 0);
	ck_assert_uint_eq(s.waiters, 1);
	ck_assert_int_eq(validate("k", 5), 0);
	ck_assert_uint_eq(stats().handoffs, 4);
	ck_assert_uint_eq(stats().releases, 5);

	/* nobody is granted the key here meanwhile */
	ck_assert_int_eq(lock(2, "k", EXCL, 0, 30000, 0, 0, &n), LT_NOT_GRANTED);
	ck_assert_int_eq(lock(3, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &t), LT_PENDING);
	fk_now += 200;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.npend, 0);

	/* the wakeup starts the head again, for the same lease */
	fk_be.up.wakeup(fk_be.up.arg, "k", 1);
	ck_assert_uint_eq(fk.npend, 1);
	op = fk_expect(0, FK_ACQUIRE, "k");
	ck_assert_str_eq(op->token, to);
	ck_assert_uint_eq(op->handoffs, 0);
	fk_complete(BE_OK, 100);
	assert_granted(&alt[1], 100);
	ck_assert_str_eq(alt[1].g.token, to);
	ck_assert_int_eq(t.calls, 0);

	/* and a new run of handoffs starts */
	handoff(1, 0, 101, &t);
}
END_TEST

/* A waiter the backend gave way for still ends at its WAIT. */
START_TEST(transfer_busy_wait_times_out)
{
	struct res h, b, u;
	hold(0, "k", EXCL, 0, 30000, 0, 1, &h);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, 500, 0, &b), LT_PENDING);
	fk_now += 100;
	ck_assert_int_eq(unlock(0, "k", NULL, &u), LT_PENDING);
	fk_expect(0, FK_TRANSFER, "k");
	fk_complete(BE_BUSY, 0);
	ck_assert_int_eq(u.st, LT_OK);
	ck_assert_int_eq(b.calls, 0);
	ck_assert_uint_eq(locktab_next_deadline(lt), 1500);
	fk_now = 1499;
	locktab_tick(lt);
	ck_assert_int_eq(b.calls, 0);
	fk_now = 1500;
	locktab_tick(lt);
	ck_assert_int_eq(b.calls, 1);
	ck_assert_int_eq(b.st, LT_NOT_GRANTED);
	ck_assert_uint_eq(status("k").waiters, 0);
	ck_assert_uint_eq(stats().timeouts, 1);
	/* a wakeup that comes late finds nobody to start */
	fk_be.up.wakeup(fk_be.up.arg, "k", 1);
	ck_assert_uint_eq(fk.npend, 0);
}
END_TEST

/* Giving way while the table shuts down: the waiter is told so. */
START_TEST(transfer_busy_while_closing)
{
	struct res h, b, u;
	char to[TOKEN_LEN + 1];
	start_transfer(&h, &b, &u, to);
	locktab_shutdown(lt);
	fk_complete(BE_BUSY, 0);
	ck_assert_int_eq(u.st, LT_OK);
	ck_assert_int_eq(b.calls, 1);
	ck_assert_int_eq(b.st, LT_E_CLOSING);
	ck_assert_uint_eq(status("k").waiters, 0);
	ck_assert_uint_eq(fk.npend, 0);
}
END_TEST

/* A wakeup for no key in particular retries every blocked queue. */
START_TEST(wakeup_all_keys)
{
	struct res a, b;
	ck_assert_int_eq(lock(0, "a", EXCL, 0, 30000, WAIT_FOREVER, 0, &a), LT_PENDING);
	ck_assert_int_eq(lock(1, "b", EXCL, 0, 30000, WAIT_FOREVER, 0, &b), LT_PENDING);
	fk_complete(BE_BUSY, 0);
	fk_complete(BE_BUSY, 0);
	ck_assert_uint_eq(fk.npend, 0);
	fk_be.up.wakeup(fk_be.up.arg, NULL, 0);
	ck_assert_uint_eq(fk.npend, 2);
	ck_assert_uint_eq(fk.count[FK_ACQUIRE], 4);
}
END_TEST

/* Renewals of leases granted at different times within one quantum fall due
 * together, so the backend can send them as one batch. */
START_TEST(renewals_batched)
{
	struct res a, b;
	fk_now = 1010;
	hold(0, "a", EXCL, 0, 30000, 0, 1, &a);
	fk_now = 1070;
	hold(1, "b", EXCL, 0, 30000, 0, 2, &b);
	ck_assert_uint_eq(locktab_next_deadline(lt), 11100);
	fk_now = 11100;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.count[FK_RENEW], 2);
}
END_TEST

START_TEST(transfer_handoff)
{
	struct res h, b, u;
	char to[TOKEN_LEN + 1];
	start_transfer(&h, &b, &u, to);
	ck_assert_int_eq(u.calls, 0);
	ck_assert_int_eq(b.calls, 0);
	fk_complete(BE_OK, 50);
	ck_assert_int_eq(u.calls, 1);
	ck_assert_int_eq(u.st, LT_OK);
	ck_assert_int_eq(u.value, 0);
	assert_granted(&b, 50);
	ck_assert_str_eq(b.g.token, to);
	ck_assert_uint_eq(b.g.ttl_ms, 20000);
	ck_assert_uint_lt(u.seq, b.seq);
	ck_assert_uint_eq(fk.npend, 0);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.handoffs, 1);
	ck_assert_uint_eq(st.grants, 2);
	ck_assert_uint_eq(st.releases, 1);
	struct lt_key_status s = status("k");
	ck_assert_uint_eq(s.holders, 1);
	ck_assert_uint_eq(s.waiters, 0);
	ck_assert_uint_eq(s.fence, 50);
	ck_assert_int_eq(validate("k", 50), 1);
}
END_TEST

START_TEST(transfer_notowner_acquires)
{
	struct res h, b, u;
	char to[TOKEN_LEN + 1];
	start_transfer(&h, &b, &u, to);
	fk_complete(BE_NOTOWNER, 0);
	/* the old lease had ended: UNLOCK says so, the waiter acquires */
	ck_assert_int_eq(u.calls, 1);
	ck_assert_int_eq(u.st, LT_E_LOST);
	ck_assert_int_eq(b.calls, 0);
	ck_assert_uint_eq(fk.npend, 1);
	ck_assert_str_eq(fk_expect(0, FK_ACQUIRE, "k")->token, to);
	fk_complete(BE_OK, 51);
	assert_granted(&b, 51);
	ck_assert_str_eq(b.g.token, to);
	ck_assert_uint_eq(stats().handoffs, 0);
}
END_TEST

START_TEST(transfer_error)
{
	struct res h, b, u;
	char to[TOKEN_LEN + 1];
	start_transfer(&h, &b, &u, to);
	fk_complete(BE_ERROR, 0);
	ck_assert_int_eq(u.calls, 1);
	ck_assert_int_eq(u.st, LT_E_BACKEND);
	/* the old lease is released (it may be there); the waiter, its WAIT
	 * not over, waits through the outage and acquires */
	ck_assert_int_eq(b.calls, 0);
	ck_assert_uint_eq(stats().backend_errors, 1);
	ck_assert_uint_eq(status("k").waiters, 1);
	ck_assert_uint_eq(fk.npend, 1);
	fk_expect(0, FK_RELEASE, "k");
	fk_complete(BE_OK, 0);
	fk_now += 50;
	locktab_tick(lt);
	ck_assert_str_ne(fk_expect(0, FK_ACQUIRE, "k")->token, to);
	fk_complete(BE_OK, 52);
	assert_granted(&b, 52);
}
END_TEST

START_TEST(transfer_waiter_destroyed)
{
	struct res h, b, u;
	char to[TOKEN_LEN + 1];
	start_transfer(&h, &b, &u, to);
	kill_owner(1);
	fk_complete(BE_OK, 50);
	ck_assert_int_eq(u.calls, 1);
	ck_assert_int_eq(u.st, LT_OK);
	/* handed to nobody: the new lease is given back */
	ck_assert_uint_eq(fk.npend, 1);
	ck_assert_str_eq(fk_expect(0, FK_RELEASE, "k")->token, to);
	struct lt_key_status s = status("k");
	ck_assert_uint_eq(s.holders, 0);
	ck_assert_uint_eq(s.waiters, 0);
	ck_assert_uint_eq(s.fence, 50);
}
END_TEST

START_TEST(transfer_holder_destroyed)
{
	struct res h, b, u;
	char to[TOKEN_LEN + 1];
	start_transfer(&h, &b, &u, to);
	kill_owner(0);
	ck_assert_uint_eq(fk.npend, 1);
	fk_complete(BE_OK, 50);
	ck_assert_int_eq(u.calls, 0);
	assert_granted(&b, 50);
	ck_assert_uint_eq(fk.npend, 0);
}
END_TEST

/* ---- limits -------------------------------------------------------------- */

START_TEST(limits_waiters_and_locks)
{
	static const struct lt_limits lim = { 2, 3, 10, 0, 0 };
	struct res r, a, b, c, w;
	restart(&lim);
	hold(0, "k", EXCL, 0, 30000, 0, 1, &r);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &a), LT_PENDING);
	ck_assert_int_eq(lock(2, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &b), LT_PENDING);
	ck_assert_int_eq(lock(3, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &c), LT_E_WAITERS);
	ck_assert_int_eq(lock(3, "k", EXCL, 0, 30000, 100, 0, &c), LT_E_WAITERS);
	ck_assert_int_eq(c.calls, 0);
	ck_assert_uint_eq(status("k").waiters, 2);
	/* other keys are not affected */
	hold(3, "k2", EXCL, 0, 30000, 0, 2, &r);

	/* three locks per owner; the fourth is refused */
	hold(4, "a", EXCL, 0, 30000, 0, 3, &r);
	hold(4, "b", SHRD, 0, 30000, 0, 4, &r);
	hold(4, "c", SEMA, 2, 30000, 0, 5, &r);
	ck_assert_int_eq(lock(4, "d", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_E_LOCKS);
	/* reentrancy is not a new lock */
	ck_assert_int_eq(lock(4, "a", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_OK);
	ck_assert_uint_eq(w.g.count, 2);
	/* giving one back makes room */
	release(4, "c");
	hold(4, "d", EXCL, 0, 30000, 0, 6, &r);
	ck_assert_int_eq(lock(4, "e", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_E_LOCKS);

	/* a waiting LOCK counts */
	hold(5, "x", EXCL, 0, 30000, 0, 7, &r);
	hold(5, "y", EXCL, 0, 30000, 0, 8, &r);
	ck_assert_int_eq(lock(5, "k2", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_PENDING);
	ck_assert_int_eq(lock(5, "z", EXCL, 0, 30000, WAIT_FOREVER, 0, &c), LT_E_LOCKS);
	ck_assert_uint_eq(fk.npend, 0);
}
END_TEST

/* max_keys bounds the keys in use in all: a LOCK that would add one more is
 * refused, one on a key in use (waiting included) is not, and a key given
 * back makes room. */
START_TEST(limits_keys)
{
	static const struct lt_limits lim = { 10, 10, 10, 0, 2 };
	struct res r, w;
	restart(&lim);
	hold(0, "a", EXCL, 0, 30000, 0, 1, &r);
	hold(1, "b", SHRD, 0, 30000, 0, 2, &r);
	ck_assert_int_eq(lock(2, "c", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_E_KEYS);
	ck_assert_int_eq(lock(2, "c", EXCL, 0, 30000, 0, 0, &w), LT_E_KEYS);
	ck_assert_int_eq(w.calls, 0);
	/* keys in use take more holders and waiters */
	hold(2, "b", SHRD, 0, 30000, 0, 2, &r);
	ck_assert_int_eq(lock(2, "a", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_PENDING);
	ck_assert_uint_eq(status("a").waiters, 1);
	/* a key given back (it stays known, idle) makes room for another */
	release(1, "b");
	release(2, "b");
	hold(3, "c", EXCL, 0, 30000, 0, 3, &r);
	ck_assert_int_eq(lock(3, "b", EXCL, 0, 30000, 0, 0, &w), LT_E_KEYS);
}
END_TEST

/* New limits (a reload) apply to what comes next; what is there stays. */
START_TEST(limits_changed_live)
{
	static const struct lt_limits lim = { 1, 2, 10, 0, 0 }, more = { 2, 3, 10, 0, 0 },
	    less = { 1, 1, 10, 0, 0 };
	struct res r, a, b, w;
	restart(&lim);
	hold(0, "k", EXCL, 0, 30000, 0, 1, &r);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &a), LT_PENDING);
	ck_assert_int_eq(lock(2, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &b), LT_E_WAITERS);
	hold(0, "k2", EXCL, 0, 30000, 0, 2, &r);
	ck_assert_int_eq(lock(0, "k3", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_E_LOCKS);

	locktab_set_limits(lt, &more);
	ck_assert_int_eq(lock(2, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &b), LT_PENDING);
	hold(0, "k3", EXCL, 0, 30000, 0, 3, &r);
	ck_assert_uint_eq(status("k").waiters, 2);

	/* lower: nothing is dropped, nothing new is taken */
	locktab_set_limits(lt, &less);
	ck_assert_uint_eq(status("k").holders, 1);
	ck_assert_uint_eq(status("k").waiters, 2);
	ck_assert_uint_eq(status("k3").holders, 1);
	ck_assert_int_eq(lock(3, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_E_WAITERS);
	ck_assert_int_eq(lock(0, "k4", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_E_LOCKS);
	ck_assert_int_eq(a.calls + b.calls, 0);
}
END_TEST

/* ---- STATUS, VALIDATE, LOCKS --------------------------------------------- */

START_TEST(status_and_validate)
{
	struct res r, w, x;
	struct lt_key_status s = status("nokey");
	SUITE_ASSERT_STATUS(s, "free", 0, 0, 0, -1, 0);

	fk_now = 1000;
	hold(0, "e", EXCL, 0, 3000, 0, 11, &r);
	ck_assert_int_eq(lock(1, "e", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_PENDING);
	s = status("e");
	SUITE_ASSERT_STATUS(s, "exclusive", 1, 1, 11, 3000, 0);
	fk_now = 1500;
	ck_assert_int_eq(status("e").ttl_ms, 2500);

	hold(2, "s", SHRD, 0, 3000, 0, 12, &r);
	hold(3, "s", SHRD, 0, 3000, 0, 13, &r);
	s = status("s");
	SUITE_ASSERT_STATUS(s, "shared", 2, 0, 13, -1, 0);

	hold(4, "m", SEMA, 4, 3000, 0, 14, &r);
	s = status("m");
	ck_assert_str_eq(s.mode, "semaphore");
	ck_assert_uint_eq(s.holders, 1);
	ck_assert_uint_eq(s.fence, 14);
	ck_assert_int_eq(s.ttl_ms, -1);
	ck_assert_uint_eq(s.limit, 4);

	/* only a waiter so far */
	ck_assert_int_eq(lock(5, "m2", SEMA, 5, 3000, WAIT_FOREVER, 0, &x), LT_PENDING);
	s = status("m2");
	ck_assert_str_eq(s.mode, "free");
	ck_assert_uint_eq(s.holders, 0);
	ck_assert_uint_eq(s.waiters, 1);
	ck_assert_uint_eq(s.fence, 0);
	ck_assert_uint_eq(s.limit, 5);

	ck_assert_int_eq(validate("e", 11), 1);
	ck_assert_int_eq(validate("e", 12), 0);
	ck_assert_int_eq(validate("s", 12), 1);
	ck_assert_int_eq(validate("s", 13), 1);
	ck_assert_int_eq(validate("s", 11), 0);
	ck_assert_int_eq(validate("m", 14), 1);
	ck_assert_int_eq(validate("nokey", 11), 0);
	ck_assert_int_eq(validate("m2", 0), 0);

	/* a key nobody uses any more remembers its last fence */
	release(2, "s");
	release(3, "s");
	s = status("s");
	ck_assert_str_eq(s.mode, "free");
	ck_assert_uint_eq(s.holders, 0);
	ck_assert_uint_eq(s.fence, 13);
	ck_assert_int_eq(s.ttl_ms, -1);
	ck_assert_int_eq(validate("s", 13), 0);

	ck_assert_str_eq(locktab_mode_name(EXCL), "exclusive");
	ck_assert_str_eq(locktab_mode_name(SHRD), "shared");
	ck_assert_str_eq(locktab_mode_name(SEMA), "semaphore");
}
END_TEST

/* Keys are binary-safe: NUL bytes and prefixes make different keys. */
START_TEST(binary_keys)
{
	struct res a, b, c;
	struct lt_lock_req q1 = { "a\0b", 3, EXCL, 0, 30000, WAIT_FOREVER, 0, NULL, 0 };
	struct lt_lock_req q2 = { "a\0c", 3, EXCL, 0, 30000, WAIT_FOREVER, 0, NULL, 0 };
	struct lt_lock_req q3 = { "a", 1, EXCL, 0, 30000, WAIT_FOREVER, 0, NULL, 0 };
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	memset(&c, 0, sizeof(c));
	ck_assert_int_eq(locktab_lock(O[0].o, &q1, &a.g, on_done, &a), LT_PENDING);
	ck_assert_int_eq(locktab_lock(O[1].o, &q2, &b.g, on_done, &b), LT_PENDING);
	ck_assert_int_eq(locktab_lock(O[2].o, &q3, &c.g, on_done, &c), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 3);
	ck_assert_uint_eq(fk_pending(0)->keylen, 3);
	ck_assert_int_eq(memcmp(fk_pending(0)->key, "a\0b", 3), 0);
	fk_complete(BE_OK, 1);
	fk_complete(BE_OK, 2);
	fk_complete(BE_OK, 3);
	assert_granted(&a, 1);
	assert_granted(&b, 2);
	assert_granted(&c, 3);
	ck_assert_int_eq(locktab_validate(lt, "a\0b", 3, 1), 1);
	ck_assert_int_eq(locktab_validate(lt, "a\0c", 3, 2), 1);
	ck_assert_int_eq(locktab_validate(lt, "a\0b", 3, 2), 0);
	ck_assert_int_eq(locktab_validate(lt, "a", 1, 3), 1);
	struct lt_key_status s;
	locktab_status(lt, "a\0", 2, &s);
	ck_assert_str_eq(s.mode, "free");
}
END_TEST

/* What locktab_owner_holds reported. */
struct holds_seen {
	int n;				/* holdings reported */
	char key[8][16];		/* their keys */
	size_t keylen[8];		/* and key lengths */
	char token[8][TOKEN_LEN + 1];	/* tokens */
	uint64_t fence[8];		/* fences */
	enum lock_mode mode[8];		/* modes */
	unsigned count[8];		/* hold counts */
};

static void
collect_hold(void *arg, const struct lt_hold_info *h)
{
	struct holds_seen *hs = arg;
	ck_assert_int_lt(hs->n, 8);
	ck_assert_uint_lt(h->keylen, 16);
	memcpy(hs->key[hs->n], h->key, h->keylen);
	hs->key[hs->n][h->keylen] = '\0';
	hs->keylen[hs->n] = h->keylen;
	snprintf(hs->token[hs->n], sizeof(hs->token[hs->n]), "%s", h->token);
	hs->fence[hs->n] = h->fence;
	hs->mode[hs->n] = h->mode;
	hs->count[hs->n] = h->count;
	hs->n++;
}

START_TEST(owner_holds_lists)
{
	struct res a, b, c, d, w, again;
	struct holds_seen hs;
	hold(0, "k1", EXCL, 0, 30000, 0, 1, &a);
	hold(0, "k2", SHRD, 0, 30000, 0, 2, &b);
	hold(0, "k3", SEMA, 2, 30000, 0, 3, &c);
	ck_assert_int_eq(lock(0, "k3", SEMA, 2, 30000, WAIT_FOREVER, 0, &again), LT_OK);
	hold(0, "k4", EXCL, 0, 30000, 1, 4, &d);	/* detached: not listed */
	ck_assert_int_eq(lock(0, "k5", EXCL, 0, 30000, WAIT_FOREVER, 0, &w), LT_PENDING);

	memset(&hs, 0, sizeof(hs));
	ck_assert_uint_eq(locktab_owner_holds(O[0].o, collect_hold, &hs), 3);
	ck_assert_int_eq(hs.n, 3);
	ck_assert_str_eq(hs.key[0], "k1");
	ck_assert_str_eq(hs.key[1], "k2");
	ck_assert_str_eq(hs.key[2], "k3");
	ck_assert_uint_eq(hs.keylen[0], 2);
	ck_assert_str_eq(hs.token[0], a.g.token);
	ck_assert_str_eq(hs.token[1], b.g.token);
	ck_assert_str_eq(hs.token[2], c.g.token);
	ck_assert_uint_eq(hs.fence[0], 1);
	ck_assert_uint_eq(hs.fence[1], 2);
	ck_assert_uint_eq(hs.fence[2], 3);
	ck_assert_int_eq(hs.mode[0], EXCL);
	ck_assert_int_eq(hs.mode[1], SHRD);
	ck_assert_int_eq(hs.mode[2], SEMA);
	ck_assert_uint_eq(hs.count[0], 1);
	ck_assert_uint_eq(hs.count[1], 1);
	ck_assert_uint_eq(hs.count[2], 2);
	ck_assert_uint_eq(locktab_owner_holds(O[0].o, NULL, NULL), 3);
	ck_assert_uint_eq(locktab_owner_holds(O[1].o, NULL, NULL), 0);

	/* k5 is granted: it comes last */
	fk_complete_at(fk.npend - 1, BE_OK, 5);
	assert_granted(&w, 5);
	release(0, "k2");
	memset(&hs, 0, sizeof(hs));
	ck_assert_uint_eq(locktab_owner_holds(O[0].o, collect_hold, &hs), 3);
	ck_assert_str_eq(hs.key[0], "k1");
	ck_assert_str_eq(hs.key[1], "k3");
	ck_assert_str_eq(hs.key[2], "k5");
}
END_TEST

/* ---- shutdown ------------------------------------------------------------ */

START_TEST(shutdown_fails_waiters)
{
	struct res h, a, b, d, z, u;
	hold(0, "k", EXCL, 0, 30000, 0, 1, &h);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &a), LT_PENDING);
	ck_assert_int_eq(lock(2, "k", SHRD, 0, 30000, 5000, 0, &b), LT_PENDING);
	hold(3, "d", EXCL, 0, 5000, 1, 2, &d);
	ck_assert_uint_eq(fk.npend, 0);
	locktab_shutdown(lt);
	ck_assert_int_eq(a.calls, 1);
	ck_assert_int_eq(a.st, LT_E_CLOSING);
	ck_assert_int_eq(b.calls, 1);
	ck_assert_int_eq(b.st, LT_E_CLOSING);
	/* the detached holding is released */
	ck_assert_uint_eq(fk.npend, 1);
	ck_assert_str_eq(fk_expect(0, FK_RELEASE, "d")->token, d.g.token);
	fk_complete(BE_OK, 0);
	ck_assert_str_eq(status("d").mode, "free");
	struct lt_key_status s = status("k");
	ck_assert_uint_eq(s.holders, 1);
	ck_assert_uint_eq(s.waiters, 0);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.waiters, 0);
	ck_assert_uint_eq(st.timeouts, 0);
	/* no LOCK is accepted, even a reentrant one */
	ck_assert_int_eq(lock(5, "z", EXCL, 0, 30000, WAIT_FOREVER, 0, &z), LT_E_CLOSING);
	ck_assert_int_eq(lock(0, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &z), LT_E_CLOSING);
	ck_assert_int_eq(z.calls, 0);
	/* a bound holding goes with its owner or by UNLOCK, never handed over */
	ck_assert_int_eq(unlock(0, "k", NULL, &u), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 1);
	ck_assert_str_eq(fk_expect(0, FK_RELEASE, "k")->token, h.g.token);
	fk_complete(BE_OK, 0);
	ck_assert_int_eq(u.st, LT_OK);
	ck_assert_uint_eq(fk.count[FK_TRANSFER], 0);
	ck_assert_uint_eq(fk.count[FK_ACQUIRE], 2);
	ck_assert_uint_eq(locktab_next_deadline(lt), LT_NEVER);
}
END_TEST

/* A LOCK whose acquire is in flight when the table shuts down is a waiter
 * too: it must end with LT_E_CLOSING, not with a new holding. */
START_TEST(shutdown_acquiring_waiter)
{
	struct res c, d;
	char tc[TOKEN_LEN + 1];
	ck_assert_int_eq(lock(0, "q", EXCL, 0, 30000, WAIT_FOREVER, 0, &c), LT_PENDING);
	pending_token(0, tc);
	ck_assert_int_eq(lock(1, "r", EXCL, 0, 30000, WAIT_FOREVER, 0, &d), LT_PENDING);
	locktab_shutdown(lt);
	ck_assert_uint_eq(fk.npend, 2);
	fk_complete(BE_OK, 5);
	ck_assert_int_eq(c.calls, 1);
	ck_assert_int_eq(c.st, LT_E_CLOSING);
	ck_assert_uint_eq(status("q").holders, 0);
	ck_assert_int_eq(validate("q", 5), 0);
	ck_assert_uint_eq(locktab_owner_holds(O[0].o, NULL, NULL), 0);
	ck_assert_int_ge(fk_find(FK_RELEASE, tc), 0);
	/* BUSY: it does not wait for a wakeup that would never be served */
	fk_complete(BE_BUSY, 0);
	ck_assert_int_eq(d.calls, 1);
	ck_assert_int_eq(d.st, LT_E_CLOSING);
	ck_assert_uint_eq(status("r").waiters, 0);
	ck_assert_uint_eq(stats().waiters, 0);
}
END_TEST

/* Handoffs in flight when the table shuts down: the unlocks complete, the
 * waiters end with LT_E_CLOSING, a lease handed over is given back. */
START_TEST(shutdown_transfer_in_flight)
{
	struct res h, b, u, h2, b2, u2;
	char to[TOKEN_LEN + 1];
	start_transfer(&h, &b, &u, to);
	hold(2, "k2", EXCL, 0, 30000, 0, 2, &h2);
	ck_assert_int_eq(lock(3, "k2", EXCL, 0, 30000, WAIT_FOREVER, 0, &b2), LT_PENDING);
	ck_assert_int_eq(unlock(2, "k2", NULL, &u2), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 2);
	fk_expect(1, FK_TRANSFER, "k2");
	locktab_shutdown(lt);
	ck_assert_int_eq(b.calls, 0);
	ck_assert_int_eq(b2.calls, 0);

	fk_complete(BE_OK, 50);
	ck_assert_int_eq(u.calls, 1);
	ck_assert_int_eq(u.st, LT_OK);
	ck_assert_int_eq(b.calls, 1);
	ck_assert_int_eq(b.st, LT_E_CLOSING);
	ck_assert_int_ge(fk_find(FK_RELEASE, to), 0);

	fk_complete(BE_NOTOWNER, 0);
	ck_assert_int_eq(u2.calls, 1);
	ck_assert_int_eq(u2.st, LT_E_LOST);
	ck_assert_int_eq(b2.calls, 1);
	ck_assert_int_eq(b2.st, LT_E_CLOSING);
	ck_assert_int_lt(fk_find(FK_ACQUIRE, NULL), 0);
	ck_assert_uint_eq(status("k").holders, 0);
	ck_assert_uint_eq(status("k2").holders, 0);
	ck_assert_uint_eq(status("k2").waiters, 0);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.waiters, 0);
	ck_assert_uint_eq(st.holds, 0);
}
END_TEST

/* ---- deadlines and the rearm hook ---------------------------------------- */

START_TEST(deadline_and_rearm)
{
	struct res h, a, b, x;
	fk_now = 1000;
	ck_assert_uint_eq(locktab_next_deadline(lt), LT_NEVER);
	ck_assert_uint_eq(rearm_calls, 0);
	hold(0, "h", EXCL, 0, 3000, 0, 1, &h);
	ck_assert_uint_eq(locktab_next_deadline(lt), 2000);
	ck_assert_uint_eq(rearm_calls, 1);
	ck_assert_uint_eq(rearm_when, 2000);
	ck_assert_int_eq(lock(1, "h", EXCL, 0, 3000, 500, 0, &a), LT_PENDING);
	ck_assert_uint_eq(locktab_next_deadline(lt), 1500);
	ck_assert_uint_eq(rearm_calls, 2);
	ck_assert_uint_eq(rearm_when, 1500);
	/* a later deadline does not move the earliest one */
	ck_assert_int_eq(lock(2, "h", EXCL, 0, 3000, 800, 0, &b), LT_PENDING);
	ck_assert_uint_eq(locktab_next_deadline(lt), 1500);
	ck_assert_uint_eq(rearm_calls, 2);
	fk_now = 1500;
	locktab_tick(lt);
	ck_assert_int_eq(a.st, LT_NOT_GRANTED);
	ck_assert_uint_eq(locktab_next_deadline(lt), 1800);
	ck_assert_uint_eq(rearm_calls, 3);
	ck_assert_uint_eq(rearm_when, 1800);
	kill_owner(2);
	ck_assert_uint_eq(locktab_next_deadline(lt), 2000);
	ck_assert_uint_eq(rearm_when, 2000);
	ck_assert_uint_eq(rearm_calls, 4);
	/* a LOCK being decided has no deadline */
	ck_assert_int_eq(lock(3, "x", EXCL, 0, 3000, 50, 0, &x), LT_PENDING);
	ck_assert_uint_eq(rearm_calls, 4);
	release(0, "h");
	ck_assert_uint_eq(locktab_next_deadline(lt), LT_NEVER);
	ck_assert_uint_eq(rearm_when, LT_NEVER);
	ck_assert_uint_eq(rearm_calls, 5);
	/* BUSY puts its WAIT deadline back */
	fk_complete(BE_BUSY, 0);
	ck_assert_uint_eq(locktab_next_deadline(lt), 1550);
	ck_assert_uint_eq(rearm_when, 1550);
	ck_assert_uint_eq(rearm_calls, 6);
	fk_now = 1550;
	locktab_tick(lt);
	ck_assert_int_eq(x.st, LT_NOT_GRANTED);
	ck_assert_uint_eq(rearm_when, LT_NEVER);
	ck_assert_uint_eq(rearm_calls, 7);
}
END_TEST

/* Many keys come and go: idle keys are forgotten, oldest first, so memory
 * stays bounded, while recent ones keep their last fence. */
START_TEST(idle_keys_forgotten)
{
	struct res r;
	char key[32];
	for (int i = 0; i < 5000; i++) {
		snprintf(key, sizeof(key), "e%d", i);
		REQUIRE(lock(i % NOWN, key, EXCL, 0, 30000, WAIT_FOREVER, 0, &r) == LT_PENDING);
		fk_complete(BE_OK, (uint64_t)i + 1);
		REQUIRE(r.calls == 1 && r.st == LT_OK && r.g.fence == (uint64_t)i + 1);
		REQUIRE(unlock(i % NOWN, key, NULL, &r) == LT_PENDING);
		fk_complete(BE_OK, 0);
		REQUIRE(r.calls == 1 && r.st == LT_OK);
		REQUIRE(fk.npend == 0);
	}
	ck_assert_uint_eq(status("e0").fence, 0);
	ck_assert_uint_eq(status("e4999").fence, 5000);
	ck_assert_uint_eq(status("e3999").fence, 4000);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.keys, 0);
	ck_assert_uint_eq(st.grants, 5000);
	ck_assert_uint_eq(st.releases, 5000);
	/* a forgotten key works as a new one */
	hold(0, "e0", EXCL, 0, 30000, 0, 6000, &r);
	ck_assert_uint_eq(status("e0").fence, 6000);
}
END_TEST

/* ---- the memory backend and a real event loop ---------------------------- */

START_TEST(mem_fences_increase)
{
	struct res r[5], u, s[3], again;
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(lock(i, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &r[i]), LT_PENDING);
	ck_assert_int_eq(r[0].calls, 0);	/* never from inside the call */
	flush();
	assert_granted(&r[0], r[0].g.fence);
	uint64_t prev = r[0].g.fence;
	ck_assert_uint_gt(prev, 0);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(r[i + 1].calls, 0);
		ck_assert_int_eq(unlock(i, "k", NULL, &u), LT_PENDING);
		flush();
		ck_assert_int_eq(u.calls, 1);
		ck_assert_int_eq(u.st, LT_OK);
		ck_assert_int_eq(r[i + 1].calls, 1);
		ck_assert_int_eq(r[i + 1].st, LT_OK);
		ck_assert_uint_gt(r[i + 1].g.fence, prev);
		prev = r[i + 1].g.fence;
		ck_assert_uint_eq(status("k").fence, prev);
		ck_assert_int_eq(validate("k", prev), 1);
		ck_assert_uint_eq(status("k").holders, 1);
	}
	ck_assert_uint_eq(stats().handoffs, 4);
	ck_assert_int_eq(unlock(4, "k", NULL, &u), LT_PENDING);
	flush();
	ck_assert_int_eq(u.st, LT_OK);
	ck_assert_str_eq(status("k").mode, "free");

	/* a shared run: distinct fences, increasing in grant order */
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(lock(i, "s", SHRD, 0, 30000, WAIT_FOREVER, 0, &s[i]), LT_PENDING);
	flush();
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(s[i].st, LT_OK);
	for (int i = 0; i < 2; i++) {
		ck_assert_uint_lt(s[i].seq, s[i + 1].seq);
		ck_assert_uint_lt(s[i].g.fence, s[i + 1].g.fence);
	}
	/* the key was free a while: its next fence is higher still */
	ck_assert_int_eq(lock(0, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &again), LT_PENDING);
	flush();
	ck_assert_int_eq(again.st, LT_OK);
	ck_assert_uint_gt(again.g.fence, prev);
}
END_TEST

START_TEST(mem_destroy_in_flight)
{
	struct res a, b, c, d, u, u2;
	ck_assert_int_eq(lock(0, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &a), LT_PENDING);
	kill_owner(0);
	flush();
	ck_assert_int_eq(a.calls, 0);
	struct lt_key_status s = status("k");
	ck_assert_uint_eq(s.holders, 0);
	ck_assert_uint_eq(s.waiters, 0);
	ck_assert_uint_eq(stats().holds, 0);

	/* the holder goes while its handoff is in flight */
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &b), LT_PENDING);
	flush();
	ck_assert_int_eq(b.st, LT_OK);
	ck_assert_int_eq(lock(2, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &c), LT_PENDING);
	ck_assert_int_eq(unlock(1, "k", NULL, &u), LT_PENDING);
	kill_owner(1);
	flush();
	ck_assert_int_eq(u.calls, 0);
	ck_assert_int_eq(c.calls, 1);
	ck_assert_int_eq(c.st, LT_OK);
	ck_assert_uint_gt(c.g.fence, b.g.fence);

	/* the waiter goes while the handoff to it is in flight */
	ck_assert_int_eq(lock(3, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &d), LT_PENDING);
	ck_assert_int_eq(unlock(2, "k", NULL, &u2), LT_PENDING);
	kill_owner(3);
	flush();
	ck_assert_int_eq(u2.calls, 1);
	ck_assert_int_eq(u2.st, LT_OK);
	ck_assert_int_eq(d.calls, 0);
	s = status("k");
	ck_assert_uint_eq(s.holders, 0);
	ck_assert_uint_eq(s.waiters, 0);
	fk_now += 2000;		/* the last loss's log window ends */
	locktab_tick(lt);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.holds, 0);
	ck_assert_uint_eq(st.waiters, 0);
	ck_assert_uint_eq(st.keys, 0);
}
END_TEST

/* Memory leases live in this process: a bound holding is neither renewed nor
 * lost however long its session lasts, and STATUS shows its full TTL. */
START_TEST(mem_bound_lease_is_local)
{
	struct res a;
	ck_assert_int_eq(lock(0, "m", EXCL, 0, 100, WAIT_FOREVER, 0, &a), LT_PENDING);
	flush();
	ck_assert_int_eq(a.st, LT_OK);
	ck_assert_uint_eq(locktab_next_deadline(lt), LT_NEVER);
	fk_now += 10 * 100;
	locktab_tick(lt);
	flush();
	ck_assert_uint_eq(stats().lost, 0);
	ck_assert_int_eq(validate("m", a.g.fence), 1);
	ck_assert_int_eq(status("m").ttl_ms, 100);
}
END_TEST

START_TEST(mem_detach_expiry)
{
	struct res a, b;
	ck_assert_int_eq(lock(0, "d", EXCL, 0, 100, WAIT_FOREVER, 1, &a), LT_PENDING);
	flush();
	ck_assert_int_eq(a.st, LT_OK);
	kill_owner(0);
	ck_assert_int_eq(lock(1, "d", EXCL, 0, 30000, WAIT_FOREVER, 0, &b), LT_PENDING);
	flush();
	ck_assert_int_eq(b.calls, 0);
	fk_now += 100;
	locktab_tick(lt);
	flush();
	ck_assert_int_eq(b.calls, 1);
	ck_assert_int_eq(b.st, LT_OK);
	ck_assert_uint_gt(b.g.fence, a.g.fence);
	ck_assert_uint_eq(stats().expired, 1);
}
END_TEST

/* ---- randomized, against a model ----------------------------------------- */

#define R_HOLDS 4		/* holdings per owner the driver allows */

/* One holding in the model. */
struct r_hold {
	int key;			/* key index */
	enum lock_mode mode;		/* its mode */
	uint64_t fence;			/* its fence */
	unsigned count;			/* hold count */
};

/* One owner in the model; freed at the end, so late callbacks are caught. */
struct r_owner {
	struct lt_owner *o;		/* the table's owner */
	bool dead;			/* destroyed */
	int busy;			/* 0 idle, 1 LOCK waits, 2 UNLOCK waits */
	int key;			/* the waiting LOCK: key index */
	enum lock_mode mode;		/* its mode */
	int64_t wait;			/* its WAIT */
	uint64_t seq;			/* its arrival order */
	struct r_hold holds[R_HOLDS];	/* holdings */
	unsigned nholds;		/* used entries of holds */
};

/* One key in the model. */
struct r_key {
	bool sem;			/* a semaphore key (else lock) */
	unsigned limit;			/* its permits */
	unsigned nholders;		/* holdings */
	unsigned nexcl;			/* exclusive holdings */
	uint64_t last_fence;		/* last fence granted */
	unsigned handoffs;		/* transfers granted since the last acquire */
};

/* The model. */
struct rmodel {
	bool memory;			/* on the memory backend (else the fake) */
	struct r_key *keys;		/* keys, by index */
	int nkeys;			/* how many */
	struct r_owner **owners;	/* live owners, by slot */
	int nowners;			/* how many slots */
	struct r_owner **grave;		/* destroyed owners */
	size_t ngrave, gcap;		/* used and allocated entries of grave */
	int *wake;			/* keys answered BUSY, owed a wakeup */
	size_t nwake, wcap;		/* used and allocated entries of wake */
	uint64_t seq;			/* LOCKs so far */
	uint64_t rng;			/* random state */
	uint64_t grants, refused, lost, reentrant, busy;	/* what happened */
	uint64_t yields;		/* transfers answered BUSY */
};

static struct rmodel rm;		/* the model of the running randomized test */

/* xorshift64*: a fixed seed gives the same run everywhere. */
static uint64_t
rnd(void)
{
	rm.rng ^= rm.rng >> 12;
	rm.rng ^= rm.rng << 25;
	rm.rng ^= rm.rng >> 27;
	return rm.rng * 2685821657736338717ULL;
}

static unsigned
rnd_below(unsigned n)
{
	return (unsigned)(rnd() % n);
}

static void
r_keyname(int k, char *buf, size_t len)
{
	snprintf(buf, len, "rk%d", k);
}

static void
r_unhold(struct r_owner *ro, unsigned i)
{
	struct r_key *k = &rm.keys[ro->holds[i].key];
	ck_assert_uint_gt(k->nholders, 0);
	k->nholders--;
	if (ro->holds[i].mode == EXCL)
		k->nexcl--;
	ro->holds[i] = ro->holds[--ro->nholds];
}

/* Done callback of the randomized test: check the grant against the model. */
static void
r_done(void *arg, enum lt_status st, const struct lt_grant *g, long long value)
{
	struct r_owner *ro = arg;
	ck_assert_msg(!ro->dead, "a done callback of a destroyed owner was called");
	if (ro->busy == 2) {
		ck_assert_msg(st == LT_OK || st == LT_E_LOST, "UNLOCK ended with %d", st);
		ck_assert_int_eq(value, 0);
		ro->busy = 0;
		return;
	}
	ck_assert_int_eq(ro->busy, 1);
	ro->busy = 0;
	if (st == LT_NOT_GRANTED) {
		ck_assert_int_ge(ro->wait, 0);
		rm.refused++;
		return;
	}
	ck_assert_msg(st == LT_OK, "LOCK ended with %d", st);
	ck_assert_ptr_nonnull(g);
	struct r_key *k = &rm.keys[ro->key];
	/* never two exclusive holders, never shared and exclusive together,
	 * never more semaphore holders than permits */
	switch (ro->mode) {
	case EXCL:
		ck_assert_uint_eq(k->nholders, 0);
		break;
	case SHRD:
		ck_assert_uint_eq(k->nexcl, 0);
		break;
	case SEMA:
		ck_assert_uint_lt(k->nholders, k->limit);
		break;
	}
	/* FIFO: whoever came earlier and still waits is being granted in the
	 * same run as this one */
	unsigned earlier = 0;
	for (int i = 0; i < rm.nowners; i++) {
		const struct r_owner *p = rm.owners[i];
		if (p == ro || p->busy != 1 || p->key != ro->key || p->seq > ro->seq)
			continue;
		ck_assert_msg(ro->mode != EXCL, "exclusive grant passed an earlier waiter");
		ck_assert_msg(ro->mode != SHRD || p->mode == SHRD,
		    "shared grant passed an earlier exclusive waiter");
		earlier++;
	}
	if (ro->mode == SEMA)
		ck_assert_uint_le(k->nholders + earlier + 1, k->limit);
	ck_assert_uint_gt(g->fence, k->last_fence);
	ck_assert_uint_eq(g->count, 1);
	k->last_fence = g->fence;
	ck_assert_uint_lt(ro->nholds, R_HOLDS);
	struct r_hold *h = &ro->holds[ro->nholds++];
	h->key = ro->key;
	h->mode = ro->mode;
	h->fence = g->fence;
	h->count = 1;
	k->nholders++;
	if (ro->mode == EXCL)
		k->nexcl++;
	rm.grants++;
}

/* Lost callback of the randomized test. */
static void
r_lost(void *arg, const char *key, size_t keylen, uint64_t fence, const char *reason)
{
	struct r_owner *ro = arg;
	char name[32];
	ck_assert_msg(!ro->dead, "a lost callback of a destroyed owner was called");
	ck_assert_ptr_nonnull(reason);
	for (unsigned i = 0; i < ro->nholds; i++) {
		r_keyname(ro->holds[i].key, name, sizeof(name));
		if (strlen(name) == keylen && memcmp(name, key, keylen) == 0 &&
		    ro->holds[i].fence == fence) {
			r_unhold(ro, i);
			rm.lost++;
			return;
		}
	}
	ck_abort_msg("lost a holding the model does not know");
}

static struct r_owner *
r_owner_new(uint64_t id)
{
	struct r_owner *ro = calloc(1, sizeof(*ro));
	ck_assert_ptr_nonnull(ro);
	ro->o = locktab_owner_create(lt, id, r_lost, ro);
	ck_assert_ptr_nonnull(ro->o);
	return ro;
}

static void
r_owner_kill(int slot)
{
	struct r_owner *ro = rm.owners[slot];
	while (ro->nholds > 0)
		r_unhold(ro, 0);
	ro->dead = true;
	locktab_owner_destroy(ro->o);
	ro->o = NULL;
	if (rm.ngrave == rm.gcap) {
		rm.gcap = rm.gcap ? rm.gcap * 2 : 64;
		rm.grave = realloc(rm.grave, rm.gcap * sizeof(*rm.grave));
		ck_assert_ptr_nonnull(rm.grave);
	}
	rm.grave[rm.ngrave++] = ro;
	rm.owners[slot] = NULL;
}

/* An idle owner does something: UNLOCK one of its holdings, or LOCK. */
static void
r_act(struct r_owner *ro)
{
	char name[32];
	enum lt_status st;
	if (ro->nholds > 0 && (ro->nholds == R_HOLDS || rnd_below(2) == 0)) {
		unsigned i = rnd_below(ro->nholds);
		struct r_hold *h = &ro->holds[i];
		long long left = -1;
		r_keyname(h->key, name, sizeof(name));
		st = locktab_unlock(ro->o, name, strlen(name), NULL, &left, r_done, ro);
		if (h->count > 1) {
			ck_assert_int_eq(st, LT_OK);
			ck_assert_int_eq(left, h->count - 1);
			h->count--;
		} else {
			ck_assert_int_eq(st, LT_PENDING);
			r_unhold(ro, i);
			ro->busy = 2;
		}
		return;
	}
	/* now and then a key it holds: reentrancy, or another mode */
	int k = ro->nholds > 0 && rnd_below(8) == 0 ? ro->holds[rnd_below(ro->nholds)].key :
	    (int)rnd_below((unsigned)rm.nkeys);
	struct r_key *rk = &rm.keys[k];
	enum lock_mode mode = rk->sem ? SEMA : rnd_below(2) ? EXCL : SHRD;
	static const uint64_t ttls[] = { 1000, 3000, 30000 };
	uint64_t ttl = ttls[rnd_below(3)];
	unsigned w = rnd_below(10);
	int64_t wait = w < 5 ? WAIT_FOREVER : w < 7 ? 0 : 10 + (int64_t)rnd_below(2000);
	struct lt_lock_req q = { name, 0, mode, rk->sem ? rk->limit : 0, ttl, wait, 0, NULL, 0 };
	struct lt_grant g;
	r_keyname(k, name, sizeof(name));
	q.keylen = strlen(name);
	for (unsigned i = 0; i < ro->nholds; i++) {
		if (ro->holds[i].key != k)
			continue;
		st = locktab_lock(ro->o, &q, &g, r_done, ro);
		if (ro->holds[i].mode != mode) {
			ck_assert_int_eq(st, LT_E_MODE);
			return;
		}
		ck_assert_int_eq(st, LT_OK);
		ck_assert_uint_eq(g.fence, ro->holds[i].fence);
		ck_assert_uint_eq(g.count, ro->holds[i].count + 1);
		ro->holds[i].count++;
		rm.reentrant++;
		return;
	}
	ro->busy = 1;
	ro->key = k;
	ro->mode = mode;
	ro->wait = wait;
	ro->seq = ++rm.seq;
	st = locktab_lock(ro->o, &q, &g, r_done, ro);
	if (st == LT_PENDING)
		return;
	ro->busy = 0;
	ck_assert_msg(st == LT_NOT_GRANTED && wait == 0, "LOCK returned %d", st);
	rm.refused++;
}

/* The fake backend answers BE_BUSY for key k: it owes a wakeup. */
static void
r_busy(size_t pos, int k)
{
	if (rm.nwake == rm.wcap) {
		rm.wcap = rm.wcap ? rm.wcap * 2 : 64;
		rm.wake = realloc(rm.wake, rm.wcap * sizeof(*rm.wake));
		ck_assert_ptr_nonnull(rm.wake);
	}
	rm.wake[rm.nwake++] = k;
	rm.busy++;
	fk_complete_at(pos, BE_BUSY, 0);
}

/* The fake backend answers one pending operation, picked at random. A
 * transfer must carry the handoffs of its key since the last acquire. */
static void
r_answer(void)
{
	if (fk.npend == 0)
		return;
	/* mostly among the oldest: a backend answers out of order, but not
	 * so late that most grants come with too little of their lease left */
	size_t pos = rnd_below(fk.npend < 8 || rnd_below(8) == 0 ? (unsigned)fk.npend : 8);
	struct fk_op *op = fk_pending(pos);
	unsigned dice = rnd_below(100);
	int k = atoi(op->key + 2);
	struct r_key *rk = &rm.keys[k];
	switch (op->kind) {
	case FK_ACQUIRE:
		REQUIRE(op->handoffs == 0);
		if (dice < 3) {
			r_busy(pos, k);
		} else {
			rk->handoffs = 0;
			fk_complete_at(pos, BE_OK, ++fk.fence);
		}
		break;
	case FK_TRANSFER:
		REQUIRE(op->handoffs == rk->handoffs);
		if (dice < 5) {
			fk_complete_at(pos, BE_NOTOWNER, 0);
		} else if (dice < 12 || (op->handoffs >= 4 && dice < 50)) {
			/* the backend gives way, often once a run is long */
			rm.yields++;
			r_busy(pos, k);
		} else {
			rk->handoffs++;
			fk_complete_at(pos, BE_OK, ++fk.fence);
		}
		break;
	case FK_RENEW:
		fk_complete_at(pos, dice < 2 ? BE_NOTOWNER : BE_OK, 0);
		break;
	case FK_RELEASE:
	default:
		fk_complete_at(pos, BE_OK, 0);
		break;
	}
}

/* Deliver one owed wakeup (random), or a spurious one. */
static void
r_wakeup(void)
{
	char name[32];
	int k;
	if (rm.nwake > 0 && rnd_below(4) != 0) {
		size_t i = rnd_below((unsigned)rm.nwake);
		k = rm.wake[i];
		rm.wake[i] = rm.wake[--rm.nwake];
	} else {
		k = (int)rnd_below((unsigned)rm.nkeys);
	}
	r_keyname(k, name, sizeof(name));
	fk_be.up.wakeup(fk_be.up.arg, name, strlen(name));
}

/* The table agrees with the model on every key and on the counters. */
static void
r_check_all(void)
{
	char name[32];
	uint64_t holds = 0;
	for (int k = 0; k < rm.nkeys; k++) {
		const struct r_key *rk = &rm.keys[k];
		const char *mode = rk->nholders == 0 ? "free" : rk->sem ? "semaphore" :
		    rk->nexcl > 0 ? "exclusive" : "shared";
		struct lt_key_status s;
		r_keyname(k, name, sizeof(name));
		locktab_status(lt, name, strlen(name), &s);
		REQUIRE(s.holders == rk->nholders);
		REQUIRE(strcmp(s.mode, mode) == 0);
		/* the table also saw grants to owners gone meanwhile */
		REQUIRE(s.fence >= rk->last_fence);
		holds += rk->nholders;
	}
	for (int i = 0; i < rm.nowners; i++) {
		const struct r_owner *ro = rm.owners[i];
		REQUIRE(locktab_owner_holds(ro->o, NULL, NULL) == ro->nholds);
		for (unsigned j = 0; j < ro->nholds; j++) {
			r_keyname(ro->holds[j].key, name, sizeof(name));
			REQUIRE(locktab_validate(lt, name, strlen(name), ro->holds[j].fence) == 1);
		}
	}
	REQUIRE(stats().holds == holds);
}

/* Run steps random actions on nkeys keys and nowners owners. */
static void
r_run(bool memory, int nkeys, int nowners, int steps, uint64_t seed)
{
	memset(&rm, 0, sizeof(rm));
	rm.memory = memory;
	rm.rng = seed;
	rm.nkeys = nkeys;
	rm.keys = calloc((size_t)nkeys, sizeof(*rm.keys));
	ck_assert_ptr_nonnull(rm.keys);
	for (int k = 0; k < nkeys; k++) {
		rm.keys[k].sem = k % 3 == 2;
		rm.keys[k].limit = rm.keys[k].sem ? 1 + (unsigned)(k % 5) : 0;
	}
	rm.nowners = nowners;
	rm.owners = calloc((size_t)nowners, sizeof(*rm.owners));
	ck_assert_ptr_nonnull(rm.owners);
	uint64_t ids = 100;
	for (int i = 0; i < nowners; i++)
		rm.owners[i] = r_owner_new(ids++);

	for (int step = 0; step < steps; step++) {
		unsigned dice = rnd_below(100);
		if (dice < 40) {
			struct r_owner *ro = rm.owners[rnd_below((unsigned)nowners)];
			if (ro->busy == 0)
				r_act(ro);
		} else if (dice < 75) {
			if (memory) {
				ck_assert_int_ge(event_base_loop(base, EVLOOP_NONBLOCK), 0);
			} else {
				/* faster than the owners ask, or the backend falls
				 * ever further behind and every grant comes late */
				r_answer();
				r_answer();
			}
		} else if (dice < 90) {
			/* now and then a stall: grants come late, leases are lost */
			fk_now += rnd_below(40) == 0 ? 300 + rnd_below(1000) : 1 + rnd_below(20);
			locktab_tick(lt);
		} else if (dice < 94) {
			if (!memory)
				r_wakeup();
		} else if (dice < 96) {
			int slot = (int)rnd_below((unsigned)nowners);
			r_owner_kill(slot);
			rm.owners[slot] = r_owner_new(ids++);
		} else if (step % 50 == 0) {
			r_check_all();
		}
	}
	r_check_all();

	/* the run did exercise what it is about (grants that came with too
	 * little of their lease left, and keys kept by lost holdings, make
	 * fewer grants than LOCKs) */
	ck_assert_uint_gt(rm.grants, (uint64_t)steps / 25);
	ck_assert_uint_gt(rm.refused, 0);
	ck_assert_uint_gt(rm.reentrant, 0);
	if (!memory) {
		ck_assert_uint_gt(rm.busy, 0);
		ck_assert_uint_gt(rm.yields, 0);
		ck_assert_uint_gt(rm.lost, 0);
		ck_assert_uint_gt(stats().late_grants, 0);
		ck_assert_uint_gt(fk.count[FK_TRANSFER], 0);
	}

	/* everyone leaves; everything is answered; nothing is left */
	for (int i = 0; i < nowners; i++)
		r_owner_kill(i);
	for (int n = 0; !locktab_idle(lt) || rm.nwake > 0; n++) {
		ck_assert_int_lt(n, 1000000);
		if (memory) {
			ck_assert_int_ge(event_base_loop(base, EVLOOP_NONBLOCK), 0);
		} else if (fk.npend > 0) {
			fk_complete(BE_OK, ++fk.fence);
		} else if (rm.nwake == 0) {
			/* the keys of lost holdings are free once their leases end */
			fk_now += 100000;
			locktab_tick(lt);
		} else {
			char name[32];
			r_keyname(rm.wake[--rm.nwake], name, sizeof(name));
			fk_be.up.wakeup(fk_be.up.arg, name, strlen(name));
		}
	}
	fk_now += 2000;		/* the last loss's log window ends */
	locktab_tick(lt);
	struct lt_stats st = stats();
	ck_assert_uint_eq(st.holds, 0);
	ck_assert_uint_eq(st.waiters, 0);
	ck_assert_uint_eq(st.keys, 0);
	for (int k = 0; k < nkeys; k++) {
		char name[32];
		struct lt_key_status s;
		r_keyname(k, name, sizeof(name));
		locktab_status(lt, name, strlen(name), &s);
		ck_assert_str_eq(s.mode, "free");
		ck_assert_uint_eq(s.waiters, 0);
	}
	ck_assert_uint_eq(locktab_next_deadline(lt), LT_NEVER);

	for (size_t i = 0; i < rm.ngrave; i++)
		free(rm.grave[i]);
	free(rm.grave);
	free(rm.owners);
	free(rm.keys);
	free(rm.wake);
	memset(&rm, 0, sizeof(rm));
}

START_TEST(random_against_model)
{
	r_run(false, 1000, 200, 60000, 0x9e3779b97f4a7c15ULL);
}
END_TEST

START_TEST(random_memory_backend)
{
	r_run(true, 60, 40, 20000, 0x2545f4914f6cdd1dULL);
}
END_TEST

/* ---- lease safety --------------------------------------------------------- */

/* Start again with a lock-delay of delay ms (and the daemon's other limits). */
static void
restart_delay(uint64_t delay)
{
	struct lt_limits lim = limits_default;
	lim.lock_delay_ms = delay;
	restart(&lim);
	delay_ms = delay;
}

/* An EXTEND made while a renewal is in flight waits for its reply: the
 * renewal, sent with the old TTL, must not land after the EXTEND and cut the
 * lease short while the table believes the longer one. */
START_TEST(extend_waits_for_renewal)
{
	struct res h, e;
	fk_now = 1000;
	hold(0, "k", EXCL, 0, 3000, 0, 1, &h);
	fk_now = 2000;
	locktab_tick(lt);
	fk_expect(0, FK_RENEW, "k");
	ck_assert_uint_eq(fk_pending(0)->ttl_ms, 3000);
	fk_now = 2100;
	ck_assert_int_eq(extend(0, "k", 60000, NULL, &e), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 1);		/* not sent yet */
	fk_now = 2400;
	fk_complete(BE_OK, 0);			/* the renewal: lease to 2000 + 3000 */
	ck_assert_int_eq(e.calls, 0);
	ck_assert_uint_eq(fk.npend, 1);		/* now the EXTEND goes */
	struct fk_op *op = fk_expect(0, FK_RENEW, "k");
	ck_assert_uint_eq(op->ttl_ms, 60000);
	ck_assert_uint_eq(op->at, 2400);
	ck_assert_int_eq(status("k").ttl_ms, 2600);
	fk_now = 2500;
	fk_complete(BE_OK, 0);
	ck_assert_int_eq(e.calls, 1);
	ck_assert_int_eq(e.st, LT_OK);
	/* the validity left, counted from when the EXTEND was sent */
	ck_assert_int_eq(e.value, 2400 + 60000 - 2500);
	ck_assert_int_eq(status("k").ttl_ms, 2400 + 60000 - 2500);
	ck_assert_uint_eq(locktab_next_deadline(lt), 2400 + 20000);
	ck_assert_int_eq(validate("k", 1), 1);
}
END_TEST

/* The other order: a renewal falling due while an EXTEND is in flight is not
 * sent; the EXTEND's reply sets the lease. */
START_TEST(renewal_waits_for_extend)
{
	struct res h, e;
	fk_now = 1000;
	hold(0, "k", EXCL, 0, 3000, 0, 1, &h);
	fk_now = 1500;
	ck_assert_int_eq(extend(0, "k", 60000, NULL, &e), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 1);
	fk_now = 2100;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.npend, 1);
	ck_assert_uint_eq(fk.count[FK_RENEW], 1);
	/* while the EXTEND is out, the old lease still decides the loss */
	ck_assert_uint_eq(locktab_next_deadline(lt), 1000 + 3000 - 300);
	fk_now = 2600;
	fk_complete(BE_OK, 0);
	ck_assert_int_eq(e.st, LT_OK);
	ck_assert_int_eq(status("k").ttl_ms, 1500 + 60000 - 2600);
	ck_assert_uint_eq(locktab_next_deadline(lt), 1500 + 20000);
	/* two EXTENDs by token from other owners go one after the other */
	struct res e1, e2;
	ck_assert_int_eq(extend(1, "k", 5000, h.g.token, &e1), LT_PENDING);
	ck_assert_int_eq(extend(2, "k", 7000, h.g.token, &e2), LT_PENDING);
	ck_assert_uint_eq(fk.npend, 1);
	ck_assert_uint_eq(fk_pending(0)->ttl_ms, 5000);
	fk_complete(BE_OK, 0);
	ck_assert_int_eq(e1.st, LT_OK);
	ck_assert_uint_eq(fk.npend, 1);
	ck_assert_uint_eq(fk_pending(0)->ttl_ms, 7000);
	fk_complete(BE_OK, 0);
	ck_assert_int_eq(e2.st, LT_OK);
	ck_assert_int_eq(status("k").ttl_ms, 7000);
	/* a queued EXTEND of a holding released meanwhile answers LOST */
	ck_assert_int_eq(extend(0, "k", 9000, NULL, &e1), LT_PENDING);
	ck_assert_int_eq(extend(1, "k", 9000, h.g.token, &e2), LT_PENDING);
	release(0, "k");
	ck_assert_int_eq(e1.calls, 0);
	fk_complete(BE_OK, 0);
	ck_assert_int_eq(e1.st, LT_E_LOST);
	ck_assert_int_eq(e2.calls, 1);
	ck_assert_int_eq(e2.st, LT_E_LOST);
	ck_assert_uint_eq(fk.npend, 0);
}
END_TEST

/* The lease is what the backend promises: a backend that promises less than
 * the TTL (clock drift, a quorum's time) sets an earlier end. */
START_TEST(validity_from_backend)
{
	struct res h;
	fk_now = 1000;
	fk.valid_cut = 400;
	ck_assert_int_eq(lock(0, "k", EXCL, 0, 3000, WAIT_FOREVER, 0, &h), LT_PENDING);
	fk_now = 1100;
	fk_complete(BE_OK, 7);
	assert_granted(&h, 7);
	ck_assert_uint_eq(h.g.ttl_ms, 1000 + 2600 - 1100);
	/* lost a margin (300) before the end promised, renewed a third in
	 * (rounded up to the 100 ms quantum) */
	ck_assert_uint_eq(locktab_next_deadline(lt), 1900);
	fk_now = 1900;
	locktab_tick(lt);
	fk_complete(BE_ERROR, 0);
	fail_renewals_until_lost(0, 5000);
	/* the margin is a tenth of what was promised, not of the TTL */
	ck_assert_uint_eq(O[0].lost_clock, 1000 + 2600 - 260);
}
END_TEST

/* A grant that comes with too little of its lease left is not delivered:
 * the lease goes back, and the waiter tries again with a new token, or is
 * not granted once its WAIT is over. The reply tells the validity left. */
START_TEST(late_grant_not_delivered)
{
	struct res a, b;
	char t1[TOKEN_LEN + 1], t2[TOKEN_LEN + 1];
	fk_now = 1000;
	ck_assert_int_eq(lock(0, "k", EXCL, 0, 1000, WAIT_FOREVER, 0, &a), LT_PENDING);
	pending_token(0, t1);
	fk_now = 1000 + 1000 - 100;	/* exactly the margin left */
	fk_complete(BE_OK, 5);
	ck_assert_int_eq(a.calls, 0);
	ck_assert_uint_eq(stats().late_grants, 1);
	ck_assert_uint_eq(stats().grants, 0);
	ck_assert_uint_eq(status("k").holders, 0);
	ck_assert_int_eq(validate("k", 5), 0);
	ck_assert_uint_eq(fk.npend, 2);
	ck_assert_str_eq(fk_expect(0, FK_RELEASE, "k")->token, t1);
	fk_expect(1, FK_ACQUIRE, "k");
	pending_token(1, t2);
	ck_assert_str_ne(t1, t2);
	fk_complete(BE_OK, 0);
	fk_now += 300;
	fk_complete(BE_OK, 6);
	assert_granted(&a, 6);
	ck_assert_str_eq(a.g.token, t2);
	ck_assert_uint_eq(a.g.ttl_ms, 700);
	release(0, "k");
	/* a waiter whose WAIT is over when its late grant comes: not granted */
	ck_assert_int_eq(lock(1, "j", EXCL, 0, 1000, 500, 0, &b), LT_PENDING);
	fk_now += 950;
	fk_complete(BE_OK, 9);
	ck_assert_int_eq(b.calls, 1);
	ck_assert_int_eq(b.st, LT_NOT_GRANTED);
	ck_assert_uint_eq(fk.npend, 1);
	fk_expect(0, FK_RELEASE, "j");
	fk_complete(BE_OK, 0);	/* the release of j */
	/* a late handoff: the releaser is done, the waiter tries again */
	struct res m, c, u;
	hold(0, "m", EXCL, 0, 30000, 0, 10, &m);
	ck_assert_int_eq(lock(2, "m", EXCL, 0, 1000, WAIT_FOREVER, 0, &c), LT_PENDING);
	ck_assert_int_eq(unlock(0, "m", NULL, &u), LT_PENDING);
	fk_expect(0, FK_TRANSFER, "m");
	fk_now += 950;
	fk_complete(BE_OK, 11);
	ck_assert_int_eq(u.st, LT_OK);
	ck_assert_int_eq(c.calls, 0);
	ck_assert_uint_eq(stats().late_grants, 3);
	fk_expect(0, FK_RELEASE, "m");
	fk_expect(1, FK_ACQUIRE, "m");
	fk_complete(BE_OK, 0);
	fk_complete(BE_OK, 12);
	assert_granted(&c, 12);
}
END_TEST

/* A reentrant LOCK and VALIDATE never vouch for a lease past its deadline,
 * even before the timer has fired. */
START_TEST(no_answer_past_deadline)
{
	struct res h, again;
	fk_now = 1000;
	hold(0, "k", EXCL, 0, 3000, 0, 1, &h);
	fk_now = 2000;
	locktab_tick(lt);	/* the renewal goes, and never comes back */
	fk_now = 3699;
	ck_assert_int_eq(validate("k", 1), 1);
	fk_now = 3700;		/* no tick: the loop is late */
	ck_assert_int_eq(validate("k", 1), 0);
	ck_assert_int_eq(lock(0, "k", EXCL, 0, 3000, 0, 0, &again), LT_NOT_GRANTED);
	ck_assert_int_eq(O[0].nlost, 1);
}
END_TEST

/* After a loss, the key stays taken until the lost lease's end plus the
 * lock-delay; the lease is not released before; a voluntary UNLOCK still
 * frees the key at once. The backend is asked for the TTL plus the delay. */
START_TEST(lost_key_held_until_lease_end_and_delay)
{
	struct res h, b, w0, u;
	restart_delay(500);
	fk_now = 1000;
	ck_assert_int_eq(lock(0, "k", EXCL, 0, 3000, WAIT_FOREVER, 0, &h), LT_PENDING);
	ck_assert_uint_eq(fk_expect(0, FK_ACQUIRE, "k")->ttl_ms, 3500);
	fk_complete(BE_OK, 1);
	ck_assert_uint_eq(h.g.ttl_ms, 3000);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 3000, WAIT_FOREVER, 0, &b), LT_PENDING);
	fk_now = 2000;
	locktab_tick(lt);
	ck_assert_uint_eq(fk_expect(0, FK_RENEW, "k")->ttl_ms, 3500);
	/* the renewal hangs: lost a margin before the end */
	fk_now = 3700;
	locktab_tick(lt);
	ck_assert_int_eq(O[0].nlost, 1);
	ck_assert_int_eq(lock(2, "k", EXCL, 0, 3000, 0, 0, &w0), LT_NOT_GRANTED);
	ck_assert_uint_eq(fk.npend, 1);		/* nothing but the renewal */
	fk_now = 4499;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.npend, 1);
	ck_assert_uint_eq(locktab_next_deadline(lt), 4500);
	fk_now = 4500;
	locktab_tick(lt);
	/* the lease goes (a late renewal may have kept it), then B tries */
	ck_assert_uint_eq(fk.npend, 3);
	ck_assert_str_eq(fk_expect(1, FK_RELEASE, "k")->token, h.g.token);
	fk_expect(2, FK_ACQUIRE, "k");
	fk_complete_at(0, BE_OK, 0);	/* the late renewal: nothing changes */
	ck_assert_int_eq(O[0].nlost, 1);
	fk_complete(BE_OK, 0);
	fk_complete(BE_OK, 2);
	assert_granted(&b, 2);
	/* UNLOCK is voluntary: the next waiter goes at once */
	ck_assert_int_eq(lock(0, "k", EXCL, 0, 3000, WAIT_FOREVER, 0, &h), LT_PENDING);
	ck_assert_int_eq(unlock(1, "k", NULL, &u), LT_PENDING);
	fk_expect(0, FK_TRANSFER, "k");
	fk_complete(BE_OK, 3);
	assert_granted(&h, 3);
}
END_TEST

/* A loss the backend reports (another owner has the lease) keeps the key
 * for the lock-delay from now; a lost shared holding keeps out exclusive
 * lockers only, a lost permit takes a permit. */
START_TEST(lost_tombstone_modes)
{
	struct res s, x, s2, p1, p2, p3;
	long p;
	restart_delay(1000);
	fk_now = 1000;
	hold(0, "s", SHRD, 0, 30000, 0, 1, &s);
	ck_assert_int_eq(lock(1, "s", EXCL, 0, 30000, WAIT_FOREVER, 0, &x), LT_PENDING);
	fk_now = 11000;
	locktab_tick(lt);
	fk_complete(BE_NOTOWNER, 0);
	ck_assert_int_eq(O[0].nlost, 1);
	ck_assert_uint_eq(fk.npend, 0);
	ck_assert_int_eq(x.calls, 0);
	fk_now = 11999;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.npend, 0);
	fk_now = 12000;
	locktab_tick(lt);
	fk_complete(BE_OK, 0);		/* the tombstone's release */
	fk_expect(0, FK_ACQUIRE, "s");
	fk_complete(BE_OK, 2);
	assert_granted(&x, 2);
	fk_drain();

	/* shared beside a shared tombstone */
	hold(2, "t", SHRD, 0, 30000, 0, 5, &s2);
	fk_now = 22000;
	locktab_tick(lt);
	p = fk_find(FK_RENEW, s2.g.token);
	ck_assert_int_ge(p, 0);
	fk_complete_at((size_t)p, BE_NOTOWNER, 0);
	ck_assert_int_eq(O[2].nlost, 1);
	hold(3, "t", SHRD, 0, 30000, 0, 6, &s);
	ck_assert_int_eq(lock(4, "t", EXCL, 0, 30000, 0, 0, &x), LT_NOT_GRANTED);

	/* a lost permit of two */
	fk_now = 30000;
	locktab_tick(lt);	/* the tombstone of t ends: its release goes */
	fk_drain();
	hold(5, "p", SEMA, 2, 30000, 0, 7, &p1);
	hold(6, "p", SEMA, 2, 30000, 0, 8, &p2);
	fk_now = 40000;
	locktab_tick(lt);
	p = fk_find(FK_RENEW, p1.g.token);
	ck_assert_int_ge(p, 0);
	fk_complete_at((size_t)p, BE_NOTOWNER, 0);
	ck_assert_int_eq(O[5].nlost, 1);
	fk_drain();
	ck_assert_int_eq(lock(7, "p", SEMA, 2, 30000, 0, 0, &p3), LT_NOT_GRANTED);
	fk_now = 41000;
	locktab_tick(lt);
	fk_drain();
	ck_assert_int_eq(lock(7, "p", SEMA, 2, 30000, WAIT_FOREVER, 0, &p3), LT_PENDING);
	fk_drain();
	ck_assert_int_eq(p3.st, LT_OK);
}
END_TEST

/* Detached locks count toward the owner's limit while it lives. */
START_TEST(detached_count_toward_limit)
{
	static const struct lt_limits lim = { 100, 2, 10, 0, 0 };
	struct res d1, d2, d3, u;
	restart(&lim);
	hold(0, "a", EXCL, 0, 30000, 1, 1, &d1);
	hold(0, "b", EXCL, 0, 30000, 1, 2, &d2);
	ck_assert_int_eq(lock(0, "c", EXCL, 0, 30000, WAIT_FOREVER, 1, &d3), LT_E_LOCKS);
	ck_assert_int_eq(lock(0, "c", EXCL, 0, 30000, WAIT_FOREVER, 0, &d3), LT_E_LOCKS);
	/* released by token from another owner: room again */
	ck_assert_int_eq(unlock(1, "a", d1.g.token, &u), LT_PENDING);
	fk_complete(BE_OK, 0);
	hold(0, "c", EXCL, 0, 30000, 1, 3, &d3);
	/* once the owner is gone, its detached locks count for nobody */
	kill_owner(0);
	ck_assert_uint_eq(status("b").holders, 1);
	ck_assert_uint_eq(status("c").holders, 1);
	fk_now += 30000;
	locktab_tick(lt);
	fk_drain();
	ck_assert_uint_eq(status("b").holders, 0);
	ck_assert_uint_eq(stats().expired, 2);
}
END_TEST

/* locktab_owner_cancel withdraws the owner's waiting LOCK without telling
 * it; locktab_forget_lost makes a told loss answer NOTHELD. */
START_TEST(cancel_and_forget)
{
	struct res h, w, a, u;
	fk_now = 1000;
	hold(0, "k", EXCL, 0, 3000, 0, 1, &h);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 3000, WAIT_FOREVER, 0, &w), LT_PENDING);
	ck_assert_uint_eq(locktab_owner_cancel(O[1].o), 1);
	ck_assert_uint_eq(status("k").waiters, 0);
	ck_assert_uint_eq(locktab_owner_cancel(O[1].o), 0);
	/* one the backend is deciding on: given back when it answers */
	ck_assert_int_eq(lock(2, "j", EXCL, 0, 3000, WAIT_FOREVER, 0, &a), LT_PENDING);
	ck_assert_uint_eq(locktab_owner_cancel(O[2].o), 1);
	fk_complete(BE_OK, 4);
	ck_assert_int_eq(a.calls, 0);
	ck_assert_str_eq(fk_expect(0, FK_RELEASE, "j")->token, fk.ops[fk.nops - 2].token);
	fk_complete(BE_OK, 0);
	ck_assert_int_eq(w.calls, 0);
	/* the loss, told by other means, is forgotten */
	fk_now = 2000;
	locktab_tick(lt);
	fk_complete(BE_NOTOWNER, 0);
	ck_assert_int_eq(O[0].nlost, 1);
	ck_assert_int_eq(locktab_forget_lost(O[0].o, "k", 1, 2), 0);
	ck_assert_int_eq(locktab_forget_lost(O[0].o, "k", 1, 1), 1);
	ck_assert_int_eq(unlock(0, "k", NULL, &u), LT_E_NOTHELD);
}
END_TEST

/* ---- STATUS FULL and UNLOCK FORCE ----------------------------------------- */

#define WALK_MAX 8	/* holders or waiters a walk records */

/* What a walk of a key saw, or what a force broke. */
struct walk {
	struct lt_holder_info h[WALK_MAX];	/* holders, in the order told */
	size_t nh;
	struct lt_waiter_info w[WALK_MAX];	/* waiters, in the order told */
	size_t nw;
};

static void
walk_holder(void *arg, const struct lt_holder_info *h)
{
	struct walk *wk = arg;
	ck_assert_uint_lt(wk->nh, WALK_MAX);
	wk->h[wk->nh++] = *h;
}

static void
walk_waiter(void *arg, const struct lt_waiter_info *w)
{
	struct walk *wk = arg;
	ck_assert_uint_lt(wk->nw, WALK_MAX);
	wk->w[wk->nw++] = *w;
}

static struct walk
walk(const char *key)
{
	struct walk wk;
	memset(&wk, 0, sizeof(wk));
	locktab_key_walk(lt, key, strlen(key), walk_holder, walk_waiter, &wk);
	return wk;
}

/* Break every holding of key; what was broken goes to wk. */
static unsigned
force(const char *key, struct walk *wk)
{
	memset(wk, 0, sizeof(*wk));
	return locktab_force(lt, key, strlen(key), "broken by the test", walk_holder, wk);
}

/* Holders oldest first with their owners, times and leases; waiters in queue
 * order, the cancelled ones left out. */
START_TEST(walk_in_queue_order)
{
	struct res a, b, c, d, e;
	fk_now = 1000;
	hold(1, "k", SHRD, 0, 30000, 0, 7, &a);
	fk_now = 1500;
	hold(0, "k", SHRD, 0, 9000, 1, 8, &b);
	ck_assert_int_eq(lock(4, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &c), LT_PENDING);
	fk_now = 1600;
	ck_assert_int_eq(lock(2, "k", SHRD, 0, 30000, 5000, 0, &d), LT_PENDING);
	ck_assert_int_eq(lock(3, "k", EXCL, 0, 20000, 8000, 1, &e), LT_PENDING);
	fk_now = 2000;
	struct walk wk = walk("k");
	ck_assert_uint_eq(wk.nh, 2);
	ck_assert_uint_eq(wk.h[0].owner_id, 2);
	ck_assert_int_eq(wk.h[0].mode, SHRD);
	ck_assert_uint_eq(wk.h[0].fence, 7);
	ck_assert_uint_eq(wk.h[0].count, 1);
	ck_assert_uint_eq(wk.h[0].held_ms, 1000);
	ck_assert_int_eq(wk.h[0].lease_ms, 30000 - 1000);
	ck_assert_int_eq(wk.h[0].detached, 0);
	ck_assert_uint_eq(wk.h[1].owner_id, 1);	/* detached: who took it */
	ck_assert_uint_eq(wk.h[1].fence, 8);
	ck_assert_uint_eq(wk.h[1].held_ms, 500);
	ck_assert_int_eq(wk.h[1].lease_ms, 9000 - 500);
	ck_assert_int_eq(wk.h[1].detached, 1);
	ck_assert_uint_eq(wk.nw, 3);
	ck_assert_uint_eq(wk.w[0].owner_id, 5);
	ck_assert_int_eq(wk.w[0].mode, EXCL);
	ck_assert_uint_eq(wk.w[0].waited_ms, 500);
	ck_assert_int_eq(wk.w[0].wait_ms, -1);
	ck_assert_int_eq(wk.w[0].detach, 0);
	ck_assert_uint_eq(wk.w[1].owner_id, 3);
	ck_assert_int_eq(wk.w[1].mode, SHRD);
	ck_assert_uint_eq(wk.w[1].waited_ms, 400);
	ck_assert_int_eq(wk.w[1].wait_ms, 4600);
	ck_assert_uint_eq(wk.w[2].owner_id, 4);
	ck_assert_int_eq(wk.w[2].wait_ms, 7600);
	ck_assert_int_eq(wk.w[2].detach, 1);
	/* the creator of the detached holding goes: it is nobody's now */
	kill_owner(0);
	ck_assert_uint_eq(locktab_owner_cancel(O[2].o), 1);
	wk = walk("k");
	ck_assert_uint_eq(wk.h[1].owner_id, 0);
	ck_assert_uint_eq(wk.nw, 2);
	ck_assert_uint_eq(wk.w[0].owner_id, 5);
	ck_assert_uint_eq(wk.w[1].owner_id, 4);
	wk = walk("nothing");
	ck_assert_uint_eq(wk.nh + wk.nw, 0);
}
END_TEST

/* Breaking an exclusive holding with waiters behind it: the holder is told
 * as for a loss, its UNLOCK, EXTEND and VALIDATE see it, and the lease is
 * handed to the head waiter with a higher fence. */
START_TEST(force_grants_next)
{
	struct res h, b, c, u, e;
	hold(0, "k", EXCL, 0, 30000, 0, 5, &h);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &b), LT_PENDING);
	ck_assert_int_eq(lock(2, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &c), LT_PENDING);
	struct walk wk;
	ck_assert_uint_eq(force("k", &wk), 1);
	ck_assert_uint_eq(wk.nh, 1);
	ck_assert_uint_eq(wk.h[0].fence, 5);
	ck_assert_uint_eq(wk.h[0].owner_id, 1);
	ck_assert_int_eq(O[0].nlost, 1);
	ck_assert_str_eq(O[0].lost_key, "k");
	ck_assert_uint_eq(O[0].lost_fence, 5);
	ck_assert_str_eq(O[0].lost_reason, "broken by the test");
	ck_assert_int_eq(validate("k", 5), 0);
	ck_assert_uint_eq(status("k").holders, 0);
	ck_assert_uint_eq(locktab_owner_holds(O[0].o, NULL, NULL), 0);
	/* handed over: the old lease is the transfer's, not released twice */
	ck_assert_uint_eq(fk.npend, 1);
	struct fk_op *op = fk_expect(0, FK_TRANSFER, "k");
	ck_assert_str_eq(op->token, h.g.token);
	ck_assert_int_eq(extend(0, "k", 5000, NULL, &e), LT_E_LOST);
	fk_complete(BE_OK, 6);
	assert_granted(&b, 6);
	ck_assert_int_eq(c.calls, 0);
	ck_assert_int_eq(unlock(0, "k", NULL, &u), LT_E_LOST);
	ck_assert_int_eq(unlock(0, "k", NULL, &u), LT_E_NOTHELD);
	ck_assert_int_eq(validate("k", 6), 1);
	ck_assert_uint_eq(fk.count[FK_RELEASE], 0);
	ck_assert_uint_eq(stats().releases, 1);
	ck_assert_uint_eq(stats().lost, 0);
	ck_assert_int_eq(O[1].nlost, 0);
	ck_assert_uint_eq(force("free", &wk), 0);
}
END_TEST

/* Without transfer: shared holdings broken are released, and the exclusive
 * waiter behind them is acquired once the last is gone. */
START_TEST(force_shared_releases)
{
	struct res a, b, c;
	hold(0, "k", SHRD, 0, 30000, 0, 3, &a);
	hold(1, "k", SHRD, 0, 30000, 0, 4, &b);
	ck_assert_int_eq(lock(2, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &c), LT_PENDING);
	struct walk wk;
	ck_assert_uint_eq(force("k", &wk), 2);
	ck_assert_uint_eq(wk.h[0].fence, 3);
	ck_assert_uint_eq(wk.h[1].fence, 4);
	ck_assert_int_eq(O[0].nlost, 1);
	ck_assert_int_eq(O[1].nlost, 1);
	ck_assert_uint_eq(fk.npend, 3);
	ck_assert_int_ge(fk_find(FK_RELEASE, a.g.token), 0);
	ck_assert_int_ge(fk_find(FK_RELEASE, b.g.token), 0);
	fk_expect(2, FK_ACQUIRE, "k");
	fk_complete_at(2, BE_OK, 5);
	assert_granted(&c, 5);
	ck_assert_int_eq(validate("k", 5), 1);
}
END_TEST

/* A holding broken while its renewal, and an EXTEND behind it, are out: their
 * replies change nothing, the EXTEND is told LOST, the next waiter gets the
 * key. */
START_TEST(force_renewal_in_flight)
{
	struct res h, b, e;
	fk_now = 1000;
	hold(0, "k", EXCL, 0, 3000, 0, 1, &h);
	ck_assert_int_eq(lock(1, "k", EXCL, 0, 30000, WAIT_FOREVER, 0, &b), LT_PENDING);
	fk_now = 2000;
	locktab_tick(lt);
	fk_expect(0, FK_RENEW, "k");
	ck_assert_int_eq(extend(0, "k", 60000, NULL, &e), LT_PENDING);
	struct walk wk;
	ck_assert_uint_eq(force("k", &wk), 1);
	ck_assert_int_eq(O[0].nlost, 1);
	ck_assert_int_eq(validate("k", 1), 0);
	/* the renewal is answered first: it keeps nothing */
	fk_complete(BE_OK, 0);
	ck_assert_int_eq(e.calls, 1);
	ck_assert_int_eq(e.st, LT_E_LOST);
	ck_assert_int_eq(validate("k", 1), 0);
	ck_assert_uint_eq(fk.count[FK_RENEW], 1);
	fk_expect(0, FK_TRANSFER, "k");
	fk_complete(BE_OK, 2);
	assert_granted(&b, 2);
	ck_assert_uint_eq(status("k").holders, 1);
	/* no renewal of the broken holding is ever sent again */
	fk_now = 10000;
	locktab_tick(lt);
	ck_assert_int_eq(fk_find(FK_RENEW, h.g.token), -1);
	ck_assert_int_eq(O[0].nlost, 1);
}
END_TEST

/* Detached holdings are broken too, the one whose creator is gone included:
 * their tokens no longer unlock anything. */
START_TEST(force_detached)
{
	struct res a, b, c, u;
	hold(0, "k", SHRD, 0, 9000, 1, 1, &a);
	hold(1, "k", SHRD, 0, 9000, 1, 2, &b);
	hold(2, "k", SHRD, 0, 30000, 0, 3, &c);
	kill_owner(0);
	struct walk wk;
	ck_assert_uint_eq(force("k", &wk), 3);
	ck_assert_uint_eq(wk.h[0].owner_id, 0);
	ck_assert_int_eq(wk.h[0].detached, 1);
	ck_assert_uint_eq(wk.h[1].owner_id, 2);
	ck_assert_int_eq(wk.h[1].detached, 1);
	ck_assert_int_eq(wk.h[2].detached, 0);
	ck_assert_int_eq(O[1].nlost, 0);	/* a detached holding has no session */
	ck_assert_int_eq(O[2].nlost, 1);
	ck_assert_uint_eq(fk.count[FK_RELEASE], 3);
	ck_assert_int_eq(unlock(3, "k", a.g.token, &u), LT_E_NOTHELD);
	ck_assert_int_eq(unlock(1, "k", b.g.token, &u), LT_E_NOTHELD);
	ck_assert_str_eq(status("k").mode, "free");
	ck_assert_uint_eq(stats().holds, 0);
	/* the limit of the creator no longer counts it */
	fk_drain();
	fk_now += 20000;
	locktab_tick(lt);
	ck_assert_uint_eq(fk.count[FK_RELEASE], 3);
}
END_TEST

/* ---- the suite ----------------------------------------------------------- */

int
main(void)
{
	/* the table warns about every loss and backend error the tests cause */
	log_min_level = LOG_LEVEL_ERROR;

	Suite *s = suite_create("locktab");

	suite_case(s, "fake backend", setup_fake, teardown_fake, 0,
	    SUITE_TESTS(shared_granted_together, shared_exclusive_no_barging,
	    exclusive_timeout_lets_shared_run, semaphore_limit_fifo, semaphore_kind_mismatch,
	    reentrant_lock_unlock, relock_other_mode, wait_timeout, wait0_held_key,
	    wait0_free_key_busy, busy_then_wakeup, busy_wait_deadline, backend_error_on_acquire,
	    backend_error_waits_through, backend_error_wait_runs_out, renewal_failures_suspend,
	    destroy_while_acquiring, destroy_while_holding_transfer,
	    destroyed_owner_never_called, detach_unlock_by_token, detach_survives_owner,
	    unlock_not_held, extend_sets_ttl, renewal_every_third, renew_notowner_lost,
	    lost_then_relock, renew_error_until_margin, renew_unanswered_lost,
	    extend_in_flight_when_lost, transfer_handoff, lease_described,
	    handoffs_counted_and_passed,
	    handoffs_reset_by_acquire, handoffs_reset_by_release, transfer_busy_gives_way,
	    transfer_busy_wait_times_out, transfer_busy_while_closing, wakeup_all_keys,
	    renewals_batched, transfer_notowner_acquires, transfer_error,
	    transfer_waiter_destroyed, transfer_holder_destroyed, limits_waiters_and_locks,
	    limits_keys, limits_changed_live, status_and_validate, binary_keys,
	    owner_holds_lists, shutdown_fails_waiters, shutdown_acquiring_waiter,
	    shutdown_transfer_in_flight, deadline_and_rearm, idle_keys_forgotten,
	    walk_in_queue_order, force_grants_next, force_renewal_in_flight, force_detached));
	suite_case(s, "lease safety", setup_fake, teardown_fake, 0,
	    SUITE_TESTS(extend_waits_for_renewal, renewal_waits_for_extend,
	    validity_from_backend, late_grant_not_delivered, no_answer_past_deadline,
	    lost_key_held_until_lease_end_and_delay, lost_tombstone_modes,
	    detached_count_toward_limit, cancel_and_forget));
	suite_case(s, "fake backend without transfer", setup_fake_nt, teardown_fake, 0,
	    SUITE_TESTS(excl_fifo_five_owners, release_wakes_only_head, destroy_queued_waiter,
	    destroy_while_holding, detach_expires_at_ttl, force_shared_releases));
	suite_case(s, "memory backend", setup_mem, teardown_mem, 0,
	    SUITE_TESTS(mem_fences_increase, mem_destroy_in_flight, mem_detach_expiry,
	    mem_bound_lease_is_local));
	suite_case(s, "randomized", setup_fake, teardown_fake, 120,
	    SUITE_TESTS(random_against_model));
	suite_case(s, "randomized memory backend", setup_mem, teardown_mem, 120,
	    SUITE_TESTS(random_memory_backend));
	return suite_run(s);
}
