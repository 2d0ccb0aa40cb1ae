"""Lease safety end to end: the cases where a lock was granted twice, and
the rules that keep it from happening again.

- EXTEND racing a renewal must not leave Redis with a shorter lease than
  the daemon believes (two daemons, Redis stopped while both are in flight);
- a grant is never delivered with more validity than it has left;
- after an involuntary loss the key stays taken, here and on other daemons,
  until the lost lease's end plus locks.lock_delay_ms;
- fences keep increasing when Redis loses its data;
- releases Redis answers with an error are retried; SIGTERM waits for them;
- sessions that did not ask for pushes are told of a loss by the reply to
  their next command; a LOCK they wait on is answered at once;
- detached locks count toward limits.max_locks_per_session; the TTL floor;
- sessions.idle_timeout_ms, TCP keepalive against a vanished host;
- keys are escaped in the log, and an outage logs one line per change.

A holder here "believes" it holds its lock from the grant until it is told
otherwise (a push, a -LOST reply, a closed connection): every check is that
no other holder is granted the key while someone still believes.
"""

import os
import re
import shutil
import signal
import subprocess
import time
import unittest

from dlocktest.cases import DaemonTestCase, report
from dlocktest.daemon import Daemon
from dlocktest.env import DLOCKD, PYTHON, SLOWDOWN, WRAPPER, new_dir, unique_key
from dlocktest.proc import free_port, in_thread, kill_pid, reap, spawn, track_pid, wait_until
from dlocktest.resp import NULL, Err, Push, Raw, pairs, read_within
from test_redis import FAST, RedisCase

TTL = 2000


def lease_keys(redis_conn, key):
    """The Redis keys that hold key's leases (any prefix)."""
    return [n for n in redis_conn.cmd("KEYS", "*l:" + key)]


class TestExtendRacingRenewal(RedisCase):

    def test_extend_in_flight_when_renewal_due(self):
        # LOCK TTL 6000 on A; Redis stopped from 0.9 s to 2.4 s; EXTEND 60000
        # sent at 1.0 s; the renewal falls due at ~2.0 s, while the EXTEND is
        # still unanswered. Sent after it with the old TTL, the renewal used
        # to land last and cut the lease in Redis back to 6 s while A believed
        # 60 s: B was granted at ~8.4 s and A's holder was never told. Now
        # the renewal waits for the EXTEND, and B is not granted while A's
        # holder believes it holds the key.
        r = self.start_redis()
        a = self.start_daemon(r)
        b = self.start_daemon(r)
        key = unique_key()
        h = self.conn(a)      # RESP2: told by the reply to its next command
        t0 = time.monotonic()
        fence = self.assertGranted(h.cmd("LOCK", key, "TTL", 6000))[1]
        wb = self.conn(b)
        wb.settimeout(30)
        wb.send(Raw.encode("LOCK", key, "WAIT", 11000))
        self.wait_status(b, key, waiters=1)
        time.sleep(max(0, t0 + 0.9 - time.monotonic()))
        r.pause()
        try:
            time.sleep(max(0, t0 + 1.0 - time.monotonic()))
            h.send(Raw.encode("EXTEND", key, 60000))
            time.sleep(max(0, t0 + 2.4 - time.monotonic()))
        finally:
            r.resume()
        ext = h.read()
        told = None
        granted = None
        deadline = t0 + 12.5
        while time.monotonic() < deadline and granted is None:
            g = read_within(wb, 0.05)
            if g is not None:
                granted = (time.monotonic(), g)
                break
            if told is None:
                p = h.cmd("PING")
                if isinstance(p, Err):
                    told = (time.monotonic(), p)
        if granted is not None and isinstance(granted[1], list):
            self.assertIsNotNone(told, "B was granted the key %.1f s after A's LOCK while "
                                 "A's holder was never told of a loss (EXTEND answered %r)"
                                 % (granted[0] - t0, ext))
            self.assertLess(told[0], granted[0], "A's holder was told only after B's grant")
        else:
            # the EXTEND held: A still holds the key, and says so
            self.assertIsInstance(ext, int, ext)
            self.assertGreater(ext, 50000)
            self.assertIsNone(told)
            self.assertEqual(h.cmd("VALIDATE", key, fence), 1)
            self.assertEqual(granted[1] if granted else NULL, NULL)


