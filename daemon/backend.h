/*
 * backend — the asynchronous operations every lock backend provides.
 *
 * The lock table owns local state (holders, FIFO waiters, sessions) and asks
 * the backend only for what must be agreed beyond this process: take a lease,
 * renew it, release it, hand it over. Each operation completes through its
 * callback exactly once, always later from the event loop, never from inside
 * the call. Adding a backend is one new file and one line in backend.c.
 *
 * A backend owns everything between daemons: its wire format, its server's
 * clock, and its policy of fairness towards other daemons (when a local
 * handoff gives way to them, and for how long). It must not reach into the
 * lock table beyond the calls of struct backend_up.
 */
#ifndef DLOCKD_BACKEND_H
#define DLOCKD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

struct evbuffer;
struct event_base;
struct conf;
struct conf_setting;

/* How a key is held. */
enum lock_mode {
	LOCK_EXCLUSIVE,		/* one holder */
	LOCK_SHARED,		/* many shared holders, or one exclusive */
	LOCK_SEMAPHORE		/* up to limit holders */
};

#define TOKEN_LEN 32		/* hex characters in a token */

/* One lease as the backend sees it. Strings are only read during the call. */
struct be_lock {
	const char *key;	/* binary-safe key */
	size_t keylen;		/* its length */
	enum lock_mode mode;	/* how it is held */
	unsigned limit;		/* permits, for LOCK_SEMAPHORE */
	const char *token;	/* the owner value: TOKEN_LEN hex chars, NUL-terminated */
	uint64_t ttl_ms;	/* lease to take or renew: the holder's TTL plus the
				 * lock-delay, which the lock table adds */
	unsigned handoffs;	/* transfer's from: how many handoffs of this key
				 * in a row precede this one (0: from's lease was
				 * acquired); 0 elsewhere */
	int detached;		/* 1: a DETACH lock, whose lease must not end
				 * with this process (it is never renewed but by
				 * EXTEND); 0: bound to a session */
	int try_once;		/* acquire: 1 for a try (WAIT 0): when it answers
				 * BE_BUSY nothing of it may be left in the
				 * backend (no place in a queue) */
	unsigned queued;	/* acquire, and transfer's to: how many local
				 * waiters queue behind this one (a hint: the
				 * backend may prepare that many handoffs) */
	const char *value;	/* acquire, transfer's to, proclaim: a
				 * CAMPAIGN's value, kept with the exclusive
				 * lease for other daemons' observers (a
				 * backend with a leader op); NULL: a plain
				 * lock, which has none */
	size_t valuelen;	/* its length */
	const char *who;	/* acquire, transfer's to: who takes the lease
				 * (who.h), kept with it for other daemons'
				 * STATUS (ops->holders); NULL: nobody told */
};

enum be_status {
	BE_OK,			/* done */
	BE_BUSY,		/* acquire: held elsewhere; transfer: see there. A
				 * wakeup for this key will follow */
	BE_NOTOWNER,		/* the lease is not ours any more */
	BE_ERROR		/* backend unavailable or failed */
};

/*
 * The outcome of one operation; valid during the callback only.
 *
 * valid_ms is the backend's promise about the lease after a BE_OK acquire,
 * transfer or renew: nobody else can be granted the key for at least
 * valid_ms counted from the moment the lock table made the call (its clock,
 * before anything was sent). A backend whose lease starts when the server
 * runs the request promises the TTL; one that must allow for clock drift or
 * for time spent reaching a quorum promises less. It must never promise more,
 * and a backend must never let a later request shorten a lease below what an
 * earlier reply promised (leases only grow until they are released).
 */
struct be_reply {
	enum be_status status;
	uint64_t fence;		/* acquire/transfer: the fence of the new holding */
	uint64_t valid_ms;	/* acquire/transfer/renew BE_OK: see above */
	const char *why;	/* BE_ERROR/BE_NOTOWNER: a sentence, or NULL */
	int lasting;		/* BE_ERROR: 1 when trying again cannot help until
				 * the configuration changes (authentication
				 * refused, a certificate not verified, an ACL
				 * that forbids the call); 0: the backend may
				 * come back (unreachable, no reply, down) */
	int forced;		/* renew BE_NOTOWNER: 1 when the lease was broken
				 * by UNLOCK FORCE through another daemon (why
				 * says by whom): the lock table tells its
				 * holder, then releases it (a broken lease
				 * blocks others until then) */
	unsigned broken;	/* force BE_OK: the leases it broke */
};

