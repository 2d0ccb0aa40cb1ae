/*
 * be_redis — leases in one Redis server, shared by any number of daemons.
 *
 * A key held exclusively is a string under the configured prefix ("l:" +
 * key) holding "x0:<token>" and expiring at the lease's end; a key held
 * shared or as a semaphore is a sorted set there whose members are
 * "<kind>:<token>" (s0 shared, n<limit> semaphore) scored by the lease's end
 * in the server's clock. Its fence counter is "f:" + key (never expires) and
 * "w:" + key marks that some daemon waits for it. Acquire, release, renew and
 * transfer are Lua scripts, each atomic: expired members are pruned inside
 * them and strings expire by themselves, so the server's clock alone decides
 * when a lease ends.
 *
 * A lease's end only ever moves later until the lease is released: renew
 * keeps the later of the current end and TTL from now. So the end the lock
 * table counts from any reply (the call's send time plus the TTL) is never
 * after the end in Redis, whatever order requests run in. Fences are
 * max(counter + 1, TIME in microseconds), so they keep increasing even after
 * Redis lost the counter (an old snapshot, a lost AOF tail, eviction).
 *
 * Commands go out on one hiredis connection driven by the event loop;
 * everything issued in one loop iteration leaves in one write, so the
 * renewals that the lock table sends at one tick form one pipeline. A second
 * connection subscribes to prefix + "released", where the release script
 * publishes each key it frees while the "w:" mark says a daemon waits; a
 * message wakes the lock table's queue of that key. Messages can be lost, so
 * every BUSY answer also arms a retry at the holder's remaining lease
 * (capped, with jitter).
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
 * hiredis 0.14 has no command timeout: a reply that is later than
 * command_timeout_ms drops the connection, which fails every command in
 * flight. While disconnected, commands fail at once (from the loop), except
 * releases, which are kept and sent when the connection is back; so is a
 * release that Redis answered with an error (LOADING, BUSY, READONLY), which
 * is tried again every second. A kept release is dropped once its lease has
 * ended by itself.
 *
 * It owns the two connections, the scripts and what is in Redis under the
 * prefix. It must not block the event loop (the server's name is resolved
 * once, at start-up), must not complete an operation from inside the call
 * that asked for it, and knows nothing of the lock table's state but what
 * each call says.
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
#include <event2/event.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "clock.h"
#include "codec.h"
#include "conf.h"
#include "hashtab.h"
#include "log.h"
#include "num.h"
#include "xmalloc.h"

#define RD_RETRY_CAP_MS 1000		/* longest sleep of a waiter after BUSY */
#define RD_MARK_MS (4 * RD_RETRY_CAP_MS) /* life of a "someone waits" mark */
#define RD_BACKOFF_MIN_MS 100		/* first reconnect delay */
#define RD_BACKOFF_MAX_MS 5000		/* longest reconnect delay */
#define RD_ARGS 12			/* keys and arguments of one script call at most */
#define RD_DEFER_RETRY_MS 1000		/* retry of releases Redis answered with an error */
#define RD_YIELD_RETRY_MS 100		/* after a yield, this daemon's queue retries then */
#define RD_YIELD_QUIET_MS 80		/* and ignores release messages for the key this
					 * long: its own must not wake it first */
#define RD_MEMBER_MAX (TOKEN_LEN + 16)	/* "<kind>:<token>" and its NUL */

/* The scripts, in the order of enum rd_script. */
enum rd_script { RS_ACQUIRE, RS_RELEASE, RS_RENEW, RS_TRANSFER, RS_COUNT };

#define LUA_NOW "local t = redis.call('TIME') " \
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
#define LUA_KEEP "local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES') " \
	"redis.call('PEXPIREAT', KEYS[1], last[2]) "
/* fence(n): reserve n fences of KEYS[2], the first returned: above the
 * counter and above the clock in us; the counter keeps the last. The clock
 * is ahead of the counter but after a burst of grants in one microsecond:
 * one SET ... GET then does it all */
#define LUA_FENCE "local function fence(n) " \
	"local t = redis.call('TIME') " \
	"local us = tonumber(t[1]) * 1000000 + tonumber(t[2]) " \
	"local old = tonumber(redis.call('SET', KEYS[2], " \
	"  string.format('%.0f', us + n - 1), 'GET') or '0') " \
	"if old < us then return us end " \
	"redis.call('SET', KEYS[2], string.format('%.0f', old + n)) " \
	"return old + 1 end "
/* a lease of KEYS[1] was removed: if some daemon marked that it waits
 * (mark), delete the mark and publish key on channel */
#define LUA_RELEASED(mark, channel, key) \
	"if redis.call('DEL', " #mark ") == 1 then " \
	"  redis.call('PUBLISH', " #channel ", " #key ") end "
/* v = KEYS[1] as a string: the member when one exclusive lease holds it,
 * false when there is none, an error table when it is a sorted set */
#define LUA_STRING "local v = redis.pcall('GET', KEYS[1]) "

