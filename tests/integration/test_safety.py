"""The safety test (tests/faults) in its SHORT mode, and its checker.

TestChecker feeds the checker made-up histories: it must report a double
grant, a repeated or falling fence, a stale write the resource accepted and
a lost update, and excuse an overlap only when a fault kept a holder from
hearing of its loss. With leaders and observers (the election scenarios) it
must report an observer that saw a revision or a term go back, missed a
term, saw a leader's value that is not the leader's, or ended on another
state than the final LEADER answer, and a refused PROCLAIM. TestCheckerSets
does the same with sets of keys (LOCKALL): each key of a set is judged with
the single holders of that key, and a set granted in part (an answer short
of a grant, a key left held after a null answer, a write with a fence of no
whole grant) is reported.

TestSafetyShort runs one round of a representative subset of backend x fault
(see tests/faults/; `make check-faults` runs them all, several
rounds each) against the real daemon, and two independent memory daemons
used as one lock service, which the checker must catch. Under DLOCKD_WRAPPER
(valgrind) durations are scaled up and the faults whose timing does not
survive are left out; the run prints which.
"""

import os
import shutil
import unittest

from dlocktest.env import DLOCKD

from faults import check, safety

KEY = "k"
TTL = 1200
PARAMS = {"ttl": TTL, "margin_ms": 240, "backend": "redis", "notice_bound": 0.5,
          "recovery_from": None, "run_end": 100.0}
WORKERS = {"w1": {"daemon": "d0", "key": KEY}, "w2": {"daemon": "d1", "key": KEY},
           "w3": {"daemon": "d0", "key": KEY}}
# the multi-key scenarios': set workers s1 (d0) and s2 (d1), the single
# key holders w1 to w3 (of KEY) and w4 (of b)
SET_WORKERS = dict(WORKERS, s1={"daemon": "d0", "key": None, "role": "lockall"},
                   s2={"daemon": "d1", "key": None, "role": "lockall"},
                   w4={"daemon": "d1", "key": "b"})
# the election scenarios': one daemon, two leaders and a plain holder
ELECT_WORKERS = {"w1": {"daemon": "d0", "key": KEY, "role": "campaign"},
                 "w2": {"daemon": "d0", "key": KEY, "role": "campaign"},
                 "w3": {"daemon": "d0", "key": KEY, "role": "lock"}}


