"""The test library's own fixtures: the test certificates (dlocktest.certs),
redis-server over TLS and with ACL users (RedisServer's tls=,
auth_clients= and users=) and Redis Cluster (RedisCluster: slots,
resharding, failover), checked with redis-py and the raw client alone,
without a dlockd."""

import os
import signal
import ssl
import unittest

import redis

from dlocktest.cases import hangup
from dlocktest.certs import shared_certs
from dlocktest.cluster import CLUSTER_SLOTS, RedisCluster, lock_keys
from dlocktest.redis_server import RedisServer
from dlocktest.resp import IO_TIMEOUT, Closed, Raw


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


class TestRedisCluster(unittest.TestCase):

    def cluster(self, **kw):
        c = RedisCluster(**kw)
        self.addCleanup(c.stop_checked)
        return c.start()

    def client(self, c, server, **kw):
        r = c.client(server, **kw)
        self.addCleanup(hangup, r)
        return r

    def test_slots_migration_failover(self):
        c = self.cluster()
        self.assertEqual(len(c.servers), 6)
        masters = c.masters()
        self.assertEqual(len(masters), 3)
        self.assertEqual(c.seeds(), ",".join(m.address() for m in masters))
        self.assertEqual(c.url(), "redis-cluster://" + c.seeds())
        self.assertEqual(sorted(len(c.slots_of(m)) > 0 for m in masters), [True] * 3)
        self.assertEqual(sum(len(c.slots_of(m)) for m in masters), CLUSTER_SLOTS)
        r = self.client(c, masters[0])
        for key in ("a", "{user1000}.following", "foo{}{bar}", "{}x", "a{b}}c", "{{x}}",
                    b"\xff\x00{\x01}", "dlock:l:{it%7D%25{}"):
            self.assertEqual(c.slot(key), r.execute_command("CLUSTER", "KEYSLOT", key), key)
        for lock in ("plain", "a}b", "50%", "{x}", "}{%"):
            slots = {r.execute_command("CLUSTER", "KEYSLOT", k)
                     for k in lock_keys(lock).values()}
            self.assertEqual(slots, {c.lock_slot(lock)}, lock)
        self.assertEqual(lock_keys("a}%{")["lease"], b"dlock:l:{a%7D%25{}")

        # a slot and its key move to another master
        lock = "moved"
        slot = c.lock_slot(lock)
        src = c.master_of(slot)
        key = lock_keys(lock)["fence"]
        self.assertTrue(self.client(c, src).set(key, "7"))
        dest = next(m for m in masters if m is not src)
        self.assertIs(c.migrate_slot(slot, dest), src)
        self.assertIs(c.master_of(slot), dest)
        self.assertEqual(self.client(c, dest).get(key), b"7")
        self.assertEqual(src.cmd("CLUSTER", "COUNTKEYSINSLOT", slot), 0)
        with self.assertRaisesRegex(redis.exceptions.ResponseError, "^MOVED %d " % slot):
            self.client(c, src).get(key)
        c.wait_ok(10)

        # its master killed, the replica takes over (with the key): first the
        # replica has it (replication is asynchronous; a write of this
        # client in the same slot, acknowledged, comes after the import)
        rd = self.client(c, dest)
        self.assertTrue(rd.set(lock_keys(lock)["mark"], "1"))
        self.assertGreaterEqual(rd.execute_command("WAIT", 1, 10000), 1)
        c.kill(dest)
        new = c.wait_promoted(dest, 15)
        self.assertIsNot(new, dest)
        self.assertEqual(new.role(), "master")
        self.assertIs(c.master_of(slot), new)
        self.assertEqual(self.client(c, new).get(key), b"7")
        c.restart(dest)
        c.wait_ok(20)
        self.assertEqual(dest.role(), "slave")
        self.assertEqual(len(c.masters()), 3)

    def test_tls_password_users(self):
        c = self.cluster(tls=shared_certs(), password="pw",
                         users=["dl on >secret ~dlock:* &dlock:* +get +set"])
        self.assertTrue(c.url().startswith("rediss-cluster://:pw@127.0.0.1:"))
        m = c.masters()
        self.assertEqual(len(m), 3)
        lock = "tls"
        owner = c.master_of(c.lock_slot(lock))
        dl = self.client(c, owner, username="dl", password="secret")
        self.assertTrue(dl.set(lock_keys(lock)["lease"], "1"))
        with self.assertRaises(redis.exceptions.NoPermissionError):
            dl.set("other", "1")
        with self.assertRaises(redis.exceptions.ConnectionError):
            redis.Redis(host="127.0.0.1", port=owner.port, socket_timeout=2,
                        single_connection_client=True).ping()


if __name__ == "__main__":
    unittest.main()
