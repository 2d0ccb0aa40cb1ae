/*
 * be_redis — the policy of the Redis backends (redis, redlock,
 * redis-cluster): leases in Redis servers, shared by any number of daemons.
 *
 * The leases, fence counters and waiting marks in Redis, and the scripts
 * that keep them, are rscript.c's; a server's connections (name resolution,
 * TLS, AUTH, scripts loaded, timeouts, reconnects, releases kept until
 * Redis is back) are a Redis node's (rnode.c). Where the calls go is the
 * topology's (rd.h): one server, Sentinel's master, redlock's N
 * independent servers, or a cluster's slot masters. This file is the
 * policy they share: the backend's operations, the life of a call,
 * retries and yields, the settle after a reconnect, the wake-ups.
 *
 * Every operation is a script call on each of the topology's r->ncalls
 * nodes at once (struct rd_op, a struct rd_call per node), decided as soon
 * as a quorum (ncalls / 2 + 1) answered alike, or once a quorum can no
 * longer do so (rquorum.c; one call: its answer). A lease taken where the
 * grant failed is released on the nodes that may hold it; a renewal counts
 * when a quorum had the lease, and a node that missed it takes it again
 * then (not counted); releases go to every node, kept for each node that
 * is down.
 *
 * A lease's end only ever moves later until the lease is released, so the
 * end the lock table counts from any reply (the call's send time plus the
 * TTL, less the drift of several servers' clocks) is never after the end
 * in Redis, whatever order requests run in.
 *
 * Everything issued in one loop iteration leaves in one write, so the
 * renewals that the lock table sends at one tick form one pipeline. A
 * node's subscriber connection listens to the topology's channel of
 * releases, where the release script publishes each key it frees while the
 * "w:" mark says a daemon waits; a message wakes the lock table's queue of
 * that key. Messages can be lost, so every BUSY answer also arms a retry at
 * the holder's remaining lease (capped, with jitter).
 *
 * Local delegation (rdeleg.c): an acquire or transfer of an exclusive lease
 * with local waiters queued behind reserves a block of fences, and the
 * lease goes from one local holder to the next without Redis until they
 * are used; with lease_cache_ms a released delegation is kept that long for
 * a local LOCK of the key.
 *
 * Fairness between daemons is this backend's own policy. The lock table
 * hands an exclusive lease from one local holder to the next local waiter
 * (transfer) and says how many handoffs of the key came in a row; once that
 * run reaches backend.handoff_limit while the "w:" mark says another daemon
 * waits, the transfer script that takes the next block of fences releases
 * the lease instead (and publishes the release, and deletes the mark) and
 * the transfer answers BE_BUSY: this daemon's queue of the key retries in
 * about RD_YIELD_RETRY_MS and ignores release messages for the key for
 * RD_YIELD_QUIET_MS, so that the daemon that waits, woken by the same
 * message, can take the key first.
 *
 * A reply later than command_timeout_ms drops the connection, which fails
 * every call in flight. While disconnected, calls fail at once (from the
 * loop), except releases, which the node keeps and sends when the
 * connection is back; so is a release that Redis answered with an error
 * (LOADING, BUSY, READONLY). A kept release is dropped once its lease has
 * ended by itself.
 *
 * It owns its nodes and what is in Redis under the prefix. It must not
 * block the event loop, must not complete an operation from inside the call
 * that asked for it, and knows nothing of the lock table's state but what
 * each call says.
 */
#include "rd.h"
#include "be_redis_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "clock.h"
#include "conf.h"
#include "log.h"
#include "rnode.h"
#include "tls.h"
#include "xmalloc.h"

#define RD_VOTES_ON_STACK 16		/* nodes whose answers are counted without
					 * an allocation */

/* ---- messages ------------------------------------------------------------ */

/* "host:port" of host and port (IPv6 in brackets) into buf. */
static void
rd_addr(char *buf, size_t len, const char *host, int port)
{
	snprintf(buf, len, strchr(host, ':') != NULL ? "[%s]:%d" : "%s:%d", host, port);
}

void
rd_addr_list(const struct rd *r, char *buf, size_t len)
{
	size_t n = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < r->nnodes && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", i > 0 ? "," : "",
		    r->nodes[i]->addr);
}

void
rd_addr_connected(const struct rd *r, char *buf, size_t len)
{
	struct rnode_stats st;
	rnode_stats(r->nodes[0]->node, &st);
	snprintf(buf, len, "%s", st.address);
}

const char *
rd_node_problem(const struct rd_node *nd, const char *address, char *buf, size_t len)
{
	uint64_t since, now = clock_ms();
	const char *p = rnode_problem(nd->node, &since);
	if (p == NULL)
		return NULL;
	if (since != 0 && now - since >= 1000)
		snprintf(buf, len, "redis %s: %s, for %llu s", address, p,
		    (unsigned long long)((now - since) / 1000));
	else
		snprintf(buf, len, "redis %s: %s", address, p);
	return buf;
}

const char *
rd_recent_failure(const struct rd *r, const char *prefix, char *buf, size_t len)
{
	if (r->failure_at == 0 || clock_ms() - r->failure_at > RD_FAILURE_SHOWN_MS)
		return NULL;
	snprintf(buf, len, "%s%s", prefix, r->failure);
	return buf;
}

void
rd_failed_plain(const struct rd *r, const struct rd_node *nd, const redisReply *rep,
    const char *why, char *buf, size_t len)
{
	(void)r;
	(void)rep;
	snprintf(buf, len, "redis %.60s: %.130s", nd->addr, why);
}

const char *
rd_channel_plain(const struct rd *r, const char *key, size_t keylen, bool wanted)
{
	(void)key;
	(void)keylen;
	return wanted ? r->wanted : r->channel;
}

/* Whether the backend is refused for its settings (rnode_refused), so
 * that waiting cannot help: more nodes refused than a quorum can do
 * without (redlock), else any (the nodes share their settings). */
bool
rd_refused(const struct rd *r)
{
	size_t n = 0;
	if (r->destroying)
		return false;	/* its nodes are going */
	if (r->topo->refused != NULL && r->topo->refused(r))
		return true;
	for (size_t i = 0; i < r->nnodes; i++)
		n += r->nodes[i]->node != NULL && rnode_refused(r->nodes[i]->node);
	if (n == 0)
		return false;
	return !r->topo->count_answers || n > r->nnodes - r->quorum;
}

/* Why the backend fails now, for a reply: a few words that hold no secret,
 * in buf; NULL when nothing is known to be wrong. */
const char *
rd_problem(struct backend *be, char *buf, size_t len)
{
	struct rd *r = be->priv;
	return r->topo->problem(r, buf, len);
}

/* ---- the life of an operation -------------------------------------------- */

/* Free op (never sent, or done). */
static void
rd_op_free(struct rd_op *op)
{
	if (op->ev_late != NULL)
		event_free(op->ev_late);
	if (op->ev_again != NULL)
		event_free(op->ev_again);
	free(op->forced_by);
	free(op);	/* its calls, key and arguments are in the same block */
}

/* Free op once its caller was told and every call of it answered (the
 * calls use its arguments until then). */
static void
rd_op_done(struct rd_op *op)
{
	if (op->decided && op->pending == 0)
		rd_op_free(op);
}

/* Tell op's caller, once; a BE_OK lease lasts rquorum_valid of its TTL
 * from the call (the scripts ran after it and never shorten a lease). op
 * stays until rd_op_done frees it. */
