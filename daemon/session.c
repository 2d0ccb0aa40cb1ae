/*
 * session — one client connection: in-order processing of its requests,
 * back-pressure, its idle timer and the losses it has not been told of; and
 * a server's sessions together (struct session_hub: the list, the index by
 * id, the counters).
 *
 * It owns its connection, its codec and its lock-table owner. It must not
 * know what a command does (cmd) nor how locks work (locktab), and knows of
 * its server only what the hub holds.
 */
#include "session.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "clock.h"
#include "codec.h"
#include "conf.h"
#include "conn.h"
#include "listener.h"
#include "locktab.h"
#include "log.h"
#include "observe.h"
#include "xmalloc.h"


void
session_log(const struct session *s, int level, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	if ((enum log_level)level < log_min_level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_write((enum log_level)level, "client id=%llu addr=%s: %s", (unsigned long long)s->id,
	    s->peer, msg);
}

struct evbuffer *
session_out(struct session *s)
{
	return conn_output(s->conn);
}

/* Answer the oldest queued loss: "-LOST key fence reason" in place of the
 * command it answers. The loss is then told, and forgotten by the table. */
static void
session_notice(struct session *s)
{
	struct lost_notice *n = STAILQ_FIRST(&s->notices);
	char *esc = codec_word(n->key, n->keylen);
	STAILQ_REMOVE_HEAD(&s->notices, entry);
	codec_reply_error(session_out(s), "LOST", "%s %llu %s", esc,
	    (unsigned long long)n->fence, n->reason);
	free(esc);
	(void)locktab_forget_lost(s->owner, n->key, n->keylen, n->fence);
	free(n->key);
	free(n->reason);
	free(n);
}

/* Forget the losses queued for s (it is going). */
static void
session_clear_notices(struct session *s)
{
	struct lost_notice *n;
	while ((n = STAILQ_FIRST(&s->notices)) != NULL) {
		STAILQ_REMOVE_HEAD(&s->notices, entry);
		free(n->key);
		free(n->reason);
		free(n);
	}
}

/* Close s at once, its unsent replies dropped: a peer that breaks a rule
 * of the guard or of limits.max_output_bytes. Safe inside any callback. */
static void
session_drop(struct session *s, const char *reason)
{
	s->closing = true;
	s->close_reason = reason;
	conn_abort(s->conn);
}

/* The earliest deadline of the guard's timeouts (UINT64_MAX: none): the
 * login timeout while AUTH is wanted, the output timeout while reading is
 * paused for unread replies, else the request timeout while a request is
 * unfinished and the session reads. */
static uint64_t
guard_deadline(const struct session *s)
{
	const struct conf *conf = s->hub->conf;
	uint64_t when = UINT64_MAX, t = UINT64_MAX;

	if (!s->authed)
		when = s->created_ms + (uint64_t)conf->login_timeout_ms;
	if (s->throttled)
		t = s->throttled_ms + (uint64_t)conf->output_timeout_ms;
	else if (s->frame_since_ms != 0 && !s->pending)
		t = s->frame_since_ms + (uint64_t)conf->request_timeout_ms;
	return t < when ? t : when;
}

static void on_guard(evutil_socket_t fd, short what, void *arg);

/* Have ev_guard fire by the guard's deadline. The timer moves lazily: a
 * later deadline waits for it to fire and look again. */
static void
guard_arm(struct session *s)
{
	uint64_t when = guard_deadline(s), now;
	struct timeval tv;

	if (when == UINT64_MAX || (s->guard_at != 0 && s->guard_at <= when))
		return;
	if (s->ev_guard == NULL)
		s->ev_guard = evtimer_new(s->hub->base, on_guard, s);
	now = clock_ms();
	s->guard_at = when;
	tv = clock_tv(when > now ? when - now : 0);
	evtimer_add(s->ev_guard, &tv);
}

/* A peer may not take forever: to authenticate (sessions.login_timeout_ms),
 * to finish a request it began (sessions.request_timeout_ms), or to read
 * the replies it asked for (sessions.output_timeout_ms). Each closes the
 * connection at once, which releases the session's locks. */
static void
on_guard(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	const struct conf *conf = s->hub->conf;
	uint64_t now = clock_ms();
	(void)fd;
	(void)what;

	s->guard_at = 0;
	if (s->closing)
		return;
	if (!s->authed && now - s->created_ms >= (uint64_t)conf->login_timeout_ms) {
		s->hub->counters.login_timeouts_total++;
		session_log(s, LOG_LEVEL_INFO, "no AUTH within %lld ms "
		    "(sessions.login_timeout_ms): closing", conf->login_timeout_ms);
		session_drop(s, "login timeout");
	} else if (s->throttled && now - s->throttled_ms >= (uint64_t)conf->output_timeout_ms) {
		s->hub->counters.output_drops_total++;
		session_log(s, LOG_LEVEL_WARN, "%zu bytes of replies unread for %lld ms "
		    "(sessions.output_timeout_ms): closing", evbuffer_get_length(session_out(s)),
		    conf->output_timeout_ms);
		session_drop(s, "output timeout");
	} else if (!s->throttled && !s->pending && s->frame_since_ms != 0 &&
	    now - s->frame_since_ms >= (uint64_t)conf->request_timeout_ms) {
		s->hub->counters.request_timeouts_total++;
		session_log(s, LOG_LEVEL_INFO, "request unfinished for %llu ms "
		    "(sessions.request_timeout_ms): closing",
		    (unsigned long long)(now - s->frame_since_ms));
		session_drop(s, "request timeout");
	} else {
		guard_arm(s);
	}
}

/* limits.max_output_bytes: a session whose unsent replies pass it is
 * closed at once (reading pauses well before, at SESSION_OUTPUT_HIGH: only
 * one huge reply or pushes it takes no notice of get there). Whether it was. */
static bool
session_output_check(struct session *s)
{
	size_t len = evbuffer_get_length(session_out(s));

	if (len <= (size_t)s->hub->conf->max_output_bytes || s->closing)
		return false;
	s->hub->counters.output_drops_total++;
	session_log(s, LOG_LEVEL_WARN, "%zu bytes of replies unsent "
	    "(limits.max_output_bytes is %lld): closing", len, s->hub->conf->max_output_bytes);
	session_drop(s, "output limit");
	return true;
}

/* Run the buffered requests until one waits, input runs out or the session
 * is closing. */
static void
session_run(struct session *s)
{
	while (!s->pending && !s->closing) {
		struct codec_frame f;
		if (evbuffer_get_length(session_out(s)) >= SESSION_OUTPUT_HIGH) {
			conn_flush(s->conn);
			/* a peer that sends without reading: stop taking its
			 * requests until it has read what it was sent */
			if (evbuffer_get_length(session_out(s)) >= SESSION_OUTPUT_HIGH) {
				s->throttled = true;
				s->throttled_ms = clock_ms();
				conn_read_enable(s->conn, 0);
				guard_arm(s);
				break;
			}
		}
		enum codec_status st = codec_next(s->codec, &f);
		if (st == CODEC_MORE) {
			/* the time a request may take starts when part of it is seen */
			if (codec_buffered(s->codec) == 0) {
				s->frame_since_ms = 0;
			} else if (s->frame_since_ms == 0) {
				s->frame_since_ms = clock_ms();
				guard_arm(s);
			}
			break;
		}
		if (st == CODEC_ERROR) {
			s->hub->counters.protocol_errors_total++;
			session_log(s, LOG_LEVEL_INFO, "%s", codec_error(s->codec));
			codec_reply_error(session_out(s), "ERR", "%s", codec_error(s->codec));
			s->closing = true;
			s->close_reason = "protocol error";
			break;
		}
		s->hub->counters.commands_total++;
		if (!STAILQ_EMPTY(&s->notices)) {
			session_notice(s);	/* in place of this command */
			continue;
		}
		s->frame_since_ms = 0;
		s->hub->dispatch(s, &f);
		if (session_output_check(s))
			return;
	}
	/* the replies of this turn leave together */
	if (s->closing)
		conn_close(s->conn);
	else
		conn_flush(s->conn);
}

static void
on_resume(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	(void)fd;
	(void)what;
	/* a loss while a LOCK waits in a queue, or an OBSERVE for a change:
	 * withdraw it, and the loss is its answer */
	if (s->pending && !s->lost_push && !STAILQ_EMPTY(&s->notices) &&
	    ((s->waiting_lock && locktab_owner_cancel(s->owner) > 0) ||
	    (s->waiting_observe && obs_client_cancel(s->observer) > 0))) {
		session_abort_fn *abort = s->abort;
		s->pending = false;
		s->waiting_lock = false;
		s->waiting_observe = false;
		s->abort = NULL;
		s->last_active_ms = clock_ms();
		if (abort != NULL)
			abort(s->abort_arg, false);
		if (!s->closing)
			session_notice(s);
	}
	session_run(s);
}

void
session_wait(struct session *s, enum session_wait how)
{
	s->pending = true;
	s->waiting_lock = how == SESSION_WAIT_LOCK;
	s->waiting_observe = how == SESSION_WAIT_OBSERVE;
}

/* fn(arg) ends the waiting command if the session goes before it
 * completes (session.h). */
void
session_wait_abort(struct session *s, session_abort_fn *fn, void *arg)
{
	s->abort = fn;
	s->abort_arg = arg;
}

/* The waiting command's reply is written. With no request buffered behind
 * it, the reply leaves now; else the loop runs the session on (never from
 * here, inside a lock-table callback). */
void
session_resume(struct session *s)
{
	s->pending = false;
	s->abort = NULL;
	s->waiting_lock = false;
	s->waiting_observe = false;
	s->last_active_ms = clock_ms();
	if (session_output_check(s))
		return;
	if (codec_buffered(s->codec) == 0 && !s->closing)
		conn_flush(s->conn);
	else
		event_active(s->ev_resume, EV_TIMEOUT, 0);
}

void
session_pushed(struct session *s)
{
	if (!session_output_check(s))
		conn_flush(s->conn);
}

void
session_close_after_reply(struct session *s, const char *reason)
{
	s->closing = true;
	s->close_reason = reason;
}

bool
session_closing(const struct session *s)
{
	return s->closing;
}

void
session_set_proto(struct session *s, int proto)
{
	s->proto = proto;
	if (proto < 3 && (s->lost_push || s->suspend_push)) {
		s->lost_push = false;	/* RESP2 has no pushes */
		s->suspend_push = false;
		session_log(s, LOG_LEVEL_DEBUG, "back to RESP2, pushes off");
	}
}

int
session_set_suspend_push(struct session *s, bool on)
{
	if (on && s->proto < 3)
		return -1;
	s->suspend_push = on;
	return 0;
}

int
session_set_lost_push(struct session *s, bool on)
{
	if (on && s->proto < 3)
		return -1;
	s->lost_push = on;
	return 0;
}

/* Arm the idle timer to fire ms from now. */
static void
idle_arm(struct session *s, uint64_t ms)
{
	struct timeval tv = clock_tv(ms);
	evtimer_add(s->ev_idle, &tv);
}

/* sessions.idle_timeout_ms: a session silent that long is closed, which
 * releases its locks. Time spent waiting for a reply does not count. The
 * timer is moved lazily: input only updates last_active_ms. */
static void
on_idle(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	uint64_t limit = (uint64_t)s->hub->conf->idle_timeout_ms, now = clock_ms();
	(void)fd;
	(void)what;
	if (limit == 0)
		return;		/* turned off by a reload */
	if (s->pending) {
		idle_arm(s, limit);
	} else if (now - s->last_active_ms < limit) {
		idle_arm(s, limit - (now - s->last_active_ms));
	} else if (!s->closing) {
		s->hub->counters.idle_timeouts_total++;
		session_log(s, LOG_LEVEL_INFO, "silent for %llu ms (sessions.idle_timeout_ms): "
		    "closing", (unsigned long long)(now - s->last_active_ms));
		s->closing = true;
		s->close_reason = "idle timeout";
		conn_close(s->conn);
	}
}

/* Move what the socket delivered into the codec and run the requests. */
static void
session_read(struct session *s)
{
	char buf[CONN_READ_MAX];
	size_t n = conn_read(s->conn, buf, sizeof(buf));
	if (n == 0)
		return;	/* nothing yet, or the peer is gone (CONN_GONE follows) */
	s->last_active_ms = clock_ms();
	codec_feed(s->codec, buf, n);
	size_t limit = (size_t)s->hub->conf->max_request_bytes * SESSION_PIPELINE_FRAMES;
	if (limit < SESSION_PIPELINE_MIN)
		limit = SESSION_PIPELINE_MIN;
	if (s->pending && codec_buffered(s->codec) > limit) {
		s->hub->counters.protocol_errors_total++;
		session_log(s, LOG_LEVEL_WARN, "too much input pipelined behind a wait: closing");
		codec_reply_error(session_out(s), "ERR",
		    "Protocol error: too much input pipelined behind a waiting command");
		s->closing = true;
		s->close_reason = "protocol error";
		conn_close(s->conn);
		return;
	}
	session_run(s);
}

static void
on_conn(void *arg, enum conn_event ev)
{
	struct session *s = arg;
	switch (ev) {
	case CONN_READ:
		session_read(s);
		break;
	case CONN_WRITTEN:
		if (s->throttled) {
			s->throttled = false;
			conn_read_enable(s->conn, 1);
			session_run(s);
		}
		break;
	case CONN_GONE:
		session_destroy(s);
		break;
	}
}

/* The lock table lost a holding of s: queue it for the reply to the next
 * command (withdrawing a waiting LOCK from the loop when s takes no
 * pushes), and push it at once to a session that asked for pushes. Called
 * from inside the table: nothing here calls back into it. */
static void
on_lost(void *arg, const char *key, size_t keylen, uint64_t fence, const char *reason)
{
	struct session *s = arg;
	struct lost_notice *n = xcalloc(1, sizeof(*n));
	n->key = xmemdup(key, keylen);
	n->keylen = keylen;
	n->reason = xstrdup(reason);
	n->fence = fence;
	STAILQ_INSERT_TAIL(&s->notices, n, entry);
	if (s->lost_push && !s->closing) {
		struct evbuffer *out = session_out(s);
		codec_reply_push(out, 4, 3);
		codec_reply_cstr(out, "lost");
		codec_reply_bulk(out, key, keylen);
		codec_reply_int(out, (long long)fence);
		codec_reply_cstr(out, reason);
		session_pushed(s);
		return;
	}
	if (s->pending && (s->waiting_lock || s->waiting_observe))
		event_active(s->ev_resume, EV_TIMEOUT, 0);
}

/* The renewals of a holding of s fail (suspended) or succeed again
 * (resumed): pushed to a session that asked (CLIENT SUSPENDPUSH ON), else
 * seen in STATUS only. Called from inside the table. */
static void
on_suspend(void *arg, const char *key, size_t keylen, uint64_t fence, int suspended,
    const char *reason)
{
	struct session *s = arg;
	if (!s->suspend_push || s->closing)
		return;
	struct evbuffer *out = session_out(s);
	codec_reply_push(out, suspended ? 4 : 3, 3);
	codec_reply_cstr(out, suspended ? "suspended" : "resumed");
	codec_reply_bulk(out, key, keylen);
	codec_reply_int(out, (long long)fence);
	if (suspended)
		codec_reply_cstr(out, reason);
	session_pushed(s);
}

/*
 * Learn who is at the other end of fd: the local address, and for a Unix
 * socket the peer's uid, gid and supplementary groups, which admin rights
 * are decided on (session_is_admin). Non-blocking calls on the socket only.
 */
static void
session_peer(struct session *s, evutil_socket_t fd)
{
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);
	struct ucred cred;
	socklen_t clen = sizeof(cred);

	if (getsockname(fd, (struct sockaddr *)&ss, &sslen) != 0)
		return;
	listener_sockaddr_name((struct sockaddr *)&ss, sslen, s->laddr, sizeof(s->laddr));
	if (ss.ss_family != AF_UNIX)
		return;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0) {
		session_log(s, LOG_LEVEL_WARN, "cannot learn the peer's credentials: %s",
		    strerror(errno));
		return;
	}
	s->peer_cred = true;
	s->uid = cred.uid;
	s->gid = cred.gid;
	/* the kernel says how much room the groups need when there is too little */
	socklen_t glen = 16 * sizeof(gid_t);
	for (int tries = 0; tries < 3; tries++) {
		s->groups = xreallocarray(s->groups, glen / sizeof(gid_t) + 1, sizeof(gid_t));
		socklen_t got = glen;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, s->groups, &got) == 0) {
			s->ngroups = got / sizeof(gid_t);
			return;
		}
		if (errno != ERANGE || got <= glen) {
			session_log(s, LOG_LEVEL_DEBUG, "no supplementary groups of the peer: %s",
			    strerror(errno));
			return;
		}
		glen = got;
	}
}

