/*
 * cmd_multi — LOCKALL and UNLOCKALL: several keys at once, all or none.
 *
 * LOCKALL takes its keys one at a time, each as a LOCK with what is left of
 * the WAIT, in the one order every session of every daemon uses: the keys'
 * bytes compared as unsigned, a key before a longer one it begins. A session
 * that waits for a key holds only keys that come before it in that order, so
 * no two sessions can each wait for a key the other holds: a cycle of waits
 * would need a key both before and after another. Each key's queue is LOCK's
 * own FIFO queue: a LOCKALL waits there behind whoever came first, and
 * whoever comes after waits behind it.
 *
 * When a key cannot be had within the WAIT, or fails, the keys taken so far
 * are given back, the answer waiting until the backend has them, and the
 * answer is nil or the error: never a part of the set. A set once granted is
 * a set of ordinary holdings (UNLOCK, EXTEND, losses: per key).
 *
 * Before that, when no key has a holder or a waiter here, every key is
 * tried at once, none waiting (WAIT 0): an uncontended set costs one round
 * trip to the backend, not one per key. A try waits for nothing, so it
 * cannot deadlock; if a key is taken elsewhere the keys had are given back
 * and the keys are taken in order as above.
 *
 * Lock-table callbacks must not call back into the table: a completion is
 * recorded, and the next key is asked for from the event loop.
 */
#include "cmd_int.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "codec.h"
#include "conf.h"
#include "locktab.h"
#include "log.h"
#include "session.h"
#include "xmalloc.h"

#define LOCKALL_SYNTAX "LOCKALL numkeys key [key ...] [TTL ms] [WAIT ms] " \
	"[SHARED | LIMIT n] [DETACH]"

struct multi;

/* One key of a LOCKALL or UNLOCKALL. */
struct multi_key {
	struct multi *m;		/* the command it is one key of */
	const char *name;		/* the key (in m's allocation) */
	size_t len;			/* its length */
	struct lt_grant g;		/* LOCKALL: its grant, once taken */
	bool held;			/* LOCKALL: taken, and not given back */
	enum lt_status st;		/* UNLOCKALL: its outcome */
	long long remaining;		/* UNLOCKALL: the hold count left */
};

/* A LOCKALL or UNLOCKALL under way. */
struct multi {
	struct session *s;		/* whose command */
	bool unlockall;			/* UNLOCKALL, else LOCKALL */
	struct event *ev;		/* LOCKALL: runs the next step from the loop */
	struct lt_lock_req req;		/* LOCKALL: LOCK's options; key per step */
	int64_t wait_ms;		/* the WAIT asked: -1 (for ever), 0 or more */
	uint64_t deadline;		/* its end on the table's clock (wait_ms > 0) */
	size_t n;			/* keys */
	struct multi_key *keys;		/* in the order given */
	struct multi_key **order;	/* the same, in the order they are taken */
	size_t taken;			/* keys of order held so far */
	enum lt_status st;		/* the last LOCK's outcome, to act on */
	bool trying;			/* every key is being tried at once */
	unsigned tries;			/* ... tries the backend has to answer */
	enum lt_status try_err;		/* ... the first error of one, or LT_OK */
	enum lt_status failed;		/* the outcome the answer tells once the
					 * keys taken are given back */
	enum lock_mode held_mode;	/* with LT_E_MODE: the mode held */
	unsigned releasing;		/* releases the backend has still to confirm */
	bool waiting;			/* the session waits for the answer */
};

/* The order keys are taken in: bytes as unsigned, a prefix first. */
static int
key_cmp(const void *a, const void *b)
{
	const struct multi_key *x = *(const struct multi_key *const *)a;
	const struct multi_key *y = *(const struct multi_key *const *)b;
	int r = memcmp(x->name, y->name, x->len < y->len ? x->len : y->len);
	if (r != 0)
		return r;
	return x->len < y->len ? -1 : x->len > y->len;
}

/*
 * Check numkeys (argument 1) and the keys after it; replies and returns
 * NULL when they are wrong. Else a new command of the session with copies
 * of the keys, sorted into its order (the caller's; multi_free frees it).
 */
