/*
 * be_etcd_core — the etcd backend's state, which its files share: the
 * settings, struct et, and the records in it (lock keys, their etcd keys,
 * operations) with the functions on them (be_etcd_core.c).
 *
 * The backend's files stand in layers, each using only those below it:
 *
 *   be_etcd.c          the entry points: settings, URL, set-up and tear-down,
 *                      INFO, the client's state changes
 *   be_etcd_leader.c   leaders for observers: PROCLAIM, LEADER's read of a
 *                      range, and the keys watched for them
 *   be_etcd_recipe.c   the lock recipe: acquire, renew, release, transfer,
 *                      withdraw as etcd Txns, and the wakeups
 *   be_etcd_watch.c    the prefix watch: deletes that wake or expire keys,
 *                      and changes of the keys observed
 *   be_etcd_lease.c    the daemon's lease: grant, keepalive, loss
 *   be_etcd_core.c     the records, and operations answered from the loop
 *
 * What a lower layer has to tell the recipe (the lease or the watch became
 * ready, a key's waiting entries must look again) goes through r->recipe,
 * set by be_etcd.c.
 */
#ifndef DLOCKD_BE_ETCD_CORE_H
#define DLOCKD_BE_ETCD_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "backend.h"
#include "backoff.h"
#include "etcd.h"
#include "etcd.pb-c.h"
#include "hashtab.h"
#include "later.h"

#define ET_SEQ_BITS 16		/* a fence is the grant's revision << this, plus
				 * the local handoffs since (fewer than 2^this) */

struct event;
struct et;
struct et_key;

/* What the lower layers tell the lock recipe (be_etcd_recipe.c). */
struct et_recipe_hooks {
	/* the client, the lease or the watch changed: send or fail the
	 * acquires waiting for them (et_flush_waiting) */
	void (*flush)(struct et *r);
	/* a delete k's waiting entries waited for came (from the loop): the
	 * lock table's queue asks again (et_wake_now) */
	void (*wake)(struct et *r, struct et_key *k);
};

/* The settings of the backend (backend.* keys; see et_settings_table). */
struct et_settings {
	char **endpoints;		/* "host:port", tried in order */
	size_t nendpoints;		/* how many */
	char *key_prefix;		/* prefix of every etcd key dlockd uses */
	long long lease_ttl_ms;		/* the daemon's lease */
	long long request_timeout_ms;	/* a call without an answer by then fails */
	char *username;			/* NULL: no authentication */
	char *password;			/* its password */
	char *password_file;		/* where password was read from, or NULL */
	long long tls;			/* 1: connect with TLS */
	char *tls_ca_file;		/* CAs that sign etcd's certificates; NULL: the
					 * system's */
	char *tls_cert_file;		/* client certificate, or NULL */
	char *tls_key_file;		/* its key, or NULL */
	char *tls_server_name;		/* the name etcd's certificates must carry,
					 * NULL: each endpoint's host */
};

enum et_state {
	E_NEW,		/* its first put is on its way */
	E_WAITING,	/* in etcd, not holding: waits for a delete */
	E_HELD		/* holds */
};

/* One etcd key of this daemon. */
struct et_entry {
	struct et_key *k;		/* its lock key */
	char token[TOKEN_LEN + 1];	/* the lock table's lease it stands for */
	char *ekey;			/* the etcd key, NUL-terminated */
	enum et_state state;
	enum lock_mode mode;		/* as last put */
	unsigned limit;
	int64_t create_rev;		/* its create revision, 0 until known */
	int64_t lease;			/* the lease it was last put with */
	bool own;			/* lease is its own (DETACH), not the daemon's */
	uint64_t own_until;		/* own: the lease is valid until then */
	uint64_t own_ttl_ms;		/* own: its TTL as granted */
	char *wait_key;			/* E_WAITING: the etcd key whose delete wakes it,
					 * NULL: any key before it */
	size_t wait_keylen;
	int64_t wait_rev;		/* E_WAITING: woken by the delete of the key with
					 * this create revision; -1: of any before it */
	bool busy;			/* an acquire of it is in flight */
	bool claimable;			/* in a wakeup: not asked for again yet */
	bool gone;			/* E_HELD: its key or lease is gone */
	bool leaving;			/* E_HELD: a handoff deletes its key */
	int64_t grant_rev;		/* E_HELD: the revision it was found holding at */
	unsigned seq;			/* E_HELD: local handoffs of its key since */
	char *value;			/* a CAMPAIGN's value as last put (owned), NULL
					 * for a plain lock */
	size_t valuelen;
	char *who;			/* E_HELD: who took it (be_lock.who, owned),
					 * NULL: not told */
	char *forced_by;		/* E_HELD: its key was broken by UNLOCK FORCE
					 * through another daemon, by whom (owned);
					 * NULL: not */
	TAILQ_ENTRY(et_entry) entry;	/* on k->entries */
};
TAILQ_HEAD(et_entry_list, et_entry);

