"""The safety test's checker for leaders and observers (the election
scenarios): from the observers' logs (observer.py), the holdings check.py
makes of the workers' logs and the final LEADER answer of each daemon for
each key, decide whether observers were told what the protocol promises
(docs/protocol.md, OBSERVE and 7.9). Pure functions of their inputs, as
check.py's; check.check() calls check() here when it is given observations.

The leaders themselves are checked as any holder is (check.py): a leader's
term is its fence, two leaders of overlapping terms must not both have
writes accepted, and a deposed leader must be told before another leader's
first accepted write (an overlap of two leaders' belief intervals is a
violation unless a fault kept the stale one from hearing, and then its
write must have been rejected).

An observer's epoch is one connection: its LEADER answer, then the answers to
its loop of OBSERVE key AFTER r, r the revision of the answer before.
Revisions are numbered by each daemon, one counter per daemon life (on
every backend: a remote backend's states are numbered as the daemon learns
of them), so they are compared within an epoch only; a daemon started
again numbers its changes from the start, and the observer begins a new
epoch. Terms are the backend's fences, the same for every daemon. So:

- within an epoch revisions strictly increase ("revision went back"): each
  answer is a change after the one the observer asked after;
- an observer's terms never go back, within an epoch and from one epoch to
  the next ("term went back"): the states of nobody leading (term 0)
  aside, each term is the fence of a later holder;
- an exclusive state's value is one the holder of its term gave ("value of
  another"): a campaign worker's id (its CAMPAIGN) or a value it PROCLAIMed
  while it held that term; none for a plain LOCK.

Every term granted on a key (a CAMPAIGN or a LOCK: each is a change of the
key's holders) appears in each epoch of each observer of the key that was
observing at the time ("missed term"). What "at the time" means depends on
where the observer learns of changes:

- the memory backend (remote false): each daemon has a lock table of its
  own and tells its observers of its own grants as they happen, so an
  observer is asked for the terms its own daemon granted: those whose
  CAMPAIGN (or LOCK) was sent after the epoch's LEADER was answered, while
  the epoch went on past the grant (in it the observer logged a higher
  term, or an empty answer to an OBSERVE sent after the grant arrived).
  That holds because the daemon numbers every change of a key and keeps
  its last 8 (OBS_HISTORY): an observer more than 8 changes of the key
  behind is given the oldest kept and may miss terms. The election
  scenarios hold every term 40 ms at least (a term is at most three
  changes: its grant, a PROCLAIM and its end), so that 8 changes take
  more than 100 ms while an observer asks again within a millisecond or so
  of each answer;
- a remote backend (redis, Sentinel, redis-cluster, etcd; remote true):
  every daemon learns of a change through the backend (a message and a
  look, a watch and a read), whichever daemon made it, and a change
  shorter than that round trip may be skipped (docs/backends/etcd.md). An
  observer on either daemon is asked for every term granted through either
  that lasted REMOTE_MIN_TERM s at least (from the grant's arrival to the
  holder's RESIGN or loss) away from every fault that may hide a change
  from the observer's daemon or cut the term short in the backend (a
  backend fault; a stop, kill or black hole of the observer's or the
  holder's daemon), from the fault's start to REMOTE_RECOVERY s after its
  end (other terms are counted apart as excused), and past whose end the
  epoch went on: a higher term, or an empty answer to an OBSERVE sent
  REMOTE_LAG s after the term's end. Shorter terms are counted, and so are
  those skipped.

A missed term is reported with the number of terms granted between the
observer's two answers around it, to tell a lag from a lost change.

At the end, once the faults are over and the workers stopped, the last
state each observer logged is the final LEADER answer of its daemon for its
key ("final state"), and on a remote backend every daemon's final answer is
the same state (value, term, kind, holders; revisions are each daemon's
own). A PROCLAIM by a leader that was not told of a loss answers a
revision, or -LOST, which tells it ("proclaim refused"); on a remote
backend -BACKEND is an answer too while a fault that may keep its daemon
from the backend is on (and REMOTE_RECOVERY s after). An observer's LEADER
answered -BACKEND (its daemon could not read the key: a fault) is counted,
not failed.
"""

import collections

