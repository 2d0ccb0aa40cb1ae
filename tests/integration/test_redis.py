"""The redis backend: several dlockd processes on one redis-server.

Mutual exclusion and FIFO order across daemons, wake-ups through pub/sub
(and without it), fences across daemons and restarts, a daemon killed while
holding locks, redis-server stopped (SIGSTOP) past the lease, redis-server
down and back, local handoff, INFO's backend fields, the backend
configuration keys, and how many Redis commands a lock costs.

Every test starts its own redis-server (or shares the one of its class) on a
free loopback port; see dlocktest.redis_server. The bounds below assume
loopback; a daemon under a wrapper (valgrind) gets SLOWDOWN times as long
where only speed is measured, never where safety is.
"""

import signal
import socket
import subprocess
import threading
import time

from dlocktest import env
from dlocktest.cases import RedisTestCase, check_held, ms, report
from dlocktest.env import DLOCK, SLOWDOWN, unique_key
from dlocktest.proc import in_thread, results, sleep_until, wait_until
from dlocktest.redis_server import RedisMonitor, RedisServer, commandstats, count_commands
from dlocktest.resp import NULL, Err, Push, Raw, pairs, read_within
from dlocktest.sessions import grant_through_outage, read_pushes

TTL = 2000  # ms: the short lease of the tests that wait for leases to run out
# backend keys of the daemons that must notice an unreachable Redis quickly
FAST = {"connect_timeout_ms": 200, "command_timeout_ms": 300}
CONFIG_TTL = "locks:\n  default_ttl_ms: %d\n" % TTL
WAKE_BOUND = 0.1 * SLOWDOWN  # s from a release on one daemon to the grant on another
PUBSUB_LOST_BOUND = 3.0  # s to a grant when the release's message was lost
RECONNECT_BOUND = 6.0  # s for a daemon to be back on Redis (capped backoff)
KILL_MARGIN = 1.0  # s after the lease for another daemon to see it ran out
BACKEND_REPLY_BOUND = 1.0 * SLOWDOWN  # s for -BACKEND while Redis is down
IDLE_COMMANDS_PER_S = 4  # commands a waiting daemon may send per second
BACKEND_FIELDS = ("backend_connected", "backend_reconnects_total",
                  "backend_scripts_loaded", "backend_renewals_total",
                  "backend_lost_total")



def script_calls(conn):
    """EVALSHA + EVAL calls so far on a redis-server (a Raw connection)."""
    st = commandstats(conn)
    return st.get("evalsha", 0) + st.get("eval", 0)


def pubsub_clients(conn):
    """Connections of a redis-server that are in pub/sub mode."""
    text = conn.cmd("CLIENT", "LIST", "TYPE", "pubsub")
    return [line for line in text.decode().split("\n") if line.strip()]



def fmt_counts(counts, n):
    """'name 1.00, name 0.50' per operation, largest first."""
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join("%s %.2f" % (k, v / n) for k, v in items) or "none"


OWN_COMMANDS = ("config|resetstat", "info", "echo", "monitor", "client|list")


class RedisCase(RedisTestCase):
    """The redis backend's tests (assertErr and hello3 come from
    RedisTestCase)."""


