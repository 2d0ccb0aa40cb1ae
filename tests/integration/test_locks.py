"""Locking end to end: modes, reentrancy, tokens, fences, WAIT, FIFO order,
DETACH, EXTEND, STATUS, VALIDATE, LOCKS, INFO, and release on disconnect.

TestLocks runs on the memory backend; TestLocksRedis runs the same tests on
the redis backend, against a redis-server of its own, TestLocksRedlock on the
redlock backend, against three redis-servers of its own, TestLocksRedisCluster
on the redis-cluster backend, against a Redis Cluster of its own, and
TestLocksEtcd on the etcd backend, against an etcd of its own. Where the backends
legitimately differ (where fences start, the validity of a lease and
STATUS ttl_ms, STATUS's backend state, INFO's backend fields) the checks ask
self.BACKEND, or are check_* methods that a backend's class overrides.
"""

import signal
import subprocess
import threading
import time

import redis

from dlocktest.cases import DaemonTestCase, hangup
from dlocktest.cluster import lock_keys
from dlocktest.env import PYTHON, SLOWDOWN, unique_key
from dlocktest.proc import in_thread, read_line, reap, spawn, wait_until
from dlocktest.resp import TOKEN_RE, Err, Raw, pairs


class TestLocks(DaemonTestCase):
    CONFIG = ""
    BACKEND = "memory"
    TTL_MIN = 10  # ms: the shortest TTL the backend keeps

    def lock(self, conn, key, *opts):
        return conn.execute_command("LOCK", key, *opts)

    def leases_in_redis(self):
        """Whether leases live in Redis and count down there: the redis
        backend, the redlock backend (on each of its nodes) and the
        redis-cluster backend (on the master of the lock's slot)."""
        return self.BACKEND in ("redis", "redlock", "redis-cluster")

    def drift_ms(self, ttl):
        """What the backend takes off a lease of ttl for clock drift:
        redlock's TTL x clock_drift_factor (0.01) + 2 ms, nothing elsewhere."""
        return ttl * 0.01 + 2 if self.BACKEND == "redlock" else 0

    def check_first_fence(self, fence):
        """fence is the first one issued for a key never locked before. The
        memory backend draws fences from one counter seeded with the wall
        clock in microseconds; the redis backend takes the larger of the
        key's counter + 1 and Redis's clock in microseconds. Either way a new
        key's first fence is past 10**15 (since 2001)."""
        self.assertGreater(fence, 10 ** 15, "a clock-based fence")

    def check_validity(self, left, ttl, bound=True):
        """left is the validity a LOCK or EXTEND reported for a lease of ttl
        (of a session lock if bound, else of a DETACH lock): the whole TTL on
        memory (leases live in the daemon); on redis what is left of it,
        counted from when the request was sent; on redlock that less the
        drift allowance."""
        if self.leases_in_redis():
            top = ttl - self.drift_ms(ttl)
            self.assertLessEqual(left, top + 1, "validity %d of %d" % (left, ttl))
            self.assertGreater(left, top - 100 * SLOWDOWN, "validity %d of %d" % (left, ttl))
        else:
            self.assertEqual(left, ttl)

    def check_session_ttl(self, ttl_ms, ttl):
        """ttl_ms is STATUS's ttl_ms of a session lock held with lease ttl.
        Memory leases live in the daemon: the whole TTL, always. Redis
        leases count down and are renewed every ttl/3: what is left since
        the last renewal, never 0 and not much under two thirds of ttl (so
        are redlock leases, on every node)."""
        if self.leases_in_redis():
            self.assertLessEqual(ttl_ms, ttl)
            self.assertGreater(ttl_ms, ttl // 2, "a redis lease left to run out")
        else:
            self.assertEqual(ttl_ms, ttl, "a memory session lease is the whole TTL")

    def check_fresh_ttl(self, ttl_ms, ttl, bound=True):
        """ttl_ms is STATUS's ttl_ms of a lock (a session lock if bound)
        whose lease of ttl was set (by LOCK or EXTEND) a moment ago: at most
        ttl, and most of it left."""
        self.assertLessEqual(ttl_ms, ttl)
        self.assertGreater(ttl_ms, ttl - 5000, "a lease set a moment ago")

    def assertNumbers(self, info, names):
        """INFO has each of the fields names, a whole number."""
        for name in names:
            self.assertIn(name, info)
            self.assertRegex(info[name], r"^\d+$", name)

    def check_backend_info(self, info):
        """INFO's backend fields (those the backend has on top of the
        common ones)."""
        if self.BACKEND == "redis":
            self.assertNumbers(info, ("backend_connected", "backend_reconnects_total",
                                      "backend_scripts_loaded", "backend_renewals_total",
                                      "backend_lost_total"))
            self.assertEqual(info["backend_connected"], "1")

    def backend_state(self):
        """STATUS's backend field: the memory backend is always "local"; the
        redis backend is "connected" while its connection to Redis is up,
        the redlock backend while every node is."""
        return b"connected" if self.leases_in_redis() else b"local"

    def test_lock_unlock(self):
        key = unique_key()
        r = self.client()
        g = self.lock(r, key)
        self.assertIsInstance(g, list)
        self.assertEqual(len(g), 3)
        token, fence, ttl = g
        self.assertRegex(token, TOKEN_RE)
        self.assertIsInstance(fence, int)
        self.check_first_fence(fence)
        self.check_validity(ttl, 30000)  # locks.default_ttl_ms, what is left of it
        st = self.status(key)
        self.assertEqual(st["mode"], b"exclusive")
        self.assertEqual(st["holders"], 1)
        self.assertEqual(st["waiters"], 0)
        self.assertEqual(st["fence"], fence)
        self.assertEqual(st["limit"], 0)
        self.check_session_ttl(st["ttl_ms"], 30000)
        self.check_fresh_ttl(st["ttl_ms"], 30000)
        self.assertEqual(r.execute_command("UNLOCK", key), 0)
        st = self.status(key)
        self.assertEqual(st["mode"], b"free")
        self.assertEqual(st["holders"], 0)
        self.assertEqual(st["ttl_ms"], -1)
        self.assertEqual(st["fence"], fence)  # the last fence issued stays
        with self.assertRaisesRegex(redis.ResponseError, "^NOTHELD"):
            r.execute_command("UNLOCK", key)

    def test_status_of_unknown_key(self):
        st = self.status(unique_key())
        self.assertEqual(st, {"mode": b"free", "holders": 0, "waiters": 0, "fence": 0,
                              "ttl_ms": -1, "limit": 0, "backend": self.backend_state()})

    def test_status_field_order(self):
        key = unique_key()
        flat = self.client().execute_command("STATUS", key)
        self.assertEqual(flat[0::2], [b"mode", b"holders", b"waiters", b"fence",
                                      b"ttl_ms", b"limit", b"backend"])

    def test_tokens_are_distinct(self):
        r = self.client()
        tokens = set()
        for i in range(20):
            g = self.lock(r, unique_key(), "WAIT", 0)
            self.assertRegex(g[0], TOKEN_RE)
            tokens.add(g[0])
        self.assertEqual(len(tokens), 20)

    def test_reentrant(self):
        key = unique_key()
        r = self.client()
        g1 = self.lock(r, key, "TTL", 20000)
        g2 = self.lock(r, key, "WAIT", 0)
        g3 = self.lock(r, key)
        self.assertEqual(g1[:2], g2[:2])
        self.assertEqual(g1[:2], g3[:2])
        locks = r.execute_command("LOCKS")
        self.assertEqual(locks, [[key.encode(), g1[0], g1[1], b"exclusive", 3]])
        self.assertEqual(self.status(key)["holders"], 1)
        self.assertEqual(r.execute_command("UNLOCK", key), 2)
        self.assertEqual(r.execute_command("UNLOCK", key), 1)
        other = self.client()
        self.assertIsNone(self.lock(other, key, "WAIT", 0))
        self.assertEqual(r.execute_command("UNLOCK", key), 0)
        self.assertIsNotNone(self.lock(other, key, "WAIT", 0))

    def test_relock_in_other_mode(self):
        key = unique_key()
        r = self.client()
        self.lock(r, key)
        with self.assertRaisesRegex(redis.ResponseError,
                                    "^key is held by this session in exclusive mode"):
            self.lock(r, key, "SHARED")
        with self.assertRaises(redis.ResponseError):
            self.lock(r, key, "LIMIT", 2)
        key2 = unique_key()
        self.lock(r, key2, "SHARED")
        with self.assertRaisesRegex(redis.ResponseError,
                                    "^key is held by this session in shared mode"):
            self.lock(r, key2)
        key3 = unique_key()
        self.lock(r, key3, "LIMIT", 3)
        with self.assertRaisesRegex(redis.ResponseError,
                                    "^key is held by this session in semaphore mode"):
            self.lock(r, key3)
        # still held, once each
        self.assertEqual(sorted(e[4] for e in r.execute_command("LOCKS")), [1, 1, 1])

    def test_exclusive_excludes(self):
        key = unique_key()
        a, b = self.client(), self.client()
        self.lock(a, key)
        self.assertIsNone(self.lock(b, key, "WAIT", 0))
        self.assertIsNone(self.lock(b, key, "SHARED", "WAIT", 0))
        self.assertEqual(self.status(key)["waiters"], 0)  # WAIT 0 never queues

    def test_wait_times_out(self):
        key = unique_key()
        a, b = self.client(), self.client()
        self.lock(a, key)
        before = int(self.info()["timeouts_total"])
        t0 = time.monotonic()
        self.assertIsNone(self.lock(b, key, "WAIT", 150))
        took = time.monotonic() - t0
        self.assertGreaterEqual(took, 0.14)
        self.assertLess(took, 1.5)
        self.assertEqual(self.status(key)["waiters"], 0)
        self.assertGreater(int(self.info()["timeouts_total"]), before)
        # the connection is usable and the holder unaffected
        self.assertIs(b.execute_command("PING"), True)
        self.assertEqual(self.status(key)["holders"], 1)

    def test_wait_granted_on_release(self):
        key = unique_key()
        a, b = self.client(), self.client()
        ga = self.lock(a, key)
        call = in_thread(self.lock, b, key, "WAIT", 5000)
        self.wait_status(key, waiters=1)
        self.assertEqual(a.execute_command("UNLOCK", key), 0)
        gb = call.result(5)
        self.assertIsNotNone(gb)
        self.assertGreater(gb[1], ga[1])
        self.assertEqual(b.execute_command("LOCKS")[0][:3], [key.encode(), gb[0], gb[1]])

    def test_fences_increase(self):
        key = unique_key()
        conns = [self.client(), self.client(), self.client()]
        fences = []
        for i in range(60):
            c = conns[i % 3]
            g = self.lock(c, key, "WAIT", 0)
            fences.append(g[1])
            self.assertEqual(c.execute_command("UNLOCK", key), 0)
        self.assertTrue(all(x < y for x, y in zip(fences, fences[1:])), fences)
        self.check_first_fence(fences[0])
        self.assertEqual(self.status(key)["fence"], fences[-1])
        # other keys in between do not disturb the order of this one
        other = self.lock(conns[0], unique_key())
        g = self.lock(conns[1], key)
        self.assertGreater(g[1], fences[-1])
        self.check_first_fence(other[1])
        if self.BACKEND == "memory":
            # one counter for all keys
            self.assertGreater(g[1], other[1])

    def test_shared(self):
        key = unique_key()
        cs = [self.client() for _ in range(4)]
        grants = [self.lock(c, key, "SHARED", "WAIT", 0) for c in cs]
        self.assertTrue(all(g is not None for g in grants))
        self.assertEqual(len({g[0] for g in grants}), 4)
        fences = [g[1] for g in grants]
        self.assertEqual(fences, sorted(set(fences)))
        self.check_first_fence(fences[0])
        st = self.status(key)
        self.assertEqual(st["mode"], b"shared")
        self.assertEqual(st["holders"], 4)
        self.assertEqual(st["ttl_ms"], -1)
        for g in grants:
            self.assertEqual(self.client().execute_command("VALIDATE", key, g[1]), 1)
        w = self.client()
        self.assertIsNone(self.lock(w, key, "WAIT", 0))
        for c in cs[:3]:
            self.assertEqual(c.execute_command("UNLOCK", key), 0)
        self.assertIsNone(self.lock(w, key, "WAIT", 0))
        self.assertEqual(cs[3].execute_command("UNLOCK", key), 0)
        self.assertIsNotNone(self.lock(w, key, "WAIT", 0))
        self.assertEqual(self.status(key)["mode"], b"exclusive")

    def test_shared_no_barging(self):
        # A holds shared; B asks exclusive and waits; C and D ask shared and
        # wait behind B. A releases: B only. B releases: C and D together.
        key = unique_key()
        a, b, c, d = (self.client() for _ in range(4))
        self.lock(a, key, "SHARED")
        cb = in_thread(self.lock, b, key, "WAIT", 10000)
        self.wait_status(key, waiters=1)
        cc = in_thread(self.lock, c, key, "SHARED", "WAIT", 10000)
        self.wait_status(key, waiters=2)
        cd = in_thread(self.lock, d, key, "SHARED", "WAIT", 10000)
        self.wait_status(key, waiters=3)
        self.assertIsNone(self.lock(self.client(), key, "SHARED", "WAIT", 0))
        self.assertEqual(a.execute_command("UNLOCK", key), 0)
        gb = cb.result(5)
        self.assertIsNotNone(gb)
        st = self.status(key)
        self.assertEqual((st["mode"], st["holders"], st["waiters"]), (b"exclusive", 1, 2))
        self.assertFalse(cc.done.is_set() or cd.done.is_set())
        self.assertEqual(b.execute_command("UNLOCK", key), 0)
        gc, gd = cc.result(5), cd.result(5)
        self.assertIsNotNone(gc)
        self.assertIsNotNone(gd)
        self.assertLess(gb[1], gc[1])
        self.assertLess(gc[1], gd[1])
        st = self.status(key)
        self.assertEqual((st["mode"], st["holders"], st["waiters"]), (b"shared", 2, 0))

    def test_writer_timeout_wakes_readers(self):
        key = unique_key()
        a, b, c = self.client(), self.client(), self.client()
        self.lock(a, key, "SHARED")
        cb = in_thread(self.lock, b, key, "WAIT", 500)
        self.wait_status(key, waiters=1)
        cc = in_thread(self.lock, c, key, "SHARED", "WAIT", 10000)
        self.wait_status(key, waiters=2)
        self.assertIsNone(cb.result(5))
        self.assertIsNotNone(cc.result(5))
        self.assertEqual(self.status(key)["holders"], 2)

    def test_semaphore(self):
        key = unique_key()
        a, b, c = self.client(), self.client(), self.client()
        ga = self.lock(a, key, "LIMIT", 2, "WAIT", 0)
        gb = self.lock(b, key, "LIMIT", 2, "WAIT", 0)
        self.assertIsNotNone(ga)
        self.assertIsNotNone(gb)
        self.assertNotEqual(ga[0], gb[0])
        self.assertLess(ga[1], gb[1])
        self.check_first_fence(ga[1])
        self.assertIsNone(self.lock(c, key, "LIMIT", 2, "WAIT", 0))
        st = self.status(key)
        self.assertEqual((st["mode"], st["holders"], st["limit"], st["ttl_ms"]),
                         (b"semaphore", 2, 2, -1))
        self.assertEqual(a.execute_command("LOCKS")[0][3], b"semaphore")
        call = in_thread(self.lock, c, key, "LIMIT", 2, "WAIT", 5000)
        self.wait_status(key, waiters=1)
        self.assertEqual(b.execute_command("UNLOCK", key), 0)
        gc = call.result(5)
        self.assertIsNotNone(gc)
        self.assertGreater(gc[1], gb[1])
        self.assertEqual(self.status(key)["holders"], 2)
        self.assertEqual(a.execute_command("UNLOCK", key), 0)
        self.assertEqual(c.execute_command("UNLOCK", key), 0)
        self.assertEqual(self.status(key)["mode"], b"free")
        self.assertEqual(self.status(key)["limit"], 0)

    def test_limit_mismatch(self):
        key = unique_key()
        a, b = self.client(), self.client()
        self.lock(a, key, "LIMIT", 2)
        for opts in (["LIMIT", 3], [], ["SHARED"]):
            with self.assertRaises(redis.ResponseError, msg=str(opts)) as cm:
                self.lock(b, key, *opts, "WAIT", 0)
            self.assertNotRegex(str(cm.exception), "^(LIMIT|NOTHELD)")
        plain = unique_key()
        self.lock(a, plain)
        with self.assertRaises(redis.ResponseError):
            self.lock(b, plain, "LIMIT", 2, "WAIT", 0)
        # errors leave the connection usable and nothing queued
        self.assertIs(b.execute_command("PING"), True)
        self.assertEqual(self.status(key)["waiters"], 0)
        self.assertEqual(self.status(plain)["waiters"], 0)
        # once free, the key may change its kind
        self.assertEqual(a.execute_command("UNLOCK", key), 0)
        self.assertIsNotNone(self.lock(b, key, "LIMIT", 5, "WAIT", 0))

    def test_detach_needs_ttl(self):
        key = unique_key()
        r = self.client()
        with self.assertRaises(redis.ResponseError):
            self.lock(r, key, "DETACH")
        self.assertEqual(self.status(key)["mode"], b"free")
        self.assertIsNotNone(self.lock(r, key, "TTL", 1000, "DETACH"))

    def test_detach_survives_disconnect_and_expires(self):
        key = unique_key()
        before = int(self.info()["expired_total"])
        r = self.client()
        t0 = time.monotonic()
        token, fence, ttl = self.lock(r, key, "TTL", 700, "DETACH")
        self.check_validity(ttl, 700, bound=False)
        self.assertEqual(r.execute_command("LOCKS"), [])  # not listed
        hangup(r)
        st = self.status(key)
        self.assertEqual((st["mode"], st["holders"]), (b"exclusive", 1))
        self.assertEqual(self.client().execute_command("VALIDATE", key, fence), 1)
        self.assertIsNone(self.lock(self.client(), key, "WAIT", 0))
        self.wait_status(key, "after the TTL", timeout=3, mode=b"free", holders=0)
        self.assertGreaterEqual(time.monotonic() - t0, 0.65)
        self.assertEqual(self.client().execute_command("VALIDATE", key, fence), 0)
        self.assertGreater(int(self.info()["expired_total"]), before)
        with self.assertRaises(redis.ResponseError):
            self.client().execute_command("UNLOCK", key, token)

    def test_detach_waiter_granted_at_expiry(self):
        key = unique_key()
        self.lock(self.client(), key, "TTL", 300, "DETACH")
        t0 = time.monotonic()
        g = self.lock(self.client(), key, "WAIT", 5000)
        took = time.monotonic() - t0
        self.assertIsNotNone(g)
        self.assertLess(took, 1.5)

    def test_detach_not_reentrant(self):
        key = unique_key()
        r = self.client()
        self.lock(r, key, "TTL", 5000, "DETACH")
        self.assertIsNone(self.lock(r, key, "TTL", 5000, "DETACH", "WAIT", 0))
        self.assertIsNone(self.lock(r, key, "WAIT", 0))

    def test_detach_behind_own_lock_refused(self):
        """A DETACH lock on a key the session holds would wait for itself."""
        key = unique_key()
        r = self.client()
        self.lock(r, key)
        with self.assertRaisesRegex(redis.ResponseError,
                                    "^key is held by this session in exclusive mode"):
            r.execute_command("LOCK", key, "TTL", 5000, "DETACH")
        self.assertEqual(self.status(key)["waiters"], 0)
        self.assertEqual(r.execute_command("UNLOCK", key), 0)

    def test_detach_unlock_by_token(self):
        key = unique_key()
        r = self.client()
        token, fence, _ = self.lock(r, key, "TTL", 60000, "DETACH")
        hangup(r)
        other = self.client()
        with self.assertRaisesRegex(redis.ResponseError, "^NOTHELD"):
            other.execute_command("UNLOCK", key)
        with self.assertRaisesRegex(redis.ResponseError, "^NOTHELD"):
            other.execute_command("UNLOCK", key, "0" * 32)
        self.check_validity(other.execute_command("EXTEND", key, 120000, token), 120000,
                            bound=False)
        self.assertGreater(self.status(key)["ttl_ms"], 60000)
        self.assertEqual(other.execute_command("UNLOCK", key, token), 0)
        self.assertEqual(self.status(key)["mode"], b"free")
        with self.assertRaisesRegex(redis.ResponseError, "^NOTHELD"):
            other.execute_command("UNLOCK", key, token)

    def test_detach_extend_moves_expiry(self):
        key = unique_key()
        token, _, _ = self.lock(self.client(), key, "TTL", 500, "DETACH")
        self.check_validity(self.client().execute_command("EXTEND", key, 5000, token), 5000,
                            bound=False)
        t0 = time.monotonic()
        # a waiter is not granted before the extended lease ends
        self.assertIsNone(self.lock(self.client(), key, "WAIT", 800))
        self.assertGreaterEqual(time.monotonic() - t0, 0.75)
        self.assertEqual(self.status(key)["holders"], 1)

    def test_unlock_session_lock_by_token_from_other_connection(self):
        key = unique_key()
        a, b = self.client(), self.client()
        token, fence, _ = self.lock(a, key)
        waiter = in_thread(self.lock, self.client(), key, "WAIT", 5000)
        self.wait_status(key, waiters=1)
        self.assertEqual(b.execute_command("UNLOCK", key, token), 0)
        g = waiter.result(5)
        self.assertIsNotNone(g)
        with self.assertRaisesRegex(redis.ResponseError, "^NOTHELD"):
            a.execute_command("UNLOCK", key)
        self.assertEqual(a.execute_command("LOCKS"), [])

    def test_unlock_wrong_token(self):
        key = unique_key()
        a = self.client()
        token, _, _ = self.lock(a, key)
        for bad in ("f" * 32, token.decode().upper(), "nonsense"):
            with self.assertRaisesRegex(redis.ResponseError, "^NOTHELD"):
                self.client().execute_command("UNLOCK", key, bad)
        with self.assertRaisesRegex(redis.ResponseError, "^NOTHELD"):
            self.client().execute_command("UNLOCK", unique_key(), token)
        self.assertEqual(self.status(key)["holders"], 1)

    def test_extend(self):
        key = unique_key()
        r = self.client()
        token, _, ttl = self.lock(r, key, "TTL", 5000)
        self.check_validity(ttl, 5000)
        self.check_validity(r.execute_command("EXTEND", key, 60000), 60000)
        self.check_fresh_ttl(self.status(key)["ttl_ms"], 60000)
        self.check_validity(r.execute_command("EXTEND", key, 1000), 1000)
        self.check_fresh_ttl(self.status(key)["ttl_ms"], 1000)
        self.check_validity(self.client().execute_command("EXTEND", key, 2000, token), 2000)
        for bad in ("5", "0", "abc", "86400001"):
            with self.assertRaisesRegex(redis.ResponseError, "TTL", msg=bad):
                r.execute_command("EXTEND", key, bad)
        with self.assertRaisesRegex(redis.ResponseError, "^NOTHELD"):
            self.client().execute_command("EXTEND", key, 1000)
        with self.assertRaisesRegex(redis.ResponseError, "^NOTHELD"):
            r.execute_command("EXTEND", unique_key(), 1000)

    def test_session_lock_renewed(self):
        # a short TTL does not end a session lock while the session lives
        key = unique_key()
        r = self.client()
        token, fence, _ = self.lock(r, key, "TTL", max(60, self.TTL_MIN))
        t0 = time.monotonic()
        self.assertIsNone(self.lock(self.client(), key, "WAIT", 300))
        self.assertGreaterEqual(time.monotonic() - t0, 0.25)
        self.assertEqual(self.client().execute_command("VALIDATE", key, fence), 1)
        self.assertEqual(r.execute_command("UNLOCK", key), 0)

    def test_session_lock_status_ttl(self):
        # STATUS ttl_ms of a session lock over two TTLs: the whole TTL all the
        # time on memory; on redis it counts down and renewals put it back
        key = unique_key()
        r = self.client()
        ttl = 450
        self.lock(r, key, "TTL", ttl)
        seen = []
        deadline = time.monotonic() + 2 * ttl / 1000
        while time.monotonic() < deadline:
            st = self.status(key)
            self.assertEqual((st["mode"], st["holders"]), (b"exclusive", 1), st)
            seen.append(st["ttl_ms"])
            time.sleep(0.005)
        for v in seen:
            self.check_session_ttl(v, ttl)
        if self.leases_in_redis():
            self.assertLess(min(seen), ttl - 50, "ttl_ms does not count down: %s" % seen)
            # renewed: values go up again after going down
            self.assertTrue(any(b > a for a, b in zip(seen, seen[1:])),
                            "ttl_ms never renewed: %s" % seen)
        self.assertEqual(r.execute_command("UNLOCK", key), 0)

    def test_validate(self):
        key = unique_key()
        r = self.client()
        v = self.client()
        self.assertEqual(v.execute_command("VALIDATE", key, 1), 0)
        _, f1, _ = self.lock(r, key)
        self.assertEqual(v.execute_command("VALIDATE", key, f1), 1)
        self.assertEqual(v.execute_command("VALIDATE", key, f1 + 1), 0)
        self.assertEqual(v.execute_command("VALIDATE", unique_key(), f1), 0)
        r.execute_command("UNLOCK", key)
        _, f2, _ = self.lock(r, key)
        self.assertEqual(v.execute_command("VALIDATE", key, f1), 0)
        self.assertEqual(v.execute_command("VALIDATE", key, f2), 1)
        for bad in ("abc", "1.5", ""):
            with self.assertRaises(redis.ResponseError, msg=bad):
                v.execute_command("VALIDATE", key, bad)
        self.assertIs(v.execute_command("PING"), True)

    def test_locks_listing(self):
        r = self.client()
        self.assertEqual(r.execute_command("LOCKS"), [])
        k1, k2, k3, k4 = (unique_key(n) for n in ("a", "b", "c", "d"))
        g1 = self.lock(r, k1)
        self.lock(r, k1)
        g2 = self.lock(r, k2, "SHARED")
        g3 = self.lock(r, k3, "LIMIT", 4)
        self.lock(r, k4, "TTL", 10000, "DETACH")
        got = sorted(r.execute_command("LOCKS"))
        self.assertEqual(got, sorted([
            [k1.encode(), g1[0], g1[1], b"exclusive", 2],
            [k2.encode(), g2[0], g2[1], b"shared", 1],
            [k3.encode(), g3[0], g3[1], b"semaphore", 1],
        ]))
        self.assertEqual(self.client().execute_command("LOCKS"), [])

    def test_info_fields(self):
        raw = self.raw()
        info = self.info(raw)
        for name in ("version", "backend", "process_id", "uptime_seconds",
                     "connected_clients", "total_connections", "rejected_connections",
                     "keys", "locks_held", "waiters", "grants_total", "timeouts_total",
                     "releases_total", "expired_total", "lost_total", "commands_total",
                     "protocol_errors_total"):
            self.assertIn(name, info)
            if name not in ("version", "backend"):
                self.assertRegex(info[name], r"^\d+$", name)
        self.assertEqual(info["version"], "0.1.0")
        self.assertEqual(info["backend"], self.BACKEND)
        self.check_backend_info(info)
        self.assertEqual(int(info["process_id"]), self.daemon.pid)
        self.assertGreaterEqual(int(info["connected_clients"]), 1)
        # counters move
        key = unique_key()
        raw.cmd("LOCK", key)
        info2 = self.info(raw)
        self.assertEqual(int(info2["grants_total"]), int(info["grants_total"]) + 1)
        self.assertGreaterEqual(int(info2["locks_held"]), 1)
        self.assertGreater(int(info2["commands_total"]), int(info["commands_total"]))
        raw.cmd("UNLOCK", key)
        info3 = self.info(raw)
        self.assertEqual(int(info3["releases_total"]), int(info2["releases_total"]) + 1)
        # redis-py parses it too
        parsed = self.client().info()
        self.assertEqual(parsed["process_id"], self.daemon.pid)

    def test_info_counts_connections(self):
        def clients(n):
            return lambda: int(self.info()["connected_clients"]) == n
        # connections of earlier tests may still be closing on the daemon's
        # side; then this test's own INFO connection is the only one
        wait_until(clients(1), 3, what="connected_clients to be 1")
        total = int(self.info()["total_connections"])
        extra = [self.raw() for _ in range(3)]
        for c in extra:
            c.cmd("PING")
        self.assertEqual(int(self.info()["connected_clients"]), 4)
        self.assertEqual(int(self.info()["total_connections"]), total + 3)
        for c in extra:
            c.close()
        wait_until(clients(1), 3, what="connected_clients to drop to 1")

    def test_fifo_order(self):
        key = unique_key()
        n = 8
        holder = self.client()
        self.lock(holder, key)
        order = []
        errors = []
        inside = threading.Lock()
        mu = threading.Lock()

        def waiter(i, conn):
            g = self.lock(conn, key, "WAIT", 20000)
            if g is None:
                errors.append("%d not granted" % i)
                return
            if not inside.acquire(blocking=False):
                errors.append("%d granted while another holds the key" % i)
                return
            with mu:
                order.append((i, g[1]))
            st = pairs(conn.execute_command("STATUS", key))
            if (st["holders"], st["waiters"]) != (1, n - 1 - i):
                errors.append("%d: STATUS %r" % (i, st))
            inside.release()
            if conn.execute_command("UNLOCK", key) != 0:
                errors.append("%d: UNLOCK did not release" % i)

        calls = []
        for i in range(n):
            calls.append(in_thread(waiter, i, self.client()))
            self.wait_status(key, "(waiter %d queued)" % i, waiters=i + 1)
        self.assertEqual(holder.execute_command("UNLOCK", key), 0)
        for c in calls:
            c.result(10)
        self.assertEqual(errors, [])
        self.assertEqual([i for i, _ in order], list(range(n)))
        fences = [f for _, f in order]
        self.assertEqual(fences, sorted(set(fences)))
        self.assertEqual(self.status(key)["mode"], b"free")

    def test_disconnect_while_waiting(self):
        key = unique_key()
        holder = self.client()
        self.lock(holder, key)
        gone = self.raw()
        gone.send(Raw.encode("LOCK", key))  # waits forever
        self.wait_status(key, waiters=1)
        nxt = self.client()
        call = in_thread(self.lock, nxt, key, "WAIT", 5000)
        self.wait_status(key, waiters=2)
        gone.close()
        self.wait_status(key, "(the closed waiter withdrawn)", waiters=1)
        self.assertEqual(holder.execute_command("UNLOCK", key), 0)
        self.assertIsNotNone(call.result(5))
        st = self.status(key)
        self.assertEqual((st["mode"], st["holders"], st["waiters"]), (b"exclusive", 1, 0))

    def test_fifo_with_departures(self):
        key = unique_key()
        holder = self.raw()
        holder.cmd("LOCK", key)
        ws = []
        for i in range(6):
            w = self.raw()
            w.send(Raw.encode("LOCK", key, "WAIT", "20000"))
            self.wait_status(key, waiters=i + 1)
            ws.append(w)
        for i in (0, 2, 4):
            ws[i].close()
        self.wait_status(key, "(three waiters gone)", waiters=3)
        self.assertEqual(holder.cmd("UNLOCK", key), 0)
        last = 0
        for i in (1, 3, 5):
            g = ws[i].read()
            self.assertIsInstance(g, list, i)
            self.assertGreater(g[1], last)
            last = g[1]
            st = self.status(key)
            self.assertEqual((st["holders"], st["waiters"]), (1, (5 - i) // 2))
            self.assertEqual(ws[i].cmd("UNLOCK", key), 0)
        self.wait_status(key, mode=b"free")

    def test_head_waiter_disconnects_after_release_race(self):
        # the holder releases and the only waiter is gone at about the same
        # time: the key ends up free and usable
        key = unique_key()
        holder = self.raw()
        holder.cmd("LOCK", key)
        w = self.raw()
        w.send(Raw.encode("LOCK", key))
        self.wait_status(key, waiters=1)
        holder.send(Raw.encode("UNLOCK", key))
        w.close()
        self.assertEqual(holder.read(), 0)
        self.wait_status(key, mode=b"free", holders=0, waiters=0)
        self.assertIsNotNone(self.lock(self.client(), key, "WAIT", 0))

    def test_close_releases(self):
        key = unique_key()
        r = self.client()
        self.lock(r, key)
        self.lock(r, unique_key(), "SHARED")
        waiter = in_thread(self.lock, self.client(), key, "WAIT", 5000)
        self.wait_status(key, waiters=1)
        hangup(r)
        self.assertIsNotNone(waiter.result(3))

    def test_killed_client_releases(self):
        k1, k2 = unique_key("a"), unique_key("b")
        script = (
            "import sys, time, redis\n"
            "r = redis.Redis(port=int(sys.argv[1]), single_connection_client=True)\n"
            "r.execute_command('LOCK', sys.argv[2], 'TTL', 60000)\n"
            "r.execute_command('LOCK', sys.argv[3], 'SHARED')\n"
            "print('locked', flush=True)\n"
            "time.sleep(60)\n")
        p = spawn([PYTHON, "-c", script, str(self.daemon.port), k1, k2],
                  stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        try:
            self.assertEqual(read_line(p.stdout), "locked\n")
            self.assertEqual(self.status(k1)["holders"], 1)
            self.assertGrantedAfterKill(p.pid, k1)
            self.wait_status(k2, timeout=1, mode=b"free")
        finally:
            if p.poll() is None:
                p.kill()
            self.assertEqual(reap(p), -signal.SIGKILL)
            p.stdout.close()

    def test_pipelined_lock_delays_later_replies(self):
        key = unique_key()
        holder = self.client()
        self.lock(holder, key)
        raw = self.raw()
        raw.send(Raw.encode("LOCK", key, "WAIT", 5000) + Raw.encode("PING"))
        self.wait_status(key, waiters=1)
        raw.settimeout(0.2)
        try:
            data = raw.s.recv(100)
        except OSError:
            data = b""
        self.assertEqual(data, b"", "reply to PING came before the LOCK's")
        raw.settimeout(5)
        holder.execute_command("UNLOCK", key)
        self.assertIsInstance(raw.read(), list)
        self.assertEqual(raw.read(), "PONG")

    def test_many_keys_per_session(self):
        raw = self.raw()
        keys = [unique_key() for _ in range(200)]
        raw.send(b"".join(Raw.encode("LOCK", k, "WAIT", 0) for k in keys))
        grants = [raw.read() for _ in keys]
        self.assertTrue(all(isinstance(g, list) for g in grants))
        self.assertEqual(len(raw.cmd("LOCKS")), 200)
        self.assertGreaterEqual(int(self.info()["keys"]), 200)
        raw.close()
        self.wait_status(keys[-1], mode=b"free")
        self.assertEqual(self.status(keys[0])["mode"], b"free")

    def test_unlock_from_wrong_session(self):
        key = unique_key()
        a, b = self.client(), self.client()
        self.lock(a, key)
        with self.assertRaisesRegex(redis.ResponseError, "^NOTHELD"):
            b.execute_command("UNLOCK", key)
        with self.assertRaisesRegex(redis.ResponseError, "^NOTHELD"):
            b.execute_command("EXTEND", key, 1000)
        self.assertEqual(self.status(key)["holders"], 1)

    def test_error_reply_is_coded(self):
        raw = self.raw()
        key = unique_key()
        self.assertEqual(raw.cmd("UNLOCK", key).code, "NOTHELD")
        self.assertEqual(raw.cmd("EXTEND", key, "1000").code, "NOTHELD")
        self.assertIsInstance(raw.cmd("LOCK", key, "LIMIT", "x"), Err)



class TestLocksRedis(TestLocks):
    """Every test of TestLocks on the redis backend (one redis-server for
    the class, started before the daemon and stopped after it). The
    daemon's TTL floor is three command timeouts: 300 ms here."""
    BACKEND = "redis"
    BACKEND_CONF = {"command_timeout_ms": 100}
    TTL_MIN = 300


class TestLocksRedlock(TestLocks):
    """Every test of TestLocks on the redlock backend (NODES redis-servers
    for the class, started before the daemon and stopped after it). As on
    redis, the TTL floor is three command timeouts (300 ms here) and fences
    are max(counter + 1, Redis's clock in us); a lease's validity is less
    the drift allowance, TTL x 0.01 + 2 ms. Every lease is in every node."""
    BACKEND = "redlock"
    BACKEND_CONF = {"command_timeout_ms": 100}
    TTL_MIN = 300

    def check_backend_info(self, info):
        n = len(self.nodes)
        self.assertNumbers(info, ("backend_connected", "backend_nodes", "backend_quorum",
                                  "backend_nodes_up", "backend_renewals_total",
                                  "backend_lost_total"))
        self.assertEqual(info["backend_connected"], "1")
        self.assertEqual(int(info["backend_nodes"]), n)
        self.assertEqual(int(info["backend_quorum"]), n // 2 + 1)
        self.assertEqual(int(info["backend_nodes_up"]), n)
        for i, r in enumerate(self.nodes):
            self.assertEqual(info["backend_node%d_address" % i], r.address())
            self.assertEqual(info["backend_node%d_connected" % i], "1")
            for what in ("calls", "failures", "timeouts", "reconnects"):
                name = "backend_node%d_%s_total" % (i, what)
                self.assertIn(name, info)
                self.assertRegex(info[name], r"^\d+$", name)
            self.assertGreater(int(info["backend_node%d_calls_total" % i]), 0)

    def lease_left(self, node, key):
        """PTTL of key's exclusive lease (dlock:l:<key>) on a node, ms."""
        c = node.raw()
        try:
            return c.cmd("PTTL", "dlock:l:" + key)
        finally:
            c.close()

    def test_lease_on_every_node(self):
        # a session lock's lease is in every node's redis, counting down
        # from its TTL and renewed there; UNLOCK removes it from every node
        key = unique_key()
        ttl = 900
        r = self.client()
        token, fence, left = self.lock(r, key, "TTL", ttl)
        self.check_validity(left, ttl)
        for i, node in enumerate(self.nodes):
            pttl = self.lease_left(node, key)
            self.assertLessEqual(pttl, ttl, "node %d" % i)
            self.assertGreater(pttl, 0, "no lease of %s on node %d" % (key, i))
        # held past its TTL: renewed on every node
        time.sleep(1.5 * ttl / 1000)
        self.assertEqual(self.client().execute_command("VALIDATE", key, fence), 1)
        for i, node in enumerate(self.nodes):
            pttl = self.lease_left(node, key)
            self.assertGreater(pttl, ttl // 3 - 100 * SLOWDOWN,
                               "the lease on node %d not renewed: %d ms left" % (i, pttl))
        self.assertEqual(r.execute_command("UNLOCK", key), 0)
        for i, node in enumerate(self.nodes):
            wait_until(lambda: self.lease_left(node, key) == -2, 2,
                       what="the lease of %s gone from node %d" % (key, i))


class TestLocksRedisCluster(TestLocks):
    """Every test of TestLocks on the redis-cluster backend (a cluster of
    three masters with a replica each for the class, started before the
    daemon and stopped after it). As on redis, the TTL floor is three
    command timeouts (300 ms here) and fences are max(counter + 1, Redis's
    clock in us); a lock's keys (lease dlock:l:{K}, fence dlock:f:{K}) are
    on the master of the lock's slot."""
    BACKEND = "redis-cluster"
    BACKEND_CONF = {"command_timeout_ms": 100}
    TTL_MIN = 300

    def check_backend_info(self, info):
        self.assertNumbers(info, ("backend_connected", "backend_renewals_total",
                                  "backend_lost_total", "backend_cluster_masters",
                                  "backend_cluster_slots_up", "backend_cluster_refreshes_total",
                                  "backend_cluster_moved_total", "backend_cluster_ask_total",
                                  "backend_cluster_tryagain_total"))
        self.assertEqual(info["backend_connected"], "1")
        self.assertEqual(info["backend_cluster_masters"], "3")
        self.assertEqual(info["backend_cluster_slots_up"], "16384")
        addresses = {m.address() for m in self.cluster.masters()}
        self.assertEqual({info["backend_master%d_address" % i] for i in range(3)}, addresses)
        for i in range(3):
            self.assertEqual(info["backend_master%d_connected" % i], "1")
            self.assertRegex(info["backend_master%d_calls_total" % i], r"^\d+$")
        self.assertEqual(sum(int(info["backend_master%d_slots" % i]) for i in range(3)), 16384)

    def test_lease_on_the_slot_master(self):
        # a session lock's lease and fence are on the master of the lock's
        # slot, the lease counting down from its TTL and renewed there;
        # UNLOCK removes the lease
        key = unique_key()
        keys = lock_keys(key)
        master = self.cluster.master_of_lock(key)
        ttl = 900
        r = self.client()
        token, fence, left = self.lock(r, key, "TTL", ttl)
        self.check_validity(left, ttl)
        pttl = master.cmd("PTTL", keys["lease"])
        self.assertLessEqual(pttl, ttl)
        self.assertGreater(pttl, 0, "no lease of %s on port %d" % (key, master.port))
        self.assertGreaterEqual(int(master.cmd("GET", keys["fence"])), fence)
        for m in self.cluster.masters():
            if m is not master:
                self.assertEqual(m.cmd("CLUSTER", "COUNTKEYSINSLOT",
                                       self.cluster.lock_slot(key)), 0)
        time.sleep(1.5 * ttl / 1000)
        self.assertEqual(self.client().execute_command("VALIDATE", key, fence), 1)
        self.assertGreater(master.cmd("PTTL", keys["lease"]), ttl // 3 - 100 * SLOWDOWN,
                           "the lease not renewed")
        self.assertEqual(r.execute_command("UNLOCK", key), 0)
        wait_until(lambda: master.cmd("EXISTS", keys["lease"]) == 0, 2,
                   what="the lease of %s gone" % key)


class TestLocksEtcd(TestLocks):
    """Every test of TestLocks on the etcd backend (one etcd for the class,
    started before the daemon and stopped after it).

    A session lock is a key on the daemon's own etcd lease
    (backend.lease_ttl_ms, LEASE_MS here), kept alive every third of it: the
    validity a LOCK reports, and STATUS's ttl_ms, are what is left of that
    lease, whatever the lock's TTL. A DETACH lock has a lease of its own, of
    its TTL. Fences are etcd revisions shifted left by 16 bits (the low bits
    count local handoffs): not clocks."""
    BACKEND = "etcd"
    LEASE_MS = 6000
    BACKEND_CONF = {"lease_ttl_ms": LEASE_MS}
    TTL_MIN = 10

    def check_first_fence(self, fence):
        """A fence is the revision at which the key's holder was written,
        shifted left by 16 bits."""
        self.assertGreater(fence >> 16, 0)
        self.assertEqual(fence & 0xffff, 0, "a first grant counts no local handoff")
        self.assertLessEqual(fence >> 16, self.etcd.revision(), "a fence past etcd's revision")

    def check_lease_left(self, left, floor=2 / 3):
        """left is what is left of the daemon's lease: kept alive every
        third of it, it never has much less than two thirds left."""
        self.assertLessEqual(left, self.LEASE_MS)
        self.assertGreater(left, self.LEASE_MS * floor - 200 * SLOWDOWN,
                           "the daemon's lease of %d ms" % self.LEASE_MS)

    def check_lock_lease(self, ttl_ms):
        """ttl_ms is STATUS's ttl_ms of a session lock: what was left of the
        daemon's lease when the lock was last renewed. The lock table renews
        a lock after a third of the validity it was told, and is told what
        is left of the daemon's lease since its last keepalive: never much
        less than two thirds of two thirds of the lease."""
        self.check_lease_left(ttl_ms, 4 / 9)

    def check_validity(self, left, ttl, bound=True):
        if bound:
            self.check_lease_left(left)
        else:
            self.assertLessEqual(left, ttl)
            self.assertGreater(left, ttl - 100 * SLOWDOWN, "validity %d of %d" % (left, ttl))

    def check_session_ttl(self, ttl_ms, ttl):
        self.check_lock_lease(ttl_ms)

    def check_fresh_ttl(self, ttl_ms, ttl, bound=True):
        if bound:
            self.check_lock_lease(ttl_ms)
        else:
            super().check_fresh_ttl(ttl_ms, ttl, bound)

    def check_backend_info(self, info):
        self.assertNumbers(info, ("backend_connected", "backend_reconnects_total",
                                  "backend_lease_id", "backend_lease_ttl_ms",
                                  "backend_lease_valid_ms", "backend_watch_revision",
                                  "backend_requests_total", "backend_renewals_total",
                                  "backend_lost_total"))
        self.assertEqual(info["backend_connected"], "1")
        self.assertEqual(info["backend_endpoint"], self.etcd.endpoint())
        self.assertEqual(int(info["backend_lease_ttl_ms"]), self.LEASE_MS)
        self.assertIn(int(info["backend_lease_id"]), self.etcd.leases())

    def backend_state(self):
        return b"connected"

    def test_session_lock_status_ttl(self):
        # STATUS ttl_ms of a session lock over a keepalive period and a
        # half: what is left of the daemon's lease, counting down, and put
        # back by the keepalives
        key = unique_key()
        r = self.client()
        self.lock(r, key, "TTL", 450)
        seen = []
        deadline = time.monotonic() + 1.5 * self.LEASE_MS / 3000
        while time.monotonic() < deadline:
            st = self.status(key)
            self.assertEqual((st["mode"], st["holders"]), (b"exclusive", 1), st)
            seen.append(st["ttl_ms"])
            time.sleep(0.01)
        for v in seen:
            self.check_lock_lease(v)
        self.assertTrue(any(b < a for a, b in zip(seen, seen[1:])),
                        "ttl_ms does not count down: %s" % seen)
        self.assertTrue(any(b > a + 100 for a, b in zip(seen, seen[1:])),
                        "ttl_ms never renewed: %s" % seen)
        self.assertEqual(r.execute_command("UNLOCK", key), 0)


if __name__ == "__main__":
    import unittest
    unittest.main()
