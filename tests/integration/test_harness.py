"""The harness's own fixtures: the test certificates (harness.make_certs)
and redis-server over TLS and with ACL users (harness.RedisServer's tls=,
auth_clients= and users=), checked with redis-py and the raw client alone,
without a dlockd."""

import os
import signal
import ssl
import unittest

import redis

from harness import IO_TIMEOUT, Closed, Raw, RedisServer, shared_certs


def tls_redis(port, ca, client_cert=None):
    """A redis-py client over TLS that checks the server against ca, with
    client_cert (a (cert, key) pair) if given."""
    kw = {}
    if client_cert:
        kw = {"ssl_certfile": client_cert[0], "ssl_keyfile": client_cert[1]}
    return redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=ca,
                       ssl_cert_reqs="required", ssl_check_hostname=True,
                       socket_timeout=IO_TIMEOUT, socket_connect_timeout=IO_TIMEOUT,
                       single_connection_client=True, **kw)


class TestCerts(unittest.TestCase):

    def test_files(self):
        c = shared_certs()
        for path in (c.ca, c.ca_key, c.server_cert, c.server_key, c.client_cert,
                     c.client_key, c.other_ca, c.other_ca_key):
            self.assertTrue(os.path.getsize(path) > 0, path)
        self.assertIs(shared_certs(), c)


class TestRedisTLS(unittest.TestCase):

    def test_tls_only(self):
        c = shared_certs()
        r = RedisServer(tls=c).start()
        self.addCleanup(r.stop_checked)
        self.assertTrue(r.url().startswith("rediss://"))
        t = tls_redis(r.port, c.ca)
        self.addCleanup(t.close)
        self.assertTrue(t.set("k", "v"))
        self.assertEqual(r.client().get("k"), b"v")
        raw = r.raw()
        self.addCleanup(raw.close)
        self.assertEqual(raw.cmd("PING"), "PONG")
        with self.assertRaises(redis.exceptions.ConnectionError):
            tls_redis(r.port, c.other_ca).ping()
        with self.assertRaises(redis.exceptions.ConnectionError):
            redis.Redis(host="127.0.0.1", port=r.port, socket_timeout=2,
                        single_connection_client=True).ping()
        r.pause()
        self.assertFalse(r.answers())
        r.resume()
        self.assertTrue(r.answers())
        self.assertEqual(r.stop(signal.SIGKILL), -signal.SIGKILL)
        r.start()
        self.assertTrue(r.client().ping())

    def test_client_certificates(self):
        c = shared_certs()
        r = RedisServer(tls=c, auth_clients=True).start()
        self.addCleanup(r.stop_checked)
        self.assertTrue(r.client().ping())
        # with TLS 1.3 the refusal comes after the client's handshake
        with self.assertRaises((ssl.SSLError, OSError, Closed)):
            raw = Raw(r.port, ssl_context=c.context())
            try:
                raw.cmd("PING")
            finally:
                raw.close()
        t = tls_redis(r.port, c.ca, (c.client_cert, c.client_key))
        self.addCleanup(t.close)
        self.assertTrue(t.ping())


class TestRedisUsers(unittest.TestCase):

    def test_acl_user(self):
        r = RedisServer(users=["alice on >secret ~dlock:* &dlock:* +evalsha +set +get"]).start()
        self.addCleanup(r.stop_checked)
        a = r.client(username="alice", password="secret")
        self.addCleanup(a.close)
        self.assertTrue(a.set("dlock:x", "1"))
        with self.assertRaises(redis.exceptions.NoPermissionError):
            a.set("other", "1")
        with self.assertRaises(redis.exceptions.ResponseError):
            r.client(username="alice", password="wrong")
        raw = r.raw(user="alice", password="secret")
        self.addCleanup(raw.close)
        self.assertEqual(raw.cmd("GET", "dlock:x"), b"1")
        self.assertTrue(r.client().ping())	# the default user as it was

    def test_default_user_off_over_tls(self):
        r = RedisServer(tls=shared_certs(), users=["default off", "bob on >pw ~* +@all"]).start()
        self.addCleanup(r.stop_checked)
        self.assertTrue(r.client(username="bob", password="pw").ping())
        with self.assertRaises(redis.exceptions.AuthenticationError):
            r.client().ping()


if __name__ == "__main__":
    unittest.main()
