/*
 * libdlock — a blocking client for dlockd.
 *
 * It owns its connection, read buffer and queue of lost notices. It must not
 * print, exit, or abort on a failed allocation: every failure is returned to
 * the caller.
 *
 * One dlock_t is one connection. Commands are sent as RESP arrays of bulk
 * strings (keys may hold any byte but NUL) and their replies are read with a
 * small RESP3 reader over a read buffer. The connection speaks RESP3 (HELLO 3
 * at connect) and asks for lost pushes (CLIENT LOSTPUSH ON), so the daemon
 * can push ["lost", key, fence, reason] at any time: pushes that arrive while
 * a reply is awaited are queued for dlock_poll_lost() and never taken for the
 * reply. So are losses told by an error reply "LOST key fence reason".
 *
 * Errors: the daemon's error replies are kept verbatim ("NOTHELD key is not
 * held ..."), their first word being the code. Local failures use the codes
 *   ARG    a bad argument (nothing was sent)
 *   IO     the connection failed or was closed
 *   PROTO  the daemon's reply could not be read or was not what was expected
 *   NOMEM  out of memory
 * Once the connection itself failed (an I/O error, a reply that could not be
 * read, no memory for a reply or a push, a reply overdue) it is dead: every
 * later call fails at once with the same error, and dlock_poll_lost() returns
 * -1. An error reply, or a reply of an unexpected shape, leaves it usable.
 *
 * Time: a call waits for the socket with poll() until a deadline set when it
 * starts (struct deadline), never on a blocking recv() or send(); an overdue
 * reply shuts the socket down (conn_timeout).
 */
#include "dlock.h"
#include "dlock_internal.h"

#include "addr.h"
#include "clock.h"
#include "num.h"

#include <sys/types.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif

#define DLOCK_DEFAULT_ADDR	"127.0.0.1:7480"
#define DLOCK_DEFAULT_PORT	7480
#define DLOCK_CONNECT_TIMEOUT_MS 10000	/* per address tried */
#define DLOCK_CALL_TIMEOUT_MS	10000	/* default wait for a reply, the handshake's too */
#define DLOCK_FOREVER_MS	(LLONG_MAX / 4)	/* a wait this long never ends */

/* TCP keepalive: a vanished daemon host is noticed after about 30 s. */
#define DLOCK_KEEPIDLE_S	15	/* silence before the first probe */
#define DLOCK_KEEPINTVL_S	5	/* between probes */
#define DLOCK_KEEPCNT		3	/* probes unanswered before the connection fails */
#define DLOCK_USER_TIMEOUT_MS	30000	/* sent data unacknowledged this long fails it */

#define RESP_MAX_DEPTH		32		/* nesting of aggregates */
#define RESP_MAX_LINE		(64 * 1024)	/* a header or simple line */
#define RESP_MAX_BULK		(16 * 1024 * 1024) /* one bulk string */
#define RESP_MAX_ELEMS		(1024 * 1024)	/* elements of one aggregate */
#define RBUF_MIN		16384		/* initial read buffer */
#define RBUF_MAX		(RESP_MAX_BULK + RESP_MAX_LINE) /* read buffer bound */

/* State of one parse attempt over the bytes buffered so far. */
struct parser {
	const char *buf;	/* unparsed bytes */
	size_t len;		/* how many */
	size_t pos;		/* bytes consumed by this attempt */
	int nomem;		/* 1 if the failure was out of memory */
	char why[128];		/* what was wrong, on a parse error */
};

enum {
	PARSE_ERROR = -1,	/* malformed input or out of memory: see why/nomem */
	PARSE_MORE = 0,		/* the buffer does not hold a whole value yet */
	PARSE_OK = 1		/* a value was parsed */
};

/* A queued "lost" push, or "suspended" or "resumed" push. */
struct lost {
	struct lost *next;	/* next queued, or NULL */
	char *key;		/* the key (NUL-terminated copy) */
	size_t keylen;		/* its length */
	long long fence;	/* the fence of the lost holding */
	int suspended;		/* a state push: 1 suspended, 0 resumed */
};

/* How long one call may wait for the socket. */
struct deadline {
	long long at;		/* CLOCK_MONOTONIC ms to give up at; -1: never */
	long long ms;		/* the whole wait it stands for (for the message) */
};

/* A connection to dlockd. */
struct dlock {
	int fd;			/* the socket */
	int dead;		/* 1 once the connection failed: every call fails */
	long long timeout_ms;	/* how long a call waits for its reply; 0: forever */
	char *rbuf;		/* read buffer */
	size_t rcap;		/* its size */
	size_t rlen;		/* bytes held in it */
	size_t rpos;		/* bytes of it already consumed */
	char *wbuf;		/* buffer a command is formatted in */
	size_t wcap;		/* its size */
	struct lost *lost_head;	/* queued "lost" pushes, oldest first */
	struct lost **lost_tail; /* where the next one goes */
	struct lost *state_head; /* queued "suspended" and "resumed" pushes */
	struct lost **state_tail; /* where the next one goes */
	unsigned long notices_due; /* losses pushed whose "LOST" reply (in place
				 * of the next command's) is still to come */
	char code[32];		/* code word of the last error, or "" */
	char err[512];		/* text of the last error, or "" */
	char dead_code[32];	/* code of the failure that killed the connection */
	char dead_err[512];	/* its text */
	int dead_errno;		/* and the errno that stands for it */
};

static int resp_parse(struct parser *p, int depth, struct resp **out);

/* ---- errors ---- */

/* Forget the last error (at the start of every call). */
static void
err_clear(dlock_t *d)
{
	d->code[0] = '\0';
	d->err[0] = '\0';
}

/* See dlock_internal.h. */
void
dlock_err_set(dlock_t *d, const char *code, const char *fmt, ...)
{
	va_list ap;

	snprintf(d->code, sizeof(d->code), "%s", code);
	va_start(ap, fmt);
	vsnprintf(d->err, sizeof(d->err), fmt, ap);
	va_end(ap);
}

/*
 * Record a failure that leaves the connection unusable: later calls repeat
 * it. errnum is the errno that stands for it. Always returns -1.
 */
static int __attribute__((format(printf, 4, 5)))
err_dead(dlock_t *d, int errnum, const char *code, const char *fmt, ...)
{
	va_list ap;

	snprintf(d->code, sizeof(d->code), "%s", code);
	va_start(ap, fmt);
	vsnprintf(d->err, sizeof(d->err), fmt, ap);
	va_end(ap);
	if (!d->dead) {
		d->dead = 1;
		memcpy(d->dead_code, d->code, sizeof(d->dead_code));
		memcpy(d->dead_err, d->err, sizeof(d->dead_err));
		d->dead_errno = errnum;
	}
	errno = d->dead_errno;
	return -1;
}

/* Repeat the failure that killed the connection. Returns -1. */
static int
err_repeat_dead(dlock_t *d)
{
	memcpy(d->code, d->dead_code, sizeof(d->code));
	memcpy(d->err, d->dead_err, sizeof(d->err));
	errno = d->dead_errno;
	return -1;
}

/*
 * Record an error reply of the daemon: the text as sent (control bytes
 * replaced by spaces), its first word as the code.
 */
static void
err_reply(dlock_t *d, const struct resp *v)
{
	size_t n = v->len < sizeof(d->err) - 1 ? v->len : sizeof(d->err) - 1;
	size_t c = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)v->str[i];
		d->err[i] = (ch < 0x20 || ch == 0x7f) ? ' ' : (char)ch;
	}
	d->err[n] = '\0';
	while (c < n && c < sizeof(d->code) - 1 && d->err[c] != ' ')
		c++;
	memcpy(d->code, d->err, c);
	d->code[c] = '\0';
	if (n == 0)
		snprintf(d->err, sizeof(d->err), "ERR empty error reply");
	if (c == 0)
		snprintf(d->code, sizeof(d->code), "ERR");
}