static const char *const scripts[RS_COUNT] = {
	/* acquire: KEYS lock, fence, mark; ARGV member, ttl, kind, limit, mark
	 * ms, fences to reserve, wanted channel, key. {1, first fence} | {0, ms
	 * to wait: the first lease to end} (the mark set, the key published on
	 * the wanted channel) | {-1} (another kind) */
	LUA_FENCE
	"local want = ARGV[3] "
	"local function busy(ms) redis.call('SET', KEYS[3], '1', 'PX', ARGV[5]) "
	"  redis.call('PUBLISH', ARGV[7], ARGV[8]) "
	"  return {0, ms} end "
	"if want == 'x0' and redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then "
	"  return {1, fence(tonumber(ARGV[6]))} end "
	"if redis.call('TYPE', KEYS[1]).ok == 'string' then "
	"  if string.sub(want, 1, 1) == 'n' then return {-1} end "
	"  return busy(redis.call('PTTL', KEYS[1])) end "
	LUA_NOW
	"redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) "
	"local n = redis.call('ZCARD', KEYS[1]) "
	"if n > 0 then "
	"  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES') "
	"  local kind = string.sub(first[1], 1, string.find(first[1], ':', 1, true) - 1) "
	"  if kind ~= want and (string.sub(kind, 1, 1) == 'n' or "
	"      string.sub(want, 1, 1) == 'n') then return {-1} end "
	"  if kind ~= want or want == 'x0' or "
	"      (string.sub(want, 1, 1) == 'n' and n >= tonumber(ARGV[4])) then "
	"    return busy(tonumber(first[2]) - now) end "
	"end "
	"if want == 'x0' then "
	"  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) "
	"  return {1, fence(tonumber(ARGV[6]))} end "
	"redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1]) "
	LUA_KEEP
	"return {1, fence(1)}",

	/* release: KEYS lock, mark; ARGV member, channel, key. 1 | 0 (not ours).
	 * An exclusive lease and the mark go in one DEL */
	LUA_STRING
	"if v == ARGV[1] then "
	"  if redis.call('DEL', KEYS[1], KEYS[2]) == 2 then "
	"    redis.call('PUBLISH', ARGV[2], ARGV[3]) end "
	"  return 1 end "
	"if type(v) == 'string' or redis.pcall('ZREM', KEYS[1], ARGV[1]) ~= 1 then "
	"  return 0 end "
	LUA_RELEASED(KEYS[2], ARGV[2], ARGV[3])
	"return 1",

	/* renew: KEYS lock; ARGV member, ttl. The lease lasts at least ttl from
	 * now; a later end is kept. 1 | 0 (not ours any more) */
	LUA_STRING
	"if v == ARGV[1] then "
	"  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then "
	"    redis.call('PEXPIRE', KEYS[1], ARGV[2]) end "
	"  return 1 end "
	"if type(v) == 'string' then return 0 end "
	LUA_NOW
	"local s = redis.call('ZSCORE', KEYS[1], ARGV[1]) "
	"if not s or tonumber(s) <= now then return 0 end "
	"local e = now + tonumber(ARGV[2]) "
	"if tonumber(s) < e then "
	"  redis.call('ZADD', KEYS[1], e, ARGV[1]) "
	LUA_KEEP
	"end "
	"return 1",

	/* transfer (exclusive leases): KEYS lock, fence, mark; ARGV to, from,
	 * ttl, handoffs in a row before this one, handoff limit, channel, key,
	 * fences to reserve. When the run has reached the limit and another
	 * daemon waits (the mark), from is released as by the release script
	 * instead. {1, first fence} | {2} (released: yielded) | {0} (from's
	 * lease had ended) */
	LUA_FENCE
	LUA_STRING
	"if v ~= ARGV[2] then return {0} end "
	"if tonumber(ARGV[4]) >= tonumber(ARGV[5]) and "
	"    redis.call('DEL', KEYS[3]) == 1 then "
	"  redis.call('DEL', KEYS[1]) "
	"  redis.call('PUBLISH', ARGV[6], ARGV[7]) "
	"  return {2} "
	"end "
	"redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3]) "
	"return {1, fence(tonumber(ARGV[8]))}",
};

struct rd;
struct rd_adapter;

/* A script call in flight, or a release waiting for the connection. */
struct rd_op {
	struct rd *r;			/* the backend */
	enum rd_script script;		/* which script */
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
	uint64_t drop_at;		/* a kept release: when its lease has ended anyway */
	int argc;			/* the call: EVALSHA sha numkeys keys... args... */
	const char *argv[RD_ARGS + 3];
	size_t argvlen[RD_ARGS + 3];
	char *buf;			/* the key and every argument but the sha:
					 * the rest of op's allocation */
	TAILQ_ENTRY(rd_op) entry;	/* on r->inflight, r->failing or r->deferred */
};
TAILQ_HEAD(rd_op_list, rd_op);

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
	char member[RD_MEMBER_MAX];	/* the lease in Redis: "x0:<token>" */
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
	TAILQ_ENTRY(rd_local) entry;	/* on r->locals */
};
TAILQ_HEAD(rd_local_list, rd_local);

/* One of the two connections. */
struct rd_link {
	struct rd *r;			/* the backend */
	redisAsyncContext *ctx;		/* NULL while disconnected */
	bool up;			/* connected (and authenticated) */
	bool sub;			/* the subscriber */
	uint64_t backoff_ms;		/* next reconnect delay */
	uint64_t started_ms;		/* when the connection attempt began */
	struct event *ev_reconnect;	/* reconnect timer */
	uint64_t reconnects;		/* connections made after the first */
	bool ever_up;			/* connected at least once */
	bool down_logged;		/* its going down was logged */
};

/* The settings of the backend (backend.* keys; see rd_settings_table). */
struct rd_settings {
	struct addr address;		/* the server */
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
};

static uint64_t rd_min_lease_ms(const void *settings);

struct rd {
	struct backend *be;		/* our backend */
	const struct rd_settings *set;	/* its settings */
	char ip[INET6_ADDRSTRLEN];	/* the server, resolved at start */
	struct rd_link cmd;		/* commands */
	struct rd_link sub;		/* pub/sub */
	char channel[128];		/* prefix + "released" */
	size_t channellen;
	char wanted[128];		/* prefix + "wanted" */
	size_t wantedlen;
	char sha[RS_COUNT][41];		/* SHA1 of each script, once loaded */
	struct rd_op_list inflight;	/* sent, in order */
	struct rd_op_list failing;	/* failed before sending: told from ev_fail */
	struct rd_op_list deferred;	/* releases waiting for the connection */
	struct rd_retry_list retries;	/* BUSY retries */
	struct rd_retry_list yields;	/* retries after a yield (a few at most) */
	struct hashtab *delegs;		/* struct rd_deleg by key */
	struct rd_local_list locals;	/* local handoffs to answer */
	struct rd_deleg_list cached;	/* cached leases, oldest first */
	struct event *ev_cache;		/* releases them when their time is up */
	struct event *ev_fail;		/* completes r->failing and r->locals */
	struct event *ev_watch;		/* checks command timeouts */
	struct event *ev_deferred;	/* sends kept releases again while connected */
	char policy[32];		/* maxmemory-policy, as last read */
	char last_error[128];		/* the error reply last logged, "" when fine */
	uint64_t ncommands;		/* script calls sent */
	uint64_t nrenewals;		/* renewals sent */
	uint64_t nnotowner;		/* renewals or releases that found another owner */
	uint64_t nerrors;		/* calls that failed */
	uint64_t nmessages;		/* released messages received */
	uint64_t nretries;		/* BUSY retries fired */
	uint64_t nlocal;		/* handoffs made without a call to Redis */
	uint64_t ncache_hits;		/* grants of a cached lease */
	bool draining;			/* shutting down: cache nothing */
	bool destroying;		/* rd_destroy runs: keep nothing for later */
	const struct rd_adapter *flushing; /* the connection on_flush writes now */
};

static void link_connect(struct rd_link *l);

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

/* Answer, from the loop, the local handoffs (BE_ERROR when the backend is
 * being destroyed) and the calls that failed before they were sent. */