class TestLateGrant(RedisCase):

    def lock_in_stall(self, r, h, key, ttl, stall):
        """Send LOCK key TTL ttl on h while r is stopped for stall seconds.
        Returns (when it was sent, the reply, when the reply came)."""
        r.pause()
        try:
            t_send = time.monotonic()
            h.send(Raw.encode("LOCK", key, "TTL", ttl))
            time.sleep(stall)
        finally:
            r.resume()
        g = h.read()
        return t_send, g, time.monotonic()

    def test_grant_after_a_stall_tells_what_is_left(self):
        # Redis stalled ~1 s while LOCK k TTL 500 is in flight: the grant used
        # to be delivered with [token, fence, 500] when the lease could have
        # run out. A grant reports the validity it really has left, counted
        # from when the request was sent, and is not delivered with less than
        # the safety margin; a TTL this short for this command timeout is
        # refused to begin with.
        r = self.start_redis()
        a = self.start_daemon(r)
        h = self.conn(a)
        h.settimeout(20)
        t_send, g, t_recv = self.lock_in_stall(r, h, unique_key(), 500, 1.0)
        if isinstance(g, list):
            left = g[2]
            self.assertLessEqual(left, 1000 * (t_send + 0.5 - t_recv) + 10 * SLOWDOWN,
                                 "granted with %d ms of validity, %.0f ms after the LOCK "
                                 "of TTL 500 was sent" % (left, 1000 * (t_recv - t_send)))
            self.assertGreater(left, 50)
        else:
            self.assertIsInstance(g, Err, g)

    def test_validity_left_after_a_short_stall(self):
        # within the command timeout (300 ms here: the shortest TTL is 900),
        # a grant delayed 250 ms reports what is left of its 900 ms
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf=FAST)
        h = self.conn(a)
        key = unique_key()
        self.assertIsInstance(h.cmd("LOCK", key, "TTL", 899), Err)
        t_send, g, t_recv = self.lock_in_stall(r, h, key, 900, 0.25)
        self.assertGranted(g)
        # (the daemon sent the request a little after this test sent LOCK)
        self.assertLessEqual(g[2], 1000 * (t_send + 0.9 - t_recv) + 10 * SLOWDOWN)
        self.assertLess(g[2], 900 - 200)
        self.assertEqual(h.cmd("UNLOCK", key), 0)


class TestLockDelay(RedisCase):

    def test_lost_key_taken_until_lease_end_and_lock_delay(self):
        # A's holder loses its lock (Redis stopped past the margin): neither
        # A's own waiter nor B's is granted before the lease's end plus
        # locks.lock_delay_ms, and the holder is told first
        delay = 1000
        cfg = "locks:\n  lock_delay_ms: %d\n" % delay
        r = self.start_redis()
        a = self.start_daemon(r, cfg, backend_conf=FAST)
        b = self.start_daemon(r, cfg, backend_conf=FAST)
        key = unique_key()
        h = self.conn(a)
        self.hello3(h)
        t_sent = time.monotonic()
        fence = self.assertGranted(h.cmd("LOCK", key, "TTL", TTL))[1]
        wa, wb = self.conn(a), self.conn(b)
        for w, d in ((wa, a), (wb, b)):
            w.settimeout(30)
            w.send(Raw.encode("LOCK", key, "WAIT", 20000))
            self.wait_status(d, key, waiters=1)
        r.pause()
        try:
            p = read_within(h, TTL / 1000 + 1)
            t_lost = time.monotonic()
            self.assertIsInstance(p, Push, "no lost push within the lease")
            self.assertEqual(p[:3], [b"lost", key.encode(), fence])
            time.sleep(0.2)
        finally:
            r.resume()
        grants = {}

        def take(name, w):
            while True:
                g = w.read()
                if isinstance(g, list):
                    grants[name] = (time.monotonic(), g)
                    w.cmd("UNLOCK", key)
                    return
                if not (isinstance(g, Err) and g.code == "BACKEND"):
                    raise AssertionError("%s got %r" % (name, g))
                time.sleep(0.02)
                w.send(Raw.encode("LOCK", key, "WAIT", 20000))

        ta, tb = in_thread(take, "a", wa), in_thread(take, "b", wb)
        ta.result(30)
        tb.result(30)
        first = min(t for t, _ in grants.values())
        report("lost push %.0f ms after the LOCK was sent (TTL %d); first grant %.0f ms "
               "after it (lease end + lock-delay: %d)"
               % (1000 * (t_lost - t_sent), TTL, 1000 * (first - t_sent), TTL + delay))
        # the lease ended at the earliest TTL after the LOCK was sent
        self.assertGreaterEqual(first, t_sent + (TTL + delay) / 1000 - 0.05,
                                "granted %.0f ms after the LOCK was sent"
                                % (1000 * (first - t_sent)))
        self.assertLess(t_lost, first)
        for _, g in grants.values():
            self.assertGreater(g[1], fence)

    def test_unlock_frees_at_once(self):
        # the lock-delay is for losses only: an UNLOCK hands the key on at once
        cfg = "locks:\n  lock_delay_ms: 5000\n"
        r = self.start_redis()
        a = self.start_daemon(r, cfg, backend_conf=FAST)
        key = unique_key()
        h, w = self.conn(a), self.conn(a)
        self.assertGranted(h.cmd("LOCK", key, "TTL", TTL))
        w.send(Raw.encode("LOCK", key, "WAIT", 3000))
        self.wait_status(a, key, waiters=1)
        t0 = time.monotonic()
        self.assertEqual(h.cmd("UNLOCK", key), 0)
        self.assertGranted(w.read())
        self.assertLess(time.monotonic() - t0, 1.0 * SLOWDOWN)


