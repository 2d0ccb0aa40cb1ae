"""The redis backend on Redis Sentinel: a master, a replica and three
sentinels (sentinel.SentinelSetup), daemons given the sentinels by
-b redis-sentinel://... or by backend.sentinels and backend.master_name.

Locks through the sentinels' master; the master SIGKILLed (the daemons
follow the failover, fences go on increasing); a lock held across a failover
(still held, or its holder told before another daemon can take the key),
with its lease on the replica and without; the master stopped past
down-after and resumed as a stale master (not used again); a sentinel
killed. TestSentinelFixture checks the fixture itself with redis-py and raw
connections alone.

Run alone: BUILD=build sh tests/integration/run.sh -k test_redis_sentinel
"""

import time

from dlocktest.cases import RedisTestCase, report
from dlocktest.env import SLOWDOWN, unique_key
from dlocktest.proc import in_thread, wait_until
from dlocktest.redis_server import process_tcp_ports
from dlocktest.resp import NULL, Closed, Err, Push, Raw, read_within
from dlocktest.sentinel import DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS, SentinelDaemon, SentinelSetup

# backend timeouts of daemons that must notice a dead master quickly
FAST = {"connect_timeout_ms": 300, "command_timeout_ms": 300}
# s from the master's SIGKILL (or SIGSTOP) to a LOCK granted on the new master
FAILOVER_BOUND = (DOWN_AFTER_MS + FAILOVER_TIMEOUT_MS) / 1000 + 1.0
# s for the sentinels to have promoted the replica (the fixture's own bound)
SENTINEL_BOUND = (DOWN_AFTER_MS + FAILOVER_TIMEOUT_MS) / 1000
TTL = 10000  # ms: the lease of the locks held across a failover
CLIENT_TIMEOUT = 1.0  # s a poller waits for a reply before it gives up on a connection
POLL = 0.02  # s between tries of the pollers
REPLY_BOUND = 5.0 * SLOWDOWN  # s a LOCK ... WAIT 0 may take, even with the master gone
RECONNECT_BOUND = 5.0  # s for LOCK to work again after the daemons' connections were killed


def lease_key(key):
    """The Redis key of an exclusive lease of key (default key_prefix)."""
    return "dlock:l:" + key


class SentinelCase(RedisTestCase):
    """Tests with their own SentinelSetup and daemons on it; what a test
    starts is stopped after it, daemons first."""

    def start_sentinels(self, **kw):
        s = SentinelSetup(**kw).start()
        self.addCleanup(s.stop_checked)
        return s

    def start_sentinel_daemon(self, setup, config="", **kw):
        d = SentinelDaemon(setup, config, **kw)
        self.addCleanup(d.stop_checked)
        return d.start()

    def backend_master(self, daemon):
        return daemon.info().get("backend_master")

    def lock_until_granted(self, daemon, key, since, limit, *opts):
        """LOCK key WAIT 0 on daemon every POLL s, each on a connection
        that waits CLIENT_TIMEOUT s for the reply (a new one after a
        timeout), until one is granted; fails after limit s from since.
        Returns (when granted, the grant, the connection that holds it);
        NULL and -BACKEND are retried."""
        c = None
        try:
            while True:
                if c is None:
                    c = daemon.raw(timeout=CLIENT_TIMEOUT)
                try:
                    r = c.cmd("LOCK", key, "WAIT", 0, *opts)
                except OSError:
                    c.close()  # a timeout: the reply may come later, not to us
                    c = None
                    r = None
                now = time.monotonic()
                if isinstance(r, list):
                    self.assertGranted(r)
                    self._conns.append(c)  # closed after the test
                    c.settimeout(REPLY_BOUND)
                    held, c = c, None
                    return now, r, held
                if isinstance(r, Err):
                    self.assertEqual(r.code, "BACKEND", r)
                elif r is not None:
                    self.assertIs(r, NULL)
                if now - since > limit:
                    self.fail("LOCK %s not granted within %.1f s; daemon log:\n%s"
                              % (key, limit, daemon.log()))
                time.sleep(POLL)
        finally:
            if c is not None:
                c.close()

    def failover_thread(self, setup):
        """A thread that waits for the sentinels' failover away from the
        current master (start it before the fault); .result() is the new
        master's port, .done_at when it was seen."""
        return in_thread(setup.wait_failover, 3 * SENTINEL_BOUND + 5, setup.master_port())


