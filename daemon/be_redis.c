/*
 * be_redis — leases in one Redis server, shared by any number of daemons.
 *
 * The leases, fence counters and waiting marks in Redis, and the scripts
 * that keep them, are rscript.c's; the server's connections (name
 * resolution, TLS, AUTH, scripts loaded, timeouts, reconnects, releases
 * kept until Redis is back) are a Redis node's (rnode.c). This file is the
 * policy of one server, and of redlock's quorum of servers.
 *
 * Redlock (the "redlock" backend) runs the same policy over N independent
 * servers, one node each: every operation is a script call on every node
 * at once (struct rd_op, a struct rd_call per node), decided as soon as a
 * quorum (N / 2 + 1) answered alike, or once a quorum can no longer do so,
 * a node that has not answered within node_timeout_ms counting as failed.
 * A grant's fence is the largest a node of its quorum proposed, written
 * back (the raise script) to the nodes that proposed less until a quorum's
 * counters hold it, before it is delivered: any later quorum shares a node
 * with that one, so fences increase (PROTOCOL.md has the argument). Its
 * validity is the TTL less the clock drift (TTL x clock_drift_factor +
 * 2 ms), counted from the send. A lease taken where the grant failed is
 * released on the nodes that may hold it; a renewal counts when a quorum
 * had the lease, and a node that missed it takes it again then (not counted);
 * releases go to every node, kept for each node that is down. One server
 * (redis) is the quorum of one.
 *
 * A lease's end only ever moves later until the lease is released, so the
 * end the lock table counts from any reply (the call's send time plus the
 * TTL) is never after the end in Redis, whatever order requests run in.
 *
 * Everything issued in one loop iteration leaves in one write, so the
 * renewals that the lock table sends at one tick form one pipeline. The
 * node's subscriber connection listens to prefix + "released", where the
 * release script publishes each key it frees while the "w:" mark says a
 * daemon waits; a message wakes the lock table's queue of that key.
 * Messages can be lost, so every BUSY answer also arms a retry at the
 * holder's remaining lease (capped, with jitter).
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
 * A reply later than command_timeout_ms drops the connection, which fails
 * every call in flight. While disconnected, calls fail at once (from the
 * loop), except releases, which the node keeps and sends when the
 * connection is back; so is a release that Redis answered with an error
 * (LOADING, BUSY, READONLY). A kept release is dropped once its lease has
 * ended by itself.
 *
 * It owns its node and what is in Redis under the prefix. It must not block
 * the event loop, must not complete an operation from inside the call that
 * asked for it, and knows nothing of the lock table's state but what each
 * call says.
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
#include <event2/dns.h>
#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "clock.h"
#include "conf.h"
#include "hashtab.h"
#include "later.h"
#include "log.h"
#include "num.h"
#include "rcluster.h"
#include "rnode.h"
#include "rscript.h"
#include "tls.h"
#include "xmalloc.h"

#define RD_RETRY_CAP_MS 1000		/* longest sleep of a waiter after BUSY */
#define RD_RETRY_MIN_MS 2		/* ... when the lease ends as Redis answers */
#define RD_SETTLE_MS 250		/* after the connection is back, new leases
					 * wait this long: every daemon's renewals
					 * (on_up) come first */
#define RD_MARK_MS (4 * RD_RETRY_CAP_MS) /* life of a "someone waits" mark */
#define RD_SENTINEL_PORT 26379		/* the port of a sentinel that gives none */
#define RD_PORT 6379			/* the port of a server that gives none */
#define RD_YIELD_RETRY_MS 100		/* after a yield, this daemon's queue retries then */
#define RD_YIELD_QUIET_MS 80		/* and ignores release messages for the key this
					 * long: its own must not wake it first */
#define RD_REDIRECTS_MAX 16		/* cluster: MOVED, ASK, TRYAGAIN followed per call */
#define RD_AGAIN_MIN_MS 10		/* cluster: first wait before a TRYAGAIN's resend */
#define RD_AGAIN_MAX_MS 200		/* cluster: longest */
#define RD_REFRESH_FAST_MS 200		/* cluster: map asked again this often while a
					 * slot has no master reachable */
#define RD_PROMOTED_SETTLE_MS (RD_SETTLE_MS + 2 * RD_REFRESH_FAST_MS) /* cluster: new
					 * leases wait this long once a replica took
					 * slots over: every daemon reads the map
					 * (RD_REFRESH_FAST_MS apart at most) and
					 * renews before any takes a key there */

struct rd;
struct rd_op;

/* What one node answered to an operation (struct rd_call). */
enum rd_answer {
	RA_NONE,			/* not sent (the node is down) */
	RA_PENDING,			/* sent, not answered */
	RA_OK,				/* granted (its fence), renewed, released */
	RA_BUSY,			/* acquire: held elsewhere; transfer: yielded */
	RA_NOTOWNER,			/* not ours (any more) */
	RA_KIND,			/* acquire: held as another kind */
	RA_BROUGHT,			/* renew: it was missing, taken now */
	RA_FAILED			/* an error reply, no reply, or late */
};

/* One node's part of an operation. */
struct rd_call {
	struct rd_op *op;		/* the operation */
	unsigned char answer;		/* enum rd_answer */
	bool maybe;			/* failed, but may have taken the lease */
	bool raising;			/* the fence's write-back is in flight */
	long long busy_ms;		/* RA_BUSY acquire: when the key may be free */
	uint64_t fence;			/* RA_OK acquire, transfer: its proposal */
};

/* An operation: a script call on every node (one on the one node of a
 * redis backend), in flight, or a release waiting for the connection. */
struct rd_op {
	struct rd *r;			/* the backend */
	enum rscript script;		/* which script */
	be_cb *cb;			/* whom to tell, NULL for none */
	void *arg;
	enum be_status failed;		/* for ops failed before sending */
	char *key;			/* the lock's key (for BUSY retries), in buf */
	size_t keylen;			/* its length */
	const char *member;		/* the lease taken or released (acquire: the
					 * new one; transfer: to), in buf */
	const char *from;		/* transfer: from's member, in buf */
	uint64_t ttl_ms;		/* the lease asked for (or released) */
	unsigned fences;		/* acquire, transfer: fences it reserves */
	uint64_t sent_ms;		/* when it went out */
	struct rscript_args args;	/* the call: numkeys, keys, arguments */
	size_t pending;			/* calls (and write-backs) not answered */
	bool decided;			/* its caller was told */
	enum be_status told;		/* what, once decided */
	bool late;			/* the node timeout passed: what is pending
					 * counts as failed */
	bool raising;			/* granted: the fence is being written back */
	size_t raise_need;		/* write-backs a quorum still needs */
	uint64_t fence;			/* granted: its fence (the quorum's largest) */
	char raise[24];			/* the last fence reserved, for the write-back */
	const char *raise_argv[3];	/* the write-back's call */
	size_t raise_argvlen[3];
	struct event *ev_late;		/* several nodes: the node timeout */
	char why[200];			/* the first failure's reason */
	struct rd_call *calls;		/* one per node, after op */
	char *buf;			/* the key and every argument: the rest of
					 * op's allocation */
	struct later_item failing;	/* failed before sending: told from the loop */
	TAILQ_ENTRY(rd_op) settle;	/* an acquire on r->settling, or (cluster) an
					 * op on r->again */
	unsigned slot;			/* cluster: the slot of the key */
	struct rd_node *node;		/* cluster: the master it was sent to last */
	unsigned redirects;		/* cluster: redirections followed */
	struct event *ev_again;		/* cluster: sends it again (TRYAGAIN...) */
};
TAILQ_HEAD(rd_op_list, rd_op);

/* A Redis server of the backend: the one of redis, or a node of redlock. */
struct rd_node {
	struct rd *r;			/* the backend */
	struct rnode *node;		/* its client */
	const struct conf_node *set;	/* redlock: its settings, NULL: the backend's */
	struct tls_client *tls;		/* its own TLS context (TLS files of its own),
					 * NULL: the backend's, if TLS is on */
	char addr[300];			/* "host:port", for messages */
	bool was_up;			/* its connection was up once */
	uint64_t ncalls;		/* calls sent to it */
	uint64_t nfailures;		/* calls it failed (error, no reply, late) */
	uint64_t ntimeouts;		/* calls it answered after the node timeout */
	bool late_logged;		/* that it answers late was logged */
	/* cluster: */
	char host[256];			/* where it is */
	int port;
	size_t nslots;			/* slots it owns in the map (0: not a master) */
	const char **chans;		/* the shard channels of its slots (two each) */
	bool listed;			/* INFO: its lines are written */
	bool asking_logged;		/* that it refused ASKING was logged */
};

/* A sentinel (Sentinel mode). */
struct rd_sentinel {
	struct rd *r;			/* the backend */
	struct rnode *node;		/* the sentinel */
	const char *addr;		/* its "host:port", as configured */
	bool unknown_logged;		/* it said it does not know the master */
};

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
	char member[RSCRIPT_MEMBER_MAX];	/* the lease in Redis: "x0:<token>" */
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
	struct rd *r;			/* the backend */
	struct later_item later;	/* answered from the loop */
	TAILQ_ENTRY(rd_local) entry;	/* on r->locals */
};
TAILQ_HEAD(rd_local_list, rd_local);

/* The settings of the backend (backend.* keys; see rd_settings_table). */
struct rd_settings {
	struct addr address;		/* the server */
	char *username;			/* AUTH user (an ACL user), NULL: the default */
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
	long long min_replicas_ack;	/* replicas that must acknowledge a grant,
					 * renewal or handoff (WAIT); 0: none */
	long long replica_ack_timeout_ms; /* how long WAIT waits for them */
	char **sentinels;		/* Sentinel mode: the sentinels, "host:port" */
	size_t nsentinels;		/* how many; 0: one server at address */
	char *master_name;		/* the master the sentinels know by this name */
	char *sentinel_username;	/* the sentinels' AUTH user, NULL: none */
	char *sentinel_password;	/* their AUTH password, NULL: none */
	char *sentinel_password_file;	/* where it was read from, or NULL */
	long long tls;			/* 1: connect with TLS */
	char *tls_ca_file;		/* CAs that sign the server's certificate;
					 * NULL: the system's */
	char *tls_cert_file;		/* client certificate, or NULL */
	char *tls_key_file;		/* its key, or NULL */
	char *tls_server_name;		/* the name the server's certificate must
					 * carry, NULL: the host of address */
	struct conf_node *nodes;	/* redlock: its servers, each with what it
					 * sets itself (NULL, CONF_UNSET: as above) */
	size_t nnodes;			/* how many (redis: 0) */
	long long node_timeout_ms;	/* redlock: a node's answer later than this
					 * counts as failed; 0: a tenth of the TTL */
	char *clock_drift_factor;	/* redlock: drift = TTL x this + 2 ms */
	long long restart_keepout_ms;	/* redlock: a node counts in no quorum
					 * until its server has run this long (a
					 * restart may have lost its leases); 0: off */
	struct conf_node *seeds;	/* redis-cluster: nodes to read the map from
					 * (their addresses: nothing of their own) */
	size_t nseeds;			/* how many (0: not a cluster) */
	long long refresh_ms;		/* redis-cluster: the map is read this often */
};

static uint64_t rd_min_lease_ms(const void *settings);

