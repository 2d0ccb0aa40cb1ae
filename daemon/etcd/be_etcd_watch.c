/*
 * be_etcd_watch — the etcd backend's watch: one stream per daemon over every
 * key under the prefix, deletes only (puts too while observers watch keys:
 * see below), from the revision it has reached. A
 * delete of the key a waiting entry waits for wakes its lock key's queue
 * (the lock table asks again); a delete of a held key by someone else
 * expires its holding. A stream that ends is started again after a pause
 * that grows while it keeps failing; one whose revision was compacted away
 * starts again from the present, and every waiting key looks again.
 * Acquires wait until the stream is created (et_ready), so that no delete
 * after their answer is missed.
 *
 * Keys observed (ops->watch, for observe.c) are read again at each put or
 * delete in their range, at the revision the stream has reached, with the
 * revisions of the puts, so that every leader is told (et_leader_watched,
 * be_etcd_leader.c). When the stream is created from the present (a start
 * while disconnected, a compaction: changes may have been missed) all of
 * them are told changed with no state (up.changed NULL: the observer reads
 * them as they are now); when it goes on from where it stopped, nothing is
 * missed, and only the keys whose read for the observers failed are: a read
 * of now would pass the puts it replays, whose leaders would then be
 * dropped as older than that read. While any key is observed the stream carries puts as
 * well; it is started again, from where it stopped, when the first key is
 * observed and when the last one is not any more.
 */
#include "be_etcd_core.h"
#include "be_etcd_force.h"
#include "be_etcd_leader.h"
#include "be_etcd_lease.h"
#include "be_etcd_watch.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "backoff.h"
#include "clock.h"
#include "etcd.h"
#include "hashtab.h"
#include "log.h"
#include "xmalloc.h"

/* ---- the watch stream ----------------------------------------------------- */

/* The end of the prefix range of s (len bytes): the caller frees it. */
static char *
prefix_end(const char *s, size_t len, size_t *endlen)
{
	char *e = xmemdup(s, len);
	while (len > 0 && (unsigned char)e[len - 1] == 0xff)
		len--;
	if (len == 0) {
		e[0] = '\0';	/* every key */
		*endlen = 1;
		return e;
	}
	e[len - 1]++;
	*endlen = len;
	return e;
}

/* (Re)start the watch of every key under the prefix: deletes only, from
 * where it stopped. */
void
et_watch_start(struct et *r)
{
	const char *p = r->set->key_prefix;
	size_t endlen;
	char *end = prefix_end(p, strlen(p), &endlen);
	Etcd__WatchCreateRequest__FilterType noput = ETCD__WATCH_CREATE_REQUEST__FILTER_TYPE__NOPUT;
	Etcd__WatchCreateRequest req;
	etcd__watch_create_request__init(&req);
	req.key = et_bin(p, strlen(p));
	req.range_end = et_bin(end, endlen);
	if (r->nwatched == 0) {
		req.filters = &noput;
		req.n_filters = 1;
	}
	if (r->watch_rev > 0)
		req.start_revision = r->watch_rev + 1;
	r->watch_from_now = r->watch_rev == 0;
	r->watch_ready = false;
	etcd_watch(r->cli, &req);
	free(end);
}


/* Wake every key with a waiting entry (after a gap in the stream). */
static void
wake_all(struct et *r)
{
	struct hashtab_iter it;
	struct hashtab_node *n;
	hashtab_iter_init(&it, r->keys);
	while ((n = hashtab_next(&it)) != NULL) {
		struct et_key *k = (struct et_key *)(void *)n;
		struct et_entry *e;
		TAILQ_FOREACH(e, &k->entries, entry)
			if (e->state == E_WAITING) {
				et_wake_later(r, k);
				break;
			}
	}
}

/* A delete in the range of a lock key of ours, at revision rev, of the
 * etcd key ekey (len bytes). The watch does not ask for the previous value
 * (prev_kv costs etcd a read per event): keys are told apart by name and by
 * revision, a delete at rev being of a key created before rev. */
