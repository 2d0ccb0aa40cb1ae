/*
 * metrics — GET /metrics and GET /healthz over HTTP (see metrics.h).
 *
 * It owns its evhttp listener and the histograms; it reads the sessions'
 * counters, the lock table and the backend only when scraped. It must not
 * change lock state, send anything to lock clients, or block the loop: a
 * scrape is answered from memory in one pass, and evhttp writes it as the
 * scraper reads, with bounded request sizes and a timeout per connection.
 */
#include "metrics.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "addr.h"
#include "backend.h"
#include "clock.h"
#include "locktab.h"
#include "log.h"
#include "observe.h"
#include "session.h"
#include "xmalloc.h"

#define METRICS_PREFIX "dlockd_"
#define METRICS_HEADERS_MAX 8192	/* bytes of a request's head */
#define METRICS_BODY_MAX 1024		/* bytes of a request's body */
#define METRICS_TIMEOUT_S 10		/* an HTTP connection's read/write timeout */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/*
 * X(name, type, help, value) for the plain metrics beside the counters of
 * SESSION_COUNTERS and LT_STATS: the first two come before those, the
 * others after; value is an expression of m (the metrics) and hub.
 */
#define METRICS_SESSIONS(X) \
	X(connections, gauge, "client connections open", hub->count) \
	X(sessions, gauge, "client sessions (one per connection)", hub->count)
#define METRICS_PROCESS(X) \
	X(backend_up, gauge, "1 while the backend is reachable, else 0", \
	    (uint64_t)metrics_healthy(hub->be, &why)) \
	X(start_time_seconds, gauge, "start time of the process, seconds since the epoch", \
	    m->start_time) \
	X(uptime_seconds, gauge, "seconds since the start", \
	    (clock_ms() - hub->started_ms) / 1000)

/* Bounds of the backend latency histogram, µs: 1 ms to 10 s. */
static const uint64_t backend_bounds[] = { 1000, 2500, 5000, 10000, 25000, 50000, 100000,
    250000, 500000, 1000000, 2500000, 5000000, 10000000 };
/* Bounds of the wait histogram, µs: 1 ms to 300 s. */
static const uint64_t wait_bounds[] = { 1000, 5000, 10000, 50000, 100000, 500000, 1000000,
    5000000, 10000000, 30000000, 60000000, 120000000, 300000000 };

_Static_assert(sizeof(backend_bounds) / sizeof(backend_bounds[0]) <= METRICS_BUCKETS_MAX,
    "too many backend buckets");
_Static_assert(sizeof(wait_bounds) / sizeof(wait_bounds[0]) <= METRICS_BUCKETS_MAX,
    "too many wait buckets");

/* The op label of each backend measure of the lock table. */
static const char *const op_labels[LT_M_COUNT] = {
	[LT_M_ACQUIRE] = "acquire",
	[LT_M_RELEASE] = "release",
	[LT_M_RENEW] = "renew",
	[LT_M_TRANSFER] = "transfer",
};

struct metrics {
	const struct session_hub *hub;	/* the server's sessions, loop, lock table
					 * and backend (not owned) */
	struct evhttp *http;		/* the HTTP listener, NULL until listening */
	uint64_t start_time;		/* the process's start, seconds since the epoch */
	struct metrics_hist wait;	/* LOCK wait of grants */
	struct metrics_hist backend[LT_M_COUNT]; /* backend latency by operation
					 * (the LT_M_WAIT entry is unused) */
};

void
metrics_hist_init(struct metrics_hist *h, const uint64_t *bounds, size_t n)
{
	memset(h, 0, sizeof(*h));
	h->bounds = bounds;
	h->nbounds = n < METRICS_BUCKETS_MAX ? n : METRICS_BUCKETS_MAX;
}

void
metrics_hist_observe(struct metrics_hist *h, uint64_t us)
{
	size_t i = 0;
	while (i < h->nbounds && us > h->bounds[i])
		i++;
	h->counts[i]++;
	h->count++;
	h->sum_us += us;
}

void
metrics_seconds_write(struct evbuffer *out, uint64_t us)
{
	char frac[8];
	int n;
	if (us % 1000000 == 0) {
		evbuffer_add_printf(out, "%" PRIu64, us / 1000000);
		return;
	}
	n = snprintf(frac, sizeof(frac), "%06" PRIu64, us % 1000000);
	while (n > 0 && frac[n - 1] == '0')
		frac[--n] = '\0';
	evbuffer_add_printf(out, "%" PRIu64 ".%s", us / 1000000, frac);
}

