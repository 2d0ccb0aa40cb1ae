/*
 * check_rleader_quorum — unit tests of who leads a key on redlock's nodes,
 * combined from each node's look (daemon/redis/rleader_quorum.c): the
 * holder a majority shows, its term and latest value, shared leases, too
 * few answers, and the leaders of the nodes' histories an observer has not
 * been told.
 */
#include <check.h>
#include <string.h>

#include "rleader_quorum.h"
#include "suite.h"

/* A node that holds member exclusively with term, value and proclaims. */
static struct rlq_node
held(const char *member, uint64_t term, const char *value, long long proclaims)
{
	struct rlq_node n = { .answered = true, .holders = 1, .member = member,
		.memberlen = strlen(member), .term = term, .value = value,
		.valuelen = value != NULL ? strlen(value) : 0, .proclaims = proclaims,
		.pttl = 5000 };
	strcpy(n.kind, "x0");
	return n;
}

static struct rlq_node
free_node(void)
{
	return (struct rlq_node){ .answered = true, .proclaims = -1, .pttl = -1 };
}

static struct rlq_node
shared_node(const char *kind, unsigned holders, uint64_t term)
{
	struct rlq_node n = { .answered = true, .holders = holders, .term = term,
		.proclaims = -1, .pttl = 3000 };
	strcpy(n.kind, kind);
	return n;
}

/* Combine n nodes of 3 (a majority: 2) into *st, expecting kind, holders
 * and term. */
static void
expect(const struct rlq_node *n, struct rlq_state *st, const char *kind, unsigned holders,
    uint64_t term)
{
	ck_assert_int_eq(rlquorum_combine(n, 3, 2, st), 0);
	ck_assert_str_eq(st->kind, kind);
	ck_assert_uint_eq(st->holders, holders);
	ck_assert_uint_eq(st->term, term);
}

START_TEST(majority_holder_leads)
{
	struct rlq_node n[3] = { held("x0:a", 100, "v", 0), held("x0:a", 100, "v", 0),
		free_node() };
	struct rlq_state st;
	expect(n, &st, "x0", 1, 100);
	ck_assert(st.settled);
	ck_assert_uint_eq(st.valuelen, 1);
	ck_assert_int_eq(memcmp(st.value, "v", 1), 0);
	ck_assert_int_eq(st.pttl, 5000);
}
END_TEST

START_TEST(minority_holder_is_free)
{
	/* one node kept a lease the quorum did not grant */
	struct rlq_node n[3] = { held("x0:a", 100, "v", 0), free_node(), free_node() };
	struct rlq_state st;
	expect(n, &st, "", 0, 0);
	ck_assert_ptr_null(st.value);
	/* two members on one node each: nobody */
	n[1] = held("x0:b", 120, "w", 0);
	ck_assert_int_eq(rlquorum_combine(n, 3, 2, &st), 0);
	ck_assert_uint_eq(st.holders, 0);
}
END_TEST

START_TEST(term_is_the_largest_recorded)
{
	/* the write-back reached one node: the other recorded its proposal */
	struct rlq_node n[3] = { held("x0:a", 90, "v", 0), held("x0:a", 100, "v", 0),
		held("x0:a", 100, "v", 0) };
	struct rlq_state st;
	ck_assert_int_eq(rlquorum_combine(n, 3, 2, &st), 0);
	ck_assert_uint_eq(st.term, 100);
	ck_assert(!st.settled);
	n[0].term = 100;
	ck_assert_int_eq(rlquorum_combine(n, 3, 2, &st), 0);
	ck_assert(st.settled);
}
END_TEST

START_TEST(term_of_the_holders_records)
{
	/* node 2 holds the lease too (given back by a renewal), but its record
	 * is of another member's attempt: its counter moved on */
	struct rlq_node n[3] = { held("x0:a", 100, "v", 1), held("x0:a", 100, "v", 1),
		held("x0:a", 180, NULL, -1) };
	struct rlq_state st;
	expect(n, &st, "x0", 1, 100);
	ck_assert(st.settled);
	ck_assert_int_eq(memcmp(st.value, "v", 1), 0);
	/* no record is the holder's (locked before it was observed): the
	 * counter a majority is at least at */
	n[0] = held("x0:a", 120, NULL, -1);
	n[1] = held("x0:a", 110, NULL, -1);
	expect(n, &st, "x0", 1, 120);
	ck_assert_ptr_null(st.value);
}
END_TEST

