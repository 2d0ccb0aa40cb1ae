/*
 * rtopo_sentinel — the redis backend in Sentinel mode: one server, the
 * master that the sentinels (backend.sentinels) know by
 * backend.master_name, found at start and again after every failover.
 *
 * The master's node starts once a sentinel says where the master is
 * (SENTINEL get-master-addr-by-name, one sentinel asked at a time, in
 * turn); its connection insists on ROLE master. The sentinels' subscriber
 * connections listen to +switch-master, which moves the node at once; while
 * the master is not up, the sentinels are asked again every second, and
 * when its connection drops. Everything else is one server's policy.
 */
#include "rd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "clock.h"
#include "conf.h"
#include "log.h"
#include "num.h"
#include "rnode.h"
#include "xmalloc.h"

/* A sentinel. */
struct sn_sentinel {
	struct sn *sn;			/* the topology */
	struct rnode *node;		/* the sentinel */
	const char *addr;		/* its "host:port", as configured */
	bool unknown_logged;		/* it said it does not know the master */
};

/* The topology's state (r->tp). */
struct sn {
	struct rd *r;			/* the backend */
	struct rd_node master;		/* the master's node */
	struct sn_sentinel *sentinels;	/* one client per sentinel */
	size_t nsentinels;		/* how many */
	bool asking;			/* a sentinel is asked for the master */
	size_t ask_next;		/* the sentinel to ask next */
	size_t asked;			/* sentinels asked in a row without an answer */
	char addr[300];			/* the master's "host:port" last told, "" none */
	struct event *ev_ask;		/* asks again while the master is not up */
};

static void sentinels_ask(struct sn *sn);

/* The sentinels say the master is host:port: use it (at once when it
 * moved). */
static void
master_set(struct sn *sn, const char *host, const char *port, const char *from)
{
	char addr[sizeof(sn->addr)];
	long long p;
	if (num_parse(port, strlen(port), 1, 65535, &p) != NUM_OK)
		return;
	snprintf(addr, sizeof(addr), strchr(host, ':') != NULL ? "[%s]:%s" : "%s:%s", host,
	    port);
	if (strcmp(addr, sn->addr) == 0)
		return;
	log_info("redis master '%s' is %s (%s)%s%s", sn->r->set->master_name, addr, from,
	    sn->addr[0] != '\0' ? ", was " : "", sn->addr);
	snprintf(sn->addr, sizeof(sn->addr), "%s", addr);
	rd_node_move(&sn->master, host, (int)p);
}

/* A sentinel's answer to SENTINEL get-master-addr-by-name. */
static void
on_master_addr(void *arg, const redisReply *rep, const char *why)
{
	struct sn_sentinel *s = arg;
	struct sn *sn = s->sn;
	(void)why;
	sn->asking = false;
	if (rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
	    rep->element[0]->type == REDIS_REPLY_STRING &&
	    rep->element[1]->type == REDIS_REPLY_STRING) {
		char from[320];
		sn->asked = 0;
		s->unknown_logged = false;
		snprintf(from, sizeof(from), "sentinel %s", s->addr);
		master_set(sn, rep->element[0]->str, rep->element[1]->str, from);
		return;
	}
	if (rep != NULL && !s->unknown_logged) {
		s->unknown_logged = true;
		log_warn("redis sentinel %s does not know a master '%s' (%s)", s->addr,
		    sn->r->set->master_name, rep->type == REDIS_REPLY_ERROR ? rep->str :
		    rep->type == REDIS_REPLY_NIL ? "no such master" : "unexpected reply");
	}
	/* the next sentinel, once each per round (ev_ask starts the next) */
	if (++sn->asked < sn->nsentinels)
		sentinels_ask(sn);
}

/* Ask the next sentinel that is up where the master is (one question at
 * a time); none up: a sentinel that comes up asks. */
