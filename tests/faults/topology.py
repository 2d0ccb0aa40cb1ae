"""The fault test's topologies: how each backend's processes are started,
faulted and stopped.

A Topology is made by a scenario (safety.Scenario, `sc` below), which gives
it the run's context: the TTL, the scale, the random source, aim() (wait
for the moment a fault is aimed at), record() (note a fault), duration(),
the daemons (a dict name -> Daemon that start() fills) and the lists of
failed checks and notes. The scenario injects the faults every topology
shares (a worker or a daemon killed or stopped); the topology injects its
own (FAULTS, aimed as its PLANS say) and stops its servers.

This module holds the base and the topologies of a single store: memory
(one daemon), split (two independent memory daemons, which the checker must
catch), redis and redis-cache (two daemons on one redis-server, the second
through a proxy), etcd and etcd-tls (two daemons on one etcd, the second
through a proxy). topo_sentinel, topo_redlock and topo_cluster hold the
others. elect_topology() makes the election twin of a topology (memory-elect,
redis-elect, etcd-elect, sentinel-elect, cluster-elect): its workers
campaign, and observers on each daemon follow the keys. multi_topology()
makes the multi-key twin (memory-multi, redis-multi, ...): half of its
workers take sets of keys with LOCKALL, the others single keys of the same
pool.
"""

import signal
import subprocess
import sys
import time

from dlocktest.certs import shared_certs
from dlocktest.daemon import Daemon
from dlocktest.env import PYTHON, subdir
from dlocktest.etcd_server import EtcdServer
from dlocktest.proc import free_port, read_line, reap, spawn
from dlocktest.redis_server import RedisServer

# what each round of a fault aims at, and how long the fault lasts: "1.5ttl"
# is 1.5 x the TTL, "0.3s" 0.3 s, "idle" sessions.idle_timeout_ms + 0.6 x the
# TTL; rounds go through the list in turn (SHORT runs the first). "renew" is
# the first renewal of a lock in Redis, and on etcd the next keepalive of the
# holder's daemon's lease (what renews its session locks); a restart's
# duration is how long the server stays down before it is started again.
# These are the plans of the faults every topology has; a topology's own
# are in its PLANS.
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
}
CLIENT_FAULTS = ["client_kill", "client_stop", "daemon_stop", "daemon_kill"]
# backend timeouts: short, so that faults bite quickly; the TTL floor is 3 x
# command_timeout_ms
BACKEND_CONF = {"connect_timeout_ms": 300, "command_timeout_ms": 300}
# the cached topologies (redis-cache, redlock-cache): released leases
# cached this long (backend.lease_cache_ms): every exclusive acquire
# reserves a block of fences, a busy answer makes the holder's daemon give
# its lease up rather than cache it, and a worker that locks again soon may
# take a cached lease (the scenario prints how often)
CACHE_CONF = {"lease_cache_ms": 20}
# the backends whose topologies have an election twin, "<backend>-elect"
# (elect_topology), with every fault of theirs. On redis, Sentinel,
# redis-cluster, redlock and etcd the daemons tell each other's leaders
# through the backend (redlock: a quorum read of the nodes)
ELECT_BACKENDS = ["memory", "redis", "etcd", "sentinel", "cluster", "redlock"]
# the backends whose topologies have a multi-key twin, "<backend>-multi"
# (multi_topology), with every fault of theirs
MULTI_BACKENDS = ["memory", "redis", "redis-cache", "etcd", "sentinel", "redlock", "cluster"]
# the pool of keys of a multi-key twin (the cluster: its three keys, one on
# each master); each LOCKALL takes 2 or 3 of them
MULTI_KEYS = 4
# the shortest term of a worker in the election scenarios (ms): a term is at
# most three changes of its key (the grant, a PROCLAIM, its end), and an
# observer more than 8 changes behind may miss terms (check_elect.py)
ELECT_HOLD_MIN_MS = 40
# (daemon, kind) of each worker of a topology of two daemons
TWO_DAEMONS = [("d0", "py2"), ("d0", "raw3push"), ("d0", "raw2"),
               ("d1", "raw3push"), ("d1", "py2"), ("d1", "raw3")]


