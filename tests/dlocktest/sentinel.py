"""Redis Sentinel for the redis backend's tests: a master, a replica and
three sentinels on free loopback ports, each in a directory of its own.

    s = SentinelSetup().start()     # about 2 s: until every sentinel knows
    try:                            # the replica and the other sentinels
        d = SentinelDaemon(s).start()            # -b redis-sentinel://...
        old, t_kill = s.kill_master()            # SIGKILL
        port = s.wait_failover(15)               # the promoted replica's port
    finally:
        s.stop()

Every process is started through proc.spawn(), so one a test could not
stop is killed at exit, and stopped by its pid. The sentinels watch the
master under the name "mymaster" with quorum 2, down-after-milliseconds 1000
and failover-timeout 5000: a SIGKILLed master is replaced in about 2 to 4 s
(down-after, then the sentinels agree it is down, elect a leader, which
promotes the replica and waits for INFO to show it a master).

Environment: REDIS_SENTINEL_BIN, the sentinel (default redis-sentinel from
PATH, Debian package redis-sentinel; missing is a failure, not a skip);
REDIS_SERVER_BIN, the data nodes' redis-server, as in env.py.
"""

import os
import signal
import time

from .conf import backend_section
from .daemon import Daemon
from .env import new_dir, subdir
from .proc import ServerProcess, free_port, wait_until
from .redis_server import RedisServer, one_command, redis_first_reply
from .resp import Raw, text

REDIS_SENTINEL = os.environ.get("REDIS_SENTINEL_BIN", "redis-sentinel")

MASTER_NAME = "mymaster"
QUORUM = 2
DOWN_AFTER_MS = 1000  # sentinel down-after-milliseconds
FAILOVER_TIMEOUT_MS = 5000  # sentinel failover-timeout
READY_TIMEOUT = 30.0  # s for the sentinels to find the replica and each other
# flags of SENTINEL replicas / sentinels entries that mean "not usable now"
DOWN_FLAGS = ("s_down", "o_down", "disconnected")


def _entries(reply):
    """SENTINEL replicas / sentinels (RESP2: a list of flat lists) as a list
    of dicts of str -> str."""
    out = []
    for flat in reply:
        out.append({text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat), 2)})
    return out




class DataNode(RedisServer):
    """A redis-server of a Sentinel set-up: a master, or with replicaof
    (a port on 127.0.0.1) a replica of it. With password, every node has
    it as requirepass and as masterauth, as a node that may be promoted
    or demoted needs. The initial sync is diskless and starts at once."""

    def __init__(self, replicaof=None, **kw):
        super().__init__(**kw)
        self.replicaof = replicaof

    def argv(self):
        a = super().argv() + ["--repl-diskless-sync", "yes",
                              "--repl-diskless-sync-delay", "0"]
        if self.password is not None:
            a += ["--masterauth", self.password]
        if self.replicaof is not None:
            a += ["--replicaof", "127.0.0.1", str(self.replicaof)]
        return a


