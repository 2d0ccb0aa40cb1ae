/*
 * fake_grpc — a fake gRPC server for the tests (an etcd, for the etcd
 * suites: its paths are below): HTTP/2 (nghttp2's server session,
 * cleartext) on 127.0.0.1, port 0, on the test's own event loop.
 *
 * Every request (a stream) is kept in the order it came, with its path, its
 * metadata and the bytes of its DATA, until the fake is freed. A request to
 * a path with a route is answered by the route once its END_STREAM has come;
 * any other request stays pending until the test answers it: one message
 * and status OK, an error status (with trailers, or trailers-only), raw
 * DATA bytes (to cut messages or send garbage), the end of the stream, a
 * reset. Every answer is written at once; the test runs the loop for it to
 * reach the client.
 *
 * Test code only (linked into every suite): a failed expectation fails the
 * running test (Check).
 */
#ifndef DLOCKD_TESTS_FAKE_GRPC_H
#define DLOCKD_TESTS_FAKE_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

struct event_base;
struct fake_grpc;
struct fake_grpc_conn;

/* gRPC method paths etcd serves. */
#define FG_RANGE "/etcdserverpb.KV/Range"
#define FG_TXN "/etcdserverpb.KV/Txn"
#define FG_DELETE_RANGE "/etcdserverpb.KV/DeleteRange"
#define FG_LEASE_GRANT "/etcdserverpb.Lease/LeaseGrant"
#define FG_LEASE_REVOKE "/etcdserverpb.Lease/LeaseRevoke"
#define FG_LEASE_KEEPALIVE "/etcdserverpb.Lease/LeaseKeepAlive"
#define FG_STATUS "/etcdserverpb.Maintenance/Status"
#define FG_AUTH "/etcdserverpb.Auth/Authenticate"
#define FG_WATCH "/etcdserverpb.Watch/Watch"

/* A request as the fake received it. Owned by the fake, valid until
 * fake_grpc_free. */
struct fake_grpc_req {
	struct fake_grpc *f;		/* its fake */
	struct fake_grpc_conn *conn;	/* its connection, NULL once closed */
	int32_t sid;			/* its stream */
	int conn_no;			/* which connection of the fake (1, 2, ...) */
	char path[128];			/* :path */
	char method[16];		/* :method */
	char scheme[16];		/* :scheme */
	char authority[128];		/* :authority */
	char ctype[64];			/* content-type */
	char te[32];			/* te */
	char token[256];		/* the "token" metadata, "" if none */
	bool has_token;			/* whether it came */
	uint8_t *body;			/* the DATA received (gRPC-framed messages) */
	size_t len;
	bool ended;			/* END_STREAM came from the client */
	bool replied;			/* the response headers were sent */
	bool done;			/* the fake ended its side (trailers or reset) */
	bool closed;			/* the stream is closed */
	uint32_t close_code;		/* the HTTP/2 error code it closed with */
	struct evbuffer *out;		/* DATA not yet given to nghttp2 */
	bool trailers;			/* send the trailers once out is empty */
	int status;			/* their grpc-status */
	char message[256];		/* their grpc-message, "" for none */
};

/* A fake listening on a free port of 127.0.0.1, on base's loop. */
struct fake_grpc *fake_grpc_new(struct event_base *base);
/* Close everything and free f (NULL is fine). */
void fake_grpc_free(struct fake_grpc *f);
/* "127.0.0.1:port" */
const char *fake_grpc_endpoint(const struct fake_grpc *f);
/* Close every connection now (without GOAWAY), keep listening. */
void fake_grpc_drop(struct fake_grpc *f);
/* Say GOAWAY with the HTTP/2 error code on every connection: the streams
 * open go on (NO_ERROR), no new one is taken. */
void fake_grpc_goaway(struct fake_grpc *f, uint32_t error_code);
/* Stop (deaf true) or go on reading what clients send: a fake that
 * stops answering, PINGs included. */
void fake_grpc_deaf(struct fake_grpc *f, bool deaf);
/* Connections accepted so far; open now. */
int fake_grpc_accepted(const struct fake_grpc *f);
int fake_grpc_open(const struct fake_grpc *f);

/* Answer requests to path with msg (packed now) and status OK from now on. */
void fake_grpc_route(struct fake_grpc *f, const char *path, const ProtobufCMessage *msg);
/* Answer them with status code and message (trailers-only when
 * trailers_only, else HEADERS then trailers). */
void fake_grpc_route_error(struct fake_grpc *f, const char *path, int code,
    const char *message, bool trailers_only);
/* Answer requests to path with fn(arg, req) from now on: fn answers req
 * (or leaves it pending). */
typedef void fake_grpc_fn(void *arg, struct fake_grpc_req *req);
void fake_grpc_route_fn(struct fake_grpc *f, const char *path, fake_grpc_fn *fn, void *arg);
/* Answer requests to path no more: keep them pending. */
void fake_grpc_unroute(struct fake_grpc *f, const char *path);

/* Requests received (to path; NULL: any). */
int fake_grpc_count(const struct fake_grpc *f, const char *path);
/* The i-th request received (from 0), NULL if none. */
struct fake_grpc_req *fake_grpc_nth(const struct fake_grpc *f, int i);
/* The last request to path received; NULL if none. */
struct fake_grpc_req *fake_grpc_last(const struct fake_grpc *f, const char *path);
/* The first request to path not answered yet (nothing sent), on an open
 * connection; NULL if none. */
struct fake_grpc_req *fake_grpc_pending(const struct fake_grpc *f, const char *path);
/* Requests to path waiting for an answer. */
int fake_grpc_npending(const struct fake_grpc *f, const char *path);
/* The first message of req's body, unpacked as desc (the caller frees it
 * with protobuf_c_message_free_unpacked), NULL while it has not all come. */
ProtobufCMessage *fake_grpc_req_msg(const struct fake_grpc_req *req,
    const ProtobufCMessageDescriptor *desc);

/* Answer req: msg and status OK, the stream ended. */
void fake_grpc_reply(struct fake_grpc_req *req, const ProtobufCMessage *msg);
/* Answer req with status code and message (trailers-only, or after empty
 * response headers). */
void fake_grpc_fail(struct fake_grpc_req *req, int code, const char *message,
    bool trailers_only);
/* Send msg on req's stream (response headers first if need be), framed,
 * in one DATA frame; the stream stays open. */
void fake_grpc_send_msg(struct fake_grpc_req *req, const ProtobufCMessage *msg);
/* Send len raw bytes at p as one DATA frame; the stream stays open. */
void fake_grpc_send(struct fake_grpc_req *req, const void *p, size_t len);
/* End req's stream with status code and message as trailers. */
void fake_grpc_end(struct fake_grpc_req *req, int code, const char *message);
/* Reset req's stream with the HTTP/2 error code. */
void fake_grpc_reset(struct fake_grpc_req *req, uint32_t error_code);
/* Whether everything the fake wrote has left for the kernel. */
bool fake_grpc_flushed(const struct fake_grpc *f);

#endif
