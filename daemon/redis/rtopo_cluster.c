/*
 * rtopo_cluster — the redis-cluster backend's topology: the policy of one
 * server per key, on the master of its key's slot (every key of a lock
 * carries one hash tag, rcluster.h), as the slot map says.
 *
 * The map is read with CLUSTER SLOTS from a node that is up: at start,
 * every backend.refresh_ms, after a MOVED, when a master's connection goes,
 * and every CL_REFRESH_FAST_MS while a slot has no master reachable. A
 * MOVED reply moves the slot in the map at once and sends the call again
 * there; an ASK sends it again once, behind ASKING, to the node it names;
 * TRYAGAIN and CLUSTERDOWN send it again after a growing wait, while the
 * command timeout allows. Release messages are SPUBLISHed on a shard
 * channel per slot (rcluster_slot_tag), and each master's subscriber
 * connection listens to the channels of its slots. A slot that changes
 * master (failover, resharding) is a new server for its keys: as after a
 * reconnect, every holding is renewed at once; after a failover (a master
 * that owned no slot owns some) new leases wait CL_PROMOTED_SETTLE_MS, so
 * that every daemon, reading the map on its own schedule, has renewed
 * first.
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
#include "rcluster.h"
#include "rnode.h"
#include "xmalloc.h"

#define CL_REDIRECTS_MAX 16		/* MOVED, ASK, TRYAGAIN followed per call */
#define CL_AGAIN_MIN_MS 10		/* first wait before a TRYAGAIN's resend */
#define CL_AGAIN_MAX_MS 200		/* longest */
#define CL_REFRESH_FAST_MS 200		/* the map is asked again this often while a
					 * slot has no master reachable */
#define CL_PROMOTED_SETTLE_MS (RD_SETTLE_MS + 2 * CL_REFRESH_FAST_MS) /* new
					 * leases wait this long once a replica took
					 * slots over: every daemon reads the map
					 * (CL_REFRESH_FAST_MS apart at most) and
					 * renews before any takes a key there */

/* A node of the cluster: a seed, a master, or a past master. */
struct cl_node {
	struct rd_node nd;		/* the backend's node (first: cast from it) */
	size_t nslots;			/* slots it owns in the map (0: not a master) */
	const char **chans;		/* the shard channels of its slots (two each) */
	bool listed;			/* INFO: its lines are written */
	bool asking_logged;		/* that it refused ASKING was logged */
};

/* The topology's state (r->tp). */
struct cl {
	struct cl_node **slots;		/* RC_SLOTS: each slot's master, NULL: none known */
	struct cl_node **next;		/* RC_SLOTS: the map being read */
	struct cl_node **listened;	/* RC_SLOTS: the last map read, whose masters
					 * listen to the slots' channels */
	char **chan;			/* 2 x RC_SLOTS: each slot's released and wanted
					 * shard channel (one allocation) */
	bool map_loaded;		/* a slot map was read */
	bool refreshing;		/* CLUSTER SLOTS asked */
	bool refresh_again;		/* ... and ask again once it answers */
	size_t refresh_next;		/* the node to ask next */
	struct event *ev_refresh;	/* asks for the map periodically */
	struct rd_op_list again;	/* ops waiting to be sent again */
	uint64_t nrefreshes;		/* maps read */
	uint64_t nmoved;		/* MOVED replies */
	uint64_t nask;			/* ASK replies */
	uint64_t ntryagain;		/* TRYAGAIN and CLUSTERDOWN replies */
	char map_error[200];		/* why the map was not read, as logged last */
};

static void cluster_refresh(struct rd *r);
static void cluster_send(struct rd *r, struct rd_op *op, struct cl_node *cn, bool asking);

/* The cluster node of a node of the backend. */
static struct cl_node *
cl_node_of(const struct rd_node *nd)
{
	return (struct cl_node *)(void *)nd;
}

