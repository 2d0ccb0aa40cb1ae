/*
 * be_redis — leases in one Redis server, shared by any number of daemons.
 *
 * The leases, fence counters and waiting marks in Redis, and the scripts
 * that keep them, are rscript.c's; the server's connections (name
 * resolution, TLS, AUTH, scripts loaded, timeouts, reconnects, releases
 * kept until Redis is back) are a Redis node's (rnode.c). This file is the
 * policy of one server.
 *
 * A lease's end only ever moves later until the lease is released, so the
 * end the lock table counts from any reply (the call's send time plus the
 * TTL) is never after the end in Redis, whatever order requests run in.
 *
 * Everything issued in one loop iteration leaves in one write, so the
 * renewals that the lock table sends at one tick form one pipeline. The
 * node's subscriber connection listens to prefix + "released", where the
 * release script publishes each key it frees while the "w:" mark says a
 * daemon waits; a message wakes the lock table's queue of that key.
 * Messages can be lost, so every BUSY answer also arms a retry at the
 * holder's remaining lease (capped, with jitter).
 *
 * Local delegation: an acquire or transfer of an exclusive lease with local
 * waiters queued behind reserves a block of fences (at most handoff_limit).
 * Until they are used, the lease goes from one local holder to the next
 * without Redis (struct rd_deleg): the lease in Redis keeps its member, and
 * renewals and the release of whoever holds it locally go to that member. A
 * local grant is valid for what is left of the lease as counted from the
 * last confirmed call's send time; PROTOCOL.md 8.2 has the argument. With
 * lease_cache_ms, a released delegation is kept that long (cached) for a
 * local LOCK of the key; a busy answer publishes the key on prefix +
 * "wanted", and a daemon that caches its lease releases it at once.
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
 * It owns its node and what is in Redis under the prefix. It must not block
 * the event loop, must not complete an operation from inside the call that
 * asked for it, and knows nothing of the lock table's state but what each
 * call says.
 */
#include "backend.h"
#include "be_redis_internal.h"

#include <assert.h>
#include <ctype.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "clock.h"
#include "conf.h"
#include "hashtab.h"
#include "later.h"
#include "log.h"
#include "num.h"
#include "rnode.h"
#include "rscript.h"
#include "tls.h"
#include "xmalloc.h"

#define RD_RETRY_CAP_MS 1000		/* longest sleep of a waiter after BUSY */
#define RD_RETRY_MIN_MS 2		/* ... when the lease ends as Redis answers */
#define RD_SETTLE_MS 250		/* after the connection is back, new leases
					 * wait this long: every daemon's renewals
					 * (on_up) come first */
#define RD_MARK_MS (4 * RD_RETRY_CAP_MS) /* life of a "someone waits" mark */
#define RD_SENTINEL_PORT 26379		/* the port of a sentinel that gives none */
#define RD_YIELD_RETRY_MS 100		/* after a yield, this daemon's queue retries then */
#define RD_YIELD_QUIET_MS 80		/* and ignores release messages for the key this
					 * long: its own must not wake it first */

struct rd;

/* A script call in flight, or a release waiting for the connection. */
struct rd_op {
	struct rd *r;			/* the backend */
	enum rscript script;		/* which script */
	be_cb *cb;			/* whom to tell, NULL for none */
	void *arg;
	enum be_status failed;		/* for ops failed before sending */
	char *key;			/* the lock's key (for BUSY retries), in buf */
	size_t keylen;			/* its length */
	const char *member;		/* the lease taken or released (acquire: the
					 * new one; transfer: to), in buf */
	uint64_t ttl_ms;		/* the lease asked for (or released) */
	unsigned fences;		/* acquire, transfer: fences it reserves */
	uint64_t sent_ms;		/* when it went out */
	struct rscript_args args;	/* the call: numkeys, keys, arguments */
	char *buf;			/* the key and every argument: the rest of
					 * op's allocation */
	struct later_item failing;	/* failed before sending: told from the loop */
	TAILQ_ENTRY(rd_op) settle;	/* an acquire on r->settling */
};
TAILQ_HEAD(rd_op_list, rd_op);

/* A sentinel (Sentinel mode). */
struct rd_sentinel {
	struct rd *r;			/* the backend */
	struct rnode *node;		/* the sentinel */
	const char *addr;		/* its "host:port", as configured */
	bool unknown_logged;		/* it said it does not know the master */
};

/* A retry armed by a BUSY answer, or by a yield. */
struct rd_retry {
	struct rd *r;			/* the backend */
	struct event *ev;		/* fires the wakeup */
	char *key;			/* for which key */
	size_t keylen;			/* its length */
	uint64_t quiet_until;		/* a yield: release messages for the key are
					 * ignored until then (clock_ms()) */
	TAILQ_ENTRY(rd_retry) entry;	/* on r->retries or r->yields */
};
TAILQ_HEAD(rd_retry_list, rd_retry);

/*
 * A key whose exclusive lease this daemon holds in Redis with fences
 * reserved for later grants: the lease goes from one local holder to the
 * next without a call to Redis (local delegation). Redis knows the lease as
 * member; the lock table knows the holding by holder, its token.
 */
struct rd_deleg {
	struct hashtab_node hnode;	/* in r->delegs, keyed by key */
	char member[RSCRIPT_MEMBER_MAX];	/* the lease in Redis: "x0:<token>" */
	char holder[TOKEN_LEN + 1];	/* the local holder's token; "" while cached */
	uint64_t lease_end;		/* the lease lasts at least until then (clock_ms()) */
	uint64_t fence_next;		/* the next fence reserved */
	uint64_t fence_last;		/* the last fence reserved */
	uint64_t cache_until;		/* cached (nobody holds it here): released
					 * in Redis then; 0 while held */
	bool wanted;			/* another daemon asked for the key */
	TAILQ_ENTRY(rd_deleg) centry;	/* on r->cached while cached */
	size_t keylen;			/* the key's length */
	char key[];			/* the key (binary-safe) */
};
TAILQ_HEAD(rd_deleg_list, rd_deleg);

/* The answer of an operation done without Redis (a local handoff or
 * grant, a release kept in the cache), given from the loop. */
struct rd_local {
	be_cb *cb;			/* whom to tell */
	void *arg;
	bool grant;			/* a grant under d's lease */
	struct rd_deleg *d;		/* a grant: the key's delegation; NULL once
					 * it was dropped (the lease is gone) */
	uint64_t fence;			/* the new holding's fence */
	uint64_t valid_ms;		/* and its lease's validity */
	struct rd *r;			/* the backend */
	struct later_item later;	/* answered from the loop */
	TAILQ_ENTRY(rd_local) entry;	/* on r->locals */
};
TAILQ_HEAD(rd_local_list, rd_local);

/* The settings of the backend (backend.* keys; see rd_settings_table). */
struct rd_settings {
	struct addr address;		/* the server */
	char *username;			/* AUTH user (an ACL user), NULL: the default */
	char *password;			/* AUTH password, NULL for none */
	char *password_file;		/* where password was read from, or NULL */
	long long db;			/* SELECT db */
	char *key_prefix;		/* prefix of every key dlockd uses */
	long long connect_timeout_ms;	/* connect (and AUTH) timeout */
	long long command_timeout_ms;	/* a reply later than this drops the connection */
	long long handoff_limit;	/* consecutive local handoffs of a key before
					 * it is released to all daemons */
	long long lease_cache_ms;	/* how long a released exclusive lease is
					 * kept for a local LOCK of the key, 0: not */
	long long min_replicas_ack;	/* replicas that must acknowledge a grant,
					 * renewal or handoff (WAIT); 0: none */
	long long replica_ack_timeout_ms; /* how long WAIT waits for them */
	char **sentinels;		/* Sentinel mode: the sentinels, "host:port" */
	size_t nsentinels;		/* how many; 0: one server at address */
	char *master_name;		/* the master the sentinels know by this name */
	char *sentinel_username;	/* the sentinels' AUTH user, NULL: none */
	char *sentinel_password;	/* their AUTH password, NULL: none */
	char *sentinel_password_file;	/* where it was read from, or NULL */
	long long tls;			/* 1: connect with TLS */
	char *tls_ca_file;		/* CAs that sign the server's certificate;
					 * NULL: the system's */
	char *tls_cert_file;		/* client certificate, or NULL */
	char *tls_key_file;		/* its key, or NULL */
	char *tls_server_name;		/* the name the server's certificate must
					 * carry, NULL: the host of address */
};

