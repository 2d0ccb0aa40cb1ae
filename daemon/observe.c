/*
 * observe — who leads each key, and the changes of it (see observe.h).
 *
 * A key asked about has a record: a ring of its last OBS_HISTORY states,
 * the clients waiting for a change of it, and the follows of it. A record
 * nobody waits on or follows is idle, kept (with its history, for the next
 * OBSERVE of a client's loop) up to OBS_IDLE_MAX of them, the oldest freed
 * first. A key with no record has no history: asked about, it starts one
 * with its state now, numbered with the revision now, which no state it had
 * before can have passed.
 */
#include "observe.h"

#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "hashtab.h"
#include "locktab.h"
#include "xmalloc.h"

#define OBS_BUCKETS 64		/* the record table's first size */

/* One remembered state. */
struct obs_entry {
	uint64_t revision;	/* the change that made it */
	uint64_t term;		/* see struct obs_state */
	char *value;		/* owned, or NULL */
	size_t valuelen;
	const char *kind;	/* static */
	unsigned holders;
};

struct obs_client;
struct obs_follow;
TAILQ_HEAD(obs_client_list, obs_client);
TAILQ_HEAD(obs_follow_list, obs_follow);

/* A key asked about. */
struct obs_key {
	struct hashtab_node hnode;	/* in o->keys, keyed by name */
	struct obs_entry hist[OBS_HISTORY]; /* a ring, oldest at first */
	unsigned first;			/* the oldest entry */
	unsigned n;			/* entries, 1 or more */
	struct obs_client_list waits;	/* clients waiting for a change */
	struct obs_follow_list follows;	/* follows of it */
	unsigned refs;			/* waits and follows */
	TAILQ_ENTRY(obs_key) ientry;	/* on o->idle while refs is 0 */
	size_t len;			/* the name's length */
	char name[];			/* the key (binary-safe) */
};
TAILQ_HEAD(obs_key_list, obs_key);

/* A client following a key. */
struct obs_follow {
	struct obs_client *c;		/* who */
	struct obs_key *k;		/* what */
	TAILQ_ENTRY(obs_follow) kentry;	/* on k->follows */
	TAILQ_ENTRY(obs_follow) centry;	/* on c->follows */
};

struct obs_client {
	struct obs *o;			/* the registry */
	obs_cb *cb;			/* told of answers and pushes */
	void *arg;			/* its argument */
	struct obs_key *wk;		/* the key waited on, or NULL */
	uint64_t after;			/* ... for a revision above this */
	struct event *timer;		/* its WAIT; made when first needed */
	struct obs_follow_list follows;	/* keys followed */
	TAILQ_ENTRY(obs_client) wentry;	/* on wk->waits */
};

struct obs {
	struct event_base *base;	/* for the clients' timers */
	struct locktab *lt;		/* whose changes are told */
	struct hashtab *keys;		/* every record */
	struct obs_key_list idle;	/* records with no refs, oldest first */
	size_t nidle;			/* on idle */
	uint64_t revision;		/* the last change's number */
	struct obs_stats stats;		/* waiting, follows, changes */
};

static struct obs_key *
key_of(struct hashtab_node *n)
{
	return (struct obs_key *)(void *)((char *)n - offsetof(struct obs_key, hnode));
}

static struct obs_key *
key_find(const struct obs *o, const char *key, size_t keylen)
{
	struct hashtab_node *n = hashtab_find(o->keys, key, keylen);
	return n != NULL ? key_of(n) : NULL;
}

/* The newest state of k. */
static const struct obs_entry *
key_last(const struct obs_key *k)
{
	return &k->hist[(k->first + k->n - 1) % OBS_HISTORY];
}

static void
entry_state(const struct obs_entry *e, struct obs_state *out)
{
	out->value = e->value;
	out->valuelen = e->valuelen;
	out->term = e->term;
	out->revision = e->revision;
	out->kind = e->kind;
	out->holders = e->holders;
}

/* Remember the lock table's state of k now as its newest, numbered rev;
 * false (nothing remembered) when it is the same as the newest. */
