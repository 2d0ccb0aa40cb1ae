"""The redis backend against Redis as it runs in production: TLS (with
and without client certificates), ACL users limited to dlockd's keys and
channels. Real redis-server processes, certificates made with openssl."""

import os
import shutil
import signal
import time
import unittest

from dlocktest.cases import RedisTestCase
from dlocktest.certs import make_certs, shared_certs
from dlocktest.env import unique_key
from dlocktest.proc import wait_until
from dlocktest.resp import Err

# The smallest ACL the redis backend needs (docs/backends/redis.md, "TLS and ACL users"):
# its keys and channels under the prefix, the script calls, and inside the
# scripts the commands they run (Redis checks those against the user too).
MIN_ACL = ("~dlock:* &dlock:* +ping +subscribe +eval +evalsha +script|load "
           "+get +set +del +type +pttl +pexpire +pexpireat +time +publish "
           "+zrange +zadd +zrem +zremrangebyscore +zcard +zscore "
           "+hset +hget +hmget +hdel +hincrby")


def tls_config(ca=None, cert=None, key=None, server_name=None, extra=""):
    """A configuration whose backend section holds only TLS settings (the -b
    URL gives the rest)."""
    lines = ["backend:", "  tls:"]
    for name, value in (("ca_file", ca), ("cert_file", cert), ("key_file", key),
                        ("server_name", server_name)):
        if value is not None:
            lines.append("    %s: %s" % (name, value))
    if len(lines) == 2:
        lines = []
    return "\n".join(lines) + ("\n" + extra if extra else "") + "\n"


class TLSCase(RedisTestCase):

    def lock_unlock(self, d):
        c = self.conn(d)
        key = unique_key("tls")
        token = c.cmd("LOCK", key, "TTL", "10000")
        self.assertNotIsInstance(token, Err, token)
        self.assertEqual(c.cmd("UNLOCK", key, token[0]), 0)

    def refused(self, d, words, reason=True, most=2, lasting=True):
        """d never connects: LOCK answers -BACKEND, and the log says why
        (each of words) in one line, not one per attempt; so does the
        reply (words[0]) when reason. When lasting (the settings refused,
        which no wait cures), a LOCK with WAIT left answers at once too."""
        c = self.conn(d)
        wait_until(lambda: all(w in d.log(20000) for w in words), 5.0,
                   what="the log to say %r" % (words,))
        reply = c.cmd("LOCK", unique_key("tls"), "WAIT", "0")
        self.assertErr(reply, "BACKEND")
        if reason:  # the reply says why, as the log does
            self.assertIn(words[0], reply)
        if lasting:
            t0 = time.monotonic()
            self.assertErr(c.cmd("LOCK", unique_key("tls"), "WAIT", "5000"), "BACKEND")
            took = time.monotonic() - t0
            self.assertLess(took, 1.0, "LOCK WAIT 5000 waited %.2f s though the backend "
                            "refused the daemon's settings" % took)
        self.assertIn("backend_connected:0", c.cmd("INFO").decode())
        time.sleep(1.0)  # several attempts (backoff 100 ms, doubling)
        lines = [l for l in d.log(200000).splitlines() if words[0] in l]
        self.assertLessEqual(len(lines), most, "lines:\n%s" % "\n".join(lines))
        self.assertGreaterEqual(len(lines), 2, "lines:\n%s" % "\n".join(lines))


