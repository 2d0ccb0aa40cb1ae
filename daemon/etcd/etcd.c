/*
 * etcd — a client of etcd v3's gRPC API over HTTP/2 (nghttp2); see etcd.h.
 *
 * The client keeps one connection (struct etcd_conn: a bufferevent, plain
 * or OpenSSL, and an nghttp2 client session fed with mem_recv and drained
 * with mem_send) to the endpoint calls go to, made when first needed. Every
 * call and the watch are streams of it (struct etcd_call). A call is on its
 * connection's held list until the connection is set up (and, with a user
 * name, has a token), then on its sent list until its stream ends. A call
 * that ends without an answer is told from the loop through c->failing
 * (later.h), in order. A connection that fails takes every call on it with
 * it and moves the client to the next endpoint; it is freed from the loop
 * (c->graveyard), never from inside nghttp2.
 *
 * Every entry from the loop (bufferevent, timer, later item) and every API
 * function goes through c_enter/c_leave: etcd_destroy called from inside a
 * callback only marks the client dead, and the last c_leave frees it.
 *
 * Calls made with a lane (etcd_call_lane) wait on their lane (struct
 * etcd_lane, in c->lanes) until the call before them of the same lane has
 * ended, so that etcd applies them in the order they were made.
 *
 * Why nghttp2 and not gRPC's C core: the core brings its own threads, timers
 * and completion queues, a second event loop beside libevent's to poll and
 * hand results across; nghttp2 is an HTTP/2 state machine driven by the
 * caller's bytes and callbacks, which fits the daemon's single loop, and
 * gRPC over HTTP/2 adds only a five-byte message prefix and two trailers.
 */
#include "etcd.h"
#include "etcd_internal.h"

#include <assert.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>

#include "addr.h"
#include "clock.h"
#include "hashtab.h"
#include "later.h"
#include "log.h"
#include "num.h"
#include "tls.h"
#include "xmalloc.h"

#define ETCD_MESSAGE_MAX (16u << 20)	/* bytes of one response message at most */
#define ETCD_WINDOW (1 << 24)		/* our HTTP/2 receive windows */
#define ETCD_PING_MIN_MS 6000		/* etcd takes a PING every 5 s at most
					 * without data sent (grpc keepalive policy) */
#define GRPC_INVALID_ARGUMENT 3
#define GRPC_RESOURCE_EXHAUSTED 8
#define GRPC_INTERNAL 13
#define GRPC_UNAUTHENTICATED 16
#define WHY_MAX 200			/* bytes of a reason */

/* What a stream is: one of enum etcd_method, or these. */
enum { K_AUTH = ETCD_STATUS + 1, K_WATCH, K_COUNT };

/* The gRPC method of each kind of stream: path, messages. */
static const struct method {
	const char *path;
	const ProtobufCMessageDescriptor *req;
	const ProtobufCMessageDescriptor *resp;
} methods[K_COUNT] = {
	[ETCD_RANGE] = { "/etcdserverpb.KV/Range", &etcd__range_request__descriptor,
	    &etcd__range_response__descriptor },
	[ETCD_TXN] = { "/etcdserverpb.KV/Txn", &etcd__txn_request__descriptor,
	    &etcd__txn_response__descriptor },
	[ETCD_DELETE_RANGE] = { "/etcdserverpb.KV/DeleteRange",
	    &etcd__delete_range_request__descriptor, &etcd__delete_range_response__descriptor },
	[ETCD_LEASE_GRANT] = { "/etcdserverpb.Lease/LeaseGrant",
	    &etcd__lease_grant_request__descriptor, &etcd__lease_grant_response__descriptor },
	[ETCD_LEASE_REVOKE] = { "/etcdserverpb.Lease/LeaseRevoke",
	    &etcd__lease_revoke_request__descriptor, &etcd__lease_revoke_response__descriptor },
	[ETCD_LEASE_KEEPALIVE] = { "/etcdserverpb.Lease/LeaseKeepAlive",
	    &etcd__lease_keep_alive_request__descriptor,
	    &etcd__lease_keep_alive_response__descriptor },
	[ETCD_STATUS] = { "/etcdserverpb.Maintenance/Status", &etcd__status_request__descriptor,
	    &etcd__status_response__descriptor },
	[K_AUTH] = { "/etcdserverpb.Auth/Authenticate", &etcd__authenticate_request__descriptor,
	    &etcd__authenticate_response__descriptor },
	[K_WATCH] = { "/etcdserverpb.Watch/Watch", &etcd__watch_request__descriptor,
	    &etcd__watch_response__descriptor },
};

struct etcd;
struct etcd_conn;
struct etcd_lane;

/* An endpoint. */
struct etcd_ep {
	char *text;				/* "host:port" as configured */
	char host[128];				/* its host, for TLS */
	struct sockaddr_storage sa;		/* its address, resolved at start */
	socklen_t salen;
	enum { EP_UNKNOWN, EP_UP, EP_DOWN } state; /* as last logged */
	char why[WHY_MAX];			/* EP_DOWN: the reason logged */
};

/* A call, the authentication of a connection, or the watch stream. */
struct etcd_call {
	struct etcd *c;			/* the client */
	int kind;			/* enum etcd_method, K_AUTH or K_WATCH */
	uint8_t *frame;			/* the request, gRPC-framed */
	size_t len;			/* its bytes */
	size_t off;			/* bytes given to nghttp2 */
	etcd_cb *cb;			/* whom to tell (a call) */
	void *arg;
	struct etcd_conn *conn;		/* on its held or sent list; NULL: failing */
	int32_t sid;			/* its stream, 0 before it is sent */
	uint64_t token_gen;		/* sent with the token of this generation, 0: none */
	bool resent;			/* sent again after an expired token */
	struct event *timer;		/* the request timeout (not for the watch) */
	struct evbuffer *in;		/* DATA not read yet */
	ProtobufCMessage *msg;		/* the response message */
	int http_status;		/* :status, 0 before it came */
	int grpc_status;		/* grpc-status, -1 before it came */
	char *grpc_message;		/* grpc-message, decoded */
	enum etcd_status fstatus;	/* failing: how it ends */
	int fcode;			/* and its code */
	char fwhy[WHY_MAX];		/* and why */
	struct etcd_lane *lane;		/* etcd_call_lane: its lane, else NULL */
	TAILQ_ENTRY(etcd_call) entry;	/* on conn->held or conn->sent, or
					 * waiting on lane->queue */
	struct later_item fail;		/* on c->failing until told */
};
TAILQ_HEAD(etcd_call_list, etcd_call);

/* A lane with calls: they go out one after the other. */
struct etcd_lane {
	struct hashtab_node node;	/* in c->lanes, keyed by id */
	uint64_t id;			/* the owner's lane */
	unsigned n;			/* its calls not ended: one out, the rest queued */
	struct etcd_call_list queue;	/* not started yet, in order */
};

