"""dlockd at scale: 10,000 idle sessions while others lock, the client limit
reached with them in, 10,000 waiters on one key, one session pipelining
100,000 LOCKs, and memory going back once the crowd has gone.

The figures (resident size per idle session; baseline, peak and after for
the waiters and the keys) are reported, not asserted, except that the
daemon's VmRSS must come back down once the crowd has gone: after the keys,
within NEAR_KIB of its baseline or within half of the peak's growth when that
is larger (glibc cannot give back a page that a few live records still share
with freed ones); after 10,000 sessions, below three quarters of the peak's
growth, and a second crowd must leave no more behind than the first (what
stays is a high-water mark the next crowd reuses, not memory lost). A daemon built
with sanitizers or run under valgrind has an allocator of theirs: its
figures are reported, not checked."""

import threading
import unittest

from dlocktest.cases import report
from dlocktest.daemon import Daemon
from dlocktest.env import WRAPPER, unique_key
from dlocktest.proc import raise_nofile, vm_rss_kib, wait_until
from dlocktest.resp import Err, Raw, parse_info, read_within
from dlocktest.sessions import close_hard, open_sessions

CROWD = 10000          # idle sessions, waiters
KEYS = 100000          # LOCKs one session pipelines
NEAR_KIB = 4096        # "back near the baseline": within 4 MiB ...
NEAR_FRACTION = 0.5    # ... or within half of the peak's growth
SETTLE = 10.0          # s for the daemon to free what the crowd held

raise_nofile(CROWD + 200)


def info(d):
    return parse_info(d.raw().cmd("INFO"))


def glibc_heap(d):
    """Whether d allocates with glibc's malloc (no sanitizer, no valgrind)."""
    if WRAPPER:
        return False
    with open("/proc/%d/maps" % d.pid) as f:
        return not any("libasan" in line or "libtsan" in line for line in f)


def settled_rss(d, base, peak):
    """d's VmRSS once it has come back near base, or after SETTLE s."""
    allowed = max(NEAR_KIB, NEAR_FRACTION * (peak - base))
    try:
        wait_until(lambda: vm_rss_kib(d.pid) - base <= allowed, SETTLE, 0.1,
                   "VmRSS to come back near its baseline")
    except AssertionError:
        pass
    return vm_rss_kib(d.pid)


def back_near(test, d, base, peak, what):
    """Wait (bounded) until d's VmRSS is near base again; report and assert
    (glibc's heap only)."""
    allowed = max(NEAR_KIB, NEAR_FRACTION * (peak - base))
    after = settled_rss(d, base, peak)
    report("%s: VmRSS baseline %d KiB, peak %d KiB, after %d KiB (allowed %d)"
           % (what, base, peak, after, base + allowed))
    if glibc_heap(d):
        test.assertLessEqual(after - base, allowed, "%s: memory not given back" % what)


