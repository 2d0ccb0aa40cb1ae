"""The redlock backend: quorum locks over N independent redis-servers.

Two daemons on the same three nodes exclude each other and wake each other,
with the lease in every node; nodes killed (SIGKILL) one by one (a minority
down: locks go on, STATUS "degraded"; a majority down: -BACKEND at once,
STATUS "disconnected"; the nodes back: locks again), on three and on five
nodes; fences that go on increasing across grants won by different
majorities, some of whose nodes came back empty; a node stopped (SIGSTOP)
while LOCKs are answered (the per-node deadline, node_timeout_ms, not the
command timeout); a holder whose majority is lost told before its lease can
end; a node that came back empty given the lease of a holding at the next
renewal; the documented hazard of a node restarted without its data at once
(another daemon granted while the holder still holds) and the rule that
bounds it (a restarted node stays out for a TTL); and the configuration
errors of the backend (dlockd -t).

Every test starts its own redis-servers (or shares those of its class) on
free loopback ports; a node is restarted on its port, empty (no
persistence: RedisServer.kill() and restart()). A daemon under a wrapper
(valgrind) gets SLOWDOWN times as long where only speed is measured.

Run alone: BUILD=build sh tests/integration/run.sh -k test_redlock
"""

import re
import signal
import time
import unittest

from dlocktest.cases import ConfigTestCase, RedisTestCase, check_held, report
from dlocktest.daemon import redlock_url
from dlocktest.env import SLOWDOWN, unique_key
from dlocktest.proc import in_thread, sleep_until, wait_until
from dlocktest.redis_server import commandstats
from dlocktest.resp import NULL, Err, Push, Raw, read_within
from dlocktest.sessions import grant_through_outage

# backend keys of daemons that must notice a dead node quickly: TTLs from 900 ms
FAST = {"connect_timeout_ms": 200, "command_timeout_ms": 300}
TTL = 2000  # ms: the lease of the tests that wait for renewals or losses
CONFIG_TTL = "locks:\n  default_ttl_ms: %d\n" % TTL
DRIFT_FACTOR = 0.01  # backend.clock_drift_factor's default
WAKE_BOUND = 0.3 * SLOWDOWN  # s from a release on one daemon to the grant on another
DOWN_BOUND = 3.0 * SLOWDOWN  # s for a daemon to see a killed node down
RECONNECT_BOUND = 8.0 * SLOWDOWN  # s for a daemon to be back on a restarted node (backoff)
BACKEND_REPLY_BOUND = 1.5 * SLOWDOWN  # s for -BACKEND while a majority is down


def drift_ms(ttl):
    """What the daemon takes off a lease of ttl ms for clock drift."""
    return ttl * DRIFT_FACTOR + 2


def lease_key(key):
    """The Redis key of an exclusive lease of key (default key_prefix)."""
    return "dlock:l:" + key


def fence_key(key):
    """The Redis key of key's fence counter."""
    return "dlock:f:" + key


def script_calls(conn):
    """EVALSHA + EVAL calls so far on a redis-server (a Raw connection)."""
    st = commandstats(conn)
    return st.get("evalsha", 0) + st.get("eval", 0)


class RedlockCase(RedisTestCase):
    """Tests with redis-servers as redlock nodes and daemons on them (see
    RedisTestCase: start_nodes, start_redlock_daemon)."""

    def node_cmd(self, node, *args):
        """One command on a node, on a connection of its own."""
        c = node.raw()
        try:
            return c.cmd(*args)
        finally:
            c.close()

    def pttl(self, node, key):
        """PTTL of key's exclusive lease on node: ms left, -2 if none."""
        return self.node_cmd(node, "PTTL", lease_key(key))

    def nodes_with_lease(self, nodes, key):
        """The indexes of the (running) nodes that hold a lease of key."""
        return {i for i, n in enumerate(nodes) if n.running() and self.pttl(n, key) > 0}

    def wait_nodes(self, daemon, nodes, up, timeout=None):
        """Wait until daemon's INFO shows the nodes whose indexes are in up
        connected and the others not; returns that INFO."""
        up = set(up)
        if timeout is None:
            timeout = RECONNECT_BOUND if up else DOWN_BOUND
        seen = {}

        def ok():
            info = self.info(daemon)
            seen["info"] = info
            for i in range(len(nodes)):
                want = "1" if i in up else "0"
                if info.get("backend_node%d_connected" % i) != want:
                    return False
            return info

        try:
            return wait_until(ok, timeout, 0.02)
        except AssertionError:
            info = seen.get("info", {})
            self.fail("%s: nodes %s connected, wanted %s within %.1f s; log:\n%s"
                      % (daemon.addr(),
                         sorted(i for i in range(len(nodes))
                                if info.get("backend_node%d_connected" % i) == "1"),
                         sorted(up), timeout, daemon.log()))

    def assertBackendErrorSoon(self, conn, key, *opts):
        """LOCK key *opts on conn is answered -BACKEND within
        BACKEND_REPLY_BOUND s; returns the reply."""
        t0 = time.monotonic()
        reply = conn.cmd("LOCK", key, *opts)
        took = time.monotonic() - t0
        self.assertErr(reply, "BACKEND", "LOCK %s %s: %r" % (key, opts, reply))
        self.assertLess(took, BACKEND_REPLY_BOUND,
                        "-BACKEND came %.3f s after LOCK %s" % (took, opts))
        return reply

    def fence_counter(self, node, key):
        v = self.node_cmd(node, "GET", fence_key(key))
        return 0 if v is NULL else int(v)