struct rd {
	struct backend *be;		/* our backend */
	const struct rd_settings *set;	/* its settings */
	struct evdns_base *dns;		/* resolves the server's name */
	struct tls_client *tls;		/* the TLS context, NULL: plain */
	struct rd_node *nodes;		/* the servers: one (redis), or redlock's */
	size_t nnodes;			/* how many */
	size_t quorum;			/* how many must agree: nnodes / 2 + 1 */
	bool redlock;			/* the redlock backend */
	double drift;			/* redlock: clock_drift_factor */
	char failure[200];		/* redlock: why the last operation failed */
	uint64_t failure_at;		/* and when (clock_ms()) */
	struct rnode *node;		/* redis: nodes[0]'s (Sentinel mode: the master) */
	struct rd_sentinel *sentinels;	/* Sentinel mode: one node per sentinel */
	size_t nsentinels;		/* how many (0: one server) */
	bool asking;			/* a sentinel is asked for the master */
	size_t ask_next;		/* the sentinel to ask next */
	size_t asked;			/* sentinels asked in a row without an answer */
	char master[300];		/* the master's "host:port" last told, "" none */
	struct event *ev_ask;		/* asks again while the master is not up */
	char channel[128];		/* prefix + "released" */
	size_t channellen;
	char wanted[128];		/* prefix + "wanted" */
	size_t wantedlen;
	const char *channels[2];	/* both, as the node subscribes to them */
	char acl[512];			/* the smallest ACL of its Redis user */
	size_t releases_inflight;	/* releases sent, not answered */
	struct rd_retry_list retries;	/* BUSY retries */
	struct rd_retry_list yields;	/* retries after a yield (a few at most) */
	struct hashtab *delegs;		/* struct rd_deleg by key */
	struct rd_local_list locals;	/* local handoffs to answer */
	struct later *later;		/* answers r->locals and failed calls */
	struct rd_deleg_list cached;	/* cached leases, oldest first */
	struct event *ev_cache;		/* releases them when their time is up */
	uint64_t ncommands;		/* script calls sent */
	uint64_t nrenewals;		/* renewals sent */
	uint64_t nnotowner;		/* renewals or releases that found another owner */
	uint64_t nerrors;		/* calls that failed */
	uint64_t nmessages;		/* released messages received */
	uint64_t nretries;		/* BUSY retries fired */
	uint64_t nlocal;		/* handoffs made without a call to Redis */
	uint64_t ncache_hits;		/* grants of a cached lease */
	struct rd_op_list settling;	/* acquires held until settle_until */
	struct event *ev_settle;	/* sends them then */
	uint64_t settle_until;		/* no new lease before then (clock_ms()) */
	bool draining;			/* shutting down: cache nothing */
	bool destroying;		/* rd_destroy runs: keep nothing for later */
	/* redis-cluster: */
	bool cluster;			/* the redis-cluster backend */
	struct rd_node **cl;		/* every node known: seeds, masters, past masters */
	size_t ncl;			/* how many */
	struct rd_node **slots;		/* RC_SLOTS: each slot's master, NULL: none known */
	struct rd_node **next;		/* RC_SLOTS: the map being read */
	struct rd_node **listened;	/* RC_SLOTS: the last map read, whose masters
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

/* ---- completing operations ---------------------------------------------- */

static const char *cluster_problem(const struct rd *r, char *buf, size_t len);

/* The node of op's call i: node i, or (cluster) the master op was sent to. */
static struct rd_node *
call_node(struct rd *r, const struct rd_op *op, size_t i)
{
	return r->cluster ? op->node : &r->nodes[i];
}

/* The servers of the backend: redis's one, redlock's, or every node of a
 * cluster known so far. */
static size_t
nodes_count(const struct rd *r)
{
	return r->cluster ? r->ncl : r->nnodes;
}

/* Server i of them. */
static struct rd_node *
node_at(const struct rd *r, size_t i)
{
	return r->cluster ? r->cl[i] : &r->nodes[i];
}

/* The nodes whose command connection is up. */
static size_t
nodes_up(const struct rd *r)
{
	size_t up = 0;
	for (size_t i = 0; i < r->nnodes; i++)
		up += rnode_up(r->nodes[i].node);
	return up;
}

/* Redlock with backend.restart_keepout_ms: how much longer node i counts
 * in no quorum, at now: its server started less than the keep-out ago (a
 * restart may have lost leases it held: PROTOCOL.md 8.4), or when it
 * started is not known (UINT64_MAX); 0: it counts. */
static uint64_t
kept_out_ms(const struct rd *r, size_t i, uint64_t now)
{
	uint64_t up, keepout = (uint64_t)r->set->restart_keepout_ms;
	if (!r->redlock || keepout == 0)
		return 0;
	if (!rnode_uptime(r->nodes[i].node, now, &up))
		return UINT64_MAX;
	return up < keepout ? keepout - up : 0;
}

/* Nodes up that count in a quorum (up, and not kept out). */
static size_t
nodes_counting(const struct rd *r)
{
	size_t n = 0;
	uint64_t now = clock_ms();
	for (size_t i = 0; i < r->nnodes; i++)
		n += rnode_up(r->nodes[i].node) && kept_out_ms(r, i, now) == 0;
	return n;
}

/*
 * How long a lease of ttl_ms that a call set lasts for sure, counted from
 * the call's send time. One Redis starts the lease when it runs the call,
 * after the send, and never shortens it: the TTL. Redlock's nodes count it
 * by clocks of their own, whose rate may differ from this host's: the TTL
 * less the drift over one lease (TTL x clock_drift_factor + 2 ms).
 */
static uint64_t
valid_for(const struct rd *r, uint64_t ttl_ms)
{
	uint64_t drift;
	if (!r->redlock)
		return ttl_ms;
	drift = (uint64_t)((double)ttl_ms * r->drift) + 2;
	return ttl_ms > drift ? ttl_ms - drift : 0;
}

/* Redlock: how long an operation waits for a node's answer (for a lease of
 * ttl_ms) before it counts it failed: backend.node_timeout_ms, or a tenth
 * of the TTL, no longer than a command may take. */
static uint64_t
node_timeout(const struct rd *r, uint64_t ttl_ms)
{
	uint64_t t = ttl_ms / 10, cap = (uint64_t)r->set->command_timeout_ms;
	if (r->set->node_timeout_ms > 0)
		return (uint64_t)r->set->node_timeout_ms;
	return t < 1 ? 1 : t > cap ? cap : t;
}

static void
op_free(struct rd_op *op)
{
	if (op->ev_late != NULL)
		event_free(op->ev_late);
	if (op->ev_again != NULL)
		event_free(op->ev_again);
	free(op);	/* its calls, key and arguments are in the same block */
}

/* Free op once its caller was told and every call of it answered (the
 * calls use its arguments until then). */
static void
op_done(struct rd_op *op)
{
	if (op->decided && op->pending == 0)
		op_free(op);
}

/* Tell op's caller, once; a BE_OK lease lasts at least valid_for its TTL
 * from the call (the scripts ran after it and never shorten a lease). op
 * stays until op_done frees it. */
static void
op_tell(struct rd_op *op, enum be_status st, uint64_t fence, const char *why)
{
	struct be_reply rep = { st, fence, st == BE_OK ? valid_for(op->r, op->ttl_ms) : 0, why };
	assert(!op->decided);
	op->decided = true;
	op->told = st;
	/* the node timeout stays armed while calls are out: it counts the
	 * nodes that answer late (on_late) */
	if (st == BE_ERROR) {
		op->r->nerrors++;
		if ((op->r->redlock || op->r->cluster) && why != NULL) {
			snprintf(op->r->failure, sizeof(op->r->failure), "%s", why);
			op->r->failure_at = clock_ms();
		}
	}
	if (op->cb != NULL)
		op->cb(op->arg, &rep);
}

/* Tell op's caller and free op (nothing of it is in flight). */
static void
op_complete(struct rd_op *op, enum be_status st, uint64_t fence, const char *why)
{
	op_tell(op, st, fence, why);
	op_done(op);
}

#define RD_FAILURE_SHOWN_MS 2000		/* redlock: an operation's failure is
					 * the backend's problem this long */

/* Redlock: why it fails now (fewer nodes up, and counting, than a quorum;
 * with a quorum, why an operation failed within RD_FAILURE_SHOWN_MS), in
 * buf; else NULL. */
static const char *
redlock_problem(const struct rd *r, char *buf, size_t len)
{
	size_t up = nodes_counting(r), n;
	uint64_t since, out, now = clock_ms();
	if (up >= r->quorum) {
		if (r->failure_at == 0 || now - r->failure_at > RD_FAILURE_SHOWN_MS)
			return NULL;
		snprintf(buf, len, "%s", r->failure);
		return buf;
	}
	n = (size_t)snprintf(buf, len, "redlock: %zu of %zu nodes up, %zu needed", up,
	    r->nnodes, r->quorum);
	for (size_t i = 0; i < r->nnodes && n < len; i++) {
		const struct rd_node *nd = &r->nodes[i];
		const char *p;
		if (rnode_up(nd->node)) {
			if ((out = kept_out_ms(r, i, now)) == UINT64_MAX)
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

/* Why the backend fails now, for a reply: a few words that hold no secret,
 * in buf; NULL when nothing is known to be wrong. */
static const char *
rd_problem(struct backend *be, char *buf, size_t len)
{
	struct rd *r = be->priv;
	uint64_t since, now = clock_ms();
	const char *p;
	if (r->redlock)
		return redlock_problem(r, buf, len);
	if (r->cluster)
		return cluster_problem(r, buf, len);
	p = rnode_problem(r->node, &since);
	if (p == NULL)
		return NULL;
	if (r->nsentinels > 0 && r->master[0] == '\0') {
		size_t up = 0;
		for (size_t i = 0; i < r->nsentinels; i++)
			up += r->sentinels[i].node != NULL && rnode_up(r->sentinels[i].node);
		snprintf(buf, len, "redis: no sentinel has told where master '%s' is yet "
		    "(%zu of %zu sentinels reached)", r->set->master_name, up, r->nsentinels);
		return buf;
	}
	if (since != 0 && now - since >= 1000)
		snprintf(buf, len, "redis %s:%d: %s, for %llu s", r->set->address.host,
		    r->set->address.port, p, (unsigned long long)((now - since) / 1000));
	else
		snprintf(buf, len, "redis %s:%d: %s", r->set->address.host, r->set->address.port,
		    p);
	return buf;
}

/* Tell a call that failed before it was sent, from the loop. */
static void
on_failed(struct later_item *it)
{
	struct rd_op *op = (struct rd_op *)(void *)((char *)it - offsetof(struct rd_op, failing));
	char why[200];
	const char *p = op->r->destroying ? "the backend is shutting down" :
	    rd_problem(op->r->be, why, sizeof(why));
	op_complete(op, op->failed, 0, p != NULL ? p : "redis is not connected");
}

/* Answer a local handoff from the loop (BE_ERROR when the backend is being
 * destroyed, BE_NOTOWNER when its delegation went meanwhile). */
static void
on_local(struct later_item *it)
{
	struct rd_local *lo = (struct rd_local *)(void *)((char *)it -
	    offsetof(struct rd_local, later));
	struct rd *r = lo->r;
	struct be_reply rep = { BE_OK, lo->fence, lo->valid_ms, NULL };
	if (r->destroying)
		rep = (struct be_reply){ BE_ERROR, 0, 0, "the backend is shutting down" };
	else if (lo->grant && lo->d == NULL)
		rep = (struct be_reply){ BE_NOTOWNER, 0, 0, "the lease had ended in redis" };
	TAILQ_REMOVE(&r->locals, lo, entry);
	lo->cb(lo->arg, &rep);
	free(lo);
}

/* Fail op from the loop (never from inside the call that made it). */
static void
op_fail_later(struct rd_op *op, enum be_status st)
{
	op->failed = st;
	later_add(op->r->later, &op->failing, on_failed);
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
	d->lease_end = op->sent_ms + valid_for(r, op->ttl_ms);
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
	struct rd_local *lo = xcalloc(1, sizeof(*lo));
	lo->r = r;
	lo->cb = cb;
	lo->arg = arg;
	lo->grant = d != NULL;
	lo->d = d;
	lo->fence = fence;
	lo->valid_ms = valid_ms;
	TAILQ_INSERT_TAIL(&r->locals, lo, entry);
	later_add(r->later, &lo->later, on_local);
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

/* The wait before a retry for a lease with pttl ms left: that (at most
 * RD_RETRY_CAP_MS), RD_RETRY_MIN_MS when the lease ends now or is gone (0 or
 * -2), the cap for a key that does not expire (-1). */
static uint64_t
retry_delay(long long pttl)
{
	return pttl == 0 || pttl == -2 ? RD_RETRY_MIN_MS : pttl > 0 &&
	    pttl < RD_RETRY_CAP_MS ? (uint64_t)pttl : RD_RETRY_CAP_MS;
}

/* Wake the lock table's queue of key after retry_delay(pttl), with jitter.
 * quiet_ms > 0 (a yield): release messages for key are ignored that long. */
static void
retry_arm(struct rd *r, const char *key, size_t keylen, long long pttl, uint64_t quiet_ms)
{
	uint64_t delay = retry_delay(pttl);
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
static void on_reply(void *arg, const redisReply *rep, const char *why);
static void cluster_send(struct rd *r, struct rd_op *op, struct rd_node *nd, bool asking);
static void cluster_refresh(struct rd *r);
static void cluster_arm(struct rd *r);
static bool cluster_redirected(struct rd *r, struct rd_op *op, const redisReply *rep);
static struct rd_op *release_new(struct rd *r, const struct be_lock *l, const char *member,
    be_cb *cb, void *arg);

/* Keep release op's call for node i (rnode_keep): sent now or when its
 * connection is back, and again after an error reply; dropped once its
 * lease has ended by itself. */
static void
keep_on(struct rd *r, const struct rd_op *op, size_t i)
{
	/* cluster: the slot's master as the map says now (a MOVED moved it) */
	struct rd_node *nd = !r->cluster ? &r->nodes[i] : r->slots[op->slot] != NULL ?
	    r->slots[op->slot] : op->node;
	if (nd == NULL)
		return;	/* cluster: no master known; the lease ends at its TTL */
	rnode_keep(nd->node, RS_RELEASE, op->args.argc, op->args.argv,
	    op->args.argvlen, clock_ms() + op->ttl_ms);
}

/* Keep release op for every node; op (never sent) is freed. */
static void
keep_release(struct rd *r, struct rd_op *op)
{
	for (size_t i = 0; i < r->nnodes; i++)
		keep_on(r, op, i);
	op_free(op);
}

/*
 * Release member, a lease of op's key, on the nodes where op may have taken
 * it (granted, not answered, or failed with no reply), or on every node
 * (all): op was not granted, its grant cannot be used, or member's lease is
 * over. Kept until each node answers; releasing what was never taken is a
 * harmless no-op in the script.
 */
static void
release_taken(struct rd *r, const struct rd_op *op, const char *member, bool all)
{
	struct be_lock l = { .key = op->key, .keylen = op->keylen, .ttl_ms = op->ttl_ms };
	struct rd_op *rel = NULL;
	if (r->destroying)
		return;	/* leases end at their TTL */
	for (size_t i = 0; i < r->nnodes; i++) {
		const struct rd_call *c = &op->calls[i];
		if (!all && c->answer != RA_OK && c->answer != RA_PENDING &&
		    !(c->answer == RA_FAILED && c->maybe))
			continue;
		if (rel == NULL)
			rel = release_new(r, &l, member, NULL, NULL);
		keep_on(r, rel, i);
	}
	if (rel != NULL)
		op_free(rel);
}

/* A renewal of op's key was decided (st): a delegated lease renewed lasts
 * longer; one that is gone ends its delegation, and the key's holdings are
 * renewed at once, so that the one that holds the key here now hears of it. */
static void
deleg_renewed(struct rd *r, const struct rd_op *op, enum be_status st)
{
	struct rd_deleg *d = deleg_find(r, op->key, op->keylen);
	uint64_t end = op->sent_ms + valid_for(r, op->ttl_ms);
	if (d == NULL || strcmp(d->member, op->member) != 0)
		return;
	if (st == BE_OK && end > d->lease_end) {
		d->lease_end = end;
	} else if (st == BE_NOTOWNER) {
		deleg_drop(r, d);
		r->be->up.expire(r->be->up.arg, op->key, op->keylen);
	}
}

/* op (an acquire or a transfer) holds its lease on a quorum with its fence,
 * written back where needed: the fences it reserved are delegated, and its
 * caller is told. */
static void
granted(struct rd *r, struct rd_op *op)
{
	if (op->script == RS_TRANSFER || op->fences > 1)
		deleg_granted(r, op, op->fence);
	op_tell(op, BE_OK, op->fence, NULL);
}

/* Arm op's node timeout (several nodes only). */
static void
late_arm(struct rd *r, struct rd_op *op)
{
	struct timeval tv = clock_tv(node_timeout(r, op->ttl_ms));
	op->late = false;
	evtimer_add(op->ev_late, &tv);
}

/* The write-back of a granted op's fence: done once a quorum's counters are
 * at its last fence (granted, else answered BE_ERROR, and the lease given
 * back, once that can no longer happen). */
static void
raise_check(struct rd *r, struct rd_op *op)
{
	size_t inflight = 0;
	if (op->raise_need == 0) {
		granted(r, op);
		return;
	}
	for (size_t i = 0; i < r->nnodes && !op->late; i++)
		inflight += op->calls[i].raising;
	if (inflight >= op->raise_need)
		return;
	release_taken(r, op, op->member, false);
	snprintf(op->why, sizeof(op->why), "redlock: the fence was not written back to %zu "
	    "of %zu nodes in time", r->quorum, r->nnodes);
	op_tell(op, BE_ERROR, 0, op->why);
}

/*
 * A quorum granted op (an acquire or a transfer). Its fence is the largest
 * that a node of the quorum proposed; a node that proposed less has a
 * counter below the fences reserved: they are written back to it (the
 * counter becomes at least the last of them), and op is granted once a
 * quorum's counters are there, so that any later quorum, which shares a
 * node with it, proposes more (PROTOCOL.md, fences). One node: its fence.
 */
static void
quorum_granted(struct rd *r, struct rd_op *op, uint64_t fence)
{
	size_t at = 0;
	op->fence = fence;
	for (size_t i = 0; i < r->nnodes; i++)
		at += op->calls[i].answer == RA_OK && op->calls[i].fence == fence;
	op->raise_need = at >= r->quorum ? 0 : r->quorum - at;
	if (op->raise_need == 0) {
		granted(r, op);
		return;
	}
	op->raising = true;
	snprintf(op->raise, sizeof(op->raise), "%llu",
	    (unsigned long long)(fence + (op->fences > 0 ? op->fences : 1) - 1));
	op->raise_argv[0] = "1";
	op->raise_argvlen[0] = 1;
	op->raise_argv[1] = op->args.argv[2];	/* the fence counter: keys "lfw" */
	op->raise_argvlen[1] = op->args.argvlen[2];
	op->raise_argv[2] = op->raise;
	op->raise_argvlen[2] = strlen(op->raise);
	for (size_t i = 0; i < r->nnodes; i++) {
		struct rd_call *c = &op->calls[i];
		if (c->answer != RA_OK || c->fence >= fence ||
		    rnode_eval(call_node(r, op, i)->node, RS_RAISE, 3, op->raise_argv,
		    op->raise_argvlen, on_reply, c) < 0)
			continue;
		c->raising = true;
		op->pending++;
		call_node(r, op, i)->ncalls++;
		r->ncommands++;
	}
	late_arm(r, op);
	raise_check(r, op);
}

/* A quorum that held op's lease all along renewed it: node i, which had
 * lost or missed it and was given it back (RA_BROUGHT), counts from now on
 * (the confirm script, kept until it answers). */
static void
confirm_on(struct rd *r, const struct rd_op *op, size_t i)
{
	/* numkeys, the lock's key, the member: as in the renewal */
	rnode_keep(call_node(r, op, i)->node, RS_CONFIRM, 3, op->args.argv, op->args.argvlen,
	    clock_ms() + op->ttl_ms);
}

/* confirm_on each node that answered RA_BROUGHT. (A later one is confirmed
 * when its answer comes.) */
static void
confirm_brought(struct rd *r, const struct rd_op *op)
{
	for (size_t i = 0; i < r->nnodes; i++)
		if (op->calls[i].answer == RA_BROUGHT)
			confirm_on(r, op, i);
}

/* The pttl of the busy answer that wakes op's queue first (retry_arm). */
static long long
busy_pttl(const struct rd *r, const struct rd_op *op)
{
	long long best = RD_RETRY_CAP_MS;
	uint64_t best_delay = UINT64_MAX;
	for (size_t i = 0; i < r->nnodes; i++) {
		const struct rd_call *c = &op->calls[i];
		uint64_t d;
		if (c->answer != RA_BUSY)
			continue;
		d = retry_delay(c->busy_ms);
		if (d < best_delay) {
			best_delay = d;
			best = c->busy_ms;
		}
	}
	return best;
}

/*
 * Decide op from its nodes' answers, once that can be done: granted (or
 * renewed, released) when a quorum said so, else once a quorum can no
 * longer say so (the nodes not answered within the node timeout count as
 * failed). A lease op may have taken where it was not granted is released.
 * One node (redis): its answer.
 */
static void
op_decide(struct rd *r, struct rd_op *op)
{
	size_t n[RA_FAILED + 1] = { 0 }, q = r->quorum, minority = r->nnodes - r->quorum;
	uint64_t fence = 0, now = clock_ms();
	for (size_t i = 0; i < r->nnodes; i++) {
		const struct rd_call *c = &op->calls[i];
		enum rd_answer a = c->answer;
		if (a == RA_NONE || (a == RA_PENDING && op->late))
			a = RA_FAILED;
		/* a node kept out after a restart holds what it took (a lease op
		 * does not keep is given back), but counts in no quorum */
		if (a == RA_OK && kept_out_ms(r, i, now) > 0)
			a = RA_FAILED;
		n[a]++;
		if (a == RA_OK && c->fence > fence)
			fence = c->fence;
	}
	if (n[RA_OK] >= q) {
		switch (op->script) {
		case RS_TRANSFER:
			/* from's lease went to op->member: its delegation is over */
			deleg_forget(r, op->key, op->keylen);
			/* FALLTHROUGH */
		case RS_ACQUIRE:
			quorum_granted(r, op, fence);
			return;
		case RS_RENEW:
			deleg_renewed(r, op, BE_OK);
			confirm_brought(r, op);
			break;
		default:
			break;
		}
		op_tell(op, BE_OK, 0, NULL);
		return;
	}
	if (n[RA_OK] + n[RA_PENDING] >= q)
		return;	/* not yet */
	if (op->why[0] == '\0')
		snprintf(op->why, sizeof(op->why), "no reply from redis");
	if (r->redlock && n[RA_FAILED] > minority) {
		/* say how many answered, and the first failure */
		char why[sizeof(op->why)];
		snprintf(why, sizeof(why), "%s", op->why);
		snprintf(op->why, sizeof(op->why), "redlock: %zu of %zu nodes answered, %zu "
		    "needed (%.120s)", r->nnodes - n[RA_FAILED], r->nnodes, q, why);
	}
	switch (op->script) {
	case RS_ACQUIRE:
		release_taken(r, op, op->member, false);
		if (n[RA_KIND] > 0) {
			op_tell(op, BE_ERROR, 0, "the key is in use with another kind "
			    "(semaphore or lock) by another daemon");
		} else if (n[RA_FAILED] > minority || n[RA_BUSY] == 0) {
			op_tell(op, BE_ERROR, 0, op->why);
		} else {
			retry_arm(r, op->key, op->keylen, busy_pttl(r, op), 0);
			op_tell(op, BE_BUSY, 0, NULL);
		}
		break;
	case RS_TRANSFER:
		release_taken(r, op, op->member, false);
		if (n[RA_FAILED] > minority) {
			op_tell(op, BE_ERROR, 0, op->why);	/* the lock table releases from */
			break;
		}
		/* from's lease was released or had ended where it counts: its
		 * delegation is over, and what is left of it elsewhere goes */
		deleg_forget(r, op->key, op->keylen);
		if (r->nnodes > 1 && op->from != NULL)
			release_taken(r, op, op->from, true);
		if (n[RA_BUSY] > 0) {
			/* yielded: from was released for the daemon that waits;
			 * this one's queue tries again after it had its chance */
			retry_arm(r, op->key, op->keylen, RD_YIELD_RETRY_MS, RD_YIELD_QUIET_MS);
			op_tell(op, BE_BUSY, 0, NULL);
		} else {
			op_tell(op, BE_NOTOWNER, 0, "the lease had ended in redis");
		}
		break;
	case RS_RENEW:
	case RS_RELEASE:
		if (n[RA_NOTOWNER] + n[RA_BROUGHT] > minority) {
			if (op->script == RS_RENEW)
				deleg_renewed(r, op, BE_NOTOWNER);
			r->nnotowner++;
			op_tell(op, BE_NOTOWNER, 0,
			    "redis holds the lease for another owner, or it ended");
		} else {
			op_tell(op, BE_ERROR, 0, op->why);
		}
		break;
	default:
		op_tell(op, BE_ERROR, 0, op->why);
		break;
	}
}

/* What node i answered to a call of op: its rd_answer (and c's fence or
 * busy time); why, a failure's reason. */
static enum rd_answer
answer_of(const struct rd_op *op, struct rd_call *c, const redisReply *rep, const char **why)
{
	long long v;
	if (rep == NULL) {
		c->maybe = true;	/* it may have run */
		return RA_FAILED;
	}
	if (rep->type == REDIS_REPLY_ERROR) {
		*why = "redis answered an error";
		return RA_FAILED;
	}
	*why = "unexpected reply from redis";
	switch (op->script) {
	case RS_ACQUIRE:
	case RS_TRANSFER:
		v = reply_int(rep, 0, -2);
		if (v == 1 && (c->fence = reply_fence(rep)) == 0) {
			/* taken, but with no fence to grant it with: give it back */
			c->maybe = true;
			return RA_FAILED;
		}
		if (v == 1)
			return RA_OK;
		if (op->script == RS_ACQUIRE && v == 0) {
			c->busy_ms = reply_int(rep, 1, RD_RETRY_CAP_MS);
			return RA_BUSY;
		}
		if (op->script == RS_ACQUIRE && v == -1)
			return RA_KIND;
		if (op->script == RS_TRANSFER && v == 2)
			return RA_BUSY;
		if (op->script == RS_TRANSFER && v == 0)
			return RA_NOTOWNER;
		return RA_FAILED;
	case RS_RELEASE:
	case RS_RENEW:
		if (rep->type != REDIS_REPLY_INTEGER)
			return RA_FAILED;
		if (rep->integer == 1)
			return RA_OK;
		if (rep->integer == 0)
			return RA_NOTOWNER;
		if (rep->integer == 2 && op->script == RS_RENEW)
			return RA_BROUGHT;
		return RA_FAILED;
	default:
		return RA_FAILED;
	}
}

/* A node's reply to its call of an op (rep NULL: none will come, why says
 * why), or to the write-back of the op's fence. */
static void
on_reply(void *arg, const redisReply *rep, const char *why)
{
	struct rd_call *c = arg;
	struct rd_op *op = c->op;
	struct rd *r = op->r;
	size_t i = (size_t)(c - op->calls);
	struct rd_node *nd;
	enum rd_answer a;
	op->pending--;
	if (c->raising) {
		c->raising = false;
		if (rep != NULL && rep->type == REDIS_REPLY_INTEGER)
			op->raise_need -= op->raise_need > 0;
		else
			call_node(r, op, i)->nfailures++;
		if (!op->decided)
			raise_check(r, op);
		op_done(op);
		return;
	}
	if (op->script == RS_RELEASE)
		r->releases_inflight--;
	if (r->cluster && rep != NULL && rep->type == REDIS_REPLY_ERROR &&
	    cluster_redirected(r, op, rep)) {
		op_done(op);
		return;
	}
	nd = call_node(r, op, i);
	if (nd->late_logged && !op->late && rep != NULL) {
		log_info("redlock node %s answers in time again", nd->addr);
		nd->late_logged = false;
	}
	a = answer_of(op, c, rep, &why);
	if (a == RA_FAILED) {
		nd->nfailures++;
		if (op->why[0] == '\0' && r->cluster && rep != NULL && rep->type == REDIS_REPLY_ERROR)
			snprintf(op->why, sizeof(op->why), "%.60s: %.130s", nd->addr, rep->str);
		if (op->why[0] == '\0')
			snprintf(op->why, sizeof(op->why), "%.60s%s%.130s", r->redlock ||
			    r->cluster ? nd->addr : "", r->redlock || r->cluster ? ": " : "",
			    why != NULL ? why : "no reply from redis");
		/* a release: unknown whether it ran, or it did not (LOADING,
		 * BUSY, READONLY...): sent again later (a second is harmless) */
		if (op->script == RS_RELEASE && r->be->priv != NULL && !r->destroying)
			keep_on(r, op, i);
	}
	c->answer = (unsigned char)a;
	if (op->decided && op->told == BE_OK && op->script == RS_RENEW && a == RA_BROUGHT &&
	    !r->destroying)
		confirm_on(r, op, i);	/* renewed by a quorum before it answered */
	if (!op->decided && !op->raising)	/* a quorum granted it already */
		op_decide(r, op);
	op_done(op);
}

/* The node timeout of op has passed: what is not answered counts as
 * failed (and its node's timeouts). */
static void
on_late(evutil_socket_t fd, short what, void *arg)
{
	struct rd_op *op = arg;
	struct rd *r = op->r;
	(void)fd;
	(void)what;
	op->late = true;
	for (size_t i = 0; i < r->nnodes; i++) {
		struct rd_node *nd = &r->nodes[i];
		if (op->calls[i].answer != RA_PENDING && !op->calls[i].raising)
			continue;
		nd->ntimeouts++;
		if (!nd->late_logged)
			log_warn("redlock node %s: no answer within %llu ms (backend.node_timeout_ms): "
			    "counted as failed until it answers in time", nd->addr,
			    (unsigned long long)node_timeout(r, op->ttl_ms));
		nd->late_logged = true;
	}
	if (op->decided)
		return;
	if (op->raising)
		raise_check(r, op);
	else
		op_decide(r, op);
	op_done(op);
}

/* Send op to every node, or fail it from the loop when fewer than a quorum
 * are connected (a release is kept for later, node by node). */
static void
send_op(struct rd *r, struct rd_op *op)
{
	op->sent_ms = clock_ms();
	if (r->cluster) {
		cluster_send(r, op, NULL, false);
		return;
	}
	if ((op->script == RS_RELEASE ? nodes_up(r) : nodes_counting(r)) < r->quorum) {
		if (op->script == RS_RELEASE && !r->destroying) {
			for (size_t i = 0; i < r->nnodes; i++)
				keep_on(r, op, i);
		}
		op_fail_later(op, BE_ERROR);
		return;
	}
	for (size_t i = 0; i < r->nnodes; i++) {
		struct rd_call *c = &op->calls[i];
		/* a lease taken, renewed or handed over must reach the replicas
		 * asked for before it counts; a release need not */
		if ((op->script == RS_RELEASE ? rnode_eval : rnode_eval_acked)(r->nodes[i].node,
		    op->script, op->args.argc, op->args.argv, op->args.argvlen, on_reply, c) < 0) {
			c->answer = RA_NONE;
			if (op->script == RS_RELEASE && !r->destroying)
				keep_on(r, op, i);
			continue;
		}
		c->answer = RA_PENDING;
		op->pending++;
		r->nodes[i].ncalls++;
		r->ncommands++;
		if (op->script == RS_RELEASE)
			r->releases_inflight++;
	}
	/* a node takes a call exactly when it is up, and nothing ran between
	 * the count above and the loop: a quorum's calls are out, so their
	 * answers (or the node timeout) decide op */
	assert(op->pending >= r->quorum);
	if (r->nnodes > 1) {
		if (op->ev_late == NULL)
			op->ev_late = evtimer_new(r->be->base, on_late, op);
		late_arm(r, op);
	}
}

/* ---- building calls ------------------------------------------------------ */

/* The channel a release of l's key is published on: prefix + "released",
 * or (cluster) the shard channel of its slot. */
static const char *
released_channel(const struct rd *r, const struct be_lock *l)
{
	return r->cluster ? r->chan[2 * rcluster_lock_slot(l->key, l->keylen)] : r->channel;
}

/*
 * A new call of script with nkeys keys named after l's key (each key kind a
 * letter: 'l' lock, 'f' fence, 'w' mark), then ARGV: member (the lease the
 * call takes or releases, kept as op->member), then the string arguments
 * args (NULL-terminated; rscript_key for the key itself). The caller owns the
 * call until it is sent or kept; op_free frees it.
 */
static struct rd_op *
op_new(struct rd *r, enum rscript script, const struct be_lock *l, const char *member,
    const char *keykinds, const char *const *args, be_cb *cb, void *arg)
{
	const char *all[RSCRIPT_ARGS + 1];
	size_t nargs = 0, need;
	all[nargs++] = member;
	for (size_t i = 0; args[i] != NULL && nargs < RSCRIPT_ARGS; i++)
		all[nargs++] = args[i];
	all[nargs] = NULL;
	need = rscript_size(strlen(r->set->key_prefix), l->keylen, r->cluster, keykinds, all);
	struct rd_op *op = xmalloc(sizeof(*op) + r->nnodes * sizeof(struct rd_call) +
	    l->keylen + need);
	memset(op, 0, sizeof(*op) + r->nnodes * sizeof(struct rd_call));
	op->calls = (struct rd_call *)(void *)(op + 1);
	for (size_t i = 0; i < r->nnodes; i++)
		op->calls[i].op = op;
	op->buf = (char *)(op->calls + r->nnodes);
	op->r = r;
	op->script = script;
	op->cb = cb;
	op->arg = arg;
	op->key = op->buf;
	memcpy(op->key, l->key, l->keylen);
	op->keylen = l->keylen;
	op->ttl_ms = l->ttl_ms;
	op->member = rscript_build(&op->args, op->buf + l->keylen, r->set->key_prefix, op->key,
	    op->keylen, r->cluster, keykinds, all);
	if (r->cluster)
		op->slot = rcluster_lock_slot(op->key, op->keylen);
	return op;
}

/* A new call of the release script for member, a lease of l's key. */
static struct rd_op *
release_new(struct rd *r, const struct be_lock *l, const char *member, be_cb *cb, void *arg)
{
	/* the message is the key itself */
	const char *args[] = { released_channel(r, l), rscript_key, NULL };
	return op_new(r, RS_RELEASE, l, member, "lw", args, cb, arg);
}

/* The member of l's lease in Redis: its own, or the delegated lease's when
 * l holds the key's delegation. */
static void
lease_member(const struct rd *r, const struct be_lock *l, char out[RSCRIPT_MEMBER_MAX])
{
	const struct rd_deleg *d = deleg_of(r, l);
	if (d != NULL)
		memcpy(out, d->member, RSCRIPT_MEMBER_MAX);
	else
		rscript_member(l, out);
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
	if (r->cluster || nodes_up(r) >= r->quorum)
		send_op(r, op);	/* cluster: kept on the slot's master if it is down */
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
	char kind[16], member[RSCRIPT_MEMBER_MAX], ttl[24], limit[16], mark[16], fences[16];
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
	rscript_kind(l, kind, sizeof(kind));
	rscript_member(l, member);
	snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)l->ttl_ms);
	snprintf(limit, sizeof(limit), "%u", l->limit);
	snprintf(mark, sizeof(mark), "%d", RD_MARK_MS);
	snprintf(fences, sizeof(fences), "%u", n);
	const char *args[] = { ttl, kind, limit, mark, fences, r->cluster ?
	    r->chan[2 * rcluster_lock_slot(l->key, l->keylen) + 1] : r->wanted, rscript_key, NULL };
	struct rd_op *op = op_new(r, RS_ACQUIRE, l, member, "lfw", args, cb, arg);
	op->fences = n;
	if (now < r->settle_until) {
		/* the connection is back (a restart, a failover): the daemons'
		 * renewals go first, so that a holder whose lease Redis lost is
		 * told before another daemon can take its key; sent then */
		if (TAILQ_EMPTY(&r->settling)) {
			struct timeval tv = clock_tv(r->settle_until - now);
			evtimer_add(r->ev_settle, &tv);
		}
		TAILQ_INSERT_TAIL(&r->settling, op, settle);
		return;
	}
	send_op(r, op);
}

/* Drop l's lease and publish the key if a daemon waits for it; kept for
 * later while disconnected. */
static void
rd_release(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct rd *r = be->priv;
	char member[RSCRIPT_MEMBER_MAX];
	struct rd_deleg *d = deleg_of(r, l);
	if (d != NULL && cache_keep(r, d)) {
		local_answer(r, cb, arg, NULL, 0, 0);
		return;
	}
	lease_member(r, l, member);
	if (d != NULL)
		deleg_drop(r, d);
	/* while disconnected: failed at once, and released once redis is back */
	send_op(r, release_new(r, l, member, cb, arg));
}

/* Make l's lease last at least l->ttl_ms from now, if it is still ours. */
static void
rd_renew(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg)
{
	struct rd *r = be->priv;
	char member[RSCRIPT_MEMBER_MAX], ttl[24], limit[16];
	lease_member(r, l, member);
	snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)l->ttl_ms);
	snprintf(limit, sizeof(limit), "%u", l->mode == LOCK_SEMAPHORE ? l->limit : 0);
	/* redlock: a node that lost or missed the lease takes it again if it
	 * can (not counted in the quorum) */
	const char *args[] = { ttl, r->nnodes > 1 ? "1" : "0", limit, NULL };
	r->nrenewals++;
	send_op(r, op_new(r, RS_RENEW, l, member, "l", args, cb, arg));
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
	char fm[RSCRIPT_MEMBER_MAX], tm[RSCRIPT_MEMBER_MAX], ttl[24], run[16], limit[24], fences[16];
	struct rd_deleg *d = deleg_of(r, from);
	uint64_t now = clock_ms();
	unsigned n = fences_for(r, to);
	if (d != NULL && deleg_can_hand(d, to, now)) {
		r->nlocal++;
		deleg_hand(r, d, to, now, cb, arg);
		return;
	}
	lease_member(r, from, fm);
	rscript_member(to, tm);
	snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)to->ttl_ms);
	snprintf(run, sizeof(run), "%u", from->handoffs);
	snprintf(limit, sizeof(limit), "%lld", r->set->handoff_limit);
	snprintf(fences, sizeof(fences), "%u", n);
	const char *args[] = { fm, ttl, run, limit, released_channel(r, to), rscript_key, fences,
	    NULL };
	struct rd_op *op = op_new(r, RS_TRANSFER, to, tm, "lfw", args, cb, arg);
	op->fences = n;
	op->from = op->args.argv[5];	/* numkeys, 3 keys, to, from */
	send_op(r, op);
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

/* The connection to Redis went down: local grants wait for Redis
 * (deleg_distrust). */
static void sentinels_ask(struct rd *r);

static void
on_down(void *arg, const char *why)
{
	struct rd_node *nd = arg;
	struct rd *r = nd->r;
	(void)why;
	deleg_distrust(r);
	if (r->nsentinels > 0)
		sentinels_ask(r);	/* the master may have moved */
	if (r->cluster && nd->nslots > 0) {
		cluster_refresh(r);	/* a replica may take its slots */
		cluster_arm(r);
	}
}

/* settle_until has come: send the acquires held back. */
static void
on_settle(evutil_socket_t fd, short what, void *arg)
{
	struct rd *r = arg;
	struct rd_op *op;
	(void)fd;
	(void)what;
	while ((op = TAILQ_FIRST(&r->settling)) != NULL) {
		TAILQ_REMOVE(&r->settling, op, settle);
		send_op(r, op);
	}
}

/* The connection to Redis is up (again): Redis may have restarted without
 * its data, or be a new master after a failover, so every holding is
 * renewed at once, and a lease that did not survive is reported lost now,
 * not at its next renewal. A redlock node kept out after a restart is
 * logged. */
static void
on_up(void *arg)
{
	struct rd_node *nd = arg;
	struct rd *r = nd->r;
	uint64_t out = r->redlock ? kept_out_ms(r, (size_t)(nd - r->nodes), clock_ms()) : 0;
	if (out == UINT64_MAX)
		log_warn("redlock node %s: kept out of every quorum: when it started cannot be "
		    "read (backend.restart_keepout_ms needs INFO server)", nd->addr);
	else if (out > 0)
		log_warn("redlock node %s: started less than backend.restart_keepout_ms ago: "
		    "counted in no quorum for %llu ms more", nd->addr, (unsigned long long)out);
	if (nd->was_up)
		r->settle_until = clock_ms() + RD_SETTLE_MS;
	nd->was_up = true;
	r->be->up.expire(r->be->up.arg, NULL, 0);
	if (r->cluster)
		cluster_refresh(r);
}

/* ---- Sentinel ------------------------------------------------------------ */

/* The sentinels say the master is host:port: use it (at once when it
 * moved). */
static void
master_set(struct rd *r, const char *host, const char *port, const char *from)
{
	char addr[sizeof(r->master)];
	long long p;
	if (num_parse(port, strlen(port), 1, 65535, &p) != NUM_OK)
		return;
	snprintf(addr, sizeof(addr), strchr(host, ':') != NULL ? "[%s]:%s" : "%s:%s", host,
	    port);
	if (strcmp(addr, r->master) == 0)
		return;
	log_info("redis master '%s' is %s (%s)%s%s", r->set->master_name, addr, from,
	    r->master[0] != '\0' ? ", was " : "", r->master);
	snprintf(r->master, sizeof(r->master), "%s", addr);
	rnode_set_address(r->node, host, (int)p);
}

/* A sentinel's answer to SENTINEL get-master-addr-by-name. */
static void
on_master_addr(void *arg, const redisReply *rep, const char *why)
{
	struct rd_sentinel *s = arg;
	struct rd *r = s->r;
	(void)why;
	r->asking = false;
	if (rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
	    rep->element[0]->type == REDIS_REPLY_STRING &&
	    rep->element[1]->type == REDIS_REPLY_STRING) {
		char from[320];
		r->asked = 0;
		s->unknown_logged = false;
		snprintf(from, sizeof(from), "sentinel %s", s->addr);
		master_set(r, rep->element[0]->str, rep->element[1]->str, from);
		return;
	}
	if (rep != NULL && !s->unknown_logged) {
		s->unknown_logged = true;
		log_warn("redis sentinel %s does not know a master '%s' (%s)", s->addr,
		    r->set->master_name, rep->type == REDIS_REPLY_ERROR ? rep->str :
		    rep->type == REDIS_REPLY_NIL ? "no such master" : "unexpected reply");
	}
	/* the next sentinel, once each per round (ev_ask starts the next) */
	if (++r->asked < r->nsentinels)
		sentinels_ask(r);
}

/* Ask the next sentinel that is up where the master is (one question at
 * a time); none up: a sentinel that comes up asks. */
static void
sentinels_ask(struct rd *r)
{
	const char *argv[] = { "SENTINEL", "get-master-addr-by-name", r->set->master_name };
	size_t argvlen[] = { 8, 23, strlen(r->set->master_name) };
	if (r->asking || r->destroying)
		return;
	for (size_t k = 0; k < r->nsentinels; k++) {
		struct rd_sentinel *s = &r->sentinels[(r->ask_next + k) % r->nsentinels];
		if (!rnode_up(s->node))
			continue;
		r->ask_next = (size_t)(s - r->sentinels) + 1;
		if (rnode_command(s->node, 3, argv, argvlen, on_master_addr, s) == 0) {
			r->asking = true;
			return;
		}
	}
}

/* Every second while the master is not up: ask the sentinels again. */
static void
on_ask(evutil_socket_t fd, short what, void *arg)
{
	struct rd *r = arg;
	(void)fd;
	(void)what;
	if (!rnode_up(r->node)) {
		r->asked = 0;
		sentinels_ask(r);
	}
}

/* A sentinel is up: ask it unless the master is up. */
static void
on_sentinel_up(void *arg)
{
	struct rd_sentinel *s = arg;
	if (!rnode_up(s->r->node))
		sentinels_ask(s->r);
}

/* +switch-master "name old-ip old-port new-ip new-port": a failover
 * ended; move to the new master at once. */
static void
on_sentinel_message(void *arg, const char *channel, size_t channellen, const char *msg,
    size_t msglen)
{
	struct rd_sentinel *s = arg;
	struct rd *r = s->r;
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
	if (n != 5 || strcmp(w[0], r->set->master_name) != 0)
		return;
	snprintf(from, sizeof(from), "+switch-master from sentinel %s", s->addr);
	master_set(r, w[3], w[4], from);
}

static const struct rnode_hooks rd_sentinel_hooks = {
	.up = on_sentinel_up,
	.message = on_sentinel_message,
};

/* One node per sentinel, started. */
static void
sentinels_start(struct rd *r)
{
	static const char *const channels[] = { "+switch-master" };
	const struct rd_settings *c = r->set;
	r->nsentinels = c->nsentinels;
	r->sentinels = xcalloc(c->nsentinels, sizeof(*r->sentinels));
	for (size_t i = 0; i < c->nsentinels; i++) {
		struct rd_sentinel *s = &r->sentinels[i];
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
		s->r = r;
		s->addr = c->sentinels[i];
		s->node = rnode_create(r->be->base, r->dns, &nc, &rd_sentinel_hooks, s);
		rnode_start(s->node);
	}
	struct timeval tv = clock_tv(1000);
	r->ev_ask = event_new(r->be->base, -1, EV_PERSIST, on_ask, r);
	evtimer_add(r->ev_ask, &tv);
}

/* ---- Redis Cluster --------------------------------------------------------- */

/*
 * The redis-cluster backend runs the policy of one server per key: each
 * operation is one call, to the master of its key's slot (every key of a
 * lock carries one hash tag, rcluster.h), as the slot map says. The map is
 * read with CLUSTER SLOTS from a node that is up: at start, every
 * backend.refresh_ms, after a MOVED, when a master's connection goes, and
 * every RD_REFRESH_FAST_MS while a slot has no master reachable. A MOVED
 * reply moves the slot in the map at once and sends the call again there;
 * an ASK sends it again once, behind ASKING, to the node it names; TRYAGAIN
 * and CLUSTERDOWN send it again after a growing wait, while the command
 * timeout allows. Release messages are SPUBLISHed on a shard channel per
 * slot (rcluster_slot_tag), and each master's subscriber connection
 * listens to the channels of its slots. A slot that changes master
 * (failover, resharding) is a new server for its keys: as after a
 * reconnect, every holding is renewed at once; after a failover (a master
 * that owned no slot owns some) new leases wait RD_PROMOTED_SETTLE_MS, so
 * that every daemon, reading the map on its own schedule, has renewed
 * first.
 */

static const struct rnode_hooks rd_hooks;

/* The node at host:port, made (and started) if it is new. */
static struct rd_node *
cluster_node(struct rd *r, const char *host, int port)
{
	const struct rd_settings *c = r->set;
	struct rd_node *nd;
	for (size_t i = 0; i < r->ncl; i++)
		if (r->cl[i]->port == port && strcmp(r->cl[i]->host, host) == 0)
			return r->cl[i];
	struct rnode_conf nc = {
		.what = "redis-cluster node",
		.host = host,
		.port = port,
		.username = c->username,
		.password = c->password,
		.tls = r->tls,
		.tls_name = c->tls_server_name,
		.connect_timeout_ms = (uint64_t)c->connect_timeout_ms,
		.command_timeout_ms = (uint64_t)c->command_timeout_ms,
		.scripts = rscript_text_cluster(),
		.nscripts = RS_COUNT,
		.sharded = true,
		.channel_group = 2,
		.check_policy = true,
		.min_replicas_ack = c->min_replicas_ack,
		.replica_ack_timeout_ms = c->replica_ack_timeout_ms,
		.acl = r->acl,
	};
	nd = xcalloc(1, sizeof(*nd));
	nd->r = r;
	snprintf(nd->host, sizeof(nd->host), "%s", host);
	nd->port = port;
	snprintf(nd->addr, sizeof(nd->addr), strchr(host, ':') != NULL ? "[%s]:%d" : "%s:%d",
	    host, port);
	nd->node = rnode_create(r->be->base, r->dns, &nc, &rd_hooks, nd);
	r->cl = xreallocarray(r->cl, r->ncl + 1, sizeof(*r->cl));
	r->cl[r->ncl++] = nd;
	rnode_start(nd->node);
	return nd;
}

/* The slots whose master is known and connected. */
static size_t
cluster_slots_up(const struct rd *r)
{
	size_t up = 0;
	for (size_t i = 0; i < r->ncl; i++)
		if (rnode_up(r->cl[i]->node))
			up += r->cl[i]->nslots;
	return r->map_loaded ? up : 0;
}

/* The answer to ASKING: a refusal (a user without +asking) is logged once
 * per node, with the ACL the user needs. */
static void
on_asking(void *arg, const redisReply *rep, const char *why)
{
	struct rd_node *nd = arg;
	(void)why;
	if (rep == NULL || rep->type != REDIS_REPLY_ERROR || nd->asking_logged)
		return;
	nd->asking_logged = true;
	log_warn("redis-cluster node %s answered ASKING with an error: %s; the redis-cluster "
	    "user needs at least the ACL '%s'", nd->addr, rep->str, nd->r->acl);
}

/* Send op (again) to nd, behind ASKING when asking; nd NULL: to its slot's
 * master. With no master known or up, op fails from the loop (a release is
 * kept on that master for when it is back). */
static void
cluster_send(struct rd *r, struct rd_op *op, struct rd_node *nd, bool asking)
{
	static const char *const ask[] = { "ASKING" };
	static const size_t asklen[] = { 6 };
	struct rd_call *c = &op->calls[0];
	if (nd == NULL)
		nd = r->slots[op->slot];
	op->node = nd;
	if (nd == NULL || !rnode_up(nd->node) || (asking && rnode_command(nd->node, 1, ask,
	    asklen, on_asking, nd) < 0) || (op->script == RS_RELEASE ? rnode_eval :
	    rnode_eval_acked)(nd->node, op->script, op->args.argc, op->args.argv,
	    op->args.argvlen, on_reply, c) < 0) {
		if (op->script == RS_RELEASE && !r->destroying)
			keep_on(r, op, 0);
		if (nd == NULL)
			snprintf(op->why, sizeof(op->why), "redis-cluster: no master known for "
			    "slot %u", op->slot);
		op_fail_later(op, BE_ERROR);
		return;
	}
	c->answer = RA_PENDING;
	op->pending++;
	nd->ncalls++;
	r->ncommands++;
	if (op->script == RS_RELEASE)
		r->releases_inflight++;
}

/* The wait before op is sent again has passed: to its slot's master. */
static void
on_again(evutil_socket_t fd, short what, void *arg)
{
	struct rd_op *op = arg;
	struct rd *r = op->r;
	(void)fd;
	(void)what;
	TAILQ_REMOVE(&r->again, op, settle);
	cluster_send(r, op, NULL, false);
}

/* Send op again in a while (RD_AGAIN_MIN_MS, doubling up to
 * RD_AGAIN_MAX_MS), unless that would end after the command timeout:
 * whether it will be. */
static bool
cluster_again(struct rd *r, struct rd_op *op)
{
	unsigned shift = op->redirects < 6 ? op->redirects : 6;
	uint64_t wait = (uint64_t)RD_AGAIN_MIN_MS << shift, now = clock_ms();
	if (wait > RD_AGAIN_MAX_MS)
		wait = RD_AGAIN_MAX_MS;
	if (now + wait > op->sent_ms + (uint64_t)r->set->command_timeout_ms)
		return false;
	if (op->ev_again == NULL)
		op->ev_again = evtimer_new(r->be->base, on_again, op);
	struct timeval tv = clock_tv(wait);
	evtimer_add(op->ev_again, &tv);
	TAILQ_INSERT_TAIL(&r->again, op, settle);
	return true;
}

/* An error reply to op's call: a redirection is followed (MOVED: the map
 * says so from now on; ASK: this call only; TRYAGAIN, CLUSTERDOWN: again
 * later), and true returned; else false (an error of the call, or too many
 * redirections, or no time left). */
static bool
cluster_redirected(struct rd *r, struct rd_op *op, const redisReply *rep)
{
	char host[256];
	unsigned slot;
	int port;
	struct rd_node *to;
	enum rc_redirect k = rcluster_redirect(rep->str, op->node != NULL ? op->node->host :
	    "", &slot, host, sizeof(host), &port);
	if (k == RC_NONE || op->redirects >= RD_REDIRECTS_MAX || r->destroying)
		return false;
	op->redirects++;
	switch (k) {
	case RC_MOVED:
		r->nmoved++;
		to = cluster_node(r, host, port);
		r->slots[slot] = to;	/* until the map read now says more */
		cluster_refresh(r);
		if (rnode_up(to->node)) {
			cluster_send(r, op, to, false);
			return true;
		}
		return cluster_again(r, op);
	case RC_ASK:
		r->nask++;
		to = cluster_node(r, host, port);
		if (rnode_up(to->node)) {
			cluster_send(r, op, to, true);
			return true;
		}
		return cluster_again(r, op);	/* asks its slot's master again */
	default:
		r->ntryagain++;
		return cluster_again(r, op);
	}
}

/* The map changed: node nd's shard channels are those of its slots in
 * r->next; its subscriber connection listens to them from now on. */
static void
cluster_listen(struct rd *r, struct rd_node *nd, size_t nslots)
{
	const char **chans = nslots > 0 ? xcalloc(2 * nslots, sizeof(*chans)) : NULL;
	size_t n = 0;
	for (size_t s = 0; s < RC_SLOTS && n < 2 * nslots; s++)
		if (r->next[s] == nd) {
			chans[n++] = r->chan[2 * s];
			chans[n++] = r->chan[2 * s + 1];
		}
	rnode_set_channels(nd->node, chans, n);
	free(nd->chans);
	nd->chans = chans;
}

/* Arm the map's next reading: soon while a slot has no master reachable. */
static void
cluster_arm(struct rd *r)
{
	uint64_t ms = cluster_slots_up(r) < RC_SLOTS ? RD_REFRESH_FAST_MS :
	    (uint64_t)r->set->refresh_ms;
	struct timeval tv = clock_tv(ms);
	evtimer_add(r->ev_refresh, &tv);
}

/* Take the map of ranges (read from a node at host): the slots' masters,
 * and each master's channels. A slot that has a new master: every holding
 * is renewed at once, and after a failover new leases wait
 * RD_PROMOTED_SETTLE_MS. */
static void
cluster_apply(struct rd *r, const struct rc_range *ranges, size_t n)
{
	bool moved = false, promoted = false;
	size_t masters = 0;
	memset(r->next, 0, RC_SLOTS * sizeof(*r->next));
	for (size_t i = 0; i < n; i++) {
		struct rd_node *nd = cluster_node(r, ranges[i].host, ranges[i].port);
		for (unsigned s = ranges[i].first; s <= ranges[i].last; s++)
			r->next[s] = nd;
	}
	for (size_t i = 0; i < r->ncl; i++) {
		struct rd_node *nd = r->cl[i];
		size_t count = 0;
		bool changed = false;
		for (size_t s = 0; s < RC_SLOTS; s++) {
			count += r->next[s] == nd;
			changed |= (r->next[s] == nd) != (r->listened[s] == nd);
		}
		if (changed || count != nd->nslots)
			cluster_listen(r, nd, count);
		masters += count > 0;
		promoted |= count > 0 && nd->nslots == 0;	/* a replica promoted, or new */
		nd->nslots = count;
	}
	for (size_t s = 0; s < RC_SLOTS && !moved; s++)
		moved = r->listened[s] != r->next[s];
	memcpy(r->slots, r->next, RC_SLOTS * sizeof(*r->slots));
	memcpy(r->listened, r->next, RC_SLOTS * sizeof(*r->listened));
	if (moved) {
		char list[1024];
		size_t len = 0, covered = 0;
		for (size_t i = 0; i < r->ncl; i++) {
			covered += r->cl[i]->nslots;
			if (r->cl[i]->nslots > 0 && len < sizeof(list))
				len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s (%zu)",
				    len > 0 ? ", " : "", r->cl[i]->addr, r->cl[i]->nslots);
		}
		log_info("redis-cluster: %zu master%s: %s; %zu of %d slots covered", masters,
		    masters == 1 ? "" : "s", list, covered, RC_SLOTS);
		if (r->map_loaded) {
			/* keys that moved are in a new server now: resharding moved
			 * their leases (MIGRATE), a failover may have lost some; the
			 * holders hear of it before another daemon takes a key */
			if (promoted)
				r->settle_until = clock_ms() + RD_PROMOTED_SETTLE_MS;
			deleg_distrust(r);
			r->be->up.expire(r->be->up.arg, NULL, 0);
			r->be->up.wakeup(r->be->up.arg, NULL, 0);
		}
	}
	r->map_loaded = true;
}

