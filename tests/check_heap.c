/*
 * check_heap — unit tests of the deadline min-heap (daemon/heap.c): order,
 * moving a deadline up and down, removing from the middle and the end,
 * clearing twice, and a randomized run with a fixed seed against a sorted
 * model. After each step the heap's shape is checked: every node knows its
 * place and no node is due before its parent.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "heap.h"
#include "suite.h"

/* A check for hot paths: it only calls into Check when it fails. */
#define REQUIRE(cond) do { \
	if (!(cond)) \
		ck_abort_msg("requirement failed: %s", #cond); \
} while (0)

/* Every node on h is where its idx says and due no earlier than its
 * parent; returns how many there are. */
static size_t
check_shape(const struct heap *h)
{
	for (size_t i = 0; i < h->len; i++) {
		REQUIRE(h->v[i]->idx == i);
		REQUIRE(h->v[i]->when != HEAP_NEVER);
		if (i > 0)
			REQUIRE(h->v[(i - 1) / 2]->when <= h->v[i]->when);
	}
	return h->len;
}

/* Take every node off h, earliest first, checking the order; returns how
 * many there were. */
static size_t
drain_in_order(struct heap *h)
{
	uint64_t last = 0;
	size_t n = 0;
	struct heap_node *e;
	while ((e = heap_earliest(h)) != NULL) {
		ck_assert_uint_ge(e->when, last);
		last = e->when;
		heap_clear(h, e);
		ck_assert_uint_eq(e->when, HEAP_NEVER);
		check_shape(h);
		n++;
	}
	return n;
}

START_TEST(empty)
{
	struct heap h;
	heap_init(&h);
	ck_assert_ptr_null(heap_earliest(&h));
	ck_assert_uint_eq(h.len, 0);
	heap_fini(&h);
}
END_TEST

START_TEST(ordering)
{
	static const uint64_t whens[] = { 50, 10, 90, 30, 70, 20, 80, 40, 60, 0, 30, 10 };
	enum { N = sizeof(whens) / sizeof(whens[0]) };
	struct heap h;
	struct heap_node n[N];
	heap_init(&h);
	for (size_t i = 0; i < N; i++) {
		heap_node_init(&n[i]);
		ck_assert_uint_eq(n[i].when, HEAP_NEVER);
		heap_set(&h, &n[i], whens[i]);
		ck_assert_uint_eq(check_shape(&h), i + 1);
	}
	ck_assert_ptr_eq(heap_earliest(&h), &n[9]);
	ck_assert_uint_eq(drain_in_order(&h), N);
	ck_assert_ptr_null(heap_earliest(&h));
	heap_fini(&h);
}
END_TEST

START_TEST(move_up_and_down)
{
	struct heap h;
	struct heap_node n[8];
	heap_init(&h);
	for (size_t i = 0; i < 8; i++) {
		heap_node_init(&n[i]);
		heap_set(&h, &n[i], 100 + 10 * i);
	}
	ck_assert_ptr_eq(heap_earliest(&h), &n[0]);
	/* the last one becomes the earliest */
	heap_set(&h, &n[7], 5);
	check_shape(&h);
	ck_assert_ptr_eq(heap_earliest(&h), &n[7]);
	ck_assert_uint_eq(h.len, 8);
	/* the earliest goes last */
	heap_set(&h, &n[7], 1000);
	check_shape(&h);
	ck_assert_ptr_eq(heap_earliest(&h), &n[0]);
	heap_set(&h, &n[0], 999);
	check_shape(&h);
	ck_assert_ptr_eq(heap_earliest(&h), &n[1]);
	/* setting the same time again changes nothing */
	heap_set(&h, &n[1], 110);
	ck_assert_ptr_eq(heap_earliest(&h), &n[1]);
	ck_assert_uint_eq(check_shape(&h), 8);
	/* the order they now come in */
	static const size_t want[] = { 1, 2, 3, 4, 5, 6, 0, 7 };
	for (size_t i = 0; i < 8; i++) {
		struct heap_node *e = heap_earliest(&h);
		ck_assert_ptr_eq(e, &n[want[i]]);
		heap_clear(&h, e);
		check_shape(&h);
	}
	heap_fini(&h);
}
END_TEST

START_TEST(remove_middle_and_end)
{
	struct heap h;
	struct heap_node n[16];
	heap_init(&h);
	for (size_t i = 0; i < 16; i++) {
		heap_node_init(&n[i]);
		heap_set(&h, &n[i], 1000 - 10 * i);
	}
	/* a node in the middle */
	struct heap_node *mid = h.v[5];
	uint64_t mid_when = mid->when;
	heap_clear(&h, mid);
	ck_assert_uint_eq(mid->when, HEAP_NEVER);
	ck_assert_uint_eq(check_shape(&h), 15);
	/* the node at the end */
	struct heap_node *end = h.v[h.len - 1];
	heap_clear(&h, end);
	ck_assert_uint_eq(end->when, HEAP_NEVER);
	ck_assert_uint_eq(check_shape(&h), 14);
	/* the earliest */
	heap_clear(&h, &n[15]);
	ck_assert_uint_eq(check_shape(&h), 13);
	/* what is left comes in order, without the three */
	uint64_t last = 0;
	struct heap_node *e;
	while ((e = heap_earliest(&h)) != NULL) {
		ck_assert(e != mid && e != end && e != &n[15]);
		ck_assert_uint_gt(e->when, last);
		ck_assert_uint_ne(e->when, mid_when);
		last = e->when;
		heap_clear(&h, e);
	}
	/* a removed node can go back on */
	heap_set(&h, mid, 7);
	ck_assert_ptr_eq(heap_earliest(&h), mid);
	heap_fini(&h);
}
END_TEST

