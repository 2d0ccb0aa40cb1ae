/*
 * observe — who leads each key, and the changes of it (see observe.h).
 *
 * A key asked about has a record: a ring of its last OBS_HISTORY states,
 * the clients waiting for a change of it, and the follows of it. A record
 * nobody waits on or follows is idle, kept (with its history, for the next
 * OBSERVE of a client's loop) up to OBS_IDLE_MAX of them, the oldest freed
 * first. A key with no record has no history: asked about, it starts one
 * with its state now, numbered with the revision now, which no state it had
 * before can have passed. On a backend shared by daemons (remote), a record
 * watches its key in the backend while it lives, its first state numbered
 * with the next revision when the backend's answer comes.
 */
#include "observe.h"

#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "backend.h"
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
struct obs_key;

/* A read of a key's state in flight: the record it is for, NULL once that
 * is gone (the answer is then dropped). */
struct obs_read {
	struct obs_key *k;
};
TAILQ_HEAD(obs_client_list, obs_client);
TAILQ_HEAD(obs_follow_list, obs_follow);

/* A key asked about. */
struct obs_key {
	struct hashtab_node hnode;	/* in o->keys, keyed by name */
	struct obs_entry hist[OBS_HISTORY]; /* a ring, oldest at first */
	unsigned first;			/* the oldest entry */
	unsigned n;			/* entries: 1 or more, 0 while a remote
					 * key's first read is on its way */
	uint64_t version;		/* remote: the backend's version of the
					 * newest state */
	struct obs_read *reading;	/* remote: the read in flight, or NULL */
	bool reread;			/* ... and another is wanted after it */
	bool dirty;			/* remote: changed here since the read in
					 * flight was sent; LEADER waits for the
					 * read after it (read your own writes) */
	struct obs *obs;		/* the registry */
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
	bool now;			/* ... by obs_client_now: a read failing
					 * ends it */
	struct event *timer;		/* its WAIT; made when first needed */
	uint64_t answered;		/* the revision its obs_client_now wait was
					 * last answered with: not pushed again */
	struct obs_follow_list follows;	/* keys followed */
	TAILQ_ENTRY(obs_client) wentry;	/* on wk->waits */
};

