/*
 * be_etcd_internal — the etcd backend's reading of a range response,
 * reachable without a connection, for its fuzz harness (tests/fuzz/etcd.c).
 * Not used by the daemon: built only into test and fuzz objects
 * (DLOCKD_TEST_HOOKS).
 */
#ifndef DLOCKD_BE_ETCD_INTERNAL_H
#define DLOCKD_BE_ETCD_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "backend.h"

/*
 * Where the etcd key ekey stands in kvs (a range response's "kvs": the
 * keys of a lock by create revision, base64 as etcd writes them) for a
 * lease of mode and limit: whether it holds, and if not the create revision
 * of the key whose delete it waits for (-1: any before it). *created gets
 * ekey's create revision. 0, or -1 if ekey is not in kvs.
 */
int be_etcd_decide(const json_t *kvs, const char *ekey, enum lock_mode mode, unsigned limit,
    int64_t *created, bool *holds, int64_t *wait_rev);

#endif