static uint64_t rd_min_lease_ms(const void *settings);

struct rd {
	struct backend *be;		/* our backend */
	const struct rd_settings *set;	/* its settings */
	struct evdns_base *dns;		/* resolves the server's name */
	struct tls_client *tls;		/* the TLS context, NULL: plain */
	struct rnode *node;		/* the server (Sentinel mode: the master) */
	struct rd_sentinel *sentinels;	/* Sentinel mode: one node per sentinel */
	size_t nsentinels;		/* how many (0: one server) */
	bool asking;			/* a sentinel is asked for the master */
	size_t ask_next;		/* the sentinel to ask next */
	size_t asked;			/* sentinels asked in a row without an answer */
	char master[300];		/* the master's "host:port" last told, "" none */
	struct event *ev_ask;		/* asks again while the master is not up */
	char channel[128];		/* prefix + "released" */
	size_t channellen;
	char wanted[128];		/* prefix + "wanted" */
	size_t wantedlen;
	const char *channels[2];	/* both, as the node subscribes to them */
	char acl[512];			/* the smallest ACL of its Redis user */
	size_t releases_inflight;	/* releases sent, not answered */
	struct rd_retry_list retries;	/* BUSY retries */
	struct rd_retry_list yields;	/* retries after a yield (a few at most) */
	struct hashtab *delegs;		/* struct rd_deleg by key */
	struct rd_local_list locals;	/* local handoffs to answer */
	struct later *later;		/* answers r->locals and failed calls */
	struct rd_deleg_list cached;	/* cached leases, oldest first */
	struct event *ev_cache;		/* releases them when their time is up */
	uint64_t ncommands;		/* script calls sent */
	uint64_t nrenewals;		/* renewals sent */
	uint64_t nnotowner;		/* renewals or releases that found another owner */
	uint64_t nerrors;		/* calls that failed */
	uint64_t nmessages;		/* released messages received */
	uint64_t nretries;		/* BUSY retries fired */
	uint64_t nlocal;		/* handoffs made without a call to Redis */
	uint64_t ncache_hits;		/* grants of a cached lease */
	bool was_up;			/* the connection to Redis was up once */
	struct rd_op_list settling;	/* acquires held until settle_until */
	struct event *ev_settle;	/* sends them then */
	uint64_t settle_until;		/* no new lease before then (clock_ms()) */
	bool draining;			/* shutting down: cache nothing */
	bool destroying;		/* rd_destroy runs: keep nothing for later */
};

/* ---- completing operations ---------------------------------------------- */

static void
op_free(struct rd_op *op)
{
	free(op);	/* its key and arguments are in the same block */
}

/* Tell op's caller and free op; a BE_OK lease lasts at least its TTL from
 * the call (the script ran after it and never shortens a lease). */
static void
op_complete(struct rd_op *op, enum be_status st, uint64_t fence, const char *why)
{
	struct be_reply rep = { st, fence, st == BE_OK ? op->ttl_ms : 0, why };
	if (st == BE_ERROR)
		op->r->nerrors++;
	if (op->cb != NULL)
		op->cb(op->arg, &rep);
	op_free(op);
}

/* Why the backend fails now, for a reply: a few words that hold no secret,
 * in buf; NULL when nothing is known to be wrong. */
static const char *
rd_problem(struct backend *be, char *buf, size_t len)
{
	struct rd *r = be->priv;
	uint64_t since, now = clock_ms();
	const char *p = rnode_problem(r->node, &since);
	if (p == NULL)
		return NULL;
	if (r->nsentinels > 0 && r->master[0] == '\0') {
		size_t up = 0;
		for (size_t i = 0; i < r->nsentinels; i++)
			up += r->sentinels[i].node != NULL && rnode_up(r->sentinels[i].node);
		snprintf(buf, len, "redis: no sentinel has told where master '%s' is yet "
		    "(%zu of %zu sentinels reached)", r->set->master_name, up, r->nsentinels);
		return buf;
	}
	if (since != 0 && now - since >= 1000)
		snprintf(buf, len, "redis %s:%d: %s, for %llu s", r->set->address.host,
		    r->set->address.port, p, (unsigned long long)((now - since) / 1000));
	else
		snprintf(buf, len, "redis %s:%d: %s", r->set->address.host, r->set->address.port,
		    p);
	return buf;
}

/* Tell a call that failed before it was sent, from the loop. */
static void
on_failed(struct later_item *it)
{
	struct rd_op *op = (struct rd_op *)(void *)((char *)it - offsetof(struct rd_op, failing));
	char why[200];
	const char *p = op->r->destroying ? "the backend is shutting down" :
	    rd_problem(op->r->be, why, sizeof(why));
	op_complete(op, op->failed, 0, p != NULL ? p : "redis is not connected");
}

/* Answer a local handoff from the loop (BE_ERROR when the backend is being
 * destroyed, BE_NOTOWNER when its delegation went meanwhile). */
static void
on_local(struct later_item *it)
{
	struct rd_local *lo = (struct rd_local *)(void *)((char *)it -
	    offsetof(struct rd_local, later));
	struct rd *r = lo->r;
	struct be_reply rep = { BE_OK, lo->fence, lo->valid_ms, NULL };
	if (r->destroying)
		rep = (struct be_reply){ BE_ERROR, 0, 0, "the backend is shutting down" };
	else if (lo->grant && lo->d == NULL)
		rep = (struct be_reply){ BE_NOTOWNER, 0, 0, "the lease had ended in redis" };
	TAILQ_REMOVE(&r->locals, lo, entry);
	lo->cb(lo->arg, &rep);
	free(lo);
}

/* Fail op from the loop (never from inside the call that made it). */
static void
op_fail_later(struct rd_op *op, enum be_status st)
{
	op->failed = st;
	later_add(op->r->later, &op->failing, on_failed);
}

/* ---- local delegation --------------------------------------------------- */

/* The delegation a node of r->delegs is embedded in (NULL for NULL). */
static struct rd_deleg *
deleg_node(struct hashtab_node *n)
{
	return n != NULL ? (struct rd_deleg *)(void *)((char *)n -
	    offsetof(struct rd_deleg, hnode)) : NULL;
}

/* The delegation of key, or NULL. */
static struct rd_deleg *
deleg_find(const struct rd *r, const char *key, size_t keylen)
{
	if (hashtab_count(r->delegs) == 0)
		return NULL;
	return deleg_node(hashtab_find(r->delegs, key, keylen));
}

/* d is cached no more (it is held again, or goes). */
static void
deleg_uncache(struct rd *r, struct rd_deleg *d)
{
	if (d->cache_until == 0)
		return;
	TAILQ_REMOVE(&r->cached, d, centry);
	d->cache_until = 0;
}

/* Forget d (its lease was released, handed on through Redis, or is gone);
 * a local handoff of it not answered yet will be answered BE_NOTOWNER. */
static void
deleg_drop(struct rd *r, struct rd_deleg *d)
{
	struct rd_local *lo;
	TAILQ_FOREACH(lo, &r->locals, entry)
		if (lo->d == d)
			lo->d = NULL;
	deleg_uncache(r, d);
	hashtab_remove(r->delegs, &d->hnode);
	free(d);
}

/* Forget key's delegation, if it has one. */
static void
deleg_forget(struct rd *r, const char *key, size_t keylen)
{
	struct rd_deleg *d = deleg_find(r, key, keylen);
	if (d != NULL)
		deleg_drop(r, d);
}

/* The delegation of l's key when l's token holds it, else NULL. */
static struct rd_deleg *
deleg_of(const struct rd *r, const struct be_lock *l)
{
	struct rd_deleg *d = deleg_find(r, l->key, l->keylen);
	return d != NULL && memcmp(d->holder, l->token, TOKEN_LEN) == 0 ? d : NULL;
}

/*
 * The reply to op (an acquire or a transfer that reserved op->fences fences,
 * the first being fence) granted op->member's exclusive lease: with fences
 * left over, the key is delegated to this daemon until the lease's end as
 * the call's send time tells it. Whatever the key had before is forgotten.
 */
