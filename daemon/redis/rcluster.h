/*
 * rcluster — what a client of a Redis Cluster computes and reads, apart from
 * the connections (rnode) and the lock policy (be_redis): the hash slot of a
 * key, the hash tag of a lock's keys, a channel name per slot, the slot map
 * of a CLUSTER SLOTS reply, and the redirections of an error reply.
 *
 * A cluster splits keys into RC_SLOTS slots, the slot of a key being CRC16
 * of its hash tag (the bytes between its first '{' and the first '}' after
 * it, when there are some) or of the whole key, modulo RC_SLOTS. A script's
 * keys must share one slot: every key of one lock carries the same tag, the
 * lock's key escaped ('%' as "%25", '}' as "%7D"), so that the tag ends at
 * its own '}' and is never empty.
 */
#ifndef DLOCKD_RCLUSTER_H
#define DLOCKD_RCLUSTER_H

#include <stdbool.h>
#include <stddef.h>

struct redisReply;

#define RC_SLOTS 16384			/* the slots of a cluster */
#define RC_TAG_MAX 5			/* a slot's channel tag: 4 characters at most, and NUL */

/* CRC16 (XMODEM) of buf, as Redis computes it. */
unsigned rcluster_crc16(const char *buf, size_t len);
/* The slot of a Redis key name, hash tags honoured. */
unsigned rcluster_slot(const char *key, size_t len);

/* Bytes rcluster_escape writes for key at most. */
#define RCLUSTER_ESCAPED_MAX(keylen) (3 * (keylen))
/* Write key escaped for a hash tag ('%' -> "%25", '}' -> "%7D") to out
 * (RCLUSTER_ESCAPED_MAX(keylen) bytes); its length. */
size_t rcluster_escape(char *out, const char *key, size_t keylen);
/* The slot of every Redis key of lock key (its escaped form's CRC16). */
unsigned rcluster_lock_slot(const char *key, size_t keylen);

/* A short tag of slot: the first string over "0-9a-z", shortest first,
 * whose CRC16 falls in slot (a channel named "...{tag}" is in that slot).
 * Static storage. */
const char *rcluster_slot_tag(unsigned slot);

/* One range of slots of a CLUSTER SLOTS reply and its master. */
struct rc_range {
	unsigned first, last;		/* the slots, both included */
	char host[256];			/* the master's address or name */
	int port;			/* its port */
};

/* The master ranges of a CLUSTER SLOTS reply into *out (allocated, the
 * caller frees it; sorted by first slot), their count into *n. A master
 * that gives no host (an empty or "?" one) is at asked_host, the server
 * that answered. 0; -1 with *why when the reply is not one. */
int rcluster_parse_slots(const struct redisReply *rep, const char *asked_host,
    struct rc_range **out, size_t *n, const char **why);

/* What an error reply asks of a cluster client. */
enum rc_redirect {
	RC_NONE,			/* not a redirection: an error of the call */
	RC_MOVED,			/* the slot is elsewhere for good: host, port */
	RC_ASK,				/* this request only: ASKING at host, port */
	RC_RETRY			/* TRYAGAIN, CLUSTERDOWN: again later */
};

/* What error reply err (its text) asks: for MOVED and ASK, the slot, host
 * (hostlen bytes at most, NUL included) and port. An empty host is
 * asked_host. */
enum rc_redirect rcluster_redirect(const char *err, const char *asked_host, unsigned *slot,
    char *host, size_t hostlen, int *port);

#endif
