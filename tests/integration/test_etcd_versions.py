"""The etcd backend on the etcd releases it supports, with etcd's JSON
gateway turned off (--enable-grpc-gateway=false): the daemon speaks gRPC
only, so it must not need the gateway.

TestEtcdDefault runs a short smoke test on the etcd of the tests (ETCD_BIN,
Debian 12's etcd 3.4 by default); TestEtcd35 the same on etcd 3.5: ETCD35_BIN,
else the binary tests/compat/etcd35-setup.sh unpacks next to the daemon
under test ($BUILD/compat/etcd/root/usr/bin/etcd, as make check-compat
does). Without either TestEtcd35 is left out (the runner counts a skip as a
failure); an ETCD35_BIN that does not run etcd 3.5 fails. Each runs plain
and over TLS with client certificates, and first proves the gateway is off:
POST /v3/kv/range gets no JSON answer.
"""

import os
import re
import subprocess
import time
import unittest

from dlocktest import env
from dlocktest.cases import EtcdTestCase
from dlocktest.certs import shared_certs
from dlocktest.env import SLOWDOWN, unique_key
from dlocktest.resp import NULL, Raw, read_within

WAKE_BOUND = 1.0 * SLOWDOWN  # s from a release on one daemon to the grant on another


def etcd35_bin():
    """The etcd 3.5 binary to test (ETCD35_BIN even if it is missing), or
    None."""
    path = os.environ.get("ETCD35_BIN")
    if path:
        return path
    build = os.path.dirname(os.path.abspath(env.DLOCKD))
    path = os.path.join(build, "compat", "etcd", "root", "usr", "bin", "etcd")
    return path if os.access(path, os.X_OK) else None


def etcd_version(binary):
    """etcd --version's version ("3.5.16"), or None if it does not say."""
    try:
        out = subprocess.run([binary, "--version"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             timeout=20).stdout.decode(errors="replace")
    except OSError:
        return None
    m = re.search(r"etcd Version: (\S+)", out)
    return m.group(1) if m else None


class Smoke:
    """The tests of one etcd binary (BINARY(), its version VERSION: a
    prefix of etcd --version's) with the gateway off."""

    VERSION = ""

    @classmethod
    def binary(cls):
        return env.ETCD

    def setUp(self):
        super().setUp()
        version = etcd_version(self.binary())
        self.assertIsNotNone(version, "%s --version says no version" % self.binary())
        self.assertTrue(version.startswith(self.VERSION), "%s is etcd %s, not %s"
                        % (self.binary(), version, self.VERSION))

    def etcd(self, **kw):
        e = self.start_etcd(etcd_bin=self.binary(), gateway=False, **kw)
        kind, what = e.gateway_answers()
        self.assertNotEqual(kind, "json", "the gateway answers: %r" % (what,))
        return e

    def two_daemons(self, e, config=""):
        a = self.start_daemon(e, config)
        b = self.start_daemon(e, config)
        key = unique_key("smoke")
        ca, cb = self.conn(a), self.conn(b)
        g = self.assertGranted(ca.cmd("LOCK", key))
        self.assertEqual([k[1] << 16 for k in e.keys("dlock/")], [g[1]])
        self.assertIs(cb.cmd("LOCK", key, "WAIT", 0), NULL)
        cb.send(Raw.encode("LOCK", key, "WAIT", 20000))
        self.wait_status(b, key, waiters=1)
        t0 = time.monotonic()
        self.assertEqual(ca.cmd("UNLOCK", key), 0)
        g2 = self.assertGranted(read_within(cb, 5.0))
        self.assertLess(time.monotonic() - t0, WAKE_BOUND)
        self.assertGreater(g2[1], g[1])
        self.assertEqual(cb.cmd("UNLOCK", key), 0)
        self.assertEqual(e.keys("dlock/"), [])
        fences = self.assertExclusive([a, b], unique_key("smoke"), 10, 60)
        self.assertEqual(fences, sorted(fences))
        for d in (a, b):
            info = d.info()
            self.assertEqual(info.get("backend_connected"), "1", info)
            self.assertIn(int(info["backend_lease_id"]), e.leases())
        return a, b

    def test_gateway_off(self):
        e = self.etcd()
        a, b = self.two_daemons(e)
        self.assertEqual(a.info().get("backend_tls"), "0")

    def test_gateway_off_tls(self):
        e = self.etcd(tls=shared_certs())
        a, b = self.two_daemons(e, e.backend_config(request_timeout_ms=500))
        self.assertEqual(a.info().get("backend_tls"), "1")


class TestEtcdDefault(Smoke, EtcdTestCase):
    """The etcd of the tests (ETCD_BIN), gateway off."""


if etcd35_bin() is not None:
    class TestEtcd35(Smoke, EtcdTestCase):
        """etcd 3.5, gateway off."""

        VERSION = "3.5."

        @classmethod
        def binary(cls):
            return etcd35_bin()


if __name__ == "__main__":
    unittest.main()
