/*
 * check_rnode — the client of one Redis server (daemon/redis/rnode.c) against a
 * fake server: handshake, scripts by SHA1 and NOSCRIPT, pipelining, error
 * replies, timeouts and reconnects, refused authentication, kept calls,
 * pub/sub, READONLY, name resolution, destroy with calls in flight.
 *
 * No Redis: each test talks to a fake of its own, a listener on 127.0.0.1
 * (port 0) on the same event loop as the node. The fake reads commands
 * with hiredis's reader (a request is a RESP array too), remembers them,
 * and answers as the test set it up: as Redis would, or not at all, or
 * with an error.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <check.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include "clock.h"
#include "log.h"
#include "rnode.h"
#include "suite.h"

#define LIMIT_MS 3000		/* longest a test waits for what it expects */
#define SEEN_MAX 256		/* commands a fake remembers */
#define CONNS_MAX 16		/* connections a fake keeps */

/* Run the loop until cond holds; fail the test after LIMIT_MS. */
#define RUN_UNTIL(cond) SUITE_RUN_UNTIL(base, cond, LIMIT_MS)

/* ---- the fake server ----------------------------------------------------------- */

/* One connection to the fake. */
struct fconn {
	struct bufferevent *bev;	/* NULL once closed */
	redisReader *reader;		/* parses the commands */
	bool subscriber;		/* it sent SUBSCRIBE */
	int reads;			/* reads that brought commands */
};

/* A fake Redis. */
struct fake {
	struct evconnlistener *lis;	/* on 127.0.0.1 */
	int port;			/* its port */
	struct fconn conns[CONNS_MAX];	/* every connection accepted */
	int nconns;			/* how many */
	char seen[SEEN_MAX][160];	/* the commands received, words joined by ' ' */
	int nseen;			/* how many */
	const char *password;		/* AUTH must give it (NULL: no AUTH needed) */
	bool flushed;			/* EVALSHA answers NOSCRIPT */
	bool hold;			/* EVAL and EVALSHA get no answer */
	const char *eval_error;		/* EVAL and EVALSHA answer this error */
	int eval_errors;		/* ...this many times (then normally) */
	const char *policy;		/* maxmemory-policy */
	bool split;			/* answers go out in two writes */
	int acks;			/* what WAIT answers */
	bool hold_wait;			/* WAIT gets no answer */
};

static struct event_base *base;
static struct evdns_base *dns;
static struct fake *fk;

/* Whether the fake received a command starting with prefix. */
static int
seen_count(const char *prefix)
{
	int n = 0;
	for (int i = 0; i < fk->nseen; i++)
		n += strncmp(fk->seen[i], prefix, strlen(prefix)) == 0;
	return n;
}

/* The index of the first command received starting with prefix, or -1. */
static int
seen_at(const char *prefix)
{
	for (int i = 0; i < fk->nseen; i++)
		if (strncmp(fk->seen[i], prefix, strlen(prefix)) == 0)
			return i;
	return -1;
}

/* Write reply (RESP text) to fc, in two parts when the fake splits. */
static void
fc_reply(struct fconn *fc, const char *reply)
{
	size_t len = strlen(reply);
	if (fk->split && len > 1) {
		bufferevent_write(fc->bev, reply, len / 2);
		bufferevent_flush(fc->bev, EV_WRITE, BEV_FLUSH);
		bufferevent_write(fc->bev, reply + len / 2, len - len / 2);
	} else {
		bufferevent_write(fc->bev, reply, len);
	}
}

/* The fake SHA1 of the script text s (the fake does not hash). */
static void
fake_sha(const char *s, char out[41])
{
	unsigned h = 5381;
	for (; *s != '\0'; s++)
		h = h * 33 + (unsigned char)*s;
	snprintf(out, 41, "%08x%032x", h, 0);
}

