"""Redis Cluster for the tests (the store of the redis-cluster backend):
RedisCluster makes a cluster of ClusterNodes (redis-servers) on free loopback
ports, tells who owns a slot, kills and restarts masters, waits for
failovers and moves slots (the one slot-migration helper: begin_migration,
migrate_keys, finish_migration, or migrate_slot for all three). key_slot()
and lock_keys() compute what the daemon's keys and slots are."""

import itertools
import os
import signal
import time

from .env import new_dir
from .proc import free_port, wait_until
from .redis_server import RedisServer, redis_cli
from .resp import as_bytes, parse_info, text


CLUSTER_SLOTS = 16384
CLUSTER_READY_TIMEOUT = 60.0  # s for a new cluster to agree on its slot map


def _crc16_table():
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return table


_CRC16 = _crc16_table()


def crc16(data):
    """CRC16-CCITT (XMODEM), the checksum of Redis Cluster's key slots."""
    crc = 0
    for b in as_bytes(data):
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[((crc >> 8) ^ b) & 0xFF]
    return crc


def key_slot(key):
    """Redis's hash slot of a key name (bytes or str): CRC16 mod 16384 of
    the key, or of its hash tag (what lies between the first "{" and the
    first "}" after it, when that is not empty)."""
    key = as_bytes(key)
    i = key.find(b"{")
    if i >= 0:
        j = key.find(b"}", i + 1)
        if j > i + 1:
            key = key[i + 1:j]
    return crc16(key) % CLUSTER_SLOTS


def lock_tag(lock_key):
    """The hash tag of a lock key in the redis-cluster backend's key names:
    the key with "%" written %25 and "}" written %7D (bytes)."""
    return as_bytes(lock_key).replace(b"%", b"%25").replace(b"}", b"%7D")


def lock_keys(lock_key, prefix="dlock:"):
    """The Redis keys of a lock on redis-cluster as a dict: lease, fence and
    mark -> the key name (bytes): prefix + "l:{E}", "f:{E}", "w:{E}"."""
    p, e = as_bytes(prefix), lock_tag(lock_key)
    return {"lease": p + b"l:{" + e + b"}", "fence": p + b"f:{" + e + b"}",
            "mark": p + b"w:{" + e + b"}"}


_TAG_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def slot_tag(slot):
    """The tag of the redis-cluster backend's shard channels of slot (its
    "released{T}" and "wanted{T}"): the first string over 0-9a-z, shortest
    first, whose CRC16 mod 16384 is slot."""
    for n in itertools.count(1):
        for t in itertools.product(_TAG_ALPHABET, repeat=n):
            t = "".join(t)
            if crc16(t) % CLUSTER_SLOTS == slot:
                return t


class ClusterNode(RedisServer):
    """A redis-server of a RedisCluster: cluster-enabled, its nodes.conf in
    its own directory (kept by restart(), so the node comes back as the
    same member), cluster-node-timeout node_timeout_ms, the cluster bus on
    a free port of its own. With a password it is also the masterauth (a
    node may become a replica); with tls the bus and the replication links
    speak TLS too. node_id is its cluster id once the cluster is made."""

    def __init__(self, node_timeout_ms=1000, **kw):
        super().__init__(**kw)
        self.node_timeout_ms = node_timeout_ms
        self.bus_port = free_port()
        self.node_id = None

    def argv(self):
        a = super().argv() + [
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--cluster-port", str(self.bus_port),
            # a replica takes over however long its link was down
            "--cluster-replica-validity-factor", "0",
            "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
            "--shutdown-timeout", "1"]
        if self.password is not None:
            a += ["--masterauth", self.password]
        if self.tls is not None:
            a += ["--tls-cluster", "yes", "--tls-replication", "yes"]
        return a

    def new_ports(self):
        if not super().new_ports():
            return False
        self.bus_port = free_port()
        return True

    def cluster_info(self):
        """CLUSTER INFO as a dict ({} if unreachable)."""
        r = self.cmd("CLUSTER", "INFO")
        return parse_info(r) if isinstance(r, bytes) else {}

    def slot_view(self):
        """This node's slot map from CLUSTER SLOTS: a sorted tuple of
        (first slot, last slot, master's node id); None if unreachable."""
        r = self.cmd("CLUSTER", "SLOTS")
        if not isinstance(r, list):
            return None
        return tuple(sorted((int(e[0]), int(e[1]), text(e[2][2])) for e in r))

    def nodes_view(self):
        """CLUSTER NODES as a dict: node id -> (port, flags (a set), the id
        of its master or None); None if unreachable."""
        r = self.cmd("CLUSTER", "NODES")
        if not isinstance(r, bytes):
            return None
        out = {}
        for line in r.decode().splitlines():
            f = line.split()
            if len(f) < 8:
                continue
            port = int(f[1].split("@")[0].rsplit(":", 1)[1] or 0)
            out[f[0]] = (port, set(f[2].split(",")), None if f[3] == "-" else f[3])
        return out


