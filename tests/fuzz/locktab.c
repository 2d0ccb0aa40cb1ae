/*
 * locktab — fuzz the lock table (daemon/locktab.c), stateful, on the fake
 * backend of the unit tests (tests/fake_backend.c) and its hand-moved clock.
 *
 * The input is a script: a few bytes of settings (the fake with or without
 * transfer, the limits, the lock-delay), then steps, each a byte choosing
 * what happens and the bytes it needs. A step is one of: an owner LOCKs
 * (exclusive, shared or semaphore with a limit, a TTL, a WAIT, DETACH or
 * not), UNLOCKs a holding (its own, or a detached one by token), EXTENDs
 * one, cancels its wait, or is destroyed (and a new owner takes its slot);
 * the backend answers a pending operation (OK with a new fence, BUSY, not
 * the owner, failed); the clock moves (a tick runs the timers); the backend
 * wakes a key up (owed after BUSY, or spurious); UNLOCK FORCE breaks a key.
 * Like a session, an owner issues no command while one of its commands
 * waits.
 *
 * A small model keeps what each owner holds bound to it and what waits.
 * After every step, and in the callbacks, it checks:
 *   - a grant never passes an earlier waiter of the key that still waits
 *     (FIFO): no exclusive grant passes anyone, no shared one an exclusive;
 *   - the table's holders of a key: at most one exclusive, never exclusive
 *     with others, never more semaphore holders than permits;
 *   - fences of a key's grants strictly increase;
 *   - each owner's holdings and the counts of holdings, waiters and keys
 *     the table reports agree with the model and with the table's own walk;
 *   - no callback reaches a destroyed owner, every command is answered once;
 *   - after every owner is destroyed and every backend operation answered,
 *     nothing is held, waits or is kept, and no deadline is left (and ASan's
 *     leak check finds nothing).
 */
#include <stdbool.h>
#include <string.h>

#include "fake_backend.h"
#include "fuzz.h"
#include "locktab.h"
#include "xmalloc.h"

#define NOWN 4			/* owner slots */
#define NKEY 3			/* keys: k0, k1 locks, k2 a semaphore */
#define MAXH 8			/* bound holdings per owner the model keeps */
#define MAXD 32			/* detached holdings the model keeps */

/* One holding in the model. */
struct m_hold {
	int key;			/* key index */
	enum lock_mode mode;		/* its mode */
	uint64_t fence;			/* its fence */
	unsigned count;			/* hold count */
	char token[TOKEN_LEN + 1];	/* its token */
};

/* What an owner's command in flight is. */
enum m_busy { M_IDLE, M_LOCK, M_UNLOCK, M_EXTEND, M_DUNLOCK };

/* One owner in the model; kept (dead) until the end, so that a late
 * callback is caught. */
struct m_owner {
	struct lt_owner *o;		/* the table's owner; NULL once destroyed */
	bool dead;			/* destroyed */
	enum m_busy busy;		/* its command in flight */
	int key;			/* a LOCK's key */
	enum lock_mode mode;		/* its mode */
	bool detach;			/* DETACH */
	uint64_t seq;			/* its arrival order */
	char dtoken[TOKEN_LEN + 1];	/* M_DUNLOCK: the detached token */
	struct m_hold holds[MAXH];	/* bound holdings */
	unsigned nholds;		/* used entries of holds */
	struct m_owner *next;		/* all owners ever, for the end */
};

static struct locktab *lt;		/* the table */
static struct m_owner *owners[NOWN];	/* live owners by slot */
static struct m_owner *all;		/* every owner of this input */
static uint64_t ids;			/* owner ids */
static uint64_t seqs;			/* LOCKs so far */
static uint64_t last_fence[NKEY];	/* last fence granted per key */
static struct m_hold detached[MAXD];	/* detached holdings granted */
static unsigned ndetached;		/* used entries of detached */
static unsigned wakes[NKEY];		/* wakeups the backend owes per key */
static unsigned sem_limit;		/* the semaphore key's permits (its first LOCK's) */
static uint64_t max_keys;		/* the table's limits.max_keys (0: none) */

static const char *const keys[NKEY] = { "k0", "k1", "k2" };