class TestRedlockTwoDaemons(RedlockCase):
    """Two daemons, A and B, on the same three nodes, shared by the tests of
    the class; each test uses keys of its own."""

    @classmethod
    def setUpClass(cls):
        cls.nodes = cls.class_nodes(3)
        cls.a = cls.class_redlock_daemon(cls.nodes)
        cls.b = cls.class_redlock_daemon(cls.nodes)

    def setUp(self):
        super().setUp()
        for d in (self.a, self.b):
            self.assertTrue(d.running(), "a shared dlockd died:\n%s" % d.log())
        for i, n in enumerate(self.nodes):
            self.assertTrue(n.running(), "node %d died:\n%s" % (i, n.log()))

    def all_script_calls(self):
        return [script_calls(self.redis_conn(n)) for n in self.nodes]

    def test_status_from_another_daemon(self):
        # one read per node; a lease counts when a quorum holds it
        self.assertFleetStatus(self.a, self.b, lambda: sum(self.all_script_calls()) // 3 - 1,
                               exact_fence=False)

    def test_held_lists_every_daemon_s_keys(self):
        check_held(self, lambda: self.conn(self.a), lambda: self.conn(self.b))

    def test_mutual_exclusion_across_daemons(self):
        fences = self.assertExclusive((self.a, self.b, self.a, self.b), unique_key(), 15, 90)
        self.assertClockFences(fences)

    def test_lease_on_every_node(self):
        key = unique_key()
        ttl = 6000
        h = self.conn(self.a)
        token, fence, left = self.assertGranted(h.cmd("LOCK", key, "TTL", ttl))
        self.assertLessEqual(left, ttl - drift_ms(ttl) + 1)
        self.assertGreater(left, ttl - drift_ms(ttl) - 100 * SLOWDOWN)
        # granted by a majority; the last node has it a moment later
        wait_until(lambda: self.nodes_with_lease(self.nodes, key) == {0, 1, 2}, 2, 0.005,
                   "the lease of %s on every node" % key)
        members = set()
        for i, n in enumerate(self.nodes):
            self.assertLessEqual(self.pttl(n, key), ttl)
            members.add(self.node_cmd(n, "GET", lease_key(key)))
        self.assertEqual(len(members), 1, "the lease's owner differs between nodes: %s"
                         % members)
        # the fence is written back to (at least) a majority's counters
        ahead = [i for i, n in enumerate(self.nodes) if self.fence_counter(n, key) >= fence]
        self.assertGreaterEqual(len(ahead), 2, "the fence %d is in the counters of nodes "
                                "%s only" % (fence, ahead))
        # B's daemon is refused, and A's lease stays everywhere
        self.assertIs(self.conn(self.b).cmd("LOCK", key, "WAIT", 0), NULL)
        self.assertEqual(self.nodes_with_lease(self.nodes, key), {0, 1, 2})
        self.assertEqual(self.conn(self.b).cmd("VALIDATE", key, fence), 0,
                         "B does not hold it")
        self.assertEqual(h.cmd("VALIDATE", key, fence), 1)
        self.assertEqual(h.cmd("UNLOCK", key), 0)
        wait_until(lambda: not self.nodes_with_lease(self.nodes, key), 2, 0.01,
                   "the lease gone from every node")
        gb = self.assertGranted(self.conn(self.b).cmd("LOCK", key, "WAIT", 0))
        self.assertGreater(gb[1], fence)

    def test_wake_across_daemons_is_prompt(self):
        took = self.wake_latencies(self.a, self.b, unique_key(), 5, self.all_script_calls)
        self.assertWakesWithin(took, WAKE_BOUND, " (3 nodes)")

    def test_shared_and_semaphore_across_daemons(self):
        self.shared_and_semaphore_across((self.a, self.b))

    def test_info_and_status(self):
        c = self.conn(self.a)
        k = unique_key()
        self.assertGranted(c.cmd("LOCK", k))
        self.assertEqual(c.cmd("UNLOCK", k), 0)
        info = self.info(self.a)
        self.assertEqual(info["backend"], "redlock")
        self.assertEqual(info["backend_connected"], "1")
        self.assertEqual(info["backend_nodes"], "3")
        self.assertEqual(info["backend_quorum"], "2")
        self.assertEqual(info["backend_nodes_up"], "3")
        for i, n in enumerate(self.nodes):
            self.assertEqual(info["backend_node%d_address" % i], n.address())
            self.assertEqual(info["backend_node%d_connected" % i], "1")
            for what in ("calls", "failures", "timeouts", "reconnects"):
                self.assertRegex(info.get("backend_node%d_%s_total" % (i, what), ""),
                                 r"^\d+$", "backend_node%d_%s_total" % (i, what))
            self.assertGreaterEqual(int(info["backend_node%d_calls_total" % i]), 2)
        self.assertNotIn("backend_node3_address", info)
        self.assertEqual(self.status(self.a, k)["backend"], b"connected")
        # every call goes to every node
        info2 = self.info(self.a)
        self.assertGranted(c.cmd("LOCK", k))
        self.assertEqual(c.cmd("UNLOCK", k), 0)
        info3 = self.info(self.a)
        for i in range(3):
            name = "backend_node%d_calls_total" % i
            self.assertGreaterEqual(int(info3[name]) - int(info2[name]), 2, name)


