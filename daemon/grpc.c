/*
 * grpc — a gRPC client transport over HTTP/2 (nghttp2); see grpc.h.
 *
 * A connection (struct grpc_conn) is a bufferevent, plain or OpenSSL, and
 * an nghttp2 client session fed with mem_recv and drained with mem_send.
 * Its one timer first bounds the connect, then checks a silent streaming
 * connection with PINGs. A stream's nghttp2 user data is its owner's struct
 * grpc_stream until the stream ends or is detached; what comes on a stream
 * without one is dropped.
 *
 * Every entry from the loop (the bufferevent's callbacks, the timer) holds
 * the connection (g_enter/g_leave): grpc_conn_free called meanwhile, from a
 * hook, only marks it dead, and the entry frees it on its way out. A
 * connection failed or dead calls no hook and reads nothing more.
 *
 * Why nghttp2 and not gRPC's C core: the core brings its own threads, timers
 * and completion queues, a second event loop beside libevent's to poll and
 * hand results across; nghttp2 is an HTTP/2 state machine driven by the
 * caller's bytes and callbacks, which fits the daemon's single loop, and
 * gRPC over HTTP/2 adds only a five-byte message prefix and two trailers.
 */
#include "grpc.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>

#include "clock.h"
#include "log.h"
#include "num.h"
#include "tls.h"
#include "xmalloc.h"

#define GRPC_WINDOW (1 << 24)	/* our HTTP/2 receive windows */
#define GRPC_META_MAX 4		/* metadata entries of a call at most */
#define WHY_MAX 200		/* bytes of a reason */

/* A connection to one server. */
struct grpc_conn {
	struct event_base *base;	/* the loop */
	struct grpc_hooks hooks;	/* the owner */
	char *authority;		/* :authority of its calls */
	const char *peer;		/* the server, as reasons name it */
	bool tls;			/* over TLS: scheme https */
	uint64_t timeout_ms;		/* the connect's, and a PING answer's */
	uint64_t ping_ms;		/* a silent streaming connection is PINGed then */
	struct bufferevent *bev;	/* the bytes */
	nghttp2_session *h2;		/* the HTTP/2 session */
	struct event *timer;		/* the connect timeout, then the PING check */
	bool ready;			/* connected (TLS: h2 agreed): streams may go */
	bool h2up;			/* the server's SETTINGS came */
	bool draining;			/* the server said GOAWAY: no new streams */
	bool failed;			/* given up */
	bool dead;			/* grpc_conn_free was called */
	bool in_h2;			/* inside nghttp2_session_mem_recv */
	bool ping_out;			/* a PING waits for its answer */
	uint64_t last_read;		/* clock_ms() of the last bytes read */
	int depth;			/* entries from the loop running */
	unsigned nstreams;		/* HTTP/2 streams opened and not closed */
	unsigned nstreaming;		/* streaming calls on it */
};

/* ---- messages --------------------------------------------------------------- */

uint32_t
grpc_frame_len(const uint8_t *p)
{
	return (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
}

uint8_t *
grpc_frame(const ProtobufCMessage *msg, size_t *len)
{
	size_t n = protobuf_c_message_get_packed_size(msg);
	uint8_t *p;

	if (n > UINT32_MAX)
		log_fatal("gRPC: a message of %zu bytes", n);
	p = xmalloc(GRPC_PREFIX + n);
	p[0] = 0;
	p[1] = (uint8_t)(n >> 24);
	p[2] = (uint8_t)(n >> 16);
	p[3] = (uint8_t)(n >> 8);
	p[4] = (uint8_t)n;
	(void)protobuf_c_message_pack(msg, p + GRPC_PREFIX);
	*len = GRPC_PREFIX + n;
	return p;
}

int
grpc_next(struct evbuffer *buf, const ProtobufCMessageDescriptor *desc, size_t max,
    ProtobufCMessage **msg, char *why, size_t whysize)
{
	uint8_t pre[GRPC_PREFIX];
	size_t have = evbuffer_get_length(buf);
	uint32_t len;
	const uint8_t *p;

	*msg = NULL;
	if (have < GRPC_PREFIX)
		return 0;
	evbuffer_copyout(buf, pre, GRPC_PREFIX);
	if (pre[0] != 0) {
		snprintf(why, whysize, pre[0] == 1 ? "a compressed message" :
		    "a message with flags 0x%02x", pre[0]);
		return -1;
	}
	len = grpc_frame_len(pre);
	if (len > max) {
		snprintf(why, whysize, "a message of %lu bytes (over %zu)", (unsigned long)len, max);
		return -1;
	}
	if (have - GRPC_PREFIX < len)
		return 0;
	p = evbuffer_pullup(buf, (ev_ssize_t)(GRPC_PREFIX + (size_t)len));
	*msg = protobuf_c_message_unpack(desc, NULL, len, p + GRPC_PREFIX);
	if (*msg == NULL) {
		snprintf(why, whysize, "a message that is not a %s", desc->short_name);
		return -1;
	}
	evbuffer_drain(buf, GRPC_PREFIX + (size_t)len);
	return 1;
}

int
grpc_parse_status(const char *value, size_t len)
{
	int v = 0;
	if (len == 0 || len > 2)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (value[i] < '0' || value[i] > '9')
			return -1;
		v = v * 10 + (value[i] - '0');
	}
	return v <= GRPC_UNAUTHENTICATED ? v : -1;
}

