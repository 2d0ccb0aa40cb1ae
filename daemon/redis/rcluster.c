/*
 * rcluster — hash slots, tags, slot maps and redirections of a Redis
 * Cluster (rcluster.h).
 */
#include "rcluster.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "num.h"
#include "xmalloc.h"

unsigned
rcluster_crc16(const char *buf, size_t len)
{
	static uint16_t table[256];
	static bool made;
	uint16_t crc = 0;
	if (!made) {
		for (unsigned i = 0; i < 256; i++) {
			uint16_t c = (uint16_t)(i << 8);
			for (int b = 0; b < 8; b++)
				c = (uint16_t)(c & 0x8000 ? (c << 1) ^ 0x1021 : c << 1);
			table[i] = c;
		}
		made = true;
	}
	for (size_t i = 0; i < len; i++)
		crc = (uint16_t)((crc << 8) ^ table[((crc >> 8) ^ (unsigned char)buf[i]) & 0xff]);
	return crc;
}

unsigned
rcluster_slot(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len), *close;
	if (open != NULL) {
		size_t rest = len - (size_t)(open - key) - 1;
		close = memchr(open + 1, '}', rest);
		if (close != NULL && close > open + 1)
			return rcluster_crc16(open + 1, (size_t)(close - open - 1)) % RC_SLOTS;
	}
	return rcluster_crc16(key, len) % RC_SLOTS;
}

size_t
rcluster_escape(char *out, const char *key, size_t keylen)
{
	size_t n = 0;
	for (size_t i = 0; i < keylen; i++) {
		if (key[i] == '%' || key[i] == '}') {
			memcpy(out + n, key[i] == '%' ? "%25" : "%7D", 3);
			n += 3;
			continue;
		}
		out[n++] = key[i];
	}
	return n;
}

unsigned
rcluster_lock_slot(const char *key, size_t keylen)
{
	char stack[256], *buf = stack;
	unsigned slot;
	size_t n;
	if (RCLUSTER_ESCAPED_MAX(keylen) > sizeof(stack))
		buf = xmalloc(RCLUSTER_ESCAPED_MAX(keylen));
	n = rcluster_escape(buf, key, keylen);
	slot = rcluster_crc16(buf, n) % RC_SLOTS;
	if (buf != stack)
		free(buf);
	return slot;
}

const char *
rcluster_slot_tag(unsigned slot)
{
	static const char alphabet[] = "0123456789abcdefghijklmnopqrstuvwxyz";
	static char (*tags)[RC_TAG_MAX];
	if (tags == NULL) {
		/* every string of 1, 2, 3, then 4 characters in order, until
		 * each slot has one (4 characters reach every slot) */
		size_t left = RC_SLOTS;
		tags = xcalloc(RC_SLOTS, sizeof(*tags));
		for (size_t len = 1; len < RC_TAG_MAX && left > 0; len++) {
			size_t count = 1;
			for (size_t i = 0; i < len; i++)
				count *= sizeof(alphabet) - 1;
			for (size_t k = 0; k < count && left > 0; k++) {
				char s[RC_TAG_MAX] = { 0 };
				size_t v = k;
				for (size_t i = len; i-- > 0; v /= sizeof(alphabet) - 1)
					s[i] = alphabet[v % (sizeof(alphabet) - 1)];
				unsigned sl = rcluster_crc16(s, len) % RC_SLOTS;
				if (tags[sl][0] != '\0')
					continue;
				memcpy(tags[sl], s, RC_TAG_MAX);
				left--;
			}
		}
	}
	return tags[slot % RC_SLOTS];
}

/* A string element of a reply array, or NULL. */
static const redisReply *
str_at(const redisReply *a, size_t i)
{
	if (a->type != REDIS_REPLY_ARRAY || i >= a->elements)
		return NULL;
	return a->element[i]->type == REDIS_REPLY_STRING ? a->element[i] : NULL;
}

/* Order ranges by their first slot. */
static int
range_cmp(const void *a, const void *b)
{
	const struct rc_range *x = a, *y = b;
	return x->first < y->first ? -1 : x->first > y->first;
}

int
rcluster_parse_slots(const redisReply *rep, const char *asked_host, struct rc_range **out,
    size_t *n, const char **why)
{
	struct rc_range *r;
	*out = NULL;
	*n = 0;
	if (rep->type == REDIS_REPLY_ERROR) {
		*why = "CLUSTER SLOTS answered an error (is cluster mode on?)";
		return -1;
	}
	if (rep->type != REDIS_REPLY_ARRAY) {
		*why = "CLUSTER SLOTS did not answer an array";
		return -1;
	}
	r = xcalloc(rep->elements + 1, sizeof(*r));
	for (size_t i = 0; i < rep->elements; i++) {
		const redisReply *e = rep->element[i], *m, *host;
		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER ||
		    (m = e->element[2])->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
		    m->element[1]->type != REDIS_REPLY_INTEGER || (host = str_at(m, 0)) == NULL ||
		    e->element[0]->integer < 0 || e->element[1]->integer >= RC_SLOTS ||
		    e->element[0]->integer > e->element[1]->integer ||
		    m->element[1]->integer < 1 || m->element[1]->integer > 65535) {
			free(r);
			*why = "CLUSTER SLOTS answered a range it should not";
			return -1;
		}
		r[*n].first = (unsigned)e->element[0]->integer;
		r[*n].last = (unsigned)e->element[1]->integer;
		snprintf(r[*n].host, sizeof(r[*n].host), "%s", host->len == 0 ||
		    strcmp(host->str, "?") == 0 ? asked_host : host->str);
		r[*n].port = (int)m->element[1]->integer;
		(*n)++;
	}
	qsort(r, *n, sizeof(*r), range_cmp);
	for (size_t i = 1; i < *n; i++)
		if (r[i].first <= r[i - 1].last) {
			free(r);
			*n = 0;
			*why = "CLUSTER SLOTS answered overlapping ranges";
			return -1;
		}
	*out = r;
	return 0;
}

enum rc_redirect
rcluster_redirect(const char *err, const char *asked_host, unsigned *slot, char *host,
    size_t hostlen, int *port)
{
	const char *p, *colon, *end;
	long long v;
	enum rc_redirect kind;
	if (strncmp(err, "TRYAGAIN", 8) == 0 || strncmp(err, "CLUSTERDOWN", 11) == 0)
		return RC_RETRY;
	if (strncmp(err, "MOVED ", 6) == 0)
		kind = RC_MOVED, p = err + 6;
	else if (strncmp(err, "ASK ", 4) == 0)
		kind = RC_ASK, p = err + 4;
	else
		return RC_NONE;
	/* "<slot> <host>:<port>", the host maybe empty, an IPv6 address, or
	 * a name: the port is after the last colon */
	end = strchr(p, ' ');
	if (end == NULL || num_parse(p, (size_t)(end - p), 0, RC_SLOTS - 1, &v) != NUM_OK)
		return RC_NONE;
	*slot = (unsigned)v;
	p = end + 1;
	colon = strrchr(p, ':');
	if (colon == NULL || num_parse(colon + 1, strlen(colon + 1), 1, 65535, &v) != NUM_OK)
		return RC_NONE;
	*port = (int)v;
	if (colon == p)
		snprintf(host, hostlen, "%s", asked_host);
	else if (*p == '[' && colon[-1] == ']')
		snprintf(host, hostlen, "%.*s", (int)(colon - p - 2), p + 1);
	else
		snprintf(host, hostlen, "%.*s", (int)(colon - p), p);
	return kind;
}