/* A connection to an endpoint. */
struct etcd_conn {
	struct etcd *c;			/* the client */
	struct etcd_ep *ep;		/* where it goes */
	struct bufferevent *bev;	/* the bytes */
	nghttp2_session *h2;		/* the HTTP/2 session */
	bool ready;			/* connected (TLS: h2 agreed): streams may go */
	bool h2up;			/* etcd's SETTINGS came */
	bool failed;			/* given up: on c->graveyard */
	bool draining;			/* etcd said GOAWAY: no new streams */
	bool in_h2;			/* inside nghttp2_session_mem_recv */
	char *token;			/* auth token, NULL: none (yet) */
	uint64_t token_gen;		/* counts the tokens it was given */
	struct etcd_call *auth;		/* the authenticate call in flight, or NULL */
	struct event *timer;		/* connect timeout, then the PING check */
	bool ping_out;			/* a PING waits for an answer */
	uint64_t last_read;		/* clock_ms() of the last bytes read */
	unsigned nstreams;		/* streams opened and not closed */
	struct etcd_call_list held;	/* waiting for the connection or a token */
	struct etcd_call_list sent;	/* streams in flight */
	TAILQ_ENTRY(etcd_conn) entry;	/* on c->conns or c->graveyard */
};
TAILQ_HEAD(etcd_conn_list, etcd_conn);

struct etcd {
	struct event_base *base;	/* the loop */
	struct etcd_hooks hooks;	/* the owner */
	struct etcd_ep *eps;		/* endpoints, in order */
	size_t neps;			/* how many */
	size_t cur;			/* the one calls go to */
	uint64_t timeout_ms;		/* request timeout */
	uint64_t ping_ms;		/* an idle watch's connection is PINGed then */
	char *username;			/* NULL: no authentication */
	char *password;
	struct tls_client *tls;		/* NULL: plain TCP */
	char *tls_name;			/* name to verify, NULL: each host */
	struct etcd_conn *conn;		/* where new streams go, NULL: none yet */
	struct etcd_conn_list conns;	/* live connections (conn and draining ones) */
	struct etcd_conn_list graveyard;/* failed, freed from the loop */
	struct later *failing;		/* calls and news told from the loop */
	bool up;			/* the last call that ended was answered */
	bool told_up;			/* what the state hook was told last */
	struct later_item state_item;	/* tells the state hook from the loop */
	char why_down[WHY_MAX + 160];	/* "<endpoint>: <reason>" */
	struct hashtab *lanes;		/* struct etcd_lane by id */
	struct etcd_call *watch;	/* the watch stream, NULL if none */
	uint64_t wgen;			/* counts watch starts and stops */
	bool wlost;			/* the stream ended: tell the owner NULL */
	struct later_item wlost_item;	/* tells it from the loop */
	int depth;			/* API calls and loop callbacks running */
	int in_api;			/* etcd_call/etcd_watch running */
	bool dead;			/* etcd_destroy was called */
	struct etcd_stats stats;	/* counters */
};

static void conn_fail(struct etcd_conn *conn, const char *why);
static void conn_pump(struct etcd_conn *conn);
static void conn_flush(struct etcd_conn *conn);
static void call_start(struct etcd *c, struct etcd_call *k);
static void really_destroy(struct etcd *c);

/* ---- gRPC messages -------------------------------------------------------- */

int
etcd_grpc_next(struct evbuffer *buf, const ProtobufCMessageDescriptor *desc, size_t max,
    ProtobufCMessage **msg, char *why, size_t whysize)
{
	unsigned char pre[5];
	size_t have = evbuffer_get_length(buf);
	uint32_t len;
	const uint8_t *p;

	*msg = NULL;
	if (have < 5)
		return 0;
	evbuffer_copyout(buf, pre, 5);
	if (pre[0] != 0) {
		snprintf(why, whysize, pre[0] == 1 ? "a compressed message" :
		    "a message with flags 0x%02x", pre[0]);
		return -1;
	}
	len = (uint32_t)pre[1] << 24 | (uint32_t)pre[2] << 16 | (uint32_t)pre[3] << 8 | pre[4];
	if (len > max) {
		snprintf(why, whysize, "a message of %lu bytes (over %zu)", (unsigned long)len, max);
		return -1;
	}
	if (have - 5 < len)
		return 0;
	p = evbuffer_pullup(buf, (ev_ssize_t)(5 + (size_t)len));
	*msg = protobuf_c_message_unpack(desc, NULL, len, p + 5);
	if (*msg == NULL) {
		snprintf(why, whysize, "a message that is not a %s", desc->short_name);
		return -1;
	}
	evbuffer_drain(buf, 5 + (size_t)len);
	return 1;
}

int
etcd_grpc_status(const char *value, size_t len)
{
	int v = 0;
	if (len == 0 || len > 2)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (value[i] < '0' || value[i] > '9')
			return -1;
		v = v * 10 + (value[i] - '0');
	}
	return v <= 16 ? v : -1;
}