static void
deleg_granted(struct rd *r, const struct rd_op *op, uint64_t fence)
{
	struct rd_deleg *d;
	deleg_forget(r, op->key, op->keylen);
	if (op->fences < 2)
		return;
	d = xcalloc(1, sizeof(*d) + op->keylen);
	snprintf(d->member, sizeof(d->member), "%s", op->member);
	memcpy(d->holder, op->member + 3, TOKEN_LEN);	/* after "x0:" */
	d->lease_end = op->sent_ms + op->ttl_ms;
	d->fence_next = fence + 1;
	d->fence_last = fence + op->fences - 1;
	d->keylen = op->keylen;
	memcpy(d->key, op->key, op->keylen);
	hashtab_insert(r->delegs, &d->hnode, d->key, d->keylen);
}

/*
 * Whether d's lease can go to to without Redis at now: a fence is left, and
 * what is left of the lease is at least half of to's TTL (the grant is of
 * use, and to renews it in time) and at most its TTL (the lease does not
 * outlive to's TTL if this daemon dies). A DETACH holder is promised its
 * whole TTL: it goes through Redis.
 */
static bool
deleg_can_hand(const struct rd_deleg *d, const struct be_lock *to, uint64_t now)
{
	uint64_t left = d->lease_end > now ? d->lease_end - now : 0;
	return !to->detached && to->mode == LOCK_EXCLUSIVE && d->fence_next <= d->fence_last &&
	    left >= to->ttl_ms / 2 && left > 0 && left <= to->ttl_ms;
}

/* Answer cb from the loop: BE_OK, with a grant under d's lease (fence,
 * valid_ms) when d is not NULL. */
static void
local_answer(struct rd *r, be_cb *cb, void *arg, struct rd_deleg *d, uint64_t fence,
    uint64_t valid_ms)
{
	struct rd_local *lo = xcalloc(1, sizeof(*lo));
	lo->r = r;
	lo->cb = cb;
	lo->arg = arg;
	lo->grant = d != NULL;
	lo->d = d;
	lo->fence = fence;
	lo->valid_ms = valid_ms;
	TAILQ_INSERT_TAIL(&r->locals, lo, entry);
	later_add(r->later, &lo->later, on_local);
}

/* Grant d's lease to l locally: l holds it with the next fence reserved,
 * until the lease's end; cb is told from the loop. */
static void
deleg_hand(struct rd *r, struct rd_deleg *d, const struct be_lock *l, uint64_t now,
    be_cb *cb, void *arg)
{
	deleg_uncache(r, d);
	memcpy(d->holder, l->token, TOKEN_LEN);
	local_answer(r, cb, arg, d, d->fence_next++, d->lease_end - now);
}

/* The fences an acquire or transfer for l reserves: one, or for an exclusive
 * lease with waiters queued behind, one for each at most, and no more than
 * handoff_limit (a call to Redis at least every handoff_limit grants, where
 * a waiting daemon is seen); handoff_limit when released leases are cached,
 * for the LOCKs that may come while it is. */
static unsigned
fences_for(const struct rd *r, const struct be_lock *l)
{
	uint64_t n = (uint64_t)l->queued + 1;
	if (l->mode != LOCK_EXCLUSIVE)
		return 1;
	if (r->set->lease_cache_ms > 0 && !l->detached)
		n = (uint64_t)r->set->handoff_limit;	/* for LOCKs after the release */
	return n < (uint64_t)r->set->handoff_limit ? (unsigned)n : (unsigned)r->set->handoff_limit;
}

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

/*
 * Wake the lock table's queue of key in pttl ms (at most RD_RETRY_CAP_MS;
 * RD_RETRY_MIN_MS when the lease ends now or is gone, 0 or -2; the cap for
 * a key that does not expire, -1), with jitter. quiet_ms > 0 (a yield):
 * release messages for key are ignored that long.
 */
