/*
 * fake_grpc — a fake etcd gRPC server for the tests; see fake_grpc.h.
 */
#include "fake_grpc.h"

#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <nghttp2/nghttp2.h>

#include "grpc.h"

#define FG_ROUTES 16		/* routes of a fake */

/* How requests to one path are answered. */
struct fg_route {
	char path[128];			/* "" for a free slot */
	enum { FG_OK, FG_ERROR, FG_FN } kind;
	uint8_t *frame;			/* FG_OK: the message, framed */
	size_t len;
	int code;			/* FG_ERROR */
	char message[256];
	bool trailers_only;
	fake_grpc_fn *fn;		/* FG_FN */
	void *arg;
};

/* A connection the fake accepted. */
struct fake_grpc_conn {
	struct fake_grpc *f;
	int no;				/* 1, 2, ... */
	struct bufferevent *bev;
	nghttp2_session *h2;
	bool in_h2;			/* inside mem_recv */
	LIST_ENTRY(fake_grpc_conn) entry;
};

struct fake_grpc {
	struct event_base *base;
	struct evconnlistener *lis;
	char endpoint[32];
	struct fg_route routes[FG_ROUTES];
	struct fake_grpc_req **reqs;	/* every request, in order */
	int nreqs, cap;
	int accepted;
	bool deaf;			/* read nothing (fake_grpc_deaf) */
	LIST_HEAD(, fake_grpc_conn) conns;
};

static void fg_flush(struct fake_grpc_conn *fc);

/* ---- connections ----------------------------------------------------------- */

static void
fg_conn_free(struct fake_grpc_conn *fc)
{
	struct fake_grpc *f = fc->f;
	for (int i = 0; i < f->nreqs; i++)
		if (f->reqs[i]->conn == fc)
			f->reqs[i]->conn = NULL;
	LIST_REMOVE(fc, entry);
	nghttp2_session_del(fc->h2);
	bufferevent_free(fc->bev);
	free(fc);
}

static struct fake_grpc_req *
fg_req_of(nghttp2_session *h2, int32_t sid)
{
	return nghttp2_session_get_stream_user_data(h2, sid);
}

static ssize_t
fg_data_read(nghttp2_session *h2, int32_t sid, uint8_t *buf, size_t length,
    uint32_t *flags, nghttp2_data_source *source, void *user_data)
{
	struct fake_grpc_req *req = source->ptr;
	size_t n = evbuffer_get_length(req->out);
	(void)user_data;
	if (n == 0 && !req->trailers)
		return NGHTTP2_ERR_DEFERRED;
	if (n > length)
		n = length;
	evbuffer_remove(req->out, buf, n);
	if (req->trailers && evbuffer_get_length(req->out) == 0) {
		char code[16];
		nghttp2_nv nv[2] = {
			{ (uint8_t *)"grpc-status", (uint8_t *)code, 11, 0, NGHTTP2_NV_FLAG_NONE },
			{ (uint8_t *)"grpc-message", (uint8_t *)req->message, 12,
			    strlen(req->message), NGHTTP2_NV_FLAG_NONE },
		};
		snprintf(code, sizeof(code), "%d", req->status);
		nv[0].valuelen = strlen(code);
		*flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
		req->trailers = false;
		ck_assert_int_eq(nghttp2_submit_trailer(h2, sid, nv, req->message[0] != '\0' ? 2 : 1),
		    0);
	}
	return (ssize_t)n;
}