void
metrics_hist_write(struct evbuffer *out, const char *name, const char *labels,
    const struct metrics_hist *h)
{
	const char *sep = *labels != '\0' ? "," : "";
	uint64_t cum = 0;
	for (size_t i = 0; i < h->nbounds; i++) {
		cum += h->counts[i];
		evbuffer_add_printf(out, "%s_bucket{%s%sle=\"", name, labels, sep);
		metrics_seconds_write(out, h->bounds[i]);
		evbuffer_add_printf(out, "\"} %" PRIu64 "\n", cum);
	}
	evbuffer_add_printf(out, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, sep,
	    h->count);
	evbuffer_add_printf(out, "%s_sum%s%s%s ", name, *labels ? "{" : "", labels,
	    *labels ? "}" : "");
	metrics_seconds_write(out, h->sum_us);
	evbuffer_add_printf(out, "\n%s_count%s%s%s %" PRIu64 "\n", name, *labels ? "{" : "",
	    labels, *labels ? "}" : "", h->count);
}

/* The lock table's measure hook: ms of what, into its histogram. */
static void
on_measure(void *arg, enum lt_measure what, uint64_t ms)
{
	struct metrics *m = arg;
	if (what == LT_M_WAIT)
		metrics_hist_observe(&m->wait, ms * 1000);
	else if ((size_t)what < LT_M_COUNT)
		metrics_hist_observe(&m->backend[what], ms * 1000);
}

struct metrics *
metrics_create(const struct session_hub *hub)
{
	struct metrics *m = xcalloc(1, sizeof(*m));
	uint64_t up_s = (clock_ms() - hub->started_ms) / 1000;
	time_t now = time(NULL);

	m->hub = hub;
	m->start_time = (uint64_t)now > up_s ? (uint64_t)now - up_s : 0;
	metrics_hist_init(&m->wait, wait_bounds, sizeof(wait_bounds) / sizeof(wait_bounds[0]));
	for (size_t i = 0; i < LT_M_COUNT; i++)
		metrics_hist_init(&m->backend[i], backend_bounds,
		    sizeof(backend_bounds) / sizeof(backend_bounds[0]));
	locktab_set_measure(hub->lt, on_measure, m);
	return m;
}

int
metrics_healthy(struct backend *be, const char **why)
{
	if (strcmp(be->ops->state(be), "disconnected") == 0) {
		*why = "the backend is not reachable";
		return 0;
	}
	*why = NULL;
	return 1;
}

/* The # HELP and # TYPE lines of dlockd_name. */
static void
head_write(struct evbuffer *out, const char *name, const char *type, const char *help)
{
	evbuffer_add_printf(out, "# HELP " METRICS_PREFIX "%s %s\n# TYPE " METRICS_PREFIX "%s %s\n",
	    name, help, name, type);
}

