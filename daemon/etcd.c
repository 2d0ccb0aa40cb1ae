/*
 * etcd — a client of etcd v3's JSON gateway on evhttp; see etcd.h.
 *
 * Each endpoint has ETCD_POOL keep-alive connections for unary calls (evhttp
 * sends one request at a time per connection, so a few connections keep
 * calls from queueing behind a slow one) and one for the watch stream, made
 * when first used. A call goes to the least busy connection of the current
 * endpoint. Every call is on c->calls until its callback has run; evhttp
 * owns the HTTP request, this file the struct etcd_call around it.
 *
 * Authentication: with a user name, calls wait on c->held until the
 * endpoint has a token; one /v3/auth/authenticate call is made at a time.
 */
#include "etcd.h"
#include "etcd_internal.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "addr.h"
#include "clock.h"
#include "later.h"
#include "log.h"
#include "xmalloc.h"

#define ETCD_POOL 4			/* unary connections per endpoint */
#define ETCD_WATCH_TIMEOUT_S 3600	/* an idle watch stream is made again then */
#define ETCD_MESSAGE_MAX (16 << 20)	/* bytes of one watch message at most */
#define ETCD_CODE_UNAUTHENTICATED 16	/* gRPC: the token is not (or no longer) valid */

struct etcd;

/* An endpoint and its connections. */
struct etcd_ep {
	char *text;				/* "host:port" as configured */
	char ip[64];				/* its address, resolved at start */
	int port;				/* its port */
	struct evhttp_connection *pool[ETCD_POOL]; /* unary calls, made on use */
	unsigned busy[ETCD_POOL];		/* calls in flight on each */
	struct evhttp_connection *wconn;	/* the watch stream's, made on use */
	char *token;				/* auth token, NULL for none yet */
	uint64_t token_gen;			/* counts the tokens it was given */
};

/* A call, from etcd_call until its callback has run. */
struct etcd_call {
	struct etcd *c;			/* the client */
	char *path;			/* where it is posted */
	char *body;			/* the JSON text */
	etcd_cb *cb;			/* whom to tell */
	void *arg;
	struct etcd_ep *ep;		/* sent to this endpoint (NULL: not sent) */
	int slot;			/* on this connection of ep's pool */
	struct evhttp_request *req;	/* in flight, owned by evhttp */
	bool auth;			/* the /v3/auth/authenticate call */
	bool sending;			/* inside evhttp_make_request */
	int lane;			/* the connection it must go on, -1: any */
	uint64_t token_gen;		/* sent with ep's token of this generation,
					 * 0: with none */
	enum etcd_status failed;	/* on c->failing: how it ends */
	const char *why;		/* and why */
	TAILQ_ENTRY(etcd_call) entry;	/* on c->calls or c->held */
	struct later_item fail;		/* on c->failing until it is told */
};
TAILQ_HEAD(etcd_call_list, etcd_call);

struct etcd {
	struct event_base *base;	/* the loop */
	struct etcd_hooks hooks;	/* the owner */
	struct etcd_ep *eps;		/* endpoints, in order */
	size_t neps;			/* how many */
	size_t cur;			/* the one calls go to */
	struct timeval timeout;		/* request timeout */
	char *username;			/* NULL: no authentication */
	char *password;
	bool up;			/* the last call that ended was answered */
	bool authing;			/* an authenticate call is in flight */
	struct etcd_ep *auth_ep;	/* the endpoint it went to */
	struct etcd_call_list calls;	/* sent, waiting for their answer */
	struct etcd_call_list held;	/* waiting for a token */
	struct later *failing;		/* failed before sending: told from the loop */
	bool destroying;		/* etcd_destroy runs: tell nobody */
	struct evhttp_request *wreq;	/* the watch stream, NULL if none */
	struct etcd_ep *wep;		/* its endpoint */
	struct evbuffer *wbuf;		/* its bytes not yet parsed */
	json_t *wnext;			/* create request of the stream to start */
	bool wlost;			/* the stream failed: tell the owner */
	struct event *ev_watch;		/* starts wnext, tells wlost */
	struct etcd_stats stats;	/* counters */
};

