/*
 * check_etcd — unit tests of the etcd v3 JSON-gateway client (daemon/etcd.c):
 * base64 and integer fields as etcd writes them; unary calls, their errors,
 * endpoints that do not answer, failover and timeouts; the watch stream cut
 * into messages whatever the chunks; authentication; a client destroyed
 * with work in flight; and the etcd backend (be_etcd.c) on a fake, for late
 * answers about a lease or key it has given up since.
 *
 * No etcd: each test talks to fake gateways of its own, evhttp servers on
 * 127.0.0.1 (port 0) running on the same event loop as the client. A fake
 * answers a path from its route table and keeps every other request pending
 * until the test answers it or the fake is freed; it streams the watch
 * response chunk by chunk as the test says. The test runs the loop itself,
 * one pass at a time, until what it waits for happened, and fails after
 * LIMIT_MS.
 *
 * The "regressions" case holds tests of bugs found here once.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "backend.h"
#include "clock.h"
#include "conf.h"
#include "etcd.h"
#include "etcd_internal.h"
#include "log.h"
#include "suite.h"

#define LIMIT_MS 3000		/* longest a test waits for what it expects */
#define TICK_MS 10		/* the loop wakes up at least this often */
#define SETTLE_MS 100		/* how long a test lets the loop run to see nothing happen */
#define ROUTES_MAX 8		/* routes of a fake */
#define SEEN_MAX 32		/* requests a fake remembers */
#define PENDING_MAX 16		/* requests a fake keeps unanswered */
#define LOG_MAX 32		/* hook calls the tests remember */
#define TIMEOUT_MS 1000		/* the clients' request timeout, unless a test says */

/* Run the loop until cond holds; fail the test after LIMIT_MS. */
#define RUN_UNTIL(cond) SUITE_RUN_UNTIL(base, cond, LIMIT_MS)

/* ---- fake gateways --------------------------------------------------------- */

/* How a fake answers the requests to one path. */
struct route {
	const char *path;	/* the request's URI */
	int status;		/* the HTTP status of the answer */
	const char *body;	/* its body (bytes up to the NUL) */
};

/* A request as a fake received it. */
struct seen {
	char *path;		/* its URI */
	char *body;		/* its body, NUL-terminated */
	char *ctype;		/* its Content-Type, NULL if none */
	char *auth;		/* its Authorization, NULL if none */
};

/* A request a fake has not finished answering. */
struct pending {
	struct evhttp_request *req;	/* owned by evhttp until answered */
	bool started;			/* a chunked reply was started */
};

/* A fake gateway. */
struct fake {
	struct evhttp *http;			/* the server */
	int port;				/* its port on 127.0.0.1 */
	char endpoint[32];			/* "127.0.0.1:port" */
	struct route routes[ROUTES_MAX];	/* answered paths, up to a NULL path */
	struct seen seen[SEEN_MAX];		/* requests received, in order */
	int nseen;
	struct pending pending[PENDING_MAX];	/* requests not answered (yet) */
	int npending;
	struct evhttp_request *watch;		/* the last watch request, or NULL */
	int nwatch;				/* watch requests received */
};

static struct event_base *base;		/* the test's loop */
static struct event *tick;		/* wakes the loop every TICK_MS */
static struct fake *fk;			/* the fake the fixture starts */
static struct etcd *cli;		/* the client under test */

static char *
dup_or_null(const char *s)
{
	return s != NULL ? strdup(s) : NULL;
}

/* Keep req unanswered (the test or fake_free answers it). */
static void
fake_hold(struct fake *f, struct evhttp_request *req)
{
	ck_assert_int_lt(f->npending, PENDING_MAX);
	f->pending[f->npending].req = req;
	f->pending[f->npending].started = false;
	f->npending++;
}

static struct pending *
fake_pending_of(struct fake *f, struct evhttp_request *req)
{
	for (int i = 0; i < f->npending; i++)
		if (f->pending[i].req == req)
			return &f->pending[i];
	return NULL;
}

static void
fake_unhold(struct fake *f, struct evhttp_request *req)
{
	struct pending *p = fake_pending_of(f, req);
	ck_assert_ptr_nonnull(p);
	*p = f->pending[--f->npending];
}

/* Answer req with status and the bytes of body. */
static void
fake_answer(struct evhttp_request *req, int status, const char *body)
{
	struct evbuffer *b = evbuffer_new();
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
	    "application/json");
	evbuffer_add(b, body, strlen(body));
	evhttp_send_reply(req, status, status == HTTP_OK ? "OK" : "Error", b);
	evbuffer_free(b);
}

/* Every request: remember it, answer it from the routes, or keep it. */
static void
fake_request(struct evhttp_request *req, void *arg)
{
	struct fake *f = arg;
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	size_t len = evbuffer_get_length(in);
	const char *path = evhttp_request_get_uri(req);
	struct seen *s;

	ck_assert_int_lt(f->nseen, SEEN_MAX);
	s = &f->seen[f->nseen++];
	s->path = strdup(path);
	s->body = calloc(1, len + 1);
	evbuffer_remove(in, s->body, len);
	s->ctype = dup_or_null(evhttp_find_header(h, "Content-Type"));
	s->auth = dup_or_null(evhttp_find_header(h, "Authorization"));

	if (strcmp(path, "/v3/watch") == 0) {
		f->watch = req;
		f->nwatch++;
		fake_hold(f, req);
		return;
	}
	for (int i = 0; i < ROUTES_MAX && f->routes[i].path != NULL; i++) {
		if (strcmp(f->routes[i].path, path) == 0) {
			fake_answer(req, f->routes[i].status, f->routes[i].body);
			return;
		}
	}
	fake_hold(f, req);
}

/* A new fake listening on a free port of 127.0.0.1. */
static struct fake *
fake_new(void)
{
	struct fake *f = calloc(1, sizeof(*f));
	struct evhttp_bound_socket *bs;
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);

	ck_assert_ptr_nonnull(f);
	f->http = evhttp_new(base);
	ck_assert_ptr_nonnull(f->http);
	bs = evhttp_bind_socket_with_handle(f->http, "127.0.0.1", 0);
	ck_assert_ptr_nonnull(bs);
	ck_assert_int_eq(getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&sin,
	    &sl), 0);
	f->port = ntohs(sin.sin_port);
	snprintf(f->endpoint, sizeof(f->endpoint), "127.0.0.1:%d", f->port);
	evhttp_set_gencb(f->http, fake_request, f);
	return f;
}

/* Answer (or end) what f keeps pending, stop it and free it. */
static void
fake_free(struct fake *f)
{
	if (f == NULL)
		return;
	/* a request evhttp gave up on is freed by its answer */
	for (int i = 0; i < f->npending; i++) {
		if (f->pending[i].started)
			evhttp_send_reply_end(f->pending[i].req);
		else
			fake_answer(f->pending[i].req, 503, "{}");
	}
	evhttp_free(f->http);
	for (int i = 0; i < f->nseen; i++) {
		free(f->seen[i].path);
		free(f->seen[i].body);
		free(f->seen[i].ctype);
		free(f->seen[i].auth);
	}
	free(f);
}

/* Answer requests to path with status and body from now on (in place of
 * what path was answered with before). */
static void
fake_route(struct fake *f, const char *path, int status, const char *body)
{
	int i;
	for (i = 0; i < ROUTES_MAX - 1 && f->routes[i].path != NULL; i++)
		if (strcmp(f->routes[i].path, path) == 0)
			break;
	ck_assert_int_lt(i, ROUTES_MAX - 1);
	f->routes[i].path = path;
	f->routes[i].status = status;
	f->routes[i].body = body;
}

/* Answer the request to path f keeps pending (fails if none). */
static void
fake_answer_pending(struct fake *f, const char *path, int status, const char *body)
{
	for (int i = 0; i < f->npending; i++) {
		struct evhttp_request *req = f->pending[i].req;
		if (!f->pending[i].started && strcmp(evhttp_request_get_uri(req), path) == 0) {
			fake_unhold(f, req);
			fake_answer(req, status, body);
			return;
		}
	}
	ck_abort_msg("no pending request to %s", path);
}

/* Answer requests to path no more: keep them pending. */
static void
fake_routes_drop(struct fake *f, const char *path)
{
	int i, n;
	for (n = 0; n < ROUTES_MAX && f->routes[n].path != NULL; n++)
		;
	for (i = 0; i < n; i++) {
		if (strcmp(f->routes[i].path, path) == 0) {
			f->routes[i] = f->routes[n - 1];
			f->routes[n - 1].path = NULL;
			return;
		}
	}
}

/* How many requests to path f received. */
static int
fake_count(const struct fake *f, const char *path)
{
	int n = 0;
	for (int i = 0; i < f->nseen; i++)
		n += strcmp(f->seen[i].path, path) == 0;
	return n;
}

/* The last request to path f received (fails if none). */
static const struct seen *
fake_last(const struct fake *f, const char *path)
{
	for (int i = f->nseen - 1; i >= 0; i--)
		if (strcmp(f->seen[i].path, path) == 0)
			return &f->seen[i];
	ck_abort_msg("no request to %s", path);
	return NULL;
}

