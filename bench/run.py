#!/usr/bin/python3
"""The benchmark suite of dlockd (`make bench`).

usage: run.py [--window MS] [--warmup MS] [--only REGEX] [--out DIR] [--list]

Starts its own redis-server and etcd on free loopback ports (RedisServer and
EtcdServer of the tests' library, tests/dlocktest, in a temporary directory), a fresh
dlockd for each run (two for multi-daemon), and runs build/dlock-bench
against them: every backend (memory, redis, etcd) on every workload, the
redis backend set up otherwise (redis-cache: a lease cache; redis-tls: over
TLS to a redis-server serving TLS, with certificates made by the openssl
command; redis-ack1: waiting for a replica's acknowledgement, against a
redis-server with one replica), the redlock backend on 3 and on 5
redis-servers of its own (redlock-3, redlock-5), the redis-cluster backend on
a Redis Cluster of 3 masters with a replica each (redis-cluster), and the
baselines (direct, direct-poll, direct-etcd, redis-server's PING, the
hold-time limit). Before the runs, `dlockd -t` checks each of those
configurations: one whose key or backend the daemon does not know yet
(backend.min_replicas_ack, redlock://, redis-cluster://) is left out with a
line saying so; one it refuses otherwise fails its runs.
Around each run it reads Redis INFO commandstats and cpu (of every node for
redlock, of every master for redis-cluster), etcd's /metrics and each
daemon's INFO; dlock-bench itself reads the CPU time of the daemons
and servers over its measuring window; the daemons' peak RSS (VmHWM) is read
before they stop.

It writes bench/results/<YYYY-MM-DD>/ (or --out): results.json (every
figure, the wait distributions included), results.md (the goals table and
the table of every run) and, with gnuplot, throughput.png and wait.png. A
backend whose server cannot be started is reported and skipped; the rest
goes on. See bench/README.md for what each run and column is.
"""