static void call_send(struct etcd *c, struct etcd_call *k);
static void watch_cancel(struct etcd *c);

/* ---- base64 and JSON -------------------------------------------------------- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *
etcd_b64_encode(const void *s, size_t n)
{
	const unsigned char *p = s;
	char *out = xmalloc((n + 2) / 3 * 4 + 1), *o = out;
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) |
		    (i + 2 < n ? p[i + 2] : 0);
		*o++ = b64[v >> 18 & 63];
		*o++ = b64[v >> 12 & 63];
		*o++ = i + 1 < n ? b64[v >> 6 & 63] : '=';
		*o++ = i + 2 < n ? b64[v & 63] : '=';
	}
	*o = '\0';
	return out;
}

char *
etcd_b64_decode(const char *text, size_t *n)
{
	size_t len = strlen(text), j = 0;
	unsigned v = 0, bits = 0;
	char *out = xmalloc(len / 4 * 3 + 3);
	if (len % 4 != 0)
		goto bad;
	for (size_t i = 0; i < len; i++) {
		const char *at = text[i] != '\0' ? strchr(b64, text[i]) : NULL;
		if (text[i] == '=') {
			/* padding: only at the end, at most two */
			if (i + 2 < len || (i + 1 < len && text[i + 1] != '='))
				goto bad;
			continue;
		}
		if (at == NULL)
			goto bad;
		v = v << 6 | (unsigned)(at - b64);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[j++] = (char)(v >> bits & 0xff);
		}
	}
	out[j] = '\0';
	*n = j;
	return out;
bad:
	free(out);
	return NULL;
}

int64_t
etcd_int(const json_t *obj, const char *name)
{
	json_t *v = json_object_get(obj, name);
	const char *s;
	char *end;
	long long n;
	if (v == NULL)
		return 0;
	if (json_is_integer(v))
		return json_integer_value(v);
	if (!json_is_string(v))
		return -1;
	s = json_string_value(v);
	if (*s == '\0' || (!isdigit((unsigned char)*s) && *s != '-'))
		return -1;
	errno = 0;
	n = strtoll(s, &end, 10);
	return *end != '\0' || errno != 0 ? -1 : n;
}

/* The first JSON object in the len bytes at p (more may follow: a gRPC
 * trailer, the next watch message); *used gets its length. NULL with *used
 * 0 when the object is not complete yet, NULL with *used 1 when the bytes
 * are not JSON. */
static json_t *
json_first(const char *p, size_t len, size_t *used)
{
	json_error_t err;
	json_t *j = json_loadb(p, len, JSON_DISABLE_EOF_CHECK, &err);
	if (j != NULL && json_is_object(j)) {
		*used = (size_t)err.position;
		return j;
	}
	json_decref(j);
	*used = j == NULL && json_error_code(&err) == json_error_premature_end_of_input ? 0 : 1;
	return NULL;
}

/* ---- calls ---------------------------------------------------------------- */

static void
call_free(struct etcd_call *k)
{
	free(k->path);
	free(k->body);
	free(k);
}

/* Run k's callback with r and free k (k is on no list any more). */
static void
call_end(struct etcd_call *k, const struct etcd_result *r)
{
	if (k->cb != NULL)
		k->cb(k->arg, r);
	call_free(k);
}

/* Complete, from the loop, a call that failed before it was sent (free it
 * untold when the client is being destroyed). */
static void
on_fail(struct later_item *it)
{
	struct etcd_call *k = (struct etcd_call *)(void *)((char *)it -
	    offsetof(struct etcd_call, fail));
	struct etcd_result r = { .status = k->failed, .why = k->why };

	if (k->c->destroying)
		call_free(k);
	else
		call_end(k, &r);
}

/* Fail k from the loop (it is on no list). */
static void
call_fail_later(struct etcd *c, struct etcd_call *k, enum etcd_status st, const char *why)
{
	k->failed = st;
	k->why = why;
	later_add(c->failing, &k->fail, on_fail);
}

/* The connection of ep for lane (-1: the one with the fewest calls in
 * flight), made if need be. */
