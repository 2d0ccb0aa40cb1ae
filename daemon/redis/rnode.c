/*
 * rnode — a client of one Redis server (rnode.h says what it does).
 *
 * Each connection (struct rn_conn) goes DOWN → RESOLVING → CONNECTING →
 * READY and back to DOWN. Its handshake (AUTH, SELECT, SCRIPT LOAD, CONFIG
 * GET, PING; or AUTH, PING, SUBSCRIBE) is written at once behind the
 * connect, so it costs one round trip (plus TLS's); the replies are matched
 * to the calls in flight in order, as Redis answers them. A bufferevent
 * (an OpenSSL one for TLS) carries the bytes: what is written in one turn
 * of the loop goes out in one write.
 *
 * It owns its connections, the calls in flight (struct rn_call) and the
 * kept calls. Its callbacks may call rnode_eval, rnode_command, rnode_keep
 * and rnode_drop, never rnode_destroy.
 */
#include "rnode.h"

#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <hiredis/hiredis.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "backoff.h"
#include "clock.h"
#include "codec.h"
#include "log.h"
#include "num.h"
#include "tls.h"
#include "xmalloc.h"

#define RN_BACKOFF_MIN_MS 100		/* first reconnect delay */
#define RN_BACKOFF_MAX_MS 5000		/* longest reconnect delay */
#define RN_WATCH_MS 100			/* how often timeouts are checked */
#define RN_KEEP_RETRY_MS 1000		/* kept calls answered an error: again after */
#define RN_SCRIPTS_MAX 12		/* scripts of one node at most */
#define RN_ARGS_MAX 16			/* arguments of one call at most */

struct rn_conn;

/* What a call in flight is, and so what its reply does. */
enum rn_kind {
	RK_USER,			/* the owner's: cb is told */
	RK_KEPT,			/* a kept call */
	RK_AUTH,			/* handshake: AUTH */
	RK_SELECT,			/* handshake: SELECT */
	RK_LOAD,			/* handshake: SCRIPT LOAD of script */
	RK_POLICY,			/* handshake: CONFIG GET maxmemory-policy */
	RK_PERSIST,			/* handshake: CONFIG GET append* */
	RK_UPTIME,			/* handshake: INFO server */
	RK_ROLE,			/* handshake: ROLE, which must say master */
	RK_HELLO,			/* handshake: the PING whose reply ends it */
	RK_WAIT,			/* the WAIT behind an acknowledged call */
};

/* A call sent, waiting for its reply. */
struct rn_call {
	enum rn_kind kind;		/* what it is */
	rnode_cb *cb;			/* RK_USER: whom to tell (NULL: nobody) */
	void *arg;
	struct rn_kept *kept;		/* RK_KEPT: which */
	size_t script;			/* an eval's (or RK_LOAD's) script; SIZE_MAX: none */
	int argc;			/* an eval's arguments, for a NOSCRIPT */
	const char *const *argv;
	const size_t *argvlen;
	uint64_t sent_ms;		/* when it went out (clock_ms()) */
	bool acked;			/* its reply waits for a WAIT (rnode_eval_acked) */
	redisReply *held;		/* answered, on a WAIT's calls: its reply, held
					 * until the WAIT answers */
	TAILQ_ENTRY(rn_call) entry;	/* on its connection's inflight, or (answered,
					 * held) on its WAIT's calls */
	TAILQ_HEAD(, rn_call) calls;	/* RK_WAIT: the answered calls it covers */
};
TAILQ_HEAD(rn_call_list, rn_call);

/* A kept call (rnode_keep): its arguments in the rest of its allocation. */
struct rn_kept {
	size_t script;			/* which script */
	int argc;			/* its arguments */
	const char *argv[RN_ARGS_MAX];
	size_t argvlen[RN_ARGS_MAX];
	uint64_t drop_at;		/* given up then (clock_ms()) */
	bool inflight;			/* sent, not answered */
	TAILQ_ENTRY(rn_kept) entry;	/* on n->kept */
};
TAILQ_HEAD(rn_kept_list, rn_kept);

enum rn_state { RN_DOWN, RN_RESOLVING, RN_CONNECTING, RN_READY };

/* One connection of a node. */
struct rn_conn {
	struct rnode *n;		/* its node */
	bool sub;			/* the subscriber */
	enum rn_state state;		/* where it is */
	struct evdns_getaddrinfo_request *dns; /* RN_RESOLVING: the lookup */
	struct evutil_addrinfo *ai_all;	/* the addresses the name resolved to */
	struct evutil_addrinfo *ai_cur;	/* the one tried now */
	bool connected;			/* the connection to ai_cur is made */
	struct bufferevent *bev;	/* RN_CONNECTING, RN_READY: the connection */
	redisReader *reader;		/* reads its replies */
	struct rn_call_list inflight;	/* sent, in order */
	size_t subs_left;		/* subscriber: confirmations still to come */
	uint64_t started_ms;		/* when this attempt began */
	struct backoff backoff;		/* reconnect delays */
	struct event *ev_reconnect;	/* makes it again */
	struct evbuffer *out;		/* what this turn of the loop wrote, handed to
					 * bev once the turn's callbacks are done */
	struct event *ev_flush;		/* does that */
	uint64_t reconnects;		/* connections up after the first */
	bool ever_up;			/* up at least once */
	unsigned gen;			/* counts connections: a callback that
					 * dropped it is seen */
	char logged[200];		/* the problem logged last, "" once up */
	bool last_generic;		/* the last attempt closed with no reason */
};

struct rnode {
	struct event_base *base;	/* the loop */
	struct evdns_base *dns;		/* resolves the host */
	struct rnode_conf conf;		/* what to connect to (strings our own) */
	struct rnode_hooks hooks;	/* whom to tell */
	void *arg;
	struct rn_conn cmd;		/* commands */
	struct rn_conn sub;		/* pub/sub, when there are channels */
	char sha[RN_SCRIPTS_MAX][41];	/* SHA1 of each script the server has, or "" */
	bool noload;			/* SCRIPT LOAD refused: EVAL always */
	struct rn_kept_list kept;	/* kept calls */
	struct event *ev_watch;		/* timeouts */
	struct event *ev_kept;		/* sends kept calls again */
	char address[INET6_ADDRSTRLEN + 8]; /* the address last connected to */
	char problem[200];		/* why the command connection is not up */
	uint64_t down_since;		/* since when (clock_ms()), 0: never up */
	char last_error[200];		/* the error reply logged last, "" when fine */
	bool refused;			/* the last connection was refused for its
					 * settings (authentication, SELECT, a
					 * certificate), until one is up */
	bool acl_refused;		/* the last script failed for a missing
					 * permission, until one runs */
	char policy[32];		/* maxmemory-policy as last read */
	char persist[32];		/* what a restart keeps, as last read
					 * (on_persistence) */
	uint64_t uptime_ms;		/* read_uptime: the server's uptime (whole
					 * seconds) ... */
	uint64_t uptime_at;		/* ... as read then (clock_ms()); 0: not
					 * known */
	bool uptime_unknown;		/* that it cannot be read was logged */
	uint64_t ncalls;		/* calls sent */
	uint64_t nunacked;		/* calls that too few replicas acknowledged */
	uint64_t nerrors;		/* error replies */
	bool destroying;		/* rnode_destroy runs */
	bool unacked_logged;		/* a missing acknowledgement was logged */
	bool started;			/* rnode_start was called */
};