/* Answer command rep (a RESP array of bulk strings) as Redis would. */
static void
fc_command(struct fconn *fc, const redisReply *rep)
{
	char line[160] = "", buf[512];
	const char *cmd;
	for (size_t i = 0; i < rep->elements; i++)
		snprintf(line + strlen(line), sizeof(line) - strlen(line), "%s%.60s",
		    i ? " " : "", rep->element[i]->str);
	if (fk->nseen < SEEN_MAX)
		snprintf(fk->seen[fk->nseen++], sizeof(fk->seen[0]), "%s", line);
	cmd = rep->element[0]->str;
	if (strcasecmp(cmd, "AUTH") == 0) {
		const char *pw = rep->element[rep->elements - 1]->str;
		fc_reply(fc, fk->password != NULL && strcmp(pw, fk->password) == 0 ? "+OK\r\n" :
		    "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
	} else if (strcasecmp(cmd, "SELECT") == 0 || strcasecmp(cmd, "SET") == 0) {
		fc_reply(fc, "+OK\r\n");
	} else if (strcasecmp(cmd, "PING") == 0) {
		fc_reply(fc, "+PONG\r\n");
	} else if (strcasecmp(cmd, "CONFIG") == 0) {
		snprintf(buf, sizeof(buf), "*2\r\n$16\r\nmaxmemory-policy\r\n$%zu\r\n%s\r\n",
		    strlen(fk->policy), fk->policy);
		fc_reply(fc, buf);
	} else if (strcasecmp(cmd, "SCRIPT") == 0) {
		char sha[41];
		fake_sha(rep->element[2]->str, sha);
		snprintf(buf, sizeof(buf), "$40\r\n%s\r\n", sha);
		fk->flushed = false;
		fc_reply(fc, buf);
	} else if (strcasecmp(cmd, "SUBSCRIBE") == 0 || strcasecmp(cmd, "SSUBSCRIBE") == 0) {
		bool shard = strcasecmp(cmd, "SSUBSCRIBE") == 0;
		fc->subscriber = true;
		for (size_t i = 1; i < rep->elements; i++) {
			snprintf(buf, sizeof(buf), "*3\r\n$%d\r\n%s\r\n$%zu\r\n%s\r\n:%zu\r\n",
			    shard ? 10 : 9, shard ? "ssubscribe" : "subscribe",
			    rep->element[i]->len, rep->element[i]->str, i);
			fc_reply(fc, buf);
		}
	} else if (strcasecmp(cmd, "WAIT") == 0) {
		if (fk->hold_wait)
			return;
		snprintf(buf, sizeof(buf), ":%d\r\n", fk->acks);
		fc_reply(fc, buf);
	} else if (strcasecmp(cmd, "EVALSHA") == 0 || strcasecmp(cmd, "EVAL") == 0) {
		bool sha = strcasecmp(cmd, "EVALSHA") == 0;
		if (fk->hold)
			return;
		if (fk->eval_errors > 0) {
			fk->eval_errors--;
			snprintf(buf, sizeof(buf), "-%s\r\n", fk->eval_error);
			fc_reply(fc, buf);
		} else if (sha && fk->flushed) {
			fc_reply(fc, "-NOSCRIPT No matching script. Please use EVAL.\r\n");
		} else {
			/* the reply says how it was called and echoes the last argument */
			const redisReply *last = rep->element[rep->elements - 1];
			snprintf(buf, sizeof(buf), "*2\r\n:%d\r\n$%zu\r\n%s\r\n", sha ? 1 : 2,
			    last->len, last->str);
			fc_reply(fc, buf);
		}
	} else {
		fc_reply(fc, "-ERR unknown command\r\n");
	}
}

static void
fc_read(struct bufferevent *bev, void *arg)
{
	struct fconn *fc = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len = evbuffer_get_length(in);
	void *reply;
	redisReaderFeed(fc->reader, (const char *)evbuffer_pullup(in, -1), len);
	evbuffer_drain(in, len);
	fc->reads++;
	while (redisReaderGetReply(fc->reader, &reply) == REDIS_OK && reply != NULL) {
		const redisReply *rep = reply;
		if (rep->type == REDIS_REPLY_ARRAY && rep->elements > 0)
			fc_command(fc, rep);
		freeReplyObject(reply);
		if (fc->bev == NULL)
			return;
	}
}

/* Close fc. */
static void
fc_close(struct fconn *fc)
{
	if (fc->bev == NULL)
		return;
	bufferevent_free(fc->bev);
	fc->bev = NULL;
	redisReaderFree(fc->reader);
	fc->reader = NULL;
}

static void
fc_event(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		fc_close(arg);
}

static void
fake_accept(struct evconnlistener *lis, evutil_socket_t fd, struct sockaddr *sa, int len,
    void *arg)
{
	struct fake *f = arg;
	(void)lis;
	(void)sa;
	(void)len;
	ck_assert_int_lt(f->nconns, CONNS_MAX);
	struct fconn *fc = &f->conns[f->nconns++];
	fc->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	fc->reader = redisReaderCreate();
	bufferevent_setcb(fc->bev, fc_read, NULL, fc_event, fc);
	bufferevent_enable(fc->bev, EV_READ | EV_WRITE);
}

/* A fake listening on 127.0.0.1, answering as Redis would. */
static struct fake *
fake_new(void)
{
	struct fake *f = calloc(1, sizeof(*f));
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t slen = sizeof(sin);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	f->lis = evconnlistener_new_bind(base, fake_accept, f, LEV_OPT_CLOSE_ON_FREE |
	    LEV_OPT_REUSEABLE, 16, (struct sockaddr *)&sin, sizeof(sin));
	ck_assert_ptr_nonnull(f->lis);
	getsockname(evconnlistener_get_fd(f->lis), (struct sockaddr *)&sin, &slen);
	f->port = ntohs(sin.sin_port);
	f->policy = "noeviction";
	return f;
}

/* Close every connection of the fake (a restart, a crash). */
static void
fake_drop_all(void)
{
	for (int i = 0; i < fk->nconns; i++)
		fc_close(&fk->conns[i]);
}

/* Connections of the fake still open. */
static int
fake_open(void)
{
	int n = 0;
	for (int i = 0; i < fk->nconns; i++)
		n += fk->conns[i].bev != NULL;
	return n;
}

/* Publish msg on channel to every subscriber connection: as a "message",
 * or as an "smessage" of a shard channel (kind). */
static void
fake_publish_as(const char *kind, const char *channel, const char *msg)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "*3\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n",
	    strlen(kind), kind, strlen(channel), channel, strlen(msg), msg);
	for (int i = 0; i < fk->nconns; i++)
		if (fk->conns[i].bev != NULL && fk->conns[i].subscriber)
			fc_reply(&fk->conns[i], buf);
}

