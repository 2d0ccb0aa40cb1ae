/*
 * rtopo_nodes — the topologies of a fixed list of servers: one Redis server
 * (the redis backend at backend.address), or redlock's N independent
 * servers (backend.nodes). Every operation is a call on each node at once,
 * decided by a quorum of them (rquorum.c; one server: its answer).
 *
 * Redlock's grants are valid for the TTL less the clocks' drift over it
 * (TTL x clock_drift_factor + 2 ms), counted from the send; a node that has
 * not answered within backend.node_timeout_ms counts as failed; with
 * backend.restart_keepout_ms a node whose server started less than that ago
 * counts in no quorum. Shutdown does not wait for a release kept for a node
 * that is down: once the others released a lease, no quorum holds it, and
 * on that node it ends at its TTL.
 */
#include "rd.h"

#include <stdio.h>
#include <stdlib.h>

#include <event2/buffer.h>

#include "clock.h"
#include "conf.h"
#include "log.h"
#include "rnode.h"
#include "xmalloc.h"

/* Make the n nodes of the list (node i at backend.nodes[i] with what it
 * sets itself, or, for one server, at backend.address): not started. */
static void
nodes_make(struct rd *r, size_t n, struct rnode_conf *nc)
{
	const struct rd_settings *c = r->set;
	struct rd_node *all = xcalloc(n, sizeof(*all));
	r->tp = all;
	r->ncalls = n;
	for (size_t i = 0; i < n; i++) {
		struct rd_node *nd = &all[i];
		const struct conf_node *cn = c->nnodes > 0 ? &c->nodes[i] : NULL;
		struct addr a = c->address;
		const char *why;
		if (cn != NULL && conf_server_parse(cn->server, RD_PORT, &a, &why) < 0)
			a = c->address;	/* conf checked it */
		nc->host = a.host;
		nc->port = a.port;
		nd->set = cn;
		if (cn != NULL) {
			/* what the node sets itself, else the backend's */
			nc->username = cn->username != NULL ? cn->username : c->username;
			nc->password = cn->password != NULL ? cn->password : c->password;
			nc->tls_name = cn->tls_server_name != NULL ? cn->tls_server_name :
			    c->tls_server_name;
			if (rd_node_tls_on(c, cn) && rd_node_tls_own(cn))	/* checked by rd_create */
				nd->tls = rd_node_tls(c, cn, r->topo->name);
			nc->tls = !rd_node_tls_on(c, cn) ? NULL : nd->tls != NULL ? nd->tls : r->tls;
		}
		rd_node_init(r, nd, nc);
		rd_node_add(r, nd);
	}
}

/* One server at backend.address. */
static void
single_init(struct rd *r)
{
	struct rnode_conf nc = rd_node_conf(r, "redis");
	nodes_make(r, 1, &nc);
}

/* Redlock's servers, each checking at connect that a restart keeps every
 * write (and reading its uptime, for the keep-out). */
static void
redlock_init(struct rd *r)
{
	struct rnode_conf nc = rd_node_conf(r, "redlock node");
	nc.check_persistence = true;
	nc.read_uptime = r->set->restart_keepout_ms > 0;
	r->drift = strtod(r->set->clock_drift_factor, NULL);
	r->drift_ms = 2;
	nodes_make(r, r->set->nnodes, &nc);
}

static void
single_start(struct rd *r)
{
	const struct rd_settings *c = r->set;
	rnode_start(r->nodes[0]->node);
	log_info("redis backend: %s:%d db %lld, key prefix '%s'%s%s%s", c->address.host,
	    c->address.port, c->db, c->key_prefix, c->tls ? ", TLS" : "",
	    c->username != NULL ? ", user " : "", c->username != NULL ? c->username : "");
}

static void
redlock_start(struct rd *r)
{
	const struct rd_settings *c = r->set;
	char list[1024];
	size_t n = 0;
	for (size_t i = 0; i < r->nnodes; i++)
		rnode_start(r->nodes[i]->node);
	for (size_t i = 0; i < r->nnodes && n < sizeof(list); i++)
		n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", i > 0 ? ", " : "",
		    r->nodes[i]->addr);
	log_info("redlock backend: %zu nodes (%s), quorum %zu, db %lld, key prefix "
	    "'%s'%s%s%s", r->nnodes, list, r->quorum, c->db, c->key_prefix,
	    c->tls ? ", TLS" : "", c->username != NULL ? ", user " : "",
	    c->username != NULL ? c->username : "");
}

/* The nodes, one allocation (r->tp). */
static void
nodes_destroy(struct rd *r)
{
	free(r->tp);
	r->tp = NULL;
}

/* Call i goes to node i. */
static struct rd_node *
nodes_home(const struct rd *r, const struct rd_op *op, size_t i)
{
	(void)op;
	return r->nodes[i];
}

/* Several: which node failed. */
static void
redlock_failed(const struct rd *r, const struct rd_node *nd, const struct redisReply *rep,
    const char *why, char *buf, size_t len)
{
	(void)r;
	(void)rep;
	snprintf(buf, len, "redlock node %.60s: %.130s", nd->addr, why);
}

