"""Seeing and breaking locks: STATUS key FULL, CLIENT LIST / INFO / KILL,
admin rights (AUTH admin, the Unix socket as root or in auth.admin_group)
and UNLOCK key FORCE, on the memory backend and on backends that daemons
share (redis, redlock, redis-cluster, etcd), where it breaks the holders of
every daemon; the CLI's dlock status --verbose."""

import grp
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import unittest

from dlocktest.cases import (DaemonTestCase, EtcdTestCase, RedisTestCase, check_held,
                             stopped_later)
from dlocktest.daemon import Daemon
from dlocktest.env import DLOCK, PYTHON, unique_key
from dlocktest.proc import wait_until
from dlocktest.resp import Err, Null, Push, Raw, pairs, read_within

ADMIN_PASSWORD = "admin pass"
NOBODY = 65534

# connects to a Unix socket as whoever runs it, sends one command, prints
# the reply's first line
UNIX_CLIENT = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(sys.argv[1])
args = [a.encode() for a in sys.argv[2:]]
s.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
buf = b""
while b"\r\n" not in buf or (buf[:1] == b"$" and
                             len(buf) < buf.index(b"\r\n") + 4 + int(buf[1:buf.index(b"\r\n")])):
    buf += s.recv(4096)
line, _, rest = buf.partition(b"\r\n")
print((rest[:-2] if line[:1] == b"$" else line).decode())
"""


def admin_group():
    """A group of the system other than root's and nobody's."""
    for g in grp.getgrall():
        if g.gr_gid not in (0, NOBODY) and g.gr_name != "nogroup":
            return g
    raise AssertionError("no group to test auth.admin_group with")


ADMIN_GROUP = admin_group()


def as_map(reply):
    """A map reply (RESP3 dict or RESP2 flat list) as a dict with str keys,
    maps inside the holders and waiters lists too."""
    d = pairs(reply)
    for k in ("holders", "waiters"):
        if k in d:
            d[k] = [pairs(e) for e in d[k]]
    return d


class OpsCase:
    """Helpers shared by the memory and the redis tests."""

    def queue(self, conn, key, *opts, waiters, daemon=None):
        """conn sends LOCK key *opts and is then the waiters-th waiter."""
        conn.send(Raw.encode("LOCK", key, *opts))
        self.wait_for(lambda: len(self.full(key, daemon)["waiters"]) == waiters,
                      "%d waiters on %s" % (waiters, key))

    def wait_for(self, pred, what):
        wait_until(pred, 5.0, 0.005, what)

    def assertErr(self, reply, code, msg=None):
        self.assertIsInstance(reply, Err, msg or reply)
        self.assertEqual(reply.code, code, msg or reply)

    def assertLostReply(self, reply, key, fence, admin_id):
        self.assertIsInstance(reply, Err, reply)
        self.assertEqual(reply.code, "LOST", reply)
        self.assertEqual(reply, "LOST %s %d the lock was broken by an administrator "
                         "(session %d)" % (key, fence, admin_id))


class TestOps(OpsCase, DaemonTestCase):
    """The memory backend; one daemon with an admin password, an admin group
    and a Unix socket others may connect to."""

    @classmethod
    def setUpClass(cls):
        # a socket that a process running as nobody can reach
        cls.sockdir = tempfile.mkdtemp(prefix="dlockd-ops.")
        cls.addClassCleanup(shutil.rmtree, cls.sockdir, True)
        os.chmod(cls.sockdir, 0o755)
        cls.open_sock = os.path.join(cls.sockdir, "open.sock")
        cls.CONFIG = ("auth:\n  admin_password: \"%s\"\n  admin_group: %s\n"
                      "unix_socket_mode: \"0666\"\n" % (ADMIN_PASSWORD, ADMIN_GROUP.gr_name))
        cls.daemon = Daemon(cls.CONFIG, extra_args=["-l", "unix:" + cls.open_sock]).start()

    def full(self, key, daemon=None):
        if getattr(self, "_full_conn", None) is None:
            self._full_conn = self.raw()
        return as_map(self._full_conn.cmd("STATUS", key, "FULL"))

    def admin(self):
        a = self.raw()
        self.assertEqual(a.cmd("AUTH", "admin", ADMIN_PASSWORD), "OK")
        return a

    def client_id(self, conn):
        return conn.cmd("CLIENT", "ID")

    # ---- STATUS FULL ----

    def test_status_full_holders_and_waiters(self):
        key = unique_key()
        a, b = self.client(), self.client()
        a.client_setname("alpha")
        b.client_setname("beta")
        fa = a.execute_command("LOCK", key, "SHARED", "TTL", 20000)[1]
        fb = b.execute_command("LOCK", key, "SHARED")[1]
        w1, w2 = self.raw(), self.raw()
        id1, id2 = self.client_id(w1), self.client_id(w2)
        self.assertEqual(w1.cmd("CLIENT", "SETNAME", "first"), "OK")
        self.queue(w1, key, waiters=1)
        self.queue(w2, key, "SHARED", "WAIT", 60000, waiters=2)
        # w2 is behind the exclusive w1 although shared like the holders
        raw = self.raw().cmd("STATUS", key, "FULL")
        names = [raw[i] for i in range(0, len(raw), 2)]
        self.assertEqual(names, [b"mode", b"holders", b"waiters", b"fence", b"ttl_ms",
                                 b"limit", b"backend", b"holders", b"waiters"])
        hs, ws = [pairs(e) for e in raw[15]], [pairs(e) for e in raw[17]]
        self.assertEqual(raw[1], b"shared")
        self.assertEqual(raw[3], 2)
        self.assertEqual(raw[5], 2)
        self.assertEqual(len(hs), 2)
        self.assertEqual(list(hs[0]), ["session", "name", "addr", "mode", "fence", "count",
                                       "held_ms", "lease_ms", "detached", "suspended",
                                       "daemon", "host", "daemon_addr"])
        info = self.info()
        self.assertEqual(hs[0]["daemon"], info["daemon_id"].encode())
        self.assertRegex(info["daemon_id"], r"^[0-9a-f]{16}$")
        self.assertEqual(hs[0]["host"], socket.gethostname().encode())
        self.assertEqual(hs[0]["daemon_addr"], self.daemon.addr().encode())
        self.assertEqual(hs[0]["session"], a.client_id())
        self.assertEqual(hs[0]["name"], b"alpha")
        addr_a = "%s:%d" % a.connection._sock.getsockname()
        self.assertEqual(hs[0]["addr"], addr_a.encode())
        self.assertEqual(hs[0]["mode"], b"shared")
        self.assertEqual(hs[0]["fence"], fa)
        self.assertEqual(hs[0]["count"], 1)
        self.assertGreaterEqual(hs[0]["held_ms"], 0)
        self.assertEqual(hs[0]["lease_ms"], 20000)  # a session lease in this process
        self.assertEqual(hs[0]["detached"], 0)
        self.assertEqual(hs[0]["suspended"], 0)
        self.assertEqual(hs[1]["session"], b.client_id())
        self.assertEqual(hs[1]["name"], b"beta")
        self.assertEqual(hs[1]["fence"], fb)
        self.assertEqual(len(ws), 2)
        self.assertEqual(list(ws[0]), ["session", "name", "addr", "mode", "waited_ms",
                                       "wait_ms", "detach"])
        self.assertEqual(ws[0]["session"], id1)
        self.assertEqual(ws[0]["name"], b"first")
        self.assertEqual(ws[0]["mode"], b"exclusive")
        self.assertEqual(ws[0]["wait_ms"], -1)
        self.assertEqual(ws[0]["detach"], 0)
        self.assertEqual(ws[1]["session"], id2)
        self.assertEqual(ws[1]["name"], b"")
        self.assertEqual(ws[1]["mode"], b"shared")
        self.assertGreater(ws[1]["wait_ms"], 50000)
        self.assertLessEqual(ws[1]["wait_ms"], 60000)
        self.assertGreaterEqual(ws[1]["waited_ms"], 0)
        # plain STATUS is what it always was
        self.assertEqual(len(self.raw().cmd("STATUS", key)), 14)

    def test_status_full_resp3_detached_and_errors(self):
        key = unique_key()
        c = self.raw()
        c.cmd("HELLO", "3")
        d = self.raw()
        tok, fence, _ = d.cmd("LOCK", key, "TTL", 30000, "DETACH")
        d.close()
        self.wait_for(lambda: self.full(key)["holders"][0]["session"] == 0,
                      "the session that took it to go")
        st = c.cmd("STATUS", key, "FULL")
        self.assertIsInstance(st, dict)
        h = st[b"holders"]
        self.assertEqual(len(h), 1)
        self.assertEqual(h[0][b"session"], 0)
        self.assertEqual(h[0][b"name"], b"")
        self.assertEqual(h[0][b"addr"], b"")
        self.assertEqual(h[0][b"detached"], 1)
        self.assertEqual(h[0][b"fence"], fence)
        self.assertLessEqual(h[0][b"lease_ms"], 30000)
        self.assertEqual(st[b"waiters"], [])
        free = c.cmd("STATUS", unique_key(), "FULL")
        self.assertEqual((free[b"mode"], free[b"holders"], free[b"waiters"]),
                         (b"free", [], []))
        r = c.cmd("STATUS", key, "FOO")
        self.assertIsInstance(r, Err)
        self.assertTrue(r.startswith("ERR syntax error"), r)
        self.assertEqual(c.cmd("UNLOCK", key, tok), 0)

    # ---- CLIENT LIST / INFO ----

    def test_client_list_and_info_parse(self):
        key = unique_key("a key")
        c = self.client()
        c.client_setname("lister")
        c.execute_command("CLIENT", "SETINFO", "LIB-NAME", "mylib")
        c.execute_command("CLIENT", "SETINFO", "lib-ver", "1.2")
        c.execute_command("LOCK", key)
        w = self.raw()
        wid = self.client_id(w)
        self.queue(w, key, waiters=1)
        clients = c.client_list()
        me = [e for e in clients if e["id"] == str(c.client_id())]
        self.assertEqual(len(me), 1, clients)
        me = me[0]
        for field in ("id", "addr", "laddr", "name", "age", "idle", "locks", "waiting",
                      "lib-name", "lib-ver", "resp", "admin"):
            self.assertIn(field, me)
        self.assertEqual(me["name"], "lister")
        self.assertEqual(me["addr"], "%s:%d" % c.connection._sock.getsockname())
        self.assertEqual(me["laddr"], self.daemon.addr())
        self.assertEqual(me["locks"], "1")
        self.assertEqual(me["waiting"], "")
        self.assertEqual(me["lib-name"], "mylib")
        self.assertEqual(me["lib-ver"], "1.2")
        self.assertEqual(me["resp"], "2")
        self.assertEqual(me["admin"], "0")
        other = [e for e in clients if e["id"] == str(wid)][0]
        # the key as -LOST writes it: one word
        self.assertEqual(other["waiting"], key.replace(" ", "\\x20"))
        self.assertEqual(other["locks"], "0")
        info = c.client_info()
        self.assertEqual(info["id"], c.client_id())
        self.assertEqual(info["name"], "lister")
        self.assertEqual(info["lib-name"], "mylib")
        text = self.raw().cmd("CLIENT", "LIST")
        self.assertTrue(text.endswith(b"\n"))
        self.assertEqual(len(text.decode().splitlines()), len(clients) + 1)
        # RESP3: a verbatim string of format txt
        r3 = self.raw()
        r3.cmd("HELLO", "3")
        r3.send(Raw.encode("CLIENT", "INFO"))
        r3.read()
        self.assertTrue(r3.last_raw.startswith(b"="), r3.last_raw)
        self.assertIn(b"txt:id=", r3.last_raw)
        # the unix socket: root is an admin there
        u = self.raw(unix=True)
        line = u.cmd("CLIENT", "INFO").decode()
        self.assertIn(" admin=1", line)
        self.assertIn(" laddr=%s " % self.daemon.sock, line)

    def test_client_error_lists_subcommands(self):
        r = self.raw().cmd("CLIENT", "NOPE")
        self.assertIsInstance(r, Err)
        for sub in ("ID", "GETNAME", "SETNAME", "SETINFO", "LIST", "INFO", "KILL",
                    "LOSTPUSH"):
            self.assertIn(sub, r)

    # ---- CLIENT KILL ----

    def test_client_kill(self):
        key = unique_key()
        h, w, other = self.raw(), self.raw(), self.raw()
        fence = h.cmd("LOCK", key)[1]
        self.queue(w, key, waiters=1)
        hid = self.client_id(h)
        r = other.cmd("CLIENT", "KILL", "ID", hid)
        self.assertIsInstance(r, Err)
        self.assertEqual(r.code, "NOPERM", r)
        self.assertEqual(h.cmd("PING"), "PONG")  # still there
        self.assertEqual(self.admin().cmd("CLIENT", "KILL", "ID", hid), 1)
        self.assertTrue(h.is_closed())
        g = read_within(w, 5)
        self.assertGreater(g[1], fence)
        self.assertEqual(self.admin().cmd("CLIENT", "KILL", "ID", 999999999), 0)
        # a waiter killed leaves the queue
        w2 = self.raw()
        w2id = self.client_id(w2)
        self.queue(w2, key, waiters=1)
        self.assertEqual(self.admin().cmd("CLIENT", "KILL", "ID", w2id), 1)
        self.assertTrue(w2.is_closed())
        self.assertEqual(self.full(key)["waiters"], [])
        self.assertEqual(w.cmd("UNLOCK", key), 0)
        bad = self.raw().cmd("CLIENT", "KILL", "ID", "x")
        self.assertIsInstance(bad, Err)
        # a session may always kill itself
        me = self.raw()
        self.assertEqual(me.cmd("CLIENT", "KILL", "ID", self.client_id(me)), 1)
        self.assertTrue(me.is_closed())
        # by address (the caller skipped)
        t = self.raw()
        addr = "%s:%d" % t.s.getsockname()
        self.assertErr(self.raw().cmd("CLIENT", "KILL", "ADDR", addr), "NOPERM")
        self.assertEqual(self.admin().cmd("CLIENT", "KILL", "ADDR", addr), 1)
        self.assertTrue(t.is_closed())

    # ---- AUTH admin ----

    def test_auth_admin(self):
        c = self.raw()
        self.assertErr(c.cmd("AUTH", "admin", "wrong"), "WRONGPASS")
        self.assertIn(" admin=0", c.cmd("CLIENT", "INFO").decode())
        self.assertErr(c.cmd("UNLOCK", unique_key(), "FORCE"), "NOPERM")
        self.assertEqual(c.cmd("AUTH", "admin", ADMIN_PASSWORD), "OK")
        self.assertIn(" admin=1", c.cmd("CLIENT", "INFO").decode())
        self.assertEqual(c.cmd("UNLOCK", unique_key(), "FORCE"), 0)
        h = self.raw()
        hello = h.cmd("HELLO", "3", "AUTH", "admin", ADMIN_PASSWORD)
        self.assertEqual(hello[b"proto"], 3)
        self.assertIn(b" admin=1", h.cmd("CLIENT", "INFO"))
        # redis-py's two-argument AUTH
        rp = self.client(username="admin", password=ADMIN_PASSWORD)
        self.assertEqual(rp.client_info()["admin"].strip(), "1")  # the line ends in "\n"

    # ---- UNLOCK FORCE ----

    def test_unlock_force(self):
        key = unique_key()
        h, w = self.raw(), self.raw()
        fence = h.cmd("LOCK", key)[1]
        self.queue(w, key, waiters=1)
        self.assertErr(self.raw().cmd("UNLOCK", key, "FORCE"), "NOPERM")
        a = self.admin()
        aid = self.client_id(a)
        self.assertEqual(a.cmd("UNLOCK", key, "FORCE"), 1)
        g = read_within(w, 5)
        self.assertGreater(g[1], fence)
        self.assertEqual(a.cmd("VALIDATE", key, fence), 0)
        # the holder's next command is told, then UNLOCK says NOTHELD
        self.assertLostReply(h.cmd("VALIDATE", key, fence), key, fence, aid)
        self.assertErr(h.cmd("UNLOCK", key), "NOTHELD")
        self.assertIn("UNLOCK FORCE of key '%s': 1 holding broken, fences %d"
                      % (key, fence), self.daemon.log())
        self.assertEqual(w.cmd("UNLOCK", key), 0)
        self.assertEqual(a.cmd("UNLOCK", key, "FORCE"), 0)

    def test_unlock_force_push_and_extend(self):
        key = unique_key()
        h, h2 = self.raw(), self.raw()
        h.cmd("HELLO", "3")
        self.assertEqual(h.cmd("CLIENT", "LOSTPUSH", "ON"), "OK")
        f1 = h.cmd("LOCK", key, "SHARED")[1]
        f2 = h2.cmd("LOCK", key, "SHARED")[1]
        tok, f3, _ = self.raw().cmd("LOCK", key, "SHARED", "TTL", 60000, "DETACH")
        a = self.raw(unix=True)  # root on the Unix socket
        aid = self.client_id(a)
        self.assertEqual(a.cmd("UNLOCK", key, "FORCE"), 3)
        push = read_within(h, 5)
        self.assertIsInstance(push, Push)
        self.assertEqual(push[:3], [b"lost", key.encode(), f1])
        self.assertIn(b"administrator (session %d)" % aid, push[3])
        r = h2.cmd("EXTEND", key, 5000)
        self.assertLostReply(r, key, f2, aid)
        self.assertErr(self.raw().cmd("UNLOCK", key, tok), "NOTHELD")
        self.assertEqual(self.full(key)["holders"], [])
        self.assertIn("fences %d, %d, %d (detached)" % (f1, f2, f3), self.daemon.log())

    def run_as(self, uid, gid, groups, *args):
        """Run the Unix-socket client as uid/gid with these supplementary
        groups; the first line of the reply."""
        argv = ["setpriv", "--reuid=%d" % uid, "--regid=%d" % gid]
        argv += ["--groups=" + ",".join(str(g) for g in groups)] if groups else ["--clear-groups"]
        argv += [PYTHON, "-c", UNIX_CLIENT, self.open_sock] + [str(a) for a in args]
        p = subprocess.run(argv, capture_output=True, timeout=20, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout.strip()

    def test_unlock_force_admin_group(self):
        g = ADMIN_GROUP.gr_gid
        for how, gid, groups in (("supplementary", NOBODY, [g]), ("primary", g, [])):
            key = unique_key()
            h = self.raw()
            fence = h.cmd("LOCK", key)[1]
            self.assertEqual(self.run_as(NOBODY, gid, groups, "UNLOCK", key, "FORCE"), ":1",
                             how)
            r = h.cmd("UNLOCK", key)
            self.assertErr(r, "LOST")
            self.assertIn(" %d " % fence, r)
        key = unique_key()
        h = self.raw()
        h.cmd("LOCK", key)
        out = self.run_as(NOBODY, NOBODY, [], "UNLOCK", key, "FORCE")
        self.assertTrue(out.startswith("-NOPERM "), out)
        self.assertEqual(h.cmd("UNLOCK", key), 0)
        out = self.run_as(NOBODY, NOBODY, [], "CLIENT", "INFO")
        self.assertIn(" admin=0", out)

    # ---- the CLI ----

    def test_held_pages_the_lock_table(self):
        check_held(self, self.raw, self.raw, n=300)

    def test_dlock_status_verbose(self):
        key = unique_key()
        h = self.client()
        h.client_setname("worker-1")
        fence = h.execute_command("LOCK", key, "TTL", 30000)[1]
        w = self.raw()
        wid = self.client_id(w)
        self.assertEqual(w.cmd("CLIENT", "SETNAME", "worker\x1b-2"), "OK")
        self.queue(w, key, "WAIT", 60000, waiters=1)
        p = subprocess.run([DLOCK, "-a", self.daemon.addr(), "status", "--verbose", key],
                           capture_output=True, text=True, timeout=20)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout
        self.assertIn("mode: exclusive", out)
        lines = out.splitlines()
        hi = lines.index("holders, through any daemon:")
        wi = lines.index("waiters on this dlockd, in queue order:")
        self.assertIn("SESSION", lines[hi + 1])
        self.assertIn("FENCE", lines[hi + 1])
        row = lines[hi + 2].split()
        self.assertEqual(row[0], str(h.client_id()))
        self.assertEqual(row[1], "worker-1")
        self.assertEqual(row[3], "exclusive")
        self.assertEqual(row[4], str(fence))
        self.assertIn("DAEMON", lines[hi + 1])
        self.assertEqual(row[-1], "%s@%s" % (self.daemon.addr(), socket.gethostname()))
        self.assertIn("WAITED", lines[wi + 1])
        row = lines[wi + 2].split()
        self.assertEqual(row[-1], "no")
        self.assertTrue(row[-2].endswith("ms"), row)
        self.assertEqual(row[0], str(wid))
        self.assertEqual(row[1], "worker?-2")  # no control characters to the terminal
        self.assertEqual(row[3], "exclusive")
        # without --verbose: no tables
        p = subprocess.run([DLOCK, "-a", self.daemon.addr(), "status", key],
                           capture_output=True, text=True, timeout=20)
        self.assertNotIn("SESSION", p.stdout)


class TestOpsNoAdmin(DaemonTestCase):
    """A daemon without any admin setting: nobody on TCP is an admin."""

    def test_no_admin_password(self):
        c = self.raw()
        # admin is then a user like any unknown one
        self.assertEqual(c.cmd("AUTH", "admin", "x"), Err("WRONGPASS invalid password"))
        self.assertEqual(c.cmd("AUTH", "admin", ""), Err("WRONGPASS invalid password"))
        r = c.cmd("UNLOCK", unique_key(), "FORCE")
        self.assertEqual(r.code, "NOPERM", r)
        # the connection stays usable
        self.assertEqual(c.cmd("PING"), "PONG")


class TestOpsConfig(unittest.TestCase):
    """auth.admin_group is resolved when the configuration is loaded."""

    def check(self, text):
        d = Daemon(text)
        with open(d.conf, "w") as f:
            f.write(text)
        return subprocess.run(d.argv(wrapped=False)[:3] + ["-t"], capture_output=True,
                              text=True, timeout=20)

    def test_unknown_group(self):
        p = self.check("auth:\n  admin_group: no-such-group-here\n")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("dlockd.yaml:2:16: 'auth.admin_group': unknown group "
                      "'no-such-group-here'", p.stderr)

    def test_group_by_name_and_number(self):
        for v in (ADMIN_GROUP.gr_name, str(ADMIN_GROUP.gr_gid)):
            p = self.check("auth:\n  admin_group: %s\n  admin_password: x\n" % v)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("configuration OK", p.stdout + p.stderr)


ADMIN_CONF = "auth:\n  admin_password: \"%s\"\n" % ADMIN_PASSWORD


class SharedBackendOps(OpsCase):
    """UNLOCK FORCE on a shared backend, two daemons a and b on one server:
    the lease there is released or handed on."""

    def full(self, key, daemon):
        return as_map(self.conn(daemon).cmd("STATUS", key, "FULL"))

    def admin(self, daemon):
        a = self.conn(daemon)
        self.assertEqual(a.cmd("AUTH", "admin", ADMIN_PASSWORD), "OK")
        return a

    def test_force_hands_on_to_local_waiter(self):
        key = unique_key()
        h, w = self.conn(self.a), self.conn(self.a)
        fence = self.assertGranted(h.cmd("LOCK", key))[1]
        self.queue(w, key, waiters=1, daemon=self.a)
        self.assertErr(self.conn(self.a).cmd("UNLOCK", key, "FORCE"), "NOPERM")
        a = self.admin(self.a)
        self.assertEqual(a.cmd("UNLOCK", key, "FORCE"), 1)
        g = self.assertGranted(read_within(w, 5))
        self.assertGreater(g[1], fence)
        self.assertLostReply(h.cmd("UNLOCK", key), key, fence, a.cmd("CLIENT", "ID"))
        # the other daemon sees the key held by the new holder
        self.assertIsInstance(self.conn(self.b).cmd("LOCK", key, "WAIT", 0), Null)
        self.assertEqual(w.cmd("UNLOCK", key), 0)

    def test_force_releases_the_lease(self):
        """UNLOCK FORCE on the holder's own daemon releases the lease in
        the backend at once, not after its TTL."""
        key = unique_key()
        h = self.conn(self.a)
        fence = self.assertGranted(h.cmd("LOCK", key, "TTL", 60000))[1]
        self.assertIsInstance(self.conn(self.b).cmd("LOCK", key, "WAIT", 0), Null)
        # B lists A's holder, read from the backend
        hs = [as_map(x) for x in self.full(key, self.b)["holders"]]
        self.assertEqual([x["daemon"] for x in hs], [self.a.info()["daemon_id"].encode()])
        # redlock: the largest fence a node recorded, maybe above the grant's
        self.assertLessEqual(fence, hs[0]["fence"])
        self.assertEqual(self.admin(self.a).cmd("UNLOCK", key, "FORCE"), 1)
        g = self.assertGranted(self.conn(self.b).cmd("LOCK", key, "WAIT", 5000))
        self.assertGreater(g[1], fence)
        self.assertEqual(h.cmd("VALIDATE", key, fence).code, "LOST")


class ForceFromAnywhere:
    """UNLOCK FORCE through a daemon other than the holder's (a mixin for a
    SharedBackendOps class whose backend breaks leases across daemons):
    the lease is broken in the backend, the holder's daemon tells its
    holder at once (long before its renewal) with who broke it, releases
    the lease, and only then can another take the key."""

    def test_force_through_another_daemon(self):
        key = unique_key()
        h = self.conn(self.a)
        self.hello3(h)
        # a renewal every 20 s: told at once means the message woke it
        fence = self.assertGranted(h.cmd("LOCK", key, "TTL", 60000))[1]
        w = self.conn(self.b)
        w.settimeout(30)
        w.send(Raw.encode("LOCK", key, "WAIT", 20000))
        self.wait_status(self.b, key, waiters=1)
        adm = self.admin(self.b)
        adm_id = adm.cmd("CLIENT", "ID")
        self.assertEqual(adm.cmd("UNLOCK", key, "FORCE"), 1)
        p = read_within(h, 5)
        self.assertIsInstance(p, Push, "no lost push within 5 s of the force")
        self.assertEqual(p[:3], [b"lost", key.encode(), fence])
        why = p[3].decode()
        self.assertIn("forced by UNLOCK FORCE of session %d" % adm_id, why)
        self.assertIn(self.b.info()["daemon_id"], why)
        # the waiter on B is granted: the lease was released, not left to
        # its 60 s TTL
        g = self.assertGranted(read_within(w, 5))
        self.assertGreater(g[1], fence)
        self.assertEqual(h.cmd("VALIDATE", key, fence).code, "LOST")
        # an audit line on both daemons
        wait_until(lambda: "UNLOCK FORCE through another daemon: key '%s' fence %d" %
                   (key, fence) in self.a.log(20000), 5, 0.05, "the audit line on A")
        self.assertIn("UNLOCK FORCE of key '%s': 1 lease of other daemons broken" % key,
                      self.b.log(20000))
        self.assertEqual(w.cmd("UNLOCK", key), 0)

    def test_force_breaks_every_daemons_holders(self):
        """Shared holders on both daemons: each broken, the answer counts
        them all; a second FORCE finds nothing."""
        key = unique_key()
        ha, hb = self.conn(self.a), self.conn(self.b)
        fa = self.assertGranted(ha.cmd("LOCK", key, "SHARED", "TTL", 60000))[1]
        fb = self.assertGranted(hb.cmd("LOCK", key, "SHARED", "TTL", 60000))[1]
        self.assertEqual(self.admin(self.b).cmd("UNLOCK", key, "FORCE"), 2)
        wait_until(lambda: getattr(ha.cmd("VALIDATE", key, fa), "code", None) == "LOST",
                   5, 0.05, "A's holder told")
        self.assertEqual(hb.cmd("VALIDATE", key, fb).code, "LOST")
        g = self.assertGranted(self.conn(self.a).cmd("LOCK", key, "WAIT", 5000))
        self.assertGreater(g[1], max(fa, fb))
        self.assertEqual(self.admin(self.a).cmd("UNLOCK", key, "FORCE"), 1)
        self.assertEqual(self.admin(self.b).cmd("UNLOCK", key, "FORCE"), 0)

    def test_broken_lease_blocks_until_its_daemon_let_go(self):
        """A's daemon stopped (SIGSTOP) when the force comes: nobody is
        granted the key while A has not told its holder, until the lease
        ends; then the key is free."""
        key = unique_key()
        a = self.another_daemon()
        h = self.conn(a)
        fence = self.assertGranted(h.cmd("LOCK", key, "TTL", 6000))[1]
        os.kill(a.pid, signal.SIGSTOP)
        try:
            self.assertEqual(self.admin(self.b).cmd("UNLOCK", key, "FORCE"), 1)
            self.assertIsInstance(self.conn(self.b).cmd("LOCK", key, "WAIT", 0), Null)
        finally:
            os.kill(a.pid, signal.SIGCONT)
        # A wakes: told, released
        wait_until(lambda: getattr(h.cmd("VALIDATE", key, fence), "code", None) == "LOST",
                   5, 0.05, "A's holder told")
        g = self.assertGranted(self.conn(self.b).cmd("LOCK", key, "WAIT", 5000))
        self.assertGreater(g[1], fence)


class TestOpsRedis(ForceFromAnywhere, SharedBackendOps, RedisTestCase):
    """The redis backend."""

    @classmethod
    def setUpClass(cls):
        cls.redis = cls.class_redis()
        cls.a = cls.class_daemon(cls.redis, ADMIN_CONF)
        cls.b = cls.class_daemon(cls.redis, ADMIN_CONF)

    def another_daemon(self):
        return self.start_daemon(self.redis, ADMIN_CONF)


class TestOpsRedlock(ForceFromAnywhere, SharedBackendOps, RedisTestCase):
    """The redlock backend, three nodes."""

    @classmethod
    def setUpClass(cls):
        cls.nodes = cls.class_nodes(3)
        cls.a = cls.class_redlock_daemon(cls.nodes, ADMIN_CONF)
        cls.b = cls.class_redlock_daemon(cls.nodes, ADMIN_CONF)

    def another_daemon(self):
        return stopped_later(Daemon(ADMIN_CONF, backend="redlock", redis=list(self.nodes)),
                             self.addCleanup)


class TestOpsCluster(ForceFromAnywhere, SharedBackendOps, RedisTestCase):
    """The redis-cluster backend."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = cls.class_cluster()
        cls.a = cls.class_cluster_daemon(cls.cluster, ADMIN_CONF)
        cls.b = cls.class_cluster_daemon(cls.cluster, ADMIN_CONF)

    def another_daemon(self):
        return stopped_later(Daemon(ADMIN_CONF, backend="redis-cluster", redis=self.cluster),
                             self.addCleanup)


class TestOpsEtcd(ForceFromAnywhere, SharedBackendOps, EtcdTestCase):
    """The etcd backend."""

    @classmethod
    def setUpClass(cls):
        cls.etcd = cls.class_etcd()
        cls.a = cls.class_daemon(cls.etcd, ADMIN_CONF)
        cls.b = cls.class_daemon(cls.etcd, ADMIN_CONF)

    def another_daemon(self):
        return self.start_daemon(self.etcd, ADMIN_CONF)


if __name__ == "__main__":
    unittest.main()