class TestLossNotices(RedisCase):
    """Sessions that did not ask for pushes learn of a loss from the reply
    to their next command."""

    def lose(self, r, b, key):
        """Take key's lease away from its holder: delete it in Redis and
        lock the key through daemon b."""
        rc = self.redis_conn(r)
        names = lease_keys(rc, key)
        self.assertTrue(names)
        rc.cmd("DEL", *names)
        return self.assertGranted(self.conn(b).cmd("LOCK", key, "WAIT", 0))

    def test_resp2_next_command_answers_lost(self):
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf=FAST)
        b = self.start_daemon(r, backend_conf=FAST)
        key = unique_key("a b\r\n")
        h = self.conn(a)
        fence = self.assertGranted(h.cmd("LOCK", key, "TTL", 900))[1]
        self.lose(r, b, key)
        # the next renewal (every 300 ms) finds the lease gone
        time.sleep(0.6)
        rep = h.cmd("PING")
        self.assertIsInstance(rep, Err, rep)
        self.assertEqual(rep.code, "LOST")
        esc = key.replace(" ", "\\x20").replace("\r", "\\x0d").replace("\n", "\\x0a")
        self.assertTrue(rep.startswith("LOST %s %d " % (esc, fence)), rep)
        # once, then normal; the loss has been told
        self.assertEqual(h.cmd("PING"), "PONG")
        self.assertErr(h.cmd("UNLOCK", key), "NOTHELD")

    def test_resp3_without_opt_in_gets_no_push(self):
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf=FAST)
        b = self.start_daemon(r, backend_conf=FAST)
        key = unique_key()
        h = self.conn(a)
        self.assertEqual(h.cmd("HELLO", "3")[b"proto"], 3)
        fence = self.assertGranted(h.cmd("LOCK", key, "TTL", 900))[1]
        self.lose(r, b, key)
        self.assertIsNone(read_within(h, 0.8), "a push nobody asked for")
        rep = h.cmd("STATUS", key)
        self.assertIsInstance(rep, Err, rep)
        self.assertTrue(rep.startswith("LOST %s %d " % (key, fence)), rep)
        self.assertIsInstance(h.cmd("STATUS", key), dict)
        # pushes need RESP3, and HELLO 2 turns them off
        h2 = self.conn(a)
        self.assertErr(h2.cmd("CLIENT", "LOSTPUSH", "ON"), "ERR")
        self.assertEqual(h2.cmd("HELLO", "3")[b"proto"], 3)
        self.assertEqual(h2.cmd("CLIENT", "LOSTPUSH", "ON"), "OK")
        self.assertEqual(h2.cmd("HELLO", "2")[5], 2)

    def test_waiting_lock_answered_lost(self):
        # a session holding k1 waits for k2: when k1 is lost, the waiting
        # LOCK is withdrawn and answered -LOST at once
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf=FAST)
        b = self.start_daemon(r, backend_conf=FAST)
        k1, k2 = unique_key(), unique_key()
        h = self.conn(a)
        fence = self.assertGranted(h.cmd("LOCK", k1, "TTL", 900))[1]
        other = self.conn(a)
        self.assertGranted(other.cmd("LOCK", k2))
        h.settimeout(10)
        h.send(Raw.encode("LOCK", k2, "WAIT", 8000))
        self.wait_status(a, k2, waiters=1)
        t0 = time.monotonic()
        self.lose(r, b, k1)
        rep = h.read()
        self.assertIsInstance(rep, Err, rep)
        self.assertTrue(rep.startswith("LOST %s %d " % (k1, fence)), rep)
        self.assertLess(time.monotonic() - t0, 2.0 * SLOWDOWN)
        self.assertEqual(self.status(a, k2)["waiters"], 0)
        self.assertEqual(h.cmd("PING"), "PONG")
        self.assertErr(h.cmd("UNLOCK", k2), "NOTHELD")


