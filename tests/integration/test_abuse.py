"""Hostile and careless clients, and what keeps strangers out: malformed
frames, requests never finished, clients that never authenticate or never
read, the keys limit, protected mode, the Unix socket's group, and secrets
kept out of the log and of every reply."""

import grp
import os
import random
import socket
import stat
import threading
import time

from dlocktest.cases import DaemonTestCase
from dlocktest.daemon import Daemon, run_dlockd
from dlocktest.env import WRAPPER, new_dir, unique_key
from dlocktest.proc import free_port, wait_until
from dlocktest.redis_server import RedisServer
from dlocktest.resp import Err, Raw

# how long a closed connection may take to be seen closed: the timeouts
# below are short, but the daemon may run under valgrind
CLOSE_WITHIN = 15.0


def vm_kib(pid, field):
    """A VmXXX line of /proc/PID/status, in KiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s in /proc/%d/status" % (field, pid))


class TestHostileFrames(DaemonTestCase):
    """Frames a fuzzer or an attacker would send: each gets an error and a
    close within a bounded time; the daemon goes on serving the others and
    never reserves memory for a size it was only told about."""

    CONFIG = ("limits:\n  max_request_bytes: 536870912\n  max_key_bytes: 1024\n"
              "sessions:\n  request_timeout_ms: 1000\n")

    def test_lengths_and_nesting(self):
        cases = [
            (b"*2147483648\r\n", "array count past 2^31"),
            (b"*9223372036854775808\r\n", "array count past 2^63"),
            (b"*99999999999999999999999\r\n", "array count of 23 digits"),
            (b"*-2\r\n", "array count below -1"),
            (b"*1\r\n$-2\r\n", "bulk length below -1"),
            (b"*1\r\n$-1\r\n", "a null bulk as an argument"),
            (b"*1\r\n$9223372036854775807\r\n", "bulk length of 2^63 - 1"),
            (b"*1\r\n$18446744073709551616\r\n", "bulk length past 2^64"),
            (b"*1\r\n$ 5\r\n", "bulk length with a blank"),
            (b"*1\r\n$0x10\r\n", "bulk length in hex"),
            (b"*1\r\n*1\r\n$4\r\nPING\r\n", "a nested array"),
            (b"*1\r\n" * 100000, "100000 nested arrays"),
            (b"*1\r\n%1\r\n", "a RESP3 map as an argument"),
            (b"*1\r\n_\r\n", "a RESP3 null as an argument"),
            (b"*3\r\n$4\r\nPING\r\n\x00\xff\r\n", "garbage where an argument belongs"),
        ]
        for data, what in cases:
            self.expect_protocol_error(data, what, CLOSE_WITHIN)
        self.assertEqual(self.raw().cmd("PING"), "PONG")

    def test_announced_size_is_not_reserved(self):
        """A length within the limit (512 MiB here) is not allocated on
        announcement: memory follows the bytes that really came, and the
        unfinished request is closed by sessions.request_timeout_ms."""
        before = int(self.info()["request_timeouts_total"])
        vsz = vm_kib(self.daemon.pid, "VmSize")
        conns = []
        for _ in range(8):
            raw = self.raw()
            raw.send(b"*2\r\n$4\r\nPING\r\n$500000000\r\nabc")
            conns.append(raw)
        self.assertEqual(self.raw().cmd("PING"), "PONG")  # the daemon took them
        if not WRAPPER:     # valgrind's own memory would hide the figure
            grown = vm_kib(self.daemon.pid, "VmSize") - vsz
            self.assertLess(grown, 64 * 1024, "VmSize grew by %d KiB for 8 announced "
                            "500 MB arguments" % grown)
        for raw in conns:
            self.assertTrue(raw.is_closed(CLOSE_WITHIN), "unfinished request not closed")
        wait_until(lambda: int(self.info()["request_timeouts_total"]) >= before + 8,
                   CLOSE_WITHIN, 0.05, "request_timeouts_total to count 8")

    def test_garbage_streams(self):
        """Random bytes: every stream ends with an error and a close (or a
        close at the request timeout, for bytes that happen to start a long
        request), and the daemon stays up."""
        rnd = random.Random(20261124)
        for i in range(20):
            data = bytes(rnd.getrandbits(8) for _ in range(rnd.choice((16, 512, 65536))))
            raw = self.raw()
            try:
                raw.send(data)
            except OSError:
                pass    # closed while we were still sending: fine
            self.assertTrue(raw.is_closed(CLOSE_WITHIN),
                            "stream %d: connection not closed" % i)
        self.assertEqual(self.raw().cmd("PING"), "PONG")

    def test_slow_request_closed(self):
        """A request sent a byte at a time is closed at the request timeout
        counted from its first byte: trickling does not extend it."""
        key = unique_key()
        raw = self.raw()
        self.assertIsInstance(raw.cmd("LOCK", key), list)
        frame = Raw.encode("STATUS", "x" * 1000)
        start = time.monotonic()
        closed = False
        for b in frame:
            try:
                raw.send(bytes([b]))
            except OSError:
                closed = True
                break
            if time.monotonic() - start > CLOSE_WITHIN:
                break
            time.sleep(0.02)
        self.assertTrue(closed or raw.is_closed(CLOSE_WITHIN), "slow request not closed")
        # the session's lock went with it
        self.wait_status(key, "after the slow client was closed", mode=b"free")


class TestLogin(DaemonTestCase):
    CONFIG = ('auth:\n  password: "s3cret"\nsessions:\n  login_timeout_ms: 300\n'
              '  request_timeout_ms: 60000\n')

    def test_unauthenticated_connection_closed(self):
        before = int(self.info(self.authed())["login_timeouts_total"])
        idle = self.raw()
        partial = self.raw()
        partial.send(b"*2\r\n$4\r\nAUTH\r\n$6\r\ns3")
        pinger = self.raw()
        self.assertEqual(pinger.cmd("PING"), "PONG")  # allowed, but not a login
        good = self.authed()
        for c in (idle, partial, pinger):
            self.assertTrue(c.is_closed(CLOSE_WITHIN), "unauthenticated connection stayed")
        self.assertEqual(good.cmd("PING"), "PONG")
        time.sleep(0.5)
        self.assertEqual(good.cmd("PING"), "PONG")
        wait_until(lambda: int(self.info(good)["login_timeouts_total"]) >= before + 3,
                   CLOSE_WITHIN, 0.05, "login_timeouts_total to count 3")

    def authed(self):
        raw = self.raw()
        self.assertEqual(raw.cmd("AUTH", "s3cret"), "OK")
        return raw


class TestNonReader(DaemonTestCase):
    CONFIG = "sessions:\n  output_timeout_ms: 1000\n"

    def test_dropped_and_locks_released(self):
        """A client that holds a lock and floods requests without reading
        is disconnected once its replies have waited output_timeout_ms; its
        lock goes to the next waiter."""
        key = unique_key()
        before = int(self.info()["output_drops_total"])
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 14)
        s.connect(("127.0.0.1", self.daemon.port))
        s.sendall(Raw.encode("LOCK", key))
        waiter = self.raw()
        waiter.send(Raw.encode("LOCK", key, "WAIT", "60000"))
        self.wait_status(key, "with the flooder holding", waiters=1)
        stop = threading.Event()

        def flood():
            chunk = b"PING " + b"x" * 1000 + b"\r\n"
            s.settimeout(1.0)
            while not stop.is_set():
                try:
                    s.sendall(chunk * 64)
                except socket.timeout:
                    continue
                except OSError:
                    return
        t = threading.Thread(target=flood, daemon=True)
        t.start()
        try:
            waiter.settimeout(CLOSE_WITHIN + 30)
            grant = waiter.read()
            self.assertIsInstance(grant, list, grant)
        finally:
            stop.set()
            t.join(5)
            s.close()
        self.assertGreaterEqual(int(self.info()["output_drops_total"]), before + 1)
        self.assertIn("sessions.output_timeout_ms): closing", self.daemon.log())


class TestKeysLimit(DaemonTestCase):
    CONFIG = "limits:\n  max_keys: 3\n"

    def test_max_keys(self):
        keys = [unique_key() for _ in range(4)]
        a, b = self.raw(), self.raw()
        self.assertIsInstance(a.cmd("LOCK", keys[0]), list)
        self.assertIsInstance(a.cmd("LOCK", keys[1]), list)
        self.assertIsInstance(b.cmd("LOCK", keys[2], "SHARED"), list)
        rep = b.cmd("LOCK", keys[3])
        self.assertEqual(rep, Err("LIMIT too many keys locked on this server "
                                  "(limits.max_keys is 3)"))
        # a key in use still takes more
        self.assertIsInstance(a.cmd("LOCK", keys[2], "SHARED"), list)
        # the connection stays usable, and a released key makes room
        self.assertEqual(b.cmd("UNLOCK", keys[2]), 0)
        self.assertEqual(a.cmd("UNLOCK", keys[2]), 0)
        self.assertIsInstance(b.cmd("LOCK", keys[3]), list)


class TestProtectedMode(DaemonTestCase):
    CONFIG = ""

    def run_dlockd(self, args, config=""):
        d = new_dir("protected")
        path = os.path.join(d, "c.yaml")
        with open(path, "w") as f:
            f.write(config)
        rc, _, err = run_dlockd(["-c", path] + args)
        return rc, err, path

    def test_refused_beyond_loopback_without_password(self):
        port = free_port()
        for args in (["-l", "0.0.0.0:%d" % port], ["-t", "-l", "[::]:%d" % port]):
            rc, err, _ = self.run_dlockd(args)
            self.assertEqual(rc, 1, err)
            self.assertIn("command line: 'listen' has ", err)
            self.assertIn("which is not a loopback address, and no 'auth.password' is set",
                          err)
        rc, err, path = self.run_dlockd(["-t"], 'listen: ["0.0.0.0:%d"]\n' % port)
        self.assertEqual(rc, 1, err)
        self.assertIn("%s:1:9: 'listen' has 0.0.0.0:%d" % (path, port), err)

    def test_allowed_with_password_or_when_off(self):
        for config in ('auth:\n  password: "pw"\n', "protected_mode: false\n"):
            port = free_port()
            d = Daemon(config + 'listen: ["0.0.0.0:%d"]\n' % port, port=port, unix=False,
                       listen_from_config=True).start()
            try:
                raw = Raw(port=d.port)
                if "password" in config:
                    self.assertEqual(raw.cmd("AUTH", "pw"), "OK")
                self.assertEqual(raw.cmd("PING"), "PONG")
                raw.close()
            finally:
                d.stop_ok(self)


class TestUnixSocketGroup(DaemonTestCase):
    CONFIG = ""

    def test_group_and_mode(self):
        # root may give any group; anyone else its own
        gid = grp.getgrnam("daemon").gr_gid if os.geteuid() == 0 else os.getegid()
        d = Daemon('unix_socket_mode: "0660"\nunix_socket_group: %d\n' % gid).start()
        try:
            st = os.stat(d.sock)
            self.assertEqual(st.st_gid, gid)
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o660)
            self.assertEqual(d.ping(unix=True), "PONG")
        finally:
            d.stop_ok(self)


class TestSecretsStayHidden(DaemonTestCase):
    """Passwords (the clients', the admin's, Redis's) never reach the log,
    even at debug, nor INFO, CLIENT LIST or the replies to bad AUTHs."""

    CONFIG = ""
    PW = "clientpw-4f1c9e"
    ADMIN = "adminpw-77b2d0"
    REDIS_PW = "redispw-0a9e13"
    WRONG = "wrongpw-5d3c21"

    def test_no_secret_anywhere(self):
        r = RedisServer(password=self.REDIS_PW).start()
        self.addCleanup(r.stop_checked)
        config = ('auth:\n  password: "%s"\n  admin_password: "%s"\nlog:\n  level: debug\n'
                  % (self.PW, self.ADMIN))
        d = Daemon(config, backend="redis", redis=r, backend_conf={}).start(
            wait_backend=False)
        try:
            def connected():
                c = d.raw()
                try:
                    c.cmd("AUTH", self.PW)
                    return b"backend_connected:1" in c.cmd("INFO")
                finally:
                    c.close()
            wait_until(connected, CLOSE_WITHIN, 0.05, "the backend to connect")
            seen = []
            raw = d.raw()
            seen.append(raw.cmd("AUTH", self.WRONG))
            seen.append(raw.cmd("AUTH", "default", self.WRONG))
            seen.append(raw.cmd("HELLO", "3", "AUTH", "default", self.WRONG))
            seen.append(raw.cmd("AUTH", self.PW))
            seen.append(raw.cmd("AUTH", "admin", self.ADMIN))
            seen.append(raw.cmd("CLIENT", "SETNAME", "worker"))
            seen.append(raw.cmd("INFO"))
            seen.append(raw.cmd("CLIENT", "LIST"))
            seen.append(raw.cmd("CLIENT", "INFO"))
            seen.append(raw.cmd("LOCK", unique_key()))
            raw2 = d.raw()
            seen.append(raw2.cmd("HELLO", "3", "AUTH", "default", self.PW))
            seen.append(raw2.cmd("INFO", "all"))
            # a reload logs what changed, a secret as hidden
            with open(d.conf, "w") as f:
                f.write(d.config_text().replace(self.PW, self.PW + "x"))
            os.kill(d.pid, 1)
            wait_until(lambda: "configuration reloaded" in d.log(), CLOSE_WITHIN, 0.05,
                       "the reload")
            raw.close()
            raw2.close()
        finally:
            d.stop_ok(self)
        text = repr(seen) + d.log()
        self.assertIn("auth.password", d.log())     # the reload was logged...
        for secret in (self.PW, self.ADMIN, self.REDIS_PW, self.WRONG):
            self.assertNotIn(secret, text)          # ...without the secret
