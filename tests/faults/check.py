"""The safety test's checker: from the workers' event logs, the faults the
orchestrator injected and what the resource holds, decide whether the lock
service kept its promises. Pure functions of their inputs (no processes), so
that test_safety.py can feed them made-up histories.

A holding is one grant: [grant received, end), where end is the first of
"unlock sent", "told of the loss" (a lost push, a -LOST reply, the connection
closed) and the holder's death. That is the interval in which the holder
believes it holds the lock (its belief interval). Two belief intervals of one
key that overlap are two holders at once:

- "paused" when a fault kept the stale holder (the one with the lower fence:
  the earlier one, not told in time, or a later one whose grant arrived late)
  from hearing: the holder or its daemon was SIGSTOPped, or its daemon
  SIGKILLed, between its LOCK and the start of the overlap. Only fences can
  protect the resource then: the stale holder's write must have been
  rejected if it wrote after the other one's read;
- "stalled" when the stale holder ran late by itself (it logged a stall: it
  was descheduled) in the safety margin before the overlap; checked like
  "paused";
- "data loss" when the backend lost its data (a restart without
  persistence) in between: expected, checked like "paused";
- otherwise a violation.

No fault of a backend's servers excuses an overlap: a master that fails
over (Sentinel, Redis Cluster; the promoted replica may lack the last
writes, whose holders must then be told before the key goes to another),
a Redis Cluster slot moved to another master, a redlock node lost or cut
off.

When a fault takes a daemon's quorum away (redlock: a majority of the nodes
killed, or cut off from that daemon; the fault's "quorum_lost" lists the
daemons), that daemon grants nothing from shortly after it begins until it
ends, its LOCKs fail with -BACKEND, and if it lasts longer than the longest
lease its holders are told before their validity can have ended.

Fences must strictly increase for a key in the order grants are received; a
grant received late because its holder or its daemon was stopped while it was
on its way may come out of order (not a repeat). The final counter must equal
the number of writes the resource accepted, and every write a worker saw
accepted must be among them.

Leaders (campaign workers, the election scenarios) are holders like any
other, their terms their fences; what their observers were told is judged
by check_elect.py.
"""

import collections

from faults import check_elect

FAULTS_THAT_BLIND = ("client_stop", "daemon_stop", "daemon_kill")


class Holding:
    """One grant to one worker and what the worker did with it."""

    __slots__ = ("w", "daemon", "key", "fence", "lock_sent", "grant", "validity", "plan",
                 "end", "end_how", "read_t", "read_ok", "write_sent", "write_tag",
                 "write_result", "write_t", "contacts", "stalls", "told_t")

    def __init__(self, w, daemon, key, fence, lock_sent, grant, validity, plan):
        self.w = w
        self.daemon = daemon
        self.key = key
        self.fence = fence
        self.lock_sent = lock_sent
        self.grant = grant
        self.validity = validity
        self.plan = plan
        self.end = None
        self.end_how = None
        self.read_t = None          # when the read's reply came
        self.read_ok = None         # True, False (stale), None (no read)
        self.write_sent = None
        self.write_tag = None
        self.write_result = None    # "ok", "rejected", None (no reply seen)
        self.write_t = None
        self.contacts = []          # (sent, received, cmd, reply) answered normally
        self.stalls = []            # (start, end) the worker ran late
        self.told_t = None

    def brief(self):
        return ("%s@%s fence %s granted %.3f ended %.3f (%s)"
                % (self.w, self.daemon, self.fence, self.grant,
                   self.end if self.end is not None else float("nan"), self.end_how))


def grants_of(e, info):
    """The grants of a grant event: [(key, fence, validity)]. A LOCKALL's
    (a set worker's: "set" in e) are the entries of its answer that are
    grants (partial_sets() judges whether they make the whole set)."""
    if "set" in e:
        return [(g["key"], g["fence"], g.get("validity")) for g in e["set"]
                if g.get("fence") is not None]
    return [(info.get("key"), e["fence"], e.get("validity"))]


