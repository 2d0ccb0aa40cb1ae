"""TLS listeners (tls.listen): redis-cli --tls and redis-py over TLS, locking,
pipelining and replies larger than the socket takes at once, AUTH, plain and
TLS listeners side by side, clients that do not speak TLS or never finish a
handshake, client certificates (tls.ca_file), dlockd -t on the tls.* keys,
and a new certificate on SIGHUP. The certificates are made at test time
(make_certs, with the openssl command) in a directory of their own."""

import os
import select
import signal
import socket
import ssl
import subprocess
import threading
import time
import unittest

import redis

from dlocktest.certs import make_cert, make_certs
from dlocktest.daemon import Daemon, run_dlockd
from dlocktest.env import REDIS_CLI, new_dir, unique_key
from dlocktest.proc import free_port, wait_until
from dlocktest.resp import IO_TIMEOUT, Raw

CERTS = None  # the test certificates (Certs) and server2's, made once


def certs():
    """The directory of the test certificates: make_certs()'s (ca,
    server, client, other-ca) and server2.crt, for localhost but signed by
    other-ca, made once."""
    global CERTS
    if CERTS is None:
        CERTS = make_certs()
        make_cert(CERTS.dir, "server2", "other-ca", "localhost", "IP:127.0.0.1,DNS:localhost")
    return CERTS.dir


def cert(name):
    return os.path.join(certs(), name)


def tls_config(port, extra="", cert_name="server"):
    """The tls section: a TLS listener on port with the test certificate."""
    return ("tls:\n  listen: [127.0.0.1:%d]\n  cert_file: %s\n  key_file: %s\n%s"
            % (port, cert(cert_name + ".crt"), cert(cert_name + ".key"), extra))


def tls_daemon(test, config="", tls_extra="", port=None):
    """A daemon with a plain listener (the harness's) and a TLS one; returns
    (daemon, TLS port)."""
    port = port or free_port()
    d = Daemon(config + tls_config(port, tls_extra)).start()
    test.addCleanup(d.stop_ok, test)
    return d, port


def tls_client(port, ca="ca.crt", **kw):
    """A redis-py client over TLS that checks the server's certificate."""
    kw.setdefault("socket_timeout", IO_TIMEOUT)
    kw.setdefault("socket_connect_timeout", IO_TIMEOUT)
    return redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=cert(ca),
                       ssl_cert_reqs="required", single_connection_client=True, **kw)


def tls_raw(port, ca="ca.crt", client_cert=None):
    """A raw RESP connection (Raw) over TLS."""
    ctx = ssl.create_default_context(cafile=cert(ca))
    if client_cert:
        ctx.load_cert_chain(cert(client_cert + ".crt"), cert(client_cert + ".key"))
    return Raw(port, ssl_context=ctx)


def redis_cli(port, *args, stdin=None, ca="ca.crt"):
    """redis-cli --tls on port: (status, output)."""
    p = subprocess.run([REDIS_CLI, "--tls", "--cacert", cert(ca), "-h", "127.0.0.1", "-p",
                        str(port)] + list(args), input=stdin, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=IO_TIMEOUT)
    return p.returncode, p.stdout.decode(errors="replace")


def closed_by_peer(s, timeout):
    """Whether the peer closes the plain socket s within timeout seconds
    (what it sends first is read and dropped)."""
    s.settimeout(timeout)
    try:
        while s.recv(4096):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