/* Send req's response headers (once). */
static void
fg_headers(struct fake_grpc_req *req)
{
	nghttp2_nv nv[] = {
		{ (uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16,
		    NGHTTP2_NV_FLAG_NONE },
	};
	nghttp2_data_provider prd = { .source.ptr = req, .read_callback = fg_data_read };
	if (req->replied)
		return;
	req->replied = true;
	ck_assert_int_eq(nghttp2_submit_response(req->conn->h2, req->sid, nv, 2, &prd), 0);
}

/* Whether req can still be answered. */
static bool
fg_live(const struct fake_grpc_req *req)
{
	return req->conn != NULL && !req->closed && !req->done;
}

void
fake_grpc_send(struct fake_grpc_req *req, const void *p, size_t len)
{
	if (!fg_live(req))
		return;
	fg_headers(req);
	evbuffer_add(req->out, p, len);
	nghttp2_session_resume_data(req->conn->h2, req->sid);
	fg_flush(req->conn);
}

void
fake_grpc_send_msg(struct fake_grpc_req *req, const ProtobufCMessage *msg)
{
	size_t len;
	uint8_t *p = grpc_frame(msg, &len);
	fake_grpc_send(req, p, len);
	free(p);
}

void
fake_grpc_end(struct fake_grpc_req *req, int code, const char *message)
{
	if (!fg_live(req))
		return;
	fg_headers(req);
	req->done = true;
	req->trailers = true;
	req->status = code;
	snprintf(req->message, sizeof(req->message), "%s", message != NULL ? message : "");
	nghttp2_session_resume_data(req->conn->h2, req->sid);
	fg_flush(req->conn);
}

void
fake_grpc_reply(struct fake_grpc_req *req, const ProtobufCMessage *msg)
{
	fake_grpc_send_msg(req, msg);
	fake_grpc_end(req, 0, NULL);
}

/* grpc-message's percent-encoding (gRPC's: outside 0x20..0x7e, and '%'). */
static void
fg_percent(const char *s, char *out, size_t size)
{
	size_t j = 0;
	for (; *s != '\0' && j + 4 < size; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch < 0x20 || ch > 0x7e || ch == '%')
			j += (size_t)snprintf(out + j, size - j, "%%%02X", ch);
		else
			out[j++] = (char)ch;
	}
	out[j] = '\0';
}

void
fake_grpc_fail(struct fake_grpc_req *req, int code, const char *message, bool trailers_only)
{
	char msg[768], st[16];
	if (!fg_live(req))
		return;
	fg_percent(message != NULL ? message : "", msg, sizeof(msg));
	if (!trailers_only || req->replied) {
		fg_headers(req);
		req->done = true;
		req->trailers = true;
		req->status = code;
		snprintf(req->message, sizeof(req->message), "%s", msg);
		nghttp2_session_resume_data(req->conn->h2, req->sid);
		fg_flush(req->conn);
		return;
	}
	snprintf(st, sizeof(st), "%d", code);
	nghttp2_nv nv[] = {
		{ (uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16,
		    NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)"grpc-status", (uint8_t *)st, 11, strlen(st), NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)"grpc-message", (uint8_t *)msg, 12, strlen(msg), NGHTTP2_NV_FLAG_NONE },
	};
	req->replied = true;
	req->done = true;
	ck_assert_int_eq(nghttp2_submit_response(req->conn->h2, req->sid, nv,
	    msg[0] != '\0' ? 4 : 3, NULL), 0);
	fg_flush(req->conn);
}

void
fake_grpc_reset(struct fake_grpc_req *req, uint32_t error_code)
{
	if (!fg_live(req))
		return;
	req->done = true;
	nghttp2_submit_rst_stream(req->conn->h2, NGHTTP2_FLAG_NONE, req->sid, error_code);
	fg_flush(req->conn);
}

/* Answer req from its route, if it has one. */
static void
fg_route(struct fake_grpc *f, struct fake_grpc_req *req)
{
	for (int i = 0; i < FG_ROUTES; i++) {
		struct fg_route *r = &f->routes[i];
		if (strcmp(r->path, req->path) != 0)
			continue;
		switch (r->kind) {
		case FG_OK:
			fake_grpc_send(req, r->frame, r->len);
			fake_grpc_end(req, 0, NULL);
			break;
		case FG_ERROR:
			fake_grpc_fail(req, r->code, r->message, r->trailers_only);
			break;
		case FG_FN:
			r->fn(r->arg, req);
			break;
		}
		return;
	}
}

/* ---- nghttp2 callbacks ------------------------------------------------------ */

static int
fg_begin_headers(nghttp2_session *h2, const nghttp2_frame *frame, void *user_data)
{
	struct fake_grpc_conn *fc = user_data;
	struct fake_grpc *f = fc->f;
	struct fake_grpc_req *req;
	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	req = calloc(1, sizeof(*req));
	ck_assert_ptr_nonnull(req);
	req->f = f;
	req->conn = fc;
	req->conn_no = fc->no;
	req->sid = frame->hd.stream_id;
	req->out = evbuffer_new();
	if (f->nreqs == f->cap) {
		f->cap = f->cap > 0 ? f->cap * 2 : 32;
		f->reqs = realloc(f->reqs, (size_t)f->cap * sizeof(*f->reqs));
		ck_assert_ptr_nonnull(f->reqs);
	}
	f->reqs[f->nreqs++] = req;
	nghttp2_session_set_stream_user_data(h2, req->sid, req);
	return 0;
}