class Sentinel(ServerProcess):
    """One redis-sentinel process with a configuration file of its own
    (sentinel rewrites it: myid, the replicas and sentinels it found), which
    monitors a master on 127.0.0.1. With password the sentinel itself asks
    for it (requirepass) and gives it to the other sentinels
    (sentinel-pass); master_password is the data nodes' (auth-pass)."""

    NAME = "redis-sentinel"
    PACKAGE = "redis-sentinel"
    WAITING_FOR = "to answer PING"

    @staticmethod
    def binary():
        return REDIS_SENTINEL

    def __init__(self, master_port, name=MASTER_NAME, quorum=QUORUM,
                 down_after_ms=DOWN_AFTER_MS, failover_timeout_ms=FAILOVER_TIMEOUT_MS,
                 master_password=None, password=None, port=None, directory=None):
        self.dir = directory or new_dir("sentinel")
        self.fixed_port = port is not None
        self.port = port or free_port()
        self.master_port = master_port
        self.name = name
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.master_password = master_password
        self.password = password
        self.conf = os.path.join(self.dir, "sentinel.conf")
        self.conf_port = None  # the port the configuration file was written for
        self._process_init(os.path.join(self.dir, "sentinel.log"))

    def write_conf(self):
        lines = ["port %d" % self.port,
                 "bind 127.0.0.1",
                 "daemonize no",
                 'logfile ""',
                 "dir %s" % self.dir,
                 "sentinel resolve-hostnames no",
                 "sentinel monitor %s 127.0.0.1 %d %d" % (self.name, self.master_port,
                                                          self.quorum),
                 "sentinel down-after-milliseconds %s %d" % (self.name, self.down_after_ms),
                 "sentinel failover-timeout %s %d" % (self.name, self.failover_timeout_ms),
                 "sentinel parallel-syncs %s 1" % self.name]
        if self.master_password is not None:
            lines.append("sentinel auth-pass %s %s" % (self.name, self.master_password))
        if self.password is not None:
            lines += ["requirepass %s" % self.password,
                      "sentinel sentinel-pass %s" % self.password]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.conf_port = self.port

    def argv(self):
        # a new file for a new port; a restart on the same port keeps what
        # the sentinel wrote into it, as a restarted sentinel would
        if self.conf_port != self.port:
            self.write_conf()
        return [REDIS_SENTINEL, self.conf]

    def answers(self):
        got = redis_first_reply(self.port, self.password)
        if self.password is not None:
            return got == [b"+OK", b"+PONG"]
        return got is not None and got[0] == b"+PONG"

    def address(self):
        return "127.0.0.1:%d" % self.port

    def raw(self, **kw):
        """A raw connection to the sentinel, authenticated if it has a
        password."""
        c = Raw(port=self.port, **kw)
        if self.password is not None:
            r = c.cmd("AUTH", self.password)
            assert r == "OK", r
        return c

    def cmd(self, *args, timeout=2.0):
        """One command on a new connection; its reply (None if the sentinel
        cannot be reached or does not answer within timeout)."""
        if not self.running():
            return None
        return one_command(self.raw, args, timeout)

    def master_addr(self):
        """SENTINEL get-master-addr-by-name: (host, port), or None."""
        r = self.cmd("SENTINEL", "get-master-addr-by-name", self.name)
        if isinstance(r, list) and len(r) == 2:
            return text(r[0]), int(r[1])
        return None

    def replicas(self):
        """SENTINEL replicas as a list of dicts ([] if unreachable)."""
        r = self.cmd("SENTINEL", "replicas", self.name)
        return _entries(r) if isinstance(r, list) else []

    def sentinels(self):
        """SENTINEL sentinels (the other sentinels) as a list of dicts."""
        r = self.cmd("SENTINEL", "sentinels", self.name)
        return _entries(r) if isinstance(r, list) else []


def _up(entry):
    flags = entry.get("flags", "").split(",")
    return not any(f in flags for f in DOWN_FLAGS)