void
etcd_grpc_message(const char *value, size_t len, char *out, size_t outsize)
{
	size_t j = 0;
	if (outsize == 0)
		return;
	for (size_t i = 0; i < len && j + 1 < outsize; i++) {
		int hi, lo;
		if (value[i] == '%' && i + 2 < len && (hi = num_hex_digit(value[i + 1])) >= 0 &&
		    (lo = num_hex_digit(value[i + 2])) >= 0) {
			out[j++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			out[j++] = value[i];
		}
	}
	out[j] = '\0';
}

/* The gRPC status a response without grpc-status stands for (gRPC's
 * mapping of HTTP statuses). */
static int
grpc_of_http(int status)
{
	switch (status) {
	case 400: return GRPC_INTERNAL;
	case 401: return GRPC_UNAUTHENTICATED;
	case 403: return 7;	/* PERMISSION_DENIED */
	case 404: return 12;	/* UNIMPLEMENTED */
	case 429: case 502: case 503: case 504: return 14;	/* UNAVAILABLE */
	default: return 2;	/* UNKNOWN */
	}
}

/* ---- entering and leaving -------------------------------------------------- */

static void
c_enter(struct etcd *c)
{
	c->depth++;
}

static void
conn_free(struct etcd_conn *conn);

/* Leave what c_enter began: free the client if it was destroyed meanwhile
 * and nothing of it runs any more, else the connections given up. true
 * when c is gone. */
static bool
c_leave(struct etcd *c)
{
	struct etcd_conn *conn;
	if (--c->depth > 0)
		return c->dead;
	if (c->dead) {
		really_destroy(c);
		return true;
	}
	while ((conn = TAILQ_FIRST(&c->graveyard)) != NULL) {
		TAILQ_REMOVE(&c->graveyard, conn, entry);
		conn_free(conn);
	}
	return false;
}

/* ---- state ------------------------------------------------------------------ */

/* Tell the state hook what it has not been told. */
static void
state_tell(struct etcd *c)
{
	if (c->dead || c->told_up == c->up)
		return;
	c->told_up = c->up;
	if (c->hooks.state != NULL)
		c->hooks.state(c->hooks.arg, c->up);
}

static void
on_state_item(struct later_item *it)
{
	struct etcd *c = (struct etcd *)(void *)((char *)it - offsetof(struct etcd, state_item));
	c_enter(c);
	state_tell(c);
	c_leave(c);
}

/* The client is up or down: tell the owner (from the loop when inside an
 * API call). */
static void
state_set(struct etcd *c, bool up)
{
	if (c->up == up)
		return;
	c->up = up;
	if (c->in_api > 0) {
		if (!c->state_item.queued)
			later_add(c->failing, &c->state_item, on_state_item);
	} else {
		state_tell(c);
	}
}

/* ep's connection is set up (and authenticated): log it if it was not. */
static void
ep_up(struct etcd *c, struct etcd_ep *ep)
{
	if (ep->state == EP_UP)
		return;
	ep->state = EP_UP;
	ep->why[0] = '\0';
	log_info("etcd %s up (HTTP/2%s)", ep->text, c->tls != NULL ? " over TLS" : "");
}

/* ep failed for why: log it unless it was down already (a connection
 * closed by etcd, then refused, is one change: the -BACKEND reply gives the
 * latest reason). */
static void
ep_down(struct etcd *c, struct etcd_ep *ep, const char *why)
{
	snprintf(c->why_down, sizeof(c->why_down), "%s: %s", ep->text, why);
	if (ep->state == EP_DOWN)
		return;
	ep->state = EP_DOWN;
	snprintf(ep->why, sizeof(ep->why), "%s", why);
	log_warn("etcd %s down: %s", ep->text, why);
}

/* ---- calls ------------------------------------------------------------------ */

static void call_arm(struct etcd_call *k);
static void lane_leave(struct etcd_call *k);

static void
call_free(struct etcd_call *k)
{
	lane_leave(k);
	if (k->timer != NULL)
		event_free(k->timer);
	free(k->frame);
	if (k->in != NULL)
		evbuffer_free(k->in);
	if (k->msg != NULL)
		protobuf_c_message_free_unpacked(k->msg, NULL);
	free(k->grpc_message);
	free(k);
}

/* Take k off its connection: off its list, its stream no longer k's (and
 * cancelled when rst and still open). */
static void
call_detach(struct etcd_call *k, bool rst)
{
	struct etcd_conn *conn = k->conn;
	if (conn == NULL)
		return;
	if (k->sid > 0) {
		TAILQ_REMOVE(&conn->sent, k, entry);
		if (!conn->failed) {
			(void)nghttp2_session_set_stream_user_data(conn->h2, k->sid, NULL);
			if (rst)
				(void)nghttp2_submit_rst_stream(conn->h2, NGHTTP2_FLAG_NONE, k->sid,
				    NGHTTP2_CANCEL);
		}
	} else {
		TAILQ_REMOVE(&conn->held, k, entry);
	}
	if (conn->auth == k)
		conn->auth = NULL;
	k->conn = NULL;
	if (k->timer != NULL)
		evtimer_del(k->timer);
}

/* Tell k's owner r and free k (k is on no list). */
static void
call_end(struct etcd_call *k, const struct etcd_result *r)
{
	struct etcd *c = k->c;
	if (!c->dead && k->cb != NULL)
		k->cb(k->arg, r);
	call_free(k);
}

static void
on_fail(struct later_item *it)
{
	struct etcd_call *k = (struct etcd_call *)(void *)((char *)it -
	    offsetof(struct etcd_call, fail));
	struct etcd *c = k->c;
	struct etcd_result r = { .status = k->fstatus, .code = k->fcode, .why = k->fwhy };
	c_enter(c);
	call_end(k, &r);
	c_leave(c);
}

/* End k (detached) from the loop with st, code and why. */
static void
call_fail_later(struct etcd_call *k, enum etcd_status st, int code, const char *why)
{
	struct etcd *c = k->c;
	k->fstatus = st;
	k->fcode = code;
	snprintf(k->fwhy, sizeof(k->fwhy), "%s", why);
	if (st == ETCD_DOWN && k->kind < K_AUTH) {
		c->stats.failures++;
		state_set(c, false);
	}
	later_add(c->failing, &k->fail, on_fail);
}

static void auth_done(struct etcd_conn *conn, struct etcd_call *k, const struct etcd_result *r);
static void watch_lost(struct etcd *c);

/* k's stream is no more, for why: end it (ETCD_DOWN), or, the watch, tell
 * its owner NULL. */
static void
call_down(struct etcd_call *k, const char *why)
{
	struct etcd *c = k->c;
	call_detach(k, false);
	if (k->kind == K_WATCH) {
		if (c->watch == k) {
			c->watch = NULL;
			watch_lost(c);
		}
		call_free(k);
		return;
	}
	call_fail_later(k, ETCD_DOWN, 0, why);
}

static void
on_call_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct etcd_call *k = arg;
	struct etcd *c = k->c;
	struct etcd_conn *conn = k->conn;
	(void)fd;
	(void)what;
	c_enter(c);
	if (conn != NULL && k->sid == 0) {
		/* still held (the connection is being set up, or waits for a
		 * token, each with a timer of its own): the call alone fails */
		call_detach(k, false);
		call_fail_later(k, ETCD_DOWN, 0, "timed out");
	} else if (conn != NULL) {
		/* the stream is cancelled, the call fails, and so does the
		 * connection that did not answer it */
		call_detach(k, true);
		conn_flush(conn);
		call_fail_later(k, ETCD_DOWN, 0, "timed out");
		conn_fail(conn, "timed out");
	}
	c_leave(c);
}

/* A new call of kind with the packed request req, framed. */
static struct etcd_call *
call_new(struct etcd *c, int kind, const ProtobufCMessage *req, etcd_cb *cb, void *arg)
{
	struct etcd_call *k = xcalloc(1, sizeof(*k));
	size_t n = protobuf_c_message_get_packed_size(req);

	assert(req->descriptor == methods[kind].req);
	if (n > UINT32_MAX)
		log_fatal("etcd: a request of %zu bytes", n);
	k->c = c;
	k->kind = kind;
	k->cb = cb;
	k->arg = arg;
	k->grpc_status = -1;
	k->len = 5 + n;
	k->frame = xmalloc(k->len);
	k->frame[0] = 0;
	k->frame[1] = (uint8_t)(n >> 24);
	k->frame[2] = (uint8_t)(n >> 16);
	k->frame[3] = (uint8_t)(n >> 8);
	k->frame[4] = (uint8_t)n;
	(void)protobuf_c_message_pack(req, k->frame + 5);
	k->in = evbuffer_new();
	if (k->in == NULL)
		log_fatal("out of memory (an etcd call)");
	if (kind != K_WATCH) {
		k->timer = evtimer_new(c->base, on_call_timeout, k);
		if (k->timer == NULL)
			log_fatal("out of memory (an etcd call)");
	}
	return k;
}

/* Arm k's request timeout (again). */
static void
call_arm(struct etcd_call *k)
{
	struct timeval tv = clock_tv(k->c->timeout_ms);
	if (k->timer != NULL)
		evtimer_add(k->timer, &tv);
}

/* ---- the watch's end ------------------------------------------------------ */

static void
on_wlost_item(struct later_item *it)
{
	struct etcd *c = (struct etcd *)(void *)((char *)it - offsetof(struct etcd, wlost_item));
	c_enter(c);
	if (!c->dead && c->wlost && c->watch == NULL) {
		c->wlost = false;
		if (c->hooks.watch != NULL)
			c->hooks.watch(c->hooks.arg, NULL);
	}
	c_leave(c);
}

/* The watch stream ended (c->watch is NULL already): tell its owner NULL
 * from the loop. */
static void
watch_lost(struct etcd *c)
{
	c->wgen++;
	c->wlost = true;
	if (!c->wlost_item.queued)
		later_add(c->failing, &c->wlost_item, on_wlost_item);
}