static void
watch_delete(struct et *r, const char *ekey, size_t len, int64_t rev)
{
	const char *slash = memrchr(ekey, '/', len);
	struct et_key *k = slash != NULL ? et_key_find_path(r, ekey, (size_t)(slash - ekey) + 1) : NULL;
	struct et_entry *e;
	bool wake = false, expire = false;
	if (k == NULL)
		return;
	if (rev > k->last_delete)
		k->last_delete = rev;
	TAILQ_FOREACH(e, &k->entries, entry) {
		bool own = strlen(e->ekey) == len && memcmp(e->ekey, ekey, len) == 0;
		/* the key it waits for (a later one of the same name, put
		 * after it, ranks after this entry: waking is right), or, for a
		 * semaphore, any other (some after it: spurious, it asks again) */
		if (e->state == E_WAITING && (e->wait_key != NULL ?
		    e->wait_keylen == len && memcmp(e->wait_key, ekey, len) == 0 &&
		    rev > e->wait_rev : !own))
			wake = true;
		if (e->state == E_HELD && !e->gone && !e->leaving && own && rev > e->create_rev) {
			/* not by us: ours are forgotten before their delete. A
			 * delete of an older key of the same name (a waiter's,
			 * gone with a lost lease and put again since) may come
			 * after the answer that put this one: a stream started
			 * again from an older revision replays it late, at a
			 * revision before this key's create revision */
			e->gone = true;
			expire = true;
		}
	}
	if (wake) {
		r->nwakeups++;
		et_wake_later(r, k);
	}
	if (expire) {
		char kb[LOG_KEY_BUF];
		log_warn("etcd key of lock '%s' was deleted by someone else",
		    log_escape(kb, sizeof(kb), k->name, k->len, 0));
		r->be->up.expire(r->be->up.arg, k->name, k->len);
	}
}

/* Tell the observers of keys (n of them, a reference each, dropped here)
 * that they changed: all of them (all), or those whose read failed. */
static void
tell_changed(struct et *r, struct et_key **keys, size_t n, bool all)
{
	for (size_t i = 0; i < n; i++) {
		if (keys[i]->watched && !r->destroying && (all || keys[i]->stale)) {
			keys[i]->stale = false;
			r->be->up.changed(r->be->up.arg, keys[i]->name, keys[i]->len, NULL);
		}
		et_key_put(r, keys[i]);
	}
}

/* Every observed key (a reference each), into a new array (the caller
 * frees it) of *n. */
static struct et_key **
watched_keys(struct et *r, size_t *n)
{
	struct et_key **keys = xcalloc(r->nwatched > 0 ? r->nwatched : 1, sizeof(*keys));
	struct hashtab_iter it;
	struct hashtab_node *node;
	*n = 0;
	hashtab_iter_init(&it, r->keys);
	while ((node = hashtab_next(&it)) != NULL && *n < r->nwatched) {
		struct et_key *k = (struct et_key *)(void *)node;
		if (k->watched) {
			k->refs++;
			keys[(*n)++] = k;
		}
	}
	return keys;
}

/* ops->watch: observers want key's changes (on) or not any more. */
void
et_watch_key(struct backend *be, const char *key, size_t keylen, int on)
{
	struct et *r = be->priv;
	struct et_key *k;
	if (on) {
		k = et_key_get(r, key, keylen);	/* kept while watched */
		if (k->watched) {
			et_key_put(r, k);
			return;
		}
		k->watched = 1;
		if (r->nwatched++ > 0)
			return;
	} else {
		size_t pathlen;
		char *path = et_key_path(r, key, keylen, &pathlen);
		k = et_key_find_path(r, path, pathlen);
		free(path);
		if (k == NULL || !k->watched)
			return;
		k->watched = 0;
		free(k->puts);
		k->puts = NULL;
		k->nputs = 0;
		r->nwatched--;
		et_key_put(r, k);
		if (r->nwatched > 0)
			return;
	}
	/* puts wanted, or not any more: from where the stream stopped */
	if (etcd_watching(r->cli))
		et_watch_start(r);
}