def holdings_of(events, workers, faults, run_end):
    """The holdings of every worker, from its events (in time order): one a
    key of each grant, a LOCKALL's set giving one per key, each ending on
    its own (a loss is told per key; an unlock, a closed connection or the
    worker's death ends every one).

    workers: id -> {"daemon", "key", "kind"}; faults: list of fault dicts
    (kind, target, start, end); run_end: when the workers were stopped.
    Returns (holdings, notes) where notes lists odd things seen."""
    by_worker = collections.defaultdict(list)
    for e in events:
        by_worker[e["w"]].append(e)
    deaths = {f["target"]: f["start"] for f in faults if f["kind"] == "client_kill"}
    out = []
    notes = []
    for w, evs in by_worker.items():
        evs.sort(key=lambda e: e["t"])
        info = workers.get(w, {})
        cur = {}     # key -> the holding of the worker's last grant
        past = set()  # (key, fence) of its holdings
        lock_sent = None

        def open_ones():
            return [h for h in cur.values() if h.end is None]

        for e in evs:
            ev = e["ev"]
            if ev == "lock_sent":
                lock_sent = e["t"]
            elif ev == "grant":
                for h in open_ones():
                    notes.append("worker %s: grant of fence %s while it still held fence %s"
                                 % (w, e.get("fence"), h.fence))
                    h.end, h.end_how = e["t"], "regrant"
                cur = {}
                for key, fence, validity in grants_of(e, info):
                    h = Holding(w, info.get("daemon"), key, fence,
                                lock_sent if lock_sent is not None else e["t"], e["t"],
                                validity, e.get("plan"))
                    cur[key] = h
                    out.append(h)
                    past.add((key, fence))
            elif ev == "told" and e.get("waiting"):
                continue  # a key of a LOCKALL not answered yet: never granted
            elif ev == "told":
                key, fence = e.get("key"), e.get("fence")
                hs = [h for h in cur.values() if (key is None or h.key == key) and
                      (fence is None or h.fence == fence)]
                if not hs:
                    if fence is not None and (key is None and
                                              any(f == fence for _, f in past) or
                                              (key, fence) in past):
                        continue  # news of an earlier holding, already over
                    if fence is not None:
                        notes.append("worker %s: told of the loss of fence %s, which it "
                                     "never held" % (w, fence))
                    continue
                for h in hs:
                    if h.end is None:
                        h.end, h.end_how = e["t"], "told:" + e.get("how", "?")
                    if h.told_t is None:
                        h.told_t = e["t"]
            elif ev == "unlock_sent":
                for h in open_ones():
                    h.end, h.end_how = e["t"], "unlock"
            elif e.get("fence") is not None:
                h = cur.get(e.get("key") or info.get("key"))
                if h is None or h.fence != e["fence"]:
                    pass
                elif ev == "read_ok":
                    h.read_t, h.read_ok = e["t"], True
                elif ev == "read_rejected":
                    h.read_t, h.read_ok = e["t"], False
                elif ev == "write_sent":
                    h.write_sent, h.write_tag = e["t"], e.get("tag")
                elif ev in ("write_ok", "write_rejected"):
                    h.write_result = "ok" if ev == "write_ok" else "rejected"
                    h.write_t = e["t"]
                elif ev in ("extend", "proclaim"):
                    h.contacts.append((e["sent"], e["t"], ev.upper(), e.get("reply")))
            for h in open_ones():
                if ev == "checkin":
                    h.contacts.append((e["sent"], e["t"], e.get("cmd"), e.get("reply")))
                elif ev == "stall":
                    h.stalls.append((e["start"], e["start"] + e["gap"]))
        for h in open_ones():
            if w in deaths and deaths[w] >= h.grant:
                h.end, h.end_how = deaths[w], "death"
            else:
                last = evs[-1]["t"] if evs else run_end
                h.end, h.end_how = max(last, h.grant), "run_end"
                if w not in deaths:
                    notes.append("worker %s: still held fence %s when its log ends"
                                 % (w, h.fence))
    return out, notes


def _hit(h, faults, until):
    """The faults that kept holder h from hearing between its LOCK and until:
    its worker or its daemon stopped, its daemon killed."""
    hits = []
    for f in faults:
        if f["kind"] not in FAULTS_THAT_BLIND:
            continue
        tgt = f["target"]
        if f["kind"] == "client_stop" and tgt != h.w:
            continue
        if f["kind"] in ("daemon_stop", "daemon_kill") and tgt != h.daemon:
            continue
        end = f["end"] if f["kind"] != "daemon_kill" else f["start"]
        if f["start"] <= until and end >= h.lock_sent:
            hits.append(f)
    return hits


