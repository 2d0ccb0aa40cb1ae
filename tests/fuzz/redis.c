/*
 * redis — fuzz the redis backend's handling of Redis's replies
 * (daemon/redis/be_redis.c), through hiredis's reader as the daemon gets them.
 *
 * The input is a few steering bytes, then bytes "Redis" sends, split into
 * replies by hiredis's redisReader (RESP2). A backend is set up that never
 * connects (be_redis_internal.h); each steering byte then does one thing:
 * hands the next reply to the backend as the answer to an acquire, release,
 * renew or transfer script call of a lock (NULL once the replies run out:
 * the connection went away), as a pub/sub message, or as the eviction
 * policy; asks the backend for an operation itself (local handoffs of a
 * delegated lease are answered without Redis); or runs the event loop once.
 * Settings vary: handoff_limit 1 or 4, lease_cache_ms 0 or 500.
 *
 * It checks that every operation's callback runs exactly once (by the
 * backend's destruction at the latest), BE_BUSY only for an acquire or a
 * transfer, a lease granted has a fence of at least 1, and a grant made
 * without Redis (under a delegation) has a fence of the block the last
 * reply that delegated the key reserved, increasing. ASan and the leak check
 * watch the rest.
 */
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "be_redis_internal.h"
#include "conf.h"
#include "fuzz.h"
#include "xmalloc.h"

#define NKEY 2
#define MAXOPS 256

/* One operation asked of the backend. */
struct rec {
	int script;		/* 0 acquire, 1 release, 2 renew, 3 transfer */
	int key;		/* key index */
	unsigned fences;	/* fences it reserves (replies) */
	bool reply;		/* answered by a reply given (else by the backend) */
	int calls;		/* callbacks */
};

static struct event_base *base;
static const void *settings[4];		/* handoff_limit 1/4 x lease_cache_ms 0/500 */
static struct conf *confs[4];		/* that hold them */
static struct rec recs[MAXOPS];
static unsigned nrecs;
static int answering = -1;		/* the record a reply is given for now */
static struct { uint64_t first, n, last; } blk[NKEY];	/* delegated fences */

static const char *const keys[NKEY] = { "k0", "k1" };

/* Load the settings of the four variants, once. */
static void
setup(void)
{
	static const char *const yaml[4] = {
		"backend:\n  type: redis\n  handoff_limit: 1\n",
		"backend:\n  type: redis\n  handoff_limit: 4\n",
		"backend:\n  type: redis\n  handoff_limit: 1\n  lease_cache_ms: 500\n",
		"backend:\n  type: redis\n  handoff_limit: 4\n  lease_cache_ms: 500\n",
	};
	char path[64];
	int fd = memfd_create("redis.yaml", 0);

	base = event_base_new();
	FUZZ_CHECK(fd >= 0 && base != NULL);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	for (int i = 0; i < 4; i++) {
		size_t n = strlen(yaml[i]);
		FUZZ_CHECK(ftruncate(fd, 0) == 0 && pwrite(fd, yaml[i], n, 0) == (ssize_t)n);
		confs[i] = conf_create();
		FUZZ_CHECK(conf_load(confs[i], path) == 0 && conf_finish(confs[i]) == 0);
		settings[i] = confs[i]->backend_settings;
	}
	close(fd);
}

/* The callback of every operation: once, and what it may say. */
/* A look's answer: arg counts the calls. */
static void
on_leader(void *arg, const struct be_leader *l)
{
	(*(unsigned *)arg)++;
	FUZZ_CHECK(l->status == BE_OK || l->status == BE_ERROR);
	if (l->status != BE_OK)
		return;
	FUZZ_CHECK(l->holders > 0 || (l->term == 0 && l->value == NULL));
	FUZZ_CHECK(l->value == NULL || l->holders > 0);
}

static void
on_done(void *arg, const struct be_reply *r)
{
	struct rec *rc = arg;
	int k = rc->key;

	FUZZ_CHECK(rc->calls++ == 0);
	FUZZ_CHECK(r->status != BE_BUSY || rc->script == 0 || rc->script == 3);
	if (r->status != BE_OK || (rc->script != 0 && rc->script != 3))
		return;
	FUZZ_CHECK(r->fence >= 1);
	if (answering == (int)(rc - recs)) {
		/* granted by the reply: a block of fences when it reserved some */
		if (rc->fences > 1) {
			blk[k].first = blk[k].last = r->fence;
			blk[k].n = rc->fences;
		}
		return;
	}
	/* granted here, under the key's delegation */
	FUZZ_CHECK(blk[k].n > 1);
	FUZZ_CHECK(r->fence > blk[k].last && r->fence - blk[k].first < blk[k].n);
	blk[k].last = r->fence;
}

/* The backend's calls up to the lock table (wakeup, expire). */
static void
on_wakeup(void *arg, const char *key, size_t keylen)
{
	(void)arg;
	FUZZ_CHECK(key != NULL || keylen == 0);
}

/* A new record of an operation. */
static struct rec *
rec_new(int script, int key, unsigned fences)
{
	struct rec *rc = &recs[nrecs++];
	*rc = (struct rec){ script, key, fences, false, 0 };
	return rc;
}