START_TEST(clear_twice)
{
	struct heap h;
	struct heap_node a, b, never;
	heap_init(&h);
	heap_node_init(&a);
	heap_node_init(&b);
	heap_node_init(&never);
	heap_set(&h, &a, 10);
	heap_set(&h, &b, 20);
	heap_clear(&h, &a);
	heap_clear(&h, &a);
	ck_assert_uint_eq(check_shape(&h), 1);
	ck_assert_ptr_eq(heap_earliest(&h), &b);
	/* a node never set, and HEAP_NEVER, take nothing off */
	heap_clear(&h, &never);
	heap_set(&h, &never, HEAP_NEVER);
	ck_assert_uint_eq(check_shape(&h), 1);
	/* HEAP_NEVER takes a node off, twice is harmless */
	heap_set(&h, &b, HEAP_NEVER);
	ck_assert_uint_eq(b.when, HEAP_NEVER);
	heap_set(&h, &b, HEAP_NEVER);
	heap_clear(&h, &b);
	ck_assert_uint_eq(h.len, 0);
	ck_assert_ptr_null(heap_earliest(&h));
	heap_fini(&h);
	/* fini leaves an empty heap that can be used again */
	heap_set(&h, &a, 1);
	ck_assert_ptr_eq(heap_earliest(&h), &a);
	heap_fini(&h);
}
END_TEST

/* xorshift64*: the randomized test's numbers, the same on every run. */
static uint64_t rng;

static unsigned
rnd_below(unsigned n)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (unsigned)((rng * 0x2545f4914f6cdd1dULL) >> 33) % n;
}

/* The earliest time in the model (HEAP_NEVER: none on the heap). */
static uint64_t
model_min(const uint64_t *model, size_t n)
{
	uint64_t m = HEAP_NEVER;
	for (size_t i = 0; i < n; i++)
		if (model[i] < m)
			m = model[i];
	return m;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

START_TEST(random_against_model)
{
	enum { N = 300, STEPS = 200000 };
	static struct heap_node n[N];
	static uint64_t model[N], sorted[N];
	struct heap h;
	heap_init(&h);
	rng = 0x9e3779b97f4a7c15ULL;
	for (size_t i = 0; i < N; i++) {
		heap_node_init(&n[i]);
		model[i] = HEAP_NEVER;
	}
	for (unsigned step = 0; step < STEPS; step++) {
		size_t i = rnd_below(N);
		unsigned dice = rnd_below(100);
		if (dice < 55) {
			/* insert or move, few distinct times so that ties happen */
			uint64_t when = rnd_below(dice < 5 ? 20 : 5000);
			heap_set(&h, &n[i], when);
			model[i] = when;
		} else if (dice < 85) {
			heap_clear(&h, &n[i]);
			model[i] = HEAP_NEVER;
		} else if (dice < 99) {
			/* take the earliest, as a timer would */
			struct heap_node *e = heap_earliest(&h);
			uint64_t m = model_min(model, N);
			if (m == HEAP_NEVER) {
				REQUIRE(e == NULL);
				continue;
			}
			REQUIRE(e != NULL && e->when == m);
			model[e - n] = HEAP_NEVER;
			heap_clear(&h, e);
		} else {
			/* everything comes off in the model's sorted order */
			size_t k = 0;
			for (size_t j = 0; j < N; j++)
				if (model[j] != HEAP_NEVER)
					sorted[k++] = model[j];
			qsort(sorted, k, sizeof(sorted[0]), cmp_u64);
			for (size_t j = 0; j < k; j++) {
				struct heap_node *e = heap_earliest(&h);
				REQUIRE(e != NULL && e->when == sorted[j]);
				model[e - n] = HEAP_NEVER;
				heap_clear(&h, e);
			}
			REQUIRE(heap_earliest(&h) == NULL);
		}
		size_t on = 0;
		for (size_t j = 0; j < N; j++) {
			REQUIRE(n[j].when == model[j]);
			on += model[j] != HEAP_NEVER;
		}
		REQUIRE(h.len == on);
		if (step % 64 == 0)
			check_shape(&h);
		struct heap_node *e = heap_earliest(&h);
		REQUIRE((e != NULL ? e->when : HEAP_NEVER) == model_min(model, N));
	}
	/* the run did grow the heap past its first allocation */
	ck_assert_uint_gt(h.cap, 64);
	heap_fini(&h);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("heap");

	suite_case(s, "heap", NULL, NULL, 0, SUITE_TESTS(empty, ordering, move_up_and_down,
	    remove_middle_and_end, clear_twice, random_against_model));
	return suite_run(s);
}
