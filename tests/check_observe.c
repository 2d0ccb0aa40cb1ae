/*
 * check_observe — unit tests of who leads a key and its changes
 * (daemon/observe.c, and the lock table's values, PROCLAIM and change hook).
 *
 * The table runs on the fake backend (tests/fake_backend.c): a grant happens
 * when the test completes the acquire. WAIT timeouts run on a real event
 * loop with short waits.
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
#include "observe.h"
#include "suite.h"

#define NOWN 4

static struct event_base *base;
static struct locktab *lt;
static struct obs *obs;
static struct lt_owner *own[NOWN];
static const struct lt_limits limits = { 10000, 10000, 10, 0, 0 };

/* What a client was told. */
struct told {
	int changed, timeouts, pushes, errors;	/* how many of each */
	bool dead;			/* destroyed: nothing may be told */
	struct obs_state last;		/* the last state (value copied) */
	char value[64];
	char key[64];
};

static void
on_told(void *arg, enum obs_event ev, const char *key, size_t keylen,
    const struct obs_state *st)
{
	struct told *t = arg;
	ck_assert_msg(!t->dead, "a destroyed client was told");
	ck_assert_uint_lt(keylen, sizeof(t->key));
	memcpy(t->key, key, keylen);
	t->key[keylen] = '\0';
	if (ev == OBS_TIMEOUT || ev == OBS_ERROR) {
		ck_assert_ptr_null(st);
		if (ev == OBS_TIMEOUT)
			t->timeouts++;
		else
			t->errors++;
		return;
	}
	if (ev == OBS_CHANGED)
		t->changed++;
	else
		t->pushes++;
	t->last = *st;
	if (st->value != NULL) {
		ck_assert_uint_lt(st->valuelen, sizeof(t->value));
		memcpy(t->value, st->value, st->valuelen);
		t->value[st->valuelen] = '\0';
		t->last.value = t->value;
	}
}

static void
on_done(void *arg, enum lt_status st, const struct lt_grant *g, long long value)
{
	(void)arg;
	(void)st;
	(void)g;
	(void)value;
}

static void
setup(void)
{
	fk_start(&fk_ops);
	base = event_base_new();
	lt = locktab_create(&fk_be, &limits, fk_clock, NULL, NULL, NULL);
	obs = obs_create(base, lt, &fk_be);
	for (int i = 0; i < NOWN; i++)
		own[i] = locktab_owner_create(lt, (uint64_t)i + 1, NULL, NULL);
}

static void
teardown(void)
{
	for (int i = 0; i < NOWN; i++)
		locktab_owner_destroy(own[i]);
	fk_drain();
	obs_destroy(obs);
	locktab_destroy(lt);
	event_base_free(base);
	fk_stop();
}

/* Owner i campaigns for key with value (NULL: a plain LOCK; shared: a
 * shared LOCK), granted at once with fence. */
static void
take(int i, const char *key, const char *value, bool shared, uint64_t fence)
{
	struct lt_lock_req req = { .key = key, .keylen = strlen(key),
	    .mode = shared ? LOCK_SHARED : LOCK_EXCLUSIVE, .ttl_ms = 10000, .wait_ms = -1,
	    .value = value, .valuelen = value != NULL ? strlen(value) : 0 };
	struct lt_grant g;
	ck_assert_int_eq(locktab_lock(own[i], &req, &g, on_done, NULL), LT_PENDING);
	fk_complete_at((size_t)fk_find(FK_ACQUIRE, NULL), BE_OK, fence);
}

static void
give_up(int i, const char *key)
{
	long long left;
	ck_assert_int_eq(locktab_unlock(own[i], key, strlen(key), NULL, &left, on_done, NULL),
	    LT_PENDING);
	fk_drain();
}

static struct obs_state
now(const char *key)
{
	struct obs_state st;
	obs_now(obs, key, strlen(key), &st);
	return st;
}