/* A lock key with etcd keys of this daemon. */
struct et_key {
	struct hashtab_node node;	/* in r->keys, keyed by path */
	char *name;			/* the lock key (binary-safe) */
	size_t len;
	char *path;			/* "<prefix><escaped key>/" */
	size_t pathlen;
	int64_t last_delete;		/* revision of the last delete seen in its range */
	unsigned watched;		/* ops->watch on: 1 (it holds a reference then) */
	int64_t *puts;			/* watched: revisions of the puts in its range
					 * the watch brought, not read yet (owned) */
	size_t nputs;
	bool reading;			/* watched: a read of the watch's is out */
	bool read_again;		/* and changes came since it was sent */
	bool stale;			/* watched: a read of it for its observers
					 * failed: read again when the watch is */
	struct et_entry_list entries;	/* its etcd keys */
	unsigned refs;			/* operations in flight that use it */
};

enum et_kind {
	EK_ACQUIRE, EK_RELEASE, EK_RENEW, EK_TRANSFER, EK_DELETE, EK_WAKE, EK_PROCLAIM,
	EK_FORCE
};

/* An operation of the lock table, or one of the backend's own. */
struct et_op {
	struct et *r;			/* the backend */
	enum et_kind kind;		/* what it is */
	be_cb *cb;			/* whom to tell, NULL for none */
	void *arg;
	struct et_key *k;		/* the lock key (a reference) */
	char token[TOKEN_LEN + 1];	/* the lease it is about (transfer: to's) */
	char from[TOKEN_LEN + 1];	/* transfer: from's */
	enum lock_mode mode;		/* acquire, transfer: the kind asked for */
	unsigned limit;
	bool detach;			/* acquire, renew, transfer: on a lease of its own */
	bool try_once;			/* acquire: a try, which leaves nothing behind */
	uint64_t ttl_ms;		/* the lease asked for */
	uint64_t t_call;		/* when the lock table called */
	uint64_t sent;			/* when the current request went out */
	int64_t lease;			/* an own lease granted for it, 0 none */
	int64_t put_lease;		/* the lease its Txn put the key on */
	uint64_t lease_until;		/* its validity */
	char *ekey;			/* EK_DELETE, EK_RELEASE: the etcd key */
	char *value;			/* acquire, transfer, proclaim: the CAMPAIGN
					 * value to put (owned), NULL for none */
	size_t valuelen;
	char *who;			/* acquire, transfer: who takes it (be_lock.who,
					 * owned), NULL: not told; force: this
					 * daemon's instance id */
	unsigned tries;			/* force: reads of the range so far */
	int64_t revoke;			/* EK_DELETE: a lease to revoke after, 0 none */
	struct be_reply rep;		/* answered: the answer */
	char why[256];			/* its sentence */
	bool in_flight;			/* a request of it is out */
	bool granting;			/* own_lease: a grant, not a keepalive, is out */
	TAILQ_ENTRY(et_op) entry;	/* on r->ops, r->waiting or r->deferred */
	struct later_item done;		/* answered: on r->done until it is given */
};
TAILQ_HEAD(et_op_list, et_op);

struct et_read;
TAILQ_HEAD(et_read_list, et_read);

struct et {
	struct backend *be;		/* our backend */
	const struct et_settings *set;	/* its settings */
	struct etcd *cli;		/* the etcd client */
	struct hashtab *keys;		/* struct et_key by path */
	int64_t lease;			/* the daemon's lease, 0 none */
	uint64_t lease_until;		/* valid until then (clock_ms) */
	uint64_t lease_ttl_ms;		/* its TTL as etcd granted it */
	bool granting;			/* a grant is in flight */
	bool keeping;			/* a keepalive is in flight */
	uint64_t grant_sent;		/* when it was sent */
	uint64_t keep_sent;		/* when it was sent */
	struct backoff backoff;		/* pauses while etcd does not answer */
	struct event *ev_lease;		/* next keepalive or grant */
	int64_t watch_rev;		/* revision the watch stream has reached */
	bool watch_ready;		/* the stream is created */
	struct backoff watch_backoff;	/* pauses before starting it again */
	struct event *ev_watch;		/* starts it again */
	bool rewake;			/* wake every waiting key once it is */
	bool watch_from_now;		/* the stream asked for no start revision:
					 * changes before it may have been missed */
	struct et_op_list ops;		/* operations with a request out */
	struct et_op_list waiting;	/* acquires waiting for the lease and watch */
	struct later *done;		/* answers to give from the loop */
	struct et_op_list deferred;	/* deletes to send again */
	struct event *ev_deferred;	/* sends r->deferred */
	uint64_t nrenewals;		/* keepalives etcd answered with a TTL */
	uint64_t nlost;			/* daemon leases lost */
	uint64_t nwakeups;		/* waiting keys woken by a delete */
	uint64_t nups;			/* times etcd came back */
	uint64_t nlocal;		/* handoffs done without a Txn */
	size_t nwatched;		/* keys watched for observers (k->watched) */
	struct et_read_list reads;	/* LEADER reads with a call out */
	struct et_recipe_hooks recipe;	/* the recipe above */
	bool destroying;		/* et_destroy runs */
};

