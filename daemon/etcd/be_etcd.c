/*
 * be_etcd — leases in an etcd v3 cluster, through its gRPC API (etcd.c):
 * the backend's entry points. This file reads its settings and URL, sets it
 * up (the client, the daemon's lease, the watch) and tears it down, answers
 * INFO, STATUS and the reason of -BACKEND, and reacts when the client comes
 * up or goes down. The rest is cut along its seams, in layers that share
 * struct et (be_etcd_core.h): the lock recipe (be_etcd_recipe.c), the watch
 * (be_etcd_watch.c), the daemon's lease (be_etcd_lease.c) and the records
 * (be_etcd_core.c).
 *
 * It owns its etcd keys, leases and the watch stream; it never blocks the
 * loop (names are resolved at start), never completes an operation from
 * inside the call that asked for it, and knows the lock table only through
 * the calls it gets and struct backend_up.
 */
#include "backend.h"
#include "be_etcd_core.h"
#include "be_etcd_force.h"
#include "be_etcd_leader.h"
#include "be_etcd_lease.h"
#include "be_etcd_recipe.h"
#include "be_etcd_watch.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "backoff.h"
#include "clock.h"
#include "conf.h"
#include "etcd.h"
#include "hashtab.h"
#include "later.h"
#include "log.h"
#include "tls.h"
#include "xmalloc.h"

#define ET_BACKOFF_MIN_MS 100	/* first pause after a keepalive or grant failed */
#define ET_BACKOFF_MAX_MS 2000	/* longest such pause before jitter (and at most a
				 * quarter lease) */
#define ET_WATCH_RETRY_MIN_MS 100	/* first pause before starting a lost watch again */
#define ET_WATCH_RETRY_MAX_MS 2000	/* longest such pause before jitter */

/* ---- the client's state ----------------------------------------------------- */

/* etcd came up or went down. */
static void
on_state(void *arg, bool up)
{
	struct et *r = arg;
	if (!up) {
		et_flush_waiting(r);
		return;
	}
	r->nups++;
	if (!etcd_watching(r->cli))
		et_watch_start(r);
	if (!r->keeping && !r->granting)
		et_lease_schedule(r, 0);
	et_flush_waiting(r);
	if (!TAILQ_EMPTY(&r->deferred)) {
		evtimer_del(r->ev_deferred);
		struct timeval tv = clock_tv(0);
		evtimer_add(r->ev_deferred, &tv);
	}
}

/* ---- the backend ---------------------------------------------------------- */

/* INFO's backend fields: the endpoint, the lease, the watch, the counters. */
static void
et_info(struct backend *be, struct evbuffer *out)
{
	struct et *r = be->priv;
	struct etcd_stats st;
	struct hashtab_iter it;
	struct hashtab_node *n;
	size_t held = 0, waiting = 0, deferred = 0, inflight = 0;
	uint64_t now = clock_ms();
	struct et_op *op;

	hashtab_iter_init(&it, r->keys);
	while ((n = hashtab_next(&it)) != NULL) {
		struct et_entry *e;
		TAILQ_FOREACH(e, &((struct et_key *)(void *)n)->entries, entry) {
			held += e->state == E_HELD;
			waiting += e->state == E_WAITING;
		}
	}
	TAILQ_FOREACH(op, &r->deferred, entry)
		deferred++;
	TAILQ_FOREACH(op, &r->ops, entry)
		inflight++;
	etcd_stats(r->cli, &st);
	evbuffer_add_printf(out,
	    "backend_endpoint:%s\r\nbackend_connected:%d\r\nbackend_reconnects_total:%llu\r\n"
	    "backend_endpoint_switches_total:%llu\r\nbackend_lease_id:%lld\r\n"
	    "backend_lease_ttl_ms:%llu\r\nbackend_lease_valid_ms:%llu\r\n"
	    "backend_watching:%d\r\nbackend_watch_revision:%lld\r\n"
	    "backend_requests_total:%llu\r\nbackend_request_failures_total:%llu\r\n"
	    "backend_inflight:%zu\r\nbackend_keys_held:%zu\r\nbackend_keys_waiting:%zu\r\n"
	    "backend_deferred_releases:%zu\r\nbackend_renewals_total:%llu\r\n"
	    "backend_lost_total:%llu\r\nbackend_wakeups_total:%llu\r\n"
	    "backend_watch_messages_total:%llu\r\nbackend_tls:%d\r\n"
	    "backend_streams:%llu\r\nbackend_local_handoffs_total:%llu\r\n"
	    "backend_observed_keys:%zu\r\n",
	    etcd_endpoint(r->cli), etcd_up(r->cli),
	    (unsigned long long)(r->nups > 0 ? r->nups - 1 : 0),
	    (unsigned long long)st.switches, (long long)r->lease,
	    (unsigned long long)r->lease_ttl_ms,
	    (unsigned long long)(et_lease_ok(r, now) ? r->lease_until - now : 0),
	    r->watch_ready, (long long)r->watch_rev, (unsigned long long)st.calls,
	    (unsigned long long)st.failures, inflight, held, waiting, deferred,
	    (unsigned long long)r->nrenewals, (unsigned long long)r->nlost,
	    (unsigned long long)r->nwakeups, (unsigned long long)st.messages, r->set->tls != 0,
	    (unsigned long long)st.streams, (unsigned long long)r->nlocal, r->nwatched);
}