static bool
value_is(const struct obs_state *st, const char *v)
{
	if (v == NULL)
		return st->value == NULL;
	return st->value != NULL && st->valuelen == strlen(v) &&
	    memcmp(st->value, v, st->valuelen) == 0;
}

START_TEST(leader_value_term_and_revision)
{
	struct obs_state st = now("k");
	ck_assert(value_is(&st, NULL));
	ck_assert_uint_eq(st.term, 0);
	ck_assert_str_eq(st.kind, "free");
	uint64_t r0 = st.revision;

	take(0, "k", "addr-1", false, 7);
	st = now("k");
	ck_assert(value_is(&st, "addr-1"));
	ck_assert_uint_eq(st.term, 7);
	ck_assert_str_eq(st.kind, "exclusive");
	ck_assert_uint_eq(st.holders, 1);
	ck_assert_uint_gt(st.revision, r0);

	uint64_t r1 = st.revision;
	ck_assert_int_eq(locktab_proclaim(own[0], "k", 1, "addr-2", 6, on_done, NULL), LT_OK);
	st = now("k");
	ck_assert(value_is(&st, "addr-2"));
	ck_assert_uint_eq(st.term, 7);
	ck_assert_uint_gt(st.revision, r1);

	give_up(0, "k");
	st = now("k");
	ck_assert(value_is(&st, NULL));
	ck_assert_uint_eq(st.term, 0);
	ck_assert_str_eq(st.kind, "free");
}
END_TEST

START_TEST(proclaim_refusals)
{
	ck_assert_int_eq(locktab_proclaim(own[0], "k", 1, "v", 1, on_done, NULL), LT_E_NOTHELD);
	take(0, "k", "v", false, 3);
	ck_assert_int_eq(locktab_proclaim(own[1], "k", 1, "w", 1, on_done, NULL), LT_E_NOTHELD);
	take(1, "s", NULL, true, 4);
	ck_assert_int_eq(locktab_proclaim(own[1], "s", 1, "w", 1, on_done, NULL), LT_E_MODE);
	/* a lost holding: told as lost, not as never held */
	unsigned n = locktab_force(lt, "k", 1, "test", NULL, NULL);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(locktab_proclaim(own[0], "k", 1, "w", 1, on_done, NULL), LT_E_LOST);
}
END_TEST

START_TEST(shared_term_is_the_highest_fence)
{
	take(0, "s", NULL, true, 5);
	take(1, "s", NULL, true, 9);
	struct lt_leader l;
	locktab_leader(lt, "s", 1, &l);
	ck_assert_str_eq(l.kind, "shared");
	ck_assert_uint_eq(l.term, 9);
	ck_assert_uint_eq(l.holders, 2);
	ck_assert_ptr_null(l.value);
}
END_TEST

START_TEST(history_gives_the_first_change_after)
{
	uint64_t r0 = now("k").revision;
	/* three terms, each given up: six changes */
	for (int i = 0; i < 3; i++) {
		char v[8];
		snprintf(v, sizeof(v), "n%d", i);
		take(i, "k", v, false, 10 + (uint64_t)i);
		give_up(i, "k");
	}
	struct obs_state st;
	uint64_t after = r0, last_term = 0;
	int n = 0;
	while (obs_after(obs, "k", 1, after, &st)) {
		ck_assert_uint_gt(st.revision, after);
		if (st.term != 0) {
			ck_assert_uint_gt(st.term, last_term);	/* terms never go back */
			last_term = st.term;
		}
		after = st.revision;
		n++;
	}
	ck_assert_int_eq(n, 6);
	ck_assert_uint_eq(last_term, 12);
}
END_TEST