static void
on_later(evutil_socket_t fd, short what, void *arg)
{
	struct rd *r = arg;
	struct rd_local *lo;
	struct rd_op *op;
	(void)fd;
	(void)what;
	while ((lo = TAILQ_FIRST(&r->locals)) != NULL) {
		struct be_reply rep = { BE_OK, lo->fence, lo->valid_ms, NULL };
		if (r->destroying)
			rep = (struct be_reply){ BE_ERROR, 0, 0, "the backend is shutting down" };
		else if (lo->grant && lo->d == NULL)
			rep = (struct be_reply){ BE_NOTOWNER, 0, 0, "the lease had ended in redis" };
		TAILQ_REMOVE(&r->locals, lo, entry);
		lo->cb(lo->arg, &rep);
		free(lo);
	}
	while ((op = TAILQ_FIRST(&r->failing)) != NULL) {
		TAILQ_REMOVE(&r->failing, op, entry);
		op_complete(op, op->failed, 0, "redis is not connected");
	}
}

/* Complete from the loop: make on_later run. */
static void
later_arm(struct rd *r)
{
	if (TAILQ_EMPTY(&r->failing) && TAILQ_EMPTY(&r->locals))
		event_active(r->ev_fail, EV_TIMEOUT, 0);
}

/* Fail op from the loop (never from inside the call that made it). */
static void
op_fail_later(struct rd_op *op, enum be_status st)
{
	struct rd *r = op->r;
	op->failed = st;
	later_arm(r);
	TAILQ_INSERT_TAIL(&r->failing, op, entry);
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
	struct rd_local *lo = xmalloc(sizeof(*lo));
	lo->cb = cb;
	lo->arg = arg;
	lo->grant = d != NULL;
	lo->d = d;
	lo->fence = fence;
	lo->valid_ms = valid_ms;
	later_arm(r);
	TAILQ_INSERT_TAIL(&r->locals, lo, entry);
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
 * the cap when pttl is not positive), with jitter. quiet_ms > 0 (a yield):
 * release messages for key are ignored that long.
 */
