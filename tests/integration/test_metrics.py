"""Monitoring end to end: the metrics HTTP listener (GET /metrics in the
Prometheus text format, GET /healthz), scraped with urllib while redis-py
takes and releases locks, and the lock events the daemon logs at debug
level (grant, release, timeout, handoff, lost) and connections at info.

TestMetrics runs on the memory backend; TestMetricsRedis on the redis
backend, whose server it stops and restarts to watch /healthz and
dlockd_backend_up follow it.
"""

import re
import socket
import threading
import time
import unittest
import urllib.error
import urllib.request

from dlocktest.cases import hangup
from dlocktest.daemon import Daemon
from dlocktest.env import SLOWDOWN, unique_key
from dlocktest.proc import free_port, wait_until
from dlocktest.redis_server import RedisServer
from test_redis import FAST

# every plain metric: (name, type)
METRICS = [
    ("dlockd_connections", "gauge"),
    ("dlockd_sessions", "gauge"),
    ("dlockd_connections_accepted_total", "counter"),
    ("dlockd_connections_rejected_total", "counter"),
    ("dlockd_commands_total", "counter"),
    ("dlockd_protocol_errors_total", "counter"),
    ("dlockd_idle_timeouts_total", "counter"),
    ("dlockd_request_timeouts_total", "counter"),
    ("dlockd_login_timeouts_total", "counter"),
    ("dlockd_output_drops_total", "counter"),
    ("dlockd_locks_held", "gauge"),
    ("dlockd_waiters", "gauge"),
    ("dlockd_keys", "gauge"),
    ("dlockd_grants_total", "counter"),
    ("dlockd_reentrant_total", "counter"),
    ("dlockd_timeouts_total", "counter"),
    ("dlockd_releases_total", "counter"),
    ("dlockd_expired_total", "counter"),
    ("dlockd_lost_total", "counter"),
    ("dlockd_late_grants_total", "counter"),
    ("dlockd_handoffs_total", "counter"),
    ("dlockd_backend_errors_total", "counter"),
    ("dlockd_observe_keys", "gauge"),
    ("dlockd_observe_waiting", "gauge"),
    ("dlockd_observe_follows", "gauge"),
    ("dlockd_observe_revision", "gauge"),
    ("dlockd_observe_changes_total", "counter"),
    ("dlockd_backend_up", "gauge"),
    ("dlockd_start_time_seconds", "gauge"),
    ("dlockd_uptime_seconds", "gauge"),
    ("dlockd_build_info", "gauge"),
]
HISTOGRAMS = ["dlockd_backend_request_duration_seconds", "dlockd_lock_wait_seconds"]
BACKEND_OPS = ["acquire", "release", "renew", "transfer"]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def http(port, path, method="GET", timeout=5.0):
    """(status, headers, body) of one request to the metrics listener."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def parse(text):
    """The exposition as (samples, helps, types): samples maps
    'name{labels}' (labels as written) to a float."""
    samples, helps, types = {}, {}, {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            helps[name] = help_text
        elif line.startswith("# TYPE "):
            name, _, t = line[7:].partition(" ")
            types[name] = t
        elif line:
            m = SAMPLE_RE.match(line)
            assert m, "not a sample line: %r" % line
            samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return samples, helps, types


class MetricsMixin:
    """Scraping helpers for a test class with self.daemon and self.mport."""

    def scrape(self):
        status, headers, body = http(self.mport, "/metrics")
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["Content-Type"], CONTENT_TYPE)
        return parse(body)[0]

    def value(self, name):
        return self.scrape()[name]

    def deltas(self, before, after, names):
        return {n: after[n] - before[n] for n in names}

    def client(self):
        c = self.daemon.client()
        self.addCleanup(hangup, c)
        return c

    def log_lines(self, word):
        """The daemon's log lines whose message starts with word."""
        with open(self.daemon.logfile, errors="replace") as f:
            return [ln.split(None, 2)[2] for ln in f
                    if len(ln.split(None, 2)) == 3 and ln.split(None, 2)[2].startswith(word + " ")]

    def wait_log(self, pattern, what):
        """Wait (bounded) for a log line matching pattern; the match."""
        found = []

        def seen():
            with open(self.daemon.logfile, errors="replace") as f:
                for ln in f:
                    m = re.search(pattern, ln)
                    if m:
                        found.append(m)
                        return True
            return False
        wait_until(seen, 5 * SLOWDOWN, 0.02, what)
        return found[0]