static int
ep_slot(struct etcd *c, struct etcd_ep *ep, int lane)
{
	int best = 0;
	for (int i = 1; i < ETCD_POOL; i++)
		if (ep->busy[i] < ep->busy[best])
			best = i;
	if (lane >= 0)
		best = lane % ETCD_POOL;
	if (ep->pool[best] == NULL) {
		ep->pool[best] = evhttp_connection_base_new(c->base, NULL, ep->ip,
		    (unsigned short)ep->port);
		if (ep->pool[best] == NULL)
			log_fatal("out of memory (an etcd connection)");
		evhttp_connection_set_timeout_tv(ep->pool[best], &c->timeout);
		evhttp_connection_set_retries(ep->pool[best], 0);
	}
	return best;
}

/* A call could not reach ep: calls go to the next endpoint from now on,
 * and the client is down until one is answered. ep's token goes unless the
 * call carried an older one (gen: the generation it carried, 0 none): a
 * late failure of a call sent before the last authentication says nothing
 * of the token that came since. */
static void
ep_failed(struct etcd *c, struct etcd_ep *ep, uint64_t gen, const char *why)
{
	c->stats.failures++;
	if (ep == &c->eps[c->cur]) {
		if (c->up || c->neps > 1)
			log_warn("etcd at %s: %s%s%s", ep->text, why, c->neps > 1 ? "; trying " : "",
			    c->neps > 1 ? c->eps[(c->cur + 1) % c->neps].text : "");
		if (c->neps > 1) {
			c->cur = (c->cur + 1) % c->neps;
			c->stats.switches++;
		}
		if (gen == 0 || gen == ep->token_gen) {
			free(ep->token);
			ep->token = NULL;
		}
		if (c->wreq != NULL && c->wep == ep) {
			/* the stream is on the endpoint given up: end it */
			watch_cancel(c);
			c->wlost = true;
			event_active(c->ev_watch, EV_TIMEOUT, 0);
		}
	}
	if (c->up) {
		c->up = false;
		if (c->hooks.state != NULL)
			c->hooks.state(c->hooks.arg, false);
	}
}

/* etcd answered a call: the client is up. */
static void
ep_answered(struct etcd *c)
{
	if (!c->up) {
		c->up = true;
		log_info("etcd at %s answers", c->eps[c->cur].text);
		if (c->hooks.state != NULL)
			c->hooks.state(c->hooks.arg, true);
	}
}

static void auth_start(struct etcd *c);

void
etcd_result_of(int code, const char *p, size_t len, json_t **body, struct etcd_result *r,
    char *why, size_t whysize)
{
	size_t used;
	json_t *j = len > 0 ? json_first(p, len, &used) : NULL;
	json_t *err = j != NULL ? json_object_get(j, "error") : NULL;

	*body = j;
	if (code == HTTP_OK && j != NULL && err == NULL) {
		json_t *res = json_object_get(j, "result");	/* a stream's one message */
		r->status = ETCD_OK;
		r->body = json_is_object(res) ? res : j;
		return;
	}
	r->status = ETCD_FAILED;
	r->code = j != NULL ? (int)etcd_int(j, "code") : -1;
	if (json_is_object(err))	/* a stream's error: {"error": {...}} */
		r->code = (int)etcd_int(err, "grpc_code"), err = json_object_get(err, "message");
	if (json_is_string(err) && json_string_value(err)[0] != '\0')
		snprintf(why, whysize, "%s", json_string_value(err));
	else
		snprintf(why, whysize, "HTTP status %d", code);
	r->why = why;
}

/* An answered call's outcome from its HTTP status and body. */
static void
call_result(struct evhttp_request *req, json_t **body, struct etcd_result *r, char *why,
    size_t whysize)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	size_t len = evbuffer_get_length(in);

	etcd_result_of(evhttp_request_get_response_code(req),
	    len > 0 ? (const char *)evbuffer_pullup(in, -1) : NULL, len, body, r, why, whysize);
}

