"""The examples of docs/clients.md for Redis client libraries, run as written against a
real dlockd: redis-py, and Node's ioredis and node-redis (installed from npm
into the build directory on first use, then reused). They prove the points the
examples make: a LOCK that waits 4 s for a holder is answered (no read timeout
cuts it short), a connection that breaks releases the lock, is noticed, and is
not silently replaced by a new one (a new session), and a lease lost in Redis
is told by -LOST, and an error reply to LOCK (-BACKEND while Redis is down) or
no connection at all is told with exit status 1 and no stack trace. Also what goes wrong without those
settings: ioredis's default reconnect opens a session without the lock, and a
read timeout shorter than the WAIT drops the wait with the connection. And what
ioredis 6 and node-redis 6 do with a lost push they do not know (drop it), and
that the next command still tells the loss. And the leader-election examples
and their observers: a second candidate waits while the first leads, then leads
with a higher term; a leader whose lock an administrator breaks steps down
(exit 3) while the next candidate leads; a leader whose connection is cut steps
down without connecting again; an observer prints every change, in order. And
the examples that hold two keys at once (LOCKALL): they wait for a key held
elsewhere, then hold both; one key held all through their WAIT leaves them
neither; one key broken by an administrator stops them (exit 3)."""

import json
import os
import re
import select
import shutil
import socket
import subprocess
import threading
import time
import unittest

import redis

from dlocktest.cases import DaemonTestCase, RedisTestCase, hangup
from dlocktest.env import DLOCKD, PYTHON, SLOWDOWN, unique_key
from dlocktest.proc import free_port, in_thread, read_line, reap, spawn, wait_until

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(TOP, "docs", "clients")
CLIENTS_MD = os.path.join(TOP, "docs", "clients.md")
# the npm packages live next to the binaries under test, kept between runs
NODE_DIR = os.path.join(os.path.dirname(DLOCKD), "node")
NPM_TIMEOUT = 300  # s for npm install
HOLD = 4.0  # s another session holds the key while the examples wait (WAIT 5000)

# name, command line before KEY STEPS
EXAMPLE_RUNS = (("lock.py", [PYTHON]),
                ("lock-ioredis.js", ["node"]),
                ("lock-node-redis.js", ["node"]))
# name, command line before KEY VALUE STEPS
ELECT_RUNS = (("elect.py", [PYTHON]),
              ("elect-ioredis.js", ["node"]),
              ("elect-node-redis.js", ["node"]))
# name, command line before KEY COUNT
OBSERVE_RUNS = (("observe.py", [PYTHON]),
                ("observe-ioredis.js", ["node"]),
                ("observe-node-redis.js", ["node"]))
# name, command line before KEY1 KEY2 STEPS
LOCKALL_RUNS = (("lockall.py", [PYTHON]),
                ("lockall-ioredis.js", ["node"]),
                ("lockall-node-redis.js", ["node"]))
# examples in docs/clients.md that the suite cannot run (no Go proxy, no Maven)
NOT_RUN = ("lock.go", "Lock.java", "elect.go", "Elect.java", "lockall.go", "LockAll.java")

_npm_lock = threading.Lock()


