"""The etcd backend: several dlockd processes on one etcd.

The backend's URL and configuration keys; FIFO order and fences across
daemons; wake-ups through one watch stream per daemon, without polling;
waiters after a try (LOCK ... WAIT 0) and shared waiters woken together; a
daemon killed while holding locks; etcd stopped (SIGSTOP) past the daemon's
lease; etcd down and back; endpoint failover; compaction while a waiter
waits; authentication; and the etcd keys that hold the locks.

Every test starts its own etcd (or shares the one of its class) on free
loopback ports; see dlocktest.etcd_server. Each test uses keys of its own. The
bounds below assume loopback; a daemon under a wrapper (valgrind) gets
SLOWDOWN times as long where only speed is measured, never where safety is.
"""

import calendar
import os
import random
import re
import signal
import threading
import time
import unittest

import redis

from dlocktest.cases import ConfigTestCase, EtcdTestCase, check_held, ms, report
from dlocktest.daemon import run_dlockd
from dlocktest.env import SLOWDOWN, new_dir, unique_key
from dlocktest.proc import free_port, in_thread, results, sleep_until, wait_until
from dlocktest.resp import NULL, Err, Raw, read_within
from dlocktest.sessions import grant_through_outage, read_pushes

LEASE = 3000  # ms: the daemon lease (backend.lease_ttl_ms) of the tests that let it run out
# backend keys of the daemons that must notice an unreachable etcd quickly
FAST = {"request_timeout_ms": 500}
PREFIX = "dlock/"  # backend.key_prefix's default
WAKE_BOUND = 1.0 * SLOWDOWN  # s from a release on one daemon to the grant on another
RECONNECT_BOUND = 8.0  # s for a daemon to be back on etcd (capped backoff)
KILL_MARGIN = 1.5  # s after the lease for etcd to expire it and another daemon to see it
BACKEND_REPLY_SLACK = 1.0 * SLOWDOWN  # s over request_timeout_ms for -BACKEND
QUIET_WINDOW = 3.0  # s of waiting in which the daemons must not poll etcd
SAFE = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-")



def escaped(key):
    """A lock key as the backend writes it in an etcd key: every byte
    outside [A-Za-z0-9._:-] as %XX."""
    if isinstance(key, str):
        key = key.encode()
    return b"".join(bytes([c]) if c in SAFE else b"%%%02X" % c for c in key)


def lock_prefix(key, prefix=PREFIX):
    """The etcd prefix under which key's lockers have their etcd keys."""
    return prefix.encode() + escaped(key) + b"/"


def log_time(text):
    """A daemon log line's time stamp ("2026-01-02T03:04:05.678", UTC) in
    seconds since the epoch, as time.time()."""
    return calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")) + \
        int(text[20:23]) / 1000


def lease_conf(ms=LEASE, **kw):
    conf = dict(FAST)
    conf["lease_ttl_ms"] = ms
    conf.update(kw)
    return conf


class EtcdCase(EtcdTestCase):

    def grant_order(self, key, holder, waiters):
        """Release holder's key with waiters ([(name, connection)]) queued:
        [(name, fence)] in the order they were granted, each releasing the
        key as soon as it has it."""
        order = []

        def take(name, w):
            g = read_within(w, 20)
            if not isinstance(g, list):
                raise AssertionError("waiter %s got %r" % (name, g))
            order.append((name, g[1]))
            if w.cmd("UNLOCK", key) != 0:
                raise AssertionError("waiter %s: UNLOCK did not release" % name)

        calls = [in_thread(take, name, w) for name, w in waiters]
        self.assertEqual(holder.cmd("UNLOCK", key), 0)
        results(calls, 30)
        return order

    def etcd_keys(self, etcd, key, prefix=PREFIX):
        """The etcd keys of key's lockers: (name, create_revision, lease,
        value), oldest first."""
        return etcd.keys(lock_prefix(key, prefix))

    def wait_etcd_keys(self, etcd, key, n, what="", prefix=PREFIX, timeout=5.0):
        """Wait until key has n lockers' keys in etcd; returns them."""
        got = []

        def ok():
            got[:] = self.etcd_keys(etcd, key, prefix)
            return len(got) == n
        wait_until(ok, timeout, 0.01, "%d etcd keys for %s %s (have %s)"
                   % (n, key, what, got))
        return got

    def lease_id(self, daemon):
        return int(self.info(daemon)["backend_lease_id"])


# ---- configuration ----

