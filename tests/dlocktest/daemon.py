"""The daemon under test: Daemon starts one dlockd on a free loopback port
(and a Unix socket) with a configuration file of its own, on any backend,
and talks to it; run_dlockd() and run_dlock() run the binaries to their end."""

import os
import signal
import socket
import subprocess

import redis

from .cluster import RedisCluster
from .conf import BACKEND_SECTION_RE, backend_section
from .env import DLOCK, DLOCKD, START_TIMEOUT, STOP_TIMEOUT, WRAPPER, new_dir
from .proc import free_port, log_tail, reap, run_to_end, spawn, unix_accepts, wait_until
from .redis_server import RedisServer
from .resp import IO_TIMEOUT, Raw, parse_info


def port_pings(port, host="127.0.0.1"):
    """True if a dlockd on port answers PING (its event loop runs, so its
    signal handlers are in place)."""
    try:
        s = socket.create_connection((host, port), timeout=2)
    except OSError:
        return False
    try:
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        got = b""
        while not got.endswith(b"\r\n"):
            data = s.recv(100)
            if not data:
                break
            got += data
        return got == b"+PONG\r\n"
    except OSError:
        return False
    finally:
        s.close()



def redlock_url(servers, db=None, password=None):
    """The -b URL of a redlock backend on servers (RedisServers):
    redlock://[:password@]127.0.0.1:p1,127.0.0.1:p2,...[/db] (redlocks://
    when they serve TLS; password defaults to the first server's)."""
    servers = list(servers)
    if not servers:
        raise ValueError("a redlock URL needs at least one server")
    if password is None:
        password = next((r.password for r in servers if r.password is not None), None)
    u = "redlocks://" if any(r.tls is not None for r in servers) else "redlock://"
    if password is not None:
        u += ":%s@" % password
    u += ",".join(r.address() for r in servers)
    if db is not None:
        u += "/%d" % db
    return u


# the backends whose store a Daemon may be given in more than one way: the
# argument that gives it, and the backend_conf key that replaces it
_STORES = {"etcd": ("etcd=", "endpoints"), "redlock": ("redis=[...]", "nodes"),
           "redis-cluster": ("redis=", "nodes")}