static void
fg_copy(char *dst, size_t size, const uint8_t *v, size_t len)
{
	if (len >= size)
		len = size - 1;
	memcpy(dst, v, len);
	dst[len] = '\0';
}

static int
fg_header(nghttp2_session *h2, const nghttp2_frame *frame, const uint8_t *name,
    size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data)
{
	struct fake_grpc_req *req = fg_req_of(h2, frame->hd.stream_id);
	(void)flags;
	(void)user_data;
	if (req == NULL || frame->hd.type != NGHTTP2_HEADERS)
		return 0;
#define IS(s) (namelen == sizeof(s) - 1 && memcmp(name, s, namelen) == 0)
	if (IS(":path"))
		fg_copy(req->path, sizeof(req->path), value, valuelen);
	else if (IS(":method"))
		fg_copy(req->method, sizeof(req->method), value, valuelen);
	else if (IS(":scheme"))
		fg_copy(req->scheme, sizeof(req->scheme), value, valuelen);
	else if (IS(":authority"))
		fg_copy(req->authority, sizeof(req->authority), value, valuelen);
	else if (IS("content-type"))
		fg_copy(req->ctype, sizeof(req->ctype), value, valuelen);
	else if (IS("te"))
		fg_copy(req->te, sizeof(req->te), value, valuelen);
	else if (IS("token")) {
		fg_copy(req->token, sizeof(req->token), value, valuelen);
		req->has_token = true;
	}
#undef IS
	return 0;
}

/* Keep len more bytes of req's DATA (req NULL: a stream the fake forgot). */
static void
fg_body_add(struct fake_grpc_req *req, const uint8_t *data, size_t len)
{
	if (req == NULL)
		return;
	req->body = realloc(req->body, req->len + len + 1);
	ck_assert_ptr_nonnull(req->body);
	memcpy(req->body + req->len, data, len);
	req->len += len;
}

static int
fg_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t sid, const uint8_t *data,
    size_t len, void *user_data)
{
	(void)flags;
	(void)user_data;
	fg_body_add(fg_req_of(h2, sid), data, len);
	return 0;
}

static int
fg_frame_recv(nghttp2_session *h2, const nghttp2_frame *frame, void *user_data)
{
	struct fake_grpc_conn *fc = user_data;
	struct fake_grpc_req *req;
	if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
		return 0;
	if ((req = fg_req_of(h2, frame->hd.stream_id)) == NULL)
		return 0;
	if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
		req->ended = true;
		fg_route(fc->f, req);
	}
	return 0;
}

static int
fg_stream_close(nghttp2_session *h2, int32_t sid, uint32_t error_code, void *user_data)
{
	struct fake_grpc_req *req = fg_req_of(h2, sid);
	(void)user_data;
	if (req != NULL) {
		req->closed = true;
		req->close_code = error_code;
	}
	return 0;
}

/* ---- I/O ----------------------------------------------------------------------- */

static void
fg_flush(struct fake_grpc_conn *fc)
{
	const uint8_t *data;
	ssize_t n;
	if (fc->in_h2)
		return;
	while ((n = nghttp2_session_mem_send(fc->h2, &data)) > 0)
		bufferevent_write(fc->bev, data, (size_t)n);
}

static void
fg_read(struct bufferevent *bev, void *arg)
{
	struct fake_grpc_conn *fc = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len = evbuffer_get_length(in);
	ssize_t rv;

	fc->in_h2 = true;
	rv = nghttp2_session_mem_recv(fc->h2, evbuffer_pullup(in, -1), len);
	fc->in_h2 = false;
	if (rv < 0) {
		fg_conn_free(fc);
		return;
	}
	evbuffer_drain(in, len);
	fg_flush(fc);
}

static void
fg_event(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		fg_conn_free(arg);
}