/* Node i of the backend, as the cluster's. */
static struct cl_node *
cl_at(const struct rd *r, size_t i)
{
	return cl_node_of(r->nodes[i]);
}

/* The slot of op's key. */
static unsigned
op_slot(const struct rd_op *op)
{
	return rcluster_lock_slot(op->key, op->keylen);
}

/* The node at host:port, made (and started) if it is new. */
static struct cl_node *
cluster_node(struct rd *r, const char *host, int port)
{
	struct cl_node *cn;
	for (size_t i = 0; i < r->nnodes; i++)
		if (r->nodes[i]->port == port && strcmp(r->nodes[i]->host, host) == 0)
			return cl_at(r, i);
	struct rnode_conf nc = rd_node_conf(r, "redis-cluster node");
	nc.host = host;
	nc.port = port;
	nc.db = 0;
	nc.scripts = rscript_text_cluster();
	nc.sharded = true;
	nc.channel_group = 2;
	nc.channels = NULL;	/* the map says which */
	nc.nchannels = 0;
	cn = xcalloc(1, sizeof(*cn));
	rd_node_init(r, &cn->nd, &nc);
	rd_node_add(r, &cn->nd);
	rnode_start(cn->nd.node);
	return cn;
}

/* The slots whose master is known and connected. */
static size_t
cluster_slots_up(const struct rd *r)
{
	const struct cl *cl = r->tp;
	size_t up = 0;
	for (size_t i = 0; i < r->nnodes; i++)
		if (rnode_up(r->nodes[i]->node))
			up += cl_at(r, i)->nslots;
	return cl->map_loaded ? up : 0;
}

/* The answer to ASKING: a refusal (a user without +asking) is logged once
 * per node, with the ACL the user needs. */
static void
on_asking(void *arg, const redisReply *rep, const char *why)
{
	struct cl_node *cn = arg;
	(void)why;
	if (rep == NULL || rep->type != REDIS_REPLY_ERROR || cn->asking_logged)
		return;
	cn->asking_logged = true;
	log_warn("redis-cluster node %s answered ASKING with an error: %s; the redis-cluster "
	    "user needs at least the ACL '%s'", cn->nd.addr, rep->str, cn->nd.r->acl);
}

/* Send op (again) to cn, behind ASKING when asking; cn NULL: to its slot's
 * master. With no master known or up, op fails from the loop (a release is
 * kept on that master for when it is back). */
static void
cluster_send(struct rd *r, struct rd_op *op, struct cl_node *cn, bool asking)
{
	static const char *const ask[] = { "ASKING" };
	static const size_t asklen[] = { 6 };
	struct cl *cl = r->tp;
	if (cn == NULL)
		cn = cl->slots[op_slot(op)];
	op->calls[0].node = cn != NULL ? &cn->nd : NULL;
	if (cn == NULL || !rnode_up(cn->nd.node) || (asking && rnode_command(cn->nd.node, 1,
	    ask, asklen, on_asking, cn) < 0) || rd_call_send(r, op, 0, &cn->nd) < 0) {
		if (op->script == RS_RELEASE && !r->destroying)
			rd_keep_on(r, op, 0);
		if (cn == NULL)
			snprintf(op->why, sizeof(op->why), "redis-cluster: no master known for "
			    "slot %u", op_slot(op));
		rd_op_fail_later(op, BE_ERROR);
	}
}

/* topo->send: to the slot's master. */
static void
cluster_send_op(struct rd *r, struct rd_op *op)
{
	cluster_send(r, op, NULL, false);
}

/* The wait before op is sent again has passed: to its slot's master. */
static void
on_again(evutil_socket_t fd, short what, void *arg)
{
	struct rd_op *op = arg;
	struct rd *r = op->r;
	struct cl *cl = r->tp;
	(void)fd;
	(void)what;
	TAILQ_REMOVE(&cl->again, op, settle);
	cluster_send(r, op, NULL, false);
}