/* A node's answer to CLUSTER SLOTS. */
static void
on_slots(void *arg, const redisReply *rep, const char *why)
{
	struct rd_node *nd = arg;
	struct rd *r = nd->r;
	struct rc_range *ranges;
	size_t n;
	r->refreshing = false;
	if (r->destroying)
		return;
	if (rep != NULL && rcluster_parse_slots(rep, nd->host, &ranges, &n, &why) == 0) {
		r->nrefreshes++;
		r->map_error[0] = '\0';
		cluster_apply(r, ranges, n);
		free(ranges);
	} else {
		char msg[sizeof(r->map_error)];
		bool perm = rep != NULL && rep->type == REDIS_REPLY_ERROR &&
		    (strncmp(rep->str, "NOPERM", 6) == 0 || strstr(rep->str, "permission") != NULL);
		snprintf(msg, sizeof(msg), "%s", rep != NULL && rep->type == REDIS_REPLY_ERROR ?
		    rep->str : why != NULL ? why : "no reply");
		if (strcmp(msg, r->map_error) != 0) {
			/* once per reason, not at every attempt */
			snprintf(r->map_error, sizeof(r->map_error), "%s", msg);
			if (perm)
				log_warn("redis-cluster node %s: no slot map: %s; the redis-cluster "
				    "user needs at least the ACL '%s'", nd->addr, msg, r->acl);
			else
				log_warn("redis-cluster node %s: no slot map: %s", nd->addr, msg);
		}
		/* the timer asks the next node */
	}
	if (r->refresh_again) {
		r->refresh_again = false;
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
	if (r->destroying)
		return;
	if (r->refreshing) {
		r->refresh_again = true;
		return;
	}
	for (int pass = 0; pass < 2; pass++)
		for (size_t k = 0; k < r->ncl; k++) {
			size_t i = (r->refresh_next + k) % r->ncl;
			struct rd_node *nd = r->cl[i];
			if ((pass == 0 && nd->nslots == 0) || !rnode_up(nd->node) ||
			    rnode_command(nd->node, 2, argv, argvlen, on_slots, nd) < 0)
				continue;
			r->refresh_next = i + 1;
			r->refreshing = true;
			return;
		}
}

/* Every refresh_ms (or RD_REFRESH_FAST_MS): read the map again. */
static void
on_refresh(evutil_socket_t fd, short what, void *arg)
{
	struct rd *r = arg;
	(void)fd;
	(void)what;
	cluster_refresh(r);
	cluster_arm(r);
}

/* Why the cluster fails now: no map yet, or slots with no master
 * reachable (the first such master and why); else NULL. */
static const char *
cluster_problem(const struct rd *r, char *buf, size_t len)
{
	size_t up = cluster_slots_up(r), n;
	uint64_t since, now = clock_ms();
	if (r->map_loaded && up == RC_SLOTS) {
		/* every master is up: why an operation failed lately */
		if (r->failure_at == 0 || now - r->failure_at > RD_FAILURE_SHOWN_MS)
			return NULL;
		snprintf(buf, len, "redis-cluster: %s", r->failure);
		return buf;
	}
	if (!r->map_loaded)
		n = (size_t)snprintf(buf, len, "redis-cluster: no slot map yet");
	else
		n = (size_t)snprintf(buf, len, "redis-cluster: %zu of %d slots have no master "
		    "reachable", RC_SLOTS - up, RC_SLOTS);
	for (size_t i = 0; i < r->ncl && n < len; i++) {
		const struct rd_node *nd = r->cl[i];
		const char *p;
		if (rnode_up(nd->node) || (r->map_loaded && nd->nslots == 0))
			continue;
		p = rnode_problem(nd->node, &since);
		n += (size_t)snprintf(buf + n, len - n, "; %s: %s", nd->addr,
		    p != NULL ? p : "not connected yet");
		break;
	}
	return buf;
}

/* The cluster's INFO lines: the map, the redirections, each master. */
static void
cluster_info(struct rd *r, struct evbuffer *out)
{
	size_t m = 0, masters = 0;
	for (size_t i = 0; i < r->ncl; i++)
		masters += r->cl[i]->nslots > 0;
	evbuffer_add_printf(out, "backend_cluster_masters:%zu\r\nbackend_cluster_slots_up:%zu\r\n"
	    "backend_cluster_refreshes_total:%llu\r\nbackend_cluster_moved_total:%llu\r\n"
	    "backend_cluster_ask_total:%llu\r\nbackend_cluster_tryagain_total:%llu\r\n",
	    masters, cluster_slots_up(r), (unsigned long long)r->nrefreshes,
	    (unsigned long long)r->nmoved, (unsigned long long)r->nask,
	    (unsigned long long)r->ntryagain);
	/* masters in the order of their first slot */
	for (size_t s = 0; s < RC_SLOTS; s++) {
		struct rd_node *nd = r->slots[s];
		if (nd == NULL || (s > 0 && r->slots[s - 1] == nd) || nd->listed)
			continue;
		nd->listed = true;
		evbuffer_add_printf(out, "backend_master%zu_address:%s\r\n"
		    "backend_master%zu_slots:%zu\r\nbackend_master%zu_connected:%d\r\n"
		    "backend_master%zu_calls_total:%llu\r\n", m, nd->addr, m, nd->nslots, m,
		    rnode_up(nd->node), m, (unsigned long long)nd->ncalls);
		m++;
	}
	for (size_t i = 0; i < r->ncl; i++)
		r->cl[i]->listed = false;
}

/* The cluster's nodes from the seeds, the channels of every slot, the
 * map's timer (be->priv is r). */
static void
cluster_init(struct rd *r)
{
	const struct rd_settings *c = r->set;
	size_t plen = strlen(c->key_prefix), each = plen + 16 + RC_TAG_MAX;
	char *buf;
	r->cluster = true;
	r->slots = xcalloc(RC_SLOTS, sizeof(*r->slots));
	r->next = xcalloc(RC_SLOTS, sizeof(*r->next));
	r->listened = xcalloc(RC_SLOTS, sizeof(*r->listened));
	r->chan = xcalloc(2 * RC_SLOTS, sizeof(*r->chan));
	buf = xmalloc(2 * RC_SLOTS * each);
	for (size_t s = 0; s < RC_SLOTS; s++) {
		const char *tag = rcluster_slot_tag((unsigned)s);
		r->chan[2 * s] = buf + 2 * s * each;
		r->chan[2 * s + 1] = buf + (2 * s + 1) * each;
		snprintf(r->chan[2 * s], each, "%sreleased{%s}", c->key_prefix, tag);
		snprintf(r->chan[2 * s + 1], each, "%swanted{%s}", c->key_prefix, tag);
	}
	TAILQ_INIT(&r->again);
	r->ev_refresh = evtimer_new(r->be->base, on_refresh, r);
}

/* Free what cluster_init and the map made (the nodes are destroyed). */
static void
cluster_free(struct rd *r)
{
	struct rd_op *op;
	while ((op = TAILQ_FIRST(&r->again)) != NULL) {
		TAILQ_REMOVE(&r->again, op, settle);
		op_complete(op, BE_ERROR, 0, "the backend is shutting down");
	}
	for (size_t i = 0; i < r->ncl; i++) {
		free(r->cl[i]->chans);
		free(r->cl[i]);
	}
	free(r->cl);
	free(r->slots);
	free(r->next);
	free(r->listened);
	if (r->chan != NULL)
		free(r->chan[0]);
	free(r->chan);
	if (r->ev_refresh != NULL)
		event_free(r->ev_refresh);
}

/* The subscriptions are up (again): every queue may have missed a
 * message. */
static void
on_subscribed(void *arg)
{
	struct rd *r = ((struct rd_node *)arg)->r;
	r->be->up.wakeup(r->be->up.arg, NULL, 0);
}

/* A message: a key was released (its queue is woken unless this daemon
 * has just given way on it), or another daemon wants a key (a cached lease
 * of it goes). */
static void
on_message(void *arg, const char *channel, size_t channellen, const char *key, size_t keylen)
{
	struct rd *r = ((struct rd_node *)arg)->r;
	/* cluster: prefix + "wanted{" + the slot's tag + "}" */
	if ((channellen == r->wantedlen || (r->cluster && channellen > r->wantedlen &&
	    channel[r->wantedlen] == '{')) && memcmp(channel, r->wanted, r->wantedlen) == 0) {
		cache_wanted(r, key, keylen);
		return;
	}
	r->nmessages++;
	if (!yield_quiet(r, key, keylen))
		r->be->up.wakeup(r->be->up.arg, key, keylen);
}

/* ---- the backend ------------------------------------------------------------ */

/* The node's hooks: what the server's connections tell the policy. */
static const struct rnode_hooks rd_hooks = {
	.up = on_up,
	.down = on_down,
	.subscribed = on_subscribed,
	.message = on_message,
};

/* A TLS context of these files (NULL: the system's CAs, no client
 * certificate); NULL after logging why, for what. */
static struct tls_client *
tls_of(const char *ca, const char *cert, const char *key, const char *what)
{
	char why[512];
	struct tls_client *tls = tls_client_create(ca, cert, key, why, sizeof(why));
	if (tls == NULL)
		log_error("%s: TLS: %s", what, why);
	return tls;
}

/* The TLS context of the backend's files; NULL after logging why. */
static struct tls_client *
rd_tls(const struct rd_settings *c)
{
	return tls_of(c->tls_ca_file, c->tls_cert_file, c->tls_key_file, c->nnodes > 0 ?
	    "redlock backend" : "redis backend");
}

/* Whether redlock node n (its settings) connects with TLS. */
static bool
node_tls_on(const struct rd_settings *c, const struct conf_node *n)
{
	return n != NULL && n->tls != CONF_UNSET ? n->tls != 0 : c->tls != 0;
}

/* Whether node n has TLS files of its own: a context of its own. */
static bool
node_tls_own(const struct conf_node *n)
{
	return n != NULL && (n->tls_ca_file != NULL || n->tls_cert_file != NULL ||
	    n->tls_key_file != NULL);
}

/* The TLS context of node n's files (its own, else the backend's); NULL
 * after logging why. */
static struct tls_client *
node_tls(const struct rd_settings *c, const struct conf_node *n)
{
	char what[320];
	snprintf(what, sizeof(what), "redlock node %s", n->server);
	return tls_of(n->tls_ca_file != NULL ? n->tls_ca_file : c->tls_ca_file,
	    n->tls_cert_file != NULL ? n->tls_cert_file : c->tls_cert_file,
	    n->tls_key_file != NULL ? n->tls_key_file : c->tls_key_file, what);
}

/* Set up be->priv with the node made but not started (be->settings
 * given): everything but connecting. */
static struct rd *
rd_init(struct backend *be, struct tls_client *tls)
{
	const struct rd_settings *c = be->settings;
	struct rd *r = xcalloc(1, sizeof(*r));
	r->tls = tls;
	r->be = be;
	r->set = c;
	TAILQ_INIT(&r->retries);
	TAILQ_INIT(&r->yields);
	TAILQ_INIT(&r->locals);
	TAILQ_INIT(&r->cached);
	r->delegs = hashtab_create(64);
	r->channellen = (size_t)snprintf(r->channel, sizeof(r->channel), "%sreleased",
	    c->key_prefix);
	r->wantedlen = (size_t)snprintf(r->wanted, sizeof(r->wanted), "%swanted",
	    c->key_prefix);
	r->channels[0] = r->channel;
	r->channels[1] = r->wanted;
	snprintf(r->acl, sizeof(r->acl), "~%s* &%s* %s%s%s", c->key_prefix, c->key_prefix,
	    RSCRIPT_ACL, c->nseeds > 0 ? " " : "", c->nseeds > 0 ? RSCRIPT_ACL_CLUSTER : "");

	r->later = later_create(be->base);
	TAILQ_INIT(&r->settling);
	r->ev_settle = evtimer_new(be->base, on_settle, r);
	r->ev_cache = evtimer_new(be->base, on_cache, r);
	/* no name server answering keeps the loop from ending */
	r->dns = evdns_base_new(be->base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
	    EVDNS_BASE_DISABLE_WHEN_INACTIVE);
	struct rnode_conf nc = {
		.what = c->nnodes > 0 ? "redlock node" : "redis",
		.host = c->address.host,
		.port = c->address.port,
		.username = c->username,
		.password = c->password,
		.tls = r->tls,
		.tls_name = c->tls_server_name,
		.db = c->db,
		.connect_timeout_ms = (uint64_t)c->connect_timeout_ms,
		.command_timeout_ms = (uint64_t)c->command_timeout_ms,
		.scripts = rscript_text,
		.nscripts = RS_COUNT,
		.channels = r->channels,
		.nchannels = 2,
		.check_policy = true,
		.check_persistence = c->nnodes > 0,
		.read_uptime = c->nnodes > 0 && c->restart_keepout_ms > 0,
		.require_master = c->nsentinels > 0,
		.min_replicas_ack = c->min_replicas_ack,
		.replica_ack_timeout_ms = c->replica_ack_timeout_ms,
		.acl = r->acl,
	};
	r->redlock = c->nnodes > 0;
	r->nnodes = r->redlock ? c->nnodes : 1;
	r->quorum = r->nnodes / 2 + 1;
	be->priv = r;
	if (c->nseeds > 0) {
		/* one call per operation, to its slot's master (rd_create makes
		 * the seeds' nodes, the map the masters') */
		cluster_init(r);
		return r;
	}
	r->drift = r->redlock ? strtod(c->clock_drift_factor, NULL) : 0;
	r->nodes = xcalloc(r->nnodes, sizeof(*r->nodes));
	for (size_t i = 0; i < r->nnodes; i++) {
		struct rd_node *nd = &r->nodes[i];
		const struct conf_node *cn = r->redlock ? &c->nodes[i] : NULL;
		struct addr a = c->address;
		const char *why;
		if (cn != NULL && conf_server_parse(cn->server, RD_PORT, &a, &why) < 0)
			a = c->address;	/* conf checked it */
		nc.host = a.host;
		nc.port = a.port;
		nd->r = r;
		nd->set = cn;
		if (cn != NULL) {
			/* what the node sets itself, else the backend's */
			nc.username = cn->username != NULL ? cn->username : c->username;
			nc.password = cn->password != NULL ? cn->password : c->password;
			nc.tls_name = cn->tls_server_name != NULL ? cn->tls_server_name :
			    c->tls_server_name;
			if (node_tls_on(c, cn) && node_tls_own(cn))
				nd->tls = node_tls(c, cn);	/* checked by rd_create */
			nc.tls = !node_tls_on(c, cn) ? NULL : nd->tls != NULL ? nd->tls : r->tls;
		}
		snprintf(nd->addr, sizeof(nd->addr), strchr(a.host, ':') != NULL ? "[%s]:%d" :
		    "%s:%d", a.host, a.port);
		nd->node = rnode_create(be->base, r->dns, &nc, &rd_hooks, nd);
	}
	r->node = r->nodes[0].node;
	be->priv = r;
	return r;
}

/* Set up be->priv and start connecting (the server's name is resolved at
 * every connect, never blocking). 0. */
static int
rd_create(struct backend *be)
{
	const struct rd_settings *c = be->settings;
	struct tls_client *tls = NULL;
	bool shared = c->tls;
	for (size_t i = 0; i < c->nnodes; i++) {
		/* a node's own TLS files must load; without files of its own, a
		 * node with TLS uses the backend's context */
		struct tls_client *own = NULL;
		if (node_tls_on(c, &c->nodes[i]) && node_tls_own(&c->nodes[i]) &&
		    (own = node_tls(c, &c->nodes[i])) == NULL)
			return -1;
		tls_client_unref(own);
		shared |= node_tls_on(c, &c->nodes[i]) && !node_tls_own(&c->nodes[i]);
	}
	if (shared && (tls = rd_tls(c)) == NULL)
		return -1;
	struct rd *r = rd_init(be, tls);
	if (r->cluster) {
		char list[1024];
		size_t n = 0;
		for (size_t i = 0; i < c->nseeds; i++) {
			struct addr a;
			const char *why;
			if (conf_server_parse(c->seeds[i].server, RD_PORT, &a, &why) < 0)
				continue;	/* conf checked it */
			struct rd_node *nd = cluster_node(r, a.host, a.port);
			if (n < sizeof(list))
				n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s",
				    i > 0 ? ", " : "", nd->addr);
		}
		cluster_arm(r);
		log_info("redis-cluster backend: seed%s %s, key prefix '%s'%s%s%s",
		    c->nseeds == 1 ? "" : "s", list, c->key_prefix, c->tls ? ", TLS" : "",
		    c->username != NULL ? ", user " : "", c->username != NULL ? c->username : "");
		return 0;
	}
	if (c->nsentinels > 0) {
		/* the master's node starts once a sentinel says where it is */
		sentinels_start(r);
		log_info("redis backend: master '%s' of %zu sentinel%s, db %lld, key prefix "
		    "'%s'%s%s%s", c->master_name, c->nsentinels, c->nsentinels == 1 ? "" : "s",
		    c->db, c->key_prefix, c->tls ? ", TLS" : "", c->username != NULL ?
		    ", user " : "", c->username != NULL ? c->username : "");
		return 0;
	}
	for (size_t i = 0; i < r->nnodes; i++)
		rnode_start(r->nodes[i].node);
	if (r->redlock) {
		char list[1024];
		size_t n = 0;
		for (size_t i = 0; i < r->nnodes && n < sizeof(list); i++)
			n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", i > 0 ? ", " : "",
			    r->nodes[i].addr);
		log_info("redlock backend: %zu nodes (%s), quorum %zu, db %lld, key prefix "
		    "'%s'%s%s%s", r->nnodes, list, r->quorum, c->db, c->key_prefix,
		    c->tls ? ", TLS" : "", c->username != NULL ? ", user " : "",
		    c->username != NULL ? c->username : "");
		return 0;
	}
	log_info("redis backend: %s:%d db %lld, key prefix '%s'%s%s%s", c->address.host,
	    c->address.port, c->db, c->key_prefix, c->tls ? ", TLS" : "",
	    c->username != NULL ? ", user " : "", c->username != NULL ? c->username : "");
	return 0;
}

