/*
 * rquorum — the decision of an operation of the Redis backends from its
 * nodes' answers, and the arithmetic beside it (a grant's validity, the
 * node timeout, a node's keep-out after a restart): pure functions of
 * their arguments, tested without a socket or a loop (check_rquorum.c).
 *
 * An operation is one script call on each of N nodes (N = 1: one Redis
 * server, Sentinel's master, a cluster's slot master; redlock's N
 * independent servers). It is decided as soon as a quorum, N / 2 + 1, of
 * them answered alike, or as soon as no quorum can (the nodes that did not
 * answer within the node timeout counting as failed). With N = 1 the one
 * answer decides. What the core does with each verdict (tell the caller,
 * give back leases taken where it was not granted, arm a retry) is
 * be_redis.c's; the write-back of a grant's fence, rquorum.c's.
 */
#ifndef DLOCKD_RQUORUM_H
#define DLOCKD_RQUORUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rscript.h"

/* What one node answered to an operation. */
enum rq_answer {
	RQ_NONE,			/* not sent (the node is down) */
	RQ_PENDING,			/* sent, not answered */
	RQ_OK,				/* granted (its fence), renewed, released */
	RQ_BUSY,			/* acquire: held elsewhere; transfer: yielded */
	RQ_NOTOWNER,			/* not ours (any more) */
	RQ_KIND,			/* acquire: held as another kind */
	RQ_BROUGHT,			/* renew: it was missing, taken now */
	RQ_FAILED			/* an error reply, no reply, or late */
};
#define RQ_ANSWERS (RQ_FAILED + 1)

/* One node's answer as the decision counts it. */
struct rq_vote {
	enum rq_answer answer;		/* what it answered */
	uint64_t fence;			/* RQ_OK acquire, transfer: its proposal */
	bool kept_out;			/* its server restarted within the keep-out:
					 * its RQ_OK counts as failed */
};

/* What the answers say of an operation. */
enum rq_verdict {
	RV_UNDECIDED,			/* not yet: the answers to come may still
					 * make a quorum */
	RV_GRANTED,			/* acquire, transfer: a quorum granted it,
					 * with the largest fence it proposed */
	RV_DONE,			/* renew, release (or another script): a
					 * quorum did it */
	RV_BUSY,			/* acquire: held elsewhere, as no quorum failed */
	RV_KIND,			/* acquire: held as another kind somewhere */
	RV_YIELDED,			/* transfer: from's lease was released for a
					 * daemon that waits */
	RV_ENDED,			/* transfer: from's lease had ended */
	RV_NOTOWNER,			/* renew, release: not ours (any more) on
					 * more than a minority */
	RV_FAILED			/* no quorum can say: too many failed, or
					 * (acquire) nobody said busy */
};

/* The answers counted, as rquorum_decide saw them. */
struct rq_tally {
	size_t n[RQ_ANSWERS];		/* nodes per answer (late and kept out:
					 * RQ_FAILED; not sent: RQ_FAILED) */
	size_t quorum;			/* N / 2 + 1 */
	size_t minority;		/* N - quorum */
	uint64_t fence;			/* the largest fence of an RQ_OK that counts */
};

/* The decision on a call of script to nvotes nodes (at least one) from
 * their answers; late: the node timeout passed (what is pending counts as
 * failed). The counts into *t. */
enum rq_verdict rquorum_decide(enum rscript script, const struct rq_vote *votes,
    size_t nvotes, bool late, struct rq_tally *t);

/* How long a lease of ttl_ms lasts for sure, counted from its call's send:
 * the TTL less what the servers' clocks may drift over it (ttl_ms x drift
 * + drift_ms; both 0 for one server, which never shortens a lease). */
uint64_t rquorum_valid(uint64_t ttl_ms, double drift, uint64_t drift_ms);

/* How long an operation waits for a node's answer before it counts it
 * failed, for a lease of ttl_ms: node_timeout_ms when it is set (> 0), else a
 * tenth of the TTL, from 1 ms up to command_timeout_ms. */
uint64_t rquorum_node_timeout(uint64_t ttl_ms, long long node_timeout_ms,
    long long command_timeout_ms);

/* How much longer a node whose server has run up_ms counts in no quorum,
 * with a keep-out of keepout_ms (0: none); known false: when the server
 * started is not known (UINT64_MAX). 0: it counts. */
uint64_t rquorum_keepout(uint64_t keepout_ms, bool known, uint64_t up_ms);

#endif
