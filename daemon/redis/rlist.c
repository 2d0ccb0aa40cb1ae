/*
 * rlist — the servers of a topology as a fixed list of nodes (one Redis
 * server, Sentinel's master, redlock's N servers): every operation is a
 * call on each node, sent when a quorum of them is up and counts, and the
 * list says of itself what its nodes say together (STATUS, INFO).
 */
#include "rd.h"

#include <assert.h>

#include "clock.h"
#include "rnode.h"

/* The nodes whose command connection is up. */
size_t
rlist_up(const struct rd *r)
{
	size_t up = 0;
	for (size_t i = 0; i < r->nnodes; i++)
		up += rnode_up(r->nodes[i]->node);
	return up;
}

size_t
rlist_counting(const struct rd *r)
{
	size_t n = 0;
	uint64_t now = clock_ms();
	for (size_t i = 0; i < r->nnodes; i++)
		n += rnode_up(r->nodes[i]->node) && rd_kept_out(r, r->nodes[i], now) == 0;
	return n;
}

bool
rlist_ready(const struct rd *r, const struct rd_op *op)
{
	return (op->script == RS_RELEASE ? rlist_up(r) : rlist_counting(r)) >= r->quorum;
}

void
rlist_send(struct rd *r, struct rd_op *op)
{
	for (size_t i = 0; i < r->ncalls; i++) {
		if (rd_call_send(r, op, i, r->nodes[i]) < 0) {
			op->calls[i].answer = RQ_NONE;
			if (op->script == RS_RELEASE && !r->destroying)
				rd_keep_on(r, op, i);
		}
	}
	/* a node takes a call exactly when it is up, and nothing ran between
	 * the count (rlist_ready) and the loop: a quorum's calls are out,
	 * so their answers (or the node timeout) decide op */
	assert(op->pending >= r->quorum);
	if (r->ncalls > 1)
		rd_late_arm(r, op);
}

const char *
rlist_state(const struct rd *r)
{
	size_t up = rlist_counting(r);
	return up == r->nnodes ? "connected" : up >= r->quorum ? "degraded" : "disconnected";
}

bool
rlist_connected(const struct rd *r)
{
	return rlist_counting(r) >= r->quorum;
}

bool
rlist_subscribed(const struct rd *r)
{
	struct rnode_stats st;
	size_t n = 0;
	for (size_t i = 0; i < r->nnodes; i++) {
		rnode_stats(r->nodes[i]->node, &st);
		n += st.subscribed;
	}
	return n >= r->quorum;
}
