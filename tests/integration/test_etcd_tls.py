"""The etcd backend over TLS, and an etcd that cannot be reached.

etcd serving TLS only, with --client-cert-auth (every client presents a
certificate of the test CA), as in Kubernetes: daemons with backend.tls
(ca_file, cert_file, key_file) lock, exclude each other and wake each other;
a wrong CA, a missing client certificate, and an etcds:// URL verified
against the system's CAs (SSL_CERT_FILE). Each failure is answered -BACKEND
with its reason and logged once per change of the endpoint's state, not once
per attempt. An endpoint where nothing listens: -BACKEND naming it and the
refusal, then etcd started there brings the daemon up. dlockd -t on the
backend.tls settings.

Every test starts its own etcd on free loopback ports (EtcdServer
with tls=, certificates made with openssl: shared_certs()).
"""

import os
import re
import time
import unittest

from dlocktest.cases import ConfigTestCase, EtcdTestCase
from dlocktest.certs import shared_certs
from dlocktest.daemon import run_dlockd
from dlocktest.env import SLOWDOWN, new_dir, unique_key
from dlocktest.etcd_server import EtcdServer
from dlocktest.proc import free_port, wait_until
from dlocktest.resp import NULL, Err, Raw, read_within

FAST = {"request_timeout_ms": 500}  # backend keys of daemons that must notice quickly
WAKE_BOUND = 1.0 * SLOWDOWN  # s from a release on one daemon to the grant on another
RECONNECT_BOUND = 8.0  # s for a daemon to be back on etcd (capped backoff)
PREFIX = "dlock/"


def down_lines(daemon, endpoint):
    """The lines of daemon's log that say endpoint went down (the reason
    after "down: ")."""
    pat = re.compile(r"etcd %s down: (.*)$" % re.escape(endpoint))
    out = []
    for line in daemon.log(1000000).splitlines():
        m = pat.search(line)
        if m:
            out.append(m.group(1))
    return out


def up_lines(daemon, endpoint):
    """The lines of daemon's log that say endpoint came up."""
    up = re.compile(r"etcd %s\b.*\bup\b" % re.escape(endpoint))
    down = re.compile(r"etcd %s down: " % re.escape(endpoint))
    return [l for l in daemon.log(1000000).splitlines() if up.search(l) and not down.search(l)]


class EtcdTLSCase(EtcdTestCase):

    def lock_unlock(self, d):
        c = self.conn(d)
        key = unique_key("tls")
        g = self.assertGranted(c.cmd("LOCK", key))
        self.assertEqual(c.cmd("UNLOCK", key), 0)
        return g

    def refused(self, d, endpoint, reason_re, seconds=2.0):
        """d cannot use etcd at endpoint: LOCK answers -BACKEND (naming the
        endpoint and matching reason_re), INFO says backend_connected:0, and
        however many LOCKs and attempts follow for seconds s, the log says
        once that the endpoint is down, with a reason matching reason_re.
        Returns (the -BACKEND reply, the reason logged)."""
        c = self.conn(d)
        wait_until(lambda: down_lines(d, endpoint), 5.0, 0.02,
                   "the log to say etcd %s is down (log: %s)" % (endpoint, d.log(2000)))
        reply = c.cmd("LOCK", unique_key("tls"), "WAIT", 0)
        self.assertErr(reply, "BACKEND")
        self.assertIn(endpoint, reply)
        self.assertRegex(reply, reason_re)
        info = d.info()
        self.assertEqual(info.get("backend_connected"), "0", info)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:  # attempts go on (backoff), LOCKs too
            r = c.cmd("LOCK", unique_key("tls"), "WAIT", 0)
            self.assertErr(r, "BACKEND")
            time.sleep(0.2)
        lines = down_lines(d, endpoint)
        self.assertEqual(len(lines), 1, "etcd %s down logged %d times, once per attempt?\n%s"
                         % (endpoint, len(lines), "\n".join(lines)))
        self.assertRegex(lines[0], reason_re)
        self.assertEqual(up_lines(d, endpoint), [], "came up?")
        return reply, lines[0]


# ---- etcd with TLS and client certificates ----

