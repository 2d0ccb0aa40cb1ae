"""The fault test's cluster topology: two daemons on a Redis Cluster of 3
masters with a replica each (-b redis-cluster://the masters, both straight
to the nodes), the lock set's three keys one on each master.

As with Sentinel, no fault of the cluster's excuses an overlap: across a
failover (the master killed, or stopped past the node timeout) a lock is
either still held on the promoted replica or its holder is told before
another holder is granted the key; a slot moved to another master (reshard)
takes its leases and fence counters with it."""

import time

from dlocktest.cluster import CLUSTER_SLOTS, RedisCluster
from dlocktest.conf import backend_section
from dlocktest.daemon import Daemon

from faults.topology import Topology, say, stopped_across

MASTERS = 3
NODE_TIMEOUT_MS = 1000
# s for a replica to take over a killed or stopped master's slots (the
# node timeout, the failure report, the election), with room
FAILOVER_LIMIT = 15.0
# slots moved in each round of the reshard fault
RESHARD_MOVES = 3


class FaultCluster(RedisCluster):
    """The topology's Redis Cluster: a RedisCluster that cuts a master's
    replicas off (writes that never reach the replica that takes over),
    tells the owners of slots quickly, and counts the failovers its nodes'
    logs tell of."""

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
            r.expect_ok("CONFIG", "SET", "masterauth", "dlockd-safety-cut")
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
                r.expect_ok("CONFIG", "SET", "masterauth", "")

    def replicas_linked(self, server):
        """How many replicas server has connected now (INFO replication's
        connected_slaves), None if it does not say."""
        v = server.replication(timeout=1.0).get("connected_slaves")
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