def say(*a):
    """Print a line of the run's report at once."""
    print(*a)
    sys.stdout.flush()


def held(stop, resume, seconds):
    """stop(), then resume() seconds later whatever happens; returns
    (time.monotonic() before stop(), after resume())."""
    t0 = time.monotonic()
    stop()
    try:
        time.sleep(seconds)
    finally:
        resume()
    return t0, time.monotonic()


def stopped_across(server, failover, after):
    """SIGSTOP server (pause()) until failover() returns, and after s more,
    then SIGCONT it whatever happens; returns (stopped at, what failover()
    returned, the seconds it took, resumed at), times of time.monotonic()."""
    t0 = time.monotonic()
    server.pause()
    try:
        new = failover()
        took = time.monotonic() - t0
        time.sleep(after)
    finally:
        server.resume()
    return t0, new, took, time.monotonic()


def info_int(daemon, field):
    """An integer field of a daemon's INFO, None if it cannot say."""
    try:
        v = daemon.info().get(field)
    except (OSError, AssertionError):
        return None
    return int(v) if v is not None and v.isdigit() else None


class Topology:
    """The base: one memory daemon, d0. A subclass gives FAULTS (its own
    faults, beyond CLIENT_FAULTS), PLANS (theirs), TTL (ms, when the mode's
    does not suit it) and start(); it overrides inject() for its faults and
    stop() for its servers."""

    FAULTS = CLIENT_FAULTS
    PLANS = {}
    TTL = None
    CACHE = False             # backend.lease_cache_ms (CACHE_CONF) on
    EXPECT_VIOLATIONS = False  # the checker must find double grants
    DAEMONS = ("d0",)
    # (daemon, kind) of each worker, or (daemon, kind, role): "lock" (the
    # default) or "campaign"
    LAYOUT = [("d0", k) for k in ("py2", "raw2", "raw3", "raw3push", "raw3push")]
    # (daemon, kind) of the observers of each key (observer.py); none but in
    # the election scenarios
    OBSERVERS = ()
    HOLD_MIN_MS = 2           # the shortest hold of a worker
    KEYS = 2                  # the keys of the lock set (a cluster picks its own)
    REMOTE = False            # election twins: the daemons share a backend

    def __init__(self, sc):
        self.sc = sc

    @classmethod
    def plans(cls, fault):
        """What the rounds of a scenario of fault aim at."""
        return cls.PLANS.get(fault) or PLANS[fault]

    @classmethod
    def lease_ttl(cls, fault, ttl, scale):
        """The TTL (ms) of a scenario of fault: the mode's (ttl) or the
        topology's own, scaled."""
        return int((cls.TTL or ttl) * scale)

    def backend_conf(self):
        """The daemons' backend.* keys: BACKEND_CONF scaled (and CACHE_CONF)."""
        bconf = dict(BACKEND_CONF)
        if self.sc.scale > 1:
            bconf = {k: int(v * self.sc.scale) for k, v in bconf.items()}
        if self.CACHE:
            bconf.update(CACHE_CONF)
        return bconf

    def subdir(self, name):
        return subdir(self.sc.dir, name)

    def start(self, conf):
        """Start the servers and make the daemons (sc.daemons; the scenario
        starts them) with configuration conf (YAML text); a topology that
        chooses the lock set's keys sets sc.keys."""
        for n in self.DAEMONS:
            self.sc.daemons[n] = Daemon(conf, unix=False, directory=self.subdir(n))

    def renewal_due(self, dname):
        """When (time.monotonic()) daemon dname renews next, where the
        topology knows better than the grant's time (else None)."""
        return None

    def inject(self, kind, how, spec):
        """Inject one of FAULTS (not CLIENT_FAULTS), aimed at how, as spec
        says."""
        raise NotImplementedError(kind)

    def after_round(self):
        """Between rounds: until the topology is whole again."""

    def say_stats(self):
        """Print what the daemons counted of the faults."""
        if self.CACHE:
            hits = 0
            for d in self.sc.daemons.values():
                hits += info_int(d, "backend_cache_hits_total") or 0
            say("    lease cache: %d grants from cached leases" % hits)

    def stop(self):
        """Stop the servers (after the daemons); a server that does not end
        as it should is a failed check."""

    def wait_daemons(self, field, want, deadline, limit, what, kind):
        """Until every daemon's INFO says field is want (polled), at most
        until deadline; a failed check of this kind if not."""
        for name, d in sorted(self.sc.daemons.items()):
            while True:
                up = info_int(d, field)
                if up == want:
                    break
                if time.monotonic() > deadline:
                    self.sc.failures.append({
                        "kind": kind,
                        "text": "dlockd %s has %s of %d %s up %.0f s after the fault; "
                        "INFO %s stays below; log:\n%s"
                        % (name, up, want, what, limit, field, d.log())})
                    return
                time.sleep(0.05)


