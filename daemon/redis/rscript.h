/*
 * rscript — the Lua scripts that keep leases in Redis, and the building of
 * their arguments: what every backend that talks to Redis runs, apart from
 * the connections (rnode) and from each backend's policy.
 *
 * A key held exclusively is a string under the configured prefix ("l:" +
 * key) holding "x0:<token>" and expiring at the lease's end; a key held
 * shared or as a semaphore is a sorted set there whose members are
 * "<kind>:<token>" (s0 shared, n<limit> semaphore) scored by the lease's end
 * in the server's clock. Its fence counter is "f:" + key (never expires;
 * while daemons observe the key, followed by a space and the time in ms
 * until which they do), "i:" + key says who took its leases (the daemon's
 * description, be_lock.who: a string "member TAB fence TAB who" beside an
 * exclusive lease, a hash of members to "fence TAB who" beside shared
 * ones, expiring with the leases), "w:" + key marks that some daemon waits
 * for it, "o:" + key that some daemon observes it (both marks are for the next
 * release), and the hash "e:" + key (never expires) records the
 * fence and CAMPAIGN value of its last recorded grant and the version of
 * its state that observers read (the look script). Each script is atomic:
 * expired members are pruned inside them and strings expire by themselves,
 * so the server's clock alone decides when a lease ends. A lease's end only
 * ever moves later until the lease is released. Fences are max(counter + 1,
 * TIME in microseconds), so they keep increasing even after Redis lost the
 * counter (an old snapshot, a lost AOF tail, eviction).
 */
#ifndef DLOCKD_RSCRIPT_H
#define DLOCKD_RSCRIPT_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"
#include "token.h"

/* The scripts, in the order of rscript_text. */
enum rscript { RS_ACQUIRE, RS_RELEASE, RS_RENEW, RS_TRANSFER, RS_CONFIRM, RS_RAISE,
	RS_PROCLAIM, RS_LOOK, RS_WHO, RS_FORCE, RS_COUNT };

#define RSCRIPT_ARGS 18			/* numkeys, keys and arguments of one call at most */
#define RSCRIPT_HISTORY 4		/* leaders an election record remembers */
#define RSCRIPT_HISTORY_S "4"		/* the same, for the scripts' text */
#define RSCRIPT_MEMBER_MAX (TOKEN_LEN + 16) /* "<kind>:<token>" and its NUL */

/* The commands of an ACL that lets a user call the scripts (with "~prefix*
 * &prefix*" for its keys and channels): the calls, the subscriber's, and
 * every command the scripts run, which Redis checks against the user too. */
#define RSCRIPT_ACL "+ping +subscribe +eval +evalsha +script|load +get +set +del " \
	"+type +pttl +pexpire +pexpireat +time +publish +zrange +zadd +zrem " \
	"+zremrangebyscore +zcard +zscore +hset +hget +hmget +hdel +hincrby"

/* Each script's text; what each takes and answers is said above it in
 * rscript.c. */
extern const char *const rscript_text[RS_COUNT];
/* The same scripts for a Redis Cluster: they publish with SPUBLISH, on a
 * shard channel of their keys' slot. RS_COUNT of them (static storage). */
const char *const *rscript_text_cluster(void);
/* What a cluster's user needs on top of RSCRIPT_ACL: the map, redirected
 * calls, the shard channels. */
#define RSCRIPT_ACL_CLUSTER "+cluster|slots +asking +ssubscribe +spublish"

/* An argument of rscript_build that stands for the lock's key itself
 * (binary-safe): compared by address. */
extern const char rscript_key[];
/* One that stands for the value given to rscript_build (binary-safe). */
extern const char rscript_value[];

/* The arguments of one script call, after EVALSHA sha (or EVAL text):
 * numkeys, the keys, then ARGV. */
struct rscript_args {
	int argc;			/* how many */
	const char *argv[RSCRIPT_ARGS];	/* each (into the caller's buffer, the key, or static) */
	size_t argvlen[RSCRIPT_ARGS];	/* their lengths */
};

/* Kind of a lease as stored in its member: x0, s0 or n<limit>. */
int rscript_kind(const struct be_lock *l, char *out, size_t outlen);
/* The member of l's lease, "<kind>:<token>": the one place it is built. */
void rscript_member(const struct be_lock *l, char out[RSCRIPT_MEMBER_MAX]);

/* Bytes rscript_build needs in its buffer for these keys and arguments. */
size_t rscript_size(size_t prefixlen, size_t keylen, bool tagged, const char *keykinds,
    const char *const *args, size_t valuelen);
/*
 * Build into *a a call with one key per letter of keykinds, each named
 * prefix + letter + ":" + key ('l' lock, 'f' fence, 'w' mark, 'o' observed
 * mark, 'e' election record; tagged, for a
 * cluster: prefix + letter + ":{" + the key escaped + "}", rcluster.h), then the
 * arguments args (NULL-terminated; rscript_key for key itself, rscript_value
 * for value), copied
 * into buf (rscript_size bytes). key must outlive a. The copy of args[0]
 * (the member, by convention) is returned.
 */
const char *rscript_build(struct rscript_args *a, char *buf, const char *prefix,
    const char *key, size_t keylen, bool tagged, const char *keykinds,
    const char *const *args, const char *value, size_t valuelen);

#endif