static void conn_start(struct rn_conn *c);
static void conn_down(struct rn_conn *c, const char *why);
static void send_kept(struct rnode *n);
static void conn_try(struct rn_conn *c);

/* ---- writing ----------------------------------------------------------------- */

/*
 * Append to c's output one RESP array: head (NULL, or two words: the
 * command and its first argument, e.g. EVALSHA and a SHA1) then argv. The
 * whole call is built in one buffer and added in one go.
 */
static void
conn_write(struct rn_conn *c, const char *head0, const char *head1, size_t head1len,
    int argc, const char *const *argv, const size_t *argvlen)
{
	char stack[1024], *buf = stack;
	size_t need = 24, len = 0, h0 = head0 != NULL ? strlen(head0) : 0;
	int total = argc + (head0 != NULL ? 2 : 0);
	if (head0 != NULL)
		need += 2 * 24 + h0 + head1len + 4;
	for (int i = 0; i < argc; i++)
		need += 24 + argvlen[i] + 2;
	if (need > sizeof(stack))
		buf = xmalloc(need);
	len += codec_format_header(buf + len, '*', total);
	for (int i = -2; i < argc; i++) {
		const char *a;
		size_t alen;
		if (i < 0 && head0 == NULL)
			continue;
		a = i == -2 ? head0 : i == -1 ? head1 : argv[i];
		alen = i == -2 ? h0 : i == -1 ? head1len : argvlen[i];
		len += codec_format_header(buf + len, '$', (long long)alen);
		memcpy(buf + len, a, alen);
		len += alen;
		buf[len++] = '\r';
		buf[len++] = '\n';
	}
	/* an OpenSSL bufferevent writes (one record, one send) as soon as it
	 * is given bytes: what a turn writes is handed over at its end */
	if (evbuffer_get_length(c->out) == 0)
		event_active(c->ev_flush, EV_TIMEOUT, 0);
	evbuffer_add(c->out, buf, len);
	if (buf != stack)
		free(buf);
}

/* The end of a turn of the loop: hand what it wrote to the connection.
 * Over plain TCP, with nothing waiting before it, it is written at once
 * (a bufferevent would wait for the next turn's poll to say the socket is
 * writable: a round of the loop on every call's way out); what the socket
 * does not take goes through the bufferevent. */
