/*
 * rleader — leaders and observers on the Redis backends (redis, Sentinel,
 * redis-cluster, redlock): PROCLAIM, LEADER and the watch of the keys this
 * daemon's observers follow.
 *
 * What other daemons learn of a key lives beside its lease (rscript.h): the
 * acquire and transfer scripts write a CAMPAIGN's member, fence and value in
 * the key's election record ("e:"), and so does any grant of a key that some
 * daemon marked observed ("o:"); a grant, release or PROCLAIM of an observed
 * key publishes it on the release channel that every daemon already hears.
 * A grant of an observed key delegates no fences (be_redis.c, rd_granted),
 * so that every holder after it is a grant in Redis that is told. The look
 * script reads who holds the key, with a version that grows at each change
 * a look finds, the same for every daemon.
 *
 * A watched key (observe.c follows it) is looked at when its release
 * message comes, when a connection comes up or its subscription is back
 * (messages may have been missed), when its first lease is due to end (a
 * lease that runs out ends silently: its holder's daemon was killed or cut
 * off), and at least every RD_LOOK_EVERY_MS, each look renewing the mark.
 * So an idle observed key costs Redis one look per lease term at most.
 *
 * Redlock's nodes each keep their own lease, record and version of a key:
 * a look there goes to every node and tells what a majority agrees on
 * (rleader_quorum.h), once every node answered or the node timeout passed.
 * The versions are this daemon's: a count of its looks, taken as each is
 * sent (a node runs a connection's calls in order, so a later look reads a
 * state as new on every node), with room below each look's state for the
 * leaders of the nodes' histories it tells first. A grant that observers
 * read has the quorum's fence written back to its nodes' records as its
 * term (be_redis.c, the raise script); a look that finds the holder's nodes
 * recording different terms looks again, a few times, first.
 */
#include "rd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "clock.h"
#include "rleader_quorum.h"
#include "xmalloc.h"

#define RD_OBSERVE_MS 60000		/* life of an "observed" mark */
#define RD_LOOK_EVERY_MS (RD_OBSERVE_MS / 3) /* a watched key's longest time
					 * between looks (the mark renewed) */
#define RD_EXPIRY_SLACK_MS 3		/* a look this long after a lease's end */
#define RD_LOOK_RETRY_MS 1000		/* a watch's look that failed: again then */
#define RD_LOOK_SHIFT 8			/* several nodes: a look's states are
					 * numbered (its count << this) + i: its
					 * history's leaders, then its state */
#define RD_LOOK_STATE ((1u << RD_LOOK_SHIFT) - 1) /* ... the state's i */
#define RD_LOOK_SETTLE_TRIES 10		/* several nodes: looks again while a
					 * holder's nodes record different terms */

/* A key this daemon watches. */
struct rd_watch {
	struct hashtab_node hnode;	/* in r->watches, keyed by key */
	struct rd *r;			/* the backend */
	struct event *ev;		/* its next look */
	uint64_t seen;			/* the newest version a look of it found
					 * (0: none yet): its observers know the
					 * key's state that far */
	uint64_t term_seen;		/* several nodes: the newest leader's term
					 * its observers were told (or that the
					 * first look found in the histories) */
	bool looked;			/* several nodes: a look of it was told */
	size_t keylen;			/* the key's length */
	char key[];			/* the key (binary-safe) */
};

/* Several nodes: what one node's look found (copied from its reply). */
struct look_node {
	struct rlq_node q;		/* as the combining reads it (its member and
					 * value owned here) */
	struct rlq_past *past;		/* its history, values owned here */
	size_t npast;
};

/* One look in flight: whom to tell. */
struct rd_look {
	be_leader_cb *cb;		/* the caller of rd_leader, or NULL: the
					 * watch's own look (key then says which) */
	void *arg;
	struct rd *r;			/* the backend */
	struct look_node *nodes;	/* several nodes: each one's look (r->ncalls),
					 * else NULL */
	uint64_t version;		/* several nodes: the version of the state it
					 * reads, numbered as it is sent */
	unsigned tries;			/* several nodes: looks again while a grant's
					 * write-back may be under way */
	size_t keylen;			/* the key's length */
	char key[];			/* the key looked at */
};