class TestRedisTwoDaemons(RedisCase):
    """Two daemons, A and B, on one redis-server, shared by the tests of
    the class; each test uses keys of its own."""

    @classmethod
    def setUpClass(cls):
        cls.redis = cls.class_redis()
        cls.a = cls.class_daemon(cls.redis)
        cls.b = cls.class_daemon(cls.redis)

    def setUp(self):
        super().setUp()
        for d in (self.a, self.b):
            self.assertTrue(d.running(), "a shared dlockd died:\n%s" % d.log())
        self.assertTrue(self.redis.running(), "the redis-server died:\n%s" % self.redis.log())

    def test_status_from_another_daemon(self):
        rc = self.redis_conn(self.redis)
        self.assertFleetStatus(self.a, self.b, lambda: script_calls(rc) - 1)

    def test_held_lists_every_daemon_s_keys(self):
        # 300 keys: a page of COUNT 1000 is several SCANs of 100
        check_held(self, lambda: self.conn(self.a), lambda: self.conn(self.b), n=300)

    def test_dlock_held(self):
        # dlock held on B prints every key held through A and B, one per
        # line, page after page
        base = unique_key("cli")
        a, b = self.conn(self.a), self.conn(self.b)
        keys = ["%s/%d" % (base, i) for i in range(12)]
        for i, k in enumerate(keys):
            self.assertGranted((a if i % 2 else b).cmd("LOCK", k))
        p = subprocess.run([DLOCK, "-a", self.b.addr(), "held", "--count", "2", base + "/*"],
                           capture_output=True, text=True, timeout=20)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sorted(set(p.stdout.split())), sorted(keys))
        p = subprocess.run([DLOCK, "-a", self.b.addr(), "held", "--count", "0"],
                           capture_output=True, text=True, timeout=20)
        self.assertEqual(p.returncode, 64, p.stderr)
        for i, k in enumerate(keys):
            self.assertEqual((a if i % 2 else b).cmd("UNLOCK", k), 0)
        p = subprocess.run([DLOCK, "-a", self.b.addr(), "held", base + "/*"],
                           capture_output=True, text=True, timeout=20)
        self.assertEqual((p.returncode, p.stdout), (0, ""), p.stderr)

    def test_holders_key_follows_the_leases(self):
        # "i:<key>" says who took the leases: a string beside an exclusive
        # lease, expiring with it, a hash of members beside shared ones;
        # each release takes its part away
        key = unique_key()
        rc = self.redis_conn(self.redis)
        ik = "dlock:i:" + key
        h = self.conn(self.a)
        g = self.assertGranted(h.cmd("LOCK", key, "TTL", 30000))
        self.assertEqual(rc.cmd("TYPE", ik), "string")
        member, fence, desc = rc.cmd("GET", ik).split(b"\t", 2)
        self.assertEqual((member[:3], int(fence)), (b"x0:", g[1]))
        self.assertTrue(desc.startswith(b"w1\t" + self.a.info()["daemon_id"].encode()), desc)
        # set with the lease in one script: they end together (read apart)
        self.assertAlmostEqual(rc.cmd("PTTL", ik), rc.cmd("PTTL", "dlock:l:" + key), delta=100)
        self.assertEqual(h.cmd("UNLOCK", key), 0)
        self.assertEqual(rc.cmd("EXISTS", ik), 0)
        s1, s2 = self.conn(self.a), self.conn(self.b)
        self.assertGranted(s1.cmd("LOCK", key, "SHARED"))
        self.assertGranted(s2.cmd("LOCK", key, "SHARED"))
        self.assertEqual(rc.cmd("TYPE", ik), "hash")
        self.assertEqual(rc.cmd("HLEN", ik), 2)
        self.assertGreater(rc.cmd("PTTL", ik), 0)
        self.assertEqual(s1.cmd("UNLOCK", key), 0)
        self.assertEqual(rc.cmd("HLEN", ik), 1)
        self.assertEqual(s2.cmd("UNLOCK", key), 0)
        self.assertEqual(rc.cmd("EXISTS", ik), 0)

    def test_dlock_status_from_another_daemon(self):
        # dlock status -v on B names the holder through A, and A
        key = unique_key()
        h = self.conn(self.a)
        h.cmd("CLIENT", "SETNAME", "job-7")
        fence = self.assertGranted(h.cmd("LOCK", key))[1]
        p = subprocess.run([DLOCK, "-a", self.b.addr(), "status", "--verbose", key],
                           capture_output=True, text=True, timeout=20)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("mode: exclusive", p.stdout)
        lines = p.stdout.splitlines()
        row = lines[lines.index("holders, through any daemon:") + 2].split()
        self.assertEqual((row[1], row[3], row[4], row[-1]),
                         ("job-7", "exclusive", str(fence),
                          "%s@%s" % (self.a.addr(), socket.gethostname())))
        self.assertEqual(h.cmd("UNLOCK", key), 0)

    def test_mutual_exclusion_across_daemons(self):
        fences = self.assertExclusive((self.a, self.b, self.a, self.b), unique_key(), 25, 60)
        self.assertClockFences(fences)

    def test_fifo_within_each_daemon(self):
        key = unique_key()
        holder = self.conn(self.a)
        g0 = self.assertGranted(holder.cmd("LOCK", key))
        waiters = []  # (daemon name, place in that daemon's queue, connection)
        for i in range(4):
            for name, d in (("A", self.a), ("B", self.b)):
                waiters.append((name, i, self.queue(d, key, "WAIT", 20000, waiters=i + 1)))
        got = []
        mu = threading.Lock()

        def take(name, i, w):
            g = w.read()
            if not isinstance(g, list):
                raise AssertionError("waiter %s%d got %r" % (name, i, g))
            with mu:
                got.append((g[1], name, i))
            if w.cmd("UNLOCK", key) != 0:
                raise AssertionError("waiter %s%d: UNLOCK did not release" % (name, i))

        calls = [in_thread(take, *w) for w in waiters]
        self.assertEqual(holder.cmd("UNLOCK", key), 0)
        results(calls, 20)
        got.sort()
        self.assertEqual(len({f for f, _, _ in got}), 8, got)
        self.assertGreater(got[0][0], g0[1])
        for name in ("A", "B"):
            self.assertEqual([i for _, n, i in got if n == name], [0, 1, 2, 3],
                             "grants on %s out of queue order: %s" % (name, got))

    def wait_attempt(self, rc, before):
        """Wait until a script call after `before` (a waiter's first try in
        Redis) has run."""
        wait_until(lambda: script_calls(rc) > before, 3, 0.002,
                   "the waiter's attempt in Redis")

    def test_wake_across_daemons_is_prompt(self):
        rc = self.redis_conn(self.redis)
        took = self.wake_latencies(self.a, self.b, unique_key(), 5, lambda: [script_calls(rc)])
        self.assertWakesWithin(took, WAKE_BOUND)

    def test_waiting_does_not_poll(self):
        # a waiter on B behind a holder on A: in one second of waiting the
        # daemons send Redis (almost) nothing: the wake-up comes by pub/sub
        key = unique_key()
        holder = self.conn(self.a)
        self.assertGranted(holder.cmd("LOCK", key))
        mon = RedisMonitor(self.redis)
        self.addCleanup(mon.stop)
        before = script_calls(mon.ctl)
        w = self.queue(self.b, key, "WAIT", 10000, waiters=1)
        self.wait_attempt(mon.ctl, before)
        mon.sync()
        mon.take()
        window = 1.0
        time.sleep(window)  # the measurement window itself
        mon.sync()
        sent, lua = count_commands(mon.take())
        n = sum(sent.values())
        report("commands sent to Redis in %.1f s of waiting: %d (%s); run by scripts: %d"
               % (window, n, fmt_counts(sent, 1), sum(lua.values())))
        self.assertLessEqual(n, IDLE_COMMANDS_PER_S * window,
                             "daemons poll Redis while a LOCK waits: %s" % sent)
        self.assertEqual(holder.cmd("UNLOCK", key), 0)
        self.assertGranted(w.read())

    def test_waiter_granted_when_pubsub_lost(self):
        # CLIENT KILL of the subscriber connections while B waits: the
        # release's message is lost, the retry still grants the waiter
        key = unique_key()
        rc = self.redis_conn(self.redis)
        self.assertEqual(len(pubsub_clients(rc)), 2,
                         "one subscriber connection per daemon:\n%s" % pubsub_clients(rc))
        holder = self.conn(self.a)
        self.assertGranted(holder.cmd("LOCK", key))
        before = script_calls(rc)
        w = self.queue(self.b, key, "WAIT", 20000, waiters=1)
        self.wait_attempt(rc, before)
        self.assertEqual(rc.cmd("CLIENT", "KILL", "TYPE", "pubsub"), 2)
        self.assertEqual(holder.cmd("UNLOCK", key), 0)
        t0 = time.monotonic()
        g = read_within(w, PUBSUB_LOST_BOUND + 2)
        took = time.monotonic() - t0
        self.assertIsNotNone(g, "the waiter was not granted within %.0f s of the release"
                             % (PUBSUB_LOST_BOUND + 2))
        self.assertGranted(g)
        report("grant on B after the release on A, subscribers killed: %.0f ms"
               % (1000 * took))
        self.assertLess(took, PUBSUB_LOST_BOUND)
        self.assertEqual(w.cmd("UNLOCK", key), 0)
        # both daemons subscribe again, and wake-ups are prompt again
        wait_until(lambda: len(pubsub_clients(rc)) == 2, RECONNECT_BOUND, 0.02,
                   "both daemons to subscribe again")
        self.assertGranted(holder.cmd("LOCK", key))
        before = script_calls(rc)
        w2 = self.queue(self.b, key, "WAIT", 5000, waiters=1)
        self.wait_attempt(rc, before)
        self.assertEqual(holder.cmd("UNLOCK", key), 0)
        t0 = time.monotonic()
        self.assertGranted(w2.read())
        self.assertLess(time.monotonic() - t0, WAKE_BOUND,
                        "wake-ups are slow after the subscribers reconnected")
        self.assertEqual(w2.cmd("UNLOCK", key), 0)

    def test_fences_across_daemons(self):
        key = unique_key()
        ca, cb = self.conn(self.a), self.conn(self.b)
        fences = []
        for i in range(30):
            c = (ca, cb)[i % 2]
            g = self.assertGranted(c.cmd("LOCK", key, "WAIT", 0))
            fences.append(g[1])
            self.assertEqual(c.cmd("VALIDATE", key, g[1]), 1)
            self.assertEqual(c.cmd("UNLOCK", key), 0)
        self.assertGreater(fences[0], 10 ** 15)
        self.assertTrue(all(x < y for x, y in zip(fences, fences[1:])), fences)
        # each daemon reports the last fence it issued
        self.assertEqual(self.status(self.a, key)["fence"], fences[-2])
        self.assertEqual(self.status(self.b, key)["fence"], fences[-1])

    def test_shared_across_daemons(self):
        key = unique_key()
        sa, sb = self.conn(self.a), self.conn(self.b)
        ga = self.assertGranted(sa.cmd("LOCK", key, "SHARED", "WAIT", 0))
        gb = self.assertGranted(sb.cmd("LOCK", key, "SHARED", "WAIT", 0))
        self.assertLess(ga[1], gb[1])
        # exclusive is refused on both daemons while shared holders exist
        self.assertIs(self.conn(self.a).cmd("LOCK", key, "WAIT", 0), NULL)
        self.assertIs(self.conn(self.b).cmd("LOCK", key, "WAIT", 0), NULL)
        # an exclusive waiter on A: A's own shared holder leaves, B's stays
        x = self.queue(self.a, key, "WAIT", 20000, waiters=1)
        self.assertEqual(sa.cmd("UNLOCK", key), 0)
        self.assertIsNone(read_within(x, 0.3), "exclusive granted while B holds shared")
        self.assertEqual(sb.cmd("UNLOCK", key), 0)
        t0 = time.monotonic()
        gx = self.assertGranted(x.read())
        self.assertLess(time.monotonic() - t0, WAKE_BOUND)
        self.assertGreater(gx[1], gb[1])
        # shared is refused on B while A holds exclusive
        self.assertIs(self.conn(self.b).cmd("LOCK", key, "SHARED", "WAIT", 0), NULL)
        self.assertEqual(x.cmd("UNLOCK", key), 0)

    def test_semaphore_across_daemons(self):
        key = unique_key()
        p1, p2 = self.conn(self.a), self.conn(self.b)
        g1 = self.assertGranted(p1.cmd("LOCK", key, "LIMIT", 2, "WAIT", 0))
        g2 = self.assertGranted(p2.cmd("LOCK", key, "LIMIT", 2, "WAIT", 0))
        self.assertLess(g1[1], g2[1])
        for d in (self.a, self.b):
            self.assertIs(self.conn(d).cmd("LOCK", key, "LIMIT", 2, "WAIT", 0), NULL,
                          "a third permit of two on %s" % d.addr())
        p3 = self.queue(self.a, key, "LIMIT", 2, "WAIT", 20000, waiters=1)
        self.assertEqual(p2.cmd("UNLOCK", key), 0)  # a permit freed on B
        t0 = time.monotonic()
        g3 = self.assertGranted(p3.read())
        self.assertLess(time.monotonic() - t0, WAKE_BOUND)
        self.assertGreater(g3[1], g2[1])
        self.assertIs(self.conn(self.b).cmd("LOCK", key, "LIMIT", 2, "WAIT", 0), NULL)
        self.assertEqual(p1.cmd("UNLOCK", key), 0)
        self.assertEqual(p3.cmd("UNLOCK", key), 0)
        self.assertGranted(self.conn(self.b).cmd("LOCK", key, "LIMIT", 2, "WAIT", 0))

    def test_scripts_reloaded_after_script_flush(self):
        # EVALSHA answers NOSCRIPT after SCRIPT FLUSH: the daemons load the
        # scripts again and nothing fails
        rc = self.redis_conn(self.redis)
        key = unique_key()
        ca, cb = self.conn(self.a), self.conn(self.b)
        self.assertGranted(ca.cmd("LOCK", key))
        self.assertEqual(rc.cmd("SCRIPT", "FLUSH"), "OK")
        w = self.queue(self.b, key, "WAIT", 10000, waiters=1)
        self.assertEqual(ca.cmd("UNLOCK", key), 0)
        self.assertGranted(w.read())
        self.assertEqual(w.cmd("UNLOCK", key), 0)
        self.assertEqual(rc.cmd("SCRIPT", "FLUSH"), "OK")
        for c in (ca, cb):
            k = unique_key()
            self.assertGranted(c.cmd("LOCK", k, "WAIT", 0))
            self.assertEqual(c.cmd("UNLOCK", k), 0)
        # the scripts that answered NOSCRIPT were loaded again: later calls
        # are EVALSHA, not EVAL with the whole script
        self.assertEqual(rc.cmd("CONFIG", "RESETSTAT"), "OK")
        for c in (ca, cb):
            k = unique_key()
            self.assertGranted(c.cmd("LOCK", k, "WAIT", 0))
            self.assertEqual(c.cmd("UNLOCK", k), 0)
        stats = rc.cmd("INFO", "commandstats")
        if isinstance(stats, bytes):
            stats = stats.decode()
        self.assertNotIn("cmdstat_eval:", stats)
        self.assertIn("cmdstat_evalsha:calls=4,", stats)

    def test_info_backend_fields(self):
        c = self.conn(self.a)
        k = unique_key()
        self.assertGranted(c.cmd("LOCK", k))
        self.assertEqual(c.cmd("UNLOCK", k), 0)
        info = self.info(self.a)
        self.assertEqual(info["backend"], "redis")
        for name in BACKEND_FIELDS:
            self.assertIn(name, info, "INFO lacks %s" % name)
            self.assertRegex(info[name], r"^\d+$", name)
        self.assertEqual(info["backend_connected"], "1")
        self.assertGreaterEqual(int(info["backend_scripts_loaded"]), 1)
        # HELLO names the same backend
        hello = c.cmd("HELLO", "3")
        self.assertEqual(hello[b"backend"], b"redis")
        c.cmd("HELLO", "2")
        self.assertEqual(info["backend_maxmemory_policy"], "noeviction")
        # renewals are counted: a lock of TTL 6000 (the shortest with the
        # default command_timeout_ms) is renewed every 2000 ms
        before = int(info["backend_renewals_total"])
        self.assertGranted(c.cmd("LOCK", k, "TTL", 6000))
        wait_until(lambda: int(self.info(self.a)["backend_renewals_total"]) > before, 4,
                   0.02, "backend_renewals_total to grow")
        self.assertEqual(c.cmd("UNLOCK", k), 0)