class TestRedlockNodesDown(RedlockCase):
    """Each test starts its own nodes and daemons, and kills, stops or
    restarts nodes."""

    def check_degraded(self, daemon, nodes, up, c):
        """With the nodes in up connected (at least a quorum, not all):
        INFO, STATUS "degraded", and LOCK / UNLOCK work, with the lease on
        the nodes up."""
        n = len(nodes)
        info = self.wait_nodes(daemon, nodes, up)
        self.assertEqual(info["backend_connected"], "1")
        self.assertEqual(int(info["backend_nodes_up"]), len(up))
        self.assertEqual(int(info["backend_quorum"]), n // 2 + 1)
        key = unique_key()
        self.assertEqual(self.status(daemon, key)["backend"], b"degraded")
        g = self.assertGranted(c.cmd("LOCK", key, "WAIT", 0))
        self.assertEqual(self.nodes_with_lease(nodes, key), set(up))
        self.assertEqual(c.cmd("VALIDATE", key, g[1]), 1)
        self.assertEqual(c.cmd("UNLOCK", key), 0)
        wait_until(lambda: not self.nodes_with_lease(nodes, key), 2, 0.01,
                   "the lease of %s released on the nodes up" % key)
        # the other modes too
        k2 = unique_key("s")
        self.assertGranted(c.cmd("LOCK", k2, "SHARED", "WAIT", 0))
        self.assertEqual(c.cmd("UNLOCK", k2), 0)
        k3 = unique_key("n")
        self.assertGranted(c.cmd("LOCK", k3, "LIMIT", 3, "WAIT", 0))
        self.assertEqual(c.cmd("UNLOCK", k3), 0)

    def check_disconnected(self, daemon, nodes, up, c):
        """With fewer than a quorum of nodes up: every LOCK WAIT 0 answers
        -BACKEND at once, a LOCK with WAIT left waits it out (-BACKEND after
        it), INFO backend_connected:0, STATUS "disconnected"."""
        for opts in ((), ("SHARED",), ("LIMIT", 3)):
            self.assertBackendErrorSoon(c, unique_key(), "WAIT", 0, *opts)
        t0 = time.monotonic()
        self.assertErr(c.cmd("LOCK", unique_key(), "WAIT", 500), "BACKEND")
        self.assertGreater(time.monotonic() - t0, 0.45, "LOCK WAIT 500 answered before "
                           "its WAIT")
        info = self.wait_nodes(daemon, nodes, up)
        # once the daemon knows: the reason names the nodes down
        r = self.assertBackendErrorSoon(c, unique_key(), "WAIT", 0)
        self.assertIn("%d of %d nodes up, %d needed" % (len(up), len(nodes),
                                                         len(nodes) // 2 + 1), r)
        for i in set(range(len(nodes))) - set(up):
            self.assertIn(nodes[i].address(), r)
        self.assertEqual(info["backend_connected"], "0")
        self.assertEqual(int(info["backend_nodes_up"]), len(up))
        self.assertEqual(self.status(daemon, unique_key())["backend"], b"disconnected")
        self.assertEqual(c.cmd("PING"), "PONG")

    def test_three_nodes_one_then_two_down(self):
        nodes = self.start_nodes(3)
        a = self.start_redlock_daemon(nodes, backend_conf=FAST)
        c = self.conn(a)
        k = unique_key()
        self.assertGranted(c.cmd("LOCK", k))
        self.assertEqual(c.cmd("UNLOCK", k), 0)
        self.wait_nodes(a, nodes, {0, 1, 2})
        self.assertEqual(self.status(a, k)["backend"], b"connected")
        before = int(self.info(a)["backend_node0_reconnects_total"])
        nodes[0].kill()
        self.check_degraded(a, nodes, {1, 2}, c)
        info = self.info(a)
        self.assertEqual(info["backend_node0_connected"], "0")
        self.assertRegex(a.log(), r"redlock node \w+ connection to %s down: "
                         % re.escape(nodes[0].address()),
                         "the node's connection going down is not logged")
        nodes[1].kill()
        self.check_disconnected(a, nodes, {2}, c)
        # the nodes back on their ports, empty: locks work again
        nodes[0].restart()
        nodes[1].restart()
        key = unique_key()
        self.grant_when_up(c, key, RECONNECT_BOUND)
        self.assertEqual(c.cmd("UNLOCK", key), 0)
        info = self.wait_nodes(a, nodes, {0, 1, 2})
        self.assertEqual(info["backend_connected"], "1")
        self.assertEqual(info["backend_nodes_up"], "3")
        self.assertGreater(int(info["backend_node0_reconnects_total"]), before)
        self.assertEqual(self.status(a, key)["backend"], b"connected")
        self.assertGranted(c.cmd("LOCK", key, "WAIT", 0))
        wait_until(lambda: self.nodes_with_lease(nodes, key) == {0, 1, 2}, 2, 0.005,
                   "the lease on every node")

    def test_five_nodes_two_then_three_down(self):
        nodes = self.start_nodes(5)
        a = self.start_redlock_daemon(nodes, backend_conf=FAST)
        c = self.conn(a)
        # the daemon is up once a quorum is: the other two may still connect
        info = self.wait_nodes(a, nodes, range(5))
        self.assertEqual((info["backend_nodes"], info["backend_quorum"],
                          info["backend_nodes_up"]), ("5", "3", "5"))
        nodes[0].kill()
        nodes[3].kill()
        self.check_degraded(a, nodes, {1, 2, 4}, c)
        nodes[4].kill()
        self.check_disconnected(a, nodes, {1, 2}, c)
        nodes[3].restart()
        key = unique_key()
        self.grant_when_up(c, key, RECONNECT_BOUND)
        self.assertEqual(self.nodes_with_lease(nodes, key), {1, 2, 3})
        self.assertEqual(c.cmd("UNLOCK", key), 0)
        self.check_degraded(a, nodes, {1, 2, 3}, c)
        nodes[0].restart()
        nodes[4].restart()
        self.wait_nodes(a, nodes, {0, 1, 2, 3, 4})
        self.assertEqual(self.status(a, key)["backend"], b"connected")

    def test_fences_across_majorities(self):
        # each grant is won by another majority of three nodes, one of them
        # just back without its data; node 2's counter starts far ahead of
        # the clock, so only the counters written back to the granting
        # nodes can keep the fences increasing
        nodes = self.start_nodes(3)
        a = self.start_redlock_daemon(nodes, backend_conf=FAST)
        b = self.start_redlock_daemon(nodes, backend_conf=FAST)
        key = unique_key()
        sec, usec = self.node_cmd(nodes[2], "TIME")
        ahead = int(sec) * 10 ** 6 + int(usec) + 10 ** 12
        self.assertEqual(self.node_cmd(nodes[2], "SET", fence_key(key), str(ahead)), "OK")
        fences = []
        down = None
        # (the node down, the daemon that locks): each majority has one node
        # of the one before, and one back empty
        plan = [(0, a), (2, b), (1, a), (0, b), (2, a), (1, b), (0, a)]
        for rnd, (kill, daemon) in enumerate(plan):
            if down is not None:
                nodes[down].restart()
            nodes[kill].kill()
            down = kill
            up = {0, 1, 2} - {kill}
            self.wait_nodes(daemon, nodes, up)
            c = self.conn(daemon)
            g = self.grant_when_up(c, key, RECONNECT_BOUND)
            fences.append(g[1])
            for i in up:
                self.assertGreaterEqual(self.fence_counter(nodes[i], key), g[1],
                                        "round %d: the fence %d not written back to "
                                        "node %d" % (rnd, g[1], i))
            self.assertEqual(c.cmd("UNLOCK", key), 0)
            c.close()
        report("fences over changing majorities: %s" % ", ".join(str(f) for f in fences))
        self.assertGreater(fences[0], ahead, "the first fence is below node 2's counter")
        self.assertTrue(all(x < y for x, y in zip(fences, fences[1:])),
                        "fences across majorities: %s" % fences)
        # every node back: both daemons on all three again
        nodes[down].restart()
        for d in (a, b):
            self.assertEqual(self.wait_nodes(d, nodes, {0, 1, 2})["backend_connected"], "1")

    def test_stopped_node_answered_within_node_timeout(self):
        # a node that does not answer (SIGSTOP) costs a LOCK at most the
        # per-node deadline, not the command timeout (which would drop the
        # node's connection)
        node_timeout = 200
        cmd_timeout = int(5000 * SLOWDOWN)
        ttl = 3 * cmd_timeout
        nodes = self.start_nodes(3)
        a = self.start_redlock_daemon(
            nodes, "locks:\n  default_ttl_ms: %d\n" % ttl,
            backend_conf={"node_timeout_ms": node_timeout,
                          "command_timeout_ms": cmd_timeout,
                          "connect_timeout_ms": 1000})
        c = self.conn(a)
        bound = node_timeout / 1000 + 1.0 * SLOWDOWN
        self.assertLess(bound, cmd_timeout / 1000)
        # every node set up (its scripts loaded) before one is stopped: a
        # node stopped while it connects is down after the connect timeout
        self.wait_nodes(a, nodes, {0, 1, 2})
        k1 = unique_key("one")
        nodes[0].pause()
        try:
            # one node of three stopped: a majority answers, granted at once
            t0 = time.monotonic()
            g = c.cmd("LOCK", k1, "WAIT", 0)
            took1 = time.monotonic() - t0
            self.assertGranted(g)
            self.assertLess(took1, bound, "LOCK took %.3f s with a node stopped" % took1)
            # (node 0 is not asked: it answers nothing)
            self.assertEqual({i for i in (1, 2) if self.pttl(nodes[i], k1) > 0}, {1, 2})
            self.assertEqual(c.cmd("UNLOCK", k1), 0)
            # and one more killed: the stopped node's part fails at its
            # deadline, so more than N - q failed: -BACKEND at its deadline
            nodes[1].kill()
            self.wait_nodes(a, nodes, {0, 2})
            k2 = unique_key("two")
            t0 = time.monotonic()
            r = c.cmd("LOCK", k2, "WAIT", 0)
            took2 = time.monotonic() - t0
            self.assertErr(r, "BACKEND", "LOCK with one node stopped and one dead: %r" % (r,))
            self.assertIn("redlock", r)
            self.assertLess(took2, bound, "LOCK answered %.3f s after it was sent with a "
                            "node stopped and one dead" % took2)
            info = self.info(a)
            self.assertEqual(info["backend_node0_connected"], "1",
                             "a node past its deadline is not disconnected for that")
            self.assertGreaterEqual(int(info["backend_node0_timeouts_total"]), 1)
            # not granted: nothing left on the node that answered
            wait_until(lambda: self.pttl(nodes[2], k2) == -2, 2, 0.01,
                       "the failed acquire's lease released on node 2")
        finally:
            nodes[0].resume()
        report("LOCK with a node stopped: %.0f ms; with one stopped and one dead: %.0f ms "
               "(node_timeout_ms %d)" % (1000 * took1, 1000 * took2, node_timeout))
        # the stopped node ran what was queued for it, releases included
        wait_until(lambda: self.pttl(nodes[0], k1) == -2 and self.pttl(nodes[0], k2) == -2,
                   5, 0.02, "the releases to reach the resumed node")
        nodes[1].restart()
        self.wait_nodes(a, nodes, {0, 1, 2})
        self.assertGranted(c.cmd("LOCK", k2, "WAIT", 0))
        wait_until(lambda: self.nodes_with_lease(nodes, k2) == {0, 1, 2}, 2, 0.005,
                   "the lease on every node")

    def test_holder_told_when_majority_lost(self):
        nodes = self.start_nodes(3)
        a = self.start_redlock_daemon(nodes, CONFIG_TTL, backend_conf=FAST)
        k1, k2 = unique_key("push"), unique_key("resp2")
        h = self.conn(a)
        self.hello3(h)
        h2 = self.conn(a)  # RESP2: told by -LOST only
        sent1 = time.monotonic()
        f1 = self.assertGranted(h.cmd("LOCK", k1, "TTL", TTL))[1]
        sent2 = time.monotonic()
        f2 = self.assertGranted(h2.cmd("LOCK", k2, "TTL", TTL))[1]
        nodes[0].kill()
        nodes[1].kill()
        t_kill = time.monotonic()
        end1 = sent1 + (TTL - drift_ms(TTL)) / 1000
        end2 = sent2 + (TTL - drift_ms(TTL)) / 1000
        p = read_within(h, end1 - time.monotonic() + 1.0)
        t_push = time.monotonic()
        self.assertIsInstance(p, Push, "no lost push within the lease: %r" % (p,))
        self.assertEqual(p[:3], [b"lost", k1.encode(), f1])
        self.assertIsInstance(p[3], bytes)
        self.assertLess(t_push, end1, "the holder was told %.0f ms after its validity ended"
                        % (1000 * (t_push - end1)))
        # the RESP2 session hears of it at its next command
        lost2 = None
        while time.monotonic() < end2 + 1.0:
            r = h2.cmd("PING")
            if isinstance(r, Err):
                lost2 = (time.monotonic(), r)
                break
            self.assertEqual(r, "PONG")
            time.sleep(0.02)
        self.assertIsNotNone(lost2, "the RESP2 holder was never answered -LOST")
        t2, r = lost2
        self.assertErr(r, "LOST")
        words = r.split(" ", 3)
        self.assertEqual((words[1], int(words[2])), (k2, f2))
        self.assertLess(t2, end2, "-LOST came %.0f ms after the validity ended"
                        % (1000 * (t2 - end2)))
        report("majority lost %.0f ms after the grants: lost push after %.0f ms, -LOST after "
               "%.0f ms (TTL %d ms)" % (1000 * (t_kill - sent1), 1000 * (t_push - t_kill),
                                       1000 * (t2 - t_kill), TTL))
        self.assertEqual(h2.cmd("PING"), "PONG")
        self.assertLostReplies(h, {k1: f1})
        self.assertErr(h.cmd("UNLOCK", k1), "NOTHELD")
        self.assertErr(h2.cmd("UNLOCK", k2), "NOTHELD")
        self.assertGreaterEqual(int(self.info(a)["lost_total"]), 2)
        # the nodes back: the keys can be locked again
        nodes[0].restart()
        nodes[1].restart()
        self.grant_when_up(h2, k2, RECONNECT_BOUND + TTL / 1000)

    def test_holder_told_before_a_stopped_majority_lets_go(self):
        # two nodes of three stopped (SIGSTOP) past the lease: the holder on
        # A is told (lost push) before its validity ends, and B, waiting
        # for the key all along, is granted only after that
        nodes = self.start_nodes(3)
        a = self.start_redlock_daemon(nodes, CONFIG_TTL, backend_conf=FAST)
        b = self.start_redlock_daemon(nodes, CONFIG_TTL, backend_conf=FAST)
        key = unique_key()
        h = self.conn(a)
        self.hello3(h)
        w = self.conn(b)
        w.settimeout(30)
        sent = time.monotonic()
        fence = self.assertGranted(h.cmd("LOCK", key, "TTL", TTL))[1]
        end = sent + (TTL - drift_ms(TTL)) / 1000
        w.send(Raw.encode("LOCK", key, "WAIT", 20000))
        self.wait_status(b, key, waiters=1)
        # B's waiter may be answered -BACKEND while it cannot reach a
        # quorum: it asks again; what matters is when it is granted
        taker = in_thread(grant_through_outage, w, key, 20000, 0.02)
        nodes[0].pause()
        nodes[1].pause()
        try:
            p = read_within(h, end - time.monotonic() + 1.0)
            t_push = time.monotonic()
            # keep them stopped until A's lease has run out in them
            sleep_until(sent + TTL / 1000 + 0.3)
        finally:
            nodes[0].resume()
            nodes[1].resume()
        t_b, gb = taker.result(RECONNECT_BOUND + 10)
        self.assertIsInstance(p, Push, "no lost push within the lease: %r" % (p,))
        self.assertEqual(p[:3], [b"lost", key.encode(), fence])
        report("two nodes stopped: lost push %.0f ms after the LOCK was sent (validity "
               "%.0f ms); B granted %.0f ms after it"
               % (1000 * (t_push - sent), 1000 * (end - sent), 1000 * (t_b - sent)))
        self.assertLess(t_push, end, "the holder was told after its validity ended")
        self.assertLess(t_push, t_b, "B was granted before A's holder was told")
        self.assertGreater(gb[1], fence)
        self.assertLostReplies(h, {key: fence})

    def test_holder_told_when_two_nodes_come_back_without_it(self):
        # Two nodes of three restart without their data while A holds a
        # session lock: its lease is on one node only, and B takes the key
        # and releases it before A's daemon is back on those nodes (A's
        # daemon is stopped meanwhile, well within its lease). A's renewals
        # then give the lease to both nodes again, one after the other (node
        # 1 is down again when A is back on node 0). A node given the lease
        # again "does not count towards q: it did not hold the lease all
        # along" (8.4): A's lock did not stand on a majority all along, and
        # its holder must be told it is lost.
        # Node 0, given the lease back by a renewal that no quorum confirmed
        # (node 1 down), holds it unconfirmed and does not count at the
        # renewal that gives it to node 1 either.
        nodes = self.start_nodes(3)
        a = self.start_redlock_daemon(nodes, backend_conf=FAST)
        b = self.start_redlock_daemon(nodes, backend_conf=FAST)
        key = unique_key()
        ttl = 12000
        h = self.conn(a)
        self.hello3(h)
        ga = self.assertGranted(h.cmd("LOCK", key, "TTL", ttl))
        a.proc.send_signal(signal.SIGSTOP)
        try:
            for i in (0, 1):
                nodes[i].kill()
                nodes[i].restart()
            self.wait_nodes(b, nodes, {0, 1, 2})
            wb = self.conn(b)
            gb = self.grant_when_up(wb, key, 3)
            self.assertGreater(gb[1], ga[1])
            self.assertEqual(wb.cmd("UNLOCK", key), 0)
            nodes[1].kill()
        finally:
            a.proc.send_signal(signal.SIGCONT)
        # A back on node 0 (given the lease again there), then on node 1
        self.wait_nodes(a, nodes, {0, 2})
        wait_until(lambda: self.pttl(nodes[0], key) > 0, 3, 0.01,
                   "A's renewal to give node 0 the lease again")
        nodes[1].restart()
        self.wait_nodes(a, nodes, {0, 1, 2})
        p = read_within(h, 3)
        self.assertIsInstance(p, Push, "A's holder was not told (B held the key meanwhile); "
                              "VALIDATE on A: %r" % (self.conn(a).cmd("VALIDATE", key, ga[1]),))
        self.assertEqual(p[:3], [b"lost", key.encode(), ga[1]])

    def test_node_back_given_the_lease_at_renewal(self):
        nodes = self.start_nodes(3)
        a = self.start_redlock_daemon(nodes, backend_conf=FAST)
        nodes[0].kill()
        self.wait_nodes(a, nodes, {1, 2})
        key = unique_key()
        ttl = 900  # renewed every 300 ms
        h = self.conn(a)
        self.hello3(h)
        fence = self.assertGranted(h.cmd("LOCK", key, "TTL", ttl))[1]
        self.assertEqual(self.nodes_with_lease(nodes, key), {1, 2})
        nodes[0].restart()  # empty
        self.wait_nodes(a, nodes, {0, 1, 2})
        t0 = time.monotonic()
        wait_until(lambda: self.pttl(nodes[0], key) > 0, 3 * ttl / 1000 + 2, 0.01,
                   "the lease given to the node back at a renewal")
        report("lease on the node back %.0f ms after the daemon reconnected"
               % (1000 * (time.monotonic() - t0)))
        # given back unconfirmed (the member with a "~"), then confirmed by a
        # renewal that the two nodes holding it all along confirmed
        owner = self.node_cmd(nodes[1], "GET", lease_key(key))
        self.assertIn(self.node_cmd(nodes[0], "GET", lease_key(key)), (owner, owner + b"~"))
        wait_until(lambda: {self.node_cmd(n, "GET", lease_key(key)) for n in nodes} == {owner},
                   2 * ttl / 1000 + 2, 0.01, "the lease on the node back confirmed")
        # held through it all: no loss
        self.assertIsNone(read_within(h, 0.05))
        self.assertEqual(h.cmd("VALIDATE", key, fence), 1)
        # still on every node a lease later
        time.sleep(ttl / 1000)
        self.assertEqual(self.nodes_with_lease(nodes, key), {0, 1, 2})
        self.assertEqual(h.cmd("UNLOCK", key), 0)
        wait_until(lambda: not self.nodes_with_lease(nodes, key), 2, 0.01,
                   "the lease released on every node")

    # ---- a node restarted without its data ----

    def hazard_setup(self, ttl, b_conf=None):
        """Nodes 0-2 and daemons A and B (B with FAST and b_conf); A takes
        a DETACH lock (never renewed) of ttl while node 2 is down, so that
        its lease is on nodes 0 and 1 only; node 2 is back (empty: it never
        had it) and node 0 is killed. Returns (nodes, A, B, key, A's grant,
        when A's LOCK was sent, when node 0 was killed)."""
        nodes = self.start_nodes(3)
        a = self.start_redlock_daemon(nodes, backend_conf=FAST)
        b = self.start_redlock_daemon(nodes, backend_conf=dict(FAST, **(b_conf or {})),
                                      start=False)
        b.start(wait_backend=not b_conf)
        nodes[2].kill()
        self.wait_nodes(a, nodes, {0, 1})
        key = unique_key()
        ca = self.conn(a)
        sent = time.monotonic()
        g = self.assertGranted(ca.cmd("LOCK", key, "TTL", ttl, "DETACH"))
        self.assertEqual(self.nodes_with_lease(nodes, key), {0, 1})
        nodes[2].restart()
        nodes[0].kill()
        return nodes, a, b, key, g, sent, time.monotonic()

    def poll_b(self, b, key, until, what):
        """LOCK key WAIT 0 on B every 20 ms until granted or until the
        monotonic time until: (grant, when its LOCK was sent, when it was
        answered, the null answers that came before), grant None if none."""
        c = self.conn(b)
        nulls = []
        while time.monotonic() < until:
            t_s = time.monotonic()
            r = c.cmd("LOCK", key, "WAIT", 0)
            t_r = time.monotonic()
            if isinstance(r, list):
                return self.assertGranted(r), t_s, t_r, nulls
            if isinstance(r, Err):
                self.assertEqual(r.code, "BACKEND", "%s: %r" % (what, r))
            else:
                self.assertIs(r, NULL, what)
                nulls.append(t_r)
            time.sleep(0.02)
        return None, None, None, nulls

    def test_restart_without_data_lets_another_in(self):
        # The hazard the docs warn of: node 0 restarted empty at once. A's
        # lease is then on node 1 only, and nodes 0 and 2 (both empty) are
        # a majority for B: B is granted while A still holds the lock.
        ttl = int(5000 * SLOWDOWN)
        nodes, a, b, key, ga, sent, _ = self.hazard_setup(ttl)
        nodes[0].restart()
        a_end = sent + ga[2] / 1000  # A holds it until then, at the most
        gb, t_s, t_r, _ = self.poll_b(b, key, a_end, "B while A holds")
        self.assertIsNotNone(gb, "B was not granted within A's lease: the hazard of a node "
                             "restarted without its data did not show")
        va = self.conn(a).cmd("VALIDATE", key, ga[1])
        t_v = time.monotonic()
        report("restart without data: B granted %.0f ms after A's DETACH lock of %d ms, "
               "%.0f ms before A's lease ended; B's fence %d, A's %d"
               % (1000 * (t_r - sent), ttl, 1000 * (a_end - t_r), gb[1], ga[1]))
        self.assertLess(t_v, a_end)
        self.assertEqual(va, 1, "A no longer holds its lock: no overlap shown")
        # A's STATUS reads the nodes: its own holder, and B's on a quorum
        self.assertEqual(self.status(a, key)["holders"], 2)
        self.assertEqual(self.nodes_with_lease(nodes, key), {0, 1, 2},
                         "A's lease on node 1, B's on nodes 0 and 2")

    def test_delayed_restart_keeps_another_out(self):
        # The rule that bounds it: a node that restarts without its data
        # stays out for the longest TTL (+ locks.lock_delay_ms, 0 here) from
        # the moment it stopped. Then B, polling all along, is granted only
        # once A's lease has ended.
        ttl = int(5000 * SLOWDOWN)
        nodes, a, b, key, ga, sent, stopped = self.hazard_setup(ttl)
        a_end = sent + (ttl - drift_ms(ttl)) / 1000  # A's validity, at the most
        rejoin = stopped + ttl / 1000 + 0.05
        va = self.conn(a)
        restarted = []

        def rejoin_late():
            time.sleep(max(0, rejoin - time.monotonic()))
            nodes[0].restart()
            restarted.append(time.monotonic())

        later = in_thread(rejoin_late)
        gb, t_s, t_r, nulls = self.poll_b(b, key, rejoin + RECONNECT_BOUND + 5,
                                          "B with node 0 out")
        later.result(ttl / 1000 + 10)
        self.assertIsNotNone(gb, "B was never granted")
        # A thinks it holds the lock until a_end: B was refused till then,
        # and granted by a LOCK answered after it (node 1's lease of A
        # ends after a_end)
        self.assertTrue(nulls and nulls[-1] > a_end - 0.5,
                        "B was not refused near the end of A's lease: %s"
                        % [round(t - sent, 3) for t in nulls[-3:]])
        self.assertGreater(t_r, a_end, "B granted %.0f ms before A's lease ended"
                           % (1000 * (a_end - t_r)))
        self.assertEqual(va.cmd("VALIDATE", key, ga[1]), 0,
                         "A still holds its lock while B holds it too")
        report("delayed restart: B granted %.0f ms after A's DETACH lock of %d ms "
               "(%.0f ms after A's validity ended); node 0 back after %.0f ms"
               % (1000 * (t_r - sent), ttl, 1000 * (t_r - a_end),
                  1000 * (restarted[0] - sent)))
        self.assertGreater(gb[1], ga[1])
        self.wait_nodes(b, nodes, {0, 1, 2})

    def test_restart_keepout_keeps_another_out(self):
        # The same rule kept by the daemon: B, with backend.restart_keepout_ms
        # the TTL, counts a node in no quorum until its server has run that
        # long. Node 0 restarted empty at once is no majority for B with
        # node 2 (itself restarted moments ago): B is refused (-BACKEND, then
        # null) until A's lease has ended
        ttl = int(5000 * SLOWDOWN)
        nodes, a, b, key, ga, sent, stopped = self.hazard_setup(
            ttl, {"restart_keepout_ms": ttl})
        nodes[0].restart()
        a_end = sent + (ttl - drift_ms(ttl)) / 1000
        gb, t_s, t_r, nulls = self.poll_b(b, key, a_end + RECONNECT_BOUND + 5,
                                          "B with node 0 kept out")
        self.assertIsNotNone(gb, "B was never granted")
        self.assertGreater(t_r, a_end, "B granted %.0f ms before A's lease ended"
                           % (1000 * (a_end - t_r)))
        self.assertEqual(self.conn(a).cmd("VALIDATE", key, ga[1]), 0,
                         "A still holds its lock while B holds it too")
        self.assertGreater(gb[1], ga[1])
        report("restart keep-out: B granted %.0f ms after A's DETACH lock of %d ms "
               "(%.0f ms after A's validity ended)"
               % (1000 * (t_r - sent), ttl, 1000 * (t_r - a_end)))
        self.assertIn("started less than backend.restart_keepout_ms ago", b.log(20000))

    def test_restart_keepout_of_new_nodes(self):
        # nodes that started less than the keep-out ago count in no quorum:
        # LOCK answers -BACKEND saying so, INFO and STATUS show it, and the
        # first grant comes once they have run that long
        keep = int(2000 * SLOWDOWN)
        t_start = time.monotonic()
        nodes = self.start_nodes(3)
        a = self.start_redlock_daemon(nodes, backend_conf={"restart_keepout_ms": keep},
                                      start=False)
        a.start(wait_backend=False)
        info = self.wait_nodes(a, nodes, {0, 1, 2})
        c = self.conn(a)
        k = unique_key()
        r = c.cmd("LOCK", k, "WAIT", 0)
        self.assertErr(r, "BACKEND")
        self.assertIn("0 of 3 nodes up, 2 needed", r)
        self.assertIn("restarted, kept out for", r)
        self.assertEqual(info["backend_restart_keepout_ms"], str(keep))
        self.assertEqual(info["backend_nodes_counting"], "0")
        for i in range(3):
            self.assertGreater(int(info["backend_node%d_kept_out_ms" % i]), 0)
        self.assertEqual(self.status(a, k)["backend"], b"disconnected")
        self.assertIn("counted in no quorum for", a.log(20000))
        granted = None
        while granted is None and time.monotonic() < t_start + keep / 1000 + 10:
            r = c.cmd("LOCK", k, "WAIT", 0)
            if isinstance(r, list):
                granted = time.monotonic()
            else:
                self.assertErr(r, "BACKEND")
                time.sleep(0.05)
        self.assertIsNotNone(granted, "never granted once the nodes had run %d ms" % keep)
        self.assertGreaterEqual(granted, t_start + keep / 1000,
                                "granted before the nodes had run %d ms" % keep)
        info = self.info(a)
        self.assertEqual(info["backend_nodes_counting"], "3")
        self.assertEqual({info["backend_node%d_kept_out_ms" % i] for i in range(3)}, {"0"})
        self.assertEqual(c.cmd("UNLOCK", k), 0)
        # a user that may not run INFO: its node is kept out, and said why
        users = ["locker on >pw ~dlock:* &dlock:* +@all -info"]
        node = self.start_nodes(1, users=users)
        b = self.start_redlock_daemon(node, start=False, backend_conf={
            "restart_keepout_ms": keep, "username": "locker", "password": "pw"})
        b.start(wait_backend=False)
        self.assertEqual(self.wait_nodes(b, node, {0})["backend_node0_kept_out_ms"], "-1")
        r = self.conn(b).cmd("LOCK", unique_key(), "WAIT", 0)
        self.assertErr(r, "BACKEND")
        self.assertIn("kept out (its uptime cannot be read)", r)
        self.assertIn("backend.restart_keepout_ms needs INFO server", b.log(20000))


class TestRedlockSettings(RedlockCase):
    """The settings every node shares: password, db and key prefix, from
    the URL and from the backend section."""

    def test_url_password_db_and_prefix(self):
        nodes = self.start_nodes(3, password="s3cret")
        # -b redlock://:s3cret@127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3/3
        a = self.start_redlock_daemon(nodes, backend_url=redlock_url(nodes, db=3))
        # a backend section with the nodes, the password, db and key_prefix
        b = self.start_redlock_daemon(nodes, backend_conf={"db": 3, "key_prefix": "other:"})
        key = unique_key()
        ga = self.assertGranted(self.conn(a).cmd("LOCK", key))
        # another prefix is another name space: the same key is free there
        gb = self.assertGranted(self.conn(b).cmd("LOCK", key, "WAIT", 0))
        self.assertGreater(min(ga[1], gb[1]), 10 ** 15)
        for i, n in enumerate(nodes):
            db3, db0 = n.client(db=3), n.client(db=0)
            self.addCleanup(db3.connection_pool.disconnect)
            self.addCleanup(db0.connection_pool.disconnect)
            wait_until(lambda: {"dlock:l:" + key, "other:l:" + key} <=
                       {k.decode(errors="replace") for k in db3.keys("*")}, 2, 0.01,
                       "both leases in db 3 of node %d" % i)
            self.assertEqual(db0.dbsize(), 0, "keys in db 0 of node %d" % i)
        # a wrong password: the daemon does not get connected
        bad = self.start_redlock_daemon(nodes, backend_url=redlock_url(nodes, password="nope"),
                                        start=False)
        bad.start(wait_backend=False)
        c = self.conn(bad)
        r = c.cmd("LOCK", unique_key(), "WAIT", 0)
        self.assertErr(r, "BACKEND")
        self.assertEqual(self.info(bad)["backend_connected"], "0")


    def test_persistence_read_and_warned(self):
        # appendonly and appendfsync are read at each connection to a node:
        # INFO shows what a restart of each keeps, and a node that would
        # forget acknowledged leases is logged (docs/backends/redlock.md)
        nodes = self.start_nodes(3)
        for n, (ao, fs) in zip(nodes, [("yes", "always"), ("no", "always"),
                                       ("yes", "everysec")]):
            rc = self.redis_conn(n)
            self.assertEqual(rc.cmd("CONFIG", "SET", "appendfsync", fs), "OK")
            self.assertEqual(rc.cmd("CONFIG", "SET", "appendonly", ao), "OK")
        a = self.start_redlock_daemon(nodes)
        info = self.wait_nodes(a, nodes, {0, 1, 2})
        self.assertEqual([info["backend_node%d_persistence" % i] for i in range(3)],
                         ["aof-always", "no-aof", "aof-everysec"])
        warned = "appendonly %s, appendfsync %s: a restart loses leases"
        log = a.log(20000)
        self.assertIn("redlock node 127.0.0.1:%d: " % nodes[1].port + warned % ("no", "always"),
                      log)
        self.assertIn("redlock node 127.0.0.1:%d: " % nodes[2].port
                      + warned % ("yes", "everysec"), log)
        self.assertNotIn("redlock node 127.0.0.1:%d: appendonly" % nodes[0].port, log)
        # node 1 made safe, and its connections dropped: read again, no new line
        rc = self.redis_conn(nodes[1])
        self.assertEqual(rc.cmd("CONFIG", "SET", "appendonly", "yes"), "OK")
        rc.cmd("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        wait_until(lambda: self.info(a)["backend_node1_persistence"] == "aof-always", 10, 0.02,
                   "node 1's persistence read again after the reconnect")
        self.assertEqual(a.log(20000).count("redlock node 127.0.0.1:%d: appendonly"
                                            % nodes[1].port), 1)
        # a user that may not run CONFIG: unknown, said once, and locks work
        users = ["locker on >pw ~dlock:* &dlock:* +@all -config"]
        plain = self.start_nodes(3, users=users)
        b = self.start_redlock_daemon(plain, backend_conf={"username": "locker",
                                                           "password": "pw"})
        info = self.wait_nodes(b, plain, {0, 1, 2})
        self.assertEqual({info["backend_node%d_persistence" % i] for i in range(3)},
                         {"unknown"})
        wait_until(lambda: "cannot read appendonly and appendfsync" in b.log(20000), 5, 0.02,
                   "the line saying the settings cannot be read")
        self.assertGranted(self.conn(b).cmd("LOCK", unique_key(), "WAIT", 0))
        for n in nodes:  # no AOF to write out at the stop
            self.assertEqual(self.redis_conn(n).cmd("CONFIG", "SET", "appendonly", "no"), "OK")


class TestRedlockConfig(ConfigTestCase):
    """-b redlock://... and the backend section, checked with dlockd -t
    (which connects to nothing)."""

    def test_url_forms_accepted(self):
        empty = self.write("empty.yaml", "")
        for url in ("redlock://127.0.0.1:6379,127.0.0.1:6380,127.0.0.1:6381",
                    "redlock://127.0.0.1",
                    "redlock://localhost,127.0.0.1:6380,127.0.0.1:6381/2",
                    "redlock://:s3cret@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
                    "redlock://user:s3cret@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,"
                    "127.0.0.1:4,127.0.0.1:5"):
            self.check_ok(["-c", empty, "-b", url], url)

    def test_url_without_hosts_refused(self):
        empty = self.write("empty.yaml", "")
        for url in ("redlock://", "redlock:///0", "redlock://:pw@"):
            err = self.check_refused(["-c", empty, "-b", url], url)
            self.assertIn("redlock", err, "%s: the error does not name the URL: %s"
                          % (url, err))
            self.assertNotIn("Segmentation", err)

    def test_yaml_accepted(self):
        path = self.write("ok.yaml",
                          'backend:\n'
                          '  type: redlock\n'
                          '  nodes: ["127.0.0.1:6379", "127.0.0.1:6380", "127.0.0.1:6381"]\n'
                          '  node_timeout_ms: 50\n'
                          '  clock_drift_factor: 0.01\n'
                          '  restart_keepout_ms: 30000\n'
                          '  key_prefix: "dlock:"\n'
                          '  connect_timeout_ms: 500\n'
                          '  command_timeout_ms: 400\n'
                          '  handoff_limit: 8\n')
        self.check_ok(["-c", path], "a full redlock section")
        path = self.write("list.yaml",
                          'backend:\n'
                          '  type: redlock\n'
                          '  nodes:\n'
                          '    - 127.0.0.1:6379\n'
                          '    - "127.0.0.1:6380"\n'
                          '    - localhost:6381\n')
        self.check_ok(["-c", path], "nodes as a block list")

    def test_yaml_empty_nodes_refused(self):
        for nodes in ('[]', '""'):
            path = self.write("empty.yaml", "backend:\n  type: redlock\n  nodes: %s\n" % nodes)
            err = self.check_refused(["-c", path], nodes)
            self.assertRegex(err, r"(?m)^%s:3:10: .*backend\.nodes" % re.escape(path),
                             "nodes: %s: not an error at file:3:10: %s" % (nodes, err))
        # no nodes at all
        path = self.write("none.yaml", "backend:\n  type: redlock\n")
        err = self.check_refused(["-c", path], "no nodes")
        self.assertIn("backend.nodes", err)

    def test_yaml_bad_drift_factor_refused(self):
        for value in ('"abc"', 'abc', '0.9', '-0.01'):
            path = self.write("drift.yaml",
                              'backend:\n'                                     # 1
                              '  type: redlock\n'                              # 2
                              '  nodes: ["127.0.0.1:6379", "127.0.0.1:6380"]\n'  # 3
                              '  clock_drift_factor: %s\n' % value)            # 4: col 23
            err = self.check_refused(["-c", path], value)
            lines = [l for l in err.splitlines() if l.strip()]
            self.assertTrue(any(re.match(r"^%s:4:23: \S" % re.escape(path), l)
                                for l in lines),
                            "clock_drift_factor %s: no error at %s:4:23: %s"
                            % (value, path, err))
            self.assertIn("clock_drift_factor", err)


if __name__ == "__main__":
    unittest.main()