class TestFenceDataLoss(RedisCase):

    def test_fences_increase_when_redis_loses_its_data(self):
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf=FAST)
        key = unique_key()
        c = self.conn(a)
        fences = []
        for _ in range(3):
            fences.append(self.assertGranted(c.cmd("LOCK", key))[1])
            self.assertEqual(c.cmd("UNLOCK", key), 0)
        rc = self.redis_conn(r)
        # the counter evicted, or the whole data set lost (FLUSHALL, an old
        # snapshot): the next fence is still larger
        rc.cmd("DEL", *rc.cmd("KEYS", "*f:" + key))
        fences.append(self.assertGranted(c.cmd("LOCK", key))[1])
        self.assertEqual(c.cmd("UNLOCK", key), 0)
        rc.cmd("FLUSHALL")
        fences.append(self.assertGranted(c.cmd("LOCK", key))[1])
        self.assertEqual(c.cmd("UNLOCK", key), 0)
        # a restart without persistence
        r.stop_checked()
        self.start_redis(port=r.port, directory=r.dir)

        def granted():
            g = c.cmd("LOCK", key, "WAIT", 0)
            return g if isinstance(g, list) else None

        fences.append(wait_until(granted, 10, 0.05, "LOCK after the restart")[1])
        self.assertTrue(all(x < y for x, y in zip(fences, fences[1:])), fences)
        self.assertEqual(c.cmd("UNLOCK", key), 0)


class TestRedisSettings(RedisCase):

    def test_maxmemory_policy_warning(self):
        r = self.start_redis()
        rc = self.redis_conn(r)
        self.assertEqual(rc.cmd("CONFIG", "SET", "maxmemory-policy", "allkeys-lru"), "OK")
        a = self.start_daemon(r)
        wait_until(lambda: "maxmemory-policy is allkeys-lru" in a.log(), 5, 0.02,
                   "the warning about maxmemory-policy")
        self.assertEqual(a.info()["backend_maxmemory_policy"], "allkeys-lru")

    def test_ttl_floor(self):
        r = self.start_redis()
        a = self.start_daemon(r)          # command_timeout_ms 2000: floor 6000
        c = self.conn(a)
        key = unique_key()
        rep = c.cmd("LOCK", key, "TTL", 5999)
        self.assertIsInstance(rep, Err)
        self.assertTrue(rep.startswith("ERR invalid TTL: must be 6000 to "), rep)
        self.assertTrue(rep.endswith(" ms (the redis backend's shortest lease is "
                                     "3 x backend.command_timeout_ms)"), rep)
        self.assertGranted(c.cmd("LOCK", key, "TTL", 6000))
        self.assertTrue(c.cmd("EXTEND", key, 5999).startswith("ERR invalid TTL"))
        self.assertIsInstance(c.cmd("EXTEND", key, 6000), int)
        # the configuration is checked the same way
        conf = os.path.join(new_dir("conf"), "dlockd.yaml")
        with open(conf, "w") as f:
            f.write("locks:\n  default_ttl_ms: 5999\nbackend:\n  type: redis\n")
        out = subprocess.run([DLOCKD, "-t", "-c", conf], capture_output=True, text=True,
                             timeout=10)
        self.assertEqual(out.returncode, 1, out)
        self.assertIn("2:19: 'locks.default_ttl_ms' (5999) must be at least the redis "
                      "backend's shortest lease (6000 ms: 3 x backend.command_timeout_ms)",
                      out.stderr)


