/*
 * be_etcd_leader — leaders for observers on the etcd backend
 * (be_etcd_leader.c), for be_etcd.c.
 */
#ifndef DLOCKD_BE_ETCD_LEADER_H
#define DLOCKD_BE_ETCD_LEADER_H

#include <stddef.h>

#include "backend.h"

struct et;

/* The lock table's and observers' operations (struct backend_ops). */
void et_proclaim(struct backend *be, const struct be_lock *l, be_cb *cb, void *arg);
/* backend_ops.list: a range of the prefix with a limit, each lock key
 * with a holder or waiter in it once (it has a holder then). */
void et_list(struct backend *be, const char *cursor, size_t count, be_list_cb *cb, void *arg);
/* backend_ops.holders: the leases that hold key now, by the recipe's
 * ranking, each with who took it (the value's "~" part). */
void et_holders(struct backend *be, const char *key, size_t keylen, be_holders_cb *cb,
    void *arg);
void et_leader(struct backend *be, const char *key, size_t keylen, be_leader_cb *cb,
    void *arg);
/* The watch brought changes of watched key k (their puts in k->puts): read
 * k as the watch has it, and tell its observers every leader the puts
 * made, in order, then the state (up.changed). One read at a time per key,
 * the next sent when it is answered. */
struct et_key;
void et_leader_watched(struct et *r, struct et_key *k);
/* Shutting down (the client is gone): answer the reads left with BE_ERROR. */
void et_leader_destroy(struct et *r);

#endif