static void
on_flush(evutil_socket_t fd, short what, void *arg)
{
	struct rn_conn *c = arg;
	(void)fd;
	(void)what;
	if (c->bev == NULL) {
		evbuffer_drain(c->out, evbuffer_get_length(c->out));
		return;
	}
	if (c->n->conf.tls == NULL && c->connected &&
	    evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
		(void)evbuffer_write(c->out, bufferevent_getfd(c->bev));
	if (evbuffer_get_length(c->out) > 0)
		bufferevent_write_buffer(c->bev, c->out);
}

/* A new call of kind on c's list, sent now (the caller wrote it). */
static struct rn_call *
call_add(struct rn_conn *c, enum rn_kind kind)
{
	struct rn_call *call = xcalloc(1, sizeof(*call));
	call->kind = kind;
	call->script = SIZE_MAX;
	call->sent_ms = clock_ms();
	TAILQ_INIT(&call->calls);
	TAILQ_INSERT_TAIL(&c->inflight, call, entry);
	return call;
}

/* Send a command given as words (NUL-terminated strings, NULL after the
 * last) on c as a call of kind. */
static struct rn_call *
conn_words(struct rn_conn *c, enum rn_kind kind, const char *const *words)
{
	size_t lens[RN_ARGS_MAX];
	int argc = 0;
	for (; words[argc] != NULL; argc++) {
		assert(argc < RN_ARGS_MAX);
		lens[argc] = strlen(words[argc]);
	}
	conn_write(c, NULL, NULL, 0, argc, words, lens);
	return call_add(c, kind);
}

/* Write the call of script with its arguments: EVALSHA when the server has
 * the script, else EVAL with its text. */
static void
write_eval(struct rnode *n, size_t script, int argc, const char *const *argv,
    const size_t *argvlen)
{
	if (n->sha[script][0] != '\0')
		conn_write(&n->cmd, "EVALSHA", n->sha[script], 40, argc, argv, argvlen);
	else
		conn_write(&n->cmd, "EVAL", n->conf.scripts[script],
		    strlen(n->conf.scripts[script]), argc, argv, argvlen);
	n->ncalls++;
}

/* ---- calls ------------------------------------------------------------------- */

int
rnode_eval(struct rnode *n, size_t script, int argc, const char *const *argv,
    const size_t *argvlen, rnode_cb *cb, void *arg)
{
	assert(script < n->conf.nscripts);
	if (n->cmd.state != RN_READY)
		return -1;
	write_eval(n, script, argc, argv, argvlen);
	struct rn_call *call = call_add(&n->cmd, RK_USER);
	call->cb = cb;
	call->arg = arg;
	call->script = script;
	call->argc = argc;
	call->argv = argv;
	call->argvlen = argvlen;
	return 0;
}

int
rnode_eval_acked(struct rnode *n, size_t script, int argc, const char *const *argv,
    const size_t *argvlen, rnode_cb *cb, void *arg)
{
	if (rnode_eval(n, script, argc, argv, argvlen, cb, arg) < 0)
		return -1;
	TAILQ_LAST(&n->cmd.inflight, rn_call_list)->acked = n->conf.min_replicas_ack > 0;
	return 0;
}

int
rnode_command(struct rnode *n, int argc, const char *const *argv, const size_t *argvlen,
    rnode_cb *cb, void *arg)
{
	if (n->cmd.state != RN_READY)
		return -1;
	conn_write(&n->cmd, NULL, NULL, 0, argc, argv, argvlen);
	n->ncalls++;
	struct rn_call *call = call_add(&n->cmd, RK_USER);
	call->cb = cb;
	call->arg = arg;
	return 0;
}

/* Send kept call k (the command connection is up). */
static void
kept_send(struct rnode *n, struct rn_kept *k)
{
	write_eval(n, k->script, k->argc, k->argv, k->argvlen);
	struct rn_call *call = call_add(&n->cmd, RK_KEPT);
	call->kept = k;
	call->script = k->script;
	call->argc = k->argc;
	call->argv = k->argv;
	call->argvlen = k->argvlen;
	k->inflight = true;
}

void
rnode_keep(struct rnode *n, size_t script, int argc, const char *const *argv,
    const size_t *argvlen, uint64_t drop_at)
{
	size_t need = 0;
	assert(script < n->conf.nscripts && argc <= RN_ARGS_MAX);
	for (int i = 0; i < argc; i++)
		need += argvlen[i] + 1;
	struct rn_kept *k = xcalloc(1, sizeof(*k) + need);
	char *p = (char *)(k + 1);
	k->script = script;
	k->argc = argc;
	k->drop_at = drop_at;
	for (int i = 0; i < argc; i++) {
		memcpy(p, argv[i], argvlen[i]);
		p[argvlen[i]] = '\0';
		k->argv[i] = p;
		k->argvlen[i] = argvlen[i];
		p += argvlen[i] + 1;
	}
	TAILQ_INSERT_TAIL(&n->kept, k, entry);
	if (n->cmd.state == RN_READY)
		kept_send(n, k);
}

/* Send the kept calls not in flight, and drop those whose time is over. */
static void
send_kept(struct rnode *n)
{
	struct rn_kept *k, *next;
	uint64_t now = clock_ms();
	for (k = TAILQ_FIRST(&n->kept); k != NULL; k = next) {
		next = TAILQ_NEXT(k, entry);
		if (k->inflight)
			continue;
		if (now >= k->drop_at) {
			TAILQ_REMOVE(&n->kept, k, entry);
			free(k);
		} else if (n->cmd.state == RN_READY) {
			kept_send(n, k);
		}
	}
}

static void
on_kept(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	send_kept(arg);
}

/* ---- replies ----------------------------------------------------------------- */

/* An error reply to a script: logged when it is not the one logged last,
 * so that an outage or a missing permission gives one line, not one per
 * call. */
static void
note_error(struct rnode *n, const char *err)
{
	if (strncmp(n->last_error, err, sizeof(n->last_error) - 1) == 0)
		return;
	/* a cluster's redirections are its client's to follow, not errors */
	if (n->conf.sharded && (strncmp(err, "MOVED ", 6) == 0 || strncmp(err, "ASK ", 4) == 0 ||
	    strncmp(err, "TRYAGAIN", 8) == 0))
		return;
	/* Redis 7.0: "... can't run this command ..." for a script's call;
	 * 7.2 and later, Valkey: "... has no permissions to run the 'zadd'
	 * command ..."; NOPERM for a command of ours */
	if (n->conf.acl != NULL && (strncmp(err, "NOPERM", 6) == 0 ||
	    strstr(err, "can't run this command") != NULL ||
	    strstr(err, "no permissions to run") != NULL))
	{
		log_warn("%s %s answered an error: %s; the %s user needs at least the ACL "
		    "'%s'", n->conf.what, n->address, err, n->conf.what, n->conf.acl);
		n->acl_refused = true;
	} else
		log_warn("%s %s answered an error: %s", n->conf.what, n->address, err);
	snprintf(n->last_error, sizeof(n->last_error), "%s", err);
}

/* A script ran: after errors, say once that the server runs them again. */
static void
note_success(struct rnode *n)
{
	if (n->last_error[0] == '\0')
		return;
	log_info("%s %s runs the scripts again", n->conf.what, n->address);
	n->last_error[0] = '\0';
	n->acl_refused = false;
}

/* Why a connection closed when the server gave no reason. */
#define RN_CLOSED_READY "closed by the server"
/* Why the subscriber connection is made again when its channels change:
 * not a problem, not logged as one. */
#define RN_NEW_CHANNELS "the channels changed"
#define RN_CLOSED_HANDSHAKE "closed during the handshake"

/* A problem of connection c: logged when it is not the one logged last,
 * so that an outage gives one line, not one per attempt; a close with no
 * reason does not replace a reason logged, and is logged only when it comes
 * twice in a row (with TLS 1.3, a server that refuses the client's
 * certificate says so in an alert that may or may not arrive before the
 * close). */
static void
note_problem(struct rn_conn *c, const char *why)
{
	struct rnode *n = c->n;
	bool generic = strcmp(why, RN_CLOSED_HANDSHAKE) == 0;
	bool again = c->last_generic;
	if (strcmp(why, RN_NEW_CHANNELS) == 0)
		return;
	c->last_generic = generic;
	if (strncmp(why, c->logged, sizeof(c->logged) - 1) == 0 ||
	    (generic && (c->logged[0] != '\0' || !again)))
		return;
	snprintf(c->logged, sizeof(c->logged), "%s", why);
	log_warn("%s %s connection to %s:%d down: %s", n->conf.what,
	    c->sub ? "subscriber" : "command", n->conf.host, n->conf.port, why);
}

/* The reply to CONFIG GET maxmemory-policy: anything but noeviction lets
 * Redis drop leases and fence counters when it runs out of memory. Logged
 * when the value is new. */
static void
on_policy(struct rnode *n, const redisReply *rep)
{
	if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
	    rep->element[1]->type != REDIS_REPLY_STRING) {
		if (strcmp(n->policy, "unknown") != 0)
			log_info("%s %s: cannot read maxmemory-policy (%s); make sure it is "
			    "noeviction", n->conf.what, n->address, rep->type == REDIS_REPLY_ERROR ?
			    rep->str : "unexpected reply");
		snprintf(n->policy, sizeof(n->policy), "unknown");
		return;
	}
	const char *p = rep->element[1]->str;
	if (strcmp(p, n->policy) != 0 && strcmp(p, "noeviction") != 0)
		log_warn("%s maxmemory-policy is %s: under memory pressure Redis may evict "
		    "leases, and locks would be granted twice; set it to noeviction",
		    n->conf.what, p);
	snprintf(n->policy, sizeof(n->policy), "%s", p);
}

/* The value of name in a CONFIG GET reply (name, value, name, value...),
 * or NULL. */
static const char *
config_value(const redisReply *rep, const char *name)
{
	if (rep->type != REDIS_REPLY_ARRAY)
		return NULL;
	for (size_t i = 0; i + 1 < rep->elements; i += 2)
		if (rep->element[i]->type == REDIS_REPLY_STRING &&
		    rep->element[i + 1]->type == REDIS_REPLY_STRING &&
		    strcasecmp(rep->element[i]->str, name) == 0)
			return rep->element[i + 1]->str;
	return NULL;
}