/* Cancel the watch stream, if any, saying nothing. */
static void
watch_cancel(struct etcd *c)
{
	struct etcd_call *k = c->watch;
	c->wgen++;
	c->wlost = false;
	later_cancel(c->failing, &c->wlost_item);
	if (k == NULL)
		return;
	c->watch = NULL;
	call_detach(k, true);
	call_free(k);
}

/* ---- nghttp2 callbacks ------------------------------------------------------ */

/* The call of stream sid of conn, NULL when none (given up, or conn failed). */
static struct etcd_call *
stream_call(struct etcd_conn *conn, int32_t sid)
{
	if (conn->failed || conn->c->dead)
		return NULL;
	return nghttp2_session_get_stream_user_data(conn->h2, sid);
}

static ssize_t
on_data_read(nghttp2_session *h2, int32_t sid, uint8_t *buf, size_t length,
    uint32_t *flags, nghttp2_data_source *source, void *user_data)
{
	struct etcd_call *k = stream_call(user_data, sid);
	size_t n;
	(void)h2;
	(void)source;
	if (k == NULL)
		return NGHTTP2_ERR_DEFERRED;
	n = k->len - k->off;
	if (n > length)
		n = length;
	memcpy(buf, k->frame + k->off, n);
	k->off += n;
	if (k->off == k->len) {
		if (k->kind != K_WATCH)
			*flags |= NGHTTP2_DATA_FLAG_EOF;
		else if (n == 0)
			return NGHTTP2_ERR_DEFERRED;	/* the stream stays open */
	}
	return (ssize_t)n;
}

static int
on_header(nghttp2_session *h2, const nghttp2_frame *frame, const uint8_t *name,
    size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data)
{
	struct etcd_call *k;
	(void)h2;
	(void)flags;
	if (frame->hd.type != NGHTTP2_HEADERS)
		return 0;
	if ((k = stream_call(user_data, frame->hd.stream_id)) == NULL)
		return 0;
	if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
		int s = 0;
		for (size_t i = 0; i < valuelen && i < 3; i++)
			s = s * 10 + (value[i] - '0');
		k->http_status = s;
	} else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
		k->grpc_status = etcd_grpc_status((const char *)value, valuelen);
		if (k->grpc_status < 0)
			k->grpc_status = 2;	/* UNKNOWN */
	} else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0) {
		free(k->grpc_message);
		k->grpc_message = xmalloc(valuelen + 1);
		etcd_grpc_message((const char *)value, valuelen, k->grpc_message, valuelen + 1);
	}
	return 0;
}

static int
on_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t sid, const uint8_t *data,
    size_t len, void *user_data)
{
	struct etcd_call *k = stream_call(user_data, sid);
	(void)h2;
	(void)flags;
	if (k != NULL)
		evbuffer_add(k->in, data, len);
	return 0;
}

/* The code a stream that cannot be read is failed with. */
static int
unreadable_code(struct evbuffer *in)
{
	unsigned char pre[5];
	if (evbuffer_copyout(in, pre, 5) == 5 && pre[0] == 0 &&
	    ((uint32_t)pre[1] << 24 | (uint32_t)pre[2] << 16 | (uint32_t)pre[3] << 8 | pre[4]) >
	    ETCD_MESSAGE_MAX)
		return GRPC_RESOURCE_EXHAUSTED;
	return GRPC_INTERNAL;
}

/* Tell the owner the watch messages that came whole. */
static void
watch_read(struct etcd_conn *conn, struct etcd_call *k)
{
	struct etcd *c = conn->c;
	uint64_t gen = c->wgen;
	ProtobufCMessage *msg;
	char why[128];
	int rc;

	while ((rc = etcd_grpc_next(k->in, methods[K_WATCH].resp, ETCD_MESSAGE_MAX, &msg, why,
	    sizeof(why))) == 1) {
		c->stats.messages++;
		state_set(c, true);
		if (!c->dead && c->wgen == gen && c->hooks.watch != NULL)
			c->hooks.watch(c->hooks.arg, (const Etcd__WatchResponse *)msg);
		protobuf_c_message_free_unpacked(msg, NULL);
		if (c->dead || c->wgen != gen)
			return;	/* stopped or started again: k is gone */
	}
	if (rc < 0) {
		log_warn("etcd %s: watch stream: %s", conn->ep->text, why);
		c->watch = NULL;
		call_detach(k, true);
		call_free(k);
		watch_lost(c);
	}
}

/* A unary call is answered with a message: take it (a keepalive ends
 * with the first one). */
static void call_answered(struct etcd_conn *conn, struct etcd_call *k);

static void
unary_read(struct etcd_conn *conn, struct etcd_call *k, bool end)
{
	ProtobufCMessage *msg;
	char why[128];
	int rc;

	while ((rc = etcd_grpc_next(k->in, methods[k->kind].resp, ETCD_MESSAGE_MAX, &msg, why,
	    sizeof(why))) == 1) {
		if (k->msg == NULL)
			k->msg = msg;
		else
			protobuf_c_message_free_unpacked(msg, NULL);	/* one only */
	}
	if (rc < 0) {
		struct etcd_result r = { .status = ETCD_FAILED, .code = unreadable_code(k->in),
		    .why = why };
		log_warn("etcd %s: %s: %s", conn->ep->text, methods[k->kind].path, why);
		call_detach(k, true);
		if (k->kind == K_AUTH)
			auth_done(conn, k, &r);
		else
			state_set(conn->c, true);
		call_end(k, &r);
		return;
	}
	if (k->kind == ETCD_LEASE_KEEPALIVE && k->msg != NULL) {
		k->grpc_status = 0;
		if (!end)
			call_detach(k, true);
		call_answered(conn, k);
	}
}

/* etcd ended the watch stream k (its status, if any, came): tell the
 * owner, and close the stream on our side too. */
static void
watch_ended(struct etcd_conn *conn, struct etcd_call *k)
{
	struct etcd *c = conn->c;
	if (k->grpc_status > 0)
		log_warn("etcd %s: watch stream ended: %s", conn->ep->text,
		    k->grpc_message != NULL ? k->grpc_message : "error");
	if (k->grpc_status == GRPC_UNAUTHENTICATED && k->token_gen == conn->token_gen &&
	    conn->token != NULL) {
		free(conn->token);
		conn->token = NULL;
	}
	call_detach(k, true);
	if (c->watch == k) {
		c->watch = NULL;
		watch_lost(c);
	}
	call_free(k);
}