static void
retry_arm(struct rd *r, const char *key, size_t keylen, long long pttl, uint64_t quiet_ms)
{
	uint64_t delay = pttl > 0 && pttl < RD_RETRY_CAP_MS ? (uint64_t)pttl : RD_RETRY_CAP_MS;
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

/* Keep release op for later: sent when the connection is back, or by the
 * retry timer while it is up; dropped once its lease has ended by itself. */
static void
keep_release(struct rd *r, struct rd_op *op)
{
	if (op->drop_at == 0)
		op->drop_at = clock_ms() + op->ttl_ms;
	op->cb = NULL;
	TAILQ_INSERT_TAIL(&r->deferred, op, entry);
	if (r->cmd.up && !evtimer_pending(r->ev_deferred, NULL)) {
		struct timeval tv = clock_tv(RD_DEFER_RETRY_MS);
		evtimer_add(r->ev_deferred, &tv);
	}
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

/* An error reply: logged when it is not the one logged last, so that an
 * outage gives one line, not one per command. */
static void
note_error(struct rd *r, const char *err)
{
	if (strncmp(r->last_error, err, sizeof(r->last_error) - 1) == 0)
		return;
	log_warn("redis answered an error: %s", err);
	snprintf(r->last_error, sizeof(r->last_error), "%s", err);
}

/* A script ran: after errors, say once that Redis answers again. */
static void
note_success(struct rd *r)
{
	if (r->last_error[0] == '\0')
		return;
	log_info("redis runs the scripts again");
	r->last_error[0] = '\0';
}
static void on_script_loaded(redisAsyncContext *ctx, void *reply, void *privdata);

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

/* A script's reply (NULL: the connection went away). */
static void
on_reply(redisAsyncContext *ctx, void *reply, void *privdata)
{
	struct rd_op *op = privdata;
	struct rd *r = op->r;
	redisReply *rep = reply;
	(void)ctx;
	TAILQ_REMOVE(&r->inflight, op, entry);
	if (rep == NULL) {
		/* the connection is going: nothing more may be sent on it */
		r->cmd.up = false;
		/* an acquire or transfer may have run: give its lease back */
		if (op->script == RS_ACQUIRE || op->script == RS_TRANSFER)
			defer_release(r, op);
		if (op->script == RS_RELEASE && r->be->priv != NULL && !r->destroying) {
			/* unknown whether it ran: send it again later */
			release_failed(r, op, "the connection to redis was lost");
			return;
		}
		op_complete(op, BE_ERROR, 0, "the connection to redis was lost");
		return;
	}
	if (rep->type == REDIS_REPLY_ERROR) {
		if (strncmp(rep->str, "NOSCRIPT", 8) == 0) {
			/* the server forgot the script (SCRIPT FLUSH, restart):
			 * run it with EVAL and load it again for the next calls */
			if (r->sha[op->script][0] != '\0') {
				r->sha[op->script][0] = '\0';
				redisAsyncCommand(ctx, on_script_loaded,
				    (void *)(uintptr_t)op->script, "SCRIPT LOAD %s",
				    scripts[op->script]);
			}
			send_op(r, op);
			return;
		}
		note_error(r, rep->str);
		if (op->script == RS_RELEASE && !r->destroying) {
			/* LOADING, BUSY, READONLY...: it did not run */
			release_failed(r, op, "redis answered an error");
			return;
		}
		op_complete(op, BE_ERROR, 0, "redis answered an error");
		return;
	}
	note_success(r);
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

/*
 * Queue op's call on ctx as one RESP array. hiredis's own formatting of an
 * argument vector (sdscatfmt per argument) was the largest user-space cost
 * of a script call in the daemon's profile. REDIS_OK or REDIS_ERR.
 */
static int
op_queue(redisAsyncContext *ctx, struct rd_op *op)
{
	char stack[640], *buf = stack;
	size_t need = 1 + 22, len = 0;
	int rc;
	for (int i = 0; i < op->argc; i++)
		need += 1 + 22 + op->argvlen[i] + 2;
	if (need > sizeof(stack))
		buf = xmalloc(need);
	len += codec_format_header(buf + len, '*', op->argc);
	for (int i = 0; i < op->argc; i++) {
		len += codec_format_header(buf + len, '$', (long long)op->argvlen[i]);
		memcpy(buf + len, op->argv[i], op->argvlen[i]);
		len += op->argvlen[i];
		buf[len++] = '\r';
		buf[len++] = '\n';
	}
	rc = redisAsyncFormattedCommand(ctx, on_reply, op, buf, len);
	if (buf != stack)
		free(buf);
	return rc;
}

/* Send op on the command connection (EVALSHA once the script is loaded). */
static void
send_op(struct rd *r, struct rd_op *op)
{
	if (r->sha[op->script][0] != '\0') {
		op->argv[0] = "EVALSHA";
		op->argv[1] = r->sha[op->script];
		op->argvlen[1] = 40;
	} else {
		op->argv[0] = "EVAL";
		op->argv[1] = scripts[op->script];
		op->argvlen[1] = strlen(scripts[op->script]);
	}
	op->argvlen[0] = strlen(op->argv[0]);
	if (r->cmd.ctx == NULL || op_queue(r->cmd.ctx, op) != REDIS_OK) {
		/* the connection is being torn down */
		if (op->script == RS_RELEASE)
			defer_release(r, op);
		op_fail_later(op, BE_ERROR);
		return;
	}
	op->sent_ms = clock_ms();
	r->ncommands++;
	TAILQ_INSERT_TAIL(&r->inflight, op, entry);
}

/* ---- building calls ------------------------------------------------------ */

/* Kind of a lease as stored in its member: x0, s0 or n<limit>. */
static int
lock_kind(const struct be_lock *l, char *out, size_t outlen)
{
	switch (l->mode) {
	case LOCK_EXCLUSIVE: return snprintf(out, outlen, "x0");
	case LOCK_SHARED: return snprintf(out, outlen, "s0");
	case LOCK_SEMAPHORE: return snprintf(out, outlen, "n%u", l->limit);
	}
	return snprintf(out, outlen, "?");
}

/* The member of l's lease in the sorted set, "<kind>:<token>": the one
 * place it is built. */
static void
lock_member(const struct be_lock *l, char out[RD_MEMBER_MAX])
{
	char kind[16];
	lock_kind(l, kind, sizeof(kind));
	snprintf(out, RD_MEMBER_MAX, "%s:%s", kind, l->token);
}

/* An argument of op_new that stands for the lock's key itself (binary-safe):
 * compared by address. */
static const char arg_key[] = "<key>";

/*
 * A new call of script with nkeys keys named after l's key (each key kind a
 * letter: 'l' lock, 'f' fence, 'w' mark), then ARGV: member (the lease the
 * call takes or releases, kept as op->member), then the string arguments
 * args (NULL-terminated; arg_key for the key itself). The caller owns the
 * call until it is sent or kept; op_free frees it.
 */
static struct rd_op *
op_new(struct rd *r, enum rd_script script, const struct be_lock *l, const char *member,
    const char *keykinds, const char *const *args, be_cb *cb, void *arg)
{
	size_t plen = strlen(r->set->key_prefix), nkeys = strlen(keykinds);
	size_t need = nkeys * (plen + 2 + l->keylen + 1) + strlen(member) + 1;
	size_t nargs = 0;
	for (; args[nargs] != NULL; nargs++)
		if (args[nargs] != arg_key)
			need += strlen(args[nargs]) + 1;
	assert(nkeys + 1 + nargs <= RD_ARGS);
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

	static const char *const numkeys[] = { "0", "1", "2", "3" };
	char *p = op->buf + l->keylen;
	op->argc = 2;
	op->argv[op->argc] = numkeys[nkeys];
	op->argvlen[op->argc++] = 1;
	for (size_t i = 0; i < nkeys; i++) {
		op->argv[op->argc] = p;
		memcpy(p, r->set->key_prefix, plen);
		p[plen] = keykinds[i];
		p[plen + 1] = ':';
		memcpy(p + plen + 2, l->key, l->keylen);
		op->argvlen[op->argc++] = plen + 2 + l->keylen;
		p += plen + 2 + l->keylen + 1;
	}
	for (size_t i = 0; i <= nargs; i++) {
		const char *a = i == 0 ? member : args[i - 1];
		if (a == arg_key) {
			op->argv[op->argc] = op->key;
			op->argvlen[op->argc++] = op->keylen;
			continue;
		}
		size_t n = strlen(a);
		memcpy(p, a, n + 1);
		if (i == 0)
			op->member = p;
		op->argv[op->argc] = p;
		op->argvlen[op->argc++] = n;
		p += n + 1;
	}
	return op;
}

/* A new call of the release script for member, a lease of l's key. */
static struct rd_op *
release_new(struct rd *r, const struct be_lock *l, const char *member, be_cb *cb, void *arg)
{
	/* the message is the key itself */
	const char *args[] = { r->channel, arg_key, NULL };
	return op_new(r, RS_RELEASE, l, member, "lw", args, cb, arg);
}

/* Send op now, or fail it from the loop when the connection is down. */
static void
submit(struct rd *r, struct rd_op *op)
{
	if (!r->cmd.up) {
		op_fail_later(op, BE_ERROR);
		return;
	}
	send_op(r, op);
}

/* The member of l's lease in Redis: its own, or the delegated lease's when
 * l holds the key's delegation. */
static void
lease_member(const struct rd *r, const struct be_lock *l, char out[RD_MEMBER_MAX])
{
	const struct rd_deleg *d = deleg_of(r, l);
	if (d != NULL)
		memcpy(out, d->member, RD_MEMBER_MAX);
	else
		lock_member(l, out);
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
	if (r->cmd.up)
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
	char kind[16], member[RD_MEMBER_MAX], ttl[24], limit[16], mark[16], fences[16];
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
	lock_kind(l, kind, sizeof(kind));
	lock_member(l, member);
	snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)l->ttl_ms);
	snprintf(limit, sizeof(limit), "%u", l->limit);
	snprintf(mark, sizeof(mark), "%d", RD_MARK_MS);
	snprintf(fences, sizeof(fences), "%u", n);
	const char *args[] = { ttl, kind, limit, mark, fences, r->wanted, arg_key, NULL };
	struct rd_op *op = op_new(r, RS_ACQUIRE, l, member, "lfw", args, cb, arg);
	op->fences = n;
	submit(r, op);
}

/* Drop l's lease and publish the key if a daemon waits for it; kept for
 * later while disconnected. */
static void
rd_release(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct rd *r = be->priv;
	char member[RD_MEMBER_MAX];
	struct rd_deleg *d = deleg_of(r, l);
	if (d != NULL && cache_keep(r, d)) {
		local_answer(r, cb, arg, NULL, 0, 0);
		return;
	}
	lease_member(r, l, member);
	if (d != NULL)
		deleg_drop(r, d);
	struct rd_op *op = release_new(r, l, member, cb, arg);
	if (!r->cmd.up) {
		/* tell now that it failed, and release it once redis is back */
		defer_release(r, op);
		op_fail_later(op, BE_ERROR);
		return;
	}
	send_op(r, op);
}

/* Make l's lease last at least l->ttl_ms from now, if it is still ours. */
static void
rd_renew(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct rd *r = be->priv;
	char member[RD_MEMBER_MAX], ttl[24];
	lease_member(r, l, member);
	snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)l->ttl_ms);
	const char *args[] = { ttl, NULL };
	r->nrenewals++;
	submit(r, op_new(r, RS_RENEW, l, member, "l", args, cb, arg));
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
	char fm[RD_MEMBER_MAX], tm[RD_MEMBER_MAX], ttl[24], run[16], limit[24], fences[16];
	struct rd_deleg *d = deleg_of(r, from);
	uint64_t now = clock_ms();
	unsigned n = fences_for(r, to);
	if (d != NULL && deleg_can_hand(d, to, now)) {
		r->nlocal++;
		deleg_hand(r, d, to, now, cb, arg);
		return;
	}
	lease_member(r, from, fm);
	lock_member(to, tm);
	snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)to->ttl_ms);
	snprintf(run, sizeof(run), "%u", from->handoffs);
	snprintf(limit, sizeof(limit), "%lld", r->set->handoff_limit);
	snprintf(fences, sizeof(fences), "%u", n);
	const char *args[] = { fm, ttl, run, limit, r->channel, arg_key, fences, NULL };
	struct rd_op *op = op_new(r, RS_TRANSFER, to, tm, "lfw", args, cb, arg);
	op->fences = n;
	submit(r, op);
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