def _stalled(h, start, margin):
    """Whether h logged a stall within the margin before start."""
    for a, b in h.stalls:
        if a <= start and b >= start - margin:
            return True
    return False


def check(events, workers, faults, resource, params, observed=None):
    """Check one run. resource: key -> resource.state(); params: ttl (ms),
    margin_ms, data_loss (bool: overlaps after a data loss are expected),
    notice_bound (s: how soon after a daemon resumes its holders must be
    told), backend, recovery_from (the end of the last fault), run_end;
    observed: the observers' logs and the final states, in an election
    scenario (check_elect.check()), else None.

    Returns a dict: counts, violations, failures, suspicious, overlaps
    (the excused ones), holdings (count)."""
    run_end = params.get("run_end", 0.0)
    holdings, notes = holdings_of(events, workers, faults, run_end)
    margin = params["margin_ms"] / 1000.0
    res = {
        "violations": [], "failures": [], "suspicious": list(notes), "overlaps": [],
        "counts": collections.Counter(),
    }
    counts = res["counts"]
    counts["grants"] = len(holdings)
    for e in events:
        ev = e["ev"]
        if ev == "told":
            counts["told_" + e.get("how", "?")] += 1
            if e.get("how") in ("push", "lost_err"):
                counts["lost_notices"] += 1
        elif ev in ("lock_null", "lock_err", "write_rejected", "read_rejected", "stall",
                    "abandon"):
            counts[ev] += 1
        elif ev == "error":
            res["failures"].append({"kind": "worker error", "worker": e["w"],
                                    "text": e.get("text", "")})
        elif ev == "stray":
            res["failures"].append({"kind": "stray reply", "worker": e["w"],
                                    "text": "a value the worker did not ask for: %s"
                                    % e.get("value")})

    by_key = collections.defaultdict(list)
    for h in holdings:
        by_key[h.key].append(h)

    for key, hs in by_key.items():
        hs.sort(key=lambda h: h.grant)
        _check_fences(key, hs, faults, res)
        _check_overlaps(key, hs, faults, margin, params, res)

    _check_resource(events, workers, faults, resource, res)
    _check_sets(events, workers, holdings, params, res)
    _check_validity(holdings, params, res)
    if params.get("backend") in ("redis", "redis-cache", "etcd", "etcd-tls", "redlock",
                                 "redlock-cache", "cluster"):
        _check_notice_after_resume(holdings, faults, params, res)
    _check_quorum_loss(holdings, events, workers, faults, params, res)
    if observed is not None:
        check_elect.check(holdings, events, workers, faults, observed, res)
    rec = params.get("recovery_from")
    if rec is not None:
        after = [h for h in holdings if h.grant > rec]
        counts["grants_after_faults"] = len(after)
        if not after:
            res["failures"].append({
                "kind": "no progress",
                "text": "no grant after the last fault ended at %.3f" % rec})
    if not holdings:
        res["failures"].append({"kind": "no progress", "text": "no grant at all"})
    if any(i.get("role") == "lockall" for i in workers.values()):
        if rec is not None:
            counts["set_grants_after_faults"] = sum(
                1 for e in events if e["ev"] == "grant" and "set" in e and e["t"] > rec)
        if not counts["set_grants"]:
            res["failures"].append({"kind": "no progress", "text": "no set granted at all "
                                    "(LOCKALL)"})
    counts["violations"] = len(res["violations"])
    res["holdings"] = len(holdings)
    res["_holdings"] = holdings
    return res


def _grant_delayed(h, faults):
    """Faults that could have delayed h's grant on its way: its worker or
    its daemon stopped between its LOCK and the grant's arrival."""
    out = []
    for f in faults:
        if f["kind"] == "client_stop" and f["target"] == h.w or \
                f["kind"] == "daemon_stop" and f["target"] == h.daemon:
            if f["start"] <= h.grant and f["end"] >= h.lock_sent:
                out.append(f)
    return out


