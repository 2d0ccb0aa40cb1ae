"""The LOCKALL section of the benchmark suite: bench/run.py runs it after the
election section (ids BACKEND/lockall/CASE, chosen with --only like the
others; `--only lockall` runs them all, about two minutes).

On every backend (memory; redis; redlock on REDLOCK_NODES redis-servers;
redis-cluster on a cluster of CLUSTER_MASTERS masters with a replica each;
etcd), with build/dlock-bench's set modes (lockall: LOCKALL n key... ,
UNLOCKALL n key... ; lockseq: a LOCK per key, an UNLOCK per key, the last
taken first):

  pair-cC, seq-cC  (C = 1, 16) uncontended, each client a pair of keys of
                   its own: LOCKALL 2 a b + UNLOCKALL 2 a b against
                   LOCK a, LOCK b, UNLOCK b, UNLOCK a, on one fresh dlockd:
                   sets/s, the time to take a set and the whole cycle (p50,
                   p99), the daemon's and the backend's CPU per set. On
                   redis-cluster the two keys of each client are on two
                   different masters (a key file picks the names)
  crowd            CROWD_CLIENTS clients (over two daemons where the backend
                   is shared, one on memory) loop for CROWD_WINDOW_MS: a pair
                   or a triple out of CROWD_KEYS keys, drawn in random order,
                   LOCKALL ... WAIT CROWD_WAIT_MS, a hold of CROWD_HOLD_US,
                   UNLOCKALL. Sets/s, timeouts (nil answers), deadlocks (a
                   request with no answer after WAIT + CROWD_MARGIN_MS:
                   dlock-bench's "stuck", counted until every client has
                   finished the set it was in after the window), Jain's
                   index over the clients' sets, the wait p50 / p99, and the
                   longest any request went unanswered
  crowd-seq        the same crowd taking its sets with a LOCK ... WAIT per
                   key in the drawn order, as a client without LOCKALL
                   would: what LOCKALL's one order spares (those LOCKs
                   deadlock until a WAIT runs out)

Goals (the issue's): in the crowd, no deadlock, Jain >= JAIN_GOAL, and no
request unanswered longer than WAIT + the margin.
"""

import os
import time

from dlocktest.cluster import RedisCluster
from dlocktest.daemon import Daemon
from dlocktest.env import new_dir
from dlocktest.etcd_server import EtcdServer
from dlocktest.proc import wait_until
from dlocktest.redis_server import RedisServer

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(os.path.dirname(HERE), BUILD)
BENCH = os.path.join(BUILD, "dlock-bench")

BACKENDS = ("memory", "redis", "redlock", "redis-cluster", "etcd")
PAIR_C = (1, 16)            # clients of the uncontended cases
CROWD_CLIENTS = 32
CROWD_KEYS = 10
CROWD_SET = "2-3"           # keys per set: a pair or a triple
CROWD_WAIT_MS = 2000
CROWD_HOLD_US = 1000
CROWD_MARGIN_MS = 500       # an answer later than WAIT + this: a deadlock
CROWD_WINDOW_MS = 5000
CROWD_WARMUP_MS = 500
JAIN_GOAL = 0.95
REDLOCK_NODES = 3
CLUSTER_MASTERS = 3
CLUSTER_NODE_TIMEOUT_MS = 15000     # as the lock runs: no failover on a busy machine
SUBSCRIBE_TIMEOUT = 10.0
SHARED = ("redis", "redlock", "redis-cluster", "etcd")   # two daemons in the crowd
LOCKALL_INFO = ("lockall_granted_total", "lockall_not_granted_total",
                "lockall_errors_total", "lockall_waiting")


def cases():
    out = []
    for c in PAIR_C:
        out += ["seq-c%d" % c, "pair-c%d" % c]
    return out + ["crowd", "crowd-seq"]


def ids():
    """The ids of the section's runs, for --only and --list."""
    return ["%s/lockall/%s" % (b, c) for b in BACKENDS for c in cases()]


# ---- servers and daemons ----