/* The reply to CONFIG GET append*: what a restart of the server keeps,
 * "aof-always" (every write it acknowledged), "aof-everysec", "aof-no" or
 * "no-aof" (what the last snapshot held, if any). A node of a quorum that
 * forgets leases lets a second holder in (docs/design.md): anything but
 * aof-always is logged when the value is new. */
static void
on_persistence(struct rnode *n, const redisReply *rep)
{
	const char *ao = config_value(rep, "appendonly"), *fs = config_value(rep, "appendfsync");
	char now[sizeof(n->persist)];
	if (ao == NULL || fs == NULL) {
		if (strcmp(n->persist, "unknown") != 0)
			log_info("%s %s: cannot read appendonly and appendfsync (%s); make sure "
			    "a restart keeps its leases (docs/backends/redlock.md)", n->conf.what, n->address,
			    rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
		snprintf(n->persist, sizeof(n->persist), "unknown");
		return;
	}
	if (strcasecmp(ao, "yes") == 0)
		snprintf(now, sizeof(now), "aof-%.20s", fs);
	else
		snprintf(now, sizeof(now), "no-aof");
	if (strcmp(now, n->persist) != 0 && strcmp(now, "aof-always") != 0)
		log_warn("%s %s: appendonly %s, appendfsync %s: a restart loses leases and fence "
		    "counters it acknowledged; after one, keep it stopped for the longest TTL in "
		    "use (docs/backends/redlock.md), or set appendonly yes and appendfsync always",
		    n->conf.what, n->address, ao, fs);
	snprintf(n->persist, sizeof(n->persist), "%s", now);
}

/* The reply to INFO server: the server's uptime_in_seconds, less a second.
 * Redis counts it as the difference of two whole seconds of its wall clock
 * (now, and its start, each rounded down), so it may have run up to a
 * second less than it says; with that second off, a wait counted from the
 * uptime is never short. */
static void
on_uptime(struct rnode *n, const redisReply *rep)
{
	static const char field[] = "\nuptime_in_seconds:";
	const char *p = NULL;
	long long up;
	uint64_t now = clock_ms();
	if (rep->type == REDIS_REPLY_STRING && (p = strstr(rep->str, field)) != NULL)
		p += sizeof(field) - 1;
	if (p == NULL || num_parse(p, strcspn(p, "\r\n"), 0, 1LL << 40, &up) != NUM_OK) {
		if (!n->uptime_unknown)
			log_warn("%s %s: cannot read its uptime (INFO server: %s)", n->conf.what,
			    n->address, rep->type == REDIS_REPLY_ERROR ? rep->str :
			    "unexpected reply");
		n->uptime_unknown = true;
		n->uptime_at = 0;
		return;
	}
	n->uptime_unknown = false;
	n->uptime_ms = up > 0 ? (uint64_t)(up - 1) * 1000 : 0;
	n->uptime_at = now;
}

/* The connection is up: say so. */
static void
conn_ready(struct rn_conn *c)
{
	struct rnode *n = c->n;
	c->state = RN_READY;
	if (!c->sub)
		n->refused = false;
	backoff_reset(&c->backoff);
	if (c->ever_up)
		c->reconnects++;
	c->ever_up = true;
	c->logged[0] = '\0';
	log_info("%s %s connection to %s up", n->conf.what, c->sub ? "subscriber" : "command",
	    n->address);
	if (c->sub) {
		if (n->hooks.subscribed != NULL)
			n->hooks.subscribed(n->arg);
		return;
	}
	n->problem[0] = '\0';
	send_kept(n);
	if (n->hooks.up != NULL)
		n->hooks.up(n->arg);
}

/* A handshake reply: an error ends the connection (AUTH, SELECT, PING),
 * or is noted (SCRIPT LOAD, CONFIG GET). */
static void
on_handshake(struct rn_conn *c, const struct rn_call *call, const redisReply *rep)
{
	struct rnode *n = c->n;
	bool err = rep->type == REDIS_REPLY_ERROR;
	char why[160];
	switch (call->kind) {
	case RK_AUTH:
		if (err) {
			snprintf(why, sizeof(why), "authentication refused (%s)", rep->str);
			n->refused = true;
			conn_down(c, why);
		}
		break;
	case RK_SELECT:
		if (err) {
			snprintf(why, sizeof(why), "SELECT %lld refused (%s)", n->conf.db, rep->str);
			n->refused = true;
			conn_down(c, why);
		}
		break;
	case RK_LOAD:
		if (rep->type == REDIS_REPLY_STRING && rep->len == 40) {
			memcpy(n->sha[call->script], rep->str, 41);
		} else if (!n->noload) {
			n->noload = true;
			log_warn("%s %s: SCRIPT LOAD failed (%s): the scripts are sent whole with "
			    "EVAL", n->conf.what, n->address, err ? rep->str : "unexpected reply");
		}
		break;
	case RK_POLICY:
		on_policy(n, rep);
		break;
	case RK_PERSIST:
		on_persistence(n, rep);
		break;
	case RK_UPTIME:
		on_uptime(n, rep);
		break;
	case RK_ROLE:
		if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 ||
		    rep->element[0]->type != REDIS_REPLY_STRING ||
		    strcmp(rep->element[0]->str, "master") != 0) {
			snprintf(why, sizeof(why), "not a master (ROLE: %s)",
			    err ? rep->str : rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 &&
			    rep->element[0]->type == REDIS_REPLY_STRING ? rep->element[0]->str :
			    "unexpected reply");
			conn_down(c, why);
		}
		break;
	case RK_HELLO:
		if (err) {
			snprintf(why, sizeof(why), "refused (%s)", rep->str);
			/* NOAUTH, WRONGPASS; not LOADING, BUSY (it comes back) */
			n->refused = strncmp(rep->str, "LOADING", 7) != 0 &&
			    strncmp(rep->str, "BUSY", 4) != 0 &&
			    strncmp(rep->str, "MASTERDOWN", 10) != 0;
			conn_down(c, why);
		} else if (!c->sub) {
			conn_ready(c);
		}
		break;
	case RK_USER:
	case RK_KEPT:
	case RK_WAIT:
		break;
	}
}

/* The reply to a kept call: done, or (an error reply, no reply) kept for
 * the next try. */
static void
on_kept_reply(struct rnode *n, struct rn_kept *k, const redisReply *rep)
{
	k->inflight = false;
	if (rep != NULL && rep->type != REDIS_REPLY_ERROR) {
		TAILQ_REMOVE(&n->kept, k, entry);
		free(k);
		return;
	}
	if (rep != NULL && n->cmd.state == RN_READY && !evtimer_pending(n->ev_kept, NULL)) {
		struct timeval tv = clock_tv(RN_KEEP_RETRY_MS);
		evtimer_add(n->ev_kept, &tv);
	}
}

