/*
 * cmd — the command table and its handlers (see cmd.h for what it must not
 * do).
 *
 * Each handler gets a validated frame (name known, arity checked, session
 * authenticated unless the command is open) and writes exactly one reply,
 * now or, after marking the session pending, from a lock-table completion.
 */
#include "cmd.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "backend.h"
#include "clock.h"
#include "cmd_int.h"
#include "codec.h"
#include "conf.h"
#include "locktab.h"
#include "log.h"
#include "num.h"
#include "observe.h"
#include "session.h"
#include "xmalloc.h"

#define CMD_OPEN 1		/* may run before AUTH */
#define SEMAPHORE_MAX 1000000	/* largest LIMIT n */
#define VALUE_MAX 1024		/* longest CAMPAIGN or PROCLAIM value */
#define TTL_MIN_MS 10		/* shortest lease */

/* X(id, name, min args, max args (-1: any), flags), names counted with the command. */
#define COMMANDS(X) \
	X(ping, "PING", 1, 2, CMD_OPEN) \
	X(hello, "HELLO", 1, 7, CMD_OPEN) \
	X(auth, "AUTH", 2, 3, CMD_OPEN) \
	X(quit, "QUIT", 1, -1, CMD_OPEN) \
	X(client, "CLIENT", 2, -1, 0) \
	X(lock, "LOCK", 2, 10, 0) \
	X(unlock, "UNLOCK", 2, 3, 0) \
	X(extend, "EXTEND", 3, 4, 0) \
	X(status, "STATUS", 2, 3, 0) \
	X(validate, "VALIDATE", 3, 3, 0) \
	X(locks, "LOCKS", 1, 1, 0) \
	X(info, "INFO", 1, 2, 0) \
	X(campaign, "CAMPAIGN", 3, 9, 0) \
	X(proclaim, "PROCLAIM", 3, 3, 0) \
	X(resign, "RESIGN", 2, 2, 0) \
	X(leader, "LEADER", 2, 2, 0) \
	X(observe, "OBSERVE", 2, 6, 0)

/* The same, for the commands whose handlers live in cmd_multi.c. */
#define COMMANDS_MULTI(X) \
	X(lockall, "LOCKALL", 3, -1, 0) \
	X(unlockall, "UNLOCKALL", 3, -1, 0) \
	X(held, "HELD", 2, 6, 0)

#define CMD_DECLARE(id, name, min, max, flags) static cmd_fn cmd_##id;
COMMANDS(CMD_DECLARE)
#undef CMD_DECLARE

/* One command. */
struct cmd {
	const char *name;	/* upper case */
	size_t len;		/* strlen(name) */
	int min, max;		/* argument counts, the name included */
	int flags;		/* CMD_OPEN */
	cmd_fn *fn;		/* handler */
};

