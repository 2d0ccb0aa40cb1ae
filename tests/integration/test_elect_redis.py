"""Leader election across daemons on the redis backend: one Redis, a Redis
Cluster and Sentinel's master (the tests are dlocktest.elect's); a leader's
daemon killed (its lease runs out in Redis, unpublished: the observer's look
at the lease's end sees it); local handoffs of a key another daemon
observes, each told; the master killed under Sentinel.
"""

import time

from dlocktest.cases import RedisTestCase
from dlocktest.elect import ElectAcrossDaemons, ObserveUntil, state
from dlocktest.env import SLOWDOWN, unique_key
from dlocktest.proc import in_thread, results
from dlocktest.resp import NULL, read_within

TTL = 2000  # ms: the CAMPAIGN TTL of the killed daemon's leader
# a shorter command timeout than the default lets TTLs of a few seconds in
# (the shortest lease is 3 x command_timeout_ms)
FAST = {"command_timeout_ms": 500}
KILL_MARGIN = 1.0  # s after the TTL for B's observer to see the key free


class TestElectRedis(ElectAcrossDaemons, RedisTestCase):
    """Two daemons, A and B, on one Redis."""

    @classmethod
    def setUpClass(cls):
        cls.redis = cls.class_redis()
        cls.a = cls.class_daemon(cls.redis, backend_conf=FAST)
        cls.b = cls.class_daemon(cls.redis, backend_conf=FAST)

    def test_local_handoffs_of_an_observed_key_told(self):
        """A's holders hand the key on to A's waiters, which the backend
        would do without Redis (a delegation of fences): while B observes
        the key, each grant goes through Redis and B sees every term."""
        key = unique_key()
        obs = self.conn(self.b)
        rev = state(obs.cmd("LEADER", key))["rev"]
        holders = [self.conn(self.a) for _ in range(4)]
        fences = [holders[0].cmd("LOCK", key)[1]]
        for h in holders[1:]:
            h.send(h.encode("LOCK", key, "WAIT", 10000))
        self.wait_queued(self.a, key)
        time.sleep(0.1)
        for i, h in enumerate(holders[1:]):
            holders[i].close()
            g = read_within(h, 10)
            self.assertIsInstance(g, list, g)
            fences.append(g[1])
        self.assertEqual(fences, sorted(set(fences)))
        st, seen = self.observe_until(obs, key, rev, lambda s: s["term"] == fences[-1])
        terms = [s["term"] for s in seen if s["kind"] != "free"]
        self.assertEqual(terms, sorted(terms), seen)
        self.assertTrue(set(terms) <= set(fences), (terms, fences))
        info = self.a.info()
        self.assertEqual(int(info["backend_local_handoffs_total"]), 0, info)

    def test_every_leader_seen_however_short(self):
        """Leaders on A that hand over and resign faster than B can read:
        each is in the record's history, and told."""
        self.every_leader_followed(self.a, self.b, 3)

    def test_a_new_observer_starts_from_now(self):
        """Leaders come and go while B observes the key (so Redis keeps
        their history); a daemon that has not observed the key before (A)
        answers LEADER with the leader now, not an older one."""
        key = unique_key()
        self.conn(self.b).cmd("OBSERVE", key)   # the key is marked observed
        a = self.conn(self.a)
        for i in range(3):
            a.cmd("CAMPAIGN", key, "v%d" % i)
            self.assertEqual(a.cmd("RESIGN", key), 0)
        term = a.cmd("CAMPAIGN", key, "now")[1]
        st = state(self.conn(self.a).cmd("LEADER", key))
        self.assertEqual((st["value"], st["term"]), (b"now", term))
        f = self.conn(self.a)
        self.hello3(f)
        st = state(f.cmd("OBSERVE", key, "FOLLOW"))
        self.assertEqual((st["value"], st["term"]), (b"now", term))
        self.assertIsNone(read_within(f, 0.3))   # no older leader pushed after

    def test_observed_mark_in_the_fence_counter(self):
        """A key nobody observes: its grants and releases publish nothing
        and its fence counter is a number. Observed from B: the counter
        carries the mark's end (the server's ms, about 60 s ahead), grants
        keep it and still take fences above the counter, and each grant and
        release on A is published; a release deletes the o: mark, which B's
        look sets again."""
        key = unique_key()
        fkey, okey = "dlock:f:" + key, "dlock:o:" + key
        sub = self.redis.client().pubsub()
        sub.subscribe("dlock:released")
        self.assertEqual(sub.get_message(timeout=2)["type"], "subscribe")

        def messages(within):
            # this key's: a key of an earlier test of the class may still be
            # observed (its o: mark lasts 60 s) and published when it goes
            got, end = [], time.monotonic() + within
            while time.monotonic() < end:
                m = sub.get_message(timeout=0.05)
                if m is not None and m["type"] == "message" and m["data"] == key.encode():
                    got.append(m["data"])
            return got

        a = self.conn(self.a)
        f1 = a.cmd("LOCK", key)[1]
        self.assertEqual(a.cmd("UNLOCK", key), 0)   # holds left
        self.assertEqual(messages(0.3), [])
        self.assertEqual(self.redis.cmd("GET", fkey), b"%d" % f1)

        b = self.conn(self.b)
        rev = state(b.cmd("OBSERVE", key))["rev"]
        counter, until = self.redis.cmd("GET", fkey).split(b" ")
        now = self.redis.cmd("TIME")
        now_ms = int(now[0]) * 1000 + int(now[1]) // 1000
        self.assertEqual(int(counter), f1)
        self.assertAlmostEqual(int(until) - now_ms, 60000, delta=5000)
        self.assertEqual(self.redis.cmd("EXISTS", okey), 1)
        messages(0.3)   # the look's own publication on wanted is not here

        f2 = a.cmd("LOCK", key)[1]
        self.assertGreater(f2, f1)
        counter2, until2 = self.redis.cmd("GET", fkey).split(b" ")
        self.assertEqual(int(counter2), f2)     # the mark kept (or set again by B)
        self.assertGreaterEqual(int(until2), int(until))
        self.assertEqual(a.cmd("UNLOCK", key), 0)
        self.assertEqual(messages(0.5), [key.encode(), key.encode()])
        st, _ = self.observe_until(b, key, rev, lambda s: s["kind"] == "free")
        self.assertEqual(self.redis.cmd("EXISTS", okey), 1)   # set again by B's look
        sub.close()

    def test_campaign_again_changes_the_value_everywhere(self):
        """A leader that campaigns again keeps its term and changes its
        value, as PROCLAIM does: B sees the new value."""
        key = unique_key()
        ca, cb = self.conn(self.a), self.conn(self.b)
        term = ca.cmd("CAMPAIGN", key, "v1")[1]
        first = state(cb.cmd("OBSERVE", key))
        self.assertEqual(ca.cmd("CAMPAIGN", key, "v2")[1], term)
        st, _ = self.observe_until(cb, key, first["rev"], lambda s: s["value"] == b"v2")
        self.assertEqual(st["term"], term)


