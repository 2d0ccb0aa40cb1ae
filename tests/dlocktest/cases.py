"""The tests' base classes: DaemonTestCase (one daemon of the class, on any
backend), DlockCliCase (the same, driven with the dlock CLI), RedisTestCase and EtcdTestCase (servers and daemons a test or its
class starts, stopped after it whatever happens), ConfigTestCase
(configurations checked with dlockd -t); and what tests print (report)."""

import os
import re
import signal
import socket
import sys
import time
import unittest

import redis

from .cluster import RedisCluster
from .daemon import Daemon, run_dlock, run_dlockd
from .env import DLOCK, new_dir, unique_key
from .etcd_server import EtcdServer
from .proc import free_port, in_thread, spawn, wait_until
from .redis_server import RedisServer
from .resp import NULL, TOKEN_RE, Err, Raw, pairs, parse_info, read_within
from .sentinel import SentinelDaemon, SentinelSetup
from .sessions import exclusion_across


def report(text):
    """A figure for the log of the run (counts, latencies)."""
    sys.stdout.write("\n    %s\n" % text)
    sys.stdout.flush()


def ms(seconds):
    """Durations in seconds as a list of whole milliseconds, for report()."""
    return ", ".join("%.0f" % (1000 * t) for t in seconds)


def started(server, cleanup):
    """server (a RedisServer, an EtcdServer) started; then cleanup (a
    TestCase's addCleanup or addClassCleanup) is given its stop_checked."""
    server.start()
    cleanup(server.stop_checked)
    return server


def stopped_later(thing, cleanup, start=True):
    """thing (a Daemon, a RedisCluster) to be stopped by cleanup (a
    TestCase's addCleanup or addClassCleanup) with its stop_checked
    whatever happens; started first unless start is false."""
    cleanup(thing.stop_checked)
    return thing.start() if start else thing


def hangup(conn):
    """Close a client's connection for good (redis-py's close() only puts
    it back into the pool)."""
    try:
        if isinstance(conn, redis.Redis):
            if conn.connection is not None:
                conn.connection.disconnect()
            conn.close()
            conn.connection_pool.disconnect()
        else:
            conn.close()
    except Exception:
        pass


def held_pages(case, conn, pattern, count):
    """Every page of HELD 0 MATCH pattern COUNT count on conn, to its end:
    (the keys listed, in order, as str; how many pages)."""
    keys, pages, cursor = [], 0, b"0"
    while True:
        r = conn.cmd("HELD", cursor, "MATCH", pattern, "COUNT", count)
        case.assertIsInstance(r, list, r)
        case.assertEqual(len(r), 2, r)
        cursor, page = r
        keys += [k.decode() for k in page]
        pages += 1
        case.assertLess(pages, 10000, "HELD never ends")
        if cursor == b"0":
            return keys, pages


