/*
 * fake_backend — a backend for unit tests that records every operation it
 * is asked for and completes it only when the test says so, and the test
 * clock the lock table reads. Every interleaving is the test's choice and
 * every outcome exact.
 *
 * It owns the records of operations and the clock; it must not complete
 * anything by itself, and it does not touch the lock table but through the
 * callbacks the table passed with each operation. It is linked into every
 * suite: its global names all start with fk_.
 */
#ifndef DLOCKD_TESTS_FAKE_BACKEND_H
#define DLOCKD_TESTS_FAKE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#define FK_KEYMAX 64		/* longest key the fake backend records */

enum fk_kind { FK_ACQUIRE, FK_RELEASE, FK_RENEW, FK_TRANSFER, FK_NKINDS };

/* One operation the table asked the fake backend for. */
struct fk_op {
	enum fk_kind kind;		/* which operation */
	char key[FK_KEYMAX];		/* its key (NUL-terminated copy) */
	size_t keylen;			/* the key's length */
	enum lock_mode mode;		/* the lease's mode */
	unsigned limit;			/* its permits */
	char token[TOKEN_LEN + 1];	/* the lease (transfer: the old one) */
	char to[TOKEN_LEN + 1];		/* transfer: the new lease */
	uint64_t ttl_ms;		/* lease asked for (transfer: the new one's) */
	unsigned handoffs;		/* the be_lock's handoffs (transfer: from's) */
	char who[64];			/* acquire, transfer: be_lock.who ("" none) */
	uint64_t at;			/* the test clock when asked */
	be_cb *cb;			/* the caller's completion */
	void *arg;			/* and its argument */
	bool done;			/* completed */
};

/* The fake backend's state. */
struct fake {
	struct fk_op *ops;		/* every operation asked, oldest first */
	size_t nops, cap;		/* used and allocated entries of ops */
	size_t *pend;			/* indexes into ops not completed, oldest first */
	size_t npend, pcap;		/* used and allocated entries of pend */
	unsigned count[FK_NKINDS];	/* operations asked, by kind */
	uint64_t fence;			/* last fence fk_drain() handed out */
	uint64_t valid_cut;		/* BE_OK answers promise the TTL less this */
	int lasting;			/* BE_ERROR answers say the error lasts */
	bool disconnected;		/* its state is "disconnected" */
};

extern struct fake fk;			/* the fake backend of the running test */
extern struct backend fk_be;		/* its backend instance */
extern uint64_t fk_now;			/* the test clock, in ms */
extern const struct backend_ops fk_ops;	/* the fake, with transfer */
extern const struct backend_ops fk_ops_nt; /* the fake without transfer */

/* The test clock as an lt_clock_fn: fk_now. */
uint64_t fk_clock(void *arg);

/* Start afresh on ops (fk_ops or fk_ops_nt): nothing recorded, the clock
 * at 1000 ms, fk_be ready for a lock table. */
void fk_start(const struct backend_ops *ops);
/* Free what the fake recorded (after the test completed what it needs). */
void fk_stop(void);

/* The pending operation at position pos (0: the oldest); valid until the
 * next operation is recorded. */
struct fk_op *fk_pending(size_t pos);
/* Complete the pending operation at position pos with st (and fence). */
void fk_complete_at(size_t pos, enum be_status st, uint64_t fence);
/* Complete the oldest pending operation. */
void fk_complete(enum be_status st, uint64_t fence);
/* Position of the oldest pending operation of kind for token (NULL: any),
 * or -1. A transfer matches its old or its new token. */
long fk_find(enum fk_kind kind, const char *token);
/* Check that the pending operation at pos is of kind on key; returns it. */
struct fk_op *fk_expect(size_t pos, enum fk_kind kind, const char *key);
/* Complete everything pending with BE_OK (new fences), and what that
 * leads to. */
void fk_drain(void);

#endif