class History:
    """Builds worker events and the resource's state by hand: the fenced reads
    and writes are played against a model of the resource in time order."""

    def __init__(self):
        self.events = []
        self.ops = []     # (t, w, key, fence, "read" | "write", forced outcome)
        self.keys = [KEY]  # the keys of the resource

    def ev(self, t, w, ev, **kw):
        kw.update(t=t, w=w, ev=ev)
        self.events.append(kw)

    def hold(self, w, fence, lock, grant, end, end_ev="unlock_sent", read=None, write=None,
             accepted=None, how="push"):
        """One holding: LOCK at lock, granted at grant, a fenced read at read
        and a write at write (accepted as the fence rule says, unless
        accepted says otherwise), and its end (unlock_sent, or told)."""
        self.ev(lock, w, "lock_sent", n=1)
        self.ev(grant, w, "grant", n=1, fence=fence, validity=TTL - 1, plan=10, sent=lock)
        if read is not None:
            self.ops.append((read, w, KEY, fence, "read", None))
        if write is not None:
            self.ops.append((write, w, KEY, fence, "write", accepted))
        if end_ev == "told":
            self.ev(end, w, "told", how=how, fence=fence)
        else:
            self.ev(end, w, end_ev, fence=fence)

    def hold_set(self, w, grants, lock, grant, end, keys=None, read=None, write=None,
                 end_ev="unlock_sent"):
        """One LOCKALL by set worker w: sent at lock, answered at grant with
        grants [(key, fence)] (keys: the keys asked, by default those of
        grants), a fenced read of each key granted at read and a write at
        write, and UNLOCKALL (or end_ev) at end."""
        keys = keys or [k for k, _ in grants]
        for k in keys:
            if k not in self.keys:
                self.keys.append(k)
        self.ev(lock, w, "lock_sent", n=1, cmd="LOCKALL", keys=keys)
        entries = [{"key": k, "fence": f, "validity": TTL - 1, "token": "%s/%s" % (k, f)}
                   for k, f in grants]
        self.ev(grant, w, "grant", n=1, keys=keys, set=entries, plan=10, sent=lock)
        for k, f in grants:
            if read is not None:
                self.ops.append((read, w, k, f, "read", None))
            if write is not None:
                self.ops.append((write, w, k, f, "write", None))
        self.ev(end, w, end_ev, cmd="UNLOCKALL", keys=[k for k, _ in grants],
                fences=[f for _, f in grants])

    def play(self):
        """The resource's state of each key after the reads and writes."""
        counter = {k: 0 for k in self.keys}
        max_fence = {k: 0 for k in self.keys}
        writes = {k: [] for k in self.keys}
        stale = {k: 0 for k in self.keys}
        value = {}
        n = {}
        for t, w, key, fence, op, forced in sorted(self.ops):
            if op == "read":
                if fence >= max_fence[key]:
                    max_fence[key] = fence
                    value[w, key, fence] = counter[key]
                    self.ev(t, w, "read_ok", fence=fence, key=key, value=counter[key], sent=t)
                else:
                    self.ev(t, w, "read_rejected", fence=fence, key=key, err="STALE", sent=t)
                continue
            if (w, key, fence) not in value:
                continue  # no write without a read
            n[w] = n.get(w, 0) + 1
            tag = "%s:%d" % (w, n[w])
            v = value[w, key, fence] + 1
            self.ev(t, w, "write_sent", fence=fence, key=key, value=v, tag=tag)
            ok = fence >= max_fence[key] if forced is None else forced
            if ok:
                max_fence[key] = max(max_fence[key], fence)
                counter[key] = v
                writes[key].append((fence, v, tag))
                self.ev(t + 0.001, w, "write_ok", fence=fence, key=key, value=v, tag=tag)
            else:
                stale[key] += 1
                self.ev(t + 0.001, w, "write_rejected", fence=fence, key=key, value=v,
                        tag=tag, err="STALE")
        return {k: {"counter": counter[k], "max_fence": max_fence[k], "writes": writes[k],
                    "stale_reads": 0, "stale_writes": stale[k]} for k in self.keys}

    def check(self, faults=(), params=None, counter=None, observed=None, workers=None):
        state = self.play()
        if counter is not None:
            state[KEY]["counter"] = counter
        self.events.sort(key=lambda e: e["t"])
        if workers is None:
            workers = WORKERS if observed is None else ELECT_WORKERS
        return check.check(self.events, workers, list(faults), state,
                           dict(PARAMS, **(params or {})),
                           observed.observed() if observed is not None else None)


class Observed:
    """Observers' logs made by hand (faults/observer.py's events), and the
    final LEADER answer."""

    def __init__(self, remote=False):
        self.events = []
        self.epochs = {}    # observer -> its epoch number
        self.revs = {}      # observer -> the revision of its last answer
        self.final = None
        self.remote = remote    # the daemons share a backend (redis, etcd)
        self.daemons = {}   # observer -> its daemon (default d0)
        self.finals = {}    # daemon -> the final state, besides d0's

    def _ev(self, t, o, ev, **kw):
        kw.update(t=t, o=o, ev=ev, n=self.epochs[o])
        self.events.append(kw)

    @staticmethod
    def state(rev, term, value=None):
        return {"rev": rev, "term": term, "value": value,
                "kind": "exclusive" if term else "free", "holders": 1 if term else 0}

    def epoch(self, t, o, rev, term=0, value=None):
        """LEADER answered at t: a new epoch."""
        self.epochs[o] = self.epochs.get(o, 0) + 1
        self._ev(t, o, "epoch", sent=t - 0.001, **self.state(rev, term, value))
        self.revs[o] = rev

    def answer(self, t, o, rev, term=0, value=None):
        """An OBSERVE AFTER the last revision answered at t."""
        self._ev(t, o, "state", sent=t - 0.001, after=self.revs[o],
                 **self.state(rev, term, value))
        self.revs[o] = rev

    def none(self, t, o, wait=0.3):
        """An OBSERVE sent at t whose WAIT ran out."""
        self._ev(t + wait, o, "none", sent=t, after=self.revs[o])

    def observed(self):
        final = {"d0": {KEY: self.final}} if self.final else {}
        final.update({d: {KEY: st} for d, st in self.finals.items()})
        return {"events": sorted(self.events, key=lambda e: e["t"]),
                "observers": {o: {"daemon": self.daemons.get(o, "d0"), "key": KEY}
                              for o in self.epochs},
                "final": final, "remote": self.remote}