/* evhttp's answer to a unary call (req NULL: the connection failed). */
static void
on_http(struct evhttp_request *req, void *arg)
{
	struct etcd_call *k = arg;
	struct etcd *c = k->c;
	struct etcd_ep *ep = k->ep;
	struct etcd_result r = { .status = ETCD_DOWN, .why = "no answer from etcd" };
	json_t *body = NULL;
	char why[256];

	TAILQ_REMOVE(&c->calls, k, entry);
	ep->busy[k->slot]--;
	k->req = NULL;
	if (k->sending) {
		/* the connection failed at once, inside evhttp_make_request: tell
		 * from the loop, never from inside etcd_call */
		ep_failed(c, ep, k->token_gen, "cannot connect");
		call_fail_later(c, k, ETCD_DOWN, "cannot connect to etcd");
		return;
	}
	if (req == NULL || evhttp_request_get_response_code(req) == 0) {
		ep_failed(c, ep, k->token_gen, "no answer (refused, reset or timed out)");
	} else {
		call_result(req, &body, &r, why, sizeof(why));
		ep_answered(c);
		if (r.status == ETCD_FAILED && r.code == ETCD_CODE_UNAUTHENTICATED && !k->auth &&
		    ep->token != NULL && k->token_gen == ep->token_gen) {
			/* expired: the next call authenticates. Not when the call
			 * carried an older token: the one since is still good */
			free(ep->token);
			ep->token = NULL;
		}
	}
	call_end(k, &r);
	json_decref(body);
}

/* Send k to the current endpoint (k is on no list). */
static void
call_send(struct etcd *c, struct etcd_call *k)
{
	struct etcd_ep *ep = &c->eps[c->cur];
	struct evhttp_request *req;
	struct evkeyvalq *h;
	int rc;

	if (c->username != NULL && ep->token == NULL && !k->auth) {
		TAILQ_INSERT_TAIL(&c->held, k, entry);
		auth_start(c);
		return;
	}
	k->slot = ep_slot(c, ep, k->lane);
	if ((req = evhttp_request_new(on_http, k)) == NULL)
		log_fatal("out of memory (an etcd request)");
	h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Host", ep->text);
	evhttp_add_header(h, "Content-Type", "application/json");
	k->token_gen = 0;
	if (ep->token != NULL && !k->auth) {
		evhttp_add_header(h, "Authorization", ep->token);
		k->token_gen = ep->token_gen;
	}
	evbuffer_add(evhttp_request_get_output_buffer(req), k->body, strlen(k->body));
	k->ep = ep;
	k->req = req;
	k->sending = true;
	ep->busy[k->slot]++;
	c->stats.calls++;
	TAILQ_INSERT_TAIL(&c->calls, k, entry);
	rc = evhttp_make_request(ep->pool[k->slot], req, EVHTTP_REQ_POST, k->path);
	k->sending = false;
	if (rc != 0 && k->req != NULL) {
		/* refused without a callback: evhttp freed req */
		TAILQ_REMOVE(&c->calls, k, entry);
		ep->busy[k->slot]--;
		k->req = NULL;
		call_fail_later(c, k, ETCD_DOWN, "cannot send to etcd");
	}
}

void
etcd_call(struct etcd *c, const char *path, json_t *body, etcd_cb *cb, void *arg)
{
	etcd_call_lane(c, (unsigned)-1, path, body, cb, arg);
}

void
etcd_call_lane(struct etcd *c, unsigned lane, const char *path, json_t *body,
    etcd_cb *cb, void *arg)
{
	struct etcd_call *k = xcalloc(1, sizeof(*k));
	k->c = c;
	k->lane = lane == (unsigned)-1 ? -1 : (int)(lane % ETCD_POOL);
	k->path = xstrdup(path);
	k->body = json_dumps(body, JSON_COMPACT);
	k->cb = cb;
	k->arg = arg;
	json_decref(body);
	if (k->body == NULL)
		log_fatal("out of memory (an etcd request body)");
	call_send(c, k);
}

/* ---- authentication ------------------------------------------------------- */

/* The answer to /v3/auth/authenticate: send the held calls with the token,
 * or fail them. */
