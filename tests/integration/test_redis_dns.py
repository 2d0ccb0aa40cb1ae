"""The redis backend behind a DNS name, as managed Redis services run it:
the name is resolved again at every connect, so a failover that moves the
name to the new primary is followed; a name that does not resolve yet does
not stop the daemon.

Each daemon runs in a mount namespace of its own whose /etc/resolv.conf
names a DNS server of the test (dnsfake.FakeDNS) alone, and whose
/etc/hosts holds localhost alone. The redis-servers listen on the same port
of different loopback addresses, as the nodes of a service do.
"""

import errno
import os
import re
import socket
import time
import unittest

from dlocktest import dnsfake
from dlocktest.cases import RedisTestCase, report
from dlocktest.env import DLOCKD, new_dir, unique_key
from dlocktest.proc import wait_until
from dlocktest.resp import parse_info

NAME = "redis.test"
FOLLOW_LIMIT = 5.0  # seconds a daemon may take to follow a failover
# a name that resolves late is tried again after at most the longest
# reconnect delay (5 s) and a lookup
RESOLVE_LIMIT = 10.0

_namespaces = None  # None: not checked yet; else "" (usable) or why not


def namespaces_or_skip():
    """Skip the test when unshare is not permitted to make a mount
    namespace here; fail when it is missing or the bind mounts fail."""
    global _namespaces
    if _namespaces is None:
        try:
            dnsfake.check_namespaces()
            _namespaces = ""
        except dnsfake.NamespaceRefused as e:
            _namespaces = str(e)
    if _namespaces:
        raise unittest.SkipTest(_namespaces)


def shared_port(hosts):
    """A TCP port free on every address of hosts a moment ago."""
    for _ in range(50):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((hosts[0], 0))
        port = s.getsockname()[1]
        held = [s]
        try:
            for h in hosts[1:]:
                t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                held.append(t)
                t.bind((h, port))
            return port
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
        finally:
            for t in held:
                t.close()
    raise AssertionError("no port free on all of %s" % (hosts,))


class DNSCase(RedisTestCase):
    """A fake DNS server and a resolver naming it alone for each test."""

    def setUp(self):
        namespaces_or_skip()
        super().setUp()
        self.dns = dnsfake.FakeDNS()
        self.addCleanup(self.dns.stop)  # after the daemons and servers
        self.resolver = dnsfake.Resolver.for_dns(self.dns)

    def start_named_daemon(self, port, start=True):
        """A daemon whose backend is redis://redis.test:port, resolving
        through the fake DNS only."""
        d = self.start_daemon(None, backend_url="redis://%s:%d" % (NAME, port),
                              wrapper=self.resolver.wrapper(), start=False)
        if start:
            d.start()
        return d

    def lock_within(self, conn, key, limit):
        """LOCK key (TTL 30 s) on conn, asked again while the answer is
        -BACKEND; the grant and the seconds it took. Fails after limit s."""
        t0 = time.monotonic()
        while True:
            r = conn.cmd("LOCK", key, "TTL", "30000", "WAIT", "1000")
            if isinstance(r, list):
                return self.assertGranted(r), time.monotonic() - t0
            self.assertErr(r, "BACKEND")
            if time.monotonic() - t0 > limit:
                self.fail("LOCK %s not granted within %.1f s: %s" % (key, limit, r))
            time.sleep(0.05)

    def log_lines(self, d, *words):
        """The lines of d's log holding every one of words."""
        return [l for l in d.log(200000).splitlines() if all(w in l for w in words)]