class Store:
    """The server(s) of one backend, started for its cases: None (memory),
    a RedisServer, a list of RedisServers (redlock), a RedisCluster, or an
    EtcdServer."""

    def __init__(self, backend):
        self.backend = backend
        self.server = None
        self.masters = []       # redis-cluster: masters, by node id
        self.slot_master = []   # redis-cluster: slot -> index into masters

    def start(self):
        b = self.backend
        if b == "redis":
            self.server = RedisServer().start()
        elif b == "redlock":
            self.server = []
            for _ in range(REDLOCK_NODES):
                self.server.append(RedisServer().start())
        elif b == "redis-cluster":
            self.server = RedisCluster(masters=CLUSTER_MASTERS, replicas=1,
                                       node_timeout_ms=CLUSTER_NODE_TIMEOUT_MS)
            self.server.start()
            # the masters by node id: keys are placed by master, and
            # their CPU summed, so any numbering does
            owners = self.server.slot_map()
            ids = sorted(set(owners) - {None})
            self.masters = [self.server.server(node_id=nid) for nid in ids]
            self.slot_master = [None if nid is None else ids.index(nid) for nid in owners]
        elif b == "etcd":
            self.server = EtcdServer().start()
        return self

    def pids(self):
        """{label: pid} of the processes whose CPU is the backend's."""
        if self.backend == "redis":
            return {"redis": self.server.pid}
        if self.backend == "redlock":
            return {"node%d" % i: s.pid for i, s in enumerate(self.server)}
        if self.backend == "redis-cluster":
            return {"master%d" % i: m.pid for i, m in enumerate(self.masters)}
        if self.backend == "etcd":
            return {"etcd": self.server.pid}
        return {}

    def daemon(self):
        """A fresh dlockd on the store (started; the caller stops it)."""
        kw = {"backend": self.backend, "unix": False}
        if self.backend in ("redis", "redlock", "redis-cluster"):
            kw["redis"] = self.server
        elif self.backend == "etcd":
            kw["etcd"] = self.server
        d = Daemon("", **kw).start()
        if self.backend == "redis-cluster":
            # an SSUBSCRIBE per slot follows the connection: not the run's
            wait_until(lambda: d.info().get("backend_subscribed", "1") == "1",
                       SUBSCRIBE_TIMEOUT, 0.01, "dlockd's INFO to show backend_subscribed:1")
        return d

    def master_of(self, key):
        return self.slot_master[RedisCluster.lock_slot(key)]

    def stop(self):
        s = self.server
        self.server = None
        if s is None:
            return
        if isinstance(s, list):
            for n in s:
                n.stop()
        else:
            s.stop()


def cluster_names(store, prefix, want):
    """redis-cluster: key names prefix + n grouped by the master of their
    slot, until each master has want of them: [[names of master 0], ...]."""
    by = [[] for _ in store.masters]
    n = 0
    while min(len(b) for b in by) < want:
        k = "%s%d" % (prefix, n)
        m = store.master_of(k)
        if len(by[m]) < want:
            by[m].append(k)
        n += 1
    return by