class TestEtcdTLS(EtcdTLSCase):

    def test_client_certificate(self):
        # backend.tls with the CA and a client certificate: two daemons
        # lock, exclude each other, and a release on one wakes the other
        certs = shared_certs()
        e = self.start_etcd(tls=certs)
        self.assertTrue(e.url().startswith("etcds://"))
        # no endpoint may go down here: under valgrind a reply can take
        # longer than FAST's timeout, which this test does not need
        steady = {"request_timeout_ms": int(FAST["request_timeout_ms"] * SLOWDOWN)}
        a = self.start_daemon(e, e.backend_config(**steady))
        b = self.start_daemon(e, e.backend_config(**steady))
        for d in (a, b):
            info = d.info()
            self.assertEqual(info.get("backend"), "etcd")
            self.assertEqual(info.get("backend_tls"), "1", info)
            self.assertEqual(info.get("backend_connected"), "1", info)
            self.assertEqual(info.get("backend_endpoint"), e.endpoint(), info)
        self.lock_unlock(a)
        key = unique_key("tls")
        ca, cb = self.conn(a), self.conn(b)
        g = self.assertGranted(ca.cmd("LOCK", key))
        # the holder's key is in etcd (read over TLS too), its fence its
        # create revision
        keys = e.keys(PREFIX)
        self.assertIn(g[1] >> 16, [k[1] for k in keys], keys)
        self.assertIs(cb.cmd("LOCK", key, "WAIT", 0), NULL)
        cb.send(Raw.encode("LOCK", key, "WAIT", 20000))
        self.wait_status(b, key, waiters=1)
        self.assertIsNone(read_within(cb, 0.3), "granted on B while A holds the key")
        t0 = time.monotonic()
        self.assertEqual(ca.cmd("UNLOCK", key), 0)
        g2 = self.assertGranted(read_within(cb, 5.0))
        waited = time.monotonic() - t0
        self.assertLess(waited, WAKE_BOUND, "B woken %.2f s after the release" % waited)
        self.assertGreater(g2[1], g[1])
        self.assertEqual(cb.cmd("UNLOCK", key), 0)
        # sessions on both lock one key many times: never two at once
        fences = self.assertExclusive([a, b, a, b], unique_key("tls"), 10, 60)
        self.assertEqual(fences, sorted(fences), "fences not increasing")
        for d in (a, b):
            self.assertEqual(down_lines(d, e.endpoint()), [], d.log())

    def test_wrong_ca(self):
        # etcd's certificate is not signed by backend.tls.ca_file: -BACKEND
        # says the certificate was not verified, logged once
        certs = shared_certs()
        e = self.start_etcd(tls=certs)
        d = self.start_daemon(e, e.backend_config(ca=certs.other_ca, **FAST), start=False)
        d.start(wait_backend=False)
        self.assertEqual(d.info().get("backend_tls"), "1")
        reply, why = self.refused(d, e.endpoint(), r"certificate not verified")
        self.assertIn("TLS", why)

    def test_no_client_certificate(self):
        # etcd with --client-cert-auth and a daemon without a client
        # certificate: the handshake fails (etcd's alert), -BACKEND, and
        # one log line saying why
        certs = shared_certs()
        e = self.start_etcd(tls=certs)
        d = self.start_daemon(e, e.backend_config(cert=None, key=None, **FAST), start=False)
        d.start(wait_backend=False)
        reply, why = self.refused(d, e.endpoint(), r"(?i)TLS|alert|handshake|certificate")
        # a daemon with the certificate, on the same etcd, is fine
        ok = self.start_daemon(e, e.backend_config(**FAST))
        self.lock_unlock(ok)

    def test_etcds_url_with_system_store(self):
        # -b etcds://: etcd verified against the system's CAs, which
        # SSL_CERT_FILE makes the test CA; the client certificate from
        # backend.tls
        certs = shared_certs()
        e = self.start_etcd(tls=certs)
        conf = ("backend:\n  tls:\n    cert_file: %s\n    key_file: %s\n"
                % (certs.client_cert, certs.client_key))
        d = self.start_daemon(e, conf, backend_url=e.url(),
                              env={"SSL_CERT_FILE": certs.ca, "SSL_CERT_DIR": certs.dir})
        self.assertEqual(d.info().get("backend_tls"), "1")
        self.lock_unlock(d)
        # without SSL_CERT_FILE the system's CAs do not know the test CA
        other = self.start_daemon(e, conf, backend_url=e.url(), start=False,
                                  env={"SSL_CERT_FILE": certs.other_ca,
                                       "SSL_CERT_DIR": new_dir("no-certs")})
        other.start(wait_backend=False)
        self.refused(other, e.endpoint(), r"certificate not verified", seconds=1.0)


# ---- an endpoint where nothing listens ----