class TestRedisTLS(TLSCase):

    def test_server_verified_by_ca_file(self):
        certs = shared_certs()
        r = self.start_redis(tls=certs)
        d = self.start_daemon(r, config=tls_config(ca=certs.ca))
        self.assertTrue(r.url().startswith("rediss://"))
        self.lock_unlock(d)
        info = self.conn(d).cmd("INFO").decode()
        self.assertIn("backend_connected:1", info)
        self.assertIn("backend_subscribed:1", info)

    def test_system_store_with_ssl_cert_file(self):
        certs = shared_certs()
        r = self.start_redis(tls=certs)
        d = self.start_daemon(r, env={"SSL_CERT_FILE": certs.ca,
                                      "SSL_CERT_DIR": certs.dir})
        self.lock_unlock(d)

    def test_client_certificate(self):
        certs = shared_certs()
        r = self.start_redis(tls=certs, auth_clients=True)
        d = self.start_daemon(r, config=tls_config(ca=certs.ca, cert=certs.client_cert,
                                                   key=certs.client_key))
        self.lock_unlock(d)
        # without one, the server refuses the handshake
        d2 = self.start_daemon(r, config=tls_config(ca=certs.ca), start=False)
        d2.start(wait_backend=False)
        # (with TLS 1.3 the server's alert saying why may be lost when its
        # close beats it: at most one line more per connection then)
        self.refused(d2, ["connection to 127.0.0.1", "down"], reason=False, most=4,
                     lasting=False)
        log = d2.log(200000)
        self.assertTrue("alert certificate required" in log or
                        "closed during the handshake" in log, log)

    def test_wrong_ca_refused(self):
        certs = shared_certs()
        r = self.start_redis(tls=certs)
        d = self.start_daemon(r, config=tls_config(ca=certs.other_ca), start=False)
        d.start(wait_backend=False)
        self.refused(d, ["certificate not verified: "])

    def test_wrong_name_refused(self):
        certs = shared_certs()
        r = self.start_redis(tls=certs)
        d = self.start_daemon(r, config=tls_config(ca=certs.ca, server_name="other.example"),
                              start=False)
        d.start(wait_backend=False)
        self.refused(d, ["certificate not verified: hostname mismatch"])
        # the name the certificate carries is accepted
        d2 = self.start_daemon(r, config=tls_config(ca=certs.ca, server_name="localhost"))
        self.lock_unlock(d2)

    def test_plain_client_on_tls_port_refused(self):
        certs = shared_certs()
        r = self.start_redis(tls=certs)
        d = self.start_daemon(r, backend_url=r.url().replace("rediss://", "redis://"),
                              start=False)
        d.start(wait_backend=False)
        c = self.conn(d)
        self.assertErr(c.cmd("LOCK", unique_key("tls"), "WAIT", "0"), "BACKEND")

    def test_certificates_read_again_on_sighup(self):
        certs = shared_certs()
        r = self.start_redis(tls=certs, auth_clients=True)
        d = self.start_daemon(r, start=False)
        # a client certificate of another CA: refused by the server
        mine = make_certs()
        cert = os.path.join(d.dir, "client.crt")
        key = os.path.join(d.dir, "client.key")
        shutil.copy(mine.client_cert, cert)
        shutil.copy(mine.client_key, key)
        d.config = tls_config(ca=certs.ca, cert=cert, key=key)
        d.start(wait_backend=False)
        c = self.conn(d)
        self.assertErr(c.cmd("LOCK", unique_key("tls"), "WAIT", "0"), "BACKEND")
        shutil.copy(certs.client_cert, cert)
        shutil.copy(certs.client_key, key)
        d.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "TLS files read again" in d.log(20000), 5.0,
                   what="the reload")
        wait_until(lambda: "backend_connected:1" in c.cmd("INFO").decode(), 10.0,
                   what="the next connect to use the new certificate")
        self.lock_unlock(d)