/* Start the chunked answer to the watch request f has. */
static void
fake_watch_start(struct fake *f)
{
	struct pending *p;
	ck_assert_ptr_nonnull(f->watch);
	p = fake_pending_of(f, f->watch);
	ck_assert_ptr_nonnull(p);
	evhttp_add_header(evhttp_request_get_output_headers(f->watch), "Content-Type",
	    "application/json");
	evhttp_send_reply_start(f->watch, HTTP_OK, "OK");
	p->started = true;
}

/* Whether what f wrote on its watch stream has left for the kernel. */
static bool
fake_flushed(const struct fake *f)
{
	struct evhttp_connection *conn = evhttp_request_get_connection(f->watch);
	struct bufferevent *bev = conn != NULL ? evhttp_connection_get_bufferevent(conn) : NULL;
	return bev == NULL || evbuffer_get_length(bufferevent_get_output(bev)) == 0;
}

/* Run what the loop has ready, without blocking. */
static void
pump(void)
{
	for (int i = 0; i < 8; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
}

/* Let the loop run for ms milliseconds. */
static void
settle(uint64_t ms)
{
	uint64_t until = clock_ms() + ms;
	while (clock_ms() < until)
		event_base_loop(base, EVLOOP_ONCE);
}

/* Send len bytes at p as one chunk of the watch stream, and run the loop
 * until the client had the chance to read them. */
static void
fake_watch_chunk(struct fake *f, const char *p, size_t len)
{
	struct evbuffer *b = evbuffer_new();
	evbuffer_add(b, p, len);
	evhttp_send_reply_chunk(f->watch, b);
	evbuffer_free(b);
	RUN_UNTIL(fake_flushed(f));
	settle(TICK_MS);
	pump();
}

/* Send the string text as one chunk of the watch stream. */
static void
fake_watch_send(struct fake *f, const char *text)
{
	fake_watch_chunk(f, text, strlen(text));
}

/* End the watch stream (the last chunk). */
static void
fake_watch_end(struct fake *f)
{
	ck_assert_ptr_nonnull(f->watch);
	fake_unhold(f, f->watch);
	evhttp_send_reply_end(f->watch);
	f->watch = NULL;
}

/* A port of 127.0.0.1 nothing listens on. */
static int
dead_port(void)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sin);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
	close(fd);
	return ntohs(sin.sin_port);
}

/* ---- the client and what it tells ----------------------------------------- */

/* The outcome of one call, as its callback saw it. */
struct outcome {
	int times;			/* callback runs */
	bool inside;			/* one ran inside etcd_call */
	enum etcd_status status;
	int code;
	char why[256];
	char *body;			/* ETCD_OK: the body, as compact JSON */
	int seq;			/* the last run was the seq-th callback of the test */
	bool destroy;			/* the callback destroys cli */
};

static bool in_call;			/* etcd_call is running */
static bool states[LOG_MAX];		/* the state hook's calls, in order */
static int nstates;
static char *msgs[LOG_MAX];		/* the watch hook's messages ("NULL" for NULL) */
static int nmsgs;
static int hook_stop_at;		/* the watch hook stops the stream at this message */
static int hook_restart_at;		/* or starts another one */
static int nresults;			/* callbacks run in this test */

/* The state hook: record what it is told. */
static void
on_state(void *arg, bool up)
{
	(void)arg;
	ck_assert_int_lt(nstates, LOG_MAX);
	states[nstates++] = up;
}

/* The watch hook: record the message, then stop or restart the stream if
 * the test asked for it at this message. */
static void
on_watch(void *arg, json_t *result)
{
	(void)arg;
	ck_assert_int_lt(nmsgs, LOG_MAX);
	msgs[nmsgs++] = result != NULL ? json_dumps(result, JSON_COMPACT | JSON_SORT_KEYS) :
	    strdup("NULL");
	if (nmsgs == hook_stop_at)
		etcd_watch_stop(cli);
	if (nmsgs == hook_restart_at)
		etcd_watch(cli, json_pack("{s:s}", "key", "again"));
}

/* Every call's callback: record the outcome into the struct outcome. */
static void
on_result(void *arg, const struct etcd_result *r)
{
	struct outcome *o = arg;
	o->times++;
	o->seq = ++nresults;
	o->inside |= in_call;
	o->status = r->status;
	o->code = r->code;
	snprintf(o->why, sizeof(o->why), "%s", r->why != NULL ? r->why : "");
	free(o->body);
	o->body = r->status == ETCD_OK ? json_dumps(r->body, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	if (o->destroy) {
		etcd_destroy(cli);
		cli = NULL;
	}
}

/* etcd_call with the callback on_result into o; body is JSON text. */
static void
call(const char *path, const char *body, struct outcome *o)
{
	json_t *j = json_loads(body, 0, NULL);
	ck_assert_ptr_nonnull(j);
	in_call = true;
	etcd_call(cli, path, j, on_result, o);
	in_call = false;
}

static void
outcome_free(struct outcome *o)
{
	free(o->body);
	o->body = NULL;
}

/* A client of the n endpoints eps (user NULL: no authentication). */
static struct etcd *
client(const char *const *eps, size_t n, uint64_t timeout_ms, const char *user,
    const char *password)
{
	char *copy[4];
	struct etcd_options o = { .endpoints = copy, .nendpoints = n,
	    .request_timeout_ms = timeout_ms, .username = user, .password = password };
	struct etcd_hooks h = { .state = on_state, .watch = on_watch, .arg = NULL };
	struct etcd *c;

	ck_assert_uint_le(n, 4);
	for (size_t i = 0; i < n; i++)
		copy[i] = strdup(eps[i]);
	c = etcd_create(base, &o, &h);
	for (size_t i = 0; i < n; i++)
		free(copy[i]);
	ck_assert_ptr_nonnull(c);
	return c;
}

/* A client of fk alone. */
static struct etcd *
client_of_fake(void)
{
	const char *eps[] = { fk->endpoint };
	return client(eps, 1, TIMEOUT_MS, NULL, NULL);
}

static void
on_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
}

static void
setup(void)
{
	struct timeval tv = clock_tv(TICK_MS);
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	tick = event_new(base, -1, EV_PERSIST, on_tick, NULL);
	event_add(tick, &tv);
	fk = fake_new();
	cli = NULL;
	nstates = 0;
	nmsgs = 0;
	hook_stop_at = 0;
	hook_restart_at = 0;
	nresults = 0;
}

static void
teardown(void)
{
	etcd_destroy(cli);
	cli = NULL;
	fake_free(fk);
	fk = NULL;
	for (int i = 0; i < nmsgs; i++)
		free(msgs[i]);
	nmsgs = 0;
	event_free(tick);
	event_base_free(base);
}

/* Assert that the JSON text got is the JSON text want (whatever the order
 * of members and the spaces). */
static void
assert_json(const char *got, const char *want)
{
	json_t *g = json_loads(got, 0, NULL), *w = json_loads(want, 0, NULL);
	ck_assert_msg(g != NULL && w != NULL && json_equal(g, w), "got %s, expected %s", got,
	    want);
	json_decref(g);
	json_decref(w);
}

/* ---- base64 and integers -------------------------------------------------- */

/* Encoding and decoding give the test vectors of RFC 4648, section 10. */
START_TEST(test_b64_rfc4648_vectors)
{
	static const char *const plain[] = { "", "f", "fo", "foo", "foob", "fooba", "foobar" };
	static const char *const coded[] = { "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=",
	    "Zm9vYmFy" };
	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
		char *e = etcd_b64_encode(plain[i], strlen(plain[i]));
		size_t n = 99;
		char *d = etcd_b64_decode(coded[i], &n);
		ck_assert_str_eq(e, coded[i]);
		ck_assert_ptr_nonnull(d);
		ck_assert_uint_eq(n, strlen(plain[i]));
		ck_assert_str_eq(d, plain[i]);
		free(e);
		free(d);
	}
}
END_TEST

/* Binary data (NUL and 0xff bytes, every byte value, every length up to
 * 260) comes back as it went, followed by a NUL. */
START_TEST(test_b64_binary_round_trip)
{
	unsigned char data[260];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = i % 5 == 0 ? 0 : i % 7 == 0 ? 0xff : (unsigned char)(i * 37);
	for (size_t len = 0; len <= sizeof(data); len++) {
		char *e = etcd_b64_encode(data, len);
		size_t n = 0;
		char *d;
		ck_assert_uint_eq(strlen(e), (len + 2) / 3 * 4);
		d = etcd_b64_decode(e, &n);
		ck_assert_ptr_nonnull(d);
		ck_assert_uint_eq(n, len);
		ck_assert(memcmp(d, data, len) == 0);
		ck_assert_int_eq(d[n], '\0');
		free(e);
		free(d);
	}
	char *e = etcd_b64_encode("\0\xff\0", 3);
	ck_assert_str_eq(e, "AP8A");
	free(e);
}
END_TEST

/* What is not base64 is refused: a length that is not a multiple of four,
 * characters outside the alphabet, '=' anywhere but the last one or two
 * places, three '='. */
START_TEST(test_b64_rejects)
{
	static const char *const bad[] = {
		"Z", "Zg", "Zg=", "Zm9vY", "===", "=", "====", "Z===", "=Zg=", "Zg=a", "Zm=v",
		"Zg==Zg==", "Zm9v!A==", "Zm 9", "Zm9v\n", "Zm-_", "Zm9v====",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		size_t n = 7;
		char *d = etcd_b64_decode(bad[i], &n);
		ck_assert_msg(d == NULL, "'%s' was taken for base64", bad[i]);
	}
}
END_TEST