typedef void be_cb(void *arg, const struct be_reply *reply);

/* Who leads a key as the backend knows it, every daemon's leases counted;
 * valid during the callback only. */
struct be_leader {
	enum be_status status;	/* BE_OK, or BE_ERROR (why) */
	const char *value;	/* the exclusive lease's CAMPAIGN value, NULL
				 * when it has none (a plain lock) or the key
				 * is free */
	size_t valuelen;	/* its length */
	uint64_t term;		/* the exclusive lease's fence, the highest
				 * fence of the shared leases, 0 when free */
	enum lock_mode mode;	/* how it is held, when holders > 0 */
	unsigned holders;	/* leases of the key */
	uint64_t version;	/* grows with every change of the key in the
				 * backend (its own count, any daemon's
				 * change), so that a state told late is known
				 * to be older than one read */
	const char *why;	/* BE_ERROR: a sentence, or NULL */
};
typedef void be_leader_cb(void *arg, const struct be_leader *l);

/* One lease of a key as the backend keeps it, any daemon's (ops->holders). */
struct be_holder {
	enum lock_mode mode;	/* how it is held */
	uint64_t fence;		/* the fence of its grant in the backend, 0:
				 * unknown */
	int64_t lease_ms;	/* what is left of it in the backend's clock,
				 * -1: unknown */
	const char *who;	/* be_lock.who of its grant (who.h), NULL: not
				 * told */
	size_t wholen;		/* its length */
};

/* The leases of a key (ops->holders); valid during the callback only. */
struct be_holders {
	enum be_status status;	/* BE_OK, or BE_ERROR (why) */
	const char *why;	/* BE_ERROR: a sentence, or NULL */
	size_t n;		/* how many leases */
	const struct be_holder *h; /* them */
};
typedef void be_holders_cb(void *arg, const struct be_holders *hs);

/* A page of the keys held in the backend (ops->list); valid during the
 * callback only. */
struct be_list {
	enum be_status status;	/* BE_OK, or BE_ERROR (why) */
	const char *why;	/* BE_ERROR: a sentence, or NULL */
	const char *next;	/* BE_OK: the cursor to go on from, "0" at the end */
	size_t n;		/* keys on the page */
	const char *const *keys; /* them (binary-safe) */
	const size_t *lens;	/* their lengths */
	int bad_cursor;		/* BE_ERROR: the cursor is not one of the backend's */
};
typedef void be_list_cb(void *arg, const struct be_list *l);

/* One form of the URLs a backend's -b takes, as dlockd -h shows it. */
struct backend_url {
	const char *scheme;		/* what such a URL starts with (any case):
					 * "rediss://"; NULL ends a list */
	const char *rest;		/* what follows it, in -h's notation:
					 * "[user:password@]host[:port][/db]" */
	const char *note;		/* what it means, a few words, or NULL */
};

/* Takes one setting of a -b URL: its name under "backend." and its value
 * as the configuration file would write it. */
typedef void backend_url_set(void *arg, const char *name, const char *value);

struct backend;