void
rd_op_tell(struct rd_op *op, enum be_status st, uint64_t fence, const char *why)
{
	struct rd *r = op->r;
	struct be_reply rep = { .status = st, .fence = fence,
	    .valid_ms = st == BE_OK ? rquorum_valid(op->ttl_ms, r->drift, r->drift_ms) : 0,
	    .why = why, .lasting = st == BE_ERROR && rd_refused(r),
	    .forced = st == BE_NOTOWNER && op->forced_by != NULL };
	if (op->script == RS_FORCE) {
		rep.fence = 0;
		rep.broken = (unsigned)fence;
	}
	assert(!op->decided);
	op->decided = true;
	op->told = st;
	/* the node timeout stays armed while calls are out: it counts the
	 * nodes that answer late */
	if (st == BE_ERROR) {
		r->nerrors++;
		if (why != NULL) {
			snprintf(r->failure, sizeof(r->failure), "%s", why);
			r->failure_at = clock_ms();
		}
	}
	if (op->cb != NULL)
		op->cb(op->arg, &rep);
}

void
rd_op_complete(struct rd_op *op, enum be_status st, uint64_t fence, const char *why)
{
	rd_op_tell(op, st, fence, why);
	rd_op_done(op);
}

/* Tell a call that failed before it was sent, from the loop. */
static void
on_failed(struct later_item *it)
{
	struct rd_op *op = (struct rd_op *)(void *)((char *)it - offsetof(struct rd_op, failing));
	char why[200];
	const char *p = op->r->destroying ? "the backend is shutting down" :
	    rd_problem(op->r->be, why, sizeof(why));
	rd_op_complete(op, op->failed, 0, p != NULL ? p : "redis is not connected");
}

void
rd_op_fail_later(struct rd_op *op, enum be_status st)
{
	op->failed = st;
	later_add(op->r->later, &op->failing, on_failed);
}

/*
 * A new call of script with nkeys keys named after l's key (each key kind a
 * letter: 'l' lock, 'f' fence, 'w' mark), then ARGV: member (the lease the
 * call takes or releases, kept as op->member), then the string arguments
 * args (NULL-terminated; rscript_key for the key itself). The caller owns the
 * call until it is sent or kept; rd_op_free frees it.
 */
struct rd_op *
rd_op_new(struct rd *r, enum rscript script, const struct be_lock *l, const char *member,
    const char *keykinds, const char *const *args, be_cb *cb, void *arg)
{
	const char *all[RSCRIPT_ARGS + 1];
	size_t nargs = 0, need;
	bool tags = r->topo->hash_tags;
	all[nargs++] = member;
	for (size_t i = 0; args[i] != NULL && nargs < RSCRIPT_ARGS; i++)
		all[nargs++] = args[i];
	all[nargs] = NULL;
	need = rscript_size(strlen(r->set->key_prefix), l->keylen, tags, keykinds, all,
	    l->valuelen);
	struct rd_op *op = xmalloc(sizeof(*op) + r->ncalls * sizeof(struct rd_call) +
	    l->keylen + need);
	memset(op, 0, sizeof(*op) + r->ncalls * sizeof(struct rd_call));
	op->calls = (struct rd_call *)(void *)(op + 1);
	for (size_t i = 0; i < r->ncalls; i++)
		op->calls[i].op = op;
	op->buf = (char *)(op->calls + r->ncalls);
	op->r = r;
	op->script = script;
	op->cb = cb;
	op->arg = arg;
	op->key = op->buf;
	memcpy(op->key, l->key, l->keylen);
	op->keylen = l->keylen;
	op->ttl_ms = l->ttl_ms;
	op->recorded = l->value != NULL && (script == RS_ACQUIRE || script == RS_TRANSFER);
	op->member = rscript_build(&op->args, op->buf + l->keylen, r->set->key_prefix, op->key,
	    op->keylen, tags, keykinds, all, l->value, l->valuelen);
	return op;
}

/* A new call of the release script for member, a lease of l's key. */
static struct rd_op *
rd_release_new(struct rd *r, const struct be_lock *l, const char *member, be_cb *cb, void *arg)
{
	/* the message is the key itself */
	const char *args[] = { r->topo->channel(r, l->key, l->keylen, false), rscript_key, NULL };
	return rd_op_new(r, RS_RELEASE, l, member, "lwoi", args, cb, arg);
}

/* ---- retries and yields -------------------------------------------------- */

/* The list a retry is on. */
static struct rd_retry_list *
retry_list(struct rd *r, const struct rd_retry *rt)
{
	return rt->quiet_until != 0 ? &r->yields : &r->retries;
}

/* Take a retry off its list and free it. */
static void
retry_free(struct rd *r, struct rd_retry *rt)
{
	TAILQ_REMOVE(retry_list(r, rt), rt, entry);
	event_free(rt->ev);
	free(rt->key);
	free(rt);
}

/* Wake the lock table's queue of key after a BUSY, in delay ms. */
static void
on_retry(evutil_socket_t fd, short what, void *arg)
{
	struct rd_retry *rt = arg;
	struct rd *r = rt->r;
	(void)fd;
	(void)what;
	r->nretries++;
	r->be->up.wakeup(r->be->up.arg, rt->key, rt->keylen);
	retry_free(r, rt);
}

/* The wait before a retry for a lease with pttl ms left: that (at most
 * RD_RETRY_CAP_MS), RD_RETRY_MIN_MS when the lease ends now or is gone (0 or
 * -2), the cap for a key that does not expire (-1). */
static uint64_t
retry_delay(long long pttl)
{
	return pttl == 0 || pttl == -2 ? RD_RETRY_MIN_MS : pttl > 0 &&
	    pttl < RD_RETRY_CAP_MS ? (uint64_t)pttl : RD_RETRY_CAP_MS;
}

/* Wake the lock table's queue of key after retry_delay(pttl), with jitter.
 * quiet_ms > 0 (a yield): release messages for key are ignored that long. */
static void
rd_retry_arm(struct rd *r, const char *key, size_t keylen, long long pttl, uint64_t quiet_ms)
{
	uint64_t delay = retry_delay(pttl);
	delay += arc4random_uniform((uint32_t)(delay / 10 + 5));	/* jitter */
	struct rd_retry *rt = xcalloc(1, sizeof(*rt));
	rt->r = r;
	rt->ev = evtimer_new(r->be->base, on_retry, rt);
	rt->key = xmemdup(key, keylen);
	rt->keylen = keylen;
	rt->quiet_until = quiet_ms > 0 ? clock_ms() + quiet_ms : 0;
	TAILQ_INSERT_TAIL(retry_list(r, rt), rt, entry);
	struct timeval tv = clock_tv(delay);
	evtimer_add(rt->ev, &tv);
}

/* Whether this daemon gave way on key within RD_YIELD_QUIET_MS: release
 * messages for it are not passed on then. */
static bool
yield_quiet(struct rd *r, const char *key, size_t keylen)
{
	struct rd_retry *rt;
	uint64_t now = clock_ms();
	TAILQ_FOREACH(rt, &r->yields, entry)
		if (now < rt->quiet_until && rt->keylen == keylen &&
		    memcmp(rt->key, key, keylen) == 0)
			return true;
	return false;
}

/* ---- answers ------------------------------------------------------------- */

/* An integer element of a script's array reply, or def. */
static long long
reply_int(const redisReply *rep, size_t i, long long def)
{
	if (rep->type != REDIS_REPLY_ARRAY || i >= rep->elements ||
	    rep->element[i]->type != REDIS_REPLY_INTEGER)
		return def;
	return rep->element[i]->integer;
}

/* The fence of a script's reply that granted a lease, {1, fence}: at
 * least 1, else 0 (never from Redis's scripts: a reply to distrust). */
static uint64_t
reply_fence(const redisReply *rep)
{
	long long f = reply_int(rep, 1, 0);
	return f >= 1 ? (uint64_t)f : 0;
}