/* Publish msg on channel to every subscriber connection. */
static void
fake_publish(const char *channel, const char *msg)
{
	fake_publish_as("message", channel, msg);
}

static void
fake_free(struct fake *f)
{
	for (int i = 0; i < f->nconns; i++)
		if (f->conns[i].bev != NULL) {
			bufferevent_free(f->conns[i].bev);
			redisReaderFree(f->conns[i].reader);
		}
	evconnlistener_free(f->lis);
	free(f);
}

/* ---- the node's side ------------------------------------------------------------ */

/* What the hooks and callbacks saw, in order. */
static char events[64][128];
static int nevents;

static void
note(const char *what, const char *a, size_t alen)
{
	if (nevents < 64)
		snprintf(events[nevents++], sizeof(events[0]), "%s%.*s", what, (int)alen, a);
}

static int
event_at(const char *prefix)
{
	for (int i = 0; i < nevents; i++)
		if (strncmp(events[i], prefix, strlen(prefix)) == 0)
			return i;
	return -1;
}

static void
hook_up(void *arg)
{
	(void)arg;
	note("up", "", 0);
}

static void
hook_down(void *arg, const char *why)
{
	(void)arg;
	note("down ", why, strlen(why));
}

static void
hook_subscribed(void *arg)
{
	(void)arg;
	note("subscribed", "", 0);
}

static void
hook_message(void *arg, const char *ch, size_t chlen, const char *msg, size_t msglen)
{
	char both[128];
	(void)arg;
	snprintf(both, sizeof(both), "%.*s=%.*s", (int)chlen, ch, (int)msglen, msg);
	note("message ", both, strlen(both));
}

static const struct rnode_hooks hooks = { hook_up, hook_down, hook_subscribed, hook_message };

/* The answer a call got. */
struct answer {
	int calls;			/* callbacks (must end at 1) */
	bool none;			/* no reply came */
	char why[128];			/* then why */
	int type;			/* else the reply's type */
	long long first;		/* an array's first integer */
	char text[128];			/* an error's text, an array's second string */
};

static void
on_answer(void *arg, const redisReply *rep, const char *why)
{
	struct answer *a = arg;
	a->calls++;
	a->none = rep == NULL;
	if (rep == NULL) {
		snprintf(a->why, sizeof(a->why), "%s", why);
		note("answer none", "", 0);
		return;
	}
	a->type = rep->type;
	if (rep->type == REDIS_REPLY_ERROR)
		snprintf(a->text, sizeof(a->text), "%s", rep->str);
	if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2) {
		a->first = rep->element[0]->integer;
		snprintf(a->text, sizeof(a->text), "%s", rep->element[1]->str);
	}
	note("answer", "", 0);
}

static const char *const scripts[] = { "return 'one'", "return 'two'" };
static const char *const channels[] = { "dlock:released", "dlock:wanted" };

/* A node of the fake with settings tests change; started. */
static struct rnode *
node_new(const char *host, const char *user, const char *password, long long db,
    bool sub, uint64_t command_timeout_ms)
{
	struct rnode_conf c = {
		.what = "redis",
		.host = host,
		.port = fk->port,
		.username = user,
		.password = password,
		.db = db,
		.connect_timeout_ms = 1000,
		.command_timeout_ms = command_timeout_ms,
		.scripts = scripts,
		.nscripts = 2,
		.channels = sub ? channels : NULL,
		.nchannels = sub ? 2 : 0,
		.check_policy = true,
		.min_replicas_ack = 1,
		.replica_ack_timeout_ms = 100,
	};
	struct rnode *n = rnode_create(base, dns, &c, &hooks, NULL);
	rnode_start(n);
	return n;
}