def _check_fences(key, hs, faults, res):
    best = None  # the holding with the highest fence so far
    for h in hs:
        if best is not None:
            if h.fence == best.fence:
                res["violations"].append({
                    "kind": "fence repeated", "key": key, "holders": [best, h],
                    "text": "fence %s granted twice: %s, then %s"
                    % (h.fence, best.brief(), h.brief())})
            elif h.fence < best.fence:
                delayed = _grant_delayed(h, faults)
                if delayed:
                    res["counts"]["late_grants"] += 1
                    res["suspicious"].append(
                        "fence %s received after fence %s: the grant was delayed on its way "
                        "(%s)" % (h.fence, best.fence, ", ".join(f["kind"] for f in delayed)))
                else:
                    res["violations"].append({
                        "kind": "fence went down", "key": key, "holders": [best, h],
                        "text": "fence %s granted after fence %s: %s, then %s"
                        % (h.fence, best.fence, best.brief(), h.brief())})
        if best is None or h.fence > best.fence:
            best = h


def _check_overlaps(key, hs, faults, margin, params, res):
    active = []
    for j in hs:
        active = [i for i in active if i.end > j.grant]
        for i in active:
            start = j.grant
            # the holder with the lower fence is the stale one: the one that
            # should have heard (i), or whose grant came late (j)
            stale, fresh = (i, j) if i.fence < j.fence else (j, i)
            hits = _hit(stale, faults, start)
            affirmed = [c for c in stale.contacts if c[0] > start]
            ov = {
                "key": key, "holders": [i, j], "start": start, "end": min(i.end, j.end),
                "faults": hits, "stale": stale, "fresh": fresh,
                "affirmed": affirmed,
            }
            loss = [f for f in faults if f["kind"] == "backend_restart_loss" and
                    f["start"] <= start and f["end"] >= i.lock_sent]
            if hits:
                ov["class"] = "paused"
            elif loss or params.get("data_loss_all"):
                ov["class"] = "data loss"
                ov["faults"] = loss
            elif _stalled(stale, start, margin):
                ov["class"] = "stalled"
            else:
                ov["class"] = "violation"
            ov["text"] = ("%s and %s both believed they held %s from %.3f to %.3f"
                          % (i.brief(), j.brief(), key, start, ov["end"]))
            if affirmed:
                ov["text"] += ("; %s's daemon answered %d command(s) sent after the other "
                               "grant normally (first %s sent at %.3f)"
                               % (stale.w, len(affirmed), affirmed[0][2], affirmed[0][0]))
            # the stale holder's write after the fresh holder's read must fail
            if stale.fence == fresh.fence:
                pass  # reported as a repeated fence
            elif (stale.write_sent is not None and fresh.read_ok and
                  stale.write_sent > fresh.read_t and stale.write_result == "ok"):
                res["failures"].append({
                    "kind": "stale write accepted", "key": key, "holders": [stale, fresh],
                    "text": "%s wrote with fence %s at %.3f, after %s read with fence %s at "
                    "%.3f, and the resource accepted it"
                    % (stale.w, stale.fence, stale.write_sent, fresh.w, fresh.fence,
                       fresh.read_t)})
            if ov["class"] == "violation":
                res["violations"].append(dict(ov, kind="double grant"))
            else:
                res["counts"]["overlaps_" + ov["class"].replace(" ", "_")] += 1
                res["overlaps"].append(ov)
                if affirmed and ov["class"] == "paused":
                    res["suspicious"].append(
                        "%s (overlap excused by %s)" % (ov["text"],
                                                         ", ".join(f["kind"] for f in hits)))
        active.append(j)