/* STATUS's backend field. */
static const char *
et_state(struct backend *be)
{
	struct et *r = be->priv;
	return etcd_up(r->cli) && et_lease_ok(r, clock_ms()) ? "connected" : "disconnected";
}

/* Why LOCK answers -BACKEND now, in a few words: the endpoint and why it is
 * down, or the lease or watch not there yet. */
static const char *
et_problem(struct backend *be, char *buf, size_t len)
{
	struct et *r = be->priv;
	const char *down = etcd_why_down(r->cli);
	if (down != NULL)
		snprintf(buf, len, "etcd %s", down);
	else if (!et_lease_ok(r, clock_ms()))
		snprintf(buf, len, "no etcd lease yet");
	else if (!r->watch_ready)
		snprintf(buf, len, "the etcd watch is not started yet");
	else
		return NULL;
	return buf;
}

/* Releases in flight or kept for later: shutdown waits for them. */
static size_t
et_pending(struct backend *be)
{
	struct et *r = be->priv;
	struct et_op *op;
	size_t n = 0;
	TAILQ_FOREACH(op, &r->ops, entry)
		n += op->kind == EK_RELEASE || op->kind == EK_DELETE;
	/* the deletes kept for later wait for etcd: not while it is down (the
	 * daemon's lease takes the keys with it) */
	if (etcd_up(r->cli))
		TAILQ_FOREACH(op, &r->deferred, entry)
			n++;
	return n;
}

/* Set up be->priv: resolve the endpoints (start-up may block), grant the
 * daemon's lease and start the watch stream. */
static int
et_create(struct backend *be)
{
	const struct et_settings *set = be->settings;
	struct et *r = xcalloc(1, sizeof(*r));
	struct etcd_options o = {
		.endpoints = set->endpoints,
		.nendpoints = set->nendpoints,
		.request_timeout_ms = (uint64_t)set->request_timeout_ms,
		.username = set->username,
		.password = set->password,
	};
	struct etcd_hooks h = { .state = on_state, .watch = et_on_watch, .arg = r };
	struct tls_client *tls = NULL;

	if (set->tls) {
		char why[512];
		if ((tls = tls_client_create(set->tls_ca_file, set->tls_cert_file,
		    set->tls_key_file, why, sizeof(why))) == NULL) {
			log_error("etcd backend: TLS: %s", why);
			free(r);
			return -1;
		}
		o.tls = tls;
		o.tls_server_name = set->tls_server_name;
	}

	r->be = be;
	r->set = set;
	r->recipe.flush = et_flush_waiting;
	r->recipe.wake = et_wake_now;
	TAILQ_INIT(&r->ops);
	TAILQ_INIT(&r->waiting);
	TAILQ_INIT(&r->deferred);
	TAILQ_INIT(&r->reads);
	r->cli = etcd_create(be->base, &o, &h);
	tls_client_unref(tls);	/* the client holds its own reference */
	if (r->cli == NULL) {
		free(r);
		return -1;
	}
	r->keys = hashtab_create(64);
	r->ev_lease = evtimer_new(be->base, et_on_lease_timer, r);
	r->done = later_create(be->base);
	r->ev_deferred = evtimer_new(be->base, et_on_deferred, r);
	r->ev_watch = evtimer_new(be->base, et_on_watch_timer, r);
	backoff_init(&r->watch_backoff, ET_WATCH_RETRY_MIN_MS, ET_WATCH_RETRY_MAX_MS);
	/* at most a quarter lease, so that a few tries fit in one */
	backoff_init(&r->backoff, ET_BACKOFF_MIN_MS,
	    (uint64_t)set->lease_ttl_ms / 4 < ET_BACKOFF_MAX_MS ?
	    (uint64_t)set->lease_ttl_ms / 4 : ET_BACKOFF_MAX_MS);
	if (r->ev_lease == NULL || r->ev_deferred == NULL || r->ev_watch == NULL)
		log_fatal("out of memory (the etcd backend)");
	be->priv = r;
	et_lease_schedule(r, 0);
	if (set->lease_ttl_ms < 3 * set->request_timeout_ms)
		log_warn("etcd backend: lease_ttl_ms %lld is less than three request timeouts "
		    "(%lld ms): a keepalive that gets no answer may cost the lease",
		    set->lease_ttl_ms, 3 * set->request_timeout_ms);
	log_info("etcd backend: %s%s%s, key prefix '%s', lease TTL %lld ms",
	    set->endpoints[0], set->nendpoints > 1 ? " (and others in order)" : "",
	    set->tls ? " over TLS" : "", set->key_prefix, set->lease_ttl_ms);
	return 0;
}