/* The WAIT behind calls answered: hand each call the reply it holds when
 * enough replicas acknowledged, else no reply (the owner treats it as a call
 * whose outcome is unknown). The calls and w are freed by the caller. */
static void
wait_answer(struct rnode *n, struct rn_call *w, const redisReply *rep, const char *why)
{
	char buf[160];
	bool ok = rep != NULL && rep->type == REDIS_REPLY_INTEGER &&
	    rep->integer >= n->conf.min_replicas_ack;
	if (ok) {
		if (n->unacked_logged)
			log_info("%s %s: replicas acknowledge again", n->conf.what, n->address);
		n->unacked_logged = false;
	} else {
		if (rep != NULL && rep->type == REDIS_REPLY_INTEGER)
			snprintf(buf, sizeof(buf), "replica without acknowledgement (%lld of %lld "
			    "within backend.replica_ack_timeout_ms)", rep->integer,
			    n->conf.min_replicas_ack);
		else if (rep != NULL)
			snprintf(buf, sizeof(buf), "WAIT failed (%s)",
			    rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
		else
			snprintf(buf, sizeof(buf), "%s", why);
		if (rep != NULL)
			/* what rnode_problem says until a script succeeds */
			snprintf(n->last_error, sizeof(n->last_error), "%s", buf);
		if (rep != NULL && rep->type == REDIS_REPLY_INTEGER && !n->unacked_logged) {
			n->unacked_logged = true;
			log_warn("%s %s: %s", n->conf.what, n->address, buf);
		}
	}
	/* a callback may send calls (another WAIT among them): w's calls are
	 * taken off it one at a time */
	struct rn_call *call;
	while ((call = TAILQ_FIRST(&w->calls)) != NULL) {
		TAILQ_REMOVE(&w->calls, call, entry);
		if (!ok && rep != NULL)
			n->nunacked++;
		if (call->cb != NULL)
			call->cb(call->arg, ok ? call->held : NULL, ok ? NULL : buf);
		freeReplyObject(call->held);
		free(call);
	}
}

/* A reply to call, taken off c's list (rep NULL: none will come, why says
 * why). call is freed here. Whether it kept rep (held for a WAIT): the
 * caller must not free it then. */
static bool
call_answer(struct rn_conn *c, struct rn_call *call, redisReply *rep, const char *why)
{
	struct rnode *n = c->n;
	bool eval = call->script != SIZE_MAX && call->kind != RK_LOAD;
	if (rep != NULL && rep->type == REDIS_REPLY_ERROR) {
		if (eval && strncmp(rep->str, "NOSCRIPT", 8) == 0 && c->state == RN_READY) {
			/* the server forgot the script (SCRIPT FLUSH, a restart):
			 * send it whole, and load it again for the next calls */
			if (n->sha[call->script][0] != '\0' && !n->noload) {
				const char *load[] = { "SCRIPT", "LOAD",
				    n->conf.scripts[call->script], NULL };
				n->sha[call->script][0] = '\0';
				conn_words(c, RK_LOAD, load)->script = call->script;
			}
			n->sha[call->script][0] = '\0';
			write_eval(n, call->script, call->argc, call->argv, call->argvlen);
			call->sent_ms = clock_ms();
			TAILQ_INSERT_TAIL(&c->inflight, call, entry);
			return false;
		}
		n->nerrors++;
		if (eval)
			note_error(n, rep->str);
	} else if (rep != NULL && eval) {
		note_success(n);
	}
	if (call->acked && rep != NULL && rep->type != REDIS_REPLY_ERROR) {
		/* the reply goes to the caller once replicas acknowledged what
		 * the call wrote: WAIT is sent after the reply, not with the
		 * call (Redis 7.0 answers 0 to a WAIT that it read with the
		 * write). A WAIT still in flight was sent after this call (the
		 * calls before it are answered) and so covers what it wrote:
		 * the call waits for that one. One WAIT per call would queue
		 * WAITs on the connection, each holding the calls behind it up
		 * to replica_ack_timeout_ms, until those are overdue. */
		struct rn_call *wait;
		TAILQ_FOREACH(wait, &c->inflight, entry) {
			if (wait->kind == RK_WAIT)
				break;
		}
		if (wait == NULL) {
			char reps[24], ms[24];
			snprintf(reps, sizeof(reps), "%lld", n->conf.min_replicas_ack);
			snprintf(ms, sizeof(ms), "%lld", n->conf.replica_ack_timeout_ms);
			const char *w[] = { "WAIT", reps, ms, NULL };
			wait = conn_words(c, RK_WAIT, w);
		}
		call->held = rep;
		TAILQ_INSERT_TAIL(&wait->calls, call, entry);
		return true;
	}
	switch (call->kind) {
	case RK_USER:
		if (call->cb != NULL)
			call->cb(call->arg, rep, why);
		break;
	case RK_KEPT:
		on_kept_reply(n, call->kept, rep);
		break;
	case RK_WAIT:
		wait_answer(n, call, rep, why);
		break;
	default:
		if (rep != NULL)
			on_handshake(c, call, rep);
		break;
	}
	free(call);
	return false;
}

/* A reply that answers no call: on the subscriber connection, a
 * confirmation of SUBSCRIBE or a message. */
static void
on_unsolicited(struct rn_conn *c, const redisReply *rep)
{
	struct rnode *n = c->n;
	if (!c->sub || rep->type != REDIS_REPLY_ARRAY || rep->elements < 3 ||
	    rep->element[0]->type != REDIS_REPLY_STRING)
		return;
	const char *kind = rep->element[0]->str;
	if (strcmp(kind, n->conf.sharded ? "ssubscribe" : "subscribe") == 0) {
		if (c->subs_left > 0 && --c->subs_left == 0 && c->state == RN_CONNECTING)
			conn_ready(c);
	} else if (strcmp(kind, n->conf.sharded ? "smessage" : "message") == 0 &&
	    rep->element[1]->type == REDIS_REPLY_STRING &&
	    rep->element[2]->type == REDIS_REPLY_STRING && c->state == RN_READY) {
		if (n->hooks.message != NULL)
			n->hooks.message(n->arg, rep->element[1]->str, rep->element[1]->len,
			    rep->element[2]->str, rep->element[2]->len);
	}
}

/* Bytes arrived on c: feed them to the reader and answer every call whose
 * reply is complete, in order. */
static void
on_read(struct bufferevent *bev, void *arg)
{
	struct rn_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_iovec vec[8];
	unsigned gen = c->gen;
	int nvec = evbuffer_peek(in, -1, NULL, vec, 8);
	while (nvec > 0) {
		size_t fed = 0;
		for (int i = 0; i < nvec && i < 8; i++) {
			(void)redisReaderFeed(c->reader, vec[i].iov_base, vec[i].iov_len);
			fed += vec[i].iov_len;
		}
		evbuffer_drain(in, fed);
		nvec = nvec > 8 ? evbuffer_peek(in, -1, NULL, vec, 8) : 0;
	}
	for (;;) {
		void *reply = NULL;
		if (redisReaderGetReply(c->reader, &reply) != REDIS_OK) {
			char why[160];
			snprintf(why, sizeof(why), "protocol error (%s)", c->reader->errstr);
			conn_down(c, why);
			return;
		}
		if (reply == NULL)
			return;
		struct rn_call *call = TAILQ_FIRST(&c->inflight);
		redisReply *rep = reply;
		bool readonly = rep->type == REDIS_REPLY_ERROR &&
		    strncmp(rep->str, "READONLY", 8) == 0, kept = false;
		if (call != NULL) {
			TAILQ_REMOVE(&c->inflight, call, entry);
			kept = call_answer(c, call, rep, NULL);
		} else {
			on_unsolicited(c, rep);
		}
		if (!kept)
			freeReplyObject(reply);
		if (c->gen != gen || c->state == RN_DOWN)
			return;	/* dropped by a callback */
		if (readonly) {
			conn_down(c, "the server is a replica now (READONLY)");
			return;
		}
	}
}

/* ---- connections --------------------------------------------------------------- */

/* Why c's connection failed, from the bufferevent's event what. */
static const char *
conn_failure(struct rn_conn *c, short what, char *buf, size_t len)
{
	struct rnode *n = c->n;
	int err = EVUTIL_SOCKET_ERROR();
	if (n->conf.tls != NULL && c->bev != NULL && tls_bev_failure(c->bev, buf, len) != NULL) {
		/* a certificate either side refused, not a server gone */
		if (!c->sub && (strstr(buf, "certificate") != NULL || strstr(buf, "alert") != NULL))
			n->refused = true;
		return buf;
	}
	if ((what & BEV_EVENT_ERROR) && err != 0) {
		snprintf(buf, len, "%s", evutil_socket_error_to_string(err));
		return buf;
	}
	return c->state == RN_READY ? RN_CLOSED_READY : RN_CLOSED_HANDSHAKE;
}

static void
on_event(struct bufferevent *bev, short what, void *arg)
{
	struct rn_conn *c = arg;
	char buf[200];
	(void)bev;
	if (what & BEV_EVENT_CONNECTED) {
		c->connected = true;
		return;
	}
	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	if (!c->connected && c->ai_cur != NULL && c->ai_cur->ai_next != NULL) {
		/* not reached at this address: try the next one */
		c->ai_cur = c->ai_cur->ai_next;
		conn_try(c);
		return;
	}
	conn_down(c, conn_failure(c, what, buf, sizeof(buf)));
}

/* Write c's handshake behind the connect. */
static void
conn_handshake(struct rn_conn *c)
{
	struct rnode *n = c->n;
	const char *const *ch = n->conf.channels;
	if (n->conf.password != NULL) {
		const char *w[] = { "AUTH", n->conf.username != NULL ? n->conf.username :
		    n->conf.password, n->conf.password, NULL };
		if (n->conf.username == NULL)
			w[2] = NULL;
		conn_words(c, RK_AUTH, w);
	}
	if (c->sub) {
		const char *ping[] = { "PING", NULL };
		size_t group = n->conf.channel_group > 0 ? n->conf.channel_group : n->conf.nchannels;
		conn_words(c, RK_HELLO, ping);
		/* SUBSCRIBE (SSUBSCRIBE) with the channels, group by group */
		for (size_t at = 0; at < n->conf.nchannels; at += group) {
			const char *w[RN_ARGS_MAX];
			size_t lens[RN_ARGS_MAX], k = 0;
			w[k] = n->conf.sharded ? "SSUBSCRIBE" : "SUBSCRIBE";
			lens[k] = strlen(w[k]);
			for (k = 1; k <= group && at + k - 1 < n->conf.nchannels; k++) {
				w[k] = ch[at + k - 1];
				lens[k] = strlen(w[k]);
			}
			conn_write(c, NULL, NULL, 0, (int)k, w, lens);
		}
		c->subs_left = n->conf.nchannels;
		return;
	}
	if (n->conf.db != 0) {
		char db[24];
		snprintf(db, sizeof(db), "%lld", n->conf.db);
		const char *w[] = { "SELECT", db, NULL };
		conn_words(c, RK_SELECT, w);
	}
	for (size_t i = 0; i < n->conf.nscripts && !n->noload; i++) {
		const char *w[] = { "SCRIPT", "LOAD", n->conf.scripts[i], NULL };
		conn_words(c, RK_LOAD, w)->script = i;
	}
	if (n->conf.check_policy) {
		const char *w[] = { "CONFIG", "GET", "maxmemory-policy", NULL };
		conn_words(c, RK_POLICY, w);
	}
	if (n->conf.check_persistence) {
		const char *w[] = { "CONFIG", "GET", "append*", NULL };
		conn_words(c, RK_PERSIST, w);
	}
	if (n->conf.read_uptime) {
		const char *w[] = { "INFO", "server", NULL };
		conn_words(c, RK_UPTIME, w);
	}
	if (n->conf.require_master) {
		const char *w[] = { "ROLE", NULL };
		conn_words(c, RK_ROLE, w);
	}
	const char *ping[] = { "PING", NULL };
	conn_words(c, RK_HELLO, ping);
}

/* Connect to c->ai_cur, dropping what an attempt at an address before it
 * left, and write the handshake behind the connect. */
static void
conn_try(struct rn_conn *c)
{
	struct rnode *n = c->n;
	const struct evutil_addrinfo *ai = c->ai_cur;
	struct rn_call *call;
	char ip[INET6_ADDRSTRLEN] = "?", why[160];
	if (c->bev != NULL) {
		bufferevent_free(c->bev);
		c->bev = NULL;
	}
	while ((call = TAILQ_FIRST(&c->inflight)) != NULL) {
		/* the handshake of the attempt before: no call of the owner yet */
		assert(call->kind != RK_USER && call->kind != RK_KEPT);
		TAILQ_REMOVE(&c->inflight, call, entry);
		free(call);
	}
	evbuffer_drain(c->out, evbuffer_get_length(c->out));
	if (c->reader != NULL)
		redisReaderFree(c->reader);
	c->reader = redisReaderCreate();
	c->connected = false;
	if (ai->ai_family == AF_INET)
		evutil_inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)ai->ai_addr)->sin_addr,
		    ip, sizeof(ip));
	else if (ai->ai_family == AF_INET6)
		evutil_inet_ntop(AF_INET6,
		    &((struct sockaddr_in6 *)(void *)ai->ai_addr)->sin6_addr, ip, sizeof(ip));
	snprintf(n->address, sizeof(n->address), strchr(ip, ':') != NULL ? "[%s]:%d" : "%s:%d",
	    ip, n->conf.port);
	if (n->conf.tls != NULL) {
		SSL *ssl = tls_client_new_ssl(n->conf.tls, n->conf.tls_name != NULL ?
		    n->conf.tls_name : n->conf.host);
		c->bev = bufferevent_openssl_socket_new(n->base, -1, ssl,
		    BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
		if (c->bev != NULL)
			bufferevent_openssl_set_allow_dirty_shutdown(c->bev, 1);
	} else {
		c->bev = bufferevent_socket_new(n->base, -1, BEV_OPT_CLOSE_ON_FREE);
	}
	if (c->bev == NULL) {
		conn_down(c, "cannot make a connection");
		return;
	}
	c->state = RN_CONNECTING;
	bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	if (bufferevent_socket_connect(c->bev, ai->ai_addr, (int)ai->ai_addrlen) < 0) {
		snprintf(why, sizeof(why), "%s", evutil_socket_error_to_string(
		    EVUTIL_SOCKET_ERROR()));
		conn_down(c, why);
		return;
	}
	int one = 1;
	(void)setsockopt(bufferevent_getfd(c->bev), IPPROTO_TCP, TCP_NODELAY, &one,
	    sizeof(one));
	conn_handshake(c);
}