/* The len bytes at p as a protobuf bytes field (not copied). */
static inline ProtobufCBinaryData
et_bin(const void *p, size_t len)
{
	return (ProtobufCBinaryData){ .len = len, .data = (uint8_t *)(uintptr_t)p };
}

/* An etcd key's value: its kind ("x0", "s0", "n<limit>"), then "@<fence>"
 * when the holder's fence is written (a put that is not its grant:
 * PROCLAIM, a DETACH lock moved to a longer lease), then "~<length>:<who>"
 * when the daemon tells who took it (be_lock.who), then "=<value>" for a
 * CAMPAIGN's value. A plain lock's key put at its grant by a daemon that
 * tells nobody is its kind alone. */
struct et_value {
	char kind;			/* 'x', 's' or 'n' ('?' unknown: exclusive) */
	unsigned limit;			/* 'n': the semaphore's limit */
	uint64_t fence;			/* the fence written, 0 none */
	const char *value;		/* the CAMPAIGN value (into the parsed
					 * bytes), NULL none */
	size_t valuelen;
	const char *who;		/* who took it (into the parsed bytes), NULL
					 * none */
	size_t wholen;
	const char *by;			/* broken by UNLOCK FORCE through another
					 * daemon: by whom (into the parsed bytes),
					 * NULL: not broken */
	size_t bylen;
};
/* Take apart an etcd key's value (len bytes at p):
 * kind[@fence][~<length>:who][!<length>:by][=value]. */
void et_value_parse(const void *p, size_t len, struct et_value *out);
/* The value of a holder's key v (parsed) broken by by, with fence written
 * (its own, or its grant's), in *len bytes; the caller frees it. */
char *et_value_broken(const struct et_value *v, uint64_t fence, const char *by, size_t *len);
/* Whether kvs[i] (n of them by create revision) holds, by the recipe's
 * ranking. */
bool et_kv_holds(Etcd__KeyValue *const *kvs, size_t n, size_t i);
/* The value to put for a lease of mode/limit with fence (0: none), taken by
 * who (NULL: not told) and value (NULL: none), in *len bytes; the caller
 * frees it. */
char *et_value_make(enum lock_mode mode, unsigned limit, uint64_t fence, const char *who,
    const char *value, size_t valuelen, size_t *len);

/* The etcd range of lock key name (len bytes), "<prefix><escaped>/"; the
 * caller frees it. */
char *et_key_path(const struct et *r, const char *name, size_t len, size_t *pathlen);
/* The lock key whose range is path, or NULL. */
struct et_key *et_key_find_path(struct et *r, const char *path, size_t pathlen);
/* The lock key name's record, made if need be; a reference for the caller. */
struct et_key *et_key_get(struct et *r, const char *name, size_t len);
/* Drop a reference to k; k is freed once nothing refers to it. */
void et_key_put(struct et *r, struct et_key *k);
/* The entry of k that stands for token, or NULL. */
struct et_entry *et_entry_find(struct et_key *k, const char *token);
/* A new entry of k (a reference is taken) for token, not in etcd yet. */
struct et_entry *et_entry_new(struct et_key *k, const char *token);
/* Forget e (its etcd key is deleted, or will be, by the caller). */
void et_entry_free(struct et *r, struct et_entry *e);
/* A new operation on lock key key (a reference is taken). */
struct et_op *et_op_new(struct et *r, enum et_kind kind, const char *key, size_t keylen,
    be_cb *cb, void *arg);
/* Answer op (on no list) with st from the loop; op is freed after. */
void et_op_answer(struct et_op *op, enum be_status st, uint64_t fence, uint64_t valid_ms,
    const char *why);
/* Send op's request req of method m on its key's lane; its answer goes to cb. */
void et_op_call(struct et_op *op, enum etcd_method m, const ProtobufCMessage *req,
    etcd_cb *cb);
/* An answer to op's request arrived: it is not in flight any more. */
void et_op_landed(struct et_op *op);
/* Wake the lock table's queue of k from the loop. */
void et_wake_later(struct et *r, struct et_key *k);
/* Whether the daemon's lease can be relied on at now. */
bool et_lease_ok(const struct et *r, uint64_t now);
/* Whether acquires can be sent: etcd answers, the lease is valid and the
 * watch stream is created (so that no delete after the answer is missed). */
bool et_ready(const struct et *r);

#endif