void
grpc_parse_message(const char *value, size_t len, char *out, size_t outsize)
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
code_of_http(int status)
{
	switch (status) {
	case 400: return GRPC_INTERNAL;
	case 401: return GRPC_UNAUTHENTICATED;
	case 403: return GRPC_PERMISSION_DENIED;
	case 404: return GRPC_UNIMPLEMENTED;
	case 429: case 502: case 503: case 504: return GRPC_UNAVAILABLE;
	default: return GRPC_UNKNOWN;
	}
}

/* The code a stream whose DATA in cannot be read ends with. */
static int
code_of_garbled(struct evbuffer *in)
{
	uint8_t pre[GRPC_PREFIX];
	if (evbuffer_copyout(in, pre, GRPC_PREFIX) == GRPC_PREFIX && pre[0] == 0 &&
	    grpc_frame_len(pre) > GRPC_MESSAGE_MAX)
		return GRPC_RESOURCE_EXHAUSTED;
	return GRPC_INTERNAL;
}

/* ---- streams ------------------------------------------------------------------ */

void
grpc_stream_init(struct grpc_stream *st, const char *path, const ProtobufCMessage *req,
    const ProtobufCMessageDescriptor *resp, unsigned flags)
{
	memset(st, 0, sizeof(*st));
	st->path = path;
	st->resp = resp;
	st->flags = flags;
	st->frame = grpc_frame(req, &st->len);
	st->grpc_status = -1;
	st->in = evbuffer_new();
	if (st->in == NULL)
		log_fatal("out of memory (a gRPC call)");
}

void
grpc_stream_rewind(struct grpc_stream *st)
{
	st->sid = 0;
	st->off = 0;
	st->http_status = 0;
	st->grpc_status = -1;
	free(st->grpc_message);
	st->grpc_message = NULL;
	if (st->msg != NULL)
		protobuf_c_message_free_unpacked(st->msg, NULL);
	st->msg = NULL;
	evbuffer_drain(st->in, evbuffer_get_length(st->in));
}

void
grpc_stream_fini(struct grpc_stream *st)
{
	free(st->frame);
	if (st->in != NULL)
		evbuffer_free(st->in);
	if (st->msg != NULL)
		protobuf_c_message_free_unpacked(st->msg, NULL);
	free(st->grpc_message);
}

bool
grpc_stream_sent(const struct grpc_stream *st)
{
	return st->sid > 0;
}

void
grpc_stream_detach(struct grpc_stream *st, bool cancel)
{
	struct grpc_conn *g = st->conn;
	if (g == NULL)
		return;
	if (!g->failed && !g->dead) {
		(void)nghttp2_session_set_stream_user_data(g->h2, st->sid, NULL);
		if (cancel)
			(void)nghttp2_submit_rst_stream(g->h2, NGHTTP2_FLAG_NONE, st->sid,
			    NGHTTP2_CANCEL);
	}
	if (st->flags & GRPC_STREAMING)
		g->nstreaming--;
	st->conn = NULL;
}