/* etcd_int reads int64 strings and numbers, gives 0 for a field that is
 * not there and -1 for anything else. */
START_TEST(test_int_fields)
{
	json_t *o = json_loads("{\"a\": \"123\", \"b\": \"-5\", \"c\": \"9223372036854775807\","
	    " \"d\": 42, \"e\": \"12a\", \"f\": \"\", \"g\": true, \"h\": {}, \"i\": \"0\","
	    " \"j\": \"9223372036854775808\", \"k\": \" 1\", \"l\": \"+1\", \"m\": \"-\","
	    " \"n\": 1.5, \"o\": [1], \"p\": \"-9223372036854775808\"}", 0, NULL);
	ck_assert_ptr_nonnull(o);
	ck_assert_int_eq(etcd_int(o, "a"), 123);
	ck_assert_int_eq(etcd_int(o, "b"), -5);
	ck_assert_int_eq(etcd_int(o, "c"), INT64_MAX);
	ck_assert_int_eq(etcd_int(o, "d"), 42);
	ck_assert_int_eq(etcd_int(o, "absent"), 0);
	ck_assert_int_eq(etcd_int(o, "e"), -1);
	ck_assert_int_eq(etcd_int(o, "f"), -1);
	ck_assert_int_eq(etcd_int(o, "g"), -1);
	ck_assert_int_eq(etcd_int(o, "h"), -1);
	ck_assert_int_eq(etcd_int(o, "i"), 0);
	ck_assert_int_eq(etcd_int(o, "j"), -1);	/* out of range */
	ck_assert_int_eq(etcd_int(o, "k"), -1);
	ck_assert_int_eq(etcd_int(o, "l"), -1);
	ck_assert_int_eq(etcd_int(o, "m"), -1);
	ck_assert_int_eq(etcd_int(o, "n"), -1);
	ck_assert_int_eq(etcd_int(o, "o"), -1);
	ck_assert_int_eq(etcd_int(o, "p"), INT64_MIN);
	ck_assert_int_eq(etcd_int(NULL, "a"), 0);
	json_decref(o);
}
END_TEST

/* ---- unary calls ---------------------------------------------------------- */

/* A call posts its JSON body to its path with Content-Type application/json;
 * a 200 answer reaches the callback as ETCD_OK with the body, and the client
 * comes up. */
START_TEST(test_call_answered)
{
	struct outcome o = { 0 };
	struct etcd_stats st;
	const struct seen *s;

	fake_route(fk, "/v3/kv/range", HTTP_OK,
	    "{\"header\":{\"revision\":\"7\"},\"kvs\":[{\"key\":\"Zm9v\"}],\"count\":\"1\"}");
	cli = client_of_fake();
	ck_assert(!etcd_up(cli));
	ck_assert_str_eq(etcd_endpoint(cli), fk->endpoint);
	call("/v3/kv/range", "{\"key\":\"Zm9v\",\"range_end\":\"Zm9w\"}", &o);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_OK);
	assert_json(o.body, "{\"header\":{\"revision\":\"7\"},\"kvs\":[{\"key\":\"Zm9v\"}],"
	    "\"count\":\"1\"}");
	ck_assert(etcd_up(cli));
	ck_assert_int_eq(nstates, 1);
	ck_assert(states[0]);

	ck_assert_int_eq(fk->nseen, 1);
	s = fake_last(fk, "/v3/kv/range");
	ck_assert_ptr_nonnull(s->ctype);
	ck_assert_str_eq(s->ctype, "application/json");
	ck_assert_ptr_null(s->auth);
	assert_json(s->body, "{\"key\":\"Zm9v\",\"range_end\":\"Zm9w\"}");
	etcd_stats(cli, &st);
	ck_assert_uint_eq(st.calls, 1);
	ck_assert_uint_eq(st.failures, 0);
	settle(SETTLE_MS);
	ck_assert_int_eq(o.times, 1);
	outcome_free(&o);
}
END_TEST

/* What a stream endpoint answers ({"result": {...}}, /v3/lease/keepalive)
 * reaches the callback as the inner object. */
START_TEST(test_call_stream_result)
{
	struct outcome o = { 0 };
	json_t *b;

	fake_route(fk, "/v3/lease/keepalive", HTTP_OK,
	    "{\"result\":{\"header\":{\"revision\":\"9\"},\"ID\":\"694d77aa9e38260f\",\"TTL\":\"10\"}}\n");
	cli = client_of_fake();
	call("/v3/lease/keepalive", "{\"ID\":\"7587869128366466575\"}", &o);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_OK);
	assert_json(o.body, "{\"header\":{\"revision\":\"9\"},\"ID\":\"694d77aa9e38260f\","
	    "\"TTL\":\"10\"}");
	b = json_loads(o.body, 0, NULL);
	ck_assert_int_eq(etcd_int(b, "TTL"), 10);
	json_decref(b);
	assert_json(fake_last(fk, "/v3/lease/keepalive")->body, "{\"ID\":\"7587869128366466575\"}");
	outcome_free(&o);
}
END_TEST

/* etcd's error answers end a call with ETCD_FAILED, the gRPC code and
 * etcd's sentence: a unary error with the trailer the gateway appends, a
 * stream's error object, an answer that is not JSON. The client is up all
 * the same: etcd answered. */
START_TEST(test_call_error_answer)
{
	struct outcome o = { 0 }, p = { 0 }, q = { 0 };

	fake_route(fk, "/v3/lease/revoke", 404,
	    "{\"error\":\"etcdserver: requested lease not found\","
	    "\"message\":\"etcdserver: requested lease not found\",\"code\":5}"
	    "Grpc-Trailer-Content-Type: application/grpc");
	fake_route(fk, "/v3/lease/keepalive", HTTP_OK,
	    "{\"error\":{\"grpc_code\":5,\"http_code\":404,"
	    "\"message\":\"etcdserver: requested lease not found\",\"http_status\":\"Not Found\"}}");
	fake_route(fk, "/v3/kv/put", 502, "<html>Bad Gateway</html>");
	cli = client_of_fake();

	call("/v3/lease/revoke", "{\"ID\":\"1\"}", &o);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_FAILED);
	ck_assert_int_eq(o.code, 5);
	ck_assert_msg(strstr(o.why, "lease not found") != NULL, "why: %s", o.why);
	ck_assert(etcd_up(cli));
	ck_assert_int_eq(nstates, 1);
	ck_assert(states[0]);

	call("/v3/lease/keepalive", "{\"ID\":\"1\"}", &p);
	RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.status, ETCD_FAILED);
	ck_assert_int_eq(p.code, 5);
	ck_assert_msg(strstr(p.why, "lease not found") != NULL, "why: %s", p.why);

	call("/v3/kv/put", "{}", &q);
	RUN_UNTIL(q.times > 0);
	ck_assert_int_eq(q.status, ETCD_FAILED);
	ck_assert_msg(strstr(q.why, "502") != NULL, "why: %s", q.why);

	ck_assert(etcd_up(cli));
	ck_assert_int_eq(nstates, 1);
	outcome_free(&o);
	outcome_free(&p);
	outcome_free(&q);
}
END_TEST

/* An error answer whose sentence is empty still says why: its HTTP status. */
START_TEST(test_call_error_empty_sentence)
{
	static const char *const bodies[] = {
		"{\"error\":\"\",\"code\":2}",
		"{\"error\":{\"grpc_code\":14,\"message\":\"\"}}",
	};
	for (size_t i = 0; i < 2; i++) {
		struct etcd_result r = { 0 };
		json_t *body;
		char why[64] = "";
		etcd_result_of(i == 0 ? 500 : HTTP_OK, bodies[i], strlen(bodies[i]), &body, &r,
		    why, sizeof(why));
		ck_assert_int_eq(r.status, ETCD_FAILED);
		ck_assert_str_eq(r.why, i == 0 ? "HTTP status 500" : "HTTP status 200");
		ck_assert_int_eq(r.code, i == 0 ? 2 : 14);
		json_decref(body);
	}
}
END_TEST

/* ---- endpoints that do not answer ----------------------------------------- */

/* A call to an endpoint nothing listens on ends with ETCD_DOWN; the client
 * was never up, so the state hook is not called. */
START_TEST(test_unreachable_endpoint)
{
	char ep[32];
	const char *eps[] = { ep };
	struct outcome o = { 0 };
	struct etcd_stats st;

	snprintf(ep, sizeof(ep), "127.0.0.1:%d", dead_port());
	cli = client(eps, 1, TIMEOUT_MS, NULL, NULL);
	call("/v3/kv/range", "{\"key\":\"YQ==\"}", &o);
	ck_assert_int_eq(o.times, 0);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_DOWN);
	ck_assert(!o.inside);
	ck_assert(!etcd_up(cli));
	ck_assert_int_eq(nstates, 0);
	ck_assert_str_eq(etcd_endpoint(cli), ep);
	etcd_stats(cli, &st);
	ck_assert_uint_eq(st.failures, 1);
	ck_assert_uint_eq(st.switches, 0);
	settle(SETTLE_MS);
	ck_assert_int_eq(o.times, 1);
}
END_TEST