static bool
key_record(struct obs *o, struct obs_key *k, uint64_t rev)
{
	struct lt_leader l;
	struct obs_entry *e;

	locktab_leader_now(o->lt, k->name, k->len, &l);
	if (k->n > 0) {
		e = &k->hist[(k->first + k->n - 1) % OBS_HISTORY];
		if (e->term == l.term && e->holders == l.holders && strcmp(e->kind, l.kind) == 0 &&
		    (e->value != NULL) == (l.value != NULL) && (e->value == NULL ||
		    (e->valuelen == l.valuelen && memcmp(e->value, l.value, l.valuelen) == 0)))
			return false;
	}
	if (k->n == OBS_HISTORY) {
		free(k->hist[k->first].value);
		k->first = (k->first + 1) % OBS_HISTORY;
		k->n--;
	}
	e = &k->hist[(k->first + k->n) % OBS_HISTORY];
	k->n++;
	e->revision = rev;
	e->term = l.term;
	e->value = l.value != NULL ? xmemdup(l.value, l.valuelen) : NULL;
	e->valuelen = l.valuelen;
	e->kind = l.kind;
	e->holders = l.holders;
	o->stats.changes++;
	return true;
}

static void
key_free(struct obs *o, struct obs_key *k)
{
	hashtab_remove(o->keys, &k->hnode);
	TAILQ_REMOVE(&o->idle, k, ientry);
	o->nidle--;
	for (unsigned i = 0; i < k->n; i++)
		free(k->hist[(k->first + i) % OBS_HISTORY].value);
	free(k);
}

/* The record of key, made (idle) with its state now when there is none. */
static struct obs_key *
key_get(struct obs *o, const char *key, size_t keylen)
{
	struct obs_key *k = key_find(o, key, keylen);
	if (k != NULL)
		return k;
	while (o->nidle >= OBS_IDLE_MAX)
		key_free(o, TAILQ_FIRST(&o->idle));
	k = xcalloc(1, sizeof(*k) + keylen + 1);
	memcpy(k->name, key, keylen);
	k->len = keylen;
	TAILQ_INIT(&k->waits);
	TAILQ_INIT(&k->follows);
	hashtab_insert(o->keys, &k->hnode, k->name, keylen);
	TAILQ_INSERT_TAIL(&o->idle, k, ientry);
	o->nidle++;
	key_record(o, k, o->revision);
	return k;
}

static void
key_ref(struct obs *o, struct obs_key *k)
{
	if (k->refs++ == 0) {
		TAILQ_REMOVE(&o->idle, k, ientry);
		o->nidle--;
	}
}

static void
key_unref(struct obs *o, struct obs_key *k)
{
	if (--k->refs == 0) {
		TAILQ_INSERT_TAIL(&o->idle, k, ientry);
		o->nidle++;
		while (o->nidle > OBS_IDLE_MAX)
			key_free(o, TAILQ_FIRST(&o->idle));
	}
}

/* The first state of k after revision after, or NULL. */
static const struct obs_entry *
key_after(const struct obs_key *k, uint64_t after)
{
	for (unsigned i = 0; i < k->n; i++) {
		const struct obs_entry *e = &k->hist[(k->first + i) % OBS_HISTORY];
		if (e->revision > after)
			return e;
	}
	return NULL;
}

/* Take c's wait off its key. */
static void
wait_end(struct obs_client *c)
{
	struct obs_key *k = c->wk;
	if (k == NULL)
		return;
	TAILQ_REMOVE(&k->waits, c, wentry);
	c->wk = NULL;
	c->o->stats.waiting--;
	if (c->timer != NULL)
		evtimer_del(c->timer);
	key_unref(c->o, k);
}

/* The lock table's change hook: number the change, and for a key with a
 * record remember its new state and tell its waiters and followers. */
static void
on_change(void *arg, const char *key, size_t keylen)
{
	struct obs *o = arg;
	struct obs_key *k;
	struct obs_client *c;
	struct obs_follow *f;
	struct obs_state st;

	o->revision++;
	if ((k = key_find(o, key, keylen)) == NULL || !key_record(o, k, o->revision))
		return;
	entry_state(key_last(k), &st);
	key_ref(o, k);		/* the callbacks may end the last wait or follow */
	for (;;) {
		/* a client that asked after a revision to come waits on */
		TAILQ_FOREACH(c, &k->waits, wentry)
			if (c->after < st.revision)
				break;
		if (c == NULL)
			break;
		wait_end(c);
		c->cb(c->arg, OBS_CHANGED, k->name, k->len, &st);
	}
	TAILQ_FOREACH(f, &k->follows, kentry)
		f->c->cb(f->c->arg, OBS_PUSH, k->name, k->len, &st);
	key_unref(o, k);
}

struct obs *
obs_create(struct event_base *base, struct locktab *lt)
{
	struct obs *o = xcalloc(1, sizeof(*o));
	o->base = base;
	o->lt = lt;
	o->keys = hashtab_create(OBS_BUCKETS);
	TAILQ_INIT(&o->idle);
	locktab_set_change(lt, on_change, o);
	return o;
}