def _check_resource(events, workers, faults, resource, res):
    acked = {}
    sent = {}
    rejected = set()
    for e in events:
        if e["ev"] == "write_sent":
            sent[e.get("tag")] = e
        elif e["ev"] == "write_ok":
            acked[e.get("tag")] = e
        elif e["ev"] == "write_rejected":
            rejected.add(e.get("tag"))
    counts = res["counts"]
    killed = {f["target"] for f in faults if f["kind"] == "client_kill"}
    for key, st in resource.items():
        writes = st["writes"]
        counts["writes_accepted"] += len(writes)
        counts["stale_writes_rejected"] += st["stale_writes"]
        counts["stale_reads_rejected"] += st["stale_reads"]
        if st["counter"] != len(writes):
            res["failures"].append({
                "kind": "lost update", "key": key,
                "text": "the counter of %s is %d after %d accepted writes"
                % (key, st["counter"], len(writes))})
        fences = [f for f, _, _ in writes]
        if any(b < a for a, b in zip(fences, fences[1:])):
            res["failures"].append({
                "kind": "resource", "key": key,
                "text": "the resource accepted a write with a lower fence than an earlier one"})
        tags = set()
        for f, v, tag in writes:
            tags.add(tag)
            if tag in rejected:
                res["failures"].append({
                    "kind": "resource", "key": key,
                    "text": "write %s was accepted by the resource but the worker saw it "
                    "rejected" % tag})
            elif tag not in acked:
                w = tag.split(":", 1)[0]
                counts["writes_unacknowledged"] += 1
                if w not in killed:
                    res["suspicious"].append(
                        "write %s (fence %s) was accepted but its worker, never killed, "
                        "did not see the reply" % (tag, f))
        for tag, e in acked.items():
            if workers.get(e["w"], {}).get("key") == key and tag not in tags:
                res["failures"].append({
                    "kind": "lost write", "key": key,
                    "text": "write %s (fence %s) was acknowledged but is not in the "
                    "resource's log" % (tag, e.get("fence"))})
    counts["writes_acknowledged"] = len(acked)


# the backends whose fences come from one counter for all keys: the fences
# of one set differ. Elsewhere fences are per key (docs/protocol.md 7.7:
# compare fences only within one key), and two keys' may meet
ONE_COUNTER = ("memory",)


def _check_sets(events, workers, holdings, params, res):
    """A set is never granted partly. A LOCKALL's answer (a grant event with
    "set") has exactly one grant per key asked, in the order asked, each
    with a valid fence (an integer > 0) and a token of its own, the fences
    distinct (where one counter makes them: ONE_COUNTER; elsewhere a
    repeat is noted); after a null or an error answer the worker's LOCKS
    lists no key of the set (its "probe"); and a worker reads and writes
    only with the fences of a whole grant of its own (a LOCK's, or a whole
    set's) of that key."""
    counts = res["counts"]
    whole = set()   # (worker, key, fence) of the whole grants
    for e in events:
        ev = e["ev"]
        if ev == "grant" and "set" not in e:
            whole.add((e["w"], workers.get(e["w"], {}).get("key"), e["fence"]))
        elif ev == "grant":
            counts["set_grants"] += 1
            wrong = _set_wrong(e, params)
            if not wrong:
                whole.update((e["w"], g["key"], g["fence"]) for g in e["set"])
                continue
            if wrong == "the same fence for two keys":
                res["suspicious"].append(
                    "worker %s was granted the set %s with the same fence for two keys "
                    "(fences are per key on %s): %s"
                    % (e["w"], e.get("keys"), params.get("backend"), _fences(e)))
                whole.update((e["w"], g["key"], g["fence"]) for g in e["set"])
                continue
            hs = [h for h in holdings if h.w == e["w"] and h.grant == e["t"]]
            res["violations"].append({
                "kind": "partial set", "holders": hs,
                "text": "worker %s's LOCKALL of %s was answered %s: %s"
                % (e["w"], e.get("keys"), _fences(e), wrong)})
        elif ev in ("lock_null", "lock_err") and "keys" in e:
            counts["set_nulls" if ev == "lock_null" else "set_errors"] += 1
        elif ev == "probe":
            counts["set_probes"] += 1
            if e.get("held"):
                res["violations"].append({
                    "kind": "partial set",
                    "text": "worker %s's LOCKALL of %s was not granted, but its session "
                    "still held %s (LOCKS at %.3f)"
                    % (e["w"], e.get("keys"), e["held"], e["t"])})
    for e in events:
        if e["ev"] not in ("read_ok", "read_rejected", "write_sent"):
            continue
        key = e.get("key") or workers.get(e["w"], {}).get("key")
        if (e["w"], key, e.get("fence")) not in whole:
            hs = [h for h in holdings if h.w == e["w"] and h.key == key and
                  h.fence == e.get("fence")]
            res["violations"].append({
                "kind": "fence not granted", "key": key, "holders": hs,
                "text": "worker %s used fence %s of %s (%s at %.3f), which it was not "
                "granted in a whole LOCK or LOCKALL answer"
                % (e["w"], e.get("fence"), key, e["ev"], e["t"])})