static struct rd_watch *
watch_node(struct hashtab_node *n)
{
	return n != NULL ? (struct rd_watch *)(void *)((char *)n -
	    offsetof(struct rd_watch, hnode)) : NULL;
}

static struct rd_watch *
watch_find(const struct rd *r, const char *key, size_t keylen)
{
	if (hashtab_count(r->watches) == 0)
		return NULL;
	return watch_node(hashtab_find(r->watches, key, keylen));
}

/* ---- looks ---------------------------------------------------------------- */

static void watch_arm(struct rd *r, const char *key, size_t keylen, long long ms);

/* Free lk and what its nodes' looks hold. */
static void
look_free(struct rd_look *lk)
{
	for (size_t i = 0; lk->nodes != NULL && i < lk->r->ncalls; i++) {
		struct look_node *n = &lk->nodes[i];
		free((char *)n->q.member);
		free((char *)n->q.value);
		for (size_t j = 0; j < n->npast; j++)
			free((char *)n->past[j].value);
		free(n->past);
	}
	free(lk->nodes);
	free(lk);
}

static void
look_tell(struct rd_look *lk, const struct be_leader *l)
{
	struct rd *r = lk->r;
	if (lk->cb != NULL) {
		lk->cb(lk->arg, l);
	} else if (l->status == BE_OK && watch_find(r, lk->key, lk->keylen) != NULL) {
		r->be->up.changed(r->be->up.arg, lk->key, lk->keylen, l);
	}
	look_free(lk);
}

/* A look that failed before or without an answer (the core tells it as an
 * operation's failure). */
static void
look_failed(void *arg, const struct be_reply *rep)
{
	struct rd_look *lk = arg;
	struct be_leader l = { .status = BE_ERROR, .why = rep->why };
	watch_arm(lk->r, lk->key, lk->keylen, RD_LOOK_RETRY_MS);
	look_tell(lk, &l);
}

/* Look at key, for cb (NULL: key's watch). */
static void
look(struct rd *r, const char *key, size_t keylen, be_leader_cb *cb, void *arg)
{
	rd_send(r, rd_look_new(r, key, keylen, cb, arg));
}

struct rd_op *
rd_look_new(struct rd *r, const char *key, size_t keylen, be_leader_cb *cb, void *arg)
{
	struct rd_look *lk = xcalloc(1, sizeof(*lk) + keylen);
	struct be_lock l = { .key = key, .keylen = keylen };
	char mark[24];
	lk->cb = cb;
	lk->arg = arg;
	lk->r = r;
	lk->keylen = keylen;
	memcpy(lk->key, key, keylen);
	if (r->ncalls > 1) {
		/* numbered as sent: each node runs the looks of its connection
		 * in order, so a later look reads a state as new on every node */
		lk->nodes = xcalloc(r->ncalls, sizeof(*lk->nodes));
		lk->version = ++r->looks << RD_LOOK_SHIFT;
	}
	/* a watched key is marked observed (again) by every look */
	snprintf(mark, sizeof(mark), "%d", watch_find(r, key, keylen) != NULL ? RD_OBSERVE_MS : 0);
	const char *args[] = { r->topo->channel(r, key, keylen, true), rscript_key, NULL };
	struct rd_op *op = rd_op_new(r, RS_LOOK, &l, mark, "lfeo", args, look_failed, lk);
	/* the node timeout of several nodes is counted from a TTL: that of a
	 * look is the command timeout */
	op->ttl_ms = (uint64_t)r->set->command_timeout_ms * 10;
	return op;
}

/* An element of a look's reply: an integer, or def. */
static long long
elem_int(const redisReply *rep, size_t i, long long def)
{
	const redisReply *e = rep->element[i];
	return e->type == REDIS_REPLY_INTEGER ? e->integer : def;
}