static struct multi *
multi_new(struct session *s, const struct codec_frame *f, const char *cmd,
    const char *syntax)
{
	struct evbuffer *out = session_out(s);
	long long n;
	size_t bytes = 0;

	if (cmd_arg_int(f, 1, 1, INT32_MAX, &n) != 0) {
		codec_reply_error(out, "ERR", "numkeys must be a number of keys, 1 or more");
		return NULL;
	}
	if (n > s->hub->conf->max_lockall_keys) {
		codec_reply_error(out, "LIMIT", "too many keys in one %s "
		    "(limits.max_lockall_keys is %lld)", cmd, s->hub->conf->max_lockall_keys);
		return NULL;
	}
	if ((size_t)n > f->argc - 2) {
		codec_reply_error(out, "ERR", "syntax error: %s", syntax);
		return NULL;
	}
	for (size_t i = 2; i < 2 + (size_t)n; i++) {
		if (!cmd_key_ok(s, f, i))
			return NULL;
		bytes += f->argvlen[i];
	}

	struct multi *m = xcalloc(1, sizeof(*m) + (size_t)n * (sizeof(struct multi_key) +
	    sizeof(struct multi_key *)) + bytes);
	m->s = s;
	m->n = (size_t)n;
	m->keys = (struct multi_key *)(m + 1);
	m->order = (struct multi_key **)(m->keys + m->n);
	char *p = (char *)(m->order + m->n);
	for (size_t i = 0; i < m->n; i++) {
		struct multi_key *k = &m->keys[i];
		k->m = m;
		k->len = f->argvlen[2 + i];
		memcpy(p, f->argv[2 + i], k->len);
		k->name = p;
		p += k->len;
		m->order[i] = k;
	}
	qsort(m->order, m->n, sizeof(m->order[0]), key_cmp);
	for (size_t i = 1; i < m->n; i++)
		if (key_cmp(&m->order[i - 1], &m->order[i]) == 0) {
			char kb[LOG_KEY_BUF];
			codec_reply_error(out, "ERR", "%s names key '%s' twice", cmd,
			    log_escape(kb, sizeof(kb), m->order[i]->name, m->order[i]->len, 0));
			free(m);
			return NULL;
		}
	return m;
}

static void
multi_free(struct multi *m)
{
	if (m->ev != NULL)
		event_free(m->ev);
	free(m);
}

static void multi_abort(void *arg, bool gone);

/* The session waits for the answer (how), and m ends if it never comes. */
static void
multi_wait(struct multi *m, enum session_wait how)
{
	session_wait(m->s, how);
	session_wait_abort(m->s, multi_abort, m);
	m->waiting = true;
}

/* Write the answer, let the session go on and free m. */
static void
multi_answer(struct multi *m)
{
	struct session *s = m->s;
	struct session_multi_stats *st = &s->hub->multi;
	struct evbuffer *out = session_out(s);
	bool tell = !session_closing(s);

	if (m->unlockall) {
		if (tell)
			codec_reply_array(out, m->n);
		for (size_t i = 0; i < m->n && tell; i++) {
			if (m->keys[i].st == LT_OK)
				codec_reply_int(out, m->keys[i].remaining);
			else
				cmd_reply_lt_error(s, m->keys[i].st, false);
		}
	} else {
		st->lockall_waiting--;
		if (m->failed == LT_OK) {
			st->lockall_granted_total++;
			if (tell)
				codec_reply_array(out, m->n);
			for (size_t i = 0; i < m->n && tell; i++)
				cmd_reply_grant(s, &m->keys[i].g);
		} else if (m->failed == LT_NOT_GRANTED) {
			st->lockall_not_granted_total++;
			if (tell)
				codec_reply_null_array(out, s->proto);
		} else {
			st->lockall_errors_total++;
			if (tell && m->failed == LT_E_MODE)
				codec_reply_error(out, "ERR", "a key is held by this session in "
				    "%s mode; unlock it first", locktab_mode_name(m->held_mode));
			else if (tell)
				cmd_reply_lt_error(s, m->failed, false);
		}
	}
	if (m->waiting)
		session_resume(s);
	multi_free(m);
}

/* A release of a key (a LOCKALL giving back, an UNLOCKALL) is confirmed. */
static void
multi_released(void *arg, enum lt_status st, const struct lt_grant *g, long long value)
{
	struct multi_key *k = arg;
	struct multi *m = k->m;
	(void)g;
	k->st = st;
	k->remaining = value;
	if (--m->releasing == 0)
		multi_answer(m);
}

/* Give back the keys taken so far; done (NULL: nobody) hears of each
 * release the backend has to confirm. Returns how many it has to. */
static unsigned
multi_give_back(struct multi *m, lt_done_cb *done)
{
	unsigned pending = 0;
	long long remaining;
	for (size_t i = m->n; i-- > 0;) {
		struct multi_key *k = m->order[i];
		if (!k->held)
			continue;
		k->held = false;
		/* by token: a DETACH holding is not the session's own */
		if (locktab_unlock(m->s->owner, k->name, k->len, k->g.token, &remaining, done,
		    k) == LT_PENDING)
			pending++;
	}
	m->taken = 0;
	return pending;
}