def key_file(store, case, clients, prefix, directory):
    """redis-cluster: a --key-file for dlock-bench: for the pairs, client
    i's two keys on masters i and i + 1 (mod the masters); for the crowd,
    the keys dealt over the masters in turn. Returns (path, the share of
    the crowd's pairs whose keys are on two masters), or (None, None) on
    other backends."""
    if store.backend != "redis-cluster":
        return None, None
    m = len(store.masters)
    if case.startswith("crowd"):
        by = cluster_names(store, prefix, (CROWD_KEYS + m - 1) // m)
        names = [by[i % m][i // m] for i in range(CROWD_KEYS)]
        owner = [i % m for i in range(CROWD_KEYS)]
        pairs = [(a, b) for a in range(CROWD_KEYS) for b in range(a + 1, CROWD_KEYS)]
        cross = sum(owner[a] != owner[b] for a, b in pairs) / float(len(pairs))
    else:
        by = cluster_names(store, prefix, clients * 2 // m + 2)
        names = []
        for i in range(clients):
            names += [by[i % m].pop(), by[(i + 1) % m].pop()]
        cross = 1.0
    path = os.path.join(directory, "keys-%s" % case)
    with open(path, "w") as f:
        f.write("\n".join(names) + "\n")
    return path, cross


# ---- one run ----

def tool_argv(rid, case, daemons, store, prefix, keys, window, warmup):
    crowd = case.startswith("crowd")
    mode = "lockseq" if case.startswith("seq") or case == "crowd-seq" else "lockall"
    a = [BENCH, "--mode", mode, "--prefix", prefix, "--label", rid]
    if crowd:
        a += ["--workload", "hot", "--keys", str(CROWD_KEYS), "--zipf", "0",
              "--set", CROWD_SET, "--wait-ms", str(CROWD_WAIT_MS),
              "--margin-ms", str(CROWD_MARGIN_MS), "--hold-us", str(CROWD_HOLD_US),
              "--clients", str(CROWD_CLIENTS), "--duration", str(CROWD_WINDOW_MS),
              "--warmup", str(CROWD_WARMUP_MS)]
    else:
        a += ["--workload", "uncontended", "--set", "2", "--hold-us", "0",
              "--clients", case.rsplit("-c", 1)[1], "--duration", str(window),
              "--warmup", str(warmup)]
    if keys:
        a += ["--key-file", keys]
    for i, d in enumerate(daemons):
        a += ["--addr", d.addr(), "--cpu", "dlockd%d=%d" % (i, d.pid)]
    for label, pid in sorted(store.pids().items()):
        a += ["--cpu", "%s=%d" % (label, pid)]
    return a


def lockall_info(daemons):
    """The daemons' LOCKALL counters of INFO, summed (None where a daemon
    does not have them)."""
    out = {}
    infos = [d.info() for d in daemons]
    for k in LOCKALL_INFO:
        vals = [i.get(k) for i in infos]
        out[k] = None if None in vals else sum(int(v) for v in vals)
    return out


def derive(rec, tool, before, after):
    """The section's figures of one run from dlock-bench's JSON."""
    ops = tool["ops"]
    cpu = tool["cpu_us"]
    daemon_cpu = [v for k, v in cpu.items() if k.startswith("dlockd")]
    backend_cpu = [v for k, v in cpu.items() if not k.startswith("dlockd")]

    def per_set(vals):
        if not vals or None in vals or not ops:
            return None
        return sum(vals) / float(ops)
    rec.update({
        "mode": tool["mode"], "clients": tool["clients"], "rate": tool["rate"], "sets": ops,
        "take_us": tool["wait_us"], "cycle_us": tool["cycle_us"],
        "daemon_cpu_us_per_set": per_set(daemon_cpu),
        "backend_cpu_us_per_set": per_set(backend_cpu),
        "jain_clients": tool["jain_clients"], "per_client": tool["per_client"],
        "starved_clients": tool["starved_clients"],
        "timeouts": tool["not_granted"], "timeouts_total": tool["not_granted_total"],
        "deadlocks": tool["stuck"],
        "stuck": tool["stuck"], "unanswered_at_end": tool["unanswered_at_end"],
        "longest_unanswered_us": tool["longest_unanswered_us"],
        "drain_s": tool["drain_s"], "wait_ms": tool["wait_ms"], "margin_ms": tool["margin_ms"],
        "errors": tool["errors"], "first_error": tool["first_error"],
        "tool_cpu_pct": tool["tool_cpu_pct"], "window_s": tool["window_s"]})
    # the counters over the run; the gauge as the run left it
    rec["daemon_counters"] = {k: None if after[k] is None or before[k] is None else
                              after[k] - before[k] for k in LOCKALL_INFO[:-1]}
    rec["daemon_counters"]["lockall_waiting_after"] = after[LOCKALL_INFO[-1]]


def run_one(store, rid, case, index, window, warmup, directory, run_tool):
    """One run: fresh daemons, dlock-bench (through run_tool(argv, limit s),
    which returns its JSON), the record."""
    rec = {"id": rid, "backend": store.backend, "case": case}
    crowd = case.startswith("crowd")
    n = 2 if crowd and store.backend in SHARED else 1
    daemons = []
    try:
        for _ in range(n):
            daemons.append(store.daemon())
        prefix = "bench-lockall/%d/%d/" % (os.getpid(), index)
        clients = CROWD_CLIENTS if crowd else int(case.rsplit("-c", 1)[1])
        keys, cross = key_file(store, case, clients, prefix, directory)
        if cross is not None:
            rec["cross_master_pairs"] = cross
        before = lockall_info(daemons)
        argv = tool_argv(rid, case, daemons, store, prefix, keys, window, warmup)
        limit = (CROWD_WINDOW_MS + CROWD_WARMUP_MS + 3 * CROWD_WAIT_MS if crowd
                 else window + warmup) / 1000.0 + 30
        tool = run_tool(argv, limit)
        after = lockall_info(daemons)
        rec["daemons"] = n
        derive(rec, tool, before, after)
    finally:
        for d in daemons:
            d.stop()
    return rec


def probe():
    """None if this dlockd knows LOCKALL, else why the section is left out."""
    d = Daemon("", unix=False).start()
    try:
        c = d.raw()
        try:
            got = c.cmd("LOCKALL", 1, "bench-lockall-probe")
            c.cmd("UNLOCKALL", 1, "bench-lockall-probe")
        finally:
            c.close()
    finally:
        d.stop()
    if isinstance(got, Exception) or not isinstance(got, list):
        return "this dlockd does not know LOCKALL yet (LOCKALL 1 key answered %r)" % (got,)
    return None


def run(rx, window, warmup, run_tool, log=print):
    """Run the section (the cases whose id rx matches, when given), the
    uncontended cases with the suite's window and warm-up (ms), dlock-bench
    through run_tool (the suite's: argv, limit in s -> its JSON); returns
    its records for results.json."""
    recs = []
    wanted = [i for i in ids() if rx is None or rx.search(i)]
    if not wanted:
        return recs
    why = probe()
    if why is not None:
        log("left out: %s" % why)
        return [{"id": i, "backend": i.split("/")[0], "case": i.rsplit("/", 1)[1],
                 "skipped": why} for i in wanted]
    directory = new_dir("bench-lockall")
    index = 0
    for backend in BACKENDS:
        mine = [i for i in wanted if i.startswith(backend + "/")]
        if not mine:
            continue
        store = Store(backend)
        try:
            store.start()
        except (AssertionError, OSError, ValueError) as e:
            why = "%s could not be started: %s" % (backend, str(e).strip().splitlines()[0])
            store.stop()
            for rid in mine:
                recs.append({"id": rid, "backend": backend, "case": rid.rsplit("/", 1)[1],
                             "skipped": why})
                log("%-36s skipped: %s" % (rid, why))
            continue
        try:
            for rid in mine:
                case = rid.rsplit("/", 1)[1]
                t = time.monotonic()
                try:
                    rec = run_one(store, rid, case, index, window, warmup, directory,
                                  run_tool)
                except (AssertionError, OSError, ValueError, KeyError) as e:
                    rec = {"id": rid, "backend": backend, "case": case, "error": str(e)[:2000]}
                index += 1
                recs.append(rec)
                log("%-36s %s (%.1f s)" % (rid, summary(rec), time.monotonic() - t))
        finally:
            store.stop()
    for line in markdown(recs).splitlines():
        log(line)
    return recs


# ---- the report ----

def ms(us):
    if us is None:
        return "–"
    return "%.2f ms" % (us / 1000.0) if us >= 1000 else "%.0f µs" % us


def rate(v):
    return "–" if v is None else "%.1f" % v if v < 100 else "%.0f" % v


def num(v, fmt="%.0f"):
    return "–" if v is None else fmt % v


def summary(rec):
    if "error" in rec:
        return "ERROR: %s" % rec["error"].splitlines()[0]
    if "skipped" in rec:
        return "skipped: %s" % rec["skipped"]
    s = "%s sets/s, take p50 %s p99 %s, cycle p50 %s p99 %s" % (
        rate(rec["rate"]), ms(rec["take_us"]["p50"]), ms(rec["take_us"]["p99"]),
        ms(rec["cycle_us"]["p50"]), ms(rec["cycle_us"]["p99"]))
    if rec["case"].startswith("crowd"):
        s += ", %d timeouts, %d deadlocks, Jain %s, longest unanswered %s" % (
            rec["timeouts"], rec["deadlocks"], num(rec["jain_clients"], "%.3f"),
            ms(rec["longest_unanswered_us"]))
    if rec["errors"]:
        s += ", %d errors (%s)" % (rec["errors"], rec["first_error"])
    return s


def measured(rec):
    return rec is not None and "error" not in rec and "skipped" not in rec


def goals(recs):
    """The rows (goal, backend, this run, target, met) of the crowd's goals."""
    by = {r["id"]: r for r in recs}
    rows = []
    bound_us = (CROWD_WAIT_MS + CROWD_MARGIN_MS) * 1000.0
    for b in BACKENDS:
        rid = "%s/lockall/crowd" % b
        if rid not in by:
            continue
        r = by[rid]
        if not measured(r):
            for g, t in (("no deadlock", "0"), ("Jain over clients", "≥ %g" % JAIN_GOAL),
                         ("longest unanswered", "≤ WAIT + %d ms" % CROWD_MARGIN_MS)):
                rows.append((g, b, "not measured", t, "–"))
            continue
        rows.append(("no deadlock", b, "%d" % r["deadlocks"], "0",
                     "met" if r["deadlocks"] == 0 else "**not met**"))
        j = r["jain_clients"]
        rows.append(("Jain over clients", b, num(j, "%.3f"), "≥ %g" % JAIN_GOAL,
                     "met" if j is not None and j >= JAIN_GOAL else "**not met**"))
        rows.append(("longest unanswered", b, ms(r["longest_unanswered_us"]),
                     "≤ %s" % ms(bound_us),
                     "met" if r["longest_unanswered_us"] <= bound_us and
                     r["deadlocks"] == 0 else "**not met**"))
    return rows


def ratio(a, b, key):
    if not measured(a) or not measured(b):
        return None, None, None
    va, vb = a, b
    for k in key.split("."):
        va, vb = va[k], vb[k]
    return va, vb, (va / vb if vb else None)


def markdown(recs):
    """The section of results.md (and what the section prints at its end)."""
    if not recs:
        return ""
    skipped = {r.get("skipped") for r in recs}
    if len(skipped) == 1 and None not in skipped:
        return "\n## LOCKALL\n\nNot measured: %s.\n" % skipped.pop()
    by = {r["id"]: r for r in recs}
    lines = ["", "## LOCKALL", "",
             "Uncontended: each client a pair of keys of its own, one fresh dlockd; "
             "LOCKALL 2 a b + UNLOCKALL 2 a b against LOCK a, LOCK b, UNLOCK b, UNLOCK a "
             "(on redis-cluster the pair's keys on two masters). take: from the first "
             "request to the set held; cycle: to the last release answered; CPU per set "
             "over the window (backend: redis-server, the redlock nodes, the cluster's "
             "masters, etcd).", "",
             "| backend | C | LOCKALL sets/s | LOCK×2 sets/s | ratio | LOCKALL take p50 / p99 "
             "| LOCK×2 take p50 / p99 | LOCKALL cycle p50 / p99 | LOCK×2 cycle p50 / p99 "
             "| dlockd CPU µs/set LOCKALL / LOCK×2 | backend CPU µs/set LOCKALL / LOCK×2 |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for b in BACKENDS:
        for c in PAIR_C:
            pa, sq = by.get("%s/lockall/pair-c%d" % (b, c)), by.get("%s/lockall/seq-c%d" % (b, c))
            if pa is None and sq is None:
                continue
            ra, rs, rr = ratio(pa, sq, "rate")

            def two(r, key):
                if not measured(r):
                    return "–"
                return "%s / %s" % (ms(r[key]["p50"]), ms(r[key]["p99"]))

            def cpu(key):
                return "%s / %s" % (num(pa.get(key) if measured(pa) else None, "%.1f"),
                                    num(sq.get(key) if measured(sq) else None, "%.1f"))
            lines.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                b, c, rate(ra), rate(rs), num(rr, "%.2f"), two(pa, "take_us"),
                two(sq, "take_us"), two(pa, "cycle_us"), two(sq, "cycle_us"),
                cpu("daemon_cpu_us_per_set"), cpu("backend_cpu_us_per_set")))
    lines += ["",
              "Crowd: %d clients (over two daemons on a shared backend, one on memory) for "
              "%.0f s: a pair or a triple of %d keys in random order, LOCKALL ... WAIT %d, "
              "hold %s, UNLOCKALL (crowd-seq: a LOCK ... WAIT %d per key in that order, "
              "as without LOCKALL). timeouts: nil answers in the window; deadlocks: "
              "requests unanswered after WAIT + %d ms (until every client finished its "
              "set after the window); wait: from LOCKALL sent to the grant; longest "
              "unanswered: the longest any request waited for an answer, granted or nil. "
              "On redis-cluster the keys are dealt over the masters in turn."
              % (CROWD_CLIENTS, CROWD_WINDOW_MS / 1000.0, CROWD_KEYS, CROWD_WAIT_MS,
                 ms(CROWD_HOLD_US), CROWD_WAIT_MS, CROWD_MARGIN_MS), "",
              "| run | sets/s | timeouts | deadlocks | Jain clients | wait p50 | p99 "
              "| longest unanswered | errors |",
              "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in recs:
        if not r["case"].startswith("crowd"):
            continue
        if not measured(r):
            lines.append("| %s | %s | | | | | | | |" % (r["id"], summary(r)))
            continue
        lines.append("| %s | %s | %d | %d | %s | %s | %s | %s | %s |" % (
            r["id"], rate(r["rate"]), r["timeouts"], r["deadlocks"],
            num(r["jain_clients"], "%.3f"), ms(r["take_us"]["p50"]),
            ms(r["take_us"]["p99"]), ms(r["longest_unanswered_us"]),
            "%d%s" % (r["errors"], " (%s)" % r["first_error"] if r["errors"] else "")))
    rows = goals(recs)
    if rows:
        lines += ["", "| goal (crowd) | backend | this run | goal | met |",
                  "|---|---|--:|--:|---|"]
        lines += ["| " + " | ".join(g) + " |" for g in rows]
    left = [r for r in recs if "skipped" in r or "error" in r]
    if left:
        lines += [""] + ["%s: %s" % (r["id"], summary(r)) for r in left]
    return "\n".join(lines) + "\n"
