/*
 * check_rquorum — unit tests of the decision of a Redis backend's operation
 * from its nodes' answers (daemon/redis/rquorum.c), with no socket and no
 * loop: every verdict of every script, with one node and with a quorum of
 * several, answers pending, late, failed, not sent and from a node kept out
 * after a restart; and the arithmetic beside it (a grant's validity with
 * the clocks' drift, the node timeout, the keep-out).
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "rquorum.h"
#include "suite.h"

#define MAXN 9

/* The verdict on script from answers given as a string, one letter per
 * node: o ok, b busy, n not the owner, k another kind, r brought back, f
 * failed, p pending, - not sent, K ok from a node kept out. Fences: the
 * node's index + 1 for an ok (so the largest is the last ok's). */
static enum rq_verdict
decide(enum rscript script, const char *answers, bool late, struct rq_tally *t)
{
	struct rq_vote v[MAXN];
	size_t n = 0;
	struct rq_tally scratch;
	for (const char *a = answers; *a != '\0'; a++, n++) {
		ck_assert_uint_lt(n, MAXN);
		v[n] = (struct rq_vote){ .fence = n + 1 };
		switch (*a) {
		case 'o': v[n].answer = RQ_OK; break;
		case 'K': v[n].answer = RQ_OK; v[n].kept_out = true; break;
		case 'b': v[n].answer = RQ_BUSY; break;
		case 'n': v[n].answer = RQ_NOTOWNER; break;
		case 'k': v[n].answer = RQ_KIND; break;
		case 'r': v[n].answer = RQ_BROUGHT; break;
		case 'f': v[n].answer = RQ_FAILED; break;
		case 'p': v[n].answer = RQ_PENDING; break;
		case '-': v[n].answer = RQ_NONE; break;
		default: ck_abort_msg("no answer '%c'", *a);
		}
	}
	return rquorum_decide(script, v, n, late, t != NULL ? t : &scratch);
}

START_TEST(one_node_its_answer_decides)
{
	ck_assert_int_eq(decide(RS_ACQUIRE, "o", false, NULL), RV_GRANTED);
	ck_assert_int_eq(decide(RS_ACQUIRE, "b", false, NULL), RV_BUSY);
	ck_assert_int_eq(decide(RS_ACQUIRE, "k", false, NULL), RV_KIND);
	ck_assert_int_eq(decide(RS_ACQUIRE, "f", false, NULL), RV_FAILED);
	ck_assert_int_eq(decide(RS_ACQUIRE, "-", false, NULL), RV_FAILED);
	ck_assert_int_eq(decide(RS_ACQUIRE, "p", false, NULL), RV_UNDECIDED);
	ck_assert_int_eq(decide(RS_TRANSFER, "o", false, NULL), RV_GRANTED);
	ck_assert_int_eq(decide(RS_TRANSFER, "b", false, NULL), RV_YIELDED);
	ck_assert_int_eq(decide(RS_TRANSFER, "n", false, NULL), RV_ENDED);
	ck_assert_int_eq(decide(RS_TRANSFER, "f", false, NULL), RV_FAILED);
	ck_assert_int_eq(decide(RS_RENEW, "o", false, NULL), RV_DONE);
	ck_assert_int_eq(decide(RS_RENEW, "n", false, NULL), RV_NOTOWNER);
	ck_assert_int_eq(decide(RS_RENEW, "r", false, NULL), RV_NOTOWNER);
	ck_assert_int_eq(decide(RS_RENEW, "f", false, NULL), RV_FAILED);
	ck_assert_int_eq(decide(RS_RELEASE, "o", false, NULL), RV_DONE);
	ck_assert_int_eq(decide(RS_RELEASE, "n", false, NULL), RV_NOTOWNER);
	ck_assert_int_eq(decide(RS_RELEASE, "f", false, NULL), RV_FAILED);
	/* one node waits for its answer however long: no node timeout */
	ck_assert_int_eq(decide(RS_RELEASE, "p", false, NULL), RV_UNDECIDED);
}
END_TEST

START_TEST(quorum_granted_with_the_largest_fence)
{
	struct rq_tally t;
	ck_assert_int_eq(decide(RS_ACQUIRE, "oob", false, &t), RV_GRANTED);
	ck_assert_uint_eq(t.quorum, 2);
	ck_assert_uint_eq(t.minority, 1);
	ck_assert_uint_eq(t.fence, 2);
	ck_assert_int_eq(decide(RS_ACQUIRE, "ofo", false, &t), RV_GRANTED);
	ck_assert_uint_eq(t.fence, 3);
	/* a quorum decides at once, whatever the rest will say */
	ck_assert_int_eq(decide(RS_ACQUIRE, "pooop", false, &t), RV_GRANTED);
	ck_assert_uint_eq(t.fence, 4);
	ck_assert_uint_eq(t.n[RQ_OK], 3);
	ck_assert_uint_eq(t.n[RQ_PENDING], 2);
	ck_assert_int_eq(decide(RS_TRANSFER, "oon", false, &t), RV_GRANTED);
	ck_assert_int_eq(decide(RS_RENEW, "oor", false, NULL), RV_DONE);
	ck_assert_int_eq(decide(RS_RELEASE, "o-o", false, NULL), RV_DONE);
	/* one ok short of a quorum is no grant */
	ck_assert_int_eq(decide(RS_ACQUIRE, "oobbb", false, NULL), RV_BUSY);
}
END_TEST

