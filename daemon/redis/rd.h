/*
 * rd — the state the Redis backends share, the life of an operation, and
 * the interface of a topology: what the policy core (be_redis.c), the
 * delegation (rdeleg.c), the quorum (rquorum.c) and each topology
 * (rtopo_*.c), the list of nodes they share (rlist.c) and the backends'
 * settings (rsettings.c) see of each other. Nothing outside daemon/redis/
 * includes it.
 *
 * The policy is one for every topology: an operation (struct rd_op) is a
 * script call on each of r->ncalls nodes, decided by a quorum of them
 * (ncalls / 2 + 1; one call: its answer). Where the calls go, how many
 * nodes there are, which channels carry the release messages and what the
 * backend says of itself (INFO, problems) is the topology's (struct
 * rd_topo):
 *   - a fixed list of nodes: one Redis server (redis), or redlock's N
 *     independent servers, every operation a call on each (rtopo_nodes.c);
 *   - Sentinel: the one master the sentinels name (rtopo_sentinel.c);
 *   - Redis Cluster: one call per operation, to the master of its key's
 *     slot, redirections followed (rtopo_cluster.c).
 * A topology calls the core through the functions below and never includes
 * another topology. Calls go one way, down: rsettings.c (which picks the
 * topology) -> the topologies -> rlist.c -> the core -> rdeleg.c ->
 * rquorum.c; the core reaches a topology only through r->topo, and the
 * delegation gives leases back only through r->give_back.
 */
#ifndef DLOCKD_RD_H
#define DLOCKD_RD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "addr.h"
#include "backend.h"
#include "hashtab.h"
#include "later.h"
#include "rnode.h"
#include "rquorum.h"
#include "rscript.h"
#include "token.h"

struct conf_node;
struct evbuffer;
struct evdns_base;
struct event;
struct redisReply;
struct tls_client;

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
#define RD_FAILURE_SHOWN_MS 2000	/* an operation's failure is the backend's
					 * problem this long (several nodes) */

struct rd;
struct rd_op;

/* One node's part of an operation. */
struct rd_call {
	struct rd_op *op;		/* the operation */
	struct rd_node *node;		/* where it was sent (last), NULL: not sent */
	unsigned char answer;		/* enum rq_answer */
	bool maybe;			/* failed, but may have taken the lease */
	bool raising;			/* the fence's write-back is in flight */
	bool observed;			/* RQ_OK acquire, transfer: some daemon
					 * observes the key (its grants are told) */
	long long busy_ms;		/* RQ_BUSY acquire: when the key may be free */
	uint64_t fence;			/* RQ_OK acquire, transfer: its proposal */
};

/* An operation: a script call on each of r->ncalls nodes, in flight, or a
 * release waiting for the connection. */
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
	char term[24];			/* ... and its fence, for a record's */
	const char *raise_argv[6];	/* the write-back's call */
	size_t raise_argvlen[6];
	size_t raise_argc;		/* its length (6: with the election record) */
	bool recorded;			/* acquire, transfer: a CAMPAIGN's (its
					 * election record is written) */
	struct event *ev_late;		/* several calls: the node timeout */
	char why[200];			/* the first failure's reason */
	char *forced_by;		/* renew: a node said the lease was broken
					 * (UNLOCK FORCE), by whom (owned), NULL:
					 * none did */
	struct rd_call *calls;		/* r->ncalls of them, after op */
	char *buf;			/* the key and every argument: the rest of
					 * op's allocation */
	struct later_item failing;	/* failed before sending: told from the loop */
	TAILQ_ENTRY(rd_op) settle;	/* on r->settling, or on a list of the
					 * topology's (ops to send again) */
	unsigned redirects;		/* a routed topology's: redirections followed */
	struct event *ev_again;		/* ... sends it again (after a wait) */
};
TAILQ_HEAD(rd_op_list, rd_op);

/* A Redis server of the backend: a client (rnode) and what the policy
 * counts of it. A topology may embed it in a struct of its own. */