class TestRedisProcesses(RedisCase):
    """Each test starts its own redis-server and daemons, and stops,
    kills or restarts them."""


    def fast_pair(self):
        """A redis-server and daemons A and B on it with short timeouts (TTLs
        from 900 ms allowed)."""
        r = self.start_redis()
        return (r, self.start_daemon(r, CONFIG_TTL, backend_conf=FAST),
                self.start_daemon(r, CONFIG_TTL, backend_conf=FAST))

    def holder_and_queue(self, daemon, key, n):
        """A connection holding key on daemon, and n connections queued
        behind it in order: (its grant, the n waiters)."""
        holder = self.conn(daemon)
        g0 = self.assertGranted(holder.cmd("LOCK", key))
        ws = []
        for i in range(n):
            w = self.conn(daemon)
            w.send(Raw.encode("LOCK", key, "WAIT", 30000))
            self.wait_status(daemon, key, waiters=i + 1)
            ws.append(w)
        return holder, g0, ws

    def assertLostAtRenewal(self, conn, key, fence, since, ttl):
        """conn (RESP3) is told, within a third of ttl ms after since (a
        time.monotonic()), that its lock on key with fence is lost."""
        p = read_within(conn, ttl / 1000)
        took = time.monotonic() - since
        self.assertIsInstance(p, Push, "no lost push within the TTL")
        self.assertEqual(p[:3], [b"lost", key.encode(), fence])
        self.assertLess(took, ttl / 3000 + 0.3 * SLOWDOWN,
                        "the loss was reported %.0f ms after the lease went"
                        % (1000 * took))

    def test_fences_across_daemon_restart(self):
        r = self.start_redis()
        port, a, b = self.restartable_pair(r)
        key, fences = unique_key(), []
        self.take_turns((a, b), key, fences, 5)
        a.stop_checked()
        self.take_turns((b,), key, fences)
        a2 = self.start_daemon(r, port=port)
        self.assertEqual(self.status(a2, key)["fence"], 0)  # a new daemon knows nothing
        self.take_turns((a2, b), key, fences, 3)
        self.assertEqual(a2.stop(signal.SIGKILL), -signal.SIGKILL)
        a3 = self.start_daemon(r, port=port)
        self.take_turns((a3, b), key, fences)
        self.assertGreater(fences[0], 10 ** 15)
        self.assertTrue(all(x < y for x, y in zip(fences, fences[1:])),
                        "fences across restarts: %s" % fences)

    def test_killed_daemon_locks_expire(self):
        r = self.start_redis()
        a = self.start_daemon(r, CONFIG_TTL, backend_conf=FAST)
        b = self.start_daemon(r, CONFIG_TTL, backend_conf=FAST)
        k1, k2, k3 = unique_key("x"), unique_key("s"), unique_key("l")
        c1, c2 = self.conn(a), self.conn(a)
        fences = {}
        fences[k1] = self.assertGranted(c1.cmd("LOCK", k1, "TTL", TTL))[1]
        fences[k2] = self.assertGranted(c1.cmd("LOCK", k2, "SHARED", "TTL", TTL))[1]
        self.assertGranted(c1.cmd("LOCK", k3, "LIMIT", 2, "TTL", TTL))
        fences[k3] = self.assertGranted(c2.cmd("LOCK", k3, "LIMIT", 2, "TTL", TTL))[1]
        calls = {}
        for k, opts in ((k1, ()), (k2, ()), (k3, ("LIMIT", 2))):
            w = self.queue(b, k, *opts, "WAIT", 3 * TTL + 5000, waiters=1)
            w.settimeout(TTL / 1000 + KILL_MARGIN + 5)
            calls[k] = in_thread(w.read)
        # the leases in Redis are renewed ones
        self.wait_renewal(a, TTL / 1000, "A to renew its locks")
        took = self.granted_after_kill(a, calls, fences, TTL / 1000 + KILL_MARGIN + 5)
        report("locks of a killed daemon granted elsewhere after %s ms (TTL %d ms)"
               % (ms(took.values()), TTL))
        for k, t in took.items():
            # a lease renewed at least every TTL/3 has two thirds of it left
            self.assertGreaterEqual(t, TTL / 3000, "%s free %.3f s after the kill, "
                                    "before its lease can have run out" % (k, t))
            self.assertLess(t, TTL / 1000 + KILL_MARGIN,
                            "%s free only %.3f s after the kill" % (k, t))

    def test_sigterm_releases_at_once(self):
        # a daemon that stops closes its sessions, and that releases their
        # locks in Redis: another daemon does not wait for the leases
        r = self.start_redis()
        a = self.start_daemon(r)
        b = self.start_daemon(r)
        k1, k2 = unique_key(), unique_key()
        c = self.conn(a)
        self.assertGranted(c.cmd("LOCK", k1))
        self.assertGranted(c.cmd("LOCK", k2, "SHARED"))
        calls = []
        for k in (k1, k2):
            w = self.conn(b)
            w.send(Raw.encode("LOCK", k, "WAIT", 20000))
            self.wait_status(b, k, waiters=1)
            calls.append(in_thread(w.read))
        t0 = time.monotonic()
        a.stop_checked()
        for call in calls:
            self.assertGranted(call.result(5))
            self.assertLess(call.done_at - t0, 2.0)

    def test_outage_with_queued_waiters(self):
        # Redis stopped past command_timeout_ms while waiters are queued on a
        # key being released: the dropped connection fails the handoff in
        # flight, and none of that may touch the dead connection (the
        # daemon must live). The waiters, their WAIT not over, wait through
        # the outage and are granted one by one, in order, once Redis is
        # back; the release, and the call whose reply was lost, are settled
        # then, so the key is free again at the end
        r = self.start_redis()
        a = self.start_daemon(r, CONFIG_TTL, backend_conf=FAST)
        key = unique_key()
        h = self.conn(a)
        self.assertGranted(h.cmd("LOCK", key))
        ws = []
        for i in range(4):
            w = self.conn(a)
            w.settimeout(30)
            w.send(Raw.encode("LOCK", key, "WAIT", 20000))
            ws.append(w)
            self.wait_status(a, key, waiters=i + 1)
        r.pause()
        try:
            h.close()           # the release and the head's acquire hang
            for w in ws:
                self.assertIsNone(read_within(w, 0.3), "a waiter answered while Redis "
                                  "does not answer")
            wait_until(lambda: self.info(a).get("backend_connected") == "0", 5,
                       what="the daemon to see Redis gone")
            self.assertTrue(a.running(), a.log())
        finally:
            r.resume()
        fences = []
        for w in ws:
            fences.append(self.assertGranted(w.read())[1])
            self.assertEqual(w.cmd("UNLOCK", key), 0)
        self.assertEqual(fences, sorted(fences))
        self.assertGreater(int(self.info(a)["backend_waits_total"]), 0)
        c = self.conn(a)
        c.settimeout(30)
        self.assertGranted(c.cmd("LOCK", key, "WAIT", TTL + 5000))
        self.assertEqual(c.cmd("UNLOCK", key), 0)

    def status_holder(self, daemon, key):
        """The first holder of key in STATUS key FULL on daemon, a dict."""
        return pairs(pairs(self.conn(daemon).cmd("STATUS", key, "FULL"))["holders"][0])

    def test_suspended_then_resumed(self):
        # Redis stopped (SIGSTOP) past a renewal, and back before the
        # lease's margin: a holder that asked (CLIENT SUSPENDPUSH ON) is
        # pushed "suspended" when the first renewal fails and "resumed"
        # when one succeeds again, and is never told lost; STATUS FULL and
        # INFO show the suspension meanwhile. A holder that did not ask is
        # pushed nothing
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf=FAST)
        h = self.conn(a)
        self.hello3(h)
        self.assertEqual(h.cmd("CLIENT", "SUSPENDPUSH", "ON"), "OK")
        quiet = self.conn(a)
        self.hello3(quiet)
        key, other = unique_key("s"), unique_key("q")
        fence = self.assertGranted(h.cmd("LOCK", key, "TTL", 6000))[1]
        self.assertGranted(quiet.cmd("LOCK", other, "TTL", 6000))
        t_lock = time.monotonic()
        r.pause()
        try:
            push = read_within(h, 5.0)
            t_suspended = time.monotonic()
            self.assertIsInstance(push, Push, push)
            self.assertEqual(push[:3], [b"suspended", key.encode(), fence])
            self.assertIn(b"redis 127.0.0.1:%d" % r.port, push[3])
            holder = self.status_holder(a, key)
            self.assertEqual(holder["suspended"], 1)
            self.assertEqual(self.info(a)["sessions_suspended"], "2")
            self.assertIsNone(read_within(h, 0.3))
        finally:
            r.resume()
        push = read_within(h, 4.0)
        t_resumed = time.monotonic()
        self.assertEqual(push, [b"resumed", key.encode(), fence])
        report("suspended %.2f s after the LOCK (renewal at 2 s), resumed %.2f s after SIGCONT"
               % (t_suspended - t_lock, t_resumed - t_suspended))
        self.assertEqual(self.status_holder(a, key)["suspended"], 0)
        wait_until(lambda: self.info(a)["sessions_suspended"] == "0", 3.0, 0.02,
                   "INFO sessions_suspended:0")
        self.assertEqual(h.cmd("PING"), "PONG")
        self.assertEqual(quiet.cmd("PING"), "PONG")
        self.assertEqual(h.cmd("UNLOCK", key), 0)
        self.assertEqual(quiet.cmd("UNLOCK", other), 0)
        # without RESP3 there are no pushes to ask for
        self.assertErr(self.conn(a).cmd("CLIENT", "SUSPENDPUSH", "ON"), "ERR")

    def test_lost_before_redis_ttl(self):
        # redis-server stopped (SIGSTOP) past the lease: the holder is told
        # (RESP3 push "lost") before the key can have expired in Redis, and
        # no other daemon is granted the key before that
        r = self.start_redis()
        a = self.start_daemon(r, CONFIG_TTL, backend_conf=FAST)
        b = self.start_daemon(r, CONFIG_TTL, backend_conf=FAST)
        k1, k2, k3 = unique_key("x"), unique_key("s"), unique_key("r2")
        h = self.conn(a)
        self.hello3(h)
        h2 = self.conn(a)  # RESP2: told by -LOST only
        waiters = []
        for k in (k1, k2, k3):
            w = self.conn(b)
            w.settimeout(30)
            waiters.append(w)
        # the grants, each with the time its LOCK was sent: Redis ran the
        # script after that, so the key cannot expire before send + TTL
        sent = {}
        fence = {}
        sent[k1] = time.monotonic()
        fence[k1] = self.assertGranted(h.cmd("LOCK", k1))[1]
        sent[k2] = time.monotonic()
        fence[k2] = self.assertGranted(h.cmd("LOCK", k2, "SHARED"))[1]
        sent[k3] = time.monotonic()
        fence[k3] = self.assertGranted(h2.cmd("LOCK", k3))[1]
        # waiters on the other daemon
        for w, k in zip(waiters, (k1, k2, k3)):
            w.send(Raw.encode("LOCK", k, "WAIT", 20000))
        for k in (k1, k2, k3):
            self.wait_status(b, k, waiters=1)
        r.pause()
        t_stop = time.monotonic()
        self.assertLess(t_stop - sent[k1], TTL / 4000,
                        "too slow to stop Redis before the first renewal")
        grants = {}

        def take(w, k):
            # a waiter may be answered -BACKEND while Redis is unreachable:
            # it asks again; what matters is when the key is granted
            grants[k] = grant_through_outage(w, k, 20000, 0.02)

        takers = [in_thread(take, w, k) for w, k in zip(waiters, (k1, k2, k3))]
        try:
            pushes = in_thread(read_pushes, h, 2,
                               sent[k1] + TTL / 1000 + 1.5).result(TTL / 1000 + 5)
            # keep Redis stopped until every lease has run out in it
            sleep_until(sent[k3] + TTL / 1000 + 0.3)
        finally:
            r.resume()
        t_cont = time.monotonic()
        results(takers, 30)
        report("lost pushes %s ms after the LOCKs were sent (TTL %d ms); other daemon's grants "
               "%s ms after SIGCONT" % (ms(pushes[k][0] - sent[k] for k in pushes), TTL,
                                        ms(g[0] - t_cont for g in grants.values())))
        for k in (k1, k2):
            self.assertIn(k, pushes, "no lost push for %s within the lease" % k)
            t, p = pushes[k]
            self.assertEqual(list(p), [b"lost", k.encode(), fence[k], p[3]])
            self.assertIsInstance(p[3], bytes)
            self.assertLess(t, sent[k] + TTL / 1000,
                            "the lost push for %s came %.0f ms after the LOCK was sent"
                            % (k, 1000 * (t - sent[k])))
            self.assertLess(t, grants[k][0], "%s granted on B before A's holder was told" % k)
        self.assertNotIn(k3, pushes)
        for k in (k1, k2, k3):
            self.assertGreater(grants[k][1][1], fence[k])
        # the next commands answer -LOST, one loss each (pushed or not), then
        # the keys are not held
        self.assertLostReplies(h, {k1: fence[k1], k2: fence[k2]})
        self.assertLostReplies(h2, {k3: fence[k3]})
        for c, k in ((h, k1), (h, k2), (h2, k3)):
            self.assertErr(c.cmd("UNLOCK", k), "NOTHELD")
        self.assertGreaterEqual(int(self.info(a)["lost_total"]), 3)

    def test_lost_at_once_when_another_owner(self):
        # the lease is taken from under the holder (its Redis keys deleted,
        # the key locked through B): A's next renewal reports the loss at
        # once, not when the lease would have run out
        r, a, b = self.fast_pair()
        key = unique_key()
        ttl = 1500
        h = self.conn(a)
        self.hello3(h)
        fence = self.assertGranted(h.cmd("LOCK", key, "TTL", ttl))[1]
        rc = r.client()
        self.addCleanup(rc.connection_pool.disconnect)
        leases = [n for n in rc.scan_iter(match="*" + key + "*") if rc.pttl(n) > 0]
        self.assertTrue(leases, "no Redis key with an expiry names %s: %s"
                        % (key, rc.keys("*")))
        t0 = time.monotonic()
        rc.delete(*leases)
        gb = self.assertGranted(self.conn(b).cmd("LOCK", key, "WAIT", 0))
        self.assertLostAtRenewal(h, key, fence, t0, ttl)
        self.assertGreater(gb[1], fence)
        self.assertErr(h.cmd("UNLOCK", key), "LOST")
        info = self.info(a)
        self.assertGreaterEqual(int(info["lost_total"]), 1)
        self.assertGreaterEqual(int(info["backend_lost_total"]), 1)

    def test_campaign_and_lockall_wait_through_restart(self):
        # Redis stopped before they are sent, started again within their
        # WAIT: a CAMPAIGN, a LOCKALL and LOCKs queued on one key are
        # granted once it is back, the LOCKs in the order they came; with
        # a wrong password (refused for good) a LOCK answers at once
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf=FAST)
        self.assertEqual(r.stop(), 0)
        key, k1, k2 = unique_key("c"), unique_key("m1"), unique_key("m2")
        queued = unique_key("q")
        camp, multi = self.conn(a), self.conn(a)
        camp.send(camp.encode("CAMPAIGN", key, "v", "WAIT", 15000))
        multi.send(multi.encode("LOCKALL", 2, k1, k2, "WAIT", 15000))
        ws = []
        for _ in range(3):
            w = self.conn(a)
            w.send(w.encode("LOCK", queued, "WAIT", 15000))
            ws.append(w)
            self.wait_status(a, queued, waiters=len(ws))
        for c in [camp, multi] + ws:
            self.assertIsNone(read_within(c, 0.05))
        time.sleep(1.0)
        self.start_redis(port=r.port, directory=r.dir)
        self.assertGranted(read_within(camp, RECONNECT_BOUND))
        sets = read_within(multi, RECONNECT_BOUND)
        self.assertIsInstance(sets, list, sets)
        self.assertEqual(len(sets), 2)
        fences = []
        for w in ws:
            fences.append(self.assertGranted(read_within(w, RECONNECT_BOUND))[1])
            self.assertEqual(w.cmd("UNLOCK", queued), 0)
        self.assertEqual(fences, sorted(fences))
        self.assertEqual(camp.cmd("UNLOCK", key), 0)
        self.assertIsInstance(multi.cmd("UNLOCKALL", 2, k1, k2), list)
        self.assertGreater(int(self.info(a)["backend_waits_total"]), 0)

    def test_lock_while_redis_down(self):
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf=FAST)
        c = self.conn(a)
        before = int(self.info(a)["backend_reconnects_total"])
        self.assertEqual(r.stop(), 0)
        waiting = self.assertRefusedWhileDown(a, c, BACKEND_REPLY_BOUND, "Redis", 2)
        # redis-server back on the same port: locks work again, and the
        # LOCK that waited through the outage is granted
        r2 = self.start_redis(port=r.port, directory=r.dir)
        self.assertGrantedLater(waiting, RECONNECT_BOUND)
        self.assertLocksAgain(a, c, RECONNECT_BOUND, before)
        self.assertTrue(r2.running())

    def test_closed_session_released_after_outage(self):
        # a session closes while Redis does not answer (SIGSTOP): its lock
        # is released in Redis once Redis answers again, long before its TTL
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf=FAST)
        b = self.start_daemon(r, backend_conf=FAST)
        key = unique_key()
        h = self.conn(a)
        self.assertGranted(h.cmd("LOCK", key, "TTL", 60000))
        probe = self.conn(a)
        r.pause()
        try:
            # a command that times out tells A that Redis is unreachable
            probe.send(Raw.encode("LOCK", unique_key(), "WAIT", 0))
            reply = read_within(probe, 3.0 * SLOWDOWN)
            self.assertIsNotNone(reply, "LOCK hung while Redis does not answer")
            self.assertErr(reply, "BACKEND")
            wait_until(lambda: self.info(a)["backend_connected"] == "0", 3, 0.02,
                       "INFO backend_connected:0 on A")
            h.close()  # the session ends while Redis is unreachable
            # A takes no new lock meanwhile
            self.assertErr(probe.cmd("LOCK", unique_key(), "WAIT", 0), "BACKEND")
        finally:
            r.resume()
        t_cont = time.monotonic()
        w = self.conn(b)

        def granted():
            reply = w.cmd("LOCK", key, "WAIT", 0)
            if isinstance(reply, Err):
                self.assertEqual(reply.code, "BACKEND", reply)
                return False
            return reply is not NULL

        wait_until(granted, RECONNECT_BOUND, 0.05,
                   "the lock of the closed session to be released")
        took = time.monotonic() - t_cont
        report("lock of a session closed during the outage free %.0f ms after SIGCONT"
               % (1000 * took))
        wait_until(lambda: self.info(a)["backend_connected"] == "1", RECONNECT_BOUND, 0.02,
                   "INFO backend_connected:1 on A")

    def test_reconnect_keeps_locks(self):
        # the daemons' connections are killed (CLIENT KILL TYPE normal): they
        # reconnect, renewals go on, the lock is neither lost nor free
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf=FAST)
        b = self.start_daemon(r, backend_conf=FAST)
        key = unique_key()
        ttl = 1200
        h = self.conn(a)
        self.hello3(h)
        fence = self.assertGranted(h.cmd("LOCK", key, "TTL", ttl))[1]
        rc = self.redis_conn(r)
        before = int(self.info(a)["backend_reconnects_total"])
        self.assertGreaterEqual(rc.cmd("CLIENT", "KILL", "TYPE", "normal"), 2)
        wait_until(lambda: int(self.info(a)["backend_reconnects_total"]) > before,
                   RECONNECT_BOUND, 0.02, "A to reconnect")
        # held for more than a lease: no push, still valid, not free
        p = read_within(h, 1.5 * ttl / 1000)
        self.assertIsNone(p, "unexpected %r after a reconnection" % (p,))
        self.assertEqual(h.cmd("VALIDATE", key, fence), 1)
        cb = self.conn(b)

        def answered():
            reply = cb.cmd("LOCK", key, "WAIT", 0)
            if isinstance(reply, Err) and reply.code == "BACKEND":
                return False
            return [reply]

        self.assertEqual(wait_until(answered, RECONNECT_BOUND, 0.05, "B to answer LOCK"),
                         [NULL])
        self.assertEqual(h.cmd("UNLOCK", key), 0)
        self.assertGranted(cb.cmd("LOCK", key, "WAIT", 5000))

    def handoff_run(self, n, limit):
        """A holder and n waiters on daemon A (backend.handoff_limit set to
        limit), one waiter on daemon B, every grantee releasing at once.
        Returns how many of A's waiters were granted before B (fences are
        strictly increasing across daemons, so they give the order)."""
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf={"handoff_limit": limit})
        b = self.start_daemon(r)
        key = unique_key()
        holder, g0, ws = self.holder_and_queue(a, key, n)
        wb = self.conn(b)
        wb.send(Raw.encode("LOCK", key, "WAIT", 30000))
        self.wait_status(b, key, waiters=1)
        fences_a = []
        fence_b = []

        def run_a():
            for i, w in enumerate(ws):
                g = read_within(w, 20)
                if not isinstance(g, list):
                    raise AssertionError("waiter %d on A got %r" % (i, g))
                fences_a.append(g[1])
                if w.cmd("UNLOCK", key) != 0:
                    raise AssertionError("waiter %d: UNLOCK did not release" % i)

        def run_b():
            g = read_within(wb, 20)
            if not isinstance(g, list):
                raise AssertionError("the waiter on B got %r" % (g,))
            fence_b.append(g[1])
            if wb.cmd("UNLOCK", key) != 0:
                raise AssertionError("B: UNLOCK did not release")

        ca, cb = in_thread(run_a), in_thread(run_b)
        self.assertEqual(holder.cmd("UNLOCK", key), 0)
        ca.result(30)
        cb.result(30)
        place = sum(1 for f in fences_a if f < fence_b[0])
        report("handoff_limit %d, %d waiters on A and 1 on B: B granted after %d of "
               "A's waiters; A's local handoffs %s" % (
                   limit, n, place, a.info().get("backend_local_handoffs_total")))
        self.assertTrue(all(x < y for x, y in zip(fences_a, fences_a[1:])),
                        "A's waiters out of order: %s" % fences_a)
        self.assertNotIn(fence_b[0], fences_a)
        self.assertGreater(min(fences_a + fence_b), g0[1])
        return place

    def test_handoff_limit(self):
        # A hands the key from one local waiter to the next without
        # releasing it, backend.handoff_limit times in a row while another
        # daemon waits; then it releases it for the other daemon. The first
        # handoff reserves fences for limit grants (the queue is longer);
        # the call to Redis after them sees B's mark and gives way
        limit, n = 4, 24
        place = self.handoff_run(n, limit)
        self.assertEqual(place, limit, "A's grants before B's")

    def test_handoff_limit_lets_other_daemons_in(self):
        # the point of the limit: a daemon with a long local queue does not
        # keep the key from a waiter on another daemon until its queue is
        # empty
        limit, n = 4, 60
        place = self.handoff_run(n, limit)
        self.assertLess(place, n, "B was granted only after all of A's %d waiters, "
                        "though A releases the key every %d grants" % (n, limit))

    def test_local_handoffs(self):
        # a daemon holding a key hands it from one local waiter to the next
        # without Redis: one script call reserves fences for up to
        # handoff_limit grants. Fences stay strictly increasing, the order
        # FIFO, and a daemon that comes later still gets a higher fence
        r = self.start_redis()
        a = self.start_daemon(r)
        b = self.start_daemon(r)
        key = unique_key()
        rc = r.raw()
        n = 40
        holder, g0, ws = self.holder_and_queue(a, key, n)
        before = commandstats(rc).get("evalsha", 0)
        info0 = a.info()
        self.assertEqual(holder.cmd("UNLOCK", key), 0)
        fences = []
        for i, w in enumerate(ws):
            g = self.assertGranted(read_within(w, 10))
            fences.append(g[1])
            self.assertEqual(w.cmd("UNLOCK", key), 0)
        calls = commandstats(rc).get("evalsha", 0) - before
        info = a.info()
        local = int(info["backend_local_handoffs_total"]) - int(
            info0["backend_local_handoffs_total"])
        report("%d handoffs on one daemon: %d script calls (the last one a release), "
               "%d handoffs local" % (n, calls, local))
        self.assertEqual(fences, sorted(set(fences)), "fences not strictly increasing")
        self.assertGreater(fences[0], g0[1])
        # default handoff_limit 16: 40 grants need 3 transfers and a release
        self.assertLessEqual(calls, 6)
        self.assertGreaterEqual(local, n - 4)
        self.assertEqual(info["handoffs_total"], str(int(info0["handoffs_total"]) + n))
        # the fences reserved and not used are never given out again
        gb = self.assertGranted(self.conn(b).cmd("LOCK", key, "WAIT", 5000))
        self.assertGreater(gb[1], fences[-1])

    def test_local_holder_renewed_and_told_of_loss(self):
        # a lock handed on locally is held under the lease Redis knows by an
        # earlier holder's token: renewals of the new holder keep that lease,
        # so it holds for many TTLs while another daemon is refused; when
        # the lease goes from Redis, the holder hears of it at its next
        # renewal, as any holder would
        r, a, b = self.fast_pair()
        key = unique_key()
        ttl = 1500
        h0 = self.conn(a)
        self.assertGranted(h0.cmd("LOCK", key, "TTL", ttl))
        w1 = self.conn(a)
        w1.send(Raw.encode("LOCK", key, "TTL", ttl, "WAIT", 10000))
        self.wait_status(a, key, waiters=1)
        w2 = self.conn(a)
        self.hello3(w2)
        w2.send(Raw.encode("LOCK", key, "TTL", ttl, "WAIT", 10000))
        self.wait_status(a, key, waiters=2)
        self.assertEqual(h0.cmd("UNLOCK", key), 0)
        g1 = self.assertGranted(read_within(w1, 5))
        local0 = int(a.info()["backend_local_handoffs_total"])
        self.assertEqual(w1.cmd("UNLOCK", key), 0)
        g2 = self.assertGranted(read_within(w2, 5))
        self.assertGreater(g2[1], g1[1])
        self.assertEqual(int(a.info()["backend_local_handoffs_total"]), local0 + 1,
                         "the second handoff went to Redis")
        rc = r.client()
        self.addCleanup(rc.connection_pool.disconnect)
        lease = [n for n in rc.scan_iter(match="*l:" + key)]
        self.assertEqual(len(lease), 1, rc.keys("*"))
        self.assertNotIn(g2[0], rc.get(lease[0]),
                         "the lease in Redis is not an earlier holder's")
        other = self.conn(b)
        t_end = time.monotonic() + 3 * ttl / 1000
        while time.monotonic() < t_end:
            self.assertIsNone(read_within(w2, 0.3), "the holder heard something")
            self.assertEqual(other.cmd("LOCK", key, "WAIT", 0), NULL,
                             "B was granted a key held on A")
        t0 = time.monotonic()
        rc.delete(lease[0])
        self.assertLostAtRenewal(w2, key, g2[1], t0, ttl)
        gb = self.assertGranted(other.cmd("LOCK", key, "WAIT", 5000))
        self.assertGreater(gb[1], g2[1])

    def test_detached_waiter_handed_on_through_redis(self):
        # a DETACH lock is promised its whole TTL: it is not handed on
        # under the lease left by an earlier holder
        r = self.start_redis()
        a = self.start_daemon(r, CONFIG_TTL, backend_conf=FAST)
        key = unique_key()
        h0 = self.conn(a)
        self.assertGranted(h0.cmd("LOCK", key, "TTL", 1500))
        ws = []
        for i, opts in enumerate((("TTL", 1500), ("TTL", 3000, "DETACH"))):
            w = self.conn(a)
            w.send(Raw.encode("LOCK", key, *opts, "WAIT", 10000))
            self.wait_status(a, key, waiters=i + 1)
            ws.append(w)
        self.assertEqual(h0.cmd("UNLOCK", key), 0)
        self.assertGranted(read_within(ws[0], 5))
        time.sleep(0.3)
        local0 = int(a.info()["backend_local_handoffs_total"])
        self.assertEqual(ws[0].cmd("UNLOCK", key), 0)
        g = self.assertGranted(read_within(ws[1], 5))
        self.assertEqual(int(a.info()["backend_local_handoffs_total"]), local0)
        self.assertGreater(g[2], 2700, "the DETACH lock got less than its TTL")

    def cached(self, r, lease_cache_ms=1000):
        """Daemons A (backend.lease_cache_ms set) and B on r, and a key A
        has locked and unlocked: its lease is cached on A. Returns (a, b,
        key, the grant on A, A's connection)."""
        a = self.start_daemon(r, backend_conf={"lease_cache_ms": lease_cache_ms})
        b = self.start_daemon(r)
        key = unique_key()
        c = self.conn(a)
        g = self.assertGranted(c.cmd("LOCK", key))
        self.assertEqual(c.cmd("UNLOCK", key), 0)
        self.assertEqual(a.info()["backend_cached_leases"], "1")
        return a, b, key, g, c

    def redis_holds(self, r, key):
        """Whether Redis has a lease of key (the daemon's lock key)."""
        return r.raw().cmd("EXISTS", "dlock:l:" + key) == 1

    def test_lease_cache_relock_without_redis(self):
        # with backend.lease_cache_ms, a released exclusive lease stays in
        # Redis that long: a LOCK of the key on the same daemon takes it
        # without a call to Redis, with the next of the fences reserved
        # when it was acquired; when the time is up it is released
        r = self.start_redis()
        a, _, key, g1, c = self.cached(r, lease_cache_ms=300)
        rc = r.raw()
        before = commandstats(rc).get("evalsha", 0)
        g2 = self.assertGranted(c.cmd("LOCK", key))
        self.assertEqual(c.cmd("UNLOCK", key), 0)
        g3 = self.assertGranted(c.cmd("LOCK", key))
        self.assertEqual(commandstats(rc).get("evalsha", 0), before,
                         "a LOCK of a cached lease called Redis")
        self.assertLess(g1[1], g2[1])
        self.assertLess(g2[1], g3[1])
        self.assertEqual(a.info()["backend_cache_hits_total"], "2")
        self.assertEqual(c.cmd("UNLOCK", key), 0)
        self.assertTrue(self.redis_holds(r, key))
        wait_until(lambda: not self.redis_holds(r, key), 2.0, 0.01,
                   "the cached lease to be released")
        self.assertEqual(a.info()["backend_cached_leases"], "0")

    def test_lease_cache_given_up_when_another_daemon_asks(self):
        # another daemon that asks for a key cached on A gets it at once, not
        # after the cache time (1 s here): its busy answer publishes the key
        # on <prefix>wanted, and A releases the lease. A try (WAIT 0) in
        # the cache time finds it busy: the price of the cache
        r = self.start_redis()
        a, b, key, g1, _ = self.cached(r)
        wb = self.conn(b)
        self.assertEqual(wb.cmd("LOCK", key, "WAIT", 0), NULL)
        wait_until(lambda: not self.redis_holds(r, key), 0.5, 0.005,
                   "A to give up the cached lease")
        t0 = time.monotonic()
        gb = self.assertGranted(wb.cmd("LOCK", key, "WAIT", 5000))
        self.assertLess(time.monotonic() - t0, 0.3)
        self.assertGreater(gb[1], g1[1])
        # and while B waits, a lease A holds is not cached when released
        c = self.conn(a)
        c.send(Raw.encode("LOCK", key, "WAIT", 5000))
        self.wait_status(a, key, waiters=1)
        self.assertEqual(wb.cmd("UNLOCK", key), 0)
        ga = self.assertGranted(read_within(c, 5))
        self.assertGreater(ga[1], gb[1])
        w2 = self.conn(b)
        w2.send(Raw.encode("LOCK", key, "WAIT", 5000))
        self.wait_status(b, key, waiters=1)
        t0 = time.monotonic()
        self.assertEqual(c.cmd("UNLOCK", key), 0)
        self.assertGranted(read_within(w2, 5))
        self.assertLess(time.monotonic() - t0, 0.3, "B waited for the cache time")

    def test_lease_cache_not_trusted_after_redis_restart_without_data(self):
        # Redis restarted without its data has lost A's cached lease, and B
        # takes the key from the new Redis at once: A must not grant the key
        # from its cache (two holders, and a fence below B's) once its
        # connection to Redis has dropped, but ask the new Redis
        r = self.start_redis()
        a, b, key, g1, c = self.cached(r, lease_cache_ms=1000)
        t_cached = time.monotonic()
        self.assertEqual(r.stop(), 0)
        wait_until(lambda: a.info()["backend_connected"] == "0", 5, 0.02,
                   "A to see Redis gone")
        r2 = self.start_redis(port=r.port, directory=r.dir)
        wait_until(lambda: a.info()["backend_connected"] == "1" and
                   b.info()["backend_connected"] == "1", RECONNECT_BOUND, 0.02,
                   "A and B to reconnect to the new Redis")
        self.assertFalse(self.redis_holds(r2, key))
        wb = self.conn(b)
        gb = self.assertGranted(wb.cmd("LOCK", key, "WAIT", 0))
        self.assertGreater(gb[1], g1[1])
        report("A asks %.0f ms after its lease was cached (for 1000 ms)"
               % (1000 * (time.monotonic() - t_cached)))
        self.assertEqual(c.cmd("LOCK", key, "WAIT", 0), NULL,
                         "A granted a key B holds from a cached lease Redis lost")
        self.assertEqual(wb.cmd("UNLOCK", key), 0)
        ga = self.assertGranted(c.cmd("LOCK", key, "WAIT", 5000))
        self.assertGreater(ga[1], gb[1])
        self.assertEqual(c.cmd("UNLOCK", key), 0)
        # the daemons stop before the new Redis does (their cleanups would
        # come after its own, and a daemon waits for Redis at shutdown)
        a.stop_checked()
        b.stop_checked()

    def test_lease_cache_released_at_shutdown(self):
        # a daemon that stops releases its cached leases in Redis
        r = self.start_redis()
        a, _, key, _, _ = self.cached(r)
        self.assertTrue(self.redis_holds(r, key))
        a.stop_checked()
        self.assertFalse(self.redis_holds(r, key))

    def test_handoff_gives_way_to_a_waiter_gone(self):
        # the mark says another daemon waits, but its waiter has gone: when
        # the run of handoffs reaches the limit, A's transfer releases the key
        # and deletes the mark; nobody takes it, and A's own queue goes on by
        # itself (its retry after the pause), every waiter granted in order
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf={"handoff_limit": 1})
        b = self.start_daemon(r)
        key = unique_key()
        rc = r.client()
        self.addCleanup(rc.connection_pool.disconnect)
        holder = self.conn(a)
        self.assertGranted(holder.cmd("LOCK", key))
        # B's attempt finds the key busy (the mark is set), then gives up
        self.assertEqual(self.conn(b).cmd("LOCK", key, "WAIT", 50), NULL)
        marks = [n for n in rc.scan_iter(match="*w:" + key)]
        self.assertEqual(len(marks), 1, rc.keys("*"))
        ws = []
        for i in range(3):
            w = self.conn(a)
            w.send(Raw.encode("LOCK", key, "WAIT", 10000))
            self.wait_status(a, key, waiters=i + 1)
            ws.append(w)
        t0 = time.monotonic()
        self.assertEqual(holder.cmd("UNLOCK", key), 0)
        fences = []
        for i, w in enumerate(ws):
            g = read_within(w, 5 * SLOWDOWN)
            self.assertIsInstance(g, list, "waiter %d on A got %r" % (i, g))
            fences.append(g[1])
            self.assertEqual(w.cmd("UNLOCK", key), 0)
        took = time.monotonic() - t0
        self.assertEqual(fences, sorted(fences))
        # the first handoff goes on (none before it); the second gives way
        # once and deletes the mark; the waiter it passed over acquires
        # after the pause, and the third is a handoff again
        self.assertEqual(rc.exists(*marks), 0, "the mark is still there")
        self.assertGreaterEqual(took, 0.08, "no pause: A did not give way")
        self.assertEqual(int(self.info(a)["handoffs_total"]), 2)

    def test_backend_url_password_db_and_prefix(self):
        r = self.start_redis(password="s3cret")
        # -b redis://:s3cret@127.0.0.1:port/3
        a = self.start_daemon(r, backend_url=r.url(db=3))
        # backend: section with password, db and key_prefix
        b = self.start_daemon(r, backend_conf={"db": 3, "key_prefix": "other:"})
        key = unique_key()
        ga = self.assertGranted(self.conn(a).cmd("LOCK", key))
        # another prefix is another name space: the same key is free there
        gb = self.assertGranted(self.conn(b).cmd("LOCK", key, "WAIT", 0))
        self.assertGreater(min(ga[1], gb[1]), 10 ** 15)
        db3 = r.client(db=3)
        db0 = r.client(db=0)
        self.addCleanup(db3.connection_pool.disconnect)
        self.addCleanup(db0.connection_pool.disconnect)
        names = [n.decode(errors="replace") for n in db3.keys("*")]
        self.assertTrue(names)
        self.assertTrue(all(n.startswith(("dlock:", "other:")) for n in names), names)
        self.assertTrue(any(n.startswith("dlock:") and key in n for n in names), names)
        self.assertTrue(any(n.startswith("other:") and key in n for n in names), names)
        self.assertEqual(db0.dbsize(), 0)


