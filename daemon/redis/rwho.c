/*
 * rwho — who holds a key, every daemon's leases, on the Redis backends
 * (backend_ops.holders).
 *
 * The acquire and transfer scripts keep a description of each lease they
 * grant (be_lock.who, after the fence of its grant) in the key's holders'
 * key ("i:"; a string for an exclusive lease, a hash of the members for
 * shared ones), which the release script empties and the renew script
 * keeps as long as the leases (rscript.c). The holders script reads every
 * lease of the key with its description. A lease that its daemon hands on
 * locally (rdeleg.c) keeps the description of the grant that took it in
 * Redis: that daemon's own STATUS names the local holder.
 *
 * Redlock's nodes each keep their own leases: the read goes to every node
 * and tells the leases that a quorum of them holds, once every node
 * answered or the node timeout passed.
 */
#include "rd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "xmalloc.h"

/* A lease that a node named. */
struct who_lease {
	char *member;			/* "<kind>:<token>" */
	size_t memberlen;
	long long ms;			/* what is left of it (the least a node said) */
	unsigned long long fence;	/* its fence (the largest a node recorded:
					 * redlock's grant takes the quorum's) */
	char *desc;			/* who (be_lock.who); NULL: none */
	size_t desclen;
	size_t nodes;			/* how many nodes hold it */
};

/* A read in flight. */
struct rd_who {
	be_holders_cb *cb;		/* whom to tell */
	void *arg;
	struct who_lease *leases;	/* every lease some node named */
	size_t n, cap;
	size_t answered;		/* nodes that answered well */
};

static void
who_free(struct rd_who *w)
{
	for (size_t i = 0; i < w->n; i++) {
		free(w->leases[i].member);
		free(w->leases[i].desc);
	}
	free(w->leases);
	free(w);
}

/* Tell w's caller hs, and free w. */
static void
who_tell(struct rd_who *w, const struct be_holders *hs)
{
	w->cb(w->arg, hs);
	who_free(w);
}

/* The read failed before any node answered (rd_op_tell). */
static void
who_failed(void *arg, const struct be_reply *rep)
{
	struct be_holders hs = { .status = BE_ERROR, .why = rep->why };
	who_tell(arg, &hs);
}

/* Keep what a node's well-formed reply names. */
static void
who_keep(struct rd_who *w, const redisReply *rep)
{
	w->answered++;
	for (size_t i = 0; i + 2 < rep->elements; i += 3) {
		const redisReply *m = rep->element[i], *ms = rep->element[i + 1],
		    *d = rep->element[i + 2];
		struct who_lease *l = NULL;
		if (m->type != REDIS_REPLY_STRING || ms->type != REDIS_REPLY_INTEGER)
			continue;
		for (size_t j = 0; j < w->n && l == NULL; j++)
			if (w->leases[j].memberlen == m->len &&
			    memcmp(w->leases[j].member, m->str, m->len) == 0)
				l = &w->leases[j];
		if (l == NULL) {
			if (w->n == w->cap) {
				w->cap = w->cap != 0 ? w->cap * 2 : 4;
				w->leases = xrealloc(w->leases, w->cap * sizeof(*w->leases));
			}
			l = &w->leases[w->n++];
			*l = (struct who_lease){ .member = xmemdup(m->str, m->len),
			    .memberlen = m->len, .ms = ms->integer };
		}
		l->nodes++;
		if (ms->integer < l->ms)
			l->ms = ms->integer;
		/* fence, a tab, who */
		const char *tab = d->type == REDIS_REPLY_STRING ? memchr(d->str, '\t', d->len) : NULL;
		if (tab == NULL)
			continue;
		unsigned long long f = strtoull(d->str, NULL, 10);
		if (f > l->fence)
			l->fence = f;
		if (l->desc == NULL) {
			l->desclen = d->len - (size_t)(tab + 1 - d->str);
			l->desc = xmemdup(tab + 1, l->desclen);
		}
	}
}

/* The lock mode of a member ("x0:...", "s0:...", "n<limit>:..."). */
static enum lock_mode
who_mode(const char *member)
{
	return member[0] == 's' ? LOCK_SHARED : member[0] == 'n' ? LOCK_SEMAPHORE :
	    LOCK_EXCLUSIVE;
}

/* Every node answered, or the node timeout passed: tell the leases that
 * enough nodes hold. */
static void
who_decide(struct rd *r, struct rd_op *op)
{
	struct rd_who *w = op->arg;
	size_t need = r->ncalls > 1 ? r->quorum : 1, n = 0;
	char buf[sizeof(op->why) + 80];
	if (w->answered < need) {
		snprintf(buf, sizeof(buf), "%s: %zu of %zu nodes answered, %zu needed (%.120s)",
		    r->topo->name, w->answered, r->ncalls, need,
		    op->why[0] != '\0' ? op->why : "no reply from redis");
		rd_op_tell(op, BE_ERROR, 0, r->ncalls > 1 ? buf : op->why);
		return;
	}
	op->decided = true;
	op->told = BE_OK;
	struct be_holder *h = xcalloc(w->n + 1, sizeof(*h));
	for (size_t i = 0; i < w->n; i++) {
		struct who_lease *l = &w->leases[i];
		if (l->nodes < need)
			continue;
		h[n++] = (struct be_holder){ .mode = who_mode(l->member), .lease_ms = l->ms,
		    .fence = l->fence, .who = l->desc, .wholen = l->desclen };
	}
	struct be_holders hs = { .status = BE_OK, .n = n, .h = h };
	who_tell(w, &hs);
	free(h);
}

void
rd_who_reply(struct rd *r, struct rd_call *c, const redisReply *rep, const char *why)
{
	struct rd_op *op = c->op;
	if (op->decided)
		return;	/* a late answer */
	bool ok = rep != NULL && rep->type == REDIS_REPLY_ARRAY;
	if (ok)
		who_keep(op->arg, rep);
	if (rd_read_answered(r, c, rep, why, ok))
		who_decide(r, op);
}

void
rd_who_late(struct rd *r, struct rd_op *op)
{
	who_decide(r, op);
}

void
rd_holders(struct backend *be, const char *key, size_t keylen, be_holders_cb *cb, void *arg)
{
	struct rd *r = be->priv;
	struct rd_who *w = xcalloc(1, sizeof(*w));
	struct be_lock l = { .key = key, .keylen = keylen };
	const char *none[] = { NULL };
	w->cb = cb;
	w->arg = arg;
	struct rd_op *op = rd_op_new(r, RS_WHO, &l, "", "li", none, who_failed, w);
	/* the node timeout of several nodes is counted from a TTL: that of a
	 * read is the command timeout */
	op->ttl_ms = (uint64_t)r->set->command_timeout_ms * 10;
	rd_send(r, op);
}