/* ---- RESP3 reader ---- */

/* Record a parse error. Returns PARSE_ERROR. */
static int __attribute__((format(printf, 2, 3)))
parse_fail(struct parser *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->why, sizeof(p->why), fmt, ap);
	va_end(ap);
	return PARSE_ERROR;
}

/* Record running out of memory. Returns PARSE_ERROR. */
static int
parse_nomem(struct parser *p)
{
	p->nomem = 1;
	return parse_fail(p, "out of memory");
}

/*
 * The line at p->pos, up to CRLF: sets *line (not NUL-terminated) and
 * *linelen and moves past the CRLF.
 */
static int
parse_line(struct parser *p, const char **line, size_t *linelen)
{
	const char *start = p->buf + p->pos;
	size_t avail = p->len - p->pos;
	const char *nl = memchr(start, '\n', avail);

	if (nl == NULL)
		return avail > RESP_MAX_LINE ? parse_fail(p, "line too long") : PARSE_MORE;
	if (nl == start || nl[-1] != '\r')
		return parse_fail(p, "line not ended by CRLF");
	*line = start;
	*linelen = (size_t)(nl - start) - 1;
	p->pos += (size_t)(nl - start) + 1;
	return PARSE_OK;
}

/* A new value of type t, or NULL when out of memory. */
static struct resp *
resp_new(enum resp_type t)
{
	struct resp *v = calloc(1, sizeof(*v));

	if (v != NULL)
		v->type = t;
	return v;
}

/* See dlock_internal.h. */
void
dlock_resp_free(struct resp *v)
{
	if (v == NULL)
		return;
	for (size_t i = 0; i < v->n; i++)
		dlock_resp_free(v->elem[i]);
	free(v->elem);
	free(v->str);
	free(v);
}

/* *out = a new value of type t: PARSE_OK, or the out-of-memory error. */
static int
resp_put(struct parser *p, enum resp_type t, struct resp **out)
{
	return (*out = resp_new(t)) != NULL ? PARSE_OK : parse_nomem(p);
}

/* A string value of type t holding a copy of s[0..len). */
static int
resp_string(struct parser *p, enum resp_type t, const char *s, size_t len,
    struct resp **out)
{
	struct resp *v = resp_new(t);

	if (v == NULL || (v->str = malloc(len + 1)) == NULL) {
		free(v);
		return parse_nomem(p);
	}
	memcpy(v->str, s, len);
	v->str[len] = '\0';
	v->len = len;
	*out = v;
	return PARSE_OK;
}

/*
 * The payload of a $, = or ! value whose length line has been read: len
 * bytes and CRLF.
 */
static int
parse_blob(struct parser *p, char t, long long len, struct resp **out)
{
	enum resp_type type = t == '!' ? RESP_ERROR : RESP_BULK;
	const char *s;
	size_t n;

	if (len < 0 || len > RESP_MAX_BULK)
		return parse_fail(p, "bad string length %lld", len);
	n = (size_t)len;
	if (p->len - p->pos < n + 2)
		return PARSE_MORE;
	s = p->buf + p->pos;
	if (s[n] != '\r' || s[n + 1] != '\n')
		return parse_fail(p, "string not ended by CRLF");
	p->pos += n + 2;
	if (t == '=') {
		/* Verbatim string: "txt:" or "mkd:" and the text. */
		if (n < 4 || s[3] != ':')
			return parse_fail(p, "bad verbatim string");
		s += 4;
		n -= 4;
	}
	return resp_string(p, type, s, n, out);
}

/* The elements of an aggregate of type t whose count line has been read. */
static int
parse_aggregate(struct parser *p, enum resp_type t, long long count,
    int depth, struct resp **out)
{
	struct resp *v;
	size_t n;
	int r;

	if (count < 0 || count > RESP_MAX_ELEMS)
		return parse_fail(p, "bad aggregate length %lld", count);
	n = (size_t)count * (t == RESP_MAP ? 2 : 1);
	/* Every element takes at least 3 bytes: wait for them before allocating. */
	if (n > (p->len - p->pos) / 3)
		return PARSE_MORE;
	if ((v = resp_new(t)) == NULL)
		return parse_nomem(p);
	if (n > 0 && (v->elem = calloc(n, sizeof(*v->elem))) == NULL) {
		free(v);
		return parse_nomem(p);
	}
	for (size_t i = 0; i < n; i++) {
		r = resp_parse(p, depth + 1, &v->elem[i]);
		if (r != PARSE_OK) {
			v->n = i;
			dlock_resp_free(v);
			return r;
		}
	}
	v->n = n;
	*out = v;
	return PARSE_OK;
}

/*
 * Parse one value at p->pos. PARSE_OK sets *out (the caller frees it with
 * resp_free); PARSE_MORE and PARSE_ERROR leave nothing to free. Attributes
 * (|) are read and dropped: the value after them is returned.
 */
static int
resp_parse(struct parser *p, int depth, struct resp **out)
{
	const char *line = NULL;
	size_t linelen = 0;
	long long n;
	char t;
	int r, blob;

	if (depth > RESP_MAX_DEPTH)
		return parse_fail(p, "nesting too deep");
	if (p->pos >= p->len)
		return PARSE_MORE;
	t = p->buf[p->pos++];
	if ((r = parse_line(p, &line, &linelen)) != PARSE_OK)
		return r;
	switch (t) {
	case '+':
		return resp_string(p, RESP_SIMPLE, line, linelen, out);
	case '-':
		return resp_string(p, RESP_ERROR, line, linelen, out);
	case ',':
		return resp_string(p, RESP_DOUBLE, line, linelen, out);
	case '(':
		return resp_string(p, RESP_BIGNUM, line, linelen, out);
	case ':':
		if (num_parse(line, linelen, LLONG_MIN, LLONG_MAX, &n) != NUM_OK)
			return parse_fail(p, "bad integer");
		if ((r = resp_put(p, RESP_INT, out)) == PARSE_OK)
			(*out)->integer = n;
		return r;
	case '#':
		if (linelen != 1 || (line[0] != 't' && line[0] != 'f'))
			return parse_fail(p, "bad boolean");
		if ((r = resp_put(p, RESP_BOOL, out)) == PARSE_OK)
			(*out)->integer = line[0] == 't';
		return r;
	case '_':
		if (linelen != 0)
			return parse_fail(p, "bad null");
		return resp_put(p, RESP_NULL, out);
	case '$':
	case '=':
	case '!':
	case '*':
	case '%':
	case '~':
	case '>':
	case '|':
		blob = t == '$' || t == '=' || t == '!';
		if (linelen == 1 && line[0] == '?')
			return parse_fail(p, "streamed %s are not supported",
			    blob ? "strings" : "aggregates");
		if (num_parse(line, linelen, LLONG_MIN, LLONG_MAX, &n) != NUM_OK)
			return parse_fail(p, "bad %s length", blob ? "string" : "aggregate");
		if (n == -1 && (t == '$' || t == '*'))
			return resp_put(p, RESP_NULL, out);
		if (blob)
			return parse_blob(p, t, n, out);
		if (t == '|') {
			struct resp *attr = NULL;

			if ((r = parse_aggregate(p, RESP_MAP, n, depth, &attr)) != PARSE_OK)
				return r;
			dlock_resp_free(attr);
			return resp_parse(p, depth + 1, out);
		}
		return parse_aggregate(p,
		    t == '*' ? RESP_ARRAY : t == '%' ? RESP_MAP :
		    t == '~' ? RESP_SET : RESP_PUSH, n, depth, out);
	default:
		return parse_fail(p, "unknown type byte 0x%02x",
		    (unsigned)(unsigned char)t);
	}
}