/* What a node answered to a call of op: its rq_answer (and c's fence or
 * busy time); why, a failure's reason. */
static enum rq_answer
answer_of(struct rd_op *op, struct rd_call *c, const redisReply *rep, const char **why)
{
	long long v;
	if (rep == NULL) {
		c->maybe = true;	/* it may have run */
		return RQ_FAILED;
	}
	if (rep->type == REDIS_REPLY_ERROR) {
		*why = "redis answered an error";
		return RQ_FAILED;
	}
	*why = "unexpected reply from redis";
	switch (op->script) {
	case RS_ACQUIRE:
	case RS_TRANSFER:
		v = reply_int(rep, 0, -2);
		if (v == 1 && (c->fence = reply_fence(rep)) == 0) {
			/* taken, but with no fence to grant it with: give it back */
			c->maybe = true;
			return RQ_FAILED;
		}
		if (v == 1) {
			c->observed = reply_int(rep, 2, 0) == 1;
			return RQ_OK;
		}
		if (op->script == RS_ACQUIRE && v == 0) {
			c->busy_ms = reply_int(rep, 1, RD_RETRY_CAP_MS);
			return RQ_BUSY;
		}
		if (op->script == RS_ACQUIRE && v == -1)
			return RQ_KIND;
		if (op->script == RS_TRANSFER && v == 2)
			return RQ_BUSY;
		if (op->script == RS_TRANSFER && v == 0)
			return RQ_NOTOWNER;
		return RQ_FAILED;
	case RS_FORCE:
		if (rep->type != REDIS_REPLY_INTEGER || rep->integer < 0)
			return RQ_FAILED;
		c->fence = (uint64_t)rep->integer;	/* the leases it broke */
		return RQ_OK;
	case RS_RENEW:
		if (rep->type == REDIS_REPLY_ARRAY && reply_int(rep, 0, -2) == 3) {
			/* broken by UNLOCK FORCE: {3, who broke it} */
			const redisReply *by = rep->elements > 1 ? rep->element[1] : NULL;
			bool named = by != NULL && by->type == REDIS_REPLY_STRING && by->len > 0;
			if (op->forced_by == NULL && named)
				op->forced_by = xasprintf("forced by %.*s", (int)by->len, by->str);
			else if (op->forced_by == NULL)
				op->forced_by = xstrdup("forced by UNLOCK FORCE through another daemon");
			return RQ_NOTOWNER;
		}
		/* fall through */
	case RS_RELEASE:
	case RS_PROCLAIM:
		if (rep->type != REDIS_REPLY_INTEGER)
			return RQ_FAILED;
		if (rep->integer == 1)
			return RQ_OK;
		if (rep->integer == 0)
			return RQ_NOTOWNER;
		if (rep->integer == 2 && op->script == RS_RENEW)
			return RQ_BROUGHT;
		return RQ_FAILED;
	default:
		return RQ_FAILED;
	}
}

/* ---- releases ------------------------------------------------------------- */

void
rd_keep_on(struct rd *r, const struct rd_op *op, size_t i)
{
	struct rd_node *nd = r->topo->home(r, op, i);
	if (nd == NULL)
		return;	/* no server known; the lease ends at its TTL */
	rnode_keep(nd->node, RS_RELEASE, op->args.argc, op->args.argv,
	    op->args.argvlen, clock_ms() + op->ttl_ms);
}

/* Keep release op for every node; op (never sent) is freed. */
static void
rd_keep_release(struct rd *r, struct rd_op *op)
{
	for (size_t i = 0; i < r->ncalls; i++)
		rd_keep_on(r, op, i);
	rd_op_free(op);
}

/*
 * Release member, a lease of op's key, on the nodes where op may have taken
 * it (granted, not answered, or failed with no reply), or on every node
 * (all): op was not granted, its grant cannot be used, or member's lease is
 * over. Kept until each node answers; releasing what was never taken is a
 * harmless no-op in the script.
 */
static void
rd_release_taken(struct rd *r, const struct rd_op *op, const char *member, bool all)
{
	struct be_lock l = { .key = op->key, .keylen = op->keylen, .ttl_ms = op->ttl_ms };
	struct rd_op *rel = NULL;
	if (r->destroying)
		return;	/* leases end at their TTL */
	for (size_t i = 0; i < r->ncalls; i++) {
		const struct rd_call *c = &op->calls[i];
		if (!all && c->answer != RQ_OK && c->answer != RQ_PENDING &&
		    !(c->answer == RQ_FAILED && c->maybe))
			continue;
		if (rel == NULL)
			rel = rd_release_new(r, &l, member, NULL, NULL);
		rd_keep_on(r, rel, i);
	}
	if (rel != NULL)
		rd_op_free(rel);
}

/* op (an acquire or a transfer) holds its lease on a quorum with its fence,
 * written back where needed: the fences it reserved are delegated, and its
 * caller is told. */
static void
rd_granted(struct rd *r, struct rd_op *op)
{
	/* a key that some daemon observes goes through Redis at each grant,
	 * so that its observers are told: no fences are delegated */
	for (size_t i = 0; i < r->ncalls; i++)
		if (op->calls[i].answer == RQ_OK && op->calls[i].observed)
			op->fences = 1;
	if (op->script == RS_TRANSFER || op->fences > 1)
		deleg_granted(r, op, op->fence);
	rd_op_tell(op, BE_OK, op->fence, NULL);
}

static void rd_decide(struct rd *r, struct rd_op *op);
static void rd_raised(struct rd *r, struct rd_op *op, struct rd_call *c, const redisReply *rep);

/* ---- a quorum of several nodes ------------------------------------------ */

uint64_t
rd_kept_out(const struct rd *r, const struct rd_node *nd, uint64_t now)
{
	uint64_t up = 0;
	bool known;
	if (r->set->restart_keepout_ms <= 0)
		return 0;
	known = rnode_uptime(nd->node, now, &up);
	return rquorum_keepout((uint64_t)r->set->restart_keepout_ms, known, up);
}

/* The node timeout of op has passed: what is not answered counts as
 * failed (and its node's timeouts). */
static void
on_late(evutil_socket_t fd, short what, void *arg)
{
	struct rd_op *op = arg;
	struct rd *r = op->r;
	(void)fd;
	(void)what;
	op->late = true;
	for (size_t i = 0; i < r->ncalls; i++) {
		struct rd_node *nd = op->calls[i].node;
		if ((op->calls[i].answer != RQ_PENDING && !op->calls[i].raising) || nd == NULL)
			continue;
		nd->ntimeouts++;
		if (!nd->late_logged)
			log_warn("%s node %s: no answer within %llu ms (backend.node_timeout_ms): "
			    "counted as failed until it answers in time", r->topo->name, nd->addr,
			    (unsigned long long)rquorum_node_timeout(op->ttl_ms,
			    r->set->node_timeout_ms, r->set->command_timeout_ms));
		nd->late_logged = true;
	}
	if (op->decided)
		return;
	if (op->script == RS_LOOK)
		rd_look_late(r, op);
	else if (op->script == RS_WHO)
		rd_who_late(r, op);
	else if (op->raising)
		rd_raised(r, op, NULL, NULL);
	else
		rd_decide(r, op);
	rd_op_done(op);
}

void
rd_late_arm(struct rd *r, struct rd_op *op)
{
	struct timeval tv = clock_tv(rquorum_node_timeout(op->ttl_ms, r->set->node_timeout_ms,
	    r->set->command_timeout_ms));
	if (op->ev_late == NULL)
		op->ev_late = evtimer_new(r->be->base, on_late, op);
	op->late = false;
	evtimer_add(op->ev_late, &tv);
}

