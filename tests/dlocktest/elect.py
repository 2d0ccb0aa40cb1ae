"""Leader election across daemons, whatever the backend: CAMPAIGN, PROCLAIM
and RESIGN through one daemon, LEADER and OBSERVE (long polls and RESP3
follows) through another, which learns of them from the backend alone.

ElectAcrossDaemons holds the tests; a test module makes a TestCase of it
for each backend with two daemons of the class, a and b, on one backend
(test_elect_etcd.py, test_elect_redis.py, test_elect_redlock.py). Every
test uses keys of its own.
"""

import signal
import time

from .env import SLOWDOWN, unique_key
from .proc import in_thread, results, wait_until
from .resp import NULL, Push, read_within

SEEN = 5.0 * SLOWDOWN  # s for a change through A to reach B's observer


def state(reply):
    """[value, term, revision, kind, holders] as a dict."""
    value, term, rev, kind, holders = reply
    if value is NULL or value is None:
        value = None
    if isinstance(kind, bytes):
        kind = kind.decode()
    return {"value": value, "term": term, "rev": rev, "kind": kind, "holders": holders}


class ObserveUntil:
    """A TestCase's OBSERVE loop."""

    def observe_until(self, conn, key, rev, want, within=SEEN):
        """OBSERVE key AFTER rev on conn, again and again, until a state
        for which want(state) is true; returns (it, the states seen)."""
        seen = []
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            wait = max(1, int((deadline - time.monotonic()) * 1000))
            reply = conn.cmd("OBSERVE", key, "AFTER", rev, "WAIT", wait)
            if reply is NULL or reply is None:
                break
            st = state(reply)
            self.assertGreater(st["rev"], rev)
            rev = st["rev"]
            seen.append(st)
            if want(st):
                return st, seen
        raise AssertionError("%s: not seen within %.1f s; seen %s" % (key, within, seen))


    def killed_leader_seen_lost(self, a, b, key, lease_s, margin_s, *campaign):
        """A leads key through daemon a (CAMPAIGN key "doomed" *campaign),
        an observer on b sees it; a is SIGKILLed: the observer sees the key
        free within lease_s + margin_s (the lease runs out in the backend,
        which nobody tells). Returns the leader's term."""
        term = self.conn(a).cmd("CAMPAIGN", key, "doomed", *campaign)[1]
        obs = self.conn(b)
        first = state(obs.cmd("OBSERVE", key))
        self.assertEqual((first["value"], first["term"]), (b"doomed", term))
        t0 = time.monotonic()
        self.assertEqual(a.stop(signal.SIGKILL), -signal.SIGKILL)
        st, _ = self.observe_until(obs, key, first["rev"], lambda s: s["kind"] == "free",
                                   lease_s + margin_s + 5)
        took = time.monotonic() - t0
        self.assertLess(took, lease_s + margin_s * SLOWDOWN,
                        "the loss seen %.2f s after the kill" % took)
        self.assertEqual((st["value"], st["term"]), (None, 0))
        return term

    def every_leader_followed(self, a, b, n):
        """n leaders through daemon a, each taking the key and resigning in
        one round trip: a RESP3 follower on b is pushed every leader's term
        and value, in order, however short, and the last state, free."""
        key = unique_key()
        f = self.conn(b)
        self.hello3(f)
        self.assertEqual(state(f.cmd("OBSERVE", key, "FOLLOW"))["kind"], "free")
        c = self.conn(a)
        terms = []
        for i in range(n):
            # sent together: each reply comes before b can have read
            c.send(c.encode("CAMPAIGN", key, "v%d" % i) + c.encode("RESIGN", key))
            g = c.read()
            self.assertIsInstance(g, list, g)
            terms.append(g[1])
            self.assertEqual(c.read(), 0)
        got = []
        while len([g for g in got if g["kind"] != "free"]) < n or got[-1]["kind"] != "free":
            p = read_within(f, SEEN)
            self.assertIsNotNone(p, "pushes so far: %s" % got)
            got.append(state(p[2]))
        leaders = [(g["term"], g["value"]) for g in got if g["kind"] != "free"]
        self.assertEqual(leaders, [(t, b"v%d" % i) for i, t in enumerate(terms)], got)
        revs = [g["rev"] for g in got]
        self.assertEqual(revs, sorted(set(revs)))


