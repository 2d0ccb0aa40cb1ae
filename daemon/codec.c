/*
 * codec — RESP request frames in, RESP2/RESP3 replies out.
 *
 * It owns the bytes a connection fed it and the frame it hands out; it must
 * not touch a socket, know what a command means, or keep any state but the
 * parse (errors are sticky: the session closes the connection).
 *
 * The reader keeps every byte fed and not yet consumed in one buffer,
 * buf[start, end). The frame being parsed always begins at buf[start], and
 * all parse state (the position reached, the offsets and lengths of the
 * arguments already complete) is kept relative to start, so moving the live
 * bytes to the front of the buffer or into a larger one never disturbs a
 * partial parse, and a bulk string arriving in pieces is never rescanned.
 *
 * Arguments are not copied. A bulk string is used where it lies, its
 * trailing '\r' overwritten by the terminating NUL once the CRLF has been
 * checked; an inline line is unescaped in place (the result is never longer
 * than the quoted text it comes from). Consumed bytes stay where they are
 * until the next codec_feed, which is why a frame is valid until then.
 *
 * Buffer management is amortised linear: codec_feed moves the live bytes to
 * the front only when they fill at most half of the buffer (so at least half
 * of it is free afterwards), and otherwise grows the buffer geometrically.
 *
 * Wire-size limit: a multibulk request is rejected as soon as its declared
 * sizes prove it too large (the argument count times the smallest possible
 * argument, each bulk length as its header is read); any request is
 * rejected as soon as the bytes buffered for it, while it is still
 * incomplete, reach the limit (it can then only end beyond it).
 */
#include "codec.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "log.h"
#include "num.h"
#include "xmalloc.h"

#define CODEC_BUF_INIT		4096		/* first allocation of the input buffer */
#define CODEC_BUF_KEEP		(64 * 1024)	/* an empty buffer larger than this shrinks */
#define CODEC_ARGS_INIT		8		/* first allocation of the argument arrays */
#define CODEC_MAX_DIGITS	19		/* digits in a length: fits unsigned long long */
#define CODEC_MIN_BULK		6		/* smallest bulk on the wire: "$0\r\n\r\n" */
#define CODEC_NOLIMIT		(SIZE_MAX / 4)	/* frame limit used for "0: no limit" */

/* Where the parse of the frame at buf[start] stands. */
enum codec_state {
	CS_IDLE,	/* at a frame boundary: nothing of the next frame parsed */
	CS_INLINE,	/* an inline line: looking for its '\n' */
	CS_MB_COUNT,	/* "*": reading the argument count */
	CS_BULK_HDR,	/* expecting "$<len>\r\n" of the next argument */
	CS_BULK_BODY	/* reading <len> bytes and the CRLF after them */
};

struct codec {
	char *buf;		/* input bytes; buf[start, end) are live */
	size_t cap;		/* allocated size of buf */
	size_t start;		/* offset of the current frame's first byte */
	size_t end;		/* offset one past the last byte fed */
	size_t max_frame;	/* wire-size limit of one request */
	size_t max_args;	/* argument-count limit of one request */
	enum codec_state state;	/* parse state of the current frame */
	size_t pos;		/* parse (or inline scan) position, relative to start */
	size_t nargs;		/* declared argument count of a multibulk frame */
	size_t argc;		/* arguments complete so far in the current frame */
	size_t bulklen;		/* length of the bulk string being read */
	size_t *argoff;		/* argument offsets, relative to start */
	size_t *argvlen;	/* argument lengths */
	char **argv;		/* argument pointers, filled when a frame completes */
	size_t argcap;		/* allocated entries in argoff, argvlen and argv */
	int failed;		/* a protocol error happened; sticky */
	char err[128];		/* the error sentence when failed */
};

struct codec *
codec_create(size_t max_frame_bytes, size_t max_args)
{
	struct codec *c = xcalloc(1, sizeof(*c));
	c->max_frame = max_frame_bytes == 0 ? CODEC_NOLIMIT : max_frame_bytes;
	c->max_args = max_args == 0 ? SIZE_MAX : max_args;
	c->state = CS_IDLE;
	return c;
}