/* Stop the client (its calls in flight are dropped), complete every
 * operation with BE_ERROR, forget the keys (their lease ends in etcd). */
static void
et_destroy(struct backend *be)
{
	struct et *r = be->priv;
	struct et_op *op;
	struct hashtab_iter it;
	struct hashtab_node *n;

	r->destroying = true;
	etcd_destroy(r->cli);
	et_leader_destroy(r);
	while ((op = TAILQ_FIRST(&r->ops)) != NULL) {
		et_op_landed(op);
		et_op_answer(op, BE_ERROR, 0, 0, "shutting down");
	}
	while ((op = TAILQ_FIRST(&r->waiting)) != NULL) {
		TAILQ_REMOVE(&r->waiting, op, entry);
		et_op_answer(op, BE_ERROR, 0, 0, "shutting down");
	}
	while ((op = TAILQ_FIRST(&r->deferred)) != NULL) {
		TAILQ_REMOVE(&r->deferred, op, entry);
		et_op_answer(op, BE_ERROR, 0, 0, "shutting down");
	}
	later_run(r->done);
	hashtab_iter_init(&it, r->keys);
	while ((n = hashtab_next(&it)) != NULL) {
		struct et_key *k = (struct et_key *)(void *)n;
		struct et_entry *e;
		hashtab_remove(r->keys, n);
		while ((e = TAILQ_FIRST(&k->entries)) != NULL) {
			TAILQ_REMOVE(&k->entries, e, entry);
			free(e->ekey);
			free(e->wait_key);
			free(e->value);
			free(e->who);
			free(e->forced_by);
			free(e);
		}
		free(k->name);
		free(k->path);
		free(k);
	}
	hashtab_destroy(r->keys);
	event_free(r->ev_lease);
	later_destroy(r->done);
	event_free(r->ev_deferred);
	event_free(r->ev_watch);
	free(r);
	be->priv = NULL;
}

/* ---- settings -------------------------------------------------------------- */

#define ET_PORT 2379			/* the port of an endpoint that gives none */
#define ET_SET(field) offsetof(struct et_settings, field)

/* The keys under "backend." that this backend reads, into struct et_settings. */
static const struct conf_setting et_settings_table[] = {
	{ .name = "endpoints", .type = CONF_SERVERLIST, .off = ET_SET(endpoints),
	  .count = ET_SET(nendpoints), .def = ET_PORT, .defstr = "127.0.0.1:2379" },
	{ .name = "key_prefix", .type = CONF_SHORTSTR, .off = ET_SET(key_prefix), .max = 128,
	  .defstr = "dlock/" },
	{ .name = "lease_ttl_ms", .type = CONF_INT, .off = ET_SET(lease_ttl_ms),
	  .min = 2000, .max = 3600000, .def = 10000 },
	{ .name = "request_timeout_ms", .type = CONF_INT, .off = ET_SET(request_timeout_ms),
	  .min = 10, .max = 600000, .def = 2000 },
	{ .name = "username", .type = CONF_STR, .off = ET_SET(username) },
	{ .name = "password", .type = CONF_SECRET, .off = ET_SET(password) },
	{ .name = "password_file", .type = CONF_SECRET_FILE, .off = ET_SET(password_file),
	  .pair = "password" },
	{ .name = "tls.enabled", .type = CONF_BOOL, .off = ET_SET(tls), .def = 0 },
	{ .name = "tls.ca_file", .type = CONF_PATH, .off = ET_SET(tls_ca_file) },
	{ .name = "tls.cert_file", .type = CONF_PATH, .off = ET_SET(tls_cert_file) },
	{ .name = "tls.key_file", .type = CONF_PATH, .off = ET_SET(tls_key_file) },
	{ .name = "tls.server_name", .type = CONF_STR, .off = ET_SET(tls_server_name) },
};