class TestRedisDNSFailover(DNSCase):
    """A primary at 127.0.0.1:P and its replica at 127.0.0.2:P; redis.test
    names the primary. The service fails over: the replica is promoted,
    the old primary becomes its replica, and the name moves. The daemon
    must follow the name, not the address it found at start."""

    def start_pair(self):
        port = shared_port(["127.0.0.1", "127.0.0.2"])
        old = self.start_redis(host="127.0.0.1", port=port)
        new = self.start_redis(host="127.0.0.2", port=port)
        # a full sync starts at once (not after the default 5 s wait for
        # more replicas)
        for server in (old, new):
            self.assertEqual(self.redis_conn(server).cmd(
                "CONFIG", "SET", "repl-diskless-sync-delay", "0"), "OK")
        c = self.redis_conn(new)
        self.assertEqual(c.cmd("REPLICAOF", "127.0.0.1", str(port)), "OK")
        wait_until(lambda: "master_link_status:up" in
                   c.cmd("INFO", "replication").decode(), 10.0,
                   what="the replica to be in sync")
        return port, old, new

    def before_failover(self, port):
        """A daemon on redis.test (-> 127.0.0.1) with a lock held and one
        released; returns (daemon, its connection, (key, token) held, the
        highest fence granted)."""
        self.dns.set(NAME, "127.0.0.1")
        d = self.start_named_daemon(port)
        self.assertEqual(d.info()["backend_address"], "127.0.0.1:%d" % port)
        self.assertGreater(self.dns.asked(NAME), 0, "the daemon did not ask the fake DNS")
        c = self.conn(d)
        held = unique_key("held")
        g1 = self.assertGranted(c.cmd("LOCK", held, "TTL", "30000"))
        gone = unique_key("gone")
        g2 = self.assertGranted(c.cmd("LOCK", gone, "TTL", "30000"))
        self.assertEqual(c.cmd("UNLOCK", gone, g2[0]), 0)
        return d, c, (held, g1[0]), max(g1[1], g2[1])

    def fail_over(self, port, old, new):
        """What a managed service does in a planned failover: writes to
        the old primary are held back, the replica catches up with all it
        has, it is promoted, the old primary follows it, the name moves,
        and the writes held back go on (to a replica now). (WAIT would not
        do: it waits only for the writes of the connection that sends it.)"""
        oc, nc = self.redis_conn(old), self.redis_conn(new)
        self.assertEqual(oc.cmd("CLIENT", "PAUSE", "10000", "WRITE"), "OK")
        end = int(parse_info(oc.cmd("INFO", "replication"))["master_repl_offset"])
        wait_until(lambda: int(parse_info(nc.cmd("INFO", "replication"))
                               ["slave_repl_offset"]) >= end, 5.0, 0.01,
                   "the replica to catch up with the primary")
        self.assertEqual(nc.cmd("REPLICAOF", "NO", "ONE"), "OK")
        self.assertEqual(oc.cmd("REPLICAOF", "127.0.0.2", str(port)), "OK")
        self.dns.set(NAME, "127.0.0.2")
        self.assertEqual(oc.cmd("CLIENT", "UNPAUSE"), "OK")
        return oc

    def after_failover(self, d, c, port, held, fence, asked):
        """The daemon works on the new primary: its address in INFO, a
        new lock with a fence above every earlier one, the lock held
        across the failover still its own, the name asked again."""
        g, took = self.lock_within(c, unique_key("after"), FOLLOW_LIMIT)
        info = d.info()
        self.assertEqual(info["backend_address"], "127.0.0.2:%d" % port,
                         "still on the old primary; log:\n%s" % d.log())
        self.assertEqual(info["backend_connected"], "1")
        self.assertGreaterEqual(int(info["backend_reconnects_total"]), 1)
        self.assertGreater(g[1], fence)
        report("LOCK granted %.2f s after the failover" % took)
        self.assertGreater(self.dns.asked(NAME), asked, "the name was not asked again")
        self.assertTrue(self.log_lines(d, "connection to 127.0.0.2:%d up" % port),
                        d.log())
        # the lock held before lives on in the new primary (replicated)
        key, token = held
        self.assertEqual(c.cmd("UNLOCK", key, token), 0,
                         "the lock held was lost; log:\n%s" % d.log())
        g2 = self.assertGranted(c.cmd("LOCK", key, "TTL", "30000", "WAIT", "1000"))
        self.assertGreater(g2[1], g[1])
        self.assertTrue(d.running())

    def test_readonly_after_failover(self):
        # the old primary keeps the daemon's connections; the next script
        # it gets is answered -READONLY
        port, old, new = self.start_pair()
        d, c, held, fence = self.before_failover(port)
        self.fail_over(port, old, new)
        asked = self.dns.asked(NAME)
        self.after_failover(d, c, port, held, fence, asked)
        self.assertTrue(self.log_lines(d, "connection to", "down:", "READONLY"), d.log())

    def test_connections_killed_at_failover(self):
        # the old primary drops its clients: the daemon reconnects by
        # itself, to the new primary, before any LOCK asks it to
        port, old, new = self.start_pair()
        d, c, held, fence = self.before_failover(port)
        oc = self.fail_over(port, old, new)
        asked = self.dns.asked(NAME)
        self.assertGreaterEqual(oc.cmd("CLIENT", "KILL", "TYPE", "normal"), 1)
        oc.cmd("CLIENT", "KILL", "TYPE", "pubsub")
        wait_until(lambda: d.info()["backend_address"] == "127.0.0.2:%d" % port,
                   FOLLOW_LIMIT, 0.02, "INFO backend_address to show the new primary")
        wait_until(lambda: d.info()["backend_connected"] == "1", FOLLOW_LIMIT, 0.02,
                   "INFO backend_connected:1")
        self.after_failover(d, c, port, held, fence, asked)