class TestEtcdConfig(ConfigTestCase):
    """-b etcd://... and the backend section, checked with dlockd -t (which
    connects to nothing)."""

    def test_url_forms_accepted(self):
        empty = self.write("empty.yaml", "")
        for url in ("etcd://127.0.0.1", "etcd://127.0.0.1:2379", "etcd://localhost:23790",
                    "etcd://127.0.0.1:2379,127.0.0.1:22379",
                    "etcd://127.0.0.1:1,localhost,127.0.0.1:65535",
                    "etcd://root:s3cret@127.0.0.1:2379",
                    "etcd://root:s3cret@127.0.0.1:2379,127.0.0.1:2380",
                    "etcds://127.0.0.1:2379"):
            self.check_ok(["-c", empty, "-b", url], url)

    def test_url_forms_rejected(self):
        empty = self.write("empty.yaml", "")
        for url in ("etcd://", "etcd://:2379", "etcd://127.0.0.1:", "etcd://127.0.0.1:0",
                    "etcd://127.0.0.1:65536", "etcd://127.0.0.1:etcd",
                    "etcd://127.0.0.1:2379,", "etcd://,127.0.0.1:2379",
                    "etcd://127.0.0.1:2379,,127.0.0.1:2380", "etcd://h:1,h:1",
                    "etcd://root:hunter2@", "etcd://root:hunter2@127.0.0.1:x",
                    "etcd://r%zz:hunter2@127.0.0.1", "etcd://127.0.0.1:2379/v3",
                    "etcds://", "etcds://127.0.0.1:2379/v3"):
            rc, out, err = run_dlockd(["-t", "-c", empty, "-b", url])
            self.assertEqual(rc, 1, "%s accepted: %s%s" % (url, out, err))
            self.assertNotIn("configuration OK", out + err, url)
            # one line naming the URL or the endpoint at fault, and why
            lines = [l for l in err.splitlines() if l.strip()]
            self.assertEqual(len(lines), 1, err)
            self.assertRegex(lines[0], r"^command line: (bad etcd URL '[^']*': \S"
                             r"|bad backend\.endpoints server '[^']*': \S"
                             r"|duplicate backend\.endpoints server '[^']+'$)", url)
            self.assertNotIn("hunter2", err, "the password is shown: %s" % err)

    def test_url_scheme_unknown(self):
        empty = self.write("empty.yaml", "")
        rc, out, err = run_dlockd(["-t", "-c", empty, "-b", "etcdx://127.0.0.1:2379"])
        self.assertEqual(rc, 1, out + err)
        self.assertRegex(err, r"unknown backend URL .*\(expected [^)]*etcd\[s\]://", err)

    def test_yaml_endpoints_forms(self):
        for endpoints in ('[127.0.0.1:2379]', '["127.0.0.1:2379", "localhost:2380"]',
                          '"127.0.0.1:2379,localhost:2380"', '127.0.0.1:2379',
                          '\n    - 127.0.0.1:2379\n    - "127.0.0.1:2380"'):
            path = self.write("ok.yaml", "backend:\n  type: etcd\n  endpoints: %s\n"
                              % endpoints)
            self.check_ok(["-c", path], endpoints)

    def test_yaml_every_key(self):
        d = new_dir("conf")
        with open(os.path.join(d, "pw.txt"), "w") as f:
            f.write("s3cret\n")
        for auth in ('  username: "root"\n  password: "s3cret"\n',
                     '  username: "root"\n  password_file: "pw.txt"\n'):
            path = os.path.join(d, "full.yaml")
            with open(path, "w") as f:
                f.write('backend:\n'
                        '  type: etcd\n'
                        '  endpoints: [127.0.0.1:2379, 127.0.0.1:22379]\n'
                        '  key_prefix: "locks/"\n'
                        '  lease_ttl_ms: 2000\n'
                        '  request_timeout_ms: 700\n' + auth)
            self.check_ok(["-c", path], auth)

    def test_yaml_errors(self):
        path = self.write("bad.yaml",
                          'backend:\n'                             # 1
                          '  type: etcd\n'                         # 2
                          '  endpoints: ["127.0.0.1:0"]\n'         # 3: col 15
                          '  lease_ttl_ms: 1999\n'                 # 4: col 17
                          '  request_timeout_ms: -5\n'             # 5: col 23
                          '  bogus: 1\n')                          # 6: col 3
        where, err = self.config_errors(path)
        self.assertEqual({line for line, _ in where}, {3, 4, 5, 6}, err)

    def test_yaml_both_passwords_rejected(self):
        path = self.write("both.yaml", 'backend:\n  type: etcd\n  endpoints: "127.0.0.1:2379"\n'
                          '  username: root\n  password: "a"\n  password_file: "pw.txt"\n',
                          beside={"pw.txt": "x\n"})
        rc, out, err = run_dlockd(["-t", "-c", path])
        self.assertEqual(rc, 1, out + err)
        self.assertIn("password", err)

    def test_yaml_empty_endpoints_rejected(self):
        for endpoints in ('[]', '""', '"127.0.0.1:2379,"'):
            path = self.write("empty.yaml", "backend:\n  type: etcd\n  endpoints: %s\n"
                              % endpoints)
            rc, out, err = run_dlockd(["-t", "-c", path])
            self.assertEqual(rc, 1, "%s accepted: %s%s" % (endpoints, out, err))
            self.assertRegex(err, r"(?m)^%s:3:\d+: " % re.escape(path), endpoints)


# ---- two daemons on one etcd ----