struct rd_node {
	struct rd *r;			/* the backend */
	struct rnode *node;		/* its client */
	const struct conf_node *set;	/* its own settings (a node of backend.nodes
					 * that sets some), NULL: the backend's */
	struct tls_client *tls;		/* its own TLS context (TLS files of its own),
					 * NULL: the backend's, if TLS is on */
	char addr[300];			/* "host:port", for messages */
	char host[256];			/* where it is */
	int port;
	bool was_up;			/* its connection was up once */
	uint64_t ncalls;		/* calls sent to it */
	uint64_t nfailures;		/* calls it failed (error, no reply, late) */
	uint64_t ntimeouts;		/* calls it answered after the node timeout */
	bool late_logged;		/* that it answers late was logged */
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
 * next without a call to Redis (local delegation, rdeleg.c). Redis knows
 * the lease as member; the lock table knows the holding by holder, its
 * token.
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

/* The settings of the three backends (backend.* keys; rsettings.c). */
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

/*
 * A topology: where an operation's calls go and what the backend says of
 * its servers. Every function is called with the backend's state; those
 * marked optional may be NULL.
 */
struct rd_topo {
	const char *name;		/* in messages: "redis", "redlock", ... */
	bool hash_tags;			/* the keys of a lock carry one hash tag
					 * (they live in one slot) */
	bool count_answers;		/* a failed operation says how many of the
					 * nodes answered */
	bool wait_down;			/* shutdown waits for releases kept for a
					 * node that is down */
	/* Make the nodes (r->nodes, r->nnodes), say how many calls an
	 * operation makes (r->ncalls) and set up the topology's own state
	 * (r->tp): nothing connects yet. */
	void (*init)(struct rd *r);
	/* Start connecting; log what the backend is. */
	void (*start)(struct rd *r);
	/* Optional: free the topology's own state and its nodes (the core
	 * destroyed the nodes' clients; it frees r->nodes, the array, after
	 * this). */
	void (*destroy)(struct rd *r);
	/* Whether op can go out now; false: it fails from the loop, and a
	 * release is kept for later. */
	bool (*ready)(const struct rd *r, const struct rd_op *op);
	/* Send op's calls (rd_call_send), or fail it (rd_op_fail_later). */
	void (*send)(struct rd *r, struct rd_op *op);
	/* The node that op's call i goes to now; NULL: none is known. */
	struct rd_node *(*home)(const struct rd *r, const struct rd_op *op, size_t i);
	/* Optional: whether an error reply to op's call asked for it to go
	 * elsewhere, and it went (or will go); false: an error of the call. */
	bool (*redirected)(struct rd *r, struct rd_op *op, const struct redisReply *rep);
	/* The channel of key's releases (wanted false), or of the daemons'
	 * asks for it (true). */
	const char *(*channel)(const struct rd *r, const char *key, size_t keylen, bool wanted);
	/* Why node nd failed a call (rep, its error reply or NULL; why, the
	 * core's words), for a reply: into buf. */
	void (*failed)(const struct rd *r, const struct rd_node *nd,
	    const struct redisReply *rep, const char *why, char *buf, size_t len);
	/* Optional: nd's command connection came up, or went down (the core
	 * did its part first). */
	void (*up)(struct rd *r, struct rd_node *nd);
	void (*down)(struct rd *r, struct rd_node *nd);
	/* Why the backend fails now (backend_ops.problem), or NULL. */
	const char *(*problem)(const struct rd *r, char *buf, size_t len);
	/* Optional: whether HELD lists nd's keys (NULL: every node's). */
	bool (*lists)(const struct rd *r, const struct rd_node *nd);
	/* Optional: whether servers of the topology's own (the sentinels)
	 * refuse the settings, so that waiting cannot help (rd_refused). */
	bool (*refused)(const struct rd *r);
	/* One word for STATUS (backend_ops.state). */
	const char *(*state)(const struct rd *r);
	/* INFO: backend_address's value into buf; whether operations can be
	 * decided (backend_connected), and release messages heard
	 * (backend_subscribed). */
	void (*address)(const struct rd *r, char *buf, size_t len);
	bool (*connected)(const struct rd *r);
	bool (*subscribed)(const struct rd *r);
	/* Optional: INFO lines before the common ones, and after them. */
	void (*info_before)(struct rd *r, struct evbuffer *out);
	void (*info_after)(struct rd *r, struct evbuffer *out);
	/* Optional: SIGHUP read the backend's TLS files again: tls is the new
	 * context, for connections that are not the nodes' (sentinels). */
	void (*reload)(struct rd *r, struct tls_client *tls);
};

/* The topologies (rtopo_*.c); rsettings.c chooses one. */
extern const struct rd_topo rd_topo_single;
extern const struct rd_topo rd_topo_redlock;
extern const struct rd_topo rd_topo_sentinel;
extern const struct rd_topo rd_topo_cluster;

/* The state of one redis, redlock or redis-cluster backend (be->priv). */
struct rd {
	struct backend *be;		/* our backend */
	const struct rd_settings *set;	/* its settings */
	const struct rd_topo *topo;	/* where its calls go */
	void *tp;			/* the topology's own state */
	struct evdns_base *dns;		/* resolves the servers' names */
	struct tls_client *tls;		/* the TLS context, NULL: plain */
	struct rd_node **nodes;		/* every server known (the topology's) */
	size_t nnodes;			/* how many */
	size_t ncalls;			/* calls per operation */
	size_t quorum;			/* how many must agree: ncalls / 2 + 1 */
	double drift;			/* a grant is valid for the TTL less
					 * TTL x drift + drift_ms (rquorum_valid) */
	uint64_t drift_ms;
	char failure[200];		/* why the last operation failed */
	uint64_t failure_at;		/* and when (clock_ms()) */
	char channel[128];		/* prefix + "released" */
	size_t channellen;
	char wanted[128];		/* prefix + "wanted" */
	size_t wantedlen;
	const char *channels[2];	/* both, as a node subscribes to them */
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
	/* how rdeleg gives back a lease nobody here holds (the core's: a
	 * release sent, or kept until it can be) */
	void (*give_back)(struct rd *r, const struct be_lock *l, const char *member);
	struct hashtab *watches;	/* struct rd_watch by key (rleader.c) */
	uint64_t looks;			/* several nodes: looks sent, which number
					 * the states they read (rleader.c) */
	bool draining;			/* shutting down: cache nothing */
	bool destroying;		/* rd_destroy runs: keep nothing for later */
};

/* ---- the core (be_redis.c): what a topology calls --------------------- */

/* Set up be->priv with topo's nodes made, not started (be->settings
 * given): everything but connecting. */
struct rd *rd_init(struct backend *be, struct tls_client *tls, const struct rd_topo *topo);
/* backend_ops.create over topo: set up be->priv and start connecting (the
 * servers' names are resolved at every connect, never blocking). 0, or -1
 * after logging why. */
int rd_create(struct backend *be, const struct rd_topo *topo);
/* The backend's other operations (backend_ops; rsettings.c lists them). */
void rd_destroy(struct backend *be);
void rd_acquire(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg);
void rd_release(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg);
void rd_renew(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg);
void rd_transfer(struct backend *be, const struct be_lock *from, const struct be_lock *to,
    be_cb *cb, void *arg);
void rd_info(struct backend *be, struct evbuffer *out);
const char *rd_state(struct backend *be);
size_t rd_pending(struct backend *be);
void rd_drain(struct backend *be);
void rd_reload(struct backend *be);
const char *rd_problem(struct backend *be, char *buf, size_t len);

/* The settings of a node for what (the log's name of it): the backend's
 * server, user, TLS, timeouts, scripts and channels, the replicas' WAIT
 * (the topology changes what differs). */
struct rnode_conf rd_node_conf(const struct rd *r, const char *what);
/* Make nd's client of nc (not started), told through the core's hooks. */
void rd_node_init(struct rd *r, struct rd_node *nd, const struct rnode_conf *nc);
/* nd is at host:port from now on (a sentinel named a new master): its
 * messages name it, and its connections go there. */
void rd_node_move(struct rd_node *nd, const char *host, int port);
/* Whether its nodes are refused for their settings (rnode_refused), more
 * than a quorum can do without: an error that waiting cannot cure. */
bool rd_refused(const struct rd *r);
/* Add nd to r->nodes. */
void rd_node_add(struct rd *r, struct rd_node *nd);

/* A new operation: a call of script with one key per letter of keykinds
 * ('l' lock, 'f' fence, 'w' mark, 'o' observed mark, 'e' election record)
 * named after l's key, then ARGV: member (kept as op->member), then args
 * (NULL-terminated; rscript_key for the key, rscript_value for l's value).
 * The caller owns it until it is sent (rd_send) or kept. */
struct rd_op *rd_op_new(struct rd *r, enum rscript script, const struct be_lock *l,
    const char *member, const char *keykinds, const char *const *args, be_cb *cb, void *arg);
/* Send op: the topology's calls, or (too few nodes up) a failure from the
 * loop, a release kept for later. */
void rd_send(struct rd *r, struct rd_op *op);
/* The answer rep (NULL: none will come, why says why) to a call of an
 * operation's, arg its struct rd_call. */
struct redisReply;
void rd_on_reply(void *arg, const struct redisReply *rep, const char *why);

/* ---- leaders and observers (rleader.c) ---------------------------------- */

/* backend_ops.proclaim, leader and watch (redlock: a quorum read of the
 * nodes' looks). */
void rd_proclaim(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg);
void rd_leader(struct backend *be, const char *key, size_t keylen, be_leader_cb *cb,
    void *arg);
void rd_watch(struct backend *be, const char *key, size_t keylen, int on);
/* A look at key for cb (NULL: its watch's own), not sent yet. */
struct rd_op *rd_look_new(struct rd *r, const char *key, size_t keylen, be_leader_cb *cb,
    void *arg);
/* A look's call c answered rep (NULL: none will come, why says why): its
 * caller is told, and a watched key's next look is armed (several nodes:
 * once every node answered, or the node timeout passed). */
void rd_looked(struct rd *r, struct rd_call *c, const struct redisReply *rep,
    const char *why);
/* Several nodes: look op's node timeout passed; it is decided by the nodes
 * that answered. */
void rd_look_late(struct rd *r, struct rd_op *op);
/* Call c of a read (a look, a holders read) answered rep (NULL: none will
 * come, why says why), well formed when ok: counted as the node's answer,
 * a failure's reason kept in the op. Whether every call has answered now. */
bool rd_read_answered(struct rd *r, struct rd_call *c, const struct redisReply *rep,
    const char *why, bool ok);

/* ---- the keys held (rheld.c) --------------------------------------------- */

/* backend_ops.list: a SCAN page of one server's lock keys. */
void rd_list(struct backend *be, const char *cursor, size_t count, be_list_cb *cb,
    void *arg);

/* ---- who holds a key (rwho.c) ------------------------------------------- */

/* backend_ops.force (be_redis.c): every lease of key broken. */
void rd_force(struct backend *be, const char *key, size_t keylen, const char *by,
    const char *self, be_cb *cb, void *arg);

/* backend_ops.holders (redlock: the leases a quorum of nodes holds). */
void rd_holders(struct backend *be, const char *key, size_t keylen, be_holders_cb *cb,
    void *arg);
/* A holders read's call c answered rep (NULL: none will come, why says
 * why); its caller is told once every node answered. */
void rd_who_reply(struct rd *r, struct rd_call *c, const struct redisReply *rep,
    const char *why);
/* Several nodes: the node timeout of holders read op passed. */
void rd_who_late(struct rd *r, struct rd_op *op);

/* A release message for key: its observers read it again. */
void rd_watch_message(struct rd *r, const char *key, size_t keylen);
/* Messages may have been missed, or a server is new: every observed key is
 * read again (and marked observed there). */
void rd_watch_all(struct rd *r);
/* Free the watches (rd_destroy). */
void rd_watch_free(struct rd *r);

/* Call i of op to node nd (the script, with the replicas' WAIT unless it is
 * a release): 0 once it is out; -1 when nd is not up (nothing changed). */
int rd_call_send(struct rd *r, struct rd_op *op, size_t i, struct rd_node *nd);
/* Keep release op's call i for its node (topo->home; rnode_keep): sent now
 * or when the connection is back, dropped once the lease has ended. */
void rd_keep_on(struct rd *r, const struct rd_op *op, size_t i);
/* Fail op from the loop (never from inside the call that made it). */
void rd_op_fail_later(struct rd_op *op, enum be_status st);
/* Tell op's caller, once (op stays until its calls are answered). */
void rd_op_tell(struct rd_op *op, enum be_status st, uint64_t fence, const char *why);
/* Tell op's caller and free op (nothing of it is in flight). */
void rd_op_complete(struct rd_op *op, enum be_status st, uint64_t fence, const char *why);
/* Arm op's node timeout (several calls): what has not answered by then
 * counts as failed. */
void rd_late_arm(struct rd *r, struct rd_op *op);
/* How much longer node nd counts in no quorum (backend.restart_keepout_ms),
 * at now: UINT64_MAX when its start is not known; 0: it counts. */
uint64_t rd_kept_out(const struct rd *r, const struct rd_node *nd, uint64_t now);
/* No new lease until ms from now (every daemon renews first). */
void rd_settle(struct rd *r, uint64_t ms);

/* topo->failed of one server: why alone. */
void rd_failed_plain(const struct rd *r, const struct rd_node *nd,
    const struct redisReply *rep, const char *why, char *buf, size_t len);
/* topo->channel of servers that are not a cluster's: prefix + "released",
 * prefix + "wanted", whatever the key. */
const char *rd_channel_plain(const struct rd *r, const char *key, size_t keylen, bool wanted);
/* topo->address of one server, which may move: the address its connection
 * used last (or its name). */
void rd_addr_connected(const struct rd *r, char *buf, size_t len);
/* topo->address of several: every node's addr, joined by ",". */
void rd_addr_list(const struct rd *r, char *buf, size_t len);
/* Why node nd fails now, named as "redis ADDRESS: ...[, for N s]", into
 * buf; NULL when nothing is known to be wrong. */
const char *rd_node_problem(const struct rd_node *nd, const char *address, char *buf,
    size_t len);
/* The failure of the last operation, while it is recent
 * (RD_FAILURE_SHOWN_MS), after prefix into buf; else NULL. */
const char *rd_recent_failure(const struct rd *r, const char *prefix, char *buf, size_t len);

/* A TLS context of these files (NULL: the system's CAs, no client
 * certificate); NULL after logging why, for what. */
struct tls_client *rd_tls_of(const char *ca, const char *cert, const char *key,
    const char *what);
/* Whether node n of backend.nodes (its settings) connects with TLS. */
bool rd_node_tls_on(const struct rd_settings *c, const struct conf_node *n);
/* Whether node n has TLS files of its own: a context of its own. */
bool rd_node_tls_own(const struct conf_node *n);
/* The TLS context of node n's files (its own, else the backend's, of the
 * backend called name); NULL after logging why. */
struct tls_client *rd_node_tls(const struct rd_settings *c, const struct conf_node *n,
    const char *name);

/* ---- a fixed list of nodes (rlist.c) ------------------------------------ */

/* topo->send: op to every node (one call each), the node timeout armed
 * for several. */
void rlist_send(struct rd *r, struct rd_op *op);
/* topo->ready: a quorum of the nodes is up (a release), and counts (the
 * rest). */
bool rlist_ready(const struct rd *r, const struct rd_op *op);
/* The nodes whose command connection is up. */
size_t rlist_up(const struct rd *r);
/* The nodes up that count in a quorum (up, and not kept out). */
size_t rlist_counting(const struct rd *r);
/* topo->state: "connected" while every node counts, "degraded" while a
 * quorum does, else "disconnected". */
const char *rlist_state(const struct rd *r);
/* topo->connected, topo->subscribed: a quorum of the nodes counts, and
 * listens. */
bool rlist_connected(const struct rd *r);
bool rlist_subscribed(const struct rd *r);

/* ---- delegation and the lease cache (rdeleg.c) -------------------------- */

/* The delegation of key, or NULL. */
struct rd_deleg *deleg_find(const struct rd *r, const char *key, size_t keylen);
/* The delegation of l's key when l's token holds it, else NULL. */
struct rd_deleg *deleg_of(const struct rd *r, const struct be_lock *l);
/* Forget d; a local handoff of it not answered yet is answered BE_NOTOWNER. */
void deleg_drop(struct rd *r, struct rd_deleg *d);
/* Forget key's delegation, if it has one. */
void deleg_forget(struct rd *r, const char *key, size_t keylen);
/* op (an acquire or transfer) granted its lease with fence: the fences it
 * reserved past it are delegated. */
void deleg_granted(struct rd *r, const struct rd_op *op, uint64_t fence);
/* A renewal of op's key was decided (st): see rdeleg.c. */
void deleg_renewed(struct rd *r, const struct rd_op *op, enum be_status st);
/* Whether d's lease can go to to without Redis at now. */
bool deleg_can_hand(const struct rd_deleg *d, const struct be_lock *to, uint64_t now);
/* Grant d's lease to l locally; cb told from the loop. */
void deleg_hand(struct rd *r, struct rd_deleg *d, const struct be_lock *l, uint64_t now,
    be_cb *cb, void *arg);
/* Answer cb from the loop: BE_OK (no grant). */
void deleg_answer(struct rd *r, be_cb *cb, void *arg);
/* The fences an acquire or transfer for l reserves. */
unsigned deleg_fences(const struct rd *r, const struct be_lock *l);
/* The member of l's lease in Redis (its own, or its delegation's). */
void deleg_member(const struct rd *r, const struct be_lock *l, char out[RSCRIPT_MEMBER_MAX]);
/* Release d's lease in Redis (kept for later while disconnected); forget d. */
void deleg_release(struct rd *r, struct rd_deleg *d);
/* Keep d's lease in the cache as its holder releases it: whether it was. */
bool deleg_cache_keep(struct rd *r, struct rd_deleg *d);
/* Another daemon asked for key: a cached lease of it goes. */
void deleg_wanted(struct rd *r, const char *key, size_t keylen);
/* Release every cached lease now (rd_drain, a lost connection). */
void deleg_release_cached(struct rd *r);
/* The connection to a server dropped: trust no fence reserved before. */
void deleg_distrust(struct rd *r);
/* Release the cached leases whose time is up (r->ev_cache). */
void deleg_on_cache(int fd, short what, void *arg);
/* Answer the local handoffs not answered yet, and free every delegation
 * (rd_destroy). */
void deleg_free_all(struct rd *r);
/* The number of cached leases. */
size_t deleg_cached(const struct rd *r);

#endif