/* A node answered in time: its lateness is over (logged). */
static void
rd_in_time(struct rd_node *nd)
{
	if (!nd->late_logged)
		return;
	log_info("%s node %s answers in time again", nd->r->topo->name, nd->addr);
	nd->late_logged = false;
}

/* A node came up: log it when it is kept out. */
static void
rd_log_kept_out(const struct rd *r, const struct rd_node *nd)
{
	uint64_t out = rd_kept_out(r, nd, clock_ms());
	if (out == UINT64_MAX)
		log_warn("%s node %s: kept out of every quorum: when it started cannot be "
		    "read (backend.restart_keepout_ms needs INFO server)", r->topo->name, nd->addr);
	else if (out > 0)
		log_warn("%s node %s: started less than backend.restart_keepout_ms ago: "
		    "counted in no quorum for %llu ms more", r->topo->name, nd->addr,
		    (unsigned long long)out);
}

/* The write-back of a granted op's fence: done once a quorum's counters are
 * at its last fence (granted, else answered BE_ERROR, and the lease given
 * back, once that can no longer happen). */
static void
raise_check(struct rd *r, struct rd_op *op)
{
	size_t inflight = 0;
	if (op->raise_need == 0) {
		rd_granted(r, op);
		return;
	}
	for (size_t i = 0; i < r->ncalls && !op->late; i++)
		inflight += op->calls[i].raising;
	if (inflight >= op->raise_need)
		return;
	rd_release_taken(r, op, op->member, false);
	snprintf(op->why, sizeof(op->why), "%s: the fence was not written back to %zu "
	    "of %zu nodes in time", r->topo->name, r->quorum, r->ncalls);
	rd_op_tell(op, BE_ERROR, 0, op->why);
}

/* Send op's write-back to call c's node (counted in op->pending). */
static void
raise_on(struct rd *r, struct rd_op *op, struct rd_call *c)
{
	if (rnode_eval(c->node->node, RS_RAISE, (int)op->raise_argc, op->raise_argv,
	    op->raise_argvlen, rd_on_reply, c) == 0) {
		c->raising = true;
		op->pending++;
		c->node->ncalls++;
		r->ncommands++;
	}
}

/*
 * A quorum granted op (an acquire or a transfer). Its fence is the largest
 * that a node of the quorum proposed; a node that proposed less has a
 * counter below the fences reserved: they are written back to it (the
 * raise script: the counter becomes at least the last of them), and op is
 * granted once a quorum's counters are there, so that any later quorum,
 * which shares a node with it, proposes more (docs/design.md, fences). One
 * node: its fence.
 */
static void
rd_quorum_granted(struct rd *r, struct rd_op *op, uint64_t fence)
{
	size_t at = 0;
	bool record = r->ncalls > 1 && op->recorded;
	op->fence = fence;
	for (size_t i = 0; i < r->ncalls; i++) {
		at += op->calls[i].answer == RQ_OK && op->calls[i].fence == fence;
		record = record || (r->ncalls > 1 && op->calls[i].answer == RQ_OK &&
		    op->calls[i].observed);
	}
	op->raise_need = at >= r->quorum ? 0 : r->quorum - at;
	if (op->raise_need == 0 && !record) {
		rd_granted(r, op);
		return;
	}
	op->raising = true;
	snprintf(op->raise, sizeof(op->raise), "%llu",
	    (unsigned long long)(fence + (op->fences > 0 ? op->fences : 1) - 1));
	op->raise_argv[0] = "1";
	op->raise_argvlen[0] = 1;
	op->raise_argv[1] = op->args.argv[2];	/* the fence counter: keys "lfwei" */
	op->raise_argvlen[1] = op->args.argvlen[2];
	op->raise_argv[2] = op->raise;
	op->raise_argvlen[2] = strlen(op->raise);
	op->raise_argc = 3;
	if (record) {
		/* redlock, a grant observers read: each node of it that proposed
		 * less (or grants late) records the quorum's fence as its term */
		snprintf(op->term, sizeof(op->term), "%llu", (unsigned long long)fence);
		const char *v[] = { "2", op->args.argv[2], op->args.argv[4],	/* "lfwei" */
		    op->raise, op->member, op->term };
		size_t vl[] = { 1, op->args.argvlen[2], op->args.argvlen[4], strlen(op->raise),
		    strlen(op->member), strlen(op->term) };
		memcpy(op->raise_argv, v, sizeof(v));
		memcpy(op->raise_argvlen, vl, sizeof(vl));
		op->raise_argc = 6;
	}
	for (size_t i = 0; i < r->ncalls; i++)
		if (op->calls[i].answer == RQ_OK && op->calls[i].fence < fence)
			raise_on(r, op, &op->calls[i]);
	rd_late_arm(r, op);
	raise_check(r, op);
}

/* The answer to a write-back of op's fence (call c; NULL: the node timeout
 * passed). */
static void
rd_raised(struct rd *r, struct rd_op *op, struct rd_call *c, const redisReply *rep)
{
	if (c != NULL) {
		c->raising = false;
		if (rep != NULL && rep->type == REDIS_REPLY_INTEGER)
			op->raise_need -= op->raise_need > 0;
		else
			c->node->nfailures++;
	}
	if (!op->decided)
		raise_check(r, op);
}

/* ---- deciding ------------------------------------------------------------- */

/* A quorum that held op's lease all along renewed it: call i, whose node had
 * lost or missed it and was given it back (RQ_BROUGHT), counts from now on
 * (the confirm script, kept until it answers). */
static void
confirm_on(const struct rd_op *op, size_t i)
{
	/* numkeys, the lock's key, the member (the renewal's keys are "li") */
	const char *argv[] = { "1", op->args.argv[1], op->member };
	size_t argvlen[] = { 1, op->args.argvlen[1], strlen(op->member) };
	rnode_keep(op->calls[i].node->node, RS_CONFIRM, 3, argv, argvlen,
	    clock_ms() + op->ttl_ms);
}

/* confirm_on each node that answered RQ_BROUGHT. (A later one is confirmed
 * when its answer comes.) */
static void
confirm_brought(struct rd *r, const struct rd_op *op)
{
	for (size_t i = 0; i < r->ncalls; i++)
		if (op->calls[i].answer == RQ_BROUGHT)
			confirm_on(op, i);
}

/* The pttl of the busy answer that wakes op's queue first (rd_retry_arm). */
static long long
busy_pttl(const struct rd *r, const struct rd_op *op)
{
	long long best = RD_RETRY_CAP_MS;
	uint64_t best_delay = UINT64_MAX;
	for (size_t i = 0; i < r->ncalls; i++) {
		const struct rd_call *c = &op->calls[i];
		uint64_t d;
		if (c->answer != RQ_BUSY)
			continue;
		d = retry_delay(c->busy_ms);
		if (d < best_delay) {
			best_delay = d;
			best = c->busy_ms;
		}
	}
	return best;
}


/*
 * Decide op from its calls' answers, once that can be done (rquorum_decide):
 * granted (or renewed, released) when a quorum said so, else once a quorum
 * can no longer say so. A lease op may have taken where it was not granted
 * is released.
 */
/* The verdict of op's answers so far, its counts into *t. */
static enum rq_verdict
verdict(struct rd *r, const struct rd_op *op, struct rq_tally *t)
{
	struct rq_vote few[RD_VOTES_ON_STACK];
	struct rq_vote *votes = r->ncalls <= RD_VOTES_ON_STACK ? few :
	    xcalloc(r->ncalls, sizeof(*votes));
	enum rq_verdict v;
	uint64_t now = clock_ms();
	for (size_t i = 0; i < r->ncalls; i++) {
		const struct rd_call *c = &op->calls[i];
		votes[i] = (struct rq_vote){ .answer = c->answer, .fence = c->fence,
		    .kept_out = c->answer == RQ_OK && rd_kept_out(r, c->node, now) > 0 };
	}
	v = rquorum_decide(op->script, votes, r->ncalls, op->late, t);
	if (votes != few)
		free(votes);
	return v;
}