class TestReleases(RedisCase):

    def test_release_answered_with_an_error_is_retried(self):
        # Redis answers the release READONLY (it was made a replica): the
        # UNLOCK answers -BACKEND, the lock is released here, and the release
        # is sent again until Redis takes it: the key is free in Redis long
        # before its TTL
        r = self.start_redis()
        a = self.start_daemon(r)
        key = unique_key()
        h = self.conn(a)
        self.assertGranted(h.cmd("LOCK", key, "TTL", 60000))
        rc = self.redis_conn(r)
        self.assertTrue(lease_keys(rc, key))
        dead = free_port()
        rc.cmd("REPLICAOF", "127.0.0.1", str(dead))
        try:
            rep = h.cmd("UNLOCK", key)
            self.assertErr(rep, "BACKEND")
            time.sleep(1.5)
            self.assertTrue(lease_keys(rc, key), "released while Redis is read-only?")
            self.assertGreaterEqual(int(a.info()["backend_deferred_releases"]), 1)
        finally:
            rc2 = self.redis_conn(r)
            rc2.cmd("REPLICAOF", "NO", "ONE")
        wait_until(lambda: not lease_keys(self.redis_conn(r), key), 5, 0.05,
                   "the release to reach Redis")
        self.assertEqual(a.info()["backend_deferred_releases"], "0")
        self.assertIn("READONLY", a.log())

    def test_sigterm_waits_for_kept_releases(self):
        # Redis unreachable when the daemon is told to stop: the releases of
        # its sessions are kept; it waits (at most 5 s) for Redis to come
        # back and sends them before it exits
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf=FAST)
        key = unique_key()
        h = self.conn(a)
        self.assertGranted(h.cmd("LOCK", key, "TTL", 60000))
        rc = self.redis_conn(r)
        self.assertTrue(lease_keys(rc, key))
        r.pause()
        try:
            time.sleep(0.5)   # past command_timeout_ms: the connection drops
            a.proc.send_signal(signal.SIGTERM)
            time.sleep(1.0)
            self.assertTrue(a.running(), "exited without sending its releases")
        finally:
            r.resume()
        rc_ = a.stop(timeout=10)
        self.assertEqual(rc_, 0, a.log())
        self.assertFalse(lease_keys(self.redis_conn(r), key),
                         "the lease was left in Redis:\n%s" % a.log())


class TestOutageLog(RedisCase):

    def test_outage_logs_one_line_per_change(self):
        # 40 locks held while Redis is stopped past their leases: a line when
        # renewals start failing, one summary of the losses, a line when
        # Redis is back; not one line per lock per failed renewal
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf=FAST)
        h = self.conn(a)
        keys = [unique_key() for _ in range(40)]
        for k in keys:
            self.assertGranted(h.cmd("LOCK", k, "TTL", 900))
        r.pause()
        try:
            time.sleep(2.0)
        finally:
            r.resume()
        wait_until(lambda: a.info()["backend_connected"] == "1", 10, 0.05, "reconnect")
        log = open(a.logfile, errors="replace").read()
        lines = [ln for ln in log.splitlines() if " warn " in ln or " error " in ln]
        report("%d warn/error lines for 40 locks lost in an outage:\n      %s"
               % (len(lines), "\n      ".join(lines)))
        self.assertLessEqual(len(lines), 6, "\n".join(lines))
        self.assertEqual(sum("renewals are failing" in ln for ln in lines), 1, log)
        # the first loss has a line, the others of the next second one more
        lost = 0
        for ln in lines:
            m = re.search(r" (\d+) more locks? lost within \d+ ms", ln)
            if m:
                lost += int(m.group(1))
            elif " lock lost: key " in ln:
                lost += 1
        self.assertEqual(lost, 40, log)
        self.assertEqual(int(a.info()["lost_total"]), 40)


