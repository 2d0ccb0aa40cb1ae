/*
 * be_memory — the embedded backend: no server, one process.
 *
 * The lock table above already excludes holders within this process, which
 * is the whole world of this backend, so every operation succeeds. What it
 * adds is the fence counter and the asynchronous completion every backend
 * has: operations are queued and completed from one event on the loop, in
 * the order they were made.
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

#include <stdlib.h>
#include <sys/queue.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "xmalloc.h"

/* One queued completion. */
struct mem_op {
	be_cb *cb;			/* whom to tell */
	void *arg;			/* and with what */
	enum be_status status;		/* the outcome */
	uint64_t fence;			/* for acquire and transfer */
	uint64_t valid_ms;		/* for acquire, transfer and renew */
	TAILQ_ENTRY(mem_op) entry;	/* on mem->ops */
};
TAILQ_HEAD(mem_op_list, mem_op);

/* The backend's state. */
struct mem {
	struct event *ev;		/* runs the queued completions */
	struct mem_op_list ops;		/* completions waiting for ev */
	uint64_t fence;			/* last fence handed out */
	uint64_t nops;			/* operations completed */
};

/* Run every completion queued before this call; later ones wait a turn. */
static void
mem_run(evutil_socket_t fd, short what, void *arg)
{
	struct mem *m = arg;
	struct mem_op_list batch = TAILQ_HEAD_INITIALIZER(batch);
	(void)fd;
	(void)what;
	TAILQ_CONCAT(&batch, &m->ops, entry);
	struct mem_op *op;
	while ((op = TAILQ_FIRST(&batch)) != NULL) {
		TAILQ_REMOVE(&batch, op, entry);
		struct be_reply r = { op->status, op->fence, op->valid_ms, NULL };
		m->nops++;
		op->cb(op->arg, &r);
		free(op);
	}
}

/* Queue a completion, run from the loop by mem_run. */
static void
mem_queue(struct backend *be, enum be_status status, uint64_t fence, uint64_t valid_ms,
    be_cb *cb, void *arg)
{
	struct mem *m = be->priv;
	struct mem_op *op = xmalloc(sizeof(*op));
	op->cb = cb;
	op->arg = arg;
	op->status = status;
	op->fence = fence;
	op->valid_ms = valid_ms;
	if (TAILQ_EMPTY(&m->ops))
		event_active(m->ev, EV_TIMEOUT, 0);
	TAILQ_INSERT_TAIL(&m->ops, op, entry);
}

/* Set up be->priv: the event that runs completions and the fence counter,
 * seeded from the wall clock. Always 0. */
static int
mem_create(struct backend *be)
{
	struct mem *m = xcalloc(1, sizeof(*m));
	m->ev = event_new(be->base, -1, 0, mem_run, m);
	TAILQ_INIT(&m->ops);
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
	struct mem_op *op;
	while ((op = TAILQ_FIRST(&m->ops)) != NULL) {
		TAILQ_REMOVE(&m->ops, op, entry);
		struct be_reply r = { BE_ERROR, 0, 0, "the backend is shutting down" };
		op->cb(op->arg, &r);
		free(op);
	}
	event_free(m->ev);
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