/* The name is resolved (or not): connect to its first address. */
static void
on_resolved(int result, struct evutil_addrinfo *ai, void *arg)
{
	struct rn_conn *c = arg;
	struct rnode *n = c->n;
	char why[160];
	c->dns = NULL;
	if (result == EVUTIL_EAI_CANCEL)
		return;	/* conn_down cancelled it */
	if (result != 0 || ai == NULL) {
		snprintf(why, sizeof(why), "cannot resolve %s (%s)", n->conf.host,
		    evutil_gai_strerror(result));
		if (ai != NULL)
			evutil_freeaddrinfo(ai);
		conn_down(c, why);
		return;
	}
	c->ai_all = c->ai_cur = ai;
	conn_try(c);
}

/* Start a connection attempt: resolve the name first. */
static void
conn_start(struct rn_conn *c)
{
	struct rnode *n = c->n;
	struct evutil_addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
	    .ai_protocol = IPPROTO_TCP, .ai_flags = EVUTIL_AI_ADDRCONFIG };
	struct evdns_getaddrinfo_request *req;
	char port[8];
	snprintf(port, sizeof(port), "%d", n->conf.port);
	c->state = RN_RESOLVING;
	c->started_ms = clock_ms();
	c->gen++;
	req = evdns_getaddrinfo(n->dns, n->conf.host, port, &hints, on_resolved, c);
	if (req != NULL && c->state == RN_RESOLVING)
		c->dns = req;	/* else answered already */
}

