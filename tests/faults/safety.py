"""dlockd's safety test: a fenced lock-set test with fault injection.

Worker processes (worker.py) lock one key through dlockd, read a counter from
a fenced resource (resource.py: a redis-server of its own whose Lua scripts
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
sentinels, tests/integration/sentinel.py; the master and sentinel faults);
redlock (two daemons on three independent redis-servers, -b
redlock://n0,n1,n2, quorum 2; the second daemon reaches each node through
a proxy of its own; the client, daemon and node faults); redlock-cache
(the same with backend.lease_cache_ms, as redis-cache); cluster (two
daemons on a Redis Cluster of 3 masters with a replica each, -b
redis-cluster://..., straight to the nodes, the lock set's three keys one
on each master; the client, daemon, master and reshard faults).
"split" runs two independent memory daemons as if they were one lock
service: the checker must report it (check.py explains what is checked).

On etcd a session lock lives on its daemon's etcd lease
(backend.lease_ttl_ms), not on a TTL of its own: the scenarios set that
lease to the TTL they use, so that their durations (in multiples of the TTL)
keep their meaning, and aim "renew" faults at the daemon's keepalive of
that lease.

    safety.py --short | --long [--only NAME]... [--rounds N] [--seed N]
              [--out DIR] [--json FILE]

SHORT (tests/integration/test_safety.py, part of make check) runs one round of
a representative subset in about a minute; LONG (make check-faults) every
backend x fault, several rounds each. The sentinel, redlock and cluster
scenarios are in LONG only; --only picks them in SHORT mode too (--only
sentinel, --only redlock, --only cluster: one round of each). With
DLOCKD_WRAPPER set (valgrind) durations are scaled up and the faults whose
timing would not survive are left out, which is printed. The run prints a
table and the path of a JSON file with every result; the exit status is 0
only if every check passed (and the split run was caught).

Environment: DLOCKD_BIN (default build/dlockd), DLOCKD_TEST_TMP (scratch
directory; every process started is recorded in its pids/ directory, see
tests/integration/harness.py), DLOCKD_WRAPPER.
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))

import harness  # noqa: E402
import check  # noqa: E402
import resource as fres  # noqa: E402
import sentinel as fsentinel  # noqa: E402

PYTHON = harness.PYTHON
WORKER = os.path.join(HERE, "worker.py")
PROXY = os.path.join(HERE, "proxy.py")
# backend timeouts: short, so that faults bite quickly; the TTL floor is 3 x
# command_timeout_ms
BACKEND_CONF = {"connect_timeout_ms": 300, "command_timeout_ms": 300}
# etcd has only a request timeout; backend.lease_ttl_ms is the scenario's TTL
ETCD_CONF = {"request_timeout_ms": 300}
# redis-cache: the redis backend with released leases cached this long
# (backend.lease_cache_ms): every exclusive acquire reserves a block of
# fences, a busy answer makes the holder's daemon give its lease up rather
# than cache it, and a worker that locks again soon may take a cached lease
# (the scenario prints how often)
CACHE_CONF = {"lease_cache_ms": 20}

ALL_FAULTS = {
    "memory": ["client_kill", "client_stop", "daemon_stop", "daemon_kill"],
    "redis": ["client_kill", "client_stop", "daemon_stop", "daemon_kill", "backend_stop",
              "backend_restart", "backend_restart_loss", "blackhole"],
    # not backend_restart_loss: an etcd that loses its data sets its revisions,
    # the fences, back, which is outside what dlockd promises (PROTOCOL.md 7.7
    # and 8.3: restoring etcd from an old snapshot sets revisions back)
    "etcd": ["client_kill", "client_stop", "daemon_stop", "daemon_kill", "backend_stop",
             "backend_restart", "blackhole"],
}
ALL_FAULTS["redis-cache"] = ALL_FAULTS["redis"]
# etcd-tls: the etcd topology with etcd serving TLS and asking for client
# certificates (--client-cert-auth), the second daemon's TLS through the proxy
ALL_FAULTS["etcd-tls"] = ALL_FAULTS["etcd"]
ETCD_BACKENDS = ("etcd", "etcd-tls")
# Redis Sentinel: no fault excuses an overlap across a failover (check.py),
# whether the lease reached the replica or not
ALL_FAULTS["sentinel"] = ["master_kill", "master_stop", "sentinel_kill"]
# redlock: two daemons on three independent redis-servers (quorum 2), the
# second through a proxy per node. No node fault excuses an overlap: one
# node lost, stopped, restarted (with its data; without it once the longest
# lease it held has run out, or at once: the nodes all answer in time here,
# so every lease stands on all three and the two others still hold it) or
# cut off leaves a majority that still holds every lease
REDLOCK_NODE_FAULTS = ["node_kill", "node_stop", "node_restart_loss", "node_restart_loss_now",
                       "node_blackhole", "majority_blackhole", "majority_lost"]
ALL_FAULTS["redlock"] = ["client_kill", "daemon_stop", "daemon_kill"] + REDLOCK_NODE_FAULTS
# redlock-cache: the redlock topology with released leases cached
# (CACHE_CONF), as redis-cache is to redis
ALL_FAULTS["redlock-cache"] = ALL_FAULTS["redlock"]
REDLOCK_BACKENDS = ("redlock", "redlock-cache")
CACHE_BACKENDS = ("redis-cache", "redlock-cache")
REDLOCK_NODES = 3
# Redis Cluster: two daemons on 3 masters with a replica each (-b
# redis-cluster://the masters), the lock set's keys one on each master. As
# with Sentinel, no fault of the cluster's excuses an overlap: across a
# failover (the master killed, or stopped past the node timeout) a lock is
# either still held on the promoted replica or its holder is told before
# another holder is granted the key; a slot moved to another master
# (reshard) takes its leases and fence counters with it
CLUSTER_NODE_FAULTS = ["master_kill", "master_stop", "reshard"]
ALL_FAULTS["cluster"] = ["client_kill", "daemon_kill", "daemon_stop"] + CLUSTER_NODE_FAULTS
CLUSTER_MASTERS = 3
CLUSTER_NODE_TIMEOUT_MS = 1000
# s for a replica to take over a killed or stopped master's slots (the
# node timeout, the failure report, the election), with room
CLUSTER_FAILOVER_LIMIT = 15.0
# slots moved in each round of the reshard fault
RESHARD_MOVES = 3
# what each round of a fault aims at, and how long the fault lasts: "1.5ttl"
# is 1.5 x the TTL, "0.3s" 0.3 s, "idle" sessions.idle_timeout_ms + 0.6 x the
# TTL; rounds go through the list in turn (SHORT runs the first). "renew" is
# the first renewal of a lock in Redis, and on etcd the next keepalive of the
# holder's daemon's lease (what renews its session locks); a restart's
# duration is how long the server stays down before it is started again
PLANS = {
    "client_kill": [("lock", None), ("renew", None), ("prewrite", None)],
    # past the idle timeout the daemon closes the stopped worker's session,
    # another worker gets the key, and the stopped one wakes up with a stale
    # fence; a shorter stop only makes the others wait
    "client_stop": [("prewrite", "idle"), ("lock", "0.5ttl"), ("renew", "idle"),
                    ("prewrite", "0.5ttl")],
    # past the TTL; and resuming between the point where the daemon must
    # declare the lock lost (TTL - margin) and the end of the lease in the
    # backend
    "daemon_stop": [("renew", "1.5ttl"), ("renew", "0.62ttl"), ("lock", "1.5ttl"),
                    ("extend", "0.75ttl")],
    "daemon_kill": [("lock", None), ("renew", None), ("prewrite", None)],
    "backend_stop": [("renew", "1.3ttl"), ("lock", "1.3ttl"), ("renew", "0.6ttl"),
                     ("extend", "0.95ttl")],
    "backend_restart": [("lock", "0.3s"), ("renew", "1.2ttl"), ("renew", "0.3s")],
    "backend_restart_loss": [("renew", "0.3s"), ("lock", "1.2ttl"), ("lock", "0.3s")],
    # what the black hole held is delivered when it heals: after a short one,
    # while the leases it concerns may still run
    "blackhole": [("renew", "1.5ttl"), ("lock", "1.5ttl"), ("renew", "0.5ttl"),
                  ("extend", "0.95ttl")],
    # "failover": until the sentinels name the promoted replica, then 0.3 s
    # more, so that the daemons have moved before the stale master runs
    "master_kill": [("renew", None), ("lock", None), ("prewrite", None)],
    "master_stop": [("renew", "failover"), ("lock", "failover"), ("extend", "failover")],
    "sentinel_kill": [("renew", None), ("lock", None), ("prewrite", None)],
    # cluster: RESHARD_MOVES slots of the lock set moved to another master,
    # the first at the moment aimed at: "whole" with every key in one
    # MIGRATE; "steps" one key at a time, 20 to 120 ms apart (the lock's
    # keys split between the two masters: ASK, TRYAGAIN, retried within
    # the command timeout); "slow" 250 to 500 ms apart (longer than the
    # command timeout: acquires, handoffs and releases of the key fail
    # meanwhile, renewals go on)
    "reshard": [("lock", "steps"), ("renew", "whole"), ("renew", "slow"),
                ("prewrite", "steps")],
    # redlock: a node down, stopped or cut off; "restart" is how long a
    # restarted node stays down. A node restarted without its data stays
    # down longer than any lease it may hold (an EXTEND sets up to 1.25 x
    # the TTL): 1.3 x the TTL or more
    "node_kill": [("lock", "0.3s"), ("renew", "1.2ttl"), ("renew", "0.3s")],
    "node_stop": [("renew", "1.3ttl"), ("lock", "1.3ttl"), ("renew", "0.6ttl"),
                  ("extend", "0.95ttl")],
    "node_restart_loss": [("renew", "1.3ttl"), ("lock", "1.3ttl"), ("prewrite", "1.6ttl")],
    "node_restart_loss_now": [("renew", "0.05s"), ("lock", "0.05s"), ("prewrite", "0.05s")],
    "node_blackhole": [("renew", "1.5ttl"), ("lock", "1.5ttl"), ("renew", "0.5ttl"),
                       ("extend", "0.95ttl")],
    # past the longest lease (1.25 x the TTL) and the time a worker takes to
    # hear (check.py: its holders must have been told), and less
    "majority_blackhole": [("renew", "1.8ttl"), ("lock", "1.8ttl"), ("renew", "0.5ttl"),
                           ("extend", "0.95ttl")],
    "majority_lost": [("renew", "1.8ttl"), ("lock", "1.8ttl"), ("renew", "0.5ttl")],
    "none": [("none", "2s")],
}
# the cluster's own plans where they differ. master_kill "unsynced": the
# replicas of the lock set's masters are cut off (their links closed, and
# kept from connecting again) and the master is killed right after a grant
# to a holder that means to hold past the failover ("grant"): that lease,
# and its fence, never reached the replica that takes over (asynchronous
# replication), so its holder must be told before the key goes to another
CLUSTER_PLANS = {
    "master_kill": [("renew", None), ("grant", "unsynced"), ("lock", None),
                    ("prewrite", None), ("grant", "unsynced")],
}


def plans_of(backend, fault):
    """What the rounds of a scenario aim at (PLANS)."""
    if backend == "cluster" and fault in CLUSTER_PLANS:
        return CLUSTER_PLANS[fault]
    return PLANS[fault]


SHORT = [("memory", "client_kill"), ("memory", "client_stop"), ("memory", "daemon_kill"),
         ("redis", "daemon_stop"), ("redis", "blackhole"), ("redis", "backend_stop"),
         ("redis", "backend_restart"), ("redis", "backend_restart_loss"),
         ("etcd", "daemon_stop"), ("etcd", "backend_stop"), ("etcd", "blackhole"),
         ("split", "none")]
# what --only may pick in SHORT mode besides SHORT (one round each)
ONLY_SHORT = [("sentinel", f) for f in ALL_FAULTS["sentinel"]] + \
    [(b, f) for b in REDLOCK_BACKENDS for f in ALL_FAULTS[b]] + \
    [("cluster", f) for f in ALL_FAULTS["cluster"]]
# s for the sentinels to name a new master after the master is killed or
# stopped (down-after + failover-timeout, with room)
SENTINEL_FAILOVER_LIMIT = (fsentinel.DOWN_AFTER_MS + fsentinel.FAILOVER_TIMEOUT_MS) / 1000.0 + 10
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


def say(*a):
    print(*a)
    sys.stdout.flush()


# ---- the processes ----

class Upstream:
    """What harness.Daemon needs of a redis-server, for a daemon that reaches
    Redis through the proxy."""

    password = None

    def __init__(self, port):
        self.port = port

    def address(self):
        return "127.0.0.1:%d" % self.port


class Restart:
    """restart() for a server class of the harness."""

    def restart(self, down_s):
        """SIGKILL, wait down_s, start again on the same port(s) and data
        (waiting until it answers); returns (killed at, back at)."""
        t0 = time.monotonic()
        self.stop(signal.SIGKILL)
        time.sleep(down_s)
        self.fixed_port = True
        self.start()
        return t0, time.monotonic()


class BackendRedis(Restart, harness.RedisServer):
    """The backend's redis-server, with leases that survive a restart
    (appendonly yes, appendfsync always) when persist is true."""

    def __init__(self, persist, **kw):
        super().__init__(**kw)
        self.persist = persist

    def argv(self):
        a = super().argv()
        if self.persist:
            i = a.index("--appendonly")
            a[i + 1] = "yes"
            a += ["--appendfsync", "always"]
        return a


class BackendEtcd(Restart, harness.EtcdServer):
    """The backend's etcd, with a short election timeout: a one-member
    cluster elects itself only after it, at every start, so a restart takes
    about 0.4 s instead of 1.5 to 2 s. That also makes the time etcd adds to
    every lease when it becomes leader again (the election timeout) short."""

    def argv(self):
        return super().argv() + ["--heartbeat-interval", "20", "--election-timeout", "200"]


class FaultCluster(harness.RedisCluster):
    """The cluster topology's Redis Cluster: harness.RedisCluster whose key
    moves take a key that expired between CLUSTER GETKEYSINSLOT and MIGRATE
    (a lease runs out at any moment: MIGRATE answers NOKEY) in their stride
    and move a slot one key at a time when asked; that cuts a master's
    replicas off (writes that never reach the replica that takes over);
    and that counts the failovers its nodes' logs tell of."""

    def migrate_keys(self, slot, src, dest, limit=None, pause=None):
        """MIGRATE the keys of slot from src to dest, at most limit of them,
        100 per MIGRATE, or one per MIGRATE with pause() s in between when
        pause is given; returns how many moved (or had expired)."""
        moved = 0
        while limit is None or moved < limit:
            n = 1 if pause is not None else 100
            if limit is not None:
                n = min(n, limit - moved)
            keys = src.cmd("CLUSTER", "GETKEYSINSLOT", slot, n, timeout=5.0)
            if not isinstance(keys, list):
                raise AssertionError("CLUSTER GETKEYSINSLOT on port %d answered %r"
                                     % (src.port, keys))
            if not keys:
                break
            r = src.cmd("MIGRATE", "127.0.0.1", dest.port, "", 0, 5000,
                        *(self._migrate_auth() + ["KEYS"] + keys), timeout=5.0)
            if r not in ("OK", "NOKEY"):
                raise AssertionError("MIGRATE of %r from port %d to %d answered %r"
                                     % (keys, src.port, dest.port, r))
            moved += len(keys)
            if pause is not None:
                time.sleep(pause())
        return moved

    def replicas_of(self, server):
        """The servers that are replicas of server, as CLUSTER NODES on
        server says."""
        view = server.nodes_view() or {}
        return [self.server(node_id=nid) for nid, (_, flags, master) in view.items()
                if master == server.node_id and "slave" in flags and
                self.server(node_id=nid) is not None]

    def cut_replicas(self, server):
        """Close the links of server's replicas to it, and keep them from
        connecting again (a masterauth that the master, with no password,
        refuses): what server writes from now on stays on it alone, until
        heal(). Returns the replicas."""
        reps = self.replicas_of(server)
        for r in reps:
            self._expect_ok(r, "CONFIG", "SET", "masterauth", "dlockd-safety-cut")
            n = r.cmd("CLIENT", "KILL", "TYPE", "master")
            if not isinstance(n, int):
                raise AssertionError("CLIENT KILL TYPE master on port %d answered %r"
                                     % (r.port, n))
        return reps

    def heal(self, replicas):
        """Let replicas cut_replicas() cut off connect to their master
        again (those still running)."""
        for r in replicas:
            if r.running():
                self._expect_ok(r, "CONFIG", "SET", "masterauth", "")

    def replicas_linked(self, server):
        """How many replicas server has connected now (INFO replication's
        connected_slaves), None if it does not say."""
        r = server.cmd("INFO", "replication", timeout=1.0)
        if not isinstance(r, bytes):
            return None
        v = harness.parse_info(r).get("connected_slaves")
        return int(v) if v is not None and v.isdigit() else None

    def owners(self, slots):
        """slot -> the ClusterNode that owns it, for each of slots, from one
        node's slot map (quick; master_of() asks every master). The slots
        each of them owns are noted for wait_promoted(), from the same
        map: a fault on one of them can then come at once."""
        m = self.slot_map()
        out = {s: self.server(node_id=m[s]) for s in slots}
        for srv in set(out.values()):
            self._killed_slots[srv.node_id] = [i for i, nid in enumerate(m)
                                               if nid == srv.node_id]
        return out

    def failovers(self):
        """How many failovers the nodes' logs tell of (elections won)."""
        n = 0
        for srv in self.servers:
            try:
                with open(srv.logfile, errors="replace") as f:
                    n += sum(1 for line in f if "Failover election won" in line)
            except OSError:
                pass
        return n