class TestRedisDNSLate(DNSCase):
    """redis.test does not resolve when the daemon starts: it runs anyway,
    says why LOCK fails, and asks again until the name resolves."""

    def test_name_resolves_later(self):
        port = shared_port(["127.0.0.3"])
        d = self.start_named_daemon(port, start=False)
        d.start(wait_backend=False)
        pid = d.pid
        wait_until(lambda: self.log_lines(d, "cannot resolve %s" % NAME), 5.0,
                   what="the log to say the name does not resolve")
        c = self.conn(d)
        r = c.cmd("LOCK", unique_key("late"), "WAIT", "0")
        self.assertErr(r, "BACKEND")
        self.assertIn("cannot resolve %s" % NAME, r)
        info = parse_info(c.cmd("INFO"))
        self.assertEqual(info["backend_connected"], "0")
        # it asks again (with backoff), and lives on
        wait_until(lambda: self.dns.asked(NAME) >= 3, 5.0, 0.02,
                   "the daemon to ask for the name again")
        self.assertTrue(d.running())
        # a server comes, then the name resolves to it
        self.start_redis(host="127.0.0.3", port=port)
        self.assertTrue(d.running(), d.log())
        self.dns.set(NAME, "127.0.0.3")
        wait_until(lambda: parse_info(c.cmd("INFO"))["backend_connected"] == "1",
                   RESOLVE_LIMIT, 0.05, "the daemon to connect once the name resolves")
        key = unique_key("late")
        g, _ = self.lock_within(c, key, 2.0)
        self.assertEqual(parse_info(c.cmd("INFO"))["backend_address"],
                         "127.0.0.3:%d" % port)
        # the same process: no restart
        self.assertTrue(d.running())
        self.assertEqual(d.pid, pid)
        self.assertTrue(self.log_lines(d, "connection to 127.0.0.3:%d up" % port), d.log())
        self.assertEqual(c.cmd("UNLOCK", key, g[0]), 0)


class TestRedisDNSCheckConf(DNSCase):
    """dlockd -t resolves the backend's name (through the system's
    resolver: here the fake DNS) and names it when it does not resolve,
    with an error or a warning."""

    # what a line saying a name does not resolve may say
    UNRESOLVED_RE = re.compile(r"resolv|not known|unknown|NXDOMAIN|no such", re.I)
    # what a line about a resolvable name must not say
    COMPLAINT_RE = re.compile(r"cannot|not resolve|unresolv|not known|unknown|NXDOMAIN|"
                              r"no such|fail|error|warn", re.I)

    def check(self, port=6379):
        """dlockd -t on a configuration whose backend is redis.test:port."""
        conf = os.path.join(new_dir("dlockd-t"), "dlockd.yaml")
        with open(conf, "w") as f:
            f.write('backend:\n  type: redis\n  address: "%s:%d"\n' % (NAME, port))
        rc, out, err = self.resolver.run([DLOCKD, "-t", "-c", conf], timeout=20)
        return rc, out, out + err

    def test_check_names_unresolvable_backend(self):
        rc, _, text = self.check()
        lines = [l for l in text.splitlines() if NAME in l and self.UNRESOLVED_RE.search(l)]
        self.assertTrue(lines, "dlockd -t (status %d) does not say that %s does not "
                        "resolve:\n%s" % (rc, NAME, text))
        self.assertGreater(self.dns.asked(NAME), 0, "the name was not asked for")

    def test_check_resolvable_backend_ok(self):
        self.dns.set(NAME, "127.0.0.1")
        rc, out, text = self.check()
        self.assertEqual(rc, 0, text)
        self.assertIn("configuration OK", out)
        self.assertFalse([l for l in text.splitlines()
                          if NAME in l and self.COMPLAINT_RE.search(l)], text)


if __name__ == "__main__":
    unittest.main()
