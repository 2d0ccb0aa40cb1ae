/*
 * be_etcd_force — UNLOCK FORCE through any daemon on etcd: the holders of a
 * key that other daemons took are broken in etcd (ops->force), and a
 * daemon whose holder's key was broken hears of it from its watch (see
 * be_etcd_force.c).
 */
#ifndef DLOCKD_BE_ETCD_FORCE_H
#define DLOCKD_BE_ETCD_FORCE_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"

struct et;

/* ops->force: every holder's key of key broken but this daemon's (self). */
void et_force(struct backend *be, const char *key, size_t keylen, const char *by,
    const char *self, be_cb *cb, void *arg);
/* The watch saw the delete of etcd key ekey (len bytes): whether it is a
 * key's signal (then this daemon's holders of that key whose key is broken
 * are told, through the lock table's renewal). */
bool et_force_heard(struct et *r, const char *ekey, size_t len);

#endif
