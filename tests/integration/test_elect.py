"""Leader election and observing a key on the memory backend: CAMPAIGN,
PROCLAIM, RESIGN, LEADER and OBSERVE (long polls and RESP3 follows), with
redis-py and raw RESP connections."""

import threading
import time

import redis

from dlocktest.cases import DaemonTestCase
from dlocktest.env import unique_key
from dlocktest.resp import NULL, TOKEN_RE, Err, Push, read_within


def state(reply):
    """[value, term, revision, kind, holders] as a dict."""
    value, term, rev, kind, holders = reply
    if value is NULL:
        value = None
    if isinstance(kind, bytes):
        kind = kind.decode()
    return {"value": value, "term": term, "rev": rev, "kind": kind, "holders": holders}


class TestElection(DaemonTestCase):
    CONFIG = ""

    def test_campaign_leads_with_value_and_term(self):
        key = unique_key()
        r = self.client()
        token, term, valid = r.execute_command("CAMPAIGN", key, "10.0.0.5:8080", "TTL", 5000)
        self.assertRegex(token, TOKEN_RE)
        self.assertGreater(term, 0)
        self.assertEqual(valid, 5000)
        got = state(self.client().execute_command("LEADER", key))
        self.assertEqual(got["value"], b"10.0.0.5:8080")
        self.assertEqual(got["term"], term)
        self.assertEqual(got["kind"], "exclusive")
        self.assertEqual(got["holders"], 1)
        self.assertGreater(got["rev"], 0)

    def test_nobody_leads(self):
        got = state(self.client().execute_command("LEADER", unique_key()))
        self.assertEqual((got["value"], got["term"], got["kind"], got["holders"]),
                         (None, 0, "free", 0))

    def test_value_is_binary_safe(self):
        key = unique_key()
        value = bytes(range(256))
        self.client().execute_command("CAMPAIGN", key, value)
        r = self.client()
        # the first client still leads (redis-py keeps its connection)
        self.assertEqual(state(r.execute_command("LEADER", key))["value"], value)

    def test_standby_waits_in_fifo_and_leads_when_leader_leaves(self):
        key = unique_key()
        leader = self.raw()
        t1 = leader.cmd("CAMPAIGN", key, "a")[1]
        standby = self.client()
        self.assertIsNone(standby.execute_command("CAMPAIGN", key, "b", "WAIT", 0))
        got = {}
        th = threading.Thread(target=lambda: got.update(
            g=standby.execute_command("CAMPAIGN", key, "b", "WAIT", 5000)))
        th.start()
        time.sleep(0.1)
        leader.close()          # the leader's process dies: its connection closes
        th.join(5)
        self.assertGreater(got["g"][1], t1)     # a new, higher term
        st = state(self.client().execute_command("LEADER", key))
        self.assertEqual((st["value"], st["term"]), (b"b", got["g"][1]))

    def test_proclaim_changes_value_not_term(self):
        key = unique_key()
        r = self.client()
        term = r.execute_command("CAMPAIGN", key, "v1")[1]
        before = state(r.execute_command("LEADER", key))["rev"]
        rev = r.execute_command("PROCLAIM", key, "v2")
        self.assertGreater(rev, before)
        st = state(r.execute_command("LEADER", key))
        self.assertEqual((st["value"], st["term"], st["rev"]), (b"v2", term, rev))

    def test_proclaim_by_a_follower_is_refused(self):
        key = unique_key()
        self.client().execute_command("CAMPAIGN", key, "v1")
        with self.assertRaisesRegex(redis.ResponseError, "^NOTHELD"):
            self.client().execute_command("PROCLAIM", key, "mine")

    def test_proclaim_of_a_shared_key_is_refused(self):
        key = unique_key()
        r = self.client()
        r.execute_command("LOCK", key, "SHARED")
        with self.assertRaisesRegex(redis.ResponseError, "no leader"):
            r.execute_command("PROCLAIM", key, "v")

    def test_resign_frees_the_key(self):
        key = unique_key()
        r = self.client()
        r.execute_command("CAMPAIGN", key, "v")
        self.assertEqual(r.execute_command("RESIGN", key), 0)
        self.assertEqual(state(r.execute_command("LEADER", key))["kind"], "free")
        with self.assertRaisesRegex(redis.ResponseError, "^NOTHELD"):
            r.execute_command("RESIGN", key)

    def test_campaign_again_is_reentrant_and_sets_the_value(self):
        key = unique_key()
        r = self.client()
        t1 = r.execute_command("CAMPAIGN", key, "a")[1]
        t2 = r.execute_command("CAMPAIGN", key, "b")[1]
        self.assertEqual(t1, t2)
        self.assertEqual(state(r.execute_command("LEADER", key))["value"], b"b")
        self.assertEqual(r.execute_command("RESIGN", key), 1)
        self.assertEqual(r.execute_command("RESIGN", key), 0)

    def test_bad_arguments_keep_the_connection(self):
        r = self.client()
        key = unique_key()
        for args, what in [
                (("CAMPAIGN", key, "x" * 1025), "too long"),
                (("CAMPAIGN", key, "v", "SHARED"), "syntax error: CAMPAIGN"),
                (("CAMPAIGN", key, "v", "LIMIT", 2), "syntax error: CAMPAIGN"),
                (("CAMPAIGN", key, "v", "DETACH"), "DETACH needs"),
                (("PROCLAIM", key, "x" * 1025), "too long"),
                (("OBSERVE", key, "AFTER", -1), "AFTER must"),
                (("OBSERVE", key, "WAIT", "x"), "WAIT must"),
                (("OBSERVE", key, "SOON"), "syntax error: OBSERVE"),
                (("OBSERVE", key, "FOLLOW"), "RESP3"),
                (("LEADER", ""), "key is empty")]:
            with self.assertRaisesRegex(redis.ResponseError, what):
                r.execute_command(*args)
        self.assertIs(r.execute_command("PING"), True)

    def test_detached_leader_proclaims_and_outlives_its_session(self):
        key = unique_key()
        r = self.raw()
        token, term, _ = r.cmd("CAMPAIGN", key, "d1", "TTL", 10000, "DETACH")
        self.assertIsInstance(r.cmd("PROCLAIM", key, "d2"), int)
        r.close()
        c = self.client()
        st = state(c.execute_command("LEADER", key))
        self.assertEqual((st["value"], st["term"]), (b"d2", term))
        self.assertEqual(c.execute_command("UNLOCK", key, token), 0)
        self.assertEqual(state(c.execute_command("LEADER", key))["kind"], "free")