void
obs_destroy(struct obs *o)
{
	if (o == NULL)
		return;
	locktab_set_change(o->lt, NULL, NULL);
	while (!TAILQ_EMPTY(&o->idle))
		key_free(o, TAILQ_FIRST(&o->idle));
	hashtab_destroy(o->keys);
	free(o);
}

void
obs_now(struct obs *o, const char *key, size_t keylen, struct obs_state *out)
{
	struct obs_key *k = key_find(o, key, keylen);
	struct lt_leader l;

	/* due deadlines first (a lease run out is a change) */
	locktab_leader(o->lt, key, keylen, &l);
	if (k == NULL)
		k = key_get(o, key, keylen);
	entry_state(key_last(k), out);
}

int
obs_after(struct obs *o, const char *key, size_t keylen, uint64_t after, struct obs_state *out)
{
	struct lt_leader l;
	struct obs_key *k;
	const struct obs_entry *e;

	locktab_leader(o->lt, key, keylen, &l);
	k = key_get(o, key, keylen);
	if ((e = key_after(k, after)) == NULL)
		return 0;
	entry_state(e, out);
	return 1;
}

struct obs_client *
obs_client_create(struct obs *o, obs_cb *cb, void *arg)
{
	struct obs_client *c = xcalloc(1, sizeof(*c));
	c->o = o;
	c->cb = cb;
	c->arg = arg;
	TAILQ_INIT(&c->follows);
	return c;
}

void
obs_client_destroy(struct obs_client *c)
{
	if (c == NULL)
		return;
	wait_end(c);
	while (!TAILQ_EMPTY(&c->follows)) {
		struct obs_follow *f = TAILQ_FIRST(&c->follows);
		obs_client_unfollow(c, f->k->name, f->k->len);
	}
	if (c->timer != NULL)
		event_free(c->timer);
	free(c);
}

static void
on_wait_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct obs_client *c = arg;
	struct obs_key *k = c->wk;
	(void)fd;
	(void)what;
	if (k == NULL)
		return;
	key_ref(c->o, k);	/* for its name during the call */
	wait_end(c);
	c->cb(c->arg, OBS_TIMEOUT, k->name, k->len, NULL);
	key_unref(c->o, k);
}

void
obs_client_wait(struct obs_client *c, const char *key, size_t keylen, uint64_t after,
    int64_t wait_ms)
{
	struct obs_key *k;

	wait_end(c);
	k = key_get(c->o, key, keylen);
	key_ref(c->o, k);
	c->wk = k;
	c->after = after;
	TAILQ_INSERT_TAIL(&k->waits, c, wentry);
	c->o->stats.waiting++;
	if (wait_ms >= 0) {
		struct timeval tv = { (time_t)(wait_ms / 1000), (suseconds_t)(wait_ms % 1000) * 1000 };
		if (c->timer == NULL)
			c->timer = evtimer_new(c->o->base, on_wait_timeout, c);
		evtimer_add(c->timer, &tv);
	}
}

int
obs_client_cancel(struct obs_client *c)
{
	if (c == NULL || c->wk == NULL)
		return 0;
	wait_end(c);
	return 1;
}

/* c's follow of key, or NULL. */
static struct obs_follow *
follow_find(const struct obs_client *c, const char *key, size_t keylen)
{
	struct obs_follow *f;
	TAILQ_FOREACH(f, &c->follows, centry)
		if (f->k->len == keylen && memcmp(f->k->name, key, keylen) == 0)
			return f;
	return NULL;
}

int
obs_client_follow(struct obs_client *c, const char *key, size_t keylen)
{
	if (follow_find(c, key, keylen) != NULL)
		return -1;
	struct obs_follow *f = xcalloc(1, sizeof(*f));
	f->c = c;
	f->k = key_get(c->o, key, keylen);
	key_ref(c->o, f->k);
	TAILQ_INSERT_TAIL(&f->k->follows, f, kentry);
	TAILQ_INSERT_TAIL(&c->follows, f, centry);
	c->o->stats.follows++;
	return 0;
}

int
obs_client_unfollow(struct obs_client *c, const char *key, size_t keylen)
{
	struct obs_follow *f = follow_find(c, key, keylen);
	if (f == NULL)
		return 0;
	TAILQ_REMOVE(&f->k->follows, f, kentry);
	TAILQ_REMOVE(&c->follows, f, centry);
	c->o->stats.follows--;
	key_unref(c->o, f->k);
	free(f);
	return 1;
}

void
obs_stats(const struct obs *o, struct obs_stats *out)
{
	*out = o->stats;
	out->keys = hashtab_count(o->keys);
	out->revision = o->revision;
}