# the faults after which a term may have been granted to a worker that never
# heard of it (the grant was on its way when the worker or its daemon died)
FAULTS_THAT_DROP_GRANTS = ("client_kill", "daemon_kill")
STATE = ("rev", "term", "value", "kind", "holders")
# a state without its revision: what two daemons on one backend must agree on
SHARED_STATE = ("term", "value", "kind", "holders")
# remote backends: the shortest term every observer must see (s, from the
# grant's arrival to its end), and how long after a term's end a daemon may
# take to learn of the change (the backend's message and a look, or a watch
# event and a read), both x the run's scale. Terms last 40 ms at least
# (topology.ELECT_HOLD_MIN_MS), a look about a millisecond
REMOTE_MIN_TERM = 0.1
REMOTE_LAG = 0.3
# how long after a fault's end a daemon may still miss changes (s, x the
# scale): it connects again after a backoff, subscribes, then looks or
# reads again; the sentinels or the cluster name the new master
REMOTE_RECOVERY = 1.0
# the faults that do not keep a daemon from learning of a change, nor cut a
# term short in the backend: a worker killed (its term ends as it believes)
# or stopped (its term lasts longer than it believes)
FAULTS_OF_WORKERS = ("client_kill", "client_stop")
# the faults of a daemon, which hide changes from that daemon's observers
# and may end its holders' terms in the backend before they hear of it
FAULTS_OF_DAEMONS = ("daemon_stop", "daemon_kill", "blackhole")


class Epoch:
    """One connection of one observer: its answers, in order."""

    __slots__ = ("o", "n", "start", "answers", "nones", "max_term", "last_none")

    def __init__(self, o, n, start):
        self.o = o
        self.n = n
        self.start = start        # when its LEADER answer came
        self.answers = []         # the epoch and state events
        self.nones = []           # the none events
        self.max_term = 0
        self.last_none = None     # when the last OBSERVE answered empty was sent

    def terms(self):
        return {a["term"] for a in self.answers}

    def brief(self):
        return "observer %s epoch %d (from %.3f)" % (self.o, self.n, self.start)


def epochs_of(events):
    """observer id -> its epochs, from its events (in time order)."""
    out = collections.defaultdict(list)
    cur = {}
    for e in sorted(events, key=lambda e: e["t"]):
        o, ev = e["o"], e["ev"]
        if ev == "epoch":
            cur[o] = Epoch(o, e["n"], e["t"])
            out[o].append(cur[o])
        ep = cur.get(o)
        if ep is None or e.get("n") != ep.n:
            continue
        if ev in ("epoch", "state"):
            ep.answers.append(e)
            ep.max_term = max(ep.max_term, e["term"])
        elif ev == "none":
            ep.nones.append(e)
            ep.last_none = e["sent"]
    return out


def check(holdings, events, workers, faults, observed, res):
    """Add the election rules' violations, failures, notes and counts to res
    (check.check()'s result). holdings: check.Holding's; events and workers
    as check.check()'s (workers' "role": campaign or lock); observed:
    {"events": the observers' events, "observers": id -> {"daemon", "key"},
    "final": daemon -> key -> the state LEADER answered at the end, "remote":
    whether the daemons learn of changes through a shared backend (default
    false: the memory backend), "scale": the run's (default 1)}."""
    eps = epochs_of(observed["events"])
    counts = res["counts"]
    remote = observed.get("remote", False)
    for e in observed["events"]:
        if e["ev"] == "error":
            res["failures"].append({"kind": "observer error", "observer": e["o"],
                                    "text": e.get("text", "")})
        elif e["ev"] == "bad":
            res["failures"].append({"kind": "observer reply", "observer": e["o"],
                                    "text": "%s answered %s" % (e.get("cmd"), e.get("value"))})
        elif e["ev"] == "backend":
            counts["observer_backend_errors"] += 1
    for o in observed["observers"]:
        counts["observer_epochs"] += len(eps.get(o, []))
        for ep in eps.get(o, []):
            counts["observer_answers"] += len(ep.answers)
            counts["observer_nones"] += len(ep.nones)
            _check_order(ep, res)
        _check_epochs(o, eps.get(o, []), res)
    _check_values(eps, holdings, events, workers, faults, observed["observers"], res)
    if remote:
        _check_terms_seen_remote(eps, holdings, faults, observed["observers"],
                                 observed.get("scale", 1.0), res)
    else:
        _check_terms_seen(eps, holdings, observed["observers"], res)
    _check_final(eps, observed["observers"], observed.get("final") or {}, remote, res)
    for e in events:
        if e["ev"] == "proclaim":
            counts["proclaims"] += 1
            if remote and str(e.get("reply", "")).startswith("BACKEND") and \
                    _backend_fault(e["sent"], faults, observed.get("scale", 1.0)):
                counts["proclaims_backend"] += 1
                continue
            if str(e.get("reply", "")).startswith("LOST"):
                counts["proclaims_lost"] += 1   # the term was lost: this tells it
                continue
            if not str(e.get("reply", "")).isdigit():
                res["failures"].append({
                    "kind": "proclaim refused", "worker": e["w"],
                    "text": "worker %s's PROCLAIM of %s in term %s sent at %.3f was answered "
                    "%s" % (e["w"], e.get("value"), e.get("fence"), e["sent"],
                            e.get("reply"))})