def check_held(case, a, b, n=40):
    """HELD on b lists, page by page, every key held through a and b (a and
    b: functions that make a connection to each daemon; the same daemon on
    memory): the keys that match, each at least once, none that is not held;
    released keys leave the listing; a cursor that is not one is refused."""
    base = unique_key("held")
    ca, cb = a(), b()
    keys = ["%s/%d" % (base, i) for i in range(n)]
    for i, k in enumerate(keys):
        c = ca if i % 2 == 0 else cb
        case.assertIsInstance(c.cmd("LOCK", k, "TTL", 60000), list)
    case.assertIsInstance(ca.cmd("LOCK", base + "-other", "TTL", 60000), list)
    listed, pages = held_pages(case, cb, base + "/*", 5)
    case.assertEqual(set(listed), set(keys), "HELD: the keys held")
    case.assertGreater(pages, 1, "HELD answered in one page")
    everything, _ = held_pages(case, ca, base + "*", 1000)
    case.assertEqual(set(everything), set(keys) | {base + "-other"})
    case.assertEqual(set(held_pages(case, cb, base + "/1?", 1000)[0]),
                     {"%s/%d" % (base, i) for i in range(10, 20)})
    for i, k in enumerate(keys[:n // 2]):
        c = ca if i % 2 == 0 else cb
        case.assertEqual(c.cmd("UNLOCK", k), 0)
    case.assertEqual(set(held_pages(case, cb, base + "/*", 1000)[0]), set(keys[n // 2:]))
    for i, k in enumerate(keys[n // 2:]):
        c = ca if (i + n // 2) % 2 == 0 else cb
        case.assertEqual(c.cmd("UNLOCK", k), 0)
    case.assertEqual(ca.cmd("UNLOCK", base + "-other"), 0)
    case.assertEqual(held_pages(case, cb, base + "*", 1000)[0], [])
    for bad in ("x", "1-", "-1", "zz", "99999999999999999999"):
        r = cb.cmd("HELD", bad)
        case.assertIsInstance(r, Err, (bad, r))
        case.assertTrue(str(r).startswith("ERR invalid cursor"), (bad, r))
    for args in (("COUNT", 0), ("COUNT", "x"), ("MATCH",), ("FOO", 1)):
        case.assertIsInstance(cb.cmd("HELD", "0", *args), Err, args)
    case.assertEqual(cb.cmd("PING"), "PONG")


class DaemonTestCase(unittest.TestCase):
    """A test class sharing one daemon, started with CONFIG, among its tests.

    BACKEND "redis" starts a redis-server for the class first (stopped after
    the daemon whatever happens) and runs the daemon on it; BACKEND_CONF, if
    set, is the dict of backend.* keys written to its configuration.
    BACKEND "etcd" does the same with an etcd server of the class.
    BACKEND "redlock" starts NODES redis-servers for the class (cls.nodes,
    stopped after the daemon) and runs the daemon on them.
    BACKEND "redis-cluster" starts a RedisCluster (CLUSTER_ARGS are its
    keyword arguments) for the class (cls.cluster, stopped after the
    daemon) and runs the daemon on it.
    """

    CONFIG = ""
    BACKEND = "memory"
    BACKEND_CONF = None
    NODES = 3  # redis-servers of a redlock class
    CLUSTER_ARGS = {}  # RedisCluster(**CLUSTER_ARGS) of a redis-cluster class
    daemon = None
    redis = None
    etcd = None
    nodes = ()
    cluster = None

    @classmethod
    def setUpClass(cls):
        store = None
        if cls.BACKEND == "redis":
            cls.redis = store = RedisServer().start()
            cls.addClassCleanup(cls._stop_redis)
        elif cls.BACKEND == "etcd":
            cls.etcd = EtcdServer().start()
            cls.addClassCleanup(cls._stop_etcd)
        elif cls.BACKEND == "redlock":
            cls.nodes = []
            cls.addClassCleanup(cls._stop_nodes)
            for _ in range(cls.NODES):
                cls.nodes.append(RedisServer().start())
            store = list(cls.nodes)
        elif cls.BACKEND == "redis-cluster":
            cls.cluster = store = RedisCluster(**cls.CLUSTER_ARGS).start()
            cls.addClassCleanup(cls._stop_cluster)
        cls.daemon = Daemon(cls.CONFIG, backend=cls.BACKEND, redis=store,
                            etcd=cls.etcd, backend_conf=cls.BACKEND_CONF).start()

    @classmethod
    def _stop_redis(cls):
        r, cls.redis = cls.redis, None
        if r is not None:
            r.stop_checked()

    @classmethod
    def _stop_nodes(cls):
        nodes, cls.nodes = cls.nodes, ()
        failed = []
        for r in nodes:
            try:
                r.stop_checked()
            except AssertionError as e:
                failed.append(str(e))
        if failed:
            raise AssertionError("\n".join(failed))

    @classmethod
    def _stop_cluster(cls):
        c, cls.cluster = cls.cluster, None
        if c is not None:
            c.stop_checked()

    @classmethod
    def _stop_etcd(cls):
        e, cls.etcd = cls.etcd, None
        if e is not None:
            e.stop_checked()

    @classmethod
    def tearDownClass(cls):
        d, cls.daemon = cls.daemon, None
        if d is not None:
            rc = d.stop()
            if rc != 0:
                raise AssertionError("dlockd exited with %s; log:\n%s" % (rc, d.log()))

    def setUp(self):
        self.assertTrue(self.daemon.running(), "the shared dlockd died:\n%s"
                        % self.daemon.log())
        if self.redis is not None:
            self.assertTrue(self.redis.running(), "the shared redis-server died:\n%s"
                            % self.redis.log())
        if self.etcd is not None:
            self.assertTrue(self.etcd.running(), "the shared etcd died:\n%s"
                            % self.etcd.log())
        for i, r in enumerate(self.nodes):
            self.assertTrue(r.running(), "the shared redis-server node %d died:\n%s"
                            % (i, r.log()))
        if self.cluster is not None:
            for r in self.cluster.servers:
                self.assertTrue(r.running(), "the shared cluster node on port %d died:\n%s"
                                % (r.port, r.log()))
        self._clients = []

    def tearDown(self):
        for c in self._clients:
            hangup(c)

    def client(self, **kw):
        c = self.daemon.client(**kw)
        self._clients.append(c)
        return c

    def raw(self, **kw):
        c = self.daemon.raw(**kw)
        self._clients.append(c)
        return c

    def status(self, key, conn=None):
        """STATUS key as a dict (str -> bytes/int)."""
        if conn is None:
            if not hasattr(self, "_status_conn") or self._status_conn is None:
                self._status_conn = self.client()
                self._clients.append(self._status_conn)
            conn = self._status_conn
        flat = conn.execute_command("STATUS", key)
        return pairs(flat)

    def wait_status(self, key, what="", timeout=5.0, **expect):
        """Poll STATUS key until every field in expect has its value."""
        def ok():
            st = self.status(key)
            return all(st.get(k) == v for k, v in expect.items())
        wait_until(ok, timeout, 0.005, "STATUS %s to show %s %s"
                   % (key, expect, what))

    def assertGrantedAfterKill(self, pid, key):
        """Process pid holds key: a waiter on a new connection is granted
        within 0.5 s of SIGKILL to pid."""
        waiter = in_thread(self.client().execute_command, "LOCK", key, "WAIT", 5000)
        self.wait_status(key, waiters=1)
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        self.assertIsNotNone(waiter.result(5))
        took = waiter.done_at - t0
        self.assertLess(took, 0.5, "lock released %.3f s after SIGKILL" % took)

    def assertFullMatch(self, pattern, text, msg=None):
        """text (str or bytes) matches the regular expression pattern as a
        whole; returns the match."""
        m = re.fullmatch(pattern, text)
        self.assertIsNotNone(m, text if msg is None else msg)
        return m

    def expect_protocol_error(self, data, what, within=2.0):
        """Send data on a new connection: it must get -ERR Protocol error
        and be closed within `within` s."""
        raw = self.raw()
        raw.send(data)
        try:
            rep = raw.read()
        except Exception as e:  # closed without a reply
            self.fail("%s: no -ERR Protocol error reply (%s)" % (what, e))
        self.assertIsInstance(rep, Err, what)
        self.assertTrue(rep.startswith("ERR Protocol error"), "%s: %r" % (what, rep))
        self.assertTrue(raw.is_closed(within), "%s: connection not closed" % what)

    def info(self, conn=None):
        """INFO as a dict, on conn or on a connection kept for the test."""
        if conn is None:
            if getattr(self, "_info_conn", None) is None:
                self._info_conn = self.raw()
            conn = self._info_conn
        return parse_info(conn.cmd("INFO"))


class DlockCliCase(DaemonTestCase):
    """A DaemonTestCase that runs the dlock CLI against its daemon."""

    def dlock(self, *args, env=None, timeout=10.0):
        """Run dlock with args to its end: (status, stdout, stderr)."""
        e = {"DLOCK_ADDR": self.daemon.addr(), "DLOCK_PASSWORD": ""}
        e.update(env or {})
        return run_dlock(args, env=e, timeout=timeout)

    def popen(self, *args, **kw):
        """Start dlock in the background (its pipes as asked in kw)."""
        self.assertTrue(os.path.exists(DLOCK), "dlock binary missing: %s" % DLOCK)
        env = dict(os.environ, DLOCK_ADDR=self.daemon.addr(), DLOCK_PASSWORD="")
        env.update(kw.pop("env", {}))
        return spawn([DLOCK] + [str(a) for a in args], env=env, **kw)


# ---- tests with their own redis-server and daemons ----

class RedisTestCase(unittest.TestCase):
    """Base of tests that start redis-server and dlockd processes of their
    own. What a test starts with start_redis() / start_daemon() is stopped
    after the test (daemons first), whatever happens; the class-level
    variants (class_redis, class_daemon) live until the class is done. A
    daemon or redis-server that exits with a non-zero status on that stop
    fails the test; one the test stopped itself is left alone."""

    def assertErr(self, reply, code, msg=None):
        """reply is an error reply with this code word."""
        self.assertIsInstance(reply, Err, msg or "not an error: %r" % (reply,))
        self.assertEqual(reply.code, code, msg or reply)

    def fleet_status(self, daemon, key):
        """STATUS key FULL on daemon: (its fields, the counts kept, its
        holders as dicts)."""
        raw = self.conn(daemon).cmd("STATUS", key, "FULL")
        st = {}
        for i in range(0, len(raw), 2):
            st.setdefault(raw[i].decode(), raw[i + 1])
        return st, [pairs(h) for h in raw[15]]

    def assertFleetStatus(self, a, b, calls=None, exact_fence=True, lease_left=True):
        """Daemons a and b share a backend: STATUS key [FULL] on either
        tells a holder through a, with who holds it and through which
        daemon (the other's once, its own from its lock table); shared
        holders through both are both listed; a release is seen from b at
        once. calls(), when given, counts the backend's calls: STATUS FULL
        of a key held elsewhere costs one. exact_fence False (redlock):
        another daemon's holder shows the largest fence a node recorded,
        which may be above the grant's. lease_left False (etcd): what is
        left of another daemon's lease is not known (-1)."""
        key = unique_key()
        ida, idb = a.info()["daemon_id"].encode(), b.info()["daemon_id"].encode()
        self.assertNotEqual(ida, idb)
        h = self.conn(a)
        h.cmd("CLIENT", "SETNAME", "worker-1")
        sid = h.cmd("CLIENT", "ID")
        g = self.assertGranted(h.cmd("LOCK", key, "TTL", 30000))
        sb = self.conn(b)
        sb.cmd("PING")
        before = calls() if calls is not None else 0
        st = pairs(sb.cmd("STATUS", key, "FULL"))
        if calls is not None:
            self.assertEqual(calls() - before, 1, "backend calls of one STATUS FULL")
        for d in (b, a):
            st, hs = self.fleet_status(d, key)
            self.assertEqual((st["mode"], st["holders"]), (b"exclusive", 1),
                             "STATUS %s on %s" % (key, d.addr()))
            remote = d is b and not exact_fence
            self.assertGreaterEqual(st["fence"], g[1]) if remote else \
                self.assertEqual(st["fence"], g[1])
            if d is a or lease_left:
                self.assertGreater(st["ttl_ms"], 0)
                self.assertLessEqual(st["ttl_ms"], 30000 + 5000)
            else:
                self.assertEqual(st["ttl_ms"], -1)
            self.assertEqual(len(hs), 1, hs)
            x = hs[0]
            self.assertEqual((x["session"], x["name"], x["mode"], x["detached"]),
                             (sid, b"worker-1", b"exclusive", 0), x)
            self.assertGreaterEqual(x["fence"], g[1]) if remote else \
                self.assertEqual(x["fence"], g[1])
            self.assertEqual(x["daemon"], ida, x)
            self.assertEqual(x["daemon_addr"], a.addr().encode(), x)
            self.assertEqual(x["host"], socket.gethostname().encode(), x)
            self.assertRegex(x["addr"].decode(), r"^127\.0\.0\.1:\d+$")
            self.assertGreaterEqual(x["held_ms"], 0)
            self.assertLess(x["held_ms"], 30000)
            if d is a or lease_left:
                self.assertGreater(x["lease_ms"], 0)
            else:
                self.assertEqual(x["lease_ms"], -1)
        self.assertEqual(pairs(sb.cmd("STATUS", key))["holders"], 1)
        self.assertEqual(h.cmd("UNLOCK", key), 0)
        for d in (b, a):
            st, hs = self.fleet_status(d, key)
            self.assertEqual((st["mode"], st["holders"], hs), (b"free", 0, []), d.addr())
        # shared holders through both daemons: each daemon lists both
        sa = self.assertGranted(h.cmd("LOCK", key, "SHARED"))
        s2 = self.conn(b)
        s2.cmd("CLIENT", "SETNAME", "worker-2")
        sb2 = self.assertGranted(s2.cmd("LOCK", key, "SHARED"))
        for d in (a, b):
            st, hs = self.fleet_status(d, key)
            self.assertEqual((st["mode"], st["holders"]), (b"shared", 2), d.addr())
            got = sorted((x["daemon"], x["name"]) for x in hs)
            self.assertEqual(got, sorted([(ida, b"worker-1"), (idb, b"worker-2")]))
            if exact_fence:
                self.assertEqual(sorted(x["fence"] for x in hs), sorted([sa[1], sb2[1]]))
        self.assertEqual(h.cmd("UNLOCK", key), 0)
        self.assertEqual(s2.cmd("UNLOCK", key), 0)

    def assertLostReplies(self, conn, fences):
        """The next len(fences) commands of conn (PINGs) are answered
        -LOST key fence reason, one for each key of fences (a dict key:
        fence) in any order; the next PING is answered normally."""
        told = {}
        for _ in fences:
            r = conn.cmd("PING")
            self.assertErr(r, "LOST")
            words = r.split(" ", 3)
            self.assertEqual(len(words), 4, r)
            told[words[1]] = int(words[2])
        self.assertEqual(told, fences)
        self.assertEqual(conn.cmd("PING"), "PONG")

    def hello3(self, conn):
        """RESP3, with lost pushes (CLIENT LOSTPUSH ON)."""
        reply = conn.cmd("HELLO", "3")
        self.assertEqual(reply[b"proto"], 3)
        self.assertEqual(conn.cmd("CLIENT", "LOSTPUSH", "ON"), "OK")

    # ---- per class ----

    @classmethod
    def class_redis(cls, **kw):
        """A RedisServer (its arguments) for the class."""
        return started(RedisServer(**kw), cls.addClassCleanup)

    @classmethod
    def class_daemon(cls, redis_server, config="", **kw):
        """A dlockd of the class on the redis backend over redis_server."""
        kw.setdefault("backend", "redis")
        return stopped_later(Daemon(config, redis=redis_server, **kw), cls.addClassCleanup)

    @classmethod
    def class_cluster(cls, **kw):
        """A RedisCluster (RedisCluster's arguments) for the class."""
        return stopped_later(RedisCluster(**kw), cls.addClassCleanup)

    @classmethod
    def class_cluster_daemon(cls, cluster, config="", **kw):
        """A dlockd of the class on the redis-cluster backend over cluster."""
        return stopped_later(Daemon(config, backend="redis-cluster", redis=cluster, **kw),
                             cls.addClassCleanup)

    @classmethod
    def class_nodes(cls, n, **kw):
        """n redis-servers (the nodes of a redlock backend) for the class."""
        return [cls.class_redis(**kw) for _ in range(n)]

    @classmethod
    def class_redlock_daemon(cls, servers, config="", **kw):
        """A dlockd of the class on the redlock backend over servers (a
        list of RedisServers)."""
        return stopped_later(Daemon(config, backend="redlock", redis=list(servers), **kw),
                             cls.addClassCleanup)

    @classmethod
    def class_sentinel_daemons(cls, n, config="", **kw):
        """A SentinelSetup for the class (cls.setup), and n dlockds of the
        class on its master (SentinelDaemon's arguments), started."""
        cls.setup = SentinelSetup().start()
        cls.addClassCleanup(cls.setup.stop_checked)
        daemons = []
        for _ in range(n):
            d = SentinelDaemon(cls.setup, config, **kw)
            cls.addClassCleanup(d.stop_checked)
            daemons.append(d.start())
        return daemons

    # ---- per test ----

    def setUp(self):
        self._conns = []
        self._status_conns = {}
        self.addCleanup(self._close_conns)

    def _close_conns(self):
        for c in self._conns:
            hangup(c)
        self._conns = []
        self._status_conns = {}

    def start_redis(self, **kw):
        """A RedisServer (its arguments), stopped after the test (after its
        daemons)."""
        return started(RedisServer(**kw), self.addCleanup)

    def start_daemon(self, redis_server, config="", start=True, **kw):
        """A dlockd on the redis backend over redis_server, stopped after
        the test (started unless start is false)."""
        kw.setdefault("backend", "redis")
        return stopped_later(Daemon(config, redis=redis_server, **kw), self.addCleanup, start)

    def start_cluster(self, **kw):
        """A RedisCluster (RedisCluster's arguments), stopped after the test
        (after its daemons)."""
        return stopped_later(RedisCluster(**kw), self.addCleanup)

    def start_cluster_daemon(self, cluster, config="", start=True, **kw):
        """A dlockd on the redis-cluster backend over cluster, stopped after
        the test: -b cluster.url() or, with backend_conf, a backend section
        with nodes."""
        return stopped_later(Daemon(config, backend="redis-cluster", redis=cluster, **kw),
                             self.addCleanup, start)

    def start_nodes(self, n, **kw):
        """n redis-servers, the nodes of a redlock backend, stopped after
        the test (after its daemons). Each keeps its port when restarted
        (RedisServer.kill() and restart())."""
        return [self.start_redis(**kw) for _ in range(n)]

    def start_redlock_daemon(self, servers, config="", start=True, **kw):
        """A dlockd on the redlock backend over servers (a list of
        RedisServers), stopped after the test: -b redlock://... or, with
        backend_conf, a backend section with nodes."""
        return stopped_later(Daemon(config, backend="redlock", redis=list(servers), **kw),
                             self.addCleanup, start)

    def conn(self, daemon, **kw):
        """A raw connection to daemon, closed after the test."""
        c = daemon.raw(**kw)
        self._conns.append(c)
        return c

    def redis_conn(self, server):
        """A raw connection to a redis-server, closed after the test."""
        c = server.raw()
        self._conns.append(c)
        return c

    def status(self, daemon, key):
        """STATUS key on daemon as a dict (str -> bytes/int)."""
        c = self._status_conns.get(daemon.port)
        if c is None:
            c = self._status_conns[daemon.port] = self.conn(daemon)
        return pairs(c.cmd("STATUS", key))

    def wait_status(self, daemon, key, what="", timeout=5.0, **expect):
        """Poll STATUS key on daemon until every field in expect has its value."""
        def ok():
            st = self.status(daemon, key)
            return all(st.get(k) == v for k, v in expect.items())
        wait_until(ok, timeout, 0.005, "STATUS %s on %s to show %s %s"
                   % (key, daemon.addr(), expect, what))

    def info(self, daemon):
        return daemon.info()

    def assertGranted(self, reply, msg=None):
        """reply is a LOCK grant [token, fence, ttl]; returns it."""
        self.assertIsInstance(reply, list, msg or "not a grant: %r" % (reply,))
        self.assertEqual(len(reply), 3, reply)
        self.assertRegex(reply[0], TOKEN_RE)
        return reply

    def restartable_pair(self, store):
        """Two daemons on store (start_daemon's), the first on a port that
        a daemon started again later takes again: (that port, the first,
        the second)."""
        port = free_port()
        return port, self.start_daemon(store, port=port), self.start_daemon(store)

    def lock_once(self, daemon, key, fences, retry_for=0.0):
        """A session on daemon locks key (WAIT 5000; while LOCK answers
        -BACKEND it asks again, for up to retry_for s), appends the fence of
        its grant to fences, unlocks and hangs up."""
        c = self.conn(daemon)
        c.settimeout(20)
        deadline = time.monotonic() + retry_for
        while True:
            reply = c.cmd("LOCK", key, "WAIT", 5000)
            if not (isinstance(reply, Err) and reply.code == "BACKEND") or \
                    time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        fences.append(self.assertGranted(reply)[1])
        self.assertEqual(c.cmd("UNLOCK", key), 0)
        c.close()

    def grant_when_up(self, conn, key, limit, *opts):
        """LOCK key WAIT 0 *opts on conn until granted (-BACKEND and null
        answered meanwhile are tried again), within limit s; the grant."""
        def granted():
            reply = conn.cmd("LOCK", key, "WAIT", 0, *opts)
            if isinstance(reply, Err):
                self.assertEqual(reply.code, "BACKEND", reply)
                return False
            if reply is NULL:
                return False
            return self.assertGranted(reply)

        return wait_until(granted, limit, 0.02, "LOCK %s to be granted" % key)

    def assertRefusedWhileDown(self, daemon, conn, bound, what, within):
        """While daemon's backend (what: its name) is down, LOCK with WAIT 0
        in each of its forms on conn is answered -BACKEND within bound s; a
        LOCK with WAIT 600 waits its WAIT through the outage and is
        answered -BACKEND after it; INFO comes to say backend_connected:0
        (within `within` s), STATUS that the backend is disconnected, and
        PING still answers. Returns a connection whose LOCK (no WAIT) waits
        for the backend to come back (assertGrantedLater)."""
        for opts in ((), ("SHARED",), ("LIMIT", 3)):
            t0 = time.monotonic()
            reply = conn.cmd("LOCK", unique_key(), "WAIT", 0, *opts)
            took = time.monotonic() - t0
            self.assertErr(reply, "BACKEND", "LOCK WAIT 0 %s while %s is down: %r"
                           % (opts, what, reply))
            self.assertLess(took, bound, "-BACKEND came %.3f s after LOCK WAIT 0 %s"
                            % (took, opts))
        t0 = time.monotonic()
        reply = conn.cmd("LOCK", unique_key(), "WAIT", 600)
        took = time.monotonic() - t0
        self.assertErr(reply, "BACKEND", "LOCK WAIT 600 while %s is down: %r" % (what, reply))
        self.assertGreater(took, 0.55, "LOCK WAIT 600 answered %.3f s after it was sent, "
                           "before its WAIT" % took)
        self.assertLess(took, 0.6 + bound, "-BACKEND came %.3f s after LOCK WAIT 600" % took)
        waiting = daemon.raw()
        self._conns.append(waiting)
        waiting.send(waiting.encode("LOCK", unique_key()))
        self.assertIsNone(read_within(waiting, 1.0), "LOCK with no WAIT answered while "
                          "%s is down" % what)
        wait_until(lambda: self.info(daemon)["backend_connected"] == "0", within, 0.02,
                   "INFO backend_connected:0")
        self.assertEqual(self.status(daemon, unique_key())["backend"], b"disconnected")
        self.assertEqual(conn.cmd("PING"), "PONG")
        return waiting

    def assertGrantedLater(self, waiting, limit):
        """The LOCK sent on waiting (assertRefusedWhileDown's) is granted
        within limit s."""
        reply = read_within(waiting, limit)
        self.assertIsNotNone(reply, "the LOCK that waited through the outage got no "
                             "answer within %.1f s" % limit)
        self.assertGranted(reply)
        # released now, while the backend is up (not at the end of the
        # test, when its server may be gone first)
        self.assertEqual(waiting.cmd("PING"), "PONG")
        waiting.close()
        self._conns.remove(waiting)

    def assertLocksAgain(self, daemon, conn, limit, reconnects_before):
        """Once daemon's backend is back, LOCK on conn is granted within
        limit s (see grant_when_up); STATUS says the backend is connected,
        INFO backend_connected:1 and more reconnections than
        reconnects_before."""
        key = unique_key()
        self.grant_when_up(conn, key, limit)
        self.assertEqual(self.status(daemon, key)["backend"], b"connected")
        self.assertEqual(conn.cmd("UNLOCK", key), 0)
        info = self.info(daemon)
        self.assertEqual(info["backend_connected"], "1")
        self.assertGreater(int(info["backend_reconnects_total"]), reconnects_before)

    def take_turns(self, daemons, key, fences, rounds=1, retry_for=0.0):
        """rounds times, a session on each of daemons in turn locks key
        once (lock_once; the fences go to fences)."""
        for _ in range(rounds):
            for d in daemons:
                self.lock_once(d, key, fences, retry_for)

    def queue(self, daemon, key, *opts, waiters):
        """A new connection on daemon that sends LOCK key *opts and is then
        queued as the waiters-th waiter of key on that daemon."""
        w = self.conn(daemon)
        w.send(Raw.encode("LOCK", key, *opts))
        self.wait_status(daemon, key, waiters=waiters)
        return w

    def wait_renewal(self, daemon, limit, what, interval=0.02):
        """Until daemon's INFO backend_renewals_total grows (within limit
        s; what is what that means)."""
        renewals = int(self.info(daemon)["backend_renewals_total"])
        wait_until(lambda: int(self.info(daemon)["backend_renewals_total"]) > renewals,
                   limit, interval, what)

    def granted_after_kill(self, daemon, calls, fences, limit):
        """calls (key -> the in_thread read of a waiter for key, on another
        daemon) are not done; daemon is SIGKILLed, and each of them is then
        granted, with a fence above fences[key], within limit s. Returns key
        -> the seconds from the kill to that grant."""
        for k in calls:
            self.assertFalse(calls[k].done.is_set(), "%s granted on B while A holds it" % k)
        t_kill = time.monotonic()
        self.assertEqual(daemon.stop(signal.SIGKILL), -signal.SIGKILL)
        took = {}
        for k, call in calls.items():
            g = self.assertGranted(call.result(limit))
            self.assertGreater(g[1], fences[k])
            took[k] = call.done_at - t_kill
        return took

    def wake_latencies(self, a, b, key, rounds, attempts):
        """rounds times, a session on a holds key and one on b waits for it;
        attempts() counts the calls each backend server ran (a list), so
        that a's UNLOCK comes once b's daemon has tried on every one (each
        count grew). Returns the seconds from each UNLOCK's answer to the
        grant on b."""
        took = []
        for _ in range(rounds):
            holder = self.conn(a)
            self.assertGranted(holder.cmd("LOCK", key))
            before = attempts()
            w = self.queue(b, key, "WAIT", 5000, waiters=1)
            wait_until(lambda: all(n > n0 for n, n0 in zip(attempts(), before)), 3, 0.002,
                       "the waiter's attempt on every backend server")
            self.assertEqual(holder.cmd("UNLOCK", key), 0)
            t0 = time.monotonic()
            g = read_within(w, 5)
            took.append(time.monotonic() - t0)
            self.assertIsNotNone(g, "the waiter on %s was not granted" % b.addr())
            self.assertGranted(g)
            self.assertEqual(w.cmd("UNLOCK", key), 0)
            holder.close()
            w.close()
        return took

    def assertExclusive(self, daemons, key, rounds, timeout, msg=None):
        """Sessions on daemons (one per entry) take turns on key, rounds
        times each, within timeout s (exclusion_across): never two at once,
        every LOCK and UNLOCK answered as it should. Returns the fences in
        the order of the critical sections."""
        errors, fences = exclusion_across(daemons, key, rounds, timeout)
        self.assertEqual(errors, [], msg)
        self.assertEqual(len(fences), rounds * len(daemons), msg)
        return fences

    def assertClockFences(self, fences):
        """fences strictly increase, from Redis's clock (a new key's first
        fence is the time in microseconds)."""
        self.assertTrue(all(x < y for x, y in zip(fences, fences[1:])),
                        "fences not increasing in grant order: %s" % fences)
        self.assertGreater(fences[0], 10 ** 15, "the first fence of a new key: Redis's clock")

    def assertWakesWithin(self, took, bound, what=""):
        """took (the seconds from each release on a daemon A to the grant
        to a waiter on another, B; what says more of them) are reported,
        and each is below bound."""
        report("release on A -> grant on B%s: %s ms"
               % (what, ", ".join("%.1f" % (1000 * t) for t in took)))
        self.assertLess(max(took), bound,
                        "a waiter on B was granted %.0f ms after the release on A"
                        % (1000 * max(took)))

    def shared_and_semaphore_across(self, daemons):
        """Shared locks and a semaphore across daemons (two or more): a
        session on each of the first two holds a key shared, no daemon
        grants it exclusive, and an exclusive waiter on the last is granted
        once both let go, with a greater fence; then two permits of a
        semaphore of two, and a third waiter on the last daemon granted
        when one permit is given back."""
        key = unique_key()
        sa, sb = self.conn(daemons[0]), self.conn(daemons[1])
        ga = self.assertGranted(sa.cmd("LOCK", key, "SHARED", "WAIT", 0))
        gb = self.assertGranted(sb.cmd("LOCK", key, "SHARED", "WAIT", 0))
        self.assertLess(ga[1], gb[1])
        for d in daemons:
            self.assertIs(self.conn(d).cmd("LOCK", key, "WAIT", 0), NULL,
                          "exclusive granted on %s while the key is held shared" % d.addr())
        x = self.queue(daemons[-1], key, "WAIT", 20000, waiters=1)
        self.assertEqual(sa.cmd("UNLOCK", key), 0)
        self.assertIsNone(read_within(x, 0.3), "exclusive granted while one holds it shared")
        self.assertEqual(sb.cmd("UNLOCK", key), 0)
        gx = self.assertGranted(read_within(x, 5), "the exclusive waiter was not granted")
        self.assertGreater(gx[1], gb[1])
        self.assertEqual(x.cmd("UNLOCK", key), 0)
        sem = unique_key("sem")
        p1, p2 = self.conn(daemons[0]), self.conn(daemons[1])
        g1 = self.assertGranted(p1.cmd("LOCK", sem, "LIMIT", 2, "WAIT", 0))
        g2 = self.assertGranted(p2.cmd("LOCK", sem, "LIMIT", 2, "WAIT", 0))
        self.assertLess(g1[1], g2[1])
        for d in daemons:
            self.assertIs(self.conn(d).cmd("LOCK", sem, "LIMIT", 2, "WAIT", 0), NULL,
                          "a third permit of two on %s" % d.addr())
        p3 = self.queue(daemons[-1], sem, "LIMIT", 2, "WAIT", 20000, waiters=1)
        self.assertEqual(p2.cmd("UNLOCK", sem), 0)
        g3 = self.assertGranted(read_within(p3, 5), "the third permit was not granted")
        self.assertGreater(g3[1], g2[1])
        self.assertEqual(p1.cmd("UNLOCK", sem), 0)
        self.assertEqual(p3.cmd("UNLOCK", sem), 0)


class EtcdTestCase(RedisTestCase):
    """RedisTestCase for the etcd backend: etcd servers and dlockd processes
    started by a test (start_etcd, start_daemon) or for its class
    (class_etcd, class_daemon) are stopped after it, daemons first."""

    @classmethod
    def class_etcd(cls, **kw):
        """An EtcdServer (its arguments) for the class."""
        return started(EtcdServer(**kw), cls.addClassCleanup)

    @classmethod
    def class_daemon(cls, etcd_server, config="", **kw):
        """A dlockd of the class on the etcd backend over etcd_server."""
        kw.setdefault("backend", "etcd")
        return stopped_later(Daemon(config, etcd=etcd_server, **kw), cls.addClassCleanup)

    def start_etcd(self, **kw):
        """An EtcdServer (its arguments), stopped after the test (after its
        daemons)."""
        return started(EtcdServer(**kw), self.addCleanup)

    def start_daemon(self, etcd_server, config="", start=True, **kw):
        """A dlockd on the etcd backend over etcd_server, stopped after the
        test (started unless start is false)."""
        kw.setdefault("backend", "etcd")
        return stopped_later(Daemon(config, etcd=etcd_server, **kw), self.addCleanup, start)


class ConfigTestCase(unittest.TestCase):
    """Configurations and command lines checked with dlockd -t (which
    connects to nothing)."""

    def write(self, name, text, beside=None):
        """A new configuration file name (in a directory of its own) with
        text, and beside it the files of beside (a dict name -> text); its
        path."""
        d = new_dir("conf")
        for n, t in dict(beside or {}, **{name: text}).items():
            with open(os.path.join(d, n), "w") as f:
                f.write(t)
        return os.path.join(d, name)

    def check_ok(self, args, what):
        """dlockd -t args says configuration OK."""
        rc, out, err = run_dlockd(["-t"] + args)
        self.assertEqual((rc, out.strip()), (0, "configuration OK"),
                         "%s: %s%s" % (what, out, err))

    def check_refused(self, args, what):
        """dlockd -t args refuses, with a word on its standard error (and
        does not say configuration OK); returns that."""
        rc, out, err = run_dlockd(["-t"] + args)
        self.assertNotEqual(rc, 0, "%s accepted: %s%s" % (what, out, err))
        self.assertNotIn("configuration OK", out + err, what)
        self.assertTrue(err.strip(), "%s: refused without a word" % what)
        return err

    def config_errors(self, path):
        """dlockd -t -c path fails with status 1: (the (line, column) of
        each of its errors (see error_positions), its standard error)."""
        rc, out, err = run_dlockd(["-t", "-c", path])
        self.assertEqual(rc, 1, out + err)
        self.assertNotIn("configuration OK", out + err)
        return self.error_positions(err, path), err

    def error_positions(self, err, path):
        """(line, column) of every line of err (dlockd's errors), each of
        which must be path:line:column: followed by a message."""
        lines = [l for l in err.splitlines() if l.strip()]
        self.assertTrue(lines, "no error")
        out = []
        for line in lines:
            m = re.match(r"^(.*):(\d+):(\d+): \S", line)
            self.assertIsNotNone(m, "not a file:line:column: line: %r" % line)
            self.assertEqual(m.group(1), path)
            out.append((int(m.group(2)), int(m.group(3))))
        return out