/* The operations table of one backend. */
struct backend_ops {
	const char *name;	/* "memory", ... */
	/* 1 when leases live in this process and cannot run out while their
	 * session does: bound holdings are then never renewed nor lost */
	int local_leases;
	/* Its keys under "backend." (conf.h): rows whose offsets are into a
	 * struct of settings_size bytes that conf allocates, fills (defaults
	 * from the rows) and hands to create as be->settings. NULL: none. */
	const struct conf_setting *settings;
	size_t nsettings;		/* rows in settings */
	size_t settings_size;		/* sizeof its settings struct */
	/* Optional: take apart a -b URL. 1 if url is not of this backend;
	 * else call set for each setting it gives and return 0, or return -1
	 * with *why a static sentence that never holds a password. */
	int (*parse_url)(const char *url, backend_url_set *set, void *arg, const char **why);
	const char *url_form;		/* with parse_url: its URL in messages,
					 * such as "redis://host:port" */
	/* With parse_url: every form of URL it takes, ended by a row whose
	 * scheme is NULL. parse_url knows a URL of this backend by these rows
	 * (backend_url_row), and dlockd -h lists them. */
	const struct backend_url *urls;
	/* Optional (NULL: no floor): the shortest lease, in ms, that it can
	 * keep with these settings (its settings struct). */
	uint64_t (*min_lease_ms)(const void *settings);
	const char *min_lease_rule;	/* with min_lease_ms: the settings it comes
					 * from, for messages ("3 x backend.x_ms") */
	/* Set up be->priv. 0, or -1 after logging why. */
	int (*create)(struct backend *be);
	/* Complete every pending operation with BE_ERROR, then free be->priv. */
	void (*destroy)(struct backend *be);
	/* Take a new lease for lock->token, with a new fence. */
	void (*acquire)(struct backend *be, const struct be_lock *lock, be_cb *cb, void *arg);
	/* Drop lock->token's lease. */
	void (*release)(struct backend *be, const struct be_lock *lock, be_cb *cb, void *arg);
	/* Make lock->token's lease last lock->ttl_ms from now, if it is still
	 * ours; a lease that already lasts longer is left as it is. The lock
	 * table sends one renew of a holding at a time. */
	void (*renew)(struct backend *be, const struct be_lock *lock, be_cb *cb, void *arg);
	/*
	 * Optional (NULL): hand from->token's exclusive lease to to->token with
	 * a new fence, with no moment where the key is free. from->handoffs
	 * says how many handoffs of the key in a row came before; the backend
	 * may bound that run for other daemons' sake. Answers:
	 *   BE_OK       to holds the lease (fence, valid_ms as for acquire);
	 *   BE_BUSY     from's lease was released; to was not granted: other
	 *               daemons wait for the key and this daemon gives way. A
	 *               wakeup for the key will follow (up.wakeup), as after
	 *               an acquire's BE_BUSY;
	 *   BE_NOTOWNER from's lease had ended: nothing was changed;
	 *   BE_ERROR    unknown whether anything changed.
	 */
	void (*transfer)(struct backend *be, const struct be_lock *from,
	    const struct be_lock *to, be_cb *cb, void *arg);
	/* Optional (NULL): the lock table no longer waits for key (the last
	 * waiter of its queue has left): what the backend keeps for a wait
	 * after BE_BUSY (a place in a queue of its server's) can go. */
	void (*withdraw)(struct backend *be, const char *key, size_t keylen);
	/*
	 * Optional (NULL, all three): leaders across daemons. Without them,
	 * CAMPAIGN, PROCLAIM, LEADER and OBSERVE are answered only by a backend
	 * with local_leases (the lock table knows every holder).
	 * proclaim: store lock->value with lock->token's exclusive lease
	 * (BE_OK; BE_NOTOWNER: the lease is not ours; BE_ERROR).
	 * leader: read who leads key now.
	 * watch: on (1) or off (0): while on, the backend calls up.changed for
	 * key whenever it learns that the key's leases or leader's value
	 * changed, through any daemon, this one included; a watch started
	 * while the backend cannot tell (disconnected) tells when it can.
	 */
	void (*proclaim)(struct backend *be, const struct be_lock *lock, be_cb *cb, void *arg);
	void (*leader)(struct backend *be, const char *key, size_t keylen, be_leader_cb *cb,
	    void *arg);
	void (*watch)(struct backend *be, const char *key, size_t keylen, int on);
	/* Append "name:value\r\n" lines about the backend for INFO. */
	/* Optional (NULL: the lock table knows every holder, or nobody
	 * else's is known): read every lease of key in the backend, this
	 * daemon's too, with who took each (be_lock.who). */
	void (*holders)(struct backend *be, const char *key, size_t keylen,
	    be_holders_cb *cb, void *arg);
	/* Optional (NULL: the lock table's keys are every key held): HELD, a
	 * page of the keys held in the backend through any daemon, from
	 * cursor ("0": the start; else a page's next), about count of them,
	 * never a read that blocks the backend long (SCAN, a range with a
	 * limit). A key held from the first page to the last is on one of
	 * them at least; a key may be on more than one. BE_ERROR: a cursor
	 * this backend did not make, or the backend failed. */
	void (*list)(struct backend *be, const char *cursor, size_t count, be_list_cb *cb,
	    void *arg);
	/* Optional (NULL: a holder is broken only through its own daemon):
	 * UNLOCK FORCE, every lease of key in the backend broken that another
	 * daemon took (self: this daemon's instance id, as be_lock.who names
	 * it; its own holders the lock table breaks); by: who breaks it, for
	 * its holder's LOST. A broken lease still keeps others out until its
	 * daemon has told its holder (its renewal answers BE_NOTOWNER, forced;
	 * woken at once) and released it, or until it ends. BE_OK with
	 * broken, or BE_ERROR. */
	void (*force)(struct backend *be, const char *key, size_t keylen, const char *by,
	    const char *self, be_cb *cb, void *arg);
	void (*info)(struct backend *be, struct evbuffer *out);
	/* One word for STATUS: "local", "connected" or "disconnected". */
	const char *(*state)(struct backend *be);
	/* Optional (NULL: none): releases not yet confirmed by the server,
	 * in flight or kept for later. Shutdown waits for them. */
	size_t (*pending)(struct backend *be);
	/* Optional (NULL): the daemon shuts down: give back at once what is
	 * kept only to be fast (leases cached after their release), and keep
	 * no more. */
	void (*drain)(struct backend *be);
	/* Optional (NULL): SIGHUP: read again the files it uses (TLS
	 * certificates), for its next connects. */
	void (*reload)(struct backend *be);
	/* Optional (NULL): why it fails now (unreachable since when,
	 * authentication refused, certificate not verified...), a few words
	 * that hold no secret, into buf; NULL when nothing is known to be
	 * wrong. For the -BACKEND reply. */
	const char *(*problem)(struct backend *be, char *buf, size_t len);
	/* Optional (NULL): the rules between its settings (its settings
	 * struct), each broken one added to c's errors (conf_setting_error);
	 * with deep (dlockd -t), also what only the world can say: names that
	 * do not resolve, certificate files that cannot be used. May block. */
	void (*check)(struct conf *c, const void *settings, int deep);
};

