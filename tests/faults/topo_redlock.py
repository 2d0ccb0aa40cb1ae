"""The fault test's redlock topologies: two daemons on three independent
redis-servers (-b redlock://n0,n1,n2, quorum 2), the second reaching each
node through a proxy of its own; redlock-cache is the same with released
leases cached (backend.lease_cache_ms), as redis-cache is to redis.

No node fault excuses an overlap: one node lost, stopped, restarted (with
its data; without it once the longest lease it held has run out, or at
once: the nodes all answer in time here, so every lease stands on all three
and the two others still hold it) or cut off leaves a majority that still
holds every lease. Two nodes lost, or cut off from the second daemon, take
the quorum: holders must be told before their validity ends, LOCK answers
-BACKEND."""

import signal
import time

from dlocktest.conf import backend_section
from dlocktest.daemon import Daemon
from dlocktest.resp import Closed, Err

from faults.topology import TWO_DAEMONS, BackendRedis, Proxy, Topology, held, say

NODES = 3
QUORUM = NODES // 2 + 1
PROBE_WAIT_MS = 500  # a probe LOCK's WAIT while the quorum is lost


class RedlockTopology(Topology):
    """Three nodes (BackendRedis, appendonly yes, appendfsync always, but
    in the node_restart_loss scenarios), a proxy to each, d0 straight to
    the nodes and d1 through the proxies."""

    NODE_FAULTS = ["node_kill", "node_stop", "node_restart_loss", "node_restart_loss_now",
                   "node_blackhole", "majority_blackhole", "majority_lost"]
    FAULTS = ["client_kill", "daemon_stop", "daemon_kill"] + NODE_FAULTS
    # a node down, stopped or cut off; "restart" is how long a restarted
    # node stays down. A node restarted without its data stays down longer
    # than any lease it may hold (an EXTEND sets up to 1.25 x the TTL): 1.3 x
    # the TTL or more
    PLANS = {
        "node_kill": [("lock", "0.3s"), ("renew", "1.2ttl"), ("renew", "0.3s")],
        "node_stop": [("renew", "1.3ttl"), ("lock", "1.3ttl"), ("renew", "0.6ttl"),
                      ("extend", "0.95ttl")],
        "node_restart_loss": [("renew", "1.3ttl"), ("lock", "1.3ttl"), ("prewrite", "1.6ttl")],
        "node_restart_loss_now": [("renew", "0.05s"), ("lock", "0.05s"),
                                  ("prewrite", "0.05s")],
        "node_blackhole": [("renew", "1.5ttl"), ("lock", "1.5ttl"), ("renew", "0.5ttl"),
                           ("extend", "0.95ttl")],
        # past the longest lease (1.25 x the TTL) and the time a worker takes
        # to hear (check.py: its holders must have been told), and less
        "majority_blackhole": [("renew", "1.8ttl"), ("lock", "1.8ttl"), ("renew", "0.5ttl"),
                               ("extend", "0.95ttl")],
        "majority_lost": [("renew", "1.8ttl"), ("lock", "1.8ttl"), ("renew", "0.5ttl")],
    }
    LAYOUT = TWO_DAEMONS

    def __init__(self, sc):
        super().__init__(sc)
        self.nodes = []      # the redis-servers (BackendRedis)
        self.proxies = []    # the second daemon's proxy to each node

    def start(self, conf):
        persist = self.sc.fault not in ("node_restart_loss", "node_restart_loss_now")
        for i in range(NODES):
            self.nodes.append(BackendRedis(persist, directory=self.subdir("node%d" % i)).start())
        for n in self.nodes:
            self.proxies.append(Proxy(n.port).start())
        # the -b URL names the nodes; the timeouts go to the file
        text = conf + backend_section(self.backend_conf())
        for name, servers in (("d0", self.nodes), ("d1", self.proxies)):
            url = "redlock://" + ",".join("127.0.0.1:%d" % s.port for s in servers)
            self.sc.daemons[name] = Daemon(text, unix=False, backend="redis", backend_url=url,
                                           directory=self.subdir(name))

    def inject(self, kind, how, spec):
        """One node killed (started again with or without its data),
        stopped, or cut off from d1 by its proxy; two of d1's paths cut
        off; or two nodes killed."""
        sc = self.sc
        dur = sc.duration(spec)
        n = len(self.nodes)
        if kind in ("node_blackhole", "majority_blackhole"):
            idx = sorted(sc.rng.sample(range(n), 1 if kind == "node_blackhole" else 2))
            wid, aim = sc.aim_at(how, on_daemon="d1")
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
            sc.record(kind, "d1/" + "+".join("node%d" % i for i in idx), t0, t1, aim=aim,
                      nodes=idx, planned=spec, quorum_lost=lost)
            return
        wid, aim = sc.aim_at(how)
        if kind == "majority_lost":
            idx = sorted(sc.rng.sample(range(n), n // 2 + 1 if n > 2 else n))
            self.majority_lost(idx, dur, aim, spec)
            return
        i = sc.rng.randrange(n)
        node = self.nodes[i]
        pid = node.pid
        if kind == "node_stop":
            t0, t1 = held(node.pause, node.resume, dur)
            sc.record(kind, "node%d" % i, t0, t1, aim=aim, pid=pid, planned=spec)
            return
        # node_kill, node_restart_loss, node_restart_loss_now
        t0, t1 = node.crash(dur)
        sc.record(kind, "node%d" % i, t0, t1, aim=aim, pid=pid, new_pid=node.pid,
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
            self.nodes[i].restart()
        t1 = time.monotonic()
        self.sc.record("majority_lost", "+".join("node%d" % i for i in idx), t0, t1, aim=aim,
                       pid=pids, planned=spec, quorum_lost=sorted(self.sc.daemons),
                       probes=probes)

    def probe_no_quorum(self, until):
        """While a majority of the nodes is down (until time.monotonic()
        until): each daemon's INFO must come to show backend_connected:0
        and one node up, and a LOCK of a key nobody uses must answer
        -BACKEND (the quorum cannot be reached) without waiting for its
        WAIT. Returns what was seen, for the record; what is wrong is a
        failed check."""
        sc = self.sc
        out = []
        key = "safety/%s/probe" % sc.backend
        limit = min(1.0 * sc.scale, max(0.05, until - time.monotonic() - 0.05))
        for name, d in sorted(sc.daemons.items()):
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
                    None, str(NODES - QUORUM)):
                sc.failures.append({
                    "kind": "quorum not seen lost",
                    "text": "dlockd %s: INFO says backend_connected:%s backend_nodes_up:%s "
                    "%.1f s after %d of %d nodes were killed"
                    % (name, info.get("backend_connected"), info.get("backend_nodes_up"),
                       limit, QUORUM, NODES)})
            c = None
            try:
                c = d.raw()
                # WAIT 0 is answered -BACKEND at once; a LOCK with a WAIT
                # waits through the outage and is answered -BACKEND when
                # its WAIT runs out (the quorum is still lost then)
                left_ms = int((until - time.monotonic()) * 1000) - 300
                for wait in (0, min(PROBE_WAIT_MS, left_ms)):
                    if wait < 0:
                        continue
                    t = time.monotonic()
                    r = c.cmd("LOCK", key, "TTL", str(sc.ttl), "WAIT", str(wait))
                    took = time.monotonic() - t
                    seen["lock" if wait == 0 else "lock_wait"] = str(r)[:200]
                    seen["took" if wait == 0 else "took_wait"] = round(took, 3)
                    if not (isinstance(r, Err) and r.startswith("BACKEND")):
                        sc.failures.append({
                            "kind": "lock without quorum",
                            "text": "dlockd %s answered LOCK WAIT %d with %r, not -BACKEND, "
                            "while %d of %d nodes were down" % (name, wait, r, QUORUM, NODES)})
                        if isinstance(r, list):
                            c.cmd("UNLOCK", key)
                    elif took > wait / 1000.0 + 1.0 * sc.scale or took < 0.9 * wait / 1000.0:
                        sc.failures.append({
                            "kind": "-BACKEND out of time",
                            "text": "dlockd %s took %.3f s to answer LOCK WAIT %d with -BACKEND "
                            "while %d of %d nodes were down (expected when the WAIT ran out)"
                            % (name, took, wait, QUORUM, NODES)})
            except (OSError, AssertionError, Closed) as e:
                sc.failures.append({"kind": "harness",
                                    "text": "probe of dlockd %s: %s" % (name, e)})
            finally:
                if c is not None:
                    c.close()
            out.append(seen)
        return out

    def after_round(self):
        """Until both daemons are connected to every node again (bounded;
        a failed check if not)."""
        limit = (2.0 * self.sc.ttl / 1000.0 + 5.0) * self.sc.scale
        self.wait_daemons("backend_nodes_up", NODES, time.monotonic() + limit, limit,
                          "nodes", "node not back")

    def say_stats(self):
        """The cache's grants, and what each daemon counted of each node
        (INFO backend_node<i>_*): whether the faults reached the daemons."""
        super().say_stats()
        for name, d in sorted(self.sc.daemons.items()):
            try:
                info = d.info()
            except (OSError, AssertionError):
                continue
            parts = []
            for i in range(NODES):
                parts.append("node%d %s calls, %s failures, %s timeouts, %s reconnects" % (
                    i, info.get("backend_node%d_calls_total" % i, "?"),
                    info.get("backend_node%d_failures_total" % i, "?"),
                    info.get("backend_node%d_timeouts_total" % i, "?"),
                    info.get("backend_node%d_reconnects_total" % i, "?")))
            say("    %s (since it last started): %s" % (name, "; ".join(parts)))

    def stop(self):
        for p in self.proxies:
            p.stop()
        for r in self.nodes:
            try:
                r.stop()
            except AssertionError as e:
                self.sc.failures.append({"kind": "redis exit", "text": str(e)})


class RedlockCacheTopology(RedlockTopology):
    """redlock with released leases cached (CACHE_CONF)."""

    CACHE = True