def elect_topology(base):
    """The election twin of topology class base: the same servers, faults
    and daemons; its workers campaign but the last of base's LAYOUT, which
    locks (a leader and a plain holder share the key's queue); a RESP2 and
    a RESP3 observer follow each key (on the daemons in turn: with two
    daemons, one on each, which sees the other's leaders through the
    backend); every term lasts ELECT_HOLD_MIN_MS at least. REMOTE: whether
    the daemons learn of changes through a shared backend (all but
    memory), which check_elect.py needs to know what an observer must
    see."""

    class ElectTopology(base):
        LAYOUT = ([(d, k, "campaign") for d, k in base.LAYOUT[:-1]] +
                  [tuple(base.LAYOUT[-1]) + ("lock",)])
        OBSERVERS = [(base.DAEMONS[i % len(base.DAEMONS)], k)
                     for i, k in enumerate(("raw2", "raw3"))]
        HOLD_MIN_MS = ELECT_HOLD_MIN_MS
        REMOTE = base is not Topology

    ElectTopology.__name__ = ElectTopology.__qualname__ = "Elect" + base.__name__
    return ElectTopology


def multi_topology(base):
    """The multi-key twin of topology class base: the same servers, faults
    and daemons, a pool of MULTI_KEYS keys; every other worker of base's
    LAYOUT (the second, the fourth, ...) takes sets of 2 or 3 of them at
    once with LOCKALL, the others lock single keys of the pool as in base,
    so that a set competes with single holders of its keys and with other
    sets."""

    class MultiTopology(base):
        LAYOUT = [tuple(e[:2]) + (("lockall",) if i % 2 else ("lock",))
                  for i, e in enumerate(base.LAYOUT)]
        KEYS = MULTI_KEYS

    MultiTopology.__name__ = MultiTopology.__qualname__ = "Multi" + base.__name__
    return MultiTopology


class SplitTopology(Topology):
    """Two independent memory daemons used as if they were one lock
    service: the checker must report double grants."""

    FAULTS = ["none"]
    PLANS = {"none": [("none", "2s")]}
    EXPECT_VIOLATIONS = True
    DAEMONS = ("d0", "d1")
    LAYOUT = [("d0", "py2"), ("d0", "raw3push"), ("d1", "raw2"), ("d1", "raw3push")]

    def inject(self, kind, how, spec):
        time.sleep(self.sc.duration(spec))


# ---- the processes of the single-store topologies ----

class Upstream:
    """What Daemon needs of a redis-server, for a daemon that reaches Redis
    through the proxy."""

    password = None

    def __init__(self, port):
        self.port = port

    def address(self):
        return "127.0.0.1:%d" % self.port


class Crash:
    """crash() for a server class."""

    def crash(self, down_s):
        """SIGKILL, wait down_s, start again on the same port(s) and data
        (waiting until it answers); returns (killed at, back at)."""
        t0 = time.monotonic()
        self.stop(signal.SIGKILL)
        time.sleep(down_s)
        self.restart()
        return t0, time.monotonic()