/* Calls from a backend up to the lock table. */
struct backend_up {
	/* The key may be free now (after a BE_BUSY); key NULL: any key may be
	 * (release messages may have been missed). May be spurious. */
	void (*wakeup)(void *arg, const char *key, size_t keylen);
	/* The leases of key's holdings may have ended (key NULL: of any key):
	 * renew its session-bound holdings now, so that a lease the backend
	 * knows is gone is reported lost at once. */
	void (*expire)(void *arg, const char *key, size_t keylen);
	/* A watched key changed (ops->watch): l its state after the change,
	 * in the order of the changes; l NULL when the backend does not know
	 * it (changes may have been missed: read it with ops->leader). */
	void (*changed)(void *arg, const char *key, size_t keylen, const struct be_leader *l);
	void *arg;
};

/* A backend instance. */
struct backend {
	const struct backend_ops *ops;	/* its operations */
	struct event_base *base;	/* the event loop it completes on */
	const void *settings;		/* its settings struct (ops->settings), filled
					 * by conf; NULL when it has none */
	struct backend_up up;		/* set by the lock table */
	uint64_t min_ttl_ms;		/* shortest TTL it can keep (set by create,
					 * from ops->min_lease_ms; 0: no floor) */
	void *priv;			/* the backend's own state */
};

/* Look up the backend named type and create an instance with settings (its
 * settings struct, which must outlive it); NULL after logging why. The
 * caller owns it (backend_destroy). */
struct backend *backend_create(const char *type, struct event_base *base,
    const void *settings);
void backend_destroy(struct backend *be);
/* Why be fails now (ops->problem), or NULL. */
const char *backend_problem(struct backend *be, char *buf, size_t len);
/* SIGHUP: the backend reads its files again (ops->reload), if it has any. */
void backend_reload(struct backend *be);

/* The row of urls (a list ended by a NULL scheme) whose scheme url starts
 * with, any case; -1 when none does. */
int backend_url_row(const struct backend_url *urls, const char *url);

/* The registered backend called name, or NULL. */
const struct backend_ops *backend_find(const char *name);
/* The i-th registered backend, from 0; NULL past the last. */
const struct backend_ops *backend_at(size_t i);

#endif