/* 1 if v is a string kind whose text equals s, ignoring case. */
static int
resp_is(const struct resp *v, const char *s)
{
	if (v == NULL || (v->type != RESP_SIMPLE && v->type != RESP_BULK))
		return 0;
	return strlen(s) == v->len && strncasecmp(v->str, s, v->len) == 0;
}

/* ---- connection I/O ---- */

/*
 * The deadline of a call that starts now: d's timeout, plus wait_ms, how
 * long the daemon may hold the reply back on purpose (a LOCK's WAIT; -1:
 * for ever, and so the call has no deadline).
 */
static struct deadline
deadline_start(const dlock_t *d, long long wait_ms)
{
	struct deadline dl = { -1, 0 };

	if (wait_ms < 0 || d->timeout_ms == 0 || wait_ms >= DLOCK_FOREVER_MS ||
	    d->timeout_ms >= DLOCK_FOREVER_MS - wait_ms)
		return dl;
	dl.ms = wait_ms + d->timeout_ms;
	dl.at = (long long)clock_ms() + dl.ms;
	return dl;
}

/*
 * The daemon did not answer in time: shut the socket down, so that the
 * daemon sees the session end (and releases its locks) and a late reply
 * cannot be taken for the answer to a later command. Returns -1 (dead).
 */
static int
conn_timeout(dlock_t *d, long long ms)
{
	(void)shutdown(d->fd, SHUT_RDWR);
	return err_dead(d, ETIMEDOUT, "IO", "dlockd did not answer within %lld ms", ms);
}

/*
 * Wait until d's socket is ready for events (POLLIN or POLLOUT) or the
 * deadline passes. 0 ready (or failed: the next read or write says how), -1
 * (dead: the deadline passed, or poll failed).
 */
static int
conn_wait(dlock_t *d, short events, const struct deadline *dl)
{
	for (;;) {
		struct pollfd pfd = { .fd = d->fd, .events = events };
		long long left = -1;
		int r;

		if (dl->at >= 0 && (left = dl->at - (long long)clock_ms()) <= 0)
			return conn_timeout(d, dl->ms);
		r = poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int)left);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return err_dead(d, errno, "IO", "cannot wait for dlockd: %s",
			    strerror(errno));
	}
}

/*
 * Read more bytes into the read buffer, waiting until dl at most (NULL: not
 * at all). Returns 1 when bytes were read, 0 when none were ready (dl NULL
 * only), -1 when the connection failed, closed or timed out (the error is
 * set and the connection dead).
 */
static int
conn_fill(dlock_t *d, const struct deadline *dl)
{
	ssize_t n;

	if (d->rpos > 0) {
		memmove(d->rbuf, d->rbuf + d->rpos, d->rlen - d->rpos);
		d->rlen -= d->rpos;
		d->rpos = 0;
	}
	if (d->rcap - d->rlen < RBUF_MIN / 4) {
		size_t cap = d->rcap * 2;
		char *p;

		if (cap > RBUF_MAX)
			return err_dead(d, EPROTO, "PROTO", "reply from dlockd is too large");
		if ((p = realloc(d->rbuf, cap)) == NULL)
			return err_dead(d, ENOMEM, "NOMEM", "out of memory");
		d->rbuf = p;
		d->rcap = cap;
	}
	for (;;) {
		n = recv(d->fd, d->rbuf + d->rlen, d->rcap - d->rlen, MSG_DONTWAIT);
		if (n > 0) {
			d->rlen += (size_t)n;
			return 1;
		}
		if (n == 0)
			return err_dead(d, ECONNRESET, "IO", "connection closed by dlockd");
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			if (dl == NULL)
				return 0;
			if (conn_wait(d, POLLIN, dl) < 0)
				return -1;
			continue;
		}
		if (errno == ECONNRESET)
			return err_dead(d, ECONNRESET, "IO", "connection closed by dlockd");
		return err_dead(d, errno, "IO", "cannot read from dlockd: %s",
		    strerror(errno));
	}
}

/*
 * Queue the loss of key (keylen bytes) with fence for dlock_poll_lost(). 0,
 * or -1 (dead: losing track of a lost lock is not an option).
 */
static int notice_add(dlock_t *d, struct lost ***tail, const char *key, size_t keylen,
    long long fence, int suspended);

static int
lost_add(dlock_t *d, const char *key, size_t keylen, long long fence)
{
	return notice_add(d, &d->lost_tail, key, keylen, fence, 0);
}

/* Queue a notice of key (keylen bytes) with fence at *tail. 0, or -1
 * (dead). */
static int
notice_add(dlock_t *d, struct lost ***tail, const char *key, size_t keylen,
    long long fence, int suspended)
{
	struct lost *l;

	if ((l = calloc(1, sizeof(*l))) == NULL ||
	    (l->key = malloc(keylen + 1)) == NULL) {
		free(l);
		return err_dead(d, ENOMEM, "NOMEM", "out of memory");
	}
	memcpy(l->key, key, keylen);
	l->key[keylen] = '\0';
	l->keylen = keylen;
	l->fence = fence;
	l->suspended = suspended;
	**tail = l;
	*tail = &l->next;
	return 0;
}

/* Queue a "lost", "suspended" or "resumed" push; other pushes are
 * ignored. 0, or -1 (dead). */
static int
push_handle(dlock_t *d, const struct resp *v)
{
	const struct resp *k;
	int state;

	if (v->n < 3)
		return 0;
	k = v->elem[1];
	if ((k->type != RESP_BULK && k->type != RESP_SIMPLE) ||
	    v->elem[2]->type != RESP_INT)
		return 0;
	state = resp_is(v->elem[0], "suspended") ? 1 : resp_is(v->elem[0], "resumed") ? 0 : -1;
	if (state >= 0)
		return notice_add(d, &d->state_tail, k->str, k->len, v->elem[2]->integer, state);
	if (!resp_is(v->elem[0], "lost"))
		return 0;
	if (lost_add(d, k->str, k->len, v->elem[2]->integer) < 0)
		return -1;
	d->notices_due++;	/* the reply to the next command tells it again */
	return 0;
}

/*
 * Whether the error reply v is a loss notice, "LOST key fence reason" (what
 * the daemon answers in place of a command after a lock of the session was
 * lost; the key has its unusual bytes written as \xHH); with queue, the loss
 * is queued as if it had been pushed. Other errors, such as UNLOCK's "LOST
 * the lock on this key was lost ...", are not notices. 1 if it is one, 0 if
 * not, or -1 (dead).
 */
static int
lost_notice(dlock_t *d, const struct resp *v, int queue)
{
	const char *s = v->str, *end = v->str + v->len, *k, *kend, *f, *fend;
	char *key;
	size_t n = 0;
	long long fence;
	int r;

	if (v->len < 5 || memcmp(s, "LOST ", 5) != 0)
		return 0;
	k = s + 5;
	if ((kend = memchr(k, ' ', (size_t)(end - k))) == NULL || kend == k)
		return 0;
	f = kend + 1;
	if ((fend = memchr(f, ' ', (size_t)(end - f))) == NULL || fend + 1 == end ||
	    num_parse(f, (size_t)(fend - f), 0, LLONG_MAX, &fence) != NUM_OK)
		return 0;
	if ((key = malloc((size_t)(kend - k))) == NULL)
		return err_dead(d, ENOMEM, "NOMEM", "out of memory");
	for (const char *c = k; c < kend; c++) {
		if (*c != '\\') {
			key[n++] = *c;
		} else if (kend - c >= 4 && c[1] == 'x' && num_hex_digit(c[2]) >= 0 &&
		    num_hex_digit(c[3]) >= 0) {
			key[n++] = (char)(num_hex_digit(c[2]) * 16 + num_hex_digit(c[3]));
			c += 3;
		} else {
			free(key);	/* not the notice format */
			return 0;
		}
	}
	r = queue ? lost_add(d, key, n, fence) : 0;
	free(key);
	return r < 0 ? -1 : 1;
}