/* A key could not be had (st): give back the others, then answer. */
static void
multi_fail(struct multi *m, enum lt_status st)
{
	m->failed = st;
	m->releasing = multi_give_back(m, multi_released);
	if (m->releasing == 0)
		multi_answer(m);
	else if (!m->waiting)
		multi_wait(m, SESSION_WAIT_BACKEND);
	else
		session_wait(m->s, SESSION_WAIT_BACKEND);	/* no LOCK waits now */
}

/* Find the holding of fence among a key's holdings: its lease left. */
struct lease_find {
	uint64_t fence;		/* the holding's */
	bool found;		/* it is there */
	int64_t lease_ms;	/* its lease left */
};

static void
lease_find_holder(void *arg, const struct lt_holder_info *h)
{
	struct lease_find *lf = arg;
	if (h->fence == lf->fence) {
		lf->found = true;
		lf->lease_ms = h->lease_ms;
	}
}

/* Every key is taken. A key lost while a later one was awaited (told by a
 * push) makes the set a part: give it all back. Else each grant tells the
 * lease left now, and the set is the answer. */
static void
multi_granted(struct multi *m)
{
	for (size_t i = 0; i < m->n; i++) {
		struct multi_key *k = m->order[i];
		struct lease_find lf = { .fence = k->g.fence };
		locktab_key_walk(m->s->hub->lt, k->name, k->len, lease_find_holder, NULL, &lf);
		if (!lf.found || lf.lease_ms <= 0) {
			multi_fail(m, LT_E_LOST);
			return;
		}
		k->g.ttl_ms = (uint64_t)lf.lease_ms;
	}
	m->failed = LT_OK;
	multi_answer(m);
}

/* What is left of the WAIT now: -1 (for ever) or 0 and more. */
static int64_t
wait_left(const struct multi *m)
{
	if (m->wait_ms <= 0)
		return m->wait_ms;
	uint64_t now = locktab_now(m->s->hub->lt);
	return m->deadline > now ? (int64_t)(m->deadline - now) : 0;
}

static void multi_locked(void *arg, enum lt_status st, const struct lt_grant *g,
    long long value);

/* Take the keys from the next one on, until one has to wait. */
static void
multi_step(struct multi *m)
{
	while (m->taken < m->n) {
		struct multi_key *k = m->order[m->taken];
		m->req.key = k->name;
		m->req.keylen = k->len;
		m->req.wait_ms = wait_left(m);
		enum lt_status st = locktab_lock(m->s->owner, &m->req, &k->g, multi_locked, k);
		if (st == LT_PENDING) {
			if (!m->waiting)
				multi_wait(m, SESSION_WAIT_LOCK);
			return;
		}
		if (st != LT_OK) {
			m->held_mode = k->g.mode;
			multi_fail(m, st);
			return;
		}
		k->held = true;
		m->taken++;
	}
	multi_granted(m);
}

/* Every try is answered: the set, or the error, or (WAIT 0) nil, or the
 * keys in order after giving back those had. */
static void
multi_tried_all(struct multi *m)
{
	size_t held = 0;
	m->trying = false;
	for (size_t i = 0; i < m->n; i++)
		held += m->keys[i].held;
	if (held == m->n)
		multi_granted(m);
	else if (m->try_err != LT_OK && (m->try_err != LT_E_BACKEND || m->wait_ms == 0))
		multi_fail(m, m->try_err);	/* a backend error: the WAIT waits it out */
	else if (m->wait_ms == 0)
		multi_fail(m, LT_NOT_GRANTED);
	else {
		(void)multi_give_back(m, NULL);
		multi_step(m);
	}
}

/* A try is answered: record it; after the last, go on from the loop. */
static void
multi_tried(void *arg, enum lt_status st, const struct lt_grant *g, long long value)
{
	struct multi_key *k = arg;
	struct multi *m = k->m;
	(void)value;
	if (st == LT_OK) {
		k->g = *g;
		k->held = true;
	} else if (st != LT_NOT_GRANTED && m->try_err == LT_OK) {
		m->try_err = st;
	}
	if (--m->tries == 0)
		event_active(m->ev, EV_TIMEOUT, 0);
}

/* Try every key at once with WAIT 0, when none has a holder or a waiter
 * here (a key held here would be refused anyway). Returns false when it
 * does not: the keys are to be taken in order. */