struct session *
session_find(struct session_hub *hub, uint64_t id)
{
	struct hashtab_node *n = hashtab_find(hub->ids, &id, sizeof(id));
	return n != NULL ? (struct session *)(void *)((char *)n -
	    offsetof(struct session, hnode)) : NULL;
}

size_t
session_describe(void *arg, uint64_t id, uint64_t ttl_ms, int detached, char *buf, size_t len)
{
	struct session_hub *hub = arg;
	struct session *s = session_find(hub, id);
	return who_format(buf, len, &hub->daemon, id, s != NULL ? s->name : NULL,
	    s != NULL ? s->peer : NULL, who_wall_ms(), ttl_ms, detached);
}

bool
session_is_admin(const struct session *s)
{
	long long gid = s->hub->conf->admin_gid;
	if (s->admin)
		return true;
	if (!s->peer_cred)
		return false;
	if (s->uid == 0)
		return true;
	if (gid == CONF_UNSET)
		return false;
	if ((long long)s->gid == gid)
		return true;
	for (size_t i = 0; i < s->ngroups; i++)
		if ((long long)s->groups[i] == gid)
			return true;
	return false;
}

void
session_kill(struct session *s, const char *who)
{
	session_log(s, LOG_LEVEL_INFO, "killed by %s", who);
	session_destroy(s);
}

