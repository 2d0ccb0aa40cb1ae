/*
 * etcd_internal — the etcd client's reading of the JSON gateway's
 * responses, reachable without a connection, for its fuzz harness
 * (tests/fuzz/etcd.c). etcd.c's calls and watch stream use them.
 */
#ifndef DLOCKD_ETCD_INTERNAL_H
#define DLOCKD_ETCD_INTERNAL_H

#include <stddef.h>

#include <jansson.h>

#include "etcd.h"

struct evbuffer;

/*
 * The outcome of a unary call answered with HTTP status code and the len
 * bytes at p (p may be NULL when len is 0): *r (r->why in why), and in
 * *body the JSON the outcome borrows from (NULL if none), which the caller
 * frees with json_decref once done with *r.
 */
void etcd_result_of(int code, const char *p, size_t len, json_t **body,
    struct etcd_result *r, char *why, size_t whysize);

/*
 * The next message of a watch stream buffered in buf, as the JSON gateway
 * sends them (one JSON text a line; blank lines skipped): 1 with *msg (the
 * caller frees it with json_decref) and its line drained from buf, 0 when
 * its line has not all come yet, -1 (why set) when the stream cannot go on:
 * a line too long, or not JSON.
 */
int etcd_stream_next(struct evbuffer *buf, json_t **msg, char *why, size_t whysize);

#endif