/* SIGHUP: read the TLS files again, for the next connects. */
static void
rd_reload(struct backend *be)
{
	struct rd *r = be->priv;
	struct tls_client *tls = NULL;
	bool read = false;
	/* a context that cannot be made again stays as it is (why is logged) */
	for (size_t i = 0; i < r->nnodes; i++) {
		struct rd_node *nd = &r->nodes[i];
		if (nd->tls == NULL || (tls = node_tls(r->set, nd->set)) == NULL)
			continue;
		rnode_set_tls(nd->node, tls);
		tls_client_unref(nd->tls);
		nd->tls = tls;
		read = true;
	}
	if (r->tls != NULL && (tls = rd_tls(r->set)) != NULL) {
		for (size_t i = 0; i < nodes_count(r); i++) {
			struct rd_node *nd = node_at(r, i);
			if (nd->tls == NULL && (nd->set == NULL || node_tls_on(r->set, nd->set)))
				rnode_set_tls(nd->node, tls);
		}
		for (size_t i = 0; i < r->nsentinels; i++)
			if (r->sentinels[i].node != NULL)
				rnode_set_tls(r->sentinels[i].node, tls);
		tls_client_unref(r->tls);
		r->tls = tls;
		read = true;
	}
	if (read)
		log_info("%s backend: TLS files read again, used from the next connect",
		    be->ops->name);
}