static void
sentinels_ask(struct sn *sn)
{
	const char *name = sn->r->set->master_name;
	const char *argv[] = { "SENTINEL", "get-master-addr-by-name", name };
	size_t argvlen[] = { 8, 23, strlen(name) };
	if (sn->asking || sn->r->destroying)
		return;
	for (size_t k = 0; k < sn->nsentinels; k++) {
		struct sn_sentinel *s = &sn->sentinels[(sn->ask_next + k) % sn->nsentinels];
		if (!rnode_up(s->node))
			continue;
		sn->ask_next = (size_t)(s - sn->sentinels) + 1;
		if (rnode_command(s->node, 3, argv, argvlen, on_master_addr, s) == 0) {
			sn->asking = true;
			return;
		}
	}
}

/* Every second while the master is not up: ask the sentinels again. */
static void
on_ask(evutil_socket_t fd, short what, void *arg)
{
	struct sn *sn = arg;
	(void)fd;
	(void)what;
	if (!rnode_up(sn->master.node)) {
		sn->asked = 0;
		sentinels_ask(sn);
	}
}

/* A sentinel is up: ask it unless the master is up. */
static void
on_sentinel_up(void *arg)
{
	struct sn_sentinel *s = arg;
	if (!rnode_up(s->sn->master.node))
		sentinels_ask(s->sn);
}

/* +switch-master "name old-ip old-port new-ip new-port": a failover
 * ended; move to the new master at once. */
static void
on_sentinel_message(void *arg, const char *channel, size_t channellen, const char *msg,
    size_t msglen)
{
	struct sn_sentinel *s = arg;
	struct sn *sn = s->sn;
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
	if (n != 5 || strcmp(w[0], sn->r->set->master_name) != 0)
		return;
	snprintf(from, sizeof(from), "+switch-master from sentinel %s", s->addr);
	master_set(sn, w[3], w[4], from);
}

static const struct rnode_hooks sentinel_hooks = {
	.up = on_sentinel_up,
	.message = on_sentinel_message,
};

/* The master's node (not started: a sentinel says where it is first). */
static void
sentinel_init(struct rd *r)
{
	struct sn *sn = xcalloc(1, sizeof(*sn));
	struct rnode_conf nc = rd_node_conf(r, "redis");
	nc.require_master = true;
	sn->r = r;
	r->tp = sn;
	r->ncalls = 1;
	rd_node_init(r, &sn->master, &nc);
	rd_node_add(r, &sn->master);
}

/* One client per sentinel, started. */
static void
sentinel_start(struct rd *r)
{
	static const char *const channels[] = { "+switch-master" };
	const struct rd_settings *c = r->set;
	struct sn *sn = r->tp;
	sn->nsentinels = c->nsentinels;
	sn->sentinels = xcalloc(c->nsentinels, sizeof(*sn->sentinels));
	for (size_t i = 0; i < c->nsentinels; i++) {
		struct sn_sentinel *s = &sn->sentinels[i];
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
		s->sn = sn;
		s->addr = c->sentinels[i];
		s->node = rnode_create(r->be->base, r->dns, &nc, &sentinel_hooks, s);
		rnode_start(s->node);
	}
	struct timeval tv = clock_tv(1000);
	sn->ev_ask = event_new(r->be->base, -1, EV_PERSIST, on_ask, sn);
	evtimer_add(sn->ev_ask, &tv);
	log_info("redis backend: master '%s' of %zu sentinel%s, db %lld, key prefix "
	    "'%s'%s%s%s", c->master_name, c->nsentinels, c->nsentinels == 1 ? "" : "s",
	    c->db, c->key_prefix, c->tls ? ", TLS" : "", c->username != NULL ?
	    ", user " : "", c->username != NULL ? c->username : "");
}

/* The sentinels' clients, the timer, the state. */
static void
sentinel_destroy(struct rd *r)
{
	struct sn *sn = r->tp;
	for (size_t i = 0; i < sn->nsentinels; i++)
		if (sn->sentinels[i].node != NULL)
			rnode_destroy(sn->sentinels[i].node);
	free(sn->sentinels);
	if (sn->ev_ask != NULL)
		event_free(sn->ev_ask);
	free(sn);
	r->tp = NULL;
}