import argparse
import datetime
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get("BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
BENCH = os.path.join(BUILD, "dlock-bench")
os.environ.setdefault("DLOCKD_BIN", os.path.join(BUILD, "dlockd"))

# the tests' library (tests/ on PYTHONPATH, as the Makefile's bench target
# sets it), after DLOCKD_BIN is set
from dlocktest.certs import make_certs  # noqa: E402
from dlocktest.cluster import RedisCluster  # noqa: E402
from dlocktest.conf import yaml_value  # noqa: E402
from dlocktest.daemon import Daemon  # noqa: E402
import elect  # noqa: E402  (bench/elect.py: the election section)
import lockall  # noqa: E402  (bench/lockall.py: the LOCKALL section)
from dlocktest.env import DLOCKD, ETCD, REDIS_SERVER, new_dir  # noqa: E402
from dlocktest.etcd_server import EtcdServer  # noqa: E402
from dlocktest.proc import (install_signal_handlers, raise_nofile, run_bytes,  # noqa: E402
                            vm_rss_kib, wait_until)
from dlocktest.redis_server import RedisServer, commandstats  # noqa: E402
from dlocktest.resp import parse_info  # noqa: E402
from dlocktest.sessions import close_hard, open_sessions  # noqa: E402

UNCONTENDED_C = (1, 16, 50, 64)
DIRECT_ETCD_C = (16, 50)         # the etcd goals' connections: direct-etcd runs there
CONTENDED_N = (2, 16, 64)
CONTENDED_H = (0, 1000)          # µs
HOT = dict(clients=64, keys=1000, zipf=1.1, hold_us=100)
MULTI = dict(clients=16, daemons=2, hold_us=0)
HOLD_LIMITS = (1000, 100)        # µs
GOAL_C = 50                      # the connections of the goals' uncontended figures
BACKENDS = ("memory", "redis", "etcd")
CACHE_MS = 5                     # backend.lease_cache_ms of redis-cache
ACK_REPLICAS = 1                 # backend.min_replicas_ack of redis-ack1
REDIS_WORKLOADS = ("uncontended", "contended", "hot", "multi-daemon")
REDLOCK_NODES = 5                # redis-servers of the "redlock" store
CLUSTER_MASTERS = 3              # the "redis-cluster" store: masters,
CLUSTER_REPLICAS = 1             # replicas of each master (as in production),
CLUSTER_NODE_TIMEOUT_MS = 15000  # and cluster-node-timeout (Redis's default: a
                                 # loaded machine does not fail a master over)
CLUSTER_SHARE = (0.2, 0.5)       # goal: each master's share of the hot
                                 # workload's EVALSHA calls
# Systems that are the redis backend set up otherwise, or the redlock
# backend, each with:
#   store      the redis-server(s) it uses: "redis" (plain TCP), "redis-tls"
#              (TLS only, certificates made for the run), "redis-repl"
#              (plain, with one replica), "redlock" (REDLOCK_NODES
#              independent redis-servers, of which it uses the first nodes)
#              or "redis-cluster" (a Redis Cluster, ClusterStore)
#   nodes      for the redlock store: how many nodes its daemons use
#   settings   backend.* keys written to the daemon's configuration
#   workloads  the ones it runs
#   pending    what the daemon may not know yet (a key of settings, the
#              backend), and unknown, a regular expression matching what
#              `dlockd -t` says then: if every line it prints matches, the
#              system is left out (with a line saying why); any other
#              refusal fails its runs
VARIANTS = {
    # released leases cached: run where they help most and cost most
    "redis-cache": dict(store="redis", settings={"lease_cache_ms": CACHE_MS},
                        workloads=("uncontended", "multi-daemon"), pending=None),
    "redis-tls": dict(store="redis-tls", settings={}, workloads=REDIS_WORKLOADS,
                      pending=None),
    # a grant, renewal or handoff waits for a replica's acknowledgement
    "redis-ack1": dict(store="redis-repl", settings={"min_replicas_ack": ACK_REPLICAS},
                       workloads=REDIS_WORKLOADS, pending="backend.min_replicas_ack",
                       unknown=r"unknown key 'backend\.min_replicas_ack'"),
    # quorum locks over independent redis-servers (-b redlock://a,b,c)
    "redlock-3": dict(store="redlock", nodes=3, settings={}, workloads=REDIS_WORKLOADS,
                      pending="the redlock backend (-b redlock://)",
                      unknown=r"unknown backend URL 'redlock://"),
    "redlock-5": dict(store="redlock", nodes=5, settings={}, workloads=REDIS_WORKLOADS,
                      pending="the redlock backend (-b redlock://)",
                      unknown=r"unknown backend URL 'redlock://"),
    # one server per key: each lock's keys on its slot's master
    # (-b redis-cluster://seeds)
    "redis-cluster": dict(store="redis-cluster", settings={}, workloads=REDIS_WORKLOADS,
                          pending="the redis-cluster backend (-b redis-cluster://)",
                          unknown=r"unknown backend URL 'redis-cluster://"),
}
REDIS_STORES = ("redis", "redis-tls", "redis-repl")
REDLOCK_SYSTEMS = tuple(v for v in VARIANTS if VARIANTS[v]["store"] == "redlock")
CLUSTER_SYSTEMS = tuple(v for v in VARIANTS if VARIANTS[v]["store"] == "redis-cluster")
REPLICA_TIMEOUT = 20.0           # s for the replica to be in sync
SETTLE_TIMEOUT = 5.0             # s for daemons to release what the run left
SUBSCRIBE_TIMEOUT = 10.0         # s for a redis-cluster daemon's shard subscriptions
IDLE = 10000                     # idle sessions of the idle10k run


# ---- the plan ----

class Run:
    """One run of dlock-bench: what it measures and against what."""

    def __init__(self, system, workload, clients, hold_us=0, keys=None, daemons=0,
                 backend=None, target=None):
        # memory|redis|etcd|direct|direct-poll|direct-etcd|ping-redis|
        # ping-dlockd|hold, or one of VARIANTS
        self.system = system
        variant = VARIANTS.get(system)
        self.settings = variant["settings"] if variant else {}   # backend.* keys
        self.nodes = variant.get("nodes", 0) if variant else 0     # redlock's nodes
        self.workload = workload    # uncontended|contended|hot|multi-daemon|ping|hold
        self.clients = clients
        self.hold_us = hold_us
        self.keys = keys
        self.daemons = daemons      # dlockd processes to start
        self.backend = backend      # their backend: memory|redis|etcd|redlock|redis-cluster
        self.target = target        # "daemon", "redis", "etcd" or None (hold)
        # the server the backend or the direct client talks to: one of
        # REDIS_STORES, "redlock", "redis-cluster", "etcd", or None
        if variant:
            self.store = variant["store"]
        elif backend in ("redis", "etcd"):
            self.store = backend
        elif target == "etcd":
            self.store = "etcd"
        else:
            self.store = "redis" if target == "redis" else None
        self.id = self._id()

    def _id(self):
        if self.workload in ("uncontended", "ping", "idle10k"):
            case = "c%d" % self.clients
        elif self.workload == "contended":
            case = "n%d-h%d" % (self.clients, self.hold_us)
        elif self.workload == "hold":
            case = "h%d" % self.hold_us
        else:
            case = "n%d" % self.clients
        return "%s/%s/%s" % (self.system, self.workload, case)

    def mode(self):
        return {"direct": "direct", "direct-poll": "direct-poll", "direct-etcd": "direct-etcd",
                "ping-redis": "ping", "ping-dlockd": "ping",
                "hold": "hold"}.get(self.system, "dlock")

    def tool_workload(self):
        return "contended" if self.workload == "multi-daemon" else (
            self.workload if self.workload in ("uncontended", "contended", "hot")
            else "uncontended")

    def config(self):
        """The daemons' configuration file: room for the idle sessions."""
        if self.workload == "idle10k":
            return "limits:\n  max_clients: %d\n" % (IDLE + 2 * self.clients + 100)
        return ""

    def needs(self):
        """The servers it needs besides dlockd: none, or its store."""
        return {self.store} if self.store else set()

    def redis(self):
        """Whether its store is a redis-server."""
        return self.store in REDIS_STORES

    def redlock(self):
        """Whether its store is the redlock nodes."""
        return self.store == "redlock"

    def cluster(self):
        """Whether its store is the Redis Cluster."""
        return self.store == "redis-cluster"


def plan():
    """Every run of the suite, workload by workload, so that the runs a goal
    compares follow each other closely."""
    def variants(workload):
        return [v for v in VARIANTS if workload in VARIANTS[v]["workloads"]]

    def backend(v):
        return {"redlock": "redlock", "redis-cluster": "redis-cluster"}.get(
            VARIANTS[v]["store"], "redis")

    runs = []
    for c in UNCONTENDED_C:
        for b in BACKENDS:
            runs.append(Run(b, "uncontended", c, daemons=1, backend=b, target="daemon"))
            if b == "etcd" and c in DIRECT_ETCD_C:
                # the same recipe straight to etcd, right after the etcd run
                runs.append(Run("direct-etcd", "uncontended", c, target="etcd"))
        for v in variants("uncontended"):
            runs.append(Run(v, "uncontended", c, daemons=1, backend=backend(v),
                            target="daemon"))
        runs.append(Run("direct", "uncontended", c, target="redis"))
        runs.append(Run("ping-redis", "ping", c, target="redis"))
        if c in (1, GOAL_C):
            runs.append(Run("ping-dlockd", "ping", c, daemons=1, backend="memory",
                            target="daemon"))
    for n in CONTENDED_N:
        for h in CONTENDED_H:
            for b in BACKENDS:
                runs.append(Run(b, "contended", n, h, daemons=1, backend=b, target="daemon"))
            for v in variants("contended"):
                runs.append(Run(v, "contended", n, h, daemons=1, backend=backend(v),
                                target="daemon"))
            runs.append(Run("direct-poll", "contended", n, h, target="redis"))
    for b in BACKENDS + tuple(variants("hot")):
        runs.append(Run(b, "hot", HOT["clients"], HOT["hold_us"], HOT["keys"], daemons=1,
                        backend=b if b in BACKENDS else backend(b), target="daemon"))
    runs.append(Run("direct-poll", "hot", HOT["clients"], HOT["hold_us"], HOT["keys"],
                    target="redis"))
    for b in ("redis", "etcd") + tuple(variants("multi-daemon")):
        runs.append(Run(b, "multi-daemon", MULTI["clients"], MULTI["hold_us"],
                        daemons=MULTI["daemons"], backend=backend(b) if b in VARIANTS else b,
                        target="daemon"))
    for h in HOLD_LIMITS:
        runs.append(Run("hold", "hold", 1, h))
    # measured twice on one daemon: alone, then beside IDLE idle sessions
    runs.append(Run("memory", "idle10k", GOAL_C, daemons=1, backend="memory",
                    target="daemon"))
    return runs


# ---- measuring ----

def vm_hwm_kib(pid):
    """Peak resident set size (VmHWM) of a process, KiB; None if unknown."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def redis_info_cpu_us(conn):
    """used_cpu_sys + used_cpu_user of a redis-server, µs (its getrusage)."""
    text = conn.cmd("INFO", "cpu")
    if isinstance(text, bytes):
        text = text.decode()
    info = parse_info(text)
    return round((float(info["used_cpu_sys"]) + float(info["used_cpu_user"])) * 1e6)


def int_field(info, name):
    try:
        return int(info.get(name, 0))
    except ValueError:
        return 0


class BenchRedis(RedisServer):
    """A RedisServer with more redis-server arguments (extra, a list)."""

    def __init__(self, extra=(), **kw):
        super().__init__(**kw)
        self.extra = list(extra)

    def argv(self):
        return super().argv() + self.extra


class RedlockNodes:
    """The redlock store: REDLOCK_NODES independent redis-servers (no
    replication between them), and a raw connection to each. A run with n
    nodes uses the first n."""

    def __init__(self, count=REDLOCK_NODES):
        self.servers = [RedisServer() for _ in range(count)]
        self.conns = []

    def start(self):
        try:
            for s in self.servers:
                s.start()
                self.conns.append(s.raw())
        except BaseException:
            self.stop()
            raise
        return self

    def url(self, n):
        """The -b URL of a daemon on the first n nodes."""
        return "redlock://" + ",".join(s.address() for s in self.servers[:n])

    def pids(self, n):
        return {"node%d" % i: s.pid for i, s in enumerate(self.servers[:n])}

    def stop(self):
        for c in self.conns:
            c.close()
        self.conns = []
        for s in self.servers:
            if s.proc is not None:
                try:
                    s.stop()
                except AssertionError as e:
                    print("bench: %s" % e, file=sys.stderr)


class ClusterStore:
    """The redis-cluster store: a RedisCluster of CLUSTER_MASTERS
    masters with CLUSTER_REPLICAS replicas each, and a raw connection to
    each master. Masters are numbered in slot order (master 0 owns slot 0),
    as the daemon's INFO numbers them (backend_master<i>_...); replica j of
    master i is "replica<k>" with k = i * CLUSTER_REPLICAS + j."""

    def __init__(self):
        self.cluster = RedisCluster(masters=CLUSTER_MASTERS, replicas=CLUSTER_REPLICAS,
                                            node_timeout_ms=CLUSTER_NODE_TIMEOUT_MS)
        self.masters = []   # ClusterNodes, in slot order
        self.replicas = []  # ClusterNodes, by master
        self.slot_master = []   # slot -> index into masters
        self.conns = []     # a raw connection to each master

    def start(self):
        try:
            self.cluster.start()
            self.layout()
        except BaseException:
            self.stop()
            raise
        return self

    def layout(self):
        """Read who owns which slot and who replicates whom; connect to the
        masters anew."""
        for c in self.conns:
            c.close()
        self.conns = []
        owners = self.cluster.slot_map()
        first = {}
        for slot, nid in enumerate(owners):
            first.setdefault(nid, slot)
        ids = sorted(first, key=first.get)
        self.masters = [self.cluster.server(node_id=nid) for nid in ids]
        index = {nid: i for i, nid in enumerate(ids)}
        self.slot_master = [index.get(nid) for nid in owners]
        if None in self.masters:
            raise AssertionError("the cluster names a master the bench did not start")
        # each replica's own ROLE names its master (the masters' views of
        # their replicas may lag behind the gossip)
        of = {}
        for s in self.cluster.running():
            r = s.cmd("ROLE")
            if isinstance(r, list) and len(r) > 2 and r[0] == b"slave":
                of.setdefault(int(r[2]), []).append(s)
        self.replicas = []
        for m in self.masters:
            self.replicas += sorted(of.get(m.port, []), key=lambda s: s.port)
        for m in self.masters:
            self.conns.append(m.raw())

    def roles(self):
        """What ROLE says on each master's connection ("master" while no
        failover happened)."""
        out = []
        for c in self.conns:
            r = c.cmd("ROLE")
            out.append(r[0].decode() if isinstance(r, list) and isinstance(r[0], bytes)
                       else str(r))
        return out

    def check(self):
        """Before a run: the layout again if a master is one no longer."""
        if any(r != "master" for r in self.roles()):
            self.layout()

    def pids(self):
        """{label: pid}: master0, ..., replica0, ..."""
        out = {"master%d" % i: m.pid for i, m in enumerate(self.masters)}
        out.update({"replica%d" % i: r.pid for i, r in enumerate(self.replicas)})
        return out

    def pick_shares(self, prefix, keys, zipf):
        """Each master's share of the hot workload's key picks: the Zipf
        weights of the keys prefix + n (n < keys) summed by their slot's
        master. What the key names allow; acquisitions follow it where
        contention does not hold them back."""
        w = [1.0 / (i + 1) ** zipf for i in range(keys)]
        total = sum(w)
        out = [0.0] * len(self.masters)
        for i in range(keys):
            out[self.slot_master[self.cluster.lock_slot(prefix + str(i))]] += w[i] / total
        return out

    def stop(self):
        for c in self.conns:
            c.close()
        self.conns = []
        for s, rc in self.cluster.stop():
            if rc not in (0, None):
                print("bench: redis-server (cluster node) on port %d exited with %s"
                      % (s.port, rc), file=sys.stderr)


class Servers:
    """The servers of the suite, each started once, on demand: "redis",
    "redis-tls" (TLS only, with a CA and a server certificate made by the
    openssl command in a directory of the run), "redis-repl" (a primary and
    one replica, in sync before its first run), "redlock" (REDLOCK_NODES
    independent redis-servers, RedlockNodes), "redis-cluster" (a Redis
    Cluster, ClusterStore) and "etcd". A server that
    cannot start is remembered as the reason its runs are skipped."""

    def __init__(self):
        self.procs = {}     # name -> its RedisServer, EtcdServer, RedlockNodes or
                            # ClusterStore
        self.conns = {}     # name of a redis-server -> a raw connection to it
        self.replica = None     # the replica of redis-repl's primary
        self.certs = None       # redis-tls's certificates (dlocktest.certs.Certs)
        self.failed = {}    # name -> why

    def get(self, name):
        """The server name, started if it is not yet; None if it cannot be."""
        if name in self.failed:
            return None
        if name not in self.procs:
            try:
                self._start(name)
            except (AssertionError, OSError, ValueError) as e:
                self.failed[name] = str(e).strip().splitlines()[0]
                print("bench: %s could not be started: %s; its runs are skipped"
                      % (name, self.failed[name]), flush=True)
                return None
        return self.procs[name]

    def _start(self, name):
        if name == "etcd":
            self.procs[name] = EtcdServer().start()
            return
        if name == "redlock":
            self.procs[name] = RedlockNodes().start()
            return
        if name == "redis-cluster":
            self.procs[name] = ClusterStore().start()
            return
        if name == "redis":
            server = RedisServer()
        elif name == "redis-tls":
            self.certs = make_certs()
            server = RedisServer(tls=self.certs)
        elif name == "redis-repl":
            # no wait before a full synchronisation (5 s by default)
            server = BenchRedis(extra=["--repl-diskless-sync-delay", "0"])
        else:
            raise ValueError("unknown server %r" % name)
        self.procs[name] = server.start()
        self.conns[name] = server.raw()
        if name == "redis-repl":
            self._start_replica(server, self.conns[name])

    def _start_replica(self, primary, conn):
        """A replica of primary (conn: a connection to it), waited for until
        it says master_link_status:up and the primary's WAIT 1 counts it."""
        self.replica = BenchRedis(extra=["--replicaof", "127.0.0.1", str(primary.port)])
        self.replica.start()
        rconn = self.replica.raw()
        try:
            def in_sync():
                text = rconn.cmd("INFO", "replication")
                if isinstance(text, bytes):
                    text = text.decode()
                return parse_info(text).get("master_link_status") == "up"
            wait_until(in_sync, REPLICA_TIMEOUT, 0.05,
                               "the replica's master_link_status:up")
        finally:
            rconn.close()
        acks = conn.cmd("WAIT", "1", "5000")
        if acks != 1:
            raise AssertionError("the primary's WAIT 1 5000 answered %r, not 1" % (acks,))

    def pids(self, name, nodes=0):
        """{label: pid} of the processes of server name whose CPU time a run
        on it reads: its own (label redis or etcd), and a replica's; for
        redlock, those of the first nodes nodes (labels node0, node1, ...);
        for redis-cluster, those of its masters and replicas (master0, ...,
        replica0, ...)."""
        if name == "redlock":
            return self.procs[name].pids(nodes)
        if name == "redis-cluster":
            return self.procs[name].pids()
        out = {"etcd" if name == "etcd" else "redis": self.procs[name].pid}
        if name == "redis-repl":
            out["replica"] = self.replica.pid
        return out

    def stop(self):
        for c in self.conns.values():
            c.close()
        for s in [self.replica] + list(self.procs.values()):
            if s is not None:
                try:
                    s.stop()
                except AssertionError as e:
                    print("bench: %s" % e, file=sys.stderr)


def sample(run, servers, daemons):
    """The counters read before and after a run."""
    s = {"daemons": [d.info() for d in daemons]}
    if run.redis():
        conn = servers.conns[run.store]
        s["redis_calls"] = commandstats(conn)
        s["redis_cpu_us"] = redis_info_cpu_us(conn)
    if run.redlock():
        conns = servers.procs["redlock"].conns[:run.nodes]
        s["node_calls"] = [commandstats(c) for c in conns]
        s["node_cpu_us"] = [redis_info_cpu_us(c) for c in conns]
    if run.cluster():
        store = servers.procs["redis-cluster"]
        s["master_calls"] = [commandstats(c) for c in store.conns]
        s["master_cpu_us"] = [redis_info_cpu_us(c) for c in store.conns]
        s["master_roles"] = store.roles()
    if run.store == "etcd":
        etcd = servers.procs["etcd"]
        m = etcd.metrics()
        s["etcd_msgs"] = etcd.count(m, "grpc_server_msg_received_total")
        s["etcd_txns"] = etcd.count(m, "grpc_server_started_total", grpc_method="Txn")
    return s


def settle(daemons):
    """Wait (bounded) until the daemons hold nothing, queue nothing and have
    no backend request out: the sessions of the run are closed."""
    def quiet():
        for d in daemons:
            info = d.info()
            if (int_field(info, "locks_held") or int_field(info, "waiters")
                    or int_field(info, "backend_inflight")):
                return False
        return True
    try:
        wait_until(quiet, SETTLE_TIMEOUT, 0.01, "the daemons to settle")
    except AssertionError as e:
        return str(e)
    return None