/* An etcd that answered and then went away: the next call ends with
 * ETCD_DOWN and the state hook is told false once, after true. */
START_TEST(test_down_after_up)
{
	struct outcome o = { 0 }, p = { 0 };

	fake_route(fk, "/v3/kv/range", HTTP_OK, "{\"count\":\"0\"}");
	cli = client_of_fake();
	call("/v3/kv/range", "{}", &o);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_OK);
	fake_free(fk);
	fk = NULL;
	call("/v3/kv/range", "{}", &p);
	RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.status, ETCD_DOWN);
	ck_assert(!p.inside);
	ck_assert(!etcd_up(cli));
	ck_assert_int_eq(nstates, 2);
	ck_assert(states[0]);
	ck_assert(!states[1]);
	outcome_free(&o);
}
END_TEST

/* With a dead endpoint first and a live one second: the first call fails
 * (ETCD_DOWN) and moves the client to the second; the next call is answered
 * there and the client comes up. */
START_TEST(test_failover_to_next_endpoint)
{
	char dead[32];
	const char *eps[] = { dead, fk->endpoint };
	struct outcome o = { 0 }, p = { 0 };
	struct etcd_stats st;

	snprintf(dead, sizeof(dead), "127.0.0.1:%d", dead_port());
	fake_route(fk, "/v3/kv/range", HTTP_OK, "{\"count\":\"0\"}");
	cli = client(eps, 2, TIMEOUT_MS, NULL, NULL);
	ck_assert_str_eq(etcd_endpoint(cli), dead);
	call("/v3/kv/range", "{}", &o);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_DOWN);
	ck_assert_str_eq(etcd_endpoint(cli), fk->endpoint);
	ck_assert_int_eq(nstates, 0);
	ck_assert_int_eq(fk->nseen, 0);

	call("/v3/kv/range", "{}", &p);
	RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.status, ETCD_OK);
	ck_assert(etcd_up(cli));
	ck_assert_int_eq(nstates, 1);
	ck_assert(states[0]);
	ck_assert_int_eq(fk->nseen, 1);
	etcd_stats(cli, &st);
	ck_assert_uint_eq(st.switches, 1);
	ck_assert_uint_eq(st.failures, 1);
	outcome_free(&p);
}
END_TEST

/* A call etcd never answers ends with ETCD_DOWN after the request timeout
 * (200 ms here), not much later; the client goes down, and comes up again
 * with the next call answered. */
START_TEST(test_timeout)
{
	const char *eps[] = { fk->endpoint };
	struct outcome o = { 0 }, p = { 0 }, q = { 0 };
	uint64_t t0, took;

	fake_route(fk, "/v3/kv/range", HTTP_OK, "{}");
	cli = client(eps, 1, 200, NULL, NULL);
	call("/v3/kv/range", "{}", &o);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_OK);

	t0 = clock_ms();
	call("/v3/kv/txn", "{}", &p);	/* no route: the fake keeps it */
	RUN_UNTIL(p.times > 0);
	took = clock_ms() - t0;
	ck_assert_int_eq(p.status, ETCD_DOWN);
	ck_assert_msg(took >= 150 && took < 3000, "timed out after %llu ms",
	    (unsigned long long)took);
	ck_assert_int_eq(fake_count(fk, "/v3/kv/txn"), 1);
	ck_assert(!etcd_up(cli));
	ck_assert_int_eq(nstates, 2);
	ck_assert(!states[1]);

	call("/v3/kv/range", "{}", &q);
	RUN_UNTIL(q.times > 0);
	ck_assert_int_eq(q.status, ETCD_OK);
	ck_assert_int_eq(nstates, 3);
	ck_assert(states[2]);
	outcome_free(&o);
	outcome_free(&q);
}
END_TEST

/* ---- callbacks from the loop ---------------------------------------------- */

/* A callback never runs inside etcd_call, whether the call is answered,
 * refused by etcd, or cannot reach it; and each runs once. */
START_TEST(test_callbacks_from_the_loop)
{
	char dead[32];
	const char *deps[] = { dead };
	struct outcome o[6] = { { 0 } };
	struct etcd *live;

	fake_route(fk, "/v3/kv/range", HTTP_OK, "{}");
	fake_route(fk, "/v3/kv/put", 400, "{\"error\":\"bad\",\"code\":3}");
	cli = client_of_fake();
	call("/v3/kv/range", "{}", &o[0]);
	call("/v3/kv/put", "{}", &o[1]);
	call("/v3/kv/range", "{}", &o[2]);
	ck_assert_int_eq(o[0].times + o[1].times + o[2].times, 0);
	RUN_UNTIL(o[0].times > 0 && o[1].times > 0 && o[2].times > 0);
	/* once up, and with keep-alive connections made */
	call("/v3/kv/range", "{}", &o[3]);
	ck_assert_int_eq(o[3].times, 0);
	RUN_UNTIL(o[3].times > 0);

	live = cli;
	snprintf(dead, sizeof(dead), "127.0.0.1:%d", dead_port());
	cli = client(deps, 1, TIMEOUT_MS, NULL, NULL);
	call("/v3/kv/range", "{}", &o[4]);
	call("/v3/kv/range", "{}", &o[5]);
	ck_assert_int_eq(o[4].times + o[5].times, 0);
	RUN_UNTIL(o[4].times > 0 && o[5].times > 0);
	etcd_destroy(cli);
	cli = live;

	settle(SETTLE_MS);
	for (int i = 0; i < 6; i++) {
		ck_assert_msg(!o[i].inside, "call %d: callback inside etcd_call", i);
		ck_assert_int_eq(o[i].times, 1);
		outcome_free(&o[i]);
	}
	ck_assert_int_eq(o[1].status, ETCD_FAILED);
	ck_assert_int_eq(o[4].status, ETCD_DOWN);
	ck_assert_int_eq(o[5].status, ETCD_DOWN);
}
END_TEST

/* Make calls o[0, n) with no file descriptor left, so that each fails
 * inside etcd_call, before it is sent. */
static void
calls_without_fds(struct outcome *o, int n)
{
	struct rlimit old, low;
	int fds[64], nfds = 0, fd;

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = 64;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	while (nfds < 64 && (fd = dup(0)) >= 0)
		fds[nfds++] = fd;
	ck_assert_int_eq(errno, EMFILE);
	for (int i = 0; i < n; i++)
		call("/v3/kv/range", "{}", &o[i]);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
}

/* A call whose connection cannot even be started (no file descriptor left
 * for its socket) fails with ETCD_DOWN, from the loop like any other. */
START_TEST(test_callback_from_the_loop_when_connect_fails_at_once)
{
	struct outcome o = { 0 };

	cli = client_of_fake();
	calls_without_fds(&o, 1);
	ck_assert_msg(!o.inside, "the callback ran inside etcd_call");
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_DOWN);
	settle(SETTLE_MS);
	ck_assert_int_eq(o.times, 1);
}
END_TEST

/* Calls that fail before they are sent are told from the loop, once each,
 * in the order they were made. */
START_TEST(test_failed_at_once_in_order)
{
	struct outcome o[4] = { { 0 } };

	cli = client_of_fake();
	calls_without_fds(o, 4);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(o[i].times, 0);
	RUN_UNTIL(o[3].times > 0);
	settle(SETTLE_MS);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(o[i].times, 1);
		ck_assert_int_eq(o[i].seq, i + 1);
		ck_assert_int_eq(o[i].status, ETCD_DOWN);
		ck_assert(!o[i].inside);
	}
}
END_TEST

/* A client destroyed with failed calls not told yet tells none of them. */
START_TEST(test_destroy_with_failed_calls)
{
	struct outcome o[3] = { { 0 } };

	cli = client_of_fake();
	calls_without_fds(o, 3);
	etcd_destroy(cli);
	cli = NULL;
	settle(SETTLE_MS);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(o[i].times, 0);
}
END_TEST

/* A client destroyed by the callback of a failed call tells the others
 * nothing. */
START_TEST(test_destroy_from_a_failed_call)
{
	struct outcome o[3] = { { 0 } };

	cli = client_of_fake();
	o[1].destroy = true;
	calls_without_fds(o, 3);
	RUN_UNTIL(o[1].times > 0);
	ck_assert_ptr_null(cli);
	settle(SETTLE_MS);
	ck_assert_int_eq(o[0].times, 1);
	ck_assert_int_eq(o[1].times, 1);
	ck_assert_int_eq(o[2].times, 0);
}
END_TEST

/* ---- the watch stream ----------------------------------------------------- */

#define CREATED "{\"result\":{\"header\":{\"revision\":\"5\"},\"created\":true}}\n"
#define EVENT1 "{\"result\":{\"header\":{\"revision\":\"6\"},\"events\":[{\"type\":\"DELETE\"," \
	"\"kv\":{\"key\":\"L2wvYQ==\",\"mod_revision\":\"6\"}}]}}\n"
#define EVENT2 "{\"result\":{\"header\":{\"revision\":\"7\"},\"events\":[{\"type\":\"DELETE\"," \
	"\"kv\":{\"key\":\"L2wvYg==\",\"mod_revision\":\"7\"}}]}}\n"
#define EVENT3 "{\"result\":{\"header\":{\"revision\":\"8\"},\"events\":[{\"type\":\"DELETE\"," \
	"\"kv\":{\"key\":\"L2wvYw==\",\"mod_revision\":\"8\"}}]}}\n"