static void
retry_arm(struct rd *r, const char *key, size_t keylen, long long pttl, uint64_t quiet_ms)
{
	uint64_t delay = pttl == 0 || pttl == -2 ? RD_RETRY_MIN_MS : pttl > 0 &&
	    pttl < RD_RETRY_CAP_MS ? (uint64_t)pttl : RD_RETRY_CAP_MS;
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

static void send_op(struct rd *r, struct rd_op *op);
static struct rd_op *release_new(struct rd *r, const struct be_lock *l, const char *member,
    be_cb *cb, void *arg);

/* Keep release op for the server (rnode_keep): sent when the connection is
 * back, or again after an error reply; dropped once its lease has ended by
 * itself. op is freed. */
static void
keep_release(struct rd *r, struct rd_op *op)
{
	rnode_keep(r->node, RS_RELEASE, op->args.argc, op->args.argv, op->args.argvlen,
	    clock_ms() + op->ttl_ms);
	op_free(op);
}

/*
 * Keep a release of op's member (the lease it takes or releases) for later:
 * op's outcome is unknown (its reply was lost with the connection) or it
 * could not be sent. Releasing what was never taken is a harmless no-op in
 * the script.
 */
static void
defer_release(struct rd *r, const struct rd_op *op)
{
	struct be_lock l = { .key = op->key, .keylen = op->keylen, .ttl_ms = op->ttl_ms };
	if (r->destroying)
		return;	/* leases end at their TTL */
	keep_release(r, release_new(r, &l, op->member, NULL, NULL));
}

/* A release failed with the connection, or Redis answered it with an error:
 * say it failed, and keep it to send again (a second release is harmless). */
static void
release_failed(struct rd *r, struct rd_op *op, const char *why)
{
	struct be_reply fail = { BE_ERROR, 0, 0, why };
	r->nerrors++;
	if (op->cb != NULL)
		op->cb(op->arg, &fail);
	keep_release(r, op);
}

/* Redis answered renewal op (1: renewed, 0: not ours, else unknown): a
 * delegated lease renewed lasts longer; one that is gone ends its
 * delegation, and the key's holdings are renewed at once, so that the one
 * that holds the key here now hears of it. */
static void
deleg_renewed(struct rd *r, const struct rd_op *op, long long v)
{
	struct rd_deleg *d = deleg_find(r, op->key, op->keylen);
	if (d == NULL || strcmp(d->member, op->member) != 0)
		return;
	if (v == 1 && op->sent_ms + op->ttl_ms > d->lease_end) {
		d->lease_end = op->sent_ms + op->ttl_ms;
	} else if (v == 0) {
		deleg_drop(r, d);
		r->be->up.expire(r->be->up.arg, op->key, op->keylen);
	}
}

/* A script's reply (rep NULL: none will come, why says why). */
static void
on_reply(void *arg, const redisReply *rep, const char *why)
{
	struct rd_op *op = arg;
	struct rd *r = op->r;
	if (op->script == RS_RELEASE)
		r->releases_inflight--;
	if (rep == NULL) {
		/* an acquire or transfer may have run: give its lease back */
		if (op->script == RS_ACQUIRE || op->script == RS_TRANSFER)
			defer_release(r, op);
		if (op->script == RS_RELEASE && r->be->priv != NULL && !r->destroying) {
			/* unknown whether it ran: send it again later */
			release_failed(r, op, why);
			return;
		}
		op_complete(op, BE_ERROR, 0, why);
		return;
	}
	if (rep->type == REDIS_REPLY_ERROR) {
		if (op->script == RS_RELEASE && !r->destroying) {
			/* LOADING, BUSY, READONLY...: it did not run */
			release_failed(r, op, "redis answered an error");
			return;
		}
		op_complete(op, BE_ERROR, 0, "redis answered an error");
		return;
	}
	switch (op->script) {
	case RS_ACQUIRE: {
		long long v = reply_int(rep, 0, -2);
		uint64_t fence = reply_fence(rep);
		if (v == 1 && fence == 0) {
			/* taken, but with no fence to grant it with: give it back */
			defer_release(r, op);
			op_complete(op, BE_ERROR, 0, "unexpected reply from redis");
		} else if (v == 1) {
			if (op->fences > 1)
				deleg_granted(r, op, fence);
			op_complete(op, BE_OK, fence, NULL);
		} else if (v == 0) {
			retry_arm(r, op->key, op->keylen, reply_int(rep, 1, RD_RETRY_CAP_MS), 0);
			op_complete(op, BE_BUSY, 0, NULL);
		} else if (v == -1) {
			op_complete(op, BE_ERROR, 0, "the key is in use with another kind "
			    "(semaphore or lock) by another daemon");
		} else {
			op_complete(op, BE_ERROR, 0, "unexpected reply from redis");
		}
		break;
	}
	case RS_TRANSFER: {
		long long v = reply_int(rep, 0, -2);
		uint64_t fence = reply_fence(rep);
		if (v == 0 || v == 1 || v == 2)
			/* from's lease went to op->member, was released or had
			 * ended: its delegation is over */
			deleg_forget(r, op->key, op->keylen);
		if (v == 1 && fence == 0) {
			defer_release(r, op);
			op_complete(op, BE_ERROR, 0, "unexpected reply from redis");
		} else if (v == 1) {
			deleg_granted(r, op, fence);
			op_complete(op, BE_OK, fence, NULL);
		} else if (v == 2) {
			/* yielded: from was released for the daemon that waits;
			 * this one's queue tries again after it had its chance */
			retry_arm(r, op->key, op->keylen, RD_YIELD_RETRY_MS, RD_YIELD_QUIET_MS);
			op_complete(op, BE_BUSY, 0, NULL);
		} else if (v == 0) {
			op_complete(op, BE_NOTOWNER, 0, "the lease had ended in redis");
		} else {
			op_complete(op, BE_ERROR, 0, "unexpected reply from redis");
		}
		break;
	}
	case RS_RELEASE:
	case RS_RENEW:
		if (op->script == RS_RENEW)
			deleg_renewed(r, op, rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1);
		if (rep->type != REDIS_REPLY_INTEGER) {
			op_complete(op, BE_ERROR, 0, "unexpected reply from redis");
		} else if (rep->integer == 1) {
			op_complete(op, BE_OK, 0, NULL);
		} else {
			r->nnotowner++;
			op_complete(op, BE_NOTOWNER, 0,
			    "redis holds the lease for another owner, or it ended");
		}
		break;
	case RS_COUNT:
		break;
	}
}

/* Send op to the server, or fail it from the loop when the connection is
 * down (a release is kept for later). */
static void
send_op(struct rd *r, struct rd_op *op)
{
	op->sent_ms = clock_ms();
	/* a lease taken, renewed or handed over must reach the replicas asked
	 * for before it counts; a release need not */
	if ((op->script == RS_RELEASE ? rnode_eval : rnode_eval_acked)(r->node, op->script,
	    op->args.argc, op->args.argv, op->args.argvlen, on_reply, op) < 0) {
		if (op->script == RS_RELEASE)
			defer_release(r, op);
		op_fail_later(op, BE_ERROR);
		return;
	}
	r->ncommands++;
	if (op->script == RS_RELEASE)
		r->releases_inflight++;
}

/* ---- building calls ------------------------------------------------------ */

/*
 * A new call of script with nkeys keys named after l's key (each key kind a
 * letter: 'l' lock, 'f' fence, 'w' mark), then ARGV: member (the lease the
 * call takes or releases, kept as op->member), then the string arguments
 * args (NULL-terminated; rscript_key for the key itself). The caller owns the
 * call until it is sent or kept; op_free frees it.
 */
static struct rd_op *
op_new(struct rd *r, enum rscript script, const struct be_lock *l, const char *member,
    const char *keykinds, const char *const *args, be_cb *cb, void *arg)
{
	const char *all[RSCRIPT_ARGS + 1];
	size_t nargs = 0, need;
	all[nargs++] = member;
	for (size_t i = 0; args[i] != NULL && nargs < RSCRIPT_ARGS; i++)
		all[nargs++] = args[i];
	all[nargs] = NULL;
	need = rscript_size(strlen(r->set->key_prefix), l->keylen, keykinds, all);
	struct rd_op *op = xmalloc(sizeof(*op) + l->keylen + need);
	memset(op, 0, sizeof(*op));
	op->buf = (char *)(op + 1);
	op->r = r;
	op->script = script;
	op->cb = cb;
	op->arg = arg;
	op->key = op->buf;
	memcpy(op->key, l->key, l->keylen);
	op->keylen = l->keylen;
	op->ttl_ms = l->ttl_ms;
	op->member = rscript_build(&op->args, op->buf + l->keylen, r->set->key_prefix, op->key,
	    op->keylen, keykinds, all);
	return op;
}

/* A new call of the release script for member, a lease of l's key. */
static struct rd_op *
release_new(struct rd *r, const struct be_lock *l, const char *member, be_cb *cb, void *arg)
{
	/* the message is the key itself */
	const char *args[] = { r->channel, rscript_key, NULL };
	return op_new(r, RS_RELEASE, l, member, "lw", args, cb, arg);
}

/* The member of l's lease in Redis: its own, or the delegated lease's when
 * l holds the key's delegation. */
static void
lease_member(const struct rd *r, const struct be_lock *l, char out[RSCRIPT_MEMBER_MAX])
{
	const struct rd_deleg *d = deleg_of(r, l);
	if (d != NULL)
		memcpy(out, d->member, RSCRIPT_MEMBER_MAX);
	else
		rscript_member(l, out);
}

/* ---- the lease cache ---------------------------------------------------- */

/* Release d's lease in Redis (kept for later while disconnected) and forget
 * d. Nobody here holds it. */
static void
deleg_release(struct rd *r, struct rd_deleg *d)
{
	uint64_t now = clock_ms();
	struct be_lock l = { .key = d->key, .keylen = d->keylen,
	    .ttl_ms = d->lease_end > now ? d->lease_end - now : 1 };
	struct rd_op *op = release_new(r, &l, d->member, NULL, NULL);
	deleg_drop(r, d);
	if (rnode_up(r->node))
		send_op(r, op);
	else if (!r->destroying)
		keep_release(r, op);	/* sent when the connection is back */
	else
		op_free(op);
}

/* Arm ev_cache for the oldest cached lease. */
static void
cache_arm(struct rd *r)
{
	struct rd_deleg *d = TAILQ_FIRST(&r->cached);
	uint64_t now = clock_ms();
	if (d == NULL) {
		evtimer_del(r->ev_cache);
		return;
	}
	struct timeval tv = clock_tv(d->cache_until > now ? d->cache_until - now : 0);
	evtimer_add(r->ev_cache, &tv);
}

/* Release the cached leases whose time is up. */
static void
on_cache(evutil_socket_t fd, short what, void *arg)
{
	struct rd *r = arg;
	struct rd_deleg *d;
	uint64_t now = clock_ms();
	(void)fd;
	(void)what;
	while ((d = TAILQ_FIRST(&r->cached)) != NULL && d->cache_until <= now)
		deleg_release(r, d);
	cache_arm(r);
}

/*
 * l's holder releases d's lease: keep it for lease_cache_ms, for a LOCK of
 * the key from this daemon to take without Redis, when that can be of use
 * (a fence is left, the lease outlasts the cache time, no other daemon asked
 * for the key, the daemon is not shutting down). Whether it was kept.
 */
static bool
cache_keep(struct rd *r, struct rd_deleg *d)
{
	uint64_t now = clock_ms(), keep = (uint64_t)r->set->lease_cache_ms;
	if (keep == 0 || r->draining || d->wanted || d->fence_next > d->fence_last ||
	    d->lease_end <= now + keep)
		return false;
	d->holder[0] = '\0';
	d->cache_until = now + keep;
	TAILQ_INSERT_TAIL(&r->cached, d, centry);	/* keep is the same for all */
	if (TAILQ_FIRST(&r->cached) == d)
		cache_arm(r);
	return true;
}

/* Another daemon asked for key (a message on prefix + "wanted"): a cached
 * lease of it goes at once; a held one is not cached when released. */
static void
cache_wanted(struct rd *r, const char *key, size_t keylen)
{
	struct rd_deleg *d = deleg_find(r, key, keylen);
	if (d == NULL)
		return;
	if (d->cache_until != 0)
		deleg_release(r, d);
	else
		d->wanted = true;
}

/* The daemon shuts down: release the cached leases now and keep no more. */
static void
rd_drain(struct backend *be)
{
	struct rd *r = be->priv;
	struct rd_deleg *d;
	r->draining = true;
	while ((d = TAILQ_FIRST(&r->cached)) != NULL)
		deleg_release(r, d);
	cache_arm(r);
}

/* ---- the operations --------------------------------------------------------- */

/* Take l's lease: from the cache when this daemon keeps it and can hand it
 * to l (deleg_can_hand), else with the acquire script, if the key's leases
 * in Redis allow it; an exclusive lease with waiters queued behind (or any
 * while leases are cached) reserves fences for later grants. */
static void
rd_acquire(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct rd *r = be->priv;
	char kind[16], member[RSCRIPT_MEMBER_MAX], ttl[24], limit[16], mark[16], fences[16];
	unsigned n = fences_for(r, l);
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
	const char *args[] = { ttl, kind, limit, mark, fences, r->wanted, rscript_key, NULL };
	struct rd_op *op = op_new(r, RS_ACQUIRE, l, member, "lfw", args, cb, arg);
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
	send_op(r, op);
}

/* Drop l's lease and publish the key if a daemon waits for it; kept for
 * later while disconnected. */
static void
rd_release(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct rd *r = be->priv;
	char member[RSCRIPT_MEMBER_MAX];
	struct rd_deleg *d = deleg_of(r, l);
	if (d != NULL && cache_keep(r, d)) {
		local_answer(r, cb, arg, NULL, 0, 0);
		return;
	}
	lease_member(r, l, member);
	if (d != NULL)
		deleg_drop(r, d);
	/* while disconnected: failed at once, and released once redis is back */
	send_op(r, release_new(r, l, member, cb, arg));
}

/* Make l's lease last at least l->ttl_ms from now, if it is still ours. */
static void
rd_renew(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct rd *r = be->priv;
	char member[RSCRIPT_MEMBER_MAX], ttl[24];
	lease_member(r, l, member);
	snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)l->ttl_ms);
	const char *args[] = { ttl, NULL };
	r->nrenewals++;
	send_op(r, op_new(r, RS_RENEW, l, member, "l", args, cb, arg));
}