/* Send op again in a while (CL_AGAIN_MIN_MS, doubling up to
 * CL_AGAIN_MAX_MS), unless that would end after the command timeout:
 * whether it will be. */
static bool
cluster_again(struct rd *r, struct rd_op *op)
{
	struct cl *cl = r->tp;
	unsigned shift = op->redirects < 6 ? op->redirects : 6;
	uint64_t wait = (uint64_t)CL_AGAIN_MIN_MS << shift, now = clock_ms();
	if (wait > CL_AGAIN_MAX_MS)
		wait = CL_AGAIN_MAX_MS;
	if (now + wait > op->sent_ms + (uint64_t)r->set->command_timeout_ms)
		return false;
	if (op->ev_again == NULL)
		op->ev_again = evtimer_new(r->be->base, on_again, op);
	struct timeval tv = clock_tv(wait);
	evtimer_add(op->ev_again, &tv);
	TAILQ_INSERT_TAIL(&cl->again, op, settle);
	return true;
}

/* An error reply to op's call: a redirection is followed (MOVED: the map
 * says so from now on; ASK: this call only; TRYAGAIN, CLUSTERDOWN: again
 * later), and true returned; else false (an error of the call, or too many
 * redirections, or no time left). */
static bool
cluster_redirected(struct rd *r, struct rd_op *op, const redisReply *rep)
{
	struct cl *cl = r->tp;
	const struct rd_node *at = op->calls[0].node;
	char host[256];
	unsigned slot;
	int port;
	struct cl_node *to;
	enum rc_redirect k = rcluster_redirect(rep->str, at != NULL ? at->host : "", &slot, host,
	    sizeof(host), &port);
	if (k == RC_NONE || op->redirects >= CL_REDIRECTS_MAX || r->destroying)
		return false;
	op->redirects++;
	switch (k) {
	case RC_MOVED:
		cl->nmoved++;
		to = cluster_node(r, host, port);
		cl->slots[slot] = to;	/* until the map read now says more */
		cluster_refresh(r);
		if (rnode_up(to->nd.node)) {
			cluster_send(r, op, to, false);
			return true;
		}
		return cluster_again(r, op);
	case RC_ASK:
		cl->nask++;
		to = cluster_node(r, host, port);
		if (rnode_up(to->nd.node)) {
			cluster_send(r, op, to, true);
			return true;
		}
		return cluster_again(r, op);	/* asks its slot's master again */
	default:
		cl->ntryagain++;
		return cluster_again(r, op);
	}
}

/* The map changed: node cn's shard channels are those of its slots in
 * cl->next; its subscriber connection listens to them from now on. */
static void
cluster_listen(struct cl *cl, struct cl_node *cn, size_t nslots)
{
	const char **chans = nslots > 0 ? xcalloc(2 * nslots, sizeof(*chans)) : NULL;
	size_t n = 0;
	for (size_t s = 0; s < RC_SLOTS && n < 2 * nslots; s++)
		if (cl->next[s] == cn) {
			chans[n++] = cl->chan[2 * s];
			chans[n++] = cl->chan[2 * s + 1];
		}
	rnode_set_channels(cn->nd.node, chans, n);
	free(cn->chans);
	cn->chans = chans;
}

/* Arm the map's next reading: soon while a slot has no master reachable. */
static void
cluster_arm(struct rd *r)
{
	struct cl *cl = r->tp;
	uint64_t ms = cluster_slots_up(r) < RC_SLOTS ? CL_REFRESH_FAST_MS :
	    (uint64_t)r->set->refresh_ms;
	struct timeval tv = clock_tv(ms);
	evtimer_add(cl->ev_refresh, &tv);
}

/* Take the map of ranges: the slots' masters, and each master's channels.
 * A slot that has a new master: every holding is renewed at once, and after
 * a failover new leases wait CL_PROMOTED_SETTLE_MS. */
