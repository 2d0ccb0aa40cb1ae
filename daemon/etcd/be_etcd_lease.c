/*
 * be_etcd_lease — the etcd backend's own lease: the keys of session-bound
 * locks and of every waiting key are on one lease of the daemon
 * (backend.lease_ttl_ms), granted at start and kept alive every third of its
 * TTL; a daemon that dies loses them all when it ends. The lease is valid
 * until the send time of the last keepalive that etcd answered plus the TTL
 * it answered, on this host's clock; renewals of bound holdings are answered
 * from that, so a lease that cannot be kept alive makes the lock table
 * declare its holdings lost before etcd can have expired it. If etcd says
 * the lease is gone, every holding on it is told it is no longer the owner
 * (BE_NOTOWNER through the next renewal, which up.expire asks for at once)
 * and a new lease is granted. The same timer keeps the own leases of
 * waiting DETACH keys alive.
 */
#include "be_etcd_core.h"
#include "be_etcd_lease.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "backoff.h"
#include "clock.h"
#include "etcd.h"
#include "hashtab.h"
#include "log.h"

/* ---- the daemon's lease ----------------------------------------------------- */

/* The lease cannot be relied on any more: every entry on it is gone, the
 * lock table is asked to renew (and so to learn it), waiting keys are
 * forgotten (their queues try again, on the new lease), and a new lease is
 * granted. */
void
et_lease_lost(struct et *r, const char *why)
{
	int64_t old = r->lease;
	struct hashtab_iter it;
	struct hashtab_node *n;

	if (old == 0)
		return;
	log_warn("etcd lease %llx lost: %s", (unsigned long long)old, why);
	r->nlost++;
	r->lease = 0;
	r->lease_until = 0;
	hashtab_iter_init(&it, r->keys);
	while ((n = hashtab_next(&it)) != NULL) {
		struct et_key *k = (struct et_key *)(void *)n;
		struct et_entry *e, *next;
		bool wake = false;
		k->refs++;
		for (e = TAILQ_FIRST(&k->entries); e != NULL; e = next) {
			next = TAILQ_NEXT(e, entry);
			if (e->own)
				continue;	/* on a lease of its own */
			if (e->state == E_HELD) {
				e->gone = true;
			} else if (!e->busy) {
				/* its key went with the lease (revoked below): the
				 * queue asks again, on the new lease */
				wake = true;
				et_entry_free(r, e);
			}
		}
		if (wake)
			et_wake_later(r, k);
		et_key_put(r, k);
	}
	et_revoke(r, old);	/* in case etcd still has it */
	r->be->up.expire(r->be->up.arg, NULL, 0);
	et_lease_schedule(r, 0);
}

static void on_grant(void *arg, const struct etcd_result *res);
static void on_keepalive(void *arg, const struct etcd_result *res);

/* Keep lease alive, telling cb (if not NULL). */
static void
keepalive(struct et *r, int64_t lease, etcd_cb *cb, void *arg)
{
	Etcd__LeaseKeepAliveRequest req;
	etcd__lease_keep_alive_request__init(&req);
	req.id = lease;
	etcd_call(r->cli, ETCD_LEASE_KEEPALIVE, &req.base, cb, arg);
}