/* Hand from's lease to to: locally while the key's delegation allows
 * (deleg_can_hand), else through the transfer script, which reserves fences
 * for the next local handoffs; unless from->handoffs has reached the handoff
 * limit while another daemon waits: then the script releases from and the
 * reply is BE_BUSY (a yield, see on_reply). */
static void
rd_transfer(struct backend *be, const struct be_lock *from, const struct be_lock *to,
    be_cb *cb, void *arg)
{
	struct rd *r = be->priv;
	char fm[RSCRIPT_MEMBER_MAX], tm[RSCRIPT_MEMBER_MAX], ttl[24], run[16], limit[24], fences[16];
	struct rd_deleg *d = deleg_of(r, from);
	uint64_t now = clock_ms();
	unsigned n = fences_for(r, to);
	if (d != NULL && deleg_can_hand(d, to, now)) {
		r->nlocal++;
		deleg_hand(r, d, to, now, cb, arg);
		return;
	}
	lease_member(r, from, fm);
	rscript_member(to, tm);
	snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)to->ttl_ms);
	snprintf(run, sizeof(run), "%u", from->handoffs);
	snprintf(limit, sizeof(limit), "%lld", r->set->handoff_limit);
	snprintf(fences, sizeof(fences), "%u", n);
	const char *args[] = { fm, ttl, run, limit, r->channel, rscript_key, fences, NULL };
	struct rd_op *op = op_new(r, RS_TRANSFER, to, tm, "lfw", args, cb, arg);
	op->fences = n;
	send_op(r, op);
}

/* ---- connections ---------------------------------------------------------- */

/*
 * The command connection dropped: Redis may have restarted without its
 * data, and another daemon may take a key from the new Redis at once, with
 * a fence above every one reserved here. So what this daemon reserved
 * before is trusted no more: cached leases are released (when the
 * connection is back), and the fences left of a held delegation are given
 * up, so that the next handoff or LOCK of the key asks Redis, which tells
 * whether the lease survived. A holder keeps its lock until its renewal
 * says otherwise, as any holder does.
 */
static void
deleg_distrust(struct rd *r)
{
	struct hashtab_iter it;
	struct hashtab_node *n;
	struct rd_deleg *d;
	while ((d = TAILQ_FIRST(&r->cached)) != NULL)
		deleg_release(r, d);
	cache_arm(r);
	hashtab_iter_init(&it, r->delegs);
	while ((n = hashtab_next(&it)) != NULL) {
		d = deleg_node(n);
		d->fence_next = d->fence_last + 1;
	}
}

/* The connection to Redis went down: local grants wait for Redis
 * (deleg_distrust). */
static void sentinels_ask(struct rd *r);

static void
on_down(void *arg, const char *why)
{
	struct rd *r = arg;
	(void)why;
	deleg_distrust(r);
	if (r->nsentinels > 0)
		sentinels_ask(r);	/* the master may have moved */
}

/* The connection to Redis is up (again): Redis may have restarted without
 * its data, or be a new master after a failover, so every holding is
 * renewed at once, and a lease that did not survive is reported lost now,
 * not at its next renewal. */
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
		send_op(r, op);
	}
}

static void
on_up(void *arg)
{
	struct rd *r = arg;
	if (r->was_up)
		r->settle_until = clock_ms() + RD_SETTLE_MS;
	r->was_up = true;
	r->be->up.expire(r->be->up.arg, NULL, 0);
}

/* ---- Sentinel ------------------------------------------------------------ */

/* The sentinels say the master is host:port: use it (at once when it
 * moved). */
static void
master_set(struct rd *r, const char *host, const char *port, const char *from)
{
	char addr[sizeof(r->master)];
	long long p;
	if (num_parse(port, strlen(port), 1, 65535, &p) != NUM_OK)
		return;
	snprintf(addr, sizeof(addr), strchr(host, ':') != NULL ? "[%s]:%s" : "%s:%s", host,
	    port);
	if (strcmp(addr, r->master) == 0)
		return;
	log_info("redis master '%s' is %s (%s)%s%s", r->set->master_name, addr, from,
	    r->master[0] != '\0' ? ", was " : "", r->master);
	snprintf(r->master, sizeof(r->master), "%s", addr);
	rnode_set_address(r->node, host, (int)p);
}

/* A sentinel's answer to SENTINEL get-master-addr-by-name. */
static void
on_master_addr(void *arg, const redisReply *rep, const char *why)
{
	struct rd_sentinel *s = arg;
	struct rd *r = s->r;
	(void)why;
	r->asking = false;
	if (rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
	    rep->element[0]->type == REDIS_REPLY_STRING &&
	    rep->element[1]->type == REDIS_REPLY_STRING) {
		char from[320];
		r->asked = 0;
		s->unknown_logged = false;
		snprintf(from, sizeof(from), "sentinel %s", s->addr);
		master_set(r, rep->element[0]->str, rep->element[1]->str, from);
		return;
	}
	if (rep != NULL && !s->unknown_logged) {
		s->unknown_logged = true;
		log_warn("redis sentinel %s does not know a master '%s' (%s)", s->addr,
		    r->set->master_name, rep->type == REDIS_REPLY_ERROR ? rep->str :
		    rep->type == REDIS_REPLY_NIL ? "no such master" : "unexpected reply");
	}
	/* the next sentinel, once each per round (ev_ask starts the next) */
	if (++r->asked < r->nsentinels)
		sentinels_ask(r);
}

/* Ask the next sentinel that is up where the master is (one question at
 * a time); none up: a sentinel that comes up asks. */
static void
sentinels_ask(struct rd *r)
{
	const char *argv[] = { "SENTINEL", "get-master-addr-by-name", r->set->master_name };
	size_t argvlen[] = { 8, 23, strlen(r->set->master_name) };
	if (r->asking || r->destroying)
		return;
	for (size_t k = 0; k < r->nsentinels; k++) {
		struct rd_sentinel *s = &r->sentinels[(r->ask_next + k) % r->nsentinels];
		if (!rnode_up(s->node))
			continue;
		r->ask_next = (size_t)(s - r->sentinels) + 1;
		if (rnode_command(s->node, 3, argv, argvlen, on_master_addr, s) == 0) {
			r->asking = true;
			return;
		}
	}
}

/* Every second while the master is not up: ask the sentinels again. */
static void
on_ask(evutil_socket_t fd, short what, void *arg)
{
	struct rd *r = arg;
	(void)fd;
	(void)what;
	if (!rnode_up(r->node)) {
		r->asked = 0;
		sentinels_ask(r);
	}
}

