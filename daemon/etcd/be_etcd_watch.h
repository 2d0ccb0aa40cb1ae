/*
 * be_etcd_watch — the etcd backend's prefix watch (be_etcd_watch.c), for the
 * layers above it.
 */
#ifndef DLOCKD_BE_ETCD_WATCH_H
#define DLOCKD_BE_ETCD_WATCH_H

#include <event2/util.h>

#include "backend.h"
#include "etcd.pb-c.h"

struct et;

/* (Re)start the watch of every key under the prefix, from where it stopped. */
void et_watch_start(struct et *r);
/* The client's watch hook: one message of the stream, or NULL. */
void et_on_watch(void *arg, const Etcd__WatchResponse *res);
/* ops->watch: observers want key's changes (on 1) or not any more (0). */
void et_watch_key(struct backend *be, const char *key, size_t keylen, int on);
/* r->ev_watch: time to start the watch stream again. */
void et_on_watch_timer(evutil_socket_t fd, short what, void *arg);

#endif