class Daemon:
    """One dlockd process.

    config: YAML text (without "listen" unless listen_from_config) written to
    dlockd.yaml in the daemon's own directory; the daemon always gets -c so
    that no system configuration is read. By default it listens on
    127.0.0.1:<free port> and unix:<dir>/dlockd.sock through -l options.

    backend: "memory" (nothing is added), or "redis" with redis a
    RedisServer: then the daemon gets -b redis://127.0.0.1:<port> (or
    backend_url), or, when backend_conf (a dict of backend.* keys such as
    command_timeout_ms) is given, a "backend:" section with type, address
    (and password) appended to config. start() then also waits until INFO
    says backend_connected:1.

    backend "etcd" works the same way with etcd an EtcdServer: -b
    etcd://127.0.0.1:<port> (or backend_url), or with backend_conf a
    "backend:" section with type and endpoints (backend_conf's own
    "endpoints", a list or a string, replaces the server's), or, with
    neither, the backend section that config itself has.

    backend "redis-cluster" takes redis as a RedisCluster: -b cluster.url()
    (or backend_url; with a TLS cluster and no backend section in config, a
    backend.tls section with the CA is added), or with backend_conf a
    "backend:" section with type redis-cluster, nodes (the seeds;
    backend_conf's own "nodes" replaces them), the password of the cluster
    if it has one and, with TLS, tls.enabled and tls.ca_file (unless
    backend_conf has tls), then backend_conf's keys. start() waits for
    backend_connected:1.

    backend "redlock" takes redis as a list of RedisServers, the nodes: -b
    redlock://127.0.0.1:<p1>,127.0.0.1:<p2>,... (or backend_url), or with
    backend_conf a "backend:" section with type redlock, nodes (the
    servers' addresses; backend_conf's own "nodes" replaces them) and the
    password of the servers if they have one, or, with none of these, the
    backend section that config itself has. start() waits for
    backend_connected:1 (a majority of the nodes connected).

    env: a dict of variables added to the daemon's environment (such as
    NOTIFY_SOCKET). wrapper: an argv prefix that ends by exec'ing the rest
    (the daemon keeps the pid), e.g. unshare into a namespace of its own.
    """

    def __init__(self, config="", port=None, unix=True, listen_from_config=False,
                 extra_args=(), directory=None, backend="memory", redis=None,
                 backend_conf=None, backend_url=None, etcd=None, env=None, wrapper=()):
        self.dir = directory or new_dir("dlockd")
        self.wrapper = list(wrapper)
        self.port = port or free_port()
        self.sock = os.path.join(self.dir, "dlockd.sock") if unix else None
        self.conf = os.path.join(self.dir, "dlockd.yaml")
        self.config = config
        self.listen_from_config = listen_from_config
        self.extra_args = list(extra_args)
        self.logfile = os.path.join(self.dir, "dlockd.log")
        self.proc = None
        self.rc = None
        self.backend = backend
        self.redis = redis
        # the redis-cluster backend's RedisCluster
        self.cluster = redis if backend == "redis-cluster" else None
        # the redlock backend's nodes (RedisServers), in the order given
        self.nodes = list(redis) if backend == "redlock" and redis is not None else []
        self.backend_conf = backend_conf
        self.backend_url = backend_url
        self.etcd = etcd
        self.env = env
        if backend == "redlock" and isinstance(redis, RedisServer):
            raise ValueError("a redlock-backed Daemon takes redis= as a list of RedisServers")
        if backend == "redis-cluster" and redis is not None and \
                not isinstance(redis, RedisCluster):
            raise ValueError("a redis-cluster-backed Daemon takes redis= as a RedisCluster")
        if backend == "redis":
            if redis is None and backend_url is None:
                raise ValueError("a redis-backed Daemon needs redis= or backend_url=")
        elif backend in _STORES:
            arg, key = _STORES[backend]
            store = {"etcd": etcd, "redlock": self.nodes, "redis-cluster": redis}[backend]
            if (not store and backend_url is None and backend_conf is None
                    and not BACKEND_SECTION_RE.search(config)):
                raise ValueError("a %s-backed Daemon needs %s, backend_url=, backend_conf= or "
                                 "a backend section in config" % (backend, arg))
            if backend_conf is not None and not store and key not in backend_conf:
                raise ValueError("backend_conf without %s needs %s" % (key, arg))
        elif backend != "memory":
            raise ValueError("unknown backend %r" % backend)
        if backend != "memory" and backend_conf is not None:
            if BACKEND_SECTION_RE.search(config):
                raise ValueError("config has a backend section and backend_conf is given")
            if backend_url is not None:
                raise ValueError("backend_conf and backend_url are exclusive")

    def config_text(self):
        """The configuration file's text."""
        text = self.config
        conf = None
        if self.backend == "redis" and self.backend_conf is not None:
            conf = {"type": "redis", "address": self.redis.address()}
            if self.redis.password is not None:
                conf["password"] = self.redis.password
        elif self.backend == "redlock" and self.backend_conf is not None:
            conf = {"type": "redlock", "nodes": [r.address() for r in self.nodes]}
            password = next((r.password for r in self.nodes if r.password is not None),
                            None)
            if password is not None:
                conf["password"] = password
        elif self.backend == "etcd" and self.backend_conf is not None:
            conf = {"type": "etcd"}
            if self.etcd is not None:
                conf["endpoints"] = [self.etcd.endpoint()]
        elif self.backend == "redis-cluster" and self.cluster is not None:
            if self.backend_conf is not None:
                conf = {"type": "redis-cluster", "nodes": self.cluster.seed_list()}
                if self.cluster.password is not None:
                    conf["password"] = self.cluster.password
                if self.cluster.tls is not None and "tls" not in self.backend_conf:
                    conf["tls"] = {"enabled": True, "ca_file": self.cluster.tls.ca}
            elif self.cluster.tls is not None and not BACKEND_SECTION_RE.search(text):
                conf = {"tls": {"ca_file": self.cluster.tls.ca}}
        if conf is None:
            return text
        conf.update(self.backend_conf or {})
        if text and not text.endswith("\n"):
            text += "\n"
        return text + backend_section(conf)

    def argv(self, wrapped=True):
        a = self.wrapper + (WRAPPER if wrapped else []) + [DLOCKD, "-c", self.conf]
        if not self.listen_from_config:
            a += ["-l", "127.0.0.1:%d" % self.port]
            if self.sock:
                a += ["-l", "unix:" + self.sock]
        if self.backend == "redis" and self.backend_conf is None:
            a += ["-b", self.backend_url or self.redis.url()]
        if self.backend == "etcd" and self.backend_conf is None:
            if self.backend_url is not None:
                a += ["-b", self.backend_url]
            elif self.etcd is not None and not BACKEND_SECTION_RE.search(self.config):
                a += ["-b", self.etcd.url()]
        if self.backend == "redlock" and self.backend_conf is None:
            if self.backend_url is not None:
                a += ["-b", self.backend_url]
            elif self.nodes and not BACKEND_SECTION_RE.search(self.config):
                a += ["-b", redlock_url(self.nodes)]
        if self.backend == "redis-cluster" and self.backend_conf is None:
            if self.backend_url is not None:
                a += ["-b", self.backend_url]
            elif self.cluster is not None:
                a += ["-b", self.cluster.url()]
        return a + self.extra_args

    def start(self, wait_backend=True):
        """Start and wait (bounded) until every listener accepts (and, for
        the redis, redlock and etcd backends, until the backend is connected,
        unless wait_backend is false). A daemon that does not get there is
        killed."""
        if not os.path.exists(DLOCKD):
            raise AssertionError("dlockd binary missing: %s" % DLOCKD)
        with open(self.conf, "w") as f:
            f.write(self.config_text())
        self.rc = None
        with open(self.logfile, "ab") as log:
            self.proc = spawn(self.argv(), stdin=subprocess.DEVNULL,
                              stdout=log, stderr=log,
                              env=dict(os.environ, **self.env) if self.env else None)

        def exited():
            if self.proc.poll() is not None:
                self.rc = reap(self.proc)
                self.proc = None
                raise AssertionError("dlockd exited with %d at start-up:\n%s"
                                     % (self.rc, self.log()))

        def ready():
            exited()
            if not port_pings(self.port):
                return False
            return self.sock is None or unix_accepts(self.sock)

        try:
            wait_until(ready, START_TIMEOUT, 0.01, "dlockd to accept connections")
            if self.backend in ("redis", "redlock", "etcd", "redis-cluster") and wait_backend:
                def connected():
                    exited()
                    return self.info().get("backend_connected") == "1"
                wait_until(connected, START_TIMEOUT, 0.01,
                           "dlockd's INFO to show backend_connected:1")
        except BaseException:
            if self.proc is not None:
                log = self.log()
                self.stop(signal.SIGKILL)
                raise AssertionError("dlockd did not get ready; log:\n%s" % log)
            raise
        return self

    @property
    def pid(self):
        return self.proc.pid

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT):
        """Send sig and wait (bounded) for the exit; returns the status."""
        if self.proc is None:
            return self.rc
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.rc = reap(self.proc, timeout)
        self.proc = None
        return self.rc

    def stop_ok(self, test):
        """Stop with SIGTERM and make test assert the exit status is 0."""
        rc = self.stop()
        test.assertEqual(rc, 0, "dlockd exited with %s; log:\n%s" % (rc, self.log()))

    def stop_checked(self):
        """Stop with SIGTERM (if still running) and fail unless the exit
        status is 0; a daemon the test already stopped is left alone."""
        if self.proc is None:
            return
        rc = self.stop()
        if rc != 0:
            raise AssertionError("dlockd exited with %s; log:\n%s" % (rc, self.log()))

    def log(self, size=4000):
        """The last size characters of the daemon's log."""
        return log_tail(self.logfile, size)

    def addr(self):
        return "127.0.0.1:%d" % self.port

    def client(self, **kw):
        """A redis-py client with one connection of its own (RESP2)."""
        kw.setdefault("socket_timeout", IO_TIMEOUT)
        kw.setdefault("socket_connect_timeout", IO_TIMEOUT)
        return redis.Redis(host="127.0.0.1", port=self.port,
                           single_connection_client=True, **kw)

    def raw(self, unix=False, **kw):
        """A raw RESP connection (TCP, or the Unix socket)."""
        if unix:
            return Raw(unix=self.sock, **kw)
        return Raw(port=self.port, **kw)

    def ping(self, unix=False):
        """PING's reply on a connection of its own (TCP, or the Unix
        socket)."""
        c = self.raw(unix=unix)
        try:
            return c.cmd("PING")
        finally:
            c.close()

    def info(self):
        """INFO as a dict, on a connection of its own."""
        c = self.raw()
        try:
            return parse_info(c.cmd("INFO"))
        finally:
            c.close()

def run_dlockd(args, timeout=10.0):
    """Run dlockd to its end (-t, --version, ...): (status, stdout, stderr)."""
    return run_to_end([DLOCKD] + list(args), timeout)


def run_dlock(args, env=None, timeout=10.0):
    """Run the dlock CLI; returns (status, stdout, stderr) as str."""
    if not os.path.exists(DLOCK):
        raise AssertionError("dlock binary missing: %s" % DLOCK)
    e = dict(os.environ)
    e.update(env or {})
    return run_to_end([DLOCK] + list(args), timeout, env=e)