class Holding:
    """A lock held on daemon A by conn (RESP3 with lost pushes, or RESP2),
    and the connection on daemon B that tries to take the same key."""

    def __init__(self, key, conn, resp3, grant, bconn):
        self.key = key
        self.conn = conn
        self.resp3 = resp3
        self.fence = grant[1]
        self.bconn = bconn
        self.told_at = None      # when A's holder was told (push or -LOST)
        self.told_how = None
        self.b_grant = None      # B's grant
        self.b_at = None         # when it arrived
        self.b_answers = {}      # what B's tries were answered: kind -> count

    def name(self):
        return "%s (%s holder, fence %d)" % (self.key, "RESP3" if self.resp3 else "RESP2",
                                             self.fence)


class TestSentinelFixture(RedisTestCase):
    """sentinel.SentinelSetup by itself: roles, replication, a failover
    after SIGKILL, passwords, a sentinel killed."""

    def test_failover_after_kill(self):
        s = SentinelSetup()
        self.addCleanup(s.stop_checked)
        t0 = time.monotonic()
        s.start()
        report("sentinel set-up ready in %.2f s" % (time.monotonic() - t0))
        m, r = s.master(), s.replica()
        self.assertIs(m, s.nodes[0])
        self.assertIs(r, s.nodes[1])
        self.assertEqual(m.role(), "master")
        self.assertEqual(r.role(), "slave")
        self.assertEqual(len(s.sentinel_addrs()), 3)
        self.assertEqual(s.url(), "redis-sentinel://%s/mymaster" % ",".join(s.sentinel_addrs()))
        self.assertEqual(s.url(db=2, password="pw", user="u"),
                         "redis-sentinel://u:pw@%s/mymaster/2" % ",".join(s.sentinel_addrs()))
        for sen in s.sentinels:
            self.assertEqual(sen.master_addr(), ("127.0.0.1", m.port))
            self.assertEqual(len(sen.sentinels()), 2)
        self.assertEqual(m.cmd("SET", "k", "v"), "OK")
        wait_until(lambda: r.cmd("GET", "k") == b"v", 5, 0.01, "the write on the replica")
        self.assertErr(r.cmd("SET", "k2", "v"), "READONLY")
        old, t_kill = s.kill_master()
        self.assertIs(old, m)
        self.assertFalse(m.running())
        port = s.wait_failover(3 * SENTINEL_BOUND)
        took = time.monotonic() - t_kill
        report("failover after SIGKILL of the master: %.2f s (down-after %d ms, "
               "failover-timeout %d ms)" % (took, DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS))
        self.assertEqual(port, r.port)
        self.assertLess(took, SENTINEL_BOUND)
        self.assertIs(s.master(), r)
        self.assertEqual(r.role(), "master")
        self.assertEqual(r.cmd("SET", "k3", "v"), "OK")
        self.assertEqual(r.cmd("GET", "k"), b"v")
        self.assertIsNone(s.replica())  # the old master is down

    def test_passwords_and_a_sentinel_killed(self):
        s = SentinelSetup(password="m-secret", sentinel_password="s-secret")
        self.addCleanup(s.stop_checked)
        s.start()
        self.assertTrue(s.url().startswith("redis-sentinel://:m-secret@127.0.0.1:"))
        self.assertIn('sentinel_password: "s-secret"', s.yaml())
        self.assertIn('password: "m-secret"', s.yaml())
        self.assertIn('sentinels: ["127.0.0.1:', s.yaml())
        # the sentinels and the nodes ask for their passwords
        c = Raw(port=s.sentinels[0].port)
        self.addCleanup(c.close)
        self.assertErr(c.cmd("SENTINEL", "get-master-addr-by-name", "mymaster"), "NOAUTH")
        c2 = Raw(port=s.master().port)
        self.addCleanup(c2.close)
        self.assertErr(c2.cmd("GET", "k"), "NOAUTH")
        s.kill_sentinel(0)
        self.assertEqual(s.sentinel_addrs(live_only=True), s.sentinel_addrs()[1:])
        replica = s.replica()
        old, t_kill = s.kill_master()
        port = s.wait_failover(3 * SENTINEL_BOUND)
        report("failover with two sentinels of three: %.2f s" % (time.monotonic() - t_kill))
        self.assertEqual(port, replica.port)
        self.assertEqual(replica.role(), "master")
        # back to three sentinels, and the old master a replica of the new
        s.restart_sentinel(0)
        self.assertIs(s.rejoin(old), old)
        self.assertIs(s.replica(), old)
        self.assertEqual(old.role(), "slave")
        for sen in s.sentinels:
            self.assertEqual(sen.master_addr(), ("127.0.0.1", replica.port))

    def test_stopped_master_demoted(self):
        # a master SIGSTOPped past down-after is replaced while it is
        # stopped; resumed, it still says it is the master for a while (the
        # window in which a client that asks it alone is fooled), then the
        # sentinels make it a replica of the new master
        s = SentinelSetup()
        self.addCleanup(s.stop_checked)
        s.start()
        m, r = s.master(), s.replica()
        m.pause()
        t_stop = time.monotonic()
        try:
            port = s.wait_failover(3 * SENTINEL_BOUND, old=m.port)
            t_failover = time.monotonic()
        finally:
            m.resume()
        t_cont = time.monotonic()
        self.assertEqual(port, r.port)
        self.assertEqual(m.role(), "master", "the stale master is a master until told")
        wait_until(lambda: m.role() == "slave", 30, 0.05, "the stale master to be demoted")
        report("stopped master replaced %.2f s after SIGSTOP; demoted %.2f s after SIGCONT"
               % (t_failover - t_stop, time.monotonic() - t_cont))
        self.assertErr(m.cmd("SET", "k", "v"), "READONLY")
        wait_until(lambda: s.replica() is m, 10, 0.05, "the sentinels to list it a replica")