/*
 * c is down: close it, answer its calls in flight with no reply (the
 * command connection is not up from the first), tell the owner, and make
 * it again after the backoff (unless the node is being destroyed).
 */
static void
conn_down(struct rn_conn *c, const char *why)
{
	struct rnode *n = c->n;
	struct rn_call *call;
	bool was_ready = c->state == RN_READY;
	char reason[200];
	if (c->state == RN_DOWN)
		return;
	snprintf(reason, sizeof(reason), "%s", why);
	c->state = RN_DOWN;
	c->gen++;
	if (c->dns != NULL) {
		struct evdns_getaddrinfo_request *req = c->dns;
		c->dns = NULL;
		evdns_getaddrinfo_cancel(req);
	}
	if (c->bev != NULL) {
		bufferevent_free(c->bev);
		c->bev = NULL;
	}
	evbuffer_drain(c->out, evbuffer_get_length(c->out));
	if (c->reader != NULL) {
		redisReaderFree(c->reader);
		c->reader = NULL;
	}
	if (c->ai_all != NULL) {
		evutil_freeaddrinfo(c->ai_all);
		c->ai_all = c->ai_cur = NULL;
	}
	if (!c->sub) {
		snprintf(n->problem, sizeof(n->problem), "%s", reason);
		if (was_ready || n->down_since == 0)
			n->down_since = clock_ms();
	}
	if (!n->destroying)
		note_problem(c, reason);
	while ((call = TAILQ_FIRST(&c->inflight)) != NULL) {
		TAILQ_REMOVE(&c->inflight, call, entry);
		call_answer(c, call, NULL, n->destroying ? "the backend is shutting down" :
		    "the connection to redis was lost");
	}
	if (!c->sub && n->hooks.down != NULL && !n->destroying)
		n->hooks.down(n->arg, reason);
	if (!n->destroying) {
		struct timeval tv = clock_tv(backoff_next(&c->backoff));
		evtimer_add(c->ev_reconnect, &tv);
	}
}

static void
on_reconnect(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	conn_start(arg);
}

void
rnode_set_tls(struct rnode *n, struct tls_client *tls)
{
	tls_client_ref(tls);
	tls_client_unref(n->conf.tls);
	n->conf.tls = tls;
}

/* Free what a string of the conf holds (a secret is wiped first). */
static void
free_str(const char *s, bool secret)
{
	char *p = (char *)(uintptr_t)s;
	if (p != NULL && secret)
		explicit_bzero(p, strlen(p));
	free(p);
}

void
rnode_set_address(struct rnode *n, const char *host, int port)
{
	struct rn_conn *conns[] = { &n->cmd, &n->sub };
	free_str(n->conf.host, false);
	n->conf.host = xstrdup(host);
	n->conf.port = port;
	snprintf(n->address, sizeof(n->address), "%s:%d", host, port);
	if (!n->started) {
		rnode_start(n);
		return;
	}
	for (size_t i = 0; i < 2; i++) {
		struct rn_conn *c = conns[i];
		if (c->sub && n->conf.nchannels == 0)
			continue;
		conn_down(c, "the server moved");
		/* at once, not after the backoff */
		evtimer_del(c->ev_reconnect);
		backoff_reset(&c->backoff);
		conn_start(c);
	}
}

void
rnode_set_channels(struct rnode *n, const char *const *channels, size_t nchannels)
{
	assert((n->conf.channel_group > 0 ? n->conf.channel_group : nchannels) < RN_ARGS_MAX);
	n->conf.channels = channels;
	n->conf.nchannels = nchannels;
	if (!n->started)
		return;
	conn_down(&n->sub, RN_NEW_CHANNELS);
	evtimer_del(n->sub.ev_reconnect);
	backoff_reset(&n->sub.backoff);
	if (nchannels > 0)
		conn_start(&n->sub);
}

void
rnode_drop(struct rnode *n, const char *why)
{
	conn_down(&n->cmd, why);
}

/* Every RN_WATCH_MS: a reply overdue, or a connection not up in time,
 * drops the connection (hiredis's reader has no clock). */
