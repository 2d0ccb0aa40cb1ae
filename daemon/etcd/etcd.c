/*
 * etcd — a client of etcd v3's gRPC API; see etcd.h. It owns etcd's
 * methods, the endpoints and the failover between them, authentication and
 * lanes; the bytes go through the gRPC transport (grpc.h).
 *
 * The client keeps one connection (struct etcd_conn, around a struct
 * grpc_conn) to the endpoint calls go to, made when first needed. Every
 * call and the watch are streams of it (struct etcd_call, around a struct
 * grpc_stream). A call is on its connection's held list until the
 * connection is set up (and, with a user name, has a token), then on its
 * sent list until its stream ends. A call that ends without an answer is
 * told from the loop through c->failing (later.h), in order. A connection
 * that fails takes every call on it with it and moves the client to the
 * next endpoint; it is freed from the loop (c->graveyard).
 *
 * Every entry from the loop (a transport hook, a timer, a later item) and
 * every API function goes through c_enter/c_leave: etcd_destroy called from
 * inside a callback only marks the client dead, and the last c_leave frees
 * it.
 *
 * Calls made with a lane (etcd_call_lane) wait on their lane (struct
 * etcd_lane, in c->lanes) until the call before them of the same lane has
 * ended, so that etcd applies them in the order they were made.
 */
#include "etcd.h"

#include <assert.h>
#include <netdb.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/event.h>

#include "addr.h"
#include "clock.h"
#include "grpc.h"
#include "hashtab.h"
#include "later.h"
#include "log.h"
#include "tls.h"
#include "xmalloc.h"

#define ETCD_PING_MIN_MS 6000		/* etcd takes a PING every 5 s at most
					 * without data sent (grpc keepalive policy) */
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
	struct grpc_stream st;		/* its stream */
	etcd_cb *cb;			/* whom to tell (a call) */
	void *arg;
	struct etcd_conn *conn;		/* on its held or sent list; NULL: failing */
	uint64_t token_gen;		/* sent with the token of this generation, 0: none */
	bool resent;			/* sent again after an expired token */
	struct event *timer;		/* the request timeout (not for the watch) */
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
	struct grpc_conn *g;		/* its gRPC connection; NULL if none could start */
	bool failed;			/* given up, or closed after a GOAWAY: on
					 * c->graveyard */
	char *token;			/* auth token, NULL: none (yet) */
	uint64_t token_gen;		/* counts the tokens it was given */
	struct etcd_call *auth;		/* the authenticate call in flight, or NULL */
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
	bool refused;			/* down because etcd refused the settings
					 * (authentication, a certificate) */
	bool told_up;			/* what the state hook was told last */
	struct later_item state_item;	/* tells the state hook from the loop */
	char why_down[WHY_MAX + 160];	/* "<endpoint>: <reason>" */
	struct hashtab *lanes;		/* struct etcd_lane by id */
	struct etcd_call *watch;	/* the watch stream, NULL if none */
	bool wlost;			/* the stream ended: tell the owner NULL */
	struct later_item wlost_item;	/* tells it from the loop */
	int depth;			/* API calls and loop callbacks running */
	int in_api;			/* etcd_call/etcd_watch running */
	bool dead;			/* etcd_destroy was called */
	struct etcd_stats stats;	/* counters (streams: counted when asked) */
};

static void conn_fail(struct etcd_conn *conn, const char *why);
static void conn_pump(struct etcd_conn *conn);
static void conn_flush(struct etcd_conn *conn);
static void call_start(struct etcd *c, struct etcd_call *k);
static void really_destroy(struct etcd *c);

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
	c->refused = false;
	log_info("etcd %s up (HTTP/2%s)", ep->text, c->tls != NULL ? " over TLS" : "");
}

/* ep failed for why: log it unless it was down already (a connection
 * closed by etcd, then refused, is one change: the -BACKEND reply gives the
 * latest reason). */
static void
ep_down(struct etcd *c, struct etcd_ep *ep, const char *why)
{
	snprintf(c->why_down, sizeof(c->why_down), "%s: %s", ep->text, why);
	/* a certificate either side refused, not a server gone */
	c->refused = strncmp(why, "TLS: ", 5) == 0 && (strstr(why, "certificate") != NULL ||
	    strstr(why, "alert") != NULL);
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
	grpc_stream_fini(&k->st);
	free(k);
}