/* The watch of key (if any) looks again in ms. */
static void
watch_arm(struct rd *r, const char *key, size_t keylen, long long ms)
{
	struct rd_watch *w = watch_find(r, key, keylen);
	if (w == NULL)
		return;
	if (ms < 0 || ms > RD_LOOK_EVERY_MS)
		ms = RD_LOOK_EVERY_MS;
	struct timeval tv = clock_tv((uint64_t)ms);
	evtimer_add(w->ev, &tv);
}

/*
 * A watched key's leaders since it was observed, as the look found them in
 * its record (hist: {version, term, value or nil} each, oldest first): those
 * after the state its observers know (the watch's seen) and before the state
 * read (version) are told first, in order, so that an observer sees every
 * leader, even one that came and went between two reads. The first look of
 * a watch tells none: its observers start from the state now, and an older
 * leader would look like a term going back.
 */
static void
tell_history(struct rd *r, const char *key, size_t keylen, const redisReply *hist,
    uint64_t version)
{
	struct rd_watch *w = watch_find(r, key, keylen);
	uint64_t seen = w != NULL ? w->seen : 0;
	if (w == NULL)
		return;
	if (version > w->seen)
		w->seen = version;
	if (seen == 0 || hist == NULL || hist->type != REDIS_REPLY_ARRAY)
		return;
	for (size_t i = 0; i < hist->elements; i++) {
		const redisReply *h = hist->element[i];
		if (watch_find(r, key, keylen) == NULL)
			return;	/* the last observer left */
		if (h->type != REDIS_REPLY_ARRAY || h->elements < 3)
			continue;
		long long v = elem_int(h, 0, 0), term = elem_int(h, 1, 0);
		if (v <= 0 || (uint64_t)v <= seen || (uint64_t)v >= version || term <= 0)
			continue;
		struct be_leader l = { .status = BE_OK, .version = (uint64_t)v,
			.term = (uint64_t)term, .mode = LOCK_EXCLUSIVE, .holders = 1 };
		if (h->element[2]->type == REDIS_REPLY_STRING) {
			l.value = h->element[2]->str;
			l.valuelen = h->element[2]->len;
		}
		r->be->up.changed(r->be->up.arg, key, keylen, &l);
	}
}

/* ---- looks of several nodes (redlock) ------------------------------------ */

/* The lock mode of a lease kind ("x0", "s0", "n<limit>"). */
static enum lock_mode
mode_of(const char *kind, size_t len)
{
	return len > 0 && kind[0] == 's' ? LOCK_SHARED :
	    len > 0 && kind[0] == 'n' ? LOCK_SEMAPHORE : LOCK_EXCLUSIVE;
}


/* Copy node i's look (rep, well formed) into lk. */
static void
look_keep(struct rd_look *lk, size_t i, const redisReply *rep)
{
	struct look_node *n = &lk->nodes[i];
	const redisReply *kind = rep->element[2], *value = rep->element[4];
	const redisReply *member = rep->element[7], *hist = rep->element[6];
	long long holders = elem_int(rep, 3, 0), term = elem_int(rep, 1, 0);
	n->q.answered = true;
	snprintf(n->q.kind, sizeof(n->q.kind), "%.*s", (int)kind->len, kind->str);
	n->q.holders = holders > 0 ? (unsigned)holders : 0;
	n->q.term = holders > 0 && term > 0 ? (uint64_t)term : 0;
	n->q.pttl = elem_int(rep, 5, -1);
	n->q.proclaims = elem_int(rep, 8, -1);
	if (member->type == REDIS_REPLY_STRING && member->len > 0 && n->q.holders > 0 &&
	    mode_of(kind->str, kind->len) == LOCK_EXCLUSIVE) {
		n->q.member = xmemdup(member->str, member->len);
		n->q.memberlen = member->len;
	}
	if (value->type == REDIS_REPLY_STRING && n->q.holders > 0) {
		n->q.value = xmemdup(value->str, value->len);
		n->q.valuelen = value->len;
	}
	if (hist->type != REDIS_REPLY_ARRAY || hist->elements == 0)
		return;
	n->past = xcalloc(hist->elements, sizeof(*n->past));
	for (size_t j = 0; j < hist->elements; j++) {
		const redisReply *h = hist->element[j];
		long long t;
		if (h->type != REDIS_REPLY_ARRAY || h->elements < 3 ||
		    (t = elem_int(h, 1, 0)) <= 0)
			continue;
		struct rlq_past *p = &n->past[n->npast++];
		p->term = (uint64_t)t;
		if (h->element[2]->type == REDIS_REPLY_STRING) {
			p->value = xmemdup(h->element[2]->str, h->element[2]->len);
			p->valuelen = h->element[2]->len;
		}
	}
}