/* The link is down: fail what was in flight (hiredis does that with NULL
 * replies) and schedule a reconnect with capped exponential backoff; local
 * grants wait for Redis (deleg_distrust). */
static void
link_down(struct rd_link *l, const char *why)
{
	struct rd *r = l->r;
	l->ctx = NULL;
	l->up = false;
	if (!l->sub)
		deleg_distrust(r);
	if (!l->down_logged) {
		l->down_logged = true;
		log_warn("redis %s connection to %s:%d down: %s", l->sub ? "subscriber" :
		    "command", r->ip, r->set->address.port, why);
	}
	uint64_t delay = l->backoff_ms + arc4random_uniform((uint32_t)(l->backoff_ms / 5 + 1));
	l->backoff_ms = l->backoff_ms * 2 > RD_BACKOFF_MAX_MS ? RD_BACKOFF_MAX_MS :
	    l->backoff_ms * 2;
	struct timeval tv = clock_tv(delay);
	evtimer_add(l->ev_reconnect, &tv);
}

static void
on_disconnect(const redisAsyncContext *ctx, int status)
{
	struct rd_link *l = ctx->data;
	(void)status;
	if (l != NULL && l->ctx == ctx)
		link_down(l, ctx->errstr[0] ? ctx->errstr : "closed");
}

static void
on_connect(const redisAsyncContext *ctx, int status)
{
	struct rd_link *l = ctx->data;
	if (status != REDIS_OK && l != NULL && l->ctx == ctx)
		link_down(l, ctx->errstr[0] ? ctx->errstr : "connect failed");
}

/* Drop a link's connection now (timeouts, AUTH failures). */
static void
link_drop(struct rd_link *l, const char *why)
{
	redisAsyncContext *ctx = l->ctx;
	if (ctx == NULL)
		return;
	l->ctx = NULL;	/* on_disconnect must not take it for a new one */
	l->up = false;	/* what the NULL replies start must not use it */
	ctx->data = NULL;
	redisAsyncFree(ctx);	/* pending replies come back NULL */
	link_down(l, why);
}

static void
on_script_loaded(redisAsyncContext *ctx, void *reply, void *privdata)
{
	struct rd *r = ctx->data != NULL ? ((struct rd_link *)ctx->data)->r : NULL;
	redisReply *rep = reply;
	size_t i = (size_t)(uintptr_t)privdata;
	if (r == NULL || rep == NULL)
		return;
	if (rep->type == REDIS_REPLY_STRING && rep->len == 40)
		memcpy(r->sha[i], rep->str, 41);
	else
		log_warn("redis: SCRIPT LOAD failed: %s",
		    rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
}

/* Send the releases kept for later, but those whose lease has ended. */
static void
send_deferred(struct rd *r)
{
	struct rd_op_list batch = TAILQ_HEAD_INITIALIZER(batch);
	struct rd_op *op;
	uint64_t now = clock_ms();
	TAILQ_CONCAT(&batch, &r->deferred, entry);
	while ((op = TAILQ_FIRST(&batch)) != NULL) {
		TAILQ_REMOVE(&batch, op, entry);
		if (now >= op->drop_at)
			op_free(op);
		else
			send_op(r, op);
	}
}

static void
on_deferred(evutil_socket_t fd, short what, void *arg)
{
	struct rd *r = arg;
	(void)fd;
	(void)what;
	if (r->cmd.up)
		send_deferred(r);
}

/* CONFIG GET maxmemory-policy: anything but noeviction lets Redis drop
 * leases and fence counters when it runs out of memory. Logged when the
 * value is new. */
static void
on_policy(redisAsyncContext *ctx, void *reply, void *privdata)
{
	struct rd *r = ctx->data != NULL ? ((struct rd_link *)ctx->data)->r : NULL;
	redisReply *rep = reply;
	(void)privdata;
	if (r == NULL || rep == NULL)
		return;
	if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
	    rep->element[1]->type != REDIS_REPLY_STRING) {
		if (strcmp(r->policy, "unknown") != 0)
			log_info("redis: cannot read maxmemory-policy (%s); make sure it is "
			    "noeviction", rep->type == REDIS_REPLY_ERROR ? rep->str :
			    "unexpected reply");
		snprintf(r->policy, sizeof(r->policy), "unknown");
		return;
	}
	const char *p = rep->element[1]->str;
	if (strcmp(p, r->policy) != 0 && strcmp(p, "noeviction") != 0)
		log_warn("redis maxmemory-policy is %s: under memory pressure Redis may evict "
		    "leases, and locks would be granted twice; set it to noeviction", p);
	snprintf(r->policy, sizeof(r->policy), "%s", p);
}

/* The command link is ready: load the scripts, check the eviction policy,
 * send the releases kept while it was down. */
static void
cmd_ready(struct rd *r)
{
	for (size_t i = 0; i < RS_COUNT; i++)
		redisAsyncCommand(r->cmd.ctx, on_script_loaded, (void *)(uintptr_t)i,
		    "SCRIPT LOAD %s", scripts[i]);
	redisAsyncCommand(r->cmd.ctx, on_policy, NULL, "CONFIG GET maxmemory-policy");
	send_deferred(r);
}

