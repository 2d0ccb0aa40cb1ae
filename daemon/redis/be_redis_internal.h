/*
 * be_redis_internal — be_redis's reading of Redis's replies, reachable
 * without a connection, for the fuzz harness (tests/fuzz/redis.c). Not used
 * by the daemon: built only into test and fuzz objects (DLOCKD_TEST_HOOKS).
 *
 * Replies are hiredis's redisReply (passed as void *, as hiredis passes
 * them to callbacks); the caller keeps and frees them.
 */
#ifndef DLOCKD_BE_REDIS_INTERNAL_H
#define DLOCKD_BE_REDIS_INTERNAL_H

#include "backend.h"

/* Set up be (be->base and be->settings, the redis backend's, given) as the
 * redis backend does, but resolve nothing and connect nowhere: both links
 * stay down. be->ops->destroy frees it. 0. */
int be_redis_offline(struct backend *be);

/* Give be_redis reply as Redis's answer to a call of script (0 acquire,
 * 1 release, 2 renew, 3 transfer; l: the lock, a transfer's to) that
 * reserved fences fences and was just sent: what it does with the reply of
 * a call in flight (cb told, delegations and retries updated). NULL: the
 * connection went away. */
void be_redis_answer(struct backend *be, int script, const struct be_lock *l,
    unsigned fences, be_cb *cb, void *arg, void *reply);
/* Give it reply as Redis's answer to a look at key (LEADER, a watch), for
 * cb: what it tells (NULL: the connection went away). */
void be_redis_look_answer(struct backend *be, const char *key, size_t keylen,
    be_leader_cb *cb, void *arg, void *reply);
/* Give it reply as a reply on the subscriber link (sub: subscribe,
 * message), or (sub 0) as the answer to CONFIG GET maxmemory-policy. */
void be_redis_unsolicited(struct backend *be, int sub, void *reply);

#endif
