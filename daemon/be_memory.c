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
};

/* Completions in the order they were queued, in an array that is reused:
 * queueing one allocates nothing once the array has grown to the busiest
 * turn's size. */
struct mem_queue {
	struct mem_op *v;		/* v[0, len) are queued */
	size_t len;
	size_t cap;			/* allocated entries */
};

/* The backend's state. */
struct mem {
	struct event *ev;		/* runs the queued completions */
	struct mem_queue ops;		/* completions waiting for ev */
	struct mem_queue running;	/* the turn mem_run is completing */
	uint64_t fence;			/* last fence handed out */
	uint64_t nops;			/* operations completed */
};

/* Run every completion queued before this call; those queued meanwhile
 * (into the other array) wait a turn. */
static void
mem_run(evutil_socket_t fd, short what, void *arg)
{
	struct mem *m = arg;
	struct mem_queue batch = m->ops;
	(void)fd;
	(void)what;
	m->ops = m->running;
	m->ops.len = 0;
	m->running = batch;
	for (size_t i = 0; i < batch.len; i++) {
		const struct mem_op *op = &batch.v[i];
		struct be_reply r = { op->status, op->fence, op->valid_ms, NULL };
		m->nops++;
		op->cb(op->arg, &r);
	}
	m->running.len = 0;
}

/* Queue a completion, run from the loop by mem_run. */
static void
mem_queue(struct backend *be, enum be_status status, uint64_t fence, uint64_t valid_ms,
    be_cb *cb, void *arg)
{
	struct mem *m = be->priv;
	struct mem_queue *q = &m->ops;
	if (q->len == 0)
		event_active(m->ev, EV_TIMEOUT, 0);
	if (q->len == q->cap) {
		q->cap = q->cap != 0 ? 2 * q->cap : 64;
		q->v = xreallocarray(q->v, q->cap, sizeof(*q->v));
	}
	q->v[q->len++] = (struct mem_op){ cb, arg, status, fence, valid_ms };
}

/* Set up be->priv: the event that runs completions and the fence counter,
 * seeded from the wall clock. Always 0. */
static int
mem_create(struct backend *be)
{
	struct mem *m = xcalloc(1, sizeof(*m));
	m->ev = event_new(be->base, -1, 0, mem_run, m);
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
	/* a completion may queue another: take them one at a time */
	for (size_t i = 0; i < m->ops.len; i++) {
		struct mem_op op = m->ops.v[i];
		struct be_reply r = { BE_ERROR, 0, 0, "the backend is shutting down" };
		op.cb(op.arg, &r);
	}
	event_free(m->ev);
	free(m->ops.v);
	free(m->running.v);
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
