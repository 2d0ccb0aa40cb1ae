/*
 * cmd_held — HELD: the keys held through any daemon of the fleet, a page at
 * a time, as Redis's SCAN pages the keys of a server.
 *
 *     HELD cursor [MATCH pattern] [COUNT count]
 *
 * The reply is [next cursor, [key, ...]]; cursor "0" starts, and a next
 * cursor "0" ends. On memory the pages walk the lock table (locktab_scan);
 * on a shared backend the backend's own (backend_ops.list: SCAN on Redis,
 * a range with a limit on etcd), so that a listing of many keys never holds
 * the loop or the backend long. The pattern is matched here, as fnmatch(3)
 * matches a name (a key holding a NUL byte matches only "*"), so that it
 * means the same on every backend; a page may come back empty with a cursor
 * to go on from.
 */
#include "cmd_int.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "backend.h"
#include "codec.h"
#include "log.h"
#include "num.h"
#include "session.h"
#include "xmalloc.h"

#define HELD_COUNT 10			/* COUNT when none is given, as SCAN's */
#define HELD_COUNT_MAX 10000		/* COUNT at most */
#define HELD_CURSOR_MAX 512		/* bytes of a cursor at most */
#define HELD_SYNTAX "syntax error: HELD cursor [MATCH pattern] [COUNT count]"

/* A HELD in progress: its page's keys, written as they come. */
struct held {
	struct session *s;		/* who asked; NULL once it is gone */
	const char *match;		/* the pattern (in pattern), NULL: every key */
	struct evbuffer *keys;		/* the keys that match, as bulk strings */
	size_t n;			/* how many */
	char pattern[];			/* the pattern's copy */
};

/* Whether key (len bytes) matches h's pattern. */
static bool
held_match(const struct held *h, const char *key, size_t len)
{
	if (h->match == NULL || strcmp(h->match, "*") == 0)
		return true;
	if (memchr(key, '\0', len) != NULL)
		return false;
	char *name = xmemdup(key, len);	/* NUL-terminated */
	bool ok = fnmatch(h->match, name, 0) == 0;
	free(name);
	return ok;
}

/* A key of the page (an lt_key_fn). */
static void
held_key(void *arg, const char *key, size_t len)
{
	struct held *h = arg;
	if (!held_match(h, key, len))
		return;
	codec_reply_bulk(h->keys, key, len);
	h->n++;
}

/* Write the reply [next, [keys]] and free h. */
static void
held_answer(struct held *h, const char *next)
{
	struct evbuffer *out = session_out(h->s);
	codec_reply_array(out, 2);
	codec_reply_bulk(out, next, strlen(next));
	codec_reply_array(out, h->n);
	evbuffer_add_buffer(out, h->keys);
}

static void
held_free(struct held *h)
{
	evbuffer_free(h->keys);
	free(h);
}

/* The session will not read the answer (session_abort_fn). */
static void
held_abort(void *arg, bool gone)
{
	struct held *h = arg;
	(void)gone;
	h->s = NULL;
}

/* The backend's page came (a be_list_cb). */
static void
held_listed(void *arg, const struct be_list *l)
{
	struct held *h = arg;
	struct session *s = h->s;
	if (s != NULL) {
		if (session_closing(s)) {
			/* nothing more is written to it */
		} else if (l->status != BE_OK && l->bad_cursor) {
			codec_reply_error(session_out(s), "ERR", "invalid cursor");
		} else if (l->status != BE_OK) {
			codec_reply_error(session_out(s), "BACKEND", "%s", l->why != NULL ?
			    l->why : "the lock backend failed");
		} else {
			for (size_t i = 0; i < l->n; i++)
				held_key(h, l->keys[i], l->lens[i]);
			held_answer(h, l->next);
		}
		session_resume(s);
	}
	held_free(h);
}

void
cmd_held(struct session *s, const struct codec_frame *f)
{
	struct evbuffer *out = session_out(s);
	struct backend *be = s->hub->be;
	const char *match = NULL;
	long long count = HELD_COUNT;
	for (size_t i = 2; i < f->argc; i += 2) {
		if (i + 1 >= f->argc) {
			codec_reply_error(out, "ERR", HELD_SYNTAX);
			return;
		}
		if (strcasecmp(f->argv[i], "MATCH") == 0) {
			if (memchr(f->argv[i + 1], '\0', f->argvlen[i + 1]) != NULL) {
				codec_reply_error(out, "ERR", "MATCH pattern holds a NUL byte");
				return;
			}
			match = f->argv[i + 1];
		} else if (strcasecmp(f->argv[i], "COUNT") == 0) {
			if (cmd_arg_int(f, i + 1, 1, HELD_COUNT_MAX, &count) != 0) {
				codec_reply_error(out, "ERR", "COUNT must be a number from 1 to 10000");
				return;
			}
		} else {
			codec_reply_error(out, "ERR", HELD_SYNTAX);
			return;
		}
	}
	if (f->argvlen[1] == 0 || f->argvlen[1] > HELD_CURSOR_MAX ||
	    memchr(f->argv[1], '\0', f->argvlen[1]) != NULL) {
		codec_reply_error(out, "ERR", "invalid cursor");
		return;
	}
	size_t plen = match != NULL ? strlen(match) + 1 : 0;
	struct held *h = xcalloc(1, sizeof(*h) + plen);
	h->s = s;
	h->keys = evbuffer_new();
	if (match != NULL) {
		memcpy(h->pattern, match, plen);
		h->match = h->pattern;
	}
	if (be->ops->list == NULL) {
		/* the lock table knows every key held */
		long long cursor;
		char next[24];
		if (num_parse(f->argv[1], f->argvlen[1], 0, INT64_MAX, &cursor) != NUM_OK) {
			codec_reply_error(out, "ERR", "invalid cursor");
			held_free(h);
			return;
		}
		uint64_t c = locktab_scan(s->hub->lt, (uint64_t)cursor, (size_t)count, held_key, h);
		snprintf(next, sizeof(next), "%" PRIu64, c);
		held_answer(h, next);
		held_free(h);
		return;
	}
	session_wait(s, SESSION_WAIT_BACKEND);
	session_wait_abort(s, held_abort, h);
	be->ops->list(be, f->argv[1], (size_t)count, held_listed, h);
}