/* The stream of sid on g, NULL when it has none (ended, detached) or g was
 * given up. */
static struct grpc_stream *
stream_of(struct grpc_conn *g, int32_t sid)
{
	if (g->failed || g->dead)
		return NULL;
	return nghttp2_session_get_stream_user_data(g->h2, sid);
}

/* Detach st (cancelled when cancel) and tell its owner r. */
static void
stream_done(struct grpc_conn *g, struct grpc_stream *st, bool cancel, struct grpc_result *r)
{
	r->status = st->grpc_status;
	r->message = st->grpc_message;
	grpc_stream_detach(st, cancel);
	g->hooks.done(g->hooks.arg, st, r);
}

/* A message of st could not be read (why): the stream is cancelled. */
static void
stream_garbled(struct grpc_conn *g, struct grpc_stream *st, const char *why)
{
	struct grpc_result r = { .end = GRPC_GARBLED, .code = code_of_garbled(st->in),
	    .why = why };
	stream_done(g, st, true, &r);
}

/* The server ended st (its status came, or never will): its call ends with
 * that status, or with what stands for it. */
static void
stream_answered(struct grpc_conn *g, struct grpc_stream *st, bool cancel)
{
	struct grpc_result r = { .end = GRPC_ANSWERED };
	char why[WHY_MAX];

	if (st->grpc_status < 0 && st->http_status != 200) {
		r.code = code_of_http(st->http_status);
		snprintf(why, sizeof(why), "HTTP status %d", st->http_status);
		r.why = why;
	} else if (st->grpc_status < 0) {
		r.code = GRPC_INTERNAL;
		r.why = "no gRPC status in the response";
	} else if (st->grpc_status != GRPC_OK) {
		r.code = st->grpc_status;
		if (st->grpc_message != NULL && st->grpc_message[0] != '\0') {
			r.why = st->grpc_message;
		} else {
			snprintf(why, sizeof(why), "gRPC status %d", st->grpc_status);
			r.why = why;
		}
	} else if (st->msg == NULL && !(st->flags & GRPC_STREAMING)) {
		r.code = GRPC_INTERNAL;
		r.why = "no message in the response";
	} else {
		r.msg = st->msg;
	}
	stream_done(g, st, cancel, &r);
}

/* Read a unary call's messages: the first is kept (a GRPC_FIRST_ENDS call
 * ends with it), the others dropped; end: the DATA frame ended the stream. */
static void
unary_read(struct grpc_conn *g, struct grpc_stream *st, bool end)
{
	ProtobufCMessage *msg;
	char why[128];
	int rc;

	while ((rc = grpc_next(st->in, st->resp, GRPC_MESSAGE_MAX, &msg, why,
	    sizeof(why))) == 1) {
		if (st->msg == NULL)
			st->msg = msg;
		else
			protobuf_c_message_free_unpacked(msg, NULL);	/* one only */
	}
	if (rc < 0) {
		stream_garbled(g, st, why);
		return;
	}
	if ((st->flags & GRPC_FIRST_ENDS) && st->msg != NULL) {
		st->grpc_status = GRPC_OK;
		stream_answered(g, st, !end);
	}
}

/* Give the owner a streaming call's messages that came whole, while it
 * keeps the stream. */
static void
streaming_read(struct grpc_conn *g, struct grpc_stream *st)
{
	int32_t sid = st->sid;
	ProtobufCMessage *msg;
	char why[128];
	int rc;

	while ((rc = grpc_next(st->in, st->resp, GRPC_MESSAGE_MAX, &msg, why,
	    sizeof(why))) == 1) {
		g->hooks.message(g->hooks.arg, st, msg);
		protobuf_c_message_free_unpacked(msg, NULL);
		if (stream_of(g, sid) == NULL)
			return;	/* detached, or g given up: st may be gone */
	}
	if (rc < 0)
		stream_garbled(g, st, why);
}

/* ---- nghttp2 callbacks ------------------------------------------------------ */

/* The request body of stream sid: its framed message; a streaming call's
 * stream stays open after it. */