class TestDetachedLimit(DaemonTestCase):
    CONFIG = "limits:\n  max_locks_per_session: 5\n"

    def test_detached_locks_count_toward_the_limit(self):
        c = self.raw()
        keys = [unique_key() for _ in range(6)]
        tokens = []
        for k in keys[:5]:
            tokens.append(c.cmd("LOCK", k, "TTL", 60000, "DETACH")[0])
        rep = c.cmd("LOCK", keys[5], "TTL", 60000, "DETACH")
        self.assertIsInstance(rep, Err)
        self.assertEqual(rep.code, "LIMIT")
        self.assertEqual(c.cmd("UNLOCK", keys[0], tokens[0]), 0)
        self.assertIsInstance(c.cmd("LOCK", keys[5], "TTL", 60000, "DETACH"), list)
        for k, t in zip(keys[1:], tokens[1:]):
            self.assertEqual(c.cmd("UNLOCK", k, t), 0)


class TestIdleTimeout(DaemonTestCase):
    CONFIG = "sessions:\n  idle_timeout_ms: 600\n"

    def test_idle_session_closed_and_released(self):
        idle, busy = self.raw(), self.raw()
        k1, k2 = unique_key(), unique_key()
        self.assertIsInstance(idle.cmd("LOCK", k1), list)
        self.assertIsInstance(busy.cmd("LOCK", k2), list)
        t0 = time.monotonic()
        # PING keeps a session alive
        while time.monotonic() < t0 + 1.5:
            self.assertEqual(busy.cmd("PING"), "PONG")
            time.sleep(0.2)
        self.assertTrue(idle.is_closed(2.0))
        self.assertEqual(self.status(k1)["mode"], b"free")
        self.assertEqual(self.status(k2)["holders"], 1)
        self.assertGreaterEqual(int(self.info()["idle_timeouts_total"]), 1)
        self.assertEqual(self.info()["session_idle_timeout_ms"], "600")

    def test_waiting_is_not_idle(self):
        h, w = self.raw(), self.raw()
        key = unique_key()
        token = h.cmd("LOCK", key, "TTL", 60000, "DETACH")[0]
        w.settimeout(10)
        w.send(Raw.encode("LOCK", key, "WAIT", 1500))
        self.assertIs(w.read(), NULL)   # waited 1.5 s without being closed
        self.assertEqual(w.cmd("PING"), "PONG")
        self.assertEqual(w.cmd("UNLOCK", key, token), 0)


class TestLogEscapes(unittest.TestCase):

    def test_keys_escaped_in_the_log(self):
        d = Daemon("", extra_args=["-d", "debug"]).start()
        self.addCleanup(d.stop_checked)
        c = d.raw()
        key = "k\r\nFORGED error line"
        self.assertIsInstance(c.cmd("LOCK", key, "TTL", 50, "DETACH"), list)
        wait_until(lambda: "reached its TTL" in d.log(), 5, 0.02, "the expiry line")
        log = open(d.logfile, errors="replace").read()
        self.assertIn("'k\\x0d\\x0aFORGED error line'", log)
        self.assertFalse(any(ln.startswith("FORGED") for ln in log.splitlines()), log)
        c.close()


KEEPALIVE_CLIENT = r"""
import os, signal, socket, subprocess, sys, time
addr, port, key, state = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode(), sys.argv[4]
def vanish(sig, frame):
    # this host's only link goes down: no FIN, no RST, no answer to probes
    subprocess.run(["ip", "link", "set", "vb", "down"], check=True)
    open(state + ".gone", "w").close()
signal.signal(signal.SIGUSR1, vanish)
for attempt in range(500):     # until the daemon listens
    try:
        s = socket.create_connection((addr, port), 5)
        break
    except OSError:
        time.sleep(0.02)
s.sendall(b"*2\r\n$4\r\nLOCK\r\n$%d\r\n%s\r\n" % (len(key), key))
if s.recv(100)[:2] == b"*3":
    with open(state + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(state + ".tmp", state)
while True:
    time.sleep(1)
"""