struct obs {
	struct event_base *base;	/* for the clients' timers */
	struct locktab *lt;		/* whose changes are told */
	struct backend *be;		/* its backend */
	bool remote;			/* the backend tells leaders: states come
					 * from it, not from the lock table */
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

/* The lock table's state of k now (its strings valid until it changes). */
static void
local_state(const struct obs *o, const struct obs_key *k, struct obs_state *out)
{
	struct lt_leader l;
	locktab_leader_now(o->lt, k->name, k->len, &l);
	*out = (struct obs_state){ .value = l.value, .valuelen = l.valuelen, .term = l.term,
	    .kind = l.kind, .holders = l.holders };
}

/* A state as the backend tells it. */
static void
remote_state(const struct be_leader *l, struct obs_state *out)
{
	*out = (struct obs_state){ .value = l->value, .valuelen = l->valuelen,
	    .term = l->term, .kind = l->holders > 0 ? locktab_mode_name(l->mode) : "free",
	    .holders = l->holders };
}

/* Remember st as k's newest state, numbered rev; false (nothing
 * remembered) when it is the same as the newest. */
static bool
key_record(struct obs *o, struct obs_key *k, const struct obs_state *st, uint64_t rev)
{
	struct obs_entry *e;

	if (k->n > 0) {
		e = &k->hist[(k->first + k->n - 1) % OBS_HISTORY];
		if (e->term == st->term && e->holders == st->holders &&
		    strcmp(e->kind, st->kind) == 0 && (e->value != NULL) == (st->value != NULL) &&
		    (e->value == NULL || (e->valuelen == st->valuelen &&
		    memcmp(e->value, st->value, st->valuelen) == 0)))
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
	e->term = st->term;
	e->value = st->value != NULL ? xmemdup(st->value, st->valuelen) : NULL;
	e->valuelen = st->valuelen;
	e->kind = st->kind;
	e->holders = st->holders;
	o->stats.changes++;
	return true;
}

static void
key_free(struct obs *o, struct obs_key *k)
{
	hashtab_remove(o->keys, &k->hnode);
	TAILQ_REMOVE(&o->idle, k, ientry);
	o->nidle--;
	if (o->remote)
		o->be->ops->watch(o->be, k->name, k->len, 0);
	if (k->reading != NULL)
		k->reading->k = NULL;
	for (unsigned i = 0; i < k->n; i++)
		free(k->hist[(k->first + i) % OBS_HISTORY].value);
	free(k);
}

static void key_read(struct obs *o, struct obs_key *k);

/* The record of key, made (idle) when there is none: with its state now,
 * or (remote) watched, its state being read. */
static struct obs_key *
key_get(struct obs *o, const char *key, size_t keylen)
{
	struct obs_key *k = key_find(o, key, keylen);
	if (k != NULL)
		return k;
	while (o->nidle >= OBS_IDLE_MAX)
		key_free(o, TAILQ_FIRST(&o->idle));
	k = xcalloc(1, sizeof(*k) + keylen + 1);
	k->obs = o;
	memcpy(k->name, key, keylen);
	k->len = keylen;
	TAILQ_INIT(&k->waits);
	TAILQ_INIT(&k->follows);
	hashtab_insert(o->keys, &k->hnode, k->name, keylen);
	TAILQ_INSERT_TAIL(&o->idle, k, ientry);
	o->nidle++;
	if (o->remote) {
		o->be->ops->watch(o->be, k->name, k->len, 1);
		key_read(o, k);
	} else {
		struct obs_state st;
		local_state(o, k, &st);
		key_record(o, k, &st, o->revision);
	}
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
	c->now = false;
	c->o->stats.waiting--;
	if (c->timer != NULL)
		evtimer_del(c->timer);
	key_unref(c->o, k);
}

/* k's newest state is new: tell its waiters and followers. */
static void
key_tell(struct obs *o, struct obs_key *k)
{
	struct obs_client *c;
	struct obs_follow *f;
	struct obs_state st;

	entry_state(key_last(k), &st);
	key_ref(o, k);		/* the callbacks may end the last wait or follow */
	for (;;) {
		/* a client that asked after a revision to come waits on */
		TAILQ_FOREACH(c, &k->waits, wentry)
			if (c->after < st.revision)
				break;
		if (c == NULL)
			break;
		if (c->now)
			c->answered = st.revision;
		wait_end(c);
		c->cb(c->arg, OBS_CHANGED, k->name, k->len, &st);
	}
	/* a FOLLOW whose first state was just its answer is not pushed it */
	TAILQ_FOREACH(f, &k->follows, kentry)
		if (f->c->answered != st.revision)
			f->c->cb(f->c->arg, OBS_PUSH, k->name, k->len, &st);
	key_unref(o, k);
}

/* The backend told k's state (remote): remember it with the next revision
 * if it is new, and tell. A state older than the newest (a message that
 * comes after a read that saw past it) is not. */
static void
key_remote(struct obs *o, struct obs_key *k, const struct be_leader *l)
{
	struct obs_state st;
	if (k->n > 0 && l->version <= k->version)
		return;
	k->version = l->version;
	remote_state(l, &st);
	if (key_record(o, k, &st, o->revision + 1)) {
		o->revision++;
		key_tell(o, k);
	}
}

/* Answer the LEADERs of k waiting for a read after a change here, with
 * k's newest state (when the read found nothing newer, nobody else does). */
static void
key_tell_now(struct obs_key *k)
{
	struct obs_client *c;
	struct obs_state st;

	while (k->n > 0) {
		TAILQ_FOREACH(c, &k->waits, wentry)
			if (c->now)
				break;
		if (c == NULL)
			break;
		entry_state(key_last(k), &st);
		c->answered = st.revision;
		wait_end(c);
		c->cb(c->arg, OBS_CHANGED, k->name, k->len, &st);
	}
}

/* The answer to a read of a remote key's state. */
static void
on_read(void *arg, const struct be_leader *l)
{
	struct obs_read *rd = arg;
	struct obs_key *k = rd->k;
	struct obs *o;
	struct obs_client *c;

	free(rd);
	if (k == NULL)
		return;		/* the record is gone */
	o = k->obs;
	k->reading = NULL;
	key_ref(o, k);		/* through the callbacks */
	if (l->status == BE_OK) {
		key_remote(o, k, l);
	} else {
		/* LEADERs waiting for a first state are told; OBSERVEs wait on */
		while (k->n == 0) {
			TAILQ_FOREACH(c, &k->waits, wentry)
				if (c->now)
					break;
			if (c == NULL)
				break;
			wait_end(c);
			c->cb(c->arg, OBS_ERROR, k->name, k->len, NULL);
		}
	}
	if (k->reread) {
		k->reread = false;
		key_read(o, k);
	} else if (k->dirty) {
		k->dirty = false;
		key_tell_now(k);
	}
	key_unref(o, k);
}

/* Read k's state from the backend (remote); one read at a time. */
static void
key_read(struct obs *o, struct obs_key *k)
{
	if (k->reading != NULL) {
		k->reread = true;
		return;
	}
	k->reading = xmalloc(sizeof(*k->reading));
	k->reading->k = k;
	o->be->ops->leader(o->be, k->name, k->len, on_read, k->reading);
}

/* The lock table's change hook: number the change, and for a key with a
 * record remember its new state and tell its waiters and followers. On a
 * remote backend the backend tells the changes instead. */
static void
on_change(void *arg, const char *key, size_t keylen)
{
	struct obs *o = arg;
	struct obs_key *k;
	struct obs_state st;

	if (o->remote) {
		/* the backend tells the change; a LEADER here waits for it */
		if (hashtab_count(o->keys) != 0 && (k = key_find(o, key, keylen)) != NULL) {
			k->dirty = true;
			key_read(o, k);
		}
		return;
	}
	o->revision++;
	/* nobody asked about any key: no hashing on the lock path */
	if (hashtab_count(o->keys) == 0)
		return;
	if ((k = key_find(o, key, keylen)) == NULL)
		return;
	local_state(o, k, &st);
	if (key_record(o, k, &st, o->revision))
		key_tell(o, k);
}

/* The backend's word on a watched key: its state, or that it must be read. */
static void
on_remote(void *arg, const char *key, size_t keylen, const struct be_leader *l)
{
	struct obs *o = arg;
	struct obs_key *k;

	if (!o->remote || (k = key_find(o, key, keylen)) == NULL)
		return;
	if (l == NULL)
		key_read(o, k);
	else
		key_remote(o, k, l);
}

struct obs *
obs_create(struct event_base *base, struct locktab *lt, struct backend *be)
{
	struct obs *o = xcalloc(1, sizeof(*o));
	o->base = base;
	o->lt = lt;
	o->be = be;
	o->remote = !be->ops->local_leases && be->ops->leader != NULL &&
	    be->ops->watch != NULL;
	o->keys = hashtab_create(OBS_BUCKETS);
	TAILQ_INIT(&o->idle);
	locktab_set_change(lt, on_change, on_remote, o);
	return o;
}

void
obs_destroy(struct obs *o)
{
	struct hashtab_iter it;
	struct hashtab_node *n;

	if (o == NULL)
		return;
	locktab_set_change(o->lt, NULL, NULL, NULL);
	/* every client is gone: what is left is idle, or being read */
	hashtab_iter_init(&it, o->keys);
	while ((n = hashtab_next(&it)) != NULL) {
		struct obs_key *k = key_of(n);
		if (k->refs > 0) {	/* put on idle, as key_free expects */
			k->refs = 0;
			TAILQ_INSERT_TAIL(&o->idle, k, ientry);
			o->nidle++;
		}
	}
	while (!TAILQ_EMPTY(&o->idle))
		key_free(o, TAILQ_FIRST(&o->idle));
	hashtab_destroy(o->keys);
	free(o);
}

int
obs_now(struct obs *o, const char *key, size_t keylen, struct obs_state *out)
{
	struct obs_key *k;
	struct lt_leader l;

	/* due deadlines first (a lease run out is a change) */
	locktab_leader(o->lt, key, keylen, &l);
	k = key_get(o, key, keylen);
	if (k->n == 0)
		return 0;
	entry_state(key_last(k), out);
	return 1;
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

int
obs_client_now(struct obs_client *c, const char *key, size_t keylen, struct obs_state *out)
{
	if (obs_now(c->o, key, keylen, out) && !key_find(c->o, key, keylen)->dirty)
		return 1;
	obs_client_wait(c, key, keylen, 0, -1);	/* the first state will do */
	c->now = true;
	return 0;
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