/* The "result" object of the watch message text, as the hook records it. */
static char *
result_of(const char *text)
{
	json_t *j = json_loads(text, JSON_DISABLE_EOF_CHECK, NULL);
	char *s;
	ck_assert_ptr_nonnull(j);
	s = json_dumps(json_object_get(j, "result"), JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(j);
	return s;
}

/* Assert that the hook's n-th message is the result of the message text. */
static void
assert_msg(int n, const char *text)
{
	char *want = result_of(text);
	ck_assert_int_gt(nmsgs, n);
	ck_assert_msg(strcmp(msgs[n], want) == 0, "message %d: got %s, expected %s", n,
	    msgs[n], want);
	free(want);
}

/* A client of fk whose watch stream the fake has started to answer. */
static void
watch_up(void)
{
	cli = client_of_fake();
	etcd_watch(cli, json_pack("{s:s, s:s, s:[s]}", "key", "L2wv", "range_end", "L2ww",
	    "filters", "NOPUT"));
	ck_assert(etcd_watching(cli));
	RUN_UNTIL(fk->watch != NULL);
	fake_watch_start(fk);
	pump();
}

/* The stream is posted to /v3/watch with the create request; each message
 * reaches the hook once, in order, as its "result" object: a message in a
 * chunk of its own, one cut across two chunks, two in one chunk. */
START_TEST(test_watch_messages)
{
	const struct seen *s;
	struct etcd_stats st;
	size_t half = strlen(EVENT1) / 2;

	watch_up();
	s = fake_last(fk, "/v3/watch");
	ck_assert_str_eq(s->ctype, "application/json");
	assert_json(s->body, "{\"create_request\":{\"key\":\"L2wv\",\"range_end\":\"L2ww\","
	    "\"filters\":[\"NOPUT\"]}}");

	fake_watch_send(fk, CREATED);
	RUN_UNTIL(nmsgs == 1);
	assert_msg(0, CREATED);
	ck_assert(etcd_up(cli));	/* etcd answered */

	fake_watch_chunk(fk, EVENT1, half);
	ck_assert_int_eq(nmsgs, 1);
	fake_watch_send(fk, EVENT1 + half);
	RUN_UNTIL(nmsgs == 2);
	assert_msg(1, EVENT1);

	fake_watch_send(fk, EVENT2 EVENT3);
	RUN_UNTIL(nmsgs >= 4);
	assert_msg(2, EVENT2);
	assert_msg(3, EVENT3);

	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 4);
	ck_assert(etcd_watching(cli));
	ck_assert_int_eq(fk->nwatch, 1);
	etcd_stats(cli, &st);
	ck_assert_uint_eq(st.messages, 4);
	ck_assert_uint_eq(st.watches, 1);
}
END_TEST

/* A message sent one byte per chunk reaches the hook once, whole: the
 * client waits for the rest of a message wherever the chunks cut it. */
START_TEST(test_watch_one_byte_per_chunk)
{
	const char *text = CREATED EVENT1;

	watch_up();
	for (size_t i = 0; text[i] != '\0'; i++) {
		fake_watch_chunk(fk, text + i, 1);
		/* a message is whole once its newline has come */
		ck_assert_msg(nmsgs <= (i + 1 < strlen(CREATED) ? 0 : i + 1 < strlen(text) ? 1 : 2),
		    "after byte %zu ('%c'): %d messages, the last %s", i, text[i], nmsgs,
		    nmsgs > 0 ? msgs[nmsgs - 1] : "none");
	}
	RUN_UNTIL(nmsgs == 2);
	assert_msg(0, CREATED);
	assert_msg(1, EVENT1);
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 2);
	ck_assert(etcd_watching(cli));
}
END_TEST

/* Bytes that are not JSON end the stream: the hook gets NULL, from the
 * loop, once; the client is no longer watching. */
START_TEST(test_watch_garbage)
{
	watch_up();
	fake_watch_send(fk, CREATED);
	RUN_UNTIL(nmsgs == 1);
	fake_watch_send(fk, "not json\n");
	RUN_UNTIL(nmsgs == 2);
	ck_assert_str_eq(msgs[1], "NULL");
	ck_assert(!etcd_watching(cli));
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 2);
}
END_TEST

/* An error message on the stream ({"error": {...}}) ends it: NULL. */
START_TEST(test_watch_error_message)
{
	watch_up();
	fake_watch_send(fk, CREATED);
	RUN_UNTIL(nmsgs == 1);
	fake_watch_send(fk, "{\"error\":{\"grpc_code\":16,\"http_code\":401,"
	    "\"message\":\"etcdserver: invalid auth token\"}}\n");
	RUN_UNTIL(nmsgs == 2);
	ck_assert_str_eq(msgs[1], "NULL");
	ck_assert(!etcd_watching(cli));
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 2);
}
END_TEST

/* etcd ending the stream's response: the hook gets NULL, once. */
START_TEST(test_watch_stream_ends)
{
	watch_up();
	fake_watch_send(fk, CREATED);
	RUN_UNTIL(nmsgs == 1);
	fake_watch_end(fk);
	RUN_UNTIL(nmsgs == 2);
	ck_assert_str_eq(msgs[1], "NULL");
	ck_assert(!etcd_watching(cli));
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 2);
}
END_TEST

/* etcd_watch_stop ends the stream without a NULL message; etcd_watch on a
 * running stream replaces it, without a NULL message either. */
START_TEST(test_watch_stop_is_silent)
{
	watch_up();
	fake_watch_send(fk, CREATED);
	RUN_UNTIL(nmsgs == 1);
	etcd_watch_stop(cli);
	ck_assert(!etcd_watching(cli));
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 1);
	ck_assert_int_eq(fk->nwatch, 1);

	etcd_watch(cli, json_pack("{s:s}", "key", "YQ=="));
	RUN_UNTIL(fk->nwatch == 2);
	fake_watch_start(fk);
	fake_watch_send(fk, CREATED);
	RUN_UNTIL(nmsgs == 2);
	etcd_watch(cli, json_pack("{s:s}", "key", "Yg=="));
	RUN_UNTIL(fk->nwatch == 3);
	assert_json(fake_last(fk, "/v3/watch")->body, "{\"create_request\":{\"key\":\"Yg==\"}}");
	fake_watch_start(fk);
	fake_watch_send(fk, EVENT1);
	RUN_UNTIL(nmsgs == 3);
	assert_msg(2, EVENT1);
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 3);
	ck_assert(etcd_watching(cli));
	etcd_watch_stop(cli);
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 3);
}
END_TEST

/* The hook may stop the stream while it is given a message: the messages
 * after it in the same chunk are dropped, and no NULL message follows. */
START_TEST(test_watch_stopped_from_the_hook)
{
	watch_up();
	hook_stop_at = 1;
	fake_watch_send(fk, CREATED EVENT1 EVENT2);
	RUN_UNTIL(nmsgs == 1);
	ck_assert(!etcd_watching(cli));
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 1);
	ck_assert_int_eq(fk->nwatch, 1);
}
END_TEST

/* The hook may start another stream while it is given a message: the
 * messages after it in the same chunk belong to the stream replaced and are
 * dropped; no NULL message follows, and the new stream's messages come. */
START_TEST(test_watch_restarted_from_the_hook)
{
	watch_up();
	hook_restart_at = 1;
	fake_watch_send(fk, CREATED EVENT1 EVENT2);
	RUN_UNTIL(fk->nwatch == 2);
	ck_assert_msg(nmsgs == 1, "%d messages after the restart, the last %s", nmsgs,
	    nmsgs > 0 ? msgs[nmsgs - 1] : "none");
	assert_json(fake_last(fk, "/v3/watch")->body, "{\"create_request\":{\"key\":\"again\"}}");
	ck_assert(etcd_watching(cli));
	fake_watch_start(fk);
	fake_watch_send(fk, EVENT3);
	RUN_UNTIL(nmsgs == 2);
	assert_msg(1, EVENT3);
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 2);
}
END_TEST

/* A stream to an endpoint nothing listens on ends with a NULL message. */
START_TEST(test_watch_unreachable)
{
	char dead[32];
	const char *deps[] = { dead };

	snprintf(dead, sizeof(dead), "127.0.0.1:%d", dead_port());
	cli = client(deps, 1, TIMEOUT_MS, NULL, NULL);
	etcd_watch(cli, json_pack("{s:s}", "key", "L2wv"));
	ck_assert_int_eq(nmsgs, 0);
	RUN_UNTIL(nmsgs == 1);
	ck_assert_str_eq(msgs[0], "NULL");
	ck_assert(!etcd_watching(cli));
	settle(SETTLE_MS);
	ck_assert_int_eq(nmsgs, 1);
}
END_TEST

/* The create request given to etcd_watch is released once the stream is
 * made: after etcd_destroy, the test's own reference is the only one. */
START_TEST(test_watch_releases_create_request)
{
	json_t *create = json_pack("{s:s}", "key", "L2wv");

	cli = client_of_fake();
	json_incref(create);
	etcd_watch(cli, create);
	RUN_UNTIL(fk->watch != NULL);
	etcd_destroy(cli);
	cli = NULL;
	ck_assert_int_eq(create->refcount, 1);
	json_decref(create);
}
END_TEST

