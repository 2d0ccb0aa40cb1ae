"""dlockd's safety test: a fenced lock-set test with fault injection.

Worker processes (worker.py) lock one key through dlockd, read a counter from
a fenced resource (fenced.py: a redis-server of its own whose Lua scripts
reject fences below the highest seen) with their fence, hold the lock, write
counter + 1 with their fence and unlock, while this orchestrator injects
faults aimed at moments when an acquire or a renewal is in flight:

  client_kill      SIGKILL a worker (a replacement is started)
  client_stop      SIGSTOP a worker (past sessions.idle_timeout_ms or not)
  daemon_stop      SIGSTOP a dlockd past the TTL
  daemon_kill      SIGKILL a dlockd and start it again
  backend_stop     SIGSTOP the backend's server (redis-server, etcd) past
                   the TTL
  backend_restart  SIGKILL the backend's server and start it again on the
                   same port (and data): leases survive (Redis: appendonly
                   yes, appendfsync always; etcd keeps its data and extends
                   every lease when it comes back)
  backend_restart_loss   Redis only: the same without persistence, every
                   lease is lost
  blackhole        the TCP proxy between a dlockd and its backend stops
                   forwarding both ways, on every connection, closing
                   nothing, then heals
  master_kill      Sentinel: SIGKILL the master; the sentinels promote the
                   replica (the old master rejoins as a replica after it)
  master_stop      Sentinel: SIGSTOP the master until the sentinels have
                   promoted the replica, then SIGCONT it: a stale master
                   until the sentinels demote it
  sentinel_kill    Sentinel: SIGKILL a sentinel, then the master: a
                   failover by the two sentinels left (both come back after)
  node_kill        redlock: SIGKILL one of the three nodes and start it again
                   on the same port and data (appendonly yes, appendfsync
                   always)
  node_stop        redlock: SIGSTOP one node (past the TTL, or less), then
                   SIGCONT
  node_restart_loss  redlock: SIGKILL one node and start it again without
                   its data, but only once the longest lease it may have held
                   has run out (the delayed restart: 1.3 x the TTL or more,
                   an EXTEND's lease being up to 1.25 x the TTL)
  node_restart_loss_now  redlock: the same, started again at once (50 ms):
                   the leases it forgot still stand on the two other nodes
  node_blackhole   redlock: the proxy on the second daemon's path to one node
                   black-holes it (the other two paths stay)
  majority_blackhole  redlock: the second daemon's paths to two of the three
                   nodes black-holed: it loses its quorum, the first does not
  majority_lost    redlock: SIGKILL two of the three nodes; holders must be
                   told before their validity ends, LOCK answers -BACKEND;
                   then both come back with their data
  master_kill      Redis Cluster too: SIGKILL the master of a key of the
                   lock set; its replica takes over; the old master is
                   started again (with its nodes.conf) and rejoins as a
                   replica
  master_stop      Redis Cluster too: SIGSTOP that master until its replica
                   has taken over, and 0.3 s more; it runs again as a stale
                   master until the cluster demotes it
  reshard          Redis Cluster: move the slots of keys of the lock set to
                   another master (CLUSTER SETSLOT IMPORTING / MIGRATING,
                   MIGRATE, SETSLOT NODE), in one go or a key at a time,
                   while the workers lock

Backends: memory (one daemon: client and daemon faults); redis (two daemons
on one Redis, the second behind the proxy: every fault); etcd (two daemons on
one etcd, the second behind the proxy, whose several keep-alive connections
and watch stream all go through it: every fault but backend_restart_loss);
sentinel (two daemons on Redis Sentinel: a master, a replica and three
sentinels, dlocktest.sentinel; the master and sentinel faults);
redlock (two daemons on three independent redis-servers, -b
redlock://n0,n1,n2, quorum 2; the second daemon reaches each node through
a proxy of its own; the client, daemon and node faults); redlock-cache
(the same with backend.lease_cache_ms, as redis-cache); cluster (two
daemons on a Redis Cluster of 3 masters with a replica each, -b
redis-cluster://..., straight to the nodes, the lock set's three keys one
on each master; the client, daemon, master and reshard faults).
"split" runs two independent memory daemons as if they were one lock
service: the checker must report it (check.py explains what is checked).

Elections: memory-elect is the memory topology (its faults: client_kill,
client_stop, daemon_stop, daemon_kill) with workers that CAMPAIGN key <their
id> in place of LOCK, PROCLAIM a new value now and then while they lead,
write with their term as the fence and RESIGN; one worker of the layout
still LOCKs the same keys. Observer processes (observer.py, a RESP2 and a
RESP3 one per key) loop on OBSERVE key AFTER rev WAIT ms on connections of
their own, starting again from LEADER (a new epoch) when their daemon was
killed; at the end each daemon is asked LEADER of each key.
check_elect.py judges what they saw. redis-elect, etcd-elect,
sentinel-elect, cluster-elect and redlock-elect are the same on those
topologies, with all of their faults: leaders on both daemons, and on each
key an observer on each daemon, which learns of the other daemon's leaders
through the backend (on redlock, a quorum read of the nodes). A backend
gets its twin ("<backend>-elect") when it is listed in
topology.ELECT_BACKENDS.

Sets of keys: memory-multi is the memory topology with a pool of four keys,
every other worker of its layout a set worker that takes 2 or 3 of them (a
random subset in a random order) with one LOCKALL, reads and writes each
key's counter with that key's fence and gives them back with UNLOCKALL; the
others LOCK single keys of the same pool, so sets compete with single
holders and with each other. redis-multi, redis-cache-multi, etcd-multi,
sentinel-multi, redlock-multi and cluster-multi (its three keys, one on each
master) are the same on those topologies, with all of their faults. A
backend gets its twin ("<backend>-multi") when it is listed in
topology.MULTI_BACKENDS. check.py applies its rules to every key of a set
and checks that no set was granted in part.

On etcd a session lock lives on its daemon's etcd lease
(backend.lease_ttl_ms), not on a TTL of its own: the scenarios set that
lease to the TTL they use, so that their durations (in multiples of the TTL)
keep their meaning, and aim "renew" faults at the daemon's keepalive of
that lease.

    python3 -m faults.safety --short | --long [--only NAME]... [--rounds N]
              [--seed N] [--out DIR] [--json FILE]

(tests/ on PYTHONPATH, as tests/faults/run.sh sets it). How each backend
topology is started and faulted is in topology.py, topo_sentinel.py,
topo_redlock.py and topo_cluster.py; this module runs the scenarios and
check.py judges them.

SHORT (tests/integration/test_safety.py, part of make check) runs one round of
a representative subset (memory-elect/daemon_kill,
redis-elect/daemon_kill, memory-multi/daemon_kill and
redis-multi/backend_restart among them) in about a minute and a half; LONG
(make check-faults) every backend x fault, several rounds each. The
sentinel, redlock, cluster, election and other multi-key scenarios are in
LONG only; --only picks them in SHORT mode too (--only sentinel, --only
redlock, --only cluster, --only=-elect, --only redis-elect, --only=-multi:
one round of each). With DLOCKD_WRAPPER set (valgrind) durations are scaled
up and the faults whose timing would not survive are left out, which is
printed. The run prints a table and the path of a JSON file with every
result; the exit status is 0 only if every check passed (and the split run
was caught).

Environment: DLOCKD_BIN (default build/dlockd), DLOCKD_TEST_TMP (scratch
directory; every process started is recorded in its pids/ directory, see
dlocktest.proc), DLOCKD_WRAPPER.
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
import traceback

from dlocktest import resp
from dlocktest.env import DLOCKD, PYTHON, WRAPPER, new_dir, subdir
from dlocktest.proc import forget, install_signal_handlers, log_tail, reap, spawn, tracked
from dlocktest.redis_server import RedisServer

from faults import check, check_elect, fenced
from faults.observer import state_of
from faults.topo_cluster import ClusterTopology
from faults.topo_redlock import RedlockCacheTopology, RedlockTopology
from faults.topo_sentinel import SentinelTopology
from faults.topology import (CLIENT_FAULTS, ELECT_BACKENDS, MULTI_BACKENDS, EtcdTLSTopology,
                             EtcdTopology, RedisCacheTopology, RedisTopology, SplitTopology,
                             Topology, elect_topology, held, multi_topology, say)

HERE = os.path.dirname(os.path.abspath(__file__))


def with_twins(topologies):
    """topologies, each of ELECT_BACKENDS followed by its election twin,
    and each of MULTI_BACKENDS by its multi-key twin."""
    out = {}
    for name, cls in topologies.items():
        out[name] = cls
        if name in ELECT_BACKENDS:
            out[name + "-elect"] = elect_topology(cls)
        if name in MULTI_BACKENDS:
            out[name + "-multi"] = multi_topology(cls)
    return out


# the topologies by backend name, in the order of LONG
TOPOLOGIES = with_twins({
    "memory": Topology,
    "redis": RedisTopology,
    "redis-cache": RedisCacheTopology,
    "etcd": EtcdTopology,
    "etcd-tls": EtcdTLSTopology,
    "sentinel": SentinelTopology,
    "redlock": RedlockTopology,
    "redlock-cache": RedlockCacheTopology,
    "cluster": ClusterTopology,
    "split": SplitTopology,
})
SHORT = [("memory", "client_kill"), ("memory", "client_stop"), ("memory", "daemon_kill"),
         ("memory-elect", "daemon_kill"), ("redis-elect", "daemon_kill"),
         ("redis", "daemon_stop"), ("redis", "blackhole"),
         ("redis", "backend_stop"), ("redis", "backend_restart"),
         ("redis", "backend_restart_loss"), ("etcd", "daemon_stop"), ("etcd", "backend_stop"),
         ("etcd", "blackhole"), ("memory-multi", "daemon_kill"),
         ("redis-multi", "backend_restart"), ("split", "none")]
# what --only may pick in SHORT mode besides SHORT (one round each)
ONLY_SHORT = [(b, f) for b in ["sentinel", "redlock", "redlock-cache", "cluster"] +
              [e + "-elect" for e in ELECT_BACKENDS] + [m + "-multi" for m in MULTI_BACKENDS]
              for f in TOPOLOGIES[b].FAULTS if (b, f) not in SHORT]
# Under a wrapper (valgrind) the daemon is slow: every duration and backend
# timeout is scaled up (x3), with which all the SHORT faults keep their timing;
# these are left out to bound the run's time, as the others go through the
# same daemon code
WRAPPED_SKIP = {
    ("memory", "client_stop"): "to bound the time under the wrapper (a session closed "
                               "while it holds a lock, as in memory/client_kill)",
    ("redis", "backend_restart_loss"): "to bound the time under the wrapper (the same "
                                       "reconnection as redis/backend_restart)",
    ("etcd", "daemon_stop"): "to bound the time under the wrapper (the daemon's etcd "
                             "lease lost and granted again, as in etcd/blackhole)",
    ("etcd", "backend_stop"): "to bound the time under the wrapper (etcd calls that time "
                              "out and a lease lost, as in etcd/blackhole)",
}


# ---- the workers' logs ----

class Tail:
    """Follows the workers' log files."""

    def __init__(self):
        self.files = {}   # path -> [file, partial line]
        self.events = []

    def add(self, path):
        self.files[path] = [None, b""]

    def poll(self):
        new = []
        for path, st in self.files.items():
            if st[0] is None:
                try:
                    st[0] = open(path, "rb")
                except FileNotFoundError:
                    continue
            data = st[0].read()
            if not data:
                continue
            data = st[1] + data
            lines = data.split(b"\n")
            st[1] = lines.pop()
            for line in lines:
                if line.strip():
                    try:
                        new.append(json.loads(line))
                    except ValueError:
                        pass
        self.events.extend(new)
        return new

    def wait(self, pred, timeout):
        """The first new event (from now on) for which pred is true, or None
        after timeout s."""
        self.poll()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in self.poll():
                if pred(e):
                    return e
            time.sleep(0.002)
        return None

    def close(self):
        for st in self.files.values():
            if st[0] is not None:
                st[0].close()