static const struct cmd commands[] = {
#define CMD_ENTRY(id, name, min, max, flags) \
	{ name, sizeof(name) - 1, min, max, flags, cmd_##id },
	COMMANDS(CMD_ENTRY)
	COMMANDS_MULTI(CMD_ENTRY)
#undef CMD_ENTRY
};

/* ---- helpers ------------------------------------------------------------ */

static bool
arg_is(const struct codec_frame *f, size_t i, const char *word)
{
	return i < f->argc && strcasecmp(f->argv[i], word) == 0;
}

/* Parse argument i as a decimal integer in [min, max]. 0, or -1. */
int
cmd_arg_int(const struct codec_frame *f, size_t i, long long min, long long max,
    long long *out)
{
	return num_parse(f->argv[i], f->argvlen[i], min, max, out) == NUM_OK ? 0 : -1;
}

/* The shortest TTL a LOCK or EXTEND may ask: the backend's floor. */
static long long
ttl_min(const struct session *s)
{
	return s->hub->be->min_ttl_ms > TTL_MIN_MS ? (long long)s->hub->be->min_ttl_ms :
	    TTL_MIN_MS;
}

/* Parse a TTL argument; replies and returns false when it is out of bounds. */
static bool
ttl_ok(struct session *s, const struct codec_frame *f, size_t i, long long *out)
{
	if (cmd_arg_int(f, i, ttl_min(s), s->hub->conf->max_ttl_ms, out) == 0)
		return true;
	const struct backend_ops *ops = s->hub->be->ops;
	if (ttl_min(s) > TTL_MIN_MS && ops->min_lease_rule != NULL)
		codec_reply_error(session_out(s), "ERR", "invalid TTL: must be %lld to %lld ms "
		    "(the %s backend's shortest lease is %s)", ttl_min(s),
		    s->hub->conf->max_ttl_ms, ops->name, ops->min_lease_rule);
	else
		codec_reply_error(session_out(s), "ERR", "invalid TTL: must be %lld to %lld ms",
		    ttl_min(s), s->hub->conf->max_ttl_ms);
	return false;
}

/* Check a key argument; replies and returns false when it is unusable. */
bool
cmd_key_ok(struct session *s, const struct codec_frame *f, size_t i)
{
	if (f->argvlen[i] == 0 || f->argvlen[i] > (size_t)s->hub->conf->max_key_bytes) {
		codec_reply_error(session_out(s), "ERR", "key is empty or too long "
		    "(1 to %lld bytes)", s->hub->conf->max_key_bytes);
		return false;
	}
	return true;
}

/* Check a CAMPAIGN or PROCLAIM value; replies and returns false when it is
 * too long. */
static bool
value_ok(struct session *s, const struct codec_frame *f, size_t i)
{
	if (f->argvlen[i] > VALUE_MAX) {
		codec_reply_error(session_out(s), "ERR", "value is too long (at most %d bytes)",
		    VALUE_MAX);
		return false;
	}
	return true;
}

/* Whether the backend can tell who leads a key across daemons; replies
 * and returns false when it cannot (yet). */
static bool
observe_ok(struct session *s, const char *what)
{
	const struct backend_ops *ops = s->hub->be->ops;
	if (ops->local_leases || (ops->leader != NULL && ops->watch != NULL &&
	    ops->proclaim != NULL))
		return true;
	codec_reply_error(session_out(s), "ERR", "%s is not available on the %s backend: "
	    "leaders and their changes are told on the memory, redis, redlock, "
	    "redis-cluster and etcd backends", what, ops->name);
	return false;
}

/* Compare secrets in time that does not depend on where they differ. */
static bool
secret_equal(const char *a, size_t alen, const char *b)
{
	size_t blen = strlen(b);
	unsigned char diff = alen != blen;
	for (size_t i = 0; i < alen; i++)
		diff |= (unsigned char)a[i] ^ (unsigned char)b[i % (blen ? blen : 1)];
	return diff == 0;
}

/* codec_word() of the string s, NULL being "". */
static char *
word_dupstr(const char *s)
{
	return codec_word(s != NULL ? s : "", s != NULL ? strlen(s) : 0);
}

/* Whether s may run an admin-only command (what); replies NOPERM if not. */
static bool
admin_ok(struct session *s, const char *what)
{
	if (session_is_admin(s))
		return true;
	codec_reply_error(session_out(s), "NOPERM", "%s needs admin rights: AUTH admin "
	    "with auth.admin_password, or the Unix socket as root or as a member of "
	    "auth.admin_group", what);
	return false;
}

/* Reply with the error for a lock-table status. */
void
cmd_reply_lt_error(struct session *s, enum lt_status st, bool by_token)
{
	struct evbuffer *out = session_out(s);
	switch (st) {
	case LT_E_NOTHELD:
		if (by_token)
			codec_reply_error(out, "NOTHELD", "key is not held by that token");
		else
			codec_reply_error(out, "NOTHELD", "key is not held by this session");
		break;
	case LT_E_LOST:
		codec_reply_error(out, "LOST", "the lock on this key was lost: its lease "
		    "could not be kept, or an administrator broke it");
		break;
	case LT_E_KIND:
		codec_reply_error(out, "ERR", "the key is in use with another kind: every "
		    "locker of a semaphore must give the same LIMIT, and a lock key takes none");
		break;
	case LT_E_WAITERS:
		codec_reply_error(out, "LIMIT", "too many waiters on this key "
		    "(limits.max_waiters_per_key is %lld)", s->hub->conf->max_waiters_per_key);
		break;
	case LT_E_LOCKS:
		codec_reply_error(out, "LIMIT", "too many locks held by this session "
		    "(limits.max_locks_per_session is %lld, waits included)",
		    s->hub->conf->max_locks_per_session);
		break;
	case LT_E_KEYS:
		codec_reply_error(out, "LIMIT", "too many keys locked on this server "
		    "(limits.max_keys is %lld)", s->hub->conf->max_keys);
		break;
	case LT_E_BACKEND: {
		char buf[256];
		const char *why = backend_problem(s->hub->be, buf, sizeof(buf));
		if (why != NULL)
			codec_reply_error(out, "BACKEND", "the lock backend failed (%s); try again",
			    why);
		else
			codec_reply_error(out, "BACKEND", "the lock backend failed; try again");
		break;
	}
	case LT_E_CLOSING:
		codec_reply_error(out, "ERR", "the server is shutting down");
		break;
	default:	/* outcomes that are not errors never come here */
		codec_reply_error(out, "ERR", "internal error");
		break;
	}
}

/* [token, fence, ttl_ms] */
void
cmd_reply_grant(struct session *s, const struct lt_grant *g)
{
	struct evbuffer *out = session_out(s);
	codec_reply_array(out, 3);
	codec_reply_bulk(out, g->token, TOKEN_LEN);
	codec_reply_int(out, (long long)g->fence);
	codec_reply_int(out, (long long)g->ttl_ms);
}

/* Reply with the outcome of a LOCK (g set when granted), UNLOCK or EXTEND
 * (value): a grant, a number, a null (not granted) or an error. */
static void
reply_outcome(struct session *s, enum lt_status st, const struct lt_grant *g,
    long long value, bool by_token)
{
	if (st == LT_OK && g != NULL)
		cmd_reply_grant(s, g);
	else if (st == LT_OK)
		codec_reply_int(session_out(s), value);
	else if (st == LT_NOT_GRANTED)
		codec_reply_null_array(session_out(s), s->proto);
	else if (st == LT_E_MODE)
		codec_reply_error(session_out(s), "ERR", "key is held by this session in %s "
		    "mode; unlock it first", locktab_mode_name(g->mode));
	else
		cmd_reply_lt_error(s, st, by_token);
}

/* The completion of a LOCK, UNLOCK or EXTEND that waited. */
static void
cmd_done(void *arg, enum lt_status st, const struct lt_grant *g, long long value)
{
	struct session *s = arg;
	if (!session_closing(s))	/* after a protocol error nothing more is sent */
		reply_outcome(s, st, g, value, false);
	session_resume(s);
}

/* ---- commands ----------------------------------------------------------- */

static void
cmd_ping(struct session *s, const struct codec_frame *f)
{
	if (f->argc == 2)
		codec_reply_bulk(session_out(s), f->argv[1], f->argvlen[1]);
	else
		codec_reply_simple(session_out(s), "PONG");
}

/* Check password for user (NULL or "default": auth.password; "admin":
 * auth.admin_password, which makes the session an admin; any other user
 * fails). Replies on failure. */
static bool
auth_check(struct session *s, const char *user, const char *pass, size_t passlen)
{
	bool admin = user != NULL && strcmp(user, "admin") == 0;
	const char *secret = admin ? s->hub->conf->admin_password : s->hub->conf->password;
	if (secret == NULL && !admin) {
		codec_reply_error(session_out(s), "ERR",
		    "AUTH called without any password configured");
		return false;
	}
	/* without auth.admin_password, admin is a user like any unknown one */
	bool ok = secret != NULL && secret_equal(pass, passlen, secret);
	if (!admin && user != NULL && strcmp(user, "default") != 0)
		ok = false;
	if (!ok) {
		session_log(s, LOG_LEVEL_INFO, "authentication failed");
		codec_reply_error(session_out(s), "WRONGPASS", "invalid password");
		return false;
	}
	s->authed = true;
	if (admin && !s->admin) {
		s->admin = true;
		session_log(s, LOG_LEVEL_INFO, "authenticated as admin");
	}
	return true;
}

static void
cmd_auth(struct session *s, const struct codec_frame *f)
{
	size_t p = f->argc - 1;
	if (auth_check(s, f->argc == 3 ? f->argv[1] : NULL, f->argv[p], f->argvlen[p]))
		codec_reply_simple(session_out(s), "OK");
}

static void
cmd_hello(struct session *s, const struct codec_frame *f)
{
	struct evbuffer *out = session_out(s);
	long long proto = s->proto;
	const char *setname = NULL, *user = NULL, *pass = NULL;
	size_t i = 1, passlen = 0;

	if (f->argc > 1) {
		if (cmd_arg_int(f, 1, 0, 1000, &proto) != 0 || (proto != 2 && proto != 3)) {
			codec_reply_error(out, "NOPROTO", "unsupported protocol version");
			return;
		}
		i = 2;
	}
	while (i < f->argc) {
		if (arg_is(f, i, "AUTH") && i + 1 < f->argc) {
			/* AUTH password, or AUTH username password */
			bool two = i + 2 < f->argc && !arg_is(f, i + 2, "SETNAME");
			size_t p = two ? i + 2 : i + 1;
			user = two ? f->argv[i + 1] : NULL;
			pass = f->argv[p];
			passlen = f->argvlen[p];
			i = p + 1;
		} else if (arg_is(f, i, "SETNAME") && i + 1 < f->argc) {
			setname = f->argv[i + 1];
			i += 2;
		} else {
			codec_reply_error(out, "ERR", "syntax error in HELLO");
			return;
		}
	}
	/* the whole command is valid: only now may it change the session */
	if (pass != NULL && !auth_check(s, user, pass, passlen))
		return;
	if (setname != NULL) {
		free(s->name);
		s->name = xstrdup(setname);
	}
	session_set_proto(s, (int)proto);
	codec_reply_map(out, 6, s->proto);
	codec_reply_cstr(out, "server");
	codec_reply_cstr(out, "dlockd");
	codec_reply_cstr(out, "version");
	codec_reply_cstr(out, DLOCKD_VERSION);
	codec_reply_cstr(out, "proto");
	codec_reply_int(out, s->proto);
	codec_reply_cstr(out, "id");
	codec_reply_int(out, (long long)s->id);
	codec_reply_cstr(out, "backend");
	codec_reply_cstr(out, s->hub->be->ops->name);
	codec_reply_cstr(out, "mode");
	codec_reply_cstr(out, "standalone");
}

static void
cmd_quit(struct session *s, const struct codec_frame *f)
{
	(void)f;
	codec_reply_simple(session_out(s), "OK");
	session_close_after_reply(s, "quit");
}

/* Append the CLIENT LIST line of c (ending in "\n") to text. */
static void
client_line(struct evbuffer *text, struct session *c)
{
	uint64_t now = clock_ms();
	size_t keylen = 0;
	const char *key = locktab_owner_waiting(c->owner, &keylen);
	char *name = word_dupstr(c->name), *lname = word_dupstr(c->lib_name);
	char *lver = word_dupstr(c->lib_ver), *wait = codec_word(key ? key : "", keylen);
	char *laddr = word_dupstr(c->laddr);	/* a Unix socket's path may have spaces */
	size_t qbuf = codec_buffered(c->codec), omem = evbuffer_get_length(session_out(c));
	/* Redis's fields that its clients' parsers insist on, then ours */
	evbuffer_add_printf(text, "id=%llu addr=%s laddr=%s name=%s age=%llu idle=%llu "
	    "flags=%s db=0 sub=0 psub=0 multi=-1 qbuf=%zu qbuf-free=0 argv-mem=0 obl=0 oll=0 "
	    "omem=%zu tot-mem=%zu resp=%d lib-name=%s lib-ver=%s locks=%zu waiting=%s "
	    "admin=%d\n",
	    (unsigned long long)c->id, c->peer, laddr, name,
	    (unsigned long long)((now - c->created_ms) / 1000),
	    (unsigned long long)((now - c->last_active_ms) / 1000),
	    c->peer_cred ? "U" : "N", qbuf, omem, qbuf + omem, c->proto, lname, lver,
	    locktab_owner_holds(c->owner, NULL, NULL), wait, session_is_admin(c) ? 1 : 0);
	free(name);
	free(wait);
	free(lname);
	free(lver);
	free(laddr);
}

/* CLIENT LIST (every session) or CLIENT INFO (this one): text for people,
 * one line of field=value words per session. */
static void
client_list(struct session *s, bool all)
{
	struct evbuffer *text = evbuffer_new();
	struct session *c;
	if (all)
		TAILQ_FOREACH(c, &s->hub->all, entry)
			client_line(text, c);
	else
		client_line(text, s);
	size_t len = evbuffer_get_length(text);
	codec_reply_verbatim(session_out(s), evbuffer_pullup(text, -1), len, s->proto);
	evbuffer_free(text);
}

/* CLIENT KILL ID n | ADDR ip:port: close the sessions it names, their locks
 * released as on any disconnect. Killing another session needs admin rights;
 * a session may kill itself by ID (closed once the reply is written). ADDR
 * skips the caller, as Redis does. Replies how many. */
static void
client_kill(struct session *s, const struct codec_frame *f)
{
	struct session *c, *next;
	char who[128];
	long long id;
	bool by_id = arg_is(f, 2, "ID");

	if (f->argc != 4 || !(by_id || arg_is(f, 2, "ADDR"))) {
		codec_reply_error(session_out(s), "ERR", "syntax error: CLIENT KILL ID id | "
		    "CLIENT KILL ADDR ip:port");
		return;
	}
	if (by_id && cmd_arg_int(f, 3, 1, INT64_MAX, &id) != 0) {
		codec_reply_error(session_out(s), "ERR", "client-id should be greater than 0");
		return;
	}
	snprintf(who, sizeof(who), "client %llu %s (CLIENT KILL)", (unsigned long long)s->id,
	    s->peer);
	if (by_id) {
		c = session_find(s->hub, (uint64_t)id);
		if (c == s) {
			codec_reply_int(session_out(s), 1);
			session_close_after_reply(s, "client kill");
			return;
		}
		if (c != NULL && !admin_ok(s, "CLIENT KILL of another session"))
			return;
		if (c != NULL)
			session_kill(c, who);
		codec_reply_int(session_out(s), c != NULL);
		return;
	}
	long long n = 0;
	TAILQ_FOREACH(c, &s->hub->all, entry)
		n += c != s && strcmp(c->peer, f->argv[3]) == 0;
	if (n > 0 && !admin_ok(s, "CLIENT KILL of another session"))
		return;
	for (c = TAILQ_FIRST(&s->hub->all); c != NULL; c = next) {
		next = TAILQ_NEXT(c, entry);
		if (c != s && strcmp(c->peer, f->argv[3]) == 0)
			session_kill(c, who);
	}
	codec_reply_int(session_out(s), n);
}

/* Replace the string at *field with a copy of value. */
static void
set_str(char **field, const char *value)
{
	free(*field);
	*field = xstrdup(value);
}

static void
cmd_client(struct session *s, const struct codec_frame *f)
{
	struct evbuffer *out = session_out(s);
	if (arg_is(f, 1, "ID") && f->argc == 2) {
		codec_reply_int(out, (long long)s->id);
	} else if (arg_is(f, 1, "GETNAME") && f->argc == 2) {
		if (s->name != NULL)
			codec_reply_cstr(out, s->name);
		else
			codec_reply_null(out, s->proto);
	} else if (arg_is(f, 1, "SETNAME") && f->argc == 3) {
		set_str(&s->name, f->argv[2]);
		codec_reply_simple(out, "OK");
	} else if (arg_is(f, 1, "SETINFO") && f->argc == 4) {
		if (arg_is(f, 2, "LIB-NAME"))
			set_str(&s->lib_name, f->argv[3]);
		else if (arg_is(f, 2, "LIB-VER"))
			set_str(&s->lib_ver, f->argv[3]);
		codec_reply_simple(out, "OK");	/* other attributes: accepted, unused */
	} else if (arg_is(f, 1, "LIST") && f->argc == 2) {
		client_list(s, true);
	} else if (arg_is(f, 1, "INFO") && f->argc == 2) {
		client_list(s, false);
	} else if (arg_is(f, 1, "KILL") && f->argc >= 3) {
		client_kill(s, f);
	} else if (arg_is(f, 1, "LOSTPUSH") && f->argc == 3 &&
	    (arg_is(f, 2, "ON") || arg_is(f, 2, "OFF"))) {
		if (session_set_lost_push(s, arg_is(f, 2, "ON")) != 0)
			codec_reply_error(out, "ERR", "lost pushes need RESP3: send HELLO 3 first");
		else
			codec_reply_simple(out, "OK");
	} else if (arg_is(f, 1, "SUSPENDPUSH") && f->argc == 3 &&
	    (arg_is(f, 2, "ON") || arg_is(f, 2, "OFF"))) {
		if (session_set_suspend_push(s, arg_is(f, 2, "ON")) != 0)
			codec_reply_error(out, "ERR", "suspend pushes need RESP3: send HELLO 3 "
			    "first");
		else
			codec_reply_simple(out, "OK");
	} else {
		codec_reply_error(out, "ERR", "unknown CLIENT subcommand or wrong number of "
		    "arguments (ID, GETNAME, SETNAME name, SETINFO attr value, LIST, INFO, "
		    "KILL ID id, KILL ADDR ip:port, LOSTPUSH ON|OFF, SUSPENDPUSH ON|OFF)");
	}
}

/* See cmd_int.h. */
bool
cmd_lock_options(struct session *s, const struct codec_frame *f, size_t first,
    bool campaign, const char *syntax, struct lt_lock_req *req)
{
	struct evbuffer *out = session_out(s);
	bool has_ttl = false, has_wait = false, shared = false, has_limit = false;
	long long v;

	for (size_t i = first; i < f->argc; i++) {
		if (arg_is(f, i, "TTL") && !has_ttl && i + 1 < f->argc) {
			if (!ttl_ok(s, f, ++i, &v))
				return false;
			req->ttl_ms = (uint64_t)v;
			has_ttl = true;
		} else if (arg_is(f, i, "WAIT") && !has_wait && i + 1 < f->argc) {
			if (cmd_arg_int(f, ++i, 0, INT64_MAX / 2, &v) != 0) {
				codec_reply_error(out, "ERR", "WAIT must be a number of ms, 0 or more");
				return false;
			}
			req->wait_ms = v;
			has_wait = true;
		} else if (arg_is(f, i, "SHARED") && !campaign && !shared && !has_limit) {
			req->mode = LOCK_SHARED;
			shared = true;
		} else if (arg_is(f, i, "LIMIT") && !campaign && !shared && !has_limit &&
		    i + 1 < f->argc) {
			if (cmd_arg_int(f, ++i, 1, SEMAPHORE_MAX, &v) != 0) {
				codec_reply_error(out, "ERR", "LIMIT must be 1 to %d", SEMAPHORE_MAX);
				return false;
			}
			req->mode = LOCK_SEMAPHORE;
			req->limit = (unsigned)v;
			has_limit = true;
		} else if (arg_is(f, i, "DETACH") && !req->detach) {
			req->detach = 1;
		} else if (campaign) {
			codec_reply_error(out, "ERR", "syntax error: CAMPAIGN key value [TTL ms] "
			    "[WAIT ms] [DETACH]");
			return false;
		} else {
			codec_reply_error(out, "ERR", "syntax error: %s", syntax);
			return false;
		}
	}
	if (req->detach && !has_ttl) {
		codec_reply_error(out, "ERR", "DETACH needs an explicit TTL");
		return false;
	}
	return true;
}

/* LOCK, or CAMPAIGN with a value. */
static void
lock_or_campaign(struct session *s, const struct codec_frame *f, bool campaign)
{
	struct lt_lock_req req = { .key = f->argv[1], .keylen = f->argvlen[1],
	    .mode = LOCK_EXCLUSIVE, .ttl_ms = (uint64_t)s->hub->conf->default_ttl_ms,
	    .wait_ms = -1 };

	if (!cmd_key_ok(s, f, 1))
		return;
	if (campaign) {
		if (!value_ok(s, f, 2))
			return;
		req.value = f->argv[2];
		req.valuelen = f->argvlen[2];
	}
	if (!cmd_lock_options(s, f, campaign ? 3 : 2, campaign, "LOCK key [TTL ms] "
	    "[WAIT ms] [SHARED | LIMIT n] [DETACH]", &req))
		return;
	if (campaign && !observe_ok(s, "CAMPAIGN"))
		return;
	struct lt_grant g;
	enum lt_status st = locktab_lock(s->owner, &req, &g, cmd_done, s);
	if (st == LT_PENDING) {
		session_wait(s, SESSION_WAIT_LOCK);
		return;
	}
	reply_outcome(s, st, &g, 0, false);
}

static void
cmd_lock(struct session *s, const struct codec_frame *f)
{
	lock_or_campaign(s, f, false);
}

static void
cmd_campaign(struct session *s, const struct codec_frame *f)
{
	lock_or_campaign(s, f, true);
}

/* Add a broken holding's fence to the list being logged. */
static void
force_entry(void *arg, const struct lt_holder_info *h)
{
	struct evbuffer *fences = arg;
	evbuffer_add_printf(fences, "%s%llu%s", evbuffer_get_length(fences) ? ", " : "",
	    (unsigned long long)h->fence, h->detached ? " (detached)" : "");
}

/* An UNLOCK FORCE that breaks the leases of other daemons in the backend. */
struct force_call {
	struct session *s;		/* who asked; NULL once it is gone */
	unsigned local;			/* holdings broken here */
	size_t keylen;
	char key[];
};

/* The session's UNLOCK FORCE will never be answered (session_abort_fn). */
static void
force_abort(void *arg, bool gone)
{
	struct force_call *fc = arg;
	(void)gone;
	fc->s = NULL;
}

/* The backend broke the other daemons' leases of the key (or failed):
 * logged, and the holdings broken in all answered. */
static void
force_done(void *arg, const struct be_reply *r)
{
	struct force_call *fc = arg;
	struct session *s = fc->s;
	char kb[LOG_KEY_BUF];
	log_escape(kb, sizeof(kb), fc->key, fc->keylen, 0);
	if (r->status == BE_OK)
		log_warn("UNLOCK FORCE of key '%s': %u lease%s of other daemons broken in the "
		    "backend (their daemons tell their holders)", kb, r->broken,
		    r->broken == 1 ? "" : "s");
	else
		log_warn("UNLOCK FORCE of key '%s': the leases of other daemons were not broken: "
		    "%s", kb, r->why != NULL ? r->why : "backend error");
	if (s != NULL) {
		if (session_closing(s))
			;
		else if (r->status == BE_OK)
			codec_reply_int(session_out(s), fc->local + r->broken);
		else
			codec_reply_error(session_out(s), "BACKEND", "%u holding%s broken here; "
			    "those of other daemons were not: %s", fc->local,
			    fc->local == 1 ? "" : "s", r->why != NULL ? r->why : "backend error");
		session_resume(s);
	}
	free(fc);
}

/* UNLOCK key FORCE (admin only): break every holding of the key here, then,
 * on a backend shared by daemons, every other daemon's lease of it. */
static void
unlock_force(struct session *s, const struct codec_frame *f)
{
	struct backend *be = s->hub->be;
	const struct who_daemon *d = &s->hub->daemon;
	char reason[96], kb[LOG_KEY_BUF], by[400];
	if (!admin_ok(s, "UNLOCK FORCE"))
		return;
	snprintf(reason, sizeof(reason), "the lock was broken by an administrator "
	    "(session %llu)", (unsigned long long)s->id);
	struct evbuffer *fences = evbuffer_new();
	unsigned n = locktab_force(s->hub->lt, f->argv[1], f->argvlen[1], reason, force_entry,
	    fences);
	evbuffer_add(fences, "", 1);
	session_log(s, LOG_LEVEL_WARN, "UNLOCK FORCE of key '%s': %u holding%s broken%s%s",
	    log_escape(kb, sizeof(kb), f->argv[1], f->argvlen[1], 0), n, n == 1 ? "" : "s",
	    n > 0 ? ", fences " : "", (const char *)evbuffer_pullup(fences, -1));
	evbuffer_free(fences);
	if (be->ops->force == NULL || be->ops->local_leases) {
		codec_reply_int(session_out(s), n);
		return;
	}
	/* the lock table's releases went first: what the backend breaks now
	 * is other daemons' */
	struct force_call *fc = xmalloc(sizeof(*fc) + f->argvlen[1]);
	fc->s = s;
	fc->local = n;
	fc->keylen = f->argvlen[1];
	memcpy(fc->key, f->argv[1], f->argvlen[1]);
	snprintf(by, sizeof(by), "UNLOCK FORCE of session %llu (%s) through daemon %s (%s@%s)",
	    (unsigned long long)s->id, s->peer, d->id, d->addr, d->host);
	session_wait(s, SESSION_WAIT_BACKEND);
	session_wait_abort(s, force_abort, fc);
	be->ops->force(be, fc->key, fc->keylen, by, d->id, force_done, fc);
}

static void
cmd_unlock(struct session *s, const struct codec_frame *f)
{
	const char *token = f->argc == 3 ? f->argv[2] : NULL;
	long long remaining = 0;
	if (!cmd_key_ok(s, f, 1))
		return;
	if (token != NULL && arg_is(f, 2, "FORCE")) {
		unlock_force(s, f);
		return;
	}
	enum lt_status st = locktab_unlock(s->owner, f->argv[1], f->argvlen[1], token,
	    &remaining, cmd_done, s);
	if (st == LT_PENDING)
		session_wait(s, SESSION_WAIT_BACKEND);
	else
		reply_outcome(s, st, NULL, remaining, token != NULL);
}

static void
cmd_extend(struct session *s, const struct codec_frame *f)
{
	const char *token = f->argc == 4 ? f->argv[3] : NULL;
	long long ms;
	if (!cmd_key_ok(s, f, 1))
		return;
	if (!ttl_ok(s, f, 2, &ms))
		return;
	enum lt_status st = locktab_extend(s->owner, f->argv[1], f->argvlen[1],
	    (uint64_t)ms, token, cmd_done, s);
	if (st == LT_PENDING)
		session_wait(s, SESSION_WAIT_BACKEND);
	else
		reply_outcome(s, st, NULL, 0, token != NULL);
}

/* STATUS FULL: entries are written to a buffer of their own, counted, and
 * added behind their array's header. */
struct status_list {
	struct session *s;		/* who asked */
	struct evbuffer *buf;		/* the entries */
	size_t n;			/* how many */
};

/* Write the session, name and addr fields of the session with id into l. */
static void
status_who(struct status_list *l, uint64_t id)
{
	struct session *c = id != 0 ? session_find(l->s->hub, id) : NULL;
	codec_reply_cstr(l->buf, "session");
	codec_reply_int(l->buf, c != NULL ? (long long)id : 0);
	codec_reply_cstr(l->buf, "name");
	codec_reply_cstr(l->buf, c != NULL && c->name != NULL ? c->name : "");
	codec_reply_cstr(l->buf, "addr");
	codec_reply_cstr(l->buf, c != NULL ? c->peer : "");
}

/* Write the daemon fields of a holder held through daemon id, on host,
 * reached at addr (strings of their lengths) into l. */
static void
status_daemon(struct status_list *l, const char *id, size_t idlen, const char *host,
    size_t hostlen, const char *addr, size_t addrlen)
{
	codec_reply_cstr(l->buf, "daemon");
	codec_reply_bulk(l->buf, id, idlen);
	codec_reply_cstr(l->buf, "host");
	codec_reply_bulk(l->buf, host, hostlen);
	codec_reply_cstr(l->buf, "daemon_addr");
	codec_reply_bulk(l->buf, addr, addrlen);
}

#define STATUS_HOLDER_FIELDS 13		/* the fields of a holder's map */

/* A holder's map (arg: status_full's pair of lists, holders first). */
static void
status_holder(void *arg, const struct lt_holder_info *h)
{
	struct status_list *l = arg;
	const struct who_daemon *d = &l->s->hub->daemon;
	codec_reply_map(l->buf, STATUS_HOLDER_FIELDS, l->s->proto);
	status_who(l, h->owner_id);
	codec_reply_cstr(l->buf, "mode");
	codec_reply_cstr(l->buf, locktab_mode_name(h->mode));
	codec_reply_cstr(l->buf, "fence");
	codec_reply_int(l->buf, (long long)h->fence);
	codec_reply_cstr(l->buf, "count");
	codec_reply_int(l->buf, h->count);
	codec_reply_cstr(l->buf, "held_ms");
	codec_reply_int(l->buf, (long long)h->held_ms);
	codec_reply_cstr(l->buf, "lease_ms");
	codec_reply_int(l->buf, h->lease_ms);
	codec_reply_cstr(l->buf, "detached");
	codec_reply_int(l->buf, h->detached);
	codec_reply_cstr(l->buf, "suspended");
	codec_reply_int(l->buf, h->suspended);
	status_daemon(l, d->id, strlen(d->id), d->host, strlen(d->host), d->addr,
	    strlen(d->addr));
	l->n++;
}

/* The map of h, a lease held through another daemon, as the backend keeps
 * it (its description read as w, NULL when there is none). */
static void
status_remote(struct status_list *l, const struct be_holder *h, const struct who *w)
{
	uint64_t now = who_wall_ms(), since = w != NULL ? who_num(w, WHO_SINCE) : 0;
	codec_reply_map(l->buf, STATUS_HOLDER_FIELDS, l->s->proto);
	codec_reply_cstr(l->buf, "session");
	codec_reply_int(l->buf, w != NULL ? (long long)who_num(w, WHO_SESSION) : 0);
	codec_reply_cstr(l->buf, "name");
	codec_reply_bulk(l->buf, w != NULL ? w->f[WHO_NAME] : "", w != NULL ? w->len[WHO_NAME] : 0);
	codec_reply_cstr(l->buf, "addr");
	codec_reply_bulk(l->buf, w != NULL ? w->f[WHO_ADDR] : "", w != NULL ? w->len[WHO_ADDR] : 0);
	codec_reply_cstr(l->buf, "mode");
	codec_reply_cstr(l->buf, locktab_mode_name(h->mode));
	codec_reply_cstr(l->buf, "fence");
	codec_reply_int(l->buf, (long long)h->fence);
	codec_reply_cstr(l->buf, "count");
	codec_reply_int(l->buf, 1);
	codec_reply_cstr(l->buf, "held_ms");
	codec_reply_int(l->buf, since != 0 && now > since ? (long long)(now - since) : 0);
	codec_reply_cstr(l->buf, "lease_ms");
	codec_reply_int(l->buf, h->lease_ms);
	codec_reply_cstr(l->buf, "detached");
	codec_reply_int(l->buf, w != NULL && who_num(w, WHO_DETACHED) == 1);
	codec_reply_cstr(l->buf, "suspended");
	codec_reply_int(l->buf, 0);
	if (w != NULL)
		status_daemon(l, w->f[WHO_DAEMON], w->len[WHO_DAEMON], w->f[WHO_HOST],
		    w->len[WHO_HOST], w->f[WHO_DAEMON_ADDR], w->len[WHO_DAEMON_ADDR]);
	else
		status_daemon(l, "", 0, "", 0, "", 0);
	l->n++;
}

/* A waiter's map (arg: status_full's pair of lists, waiters second). */
static void
status_waiter(void *arg, const struct lt_waiter_info *w)
{
	struct status_list *l = (struct status_list *)arg + 1;
	codec_reply_map(l->buf, 7, l->s->proto);
	status_who(l, w->owner_id);
	codec_reply_cstr(l->buf, "mode");
	codec_reply_cstr(l->buf, locktab_mode_name(w->mode));
	codec_reply_cstr(l->buf, "waited_ms");
	codec_reply_int(l->buf, (long long)w->waited_ms);
	codec_reply_cstr(l->buf, "wait_ms");
	codec_reply_int(l->buf, w->wait_ms);
	codec_reply_cstr(l->buf, "detach");
	codec_reply_int(l->buf, w->detach);
	l->n++;
}

/* Whether h, a lease the backend keeps, is another daemon's (the lock
 * table tells this daemon's own); its description read into *w (NULL when
 * it has none). */
static bool
status_elsewhere(const struct session *s, const struct be_holder *h, struct who *w,
    const struct who **wp)
{
	*wp = h->who != NULL && who_parse(h->who, h->wholen, w) ? w : NULL;
	return *wp == NULL || !who_is(*wp, &s->hub->daemon);
}

/* Answer STATUS key [FULL]: the lock table's holders and waiters, and the
 * leases of other daemons that hs (NULL: none read) found in the backend. */
static void
status_answer(struct session *s, const char *key, size_t keylen, bool full,
    const struct be_holders *hs)
{
	struct evbuffer *out = session_out(s);
	struct lt_key_status ks;
	struct who w;
	const struct who *wp;
	size_t nremote = 0;
	locktab_status(s->hub->lt, key, keylen, &ks);
	for (size_t i = 0; hs != NULL && i < hs->n; i++) {
		const struct be_holder *h = &hs->h[i];
		if (!status_elsewhere(s, h, &w, &wp))
			continue;
		if (nremote++ == 0 && ks.holders == 0) {
			ks.mode = locktab_mode_name(h->mode);
			ks.ttl_ms = h->mode == LOCK_EXCLUSIVE ? h->lease_ms : -1;
		}
		if (h->fence > ks.fence)
			ks.fence = h->fence;
	}
	ks.holders += (unsigned)nremote;
	codec_reply_map(out, full ? 9 : 7, s->proto);
	codec_reply_cstr(out, "mode");
	codec_reply_cstr(out, ks.mode);
	codec_reply_cstr(out, "holders");
	codec_reply_int(out, ks.holders);
	codec_reply_cstr(out, "waiters");
	codec_reply_int(out, ks.waiters);
	codec_reply_cstr(out, "fence");
	codec_reply_int(out, (long long)ks.fence);
	codec_reply_cstr(out, "ttl_ms");
	codec_reply_int(out, ks.ttl_ms);
	codec_reply_cstr(out, "limit");
	codec_reply_int(out, ks.limit);
	codec_reply_cstr(out, "backend");
	codec_reply_cstr(out, s->hub->be->ops->state(s->hub->be));
	if (!full)
		return;
	struct status_list l[2] = { { s, evbuffer_new(), 0 }, { s, evbuffer_new(), 0 } };
	locktab_key_walk(s->hub->lt, key, keylen, status_holder, status_waiter, l);
	for (size_t i = 0; hs != NULL && i < hs->n; i++)
		if (status_elsewhere(s, &hs->h[i], &w, &wp))
			status_remote(&l[0], &hs->h[i], wp);
	codec_reply_cstr(out, "holders");
	codec_reply_array(out, l[0].n);
	evbuffer_add_buffer(out, l[0].buf);
	codec_reply_cstr(out, "waiters");
	codec_reply_array(out, l[1].n);
	evbuffer_add_buffer(out, l[1].buf);
	evbuffer_free(l[0].buf);
	evbuffer_free(l[1].buf);
}

/* A STATUS that reads the backend's leases. */
struct status_read {
	struct session *s;		/* who asked; NULL once it is gone */
	bool full;			/* STATUS FULL */
	size_t keylen;
	char key[];
};

/* The session's STATUS will never be answered (session_abort_fn). */
static void
status_abort(void *arg, bool gone)
{
	struct status_read *st = arg;
	(void)gone;
	st->s = NULL;
}

/* The backend's leases of the key were read (or could not be: the lock
 * table's view alone answers, as the backend field tells). */
static void
status_read_done(void *arg, const struct be_holders *hs)
{
	struct status_read *st = arg;
	struct session *s = st->s;
	if (s != NULL) {
		if (hs->status != BE_OK)
			log_debug("STATUS: the backend's leases were not read: %s",
			    hs->why != NULL ? hs->why : "backend error");
		if (!session_closing(s))
			status_answer(s, st->key, st->keylen, st->full,
			    hs->status == BE_OK ? hs : NULL);
		session_resume(s);
	}
	free(st);
}

static void
cmd_status(struct session *s, const struct codec_frame *f)
{
	struct backend *be = s->hub->be;
	bool full = f->argc == 3;
	if (!cmd_key_ok(s, f, 1))
		return;
	if (full && !arg_is(f, 2, "FULL")) {
		codec_reply_error(session_out(s), "ERR", "syntax error: STATUS key [FULL]");
		return;
	}
	if (be->ops->holders == NULL) {
		status_answer(s, f->argv[1], f->argvlen[1], full, NULL);
		return;
	}
	/* other daemons' leases are in the backend: one read of them */
	struct status_read *st = xmalloc(sizeof(*st) + f->argvlen[1]);
	st->s = s;
	st->full = full;
	st->keylen = f->argvlen[1];
	memcpy(st->key, f->argv[1], f->argvlen[1]);
	session_wait(s, SESSION_WAIT_BACKEND);
	session_wait_abort(s, status_abort, st);
	be->ops->holders(be, st->key, st->keylen, status_read_done, st);
}

static void
cmd_validate(struct session *s, const struct codec_frame *f)
{
	long long fence;
	if (!cmd_key_ok(s, f, 1))
		return;
	if (cmd_arg_int(f, 2, 0, INT64_MAX, &fence) != 0) {
		codec_reply_error(session_out(s), "ERR", "fence must be a number, 0 or more");
		return;
	}
	codec_reply_int(session_out(s),
	    locktab_validate(s->hub->lt, f->argv[1], f->argvlen[1], (uint64_t)fence));
}

static void
locks_entry(void *arg, const struct lt_hold_info *h)
{
	struct evbuffer *out = arg;
	codec_reply_array(out, 5);
	codec_reply_bulk(out, h->key, h->keylen);
	codec_reply_bulk(out, h->token, TOKEN_LEN);
	codec_reply_int(out, (long long)h->fence);
	codec_reply_cstr(out, locktab_mode_name(h->mode));
	codec_reply_int(out, h->count);
}

static void
cmd_locks(struct session *s, const struct codec_frame *f)
{
	struct evbuffer *out = session_out(s);
	(void)f;
	codec_reply_array(out, locktab_owner_holds(s->owner, NULL, NULL));
	locktab_owner_holds(s->owner, locks_entry, out);
}

/* INFO's # Locks lines in their order: each number of struct lt_stats at
 * the place LT_STATS gives it. */
static const struct {
	const char *name;		/* the field's name in INFO */
	size_t off;			/* offsetof() its number in struct lt_stats */
} info_locks[] = {
#define INFO_LOCKS_ROW(field, name, type, info, help) \
	[info] = { #name, offsetof(struct lt_stats, field) },
	LT_STATS(INFO_LOCKS_ROW)
#undef INFO_LOCKS_ROW
};
_Static_assert(sizeof(info_locks) == sizeof(struct lt_stats) / sizeof(uint64_t) *
    sizeof(info_locks[0]), "LT_STATS's INFO places are not 0 to n-1");

static void
cmd_info(struct session *s, const struct codec_frame *f)
{
	const struct session_hub *hub = s->hub;
	struct evbuffer *text = evbuffer_new();
	struct lt_stats st;
	struct obs_stats os;
	uint64_t v;
	(void)f;
	locktab_stats(hub->lt, &st);
	evbuffer_add_printf(text,
	    "# Server\r\nversion:%s\r\nbackend:%s\r\nprocess_id:%ld\r\ndaemon_id:%s\r\n"
	    "uptime_seconds:%llu\r\n"
	    "\r\n# Clients\r\nconnected_clients:%llu\r\nsession_idle_timeout_ms:%lld\r\n",
	    DLOCKD_VERSION, hub->be->ops->name, (long)getpid(), hub->daemon.id,
	    (unsigned long long)((clock_ms() - hub->started_ms) / 1000),
	    (unsigned long long)hub->count, hub->conf->idle_timeout_ms);
#define INFO_COUNTER(name, metric, help) \
	evbuffer_add_printf(text, #name ":%llu\r\n", (unsigned long long)hub->counters.name);
	SESSION_COUNTERS(INFO_COUNTER)
#undef INFO_COUNTER
	evbuffer_add_printf(text, "\r\n# Locks\r\n");
	for (size_t i = 0; i < sizeof(info_locks) / sizeof(info_locks[0]); i++) {
		memcpy(&v, (const char *)&st + info_locks[i].off, sizeof(v));
		evbuffer_add_printf(text, "%s:%llu\r\n", info_locks[i].name,
		    (unsigned long long)v);
	}
#define INFO_MULTI(name, type, help) \
	evbuffer_add_printf(text, #name ":%llu\r\n", (unsigned long long)hub->multi.name);
	SESSION_MULTI_STATS(INFO_MULTI)
#undef INFO_MULTI
	obs_stats(hub->obs, &os);
	evbuffer_add_printf(text, "\r\n# Observe\r\n");
#define INFO_OBSERVE(field, name, type, help) \
	evbuffer_add_printf(text, #name ":%llu\r\n", (unsigned long long)os.field);
	OBS_STATS(INFO_OBSERVE)
#undef INFO_OBSERVE
	evbuffer_add_printf(text, "\r\n# Backend\r\n");
	hub->be->ops->info(hub->be, text);
	size_t len = evbuffer_get_length(text);
	const unsigned char *p = evbuffer_pullup(text, -1);
	codec_reply_bulk(session_out(s), p, len);
	evbuffer_free(text);
}

/* ---- leaders ------------------------------------------------------------ */

/* [value | nil, term, revision, kind, holders] */
static void
reply_state(struct evbuffer *out, const struct obs_state *st, int proto)
{
	codec_reply_array(out, 5);
	if (st->value != NULL)
		codec_reply_bulk(out, st->value, st->valuelen);
	else
		codec_reply_null(out, proto);
	codec_reply_int(out, (long long)st->term);
	codec_reply_int(out, (long long)st->revision);
	codec_reply_cstr(out, st->kind);
	codec_reply_int(out, st->holders);
}

/* The key's revision as this daemon knows it now, 0 while unknown. */
static long long
revision_now(struct session *s, const char *key, size_t keylen)
{
	struct obs_state st;
	return obs_now(s->hub->obs, key, keylen, &st) ? (long long)st.revision : 0;
}

/* The backend has the value of a PROCLAIM that waited: the answer is the
 * revision known before it (s->pending_value), which an OBSERVE after it
 * answers with the change, when it comes back from the backend. */
static void
proclaim_done(void *arg, enum lt_status st, const struct lt_grant *g, long long value)
{
	struct session *s = arg;
	(void)g;
	(void)value;
	if (!session_closing(s)) {
		if (st == LT_OK)
			codec_reply_int(session_out(s), s->pending_value);
		else
			cmd_reply_lt_error(s, st, false);
	}
	session_resume(s);
}

static void
cmd_proclaim(struct session *s, const struct codec_frame *f)
{
	if (!cmd_key_ok(s, f, 1) || !value_ok(s, f, 2) || !observe_ok(s, "PROCLAIM"))
		return;
	s->pending_value = revision_now(s, f->argv[1], f->argvlen[1]);
	enum lt_status r = locktab_proclaim(s->owner, f->argv[1], f->argvlen[1], f->argv[2],
	    f->argvlen[2], proclaim_done, s);
	if (r == LT_PENDING) {
		session_wait(s, SESSION_WAIT_BACKEND);
		return;
	}
	if (r == LT_E_MODE) {
		codec_reply_error(session_out(s), "ERR", "the key is held shared or as a "
		    "semaphore: it has no leader");
		return;
	}
	if (r != LT_OK) {
		cmd_reply_lt_error(s, r, false);
		return;
	}
	codec_reply_int(session_out(s), revision_now(s, f->argv[1], f->argvlen[1]));
}

static void
cmd_resign(struct session *s, const struct codec_frame *f)
{
	cmd_unlock(s, f);
}

static struct obs_client *observer(struct session *s);

static void
cmd_leader(struct session *s, const struct codec_frame *f)
{
	struct obs_state st;
	if (!cmd_key_ok(s, f, 1) || !observe_ok(s, "LEADER"))
		return;
	if (obs_client_now(observer(s), f->argv[1], f->argvlen[1], &st))
		reply_state(session_out(s), &st, s->proto);
	else
		session_wait(s, SESSION_WAIT_BACKEND);	/* the backend is read */
}

/* An OBSERVE's answer, or a push of a followed key. */
static void
observe_told(void *arg, enum obs_event ev, const char *key, size_t keylen,
    const struct obs_state *st)
{
	struct session *s = arg;
	struct evbuffer *out = session_out(s);
	if (ev == OBS_PUSH) {
		if (session_closing(s))
			return;
		codec_reply_push(out, 3, 3);
		codec_reply_cstr(out, "observe");
		codec_reply_bulk(out, key, keylen);
		reply_state(out, st, s->proto);
		session_pushed(s);
		return;
	}
	if (!session_closing(s)) {
		if (ev == OBS_TIMEOUT)
			codec_reply_null_array(out, s->proto);
		else if (ev == OBS_ERROR)
			cmd_reply_lt_error(s, LT_E_BACKEND, false);
		else
			reply_state(out, st, s->proto);
	}
	session_resume(s);
}

/* The session's observer, made when first needed. */
static struct obs_client *
observer(struct session *s)
{
	if (s->observer == NULL)
		s->observer = obs_client_create(s->hub->obs, observe_told, s);
	return s->observer;
}

/* OBSERVE key FOLLOW | UNFOLLOW */
static void
observe_follow(struct session *s, const struct codec_frame *f)
{
	struct obs_state st;
	if (arg_is(f, 2, "UNFOLLOW")) {
		codec_reply_int(session_out(s), s->observer != NULL &&
		    obs_client_unfollow(s->observer, f->argv[1], f->argvlen[1]));
		return;
	}
	if (s->proto < 3) {
		codec_reply_error(session_out(s), "ERR", "OBSERVE FOLLOW pushes the changes: "
		    "it needs RESP3 (HELLO 3); RESP2 clients loop on OBSERVE key AFTER revision");
		return;
	}
	(void)obs_client_follow(observer(s), f->argv[1], f->argvlen[1]);	/* again: no-op */
	if (obs_client_now(observer(s), f->argv[1], f->argvlen[1], &st))
		reply_state(session_out(s), &st, s->proto);
	else
		session_wait(s, SESSION_WAIT_BACKEND);
}

static void
cmd_observe(struct session *s, const struct codec_frame *f)
{
	struct evbuffer *out = session_out(s);
	struct obs_state st;
	bool has_after = false, has_wait = false;
	long long after = 0, wait = -1;

	if (!cmd_key_ok(s, f, 1) || !observe_ok(s, "OBSERVE"))
		return;
	if (f->argc == 3 && (arg_is(f, 2, "FOLLOW") || arg_is(f, 2, "UNFOLLOW"))) {
		observe_follow(s, f);
		return;
	}
	for (size_t i = 2; i < f->argc; i++) {
		if (arg_is(f, i, "AFTER") && !has_after && i + 1 < f->argc) {
			if (cmd_arg_int(f, ++i, 0, INT64_MAX, &after) != 0) {
				codec_reply_error(out, "ERR", "AFTER must be a revision, 0 or more");
				return;
			}
			has_after = true;
		} else if (arg_is(f, i, "WAIT") && !has_wait && i + 1 < f->argc) {
			if (cmd_arg_int(f, ++i, 0, INT64_MAX / 2, &wait) != 0) {
				codec_reply_error(out, "ERR", "WAIT must be a number of ms, 0 or more");
				return;
			}
			has_wait = true;
		} else {
			codec_reply_error(out, "ERR", "syntax error: OBSERVE key [AFTER revision] "
			    "[WAIT ms] | OBSERVE key FOLLOW | OBSERVE key UNFOLLOW");
			return;
		}
	}
	if (!has_after) {
		if (obs_client_now(observer(s), f->argv[1], f->argvlen[1], &st))
			reply_state(out, &st, s->proto);
		else
			session_wait(s, SESSION_WAIT_BACKEND);
	} else if (obs_after(s->hub->obs, f->argv[1], f->argvlen[1], (uint64_t)after, &st)) {
		reply_state(out, &st, s->proto);
	} else if (wait == 0) {
		codec_reply_null_array(out, s->proto);
	} else {
		obs_client_wait(observer(s), f->argv[1], f->argvlen[1], (uint64_t)after, wait);
		session_wait(s, SESSION_WAIT_OBSERVE);
	}
}

/* ---- dispatch ----------------------------------------------------------- */

void
cmd_dispatch(struct session *s, const struct codec_frame *f)
{
	const struct cmd *c = NULL;
	/* the length and the first letter rule out all but one name */
	char first = (char)(f->argv[0][0] & ~0x20);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (f->argvlen[0] == commands[i].len && first == commands[i].name[0] &&
		    strcasecmp(f->argv[0], commands[i].name) == 0) {
			c = &commands[i];
			break;
		}
	if (c == NULL) {
		char name[64];
		size_t n = f->argvlen[0] < sizeof(name) - 1 ? f->argvlen[0] : sizeof(name) - 1;
		for (size_t i = 0; i < n; i++) {
			unsigned char ch = (unsigned char)f->argv[0][i];
			name[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
		}
		name[n] = '\0';
		codec_reply_error(session_out(s), "ERR", "unknown command '%s'", name);
		return;
	}
	if (!s->authed && !(c->flags & CMD_OPEN)) {
		codec_reply_error(session_out(s), "NOAUTH", "Authentication required.");
		return;
	}
	if ((int)f->argc < c->min || (c->max >= 0 && (int)f->argc > c->max)) {
		codec_reply_error(session_out(s), "ERR",
		    "wrong number of arguments for '%s' command", c->name);
		return;
	}
	c->fn(s, f);
}