/*
 * The leaders of the nodes' histories that key's observers were not told,
 * before the state read (st), told in order of term, each numbered below
 * the state's version; the first look of a watch tells none (its
 * observers start from the state now).
 */
static void
tell_history_quorum(struct rd *r, const struct rd_look *lk, const struct rlq_state *st)
{
	struct rd_watch *w = watch_find(r, lk->key, lk->keylen);
	bool excl = st->holders > 0 && mode_of(st->kind, strlen(st->kind)) == LOCK_EXCLUSIVE;
	size_t all = 0, n;
	if (w == NULL)
		return;
	for (size_t i = 0; i < r->ncalls; i++)
		if (lk->nodes[i].q.answered)
			all += lk->nodes[i].npast;
	struct rlq_past *past = xcalloc(all + 1, sizeof(*past));
	all = 0;
	for (size_t i = 0; i < r->ncalls; i++)
		for (size_t j = 0; lk->nodes[i].q.answered && j < lk->nodes[i].npast; j++)
			past[all++] = lk->nodes[i].past[j];
	n = rlquorum_history(past, all, r->quorum, w->term_seen, excl ? st->term : 0);
	if (!w->looked) {
		/* the first look: what the histories hold is the past */
		if (n > 0 && past[n - 1].term > w->term_seen)
			w->term_seen = past[n - 1].term;
		n = 0;
	}
	w->looked = true;
	if (n > (1u << RD_LOOK_SHIFT) - 1)
		n = (1u << RD_LOOK_SHIFT) - 1;	/* the newest are told */
	for (size_t i = 0; i < n; i++) {
		const struct rlq_past *p = &past[i];
		struct be_leader l = { .status = BE_OK, .version = lk->version + i,
			.term = p->term, .mode = LOCK_EXCLUSIVE, .holders = 1,
			.value = p->value, .valuelen = p->valuelen };
		if (p->term > w->term_seen)
			w->term_seen = p->term;
		r->be->up.changed(r->be->up.arg, lk->key, lk->keylen, &l);
		if ((w = watch_find(r, lk->key, lk->keylen)) == NULL)
			break;	/* the last observer left */
	}
	if (w != NULL && excl && st->term > w->term_seen)
		w->term_seen = st->term;
	free(past);
}

/*
 * Decide look op from the nodes that answered (all have, or the node
 * timeout passed): what a majority agrees on (rleader_quorum.h) is told,
 * numbered by this daemon; fewer than a majority answering, an error. A
 * holder whose nodes record different terms may be a grant whose fence is
 * being written back: looked at again, a few times, before its largest term
 * is told.
 */