class RedisCluster:
    """A Redis Cluster of masters masters (3 by default) with replicas
    replicas each, one ClusterNode per redis-server, on free loopback ports,
    each in a directory of its own under directory.

    start() makes it with `redis-cli --cluster create` and returns once
    every node says cluster_state:ok, every node has the same slot map, and
    every replica's link is up; stop() stops every server it started (by
    pid, whatever happened); stop_checked() also fails if one did not exit
    0 (a kill() is not counted).

    tls (a Certs, e.g. shared_certs()) serves TLS only (port 0 and
    tls-port; the cluster bus and replication over TLS too); password is
    every node's requirepass and masterauth; users are ACL rules, as
    RedisServer takes them, given to every node (the default user, with
    password, stays the administrator the tests themselves use).

    Slots: slot() is Redis's slot of a key name, lock_slot() that of a lock
    of the redis-cluster backend; master_of() asks the cluster who owns a
    slot now. Faults: kill(), restart(), wait_promoted(); resharding:
    migrate_slot(), or its steps begin_migration(), migrate_keys() and
    finish_migration()."""

    def __init__(self, masters=3, replicas=1, node_timeout_ms=1000, directory=None,
                 tls=None, password=None, users=None):
        if masters < 1 or replicas < 0:
            raise ValueError("a cluster needs a master")
        self.nmasters = masters
        self.nreplicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.dir = directory or new_dir("cluster")
        self.tls = tls
        self.password = password
        self.users = list(users or [])
        self.servers = []
        self._seeds = []  # the masters right after start()
        self._killed_slots = {}  # node id -> the slots it owned when kill() ran

    # ---- start and stop ----

    def start(self, timeout=CLUSTER_READY_TIMEOUT):
        """Start the servers, make the cluster and wait (bounded) until it
        is ready (see wait_ok); on a failure stop everything and fail."""
        try:
            n = self.nmasters * (1 + self.nreplicas)
            for i in range(n):
                d = os.path.join(self.dir, "node%d" % i)
                os.makedirs(d, exist_ok=True)
                self.servers.append(ClusterNode(
                    node_timeout_ms=self.node_timeout_ms, directory=d, tls=self.tls,
                    password=self.password, users=self.users))
            for s in self.servers:
                s.start()
            self._create(timeout)
            for s in self.servers:
                s.node_id = text(s.cmd("CLUSTER", "MYID"))
                if not s.node_id:
                    raise AssertionError("CLUSTER MYID of node %d failed" % s.port)
            self.wait_ok(timeout)
            self._seeds = self.masters()
        except BaseException:
            self.stop()
            raise
        return self

    def cli_args(self):
        """redis-cli's options to reach the nodes (password, TLS)."""
        a = []
        if self.password is not None:
            a += ["-a", self.password, "--no-auth-warning"]
        if self.tls is not None:
            a += ["--tls", "--cacert", self.tls.ca]
        return a

    def _create(self, timeout):
        args = (["--cluster", "create"] + [s.address() for s in self.servers]
                + ["--cluster-replicas", str(self.nreplicas), "--cluster-yes"]
                + self.cli_args())
        rc, out, err = redis_cli(*args, timeout=timeout)
        if rc != 0 or "[OK] All 16384 slots covered" not in out:
            raise AssertionError("redis-cli --cluster create failed (%d):\n%s\n%s"
                                 % (rc, out, err))

    def stop(self):
        """Stop every server still running: SIGTERM to all of them at once
        (a stopped one resumed first), then wait (bounded) for each; one
        that does not exit is killed. Returns [(server, exit status or
        error)] of those it stopped. Safe to call twice."""
        live = [s for s in self.servers if s.proc is not None]
        for s in live:
            try:
                if s.proc.poll() is None:
                    if s.paused:
                        s.proc.send_signal(signal.SIGCONT)
                    s.proc.send_signal(signal.SIGTERM)
            except OSError:
                pass
        out = []
        for s in live:
            try:
                out.append((s, s.stop()))
            except AssertionError as e:  # killed after the timeout
                out.append((s, str(e)))
        return out

    def stop_checked(self):
        """stop(), then fail unless each server exited 0 (for cleanups)."""
        bad = ["redis-server (cluster node) on port %d exited with %s; log:\n%s"
               % (s.port, rc, s.log()) for s, rc in self.stop() if rc not in (0, None)]
        if bad:
            raise AssertionError("\n".join(bad))

    # ---- addresses ----

    def seeds(self):
        """"127.0.0.1:p1,127.0.0.1:p2,..." of the masters at start()."""
        return ",".join(s.address() for s in self._seeds)

    def seed_list(self):
        """The seeds as a list of "127.0.0.1:port"."""
        return [s.address() for s in self._seeds]

    def url(self, password=None, user=None, seeds=None):
        """The -b URL: redis-cluster://[user:password@]seeds
        ("rediss-cluster://" with tls); password defaults to the nodes'
        own, seeds (a list of "host:port") to seeds()."""
        pw = self.password if password is None else password
        u = "rediss-cluster://" if self.tls is not None else "redis-cluster://"
        if pw is not None or user is not None:
            u += "%s:%s@" % (user or "", pw or "")
        return u + ",".join(seeds if seeds is not None else self.seed_list())

    def server(self, port=None, node_id=None):
        """The ClusterNode with this port or node id (None if none)."""
        for s in self.servers:
            if (port is not None and s.port == port) or \
                    (node_id is not None and s.node_id == node_id):
                return s
        return None

    def running(self):
        """The servers running now."""
        return [s for s in self.servers if s.running()]

    def masters(self):
        """The running servers whose ROLE says master, in the order started."""
        return [s for s in self.running() if s.role() == "master"]

    def client(self, server, **kw):
        """A redis.Redis to one server (its password, TLS), with a
        connection of its own (close it with hangup())."""
        return server.client(**kw)

    # ---- slots ----

    @staticmethod
    def slot(key):
        """Redis's hash slot of a key name (see key_slot)."""
        return key_slot(key)

    @staticmethod
    def lock_slot(lock_key, prefix="dlock:"):
        """The slot of every Redis key of the lock lock_key."""
        return key_slot(lock_keys(lock_key, prefix)["lease"])

    def slot_map(self):
        """A running node's slot map as a list of CLUSTER_SLOTS master node
        ids (None where nobody owns the slot); the view of the first node
        (masters first) that answers."""
        for s in sorted(self.running(), key=lambda s: s.role() != "master"):
            v = s.slot_view()
            if v is not None:
                owners = [None] * CLUSTER_SLOTS
                for first, last, nid in v:
                    owners[first:last + 1] = [nid] * (last - first + 1)
                return owners
        raise AssertionError("no cluster node answers CLUSTER SLOTS")

    def slots_of(self, server):
        """The slots server owns, as the cluster (slot_map) says."""
        return [i for i, nid in enumerate(self.slot_map()) if nid == server.node_id]

    def master_of(self, slot):
        """The server that owns slot now: what the running masters that
        answer say, when they agree (waits up to 5 s for them to)."""
        def owner():
            ids = set()
            for s in self.running():
                if s.role() != "master":
                    continue
                v = s.slot_view()
                if v is None:
                    continue
                ids.add(next((nid for a, b, nid in v if a <= slot <= b), None))
            if len(ids) != 1:
                return None
            return self.server(node_id=ids.pop())
        return wait_until(owner, 5.0, 0.02, "the masters to agree on the owner of slot %d"
                          % slot)

    def master_of_lock(self, lock_key, prefix="dlock:"):
        """The server that owns the Redis keys of lock lock_key now."""
        return self.master_of(self.lock_slot(lock_key, prefix))

    def key_of_slot(self, slot, prefix="k"):
        """A lock key (str) whose lock_slot is slot."""
        for i in itertools.count():
            k = "%s-%d" % (prefix, i)
            if self.lock_slot(k) == slot:
                return k

    # ---- waiting ----

    def wait_ok(self, timeout=CLUSTER_READY_TIMEOUT):
        """Wait (bounded) until every running node says cluster_state:ok,
        every one has the same slot map, covering every slot, whose owners
        run, no running node sees another running one failing, and every
        running replica's link to its master is up."""
        def ok():
            running = self.running()
            ids = {s.node_id for s in running}
            views = set()
            for s in running:
                if s.cluster_info().get("cluster_state") != "ok":
                    return False
                v = s.slot_view()
                if v is None:
                    return False
                views.add(v)
                nv = s.nodes_view()
                if nv is None:
                    return False
                for nid, (_, flags, _) in nv.items():
                    if nid in ids and flags & {"fail", "fail?", "handshake", "noaddr"}:
                        return False
            if len(views) != 1:
                return False
            view = views.pop()
            if sum(b - a + 1 for a, b, _ in view) != CLUSTER_SLOTS:
                return False
            if not {nid for _, _, nid in view} <= ids:
                return False
            for s in running:
                if s.role() == "slave":
                    if s.replication().get("master_link_status") != "up":
                        return False
            return True
        wait_until(ok, timeout, 0.05, "the cluster to be ok on every node")

    # ---- faults ----

    def kill(self, server):
        """SIGKILL server (its data, never persisted, is gone); returns
        time.monotonic() just before the signal."""
        try:
            self._killed_slots[server.node_id] = self.slots_of(server)
        except AssertionError:
            pass
        t = time.monotonic()
        server.kill()
        return t

    def restart(self, server):
        """Start server again, on its ports, with its nodes.conf (it rejoins
        as the member it was; a master replaced meanwhile becomes a
        replica). Returns once it answers PING; wait_ok() waits for the
        cluster to take it back."""
        return server.restart()

    def wait_promoted(self, old_master, timeout=15.0):
        """Wait (bounded) until another server owns every slot old_master
        owned (when kill() ran, or now), as every running node says, says
        ROLE master, and every running node says cluster_state:ok; returns
        that server."""
        slots = self._killed_slots.get(old_master.node_id)
        if slots is None:
            slots = self.slots_of(old_master)
        if not slots:
            raise AssertionError("port %d owned no slot" % old_master.port)

        def promoted():
            new = set()
            for s in self.running():
                if s is old_master:
                    continue
                if s.cluster_info().get("cluster_state") != "ok":
                    return None
                v = s.slot_view()
                if v is None:
                    return None
                for slot in (slots[0], slots[-1]):
                    new.add(next((nid for a, b, nid in v if a <= slot <= b), None))
            if len(new) != 1:
                return None
            nid = new.pop()
            m = self.server(node_id=nid)
            if m is None or m is old_master or m.role() != "master":
                return None
            return m
        return wait_until(promoted, timeout, 0.01,
                          "a replica to take over the slots of port %d" % old_master.port)

    # ---- resharding ----

    def begin_migration(self, slot, dest):
        """The first steps of moving slot to dest: CLUSTER SETSLOT IMPORTING
        on dest, then MIGRATING on its owner; returns the owner."""
        src = self.master_of(slot)
        if src is dest:
            raise ValueError("slot %d is on port %d already" % (slot, dest.port))
        dest.expect_ok("CLUSTER", "SETSLOT", slot, "IMPORTING", src.node_id)
        src.expect_ok("CLUSTER", "SETSLOT", slot, "MIGRATING", dest.node_id)
        return src

    def migrate_keys(self, slot, src, dest, limit=None, pause=None):
        """MIGRATE the keys of slot from src to dest, at most limit of them,
        100 per MIGRATE, or one per MIGRATE with pause() s in between when
        pause is given; returns how many moved. Keys that expired between
        CLUSTER GETKEYSINSLOT and MIGRATE (a lease runs out at any moment:
        MIGRATE answers NOKEY) count as moved."""
        auth = [] if self.password is None else ["AUTH", self.password]
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
            src.expect_ok("MIGRATE", "127.0.0.1", dest.port, "", 0, 5000,
                          *(auth + ["KEYS"] + keys), also=("NOKEY",))
            moved += len(keys)
            if pause is not None:
                time.sleep(pause())
        return moved

    def finish_migration(self, slot, src, dest, timeout=10.0):
        """The last step: CLUSTER SETSLOT NODE dest on dest, src and the
        other masters; waits (bounded) until every running node's slot map
        gives slot to dest."""
        for s in [dest, src] + [m for m in self.masters() if m not in (dest, src)]:
            s.expect_ok("CLUSTER", "SETSLOT", slot, "NODE", dest.node_id)

        def moved():
            for s in self.running():
                v = s.slot_view()
                if v is None or next((nid for a, b, nid in v if a <= slot <= b),
                                     None) != dest.node_id:
                    return False
            return True
        wait_until(moved, timeout, 0.02, "every node to give slot %d to port %d"
                   % (slot, dest.port))

    def migrate_slot(self, slot, dest):
        """Move slot, with its keys, to the master dest (every step);
        returns the old owner."""
        src = self.begin_migration(slot, dest)
        self.migrate_keys(slot, src, dest)
        self.finish_migration(slot, src, dest)
        return src