static void
rd_decide(struct rd *r, struct rd_op *op)
{
	struct rq_tally t;
	enum rq_verdict v = verdict(r, op, &t);
	switch (v) {
	case RV_UNDECIDED:
		return;
	case RV_GRANTED:
		/* transfer: from's lease went to op->member: its delegation is over */
		if (op->script == RS_TRANSFER)
			deleg_forget(r, op->key, op->keylen);
		rd_quorum_granted(r, op, t.fence);
		return;
	case RV_DONE:
		if (op->script == RS_RENEW) {
			deleg_renewed(r, op, BE_OK);
			confirm_brought(r, op);
		}
		rd_op_tell(op, BE_OK, op->script == RS_FORCE ? t.fence : 0, NULL);
		return;
	default:
		break;
	}
	if (op->why[0] == '\0')
		snprintf(op->why, sizeof(op->why), "no reply from redis");
	if (r->topo->count_answers && t.n[RQ_FAILED] > t.minority) {
		/* say how many answered, and the first failure */
		char why[sizeof(op->why)];
		snprintf(why, sizeof(why), "%s", op->why);
		snprintf(op->why, sizeof(op->why), "%s: %zu of %zu nodes answered, %zu "
		    "needed (%.120s)", r->topo->name, r->ncalls - t.n[RQ_FAILED], r->ncalls,
		    t.quorum, why);
	}
	if (op->script == RS_ACQUIRE || op->script == RS_TRANSFER)
		rd_release_taken(r, op, op->member, false);
	switch (v) {
	case RV_KIND:
		rd_op_tell(op, BE_ERROR, 0, "the key is in use with another kind "
		    "(semaphore or lock) by another daemon");
		break;
	case RV_BUSY:
		rd_retry_arm(r, op->key, op->keylen, busy_pttl(r, op), 0);
		rd_op_tell(op, BE_BUSY, 0, NULL);
		break;
	case RV_YIELDED:
	case RV_ENDED:
		/* from's lease was released or had ended where it counts: its
		 * delegation is over, and what is left of it elsewhere goes */
		deleg_forget(r, op->key, op->keylen);
		if (r->ncalls > 1 && op->from != NULL)
			rd_release_taken(r, op, op->from, true);
		if (v == RV_YIELDED) {
			/* from was released for the daemon that waits; this one's
			 * queue tries again after it had its chance */
			rd_retry_arm(r, op->key, op->keylen, RD_YIELD_RETRY_MS, RD_YIELD_QUIET_MS);
			rd_op_tell(op, BE_BUSY, 0, NULL);
		} else {
			rd_op_tell(op, BE_NOTOWNER, 0, "the lease had ended in redis");
		}
		break;
	case RV_NOTOWNER:
		if (op->script == RS_RENEW)
			deleg_renewed(r, op, BE_NOTOWNER);
		r->nnotowner++;
		if (op->forced_by != NULL) {
			rd_op_tell(op, BE_NOTOWNER, 0, op->forced_by);
			break;
		}
		rd_op_tell(op, BE_NOTOWNER, 0, "redis holds the lease for another owner, or it ended");
		break;
	default:
		/* a transfer that failed: the lock table releases from */
		rd_op_tell(op, BE_ERROR, 0, op->why);
		break;
	}
}

/* A node's reply to its call of an op (rep NULL: none will come, why says
 * why), or to the write-back of the op's fence. */
void
rd_on_reply(void *arg, const redisReply *rep, const char *why)
{
	struct rd_call *c = arg;
	struct rd_op *op = c->op;
	struct rd *r = op->r;
	struct rd_node *nd;
	enum rq_answer a;
	op->pending--;
	if (c->raising) {
		rd_raised(r, op, c, rep);
		rd_op_done(op);
		return;
	}
	if (op->script == RS_RELEASE)
		r->releases_inflight--;
	if (r->topo->redirected != NULL && rep != NULL && rep->type == REDIS_REPLY_ERROR &&
	    r->topo->redirected(r, op, rep)) {
		rd_op_done(op);
		return;
	}
	if (op->script == RS_LOOK) {
		rd_looked(r, c, rep, why);
		rd_op_done(op);
		return;
	}
	if (op->script == RS_WHO) {
		rd_who_reply(r, c, rep, why);
		rd_op_done(op);
		return;
	}
	nd = c->node;
	if (!op->late && rep != NULL)
		rd_in_time(nd);
	a = answer_of(op, c, rep, &why);
	if (a == RQ_FAILED) {
		nd->nfailures++;
		if (op->why[0] == '\0')
			r->topo->failed(r, nd, rep, why != NULL ? why : "no reply from redis",
			    op->why, sizeof(op->why));
		/* a release: unknown whether it ran, or it did not (LOADING,
		 * BUSY, READONLY...): sent again later (a second is harmless) */
		if (op->script == RS_RELEASE && r->be->priv != NULL && !r->destroying)
			rd_keep_on(r, op, (size_t)(c - op->calls));
	}
	c->answer = (unsigned char)a;
	if (a == RQ_OK && op->raise_argc > 3 && c->fence != op->fence && !r->destroying &&
	    (op->raising || (op->decided && op->told == BE_OK)))
		raise_on(r, op, c);	/* granted before: its record takes the term */
	if (op->decided && op->told == BE_OK && op->script == RS_RENEW && a == RQ_BROUGHT &&
	    !r->destroying)
		confirm_on(op, (size_t)(c - op->calls));	/* renewed by a quorum before */
	if (!op->decided && !op->raising)	/* a quorum granted it already */
		rd_decide(r, op);
	rd_op_done(op);
}

bool
rd_read_answered(struct rd *r, struct rd_call *c, const redisReply *rep, const char *why,
    bool ok)
{
	struct rd_op *op = c->op;
	if (ok) {
		c->answer = RQ_OK;
	} else {
		c->answer = RQ_FAILED;
		c->node->nfailures++;
		if (op->why[0] == '\0' && (rep == NULL || rep->type == REDIS_REPLY_ERROR))
			r->topo->failed(r, c->node, rep, why != NULL ? why : "no reply from redis",
			    op->why, sizeof(op->why));
		else if (op->why[0] == '\0')
			snprintf(op->why, sizeof(op->why), "unexpected reply from redis");
	}
	for (size_t i = 0; i < r->ncalls; i++)
		if (op->calls[i].answer == RQ_PENDING)
			return false;
	return true;
}

/* ---- sending ------------------------------------------------------------- */

int
rd_call_send(struct rd *r, struct rd_op *op, size_t i, struct rd_node *nd)
{
	struct rd_call *c = &op->calls[i];
	/* a lease taken, renewed or handed over must reach the replicas asked
	 * for before it counts; a release or a read of the holders need not */
	if ((op->script == RS_RELEASE || op->script == RS_WHO ? rnode_eval :
	    rnode_eval_acked)(nd->node, op->script,
	    op->args.argc, op->args.argv, op->args.argvlen, rd_on_reply, c) < 0)
		return -1;
	c->node = nd;
	c->answer = RQ_PENDING;
	op->pending++;
	nd->ncalls++;
	r->ncommands++;
	if (op->script == RS_RELEASE)
		r->releases_inflight++;
	return 0;
}

void
rd_send(struct rd *r, struct rd_op *op)
{
	op->sent_ms = clock_ms();
	if (!r->topo->ready(r, op)) {
		if (op->script == RS_RELEASE && !r->destroying) {
			for (size_t i = 0; i < r->ncalls; i++)
				rd_keep_on(r, op, i);
		}
		rd_op_fail_later(op, BE_ERROR);
		return;
	}
	r->topo->send(r, op);
}