static void
look_decide(struct rd *r, struct rd_op *op)
{
	struct rd_look *lk = op->arg;
	struct rlq_node *q = xcalloc(r->ncalls, sizeof(*q));
	struct rlq_state st;
	char buf[sizeof(op->why) + 80];
	for (size_t i = 0; i < r->ncalls; i++)
		q[i] = lk->nodes[i].q;
	int rc = rlquorum_combine(q, r->ncalls, r->quorum, &st);
	if (rc < 0) {
		free(q);
		snprintf(buf, sizeof(buf), "%s: %zu of %zu nodes answered, %zu needed (%.120s)",
		    r->topo->name, st.answered, r->ncalls, r->quorum,
		    op->why[0] != '\0' ? op->why : "no reply from redis");
		watch_arm(r, op->key, op->keylen, RD_LOOK_RETRY_MS);
		rd_op_tell(op, BE_ERROR, 0, buf);
		return;
	}
	op->decided = true;
	op->told = BE_OK;
	if (!st.settled && lk->tries < RD_LOOK_SETTLE_TRIES) {
		struct rd_op *again = rd_look_new(r, lk->key, lk->keylen, lk->cb, lk->arg);
		((struct rd_look *)again->arg)->tries = lk->tries + 1;
		look_free(lk);
		free(q);
		rd_send(r, again);
		return;
	}
	struct be_leader l = { .status = BE_OK, .version = lk->version + RD_LOOK_STATE,
		.term = st.term, .holders = st.holders, .value = st.value,
		.valuelen = st.valuelen, .mode = mode_of(st.kind, strlen(st.kind)) };
	/* a lease that runs out is a change nobody publishes: looked at then */
	watch_arm(r, op->key, op->keylen, st.pttl >= 0 ? st.pttl + RD_EXPIRY_SLACK_MS : -1);
	tell_history_quorum(r, lk, &st);
	look_tell(lk, &l);
	free(q);	/* st points into it */
}

/* Node c's answer to a look of several nodes (rep NULL: none will come). */
static void
look_node(struct rd *r, struct rd_call *c, const redisReply *rep, const char *why)
{
	struct rd_op *op = c->op;
	if (op->decided)
		return;	/* a late answer */
	bool ok = rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 9 &&
	    rep->element[2]->type == REDIS_REPLY_STRING;
	if (ok)
		look_keep(op->arg, (size_t)(c - op->calls), rep);
	if (rd_read_answered(r, c, rep, why, ok))
		look_decide(r, op);
}

void
rd_look_late(struct rd *r, struct rd_op *op)
{
	look_decide(r, op);
}

void
rd_looked(struct rd *r, struct rd_call *c, const redisReply *rep, const char *why)
{
	struct rd_op *op = c->op;
	struct rd_look *lk = op->arg;
	char buf[200];
	if (r->ncalls > 1) {
		look_node(r, c, rep, why);
		return;
	}
	if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements < 6 ||
	    rep->element[2]->type != REDIS_REPLY_STRING) {
		c->node->nfailures++;
		if (rep == NULL || rep->type == REDIS_REPLY_ERROR)
			r->topo->failed(r, c->node, rep, why != NULL ? why : "no reply from redis",
			    buf, sizeof(buf));
		else
			snprintf(buf, sizeof(buf), "unexpected reply from redis");
		watch_arm(r, op->key, op->keylen, RD_LOOK_RETRY_MS);
		rd_op_tell(op, BE_ERROR, 0, buf);
		return;
	}
	const redisReply *kind = rep->element[2], *value = rep->element[4];
	long long version = elem_int(rep, 0, 0), term = elem_int(rep, 1, 0);
	long long holders = elem_int(rep, 3, 0), pttl = elem_int(rep, 5, -1);
	struct be_leader l = {
		.status = BE_OK,
		.version = version > 0 ? (uint64_t)version : 0,
		.term = holders > 0 && term > 0 ? (uint64_t)term : 0,
		.holders = holders > 0 ? (unsigned)holders : 0,
		.mode = mode_of(kind->str, kind->len),
	};
	if (value->type == REDIS_REPLY_STRING && l.holders > 0) {
		l.value = value->str;
		l.valuelen = value->len;
	}
	/* a lease that runs out is a change nobody publishes: looked at then */
	watch_arm(r, op->key, op->keylen, pttl >= 0 ? pttl + RD_EXPIRY_SLACK_MS : -1);
	tell_history(r, op->key, op->keylen, rep->elements > 6 ? rep->element[6] : NULL,
	    l.version);
	op->decided = true;
	op->told = BE_OK;
	look_tell(lk, &l);
}

/* ---- the operations --------------------------------------------------------- */

void
rd_leader(struct backend *be, const char *key, size_t keylen, be_leader_cb *cb, void *arg)
{
	look(be->priv, key, keylen, cb, arg);
}

/* Several nodes: a PROCLAIM of a key this daemon watches, until its
 * observers have read the value. */
