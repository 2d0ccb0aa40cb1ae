/*
 * metrics — the HTTP listener for monitoring: GET /metrics (the Prometheus
 * text exposition format 0.0.4) and GET /healthz (is the backend
 * reachable), on libevent's evhttp.
 *
 * It owns the HTTP listener and the histograms of the lock table's
 * durations (it is the table's measure hook, locktab_set_measure). It reads
 * the sessions' counters, the lock table's stats and the backend's state
 * when scraped, through the server's session hub (session.h), and changes
 * nothing; it never talks to clients of the lock protocol.
 */
#ifndef DLOCKD_METRICS_H
#define DLOCKD_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct addr;
struct backend;
struct evbuffer;
struct session_hub;
struct metrics;

#define METRICS_BUCKETS_MAX 16	/* most finite buckets of a histogram */

/*
 * A histogram of durations: each observation is counted in the first bucket
 * whose upper bound (le) it does not exceed, or in +Inf. Bounds and values
 * are whole microseconds, so that placing a value never depends on
 * floating-point rounding.
 */
struct metrics_hist {
	const uint64_t *bounds;		/* upper bounds in µs, ascending (not owned) */
	size_t nbounds;			/* how many, at most METRICS_BUCKETS_MAX */
	uint64_t counts[METRICS_BUCKETS_MAX + 1]; /* per bucket, not cumulative;
					 * counts[nbounds] is +Inf */
	uint64_t count;			/* observations */
	uint64_t sum_us;		/* their sum, µs */
};

/* An empty histogram with n bounds (static storage, ascending). */
void metrics_hist_init(struct metrics_hist *h, const uint64_t *bounds, size_t n);
/* Count one observation of us microseconds. */
void metrics_hist_observe(struct metrics_hist *h, uint64_t us);
/*
 * Append h's samples as the exposition format has them: name_bucket with
 * cumulative counts for each le (seconds) and "+Inf", name_sum (seconds)
 * and name_count. labels is "" or label pairs to put before le, such as
 * op="acquire".
 */
void metrics_hist_write(struct evbuffer *out, const char *name, const char *labels,
    const struct metrics_hist *h);
/* Append us microseconds as seconds, shortest form ("0.005", "1", "2.5"). */
void metrics_seconds_write(struct evbuffer *out, uint64_t us);

/*
 * Metrics of the server whose sessions hub holds (its loop, lock table and
 * backend are hub's; hub must outlive the metrics): its histograms start
 * counting now (it becomes the lock table's measure hook). It does not
 * listen yet (metrics_listen). Never NULL; the caller owns it
 * (metrics_destroy), which must come before the lock table's end.
 */
struct metrics *metrics_create(const struct session_hub *hub);
/* Serve HTTP on addr (a TCP address). 0, or -1 after logging why. */
int metrics_listen(struct metrics *m, const struct addr *addr)
	__attribute__((warn_unused_result));
/* Stop listening, drop open HTTP connections, and free m. */
void metrics_destroy(struct metrics *m);

/* Append the whole exposition of m's server to out (what GET /metrics
 * answers). */
void metrics_write(struct metrics *m, struct evbuffer *out);
/* 1 if the server of backend be is healthy (be reachable); else 0 with
 * *why a static sentence. */
int metrics_healthy(struct backend *be, const char **why);

#endif