/* When a call cannot reach the endpoint the stream is on, the client moves
 * to the next endpoint and the stream ends (NULL) so that its owner starts
 * it again there. */
START_TEST(test_watch_ends_when_its_endpoint_is_given_up)
{
	struct fake *other = fake_new();
	const char *eps[] = { fk->endpoint, other->endpoint };
	struct outcome o = { 0 };

	cli = client(eps, 2, 200, NULL, NULL);
	etcd_watch(cli, json_pack("{s:s}", "key", "L2wv"));
	RUN_UNTIL(fk->watch != NULL);
	fake_watch_start(fk);
	fake_watch_send(fk, CREATED);
	RUN_UNTIL(nmsgs == 1);

	call("/v3/kv/txn", "{}", &o);	/* fk keeps it: it times out */
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_DOWN);
	ck_assert_str_eq(etcd_endpoint(cli), other->endpoint);
	RUN_UNTIL(nmsgs == 2);
	ck_assert_str_eq(msgs[1], "NULL");
	ck_assert(!etcd_watching(cli));
	etcd_destroy(cli);
	cli = NULL;
	fake_free(other);
}
END_TEST

/* ---- authentication ------------------------------------------------------- */

#define AUTH_PATH "/v3/auth/authenticate"

/* With a user name, the first calls wait for one /v3/auth/authenticate with
 * the name and password, then go out with the token as Authorization; so do
 * later calls, without authenticating again. */
START_TEST(test_auth_token)
{
	const char *eps[] = { fk->endpoint };
	struct outcome o = { 0 }, p = { 0 }, q = { 0 };

	fake_route(fk, AUTH_PATH, HTTP_OK, "{\"header\":{},\"token\":\"T1\"}");
	fake_route(fk, "/v3/kv/range", HTTP_OK, "{\"count\":\"0\"}");
	cli = client(eps, 1, TIMEOUT_MS, "alice", "s3cret");
	call("/v3/kv/range", "{\"key\":\"YQ==\"}", &o);
	call("/v3/kv/range", "{\"key\":\"Yg==\"}", &p);
	RUN_UNTIL(o.times > 0 && p.times > 0);
	ck_assert(!o.inside && !p.inside);
	ck_assert_int_eq(o.status, ETCD_OK);
	ck_assert_int_eq(p.status, ETCD_OK);
	ck_assert_int_eq(fake_count(fk, AUTH_PATH), 1);
	ck_assert_str_eq(fk->seen[0].path, AUTH_PATH);
	assert_json(fk->seen[0].body, "{\"name\":\"alice\",\"password\":\"s3cret\"}");
	ck_assert_ptr_null(fk->seen[0].auth);
	ck_assert_int_eq(fk->nseen, 3);
	for (int i = 1; i < 3; i++) {
		ck_assert_str_eq(fk->seen[i].path, "/v3/kv/range");
		ck_assert_ptr_nonnull(fk->seen[i].auth);
		ck_assert_str_eq(fk->seen[i].auth, "T1");
	}

	call("/v3/kv/range", "{}", &q);
	RUN_UNTIL(q.times > 0);
	ck_assert_int_eq(q.status, ETCD_OK);
	ck_assert_int_eq(fake_count(fk, AUTH_PATH), 1);
	ck_assert_str_eq(fake_last(fk, "/v3/kv/range")->auth, "T1");
	outcome_free(&o);
	outcome_free(&p);
	outcome_free(&q);
}
END_TEST

/* A token etcd no longer takes (code 16, Unauthenticated): that call fails
 * with the code, and the next call authenticates again and carries the new
 * token. */
START_TEST(test_auth_token_expired)
{
	const char *eps[] = { fk->endpoint };
	struct outcome o = { 0 }, p = { 0 }, q = { 0 };

	fake_route(fk, AUTH_PATH, HTTP_OK, "{\"token\":\"T1\"}");
	fake_route(fk, "/v3/kv/range", HTTP_OK, "{}");
	cli = client(eps, 1, TIMEOUT_MS, "alice", "s3cret");
	call("/v3/kv/range", "{}", &o);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_OK);

	fake_route(fk, "/v3/kv/range", 401, "{\"error\":\"etcdserver: invalid auth token\","
	    "\"message\":\"etcdserver: invalid auth token\",\"code\":16}");
	call("/v3/kv/range", "{}", &p);
	RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.status, ETCD_FAILED);
	ck_assert_int_eq(p.code, 16);
	ck_assert_int_eq(fake_count(fk, AUTH_PATH), 1);

	fake_route(fk, AUTH_PATH, HTTP_OK, "{\"token\":\"T2\"}");
	fake_route(fk, "/v3/kv/range", HTTP_OK, "{}");
	call("/v3/kv/range", "{}", &q);
	RUN_UNTIL(q.times > 0);
	ck_assert_int_eq(q.status, ETCD_OK);
	ck_assert_int_eq(fake_count(fk, AUTH_PATH), 2);
	ck_assert_str_eq(fake_last(fk, "/v3/kv/range")->auth, "T2");
	outcome_free(&o);
	outcome_free(&q);
}
END_TEST

/* etcd refusing the user (code 3 with HTTP 400, as etcd answers a wrong
 * password) fails the calls that waited for the token with ETCD_FAILED;
 * none of them is sent. */
START_TEST(test_auth_refused)
{
	const char *eps[] = { fk->endpoint };
	struct outcome o = { 0 }, p = { 0 };

	fake_route(fk, AUTH_PATH, 400, "{\"error\":\"etcdserver: authentication failed, "
	    "invalid user ID or password\",\"message\":\"etcdserver: authentication failed, "
	    "invalid user ID or password\",\"code\":3}");
	fake_route(fk, "/v3/kv/range", HTTP_OK, "{}");
	cli = client(eps, 1, TIMEOUT_MS, "alice", "wrong");
	call("/v3/kv/range", "{}", &o);
	call("/v3/kv/range", "{}", &p);
	RUN_UNTIL(o.times > 0 && p.times > 0);
	ck_assert(!o.inside && !p.inside);
	ck_assert_int_eq(o.status, ETCD_FAILED);
	ck_assert_int_eq(p.status, ETCD_FAILED);
	ck_assert_int_eq(o.code, 3);
	ck_assert_int_eq(fake_count(fk, AUTH_PATH), 1);
	ck_assert_int_eq(fake_count(fk, "/v3/kv/range"), 0);
	settle(SETTLE_MS);
	ck_assert_int_eq(o.times, 1);
	ck_assert_int_eq(p.times, 1);
}
END_TEST

/* A token belongs to the endpoint that gave it. Here the client
 * authenticates again with the first endpoint (its token expired) while a
 * call there times out, which moves the client to the second: the token
 * the first answers with must not be sent to the second, which never gave
 * it (etcd's simple tokens are known to one member only); the held call
 * goes out with a token of the second's. */
START_TEST(test_auth_token_stays_with_its_endpoint)
{
	struct fake *other = fake_new();
	const char *eps[] = { fk->endpoint, other->endpoint };
	struct outcome o = { 0 }, p = { 0 }, q = { 0 }, r = { 0 };

	fake_route(fk, AUTH_PATH, HTTP_OK, "{\"token\":\"TA1\"}");
	fake_route(fk, "/v3/kv/range", HTTP_OK, "{}");
	fake_route(other, AUTH_PATH, HTTP_OK, "{\"token\":\"TB\"}");
	fake_route(other, "/v3/kv/range", HTTP_OK, "{}");
	cli = client(eps, 2, 400, "alice", "s3cret");
	call("/v3/kv/range", "{}", &o);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.status, ETCD_OK);

	call("/v3/kv/txn", "{}", &p);		/* the first keeps it: times out */
	settle(150);
	fake_route(fk, "/v3/kv/range", 401, "{\"error\":\"etcdserver: invalid auth token\","
	    "\"code\":16}");
	fake_routes_drop(fk, AUTH_PATH);	/* the first keeps the next authenticate */
	call("/v3/kv/range", "{}", &q);
	RUN_UNTIL(q.times > 0);
	ck_assert_int_eq(q.code, 16);
	call("/v3/kv/range", "{}", &r);		/* held: authenticates again */
	RUN_UNTIL(fake_count(fk, AUTH_PATH) == 2);
	RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.status, ETCD_DOWN);
	ck_assert_str_eq(etcd_endpoint(cli), other->endpoint);
	ck_assert_int_eq(r.times, 0);
	fake_answer_pending(fk, AUTH_PATH, HTTP_OK, "{\"token\":\"TA2\"}");
	RUN_UNTIL(r.times > 0);
	if (fake_count(other, "/v3/kv/range") > 0) {
		const char *auth = fake_last(other, "/v3/kv/range")->auth;
		ck_assert_msg(auth == NULL || strcmp(auth, "TA2") != 0,
		    "the first endpoint's token was sent to the second");
		ck_assert_int_eq(fake_count(other, AUTH_PATH), 1);
		ck_assert_str_eq(auth, "TB");
	}
	etcd_destroy(cli);
	cli = NULL;
	fake_free(other);
	outcome_free(&o);
	outcome_free(&r);
}
END_TEST

/* A call sent with a token that etcd then no longer takes may be answered
 * code 16 (Unauthenticated), or time out, after the client authenticated
 * again: that late answer is about the old token and must leave the new one
 * alone (it was thrown away, and every call in flight with the old token
 * made the client authenticate once more). */