def node_modules():
    """Install the npm packages of docs/clients/package.json into the build
    directory unless the same package.json was installed there already.
    Returns the node_modules directory."""
    with _npm_lock:
        want = os.path.join(EXAMPLES, "package.json")
        have = os.path.join(NODE_DIR, "package.json")
        modules = os.path.join(NODE_DIR, "node_modules")
        with open(want, "rb") as f:
            spec = f.read()
        if os.path.isdir(modules) and os.path.exists(have):
            with open(have, "rb") as f:
                if f.read() == spec:
                    return modules
        for tool in ("node", "npm"):
            if shutil.which(tool) is None:
                raise AssertionError("%s is missing (Debian packages nodejs npm)" % tool)
        os.makedirs(NODE_DIR, exist_ok=True)
        if os.path.exists(have):
            os.unlink(have)   # written back only once the install succeeded
        p = subprocess.run(["npm", "install", "--prefix", NODE_DIR, "--no-audit", "--no-fund",
                            "--no-save", "ioredis@" + package_range(spec, "ioredis"),
                            "redis@" + package_range(spec, "redis")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=NPM_TIMEOUT, check=False)
        if p.returncode != 0:
            raise AssertionError("npm install failed:\n" + p.stdout.decode(errors="replace"))
        with open(have, "wb") as f:
            f.write(spec)
        return modules


def package_range(spec, name):
    """The version range package.json (bytes) gives for name."""
    m = re.search(rb'"%s": "([^"]+)"' % re.escape(name.encode()), spec)
    assert m, "package.json names no %s" % name
    return m.group(1).decode()


class Proxy:
    """A TCP relay to port on loopback that counts the connections it got
    and can cut them all, as a network failure would."""

    def __init__(self, port):
        self.port_to = port
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.socks = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            s = socket.create_connection(("127.0.0.1", self.port_to))
            with self.lock:
                self.accepted += 1
                self.socks += [c, s]
            for a, b in ((c, s), (s, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for x in (a, b):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        """Reset every relayed connection (both ends)."""
        with self.lock:
            socks, self.socks = self.socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.sock.close()
        self.cut()


class ExampleMixin:
    """Starting the examples of docs/clients/ against a dlockd port."""

    def start_example(self, name, argv, port, *args):
        """Example name run with argv and args (KEY STEPS, KEY VALUE STEPS,
        KEY COUNT) against port; killed after the test if still running."""
        env = dict(os.environ, DLOCK_PORT=str(port), NODE_PATH=node_modules())
        p = spawn(argv + [os.path.join(EXAMPLES, name)] + [str(a) for a in args], env=env,
                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(self._end, p)
        return p

    @staticmethod
    def _end(p):
        if p.poll() is None:
            p.kill()
        reap(p)
        p.stdout.close()
        p.stderr.close()

    def assertGot(self, p, name, key):
        """The example printed that it got key; returns the fence."""
        line = read_line(p.stdout, 10 * SLOWDOWN)
        m = re.match(r"^got %s fence (\d+)\n$" % re.escape(key), line)
        self.assertIsNotNone(m, "%s: %r %s" % (name, line, p.stderr.read1(4096) if
                                                   p.poll() is not None else ""))
        return int(m.group(1))


class TestClientsPage(unittest.TestCase):

    def test_clients_md_has_each_example(self):
        with open(CLIENTS_MD) as f:
            blocks = re.findall(r"^```[a-z]+\n(.*?)^```$", f.read(), re.M | re.S)
        runs = EXAMPLE_RUNS + ELECT_RUNS + OBSERVE_RUNS + LOCKALL_RUNS
        for name in [n for n, _ in runs] + list(NOT_RUN):
            with open(os.path.join(EXAMPLES, name)) as f:
                code = f.read()
            self.assertIn(code, blocks, "docs/clients.md has no code block equal to "
                          "docs/clients/%s" % name)


class TestExamples(ExampleMixin, DaemonTestCase):

    def test_long_wait_then_done(self):
        holder = self.client()
        keys = {}
        for name, _ in EXAMPLE_RUNS:
            keys[name] = unique_key(name)
            holder.execute_command("LOCK", keys[name])
        node_modules()
        t0 = time.monotonic()
        procs = {name: self.start_example(name, argv, self.daemon.port, keys[name], 2)
                 for name, argv in EXAMPLE_RUNS}
        for name in procs:
            self.wait_status(keys[name], "(%s queued)" % name, timeout=10 * SLOWDOWN, waiters=1)
        time.sleep(max(0.0, HOLD - (time.monotonic() - t0)))
        for name, p in procs.items():
            self.assertIsNone(p.poll(), "%s ended while it waited" % name)
            self.assertEqual(holder.execute_command("UNLOCK", keys[name]), 0)
        for name, p in procs.items():
            self.assertGot(p, name, keys[name])
            self.assertEqual(read_line(p.stdout, 5 * SLOWDOWN), "done\n", name)
            self.assertEqual(reap(p), 0, name)
            self.assertEqual(self.status(keys[name])["mode"], b"free", name)
        self.assertGreaterEqual(time.monotonic() - t0, HOLD)

    def test_not_granted(self):
        holder = self.client()
        key = unique_key()
        holder.execute_command("LOCK", key)
        node_modules()
        for name, argv in EXAMPLE_RUNS:
            p = self.start_example(name, argv, self.daemon.port, key, 1)
            self.assertEqual(read_line(p.stdout, 10 * SLOWDOWN), "not granted\n", name)
            self.assertEqual(reap(p, 10), 75, name)

    def test_no_connection(self):
        # nobody listens on the port: one line, exit 1, no stack trace (the
        # election examples and the observers too)
        node_modules()
        port = free_port()
        runs = [(name, argv, [1]) for name, argv in EXAMPLE_RUNS + OBSERVE_RUNS]
        runs += [(name, argv, ["v", 1]) for name, argv in ELECT_RUNS]
        runs += [(name, argv, ["k2", 1]) for name, argv in LOCKALL_RUNS]
        for name, argv, args in runs:
            p = self.start_example(name, argv, port, unique_key(name), *args)
            line = read_line(p.stdout, 10 * SLOWDOWN)
            self.assertTrue(line.startswith("error: "), (name, line))
            self.assertEqual(reap(p, 10), 1, name)
            self.assertEqual(p.stderr.read(), b"", name)

    def test_broken_connection(self):
        node_modules()
        for name, argv in EXAMPLE_RUNS:
            key = unique_key(name)
            proxy = Proxy(self.daemon.port)
            self.addCleanup(proxy.close)
            p = self.start_example(name, argv, proxy.port, key, 40)
            self.assertGot(p, name, key)
            waiter = in_thread(self.client().execute_command, "LOCK", key, "WAIT", 10000)
            self.wait_status(key, waiters=1)
            proxy.cut()
            # the daemon released the lock: the waiter has it
            self.assertIsInstance(waiter.result(5 * SLOWDOWN), list, name)
            # the example noticed, and stopped without opening a new session
            line = read_line(p.stdout, 5 * SLOWDOWN)
            self.assertTrue(line.startswith("lost %s: " % key), (name, line))
            self.assertEqual(reap(p, 10), 3, name)
            self.assertEqual(proxy.accepted, 1, "%s connected again" % name)


ADMIN_PASSWORD = "examples admin"


class TestLockAllExamples(ExampleMixin, DaemonTestCase):
    """The examples that hold two keys at once (LOCKALL, a PING per step,
    UNLOCKALL), run as written, each on keys of its own: they wait for a key
    held elsewhere and then hold both with the fences dlockd reports, are
    not granted either key when one stays held, and stop when one key is
    lost."""

    CONFIG = "auth:\n  admin_password: \"%s\"\n" % ADMIN_PASSWORD

    def start_behind_holder(self, steps):
        """Each example started on two keys of its own, the second held by
        another session: (that session, {name: (key1, key2)}, {name: process})."""
        holder = self.client()
        keys = {name: (unique_key(name), unique_key(name)) for name, _ in LOCKALL_RUNS}
        for name in keys:
            holder.execute_command("LOCK", keys[name][1])
        node_modules()
        procs = {name: self.start_example(name, argv, self.daemon.port, *keys[name], steps)
                 for name, argv in LOCKALL_RUNS}
        return holder, keys, procs

    def assertGotBoth(self, p, name, keys):
        """The example printed that it holds both keys; returns their fences."""
        line = read_line(p.stdout, 10 * SLOWDOWN)
        m = re.match(r"^got %s fence (\d+), %s fence (\d+)\n$"
                     % tuple(re.escape(k) for k in keys), line)
        self.assertIsNotNone(m, "%s: %r %s" % (name, line, p.stderr.read1(4096) if
                                                   p.poll() is not None else ""))
        return int(m.group(1)), int(m.group(2))

    def test_waits_for_both_then_done(self):
        holder, keys, procs = self.start_behind_holder(2)
        for name, p in procs.items():
            self.wait_status(keys[name][1], "(%s queued)" % name, timeout=10 * SLOWDOWN,
                             waiters=1)
            self.assertIsNone(p.poll(), "%s ended while it waited" % name)
            self.assertEqual(holder.execute_command("UNLOCK", keys[name][1]), 0)
        for name, p in procs.items():
            self.assertGotBoth(p, name, keys[name])
            self.assertEqual(read_line(p.stdout, 5 * SLOWDOWN), "done\n", name)
            self.assertEqual(reap(p), 0, name)
            for key in keys[name]:
                self.assertEqual(self.status(key)["mode"], b"free", name)

    def test_not_granted_holds_neither(self):
        holder, keys, procs = self.start_behind_holder(1)
        for name, p in procs.items():
            self.assertEqual(read_line(p.stdout, 10 * SLOWDOWN), "not granted\n", name)
            self.assertEqual(reap(p, 10), 75, name)
            first, second = (self.status(k) for k in keys[name])
            self.assertEqual((first["mode"], first["waiters"]), (b"free", 0), name)
            self.assertEqual((second["holders"], second["waiters"]), (1, 0), name)

    def test_one_key_lost(self):
        # an administrator breaks one of the two locks: the example's next
        # PING is answered -LOST naming that key, and it stops (3); its
        # session's end releases the other key
        node_modules()
        admin = self.client(username="admin", password=ADMIN_PASSWORD)
        for name, argv in LOCKALL_RUNS:
            keys = (unique_key(name), unique_key(name))
            p = self.start_example(name, argv, self.daemon.port, *keys, 40)
            fences = self.assertGotBoth(p, name, keys)
            # held with the fences it printed, while it does its steps
            for key, fence in zip(keys, fences):
                st = self.status(key)
                self.assertEqual((st["mode"], st["fence"]), (b"exclusive", fence), name)
            self.assertEqual(admin.execute_command("UNLOCK", keys[1], "FORCE"), 1, name)
            line = read_line(p.stdout, 5 * SLOWDOWN)
            self.assertRegex(line, r"^lost: LOST %s %d the lock was broken by an "
                             r"administrator \(session \d+\)\n$"
                             % (re.escape(keys[1]), fences[1]), name)
            self.assertEqual(reap(p, 10), 3, name)
            self.assertEqual(p.stderr.read(), b"", name)
            self.wait_status(keys[0], "(%s released)" % name, mode=b"free")


class TestElectExamples(ExampleMixin, DaemonTestCase):
    """The leader-election examples (elect: CAMPAIGN, a PING per step,
    RESIGN) and the observers (observe: OBSERVE AFTER rev in a loop) of
    docs/clients.md, run as written, each example on a key of its own and
    all at once."""

    CONFIG = "auth:\n  admin_password: \"%s\"\n" % ADMIN_PASSWORD

    def assertLeader(self, p, name, key):
        """The example printed that it leads key; returns the term."""
        line = read_line(p.stdout, 10 * SLOWDOWN)
        m = re.match(r"^leader %s term (\d+)\n$" % re.escape(key), line)
        self.assertIsNotNone(m, "%s: %r %s" % (name, line, p.stderr.read1(4096) if
                                                   p.poll() is not None else ""))
        return int(m.group(1))

    def setUp(self):
        super().setUp()
        self.asker = self.client()   # for LEADER

    def leader(self, key):
        """LEADER key: (value, term, kind)."""
        value, term, _, kind, _ = self.asker.execute_command("LEADER", key)
        return value, term, kind

    @staticmethod
    def silent(p):
        """p runs and has printed nothing (more) so far."""
        return p.poll() is None and not select.select([p.stdout], [], [], 0)[0]

    def test_second_candidate_leads_after_the_first(self):
        node_modules()
        keys = {name: unique_key(name) for name, _ in ELECT_RUNS}
        first, second, terms = {}, {}, {}
        for name, argv in ELECT_RUNS:
            first[name] = self.start_example(name, argv, self.daemon.port, keys[name],
                                             "first", 2)
        for name, argv in ELECT_RUNS:
            terms[name] = self.assertLeader(first[name], name, keys[name])
            second[name] = self.start_example(name, argv, self.daemon.port, keys[name],
                                              "second", 2)
        for name, _ in ELECT_RUNS:
            self.wait_status(keys[name], "(%s standing)" % name, timeout=10 * SLOWDOWN,
                             waiters=1)
            # the second waits in the queue while the first leads
            self.assertTrue(self.silent(second[name]), name)
            self.assertEqual(self.leader(keys[name])[:2], (b"first", terms[name]), name)
        for name, _ in ELECT_RUNS:
            self.assertEqual(read_line(first[name].stdout, 5 * SLOWDOWN), "done\n", name)
            self.assertEqual(reap(first[name]), 0, name)
            term = self.assertLeader(second[name], name, keys[name])
            self.assertGreater(term, terms[name], name)
            self.assertEqual(self.leader(keys[name])[:2], (b"second", term), name)
        for name, _ in ELECT_RUNS:
            self.assertEqual(read_line(second[name].stdout, 5 * SLOWDOWN), "done\n", name)
            self.assertEqual(reap(second[name]), 0, name)
            self.assertEqual(self.leader(keys[name]), (None, 0, b"free"), name)

    def test_observer_prints_each_change_in_order(self):
        node_modules()
        keys = {name: unique_key(name) for name, _ in OBSERVE_RUNS}
        procs, revs = {}, {}
        for name, argv in OBSERVE_RUNS:
            procs[name] = self.start_example(name, argv, self.daemon.port, keys[name], 6)
        for name, p in procs.items():
            line = read_line(p.stdout, 10 * SLOWDOWN)
            m = re.match(r"^no leader rev (\d+)\n$", line)
            self.assertIsNotNone(m, (name, line))
            revs[name] = int(m.group(1))
        # five changes of each key, made faster than the observers ask
        a, b = self.client(), self.client()
        want = {}
        for name, key in keys.items():
            ta = a.execute_command("CAMPAIGN", key, "a")[1]
            proclaimed = a.execute_command("PROCLAIM", key, "a2")
            a.execute_command("RESIGN", key)
            tb = b.execute_command("CAMPAIGN", key, "b")[1]
            want[name] = ([("leader a", ta), ("leader a2", ta), ("no leader", None),
                           ("leader b", tb)], proclaimed)
        hangup(b)   # the leader's connection closes: nobody leads
        for name, p in procs.items():
            changes, proclaimed = want[name]
            got = []
            for _ in range(5):
                line = read_line(p.stdout, 5 * SLOWDOWN)
                m = re.match(r"^(leader \S+|no leader)(?: term (\d+))? rev (\d+)\n$", line)
                self.assertIsNotNone(m, (name, line))
                term = int(m.group(2)) if m.group(2) else None
                got.append((m.group(1), term, int(m.group(3))))
            self.assertEqual([g[:2] for g in got], changes + [("no leader", None)], name)
            seen = [revs[name]] + [g[2] for g in got]
            self.assertEqual(seen, sorted(set(seen)), "%s: revisions not increasing" % name)
            self.assertEqual(got[1][2], proclaimed, name)
            self.assertEqual(reap(p), 0, name)

    def test_broken_leader_steps_down(self):
        # an administrator breaks the leader's lock: the next candidate leads
        # at once, with a higher term, and the old leader's next PING is
        # answered -LOST: it says so and exits 3
        node_modules()
        admin = self.client(username="admin", password=ADMIN_PASSWORD)
        for name, argv in ELECT_RUNS:
            key = unique_key(name)
            leader = self.start_example(name, argv, self.daemon.port, key, "old", 40)
            term = self.assertLeader(leader, name, key)
            standby = self.start_example(name, argv, self.daemon.port, key, "new", 1)
            self.wait_status(key, "(%s standing)" % name, timeout=10 * SLOWDOWN, waiters=1)
            self.assertEqual(admin.execute_command("UNLOCK", key, "FORCE"), 1, name)
            self.assertGreater(self.assertLeader(standby, name, key), term, name)
            line = read_line(leader.stdout, 5 * SLOWDOWN)
            self.assertRegex(line, r"^lost %s: LOST %s %d the lock was broken by an "
                             r"administrator \(session \d+\)\n$"
                             % (re.escape(key), re.escape(key), term), name)
            self.assertEqual(reap(leader, 10), 3, name)
            self.assertEqual(leader.stderr.read(), b"", name)
            self.assertEqual(read_line(standby.stdout, 5 * SLOWDOWN), "done\n", name)
            self.assertEqual(reap(standby, 10), 0, name)

    def test_broken_connection(self):
        # the leader's connection is cut: the daemon ends its term, and the
        # example steps down without connecting again (a new session)
        node_modules()
        for name, argv in ELECT_RUNS:
            key = unique_key(name)
            proxy = Proxy(self.daemon.port)
            self.addCleanup(proxy.close)
            p = self.start_example(name, argv, proxy.port, key, "v", 40)
            self.assertLeader(p, name, key)
            proxy.cut()
            line = read_line(p.stdout, 5 * SLOWDOWN)
            self.assertTrue(line.startswith("lost %s: " % key), (name, line))
            self.assertEqual(reap(p, 10), 3, name)
            self.assertEqual(proxy.accepted, 1, "%s connected again" % name)
            self.assertEqual(self.leader(key), (None, 0, b"free"), name)


# ioredis with its defaults: after a broken connection it connects again by
# itself, and its next command runs in a new session that holds nothing
IOREDIS_DEFAULTS = r"""
const Redis = require('ioredis');
const conn = new Redis({ port: Number(process.env.DLOCK_PORT) });
conn.on('error', () => {});
(async () => {
  await conn.call('LOCK', process.argv[process.argv.length - 1]);
  console.log('locked');
  conn.once('ready', async () => {
    console.log('reconnected ' + JSON.stringify(await conn.call('LOCKS')));
    conn.disconnect();
  });
})();
"""


class TestDefaultsBreak(ExampleMixin, DaemonTestCase):
    """What the examples' settings guard against happens with the defaults."""

    def test_ioredis_reconnects_into_a_new_session(self):
        key = unique_key()
        proxy = Proxy(self.daemon.port)
        self.addCleanup(proxy.close)
        env = dict(os.environ, DLOCK_PORT=str(proxy.port), NODE_PATH=node_modules())
        p = spawn(["node", "-e", IOREDIS_DEFAULTS, key], env=env, stdin=subprocess.DEVNULL,
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(self._end, p)
        self.assertEqual(read_line(p.stdout, 10 * SLOWDOWN), "locked\n")
        proxy.cut()
        # a new connection, a new session, and the lock is not in it
        self.assertEqual(read_line(p.stdout, 10 * SLOWDOWN), "reconnected []\n")
        self.assertEqual(proxy.accepted, 2)
        self.assertEqual(reap(p, 10), 0)

    def test_read_timeout_shorter_than_wait(self):
        key = unique_key()
        holder = self.client()
        holder.execute_command("LOCK", key)
        r = redis.Redis(port=self.daemon.port, single_connection_client=True,
                        socket_timeout=1)
        self.addCleanup(r.connection_pool.disconnect)
        t0 = time.monotonic()
        with self.assertRaises(redis.exceptions.TimeoutError):
            r.execute_command("LOCK", key, "WAIT", 5000)
        self.assertLess(time.monotonic() - t0, 3)
        # the client gave up and closed the connection: the daemon dropped the
        # waiter with the session, so a release grants nobody
        self.wait_status(key, "(the waiter gone)", waiters=0)
        self.assertEqual(holder.execute_command("UNLOCK", key), 0)
        self.assertEqual(self.status(key)["mode"], b"free")


class TestExamplesLost(ExampleMixin, RedisTestCase):
    """The lease is taken from under the examples (the Redis keys deleted,
    the key locked through a second daemon): they get -LOST. And with Redis
    down their LOCK is answered -BACKEND."""

    def test_lost_reply(self):
        fast = {"connect_timeout_ms": 200, "command_timeout_ms": 300}
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf=fast)
        b = self.start_daemon(r, backend_conf=fast)
        rc = r.client()
        self.addCleanup(rc.connection_pool.disconnect)
        node_modules()
        for name, argv in EXAMPLE_RUNS:
            key = unique_key(name)
            p = self.start_example(name, argv, a.port, key, 40)
            fence = self.assertGot(p, name, key)
            leases = [n for n in rc.scan_iter(match="*" + key + "*") if rc.pttl(n) > 0]
            self.assertTrue(leases, "no Redis key with an expiry names %s" % key)
            rc.delete(*leases)
            self.assertIsInstance(self.conn(b).cmd("LOCK", key, "WAIT", 0), list)
            line = read_line(p.stdout, 15 * SLOWDOWN)
            self.assertTrue(line.startswith("lost %s: LOST %s %d " % (key, key, fence)),
                            (name, line))
            self.assertEqual(reap(p, 10), 3, name)

    def test_error_reply_to_lock(self):
        # Redis is down: LOCK is answered -BACKEND, and each example says so
        # on one line and exits 1, without a stack trace
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf={"connect_timeout_ms": 200,
                                               "command_timeout_ms": 300})
        self.assertEqual(r.stop(), 0)
        node_modules()
        for name, argv in EXAMPLE_RUNS:
            key = unique_key(name)
            p = self.start_example(name, argv, a.port, key, 1)
            line = read_line(p.stdout, 10 * SLOWDOWN)
            self.assertTrue(line.startswith("error: BACKEND "), (name, line))
            self.assertEqual(reap(p, 10), 1, name)
            self.assertEqual(p.stdout.read(), b"", name)
            self.assertEqual(p.stderr.read(), b"", name)


# A RESP3 session (the default of ioredis 6 and node-redis 6) that asked for
# lost pushes and installed no handler for them: LOCK, then wait for a line on
# stdin, then PING. argv ends with the library ("ioredis" or "redis") and KEY.
LOSTPUSH_NODE = r"""
const [lib, key] = process.argv.slice(-2);
const port = Number(process.env.DLOCK_PORT);
let conn, call, close;
if (lib === 'ioredis') {
  const Redis = require('ioredis');
  conn = new Redis({ port, lazyConnect: true, retryStrategy: () => null,
                     maxRetriesPerRequest: 0, enableOfflineQueue: false });
  call = (...args) => conn.call(...args);
  close = () => conn.disconnect();
} else {
  const { createClient } = require('redis');
  conn = createClient({ socket: { port, reconnectStrategy: false }, disableOfflineQueue: true });
  call = (...args) => conn.sendCommand(args.map(String));
  close = () => conn.destroy();
}
conn.on('error', () => {});
const lines = require('readline').createInterface({ input: process.stdin });
(async () => {
  await conn.connect();
  console.log('lostpush ' + await call('CLIENT', 'LOSTPUSH', 'ON'));
  const [, fence] = await call('LOCK', key, 'TTL', 1000);
  console.log('locked ' + fence);
  await new Promise((done) => lines.once('line', done));
  try {
    console.log('ping ' + await call('PING'));
  } catch (e) {
    console.log('error ' + e.message);
  }
  lines.close();
  close();
})();
"""
LOSTPUSH_LIBS = ("ioredis", "redis")   # npm names: ioredis 6, node-redis 6


class TestLostPushDropped(ExampleMixin, RedisTestCase):
    """ioredis 6 and node-redis 6 speak RESP3 by default and drop a push of a
    kind they do not know (ioredis: DataHandler.returnPush handles pub/sub
    kinds only; node-redis: the commands queue's push handlers handle pub/sub,
    invalidate and maintenance pushes only). So a session that asked for lost
    pushes without a handler of its own must still hear of the loss from the
    reply to its next command."""

    def test_next_command_tells_the_loss(self):
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf={"connect_timeout_ms": 200,
                                               "command_timeout_ms": 300})
        modules = node_modules()
        for lib in LOSTPUSH_LIBS:
            with open(os.path.join(modules, lib, "package.json")) as f:
                version = json.load(f)["version"]
            self.assertTrue(version.startswith("6."), "%s %s, not 6" % (lib, version))
        env = dict(os.environ, DLOCK_PORT=str(a.port), NODE_PATH=modules)
        procs = {}
        for lib in LOSTPUSH_LIBS:
            key = unique_key(lib)
            p = spawn(["node", "-e", LOSTPUSH_NODE, lib, key], env=env, stdin=subprocess.PIPE,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            self.addCleanup(self._end_piped, p)
            self.assertEqual(read_line(p.stdout, 10 * SLOWDOWN), "lostpush OK\n", lib)
            line = read_line(p.stdout, 10 * SLOWDOWN)
            self.assertTrue(line.startswith("locked "), (lib, line))
            procs[lib] = (p, key, int(line.split()[1]))
        # Redis stops answering: no renewal succeeds, and the daemon declares
        # both locks lost (TTL 1000, margin 10 %) and pushes `lost`
        before = int(a.info()["lost_total"])
        r.pause()
        try:
            wait_until(lambda: int(a.info()["lost_total"]) >= before + len(procs),
                       5 * SLOWDOWN, 0.05, "both locks lost while Redis is stopped")
        finally:
            r.resume()
        for lib, (p, key, fence) in procs.items():
            p.stdin.write(b"go\n")
            p.stdin.flush()
            line = read_line(p.stdout, 10 * SLOWDOWN)
            self.assertTrue(line.startswith("error LOST %s %d " % (key, fence)), (lib, line))
            self.assertEqual(reap(p, 10), 0, lib)

    def _end_piped(self, p):
        p.stdin.close()
        self._end(p)


if __name__ == "__main__":
    unittest.main()
