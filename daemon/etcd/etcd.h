/*
 * etcd — a client of etcd v3's gRPC API, on the gRPC transport (grpc.h:
 * HTTP/2 over one TCP or TLS connection per endpoint, on the daemon's
 * libevent loop, no threads). Messages are protobuf-c's, generated from
 * proto/etcd.proto (etcd's field numbers). Every call is a stream of its own
 * on the connection, so calls never wait behind each other; the owner
 * orders what must be ordered.
 *
 * Unary calls (KV Range/Txn/DeleteRange, Lease Grant/Revoke, Maintenance
 * Status) and a keepalive (one LeaseKeepAlive request on a stream of its
 * own, half-closed, one response read) end with one callback. The watch is
 * one bidirectional Watch stream for the client: a create request, then its
 * messages one by one to the owner.
 *
 * Endpoints are tried in order: a connection that fails (refused, reset,
 * TLS refused, no answer within the request timeout to a call or to a
 * PING) moves the client to the next, and the client counts as down until
 * a call succeeds again. Each change of an endpoint's state is logged once,
 * with the reason (etcd_why_down gives it for -BACKEND replies). It never
 * retries a call by itself: its owner decides what is safe to send again.
 * Names are resolved once, by etcd_create (start-up may block); the event
 * loop never blocks. With a user name, the client authenticates
 * (Auth/Authenticate) on each connection before its first call, sends the
 * token as the "token" metadata of every call, and authenticates again
 * when etcd says the token is no longer valid (gRPC UNAUTHENTICATED,
 * "invalid auth token"): the calls refused for that are sent once more with
 * the new token, the only resend the client does.
 *
 * A call's callback runs exactly once, always from the event loop, never
 * from inside etcd_call.
 */
#ifndef DLOCKD_ETCD_H
#define DLOCKD_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "etcd.pb-c.h"

struct event_base;
struct etcd;
struct tls_client;

/* The methods the client calls. */
enum etcd_method {
	ETCD_RANGE,		/* /etcdserverpb.KV/Range: Etcd__RangeRequest */
	ETCD_TXN,		/* /etcdserverpb.KV/Txn: Etcd__TxnRequest */
	ETCD_DELETE_RANGE,	/* /etcdserverpb.KV/DeleteRange */
	ETCD_LEASE_GRANT,	/* /etcdserverpb.Lease/LeaseGrant */
	ETCD_LEASE_REVOKE,	/* /etcdserverpb.Lease/LeaseRevoke */
	ETCD_LEASE_KEEPALIVE,	/* /etcdserverpb.Lease/LeaseKeepAlive, one message */
	ETCD_STATUS		/* /etcdserverpb.Maintenance/Status */
};

/* How a call ended. */
enum etcd_status {
	ETCD_OK,	/* etcd answered: msg is its response */
	ETCD_FAILED,	/* etcd answered with a gRPC status other than OK: code, why */
	ETCD_DOWN	/* no answer: not reachable, timed out, or shut down */
};

/* The outcome of a call; valid during the callback only. */
struct etcd_result {
	enum etcd_status status;
	/* ETCD_OK: the response, of the method's response type
	 * (Etcd__TxnResponse for ETCD_TXN, ...), owned by the client */
	const ProtobufCMessage *msg;
	int code;		/* ETCD_FAILED: the gRPC status code */
	const char *why;	/* ETCD_FAILED: grpc-message ("etcdserver: requested
				 * lease not found"); ETCD_DOWN: a short reason
				 * ("connection refused", "timed out", "TLS: certificate
				 * not verified: ...", "authentication failed: ...") */
};

typedef void etcd_cb(void *arg, const struct etcd_result *r);

/* What the client tells its owner. */
struct etcd_hooks {
	/* the client came up (a call succeeded after none had) or went down */
	void (*state)(void *arg, bool up);
	/* one message of the watch stream (owned by the client, valid during
	 * the hook), or NULL when the stream ended or failed: start it again
	 * with etcd_watch() */
	void (*watch)(void *arg, const Etcd__WatchResponse *msg);
	void *arg;
};

/* How to reach etcd. Strings are copied. */
struct etcd_options {
	char *const *endpoints;		/* "host:port", tried in this order */
	size_t nendpoints;
	uint64_t request_timeout_ms;	/* a call without an answer by then fails */
	const char *username;		/* NULL: no authentication */
	const char *password;
	struct tls_client *tls;		/* NULL: plain TCP; else TLS (ALPN h2) with
					 * this context (a reference is taken) */
	const char *tls_server_name;	/* the name the certificates must carry;
					 * NULL: each endpoint's host */
	uint64_t ping_ms;		/* a connection with a watch stream and no
					 * byte from etcd for this long is checked
					 * with a PING (an answer due within the
					 * request timeout); 0: the request timeout,
					 * but 6 s at least (etcd refuses PINGs more
					 * often than every 5 s on a quiet stream) */
};

/* A new client (no connection is made yet); NULL after logging why (a name
 * that does not resolve). The caller owns it. */
struct etcd *etcd_create(struct event_base *base, const struct etcd_options *o,
    const struct etcd_hooks *hooks);
/* Free the client: calls in flight are dropped without their callbacks. */
void etcd_destroy(struct etcd *c);

/* Call method m with request req (of m's request type; packed at once: the
 * caller keeps req and may free it on return). */
void etcd_call(struct etcd *c, enum etcd_method m, const ProtobufCMessage *req,
    etcd_cb *cb, void *arg);
/* The same, once every call made before with the same lane (not 0) has
 * ended: calls of one lane reach etcd one after the other, in the order
 * they were made (the owner gives one lane to everything about one lock
 * key), while calls of other lanes go out at once. */
void etcd_call_lane(struct etcd *c, uint64_t lane, enum etcd_method m,
    const ProtobufCMessage *req, etcd_cb *cb, void *arg);
/* (Re)start the watch stream with create request req (packed at once): the
 * stream running is cancelled first, without a NULL message. */
void etcd_watch(struct etcd *c, const Etcd__WatchCreateRequest *req);
/* Stop the watch stream, if any, without a NULL message. */
void etcd_watch_stop(struct etcd *c);
/* Whether a watch stream is running. */
bool etcd_watching(const struct etcd *c);

/* Whether the last call that ended got an answer. */
bool etcd_up(const struct etcd *c);
/* Why the client is down, for -BACKEND replies: a short reason
 * ("127.0.0.1:2379: connection refused"), or NULL when up. */
const char *etcd_why_down(const struct etcd *c);
/* Whether it is down because etcd refused its settings (the password, a
 * certificate): waiting cannot cure that. */
bool etcd_refused(const struct etcd *c);
/* The endpoint calls go to now. */
const char *etcd_endpoint(const struct etcd *c);
/* Counters for INFO. */
struct etcd_stats {
	uint64_t calls;		/* calls sent */
	uint64_t failures;	/* calls with no answer */
	uint64_t switches;	/* moves to another endpoint */
	uint64_t messages;	/* watch messages received */
	uint64_t watches;	/* watch streams started */
	uint64_t connects;	/* connections made (HTTP/2 set up) */
	uint64_t streams;	/* streams open now */
};
void etcd_stats(const struct etcd *c, struct etcd_stats *out);

#endif