class Proxy:
    """proxy.py between a daemon and its backend."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.port = None
        self.proc = None

    def start(self):
        for _ in range(3):
            self.port = harness.free_port()
            self.proc = harness.spawn([PYTHON, PROXY, str(self.port), str(self.upstream)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            try:
                if harness.read_line(self.proc.stdout, 5.0).strip() == "ready":
                    return self
            except AssertionError:
                pass
            self.stop()
        raise AssertionError("the proxy did not start")

    def _do(self, cmd):
        self.proc.stdin.write((cmd + "\n").encode())
        self.proc.stdin.flush()
        line = harness.read_line(self.proc.stdout, 5.0).split()
        return float(line[1])

    def block(self):
        return self._do("block")

    def heal(self):
        return self._do("heal")

    def stop(self):
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        harness.reap(self.proc)
        self.proc = None


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
    """One backend x fault, several rounds, in processes of its own."""

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
        # leases: short, so that faults bite quickly, with a margin that
        # leaves the Python workers time to hear of a loss
        if mode == "long":
            self.ttl, self.margin_pct = 2000, 10
        else:
            self.ttl, self.margin_pct = 1200, 20
        if backend in ETCD_BACKENDS:
            # the TTL is the daemons' etcd lease (backend.lease_ttl_ms): at
            # least 2 s, and whole seconds, which is all etcd counts
            self.ttl = 2000
        if backend == "sentinel":
            # a failover takes 2 to 4 s: some locks are renewed on the new
            # master before only their margin is left, others are lost
            self.ttl = 4000
        if backend == "cluster" and fault in ("master_kill", "master_stop"):
            # as with Sentinel: a failover takes 2 to 3 s (the node
            # timeout, then the election)
            self.ttl = 4000
        self.ttl = int(self.ttl * scale)
        if backend in ETCD_BACKENDS:
            self.ttl = (self.ttl + 999) // 1000 * 1000
        self.margin_ms = self.ttl * self.margin_pct // 100
        self.idle_ms = self.ttl * 2 if fault == "client_stop" else 0
        # two keys, so that more locks are granted in a given time (the
        # cluster: one on each master, chosen once it runs)
        self.keys = ["safety/%s/%s/%d" % (backend, fault, i) for i in range(2)]
        self.faults = []     # dicts: kind, target, start, end, aim, ...
        self.workers = {}    # id -> {"proc", "daemon", "kind", "key", "log", "pid"}
        self.wseq = 0
        self.daemons = {}    # name -> harness.Daemon
        self.tail = Tail()
        self.resource = None
        self.redis = None
        self.etcd = None
        self.store = None    # the backend's server: self.redis or self.etcd
        self.sentinels = None  # the SentinelSetup of the sentinel backend
        self.proxy = None
        self.nodes = []      # redlock: the redis-servers (BackendRedis)
        self.proxies = []    # redlock: the second daemon's proxy to each node
        self.cluster = None  # cluster: the FaultCluster
        self.last_killed = None  # cluster: the master the last fault hit
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
        self.resource = harness.RedisServer(directory=self.subdir("resource")).start()
        conf = self.daemon_config()
        bconf = dict(BACKEND_CONF)
        if self.scale > 1:
            bconf = {k: int(v * self.scale) for k, v in bconf.items()}
        if self.backend in CACHE_BACKENDS:
            bconf.update(CACHE_CONF)
        if self.backend in ("redis", "redis-cache"):
            persist = self.fault != "backend_restart_loss"
            self.redis = BackendRedis(persist, directory=self.subdir("redis")).start()
            self.proxy = Proxy(self.redis.port).start()
            self.daemons["d0"] = harness.Daemon(conf, unix=False, backend="redis",
                                                redis=self.redis, backend_conf=bconf,
                                                directory=self.subdir("d0"))
            self.daemons["d1"] = harness.Daemon(conf, unix=False, backend="redis",
                                                redis=Upstream(self.proxy.port),
                                                backend_conf=bconf,
                                                directory=self.subdir("d1"))
            self.store = self.redis
        elif self.backend in ETCD_BACKENDS:
            econf = {k: int(v * self.scale) for k, v in ETCD_CONF.items()}
            econf["lease_ttl_ms"] = self.ttl
            certs = harness.shared_certs() if self.backend == "etcd-tls" else None
            if certs is not None:
                econf["tls"] = {"enabled": True, "ca_file": certs.ca,
                                "cert_file": certs.client_cert, "key_file": certs.client_key}
            self.etcd = BackendEtcd(directory=self.subdir("etcd"), tls=certs).start()
            self.proxy = Proxy(self.etcd.port).start()
            self.daemons["d0"] = harness.Daemon(conf, unix=False, backend="etcd",
                                                etcd=self.etcd, backend_conf=econf,
                                                directory=self.subdir("d0"))
            self.daemons["d1"] = harness.Daemon(
                conf, unix=False, backend="etcd",
                backend_conf=dict(econf, endpoints=["127.0.0.1:%d" % self.proxy.port]),
                directory=self.subdir("d1"))
            self.store = self.etcd
        elif self.backend in REDLOCK_BACKENDS:
            self.start_redlock(conf, bconf)
        elif self.backend == "cluster":
            self.start_cluster(conf, bconf)
        elif self.backend == "sentinel":
            self.sentinels = fsentinel.SentinelSetup(directory=self.subdir("sentinel"))
            self.sentinels.start()
            for n in ("d0", "d1"):
                self.daemons[n] = fsentinel.SentinelDaemon(self.sentinels, conf, unix=False,
                                                           backend_conf=bconf,
                                                           directory=self.subdir(n))
        else:
            names = ["d0", "d1"] if self.backend == "split" else ["d0"]
            for n in names:
                self.daemons[n] = harness.Daemon(conf, unix=False,
                                                 directory=self.subdir(n))
        for d in self.daemons.values():
            d.start()

    def start_redlock(self, conf, bconf):
        """Three independent redis-servers, a proxy to each, and two
        daemons with -b redlock://...: d0 straight to the nodes, d1 through
        the proxies. The nodes keep their data across a restart
        (appendonly yes, appendfsync always) but in the node_restart_loss
        scenarios."""
        persist = self.fault not in ("node_restart_loss", "node_restart_loss_now")
        for i in range(REDLOCK_NODES):
            self.nodes.append(BackendRedis(persist, directory=self.subdir("node%d" % i)).start())
        for n in self.nodes:
            self.proxies.append(Proxy(n.port).start())
        # the -b URL names the nodes; the timeouts go to the file
        text = conf + "backend:\n" + "".join("  %s: %s\n" % (k, harness.yaml_value(v))
                                             for k, v in bconf.items())
        urls = {"d0": ["127.0.0.1:%d" % n.port for n in self.nodes],
                "d1": ["127.0.0.1:%d" % p.port for p in self.proxies]}
        for name in ("d0", "d1"):
            self.daemons[name] = harness.Daemon(
                text, unix=False, backend="redis",
                backend_url="redlock://" + ",".join(urls[name]),
                directory=self.subdir(name))

    def start_cluster(self, conf, bconf):
        """A Redis Cluster of CLUSTER_MASTERS masters with a replica each,
        the lock set's keys one on each master (checked), and two daemons
        with -b redis-cluster://the masters, both straight to the nodes
        (the timeouts go to the file)."""
        self.cluster = FaultCluster(masters=CLUSTER_MASTERS, replicas=1,
                                    node_timeout_ms=int(CLUSTER_NODE_TIMEOUT_MS * self.scale),
                                    directory=self.subdir("cluster")).start()
        self.keys = self.cluster_keys()
        owners = {}
        for k in self.keys:
            owners[k] = self.cluster.master_of(self.cluster.lock_slot(k))
        ports = sorted({m.port for m in owners.values()})
        if len(ports) != CLUSTER_MASTERS:
            raise AssertionError("the lock set's keys %s are on %d master(s) (%s), not %d"
                                 % (self.keys, len(ports), ports, CLUSTER_MASTERS))
        say("    keys: %s" % ", ".join("%s (slot %d, master %d)"
                                       % (k, self.cluster.lock_slot(k), owners[k].port)
                                       for k in self.keys))
        text = conf + "backend:\n" + "".join("  %s: %s\n" % (k, harness.yaml_value(v))
                                             for k, v in bconf.items())
        for name in ("d0", "d1"):
            self.daemons[name] = harness.Daemon(text, unix=False, backend="redis-cluster",
                                                redis=self.cluster,
                                                backend_url=self.cluster.url(),
                                                directory=self.subdir(name))

    def cluster_keys(self):
        """One lock key per master: the first of safety/cluster/<fault>/<i>
        whose slot each master owns."""
        owner = self.cluster.slot_map()
        masters = {m.node_id for m in self.cluster.masters()}
        keys = {}
        i = 0
        while len(keys) < len(masters):
            k = "safety/%s/%s/%d" % (self.backend, self.fault, i)
            nid = owner[self.cluster.lock_slot(k)]
            if nid in masters and nid not in keys:
                keys[nid] = k
            i += 1
        return sorted(keys.values(), key=lambda k: int(k.rsplit("/", 1)[1]))

    def cluster_up(self, d):
        """backend_cluster_slots_up of daemon d's INFO (None if it cannot
        say)."""
        try:
            v = d.info().get("backend_cluster_slots_up")
        except (OSError, AssertionError):
            return None
        return int(v) if v is not None and v.isdigit() else None

    def wait_cluster_up(self):
        """cluster, between rounds: until the cluster is ok again (every
        node up, the old master a replica) and both daemons have a master
        connected for every slot (bounded; a failed check if not)."""
        limit = (2.0 * self.ttl / 1000.0 + 10.0) * self.scale
        deadline = time.monotonic() + limit
        try:
            self.cluster.wait_ok(limit)
        except AssertionError as e:
            self.failures.append({"kind": "cluster not back", "text": str(e)})
            return
        for name, d in sorted(self.daemons.items()):
            while True:
                up = self.cluster_up(d)
                if up == harness.CLUSTER_SLOTS:
                    break
                if time.monotonic() > deadline:
                    self.failures.append({
                        "kind": "cluster not back",
                        "text": "dlockd %s has %s of %d slots up %.0f s after the fault; "
                        "INFO backend_cluster_slots_up stays below; log:\n%s"
                        % (name, up, harness.CLUSTER_SLOTS, limit, d.log())})
                    return
                time.sleep(0.05)

    def say_cluster_stats(self):
        """Print what each daemon counted of the cluster (INFO
        backend_cluster_*): whether the faults reached the daemons."""
        for name, d in sorted(self.daemons.items()):
            try:
                info = d.info()
            except (OSError, AssertionError):
                continue
            say("    %s (since it last started): %s masters, %s map reads, %s MOVED, %s ASK, "
                "%s TRYAGAIN/CLUSTERDOWN" % (
                    name, info.get("backend_cluster_masters", "?"),
                    info.get("backend_cluster_refreshes_total", "?"),
                    info.get("backend_cluster_moved_total", "?"),
                    info.get("backend_cluster_ask_total", "?"),
                    info.get("backend_cluster_tryagain_total", "?")))
        # a node that stalls past the node timeout (a loaded machine) is
        # failed over too: the checker's rules are the same, but say so
        injected = sum(1 for f in self.faults if f["kind"] in ("master_kill", "master_stop"))
        seen = self.cluster.failovers()
        if seen > injected:
            self.notes.append("%d failover(s) in the cluster, %d of them injected: a node "
                              "stalled past the node timeout (%d ms)"
                              % (seen, injected, self.cluster.node_timeout_ms))

    def nodes_up(self, d):
        """backend_nodes_up of daemon d's INFO (None if it cannot say)."""
        try:
            v = d.info().get("backend_nodes_up")
        except (OSError, AssertionError):
            return None
        return int(v) if v is not None and v.isdigit() else None

    def wait_nodes_up(self):
        """redlock, between rounds: until both daemons are connected to
        every node again (bounded; a failed check if not)."""
        limit = (2.0 * self.ttl / 1000.0 + 5.0) * self.scale
        deadline = time.monotonic() + limit
        for name, d in sorted(self.daemons.items()):
            while True:
                up = self.nodes_up(d)
                if up == REDLOCK_NODES:
                    break
                if time.monotonic() > deadline:
                    self.failures.append({
                        "kind": "node not back",
                        "text": "dlockd %s has %s of %d nodes up %.0f s after the fault; "
                        "INFO backend_nodes_up stays below; log:\n%s"
                        % (name, up, REDLOCK_NODES, limit, d.log())})
                    return
                time.sleep(0.05)

    def say_node_stats(self):
        """Print what each daemon counted of each node (INFO
        backend_node<i>_*): whether the faults reached the daemons."""
        for name, d in sorted(self.daemons.items()):
            try:
                info = d.info()
            except (OSError, AssertionError):
                continue
            parts = []
            for i in range(REDLOCK_NODES):
                parts.append("node%d %s calls, %s failures, %s timeouts, %s reconnects" % (
                    i, info.get("backend_node%d_calls_total" % i, "?"),
                    info.get("backend_node%d_failures_total" % i, "?"),
                    info.get("backend_node%d_timeouts_total" % i, "?"),
                    info.get("backend_node%d_reconnects_total" % i, "?")))
            say("    %s (since it last started): %s" % (name, "; ".join(parts)))

    def subdir(self, name):
        p = os.path.join(self.dir, name)
        os.makedirs(p, exist_ok=True)
        return p

    def layout(self):
        """(daemon, kind) of each worker."""
        if self.backend == "memory":
            return [("d0", k) for k in ("py2", "raw2", "raw3", "raw3push", "raw3push")]
        if self.backend == "split":
            return [("d0", "py2"), ("d0", "raw3push"), ("d1", "raw2"), ("d1", "raw3push")]
        if self.backend == "cluster":
            # three workers on each of the three keys (worker i takes key
            # i mod 3), on both daemons
            return [("d0", "py2"), ("d0", "raw3push"), ("d0", "raw2"),
                    ("d1", "raw3push"), ("d1", "py2"), ("d1", "raw3"),
                    ("d1", "raw3push"), ("d0", "raw3push"), ("d1", "raw2")]
        return [("d0", "py2"), ("d0", "raw3push"), ("d0", "raw2"),
                ("d1", "raw3push"), ("d1", "py2"), ("d1", "raw3")]

    def worker_config(self, wid, daemon, kind):
        ttl = self.ttl
        push = kind == "raw3push"
        return {
            "id": wid, "kind": kind, "daemon": daemon,
            "daemon_port": self.daemons[daemon].port,
            "resource_port": self.resource.port,
            "key": self.keys[self.wseq % len(self.keys)],
            "ttl": ttl,
            "wait": ttl, "log": os.path.join(self.dir, "%s.log" % wid),
            "seed": self.rng.randrange(1 << 30),
            # short holds are well under the safety margin; long ones span
            # a renewal or two (every TTL/3) and check in, or read pushes
            "hold_short": [2, max(5, self.margin_ms // 3)],
            "hold_long": [ttl // 3 + 100, ttl * 3 // 2],
            "long_frac": 0.3 if push else 0.1,
            "checkin_ms": 25,
            "prepare_ms": [10, 40],
            "extend_frac": 0.25,
            "pause": [0, 20],
            "io_timeout": 60.0,
        }

    def spawn_worker(self, daemon, kind):
        self.wseq += 1
        wid = "w%d" % self.wseq
        cfg = self.worker_config(wid, daemon, kind)
        out = open(os.path.join(self.dir, "%s.out" % wid), "ab")
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        p = harness.spawn([PYTHON, "-B", WORKER, json.dumps(cfg)], stdin=subprocess.DEVNULL,
                          stdout=out, stderr=out, env=env)
        out.close()
        self.workers[wid] = {"proc": p, "daemon": daemon, "kind": kind, "key": cfg["key"],
                             "log": cfg["log"], "pid": p.pid, "stopped": False}
        self.tail.add(cfg["log"])
        return wid

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
            due = None
            if self.backend in ETCD_BACKENDS:
                due = self.keepalive_due(self.workers[e["w"]]["daemon"])
            if due is None:
                due = self.renewal_due(e)
            at = due - self.rng.uniform(0.005, 0.03)
            time.sleep(max(0.0, at - time.monotonic()))
            return e, e["w"]
        return None, None

    def renewal_due(self, grant):
        """When (time.monotonic()) the daemon sends the first renewal of the
        lock of a grant event: TTL/3 after it sent the request, rounded up to
        a multiple of 100 ms of its clock (CLOCK_BOOTTIME in ms) when TTL/3 is
        at least 200 ms (PROTOCOL.md 8.2, locktab.c renew_time). The request
        left just before the grant came."""
        off = time.clock_gettime(time.CLOCK_BOOTTIME) - time.monotonic()
        sent_ms = int((grant["t"] - 0.001 + off) * 1000)
        due = sent_ms + self.ttl // 3
        if self.ttl // 3 >= 200:
            due = (due + 99) // 100 * 100
        return due / 1000.0 - off

    def keepalive_due(self, dname):
        """When (time.monotonic()) the etcd-backed daemon dname sends its
        next keepalive of its lease, or None if it has no valid lease. The
        keepalives go every third of the lease's TTL from the grant on; the
        last one etcd answered was sent the TTL less what is left of the
        lease before now (INFO's backend_lease_ttl_ms and
        backend_lease_valid_ms; be_etcd.c on_lease_timer, on_keepalive). One
        sent and not answered yet is passed over."""
        t0 = time.monotonic()
        try:
            info = self.daemons[dname].info()
        except (OSError, AssertionError):
            return None
        t1 = time.monotonic()
        ttl = int(info.get("backend_lease_ttl_ms") or 0)
        left = int(info.get("backend_lease_valid_ms") or 0)
        if ttl <= 0 or left <= 0:
            return None
        period = ttl / 3000.0
        due = (t0 + t1) / 2 - (ttl - left) / 1000.0 + period
        while due < t1:
            due += period
        return due

    def pick_daemon(self, rnd):
        names = sorted(self.daemons)
        if self.fault == "blackhole":
            return "d1"
        return names[rnd % len(names)]

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
        kind = self.fault
        plans = plans_of(self.backend, kind)
        how, spec = plans[rnd % len(plans)]
        if self.backend == "cluster" and kind in CLUSTER_NODE_FAULTS:
            self.inject_cluster(kind, how, spec)
            return
        dur = self.duration(spec) if spec else None
        if kind == "none":
            time.sleep(dur)
            return
        if kind in ALL_FAULTS["sentinel"]:
            self.inject_sentinel(kind, how, dur)
            return
        if kind in REDLOCK_NODE_FAULTS:
            self.inject_redlock(kind, how, dur, spec)
            return
        if kind in ("client_kill", "client_stop"):
            ev, wid = self.aim(how)
            if wid is None:
                wid = self.rng.choice([w for w, i in self.workers.items()
                                       if i["proc"].poll() is None])
            info = self.workers[wid]
            aim = "%s of %s" % (how, wid) if ev else "none"
            if kind == "client_kill":
                t = time.monotonic()
                os.kill(info["pid"], signal.SIGKILL)
                harness.reap(info["proc"])
                self.record(kind, wid, t, t, aim=aim, pid=info["pid"])
                self.spawn_worker(info["daemon"], info["kind"])
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
        if kind in ("daemon_stop", "daemon_kill"):
            dname = self.pick_daemon(rnd)
            ev, wid = self.aim(how, on_daemon=dname)
            aim = "%s of %s" % (how, wid) if ev else "none"
            d = self.daemons[dname]
            pid = d.pid
            if kind == "daemon_stop":
                t0 = time.monotonic()
                os.kill(pid, signal.SIGSTOP)
                try:
                    time.sleep(dur)
                finally:
                    os.kill(pid, signal.SIGCONT)
                self.record(kind, dname, t0, time.monotonic(), aim=aim, pid=pid,
                            planned=spec)
            else:
                t0 = time.monotonic()
                d.stop(signal.SIGKILL)
                time.sleep(self.rng.uniform(0.1, 0.3))
                d.start()
                self.record(kind, dname, t0, time.monotonic(), aim=aim, pid=pid,
                            new_pid=d.pid)
            return
        if kind == "blackhole":
            ev, wid = self.aim(how, on_daemon="d1")
            aim = "%s of %s" % (how, wid) if ev else "none"
            t0 = self.proxy.block()
            try:
                time.sleep(dur)
            finally:
                t1 = self.proxy.heal()
            self.record(kind, "d1", t0, t1, aim=aim, pid=self.proxy.proc.pid, planned=spec)
            return
        # the backend
        ev, wid = self.aim(how)
        aim = "%s of %s" % (how, wid) if ev else "none"
        pid = self.store.pid
        if kind == "backend_stop":
            t0 = time.monotonic()
            self.store.pause()
            try:
                time.sleep(dur)
            finally:
                self.store.resume()
            self.record(kind, "backend", t0, time.monotonic(), aim=aim, pid=pid,
                        planned=spec)
        elif kind in ("backend_restart", "backend_restart_loss"):
            t0, t1 = self.store.restart(dur)
            self.record(kind, "backend", t0, t1, aim=aim, pid=pid, new_pid=self.store.pid,
                        planned=spec)

    def inject_redlock(self, kind, how, dur, spec):
        """A fault of the redlock backend's nodes: one killed (started
        again with or without its data), stopped, or cut off from d1 by its
        proxy; two of d1's paths cut off; or two nodes killed."""
        n = len(self.nodes)
        if kind in ("node_blackhole", "majority_blackhole"):
            idx = sorted(self.rng.sample(range(n), 1 if kind == "node_blackhole" else 2))
            ev, wid = self.aim(how, on_daemon="d1")
            aim = "%s of %s" % (how, wid) if ev else "none"
            t0 = None
            try:
                for i in idx:
                    t = self.proxies[i].block()
                    t0 = t if t0 is None else t0
                time.sleep(dur)
            finally:
                t1 = None
                for i in idx:
                    t1 = self.proxies[i].heal()
            lost = ["d1"] if len(idx) > n // 2 else []
            self.record(kind, "d1/" + "+".join("node%d" % i for i in idx), t0, t1, aim=aim,
                        nodes=idx, planned=spec, quorum_lost=lost)
            return
        ev, wid = self.aim(how)
        aim = "%s of %s" % (how, wid) if ev else "none"
        if kind == "majority_lost":
            idx = sorted(self.rng.sample(range(n), n // 2 + 1 if n > 2 else n))
            self.majority_lost(idx, dur, aim, spec)
            return
        i = self.rng.randrange(n)
        node = self.nodes[i]
        pid = node.pid
        if kind == "node_stop":
            t0 = time.monotonic()
            node.pause()
            try:
                time.sleep(dur)
            finally:
                node.resume()
            self.record(kind, "node%d" % i, t0, time.monotonic(), aim=aim, pid=pid,
                        planned=spec)
            return
        # node_kill, node_restart_loss, node_restart_loss_now
        t0, t1 = node.restart(dur)
        self.record(kind, "node%d" % i, t0, t1, aim=aim, pid=pid, new_pid=node.pid,
                    planned=spec, data=node.persist)

    def majority_lost(self, idx, dur, aim, spec):
        """SIGKILL the nodes idx (a majority); while they are down, LOCK on
        each daemon must answer -BACKEND soon and INFO must show the quorum
        gone; after dur they start again on their ports and data."""
        t0 = time.monotonic()
        pids = []
        for i in idx:
            pids.append(self.nodes[i].pid)
            self.nodes[i].stop(signal.SIGKILL)
        probes = self.probe_no_quorum(t0 + dur)
        time.sleep(max(0.0, t0 + dur - time.monotonic()))
        for i in idx:
            self.nodes[i].fixed_port = True
            self.nodes[i].start()
        t1 = time.monotonic()
        self.record("majority_lost", "+".join("node%d" % i for i in idx), t0, t1, aim=aim,
                    pid=pids, planned=spec, quorum_lost=sorted(self.daemons), probes=probes)

    def probe_no_quorum(self, until):
        """While a majority of the nodes is down (until time.monotonic()
        until): each daemon's INFO must come to show backend_connected:0
        and one node up, and a LOCK of a key nobody uses must answer
        -BACKEND (the quorum cannot be reached) without waiting for its
        WAIT. Returns what was seen, for the record; what is wrong is a
        failed check."""
        out = []
        key = "safety/%s/probe" % self.backend
        limit = min(1.0 * self.scale, max(0.05, until - time.monotonic() - 0.05))
        for name, d in sorted(self.daemons.items()):
            seen = {"daemon": name}
            deadline = time.monotonic() + limit
            info = {}
            while time.monotonic() < deadline:
                try:
                    info = d.info()
                except (OSError, AssertionError):
                    info = {}
                if info.get("backend_connected") == "0":
                    break
                time.sleep(0.01)
            seen["backend_connected"] = info.get("backend_connected")
            seen["nodes_up"] = info.get("backend_nodes_up")
            if info.get("backend_connected") != "0" or info.get("backend_nodes_up") not in (
                    None, str(REDLOCK_NODES - (REDLOCK_NODES // 2 + 1))):
                self.failures.append({
                    "kind": "quorum not seen lost",
                    "text": "dlockd %s: INFO says backend_connected:%s backend_nodes_up:%s "
                    "%.1f s after %d of %d nodes were killed"
                    % (name, info.get("backend_connected"), info.get("backend_nodes_up"),
                       limit, REDLOCK_NODES // 2 + 1, REDLOCK_NODES)})
            c = None
            try:
                c = d.raw()
                t = time.monotonic()
                wait = 2 * self.ttl
                r = c.cmd("LOCK", key, "TTL", str(self.ttl), "WAIT", str(wait))
                took = time.monotonic() - t
                seen["lock"] = str(r)[:200]
                seen["took"] = round(took, 3)
                if not (isinstance(r, harness.Err) and r.startswith("BACKEND")):
                    self.failures.append({
                        "kind": "lock without quorum",
                        "text": "dlockd %s answered LOCK with %r, not -BACKEND, while %d of "
                        "%d nodes were down" % (name, r, REDLOCK_NODES // 2 + 1,
                                                REDLOCK_NODES)})
                    if isinstance(r, list):
                        c.cmd("UNLOCK", key)
                elif took > 1.0 * self.scale:
                    self.failures.append({
                        "kind": "slow -BACKEND",
                        "text": "dlockd %s took %.3f s to answer LOCK with -BACKEND while %d "
                        "of %d nodes were down (expected at once)"
                        % (name, took, REDLOCK_NODES // 2 + 1, REDLOCK_NODES)})
            except (OSError, AssertionError, harness.Closed) as e:
                self.failures.append({"kind": "harness",
                                      "text": "probe of dlockd %s: %s" % (name, e)})
            finally:
                if c is not None:
                    c.close()
            out.append(seen)
        return out

    def key_owners(self):
        """cluster: lock key -> the master that owns its slot now (and the
        slots of each, for wait_promoted)."""
        slots = {k: self.cluster.lock_slot(k) for k in self.keys}
        owner = self.cluster.owners(set(slots.values()))
        return {k: owner[s] for k, s in slots.items()}

    def aimed_key(self, wid):
        """The key of the worker a fault was aimed at, or one at random."""
        if wid is not None:
            return self.workers[wid]["key"]
        return self.rng.choice(self.keys)

    def inject_cluster(self, kind, how, spec):
        """A fault of the cluster's masters: the master of the aimed
        worker's key SIGKILLed (its replica promoted; it is started again
        and rejoins as a replica), with its replica cut off before when
        spec is "unsynced" (CLUSTER_PLANS), or SIGSTOPped until its replica
        has taken over and 0.3 s more (then it runs again, a stale master
        until the cluster tells it); or RESHARD_MOVES slots of the lock set
        moved to another master. Then back to a cluster that is ok and
        daemons with every slot's master up, for the next round."""
        if kind == "reshard":
            for i in range(RESHARD_MOVES):
                self.reshard(how if i == 0 else "lock", spec)
            self.wait_cluster_up()
            return
        owners = self.key_owners()
        cut = None
        cut_off = []
        if spec == "unsynced":
            cut = time.monotonic()
            for m in set(owners.values()):
                cut_off += self.cluster.cut_replicas(m)
        try:
            self.fail_master(kind, how, spec, owners, cut)
        finally:
            self.cluster.heal(cut_off)
        if kind == "master_kill":
            self.cluster.restart(self.last_killed)  # with its nodes.conf: a replica
        self.wait_cluster_up()

    def fail_master(self, kind, how, spec, owners, cut):
        """master_kill, master_stop: the fault itself, aimed, until a
        replica has taken over (see inject_cluster)."""
        ev, wid = self.aim(how)
        aim = "%s of %s" % (how, wid) if ev else "none"
        key = self.aimed_key(wid if ev else None)
        m = owners[key]
        pid = m.pid
        limit = CLUSTER_FAILOVER_LIMIT * self.scale
        if kind == "master_stop":
            t0 = time.monotonic()
            m.pause()
            try:
                new = self.cluster.wait_promoted(m, limit)
                failover = time.monotonic() - t0
                time.sleep(self.duration("failover"))
            finally:
                m.resume()
            t1 = time.monotonic()
        else:
            linked = None
            if cut is not None:
                linked = self.cluster.replicas_linked(m)
            t0 = time.monotonic()
            m.kill()
            new = self.cluster.wait_promoted(m, limit)
            t1 = time.monotonic()
            failover = t1 - t0
        extra = {}
        if cut is not None:
            # whether the replica had connected again by the kill (the
            # lease granted then reached it after all)
            extra = {"cut_at": cut, "replica_back": linked}
        self.record(kind, "master@%d" % m.port, t0, t1, aim=aim, pid=pid, key=key,
                    new_master=new.port, failover=round(failover, 3),
                    planned="failover" if kind == "master_stop" else spec, **extra)
        self.last_killed = m

    def reshard(self, how, mode):
        """Move the slot of a lock key (the aimed worker's) from its master
        to another one: in one go (mode "whole": SETSLOT IMPORTING and
        MIGRATING, every key in one MIGRATE, SETSLOT NODE), or a key at a
        time, 20 to 120 ms apart (mode "steps") or 250 to 500 ms apart
        (mode "slow")."""
        owners = self.key_owners()
        masters = self.cluster.masters()
        ev, wid = self.aim(how)
        aim = "%s of %s" % (how, wid) if ev else "none"
        key = self.aimed_key(wid if ev else None)
        src = owners[key]
        slot = self.cluster.lock_slot(key)
        dest = self.rng.choice([m for m in masters if m is not src])
        t0 = time.monotonic()
        if mode == "whole":
            self.cluster.migrate_slot(slot, dest)
            keys = None
        else:
            self.cluster.begin_migration(slot, dest)
            lo, hi = (0.02, 0.12) if mode == "steps" else (0.25, 0.5)
            keys = self.cluster.migrate_keys(
                slot, src, dest, pause=lambda: self.rng.uniform(lo, hi) * self.scale)
            self.cluster.finish_migration(slot, src, dest)
        t1 = time.monotonic()
        self.record("reshard", "slot%d:%d>%d" % (slot, src.port, dest.port), t0, t1, aim=aim,
                    key=key, slot=slot, src=src.port, dest=dest.port, mode=mode,
                    moved=keys, planned=mode)
        # the workers lock on for a while before the next move
        time.sleep(self.rng.uniform(0.2, 0.6) * self.scale)

    def inject_sentinel(self, kind, how, after):
        """A fault of the sentinel backend: the master SIGKILLed, or
        SIGSTOPped until the sentinels have promoted the replica (and after
        s more), or a sentinel SIGKILLed and then the master. Then back to
        a master, a replica and three sentinels for the next round."""
        s = self.sentinels
        dead = None
        t_sentinel = None
        if kind == "sentinel_kill":
            dead = self.rng.randrange(len(s.sentinels))
            t_sentinel = time.monotonic()
            s.kill_sentinel(dead)
            time.sleep(1.0 * self.scale)  # locks go on with two sentinels
        ev, wid = self.aim(how)
        aim = "%s of %s" % (how, wid) if ev else "none"
        m = s.master()
        pid = m.pid
        if kind == "master_stop":
            t0 = time.monotonic()
            m.pause()
            try:
                port = s.wait_failover(SENTINEL_FAILOVER_LIMIT * self.scale, old=m.port)
                failover = time.monotonic() - t0
                time.sleep(after)
            finally:
                m.resume()
            t1 = time.monotonic()
        else:
            _, t0 = s.kill_master()
            port = s.wait_failover(SENTINEL_FAILOVER_LIMIT * self.scale, old=m.port)
            t1 = time.monotonic()
            failover = t1 - t0
        target = "master" if dead is None else "sentinel%d" % dead
        self.record(kind, target, t_sentinel if t_sentinel is not None else t0, t1, aim=aim,
                    pid=pid, master_at=t0, new_master=port, failover=round(failover, 3),
                    planned="failover" if kind == "master_stop" else None)
        # the old master back as a replica (a stopped one is demoted by the
        # sentinels some 10 s after it runs again), the sentinel back
        if kind != "master_stop":
            s.rejoin(m)
        if dead is not None:
            s.restart_sentinel(dead)
        s.wait_ready(fsentinel.READY_TIMEOUT * self.scale)

    # ---- the run ----

    def run(self):
        say("  %s: TTL %d ms, margin %d %%, %d round(s)%s"
            % (self.name, self.ttl, self.margin_pct, self.rounds,
               ", sessions.idle_timeout_ms %d" % self.idle_ms if self.idle_ms else ""))
        t_start = time.monotonic()
        resource = {}
        run_end = None
        try:
            self.start_env()
            for daemon, kind in self.layout():
                self.spawn_worker(daemon, kind)
            self.warm_up()
            for rnd in range(self.rounds):
                self.inject(rnd)
                self.check_processes()
                if self.backend in REDLOCK_BACKENDS:
                    self.wait_nodes_up()
                if rnd + 1 < self.rounds:
                    time.sleep(self.ttl / 1000.0 + 0.3 * self.scale)
            recovery_from = self.faults[-1]["end"] if self.faults else None
            self.recover(recovery_from)
            run_end = time.monotonic()
            self.stop_workers()
            if self.backend in CACHE_BACKENDS:
                self.say_cache_hits()
            if self.backend in REDLOCK_BACKENDS:
                self.say_node_stats()
            if self.backend == "cluster":
                self.say_cluster_stats()
            conn = self.resource.raw()
            try:
                for k in self.keys:
                    resource[k] = fres.state(conn, k)
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
        events = read_events([i["log"] for i in self.workers.values()])
        workers = {w: {"daemon": i["daemon"], "kind": i["kind"], "key": i["key"]}
                   for w, i in self.workers.items()}
        params = {"ttl": self.ttl, "margin_ms": self.margin_ms, "backend": self.backend,
                  "notice_bound": 0.5 * self.scale, "recovery_from": recovery_from,
                  "run_end": run_end or time.monotonic()}
        if not resource:
            resource = {}
        res = check.check(events, workers, self.faults, resource, params)
        res["failures"] = self.failures + res["failures"]
        res["suspicious"] = self.notes + res["suspicious"]
        res["seconds"] = time.monotonic() - t_start
        return self.summarise(res, events)

    def say_cache_hits(self):
        """Print how many grants the daemons made from cached leases (since
        each one last started): whether the cache met the faults at all."""
        hits = 0
        for d in self.daemons.values():
            try:
                hits += int(d.info().get("backend_cache_hits_total") or 0)
            except (OSError, AssertionError, ValueError):
                pass
        say("    lease cache: %d grants from cached leases" % hits)

    def warm_up(self):
        """Until a few grants were seen (bounded)."""
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

    def stop_workers(self):
        for wid, i in self.workers.items():
            if i["proc"].poll() is None:
                if i["stopped"]:
                    os.kill(i["pid"], signal.SIGCONT)
                    i["stopped"] = False
                os.kill(i["pid"], signal.SIGTERM)
        limit = (2 * self.ttl / 1000.0 + 5.0) * self.scale
        deadline = time.monotonic() + limit
        for wid, i in self.workers.items():
            p = i["proc"]
            if p.returncode is not None and p.pid not in harness._procs:
                continue  # killed and reaped by a fault
            try:
                rc = p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
                rc = None
                self.failures.append({"kind": "worker stuck",
                                      "text": "worker %s did not stop within %.0f s"
                                      % (wid, limit)})
            harness.forget(p)
            if rc not in (0, None, -signal.SIGKILL):
                self.failures.append({"kind": "worker failed",
                                      "text": "worker %s exited with %s: %s"
                                      % (wid, rc, harness.log_tail(
                                          os.path.join(self.dir, "%s.out" % wid), 1500))})

    def teardown(self):
        """Stop every process of the scenario, whatever happened; a daemon
        that does not exit 0 on SIGTERM is a failure."""
        for wid, i in self.workers.items():
            p = i["proc"]
            if p.poll() is None:
                p.kill()
                p.wait(5)
            harness.forget(p)
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
        if self.proxy is not None:
            self.proxy.stop()
        for p in self.proxies:
            p.stop()
        for r in [self.redis, self.resource] + self.nodes:
            if r is not None:
                try:
                    r.stop()
                except AssertionError as e:
                    self.failures.append({"kind": "redis exit", "text": str(e)})
        if self.cluster is not None:
            for srv, rc in self.cluster.stop():
                if rc not in (0, None):
                    self.failures.append({"kind": "redis exit",
                                          "text": "cluster node on port %d exited with %s; "
                                          "log:\n%s" % (srv.port, rc, srv.log())})
        if self.sentinels is not None:
            for p, rc in self.sentinels.stop():
                if rc != 0:
                    self.failures.append({"kind": "sentinel exit",
                                          "text": "%s on port %d exited with %s; log:\n%s"
                                          % (p.NAME, p.port, rc, p.log())})
        if self.etcd is not None:
            try:
                rc = self.etcd.stop()
            except AssertionError as e:
                rc = str(e)
            if rc not in (0, -signal.SIGTERM):
                self.failures.append({"kind": "etcd exit",
                                      "text": "etcd exited with %s on SIGTERM; log:\n%s"
                                      % (rc, self.etcd.log())})

    # ---- results ----

    def summarise(self, res, events):
        c = res["counts"]
        out = {
            "name": self.name, "backend": self.backend, "fault": self.fault,
            "rounds": self.rounds, "ttl_ms": self.ttl, "margin_ms": self.margin_ms,
            "idle_timeout_ms": self.idle_ms, "seconds": round(res["seconds"], 1),
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
        out["expect_violations"] = self.backend == "split"
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
    wrapped = bool(harness.WRAPPER)
    if mode == "short":
        todo = [(b, f, 1) for b, f in SHORT + (ONLY_SHORT if only else [])]
    else:
        todo = [(b, f, rounds or max(3, len(plans_of(b, f))))
                for b in ("memory", "redis", "redis-cache", "etcd", "etcd-tls", "sentinel",
                          "redlock", "redlock-cache", "cluster")
                for f in ALL_FAULTS[b]]
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
    scale = 3.0 if harness.WRAPPER else 1.0
    if seed is None:
        seed = random.randrange(1 << 30)
    if outdir is None:
        outdir = harness.new_dir("safety")
    os.makedirs(outdir, exist_ok=True)
    todo, skipped = plan(mode, only, rounds)
    say("dlockd safety test, %s mode, seed %d, logs in %s" % (mode.upper(), seed, outdir))
    if harness.WRAPPER:
        say("  the daemon runs under %s: durations and backend timeouts x%.0f; left out:"
            % (" ".join(harness.WRAPPER), scale))
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
        "mode": mode, "seed": seed, "scale": scale, "wrapper": " ".join(harness.WRAPPER),
        "dlockd": harness.DLOCKD, "source": source_version(),
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


COLUMNS = [("backend", 11), ("fault", 21), ("grants", 6), ("writes", 6), ("stale", 5),
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
    return "\n".join(lines)


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
                    "(in SHORT mode the sentinel, redlock and cluster ones too)")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--out", help="directory for the logs and results.json")
    ap.add_argument("--json", help="where to write the results")
    a = ap.parse_args(argv)
    harness.install_signal_handlers()
    # a hang-up (the terminal went away) stops everything too
    signal.signal(signal.SIGHUP, signal.getsignal(signal.SIGTERM))
    out = run(a.mode or "short", a.only, a.rounds, a.seed, a.out, a.json)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