/* The master: the one node. */
static struct rd_node *
sentinel_home(const struct rd *r, const struct rd_op *op, size_t i)
{
	(void)op;
	(void)i;
	return r->nodes[0];
}

/* The master's connection went: it may have moved. */
static void
sentinel_down(struct rd *r, struct rd_node *nd)
{
	(void)nd;
	sentinels_ask(r->tp);
}

/* Sentinels up, of how many. */
static size_t
sentinels_up(const struct sn *sn)
{
	size_t up = 0;
	for (size_t i = 0; i < sn->nsentinels; i++)
		up += sn->sentinels[i].node != NULL && rnode_up(sn->sentinels[i].node);
	return up;
}

/* No sentinel has named the master, and every sentinel refuses the
 * daemon's settings (its password, its certificate): waiting cannot help. */
static bool
sentinel_refused(const struct rd *r)
{
	const struct sn *sn = r->tp;
	if (sn->addr[0] != '\0' || sn->nsentinels == 0)
		return false;
	for (size_t i = 0; i < sn->nsentinels; i++)
		if (sn->sentinels[i].node == NULL || !rnode_refused(sn->sentinels[i].node))
			return false;
	return true;
}

/* Why it fails now: no sentinel has named the master yet, or the master's
 * problem. */
static const char *
sentinel_problem(const struct rd *r, char *buf, size_t len)
{
	const struct sn *sn = r->tp;
	uint64_t since;
	if (rnode_problem(sn->master.node, &since) == NULL)
		return NULL;
	if (sentinel_refused(r)) {
		const char *why = rnode_problem(sn->sentinels[0].node, &since);
		snprintf(buf, len, "redis: every sentinel refuses the daemon's settings "
		    "(backend.sentinel_password, TLS): %s", why != NULL ? why : "refused");
		return buf;
	}
	if (sn->addr[0] == '\0') {
		snprintf(buf, len, "redis: no sentinel has told where master '%s' is yet "
		    "(%zu of %zu sentinels reached)", r->set->master_name, sentinels_up(sn),
		    sn->nsentinels);
		return buf;
	}
	return rd_node_problem(&sn->master, sn->addr, buf, len);
}

/* INFO: the master and the sentinels, before the common lines. */
static void
sentinel_info(struct rd *r, struct evbuffer *out)
{
	const struct sn *sn = r->tp;
	evbuffer_add_printf(out, "backend_master_name:%s\r\nbackend_master:%s\r\n"
	    "backend_sentinels:%zu\r\nbackend_sentinels_up:%zu\r\n", r->set->master_name,
	    sn->addr[0] != '\0' ? sn->addr : "unknown", sn->nsentinels, sentinels_up(sn));
}

/* SIGHUP: the sentinels connect with the new TLS context too. */
static void
sentinel_reload(struct rd *r, struct tls_client *tls)
{
	struct sn *sn = r->tp;
	for (size_t i = 0; i < sn->nsentinels; i++)
		if (sn->sentinels[i].node != NULL)
			rnode_set_tls(sn->sentinels[i].node, tls);
}

/* The master the sentinels name. */
const struct rd_topo rd_topo_sentinel = {
	.name = "redis",
	.wait_down = true,
	.init = sentinel_init,
	.start = sentinel_start,
	.destroy = sentinel_destroy,
	.ready = rlist_ready,
	.send = rlist_send,
	.home = sentinel_home,
	.channel = rd_channel_plain,
	.failed = rd_failed_plain,
	.down = sentinel_down,
	.problem = sentinel_problem,
	.refused = sentinel_refused,
	.state = rlist_state,
	.address = rd_addr_connected,
	.connected = rlist_connected,
	.subscribed = rlist_subscribed,
	.info_before = sentinel_info,
	.reload = sentinel_reload,
};