static int
on_frame_recv(nghttp2_session *h2, const nghttp2_frame *frame, void *user_data)
{
	struct etcd_conn *conn = user_data;
	struct etcd *c = conn->c;
	struct etcd_call *k;
	(void)h2;
	if (conn->failed || c->dead)
		return 0;
	switch (frame->hd.type) {
	case NGHTTP2_SETTINGS:
		if (!(frame->hd.flags & NGHTTP2_FLAG_ACK) && !conn->h2up) {
			conn->h2up = true;
			c->stats.connects++;
			if (c->username == NULL)
				ep_up(c, conn->ep);
		}
		break;
	case NGHTTP2_DATA:
		if ((k = stream_call(conn, frame->hd.stream_id)) == NULL)
			break;
		if (k->kind != K_WATCH) {
			unary_read(conn, k, (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0);
			break;
		}
		watch_read(conn, k);
		/* the stream may be gone (the hook, garbage): look again */
		if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
		    (k = stream_call(conn, frame->hd.stream_id)) != NULL)
			watch_ended(conn, k);
		break;
	case NGHTTP2_HEADERS:
		if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
		    (k = stream_call(conn, frame->hd.stream_id)) != NULL && k->kind == K_WATCH)
			watch_ended(conn, k);
		break;
	case NGHTTP2_GOAWAY:
		if (frame->goaway.error_code != NGHTTP2_NO_ERROR) {
			char why[WHY_MAX];
			snprintf(why, sizeof(why), "closed by etcd (%s)",
			    nghttp2_http2_strerror(frame->goaway.error_code));
			conn_fail(conn, why);
		} else {
			/* the streams it took go on; new ones go to a new connection */
			conn->draining = true;
			if (c->conn == conn)
				c->conn = NULL;
		}
		break;
	default:
		break;
	}
	return 0;
}

static void call_resend(struct etcd_conn *conn, struct etcd_call *k);

/* k's stream ended with its status: end the call. */
static void
call_answered(struct etcd_conn *conn, struct etcd_call *k)
{
	struct etcd *c = conn->c;
	struct etcd_result r = { .status = ETCD_OK };
	char why[WHY_MAX];

	call_detach(k, false);
	if (k->grpc_status < 0 && k->http_status != 200) {
		r.status = ETCD_FAILED;
		r.code = grpc_of_http(k->http_status);
		snprintf(why, sizeof(why), "HTTP status %d", k->http_status);
		r.why = why;
	} else if (k->grpc_status < 0) {
		r.status = ETCD_FAILED;
		r.code = GRPC_INTERNAL;
		r.why = "no gRPC status in the response";
	} else if (k->grpc_status != 0) {
		r.status = ETCD_FAILED;
		r.code = k->grpc_status;
		if (k->grpc_message != NULL && k->grpc_message[0] != '\0') {
			r.why = k->grpc_message;
		} else {
			snprintf(why, sizeof(why), "gRPC status %d", k->grpc_status);
			r.why = why;
		}
	} else if (k->msg == NULL) {
		r.status = ETCD_FAILED;
		r.code = GRPC_INTERNAL;
		r.why = "no message in the response";
	} else {
		r.msg = k->msg;
	}
	if (k->kind == K_AUTH) {
		auth_done(conn, k, &r);
		call_end(k, &r);
		return;
	}
	state_set(c, true);
	if (r.status == ETCD_FAILED && r.code == GRPC_UNAUTHENTICATED && c->username != NULL &&
	    !k->resent && strstr(r.why, "invalid auth token") != NULL) {
		call_resend(conn, k);
		return;
	}
	call_end(k, &r);
}

static int
on_stream_close(nghttp2_session *h2, int32_t sid, uint32_t error_code, void *user_data)
{
	struct etcd_conn *conn = user_data;
	struct etcd *c = conn->c;
	struct etcd_call *k;
	(void)h2;

	if (conn->nstreams > 0) {
		conn->nstreams--;
		c->stats.streams--;
	}
	if ((k = stream_call(conn, sid)) == NULL)
		return 0;
	if (k->kind == K_WATCH) {
		watch_ended(conn, k);
		return 0;
	}
	if (k->grpc_status < 0 && error_code != NGHTTP2_NO_ERROR) {
		char why[WHY_MAX];
		snprintf(why, sizeof(why), "stream reset by etcd (%s)",
		    nghttp2_http2_strerror(error_code));
		if (k->kind == K_AUTH) {
			conn_fail(conn, why);
			return 0;
		}
		call_down(k, why);
		return 0;
	}
	call_answered(conn, k);
	return 0;
}

/* ---- authentication --------------------------------------------------------- */

/* Authenticate on conn, unless that is under way. */
static void
auth_start(struct etcd_conn *conn)
{
	struct etcd *c = conn->c;
	Etcd__AuthenticateRequest req = ETCD__AUTHENTICATE_REQUEST__INIT;
	struct etcd_call *k;

	if (conn->auth != NULL)
		return;
	req.name = c->username;
	req.password = c->password != NULL ? c->password : (char *)"";
	k = call_new(c, K_AUTH, &req.base, NULL, NULL);
	call_arm(k);
	conn->auth = k;
	k->conn = conn;
	TAILQ_INSERT_HEAD(&conn->held, k, entry);
}

/* The answer to conn's authenticate call k (detached): keep the token and
 * send the calls held, or fail them. */
static void
auth_done(struct etcd_conn *conn, struct etcd_call *k, const struct etcd_result *r)
{
	struct etcd *c = conn->c;
	const Etcd__AuthenticateResponse *resp = (const Etcd__AuthenticateResponse *)r->msg;
	struct etcd_call *h, *next;
	char why[WHY_MAX];

	(void)k;
	if (r->status == ETCD_OK && resp->token != NULL && resp->token[0] != '\0') {
		free(conn->token);
		conn->token = xstrdup(resp->token);
		conn->token_gen++;
		ep_up(c, conn->ep);
		state_set(c, true);
		conn_pump(conn);
		return;
	}
	snprintf(why, sizeof(why), "authentication failed: %s", r->status == ETCD_OK ?
	    "no token in the answer" : r->why);
	ep_down(c, conn->ep, why);
	state_set(c, false);
	for (h = TAILQ_FIRST(&conn->held); h != NULL; h = next) {
		next = TAILQ_NEXT(h, entry);
		call_detach(h, false);
		if (h->kind == K_WATCH) {
			call_down(h, why);
			continue;
		}
		call_fail_later(h, ETCD_FAILED, r->status == ETCD_OK ? GRPC_INTERNAL : r->code, why);
	}
}

/* k was refused for a token etcd no longer takes: send it once more with a
 * new one (authenticating again unless it carried an older token). */
static void
call_resend(struct etcd_conn *conn, struct etcd_call *k)
{
	struct etcd *c = conn->c;
	if (k->token_gen == conn->token_gen && conn->token != NULL) {
		free(conn->token);
		conn->token = NULL;
	}
	k->resent = true;
	k->sid = 0;
	k->off = 0;
	k->http_status = 0;
	k->grpc_status = -1;
	free(k->grpc_message);
	k->grpc_message = NULL;
	if (k->msg != NULL)
		protobuf_c_message_free_unpacked(k->msg, NULL);
	k->msg = NULL;
	evbuffer_drain(k->in, evbuffer_get_length(k->in));
	call_arm(k);
	call_start(c, k);
}

/* ---- connections ------------------------------------------------------------ */

/* Submit k's stream on conn (k is on conn->held). */
static void
call_submit(struct etcd_conn *conn, struct etcd_call *k)
{
	struct etcd *c = conn->c;
	const char *scheme = c->tls != NULL ? "https" : "http";
	const char *path = methods[k->kind].path;
#define NV(n, v) { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), \
	NGHTTP2_NV_FLAG_NO_COPY_NAME }
	nghttp2_nv nva[] = {
		NV(":method", "POST"),
		NV(":scheme", scheme),
		NV(":path", path),
		NV(":authority", conn->ep->text),
		NV("content-type", "application/grpc"),
		NV("te", "trailers"),
		NV("token", conn->token != NULL ? conn->token : ""),
	};