START_TEST(history_keeps_the_last_few)
{
	uint64_t r0 = now("k").revision;
	for (int i = 0; i < OBS_HISTORY; i++) {	/* 2 x OBS_HISTORY changes */
		take(i % NOWN, "k", "v", false, 100 + (uint64_t)i);
		give_up(i % NOWN, "k");
	}
	struct obs_state st;
	ck_assert(obs_after(obs, "k", 1, r0, &st));
	/* the oldest remembered: the first OBS_HISTORY changes are forgotten */
	ck_assert_uint_eq(st.term, 100 + OBS_HISTORY / 2);
	ck_assert(!obs_after(obs, "k", 1, now("k").revision, &st));
}
END_TEST

START_TEST(unchanged_state_is_not_a_change)
{
	take(0, "k", "v", false, 3);
	uint64_t r = now("k").revision;
	ck_assert_int_eq(locktab_proclaim(own[0], "k", 1, "v", 1, on_done, NULL), LT_OK);	/* same value */
	struct obs_state st;
	ck_assert(!obs_after(obs, "k", 1, r, &st));
}
END_TEST

START_TEST(wait_answered_by_the_next_change)
{
	struct told t = { 0 };
	struct obs_client *c = obs_client_create(obs, on_told, &t);
	uint64_t r = now("k").revision;
	obs_client_wait(c, "k", 1, r, -1);
	take(1, "other", "x", false, 2);	/* another key: not told */
	ck_assert_int_eq(t.changed, 0);
	take(0, "k", "lead", false, 4);
	ck_assert_int_eq(t.changed, 1);
	ck_assert_str_eq(t.key, "k");
	ck_assert_str_eq(t.value, "lead");
	ck_assert_uint_eq(t.last.term, 4);
	give_up(0, "k");
	ck_assert_int_eq(t.changed, 1);		/* one answer per wait */
	struct obs_stats os;
	obs_stats(obs, &os);
	ck_assert_uint_eq(os.waiting, 0);
	obs_client_destroy(c);
}
END_TEST

START_TEST(wait_for_a_revision_to_come)
{
	struct told t = { 0 };
	struct obs_client *c = obs_client_create(obs, on_told, &t);
	uint64_t r = now("k").revision;
	obs_client_wait(c, "k", 1, r + 2, -1);
	take(0, "k", "a", false, 4);		/* r + 1 */
	ck_assert_int_eq(t.changed, 0);
	give_up(0, "k");			/* r + 2 (the release) */
	ck_assert_int_eq(t.changed, 0);
	take(1, "k", "b", false, 5);		/* r + 3 */
	ck_assert_int_eq(t.changed, 1);
	ck_assert_str_eq(t.value, "b");
	obs_client_destroy(c);
}
END_TEST

START_TEST(destroyed_client_is_not_told)
{
	struct told t = { 0 }, u = { 0 };
	struct obs_client *c = obs_client_create(obs, on_told, &t);
	struct obs_client *d = obs_client_create(obs, on_told, &u);
	obs_client_wait(c, "k", 1, now("k").revision, 1000);
	ck_assert_int_eq(obs_client_follow(d, "k", 1), 0);
	t.dead = u.dead = true;
	obs_client_destroy(c);
	obs_client_destroy(d);
	take(0, "k", "a", false, 4);
	event_base_loop(base, EVLOOP_NONBLOCK);
	struct obs_stats os;
	obs_stats(obs, &os);
	ck_assert_uint_eq(os.waiting, 0);
	ck_assert_uint_eq(os.follows, 0);
}
END_TEST

START_TEST(cancel_and_replace_a_wait)
{
	struct told t = { 0 };
	struct obs_client *c = obs_client_create(obs, on_told, &t);
	ck_assert_int_eq(obs_client_cancel(c), 0);
	obs_client_wait(c, "a", 1, now("a").revision, -1);
	obs_client_wait(c, "b", 1, now("b").revision, -1);	/* replaces the wait on a */
	take(0, "a", "x", false, 3);
	ck_assert_int_eq(t.changed, 0);
	ck_assert_int_eq(obs_client_cancel(c), 1);
	take(1, "b", "y", false, 4);
	ck_assert_int_eq(t.changed, 0);
	obs_client_destroy(c);
}
END_TEST

