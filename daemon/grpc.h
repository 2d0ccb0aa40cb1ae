/*
 * grpc — a gRPC client transport: HTTP/2 (nghttp2) over one TCP or TLS
 * connection, on the daemon's libevent loop, no threads. It knows gRPC, not
 * the service it carries: method paths, message types (protobuf-c
 * descriptors) and metadata come from its owner.
 *
 * A connection (struct grpc_conn) goes to one address, made at once. It
 * tells its owner through struct grpc_hooks when it is set up (TLS: the
 * server agreed to h2 by ALPN) and streams may go, when the server's
 * SETTINGS came, when the server said GOAWAY (no new streams; those open go
 * on) and when the last of those ended, and once when it is given up, with a
 * short reason: refused, reset, TLS refused, a protocol error, no connect or
 * no answer to a PING within the timeout. A connection with a streaming call
 * open that hears nothing from the server for ping_ms is checked with a PING.
 *
 * A stream (struct grpc_stream, embedded in its owner's call) is one call:
 * its request is framed at once and sent as a POST to the method's path with
 * gRPC's headers and the owner's metadata. A unary call ends with its status
 * and first message (hooks.done); a streaming call keeps its request side
 * open, gives each message as it comes whole (hooks.message) and ends like a
 * unary one. A stream the owner detaches is no longer its owner's: what the
 * server still sends on it is dropped, and when cancelled the server is told
 * (RST_STREAM). The transport never resends anything.
 *
 * Hooks run from inside the transport: from the loop, and hooks.failed and
 * hooks.drained also from grpc_conn_fail, grpc_conn_flush and
 * grpc_stream_submit (a connection that fails there); never from
 * grpc_conn_create. A hook may detach streams, submit others, give the
 * connection up or free it: grpc_conn_free from a hook takes effect when the
 * transport returns to the loop, and a connection given up or freed calls no
 * hook any more. A stream that ended or was detached gets no hook after it.
 *
 * A gRPC message on the wire: a 5-byte prefix (flags 0: not compressed; the
 * length, big-endian), then the protobuf message.
 */
#ifndef DLOCKD_GRPC_H
#define DLOCKD_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <protobuf-c/protobuf-c.h>

struct event_base;
struct evbuffer;
struct grpc_conn;
struct tls_client;

#define GRPC_PREFIX 5			/* bytes before each message */
#define GRPC_MESSAGE_MAX (16u << 20)	/* bytes of one response message at most */

/* gRPC's status codes. */
enum grpc_code {
	GRPC_OK = 0,
	GRPC_CANCELLED = 1,
	GRPC_UNKNOWN = 2,
	GRPC_INVALID_ARGUMENT = 3,
	GRPC_DEADLINE_EXCEEDED = 4,
	GRPC_NOT_FOUND = 5,
	GRPC_ALREADY_EXISTS = 6,
	GRPC_PERMISSION_DENIED = 7,
	GRPC_RESOURCE_EXHAUSTED = 8,
	GRPC_FAILED_PRECONDITION = 9,
	GRPC_ABORTED = 10,
	GRPC_OUT_OF_RANGE = 11,
	GRPC_UNIMPLEMENTED = 12,
	GRPC_INTERNAL = 13,
	GRPC_UNAVAILABLE = 14,
	GRPC_DATA_LOSS = 15,
	GRPC_UNAUTHENTICATED = 16
};

/* ---- messages ----------------------------------------------------------- */

/* msg framed as gRPC sends it: the prefix, then msg packed; *len gets its
 * bytes. The caller frees it. */
uint8_t *grpc_frame(const ProtobufCMessage *msg, size_t *len);
/* The length a message's prefix p (GRPC_PREFIX bytes) says. */
uint32_t grpc_frame_len(const uint8_t *p);
/*
 * The next message buffered in buf, unpacked as desc says: 1 with *msg (the
 * caller frees it with protobuf_c_message_free_unpacked) and its bytes
 * drained from buf, 0 when it has not all come yet, -1 (why set) when the
 * stream cannot go on: a compressed message, one longer than max bytes, or
 * one that does not unpack.
 */
int grpc_next(struct evbuffer *buf, const ProtobufCMessageDescriptor *desc, size_t max,
    ProtobufCMessage **msg, char *why, size_t whysize);
/* The status a grpc-status trailer's value says (-1: not a number 0..16). */
int grpc_parse_status(const char *value, size_t len);
/* grpc-message's percent-encoding undone into out (NUL-terminated, cut to
 * outsize). */
void grpc_parse_message(const char *value, size_t len, char *out, size_t outsize);

/* ---- streams ------------------------------------------------------------ */

/* What a stream is (flags). */
#define GRPC_STREAMING 1	/* its request side stays open; each message is given */
#define GRPC_FIRST_ENDS 2	/* a unary call answered by its first message: the
				 * rest of its stream is cancelled */

