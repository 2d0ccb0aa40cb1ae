/*
 * be_memory — the embedded backend: no server, one process.
 *
 * The lock table above already excludes holders within this process, which
 * is the whole world of this backend, so every operation succeeds. What it
 * adds is the fence counter and the asynchronous completion every backend
 * has: operations are queued and completed from the loop (a later queue),
 * in the order they were made.
 *
 * Fences come from one counter for all keys, seeded at start-up with the wall
 * clock in microseconds: a later run starts above every fence an earlier run
 * handed out, unless the system clock stepped back between the two (one grant
 * per microsecond, sustained, would be needed to outrun the clock).
 *
 * It owns the fence counter and the queue of completions. It must not keep
 * any lock state of its own (the lock table has it all), and must never
 * complete an operation from inside the call that asked for it.
 */
#include "backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/queue.h>
#include <time.h>

#include <event2/buffer.h>

#include "later.h"
#include "pool.h"
#include "xmalloc.h"

/* One queued completion. */
struct mem_op {
	struct later_item later;	/* on m->q until it runs */
	struct mem *m;			/* the backend */
	be_cb *cb;			/* whom to tell */
	void *arg;			/* and with what */
	enum be_status status;		/* the outcome */
	uint64_t fence;			/* for acquire and transfer */
	uint64_t valid_ms;		/* for acquire, transfer and renew */
};

#define MEM_SPARE_OPS 1024		/* ops kept for reuse at most */

/* The backend's state. */
struct mem {
	struct later *q;		/* completions, run from the loop */
	struct pool ops;		/* ops that ran, for the next ones (a
					 * burst's beyond MEM_SPARE_OPS are freed) */
	bool closing;			/* mem_destroy runs: complete with BE_ERROR */
	uint64_t fence;			/* last fence handed out */
	uint64_t nops;			/* operations completed */
};

/* Complete one queued op from the loop (with BE_ERROR when the backend is
 * going away) and keep it for reuse. */
static void
mem_run(struct later_item *it)
{
	struct mem_op *op = (struct mem_op *)(void *)((char *)it - offsetof(struct mem_op, later));
	struct mem *m = op->m;
	struct be_reply r = { .status = op->status, .fence = op->fence, .valid_ms = op->valid_ms };
	be_cb *cb = op->cb;
	void *arg = op->arg;

	if (m->closing)
		r = (struct be_reply){ .status = BE_ERROR, .why = "the backend is shutting down" };
	else
		m->nops++;
	pool_put(&m->ops, op);	/* cb may take it again */
	cb(arg, &r);
}

/* Queue a completion, run from the loop by mem_run in the order queued.
 * Ops are reused: queueing allocates nothing in the steady state, and a
 * burst's ops beyond MEM_SPARE_OPS go back to the allocator. */
static void
mem_queue(struct backend *be, enum be_status status, uint64_t fence, uint64_t valid_ms,
    be_cb *cb, void *arg)
{
	struct mem *m = be->priv;
	struct mem_op *op = pool_get(&m->ops);

	*op = (struct mem_op){ .m = m, .cb = cb, .arg = arg, .status = status, .fence = fence,
	    .valid_ms = valid_ms };
	later_add(m->q, &op->later, mem_run);
}

/* Set up be->priv: the queue of completions and the fence counter, seeded
 * from the wall clock. Always 0. */
static int
mem_create(struct backend *be)
{
	struct mem *m = xcalloc(1, sizeof(*m));
	m->q = later_create(be->base);
	pool_init(&m->ops, sizeof(struct mem_op), MEM_SPARE_OPS);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	m->fence = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
	be->priv = m;
	return 0;
}

/* Complete what is still queued with BE_ERROR and free be->priv. */
static void
mem_destroy(struct backend *be)
{
	struct mem *m = be->priv;

	/* a completion may queue another: later_run runs those too */
	m->closing = true;
	later_run(m->q);
	later_destroy(m->q);
	pool_fini(&m->ops);
	free(m);
	be->priv = NULL;
}

/* Leases here last exactly their TTL: the lock table, in this process,
 * is what ends them. */
static void
mem_acquire(struct backend *be, const struct be_lock *lock, be_cb *cb, void *arg)
{
	struct mem *m = be->priv;
	mem_queue(be, BE_OK, ++m->fence, lock->ttl_ms, cb, arg);
}

static void
mem_release(struct backend *be, const struct be_lock *lock, be_cb *cb, void *arg)
{
	(void)lock;
	mem_queue(be, BE_OK, 0, 0, cb, arg);
}

static void
mem_renew(struct backend *be, const struct be_lock *lock, be_cb *cb, void *arg)
{
	mem_queue(be, BE_OK, 0, lock->ttl_ms, cb, arg);
}

/* Hand over: a new fence; the lock table already moved the holding. */
static void
mem_transfer(struct backend *be, const struct be_lock *from, const struct be_lock *to,
    be_cb *cb, void *arg)
{
	struct mem *m = be->priv;
	(void)from;
	mem_queue(be, BE_OK, ++m->fence, to->ttl_ms, cb, arg);
}

static void
mem_info(struct backend *be, struct evbuffer *out)
{
	struct mem *m = be->priv;
	evbuffer_add_printf(out, "backend_ops_total:%llu\r\nbackend_last_fence:%llu\r\n",
	    (unsigned long long)m->nops, (unsigned long long)m->fence);
}

static const char *
mem_state(struct backend *be)
{
	(void)be;
	return "local";
}

const struct backend_ops be_memory_ops = {
	.name = "memory",
	.local_leases = 1,
	.create = mem_create,
	.destroy = mem_destroy,
	.acquire = mem_acquire,
	.release = mem_release,
	.renew = mem_renew,
	.transfer = mem_transfer,
	.info = mem_info,
	.state = mem_state,
};
