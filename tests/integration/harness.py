"""Helpers of the dlockd integration tests.

Starts real dlockd processes (and the redis-server and etcd processes of the
redis and etcd backends) on free loopback ports in a temporary directory,
talks to them with redis-py and with a raw RESP2/RESP3 socket client, and
makes sure every process a test starts is stopped whatever happens.

Environment (set by run.sh):
  DLOCKD_BIN       the daemon under test
  DLOCK_BIN        the dlock command-line client
  DLOCK_BENCH_BIN  the benchmark's load generator, dlock-bench
  REDIS_SERVER_BIN the redis-server of the redis-backed tests (default:
                   redis-server from PATH; missing is a failure, not a skip)
  ETCD_BIN         the etcd of the etcd-backed tests (default: etcd from
                   PATH; missing is a failure, not a skip)
  ETCD_GATEWAY     0: etcd runs with its JSON gateway off
                   (--enable-grpc-gateway=false), and the tests read and
                   write etcd through etcdctl (default 1: the gateway is on)
  ETCDCTL_BIN      the etcdctl (API v3) the tests use when the gateway is off
                   or etcd serves TLS (default: etcdctl from PATH, Debian
                   package etcd-client)
  DLOCKD_TEST_TMP  a scratch directory that run.sh removes at exit; every
                   process started here is recorded in its pids/ directory
                   so that run.sh can stop it if this interpreter dies
"""

import atexit
import base64
import http.client
import itertools
import json
import os
import re
import select
import shlex
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import redis

# the standard module, under another name: tests/faults has a resource.py of
# its own, which a later "import resource" must find
import resource as rlimit  # noqa: E402
del sys.modules["resource"]

# the safety test's RESP client (tests/faults/resp.py) is shared for encoding
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "faults"))
import resp  # noqa: E402

DLOCKD = os.environ.get("DLOCKD_BIN", os.path.abspath("build/dlockd"))
DLOCK = os.environ.get("DLOCK_BIN", os.path.abspath("build/dlock"))
DLOCK_BENCH = os.environ.get("DLOCK_BENCH_BIN", os.path.abspath("build/dlock-bench"))
# a command prefix for every dlockd started, e.g. "valgrind -q --error-exitcode=99"
WRAPPER = shlex.split(os.environ.get("DLOCKD_WRAPPER", ""))
PYTHON = "/usr/bin/python3"
REDIS_CLI = "redis-cli"
REDIS_SERVER = os.environ.get("REDIS_SERVER_BIN", "redis-server")
ETCD = os.environ.get("ETCD_BIN", "etcd")
ETCDCTL = os.environ.get("ETCDCTL_BIN", "etcdctl")
# whether etcd's JSON gateway is on (the default of EtcdServer's gateway)
ETCD_GATEWAY = os.environ.get("ETCD_GATEWAY", "1").strip().lower() not in ("0", "no", "false",
                                                                             "off")

START_TIMEOUT = 20.0 if WRAPPER else 5.0  # seconds a daemon may take to accept
STOP_TIMEOUT = 20.0 if WRAPPER else 5.0  # seconds a daemon may take to exit
IO_TIMEOUT = 10.0  # socket timeout of every client connection
# latency bounds are multiplied by this when the daemon runs under a wrapper
SLOWDOWN = 5.0 if WRAPPER else 1.0

TOKEN_RE = re.compile(rb"\A[0-9a-f]{32}\Z")


def _tmp_root():
    root = os.environ.get("DLOCKD_TEST_TMP")
    if not root:
        # run without run.sh: clean up after ourselves
        root = tempfile.mkdtemp(prefix="dlockd-it.")
        os.environ["DLOCKD_TEST_TMP"] = root
        atexit.register(shutil.rmtree, root, True)
    os.makedirs(os.path.join(root, "pids"), exist_ok=True)
    return root


TMP = _tmp_root()
_seq = itertools.count(1)
_seq_lock = threading.Lock()


def new_dir(prefix):
    """A new empty directory under the scratch directory."""
    with _seq_lock:
        n = next(_seq)
    path = os.path.join(TMP, "%s-%d" % (prefix, n))
    os.makedirs(path)
    return path


def unique_key(name="k"):
    """A key no other test uses."""
    with _seq_lock:
        n = next(_seq)
    return "it/%d/%s/%d" % (os.getpid(), name, n)


# ---- processes ----

_procs = {}  # pid -> Popen of every live process started by the tests
_procs_lock = threading.Lock()


def spawn(argv, **kw):
    """Start a process and record it so that it is stopped at exit.

    Returns the Popen; reap it with reap() (or let the exit handler kill it).
    """
    p = subprocess.Popen(argv, **kw)
    with _procs_lock:
        _procs[p.pid] = p
    with open(os.path.join(TMP, "pids", str(p.pid)), "w"):
        pass
    return p


def forget(p):
    """Stop tracking p, which has been waited for."""
    with _procs_lock:
        _procs.pop(p.pid, None)
    try:
        os.unlink(os.path.join(TMP, "pids", str(p.pid)))
    except FileNotFoundError:
        pass


def reap(p, timeout=STOP_TIMEOUT):
    """Wait (bounded) for p to exit and return its status; kill it if it
    does not exit in time, and then fail."""
    try:
        rc = p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(timeout)
        forget(p)
        raise AssertionError("process %d (%s) did not exit within %.1f s"
                             % (p.pid, p.args, timeout))
    forget(p)
    return rc


def track_pid(pid):
    """Record a process that a child started (e.g. the command of `dlock
    run`) so that it is killed at exit too. Undo with untrack_pid."""
    with open(os.path.join(TMP, "pids", str(pid)), "w"):
        pass


def untrack_pid(pid):
    try:
        os.unlink(os.path.join(TMP, "pids", str(pid)))
    except FileNotFoundError:
        pass


def kill_pid(pid):
    """SIGKILL a process this test started indirectly, and untrack it."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    untrack_pid(pid)


def _kill_all():
    with _procs_lock:
        procs = list(_procs.values())
    for p in procs:
        if p.poll() is None:
            try:
                p.kill()
            except OSError:
                pass
    for p in procs:
        try:
            p.wait(2)
        except subprocess.TimeoutExpired:
            pass
        forget(p)
    # processes started by children (their pid files are left)
    pdir = os.path.join(TMP, "pids")
    for name in os.listdir(pdir):
        try:
            os.kill(int(name), signal.SIGKILL)
        except (ValueError, ProcessLookupError, PermissionError):
            pass
        try:
            os.unlink(os.path.join(pdir, name))
        except FileNotFoundError:
            pass


atexit.register(_kill_all)


def _on_signal(signum, frame):
    _kill_all()
    os._exit(128 + signum)


def install_signal_handlers():
    """Make SIGTERM / SIGINT stop every started process, then exit."""
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)


# ---- waiting ----

def wait_until(pred, timeout=5.0, interval=0.005, what="condition"):
    """Poll pred() until it is true; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1f s waiting for %s"
                                 % (timeout, what))
        time.sleep(interval)


def free_port():
    """A loopback TCP port that was free a moment ago."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def port_accepts(port, host="127.0.0.1"):
    try:
        s = socket.create_connection((host, port), timeout=0.5)
    except OSError:
        return False
    s.close()
    return True


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


def unix_accepts(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(0.5)
    try:
        s.connect(path)
    except OSError:
        return False
    finally:
        s.close()
    return True


def log_tail(path, size=4000):
    """The last size characters of a log file ("" if it does not exist)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()[-size:]
    except FileNotFoundError:
        return ""


def process_stopped(pid):
    """Whether the process is stopped (state T in /proc/PID/stat); True
    where /proc cannot tell."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2:].startswith(("T", "t"))


def grant_through_outage(conn, key, wait_ms, pause, limit=25.0):
    """Read the answer to a LOCK key ... WAIT sent on Raw conn; while the
    backend is unreachable the answer may be -BACKEND: then ask again (after
    pause s, with WAIT wait_ms) until granted, within limit s. Returns
    (when granted, the grant); anything else fails."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        g = conn.read()
        if isinstance(g, list):
            return time.monotonic(), g
        if not (isinstance(g, Err) and g.code == "BACKEND"):
            raise AssertionError("waiter for %s got %r" % (key, g))
        time.sleep(pause)
        conn.send(Raw.encode("LOCK", key, "WAIT", wait_ms))
    raise AssertionError("%s not granted" % key)


def report(text):
    """A figure for the log of the run (counts, latencies)."""
    sys.stdout.write("\n    %s\n" % text)
    sys.stdout.flush()


def vm_rss_kib(pid):
    """A process's resident set size (VmRSS in /proc/PID/status), KiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for process %d" % pid)


def raise_nofile(n):
    """Raise this process's soft limit of open files to at least n (up to
    the hard limit); fails if the hard limit is lower."""
    soft, hard = rlimit.getrlimit(rlimit.RLIMIT_NOFILE)
    if soft >= n:
        return
    if hard != rlimit.RLIM_INFINITY and hard < n:
        raise AssertionError("open files: need %d descriptors, the hard limit is %d "
                             "(ulimit -Hn)" % (n, hard))
    rlimit.setrlimit(rlimit.RLIMIT_NOFILE, (n, hard))


def open_sessions(port, n, timeout=30.0):
    """n TCP connections to 127.0.0.1:port, each a real session: it sent PING
    and got PONG. Returns the sockets (blocking, with timeout); close them
    with close_hard()."""
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
            socks.append(s)
            s.sendall(b"PING\r\n")
        for s in socks:
            got = b""
            while not got.endswith(b"\r\n"):
                data = s.recv(64)
                if not data:
                    raise AssertionError("a session was closed at its PING: %r" % got)
                got += data
            if got != b"+PONG\r\n":
                raise AssertionError("PING answered %r" % got)
    except BaseException:
        close_hard(socks)
        raise
    return socks


def close_hard(socks):
    """Close sockets with a reset (SO_LINGER 0): no TIME_WAIT left holding a
    local port, however many there are."""
    for s in socks:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        s.close()


def read_within(conn, seconds):
    """The next reply or push on a Raw connection, or None if nothing
    complete arrives within seconds."""
    old = conn.s.gettimeout()
    conn.settimeout(max(seconds, 0.001))
    try:
        return conn.read()
    except (socket.timeout, TimeoutError):
        return None
    finally:
        conn.settimeout(old)


def read_line(pipe, timeout=5.0):
    """One line from a child's stdout pipe, waiting at most timeout s."""
    deadline = time.monotonic() + timeout
    buf = b""
    fd = pipe.fileno()
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("no line from child within %.1f s (got %r)"
                                 % (timeout, buf))
        r, _, _ = select.select([fd], [], [], left)
        if r:
            c = os.read(fd, 1)
            if not c:
                raise AssertionError("child closed its output (got %r)" % buf)
            buf += c
    return buf.decode()