def yaml_map(d, indent):
    """The YAML block of the mapping d (values: numbers, strings, mappings)."""
    out = ""
    for k, v in d.items():
        out += " " * indent + k + ":"
        if isinstance(v, dict):
            out += "\n" + yaml_map(v, indent + 2)
        else:
            out += " " + yaml_value(v) + "\n"
    return out


def daemon_config(run, settings):
    """The daemons' configuration file: run's own, and a backend section
    with settings (the -b URL gives type, address and TLS on or off)."""
    text = run.config()
    if settings:
        text += "backend:\n" + yaml_map(settings, 2)
    return text


def store_settings(run, servers):
    """The backend.* keys of run on its server: the variant's, and for
    redis-tls the CA that verifies the server's certificate."""
    settings = dict(run.settings)
    if run.store == "redis-tls":
        settings["tls"] = {"ca_file": servers.certs.ca}
    return settings


def start_daemons(run, servers):
    ds = []
    for _ in range(run.daemons):
        if run.redlock():
            # the -b URL names every node; the settings go to the file
            d = Daemon(daemon_config(run, store_settings(run, servers)),
                               backend="redis",
                               backend_url=servers.procs["redlock"].url(run.nodes),
                               unix=False)
            ds.append(d)
            d.start()
            continue
        if run.cluster():
            # -b redis-cluster://seeds (the masters at the cluster's start)
            d = Daemon(daemon_config(run, store_settings(run, servers)),
                               backend="redis-cluster",
                               redis=servers.procs["redis-cluster"].cluster, unix=False)
            ds.append(d)
            d.start()
            # connected comes first; then an SSUBSCRIBE per slot, which are
            # not the run's commands
            wait_until(lambda: d.info().get("backend_subscribed", "1") == "1",
                               SUBSCRIBE_TIMEOUT, 0.01, "dlockd's INFO to show "
                               "backend_subscribed:1")
            continue
        d = Daemon(daemon_config(run, store_settings(run, servers)),
                           backend=run.backend,
                           redis=servers.procs.get(run.store) if run.redis() else None,
                           etcd=servers.procs.get("etcd"), unix=False)
        ds.append(d)
        d.start()
    return ds


def key_prefix(index):
    """The prefix of the keys of the index-th run."""
    return "bench/%d/%d/" % (os.getpid(), index)


def tool_argv(run, index, window, warmup, daemons, servers):
    a = [BENCH, "--mode", run.mode(), "--workload", run.tool_workload(),
         "--clients", str(run.clients), "--duration", str(window), "--warmup", str(warmup),
         "--prefix", key_prefix(index), "--hist", "--label", run.id]
    if run.mode() != "ping":
        a += ["--hold-us", str(run.hold_us)]
    if run.keys:
        a += ["--keys", str(run.keys)]
    for i, d in enumerate(daemons):
        a += ["--addr", d.addr(), "--cpu", "dlockd%d=%d" % (i, d.pid)]
    if run.target == "redis":
        a += ["--addr", servers.procs[run.store].address()]
    elif run.target == "etcd":
        a += ["--addr", servers.procs["etcd"].endpoint()]
    if run.store:
        for label, pid in sorted(servers.pids(run.store, run.nodes).items()):
            a += ["--cpu", "%s=%d" % (label, pid)]
    return a


def run_tool(argv, limit):
    try:
        rc, out, err = run_bytes(argv, limit)
    except subprocess.TimeoutExpired:
        raise AssertionError("dlock-bench did not finish within %.0f s" % limit)
    if rc != 0:
        raise AssertionError("dlock-bench exited with %d: %s"
                             % (rc, err.decode(errors="replace").strip()))
    return json.loads(out.decode(errors="replace"))


def coarse_hist(hist, per_decade=20):
    """The tool's histogram ([from_us, to_us, n] buckets, 64 a power of two)
    merged into per_decade buckets a decade, for the JSON and the plots."""
    out = {}
    for lo, hi, n in hist:
        k = math.floor(per_decade * math.log10(max(hi, 0.001)) - 1e-9)
        if k in out:
            out[k][0] = min(out[k][0], lo)
            out[k][1] = max(out[k][1], hi)
            out[k][2] += n
        else:
            out[k] = [lo, hi, n]
    return [out[k] for k in sorted(out)]


def derive(run, tool, before, after):
    """The figures of one run from the tool's report and the counters."""
    pairs = run.mode() == "ping"
    ops = tool["ops"] / 2.0 if pairs else float(tool["ops"])        # in the window
    ops_total = tool["ops_total"] / 2.0 if pairs else float(tool["ops_total"])
    window = tool["window_s"]
    cpu = tool["cpu_us"]
    r = {"rate": ops / window if window > 0 else 0.0,
         "unit": "ping pair" if pairs else tool["unit"],
         "wait_us": tool["wait_us"], "jain_clients": tool["jain_clients"],
         "jain_daemons": tool.get("jain_addrs") if run.daemons > 1 else None,
         "per_daemon": tool.get("per_addr") if run.daemons > 1 else None,
         "tool_cpu_pct": tool["tool_cpu_pct"], "errors": tool["errors"],
         "first_error": tool["first_error"], "lost": tool["lost"],
         "starved_clients": tool["starved_clients"], "waiting_at_end": tool["waiting_at_end"],
         "longest_waiting_us": tool["longest_waiting_us"]}
    # the CPU the rest of the machine used meanwhile: what this run did not
    # do itself (other users' work, this runner), in % of one core
    busy = tool.get("machine_busy_us")
    if busy is not None and window > 0 and None not in cpu.values():
        own = tool["tool_cpu_us"] + sum(cpu.values())
        r["others_cpu_pct"] = max(busy - own, 0) / 1e4 / window
        r["steal_pct"] = tool["machine_steal_us"] / 1e4 / window
    else:
        r["others_cpu_pct"] = r["steal_pct"] = None

    def per_op(v, n=ops):
        return v / n if v is not None and n > 0 else None

    def daemons_delta(field):
        return sum(int_field(a, field) - int_field(b, field)
                   for a, b in zip(after["daemons"], before["daemons"]))

    dcpu = [v for k, v in cpu.items() if k.startswith("dlockd")]
    r["daemon_cpu_us_per_op"] = per_op(sum(dcpu)) if dcpu and None not in dcpu else None
    server = "redis" if "redis" in cpu else "etcd" if "etcd" in cpu else None
    r["backend_server"] = server
    r["backend_cpu_us_per_op"] = per_op(cpu.get(server)) if server else None
    if "node_calls" in after:
        derive_redlock(run, r, cpu, before, after, ops, ops_total, pairs, daemons_delta)
    if "master_calls" in after:
        derive_cluster(r, cpu, before, after, ops, ops_total, pairs, daemons_delta)
    if "replica" in cpu:
        r["replica_cpu_us_per_op"] = per_op(cpu["replica"])
    if "redis_calls" in after:
        calls = {k: after["redis_calls"].get(k, 0) - before["redis_calls"].get(k, 0)
                 for k in after["redis_calls"] if k != "info"}
        r["redis_calls"] = {k: v for k, v in calls.items() if v}
        r["backend_all_per_op"] = per_op(sum(calls.values()), ops_total)
        r["redis_used_cpu_us_per_op_run"] = per_op(after["redis_cpu_us"] - before["redis_cpu_us"],
                                                   ops_total)
        if run.daemons:
            sent = daemons_delta("backend_commands_total")
        else:
            sent = calls.get("set", 0) + calls.get("evalsha", 0)
        r["backend_sent_per_op"] = None if pairs else per_op(sent, ops_total)
        if pairs:
            r["backend_all_per_op"] = None
    if "etcd_msgs" in after:
        if run.daemons:
            sent = daemons_delta("backend_requests_total")
        else:
            # direct-etcd: its Txns (the leases' calls are not the recipe's)
            sent = after["etcd_txns"] - before["etcd_txns"]
        r["backend_sent_per_op"] = per_op(sent, ops_total)
        r["backend_all_per_op"] = per_op(after["etcd_msgs"] - before["etcd_msgs"], ops_total)
        r["etcd_txn_per_op"] = per_op(after["etcd_txns"] - before["etcd_txns"], ops_total)
    if run.daemons and not pairs:
        r["daemon_grants"] = daemons_delta("grants_total")
        r["daemon_handoffs_per_op"] = per_op(daemons_delta("handoffs_total"), ops_total)
    return r


def derive_redlock(run, r, cpu, before, after, ops, ops_total, pairs, daemons_delta):
    """The figures of a redlock run, summed over its nodes: their CPU in the
    window (backend_cpu_us_per_op, and each node's), the commands they
    executed over the run (INFO commandstats, scripts' commands included:
    backend_all_per_op, and each node's), the EVALSHA calls (one per script
    call: the round trips), and the calls the daemons sent to the nodes
    (INFO backend_node<i>_calls_total; backend_commands_total as well)."""
    def per_op(v, n):
        return v / n if v is not None and n > 0 else None

    n = run.nodes
    node_cpu = [cpu.get("node%d" % i) for i in range(n)]
    r["backend_server"] = "redis x%d" % n
    r["backend_cpu_us_per_op"] = per_op(sum(node_cpu), ops) if None not in node_cpu else None
    r["node_cpu_us_per_op"] = [per_op(v, ops) for v in node_cpu]
    total, per_node, evalsha = {}, [], 0
    for b, a in zip(before["node_calls"], after["node_calls"]):
        calls = {k: a.get(k, 0) - b.get(k, 0) for k in a if k != "info"}
        per_node.append(sum(calls.values()))
        evalsha += calls.get("evalsha", 0)
        for k, v in calls.items():
            if v:
                total[k] = total.get(k, 0) + v
    r["redis_calls"] = total
    r["node_commands_per_op"] = [per_op(v, ops_total) for v in per_node]
    r["backend_all_per_op"] = None if pairs else per_op(sum(per_node), ops_total)
    r["evalsha_per_op"] = None if pairs else per_op(evalsha, ops_total)
    r["redis_used_cpu_us_per_op_run"] = per_op(
        sum(a - b for a, b in zip(after["node_cpu_us"], before["node_cpu_us"])), ops_total)
    # what the daemons sent: each node's calls if the daemon counts them,
    # else its backend_commands_total
    fields = ["backend_node%d_calls_total" % i for i in range(n)]
    if all(f in after["daemons"][0] for f in fields):
        sent = sum(daemons_delta(f) for f in fields)
        r["backend_sent_counter"] = "backend_node<i>_calls_total"
    else:
        sent = daemons_delta("backend_commands_total")
        r["backend_sent_counter"] = "backend_commands_total"
    r["backend_sent_per_op"] = None if pairs else per_op(sent, ops_total)
    r["backend_commands_per_op"] = per_op(daemons_delta("backend_commands_total"), ops_total)
    r["node_failures"] = sum(daemons_delta("backend_node%d_failures_total" % i)
                             for i in range(n))


RUNNER_COMMANDS = ("info", "role")   # what the runner itself sends to a master