/* One call. The owner embeds it and never touches its fields. */
struct grpc_stream {
	const char *path;		/* the method ("/pkg.Service/Method"), not copied */
	const ProtobufCMessageDescriptor *resp;	/* its response messages */
	unsigned flags;			/* GRPC_STREAMING, GRPC_FIRST_ENDS */
	uint8_t *frame;			/* the request, framed */
	size_t len;			/* its bytes */
	size_t off;			/* bytes given to nghttp2 */
	struct grpc_conn *conn;		/* the connection it is on, NULL: none */
	int32_t sid;			/* its HTTP/2 stream, 0 before it is sent */
	struct evbuffer *in;		/* DATA not read yet */
	ProtobufCMessage *msg;		/* a unary call's response */
	int http_status;		/* :status, 0 before it came */
	int grpc_status;		/* grpc-status, -1 before it came */
	char *grpc_message;		/* grpc-message, decoded; NULL before it came */
};

/* One metadata entry of a call. */
struct grpc_meta {
	const char *name;		/* lower case */
	const char *value;
};

/* How a stream ended. */
enum grpc_end {
	GRPC_ANSWERED,	/* the server ended it: code, and msg (unary) when 0 */
	GRPC_GARBLED,	/* a message could not be read: code, why; the stream is cancelled */
	GRPC_RESET	/* the server reset it before its status came: why
			 * (code GRPC_UNAVAILABLE) */
};

/* The end of a call; valid during hooks.done only. */
struct grpc_result {
	enum grpc_end end;
	int code;			/* the call's gRPC status (GRPC_OK: msg) */
	const ProtobufCMessage *msg;	/* a unary call answered OK: the response, owned
					 * by the stream (until grpc_stream_fini) */
	const char *why;		/* code not GRPC_OK, GRPC_RESET: a reason */
	int status;			/* grpc-status as it came, -1 if none did */
	const char *message;		/* grpc-message as it came (decoded), or NULL */
};

/* st: a call of path with request req, packed and framed now (the caller
 * keeps req), whose responses are resp messages. */
void grpc_stream_init(struct grpc_stream *st, const char *path, const ProtobufCMessage *req,
    const ProtobufCMessageDescriptor *resp, unsigned flags);
/* Forget what st sent and received (it must be detached), to send it again. */
void grpc_stream_rewind(struct grpc_stream *st);
/* Free what st holds (it must be detached). */
void grpc_stream_fini(struct grpc_stream *st);
/* Send st on g (set up) with its n metadata entries: 0, or -1 when that
 * failed the connection (hooks.failed has run). */
int grpc_stream_submit(struct grpc_conn *g, struct grpc_stream *st,
    const struct grpc_meta *meta, size_t n) __attribute__((warn_unused_result));
/* Whether st was submitted (and not rewound since). */
bool grpc_stream_sent(const struct grpc_stream *st);
/* Take st off its connection, if on one: no hook about it any more, and the
 * server is told to stop when cancel. Written out by the next flush. */
void grpc_stream_detach(struct grpc_stream *st, bool cancel);

/* ---- connections -------------------------------------------------------- */

/* What a connection tells its owner. Any hook may be NULL but done (and
 * message, for streaming calls). */
struct grpc_hooks {
	void (*ready)(void *arg);		/* set up: streams may be submitted */
	void (*settings)(void *arg);		/* the server's first SETTINGS came */
	void (*draining)(void *arg);		/* GOAWAY: no new streams */
	void (*drained)(void *arg);		/* draining, and no stream open any more
						 * (told at each flush until freed) */
	void (*failed)(void *arg, const char *why);	/* given up: its streams are
						 * dead, the owner detaches them */
	/* one message of a streaming call st, owned by the transport */
	void (*message)(void *arg, struct grpc_stream *st, const ProtobufCMessage *msg);
	/* st ended (detached already) */
	void (*done)(void *arg, struct grpc_stream *st, const struct grpc_result *r);
	void *arg;
};

/* Where a connection goes and how. */
struct grpc_options {
	const struct sockaddr *addr;	/* the server's address */
	socklen_t addrlen;
	const char *authority;		/* :authority of every call ("host:port"), copied */
	const char *peer;		/* the server as reasons name it ("closed by
					 * <peer>"); must outlive the connection */
	struct tls_client *tls;		/* NULL: cleartext HTTP/2; else TLS with ALPN h2 */
	const char *tls_name;		/* TLS: the name the server's certificate carries */
	uint64_t timeout_ms;		/* the connect, and a PING's answer, are due by then */
	uint64_t ping_ms;		/* a streaming connection silent this long is PINGed */
};

/* A connection to o->addr, connecting; NULL with why when it cannot even
 * start (no socket). The caller frees it. */
struct grpc_conn *grpc_conn_create(struct event_base *base, const struct grpc_options *o,
    const struct grpc_hooks *hooks, char *why, size_t whysize);
/* Free g (NULL is fine) without a hook; from a hook, once the transport is
 * back at the loop. Its streams must be detached first. */
void grpc_conn_free(struct grpc_conn *g);
/* Give g up for why: hooks.failed, once; nothing is sent or read on it any
 * more. */
void grpc_conn_fail(struct grpc_conn *g, const char *why);
/* Write what the HTTP/2 session has to send (streams submitted, detached). */
void grpc_conn_flush(struct grpc_conn *g);
/* Whether g is set up: streams may be submitted. */
bool grpc_conn_ready(const struct grpc_conn *g);
/* Whether the server's SETTINGS came on g. */
bool grpc_conn_h2up(const struct grpc_conn *g);
/* g's HTTP/2 streams opened and not closed yet. */
unsigned grpc_conn_streams(const struct grpc_conn *g);

#endif