/* Close the node (failing what is in flight), free every retry, then
 * be->priv. */
static void
rd_destroy(struct backend *be)
{
	struct rd *r = be->priv;
	struct rd_retry *rt;
	struct rd_op *op;
	r->destroying = true;
	for (size_t i = 0; i < r->nsentinels; i++)
		if (r->sentinels[i].node != NULL)
			rnode_destroy(r->sentinels[i].node);
	free(r->sentinels);
	if (r->ev_ask != NULL)
		event_free(r->ev_ask);
	for (size_t i = 0; i < nodes_count(r); i++)
		rnode_destroy(node_at(r, i)->node);
	r->node = NULL;
	if (r->cluster)
		cluster_free(r);
	while ((op = TAILQ_FIRST(&r->settling)) != NULL) {
		TAILQ_REMOVE(&r->settling, op, settle);
		op_complete(op, BE_ERROR, 0, "the backend is shutting down");
	}
	event_free(r->ev_settle);
	later_run(r->later);
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
	later_destroy(r->later);
	event_free(r->ev_cache);
	if (r->dns != NULL)
		evdns_base_free(r->dns, 1);
	tls_client_unref(r->tls);
	for (size_t i = 0; i < r->nnodes && !r->cluster; i++)
		tls_client_unref(r->nodes[i].tls);
	free(r->nodes);
	free(r);
	be->priv = NULL;
}