class TestTLS(unittest.TestCase):
    """One daemon with a plain and a TLS listener."""

    @classmethod
    def setUpClass(cls):
        cls.port = free_port()
        cls.d = Daemon(tls_config(cls.port)).start()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop_checked()

    def test_redis_cli_ping_and_lock(self):
        self.assertEqual(redis_cli(self.port, "PING"), (0, "PONG\n"))
        key = unique_key()
        rc, out = redis_cli(self.port, stdin=("LOCK %s TTL 5000\nLOCKS\nUNLOCK %s\n"
                                              % (key, key)).encode())
        self.assertEqual(rc, 0, out)
        lines = out.split("\n")
        self.assertRegex(lines[0], r"^[0-9a-f]{32}$", out)
        self.assertIn(key, lines, out)
        self.assertEqual(lines[-2], "0", out)	# holds remaining after UNLOCK

    def test_redis_py_lock_fence_and_unlock(self):
        c = tls_client(self.port)
        self.addCleanup(c.close)
        key = unique_key()
        token, fence, validity = c.execute_command("LOCK", key)
        self.assertRegex(token, rb"^[0-9a-f]{32}$")
        self.assertGreater(fence, 0)
        self.assertGreater(validity, 0)
        self.assertEqual(c.execute_command("UNLOCK", key, token), 0)
        token2, fence2, _ = c.execute_command("LOCK", key)
        self.assertGreater(fence2, fence)
        self.assertEqual(c.execute_command("UNLOCK", key, token2), 0)

    def test_plain_and_tls_listeners_at_once(self):
        plain = self.d.client()
        self.addCleanup(plain.close)
        t = tls_client(self.port)
        self.addCleanup(t.close)
        key = unique_key()
        token, _, _ = t.execute_command("LOCK", key)
        self.assertIsNone(plain.execute_command("LOCK", key, "WAIT", 0))
        self.assertEqual(t.execute_command("UNLOCK", key, token), 0)
        self.assertIsNotNone(plain.execute_command("LOCK", key, "WAIT", 0))

    def test_pipeline_larger_than_a_read_and_a_write(self):
        # 60000 requests sent at once (~3.5 MiB in, many reads of
        # CONN_READ_MAX with input left over), whose replies (~3 MiB) are not
        # read until the daemon stops taking requests: the output waits for
        # the socket, passes the session's high mark (reading pauses), and
        # drains (it resumes). One thread: an SSL object is not shared.
        r = tls_raw(self.port)
        self.addCleanup(r.close)
        n = 60000
        payload = memoryview(b"".join(Raw.encode("PING", "x" * 30 + "%06d" % i)
                                      for i in range(n)))
        want = b"".join(b"$36\r\n" + b"x" * 30 + b"%06d\r\n" % i for i in range(n))
        got = bytearray()
        sent = 0
        r.s.setblocking(False)
        stalled = None	# when sending stopped making progress, before any read
        deadline = time.monotonic() + 60
        while len(got) < len(want):
            self.assertLess(time.monotonic(), deadline, "%d of %d bytes sent, %d of %d read"
                            % (sent, len(payload), len(got), len(want)))
            progress = False
            if sent < len(payload):
                try:
                    sent += r.s.send(payload[sent:sent + 65536])
                    progress = True
                except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    pass
            reading = sent == len(payload) or (stalled is not None and
                                               time.monotonic() - stalled > 0.5)
            if not progress and stalled is None:
                stalled = time.monotonic()
            if reading:
                try:
                    got += r.s.recv(1 << 20)
                    progress = True
                except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    pass
            if not progress:
                select.select([r.s], [r.s] if sent < len(payload) else [], [], 0.05)
        self.assertIsNotNone(stalled, "the daemon never stopped taking requests")
        self.assertEqual(bytes(got), want)
        r.s.setblocking(True)
        r.s.settimeout(IO_TIMEOUT)
        self.assertEqual(r.cmd("PING"), "PONG")

    def test_redis_py_pipeline(self):
        c = tls_client(self.port)
        self.addCleanup(c.close)
        keys = [unique_key() for _ in range(200)]
        p = c.pipeline(transaction=False)
        for k in keys:
            p.execute_command("LOCK", k, "WAIT", 0)
        grants = p.execute()
        self.assertEqual(len(grants), len(keys))
        fences = [g[1] for g in grants]
        self.assertTrue(all(f > 0 for f in fences), fences)
        p = c.pipeline(transaction=False)
        for k, g in zip(keys, grants):
            p.execute_command("UNLOCK", k, g[0])
        self.assertEqual(p.execute(), [0] * len(keys))

    def test_large_reply(self):
        # CLIENT LIST of 40 TLS clients with names of 2000 bytes: > 64 KiB
        name = "n" * 2000
        clients = []
        for _ in range(40):
            c = tls_client(self.port, client_name=name)
            self.addCleanup(c.close)
            c.ping()
            clients.append(c)
        listing = clients[0].execute_command("CLIENT", "LIST")
        if isinstance(listing, bytes):
            listing = listing.decode()
        self.assertGreater(len(listing), 64 * 1024)
        self.assertEqual(sum(1 for line in listing.splitlines() if "name=" + name in line), 40)
        self.assertTrue(clients[-1].ping())

    def test_waiting_lock_granted_when_another_tls_client_unlocks(self):
        holder = tls_client(self.port)
        self.addCleanup(holder.close)
        waiter = tls_raw(self.port)
        self.addCleanup(waiter.close)
        key = unique_key()
        token, fence, _ = holder.execute_command("LOCK", key)
        waiter.send(Raw.encode("LOCK", key, "WAIT", 10000))
        wait_until(lambda: len(self.waiters(holder, key)) == 1, 5.0, 0.01,
                   "a waiter on the key")
        self.assertEqual(holder.execute_command("UNLOCK", key, token), 0)
        got = waiter.read()
        self.assertIsInstance(got, list, got)
        self.assertGreater(got[1], fence)

    @staticmethod
    def waiters(c, key):
        """The waiters STATUS key FULL shows."""
        reply = c.execute_command("STATUS", key, "FULL")
        d = dict(zip(reply[0::2], reply[1::2])) if isinstance(reply, list) else reply
        return d.get(b"waiters") or d.get("waiters") or []

    def test_plain_text_client_on_the_tls_port_is_closed(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=IO_TIMEOUT)
        self.addCleanup(s.close)
        s.sendall(Raw.encode("PING"))
        self.assertTrue(closed_by_peer(s, IO_TIMEOUT))
        wait_until(lambda: "handshake failed" in self.d.log(), 5.0, 0.01,
                   "the failed handshake in the log")
        self.assertEqual(redis_cli(self.port, "PING"), (0, "PONG\n"))

    def test_redis_cli_without_tls_on_the_tls_port(self):
        p = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port), "PING"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=IO_TIMEOUT)
        self.assertNotIn(b"PONG", p.stdout)
        self.assertTrue(self.d.client().ping())

    def test_client_that_checks_another_ca_fails(self):
        with self.assertRaises(redis.exceptions.ConnectionError):
            tls_client(self.port, ca="other-ca.crt").ping()
        self.assertEqual(redis_cli(self.port, "PING"), (0, "PONG\n"))


