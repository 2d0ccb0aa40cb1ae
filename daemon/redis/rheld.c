/*
 * rheld — HELD on the Redis backends (backend_ops.list): the lock keys in
 * Redis, a SCAN page at a time.
 *
 * A held key is its lease's Redis key "<prefix>l:<key>" (a cluster's:
 * "<prefix>l:{<key escaped>}"), which expires with its last lease. A HELD
 * page is SCANs with MATCH "<prefix>l:*" on one server, one after the
 * other, each of RD_SCAN_STEP at most, until they add up to the caller's
 * COUNT or the server's keys end: a SCAN never blocks Redis longer than a
 * few of its buckets, the other clients' calls run between two of them,
 * and its cursor survives the server's resizes (a key there throughout is
 * seen at least once). The cursor given to the client is "<node>-<SCAN cursor>":
 * the node's place in r->nodes and the server's own cursor. A cluster's
 * masters are scanned one after the other (the topology's lists hook);
 * redlock scans one node, the first up when the listing starts, so a key
 * whose lease that node missed (it was down then) is not listed.
 */
#include "rd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "num.h"
#include "xmalloc.h"

#define RD_SCAN_STEP 100		/* COUNT of one SCAN at most */

/* A HELD page in flight. */
struct rd_held {
	struct rd *r;
	be_list_cb *cb;			/* whom to tell */
	void *arg;
	size_t node;			/* the node scanned, in r->nodes */
	size_t left;			/* COUNT still to scan for the page */
	char *match;			/* the SCAN's pattern */
	char *names;			/* the lock keys found so far, end to end */
	size_t used, room;		/* bytes of names used and allocated */
	size_t *lens;			/* each key's length */
	size_t n, cap;			/* keys found, and room in lens */
	char why[256];			/* a failure before sending */
	bool bad_cursor;		/* ... the cursor is not one of ours */
};

static void
held_free(struct rd_held *h)
{
	free(h->match);
	free(h->names);
	free(h->lens);
	free(h);
}

/* Whether node i's keys are listed (every node, unless the topology
 * says; redlock: the one its cursor names). */
static bool
listed(const struct rd *r, size_t i)
{
	return r->topo->lists == NULL || r->topo->lists(r, r->nodes[i]);
}

/* The first node from i on whose keys are listed, or r->nnodes. */
static size_t
next_listed(const struct rd *r, size_t i)
{
	while (i < r->nnodes && !listed(r, i))
		i++;
	return i;
}

/* Tell h's caller of a failure (from the loop) and free h. */
static void
held_failed(evutil_socket_t fd, short what, void *arg)
{
	struct rd_held *h = arg;
	struct be_list l = { .status = BE_ERROR, .why = h->why, .bad_cursor = h->bad_cursor };
	(void)fd;
	(void)what;
	h->cb(h->arg, &l);
	held_free(h);
}

static void
held_fail(struct rd_held *h, const char *why)
{
	struct timeval now = { 0, 0 };
	snprintf(h->why, sizeof(h->why), "%s", why);
	if (event_base_once(h->r->be->base, -1, EV_TIMEOUT, held_failed, h, &now) != 0)
		held_failed(-1, 0, h);
}

/* The lock key in a Redis key name (len bytes) after "<prefix>l:": as is,
 * or a cluster's "{escaped}" unescaped, into out (len bytes at least); its
 * length, or -1 when the name is not one of a lock. */
static long
lock_name(const struct rd *r, const char *name, size_t len, char *out)
{
	if (!r->topo->hash_tags) {
		memcpy(out, name, len);
		return (long)len;
	}
	if (len < 2 || name[0] != '{' || name[len - 1] != '}')
		return -1;
	size_t n = 0;
	for (size_t i = 1; i + 1 < len; i++) {
		if (name[i] == '%' && i + 2 < len - 1) {
			char hex[3] = { name[i + 1], name[i + 2], '\0' };
			char *end;
			long v = strtol(hex, &end, 16);
			if (*end != '\0')
				return -1;
			out[n++] = (char)v;
			i += 2;
		} else {
			out[n++] = name[i];
		}
	}
	return (long)n;
}

static int held_send(struct rd_held *h, const char *scan);

/* Keep the lock keys of a SCAN's reply (keys) in h. */
static void
held_keep(struct rd_held *h, const redisReply *keys)
{
	const struct rd *r = h->r;
	size_t skip = strlen(r->set->key_prefix) + 2;
	for (size_t i = 0; i < keys->elements; i++) {
		const redisReply *k = keys->element[i];
		long len;
		if (k->type != REDIS_REPLY_STRING || k->len < skip)
			continue;
		if (h->used + k->len > h->room) {
			h->room = 2 * (h->used + k->len);
			h->names = xrealloc(h->names, h->room);
		}
		if (h->n == h->cap) {
			h->cap = h->cap != 0 ? 2 * h->cap : 16;
			h->lens = xreallocarray(h->lens, h->cap, sizeof(*h->lens));
		}
		if ((len = lock_name(r, k->str + skip, k->len - skip, h->names + h->used)) < 0)
			continue;
		h->lens[h->n++] = (size_t)len;
		h->used += (size_t)len;
	}
}