START_TEST(wait_times_out)
{
	struct told t = { 0 };
	struct obs_client *c = obs_client_create(obs, on_told, &t);
	obs_client_wait(c, "k", 1, now("k").revision, 20);
	event_base_dispatch(base);	/* returns when the timer has run */
	ck_assert_int_eq(t.timeouts, 1);
	ck_assert_str_eq(t.key, "k");
	ck_assert_int_eq(t.changed, 0);
	take(0, "k", "a", false, 3);
	ck_assert_int_eq(t.changed, 0);	/* the wait is over */
	obs_client_destroy(c);
}
END_TEST

START_TEST(follow_pushes_each_change)
{
	struct told t = { 0 };
	struct obs_client *c = obs_client_create(obs, on_told, &t);
	ck_assert_int_eq(obs_client_follow(c, "k", 1), 0);
	ck_assert_int_eq(obs_client_follow(c, "k", 1), -1);
	take(0, "k", "a", false, 3);
	ck_assert_int_eq(locktab_proclaim(own[0], "k", 1, "b", 1, on_done, NULL), LT_OK);
	give_up(0, "k");
	ck_assert_int_eq(t.pushes, 3);
	ck_assert_str_eq(t.last.kind, "free");
	ck_assert_int_eq(obs_client_unfollow(c, "k", 1), 1);
	ck_assert_int_eq(obs_client_unfollow(c, "k", 1), 0);
	take(1, "k", "c", false, 4);
	ck_assert_int_eq(t.pushes, 3);
	obs_client_destroy(c);
}
END_TEST

START_TEST(idle_records_are_bounded)
{
	char key[32];
	for (int i = 0; i < OBS_IDLE_MAX + 100; i++) {
		snprintf(key, sizeof(key), "key-%d", i);
		(void)now(key);
	}
	struct obs_stats os;
	obs_stats(obs, &os);
	ck_assert_uint_eq(os.keys, OBS_IDLE_MAX);
	/* a followed key is never forgotten */
	struct told t = { 0 };
	struct obs_client *c = obs_client_create(obs, on_told, &t);
	ck_assert_int_eq(obs_client_follow(c, "kept", 4), 0);
	for (int i = 0; i < OBS_IDLE_MAX + 100; i++) {
		snprintf(key, sizeof(key), "more-%d", i);
		(void)now(key);
	}
	take(0, "kept", "v", false, 3);
	ck_assert_int_eq(t.pushes, 1);
	obs_client_destroy(c);
}
END_TEST

START_TEST(revision_counts_unobserved_changes)
{
	/* a key nobody asked about still moves the revision on: a state made
	 * later for it is numbered after every change it had */
	uint64_t r0 = now("watched").revision;
	take(0, "k", "v", false, 3);
	give_up(0, "k");
	struct obs_state st = now("k");
	ck_assert_uint_ge(st.revision, r0 + 2);
}
END_TEST

/* ---- a backend shared by daemons (leader, watch, proclaim) -------------- */

#define RMAX (OBS_IDLE_MAX + 64)

static struct backend_ops remote_ops;	/* the fake's, with the three */
static struct {
	char key[32];
	be_leader_cb *cb;
	void *arg;
} reads[RMAX];				/* reads asked, in order */
static int nreads, watching, unwatched;
static struct {
	char value[32];
	be_cb *cb;
	void *arg;
} proclaims[RMAX];
static int nproclaims;

static void
fr_leader(struct backend *be, const char *key, size_t keylen, be_leader_cb *cb, void *arg)
{
	(void)be;
	ck_assert_int_lt(nreads, RMAX);
	ck_assert_uint_lt(keylen, sizeof(reads[0].key));
	memcpy(reads[nreads].key, key, keylen);
	reads[nreads].key[keylen] = '\0';
	reads[nreads].cb = cb;
	reads[nreads].arg = arg;
	nreads++;
}