def derive_cluster(r, cpu, before, after, ops, ops_total, pairs, daemons_delta):
    """The figures of a redis-cluster run, summed over the masters: their
    CPU in the window (backend_cpu_us_per_op, and each master's; the
    replicas' summed apart), the commands they executed over the run (INFO
    commandstats, scripts' commands included, the runner's INFO and ROLE
    left out: backend_all_per_op, and each master's), the EVALSHA calls
    (one per script call: the round trips), each master's share of them,
    and the calls the daemons sent (INFO backend_master<i>_calls_total;
    backend_commands_total as well)."""
    def per_op(v, n):
        return v / n if v is not None and n > 0 else None

    n = len(after["master_calls"])
    master_cpu = [cpu.get("master%d" % i) for i in range(n)]
    replica_cpu = [v for k, v in sorted(cpu.items()) if k.startswith("replica")]
    r["backend_server"] = "redis-cluster x%d" % n
    r["backend_cpu_us_per_op"] = per_op(sum(master_cpu), ops) if None not in master_cpu \
        else None
    r["master_cpu_us_per_op"] = [per_op(v, ops) for v in master_cpu]
    r["replica_cpu_us_per_op"] = per_op(sum(replica_cpu), ops) \
        if replica_cpu and None not in replica_cpu else None
    total, per_master, evalsha = {}, [], []
    for b, a in zip(before["master_calls"], after["master_calls"]):
        calls = {k: a.get(k, 0) - b.get(k, 0) for k in a if k not in RUNNER_COMMANDS}
        per_master.append(sum(calls.values()))
        evalsha.append(calls.get("evalsha", 0))
        for k, v in calls.items():
            if v:
                total[k] = total.get(k, 0) + v
    r["redis_calls"] = total
    r["master_commands"] = per_master
    r["master_evalsha"] = evalsha
    r["master_evalsha_share"] = [v / sum(evalsha) for v in evalsha] if sum(evalsha) else None
    r["master_commands_per_op"] = [per_op(v, ops_total) for v in per_master]
    r["backend_all_per_op"] = None if pairs else per_op(sum(per_master), ops_total)
    r["evalsha_per_op"] = None if pairs else per_op(sum(evalsha), ops_total)
    r["redis_used_cpu_us_per_op_run"] = per_op(
        sum(a - b for a, b in zip(after["master_cpu_us"], before["master_cpu_us"])), ops_total)
    fields = ["backend_master%d_calls_total" % i for i in range(n)]
    if all(f in after["daemons"][0] for f in fields):
        r["master_sent"] = [daemons_delta(f) for f in fields]
        sent = sum(r["master_sent"])
        r["backend_sent_counter"] = "backend_master<i>_calls_total"
    else:
        sent = daemons_delta("backend_commands_total")
        r["backend_sent_counter"] = "backend_commands_total"
    r["backend_sent_per_op"] = None if pairs else per_op(sent, ops_total)
    r["backend_commands_per_op"] = per_op(daemons_delta("backend_commands_total"), ops_total)
    r["cluster_redirects"] = sum(daemons_delta("backend_cluster_%s_total" % k)
                                 for k in ("moved", "ask", "tryagain"))
    if after["master_roles"] != ["master"] * n:
        r["error"] = ("a master of the cluster is one no longer after the run (ROLE: %s): "
                      "a failover" % ", ".join(after["master_roles"]))


def measure(run, index, args, servers, daemons, rec):
    """Run dlock-bench once against the daemons; its figures go into rec."""
    before = sample(run, servers, daemons)
    argv = tool_argv(run, index, args.window, args.warmup, daemons, servers)
    tool = run_tool(argv, (args.window + args.warmup) / 1000.0 + 30)
    why = settle(daemons)
    if why:
        rec["settle"] = why
    after = sample(run, servers, daemons)
    rss = [vm_hwm_kib(d.pid) for d in daemons]
    rec["daemon_peak_rss_kib"] = max(rss) if rss and None not in rss else None
    rec["tool"] = {k: v for k, v in tool.items() if k != "hist"}
    rec["wait_hist"] = coarse_hist(tool.get("hist", []))
    rec.update(derive(run, tool, before, after))
    if run.cluster():
        store = servers.procs["redis-cluster"]
        rec["master_slots"] = [store.slot_master.count(i) for i in range(len(store.masters))]
        if run.workload == "hot":
            rec["master_pick_share"] = store.pick_shares(key_prefix(index), run.keys,
                                                         HOT["zipf"])


def measure_idle(run, index, args, servers, daemon, rec):
    """The idle10k run's second half: IDLE sessions (each has sent a PING)
    are opened to the daemon, held while dlock-bench runs as before, then
    closed. rec gets the daemon's VmRSS before and with them."""
    rec["idle_sessions"] = IDLE
    rec["rss_before_idle_kib"] = vm_rss_kib(daemon.pid)
    idle = open_sessions(daemon.port, IDLE)
    try:
        rec["rss_with_idle_kib"] = vm_rss_kib(daemon.pid)
        rec["rss_per_idle_kib"] = (rec["rss_with_idle_kib"] - rec["rss_before_idle_kib"]) / IDLE
        measure(run, index, args, servers, [daemon], rec)
    finally:
        close_hard(idle)


def execute(run, index, args, servers, refused=None):
    """Run one benchmark; a list of dicts for results.json (with "skipped"
    or "error" when it could not run): one, or for idle10k two (the
    baseline, then beside the idle sessions, ids ending in -base and -idle).
    refused: why `dlockd -t` refuses the run's configuration, an error."""
    rec = {"id": run.id, "system": run.system, "workload": run.workload,
           "clients": run.clients, "hold_us": run.hold_us, "keys": run.keys,
           "daemons": run.daemons, "backend": run.backend}
    recs = [rec]
    if refused:
        rec["error"] = "dlockd -t refuses its configuration: %s" % refused
        return recs
    for name in sorted(run.needs()):
        if servers.get(name) is None:
            rec["skipped"] = "%s could not be started: %s" % (name, servers.failed[name])
            return recs
    daemons = []
    try:
        if run.cluster():
            servers.procs["redis-cluster"].check()
        daemons = start_daemons(run, servers)
        if run.workload == "idle10k":
            rec["id"] = run.id + "-base"
            recs.append(dict(rec, id=run.id + "-idle"))
        measure(run, index, args, servers, daemons, rec)
        if len(recs) > 1:
            rec = recs[1]
            measure_idle(run, index, args, servers, daemons[0], rec)
    except (AssertionError, OSError, ValueError, KeyError) as e:
        rec["error"] = str(e).strip()[:2000]
    finally:
        for d in daemons:
            try:
                rc = d.stop()
                if rc not in (0, None) and "error" not in rec:
                    rec["error"] = "dlockd exited with %s: %s" % (rc, d.log(1000))
            except AssertionError as e:
                rec.setdefault("error", str(e))
    return [r for r in recs if r is rec or "rate" in r or "error" in r]