# Inside a user and network namespace of its own (no privilege needed): a
# veth pair whose far end is in a second network namespace, the client's
# host; then the daemon, listening on the near end and on a Unix socket.
KEEPALIVE_NET = r"""
set -e
ip link set lo up
ip link add va type veth peer name vb
ip addr add 10.213.0.1/30 dev va
ip link set va up
unshare -n sh -c '
    while ! ip link show vb >/dev/null 2>&1; do sleep 0.01; done
    ip link set lo up
    ip addr add 10.213.0.2/30 dev vb
    ip link set vb up
    exec "$@"' client "$PYTHON" -c "$CLIENT" 10.213.0.1 "$PORT" "$KEY" "$STATE" &
client=$!
# move vb once the client has its own namespace (unshare may not have run yet)
while [ "$(readlink /proc/$client/ns/net)" = "$(readlink /proc/$$/ns/net)" ]; do
    sleep 0.01
done
ip link set vb netns $client
exec "$@"
"""


class TestKeepalive(unittest.TestCase):
    """A client host that vanishes without a reset: its session is closed by
    TCP keepalive and its locks are released. The client runs in a network
    namespace of the test's own, behind a veth pair whose far end is then
    taken down, so nothing answers the daemon's probes."""

    def test_vanished_client_host_releases_its_locks(self):
        if shutil.which("unshare") is None or shutil.which("ip") is None:
            raise AssertionError("unshare (util-linux) and ip (iproute2) are needed")
        d = new_dir("keepalive")
        conf = os.path.join(d, "dlockd.yaml")
        sock = os.path.join(d, "dlockd.sock")
        state = os.path.join(d, "client")
        with open(conf, "w") as f:
            # a private network namespace is the boundary: no password needed
            f.write("sessions:\n  tcp_keepalive_s: 1\n  tcp_keepalive_interval_s: 1\n"
                    "  tcp_keepalive_probes: 2\nprotected_mode: false\n")
        key = unique_key()
        env = dict(os.environ, PYTHON=PYTHON, CLIENT=KEEPALIVE_CLIENT, PORT="7480",
                   KEY=key, STATE=state)
        with open(os.path.join(d, "dlockd.log"), "wb") as log:
            p = spawn(["unshare", "--user", "--map-root-user", "--net", "sh", "-c",
                       KEEPALIVE_NET, "net"] + WRAPPER +
                      [DLOCKD, "-c", conf, "-l", "10.213.0.1:7480", "-l", "unix:" + sock],
                      env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)

        def stop():
            if os.path.exists(state):
                kill_pid(int(open(state).read()))
            p.terminate()
            reap(p)

        self.addCleanup(stop)

        def logged():
            return open(os.path.join(d, "dlockd.log"), errors="replace").read()

        try:
            wait_until(lambda: os.path.exists(state) or p.poll() is not None, 20, 0.02,
                       "the client in its namespace to be granted the lock")
        except AssertionError:
            raise AssertionError("no grant; daemon log:\n" + logged())
        self.assertIsNone(p.poll(), "the namespace or the daemon failed:\n" + logged())
        client = int(open(state).read())
        track_pid(client)
        st = Raw(unix=sock)
        self.addCleanup(st.close)
        self.assertEqual(pairs(st.cmd("STATUS", key))["holders"], 1)
        t0 = time.monotonic()
        os.kill(client, signal.SIGUSR1)
        wait_until(lambda: os.path.exists(state + ".gone"), 5, 0.01, "the link to go down")

        def released():
            return pairs(st.cmd("STATUS", key))["holders"] == 0

        wait_until(released, 15 * SLOWDOWN, 0.1, "the vanished client's lock to be released")
        took = time.monotonic() - t0
        report("a vanished client's lock released %.1f s after its host went away "
               "(keepalive 1 s + 2 probes 1 s apart)" % took)
        self.assertLess(took, 8 * SLOWDOWN)
        self.assertGreater(took, 1.5, "released before keepalive could have told")


if __name__ == "__main__":
    unittest.main()