/* A sentinel is up: ask it unless the master is up. */
static void
on_sentinel_up(void *arg)
{
	struct rd_sentinel *s = arg;
	if (!rnode_up(s->r->node))
		sentinels_ask(s->r);
}

/* +switch-master "name old-ip old-port new-ip new-port": a failover
 * ended; move to the new master at once. */
static void
on_sentinel_message(void *arg, const char *channel, size_t channellen, const char *msg,
    size_t msglen)
{
	struct rd_sentinel *s = arg;
	struct rd *r = s->r;
	char text[512], *w[5], *save = NULL, from[320];
	size_t n = 0;
	(void)channel;
	(void)channellen;
	if (msglen >= sizeof(text))
		return;
	memcpy(text, msg, msglen);
	text[msglen] = '\0';
	for (char *t = strtok_r(text, " ", &save); t != NULL && n < 5; t = strtok_r(NULL, " ",
	    &save))
		w[n++] = t;
	if (n != 5 || strcmp(w[0], r->set->master_name) != 0)
		return;
	snprintf(from, sizeof(from), "+switch-master from sentinel %s", s->addr);
	master_set(r, w[3], w[4], from);
}

static const struct rnode_hooks rd_sentinel_hooks = {
	.up = on_sentinel_up,
	.message = on_sentinel_message,
};

/* One node per sentinel, started. */
static void
sentinels_start(struct rd *r)
{
	static const char *const channels[] = { "+switch-master" };
	const struct rd_settings *c = r->set;
	r->nsentinels = c->nsentinels;
	r->sentinels = xcalloc(c->nsentinels, sizeof(*r->sentinels));
	for (size_t i = 0; i < c->nsentinels; i++) {
		struct rd_sentinel *s = &r->sentinels[i];
		struct addr a;
		const char *why;
		if (conf_server_parse(c->sentinels[i], RD_SENTINEL_PORT, &a, &why) < 0)
			continue;	/* conf checked it */
		struct rnode_conf nc = {
			.what = "redis sentinel",
			.host = a.host,
			.port = a.port,
			.username = c->sentinel_username,
			.password = c->sentinel_password,
			.tls = r->tls,
			.tls_name = c->tls_server_name,
			.connect_timeout_ms = (uint64_t)c->connect_timeout_ms,
			.command_timeout_ms = (uint64_t)c->command_timeout_ms,
			.channels = channels,
			.nchannels = 1,
		};
		s->r = r;
		s->addr = c->sentinels[i];
		s->node = rnode_create(r->be->base, r->dns, &nc, &rd_sentinel_hooks, s);
		rnode_start(s->node);
	}
	struct timeval tv = clock_tv(1000);
	r->ev_ask = event_new(r->be->base, -1, EV_PERSIST, on_ask, r);
	evtimer_add(r->ev_ask, &tv);
}

/* The subscriptions are up (again): every queue may have missed a
 * message. */
static void
on_subscribed(void *arg)
{
	struct rd *r = arg;
	r->be->up.wakeup(r->be->up.arg, NULL, 0);
}

/* A message: a key was released (its queue is woken unless this daemon
 * has just given way on it), or another daemon wants a key (a cached lease
 * of it goes). */
static void
on_message(void *arg, const char *channel, size_t channellen, const char *key, size_t keylen)
{
	struct rd *r = arg;
	if (channellen == r->wantedlen && memcmp(channel, r->wanted, r->wantedlen) == 0) {
		cache_wanted(r, key, keylen);
		return;
	}
	r->nmessages++;
	if (!yield_quiet(r, key, keylen))
		r->be->up.wakeup(r->be->up.arg, key, keylen);
}

/* ---- the backend ------------------------------------------------------------ */

/* The node's hooks: what the server's connections tell the policy. */
static const struct rnode_hooks rd_hooks = {
	.up = on_up,
	.down = on_down,
	.subscribed = on_subscribed,
	.message = on_message,
};

/* A TLS context of the settings' files; NULL after logging why. */
static struct tls_client *
rd_tls(const struct rd_settings *c)
{
	char why[512];
	struct tls_client *tls = tls_client_create(c->tls_ca_file, c->tls_cert_file,
	    c->tls_key_file, why, sizeof(why));
	if (tls == NULL)
		log_error("redis backend: TLS: %s", why);
	return tls;
}

/* Set up be->priv with the node made but not started (be->settings
 * given): everything but connecting. */
static struct rd *
rd_init(struct backend *be, struct tls_client *tls)
{
	const struct rd_settings *c = be->settings;
	struct rd *r = xcalloc(1, sizeof(*r));
	r->tls = tls;
	r->be = be;
	r->set = c;
	TAILQ_INIT(&r->retries);
	TAILQ_INIT(&r->yields);
	TAILQ_INIT(&r->locals);
	TAILQ_INIT(&r->cached);
	r->delegs = hashtab_create(64);
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
	r->ev_cache = evtimer_new(be->base, on_cache, r);
	/* no name server answering keeps the loop from ending */
	r->dns = evdns_base_new(be->base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
	    EVDNS_BASE_DISABLE_WHEN_INACTIVE);
	struct rnode_conf nc = {
		.what = "redis",
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
		.require_master = c->nsentinels > 0,
		.min_replicas_ack = c->min_replicas_ack,
		.replica_ack_timeout_ms = c->replica_ack_timeout_ms,
		.acl = r->acl,
	};
	r->node = rnode_create(be->base, r->dns, &nc, &rd_hooks, r);
	be->priv = r;
	return r;
}

/* Set up be->priv and start connecting (the server's name is resolved at
 * every connect, never blocking). 0. */
static int
rd_create(struct backend *be)
{
	const struct rd_settings *c = be->settings;
	struct tls_client *tls = NULL;
	if (c->tls && (tls = rd_tls(c)) == NULL)
		return -1;
	struct rd *r = rd_init(be, tls);
	if (c->nsentinels > 0) {
		/* the master's node starts once a sentinel says where it is */
		sentinels_start(r);
		log_info("redis backend: master '%s' of %zu sentinel%s, db %lld, key prefix "
		    "'%s'%s%s%s", c->master_name, c->nsentinels, c->nsentinels == 1 ? "" : "s",
		    c->db, c->key_prefix, c->tls ? ", TLS" : "", c->username != NULL ?
		    ", user " : "", c->username != NULL ? c->username : "");
		return 0;
	}
	rnode_start(r->node);
	log_info("redis backend: %s:%d db %lld, key prefix '%s'%s%s%s", c->address.host,
	    c->address.port, c->db, c->key_prefix, c->tls ? ", TLS" : "",
	    c->username != NULL ? ", user " : "", c->username != NULL ? c->username : "");
	return 0;
}

/* SIGHUP: read the TLS files again, for the next connects. */
static void
rd_reload(struct backend *be)
{
	struct rd *r = be->priv;
	struct tls_client *tls;
	if (r->tls == NULL || (tls = rd_tls(r->set)) == NULL)
		return;	/* rd_tls said why: the context in force stays */
	rnode_set_tls(r->node, tls);
	for (size_t i = 0; i < r->nsentinels; i++)
		if (r->sentinels[i].node != NULL)
			rnode_set_tls(r->sentinels[i].node, tls);
	tls_client_unref(r->tls);
	r->tls = tls;
	log_info("redis backend: TLS files read again, used from the next connect");
}

/* Close the node (failing what is in flight), free every retry, then
 * be->priv. */
static void
rd_destroy(struct backend *be)
{
	struct rd *r = be->priv;
	struct rd_retry *rt;
	struct rd_op *op;
	r->destroying = true;
	for (size_t i = 0; i < r->nsentinels; i++)
		if (r->sentinels[i].node != NULL)
			rnode_destroy(r->sentinels[i].node);
	free(r->sentinels);
	if (r->ev_ask != NULL)
		event_free(r->ev_ask);
	rnode_destroy(r->node);
	r->node = NULL;
	while ((op = TAILQ_FIRST(&r->settling)) != NULL) {
		TAILQ_REMOVE(&r->settling, op, settle);
		op_complete(op, BE_ERROR, 0, "the backend is shutting down");
	}
	event_free(r->ev_settle);
	later_run(r->later);
	while ((rt = TAILQ_FIRST(&r->retries)) != NULL)
		retry_free(r, rt);
	while ((rt = TAILQ_FIRST(&r->yields)) != NULL)
		retry_free(r, rt);
	struct hashtab_iter it;
	struct hashtab_node *n;
	hashtab_iter_init(&it, r->delegs);
	while ((n = hashtab_next(&it)) != NULL)
		deleg_drop(r, deleg_node(n));
	hashtab_destroy(r->delegs);
	later_destroy(r->later);
	event_free(r->ev_cache);
	if (r->dns != NULL)
		evdns_base_free(r->dns, 1);
	tls_client_unref(r->tls);
	free(r);
	be->priv = NULL;
}