/* Why the one server fails now. */
static const char *
single_problem(const struct rd *r, char *buf, size_t len)
{
	char address[300];
	snprintf(address, sizeof(address), "%s:%d", r->set->address.host, r->set->address.port);
	return rd_node_problem(r->nodes[0], address, buf, len);
}

/* Why redlock fails now (fewer nodes up, and counting, than a quorum; with
 * a quorum, why an operation failed within RD_FAILURE_SHOWN_MS), in buf;
 * else NULL. */
static const char *
redlock_problem(const struct rd *r, char *buf, size_t len)
{
	size_t up = rlist_counting(r), n;
	uint64_t since, out, now = clock_ms();
	if (up >= r->quorum)
		return rd_recent_failure(r, "", buf, len);
	n = (size_t)snprintf(buf, len, "redlock: %zu of %zu nodes up, %zu needed", up,
	    r->nnodes, r->quorum);
	for (size_t i = 0; i < r->nnodes && n < len; i++) {
		const struct rd_node *nd = r->nodes[i];
		const char *p;
		if (rnode_up(nd->node)) {
			if ((out = rd_kept_out(r, nd, now)) == UINT64_MAX)
				n += (size_t)snprintf(buf + n, len - n, "; %s: kept out (its uptime "
				    "cannot be read)", nd->addr);
			else if (out > 0)
				n += (size_t)snprintf(buf + n, len - n, "; %s: restarted, kept out "
				    "for %llu ms more (backend.restart_keepout_ms)", nd->addr,
				    (unsigned long long)out);
			continue;
		}
		p = rnode_problem(nd->node, &since);
		n += (size_t)snprintf(buf + n, len - n, "; %s: %s", nd->addr,
		    p != NULL ? p : "not connected yet");
		if (p != NULL && since != 0 && now - since >= 1000 && n < len)
			n += (size_t)snprintf(buf + n, len - n, ", for %llu s",
			    (unsigned long long)((now - since) / 1000));
	}
	return buf;
}

/* Redlock's INFO lines: the quorum, and each node's state and counts. */
static void
redlock_info(struct rd *r, struct evbuffer *out)
{
	uint64_t now = clock_ms();
	evbuffer_add_printf(out, "backend_nodes:%zu\r\nbackend_quorum:%zu\r\n"
	    "backend_nodes_up:%zu\r\nbackend_nodes_counting:%zu\r\n"
	    "backend_node_timeout_ms:%lld\r\nbackend_clock_drift_factor:%s\r\n"
	    "backend_restart_keepout_ms:%lld\r\n", r->nnodes, r->quorum, rlist_up(r),
	    rlist_counting(r), r->set->node_timeout_ms, r->set->clock_drift_factor,
	    r->set->restart_keepout_ms);
	for (size_t i = 0; i < r->nnodes; i++) {
		const struct rd_node *nd = r->nodes[i];
		struct rnode_stats st;
		uint64_t out_ms = rd_kept_out(r, nd, now);
		rnode_stats(nd->node, &st);
		evbuffer_add_printf(out, "backend_node%zu_address:%s\r\n"
		    "backend_node%zu_connected:%d\r\nbackend_node%zu_subscribed:%d\r\n"
		    "backend_node%zu_calls_total:%llu\r\n"
		    "backend_node%zu_failures_total:%llu\r\n"
		    "backend_node%zu_timeouts_total:%llu\r\n"
		    "backend_node%zu_reconnects_total:%llu\r\n"
		    "backend_node%zu_persistence:%s\r\n"
		    "backend_node%zu_kept_out_ms:%lld\r\n", i, nd->addr, i, st.up, i,
		    st.subscribed, i, (unsigned long long)nd->ncalls, i,
		    (unsigned long long)nd->nfailures, i, (unsigned long long)nd->ntimeouts, i,
		    (unsigned long long)st.reconnects, i, st.persistence, i,
		    out_ms == UINT64_MAX ? -1LL : (long long)out_ms);
	}
}

/* One Redis server. */
const struct rd_topo rd_topo_single = {
	.name = "redis",
	.wait_down = true,
	.init = single_init,
	.start = single_start,
	.destroy = nodes_destroy,
	.ready = rlist_ready,
	.send = rlist_send,
	.home = nodes_home,
	.channel = rd_channel_plain,
	.failed = rd_failed_plain,
	.problem = single_problem,
	.state = rlist_state,
	.address = rd_addr_connected,
	.connected = rlist_connected,
	.subscribed = rlist_subscribed,
};

/* Redlock's independent servers, a quorum deciding each operation. */
const struct rd_topo rd_topo_redlock = {
	.name = "redlock",
	.count_answers = true,
	.init = redlock_init,
	.start = redlock_start,
	.destroy = nodes_destroy,
	.ready = rlist_ready,
	.send = rlist_send,
	.home = nodes_home,
	.channel = rd_channel_plain,
	.failed = redlock_failed,
	.problem = redlock_problem,
	.state = rlist_state,
	.address = rd_addr_list,
	.connected = rlist_connected,
	.subscribed = rlist_subscribed,
	.info_after = redlock_info,
};