START_TEST(undecided_while_a_quorum_can_come)
{
	ck_assert_int_eq(decide(RS_ACQUIRE, "opp", false, NULL), RV_UNDECIDED);
	ck_assert_int_eq(decide(RS_ACQUIRE, "bpp", false, NULL), RV_UNDECIDED);
	ck_assert_int_eq(decide(RS_ACQUIRE, "opb", false, NULL), RV_UNDECIDED);
	ck_assert_int_eq(decide(RS_RENEW, "pfo", false, NULL), RV_UNDECIDED);
	/* no quorum can come any more: decided without the last answer */
	ck_assert_int_eq(decide(RS_ACQUIRE, "bbp", false, NULL), RV_BUSY);
	ck_assert_int_eq(decide(RS_ACQUIRE, "ffp", false, NULL), RV_FAILED);
	ck_assert_int_eq(decide(RS_RELEASE, "nnp", false, NULL), RV_NOTOWNER);
}
END_TEST

START_TEST(late_answers_count_as_failed)
{
	struct rq_tally t;
	ck_assert_int_eq(decide(RS_ACQUIRE, "opp", true, &t), RV_FAILED);
	ck_assert_uint_eq(t.n[RQ_FAILED], 2);
	ck_assert_uint_eq(t.n[RQ_PENDING], 0);
	ck_assert_int_eq(decide(RS_ACQUIRE, "oop", true, NULL), RV_GRANTED);
	/* busy where it counts, one late: busy (a minority failed) */
	ck_assert_int_eq(decide(RS_ACQUIRE, "bbp", true, NULL), RV_BUSY);
	ck_assert_int_eq(decide(RS_ACQUIRE, "bpp", true, NULL), RV_FAILED);
	ck_assert_int_eq(decide(RS_RENEW, "opp", true, NULL), RV_FAILED);
	ck_assert_int_eq(decide(RS_TRANSFER, "bpp", true, NULL), RV_FAILED);
	ck_assert_int_eq(decide(RS_TRANSFER, "bbp", true, NULL), RV_YIELDED);
}
END_TEST

START_TEST(not_sent_counts_as_failed)
{
	struct rq_tally t;
	ck_assert_int_eq(decide(RS_ACQUIRE, "o--", false, &t), RV_FAILED);
	ck_assert_uint_eq(t.n[RQ_FAILED], 2);
	ck_assert_int_eq(decide(RS_ACQUIRE, "oo-", false, NULL), RV_GRANTED);
	ck_assert_int_eq(decide(RS_RELEASE, "n--", false, NULL), RV_FAILED);
}
END_TEST

START_TEST(acquire_verdicts)
{
	/* another kind anywhere wins over busy and over failures */
	ck_assert_int_eq(decide(RS_ACQUIRE, "kbb", false, NULL), RV_KIND);
	ck_assert_int_eq(decide(RS_ACQUIRE, "kff", false, NULL), RV_KIND);
	/* busy needs a busy answer and no more than a minority failed */
	ck_assert_int_eq(decide(RS_ACQUIRE, "bbf", false, NULL), RV_BUSY);
	ck_assert_int_eq(decide(RS_ACQUIRE, "obf", false, NULL), RV_BUSY);
	ck_assert_int_eq(decide(RS_ACQUIRE, "bff", false, NULL), RV_FAILED);
	/* split with no busy answer (ok, not the owner...): failed */
	ck_assert_int_eq(decide(RS_ACQUIRE, "onf", false, NULL), RV_FAILED);
	ck_assert_int_eq(decide(RS_ACQUIRE, "obbbf", false, NULL), RV_BUSY);
	ck_assert_int_eq(decide(RS_ACQUIRE, "oobff", false, NULL), RV_BUSY);
	ck_assert_int_eq(decide(RS_ACQUIRE, "obfff", false, NULL), RV_FAILED);
}
END_TEST

START_TEST(transfer_verdicts)
{
	ck_assert_int_eq(decide(RS_TRANSFER, "bbn", false, NULL), RV_YIELDED);
	ck_assert_int_eq(decide(RS_TRANSFER, "nbn", false, NULL), RV_YIELDED);
	ck_assert_int_eq(decide(RS_TRANSFER, "nnf", false, NULL), RV_ENDED);
	ck_assert_int_eq(decide(RS_TRANSFER, "onn", false, NULL), RV_ENDED);
	ck_assert_int_eq(decide(RS_TRANSFER, "nff", false, NULL), RV_FAILED);
	ck_assert_int_eq(decide(RS_TRANSFER, "bff", false, NULL), RV_FAILED);
}
END_TEST

