"""Leader election across daemons on the redlock backend: two daemons on
the same three redis-servers (the tests are dlocktest.elect's), LEADER and
OBSERVE a quorum read of the nodes' looks; the term every daemon shows is
the fence the CAMPAIGN was granted with (the quorum's, written back to the
nodes' records), not a node's own proposal; one node of three stopped
(election and observers go on); a leader's daemon killed (its lease runs
out on the nodes, unpublished: the observer's look at the lease's end sees
it); a node that missed the grant (it joins after it); a leader whose
lease is gone told it lost its term.

Run alone: BUILD=build sh tests/integration/run.sh -k test_elect_redlock
"""

import time

from dlocktest.cases import RedisTestCase
from dlocktest.elect import ElectAcrossDaemons, ObserveUntil, state
from dlocktest.env import SLOWDOWN, unique_key
from dlocktest.proc import wait_until
from dlocktest.resp import Err

TTL = 2000  # ms: the CAMPAIGN TTL of the killed daemon's leader
# a shorter command timeout than the default lets TTLs of a few seconds in
# (the shortest lease is 3 x command_timeout_ms); connect quickly to a node
FAST = {"command_timeout_ms": 500, "connect_timeout_ms": 200}
KILL_MARGIN = 1.5  # s after the TTL for B's observer to see the key free
DOWN_BOUND = 3.0 * SLOWDOWN  # s for a daemon to see a killed node down


def campaign_when_seen_down(conn, key, value):
    """CAMPAIGN key value on conn, again while the daemon has not yet seen
    a node go down (its calls to it fail the quorum's grant until then):
    the grant, or the last answer."""
    deadline = time.monotonic() + DOWN_BOUND + 5
    while True:
        reply = conn.cmd("CAMPAIGN", key, value, "WAIT", 1000)
        if isinstance(reply, list) or time.monotonic() > deadline:
            return reply
        time.sleep(0.2)


class TestElectRedlock(ElectAcrossDaemons, RedisTestCase):
    """Two daemons, A and B, on the same three nodes."""

    @classmethod
    def setUpClass(cls):
        cls.nodes = cls.class_nodes(3)
        cls.a = cls.class_redlock_daemon(cls.nodes, backend_conf=FAST)
        cls.b = cls.class_redlock_daemon(cls.nodes, backend_conf=FAST)

    def test_every_leader_seen_however_short(self):
        """Leaders on A that hand over and resign faster than B can read:
        each is in the histories of a majority of the nodes, and told."""
        self.every_leader_followed(self.a, self.b, 3)

    def test_term_on_b_is_the_quorum_fence(self):
        """The term B shows is the fence A's CAMPAIGN answered, the same
        on every node that holds the lease (written back to the records),
        though each node proposed a fence of its own."""
        key = unique_key()
        obs = self.conn(self.b)
        rev = state(obs.cmd("LEADER", key))["rev"]
        leader = self.conn(self.a)
        for i in range(3):
            g = leader.cmd("CAMPAIGN", key, "v%d" % i)
            self.assertIsInstance(g, list, g)
            st, _ = self.observe_until(obs, key, rev, lambda s, t=g[1]: s["term"] == t)
            self.assertEqual(st["value"], b"v%d" % i)
            self.assertEqual(state(self.conn(self.b).cmd("LEADER", key))["term"], g[1])
            terms = {int(n.cmd("HGET", "dlock:e:" + key, "t")) for n in self.nodes}
            self.assertEqual(terms, {g[1]})
            rev = st["rev"]
            self.assertEqual(leader.cmd("RESIGN", key), 0)

    def test_leader_answer_needs_a_majority(self):
        """LEADER is read from every node: it answers what a majority
        agrees on, each daemon numbering its own revisions upward."""
        key = unique_key()
        a, b = self.conn(self.a), self.conn(self.b)
        term = a.cmd("CAMPAIGN", key, "one")[1]
        r1 = state(b.cmd("LEADER", key))
        r2 = state(b.cmd("LEADER", key))
        self.assertEqual((r1["term"], r1["value"]), (term, b"one"))
        self.assertEqual(r1, r2)   # the same state, the same revision
        self.assertIsInstance(a.cmd("PROCLAIM", key, "two"), int)
        st, _ = self.observe_until(b, key, r1["rev"], lambda s: s["value"] == b"two")
        self.assertEqual(st["term"], term)