/* A link is usable: connected, authenticated and (subscriber) subscribed. */
static void
link_ready(struct rd_link *l)
{
	l->up = true;
	l->down_logged = false;
	l->backoff_ms = RD_BACKOFF_MIN_MS;
	if (l->ever_up)
		l->reconnects++;
	l->ever_up = true;
	log_info("redis %s connection to %s:%d up", l->sub ? "subscriber" : "command",
	    l->r->ip, l->r->set->address.port);
	if (!l->sub)
		cmd_ready(l->r);
}

/* A reply on the subscriber link: the subscriptions are up (every queue
 * may have missed a message), a key was released (its queue is woken unless
 * this daemon has just given way on it), or another daemon wants a key (a
 * cached lease of it goes). */
static void
on_message(redisAsyncContext *ctx, void *reply, void *privdata)
{
	struct rd_link *l = ctx->data;
	redisReply *rep = reply;
	(void)privdata;
	if (l == NULL || rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements < 3 ||
	    rep->element[0]->type != REDIS_REPLY_STRING)
		return;
	struct rd *r = l->r;
	if (strcmp(rep->element[0]->str, "subscribe") == 0) {
		if (rep->element[2]->type != REDIS_REPLY_INTEGER || rep->element[2]->integer < 2)
			return;	/* the first of the two channels */
		link_ready(l);
		/* messages may have been missed while unsubscribed */
		r->be->up.wakeup(r->be->up.arg, NULL, 0);
	} else if (strcmp(rep->element[0]->str, "message") == 0 &&
	    rep->element[1]->type == REDIS_REPLY_STRING &&
	    rep->element[2]->type == REDIS_REPLY_STRING) {
		const char *key = rep->element[2]->str;
		size_t keylen = rep->element[2]->len;
		if (rep->element[1]->len == r->wantedlen &&
		    memcmp(rep->element[1]->str, r->wanted, r->wantedlen) == 0) {
			cache_wanted(r, key, keylen);
			return;
		}
		r->nmessages++;
		if (!yield_quiet(r, key, keylen))
			r->be->up.wakeup(r->be->up.arg, key, keylen);
	}
}

/* The AUTH / SELECT / PING that opens a link: its reply says it is up. */
static void
on_hello(redisAsyncContext *ctx, void *reply, void *privdata)
{
	struct rd_link *l = ctx->data;
	redisReply *rep = reply;
	(void)privdata;
	if (l == NULL || l->ctx != ctx || rep == NULL)
		return;
	if (rep->type == REDIS_REPLY_ERROR) {
		log_error("redis %s:%d refused the connection: %s", l->r->ip,
		    l->r->set->address.port, rep->str);
		/* inside a callback: hiredis frees it on return */
		ctx->data = NULL;
		l->ctx = NULL;
		l->up = false;
		redisAsyncFree(ctx);
		link_down(l, "refused");
		return;
	}
	if (!l->sub)
		link_ready(l);
}

/*
 * The glue between a hiredis connection and the event loop. hiredis 0.14's
 * own libevent adapter re-adds a one-shot read event after every read and
 * adds and deletes a write event around every write: each an epoll_ctl
 * call. This one keeps one persistent read event, and writes what was
 * issued during a loop iteration at the end of it (an activated event, run
 * after the ones already active), so that it leaves in one write; a write
 * event is used only while the connection is being made or the socket is
 * full. hiredis owns it: cleanup runs when the context is freed.
 */
struct rd_adapter {
	struct rd *r;			/* the backend */
	redisAsyncContext *ac;		/* its connection */
	struct event *rev;		/* readable (persistent) */
	struct event *wev;		/* writable: connecting, or the socket is full */
	struct event *flush;		/* write what was issued (activated) */
};

static void
ad_on_read(evutil_socket_t fd, short what, void *arg)
{
	struct rd_adapter *a = arg;
	(void)fd;
	(void)what;
	redisAsyncHandleRead(a->ac);
}

static void
ad_on_write(evutil_socket_t fd, short what, void *arg)
{
	struct rd_adapter *a = arg;
	(void)fd;
	(void)what;
	redisAsyncHandleWrite(a->ac);
}

/* Write what was issued; a is freed if the write fails (r outlives it). */
static void
ad_on_flush(evutil_socket_t fd, short what, void *arg)
{
	struct rd_adapter *a = arg;
	struct rd *r = a->r;
	(void)fd;
	(void)what;
	r->flushing = a;
	redisAsyncHandleWrite(a->ac);
	r->flushing = NULL;
}

static void
ad_add_read(void *arg)
{
	struct rd_adapter *a = arg;
	if (!event_pending(a->rev, EV_READ, NULL))
		event_add(a->rev, NULL);
}

static void
ad_del_read(void *arg)
{
	struct rd_adapter *a = arg;
	event_del(a->rev);
}

/* hiredis has something to write: at the end of this loop iteration, or
 * when the socket can take it (not connected yet, or a flush that could not
 * write everything). */
static void
ad_add_write(void *arg)
{
	struct rd_adapter *a = arg;
	if (!(a->ac->c.flags & REDIS_CONNECTED) || a->r->flushing == a)
		event_add(a->wev, NULL);
	else
		event_active(a->flush, EV_TIMEOUT, 0);
}

static void
ad_del_write(void *arg)
{
	struct rd_adapter *a = arg;
	event_del(a->wev);
}

static void
ad_cleanup(void *arg)
{
	struct rd_adapter *a = arg;
	event_free(a->rev);
	event_free(a->wev);
	event_free(a->flush);
	free(a);
}

/* Attach ac to r's event loop with an rd_adapter. */
static void
ad_attach(struct rd *r, redisAsyncContext *ac)
{
	struct rd_adapter *a = xcalloc(1, sizeof(*a));
	a->r = r;
	a->ac = ac;
	a->rev = event_new(r->be->base, ac->c.fd, EV_READ | EV_PERSIST, ad_on_read, a);
	a->wev = event_new(r->be->base, ac->c.fd, EV_WRITE, ad_on_write, a);
	a->flush = event_new(r->be->base, -1, 0, ad_on_flush, a);
	ac->ev.addRead = ad_add_read;
	ac->ev.delRead = ad_del_read;
	ac->ev.addWrite = ad_add_write;
	ac->ev.delWrite = ad_del_write;
	ac->ev.cleanup = ad_cleanup;
	ac->ev.data = a;
	event_add(a->rev, NULL);
	event_add(a->wev, NULL);	/* writable: the connection is made */
}