static void
cluster_apply(struct rd *r, const struct rc_range *ranges, size_t n)
{
	struct cl *cl = r->tp;
	bool moved = false, promoted = false;
	size_t masters = 0;
	memset(cl->next, 0, RC_SLOTS * sizeof(*cl->next));
	for (size_t i = 0; i < n; i++) {
		struct cl_node *cn = cluster_node(r, ranges[i].host, ranges[i].port);
		for (unsigned s = ranges[i].first; s <= ranges[i].last; s++)
			cl->next[s] = cn;
	}
	for (size_t i = 0; i < r->nnodes; i++) {
		struct cl_node *cn = cl_at(r, i);
		size_t count = 0;
		bool changed = false;
		for (size_t s = 0; s < RC_SLOTS; s++) {
			count += cl->next[s] == cn;
			changed |= (cl->next[s] == cn) != (cl->listened[s] == cn);
		}
		if (changed || count != cn->nslots)
			cluster_listen(cl, cn, count);
		masters += count > 0;
		promoted |= count > 0 && cn->nslots == 0;	/* a replica promoted, or new */
		cn->nslots = count;
	}
	for (size_t s = 0; s < RC_SLOTS && !moved; s++)
		moved = cl->listened[s] != cl->next[s];
	memcpy(cl->slots, cl->next, RC_SLOTS * sizeof(*cl->slots));
	memcpy(cl->listened, cl->next, RC_SLOTS * sizeof(*cl->listened));
	if (moved) {
		char list[1024];
		size_t len = 0, covered = 0;
		for (size_t i = 0; i < r->nnodes; i++) {
			const struct cl_node *cn = cl_at(r, i);
			covered += cn->nslots;
			if (cn->nslots > 0 && len < sizeof(list))
				len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s (%zu)",
				    len > 0 ? ", " : "", cn->nd.addr, cn->nslots);
		}
		log_info("redis-cluster: %zu master%s: %s; %zu of %d slots covered", masters,
		    masters == 1 ? "" : "s", list, covered, RC_SLOTS);
		if (cl->map_loaded) {
			/* keys that moved are in a new server now: resharding moved
			 * their leases (MIGRATE), a failover may have lost some; the
			 * holders hear of it before another daemon takes a key */
			if (promoted)
				rd_settle(r, CL_PROMOTED_SETTLE_MS);
			deleg_distrust(r);
			r->be->up.expire(r->be->up.arg, NULL, 0);
			r->be->up.wakeup(r->be->up.arg, NULL, 0);
		}
	}
	cl->map_loaded = true;
}

/* A node's answer to CLUSTER SLOTS. */
static void
on_slots(void *arg, const redisReply *rep, const char *why)
{
	struct cl_node *cn = arg;
	struct rd *r = cn->nd.r;
	struct cl *cl = r->tp;
	struct rc_range *ranges;
	size_t n;
	cl->refreshing = false;
	if (r->destroying)
		return;
	if (rep != NULL && rcluster_parse_slots(rep, cn->nd.host, &ranges, &n, &why) == 0) {
		cl->nrefreshes++;
		cl->map_error[0] = '\0';
		cluster_apply(r, ranges, n);
		free(ranges);
	} else {
		char msg[sizeof(cl->map_error)];
		bool perm = rep != NULL && rep->type == REDIS_REPLY_ERROR &&
		    (strncmp(rep->str, "NOPERM", 6) == 0 || strstr(rep->str, "permission") != NULL);
		snprintf(msg, sizeof(msg), "%s", rep != NULL && rep->type == REDIS_REPLY_ERROR ?
		    rep->str : why != NULL ? why : "no reply");
		if (strcmp(msg, cl->map_error) != 0) {
			/* once per reason, not at every attempt */
			snprintf(cl->map_error, sizeof(cl->map_error), "%s", msg);
			if (perm)
				log_warn("redis-cluster node %s: no slot map: %s; the redis-cluster "
				    "user needs at least the ACL '%s'", cn->nd.addr, msg, r->acl);
			else
				log_warn("redis-cluster node %s: no slot map: %s", cn->nd.addr, msg);
		}
		/* the timer asks the next node */
	}
	if (cl->refresh_again) {
		cl->refresh_again = false;
		cluster_refresh(r);
	}
	cluster_arm(r);
}