class TestEtcdDaemons(EtcdCase):
    """Three daemons, A, B and C, on one etcd, shared by the tests of the
    class; each test uses keys of its own. C holds the key where a test
    needs a holder on neither A nor B."""

    @classmethod
    def setUpClass(cls):
        cls.etcd = cls.class_etcd()
        cls.a = cls.class_daemon(cls.etcd)
        cls.b = cls.class_daemon(cls.etcd)
        cls.c = cls.class_daemon(cls.etcd)

    def setUp(self):
        super().setUp()
        for d in (self.a, self.b, self.c):
            self.assertTrue(d.running(), "a shared dlockd died:\n%s" % d.log())
        self.assertTrue(self.etcd.running(), "etcd died:\n%s" % self.etcd.log())

    def test_held_lists_every_daemon_s_keys(self):
        check_held(self, lambda: self.conn(self.a), lambda: self.conn(self.b))

    def test_status_from_another_daemon(self):
        # the lease's end is each daemon's own (its keepalives): not told
        def calls():
            m = self.etcd.metrics()
            return self.etcd.requests("Range", m) + self.etcd.requests("Txn", m)

        self.assertFleetStatus(self.a, self.b, calls, lease_left=False)

    def test_mutual_exclusion_and_fences_across_daemons(self):
        key = unique_key()
        ca, cb = self.conn(self.a), self.conn(self.b)
        fences = []
        for i in range(20):
            c, other = ((ca, cb), (cb, ca))[i % 2]
            g = self.assertGranted(c.cmd("LOCK", key, "WAIT", 0))
            # the fence is the create revision of the holder's etcd key,
            # shifted left by 16 bits (room for local handoffs)
            keys = self.etcd_keys(self.etcd, key)
            self.assertEqual(len(keys), 1, keys)
            self.assertEqual(g[1], keys[0][1] << 16, "fence %d, etcd key %s" % (g[1], keys))
            self.assertIs(other.cmd("LOCK", key, "WAIT", 0), NULL)
            self.assertEqual(c.cmd("VALIDATE", key, g[1]), 1)
            self.assertEqual(c.cmd("UNLOCK", key), 0)
            fences.append(g[1])
        self.assertTrue(all(x < y for x, y in zip(fences, fences[1:])), fences)
        self.assertLessEqual(fences[-1] >> 16, self.etcd.revision())
        self.assertGreater(fences[0], 0)
        # each daemon reports the last fence it issued
        self.assertEqual(self.status(self.a, key)["fence"], fences[-2])
        self.assertEqual(self.status(self.b, key)["fence"], fences[-1])

    def test_fifo_across_daemons(self):
        # waiters queued alternately on A and B behind a holder on C are
        # granted in the order they asked
        key = unique_key()
        holder = self.conn(self.c)
        g0 = self.assertGranted(holder.cmd("LOCK", key))
        waiters = []
        for i in range(3):
            for name, d in (("A", self.a), ("B", self.b)):
                w = self.queue(d, key, "WAIT", 20000, waiters=i + 1)
                if i == 0:
                    # the head of a daemon's queue has its key in etcd
                    self.wait_etcd_keys(self.etcd, key, len(waiters) + 2,
                                        "(%s's head waiter)" % name)
                waiters.append(("%s%d" % (name, i), w))
        # only the head of each daemon's queue has a key in etcd
        keys = self.etcd_keys(self.etcd, key)
        self.assertEqual(len(keys), 3, keys)
        order = self.grant_order(key, holder, waiters)
        self.assertEqual([n for n, _ in order], [n for n, _ in waiters],
                         "grants out of request order: %s" % order)
        fences = [g0[1]] + [f for _, f in order]
        self.assertTrue(all(x < y for x, y in zip(fences, fences[1:])), fences)
        self.wait_etcd_keys(self.etcd, key, 0, "(all released)")

    def test_order_when_the_holder_daemon_has_waiters(self):
        # the holder on A, waiters arriving in turn on A and B: a daemon's
        # queue has one place in etcd, its head's, so the daemons take
        # turns (docs/backends/etcd.md, Order across daemons): B0 A0 B1 A1 B2 A2
        key = unique_key()
        holder = self.conn(self.a)
        self.assertGranted(holder.cmd("LOCK", key))
        waiters = []
        for i in range(3):
            for name, d in (("A", self.a), ("B", self.b)):
                # A's holder counts as the head of A's queue
                w = self.queue(d, key, "WAIT", 20000, waiters=i + 1)
                waiters.append(("%s%d" % (name, i), w))
        order = self.grant_order(key, holder, waiters)
        self.assertEqual([n for n, _ in order], ["B0", "A0", "B1", "A1", "B2", "A2"],
                         "grants: %s" % order)
        fences = [f for _, f in order]
        self.assertTrue(all(x < y for x, y in zip(fences, fences[1:])), fences)
        self.wait_etcd_keys(self.etcd, key, 0, "(all released)")

    def test_local_handoffs_without_a_txn(self):
        # waiters on the holder's daemon alone: each handoff is a read of
        # the range (nobody else waits), not a Txn; the etcd key stays, and
        # fences count the handoffs in their low 16 bits
        key = unique_key()
        holder = self.conn(self.a)
        g0 = self.assertGranted(holder.cmd("LOCK", key))
        keys = self.wait_etcd_keys(self.etcd, key, 1, "(the holder)")
        waiters = [self.queue(self.a, key, "WAIT", 20000, waiters=i + 1) for i in range(3)]
        local0 = int(self.info(self.a)["backend_local_handoffs_total"])
        m0 = self.etcd.metrics()
        self.assertEqual(holder.cmd("UNLOCK", key), 0)
        fences = [g0[1]]
        for w in waiters:
            g = read_within(w, 10)
            self.assertIsInstance(g, list, g)
            fences.append(g[1])
            # one etcd key all along, the first holder's
            self.assertEqual(self.etcd_keys(self.etcd, key), keys)
            self.assertEqual(w.cmd("UNLOCK", key), 0)
        m1 = self.etcd.metrics()
        self.assertEqual(fences, [g0[1] + i for i in range(4)], fences)
        self.assertEqual(int(self.info(self.a)["backend_local_handoffs_total"]) - local0, 3)
        # one Txn: the last release's delete
        self.assertEqual(self.etcd.requests("Txn", m1) - self.etcd.requests("Txn", m0), 1)
        self.wait_etcd_keys(self.etcd, key, 0, "(released)")
        # a waiter of another daemon is not passed: B's key waits, so the
        # handoff to A's next waiter is a Txn, and B goes first
        g1 = self.assertGranted(holder.cmd("LOCK", key))
        wb = self.queue(self.b, key, "WAIT", 20000, waiters=1)
        self.wait_etcd_keys(self.etcd, key, 2, "(B's waiter)")
        wa = self.queue(self.a, key, "WAIT", 20000, waiters=1)
        self.assertEqual(holder.cmd("UNLOCK", key), 0)
        gb = read_within(wb, 10)
        self.assertIsInstance(gb, list, gb)
        self.assertGreater(gb[1], g1[1])
        self.assertIsNone(read_within(wa, 0.2), "A's waiter passed B's")
        self.assertEqual(wb.cmd("UNLOCK", key), 0)
        ga = read_within(wa, 10)
        self.assertIsInstance(ga, list, ga)
        self.assertGreater(ga[1], gb[1])
        self.assertEqual(wa.cmd("UNLOCK", key), 0)

    def test_wake_across_daemons_without_polling(self):
        # a waiter on B behind a holder on A: for seconds of waiting nobody
        # reads or writes etcd (keepalives aside); the release wakes B
        # through its watch
        key = unique_key()
        holder = self.conn(self.a)
        self.assertGranted(holder.cmd("LOCK", key))
        w = self.queue(self.b, key, "WAIT", 30000, waiters=1)
        self.wait_etcd_keys(self.etcd, key, 2, "(B's waiter)")
        time.sleep(0.2)  # B's read of the key and its watch request are done
        m0 = self.etcd.metrics()
        time.sleep(QUIET_WINDOW)  # the measurement window itself
        m1 = self.etcd.metrics()
        grown = {}
        for method in ("Range", "Txn", "Put", "DeleteRange", "LeaseGrant", "Watch",
                       "LeaseKeepAlive", "LeaseRevoke", "LeaseTimeToLive"):
            calls = self.etcd.requests(method, m1) - self.etcd.requests(method, m0)
            msgs = self.etcd.messages(method, m1) - self.etcd.messages(method, m0)
            if calls or msgs:
                grown[method] = (calls, msgs)
        report("etcd calls (streams started, messages) in %.1f s of waiting, "
               "3 daemons: %s" % (QUIET_WINDOW, grown or "none"))
        for method in ("Range", "Txn", "Put", "DeleteRange", "LeaseGrant", "Watch"):
            self.assertNotIn(method, grown, "the daemons poll etcd while a LOCK waits: %s"
                             % grown)
        self.assertIsNone(read_within(w, 0), "B's waiter answered while A holds the key")
        # one watch stream per daemon, no more
        open_watches = (self.etcd.requests("Watch", m1)
                        - int(self.etcd.count(m1, "grpc_server_handled_total",
                                              grpc_method="Watch")))
        self.assertLessEqual(open_watches, 3, "more than one watch stream per daemon")
        self.assertEqual(holder.cmd("UNLOCK", key), 0)
        t0 = time.monotonic()
        self.assertGranted(read_within(w, 5))
        took = [time.monotonic() - t0]
        self.assertEqual(w.cmd("UNLOCK", key), 0)
        # the latency of the wake-up, a few times
        for _ in range(5):
            self.assertGranted(holder.cmd("LOCK", key, "WAIT", 5000))
            w = self.queue(self.b, key, "WAIT", 5000, waiters=1)
            self.wait_etcd_keys(self.etcd, key, 2, "(B's waiter)")
            self.assertEqual(holder.cmd("UNLOCK", key), 0)
            t0 = time.monotonic()
            self.assertGranted(read_within(w, 5))
            took.append(time.monotonic() - t0)
            self.assertEqual(w.cmd("UNLOCK", key), 0)
        self.assertWakesWithin(took, WAKE_BOUND)

    def test_shared_and_semaphore_across_daemons(self):
        self.shared_and_semaphore_across((self.a, self.b, self.c))

    def test_try_leaves_nothing_behind(self):
        # LOCK ... WAIT 0 on B while A holds the key is answered null; once
        # A has released it, a try on C finds it free, round after round: a
        # try answered null has no key left in etcd to be in C's way
        ha, hb, hc = self.conn(self.a), self.conn(self.b), self.conn(self.c)
        refused = []
        for i in range(300):
            key = unique_key()
            self.assertGranted(ha.cmd("LOCK", key, "WAIT", 0))
            self.assertIs(hb.cmd("LOCK", key, "WAIT", 0), NULL)
            self.assertEqual(ha.cmd("UNLOCK", key), 0)
            g = hc.cmd("LOCK", key, "WAIT", 0)
            if isinstance(g, list):
                self.assertEqual(hc.cmd("UNLOCK", key), 0)
            else:
                refused.append((i, g, self.etcd_keys(self.etcd, key)))
        self.assertEqual(refused, [], "a free key refused to C's try after B's try "
                         "(round, reply, etcd keys just after)")

    def test_shared_waiters_granted_together(self):
        # a shared holder, an exclusive waiter, two shared waiters on one
        # daemon: when the exclusive one is done both shared ones are
        # granted (both have keys in etcd, behind the exclusive one's), again
        # and again
        for i in range(15):
            key = unique_key()
            a = self.conn(self.a)
            self.assertGranted(a.cmd("LOCK", key, "SHARED"))
            x = self.queue(self.a, key, "WAIT", 5000, waiters=1)
            s1 = self.queue(self.a, key, "SHARED", "WAIT", 5000, waiters=2)
            s2 = self.queue(self.a, key, "SHARED", "WAIT", 5000, waiters=3)
            self.assertEqual(a.cmd("UNLOCK", key), 0)
            self.assertGranted(read_within(x, 5))
            self.assertEqual(x.cmd("UNLOCK", key), 0)
            g1, g2 = read_within(s1, 2), read_within(s2, 2)
            self.assertTrue(isinstance(g1, list) and isinstance(g2, list),
                            "round %d: the shared waiters got %r and %r; STATUS %s; "
                            "etcd keys %s" % (i, g1, g2, self.status(self.a, key),
                                              self.etcd_keys(self.etcd, key)))
            for c in (a, x, s1, s2):
                c.close()

    def test_waiter_after_a_try(self):
        # LOCK ... WAIT 0 on A finds the key taken, then the same session
        # waits for it: the waiter is granted when the key is released, on A
        # or on B, again and again (a semaphore's permit, a shared lock
        # behind an exclusive one, an exclusive lock)
        failed = []
        for where, holders in (("A", self.a), ("B", self.b)):
            for mode, opts in (("semaphore", ("LIMIT", 2)), ("shared", ("SHARED",)),
                               ("exclusive", ())):
                for i in range(25):
                    key = unique_key()
                    h1, h2, w = self.conn(holders), self.conn(holders), self.conn(self.a)
                    if mode == "semaphore":
                        self.assertGranted(h1.cmd("LOCK", key, *opts, "WAIT", 0))
                        self.assertGranted(h2.cmd("LOCK", key, *opts, "WAIT", 0))
                    else:
                        self.assertGranted(h2.cmd("LOCK", key, "WAIT", 0))
                    self.assertIs(w.cmd("LOCK", key, *opts, "WAIT", 0), NULL)
                    w.send(Raw.encode("LOCK", key, *opts, "WAIT", 1500))
                    self.wait_status(self.a, key, waiters=1)
                    self.assertEqual(h2.cmd("UNLOCK", key), 0)
                    g = read_within(w, 3)
                    for c in (h1, h2, w):
                        c.close()
                    if not isinstance(g, list):
                        failed.append("%s held on %s, round %d: the waiter on A got %r; "
                                      "STATUS %s; etcd keys %s"
                                      % (mode, where, i, g, self.status(self.a, key),
                                         self.etcd_keys(self.etcd, key)))
                        break  # the next mode
        if failed:
            self.fail("waiters not granted after the release:\n" + "\n".join(failed))

    def test_etcd_keys_of_locks(self):
        # a lock is a key <prefix><escaped key>/<id> on the daemon's lease,
        # its value the mode and who took it ("~<length>:<who>"); gone as
        # soon as it is released
        key = unique_key("a b/ü%")
        lease_a = self.lease_id(self.a)
        self.assertNotEqual(lease_a, 0)
        self.assertIn(lease_a, self.etcd.leases())
        c = self.conn(self.a)
        g = self.assertGranted(c.cmd("LOCK", key))
        keys = self.etcd_keys(self.etcd, key)
        self.assertEqual(len(keys), 1, keys)
        name, rev, lease, value = keys[0]
        self.assertTrue(name.startswith(lock_prefix(key)), name)
        self.assertRegex(name[len(lock_prefix(key)):], rb"\A[^/]+\Z")
        self.assertEqual(rev << 16, g[1])
        self.assertEqual(lease, lease_a, "not on the daemon's lease")
        kind, rest = value.split(b"~", 1)
        self.assertEqual(kind, b"x0", "the value of an exclusive lock's key")
        length, who = rest.split(b":", 1)
        self.assertEqual(int(length), len(who), value)
        fields = who.split(b"\t")
        self.assertEqual(fields[:2], [b"w1", self.a.info()["daemon_id"].encode()], value)
        self.assertEqual(int(fields[4]), c.cmd("CLIENT", "ID"))
        self.assertEqual(c.cmd("UNLOCK", key), 0)
        self.assertEqual(self.etcd_keys(self.etcd, key), [], "the key stays after UNLOCK")
        # shared holders and permits have a key each; a closed session's go
        s1, s2 = self.conn(self.a), self.conn(self.b)
        self.assertGranted(s1.cmd("LOCK", key, "SHARED"))
        self.assertGranted(s2.cmd("LOCK", key, "SHARED"))
        keys = self.etcd_keys(self.etcd, key)
        self.assertEqual(len(keys), 2, keys)
        self.assertEqual({k[2] for k in keys}, {lease_a, self.lease_id(self.b)})
        self.assertEqual([k[3].split(b"~")[0] for k in keys], [b"s0", b"s0"])
        s1.close()
        self.wait_etcd_keys(self.etcd, key, 1, "(a closed session's lock)", timeout=1.0)
        s2.close()
        self.wait_etcd_keys(self.etcd, key, 0, "(a closed session's lock)", timeout=1.0)
        # a DETACH lock has a lease of its own, of its TTL in whole seconds
        d = self.conn(self.a)
        token, fence, _ = self.assertGranted(d.cmd("LOCK", key, "TTL", 4500, "DETACH"))
        d.close()
        keys = self.etcd_keys(self.etcd, key)
        self.assertEqual(len(keys), 1, keys)
        self.assertNotIn(keys[0][2], (0, lease_a))
        ttl, granted = self.etcd.lease_ttl(keys[0][2])
        self.assertEqual(granted, 5, "DETACH TTL 4500 ms: a lease of 5 s")
        self.assertGreater(ttl, 0)
        self.assertEqual(self.conn(self.a).cmd("UNLOCK", key, token), 0)
        self.assertEqual(self.etcd_keys(self.etcd, key), [])
        # a semaphore's permits: a key each, the limit in the value
        p1, p2 = self.conn(self.a), self.conn(self.b)
        g1 = self.assertGranted(p1.cmd("LOCK", key, "LIMIT", 3))
        g2 = self.assertGranted(p2.cmd("LOCK", key, "LIMIT", 3))
        self.assertEqual([(k[1] << 16, k[3].split(b"~")[0])
                          for k in self.etcd_keys(self.etcd, key)],
                         [(g1[1], b"n3"), (g2[1], b"n3")])
        self.assertEqual(p1.cmd("UNLOCK", key), 0)
        self.assertEqual([k[1] << 16 for k in self.etcd_keys(self.etcd, key)], [g2[1]])
        self.assertEqual(p2.cmd("UNLOCK", key), 0)
        self.assertEqual(self.etcd_keys(self.etcd, key), [])

    def test_info_backend_fields(self):
        info = self.info(self.a)
        self.assertEqual(info["backend"], "etcd")
        for name in ("backend_connected", "backend_reconnects_total", "backend_lease_id",
                     "backend_lease_ttl_ms", "backend_lease_valid_ms",
                     "backend_watch_revision", "backend_requests_total",
                     "backend_renewals_total", "backend_lost_total"):
            self.assertIn(name, info, "INFO lacks %s" % name)
            self.assertRegex(info[name], r"^\d+$", name)
        self.assertEqual(info["backend_connected"], "1")
        self.assertEqual(info["backend_endpoint"], self.etcd.endpoint())
        self.assertEqual(int(info["backend_lease_ttl_ms"]), 10000)  # the default
        self.assertTrue(0 < int(info["backend_lease_valid_ms"]) <= 10000, info)
        lease = int(info["backend_lease_id"])
        ttl, granted = self.etcd.lease_ttl(lease)
        self.assertEqual(granted, 10)
        self.assertGreater(ttl, 0)
        self.assertLessEqual(int(info["backend_watch_revision"]), self.etcd.revision())
        # requests are counted; keepalives go every third of the lease
        c = self.conn(self.a)
        k = unique_key()
        before = int(info["backend_requests_total"])
        self.assertGranted(c.cmd("LOCK", k))
        self.assertEqual(c.cmd("UNLOCK", k), 0)
        self.assertGreater(int(self.info(self.a)["backend_requests_total"]), before)
        renewals = int(self.info(self.a)["backend_renewals_total"])
        wait_until(lambda: int(self.info(self.a)["backend_renewals_total"]) > renewals,
                   10000 / 3000 + 2, 0.05, "a keepalive of the daemon's lease")
        self.assertEqual(c.cmd("HELLO", "3")[b"backend"], b"etcd")


