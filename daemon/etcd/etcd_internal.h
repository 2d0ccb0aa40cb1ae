/*
 * etcd_internal — the etcd client's reading of gRPC messages, reachable
 * without a connection, for its unit tests and fuzz harness
 * (tests/fuzz/etcd.c). etcd.c's streams use them.
 */
#ifndef DLOCKD_ETCD_INTERNAL_H
#define DLOCKD_ETCD_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

struct evbuffer;

/*
 * The next gRPC message of a stream's DATA buffered in buf (a 5-byte
 * prefix: compressed flag 0, length big-endian, then the message),
 * unpacked as desc says: 1 with *msg (the caller frees it with
 * protobuf_c_message_free_unpacked) and its bytes drained from buf, 0 when
 * it has not all come yet, -1 (why set) when the stream cannot go on: a
 * compressed message, one longer than max bytes, or one that does not
 * unpack.
 */
int etcd_grpc_next(struct evbuffer *buf, const ProtobufCMessageDescriptor *desc, size_t max,
    ProtobufCMessage **msg, char *why, size_t whysize);

/* The gRPC status of a grpc-status trailer's value (-1: not a number 0..16),
 * and grpc-message's percent-encoding undone into out (NUL-terminated,
 * cut to outsize). */
int etcd_grpc_status(const char *value, size_t len);
void etcd_grpc_message(const char *value, size_t len, char *out, size_t outsize);

#endif