/* Ask a node that is up for the map (masters first, in turn), unless one
 * was asked already (then again once it answered). None up: the timer
 * asks again. */
static void
cluster_refresh(struct rd *r)
{
	static const char *const argv[] = { "CLUSTER", "SLOTS" };
	static const size_t argvlen[] = { 7, 5 };
	struct cl *cl = r->tp;
	if (r->destroying)
		return;
	if (cl->refreshing) {
		cl->refresh_again = true;
		return;
	}
	for (int pass = 0; pass < 2; pass++)
		for (size_t k = 0; k < r->nnodes; k++) {
			size_t i = (cl->refresh_next + k) % r->nnodes;
			struct cl_node *cn = cl_at(r, i);
			if ((pass == 0 && cn->nslots == 0) || !rnode_up(cn->nd.node) ||
			    rnode_command(cn->nd.node, 2, argv, argvlen, on_slots, cn) < 0)
				continue;
			cl->refresh_next = i + 1;
			cl->refreshing = true;
			return;
		}
}

/* Every refresh_ms (or CL_REFRESH_FAST_MS): read the map again. */
static void
on_refresh(evutil_socket_t fd, short what, void *arg)
{
	struct rd *r = arg;
	(void)fd;
	(void)what;
	cluster_refresh(r);
	cluster_arm(r);
}

/* The channels of every slot and the map's timer (no node yet: the seeds
 * are made at start, the masters by the map). A cluster's user needs the
 * map, redirected calls and the shard channels too. */
static void
cluster_init(struct rd *r)
{
	const struct rd_settings *c = r->set;
	size_t plen = strlen(c->key_prefix), each = plen + 16 + RC_TAG_MAX, acl;
	struct cl *cl = xcalloc(1, sizeof(*cl));
	char *buf;
	r->tp = cl;
	r->ncalls = 1;
	acl = strlen(r->acl);
	snprintf(r->acl + acl, sizeof(r->acl) - acl, " %s", RSCRIPT_ACL_CLUSTER);
	cl->slots = xcalloc(RC_SLOTS, sizeof(*cl->slots));
	cl->next = xcalloc(RC_SLOTS, sizeof(*cl->next));
	cl->listened = xcalloc(RC_SLOTS, sizeof(*cl->listened));
	cl->chan = xcalloc(2 * RC_SLOTS, sizeof(*cl->chan));
	buf = xmalloc(2 * RC_SLOTS * each);
	for (size_t s = 0; s < RC_SLOTS; s++) {
		const char *tag = rcluster_slot_tag((unsigned)s);
		cl->chan[2 * s] = buf + 2 * s * each;
		cl->chan[2 * s + 1] = buf + (2 * s + 1) * each;
		snprintf(cl->chan[2 * s], each, "%sreleased{%s}", c->key_prefix, tag);
		snprintf(cl->chan[2 * s + 1], each, "%swanted{%s}", c->key_prefix, tag);
	}
	TAILQ_INIT(&cl->again);
	cl->ev_refresh = evtimer_new(r->be->base, on_refresh, r);
}

/* The seeds' nodes, started; the map is read as soon as one is up. */
static void
cluster_start(struct rd *r)
{
	const struct rd_settings *c = r->set;
	char list[1024];
	size_t n = 0;
	for (size_t i = 0; i < c->nseeds; i++) {
		struct addr a;
		const char *why;
		if (conf_server_parse(c->seeds[i].server, RD_PORT, &a, &why) < 0)
			continue;	/* conf checked it */
		struct cl_node *cn = cluster_node(r, a.host, a.port);
		if (n < sizeof(list))
			n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s",
			    i > 0 ? ", " : "", cn->nd.addr);
	}
	cluster_arm(r);
	log_info("redis-cluster backend: seed%s %s, key prefix '%s'%s%s%s",
	    c->nseeds == 1 ? "" : "s", list, c->key_prefix, c->tls ? ", TLS" : "",
	    c->username != NULL ? ", user " : "", c->username != NULL ? c->username : "");
}