def _set_wrong(e, params):
    """What is wrong with the answer of a set grant event e, or None."""
    keys, entries = e.get("keys") or [], e["set"]
    if len(entries) != len(keys):
        return "%d grant(s) for %d keys" % (len(entries), len(keys))
    for i, g in enumerate(entries):
        if g.get("fence") is None or g.get("key") != keys[i]:
            return "entry %d (%s) is not a grant" % (i + 1, g.get("raw", g.get("key")))
        f = g["fence"]
        if not isinstance(f, int) or isinstance(f, bool) or f <= 0:
            return "the fence of %s is %r" % (g["key"], f)
    tokens = [g.get("token") for g in entries]
    if len(set(tokens)) != len(tokens):
        return "the same token for two keys"
    fences = [g["fence"] for g in entries]
    if len(set(fences)) != len(fences):
        if params.get("backend") in ONE_COUNTER:
            return "the same fence for two keys, from one counter"
        return "the same fence for two keys"
    return None


def _fences(e):
    return "[%s]" % ", ".join("%s: %s" % (g.get("key"), g.get("fence", g.get("raw")))
                              for g in e["set"])


def _check_validity(holdings, params, res):
    """No grant with no more validity than the safety margin (a grant that
    came back late is not delivered), nor with more than the TTL.

    On etcd a session lock is on its daemon's lease, and the validity of a
    grant is what is left of that lease, which may be well below the TTL
    (the lease is kept alive every third of its TTL, and not at all while
    etcd does not answer); the margin is then that of the validity the
    daemon was promised, counted from when it sent the request (docs/protocol.md
    7.4 and docs/backends/etcd.md; locktab.c hold_margin). The worker sees only what was left
    when the reply went out, less than that promise by the time the request
    took, so all there is to check from its side is that something was
    left."""
    margin = params["margin_ms"]
    if params.get("backend") in ("etcd", "etcd-tls"):
        margin = 0
    for h in holdings:
        if h.validity is None:
            continue
        if h.validity <= margin:
            res["failures"].append({
                "kind": "late grant", "holders": [h],
                "text": "%s was granted with %s ms of validity, not more than the safety "
                "margin (%s ms)" % (h.brief(), h.validity, margin)})
        elif h.validity > params["ttl"]:
            res["failures"].append({
                "kind": "validity", "holders": [h],
                "text": "%s was granted with %s ms of validity, more than the TTL "
                "(%s ms)" % (h.brief(), h.validity, params["ttl"])})


def _check_notice_after_resume(holdings, faults, params, res):
    """A holder whose daemon was stopped past its TTL must be told as soon as
    the daemon runs again."""
    bound = params["notice_bound"]
    ttl = params["ttl"] / 1000.0
    for f in faults:
        if f["kind"] != "daemon_stop" or f["end"] - f["start"] < ttl:
            continue
        for h in holdings:
            if h.daemon != f["target"] or h.grant > f["start"] or h.end < f["end"]:
                continue
            if h.end_how in ("death", "run_end"):
                continue
            late = h.end - f["end"]
            res["counts"]["told_after_resume"] += 1
            if late > bound:
                res["failures"].append({
                    "kind": "late notice", "holders": [h],
                    "text": "%s: its daemon was stopped %.3f-%.3f, past the TTL, but it was "
                    "told (or let go) only %.3f s after the daemon resumed"
                    % (h.brief(), f["start"], f["end"], late)})


# the longest lease a worker's lock may have: an EXTEND sets up to 1.25 x
# the TTL (worker.py)
LEASE_MAX = 1.25
# s after a fault began within which a grant may still come from replies
# that arrived before it (a loaded machine delays its delivery)
IN_FLIGHT = 0.25


