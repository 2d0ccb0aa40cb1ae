"""The election section of the benchmark suite: bench/run.py runs it after the
lock runs (ids BACKEND/elect/CASE, chosen with --only like the others).

On the memory backend against one fresh dlockd, on redis, redlock and etcd
against two, A and B, on one redis-server (redlock: REDLOCK_NODES) or etcd
of the section's own (the leader's
daemon is never the standby's or the observer's: what crosses is told by the
backend alone):

  handover       a leader's connection closes (its process died) while a
                 standby's CAMPAIGN waits on another connection (on redis and
                 etcd on the other daemon, the leaders alternating between
                 A and B): the time from the close to the standby's grant
  handover-kill  (redis, redlock, etcd) the leader's daemon is SIGKILLed while a
                 standby waits on the other: the time from the kill to the
                 grant, which the lease decides (a CAMPAIGN TTL of KILL_TTL_MS
                 on redis and redlock, the daemon's backend.lease_ttl_ms
                 on etcd)
  observe        an observer waits in OBSERVE key AFTER rev on a connection of
                 its own (on B); the leader (on A) sends PROCLAIM: the time
                 from the PROCLAIM sent to the observer's answer
  observe-follow the same with OBSERVE key FOLLOW (RESP3): the time from the
                 PROCLAIM sent to the push
  idle           memory: IDLE_OBSERVERS sessions each wait in OBSERVE on a key
                 of its own (and as many follow one with RESP3 pushes); over
                 IDLE_WINDOW s: the daemon's CPU, the backend's operations and
                 the daemon's resident memory per observer. redis,
                 redlock, etcd:
                 IDLE_OBSERVERS sessions on B follow COST_KEYS keys (half of
                 them led through A, half free); the server's operations over
                 COST_WINDOW s with them and, before they came, without them
                 (redis-server's INFO commandstats calls, of every node on
                 redlock, etcd's gRPC messages
                 received), B's own backend requests, B's CPU and resident
                 memory per observer
  native-handover, native-handover-resign, native-handover-kill
                 (etcd) etcd's own Election (clientv3/concurrency, the default
                 session TTL) on the same etcd, built from bench/native/ with
                 Debian's golang-go and golang-etcd-server-dev, offline: a
                 standby's Campaign (its own client and session) returns after
                 the leader's session is closed (its lease revoked), after the
                 leader's Resign, or after the leader's process is SIGKILLed
                 (its session TTL runs out)

The clients are raw RESP sockets in this process (Python): a latency
includes a few tens of microseconds of it, small beside the millisecond
goals (issue: handover within a few milliseconds plus one wake-up, within
one watch event on etcd; observe p99 <= 10 ms on loopback; idle observers
cost the backend nothing and the daemon a few KiB each).
"""

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import time

from dlocktest.daemon import Daemon
from dlocktest.etcd_server import EtcdServer
from dlocktest.proc import raise_nofile, vm_rss_kib
from dlocktest.redis_server import RedisServer, commandstats
from dlocktest.resp import Push, encode, parse_info
from dlocktest.sessions import close_hard

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(os.path.dirname(HERE), BUILD)

