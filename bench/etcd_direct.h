/*
 * etcd_direct — the requests of dlock-bench's direct-etcd mode: dlockd's etcd
 * recipe sent straight to etcd over gRPC, no daemon between.
 *
 * The calls go through the daemon's own etcd client (daemon/etcd/etcd.h): one
 * client, so one HTTP/2 connection, shared by every bench client, each
 * call a stream of its own on it, as a daemon sends the calls of all its
 * clients. The recipe is etcd/be_etcd_recipe.c's: an acquire is one Txn
 * {Put(<prefix><escaped lock key>/<token>, "x0", lease),
 *  Range(<prefix><escaped lock key>/ .. <prefix><escaped lock key>0,
 *        ascending by create revision)}, and the key holds when it comes
 * first in the range; a release is one Txn {DeleteRange(that key)}.
 *
 * A call's outcome comes to the caller's struct ed_call (embedded in its
 * own state, so that no call allocates), from the event loop.
 */
#ifndef DLOCK_BENCH_ETCD_DIRECT_H
#define DLOCK_BENCH_ETCD_DIRECT_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct ed;			/* the shared etcd client */

/* The prefix of every etcd key: dlockd's default backend.key_prefix, so
 * that keys and requests are as long as the daemon's. */
#define ED_KEY_PREFIX "dlock/"
/* Bytes of the longest etcd key ed_key writes, NUL included, for a lock
 * key of n bytes and a token of t. */
#define ED_KEY_MAX(n, t) (sizeof(ED_KEY_PREFIX) + 3 * (n) + 1 + (t))
/* The room a caller gives ed_key: a key that needs more is refused. */
#define ED_KEY_SIZE 1024

/* How a call ended. */
enum ed_outcome {
	ED_OK,		/* grant: value is the lease ID; keepalive: value is the
			 * TTL left (s); revoke: done; acquire: the key holds
			 * (value: the Txn's revision); release: the key was
			 * deleted */
	ED_BEHIND,	/* acquire: the key was put but another is before it in
			 * the range (value: how many) */
	ED_GONE,	/* release: there was no such key (its lease ended);
			 * keepalive: etcd knows no such lease */
	ED_FAILED	/* etcd refused the call, answered something else, or
			 * did not answer: why says which */
};

/* One call's outcome goes to fn(arg, ...); why is valid during fn only. */
struct ed_call {
	void (*fn)(void *arg, enum ed_outcome out, int64_t value, const char *why);
	void *arg;
	/* set by the functions below */
	int method;		/* the call's etcd_method */
	const char *key;	/* acquire: the key put (the caller's, kept) */
	size_t keylen;
};

/* A client of etcd at endpoint ("host:port", plain TCP), calls failing
 * after timeout_ms without an answer; NULL after saying why on stderr (a
 * name that does not resolve). No connection is made before the first call. */
struct ed *ed_create(struct event_base *base, const char *endpoint, uint64_t timeout_ms);
/* Free it: calls in flight are dropped without their outcome. */
void ed_destroy(struct ed *d);

/* Write lock key key (len bytes) with token into out (ED_KEY_SIZE bytes):
 * the etcd key "<ED_KEY_PREFIX><escaped key>/<token>" and its NUL. Returns
 * its length, and in *pathlen the length of the range part, through the
 * '/'; 0 if it does not fit. */
size_t ed_key(char out[ED_KEY_SIZE], const char *key, size_t len, const char *token,
    size_t *pathlen);

/* A lease of ttl_s seconds (LeaseGrant). */
void ed_grant(struct ed *d, int64_t ttl_s, struct ed_call *call);
/* Keep lease alive (one LeaseKeepAlive). */
void ed_keepalive(struct ed *d, int64_t lease, struct ed_call *call);
/* Revoke lease: its keys go with it. */
void ed_revoke(struct ed *d, int64_t lease, struct ed_call *call);
/* Acquire: put ekey (len bytes, its range part pathlen of them, as ed_key
 * made it; kept by the caller until the outcome) on lease and read the
 * range. A bench client has one acquire or release out at a time, so its
 * calls reach etcd in order without the lanes the daemon orders the calls
 * about one lock key with. */
void ed_acquire(struct ed *d, const char *ekey, size_t len, size_t pathlen, int64_t lease,
    struct ed_call *call);
/* Release: delete ekey. */
void ed_release(struct ed *d, const char *ekey, size_t len, struct ed_call *call);

#endif