void
codec_destroy(struct codec *c)
{
	if (c == NULL)
		return;
	free(c->buf);
	free(c->argoff);
	free(c->argvlen);
	free(c->argv);
	free(c);
}

/*
 * Record a protocol error: the codec answers CODEC_ERROR from now on. The
 * sentence always starts with "Protocol error: ".
 */
static enum codec_status
codec_fail(struct codec *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static enum codec_status
codec_fail(struct codec *c, const char *fmt, ...)
{
	static const char prefix[] = "Protocol error: ";
	va_list ap;

	memcpy(c->err, prefix, sizeof(prefix));
	va_start(ap, fmt);
	vsnprintf(c->err + sizeof(prefix) - 1, sizeof(c->err) - sizeof(prefix) + 1, fmt, ap);
	va_end(ap);
	c->failed = 1;
	return CODEC_ERROR;
}

static enum codec_status
codec_fail_size(struct codec *c)
{
	return codec_fail(c, "request too large (limit %zu bytes)", c->max_frame);
}

/*
 * Make room for len more bytes at buf[end]: move the live bytes to the front
 * when that is cheap (they fill at most half the buffer), else grow the
 * buffer geometrically, copying only the live bytes.
 */
static void
codec_reserve(struct codec *c, size_t len)
{
	size_t live = c->end - c->start;

	if (live == 0) {
		c->start = c->end = 0;
		if (c->cap > CODEC_BUF_KEEP && len <= CODEC_BUF_KEEP) {
			/* Give back the memory a large request left behind. */
			free(c->buf);
			c->buf = xmalloc(CODEC_BUF_KEEP);
			c->cap = CODEC_BUF_KEEP;
		}
	}
	if (c->cap - c->end >= len)
		return;
	size_t need = live + len;
	if (c->start > 0 && need <= c->cap && live <= c->cap / 2) {
		memmove(c->buf, c->buf + c->start, live);
		c->end = live;
		c->start = 0;
		return;
	}
	size_t ncap = c->cap == 0 ? CODEC_BUF_INIT : c->cap;
	while (ncap < need || ncap / 2 < live)
		ncap = ncap * 2;
	if (c->start == 0) {
		c->buf = xrealloc(c->buf, ncap);
	} else {
		char *nbuf = xmalloc(ncap);
		memcpy(nbuf, c->buf + c->start, live);
		free(c->buf);
		c->buf = nbuf;
		c->end = live;
		c->start = 0;
	}
	c->cap = ncap;
}

/*
 * Append bytes. After a protocol error they are dropped: the connection is
 * about to close and nothing more will be parsed.
 */
void
codec_feed(struct codec *c, const void *data, size_t len)
{
	if (len == 0 || c->failed)
		return;
	codec_reserve(c, len);
	memcpy(c->buf + c->end, data, len);
	c->end += len;
}

const char *
codec_error(const struct codec *c)
{
	return c->failed ? c->err : NULL;
}

size_t
codec_buffered(const struct codec *c)
{
	return c->end - c->start;
}

/* Room for at least n arguments in the argument arrays. */
static void
codec_args_reserve(struct codec *c, size_t n)
{
	if (n <= c->argcap)
		return;
	size_t ncap = c->argcap == 0 ? CODEC_ARGS_INIT : c->argcap;
	while (ncap < n)
		ncap *= 2;
	c->argoff = xreallocarray(c->argoff, ncap, sizeof(*c->argoff));
	c->argvlen = xreallocarray(c->argvlen, ncap, sizeof(*c->argvlen));
	c->argv = xreallocarray(c->argv, ncap, sizeof(*c->argv));
	c->argcap = ncap;
}

/*
 * Hand out the frame whose argc arguments are recorded, then consume its
 * len bytes and reset the parse state. The pointers refer to the buffer.
 */
static enum codec_status
codec_emit(struct codec *c, struct codec_frame *out, size_t len, int is_inline)
{
	char *base = c->buf + c->start;

	for (size_t i = 0; i < c->argc; i++)
		c->argv[i] = base + c->argoff[i];
	out->argc = c->argc;
	out->argv = c->argv;
	out->argvlen = c->argvlen;
	out->is_inline = is_inline;
	c->start += len;
	c->state = CS_IDLE;
	c->pos = 0;
	c->argc = 0;
	return CODEC_FRAME;
}

/* Consume len bytes that make no frame (an empty line or array). */
static void
codec_skip(struct codec *c, size_t len)
{
	c->start += len;
	c->state = CS_IDLE;
	c->pos = 0;
	c->argc = 0;
}

/*
 * Parse the decimal number of a header line ("*<n>\r\n" or "$<n>\r\n")
 * whose digits start at p[0], with avail bytes buffered. Accepts no sign,
 * no blanks and no leading zero; "-1" only when allow_minus_one. Rejects a
 * bad byte as soon as it is buffered. Returns 1 with *value, *minus_one and
 * *linelen (bytes up to and including the '\n') set, 0 when the line is
 * incomplete, -1 when it is malformed.
 */
static int
codec_parse_len(const char *p, size_t avail, int allow_minus_one,
    unsigned long long *value, int *minus_one, size_t *linelen)
{
	unsigned long long v = 0;
	size_t i = 0, ndigits = 0;
	int neg = 0;

	if (allow_minus_one && avail > 0 && p[0] == '-') {
		neg = 1;
		i = 1;
	}
	for (; i < avail; i++) {
		unsigned char ch = (unsigned char)p[i];
		if (ch == '\r')
			break;
		if (ch < '0' || ch > '9')
			return -1;
		if (ndigits == 1 && v == 0)
			return -1;		/* leading zero */
		if (++ndigits > CODEC_MAX_DIGITS)
			return -1;
		v = v * 10 + (ch - '0');
		if (neg && v != 1)
			return -1;		/* the only negative is -1 */
	}
	if (i >= avail)
		return 0;
	if (ndigits == 0)
		return -1;
	if (i + 1 >= avail)
		return 0;
	if (p[i + 1] != '\n')
		return -1;
	*value = v;
	*minus_one = neg;
	*linelen = i + 2;
	return 1;
}

/*
 * One blank of an inline line (the separators between words): space and tab,
 * and the other isspace() bytes a line can hold (a CR not before the LF, VT,
 * FF), as Redis skips them.
 */
static int
is_blank(unsigned char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
}

/*
 * Split the inline line at buf[start], n bytes without its line end, into
 * words as Redis's sdssplitargs does, unescaping in place: each word is
 * rewritten (never longer) at or before where it was read and NUL-terminated
 * there; the NUL of the last word may fall on the line end. Records the
 * words in argoff/argvlen and sets c->argc. Returns CODEC_FRAME, or
 * CODEC_ERROR after codec_fail (unbalanced quotes, too many arguments, out
 * of memory).
 */
static enum codec_status
codec_split_inline(struct codec *c, size_t n)
{
	char *p = c->buf + c->start;
	size_t r = 0, w = 0;

	c->argc = 0;
	for (;;) {
		while (r < n && is_blank((unsigned char)p[r]))
			r++;
		if (r == n)
			break;
		if (c->argc >= c->max_args)
			return codec_fail(c, "too many arguments");
		codec_args_reserve(c, c->argc + 1);
		size_t wstart = w;
		int inq = 0, insq = 0, done = 0;
		while (!done) {
			if (inq || insq) {
				if (r == n)
					return codec_fail(c, "unbalanced quotes in request");
				if (inq && p[r] == '\\' && r + 3 < n && p[r + 1] == 'x' &&
				    num_hex_digit((unsigned char)p[r + 2]) >= 0 &&
				    num_hex_digit((unsigned char)p[r + 3]) >= 0) {
					p[w++] = (char)(num_hex_digit((unsigned char)p[r + 2]) * 16 +
					    num_hex_digit((unsigned char)p[r + 3]));
					r += 4;
				} else if (inq && p[r] == '\\' && r + 1 < n) {
					char ch;
					switch (p[r + 1]) {
					case 'n': ch = '\n'; break;
					case 'r': ch = '\r'; break;
					case 't': ch = '\t'; break;
					case 'b': ch = '\b'; break;
					case 'a': ch = '\a'; break;
					default: ch = p[r + 1]; break;
					}
					p[w++] = ch;
					r += 2;
				} else if (insq && p[r] == '\\' && r + 1 < n && p[r + 1] == '\'') {
					p[w++] = '\'';
					r += 2;
				} else if (p[r] == (inq ? '"' : '\'')) {
					/* A closing quote ends the word. */
					if (r + 1 < n && !is_blank((unsigned char)p[r + 1]))
						return codec_fail(c, "unbalanced quotes in request");
					r++;
					done = 1;
				} else {
					p[w++] = p[r++];
				}
			} else {
				if (r == n) {
					done = 1;
				} else if (is_blank((unsigned char)p[r])) {
					r++;	/* past the blank the NUL may land on */
					done = 1;
				} else if (p[r] == '"') {
					inq = 1;
					r++;
				} else if (p[r] == '\'') {
					insq = 1;
					r++;
				} else {
					p[w++] = p[r++];
				}
			}
		}
		/*
		 * w is at most the position of the byte that ended the word
		 * (a blank, a closing quote or the line end at p[n]), which has
		 * been read: the NUL overwrites nothing still to be parsed.
		 */
		p[w] = '\0';
		c->argoff[c->argc] = wstart;
		c->argvlen[c->argc] = w - wstart;
		c->argc++;
		w++;
	}
	return CODEC_FRAME;
}

/* The byte after "expected '$', got", quoted for a one-line message. */
static void
codec_quote_byte(unsigned char ch, char *dst, size_t size)
{
	if (ch >= 0x20 && ch < 0x7f)
		snprintf(dst, size, "'%c'", ch);
	else
		snprintf(dst, size, "'\\x%02x'", ch);
}

/*
 * The digits of a length that start at p[*pos] (no leading zero, no sign)
 * and the CRLF after them, all within avail bytes, for a value of at most
 * avail: 1 with *value set and *pos past the CRLF, else 0 (a larger value
 * cannot belong to a frame that is whole within avail).
 */
static int
codec_fast_len(const char *p, size_t avail, size_t *pos, size_t *value)
{
	size_t i = *pos, v = 0;
	if (i >= avail || p[i] < '0' || p[i] > '9' || (p[i] == '0' && i + 1 < avail &&
	    p[i + 1] != '\r'))
		return 0;
	for (; i < avail && p[i] >= '0' && p[i] <= '9'; i++) {
		if (v > avail / 10)
			return 0;
		v = v * 10 + (size_t)(p[i] - '0');
	}
	if (v > avail || i + 1 >= avail || p[i] != '\r' || p[i + 1] != '\n')
		return 0;
	*value = v;
	*pos = i + 2;
	return 1;
}

/*
 * The common case in one pass: a multibulk frame at buf[start] that is
 * whole within the first avail bytes (and so within the size limit), well
 * formed, with 1 to max_args arguments. Records its arguments, NUL-terminates
 * them and returns 1 with *len its wire size. Anything else (a frame still
 * arriving, an empty array, any error) returns 0 having changed nothing, and
 * the state machine parses the frame from its first byte: what a frame
 * yields never depends on whether it came whole.
 */
static int
codec_whole_frame(struct codec *c, size_t avail, size_t *len)
{
	char *p = c->buf + c->start;
	size_t pos = 1, n, blen;

	if (!codec_fast_len(p, avail, &pos, &n) || n == 0 || n > c->max_args ||
	    n > (avail - pos) / CODEC_MIN_BULK)
		return 0;
	codec_args_reserve(c, n);
	for (size_t i = 0; i < n; i++) {
		if (pos >= avail || p[pos] != '$')
			return 0;
		pos++;
		if (!codec_fast_len(p, avail, &pos, &blen) || blen > avail - pos ||
		    avail - pos - blen < 2 || p[pos + blen] != '\r' || p[pos + blen + 1] != '\n')
			return 0;
		c->argoff[i] = pos;
		c->argvlen[i] = blen;
		pos += blen + 2;
	}
	/* the whole frame is good: only now is the buffer written to */
	for (size_t i = 0; i < n; i++)
		p[c->argoff[i] + c->argvlen[i]] = '\0';
	c->argc = n;
	*len = pos;
	return 1;
}

/*
 * Parse on from where the last call stopped. The frame's arguments point
 * into the buffer (see the top of this file).
 */
enum codec_status
codec_next(struct codec *c, struct codec_frame *out)
{
	if (c->failed)
		return CODEC_ERROR;
	if (c->buf == NULL)
		return CODEC_MORE;	/* nothing fed yet */
	for (;;) {
		char *p = c->buf + c->start;
		size_t buffered = c->end - c->start;
		/*
		 * Never look past the last byte a frame within the limit could
		 * use: the outcome then does not depend on how the bytes were
		 * split between feeds.
		 */
		size_t avail = buffered < c->max_frame ? buffered : c->max_frame;
		unsigned long long v;
		size_t linelen;
		int minus_one, rc;

		switch (c->state) {
		case CS_IDLE:
			if (avail == 0)
				return CODEC_MORE;
			c->argc = 0;
			if (p[0] == '*') {
				size_t len;
				if (codec_whole_frame(c, avail, &len))
					return codec_emit(c, out, len, 0);
				c->state = CS_MB_COUNT;
				c->pos = 1;
				continue;
			}
			if (p[0] == '$' || p[0] == ':' || p[0] == '+' || p[0] == '-') {
				/* a RESP value outside an array: garbage, not a
				 * command (an inline command never starts so) */
				char q[8];
				codec_quote_byte((unsigned char)p[0], q, sizeof(q));
				return codec_fail(c, "expected '*', got %s", q);
			}
			c->state = CS_INLINE;
			c->pos = 0;
			continue;

		case CS_INLINE: {
			char *nl = memchr(p + c->pos, '\n', avail - c->pos);
			if (nl == NULL) {
				/* Not found within the limit: the line is too long. */
				c->pos = avail;
				if (buffered >= c->max_frame)
					return codec_fail_size(c);
				return CODEC_MORE;
			}
			linelen = (size_t)(nl - p) + 1;
			size_t n = linelen - 1;
			if (n > 0 && p[n - 1] == '\r')
				n--;
			if (codec_split_inline(c, n) == CODEC_ERROR)
				return CODEC_ERROR;
			if (c->argc == 0) {
				codec_skip(c, linelen);
				continue;
			}
			return codec_emit(c, out, linelen, 1);
		}

		case CS_MB_COUNT:
			rc = codec_parse_len(p + c->pos, avail - c->pos, 1, &v, &minus_one, &linelen);
			if (rc == -1)
				return codec_fail(c, "invalid multibulk length");
			if (rc == 0)
				break;
			c->pos += linelen;
			if (minus_one || v == 0) {
				codec_skip(c, c->pos);
				continue;
			}
			if (v > c->max_args)
				return codec_fail(c, "too many arguments");
			if (c->pos > c->max_frame ||
			    v > (c->max_frame - c->pos) / CODEC_MIN_BULK)
				return codec_fail_size(c);
			c->nargs = (size_t)v;
			c->argc = 0;
			c->state = CS_BULK_HDR;
			continue;

		case CS_BULK_HDR: {
			if (avail == c->pos)
				break;
			if (p[c->pos] != '$') {
				char got[8];
				codec_quote_byte((unsigned char)p[c->pos], got, sizeof(got));
				return codec_fail(c, "expected '$', got %s", got);
			}
			rc = codec_parse_len(p + c->pos + 1, avail - c->pos - 1, 0, &v,
			    &minus_one, &linelen);
			if (rc == -1)
				return codec_fail(c, "invalid bulk length");
			if (rc == 0)
				break;
			c->pos += 1 + linelen;
			/* This bulk, its CRLF and the smallest possible rest. */
			size_t room = c->pos > c->max_frame ? 0 : c->max_frame - c->pos;
			size_t rest = c->nargs - c->argc - 1;
			if (v > room || room - v < 2 || (room - v - 2) / CODEC_MIN_BULK < rest)
				return codec_fail_size(c);
			codec_args_reserve(c, c->argc + 1);
			c->bulklen = (size_t)v;
			c->state = CS_BULK_BODY;
			continue;
		}

		case CS_BULK_BODY: {
			size_t have = avail - c->pos;
			if (have <= c->bulklen)
				break;
			if (p[c->pos + c->bulklen] != '\r')
				return codec_fail(c, "bulk string not terminated by CRLF");
			if (have == c->bulklen + 1)
				break;
			if (p[c->pos + c->bulklen + 1] != '\n')
				return codec_fail(c, "bulk string not terminated by CRLF");
			p[c->pos + c->bulklen] = '\0';
			c->argoff[c->argc] = c->pos;
			c->argvlen[c->argc] = c->bulklen;
			c->argc++;
			c->pos += c->bulklen + 2;
			if (c->argc == c->nargs)
				return codec_emit(c, out, c->pos, 0);
			c->state = CS_BULK_HDR;
			continue;
		}
		}
		/*
		 * An incomplete multibulk frame: every buffered byte is part of
		 * it, so once they reach the limit the frame can only exceed it.
		 */
		if (buffered >= c->max_frame)
			return codec_fail_size(c);
		return CODEC_MORE;
	}
}

/* ---- reply writers ---- */

/*
 * Format "<type><n>\r\n" into dst (at least 24 bytes); returns its length.
 * The digits are written from the end, two at a time from a table: replies
 * are mostly integers, and a fence has sixteen digits.
 */
size_t
codec_format_header(char *dst, char type, long long n)
{
	static const char pairs[] =
	    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
	    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
	    "8081828384858687888990919293949596979899";
	char tmp[24];
	char *p = tmp + sizeof(tmp);
	unsigned long long u = n < 0 ? 0ULL - (unsigned long long)n : (unsigned long long)n;

	*--p = '\n';
	*--p = '\r';
	while (u >= 100) {
		unsigned d = (unsigned)(u % 100) * 2;
		u /= 100;
		p -= 2;
		memcpy(p, pairs + d, 2);
	}
	if (u >= 10) {
		p -= 2;
		memcpy(p, pairs + u * 2, 2);
	} else {
		*--p = (char)('0' + u);
	}
	if (n < 0)
		*--p = '-';
	*--p = type;
	size_t len = (size_t)(tmp + sizeof(tmp) - p);
	memcpy(dst, p, len);
	return len;
}

static void
codec_put_header(struct evbuffer *out, char type, long long n)
{
	char hdr[32];
	size_t len = codec_format_header(hdr, type, n);
	(void)evbuffer_add(out, hdr, len);
}

/* A count as a header value; counts beyond LLONG_MAX cannot be sent anyway. */
static long long
codec_count(size_t n)
{
	return n > (size_t)LLONG_MAX ? LLONG_MAX : (long long)n;
}

/* Append s[0, len) with every CR and LF turned into a space. */
static void
codec_put_clean(struct evbuffer *out, const char *s, size_t len)
{
	size_t i = 0;

	while (i < len) {
		size_t run = 0;
		while (i + run < len && s[i + run] != '\r' && s[i + run] != '\n')
			run++;
		if (run > 0)
			(void)evbuffer_add(out, s + i, run);
		i += run;
		if (i < len) {
			(void)evbuffer_add(out, " ", 1);
			i++;
		}
	}
}

/* "+s\r\n"; a CR or LF in s (which the caller should not pass) becomes a space. */
void
codec_reply_simple(struct evbuffer *out, const char *s)
{
	(void)evbuffer_add(out, "+", 1);
	codec_put_clean(out, s, strlen(s));
	(void)evbuffer_add(out, "\r\n", 2);
}

/*
 * "-CODE message\r\n" (just "-message\r\n" when code is NULL or empty), the
 * message formatted from fmt, every CR and LF in it replaced by a space so
 * that it can never break the framing. A message too long for the stack
 * buffer is formatted into a heap one (truncated if that fails).
 */
void
codec_reply_error(struct evbuffer *out, const char *code, const char *fmt, ...)
{
	char small[256];
	char *msg = small;
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0) {
		small[0] = '\0';
		n = 0;
	} else if ((size_t)n >= sizeof(small)) {
		char *big = malloc((size_t)n + 1);
		if (big != NULL) {
			va_start(ap, fmt);
			vsnprintf(big, (size_t)n + 1, fmt, ap);
			va_end(ap);
			msg = big;
		} else {
			n = (int)sizeof(small) - 1;
		}
	}
	(void)evbuffer_add(out, "-", 1);
	if (code != NULL && *code != '\0') {
		codec_put_clean(out, code, strlen(code));
		(void)evbuffer_add(out, " ", 1);
	}
	codec_put_clean(out, msg, (size_t)n);
	(void)evbuffer_add(out, "\r\n", 2);
	if (msg != small)
		free(msg);
}