static void
fg_accept(struct evconnlistener *lis, evutil_socket_t fd, struct sockaddr *sa, int salen,
    void *arg)
{
	struct fake_grpc *f = arg;
	struct fake_grpc_conn *fc = calloc(1, sizeof(*fc));
	nghttp2_session_callbacks *cbs;
	nghttp2_settings_entry iv[] = { { NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1000 } };
	(void)lis;
	(void)sa;
	(void)salen;

	ck_assert_ptr_nonnull(fc);
	fc->f = f;
	fc->no = ++f->accepted;
	fc->bev = bufferevent_socket_new(f->base, fd, BEV_OPT_CLOSE_ON_FREE);
	ck_assert_ptr_nonnull(fc->bev);
	ck_assert_int_eq(nghttp2_session_callbacks_new(&cbs), 0);
	nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, fg_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cbs, fg_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, fg_data_chunk);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, fg_frame_recv);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, fg_stream_close);
	ck_assert_int_eq(nghttp2_session_server_new(&fc->h2, cbs, fc), 0);
	nghttp2_session_callbacks_del(cbs);
	nghttp2_submit_settings(fc->h2, NGHTTP2_FLAG_NONE, iv, 1);
	LIST_INSERT_HEAD(&f->conns, fc, entry);
	bufferevent_setcb(fc->bev, fg_read, NULL, fg_event, fc);
	bufferevent_enable(fc->bev, f->deaf ? EV_WRITE : EV_READ | EV_WRITE);
	fg_flush(fc);
}

/* ---- the fake ------------------------------------------------------------------ */

struct fake_grpc *
fake_grpc_new(struct event_base *base)
{
	struct fake_grpc *f = calloc(1, sizeof(*f));
	struct sockaddr_in sin = { .sin_family = AF_INET,
	    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sin);

	ck_assert_ptr_nonnull(f);
	f->base = base;
	LIST_INIT(&f->conns);
	f->lis = evconnlistener_new_bind(base, fg_accept, f, LEV_OPT_CLOSE_ON_FREE |
	    LEV_OPT_REUSEABLE, 16, (struct sockaddr *)&sin, sizeof(sin));
	ck_assert_ptr_nonnull(f->lis);
	ck_assert_int_eq(getsockname(evconnlistener_get_fd(f->lis), (struct sockaddr *)&sin,
	    &sl), 0);
	snprintf(f->endpoint, sizeof(f->endpoint), "127.0.0.1:%d", ntohs(sin.sin_port));
	return f;
}

void
fake_grpc_drop(struct fake_grpc *f)
{
	while (!LIST_EMPTY(&f->conns))
		fg_conn_free(LIST_FIRST(&f->conns));
}

void
fake_grpc_goaway(struct fake_grpc *f, uint32_t error_code)
{
	struct fake_grpc_conn *fc;
	LIST_FOREACH(fc, &f->conns, entry) {
		ck_assert_int_eq(nghttp2_submit_goaway(fc->h2, NGHTTP2_FLAG_NONE,
		    nghttp2_session_get_last_proc_stream_id(fc->h2), error_code, NULL, 0), 0);
		fg_flush(fc);
	}
}

void
fake_grpc_free(struct fake_grpc *f)
{
	if (f == NULL)
		return;
	fake_grpc_drop(f);
	evconnlistener_free(f->lis);
	for (int i = 0; i < f->nreqs; i++) {
		evbuffer_free(f->reqs[i]->out);
		free(f->reqs[i]->body);
		free(f->reqs[i]);
	}
	free(f->reqs);
	for (int i = 0; i < FG_ROUTES; i++)
		free(f->routes[i].frame);
	free(f);
}

const char *
fake_grpc_endpoint(const struct fake_grpc *f)
{
	return f->endpoint;
}

void
fake_grpc_deaf(struct fake_grpc *f, bool deaf)
{
	struct fake_grpc_conn *fc;
	f->deaf = deaf;
	LIST_FOREACH(fc, &f->conns, entry) {
		if (deaf)
			bufferevent_disable(fc->bev, EV_READ);
		else
			bufferevent_enable(fc->bev, EV_READ);
	}
}

int
fake_grpc_accepted(const struct fake_grpc *f)
{
	return f->accepted;
}