def elect_history(skip=None, term_back=False):
    """Leaders w1 (term 10, proclaims w1/1) and w2 (11), a plain holder w3
    (12), and an observer o1 that sees them all (but skip's term; with
    term_back, term 10 again after 11) and waits at the end."""
    h = History()
    h.hold("w1", 10, 1.0, 1.01, 1.5, read=1.02, write=1.4)
    h.ev(1.2, "w1", "proclaim_sent", value="w1/1", fence=10)
    h.ev(1.21, "w1", "proclaim", value="w1/1", sent=1.2, reply="5", fence=10)
    h.hold("w2", 11, 1.1, 1.51, 2.0, read=1.52, write=1.9)
    h.hold("w3", 12, 1.2, 2.01, 2.5, read=2.02, write=2.4)
    ob = Observed()
    ob.epoch(0.5, "o1", 3)
    seen = [(1.02, 10, "w1"), (1.22, 10, "w1/1"), (1.52, 11, "w2"), (2.02, 12, None),
            (2.52, 0, None)]
    if term_back:
        seen.insert(3, (1.6, 10, "w1/1"))
    for rev, (t, term, value) in enumerate(seen, 4):
        if term != skip:
            ob.answer(t, "o1", rev, term, value)
    ob.none(2.6, "o1")
    ob.final = Observed.state(ob.revs["o1"], 0)
    return h, ob