/* Give back member, a lease of l's key that nobody here holds (rdeleg's
 * r->give_back): released in Redis, or kept for when it can be sent. */
static void
give_back(struct rd *r, const struct be_lock *l, const char *member)
{
	struct rd_op *op = rd_release_new(r, l, member, NULL, NULL);
	if (r->topo->ready(r, op))
		rd_send(r, op);
	else if (!r->destroying)
		rd_keep_release(r, op);	/* sent when the connection is back */
	else
		rd_op_free(op);
}

/* ---- the operations --------------------------------------------------------- */

/* Take l's lease: from the cache when this daemon keeps it and can hand it
 * to l (deleg_can_hand), else with the acquire script, if the key's leases
 * in Redis allow it; an exclusive lease with waiters queued behind (or any
 * while leases are cached) reserves fences for later grants. */
void
rd_acquire(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct rd *r = be->priv;
	char kind[16], member[RSCRIPT_MEMBER_MAX], ttl[24], limit[16], mark[16], fences[16];
	unsigned n = deleg_fences(r, l);
	struct rd_deleg *d = deleg_find(r, l->key, l->keylen);
	uint64_t now = clock_ms();
	if (d != NULL && d->cache_until != 0 && deleg_can_hand(d, l, now)) {
		r->ncache_hits++;
		deleg_hand(r, d, l, now, cb, arg);
		return;
	}
	/* nothing of the key is held here: a cached lease goes first (its
	 * release runs before the acquire), a delegation left is stale */
	if (d != NULL && d->cache_until != 0)
		deleg_release(r, d);
	else if (d != NULL)
		deleg_drop(r, d);
	rscript_kind(l, kind, sizeof(kind));
	rscript_member(l, member);
	snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)l->ttl_ms);
	snprintf(limit, sizeof(limit), "%u", l->limit);
	snprintf(mark, sizeof(mark), "%d", RD_MARK_MS);
	snprintf(fences, sizeof(fences), "%u", n);
	/* a CAMPAIGN's value last; other grants have none */
	const char *args[] = { ttl, kind, limit, mark, fences,
	    r->topo->channel(r, l->key, l->keylen, true), rscript_key,
	    r->topo->channel(r, l->key, l->keylen, false), l->who != NULL ? l->who : "",
	    l->value != NULL ? rscript_value : NULL, NULL };
	struct rd_op *op = rd_op_new(r, RS_ACQUIRE, l, member, "lfwei", args, cb, arg);
	op->fences = n;
	if (now < r->settle_until) {
		/* the connection is back (a restart, a failover): the daemons'
		 * renewals go first, so that a holder whose lease Redis lost is
		 * told before another daemon can take its key; sent then */
		if (TAILQ_EMPTY(&r->settling)) {
			struct timeval tv = clock_tv(r->settle_until - now);
			evtimer_add(r->ev_settle, &tv);
		}
		TAILQ_INSERT_TAIL(&r->settling, op, settle);
		return;
	}
	rd_send(r, op);
}

/* Drop l's lease and publish the key if a daemon waits for it; kept for
 * later while disconnected. */
void
rd_release(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct rd *r = be->priv;
	char member[RSCRIPT_MEMBER_MAX];
	struct rd_deleg *d = deleg_of(r, l);
	if (d != NULL && deleg_cache_keep(r, d)) {
		deleg_answer(r, cb, arg);
		return;
	}
	deleg_member(r, l, member);
	if (d != NULL)
		deleg_drop(r, d);
	/* while disconnected: failed at once, and released once redis is back */
	rd_send(r, rd_release_new(r, l, member, cb, arg));
}

/* Make l's lease last at least l->ttl_ms from now, if it is still ours. */
void
rd_renew(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct rd *r = be->priv;
	char member[RSCRIPT_MEMBER_MAX], ttl[24], limit[16];
	deleg_member(r, l, member);
	snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)l->ttl_ms);
	snprintf(limit, sizeof(limit), "%u", l->mode == LOCK_SEMAPHORE ? l->limit : 0);
	/* several nodes: one that lost or missed the lease takes it again if
	 * it can (not counted in the quorum) */
	const char *args[] = { ttl, r->ncalls > 1 ? "1" : "0", limit, NULL };
	r->nrenewals++;
	rd_send(r, rd_op_new(r, RS_RENEW, l, member, "lib", args, cb, arg));
}

/* Break every lease of key in Redis (UNLOCK FORCE) but this daemon's (self:
 * its instance id): each holder's daemon is woken by the message, tells its
 * holder and releases the lease. */
void
rd_force(struct backend *be, const char *key, size_t keylen, const char *by,
    const char *self, be_cb *cb, void *arg)
{
	struct rd *r = be->priv;
	struct be_lock l = { .key = key, .keylen = keylen };
	const char *args[] = { r->topo->channel(r, key, keylen, false),
		r->topo->channel(r, key, keylen, true), rscript_key, by, self, NULL };
	struct rd_op *op = rd_op_new(r, RS_FORCE, &l, "", "lbi", args, cb, arg);
	/* the node timeout of several nodes is counted from a TTL: that of a
	 * call that takes no lease is the command timeout */
	op->ttl_ms = (uint64_t)r->set->command_timeout_ms * 10;
	rd_send(r, op);
}

/* Hand from's lease to to: locally while the key's delegation allows
 * (deleg_can_hand), else through the transfer script, which reserves fences
 * for the next local handoffs; unless from->handoffs has reached the handoff
 * limit while another daemon waits: then the script releases from and the
 * reply is BE_BUSY (a yield, see rd_decide). */
void
rd_transfer(struct backend *be, const struct be_lock *from, const struct be_lock *to,
    be_cb *cb, void *arg)
{
	struct rd *r = be->priv;
	char fm[RSCRIPT_MEMBER_MAX], tm[RSCRIPT_MEMBER_MAX], ttl[24], run[16], limit[24], fences[16];
	struct rd_deleg *d = deleg_of(r, from);
	uint64_t now = clock_ms();
	unsigned n = deleg_fences(r, to);
	if (d != NULL && deleg_can_hand(d, to, now)) {
		r->nlocal++;
		deleg_hand(r, d, to, now, cb, arg);
		return;
	}
	deleg_member(r, from, fm);
	rscript_member(to, tm);
	snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)to->ttl_ms);
	snprintf(run, sizeof(run), "%u", from->handoffs);
	snprintf(limit, sizeof(limit), "%lld", r->set->handoff_limit);
	snprintf(fences, sizeof(fences), "%u", n);
	const char *args[] = { fm, ttl, run, limit, r->topo->channel(r, to->key, to->keylen,
	    false), rscript_key, fences, to->who != NULL ? to->who : "",
	    to->value != NULL ? rscript_value : NULL, NULL };
	struct rd_op *op = rd_op_new(r, RS_TRANSFER, to, tm, "lfwei", args, cb, arg);
	op->fences = n;
	op->from = op->args.argv[7];	/* numkeys, 5 keys, to, from */
	rd_send(r, op);
}

/* The daemon shuts down: release the cached leases now and keep no more. */
void
rd_drain(struct backend *be)
{
	struct rd *r = be->priv;
	r->draining = true;
	deleg_release_cached(r);
}

/* ---- the nodes' hooks ---------------------------------------------------- */

/* The connection to a server went down: local grants wait for Redis
 * (deleg_distrust); the topology may look for the server elsewhere. */
