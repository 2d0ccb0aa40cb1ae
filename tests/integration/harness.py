"""Helpers of the dlockd integration tests.

Starts real dlockd processes on free loopback ports in a temporary directory,
talks to them with redis-py and with a raw RESP2/RESP3 socket client, and
makes sure every process a test starts is stopped whatever happens.

Environment (set by run.sh):
  DLOCKD_BIN       the daemon under test
  DLOCK_BIN        the dlock command-line client
  DLOCKD_TEST_TMP  a scratch directory that run.sh removes at exit; every
                   process started here is recorded in its pids/ directory
                   so that run.sh can stop it if this interpreter dies
"""

import atexit
import itertools
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import redis

DLOCKD = os.environ.get("DLOCKD_BIN", os.path.abspath("build/dlockd"))
DLOCK = os.environ.get("DLOCK_BIN", os.path.abspath("build/dlock"))
# a command prefix for every dlockd started, e.g. "valgrind -q --error-exitcode=99"
WRAPPER = shlex.split(os.environ.get("DLOCKD_WRAPPER", ""))
PYTHON = "/usr/bin/python3"
REDIS_CLI = "redis-cli"

START_TIMEOUT = 20.0 if WRAPPER else 5.0  # seconds a daemon may take to accept
STOP_TIMEOUT = 20.0 if WRAPPER else 5.0  # seconds a daemon may take to exit
IO_TIMEOUT = 10.0  # socket timeout of every client connection

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


# ---- the daemon ----

def yaml_str(s):
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')


class Daemon:
    """One dlockd process.

    config: YAML text (without "listen" unless listen_from_config) written to
    dlockd.yaml in the daemon's own directory; the daemon always gets -c so
    that no system configuration is read. By default it listens on
    127.0.0.1:<free port> and unix:<dir>/dlockd.sock through -l options.
    """

    def __init__(self, config="", port=None, unix=True, listen_from_config=False,
                 extra_args=(), directory=None):
        self.dir = directory or new_dir("dlockd")
        self.port = port or free_port()
        self.sock = os.path.join(self.dir, "dlockd.sock") if unix else None
        self.conf = os.path.join(self.dir, "dlockd.yaml")
        self.config = config
        self.listen_from_config = listen_from_config
        self.extra_args = list(extra_args)
        self.logfile = os.path.join(self.dir, "dlockd.log")
        self.proc = None
        self.rc = None

    def argv(self, wrapped=True):
        a = (WRAPPER if wrapped else []) + [DLOCKD, "-c", self.conf]
        if not self.listen_from_config:
            a += ["-l", "127.0.0.1:%d" % self.port]
            if self.sock:
                a += ["-l", "unix:" + self.sock]
        return a + self.extra_args

    def start(self):
        """Start and wait (bounded) until every listener accepts."""
        if not os.path.exists(DLOCKD):
            raise AssertionError("dlockd binary missing: %s" % DLOCKD)
        with open(self.conf, "w") as f:
            f.write(self.config)
        self.rc = None
        with open(self.logfile, "ab") as log:
            self.proc = spawn(self.argv(), stdin=subprocess.DEVNULL,
                              stdout=log, stderr=log)

        def ready():
            if self.proc.poll() is not None:
                rc = reap(self.proc)
                raise AssertionError("dlockd exited with %d at start-up:\n%s"
                                     % (rc, self.log()))
            if not port_pings(self.port):
                return False
            return self.sock is None or unix_accepts(self.sock)

        wait_until(ready, START_TIMEOUT, 0.01, "dlockd to accept connections")
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

    def log(self):
        try:
            with open(self.logfile, errors="replace") as f:
                return f.read()[-4000:]
        except FileNotFoundError:
            return ""

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


class DaemonTestCase(unittest.TestCase):
    """A test class sharing one daemon, started with CONFIG, among its tests."""

    CONFIG = ""
    daemon = None

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(cls.CONFIG).start()

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
    """A RESP connection on a plain socket, for byte-level tests."""

    def __init__(self, port=None, unix=None, host="127.0.0.1", timeout=IO_TIMEOUT):
        if unix:
            self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.s.settimeout(timeout)
            self.s.connect(unix)
        else:
            self.s = socket.create_connection((host, port), timeout=timeout)
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

    @staticmethod
    def encode(*args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, int):
                a = str(a)
            if isinstance(a, str):
                a = a.encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

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


def redis_cli(*args, timeout=10.0, input=None):
    """Run redis-cli; returns (status, stdout, stderr) as str."""
    p = spawn([REDIS_CLI] + [str(a) for a in args], stdin=subprocess.PIPE,
              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(input.encode() if input else None, timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        forget(p)
        raise AssertionError("redis-cli %s did not finish within %.0f s" % (args, timeout))
    forget(p)
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def run_dlock(args, env=None, timeout=10.0):
    """Run the dlock CLI; returns (status, stdout, stderr) as str."""
    if not os.path.exists(DLOCK):
        raise AssertionError("dlock binary missing: %s" % DLOCK)
    e = dict(os.environ)
    e.update(env or {})
    p = spawn([DLOCK] + [str(a) for a in args], stdin=subprocess.DEVNULL,
              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e)
    try:
        out, err = p.communicate(None, timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        forget(p)
        raise AssertionError("dlock %s did not finish within %.0f s" % (args, timeout))
    forget(p)
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")


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