def check_settings(systems):
    """`dlockd -t` on the configuration of each of systems (VARIANTS), with
    a -b URL of its kind. {system: (verdict, dlockd's output)} for those it
    refuses: verdict "left out" when all it says matches the system's
    "unknown" pattern (its pending key or backend is unknown), else "error".    key is unknown, else "error"."""
    out = {}
    d = new_dir("conf-check")
    for system in systems:
        v = VARIANTS[system]
        conf = os.path.join(d, system + ".yaml")
        with open(conf, "w") as f:
            f.write("backend:\n" + yaml_map(v["settings"], 2) if v["settings"] else "")
        if v["store"] == "redlock":
            url = "redlock://" + ",".join("127.0.0.1:%d" % (6379 + i) for i in range(v["nodes"]))
        elif v["store"] == "redis-cluster":
            url = "redis-cluster://" + ",".join("127.0.0.1:%d" % (7000 + i)
                                                for i in range(CLUSTER_MASTERS))
        else:
            url = "%s://127.0.0.1:6379" % ("rediss" if v["store"] == "redis-tls" else "redis")
        try:
            p = subprocess.run([DLOCKD, "-t", "-c", conf, "-b", url],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            out[system] = ("error", "dlockd -t: %s" % e)
            continue
        if p.returncode == 0:
            continue
        text = p.stdout.decode(errors="replace").strip().replace(conf, system + ".yaml")
        lines = text.splitlines() or ["exit status %d" % p.returncode]
        unknown = v.get("unknown") and all(re.search(v["unknown"], l) for l in lines)
        out[system] = ("left out" if unknown else "error", "; ".join(lines))
    return out


# ---- formatting ----

def fmt_rate(v):
    return "–" if v is None else "{:,.0f}".format(v)


def fmt_us(v):
    """A duration given in µs, in µs, ms or s."""
    if v is None:
        return "–"
    if v < 1000:
        return "%.0f µs" % v
    if v < 1e6:
        return ("%.2f ms" if v < 1e4 else "%.1f ms") % (v / 1e3)
    return "%.2f s" % (v / 1e6)


def fmt_num(v, digits=1):
    return "–" if v is None else "%.*f" % (digits, v)


def case_text(rec):
    w = rec["workload"]
    if w == "uncontended":
        return "uncontended, C=%d" % rec["clients"]
    if w == "idle10k":
        return "uncontended, C=%d%s" % (rec["clients"], ", + {:,} idle sessions".format(
            rec["idle_sessions"]) if "idle_sessions" in rec else ", baseline of idle10k")
    if w == "ping":
        return "PING, C=%d" % rec["clients"]
    if w == "contended":
        return "contended, N=%d, hold %s" % (rec["clients"], fmt_hold(rec["hold_us"]))
    if w == "hot":
        return "hot, %d clients, %d keys, hold %s" % (rec["clients"], rec["keys"],
                                                     fmt_hold(rec["hold_us"]))
    if w == "multi-daemon":
        return "multi-daemon, 2×%d clients, hold %s" % (rec["clients"] // 2,
                                                       fmt_hold(rec["hold_us"]))
    if w == "hold":
        return "hold %s, 1 client" % fmt_hold(rec["hold_us"])
    return w


def fmt_hold(us):
    if us == 0:
        return "0"
    return "%g ms" % (us / 1000.0)


def ok(rec):
    return rec is not None and "skipped" not in rec and "error" not in rec


def figure(rec, path):
    """rec's figure at path: a field, or fields joined by dots (wait_us.p99)."""
    v = rec
    for k in path.split("."):
        v = v.get(k) if isinstance(v, dict) else None
    return v


def idle_summary(by_id):
    """The idle10k run's figures side by side, or None if it did not run."""
    base = by_id.get("memory/idle10k/c%d-base" % GOAL_C)
    idle = by_id.get("memory/idle10k/c%d-idle" % GOAL_C)
    if not ok(base) or not ok(idle):
        return None
    b, i = base["wait_us"], idle["wait_us"]
    return {"idle_sessions": IDLE, "clients": GOAL_C,
            "p50_base_us": b["p50"], "p99_base_us": b["p99"], "rate_base": base["rate"],
            "p50_idle_us": i["p50"], "p99_idle_us": i["p99"], "rate_idle": idle["rate"],
            "p99_ratio": i["p99"] / b["p99"] if b["p99"] else None,
            "rss_before_idle_kib": idle["rss_before_idle_kib"],
            "rss_with_idle_kib": idle["rss_with_idle_kib"],
            "rss_per_idle_kib": idle["rss_per_idle_kib"]}


def goals(by_id):
    """The rows of the goals table: (goal, measured on, this run, ratio,
    target, met), from the figures of this run."""
    rows = []

    def ratio(goal, on, a, b, target, unit, fmt):
        """a and b are (run id, figure); the ratio a / b against target,
        "≥ x" or "≤ x"."""
        ra, rb = by_id.get(a[0]), by_id.get(b[0])
        va = figure(ra, a[1]) if ok(ra) else None
        vb = figure(rb, b[1]) if ok(rb) else None
        if va is None or not vb:
            rows.append((goal, on, "not measured", "–", target, "–"))
            return
        r = va / vb
        bound = float(target.split()[1])
        met = r >= bound if target.startswith("≥") else r <= bound
        rows.append((goal, on, "%s / %s %s" % (fmt(va), fmt(vb), unit), "%.2f" % r, target,
                     "yes" if met else "**no**"))

    def at_most(goal, on, run_id, path, bound, unit, fmt):
        """run_id's figure at path against an absolute bound (≤)."""
        rec = by_id.get(run_id)
        v = figure(rec, path) if ok(rec) else None
        target = "≤ %g %s" % (bound, unit)
        if v is None:
            rows.append((goal, on, "not measured", "–", target, "–"))
            return
        rows.append((goal, on, "%s %s" % (fmt(v), unit), "–", target,
                     "yes" if v <= bound else "**no**"))

    def cpu(v):
        return "%.1f" % v

    c = GOAL_C
    mem, ping = "memory/uncontended/c%d" % c, "ping-redis/ping/c%d" % c
    red, direct = "redis/uncontended/c%d" % c, "direct/uncontended/c%d" % c
    ratio("memory uncontended LOCK+UNLOCK pairs/s ≥ 0.9 × redis PING pairs/s",
          "C=%d (a PING pair: two PINGs)" % c, (mem, "rate"), (ping, "rate"), "≥ 0.9", "/s",
          fmt_rate)
    ratio("daemon CPU per memory pair ≤ 1.1 × redis-server's CPU per PING pair", "C=%d" % c,
          (mem, "daemon_cpu_us_per_op"), (ping, "backend_cpu_us_per_op"), "≤ 1.1", "µs", cpu)
    ratio("redis uncontended pairs/s ≥ 0.8 × direct", "C=%d" % c, (red, "rate"),
          (direct, "rate"), "≥ 0.8", "/s", fmt_rate)
    ratio("Redis CPU per uncontended pair ≤ 1.2 × direct's", "C=%d" % c,
          (red, "backend_cpu_us_per_op"), (direct, "backend_cpu_us_per_op"), "≤ 1.2", "µs", cpu)
    cached = "redis-cache/uncontended/c%d" % c
    ratio("(the same two with lease_cache_ms: %d) pairs/s" % CACHE_MS, "C=%d" % c,
          (cached, "rate"), (direct, "rate"), "≥ 0.8", "/s", fmt_rate)
    ratio("(the same two with lease_cache_ms: %d) Redis CPU" % CACHE_MS, "C=%d" % c,
          (cached, "backend_cpu_us_per_op"), (direct, "backend_cpu_us_per_op"), "≤ 1.2", "µs",
          cpu)
    ratio("redis contended ≥ 0.8 × memory backend's acquisitions/s",
          "16 clients, 1 key, hold 0", ("redis/contended/n16-h0", "rate"),
          ("memory/contended/n16-h0", "rate"), "≥ 0.8", "/s", fmt_rate)
    ratio("Redis CPU per contended acquisition ≤ 0.2 × direct-poll's",
          "16 clients, 1 key, hold 0", ("redis/contended/n16-h0", "backend_cpu_us_per_op"),
          ("direct-poll/contended/n16-h0", "backend_cpu_us_per_op"), "≤ 0.2", "µs", cpu)
    ratio("(the same, where waiters poll)", "64 clients, 1 key, hold 1 ms",
          ("redis/contended/n64-h1000", "backend_cpu_us_per_op"),
          ("direct-poll/contended/n64-h1000", "backend_cpu_us_per_op"), "≤ 0.2", "µs", cpu)
    ratio("redlock-3 contended ≥ 0.8 × redis contended acquisitions/s",
          "16 clients, 1 key, hold 0", ("redlock-3/contended/n16-h0", "rate"),
          ("redis/contended/n16-h0", "rate"), "≥ 0.8", "/s", fmt_rate)
    ratio("redlock-3 uncontended pairs/s ≥ 0.5 × redis", "C=%d" % c,
          ("redlock-3/uncontended/c%d" % c, "rate"), (red, "rate"), "≥ 0.5", "/s", fmt_rate)
    cluster_goals(by_id, rows, ratio)
    etcd_goals(by_id, rows, ratio, at_most, cpu)
    idle = "memory/idle10k/c%d" % c
    ratio("p99 wait with {:,} idle sessions ≤ 2 × without".format(IDLE),
          "memory, uncontended, C=%d, one daemon" % c, (idle + "-idle", "wait_us.p99"),
          (idle + "-base", "wait_us.p99"), "≤ 2", "(p99)", fmt_us)
    for b in BACKENDS:
        recs = [by_id.get("%s/contended/n%d-h%d" % (b, n, h)) for n in CONTENDED_N
                for h in CONTENDED_H]
        recs = [r for r in recs if ok(r) and r.get("jain_clients") is not None]
        goal = "%s contended: Jain over clients stays 1.0" % b
        if not recs:
            rows.append((goal, "every contended run", "not measured", "–", "≥ 0.99", "–"))
            continue
        worst = min(recs, key=lambda r: r["jain_clients"])
        r16 = by_id.get("%s/contended/n16-h0" % b)
        p99 = fmt_us(r16["wait_us"]["p99"]) if ok(r16) else "–"
        rows.append((goal, "the lowest of %d contended runs (%s)" % (len(recs), case_text(worst)),
                     "Jain %.4f; p99 wait at N=16, hold 0: %s" % (worst["jain_clients"], p99),
                     "%.3f" % worst["jain_clients"], "≥ 0.99",
                     "yes" if worst["jain_clients"] >= 0.99 else "**no**"))
    return rows


def cluster_goals(by_id, rows, ratio):
    """The redis-cluster backend's goals: as fast as the redis backend
    uncontended, and the hot workload's calls spread over every master."""
    c = GOAL_C
    ratio("redis-cluster uncontended pairs/s ≥ 0.9 × redis", "C=%d" % c,
          ("redis-cluster/uncontended/c%d" % c, "rate"), ("redis/uncontended/c%d" % c, "rate"),
          "≥ 0.9", "/s", fmt_rate)
    lo, hi = CLUSTER_SHARE
    goal = ("redis-cluster hot: each master's share of the EVALSHA calls within %g–%g"
            % (lo, hi))
    on = "hot, %d clients, %d keys, hold %s (%d masters)" % (
        HOT["clients"], HOT["keys"], fmt_hold(HOT["hold_us"]), CLUSTER_MASTERS)
    target = "%g – %g" % (lo, hi)
    rec = by_id.get("redis-cluster/hot/n%d" % HOT["clients"])
    share = rec.get("master_evalsha_share") if ok(rec) else None
    if not share:
        rows.append((goal, on, "not measured", "–", target, "–"))
        return
    picks = rec.get("master_pick_share")
    text = " / ".join("%.0f %%" % (100 * v) for v in share) + " of {:,}".format(
        sum(rec["master_evalsha"]))
    if picks:
        text += " (key picks: %s)" % " / ".join("%.0f %%" % (100 * v) for v in picks)
    met = len(share) == CLUSTER_MASTERS and lo <= min(share) and max(share) <= hi
    rows.append((goal, on, text, "%.2f–%.2f" % (min(share), max(share)), target,
                 "yes" if met else "**no**"))


def etcd_goals(by_id, rows, ratio, at_most, cpu):
    """The etcd backend's goals, against direct-etcd (the same recipe sent
    to etcd by the tool, no daemon) and the hold-time limit."""
    for c in DIRECT_ETCD_C:
        ratio("etcd uncontended pairs/s ≥ 0.8 × direct-etcd", "C=%d" % c,
              ("etcd/uncontended/c%d" % c, "rate"), ("direct-etcd/uncontended/c%d" % c, "rate"),
              "≥ 0.8", "/s", fmt_rate)
    c = GOAL_C
    ratio("etcd CPU per uncontended pair ≤ 1.2 × direct-etcd's", "C=%d" % c,
          ("etcd/uncontended/c%d" % c, "backend_cpu_us_per_op"),
          ("direct-etcd/uncontended/c%d" % c, "backend_cpu_us_per_op"), "≤ 1.2", "µs", cpu)
    recs = [by_id.get("etcd/uncontended/c%d" % n) for n in UNCONTENDED_C if n > 1]
    recs = [r for r in recs if ok(r) and r.get("jain_clients") is not None]
    goal = "etcd uncontended: Jain over clients ≥ 0.99"
    if not recs:
        rows.append((goal, "every uncontended run, C > 1", "not measured", "–", "≥ 0.99", "–"))
    else:
        worst = min(recs, key=lambda r: r["jain_clients"])
        rows.append((goal, "the lowest of %d uncontended runs, C > 1 (C=%d)"
                     % (len(recs), worst["clients"]),
                     "Jain %.4f" % worst["jain_clients"], "%.3f" % worst["jain_clients"],
                     "≥ 0.99", "yes" if worst["jain_clients"] >= 0.99 else "**no**"))
    at_most("dlockd CPU per etcd acquisition ≤ 50 µs", "etcd, uncontended, C=%d" % c,
            "etcd/uncontended/c%d" % c, "daemon_cpu_us_per_op", 50, "µs", cpu)
    ratio("etcd contended ≥ 0.6 × the hold-time limit", "16 clients, 1 key, hold 1 ms",
          ("etcd/contended/n16-h1000", "rate"), ("hold/hold/h1000", "rate"), "≥ 0.6", "/s",
          fmt_rate)


COMPARED = ("redis-tls", "redis-ack1")   # set beside redis and direct


def comparisons(by_id):
    """The figures of redis-tls and redis-ack1 beside redis's and direct's
    on the same cases: [{figure, case, direct, redis, redis-tls,
    redis-ack1}] (None where not measured), or [] when neither ran."""
    if not any(r["system"] in COMPARED for r in by_id.values()):
        return []
    cases = [("acquisitions/s", "uncontended, C=%d" % c, "uncontended/c%d" % c, "rate")
             for c in UNCONTENDED_C]
    cases += [("acquisitions/s", "contended, N=%d, hold %s" % (n, fmt_hold(h)),
               "contended/n%d-h%d" % (n, h), "rate") for n in CONTENDED_N for h in CONTENDED_H]
    cases += [("acquisitions/s", "hot, %d clients, %d keys" % (HOT["clients"], HOT["keys"]),
               "hot/n%d" % HOT["clients"], "rate"),
              ("acquisitions/s", "multi-daemon, 2×%d clients" % (MULTI["clients"] // 2),
               "multi-daemon/n%d" % MULTI["clients"], "rate"),
              ("round trip: wait p50", "uncontended, C=1", "uncontended/c1", "wait_us.p50"),
              ("wait p99", "uncontended, C=%d" % GOAL_C, "uncontended/c%d" % GOAL_C,
               "wait_us.p99"),
              ("dlockd CPU µs/acq", "uncontended, C=%d" % GOAL_C,
               "uncontended/c%d" % GOAL_C, "daemon_cpu_us_per_op"),
              ("Redis CPU µs/acq", "uncontended, C=%d" % GOAL_C,
               "uncontended/c%d" % GOAL_C, "backend_cpu_us_per_op")]
    rows = []
    for what, case, suffix, field in cases:
        row = {"figure": what, "case": case}
        for sysname in ("direct", "redis") + COMPARED:
            r = by_id.get("%s/%s" % (sysname, suffix))
            row[sysname] = figure(r, field) if ok(r) else None
        if all(row[x] is None for x in COMPARED):
            continue
        rows.append(row)
    return rows


def comparison_lines(rows, left_out):
    """The section of results.md on redis-tls and redis-ack1."""
    def fmt(what, v):
        if v is None:
            return "–"
        if what.startswith("acquisitions"):
            return fmt_rate(v)
        if "CPU" in what:
            return fmt_num(v)
        return fmt_us(v)

    def ratio(a, b):
        return "%.2f" % (a / b) if a is not None and b else "–"

    lines = ["## The redis backend over TLS, and with a replica's acknowledgement", "",
             "redis-tls: the redis backend over TLS (rediss://, the server's certificate "
             "verified against the run's CA) to a redis-server serving TLS only. "
             "redis-ack1: the redis backend with `backend.min_replicas_ack: %d` against a "
             "redis-server with one replica on loopback. Ratios are this run's figures "
             "divided: above 1 is more acquisitions/s, or a longer wait, or more CPU."
             % ACK_REPLICAS, ""]
    if left_out:
        lines.append("Left out (see above): %s." % ", ".join(sorted(left_out)))
        lines.append("")
    lines.append("| figure | case | direct | redis | redis-tls | tls / redis | tls / direct "
                 "| redis-ack1 | ack1 / redis |")
    lines.append("|---|---|--:|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        w = r["figure"]
        lines.append("| " + " | ".join([
            w, r["case"], fmt(w, r["direct"]), fmt(w, r["redis"]), fmt(w, r["redis-tls"]),
            ratio(r["redis-tls"], r["redis"]), ratio(r["redis-tls"], r["direct"]),
            fmt(w, r["redis-ack1"]), ratio(r["redis-ack1"], r["redis"])]) + " |")
    lines.append("")
    return lines


def redlock_comparison(by_id):
    """The redlock systems beside redis on the cases they share:
    [{figure, case, redis, redlock-3, redlock-5}] (None where not
    measured), or [] when no redlock system ran. Round trips: the EVALSHA
    calls the nodes executed per acquisition (one per script call, summed
    over the nodes), the calls the daemon sent, and every command the nodes
    executed (INFO commandstats, scripts' commands included); node CPU:
    summed over the nodes."""
    if not any(r["system"] in REDLOCK_SYSTEMS for r in by_id.values()):
        return []
    cases = [("acquisitions/s", "uncontended, C=%d" % c, "uncontended/c%d" % c, "rate")
             for c in UNCONTENDED_C]
    cases += [("acquisitions/s", "contended, N=%d, hold %s" % (n, fmt_hold(h)),
               "contended/n%d-h%d" % (n, h), "rate") for n in CONTENDED_N for h in CONTENDED_H]
    cases += [("acquisitions/s", "hot, %d clients, %d keys" % (HOT["clients"], HOT["keys"]),
               "hot/n%d" % HOT["clients"], "rate"),
              ("acquisitions/s", "multi-daemon, 2×%d clients" % (MULTI["clients"] // 2),
               "multi-daemon/n%d" % MULTI["clients"], "rate"),
              ("round trip: wait p50", "uncontended, C=1", "uncontended/c1", "wait_us.p50")]
    for label, suffix in (("uncontended, C=%d" % GOAL_C, "uncontended/c%d" % GOAL_C),
                          ("contended, N=16, hold 0", "contended/n16-h0")):
        cases += [("EVALSHA calls/acq (round trips, Σ nodes)", label, suffix, "evalsha_per_op"),
                  ("calls sent/acq", label, suffix, "backend_sent_per_op"),
                  ("commands executed/acq (Σ nodes)", label, suffix, "backend_all_per_op"),
                  ("Redis CPU µs/acq (Σ nodes)", label, suffix, "backend_cpu_us_per_op"),
                  ("dlockd CPU µs/acq", label, suffix, "daemon_cpu_us_per_op")]
    rows = []
    for what, case, suffix, field in cases:
        row = {"figure": what, "case": case}
        for sysname in ("redis",) + REDLOCK_SYSTEMS:
            r = by_id.get("%s/%s" % (sysname, suffix))
            v = figure(r, field) if ok(r) else None
            if v is None and sysname == "redis" and field == "evalsha_per_op" and ok(r):
                v = (r.get("redis_calls") or {}).get("evalsha", 0) / max(
                    r["tool"]["ops_total"], 1)
            row[sysname] = v
        if all(row[x] is None for x in REDLOCK_SYSTEMS):
            continue
        rows.append(row)
    return rows


def section_fmt(what, v):
    """A cell of the redlock and redis-cluster sections: a rate, a CPU
    figure, a count per acquisition or a time, by what its row measures."""
    if v is None:
        return "–"
    if what.startswith("acquisitions"):
        return fmt_rate(v)
    if "CPU" in what:
        return fmt_num(v)
    if "/acq" in what:
        return fmt_num(v, 2)
    return fmt_us(v)


def section_ratio(a, b):
    """a / b for a table, "–" when either is missing."""
    return "%.2f" % (a / b) if a is not None and b else "–"


def redlock_lines(rows, left_out):
    """The section of results.md on the redlock backend."""
    fmt, ratio = section_fmt, section_ratio

    lines = ["## The redlock backend", "",
             "redlock-3 and redlock-5: `-b redlock://` on 3 and on 5 independent redis-servers "
             "of their own (a lock is granted once a majority of them granted it). Round "
             "trips: EVALSHA calls the nodes executed per acquisition (one per script call), "
             "summed over the nodes; calls sent: what the daemon counts it sent to the nodes "
             "(INFO `backend_node<i>_calls_total`, summed; for redis `backend_commands_total`); "
             "commands executed: every node's INFO commandstats, the commands scripts run "
             "included, summed. Node CPU: summed over the nodes, in the measuring window. "
             "Ratios: this run's redlock figure divided by redis's.", ""]
    gone = sorted(s for s in left_out if s in REDLOCK_SYSTEMS)
    if gone:
        lines.append("Left out (see above): %s." % ", ".join(gone))
        lines.append("")
    lines.append("| figure | case | redis | redlock-3 | redlock-3 / redis | redlock-5 "
                 "| redlock-5 / redis |")
    lines.append("|---|---|--:|--:|--:|--:|--:|")
    for r in rows:
        w = r["figure"]
        lines.append("| " + " | ".join([
            w, r["case"], fmt(w, r["redis"]), fmt(w, r["redlock-3"]),
            ratio(r["redlock-3"], r["redis"]), fmt(w, r["redlock-5"]),
            ratio(r["redlock-5"], r["redis"])]) + " |")
    lines.append("")
    return lines


CLUSTER_MASTER_CASES = [("uncontended, C=%d" % GOAL_C, "uncontended/c%d" % GOAL_C),
                        ("hot, %d clients, %d keys" % (HOT["clients"], HOT["keys"]),
                         "hot/n%d" % HOT["clients"])]


def cluster_comparison(by_id):
    """The redis-cluster system beside redis on the cases they share:
    {"rows": [{figure, case, redis, redis-cluster}], "masters": [{case,
    master, slots, evalsha, share, pick_share, sent, commands_per_op,
    cpu_us_per_op}]} (None where not measured), or None when it did not
    run. Round trips: the EVALSHA calls the masters executed per
    acquisition (one per script call, summed over the masters); CPU: summed
    over the masters, the replicas' apart; machine CPU: the busy time of
    every core in the window per acquisition."""
    if not any(r["system"] in CLUSTER_SYSTEMS for r in by_id.values()):
        return None
    cases = [("acquisitions/s", "uncontended, C=%d" % c, "uncontended/c%d" % c, "rate")
             for c in UNCONTENDED_C]
    cases += [("acquisitions/s", "contended, N=%d, hold %s" % (n, fmt_hold(h)),
               "contended/n%d-h%d" % (n, h), "rate") for n in CONTENDED_N for h in CONTENDED_H]
    cases += [("acquisitions/s", "hot, %d clients, %d keys" % (HOT["clients"], HOT["keys"]),
               "hot/n%d" % HOT["clients"], "rate"),
              ("acquisitions/s", "multi-daemon, 2×%d clients" % (MULTI["clients"] // 2),
               "multi-daemon/n%d" % MULTI["clients"], "rate"),
              ("round trip: wait p50", "uncontended, C=1", "uncontended/c1", "wait_us.p50")]
    for label, suffix in ([("uncontended, C=%d" % c, "uncontended/c%d" % c) for c in (16, GOAL_C)]
                          + [("contended, N=16, hold 0", "contended/n16-h0"),
                             ("hot, %d clients, %d keys" % (HOT["clients"], HOT["keys"]),
                              "hot/n%d" % HOT["clients"])]):
        cases += [("wait p99", label, suffix, "wait_us.p99"),
                  ("EVALSHA calls/acq (round trips, Σ masters)", label, suffix,
                   "evalsha_per_op"),
                  ("calls sent/acq", label, suffix, "backend_sent_per_op"),
                  ("commands executed/acq (Σ masters)", label, suffix, "backend_all_per_op"),
                  ("Redis CPU µs/acq (Σ masters)", label, suffix, "backend_cpu_us_per_op"),
                  ("replicas' CPU µs/acq (Σ)", label, suffix, "replica_cpu_us_per_op"),
                  ("dlockd CPU µs/acq", label, suffix, "daemon_cpu_us_per_op"),
                  ("machine CPU µs/acq (every process)", label, suffix, "machine")]
    rows = []
    for what, case, suffix, field in cases:
        row = {"figure": what, "case": case}
        for sysname in ("redis",) + CLUSTER_SYSTEMS:
            r = by_id.get("%s/%s" % (sysname, suffix))
            v = figure(r, field) if ok(r) else None
            if field == "machine" and ok(r):
                # the machine's busy time in the window (every core, the
                # tool and other work included) per acquisition: what
                # bounds the rate once the cores are full
                t = r["tool"]
                v = t["machine_busy_us"] / t["ops"] if t.get("machine_busy_us") is not None \
                    and t["ops"] else None
            if v is None and sysname == "redis" and field == "evalsha_per_op" and ok(r):
                v = (r.get("redis_calls") or {}).get("evalsha", 0) / max(
                    r["tool"]["ops_total"], 1)
            row[sysname] = v
        if all(row[x] is None for x in CLUSTER_SYSTEMS):
            continue
        rows.append(row)
    masters = []
    for case, suffix in CLUSTER_MASTER_CASES:
        for sysname in CLUSTER_SYSTEMS:
            r = by_id.get("%s/%s" % (sysname, suffix))
            if not ok(r) or not r.get("master_evalsha"):
                continue
            for i, calls in enumerate(r["master_evalsha"]):
                def nth(field):
                    v = r.get(field)
                    return v[i] if v and i < len(v) else None
                masters.append({"case": case, "master": i, "slots": nth("master_slots"),
                                "evalsha": calls, "share": nth("master_evalsha_share"),
                                "pick_share": nth("master_pick_share"),
                                "sent": nth("master_sent"),
                                "commands_per_op": nth("master_commands_per_op"),
                                "cpu_us_per_op": nth("master_cpu_us_per_op")})
    return {"rows": rows, "masters": masters}


def cluster_lines(doc, left_out):
    """The section of results.md on the redis-cluster backend."""
    fmt, ratio = section_fmt, section_ratio

    def pct(v):
        return "–" if v is None else "%.1f %%" % (100 * v)

    lines = ["## The redis-cluster backend", "",
             "redis-cluster: `-b redis-cluster://` (the seeds: the %d masters) on a Redis "
             "Cluster of %d masters with %d replica%s each, all on this machine "
             "(cluster-node-timeout %d ms). Each lock's keys carry one hash tag, so each "
             "operation is one call to its slot's master. Round trips: EVALSHA calls the "
             "masters executed per acquisition, summed; calls sent: what the daemon counts "
             "it sent (INFO `backend_master<i>_calls_total`, summed; for redis "
             "`backend_commands_total`); commands executed: every master's INFO "
             "commandstats, the commands scripts run included, the runner's INFO and ROLE "
             "left out, summed. Redis CPU: summed over the masters, in the measuring "
             "window; the replicas' apart. Machine CPU: the busy time of every core in the "
             "window (the tool's, the servers' and other work's included) per acquisition; "
             "once the cores are full it is what bounds the rate, and every server of the "
             "cluster runs on them here. Ratios: this run's redis-cluster figure divided "
             "by redis's." % (CLUSTER_MASTERS, CLUSTER_MASTERS, CLUSTER_REPLICAS,
                              "" if CLUSTER_REPLICAS == 1 else "s", CLUSTER_NODE_TIMEOUT_MS),
             ""]
    gone = sorted(s for s in left_out if s in CLUSTER_SYSTEMS)
    if gone:
        lines.append("Left out (see above): %s." % ", ".join(gone))
        lines.append("")
    lines.append("| figure | case | redis | redis-cluster | redis-cluster / redis |")
    lines.append("|---|---|--:|--:|--:|")
    for r in doc["rows"]:
        w = r["figure"]
        lines.append("| " + " | ".join([
            w, r["case"], fmt(w, r["redis"]), fmt(w, r["redis-cluster"]),
            ratio(r["redis-cluster"], r["redis"])]) + " |")
    lines.append("")
    if doc["masters"]:
        lines.append("Each master (numbered in slot order, as the daemon's INFO numbers them): "
                     "the EVALSHA calls it executed over the run and its share of them; for "
                     "the hot workload also its share of the key picks, the Zipf weights of "
                     "the keys whose slot it owns (what the run's key names allow: the "
                     "hottest key alone is %.0f %% of the picks); the calls the daemon sent "
                     "it; the commands it executed per acquisition (of all masters' "
                     "acquisitions) and its CPU per acquisition."
                     % (100 / sum(1.0 / (i + 1) ** HOT["zipf"] for i in range(HOT["keys"]))))
        lines.append("")
        lines.append("| case | master | slots | EVALSHA calls | share | key picks | calls sent "
                     "| commands/acq | Redis CPU µs/acq |")
        lines.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
        for m in doc["masters"]:
            lines.append("| " + " | ".join([
                m["case"], str(m["master"]), "–" if m["slots"] is None else str(m["slots"]),
                "{:,}".format(m["evalsha"]), pct(m["share"]), pct(m["pick_share"]),
                "–" if m["sent"] is None else "{:,}".format(m["sent"]),
                fmt_num(m["commands_per_op"], 2), fmt_num(m["cpu_us_per_op"])]) + " |")
        lines.append("")
    return lines


DISTURBED_PCT = 50     # others' CPU, % of a core, that marks a run as disturbed


def disturbed(rec):
    """Whether other work took a large share of the machine during the run."""
    return ok(rec) and (rec.get("others_cpu_pct") or 0) > DISTURBED_PCT


def table_row(rec):
    sysname = rec["system"]
    if "skipped" in rec or "error" in rec:
        return "| %s | %s | %s |" % (sysname, case_text(rec),
                                     " | ".join(["–"] * 15) + " | "
                                     + ("skipped: " if "skipped" in rec else "error: ")
                                     + (rec.get("skipped") or rec.get("error")).splitlines()[0]
                                     .replace("|", "/")[:120])
    w = rec["wait_us"]
    sent, allc = rec.get("backend_sent_per_op"), rec.get("backend_all_per_op")
    if sent is None and allc is None:
        req = "–"
    else:
        req = "%s (%s)" % (fmt_num(sent, 2), fmt_num(allc, 2))
    rss = rec.get("daemon_peak_rss_kib")
    errs = str(rec["errors"]) if rec["errors"] == 0 else "%d: %s" % (
        rec["errors"], rec["first_error"].replace("|", "/")[:80])
    longest = w["max"]
    if rec["longest_waiting_us"] > w["max"]:
        longest = "> " + fmt_us(rec["longest_waiting_us"])     # still waiting at the end
    else:
        longest = fmt_us(longest)
    jain = fmt_num(rec["jain_clients"], 3)
    if rec["starved_clients"]:
        jain += " (%d starved)" % rec["starved_clients"]
    return "| " + " | ".join([
        sysname, case_text(rec), fmt_rate(rec["rate"]),
        fmt_us(w["p50"]), fmt_us(w["p90"]), fmt_us(w["p99"]), longest, jain,
        fmt_num(rec["jain_daemons"], 3),
        req,
        fmt_num(rec.get("backend_cpu_us_per_op")),
        fmt_num(rec.get("daemon_cpu_us_per_op")),
        "–" if rss is None else "%.1f" % (rss / 1024.0),
        "%.0f" % rec["tool_cpu_pct"],
        ("**%.0f**" if disturbed(rec) else "%.0f") % rec["others_cpu_pct"]
        if rec.get("others_cpu_pct") is not None else "–",
        errs]) + " |"


MAIN_HEADER = (
    "| system | workload | per s | wait p50 | p90 | p99 | max | Jain clients | Jain daemons "
    "| backend req/acq sent (all) | backend CPU µs/acq | dlockd CPU µs/acq "
    "| dlockd peak RSS MiB | tool CPU % | others' CPU % | errors |\n"
    "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|")


def write_markdown(path, meta, recs, goal_rows, plots):
    lines = []
    lines.append("# dlockd benchmark, %s" % meta["date"])
    lines.append("")
    lines.append("Made by `%s` in %.0f s: one run of each case, a %d ms measuring window "
                 "after %d ms of warm-up, each with a fresh dlockd; redis-server %s and etcd "
                 "%s on loopback. Machine: %s, %d cores, Linux %s; load average %s before, "
                 "%s after. The machine is shared and noisy: read the ratios within this "
                 "run, not figures across runs."
                 % (meta["command"], meta["elapsed_s"], meta["window_ms"], meta["warmup_ms"],
                    meta["redis_version"], meta["etcd_version"], meta["cpu"], meta["cores"],
                    meta["kernel"], meta["loadavg_before"], meta["loadavg_after"]))
    lines.append("")
    noisy = [r["id"] for r in recs if disturbed(r)]
    if noisy:
        lines.append("**%d of %d runs were disturbed**: other work used more than %d %% of a "
                     "core during their window (others' CPU in bold): %s."
                     % (len(noisy), len(recs), DISTURBED_PCT, ", ".join(noisy)))
        lines.append("")
    if meta["skipped_servers"]:
        for name, why in sorted(meta["skipped_servers"].items()):
            lines.append("**%s could not be started** (%s): its runs are skipped." % (name, why))
        lines.append("")
    for name, why in sorted(meta.get("left_out", {}).items()):
        lines.append("**%s was left out**: %s." % (name, why.rstrip(".")))
        lines.append("")
    lines.append("## Goals")
    lines.append("")
    lines.append("| goal | measured on | this run | ratio | goal | met |")
    lines.append("|---|---|--:|--:|--:|---|")
    for g in goal_rows:
        lines.append("| " + " | ".join(g) + " |")
    lines.append("")
    rows = comparisons({r["id"]: r for r in recs})
    if rows:
        lines += comparison_lines(rows, meta.get("left_out", {}))
    rows = redlock_comparison({r["id"]: r for r in recs})
    if rows:
        lines += redlock_lines(rows, meta.get("left_out", {}))
    doc = cluster_comparison({r["id"]: r for r in recs})
    if doc:
        lines += cluster_lines(doc, meta.get("left_out", {}))
    idle = idle_summary({r["id"]: r for r in recs})
    if idle is not None:
        lines.append("## {:,} idle sessions".format(idle["idle_sessions"]))
        lines.append("")
        lines.append("One memory dlockd, %d clients locking keys of their own (uncontended), "
                     "measured alone, then with {:,} more connections open and idle (each "
                     "sent a PING). Resident size per idle session: (VmRSS with them − "
                     "VmRSS before) / {:,}.".format(idle["idle_sessions"], idle["idle_sessions"])
                     % idle["clients"])
        lines.append("")
        lines.append("| | per s | wait p50 | p99 |")
        lines.append("|---|--:|--:|--:|")
        lines.append("| alone | %s | %s | %s |" % (fmt_rate(idle["rate_base"]),
                                                  fmt_us(idle["p50_base_us"]),
                                                  fmt_us(idle["p99_base_us"])))
        lines.append("| with the idle sessions | %s | %s | %s |"
                     % (fmt_rate(idle["rate_idle"]), fmt_us(idle["p50_idle_us"]),
                        fmt_us(idle["p99_idle_us"])))
        lines.append("")
        lines.append("p99 ratio %s; VmRSS %.1f MiB before, %.1f MiB with them: %.1f KiB per "
                     "idle session."
                     % (fmt_num(idle["p99_ratio"], 2), idle["rss_before_idle_kib"] / 1024.0,
                        idle["rss_with_idle_kib"] / 1024.0, idle["rss_per_idle_kib"]))
        lines.append("")
    lines.append("## Every run")
    lines.append("")
    lines.append("per s: acquisitions (LOCK granted, then UNLOCK) per second; for PING rows, "
                 "PING pairs per second; for hold rows, hold cycles per second. Waits are "
                 "from sending LOCK (or the first SET) to the grant. Backend requests per "
                 "acquisition: those the daemon (or the direct client) sent, and in brackets "
                 "all the backend executed (Redis commandstats with the commands scripts "
                 "run; etcd gRPC messages received). CPU per acquisition is over the "
                 "measuring window. max: the longest wait granted, or \"> t\" when a client "
                 "had been waiting t when the window ended; starved: clients granted nothing "
                 "in the window. tool CPU: dlock-bench's own, % of one core (near 100 it "
                 "would be the bottleneck). others' CPU: what the rest of the machine used "
                 "during the window, % of one core (" + str(meta["cores"]) + " cores in "
                 "all): a large figure marks a run disturbed by other work. See "
                 "bench/README.md.")
    lines.append("")
    lines.append(MAIN_HEADER)
    for rec in recs:
        lines.append(table_row(rec))
    lines.append("")
    for name, title in plots:
        lines.append("![%s](%s)" % (title, name))
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def write_json(path, doc):
    """doc as JSON with one line per goal and per run, for readable diffs."""
    with open(path, "w") as f:
        f.write("{\n")
        keys = list(doc)
        for i, k in enumerate(keys):
            v = doc[k]
            f.write("%s: " % json.dumps(k))
            if isinstance(v, list):
                f.write("[\n" + ",\n".join(" " + json.dumps(x, ensure_ascii=False) for x in v)
                        + "\n]")
            else:
                f.write(json.dumps(v, ensure_ascii=False))
            f.write(",\n" if i < len(keys) - 1 else "\n")
        f.write("}\n")


# ---- plots ----

PLOT_SYSTEMS = [("memory", "memory"), ("redis", "redis"),
                ("redis-cache", "redis, lease_cache_ms %d" % CACHE_MS),
                ("redis-tls", "redis over TLS"),
                ("redis-ack1", "redis, min_replicas_ack %d" % ACK_REPLICAS),
                ("redlock-3", "redlock, 3 nodes"), ("redlock-5", "redlock, 5 nodes"),
                ("etcd", "etcd"), ("direct-etcd", "direct-etcd"),
                ("direct", "direct / direct-poll"), ("ping-redis", "redis-server PING pairs"),
                ("hold", "hold-time limit"),
                ("redis-cluster", "redis-cluster, %d masters" % CLUSTER_MASTERS)]


def plot_cases(recs):
    """The x-axis cases of the throughput plot: (label, {system: record})."""
    cases = []
    for c in UNCONTENDED_C:
        cases.append(("unc. C=%d" % c, "uncontended/c%d" % c))
    for n in CONTENDED_N:
        for h in CONTENDED_H:
            cases.append(("N=%d h=%s" % (n, fmt_hold(h).replace(" ", "")),
                          "contended/n%d-h%d" % (n, h)))
    cases.append(("hot", "hot/n%d" % HOT["clients"]))
    cases.append(("2 daemons", "multi-daemon/n%d" % MULTI["clients"]))
    by_id = {r["id"]: r for r in recs}
    out = []
    for label, suffix in cases:
        row = {}
        for sysname, _ in PLOT_SYSTEMS:
            if sysname == "hold":
                m = re.search(r"-h(\d+)$", suffix)
                r = by_id.get("hold/hold/h%s" % m.group(1)) \
                    if suffix.startswith("contended") and m and m.group(1) != "0" else None
            elif sysname == "ping-redis":
                r = by_id.get("ping-redis/ping/" + suffix.split("/")[1]) \
                    if suffix.startswith("uncontended") else None
            elif sysname == "direct":
                r = by_id.get("direct/" + suffix) or by_id.get("direct-poll/" + suffix)
            else:
                r = by_id.get("%s/%s" % (sysname, suffix))
            row[sysname] = r["rate"] if ok(r) and r["rate"] > 0 else None
        out.append((label, row))
    return out


WAIT_SYSTEMS = ("memory", "redis", "etcd", "direct-etcd", "direct")  # each wait panel's curves
WAIT_PANELS = [("uncontended, C=%d" % GOAL_C, "uncontended/c%d" % GOAL_C),
               ("contended, N=16, hold 0", "contended/n16-h0"),
               ("contended, N=64, hold 1 ms", "contended/n64-h1000"),
               ("hot: 64 clients, 1000 keys, hold 0.1 ms", "hot/n64")]


def write_plots(outdir, recs):
    """throughput.png and wait.png with gnuplot; [(file, title)] made."""
    gp = shutil.which("gnuplot")
    if gp is None:
        print("bench: gnuplot is missing (Debian package gnuplot-nox): no plots",
              file=sys.stderr)
        return []
    tmp = tempfile.mkdtemp(prefix="dlock-bench-plot.")
    made = []
    try:
        # throughput bars
        dat = os.path.join(tmp, "rates.dat")
        cases = plot_cases(recs)
        with open(dat, "w") as f:
            f.write("case " + " ".join('"%s"' % t for _, t in PLOT_SYSTEMS) + "\n")
            for label, row in cases:
                f.write('"%s" ' % label + " ".join(
                    "-" if row[s] is None else "%.1f" % row[s] for s, _ in PLOT_SYSTEMS) + "\n")
        script = """
set terminal pngcairo size 1400,600 noenhanced font ",10"
set output "{out}"
set title "acquisitions/s (PING pairs/s) by workload, one run, log scale"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
# gnuplot's colours repeat after 8: more for the 9th to the 13th system
set linetype 9 lc rgb "#8c564b"
set linetype 10 lc rgb "#7f7f7f"
set linetype 11 lc rgb "#17becf"
set linetype 12 lc rgb "#bcbd22"
set linetype 13 lc rgb "#393b79"
set datafile missing "-"
set logscale y
set yrange [100:*]
set grid ytics
set key top right
set xtics rotate by -30
plot for [i=2:{ncol}] "{dat}" using i:xtic(1) title columnhead(i)
""".format(out=os.path.join(outdir, "throughput.png"), dat=dat, ncol=len(PLOT_SYSTEMS) + 1)
        if any(v is not None for _, row in cases for v in row.values()) and gnuplot(gp, script):
            made.append(("throughput.png", "throughput"))

        # wait distributions
        by_id = {r["id"]: r for r in recs}
        panels = []
        for title, suffix in WAIT_PANELS:
            curves = []
            for sysname, label in [p for p in PLOT_SYSTEMS if p[0] in WAIT_SYSTEMS]:
                r = by_id.get("%s/%s" % (sysname, suffix))
                if sysname == "direct" and r is None:
                    r = by_id.get("direct-poll/" + suffix)
                if not ok(r) or not r.get("wait_hist"):
                    continue
                path = os.path.join(tmp, "wait-%d-%s.dat" % (len(panels), sysname))
                total = sum(n for _, _, n in r["wait_hist"])
                seen = 0
                with open(path, "w") as f:
                    f.write("%.3f 0\n" % max(r["wait_hist"][0][0], 0.001))
                    for lo, hi, n in r["wait_hist"]:
                        seen += n
                        f.write("%.3f %.6f\n" % (max(hi, 0.001), seen / total))
                name = label if sysname != "direct" else (
                    "direct" if suffix.startswith("uncontended") else "direct-poll")
                curves.append('"%s" using 1:2 with steps lw 2 title "%s"' % (path, name))
            panels.append((title, curves))
        script = ["set terminal pngcairo size 1400,900 noenhanced font \",10\"",
                  'set output "%s"' % os.path.join(outdir, "wait.png"),
                  "set multiplot layout 2,2 title \"wait from LOCK sent to grant: "
                  "cumulative fraction (one run)\"",
                  "set logscale x", "set xlabel \"wait, µs (log)\"",
                  "set ylabel \"fraction of acquisitions\"", "set yrange [0:1.02]",
                  "set grid", "set key bottom right"]
        for title, curves in panels:
            script.append('set title "%s"' % title)
            if curves:
                script.append("plot " + ", ".join(curves))
            else:
                script.append("set label 1 \"not measured\" at graph 0.4,0.5")
                script.append("plot [1:10] NaN notitle")
                script.append("unset label 1")
        script.append("unset multiplot")
        if any(curves for _, curves in panels) and gnuplot(gp, "\n".join(script) + "\n"):
            made.append(("wait.png", "wait-time distributions"))
    finally:
        shutil.rmtree(tmp, True)
    return made


def gnuplot(gp, script):
    p = subprocess.run([gp], input=script.encode(), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    if p.returncode != 0:
        print("bench: gnuplot failed: %s" % p.stderr.decode(errors="replace"), file=sys.stderr)
        return False
    return True


# ---- the suite ----

def version(argv, pattern):
    try:
        out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             timeout=10).stdout.decode(errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return "missing"
    m = re.search(pattern, out)
    return m.group(1) if m else "unknown"


def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return cpu


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def summary(rec):
    if "skipped" in rec:
        return "skipped (%s)" % rec["skipped"]
    if "error" in rec:
        return "ERROR: %s" % rec["error"].splitlines()[0]
    s = "%s /s, wait p50 %s p99 %s, tool CPU %.0f %%, others %s %%" % (
        fmt_rate(rec["rate"]), fmt_us(rec["wait_us"]["p50"]), fmt_us(rec["wait_us"]["p99"]),
        rec["tool_cpu_pct"], fmt_num(rec.get("others_cpu_pct"), 0))
    if rec["errors"]:
        s += ", %d errors (%s)" % (rec["errors"], rec["first_error"])
    return s


def main(argv):
    ap = argparse.ArgumentParser(description="Run dlockd's benchmark suite.")
    ap.add_argument("--window", type=int, default=2000, help="measuring window, ms (2000)")
    ap.add_argument("--warmup", type=int, default=500, help="warm-up before it, ms (500)")
    ap.add_argument("--only", metavar="REGEX",
                    help="run only the runs whose id (system/workload/case) matches")
    ap.add_argument("--out", metavar="DIR",
                    help="results directory (default bench/results/<YYYY-MM-DD>)")
    ap.add_argument("--list", action="store_true", help="print the runs' ids and exit")
    args = ap.parse_args(argv)
    if args.window <= 0 or args.warmup < 0:
        ap.error("--window must be > 0 and --warmup >= 0")

    runs = plan()
    elect_ids = elect.ids() + lockall.ids()
    rx = None
    if args.only:
        try:
            rx = re.compile(args.only)
        except re.error as e:
            ap.error("--only: %s" % e)
        runs = [r for r in runs if rx.search(r.id)]
        elect_ids = [i for i in elect_ids if rx.search(i)]
        if not runs and not elect_ids:
            ap.error("--only %r matches no run (see --list)" % args.only)
    if args.list:
        for i in [r.id for r in runs] + elect_ids:
            print(i)
        return 0
    for path in (BENCH, DLOCKD):
        if not os.access(path, os.X_OK):
            print("bench: %s is missing (make %s)" % (path, os.path.relpath(path, ROOT)),
                  file=sys.stderr)
            return 1

    # a variant whose key this daemon does not know yet is left out, loudly;
    # one it refuses otherwise fails its runs
    left_out, refused = {}, {}
    for system, (verdict, why) in sorted(
            check_settings(sorted({r.system for r in runs if r.system in VARIANTS})).items()):
        if verdict == "left out":
            left_out[system] = "it needs %s, which this dlockd does not know (dlockd -t: %s)" % (
                VARIANTS[system]["pending"], why)
            print("bench: %s is left out: %s" % (system, left_out[system]), flush=True)
            runs = [r for r in runs if r.system != system]
        else:
            refused[system] = why
            print("bench: dlockd -t refuses the configuration of %s: %s; its runs fail"
                  % (system, why), file=sys.stderr, flush=True)
    if not runs and not elect_ids:
        print("bench: no run left", file=sys.stderr)
        return 1

    install_signal_handlers()
    if any(r.workload == "idle10k" for r in runs):
        raise_nofile(IDLE + 1000)
    today = datetime.date.today().isoformat()
    outdir = args.out or os.path.join(HERE, "results", today)
    os.makedirs(outdir, exist_ok=True)
    meta = {"date": today, "command": "make bench" if not argv else
            "bench/run.py " + " ".join(argv),
            "window_ms": args.window, "warmup_ms": args.warmup,
            "cpu": machine(), "cores": os.cpu_count(), "kernel": platform.release(),
            "redis_version": version([REDIS_SERVER, "--version"], r"v=(\S+)"),
            "etcd_version": version([ETCD, "--version"], r"etcd Version: (\S+)"),
            "loadavg_before": loadavg()}
    try:
        meta["commit"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        timeout=10).stdout.decode().strip()
    except (OSError, subprocess.TimeoutExpired):
        meta["commit"] = "unknown"

    started = time.monotonic()
    servers = Servers()
    recs = []
    try:
        for i, run in enumerate(runs):
            t = time.monotonic()
            for rec in execute(run, i, args, servers, refused.get(run.system)):
                recs.append(rec)
                print("[%2d/%d] %-36s %s (%.1f s)" % (i + 1, len(runs), rec["id"],
                                                      summary(rec), time.monotonic() - t),
                      flush=True)
    finally:
        servers.stop()
    elect_recs = elect.run(rx, log=lambda line: print("[elect] " + line, flush=True))
    lockall_recs = lockall.run(rx, args.window, args.warmup, run_tool,
                               log=lambda line: print("[lockall] " + line, flush=True))
    meta["elapsed_s"] = time.monotonic() - started
    meta["loadavg_after"] = loadavg()
    meta["skipped_servers"] = servers.failed
    meta["left_out"] = left_out

    by_id = {r["id"]: r for r in recs}
    goal_rows = goals(by_id)
    write_json(os.path.join(outdir, "results.json"), {
        "meta": meta,
        "goals": [dict(zip(("goal", "measured_on", "this_run", "ratio", "target", "met"),
                           g[:5] + (g[5].strip("*"),)))
                  for g in goal_rows],
        "idle10k": idle_summary(by_id),
        "tls_and_ack": comparisons(by_id),
        "redlock": redlock_comparison(by_id),
        "redis_cluster": cluster_comparison(by_id),
        "runs": recs,
        "elect": elect_recs,
        "lockall": lockall_recs})
    plots = write_plots(outdir, recs)
    write_markdown(os.path.join(outdir, "results.md"), meta, recs, goal_rows, plots)
    with open(os.path.join(outdir, "results.md"), "a") as f:
        f.write(elect.markdown(elect_recs) + lockall.markdown(lockall_recs))
    elect_recs += lockall_recs
    bad = [r for r in recs + elect_recs if "error" in r]
    print("bench: %d runs and %d election and LOCKALL runs in %.0f s (%d skipped, %d failed); "
          "results in %s"
          % (len(recs), len(elect_recs), meta["elapsed_s"],
             sum(1 for r in recs + elect_recs if "skipped" in r), len(bad),
             os.path.relpath(outdir, os.getcwd())))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