class ClusterTopology(Topology):
    """The cluster, three workers on each of its three keys, on both
    daemons. Faults: the master of a key killed (its replica promoted; it
    comes back as a replica) or stopped past the node timeout, slots of the
    lock set moved to another master."""

    NODE_FAULTS = ["master_kill", "master_stop", "reshard"]
    FAULTS = ["client_kill", "daemon_kill", "daemon_stop"] + NODE_FAULTS
    # master_kill "unsynced": the replicas of the lock set's masters are cut
    # off (their links closed, and kept from connecting again) and the
    # master is killed right after a grant to a holder that means to hold
    # past the failover ("grant"): that lease, and its fence, never reached
    # the replica that takes over (asynchronous replication), so its holder
    # must be told before the key goes to another.
    # reshard: RESHARD_MOVES slots of the lock set moved to another master,
    # the first at the moment aimed at: "whole" with every key in one
    # MIGRATE; "steps" one key at a time, 20 to 120 ms apart (the lock's
    # keys split between the two masters: ASK, TRYAGAIN, retried within the
    # command timeout); "slow" 250 to 500 ms apart (longer than the command
    # timeout: acquires, handoffs and releases of the key fail meanwhile,
    # renewals go on)
    PLANS = {
        "master_kill": [("renew", None), ("grant", "unsynced"), ("lock", None),
                        ("prewrite", None), ("grant", "unsynced")],
        "master_stop": [("renew", "failover"), ("lock", "failover"), ("extend", "failover")],
        "reshard": [("lock", "steps"), ("renew", "whole"), ("renew", "slow"),
                    ("prewrite", "steps")],
    }
    DAEMONS = ("d0", "d1")
    # worker i takes key i mod 3
    LAYOUT = [("d0", "py2"), ("d0", "raw3push"), ("d0", "raw2"),
              ("d1", "raw3push"), ("d1", "py2"), ("d1", "raw3"),
              ("d1", "raw3push"), ("d0", "raw3push"), ("d1", "raw2")]

    def __init__(self, sc):
        super().__init__(sc)
        self.cluster = None      # the FaultCluster
        self.last_killed = None  # the master the last fault hit

    @classmethod
    def lease_ttl(cls, fault, ttl, scale):
        # as with Sentinel: a failover takes 2 to 3 s (the node timeout,
        # then the election)
        if fault in ("master_kill", "master_stop"):
            ttl = 4000
        return super().lease_ttl(fault, ttl, scale)

    def start(self, conf):
        """The cluster, the lock set's keys one on each master (checked),
        and two daemons with -b redis-cluster://the masters, both straight
        to the nodes (the timeouts go to the file)."""
        sc = self.sc
        self.cluster = FaultCluster(masters=MASTERS, replicas=1,
                                    node_timeout_ms=int(NODE_TIMEOUT_MS * sc.scale),
                                    directory=self.subdir("cluster")).start()
        sc.keys = self.cluster_keys()
        owners = {}
        for k in sc.keys:
            owners[k] = self.cluster.master_of(self.cluster.lock_slot(k))
        ports = sorted({m.port for m in owners.values()})
        if len(ports) != MASTERS:
            raise AssertionError("the lock set's keys %s are on %d master(s) (%s), not %d"
                                 % (sc.keys, len(ports), ports, MASTERS))
        say("    keys: %s" % ", ".join("%s (slot %d, master %d)"
                                       % (k, self.cluster.lock_slot(k), owners[k].port)
                                       for k in sc.keys))
        text = conf + backend_section(self.backend_conf())
        for name in ("d0", "d1"):
            sc.daemons[name] = Daemon(text, unix=False, backend="redis-cluster",
                                      redis=self.cluster, backend_url=self.cluster.url(),
                                      directory=self.subdir(name))

    def cluster_keys(self):
        """One lock key per master: the first of safety/cluster/<fault>/<i>
        whose slot each master owns."""
        owner = self.cluster.slot_map()
        masters = {m.node_id for m in self.cluster.masters()}
        keys = {}
        i = 0
        while len(keys) < len(masters):
            k = "safety/%s/%s/%d" % (self.sc.backend, self.sc.fault, i)
            nid = owner[self.cluster.lock_slot(k)]
            if nid in masters and nid not in keys:
                keys[nid] = k
            i += 1
        return sorted(keys.values(), key=lambda k: int(k.rsplit("/", 1)[1]))

    def key_owners(self):
        """lock key -> the master that owns its slot now (and the slots of
        each, for wait_promoted)."""
        slots = {k: self.cluster.lock_slot(k) for k in self.sc.keys}
        owner = self.cluster.owners(set(slots.values()))
        return {k: owner[s] for k, s in slots.items()}

    def inject(self, kind, how, spec):
        """The master of the aimed worker's key SIGKILLed (its replica
        promoted; it is started again and rejoins as a replica), with its
        replica cut off before when spec is "unsynced", or SIGSTOPped until
        its replica has taken over and 0.3 s more (then it runs again, a
        stale master until the cluster tells it); or RESHARD_MOVES slots of
        the lock set moved to another master. Then back to a cluster that
        is ok and daemons with every slot's master up, for the next round."""
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
        replica has taken over (see inject)."""
        sc = self.sc
        wid, aim = sc.aim_at(how)
        key = sc.aimed_key(wid)
        m = owners[key]
        pid = m.pid
        limit = FAILOVER_LIMIT * sc.scale
        if kind == "master_stop":
            t0, new, failover, t1 = stopped_across(
                m, lambda: self.cluster.wait_promoted(m, limit), sc.duration("failover"))
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
        sc.record(kind, "master@%d" % m.port, t0, t1, aim=aim, pid=pid, key=key,
                  new_master=new.port, failover=round(failover, 3),
                  planned="failover" if kind == "master_stop" else spec, **extra)
        self.last_killed = m

    def reshard(self, how, mode):
        """Move the slot of a lock key (the aimed worker's) from its master
        to another one: in one go (mode "whole": SETSLOT IMPORTING and
        MIGRATING, every key in one MIGRATE, SETSLOT NODE), or a key at a
        time, 20 to 120 ms apart (mode "steps") or 250 to 500 ms apart
        (mode "slow")."""
        sc = self.sc
        owners = self.key_owners()
        masters = self.cluster.masters()
        wid, aim = sc.aim_at(how)
        key = sc.aimed_key(wid)
        src = owners[key]
        slot = self.cluster.lock_slot(key)
        dest = sc.rng.choice([m for m in masters if m is not src])
        t0 = time.monotonic()
        if mode == "whole":
            self.cluster.migrate_slot(slot, dest)
            keys = None
        else:
            self.cluster.begin_migration(slot, dest)
            lo, hi = (0.02, 0.12) if mode == "steps" else (0.25, 0.5)
            keys = self.cluster.migrate_keys(
                slot, src, dest, pause=lambda: sc.rng.uniform(lo, hi) * sc.scale)
            self.cluster.finish_migration(slot, src, dest)
        t1 = time.monotonic()
        sc.record("reshard", "slot%d:%d>%d" % (slot, src.port, dest.port), t0, t1, aim=aim,
                  key=key, slot=slot, src=src.port, dest=dest.port, mode=mode,
                  moved=keys, planned=mode)
        # the workers lock on for a while before the next move
        time.sleep(sc.rng.uniform(0.2, 0.6) * sc.scale)

    def wait_cluster_up(self):
        """Between rounds: until the cluster is ok again (every node up,
        the old master a replica) and both daemons have a master connected
        for every slot (bounded; a failed check if not)."""
        limit = (2.0 * self.sc.ttl / 1000.0 + 10.0) * self.sc.scale
        deadline = time.monotonic() + limit
        try:
            self.cluster.wait_ok(limit)
        except AssertionError as e:
            self.sc.failures.append({"kind": "cluster not back", "text": str(e)})
            return
        self.wait_daemons("backend_cluster_slots_up", CLUSTER_SLOTS, deadline, limit, "slots",
                          "cluster not back")

    def say_stats(self):
        """Print what each daemon counted of the cluster (INFO
        backend_cluster_*): whether the faults reached the daemons."""
        sc = self.sc
        for name, d in sorted(sc.daemons.items()):
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
        injected = sum(1 for f in sc.faults if f["kind"] in ("master_kill", "master_stop"))
        seen = self.cluster.failovers()
        if seen > injected:
            sc.notes.append("%d failover(s) in the cluster, %d of them injected: a node "
                            "stalled past the node timeout (%d ms)"
                            % (seen, injected, self.cluster.node_timeout_ms))

    def stop(self):
        if self.cluster is None:
            return
        for srv, rc in self.cluster.stop():
            if rc not in (0, None):
                self.sc.failures.append({"kind": "redis exit",
                                         "text": "cluster node on port %d exited with %s; "
                                         "log:\n%s" % (srv.port, rc, srv.log())})