class ElectAcrossDaemons(ObserveUntil):
    """The tests, for a TestCase whose class has two daemons, a and b, on
    one backend (a mixin: it is no TestCase itself)."""

    def setUp(self):
        super().setUp()
        for d in (self.a, self.b):
            self.assertTrue(d.running(), "a shared dlockd died:\n%s" % d.log())

    def wait_queued(self, daemon, key):
        """Until daemon has a waiter of key queued (STATUS key)."""
        conn = self.conn(daemon)

        def queued():
            reply = conn.cmd("STATUS", key)
            return dict(zip(reply[::2], reply[1::2]))[b"waiters"] >= 1
        wait_until(queued, 5 * SLOWDOWN, 0.01, "a waiter of %s queued" % key)

    def test_leader_on_b_shows_a_campaign(self):
        key = unique_key()
        _, term, _ = self.conn(self.a).cmd("CAMPAIGN", key, "10.0.0.5:8080", "TTL", 5000)
        st = state(self.conn(self.b).cmd("LEADER", key))
        self.assertEqual((st["value"], st["term"], st["kind"], st["holders"]),
                         (b"10.0.0.5:8080", term, "exclusive", 1))
        self.assertGreater(st["rev"], 0)

    def test_nobody_leads(self):
        st = state(self.conn(self.b).cmd("LEADER", unique_key()))
        self.assertEqual((st["value"], st["term"], st["kind"], st["holders"]),
                         (None, 0, "free", 0))

    def test_binary_value(self):
        key, value = unique_key(), bytes(range(256))
        ca = self.conn(self.a)
        term = ca.cmd("CAMPAIGN", key, value)[1]
        st = state(self.conn(self.b).cmd("LEADER", key))
        self.assertEqual((st["value"], st["term"]), (value, term))

    def test_proclaim_on_a_seen_by_observe_on_b(self):
        key = unique_key()
        ca, cb = self.conn(self.a), self.conn(self.b)
        term = ca.cmd("CAMPAIGN", key, "v1")[1]
        first = state(cb.cmd("OBSERVE", key))
        self.assertEqual((first["value"], first["term"]), (b"v1", term))
        call = in_thread(cb.cmd, "OBSERVE", key, "AFTER", first["rev"], "WAIT", 5000)
        time.sleep(0.1)
        self.assertIsInstance(ca.cmd("PROCLAIM", key, "v2"), int)
        st = state(results([call], 10)[0])
        self.assertEqual((st["value"], st["term"], st["kind"]), (b"v2", term, "exclusive"))
        self.assertGreater(st["rev"], first["rev"])
        # and LEADER on A, which reads etcd too, agrees
        st = state(ca.cmd("LEADER", key))
        self.assertEqual((st["value"], st["term"]), (b"v2", term))

    def test_leader_reads_its_own_proclaim(self):
        """LEADER on A sent with A's PROCLAIM: the new value, though the
        record A keeps of the key was read from the backend before."""
        key = unique_key()
        ca = self.conn(self.a)
        term = ca.cmd("CAMPAIGN", key, "v1")[1]
        self.assertEqual(state(ca.cmd("LEADER", key))["value"], b"v1")
        for i in range(2, 6):
            ca.send(ca.encode("PROCLAIM", key, "v%d" % i) + ca.encode("LEADER", key))
            self.assertIsInstance(ca.read(), int)
            st = state(ca.read())
            self.assertEqual((st["value"], st["term"]), (b"v%d" % i, term))

    def test_proclaim_by_a_follower_is_refused(self):
        key = unique_key()
        self.conn(self.a).cmd("CAMPAIGN", key, "v1")
        reply = self.conn(self.b).cmd("PROCLAIM", key, "mine")
        self.assertTrue(str(reply).startswith("NOTHELD"), reply)
        self.assertEqual(state(self.conn(self.b).cmd("LEADER", key))["value"], b"v1")

    def test_resign_on_a_seen_as_free_on_b(self):
        key = unique_key()
        ca, cb = self.conn(self.a), self.conn(self.b)
        ca.cmd("CAMPAIGN", key, "v")
        first = state(cb.cmd("OBSERVE", key))
        self.assertEqual(first["kind"], "exclusive")
        self.assertEqual(ca.cmd("RESIGN", key), 0)
        st, _ = self.observe_until(cb, key, first["rev"], lambda s: s["kind"] == "free")
        self.assertEqual((st["value"], st["term"], st["holders"]), (None, 0, 0))

    def test_standby_on_b_leads_when_a_closes(self):
        key = unique_key()
        ca, standby = self.conn(self.a), self.conn(self.b)
        t1 = ca.cmd("CAMPAIGN", key, "a")[1]
        self.assertIs(standby.cmd("CAMPAIGN", key, "b", "WAIT", 0), NULL)
        standby.send(standby.encode("CAMPAIGN", key, "b", "WAIT", 10000))
        self.wait_queued(self.b, key)
        ca.close()      # the leader's process dies: its connection closes
        g = read_within(standby, 10)
        self.assertIsInstance(g, list, g)
        self.assertGreater(g[1], t1)
        st = state(self.conn(self.a).cmd("LEADER", key))
        self.assertEqual((st["value"], st["term"]), (b"b", g[1]))

    def test_follow_pushes_on_b(self):
        key = unique_key()
        f = self.conn(self.b)
        self.hello3(f)
        first = state(f.cmd("OBSERVE", key, "FOLLOW"))
        self.assertEqual(first["kind"], "free")
        leader = self.conn(self.a)
        got = []

        def push():
            p = read_within(f, SEEN)
            self.assertIsInstance(p, Push, p)
            self.assertEqual(p[:2], [b"observe", key.encode()])
            got.append(state(p[2]))
        term = leader.cmd("CAMPAIGN", key, "p1")[1]
        push()
        leader.cmd("PROCLAIM", key, "p2")
        push()
        leader.cmd("RESIGN", key)
        push()
        self.assertEqual([(g["value"], g["term"]) for g in got],
                         [(b"p1", term), (b"p2", term), (None, 0)])
        revs = [first["rev"]] + [g["rev"] for g in got]
        self.assertEqual(revs, sorted(set(revs)))
        self.assertEqual(f.cmd("OBSERVE", key, "UNFOLLOW"), 1)
        leader.cmd("CAMPAIGN", key, "p3")
        self.assertIsNone(read_within(f, 0.3))   # nothing it did not ask for

    def test_terms_never_decrease_across_handovers(self):
        """Leaders on A and B hand over to each other, through a release
        and through a waiting CAMPAIGN on the other daemon, while an
        observer on B keeps asking: the terms it sees never go back, and
        each is a term some leader was granted."""
        key = unique_key()
        obs = self.conn(self.b)
        rev = state(obs.cmd("LEADER", key))["rev"]
        seen, stop = [], []

        def watch():
            r = rev
            while not stop:
                reply = obs.cmd("OBSERVE", key, "AFTER", r, "WAIT", 200)
                if reply is NULL or reply is None:
                    continue
                st = state(reply)
                r = st["rev"]
                seen.append(st)
        watcher = in_thread(watch)
        terms = []
        daemons = (self.a, self.b)
        holder = self.conn(self.a)
        terms.append(holder.cmd("CAMPAIGN", key, "n0")[1])
        for i in range(1, 9):
            nxt = self.conn(daemons[i % 2])
            if i % 3 == 0:
                # the next one asks after the release
                holder.cmd("RESIGN", key)
                terms.append(nxt.cmd("CAMPAIGN", key, "n%d" % i, "WAIT", 10000)[1])
            else:
                nxt.send(nxt.encode("CAMPAIGN", key, "n%d" % i, "WAIT", 10000))
                time.sleep(0.05)
                holder.close()
                g = read_within(nxt, 10)
                self.assertIsInstance(g, list, g)
                terms.append(g[1])
            holder = nxt
        time.sleep(0.3)
        stop.append(1)
        results([watcher], 5)
        self.assertEqual(terms, sorted(set(terms)))
        held = [s["term"] for s in seen if s["kind"] != "free"]
        self.assertTrue(held, seen)
        self.assertEqual(held, sorted(held), seen)
        self.assertTrue(set(held) <= set(terms), (held, terms))
        self.assertEqual(held[-1], terms[-1])
        revs = [s["rev"] for s in seen]
        self.assertEqual(revs, sorted(set(revs)))

    def test_plain_lock_on_a_observed_on_b(self):
        key = unique_key()
        obs = self.conn(self.b)
        rev = state(obs.cmd("LEADER", key))["rev"]
        holder = self.conn(self.a)
        fence = holder.cmd("LOCK", key)[1]
        st, _ = self.observe_until(obs, key, rev, lambda s: s["kind"] != "free")
        self.assertEqual((st["value"], st["term"], st["kind"], st["holders"]),
                         (None, fence, "exclusive", 1))
        self.assertEqual(holder.cmd("UNLOCK", key), 0)
        self.observe_until(obs, key, st["rev"], lambda s: s["kind"] == "free")

    def test_shared_holders_on_both_daemons(self):
        key = unique_key()
        self.conn(self.a).cmd("LOCK", key, "SHARED")
        fb = self.conn(self.b).cmd("LOCK", key, "SHARED")[1]
        st = state(self.conn(self.a).cmd("LEADER", key))
        self.assertEqual((st["value"], st["term"], st["kind"], st["holders"]),
                         (None, fb, "shared", 2))
