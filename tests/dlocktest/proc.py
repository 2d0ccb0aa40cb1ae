"""Processes: starting them so that every one is stopped whatever happens,
stopping them by their pid, waiting for them (always bounded), and the base
of the server classes (ServerProcess).

Every process spawn() starts is recorded in the scratch directory's pids/
(env.TMP), so that the runner can kill it if this interpreter dies; this
interpreter kills the ones still running at exit, and on SIGTERM / SIGINT
once install_signal_handlers() ran.
"""

import atexit
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import threading
import time

from .env import START_TIMEOUT, STOP_TIMEOUT, TMP

_procs = {}  # pid -> Popen of every live process started by the tests
_procs_lock = threading.Lock()


def _pid_file(pid):
    return os.path.join(TMP, "pids", str(pid))


def spawn(argv, **kw):
    """Start a process and record it so that it is stopped at exit.

    Returns the Popen; reap it with reap() (or let the exit handler kill it).
    """
    p = subprocess.Popen(argv, **kw)
    with _procs_lock:
        _procs[p.pid] = p
    with open(_pid_file(p.pid), "w"):
        pass
    return p


def forget(p):
    """Stop tracking p, which has been waited for."""
    with _procs_lock:
        _procs.pop(p.pid, None)
    untrack_pid(p.pid)


def tracked(p):
    """Whether p (a Popen of spawn()) is still tracked: not reaped yet."""
    with _procs_lock:
        return p.pid in _procs


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


def end_process(p, *pipes):
    """Kill p if it still runs, reap it and close its pipes."""
    if p.poll() is None:
        p.kill()
    reap(p)
    for f in pipes:
        f.close()


def track_pid(pid):
    """Record a process that a child started (e.g. the command of `dlock
    run`) so that it is killed at exit too. Undo with untrack_pid."""
    with open(_pid_file(pid), "w"):
        pass


def untrack_pid(pid):
    try:
        os.unlink(_pid_file(pid))
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


def run_bytes(argv, timeout, input=None, env=None):
    """Run a program to its end: (status, stdout, stderr) as bytes, input
    (bytes) on its standard input if given. When it has not ended within
    timeout s it is killed and subprocess.TimeoutExpired raised."""
    p = spawn(argv, stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        out, err = p.communicate(input, timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise
    finally:
        forget(p)
    return p.returncode, out, err


def run_to_end(argv, timeout=10.0, input=None, env=None):
    """Run a program to its end: (status, stdout, stderr) as str. It is
    killed, and the test fails, when it has not ended within timeout s."""
    argv = [str(a) for a in argv]
    try:
        rc, out, err = run_bytes(argv, timeout, None if input is None else input.encode(),
                                 env)
    except subprocess.TimeoutExpired:
        raise AssertionError("%s did not finish within %.0f s" % (" ".join(argv), timeout))
    return rc, out.decode(errors="replace"), err.decode(errors="replace")


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


def sleep_until(t):
    """Sleep until time.monotonic() is t (not at all when it is past)."""
    left = t - time.monotonic()
    if left > 0:
        time.sleep(left)


def results(calls, timeout):
    """The results of in_thread() calls, in their order, each waited for
    at most timeout s."""
    return [c.result(timeout) for c in calls]


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


# ---- ports and what /proc says ----

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
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= n:
        return
    if hard != resource.RLIM_INFINITY and hard < n:
        raise AssertionError("open files: need %d descriptors, the hard limit is %d "
                             "(ulimit -Hn)" % (n, hard))
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))


# ---- a server process ----

class PortTaken(Exception):
    """A server could not bind its port."""


class ServerProcess:
    """What the server classes (RedisServer, EtcdServer, Sentinel) share:
    one server process in a directory of its own, started (retrying on other
    ports if a free port was taken meanwhile), paused, resumed, stopped by
    its pid and started again on its ports. Every process is recorded by
    spawn(), so one a test could not stop is killed at exit. A subclass
    gives NAME, PACKAGE, WAITING_FOR, binary(), argv(), answers() and
    new_ports(), and sets fixed_port (the ports were given: never move)."""

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
            except PortTaken:
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

    def new_ports(self):
        """Take other free ports after PortTaken; False where the ports
        are fixed."""
        if self.fixed_port:
            return False
        self.port = free_port()
        return True

    def _ready(self):
        if self.proc.poll() is not None:
            rc = reap(self.proc)
            self.proc = None
            if self.PORT_TAKEN in self.log().lower():
                raise PortTaken()
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

    def restart(self):
        """Start again after stop() (or a kill), on the same ports and in
        the same directory; fails rather than move to other ports if one is
        taken."""
        fixed, self.fixed_port = self.fixed_port, True
        try:
            return self.start()
        finally:
            self.fixed_port = fixed

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