# ---- TLS certificates (made with the openssl command) ----

def openssl(*args, cwd):
    """Run the openssl command in cwd; fail with its output if it fails."""
    p = subprocess.run(["openssl"] + list(args), cwd=cwd, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    if p.returncode != 0:
        raise AssertionError("openssl %s: %s" % (" ".join(args), p.stdout.decode()))


# a new EC P-256 key (fast to make, and every TLS stack here takes it)
_NEW_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def make_ca(d, name, cn=None):
    """A self-signed CA valid for two days: name.crt and name.key in d."""
    openssl("req", "-x509", *_NEW_KEY, "-keyout", name + ".key", "-out", name + ".crt",
            "-days", "2", "-subj", "/CN=%s" % (cn or name), cwd=d)


def make_cert(d, name, ca, cn, san=None):
    """A certificate name.crt (key name.key) in d for cn, signed by the CA
    ca (ca.crt and ca.key in d), valid for two days, with subjectAltName san
    (e.g. "DNS:localhost,IP:127.0.0.1") if given."""
    openssl("req", *_NEW_KEY, "-keyout", name + ".key", "-out", name + ".csr",
            "-subj", "/CN=%s" % cn, cwd=d)
    ext = os.path.join(d, name + ".ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=%s\n" % san if san else "basicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey", ca + ".key",
            "-CAcreateserial", "-out", name + ".crt", "-days", "2", "-extfile", ext, cwd=d)


class Certs:
    """The paths of the certificates make_certs() makes in one directory
    (PEM files):

      ca, ca_key                  a CA (ca.crt, ca.key)
      server_cert, server_key     CN localhost, DNS:localhost, IP:127.0.0.1,
                                  signed by the CA (server.crt, server.key)
      client_cert, client_key     CN test client, signed by the CA
                                  (client.crt, client.key)
      other_ca, other_ca_key      an unrelated CA (other-ca.crt, other-ca.key)
    """

    def __init__(self, directory):
        self.dir = directory
        self.ca = self.path("ca.crt")
        self.ca_key = self.path("ca.key")
        self.server_cert = self.path("server.crt")
        self.server_key = self.path("server.key")
        self.client_cert = self.path("client.crt")
        self.client_key = self.path("client.key")
        self.other_ca = self.path("other-ca.crt")
        self.other_ca_key = self.path("other-ca.key")

    def path(self, name):
        """The file name in the certificates' directory."""
        return os.path.join(self.dir, name)

    def context(self, ca=None, client_cert=False):
        """A client ssl.SSLContext that verifies servers (and their names)
        against ca (default: the CA) and, with client_cert, presents the
        client certificate."""
        ctx = ssl.create_default_context(cafile=ca or self.ca)
        if client_cert:
            ctx.load_cert_chain(self.client_cert, self.client_key)
        return ctx


def make_certs(directory=None):
    """Make the test certificates (see Certs) in directory (default: a new
    one); returns their Certs. Takes a fraction of a second."""
    d = directory or new_dir("certs")
    make_ca(d, "ca", "dlockd test CA")
    make_ca(d, "other-ca", "dlockd other CA")
    make_cert(d, "server", "ca", "localhost", "DNS:localhost,IP:127.0.0.1")
    make_cert(d, "client", "ca", "test client")
    return Certs(d)


_shared_certs = None
_shared_certs_lock = threading.Lock()


def shared_certs():
    """The Certs of this process, made on first use (do not change them)."""
    global _shared_certs
    with _shared_certs_lock:
        if _shared_certs is None:
            _shared_certs = make_certs()
        return _shared_certs


# ---- redis-server (the redis backend's store) ----

def redis_first_reply(port, password=None, host="127.0.0.1", ssl_context=None,
                      commands=("PING",)):
    """Connect to a redis-server on port (over TLS with ssl_context, the
    server's name being localhost), send AUTH password (if given) and the
    commands, and return the first line of each reply (bytes, without
    CRLF), or None if it cannot be reached, does not finish a TLS handshake,
    or closes first."""
    try:
        s = socket.create_connection((host, port), timeout=2)
    except OSError:
        return None
    try:
        if ssl_context is not None:
            s = ssl_context.wrap_socket(s, server_hostname="localhost")
        cmds = [("AUTH", password)] if password is not None else []
        cmds += [(c,) if isinstance(c, str) else tuple(c) for c in commands]
        s.sendall(b"".join(Raw.encode(*c) for c in cmds))
        got = b""
        while got.count(b"\r\n") < len(cmds):
            data = s.recv(100)
            if not data:
                return None
            got += data
        return got.split(b"\r\n")[:len(cmds)]
    except (OSError, ssl.SSLError):
        return None
    finally:
        s.close()


def redis_pings(port, password=None, host="127.0.0.1", ssl_context=None):
    """True if a redis-server on port answers PING (after AUTH when it has
    a password; over TLS with ssl_context)."""
    got = redis_first_reply(port, password, host, ssl_context)
    want = [b"+PONG"] if password is None else [b"+OK", b"+PONG"]
    return got == want


class ServerProcess:
    """What RedisServer and EtcdServer share: one server process in a
    directory of its own, started (retrying on other ports if a free port
    was taken meanwhile), paused, resumed and stopped by its pid. Every
    process is recorded by spawn(), so one a test could not stop is killed
    at exit. A subclass gives NAME, PACKAGE, WAITING_FOR, binary(), argv(),
    answers() and new_ports()."""

    NAME = "server"          # for messages
    PACKAGE = None           # its Debian package
    WAITING_FOR = "to answer"
    PORT_TAKEN = "address already in use"   # in its log, any case
    START_LIMIT = START_TIMEOUT
    POLL = 0.005

    def _process_init(self, logfile):
        self.logfile = logfile
        self.proc = None
        self.rc = None
        self.paused = False

    def start(self):
        """Start and wait (bounded) until it answers. A missing binary is a
        failure of the test, never a skip."""
        if shutil.which(self.binary()) is None:
            raise AssertionError("%s is missing: %r not found (Debian package %s)"
                                 % (self.NAME, self.binary(), self.PACKAGE))
        for attempt in range(3):
            self.rc = None
            self.paused = False
            with open(self.logfile, "ab") as log:
                self.proc = spawn(self.argv(), stdin=subprocess.DEVNULL,
                                  stdout=log, stderr=log)
            try:
                wait_until(self._ready, self.START_LIMIT, self.POLL,
                           "%s %s" % (self.NAME, self.WAITING_FOR))
                self.started()
                return self
            except _PortTaken:
                # a free port was taken in the meantime: try others
                if attempt == 2 or not self.new_ports():
                    raise AssertionError("%s could not listen on its ports:\n%s"
                                         % (self.NAME, self.log()))
            except BaseException:
                self._kill()
                raise
        raise AssertionError("not reached")

    def started(self):
        """Called once it answers."""

    def _ready(self):
        if self.proc.poll() is not None:
            rc = reap(self.proc)
            self.proc = None
            if self.PORT_TAKEN in self.log().lower():
                raise _PortTaken()
            raise AssertionError("%s exited with %d at start-up:\n%s"
                                 % (self.NAME, rc, self.log()))
        return self.answers()

    def _kill(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.rc = reap(self.proc)
            self.proc = None
            self.paused = False

    @property
    def pid(self):
        return self.proc.pid

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def pause(self):
        """SIGSTOP: the server takes connections (the kernel queues them)
        but answers nothing until resume(). Returns once the kernel shows
        the process stopped (a thread on another CPU may run on for a
        moment after kill() returns)."""
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True
        wait_until(lambda: process_stopped(self.proc.pid), 2.0, 0.001,
                   "%s to stop on SIGSTOP" % self.NAME)

    def resume(self):
        """SIGCONT after pause()."""
        if self.proc is not None and self.paused:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT):
        """Send sig (after resuming a paused server) and wait (bounded) for
        the exit; returns the status."""
        if self.proc is None:
            return self.rc
        if self.proc.poll() is None:
            if self.paused and sig != signal.SIGKILL:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(sig)
        self.paused = False
        self.rc = reap(self.proc, timeout)
        self.proc = None
        return self.rc

    def log(self):
        return log_tail(self.logfile)


class RedisServer(ServerProcess):
    """One redis-server process: loopback only, no persistence, in a
    directory of its own (see ServerProcess). stop() with SIGTERM makes it
    exit 0.

    password sets requirepass (the default user's password).

    tls (a Certs, e.g. shared_certs()) serves TLS only, on port: the
    server's certificate and key are tls.server_cert and tls.server_key,
    clients' certificates are checked against tls.ca, and with auth_clients
    every client must present one (tls.client_cert does). client(), raw()
    and the readiness check speak TLS then; url() is rediss://.

    users is a list of ACL rules, one per user, as redis.conf's "user"
    directive takes them, e.g. "alice on >secret ~dlock:* &dlock:* +evalsha"
    or "default off". The default user stays as it is (or as password makes
    it) unless a rule names it; with it off, a NOAUTH reply to the readiness
    PING counts as an answer. host is the loopback address it binds."""

    NAME = "redis-server"
    PACKAGE = "redis-server"
    WAITING_FOR = "to answer PING"

    @staticmethod
    def binary():
        return REDIS_SERVER  # read at each start: a test may change it

    def __init__(self, port=None, password=None, directory=None, tls=None,
                 auth_clients=False, users=None, host="127.0.0.1"):
        self.dir = directory or new_dir("redis")
        self.host = host
        self.fixed_port = port is not None
        self.port = port or free_port()
        self.password = password
        self.tls = tls
        self.auth_clients = bool(auth_clients)
        self.users = list(users or [])
        for rule in self.users:
            if not shlex.split(rule):
                raise ValueError("an empty ACL rule")
        self._process_init(os.path.join(self.dir, "redis.log"))

    def argv(self):
        a = [REDIS_SERVER, "--bind", self.host,
             "--save", "", "--appendonly", "no", "--dir", self.dir,
             "--daemonize", "no", "--logfile", "", "--loglevel", "notice"]
        if self.tls is None:
            a += ["--port", str(self.port)]
        else:
            a += ["--port", "0", "--tls-port", str(self.port),
                  "--tls-cert-file", self.tls.server_cert,
                  "--tls-key-file", self.tls.server_key,
                  "--tls-ca-cert-file", self.tls.ca,
                  "--tls-auth-clients", "yes" if self.auth_clients else "no"]
        if self.password is not None:
            a += ["--requirepass", self.password]
        for rule in self.users:
            # one argument per word: redis-server quotes each argument
            a += ["--user"] + shlex.split(rule)
        return a

    def ssl_context(self, ca=None, client_cert=None):
        """A client ssl.SSLContext for this server (None without tls):
        verifies it against ca (default: the CA) and presents the client
        certificate when client_cert (default: when it wants one)."""
        if self.tls is None:
            return None
        if client_cert is None:
            client_cert = self.auth_clients
        return self.tls.context(ca=ca, client_cert=client_cert)

    def answers(self):
        got = redis_first_reply(self.port, self.password, self.host, self.ssl_context())
        if got is None:
            return False
        if self.password is not None:
            return got == [b"+OK", b"+PONG"]
        return got[0] == b"+PONG" or got[0].startswith(b"-NOAUTH")

    def new_ports(self):
        if self.fixed_port:
            return False
        self.port = free_port()
        return True

    def stop_checked(self):
        """Stop with SIGTERM; fail unless it exits 0 (for cleanups)."""
        rc = self.stop()
        if rc not in (0, None):
            raise AssertionError("redis-server exited with %s; log:\n%s" % (rc, self.log()))

    def kill(self):
        """SIGKILL (a crash: the data, never persisted, is gone) and wait
        for the exit. A later stop_checked() does not count it as a
        failure. Returns the status."""
        rc = self.stop(signal.SIGKILL)
        self.rc = None
        return rc

    def restart(self):
        """Start again after stop() or kill(), on the same port and in the
        same directory, empty (no persistence); fails rather than move to
        another port if the port is taken."""
        fixed, self.fixed_port = self.fixed_port, True
        try:
            return self.start()
        finally:
            self.fixed_port = fixed

    def address(self):
        return "%s:%d" % (self.host, self.port)

    def url(self, db=None, password=None):
        """The -b URL of this server: redis://[:password@]127.0.0.1:port[/db]
        (rediss:// with tls; password defaults to the server's)."""
        pw = self.password if password is None else password
        u = "rediss://" if self.tls is not None else "redis://"
        if pw is not None:
            u += ":%s@" % pw
        u += self.address()
        if db is not None:
            u += "/%d" % db
        return u

    def client(self, db=0, **kw):
        """A redis-py client of the redis-server itself, with a connection
        of its own (close it with hangup()): the server's password unless
        password= (and username=) are given; over TLS with tls, verifying
        the server and presenting the client certificate when the server
        wants one."""
        kw.setdefault("socket_timeout", IO_TIMEOUT)
        kw.setdefault("socket_connect_timeout", IO_TIMEOUT)
        kw.setdefault("password", self.password)
        if self.tls is not None:
            kw.setdefault("ssl", True)
            kw.setdefault("ssl_ca_certs", self.tls.ca)
            kw.setdefault("ssl_cert_reqs", "required")
            kw.setdefault("ssl_check_hostname", True)
            if self.auth_clients:
                kw.setdefault("ssl_certfile", self.tls.client_cert)
                kw.setdefault("ssl_keyfile", self.tls.client_key)
        return redis.Redis(host=self.host, port=self.port, db=db,
                           single_connection_client=True, **kw)

    def raw(self, user=None, password=None, **kw):
        """A raw RESP connection to the redis-server (over TLS with tls),
        authenticated: as user with password if given, else with the
        server's password if it has one."""
        if self.tls is not None:
            kw.setdefault("ssl_context", self.ssl_context())
        c = Raw(port=self.port, host=self.host, **kw)
        auth = None
        if user is not None:
            auth = ("AUTH", user, password)
        elif password is not None or self.password is not None:
            auth = ("AUTH", password if password is not None else self.password)
        if auth is not None:
            r = c.cmd(*auth)
            assert r == "OK", r
        return c


class _PortTaken(Exception):
    """redis-server could not bind its port."""


def commandstats(conn):
    """INFO commandstats of a redis-server (a Raw connection) as a dict of
    command name -> calls. Commands a script runs are counted too."""
    text = conn.cmd("INFO", "commandstats")
    if isinstance(text, bytes):
        text = text.decode()
    out = {}
    for line in text.split("\r\n"):
        m = re.match(r"^cmdstat_([^:]+):calls=(\d+),", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


class RedisMonitor:
    """MONITOR on a redis-server: records every command it executes as
    (source, name), where source is "lua" for a command a script ran and
    the client's "ip:port" otherwise. sync() waits until everything executed
    before it has been seen; stop() ends the recording."""

    LINE_RE = re.compile(rb'^\+[0-9.]+ \[\d+ ([^\]]+)\] "((?:[^"\\]|\\.)*)"')

    def __init__(self, server):
        self.server = server
        self.entries = []  # (source, name) in execution order
        self._mu = threading.Lock()
        self._seen = threading.Condition(self._mu)
        self._marks = set()
        self.conn = server.raw()
        self.ctl = server.raw()
        # the control connection's commands are left out
        self.own = {"%s:%d" % self.ctl.s.getsockname()[:2]}
        self.conn.send(Raw.encode("MONITOR"))
        assert self.conn.read() == "OK"
        self.conn.settimeout(None)
        self._buf = self.conn.buf
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        buf = self._buf
        while True:
            try:
                data = self.conn.s.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            buf += data
            lines = buf.split(b"\r\n")
            buf = lines.pop()
            with self._mu:
                for line in lines:
                    m = self.LINE_RE.match(line)
                    if not m:
                        continue
                    src = m.group(1).decode()
                    name = m.group(2).decode(errors="replace").lower()
                    if src in self.own:
                        if name == "echo":
                            self._marks.add(line.rsplit(b'"', 2)[-2].decode())
                            self._seen.notify_all()
                        continue
                    self.entries.append((src, name))

    def sync(self, timeout=5.0):
        """Wait (bounded) until the monitor has seen every command executed
        before this call."""
        mark = "sync-%d" % next(_seq)
        assert self.ctl.cmd("ECHO", mark) == mark.encode()
        deadline = time.monotonic() + timeout
        with self._mu:
            while mark not in self._marks:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("MONITOR did not show a command within %.1f s"
                                         % timeout)
                self._seen.wait(left)

    def take(self):
        """The entries recorded so far, which are then forgotten."""
        with self._mu:
            e, self.entries = self.entries, []
        return e

    def stop(self):
        """End the recording and close both connections (safe twice)."""
        try:
            # wakes the reader, which close() alone would not
            self.conn.s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()
        self.ctl.close()
        self._thread.join(5)


def process_tcp_ports(pid):
    """The local ports of the TCP sockets process pid has open (from
    /proc), to tell which of a redis-server's clients belong to it."""
    inodes = set()
    fddir = "/proc/%d/fd" % pid
    for fd in os.listdir(fddir):
        try:
            target = os.readlink(os.path.join(fddir, fd))
        except OSError:
            continue
        m = re.match(r"^socket:\[(\d+)\]$", target)
        if m:
            inodes.add(m.group(1))
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            with open("/proc/%d/net/%s" % (pid, table)) as f:
                lines = f.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def count_commands(entries):
    """(by_client, by_lua): dicts of command name -> count, for the commands
    that clients sent and for those that scripts ran."""
    client, lua = {}, {}
    for src, name in entries:
        d = lua if src == "lua" else client
        d[name] = d.get(name, 0) + 1
    return client, lua


# ---- Redis Cluster (the redis-cluster backend's store) ----

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
    for b in _bytes(data):
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[((crc >> 8) ^ b) & 0xFF]
    return crc


def key_slot(key):
    """Redis's hash slot of a key name (bytes or str): CRC16 mod 16384 of
    the key, or of its hash tag (what lies between the first "{" and the
    first "}" after it, when that is not empty)."""
    key = _bytes(key)
    i = key.find(b"{")
    if i >= 0:
        j = key.find(b"}", i + 1)
        if j > i + 1:
            key = key[i + 1:j]
    return crc16(key) % CLUSTER_SLOTS


def lock_tag(lock_key):
    """The hash tag of a lock key in the redis-cluster backend's key names:
    the key with "%" written %25 and "}" written %7D (bytes)."""
    return _bytes(lock_key).replace(b"%", b"%25").replace(b"}", b"%7D")


def lock_keys(lock_key, prefix="dlock:"):
    """The Redis keys of a lock on redis-cluster as a dict: lease, fence and
    mark -> the key name (bytes): prefix + "l:{E}", "f:{E}", "w:{E}"."""
    p, e = _bytes(prefix), lock_tag(lock_key)
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


def _text(v):
    return v.decode() if isinstance(v, bytes) else v


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

    def cmd(self, *args, timeout=2.0):
        """One command on a new connection; its reply, or None if the node
        cannot be reached or does not answer within timeout (an error
        reply is returned as an Err)."""
        if not self.running() or self.paused:
            return None
        try:
            c = self.raw(timeout=timeout)
        except (OSError, AssertionError, ssl.SSLError):
            return None
        try:
            return c.cmd(*args)
        except (OSError, AssertionError, Closed, ssl.SSLError):
            return None
        finally:
            c.close()

    def role(self):
        """"master" or "slave" (ROLE's first word), None if unreachable."""
        r = self.cmd("ROLE")
        return _text(r[0]) if isinstance(r, list) and r else None

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
        return tuple(sorted((int(e[0]), int(e[1]), _text(e[2][2])) for e in r))

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
    password, stays the administrator the harness itself uses).

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
                s.node_id = _text(s.cmd("CLUSTER", "MYID"))
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
                    r = s.cmd("INFO", "replication")
                    if not isinstance(r, bytes) or \
                            parse_info(r).get("master_link_status") != "up":
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

    def _migrate_auth(self):
        if self.password is None:
            return []
        return ["AUTH", self.password]

    def _expect_ok(self, server, *args):
        r = server.cmd(*args, timeout=5.0)
        if r != "OK":
            raise AssertionError("%s on port %d answered %r"
                                 % (" ".join(str(a) for a in args), server.port, r))

    def begin_migration(self, slot, dest):
        """The first steps of moving slot to dest: CLUSTER SETSLOT IMPORTING
        on dest, then MIGRATING on its owner; returns the owner."""
        src = self.master_of(slot)
        if src is dest:
            raise ValueError("slot %d is on port %d already" % (slot, dest.port))
        self._expect_ok(dest, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.node_id)
        self._expect_ok(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dest.node_id)
        return src

    def migrate_keys(self, slot, src, dest, limit=None):
        """MIGRATE the keys of slot from src to dest (at most limit of them);
        returns how many moved."""
        moved = 0
        while limit is None or moved < limit:
            n = 100 if limit is None else min(100, limit - moved)
            keys = src.cmd("CLUSTER", "GETKEYSINSLOT", slot, n, timeout=5.0)
            if not isinstance(keys, list):
                raise AssertionError("CLUSTER GETKEYSINSLOT on port %d answered %r"
                                     % (src.port, keys))
            if not keys:
                break
            self._expect_ok(src, "MIGRATE", "127.0.0.1", dest.port, "", 0, 5000,
                            *(self._migrate_auth() + ["KEYS"] + keys))
            moved += len(keys)
        return moved

    def finish_migration(self, slot, src, dest, timeout=10.0):
        """The last step: CLUSTER SETSLOT NODE dest on dest, src and the
        other masters; waits (bounded) until every running node's slot map
        gives slot to dest."""
        for s in [dest, src] + [m for m in self.masters() if m not in (dest, src)]:
            self._expect_ok(s, "CLUSTER", "SETSLOT", slot, "NODE", dest.node_id)

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


# ---- etcd (the etcd backend's store) ----

ETCD_START_TIMEOUT = 15.0  # seconds etcd may take to answer (about 1 s on loopback)
ETCD_HTTP_TIMEOUT = 5.0  # seconds a request of the JSON gateway may take


def _b64(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def _unb64(text):
    return base64.b64decode(text or "")


def _bytes(data):
    return data.encode() if isinstance(data, str) else bytes(data)


def prefix_end(prefix):
    """The range_end that makes a range of every key starting with prefix
    (the prefix with its last byte below 0xff incremented)."""
    if isinstance(prefix, str):
        prefix = prefix.encode()
    b = bytearray(prefix)
    while b and b[-1] == 0xFF:
        b.pop()
    if not b:
        return b"\0"  # every key
    b[-1] += 1
    return bytes(b)


# loopback only: no proxy from the environment
_http = urllib.request.build_opener(urllib.request.ProxyHandler({}))

METRIC_RE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class EtcdError(Exception):
    """etcd refused a request: the JSON gateway answered an HTTP status
    other than 200, or etcdctl failed with etcd's error."""


class EtcdUnreachable(EtcdError, OSError):
    """etcdctl got no answer from etcd in time (stopped, paused, not
    listening); an OSError, as the gateway's connection errors are."""


# what etcdctl says when it got no answer (rather than an error of etcd's)
_UNREACHABLE_RE = re.compile(r"context deadline exceeded|DeadlineExceeded|connection refused"
                             r"|Unavailable|all SubConns are in TransientFailure|"
                             r"transport is closing|error reading from server")

_DEFAULT = object()  # an argument left at its default (None means: leave out)


class EtcdServer(ServerProcess):
    """One etcd process, a cluster of one member: client and peer URLs on
    free loopback ports, its data in a directory of its own, warnings only
    in its log.

    start() starts it (again on the same ports and data after stop());
    stop() stops it (resuming it first if pause() stopped it) and is safe to
    call twice. Every process is recorded by spawn(), so one a test could
    not stop is killed at exit.

    tls (a Certs, e.g. shared_certs()) serves TLS only on the client port:
    https client URLs, the server's certificate tls.server_cert (names
    localhost and 127.0.0.1) and key tls.server_key; with client_cert_auth
    (the default) every client must present a certificate signed by tls.ca
    (--client-cert-auth, --trusted-ca-file), as tls.client_cert is. The
    metrics are then served over plain HTTP on a port of their own
    (metrics_port). url() is etcds://, backend_config() writes the
    backend.tls section of a daemon.

    gateway (default: ETCD_GATEWAY of the environment) leaves etcd's JSON
    gateway on; with gateway=False etcd runs with --enable-grpc-gateway=false.
    etcd_bin is the etcd to run (default: ETCD_BIN of the environment).

    The other methods read and write etcd: keys(), put(), delete(),
    compact(), revision(), lease_grant(), lease_ttl(), leases(),
    enable_auth(), through the JSON gateway (POST /v3/..., keys and values
    base64) when it is on and etcd serves plain HTTP, else through etcdctl
    (ETCDCTL_BIN, -w json, with the CA and client certificate under TLS);
    and GET /metrics: metrics(), requests(). Either way they are gRPC calls
    inside etcd and count in requests() like the daemons' own.
    """

    NAME = "etcd"
    PACKAGE = "etcd-server"
    START_LIMIT = ETCD_START_TIMEOUT
    POLL = 0.02

    def binary(self):
        # read at each start: a test may change ETCD
        return self.etcd_bin if self.etcd_bin is not None else ETCD

    def __init__(self, port=None, directory=None, name="dlockd-test", tls=None,
                 client_cert_auth=True, gateway=None, etcd_bin=None):
        self.etcd_bin = etcd_bin
        self.dir = directory or new_dir("etcd")
        self.fixed_port = port is not None
        self.port = port or free_port()
        self.peer_port = free_port()
        self.tls = tls
        self.client_cert_auth = bool(client_cert_auth) and tls is not None
        self.gateway = ETCD_GATEWAY if gateway is None else bool(gateway)
        # TLS: the metrics on plain HTTP, on a port of their own
        self.metrics_port = free_port() if tls is not None else None
        self.name = name
        self.data = os.path.join(self.dir, "data")
        self._process_init(os.path.join(self.dir, "etcd.log"))
        self.member = False  # the data directory holds a member
        self.auth = None  # (user, password) once enable_auth() ran
        self.token = None  # the gateway's token for self.auth

    def client_url(self):
        """The client URL: http://127.0.0.1:port, https:// with tls."""
        return "%s://127.0.0.1:%d" % ("https" if self.tls is not None else "http", self.port)

    def argv(self):
        client = self.client_url()
        peer = "http://127.0.0.1:%d" % self.peer_port
        a = [self.binary(), "--name", self.name, "--data-dir", self.data,
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", "%s=%s" % (self.name, peer),
             "--initial-cluster-state", "new",
             "--initial-cluster-token", "dlockd-test-%d" % self.port,
             "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn"]
        if self.tls is not None:
            a += ["--cert-file", self.tls.server_cert, "--key-file", self.tls.server_key,
                  "--listen-metrics-urls", "http://127.0.0.1:%d" % self.metrics_port]
            if self.client_cert_auth:
                a += ["--client-cert-auth", "--trusted-ca-file", self.tls.ca]
        if not self.gateway:
            a += ["--enable-grpc-gateway=false"]
        return a

    def answers(self):
        # etcdctl waits for a server that does not listen yet: ask only
        # once the port takes connections
        if not port_accepts(self.port):
            return False
        try:
            self.revision(timeout=1.0)
        except (OSError, EtcdError):
            return False
        return True

    def started(self):
        self.member = True

    def new_ports(self):
        # a member's ports are kept once it has data
        if self.fixed_port or self.member:
            return False
        shutil.rmtree(self.data, True)
        self.port = free_port()
        self.peer_port = free_port()
        if self.metrics_port is not None:
            self.metrics_port = free_port()
        return True

    def pause(self):
        """SIGSTOP, as ServerProcess.pause. etcd's clock goes on: a lease
        that ran out meanwhile is revoked soon after resume()."""
        super().pause()

    def stop_checked(self):
        """Stop with SIGTERM (for cleanups); fail unless it ends as etcd does
        on SIGTERM: it raises the signal again, status -SIGTERM. One the
        test stopped itself is left alone."""
        if self.proc is None:
            return
        rc = self.stop()
        if rc not in (0, -signal.SIGTERM):
            raise AssertionError("etcd exited with %s; log:\n%s" % (rc, self.log()))

    def endpoint(self):
        """host:port of the client URL, as backend.endpoints takes it."""
        return "127.0.0.1:%d" % self.port

    def url(self, user=None, password=None):
        """The -b URL of this server: etcd://[user:password@]127.0.0.1:port
        (etcds:// with tls)."""
        u = "etcds://" if self.tls is not None else "etcd://"
        if user is not None or password is not None:
            u += "%s:%s@" % (user or "", password or "")
        return u + self.endpoint()

    def backend_config(self, ca=_DEFAULT, cert=_DEFAULT, key=_DEFAULT, server_name=None,
                       enabled=True, endpoints=None, **keys):
        """A daemon's backend section (YAML text) for this server: type
        etcd, endpoints (default: this server's), the other backend.* keys
        given, and with tls a tls section: enabled, ca_file (default the
        CA), cert_file and key_file (default: the client certificate when
        the server wants one), server_name if given. None leaves a setting
        out; enabled=None leaves the tls section out."""
        conf = {"type": "etcd",
                "endpoints": list(endpoints) if endpoints else [self.endpoint()]}
        conf.update(keys)
        text = "backend:\n" + "".join("  %s: %s\n" % (k, yaml_value(v))
                                      for k, v in conf.items())
        if enabled is None:
            return text
        certs = self.tls
        if ca is _DEFAULT:
            ca = certs.ca if certs is not None else None
        if cert is _DEFAULT:
            cert = certs.client_cert if self.client_cert_auth else None
        if key is _DEFAULT:
            key = certs.client_key if self.client_cert_auth else None
        text += "  tls:\n    enabled: %s\n" % yaml_value(bool(enabled))
        for name, value in (("ca_file", ca), ("cert_file", cert), ("key_file", key),
                            ("server_name", server_name)):
            if value is not None:
                text += "    %s: %s\n" % (name, yaml_value(value))
        return text

    # ---- etcdctl (gateway off, or TLS) ----

    def uses_etcdctl(self):
        """Whether the harness talks to this server through etcdctl (its
        gateway is off, or it serves TLS) rather than the JSON gateway."""
        return not self.gateway or self.tls is not None

    def etcdctl(self, *args, timeout=ETCD_HTTP_TIMEOUT, user=True):
        """Run etcdctl (API v3, -w json) against this server with args (str
        or bytes; the CA and client certificate with tls; once
        enable_auth() ran, as its user unless user=False); the decoded
        JSON answer, or None if it printed none. Raises EtcdUnreachable
        when etcd does not answer within timeout s, EtcdError when it
        refuses."""
        if shutil.which(ETCDCTL) is None:
            raise AssertionError("etcdctl is missing: %r not found (Debian package "
                                 "etcd-client)" % ETCDCTL)
        ms = max(int(timeout * 1000), 1)
        argv = [ETCDCTL, "--endpoints", self.client_url(), "-w", "json",
                "--dial-timeout", "%dms" % ms, "--command-timeout", "%dms" % ms]
        if self.tls is not None:
            argv += ["--cacert", self.tls.ca]
            if self.client_cert_auth:
                argv += ["--cert", self.tls.client_cert, "--key", self.tls.client_key]
        if user and self.auth is not None:
            argv += ["--user", "%s:%s" % self.auth]
        argv += list(args)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCDCTL_")}
        env["ETCDCTL_API"] = "3"
        p = spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE, env=env)
        try:
            out, err = p.communicate(None, 2 * timeout + 5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            forget(p)
            raise EtcdUnreachable("etcdctl %s: no answer within %.1f s" % (args, timeout))
        forget(p)
        text = out.decode(errors="replace").strip()
        if p.returncode != 0:
            why = (err.decode(errors="replace").strip().splitlines() or [text])[-1]
            what = "etcdctl %s: %s" % (" ".join(a.decode(errors="replace")
                                                if isinstance(a, bytes) else a
                                                for a in args), why)
            if _UNREACHABLE_RE.search(why):
                raise EtcdUnreachable(what)
            raise EtcdError(what)
        if not text.startswith(("{", "[")):
            return None
        return json.loads(text)

    def _ctl_range(self, key, range_end=None, timeout=ETCD_HTTP_TIMEOUT):
        """etcdctl get of key (up to range_end, as the gateway's kv/range
        takes them, bytes); the decoded answer (header, kvs, count)."""
        if range_end is None:
            args = ["get", "--", key]
        elif key == b"\0" and range_end == b"\0":
            args = ["get", "--prefix", "--", ""]  # every key
        elif range_end == b"\0":
            args = ["get", "--from-key", "--", key]
        elif range_end == prefix_end(key):
            args = ["get", "--prefix", "--", key]
        else:
            args = ["get", "--", key, range_end]
        return self.etcdctl(*args, timeout=timeout)

    # ---- the JSON gateway ----

    def call(self, path, body, timeout=ETCD_HTTP_TIMEOUT, token=True):
        """POST body (a dict) as JSON to /v3/<path>; the decoded answer.
        Once enable_auth() ran, as its user (token=False: as nobody).
        Without the gateway (uses_etcdctl()), kv/range alone, through
        etcdctl (an OSError when etcd does not answer, as with the
        gateway)."""
        if self.uses_etcdctl():
            if path != "kv/range":
                raise EtcdError("%s: not available through etcdctl" % path)
            end = body.get("range_end")
            return self._ctl_range(_unb64(body.get("key")),
                                   _unb64(end) if end is not None else None, timeout)
        headers = {"Content-Type": "application/json"}
        if token and self.auth is not None:
            if self.token is None:
                self.token = self.call("auth/authenticate",
                                       {"name": self.auth[0], "password": self.auth[1]},
                                       timeout, token=False)["token"]
            headers["Authorization"] = self.token
        req = urllib.request.Request("http://127.0.0.1:%d/v3/%s" % (self.port, path),
                                     data=json.dumps(body).encode(), method="POST",
                                     headers=headers)
        try:
            with _http.open(req, timeout=timeout) as f:
                return json.loads(f.read().decode())
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            if token and self.token is not None and "invalid auth token" in text:
                self.token = None  # etcd restarted: authenticate again
                return self.call(path, body, timeout)
            raise EtcdError("%s: HTTP %d: %s" % (path, e.code, text))

    def gateway_answers(self, timeout=2.0):
        """What POST /v3/kv/range on the client port gets: ("json", the
        decoded answer), ("http", status) for another answer, or ("error",
        why) when the request fails (no HTTP answer, or TLS refused). With
        tls the request is HTTPS with the client certificate."""
        req = urllib.request.Request("%s/v3/kv/range" % self.client_url(),
                                     data=json.dumps({"key": _b64(b"a")}).encode(),
                                     method="POST",
                                     headers={"Content-Type": "application/json"})
        handlers = [urllib.request.ProxyHandler({})]
        if self.tls is not None:
            handlers.append(urllib.request.HTTPSHandler(
                context=self.tls.context(client_cert=self.client_cert_auth)))
        try:
            with urllib.request.build_opener(*handlers).open(req, timeout=timeout) as f:
                data = f.read()
                status = f.status
        except urllib.error.HTTPError as e:
            return ("http", e.code)
        except (OSError, ValueError, http.client.HTTPException) as e:
            return ("error", str(e))
        try:
            return ("json", json.loads(data.decode()))
        except ValueError:
            return ("http", status)

    def enable_auth(self, user="root", password="s3cret"):
        """Add user (a root) with password and turn authentication on:
        from then on every call needs a user's token (this object's calls
        authenticate as user). A restarted server keeps it on."""
        if self.uses_etcdctl():
            self.etcdctl("user", "add", user, "--new-user-password", password,
                         "--interactive=false")
            self.etcdctl("user", "grant-role", user, "root")
            self.etcdctl("auth", "enable")
        else:
            self.call("auth/user/add", {"name": user, "password": password})
            self.call("auth/user/grant", {"user": user, "role": "root"})
            self.call("auth/enable", {})
        self.auth = (user, password)
        self.token = None

    def revision(self, timeout=ETCD_HTTP_TIMEOUT):
        """The store's current revision."""
        if self.uses_etcdctl():
            r = self.etcdctl("get", "--", "\1", timeout=timeout)
        else:
            r = self.call("kv/range", {"key": _b64(b"\0"), "count_only": True}, timeout)
        return int(r["header"]["revision"])

    def keys(self, prefix=b""):
        """Every key under prefix as (key, create_revision, lease, value),
        key and value bytes, sorted by create revision."""
        if isinstance(prefix, str):
            prefix = prefix.encode()
        if self.uses_etcdctl():
            r = self._ctl_range(prefix or b"\0", prefix_end(prefix))
        else:
            r = self.call("kv/range", {"key": _b64(prefix or b"\0"),
                                       "range_end": _b64(prefix_end(prefix))})
        out = [(_unb64(kv["key"]), int(kv.get("create_revision", 0)),
                int(kv.get("lease", 0)), _unb64(kv.get("value")))
               for kv in r.get("kvs", [])]
        out.sort(key=lambda e: e[1])
        return out

    def put(self, key, value, lease=0):
        """Put key = value (optionally on a lease); the new revision."""
        if self.uses_etcdctl():
            args = ["put"] + (["--lease", "%x" % lease] if lease else [])
            r = self.etcdctl(*(args + ["--", _bytes(key), _bytes(value)]))
            return int(r["header"]["revision"])
        body = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        return int(self.call("kv/put", body)["header"]["revision"])

    def delete(self, key, prefix=False):
        """Delete key (every key under it with prefix=True); how many went."""
        if self.uses_etcdctl():
            r = self.etcdctl(*(["del"] + (["--prefix"] if prefix else [])
                               + ["--", _bytes(key)]))
            return int(r.get("deleted", 0))
        body = {"key": _b64(key)}
        if prefix:
            body["range_end"] = _b64(prefix_end(key))
        return int(self.call("kv/deleterange", body).get("deleted", 0))

    def compact(self, revision=None, physical=True):
        """Compact the history up to revision (default: the current one)."""
        if revision is None:
            revision = self.revision()
        if self.uses_etcdctl():
            self.etcdctl(*(["compaction"] + (["--physical"] if physical else [])
                           + [str(revision)]))
        else:
            self.call("kv/compaction", {"revision": str(revision), "physical": physical})
        return revision

    def lease_grant(self, ttl_s):
        """A new lease of ttl_s seconds; its id."""
        if self.uses_etcdctl():
            return int(self.etcdctl("lease", "grant", str(ttl_s))["ID"])
        return int(self.call("lease/grant", {"TTL": str(ttl_s)})["ID"])

    def lease_ttl(self, lease):
        """(ttl, granted_ttl) of a lease in seconds; ttl is -1 once it is gone."""
        if self.uses_etcdctl():
            r = self.etcdctl("lease", "timetolive", "%x" % lease)
            return int(r.get("ttl", -1)), int(r.get("granted-ttl", 0))
        r = self.call("kv/lease/timetolive", {"ID": str(lease)})
        return int(r.get("TTL", -1)), int(r.get("grantedTTL", 0))

    def leases(self):
        """The ids of every live lease."""
        if self.uses_etcdctl():
            r = self.etcdctl("lease", "list")
            return sorted(int(x["id"]) for x in r.get("leases") or [])
        r = self.call("kv/lease/leases", {})
        return sorted(int(x["ID"]) for x in r.get("leases", []))

    # ---- metrics ----

    def metrics_url(self):
        """Where GET /metrics is served: the client port, or with tls the
        metrics port (plain HTTP)."""
        if self.metrics_port is not None:
            return "http://127.0.0.1:%d/metrics" % self.metrics_port
        return "http://127.0.0.1:%d/metrics" % self.port

    def metrics(self):
        """GET /metrics as a dict of (name, frozenset of (label, value)) ->
        float. Not a gRPC call: it counts in no request counter."""
        with _http.open(self.metrics_url(), timeout=ETCD_HTTP_TIMEOUT) as f:
            text = f.read().decode(errors="replace")
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = METRIC_RE.match(line)
            if not m:
                continue
            labels = frozenset(LABEL_RE.findall(m.group(2) or ""))
            try:
                out[(m.group(1), labels)] = float(m.group(3))
            except ValueError:
                pass
        return out

    @staticmethod
    def count(metrics, name, **labels):
        """The sum of metric name over the series that have these labels."""
        want = set(labels.items())
        return sum(v for (n, ls), v in metrics.items() if n == name and want <= ls)

    def requests(self, method, metrics=None):
        """gRPC calls of method (Range, Txn, Put, DeleteRange, LeaseGrant,
        LeaseKeepAlive, Watch, ...) started so far: a stream counts once."""
        if metrics is None:
            metrics = self.metrics()
        return int(self.count(metrics, "grpc_server_started_total", grpc_method=method))

    def messages(self, method, metrics=None):
        """gRPC messages received of method (for streams: each keepalive
        request or watch request sent on it)."""
        if metrics is None:
            metrics = self.metrics()
        return int(self.count(metrics, "grpc_server_msg_received_total", grpc_method=method))


# ---- the daemon ----

def yaml_str(s):
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')


def yaml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[%s]" % ", ".join(yaml_value(x) for x in v)
    if isinstance(v, dict):
        return "{%s}" % ", ".join("%s: %s" % (k, yaml_value(x)) for k, x in v.items())
    return yaml_str(str(v))


BACKEND_SECTION_RE = re.compile(r"^backend\s*:", re.M)


def backend_section(conf):
    """A "backend:" section (YAML text) of the keys of conf, a dict; a
    dict value is a section of its own (e.g. tls)."""
    text = "backend:\n"
    for k, v in conf.items():
        if isinstance(v, dict):
            text += "  %s:\n" % k + "".join("    %s: %s\n" % (k2, yaml_value(v2))
                                            for k2, v2 in v.items())
        else:
            text += "  %s: %s\n" % (k, yaml_value(v))
    return text


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

    def info(self):
        """INFO as a dict, on a connection of its own."""
        c = self.raw()
        try:
            return parse_info(c.cmd("INFO"))
        finally:
            c.close()


class DaemonTestCase(unittest.TestCase):
    """A test class sharing one daemon, started with CONFIG, among its tests.

    BACKEND "redis" starts a redis-server for the class first (stopped after
    the daemon whatever happens) and runs the daemon on it; BACKEND_CONF, if
    set, is the dict of backend.* keys written to its configuration.
    BACKEND "etcd" does the same with an etcd server of the class.
    BACKEND "redlock" starts NODES redis-servers for the class (cls.nodes,
    stopped after the daemon) and runs the daemon on them.
    BACKEND "redis-cluster" starts a RedisCluster (CLUSTER_ARGS are its
    keyword arguments) for the class (cls.cluster, stopped after the
    daemon) and runs the daemon on it.
    """

    CONFIG = ""
    BACKEND = "memory"
    BACKEND_CONF = None
    NODES = 3  # redis-servers of a redlock class
    CLUSTER_ARGS = {}  # RedisCluster(**CLUSTER_ARGS) of a redis-cluster class
    daemon = None
    redis = None
    etcd = None
    nodes = ()
    cluster = None

    @classmethod
    def setUpClass(cls):
        store = None
        if cls.BACKEND == "redis":
            cls.redis = store = RedisServer().start()
            cls.addClassCleanup(cls._stop_redis)
        elif cls.BACKEND == "etcd":
            cls.etcd = EtcdServer().start()
            cls.addClassCleanup(cls._stop_etcd)
        elif cls.BACKEND == "redlock":
            cls.nodes = []
            cls.addClassCleanup(cls._stop_nodes)
            for _ in range(cls.NODES):
                cls.nodes.append(RedisServer().start())
            store = list(cls.nodes)
        elif cls.BACKEND == "redis-cluster":
            cls.cluster = store = RedisCluster(**cls.CLUSTER_ARGS).start()
            cls.addClassCleanup(cls._stop_cluster)
        cls.daemon = Daemon(cls.CONFIG, backend=cls.BACKEND, redis=store,
                            etcd=cls.etcd, backend_conf=cls.BACKEND_CONF).start()

    @classmethod
    def _stop_redis(cls):
        r, cls.redis = cls.redis, None
        if r is not None:
            r.stop_checked()

    @classmethod
    def _stop_nodes(cls):
        nodes, cls.nodes = cls.nodes, ()
        failed = []
        for r in nodes:
            try:
                r.stop_checked()
            except AssertionError as e:
                failed.append(str(e))
        if failed:
            raise AssertionError("\n".join(failed))

    @classmethod
    def _stop_cluster(cls):
        c, cls.cluster = cls.cluster, None
        if c is not None:
            c.stop_checked()

    @classmethod
    def _stop_etcd(cls):
        e, cls.etcd = cls.etcd, None
        if e is not None:
            e.stop_checked()

    @classmethod
    def tearDownClass(cls):
        d, cls.daemon = cls.daemon, None
        if d is not None:
            rc = d.stop()
            if rc != 0:
                raise AssertionError("dlockd exited with %s; log:\n%s" % (rc, d.log()))

    def setUp(self):
        self.assertTrue(self.daemon.running(), "the shared dlockd died:\n%s"
                        % self.daemon.log())
        if self.redis is not None:
            self.assertTrue(self.redis.running(), "the shared redis-server died:\n%s"
                            % self.redis.log())
        if self.etcd is not None:
            self.assertTrue(self.etcd.running(), "the shared etcd died:\n%s"
                            % self.etcd.log())
        for i, r in enumerate(self.nodes):
            self.assertTrue(r.running(), "the shared redis-server node %d died:\n%s"
                            % (i, r.log()))
        if self.cluster is not None:
            for r in self.cluster.servers:
                self.assertTrue(r.running(), "the shared cluster node on port %d died:\n%s"
                                % (r.port, r.log()))
        self._clients = []

    def tearDown(self):
        for c in self._clients:
            hangup(c)

    def client(self, **kw):
        c = self.daemon.client(**kw)
        self._clients.append(c)
        return c

    def raw(self, **kw):
        c = self.daemon.raw(**kw)
        self._clients.append(c)
        return c

    def status(self, key, conn=None):
        """STATUS key as a dict (str -> bytes/int)."""
        if conn is None:
            if not hasattr(self, "_status_conn") or self._status_conn is None:
                self._status_conn = self.client()
                self._clients.append(self._status_conn)
            conn = self._status_conn
        flat = conn.execute_command("STATUS", key)
        return pairs(flat)

    def wait_status(self, key, what="", timeout=5.0, **expect):
        """Poll STATUS key until every field in expect has its value."""
        def ok():
            st = self.status(key)
            return all(st.get(k) == v for k, v in expect.items())
        wait_until(ok, timeout, 0.005, "STATUS %s to show %s %s"
                   % (key, expect, what))

    def expect_protocol_error(self, data, what, within=2.0):
        """Send data on a new connection: it must get -ERR Protocol error
        and be closed within `within` s."""
        raw = self.raw()
        raw.send(data)
        try:
            rep = raw.read()
        except Exception as e:  # closed without a reply
            self.fail("%s: no -ERR Protocol error reply (%s)" % (what, e))
        self.assertIsInstance(rep, Err, what)
        self.assertTrue(rep.startswith("ERR Protocol error"), "%s: %r" % (what, rep))
        self.assertTrue(raw.is_closed(within), "%s: connection not closed" % what)

    def info(self, conn=None):
        """INFO as a dict, on conn or on a connection kept for the test."""
        if conn is None:
            if getattr(self, "_info_conn", None) is None:
                self._info_conn = self.raw()
            conn = self._info_conn
        return parse_info(conn.cmd("INFO"))


def hangup(conn):
    """Close a client's connection for good (redis-py's close() only puts
    it back into the pool)."""
    try:
        if isinstance(conn, redis.Redis):
            if conn.connection is not None:
                conn.connection.disconnect()
            conn.close()
            conn.connection_pool.disconnect()
        else:
            conn.close()
    except Exception:
        pass


def pairs(flat):
    """A flat [name, value, ...] list as a dict with str names."""
    if isinstance(flat, dict):
        return {k.decode() if isinstance(k, bytes) else k: v for k, v in flat.items()}
    assert len(flat) % 2 == 0, flat
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


def parse_info(text):
    """INFO's bulk string as a dict of str -> str (headers skipped)."""
    if isinstance(text, bytes):
        text = text.decode()
    out = {}
    for line in text.split("\r\n"):
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition(":")
        assert sep, "INFO line without a colon: %r" % line
        out[name] = value
    return out


# ---- a raw RESP client ----

class Err(str):
    """An error reply ("CODE sentence")."""

    @property
    def code(self):
        return self.split(" ", 1)[0]


class Push(list):
    """A RESP3 push."""


class Null:
    """The null reply; NULL is its one instance."""

    def __repr__(self):
        return "NULL"


NULL = Null()


class Closed(Exception):
    """The server closed the connection."""


class Raw:
    """A RESP connection on a plain or TLS socket, for byte-level tests."""

    def __init__(self, port=None, unix=None, host="127.0.0.1", timeout=IO_TIMEOUT,
                 ssl_context=None, server_hostname="localhost"):
        """Connect to port on host (over TLS with ssl_context, checking the
        name server_hostname), or to the Unix socket unix."""
        if unix:
            self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.s.settimeout(timeout)
            self.s.connect(unix)
        else:
            self.s = socket.create_connection((host, port), timeout=timeout)
        if ssl_context is not None:
            try:
                self.s = ssl_context.wrap_socket(self.s, server_hostname=server_hostname)
            except BaseException:
                self.s.close()
                raise
        self.buf = b""
        self.last_raw = b""  # the bytes of the last reply read

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass

    def settimeout(self, t):
        self.s.settimeout(t)

    def send(self, data):
        self.s.sendall(data)

    encode = staticmethod(resp.encode)

    def cmd(self, *args):
        """Send a command as a RESP array and read its reply."""
        self.send(self.encode(*args))
        return self.read()

    def inline(self, line):
        """Send an inline command (a str or bytes line) and read its reply."""
        if isinstance(line, str):
            line = line.encode()
        self.send(line + b"\r\n")
        return self.read()

    def _fill(self):
        try:
            data = self.s.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            raise Closed("connection closed by the server (buffer %r)" % self.buf)
        self.buf += data

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n", self._pos)
            if i >= 0:
                line = self.buf[self._pos:i]
                self._pos = i + 2
                return line
            self._fill()

    def _bytes(self, n):
        while len(self.buf) < self._pos + n + 2:
            self._fill()
        data = self.buf[self._pos:self._pos + n]
        assert self.buf[self._pos + n:self._pos + n + 2] == b"\r\n", self.buf
        self._pos += n + 2
        return data

    def _parse(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return Err(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return NULL if n < 0 else self._bytes(n)
        if t == b"_":
            return NULL
        if t in (b"*", b">", b"~"):
            n = int(rest)
            if n < 0:
                return NULL
            items = [self._parse() for _ in range(n)]
            return Push(items) if t == b">" else items
        if t == b"%":
            n = int(rest)
            m = {}
            for _ in range(n):
                k = self._parse()
                m[k] = self._parse()
            return m
        if t == b"#":
            return rest == b"t"
        if t == b",":
            return float(rest)
        if t == b"(":
            return int(rest)
        if t in (b"=", b"!"):
            return self._bytes(int(rest))
        if t == b"|":
            n = int(rest)
            for _ in range(2 * n):
                self._parse()
            return self._parse()
        raise AssertionError("unparsable reply line %r" % line)

    def read(self):
        """Read one complete reply (or push)."""
        self._pos = 0
        while True:
            try:
                v = self._parse()
                break
            except Closed:
                raise
            except (IndexError, ValueError):
                raise AssertionError("malformed reply: %r" % self.buf)
        self.last_raw = self.buf[:self._pos]
        self.buf = self.buf[self._pos:]
        return v

    def read_raw(self):
        """Read one reply and return its exact bytes."""
        self.read()
        return self.last_raw

    def is_closed(self, timeout=2.0):
        """True if the server closes the connection within timeout s
        (anything else it sends is discarded)."""
        deadline = time.monotonic() + timeout
        self.buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.s.settimeout(left)
            try:
                data = self.s.recv(65536)
            except socket.timeout:
                return False
            except ConnectionResetError:
                return True
            if not data:
                return True


def run_to_end(argv, timeout=10.0, input=None, env=None):
    """Run a program to its end: (status, stdout, stderr) as str. It is
    killed, and the test fails, when it has not ended within timeout s."""
    argv = [str(a) for a in argv]
    p = spawn(argv, stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        out, err = p.communicate(None if input is None else input.encode(), timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        forget(p)
        raise AssertionError("%s did not finish within %.0f s" % (" ".join(argv), timeout))
    forget(p)
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def redis_cli(*args, timeout=10.0, input=None):
    """Run redis-cli; returns (status, stdout, stderr) as str."""
    return run_to_end([REDIS_CLI] + list(args), timeout, input)


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


def exclusion_across(daemons, key, rounds, timeout):
    """Sessions on each of daemons (one per entry) lock and unlock key
    rounds times each, holding it a moment; returns (errors, fences): what
    went wrong (a grant while another session held the key, a LOCK or
    UNLOCK answered otherwise) and the fences in the order of the critical
    sections."""
    errors = []
    fences = []
    inside = threading.Lock()

    def worker(daemon):
        c = daemon.raw()
        try:
            for _ in range(rounds):
                g = c.cmd("LOCK", key, "WAIT", 20000)
                if not isinstance(g, list):
                    errors.append("LOCK on %s answered %r" % (daemon.addr(), g))
                    return
                if not inside.acquire(blocking=False):
                    errors.append("granted on %s while another session holds the key"
                                  % daemon.addr())
                else:
                    fences.append(g[1])
                    time.sleep(0.001)  # hold the key a moment: overlaps show
                    inside.release()
                r = c.cmd("UNLOCK", key)
                if r != 0:
                    errors.append("UNLOCK answered %r" % (r,))
        finally:
            c.close()

    calls = [in_thread(worker, d) for d in daemons]
    for c in calls:
        c.result(timeout)
    return errors, fences


def in_thread(fn, *args):
    """Run fn(*args) in a daemon thread; returns a handle whose result()
    waits (bounded) for the return value or re-raises the exception."""
    return _Call(fn, args)


class _Call:
    def __init__(self, fn, args):
        self.value = None
        self.exc = None
        self.done_at = None
        self.done = threading.Event()
        self.t = threading.Thread(target=self._run, args=(fn, args), daemon=True)
        self.t.start()

    def _run(self, fn, args):
        try:
            self.value = fn(*args)
        except BaseException as e:  # handed to result()
            self.exc = e
        self.done_at = time.monotonic()
        self.done.set()

    def result(self, timeout=10.0):
        if not self.done.wait(timeout):
            raise AssertionError("call did not finish within %.1f s" % timeout)
        if self.exc is not None:
            raise self.exc
        return self.value


# ---- tests with their own redis-server and daemons ----

class RedisTestCase(unittest.TestCase):
    """Base of tests that start redis-server and dlockd processes of their
    own. What a test starts with start_redis() / start_daemon() is stopped
    after the test (daemons first), whatever happens; the class-level
    variants (class_redis, class_daemon) live until the class is done. A
    daemon or redis-server that exits with a non-zero status on that stop
    fails the test; one the test stopped itself is left alone."""

    def assertErr(self, reply, code, msg=None):
        """reply is an error reply with this code word."""
        self.assertIsInstance(reply, Err, msg or "not an error: %r" % (reply,))
        self.assertEqual(reply.code, code, msg or reply)

    def assertLostReplies(self, conn, fences):
        """The next len(fences) commands of conn (PINGs) are answered
        -LOST key fence reason, one for each key of fences (a dict key:
        fence) in any order; the next PING is answered normally."""
        told = {}
        for _ in fences:
            r = conn.cmd("PING")
            self.assertErr(r, "LOST")
            words = r.split(" ", 3)
            self.assertEqual(len(words), 4, r)
            told[words[1]] = int(words[2])
        self.assertEqual(told, fences)
        self.assertEqual(conn.cmd("PING"), "PONG")

    def hello3(self, conn):
        """RESP3, with lost pushes (CLIENT LOSTPUSH ON)."""
        reply = conn.cmd("HELLO", "3")
        self.assertEqual(reply[b"proto"], 3)
        self.assertEqual(conn.cmd("CLIENT", "LOSTPUSH", "ON"), "OK")

    # ---- per class ----

    @classmethod
    def class_redis(cls, **kw):
        r = RedisServer(**kw).start()
        cls.addClassCleanup(r.stop_checked)
        return r

    @classmethod
    def class_daemon(cls, redis_server, config="", **kw):
        kw.setdefault("backend", "redis")
        d = Daemon(config, redis=redis_server, **kw)
        cls.addClassCleanup(d.stop_checked)
        return d.start()

    @classmethod
    def class_cluster(cls, **kw):
        """A RedisCluster (RedisCluster's arguments) for the class."""
        c = RedisCluster(**kw)
        cls.addClassCleanup(c.stop_checked)
        return c.start()

    @classmethod
    def class_cluster_daemon(cls, cluster, config="", **kw):
        """A dlockd of the class on the redis-cluster backend over cluster."""
        d = Daemon(config, backend="redis-cluster", redis=cluster, **kw)
        cls.addClassCleanup(d.stop_checked)
        return d.start()

    @classmethod
    def class_nodes(cls, n, **kw):
        """n redis-servers (the nodes of a redlock backend) for the class."""
        return [cls.class_redis(**kw) for _ in range(n)]

    @classmethod
    def class_redlock_daemon(cls, servers, config="", **kw):
        """A dlockd of the class on the redlock backend over servers (a
        list of RedisServers)."""
        d = Daemon(config, backend="redlock", redis=list(servers), **kw)
        cls.addClassCleanup(d.stop_checked)
        return d.start()

    # ---- per test ----

    def setUp(self):
        self._conns = []
        self._status_conns = {}
        self.addCleanup(self._close_conns)

    def _close_conns(self):
        for c in self._conns:
            hangup(c)
        self._conns = []
        self._status_conns = {}

    def start_redis(self, **kw):
        r = RedisServer(**kw).start()
        self.addCleanup(r.stop_checked)
        return r

    def start_daemon(self, redis_server, config="", start=True, **kw):
        kw.setdefault("backend", "redis")
        d = Daemon(config, redis=redis_server, **kw)
        self.addCleanup(d.stop_checked)
        return d.start() if start else d

    def start_cluster(self, **kw):
        """A RedisCluster (RedisCluster's arguments), stopped after the test
        (after its daemons)."""
        c = RedisCluster(**kw)
        self.addCleanup(c.stop_checked)
        return c.start()

    def start_cluster_daemon(self, cluster, config="", start=True, **kw):
        """A dlockd on the redis-cluster backend over cluster, stopped after
        the test: -b cluster.url() or, with backend_conf, a backend section
        with nodes."""
        d = Daemon(config, backend="redis-cluster", redis=cluster, **kw)
        self.addCleanup(d.stop_checked)
        return d.start() if start else d

    def start_nodes(self, n, **kw):
        """n redis-servers, the nodes of a redlock backend, stopped after
        the test (after its daemons). Each keeps its port when restarted
        (RedisServer.kill() and restart())."""
        return [self.start_redis(**kw) for _ in range(n)]

    def start_redlock_daemon(self, servers, config="", start=True, **kw):
        """A dlockd on the redlock backend over servers (a list of
        RedisServers), stopped after the test: -b redlock://... or, with
        backend_conf, a backend section with nodes."""
        d = Daemon(config, backend="redlock", redis=list(servers), **kw)
        self.addCleanup(d.stop_checked)
        return d.start() if start else d

    def conn(self, daemon, **kw):
        """A raw connection to daemon, closed after the test."""
        c = daemon.raw(**kw)
        self._conns.append(c)
        return c

    def redis_conn(self, server):
        """A raw connection to a redis-server, closed after the test."""
        c = server.raw()
        self._conns.append(c)
        return c

    def status(self, daemon, key):
        """STATUS key on daemon as a dict (str -> bytes/int)."""
        c = self._status_conns.get(daemon.port)
        if c is None:
            c = self._status_conns[daemon.port] = self.conn(daemon)
        return pairs(c.cmd("STATUS", key))

    def wait_status(self, daemon, key, what="", timeout=5.0, **expect):
        """Poll STATUS key on daemon until every field in expect has its value."""
        def ok():
            st = self.status(daemon, key)
            return all(st.get(k) == v for k, v in expect.items())
        wait_until(ok, timeout, 0.005, "STATUS %s on %s to show %s %s"
                   % (key, daemon.addr(), expect, what))

    def info(self, daemon):
        return daemon.info()

    def assertGranted(self, reply, msg=None):
        """reply is a LOCK grant [token, fence, ttl]; returns it."""
        self.assertIsInstance(reply, list, msg or "not a grant: %r" % (reply,))
        self.assertEqual(len(reply), 3, reply)
        self.assertRegex(reply[0], TOKEN_RE)
        return reply

    def queue(self, daemon, key, *opts, waiters):
        """A new connection on daemon that sends LOCK key *opts and is then
        queued as the waiters-th waiter of key on that daemon."""
        w = self.conn(daemon)
        w.send(Raw.encode("LOCK", key, *opts))
        self.wait_status(daemon, key, waiters=waiters)
        return w

    def wake_latencies(self, a, b, key, rounds, attempts):
        """rounds times, a session on a holds key and one on b waits for it;
        attempts() counts the calls each backend server ran (a list), so
        that a's UNLOCK comes once b's daemon has tried on every one (each
        count grew). Returns the seconds from each UNLOCK's answer to the
        grant on b."""
        took = []
        for _ in range(rounds):
            holder = self.conn(a)
            self.assertGranted(holder.cmd("LOCK", key))
            before = attempts()
            w = self.queue(b, key, "WAIT", 5000, waiters=1)
            wait_until(lambda: all(n > n0 for n, n0 in zip(attempts(), before)), 3, 0.002,
                       "the waiter's attempt on every backend server")
            self.assertEqual(holder.cmd("UNLOCK", key), 0)
            t0 = time.monotonic()
            g = read_within(w, 5)
            took.append(time.monotonic() - t0)
            self.assertIsNotNone(g, "the waiter on %s was not granted" % b.addr())
            self.assertGranted(g)
            self.assertEqual(w.cmd("UNLOCK", key), 0)
            holder.close()
            w.close()
        return took

    def shared_and_semaphore_across(self, daemons):
        """Shared locks and a semaphore across daemons (two or more): a
        session on each of the first two holds a key shared, no daemon
        grants it exclusive, and an exclusive waiter on the last is granted
        once both let go, with a greater fence; then two permits of a
        semaphore of two, and a third waiter on the last daemon granted
        when one permit is given back."""
        key = unique_key()
        sa, sb = self.conn(daemons[0]), self.conn(daemons[1])
        ga = self.assertGranted(sa.cmd("LOCK", key, "SHARED", "WAIT", 0))
        gb = self.assertGranted(sb.cmd("LOCK", key, "SHARED", "WAIT", 0))
        self.assertLess(ga[1], gb[1])
        for d in daemons:
            self.assertIs(self.conn(d).cmd("LOCK", key, "WAIT", 0), NULL,
                          "exclusive granted on %s while the key is held shared" % d.addr())
        x = self.queue(daemons[-1], key, "WAIT", 20000, waiters=1)
        self.assertEqual(sa.cmd("UNLOCK", key), 0)
        self.assertIsNone(read_within(x, 0.3), "exclusive granted while one holds it shared")
        self.assertEqual(sb.cmd("UNLOCK", key), 0)
        gx = self.assertGranted(read_within(x, 5), "the exclusive waiter was not granted")
        self.assertGreater(gx[1], gb[1])
        self.assertEqual(x.cmd("UNLOCK", key), 0)
        sem = unique_key("sem")
        p1, p2 = self.conn(daemons[0]), self.conn(daemons[1])
        g1 = self.assertGranted(p1.cmd("LOCK", sem, "LIMIT", 2, "WAIT", 0))
        g2 = self.assertGranted(p2.cmd("LOCK", sem, "LIMIT", 2, "WAIT", 0))
        self.assertLess(g1[1], g2[1])
        for d in daemons:
            self.assertIs(self.conn(d).cmd("LOCK", sem, "LIMIT", 2, "WAIT", 0), NULL,
                          "a third permit of two on %s" % d.addr())
        p3 = self.queue(daemons[-1], sem, "LIMIT", 2, "WAIT", 20000, waiters=1)
        self.assertEqual(p2.cmd("UNLOCK", sem), 0)
        g3 = self.assertGranted(read_within(p3, 5), "the third permit was not granted")
        self.assertGreater(g3[1], g2[1])
        self.assertEqual(p1.cmd("UNLOCK", sem), 0)
        self.assertEqual(p3.cmd("UNLOCK", sem), 0)


class EtcdTestCase(RedisTestCase):
    """RedisTestCase for the etcd backend: etcd servers and dlockd processes
    started by a test (start_etcd, start_daemon) or for its class
    (class_etcd, class_daemon) are stopped after it, daemons first."""

    @classmethod
    def class_etcd(cls, **kw):
        e = EtcdServer(**kw).start()
        cls.addClassCleanup(e.stop_checked)
        return e

    @classmethod
    def class_daemon(cls, etcd_server, config="", **kw):
        kw.setdefault("backend", "etcd")
        d = Daemon(config, etcd=etcd_server, **kw)
        cls.addClassCleanup(d.stop_checked)
        return d.start()

    def start_etcd(self, **kw):
        e = EtcdServer(**kw).start()
        self.addCleanup(e.stop_checked)
        return e

    def start_daemon(self, etcd_server, config="", start=True, **kw):
        kw.setdefault("backend", "etcd")
        d = Daemon(config, etcd=etcd_server, **kw)
        self.addCleanup(d.stop_checked)
        return d.start() if start else d