static void
on_auth(void *arg, const struct etcd_result *r)
{
	struct etcd *c = arg;
	struct etcd_ep *ep = c->auth_ep;
	const char *token = r->status == ETCD_OK ?
	    json_string_value(json_object_get(r->body, "token")) : NULL;
	struct etcd_call_list held;
	struct etcd_call *k;

	c->authing = false;
	TAILQ_INIT(&held);
	TAILQ_CONCAT(&held, &c->held, entry);
	if (token != NULL) {
		free(ep->token);
		ep->token = xstrdup(token);
		ep->token_gen++;
		if (c->wnext != NULL)
			event_active(c->ev_watch, EV_TIMEOUT, 0);	/* it waited for it */
	} else if (r->status == ETCD_FAILED) {
		log_error("etcd at %s refused user '%s': %s", ep->text, c->username,
		    r->why != NULL ? r->why : "error");
	}
	while ((k = TAILQ_FIRST(&held)) != NULL) {
		TAILQ_REMOVE(&held, k, entry);
		if (token != NULL) {
			call_send(c, k);
		} else {
			struct etcd_result f = { .status = r->status == ETCD_OK ? ETCD_FAILED :
			    r->status, .code = r->code, .why = "etcd authentication failed" };
			call_end(k, &f);
		}
	}
}

/* Authenticate with the current endpoint, unless that is under way. */
static void
auth_start(struct etcd *c)
{
	struct etcd_call *k;
	if (c->authing)
		return;
	c->authing = true;
	c->auth_ep = &c->eps[c->cur];
	k = xcalloc(1, sizeof(*k));
	k->c = c;
	k->path = xstrdup("/v3/auth/authenticate");
	json_t *req = json_pack("{s:s, s:s}", "name", c->username, "password",
	    c->password != NULL ? c->password : "");
	k->body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	k->cb = on_auth;
	k->arg = c;
	k->auth = true;
	k->lane = -1;
	call_send(c, k);
}

/* ---- the watch stream ----------------------------------------------------- */

/* The stream failed or ended: forget it and tell the owner from the loop. */
static void
watch_lost(struct etcd *c)
{
	c->wreq = NULL;
	c->wep = NULL;
	evbuffer_drain(c->wbuf, evbuffer_get_length(c->wbuf));
	c->wlost = true;
	event_active(c->ev_watch, EV_TIMEOUT, 0);
}

int
etcd_stream_next(struct evbuffer *buf, json_t **msg, char *why, size_t whysize)
{
	json_error_t err;
	size_t len, n;
	const char *p, *nl;

	*msg = NULL;
	while ((len = evbuffer_get_length(buf)) > 0) {
		p = (const char *)evbuffer_pullup(buf, -1);
		if ((nl = memchr(p, '\n', len)) == NULL) {
			if (len <= ETCD_MESSAGE_MAX)
				return 0;	/* more to come */
			snprintf(why, whysize, "a message over %d bytes", ETCD_MESSAGE_MAX);
			return -1;
		}
		n = (size_t)(nl - p);
		for (; n > 0 && isspace((unsigned char)p[n - 1]); n--)
			;
		if (n > 0 && (*msg = json_loadb(p, n, 0, &err)) == NULL) {
			snprintf(why, whysize, "not JSON");
			return -1;
		}
		evbuffer_drain(buf, (size_t)(nl - p) + 1);
		if (*msg != NULL)
			return 1;
		/* a blank line */
	}
	return 0;
}

/* Bytes of the stream arrived: pass on each whole message. The gateway ends
 * each message with a newline (JSON text holds none of its own), so a
 * message is complete when its newline has come, wherever the chunks were
 * cut. */