/* Call script i with one argument, arg. */
static int
eval(struct rnode *n, size_t i, const char *arg, struct answer *a)
{
	static const char *argv[2];
	static size_t argvlen[2];
	argv[0] = "0";
	argvlen[0] = 1;
	argv[1] = arg;
	argvlen[1] = strlen(arg);
	return rnode_eval(n, i, 2, argv, argvlen, on_answer, a);
}

/* Let the loop run for ms milliseconds. */
static void
settle(uint64_t ms)
{
	uint64_t until = clock_ms() + ms;
	while (clock_ms() < until)
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
}

static void
setup(void)
{
	base = event_base_new();
	dns = evdns_base_new(base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
	evdns_base_load_hosts(dns, NULL);
	fk = fake_new();
	nevents = 0;
}

static void
teardown(void)
{
	fake_free(fk);
	evdns_base_free(dns, 0);
	event_base_free(base);
}

/* ---- tests ------------------------------------------------------------------------ */

START_TEST(test_handshake)
{
	fk->password = "pw";
	struct rnode *n = node_new("127.0.0.1", "alice", "pw", 3, false, 1000);
	struct rnode_stats st;
	ck_assert(!rnode_up(n));
	RUN_UNTIL(rnode_up(n));
	/* AUTH with the user, SELECT, the scripts, the policy, PING: in order */
	ck_assert_str_eq(fk->seen[0], "AUTH alice pw");
	ck_assert_str_eq(fk->seen[1], "SELECT 3");
	ck_assert_int_eq(seen_at("SCRIPT LOAD return 'one'"), 2);
	ck_assert_int_eq(seen_at("SCRIPT LOAD return 'two'"), 3);
	ck_assert_int_eq(seen_at("CONFIG GET maxmemory-policy"), 4);
	ck_assert_int_eq(seen_at("PING"), 5);
	ck_assert_int_eq(fk->nconns, 1);	/* no subscriber without channels */
	/* one write brought the whole handshake */
	ck_assert_int_eq(fk->conns[0].reads, 1);
	ck_assert_int_eq(event_at("up"), 0);
	rnode_stats(n, &st);
	ck_assert(st.up);
	ck_assert_int_eq(st.scripts_loaded, 2);
	ck_assert_str_eq(st.policy, "noeviction");
	ck_assert_ptr_null(rnode_problem(n, NULL));
	rnode_destroy(n);
}
END_TEST

START_TEST(test_password_alone)
{
	fk->password = "pw";
	struct rnode *n = node_new("127.0.0.1", NULL, "pw", 0, false, 1000);
	RUN_UNTIL(rnode_up(n));
	ck_assert_str_eq(fk->seen[0], "AUTH pw");
	ck_assert_int_eq(seen_count("SELECT"), 0);	/* db 0: none */
	rnode_destroy(n);
}
END_TEST

START_TEST(test_eval_by_sha)
{
	struct rnode *n = node_new("127.0.0.1", NULL, NULL, 0, false, 1000);
	struct answer a = { 0 }, b = { 0 };
	char sha[41], want[80];
	RUN_UNTIL(rnode_up(n));
	ck_assert_int_eq(eval(n, 1, "x", &a), 0);
	RUN_UNTIL(a.calls == 1);
	fake_sha("return 'two'", sha);
	snprintf(want, sizeof(want), "EVALSHA %s 0 x", sha);
	ck_assert_int_eq(seen_count(want), 1);
	ck_assert_int_eq(a.first, 1);		/* by SHA1 */
	ck_assert_str_eq(a.text, "x");
	/* an error reply is an answer too */
	fk->eval_error = "BUSY Redis is busy running a script";
	fk->eval_errors = 1;
	ck_assert_int_eq(eval(n, 0, "y", &b), 0);
	RUN_UNTIL(b.calls == 1);
	ck_assert_int_eq(b.type, REDIS_REPLY_ERROR);
	ck_assert_str_eq(b.text, "BUSY Redis is busy running a script");
	ck_assert(rnode_up(n));
	settle(50);
	ck_assert_int_eq(a.calls, 1);
	ck_assert_int_eq(b.calls, 1);
	rnode_destroy(n);
}
END_TEST

START_TEST(test_noscript_sends_the_script)
{
	struct rnode *n = node_new("127.0.0.1", NULL, NULL, 0, false, 1000);
	struct answer a = { 0 }, b = { 0 };
	RUN_UNTIL(rnode_up(n));
	fk->flushed = true;	/* SCRIPT FLUSH, or a restart */
	ck_assert_int_eq(eval(n, 0, "x", &a), 0);
	RUN_UNTIL(a.calls == 1);
	ck_assert_int_eq(a.first, 2);		/* sent again whole, with EVAL */
	ck_assert_str_eq(a.text, "x");
	ck_assert_int_eq(seen_count("EVAL return 'one' 0 x"), 1);
	ck_assert_int_eq(seen_count("SCRIPT LOAD return 'one'"), 2);	/* loaded again */
	ck_assert_int_eq(eval(n, 0, "z", &b), 0);
	RUN_UNTIL(b.calls == 1);
	ck_assert_int_eq(b.first, 1);		/* by SHA1 again */
	settle(50);
	ck_assert_int_eq(a.calls, 1);
	rnode_destroy(n);
}
END_TEST

START_TEST(test_one_write_per_loop_turn)
{
	struct rnode *n = node_new("127.0.0.1", NULL, NULL, 0, false, 1000);
	struct answer a[20];
	char arg[20][8];
	const char *argv[20][2];
	size_t argvlen[20][2];
	memset(a, 0, sizeof(a));
	RUN_UNTIL(rnode_up(n));
	int reads = fk->conns[0].reads;
	for (int i = 0; i < 20; i++) {
		snprintf(arg[i], sizeof(arg[i]), "a%d", i);
		argv[i][0] = "0";
		argvlen[i][0] = 1;
		argv[i][1] = arg[i];
		argvlen[i][1] = strlen(arg[i]);
		ck_assert_int_eq(rnode_eval(n, 0, 2, argv[i], argvlen[i], on_answer, &a[i]), 0);
	}
	RUN_UNTIL(a[19].calls == 1);
	ck_assert_int_eq(fk->conns[0].reads - reads, 1);
	for (int i = 0; i < 20; i++) {
		/* each answered with its own reply, in order */
		ck_assert_int_eq(a[i].calls, 1);
		ck_assert_str_eq(a[i].text, arg[i]);
	}
	rnode_destroy(n);
}
END_TEST

START_TEST(test_replies_in_pieces)
{
	struct rnode *n = node_new("127.0.0.1", NULL, NULL, 0, false, 1000);
	struct answer a = { 0 };
	fk->split = true;
	RUN_UNTIL(rnode_up(n));
	ck_assert_int_eq(eval(n, 0, "piece", &a), 0);
	RUN_UNTIL(a.calls == 1);
	ck_assert_str_eq(a.text, "piece");
	rnode_destroy(n);
}
END_TEST

START_TEST(test_overdue_reply_drops_and_reconnects)
{
	struct rnode *n = node_new("127.0.0.1", NULL, NULL, 0, false, 200);
	struct answer a = { 0 }, b = { 0 };
	struct rnode_stats st;
	RUN_UNTIL(rnode_up(n));
	fk->hold = true;
	uint64_t t0 = clock_ms();
	ck_assert_int_eq(eval(n, 0, "x", &a), 0);
	RUN_UNTIL(a.calls == 1);
	ck_assert(a.none);
	ck_assert_msg(strstr(a.why, "lost") != NULL, "%s", a.why);
	ck_assert_uint_ge(clock_ms() - t0, 200);
	/* the call was answered before the owner heard of the fall */
	ck_assert_int_lt(event_at("answer none"), event_at("down a reply is overdue"));
	ck_assert(!rnode_up(n));
	ck_assert_ptr_nonnull(strstr(rnode_problem(n, NULL), "overdue"));
	ck_assert_int_eq(eval(n, 0, "y", &b), -1);	/* down: not sent */
	fk->hold = false;
	RUN_UNTIL(rnode_up(n));
	ck_assert_int_eq(fk->nconns, 2);
	rnode_stats(n, &st);
	ck_assert_uint_eq(st.reconnects, 1);
	settle(50);
	ck_assert_int_eq(a.calls, 1);
	ck_assert_int_eq(b.calls, 0);
	rnode_destroy(n);
}
END_TEST

START_TEST(test_connection_lost)
{
	struct rnode *n = node_new("127.0.0.1", NULL, NULL, 0, true, 1000);
	struct answer a = { 0 };
	RUN_UNTIL(rnode_up(n) && event_at("subscribed") >= 0);
	fk->hold = true;
	ck_assert_int_eq(eval(n, 0, "x", &a), 0);
	settle(20);
	fake_drop_all();
	RUN_UNTIL(a.calls == 1);
	ck_assert(a.none);
	RUN_UNTIL(event_at("down") >= 0);
	ck_assert_int_lt(event_at("answer none"), event_at("down"));
	fk->hold = false;
	nevents = 0;
	RUN_UNTIL(rnode_up(n) && event_at("subscribed") >= 0);
	ck_assert_int_eq(fake_open(), 2);
	rnode_destroy(n);
}
END_TEST

START_TEST(test_auth_refused)
{
	fk->password = "right";
	struct rnode *n = node_new("127.0.0.1", "bob", "wrong", 0, false, 1000);
	uint64_t since;
	settle(700);
	ck_assert(!rnode_up(n));
	ck_assert_ptr_nonnull(strstr(rnode_problem(n, &since), "authentication refused"));
	ck_assert_ptr_null(strstr(rnode_problem(n, NULL), "wrong"));	/* no secret */
	/* backoff: 100, 200, 400 ms... not a loop of reconnects */
	ck_assert_int_le(fk->nconns, 4);
	ck_assert_int_ge(fk->nconns, 2);
	ck_assert_int_eq(event_at("up"), -1);
	rnode_destroy(n);
}
END_TEST

START_TEST(test_kept_calls)
{
	struct rnode *n = node_new("127.0.0.1", NULL, NULL, 0, false, 1000);
	struct rnode_stats st;
	const char *argv[] = { "0", "kept" };
	size_t argvlen[] = { 1, 4 };
	const char *argv2[] = { "0", "stale" };
	size_t argvlen2[] = { 1, 5 };
	/* kept while not up yet: sent once up */
	rnode_keep(n, 0, 2, argv, argvlen, clock_ms() + 10000);
	rnode_keep(n, 0, 2, argv2, argvlen2, clock_ms());	/* its time is over */
	fk->eval_error = "LOADING Redis is loading the dataset in memory";
	fk->eval_errors = 1;
	RUN_UNTIL(rnode_up(n));
	rnode_stats(n, &st);
	ck_assert_int_eq(st.kept, 1);	/* the stale one was dropped */
	RUN_UNTIL(seen_count("EVALSHA") == 1);
	/* answered an error: sent again a second later, then done */
	settle(300);
	ck_assert_int_eq(seen_count("EVALSHA"), 1);
	RUN_UNTIL(seen_count("EVALSHA") == 2);
	settle(50);
	rnode_stats(n, &st);
	ck_assert_int_eq(st.kept, 0);
	ck_assert_int_eq(seen_count("EVALSHA") + seen_count("EVAL "), 2);
	ck_assert_int_eq(seen_count("EVAL return 'one' 0 stale") + seen_count("EVALSHA stale"), 0);
	rnode_destroy(n);
}
END_TEST

START_TEST(test_messages)
{
	struct rnode *n = node_new("127.0.0.1", NULL, NULL, 0, true, 1000);
	RUN_UNTIL(event_at("subscribed") >= 0);
	ck_assert_int_eq(seen_count("SUBSCRIBE dlock:released dlock:wanted"), 1);
	fake_publish("dlock:released", "key1");
	fake_publish("dlock:wanted", "key2");
	RUN_UNTIL(event_at("message dlock:wanted=key2") >= 0);
	ck_assert_int_lt(event_at("message dlock:released=key1"),
	    event_at("message dlock:wanted=key2"));
	rnode_destroy(n);
}
END_TEST

/* A node of a cluster: shard channels, SSUBSCRIBE one slot's pair at a
 * time; "smessage" is a message, "message" is not; new channels make the
 * subscriber connection again; no channels: none. */
START_TEST(test_shard_channels)
{
	static const char *const shard[] = { "c:released{0}", "c:wanted{0}",
		"c:released{1}", "c:wanted{1}" };
	static const char *const fewer[] = { "c:released{2}", "c:wanted{2}" };
	struct rnode_conf c = {
		.what = "redis-cluster node",
		.host = "127.0.0.1",
		.port = fk->port,
		.connect_timeout_ms = 1000,
		.command_timeout_ms = 1000,
		.scripts = scripts,
		.nscripts = 2,
		.channels = shard,
		.nchannels = 4,
		.sharded = true,
		.channel_group = 2,
	};
	struct rnode *n = rnode_create(base, dns, &c, &hooks, NULL);
	struct rnode_stats st;
	rnode_start(n);
	RUN_UNTIL(event_at("subscribed") >= 0);
	ck_assert_int_eq(seen_count("SSUBSCRIBE c:released{0} c:wanted{0}"), 1);
	ck_assert_int_eq(seen_count("SSUBSCRIBE c:released{1} c:wanted{1}"), 1);
	ck_assert_int_eq(seen_count("SUBSCRIBE"), 0);
	fake_publish_as("message", "c:released{0}", "ignored");
	fake_publish_as("smessage", "c:released{1}", "key1");
	RUN_UNTIL(event_at("message c:released{1}=key1") >= 0);
	ck_assert_int_lt(event_at("message c:released{0}=ignored"), 0);

	nevents = 0;
	rnode_set_channels(n, fewer, 2);
	RUN_UNTIL(event_at("subscribed") >= 0);
	ck_assert_int_eq(seen_count("SSUBSCRIBE c:released{2} c:wanted{2}"), 1);
	rnode_stats(n, &st);
	ck_assert(st.subscribed);
	ck_assert_uint_eq(st.reconnects, 1);

	rnode_set_channels(n, NULL, 0);
	settle(50);
	rnode_stats(n, &st);
	ck_assert(!st.subscribed);
	ck_assert(st.up);
	rnode_destroy(n);
}
END_TEST

START_TEST(test_readonly_reconnects)
{
	struct rnode *n = node_new("127.0.0.1", NULL, NULL, 0, false, 1000);
	struct answer a = { 0 };
	RUN_UNTIL(rnode_up(n));
	fk->eval_error = "READONLY You can't write against a read only replica.";
	fk->eval_errors = 1;
	ck_assert_int_eq(eval(n, 0, "x", &a), 0);
	RUN_UNTIL(a.calls == 1);
	ck_assert_int_eq(a.type, REDIS_REPLY_ERROR);
	RUN_UNTIL(event_at("down the server is a replica now") >= 0);
	RUN_UNTIL(rnode_up(n));
	ck_assert_int_eq(fk->nconns, 2);
	rnode_destroy(n);
}
END_TEST

START_TEST(test_name_resolved)
{
	/* localhost may resolve to ::1 first: the fake listens on 127.0.0.1
	 * only, and the next address is tried */
	struct rnode *n = node_new("localhost", NULL, NULL, 0, false, 1000);
	struct rnode_stats st;
	RUN_UNTIL(rnode_up(n));
	rnode_stats(n, &st);
	ck_assert_int_eq(strncmp(st.address, "127.0.0.1:", 10), 0);
	rnode_destroy(n);
}
END_TEST

START_TEST(test_unreachable)
{
	struct rnode *n;
	int port = fk->port;
	uint64_t since;
	fake_free(fk);		/* nobody listens there now */
	fk = fake_new();
	struct rnode_conf c = { .what = "redis", .host = "127.0.0.1", .port = port,
	    .connect_timeout_ms = 500, .command_timeout_ms = 500 };
	n = rnode_create(base, dns, &c, &hooks, NULL);
	rnode_start(n);
	RUN_UNTIL(event_at("down") >= 0);
	ck_assert_ptr_nonnull(strstr(rnode_problem(n, &since), "refused"));
	ck_assert_uint_gt(since, 0);	/* since the first attempt */
	ck_assert_uint_le(since, clock_ms());
	rnode_destroy(n);
}
END_TEST

START_TEST(test_destroy_with_calls_in_flight)
{
	struct rnode *n = node_new("127.0.0.1", NULL, NULL, 0, true, 1000);
	struct answer a = { 0 }, b = { 0 };
	const char *argv[] = { "0", "kept" };
	size_t argvlen[] = { 1, 4 };
	RUN_UNTIL(rnode_up(n));
	fk->hold = true;
	ck_assert_int_eq(eval(n, 0, "x", &a), 0);
	ck_assert_int_eq(eval(n, 1, "y", &b), 0);
	rnode_keep(n, 0, 2, argv, argvlen, clock_ms() + 10000);
	settle(20);
	rnode_destroy(n);
	ck_assert_int_eq(a.calls, 1);
	ck_assert_int_eq(b.calls, 1);
	ck_assert(a.none && b.none);
	ck_assert_str_eq(a.why, "the backend is shutting down");
	ck_assert_int_eq(event_at("down"), -1);	/* not told while destroyed */
}
END_TEST

/* Call script 0 with one argument, arg, acknowledged by a replica. */
static int
eval_acked(struct rnode *n, const char *arg, struct answer *a)
{
	static const char *argv[2];
	static size_t argvlen[2];
	argv[0] = "0";
	argvlen[0] = 1;
	argv[1] = arg;
	argvlen[1] = strlen(arg);
	return rnode_eval_acked(n, 0, 2, argv, argvlen, on_answer, a);
}

START_TEST(test_acknowledged_calls)
{
	struct rnode *n = node_new("127.0.0.1", NULL, NULL, 0, false, 1000);
	struct answer a = { 0 }, b = { 0 }, c = { 0 };
	struct rnode_stats st;
	RUN_UNTIL(rnode_up(n));
	/* acknowledged: the reply, after the WAIT that followed it */
	fk->acks = 1;
	ck_assert_int_eq(eval_acked(n, "x", &a), 0);
	RUN_UNTIL(a.calls == 1);
	ck_assert(!a.none);
	ck_assert_str_eq(a.text, "x");
	ck_assert_int_eq(seen_count("WAIT 1 100"), 1);
	ck_assert_int_gt(seen_at("WAIT"), seen_at("EVALSHA"));
	/* not acknowledged: no reply, and why */
	fk->acks = 0;
	ck_assert_int_eq(eval_acked(n, "y", &b), 0);
	RUN_UNTIL(b.calls == 1);
	ck_assert(b.none);
	ck_assert_ptr_nonnull(strstr(b.why, "replica without acknowledgement (0 of 1"));
	ck_assert_ptr_nonnull(strstr(rnode_problem(n, NULL), "replica without"));
	rnode_stats(n, &st);
	ck_assert_uint_eq(st.unacked, 1);
	/* an error reply comes at once, with no WAIT */
	fk->eval_error = "NOPERM no";
	fk->eval_errors = 1;
	ck_assert_int_eq(eval_acked(n, "z", &c), 0);
	RUN_UNTIL(c.calls == 1);
	ck_assert_int_eq(c.type, REDIS_REPLY_ERROR);
	settle(50);
	ck_assert_int_eq(seen_count("WAIT"), 2);
	ck_assert_int_eq(a.calls + b.calls + c.calls, 3);
	rnode_destroy(n);
}
END_TEST

START_TEST(test_acknowledgement_lost_with_the_connection)
{
	struct rnode *n = node_new("127.0.0.1", NULL, NULL, 0, false, 1000);
	struct answer a = { 0 };
	RUN_UNTIL(rnode_up(n));
	fk->hold_wait = true;
	ck_assert_int_eq(eval_acked(n, "x", &a), 0);
	RUN_UNTIL(seen_count("WAIT") == 1);
	settle(20);
	ck_assert_int_eq(a.calls, 0);	/* the reply is held for the WAIT */
	fake_drop_all();
	RUN_UNTIL(a.calls == 1);
	ck_assert(a.none);
	settle(50);
	ck_assert_int_eq(a.calls, 1);
	rnode_destroy(n);
}
END_TEST

/* Calls answered while a WAIT is in flight wait for that WAIT (sent after
 * them, it covers what they wrote): WAITs never queue one behind another
 * on the connection, each holding the calls behind it. */
START_TEST(test_acknowledgement_shared)
{
	struct rnode *n = node_new("127.0.0.1", NULL, NULL, 0, false, 1000);
	struct answer a = { 0 }, b = { 0 }, c = { 0 };
	RUN_UNTIL(rnode_up(n));
	fk->hold_wait = true;
	ck_assert_int_eq(eval_acked(n, "x", &a), 0);
	ck_assert_int_eq(eval_acked(n, "y", &b), 0);
	ck_assert_int_eq(eval_acked(n, "z", &c), 0);
	RUN_UNTIL(seen_count("WAIT") == 1);
	settle(50);
	ck_assert_int_eq(seen_count("WAIT"), 1);
	ck_assert_int_eq(a.calls + b.calls + c.calls, 0);
	fake_drop_all();
	RUN_UNTIL(a.calls + b.calls + c.calls == 3);
	ck_assert(a.none && b.none && c.none);
	/* a call sent after the WAIT gets a WAIT of its own */
	fk->hold_wait = false;
	fk->acks = 1;
	RUN_UNTIL(rnode_up(n));
	struct answer d = { 0 };
	ck_assert_int_eq(eval_acked(n, "w", &d), 0);
	RUN_UNTIL(d.calls == 1);
	ck_assert(!d.none);
	ck_assert_str_eq(d.text, "w");
	rnode_destroy(n);
}
END_TEST

START_TEST(test_policy_warned)
{
	fk->policy = "allkeys-lru";
	struct rnode *n = node_new("127.0.0.1", NULL, NULL, 0, false, 1000);
	struct rnode_stats st;
	RUN_UNTIL(rnode_up(n));
	rnode_stats(n, &st);
	ck_assert_str_eq(st.policy, "allkeys-lru");
	rnode_destroy(n);
}
END_TEST

int
main(void)
{
	signal(SIGPIPE, SIG_IGN);
	if (log_init(LOG_LEVEL_ERROR, NULL) != 0)
		return EXIT_FAILURE;

	Suite *s = suite_create("rnode");

	suite_case(s, "connection", setup, teardown, 20, SUITE_TESTS(test_handshake,
	    test_password_alone, test_auth_refused, test_name_resolved, test_unreachable,
	    test_policy_warned));
	suite_case(s, "calls", setup, teardown, 20, SUITE_TESTS(test_eval_by_sha,
	    test_noscript_sends_the_script, test_one_write_per_loop_turn,
	    test_replies_in_pieces, test_kept_calls, test_messages, test_shard_channels,
	    test_acknowledged_calls));
	suite_case(s, "failures", setup, teardown, 20,
	    SUITE_TESTS(test_overdue_reply_drops_and_reconnects, test_connection_lost,
	    test_readonly_reconnects, test_destroy_with_calls_in_flight,
	    test_acknowledgement_lost_with_the_connection, test_acknowledgement_shared));
	return suite_run(s);
}