static void
on_watch(evutil_socket_t fd, short what, void *arg)
{
	struct rnode *n = arg;
	uint64_t now = clock_ms();
	struct rn_conn *conns[] = { &n->cmd, &n->sub };
	(void)fd;
	(void)what;
	for (size_t i = 0; i < 2; i++) {
		struct rn_conn *c = conns[i];
		struct rn_call *oldest = TAILQ_FIRST(&c->inflight);
		if (c->state == RN_READY && oldest != NULL &&
		    now - oldest->sent_ms > n->conf.command_timeout_ms)
			conn_down(c, "a reply is overdue (backend.command_timeout_ms)");
		else if ((c->state == RN_RESOLVING || c->state == RN_CONNECTING) &&
		    now - c->started_ms > n->conf.connect_timeout_ms)
			conn_down(c, c->state == RN_RESOLVING ?
			    "name resolution timed out (backend.connect_timeout_ms)" :
			    "connect timed out (backend.connect_timeout_ms)");
	}
}

/* ---- the node ------------------------------------------------------------------- */

/* A connection of n, down. */
static void
conn_init(struct rnode *n, struct rn_conn *c, bool sub)
{
	c->n = n;
	c->sub = sub;
	c->state = RN_DOWN;
	TAILQ_INIT(&c->inflight);
	backoff_init(&c->backoff, RN_BACKOFF_MIN_MS, RN_BACKOFF_MAX_MS);
	c->ev_reconnect = evtimer_new(n->base, on_reconnect, c);
	c->out = evbuffer_new();
	c->ev_flush = event_new(n->base, -1, 0, on_flush, c);
}

/* A copy of s, or NULL for NULL. */
static char *
dup_or_null(const char *s)
{
	return s != NULL ? xstrdup(s) : NULL;
}

struct rnode *
rnode_create(struct event_base *base, struct evdns_base *dns, const struct rnode_conf *conf,
    const struct rnode_hooks *hooks, void *arg)
{
	struct rnode *n = xcalloc(1, sizeof(*n));
	assert(conf->nscripts <= RN_SCRIPTS_MAX && (conf->channel_group > 0 ?
	    conf->channel_group : conf->nchannels) < RN_ARGS_MAX);
	n->base = base;
	n->dns = dns;
	n->conf = *conf;
	n->conf.what = xstrdup(conf->what != NULL ? conf->what : "redis");
	n->conf.host = xstrdup(conf->host);
	n->conf.username = dup_or_null(conf->username);
	n->conf.password = dup_or_null(conf->password);
	n->conf.tls_name = dup_or_null(conf->tls_name);
	if (n->conf.tls != NULL)
		tls_client_ref(n->conf.tls);
	if (hooks != NULL)
		n->hooks = *hooks;
	n->arg = arg;
	TAILQ_INIT(&n->kept);
	snprintf(n->address, sizeof(n->address), "%s:%d", conf->host, conf->port);
	snprintf(n->problem, sizeof(n->problem), "not connected yet");
	conn_init(n, &n->cmd, false);
	conn_init(n, &n->sub, true);
	n->ev_watch = event_new(base, -1, EV_PERSIST, on_watch, n);
	n->ev_kept = evtimer_new(base, on_kept, n);
	return n;
}

void
rnode_start(struct rnode *n)
{
	struct timeval tick = clock_tv(RN_WATCH_MS);
	n->started = true;
	evtimer_add(n->ev_watch, &tick);
	conn_start(&n->cmd);
	if (n->conf.nchannels > 0)
		conn_start(&n->sub);
}

void
rnode_destroy(struct rnode *n)
{
	struct rn_kept *k;
	struct rn_conn *conns[] = { &n->cmd, &n->sub };
	n->destroying = true;
	for (size_t i = 0; i < 2; i++) {
		conn_down(conns[i], "the backend is shutting down");
		event_free(conns[i]->ev_reconnect);
		event_free(conns[i]->ev_flush);
		evbuffer_free(conns[i]->out);
	}
	while ((k = TAILQ_FIRST(&n->kept)) != NULL) {
		TAILQ_REMOVE(&n->kept, k, entry);
		free(k);
	}
	event_free(n->ev_watch);
	event_free(n->ev_kept);
	tls_client_unref(n->conf.tls);
	free_str(n->conf.what, false);
	free_str(n->conf.host, false);
	free_str(n->conf.username, false);
	free_str(n->conf.password, true);
	free_str(n->conf.tls_name, false);
	free(n);
}

bool
rnode_up(const struct rnode *n)
{
	return n->cmd.state == RN_READY;
}

bool
rnode_uptime(const struct rnode *n, uint64_t now, uint64_t *ms)
{
	if (n->uptime_at == 0)
		return false;
	*ms = n->uptime_ms + (now > n->uptime_at ? now - n->uptime_at : 0);
	return true;
}

bool
rnode_refused(const struct rnode *n)
{
	return n->refused || n->acl_refused;
}

const char *
rnode_problem(const struct rnode *n, uint64_t *since)
{
	if (since != NULL)
		*since = n->cmd.state == RN_READY ? 0 : n->down_since;
	if (n->cmd.state == RN_READY)
		return n->last_error[0] != '\0' ? n->last_error : NULL;
	return n->problem;
}

void
rnode_stats(const struct rnode *n, struct rnode_stats *st)
{
	const struct rn_call *call;
	const struct rn_kept *k;
	memset(st, 0, sizeof(*st));
	st->up = n->cmd.state == RN_READY;
	st->subscribed = n->sub.state == RN_READY;
	st->reconnects = n->cmd.reconnects + n->sub.reconnects;
	st->calls = n->ncalls;
	st->errors = n->nerrors;
	st->unacked = n->nunacked;
	TAILQ_FOREACH(call, &n->cmd.inflight, entry)
		st->inflight += call->kind == RK_USER || call->kind == RK_KEPT;
	TAILQ_FOREACH(k, &n->kept, entry)
		st->kept++;
	for (size_t i = 0; i < n->conf.nscripts; i++)
		st->scripts_loaded += n->sha[i][0] != '\0';
	st->policy = n->policy[0] != '\0' ? n->policy : "unknown";
	st->persistence = n->persist[0] != '\0' ? n->persist : "unknown";
	st->address = n->address;
}

#ifdef DLOCKD_TEST_HOOKS	/* test and fuzz objects only (Makefile) */
void
rnode_unsolicited(struct rnode *n, int sub, const struct redisReply *rep)
{
	if (sub) {
		enum rn_state st = n->sub.state;
		n->sub.state = RN_READY;
		on_unsolicited(&n->sub, rep);
		n->sub.state = st;
	} else {
		on_policy(n, rep);
	}
}
#endif