/* A key's index from its name. */
static int
key_index(const char *key, size_t keylen)
{
	for (int i = 0; i < NKEY; i++)
		if (strlen(keys[i]) == keylen && memcmp(keys[i], key, keylen) == 0)
			return i;
	FUZZ_CHECK(!"a key the harness never used");
	return 0;
}

/* The model forgets holding i of m. */
static void
m_unhold(struct m_owner *m, unsigned i)
{
	m->holds[i] = m->holds[--m->nholds];
}

/* A LOCK granted to m (g): check FIFO and the fence, then record it. */
static void
m_granted(struct m_owner *m, const struct lt_grant *g)
{
	FUZZ_CHECK(g != NULL && g->count == 1 && g->mode == m->mode);
	FUZZ_CHECK(strlen(g->token) == TOKEN_LEN);
	for (int i = 0; i < NOWN; i++) {
		const struct m_owner *p = owners[i];
		if (p == NULL || p == m || p->busy != M_LOCK || p->key != m->key ||
		    p->seq > m->seq)
			continue;
		FUZZ_CHECK(m->mode != LOCK_EXCLUSIVE);	/* passed an earlier waiter */
		FUZZ_CHECK(m->mode != LOCK_SHARED || p->mode == LOCK_SHARED);
	}
	FUZZ_CHECK(g->fence > last_fence[m->key]);
	last_fence[m->key] = g->fence;
	struct m_hold h = { m->key, m->mode, g->fence, 1, "" };
	memcpy(h.token, g->token, sizeof(h.token));
	if (m->detach) {
		if (ndetached < MAXD)
			detached[ndetached++] = h;
		return;
	}
	FUZZ_CHECK(m->nholds < MAXH);
	m->holds[m->nholds++] = h;
}

/* The done callback of every command. */
static void
on_done(void *arg, enum lt_status st, const struct lt_grant *g, long long value)
{
	struct m_owner *m = arg;
	FUZZ_CHECK(!m->dead);
	FUZZ_CHECK(m->busy != M_IDLE);
	enum m_busy busy = m->busy;
	m->busy = M_IDLE;
	switch (busy) {
	case M_LOCK:
		if (st == LT_OK)
			m_granted(m, g);
		else
			FUZZ_CHECK(st == LT_NOT_GRANTED || st == LT_E_BACKEND ||
			    st == LT_E_CLOSING);
		break;
	case M_UNLOCK:
		/* the backend's answer to the release */
		FUZZ_CHECK(st == LT_OK || st == LT_E_LOST || st == LT_E_BACKEND);
		FUZZ_CHECK(value == 0);
		break;
	case M_DUNLOCK:
		break;
	case M_EXTEND:
		FUZZ_CHECK(st == LT_OK || st == LT_E_LOST || st == LT_E_NOTHELD ||
		    st == LT_E_BACKEND);
		break;
	case M_IDLE:
		break;
	}
}

/* The lost callback of every owner: a bound holding the model knows. */
static void
on_lost(void *arg, const char *key, size_t keylen, uint64_t fence, const char *reason)
{
	struct m_owner *m = arg;
	FUZZ_CHECK(!m->dead);
	FUZZ_CHECK(reason != NULL);
	int k = key_index(key, keylen);
	for (unsigned i = 0; i < m->nholds; i++)
		if (m->holds[i].key == k && m->holds[i].fence == fence) {
			m_unhold(m, i);
			return;
		}
	FUZZ_CHECK(!"lost a holding the model does not know");
}

/* The table's timer hook: the harness ticks by itself. */
static void
on_rearm(void *arg, uint64_t when)
{
	(void)arg;
	(void)when;
}

/* A new owner, in the table and in the model. */
static struct m_owner *
owner_new(void)
{
	struct m_owner *m = xcalloc(1, sizeof(*m));
	m->o = locktab_owner_create(lt, ++ids, on_lost, m);
	m->next = all;
	all = m;
	return m;
}

/* Destroy the owner of slot; its callbacks must not run again. */
static void
owner_kill(int slot)
{
	struct m_owner *m = owners[slot];
	m->dead = true;
	m->nholds = 0;
	locktab_owner_destroy(m->o);
	m->o = NULL;
	owners[slot] = NULL;
}