START_TEST(renew_and_release_verdicts)
{
	/* not the owner on more than a minority; a node that took it back
	 * counts as not having had it */
	ck_assert_int_eq(decide(RS_RENEW, "nnf", false, NULL), RV_NOTOWNER);
	ck_assert_int_eq(decide(RS_RENEW, "nro", false, NULL), RV_NOTOWNER);
	ck_assert_int_eq(decide(RS_RENEW, "rro", false, NULL), RV_NOTOWNER);
	ck_assert_int_eq(decide(RS_RENEW, "nff", false, NULL), RV_FAILED);
	ck_assert_int_eq(decide(RS_RENEW, "onf", false, NULL), RV_FAILED);
	ck_assert_int_eq(decide(RS_RELEASE, "onn", false, NULL), RV_NOTOWNER);
	ck_assert_int_eq(decide(RS_RELEASE, "off", false, NULL), RV_FAILED);
	ck_assert_int_eq(decide(RS_RELEASE, "onf", false, NULL), RV_FAILED);
	/* scripts that are no operation of the lock table: only a quorum's ok */
	ck_assert_int_eq(decide(RS_RAISE, "oof", false, NULL), RV_DONE);
	ck_assert_int_eq(decide(RS_CONFIRM, "nnf", false, NULL), RV_FAILED);
}
END_TEST

START_TEST(kept_out_grants_count_in_no_quorum)
{
	struct rq_tally t;
	ck_assert_int_eq(decide(RS_ACQUIRE, "oKb", false, &t), RV_BUSY);
	ck_assert_uint_eq(t.n[RQ_OK], 1);
	ck_assert_uint_eq(t.n[RQ_FAILED], 1);
	ck_assert_uint_eq(t.fence, 1);	/* the kept-out node's fence 2 counts not */
	ck_assert_int_eq(decide(RS_ACQUIRE, "oKo", false, &t), RV_GRANTED);
	ck_assert_uint_eq(t.fence, 3);
	ck_assert_int_eq(decide(RS_ACQUIRE, "KKo", false, &t), RV_FAILED);
	ck_assert_int_eq(decide(RS_ACQUIRE, "oKf", false, &t), RV_FAILED);
	ck_assert_int_eq(decide(RS_RENEW, "Kop", false, NULL), RV_UNDECIDED);
	ck_assert_int_eq(decide(RS_RENEW, "Kon", false, NULL), RV_FAILED);
	/* one server kept out: nothing it grants counts */
	ck_assert_int_eq(decide(RS_ACQUIRE, "K", false, NULL), RV_FAILED);
}
END_TEST

START_TEST(validity_less_drift)
{
	/* one server: the whole TTL */
	ck_assert_uint_eq(rquorum_valid(10000, 0, 0), 10000);
	ck_assert_uint_eq(rquorum_valid(0, 0, 0), 0);
	/* redlock's default: TTL x 0.01 + 2 ms */
	ck_assert_uint_eq(rquorum_valid(10000, 0.01, 2), 9898);
	ck_assert_uint_eq(rquorum_valid(100, 0.01, 2), 97);
	/* nothing left: 0, never a wrap */
	ck_assert_uint_eq(rquorum_valid(2, 0.01, 2), 0);
	ck_assert_uint_eq(rquorum_valid(1, 0.49, 2), 0);
}
END_TEST

START_TEST(node_timeout)
{
	ck_assert_uint_eq(rquorum_node_timeout(10000, 0, 2000), 1000);	/* a tenth */
	ck_assert_uint_eq(rquorum_node_timeout(60000, 0, 2000), 2000);	/* capped */
	ck_assert_uint_eq(rquorum_node_timeout(5, 0, 2000), 1);		/* at least 1 ms */
	ck_assert_uint_eq(rquorum_node_timeout(10000, 300, 2000), 300);	/* as set */
	ck_assert_uint_eq(rquorum_node_timeout(10000, 5000, 2000), 5000);
}
END_TEST

START_TEST(keepout)
{
	ck_assert_uint_eq(rquorum_keepout(0, false, 0), 0);		/* off */
	ck_assert_uint_eq(rquorum_keepout(0, true, 5), 0);
	ck_assert_uint_eq(rquorum_keepout(30000, true, 1000), 29000);
	ck_assert_uint_eq(rquorum_keepout(30000, true, 30000), 0);
	ck_assert_uint_eq(rquorum_keepout(30000, true, 99999), 0);
	ck_assert_uint_eq(rquorum_keepout(30000, false, 99999), UINT64_MAX);	/* unknown */
}
END_TEST

/* The verdicts, then the arithmetic beside them. */
int
main(void)
{
	Suite *s = suite_create("rquorum");

	suite_case(s, "verdicts", NULL, NULL, 0, SUITE_TESTS(one_node_its_answer_decides,
	    quorum_granted_with_the_largest_fence, undecided_while_a_quorum_can_come,
	    late_answers_count_as_failed, not_sent_counts_as_failed, acquire_verdicts,
	    transfer_verdicts, renew_and_release_verdicts, kept_out_grants_count_in_no_quorum));
	suite_case(s, "arithmetic", NULL, NULL, 0, SUITE_TESTS(validity_less_drift, node_timeout,
	    keepout));
	return suite_run(s);
}