def _check_quorum_loss(holdings, events, workers, faults, params, res):
    """Faults with "quorum_lost" (daemons that cannot reach a majority of
    the nodes while it lasts). On those daemons, from IN_FLIGHT s after it
    began until its end: a grant (a local handoff under a lease confirmed
    before the fault) never claims validity past the longest lease counted
    from the fault's start; every LOCK error is -BACKEND (a LOCKALL may
    also answer -LOST: a key it took was lost while it waited for the
    next). And no holding of theirs that began before goes on, while the
    fault lasts, past its lease counted from the fault's start (the last
    renewal that reached a majority was sent before it) plus notice_bound:
    the TTL, or the longest EXTEND answered before the fault. Each is told
    of the loss, or unlocked, before."""
    scale = params.get("notice_bound", 0.5) / 0.5
    ttl = params["ttl"] / 1000.0
    bound = params.get("notice_bound", 0.5)
    counts = res["counts"]
    extends = collections.defaultdict(list)  # (worker, fence) -> [(sent, ms)]
    for e in events:
        if e["ev"] == "extend" and isinstance(e.get("ms"), int) and \
                str(e.get("reply", "")).lstrip("-").isdigit():
            extends[e["w"], e.get("fence")].append((e["t"], e["ms"]))
    for f in faults:
        lost = f.get("quorum_lost")
        if not lost:
            continue
        quiet_from = f["start"] + IN_FLIGHT * scale
        lease_end = f["start"] + LEASE_MAX * ttl
        for h in holdings:
            if h.daemon not in lost or not quiet_from < h.grant < f["end"]:
                continue
            counts["grants_without_quorum"] += 1
            if h.validity is None or h.grant + h.validity / 1000.0 > lease_end + \
                    IN_FLIGHT * scale:
                res["failures"].append({
                    "kind": "grant without quorum", "holders": [h],
                    "text": "%s was granted at %.3f with %s ms of validity while its daemon "
                    "could not reach a majority of the nodes (%s %.3f-%.3f): no lease "
                    "confirmed before can last that long"
                    % (h.brief(), h.grant, h.validity, f["kind"], f["start"], f["end"])})
        for e in events:
            if (e["ev"] == "lock_err" and quiet_from < e["t"] < f["end"] and
                    workers.get(e["w"], {}).get("daemon") in lost):
                err = str(e.get("err", ""))
                if "keys" in e and err.startswith("LOST"):
                    continue  # a key a LOCKALL took was lost while it waited
                counts["backend_errors_without_quorum"] += 1
                if not err.startswith("BACKEND"):
                    res["failures"].append({
                        "kind": "not -BACKEND",
                        "text": "worker %s's LOCK failed with %r at %.3f while its daemon "
                        "could not reach a majority of the nodes (%s %.3f-%.3f)"
                        % (e["w"], e.get("err"), e["t"], f["kind"], f["start"], f["end"])})
        for h in holdings:
            if h.daemon not in lost or h.grant >= f["start"] or h.end <= f["start"]:
                continue
            if h.end_how == "death":
                continue
            lease = max([ttl] + [ms / 1000.0 for t, ms in extends.get((h.w, h.fence), [])
                                 if t < f["start"]])
            due = f["start"] + lease + bound
            if f["end"] < due:
                continue
            counts["holders_without_quorum"] += 1
            if h.end > due:
                res["failures"].append({
                    "kind": "not told", "holders": [h],
                    "text": "%s still believed it held the lock at %.3f: its daemon had "
                    "no quorum since %.3f (%s), and its lease lasts %.0f ms"
                    % (h.brief(), due, f["start"], f["kind"], lease * 1000)})


def excerpt(events, faults, holders, pad=0.3, limit=80):
    """The lines of the event logs of holders' workers (and the faults)
    around their holdings, for a report."""
    ws = {h.w for h in holders}
    t0 = min(h.lock_sent for h in holders) - pad
    t1 = max(h.end for h in holders) + pad
    lines = []
    for e in events:
        if e["w"] in ws and t0 <= e["t"] <= t1:
            rest = {k: v for k, v in e.items() if k not in ("t", "w", "ev")}
            lines.append((e["t"], "%-4s %-14s %s" % (e["w"], e["ev"], _fmt(rest))))
    for f in faults:
        if f["start"] <= t1 and f["end"] >= t0:
            lines.append((f["start"], "**** fault %s on %s starts" % (f["kind"], f["target"])))
            if f["end"] != f["start"]:
                lines.append((f["end"], "**** fault %s on %s ends" % (f["kind"], f["target"])))
    lines.sort(key=lambda x: x[0])
    if len(lines) > limit:
        lines = lines[:limit // 2] + [(None, "...")] + lines[-limit // 2:]
    base = t0 + pad
    return ["%+9.3f %s" % (t - base, s) if t is not None else s for t, s in lines]


def _fmt(d):
    parts = []
    for k, v in d.items():
        if isinstance(v, float):
            v = "%.3f" % v
        parts.append("%s=%s" % (k, v))
    return " ".join(parts)