class TestRedisACL(TLSCase):

    def test_smallest_acl_user(self):
        r = self.start_redis(users=["locker on >s3cret " + MIN_ACL])
        url = "redis://locker:s3cret@127.0.0.1:%d" % r.port
        a = self.start_daemon(r, backend_url=url)
        b = self.start_daemon(r, backend_url=url)
        ca, cb = self.conn(a), self.conn(b)
        key = unique_key("acl")
        t1 = ca.cmd("LOCK", key, "TTL", "10000")
        self.assertNotIsInstance(t1, Err, t1)
        # b waits, and is woken through the user's channel
        cb.send(cb.encode("LOCK", key, "TTL", "10000", "WAIT", "5000"))
        time.sleep(0.2)
        self.assertGreater(ca.cmd("EXTEND", key, "10000", t1[0]), 9000)
        self.assertEqual(ca.cmd("UNLOCK", key, t1[0]), 0)
        t2 = cb.read()
        self.assertNotIsInstance(t2, Err, t2)
        self.assertGreater(t2[1], t1[1])
        self.assertEqual(cb.cmd("UNLOCK", key, t2[0]), 0)
        # shared and semaphore holdings use the sorted-set commands
        for mode in (["SHARED"], ["LIMIT", "2"]):
            k = unique_key("acl")
            t = ca.cmd("LOCK", k, "TTL", "10000", *mode)
            self.assertNotIsInstance(t, Err, (mode, t))
            self.assertGreater(ca.cmd("EXTEND", k, "10000", t[0]), 9000)
            self.assertEqual(ca.cmd("UNLOCK", k, t[0]), 0)
        # the keys are the user's: nothing outside the prefix
        self.assertEqual(r.client().keys("*"),
                         [k for k in r.client().keys("*") if k.startswith(b"dlock:")])

    def test_username_and_password_from_yaml(self):
        r = self.start_redis(users=["locker on >s3cret " + MIN_ACL])
        d = self.start_daemon(r, backend_conf={"username": "locker", "password": "s3cret"})
        self.lock_unlock(d)

    def test_wrong_password_refused_once(self):
        r = self.start_redis(users=["locker on >s3cret " + MIN_ACL])
        d = self.start_daemon(r, backend_url="redis://locker:wrong@127.0.0.1:%d" % r.port,
                              start=False)
        d.start(wait_backend=False)
        self.refused(d, ["authentication refused"])
        self.assertNotIn("wrong", d.log(200000))

    def test_missing_permission_named_once(self):
        # no ZADD: shared locks fail; the one log line names the command
        acl = MIN_ACL.replace(" +zadd", "")
        r = self.start_redis(users=["locker on >s3cret " + acl])
        d = self.start_daemon(r, backend_url="redis://locker:s3cret@127.0.0.1:%d" % r.port)
        c = self.conn(d)
        for _ in range(5):
            self.assertErr(c.cmd("LOCK", unique_key("acl"), "SHARED", "WAIT", "0"), "BACKEND")
        # a missing permission lasts: a WAIT is not spent on it
        t0 = time.monotonic()
        self.assertErr(c.cmd("LOCK", unique_key("acl"), "SHARED", "WAIT", "5000"), "BACKEND")
        self.assertLess(time.monotonic() - t0, 1.0)
        log = d.log(200000)
        # Redis 7.0 does not say which command a script was refused (7.2
        # and later do): the line says what the user needs
        lines = [l for l in log.splitlines() if "answered an error" in l]
        self.assertEqual(len(lines), 1, log)
        self.assertRegex(lines[0], "can't run this command|no permissions to run")
        self.assertIn("the redis user needs at least the ACL", lines[0])
        self.assertIn("+zadd", lines[0])
        # exclusive locks need no ZADD and still work; the connection stayed
        self.lock_unlock(d)
        self.assertIn("backend_reconnects_total:0", c.cmd("INFO").decode())


