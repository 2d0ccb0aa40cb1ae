/*
 * check_metrics — the metrics module: histogram buckets and their text,
 * the seconds format, and the whole exposition of a server on the fake
 * backend, whose clock the tests move so that every duration is exact.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "backend.h"
#include "fake_backend.h"
#include "locktab.h"
#include "metrics.h"
#include "server.h"
#include "suite.h"
#include "tserver.h"

static struct metrics *mx;	/* the metrics of the server under test
				 * (tserver.h), not listening */

/* What out holds, as a NUL-terminated string the caller frees; out is
 * emptied. */
static char *
drain_text(struct evbuffer *out)
{
	size_t n = evbuffer_get_length(out);
	char *s = malloc(n + 1);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(evbuffer_remove(out, s, n), (int)n);
	s[n] = '\0';
	return s;
}

/* Whether text has line as a whole line. */
static bool
has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return true;
	return false;
}

#define EXPECT_LINE(text, line) \
	ck_assert_msg(has_line(text, line), "no line \"%s\" in:\n%s", line, text)

/* The exposition of mx now; the caller frees it. */
static char *
scrape(void)
{
	struct evbuffer *out = evbuffer_new();
	metrics_write(mx, out);
	char *text = drain_text(out);
	evbuffer_free(out);
	return text;
}

START_TEST(test_seconds_format)
{
	static const struct { uint64_t us; const char *want; } cases[] = {
		{ 0, "0" }, { 500, "0.0005" }, { 1000, "0.001" }, { 2500, "0.0025" },
		{ 1000000, "1" }, { 2500000, "2.5" }, { 1234567, "1.234567" },
		{ 300000000, "300" },
	};
	struct evbuffer *out = evbuffer_new();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		metrics_seconds_write(out, cases[i].us);
		char *s = drain_text(out);
		ck_assert_str_eq(s, cases[i].want);
		free(s);
	}
	evbuffer_free(out);
}
END_TEST

START_TEST(test_hist_buckets)
{
	static const uint64_t bounds[] = { 1000, 5000, 10000 };
	struct metrics_hist h;
	metrics_hist_init(&h, bounds, 3);
	/* a bound is inclusive (le); above the last is +Inf only */
	metrics_hist_observe(&h, 0);
	metrics_hist_observe(&h, 1000);
	metrics_hist_observe(&h, 1001);
	metrics_hist_observe(&h, 10000);
	metrics_hist_observe(&h, 10001);
	metrics_hist_observe(&h, 999999999);
	ck_assert_uint_eq(h.counts[0], 2);
	ck_assert_uint_eq(h.counts[1], 1);
	ck_assert_uint_eq(h.counts[2], 1);
	ck_assert_uint_eq(h.counts[3], 2);
	ck_assert_uint_eq(h.count, 6);
	ck_assert_uint_eq(h.sum_us, 0 + 1000 + 1001 + 10000 + 10001 + 999999999ULL);

	struct evbuffer *out = evbuffer_new();
	metrics_hist_write(out, "t_seconds", "", &h);
	char *text = drain_text(out);
	/* cumulative, in order, +Inf equal to _count */
	ck_assert_str_eq(text,
	    "t_seconds_bucket{le=\"0.001\"} 2\n"
	    "t_seconds_bucket{le=\"0.005\"} 3\n"
	    "t_seconds_bucket{le=\"0.01\"} 4\n"
	    "t_seconds_bucket{le=\"+Inf\"} 6\n"
	    "t_seconds_sum 1000.022001\n"
	    "t_seconds_count 6\n");
	free(text);

	metrics_hist_write(out, "t_seconds", "op=\"acquire\"", &h);
	text = drain_text(out);
	EXPECT_LINE(text, "t_seconds_bucket{op=\"acquire\",le=\"0.001\"} 2");
	EXPECT_LINE(text, "t_seconds_bucket{op=\"acquire\",le=\"+Inf\"} 6");
	EXPECT_LINE(text, "t_seconds_sum{op=\"acquire\"} 1000.022001");
	EXPECT_LINE(text, "t_seconds_count{op=\"acquire\"} 6");
	free(text);
	evbuffer_free(out);
}
END_TEST

START_TEST(test_hist_empty)
{
	static const uint64_t bounds[] = { 500 };
	struct metrics_hist h;
	struct evbuffer *out = evbuffer_new();
	metrics_hist_init(&h, bounds, 1);
	metrics_hist_write(out, "e", "", &h);
	char *text = drain_text(out);
	ck_assert_str_eq(text, "e_bucket{le=\"0.0005\"} 0\ne_bucket{le=\"+Inf\"} 0\ne_sum 0\n"
	    "e_count 0\n");
	free(text);
	evbuffer_free(out);
}
END_TEST

