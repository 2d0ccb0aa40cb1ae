/*
 * be_etcd_internal — the etcd backend's reading of a range response,
 * reachable without a connection, for its fuzz harness (tests/fuzz/etcd.c).
 * Not used by the daemon: built only into test and fuzz objects
 * (DLOCKD_TEST_HOOKS).
 */
#ifndef DLOCKD_BE_ETCD_INTERNAL_H
#define DLOCKD_BE_ETCD_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "etcd.pb-c.h"

/*
 * Where the etcd key ekey (NUL-terminated) stands in kvs (n of them: a
 * range's keys by create revision) for a lease of mode and limit: whether
 * it holds, and if not the create revision of the key whose delete it waits
 * for (-1: any before it). *created gets ekey's create revision. 0, or -1
 * if ekey is not in kvs.
 */
int be_etcd_decide(Etcd__KeyValue *const *kvs, size_t n, const char *ekey, enum lock_mode mode,
    unsigned limit, int64_t *created, bool *holds, int64_t *wait_rev);

#endif