static void
link_connect(struct rd_link *l)
{
	struct rd *r = l->r;
	redisAsyncContext *ctx = redisAsyncConnect(r->ip, r->set->address.port);
	if (ctx == NULL || ctx->err) {
		if (ctx != NULL)
			redisAsyncFree(ctx);
		l->ctx = NULL;
		link_down(l, "cannot create a connection");
		return;
	}
	ctx->data = l;
	ad_attach(r, ctx);
	l->ctx = ctx;
	l->started_ms = clock_ms();
	redisAsyncSetConnectCallback(ctx, on_connect);
	redisAsyncSetDisconnectCallback(ctx, on_disconnect);
	/* pipelined behind the connect: AUTH, SELECT, then the last reply says
	 * the link is usable */
	if (r->set->password != NULL)
		redisAsyncCommand(ctx, NULL, NULL, "AUTH %s", r->set->password);
	if (!l->sub && r->set->db != 0)
		redisAsyncCommand(ctx, NULL, NULL, "SELECT %lld", r->set->db);
	if (l->sub) {
		redisAsyncCommand(ctx, on_hello, NULL, "PING");
		redisAsyncCommand(ctx, on_message, NULL, "SUBSCRIBE %b %b", r->channel,
		    r->channellen, r->wanted, r->wantedlen);
	} else {
		redisAsyncCommand(ctx, on_hello, NULL, "PING");
	}
}

static void
on_reconnect(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	link_connect(arg);
}

/* Every 100 ms: a connection attempt or a reply that is overdue drops the
 * link (hiredis 0.14 has no timeouts of its own). */
static void
on_watch(evutil_socket_t fd, short what, void *arg)
{
	struct rd *r = arg;
	uint64_t now = clock_ms();
	(void)fd;
	(void)what;
	struct rd_op *oldest = TAILQ_FIRST(&r->inflight);
	if (r->cmd.ctx != NULL && oldest != NULL &&
	    now - oldest->sent_ms > (uint64_t)r->set->command_timeout_ms)
		link_drop(&r->cmd, "a reply is overdue (backend.command_timeout_ms)");
	struct rd_link *links[] = { &r->cmd, &r->sub };
	for (size_t i = 0; i < 2; i++)
		if (links[i]->ctx != NULL && !links[i]->up &&
		    now - links[i]->started_ms > (uint64_t)r->set->connect_timeout_ms)
			link_drop(links[i], "connect timed out (backend.connect_timeout_ms)");
}

/* ---- the backend ------------------------------------------------------------ */

/* A link not connected yet, with its reconnect timer. */
static void
link_init(struct rd *r, struct rd_link *l, bool sub)
{
	l->r = r;
	l->sub = sub;
	l->backoff_ms = RD_BACKOFF_MIN_MS;
	l->ev_reconnect = evtimer_new(r->be->base, on_reconnect, l);
}

/* Set up be->priv with both links down (be->settings given): everything
 * but resolving the server and connecting. */
static struct rd *
rd_init(struct backend *be)
{
	const struct rd_settings *c = be->settings;
	struct rd *r = xcalloc(1, sizeof(*r));
	r->be = be;
	r->set = c;
	TAILQ_INIT(&r->inflight);
	TAILQ_INIT(&r->failing);
	TAILQ_INIT(&r->deferred);
	TAILQ_INIT(&r->retries);
	TAILQ_INIT(&r->yields);
	TAILQ_INIT(&r->locals);
	TAILQ_INIT(&r->cached);
	r->delegs = hashtab_create(64);
	r->channellen = (size_t)snprintf(r->channel, sizeof(r->channel), "%sreleased",
	    c->key_prefix);
	r->wantedlen = (size_t)snprintf(r->wanted, sizeof(r->wanted), "%swanted",
	    c->key_prefix);

	struct timeval tick = clock_tv(100);
	r->ev_fail = event_new(be->base, -1, 0, on_later, r);
	r->ev_watch = event_new(be->base, -1, EV_PERSIST, on_watch, r);
	r->ev_deferred = evtimer_new(be->base, on_deferred, r);
	r->ev_cache = evtimer_new(be->base, on_cache, r);
	link_init(r, &r->cmd, false);
	link_init(r, &r->sub, true);
	evtimer_add(r->ev_watch, &tick);
	be->priv = r;
	return r;
}

/* Set up be->priv: resolve the server once (start-up may block), then
 * start both connections. 0, or -1 after logging why. */
static int
rd_create(struct backend *be)
{
	const struct rd_settings *c = be->settings;
	char ip[INET6_ADDRSTRLEN];

	/* start-up may block: resolve the server's name once, here */
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	int rc = getaddrinfo(c->address.host, NULL, &hints, &ai);
	if (rc != 0) {
		log_error("redis backend: cannot resolve %s: %s", c->address.host,
		    gai_strerror(rc));
		return -1;
	}
	getnameinfo(ai->ai_addr, ai->ai_addrlen, ip, sizeof(ip), NULL, 0, NI_NUMERICHOST);
	freeaddrinfo(ai);

	struct rd *r = rd_init(be);
	memcpy(r->ip, ip, sizeof(r->ip));
	link_connect(&r->cmd);
	link_connect(&r->sub);
	log_info("redis backend: %s:%d db %lld, key prefix '%s'", r->ip, c->address.port,
	    c->db, c->key_prefix);
	return 0;
}

/* Drop both links (failing what is in flight), free what is kept for
 * later and every retry, then be->priv. */
static void
rd_destroy(struct backend *be)
{
	struct rd *r = be->priv;
	struct rd_retry *rt;
	struct rd_op *op;
	struct rd_link *links[] = { &r->cmd, &r->sub };
	r->destroying = true;
	for (size_t i = 0; i < 2; i++) {
		redisAsyncContext *ctx = links[i]->ctx;
		links[i]->ctx = NULL;
		links[i]->up = false;
		if (ctx != NULL) {
			ctx->data = NULL;
			redisAsyncFree(ctx);	/* fails what is in flight */
		}
		event_free(links[i]->ev_reconnect);
	}
	on_later(-1, 0, r);
	while ((op = TAILQ_FIRST(&r->deferred)) != NULL) {
		TAILQ_REMOVE(&r->deferred, op, entry);
		op_free(op);
	}
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
	event_free(r->ev_fail);
	event_free(r->ev_watch);
	event_free(r->ev_deferred);
	event_free(r->ev_cache);
	free(r);
	be->priv = NULL;
}

