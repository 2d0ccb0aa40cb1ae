"""The election section of the benchmark suite: bench/run.py runs it after the
lock runs (ids BACKEND/elect/CASE, chosen with --only like the others).

On each backend that elects (the memory backend so far; the others answer
CAMPAIGN with -ERR and are listed as not measured), against a fresh dlockd:

  handover  a leader's connection closes (its process died) while a standby's
            CAMPAIGN waits on another connection: the time from the close to
            the standby's grant, ROUNDS times
  observe   an observer waits in OBSERVE key AFTER rev on a connection of its
            own; the leader sends PROCLAIM: the time from the PROCLAIM sent
            to the observer's answer, ROUNDS times
  idle      IDLE_OBSERVERS sessions each wait in OBSERVE on a key of its own
            (and as many follow one with RESP3 pushes); over IDLE_WINDOW s:
            the daemon's CPU, the backend's operations, and the daemon's
            resident memory per observer

The clients are raw RESP sockets in this process (Python): a latency
includes a few tens of microseconds of it, small beside the millisecond
goals (issue: handover within a few milliseconds, observe p99 <= 10 ms).
"""

import os
import socket
import statistics
import time

from dlocktest.daemon import Daemon
from dlocktest.proc import raise_nofile, vm_rss_kib
from dlocktest.resp import Raw, encode, parse_info
from dlocktest.sessions import close_hard

ROUNDS = 200
IDLE_OBSERVERS = 1000
IDLE_WINDOW = 3.0           # s the idle observers are watched
BACKENDS = ("memory",)      # those that elect so far
NOT_YET = ("redis", "redlock", "redis-cluster", "etcd")
CASES = ("handover", "observe", "idle")


def ids():
    """The ids of the section's runs, for --only and --list."""
    return ["%s/elect/%s" % (b, c) for b in BACKENDS for c in CASES]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def timing(xs_s):
    """p50, p99 and max of durations in s, as µs."""
    us = [x * 1e6 for x in xs_s]
    return {"n": len(us), "p50_us": pct(us, 50), "p99_us": pct(us, 99), "max_us": max(us),
            "mean_us": statistics.mean(us)}


def cpu_s(pid):
    """utime + stime of pid, s."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def handover(d, key):
    """ROUNDS times: a leader, a standby waiting; the leader's socket closes."""
    out = []
    standby = d.raw()
    standby.cmd("CAMPAIGN", key, "standby-0")
    for i in range(ROUNDS):
        leader, standby = standby, d.raw()
        standby.send(encode("CAMPAIGN", key, "standby-%d" % (i + 1)))
        # the standby is queued before the leader goes
        deadline = time.monotonic() + 5
        while True:
            st = leader.cmd("STATUS", key)
            if dict(zip(st[::2], st[1::2]))[b"waiters"] == 1:
                break
            if time.monotonic() > deadline:
                raise AssertionError("the standby never queued")
        t0 = time.monotonic()
        leader.s.close()
        g = standby.read()
        out.append(time.monotonic() - t0)
        if not isinstance(g, list) or len(g) != 3:
            raise AssertionError("the standby got %r" % (g,))
    standby.close()
    return timing(out)


def observe(d, key):
    """ROUNDS times: PROCLAIM, and the observer's OBSERVE AFTER answered."""
    leader, obs, info = d.raw(), d.raw(), d.raw()
    leader.cmd("CAMPAIGN", key, "v0")
    rev = obs.cmd("LEADER", key)[2]
    out = []
    for i in range(ROUNDS):
        obs.send(encode("OBSERVE", key, "AFTER", rev, "WAIT", 5000))
        while int(parse_info(info.cmd("INFO"))["observe_waiting"]) < 1:
            pass                # until it waits (it asks after the newest)
        t0 = time.monotonic()
        leader.send(encode("PROCLAIM", key, "v%d" % (i + 1)))
        got = obs.read()
        out.append(time.monotonic() - t0)
        leader.read()
        if not isinstance(got, list) or got[0] != b"v%d" % (i + 1):
            raise AssertionError("the observer got %r" % (got,))
        rev = got[2]
    for c in (leader, obs, info):
        c.close()
    return timing(out)