static void
fr_watch(struct backend *be, const char *key, size_t keylen, int on)
{
	(void)be;
	(void)key;
	(void)keylen;
	if (on)
		watching++;
	else
		unwatched++;
}

static void
fr_proclaim(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	(void)be;
	ck_assert_int_lt(nproclaims, RMAX);
	ck_assert_ptr_nonnull(l->value);
	ck_assert_uint_lt(l->valuelen, sizeof(proclaims[0].value));
	memcpy(proclaims[nproclaims].value, l->value, l->valuelen);
	proclaims[nproclaims].value[l->valuelen] = '\0';
	proclaims[nproclaims].cb = cb;
	proclaims[nproclaims].arg = arg;
	nproclaims++;
}

static void
setup_remote(void)
{
	remote_ops = fk_ops;
	remote_ops.leader = fr_leader;
	remote_ops.watch = fr_watch;
	remote_ops.proclaim = fr_proclaim;
	nreads = watching = unwatched = nproclaims = 0;
	fk_start(&remote_ops);
	base = event_base_new();
	lt = locktab_create(&fk_be, &limits, fk_clock, NULL, NULL, NULL);
	obs = obs_create(base, lt, &fk_be);
	for (int i = 0; i < NOWN; i++)
		own[i] = locktab_owner_create(lt, (uint64_t)i + 1, NULL, NULL);
}

/* A leader state as the backend tells it. */
static struct be_leader
bl(const char *value, uint64_t term, uint64_t version)
{
	struct be_leader l = { .status = BE_OK, .value = value,
	    .valuelen = value != NULL ? strlen(value) : 0, .term = term,
	    .mode = LOCK_EXCLUSIVE, .holders = term > 0, .version = version };
	return l;
}

/* Answer read i with l (once). */
static void
answer(int i, struct be_leader l)
{
	ck_assert_int_lt(i, nreads);
	ck_assert_ptr_nonnull(reads[i].cb);
	be_leader_cb *cb = reads[i].cb;
	reads[i].cb = NULL;
	cb(reads[i].arg, &l);
}

/* The end of a test on the fake shared backend: the owners go (a release
 * may have a key read again), the registry goes, and the reads still out
 * are answered as a backend answers them when it is destroyed. */
static void
teardown_remote(void)
{
	for (int i = 0; i < NOWN; i++) {
		locktab_owner_destroy(own[i]);
		own[i] = NULL;
	}
	fk_drain();
	obs_destroy(obs);
	obs = NULL;
	struct be_leader l = { .status = BE_ERROR, .why = "closing" };
	for (int i = 0; i < nreads; i++)
		if (reads[i].cb != NULL)
			answer(i, l);
	locktab_destroy(lt);
	event_base_free(base);
	fk_stop();
}

/* The backend tells of a change of key (l NULL: read it). */
static void
tell(const char *key, const struct be_leader *l)
{
	fk_be.up.changed(fk_be.up.arg, key, strlen(key), l);
}

START_TEST(remote_leader_is_read_first)
{
	struct told t = { 0 };
	struct obs_client *c = obs_client_create(obs, on_told, &t);
	struct obs_state st;
	ck_assert_int_eq(obs_client_now(c, "k", 1, &st), 0);
	ck_assert_int_eq(watching, 1);
	ck_assert_int_eq(nreads, 1);
	ck_assert_str_eq(reads[0].key, "k");
	answer(0, bl("there", 5, 1));
	ck_assert_int_eq(t.changed, 1);
	ck_assert_str_eq(t.value, "there");
	ck_assert_uint_eq(t.last.term, 5);
	ck_assert_uint_gt(t.last.revision, 0);
	ck_assert_int_eq(obs_client_now(c, "k", 1, &st), 1);	/* known now */
	ck_assert(value_is(&st, "there"));
	ck_assert_int_eq(nreads, 1);
	obs_client_destroy(c);
}
END_TEST

