/*
 * be_etcd_lease — the etcd backend's own lease (be_etcd_lease.c), for the
 * layers above it.
 */
#ifndef DLOCKD_BE_ETCD_LEASE_H
#define DLOCKD_BE_ETCD_LEASE_H

#include <stdint.h>

#include <event2/util.h>

struct et;

/* The lease cannot be relied on any more (why): the holdings on it are
 * gone, the waiting keys forgotten, and a new lease is granted. */
void et_lease_lost(struct et *r, const char *why);
/* The next keepalive (or grant) in ms. */
void et_lease_schedule(struct et *r, uint64_t ms);
/* r->ev_lease: time for a keepalive, or for a grant. */
void et_on_lease_timer(evutil_socket_t fd, short what, void *arg);
/* Revoke lease (not 0), fire and forget. */
void et_revoke(struct et *r, int64_t lease);

#endif