static ssize_t
on_data_read(nghttp2_session *h2, int32_t sid, uint8_t *buf, size_t length,
    uint32_t *flags, nghttp2_data_source *source, void *user_data)
{
	struct grpc_stream *st = stream_of(user_data, sid);
	size_t n;
	(void)h2;
	(void)source;
	if (st == NULL)
		return NGHTTP2_ERR_DEFERRED;
	n = st->len - st->off;
	if (n > length)
		n = length;
	memcpy(buf, st->frame + st->off, n);
	st->off += n;
	if (st->off == st->len) {
		if (!(st->flags & GRPC_STREAMING))
			*flags |= NGHTTP2_DATA_FLAG_EOF;
		else if (n == 0)
			return NGHTTP2_ERR_DEFERRED;	/* the stream stays open */
	}
	return (ssize_t)n;
}

/* A response header or trailer: :status, grpc-status, grpc-message. */
static int
on_header(nghttp2_session *h2, const nghttp2_frame *frame, const uint8_t *name,
    size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data)
{
	struct grpc_stream *st;
	(void)h2;
	(void)flags;
	if (frame->hd.type != NGHTTP2_HEADERS)
		return 0;
	if ((st = stream_of(user_data, frame->hd.stream_id)) == NULL)
		return 0;
	if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
		int s = 0;
		for (size_t i = 0; i < valuelen && i < 3; i++)
			s = s * 10 + (value[i] - '0');
		st->http_status = s;
	} else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
		st->grpc_status = grpc_parse_status((const char *)value, valuelen);
		if (st->grpc_status < 0)
			st->grpc_status = GRPC_UNKNOWN;
	} else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0) {
		free(st->grpc_message);
		st->grpc_message = xmalloc(valuelen + 1);
		grpc_parse_message((const char *)value, valuelen, st->grpc_message, valuelen + 1);
	}
	return 0;
}

/* DATA of a stream: kept until its frame is whole (on_frame_recv). */
static int
on_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t sid, const uint8_t *data,
    size_t len, void *user_data)
{
	struct grpc_stream *st = stream_of(user_data, sid);
	(void)h2;
	(void)flags;
	if (st != NULL)
		evbuffer_add(st->in, data, len);
	return 0;
}

/* A frame came whole: the server's SETTINGS, a stream's DATA (messages),
 * the end of a streaming call, a GOAWAY. */
static int
on_frame_recv(nghttp2_session *h2, const nghttp2_frame *frame, void *user_data)
{
	struct grpc_conn *g = user_data;
	int32_t sid = frame->hd.stream_id;
	bool end = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
	struct grpc_stream *st;
	(void)h2;
	if (g->failed || g->dead)
		return 0;
	switch (frame->hd.type) {
	case NGHTTP2_SETTINGS:
		if (!(frame->hd.flags & NGHTTP2_FLAG_ACK) && !g->h2up) {
			g->h2up = true;
			if (g->hooks.settings != NULL)
				g->hooks.settings(g->hooks.arg);
		}
		break;
	case NGHTTP2_DATA:
		if ((st = stream_of(g, sid)) == NULL)
			break;
		if (!(st->flags & GRPC_STREAMING)) {
			unary_read(g, st, end);
			break;
		}
		streaming_read(g, st);
		/* the stream may be gone (the hook, garbage): look again */
		if (end && (st = stream_of(g, sid)) != NULL)
			stream_answered(g, st, true);
		break;
	case NGHTTP2_HEADERS:
		if (end && (st = stream_of(g, sid)) != NULL && (st->flags & GRPC_STREAMING))
			stream_answered(g, st, true);
		break;
	case NGHTTP2_GOAWAY:
		if (frame->goaway.error_code != NGHTTP2_NO_ERROR) {
			char why[WHY_MAX];
			snprintf(why, sizeof(why), "closed by %s (%s)", g->peer,
			    nghttp2_http2_strerror(frame->goaway.error_code));
			grpc_conn_fail(g, why);
		} else {
			/* the streams it took go on; new ones go to a new connection */
			g->draining = true;
			if (g->hooks.draining != NULL)
				g->hooks.draining(g->hooks.arg);
		}
		break;
	default:
		break;
	}
	return 0;
}