static void
on_watch_chunk(struct evhttp_request *req, void *arg)
{
	struct etcd *c = arg;
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	json_t *msg, *res;
	char why[64];
	int rc;

	if (c->wreq != req || c->wnext != NULL) {
		evbuffer_drain(in, evbuffer_get_length(in));
		return;
	}
	evbuffer_add_buffer(c->wbuf, in);
	while ((rc = etcd_stream_next(c->wbuf, &msg, why, sizeof(why))) == 1) {
		c->stats.messages++;
		res = json_object_get(msg, "result");
		if (!json_is_object(res)) {
			json_t *e = json_object_get(msg, "error");
			log_warn("etcd watch stream from %s failed: %s", c->wep->text,
			    json_is_object(e) && json_is_string(json_object_get(e, "message")) ?
			    json_string_value(json_object_get(e, "message")) : "error");
			json_decref(msg);
			goto bad;
		}
		ep_answered(c);
		if (c->hooks.watch != NULL)
			c->hooks.watch(c->hooks.arg, res);
		json_decref(msg);
		if (c->wreq != req || c->wnext != NULL)
			return;	/* the hook stopped or restarted the stream */
	}
	if (rc == 0)
		return;
	log_warn("etcd watch stream from %s: %s; starting it again", c->wep->text, why);
bad:
	evhttp_cancel_request(req);
	watch_lost(c);
}

/* The stream's response ended (req NULL: its connection failed). */
static void
on_watch_done(struct evhttp_request *req, void *arg)
{
	struct etcd *c = arg;
	if (req != NULL && c->wreq != req)
		return;
	if (req == NULL || evhttp_request_get_response_code(req) == 0)
		log_warn("etcd watch stream from %s lost", c->wep != NULL ? c->wep->text : "?");
	else if (evhttp_request_get_response_code(req) != HTTP_OK)
		log_warn("etcd watch stream from %s refused: HTTP status %d",
		    c->wep != NULL ? c->wep->text : "?", evhttp_request_get_response_code(req));
	watch_lost(c);
}

/* Cancel the stream running, if any. */
static void
watch_cancel(struct etcd *c)
{
	if (c->wreq != NULL)
		evhttp_cancel_request(c->wreq);
	c->wreq = NULL;
	c->wep = NULL;
	evbuffer_drain(c->wbuf, evbuffer_get_length(c->wbuf));
}

/* From the loop: start the stream asked for, or tell the owner the last
 * one ended. */
static void
on_watch_event(evutil_socket_t fd, short what, void *arg)
{
	struct etcd *c = arg;
	struct etcd_ep *ep = &c->eps[c->cur];
	struct evhttp_request *req;
	struct evkeyvalq *h;
	json_t *create = c->wnext;
	char *text;
	(void)fd;
	(void)what;

	if (create == NULL) {
		if (c->wlost && c->wreq == NULL) {
			c->wlost = false;
			if (c->hooks.watch != NULL)
				c->hooks.watch(c->hooks.arg, NULL);
		}
		return;
	}
	if (c->username != NULL && ep->token == NULL) {
		auth_start(c);	/* the stream starts when the token comes */
		return;
	}
	c->wnext = NULL;
	c->wlost = false;
	watch_cancel(c);
	json_t *msg = json_pack("{s:o}", "create_request", create);
	text = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	if (ep->wconn == NULL) {
		ep->wconn = evhttp_connection_base_new(c->base, NULL, ep->ip,
		    (unsigned short)ep->port);
		if (ep->wconn == NULL)
			log_fatal("out of memory (an etcd connection)");
		evhttp_connection_set_timeout(ep->wconn, ETCD_WATCH_TIMEOUT_S);
		evhttp_connection_set_retries(ep->wconn, 0);
	}
	if (text == NULL || (req = evhttp_request_new(on_watch_done, c)) == NULL)
		log_fatal("out of memory (an etcd watch)");
	evhttp_request_set_chunked_cb(req, on_watch_chunk);
	h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Host", ep->text);
	evhttp_add_header(h, "Content-Type", "application/json");
	if (ep->token != NULL)
		evhttp_add_header(h, "Authorization", ep->token);
	evbuffer_add(evhttp_request_get_output_buffer(req), text, strlen(text));
	free(text);
	c->wreq = req;
	c->wep = ep;
	c->stats.watches++;
	if (evhttp_make_request(ep->wconn, req, EVHTTP_REQ_POST, "/v3/watch") != 0)
		watch_lost(c);
}