/*
 * How many of the n bytes at p to give hiredis: up to the first array whose
 * announced size is over 1024 elements. hiredis 0.14 allocates what an
 * array announces before its elements come (a server that announces
 * 2^31 elements makes it ask for 16 GB): the Redis server is trusted with
 * that, and the harness does not test hiredis.
 */
static size_t
stream_len(const uint8_t *p, size_t n)
{
	size_t at = 0;

	while (at < n) {
		const uint8_t *nl = memchr(p + at, '\n', n - at);
		if (nl == NULL)
			break;
		size_t next = (size_t)(nl - p) + 1;
		long long v = 0;
		for (size_t i = at + 1; i < next && p[i] >= '0' && p[i] <= '9' && v < 1000000; i++)
			v = v * 10 + (p[i] - '0');
		if (p[at] == '*' && v > 1024)
			return at;
		if (p[at] == '$' && v > 0)
			next += (size_t)v + 2;
		at = next;
	}
	return n;
}

/* The lock a steering byte b names: key, token, mode. */
static void
lock_of(unsigned b, struct be_lock *l, char token[TOKEN_LEN + 1])
{
	memset(token, 'a' + (b >> 4 & 3), TOKEN_LEN);
	token[TOKEN_LEN] = '\0';
	*l = (struct be_lock){ .key = keys[b >> 3 & 1], .keylen = 2,
		.mode = (b >> 6) == 3 ? LOCK_SHARED : LOCK_EXCLUSIVE, .token = token,
		.ttl_ms = (b & 1) ? 3000 : 30000, .queued = (b >> 6) & 1 ? 3 : 0,
		.detached = (b >> 7) & (b >> 2) & 1 };
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const unsigned fences[4] = { 1, 2, 4, 1 };
	struct fuzz_in in = { data, size };
	struct backend be;
	char token[TOKEN_LEN + 1], token2[TOKEN_LEN + 1];
	struct be_lock l, to;

	fuzz_quiet();
	if (base == NULL)
		setup();
	unsigned v = fuzz_byte(&in) & 3, nsteps = fuzz_byte(&in) % 64;
	nsteps = nsteps < in.n ? nsteps : (unsigned)in.n;
	const uint8_t *steps = in.p;
	redisReader *rd = redisReaderCreate();
	FUZZ_CHECK(rd != NULL);
	size_t len = in.n > nsteps ? stream_len(in.p + nsteps, in.n - nsteps) : 0;
	if (len > 0)
		FUZZ_CHECK(redisReaderFeed(rd, (const char *)in.p + nsteps, len) == REDIS_OK);

	memset(&be, 0, sizeof(be));
	be.base = base;
	be.settings = settings[v];
	be.up = (struct backend_up){ .wakeup = on_wakeup, .expire = on_wakeup };
	FUZZ_CHECK(be_redis_offline(&be) == 0);
	nrecs = 0;
	memset(blk, 0, sizeof(blk));

	for (unsigned i = 0; i < nsteps; i++) {
		unsigned b = steps[i], c = i + 1 < nsteps ? steps[i + 1] : 0;
		void *reply = NULL;
		struct rec *rc;

		if ((b & 7) <= 5 && redisReaderGetReply(rd, &reply) != REDIS_OK)
			reply = NULL;	/* the reader failed: as the connection does */
		switch (b & 7) {
		case 0: case 1: case 2: case 3:
			lock_of(c, &l, token);
			rc = rec_new((int)(b & 3), c >> 3 & 1,
			    (b & 3) == 0 || (b & 3) == 3 ? fences[b >> 4 & 3] : 1);
			rc->reply = true;
			answering = (int)(rc - recs);
			be_redis_answer(&be, rc->script, &l, rc->fences, on_done, rc, reply);
			answering = -1;
			i++;
			break;
		case 4:
			if (b & 0x80) {
				/* a look (LEADER): told once, a state that holds
				 * together */
				unsigned told = 0;
				be_redis_look_answer(&be, keys[b >> 3 & 1], 2, on_leader, &told,
				    reply);
				FUZZ_CHECK(told == 1);
			} else if (reply != NULL) {
				be_redis_unsolicited(&be, 1, reply);
			}
			break;
		case 5:
			if (reply != NULL)
				be_redis_unsolicited(&be, 0, reply);
			break;
		case 6:
			lock_of(c, &l, token);
			rc = rec_new((int)(b >> 3 & 3), c >> 3 & 1, 1);
			if (rc->script == 0) {
				be.ops->acquire(&be, &l, on_done, rc);
			} else if (rc->script == 1) {
				be.ops->release(&be, &l, on_done, rc);
			} else if (rc->script == 2) {
				be.ops->renew(&be, &l, on_done, rc);
			} else {
				lock_of(c ^ 0x30, &to, token2);
				to.key = l.key;
				be.ops->transfer(&be, &l, &to, on_done, rc);
			}
			i++;
			break;
		default:
			FUZZ_CHECK(event_base_loop(base, EVLOOP_NONBLOCK) >= 0);
			break;
		}
		if (reply != NULL)
			freeReplyObject(reply);
		if (nrecs >= MAXOPS - 1)
			break;
	}
	be.ops->destroy(&be);
	for (unsigned i = 0; i < nrecs; i++)
		FUZZ_CHECK(recs[i].calls == 1);
	redisReaderFree(rd);
	return 0;
}