struct rd_proclaimed {
	struct rd *r;
	be_cb *cb;			/* the caller of rd_proclaim */
	void *arg;
	size_t keylen;
	char key[];
};

/* The look after a PROCLAIM (p): its observers are told, then its caller. */
static void
proclaim_looked(void *arg, const struct be_leader *l)
{
	struct rd_proclaimed *p = arg;
	struct rd *r = p->r;
	struct be_reply rep = { .status = BE_OK };
	if (l->status == BE_OK && watch_find(r, p->key, p->keylen) != NULL)
		r->be->up.changed(r->be->up.arg, p->key, p->keylen, l);
	p->cb(p->arg, &rep);
	free(p);
}

/* A PROCLAIM of several nodes decided: done, it is read (proclaim_looked). */
static void
proclaim_decided(void *arg, const struct be_reply *rep)
{
	struct rd_proclaimed *p = arg;
	if (rep->status != BE_OK) {
		p->cb(p->arg, rep);
		free(p);
		return;
	}
	rd_send(p->r, rd_look_new(p->r, p->key, p->keylen, proclaim_looked, p));
}

void
rd_proclaim(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct rd *r = be->priv;
	char member[RSCRIPT_MEMBER_MAX];
	deleg_member(r, l, member);
	const char *args[] = { rscript_value, r->topo->channel(r, l->key, l->keylen, false),
	    rscript_key, NULL };
	if (r->ncalls > 1 && watch_find(r, l->key, l->keylen) != NULL) {
		/* the daemon's observers may hold a read sent before it, which
		 * each node answers first: the caller is told once they read
		 * the value, so that this daemon's LEADER after it shows it */
		struct rd_proclaimed *p = xmalloc(sizeof(*p) + l->keylen);
		p->r = r;
		p->cb = cb;
		p->arg = arg;
		p->keylen = l->keylen;
		memcpy(p->key, l->key, l->keylen);
		cb = proclaim_decided;
		arg = p;
	}
	rd_send(r, rd_op_new(r, RS_PROCLAIM, l, member, "lef", args, cb, arg));
}

/* A watch's time for a look has come. */
static void
on_look_due(evutil_socket_t fd, short what, void *arg)
{
	struct rd_watch *w = arg;
	(void)fd;
	(void)what;
	look(w->r, w->key, w->keylen, NULL, NULL);
}

void
rd_watch(struct backend *be, const char *key, size_t keylen, int on)
{
	struct rd *r = be->priv;
	struct rd_watch *w = watch_find(r, key, keylen);
	if (on && w == NULL) {
		/* its first look is the observer's read, which marks it */
		w = xcalloc(1, sizeof(*w) + keylen);
		w->r = r;
		w->ev = evtimer_new(be->base, on_look_due, w);
		w->keylen = keylen;
		memcpy(w->key, key, keylen);
		hashtab_insert(r->watches, &w->hnode, w->key, w->keylen);
	} else if (!on && w != NULL) {
		/* the mark runs out by itself */
		hashtab_remove(r->watches, &w->hnode);
		event_free(w->ev);
		free(w);
	}
}

void
rd_watch_message(struct rd *r, const char *key, size_t keylen)
{
	if (watch_find(r, key, keylen) != NULL)
		r->be->up.changed(r->be->up.arg, key, keylen, NULL);
}

void
rd_watch_all(struct rd *r)
{
	struct hashtab_iter it;
	struct hashtab_node *n;
	struct timeval now = clock_tv(0);
	/* from the loop: an observer told may end its watch */
	hashtab_iter_init(&it, r->watches);
	while ((n = hashtab_next(&it)) != NULL)
		evtimer_add(watch_node(n)->ev, &now);
}

void
rd_watch_free(struct rd *r)
{
	struct hashtab_iter it;
	struct hashtab_node *n;
	hashtab_iter_init(&it, r->watches);
	while ((n = hashtab_next(&it)) != NULL) {
		struct rd_watch *w = watch_node(n);
		hashtab_remove(r->watches, n);
		event_free(w->ev);
		free(w);
		hashtab_iter_init(&it, r->watches);
	}
	hashtab_destroy(r->watches);
}