class TestChecker(unittest.TestCase):

    def assertClean(self, res):
        self.assertEqual(res["violations"], [], res["violations"])
        self.assertEqual(res["failures"], [], res["failures"])

    def test_one_holder_at_a_time_is_clean(self):
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 1.5, read=1.02, write=1.4)
        h.hold("w2", 11, 1.2, 1.51, 2.0, read=1.52, write=1.9)
        h.hold("w3", 12, 1.9, 2.01, 2.5, end_ev="told", read=2.02)
        h.hold("w1", 13, 2.4, 2.51, 3.0, read=2.52, write=2.9)
        res = h.check()
        self.assertClean(res)
        self.assertEqual(res["counts"]["grants"], 4)
        self.assertEqual(res["counts"]["writes_accepted"], 3)

    def test_double_grant_is_a_violation(self):
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 1.5, read=1.02, write=1.4)
        h.hold("w2", 11, 1.2, 1.3, 2.0, read=1.31, write=1.9)
        res = h.check()
        self.assertEqual([v["kind"] for v in res["violations"]], ["double grant"])
        self.assertIn("w1@d0", res["violations"][0]["text"])

    def test_told_before_the_other_grant_is_clean(self):
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 1.29, end_ev="told", how="lost_err", read=1.02)
        h.hold("w2", 11, 1.2, 1.3, 2.0, read=1.31, write=1.9)
        self.assertClean(h.check())

    def test_overlap_of_a_paused_holder_is_excused_and_its_write_rejected(self):
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 4.1, read=1.02, write=4.0)   # stale: rejected
        h.hold("w2", 11, 2.5, 2.6, 3.0, read=2.61, write=2.9)
        stop = {"kind": "client_stop", "target": "w1", "start": 1.1, "end": 3.9}
        res = h.check([stop])
        self.assertClean(res)
        self.assertEqual(res["counts"]["overlaps_paused"], 1)
        self.assertEqual(res["counts"]["stale_writes_rejected"], 1)

    def test_overlap_of_a_holder_whose_daemon_was_stopped_is_excused(self):
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 3.2, end_ev="told", how="lost_err", read=1.02)
        h.hold("w2", 11, 2.5, 2.6, 3.0, read=2.61, write=2.9)
        stop = {"kind": "daemon_stop", "target": "d0", "start": 1.1, "end": 3.1}
        res = h.check([stop])
        self.assertClean(res)
        self.assertEqual(res["counts"]["overlaps_paused"], 1)
        # a stop of the other daemon excuses nothing
        stop = dict(stop, target="d1")
        res = h.check([stop])
        self.assertEqual([v["kind"] for v in res["violations"]], ["double grant"])

    def test_stale_write_accepted_is_a_failure(self):
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 4.1, read=1.02, write=4.0, accepted=True)
        h.hold("w2", 11, 2.5, 2.6, 3.0, read=2.61, write=2.9)
        stop = {"kind": "client_stop", "target": "w1", "start": 1.1, "end": 3.9}
        res = h.check([stop], counter=2)
        kinds = [f["kind"] for f in res["failures"]]
        self.assertIn("stale write accepted", kinds)

    def test_lost_update_is_a_failure(self):
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 1.5, read=1.02, write=1.4)
        h.hold("w2", 11, 1.2, 1.51, 2.0, read=1.52, write=1.9)
        res = h.check(counter=1)
        self.assertEqual([f["kind"] for f in res["failures"]], ["lost update"])

    def test_fence_repeated_or_going_down_is_a_violation(self):
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 1.5)
        h.hold("w2", 10, 1.2, 1.51, 2.0)
        h.hold("w3", 9, 1.9, 2.01, 2.5)
        kinds = sorted(v["kind"] for v in h.check()["violations"])
        self.assertEqual(kinds, ["fence repeated", "fence went down"])

    def test_grant_with_too_little_validity_is_a_failure(self):
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 1.5)
        h.events[1]["validity"] = 200
        self.assertEqual([f["kind"] for f in h.check()["failures"]], ["late grant"])

    def test_grant_with_more_validity_than_the_ttl_is_a_failure(self):
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 1.5)
        h.events[1]["validity"] = TTL + 1
        self.assertEqual([f["kind"] for f in h.check()["failures"]], ["validity"])

    def test_grant_with_little_of_the_daemons_etcd_lease_left_is_clean(self):
        # on etcd the validity is what is left of the daemon's lease, and
        # the margin that of the validity promised: below the TTL's margin
        # is allowed, nothing left is not
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 1.5)
        h.events[1]["validity"] = 100
        self.assertClean(h.check(params={"backend": "etcd"}))
        self.assertEqual([f["kind"] for f in h.check()["failures"]], ["late grant"])
        h.events[1]["validity"] = 0
        self.assertEqual([f["kind"] for f in h.check(params={"backend": "etcd"})["failures"]],
                         ["late grant"])

    def test_late_notice_after_a_daemon_resumes_is_a_failure(self):
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 4.0, end_ev="told", how="lost_err")
        stop = {"kind": "daemon_stop", "target": "d0", "start": 1.1, "end": 3.0}
        for backend in ("redis", "etcd"):
            res = h.check([stop], params={"backend": backend})
            self.assertEqual([f["kind"] for f in res["failures"]], ["late notice"], backend)
        # session locks on the memory backend are not lost by a stop
        self.assertClean(h.check([stop], params={"backend": "memory"}))

    def test_holder_without_quorum_must_be_told_before_the_longest_lease(self):
        # redlock: d0 cannot reach a majority from 2.0 to 5.0; no lease it
        # had confirmed lasts past 2.0 + TTL (3.2), its holders hear by then
        # + notice_bound (3.7)
        lost = {"kind": "majority_lost", "target": "node1+node2", "start": 2.0, "end": 5.0,
                "quorum_lost": ["d0"]}
        params = {"backend": "redlock"}
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 3.2, end_ev="told", how="push")
        h.hold("w2", 11, 3.0, 3.3, 4.5)                 # d1: quorum kept
        self.assertClean(h.check([lost], params=params))
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 4.2, end_ev="told", how="push")
        res = h.check([lost], params=params)
        self.assertEqual([f["kind"] for f in res["failures"]], ["not told"])
        # a fault shorter than the lease asks nothing of the holders
        self.assertClean(h.check([dict(lost, end=3.0)], params=params))
        # an EXTEND to 2000 ms answered before the fault: heard by 4.5
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 4.2, end_ev="told", how="push")
        h.ev(1.5, "w1", "extend", ms=2000, sent=1.49, reply="1998", fence=10)
        self.assertClean(h.check([lost], params=params))

    def test_grant_or_error_without_quorum(self):
        lost = {"kind": "majority_blackhole", "target": "d1/node0+node1", "start": 2.0,
                "end": 5.0, "quorum_lost": ["d0"]}
        params = {"backend": "redlock"}
        # a local handoff under the lease confirmed before the fault: clean
        h = History()
        h.hold("w1", 10, 2.5, 2.6, 2.8)
        h.events[1]["validity"] = 700
        self.assertClean(h.check([lost], params=params))
        # validity past 2.0 + 1.25 x TTL (+ 0.25 s in flight): granted without a quorum
        h.events[1]["validity"] = 1190
        res = h.check([lost], params=params)
        self.assertEqual([f["kind"] for f in res["failures"]], ["grant without quorum"])
        # a LOCK that failed otherwise than with -BACKEND
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 1.5)
        h.ev(3.0, "w1", "lock_err", n=1, err="BACKEND the lock backend failed (redlock: ...)")
        h.ev(3.1, "w3", "lock_err", n=1, err="ERR something else")
        h.ev(3.2, "w2", "lock_err", n=1, err="ERR on d1, which kept its quorum")
        res = h.check([lost], params=params)
        self.assertEqual([f["kind"] for f in res["failures"]], ["not -BACKEND"])
        self.assertEqual(res["counts"]["backend_errors_without_quorum"], 2)

    def test_observers_that_saw_every_term_are_clean(self):
        h, ob = elect_history()
        # o2 began after w1's CAMPAIGN: term 10 is not asked of it
        ob.epoch(1.05, "o2", 4, 10, "w1")
        ob.answer(1.52, "o2", 6, 11, "w2")
        ob.answer(2.02, "o2", 7, 12)
        ob.answer(2.52, "o2", 8, 0)
        ob.none(2.6, "o2")
        res = h.check(observed=ob)
        self.assertClean(res)
        self.assertEqual(res["counts"]["proclaims"], 1)
        self.assertEqual(res["counts"]["observer_epochs"], 2)
        self.assertEqual(res["counts"]["terms_checked"], 3 + 2)

    def test_a_new_epoch_counts_revisions_from_the_start(self):
        # o1 connects again at 1.3 (a daemon started again numbers its
        # changes from 1)
        h, _ = elect_history()
        ob = Observed()
        ob.epoch(0.5, "o1", 3)
        ob.answer(1.02, "o1", 4, 10, "w1")
        ob.epoch(1.3, "o1", 1, 10, "w1/1")
        for t, rev, term, value in [(1.52, 2, 11, "w2"), (2.02, 3, 12, None),
                                    (2.52, 4, 0, None)]:
            ob.answer(t, "o1", rev, term, value)
        ob.none(2.6, "o1")
        ob.final = Observed.state(4, 0)
        self.assertClean(h.check(observed=ob))

    def test_observer_seeing_a_term_or_revision_go_back_is_a_violation(self):
        h, ob = elect_history(term_back=True)
        res = h.check(observed=ob)
        self.assertEqual([v["kind"] for v in res["violations"]], ["term went back"])
        h, ob = elect_history()
        ob.events[3]["rev"] = 4      # w2's term at the revision of w1's
        res = h.check(observed=ob)
        self.assertEqual([v["kind"] for v in res["violations"]], ["revision went back"])

    def test_observer_missing_a_term_is_a_violation(self):
        h, ob = elect_history(skip=11)
        res = h.check(observed=ob)
        self.assertEqual([v["kind"] for v in res["violations"]], ["missed term"])
        self.assertIn("never saw term 11, granted to w2", res["violations"][0]["text"])
        # nor may a plain LOCK's term be missed
        h, ob = elect_history(skip=12)
        self.assertEqual([v["kind"] for v in h.check(observed=ob)["violations"]],
                         ["missed term"])
        # an observer that stopped before the grant is not asked for it
        h, ob = elect_history(skip=11)
        ob.events = [e for e in ob.events if e["t"] < 1.5]
        ob.final = None
        self.assertClean(h.check(observed=ob))

    def test_remote_observer_on_the_other_daemon_asked_for_every_term(self):
        """A shared backend: an observer on d1 is asked for the terms
        granted through d0 too (each lasted 0.5 s, away from any fault)."""
        h, _ = elect_history()
        ob = Observed(remote=True)
        ob.daemons["o2"] = "d1"
        ob.epoch(0.5, "o2", 3)
        for rev, (t, term, value) in enumerate([(1.03, 10, "w1"), (1.53, 11, "w2"),
                                                (2.03, 12, None), (2.53, 0, None)], 4):
            ob.answer(t, "o2", rev, term, value)
        ob.none(2.6, "o2")
        self.assertClean(h.check(observed=ob))
        # without term 11: missed, though no worker of d1 held it
        ob.events = [e for e in ob.events if e.get("term") != 11]
        res = h.check(observed=ob)
        self.assertEqual([v["kind"] for v in res["violations"]], ["missed term"])
        # a term lost in a backend fault (and the second after it) is excused
        fault = {"kind": "backend_restart", "target": "backend", "start": 1.5, "end": 1.6}
        res = h.check([fault], observed=ob)
        self.assertEqual(res["violations"], [])
        self.assertEqual(res["counts"]["terms_excused_skipped"], 1)

    def test_remote_term_going_back_in_a_new_epoch_is_a_violation(self):
        """A shared backend's terms are its fences: an observer that
        connects again (here to the other daemon) never sees an older one."""
        h, _ = elect_history()
        ob = Observed(remote=True)
        ob.epoch(0.5, "o1", 3)
        ob.answer(1.52, "o1", 4, 11, "w2")
        ob.epoch(1.6, "o1", 1, 10, "w1/1")
        res = h.check(observed=ob)
        self.assertIn("term went back", [v["kind"] for v in res["violations"]])

    def test_remote_daemons_ending_on_different_states_is_a_failure(self):
        h, ob = elect_history()
        ob.remote = True
        ob.finals["d1"] = Observed.state(2, 12)
        res = h.check(observed=ob)
        self.assertIn("the daemons' final LEADER answers", " ".join(
            f["text"] for f in res["failures"] if f["kind"] == "final state"))

    def test_leader_value_of_another_is_a_violation(self):
        h, ob = elect_history()
        ob.events[3]["value"] = "w1/1"   # term 11 is w2's
        res = h.check(observed=ob)
        self.assertEqual([v["kind"] for v in res["violations"]], ["value of another"])

    def test_observer_ending_on_another_state_is_a_failure(self):
        h, ob = elect_history()
        ob.final = Observed.state(9, 13, "w1")
        res = h.check(observed=ob)
        self.assertEqual([f["kind"] for f in res["failures"]], ["final state"])
        self.assertEqual(res["violations"], [])

    def test_proclaim_refused_is_a_failure(self):
        h, ob = elect_history()
        h.ev(1.3, "w1", "proclaim", value="w1/2", sent=1.29, reply="NOTHELD no", fence=10)
        res = h.check(observed=ob)
        self.assertEqual([f["kind"] for f in res["failures"]], ["proclaim refused"])

    def test_worker_killed_while_holding_ends_at_its_death(self):
        h = History()
        h.ev(1.0, "w1", "lock_sent", n=1)
        h.ev(1.01, "w1", "grant", n=1, fence=10, validity=TTL, plan=10, sent=1.0)
        h.hold("w2", 11, 1.2, 1.3, 2.0)
        kill = {"kind": "client_kill", "target": "w1", "start": 1.25, "end": 1.25}
        self.assertClean(h.check([kill]))