void
metrics_write(struct metrics *m, struct evbuffer *out)
{
	const struct session_hub *hub = m->hub;
	struct lt_stats st;
	struct obs_stats os;
	const char *why;
	char labels[32];

	locktab_stats(hub->lt, &st);
	obs_stats(hub->obs, &os);
#define METRICS_WRITE(name, type, help, value) \
	head_write(out, #name, #type, help); \
	evbuffer_add_printf(out, METRICS_PREFIX #name " %" PRIu64 "\n", (uint64_t)(value));
#define METRICS_SESSION(name, metric, help) \
	METRICS_WRITE(metric, counter, help, hub->counters.name)
#define METRICS_LT(field, name, type, info, help) METRICS_WRITE(name, type, help, st.field)
#define METRICS_OBS(field, name, type, help) METRICS_WRITE(name, type, help, os.field)
#define METRICS_MULTI(name, type, help) METRICS_WRITE(name, type, help, hub->multi.name)
	METRICS_SESSIONS(METRICS_WRITE)
	SESSION_COUNTERS(METRICS_SESSION)
	LT_STATS(METRICS_LT)
	SESSION_MULTI_STATS(METRICS_MULTI)
	OBS_STATS(METRICS_OBS)
	METRICS_PROCESS(METRICS_WRITE)
#undef METRICS_MULTI
#undef METRICS_OBS
#undef METRICS_LT
#undef METRICS_SESSION
#undef METRICS_WRITE

	head_write(out, "build_info", "gauge", "the version and backend of this dlockd; always 1");
	evbuffer_add_printf(out, METRICS_PREFIX "build_info{version=\"%s\",backend=\"%s\"} 1\n",
	    DLOCKD_VERSION, hub->be->ops->name);

	head_write(out, "backend_request_duration_seconds", "histogram",
	    "backend operations by op, from the call to the reply (millisecond resolution)");
	for (size_t i = 0; i < LT_M_COUNT; i++) {
		if (op_labels[i] == NULL)
			continue;
		snprintf(labels, sizeof(labels), "op=\"%s\"", op_labels[i]);
		metrics_hist_write(out, METRICS_PREFIX "backend_request_duration_seconds", labels,
		    &m->backend[i]);
	}

	head_write(out, "lock_wait_seconds", "histogram",
	    "granted LOCKs, from queued to granted (millisecond resolution)");
	metrics_hist_write(out, METRICS_PREFIX "lock_wait_seconds", "", &m->wait);
}

/* Answer req with code and the body in buf (type: its Content-Type). */
static void
reply(struct evhttp_request *req, int code, const char *reason, const char *type,
    struct evbuffer *buf)
{
	struct evkeyvalq *hdr = evhttp_request_get_output_headers(req);
	evhttp_add_header(hdr, "Content-Type", type);
	evhttp_add_header(hdr, "Cache-Control", "no-store");
	evhttp_send_reply(req, code, reason, buf);
}

/* Every request: /metrics, /healthz, else 404; GET and HEAD only. */
static void
on_request(struct evhttp_request *req, void *arg)
{
	struct metrics *m = arg;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri != NULL ? evhttp_uri_get_path(uri) : NULL;
	enum evhttp_cmd_type method = evhttp_request_get_command(req);
	struct evbuffer *buf = evbuffer_new();
	bool is_metrics = path != NULL && strcmp(path, "/metrics") == 0;
	bool is_health = path != NULL && strcmp(path, "/healthz") == 0;
	const char *why;

	if (buf == NULL) {
		evhttp_send_error(req, HTTP_INTERNAL, NULL);
		return;
	}
	if (!is_metrics && !is_health) {
		evbuffer_add_printf(buf, "not found: try /metrics or /healthz\n");
		reply(req, HTTP_NOTFOUND, "Not Found", "text/plain; charset=utf-8", buf);
	} else if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
		evbuffer_add_printf(buf, "method not allowed: use GET or HEAD\n");
		reply(req, 405, "Method Not Allowed", "text/plain; charset=utf-8", buf);
	} else if (is_metrics) {
		metrics_write(m, buf);
		reply(req, HTTP_OK, "OK", METRICS_CONTENT_TYPE, buf);
	} else if (metrics_healthy(m->hub->be, &why)) {
		evbuffer_add_printf(buf, "ok\n");
		reply(req, HTTP_OK, "OK", "text/plain; charset=utf-8", buf);
	} else {
		evbuffer_add_printf(buf, "%s backend: %s\n", m->hub->be->ops->name, why);
		reply(req, 503, "Service Unavailable", "text/plain; charset=utf-8", buf);
	}
	evbuffer_free(buf);
}

int
metrics_listen(struct metrics *m, const struct addr *addr)
{
	if (addr->kind != ADDR_TCP) {
		log_error("metrics %s: a TCP address is required", addr->text);
		return -1;
	}
	m->http = evhttp_new(m->hub->base);
	if (m->http == NULL) {
		log_error("metrics %s: cannot set up an HTTP listener", addr->text);
		return -1;
	}
	evhttp_set_max_headers_size(m->http, METRICS_HEADERS_MAX);
	evhttp_set_max_body_size(m->http, METRICS_BODY_MAX);
	evhttp_set_timeout(m->http, METRICS_TIMEOUT_S);
	/* every method reaches on_request, which answers 405 itself (evhttp
	 * would answer 501 for those it was not told about) */
	evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
	    EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
	    EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
	evhttp_set_gencb(m->http, on_request, m);
	if (evhttp_bind_socket_with_handle(m->http, addr->host, (ev_uint16_t)addr->port) == NULL) {
		log_error("cannot listen for metrics on %s: %s", addr->text,
		    evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
		evhttp_free(m->http);
		m->http = NULL;
		return -1;
	}
	log_info("metrics on http://%s/metrics", addr->text);
	return 0;
}

void
metrics_destroy(struct metrics *m)
{
	if (m == NULL)
		return;
	locktab_set_measure(m->hub->lt, NULL, NULL);
	if (m->http != NULL)
		evhttp_free(m->http);
	free(m);
}