class TestElectCluster(ElectAcrossDaemons, RedisTestCase):
    """Two daemons, A and B, on one Redis Cluster (keys in many slots)."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = cls.class_cluster()
        cls.a = cls.class_cluster_daemon(cls.cluster, backend_conf=FAST)
        cls.b = cls.class_cluster_daemon(cls.cluster, backend_conf=FAST)


class TestElectSentinel(ElectAcrossDaemons, RedisTestCase):
    """Two daemons, A and B, on Sentinel's master."""

    @classmethod
    def setUpClass(cls):
        cls.a, cls.b = cls.class_sentinel_daemons(2, backend_conf=FAST)


class TestElectRedisKilled(ObserveUntil, RedisTestCase):

    def test_killed_leader_seen_lost_on_b(self):
        """A's daemon SIGKILLed: nothing tells Redis, its leader's lease
        runs out at the TTL, and B's observer sees the key free then."""
        server = self.start_redis()
        a = self.start_daemon(server, backend_conf=FAST)
        b = self.start_daemon(server, backend_conf=FAST)
        key = unique_key()
        term = self.killed_leader_seen_lost(a, b, key, TTL / 1000, KILL_MARGIN, "TTL", TTL)
        # a standby on B leads now, with a higher term
        g = self.conn(b).cmd("CAMPAIGN", key, "next", "WAIT", 5000)
        self.assertGreater(g[1], term)

    def test_observer_after_redis_restart(self):
        """Redis restarted (without its data): B's observer is told the key
        as the new Redis has it, and goes on seeing A's changes."""
        server = self.start_redis()
        a = self.start_daemon(server, backend_conf=FAST)
        b = self.start_daemon(server, backend_conf=FAST)
        key = unique_key()
        obs = self.conn(b, timeout=40 * SLOWDOWN)
        rev = state(obs.cmd("LEADER", key))["rev"]
        call = in_thread(self.observe_until, obs, key, rev,
                         lambda s: s["value"] == b"after", 20 * SLOWDOWN)
        server.stop()
        server.restart()
        leader = self.conn(a)
        deadline = time.monotonic() + 10 * SLOWDOWN
        while True:
            reply = leader.cmd("CAMPAIGN", key, "after", "WAIT", 1000)
            if isinstance(reply, list) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertIsInstance(reply, list, reply)
        st, _ = results([call], 30 * SLOWDOWN)[0]
        self.assertEqual(st["term"], reply[1])
        self.assertIsNot(reply, NULL)