def _backend_fault(t, faults, scale):
    """Whether a fault that may keep a daemon from its backend (not a
    worker's) was on at t, or ended REMOTE_RECOVERY s before."""
    return any(f["kind"] not in FAULTS_OF_WORKERS and
               f["start"] <= t <= f["end"] + REMOTE_RECOVERY * scale for f in faults)


def _check_order(ep, res):
    last = None
    term = 0
    for a in ep.answers:
        if last is not None and a["rev"] <= last["rev"]:
            res["violations"].append({
                "kind": "revision went back", "observer": ep.o,
                "text": "%s: revision %d (term %d) at %.3f after revision %d (term %d)"
                % (ep.brief(), a["rev"], a["term"], a["t"], last["rev"], last["term"])})
        if a["term"] and a["term"] < term:
            res["violations"].append({
                "kind": "term went back", "observer": ep.o,
                "text": "%s: term %d (revision %d) at %.3f after term %d"
                % (ep.brief(), a["term"], a["rev"], a["t"], term)})
        term = max(term, a["term"])
        last = a


def _check_epochs(o, oeps, res):
    """An observer's terms never go back from one epoch to the next (a
    daemon started again, or another connection to it): terms are fences,
    which keep increasing across restarts of the daemon and the backend."""
    top, at = 0, None
    for ep in oeps:
        for a in ep.answers:
            if a["term"] and a["term"] < top and ep is not at:
                res["violations"].append({
                    "kind": "term went back", "observer": o,
                    "text": "%s: term %d (revision %d) at %.3f, after term %d in epoch %d"
                    % (ep.brief(), a["term"], a["rev"], a["t"], top, at.n)})
                break
        t = max([top] + [a["term"] for a in ep.answers])
        if t > top:
            top, at = t, ep


def _check_values(eps, holdings, events, workers, faults, observers, res):
    by_term = {(h.key, h.fence): h for h in holdings}
    proclaimed = collections.defaultdict(set)  # (worker, fence) -> values
    for e in events:
        if e["ev"] == "proclaim_sent":
            proclaimed[e["w"], e.get("fence")].add(e.get("value"))
    dropping = [f for f in faults if f["kind"] in FAULTS_THAT_DROP_GRANTS]
    unclaimed = set()
    for o, oeps in eps.items():
        key = observers.get(o, {}).get("key")
        for ep in oeps:
            for a in ep.answers:
                if not a["term"] or a["kind"] != "exclusive":
                    continue
                h = by_term.get((key, a["term"]))
                if h is None:
                    unclaimed.add((key, a["term"]))
                    continue
                if workers.get(h.w, {}).get("role") == "campaign":
                    allowed = {h.w} | proclaimed[h.w, h.fence]
                else:
                    allowed = {None}
                if a["value"] not in allowed:
                    res["violations"].append({
                        "kind": "value of another", "observer": o, "holders": [h],
                        "text": "%s: term %d with value %r at %.3f (revision %d), but that "
                        "term is %s's, which gave %s"
                        % (ep.brief(), a["term"], a["value"], a["t"], a["rev"], h.w,
                           ", ".join(repr(v) for v in sorted(allowed, key=str)))})
    res["counts"]["terms_unclaimed"] += len(unclaimed)
    if unclaimed and not dropping:
        key, term = min(unclaimed)
        res["suspicious"].append(
            "observers saw %d term(s) no worker was granted, and no worker or daemon was "
            "killed (e.g. term %d of %s)" % (len(unclaimed), term, key))


def _check_terms_seen(eps, holdings, observers, res):
    """The memory backend: each epoch sees every term its daemon granted
    while it observed."""
    by_key = collections.defaultdict(list)
    for h in holdings:
        by_key[h.key].append(h)
    counts = res["counts"]
    for o, oeps in sorted(eps.items()):
        key = observers.get(o, {}).get("key")
        daemon = observers.get(o, {}).get("daemon")
        for ep in oeps:
            terms = ep.terms()
            for h in by_key.get(key, []):
                if h.daemon != daemon:
                    continue  # another daemon's lock table
                if ep.start > h.lock_sent:
                    continue
                if not (ep.max_term > h.fence or
                        ep.last_none is not None and ep.last_none >= h.grant):
                    continue
                counts["terms_checked"] += 1
                if h.fence not in terms:
                    _missed(o, ep, h, by_key[key], "", res)