void
codec_reply_int(struct evbuffer *out, long long v)
{
	codec_put_header(out, ':', v);
}

void
codec_reply_bulk(struct evbuffer *out, const void *data, size_t len)
{
	char small[256];

	if (len <= sizeof(small) - 32 - 2) {
		/* One evbuffer_add for a short bulk string. */
		size_t n = codec_format_header(small, '$', (long long)len);
		if (len > 0)
			memcpy(small + n, data, len);
		small[n + len] = '\r';
		small[n + len + 1] = '\n';
		(void)evbuffer_add(out, small, n + len + 2);
		return;
	}
	codec_put_header(out, '$', codec_count(len));
	(void)evbuffer_add(out, data, len);
	(void)evbuffer_add(out, "\r\n", 2);
}

void
codec_reply_verbatim(struct evbuffer *out, const void *data, size_t len, int proto)
{
	if (proto < 3) {
		codec_reply_bulk(out, data, len);
		return;
	}
	codec_put_header(out, '=', codec_count(len + 4));
	(void)evbuffer_add(out, "txt:", 4);
	(void)evbuffer_add(out, data, len);
	(void)evbuffer_add(out, "\r\n", 2);
}

void
codec_reply_cstr(struct evbuffer *out, const char *s)
{
	codec_reply_bulk(out, s, strlen(s));
}

