/*
 * who — who holds a lease, kept with it in a shared backend (who.h).
 */
#include "who.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "token.h"

void
who_daemon_init(struct who_daemon *d, const char *addr)
{
	char t[TOKEN_LEN + 1];
	token_new(t);
	memcpy(d->id, t, WHO_ID_LEN);
	d->id[WHO_ID_LEN] = '\0';
	if (gethostname(d->host, sizeof(d->host)) != 0)
		snprintf(d->host, sizeof(d->host), "?");
	d->host[sizeof(d->host) - 1] = '\0';
	snprintf(d->addr, sizeof(d->addr), "%s", addr != NULL ? addr : "");
}

/* Append field s (at most max bytes of it) and a tab at *p, within end. */
static void
put(char **p, const char *end, const char *s, size_t max)
{
	for (size_t i = 0; s != NULL && s[i] != '\0' && i < max && *p + 1 < end; i++)
		*(*p)++ = s[i] == '\t' || s[i] == '\n' || s[i] == '\r' ? '?' : s[i];
	if (*p + 1 < end)
		*(*p)++ = '\t';
}

size_t
who_format(char *buf, size_t len, const struct who_daemon *d, uint64_t session,
    const char *name, const char *peer, uint64_t since_ms, uint64_t ttl_ms, int detached)
{
	char *p = buf, *end = buf + len, n[3][24];
	snprintf(n[0], sizeof(n[0]), "%" PRIu64, session);
	snprintf(n[1], sizeof(n[1]), "%" PRIu64, since_ms);
	snprintf(n[2], sizeof(n[2]), "%" PRIu64, ttl_ms);
	put(&p, end, "w1", 2);
	put(&p, end, d->id, sizeof(d->id));
	put(&p, end, d->host, sizeof(d->host));
	put(&p, end, d->addr, sizeof(d->addr));
	put(&p, end, n[0], sizeof(n[0]));
	put(&p, end, name, 128);
	put(&p, end, peer, 128);
	put(&p, end, n[1], sizeof(n[1]));
	put(&p, end, n[2], sizeof(n[2]));
	put(&p, end, detached ? "1" : "0", 1);
	p[-1] = '\0';	/* the last tab */
	return (size_t)(p - 1 - buf);
}

bool
who_parse(const char *s, size_t len, struct who *w)
{
	const char *end = s + len, *p;
	if (len < 3 || memcmp(s, "w1\t", 3) != 0)
		return false;
	s += 3;
	for (int i = 0; i < WHO_NFIELDS; i++) {
		p = memchr(s, '\t', (size_t)(end - s));
		if (p == NULL && i < WHO_NFIELDS - 1)
			return false;
		if (p == NULL)
			p = end;
		w->f[i] = s;
		w->len[i] = (size_t)(p - s);
		s = p < end ? p + 1 : end;
	}
	return true;
}

uint64_t
who_num(const struct who *w, enum who_field f)
{
	uint64_t v = 0;
	for (size_t i = 0; i < w->len[f]; i++) {
		if (w->f[f][i] < '0' || w->f[f][i] > '9' || v > (UINT64_MAX - 9) / 10)
			return 0;
		v = v * 10 + (uint64_t)(w->f[f][i] - '0');
	}
	return v;
}

uint64_t
who_wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

bool
who_is(const struct who *w, const struct who_daemon *d)
{
	return w->len[WHO_DAEMON] == strlen(d->id) &&
	    memcmp(w->f[WHO_DAEMON], d->id, w->len[WHO_DAEMON]) == 0;
}
