"""Several keys at once across daemons, whatever the backend: LOCKALL and
UNLOCKALL through one daemon, single LOCKs through another, which learns of
the keys from the backend alone.

LockAllAcrossDaemons holds the tests; test_lockall.py makes a TestCase of
it for each backend with two daemons of the class, a and b, on one backend
(on memory both are the one daemon). Every test uses keys of its own.
"""

import time

from .env import SLOWDOWN, unique_key
from .proc import in_thread, results, wait_until
from .resp import NULL, Err, read_within

WAKE = 5.0 * SLOWDOWN  # s for a release through one daemon to reach another's waiter
IO = 2 * WAKE + 5  # s the connections wait for a reply


def is_null(reply):
    return reply is NULL or reply is None


class LockAllAcrossDaemons:
    """The tests, for a TestCase whose class has two daemons, a and b, on
    one backend (a mixin: it is no TestCase itself)."""

    def keys(self, n):
        """n keys of the test's own (a class may put them on different
        servers)."""
        return [unique_key("m%d" % i) for i in range(n)]

    def assertSet(self, reply, n):
        """reply is a granted set of n keys: n [token, fence, validity]."""
        self.assertIsInstance(reply, list, reply)
        self.assertEqual(len(reply), n, reply)
        for g in reply:
            self.assertIsInstance(g, list, reply)
            self.assertEqual(len(g[0]), 32, reply)
            self.assertGreater(g[1], 0, reply)
            self.assertGreater(g[2], 0, reply)
        return reply

    def assertFree(self, daemon, key):
        """key can be had at once through daemon (then it is let go)."""
        c = self.conn(daemon, timeout=IO)
        deadline = time.monotonic() + WAKE
        while True:
            r = c.cmd("LOCK", key, "WAIT", 0)
            if not is_null(r) or time.monotonic() > deadline:
                break
            time.sleep(0.02)  # a release on its way through the backend
        self.assertIsInstance(r, list, "%s not free: %r" % (key, r))
        self.assertEqual(c.cmd("UNLOCK", key), 0)

    def test_set_in_the_order_given(self):
        k = self.keys(3)
        ca, cb = self.conn(self.a, timeout=IO), self.conn(self.b, timeout=IO)
        ga = self.assertSet(ca.cmd("LOCKALL", 3, k[2], k[0], k[1], "TTL", 10000), 3)
        for key, g in zip((k[2], k[0], k[1]), ga):
            self.assertEqual(ca.cmd("VALIDATE", key, g[1]), 1)
            self.assertTrue(is_null(cb.cmd("LOCK", key, "WAIT", 0)), key)
        self.assertEqual(ca.cmd("UNLOCKALL", 3, k[0], k[1], k[2]), [0, 0, 0])
        gb = self.assertSet(self.lockall_when_free(cb, k), 3)
        for x, y in zip(ga, (gb[2], gb[0], gb[1])):
            self.assertGreater(y[1], x[1])  # each key's fence goes up

    def lockall_when_free(self, conn, keys, *opts):
        """LOCKALL keys, waiting for a release on its way (WAKE)."""
        return conn.cmd("LOCKALL", len(keys), *keys, "WAIT", int(WAKE * 1000), *opts)

    def test_all_or_none(self):
        k = self.keys(3)
        ca, cb = self.conn(self.a, timeout=IO), self.conn(self.b, timeout=IO)
        self.assertIsInstance(cb.cmd("LOCK", k[1]), list)
        t0 = time.monotonic()
        self.assertTrue(is_null(ca.cmd("LOCKALL", 3, k[0], k[1], k[2], "WAIT", 300)))
        self.assertGreater(time.monotonic() - t0, 0.25)
        self.assertTrue(is_null(ca.cmd("LOCKALL", 2, k[2], k[1], "WAIT", 0)))
        # what a took while it waited for k[1] is given back, and k[2] was
        # never taken: b has both at once
        self.assertSet(cb.cmd("LOCKALL", 2, k[0], k[2], "WAIT", 0), 2)
        st = self.status(self.a, k[0])
        self.assertEqual(st["waiters"], 0, st)

    def test_waits_then_granted(self):
        k = self.keys(2)
        ca, cb = self.conn(self.a, timeout=IO), self.conn(self.b, timeout=IO)
        self.assertIsInstance(cb.cmd("LOCK", k[1]), list)
        ca.send(ca.encode("LOCKALL", 2, k[1], k[0], "WAIT", int(WAKE * 1000)))
        # a holds k[0] while it waits for k[1]
        wait_until(lambda: self.status(self.a, k[1])["waiters"] == 1
                   or self.status(self.a, k[0])["holders"] == 1, WAKE, 0.01,
                   "a's LOCKALL under way")
        self.assertEqual(cb.cmd("UNLOCK", k[1]), 0)
        self.assertSet(read_within(ca, WAKE), 2)
        self.assertEqual(ca.cmd("UNLOCKALL", 2, k[0], k[1]), [0, 0])

    def test_opposite_orders_never_deadlock(self):
        """Sessions on both daemons name the same keys in opposite orders,
        with single LOCKs of one of them between: every set is had."""
        k = self.keys(3)
        rounds = 12

        def worker(daemon, order):
            c = daemon.raw(timeout=IO)
            try:
                fences = []
                for _ in range(rounds):
                    r = c.cmd("LOCKALL", len(order), *order, "WAIT", int(WAKE * 1000))
                    if not isinstance(r, list):
                        return "round failed: %r" % (r,)
                    fences.append(dict(zip(order, (g[1] for g in r))))
                    time.sleep(0.002)
                    if c.cmd("UNLOCKALL", len(order), *order) != [0] * len(order):
                        return "UNLOCKALL failed"
                return fences
            finally:
                c.close()

        def single(daemon, key):
            c = daemon.raw(timeout=IO)
            try:
                for _ in range(rounds):
                    r = c.cmd("LOCK", key, "WAIT", int(WAKE * 1000))
                    if not isinstance(r, list):
                        return "LOCK failed: %r" % (r,)
                    c.cmd("UNLOCK", key)
                return "ok"
            finally:
                c.close()

        calls = [in_thread(worker, self.a, k), in_thread(worker, self.b, k[::-1]),
                 in_thread(worker, self.a, [k[2], k[0]]), in_thread(single, self.b, k[1])]
        got = results(calls, 4 * WAKE + rounds * 2.0 * SLOWDOWN)
        self.assertEqual(got[3], "ok")
        for g in got[:3]:
            self.assertIsInstance(g, list, g)
        # no fence of a key was granted twice
        for key in k:
            fences = [f[key] for g in got[:3] for f in g if key in f]
            self.assertEqual(len(fences), len(set(fences)), key)

    def test_close_while_waiting_gives_back(self):
        k = self.keys(2)
        cb = self.conn(self.b, timeout=IO)
        self.assertIsInstance(cb.cmd("LOCK", k[1]), list)
        c = self.a.raw(timeout=IO)
        c.send(c.encode("LOCKALL", 2, k[0], k[1]))
        wait_until(lambda: self.status(self.a, k[0])["holders"] == 1, WAKE, 0.01,
                   "k[0] taken")
        c.close()
        self.assertFree(self.b, k[0])

    def test_one_key_of_a_set(self):
        k = self.keys(2)
        ca = self.conn(self.a, timeout=IO)
        g = self.assertSet(ca.cmd("LOCKALL", 2, k[0], k[1], "TTL", 10000), 2)
        self.assertGreater(ca.cmd("EXTEND", k[0], 20000), 0)
        self.assertEqual(ca.cmd("UNLOCK", k[1], g[1][0]), 0)
        self.assertFree(self.b, k[1])
        r = ca.cmd("UNLOCKALL", 2, k[0], k[1])
        self.assertIsInstance(r, Err, r)
        self.assertEqual(r.code, "NOTHELD", r)
        self.assertEqual(ca.cmd("VALIDATE", k[0], g[0][1]), 1)  # nothing released
        self.assertEqual(ca.cmd("UNLOCKALL", 1, k[0]), [0])
        self.assertFree(self.b, k[0])