START_TEST(test_auth_late_unauthenticated_keeps_new_token)
{
	const char *eps[] = { fk->endpoint };
	struct outcome o = { 0 }, p = { 0 }, q = { 0 }, r = { 0 }, x = { 0 }, y = { 0 };
	const char *expired = "{\"error\":\"etcdserver: invalid auth token\","
	    "\"message\":\"etcdserver: invalid auth token\",\"code\":16}";

	fake_route(fk, AUTH_PATH, HTTP_OK, "{\"token\":\"T1\"}");
	fake_route(fk, "/v3/kv/txn", HTTP_OK, "{}");
	cli = client(eps, 1, TIMEOUT_MS, "alice", "s3cret");
	call("/v3/kv/range", "{}", &o);		/* kept pending, with T1 */
	call("/v3/kv/range", "{}", &p);
	call("/v3/lease/leases", "{}", &x);	/* times out */
	RUN_UNTIL(fake_count(fk, "/v3/kv/range") == 2 && fake_count(fk, "/v3/lease/leases") == 1);
	ck_assert_str_eq(fake_last(fk, "/v3/kv/range")->auth, "T1");

	fake_answer_pending(fk, "/v3/kv/range", 401, expired);
	RUN_UNTIL(o.times > 0);
	ck_assert_int_eq(o.code, 16);
	fake_route(fk, AUTH_PATH, HTTP_OK, "{\"token\":\"T2\"}");
	call("/v3/kv/txn", "{}", &q);		/* authenticates again: T2 */
	RUN_UNTIL(q.times > 0);
	ck_assert_int_eq(q.status, ETCD_OK);
	ck_assert_int_eq(fake_count(fk, AUTH_PATH), 2);
	ck_assert_str_eq(fake_last(fk, "/v3/kv/txn")->auth, "T2");

	fake_answer_pending(fk, "/v3/kv/range", 401, expired);	/* T1's, late */
	RUN_UNTIL(p.times > 0);
	ck_assert_int_eq(p.code, 16);
	call("/v3/kv/txn", "{}", &r);
	RUN_UNTIL(r.times > 0);
	ck_assert_int_eq(r.status, ETCD_OK);
	ck_assert_int_eq(fake_count(fk, AUTH_PATH), 2);
	ck_assert_str_eq(fake_last(fk, "/v3/kv/txn")->auth, "T2");

	RUN_UNTIL(x.times > 0);			/* T1's, no answer */
	ck_assert_int_eq(x.status, ETCD_DOWN);
	call("/v3/kv/txn", "{}", &y);
	RUN_UNTIL(y.times > 0);
	ck_assert_int_eq(y.status, ETCD_OK);
	ck_assert_int_eq(fake_count(fk, AUTH_PATH), 2);
	ck_assert_str_eq(fake_last(fk, "/v3/kv/txn")->auth, "T2");
	outcome_free(&q);
	outcome_free(&r);
	outcome_free(&y);
}
END_TEST

/* ---- the etcd backend on a fake ------------------------------------------ */

#define LEASE7 "{\"ID\":\"7\",\"TTL\":\"10\"}"
#define LEASE8 "{\"ID\":\"8\",\"TTL\":\"10\"}"
#define LEASE_NOT_FOUND "{\"error\":\"etcdserver: requested lease not found\"," \
	"\"message\":\"etcdserver: requested lease not found\",\"code\":5}"
#define TOKEN_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define TOKEN_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

static int nexpires;			/* the backend's up.expire calls */

static void
be_wakeup(void *arg, const char *key, size_t keylen)
{
	(void)arg;
	(void)key;
	(void)keylen;
}

static void
be_expire(void *arg, const char *key, size_t keylen)
{
	(void)arg;
	(void)key;
	(void)keylen;
	nexpires++;
}

/* The answer to a backend operation, as its callback saw it. */
struct be_outcome {
	int times;			/* callback runs */
	enum be_status status;
	uint64_t fence;
};

static void
on_be(void *arg, const struct be_reply *r)
{
	struct be_outcome *o = arg;
	o->times++;
	o->status = r->status;
	o->fence = r->fence;
}

/* The etcd backend (default settings) on fk, whose routes answer its lease
 * grant: once its watch stream is created and it counts as connected. The
 * caller destroys both. */
static struct backend *
backend_of_fake(struct conf **conf)
{
	char url[64];
	struct conf *c = conf_create();
	struct backend *be;

	snprintf(url, sizeof(url), "etcd://%s", fk->endpoint);
	ck_assert_int_eq(conf_override_backend(c, url), 0);
	ck_assert_int_eq(conf_finish(c), 0);
	be = backend_create("etcd", base, c->backend_settings);
	ck_assert_ptr_nonnull(be);
	be->up.wakeup = be_wakeup;
	be->up.expire = be_expire;
	be->up.arg = NULL;
	nexpires = 0;
	RUN_UNTIL(fk->watch != NULL);
	fake_watch_start(fk);
	fake_watch_send(fk, "{\"result\":{\"header\":{\"revision\":\"10\"},\"created\":true}}\n");
	RUN_UNTIL(strcmp(be->ops->state(be), "connected") == 0);
	*conf = c;
	return be;
}

/* The backend's INFO field name ("backend_lost_total"), a number. */
static long long
be_info(struct backend *be, const char *name)
{
	struct evbuffer *b = evbuffer_new();
	char pat[64];
	const char *t, *p;
	long long v;

	be->ops->info(be, b);
	evbuffer_add(b, "", 1);
	t = (const char *)evbuffer_pullup(b, -1);
	snprintf(pat, sizeof(pat), "\n%s:", name);
	p = strstr(t, pat);
	ck_assert_msg(p != NULL, "no %s in %s", name, t);
	v = strtoll(p + strlen(pat), NULL, 10);
	evbuffer_free(b);
	return v;
}

/* Acquire an exclusive lease of key for token on be. */
static void
be_acquire(struct backend *be, const char *key, const char *token, struct be_outcome *o)
{
	struct be_lock l = { .key = key, .keylen = strlen(key), .mode = LOCK_EXCLUSIVE,
	    .token = token, .ttl_ms = 10000 };
	be->ops->acquire(be, &l, on_be, o);
}

/* Two acquires' Txns put on lease 7, both kept pending. The first fails with
 * "lease not found": lease 7 is lost and lease 8 granted. The second,
 * answered the same after that, is about lease 7 too: lease 8 stays (it was
 * declared lost, and its revoke made every Txn on it fail the same way). */
START_TEST(test_backend_late_lease_not_found_keeps_new_lease)
{
	struct be_outcome a = { 0 }, b = { 0 };
	struct conf *conf;
	struct backend *be;

	fake_route(fk, "/v3/lease/grant", HTTP_OK, LEASE7);
	fake_route(fk, "/v3/lease/keepalive", HTTP_OK, LEASE7);
	fake_route(fk, "/v3/lease/revoke", HTTP_OK, "{}");
	be = backend_of_fake(&conf);
	ck_assert_int_eq(be_info(be, "backend_lease_id"), 7);
	be_acquire(be, "a", TOKEN_A, &a);
	be_acquire(be, "b", TOKEN_B, &b);
	RUN_UNTIL(fake_count(fk, "/v3/kv/txn") >= 1);
	ck_assert_ptr_nonnull(strstr(fake_last(fk, "/v3/kv/txn")->body, "\"lease\":\"7\""));

	fake_route(fk, "/v3/lease/grant", HTTP_OK, LEASE8);
	fake_route(fk, "/v3/lease/keepalive", HTTP_OK, LEASE8);
	fake_answer_pending(fk, "/v3/kv/txn", 404, LEASE_NOT_FOUND);
	RUN_UNTIL(be_info(be, "backend_lease_id") == 8);
	ck_assert_int_eq(be_info(be, "backend_lost_total"), 1);

	RUN_UNTIL(fake_count(fk, "/v3/kv/txn") == 2);	/* on one lane: sent now */
	ck_assert_ptr_nonnull(strstr(fake_last(fk, "/v3/kv/txn")->body, "\"lease\":\"7\""));
	fake_answer_pending(fk, "/v3/kv/txn", 404, LEASE_NOT_FOUND);
	RUN_UNTIL(a.times > 0 && b.times > 0);
	ck_assert_int_eq(a.status, BE_ERROR);
	ck_assert_int_eq(b.status, BE_ERROR);
	settle(SETTLE_MS);
	ck_assert_int_eq(be_info(be, "backend_lost_total"), 1);
	ck_assert_int_eq(be_info(be, "backend_lease_id"), 8);
	ck_assert_int_eq(fake_count(fk, "/v3/lease/grant"), 2);
	backend_destroy(be);
	conf_destroy(conf);
}
END_TEST

/* A lock's etcd key holds at revision 20. The watch stream then reports a
 * delete of a key of the same name created at 12 (an older one: a waiter's
 * that went with a lost lease and was put again, replayed late by a stream
 * started again from an older revision): the lock is not lost. A delete of
 * the key created at 20 is someone else's: it is. */