/* What the walk of one key saw. */
struct walk {
	unsigned holders, excl, sem, waiters;
};

/* locktab_key_walk's callbacks: count what it shows. */
static void
walk_holder(void *arg, const struct lt_holder_info *h)
{
	struct walk *w = arg;
	w->holders++;
	w->excl += h->mode == LOCK_EXCLUSIVE;
	w->sem += h->mode == LOCK_SEMAPHORE;
}

static void
walk_waiter(void *arg, const struct lt_waiter_info *wi)
{
	struct walk *w = arg;
	(void)wi;
	w->waiters++;
}

/* The table agrees with itself and with the model. */
static void
check_all(void)
{
	struct lt_stats st;
	uint64_t holds = 0, waiters = 0, used = 0;

	for (int k = 0; k < NKEY; k++) {
		struct walk w = { 0 };
		struct lt_key_status s;
		locktab_key_walk(lt, keys[k], strlen(keys[k]), walk_holder, walk_waiter, &w);
		locktab_status(lt, keys[k], strlen(keys[k]), &s);
		FUZZ_CHECK(s.holders == w.holders);
		FUZZ_CHECK(w.excl <= 1);
		FUZZ_CHECK(w.excl == 0 || w.holders == 1);
		FUZZ_CHECK(w.sem == 0 || w.sem == w.holders);
		if (w.sem > 0)
			FUZZ_CHECK(s.limit > 0 && w.sem <= s.limit);
		FUZZ_CHECK(s.fence >= last_fence[k]);
		FUZZ_CHECK(s.waiters >= w.waiters);
		holds += w.holders;
		waiters += s.waiters;
		used += w.holders > 0 || s.waiters > 0;
	}
	for (int i = 0; i < NOWN; i++) {
		const struct m_owner *m = owners[i];
		FUZZ_CHECK(locktab_owner_holds(m->o, NULL, NULL) == m->nholds);
		for (unsigned j = 0; j < m->nholds; j++) {
			const struct m_hold *h = &m->holds[j];
			FUZZ_CHECK(locktab_validate(lt, keys[h->key], strlen(keys[h->key]),
			    h->fence) == 1);
		}
		size_t len;
		const char *wk = locktab_owner_waiting(m->o, &len);
		FUZZ_CHECK(wk == NULL || (m->busy == M_LOCK && key_index(wk, len) == m->key));
	}
	locktab_stats(lt, &st);
	FUZZ_CHECK(st.holds == holds);
	FUZZ_CHECK(st.waiters == waiters);
	FUZZ_CHECK(st.keys >= used);
	FUZZ_CHECK(max_keys == 0 || st.keys <= max_keys);
}

/* The fake backend answers the pending operation at pos with what b says. */
static void
answer(size_t pos, unsigned b)
{
	struct fk_op *op = fk_pending(pos);
	int k = key_index(op->key, op->keylen);
	unsigned dice = b % 16;

	if (dice < 10) {
		fk_complete_at(pos, BE_OK, op->kind == FK_ACQUIRE || op->kind == FK_TRANSFER ?
		    ++fk.fence : 0);
	} else if (dice < 12 && (op->kind == FK_ACQUIRE || op->kind == FK_TRANSFER)) {
		wakes[k]++;
		fk_complete_at(pos, BE_BUSY, 0);
	} else if (dice < 14) {
		fk_complete_at(pos, BE_NOTOWNER, 0);
	} else {
		fk_complete_at(pos, BE_ERROR, 0);
	}
}