/* The server on the fake backend, and its metrics. */
static void
setup(void)
{
	ts_setup_fake();
	mx = metrics_create(&ts_srv->sessions);
}

static void
teardown(void)
{
	metrics_destroy(mx);
	ts_teardown();
}

/* A LOCK's outcome, as its done callback saw it. */
struct outcome {
	bool called;		/* done was called */
	enum lt_status st;	/* with this */
	uint64_t fence;		/* and this grant's fence */
};

static void
on_done(void *arg, enum lt_status st, const struct lt_grant *g, long long value)
{
	struct outcome *o = arg;
	(void)value;
	o->called = true;
	o->st = st;
	o->fence = g != NULL ? g->fence : 0;
}

/* LOCK key for o waiting wait_ms; the immediate status. */
static enum lt_status
lock(struct lt_owner *o, const char *key, int64_t wait_ms, struct outcome *out)
{
	struct lt_lock_req req = { .key = key, .keylen = strlen(key), .mode = LOCK_EXCLUSIVE,
	    .ttl_ms = 30000, .wait_ms = wait_ms };
	struct lt_grant g;
	return locktab_lock(o, &req, &g, on_done, out);
}

/* Every sample line's family has its # HELP and # TYPE lines. */
static void
expect_help_and_type(const char *text)
{
	const char *p = text;
	while (*p != '\0') {
		const char *end = strchr(p, '\n');
		ck_assert_ptr_nonnull(end);
		if (*p != '#') {
			char name[128], want[160];
			size_t n = strcspn(p, "{ ");
			ck_assert_uint_lt(n, sizeof(name));
			memcpy(name, p, n);
			name[n] = '\0';
			snprintf(want, sizeof(want), "# TYPE %s ", name);
			if (strstr(text, want) == NULL) {
				/* a histogram's sample: strip its suffix */
				char *suffix = strrchr(name, '_');
				ck_assert_ptr_nonnull(suffix);
				*suffix = '\0';
				snprintf(want, sizeof(want), "# TYPE %s histogram\n", name);
				ck_assert_msg(strstr(text, want) != NULL, "no TYPE for %.*s", (int)n, p);
			}
			snprintf(want, sizeof(want), "# HELP %s ", name);
			ck_assert_msg(strstr(text, want) != NULL, "no HELP for %s", name);
		}
		p = end + 1;
	}
}