# ---- daemons and etcd started, stopped and killed ----

class TestEtcdProcesses(EtcdCase):
    """Each test starts its own etcd and daemons, and stops, kills or
    restarts them."""

    def test_fences_across_restarts(self):
        e = self.start_etcd()
        port, a, b = self.restartable_pair(e)
        key, fences = unique_key(), []
        self.take_turns((a, b), key, fences, 3, RECONNECT_BOUND)
        self.assertEqual(a.stop(signal.SIGKILL), -signal.SIGKILL)
        self.take_turns((b,), key, fences, 1, RECONNECT_BOUND)
        a2 = self.start_daemon(e, port=port)
        self.assertEqual(self.status(a2, key)["fence"], 0)  # a new daemon knows nothing
        self.take_turns((a2,), key, fences, 1, RECONNECT_BOUND)
        # etcd restarted on its data: revisions go on
        self.assertIn(e.stop(), (0, -signal.SIGTERM))
        e.start()
        self.take_turns((b, a2), key, fences, 1, RECONNECT_BOUND)
        self.assertTrue(all(x < y for x, y in zip(fences, fences[1:])),
                        "fences across restarts: %s" % fences)
        self.assertLess(fences[-1] >> 16, 10 ** 6, "fences are etcd revisions, shifted")

    def test_killed_daemon_locks_taken_after_lease(self):
        e = self.start_etcd()
        a = self.start_daemon(e, backend_conf=lease_conf())
        b = self.start_daemon(e, backend_conf=lease_conf())
        k1, k2, k3, k4 = unique_key("x"), unique_key("s"), unique_key("l"), unique_key("d")
        c1, c2 = self.conn(a), self.conn(a)
        fences = {}
        # a DETACH lock has a lease of its own, of its TTL rounded up to
        # seconds (2500 ms: 3 s), not kept alive
        detach_ttl = 2500
        t_detach = time.monotonic()
        fences[k4] = self.assertGranted(c2.cmd("LOCK", k4, "TTL", detach_ttl, "DETACH"))[1]
        fences[k1] = self.assertGranted(c1.cmd("LOCK", k1))[1]
        fences[k2] = self.assertGranted(c1.cmd("LOCK", k2, "SHARED"))[1]
        self.assertGranted(c1.cmd("LOCK", k3, "LIMIT", 2))
        fences[k3] = self.assertGranted(c2.cmd("LOCK", k3, "LIMIT", 2))[1]
        calls = {}
        for k, opts in ((k1, ()), (k2, ()), (k3, ("LIMIT", 2)), (k4, ())):
            w = self.queue(b, k, *opts, "WAIT", 30000, waiters=1)
            w.settimeout(LEASE / 1000 + KILL_MARGIN + 10)
            calls[k] = in_thread(w.read)
        # A's lease in etcd is a renewed one
        self.wait_renewal(a, LEASE / 1000, "A to keep its lease alive", 0.01)
        t_renewed = time.monotonic()
        lease_a = self.lease_id(a)
        took = self.granted_after_kill(a, calls, fences, LEASE / 1000 + KILL_MARGIN + 10)
        t4 = calls.pop(k4).done_at
        took.pop(k4)
        report("locks of a killed daemon granted elsewhere %s ms after the kill (lease "
               "%d ms); its DETACH lock %.0f ms after it was taken (TTL %d ms)"
               % (ms(took.values()), LEASE,
                  1000 * (t4 - t_detach), detach_ttl))
        self.assertGreaterEqual(t4 - t_detach, detach_ttl / 1000, "the DETACH lock granted "
                                "elsewhere %.3f s after it was taken, before its TTL"
                                % (t4 - t_detach))
        self.assertLess(t4 - t_detach, 3 + KILL_MARGIN, "the DETACH lock free only %.3f s "
                        "after it was taken" % (t4 - t_detach))
        for k, t in took.items():
            # etcd had a keepalive of the lease a moment before t_renewed:
            # it cannot end the lease before that + LEASE
            self.assertGreaterEqual(calls[k].done_at, t_renewed + LEASE / 1000 - 0.1,
                                    "%s free %.3f s after the kill, before the lease "
                                    "can have run out" % (k, t))
            self.assertLess(t, LEASE / 1000 + KILL_MARGIN,
                            "%s free only %.3f s after the kill" % (k, t))
        self.assertEqual(e.lease_ttl(lease_a)[0], -1, "the killed daemon's lease lives")

    def test_lost_when_etcd_stopped_past_the_lease(self):
        # etcd stopped (SIGSTOP) past the daemon's lease: the holders are
        # told before the lease can have ended in etcd; once etcd is back
        # nothing is granted on the dead lease
        e = self.start_etcd()
        a = self.start_daemon(e, backend_conf=lease_conf())
        b = self.start_daemon(e, backend_conf=lease_conf())
        k1, k2, k3 = unique_key("x"), unique_key("s"), unique_key("r2")
        h = self.conn(a)
        self.hello3(h)
        h2 = self.conn(a)  # RESP2: told by -LOST only
        fence = {}
        fence[k1] = self.assertGranted(h.cmd("LOCK", k1))[1]
        fence[k2] = self.assertGranted(h.cmd("LOCK", k2, "SHARED"))[1]
        fence[k3] = self.assertGranted(h2.cmd("LOCK", k3))[1]
        waiters = {}
        for k in (k1, k2, k3):
            w = self.conn(b)
            w.settimeout(30)
            w.send(Raw.encode("LOCK", k, "WAIT", 30000))
            self.wait_status(b, k, waiters=1)
            waiters[k] = w
        old_lease = self.lease_id(a)
        # stop etcd right after a keepalive of A's lease was answered: etcd
        # had it at t_prev or later, and ends the lease LEASE after that
        renewals = int(self.info(a)["backend_renewals_total"])
        t_prev = time.monotonic()
        deadline = t_prev + LEASE / 1000
        while int(self.info(a)["backend_renewals_total"]) == renewals:
            self.assertLess(time.monotonic(), deadline, "no keepalive within the lease")
            t_prev = time.monotonic()
        e.pause()
        t_stop = time.monotonic()
        lease_end = t_prev + LEASE / 1000  # the earliest end of the lease in etcd
        grants = {}

        def take(k):
            # B's waiter may be answered -BACKEND while etcd is stopped: it
            # asks again; what matters is when and how the key is granted
            grants[k] = grant_through_outage(waiters[k], k, 30000, 0.05)

        takers = [in_thread(take, k) for k in (k1, k2, k3)]
        try:
            pushes = in_thread(read_pushes, h, 2, lease_end + 1.5).result(LEASE / 1000 + 5)
            # keep etcd stopped until the lease has run out in it for sure
            sleep_until(t_stop + LEASE / 1000 + 0.5)
            # nothing granted while etcd is stopped
            self.assertEqual(grants, {}, "granted on B while etcd is stopped")
        finally:
            e.resume()
        t_cont = time.monotonic()
        results(takers, 30)
        report("lost pushes %s ms after etcd was stopped (lease %d ms); other daemon's grants "
               "%s ms after SIGCONT" % (ms(pushes[k][0] - t_stop for k in pushes), LEASE,
                                        ms(g[0] - t_cont for g in grants.values())))
        for k in (k1, k2):
            self.assertIn(k, pushes, "no lost push for %s within the lease" % k)
            t, p = pushes[k]
            self.assertEqual(list(p)[:3], [b"lost", k.encode(), fence[k]])
            self.assertIsInstance(p[3], bytes)
            self.assertLess(t, lease_end, "the lost push for %s came %.0f ms after the "
                            "lease could have ended in etcd" % (k, 1000 * (t - lease_end)))
        self.assertNotIn(k3, pushes)
        # B's grants: new fences, on a live lease that is not A's dead one
        for k in (k1, k2, k3):
            g = grants[k][1]
            self.assertGreater(g[1], fence[k])
            keys = self.etcd_keys(e, k)
            self.assertEqual(len(keys), 1, "etcd keys of %s: %s" % (k, keys))
            # the fence is the revision at which B found its key holding
            self.assertLessEqual(keys[0][1], g[1] >> 16)
            self.assertNotEqual(keys[0][2], old_lease, "granted on the dead lease")
            self.assertGreater(e.lease_ttl(keys[0][2])[0], 0, "granted on a dead lease")
        self.assertEqual(e.lease_ttl(old_lease)[0], -1, "the lost lease lives in etcd")
        # A's holders: the next commands answer -LOST, one loss each (pushed
        # or not), then -NOTHELD
        self.assertLostReplies(h, {k1: fence[k1], k2: fence[k2]})
        self.assertLostReplies(h2, {k3: fence[k3]})
        for c, k in ((h, k1), (h, k2), (h2, k3)):
            self.assertErr(c.cmd("UNLOCK", k), "NOTHELD")
        info = self.info(a)
        self.assertGreaterEqual(int(info["lost_total"]), 3)
        # A locks again, on a new lease
        k4 = unique_key()

        def granted():
            reply = h2.cmd("LOCK", k4, "WAIT", 0)
            if isinstance(reply, Err) and reply.code == "BACKEND":
                return False
            return self.assertGranted(reply)

        wait_until(granted, RECONNECT_BOUND, 0.05, "A to lock again")
        info = self.info(a)
        new_lease = int(info["backend_lease_id"])
        self.assertNotEqual(new_lease, old_lease)
        self.assertEqual([x[2] for x in self.etcd_keys(e, k4)], [new_lease])
        self.assertEqual(info["backend_lost_total"], "1", "the daemon's lease was lost once")
        self.assertEqual(h2.cmd("UNLOCK", k4), 0)

    def test_etcd_down_and_back(self):
        e = self.start_etcd()
        a = self.start_daemon(e, backend_conf=FAST)
        c = self.conn(a)
        before = int(self.info(a)["backend_reconnects_total"])
        # stopped: no answer; LOCK WAIT 0 answers -BACKEND after the
        # request timeout
        held = unique_key()
        self.assertGranted(c.cmd("LOCK", held))
        e.pause()
        try:
            t0 = time.monotonic()
            reply = c.cmd("LOCK", unique_key(), "WAIT", 0)
            took = time.monotonic() - t0
            self.assertErr(reply, "BACKEND")
            self.assertLess(took, FAST["request_timeout_ms"] / 1000 + BACKEND_REPLY_SLACK,
                            "-BACKEND came %.3f s after LOCK" % took)
        finally:
            e.resume()
        # the short outage does not lose the lock; its release may find the
        # client still counting etcd as down
        reply = c.cmd("UNLOCK", held)
        if reply != 0:
            self.assertErr(reply, "BACKEND")
        # gone: refused at once
        self.assertIn(e.stop(), (0, -signal.SIGTERM))
        waiting = self.assertRefusedWhileDown(
            a, c, FAST["request_timeout_ms"] / 1000 + BACKEND_REPLY_SLACK, "etcd", 3)
        # back on the same port and data: locks work again, and the LOCK
        # that waited through the outage is granted
        e.start()
        self.assertGrantedLater(waiting, RECONNECT_BOUND)
        self.assertLocksAgain(a, c, RECONNECT_BOUND, before)

    def test_endpoints_failover(self):
        # the first endpoint a port nobody listens on, the second a live
        # etcd: given in a YAML list, a comma string, and the -b URL
        e = self.start_etcd()
        dead = "127.0.0.1:%d" % free_port()
        live = e.endpoint()
        daemons = [
            self.start_daemon(e, backend_conf=dict(FAST, endpoints=[dead, live])),
            self.start_daemon(e, backend_conf=dict(FAST, endpoints="%s,%s" % (dead, live))),
            self.start_daemon(e, backend_url="etcd://%s,%s" % (dead, live)),
            self.start_daemon(e, 'backend:\n  type: etcd\n  endpoints:\n'
                              '    - %s\n    - %s\n' % (dead, live)),
        ]
        key = unique_key()
        for i, d in enumerate(daemons):
            info = self.info(d)
            self.assertEqual(info["backend_endpoint"], live, "daemon %d" % i)
            c = self.conn(d)
            g = self.assertGranted(c.cmd("LOCK", key, "WAIT", 5000))
            # they share one etcd: the others are kept out (and delete the
            # keys of their tries right after)
            for other in daemons:
                if other is not d:
                    self.assertIs(self.conn(other).cmd("LOCK", key, "WAIT", 0), NULL)
            keys = self.wait_etcd_keys(e, key, 1, "(the holder's alone)", timeout=1)
            self.assertEqual(keys[0][1] << 16, g[1])
            self.assertEqual(c.cmd("UNLOCK", key), 0)

    def test_compaction_while_waiting(self):
        e = self.start_etcd()
        a = self.start_daemon(e)
        b = self.start_daemon(e)
        key = unique_key()
        holder = self.conn(a)
        self.assertGranted(holder.cmd("LOCK", key))
        w = self.queue(b, key, "WAIT", 30000, waiters=1)
        self.wait_etcd_keys(e, key, 2, "(B's waiter)")
        # history past B's watch, compacted away
        for i in range(5):
            e.put("other/%d" % i, "x")
        rev = e.compact()
        self.assertGreater(rev, int(self.info(b)["backend_watch_revision"]))
        self.assertIsNone(read_within(w, 0.3), "granted while A holds the key")
        self.assertEqual(holder.cmd("UNLOCK", key), 0)
        g = self.assertGranted(read_within(w, 5))
        self.assertEqual(w.cmd("UNLOCK", key), 0)
        # again, and etcd restarted after the compaction: B's watch must
        # start again from a revision that is gone
        self.assertGranted(holder.cmd("LOCK", key))
        w = self.queue(b, key, "WAIT", 30000, waiters=1)
        self.wait_etcd_keys(e, key, 2, "(B's waiter)")
        watched = int(self.info(b)["backend_watch_revision"])
        for i in range(5):
            e.put("other/%d" % i, "y")
        rev = e.compact()
        self.assertGreater(rev, watched + 1)
        self.assertIn(e.stop(), (0, -signal.SIGTERM))
        e.start()
        # both daemons back on etcd (the waiter may have been told -BACKEND)
        wait_until(lambda: all(self.info(d)["backend_connected"] == "1" for d in (a, b)),
                   RECONNECT_BOUND, 0.05, "both daemons to reconnect")
        reply = read_within(w, 0.5)
        if isinstance(reply, Err):
            self.assertEqual(reply.code, "BACKEND", reply)
            w = self.queue(b, key, "WAIT", 30000, waiters=1)
        else:
            self.assertIsNone(reply, "granted while A holds the key")
        self.assertEqual(holder.cmd("UNLOCK", key), 0)
        g2 = self.assertGranted(read_within(w, 5))
        self.assertGreater(g2[1], g[1])
        self.assertEqual(w.cmd("UNLOCK", key), 0)
        # B found its watch's revision compacted (and read the keys anew)
        self.assertRegex(b.log(), r"watch from revision \d+ cancelled \(compacted")

    def test_authentication(self):
        # etcd with authentication on: a daemon with the user's password
        # (in the URL, or username and password_file) locks; one with a
        # wrong password does not, and says why; no password is logged
        e = self.start_etcd()
        e.enable_auth("root", "pw-Xy7")
        d = new_dir("pw")
        with open(os.path.join(d, "pw.txt"), "w") as f:
            f.write("pw-Xy7\n")
        a = self.start_daemon(e, backend_url=e.url("root", "pw-Xy7"))
        b = self.start_daemon(e, backend_conf={"username": "root", "password_file":
                                               os.path.join(d, "pw.txt")})
        bad = self.start_daemon(e, backend_url=e.url("root", "wrong-Qz9"), start=False)
        bad.start(wait_backend=False)
        key = unique_key()
        ca = self.conn(a)
        g = self.assertGranted(ca.cmd("LOCK", key))
        self.assertIs(self.conn(b).cmd("LOCK", key, "WAIT", 0), NULL)
        self.assertEqual([x[1] << 16 for x in self.etcd_keys(e, key)], [g[1]])
        reply = self.conn(bad).cmd("LOCK", unique_key(), "WAIT", 0)
        self.assertErr(reply, "BACKEND")
        # the refused daemon tries again with a backoff, not in a loop
        m0 = e.metrics()
        time.sleep(1.0)
        m1 = e.metrics()
        calls = sum(e.requests(m, m1) - e.requests(m, m0)
                    for m in ("Watch", "LeaseGrant", "Range", "Txn", "Authenticate"))
        report("etcd calls in 1 s of a daemon whose password etcd refuses: %d; its log "
               "has %d lines" % (calls, len(bad.log(100000).splitlines())))
        self.assertLess(calls, 30, "a daemon with a wrong password calls etcd in a loop")
        self.assertEqual(ca.cmd("UNLOCK", key), 0)
        self.assertGranted(self.conn(b).cmd("LOCK", key, "WAIT", 0))
        for daemon in (a, b, bad):
            for pw in ("pw-Xy7", "wrong-Qz9"):
                self.assertNotIn(pw, daemon.log())
        self.assertRegex(bad.log(), r"(?i)auth")
        self.assertLess(len(bad.log(100000).splitlines()), 100, "the refused daemon's log "
                        "fills: ...%s" % bad.log(1000))

    def test_key_prefix(self):
        e = self.start_etcd()
        a = self.start_daemon(e)
        b = self.start_daemon(e, backend_conf={"key_prefix": "other/"})
        key = unique_key()
        ga = self.assertGranted(self.conn(a).cmd("LOCK", key))
        # another prefix is another name space: the same key is free there
        gb = self.assertGranted(self.conn(b).cmd("LOCK", key, "WAIT", 0))
        self.assertEqual([x[1] << 16 for x in self.etcd_keys(e, key)], [ga[1]])
        self.assertEqual([x[1] << 16 for x in self.etcd_keys(e, key, "other/")], [gb[1]])
        names = [k[0] for k in e.keys(b"")]
        self.assertTrue(all(n.startswith((b"dlock/", b"other/")) for n in names), names)


    def test_stalls_under_load_lose_no_fresh_lease(self):
        # etcd stopped (SIGSTOP) 2.0-2.2 s, eight times, while 8 clients
        # lock and unlock keys of their own: the daemon loses the lease each
        # stall outlasts and is granted a new one. Txns put on the old lease
        # and still queued on the gateway connections fail with "lease not
        # found" once etcd runs again, after the new lease was granted; such
        # a late answer must not end the new lease (it did, and the revoke
        # of the new lease made the Txns on it fail the same way, a cascade
        # of fresh leases lost within ms of their grant). Locks work again
        # after each stall.
        stalls, ttl = 8, 2000
        e = self.start_etcd()
        # requests wait up to the default 2 s: they outlast a stall
        a = self.start_daemon(e, backend_conf=lease_conf(ttl, request_timeout_ms=2000))
        keys = [unique_key("stall%d" % i) for i in range(8)]
        stop = threading.Event()
        grants = [0] * len(keys)
        failed = []

        def work(i):
            c = a.client(socket_timeout=5)
            while not stop.is_set():
                try:
                    if isinstance(c.execute_command("LOCK", keys[i], "WAIT", 1000), list):
                        grants[i] += 1
                        c.execute_command("UNLOCK", keys[i])
                except redis.ResponseError:
                    time.sleep(0.01)  # -BACKEND, -LOST, -NOTHELD: go on
                except (redis.ConnectionError, redis.TimeoutError) as err:
                    failed.append(err)
                    c = a.client(socket_timeout=5)

        workers = [in_thread(work, i) for i in range(len(keys))]
        probe = self.conn(a)
        windows = []  # (SIGSTOP, SIGCONT), wall-clock seconds as the log's
        rng = random.Random(os.getpid())

        def lock_works():
            k = unique_key("probe")
            reply = probe.cmd("LOCK", k, "WAIT", 0)
            if isinstance(reply, Err):
                return False
            self.assertGranted(reply)
            self.assertEqual(probe.cmd("UNLOCK", k), 0)
            return True

        try:
            for _ in range(stalls):
                before = sum(grants)
                wait_until(lambda: sum(grants) >= before + 20, RECONNECT_BOUND, 0.01,
                           "the clients to lock between stalls")
                t0 = time.time()
                e.pause()
                try:
                    time.sleep(rng.uniform(2.0, 2.2))
                finally:
                    e.resume()
                windows.append((t0, time.time()))
                wait_until(lock_works, RECONNECT_BOUND, 0.05, "locks to work after a stall")
            before = sum(grants)
            wait_until(lambda: sum(grants) >= before + 20, RECONNECT_BOUND, 0.01,
                       "the clients to lock after the last stall")
        finally:
            stop.set()
            for w in workers:
                w.result(30)
        self.assertEqual(failed, [], "client connections failed")
        # the daemon's log: when each lease was granted and lost, and why
        with open(a.logfile, errors="replace") as f:
            log = f.read()
        stamp = r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z \S+ +etcd lease (\w+) "
        born = {m[2]: log_time(m[1]) for m in re.finditer(stamp + "granted", log)}
        lost = [(m[2], log_time(m[1]), m[3]) for m in re.finditer(stamp + "lost: (.*)", log)]
        # etcd may say it lost a lease only when a stall let it run out there:
        # one began between the grant and the answer (the daemon's own clock
        # may give up a lease granted during a stall sooner: not counted)
        stale = ["%s lost %.0f ms after its grant: %s" % (lease, 1000 * (t - born[lease]), why)
                 for lease, t, why in lost if "not found" in why and lease in born
                 and not any(born[lease] < w0 < t + 0.002 for w0, _ in windows)]
        report("%d stalls of %s s; %d grants to the clients; %d leases granted, %d lost, "
               "%d of them by an answer about an older lease"
               % (stalls, ", ".join("%.1f" % (w1 - w0) for w0, w1 in windows), sum(grants),
                  len(born), len(lost), len(stale)))
        self.assertEqual(stale, [], "fresh leases declared lost by late answers")
        self.assertNotIn("deleted by someone else", log)
        self.assertTrue(all(g > 0 for g in grants), grants)


class TestEtcdServerHarness(EtcdTestCase):
    """The harness's etcd: started, paused, stopped, restarted."""

    def test_start_pause_stop(self):
        e = self.start_etcd()
        self.assertEqual(e.keys(b""), [])
        rev = e.put("a/1", "x")
        self.assertEqual(e.keys("a/"), [(b"a/1", rev, 0, b"x")])
        e.pause()
        t0 = time.monotonic()
        with self.assertRaises(OSError):
            e.call("kv/range", {"key": "YQ=="}, timeout=0.3)
        self.assertLess(time.monotonic() - t0, 2)
        e.resume()
        self.assertEqual(e.revision(), rev)
        self.assertIn(e.stop(), (0, -signal.SIGTERM))
        self.assertIn(e.stop(), (0, -signal.SIGTERM))  # twice is fine
        e.start()  # the same ports and data
        self.assertEqual(e.keys("a/"), [(b"a/1", rev, 0, b"x")])
        self.assertGreaterEqual(e.requests("Range"), 1)
        e.pause()  # a paused server is stopped too


if __name__ == "__main__":
    unittest.main()