/* Fail the ops waiting to be sent again; free the nodes, the map, the
 * channels. */
static void
cluster_destroy(struct rd *r)
{
	struct cl *cl = r->tp;
	struct rd_op *op;
	while ((op = TAILQ_FIRST(&cl->again)) != NULL) {
		TAILQ_REMOVE(&cl->again, op, settle);
		rd_op_complete(op, BE_ERROR, 0, "the backend is shutting down");
	}
	for (size_t i = 0; i < r->nnodes; i++) {
		struct cl_node *cn = cl_at(r, i);
		free(cn->chans);
		free(cn);
	}
	free(cl->slots);
	free(cl->next);
	free(cl->listened);
	free(cl->chan[0]);
	free(cl->chan);
	event_free(cl->ev_refresh);
	free(cl);
	r->tp = NULL;
}

/* Every call is sent, or fails from cluster_send. */
static bool
cluster_ready(const struct rd *r, const struct rd_op *op)
{
	(void)r;
	(void)op;
	return true;
}

/* A release is kept on its slot's master as the map says now (a MOVED
 * moved it), else on the node it went to last. */
static struct rd_node *
cluster_home(const struct rd *r, const struct rd_op *op, size_t i)
{
	const struct cl *cl = r->tp;
	struct cl_node *cn = cl->slots[op_slot(op)];
	(void)i;
	return cn != NULL ? &cn->nd : op->calls[0].node;
}

/* The shard channel of key's slot. */
static const char *
cluster_channel(const struct rd *r, const char *key, size_t keylen, bool wanted)
{
	const struct cl *cl = r->tp;
	return cl->chan[2 * rcluster_lock_slot(key, keylen) + (wanted ? 1 : 0)];
}

/* Which master failed, and Redis's error when it gave one. */
static void
cluster_failed(const struct rd *r, const struct rd_node *nd, const redisReply *rep,
    const char *why, char *buf, size_t len)
{
	(void)r;
	snprintf(buf, len, "redis-cluster node %.60s: %.130s", nd->addr, rep != NULL &&
	    rep->type == REDIS_REPLY_ERROR ? rep->str : why);
}

/* A node is up: the map is read (it may be the first up). */
static void
cluster_up(struct rd *r, struct rd_node *nd)
{
	(void)nd;
	cluster_refresh(r);
}

/* A master's connection went: a replica may take its slots. */
static void
cluster_down(struct rd *r, struct rd_node *nd)
{
	if (cl_node_of(nd)->nslots == 0)
		return;
	cluster_refresh(r);
	cluster_arm(r);
}

/* Why the cluster fails now: no map yet, or slots with no master
 * reachable (the first such master and why); else NULL. */
static const char *
cluster_problem(const struct rd *r, char *buf, size_t len)
{
	const struct cl *cl = r->tp;
	size_t up = cluster_slots_up(r), n;
	uint64_t since;
	if (cl->map_loaded && up == RC_SLOTS)	/* why an operation failed lately */
		return rd_recent_failure(r, "redis-cluster: ", buf, len);
	if (!cl->map_loaded)
		n = (size_t)snprintf(buf, len, "redis-cluster: no slot map yet");
	else
		n = (size_t)snprintf(buf, len, "redis-cluster: %zu of %d slots have no master "
		    "reachable", RC_SLOTS - up, RC_SLOTS);
	for (size_t i = 0; i < r->nnodes && n < len; i++) {
		const struct cl_node *cn = cl_at(r, i);
		const char *p;
		if (rnode_up(cn->nd.node) || (cl->map_loaded && cn->nslots == 0))
			continue;
		p = rnode_problem(cn->nd.node, &since);
		n += (size_t)snprintf(buf + n, len - n, "; %s: %s", cn->nd.addr,
		    p != NULL ? p : "not connected yet");
		break;
	}
	return buf;
}