/*
 * Take one complete value from the read buffer. Pushes are handled and not
 * returned. PARSE_OK sets *out (the caller frees it), PARSE_MORE means more
 * bytes are needed, PARSE_ERROR means the connection is dead.
 */
static int
conn_take(dlock_t *d, struct resp **out)
{
	for (;;) {
		struct parser p;
		struct resp *v = NULL;
		int r;

		memset(&p, 0, sizeof(p));
		p.buf = d->rbuf + d->rpos;
		p.len = d->rlen - d->rpos;
		r = resp_parse(&p, 0, &v);
		if (r == PARSE_MORE)
			return PARSE_MORE;
		if (r == PARSE_ERROR) {
			if (p.nomem)
				return err_dead(d, ENOMEM, "NOMEM", "out of memory");
			return err_dead(d, EPROTO, "PROTO", "unreadable reply from dlockd: %s",
			    p.why);
		}
		d->rpos += p.pos;
		if (v->type != RESP_PUSH) {
			*out = v;
			return PARSE_OK;
		}
		r = push_handle(d, v);
		dlock_resp_free(v);
		if (r < 0)
			return PARSE_ERROR;
	}
}

/*
 * Wait (until dl at most) for the next reply, not a push. 0 sets *out
 * (caller frees), or -1.
 */
static int
conn_read_reply(dlock_t *d, struct resp **out, const struct deadline *dl)
{
	for (;;) {
		int r = conn_take(d, out);

		if (r == PARSE_OK)
			return 0;
		if (r == PARSE_ERROR)
			return -1;
		if (conn_fill(d, dl) < 0)
			return -1;
	}
}

