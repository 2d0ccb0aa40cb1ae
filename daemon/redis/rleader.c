/*
 * rleader — leaders and observers on the Redis backends of one call per
 * operation (redis, Sentinel, redis-cluster): PROCLAIM, LEADER and the watch
 * of the keys this daemon's observers follow.
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
 */
#include "rd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "clock.h"
#include "xmalloc.h"

#define RD_OBSERVE_MS 60000		/* life of an "observed" mark */
#define RD_LOOK_EVERY_MS (RD_OBSERVE_MS / 3) /* a watched key's longest time
					 * between looks (the mark renewed) */
#define RD_EXPIRY_SLACK_MS 3		/* a look this long after a lease's end */
#define RD_LOOK_RETRY_MS 1000		/* a watch's look that failed: again then */

/* A key this daemon watches. */
struct rd_watch {
	struct hashtab_node hnode;	/* in r->watches, keyed by key */
	struct rd *r;			/* the backend */
	struct event *ev;		/* its next look */
	uint64_t seen;			/* the newest version a look of it found
					 * (0: none yet): its observers know the
					 * key's state that far */
	size_t keylen;			/* the key's length */
	char key[];			/* the key (binary-safe) */
};

/* One look in flight: whom to tell. */
struct rd_look {
	be_leader_cb *cb;		/* the caller of rd_leader, or NULL: the
					 * watch's own look (key then says which) */
	void *arg;
	struct rd *r;			/* the backend */
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

static void
look_tell(struct rd_look *lk, const struct be_leader *l)
{
	struct rd *r = lk->r;
	if (lk->cb != NULL) {
		lk->cb(lk->arg, l);
	} else if (l->status == BE_OK && watch_find(r, lk->key, lk->keylen) != NULL) {
		r->be->up.changed(r->be->up.arg, lk->key, lk->keylen, l);
	}
	free(lk);
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
	struct rd_look *lk = xmalloc(sizeof(*lk) + keylen);
	struct be_lock l = { .key = key, .keylen = keylen };
	char mark[24];
	lk->cb = cb;
	lk->arg = arg;
	lk->r = r;
	lk->keylen = keylen;
	memcpy(lk->key, key, keylen);
	/* a watched key is marked observed (again) by every look */
	snprintf(mark, sizeof(mark), "%d", watch_find(r, key, keylen) != NULL ? RD_OBSERVE_MS : 0);
	const char *args[] = { r->topo->channel(r, key, keylen, true), rscript_key, NULL };
	return rd_op_new(r, RS_LOOK, &l, mark, "lfeo", args, look_failed, lk);
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

void
rd_looked(struct rd *r, struct rd_call *c, const redisReply *rep, const char *why)
{
	struct rd_op *op = c->op;
	struct rd_look *lk = op->arg;
	char buf[200];
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
		.mode = kind->len > 0 && kind->str[0] == 's' ? LOCK_SHARED :
		    kind->len > 0 && kind->str[0] == 'n' ? LOCK_SEMAPHORE : LOCK_EXCLUSIVE,
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

void
rd_proclaim(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct rd *r = be->priv;
	char member[RSCRIPT_MEMBER_MAX];
	deleg_member(r, l, member);
	const char *args[] = { rscript_value, r->topo->channel(r, l->key, l->keylen, false),
	    rscript_key, NULL };
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