/* An idle owner m LOCKs. */
static void
do_lock(struct m_owner *m, struct fuzz_in *in)
{
	static const uint64_t ttls[] = { 1000, 3000, 30000, 200 };
	static const int64_t waits[] = { -1, 0, 50, 2000 };
	unsigned b = fuzz_byte(in), c = fuzz_byte(in);
	int k = (int)(b % NKEY);
	enum lock_mode mode = k == 2 ? LOCK_SEMAPHORE : (b >> 2 & 1) ? LOCK_SHARED :
	    LOCK_EXCLUSIVE;
	struct lt_lock_req q = { keys[k], strlen(keys[k]), mode,
		mode == LOCK_SEMAPHORE ? (b >> 3 & 7) == 0 ? 1 + (c & 1) : sem_limit : 0,
		ttls[c >> 1 & 3], waits[c >> 3 & 3], (c >> 5 & 3) == 0,
		mode == LOCK_EXCLUSIVE && (b >> 5 & 1) ? "leader" : NULL, 6 };
	struct lt_grant g;
	enum lt_status st;

	for (unsigned i = 0; i < m->nholds; i++) {
		struct m_hold *h = &m->holds[i];
		if (h->key != k)
			continue;
		st = locktab_lock(m->o, &q, &g, on_done, m);
		if (st == LT_OK) {
			FUZZ_CHECK(h->mode == mode && !q.detach);
			FUZZ_CHECK(g.fence == h->fence && g.count == h->count + 1);
			h->count++;
		} else {
			FUZZ_CHECK(st == LT_E_MODE || st == LT_E_KIND);
		}
		return;
	}
	m->busy = M_LOCK;
	m->key = k;
	m->mode = mode;
	m->detach = q.detach;
	m->seq = ++seqs;
	st = locktab_lock(m->o, &q, &g, on_done, m);
	if (st == LT_PENDING)
		return;
	m->busy = M_IDLE;
	FUZZ_CHECK(st != LT_OK);
	/* WAIT 0: not granted, or -BACKEND when the key's queue waits for the
	 * backend to come back */
	FUZZ_CHECK(((st == LT_NOT_GRANTED || st == LT_E_BACKEND) && q.wait_ms == 0) ||
	    st == LT_E_KIND ||
	    st == LT_E_WAITERS || st == LT_E_LOCKS || st == LT_E_MODE ||
	    (st == LT_E_KEYS && max_keys != 0));
}

/* An idle owner m UNLOCKs or EXTENDs one of its holdings, or a detached
 * one by token. */
static void
do_unlock(struct m_owner *m, struct fuzz_in *in, bool extend)
{
	unsigned b = fuzz_byte(in);
	long long left = -1;
	enum lt_status st;

	if (m->nholds > 0 && (b & 1) == 0) {
		unsigned i = (b >> 1) % m->nholds;
		struct m_hold *h = &m->holds[i];
		const char *key = keys[h->key];
		if (extend) {
			m->busy = M_EXTEND;
			st = locktab_extend(m->o, key, strlen(key), 500 + (b >> 4) * 1000, NULL,
			    on_done, m);
			FUZZ_CHECK(st == LT_PENDING);
			return;
		}
		st = locktab_unlock(m->o, key, strlen(key), NULL, &left, on_done, m);
		if (h->count > 1) {
			FUZZ_CHECK(st == LT_OK && left == h->count - 1);
			h->count--;
			return;
		}
		FUZZ_CHECK(st == LT_PENDING);
		m_unhold(m, i);
		m->busy = M_UNLOCK;
		return;
	}
	if (ndetached == 0)
		return;
	unsigned i = (b >> 1) % ndetached;
	struct m_hold h = detached[i];
	const char *key = keys[h.key];
	m->busy = extend ? M_EXTEND : M_DUNLOCK;
	if (extend)
		st = locktab_extend(m->o, key, strlen(key), 1000, h.token, on_done, m);
	else
		st = locktab_unlock(m->o, key, strlen(key), h.token, &left, on_done, m);
	if (st != LT_PENDING) {
		m->busy = M_IDLE;
		FUZZ_CHECK(st == LT_E_NOTHELD || st == LT_E_LOST);
	}
	if (!extend || st != LT_PENDING)
		detached[i] = detached[--ndetached];	/* released, or gone */
}

/* Deliver a wakeup for key k (owed or spurious). */
static void
wakeup(int k)
{
	if (wakes[k] > 0)
		wakes[k]--;
	fk_be.up.wakeup(fk_be.up.arg, keys[k], strlen(keys[k]));
}