/* A stream closed: a call not ended yet ends now, reset or answered. */
static int
on_stream_close(nghttp2_session *h2, int32_t sid, uint32_t error_code, void *user_data)
{
	struct grpc_conn *g = user_data;
	struct grpc_stream *st;
	(void)h2;

	if (g->nstreams > 0)
		g->nstreams--;
	if ((st = stream_of(g, sid)) == NULL)
		return 0;
	if (st->flags & GRPC_STREAMING) {
		stream_answered(g, st, true);
		return 0;
	}
	if (st->grpc_status < 0 && error_code != NGHTTP2_NO_ERROR) {
		char why[WHY_MAX];
		struct grpc_result r = { .end = GRPC_RESET, .code = GRPC_UNAVAILABLE, .why = why };
		snprintf(why, sizeof(why), "stream reset by %s (%s)", g->peer,
		    nghttp2_http2_strerror(error_code));
		stream_done(g, st, false, &r);
		return 0;
	}
	stream_answered(g, st, false);
	return 0;
}

int
grpc_stream_submit(struct grpc_conn *g, struct grpc_stream *st, const struct grpc_meta *meta,
    size_t n)
{
#define NV(n, v) { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), \
	NGHTTP2_NV_FLAG_NO_COPY_NAME }
	nghttp2_nv nva[6 + GRPC_META_MAX] = {
		NV(":method", "POST"),
		NV(":scheme", g->tls ? "https" : "http"),
		NV(":path", st->path),
		NV(":authority", g->authority),
		NV("content-type", "application/grpc"),
		NV("te", "trailers"),
	};
#undef NV
	size_t nnv = 6;
	nghttp2_data_provider prd = { .source.ptr = NULL, .read_callback = on_data_read };
	int32_t sid;

	if (n > GRPC_META_MAX)
		log_fatal("gRPC: %zu metadata entries", n);
	for (size_t i = 0; i < n; i++, nnv++)
		nva[nnv] = (nghttp2_nv){ (uint8_t *)(uintptr_t)meta[i].name,
		    (uint8_t *)(uintptr_t)meta[i].value, strlen(meta[i].name),
		    strlen(meta[i].value), NGHTTP2_NV_FLAG_NONE };
	sid = nghttp2_submit_request(g->h2, NULL, nva, nnv, &prd, st);
	if (sid < 0) {
		char why[WHY_MAX];
		snprintf(why, sizeof(why), "HTTP/2: %s", nghttp2_strerror(sid));
		grpc_conn_fail(g, why);
		return -1;
	}
	st->conn = g;
	st->sid = sid;
	g->nstreams++;
	if (st->flags & GRPC_STREAMING) {
		/* a long-lived stream: its connection is checked while silent */
		struct timeval tv = clock_tv(g->ping_ms);
		g->nstreaming++;
		if (!g->ping_out)
			evtimer_add(g->timer, &tv);
	}
	return 0;
}

/* ---- connections ------------------------------------------------------------ */

/* Free g and what it holds, telling nobody. */
static void
g_destroy(struct grpc_conn *g)
{
	g->dead = true;
	if (g->h2 != NULL)
		nghttp2_session_del(g->h2);
	if (g->bev != NULL)
		bufferevent_free(g->bev);
	if (g->timer != NULL)
		event_free(g->timer);
	free(g->authority);
	free(g);
}

/* An entry from the loop begins: g stays until it ends. */
static void
g_enter(struct grpc_conn *g)
{
	g->depth++;
}

/* The entry ends: free g if grpc_conn_free was called meanwhile. */
static void
g_leave(struct grpc_conn *g)
{
	if (--g->depth == 0 && g->dead)
		g_destroy(g);
}

void
grpc_conn_free(struct grpc_conn *g)
{
	if (g == NULL)
		return;
	g->dead = true;
	if (g->depth > 0)
		return;	/* inside a hook: the entry running frees it */
	g_destroy(g);
}

void
grpc_conn_fail(struct grpc_conn *g, const char *why)
{
	if (g->failed || g->dead)
		return;
	g->failed = true;
	if (g->bev != NULL)
		bufferevent_disable(g->bev, EV_READ | EV_WRITE);
	evtimer_del(g->timer);
	if (g->hooks.failed != NULL)
		g->hooks.failed(g->hooks.arg, why);
}