int
fake_grpc_open(const struct fake_grpc *f)
{
	int n = 0;
	const struct fake_grpc_conn *fc;
	LIST_FOREACH(fc, &f->conns, entry)
		n++;
	return n;
}

/* The route of path, made if need be. */
static struct fg_route *
fg_route_of(struct fake_grpc *f, const char *path)
{
	int free_at = -1;
	for (int i = 0; i < FG_ROUTES; i++) {
		if (strcmp(f->routes[i].path, path) == 0) {
			free(f->routes[i].frame);
			f->routes[i].frame = NULL;
			return &f->routes[i];
		}
		if (free_at < 0 && f->routes[i].path[0] == '\0')
			free_at = i;
	}
	ck_assert_int_ge(free_at, 0);
	snprintf(f->routes[free_at].path, sizeof(f->routes[free_at].path), "%s", path);
	return &f->routes[free_at];
}

void
fake_grpc_route(struct fake_grpc *f, const char *path, const ProtobufCMessage *msg)
{
	struct fg_route *r = fg_route_of(f, path);
	r->kind = FG_OK;
	r->frame = grpc_frame(msg, &r->len);
}

void
fake_grpc_route_error(struct fake_grpc *f, const char *path, int code, const char *message,
    bool trailers_only)
{
	struct fg_route *r = fg_route_of(f, path);
	r->kind = FG_ERROR;
	r->code = code;
	snprintf(r->message, sizeof(r->message), "%s", message != NULL ? message : "");
	r->trailers_only = trailers_only;
}

void
fake_grpc_route_fn(struct fake_grpc *f, const char *path, fake_grpc_fn *fn, void *arg)
{
	struct fg_route *r = fg_route_of(f, path);
	r->kind = FG_FN;
	r->fn = fn;
	r->arg = arg;
}

void
fake_grpc_unroute(struct fake_grpc *f, const char *path)
{
	for (int i = 0; i < FG_ROUTES; i++) {
		if (strcmp(f->routes[i].path, path) == 0) {
			free(f->routes[i].frame);
			memset(&f->routes[i], 0, sizeof(f->routes[i]));
		}
	}
}

int
fake_grpc_count(const struct fake_grpc *f, const char *path)
{
	int n = 0;
	for (int i = 0; i < f->nreqs; i++)
		n += path == NULL || strcmp(f->reqs[i]->path, path) == 0;
	return n;
}

struct fake_grpc_req *
fake_grpc_nth(const struct fake_grpc *f, int i)
{
	return i >= 0 && i < f->nreqs ? f->reqs[i] : NULL;
}

struct fake_grpc_req *
fake_grpc_last(const struct fake_grpc *f, const char *path)
{
	for (int i = f->nreqs - 1; i >= 0; i--)
		if (strcmp(f->reqs[i]->path, path) == 0)
			return f->reqs[i];
	return NULL;
}

struct fake_grpc_req *
fake_grpc_pending(const struct fake_grpc *f, const char *path)
{
	for (int i = 0; i < f->nreqs; i++) {
		struct fake_grpc_req *req = f->reqs[i];
		if (strcmp(req->path, path) == 0 && fg_live(req) && !req->replied)
			return req;
	}
	return NULL;
}

int
fake_grpc_npending(const struct fake_grpc *f, const char *path)
{
	int n = 0;
	for (int i = 0; i < f->nreqs; i++) {
		struct fake_grpc_req *req = f->reqs[i];
		n += strcmp(req->path, path) == 0 && fg_live(req) && !req->replied;
	}
	return n;
}

ProtobufCMessage *
fake_grpc_req_msg(const struct fake_grpc_req *req, const ProtobufCMessageDescriptor *desc)
{
	size_t n;
	if (req->len < GRPC_PREFIX)
		return NULL;
	n = grpc_frame_len(req->body);
	if (req->len - GRPC_PREFIX < n)
		return NULL;
	return protobuf_c_message_unpack(desc, NULL, n, req->body + GRPC_PREFIX);
}

bool
fake_grpc_flushed(const struct fake_grpc *f)
{
	const struct fake_grpc_conn *fc;
	LIST_FOREACH(fc, &f->conns, entry)
		if (evbuffer_get_length(bufferevent_get_output(fc->bev)) > 0)
			return false;
	return true;
}