#undef NV
	size_t nnv = sizeof(nva) / sizeof(nva[0]);
	nghttp2_data_provider prd = { .source.ptr = NULL, .read_callback = on_data_read };
	int32_t sid;

	/* the request timeout counts from here, not from while it was held */
	call_arm(k);
	k->token_gen = 0;
	if (conn->token != NULL && k->kind != K_AUTH)
		k->token_gen = conn->token_gen;
	else
		nnv--;
	sid = nghttp2_submit_request(conn->h2, NULL, nva, nnv, &prd, k);
	if (sid < 0) {
		char why[WHY_MAX];
		snprintf(why, sizeof(why), "HTTP/2: %s", nghttp2_strerror(sid));
		conn_fail(conn, why);
		return;
	}
	TAILQ_REMOVE(&conn->held, k, entry);
	TAILQ_INSERT_TAIL(&conn->sent, k, entry);
	k->sid = sid;
	conn->nstreams++;
	c->stats.streams++;
	if (k->kind < K_AUTH)
		c->stats.calls++;
}

static void conn_ping_arm(struct etcd_conn *conn);

/* Send what conn holds when it can go: the authenticate call first. */
static void
conn_pump(struct etcd_conn *conn)
{
	struct etcd *c = conn->c;
	struct etcd_call *k, *next;

	if (!conn->ready || conn->failed)
		return;
	if (c->username != NULL && conn->token == NULL)
		auth_start(conn);
	for (k = TAILQ_FIRST(&conn->held); k != NULL && !conn->failed; k = next) {
		next = TAILQ_NEXT(k, entry);
		if (k->kind != K_AUTH && c->username != NULL && conn->token == NULL)
			continue;
		call_submit(conn, k);
		if (k->kind == K_WATCH)
			conn_ping_arm(conn);
	}
	conn_flush(conn);
}

/* Write what nghttp2 has to send into the bufferevent. */
static void
conn_flush(struct etcd_conn *conn)
{
	const uint8_t *data;
	ssize_t n;

	if (conn->in_h2 || conn->failed)
		return;
	while ((n = nghttp2_session_mem_send(conn->h2, &data)) > 0)
		bufferevent_write(conn->bev, data, (size_t)n);
	if (n < 0) {
		char why[WHY_MAX];
		snprintf(why, sizeof(why), "HTTP/2: %s", nghttp2_strerror((int)n));
		conn_fail(conn, why);
		return;
	}
	if (conn->draining && conn->nstreams == 0 && TAILQ_EMPTY(&conn->held) &&
	    TAILQ_EMPTY(&conn->sent)) {
		/* etcd said GOAWAY and every stream has ended: close it quietly */
		conn->failed = true;
		TAILQ_REMOVE(&conn->c->conns, conn, entry);
		TAILQ_INSERT_TAIL(&conn->c->graveyard, conn, entry);
	}
}

/* Give conn up for why: its calls end ETCD_DOWN (from the loop), its watch
 * stream NULL; the client moves to the next endpoint. */
static void
conn_fail(struct etcd_conn *conn, const char *why)
{
	struct etcd *c = conn->c;
	struct etcd_call *k;
	bool busy;

	if (conn->failed)
		return;
	conn->failed = true;
	busy = !TAILQ_EMPTY(&conn->held) || !TAILQ_EMPTY(&conn->sent);
	TAILQ_REMOVE(&c->conns, conn, entry);
	TAILQ_INSERT_TAIL(&c->graveyard, conn, entry);
	if (conn->bev != NULL)
		bufferevent_disable(conn->bev, EV_READ | EV_WRITE);
	evtimer_del(conn->timer);
	if (c->conn == conn) {
		size_t at = (size_t)(conn->ep - c->eps);
		c->conn = NULL;
		ep_down(c, conn->ep, why);
		if (c->neps > 1 && at == c->cur) {
			c->cur = (c->cur + 1) % c->neps;
			c->stats.switches++;
		}
		if (busy || !conn->h2up)
			state_set(c, false);
	}
	while ((k = TAILQ_FIRST(&conn->held)) != NULL)
		call_down(k, why);
	while ((k = TAILQ_FIRST(&conn->sent)) != NULL)
		call_down(k, why);
}

/* Why conn's bufferevent failed, from its event what. */
static const char *
conn_failure(struct etcd_conn *conn, short what, char *buf, size_t len)
{
	int err = EVUTIL_SOCKET_ERROR();
	char tls[WHY_MAX - 8];

	if (conn->c->tls != NULL && tls_bev_failure(conn->bev, tls, sizeof(tls)) != NULL) {
		snprintf(buf, len, "TLS: %s", tls);
		return buf;
	}
	if ((what & BEV_EVENT_ERROR) && err != 0) {
		switch (err) {
		case ECONNREFUSED: return "connection refused";
		case ECONNRESET: return "connection reset";
		case ETIMEDOUT: return "timed out";
		default:
			snprintf(buf, len, "%s", evutil_socket_error_to_string(err));
			if (buf[0] >= 'A' && buf[0] <= 'Z')
				buf[0] = (char)(buf[0] - 'A' + 'a');
			return buf;
		}
	}
	if (!conn->ready && conn->c->tls != NULL)
		return "TLS: connection closed during the TLS handshake";
	return "closed by etcd";
}

/* Check the connection of an idle watch with a PING now and then. */
static void
on_conn_timer(evutil_socket_t fd, short what, void *arg)
{
	struct etcd_conn *conn = arg;
	struct etcd *c = conn->c;
	uint64_t now = clock_ms(), idle;
	struct timeval tv;
	(void)fd;
	(void)what;

	c_enter(c);
	if (!conn->ready || conn->ping_out) {
		conn_fail(conn, "timed out");
		c_leave(c);
		return;
	}
	if (c->watch == NULL || c->watch->conn != conn) {
		c_leave(c);
		return;	/* armed again by the next watch */
	}
	idle = now - conn->last_read;
	if (idle >= c->ping_ms) {
		(void)nghttp2_submit_ping(conn->h2, NGHTTP2_FLAG_NONE, NULL);
		conn->ping_out = true;
		tv = clock_tv(c->timeout_ms);
		conn_flush(conn);
	} else {
		tv = clock_tv(c->ping_ms - idle);
	}
	if (!conn->failed)
		evtimer_add(conn->timer, &tv);
	c_leave(c);
}

/* Start checking conn for its watch stream. */
static void
conn_ping_arm(struct etcd_conn *conn)
{
	struct timeval tv = clock_tv(conn->c->ping_ms);
	if (!conn->ping_out)
		evtimer_add(conn->timer, &tv);
}

static void
on_read(struct bufferevent *bev, void *arg)
{
	struct etcd_conn *conn = arg;
	struct etcd *c = conn->c;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_iovec v[8];
	int n;

	c_enter(c);
	conn->last_read = clock_ms();
	conn->ping_out = false;
	while (!conn->failed && !c->dead && evbuffer_get_length(in) > 0) {
		n = evbuffer_peek(in, -1, NULL, v, 8);
		if (n > 8)
			n = 8;
		size_t used = 0;
		for (int i = 0; i < n && !conn->failed && !c->dead; i++) {
			ssize_t rv;
			conn->in_h2 = true;
			rv = nghttp2_session_mem_recv(conn->h2, v[i].iov_base, v[i].iov_len);
			conn->in_h2 = false;
			if (rv < 0) {
				char why[WHY_MAX];
				snprintf(why, sizeof(why), "HTTP/2: %s", nghttp2_strerror((int)rv));
				conn_fail(conn, why);
				break;
			}
			used += (size_t)rv;
		}
		evbuffer_drain(in, used);
	}
	if (!c->dead && !conn->failed)
		conn_flush(conn);
	if (!c->dead && !conn->failed && !nghttp2_session_want_read(conn->h2) &&
	    !nghttp2_session_want_write(conn->h2))
		conn_fail(conn, "closed by etcd");
	c_leave(c);
}