static void
on_down(void *arg, const char *why)
{
	struct rd_node *nd = arg;
	struct rd *r = nd->r;
	(void)why;
	deleg_distrust(r);
	if (r->topo->down != NULL)
		r->topo->down(r, nd);
}

/* settle_until has come: send the acquires held back. */
static void
on_settle(evutil_socket_t fd, short what, void *arg)
{
	struct rd *r = arg;
	struct rd_op *op;
	(void)fd;
	(void)what;
	while ((op = TAILQ_FIRST(&r->settling)) != NULL) {
		TAILQ_REMOVE(&r->settling, op, settle);
		rd_send(r, op);
	}
}

void
rd_settle(struct rd *r, uint64_t ms)
{
	r->settle_until = clock_ms() + ms;
}

/* The connection to a server is up (again): it may have restarted without
 * its data, or be a new master after a failover, so every holding is
 * renewed at once, and a lease that did not survive is reported lost now,
 * not at its next renewal. A node kept out after a restart is logged. */
static void
on_up(void *arg)
{
	struct rd_node *nd = arg;
	struct rd *r = nd->r;
	rd_log_kept_out(r, nd);
	if (nd->was_up)
		rd_settle(r, RD_SETTLE_MS);
	nd->was_up = true;
	r->be->up.expire(r->be->up.arg, NULL, 0);
	/* queues that wait for the backend to come back try again now */
	r->be->up.wakeup(r->be->up.arg, NULL, 0);
	rd_watch_all(r);
	if (r->topo->up != NULL)
		r->topo->up(r, nd);
}

/* The subscriptions are up (again): every queue may have missed a
 * message. */
static void
on_subscribed(void *arg)
{
	struct rd *r = ((struct rd_node *)arg)->r;
	r->be->up.wakeup(r->be->up.arg, NULL, 0);
	rd_watch_all(r);
}

/* A message: a key was released (its queue is woken unless this daemon
 * has just given way on it), or another daemon wants a key (a cached lease
 * of it goes). */
static void
on_message(void *arg, const char *channel, size_t channellen, const char *key, size_t keylen)
{
	struct rd *r = ((struct rd_node *)arg)->r;
	/* prefix + "wanted", or a shard channel's prefix + "wanted{" + tag + "}" */
	if ((channellen == r->wantedlen || (channellen > r->wantedlen &&
	    channel[r->wantedlen] == '{')) && memcmp(channel, r->wanted, r->wantedlen) == 0) {
		deleg_wanted(r, key, keylen);
		return;
	}
	r->nmessages++;
	if (!yield_quiet(r, key, keylen)) {
		r->be->up.wakeup(r->be->up.arg, key, keylen);
		/* a lease of it here may have been broken (UNLOCK FORCE through
		 * another daemon): its renewal tells, now */
		r->be->up.expire(r->be->up.arg, key, keylen);
	}
	rd_watch_message(r, key, keylen);
}

const struct rnode_hooks rd_node_hooks = {
	.up = on_up,
	.down = on_down,
	.subscribed = on_subscribed,
	.message = on_message,
};

struct rnode_conf
rd_node_conf(const struct rd *r, const char *what)
{
	const struct rd_settings *c = r->set;
	return (struct rnode_conf){
		.what = what,
		.host = c->address.host,
		.port = c->address.port,
		.username = c->username,
		.password = c->password,
		.tls = r->tls,
		.tls_name = c->tls_server_name,
		.db = c->db,
		.connect_timeout_ms = (uint64_t)c->connect_timeout_ms,
		.command_timeout_ms = (uint64_t)c->command_timeout_ms,
		.scripts = rscript_text,
		.nscripts = RS_COUNT,
		.channels = r->channels,
		.nchannels = 2,
		.check_policy = true,
		.min_replicas_ack = c->min_replicas_ack,
		.replica_ack_timeout_ms = c->replica_ack_timeout_ms,
		.acl = r->acl,
	};
}

void
rd_node_init(struct rd *r, struct rd_node *nd, const struct rnode_conf *nc)
{
	nd->r = r;
	snprintf(nd->host, sizeof(nd->host), "%s", nc->host);
	nd->port = nc->port;
	rd_addr(nd->addr, sizeof(nd->addr), nc->host, nc->port);
	nd->node = rnode_create(r->be->base, r->dns, nc, &rd_node_hooks, nd);
}

void
rd_node_move(struct rd_node *nd, const char *host, int port)
{
	snprintf(nd->host, sizeof(nd->host), "%s", host);
	nd->port = port;
	rd_addr(nd->addr, sizeof(nd->addr), host, port);
	rnode_set_address(nd->node, host, port);
}

void
rd_node_add(struct rd *r, struct rd_node *nd)
{
	r->nodes = xreallocarray(r->nodes, r->nnodes + 1, sizeof(*r->nodes));
	r->nodes[r->nnodes++] = nd;
}

/* ---- TLS ----------------------------------------------------------------- */

struct tls_client *
rd_tls_of(const char *ca, const char *cert, const char *key, const char *what)
{
	char why[512];
	struct tls_client *tls = tls_client_create(ca, cert, key, why, sizeof(why));
	if (tls == NULL)
		log_error("%s: TLS: %s", what, why);
	return tls;
}

/* The TLS context of the backend's files; NULL after logging why. */
static struct tls_client *
rd_tls(const struct rd_settings *c, const char *name)
{
	char what[64];
	snprintf(what, sizeof(what), "%s backend", name);
	return rd_tls_of(c->tls_ca_file, c->tls_cert_file, c->tls_key_file, what);
}

bool
rd_node_tls_on(const struct rd_settings *c, const struct conf_node *n)
{
	return n != NULL && n->tls != CONF_UNSET ? n->tls != 0 : c->tls != 0;
}

bool
rd_node_tls_own(const struct conf_node *n)
{
	return n != NULL && (n->tls_ca_file != NULL || n->tls_cert_file != NULL ||
	    n->tls_key_file != NULL);
}

struct tls_client *
rd_node_tls(const struct rd_settings *c, const struct conf_node *n, const char *name)
{
	char what[320];
	snprintf(what, sizeof(what), "%s node %s", name, n->server);
	return rd_tls_of(n->tls_ca_file != NULL ? n->tls_ca_file : c->tls_ca_file,
	    n->tls_cert_file != NULL ? n->tls_cert_file : c->tls_cert_file,
	    n->tls_key_file != NULL ? n->tls_key_file : c->tls_key_file, what);
}

/* ---- the backend ------------------------------------------------------------ */

struct rd *
rd_init(struct backend *be, struct tls_client *tls, const struct rd_topo *topo)
{
	const struct rd_settings *c = be->settings;
	struct rd *r = xcalloc(1, sizeof(*r));
	r->tls = tls;
	r->be = be;
	r->set = c;
	r->topo = topo;
	r->give_back = give_back;
	TAILQ_INIT(&r->retries);
	TAILQ_INIT(&r->yields);
	TAILQ_INIT(&r->locals);
	TAILQ_INIT(&r->cached);
	r->delegs = hashtab_create(64);
	r->watches = hashtab_create(16);
	r->channellen = (size_t)snprintf(r->channel, sizeof(r->channel), "%sreleased",
	    c->key_prefix);
	r->wantedlen = (size_t)snprintf(r->wanted, sizeof(r->wanted), "%swanted",
	    c->key_prefix);
	r->channels[0] = r->channel;
	r->channels[1] = r->wanted;
	snprintf(r->acl, sizeof(r->acl), "~%s* &%s* %s", c->key_prefix, c->key_prefix,
	    RSCRIPT_ACL);
	r->later = later_create(be->base);
	TAILQ_INIT(&r->settling);
	r->ev_settle = evtimer_new(be->base, on_settle, r);
	r->ev_cache = evtimer_new(be->base, deleg_on_cache, r);
	/* no name server answering keeps the loop from ending */
	r->dns = evdns_base_new(be->base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
	    EVDNS_BASE_DISABLE_WHEN_INACTIVE);
	be->priv = r;
	r->topo->init(r);
	r->quorum = r->ncalls / 2 + 1;
	return r;
}

