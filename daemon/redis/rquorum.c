/*
 * rquorum — an operation decided by a quorum of its nodes' answers, and the
 * arithmetic beside it (rquorum.h): pure functions, no state.
 */
#include "rquorum.h"

#include <string.h>

enum rq_verdict
rquorum_decide(enum rscript script, const struct rq_vote *votes, size_t nvotes, bool late,
    struct rq_tally *t)
{
	size_t *n = t->n;
	memset(t, 0, sizeof(*t));
	t->quorum = nvotes / 2 + 1;
	t->minority = nvotes - t->quorum;
	for (size_t i = 0; i < nvotes; i++) {
		enum rq_answer a = votes[i].answer;
		if (a == RQ_NONE || (a == RQ_PENDING && late))
			a = RQ_FAILED;
		/* a node kept out after a restart holds what it took (a lease the
		 * operation does not keep is given back), but counts in no quorum */
		if (a == RQ_OK && votes[i].kept_out)
			a = RQ_FAILED;
		n[a]++;
		if (a == RQ_OK && votes[i].fence > t->fence)
			t->fence = votes[i].fence;
	}
	if (n[RQ_OK] >= t->quorum)
		return script == RS_ACQUIRE || script == RS_TRANSFER ? RV_GRANTED : RV_DONE;
	if (n[RQ_OK] + n[RQ_PENDING] >= t->quorum)
		return RV_UNDECIDED;
	switch (script) {
	case RS_ACQUIRE:
		if (n[RQ_KIND] > 0)
			return RV_KIND;
		return n[RQ_FAILED] > t->minority || n[RQ_BUSY] == 0 ? RV_FAILED : RV_BUSY;
	case RS_TRANSFER:
		if (n[RQ_FAILED] > t->minority)
			return RV_FAILED;
		return n[RQ_BUSY] > 0 ? RV_YIELDED : RV_ENDED;
	case RS_RENEW:
	case RS_RELEASE:
	case RS_PROCLAIM:
		return n[RQ_NOTOWNER] + n[RQ_BROUGHT] > t->minority ? RV_NOTOWNER : RV_FAILED;
	default:
		return RV_FAILED;
	}
}

uint64_t
rquorum_valid(uint64_t ttl_ms, double drift, uint64_t drift_ms)
{
	uint64_t d = (uint64_t)((double)ttl_ms * drift) + drift_ms;
	return ttl_ms > d ? ttl_ms - d : 0;
}

uint64_t
rquorum_node_timeout(uint64_t ttl_ms, long long node_timeout_ms, long long command_timeout_ms)
{
	uint64_t t = ttl_ms / 10, cap = (uint64_t)command_timeout_ms;
	if (node_timeout_ms > 0)
		return (uint64_t)node_timeout_ms;
	return t < 1 ? 1 : t > cap ? cap : t;
}

uint64_t
rquorum_keepout(uint64_t keepout_ms, bool known, uint64_t up_ms)
{
	if (keepout_ms == 0)
		return 0;
	if (!known)
		return UINT64_MAX;
	return up_ms < keepout_ms ? keepout_ms - up_ms : 0;
}