/* Redlock's INFO lines: the quorum, and each node's state and counts. */
static void
redlock_info(struct rd *r, struct evbuffer *out)
{
	uint64_t now = clock_ms();
	evbuffer_add_printf(out, "backend_nodes:%zu\r\nbackend_quorum:%zu\r\n"
	    "backend_nodes_up:%zu\r\nbackend_nodes_counting:%zu\r\n"
	    "backend_node_timeout_ms:%lld\r\nbackend_clock_drift_factor:%s\r\n"
	    "backend_restart_keepout_ms:%lld\r\n", r->nnodes, r->quorum, nodes_up(r),
	    nodes_counting(r), r->set->node_timeout_ms, r->set->clock_drift_factor,
	    r->set->restart_keepout_ms);
	for (size_t i = 0; i < r->nnodes; i++) {
		const struct rd_node *nd = &r->nodes[i];
		struct rnode_stats st;
		uint64_t out_ms = kept_out_ms(r, i, now);
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

static void
rd_info(struct backend *be, struct evbuffer *out)
{
	struct rd *r = be->priv;
	struct rnode_stats st, all = { .policy = "unknown" };
	size_t cached = 0;
	struct rd_deleg *d;
	char address[1024];
	size_t n = 0, subscribed = 0;
	TAILQ_FOREACH(d, &r->cached, centry)
		cached++;
	/* the nodes' counts, summed; connected: a quorum is */
	for (size_t i = 0; i < nodes_count(r); i++) {
		rnode_stats(node_at(r, i)->node, &st);
		subscribed += st.subscribed || (r->cluster && node_at(r, i)->nslots == 0);
		all.reconnects += st.reconnects;
		all.unacked += st.unacked;
		all.inflight += st.inflight;
		all.kept += st.kept;
		all.scripts_loaded = i == 0 || st.scripts_loaded < all.scripts_loaded ?
		    st.scripts_loaded : all.scripts_loaded;
		if (i == 0 || strcmp(st.policy, all.policy) != 0)
			all.policy = i == 0 ? st.policy : "mixed";
		if (n < sizeof(address))
			n += (size_t)snprintf(address + n, sizeof(address) - n, "%s%s",
			    i > 0 ? "," : "", r->redlock || r->cluster ? node_at(r, i)->addr :
			    st.address);
	}
	if (r->nsentinels > 0) {
		size_t up = 0;
		for (size_t i = 0; i < r->nsentinels; i++)
			up += r->sentinels[i].node != NULL && rnode_up(r->sentinels[i].node);
		evbuffer_add_printf(out, "backend_master_name:%s\r\nbackend_master:%s\r\n"
		    "backend_sentinels:%zu\r\nbackend_sentinels_up:%zu\r\n", r->set->master_name,
		    r->master[0] != '\0' ? r->master : "unknown", r->nsentinels, up);
	}
	evbuffer_add_printf(out,
	    "backend_address:%s\r\nbackend_db:%lld\r\nbackend_connected:%d\r\n"
	    "backend_subscribed:%d\r\nbackend_reconnects_total:%llu\r\n"
	    "backend_scripts_loaded:%zu\r\nbackend_commands_total:%llu\r\n"
	    "backend_inflight:%zu\r\nbackend_deferred_releases:%zu\r\n"
	    "backend_renewals_total:%llu\r\nbackend_lost_total:%llu\r\n"
	    "backend_command_errors_total:%llu\r\nbackend_release_messages_total:%llu\r\n"
	    "backend_retries_total:%llu\r\nbackend_maxmemory_policy:%s\r\n"
	    "backend_delegated_keys:%zu\r\nbackend_local_handoffs_total:%llu\r\n"
	    "backend_lease_cache_ms:%lld\r\nbackend_cached_leases:%zu\r\n"
	    "backend_cache_hits_total:%llu\r\nbackend_min_replicas_ack:%lld\r\n"
	    "backend_unacknowledged_total:%llu\r\n",
	    address, r->set->db, r->cluster ? cluster_slots_up(r) == RC_SLOTS :
	    nodes_counting(r) >= r->quorum, r->cluster ? subscribed == r->ncl : subscribed >= r->quorum,
	    (unsigned long long)all.reconnects,
	    all.scripts_loaded, (unsigned long long)r->ncommands, all.inflight, all.kept,
	    (unsigned long long)r->nrenewals, (unsigned long long)r->nnotowner,
	    (unsigned long long)r->nerrors, (unsigned long long)r->nmessages,
	    (unsigned long long)r->nretries, all.policy,
	    hashtab_count(r->delegs), (unsigned long long)r->nlocal,
	    r->set->lease_cache_ms, cached, (unsigned long long)r->ncache_hits,
	    r->set->min_replicas_ack, (unsigned long long)all.unacked);
	if (r->redlock)
		redlock_info(r, out);
	if (r->cluster)
		cluster_info(r, out);
}

/* "connected" while every node is up (and counts); redlock: "degraded"
 * while a quorum but not every node does; else "disconnected". */
static const char *
rd_state(struct backend *be)
{
	struct rd *r = be->priv;
	size_t up = r->cluster ? cluster_slots_up(r) : nodes_counting(r);
	if (r->cluster)
		return up == RC_SLOTS ? "connected" : up > 0 ? "degraded" : "disconnected";
	return up == r->nnodes ? "connected" : up >= r->quorum ? "degraded" : "disconnected";
}

/* Releases in flight or kept for later: shutdown waits for them. Redlock
 * does not wait for a node that is down: once the others released a lease,
 * no quorum holds it, and on that node it ends at its TTL. */
static size_t
rd_pending(struct backend *be)
{
	struct rd *r = be->priv;
	struct rnode_stats st;
	size_t kept = 0;
	for (size_t i = 0; i < nodes_count(r); i++) {
		rnode_stats(node_at(r, i)->node, &st);
		if ((!r->redlock && !r->cluster) || st.up)
			kept += st.kept;
	}
	return r->releases_inflight + kept;
}

/* ---- settings -------------------------------------------------------------- */

#define RD_DB_MAX 1000000		/* largest db (the message below says it too) */
#define RD_SET(field) offsetof(struct rd_settings, field)

/* The database of redis and redlock (a cluster has only 0). */
#define RD_DB_SETTING \
	{ .name = "db", .type = CONF_INT, .off = RD_SET(db), .min = 0, .max = RD_DB_MAX }

/* The keys under "backend." of the three backends, into struct rd_settings. */
#define RD_AUTH_SETTINGS \
	{ .name = "username", .type = CONF_STR, .off = RD_SET(username) }, \
	{ .name = "password", .type = CONF_SECRET, .off = RD_SET(password) }, \
	{ .name = "password_file", .type = CONF_SECRET_FILE, .off = RD_SET(password_file), \
	  .pair = "password" }
#define RD_COMMON_SETTINGS \
	{ .name = "key_prefix", .type = CONF_SHORTSTR, .off = RD_SET(key_prefix), .max = 64, \
	  .defstr = "dlock:" }, \
	{ .name = "connect_timeout_ms", .type = CONF_INT, .off = RD_SET(connect_timeout_ms), \
	  .min = 10, .max = 600000, .def = 2000 }, \
	{ .name = "command_timeout_ms", .type = CONF_INT, .off = RD_SET(command_timeout_ms), \
	  .min = 10, .max = 600000, .def = 2000 }, \
	{ .name = "handoff_limit", .type = CONF_INT, .off = RD_SET(handoff_limit), \
	  .min = 1, .max = 1000000, .def = 16 }, \
	{ .name = "lease_cache_ms", .type = CONF_INT, .off = RD_SET(lease_cache_ms), \
	  .min = 0, .max = 1000, .def = 0 }, \
	{ .name = "min_replicas_ack", .type = CONF_INT, .off = RD_SET(min_replicas_ack), \
	  .min = 0, .max = 100, .def = 0 }, \
	{ .name = "replica_ack_timeout_ms", .type = CONF_INT, \
	  .off = RD_SET(replica_ack_timeout_ms), .min = 1, .max = 60000, .def = 100 }, \
	{ .name = "tls.enabled", .type = CONF_BOOL, .off = RD_SET(tls), .def = 0 }, \
	{ .name = "tls.ca_file", .type = CONF_PATH, .off = RD_SET(tls_ca_file) }, \
	{ .name = "tls.cert_file", .type = CONF_PATH, .off = RD_SET(tls_cert_file) }, \
	{ .name = "tls.key_file", .type = CONF_PATH, .off = RD_SET(tls_key_file) }, \
	{ .name = "tls.server_name", .type = CONF_STR, .off = RD_SET(tls_server_name) }

/* The redis backend's keys. */
static const struct conf_setting rd_settings_table[] = {
	{ .name = "address", .type = CONF_SERVER, .off = RD_SET(address),
	  .defstr = "127.0.0.1:6379" },
	RD_AUTH_SETTINGS,
	RD_DB_SETTING,
	RD_COMMON_SETTINGS,
	{ .name = "sentinels", .type = CONF_SERVERLIST, .off = RD_SET(sentinels),
	  .count = RD_SET(nsentinels), .def = RD_SENTINEL_PORT, .optional = 1 },
	{ .name = "master_name", .type = CONF_STR, .off = RD_SET(master_name) },
	{ .name = "sentinel_username", .type = CONF_STR, .off = RD_SET(sentinel_username) },
	{ .name = "sentinel_password", .type = CONF_SECRET, .off = RD_SET(sentinel_password) },
	{ .name = "sentinel_password_file", .type = CONF_SECRET_FILE,
	  .off = RD_SET(sentinel_password_file), .pair = "sentinel_password" },
};

/* The redlock backend's keys. */
static const struct conf_setting rl_settings_table[] = {
	{ .name = "nodes", .type = CONF_NODELIST, .off = RD_SET(nodes),
	  .count = RD_SET(nnodes), .def = RD_PORT },
	{ .name = "node_timeout_ms", .type = CONF_INT, .off = RD_SET(node_timeout_ms),
	  .min = 0, .max = 600000, .def = 0 },
	{ .name = "clock_drift_factor", .type = CONF_SHORTSTR,
	  .off = RD_SET(clock_drift_factor), .max = 32, .defstr = "0.01" },
	{ .name = "restart_keepout_ms", .type = CONF_INT, .off = RD_SET(restart_keepout_ms),
	  .min = 0, .max = 86400000, .def = 0 },
	RD_AUTH_SETTINGS,
	RD_DB_SETTING,
	RD_COMMON_SETTINGS,
};

/* The redis-cluster backend's keys. */
static const struct conf_setting rc_settings_table[] = {
	/* the same type as redlock's nodes: one key, one type */
	{ .name = "nodes", .type = CONF_NODELIST, .off = RD_SET(seeds),
	  .count = RD_SET(nseeds), .def = RD_PORT },
	{ .name = "refresh_ms", .type = CONF_INT, .off = RD_SET(refresh_ms),
	  .min = 100, .max = 3600000, .def = 5000 },
	RD_AUTH_SETTINGS,
	RD_DB_SETTING,		/* 0 only: said by rd_check */
	RD_COMMON_SETTINGS,
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

/* The "host[:port],host[:port].../NAME[/db]" part of a redis-sentinel URL:
 * the sentinels (as written, each checked) into *servers, the master's name
 * into *name (both allocated, the caller frees them) and *db. NULL, or why
 * not. */
static const char *
rd_url_sentinels(const char *s, char **servers, char **name, long long *db)
{
	const char *slash = strchr(s, '/'), *why, *p;
	char *list, *item, *save = NULL, *rest;
	struct addr a;
	*servers = *name = NULL;
	if (strpbrk(s, "?#") != NULL)
		return "query parameters are not supported";
	if (slash == NULL || slash[1] == '\0' || slash[1] == '/')
		return "the master's name is missing (redis-sentinel://host:port/MASTER_NAME)";
	if (slash == s)
		return "the sentinels are missing";
	list = xmemdup(s, (size_t)(slash - s));
	for (item = strtok_r(list, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save))
		if (conf_server_parse(item, RD_SENTINEL_PORT, &a, &why) < 0) {
			free(list);
			return why;
		}
	free(list);
	p = strchr(slash + 1, '/');
	rest = xasprintf("h%s", p != NULL ? p : "");	/* the db, checked as for redis:// */
	why = rd_url_server(rest, &a, db);
	free(rest);
	if (why != NULL)
		return why;
	*servers = xmemdup(s, (size_t)(slash - s));
	*name = p != NULL ? xmemdup(slash + 1, (size_t)(p - slash - 1)) : xstrdup(slash + 1);
	return NULL;
}

/* What every redis, redlock and redis-cluster URL gives: TLS on or off,
 * the user and password (none when it has none, and never the file's
 * password_file), the db (none when db < 0: a cluster's). */
static void
url_set_common(backend_url_set *set, void *arg, bool tls, const char *user, const char *pw,
    long long db)
{
	set(arg, "tls.enabled", tls ? "true" : "false");
	/* "default" without a password: no AUTH at all */
	set(arg, "username", user != NULL && pw != NULL ? user : "");
	set(arg, "password", pw != NULL ? pw : "");
	set(arg, "password_file", "");
	if (db >= 0) {
		char *text = xasprintf("%lld", db);
		set(arg, "db", text);
		free(text);
	}
}

/* Free a URL's user and password, wiping the password. */
static void
userinfo_free(char *user, char *pw)
{
	if (pw != NULL)
		explicit_bzero(pw, strlen(pw));
	free(pw);
	free(user);
}

/* -b redis://[user[:password]@]host[:port][/db], or rediss:// for TLS:
 * port 6379 and db 0 when left out; user and password may hold %XX
 * escapes. Or redis-sentinel://[user[:password]@]host[:port][,...]/NAME[/db]
 * (rediss-sentinel:// for TLS): the sentinels (port 26379 when left out)
 * and the master's name; user and password are the master's. The URL gives
 * the address (or the sentinels and master), TLS on or off, the user and
 * password (none when it has none, and never the file's password_file) and
 * the db; the file's other settings (TLS files, timeouts, the sentinels'
 * password) stay. 1 if url is not a redis URL; else 0, or -1 with *why a
 * sentence that never holds the password. */
static int
rd_parse_url(const char *url, backend_url_set *set, void *arg, const char **why)
{
	static const char *const schemes[] = { "redis://", "rediss://", "redis-sentinel://",
		"rediss-sentinel://" };
	const char *s = NULL;
	char *user = NULL, *pw = NULL, *text, *servers = NULL, *name = NULL;
	bool tls = false, sentinel = false;
	struct addr a;
	long long db;
	for (size_t i = 0; i < 4 && s == NULL; i++)
		if (strncasecmp(url, schemes[i], strlen(schemes[i])) == 0) {
			s = url + strlen(schemes[i]);
			tls = i % 2 == 1;
			sentinel = i >= 2;
		}
	if (s == NULL)
		return 1;
	*why = NULL;
	if (conf_url_userinfo(s, &user, &pw, &s, why) == 0 && user != NULL && *user != '\0' &&
	    strcmp(user, "default") != 0 && pw == NULL)
		*why = "a user needs a password (redis://user:password@host:port; a "
		    "password alone goes after a colon: redis://:password@host:port)";
	if (*why == NULL)
		*why = sentinel ? rd_url_sentinels(s, &servers, &name, &db) :
		    rd_url_server(s, &a, &db);
	if (*why == NULL) {
		if (!sentinel) {
			text = xasprintf(strchr(a.host, ':') != NULL ? "[%s]:%d" : "%s:%d", a.host,
			    a.port);
			set(arg, "address", text);
			free(text);
		}
		set(arg, "sentinels", sentinel ? servers : "");
		set(arg, "master_name", sentinel ? name : "");
		url_set_common(set, arg, tls, user, pw, db);
	}
	userinfo_free(user, pw);
	free(servers);
	free(name);
	return *why == NULL ? 0 : -1;
}

/* -b redlock://[user[:password]@]host[:port][,host[:port]...][/db] or
 * redlocks:// for TLS: the nodes (port 6379 when left out); or
 * redis-cluster://[user[:password]@]host[:port][,host[:port]...] or
 * rediss-cluster:// for TLS: the seed nodes, no db. As for redis://
 * otherwise. 1 if url is neither; else 0, or -1 with *why a sentence that
 * never holds the password. */
static int
nodes_parse_url(const char *url, bool cluster, backend_url_set *set, void *arg,
    const char **why)
{
	const char *plain = cluster ? "redis-cluster://" : "redlock://";
	const char *tlss = cluster ? "rediss-cluster://" : "redlocks://";
	const char *s = NULL, *slash;
	char *user = NULL, *pw = NULL, *list = NULL, *text;
	bool tls = false;
	struct addr a;
	long long db = 0;
	if (strncasecmp(url, plain, strlen(plain)) == 0)
		s = url + strlen(plain);
	else if (strncasecmp(url, tlss, strlen(tlss)) == 0)
		s = url + strlen(tlss), tls = true;
	if (s == NULL)
		return 1;
	*why = NULL;
	if (conf_url_userinfo(s, &user, &pw, &s, why) == 0 && user != NULL && *user != '\0' &&
	    strcmp(user, "default") != 0 && pw == NULL)
		*why = cluster ? "a user needs a password (redis-cluster://user:password@host:port,"
		    "...; a password alone goes after a colon: redis-cluster://:password@host:port"
		    ",...)" : "a user needs a password (redlock://user:password@host:port,...; a "
		    "password alone goes after a colon: redlock://:password@host:port,...)";
	if (*why == NULL && strpbrk(s, "?#") != NULL)
		*why = "query parameters are not supported";
	slash = s + strcspn(s, "/");
	if (*why == NULL && (slash == s || *s == ','))
		*why = cluster ? "the nodes are missing (redis-cluster://host:port,host:port,...)" :
		    "the nodes are missing (redlock://host:port,host:port,host:port)";
	if (*why == NULL) {
		char *item, *save = NULL;
		list = xmemdup(s, (size_t)(slash - s));
		text = xstrdup(list);
		for (item = strtok_r(text, ",", &save); item != NULL && *why == NULL;
		    item = strtok_r(NULL, ",", &save))
			if (conf_server_parse(item, RD_PORT, &a, why) == 0)
				*why = NULL;
		free(text);
	}
	if (*why == NULL && *slash != '\0' && cluster && slash[1] != '\0')
		*why = "a cluster has no databases but 0 (redis-cluster://host:port,... without /db)";
	else if (*why == NULL && *slash != '\0' && !cluster) {
		text = xasprintf("h%s", slash);	/* the db, checked as for redis:// */
		*why = rd_url_server(text, &a, &db);
		free(text);
	}
	if (*why == NULL) {
		set(arg, "nodes", list);
		url_set_common(set, arg, tls, user, pw, cluster ? -1 : db);
	}
	userinfo_free(user, pw);
	free(list);
	return *why == NULL ? 0 : -1;
}

/* -b redlock://... (nodes_parse_url). */
static int
rl_parse_url(const char *url, backend_url_set *set, void *arg, const char **why)
{
	return nodes_parse_url(url, false, set, arg, why);
}

/* -b redis-cluster://... (nodes_parse_url). */
static int
rc_parse_url(const char *url, backend_url_set *set, void *arg, const char **why)
{
	return nodes_parse_url(url, true, set, arg, why);
}

/* Whether the name of server (a "host:port") resolves, as the daemon will
 * look it up (getaddrinfo blocks: dlockd -t only); else an error at
 * setting. */
static void
rd_check_name(struct conf *c, const char *setting, const char *host)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	int rc = getaddrinfo(host, NULL, &hints, &ai);
	if (rc != 0) {
		conf_setting_warning(c, setting, "cannot resolve '%s': %s (the daemon starts "
		    "anyway, and resolves it again at every connect)", host, gai_strerror(rc));
		return;
	}
	freeaddrinfo(ai);
}

/* The rules between the settings; deep (dlockd -t): the names resolve and
 * the TLS files can be used. */
static void
rd_check(struct conf *c, const void *settings, int deep)
{
	const struct rd_settings *set = settings;
	if (set->nsentinels > 0 && set->master_name == NULL)
		(void)conf_setting_error(c, "backend.sentinels", "'backend.sentinels' needs "
		    "'backend.master_name': the name the sentinels know the master by");
	if (set->nsentinels == 0 && set->master_name != NULL)
		(void)conf_setting_error(c, "backend.master_name", "'backend.master_name' needs "
		    "'backend.sentinels'");
	if (set->min_replicas_ack > 0 && set->replica_ack_timeout_ms >= set->command_timeout_ms)
		(void)conf_setting_error(c, "backend.replica_ack_timeout_ms",
		    "'backend.replica_ack_timeout_ms' (%lld) must be below "
		    "'backend.command_timeout_ms' (%lld): WAIT holds the connection that long",
		    set->replica_ack_timeout_ms, set->command_timeout_ms);
	if (set->clock_drift_factor != NULL) {
		char *end;
		double f = strtod(set->clock_drift_factor, &end);
		if (end == set->clock_drift_factor || *end != '\0' || !(f >= 0 && f < 0.5))
			(void)conf_setting_error(c, "backend.clock_drift_factor",
			    "'backend.clock_drift_factor' must be a number from 0 to below 0.5 "
			    "(the share of a lease the clocks may drift by; 0.01 by default), "
			    "not '%s'", set->clock_drift_factor);
	}
	for (size_t i = 0; i < set->nseeds; i++) {
		const struct conf_node *n = &set->seeds[i];
		if (n->username != NULL || n->password != NULL || n->tls != CONF_UNSET ||
		    n->tls_ca_file != NULL || n->tls_cert_file != NULL || n->tls_key_file != NULL ||
		    n->tls_server_name != NULL) {
			(void)conf_setting_error(c, "backend.nodes", "the nodes of a redis-cluster "
			    "backend are addresses only: every node of a cluster takes the "
			    "backend's user, password and tls (node %s sets its own)", n->server);
			break;
		}
	}
	if (set->nseeds > 0 && set->db != 0)
		(void)conf_setting_error(c, "backend.db", "'backend.db' of a redis-cluster backend "
		    "must be 0: a cluster has no other database");
	if (set->nseeds > 0 && strpbrk(set->key_prefix, "{}") != NULL)
		(void)conf_setting_error(c, "backend.key_prefix", "'backend.key_prefix' of a "
		    "redis-cluster backend must not hold '{' or '}': the keys of a lock share "
		    "the hash tag that dlockd puts after it");
	if ((set->tls_cert_file == NULL) != (set->tls_key_file == NULL))
		(void)conf_setting_error(c, set->tls_cert_file != NULL ? "backend.tls.cert_file" :
		    "backend.tls.key_file", "'backend.tls.cert_file' and 'backend.tls.key_file' "
		    "go together (a client certificate and its key)");
	if (!deep || c->nerrors > 0)
		return;
	if (set->nsentinels == 0 && set->nnodes == 0 && set->nseeds == 0)
		rd_check_name(c, "backend.address", set->address.host);
	for (size_t i = 0; i < set->nseeds; i++) {
		struct addr a;
		const char *why;
		if (conf_server_parse(set->seeds[i].server, RD_PORT, &a, &why) == 0)
			rd_check_name(c, "backend.nodes", a.host);
	}
	for (size_t i = 0; i < set->nnodes; i++) {
		const struct conf_node *n = &set->nodes[i];
		struct tls_client *tls;
		struct addr a;
		const char *why;
		char msg[512];
		if (conf_server_parse(n->server, RD_PORT, &a, &why) == 0)
			rd_check_name(c, "backend.nodes", a.host);
		if (!node_tls_on(set, n) || !node_tls_own(n))
			continue;
		tls = tls_client_create(n->tls_ca_file != NULL ? n->tls_ca_file :
		    set->tls_ca_file, n->tls_cert_file != NULL ? n->tls_cert_file :
		    set->tls_cert_file, n->tls_key_file != NULL ? n->tls_key_file :
		    set->tls_key_file, msg, sizeof(msg));
		if (tls == NULL)
			(void)conf_setting_error(c, "backend.nodes", "TLS of node %s: %s",
			    n->server, msg);
		tls_client_unref(tls);
	}
	for (size_t i = 0; i < set->nsentinels; i++) {
		struct addr a;
		const char *why;
		if (conf_server_parse(set->sentinels[i], RD_SENTINEL_PORT, &a, &why) == 0)
			rd_check_name(c, "backend.sentinels", a.host);
	}
	if (set->tls) {
		char why[512];
		struct tls_client *tls = tls_client_create(set->tls_ca_file, set->tls_cert_file,
		    set->tls_key_file, why, sizeof(why));
		if (tls == NULL)
			(void)conf_setting_error(c, set->tls_cert_file != NULL ?
			    "backend.tls.cert_file" : "backend.tls.ca_file", "TLS: %s", why);
		tls_client_unref(tls);
	}
}

/* The operations of both backends: one policy, over one server or a quorum
 * of them. */
#define RD_OPS \
	.local_leases = 0, \
	.settings_size = sizeof(struct rd_settings), \
	.min_lease_ms = rd_min_lease_ms, \
	.min_lease_rule = "3 x backend.command_timeout_ms", \
	.create = rd_create, \
	.destroy = rd_destroy, \
	.acquire = rd_acquire, \
	.release = rd_release, \
	.renew = rd_renew, \
	.transfer = rd_transfer, \
	.info = rd_info, \
	.state = rd_state, \
	.pending = rd_pending, \
	.drain = rd_drain, \
	.reload = rd_reload, \
	.problem = rd_problem, \
	.check = rd_check

const struct backend_ops be_redis_ops = {
	.name = "redis",
	.settings = rd_settings_table,
	.nsettings = sizeof(rd_settings_table) / sizeof(rd_settings_table[0]),
	.parse_url = rd_parse_url,
	.url_form = "redis://host:port",
	RD_OPS,
};

/* Redlock: the same policy over several independent servers, a quorum
 * deciding each operation (the top of this file). */
const struct backend_ops be_redlock_ops = {
	.name = "redlock",
	.settings = rl_settings_table,
	.nsettings = sizeof(rl_settings_table) / sizeof(rl_settings_table[0]),
	.parse_url = rl_parse_url,
	.url_form = "redlock://host:port,...",
	RD_OPS,
};

/* Redis Cluster: the policy of one server per key, on its slot's master
 * (the cluster's section above). */
const struct backend_ops be_redis_cluster_ops = {
	.name = "redis-cluster",
	.settings = rc_settings_table,
	.nsettings = sizeof(rc_settings_table) / sizeof(rc_settings_table[0]),
	.parse_url = rc_parse_url,
	.url_form = "redis-cluster://host:port,...",
	RD_OPS,
};

#ifdef DLOCKD_TEST_HOOKS	/* test and fuzz objects only (Makefile) */
/* ---- for the fuzz harness (be_redis_internal.h) ---------------------------- */

int
be_redis_offline(struct backend *be)
{
	be->ops = &be_redis_ops;
	(void)rd_init(be, NULL);
	return 0;
}

void
be_redis_answer(struct backend *be, int script, const struct be_lock *l, unsigned fences,
    be_cb *cb, void *arg, void *reply)
{
	struct rd *r = be->priv;
	char member[RSCRIPT_MEMBER_MAX];
	const char *none[] = { NULL };
	assert(script >= 0 && script < RS_COUNT);
	if (script == RS_RELEASE || script == RS_RENEW)
		lease_member(r, l, member);
	else
		rscript_member(l, member);
	struct rd_op *op = op_new(r, (enum rscript)script, l, member, "l", none, cb, arg);
	op->fences = fences;
	op->sent_ms = clock_ms();
	if (op->script == RS_RELEASE)
		r->releases_inflight++;
	op->calls[0].answer = RA_PENDING;
	op->pending = 1;
	on_reply(&op->calls[0], reply, reply == NULL ? "the connection to redis was lost" : NULL);
}

void
be_redis_unsolicited(struct backend *be, int sub, void *reply)
{
	struct rd *r = be->priv;
	rnode_unsolicited(r->node, sub, reply);
}
#endif
