/*
 * be_etcd_recipe — the etcd backend's lock recipe (be_etcd_recipe.c), for
 * be_etcd.c; and its decision on a range, a test entry point.
 */
#ifndef DLOCKD_BE_ETCD_RECIPE_H
#define DLOCKD_BE_ETCD_RECIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/util.h>

#include "backend.h"
#include "etcd.pb-c.h"

struct et;
struct et_key;

/* The lock table's operations (struct backend_ops). */
void et_acquire(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg);
void et_release(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg);
void et_renew(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg);
void et_transfer(struct backend *be, const struct be_lock *from, const struct be_lock *to,
    be_cb *cb, void *arg);
void et_withdraw(struct backend *be, const char *key, size_t keylen);
/* Send or fail the acquires waiting for the client, the lease and the
 * watch (r->recipe.flush). */
void et_flush_waiting(struct et *r);
/* A delete k's waiting entries waited for came: the lock table's queue asks
 * again, taking over the entries it still wants (r->recipe.wake). */
void et_wake_now(struct et *r, struct et_key *k);
/* r->ev_deferred: send the deletes kept for later again. */
void et_on_deferred(evutil_socket_t fd, short what, void *arg);

/*
 * For the fuzz harness (tests/fuzz/etcd.c); built only into test and fuzz
 * objects (DLOCKD_TEST_HOOKS). Where the etcd key ekey (NUL-terminated)
 * stands in kvs (n of them: a range's keys by create revision) for a lease
 * of mode and limit: whether it holds, and if not the create revision of
 * the key whose delete it waits for (-1: any before it). *created gets
 * ekey's create revision. 0, or -1 if ekey is not in kvs.
 */
int be_etcd_decide(Etcd__KeyValue *const *kvs, size_t n, const char *ekey, enum lock_mode mode,
    unsigned limit, int64_t *created, bool *holds, int64_t *wait_rev);

#endif