ROUNDS = 200                # handovers and changes timed on the memory backend
CROSS_ROUNDS = 100          # and between two daemons on redis and etcd
KILL_ROUNDS = 3             # daemons SIGKILLed
KILL_TTL_MS = 2000          # the leader's lease then (CAMPAIGN TTL, lease_ttl_ms)
NATIVE_ROUNDS = 40          # etcd Election handovers after a close or Resign
NATIVE_KILL_ROUNDS = 1      # and after a kill: each waits out the session TTL (60 s)
IDLE_OBSERVERS = 1000
IDLE_WINDOW = 3.0           # s the memory backend's idle observers are watched
COST_WINDOW = 10.0          # s the redis and etcd servers are watched, twice
COST_KEYS = 4               # keys the redis and etcd observers follow
WAIT_MS = 20000             # a standby's CAMPAIGN WAIT, an OBSERVE's WAIT
GOPATH = "/usr/share/gocode"    # Debian's Go sources (golang-etcd-server-dev)
NATIVE_SRC = os.path.join(HERE, "native", "election.go")
NATIVE_BIN = os.path.join(BUILD, "bench", "election")
CASES = {
    "memory": ("handover", "observe", "observe-follow", "idle"),
    "redis": ("handover", "handover-kill", "observe", "observe-follow", "idle"),
    "redlock": ("handover", "handover-kill", "observe", "observe-follow", "idle"),
    "etcd": ("handover", "handover-kill", "observe", "observe-follow", "idle",
             "native-handover", "native-handover-resign", "native-handover-kill"),
}
BACKENDS = tuple(CASES)
NOT_YET = ("redis-cluster (not in this section yet)",)
REDLOCK_NODES = 3           # redis-servers of the redlock daemons
# the daemons of handover-kill: a lease short enough to wait out (redis
# takes no TTL under 3 x command_timeout_ms)
KILL_CONF = {"redis": {"command_timeout_ms": KILL_TTL_MS // 4},
             "redlock": {"command_timeout_ms": KILL_TTL_MS // 4},
             "etcd": {"lease_ttl_ms": KILL_TTL_MS}}
# INFO's count of the requests a daemon sent its backend
DAEMON_OPS = {"memory": "backend_ops_total", "redis": "backend_commands_total",
              "redlock": "backend_commands_total",
              "etcd": "backend_requests_total"}


def ids():
    """The ids of the section's runs, for --only and --list."""
    return ["%s/elect/%s" % (b, c) for b in BACKENDS for c in CASES[b]]


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


def info(conn):
    """INFO on conn as a dict."""
    return parse_info(conn.cmd("INFO"))


def wait_for(pred, what, timeout=10.0):
    """Poll pred (every ms) until it is true; AssertionError after timeout s."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("%s: not within %.0f s" % (what, timeout))
        time.sleep(0.001)


def queued(ctl, key, backend):
    """Whether a CAMPAIGN for key waits on the daemon of ctl (a connection to
    it) and, on redis and etcd, has been told busy by the backend (so that
    the grant has to come from the leader's end, not from a first try)."""
    st = ctl.cmd("STATUS", key)
    if dict(zip(st[::2], st[1::2]))[b"waiters"] < 1:
        return False
    if backend == "memory":
        return True
    inf = info(ctl)
    if int(inf["backend_inflight"]) != 0:
        return False
    return backend != "etcd" or int(inf["backend_keys_waiting"]) >= 1


def granted(g, what):
    if not isinstance(g, list) or len(g) != 3:
        raise AssertionError("%s got %r" % (what, g))


class Pair:
    """The daemons of a backend's cases: a and b, two daemons on one server
    (the same daemon twice on the memory backend), with a control connection
    to each (ctl[0], ctl[1]), started on first use."""

    def __init__(self, backend, server):
        self.backend = backend
        self.server = server    # the RedisServer or EtcdServer, or None
        self.daemons = []

    def new_daemon(self, backend_conf=None):
        """A dlockd on the pair's server (started; the caller stops it)."""
        config = "limits:\n  max_clients: %d\n" % (2 * IDLE_OBSERVERS + 100)
        kw = {"backend": self.backend, "unix": False, "backend_conf": backend_conf}
        if self.backend in ("redis", "redlock"):
            kw["redis"] = self.server   # redlock: the list of nodes
        elif self.backend == "etcd":
            kw["etcd"] = self.server
        return Daemon(config, **kw).start()

    def get(self):
        """(a, b, [ctl of a, ctl of b])."""
        if not self.daemons:
            self.daemons.append(self.new_daemon())
            self.daemons.append(self.daemons[0] if self.backend == "memory"
                                else self.new_daemon())
            self.ctl = [d.raw() for d in self.daemons]
        return self.daemons[0], self.daemons[1], self.ctl

    def stop(self):
        for c in getattr(self, "ctl", []):
            c.close()
        for d in {id(d): d for d in self.daemons}.values():
            d.stop()
        self.daemons = []


def handover(pair, key):
    """Rounds of: a leader, a standby waiting (on the other daemon); the
    leader's socket closes. Leaders alternate between the daemons."""
    pair.get()
    ds, ctl = pair.daemons, pair.ctl
    rounds = ROUNDS if pair.backend == "memory" else CROSS_ROUNDS
    out = []
    standby = ds[0].raw()
    granted(standby.cmd("CAMPAIGN", key, "standby-0"), "the first leader")
    for i in range(rounds):
        on = (i + 1) % 2
        leader, standby = standby, ds[on].raw()
        standby.send(encode("CAMPAIGN", key, "standby-%d" % (i + 1), "WAIT", WAIT_MS))
        # the standby is queued before the leader goes
        wait_for(lambda: queued(ctl[on], key, pair.backend), "the standby to queue")
        t0 = time.monotonic()
        leader.s.close()
        g = standby.read()
        out.append(time.monotonic() - t0)
        granted(g, "the standby")
    standby.close()
    return timing(out)


def handover_kill(pair, key):
    """KILL_ROUNDS times: a leader on a daemon of its own with a short lease,
    a standby waiting on b; the leader's daemon is SIGKILLed."""
    conf = KILL_CONF[pair.backend]
    b = pair.new_daemon(conf)
    ctl = b.raw()
    out = []
    try:
        for i in range(KILL_ROUNDS):
            a = pair.new_daemon(conf)
            try:
                leader = a.raw()
                ttl = ["TTL", KILL_TTL_MS] if pair.backend != "etcd" else []
                granted(leader.cmd("CAMPAIGN", key, "doomed-%d" % i, *ttl), "the leader")
                standby = b.raw(timeout=KILL_TTL_MS / 1000.0 + 30)
                standby.send(encode("CAMPAIGN", key, "standby-%d" % i, "WAIT", WAIT_MS))
                wait_for(lambda: queued(ctl, key, pair.backend), "the standby to queue")
                t0 = time.monotonic()
                a.stop(signal.SIGKILL)
                g = standby.read()
                out.append(time.monotonic() - t0)
                granted(g, "the standby")
                standby.cmd("RESIGN", key)
                standby.close()
                leader.close()
            finally:
                a.stop(signal.SIGKILL)
    finally:
        ctl.close()
        b.stop()
    rec = timing(out)
    rec["lease_ms"] = KILL_TTL_MS
    return rec


def observe(pair, key):
    """Rounds of: PROCLAIM on a, and the observer's OBSERVE AFTER on b
    answered (after one round not timed: b starts watching the key)."""
    a, b, ctl = pair.get()
    rounds = ROUNDS if pair.backend == "memory" else CROSS_ROUNDS
    leader, obs = a.raw(), b.raw()
    granted(leader.cmd("CAMPAIGN", key, "v0"), "the leader")
    rev = obs.cmd("LEADER", key)[2]
    out = []
    for i in range(rounds + 1):
        obs.send(encode("OBSERVE", key, "AFTER", rev, "WAIT", WAIT_MS))
        # until it waits (it asks after the newest)
        wait_for(lambda: int(info(ctl[1])["observe_waiting"]) >= 1, "the observer to wait")
        value = b"v%d" % (i + 1)
        t0 = time.monotonic()
        leader.send(encode("PROCLAIM", key, value))
        got = obs.read()
        if i:
            out.append(time.monotonic() - t0)
        leader.read()
        if not isinstance(got, list) or got[0] != value:
            raise AssertionError("the observer got %r, not %r" % (got, value))
        rev = got[2]
    for c in (leader, obs):
        c.close()
    return timing(out)


def observe_follow(pair, key):
    """Rounds of: PROCLAIM on a, and the push to a RESP3 session on b that
    follows the key (after one round not timed)."""
    a, b, _ = pair.get()
    rounds = ROUNDS if pair.backend == "memory" else CROSS_ROUNDS
    leader, f = a.raw(), b.raw()
    granted(leader.cmd("CAMPAIGN", key, "v0"), "the leader")
    f.cmd("HELLO", 3)
    f.cmd("OBSERVE", key, "FOLLOW")
    out = []
    for i in range(rounds + 1):
        value = b"v%d" % (i + 1)
        t0 = time.monotonic()
        leader.send(encode("PROCLAIM", key, value))
        while True:
            p = f.read()
            if not isinstance(p, Push) or p[:2] != [b"observe", key.encode()]:
                raise AssertionError("the follower got %r" % (p,))
            if p[2][0] == value:
                break       # (an older value may come first)
        if i:
            out.append(time.monotonic() - t0)
        leader.read()
    for c in (leader, f):
        c.close()
    return timing(out)


def idle_memory(pair, prefix):
    """IDLE_OBSERVERS waiting OBSERVEs and as many RESP3 follows."""
    d, _, ctl = pair.get()
    inf0 = ctl[0]
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
            inf = info(inf0)
            if (int(inf["observe_waiting"]) >= IDLE_OBSERVERS and
                    int(inf["observe_follows"]) >= IDLE_OBSERVERS):
                break
            if time.monotonic() > deadline:
                raise AssertionError("observers not all waiting: %r" % inf)
            time.sleep(0.05)
        rss1 = vm_rss_kib(d.pid)
        ops0 = int(info(inf0)["backend_ops_total"])
        c0 = cpu_s(d.pid)
        time.sleep(IDLE_WINDOW)
        c1 = cpu_s(d.pid)
        ops1 = int(info(inf0)["backend_ops_total"])
        return {"observers": 2 * IDLE_OBSERVERS,
                "rss_per_observer_kib": (rss1 - rss0) / (2.0 * IDLE_OBSERVERS),
                "daemon_cpu_pct": 100.0 * (c1 - c0) / IDLE_WINDOW,
                "backend_ops_per_s": (ops1 - ops0) / IDLE_WINDOW}
    finally:
        close_hard(socks)


class ServerOps:
    """The operations a redis-server or etcd has been asked for so far, by
    name: redis-server's INFO commandstats calls (the counting INFO left
    out), etcd's gRPC messages received by method (each request, keep-alive
    and watch request on a stream; /metrics is no gRPC call)."""

    def __init__(self, backend, server):
        self.backend = backend
        self.server = server
        nodes = [server] if backend == "redis" else server if backend == "redlock" else []
        self.conns = [n.raw() for n in nodes]

    def counts(self):
        """{command or gRPC method: count so far} (redlock: of every node)."""
        if self.conns:
            out = {}
            for conn in self.conns:
                for name, n in commandstats(conn).items():
                    if name != "info":
                        out[name] = out.get(name, 0) + n
            return out
        out = {}
        for (name, labels), v in self.server.metrics().items():
            if name == "grpc_server_msg_received_total":
                method = dict(labels).get("grpc_method", "?")
                out[method] = out.get(method, 0) + int(v)
        return out

    def close(self):
        for conn in self.conns:
            conn.close()


def delta(c0, c1):
    """The counts of c1 that grew since c0, by name."""
    return {k: v - c0.get(k, 0) for k, v in sorted(c1.items()) if v != c0.get(k, 0)}


def idle_cost(pair, prefix):
    """IDLE_OBSERVERS RESP3 sessions on b, each following one of COST_KEYS
    keys (the even ones led through a): the server's operations per second
    over COST_WINDOW without them, then with them; b's requests to it, CPU
    and resident memory per observer."""
    a, b, ctl = pair.get()
    keys = ["%s-%d" % (prefix, i) for i in range(COST_KEYS)]
    leaders = []
    socks = []
    ops = ServerOps(pair.backend, pair.server)
    field = DAEMON_OPS[pair.backend]

    def window():
        s0, d0, c0 = ops.counts(), int(info(ctl[1])[field]), cpu_s(b.pid)
        time.sleep(COST_WINDOW)
        s1, d1, c1 = ops.counts(), int(info(ctl[1])[field]), cpu_s(b.pid)
        grown = delta(s0, s1)
        return (sum(grown.values()) / COST_WINDOW, (d1 - d0) / COST_WINDOW,
                100.0 * (c1 - c0) / COST_WINDOW, grown)
    try:
        for k in keys[::2]:
            c = a.raw()
            granted(c.cmd("CAMPAIGN", k, "leader-of-" + k), "a leader")
            leaders.append(c)
        time.sleep(0.5)
        base = window()
        rss0 = vm_rss_kib(b.pid)
        for i in range(IDLE_OBSERVERS):
            s = socket.create_connection(("127.0.0.1", b.port), timeout=10)
            socks.append(s)
            s.sendall(encode("HELLO", 3) + encode("OBSERVE", keys[i % COST_KEYS], "FOLLOW"))
        wait_for(lambda: int(info(ctl[1])["observe_follows"]) >= IDLE_OBSERVERS,
                 "the observers to follow", 30)
        time.sleep(0.5)     # their first reads done
        rss1 = vm_rss_kib(b.pid)
        held = window()
        return {"observers": IDLE_OBSERVERS, "keys": COST_KEYS,
                "rss_per_observer_kib": (rss1 - rss0) / float(IDLE_OBSERVERS),
                "daemon_cpu_pct": held[2], "daemon_cpu_pct_without": base[2],
                "backend_ops_per_s": held[0], "backend_ops_per_s_without": base[0],
                "daemon_backend_ops_per_s": held[1],
                "daemon_backend_ops_per_s_without": base[1],
                "backend_ops_by_name": held[3], "backend_ops_by_name_without": base[3],
                "window_s": COST_WINDOW}
    finally:
        close_hard(socks)
        for c in leaders:
            c.close()
        ops.close()


def native_build():
    """Build the etcd Election helper (bench/native/election.go) into the
    build directory unless it is newer than its source: (path, None), or
    (None, why it cannot be) when Go or Debian's etcd client sources are
    missing or the build fails (offline: GO111MODULE=off, GOPATH=GOPATH)."""
    if (os.path.exists(NATIVE_BIN) and
            os.path.getmtime(NATIVE_BIN) >= os.path.getmtime(NATIVE_SRC)):
        return NATIVE_BIN, None
    go = shutil.which("go")
    if go is None:
        return None, "no go command (apt-get install golang-go golang-etcd-server-dev)"
    pkg = os.path.join(GOPATH, "src", "go.etcd.io", "etcd", "clientv3", "concurrency")
    if not os.path.isdir(pkg):
        return None, "no %s (apt-get install golang-etcd-server-dev)" % pkg
    os.makedirs(os.path.dirname(NATIVE_BIN), exist_ok=True)
    env = dict(os.environ, GO111MODULE="off", GOPATH=GOPATH, GOFLAGS="", GOPROXY="off",
               GOCACHE=os.path.join(BUILD, "bench", "go-cache"))
    try:
        p = subprocess.run([go, "build", "-o", NATIVE_BIN, NATIVE_SRC], env=env,
                           cwd=os.path.dirname(NATIVE_SRC), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, "go build: %s" % e
    if p.returncode != 0:
        return None, "go build failed: %s" % p.stdout.decode(errors="replace").strip()[-500:]
    return NATIVE_BIN, None


def native(pair, key, how):
    """etcd's Election on the pair's etcd: how is "close", "resign" or "kill"."""
    binary, why = native_build()
    if binary is None:
        return {"skipped": why}
    rounds = NATIVE_KILL_ROUNDS if how == "kill" else NATIVE_ROUNDS
    argv = [binary, "-endpoint", pair.server.endpoint(), "-prefix", "/" + key,
            "-rounds", str(rounds), how]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60 + rounds * (90 if how == "kill" else 10))
    if p.returncode != 0:
        raise AssertionError("%s: %s" % (" ".join(argv[:1] + argv[-1:]),
                                         p.stderr.decode(errors="replace").strip()))
    doc = json.loads(p.stdout.decode())
    rec = timing(doc["handover_s"])
    rec["session_ttl_s"] = doc["ttl_s"]
    return rec


class Nodes(list):
    """The redis-servers of the redlock daemons."""

    def stop(self):
        for n in self:
            n.stop()


def start_server(backend):
    """The server of backend's daemons (None for memory)."""
    if backend == "redis":
        return RedisServer().start()
    if backend == "redlock":
        return Nodes(RedisServer().start() for _ in range(REDLOCK_NODES))
    if backend == "etcd":
        return EtcdServer().start()
    return None


def run_case(pair, case, key):
    if case == "handover":
        return handover(pair, key)
    if case == "handover-kill":
        return handover_kill(pair, key)
    if case == "observe":
        return observe(pair, key)
    if case == "observe-follow":
        return observe_follow(pair, key)
    if case == "idle":
        return (idle_memory if pair.backend == "memory" else idle_cost)(pair, key)
    if case == "native-handover":
        return native(pair, key, "close")
    if case == "native-handover-resign":
        return native(pair, key, "resign")
    if case == "native-handover-kill":
        return native(pair, key, "kill")
    raise ValueError("unknown case %r" % case)


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
        try:
            server = start_server(backend)
        except (AssertionError, OSError, ValueError) as e:
            why = "%s could not be started: %s" % (backend, str(e).strip().splitlines()[0])
            for rid in mine:
                recs.append({"id": rid, "backend": backend, "case": rid.rsplit("/", 1)[1],
                             "skipped": why})
                log("%-36s skipped: %s" % (rid, why))
            continue
        pair = Pair(backend, server)
        try:
            for rid in mine:
                case = rid.rsplit("/", 1)[1]
                rec = {"id": rid, "backend": backend, "case": case}
                t = time.monotonic()
                try:
                    key = "bench-elect-%s-%d" % (case, os.getpid())
                    rec.update(run_case(pair, case, key))
                except (AssertionError, OSError, ValueError, KeyError,
                        subprocess.TimeoutExpired) as e:
                    rec["error"] = str(e)[:2000]
                recs.append(rec)
                log("%-36s %s (%.1f s)" % (rid, summary(rec), time.monotonic() - t))
        finally:
            pair.stop()
            if server is not None:
                server.stop()
    return recs


def ms(us):
    return "%.2f ms" % (us / 1000.0) if us >= 1000 else "%.0f µs" % us


def summary(rec):
    if "error" in rec:
        return "ERROR: %s" % rec["error"].splitlines()[0]
    if "skipped" in rec:
        return "skipped: %s" % rec["skipped"]
    if rec["case"] == "idle" and rec["backend"] == "memory":
        return "%d observers: %.2f KiB each, daemon CPU %.2f %%, backend %.1f ops/s" % (
            rec["observers"], rec["rss_per_observer_kib"], rec["daemon_cpu_pct"],
            rec["backend_ops_per_s"])
    if rec["case"] == "idle":
        return ("%d observers on %d keys: %.2f KiB each, daemon CPU %.2f %% (%.2f %% "
                "without), %s %.2f ops/s (%.2f without), the daemon's %.2f/s (%.2f without)"
                % (rec["observers"], rec["keys"], rec["rss_per_observer_kib"],
                   rec["daemon_cpu_pct"], rec["daemon_cpu_pct_without"], rec["backend"],
                   rec["backend_ops_per_s"], rec["backend_ops_per_s_without"],
                   rec["daemon_backend_ops_per_s"], rec["daemon_backend_ops_per_s_without"]))
    if rec["case"] == "handover-kill" or rec["case"].startswith("native-") or \
            rec["p99_us"] >= 100000:
        s = "p50 %s, p99 %s, max %s over %d" % (ms(rec["p50_us"]), ms(rec["p99_us"]),
                                               ms(rec["max_us"]), rec["n"])
        if "lease_ms" in rec:
            s += " (lease %d ms)" % rec["lease_ms"]
        if "session_ttl_s" in rec:
            s += " (session TTL %d s)" % rec["session_ttl_s"]
        return s
    return "p50 %.0f µs, p99 %.0f µs, max %.0f µs over %d" % (
        rec["p50_us"], rec["p99_us"], rec["max_us"], rec["n"])


def markdown(recs):
    """The section of results.md."""
    if not recs:
        return ""
    lines = ["", "## Election and observing", "",
             "Memory: one dlockd. redis, redlock, etcd: two dlockd, A and B, on one "
             "server (redlock: %d redis-servers); the "
             "standby and the observer are never on the leader's daemon. "
             "Handover: a leader's connection closes, a standby's waiting CAMPAIGN is "
             "granted. Handover-kill: the leader's daemon is SIGKILLed (lease %d ms: the "
             "CAMPAIGN TTL on redis and redlock, backend.lease_ttl_ms on etcd). Observe: PROCLAIM sent "
             "until a waiting OBSERVE AFTER is answered; observe-follow: until the RESP3 "
             "push. Idle: on memory, observers waiting (OBSERVE AFTER) and following "
             "(RESP3), the daemon left alone for %.0f s; on redis, redlock and etcd, %d RESP3 "
             "sessions following %d keys (half led), the server's operations (redis "
             "commandstats calls, summed over redlock's nodes, etcd gRPC messages received) over %.0f s with them and "
             "without them. native-handover: etcd's own Election (clientv3/concurrency, "
             "default session) on the same etcd, after the leader's session is closed, "
             "after its Resign (-resign) or after its process is killed (-kill). Not measured: %s." %
             (REDLOCK_NODES, KILL_TTL_MS, IDLE_WINDOW, IDLE_OBSERVERS, COST_KEYS, COST_WINDOW,
              ", ".join(NOT_YET)), "",
             "| run | result |", "|---|---|"]
    for r in recs:
        lines.append("| %s | %s |" % (r["id"], summary(r)))
    return "\n".join(lines) + "\n"