class TestTLSOptions(unittest.TestCase):
    """A daemon of its own per test: AUTH, client certificates, handshake
    timeout, min_version, reload."""

    def assertRefused(self, port, **kw):
        """A TLS client (tls_raw(port, **kw)) cannot PING: with TLS 1.3 the
        refusal of its certificate comes after its side of the handshake."""
        with self.assertRaises((ssl.SSLError, OSError, ConnectionError)):
            r = tls_raw(port, **kw)
            try:
                r.cmd("PING")
            finally:
                r.close()

    def test_auth_over_tls(self):
        d, port = tls_daemon(self, "auth:\n  password: s3cret\n")
        c = tls_client(port)
        self.addCleanup(c.close)
        with self.assertRaises(redis.exceptions.AuthenticationError):
            c.execute_command("LOCK", unique_key())
        c2 = tls_client(port, password="s3cret")
        self.addCleanup(c2.close)
        self.assertIsNotNone(c2.execute_command("LOCK", unique_key()))
        rc, out = redis_cli(port, "--no-auth-warning", "-a", "s3cret", "PING")
        self.assertEqual((rc, out), (0, "PONG\n"))

    def test_client_certificate_required_with_ca_file(self):
        d, port = tls_daemon(self, tls_extra="  ca_file: %s\n" % cert("ca.crt"))
        self.assertRefused(port)
        r = tls_raw(port, client_cert="client")
        self.addCleanup(r.close)
        self.assertEqual(r.cmd("PING"), "PONG")
        rc, out = redis_cli(port, "--cert", cert("client.crt"), "--key", cert("client.key"),
                            "PING")
        self.assertEqual((rc, out), (0, "PONG\n"))
        self.assertTrue(d.client().ping())

    def test_client_certificate_of_another_ca_is_refused(self):
        d, port = tls_daemon(self, tls_extra="  ca_file: %s\n" % cert("other-ca.crt"))
        self.assertRefused(port, client_cert="client")
        wait_until(lambda: "certificate" in d.log(), 5.0, 0.01, "the refusal in the log")

    def test_stalled_handshake_is_closed(self):
        d, port = tls_daemon(self, tls_extra="  handshake_timeout_ms: 300\n")
        idle = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
        self.addCleanup(idle.close)
        half = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
        self.addCleanup(half.close)
        half.sendall(b"\x16\x03\x01\x02\x00\x01")	# the start of a ClientHello
        self.assertTrue(closed_by_peer(idle, 10.0))
        self.assertTrue(closed_by_peer(half, 10.0))
        self.assertIn("handshake not finished in time", d.log())
        wait_until(lambda: d.info().get("connected_clients") == "1", 5.0, 0.01,
                   "only the INFO connection left")
        # a handshake that finishes in time is not cut afterwards
        r = tls_raw(port)
        self.addCleanup(r.close)
        self.assertEqual(r.cmd("PING"), "PONG")
        idle_before = d.log().count("handshake not finished")
        threading.Event().wait(0.6)
        self.assertEqual(r.cmd("PING"), "PONG")
        self.assertEqual(d.log().count("handshake not finished"), idle_before)

    def test_min_version_tls13(self):
        d, port = tls_daemon(self, tls_extra="  min_version: TLSv1.3\n")
        ctx = ssl.create_default_context(cafile=cert("ca.crt"))
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        with self.assertRaises((ssl.SSLError, OSError)):
            with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT) as s:
                ctx.wrap_socket(s, server_hostname="localhost").close()
        r = tls_raw(port)
        self.addCleanup(r.close)
        self.assertEqual(r.s.version(), "TLSv1.3")

    def test_tls12_by_default(self):
        d, port = tls_daemon(self)
        ctx = ssl.create_default_context(cafile=cert("ca.crt"))
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT) as s:
            with ctx.wrap_socket(s, server_hostname="localhost") as t:
                self.assertEqual(t.version(), "TLSv1.2")
                t.sendall(Raw.encode("PING"))
                self.assertEqual(t.recv(100), b"+PONG\r\n")

    def test_sighup_loads_a_new_certificate(self):
        d, port = tls_daemon(self)
        old = tls_raw(port)
        self.addCleanup(old.close)
        key = unique_key()
        grant = old.cmd("LOCK", key)
        with open(d.conf, "w") as f:
            f.write(tls_config(port, cert_name="server2"))
        before = d.log(100000).count("configuration reloaded")
        os.kill(d.pid, signal.SIGHUP)
        wait_until(lambda: d.log(100000).count("configuration reloaded") > before, 5.0, 0.01,
                   "the reload")
        new = tls_raw(port, ca="other-ca.crt")
        self.addCleanup(new.close)
        self.assertEqual(new.cmd("PING"), "PONG")
        with self.assertRaises(ssl.SSLError):
            tls_raw(port, ca="ca.crt")
        # the connection made before keeps its session and its lock
        self.assertEqual(old.cmd("UNLOCK", key, grant[0]), 0)

    def test_sighup_with_a_bad_key_keeps_the_certificate_in_force(self):
        d, port = tls_daemon(self)
        with open(d.conf, "w") as f:
            f.write("tls:\n  listen: [127.0.0.1:%d]\n  cert_file: %s\n  key_file: %s\n"
                    % (port, cert("server2.crt"), cert("server.key")))
        before = d.log(100000).count("configuration not reloaded")
        os.kill(d.pid, signal.SIGHUP)
        wait_until(lambda: d.log(100000).count("configuration not reloaded") > before, 5.0,
                   0.01, "the refused reload")
        self.assertIn("does not match certificate", d.log())
        r = tls_raw(port)
        self.addCleanup(r.close)
        self.assertEqual(r.cmd("PING"), "PONG")