/* Write what g's session has to send into its bufferevent: 0, or -1 with
 * why. */
static int
g_send(struct grpc_conn *g, char *why, size_t whysize)
{
	const uint8_t *data;
	ssize_t n;

	while ((n = nghttp2_session_mem_send(g->h2, &data)) > 0)
		bufferevent_write(g->bev, data, (size_t)n);
	if (n < 0) {
		snprintf(why, whysize, "HTTP/2: %s", nghttp2_strerror((int)n));
		return -1;
	}
	return 0;
}

void
grpc_conn_flush(struct grpc_conn *g)
{
	char why[WHY_MAX];

	if (g->in_h2 || g->failed || g->dead)
		return;
	if (g_send(g, why, sizeof(why)) < 0) {
		grpc_conn_fail(g, why);
		return;
	}
	if (g->draining && g->nstreams == 0 && g->hooks.drained != NULL)
		g->hooks.drained(g->hooks.arg);
}

bool
grpc_conn_ready(const struct grpc_conn *g)
{
	return g->ready && !g->failed && !g->dead;
}

bool
grpc_conn_h2up(const struct grpc_conn *g)
{
	return g->h2up;
}

unsigned
grpc_conn_streams(const struct grpc_conn *g)
{
	return g->nstreams;
}

/* Why g's bufferevent failed, from its event what. */
static const char *
g_failure(struct grpc_conn *g, short what, char *buf, size_t len)
{
	int err = EVUTIL_SOCKET_ERROR();
	char tls[WHY_MAX - 8];

	if (g->tls && tls_bev_failure(g->bev, tls, sizeof(tls)) != NULL) {
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
	if (!g->ready && g->tls)
		return "TLS: connection closed during the TLS handshake";
	snprintf(buf, len, "closed by %s", g->peer);
	return buf;
}

/* The connect did not finish in time, or a PING was not answered: give g
 * up; else check a silent streaming connection with a PING. */
static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
	struct grpc_conn *g = arg;
	uint64_t now = clock_ms(), idle;
	struct timeval tv;
	(void)fd;
	(void)what;

	g_enter(g);
	if (!g->ready || g->ping_out) {
		grpc_conn_fail(g, "timed out");
	} else if (g->nstreaming > 0) {
		idle = now - g->last_read;
		if (idle >= g->ping_ms) {
			(void)nghttp2_submit_ping(g->h2, NGHTTP2_FLAG_NONE, NULL);
			g->ping_out = true;
			tv = clock_tv(g->timeout_ms);
			grpc_conn_flush(g);
		} else {
			tv = clock_tv(g->ping_ms - idle);
		}
		if (!g->failed && !g->dead)
			evtimer_add(g->timer, &tv);
	}	/* else armed again by the next streaming call */
	g_leave(g);
}

/* Bytes from the server: through the HTTP/2 session, which calls the
 * hooks; then what it has to send. */
static void
on_read(struct bufferevent *bev, void *arg)
{
	struct grpc_conn *g = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_iovec v[8];
	int n;

	g_enter(g);
	g->last_read = clock_ms();
	g->ping_out = false;
	while (!g->failed && !g->dead && evbuffer_get_length(in) > 0) {
		size_t used = 0;
		n = evbuffer_peek(in, -1, NULL, v, 8);
		if (n > 8)
			n = 8;
		for (int i = 0; i < n && !g->failed && !g->dead; i++) {
			ssize_t rv;
			g->in_h2 = true;
			rv = nghttp2_session_mem_recv(g->h2, v[i].iov_base, v[i].iov_len);
			g->in_h2 = false;
			if (rv < 0) {
				char why[WHY_MAX];
				snprintf(why, sizeof(why), "HTTP/2: %s", nghttp2_strerror((int)rv));
				grpc_conn_fail(g, why);
				break;
			}
			used += (size_t)rv;
		}
		evbuffer_drain(in, used);
	}
	grpc_conn_flush(g);
	if (!g->failed && !g->dead && !nghttp2_session_want_read(g->h2) &&
	    !nghttp2_session_want_write(g->h2)) {
		char why[WHY_MAX];
		snprintf(why, sizeof(why), "closed by %s", g->peer);
		grpc_conn_fail(g, why);
	}
	g_leave(g);
}