START_TEST(test_exposition_follows_the_table)
{
	struct lt_owner *a = locktab_owner_create(ts_srv->lt, 1, NULL, NULL);
	struct lt_owner *b = locktab_owner_create(ts_srv->lt, 2, NULL, NULL);
	struct outcome ga = { 0 }, gb = { 0 }, ua = { 0 }, ta = { 0 };
	long long left;

	/* a waits 30 ms for the backend's grant */
	ck_assert_int_eq(lock(a, "k", -1, &ga), LT_PENDING);
	fk_now += 30;
	fk_complete(BE_OK, 5);
	ck_assert(ga.called && ga.st == LT_OK);
	/* b queues behind a for 1.5 s; a's UNLOCK hands k over in 2 ms */
	ck_assert_int_eq(lock(b, "k", 5000, &gb), LT_PENDING);
	fk_now += 1500;
	ck_assert_int_eq(locktab_unlock(a, "k", 1, NULL, &left, on_done, &ua), LT_PENDING);
	fk_expect(0, FK_TRANSFER, "k");
	fk_now += 2;
	fk_complete(BE_OK, 6);
	ck_assert(gb.called && gb.st == LT_OK && gb.fence == 6);
	/* a tries k, held by b: not granted at once */
	ck_assert_int_eq(lock(a, "k", 0, &ta), LT_NOT_GRANTED);

	char *text = scrape();
	expect_help_and_type(text);
	EXPECT_LINE(text, "# TYPE dlockd_grants_total counter");
	EXPECT_LINE(text, "# TYPE dlockd_locks_held gauge");
	EXPECT_LINE(text, "dlockd_grants_total 2");
	EXPECT_LINE(text, "dlockd_handoffs_total 1");
	EXPECT_LINE(text, "dlockd_releases_total 1");
	EXPECT_LINE(text, "dlockd_timeouts_total 1");
	EXPECT_LINE(text, "dlockd_locks_held 1");
	EXPECT_LINE(text, "dlockd_waiters 0");
	EXPECT_LINE(text, "dlockd_keys 1");
	EXPECT_LINE(text, "dlockd_lost_total 0");
	EXPECT_LINE(text, "dlockd_backend_up 1");
	EXPECT_LINE(text, "dlockd_build_info{version=\"" DLOCKD_VERSION "\",backend=\"fake\"} 1");
	/* waits of 30 ms and 1502 ms */
	EXPECT_LINE(text, "# TYPE dlockd_lock_wait_seconds histogram");
	EXPECT_LINE(text, "dlockd_lock_wait_seconds_bucket{le=\"0.01\"} 0");
	EXPECT_LINE(text, "dlockd_lock_wait_seconds_bucket{le=\"0.05\"} 1");
	EXPECT_LINE(text, "dlockd_lock_wait_seconds_bucket{le=\"1\"} 1");
	EXPECT_LINE(text, "dlockd_lock_wait_seconds_bucket{le=\"5\"} 2");
	EXPECT_LINE(text, "dlockd_lock_wait_seconds_bucket{le=\"+Inf\"} 2");
	EXPECT_LINE(text, "dlockd_lock_wait_seconds_sum 1.532");
	EXPECT_LINE(text, "dlockd_lock_wait_seconds_count 2");
	/* the acquire took 30 ms, the transfer 2 ms */
	EXPECT_LINE(text, "# TYPE dlockd_backend_request_duration_seconds histogram");
	EXPECT_LINE(text, "dlockd_backend_request_duration_seconds_bucket{op=\"acquire\","
	    "le=\"0.025\"} 0");
	EXPECT_LINE(text, "dlockd_backend_request_duration_seconds_bucket{op=\"acquire\","
	    "le=\"0.05\"} 1");
	EXPECT_LINE(text, "dlockd_backend_request_duration_seconds_sum{op=\"acquire\"} 0.03");
	EXPECT_LINE(text, "dlockd_backend_request_duration_seconds_bucket{op=\"transfer\","
	    "le=\"0.001\"} 0");
	EXPECT_LINE(text, "dlockd_backend_request_duration_seconds_bucket{op=\"transfer\","
	    "le=\"0.0025\"} 1");
	EXPECT_LINE(text, "dlockd_backend_request_duration_seconds_count{op=\"transfer\"} 1");
	EXPECT_LINE(text, "dlockd_backend_request_duration_seconds_count{op=\"release\"} 0");
	free(text);

	locktab_owner_destroy(a);
	locktab_owner_destroy(b);
}
END_TEST

START_TEST(test_health_follows_the_backend)
{
	const char *why = "unset";
	ck_assert_int_eq(metrics_healthy(ts_srv->be, &why), 1);
	ck_assert_ptr_null(why);
	fk.disconnected = true;
	ck_assert_int_eq(metrics_healthy(ts_srv->be, &why), 0);
	ck_assert_str_eq(why, "the backend is not reachable");
	char *text = scrape();
	EXPECT_LINE(text, "dlockd_backend_up 0");
	free(text);
	fk.disconnected = false;
	text = scrape();
	EXPECT_LINE(text, "dlockd_backend_up 1");
	free(text);
}
END_TEST

START_TEST(test_session_counters)
{
	ts_srv->sessions.counters.total_connections = 7;
	ts_srv->sessions.counters.rejected_connections = 2;
	ts_srv->sessions.counters.commands_total = 123;
	ts_srv->sessions.counters.protocol_errors_total = 1;
	char *text = scrape();
	EXPECT_LINE(text, "dlockd_connections 0");
	EXPECT_LINE(text, "dlockd_connections_accepted_total 7");
	EXPECT_LINE(text, "dlockd_connections_rejected_total 2");
	EXPECT_LINE(text, "dlockd_commands_total 123");
	EXPECT_LINE(text, "dlockd_protocol_errors_total 1");
	EXPECT_LINE(text, "# TYPE dlockd_uptime_seconds gauge");
	EXPECT_LINE(text, "# TYPE dlockd_start_time_seconds gauge");
	free(text);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("metrics");

	suite_case(s, "format", NULL, NULL, 0, SUITE_TESTS(test_seconds_format,
	    test_hist_buckets, test_hist_empty));
	suite_case(s, "server", setup, teardown, 0,
	    SUITE_TESTS(test_exposition_follows_the_table, test_health_follows_the_backend,
	    test_session_counters));
	return suite_run(s);
}