START_TEST(value_of_the_most_proclaims)
{
	/* node 1 missed the last PROCLAIM; node 2 never had the record */
	struct rlq_node n[3] = { held("x0:a", 100, "new", 2), held("x0:a", 100, "old", 1),
		held("x0:a", 100, NULL, -1) };
	struct rlq_state st;
	ck_assert_int_eq(rlquorum_combine(n, 3, 2, &st), 0);
	ck_assert_uint_eq(st.valuelen, 3);
	ck_assert_int_eq(memcmp(st.value, "new", 3), 0);
	n[0].answered = false;
	ck_assert_int_eq(rlquorum_combine(n, 3, 2, &st), 0);
	ck_assert_int_eq(memcmp(st.value, "old", 3), 0);
}
END_TEST

START_TEST(too_few_answers)
{
	struct rlq_node n[3] = { held("x0:a", 100, "v", 0), free_node(), free_node() };
	struct rlq_state st;
	n[1].answered = false;
	n[2].answered = false;
	ck_assert_int_eq(rlquorum_combine(n, 3, 2, &st), -1);
	ck_assert_uint_eq(st.answered, 1);
	n[2].answered = true;	/* one of three down: two answer */
	ck_assert_int_eq(rlquorum_combine(n, 3, 2, &st), 0);
	ck_assert_uint_eq(st.holders, 0);
	n[2] = held("x0:a", 100, "v", 0);
	ck_assert_int_eq(rlquorum_combine(n, 3, 2, &st), 0);
	ck_assert_uint_eq(st.holders, 1);
	ck_assert_uint_eq(st.term, 100);
}
END_TEST

START_TEST(shared_leases_on_a_majority)
{
	struct rlq_node n[3] = { shared_node("s0", 3, 50), shared_node("s0", 2, 60),
		shared_node("s0", 1, 40) };
	struct rlq_state st;
	ck_assert_int_eq(rlquorum_combine(n, 3, 2, &st), 0);
	ck_assert_str_eq(st.kind, "s0");
	ck_assert_uint_eq(st.holders, 2);	/* two nodes show 2 or more */
	ck_assert_uint_eq(st.term, 50);		/* and 50 or more */
	n[1] = shared_node("n3", 2, 60);
	n[2] = free_node();
	ck_assert_int_eq(rlquorum_combine(n, 3, 2, &st), 0);
	ck_assert_uint_eq(st.holders, 0);
	ck_assert_str_eq(st.kind, "");
}
END_TEST

START_TEST(history_in_order_each_once)
{
	struct rlq_past p[] = {
		{ 30, "c", 1 }, { 10, "a", 1 }, { 20, "b", 1 },	/* node 0 */
		{ 20, "b", 1 }, { 30, "c", 1 }, { 40, "d", 1 },	/* node 1 */
		{ 10, "a", 1 }, { 20, "b", 1 }, { 40, "d", 1 },	/* node 2 */
	};
	size_t n = rlquorum_history(p, 9, 2, 10, 40);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(p[0].term, 20);
	ck_assert_uint_eq(p[1].term, 30);
}
END_TEST

START_TEST(history_on_a_minority_is_no_leader)
{
	/* node 1 recorded its own proposal, 25: its write-back is to come */
	struct rlq_past p[] = { { 20, "b", 1 }, { 30, "c", 1 }, { 20, "b", 1 },
		{ 25, "c", 1 } };
	ck_assert_uint_eq(rlquorum_history(p, 4, 2, 0, 0), 1);
	ck_assert_uint_eq(p[0].term, 20);
}
END_TEST

START_TEST(history_before_a_free_key)
{
	struct rlq_past p[] = { { 30, "c", 1 }, { 20, NULL, 0 }, { 20, "b", 1 },
		{ 30, "c", 1 } };
	size_t n = rlquorum_history(p, 4, 2, 0, 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(p[0].term, 20);
	ck_assert_ptr_nonnull(p[0].value);
	ck_assert_uint_eq(p[1].term, 30);
	n = rlquorum_history(p, 2, 1, 30, 0);
	ck_assert_uint_eq(n, 0);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("rleader_quorum");

	suite_case(s, "state", NULL, NULL, 0, SUITE_TESTS(majority_holder_leads,
	    minority_holder_is_free, term_is_the_largest_recorded,
	    term_of_the_holders_records, value_of_the_most_proclaims,
	    too_few_answers, shared_leases_on_a_majority));
	suite_case(s, "history", NULL, NULL, 0, SUITE_TESTS(history_in_order_each_once,
	    history_on_a_minority_is_no_leader, history_before_a_free_key));
	return suite_run(s);
}