class TestEtcdUnreachable(EtcdTLSCase):

    def test_refused_then_up(self):
        port = free_port()
        endpoint = "127.0.0.1:%d" % port
        # the etcd of that port, started later, is stopped after the daemon
        e = EtcdServer(port=port)
        self.addCleanup(e.stop_checked)
        d = self.start_daemon(None, "backend:\n  request_timeout_ms: 500\n",
                              backend_url="etcd://%s" % endpoint, start=False)
        d.start(wait_backend=False)
        reply, why = self.refused(d, endpoint, r"refused")
        self.assertRegex(reply, r"^BACKEND .*\(etcd %s: [^)]*refused[^)]*\).*try again"
                         % re.escape(endpoint))
        # etcd started on that port: the daemon comes up, says so once,
        # and LOCK works
        e.start()
        c = self.conn(d)

        def works():
            k = unique_key("up")
            r = c.cmd("LOCK", k, "WAIT", 0)
            if isinstance(r, Err):
                self.assertErr(r, "BACKEND")
                return False
            self.assertGranted(r)
            self.assertEqual(c.cmd("UNLOCK", k), 0)
            return True
        wait_until(works, RECONNECT_BOUND, 0.05, "LOCK to work once etcd listens")
        self.assertEqual(d.info().get("backend_connected"), "1")
        self.assertEqual(len(up_lines(d, endpoint)), 1, d.log())
        self.assertEqual(len(down_lines(d, endpoint)), 1, d.log())
        self.assertEqual(d.info().get("backend_tls"), "0")
        self.assertTrue(e.running())


# ---- dlockd -t ----

class TestEtcdTLSConfig(ConfigTestCase):
    """backend.tls of the etcd backend, checked with dlockd -t (which loads
    the files and connects to nothing)."""

    def test_full_tls_section_ok(self):
        certs = shared_certs()
        path = self.write("dlockd.yaml", 'backend:\n'
                          '  type: etcd\n'
                          '  endpoints: [127.0.0.1:2379]\n'
                          '  tls:\n'
                          '    enabled: true\n'
                          '    ca_file: "%s"\n'
                          '    cert_file: "%s"\n'
                          '    key_file: "%s"\n'
                          '    server_name: localhost\n'
                          % (certs.ca, certs.client_cert, certs.client_key))
        rc, out, err = run_dlockd(["-t", "-c", path])
        self.assertEqual((rc, out.strip()), (0, "configuration OK"), out + err)

    def test_etcds_url_ok(self):
        path = self.write("dlockd.yaml", "")
        for url in ("etcds://127.0.0.1:2379", "etcds://127.0.0.1:2379,localhost:2380",
                    "etcds://root:s3cret@127.0.0.1"):
            self.check_ok(["-c", path, "-b", url], url)

    def test_cert_without_key(self):
        certs = shared_certs()
        path = self.write("dlockd.yaml", 'backend:\n'                                # 1
                          '  type: etcd\n'                            # 2
                          '  endpoints: [127.0.0.1:2379]\n'           # 3
                          '  tls:\n'                                  # 4
                          '    enabled: true\n'                       # 5
                          '    ca_file: "%s"\n'                       # 6
                          '    cert_file: "%s"\n'                     # 7: col 5 or 16
                          % (certs.ca, certs.client_cert))
        where, err = self.config_errors(path)
        self.assertEqual(len(where), 1, err)
        self.assertIn(where[0], [(7, 5), (7, 16)], err)  # the setting or its value
        self.assertIn("key_file", err)

    def test_key_without_cert(self):
        certs = shared_certs()
        path = self.write("dlockd.yaml", 'backend:\n'
                          '  type: etcd\n'
                          '  endpoints: [127.0.0.1:2379]\n'
                          '  tls:\n'
                          '    enabled: true\n'
                          '    key_file: "%s"\n'                      # 6
                          % certs.client_key)
        where, err = self.config_errors(path)
        self.assertEqual([w[0] for w in where], [6], err)
        self.assertIn("cert_file", err)

    def test_missing_ca_file(self):
        missing = os.path.join(new_dir("conf"), "no-such-ca.pem")
        path = self.write("dlockd.yaml", 'backend:\n'
                          '  type: etcd\n'
                          '  endpoints: [127.0.0.1:2379]\n'
                          '  tls:\n'
                          '    enabled: true\n'
                          '    ca_file: "%s"\n'                       # 6
                          % missing)
        where, err = self.config_errors(path)
        self.assertEqual([w[0] for w in where], [6], err)
        self.assertIn(missing, err)

    def test_missing_ca_file_with_client_certificate(self):
        certs = shared_certs()
        missing = os.path.join(new_dir("conf"), "no-such-ca.pem")
        path = self.write("dlockd.yaml", 'backend:\n'
                          '  type: etcd\n'
                          '  endpoints: [127.0.0.1:2379]\n'
                          '  tls:\n'
                          '    enabled: true\n'
                          '    ca_file: "%s"\n'                       # 6
                          '    cert_file: "%s"\n'
                          '    key_file: "%s"\n'
                          % (missing, certs.client_cert, certs.client_key))
        where, err = self.config_errors(path)
        self.assertIn(missing, err)
        self.assertEqual([w[0] for w in where], [6],
                         "the error is not at the ca_file setting: %s" % err)


if __name__ == "__main__":
    unittest.main()