START_TEST(remote_changes_in_version_order)
{
	struct told t = { 0 };
	struct obs_client *c = obs_client_create(obs, on_told, &t);
	ck_assert_int_eq(obs_client_follow(c, "k", 1), 0);
	answer(0, bl("a", 5, 10));
	ck_assert_int_eq(t.pushes, 1);
	struct be_leader l = bl("c", 7, 12);
	tell("k", &l);
	ck_assert_int_eq(t.pushes, 2);
	ck_assert_str_eq(t.value, "c");
	uint64_t rev = t.last.revision;
	l = bl("b", 6, 11);		/* told late: older than what is known */
	tell("k", &l);
	ck_assert_int_eq(t.pushes, 2);
	l = bl(NULL, 0, 13);		/* released */
	tell("k", &l);
	ck_assert_int_eq(t.pushes, 3);
	ck_assert_str_eq(t.last.kind, "free");
	ck_assert_uint_gt(t.last.revision, rev);
	obs_client_destroy(c);
}
END_TEST

START_TEST(remote_unknown_change_is_read)
{
	struct told t = { 0 };
	struct obs_client *c = obs_client_create(obs, on_told, &t);
	ck_assert_int_eq(obs_client_follow(c, "k", 1), 0);
	answer(0, bl("a", 5, 1));
	tell("k", NULL);
	ck_assert_int_eq(nreads, 2);
	tell("k", NULL);		/* while it is read: once more after */
	ck_assert_int_eq(nreads, 2);
	answer(1, bl("b", 6, 2));
	ck_assert_int_eq(nreads, 3);
	answer(2, bl("b", 6, 2));	/* nothing new */
	ck_assert_int_eq(t.pushes, 2);
	tell("other", NULL);		/* a key nobody asked about: nothing */
	ck_assert_int_eq(nreads, 3);
	obs_client_destroy(c);
}
END_TEST

START_TEST(remote_read_error)
{
	struct told t = { 0 }, u = { 0 };
	struct obs_client *c = obs_client_create(obs, on_told, &t);
	struct obs_client *d = obs_client_create(obs, on_told, &u);
	struct obs_state st;
	ck_assert_int_eq(obs_client_now(c, "k", 1, &st), 0);
	obs_client_wait(d, "k", 1, 0, -1);
	struct be_leader l = { .status = BE_ERROR, .why = "down" };
	answer(0, l);
	ck_assert_int_eq(t.errors, 1);	/* LEADER: told it failed */
	ck_assert_int_eq(u.changed + u.errors, 0);	/* OBSERVE: waits on */
	tell("k", NULL);		/* the backend is back */
	answer(1, bl("a", 5, 1));
	ck_assert_int_eq(u.changed, 1);
	ck_assert_int_eq(t.changed, 0);
	obs_client_destroy(c);
	obs_client_destroy(d);
}
END_TEST

static void
count_errors(void *arg, enum obs_event ev, const char *key, size_t keylen,
    const struct obs_state *st)
{
	int *n = arg;
	(void)key;
	(void)keylen;
	(void)st;
	if (ev == OBS_ERROR)
		(*n)++;
}

START_TEST(remote_read_error_tells_leader)
{
	int errors = 0;
	struct obs_client *c = obs_client_create(obs, count_errors, &errors);
	struct obs_state st;
	ck_assert_int_eq(obs_client_now(c, "k", 1, &st), 0);
	struct be_leader l = { .status = BE_ERROR, .why = "down" };
	answer(0, l);
	ck_assert_int_eq(errors, 1);
	obs_client_destroy(c);
}
END_TEST