static void
rd_info(struct backend *be, struct evbuffer *out)
{
	struct rd *r = be->priv;
	struct rnode_stats st;
	size_t cached = 0;
	struct rd_deleg *d;
	TAILQ_FOREACH(d, &r->cached, centry)
		cached++;
	rnode_stats(r->node, &st);
	if (r->nsentinels > 0) {
		size_t up = 0;
		for (size_t i = 0; i < r->nsentinels; i++)
			up += r->sentinels[i].node != NULL && rnode_up(r->sentinels[i].node);
		evbuffer_add_printf(out, "backend_master_name:%s\r\nbackend_master:%s\r\n"
		    "backend_sentinels:%zu\r\nbackend_sentinels_up:%zu\r\n", r->set->master_name,
		    r->master[0] != '\0' ? r->master : "unknown", r->nsentinels, up);
	}
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
	    st.address, r->set->db, st.up, st.subscribed, (unsigned long long)st.reconnects,
	    st.scripts_loaded, (unsigned long long)r->ncommands, st.inflight, st.kept,
	    (unsigned long long)r->nrenewals, (unsigned long long)r->nnotowner,
	    (unsigned long long)r->nerrors, (unsigned long long)r->nmessages,
	    (unsigned long long)r->nretries, st.policy,
	    hashtab_count(r->delegs), (unsigned long long)r->nlocal,
	    r->set->lease_cache_ms, cached, (unsigned long long)r->ncache_hits,
	    r->set->min_replicas_ack, (unsigned long long)st.unacked);
}

static const char *
rd_state(struct backend *be)
{
	struct rd *r = be->priv;
	return rnode_up(r->node) ? "connected" : "disconnected";
}

/* Releases in flight or kept for later: shutdown waits for them. */
static size_t
rd_pending(struct backend *be)
{
	struct rd *r = be->priv;
	struct rnode_stats st;
	rnode_stats(r->node, &st);
	return r->releases_inflight + st.kept;
}

/* ---- settings -------------------------------------------------------------- */

#define RD_PORT 6379			/* the port of a URL that gives none */
#define RD_DB_MAX 1000000		/* largest db (the message below says it too) */
#define RD_SET(field) offsetof(struct rd_settings, field)

/* The keys under "backend." that this backend reads, into struct rd_settings. */
static const struct conf_setting rd_settings_table[] = {
	{ .name = "address", .type = CONF_SERVER, .off = RD_SET(address),
	  .defstr = "127.0.0.1:6379" },
	{ .name = "username", .type = CONF_STR, .off = RD_SET(username) },
	{ .name = "password", .type = CONF_SECRET, .off = RD_SET(password) },
	{ .name = "password_file", .type = CONF_SECRET_FILE, .off = RD_SET(password_file),
	  .pair = "password" },
	{ .name = "db", .type = CONF_INT, .off = RD_SET(db), .min = 0, .max = RD_DB_MAX },
	{ .name = "key_prefix", .type = CONF_SHORTSTR, .off = RD_SET(key_prefix), .max = 64,
	  .defstr = "dlock:" },
	{ .name = "connect_timeout_ms", .type = CONF_INT, .off = RD_SET(connect_timeout_ms),
	  .min = 10, .max = 600000, .def = 2000 },
	{ .name = "command_timeout_ms", .type = CONF_INT, .off = RD_SET(command_timeout_ms),
	  .min = 10, .max = 600000, .def = 2000 },
	{ .name = "handoff_limit", .type = CONF_INT, .off = RD_SET(handoff_limit),
	  .min = 1, .max = 1000000, .def = 16 },
	{ .name = "lease_cache_ms", .type = CONF_INT, .off = RD_SET(lease_cache_ms),
	  .min = 0, .max = 1000, .def = 0 },
	{ .name = "min_replicas_ack", .type = CONF_INT, .off = RD_SET(min_replicas_ack),
	  .min = 0, .max = 100, .def = 0 },
	{ .name = "replica_ack_timeout_ms", .type = CONF_INT,
	  .off = RD_SET(replica_ack_timeout_ms), .min = 1, .max = 60000, .def = 100 },
	{ .name = "sentinels", .type = CONF_SERVERLIST, .off = RD_SET(sentinels),
	  .count = RD_SET(nsentinels), .def = RD_SENTINEL_PORT, .optional = 1 },
	{ .name = "master_name", .type = CONF_STR, .off = RD_SET(master_name) },
	{ .name = "sentinel_username", .type = CONF_STR, .off = RD_SET(sentinel_username) },
	{ .name = "sentinel_password", .type = CONF_SECRET, .off = RD_SET(sentinel_password) },
	{ .name = "sentinel_password_file", .type = CONF_SECRET_FILE,
	  .off = RD_SET(sentinel_password_file), .pair = "sentinel_password" },
	{ .name = "tls.enabled", .type = CONF_BOOL, .off = RD_SET(tls), .def = 0 },
	{ .name = "tls.ca_file", .type = CONF_PATH, .off = RD_SET(tls_ca_file) },
	{ .name = "tls.cert_file", .type = CONF_PATH, .off = RD_SET(tls_cert_file) },
	{ .name = "tls.key_file", .type = CONF_PATH, .off = RD_SET(tls_key_file) },
	{ .name = "tls.server_name", .type = CONF_STR, .off = RD_SET(tls_server_name) },
};

/* A renewal that gets no reply is dropped after command_timeout_ms and
 * retried: a lease needs room for that, three times over (a lock is renewed
 * every third of its TTL). */
static uint64_t
rd_min_lease_ms(const void *settings)
{
	const struct rd_settings *set = settings;
	return 3 * (uint64_t)set->command_timeout_ms;
}

/* The "host[:port][/db]" part of a redis URL into *a and *db: NULL, or why
 * not. */
static const char *
rd_url_server(const char *s, struct addr *a, long long *db)
{
	const char *slash = s + strcspn(s, "/"), *d = *slash != '\0' ? slash + 1 : slash, *why;
	char *hostport;
	int rc;
	if (strpbrk(s, "?#") != NULL)
		return "query parameters are not supported";
	if (slash == s)
		return "the host is missing";
	hostport = xmemdup(s, (size_t)(slash - s));
	rc = conf_server_parse(hostport, RD_PORT, a, &why);
	free(hostport);
	if (rc < 0)
		return why;
	*db = 0;
	if (*d == '\0')
		return NULL;
	if (!isdigit((unsigned char)*d) || (d[0] == '0' && d[1] != '\0'))
		return "the database is not a number (expected /0, /1, ...)";
	switch (num_parse(d, strlen(d), 0, RD_DB_MAX, db)) {
	case NUM_OK:
		return NULL;
	case NUM_RANGE:
		return "the database number is out of range (0..1000000)";
	default:
		return "the database is not a number (expected /0, /1, ...)";
	}
}

/* The "host[:port],host[:port].../NAME[/db]" part of a redis-sentinel URL:
 * the sentinels (as written, each checked) into *servers, the master's name
 * into *name (both allocated, the caller frees them) and *db. NULL, or why
 * not. */
static const char *
rd_url_sentinels(const char *s, char **servers, char **name, long long *db)
{
	const char *slash = strchr(s, '/'), *why, *p;
	char *list, *item, *save = NULL, *rest;
	struct addr a;
	*servers = *name = NULL;
	if (strpbrk(s, "?#") != NULL)
		return "query parameters are not supported";
	if (slash == NULL || slash[1] == '\0' || slash[1] == '/')
		return "the master's name is missing (redis-sentinel://host:port/MASTER_NAME)";
	if (slash == s)
		return "the sentinels are missing";
	list = xmemdup(s, (size_t)(slash - s));
	for (item = strtok_r(list, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save))
		if (conf_server_parse(item, RD_SENTINEL_PORT, &a, &why) < 0) {
			free(list);
			return why;
		}
	free(list);
	p = strchr(slash + 1, '/');
	rest = xasprintf("h%s", p != NULL ? p : "");	/* the db, checked as for redis:// */
	why = rd_url_server(rest, &a, db);
	free(rest);
	if (why != NULL)
		return why;
	*servers = xmemdup(s, (size_t)(slash - s));
	*name = p != NULL ? xmemdup(slash + 1, (size_t)(p - slash - 1)) : xstrdup(slash + 1);
	return NULL;
}