static bool
multi_try(struct multi *m)
{
	struct lt_key_status ks;
	if (m->n < 2)
		return false;
	for (size_t i = 0; i < m->n; i++) {
		locktab_status(m->s->hub->lt, m->keys[i].name, m->keys[i].len, &ks);
		if (ks.holders > 0 || ks.waiters > 0)
			return false;
	}
	m->trying = true;
	m->try_err = LT_OK;
	m->req.wait_ms = 0;
	for (size_t i = 0; i < m->n; i++) {
		struct multi_key *k = m->order[i];
		m->req.key = k->name;
		m->req.keylen = k->len;
		enum lt_status st = locktab_lock(m->s->owner, &m->req, &k->g, multi_tried, k);
		if (st == LT_PENDING) {
			m->tries++;
		} else if (st == LT_OK) {
			k->held = true;
		} else {
			if (st != LT_NOT_GRANTED)
				m->try_err = st;
			m->held_mode = k->g.mode;
			break;	/* the set cannot be had this way: try no more */
		}
	}
	if (m->tries == 0)
		multi_tried_all(m);
	else if (!m->waiting)
		multi_wait(m, SESSION_WAIT_LOCK);
	return true;
}

/* A LOCK that waited is done: record it, and go on from the loop. */
static void
multi_locked(void *arg, enum lt_status st, const struct lt_grant *g, long long value)
{
	struct multi_key *k = arg;
	(void)value;
	if (st == LT_OK) {
		k->g = *g;
		k->held = true;
	}
	k->m->st = st;
	event_active(k->m->ev, EV_TIMEOUT, 0);
}

static void
on_step(evutil_socket_t fd, short what, void *arg)
{
	struct multi *m = arg;
	(void)fd;
	(void)what;
	if (m->trying) {
		multi_tried_all(m);
		return;
	}
	if (m->st != LT_OK) {
		multi_fail(m, m->st);
		return;
	}
	m->taken++;
	multi_step(m);
}

/* The session goes, or its LOCKALL was withdrawn for a loss (which is its
 * answer): give back what was taken, if the session still can, quietly. */
static void
multi_abort(void *arg, bool gone)
{
	struct multi *m = arg;
	if (!gone)
		(void)multi_give_back(m, NULL);
	if (!m->unlockall) {
		m->s->hub->multi.lockall_waiting--;
		if (!gone)	/* answered by the loss */
			m->s->hub->multi.lockall_errors_total++;
	}
	multi_free(m);
}

void
cmd_lockall(struct session *s, const struct codec_frame *f)
{
	struct multi *m = multi_new(s, f, "LOCKALL", LOCKALL_SYNTAX);
	if (m == NULL)
		return;
	m->req = (struct lt_lock_req){ .mode = LOCK_EXCLUSIVE,
	    .ttl_ms = (uint64_t)s->hub->conf->default_ttl_ms, .wait_ms = -1 };
	if (!cmd_lock_options(s, f, 2 + m->n, false, LOCKALL_SYNTAX, &m->req)) {
		multi_free(m);
		return;
	}
	/* the keys not held yet must fit in the session's limit */
	uint64_t more = 0;
	for (size_t i = 0; i < m->n; i++)
		more += locktab_held(s->owner, m->keys[i].name, m->keys[i].len) <= 0;
	if (locktab_owner_holds(s->owner, NULL, NULL) + more >
	    (uint64_t)s->hub->conf->max_locks_per_session) {
		cmd_reply_lt_error(s, LT_E_LOCKS, false);
		multi_free(m);
		return;
	}
	m->wait_ms = m->req.wait_ms;
	if (m->wait_ms > 0)
		m->deadline = locktab_now(s->hub->lt) + (uint64_t)m->wait_ms;
	m->ev = event_new(s->hub->base, -1, 0, on_step, m);
	s->hub->multi.lockall_waiting++;
	if (!multi_try(m))
		multi_step(m);
}

void
cmd_unlockall(struct session *s, const struct codec_frame *f)
{
	struct multi *m = multi_new(s, f, "UNLOCKALL", "UNLOCKALL numkeys key [key ...]");
	if (m == NULL)
		return;
	m->unlockall = true;
	if (f->argc != 2 + m->n) {
		codec_reply_error(session_out(s), "ERR", "syntax error: UNLOCKALL numkeys key "
		    "[key ...]");
		multi_free(m);
		return;
	}
	/* all or nothing: every key must be the session's */
	for (size_t i = 0; i < m->n; i++)
		if (locktab_held(s->owner, m->keys[i].name, m->keys[i].len) == 0) {
			char kb[LOG_KEY_BUF];
			codec_reply_error(session_out(s), "NOTHELD", "key '%s' is not held by "
			    "this session; nothing was unlocked", log_escape(kb, sizeof(kb),
			    m->keys[i].name, m->keys[i].len, 0));
			multi_free(m);
			return;
		}
	for (size_t i = 0; i < m->n; i++) {
		struct multi_key *k = &m->keys[i];
		k->st = locktab_unlock(s->owner, k->name, k->len, NULL, &k->remaining,
		    multi_released, k);
		if (k->st == LT_PENDING)
			m->releasing++;
	}
	if (m->releasing == 0)
		multi_answer(m);
	else
		multi_wait(m, SESSION_WAIT_BACKEND);
}