void
session_hub_init(struct session_hub *hub, struct event_base *base, const struct conf *conf,
    struct backend *be, struct locktab *lt, session_dispatch_fn *dispatch, uint64_t started_ms)
{
	*hub = (struct session_hub){ .base = base, .conf = conf, .be = be, .lt = lt,
	    .dispatch = dispatch, .started_ms = started_ms, .ids = hashtab_create(64),
	    .obs = obs_create(base, lt, be) };
	TAILQ_INIT(&hub->all);
	who_daemon_init(&hub->daemon, NULL);
	locktab_set_describe(lt, session_describe, hub);
}

void
session_hub_close_all(struct session_hub *hub, const char *reason)
{
	struct session *s;

	while ((s = TAILQ_FIRST(&hub->all)) != NULL) {
		s->close_reason = reason;
		session_destroy(s);
	}
}

void
session_hub_fini(struct session_hub *hub)
{
	obs_destroy(hub->obs);
	hashtab_destroy(hub->ids);
	hub->ids = NULL;
}

void
session_accept(struct session_hub *hub, evutil_socket_t fd, const char *peer,
    const struct tls *tls)
{
	static const char full[] = "-LIMIT max number of clients reached\r\n";
	const struct conf *conf = hub->conf;
	if (hub->count >= (uint64_t)conf->max_clients) {
		hub->counters.rejected_connections++;
		log_warn("refusing %s: max_clients (%lld) reached", peer, conf->max_clients);
		/* best effort: the socket is fresh, its buffer has room */
		if (tls == NULL && send(fd, full, sizeof(full) - 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
			log_debug("could not tell %s why", peer);
		evutil_closesocket(fd);
		return;
	}
	struct session *s = xcalloc(1, sizeof(*s));
	s->hub = hub;
	s->id = ++hub->next_id;
	snprintf(s->peer, sizeof(s->peer), "%s", peer);
	s->created_ms = clock_ms();
	session_peer(s, fd);
	s->proto = 2;
	s->authed = conf->password == NULL;
	STAILQ_INIT(&s->notices);
	s->last_active_ms = s->created_ms;
	s->codec = codec_create((size_t)conf->max_request_bytes, SESSION_MAX_ARGS);
	s->owner = locktab_owner_create(hub->lt, s->id, on_lost, s);
	locktab_owner_on_suspend(s->owner, on_suspend);
	s->ev_resume = event_new(hub->base, -1, 0, on_resume, s);
	s->tls = tls != NULL;
	s->conn = tls != NULL ? conn_create_tls(hub->base, fd, tls, s->peer, on_conn, s) :
	    conn_create(hub->base, fd, on_conn, s);
	conn_set_linger(s->conn, (unsigned)conf->output_timeout_ms);
	if (conf->idle_timeout_ms > 0) {
		s->ev_idle = evtimer_new(hub->base, on_idle, s);
		idle_arm(s, (uint64_t)conf->idle_timeout_ms);
	}
	guard_arm(s);	/* the login timeout, when a password is wanted */
	TAILQ_INSERT_TAIL(&hub->all, s, entry);
	hashtab_insert(hub->ids, &s->hnode, &s->id, sizeof(s->id));
	hub->count++;
	hub->counters.total_connections++;
	log_info("connect id=%llu addr=%s%s", (unsigned long long)s->id, s->peer,
	    s->tls ? " tls" : "");
}

/* The configuration changed in place (a reload). With no password any
 * more, the session is let in. sessions.idle_timeout_ms may have changed:
 * start, stop or move the idle timer; a session counts as active from the
 * moment the timeout is turned on. */
void
session_reconfigure(struct session *s)
{
	uint64_t limit = (uint64_t)s->hub->conf->idle_timeout_ms;

	if (s->hub->conf->password == NULL)
		s->authed = true;	/* no password any more: nothing to wait for */
	guard_arm(s);		/* a timeout may have become shorter */
	if (limit == 0) {
		if (s->ev_idle != NULL)
			evtimer_del(s->ev_idle);
		return;
	}
	if (s->ev_idle == NULL) {
		s->ev_idle = evtimer_new(s->hub->base, on_idle, s);
		s->last_active_ms = clock_ms();
	}
	idle_arm(s, 0);		/* on_idle measures with the new limit */
}

void
session_destroy(struct session *s)
{
	log_info("close id=%llu addr=%s reason=\"%s\"", (unsigned long long)s->id, s->peer,
	    s->close_reason != NULL ? s->close_reason : "peer closed");
	TAILQ_REMOVE(&s->hub->all, s, entry);
	hashtab_remove(s->hub->ids, &s->hnode);
	s->hub->count--;
	/* first what calls it back: no OBSERVE answer nor lock callback may
	 * reach this session again */
	obs_client_destroy(s->observer);
	locktab_owner_destroy(s->owner);
	if (s->pending && s->abort != NULL)
		s->abort(s->abort_arg, true);
	conn_destroy(s->conn);
	codec_destroy(s->codec);
	event_free(s->ev_resume);
	if (s->ev_idle != NULL)
		event_free(s->ev_idle);
	if (s->ev_guard != NULL)
		event_free(s->ev_guard);
	session_clear_notices(s);
	free(s->name);
	free(s->lib_name);
	free(s->lib_ver);
	free(s->groups);
	free(s);
}