/* -b redis://[user[:password]@]host[:port][/db], or rediss:// for TLS:
 * port 6379 and db 0 when left out; user and password may hold %XX
 * escapes. Or redis-sentinel://[user[:password]@]host[:port][,...]/NAME[/db]
 * (rediss-sentinel:// for TLS): the sentinels (port 26379 when left out)
 * and the master's name; user and password are the master's. The URL gives
 * the address (or the sentinels and master), TLS on or off, the user and
 * password (none when it has none, and never the file's password_file) and
 * the db; the file's other settings (TLS files, timeouts, the sentinels'
 * password) stay. 1 if url is not a redis URL; else 0, or -1 with *why a
 * sentence that never holds the password. */
static int
rd_parse_url(const char *url, backend_url_set *set, void *arg, const char **why)
{
	static const char *const schemes[] = { "redis://", "rediss://", "redis-sentinel://",
		"rediss-sentinel://" };
	const char *s = NULL;
	char *user = NULL, *pw = NULL, *text, *servers = NULL, *name = NULL;
	bool tls = false, sentinel = false;
	struct addr a;
	long long db;
	for (size_t i = 0; i < 4 && s == NULL; i++)
		if (strncasecmp(url, schemes[i], strlen(schemes[i])) == 0) {
			s = url + strlen(schemes[i]);
			tls = i % 2 == 1;
			sentinel = i >= 2;
		}
	if (s == NULL)
		return 1;
	*why = NULL;
	if (conf_url_userinfo(s, &user, &pw, &s, why) == 0 && user != NULL && *user != '\0' &&
	    strcmp(user, "default") != 0 && pw == NULL)
		*why = "a user needs a password (redis://user:password@host:port; a "
		    "password alone goes after a colon: redis://:password@host:port)";
	if (*why == NULL)
		*why = sentinel ? rd_url_sentinels(s, &servers, &name, &db) :
		    rd_url_server(s, &a, &db);
	if (*why == NULL) {
		if (!sentinel) {
			text = xasprintf(strchr(a.host, ':') != NULL ? "[%s]:%d" : "%s:%d", a.host,
			    a.port);
			set(arg, "address", text);
			free(text);
		}
		set(arg, "sentinels", sentinel ? servers : "");
		set(arg, "master_name", sentinel ? name : "");
		set(arg, "tls.enabled", tls ? "true" : "false");
		/* "default" without a password: no AUTH at all */
		set(arg, "username", user != NULL && pw != NULL ? user : "");
		set(arg, "password", pw != NULL ? pw : "");
		set(arg, "password_file", "");
		text = xasprintf("%lld", db);
		set(arg, "db", text);
		free(text);
	}
	if (pw != NULL)
		explicit_bzero(pw, strlen(pw));
	free(pw);
	free(user);
	free(servers);
	free(name);
	return *why == NULL ? 0 : -1;
}

/* Whether the name of server (a "host:port") resolves, as the daemon will
 * look it up (getaddrinfo blocks: dlockd -t only); else an error at
 * setting. */
static void
rd_check_name(struct conf *c, const char *setting, const char *host)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	int rc = getaddrinfo(host, NULL, &hints, &ai);
	if (rc != 0) {
		conf_setting_warning(c, setting, "cannot resolve '%s': %s (the daemon starts "
		    "anyway, and resolves it again at every connect)", host, gai_strerror(rc));
		return;
	}
	freeaddrinfo(ai);
}

/* The rules between the settings; deep (dlockd -t): the names resolve and
 * the TLS files can be used. */
static void
rd_check(struct conf *c, const void *settings, int deep)
{
	const struct rd_settings *set = settings;
	if (set->nsentinels > 0 && set->master_name == NULL)
		(void)conf_setting_error(c, "backend.sentinels", "'backend.sentinels' needs "
		    "'backend.master_name': the name the sentinels know the master by");
	if (set->nsentinels == 0 && set->master_name != NULL)
		(void)conf_setting_error(c, "backend.master_name", "'backend.master_name' needs "
		    "'backend.sentinels'");
	if (set->min_replicas_ack > 0 && set->replica_ack_timeout_ms >= set->command_timeout_ms)
		(void)conf_setting_error(c, "backend.replica_ack_timeout_ms",
		    "'backend.replica_ack_timeout_ms' (%lld) must be below "
		    "'backend.command_timeout_ms' (%lld): WAIT holds the connection that long",
		    set->replica_ack_timeout_ms, set->command_timeout_ms);
	if ((set->tls_cert_file == NULL) != (set->tls_key_file == NULL))
		(void)conf_setting_error(c, set->tls_cert_file != NULL ? "backend.tls.cert_file" :
		    "backend.tls.key_file", "'backend.tls.cert_file' and 'backend.tls.key_file' "
		    "go together (a client certificate and its key)");
	if (!deep || c->nerrors > 0)
		return;
	if (set->nsentinels == 0)
		rd_check_name(c, "backend.address", set->address.host);
	for (size_t i = 0; i < set->nsentinels; i++) {
		struct addr a;
		const char *why;
		if (conf_server_parse(set->sentinels[i], RD_SENTINEL_PORT, &a, &why) == 0)
			rd_check_name(c, "backend.sentinels", a.host);
	}
	if (set->tls) {
		char why[512];
		struct tls_client *tls = tls_client_create(set->tls_ca_file, set->tls_cert_file,
		    set->tls_key_file, why, sizeof(why));
		if (tls == NULL)
			(void)conf_setting_error(c, set->tls_cert_file != NULL ?
			    "backend.tls.cert_file" : "backend.tls.ca_file", "TLS: %s", why);
		tls_client_unref(tls);
	}
}

const struct backend_ops be_redis_ops = {
	.name = "redis",
	.local_leases = 0,
	.settings = rd_settings_table,
	.nsettings = sizeof(rd_settings_table) / sizeof(rd_settings_table[0]),
	.settings_size = sizeof(struct rd_settings),
	.parse_url = rd_parse_url,
	.url_form = "redis://host:port",
	.min_lease_ms = rd_min_lease_ms,
	.min_lease_rule = "3 x backend.command_timeout_ms",
	.create = rd_create,
	.destroy = rd_destroy,
	.acquire = rd_acquire,
	.release = rd_release,
	.renew = rd_renew,
	.transfer = rd_transfer,
	.info = rd_info,
	.state = rd_state,
	.pending = rd_pending,
	.drain = rd_drain,
	.reload = rd_reload,
	.problem = rd_problem,
	.check = rd_check,
};

#ifdef DLOCKD_TEST_HOOKS	/* test and fuzz objects only (Makefile) */
/* ---- for the fuzz harness (be_redis_internal.h) ---------------------------- */

int
be_redis_offline(struct backend *be)
{
	be->ops = &be_redis_ops;
	(void)rd_init(be, NULL);
	return 0;
}

void
be_redis_answer(struct backend *be, int script, const struct be_lock *l, unsigned fences,
    be_cb *cb, void *arg, void *reply)
{
	struct rd *r = be->priv;
	char member[RSCRIPT_MEMBER_MAX];
	const char *none[] = { NULL };
	assert(script >= 0 && script < RS_COUNT);
	if (script == RS_RELEASE || script == RS_RENEW)
		lease_member(r, l, member);
	else
		rscript_member(l, member);
	struct rd_op *op = op_new(r, (enum rscript)script, l, member, "l", none, cb, arg);
	op->fences = fences;
	op->sent_ms = clock_ms();
	if (op->script == RS_RELEASE)
		r->releases_inflight++;
	on_reply(op, reply, reply == NULL ? "the connection to redis was lost" : NULL);
}

void
be_redis_unsolicited(struct backend *be, int sub, void *reply)
{
	struct rd *r = be->priv;
	rnode_unsolicited(r->node, sub, reply);
}
#endif