/* Tell h's caller the page, next its cursor, and free h. */
static void
held_tell(struct rd_held *h, const char *next)
{
	const char **keys = xcalloc(h->n + 1, sizeof(*keys));
	size_t at = 0;
	for (size_t i = 0; i < h->n; i++) {
		keys[i] = h->names + at;
		at += h->lens[i];
	}
	struct be_list l = { .status = BE_OK, .next = next, .n = h->n, .keys = keys,
		.lens = h->lens };
	h->cb(h->arg, &l);
	free(keys);
	held_free(h);
}

/* A SCAN's reply: more of the page, or its end. */
static void
held_scanned(void *arg, const redisReply *rep, const char *why)
{
	struct rd_held *h = arg;
	struct rd *r = h->r;
	char next[48];
	if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
	    rep->element[0]->type != REDIS_REPLY_STRING ||
	    rep->element[1]->type != REDIS_REPLY_ARRAY) {
		char buf[512];
		snprintf(buf, sizeof(buf), "%s node %s: %.150s", r->topo->name,
		    h->node < r->nnodes ? r->nodes[h->node]->addr : "?",
		    rep != NULL && rep->type == REDIS_REPLY_ERROR ? rep->str :
		    why != NULL ? why : "unexpected reply to SCAN");
		struct be_list l = { .status = BE_ERROR, .why = buf };
		h->cb(h->arg, &l);
		held_free(h);
		return;
	}
	held_keep(h, rep->element[1]);
	const char *scan = rep->element[0]->str;
	h->left -= h->left < RD_SCAN_STEP ? h->left : RD_SCAN_STEP;
	if (strcmp(scan, "0") != 0 && strlen(scan) < 30) {
		/* the server's keys go on: another step, or the next page */
		if (h->left > 0 && !r->destroying && held_send(h, scan) == 0)
			return;
		snprintf(next, sizeof(next), "%zu-%s", h->node, scan);
	} else {
		/* the next node's start, or the end */
		size_t j = r->topo->count_answers ? r->nnodes : next_listed(r, h->node + 1);
		if (j < r->nnodes)
			snprintf(next, sizeof(next), "%zu-0", j);
		else
			snprintf(next, sizeof(next), "0");
	}
	held_tell(h, next);
}

/* Send h's next SCAN from the server's cursor scan: 0, or -1 (not up). */
static int
held_send(struct rd_held *h, const char *scan)
{
	struct rd_node *nd = h->r->nodes[h->node];
	char countbuf[24];
	snprintf(countbuf, sizeof(countbuf), "%zu", h->left < RD_SCAN_STEP ? h->left :
	    (size_t)RD_SCAN_STEP);
	const char *argv[] = { "SCAN", scan, "MATCH", h->match, "COUNT", countbuf };
	size_t argvlen[] = { 4, strlen(scan), 5, strlen(h->match), 5, strlen(countbuf) };
	if (nd->node == NULL || !rnode_up(nd->node))
		return -1;
	return rnode_command(nd->node, 6, argv, argvlen, held_scanned, h);
}

void
rd_list(struct backend *be, const char *cursor, size_t count, be_list_cb *cb, void *arg)
{
	struct rd *r = be->priv;
	struct rd_held *h = xcalloc(1, sizeof(*h));
	const char *scan = "0", *dash = strchr(cursor, '-');
	long long node = 0, c;
	h->r = r;
	h->cb = cb;
	h->arg = arg;
	if (strcmp(cursor, "0") == 0) {
		/* redlock: the first node up; others: the first listed */
		if (r->topo->count_answers) {
			while ((size_t)node < r->nnodes && !rnode_up(r->nodes[node]->node))
				node++;
		} else {
			node = (long long)next_listed(r, 0);
		}
	} else if (dash == NULL ||
	    num_parse(cursor, (size_t)(dash - cursor), 0, (long long)r->nnodes - 1, &node) !=
	    NUM_OK || num_parse(dash + 1, strlen(dash + 1), 0, INT64_MAX, &c) != NUM_OK) {
		h->bad_cursor = true;
		held_fail(h, "invalid cursor");
		return;
	} else {
		scan = dash + 1;
	}
	h->node = (size_t)node;
	if (h->node >= r->nnodes) {
		held_fail(h, "redis: no node is connected");
		return;
	}
	struct rd_node *nd = r->nodes[h->node];
	char *p = h->match = xmalloc(2 * strlen(r->set->key_prefix) + 8);
	/* the prefix with SCAN's pattern characters escaped, then "l:*" */
	for (const char *q = r->set->key_prefix; *q != '\0'; q++) {
		if (strchr("*?[]\\", *q) != NULL)
			*p++ = '\\';
		*p++ = *q;
	}
	memcpy(p, "l:*", 4);
	h->left = count > 0 ? count : 1;
	if (held_send(h, scan) < 0) {
		char buf[sizeof(h->why)];
		snprintf(buf, sizeof(buf), "%s node %.150s: not connected", r->topo->name, nd->addr);
		held_fail(h, buf);
	}
}
