/*
 * who — who holds a lease, as a shared backend keeps it with the lease so
 * that every daemon of a fleet can tell (STATUS on any daemon).
 *
 * One line of tab-separated fields: "w1", then the daemon's instance id,
 * host and address, the session's id, name and address, when the lease was
 * asked for (ms since the epoch, the daemon's clock), the TTL asked for
 * (ms), and 1 for a DETACH lock, else 0. No field holds a tab or a line end
 * (each is written as '?'); a later format may add fields after these.
 */
#ifndef DLOCKD_WHO_H
#define DLOCKD_WHO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WHO_MAX 640			/* a description and its NUL, at most */
#define WHO_ID_LEN 16			/* hex characters of an instance id */

enum who_field {
	WHO_DAEMON, WHO_HOST, WHO_DAEMON_ADDR, WHO_SESSION, WHO_NAME, WHO_ADDR,
	WHO_SINCE, WHO_TTL, WHO_DETACHED, WHO_NFIELDS
};

/* This daemon, as its descriptions name it. */
struct who_daemon {
	char id[WHO_ID_LEN + 1];	/* random, drawn at start */
	char host[65];			/* gethostname(), cut */
	char addr[129];			/* where clients reach it, cut */
};

/* A description read (who_parse): each field points into the text. */
struct who {
	const char *f[WHO_NFIELDS];
	size_t len[WHO_NFIELDS];
};

/* Draw d's instance id and read its host; addr is its first listener (NULL:
 * none). */
void who_daemon_init(struct who_daemon *d, const char *addr);
/* Describe a lease taken by session (name and peer may be NULL) of daemon d
 * into buf (WHO_MAX bytes at least); its length. */
size_t who_format(char *buf, size_t len, const struct who_daemon *d, uint64_t session,
    const char *name, const char *peer, uint64_t since_ms, uint64_t ttl_ms, int detached);
/* Read the description s (len bytes) into w; false when it is not one. */
bool who_parse(const char *s, size_t len, struct who *w);
/* A numeric field of w, 0 when it is none. */
uint64_t who_num(const struct who *w, enum who_field f);
/* The time of day, ms since the epoch (CLOCK_REALTIME). */
uint64_t who_wall_ms(void);
/* Whether w was written by daemon d. */
bool who_is(const struct who *w, const struct who_daemon *d);

#endif