class TestRedisCommandCounts(RedisCase):
    """How many Redis commands a lock costs, counted with MONITOR (commands
    the daemons send, and commands their scripts run) and INFO commandstats
    (both together). The figures are printed; only sane bounds are
    asserted."""

    def measure(self, r, run, n, what):
        """Run run() with counting on; print and return the counts per
        operation: (sent by the daemons, all in commandstats)."""
        mon = RedisMonitor(r)
        self.addCleanup(mon.stop)
        mon.sync()
        mon.take()
        self.assertEqual(mon.ctl.cmd("CONFIG", "RESETSTAT"), "OK")
        run()
        mon.sync()
        stats = {k: v for k, v in commandstats(mon.ctl).items() if k not in OWN_COMMANDS}
        sent, lua = count_commands(mon.take())
        report("redis commands per %s (n=%d): sent by dlockd %.2f (%s); run by scripts "
               "%.2f (%s); commandstats %.2f (%s)"
               % (what, n, sum(sent.values()) / n, fmt_counts(sent, n),
                  sum(lua.values()) / n, fmt_counts(lua, n),
                  sum(stats.values()) / n, fmt_counts(stats, n)))
        return sum(sent.values()) / n, sum(stats.values()) / n

    def test_uncontended(self):
        r = self.start_redis()
        a = self.start_daemon(r)
        self.start_daemon(r)  # a second daemon, idle
        c = self.conn(a)
        k = unique_key()
        self.assertGranted(c.cmd("LOCK", k))  # scripts loaded before counting
        self.assertEqual(c.cmd("UNLOCK", k), 0)
        n = 200
        keys = [unique_key() for _ in range(n)]

        def run():
            for k in keys:
                self.assertGranted(c.cmd("LOCK", k, "WAIT", 0))
                self.assertEqual(c.cmd("UNLOCK", k), 0)

        sent, total = self.measure(r, run, n, "LOCK+UNLOCK pair, uncontended")
        self.assertLessEqual(sent, 3.0)
        self.assertLessEqual(total, 20.0)

    def test_contended(self):
        r = self.start_redis()
        a = self.start_daemon(r)
        b = self.start_daemon(r)
        key = unique_key()
        rounds = 15
        daemons = (a, a, a, b, b, b)
        n = rounds * len(daemons)

        def worker(d):
            c = d.raw()
            try:
                for _ in range(rounds):
                    g = c.cmd("LOCK", key, "WAIT", 30000)
                    if not isinstance(g, list):
                        raise AssertionError("LOCK answered %r" % (g,))
                    if c.cmd("UNLOCK", key) != 0:
                        raise AssertionError("UNLOCK did not release")
            finally:
                c.close()

        def run():
            calls = [in_thread(worker, d) for d in daemons]
            for call in calls:
                call.result(60)

        sent, total = self.measure(r, run, n, "acquisition, 6 clients on 2 daemons on one key")
        self.assertLessEqual(sent, 10.0)
        self.assertLessEqual(total, 40.0)