static void
rd_info(struct backend *be, struct evbuffer *out)
{
	struct rd *r = be->priv;
	size_t loaded = 0, inflight = 0, deferred = 0, cached = 0;
	struct rd_op *op;
	struct rd_deleg *d;
	TAILQ_FOREACH(d, &r->cached, centry)
		cached++;
	for (size_t i = 0; i < RS_COUNT; i++)
		loaded += r->sha[i][0] != '\0';
	TAILQ_FOREACH(op, &r->inflight, entry)
		inflight++;
	TAILQ_FOREACH(op, &r->deferred, entry)
		deferred++;
	evbuffer_add_printf(out,
	    "backend_address:%s:%d\r\nbackend_db:%lld\r\nbackend_connected:%d\r\n"
	    "backend_subscribed:%d\r\nbackend_reconnects_total:%llu\r\n"
	    "backend_scripts_loaded:%zu\r\nbackend_commands_total:%llu\r\n"
	    "backend_inflight:%zu\r\nbackend_deferred_releases:%zu\r\n"
	    "backend_renewals_total:%llu\r\nbackend_lost_total:%llu\r\n"
	    "backend_command_errors_total:%llu\r\nbackend_release_messages_total:%llu\r\n"
	    "backend_retries_total:%llu\r\nbackend_maxmemory_policy:%s\r\n"
	    "backend_delegated_keys:%zu\r\nbackend_local_handoffs_total:%llu\r\n"
	    "backend_lease_cache_ms:%lld\r\nbackend_cached_leases:%zu\r\n"
	    "backend_cache_hits_total:%llu\r\n",
	    r->ip, r->set->address.port, r->set->db, r->cmd.up, r->sub.up,
	    (unsigned long long)(r->cmd.reconnects + r->sub.reconnects), loaded,
	    (unsigned long long)r->ncommands, inflight, deferred,
	    (unsigned long long)r->nrenewals, (unsigned long long)r->nnotowner,
	    (unsigned long long)r->nerrors, (unsigned long long)r->nmessages,
	    (unsigned long long)r->nretries, r->policy[0] != '\0' ? r->policy : "unknown",
	    hashtab_count(r->delegs), (unsigned long long)r->nlocal,
	    r->set->lease_cache_ms, cached, (unsigned long long)r->ncache_hits);
}

static const char *
rd_state(struct backend *be)
{
	struct rd *r = be->priv;
	return r->cmd.up ? "connected" : "disconnected";
}

/* Releases in flight or kept for later: shutdown waits for them. */
static size_t
rd_pending(struct backend *be)
{
	struct rd *r = be->priv;
	struct rd_op *op;
	size_t n = 0;
	TAILQ_FOREACH(op, &r->inflight, entry)
		n += op->script == RS_RELEASE;
	TAILQ_FOREACH(op, &r->deferred, entry)
		n++;
	return n;
}

/* ---- settings -------------------------------------------------------------- */

#define RD_PORT 6379			/* the port of a URL that gives none */
#define RD_DB_MAX 1000000		/* largest db (the message below says it too) */
#define RD_SET(field) offsetof(struct rd_settings, field)

/* The keys under "backend." that this backend reads, into struct rd_settings. */
static const struct conf_setting rd_settings_table[] = {
	{ .name = "address", .type = CONF_SERVER, .off = RD_SET(address),
	  .defstr = "127.0.0.1:6379" },
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

/* -b redis://[[default]:password@]host[:port][/db]: port 6379 and db 0 when
 * left out; user and password may hold %XX escapes. The URL gives the
 * address, the password (none when it has none, and never the file's
 * password_file) and the db. 1 if url is not a redis URL; else 0, or -1 with
 * *why a sentence that never holds the password. */
static int
rd_parse_url(const char *url, backend_url_set *set, void *arg, const char **why)
{
	const char *s = url + strlen("redis://"), *at, *colon;
	char *user, *pw = NULL, *text;
	struct addr a;
	long long db;
	if (strncasecmp(url, "rediss://", 9) == 0) {
		*why = "TLS (rediss://) is not supported";
		return -1;
	}
	if (strncasecmp(url, "redis://", 8) != 0)
		return 1;
	*why = NULL;
	if ((at = strrchr(s, '@')) != NULL) {
		colon = memchr(s, ':', (size_t)(at - s));
		user = conf_url_decode(s, (size_t)((colon != NULL ? colon : at) - s));
		if (user == NULL)
			*why = "bad %-escape in the user name";
		else if (*user != '\0' && strcmp(user, "default") != 0)
			*why = colon != NULL ? "only the user 'default' is supported" :
			    "only the user 'default' is supported (a password goes after a colon: "
			    "redis://:password@host:port)";
		else if (colon != NULL &&
		    (pw = conf_url_decode(colon + 1, (size_t)(at - colon - 1))) == NULL)
			*why = memmem(colon, (size_t)(at - colon), "%00", 3) != NULL ?
			    "the password contains a NUL byte" : "bad %-escape in the password";
		free(user);
		s = at + 1;
	}
	if (*why == NULL)
		*why = rd_url_server(s, &a, &db);
	if (*why == NULL) {
		text = xasprintf(strchr(a.host, ':') != NULL ? "[%s]:%d" : "%s:%d", a.host, a.port);
		set(arg, "address", text);
		free(text);
		set(arg, "password", pw != NULL ? pw : "");
		set(arg, "password_file", "");
		text = xasprintf("%lld", db);
		set(arg, "db", text);
		free(text);
	}
	if (pw != NULL)
		explicit_bzero(pw, strlen(pw));
	free(pw);
	return *why == NULL ? 0 : -1;
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
};

#ifdef DLOCKD_TEST_HOOKS	/* test and fuzz objects only (Makefile) */
/* ---- for the fuzz harness (be_redis_internal.h) ---------------------------- */

int
be_redis_offline(struct backend *be)
{
	be->ops = &be_redis_ops;
	(void)rd_init(be);
	return 0;
}

void
be_redis_answer(struct backend *be, int script, const struct be_lock *l, unsigned fences,
    be_cb *cb, void *arg, void *reply)
{
	struct rd *r = be->priv;
	char member[RD_MEMBER_MAX];
	const char *none[] = { NULL };
	assert(script >= 0 && script < RS_COUNT);
	if (script == RS_RELEASE || script == RS_RENEW)
		lease_member(r, l, member);
	else
		lock_member(l, member);
	struct rd_op *op = op_new(r, (enum rd_script)script, l, member, "l", none, cb, arg);
	op->fences = fences;
	op->sent_ms = clock_ms();
	TAILQ_INSERT_TAIL(&r->inflight, op, entry);
	on_reply(NULL, reply, op);
}

void
be_redis_unsolicited(struct backend *be, int sub, void *reply)
{
	struct rd *r = be->priv;
	redisAsyncContext ac;
	memset(&ac, 0, sizeof(ac));
	ac.data = sub ? &r->sub : &r->cmd;
	if (sub)
		on_message(&ac, reply, NULL);
	else
		on_policy(&ac, reply, NULL);
}
#endif
