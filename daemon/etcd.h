/*
 * etcd — a client of etcd v3's JSON gateway (grpc-gateway, HTTP/1.1) on
 * libevent's evhttp: unary calls (/v3/kv/txn, /v3/lease/grant, ...) over a
 * small pool of keep-alive connections, and one watch stream whose chunked
 * response is split into JSON messages as they arrive.
 *
 * Endpoints are tried in order: a call that cannot reach the current one
 * (refused, reset, no answer within the request timeout) moves the client
 * to the next, and the client counts as down until a call succeeds again.
 * It never retries a call by itself: its owner decides what is safe to send
 * again. Names are resolved once, by etcd_create (start-up may block); the
 * event loop never blocks. With a user name, the client authenticates
 * (/v3/auth/authenticate) before its first call on each endpoint and again
 * when etcd says the token is no longer valid.
 *
 * A call's callback runs exactly once, always from the event loop, never
 * from inside etcd_call. JSON is jansson's; keys and values in etcd's JSON
 * are base64 (etcd_b64_*).
 */
#ifndef DLOCKD_ETCD_H
#define DLOCKD_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct event_base;
struct etcd;

/* How a call ended. */
enum etcd_status {
	ETCD_OK,	/* etcd answered: body is its response */
	ETCD_FAILED,	/* etcd answered with an error: code, why */
	ETCD_DOWN	/* no answer: not reachable, timed out, or shut down */
};

/* The outcome of a call; valid during the callback only. */
struct etcd_result {
	enum etcd_status status;
	json_t *body;		/* ETCD_OK: the response object (borrowed) */
	int code;		/* ETCD_FAILED: the gRPC status code */
	const char *why;	/* ETCD_FAILED, ETCD_DOWN: a sentence */
};

typedef void etcd_cb(void *arg, const struct etcd_result *r);

/* What the client tells its owner. */
struct etcd_hooks {
	/* the client came up (a call succeeded after none had) or went down */
	void (*state)(void *arg, bool up);
	/* one message of the watch stream (its "result" object), or NULL when
	 * the stream ended or failed: start it again with etcd_watch() */
	void (*watch)(void *arg, json_t *result);
	void *arg;
};

/* How to reach etcd. Strings are copied. */
struct etcd_options {
	char *const *endpoints;		/* "host:port", tried in this order */
	size_t nendpoints;
	uint64_t request_timeout_ms;	/* a call without an answer by then fails */
	const char *username;		/* NULL: no authentication */
	const char *password;
};

/* A new client (no connection is made yet); NULL after logging why (a name
 * that does not resolve). The caller owns it. */
struct etcd *etcd_create(struct event_base *base, const struct etcd_options *o,
    const struct etcd_hooks *hooks);
/* Free the client: calls in flight are dropped without their callbacks. */
void etcd_destroy(struct etcd *c);

/* POST body (taken over; freed by the client) to path ("/v3/kv/txn"), on
 * the connection with the fewest calls in flight. */
void etcd_call(struct etcd *c, const char *path, json_t *body, etcd_cb *cb, void *arg);
/* The same on the connection lane picks: calls of one lane reach etcd one
 * after the other, in the order they were made (the owner gives one lane
 * to everything about one lock key). */
void etcd_call_lane(struct etcd *c, unsigned lane, const char *path, json_t *body,
    etcd_cb *cb, void *arg);
/* (Re)start the watch stream with create_request (taken over): the stream
 * running is cancelled first, without a NULL message. */
void etcd_watch(struct etcd *c, json_t *create_request);
/* Stop the watch stream, if any, without a NULL message. */
void etcd_watch_stop(struct etcd *c);
/* Whether a watch stream is running. */
bool etcd_watching(const struct etcd *c);

/* Whether the last call that ended got an answer. */
bool etcd_up(const struct etcd *c);
/* The endpoint calls go to now. */
const char *etcd_endpoint(const struct etcd *c);
/* Counters for INFO. */
struct etcd_stats {
	uint64_t calls;		/* calls sent */
	uint64_t failures;	/* calls with no answer */
	uint64_t switches;	/* moves to another endpoint */
	uint64_t messages;	/* watch messages received */
	uint64_t watches;	/* watch streams started */
};
void etcd_stats(const struct etcd *c, struct etcd_stats *out);

/* base64 of the n bytes at s, NUL-terminated; the caller frees it. */
char *etcd_b64_encode(const void *s, size_t n);
/* Decode base64 text into a new buffer (NUL-terminated, *n bytes before the
 * NUL) the caller frees; NULL if text is not base64. */
char *etcd_b64_decode(const char *text, size_t *n);

/* An integer field of a JSON object as etcd writes them (int64 as a string,
 * or a number; absent: 0, as proto3 leaves out zero values). -1 when it is
 * there but not an integer. */
int64_t etcd_int(const json_t *obj, const char *name);

#endif