static void
on_event(struct bufferevent *bev, short what, void *arg)
{
	struct etcd_conn *conn = arg;
	struct etcd *c = conn->c;
	char buf[WHY_MAX];

	c_enter(c);
	if (what & BEV_EVENT_CONNECTED) {
		if (c->tls != NULL) {
			const unsigned char *alpn = NULL;
			unsigned alen = 0;
			SSL_get0_alpn_selected(bufferevent_openssl_get_ssl(bev), &alpn, &alen);
			if (alen != 2 || memcmp(alpn, "h2", 2) != 0) {
				conn_fail(conn, "TLS: server did not agree to HTTP/2");
				c_leave(c);
				return;
			}
		}
		conn->ready = true;
		conn->last_read = clock_ms();
		evtimer_del(conn->timer);
		conn_pump(conn);
	} else if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
		conn_fail(conn, conn_failure(conn, what, buf, sizeof(buf)));
	}
	c_leave(c);
}

static void
conn_free(struct etcd_conn *conn)
{
	struct etcd *c = conn->c;
	struct etcd_call *k;
	while ((k = TAILQ_FIRST(&conn->held)) != NULL) {
		call_detach(k, false);
		call_free(k);
	}
	while ((k = TAILQ_FIRST(&conn->sent)) != NULL) {
		call_detach(k, false);
		call_free(k);
	}
	c->stats.streams -= conn->nstreams;
	if (conn->h2 != NULL)
		nghttp2_session_del(conn->h2);
	if (conn->bev != NULL)
		bufferevent_free(conn->bev);
	event_free(conn->timer);
	if (conn->token != NULL)
		explicit_bzero(conn->token, strlen(conn->token));
	free(conn->token);
	free(conn);
}

/* A new connection to the current endpoint as c->conn, connecting; NULL
 * when it failed at once (after conn_fail). */
static struct etcd_conn *
conn_new(struct etcd *c)
{
	static nghttp2_session_callbacks *cbs;
	struct etcd_conn *conn = xcalloc(1, sizeof(*conn));
	struct etcd_ep *ep = &c->eps[c->cur];
	nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, ETCD_WINDOW },
	};
	struct timeval tv = clock_tv(c->timeout_ms);
	char why[WHY_MAX];
	int one = 1;

	if (cbs == NULL) {
		if (nghttp2_session_callbacks_new(&cbs) != 0)
			log_fatal("out of memory (nghttp2)");
		nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
		nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
		nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
		nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
	}
	conn->c = c;
	conn->ep = ep;
	TAILQ_INIT(&conn->held);
	TAILQ_INIT(&conn->sent);
	TAILQ_INSERT_TAIL(&c->conns, conn, entry);
	c->conn = conn;
	conn->timer = evtimer_new(c->base, on_conn_timer, conn);
	if (conn->timer == NULL || nghttp2_session_client_new(&conn->h2, cbs, conn) != 0)
		log_fatal("out of memory (an etcd connection)");
	if (nghttp2_submit_settings(conn->h2, NGHTTP2_FLAG_NONE, iv, 2) != 0 ||
	    nghttp2_session_set_local_window_size(conn->h2, NGHTTP2_FLAG_NONE, 0,
	    ETCD_WINDOW) != 0)
		log_fatal("out of memory (an etcd connection)");
	if (c->tls != NULL) {
		SSL *ssl = tls_client_new_ssl(c->tls, c->tls_name != NULL ? c->tls_name : ep->host);
		static const unsigned char h2[] = { 2, 'h', '2' };
		SSL_set_alpn_protos(ssl, h2, sizeof(h2));
		conn->bev = bufferevent_openssl_socket_new(c->base, -1, ssl,
		    BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
		if (conn->bev != NULL)
			bufferevent_openssl_set_allow_dirty_shutdown(conn->bev, 1);
		else
			SSL_free(ssl);
	} else {
		conn->bev = bufferevent_socket_new(c->base, -1, BEV_OPT_CLOSE_ON_FREE);
	}
	if (conn->bev == NULL) {
		conn_fail(conn, "cannot make a connection");
		return NULL;
	}
	bufferevent_setcb(conn->bev, on_read, NULL, on_event, conn);
	bufferevent_enable(conn->bev, EV_READ | EV_WRITE);
	if (bufferevent_socket_connect(conn->bev, (struct sockaddr *)&ep->sa, (int)ep->salen) < 0) {
		int err = EVUTIL_SOCKET_ERROR();
		snprintf(why, sizeof(why), "cannot connect: %s",
		    err == 0 ? "error" : evutil_socket_error_to_string(err));
		conn_fail(conn, why);
		return NULL;
	}
	if (bufferevent_getfd(conn->bev) >= 0)
		(void)setsockopt(bufferevent_getfd(conn->bev), IPPROTO_TCP, TCP_NODELAY, &one,
		    sizeof(one));
	evtimer_add(conn->timer, &tv);
	conn_flush(conn);
	return conn;
}

/* Send k (on no list) on the current connection, made if need be; fail it
 * from the loop if that cannot be. */
static void
call_start(struct etcd *c, struct etcd_call *k)
{
	struct etcd_conn *conn = c->conn;
	if (conn == NULL && (conn = conn_new(c)) == NULL) {
		const char *why = strchr(c->why_down, ' ');
		why = why != NULL ? why + 1 : "cannot connect";
		call_down(k, why);
		return;
	}
	k->conn = conn;
	TAILQ_INSERT_TAIL(&conn->held, k, entry);
	conn_pump(conn);
}

/* ---- lanes -------------------------------------------------------------------- */

/* k, of a lane, ends: the next call of its lane goes out (not when the
 * client is being destroyed), and a lane without calls goes. */
static void
lane_leave(struct etcd_call *k)
{
	struct etcd_lane *l = k->lane;
	struct etcd *c = k->c;
	struct etcd_call *next;
	if (l == NULL)
		return;
	k->lane = NULL;
	l->n--;
	if (!c->dead && (next = TAILQ_FIRST(&l->queue)) != NULL) {
		TAILQ_REMOVE(&l->queue, next, entry);
		call_arm(next);
		call_start(c, next);
	}
	if (l->n == 0) {
		hashtab_remove(c->lanes, &l->node);
		free(l);
	}
}

/* Free every lane and the calls still queued on them, untold. */
static void
lanes_free(struct etcd *c)
{
	struct hashtab_iter it;
	struct hashtab_node *n;
	hashtab_iter_init(&it, c->lanes);
	while ((n = hashtab_next(&it)) != NULL) {
		struct etcd_lane *l = (struct etcd_lane *)(void *)n;
		struct etcd_call *k;
		while ((k = TAILQ_FIRST(&l->queue)) != NULL) {
			TAILQ_REMOVE(&l->queue, k, entry);
			k->lane = NULL;
			call_free(k);
		}
		hashtab_remove(c->lanes, n);
		free(l);
	}
	hashtab_destroy(c->lanes);
}