/* Write all of buf, waiting until dl at most. 0, or -1 (dead). */
static int
conn_write(dlock_t *d, const char *buf, size_t len, const struct deadline *dl)
{
	while (len > 0) {
		ssize_t n = send(d->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				if (conn_wait(d, POLLOUT, dl) < 0)
					return -1;
				continue;
			}
			if (errno == EPIPE || errno == ECONNRESET)
				return err_dead(d, ECONNRESET, "IO", "connection closed by dlockd");
			return err_dead(d, errno, "IO", "cannot write to dlockd: %s",
			    strerror(errno));
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Make room for need bytes in the command buffer. 0, or -1 (error set). */
static int
wbuf_reserve(dlock_t *d, size_t need)
{
	char *p;

	if (need <= d->wcap)
		return 0;
	if ((p = realloc(d->wbuf, need)) == NULL) {
		dlock_err_set(d, "NOMEM", "out of memory");
		return -1;
	}
	d->wbuf = p;
	d->wcap = need;
	return 0;
}

/* See dlock_internal.h. (notices_due tells a notice whose push came first.) */
struct resp *
dlock_call(dlock_t *d, long long wait_ms, int argc, const char *const argv[],
    const size_t lens[])
{
	struct deadline dl;
	struct resp *v;
	size_t need = 32, len;

	if (d->dead) {
		err_repeat_dead(d);
		return NULL;
	}
	for (int i = 0; i < argc; i++)
		need += (lens != NULL ? lens[i] : strlen(argv[i])) + 32;
	if (wbuf_reserve(d, need) < 0)
		return NULL;
	len = (size_t)snprintf(d->wbuf, d->wcap, "*%d\r\n", argc);
	for (int i = 0; i < argc; i++) {
		size_t n = lens != NULL ? lens[i] : strlen(argv[i]);

		len += (size_t)snprintf(d->wbuf + len, d->wcap - len, "$%zu\r\n", n);
		if (n > 0)
			memcpy(d->wbuf + len, argv[i], n);
		len += n;
		d->wbuf[len++] = '\r';
		d->wbuf[len++] = '\n';
	}
	dl = deadline_start(d, wait_ms);
	for (;;) {
		int notice;

		if (conn_write(d, d->wbuf, len, &dl) < 0 || conn_read_reply(d, &v, &dl) < 0)
			return NULL;
		if (v->type != RESP_ERROR)
			return v;
		notice = lost_notice(d, v, d->notices_due == 0);
		if (notice < 0) {
			dlock_resp_free(v);
			return NULL;
		}
		if (notice == 0 || d->notices_due == 0)
			break;
		/* the reply that follows a loss's push: the loss is queued
		 * already, and the command was not run: send it again */
		d->notices_due--;
		dlock_resp_free(v);
	}
	err_reply(d, v);
	dlock_resp_free(v);
	return NULL;
}

/* See dlock_internal.h. */
int
dlock_unexpected(dlock_t *d, const char *cmd, struct resp *v)
{
	dlock_err_set(d, "PROTO", "unexpected reply to %s from dlockd", cmd);
	dlock_resp_free(v);
	return -1;
}

/* See dlock_internal.h. */
int
dlock_check_key(dlock_t *d, const char *key)
{
	if (d == NULL) {
		errno = EINVAL;
		return -1;
	}
	err_clear(d);
	if (key == NULL) {
		dlock_err_set(d, "ARG", "key is NULL");
		return -1;
	}
	if (*key == '\0') {
		dlock_err_set(d, "ARG", "key is empty");
		return -1;
	}
	return 0;
}

/* ---- connecting ---- */

/* Write an error for dlock_connect into err (errlen may be 0) and set errno. */
static void __attribute__((format(printf, 4, 5)))
connect_err(char *err, size_t errlen, int errnum, const char *fmt, ...)
{
	va_list ap;

	if (errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	errno = errnum;
}

/*
 * Connect a socket to one address, waiting at most
 * DLOCK_CONNECT_TIMEOUT_MS. Returns the blocking, close-on-exec socket, or
 * -1 with errno set.
 */
static int
connect_one(int family, int socktype, int protocol, const struct sockaddr *sa,
    socklen_t salen)
{
	long long deadline;
	socklen_t elen = sizeof(int);
	int fd, flags, e;

	fd = socket(family, socktype | SOCK_CLOEXEC, protocol);
	if (fd < 0)
		return -1;
	if (family == AF_UNIX) {
		/* A Unix connect does not block for long; retry when interrupted. */
		while (connect(fd, sa, salen) < 0) {
			if (errno == EINTR)
				continue;
			e = errno;
			close(fd);
			errno = e;
			return -1;
		}
		return fd;
	}
	if ((flags = fcntl(fd, F_GETFL)) < 0 ||
	    fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
		goto fail;
	if (connect(fd, sa, salen) < 0) {
		if (errno != EINPROGRESS)
			goto fail;
		deadline = (long long)clock_ms() + DLOCK_CONNECT_TIMEOUT_MS;
		for (;;) {
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };
			long long left = deadline - (long long)clock_ms();
			int r;

			if (left <= 0) {
				errno = ETIMEDOUT;
				goto fail;
			}
			r = poll(&pfd, 1, (int)left);
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				goto fail;
			if (r > 0)
				break;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &elen) < 0)
			goto fail;
		if (e != 0) {
			errno = e;
			goto fail;
		}
	}
	if (fcntl(fd, F_SETFL, flags) < 0)
		goto fail;
	return fd;
fail:
	e = errno;
	close(fd);
	errno = e;
	return -1;
}

/*
 * Options of a TCP connection to dlockd, best effort. A request is one small
 * write: send it at once (TCP_NODELAY). Keepalive probes and a bound on
 * unacknowledged data make a daemon whose host vanished (no reset will come)
 * fail the connection in about 30 s, even while a call waits for ever.
 */
static void
tcp_options(int fd)
{
	int one = 1;

	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	(void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
#ifdef TCP_KEEPIDLE
	{
		int idle = DLOCK_KEEPIDLE_S, intvl = DLOCK_KEEPINTVL_S, cnt = DLOCK_KEEPCNT;

		(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
		(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
		(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	}
#endif
#ifdef TCP_USER_TIMEOUT
	{
		unsigned int ut = DLOCK_USER_TIMEOUT_MS;

		(void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut));
	}
#endif
}

/*
 * Open a socket to addr ("host:port", "[v6]:port", "host", "unix:/path" or
 * "/path"). Returns it, or -1 with err and errno set.
 */
static int
connect_addr(const char *addr, char *err, size_t errlen)
{
	struct addrinfo hints, *res, *ai;
	char unix_addr[sizeof(((struct addr *)0)->text)], port[16];
	struct addr a;
	const char *why;
	int fd = -1, e = 0, r;

	/* "/path" is short for "unix:/path" */
	if (addr[0] == '/' && strlen(addr) + 5 < sizeof(unix_addr)) {
		snprintf(unix_addr, sizeof(unix_addr), "unix:%s", addr);
		addr = unix_addr;
	}
	if (addr_parse(addr, DLOCK_DEFAULT_PORT, &a, &why) != 0) {
		connect_err(err, errlen, EINVAL, "bad address \"%s\": %s", addr, why);
		return -1;
	}
	if (a.kind == ADDR_UNIX) {
		struct sockaddr_un sun;

		memset(&sun, 0, sizeof(sun));
		sun.sun_family = AF_UNIX;
		memcpy(sun.sun_path, a.path, strlen(a.path) + 1);
		fd = connect_one(AF_UNIX, SOCK_STREAM, 0, (struct sockaddr *)&sun,
		    (socklen_t)sizeof(sun));
		if (fd < 0)
			connect_err(err, errlen, errno, "cannot connect to %s: %s",
			    a.path, strerror(errno));
		return fd;
	}
	if (a.port == 0) {
		connect_err(err, errlen, EINVAL, "bad address \"%s\": the port must be a "
		    "number from 1 to 65535", addr);
		return -1;
	}
	snprintf(port, sizeof(port), "%d", a.port);
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	if ((r = getaddrinfo(a.host, port, &hints, &res)) != 0) {
		if (r == EAI_SYSTEM)
			connect_err(err, errlen, errno, "cannot resolve %s: %s", a.host, strerror(errno));
		else
			connect_err(err, errlen, EHOSTUNREACH, "cannot resolve %s: %s", a.host, gai_strerror(r));
		return -1;
	}
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		fd = connect_one(ai->ai_family, ai->ai_socktype, ai->ai_protocol,
		    ai->ai_addr, ai->ai_addrlen);
		if (fd >= 0)
			break;
		e = errno;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		connect_err(err, errlen, e != 0 ? e : ECONNREFUSED, "cannot connect to %s: %s", addr,
		    strerror(e != 0 ? e : ECONNREFUSED));
		return -1;
	}
	tcp_options(fd);
	return fd;
}

/*
 * Fail dlock_connect: close d, write "addr: why" into err and set errno to
 * errnum. Returns NULL.
 */
static dlock_t *
connect_fail(dlock_t *d, const char *addr, char *err, size_t errlen, int errnum,
    const char *why)
{
	connect_err(err, errlen, errnum, "%s: %s", addr, why);
	dlock_close(d);
	errno = errnum;
	return NULL;
}

/* A handle not connected yet (fd -1), or NULL: out of memory. */
static dlock_t *
dlock_alloc(void)
{
	dlock_t *d;

	if ((d = calloc(1, sizeof(*d))) == NULL || (d->rbuf = malloc(RBUF_MIN)) == NULL) {
		free(d);
		return NULL;
	}
	d->fd = -1;
	d->rcap = RBUF_MIN;
	d->timeout_ms = DLOCK_CALL_TIMEOUT_MS;
	d->lost_tail = &d->lost_head;
	d->state_tail = &d->state_head;
	return d;
}

/*
 * The handshake on d's new connection to addr: HELLO 3 (with AUTH when a
 * password is given), then CLIENT LOSTPUSH ON. d, or NULL with err set and
 * d closed.
 */
static dlock_t *
dlock_handshake(dlock_t *d, const char *addr, const char *password, char *err,
    size_t errlen)
{
	const char *argv[5] = { "HELLO", "3", "AUTH", "default", password };
	const char *lostpush[3] = { "CLIENT", "LOSTPUSH", "ON" };
	char why[640];
	struct resp *v;

	/* HELLO 3 [AUTH default password]: RESP3, so that "lost" can be pushed. */
	v = dlock_call(d, 0, password != NULL && *password != '\0' ? 5 : 2, argv, NULL);
	if (v == NULL) {
		/* Dead: the failure's errno. Refused: EACCES, but for two codes. */
		int e = d->dead ? d->dead_errno :
		    strcmp(d->code, "NOPROTO") == 0 ? EPROTO :
		    strcmp(d->code, "LIMIT") == 0 ? EAGAIN : EACCES;

		return connect_fail(d, addr, err, errlen, e, d->err);
	}
	if (v->type != RESP_MAP) {
		dlock_resp_free(v);
		return connect_fail(d, addr, err, errlen, EPROTO,
		    "unexpected reply to HELLO (is this dlockd?)");
	}
	dlock_resp_free(v);

	/*
	 * Sessions are told of lost locks by push only if they ask for it. One
	 * that did not authenticate is refused (NOAUTH), but it can hold no
	 * lock either: it gets NOAUTH for every command but PING, as before.
	 */
	if ((v = dlock_call(d, 0, 3, lostpush, NULL)) == NULL) {
		if (d->dead)
			return connect_fail(d, addr, err, errlen, d->dead_errno, d->err);
		if (strcmp(d->code, "NOAUTH") == 0) {
			err_clear(d);
			return d;
		}
		snprintf(why, sizeof(why), "CLIENT LOSTPUSH ON refused (is this dlockd "
		    "too old?): %s", d->err);
		return connect_fail(d, addr, err, errlen, EPROTO, why);
	}
	if (!resp_is(v, "OK")) {
		dlock_resp_free(v);
		return connect_fail(d, addr, err, errlen, EPROTO,
		    "unexpected reply to CLIENT LOSTPUSH ON (is this dlockd?)");
	}
	dlock_resp_free(v);
	return d;
}

dlock_t *
dlock_connect(const char *addr, const char *password, char *err, size_t errlen)
{
	dlock_t *d;

	if (errlen > 0)
		err[0] = '\0';
	if (addr == NULL) {
		addr = getenv("DLOCK_ADDR");
		if (addr == NULL || *addr == '\0')
			addr = DLOCK_DEFAULT_ADDR;
	}
	if (*addr == '\0') {
		connect_err(err, errlen, EINVAL, "bad address: empty");
		return NULL;
	}
	if ((d = dlock_alloc()) == NULL) {
		connect_err(err, errlen, ENOMEM, "out of memory");
		return NULL;
	}
	if ((d->fd = connect_addr(addr, err, errlen)) < 0) {
		int e = errno;

		free(d->rbuf);
		free(d);
		errno = e;
		return NULL;
	}
	return dlock_handshake(d, addr, password, err, errlen);
}

/* See dlock_internal.h. */
dlock_t *
dlock_open_fd(int fd, int handshake, const char *password, char *err, size_t errlen)
{
	dlock_t *d;

	if (errlen > 0)
		err[0] = '\0';
	if ((d = dlock_alloc()) == NULL) {
		connect_err(err, errlen, ENOMEM, "out of memory");
		close(fd);
		return NULL;
	}
	d->fd = fd;
	return handshake ? dlock_handshake(d, "fd", password, err, errlen) : d;
}

int
dlock_set_timeout(dlock_t *d, long long ms)
{
	if (d == NULL) {
		errno = EINVAL;
		return -1;
	}
	err_clear(d);
	if (ms < 0) {
		dlock_err_set(d, "ARG", "the timeout must be 0 (none) or more");
		return -1;
	}
	d->timeout_ms = ms;
	return 0;
}

void
dlock_close(dlock_t *d)
{
	struct lost *l, *next;

	if (d == NULL)
		return;
	close(d->fd);
	for (l = d->lost_head; l != NULL; l = next) {
		next = l->next;
		free(l->key);
		free(l);
	}
	for (l = d->state_head; l != NULL; l = next) {
		next = l->next;
		free(l->key);
		free(l);
	}
	free(d->rbuf);
	free(d->wbuf);
	free(d);
}

/* ---- commands ---- */

/* See dlock_internal.h. */
int
dlock_opts_args(dlock_t *d, const struct dlock_lock_opts *opts, struct dlock_opt_args *oa)
{
	static const struct dlock_lock_opts defaults = DLOCK_LOCK_OPTS_INIT;

	if (opts == NULL)
		opts = &defaults;
	if (opts->ttl_ms < 0) {
		dlock_err_set(d, "ARG", "ttl_ms is negative");
		return -1;
	}
	if (opts->wait_ms < -1) {
		dlock_err_set(d, "ARG", "wait_ms must be -1 (forever), 0 or more");
		return -1;
	}
	if (opts->limit < 0) {
		dlock_err_set(d, "ARG", "limit is negative");
		return -1;
	}
	if (opts->shared && opts->limit > 0) {
		dlock_err_set(d, "ARG", "shared and limit cannot be combined");
		return -1;
	}
	if (opts->detach && opts->ttl_ms == 0) {
		dlock_err_set(d, "ARG", "detach needs a ttl");
		return -1;
	}
	oa->argc = 0;
	oa->wait_ms = opts->wait_ms;
	if (opts->ttl_ms > 0) {
		snprintf(oa->ttl, sizeof(oa->ttl), "%lld", opts->ttl_ms);
		oa->argv[oa->argc++] = "TTL";
		oa->argv[oa->argc++] = oa->ttl;
	}
	if (opts->wait_ms >= 0) {
		snprintf(oa->wait, sizeof(oa->wait), "%lld", opts->wait_ms);
		oa->argv[oa->argc++] = "WAIT";
		oa->argv[oa->argc++] = oa->wait;
	}
	if (opts->shared) {
		oa->argv[oa->argc++] = "SHARED";
	} else if (opts->limit > 0) {
		snprintf(oa->limit, sizeof(oa->limit), "%d", opts->limit);
		oa->argv[oa->argc++] = "LIMIT";
		oa->argv[oa->argc++] = oa->limit;
	}
	if (opts->detach)
		oa->argv[oa->argc++] = "DETACH";
	return 0;
}

/* See dlock_internal.h. */
int
dlock_grant_read(const struct resp *v, struct dlock_grant *out)
{
	/* the token is text (it goes back in UNLOCK and EXTEND): no NUL in it */
	if (v->type != RESP_ARRAY || v->n < 3 ||
	    v->elem[0]->type != RESP_BULK || v->elem[0]->len == 0 ||
	    v->elem[0]->len >= sizeof(out->token) ||
	    memchr(v->elem[0]->str, '\0', v->elem[0]->len) != NULL ||
	    v->elem[1]->type != RESP_INT || v->elem[2]->type != RESP_INT)
		return -1;
	if (out != NULL) {
		memset(out, 0, sizeof(*out));
		memcpy(out->token, v->elem[0]->str, v->elem[0]->len);
		out->fence = v->elem[1]->integer;
		out->ttl_ms = v->elem[2]->integer;
	}
	return 0;
}

/* See dlock_internal.h. */
int
dlock_acquire(dlock_t *d, const char *cmd, const char *key, const void *value,
    size_t valuelen, const struct dlock_lock_opts *opts, struct dlock_grant *out)
{
	struct dlock_opt_args oa;
	const char *argv[3 + DLOCK_OPT_ARGS_MAX];
	size_t lens[3 + DLOCK_OPT_ARGS_MAX];
	struct resp *v;
	int argc = 0, vi = -1;

	if (dlock_check_key(d, key) < 0 || dlock_opts_args(d, opts, &oa) < 0)
		return -1;
	argv[argc++] = cmd;
	argv[argc++] = key;
	if (value != NULL) {
		vi = argc;
		argv[argc++] = value;
	}
	for (int i = 0; i < oa.argc; i++)
		argv[argc++] = oa.argv[i];
	for (int i = 0; i < argc; i++)
		lens[i] = i == vi ? valuelen : strlen(argv[i]);

	if ((v = dlock_call(d, oa.wait_ms, argc, argv, lens)) == NULL)
		return -1;
	if (v->type == RESP_NULL) {
		dlock_resp_free(v);
		return 0;
	}
	if (dlock_grant_read(v, out) < 0)
		return dlock_unexpected(d, cmd, v);
	dlock_resp_free(v);
	return 1;
}

int
dlock_lock(dlock_t *d, const char *key, const struct dlock_lock_opts *opts,
    struct dlock_grant *out)
{
	return dlock_acquire(d, "LOCK", key, NULL, 0, opts, out);
}

/* See dlock_internal.h. */
long long
dlock_call_int(dlock_t *d, const char *cmd, int argc, const char *const argv[],
    const size_t lens[])
{
	struct resp *v;
	long long n;

	if ((v = dlock_call(d, 0, argc, argv, lens)) == NULL)
		return -1;
	/* a negative count or TTL would pass for a failure with no error set */
	if (v->type != RESP_INT || v->integer < 0)
		return dlock_unexpected(d, cmd, v);
	n = v->integer;
	dlock_resp_free(v);
	return n;
}

long long
dlock_unlock(dlock_t *d, const char *key, const char *token)
{
	const char *argv[3] = { "UNLOCK", key, token };

	if (dlock_check_key(d, key) < 0)
		return -1;
	if (token != NULL && *token == '\0') {
		dlock_err_set(d, "ARG", "token is empty");
		return -1;
	}
	return dlock_call_int(d, "UNLOCK", token != NULL ? 3 : 2, argv, NULL);
}

long long
dlock_extend(dlock_t *d, const char *key, long long ms, const char *token)
{
	char msbuf[24];
	const char *argv[4] = { "EXTEND", key, msbuf, token };

	if (dlock_check_key(d, key) < 0)
		return -1;
	if (ms <= 0) {
		dlock_err_set(d, "ARG", "ms must be positive");
		return -1;
	}
	if (token != NULL && *token == '\0') {
		dlock_err_set(d, "ARG", "token is empty");
		return -1;
	}
	snprintf(msbuf, sizeof(msbuf), "%lld", ms);
	return dlock_call_int(d, "EXTEND", token != NULL ? 4 : 3, argv, NULL);
}

/* How a field of a reply map is stored. */
enum field_kind {
	FIELD_INT,	/* an integer into a long long */
	FIELD_STR,	/* a string (or null: "") into a char array of size bytes */
	FIELD_BOOL	/* a boolean or an integer into an int, 1 or 0 */
};

/* A field of a reply map and where it goes in a struct. */
struct field {
	const char *name;	/* its name in the map */
	enum field_kind kind;	/* how it is stored */
	size_t off;		/* offsetof its member */
	size_t size;		/* FIELD_STR: size of the member */
};

#define FIELD(type, kind, member) \
	{ #member, kind, offsetof(type, member), sizeof(((type *)0)->member) }

/* The fields of STATUS, of a holder and of a waiter of STATUS FULL. */
static const struct field status_fields[] = {
	FIELD(struct dlock_status, FIELD_STR, mode),
	FIELD(struct dlock_status, FIELD_INT, holders),
	FIELD(struct dlock_status, FIELD_INT, waiters),
	FIELD(struct dlock_status, FIELD_INT, fence),
	FIELD(struct dlock_status, FIELD_INT, ttl_ms),
	FIELD(struct dlock_status, FIELD_INT, limit),
	FIELD(struct dlock_status, FIELD_STR, backend),
};
static const struct field holder_fields[] = {
	FIELD(struct dlock_holder, FIELD_INT, session),
	FIELD(struct dlock_holder, FIELD_STR, name),
	FIELD(struct dlock_holder, FIELD_STR, addr),
	FIELD(struct dlock_holder, FIELD_STR, mode),
	FIELD(struct dlock_holder, FIELD_INT, fence),
	FIELD(struct dlock_holder, FIELD_INT, count),
	FIELD(struct dlock_holder, FIELD_INT, held_ms),
	FIELD(struct dlock_holder, FIELD_INT, lease_ms),
	FIELD(struct dlock_holder, FIELD_BOOL, detached),
};
static const struct field daemon_fields[] = {
	FIELD(struct dlock_holder_daemon, FIELD_STR, daemon),
	FIELD(struct dlock_holder_daemon, FIELD_STR, host),
	FIELD(struct dlock_holder_daemon, FIELD_STR, daemon_addr),
};
static const struct field waiter_fields[] = {
	FIELD(struct dlock_waiter, FIELD_INT, session),
	FIELD(struct dlock_waiter, FIELD_STR, name),
	FIELD(struct dlock_waiter, FIELD_STR, addr),
	FIELD(struct dlock_waiter, FIELD_STR, mode),
	FIELD(struct dlock_waiter, FIELD_INT, waited_ms),
	FIELD(struct dlock_waiter, FIELD_INT, wait_ms),
	FIELD(struct dlock_waiter, FIELD_BOOL, detach),
};

/* 1 if v is a map, or a flat array of names and values (RESP2). */
static int
resp_is_map(const struct resp *v)
{
	return (v->type == RESP_MAP || v->type == RESP_ARRAY) && v->n % 2 == 0;
}

/*
 * Store the fields of map v that fields (n of them) names into dst; other
 * names, and aggregate values (STATUS FULL's lists of holders and waiters
 * under the names of STATUS's counts), are skipped; a string longer than its
 * member is cut. 0, or -1 when a value has the wrong type.
 */
static int
map_read(const struct resp *v, const struct field *fields, size_t n, void *dst)
{
	for (size_t i = 0; i < v->n; i += 2) {
		const struct resp *val = v->elem[i + 1];
		const struct field *f = NULL;
		char *p;

		for (size_t j = 0; j < n && f == NULL; j++)
			if (resp_is(v->elem[i], fields[j].name))
				f = &fields[j];
		if (f == NULL || val->type == RESP_ARRAY || val->type == RESP_MAP ||
		    val->type == RESP_SET)
			continue;
		p = (char *)dst + f->off;
		if (f->kind == FIELD_STR && val->type == RESP_NULL) {
			*p = '\0';
		} else if (f->kind == FIELD_STR) {
			/* a long client name or address is cut, not refused */
			size_t len = val->len < f->size - 1 ? val->len : f->size - 1;
			if (val->type != RESP_BULK && val->type != RESP_SIMPLE)
				return -1;
			memcpy(p, val->str, len);
			p[len] = '\0';
		} else if (val->type != RESP_INT && val->type != RESP_BOOL) {
			return -1;
		} else if (f->kind == FIELD_INT) {
			memcpy(p, &val->integer, sizeof(long long));
		} else {
			int b = val->integer != 0;
			memcpy(p, &b, sizeof(int));
		}
	}
	return 0;
}

/*
 * Send STATUS key (full: STATUS key FULL) and read the common fields into
 * out. The reply (the caller frees it), or NULL with the error set.
 */
static struct resp *
status_call(dlock_t *d, const char *key, int full, struct dlock_status *out)
{
	const char *argv[3] = { "STATUS", key, "FULL" };
	struct resp *v;

	if (dlock_check_key(d, key) < 0)
		return NULL;
	if (out == NULL) {
		dlock_err_set(d, "ARG", "out is NULL");
		return NULL;
	}
	if ((v = dlock_call(d, 0, full ? 3 : 2, argv, NULL)) == NULL)
		return NULL;
	memset(out, 0, sizeof(*out));
	out->ttl_ms = -1;
	if (!resp_is_map(v) || map_read(v, status_fields,
	    sizeof(status_fields) / sizeof(status_fields[0]), out) < 0) {
		(void)dlock_unexpected(d, "STATUS", v);
		return NULL;
	}
	if (out->mode[0] == '\0') {
		dlock_resp_free(v);
		dlock_err_set(d, "PROTO", "STATUS reply from dlockd has no mode");
		return NULL;
	}
	return v;
}

int
dlock_status(dlock_t *d, const char *key, struct dlock_status *out)
{
	struct resp *v = status_call(d, key, 0, out);

	if (v == NULL)
		return -1;
	dlock_resp_free(v);
	return 0;
}

/*
 * Read the array of maps under name in STATUS FULL's reply v into a new
 * array of n elements of size bytes (*n 0: NULL). 0, or -1 (shape wrong).
 */
static int
full_list(const struct resp *v, const char *name, const struct field *fields,
    size_t nfields, size_t size, void **out, size_t *n)
{
	const struct resp *list = NULL;
	char *arr;

	*out = NULL;
	*n = 0;
	for (size_t i = 0; i < v->n; i += 2)
		if (resp_is(v->elem[i], name) && (v->elem[i + 1]->type == RESP_ARRAY ||
		    v->elem[i + 1]->type == RESP_SET))
			list = v->elem[i + 1];
	if (list == NULL)
		return -1;
	if (list->n == 0)
		return 0;
	if ((arr = calloc(list->n, size)) == NULL)
		return -1;
	for (size_t i = 0; i < list->n; i++) {
		if (!resp_is_map(list->elem[i]) ||
		    map_read(list->elem[i], fields, nfields, arr + i * size) < 0) {
			free(arr);
			return -1;
		}
	}
	*out = arr;
	*n = list->n;
	return 0;
}

/* STATUS key FULL into out and, when daemons is not NULL, the holders'
 * daemons into *daemons. */
static int
status_full(dlock_t *d, const char *key, struct dlock_status_full *out,
    struct dlock_holder_daemon **daemons)
{
	struct resp *v;
	void *h, *w, *hd = NULL;
	size_t nd;

	if (out != NULL)
		memset(out, 0, sizeof(*out));
	if (daemons != NULL)
		*daemons = NULL;
	if ((v = status_call(d, key, 1, out != NULL ? &out->status : NULL)) == NULL)
		return -1;
	if (full_list(v, "holders", holder_fields,
	    sizeof(holder_fields) / sizeof(holder_fields[0]),
	    sizeof(struct dlock_holder), &h, &out->nholders) < 0)
		return dlock_unexpected(d, "STATUS FULL", v);
	if (full_list(v, "waiters", waiter_fields,
	    sizeof(waiter_fields) / sizeof(waiter_fields[0]),
	    sizeof(struct dlock_waiter), &w, &out->nwaiters) < 0 ||
	    (daemons != NULL && full_list(v, "holders", daemon_fields,
	    sizeof(daemon_fields) / sizeof(daemon_fields[0]),
	    sizeof(struct dlock_holder_daemon), &hd, &nd) < 0)) {
		free(h);
		free(w);
		out->nholders = 0;
		return dlock_unexpected(d, "STATUS FULL", v);
	}
	if (daemons != NULL)
		*daemons = hd;
	out->holders = h;
	out->waiters = w;
	/* The lists may stand in the place of STATUS's counts. */
	if (out->status.holders == 0)
		out->status.holders = (long long)out->nholders;
	if (out->status.waiters == 0)
		out->status.waiters = (long long)out->nwaiters;
	dlock_resp_free(v);
	return 0;
}

int
dlock_status_full(dlock_t *d, const char *key, struct dlock_status_full *out)
{
	return status_full(d, key, out, NULL);
}

int
dlock_status_fleet(dlock_t *d, const char *key, struct dlock_status_full *out,
    struct dlock_holder_daemon **daemons)
{
	return status_full(d, key, out, daemons);
}

void
dlock_status_full_free(struct dlock_status_full *st)
{
	if (st == NULL)
		return;
	free(st->holders);
	free(st->waiters);
	st->holders = NULL;
	st->waiters = NULL;
	st->nholders = st->nwaiters = 0;
}

int
dlock_held(dlock_t *d, const char *cursor, const char *pattern, long long count,
    struct dlock_held *out)
{
	const char *argv[6] = { "HELD", cursor };
	char cbuf[24];
	int argc = 2;
	struct resp *v;

	if (out == NULL || cursor == NULL) {
		dlock_err_set(d, "ARG", "cursor or out is NULL");
		return -1;
	}
	memset(out, 0, sizeof(*out));
	if (pattern != NULL) {
		argv[argc++] = "MATCH";
		argv[argc++] = pattern;
	}
	if (count > 0) {
		snprintf(cbuf, sizeof(cbuf), "%lld", count);
		argv[argc++] = "COUNT";
		argv[argc++] = cbuf;
	}
	if ((v = dlock_call(d, 0, argc, argv, NULL)) == NULL)
		return -1;
	if (v->type != RESP_ARRAY || v->n != 2 || v->elem[0]->type != RESP_BULK ||
	    v->elem[0]->len >= sizeof(out->next) || v->elem[1]->type != RESP_ARRAY)
		return dlock_unexpected(d, "HELD", v);
	const struct resp *keys = v->elem[1];
	for (size_t i = 0; i < keys->n; i++)
		if (keys->elem[i]->type != RESP_BULK)
			return dlock_unexpected(d, "HELD", v);
	out->keys = calloc(keys->n + 1, sizeof(*out->keys));
	out->lens = calloc(keys->n + 1, sizeof(*out->lens));
	if (out->keys == NULL || out->lens == NULL) {
		dlock_held_free(out);
		dlock_resp_free(v);
		dlock_err_set(d, "NOMEM", "out of memory");
		return -1;
	}
	for (size_t i = 0; i < keys->n; i++) {
		/* the reply's copies are taken over */
		out->keys[i] = keys->elem[i]->str;
		out->lens[i] = keys->elem[i]->len;
		keys->elem[i]->str = NULL;
		out->n++;
	}
	memcpy(out->next, v->elem[0]->str, v->elem[0]->len + 1);
	dlock_resp_free(v);
	return 0;
}

void
dlock_held_free(struct dlock_held *h)
{
	if (h == NULL)
		return;
	for (size_t i = 0; i < h->n; i++)
		free(h->keys[i]);
	free(h->keys);
	free(h->lens);
	h->keys = NULL;
	h->lens = NULL;
	h->n = 0;
}

int
dlock_validate(dlock_t *d, const char *key, long long fence)
{
	char fbuf[24];
	const char *argv[3] = { "VALIDATE", key, fbuf };
	long long n;

	if (dlock_check_key(d, key) < 0)
		return -1;
	snprintf(fbuf, sizeof(fbuf), "%lld", fence);
	if ((n = dlock_call_int(d, "VALIDATE", 3, argv, NULL)) < 0)
		return -1;
	return n != 0;
}

int
dlock_ping(dlock_t *d)
{
	const char *argv[1] = { "PING" };
	struct resp *v;

	if (d == NULL) {
		errno = EINVAL;
		return -1;
	}
	err_clear(d);
	if ((v = dlock_call(d, 0, 1, argv, NULL)) == NULL)
		return -1;
	if (!resp_is(v, "PONG"))
		return dlock_unexpected(d, "PING", v);
	dlock_resp_free(v);
	return 0;
}

char *
dlock_info(dlock_t *d)
{
	const char *argv[1] = { "INFO" };
	struct resp *v;
	char *s;

	if (d == NULL) {
		errno = EINVAL;
		return NULL;
	}
	err_clear(d);
	if ((v = dlock_call(d, 0, 1, argv, NULL)) == NULL)
		return NULL;
	if (v->type != RESP_BULK && v->type != RESP_SIMPLE) {
		dlock_unexpected(d, "INFO", v);
		return NULL;
	}
	s = v->str;	/* already a NUL-terminated copy: hand it over */
	v->str = NULL;
	dlock_resp_free(v);
	return s;
}

/* ---- pushes ---- */

int
dlock_fd(const dlock_t *d)
{
	return d != NULL ? d->fd : -1;
}

/* Pop the oldest notice of the queue at *head (its tail at *tail) into
 * key/fence; its state. */
static int
notice_pop(struct lost **head, struct lost ***tail, char *key, size_t keylen,
    long long *fence)
{
	struct lost *l = *head;
	int suspended = l->suspended;

	if ((*head = l->next) == NULL)
		*tail = head;
	if (key != NULL && keylen > 0) {
		size_t n = l->keylen < keylen - 1 ? l->keylen : keylen - 1;

		memcpy(key, l->key, n);
		key[n] = '\0';
	}
	if (fence != NULL)
		*fence = l->fence;
	free(l->key);
	free(l);
	return suspended;
}

/* Read whatever has arrived, without waiting: pushes are queued. */
static void
poll_pushes(dlock_t *d)
{
	struct resp *v;
	int r;

	while (!d->dead) {
		while ((r = conn_take(d, &v)) == PARSE_OK)
			dlock_resp_free(v);	/* no command is pending: not ours to keep */
		if (r == PARSE_ERROR || conn_fill(d, NULL) <= 0)
			break;
	}
}

int
dlock_poll_lost(dlock_t *d, char *key, size_t keylen, long long *fence)
{
	if (d == NULL) {
		errno = EINVAL;
		return -1;
	}
	err_clear(d);
	poll_pushes(d);
	if (d->lost_head != NULL) {
		(void)notice_pop(&d->lost_head, &d->lost_tail, key, keylen, fence);
		if (d->dead)
			err_clear(d);
		return 1;
	}
	if (d->dead)
		return err_repeat_dead(d);
	return 0;
}

int
dlock_suspend_notices(dlock_t *d, int on)
{
	const char *argv[3] = { "CLIENT", "SUSPENDPUSH", on ? "ON" : "OFF" };
	struct resp *v;

	if (d == NULL) {
		errno = EINVAL;
		return -1;
	}
	err_clear(d);
	if ((v = dlock_call(d, 0, 3, argv, NULL)) == NULL)
		return -1;
	if (!resp_is(v, "OK"))
		return dlock_unexpected(d, "CLIENT SUSPENDPUSH", v);
	dlock_resp_free(v);
	return 0;
}

int
dlock_poll_suspend(dlock_t *d, char *key, size_t keylen, long long *fence, int *suspended)
{
	int st;

	if (d == NULL) {
		errno = EINVAL;
		return -1;
	}
	err_clear(d);
	poll_pushes(d);
	if (d->state_head == NULL)
		return d->dead ? err_repeat_dead(d) : 0;
	st = notice_pop(&d->state_head, &d->state_tail, key, keylen, fence);
	if (suspended != NULL)
		*suspended = st;
	return 1;
}

const char *
dlock_error(const dlock_t *d)
{
	return d != NULL ? d->err : "no connection";
}

const char *
dlock_error_code(const dlock_t *d)
{
	return d != NULL ? d->code : "ARG";
}