def run_check(text):
    """dlockd -t on a configuration file of text: (status, what it printed,
    the file's path)."""
    path = os.path.join(new_dir("tls-conf"), "dlockd.yaml")
    with open(path, "w") as f:
        f.write(text)
    rc, out, err = run_dlockd(["-t", "-c", path])
    return rc, out + err, path


class TestTLSConfig(unittest.TestCase):
    """dlockd -t on the tls section: every error, at its place."""

    def test_good_config(self):
        rc, out, _ = run_check("listen: [127.0.0.1:7480]\n" + tls_config(7481))
        self.assertEqual((rc, out), (0, "configuration OK\n"))

    def test_relative_names_from_the_config_directory(self):
        rc, out, path = run_check("listen: [127.0.0.1:7480]\ntls:\n  listen: [127.0.0.1:7481]\n"
                                  "  cert_file: server.crt\n  key_file: server.key\n")
        self.assertEqual(rc, 1)
        self.assertIn("%s:4:14: cannot read certificate file '%s/server.crt': No such file"
                      % (path, os.path.dirname(path)), out)
        self.assertIn("%s:5:13: cannot read key file '%s/server.key': No such file"
                      % (path, os.path.dirname(path)), out)
        d = os.path.dirname(path)
        for name in ("server.crt", "server.key"):
            with open(cert(name), "rb") as src, open(os.path.join(d, name), "wb") as dst:
                dst.write(src.read())
        self.assertEqual(run_dlockd(["-t", "-c", path]), (0, "configuration OK\n", ""))

    def test_listen_without_cert_and_key(self):
        rc, out, path = run_check("tls:\n  listen: [127.0.0.1:7481]\n")
        self.assertEqual(rc, 1)
        self.assertIn("%s:2:11: 'tls.listen' needs 'tls.cert_file' and 'tls.key_file'" % path,
                      out)

    def test_cert_without_key(self):
        rc, out, path = run_check("tls:\n  cert_file: %s\n" % cert("server.crt"))
        self.assertEqual(rc, 1)
        self.assertIn("%s:2:14: 'tls.cert_file' and 'tls.key_file' go together" % path, out)

    def test_every_file_error_reported(self):
        rc, out, path = run_check(
            "tls:\n  listen: [127.0.0.1:7481]\n  cert_file: /nonexistent/server.crt\n"
            "  key_file: %s\n  ca_file: /nonexistent/ca.crt\n" % certs())
        self.assertEqual(rc, 1)
        self.assertIn("%s:3:14: cannot read certificate file '/nonexistent/server.crt': "
                      "No such file or directory" % path, out)
        self.assertIn("%s:4:13: cannot read key file '%s': Is a directory" % (path, certs()),
                      out)
        self.assertIn("%s:5:12: cannot read CA certificate file '/nonexistent/ca.crt'" % path,
                      out)

    def test_key_not_matching_the_certificate(self):
        rc, out, path = run_check("tls:\n  listen: [127.0.0.1:7481]\n  cert_file: %s\n"
                                  "  key_file: %s\n" % (cert("server.crt"), cert("client.key")))
        self.assertEqual(rc, 1)
        self.assertIn("%s:4:13: key '%s' does not match certificate '%s'"
                      % (path, cert("client.key"), cert("server.crt")), out)

    def test_not_a_certificate(self):
        rc, out, path = run_check("tls:\n  listen: [127.0.0.1:7481]\n  cert_file: %s\n"
                                  "  key_file: %s\n" % (cert("server.key"), cert("server.key")))
        self.assertEqual(rc, 1)
        self.assertIn("%s:3:14: cannot load certificate '%s': " % (path, cert("server.key")),
                      out)

    def test_unix_socket_and_duplicate_listener_refused(self):
        rc, out, path = run_check(
            "listen: [127.0.0.1:7480]\ntls:\n  listen: [unix:/tmp/x.sock, 127.0.0.1:7480]\n"
            "  cert_file: %s\n  key_file: %s\n" % (cert("server.crt"), cert("server.key")))
        self.assertEqual(rc, 1)
        self.assertIn("%s:3:12: bad tls.listen address 'unix:/tmp/x.sock': a Unix socket is "
                      "not supported here" % path, out)
        rc, out, path = run_check(
            "listen: [127.0.0.1:7480]\ntls:\n  listen: [127.0.0.1:7480]\n"
            "  cert_file: %s\n  key_file: %s\n" % (cert("server.crt"), cert("server.key")))
        self.assertEqual(rc, 1)
        self.assertIn("%s:3:11: '127.0.0.1:7480' is in both 'listen' and 'tls.listen'" % path,
                      out)

    def test_bad_min_version(self):
        rc, out, path = run_check("tls:\n  min_version: TLSv1.1\n")
        self.assertEqual(rc, 1)
        self.assertIn("%s:2:16: 'tls.min_version' must be TLSv1.2 or TLSv1.3, not 'TLSv1.1'"
                      % path, out)


if __name__ == "__main__":
    unittest.main()