class TestRedisServerHarness(RedisTestCase):
    """The harness's redis-server: started, paused, stopped, restarted."""

    def test_start_pause_stop(self):
        r = self.start_redis()
        rc = r.raw()
        self.assertEqual(rc.cmd("PING"), "PONG")
        self.assertEqual(rc.cmd("CONFIG", "GET", "save"), [b"save", b""])
        self.assertEqual(rc.cmd("CONFIG", "GET", "appendonly"), [b"appendonly", b"no"])
        self.assertEqual(rc.cmd("CONFIG", "GET", "bind")[1], b"127.0.0.1")
        r.pause()
        rc.send(Raw.encode("PING"))
        self.assertIsNone(read_within(rc, 0.2), "a paused redis-server answered")
        r.resume()
        self.assertEqual(rc.read(), "PONG")
        rc.close()
        self.assertEqual(r.stop(), 0)
        self.assertEqual(r.stop(), 0)  # twice is fine
        r2 = self.start_redis(port=r.port, directory=r.dir)
        self.assertEqual(r2.port, r.port)
        r2.pause()  # a paused server is stopped too

    def test_missing_binary_fails(self):
        saved = env.REDIS_SERVER
        env.REDIS_SERVER = "/nonexistent/redis-server"
        try:
            with self.assertRaisesRegex(AssertionError, "redis-server is missing"):
                RedisServer().start()
        finally:
            env.REDIS_SERVER = saved

    def test_monitor_counts_sources(self):
        r = self.start_redis()
        mon = RedisMonitor(r)
        self.addCleanup(mon.stop)
        c = r.raw()
        c.cmd("EVAL", "redis.call('incr', KEYS[1]); redis.call('publish', 'ch', 'x') "
              "return 1", 1, "k")
        c.cmd("SET", "a", "b")
        c.close()
        mon.sync()
        sent, lua = count_commands(mon.take())
        self.assertEqual(sent, {"eval": 1, "set": 1})
        self.assertEqual(lua, {"incr": 1, "publish": 1})


if __name__ == "__main__":
    import unittest
    unittest.main()
