/*
 * check_later — unit tests of the queue of deferred calls (daemon/later.c)
 * on a real event loop: nothing runs inside later_add, items run in the
 * order added, items added while a pass runs come after it, an item that
 * keeps adding itself lets the loop's other events run, cancelling (before
 * and during a pass), later_run (outside and inside a pass, with items
 * added meanwhile), items that free themselves, and a queue destroyed from
 * inside one of its items or with items still on it.
 */
#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "later.h"
#include "suite.h"

#define NREC 8			/* items a test uses */
#define LOG_MAX 4096		/* runs a test remembers */

/* What a test's item does when it runs. */
struct rec {
	struct later_item it;	/* on q */
	int id;			/* what it logs */
	struct rec *add;	/* queued by it when it runs, or NULL */
	struct rec *cancel;	/* cancelled by it when it runs, or NULL */
	bool again;		/* it queues itself again while keep_going */
	bool run_all;		/* it calls later_run */
	bool destroy;		/* it destroys q */
	bool heap;		/* malloc'ed: it frees itself */
};

static struct event_base *base;		/* the loop */
static struct later *q;			/* the queue under test */
static struct rec recs[NREC];		/* items; recs[i].id is i */
static int runs[LOG_MAX];		/* ids in the order they ran */
static size_t nruns;
static bool keep_going;			/* items with again add themselves */
static int poke_fd = -1;		/* written to by the next item that runs */

static void
rec_fn(struct later_item *it)
{
	struct rec *r = (struct rec *)(void *)((char *)it - offsetof(struct rec, it));

	ck_assert(!it->queued);
	ck_assert_uint_lt(nruns, LOG_MAX);
	runs[nruns++] = r->id;
	if (poke_fd >= 0) {
		ck_assert_int_eq(write(poke_fd, "x", 1), 1);
		poke_fd = -1;
	}
	if (r->cancel != NULL)
		later_cancel(q, &r->cancel->it);
	if (r->add != NULL)
		later_add(q, &r->add->it, rec_fn);
	if (r->again && keep_going)
		later_add(q, &r->it, rec_fn);
	if (r->run_all)
		later_run(q);
	if (r->destroy) {
		later_destroy(q);
		q = NULL;
	}
	if (r->heap)
		free(r);
}