/* RESP3's null, or RESP2's null of the kind resp2 ("$-1\r\n" or "*-1\r\n"). */
static void
codec_put_null(struct evbuffer *out, int proto, const char *resp2)
{
	const char *s = proto >= 3 ? "_\r\n" : resp2;
	(void)evbuffer_add(out, s, strlen(s));
}

void
codec_reply_null(struct evbuffer *out, int proto)
{
	codec_put_null(out, proto, "$-1\r\n");
}

void
codec_reply_null_array(struct evbuffer *out, int proto)
{
	codec_put_null(out, proto, "*-1\r\n");
}

void
codec_reply_array(struct evbuffer *out, size_t n)
{
	codec_put_header(out, '*', codec_count(n));
}

void
codec_reply_map(struct evbuffer *out, size_t npairs, int proto)
{
	if (proto >= 3)
		codec_put_header(out, '%', codec_count(npairs));
	else
		codec_put_header(out, '*', codec_count(npairs > SIZE_MAX / 2 ? SIZE_MAX : npairs * 2));
}

void
codec_reply_push(struct evbuffer *out, size_t n, int proto)
{
	codec_put_header(out, proto >= 3 ? '>' : '*', codec_count(n));
}

char *
codec_word(const void *p, size_t len)
{
	size_t size = 4 * len + 4;
	char *esc = xmalloc(size);
	log_escape(esc, size, p, len, LOG_ESC_SPACE);
	return esc;
}