/* Take k off its connection: off its list, its stream no longer k's (and
 * cancelled when cancel and still open). */
static void
call_detach(struct etcd_call *k, bool cancel)
{
	struct etcd_conn *conn = k->conn;
	if (conn == NULL)
		return;
	if (grpc_stream_sent(&k->st)) {
		TAILQ_REMOVE(&conn->sent, k, entry);
		grpc_stream_detach(&k->st, cancel);
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
	if (conn != NULL && !grpc_stream_sent(&k->st)) {
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

/* A new call of kind with the request req, packed and framed now. */
static struct etcd_call *
call_new(struct etcd *c, int kind, const ProtobufCMessage *req, etcd_cb *cb, void *arg)
{
	struct etcd_call *k = xcalloc(1, sizeof(*k));

	assert(req->descriptor == methods[kind].req);
	k->c = c;
	k->kind = kind;
	k->cb = cb;
	k->arg = arg;
	grpc_stream_init(&k->st, methods[kind].path, req, methods[kind].resp,
	    kind == K_WATCH ? GRPC_STREAMING : kind == ETCD_LEASE_KEEPALIVE ? GRPC_FIRST_ENDS : 0);
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
	c->wlost = true;
	if (!c->wlost_item.queued)
		later_add(c->failing, &c->wlost_item, on_wlost_item);
}

/* Cancel the watch stream, if any, saying nothing. */
static void
watch_cancel(struct etcd *c)
{
	struct etcd_call *k = c->watch;
	c->wlost = false;
	later_cancel(c->failing, &c->wlost_item);
	if (k == NULL)
		return;
	c->watch = NULL;
	call_detach(k, true);
	call_free(k);
}

/* etcd ended the watch stream k, or it could not be read: tell the owner
 * (NULL, from the loop); k is detached. */
static void
watch_ended(struct etcd_conn *conn, struct etcd_call *k, const struct grpc_result *r)
{
	struct etcd *c = conn->c;
	if (r->end == GRPC_GARBLED) {
		log_warn("etcd %s: watch stream: %s", conn->ep->text, r->why);
	} else {
		if (r->status > 0)
			log_warn("etcd %s: watch stream ended: %s", conn->ep->text,
			    r->message != NULL ? r->message : "error");
		if (r->status == GRPC_UNAUTHENTICATED && k->token_gen == conn->token_gen &&
		    conn->token != NULL) {
			free(conn->token);
			conn->token = NULL;
		}
	}
	call_detach(k, false);
	if (c->watch == k) {
		c->watch = NULL;
		watch_lost(c);
	}
	call_free(k);
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
	c->refused = r->status == ETCD_FAILED;	/* etcd answered: the password */
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
	grpc_stream_rewind(&k->st);
	call_arm(k);
	call_start(c, k);
}

/* ---- what the transport tells ------------------------------------------------- */

/* A unary call k ended as r says (detached): tell its owner, or send it
 * again with a new token. */
static void
call_ended(struct etcd_conn *conn, struct etcd_call *k, const struct grpc_result *r)
{
	struct etcd *c = conn->c;
	struct etcd_result res = { .status = ETCD_OK, .msg = r->msg };

	if (r->end == GRPC_RESET) {
		if (k->kind == K_AUTH)
			conn_fail(conn, r->why);
		else
			call_down(k, r->why);
		return;
	}
	if (r->end == GRPC_GARBLED)
		log_warn("etcd %s: %s: %s", conn->ep->text, methods[k->kind].path, r->why);
	if (r->code != GRPC_OK) {
		res.status = ETCD_FAILED;
		res.code = r->code;
		res.why = r->why;
	}
	call_detach(k, false);
	if (k->kind == K_AUTH) {
		auth_done(conn, k, &res);
		call_end(k, &res);
		return;
	}
	state_set(c, true);
	if (res.status == ETCD_FAILED && res.code == GRPC_UNAUTHENTICATED && c->username != NULL &&
	    !k->resent && strstr(res.why, "invalid auth token") != NULL) {
		call_resend(conn, k);
		return;
	}
	call_end(k, &res);
}

/* The transport: a stream of conn ended. */
static void
on_done(void *arg, struct grpc_stream *st, const struct grpc_result *r)
{
	struct etcd_conn *conn = arg;
	struct etcd *c = conn->c;
	struct etcd_call *k = (struct etcd_call *)(void *)((char *)st -
	    offsetof(struct etcd_call, st));

	c_enter(c);
	if (c->dead)
		;	/* nothing more is told: k goes with its connection */
	else if (k->kind == K_WATCH)
		watch_ended(conn, k, r);
	else
		call_ended(conn, k, r);
	c_leave(c);
}

/* The transport: one message of the watch stream. */
static void
on_message(void *arg, struct grpc_stream *st, const ProtobufCMessage *msg)
{
	struct etcd_conn *conn = arg;
	struct etcd *c = conn->c;
	(void)st;

	c_enter(c);
	if (!c->dead) {
		c->stats.messages++;
		state_set(c, true);
		if (c->hooks.watch != NULL)
			c->hooks.watch(c->hooks.arg, (const Etcd__WatchResponse *)(const void *)msg);
	}
	c_leave(c);
}

/* The transport: conn is set up; send what it holds. */
static void
on_ready(void *arg)
{
	struct etcd_conn *conn = arg;
	struct etcd *c = conn->c;
	c_enter(c);
	conn_pump(conn);
	c_leave(c);
}

/* The transport: etcd's SETTINGS came, HTTP/2 is up. */
static void
on_settings(void *arg)
{
	struct etcd_conn *conn = arg;
	struct etcd *c = conn->c;
	c->stats.connects++;
	if (c->username == NULL)
		ep_up(c, conn->ep);
}

/* The transport: etcd said GOAWAY; new streams go to a new connection. */
static void
on_draining(void *arg)
{
	struct etcd_conn *conn = arg;
	if (conn->c->conn == conn)
		conn->c->conn = NULL;
}

/* The transport: after a GOAWAY every stream of conn has ended: close it
 * quietly unless calls still wait on it. */
static void
on_drained(void *arg)
{
	struct etcd_conn *conn = arg;
	struct etcd *c = conn->c;
	if (conn->failed || !TAILQ_EMPTY(&conn->held) || !TAILQ_EMPTY(&conn->sent))
		return;
	c_enter(c);
	conn->failed = true;
	TAILQ_REMOVE(&c->conns, conn, entry);
	TAILQ_INSERT_TAIL(&c->graveyard, conn, entry);
	c_leave(c);
}

/* conn is given up for why: its calls end ETCD_DOWN (from the loop), its
 * watch stream NULL; the client moves to the next endpoint. */
static void
conn_failed(struct etcd_conn *conn, const char *why)
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
	if (c->conn == conn) {
		size_t at = (size_t)(conn->ep - c->eps);
		c->conn = NULL;
		ep_down(c, conn->ep, why);
		if (c->neps > 1 && at == c->cur) {
			c->cur = (c->cur + 1) % c->neps;
			c->stats.switches++;
		}
		if (busy || conn->g == NULL || !grpc_conn_h2up(conn->g))
			state_set(c, false);
	}
	while ((k = TAILQ_FIRST(&conn->held)) != NULL)
		call_down(k, why);
	while ((k = TAILQ_FIRST(&conn->sent)) != NULL)
		call_down(k, why);
}

/* The transport: conn is given up. */
static void
on_failed(void *arg, const char *why)
{
	struct etcd_conn *conn = arg;
	struct etcd *c = conn->c;
	c_enter(c);
	conn_failed(conn, why);
	c_leave(c);
}

static const struct grpc_hooks conn_hooks = {
	.ready = on_ready,
	.settings = on_settings,
	.draining = on_draining,
	.drained = on_drained,
	.failed = on_failed,
	.message = on_message,
	.done = on_done,
};

/* ---- connections ------------------------------------------------------------ */

/* Give conn up for why (see conn_failed). */
static void
conn_fail(struct etcd_conn *conn, const char *why)
{
	if (conn->g != NULL)
		grpc_conn_fail(conn->g, why);
	else
		conn_failed(conn, why);
}

/* Write what conn has to send. */
static void
conn_flush(struct etcd_conn *conn)
{
	if (!conn->failed)
		grpc_conn_flush(conn->g);
}

/* Submit k's stream on conn (k is on conn->held). */
static void
call_submit(struct etcd_conn *conn, struct etcd_call *k)
{
	struct etcd *c = conn->c;
	struct grpc_meta token = { "token", conn->token };
	bool with_token = conn->token != NULL && k->kind != K_AUTH;

	/* the request timeout counts from here, not from while it was held */
	call_arm(k);
	k->token_gen = with_token ? conn->token_gen : 0;
	if (grpc_stream_submit(conn->g, &k->st, &token, with_token ? 1 : 0) < 0)
		return;	/* the connection failed, and k with it */
	TAILQ_REMOVE(&conn->held, k, entry);
	TAILQ_INSERT_TAIL(&conn->sent, k, entry);
	if (k->kind < K_AUTH)
		c->stats.calls++;
}

/* Send what conn holds when it can go: the authenticate call first. */
static void
conn_pump(struct etcd_conn *conn)
{
	struct etcd *c = conn->c;
	struct etcd_call *k, *next;

	if (conn->failed || !grpc_conn_ready(conn->g))
		return;
	if (c->username != NULL && conn->token == NULL)
		auth_start(conn);
	for (k = TAILQ_FIRST(&conn->held); k != NULL && !conn->failed; k = next) {
		next = TAILQ_NEXT(k, entry);
		if (k->kind != K_AUTH && c->username != NULL && conn->token == NULL)
			continue;
		call_submit(conn, k);
	}
	conn_flush(conn);
}

static void
conn_free(struct etcd_conn *conn)
{
	struct etcd_call *k;
	while ((k = TAILQ_FIRST(&conn->held)) != NULL) {
		call_detach(k, false);
		call_free(k);
	}
	while ((k = TAILQ_FIRST(&conn->sent)) != NULL) {
		call_detach(k, false);
		call_free(k);
	}
	grpc_conn_free(conn->g);
	if (conn->token != NULL)
		explicit_bzero(conn->token, strlen(conn->token));
	free(conn->token);
	free(conn);
}

/* A new connection to the current endpoint as c->conn, connecting; NULL
 * when it failed at once (after conn_failed). */
static struct etcd_conn *
conn_new(struct etcd *c)
{
	struct etcd_conn *conn = xcalloc(1, sizeof(*conn));
	struct etcd_ep *ep = &c->eps[c->cur];
	struct grpc_options o = {
		.addr = (const struct sockaddr *)&ep->sa,
		.addrlen = ep->salen,
		.authority = ep->text,
		.peer = "etcd",
		.tls = c->tls,
		.tls_name = c->tls_name != NULL ? c->tls_name : ep->host,
		.timeout_ms = c->timeout_ms,
		.ping_ms = c->ping_ms,
	};
	struct grpc_hooks h = conn_hooks;
	char why[WHY_MAX];

	conn->c = c;
	conn->ep = ep;
	TAILQ_INIT(&conn->held);
	TAILQ_INIT(&conn->sent);
	TAILQ_INSERT_TAIL(&c->conns, conn, entry);
	c->conn = conn;
	h.arg = conn;
	if ((conn->g = grpc_conn_create(c->base, &o, &h, why, sizeof(why))) == NULL) {
		conn_failed(conn, why);
		return NULL;
	}
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

bool
etcd_refused(const struct etcd *c)
{
	return !c->up && c->refused;
}

const char *
etcd_endpoint(const struct etcd *c)
{
	return c->eps[c->cur].text;
}

void
etcd_stats(const struct etcd *c, struct etcd_stats *out)
{
	const struct etcd_conn *conn;
	*out = c->stats;
	out->streams = 0;
	TAILQ_FOREACH(conn, &c->conns, entry)
		if (conn->g != NULL)
			out->streams += grpc_conn_streams(conn->g);
	TAILQ_FOREACH(conn, &c->graveyard, entry)
		if (conn->g != NULL)
			out->streams += grpc_conn_streams(conn->g);
}