/* Connected (TLS: with h2 agreed), or the connection failed. */
static void
on_event(struct bufferevent *bev, short what, void *arg)
{
	struct grpc_conn *g = arg;
	char buf[WHY_MAX];

	g_enter(g);
	if (g->failed || g->dead) {
		g_leave(g);
		return;
	}
	if (what & BEV_EVENT_CONNECTED) {
		if (g->tls) {
			const unsigned char *alpn = NULL;
			unsigned alen = 0;
			SSL_get0_alpn_selected(bufferevent_openssl_get_ssl(bev), &alpn, &alen);
			if (alen != 2 || memcmp(alpn, "h2", 2) != 0) {
				grpc_conn_fail(g, "TLS: server did not agree to HTTP/2");
				g_leave(g);
				return;
			}
		}
		g->ready = true;
		g->last_read = clock_ms();
		evtimer_del(g->timer);
		if (g->hooks.ready != NULL)
			g->hooks.ready(g->hooks.arg);
	} else if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
		grpc_conn_fail(g, g_failure(g, what, buf, sizeof(buf)));
	}
	g_leave(g);
}

struct grpc_conn *
grpc_conn_create(struct event_base *base, const struct grpc_options *o,
    const struct grpc_hooks *hooks, char *why, size_t whysize)
{
	static nghttp2_session_callbacks *cbs;
	struct grpc_conn *g = xcalloc(1, sizeof(*g));
	nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, GRPC_WINDOW },
	};
	struct timeval tv = clock_tv(o->timeout_ms);
	int one = 1;

	if (cbs == NULL) {
		if (nghttp2_session_callbacks_new(&cbs) != 0)
			log_fatal("out of memory (nghttp2)");
		nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
		nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
		nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
		nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
	}
	g->base = base;
	g->hooks = *hooks;
	g->authority = xstrdup(o->authority);
	g->peer = o->peer;
	g->tls = o->tls != NULL;
	g->timeout_ms = o->timeout_ms;
	g->ping_ms = o->ping_ms;
	g->timer = evtimer_new(base, on_timer, g);
	if (g->timer == NULL || nghttp2_session_client_new(&g->h2, cbs, g) != 0)
		log_fatal("out of memory (a gRPC connection)");
	if (nghttp2_submit_settings(g->h2, NGHTTP2_FLAG_NONE, iv, 2) != 0 ||
	    nghttp2_session_set_local_window_size(g->h2, NGHTTP2_FLAG_NONE, 0,
	    GRPC_WINDOW) != 0)
		log_fatal("out of memory (a gRPC connection)");
	if (o->tls != NULL) {
		SSL *ssl = tls_client_new_ssl(o->tls, o->tls_name);
		static const unsigned char h2[] = { 2, 'h', '2' };
		SSL_set_alpn_protos(ssl, h2, sizeof(h2));
		g->bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
		    BEV_OPT_CLOSE_ON_FREE);
		if (g->bev != NULL)
			bufferevent_openssl_set_allow_dirty_shutdown(g->bev, 1);
		else
			SSL_free(ssl);
	} else {
		g->bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
	}
	if (g->bev == NULL) {
		snprintf(why, whysize, "cannot make a connection");
		g_destroy(g);
		return NULL;
	}
	bufferevent_setcb(g->bev, on_read, NULL, on_event, g);
	bufferevent_enable(g->bev, EV_READ | EV_WRITE);
	if (bufferevent_socket_connect(g->bev, o->addr, (int)o->addrlen) < 0) {
		int err = EVUTIL_SOCKET_ERROR();
		snprintf(why, whysize, "cannot connect: %s",
		    err == 0 ? "error" : evutil_socket_error_to_string(err));
		g_destroy(g);
		return NULL;
	}
	if (bufferevent_getfd(g->bev) >= 0)
		(void)setsockopt(bufferevent_getfd(g->bev), IPPROTO_TCP, TCP_NODELAY, &one,
		    sizeof(one));
	if (g_send(g, why, whysize) < 0) {	/* the SETTINGS, written once connected */
		g_destroy(g);
		return NULL;
	}
	evtimer_add(g->timer, &tv);
	return g;
}