START_TEST(remote_local_changes_not_counted)
{
	struct told t = { 0 };
	struct obs_client *c = obs_client_create(obs, on_told, &t);
	ck_assert_int_eq(obs_client_follow(c, "k", 1), 0);
	answer(0, bl(NULL, 0, 1));
	take(0, "k", "mine", false, 9);	/* the backend tells it, not the table */
	ck_assert_int_eq(t.pushes, 1);
	ck_assert_int_eq(nreads, 2);	/* but the change here has the key read again */
	struct be_leader l = bl("mine", 9, 2);
	tell("k", &l);
	ck_assert_int_eq(t.pushes, 2);
	ck_assert_str_eq(t.value, "mine");
	answer(1, l);			/* the same version: nothing new */
	ck_assert_int_eq(t.pushes, 2);
	obs_client_destroy(c);
}
END_TEST

/* A LEADER after a change through this daemon waits for the read that
 * follows the change, though the record has a state (read your writes);
 * a read already out when the change came is followed by another. */
START_TEST(remote_leader_reads_own_change)
{
	struct told t = { 0 };
	struct obs_client *c = obs_client_create(obs, on_told, &t);
	struct obs_state st;
	ck_assert_int_eq(obs_now(obs, "k", 1, &st), 0);
	answer(0, bl(NULL, 0, 1));
	ck_assert_int_eq(obs_now(obs, "k", 1, &st), 1);
	take(0, "k", "mine", false, 9);
	ck_assert_int_eq(nreads, 2);
	ck_assert_int_eq(obs_client_now(c, "k", 1, &st), 0);	/* it waits */
	take(1, "k2", "x", false, 10);				/* another key: no read */
	ck_assert_int_eq(nreads, 2);
	answer(1, bl("mine", 9, 2));
	ck_assert_int_eq(t.changed, 1);
	ck_assert_str_eq(t.value, "mine");
	ck_assert_int_eq(obs_client_now(c, "k", 1, &st), 1);
	/* a change while a read is out: LEADER waits for the one after it */
	struct be_leader l = { .status = BE_OK };
	tell("k", NULL);		/* a message: the key is read */
	ck_assert_int_eq(nreads, 3);
	give_up(0, "k");
	ck_assert_int_eq(nreads, 3);	/* one read at a time */
	ck_assert_int_eq(obs_client_now(c, "k", 1, &st), 0);
	answer(2, bl("mine", 9, 3));	/* read before the release */
	ck_assert_int_eq(t.changed, 1);	/* still waits: the read after comes */
	ck_assert_int_eq(nreads, 4);
	l.version = 4;
	answer(3, l);
	ck_assert_int_eq(t.changed, 2);
	ck_assert_uint_eq(t.last.term, 0);
	obs_client_destroy(c);
}
END_TEST

START_TEST(remote_record_gone_while_read)
{
	struct obs_state st;
	ck_assert_int_eq(obs_now(obs, "k", 1, &st), 0);
	ck_assert_int_eq(nreads, 1);
	/* the registry goes (shutdown) with the read in flight: its answer,
	 * which the backend gives as it is destroyed, is dropped */
	obs_destroy(obs);
	obs = NULL;
	ck_assert_int_eq(unwatched, 1);
	struct be_leader l = { .status = BE_ERROR, .why = "closing" };
	answer(0, l);
}
END_TEST

START_TEST(remote_idle_records_unwatched)
{
	char key[32];
	for (int i = 0; i < OBS_IDLE_MAX + 10; i++) {
		struct obs_state st;
		snprintf(key, sizeof(key), "key-%d", i);
		(void)obs_now(obs, key, strlen(key), &st);
	}
	ck_assert_int_eq(watching, OBS_IDLE_MAX + 10);
	ck_assert_int_eq(unwatched, 10);
	/* the reads of forgotten keys answer into nothing */
	for (int i = 0; i < nreads; i++)
		answer(i, bl("v", 1, 1));
}
END_TEST

static enum lt_status proclaimed = LT_PENDING;

static void
on_proclaimed(void *arg, enum lt_status st, const struct lt_grant *g, long long value)
{
	(void)arg;
	(void)g;
	(void)value;
	proclaimed = st;
}