class TestCheckerSets(unittest.TestCase):
    """LOCKALL's sets: per-key rules on every key of a set, and a set never
    granted partly."""

    def assertClean(self, res):
        self.assertEqual(res["violations"], [], res["violations"])
        self.assertEqual(res["failures"], [], res["failures"])

    def check(self, h, faults=(), params=None):
        return h.check(list(faults), params=params, workers=SET_WORKERS)

    def test_sets_and_single_holders_one_at_a_time_are_clean(self):
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 1.5, read=1.02, write=1.4)
        h.hold_set("s1", [("b", 11), (KEY, 12)], 1.1, 1.51, 2.0, read=1.52, write=1.9)
        h.hold("w2", 13, 1.6, 2.01, 2.5, read=2.02, write=2.4)
        h.hold_set("s2", [("b", 14), ("c", 15)], 1.7, 2.01, 2.5, read=2.02, write=2.4)
        res = self.check(h)
        self.assertClean(res)
        self.assertEqual(res["counts"]["grants"], 6)
        self.assertEqual(res["counts"]["set_grants"], 2)
        self.assertEqual(res["counts"]["writes_accepted"], 6)

    def test_set_overlapping_a_single_holder_of_one_of_its_keys_is_a_violation(self):
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 1.5, read=1.02, write=1.4)
        h.hold_set("s1", [("b", 11), (KEY, 12)], 1.1, 1.3, 2.0, read=1.31, write=1.9)
        res = self.check(h)
        self.assertEqual([(v["kind"], v["key"]) for v in res["violations"]],
                         [("double grant", KEY)])

    def test_loss_of_one_key_of_a_set_ends_that_key_only(self):
        # s1 is told at 1.4 that it lost KEY (w2 is granted it at 1.45); it
        # keeps b until its UNLOCKALL, and nobody else takes b meanwhile
        h = History()
        h.hold_set("s1", [("b", 10), (KEY, 11)], 1.0, 1.01, 2.0, read=1.02)
        h.ev(1.4, "s1", "told", how="push", key=KEY, fence=11)
        h.hold("w2", 12, 1.3, 1.45, 1.8, read=1.46, write=1.7)
        self.assertClean(self.check(h))
        # ... but a single holder granted b before the UNLOCKALL overlaps s1
        h.hold("w4", 13, 1.3, 1.5, 1.9)
        res = self.check(h)
        self.assertEqual([(v["kind"], v["key"]) for v in res["violations"]],
                         [("double grant", "b")])

    def test_partial_grant_is_a_violation(self):
        # LOCKALL of three keys answered with two grants
        h = History()
        h.hold_set("s1", [("b", 10), (KEY, 11)], 1.0, 1.01, 1.5, keys=["b", KEY, "c"])
        res = self.check(h)
        self.assertEqual([v["kind"] for v in res["violations"]], ["partial set"])
        self.assertIn("2 grant(s) for 3 keys", res["violations"][0]["text"])
        self.assertEqual([x.brief()[:2] for x in res["violations"][0]["holders"]],
                         ["s1", "s1"])
        # a worker that writes with a fence of that part is caught too
        h.ev(1.45, "s1", "write_sent", fence=10, key="b", value=1, tag="s1:9")
        res = self.check(h)
        self.assertEqual(sorted(v["kind"] for v in res["violations"]),
                         ["fence not granted", "partial set"])

    def test_entry_that_is_not_a_grant_is_a_violation(self):
        h = History()
        h.hold_set("s1", [("b", 10), (KEY, 11)], 1.0, 1.01, 1.5)
        h.events[1]["set"][1] = {"key": None, "fence": None, "raw": "None"}
        res = self.check(h)
        self.assertEqual([v["kind"] for v in res["violations"]], ["partial set"])
        self.assertIn("entry 2", res["violations"][0]["text"])

    def test_repeated_token_or_fence_in_a_set(self):
        h = History()
        h.hold_set("s1", [("b", 10), (KEY, 11)], 1.0, 1.01, 1.5)
        h.events[1]["set"][1]["token"] = h.events[1]["set"][0]["token"]
        res = self.check(h)
        self.assertEqual([v["kind"] for v in res["violations"]], ["partial set"])
        # one counter for all keys (memory): two keys' fences differ
        h = History()
        h.hold_set("s1", [("b", 10), (KEY, 10)], 1.0, 1.01, 1.5)
        res = self.check(h, params={"backend": "memory"})
        self.assertEqual([v["kind"] for v in res["violations"]], ["partial set"])
        # fences per key (redis): the same number on two keys is noted only
        res = self.check(h, params={"backend": "redis"})
        self.assertClean(res)
        self.assertIn("same fence for two keys", " ".join(res["suspicious"]))

    def test_key_held_after_a_null_answer_is_a_violation(self):
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 1.5, read=1.02, write=1.4)
        h.hold_set("s2", [("b", 20), ("c", 21)], 1.6, 1.61, 1.8, read=1.62, write=1.7)
        h.ev(1.1, "s1", "lock_sent", n=1, cmd="LOCKALL", keys=["b", KEY])
        h.ev(1.3, "s1", "lock_null", n=1, keys=["b", KEY])
        h.ev(1.31, "s1", "probe", n=1, keys=["b", KEY], held=[], reply="0 lock(s)")
        probe = h.events[-1]
        res = self.check(h)
        self.assertClean(res)
        self.assertEqual(res["counts"]["set_nulls"], 1)
        probe["held"] = ["b"]
        res = self.check(h)
        self.assertEqual([v["kind"] for v in res["violations"]], ["partial set"])
        self.assertIn("still held ['b']", res["violations"][0]["text"])

    def test_lockall_answered_lost_while_it_waited_is_clean(self):
        # s1's LOCKALL took b, lost it while it waited for KEY (a push of
        # a fence it was never granted), and answered -LOST: nothing held
        lost = {"kind": "majority_lost", "target": "node1+node2", "start": 1.0, "end": 4.0,
                "quorum_lost": ["d0"]}
        h = History()
        h.hold_set("s2", [("b", 20), ("c", 21)], 1.6, 1.61, 1.8, read=1.62, write=1.7)
        h.ev(1.1, "s1", "lock_sent", n=1, cmd="LOCKALL", keys=["b", KEY])
        h.ev(1.5, "s1", "told", how="push", key="b", fence=19, waiting=True)
        h.ev(1.51, "s1", "lock_err", n=1, keys=["b", KEY], err="LOST b 19 no quorum")
        h.ev(1.52, "s1", "probe", n=1, keys=["b", KEY], held=[], reply="0 lock(s)")
        res = self.check(h, [lost], params={"backend": "redlock"})
        self.assertClean(res)
        self.assertEqual(res["suspicious"], [])
        self.assertEqual(res["counts"]["set_errors"], 1)

    def test_no_set_granted_is_a_failure(self):
        h = History()
        h.hold("w1", 10, 1.0, 1.01, 1.5, read=1.02, write=1.4)
        h.ev(1.1, "s1", "lock_sent", n=1, cmd="LOCKALL", keys=["b", KEY])
        h.ev(1.2, "s1", "lock_err", n=1, keys=["b", KEY], err="ERR unknown command")
        res = self.check(h)
        self.assertEqual([f["text"] for f in res["failures"]],
                         ["no set granted at all (LOCKALL)"])
        self.assertEqual(res["counts"]["set_errors"], 1)

    def test_write_with_a_fence_of_no_whole_grant_is_a_violation(self):
        # after an error answer s1 writes with a fence it was never granted
        h = History()
        h.ev(1.1, "s1", "lock_sent", n=1, cmd="LOCKALL", keys=["b", KEY])
        h.ev(1.3, "s1", "lock_err", n=1, keys=["b", KEY], err="BACKEND down")
        h.ev(1.31, "s1", "probe", n=1, keys=["b", KEY], held=[], reply="0 lock(s)")
        h.ops.append((1.4, "s1", "b", 10, "read", None))
        h.keys.append("b")
        res = self.check(h)
        self.assertEqual([v["kind"] for v in res["violations"]], ["fence not granted"])


class TestSafetyShort(unittest.TestCase):

    def test_short(self):
        out = os.path.join(os.path.dirname(DLOCKD), "faults", "short")
        shutil.rmtree(out, ignore_errors=True)
        res = safety.run("short", outdir=out)
        bad = ["%s: %s" % (r["name"], safety.verdict(r)) for r in res["scenarios"]
               if not r["ok"]]
        self.assertTrue(res["ok"], "the safety test failed (%s); details in %s"
                        % ("; ".join(bad), res["json"]))


if __name__ == "__main__":
    unittest.main()