class TestElectRedlockNodes(ObserveUntil, RedisTestCase):
    """Nodes stopped, a node that missed a grant, a leader's daemon
    killed."""

    def start(self):
        nodes = self.start_nodes(3)
        a = self.start_redlock_daemon(nodes, backend_conf=FAST)
        b = self.start_redlock_daemon(nodes, backend_conf=FAST)
        return nodes, a, b

    def test_one_node_of_three_down(self):
        """One node stopped: CAMPAIGN, PROCLAIM, RESIGN through A are seen
        by B's observer, with the term A's CAMPAIGN answered."""
        nodes, a, b = self.start()
        key = unique_key()
        obs = self.conn(b)
        rev = state(obs.cmd("LEADER", key))["rev"]
        nodes[0].kill()
        ca = self.conn(a)
        g = campaign_when_seen_down(ca, key, "first")
        self.assertIsInstance(g, list, g)
        st, _ = self.observe_until(obs, key, rev, lambda s: s["term"] == g[1])
        self.assertEqual(st["value"], b"first")
        self.assertIsInstance(ca.cmd("PROCLAIM", key, "second"), int)
        st, _ = self.observe_until(obs, key, st["rev"], lambda s: s["value"] == b"second")
        self.assertEqual(st["term"], g[1])
        self.assertEqual(ca.cmd("RESIGN", key), 0)
        st, _ = self.observe_until(obs, key, st["rev"], lambda s: s["kind"] == "free")
        self.assertEqual(st["term"], 0)
        # a standby on B leads now, with a higher term, seen on A
        g2 = self.conn(b).cmd("CAMPAIGN", key, "next")
        self.assertGreater(g2[1], g[1])
        self.observe_until(self.conn(a), key, 0, lambda s: s["term"] == g2[1])

    def test_majority_down_answers_an_error(self):
        """Two nodes of three stopped: LEADER answers an error, as a LOCK
        does, rather than what one node says."""
        nodes, a, _ = self.start()
        key = unique_key()
        c = self.conn(a)
        self.assertEqual(state(c.cmd("LEADER", key))["kind"], "free")
        nodes[0].kill()
        nodes[1].kill()
        wait_until(lambda: isinstance(c.cmd("LEADER", unique_key()), Err), DOWN_BOUND + 5,
                   0.1, "LEADER to answer an error")

    def test_node_that_missed_the_grant(self):
        """A node down while A's leader was granted comes back empty: the
        majority still shows the leader and its term, on B."""
        nodes, a, b = self.start()
        key = unique_key()
        nodes[2].kill()
        g = campaign_when_seen_down(self.conn(a), key, "v")
        self.assertIsInstance(g, list, g)
        nodes[2].restart()
        time.sleep(1.0 * SLOWDOWN)
        st = state(self.conn(b).cmd("LEADER", key))
        self.assertEqual((st["term"], st["value"], st["kind"]), (g[1], b"v", "exclusive"))

    def test_leader_told_it_lost_its_term(self):
        """The leader's lease gone from every node: A's next renewal finds
        it ended, and the leader is told it lost its term (-LOST with the
        term), as any holder of a lost lock is; B's observer sees the key
        free."""
        nodes, a, b = self.start()
        key = unique_key()
        leader = self.conn(a)
        term = leader.cmd("CAMPAIGN", key, "v", "TTL", TTL)[1]
        first = state(self.conn(b).cmd("OBSERVE", key))
        self.assertEqual(first["term"], term)
        for n in nodes:
            n.cmd("DEL", "dlock:l:" + key)
        lost = []
        wait_until(lambda: lost.append(leader.cmd("PING")) or isinstance(lost[-1], Err),
                   TTL / 1000 + 2, 0.05, "the leader to be told")
        self.assertTrue(lost[-1].startswith("LOST"), lost[-1])
        self.assertIn(str(term), lost[-1])
        st, _ = self.observe_until(self.conn(b), key, first["rev"],
                                   lambda s: s["kind"] == "free")
        self.assertEqual(st["term"], 0)

    def test_killed_leader_seen_lost_on_b(self):
        """A's daemon SIGKILLed: nothing tells the nodes, its leader's lease
        runs out at the TTL on each, and B's observer sees the key free."""
        _, a, b = self.start()
        key = unique_key()
        term = self.killed_leader_seen_lost(a, b, key, TTL / 1000, KILL_MARGIN, "TTL", TTL)
        g = self.conn(b).cmd("CAMPAIGN", key, "next", "WAIT", 5000)
        self.assertGreater(g[1], term)