/* One step of the script. */
static void
step(struct fuzz_in *in)
{
	unsigned op = fuzz_byte(in), b;
	struct m_owner *m = owners[op >> 4 & (NOWN - 1)];

	switch (op & 15) {
	case 0: case 1: case 2:
		if (m->busy == M_IDLE)
			do_lock(m, in);
		break;
	case 3: case 4:
		if (m->busy == M_IDLE)
			do_unlock(m, in, false);
		break;
	case 5:
		if (m->busy == M_IDLE)
			do_unlock(m, in, true);
		break;
	case 6: case 7: case 8: case 9:
		b = fuzz_byte(in);
		if (fk.npend > 0)
			answer((size_t)(b >> 4) % fk.npend, b);
		break;
	case 10: case 11: {
		static const uint64_t dt[] = { 1, 10, 100, 333, 1000, 2500, 10000, 40000 };
		fk_now += dt[op >> 4 & 7];
		locktab_tick(lt);
		break;
	}
	case 12:
		wakeup((int)((op >> 4) % NKEY));
		break;
	case 13:
		if (m->busy == M_LOCK && locktab_owner_cancel(m->o) > 0)
			m->busy = M_IDLE;
		break;
	case 14: {
		int slot = op >> 4 & (NOWN - 1);
		owner_kill(slot);
		owners[slot] = owner_new();
		break;
	}
	case 15:
		if ((op >> 6) == 3) {
			const char *key = keys[(op >> 4 & 3) % NKEY];
			(void)locktab_force(lt, key, strlen(key), "broken by the fuzzer", NULL,
			    NULL);
		}
		break;
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };

	fuzz_quiet();
	unsigned s = fuzz_byte(&in);
	fk_start((s & 1) ? &fk_ops_nt : &fk_ops);
	max_keys = (s & 128) ? 2 : 0;
	struct lt_limits lim = { (s & 2) ? 2 : 10000, (s & 4) ? 3 : 10000,
		(s & 8) ? 40 : 10, (s & 16) ? 500 : 0, max_keys };
	fk.valid_cut = (s & 32) ? 100 : 0;
	sem_limit = 2 + (s >> 6 & 1);
	lt = locktab_create(&fk_be, &lim, fk_clock, NULL, on_rearm, NULL);
	all = NULL;
	ids = seqs = 0;
	ndetached = 0;
	memset(last_fence, 0, sizeof(last_fence));
	memset(wakes, 0, sizeof(wakes));
	for (int i = 0; i < NOWN; i++)
		owners[i] = owner_new();

	for (unsigned n = 0; in.n > 0 && n < 2000; n++) {
		step(&in);
		check_all();
	}

	/* everyone leaves; everything is answered; nothing is left */
	for (int i = 0; i < NOWN; i++)
		owner_kill(i);
	for (int n = 0;; n++) {
		FUZZ_CHECK(n < 100000);
		unsigned owed = wakes[0] + wakes[1] + wakes[2];
		if (fk.npend > 0) {
			fk_complete(BE_OK, ++fk.fence);
		} else if (owed > 0) {
			for (int k = 0; k < NKEY; k++)
				while (wakes[k] > 0)
					wakeup(k);
		} else if (!locktab_idle(lt) || locktab_next_deadline(lt) != LT_NEVER) {
			/* detached holdings end at their TTL, lost ones' keys after it */
			fk_now += 100000;
			locktab_tick(lt);
		} else {
			break;
		}
	}
	struct lt_stats st;
	locktab_stats(lt, &st);
	FUZZ_CHECK(st.holds == 0 && st.waiters == 0 && st.keys == 0);
	for (int k = 0; k < NKEY; k++) {
		struct lt_key_status ks;
		locktab_status(lt, keys[k], strlen(keys[k]), &ks);
		FUZZ_CHECK(strcmp(ks.mode, "free") == 0 && ks.waiters == 0 && ks.holders == 0);
	}
	FUZZ_CHECK(locktab_next_deadline(lt) == LT_NEVER);
	locktab_destroy(lt);
	lt = NULL;
	while (all != NULL) {
		struct m_owner *next = all->next;
		free(all);
		all = next;
	}
	fk_stop();
	return 0;
}