/* The ids run so far are want[0, n). */
static void
expect_runs(const int *want, size_t n)
{
	ck_assert_uint_eq(nruns, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(runs[i] == want[i], "run %zu was %d, not %d", i, runs[i], want[i]);
}

/* One turn of the loop, without waiting. */
static void
turn(void)
{
	ck_assert_int_ge(event_base_loop(base, EVLOOP_NONBLOCK), 0);
}

/* Run what is queued: by later_run, or by a turn of the loop. */
static void
run_by(bool via_run)
{
	if (via_run)
		later_run(q);
	else
		turn();
}

static void
setup(void)
{
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	q = later_create(base);
	for (int i = 0; i < NREC; i++)
		recs[i] = (struct rec){ .id = i };
	nruns = 0;
	keep_going = false;
}

static void
teardown(void)
{
	later_destroy(q);
	event_base_free(base);
}

START_TEST(empty)
{
	ck_assert_uint_eq(later_count(q), 0);
	later_run(q);
	turn();
	ck_assert_uint_eq(nruns, 0);
	later_destroy(NULL);
}
END_TEST

/* Nothing runs inside later_add; a turn runs all, oldest first. */
START_TEST(from_the_loop_in_order)
{
	static const int want[] = { 3, 1, 2 };

	later_add(q, &recs[3].it, rec_fn);
	later_add(q, &recs[1].it, rec_fn);
	later_add(q, &recs[2].it, rec_fn);
	ck_assert(recs[1].it.queued);
	ck_assert_uint_eq(later_count(q), 3);
	ck_assert_uint_eq(nruns, 0);
	turn();
	expect_runs(want, 3);
	ck_assert_uint_eq(later_count(q), 0);
	ck_assert(!recs[1].it.queued);
	/* an item that ran may be added again */
	later_add(q, &recs[1].it, rec_fn);
	turn();
	ck_assert_uint_eq(nruns, 4);
	ck_assert_int_eq(runs[3], 1);
	turn();
	ck_assert_uint_eq(nruns, 4);
}
END_TEST

/* An item added while a pass runs runs after every item of that pass, in
 * the same turn of the loop; later_run runs them all now. The turn after
 * has nothing left. */
START_TEST(added_while_running)
{
	static const int want[] = { 0, 1, 2, 3 };

	for (int via_run = 0; via_run <= 1; via_run++) {
		nruns = 0;
		recs[0].add = &recs[2];
		recs[2].add = &recs[3];
		later_add(q, &recs[0].it, rec_fn);
		later_add(q, &recs[1].it, rec_fn);
		run_by(via_run);
		expect_runs(want, 4);
		ck_assert_uint_eq(later_count(q), 0);
		turn();
		expect_runs(want, 4);
	}
}
END_TEST

/* Many items keep their order. */
START_TEST(many_in_order)
{
	enum { N = 1000 };
	struct rec *v = calloc(N, sizeof(*v));

	ck_assert_ptr_nonnull(v);
	for (int i = 0; i < N; i++) {
		v[i].id = i;
		later_add(q, &v[i].it, rec_fn);
	}
	ck_assert_uint_eq(later_count(q), N);
	turn();
	ck_assert_uint_eq(nruns, N);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(runs[i], i);
	free(v);
}
END_TEST

static size_t runs_at_io;		/* nruns when on_io ran, 0 if it has not */

/* The socket became readable: stop the items that add themselves. */
static void
on_io(evutil_socket_t fd, short what, void *arg)
{
	char c;
	(void)what;
	(void)arg;
	ck_assert_int_eq(read(fd, &c, 1), 1);
	runs_at_io = nruns;
	keep_going = false;
}

/* An item that adds itself again every time does not keep the loop from
 * a socket that became ready: the socket's event runs after a bounded
 * number of passes, and stops it. */
START_TEST(self_adding_yields)
{
	int sv[2];
	struct event *io;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	io = event_new(base, sv[0], EV_READ, on_io, NULL);
	event_add(io, NULL);
	runs_at_io = 0;
	poke_fd = sv[1];
	keep_going = true;
	recs[0].again = true;
	later_add(q, &recs[0].it, rec_fn);
	turn();
	/* passes chain in one turn of the loop (64 of them), then it polls */
	ck_assert_uint_eq(runs_at_io, 64);
	/* it ran once more, without adding itself */
	ck_assert_uint_eq(nruns, runs_at_io + 1);
	ck_assert_uint_eq(later_count(q), 0);
	event_free(io);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* A cancelled item does not run, whether cancelled before the pass or by
 * an item of the same pass; cancelling what is not queued does nothing. */
START_TEST(cancel)
{
	static const int want[] = { 0, 2, 5 };

	later_cancel(q, &recs[7].it);
	later_add(q, &recs[0].it, rec_fn);
	later_add(q, &recs[1].it, rec_fn);
	later_add(q, &recs[2].it, rec_fn);
	later_add(q, &recs[3].it, rec_fn);
	later_add(q, &recs[5].it, rec_fn);
	recs[2].cancel = &recs[3];
	later_cancel(q, &recs[1].it);
	ck_assert(!recs[1].it.queued);
	ck_assert_uint_eq(later_count(q), 4);
	later_cancel(q, &recs[1].it);
	ck_assert_uint_eq(later_count(q), 4);
	turn();
	expect_runs(want, 3);
	ck_assert(!recs[3].it.queued);
	ck_assert_uint_eq(later_count(q), 0);
	/* cancelling everything leaves an empty pass */
	later_add(q, &recs[4].it, rec_fn);
	later_cancel(q, &recs[4].it);
	turn();
	expect_runs(want, 3);
}
END_TEST

/* Items may free themselves. */
START_TEST(items_free_themselves)
{
	for (int i = 0; i < 5; i++) {
		struct rec *r = calloc(1, sizeof(*r));

		ck_assert_ptr_nonnull(r);
		r->id = i;
		r->heap = true;
		later_add(q, &r->it, rec_fn);
	}
	turn();
	ck_assert_uint_eq(nruns, 5);
	ck_assert_uint_eq(later_count(q), 0);
}
END_TEST

/* later_run from an item runs the rest of the pass and what was added;
 * nothing runs twice, and the queue works on afterwards. */
START_TEST(run_inside_a_pass)
{
	static const int want[] = { 0, 2, 1, 3, 4 };

	recs[0].add = &recs[1];
	recs[0].run_all = true;
	recs[1].add = &recs[3];
	later_add(q, &recs[0].it, rec_fn);
	later_add(q, &recs[2].it, rec_fn);
	turn();
	expect_runs(want, 4);
	ck_assert_uint_eq(later_count(q), 0);
	turn();
	expect_runs(want, 4);
	later_add(q, &recs[4].it, rec_fn);
	turn();
	expect_runs(want, 5);
}
END_TEST

/* An item may destroy the queue, in a pass or in later_run: the rest is
 * not run. */
START_TEST(destroyed_by_an_item)
{
	static const int want[] = { 0, 1 };

	for (int via_run = 0; via_run <= 1; via_run++) {
		if (q == NULL)
			q = later_create(base);
		nruns = 0;
		recs[1].destroy = true;
		later_add(q, &recs[0].it, rec_fn);
		later_add(q, &recs[1].it, rec_fn);
		later_add(q, &recs[2].it, rec_fn);
		run_by(via_run);
		expect_runs(want, 2);
		ck_assert_ptr_null(q);
		turn();
		expect_runs(want, 2);
		recs[2].it.queued = false;	/* it went with the queue */
	}
}
END_TEST

/* Destroying a queue with items on it runs none of them. */
START_TEST(destroyed_with_items)
{
	later_add(q, &recs[0].it, rec_fn);
	later_add(q, &recs[1].it, rec_fn);
	later_destroy(q);
	q = NULL;
	turn();
	ck_assert_uint_eq(nruns, 0);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("later");

	suite_case(s, "core", setup, teardown, 0, SUITE_TESTS(empty, from_the_loop_in_order,
	    added_while_running, many_in_order, self_adding_yields, cancel,
	    items_free_themselves, run_inside_a_pass, destroyed_by_an_item,
	    destroyed_with_items));
	return suite_run(s);
}