ADMIN_PASSWORD = "elect admin"


class TestObserve(DaemonTestCase):
    CONFIG = "auth:\n  admin_password: \"%s\"\n" % ADMIN_PASSWORD

    def test_observe_without_after_answers_at_once(self):
        key = unique_key()
        r = self.client()
        self.assertEqual(state(r.execute_command("OBSERVE", key)),
                         state(r.execute_command("LEADER", key)))

    def test_observe_waits_for_the_next_change(self):
        key = unique_key()
        obs = self.client()
        rev = state(obs.execute_command("LEADER", key))["rev"]
        got = {}
        th = threading.Thread(target=lambda: got.update(
            s=obs.execute_command("OBSERVE", key, "AFTER", rev, "WAIT", 5000)))
        th.start()
        time.sleep(0.2)
        self.assertNotIn("s", got)      # nothing changed yet: it waits
        leader = self.client()
        term = leader.execute_command("CAMPAIGN", key, "here")[1]
        th.join(5)
        st = state(got["s"])
        self.assertEqual((st["value"], st["term"]), (b"here", term))
        self.assertGreater(st["rev"], rev)

    def test_observe_wait_runs_out(self):
        key = unique_key()
        r = self.client()
        rev = state(r.execute_command("LEADER", key))["rev"]
        t0 = time.monotonic()
        self.assertIsNone(r.execute_command("OBSERVE", key, "AFTER", rev, "WAIT", 200))
        self.assertGreaterEqual(time.monotonic() - t0, 0.15)
        self.assertIsNone(r.execute_command("OBSERVE", key, "AFTER", rev, "WAIT", 0))
        self.assertIs(r.execute_command("PING"), True)

    def test_a_loop_sees_every_change_of_leader(self):
        """Leaders come and go faster than the observer asks again: each
        answer is the first change after the revision it gives, so the
        observer's loop sees every term, in order."""
        key = unique_key()
        obs = self.client()
        rev = state(obs.execute_command("LEADER", key))["rev"]
        terms = []
        for i in range(3):
            c = self.raw()
            terms.append(c.cmd("CAMPAIGN", key, "n%d" % i)[1])
            c.close()
        time.sleep(0.2)
        seen = []
        while True:
            reply = obs.execute_command("OBSERVE", key, "AFTER", rev, "WAIT", 300)
            if reply is None:
                break
            st = state(reply)
            self.assertGreater(st["rev"], rev)
            rev = st["rev"]
            seen.append((st["term"], st["value"]))
        self.assertEqual([t for t, v in seen if t != 0], terms)
        self.assertEqual([v for t, v in seen if t != 0], [b"n0", b"n1", b"n2"])
        self.assertEqual(seen[-1], (0, None))   # and that nobody leads now
        self.assertEqual(sorted(t for t, v in seen if t), [t for t, v in seen if t])

    def test_observe_a_plain_lock(self):
        key = unique_key()
        obs = self.client()
        rev = state(obs.execute_command("LEADER", key))["rev"]
        holder = self.client()
        fence = holder.execute_command("LOCK", key)[1]
        st = state(obs.execute_command("OBSERVE", key, "AFTER", rev, "WAIT", 2000))
        self.assertEqual((st["value"], st["term"], st["kind"], st["holders"]),
                         (None, fence, "exclusive", 1))
        # "tell me when it is free"
        got = {}
        th = threading.Thread(target=lambda: got.update(
            s=obs.execute_command("OBSERVE", key, "AFTER", st["rev"], "WAIT", 5000)))
        th.start()
        time.sleep(0.1)
        holder.execute_command("UNLOCK", key)
        th.join(5)
        self.assertEqual(state(got["s"])["kind"], "free")

    def test_shared_holders_report_the_highest_fence(self):
        key = unique_key()
        a, b = self.client(), self.client()
        a.execute_command("LOCK", key, "SHARED")
        fb = b.execute_command("LOCK", key, "SHARED")[1]
        st = state(self.client().execute_command("LEADER", key))
        self.assertEqual((st["value"], st["term"], st["kind"], st["holders"]),
                         (None, fb, "shared", 2))

    def test_follow_pushes_each_change(self):
        key = unique_key()
        f = self.raw()
        f.cmd("HELLO", 3)
        first = state(f.cmd("OBSERVE", key, "FOLLOW"))
        self.assertEqual(first["kind"], "free")
        leader = self.client()
        term = leader.execute_command("CAMPAIGN", key, "p1")[1]
        leader.execute_command("PROCLAIM", key, "p2")
        leader.execute_command("RESIGN", key)
        pushes = [read_within(f, 2) for _ in range(3)]
        for p in pushes:
            self.assertIsInstance(p, Push)
            self.assertEqual(p[:2], [b"observe", key.encode()])
        got = [state(p[2]) for p in pushes]
        self.assertEqual([(g["value"], g["term"]) for g in got],
                         [(b"p1", term), (b"p2", term), (None, 0)])
        revs = [g["rev"] for g in got]
        self.assertEqual(revs, sorted(revs))
        self.assertGreater(revs[0], first["rev"])
        self.assertEqual(f.cmd("OBSERVE", key, "UNFOLLOW"), 1)
        self.assertEqual(f.cmd("OBSERVE", key, "UNFOLLOW"), 0)
        leader.execute_command("CAMPAIGN", key, "p3")
        self.assertIsNone(read_within(f, 0.3))   # nothing it did not ask for

    def test_a_session_that_did_not_follow_gets_no_push(self):
        key = unique_key()
        other = self.raw()
        other.cmd("HELLO", 3)
        other.cmd("LEADER", key)
        self.client().execute_command("CAMPAIGN", key, "x")
        self.assertIsNone(read_within(other, 0.3))

    def test_observer_closing_while_it_waits(self):
        key = unique_key()
        for _ in range(20):
            c = self.raw()
            c.send(c.encode("OBSERVE", key, "AFTER", 10 ** 12))
            c.close()
        self.client().execute_command("CAMPAIGN", key, "x")
        self.assertIs(self.client().execute_command("PING"), True)

    def test_loss_answers_a_waiting_observe(self):
        """A leader that observes on its own connection is told of its loss
        at once, as a LOCK in a queue is."""
        key, other = unique_key(), unique_key()
        c = self.raw()
        c.cmd("CAMPAIGN", key, "me")
        rev = state(c.cmd("LEADER", other))["rev"]
        c.send(c.encode("OBSERVE", other, "AFTER", rev + 10 ** 9))
        admin = self.client(username="admin", password=ADMIN_PASSWORD)
        self.assertEqual(admin.execute_command("UNLOCK", key, "FORCE"), 1)
        reply = read_within(c, 3)
        self.assertIsInstance(reply, Err)
        self.assertTrue(reply.startswith("LOST"), reply)

    def test_info_counts_observers(self):
        key = unique_key()
        f = self.raw()
        f.cmd("HELLO", 3)
        f.cmd("OBSERVE", key, "FOLLOW")
        info = self.info()
        self.assertEqual(int(info["observe_follows"]), 1)
        self.assertGreaterEqual(int(info["observe_keys"]), 1)