/* ---- the API ------------------------------------------------------------------ */

void
etcd_call(struct etcd *c, enum etcd_method m, const ProtobufCMessage *req, etcd_cb *cb,
    void *arg)
{
	struct etcd_call *k;
	assert((int)m >= 0 && (int)m < K_AUTH);
	c_enter(c);
	c->in_api++;
	k = call_new(c, (int)m, req, cb, arg);
	call_arm(k);
	call_start(c, k);
	c->in_api--;
	c_leave(c);
}

void
etcd_call_lane(struct etcd *c, uint64_t lane, enum etcd_method m, const ProtobufCMessage *req,
    etcd_cb *cb, void *arg)
{
	struct hashtab_node *n;
	struct etcd_lane *l;
	struct etcd_call *k;
	if (lane == 0) {
		etcd_call(c, m, req, cb, arg);
		return;
	}
	assert((int)m >= 0 && (int)m < K_AUTH);
	c_enter(c);
	c->in_api++;
	k = call_new(c, (int)m, req, cb, arg);
	if ((n = hashtab_find(c->lanes, &lane, sizeof(lane))) != NULL) {
		l = (struct etcd_lane *)(void *)n;
	} else {
		l = xcalloc(1, sizeof(*l));
		l->id = lane;
		TAILQ_INIT(&l->queue);
		hashtab_insert(c->lanes, &l->node, &l->id, sizeof(l->id));
	}
	k->lane = l;
	if (l->n++ > 0) {
		/* after the calls before it: its timeout starts when it goes out */
		TAILQ_INSERT_TAIL(&l->queue, k, entry);
	} else {
		call_arm(k);
		call_start(c, k);
	}
	c->in_api--;
	c_leave(c);
}

void
etcd_watch(struct etcd *c, const Etcd__WatchCreateRequest *req)
{
	Etcd__WatchRequest wr = ETCD__WATCH_REQUEST__INIT;
	struct etcd_call *k;

	c_enter(c);
	c->in_api++;
	watch_cancel(c);
	wr.request_union_case = ETCD__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
	wr.create_request = (Etcd__WatchCreateRequest *)req;
	k = call_new(c, K_WATCH, &wr.base, NULL, NULL);
	c->watch = k;
	c->stats.watches++;
	call_start(c, k);
	c->in_api--;
	c_leave(c);
}

void
etcd_watch_stop(struct etcd *c)
{
	c_enter(c);
	watch_cancel(c);
	if (c->conn != NULL)
		conn_flush(c->conn);
	c_leave(c);
}

bool
etcd_watching(const struct etcd *c)
{
	return c->watch != NULL;
}

struct etcd *
etcd_create(struct event_base *base, const struct etcd_options *o,
    const struct etcd_hooks *hooks)
{
	struct etcd *c = xcalloc(1, sizeof(*c));
	c->base = base;
	c->hooks = *hooks;
	c->lanes = hashtab_create(64);
	c->neps = o->nendpoints;
	c->eps = xcalloc(c->neps > 0 ? c->neps : 1, sizeof(*c->eps));
	c->timeout_ms = o->request_timeout_ms > 0 ? o->request_timeout_ms : 1;
	c->ping_ms = o->ping_ms > 0 ? o->ping_ms : c->timeout_ms > ETCD_PING_MIN_MS ?
	    c->timeout_ms : ETCD_PING_MIN_MS;
	c->username = o->username != NULL ? xstrdup(o->username) : NULL;
	c->password = o->password != NULL ? xstrdup(o->password) : NULL;
	c->tls_name = o->tls_server_name != NULL ? xstrdup(o->tls_server_name) : NULL;
	c->tls = o->tls;
	if (c->tls != NULL)
		tls_client_ref(c->tls);
	TAILQ_INIT(&c->conns);
	TAILQ_INIT(&c->graveyard);
	c->failing = later_create(base);
	for (size_t i = 0; i < c->neps; i++) {
		struct etcd_ep *ep = &c->eps[i];
		struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
		struct addr a;
		char port[16];
		const char *why = NULL;
		int rc;

		ep->text = xstrdup(o->endpoints[i]);
		if (addr_parse(ep->text, ADDR_PORT_REQUIRED, &a, &why) < 0 || a.kind != ADDR_TCP) {
			log_error("etcd endpoint '%s': %s", ep->text, why != NULL ? why :
			    "not host:port");
			c->neps = i + 1;
			etcd_destroy(c);
			return NULL;
		}
		snprintf(ep->host, sizeof(ep->host), "%s", a.host);
		snprintf(port, sizeof(port), "%d", a.port);
		/* start-up may block: resolve each name once, here */
		if ((rc = getaddrinfo(a.host, port, &hints, &ai)) != 0) {
			log_error("etcd endpoint '%s': cannot resolve %s: %s", ep->text, a.host,
			    gai_strerror(rc));
			c->neps = i + 1;
			etcd_destroy(c);
			return NULL;
		}
		memcpy(&ep->sa, ai->ai_addr, ai->ai_addrlen);
		ep->salen = ai->ai_addrlen;
		freeaddrinfo(ai);
	}
	if (c->neps == 0) {
		log_error("etcd: no endpoint");
		etcd_destroy(c);
		return NULL;
	}
	snprintf(c->why_down, sizeof(c->why_down), "%s: not connected yet", c->eps[0].text);
	return c;
}

/* Free c and everything of it, telling nobody. */
static void
really_destroy(struct etcd *c)
{
	struct etcd_conn *conn;
	c->dead = true;
	c->depth = 1;	/* what runs from here must not free c again */
	watch_cancel(c);
	while ((conn = TAILQ_FIRST(&c->conns)) != NULL) {
		TAILQ_REMOVE(&c->conns, conn, entry);
		conn_free(conn);
	}
	while ((conn = TAILQ_FIRST(&c->graveyard)) != NULL) {
		TAILQ_REMOVE(&c->graveyard, conn, entry);
		conn_free(conn);
	}
	if (c->failing != NULL) {
		later_run(c->failing);	/* frees the failed calls, untold */
		later_destroy(c->failing);
	}
	lanes_free(c);
	for (size_t i = 0; i < c->neps; i++)
		free(c->eps[i].text);
	free(c->eps);
	tls_client_unref(c->tls);
	free(c->tls_name);
	free(c->username);
	if (c->password != NULL)
		explicit_bzero(c->password, strlen(c->password));
	free(c->password);
	free(c);
}

void
etcd_destroy(struct etcd *c)
{
	if (c == NULL)
		return;
	c->dead = true;
	if (c->depth > 0)
		return;	/* inside a callback: the last c_leave frees it */
	really_destroy(c);
}

bool
etcd_up(const struct etcd *c)
{
	return c->up;
}

const char *
etcd_why_down(const struct etcd *c)
{
	return c->up ? NULL : c->why_down;
}

const char *
etcd_endpoint(const struct etcd *c)
{
	return c->eps[c->cur].text;
}

void
etcd_stats(const struct etcd *c, struct etcd_stats *out)
{
	*out = c->stats;
}