START_TEST(remote_proclaim_waits_for_the_backend)
{
	take(0, "k", "v1", false, 3);
	ck_assert_int_eq(locktab_proclaim(own[0], "k", 1, "v2", 2, on_proclaimed, NULL),
	    LT_PENDING);
	ck_assert_int_eq(nproclaims, 1);
	ck_assert_str_eq(proclaims[0].value, "v2");
	struct lt_leader l;
	locktab_leader(lt, "k", 1, &l);
	ck_assert_int_eq(memcmp(l.value, "v1", 2), 0);	/* not before the backend has it */
	struct be_reply r = { .status = BE_OK };
	proclaimed = LT_PENDING;
	proclaims[0].cb(proclaims[0].arg, &r);
	ck_assert_int_eq(proclaimed, LT_OK);
	locktab_leader(lt, "k", 1, &l);
	ck_assert_int_eq(memcmp(l.value, "v2", 2), 0);
	/* the lease is no longer ours */
	ck_assert_int_eq(locktab_proclaim(own[0], "k", 1, "v3", 2, on_proclaimed, NULL),
	    LT_PENDING);
	r.status = BE_NOTOWNER;
	proclaims[1].cb(proclaims[1].arg, &r);
	ck_assert_int_eq(proclaimed, LT_E_LOST);
	ck_assert_int_eq(locktab_proclaim(own[0], "k", 1, "v4", 2, on_proclaimed, NULL),
	    LT_PENDING);
	r.status = BE_ERROR;
	proclaims[2].cb(proclaims[2].arg, &r);
	ck_assert_int_eq(proclaimed, LT_E_BACKEND);
}
END_TEST

START_TEST(remote_campaign_value_goes_with_the_acquire)
{
	struct lt_lock_req req = { .key = "k", .keylen = 1, .mode = LOCK_EXCLUSIVE,
	    .ttl_ms = 10000, .wait_ms = -1, .value = "addr", .valuelen = 4 };
	struct lt_grant g;
	ck_assert_int_eq(locktab_lock(own[0], &req, &g, on_done, NULL), LT_PENDING);
	struct fk_op *op = fk_expect(0, FK_ACQUIRE, "k");
	(void)op;
	ck_assert_uint_eq(fk.count[FK_ACQUIRE], 1);
	fk_complete(BE_OK, 4);
	struct lt_leader l;
	locktab_leader(lt, "k", 1, &l);
	ck_assert_uint_eq(l.valuelen, 4);
}
END_TEST

int
main(void)
{
	log_min_level = LOG_LEVEL_ERROR;
	Suite *s = suite_create("observe");
	suite_case(s, "leaders", setup, teardown, 0,
	    SUITE_TESTS(leader_value_term_and_revision, proclaim_refusals,
	    shared_term_is_the_highest_fence, unchanged_state_is_not_a_change,
	    revision_counts_unobserved_changes));
	suite_case(s, "history", setup, teardown, 0,
	    SUITE_TESTS(history_gives_the_first_change_after, history_keeps_the_last_few,
	    idle_records_are_bounded));
	suite_case(s, "remote backend", setup_remote, teardown_remote, 0,
	    SUITE_TESTS(remote_leader_is_read_first, remote_changes_in_version_order,
	    remote_unknown_change_is_read, remote_read_error, remote_read_error_tells_leader,
	    remote_leader_reads_own_change,
	    remote_local_changes_not_counted, remote_record_gone_while_read,
	    remote_idle_records_unwatched, remote_proclaim_waits_for_the_backend,
	    remote_campaign_value_goes_with_the_acquire));
	suite_case(s, "clients", setup, teardown, 0,
	    SUITE_TESTS(wait_answered_by_the_next_change, wait_for_a_revision_to_come,
	    destroyed_client_is_not_told, cancel_and_replace_a_wait, wait_times_out,
	    follow_pushes_each_change));
	return suite_run(s);
}