/* Time for a keepalive, or for a grant when there is no lease. */
void
et_on_lease_timer(evutil_socket_t fd, short what, void *arg)
{
	struct et *r = arg;
	uint64_t now = clock_ms();
	(void)fd;
	(void)what;
	if (r->lease != 0 && now >= r->lease_until)
		et_lease_lost(r, "it could not be kept alive in time");
	if (r->lease == 0) {
		if (!r->granting) {
			Etcd__LeaseGrantRequest req;
			etcd__lease_grant_request__init(&req);
			req.ttl = (int64_t)(((uint64_t)r->set->lease_ttl_ms + 999) / 1000);
			r->granting = true;
			r->grant_sent = now;
			etcd_call(r->cli, ETCD_LEASE_GRANT, &req.base, on_grant, r);
		}
	} else if (!r->keeping) {
		r->keeping = true;
		r->keep_sent = now;
		keepalive(r, r->lease, on_keepalive, r);
	}
	/* keep the own leases of waiting DETACH keys alive too */
	struct hashtab_iter it;
	struct hashtab_node *n;
	hashtab_iter_init(&it, r->keys);
	while ((n = hashtab_next(&it)) != NULL) {
		struct et_entry *e;
		TAILQ_FOREACH(e, &((struct et_key *)(void *)n)->entries, entry)
			if (e->own && e->state == E_WAITING)
				keepalive(r, e->lease, NULL, NULL);
	}
	r->recipe.flush(r);
	if (!et_ready(r)) {
		/* etcd does not answer, or no lease yet: try again, backing off */
		et_lease_schedule(r, backoff_next(&r->backoff));
	}
	else
		et_lease_schedule(r, r->lease_ttl_ms / 3);
}

/* The next keepalive (or grant) in ms. */
void
et_lease_schedule(struct et *r, uint64_t ms)
{
	struct timeval tv = clock_tv(ms);
	if (r->destroying)
		return;
	evtimer_del(r->ev_lease);
	evtimer_add(r->ev_lease, &tv);
}

/* Revoke lease (fire and forget). */
void
et_revoke(struct et *r, int64_t lease)
{
	if (lease != 0) {
		Etcd__LeaseRevokeRequest req;
		etcd__lease_revoke_request__init(&req);
		req.id = lease;
		etcd_call(r->cli, ETCD_LEASE_REVOKE, &req.base, NULL, NULL);
	}
}



/* The answer to the grant of the daemon's lease. */
static void
on_grant(void *arg, const struct etcd_result *res)
{
	struct et *r = arg;
	const Etcd__LeaseGrantResponse *g = res->status == ETCD_OK ?
	    (const Etcd__LeaseGrantResponse *)(const void *)res->msg : NULL;
	int64_t id = g != NULL ? g->id : 0, ttl = g != NULL ? g->ttl : 0;
	r->granting = false;
	if (id > 0 && ttl > 0) {
		r->lease = id;
		r->lease_ttl_ms = (uint64_t)ttl * 1000;
		r->lease_until = r->grant_sent + r->lease_ttl_ms;
		backoff_reset(&r->backoff);
		log_info("etcd lease %llx granted, TTL %lld s", (unsigned long long)id,
		    (long long)ttl);
		et_lease_schedule(r, r->lease_ttl_ms / 3);
		r->recipe.flush(r);
		/* queues that wait for the backend to come back try again */
		r->be->up.wakeup(r->be->up.arg, NULL, 0);
		return;
	} else if (res->status != ETCD_DOWN) {
		log_warn("etcd did not grant a lease: %s", res->why != NULL ? res->why :
		    g != NULL && g->error != NULL && *g->error != '\0' ? g->error :
		    "no ID or TTL in its answer");
	}
	r->recipe.flush(r);
}

/* The answer to a keepalive of the daemon's lease: it is valid until the
 * keepalive's send time plus the TTL etcd answers; no TTL: it is gone. */
static void
on_keepalive(void *arg, const struct etcd_result *res)
{
	struct et *r = arg;
	const Etcd__LeaseKeepAliveResponse *ka;
	int64_t ttl;
	r->keeping = false;
	if (res->status != ETCD_OK || r->lease == 0)
		return;	/* the timer tries again; lease_until stays */
	ka = (const Etcd__LeaseKeepAliveResponse *)(const void *)res->msg;
	if (ka->id != r->lease)
		return;	/* an answer about a lease given up since */
	ttl = ka->ttl;
	if (ttl <= 0) {
		et_lease_lost(r, "etcd says it has expired");
		return;
	}
	r->nrenewals++;
	backoff_reset(&r->backoff);
	if (r->keep_sent + (uint64_t)ttl * 1000 > r->lease_until)
		r->lease_until = r->keep_sent + (uint64_t)ttl * 1000;
}