class TestReplicaAck(TLSCase):
    """backend.min_replicas_ack: a grant, renewal or handoff counts once
    that many replicas acknowledged it (WAIT)."""

    def master_and_replica(self):
        m = self.start_redis()
        r = self.start_redis()
        m.client().config_set("repl-diskless-sync-delay", 0)
        r.client().execute_command("REPLICAOF", "127.0.0.1", str(m.port))
        wait_until(lambda: m.client().info("replication").get("slave0", {}).get("state") ==
                   "online" and m.client().execute_command("WAIT", 1, 100) == 1, 10.0,
                   what="the replica to follow the master")
        return m, r

    def test_acknowledged_grants(self):
        m, r = self.master_and_replica()
        d = self.start_daemon(m, backend_conf={"min_replicas_ack": 1,
                                                "replica_ack_timeout_ms": 1000,
                                                "command_timeout_ms": 2000})
        c = self.conn(d)
        key = unique_key("ack")
        t = c.cmd("LOCK", key, "TTL", "6000")
        self.assertNotIsInstance(t, Err, t)
        # the lease is on the replica when the grant is answered
        self.assertTrue(r.client().exists("dlock:l:" + key))
        self.assertGreater(c.cmd("EXTEND", key, "6000", t[0]), 5000)
        self.assertEqual(c.cmd("UNLOCK", key, t[0]), 0)
        info = c.cmd("INFO").decode()
        self.assertIn("backend_min_replicas_ack:1", info)
        self.assertIn("backend_unacknowledged_total:0", info)

    def test_without_acknowledgement_nothing_is_granted(self):
        m, r = self.master_and_replica()
        d = self.start_daemon(m, backend_conf={"min_replicas_ack": 1,
                                                "replica_ack_timeout_ms": 300,
                                                "command_timeout_ms": 1000})
        holder = self.conn(d)
        held = unique_key("ack")
        # a loaded machine may delay the replica's first acknowledgements
        self.granted_soon(holder, held, "a first acknowledged grant")
        r.pause()
        try:
            key = unique_key("ack")
            reply = self.conn(d).cmd("LOCK", key, "TTL", "3000", "WAIT", "0")
            self.assertErr(reply, "BACKEND")
            self.assertIn("replica without acknowledgement", reply)
            # the lease taken without acknowledgement was given back
            wait_until(lambda: not m.client().exists("dlock:l:" + key), 2.0,
                       what="the unacknowledged lease to be given back")
            # renewals are not acknowledged either: the holder is told
            self.assertErr(self.read_lost(holder, 6.0), "LOST")
            # the log names the server the calls went to
            self.assertIn("lease renewals are failing (redis 127.0.0.1:%d: replica without "
                          "acknowledgement" % m.port, d.log(200000))
        finally:
            r.resume()
        self.granted_soon(self.conn(d), unique_key("ack"),
                          "grants again once the replica is back")

    def test_unacknowledged_calls_never_stack(self):
        """With no replica at all, each call's WAIT runs out after
        replica_ack_timeout_ms. Many calls at once share the WAITs instead
        of queueing one behind another on the command connection until
        the last replies are overdue: every caller reads the missing
        acknowledgement, and the connection stays up."""
        m = self.start_redis()
        d = self.start_daemon(m, backend_conf={"min_replicas_ack": 1,
                                                "replica_ack_timeout_ms": 300,
                                                "command_timeout_ms": 1000})
        conns = [self.conn(d) for _ in range(8)]
        conns[0].cmd("PING")
        for c in conns:
            c.send(c.encode("LOCK", unique_key("stack"), "TTL", "3000", "WAIT", "0"))
        for c in conns:
            c.settimeout(10.0)
            reply = c.read()
            self.assertErr(reply, "BACKEND")
            self.assertIn("replica without acknowledgement", reply)
            self.assertNotIn("overdue", reply)
        self.assertNotIn("overdue", d.log(200000))
        self.assertIn("backend_reconnects_total:0", conns[0].cmd("INFO").decode())

    def granted_soon(self, conn, key, what):
        """conn's LOCK of key (TTL 3000) is granted within 10 s of tries."""
        wait_until(lambda: not isinstance(conn.cmd("LOCK", key, "TTL", "3000"), Err), 10.0,
                   what=what)

    def read_lost(self, conn, seconds):
        """The reply to PINGs until one is not PONG, within seconds."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            reply = conn.cmd("PING")
            if reply != "PONG":
                return reply
            time.sleep(0.1)
        return None


if __name__ == "__main__":
    unittest.main()