int
rd_create(struct backend *be, const struct rd_topo *topo)
{
	const struct rd_settings *c = be->settings;
	struct tls_client *tls = NULL;
	bool shared = c->tls;
	for (size_t i = 0; i < c->nnodes; i++) {
		/* a node's own TLS files must load; without files of its own, a
		 * node with TLS uses the backend's context */
		struct tls_client *own = NULL;
		if (rd_node_tls_on(c, &c->nodes[i]) && rd_node_tls_own(&c->nodes[i]) &&
		    (own = rd_node_tls(c, &c->nodes[i], be->ops->name)) == NULL)
			return -1;
		tls_client_unref(own);
		shared |= rd_node_tls_on(c, &c->nodes[i]) && !rd_node_tls_own(&c->nodes[i]);
	}
	if (shared && (tls = rd_tls(c, be->ops->name)) == NULL)
		return -1;
	struct rd *r = rd_init(be, tls, topo);
	r->topo->start(r);
	return 0;
}

/* SIGHUP: read the TLS files again, for the next connects. */
void
rd_reload(struct backend *be)
{
	struct rd *r = be->priv;
	struct tls_client *tls = NULL;
	bool read = false;
	/* a context that cannot be made again stays as it is (why is logged) */
	for (size_t i = 0; i < r->nnodes; i++) {
		struct rd_node *nd = r->nodes[i];
		if (nd->tls == NULL || (tls = rd_node_tls(r->set, nd->set, be->ops->name)) == NULL)
			continue;
		rnode_set_tls(nd->node, tls);
		tls_client_unref(nd->tls);
		nd->tls = tls;
		read = true;
	}
	if (r->tls != NULL && (tls = rd_tls(r->set, be->ops->name)) != NULL) {
		for (size_t i = 0; i < r->nnodes; i++) {
			struct rd_node *nd = r->nodes[i];
			if (nd->tls == NULL && (nd->set == NULL || rd_node_tls_on(r->set, nd->set)))
				rnode_set_tls(nd->node, tls);
		}
		if (r->topo->reload != NULL)
			r->topo->reload(r, tls);
		tls_client_unref(r->tls);
		r->tls = tls;
		read = true;
	}
	if (read)
		log_info("%s backend: TLS files read again, used from the next connect",
		    be->ops->name);
}

/* Close the nodes (failing what is in flight), free every retry, then
 * be->priv. */
void
rd_destroy(struct backend *be)
{
	struct rd *r = be->priv;
	struct rd_retry *rt;
	struct rd_op *op;
	r->destroying = true;
	for (size_t i = 0; i < r->nnodes; i++) {
		rnode_destroy(r->nodes[i]->node);
		r->nodes[i]->node = NULL;
		tls_client_unref(r->nodes[i]->tls);
		r->nodes[i]->tls = NULL;
	}
	if (r->topo->destroy != NULL)
		r->topo->destroy(r);
	free(r->nodes);
	r->nodes = NULL;
	r->nnodes = 0;
	while ((op = TAILQ_FIRST(&r->settling)) != NULL) {
		TAILQ_REMOVE(&r->settling, op, settle);
		rd_op_complete(op, BE_ERROR, 0, "the backend is shutting down");
	}
	event_free(r->ev_settle);
	later_run(r->later);
	while ((rt = TAILQ_FIRST(&r->retries)) != NULL)
		retry_free(r, rt);
	while ((rt = TAILQ_FIRST(&r->yields)) != NULL)
		retry_free(r, rt);
	deleg_free_all(r);
	hashtab_destroy(r->delegs);
	rd_watch_free(r);
	later_destroy(r->later);
	event_free(r->ev_cache);
	if (r->dns != NULL)
		evdns_base_free(r->dns, 1);
	tls_client_unref(r->tls);
	free(r);
	be->priv = NULL;
}

/* INFO: the lines every topology has (its own before and after). */
void
rd_info(struct backend *be, struct evbuffer *out)
{
	struct rd *r = be->priv;
	struct rnode_stats st, all = { .policy = "unknown" };
	char address[1024];
	/* the nodes' counts, summed */
	for (size_t i = 0; i < r->nnodes; i++) {
		rnode_stats(r->nodes[i]->node, &st);
		all.reconnects += st.reconnects;
		all.unacked += st.unacked;
		all.inflight += st.inflight;
		all.kept += st.kept;
		all.scripts_loaded = i == 0 || st.scripts_loaded < all.scripts_loaded ?
		    st.scripts_loaded : all.scripts_loaded;
		if (i == 0 || strcmp(st.policy, all.policy) != 0)
			all.policy = i == 0 ? st.policy : "mixed";
	}
	r->topo->address(r, address, sizeof(address));
	if (r->topo->info_before != NULL)
		r->topo->info_before(r, out);
	evbuffer_add_printf(out,
	    "backend_address:%s\r\nbackend_db:%lld\r\nbackend_connected:%d\r\n"
	    "backend_subscribed:%d\r\nbackend_reconnects_total:%llu\r\n"
	    "backend_scripts_loaded:%zu\r\nbackend_commands_total:%llu\r\n"
	    "backend_inflight:%zu\r\nbackend_deferred_releases:%zu\r\n"
	    "backend_renewals_total:%llu\r\nbackend_lost_total:%llu\r\n"
	    "backend_command_errors_total:%llu\r\nbackend_release_messages_total:%llu\r\n"
	    "backend_retries_total:%llu\r\nbackend_maxmemory_policy:%s\r\n"
	    "backend_delegated_keys:%zu\r\nbackend_local_handoffs_total:%llu\r\n"
	    "backend_lease_cache_ms:%lld\r\nbackend_cached_leases:%zu\r\n"
	    "backend_cache_hits_total:%llu\r\nbackend_min_replicas_ack:%lld\r\n"
	    "backend_unacknowledged_total:%llu\r\n",
	    address, r->set->db, r->topo->connected(r), r->topo->subscribed(r),
	    (unsigned long long)all.reconnects,
	    all.scripts_loaded, (unsigned long long)r->ncommands, all.inflight, all.kept,
	    (unsigned long long)r->nrenewals, (unsigned long long)r->nnotowner,
	    (unsigned long long)r->nerrors, (unsigned long long)r->nmessages,
	    (unsigned long long)r->nretries, all.policy,
	    hashtab_count(r->delegs), (unsigned long long)r->nlocal,
	    r->set->lease_cache_ms, deleg_cached(r), (unsigned long long)r->ncache_hits,
	    r->set->min_replicas_ack, (unsigned long long)all.unacked);
	if (r->topo->info_after != NULL)
		r->topo->info_after(r, out);
}

/* One word for STATUS (the topology's). */
const char *
rd_state(struct backend *be)
{
	struct rd *r = be->priv;
	return r->topo->state(r);
}

/* Releases in flight or kept for later: shutdown waits for them, and for
 * those kept for a node that is down only where the topology says so (a
 * quorum's: once the others released a lease, no quorum holds it, and on
 * that node it ends at its TTL). */
size_t
rd_pending(struct backend *be)
{
	struct rd *r = be->priv;
	struct rnode_stats st;
	size_t kept = 0;
	for (size_t i = 0; i < r->nnodes; i++) {
		rnode_stats(r->nodes[i]->node, &st);
		if (r->topo->wait_down || st.up)
			kept += st.kept;
	}
	return r->releases_inflight + kept;
}
