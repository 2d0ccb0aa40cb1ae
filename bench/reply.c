/*
 * reply — the RESP reply reader of dlock-bench (see reply.h).
 */
#include "reply.h"

#include <limits.h>
#include <string.h>

#include "num.h"

#define REPLY_MAX_BULK (512L * 1024 * 1024)	/* Redis's own limit */

/* The line at buf (without its CR LF) ends at *eol; 0 if incomplete. */
static int
line_end(const char *buf, size_t len, size_t *eol)
{
	const char *cr = memchr(buf, '\r', len);
	if (cr == NULL)
		return 0;
	size_t i = (size_t)(cr - buf);
	if (i + 1 >= len)
		return 0;
	if (buf[i + 1] != '\n')
		return -1;
	*eol = i;
	return 1;
}

static ssize_t
scan(const char *buf, size_t len, struct reply *r, int depth)
{
	size_t eol;
	int rc;
	long long n;

	if (len == 0)
		return 0;
	if ((rc = line_end(buf, len, &eol)) <= 0)
		return rc;
	if (eol == 0)
		return -1;
	size_t used = eol + 2;
	const char *text = buf + 1;
	size_t tlen = eol - 1;

	memset(r, 0, sizeof(*r));
	switch (buf[0]) {
	case '+':
	case '-':
		r->kind = buf[0] == '+' ? REPLY_STATUS : REPLY_ERROR;
		r->str = text;
		r->len = tlen;
		return (ssize_t)used;
	case ':':
		if (num_parse(text, tlen, LLONG_MIN, LLONG_MAX, &r->integer) != NUM_OK)
			return -1;
		r->kind = REPLY_INTEGER;
		return (ssize_t)used;
	case '_':
		if (tlen != 0)
			return -1;
		r->kind = REPLY_NULL;
		return (ssize_t)used;
	case '$':
		if (num_parse(text, tlen, -1, REPLY_MAX_BULK, &n) != NUM_OK)
			return -1;
		if (n < 0) {
			r->kind = REPLY_NULL;
			return (ssize_t)used;
		}
		if (len < used + (size_t)n + 2)
			return 0;
		if (buf[used + (size_t)n] != '\r' || buf[used + (size_t)n + 1] != '\n')
			return -1;
		r->kind = REPLY_BULK;
		r->str = buf + used;
		r->len = (size_t)n;
		return (ssize_t)(used + (size_t)n + 2);
	case '*':
		if (num_parse(text, tlen, -1, INT_MAX, &n) != NUM_OK)
			return -1;
		if (n < 0) {
			r->kind = REPLY_NULL;
			return (ssize_t)used;
		}
		if (depth >= REPLY_MAX_DEPTH)
			return -1;
		for (long long i = 0; i < n; i++) {
			struct reply elem;
			ssize_t got = scan(buf + used, len - used, &elem, depth + 1);
			if (got <= 0)
				return got;
			used += (size_t)got;
		}
		memset(r, 0, sizeof(*r));
		r->kind = REPLY_ARRAY;
		r->integer = n;
		return (ssize_t)used;
	default:
		return -1;
	}
}

ssize_t
reply_scan(const char *buf, size_t len, struct reply *r)
{
	return scan(buf, len, r, 0);
}