void
etcd_watch(struct etcd *c, json_t *create_request)
{
	json_decref(c->wnext);
	c->wnext = create_request;
	event_active(c->ev_watch, EV_TIMEOUT, 0);
}

void
etcd_watch_stop(struct etcd *c)
{
	json_decref(c->wnext);
	c->wnext = NULL;
	c->wlost = false;
	watch_cancel(c);
}

bool
etcd_watching(const struct etcd *c)
{
	return c->wreq != NULL || c->wnext != NULL;
}

/* ---- the client ----------------------------------------------------------- */

struct etcd *
etcd_create(struct event_base *base, const struct etcd_options *o,
    const struct etcd_hooks *hooks)
{
	struct etcd *c = xcalloc(1, sizeof(*c));
	c->base = base;
	c->hooks = *hooks;
	c->neps = o->nendpoints;
	c->eps = xcalloc(c->neps, sizeof(*c->eps));
	c->timeout = clock_tv(o->request_timeout_ms);
	c->username = o->username != NULL ? xstrdup(o->username) : NULL;
	c->password = o->password != NULL ? xstrdup(o->password) : NULL;
	TAILQ_INIT(&c->calls);
	TAILQ_INIT(&c->held);
	c->failing = later_create(base);
	for (size_t i = 0; i < c->neps; i++) {
		struct etcd_ep *ep = &c->eps[i];
		struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
		struct addr a;
		const char *why;
		int rc;

		ep->text = xstrdup(o->endpoints[i]);
		if (addr_parse(ep->text, ADDR_PORT_REQUIRED, &a, &why) < 0 || a.kind != ADDR_TCP) {
			log_error("etcd endpoint '%s': %s", ep->text, why != NULL ? why :
			    "not host:port");
			c->neps = i + 1;
			etcd_destroy(c);
			return NULL;
		}
		/* start-up may block: resolve each name once, here */
		if ((rc = getaddrinfo(a.host, NULL, &hints, &ai)) != 0) {
			log_error("etcd endpoint '%s': cannot resolve %s: %s", ep->text, a.host,
			    gai_strerror(rc));
			c->neps = i + 1;
			etcd_destroy(c);
			return NULL;
		}
		getnameinfo(ai->ai_addr, ai->ai_addrlen, ep->ip, sizeof(ep->ip), NULL, 0,
		    NI_NUMERICHOST);
		freeaddrinfo(ai);
		ep->port = a.port;
	}
	c->wbuf = evbuffer_new();
	c->ev_watch = event_new(base, -1, 0, on_watch_event, c);
	if (c->wbuf == NULL || c->ev_watch == NULL)
		log_fatal("out of memory (the etcd client)");
	return c;
}

void
etcd_destroy(struct etcd *c)
{
	struct etcd_call *k;
	if (c == NULL)
		return;
	etcd_watch_stop(c);
	/* freeing a connection frees its requests without their callbacks */
	for (size_t i = 0; i < c->neps; i++) {
		for (int j = 0; j < ETCD_POOL; j++)
			if (c->eps[i].pool[j] != NULL)
				evhttp_connection_free(c->eps[i].pool[j]);
		if (c->eps[i].wconn != NULL)
			evhttp_connection_free(c->eps[i].wconn);
		free(c->eps[i].text);
		free(c->eps[i].token);
	}
	while ((k = TAILQ_FIRST(&c->calls)) != NULL) {
		TAILQ_REMOVE(&c->calls, k, entry);
		call_free(k);
	}
	while ((k = TAILQ_FIRST(&c->held)) != NULL) {
		TAILQ_REMOVE(&c->held, k, entry);
		call_free(k);
	}
	c->destroying = true;
	later_run(c->failing);	/* frees them untold */
	later_destroy(c->failing);
	if (c->wbuf != NULL)
		evbuffer_free(c->wbuf);
	if (c->ev_watch != NULL)
		event_free(c->ev_watch);
	free(c->eps);
	free(c->username);
	if (c->password != NULL)
		explicit_bzero(c->password, strlen(c->password));
	free(c->password);
	free(c);
}

bool
etcd_up(const struct etcd *c)
{
	return c->up;
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