START_TEST(test_backend_late_delete_of_older_key_keeps_lock)
{
	static char txn[512], del[512];
	char *k = etcd_b64_encode("dlock/w/" TOKEN_A, strlen("dlock/w/" TOKEN_A));
	struct be_outcome a = { 0 };
	struct conf *conf;
	struct backend *be;

	snprintf(txn, sizeof(txn), "{\"header\":{\"revision\":\"20\"},\"succeeded\":true,"
	    "\"responses\":[{\"response_put\":{}},{\"response_range\":{\"kvs\":[{\"key\":"
	    "\"%s\",\"create_revision\":\"20\",\"mod_revision\":\"20\",\"value\":\"eDA=\","
	    "\"lease\":\"7\"}],\"count\":\"1\"}}]}", k);
	fake_route(fk, "/v3/lease/grant", HTTP_OK, LEASE7);
	fake_route(fk, "/v3/lease/keepalive", HTTP_OK, LEASE7);
	fake_route(fk, "/v3/kv/txn", HTTP_OK, txn);
	be = backend_of_fake(&conf);
	be_acquire(be, "w", TOKEN_A, &a);
	RUN_UNTIL(a.times > 0);
	ck_assert_int_eq(a.status, BE_OK);
	ck_assert_uint_eq(a.fence, 20);

	snprintf(del, sizeof(del), "{\"result\":{\"header\":{\"revision\":\"15\"},\"events\":"
	    "[{\"type\":\"DELETE\",\"kv\":{\"key\":\"%s\",\"mod_revision\":\"15\"},\"prev_kv\":"
	    "{\"key\":\"%s\",\"create_revision\":\"12\",\"mod_revision\":\"12\",\"value\":"
	    "\"eDA=\"}}]}}\n", k, k);
	fake_watch_send(fk, del);
	settle(SETTLE_MS);
	ck_assert_int_eq(nexpires, 0);
	ck_assert_int_eq(be_info(be, "backend_keys_held"), 1);

	snprintf(del, sizeof(del), "{\"result\":{\"header\":{\"revision\":\"25\"},\"events\":"
	    "[{\"type\":\"DELETE\",\"kv\":{\"key\":\"%s\",\"mod_revision\":\"25\"},\"prev_kv\":"
	    "{\"key\":\"%s\",\"create_revision\":\"20\",\"mod_revision\":\"20\",\"value\":"
	    "\"eDA=\"}}]}}\n", k, k);
	fake_watch_send(fk, del);
	RUN_UNTIL(nexpires == 1);
	backend_destroy(be);
	conf_destroy(conf);
	free(k);
}
END_TEST

/* ---- destroy -------------------------------------------------------------- */

/* etcd_destroy with calls in flight (sent and unanswered, on connections
 * still being made, waiting for a token) and a watch stream running: no
 * callback or hook runs afterwards, and everything is freed. */
START_TEST(test_destroy_with_work_in_flight)
{
	const char *eps[] = { fk->endpoint };
	struct outcome o[5] = { { 0 } };
	struct etcd *authed;

	cli = client_of_fake();
	call("/v3/kv/txn", "{}", &o[0]);
	call("/v3/kv/txn", "{}", &o[1]);
	etcd_watch(cli, json_pack("{s:s}", "key", "L2wv"));
	RUN_UNTIL(fake_count(fk, "/v3/kv/txn") == 2 && fk->watch != NULL);
	fake_watch_start(fk);
	fake_watch_send(fk, CREATED);
	RUN_UNTIL(nmsgs == 1);
	fake_watch_chunk(fk, EVENT1, 10);	/* a message begun */
	call("/v3/kv/txn", "{}", &o[2]);	/* not sent yet */
	etcd_watch(cli, json_pack("{s:s}", "key", "YQ=="));	/* not started yet */

	authed = client(eps, 1, TIMEOUT_MS, "alice", "s3cret");	/* the fake keeps the auth */
	in_call = true;
	etcd_call(authed, "/v3/kv/range", json_object(), on_result, &o[3]);
	etcd_call(authed, "/v3/kv/range", json_object(), on_result, &o[4]);
	in_call = false;
	RUN_UNTIL(fake_count(fk, AUTH_PATH) == 1);

	etcd_destroy(cli);
	cli = NULL;
	etcd_destroy(authed);
	settle(SETTLE_MS);
	for (int i = 0; i < 5; i++)
		ck_assert_msg(o[i].times == 0, "call %d: callback after etcd_destroy", i);
	ck_assert_int_eq(nmsgs, 1);
}
END_TEST

/* etcd_destroy right after calls and a watch were asked for, before the
 * loop ran: nothing runs afterwards. */
START_TEST(test_destroy_before_the_loop)
{
	struct outcome o = { 0 }, p = { 0 };
	char dead[32];
	const char *deps[] = { dead };
	struct etcd *down;

	fake_route(fk, "/v3/kv/range", HTTP_OK, "{}");
	cli = client_of_fake();
	call("/v3/kv/range", "{}", &o);
	etcd_watch(cli, json_pack("{s:s}", "key", "L2wv"));
	snprintf(dead, sizeof(dead), "127.0.0.1:%d", dead_port());
	down = client(deps, 1, TIMEOUT_MS, NULL, NULL);
	in_call = true;
	etcd_call(down, "/v3/kv/range", json_object(), on_result, &p);
	in_call = false;
	etcd_destroy(cli);
	cli = NULL;
	etcd_destroy(down);
	settle(SETTLE_MS);
	ck_assert_int_eq(o.times, 0);
	ck_assert_int_eq(p.times, 0);
	ck_assert_int_eq(nmsgs, 0);
	ck_assert_int_eq(nstates, 0);
}
END_TEST

static Suite *
etcd_suite(void)
{
	Suite *s = suite_create("etcd");
	TCase *tc = tcase_create("encoding");

	tcase_add_test(tc, test_b64_rfc4648_vectors);
	tcase_add_test(tc, test_b64_binary_round_trip);
	tcase_add_test(tc, test_b64_rejects);
	tcase_add_test(tc, test_int_fields);
	suite_add_tcase(s, tc);

	tc = tcase_create("calls");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_call_answered);
	tcase_add_test(tc, test_call_stream_result);
	tcase_add_test(tc, test_call_error_answer);
	tcase_add_test(tc, test_call_error_empty_sentence);
	tcase_add_test(tc, test_unreachable_endpoint);
	tcase_add_test(tc, test_down_after_up);
	tcase_add_test(tc, test_failover_to_next_endpoint);
	tcase_add_test(tc, test_timeout);
	tcase_add_test(tc, test_callbacks_from_the_loop);
	tcase_add_test(tc, test_failed_at_once_in_order);
	suite_add_tcase(s, tc);

	tc = tcase_create("watch");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_watch_messages);
	tcase_add_test(tc, test_watch_garbage);
	tcase_add_test(tc, test_watch_error_message);
	tcase_add_test(tc, test_watch_stream_ends);
	tcase_add_test(tc, test_watch_stop_is_silent);
	tcase_add_test(tc, test_watch_stopped_from_the_hook);
	tcase_add_test(tc, test_watch_unreachable);
	suite_add_tcase(s, tc);

	tc = tcase_create("auth");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_auth_token);
	tcase_add_test(tc, test_auth_token_expired);
	tcase_add_test(tc, test_auth_refused);
	suite_add_tcase(s, tc);

	tc = tcase_create("destroy");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_destroy_with_work_in_flight);
	tcase_add_test(tc, test_destroy_before_the_loop);
	tcase_add_test(tc, test_destroy_with_failed_calls);
	tcase_add_test(tc, test_destroy_from_a_failed_call);
	suite_add_tcase(s, tc);

	/* bugs found here once: each test failed before its fix */
	tc = tcase_create("regressions");
	tcase_add_checked_fixture(tc, setup, teardown);
	/* a connection that failed at once ran the callback inside etcd_call */
	tcase_add_test(tc, test_callback_from_the_loop_when_connect_fails_at_once);
	/* a chunk that ended inside true, false, null, a sign or an escape
	 * dropped the stream */
	tcase_add_test(tc, test_watch_one_byte_per_chunk);
	/* etcd_watch() from the hook did not stop the messages of the stream it
	 * replaces that follow in the same chunk */
	tcase_add_test(tc, test_watch_restarted_from_the_hook);
	/* the {"create_request": ...} object (and the request with it) and the
	 * authenticate body leaked */
	tcase_add_test(tc, test_watch_releases_create_request);
	/* the stream on an endpoint given up ran on */
	tcase_add_test(tc, test_watch_ends_when_its_endpoint_is_given_up);
	/* a token was filed under the current endpoint, not the one that gave it */
	tcase_add_test(tc, test_auth_token_stays_with_its_endpoint);
	/* a late code 16 about a token given up since threw the new one away */
	tcase_add_test(tc, test_auth_late_unauthenticated_keeps_new_token);
	/* a Txn put on a lease given up since that failed with "lease not
	 * found" after the next grant declared the new lease lost */
	tcase_add_test(tc, test_backend_late_lease_not_found_keeps_new_lease);
	/* a late delete of an older etcd key of the same name lost the lock */
	tcase_add_test(tc, test_backend_late_delete_of_older_key_keeps_lock);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	signal(SIGPIPE, SIG_IGN);	/* a fake writes to a client that went away */
	if (log_init(LOG_LEVEL_ERROR, NULL) != 0)
		return EXIT_FAILURE;
	return suite_run(etcd_suite());
}