/* One message of the watch stream, or NULL: the stream ended. */
void
et_on_watch(void *arg, const Etcd__WatchResponse *res)
{
	struct et *r = arg;
	int64_t head;

	if (res == NULL) {
		/* start it again after a pause that grows while it keeps failing */
		struct timeval tv = clock_tv(backoff_next(&r->watch_backoff));
		r->watch_ready = false;
		if (!r->destroying) {
			evtimer_add(r->ev_watch, &tv);
			/* is etcd there at all? a keepalive tells at once */
			if (!r->keeping && !r->granting)
				et_lease_schedule(r, 0);
		}
		return;
	}
	backoff_reset(&r->watch_backoff);
	head = res->header != NULL ? res->header->revision : 0;
	if (res->canceled || res->compact_revision > 0) {
		/* the revision to resume from is compacted: read state anew */
		log_warn("etcd watch from revision %lld cancelled (compacted to %lld%s%s): "
		    "waiting locks look again", (long long)r->watch_rev + 1,
		    (long long)res->compact_revision, res->cancel_reason != NULL &&
		    *res->cancel_reason != '\0' ? "; " : "",
		    res->cancel_reason != NULL ? res->cancel_reason : "");
		r->watch_rev = 0;
		r->rewake = true;
		et_watch_start(r);
		return;
	}
	if (res->created) {
		if (r->watch_rev == 0)
			r->watch_rev = head;
		r->watch_ready = true;
		if (r->rewake) {
			r->rewake = false;
			wake_all(r);
		}
		r->recipe.flush(r);
		if (r->nwatched > 0) {
			/* from the present: what observers were told may be old,
			 * they read again. Going on from where it stopped: every
			 * change since comes, and a key read as it is now would
			 * pass the puts it replays (their leaders dropped as
			 * older than that read): only keys whose read failed */
			size_t n;
			struct et_key **keys = watched_keys(r, &n);
			tell_changed(r, keys, n, r->watch_from_now);
			free(keys);
		}
		return;
	}
	struct et_key **told = r->nwatched > 0 && res->n_events > 0 ?
	    xcalloc(res->n_events, sizeof(*told)) : NULL;
	size_t ntold = 0;
	for (size_t i = 0; i < res->n_events; i++) {
		const Etcd__Event *ev = res->events[i];
		int64_t rev;
		if (ev->kv == NULL)
			continue;
		rev = ev->kv->mod_revision;
		if (rev > r->watch_rev)
			r->watch_rev = rev;
		if (ev->kv->key.len == 0)
			continue;
		if (told != NULL) {
			/* a change of an observed key's range: its puts kept,
			 * the key read once */
			const char *ekey = (const char *)ev->kv->key.data;
			const char *slash = memrchr(ekey, '/', ev->kv->key.len);
			struct et_key *k = slash != NULL ?
			    et_key_find_path(r, ekey, (size_t)(slash - ekey) + 1) : NULL;
			size_t j = 0;
			while (k != NULL && k->watched && j < ntold && told[j] != k)
				j++;
			if (k != NULL && k->watched && j == ntold) {
				k->refs++;
				told[ntold++] = k;
			}
			struct et_value v;
			if (k != NULL && k->watched && ev->type == ETCD__EVENT__EVENT_TYPE__PUT &&
			    (et_value_parse(ev->kv->value.data, ev->kv->value.len, &v),
			    v.kind != 's' && v.kind != 'n')) {
				/* an exclusive one: maybe a leader */
				k->puts = xrealloc(k->puts, (k->nputs + 1) * sizeof(*k->puts));
				k->puts[k->nputs++] = rev;
			}
		}
		if (ev->type != ETCD__EVENT__EVENT_TYPE__DELETE)
			continue;
		if (et_force_heard(r, (const char *)ev->kv->key.data, ev->kv->key.len))
			continue;	/* a key's signal: its holders may be broken */
		watch_delete(r, (const char *)ev->kv->key.data, ev->kv->key.len, rev);
	}
	if (told != NULL) {
		for (size_t i = 0; i < ntold; i++) {
			if (told[i]->watched && !r->destroying)
				et_leader_watched(r, told[i]);
			et_key_put(r, told[i]);
		}
		free(told);
	}
	if (res->n_events == 0 && head > r->watch_rev)
		r->watch_rev = head;	/* progress: nothing before head is missing */
}

/* Time to start the watch stream again, if etcd answers. */
void
et_on_watch_timer(evutil_socket_t fd, short what, void *arg)
{
	struct et *r = arg;
	(void)fd;
	(void)what;
	if (etcd_up(r->cli) && !etcd_watching(r->cli))
		et_watch_start(r);
}