/* dlockd -t and start-up: the TLS files go together and load. */
static void
et_check(struct conf *c, const void *settings, int deep)
{
	const struct et_settings *set = settings;
	if ((set->tls_cert_file == NULL) != (set->tls_key_file == NULL))
		(void)conf_setting_error(c, set->tls_cert_file != NULL ? "backend.tls.cert_file" :
		    "backend.tls.key_file", "'backend.tls.cert_file' and 'backend.tls.key_file' "
		    "go together (a client certificate and its key)");
	if (deep && c->nerrors == 0 && set->tls) {
		char why[512];
		/* the CAs alone first, so that each file is named where it is set */
		struct tls_client *tls = tls_client_create(set->tls_ca_file, NULL, NULL, why,
		    sizeof(why));
		if (tls == NULL) {
			(void)conf_setting_error(c, "backend.tls.ca_file", "TLS: %s", why);
			return;
		}
		tls_client_unref(tls);
		tls = tls_client_create(set->tls_ca_file, set->tls_cert_file, set->tls_key_file, why,
		    sizeof(why));
		if (tls == NULL)
			(void)conf_setting_error(c, "backend.tls.cert_file", "TLS: %s", why);
		tls_client_unref(tls);
	}
}

/* -b etcd://[user[:password]@]host[:port][,host[:port]...], or etcds://
 * for TLS (verified against the system's CAs unless backend.tls says
 * otherwise): port 2379 when left out; user and password may hold %XX
 * escapes. The URL gives the endpoints, the credentials (none when it has
 * none) and whether TLS is on. 1 if url is not an etcd URL; else 0, or -1
 * with *why a sentence that never holds the password. */
static const struct backend_url et_urls[] = {
	{ "etcd://", "[user[:password]@]host[:port][,host[:port]...]", "port 2379" },
	{ "etcds://", "[user[:password]@]host[:port][,host[:port]...]", "the same with TLS" },
	{ NULL, NULL, NULL },
};

static int
et_parse_url(const char *url, backend_url_set *set, void *arg, const char **why)
{
	int row = backend_url_row(et_urls, url);
	bool tls = row == 1;
	const char *info, *s;
	char *user = NULL, *pw = NULL;
	if (row < 0)
		return 1;
	info = url + strlen(et_urls[row].scheme);
	*why = NULL;
	if (conf_url_userinfo(info, &user, &pw, &s, why) < 0) {
		/* a bad password after an empty user name: the name is told */
		if (*info == ':')
			*why = "the user name is empty";
		return -1;
	}
	if (user != NULL && *user == '\0')
		*why = "the user name is empty";
	if (*why == NULL && strpbrk(s, "/?#") != NULL)
		*why = "a path or query is not supported (etcd://host:port[,host:port...])";
	if (*why == NULL && *s == '\0')
		*why = "the host is missing";
	if (*why == NULL) {
		set(arg, "endpoints", s);
		set(arg, "username", user != NULL ? user : "");
		set(arg, "password", pw != NULL ? pw : "");
		set(arg, "password_file", "");
		set(arg, "tls.enabled", tls ? "true" : "false");
	}
	if (pw != NULL)
		explicit_bzero(pw, strlen(pw));
	free(pw);
	free(user);
	return *why == NULL ? 0 : -1;
}

const struct backend_ops be_etcd_ops = {
	.name = "etcd",
	.url_form = "etcd[s]://host:port[,host:port...]",
	.parse_url = et_parse_url,
	.urls = et_urls,
	.local_leases = 0,
	.settings = et_settings_table,
	.nsettings = sizeof(et_settings_table) / sizeof(et_settings_table[0]),
	.settings_size = sizeof(struct et_settings),
	.check = et_check,
	.create = et_create,
	.destroy = et_destroy,
	.acquire = et_acquire,
	.release = et_release,
	.renew = et_renew,
	.transfer = et_transfer,
	.withdraw = et_withdraw,
	.proclaim = et_proclaim,
	.leader = et_leader,
	.watch = et_watch_key,
	.holders = et_holders,
	.list = et_list,
	.force = et_force,
	.info = et_info,
	.state = et_state,
	.pending = et_pending,
	.problem = et_problem,
};