def _missed(o, ep, h, hs, why, res):
    """Report that epoch ep of observer o never saw h's term (hs: the
    key's holdings)."""
    before = [a for a in ep.answers if a["t"] <= h.grant]
    after = [a for a in ep.answers if a["t"] > h.grant]
    t0 = before[-1]["t"] if before else ep.start
    t1 = after[0]["t"] if after else float("inf")
    n = sum(1 for g in hs if t0 < g.grant <= t1)
    around = "; its answers around it: %s, then %s; %d term(s) granted between" % (
        _state(before[-1]) if before else "none",
        _state(after[0]) if after else "none", n)
    res["violations"].append({
        "kind": "missed term", "observer": o, "holders": [h],
        "text": "%s never saw term %d, granted to %s (asked at %.3f, granted "
        "%.3f)%s%s" % (ep.brief(), h.fence, h.w, h.lock_sent, h.grant, why, around)})


def _hides(f, h, daemon):
    """Whether fault f may hide h's term from the daemon's observers while
    it lasts (and a while after), or cut it short in the backend."""
    if f["kind"] in FAULTS_OF_WORKERS:
        return False
    if f["kind"] in FAULTS_OF_DAEMONS:
        return f["target"] in (daemon, h.daemon)
    return True   # the backend's servers, or the path to them all


def _outside(lo, hi, windows):
    """How much of [lo, hi] is outside every one of windows ((a, b)'s)."""
    left, at = 0.0, lo
    for a, b in sorted(windows):
        if b <= at:
            continue
        if a >= hi:
            break
        left += max(0.0, a - at)
        at = max(at, b)
        if at >= hi:
            return left
    return left + max(0.0, hi - at)


def _check_terms_seen_remote(eps, holdings, faults, observers, scale, res):
    """A remote backend: each epoch sees every term granted through any
    daemon that lasted REMOTE_MIN_TERM away from the faults that may hide
    it, while it observed."""
    by_key = collections.defaultdict(list)
    for h in holdings:
        by_key[h.key].append(h)
    counts = res["counts"]
    min_term, lag = REMOTE_MIN_TERM * scale, REMOTE_LAG * scale
    recovery = REMOTE_RECOVERY * scale
    for o, oeps in sorted(eps.items()):
        key = observers.get(o, {}).get("key")
        daemon = observers.get(o, {}).get("daemon")
        for ep in oeps:
            terms = ep.terms()
            for h in by_key.get(key, []):
                if ep.start > h.lock_sent:
                    continue
                if not (ep.max_term > h.fence or
                        ep.last_none is not None and ep.last_none >= h.end + lag):
                    continue
                seen = h.fence in terms
                if h.end - h.grant < min_term:
                    counts["terms_short"] += 1
                    counts["terms_short_skipped"] += not seen
                    continue
                windows = [(f["start"], f["end"] + recovery) for f in faults
                           if _hides(f, h, daemon)]
                clear = _outside(h.grant, h.end, windows)
                if clear < min_term:
                    counts["terms_excused"] += 1
                    counts["terms_excused_skipped"] += not seen
                    continue
                counts["terms_checked"] += 1
                if not seen:
                    _missed(o, ep, h, by_key[key], " (on %s; it lasted %.3f s, %.3f s of it "
                            "away from any fault)" % (daemon, h.end - h.grant, clear), res)


def _state(a):
    return "revision %d term %d %s at %.3f" % (a["rev"], a["term"], a["kind"], a["t"])


def _check_final(eps, observers, final, remote, res):
    if remote and len(final) > 1:
        keys = sorted({k for st in final.values() for k in st})
        for key in keys:
            got = {d: (None if final[d].get(key) is None else
                       tuple(final[d][key][k] for k in SHARED_STATE))
                   for d in sorted(final)}
            if len(set(got.values())) > 1:
                res["failures"].append({
                    "kind": "final state",
                    "text": "the daemons' final LEADER answers for %s differ: %s"
                    % (key, "; ".join("%s %s" % (d, final[d].get(key)) for d in got))})
    for o, info in sorted(observers.items()):
        want = final.get(info["daemon"], {}).get(info["key"])
        if want is None:
            continue
        res["counts"]["final_states_checked"] += 1
        answers = [a for ep in eps.get(o, []) for a in ep.answers]
        last = answers[-1] if answers else None
        got = {k: last[k] for k in STATE} if last else None
        if got != {k: want[k] for k in STATE}:
            res["failures"].append({
                "kind": "final state", "observer": o,
                "text": "observer %s's last answer for %s was %s; LEADER answers %s at the end"
                % (o, info["key"], got, want)})