def fields(line):
    """The key=value fields of a log message, values unquoted."""
    return {k: v.strip('"') for k, v in re.findall(r'(\w+)=("[^"]*"|\S+)', line)}


class TestMetrics(MetricsMixin, unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.mport = free_port()
        cls.daemon = Daemon("metrics: \"127.0.0.1:%d\"\n" % cls.mport,
                            extra_args=["-d", "debug"]).start()
        cls.addClassCleanup(cls.daemon.stop_checked)
        wait_until(lambda: cls._answers(cls.mport), 5, 0.01, "the metrics listener")

    @staticmethod
    def _answers(port):
        try:
            return http(port, "/healthz")[0] == 200
        except OSError:
            return False

    def test_every_metric_has_help_type_and_a_sample(self):
        status, headers, body = http(self.mport, "/metrics")
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], CONTENT_TYPE)
        self.assertTrue(body.endswith("\n"))
        samples, helps, types = parse(body)
        for name, t in METRICS:
            self.assertIn(name, helps, "no HELP for " + name)
            self.assertTrue(helps[name], "empty HELP for " + name)
            self.assertEqual(types.get(name), t, name)
        for name in HISTOGRAMS:
            self.assertIn(name, helps)
            self.assertEqual(types.get(name), "histogram")
        self.assertTrue(any(re.match(r'dlockd_build_info\{version="[^"]+",backend="memory"\}$',
                                     s) for s in samples), body)
        # each histogram: cumulative buckets, +Inf equal to _count
        for labels in ['op="%s"' % op for op in BACKEND_OPS]:
            self.check_histogram(body, "dlockd_backend_request_duration_seconds", labels)
        self.check_histogram(body, "dlockd_lock_wait_seconds", "")
        # every sample is of a family with a TYPE
        for s in samples:
            base = s.split("{")[0]
            fam = re.sub(r"_(bucket|sum|count)$", "", base)
            self.assertTrue(base in types or fam in types, s)
        self.assertEqual(samples["dlockd_backend_up"], 1)
        self.assertGreater(samples["dlockd_start_time_seconds"], time.time() - 3600)
        self.assertLessEqual(samples["dlockd_start_time_seconds"], time.time())

    def check_histogram(self, body, name, labels):
        sep = "," if labels else ""
        les = re.findall(r'^%s_bucket\{%s%sle="([^"]+)"\} (\d+)$'
                         % (re.escape(name), re.escape(labels), sep), body, re.M)
        self.assertGreater(len(les), 5, (name, labels))
        self.assertEqual(les[-1][0], "+Inf")
        bounds = [float(le) for le, _ in les[:-1]]
        self.assertEqual(bounds, sorted(bounds))
        counts = [int(c) for _, c in les]
        self.assertEqual(counts, sorted(counts), "not cumulative: %s" % les)
        lab = "{%s}" % labels if labels else ""
        count = re.search(r"^%s_count%s (\d+)$" % (re.escape(name), re.escape(lab)), body, re.M)
        self.assertIsNotNone(count, (name, labels))
        self.assertEqual(int(count.group(1)), counts[-1])
        self.assertRegex(body, r"(?m)^%s_sum%s \S+$" % (re.escape(name), re.escape(lab)))

    def test_counters_follow_locks(self):
        names = ["dlockd_grants_total", "dlockd_reentrant_total", "dlockd_timeouts_total",
                 "dlockd_releases_total", "dlockd_commands_total", "dlockd_locks_held",
                 "dlockd_connections_accepted_total",
                 'dlockd_lock_wait_seconds_count',
                 'dlockd_backend_request_duration_seconds_count{op="acquire"}',
                 'dlockd_backend_request_duration_seconds_count{op="release"}']
        before = self.scrape()
        a, b = self.client(), self.client()
        key = unique_key()
        a.execute_command("LOCK", key)
        a.execute_command("LOCK", key)              # reentrant
        self.assertIsNone(b.execute_command("LOCK", key, "WAIT", 0))
        self.assertIsNone(b.execute_command("LOCK", key, "WAIT", 50))
        during = self.scrape()
        self.assertEqual(during["dlockd_locks_held"] - before["dlockd_locks_held"], 1)
        self.assertEqual(a.execute_command("UNLOCK", key), 1)
        self.assertEqual(a.execute_command("UNLOCK", key), 0)
        d = self.deltas(before, self.scrape(), names)
        self.assertEqual(d, {
            "dlockd_grants_total": 1, "dlockd_reentrant_total": 1,
            "dlockd_timeouts_total": 2, "dlockd_releases_total": 1,
            "dlockd_commands_total": 6, "dlockd_locks_held": 0,
            "dlockd_connections_accepted_total": 2,
            "dlockd_lock_wait_seconds_count": 1,
            'dlockd_backend_request_duration_seconds_count{op="acquire"}': 1,
            'dlockd_backend_request_duration_seconds_count{op="release"}': 1})

    def test_wait_histogram_counts_a_waiter(self):
        wait = "dlockd_lock_wait_seconds"
        names = [wait + '_bucket{le="0.1"}', wait + '_bucket{le="5"}', wait + "_count",
                 wait + "_sum", "dlockd_handoffs_total", "dlockd_waiters"]
        holder, waiter = self.client(), self.client()
        key = unique_key()
        holder.execute_command("LOCK", key)
        before = self.scrape()
        got = []
        t = threading.Thread(target=lambda: got.append(
            waiter.execute_command("LOCK", key, "WAIT", 20000)))
        t.start()
        wait_until(lambda: self.value("dlockd_waiters") == before["dlockd_waiters"] + 1,
                   5, 0.01, "the waiter queued")
        time.sleep(0.3)
        holder.execute_command("UNLOCK", key)
        t.join(10)
        self.assertEqual(len(got), 1)
        self.assertIsInstance(got[0], list)
        d = self.deltas(before, self.scrape(), names)
        # waited 0.3 s or a little more: past 0.1 s, within 5 s
        self.assertEqual(d[wait + "_count"], 1)
        self.assertEqual(d[wait + '_bucket{le="0.1"}'], 0)
        self.assertEqual(d[wait + '_bucket{le="5"}'], 1)
        self.assertGreaterEqual(d[wait + "_sum"], 0.29)
        self.assertEqual(d["dlockd_handoffs_total"], 1)   # the memory backend hands over
        self.assertEqual(d["dlockd_waiters"], 0)
        waiter.execute_command("UNLOCK", key)

    def test_not_found_and_methods(self):
        status, _, body = http(self.mport, "/nope")
        self.assertEqual(status, 404)
        self.assertIn("/metrics", body)
        self.assertEqual(http(self.mport, "/")[0], 404)
        self.assertEqual(http(self.mport, "/metrics/x")[0], 404)
        for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
            for path in ("/metrics", "/healthz"):
                status, headers, _ = http(self.mport, path, method=method)
                self.assertEqual(status, 405, (method, path))
                self.assertEqual(headers["Allow"], "GET, HEAD")
        status, headers, body = http(self.mport, "/metrics", method="HEAD")
        self.assertEqual((status, body), (200, ""))
        self.assertEqual(headers["Content-Type"], CONTENT_TYPE)
        # a query string does not change the path
        self.assertEqual(http(self.mport, "/metrics?x=1")[0], 200)

    def test_healthz_on_memory(self):
        status, headers, body = http(self.mport, "/healthz")
        self.assertEqual((status, body), (200, "ok\n"))
        self.assertTrue(headers["Content-Type"].startswith("text/plain"))

    def test_slow_and_oversized_requests(self):
        # a scraper that sends half a request and stalls holds nothing up
        slow = socket.create_connection(("127.0.0.1", self.mport), timeout=5)
        self.addCleanup(slow.close)
        slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        # one that never reads its answer neither
        stuck = socket.create_connection(("127.0.0.1", self.mport), timeout=5)
        self.addCleanup(stuck.close)
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        stuck.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 50)
        self.assertEqual(http(self.mport, "/healthz")[0], 200)
        self.assertEqual(self.client().execute_command("PING"), True)
        # a head past the bound is refused, and the listener goes on
        big = socket.create_connection(("127.0.0.1", self.mport), timeout=5)
        self.addCleanup(big.close)
        try:
            big.sendall(b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n")
            answer = big.recv(100)
        except (ConnectionResetError, BrokenPipeError):
            answer = b""
        self.assertFalse(answer.startswith(b"HTTP/1.1 200"), answer)
        self.assertEqual(http(self.mport, "/metrics")[0], 200)

    def test_lock_events_logged(self):
        a, b = self.client(), self.client()
        ida, idb = a.execute_command("CLIENT", "ID"), b.execute_command("CLIENT", "ID")
        key = unique_key("log key")      # a space: escaped in the log
        fence = a.execute_command("LOCK", key)[1]
        esc = key.replace(" ", "\\x20")
        m = self.wait_log(r"debug grant key=%s .*" % re.escape(esc), "the grant line")
        f = fields(m.group(0))
        self.assertEqual(f["fence"], str(fence))
        self.assertEqual(f["session"], str(ida))
        self.assertEqual(f["mode"], "exclusive")
        self.assertRegex(f["waited_ms"], r"^\d+$")
        # b times out, then waits and is handed the key
        self.assertIsNone(b.execute_command("LOCK", key, "WAIT", 0))
        m = self.wait_log(r"debug timeout key=%s .*" % re.escape(esc), "the timeout line")
        self.assertEqual(fields(m.group(0))["session"], str(idb))
        self.assertEqual(fields(m.group(0))["waited_ms"], "0")
        got = []
        t = threading.Thread(target=lambda: got.append(
            b.execute_command("LOCK", key, "WAIT", 20000)))
        t.start()
        wait_until(lambda: self.value("dlockd_waiters") >= 1, 5, 0.01, "the waiter")
        time.sleep(0.05)
        a.execute_command("UNLOCK", key)
        t.join(10)
        fence2 = got[0][1]
        m = self.wait_log(r"debug release key=%s .*" % re.escape(esc), "the release line")
        f = fields(m.group(0))
        self.assertEqual((f["fence"], f["session"]), (str(fence), str(ida)))
        self.assertRegex(f["held_ms"], r"^\d+$")
        m = self.wait_log(r"debug handoff key=%s .*" % re.escape(esc), "the handoff line")
        f = fields(m.group(0))
        self.assertEqual((f["from"], f["to"], f["fence"]), (str(ida), str(idb), str(fence2)))
        m = self.wait_log(r"debug grant key=%s fence=%d .*" % (re.escape(esc), fence2),
                          "the waiter's grant")
        self.assertGreaterEqual(int(fields(m.group(0))["waited_ms"]), 40)
        # a waiter whose WAIT runs out
        c = self.client()
        idc = c.execute_command("CLIENT", "ID")
        self.assertIsNone(c.execute_command("LOCK", key, "WAIT", 100))
        m = self.wait_log(r"debug timeout key=%s session=%d .*" % (re.escape(esc), idc),
                          "the timed-out waiter")
        self.assertGreaterEqual(int(fields(m.group(0))["waited_ms"]), 100)
        b.execute_command("UNLOCK", key)

    def test_connections_logged(self):
        c = self.client()
        cid = c.execute_command("CLIENT", "ID")
        m = self.wait_log(r"info  connect id=%d addr=127\.0\.0\.1:(\d+)$" % cid,
                          "the connect line")
        port = m.group(1)
        c.execute_command("QUIT")
        self.wait_log(r'info  close id=%d addr=127\.0\.0\.1:%s reason="quit"$' % (cid, port),
                      "the close line")
        d = self.client()
        did = d.execute_command("CLIENT", "ID")
        hangup(d)
        self.wait_log(r'info  close id=%d addr=\S+ reason="peer closed"$' % did,
                      "the close line of a peer that left")
        # a protocol error: the daemon closes, and says why
        raw = socket.create_connection(("127.0.0.1", self.daemon.port), timeout=5)
        self.addCleanup(raw.close)
        raw.sendall(b"*1\r\n$-5\r\n")
        self.assertTrue(raw.recv(200).startswith(b"-ERR Protocol error"))
        self.wait_log(r'info  close id=\d+ addr=127\.0\.0\.1:%d reason="protocol error"$'
                      % raw.getsockname()[1], "the close line of a protocol error")


class TestMetricsStart(unittest.TestCase):

    def test_refused_bind_stops_the_start(self):
        taken = socket.socket()
        self.addCleanup(taken.close)
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        d = Daemon("metrics: \"127.0.0.1:%d\"\n" % port)
        self.addCleanup(d.stop)
        with self.assertRaises(AssertionError) as e:
            d.start()
        self.assertIn("cannot listen for metrics on 127.0.0.1:%d" % port, str(e.exception))
        self.assertNotEqual(d.rc, 0)

    def test_off_by_default(self):
        d = Daemon("").start()
        self.addCleanup(d.stop_checked)
        with open(d.logfile, errors="replace") as f:
            self.assertNotIn("metrics on", f.read())


class TestMetricsRedis(MetricsMixin, unittest.TestCase):

    def setUp(self):
        self.redis = RedisServer().start()
        self.addCleanup(self.redis.stop_checked)
        self.mport = free_port()
        self.daemon = Daemon("metrics: \"127.0.0.1:%d\"\n" % self.mport, backend="redis",
                             redis=self.redis, backend_conf=FAST,
                             extra_args=["-d", "debug"]).start()
        self.addCleanup(self.daemon.stop_checked)

    def health(self):
        return http(self.mport, "/healthz")[:3:2]

    def test_healthz_follows_redis(self):
        self.assertEqual(self.health(), (200, "ok\n"))
        self.assertEqual(self.value("dlockd_backend_up"), 1)
        samples = self.scrape()
        self.assertTrue(any(s.startswith('dlockd_build_info{') and 'backend="redis"' in s
                            for s in samples))
        self.redis.stop()
        wait_until(lambda: self.health()[0] == 503, 10 * SLOWDOWN, 0.02, "healthz 503")
        status, body = self.health()
        self.assertEqual(body, "redis backend: the backend is not reachable\n")
        self.assertEqual(self.value("dlockd_backend_up"), 0)
        self.redis.start()
        wait_until(lambda: self.health()[0] == 200, 20 * SLOWDOWN, 0.05, "healthz 200 again")
        self.assertEqual(self.value("dlockd_backend_up"), 1)

    def test_backend_latency_and_lost_line(self):
        before = self.scrape()
        c = self.client()
        cid = c.execute_command("CLIENT", "ID")
        key = unique_key()
        fence = c.execute_command("LOCK", key, "TTL", 2000)[1]
        # the lease vanishes from Redis: the next renewal finds it gone
        r = self.redis.client()
        self.addCleanup(hangup, r)
        r.flushall()
        m = self.wait_log(r"debug lost key=%s .*" % re.escape(key), "the lost line")
        f = fields(m.group(0))
        self.assertEqual((f["fence"], f["session"]), (str(fence), str(cid)))
        self.assertTrue(f["reason"])
        self.assertRegex(m.group(0), r'reason="[^"]+"$')
        after = self.scrape()
        self.assertEqual(after["dlockd_lost_total"] - before["dlockd_lost_total"], 1)
        op = 'dlockd_backend_request_duration_seconds_count{op="%s"}'
        self.assertEqual(after[op % "acquire"] - before[op % "acquire"], 1)
        self.assertGreaterEqual(after[op % "renew"] - before[op % "renew"], 1)


if __name__ == "__main__":
    unittest.main()