class BackendRedis(Crash, RedisServer):
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


class BackendEtcd(Crash, EtcdServer):
    """The backend's etcd, with a short election timeout: a one-member
    cluster elects itself only after it, at every start, so a restart takes
    about 0.4 s instead of 1.5 to 2 s. That also makes the time etcd adds to
    every lease when it becomes leader again (the election timeout) short."""

    def argv(self):
        return super().argv() + ["--heartbeat-interval", "20", "--election-timeout", "200"]


class Proxy:
    """faults.proxy between a daemon and its backend."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.port = None
        self.proc = None

    def start(self):
        for _ in range(3):
            self.port = free_port()
            self.proc = spawn([PYTHON, "-m", "faults.proxy", str(self.port),
                               str(self.upstream)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            try:
                if read_line(self.proc.stdout, 5.0).strip() == "ready":
                    return self
            except AssertionError:
                pass
            self.stop()
        raise AssertionError("the proxy did not start")

    def _do(self, cmd):
        self.proc.stdin.write((cmd + "\n").encode())
        self.proc.stdin.flush()
        line = read_line(self.proc.stdout, 5.0).split()
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
        reap(self.proc)
        self.proc = None


# ---- one store, two daemons ----

class StoreTopology(Topology):
    """Two daemons on one store (self.store): d0 straight to it, d1
    through a proxy that can black-hole its path. Faults: the store stopped
    (SIGSTOP) or crashed and started again, the path black-holed."""

    FAULTS = CLIENT_FAULTS + ["backend_stop", "backend_restart", "blackhole"]
    PLANS = {
        "backend_stop": [("renew", "1.3ttl"), ("lock", "1.3ttl"), ("renew", "0.6ttl"),
                         ("extend", "0.95ttl")],
        "backend_restart": [("lock", "0.3s"), ("renew", "1.2ttl"), ("renew", "0.3s")],
        "backend_restart_loss": [("renew", "0.3s"), ("lock", "1.2ttl"), ("lock", "0.3s")],
        # what the black hole held is delivered when it heals: after a short
        # one, while the leases it concerns may still run
        "blackhole": [("renew", "1.5ttl"), ("lock", "1.5ttl"), ("renew", "0.5ttl"),
                      ("extend", "0.95ttl")],
    }
    DAEMONS = ("d0", "d1")
    LAYOUT = TWO_DAEMONS

    def __init__(self, sc):
        super().__init__(sc)
        self.store = None   # the backend's server
        self.proxy = None

    def inject(self, kind, how, spec):
        sc = self.sc
        dur = sc.duration(spec)
        if kind == "blackhole":
            wid, aim = sc.aim_at(how, on_daemon="d1")
            t0 = self.proxy.block()
            try:
                time.sleep(dur)
            finally:
                t1 = self.proxy.heal()
            sc.record(kind, "d1", t0, t1, aim=aim, pid=self.proxy.proc.pid, planned=spec)
            return
        wid, aim = sc.aim_at(how)
        pid = self.store.pid
        if kind == "backend_stop":
            t0, t1 = held(self.store.pause, self.store.resume, dur)
            sc.record(kind, "backend", t0, t1, aim=aim, pid=pid, planned=spec)
        elif kind in ("backend_restart", "backend_restart_loss"):
            t0, t1 = self.store.crash(dur)
            sc.record(kind, "backend", t0, t1, aim=aim, pid=pid, new_pid=self.store.pid,
                      planned=spec)
        else:
            raise NotImplementedError(kind)

    def stop(self):
        if self.proxy is not None:
            self.proxy.stop()


class RedisTopology(StoreTopology):
    """Two daemons on one redis-server (appendonly yes, appendfsync always,
    but in backend_restart_loss: every lease is lost)."""

    FAULTS = StoreTopology.FAULTS[:-1] + ["backend_restart_loss", "blackhole"]

    def start(self, conf):
        bconf = self.backend_conf()
        persist = self.sc.fault != "backend_restart_loss"
        self.store = BackendRedis(persist, directory=self.subdir("redis")).start()
        self.proxy = Proxy(self.store.port).start()
        self.sc.daemons["d0"] = Daemon(conf, unix=False, backend="redis", redis=self.store,
                                       backend_conf=bconf, directory=self.subdir("d0"))
        self.sc.daemons["d1"] = Daemon(conf, unix=False, backend="redis",
                                       redis=Upstream(self.proxy.port), backend_conf=bconf,
                                       directory=self.subdir("d1"))

    def stop(self):
        super().stop()
        if self.store is not None:
            try:
                self.store.stop()
            except AssertionError as e:
                self.sc.failures.append({"kind": "redis exit", "text": str(e)})


class RedisCacheTopology(RedisTopology):
    """redis with released leases cached (CACHE_CONF)."""

    CACHE = True


class EtcdTopology(StoreTopology):
    """Two daemons on one etcd, the second through the proxy, whose several
    keep-alive connections and watch stream all go through it. A session
    lock lives on its daemon's etcd lease (backend.lease_ttl_ms), not on a
    TTL of its own: the lease is the scenario's TTL, so that durations (in
    multiples of the TTL) keep their meaning, and "renew" faults aim at the
    daemon's keepalive of that lease. Not backend_restart_loss: an etcd that
    loses its data sets its revisions, the fences, back, which is outside
    what dlockd promises (restoring etcd from an old snapshot sets revisions
    back)."""

    # the TTL is the daemons' etcd lease (backend.lease_ttl_ms): at least
    # 2 s, and whole seconds, which is all etcd counts
    TTL = 2000
    TLS = False
    # etcd has only a request timeout; backend.lease_ttl_ms is the TTL
    ETCD_CONF = {"request_timeout_ms": 300}

    @classmethod
    def lease_ttl(cls, fault, ttl, scale):
        return (super().lease_ttl(fault, ttl, scale) + 999) // 1000 * 1000

    def start(self, conf):
        sc = self.sc
        econf = {k: int(v * sc.scale) for k, v in self.ETCD_CONF.items()}
        econf["lease_ttl_ms"] = sc.ttl
        certs = shared_certs() if self.TLS else None
        if certs is not None:
            econf["tls"] = {"enabled": True, "ca_file": certs.ca,
                            "cert_file": certs.client_cert, "key_file": certs.client_key}
        self.store = BackendEtcd(directory=self.subdir("etcd"), tls=certs).start()
        self.proxy = Proxy(self.store.port).start()
        sc.daemons["d0"] = Daemon(conf, unix=False, backend="etcd", etcd=self.store,
                                  backend_conf=econf, directory=self.subdir("d0"))
        sc.daemons["d1"] = Daemon(
            conf, unix=False, backend="etcd",
            backend_conf=dict(econf, endpoints=["127.0.0.1:%d" % self.proxy.port]),
            directory=self.subdir("d1"))

    def renewal_due(self, dname):
        """When (time.monotonic()) the daemon dname sends its next keepalive
        of its lease, or None if it has no valid lease. The keepalives go
        every third of the lease's TTL from the grant on; the last one etcd
        answered was sent the TTL less what is left of the lease before now
        (INFO's backend_lease_ttl_ms and backend_lease_valid_ms; etcd/be_etcd_lease.c
        on_lease_timer, on_keepalive). One sent and not answered yet is
        passed over."""
        t0 = time.monotonic()
        try:
            info = self.sc.daemons[dname].info()
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

    def stop(self):
        super().stop()
        if self.store is None:
            return
        try:
            rc = self.store.stop()
        except AssertionError as e:
            rc = str(e)
        if rc not in (0, -signal.SIGTERM):
            self.sc.failures.append({"kind": "etcd exit",
                                     "text": "etcd exited with %s on SIGTERM; log:\n%s"
                                     % (rc, self.store.log())})


class EtcdTLSTopology(EtcdTopology):
    """etcd serving TLS and asking for client certificates
    (--client-cert-auth), the second daemon's TLS through the proxy."""

    TLS = True