/* "connected" while every slot has its master up, "degraded" while some
 * do. */
static const char *
cluster_state(const struct rd *r)
{
	size_t up = cluster_slots_up(r);
	return up == RC_SLOTS ? "connected" : up > 0 ? "degraded" : "disconnected";
}

static bool
cluster_connected(const struct rd *r)
{
	return cluster_slots_up(r) == RC_SLOTS;
}

/* Every master listens to its slots' channels (a node that is no master
 * needs not). */
static bool
cluster_subscribed(const struct rd *r)
{
	struct rnode_stats st;
	size_t n = 0;
	for (size_t i = 0; i < r->nnodes; i++) {
		rnode_stats(r->nodes[i]->node, &st);
		n += st.subscribed || cl_at(r, i)->nslots == 0;
	}
	return n == r->nnodes;
}

/* The cluster's INFO lines: the map, the redirections, each master. */
static void
cluster_info(struct rd *r, struct evbuffer *out)
{
	struct cl *cl = r->tp;
	size_t m = 0, masters = 0;
	for (size_t i = 0; i < r->nnodes; i++)
		masters += cl_at(r, i)->nslots > 0;
	evbuffer_add_printf(out, "backend_cluster_masters:%zu\r\nbackend_cluster_slots_up:%zu\r\n"
	    "backend_cluster_refreshes_total:%llu\r\nbackend_cluster_moved_total:%llu\r\n"
	    "backend_cluster_ask_total:%llu\r\nbackend_cluster_tryagain_total:%llu\r\n",
	    masters, cluster_slots_up(r), (unsigned long long)cl->nrefreshes,
	    (unsigned long long)cl->nmoved, (unsigned long long)cl->nask,
	    (unsigned long long)cl->ntryagain);
	/* masters in the order of their first slot */
	for (size_t s = 0; s < RC_SLOTS; s++) {
		struct cl_node *cn = cl->slots[s];
		if (cn == NULL || (s > 0 && cl->slots[s - 1] == cn) || cn->listed)
			continue;
		cn->listed = true;
		evbuffer_add_printf(out, "backend_master%zu_address:%s\r\n"
		    "backend_master%zu_slots:%zu\r\nbackend_master%zu_connected:%d\r\n"
		    "backend_master%zu_calls_total:%llu\r\n", m, cn->nd.addr, m, cn->nslots, m,
		    rnode_up(cn->nd.node), m, (unsigned long long)cn->nd.ncalls);
		m++;
	}
	for (size_t i = 0; i < r->nnodes; i++)
		cl_at(r, i)->listed = false;
}

/* A Redis Cluster's slot masters, one call per operation. */
/* HELD lists the masters' keys: the nodes that own slots now. */
static bool
cluster_lists(const struct rd *r, const struct rd_node *nd)
{
	(void)r;
	return cl_node_of(nd)->nslots > 0;
}

const struct rd_topo rd_topo_cluster = {
	.name = "redis-cluster",
	.hash_tags = true,
	.init = cluster_init,
	.start = cluster_start,
	.destroy = cluster_destroy,
	.ready = cluster_ready,
	.send = cluster_send_op,
	.home = cluster_home,
	.redirected = cluster_redirected,
	.channel = cluster_channel,
	.failed = cluster_failed,
	.up = cluster_up,
	.down = cluster_down,
	.problem = cluster_problem,
	.lists = cluster_lists,
	.state = cluster_state,
	.address = rd_addr_list,
	.connected = cluster_connected,
	.subscribed = cluster_subscribed,
	.info_after = cluster_info,
};