def read_events(paths):
    """Every event of the log files (a line cut by a SIGKILL is skipped)."""
    out = []
    for p in paths:
        try:
            with open(p, "rb") as f:
                for line in f:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
        except FileNotFoundError:
            pass
    out.sort(key=lambda e: e["t"])
    return out


# ---- one scenario ----

class Scenario:
    """One backend x fault, several rounds, in processes of its own: the
    topology's (self.topo), the fenced resource's, the workers' and (the
    election scenarios) the observers'."""

    def __init__(self, backend, fault, rounds, mode, seed, scale, outdir):
        self.backend = backend
        self.fault = fault
        self.rounds = rounds
        self.mode = mode
        self.rng = random.Random(seed)
        self.seed = seed
        self.scale = scale
        self.dir = outdir
        self.name = "%s/%s" % (backend, fault)
        self.topo = TOPOLOGIES[backend](self)
        # leases: short, so that faults bite quickly, with a margin that
        # leaves the Python workers time to hear of a loss
        if mode == "long":
            ttl, self.margin_pct = 2000, 10
        else:
            ttl, self.margin_pct = 1200, 20
        self.ttl = self.topo.lease_ttl(fault, ttl, scale)
        self.margin_ms = self.ttl * self.margin_pct // 100
        self.idle_ms = self.ttl * 2 if fault == "client_stop" else 0
        # two keys, so that more locks are granted in a given time (the
        # multi-key twins: a pool of KEYS; the cluster: one on each master,
        # chosen once it runs)
        self.keys = ["safety/%s/%s/%d" % (backend, fault, i)
                     for i in range(self.topo.KEYS)]
        self.faults = []     # dicts: kind, target, start, end, aim, ...
        self.workers = {}    # id -> {"proc", "daemon", "kind", "role", "key", "log", "pid"}
        self.wseq = 0
        self.observers = {}  # id -> {"proc", "daemon", "kind", "key", "log", "pid"}
        self.otail = Tail()  # the observers' logs
        self.daemons = {}    # name -> Daemon
        self.tail = Tail()
        self.resource = None
        self.notes = []      # what happened to the processes
        self.failures = []   # failed checks outside the logs

    # ---- set-up ----

    def daemon_config(self):
        text = "locks:\n  default_ttl_ms: %d\n  margin_percent: %d\n" % (
            self.ttl, self.margin_pct)
        if self.idle_ms:
            text += "sessions:\n  idle_timeout_ms: %d\n" % self.idle_ms
        text += "log:\n  level: info\n"
        return text

    def start_env(self):
        self.resource = RedisServer(directory=subdir(self.dir, "resource")).start()
        self.topo.start(self.daemon_config())
        for d in self.daemons.values():
            d.start()

    def worker_config(self, wid, daemon, kind, role):
        ttl = self.ttl
        push = kind == "raw3push"
        short_min = self.topo.HOLD_MIN_MS
        return {
            "id": wid, "kind": kind, "daemon": daemon,
            "campaign": role == "campaign", "proclaim_frac": 0.3,
            # a set worker: LOCKALL of 2 or 3 keys of the lock set
            "lockall": role == "lockall", "pool": self.keys, "set_size": [2, 3],
            "daemon_port": self.daemons[daemon].port,
            "resource_port": self.resource.port,
            "key": self.keys[self.wseq % len(self.keys)] if role != "lockall" else None,
            "ttl": ttl,
            # a LOCKALL holds the keys it took while it waits for the next
            # one, and a set holds several: sets wait and hold for less, so
            # that the others are not held up past the TTL behind them
            "wait": ttl if role != "lockall" else ttl // 2,
            "log": os.path.join(self.dir, "%s.log" % wid),
            "seed": self.rng.randrange(1 << 30),
            # short holds are well under the safety margin; long ones span
            # a renewal or two (every TTL/3) and check in, or read pushes
            "hold_short": [short_min, max(short_min * 2, 5, self.margin_ms // 3)],
            "hold_long": [ttl // 3 + 100, ttl * 3 // 2 if role != "lockall" else ttl],
            "long_frac": 0.3 if push else 0.1,
            "checkin_ms": 25,
            "prepare_ms": [10, 40],
            "extend_frac": 0.25,
            "pause": [0, 20],
            "io_timeout": 60.0,
        }

    def spawn(self, module, cfg):
        """A process of faults.module with configuration cfg, its output in
        <id>.out."""
        out = open(os.path.join(self.dir, "%s.out" % cfg["id"]), "ab")
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        p = spawn([PYTHON, "-B", "-m", "faults." + module, json.dumps(cfg)],
                  stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env)
        out.close()
        return p

    def spawn_worker(self, daemon, kind, role="lock"):
        self.wseq += 1
        wid = "w%d" % self.wseq
        cfg = self.worker_config(wid, daemon, kind, role)
        p = self.spawn("worker", cfg)
        self.workers[wid] = {"proc": p, "daemon": daemon, "kind": kind, "role": role,
                             "key": cfg["key"], "log": cfg["log"], "pid": p.pid,
                             "stopped": False}
        self.tail.add(cfg["log"])
        return wid

    def spawn_observer(self, daemon, kind, key):
        oid = "o%d" % (len(self.observers) + 1)
        cfg = {
            "id": oid, "kind": kind, "daemon": daemon,
            "daemon_port": self.daemons[daemon].port, "key": key,
            "log": os.path.join(self.dir, "%s.log" % oid),
            "seed": self.rng.randrange(1 << 30),
            # empty answers now and then (each one proves the observer
            # caught up), not so often that they keep it busy
            "wait": [100, 400],
            "io_timeout": 60.0,
        }
        p = self.spawn("observer", cfg)
        self.observers[oid] = {"proc": p, "daemon": daemon, "kind": kind, "key": key,
                               "log": cfg["log"], "pid": p.pid, "stopped": False}
        self.otail.add(cfg["log"])
        return oid

    # ---- faults ----

    def record(self, kind, target, start, end, **kw):
        f = dict(kind=kind, target=target, start=start, end=end, **kw)
        self.faults.append(f)
        say("    %-20s %-8s %6.2f s %-8s aim: %s" % (kind, target, end - start,
                                                  kw.get("planned") or "",
                                                  kw.get("aim")))
        return f

    def aim(self, how, on_daemon=None, worker=None):
        """Wait for the moment a fault is aimed at; returns (event, worker id)
        or (None, None) when it did not come (the fault is then injected
        anyway, at a random moment)."""
        ttl_s = self.ttl / 1000.0

        def mine(e):
            if worker is not None and e["w"] != worker:
                return False
            info = self.workers.get(e["w"])
            if info is None or info["stopped"] or info["proc"].poll() is not None:
                return False
            return on_daemon is None or info["daemon"] == on_daemon

        limit = 3.0 * self.scale + ttl_s
        if how == "lock":
            e = self.tail.wait(lambda e: e["ev"] == "lock_sent" and mine(e), limit)
            return (e, e["w"]) if e else (None, None)
        if how == "grant":
            # a grant whose holder means to hold past a failover (or, failing
            # that, any grant)
            e = self.tail.wait(lambda e: e["ev"] == "grant" and mine(e) and
                               e.get("plan", 0) > 0.6 * self.ttl, limit)
            if e is None:
                e = self.tail.wait(lambda e: e["ev"] == "grant" and mine(e), limit)
            return (e, e["w"]) if e else (None, None)
        if how in ("prewrite", "extend"):
            name = "prepare" if how == "prewrite" else "extend_sent"
            e = self.tail.wait(lambda e: e["ev"] == name and mine(e), limit)
            return (e, e["w"]) if e else (None, None)
        if how == "renew":
            # a holder that means to hold past the point where its lock is
            # lost if the renewals fail (or, failing that, past a renewal)
            e = self.tail.wait(lambda e: e["ev"] == "grant" and mine(e) and
                               e.get("plan", 0) > self.ttl, limit / 2)
            if e is None:
                e = self.tail.wait(lambda e: e["ev"] == "grant" and mine(e) and
                                   e.get("plan", 0) > self.ttl / 3 + 80, limit)
            if e is None:
                return None, None
            due = self.topo.renewal_due(self.workers[e["w"]]["daemon"])
            if due is None:
                due = self.renewal_due(e)
            at = due - self.rng.uniform(0.005, 0.03)
            time.sleep(max(0.0, at - time.monotonic()))
            return e, e["w"]
        return None, None

    def aim_at(self, how, on_daemon=None):
        """aim(): (the worker aimed at, None if the moment did not come;
        the aim as the record says it)."""
        ev, wid = self.aim(how, on_daemon)
        return wid, ("%s of %s" % (how, wid) if ev else "none")

    def renewal_due(self, grant):
        """When (time.monotonic()) the daemon sends the first renewal of the
        lock of a grant event: TTL/3 after it sent the request, rounded up to
        a multiple of 100 ms of its clock (CLOCK_BOOTTIME in ms) when TTL/3 is
        at least 200 ms (docs/backends/redis.md, locktab.c renew_time). The request
        left just before the grant came."""
        off = time.clock_gettime(time.CLOCK_BOOTTIME) - time.monotonic()
        sent_ms = int((grant["t"] - 0.001 + off) * 1000)
        due = sent_ms + self.ttl // 3
        if self.ttl // 3 >= 200:
            due = (due + 99) // 100 * 100
        return due / 1000.0 - off

    def aimed_key(self, wid):
        """The key of the worker a fault was aimed at (a set worker: one of
        its last set), or one at random."""
        if wid is not None and self.workers[wid]["key"] is not None:
            return self.workers[wid]["key"]
        if wid is not None:
            for e in reversed(self.tail.events):
                if e["w"] == wid and e.get("keys"):
                    return self.rng.choice(e["keys"])
        return self.rng.choice(self.keys)

    def duration(self, spec):
        """A duration of PLANS in seconds."""
        if spec.endswith("ttl"):
            return float(spec[:-3]) * self.ttl / 1000.0
        if spec == "idle":
            return self.idle_ms / 1000.0 + 0.6 * self.ttl / 1000.0
        if spec == "failover":
            return 0.3 * self.scale  # after the failover (see master_stop)
        return float(spec[:-1]) * self.scale

    def inject(self, rnd):
        """Round rnd's fault: a worker's or a daemon's here, the
        topology's own by the topology."""
        kind = self.fault
        plans = self.topo.plans(kind)
        how, spec = plans[rnd % len(plans)]
        if kind not in CLIENT_FAULTS:
            self.topo.inject(kind, how, spec)
            return
        dur = self.duration(spec) if spec else None
        if kind in ("client_kill", "client_stop"):
            wid, aim = self.aim_at(how)
            if wid is None:
                wid = self.rng.choice([w for w, i in self.workers.items()
                                       if i["proc"].poll() is None])
            info = self.workers[wid]
            if kind == "client_kill":
                t = time.monotonic()
                os.kill(info["pid"], signal.SIGKILL)
                reap(info["proc"])
                self.record(kind, wid, t, t, aim=aim, pid=info["pid"])
                self.spawn_worker(info["daemon"], info["kind"], info["role"])
            else:
                t0 = time.monotonic()
                os.kill(info["pid"], signal.SIGSTOP)
                info["stopped"] = True
                time.sleep(dur)
                os.kill(info["pid"], signal.SIGCONT)
                info["stopped"] = False
                self.record(kind, wid, t0, time.monotonic(), aim=aim, pid=info["pid"],
                            planned=spec)
            return
        names = sorted(self.daemons)
        dname = names[rnd % len(names)]
        wid, aim = self.aim_at(how, on_daemon=dname)
        d = self.daemons[dname]
        pid = d.pid
        if kind == "daemon_stop":
            t0, t1 = held(lambda: os.kill(pid, signal.SIGSTOP),
                          lambda: os.kill(pid, signal.SIGCONT), dur)
            self.record(kind, dname, t0, t1, aim=aim, pid=pid, planned=spec)
        else:
            t0 = time.monotonic()
            d.stop(signal.SIGKILL)
            time.sleep(self.rng.uniform(0.1, 0.3))
            d.start()
            self.record(kind, dname, t0, time.monotonic(), aim=aim, pid=pid,
                        new_pid=d.pid)

    # ---- the run ----

    def run(self):
        say("  %s: TTL %d ms, margin %d %%, %d round(s)%s"
            % (self.name, self.ttl, self.margin_pct, self.rounds,
               ", sessions.idle_timeout_ms %d" % self.idle_ms if self.idle_ms else ""))
        t_start = time.monotonic()
        resource = {}
        run_end = None
        final = {}
        try:
            self.start_env()
            for entry in self.topo.LAYOUT:
                self.spawn_worker(*entry)
            for key in self.keys:
                for daemon, kind in self.topo.OBSERVERS:
                    self.spawn_observer(daemon, kind, key)
            self.warm_up()
            for rnd in range(self.rounds):
                self.inject(rnd)
                self.check_processes()
                self.topo.after_round()
                if rnd + 1 < self.rounds:
                    time.sleep(self.ttl / 1000.0 + 0.3 * self.scale)
            recovery_from = self.faults[-1]["end"] if self.faults else None
            self.recover(recovery_from)
            run_end = time.monotonic()
            self.stop_processes(self.workers, "worker")
            if self.observers:
                final = self.settle_observers()
                self.stop_processes(self.observers, "observer")
            self.topo.say_stats()
            conn = self.resource.raw()
            try:
                for k in self.keys:
                    resource[k] = fenced.state(conn, k)
            finally:
                conn.close()
        except Exception as e:
            where = traceback.extract_tb(e.__traceback__)[-3:]
            self.failures.append({"kind": "harness", "text": "%s: %s (at %s)" % (
                type(e).__name__, e, ", ".join("%s:%d %s" % (os.path.basename(f.filename),
                                                             f.lineno, f.name)
                                               for f in where))})
            recovery_from = None
        finally:
            self.teardown()
            self.tail.close()
            self.otail.close()
        events = read_events([i["log"] for i in self.workers.values()])
        workers = {w: {"daemon": i["daemon"], "kind": i["kind"], "role": i["role"],
                       "key": i["key"]}
                   for w, i in self.workers.items()}
        observed = None
        if self.observers:
            observed = {"events": read_events([i["log"] for i in self.observers.values()]),
                        "observers": {o: {"daemon": i["daemon"], "key": i["key"]}
                                      for o, i in self.observers.items()},
                        "final": final, "remote": self.topo.REMOTE, "scale": self.scale}
        # an election or multi-key twin is checked as its backend's topology is
        store = self.backend
        for twin in ("-elect", "-multi"):
            if store.endswith(twin):
                store = store[:-len(twin)]
        params = {"ttl": self.ttl, "margin_ms": self.margin_ms, "backend": store,
                  "notice_bound": 0.5 * self.scale, "recovery_from": recovery_from,
                  "run_end": run_end or time.monotonic()}
        if not resource:
            resource = {}
        res = check.check(events, workers, self.faults, resource, params, observed)
        res["failures"] = self.failures + res["failures"]
        res["suspicious"] = self.notes + res["suspicious"]
        res["seconds"] = time.monotonic() - t_start
        return self.summarise(res, events)

    def warm_up(self):
        """Until every observer observes, and then until a few grants were
        seen (bounded)."""
        start = time.monotonic()
        deadline = start + 5.0 * self.scale
        waiting = set(self.observers)
        while waiting and time.monotonic() < deadline:
            waiting -= {e["o"] for e in self.otail.poll() if e["ev"] == "epoch"}
            time.sleep(0.01)
        if waiting:
            self.failures.append({"kind": "no progress",
                                  "text": "observers %s did not start" % sorted(waiting)})
        if self.observers:
            self.tail.poll()  # the grants that came before they observed
        seen = 0
        start = time.monotonic()
        deadline = start + 5.0 * self.scale
        while time.monotonic() < deadline and (
                seen < 3 or time.monotonic() < start + 0.5 * self.scale):
            seen += sum(1 for e in self.tail.poll() if e["ev"] == "grant")
            time.sleep(0.01)
        if seen < 3:
            self.failures.append({"kind": "no progress",
                                  "text": "only %d grants in the warm-up" % seen})

    def recover(self, since):
        """After the last fault: until a grant after it (bounded)."""
        if since is None:
            return
        limit = (3.0 * self.ttl / 1000.0 + 6.0) * self.scale
        e = self.tail.wait(lambda e: e["ev"] == "grant" and e["t"] > since, limit)
        # and some more normal running
        if e is not None:
            time.sleep(0.5 * self.ttl / 1000.0 * self.scale)

    def check_processes(self):
        for name, d in self.daemons.items():
            if not d.running():
                rc = d.stop()
                self.failures.append({"kind": "daemon died",
                                      "text": "dlockd %s exited with %s; log:\n%s"
                                      % (name, rc, d.log())})
                d.start()

    def stop_processes(self, procs, what):
        """SIGTERM the workers or the observers (procs: self.workers or
        self.observers) and wait for them to exit 0 (bounded)."""
        for wid, i in procs.items():
            if i["proc"].poll() is None:
                if i["stopped"]:
                    os.kill(i["pid"], signal.SIGCONT)
                    i["stopped"] = False
                os.kill(i["pid"], signal.SIGTERM)
        limit = (2 * self.ttl / 1000.0 + 5.0) * self.scale
        deadline = time.monotonic() + limit
        for wid, i in procs.items():
            p = i["proc"]
            if p.returncode is not None and not tracked(p):
                continue  # killed and reaped by a fault
            try:
                rc = p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
                rc = None
                self.failures.append({"kind": what + " stuck",
                                      "text": "%s %s did not stop within %.0f s"
                                      % (what, wid, limit)})
            forget(p)
            if rc not in (0, None, -signal.SIGKILL):
                self.failures.append({"kind": what + " failed",
                                      "text": "%s %s exited with %s: %s"
                                      % (what, wid, rc, log_tail(
                                          os.path.join(self.dir, "%s.out" % wid), 1500))})

    def leader_states(self):
        """daemon -> key -> the state LEADER key answers now (None where it
        could not be asked, which is a failed check)."""
        out = {}
        for name, d in sorted(self.daemons.items()):
            out[name] = {}
            try:
                c = resp.Conn(d.port)
                try:
                    for key in self.keys:
                        r = c.cmd("LEADER", key, timeout=10.0)
                        out[name][key] = state_of(r)
                finally:
                    c.close()
            except (OSError, resp.Closed, resp.Timeout) as e:
                self.failures.append({"kind": "final state",
                                      "text": "LEADER on %s at the end: %r" % (name, e)})
        return out

    def settle_observers(self):
        """Once the workers have stopped: the final LEADER states, asked
        again until every observer has had an OBSERVE sent after them answer
        empty (it has seen the last change) and they stay the same
        (bounded). On a shared backend the daemons learn of the last
        changes through it, and a lease of a killed worker or daemon runs
        out by itself: first, until every daemon says every key is free
        (bounded by the longest lease, 1.25 x the TTL, and a look's time)."""
        limit = (2.0 + 2 * 0.4) * self.scale
        if self.topo.REMOTE:
            deadline = time.monotonic() + 1.25 * self.ttl / 1000.0 + 3.0 * self.scale
            while time.monotonic() < deadline:
                states = self.leader_states()
                if all(st is not None and st["kind"] == "free"
                       for d in states.values() for st in d.values()):
                    break
                time.sleep(0.1)
        final = self.leader_states()
        for _ in range(3):
            asked = time.monotonic()
            waiting = set(self.observers)
            deadline = asked + limit
            while waiting and time.monotonic() < deadline:
                for e in self.otail.poll():
                    if e["ev"] == "none" and e["sent"] > asked:
                        waiting.discard(e["o"])
                time.sleep(0.01)
            again = self.leader_states()
            if again == final:
                break
            final = again
        return final

    def teardown(self):
        """Stop every process of the scenario, whatever happened; a daemon
        that does not exit 0 on SIGTERM is a failure."""
        for wid, i in list(self.workers.items()) + list(self.observers.items()):
            p = i["proc"]
            if p.poll() is None:
                p.kill()
                p.wait(5)
            forget(p)
        for name, d in self.daemons.items():
            if d.proc is None:
                continue
            try:
                os.kill(d.pid, signal.SIGCONT)
            except OSError:
                pass
            try:
                rc = d.stop()
            except AssertionError as e:
                rc = str(e)
            if rc != 0:
                self.failures.append({"kind": "daemon exit",
                                      "text": "dlockd %s exited with %s on SIGTERM; log:\n%s"
                                      % (name, rc, d.log())})
        self.topo.stop()
        if self.resource is not None:
            try:
                self.resource.stop()
            except AssertionError as e:
                self.failures.append({"kind": "redis exit", "text": str(e)})

    # ---- results ----

    def summarise(self, res, events):
        c = res["counts"]
        out = {
            "name": self.name, "backend": self.backend, "fault": self.fault,
            "rounds": self.rounds, "ttl_ms": self.ttl, "margin_ms": self.margin_ms,
            "idle_timeout_ms": self.idle_ms, "seconds": round(res["seconds"], 1),
            "scale": self.scale,
            "dir": self.dir,
            "counts": dict(c),
            "faults": self.faults,
            "violations": [], "failures": [], "suspicious": res["suspicious"],
            "excused_overlaps": [],
        }
        for v in res["violations"]:
            out["violations"].append(_export(v, events, self.faults))
        for f in res["failures"]:
            out["failures"].append(_export(f, events, self.faults))
        for o in res["overlaps"]:
            out["excused_overlaps"].append(_export(o, events, self.faults, lines=False))
        out["expect_violations"] = self.topo.EXPECT_VIOLATIONS
        if out["expect_violations"]:
            out["ok"] = bool(out["violations"]) and not any(
                f["kind"] in ("harness", "worker error", "daemon died", "daemon exit")
                for f in out["failures"])
        else:
            out["ok"] = not out["violations"] and not out["failures"]
        return out


def _export(item, events, faults, lines=True):
    """A violation, failure or overlap as JSON, with the event log excerpt."""
    d = {}
    for k, v in item.items():
        if k in ("holders",):
            d[k] = [h.brief() for h in v]
        elif k in ("stale", "fresh"):
            d[k] = v.w
        elif isinstance(v, (str, int, float, bool, type(None))):
            d[k] = v
        elif k == "faults":
            d[k] = ["%s on %s %.3f-%.3f" % (f["kind"], f["target"], f["start"], f["end"])
                    for f in v]
        elif k == "affirmed":
            d[k] = [list(c) for c in v]
    if lines and item.get("holders"):
        d["excerpt"] = check.excerpt(events, faults, item["holders"])
    return d


# ---- the whole run ----

def plan(mode, only, rounds):
    """The scenarios of a mode: [(backend, fault, rounds)]."""
    wrapped = bool(WRAPPER)
    if mode == "short":
        todo = [(b, f, 1) for b, f in SHORT + (ONLY_SHORT if only else [])]
    else:
        todo = [(b, f, rounds or max(3, len(t.plans(f))))
                for b, t in TOPOLOGIES.items() if b != "split"
                for f in t.FAULTS]
        todo.append(("split", "none", 1))
    if rounds and mode == "short":
        todo = [(b, f, rounds) for b, f, _ in todo]
    if only:
        todo = [t for t in todo if any(o in "%s/%s" % (t[0], t[1]) for o in only)]
    skipped = []
    if wrapped:
        keep = []
        for t in todo:
            why = WRAPPED_SKIP.get((t[0], t[1]))
            if why:
                skipped.append(("%s/%s" % (t[0], t[1]), why))
            else:
                keep.append(t)
        todo = keep
    return todo, skipped


def run(mode="short", only=(), rounds=None, seed=None, outdir=None, json_path=None):
    """Run the scenarios; returns the results (a dict, also written as JSON)."""
    scale = 3.0 if WRAPPER else 1.0
    if seed is None:
        seed = random.randrange(1 << 30)
    if outdir is None:
        outdir = new_dir("safety")
    os.makedirs(outdir, exist_ok=True)
    todo, skipped = plan(mode, only, rounds)
    say("dlockd safety test, %s mode, seed %d, logs in %s" % (mode.upper(), seed, outdir))
    if WRAPPER:
        say("  the daemon runs under %s: durations and backend timeouts x%.0f; left out:"
            % (" ".join(WRAPPER), scale))
        for name, why in skipped:
            say("    %s: %s" % (name, why))
    rng = random.Random(seed)
    results = []
    for backend, fault, n in todo:
        d = os.path.join(outdir, "%s-%s" % (backend, fault))
        sc = Scenario(backend, fault, n, mode, rng.randrange(1 << 30), scale, d)
        r = sc.run()
        results.append(r)
        say("    -> %s in %.1f s: %s" % (r["name"], r["seconds"], verdict(r)))
    out = {
        "mode": mode, "seed": seed, "scale": scale, "wrapper": " ".join(WRAPPER),
        "dlockd": DLOCKD, "source": source_version(),
        "main": source_version("main"),
        "skipped": [{"scenario": n, "why": w} for n, w in skipped],
        "scenarios": results,
        "ok": all(r["ok"] for r in results) and bool(results),
    }
    if json_path is None:
        json_path = os.path.join(outdir, "results.json")
    with open(json_path, "w") as f:
        json.dump(out, f, indent=1, default=str)
    out["json"] = json_path
    say("")
    say(table(results))
    say("")
    report_problems(results)
    say("results: %s" % json_path)
    say("safety: %s" % ("PASS" if out["ok"] else "FAIL"))
    return out


def verdict(r):
    if r["expect_violations"]:
        return ("caught (%d violations)" % len(r["violations"]) if r["ok"]
                else "NOT CAUGHT: the checker missed a double grant")
    if r["ok"]:
        return "ok"
    return "FAIL (%d violations, %d failed checks)" % (len(r["violations"]),
                                                       len(r["failures"]))


def source_version(rev=None):
    """The git commit of the tree the test runs from, or of rev (if any)."""
    cmd = ["git", "-C", HERE, "describe", "--always"]
    cmd += [rev] if rev else ["--dirty"]
    try:
        out = subprocess.run(cmd,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=5)
        return out.stdout.decode().strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


COLUMNS = [("backend", 13), ("fault", 21), ("grants", 6), ("writes", 6), ("stale", 5),
           ("lost", 5), ("paused", 6), ("other", 5), ("viol", 5), ("checks", 6)]


def table(results):
    """The result table: backend x fault."""
    head = " ".join(n.rjust(w) if i > 1 else n.ljust(w)
                    for i, (n, w) in enumerate(COLUMNS))
    lines = [head, "-" * len(head)]
    for r in results:
        c = r["counts"]
        other = c.get("overlaps_stalled", 0) + c.get("overlaps_data_loss", 0)
        fault = r["fault"] + ("" if r["backend"] != "split" else " (expected)")
        row = [r["backend"], fault, c.get("grants", 0), c.get("writes_accepted", 0),
               c.get("stale_writes_rejected", 0), c.get("lost_notices", 0),
               c.get("overlaps_paused", 0), other, len(r["violations"]),
               "ok" if not r["failures"] else "FAIL %d" % len(r["failures"])]
        lines.append(" ".join(str(v).rjust(w) if i > 1 else str(v).ljust(w)
                              for i, (v, (n, w)) in enumerate(zip(row, COLUMNS))))
    lines.append("")
    lines.append("grants: locks granted; writes: writes the resource accepted; stale: "
                 "stale writes it rejected;")
    lines.append("lost: lost-lock notices (push or -LOST); paused: overlaps of a holder "
                 "that was stopped, or whose")
    lines.append("daemon was stopped or killed (fences protect); other: overlaps of a "
                 "stalled holder or after a data")
    lines.append("loss; viol: violations; checks: the other checks (counter, fences, "
                 "notices, processes).")
    lines += _lines_of(results, "set_grants", _set_lines)
    lines += _lines_of(results, "observer_epochs", _elect_lines)
    return "\n".join(lines)


def _lines_of(results, counted, lines_of):
    """The lines lines_of(r) gives of each result r whose counts have
    counted, after an empty line (none if no result has it)."""
    some = [r for r in results if counted in r["counts"]]
    return [""] + [line for r in some for line in lines_of(r)] if some else []


def _set_lines(r):
    """What a multi-key scenario counted of its sets."""
    c = r["counts"]
    return ["%s: LOCKALL: %d sets granted (%d after the faults), %d not granted in time, "
            "%d errors; %d LOCKS after those" % (
                r["name"], c.get("set_grants", 0), c.get("set_grants_after_faults", 0),
                c.get("set_nulls", 0), c.get("set_errors", 0), c.get("set_probes", 0))]


def _elect_lines(r):
    """What an election scenario counted of its leaders and observers."""
    c = r["counts"]
    out = ["%s: %d proclaims; observers: %d epochs, %d states, %d empty answers, "
           "%d (term, epoch) pairs checked, %d final states" % (
               r["name"], c.get("proclaims", 0), c.get("observer_epochs", 0),
               c.get("observer_answers", 0), c.get("observer_nones", 0),
               c.get("terms_checked", 0), c.get("final_states_checked", 0))]
    if c.get("terms_short", 0) or c.get("terms_excused", 0):
        out.append("  %d shorter than %.0f ms (%d skipped), %d during a fault (%d "
                   "skipped), %d -BACKEND answers to observers" % (
                       c.get("terms_short", 0),
                       check_elect.REMOTE_MIN_TERM * 1000 * r.get("scale", 1.0),
                       c.get("terms_short_skipped", 0), c.get("terms_excused", 0),
                       c.get("terms_excused_skipped", 0),
                       c.get("observer_backend_errors", 0)))
    return out


def report_problems(results):
    for r in results:
        if r["expect_violations"]:
            if r["violations"]:
                v = r["violations"][0]
                say("%s: the checker caught the split lock service, e.g.: %s"
                    % (r["name"], v["text"]))
            continue
        for v in r["violations"]:
            say("VIOLATION in %s: %s" % (r["name"], v["text"]))
            for line in v.get("excerpt", []):
                say("    " + line)
        for f in r["failures"]:
            say("FAILED CHECK in %s: [%s] %s" % (r["name"], f["kind"], f["text"]))
            for line in f.get("excerpt", []):
                say("    " + line)
        for s in r["suspicious"]:
            say("note in %s: %s" % (r["name"], s))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--short", dest="mode", action="store_const", const="short")
    g.add_argument("--long", dest="mode", action="store_const", const="long")
    ap.add_argument("--only", action="append", default=[],
                    help="run the scenarios whose name (backend/fault) contains this "
                    "(in SHORT mode the sentinel, redlock, cluster and election ones too)")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--out", help="directory for the logs and results.json")
    ap.add_argument("--json", help="where to write the results")
    a = ap.parse_args(argv)
    install_signal_handlers()
    # a hang-up (the terminal went away) stops everything too
    signal.signal(signal.SIGHUP, signal.getsignal(signal.SIGTERM))
    out = run(a.mode or "short", a.only, a.rounds, a.seed, a.out, a.json)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