class TestSentinelBackend(SentinelCase):
    """dlockd on the sentinels: every test has its own set-up."""

    # ---- locks through the sentinels ----

    def assertOnMaster(self, setup, daemon, key, db=0):
        """INFO names the sentinels' master, and key's lease is in it (db
        db) and reaches the replica."""
        m = setup.master()
        info = daemon.info()
        self.assertEqual(info.get("backend_connected"), "1")
        self.assertEqual(info.get("backend_master"), m.address(), "INFO: %s" % info)
        self.assertEqual(info.get("backend_sentinels"), str(len(setup.sentinels)))
        c = m.raw()
        self.addCleanup(c.close)
        if db:
            self.assertEqual(c.cmd("SELECT", db), "OK")
        self.assertEqual(c.cmd("EXISTS", lease_key(key)), 1,
                         "the lease of %s is not in the master's db %d" % (key, db))
        r = setup.replica().raw()
        self.addCleanup(r.close)
        if db:
            self.assertEqual(r.cmd("SELECT", db), "OK")
        wait_until(lambda: r.cmd("EXISTS", lease_key(key)) == 1, 5, 0.01,
                   "the lease of %s on the replica" % key)

    def test_locks_through_url(self):
        s = self.start_sentinels()
        a = self.start_sentinel_daemon(s)
        b = self.start_sentinel_daemon(s, url=s.url(db=2))
        key = unique_key()
        ca = self.conn(a)
        g = self.assertGranted(ca.cmd("LOCK", key))
        self.assertGreater(g[1], 10 ** 15, "a fence from Redis's clock")
        self.assertOnMaster(s, a, key)
        self.assertEqual(self.status(a, key)["backend"], b"connected")
        self.assertIs(self.conn(a).cmd("LOCK", key, "WAIT", 0), NULL)
        # db 2 is another name space: the same key is free there
        cb = self.conn(b)
        gb = self.assertGranted(cb.cmd("LOCK", key, "WAIT", 0))
        self.assertOnMaster(s, b, key, db=2)
        self.assertEqual(ca.cmd("UNLOCK", key), 0)
        self.assertEqual(cb.cmd("UNLOCK", key), 0)
        g2 = self.assertGranted(self.conn(a).cmd("LOCK", key))
        self.assertGreater(g2[1], max(g[1], gb[1]))

    def test_locks_through_yaml_with_passwords(self):
        # backend.sentinels as a list (A) and as one comma-separated string
        # (B), backend.master_name; the master's password and the
        # sentinels' own; a third daemon with -b URL (the master's password
        # in it) and backend.sentinel_password in its file
        s = self.start_sentinels(password="m-secret", sentinel_password="s-secret")
        a = self.start_sentinel_daemon(s, yaml=True, backend_conf=FAST)
        b = self.start_sentinel_daemon(s, yaml=True, backend_conf=dict(
            FAST, sentinels=",".join(s.sentinel_addrs())))
        # who holds a key, seen from the other daemon through the master
        self.assertFleetStatus(a, b)
        c = self.start_sentinel_daemon(s, backend_conf={"sentinel_password": "s-secret"})
        self.assertIn("sentinels: \"%s\"" % ",".join(s.sentinel_addrs()), b.config_text())
        key = unique_key()
        fences = []
        for d in (a, b, c, a):
            conn = self.conn(d)
            g = self.assertGranted(conn.cmd("LOCK", key, "WAIT", 0))
            fences.append(g[1])
            self.assertOnMaster(s, d, key)
            for other in (a, b, c):
                self.assertIs(self.conn(other).cmd("LOCK", key, "WAIT", 0), NULL,
                              "granted on %s while %s holds it" % (other.addr(), d.addr()))
            self.assertEqual(conn.cmd("UNLOCK", key), 0)
        self.assertEqual(fences, sorted(set(fences)))

    def test_sentinels_refusing_the_password_answer_at_once(self):
        # every sentinel refuses backend.sentinel_password: waiting cannot
        # help, so a LOCK with a long WAIT is answered -BACKEND at once,
        # naming the refusal, as a refused master password is
        s = self.start_sentinels(sentinel_password="s-secret")
        d = SentinelDaemon(s, backend_conf={"sentinel_password": "wrong"})
        self.addCleanup(d.stop_checked)
        d.start(wait_backend=False)
        c = self.conn(d)
        # once every sentinel was asked (WAIT 0 answers at once anyway)
        wait_until(lambda: "every sentinel refuses" in str(c.cmd("LOCK", unique_key(), "WAIT", 0)),
                   5, 0.05, "the sentinels' refusal")
        t = time.monotonic()
        r = c.cmd("LOCK", unique_key(), "WAIT", 5000)
        took = time.monotonic() - t
        self.assertIsInstance(r, Err, r)
        self.assertEqual(r.code, "BACKEND", r)
        self.assertLess(took, 1.0 * SLOWDOWN, "a refused setting is answered at once")
        self.assertIn("every sentinel refuses the daemon's settings", str(r))
        report("sentinels refusing the password: -BACKEND after %.0f ms: %s"
               % (1000 * took, r))

    # ---- the master killed ----

    def test_master_killed(self):
        # SIGKILL of the master: LOCK works again within down-after +
        # failover-timeout + 1 s of the kill, on the promoted replica, and
        # every fence after the failover is above every fence before it
        s = self.start_sentinels()
        a = self.start_sentinel_daemon(s, backend_conf=FAST)
        b = self.start_sentinel_daemon(s, backend_conf=FAST)
        key = unique_key()
        before = []
        for d in (a, b) * 5:
            c = self.conn(d)
            before.append(self.assertGranted(c.cmd("LOCK", key, "WAIT", 0))[1])
            self.assertEqual(c.cmd("UNLOCK", key), 0)
            c.close()
        others = [self.assertGranted(self.conn(a).cmd("LOCK", unique_key()))[1]
                  for _ in range(3)]
        replica = s.replica()
        fo = self.failover_thread(s)
        old, t_kill = s.kill_master()
        t_a, g_a, held = self.lock_until_granted(a, key, t_kill, FAILOVER_BOUND + 5)
        self.assertEqual(held.cmd("UNLOCK", key), 0)
        port = fo.result(3 * SENTINEL_BOUND + 5)
        t_sentinels = fo.done_at
        t_b, g_b, _ = self.lock_until_granted(b, unique_key(), t_kill, FAILOVER_BOUND + 5)
        report("master killed: sentinels named the new master after %.2f s; LOCK granted "
               "on A after %.2f s, on B after %.2f s (bound %.1f s)"
               % (t_sentinels - t_kill, t_a - t_kill, t_b - t_kill, FAILOVER_BOUND))
        self.assertEqual(port, replica.port)
        self.assertLess(t_a - t_kill, FAILOVER_BOUND, "A: LOCK works again only %.2f s after "
                        "the kill; log:\n%s" % (t_a - t_kill, a.log()))
        self.assertLess(t_b - t_kill, FAILOVER_BOUND, "B: LOCK works again only %.2f s after "
                        "the kill; log:\n%s" % (t_b - t_kill, b.log()))
        for d in (a, b):
            wait_until(lambda: self.backend_master(d) == replica.address(), 2, 0.02,
                       "INFO backend_master on %s to name the new master" % d.addr())
        # the fences after: on the same key, from both daemons, on new keys
        after = [g_a[1], g_b[1]]
        holder = None
        for c in (self.conn(a), self.conn(b)):
            if holder is not None:
                self.assertEqual(holder.cmd("UNLOCK", key), 0)
            g = self.assertGranted(c.cmd("LOCK", key, "WAIT", 5000))
            after.append(g[1])
            holder = c
        self.assertEqual(holder.cmd("UNLOCK", key), 0)
        after.append(self.assertGranted(self.conn(b).cmd("LOCK", unique_key()))[1])
        self.assertGreater(min(after), max(before + others),
                           "fences before the failover %s, after it %s"
                           % (before + others, after))
        self.assertEqual(len(set(before + others + after)), len(before + others + after))
        self.assertTrue(a.running() and b.running())

    # ---- a lock held across a failover ----

    def held_across_failover(self, lose_on_replica):
        """Locks held on daemon A by a RESP3 session (lost pushes on) and by
        a RESP2 one, their leases on the replica or (lose_on_replica)
        deleted from it just before the master is SIGKILLed, as if the
        acquire had not been replicated. Daemon B tries to take both keys
        (LOCK WAIT 0) all along, during and after the failover.

        What must hold: B is granted a key only once A's holder has been
        told: the RESP3 holder's lost push is already on its socket when B's
        grant arrives, and the RESP2 holder's next command after B's grant
        is answered -LOST (had it still believed it held the key, it was not
        told). A holder never told still holds its key when the failover is
        long over (STATUS shows it, UNLOCK answers 0). Fences of the key
        after the failover are above the holder's."""
        s = self.start_sentinels()
        a = self.start_sentinel_daemon(s, backend_conf=FAST)
        b = self.start_sentinel_daemon(s, backend_conf=FAST)
        replica = s.replica()
        rep = replica.raw()
        self.addCleanup(rep.close)
        holdings = []
        for resp3 in (True, False):
            key = unique_key("r3" if resp3 else "r2")
            h = self.conn(a)
            if resp3:
                self.hello3(h)
            g = self.assertGranted(h.cmd("LOCK", key, "TTL", TTL))
            wait_until(lambda: rep.cmd("EXISTS", lease_key(key)) == 1, 5, 0.005,
                       "the lease of %s on the replica" % key)
            bconn = self.conn(b)
            bconn.settimeout(REPLY_BOUND)
            holdings.append(Holding(key, h, resp3, g, bconn))
        for hd in holdings:
            self.assertIs(hd.bconn.cmd("LOCK", hd.key, "WAIT", 0), NULL)
        if lose_on_replica:
            self.assertEqual(rep.cmd("CONFIG", "SET", "replica-read-only", "no"), "OK")
            for hd in holdings:
                names = rep.cmd("KEYS", "*:" + hd.key)
                self.assertTrue(names, "no key of %s on the replica" % hd.key)
                self.assertEqual(rep.cmd("DEL", *names), len(names))
        fo = self.failover_thread(s)
        old, t_kill = s.kill_master()

        def told(hd, how):
            if hd.told_at is None:
                hd.told_at, hd.told_how = time.monotonic(), how

        def drain(hd):
            """Whatever A's holder has been sent so far (RESP3: pushes)."""
            while True:
                p = read_within(hd.conn, 0)
                if p is None:
                    return
                self.assertIsInstance(p, Push, "%s: A's holder was sent %r" % (hd.name(), p))
                self.assertEqual(list(p[:3]), [b"lost", hd.key.encode(), hd.fence], p)
                told(hd, "push")

        def ask_resp2(hd):
            """A command of A's RESP2 holder: PONG, or -LOST once."""
            r = hd.conn.cmd("PING")
            if isinstance(r, Err):
                self.assertEqual(r.split(" ")[:3], ["LOST", hd.key, str(hd.fence)], r)
                self.assertIsNone(hd.told_at, "%s: told twice" % hd.name())
                told(hd, "-LOST")
            else:
                self.assertEqual(r, "PONG")

        def try_b(hd):
            try:
                r = hd.bconn.cmd("LOCK", hd.key, "WAIT", 0)
            except OSError as e:
                self.fail("%s: B's LOCK WAIT 0 not answered within %.0f s (%s); B's log:\n%s"
                          % (hd.name(), REPLY_BOUND, e, b.log()))
            now = time.monotonic()
            if r is NULL:
                hd.b_answers["null"] = hd.b_answers.get("null", 0) + 1
                return
            if isinstance(r, Err):
                self.assertEqual(r.code, "BACKEND", r)
                hd.b_answers["backend"] = hd.b_answers.get("backend", 0) + 1
                return
            self.assertGranted(r)
            # B holds the key from now on: A's holder must have been told
            if hd.told_at is None:
                if hd.resp3:
                    drain(hd)
                else:
                    ask_resp2(hd)
            if hd.told_at is None:
                self.fail("%s granted on B %.3f s after the kill while A's holder had "
                          "not been told (%s); A's log:\n%s\nB's log:\n%s"
                          % (hd.name(), now - t_kill,
                             "no lost push on its socket" if hd.resp3
                             else "its next command was answered normally",
                             a.log(), b.log()))
            self.assertGreater(r[1], hd.fence)
            hd.b_grant, hd.b_at = r, now

        # until every key went to B, or the failover has been over for
        # longer than the lease (whatever a lost lease leads to has come)
        deadline = t_kill + 3 * SENTINEL_BOUND + TTL / 1000 + 10
        while time.monotonic() < deadline:
            for hd in holdings:
                if hd.b_grant is not None:
                    continue
                if hd.resp3:
                    drain(hd)
                elif hd.told_at is None:
                    ask_resp2(hd)
                try_b(hd)
            if all(hd.b_grant is not None for hd in holdings):
                break
            if fo.done.is_set() and time.monotonic() > fo.done_at + TTL / 1000 + 2:
                break
            time.sleep(POLL)
        port = fo.result(0)
        self.assertEqual(port, replica.port)
        for d in (a, b):
            self.assertEqual(self.backend_master(d), replica.address(),
                             "%s: INFO does not name the new master" % d.addr())
        outcomes = []
        for hd in holdings:
            if hd.b_grant is not None:
                outcome = "told (%s) %.2f s after the kill, granted on B %.2f s after it" % (
                    hd.told_how, hd.told_at - t_kill, hd.b_at - t_kill)
            elif hd.told_at is not None:
                outcome = "told (%s) %.2f s after the kill, B not granted within %.0f s" % (
                    hd.told_how, hd.told_at - t_kill, time.monotonic() - t_kill)
            else:
                # never told: still the holder (and B never had the key)
                st = self.status(a, hd.key)
                r = hd.conn.cmd("UNLOCK", hd.key)
                if hd.resp3 and isinstance(r, Push):
                    self.assertEqual(list(r[:3]), [b"lost", hd.key.encode(), hd.fence], r)
                    told(hd, "push")
                    r = hd.conn.read()
                if isinstance(r, Err):
                    # told only now: still nobody else had the key
                    self.assertEqual(r.code, "LOST", r)
                    told(hd, "-LOST at UNLOCK")
                    outcome = "told (%s) %.2f s after the kill" % (hd.told_how,
                                                                   hd.told_at - t_kill)
                else:
                    self.assertEqual(r, 0, "%s: UNLOCK of a lock still held" % hd.name())
                    self.assertEqual((st["holders"], st["fence"]), (1, hd.fence),
                                     "%s: still held, but STATUS on A showed %s"
                                     % (hd.name(), st))
                    outcome = "still held %.2f s after the kill" % (
                        time.monotonic() - t_kill)
            if hd.b_grant is None:
                if hd.told_how == "push":
                    # a session told by a push is told again by -LOST
                    self.assertErr(hd.conn.cmd("PING"), "LOST")
                hd.bconn.settimeout(TTL / 1000 + 10)
                g = self.assertGranted(hd.bconn.cmd("LOCK", hd.key, "WAIT", TTL + 5000))
                self.assertGreater(g[1], hd.fence)
            outcomes.append("%s: %s; B's tries: %s" % (hd.name(), outcome, hd.b_answers))
        report("lease %s the replica; failover %.2f s after the kill:\n    %s"
               % ("deleted from" if lose_on_replica else "on", fo.done_at - t_kill,
                  "\n    ".join(outcomes)))

    def test_lock_held_across_failover(self):
        self.held_across_failover(lose_on_replica=False)

    def test_lock_held_across_failover_lease_not_replicated(self):
        self.held_across_failover(lose_on_replica=True)

    # ---- a stale master ----

    def test_stale_master_not_used(self):
        # the master SIGSTOPped past down-after: the replica is promoted
        # while it is stopped; resumed, the old master still says it is a
        # master until the sentinels demote it (some 10 s). All the while
        # the daemons must use the new master only: every lock granted after
        # the failover has its lease there and none on the stale master,
        # INFO names the new one, and a key held through one daemon is
        # refused on the other
        s = self.start_sentinels()
        a = self.start_sentinel_daemon(s, backend_conf=FAST)
        b = self.start_sentinel_daemon(s, backend_conf=FAST)
        old, new = s.master(), s.replica()
        fo = self.failover_thread(s)
        old.pause()
        t_stop = time.monotonic()
        try:
            t_a, _, _ = self.lock_until_granted(a, unique_key(), t_stop, FAILOVER_BOUND + 5)
            t_b, _, _ = self.lock_until_granted(b, unique_key(), t_stop, FAILOVER_BOUND + 5)
            port = fo.result(3 * SENTINEL_BOUND)
        finally:
            old.resume()
        t_cont = time.monotonic()
        self.assertEqual(port, new.port)
        report("master stopped: LOCK granted on A %.2f s, on B %.2f s after SIGSTOP "
               "(sentinels %.2f s)" % (t_a - t_stop, t_b - t_stop, fo.done_at - t_stop))
        for d, t in ((a, t_a), (b, t_b)):
            self.assertLess(t - t_stop, FAILOVER_BOUND, "%s: LOCK works again only %.2f s "
                            "after SIGSTOP; log:\n%s" % (d.addr(), t - t_stop, d.log()))
        self.assertEqual(old.role(), "master", "the stale master was demoted at once")
        nc, oc = new.raw(), old.raw()
        self.addCleanup(nc.close)
        self.addCleanup(oc.close)
        rounds = kills = 0
        demoted_at = None
        while demoted_at is None or time.monotonic() < demoted_at + 1.0:
            if demoted_at is None and old.role() == "slave":
                demoted_at = time.monotonic()
            self.assertLess(time.monotonic() - t_cont, 40, "the stale master was never "
                            "demoted")
            if rounds % 4 == 3:
                # the daemons' connections to the new master closed: they
                # must ask the sentinels again, not the stale master
                nc.cmd("CLIENT", "KILL", "TYPE", "normal")
                nc.cmd("CLIENT", "KILL", "TYPE", "pubsub")
                kills += 1
            first, second = (a, b) if rounds % 2 == 0 else (b, a)
            key = unique_key("stale")
            _, g, c = self.lock_until_granted(first, key, time.monotonic(), RECONNECT_BOUND)
            self.assertEqual(nc.cmd("EXISTS", lease_key(key)), 1,
                             "%s: a lease granted after the failover is not on the new "
                             "master" % first.addr())
            if demoted_at is None and oc is not None:
                try:
                    stale = oc.cmd("EXISTS", lease_key(key))
                except Closed:
                    # the server closes its clients as it turns replica
                    # (Valkey): demoted, and its data is the new master's
                    stale, oc = None, None
                if stale is not None:
                    self.assertEqual(stale, 0, "%s: a lease granted after the failover is "
                                     "on the stale master" % first.addr())
            o = self.conn(second)
            o.settimeout(REPLY_BOUND)

            def refused():
                r = o.cmd("LOCK", key, "WAIT", 0)
                if isinstance(r, Err) and r.code == "BACKEND":
                    return False
                self.assertIs(r, NULL, "%s granted %s, held through %s"
                              % (second.addr(), key, first.addr()))
                return True
            wait_until(refused, RECONNECT_BOUND, POLL, "%s to answer LOCK" % second.addr())
            for d in (a, b):
                self.assertEqual(self.backend_master(d), new.address(),
                                 "%s: INFO names another master" % d.addr())
            self.assertEqual(c.cmd("UNLOCK", key), 0)
            c.close()
            o.close()
            rounds += 1
            time.sleep(0.1)
        report("stale master demoted %.2f s after SIGCONT; %d rounds of locks on the new "
               "master meanwhile, the daemons' connections to it killed %d times"
               % (demoted_at - t_cont, rounds, kills))
        # and the old master, a replica now, is not written to either
        self.assertErr(old.cmd("SET", "k", "v"), "READONLY")
        key = unique_key()
        self.assertGranted(self.conn(a).cmd("LOCK", key))
        self.assertEqual(nc.cmd("EXISTS", lease_key(key)), 1)

    # ---- a promoted master with no replica ----

    def test_promoted_master_without_replica(self):
        # min_replicas_ack 1, the master killed: the promoted replica has
        # no replica of its own, so nothing it grants is acknowledged.
        # Every caller reads that, naming the master the sentinels named
        # (never the unused backend.address); the WAITs of many calls at
        # once never make the calls behind them overdue
        s = self.start_sentinels()
        conf = dict(FAST, min_replicas_ack=1, replica_ack_timeout_ms=100)
        a = self.start_sentinel_daemon(s, backend_conf=conf)
        key = unique_key()
        self.assertGranted(self.conn(a).cmd("LOCK", key, "TTL", "3000"))
        replica = s.replica()
        fo = self.failover_thread(s)
        s.kill_master()
        fo.result(3 * SENTINEL_BOUND + 5)
        unacked = "redis %s: replica without acknowledgement" % replica.address()
        wait_until(lambda: unacked in str(self.conn(a).cmd("LOCK", unique_key(), "WAIT", 0)),
                   FAILOVER_BOUND + 5, 0.05, "LOCK to read that the new master's replicas "
                   "do not acknowledge")
        reconnects = a.info().get("backend_reconnects_total")
        for _ in range(3):
            conns = [self.conn(a) for _ in range(8)]
            for c in conns:
                c.send(c.encode("LOCK", unique_key(), "TTL", "3000", "WAIT", "0"))
            for c in conns:
                c.settimeout(REPLY_BOUND)
                reply = c.read()
                self.assertErr(reply, "BACKEND")
                self.assertIn(unacked, reply)
        self.assertEqual(a.info().get("backend_reconnects_total"), reconnects,
                         "the command connection was dropped; log:\n%s" % a.log())
        log = a.log(400000)
        self.assertNotIn("overdue", log)
        self.assertNotIn("127.0.0.1:6379", log)

    # ---- a sentinel killed ----

    def sentinel_of(self, setup, daemon):
        """The sentinel on which daemon has a subscribed connection (the
        one it hears +switch-master from)."""
        ports = process_tcp_ports(daemon.pid)
        for s in setup.live_sentinels():
            text = s.cmd("CLIENT", "LIST")
            for line in (text or b"").decode().split("\n"):
                f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
                addr = f.get("addr", "")
                port = addr.rpartition(":")[2]
                subscribed = int(f.get("sub", 0)) + int(f.get("psub", 0)) > 0
                if port.isdigit() and int(port) in ports and subscribed:
                    return s
        return None

    def test_sentinel_killed(self):
        # the sentinel the daemon listens to is SIGKILLed: locks keep
        # working, the daemon listens to another one, and it follows a
        # failover made by the two left. A daemon started with the dead
        # sentinel first in its list starts all the same
        s = self.start_sentinels()
        a = self.start_sentinel_daemon(s, backend_conf=FAST)
        wait_until(lambda: self.sentinel_of(s, a) is not None, 5, 0.02,
                   "A to subscribe on a sentinel")
        dead = self.sentinel_of(s, a)
        i = s.sentinels.index(dead)
        s.kill_sentinel(i)
        t_kill = time.monotonic()
        c = self.conn(a)
        key = unique_key()
        fences = []
        while time.monotonic() < t_kill + 2.0:
            g = self.assertGranted(c.cmd("LOCK", key, "WAIT", 0),
                                   "LOCK after a sentinel was killed")
            fences.append(g[1])
            self.assertEqual(c.cmd("UNLOCK", key), 0)
            time.sleep(0.05)
        wait_until(lambda: self.sentinel_of(s, a) not in (None, dead), 10, 0.05,
                   "A to subscribe on another sentinel")
        self.assertEqual(self.backend_master(a), s.master().address())
        order = [dead.address()] + [x for x in s.sentinel_addrs() if x != dead.address()]
        b = self.start_sentinel_daemon(s, url=s.url(sentinels=order), backend_conf=FAST)
        self.assertEqual(self.backend_master(b), s.master().address())
        replica = s.replica()
        fo = self.failover_thread(s)
        old, t_master = s.kill_master()
        for d in (a, b):
            t, g, held = self.lock_until_granted(d, key, t_master, FAILOVER_BOUND + 5)
            report("%s: LOCK granted %.2f s after the master was killed, two sentinels "
                   "left" % ("A" if d is a else "B", t - t_master))
            self.assertLess(t - t_master, FAILOVER_BOUND,
                            "LOCK works again only %.2f s after the kill; log:\n%s"
                            % (t - t_master, d.log()))
            self.assertGreater(g[1], max(fences))
            fences.append(g[1])
            self.assertEqual(held.cmd("UNLOCK", key), 0)
            self.assertEqual(self.backend_master(d), replica.address())
        self.assertEqual(fo.result(5), replica.port)


if __name__ == "__main__":
    import unittest
    unittest.main()
