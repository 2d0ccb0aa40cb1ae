"""dlockd under a service manager: sd_notify messages (READY, STATUS,
WATCHDOG, RELOADING, STOPPING) on a NOTIFY_SOCKET the test binds, socket
activation (LISTEN_FDS), the configuration reload on SIGHUP, the checks of
-t that look at this host, the systemd units, and a build without
libsystemd."""

import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
import unittest

from dlocktest.daemon import Daemon, port_pings
from dlocktest.env import DLOCKD, WRAPPER, new_dir, unique_key
from dlocktest.proc import free_port, log_tail, reap, spawn, wait_until
from dlocktest.redis_server import RedisServer
from dlocktest.resp import Err, Raw, pairs

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
READY_BOUND = 10.0  # seconds dlockd waits for its backend before READY=1


class NotifySocket:
    """The service manager's end: an AF_UNIX datagram socket that collects
    what dlockd sends to NOTIFY_SOCKET."""

    def __init__(self):
        self.path = os.path.join(new_dir("notify"), "notify.sock")
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.s.bind(self.path)
        self.got = []  # every message so far, as (time.monotonic(), dict)

    def close(self):
        self.s.close()

    def env(self):
        return {"NOTIFY_SOCKET": self.path}

    def recv(self, timeout):
        """The next message as a dict (VAR -> value), or None after timeout s."""
        self.s.settimeout(max(timeout, 0.001))
        try:
            data = self.s.recv(4096)
        except socket.timeout:
            return None
        msg = dict(line.split("=", 1) for line in data.decode().split("\n") if line)
        self.got.append((time.monotonic(), msg))
        return msg

    def wait(self, pred, timeout=5.0, what="a notify message"):
        """The first message from now on for which pred is true; fails
        after timeout s."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            msg = self.recv(left) if left > 0 else None
            if msg is None:
                raise AssertionError("no %s within %.1f s; got %r"
                                     % (what, timeout, [m for _, m in self.got]))
            if pred(msg):
                return msg

    def drain(self, seconds):
        """Every message of the next seconds s."""
        out = []
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            msg = self.recv(left) if left > 0 else None
            if msg is None:
                return out
            out.append(msg)


def spawn_dlockd(args, env, pass_fds=(), log=None):
    """Start dlockd (under WRAPPER, if any) through bash, so that LISTEN_PID
    and WATCHDOG_PID can be its own pid ($$ of the shell that execs it); env
    values may use $$. A descriptor in pass_fds is moved to 3 (socket
    activation): bash, as dash takes descriptors 0 to 9 only, and the test
    process may have more open."""
    assigns = " ".join("%s=%s" % (k, v) for k, v in env.items())
    moves = "".join("exec 3<&%d %d<&-; " % (fd, fd) for fd in pass_fds if fd != 3)
    script = '%s%s exec "$@"' % (moves, assigns)
    out = open(log, "ab") if log else subprocess.DEVNULL
    try:
        return spawn(["bash", "-c", script, "bash"] + WRAPPER + [DLOCKD] + list(args),
                     stdin=subprocess.DEVNULL, stdout=out, stderr=out, pass_fds=pass_fds)
    finally:
        if log:
            out.close()


def stop(p, test, sig=signal.SIGTERM):
    """Stop a process started by spawn_dlockd; its exit status must be 0."""
    if p.poll() is None:
        p.send_signal(sig)
    test.assertEqual(reap(p), 0)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def empty_conf():
    """A configuration file with nothing in it: built-in defaults."""
    path = os.path.join(new_dir("conf"), "empty.yaml")
    write(path, "")
    return path


class TestNotify(unittest.TestCase):
    """sd_notify: READY=1 once serving, STATUS=, WATCHDOG=1, RELOADING=1,
    STOPPING=1."""

    def setUp(self):
        self.ns = NotifySocket()
        self.addCleanup(self.ns.close)

    def test_ready_after_listening_then_status_and_stopping(self):
        d = new_dir("dlockd")
        port = free_port()
        write(os.path.join(d, "c.yaml"), "")
        p = spawn_dlockd(["-c", os.path.join(d, "c.yaml"), "-l", "127.0.0.1:%d" % port],
                         self.ns.env(), log=os.path.join(d, "log"))
        try:
            ready = self.ns.wait(lambda m: "READY" in m, what="READY=1")
            self.assertEqual(ready["READY"], "1")
            # listeners are bound before READY=1
            self.assertTrue(port_pings(port))
            self.assertEqual(ready["STATUS"], "0 clients, 0 locks held, backend up")
            c = Raw(port=port)
            c.cmd("LOCK", unique_key())
            c.cmd("LOCK", unique_key())
            st = self.ns.wait(lambda m: "STATUS" in m, 5.0, "a new STATUS=")
            self.assertEqual(st["STATUS"], "1 client, 2 locks held, backend up")
            # unchanged: not sent again
            self.assertEqual([m for m in self.ns.drain(2.5) if "STATUS" in m], [])
            c.close()
            p.send_signal(signal.SIGTERM)
            self.ns.wait(lambda m: m.get("STOPPING") == "1", what="STOPPING=1")
            self.assertEqual(reap(p), 0)
        finally:
            stop(p, self)

    def test_reload_says_reloading_then_ready(self):
        d = new_dir("dlockd")
        conf = os.path.join(d, "c.yaml")
        write(conf, "")
        p = spawn_dlockd(["-c", conf, "-l", "127.0.0.1:%d" % free_port()], self.ns.env())
        try:
            self.ns.wait(lambda m: "READY" in m, what="READY=1")
            p.send_signal(signal.SIGHUP)
            m = self.ns.wait(lambda m: "RELOADING" in m, what="RELOADING=1")
            self.assertEqual(m["RELOADING"], "1")
            self.assertRegex(m["MONOTONIC_USEC"], r"^[0-9]+$")
            m = self.ns.wait(lambda m: "READY" in m, what="READY=1 after the reload")
            self.assertIn("backend up", m["STATUS"])
        finally:
            stop(p, self)

    def watchdog(self, usec, pid, seconds):
        """The WATCHDOG=1 pings of seconds s after READY=1, with
        WATCHDOG_USEC=usec and WATCHDOG_PID=pid ("$$": dlockd's own)."""
        p = spawn_dlockd(["-l", "127.0.0.1:%d" % free_port(), "-c", empty_conf()],
                         dict(self.ns.env(), WATCHDOG_USEC=str(usec), WATCHDOG_PID=pid))
        try:
            self.ns.wait(lambda m: "READY" in m, what="READY=1")
            return [m for m in self.ns.drain(seconds) if "WATCHDOG" in m]
        finally:
            stop(p, self)

    def test_watchdog_pings_at_half_the_interval(self):
        pings = self.watchdog(400000, "$$", 3.0)
        # every 200 ms: 15 in 3 s, give or take a loaded machine
        self.assertGreaterEqual(len(pings), 11, pings)
        self.assertLessEqual(len(pings), 16, pings)
        self.assertTrue(all(m["WATCHDOG"] == "1" for m in pings))

    def test_no_watchdog_for_another_pid(self):
        self.assertEqual(self.watchdog(200000, "1", 1.0), [])

    def test_ready_when_redis_connects(self):
        r = RedisServer().start()
        self.addCleanup(r.stop_checked)
        d = Daemon(backend="redis", redis=r, env=self.ns.env()).start()
        try:
            m = self.ns.wait(lambda m: "READY" in m, what="READY=1")
            # the harness's own probes may still be connected at that moment
            self.assertRegex(m["STATUS"], r"^\d+ clients?, 0 locks held, backend up$")
        finally:
            d.stop_ok(self)

    def test_ready_after_the_bound_when_the_backend_is_unreachable(self):
        port = free_port()  # nothing listens there
        d = Daemon(backend="redis", backend_url="redis://127.0.0.1:%d" % port,
                   env=self.ns.env())
        t0 = time.monotonic()
        d.start(wait_backend=False)
        try:
            # the daemon answers meanwhile, with BACKEND errors
            rep = d.raw().cmd("LOCK", unique_key(), "WAIT", "0")
            self.assertIsInstance(rep, Err)
            self.assertEqual(rep.code, "BACKEND")
            m = self.ns.wait(lambda m: "READY" in m, READY_BOUND + 5.0, "READY=1")
            elapsed = time.monotonic() - t0
            self.assertGreaterEqual(elapsed, READY_BOUND - 0.5)
            self.assertEqual(m["STATUS"], "backend unreachable: redis")
            self.assertIn("not up after 10000 ms", d.log())
            # from then on STATUS= says how it stands
            m = self.ns.wait(lambda m: "STATUS" in m, 5.0, "STATUS=")
            self.assertEqual(m["STATUS"], "0 clients, 0 locks held, backend down")
        finally:
            d.stop_ok(self)


class TestSocketActivation(unittest.TestCase):
    """LISTEN_FDS: the sockets the manager passes replace 'listen'."""

    def serve_on(self, sock, connect):
        d = new_dir("dlockd")
        conf = os.path.join(d, "c.yaml")
        log = os.path.join(d, "log")
        # the file's listener would fail: it must not be used, nor checked
        write(conf, 'listen:\n  - "unix:/nonexistent/dlockd.sock"\n')
        p = spawn_dlockd(["-c", conf], {"LISTEN_PID": "$$", "LISTEN_FDS": "1"},
                         pass_fds=(sock.fileno(),), log=log)
        sock.close()
        try:
            a, b = connect(), connect()
            key = unique_key()
            g = a.cmd("LOCK", key)
            self.assertIsInstance(g, list)
            self.assertEqual(pairs(b.cmd("STATUS", key))["holders"], 1)
            a.close()
            b.close()
            self.assertIn("socket activation: 1 socket from the service manager", log_tail(log))
        finally:
            stop(p, self)
        return log_tail(log)

    def test_tcp(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        port = s.getsockname()[1]
        log = self.serve_on(s, lambda: Raw(port=port))
        self.assertIn("listening on 127.0.0.1:%d" % port, log)

    def test_unix(self):
        path = os.path.join(new_dir("sock"), "d.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.listen(16)
        log = self.serve_on(s, lambda: Raw(unix=path))
        self.assertIn("listening on unix:%s" % path, log)
        # the manager's socket file stays when dlockd stops
        self.assertTrue(stat.S_ISSOCK(os.stat(path).st_mode))

    def test_not_a_listening_socket(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        d = new_dir("dlockd")
        log = os.path.join(d, "log")
        p = spawn_dlockd(["-c", empty_conf()], {"LISTEN_PID": "$$", "LISTEN_FDS": "1"},
                         pass_fds=(s.fileno(),), log=log)
        s.close()
        self.assertEqual(reap(p), 1)
        self.assertIn("socket 3 from the service manager is not a listening TCP or Unix "
                      "stream socket", log_tail(log))


class TestReload(unittest.TestCase):
    """SIGHUP: the file is read again; what may change live does, nothing
    is dropped."""

    BASE = ("auth:\n  password: %s\n"
            "locks:\n  default_ttl_ms: %d\n"
            "limits:\n  max_locks_per_session: %d\n"
            "log:\n  level: %s\n")

    def reload(self, d, text=None, expect="configuration reloaded"):
        if text is not None:
            write(d.conf, text)
        before = d.log(100000).count(expect)
        os.kill(d.pid, signal.SIGHUP)
        wait_until(lambda: d.log(100000).count(expect) > before, 5.0, 0.01,
                   "%r in the log" % expect)

    def authed(self, d, password, unix=False):
        c = d.raw(unix=unix)
        self.assertEqual(c.cmd("AUTH", password), "OK")
        return c

    def test_reloadable_settings_apply_and_nothing_is_dropped(self):
        d = Daemon(self.BASE % ("one", 30000, 2, "info")).start()
        self.addCleanup(d.stop_ok, self)
        key = unique_key()
        holder = self.authed(d, "one")
        g = holder.cmd("LOCK", key)
        self.assertEqual(g[2], 30000)
        waiter = self.authed(d, "one", unix=True)
        waiter.send(Raw.encode("LOCK", key, "WAIT", "30000"))
        probe = self.authed(d, "one")
        wait_until(lambda: pairs(probe.cmd("STATUS", key))["waiters"] == 1, 3)
        self.assertIsInstance(holder.cmd("LOCK", unique_key()), list)
        self.assertTrue(holder.cmd("LOCK", unique_key()).startswith("LIMIT"))

        self.reload(d, self.BASE % ("two", 20000, 3, "debug"))
        self.assertIn("(4 settings changed)", d.log())
        self.assertIn("limits.max_locks_per_session: 2 -> 3", d.log())
        self.assertIn("auth.password: (hidden) -> (hidden)", d.log())
        self.assertNotIn("two", re.sub(r"configuration reloaded.*", "", d.log()))
        # held, and the waiter still waits, on the same connections
        self.assertEqual(holder.cmd("LOCKS")[0][1], g[0])
        st = pairs(probe.cmd("STATUS", key))
        self.assertEqual((st["holders"], st["waiters"]), (1, 1))
        # the new limit, the new default TTL
        g3 = holder.cmd("LOCK", unique_key())
        self.assertIsInstance(g3, list)
        self.assertEqual(g3[2], 20000)
        self.assertTrue(holder.cmd("LOCK", unique_key()).startswith("LIMIT"))
        # the new password
        c = d.raw()
        self.assertEqual(c.cmd("AUTH", "one"), Err("WRONGPASS invalid password"))
        self.assertEqual(c.cmd("AUTH", "two"), "OK")
        # the new log level
        wait_until(lambda: " debug " in d.log(), 3.0, 0.01, "a debug line in the log")
        # the waiter gets the key when the holder lets go
        self.assertEqual(holder.cmd("UNLOCK", key), 0)
        self.assertIsInstance(waiter.read(), list)
        for x in (holder, waiter, probe, c):
            x.close()

    def test_broken_file_keeps_the_configuration(self):
        d = Daemon(self.BASE % ("one", 30000, 2, "info")).start()
        self.addCleanup(d.stop_ok, self)
        holder = self.authed(d, "one")
        holder.cmd("LOCK", unique_key())
        self.reload(d, "auth:\n  password: two\nlimits:\n  max_locks_per_session: many\n"
                    "log:\n  level: loud\n", "configuration not reloaded")
        log = d.log()
        self.assertIn("configuration not reloaded (2 errors): keeping the one in force", log)
        self.assertIn("%s:4:26: 'limits.max_locks_per_session' must be a decimal integer, "
                      "not 'many'" % d.conf, log)
        self.assertIn("%s:6:10: 'log.level' must be debug, info, warn or error, not 'loud'"
                      % d.conf, log)
        self.assertEqual(holder.cmd("PING"), "PONG")
        self.assertEqual(len(holder.cmd("LOCKS")), 1)
        self.authed(d, "one").close()
        self.assertEqual(d.raw().cmd("AUTH", "two"), Err("WRONGPASS invalid password"))
        holder.close()

    def test_log_directory_missing_refused(self):
        d = Daemon("").start()
        self.addCleanup(d.stop_ok, self)
        self.reload(d, "log:\n  level: debug\n  file: /nonexistent/dir/d.log\n",
                    "configuration not reloaded")
        self.assertIn("%s:3:9: cannot write log file '/nonexistent/dir/d.log': directory "
                      "/nonexistent/dir: No such file or directory" % d.conf, d.log())
        self.assertNotIn(" debug ", d.log())
        self.assertEqual(d.raw().cmd("PING"), "PONG")

    def test_password_removed_lets_waiting_sessions_in(self):
        d = Daemon(self.BASE % ("one", 30000, 5, "info")).start()
        self.addCleanup(d.stop_ok, self)
        c = d.raw()
        self.assertEqual(c.cmd("LOCK", unique_key()).code, "NOAUTH")
        self.reload(d, self.BASE.replace("auth:\n  password: %s\n", "")
                    % (30000, 5, "info"))
        self.assertIsInstance(c.cmd("LOCK", unique_key()), list)
        c.close()

    def test_setting_that_needs_a_restart_is_kept(self):
        d = Daemon('unix_socket_mode: "0660"\nbackend:\n  type: memory\n').start()
        self.addCleanup(d.stop_ok, self)
        self.reload(d, 'unix_socket_mode: "0600"\nlocks:\n  lock_delay_ms: 100\n'
                    'listen:\n  - "127.0.0.1:1"\n')
        log = d.log()
        self.assertIn("unix_socket_mode changed: restart dlockd to apply; keeping 0660", log)
        self.assertIn("(1 setting changed)", log)
        self.assertIn("locks.lock_delay_ms: 0 -> 100", log)
        # -l wins over the file's listen: no change there
        self.assertNotIn("listen changed", log)
        self.assertEqual(stat.S_IMODE(os.stat(d.sock).st_mode), 0o660)
        self.assertEqual(d.raw().cmd("PING"), "PONG")

    def test_idle_timeout_turned_on(self):
        d = Daemon("").start()
        self.addCleanup(d.stop_ok, self)
        silent = d.raw()
        self.assertEqual(silent.cmd("PING"), "PONG")
        self.reload(d, "sessions:\n  idle_timeout_ms: 300\n")
        self.assertTrue(silent.is_closed(3.0), "the silent session was not closed")
        self.assertEqual(d.info()["session_idle_timeout_ms"], "300")
        silent.close()

    def test_log_file_reopened_after_rotation(self):
        dd = new_dir("dlockd")
        logfile = os.path.join(dd, "dlockd.log")
        d = Daemon("log:\n  file: %s\n" % logfile, directory=dd).start()
        self.addCleanup(d.stop_ok, self)
        os.rename(logfile, logfile + ".1")
        os.kill(d.pid, signal.SIGHUP)
        wait_until(lambda: os.path.exists(logfile), 5.0, 0.01, "a new log file")
        wait_until(lambda: "configuration reloaded" in open(logfile).read(), 5.0, 0.01,
                   "the reload logged in the new file")
        with open(logfile + ".1") as f:
            self.assertIn("SIGHUP: reloading the configuration", f.read())
        c = d.raw()
        c.cmd("PING")
        c.close()


class TestHostChecks(unittest.TestCase):
    """-t (and a start) refuse what this host cannot serve, at the setting's
    place in the file."""

    def check(self, text, start=False):
        d = new_dir("conf")
        path = os.path.join(d, "c.yaml")
        write(path, text)
        args = ["-c", path] if start else ["-t", "-c", path]
        p = spawn([DLOCKD] + args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE)
        out, err = p.communicate(timeout=10)
        reap(p)
        return p.returncode, out.decode(), err.decode(), path, d

    def test_every_problem_reported(self):
        rc, out, err, path, d = self.check(
            'listen:\n  - "192.0.2.1:7480"\n  - "unix:/nonexistent/dir/x.sock"\n'
            '  - "127.0.0.1:0"\nlog:\n  file: /nonexistent/dir/dlockd.log\n'
            'protected_mode: false\n')
        self.assertEqual(rc, 1, out)
        self.assertEqual(err.splitlines(), [
            "%s:2:3: cannot listen on '192.0.2.1:7480': 192.0.2.1 is not an address of "
            "this host" % path,
            "%s:2:3: cannot listen on 'unix:/nonexistent/dir/x.sock': directory "
            "/nonexistent/dir: No such file or directory" % path,
            "%s:6:9: cannot write log file '/nonexistent/dir/dlockd.log': directory "
            "/nonexistent/dir: No such file or directory" % path])

    def test_socket_directory_is_a_file(self):
        d = new_dir("x")
        write(os.path.join(d, "file"), "")
        rc, _, err, path, _ = self.check('listen:\n  - "unix:%s/file/x.sock"\n' % d)
        self.assertEqual(rc, 1)
        self.assertIn("%s:2:3: cannot listen on 'unix:%s/file/x.sock': %s/file is not a "
                      "directory" % (path, d, d), err)

    def test_local_addresses_pass(self):
        d = new_dir("x")
        rc, out, err, _, _ = self.check(
            'listen:\n  - "127.0.0.2:%d"\n  - "0.0.0.0:%d"\n  - "localhost:%d"\n'
            '  - "unix:%s/d.sock"\nprotected_mode: false\nlog:\n  file: %s/d.log\n'
            % (free_port(), free_port(), free_port(), d, d))
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.strip(), "configuration OK")
        # nothing was made
        self.assertEqual(os.listdir(d), [])

    def test_start_fails_with_the_same_message(self):
        rc, _, err, path, _ = self.check(
            'listen:\n  - "unix:/nonexistent/dir/x.sock"\n', start=True)
        self.assertEqual(rc, 1)
        self.assertEqual(err.strip(), "%s:2:3: cannot listen on 'unix:/nonexistent/dir/x.sock'"
                         ": directory /nonexistent/dir: No such file or directory" % path)

    def test_command_line_listener_checked(self):
        p = spawn([DLOCKD, "-t", "-c", empty_conf(), "-l", "unix:/nonexistent/dir/x.sock"],
                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = p.communicate(timeout=10)
        reap(p)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(err.decode().strip(), "command line: cannot listen on "
                         "'unix:/nonexistent/dir/x.sock': directory /nonexistent/dir: "
                         "No such file or directory")

    def test_configuration_file_named_at_start(self):
        d = Daemon("").start()
        try:
            self.assertIn("info  configuration: %s" % d.conf, d.log())
        finally:
            d.stop_ok(self)


class TestUnits(unittest.TestCase):
    """systemd/dlockd.service and dlockd.socket."""

    def units(self):
        return [os.path.join(SRC, "systemd", u) for u in ("dlockd.service", "dlockd.socket")]

    def test_service_settings(self):
        with open(self.units()[0]) as f:
            text = f.read()
        keys = dict(re.findall(r"^(\w+)=(.*)$", text, re.M))
        self.assertEqual(keys["Type"], "notify")
        self.assertEqual(keys["NotifyAccess"], "main")
        self.assertEqual(keys["WatchdogSec"], "30s")
        self.assertEqual(keys["ExecReload"], "/bin/kill -HUP $MAINPID")
        self.assertEqual(keys["User"], "dlockd")
        self.assertEqual(keys["Group"], "dlockd")
        self.assertEqual(keys["RuntimeDirectory"], "dlockd")
        self.assertEqual(keys["RuntimeDirectoryMode"], "0750")
        self.assertNotIn("DynamicUser", keys)
        self.assertNotIn("PrivateUsers", keys)

    def test_systemd_analyze_verify(self):
        analyze = shutil.which("systemd-analyze")
        if analyze is None:
            self.skipTest("systemd-analyze is not installed (Debian package systemd)")
        # the units name /usr/sbin/dlockd: verify them against a copy whose
        # ExecStart is the binary under test
        d = new_dir("units")
        for u in self.units():
            with open(u) as f:
                text = f.read().replace("/usr/sbin/dlockd", DLOCKD)
            write(os.path.join(d, os.path.basename(u)), text)
        p = subprocess.run([analyze, "verify", "--man=no"] +
                           [os.path.join(d, os.path.basename(u)) for u in self.units()],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        out = p.stdout.decode(errors="replace")
        # without a running systemd (a container) verify cannot load units
        # at all; that is not a fault of the units
        if "Failed to initialize manager" in out or "System has not been booted" in out:
            self.skipTest("systemd-analyze verify cannot run here: %s" % out.strip())
        self.assertEqual(p.returncode, 0, out)
        self.assertEqual(out.strip(), "", out)


class TestWithoutLibsystemd(unittest.TestCase):
    """make SYSTEMD=0 builds a daemon that works the same and never
    notifies; DEFAULT_CONF can be set at build time."""

    def test_build_and_run(self):
        if not os.path.exists(os.path.join(SRC, "Makefile")):
            self.skipTest("not run from a source tree")
        build = new_dir("build-nosystemd")
        # the default configuration file follows SYSCONFDIR
        missing = os.path.join(build, "none", "dlockd", "dlockd.yaml")
        p = subprocess.run(["make", "-s", "-C", SRC, "-j2", "SYSTEMD=0", "BUILD=" + build,
                            "SYSCONFDIR=" + os.path.join(build, "none"), build + "/dlockd"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
        self.assertEqual(p.returncode, 0, p.stdout.decode(errors="replace"))
        ldd = subprocess.run(["ldd", build + "/dlockd"], stdout=subprocess.PIPE).stdout
        self.assertNotIn(b"libsystemd", ldd)
        ns = NotifySocket()
        self.addCleanup(ns.close)
        port = free_port()
        log = os.path.join(build, "log")
        with open(log, "ab") as out:
            d = spawn(["sh", "-c", 'WATCHDOG_PID=$$ exec "$0" "$@"', build + "/dlockd",
                       "-l", "127.0.0.1:%d" % port], stdin=subprocess.DEVNULL, stdout=out,
                      stderr=out, env=dict(os.environ, WATCHDOG_USEC="200000", **ns.env()))
        try:
            wait_until(lambda: port_pings(port), 5.0, 0.01, "the daemon to answer")
            c = Raw(port=port)
            self.assertIsInstance(c.cmd("LOCK", unique_key()), list)
            c.close()
            self.assertEqual(ns.drain(1.0), [])
            self.assertIn("no configuration file at %s: built-in defaults" % missing,
                          log_tail(log))
        finally:
            stop(d, self)


if __name__ == "__main__":
    unittest.main()