def idle(d, prefix):
    """IDLE_OBSERVERS waiting OBSERVEs and as many RESP3 follows."""
    info = d.raw()
    rss0 = vm_rss_kib(d.pid)
    socks = []
    try:
        for i in range(IDLE_OBSERVERS):
            s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
            socks.append(s)
            s.sendall(encode("OBSERVE", "%s-%d" % (prefix, i), "AFTER", 10 ** 15))
        for i in range(IDLE_OBSERVERS):
            s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
            socks.append(s)
            s.sendall(encode("HELLO", 3) + encode("OBSERVE", "%s-f" % prefix, "FOLLOW"))
        deadline = time.monotonic() + 30
        while True:
            inf = parse_info(info.cmd("INFO"))
            if (int(inf["observe_waiting"]) >= IDLE_OBSERVERS and
                    int(inf["observe_follows"]) >= IDLE_OBSERVERS):
                break
            if time.monotonic() > deadline:
                raise AssertionError("observers not all waiting: %r" % inf)
            time.sleep(0.05)
        rss1 = vm_rss_kib(d.pid)
        ops0 = int(parse_info(info.cmd("INFO"))["backend_ops_total"])
        c0 = cpu_s(d.pid)
        time.sleep(IDLE_WINDOW)
        c1 = cpu_s(d.pid)
        ops1 = int(parse_info(info.cmd("INFO"))["backend_ops_total"])
        return {"observers": 2 * IDLE_OBSERVERS,
                "rss_per_observer_kib": (rss1 - rss0) / (2.0 * IDLE_OBSERVERS),
                "daemon_cpu_pct": 100.0 * (c1 - c0) / IDLE_WINDOW,
                "backend_ops_per_s": (ops1 - ops0) / IDLE_WINDOW}
    finally:
        close_hard(socks)
        info.close()


def run(rx=None, log=print):
    """Run the section (the cases whose id rx matches, when given); returns
    its records for results.json."""
    recs = []
    wanted = [i for i in ids() if rx is None or rx.search(i)]
    if not wanted:
        return recs
    raise_nofile(2 * IDLE_OBSERVERS + 1000)
    for backend in BACKENDS:
        mine = [i for i in wanted if i.startswith(backend + "/")]
        if not mine:
            continue
        d = Daemon("limits:\n  max_clients: %d\n" % (2 * IDLE_OBSERVERS + 100),
                   backend=backend)
        d.start()
        try:
            for rid in mine:
                case = rid.rsplit("/", 1)[1]
                rec = {"id": rid, "backend": backend, "case": case}
                t = time.monotonic()
                try:
                    key = "bench-elect-%s-%d" % (case, os.getpid())
                    rec.update({"handover": handover, "observe": observe,
                                "idle": idle}[case](d, key))
                except (AssertionError, OSError, ValueError, KeyError) as e:
                    rec["error"] = str(e)[:2000]
                recs.append(rec)
                log("%-36s %s (%.1f s)" % (rid, summary(rec), time.monotonic() - t))
        finally:
            d.stop()
    return recs


def summary(rec):
    if "error" in rec:
        return "ERROR: %s" % rec["error"].splitlines()[0]
    if rec["case"] == "idle":
        return "%d observers: %.2f KiB each, daemon CPU %.2f %%, backend %.1f ops/s" % (
            rec["observers"], rec["rss_per_observer_kib"], rec["daemon_cpu_pct"],
            rec["backend_ops_per_s"])
    return "p50 %.0f µs, p99 %.0f µs, max %.0f µs over %d" % (
        rec["p50_us"], rec["p99_us"], rec["max_us"], rec["n"])


def markdown(recs):
    """The section of results.md."""
    if not recs:
        return ""
    lines = ["", "## Election and observing", "",
             "Handover: a leader's connection closes, a standby's waiting CAMPAIGN is "
             "granted. Observe: PROCLAIM sent until a waiting OBSERVE AFTER is answered. "
             "Idle: observers waiting (OBSERVE AFTER) and following (RESP3), the daemon "
             "left alone for %.0f s. Not measured yet (CAMPAIGN answers -ERR): %s." %
             (IDLE_WINDOW, ", ".join(NOT_YET)), "",
             "| run | result |", "|---|---|"]
    for r in recs:
        lines.append("| %s | %s |" % (r["id"], summary(r)))
    return "\n".join(lines) + "\n"