class TestIdleSessions(unittest.TestCase):
    """10,000 idle sessions while other clients keep locking."""

    def test_idle_crowd(self):
        d = Daemon("limits:\n  max_clients: %d\n" % (CROWD + 10), unix=False).start()
        idle = []
        stop = threading.Event()
        done = {"locks": 0, "errors": []}

        def locker():
            c = d.raw()
            key = unique_key("busy")
            try:
                while not stop.is_set():
                    g = c.cmd("LOCK", key, "WAIT", "5000")
                    u = c.cmd("UNLOCK", key)
                    if isinstance(g, list) and u == 0:
                        done["locks"] += 1
                    else:
                        done["errors"].append((g, u))
            except Exception as e:  # noqa: BLE001  (reported below)
                done["errors"].append(e)
            finally:
                c.close()
        try:
            base = vm_rss_kib(d.pid)
            t = threading.Thread(target=locker)
            t.start()
            idle = open_sessions(d.port, CROWD)
            self.assertGreaterEqual(int(info(d)["connected_clients"]), CROWD)
            rss = vm_rss_kib(d.pid)
            report("%d idle sessions: VmRSS %d -> %d KiB, %.1f KiB each"
                   % (CROWD, base, rss, (rss - base) / CROWD))
            wait_until(lambda: done["locks"] > 0 or done["errors"], 10, 0.01,
                       "a lock to be taken")
            before = done["locks"]
            wait_until(lambda: done["locks"] > before + 10 or done["errors"], 10, 0.01,
                       "locks to go on being taken")
            stop.set()
            t.join(15)
            self.assertFalse(t.is_alive(), "the locker is stuck")
            self.assertEqual(done["errors"], [])
            # every idle session is still open: a sample answers, and none
            # of them was closed by the daemon
            for s in idle[::CROWD // 200]:
                s.sendall(b"PING\r\n")
            for s in idle[::CROWD // 200]:
                self.assertEqual(s.recv(64), b"+PONG\r\n")
            self.assertGreaterEqual(int(info(d)["connected_clients"]), CROWD)
            # past limits.max_clients, with the crowd in: refused and closed
            extra = []
            try:
                for _ in range(20):
                    c = Raw(port=d.port, timeout=5)
                    extra.append(c)
                    rep = c.cmd("PING")
                    if rep != "PONG":
                        break
                self.assertEqual(rep, Err("LIMIT max number of clients reached"))
                self.assertTrue(c.is_closed())
                self.assertEqual(extra[0].cmd("PING"), "PONG")
                idle[0].sendall(b"PING\r\n")
                self.assertEqual(idle[0].recv(64), b"+PONG\r\n")
            finally:
                for c in extra:
                    c.close()
        finally:
            stop.set()
            close_hard(idle)
            d.stop_ok(self)


class TestManyWaiters(unittest.TestCase):
    """10,000 waiters on one key (limits.max_waiters_per_key's default)."""

    def test_waiter_crowd(self):
        d = Daemon("limits:\n  max_clients: %d\n" % (CROWD + 20), unix=False).start()
        key = unique_key("crowd")
        socks = []
        try:
            holder = d.raw()
            self.assertIsInstance(holder.cmd("LOCK", key), list)
            base = vm_rss_kib(d.pid)
            socks = open_sessions(d.port, CROWD)
            for s in socks:
                s.sendall(Raw.encode("LOCK", key, "WAIT", "120000"))
            wait_until(lambda: info(d)["waiters"] == str(CROWD), 30, 0.05,
                       "%d waiters" % CROWD)
            peak = vm_rss_kib(d.pid)
            # one more: a clear refusal, and the session stays usable
            late = d.raw()
            rep = late.cmd("LOCK", key, "WAIT", "120000")
            self.assertIsInstance(rep, Err)
            self.assertTrue(rep.startswith("LIMIT too many waiters on this key "
                                           "(limits.max_waiters_per_key is 10000)"), rep)
            self.assertEqual(late.cmd("PING"), "PONG")
            # the queue still works, first come first served
            self.assertEqual(holder.cmd("UNLOCK", key), 0)
            first = [_wrap(s) for s in socks[:4]]
            for i in range(3):
                self.assertIsInstance(first[i].read(), list, "waiter %d not granted" % i)
                self.assertIsNone(read_within(first[i + 1], 0.05),
                                  "waiter %d granted out of turn" % (i + 1))
                self.assertEqual(first[i].cmd("UNLOCK", key), 0)
            self.assertEqual((info(d)["waiters"], info(d)["locks_held"]), (str(CROWD - 4), "1"))
            # they leave: everything is freed
            close_hard(socks)
            socks = []
            holder.close()
            late.close()
            wait_until(lambda: info(d)["waiters"] == "0" and info(d)["keys"] == "0"
                       and info(d)["locks_held"] == "0", SETTLE, 0.05,
                       "the waiters to be freed")
            wait_until(lambda: info(d)["connected_clients"] == "1", SETTLE, 0.05,
                       "the sessions to be closed")
            after = settled_rss(d, base, peak)
            # a second crowd: what stays resident after the first is a high-water
            # mark that the next one reuses, not memory lost
            socks = open_sessions(d.port, CROWD)
            for s in socks:
                s.sendall(Raw.encode("LOCK", key, "WAIT", "120000"))
            wait_until(lambda: info(d)["waiters"] == str(CROWD - 1), 30, 0.05,
                       "%d waiters again" % (CROWD - 1))
            close_hard(socks)
            socks = []
            wait_until(lambda: info(d)["connected_clients"] == "1" and
                       info(d)["keys"] == "0", SETTLE, 0.05, "the second crowd to be freed")
            again = settled_rss(d, base, peak)
            report("%d waiters: VmRSS baseline %d KiB, peak %d KiB, after %d KiB, after a "
                   "second crowd %d KiB" % (CROWD, base, peak, after, again))
            if glibc_heap(d):
                self.assertLess(after - base, (peak - base) * 3 // 4,
                                "10000 waiters: memory not given back")
                self.assertLessEqual(again - after, NEAR_KIB,
                                     "10000 waiters: a second crowd left more behind")
        finally:
            close_hard(socks)
            d.stop_ok(self)


def _wrap(sock):
    """A Raw reading from sock (a session opened by open_sessions)."""
    r = Raw.__new__(Raw)
    r.s, r.buf, r.last_raw = sock, b"", b""
    return r


class TestManyKeys(unittest.TestCase):
    """One session pipelining 100,000 LOCKs of distinct keys."""

    def test_key_crowd(self):
        d = Daemon("", unix=False).start()
        try:
            base = vm_rss_kib(d.pid)
            c = d.raw(timeout=60)
            prefix = unique_key("many") + "/"
            pipeline = b"".join(Raw.encode("LOCK", prefix + str(i), "WAIT", "0")
                                for i in range(KEYS)) + b"PING\r\n"
            sender = threading.Thread(target=c.s.sendall, args=(pipeline,))
            sender.start()
            chunks, tail = [], b""
            while not tail.endswith(b"+PONG\r\n"):
                data = c.s.recv(1 << 20)
                if not data:
                    self.fail("the daemon closed the pipelining session")
                chunks.append(data)
                tail = (tail + data)[-16:]
            sender.join(30)
            replies = b"".join(chunks)
            granted = replies.count(b"*3\r\n")
            refused = replies.count(b"-LIMIT too many locks held by this session "
                                    b"(limits.max_locks_per_session is 10000, waits "
                                    b"included)\r\n")
            self.assertEqual((granted, refused), (10000, KEYS - 10000))
            peak = vm_rss_kib(d.pid)
            self.assertEqual(info(d)["locks_held"], "10000")
            # the session stays usable: one released, one more taken
            self.assertEqual(c.cmd("UNLOCK", prefix + "0"), 0)
            self.assertIsInstance(c.cmd("LOCK", prefix + "again", "WAIT", "0"), list)
            self.assertEqual(c.cmd("PING"), "PONG")
            c.close()
            wait_until(lambda: info(d)["locks_held"] == "0" and info(d)["keys"] == "0",
                       SETTLE, 0.05, "every lock to be released")
            back_near(self, d, base, peak, "%d pipelined LOCKs" % KEYS)
        finally:
            d.stop_ok(self)


if __name__ == "__main__":
    unittest.main()