class SentinelSetup:
    """A master, a replica of it and n sentinels (3 by default) monitoring
    it as name, on free loopback ports. start() returns once the replica's
    link is up and every sentinel knows the replica and the other
    sentinels. stop() stops every process still running (sentinels first),
    resuming a stopped one; stop_checked() also fails if one of them did not
    exit 0.

    password: the data nodes' requirepass (and masterauth; the sentinels'
    auth-pass). sentinel_password: the sentinels' own requirepass.
    directory: where their directories and logs go (default: a new one
    under the scratch directory).

    nodes is [the first master, the first replica], sentinels the Sentinel
    objects; the roles change with failovers: master() and replica() ask a
    sentinel."""

    def __init__(self, name=MASTER_NAME, sentinels=3, quorum=QUORUM,
                 down_after_ms=DOWN_AFTER_MS, failover_timeout_ms=FAILOVER_TIMEOUT_MS,
                 password=None, sentinel_password=None, directory=None):
        self.name = name
        self.n = sentinels
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.password = password
        self.sentinel_password = sentinel_password
        self.dir = directory or new_dir("sentinel-setup")
        self.nodes = []
        self.sentinels = []
        self.last_master = None  # the master's port before the last fault

    # ---- start and stop ----

    def start(self, timeout=READY_TIMEOUT):
        """Start everything and wait (bounded) until it is ready; on a
        failure stop what was started and fail."""
        try:
            master = DataNode(password=self.password,
                              directory=subdir(self.dir, "master")).start()
            self.nodes.append(master)
            replica = DataNode(replicaof=master.port, password=self.password,
                               directory=subdir(self.dir, "replica")).start()
            self.nodes.append(replica)
            wait_until(lambda: replica.replication().get("master_link_status") == "up",
                       timeout, 0.01, "the replica's link to the master")
            for i in range(self.n):
                s = Sentinel(master.port, self.name, self.quorum, self.down_after_ms,
                             self.failover_timeout_ms, master_password=self.password,
                             password=self.sentinel_password,
                             directory=subdir(self.dir, "sentinel%d" % i))
                self.sentinels.append(s.start())
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout=READY_TIMEOUT, replica=True):
        """Until every live sentinel names the same master and knows every
        other live sentinel, and (with replica) knows a replica that is up,
        whose link is up."""
        def ready():
            live = self.live_sentinels()
            master = self.master_port()
            if master is None:
                return False
            for s in live:
                if s.master_addr() != ("127.0.0.1", master):
                    return False
                if replica and not any(_up(r) and int(r["port"]) != master
                                       for r in s.replicas()):
                    return False
                known = {int(o["port"]) for o in s.sentinels() if _up(o)}
                if not {o.port for o in live if o is not s} <= known:
                    return False
            if not replica:
                return True
            r = self.replica()
            return r is not None and r.replication().get("master_link_status") == "up"
        wait_until(ready, timeout, 0.05,
                   "every sentinel to know the master, the replica and the other sentinels")

    def stop(self):
        """Stop every process still running (SIGTERM; sentinels first);
        returns [(process, exit status)] of those it stopped."""
        out = []
        for p in self.sentinels + self.nodes:
            if p.proc is None:
                continue
            try:
                out.append((p, p.stop()))
            except AssertionError as e:
                out.append((p, str(e)))
        return out

    def stop_checked(self):
        """stop(), then fail unless each of them exited 0 (for cleanups)."""
        bad = ["%s on port %d exited with %s; log:\n%s" % (p.NAME, p.port, rc, p.log())
               for p, rc in self.stop() if rc != 0]
        if bad:
            raise AssertionError("\n".join(bad))

    # ---- addresses and roles ----

    def sentinel_addrs(self, live_only=False):
        """["127.0.0.1:port", ...] of the sentinels (every one started, or
        only those running)."""
        return [s.address() for s in self.sentinels if not live_only or s.running()]

    def url(self, name=None, password=None, user=None, db=None, sentinels=None):
        """The -b URL: redis-sentinel://[user:password@]host:port,.../name[/db]
        (password defaults to the data nodes'; sentinels, a list of
        "host:port", to every sentinel started)."""
        pw = self.password if password is None else password
        u = "redis-sentinel://"
        if pw is not None or user is not None:
            u += "%s:%s@" % (user or "", pw or "")
        u += ",".join(sentinels if sentinels is not None else self.sentinel_addrs())
        u += "/" + (name or self.name)
        if db is not None:
            u += "/%d" % db
        return u

    def yaml(self, **extra):
        """A backend section (YAML text) for these sentinels: type, sentinels,
        master_name, password and sentinel_password if set, then extra keys
        (a value None leaves a key out)."""
        conf = {"type": "redis", "sentinels": self.sentinel_addrs(),
                "master_name": self.name}
        if self.password is not None:
            conf["password"] = self.password
        if self.sentinel_password is not None:
            conf["sentinel_password"] = self.sentinel_password
        conf.update(extra)
        return backend_section({k: v for k, v in conf.items() if v is not None})

    def live_sentinels(self):
        return [s for s in self.sentinels if s.running()]

    def node(self, port):
        """The DataNode listening on port (None if not one of ours)."""
        for n in self.nodes:
            if n.port == port:
                return n
        return None

    def master_port(self):
        """The master's port as the first sentinel that answers names it."""
        for s in self.live_sentinels():
            a = s.master_addr()
            if a is not None:
                return a[1]
        return None

    def master(self):
        """The DataNode that the first sentinel that answers names master."""
        port = self.master_port()
        if port is None:
            raise AssertionError("no sentinel names a master")
        n = self.node(port)
        if n is None:
            raise AssertionError("the sentinels name an unknown master on port %d" % port)
        return n

    def replica(self):
        """A DataNode that the first sentinel that answers lists as a
        replica, and up (None if there is none)."""
        for s in self.live_sentinels():
            reps = s.replicas()
            for r in reps:
                n = self.node(int(r["port"]))
                if n is not None and n.running() and _up(r):
                    return n
            return None
        return None

    # ---- faults ----

    def kill_master(self):
        """SIGKILL the current master; returns (its DataNode, when:
        time.monotonic() just before the signal)."""
        m = self.master()
        self.last_master = m.port
        t = time.monotonic()
        m.stop(signal.SIGKILL)
        return m, t

    def stop_master_for(self, seconds):
        """SIGSTOP the current master, wait seconds, SIGCONT it; returns
        (its DataNode, stopped at, resumed at) in time.monotonic()."""
        m = self.master()
        self.last_master = m.port
        t0 = time.monotonic()
        m.pause()
        try:
            time.sleep(seconds)
        finally:
            m.resume()
        return m, t0, time.monotonic()

    def kill_sentinel(self, i):
        """SIGKILL sentinel i; returns it."""
        s = self.sentinels[i]
        s.stop(signal.SIGKILL)
        return s

    def restart_sentinel(self, i, timeout=READY_TIMEOUT):
        """Start sentinel i again on its port with the configuration it
        rewrote, and wait until it names the same master as the others and
        the sentinels know each other again (and, if the others know an
        up replica, until it does too)."""
        s = self.sentinels[i]
        replica = self.replica() is not None  # asked before s has a say
        s.restart()
        self.wait_ready(timeout, replica=replica)
        return s

    def rejoin(self, node, timeout=READY_TIMEOUT):
        """Start a killed data node again on its port, as a replica of the
        current master (without its old data, which a master killed and
        replaced must not bring back), and wait until the set-up is ready
        again: its link is up and every sentinel lists it."""
        node.replicaof = self.master_port()
        node.restart()
        self.wait_ready(timeout)
        return node

    def wait_failover(self, timeout=15.0, old=None):
        """Wait (bounded) until every live sentinel names, through SENTINEL
        get-master-addr-by-name, a master other than old (default: the one
        before the last kill_master / stop_master_for) and that node's ROLE
        says master; returns its port."""
        if old is None:
            old = self.last_master
        if old is None:
            raise ValueError("wait_failover: no master before a fault is known")

        def moved():
            addrs = {s.master_addr() for s in self.live_sentinels()}
            if len(addrs) != 1:
                return None
            a = addrs.pop()
            if a is None or a[1] == old:
                return None
            n = self.node(a[1])
            if n is None or n.role() != "master":
                return None
            return a[1]
        return wait_until(moved, timeout, 0.01,
                          "the sentinels to name a new master (the old one on port %d)" % old)


class SentinelDaemon(Daemon):
    """A dlockd on the sentinels of a SentinelSetup, with -b setup.url()
    (or url), or with yaml=True through a backend section of its
    configuration (setup.yaml()). backend_conf is a dict of further
    backend.* keys (timeouts, key_prefix, ...) written to the file either
    way. Other keyword arguments are Daemon's. start() waits until INFO
    says backend_connected:1."""

    def __init__(self, setup, config="", yaml=False, backend_conf=None, url=None, **kw):
        super().__init__(config, backend="redis", backend_url=url or setup.url(), **kw)
        self.setup = setup
        self.yaml = yaml
        self.extra_conf = dict(backend_conf or {})

    def config_text(self):
        text = self.config
        if text and not text.endswith("\n"):
            text += "\n"
        if self.yaml:
            return text + self.setup.yaml(**self.extra_conf)
        if self.extra_conf:
            text += backend_section(self.extra_conf)
        return text

    def argv(self, wrapped=True):
        a = super().argv(wrapped)
        if self.yaml:
            i = a.index("-b")
            del a[i:i + 2]
        return a
