"""The redis-cluster backend against real Redis Clusters (RedisCluster:
three masters with a replica each, on loopback): keys spread over the masters
and the key layout of one slot per lock, two daemons excluding and waking each
other through sharded pub/sub, resharding while locks are held and waited
for (a whole migration, and one stopped half way), a master killed and its
replica promoted, one seed and MOVED, seeds that refuse, TLS and ACL users,
and dlockd -t on the backend's configuration.

Clusters that a test kills or migrates are its own (or its class's, for
migrations of distinct slots); the others are shared by a class.
"""

import os
import re
import signal
import subprocess
import time
import unittest

import redis

from dlocktest.cases import RedisTestCase, check_held, report
from dlocktest.certs import shared_certs
from dlocktest.cluster import lock_keys, slot_tag
from dlocktest.conf import backend_section
from dlocktest.env import DLOCKD, SLOWDOWN, new_dir, unique_key
from dlocktest.proc import free_port, in_thread, reap, spawn, wait_until
from dlocktest.resp import NULL, Err, pairs, read_within

# the redis backend's documented ACL (docs/backends/redis.md, "TLS and ACL users") and
# what a cluster needs on top of it (the slot map, ASK, the shard channels)
BASE_COMMANDS = ("+ping +subscribe +eval +evalsha +script|load +get +set +del +type +pttl "
                 "+pexpire +pexpireat +time +publish +zrange +zadd +zrem "
                 "+zremrangebyscore +zcard +zscore +hset +hget +hmget +hdel +hincrby")
CLUSTER_COMMANDS = "+cluster|slots +asking +ssubscribe +spublish"
KEYS_ACL = "~dlock:* &dlock:*"

# a short command timeout: TTLs down to 600 ms, failures seen fast
FAST = {"command_timeout_ms": 200}


def grant(reply, what=""):
    """reply is a LOCK grant [token, fence, validity]; returns it."""
    if not (isinstance(reply, list) and len(reply) == 3):
        raise AssertionError("%s: not a grant: %r" % (what, reply))
    return reply


def info_ints(info, *names):
    return [int(info[n]) for n in names]


class ClusterCase(RedisTestCase):
    """Helpers of the tests of this file."""

    def keys_per_master(self, cluster, name):
        """One lock key (unique, starting with name) in a slot of each master,
        as {master: key}."""
        owners = cluster.slot_map()
        out = {}
        i = 0
        while len(out) < len(cluster.masters()):
            k = unique_key("%s%d" % (name, i))
            i += 1
            m = cluster.server(node_id=owners[cluster.lock_slot(k)])
            out.setdefault(m, k)
        return out

    def pttl(self, server, lock_key, kind="lease"):
        """PTTL of a Redis key of lock_key on server (-2: none there)."""
        r = server.cmd("PTTL", lock_keys(lock_key)[kind])
        if not isinstance(r, int):
            raise AssertionError("PTTL on port %d answered %r" % (server.port, r))
        return r

    def wait_marked(self, cluster, lock_key, what="a waiter's mark"):
        """Until the mark of lock_key (a daemon waits for it) is on its master."""
        wait_until(lambda: cluster.master_of_lock(lock_key).cmd(
            "EXISTS", lock_keys(lock_key)["mark"]) == 1, 5.0, 0.01,
            "%s for %s" % (what, lock_key))

    def wait_log(self, daemon, text, what, timeout=10.0):
        """Until daemon's log has text; fails with the log."""
        try:
            wait_until(lambda: text in daemon.log(200000), timeout, 0.02, what)
        except AssertionError as e:
            self.fail("%s; log:\n%s" % (e, daemon.log()))

    def assertNotGranted(self, reply, msg=""):
        """reply is not a grant: a timed-out LOCK (NULL) or an error."""
        self.assertTrue(reply is NULL or isinstance(reply, Err),
                        "%s: granted while held elsewhere: %r" % (msg, reply))

    def assertHolds(self, conn, key, fence):
        """conn holds key with fence, and lost nothing."""
        self.assertEqual(conn.cmd("PING"), "PONG", "the holder of %s was told" % key)
        self.assertEqual(conn.cmd("VALIDATE", key, fence), 1, "%s not held" % key)

    def fresh_lease(self, server, key, ttl, what):
        """Within a renewal period, the lease of key on server is renewed:
        PTTL back above two thirds of ttl."""
        wait_until(lambda: self.pttl(server, key) > ttl * 2 // 3 - 50 * SLOWDOWN,
                   ttl / 1000 + 1.0, 0.01, "%s: the lease of %s renewed on port %d"
                   % (what, key, server.port))

    def wake_across(self, holder_daemon, waiter_daemon, cluster, key):
        """A waiter on waiter_daemon is granted key when the holder on
        holder_daemon releases it; returns the seconds from the UNLOCK's
        answer to the grant."""
        h = self.conn(holder_daemon)
        g1 = grant(h.cmd("LOCK", key), "holder")
        w = self.conn(waiter_daemon)
        w.send(w.encode("LOCK", key, "WAIT", 10000))
        self.wait_marked(cluster, key)
        self.assertEqual(h.cmd("UNLOCK", key), 0)
        t0 = time.monotonic()
        g2 = read_within(w, 5.0)
        dt = time.monotonic() - t0
        grant(g2, "waiter")
        self.assertGreater(g2[1], g1[1])
        self.assertEqual(w.cmd("UNLOCK", key), 0)
        return dt


class TestClusterShared(ClusterCase):
    """One cluster and two daemons for the class (one with -b, one with a
    backend section); nothing here changes the cluster."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = cls.class_cluster()
        cls.a = cls.class_cluster_daemon(cls.cluster, config=backend_section(FAST))
        cls.b = cls.class_cluster_daemon(cls.cluster, backend_conf=dict(FAST, refresh_ms=1000))

    def test_status_from_another_daemon(self):
        self.assertFleetStatus(self.a, self.b)

    def test_held_lists_every_master_s_keys(self):
        check_held(self, lambda: self.conn(self.a), lambda: self.conn(self.b), n=60)

    def test_keys_on_every_master_fences_info(self):
        c = self.cluster
        name = "spread"
        keys = [unique_key(name) for _ in range(300)]
        conn = self.conn(self.a)

        def lock_all():
            conn.send(b"".join(conn.encode("LOCK", k) for k in keys))
            return [grant(conn.read(), k)[1] for k in keys]

        def unlock_all():
            conn.send(b"".join(conn.encode("UNLOCK", k) for k in keys))
            self.assertEqual([conn.read() for _ in keys], [0] * len(keys))

        f1 = lock_all()
        owners = c.slot_map()
        masters = c.masters()
        self.assertEqual(len(masters), 3)
        # every lease is on its slot's master, and SCAN finds them there
        want = {m: set() for m in masters}
        for k in keys:
            want[c.server(node_id=owners[c.lock_slot(k)])].add(lock_keys(k)["lease"])
        pattern = "dlock:l:{" + keys[0].rsplit("/", 2)[0] + "/%s/*" % name
        for m in masters:
            r = c.client(m)
            try:
                found = set(r.scan_iter(match=pattern, count=1000))
            finally:
                r.close()
            self.assertEqual(found, want[m], "the leases on port %d" % m.port)
            self.assertGreater(len(found), 50, "port %d has few keys" % m.port)
        report("300 leases over the masters: %s"
               % ", ".join(str(len(want[m])) for m in masters))
        info = self.a.info()
        self.assertGreaterEqual(int(info["locks_held"]), 300)
        unlock_all()
        # fences increase per key, lock after lock
        f2 = lock_all()
        unlock_all()
        f3 = lock_all()
        unlock_all()
        for k, x, y, z in zip(keys, f1, f2, f3):
            self.assertLess(x, y, k)
            self.assertLess(y, z, k)
        # the fence counter of a key is on its master, at or past the last fence
        k = keys[0]
        m = c.master_of_lock(k)
        self.assertGreaterEqual(int(m.cmd("GET", lock_keys(k)["fence"])), f3[0])
        self.check_info(self.a.info(), c, calls=True)

    def check_info(self, info, c, calls=False):
        """INFO's redis-cluster fields match the cluster (masters in slot
        order); with calls, every master had calls."""
        self.assertEqual(info["backend"], "redis-cluster")
        self.assertEqual(info["backend_connected"], "1")
        for name in ("backend_cluster_masters", "backend_cluster_slots_up",
                     "backend_cluster_refreshes_total", "backend_cluster_moved_total",
                     "backend_cluster_ask_total", "backend_cluster_tryagain_total"):
            self.assertRegex(info.get(name, ""), r"^\d+$", name)
        owners = c.slot_map()
        in_order = []
        for nid in owners:
            if nid not in in_order:
                in_order.append(nid)
        self.assertEqual(int(info["backend_cluster_masters"]), len(in_order))
        self.assertEqual(int(info["backend_cluster_slots_up"]), 16384)
        for i, nid in enumerate(in_order):
            m = c.server(node_id=nid)
            self.assertEqual(info["backend_master%d_address" % i], m.address())
            self.assertEqual(int(info["backend_master%d_slots" % i]), owners.count(nid))
            self.assertEqual(info["backend_master%d_connected" % i], "1")
            n = int(info["backend_master%d_calls_total" % i])
            if calls:
                self.assertGreater(n, 0, "master %d" % i)

    def test_info_of_the_yaml_daemon(self):
        self.check_info(self.b.info(), self.cluster)

    def test_key_layout_one_slot(self):
        c = self.cluster
        key = unique_key("layout")
        slot = c.lock_slot(key)
        h = self.conn(self.a)
        g = grant(h.cmd("LOCK", key, "TTL", 5000))
        w = self.conn(self.b)
        w.send(w.encode("LOCK", key, "WAIT", 10000))
        self.wait_marked(c, key)
        m = c.master_of(slot)
        names = lock_keys(key)
        self.assertEqual(names["lease"], b"dlock:l:{" + key.encode() + b"}")
        for kind, name in names.items():
            self.assertEqual(m.cmd("CLUSTER", "KEYSLOT", name), slot, kind)
            self.assertEqual(m.cmd("EXISTS", name), 1, "%s key %r on its master" % (kind, name))
        self.assertIsInstance(m.cmd("GET", names["lease"]), bytes)
        self.assertGreaterEqual(int(m.cmd("GET", names["fence"])), g[1])
        self.assertEqual(h.cmd("UNLOCK", key), 0)
        grant(read_within(w, 5.0), "the waiter")
        self.assertEqual(w.cmd("UNLOCK", key), 0)
        self.assertEqual(m.cmd("EXISTS", names["lease"]), 0)

    def test_escaped_key(self):
        c = self.cluster
        key = unique_key("a}b%c{d")
        escaped = key.replace("%", "%25").replace("}", "%7D")
        slot = c.lock_slot(key)
        m = c.master_of(slot)
        self.assertEqual(m.cmd("CLUSTER", "KEYSLOT", escaped), slot)
        conn = self.conn(self.a)
        g = grant(conn.cmd("LOCK", key, "TTL", 5000))
        lease = ("dlock:l:{%s}" % escaped).encode()
        self.assertEqual(lock_keys(key)["lease"], lease)
        self.assertEqual(m.cmd("EXISTS", lease), 1, "%r on port %d" % (lease, m.port))
        self.assertEqual(m.cmd("CLUSTER", "KEYSLOT", lease), slot)
        self.assertEqual(self.conn(self.b).cmd("LOCK", key, "WAIT", 100), NULL)
        self.assertEqual(pairs(conn.cmd("STATUS", key))["fence"], g[1])
        self.assertEqual(conn.cmd("UNLOCK", key), 0)
        self.assertEqual(m.cmd("EXISTS", lease), 0)
        # keys made of nothing but what is escaped
        for k in ("}", "%", "{", "}{%}", "%7D"):
            g = grant(conn.cmd("LOCK", k), k)
            self.assertEqual(c.master_of_lock(k).cmd("EXISTS", lock_keys(k)["lease"]), 1, k)
            self.assertEqual(conn.cmd("UNLOCK", k), 0)

    def test_release_and_want_on_shard_channels(self):
        c = self.cluster
        key = unique_key("chan")
        slot = c.lock_slot(key)
        tag = slot_tag(slot)
        m = c.master_of(slot)
        sub = self.redis_conn(m)
        released, wanted = "dlock:released{%s}" % tag, "dlock:wanted{%s}" % tag
        sub.send(sub.encode("SSUBSCRIBE", released, wanted))
        got = [sub.read(), sub.read()]
        self.assertEqual(sorted(x[1] for x in got), sorted([released.encode(), wanted.encode()]))
        h = self.conn(self.a)
        grant(h.cmd("LOCK", key))
        w = self.conn(self.b)
        w.send(w.encode("LOCK", key, "WAIT", 10000))
        msg = read_within(sub, 5.0)
        self.assertEqual(msg, [b"smessage", wanted.encode(), key.encode()])
        self.assertEqual(h.cmd("UNLOCK", key), 0)
        msg = read_within(sub, 5.0)
        self.assertEqual(msg, [b"smessage", released.encode(), key.encode()])
        grant(read_within(w, 5.0), "the waiter")
        self.assertEqual(w.cmd("UNLOCK", key), 0)

    def test_two_daemons_exclude_each_other(self):
        for m, key in self.keys_per_master(self.cluster, "excl").items():
            fences = self.assertExclusive([self.a, self.b, self.a, self.b], key, 15, 60,
                                          "key on port %d" % m.port)
            self.assertEqual(fences, sorted(set(fences)), "fences in critical-section order")

    def test_two_daemons_wake_each_other(self):
        times = []
        for m, key in self.keys_per_master(self.cluster, "wake").items():
            dt = self.wake_across(self.a, self.b, self.cluster, key)
            times.append(dt)
            self.assertLess(dt, 0.5 * SLOWDOWN, "the waiter on the other daemon woke "
                            "%.3f s after the release (key on port %d)" % (dt, m.port))
            dt = self.wake_across(self.b, self.a, self.cluster, key)
            times.append(dt)
            self.assertLess(dt, 0.5 * SLOWDOWN)
        report("wake-up across daemons (ms): %s" % ", ".join("%.1f" % (t * 1000) for t in times))

    def test_status_connected(self):
        st = pairs(self.conn(self.a).cmd("STATUS", unique_key("st")))
        self.assertEqual(st["backend"], b"connected")

    def test_sighup_keeps_the_daemon_and_its_locks(self):
        # a reload reads the configuration and the backend's files again: the
        # daemon goes on, every lock it holds stays held, and it still serves
        d = self.start_cluster_daemon(self.cluster, backend_conf=FAST)
        holder, other = self.conn(d), self.conn(self.b)
        keys = list(self.keys_per_master(self.cluster, "hup").values())
        grants = [grant(holder.cmd("LOCK", k, "TTL", 5000), k) for k in keys]
        d.proc.send_signal(signal.SIGHUP)
        self.wait_log(d, "configuration reloaded", "the reload")
        self.assertIsNone(d.proc.poll(), "dlockd exited on SIGHUP")
        for k in keys:
            self.assertIs(other.cmd("LOCK", k, "WAIT", 0), NULL, "%s is held" % k)
        self.assertEqual(d.info()["backend_cluster_slots_up"], "16384")
        for k, g in zip(keys, grants):
            self.assertEqual(holder.cmd("UNLOCK", k), 0, k)
            g2 = grant(other.cmd("LOCK", k), k)
            self.assertGreater(g2[1], g[1])
            self.assertEqual(other.cmd("UNLOCK", k), 0, k)


class TestClusterResharding(ClusterCase):
    """Slots moved while their locks are held and waited for. One cluster
    for the class: each test moves slots of its own keys; daemons per test.
    Three daemons: the holder's, the waiter's, and a prober's that has no
    local state of the key (what it gets comes from Redis)."""

    TTL = 900

    @classmethod
    def setUpClass(cls):
        cls.cluster = cls.class_cluster()

    def daemons(self, n=3, **conf):
        conf = dict(FAST, **conf)
        return [self.start_cluster_daemon(self.cluster, backend_conf=conf) for _ in range(n)]

    def other_master(self, server):
        return next(m for m in self.cluster.masters() if m is not server)

    def test_migrate_held_and_waited(self):
        c = self.cluster
        a, b, p = self.daemons()
        key = unique_key("move")
        slot = c.lock_slot(key)
        src = c.master_of(slot)
        dest = self.other_master(src)
        h = self.conn(a)
        g = grant(h.cmd("LOCK", key, "TTL", self.TTL))
        w = self.conn(b)
        w.send(w.encode("LOCK", key, "WAIT", 30000))
        self.wait_marked(c, key)
        c.migrate_slot(slot, dest)
        self.assertEqual(src.cmd("CLUSTER", "COUNTKEYSINSLOT", slot), 0)
        self.assertNotGranted(self.conn(p).cmd("LOCK", key, "WAIT", 200), "right after")
        # held past several TTLs: renewals go to the new master
        time.sleep(3 * self.TTL / 1000)
        self.assertHolds(h, key, g[1])
        self.fresh_lease(dest, key, self.TTL, "after the move")
        self.assertNotGranted(self.conn(p).cmd("LOCK", key, "WAIT", 200), "later")
        self.assertIsNone(read_within(w, 0), "the waiter was granted while held")
        # the release wakes the waiter on the other daemon
        self.assertEqual(h.cmd("UNLOCK", key), 0)
        t0 = time.monotonic()
        g2 = grant(read_within(w, 5.0), "the waiter")
        report("waiter granted %.1f ms after the release (slot moved)"
               % ((time.monotonic() - t0) * 1000))
        self.assertGreater(g2[1], g[1])
        self.assertEqual(self.pttl(dest, key) > 0, True)
        self.assertEqual(w.cmd("UNLOCK", key), 0)

    def test_mid_migration(self):
        c = self.cluster
        ttl = 1500
        a, b, p = self.daemons()
        first = unique_key("mid")
        slot = c.lock_slot(first)
        keys = [first] + [c.key_of_slot(slot, first + "/" + n) for n in ("b", "c")]
        fresh = c.key_of_slot(slot, first + "/new")  # never locked before the move
        src = c.master_of(slot)
        dest = self.other_master(src)
        holders = {}
        for k in keys[:2]:
            h = self.conn(a)
            holders[k] = (h, grant(h.cmd("LOCK", k, "TTL", ttl), k)[1])
        w = self.conn(b)
        w.send(w.encode("LOCK", keys[0], "WAIT", 30000))
        self.wait_marked(c, keys[0])
        pc = self.conn(p)
        # a lock of the slot, held and released before, has a fence there
        grant(pc.cmd("LOCK", keys[2]))
        self.assertEqual(pc.cmd("UNLOCK", keys[2]), 0)
        before = [d.info() for d in (a, b, p)]
        c.begin_migration(slot, dest)
        total = src.cmd("CLUSTER", "COUNTKEYSINSLOT", slot)
        moved = c.migrate_keys(slot, src, dest, limit=max(total // 2, 1))
        t_mid = time.monotonic()
        try:
            # half way, a new lock of the slot is sent to the importing
            # master (ASK), which answers TRYAGAIN to a script whose keys
            # it has not all got: the daemon retries, then may answer
            # -BACKEND; the held ones are not granted again
            half = pc.cmd("LOCK", fresh, "TTL", ttl, "WAIT", 0)
            if isinstance(half, list):
                self.assertEqual(pc.cmd("UNLOCK", fresh), 0)
            else:
                self.assertIsInstance(half, Err, half)
                self.assertEqual(half.code, "BACKEND", half)
            self.assertNotGranted(pc.cmd("LOCK", keys[0], "WAIT", 200), "half way")
            time.sleep(max(0.0, ttl / 2000 - (time.monotonic() - t_mid)))
            for k, (h, f) in holders.items():
                self.assertHolds(h, k, f)
        finally:
            rest = c.migrate_keys(slot, src, dest)
            c.finish_migration(slot, src, dest)
        report("mid-migration: %d of %d keys moved first, %d after (%.2f s half way); "
               "a new key's LOCK half way answered %r"
               % (moved, total, rest, time.monotonic() - t_mid,
                  half if isinstance(half, Err) else "a grant"))
        grant(pc.cmd("LOCK", fresh, "TTL", ttl), "a new key once moved")
        self.assertEqual(pc.cmd("UNLOCK", fresh), 0)
        time.sleep(2 * ttl / 1000)
        for k, (h, f) in holders.items():
            self.assertHolds(h, k, f)
            self.fresh_lease(dest, k, ttl, "after the migration")
        self.assertNotGranted(self.conn(p).cmd("LOCK", keys[1], "WAIT", 200), "after")
        h, f = holders[keys[0]]
        self.assertEqual(h.cmd("UNLOCK", keys[0]), 0)
        g2 = grant(read_within(w, 5.0), "the waiter")
        self.assertGreater(g2[1], f)
        self.assertEqual(w.cmd("UNLOCK", keys[0]), 0)
        after = [d.info() for d in (a, b, p)]
        redirects = {}
        for name in ("moved", "ask", "tryagain"):
            field = "backend_cluster_%s_total" % name
            redirects[name] = sum(int(x[field]) - int(y[field]) for x, y in zip(after, before))
        report("redirections during the migration: %s" % redirects)
        self.assertGreater(redirects["ask"] + redirects["tryagain"], 0,
                           "a request half way got no ASK or TRYAGAIN")

    def test_one_seed_reaches_every_master_and_follows_moved(self):
        c = self.cluster
        seed = c.seed_list()[0]
        d = self.start_cluster_daemon(c, backend_url=c.url(seeds=[seed]),
                                      config="backend:\n  refresh_ms: 600000\n")
        info = d.info()
        self.assertEqual(int(info["backend_cluster_masters"]), 3)
        self.assertEqual(int(info["backend_cluster_slots_up"]), 16384)
        conn = self.conn(d)
        per = self.keys_per_master(c, "seed")
        for m, key in per.items():
            grant(conn.cmd("LOCK", key), "key on port %d" % m.port)
            self.assertEqual(m.cmd("EXISTS", lock_keys(key)["lease"]), 1)
            self.assertEqual(conn.cmd("UNLOCK", key), 0)
        # a slot moved behind the daemon's back: its next request follows MOVED
        # (or the refresh that the moved shard channels start)
        key = unique_key("moved")
        slot = c.lock_slot(key)
        src = c.master_of(slot)
        dest = self.other_master(src)
        grant(conn.cmd("LOCK", key))
        self.assertEqual(conn.cmd("UNLOCK", key), 0)
        i0 = d.info()
        c.migrate_slot(slot, dest)
        g = grant(conn.cmd("LOCK", key), "after the move")
        i1 = d.info()
        self.assertEqual(dest.cmd("EXISTS", lock_keys(key)["lease"]), 1)
        self.assertEqual(conn.cmd("UNLOCK", key), 0)
        moved, refreshes = (int(i1[n]) - int(i0[n]) for n in (
            "backend_cluster_moved_total", "backend_cluster_refreshes_total"))
        report("after a migration: %d MOVED, %d refreshes" % (moved, refreshes))
        self.assertGreater(moved + refreshes, 0)
        self.assertGreater(g[1], 0)


class TestClusterFailover(ClusterCase):
    """A master killed (SIGKILL): its replica is promoted. Each test has a
    cluster of its own."""

    NODE_TIMEOUT_MS = 1000

    def test_master_killed(self):
        c = self.start_cluster(node_timeout_ms=self.NODE_TIMEOUT_MS)
        d = self.start_cluster_daemon(c, backend_conf=FAST)
        conn = self.conn(d)
        key = unique_key("failover")
        victim = c.master_of_lock(key)
        others = {m: k for m, k in self.keys_per_master(c, "other").items() if m is not victim}
        f1 = grant(conn.cmd("LOCK", key, "TTL", 2000))[1]
        self.assertEqual(conn.cmd("UNLOCK", key), 0)
        t_kill = c.kill(victim)
        promoted = in_thread(c.wait_promoted, victim, 20.0)
        limit = 2 * self.NODE_TIMEOUT_MS / 1000 + 3
        errors = []
        while True:
            r = conn.cmd("LOCK", key, "TTL", 2000, "WAIT", 0)
            if isinstance(r, list):
                break
            if isinstance(r, Err):
                errors.append(r)
            if time.monotonic() - t_kill > limit + 5:
                self.fail("no grant %.1f s after the kill; answers %s; log:\n%s"
                          % (time.monotonic() - t_kill, errors[-3:], d.log()))
            time.sleep(0.05)
        t_ok = time.monotonic() - t_kill
        new = promoted.result(20.0)
        t_promoted = promoted.done_at - t_kill
        report("failover: promoted %.2f s after the kill (seen), locks again %.2f s after "
               "(bound %.1f s); %d -BACKEND answers, e.g. %r"
               % (t_promoted, t_ok, limit, len(errors), errors[:1]))
        self.assertLess(t_ok, limit, "locks on the killed master's keys came back late")
        self.assertLess(t_ok - t_promoted, self.NODE_TIMEOUT_MS / 1000 + 1,
                        "locks came back late after the promotion was visible")
        self.assertTrue(all(e.code == "BACKEND" for e in errors), errors[:3])
        self.assertGreater(r[1], f1, "fences increase across the failover")
        self.assertEqual(new.cmd("EXISTS", lock_keys(key)["lease"]), 1)
        self.assertEqual(conn.cmd("UNLOCK", key), 0)
        for m, k in others.items():
            grant(conn.cmd("LOCK", k), "a key of port %d" % m.port)
            self.assertEqual(conn.cmd("UNLOCK", k), 0)
        # the old master back as a replica: the daemon sees three masters again
        c.restart(victim)
        c.wait_ok(20)
        wait_until(lambda: d.info().get("backend_cluster_slots_up") == "16384", 10.0,
                   what="every slot up in INFO")
        self.assertEqual(d.info()["backend_cluster_masters"], "3")

    def test_holder_keeps_lock_with_replica_ack(self):
        # two replicas per master: the new master has a replica to acknowledge
        c = self.start_cluster(replicas=2, node_timeout_ms=self.NODE_TIMEOUT_MS)
        conf = {"min_replicas_ack": 1, "replica_ack_timeout_ms": 300,
                "command_timeout_ms": 1000}
        d = self.start_cluster_daemon(c, backend_conf=conf)
        probe = self.start_cluster_daemon(c, backend_conf=FAST)
        h = self.conn(d)
        key = unique_key("keep")
        ttl = 6000
        # fresh replicas on a loaded machine may miss the first 300 ms
        # acknowledgements: the test is of the failover, so wait for them
        deadline = time.monotonic() + 10
        while True:
            reply = h.cmd("LOCK", key, "TTL", ttl)
            if (time.monotonic() > deadline or not isinstance(reply, Err) or
                    "replica without acknowledgement" not in reply):
                break
            time.sleep(0.2)
        f = grant(reply)[1]
        victim = c.master_of_lock(key)
        t_kill = c.kill(victim)
        new = c.wait_promoted(victim, 20.0)
        t_promoted = time.monotonic() - t_kill
        self.assertEqual(new.cmd("EXISTS", lock_keys(key)["lease"]), 1,
                         "the acknowledged lease is on the promoted replica")
        # renewed on the new master, at once and then on its period
        self.fresh_lease(new, key, ttl, "after the failover")
        self.assertHolds(h, key, f)
        self.assertNotGranted(self.conn(probe).cmd("LOCK", key, "WAIT", 300), "after")
        time.sleep(max(0.0, ttl / 1000 + 1 - (time.monotonic() - t_kill)))
        self.assertHolds(h, key, f)
        report("holder kept its lock across a failover (promoted %.2f s after the kill)"
               % t_promoted)
        self.assertEqual(h.cmd("UNLOCK", key), 0)
        g = grant(self.conn(probe).cmd("LOCK", key), "after the release")
        self.assertGreater(g[1], f)
        self.assertEqual(d.info()["backend_lost_total"], "0")


class TestClusterUnreachable(ClusterCase):

    def test_seeds_refuse(self):
        seeds = ["127.0.0.1:%d" % free_port() for _ in range(3)]
        d = self.start_cluster_daemon(None, backend_url="redis-cluster://" + ",".join(seeds),
                                      start=False)
        d.start(wait_backend=False)
        r = d.client()
        try:
            with self.assertRaises(redis.exceptions.ResponseError) as cm:
                r.execute_command("LOCK", unique_key("down"), "WAIT", 0)
            self.assertTrue(str(cm.exception).startswith("BACKEND"), str(cm.exception))
            report("LOCK with the seeds refusing: %s" % cm.exception)
            st = pairs(r.execute_command("STATUS", unique_key("down")))
            self.assertEqual(st["backend"], b"disconnected")
        finally:
            r.close()
        info = d.info()
        self.assertEqual(info["backend_connected"], "0")
        self.assertEqual(info.get("backend_cluster_slots_up"), "0")


def acl_user(name, password, commands):
    return "%s on >%s %s %s" % (name, password, KEYS_ACL, commands)


class TestClusterTLSAndACL(ClusterCase):
    """A TLS cluster (rediss-cluster://, the CA of shared_certs()) with ACL
    users: dl has the documented ACL and the cluster's commands, base the
    documented ACL alone."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = cls.class_cluster(
            tls=shared_certs(),
            users=[acl_user("dl", "dlpw", BASE_COMMANDS + " " + CLUSTER_COMMANDS),
                   acl_user("base", "basepw", BASE_COMMANDS)])

    def test_tls(self):
        c = self.cluster
        self.assertTrue(c.url().startswith("rediss-cluster://"))
        a = self.start_cluster_daemon(c)
        b = self.start_cluster_daemon(c, backend_conf={})  # tls.ca_file in YAML
        for m, key in self.keys_per_master(c, "tls").items():
            dt = self.wake_across(a, b, c, key)
            self.assertLess(dt, 0.5 * SLOWDOWN, "port %d" % m.port)
            self.assertEqual(m.cmd("EXISTS", lock_keys(key)["lease"]), 0)
        self.assertEqual(a.info()["backend_cluster_slots_up"], "16384")

    def test_plain_client_on_tls_cluster_refused(self):
        c = self.cluster
        # (no cluster given: no CA is added to the configuration)
        d = self.start_cluster_daemon(None, backend_url=c.url().replace("rediss-", "redis-"),
                                      start=False)
        d.start(wait_backend=False)
        reply = self.conn(d).cmd("LOCK", unique_key("plain"), "WAIT", 0)
        self.assertIsInstance(reply, Err, reply)
        self.assertEqual(reply.code, "BACKEND")

    def test_acl_user(self):
        c = self.cluster
        url = c.url(user="dl", password="dlpw")
        a = self.start_cluster_daemon(c, backend_url=url)
        b = self.start_cluster_daemon(c, backend_conf={"username": "dl", "password": "dlpw"})
        for m, key in self.keys_per_master(c, "acl").items():
            dt = self.wake_across(a, b, c, key)
            self.assertLess(dt, 0.5 * SLOWDOWN, "port %d" % m.port)
        for d in (a, b):
            self.assertNotIn("needs at least the ACL", d.log(200000))

    def test_acl_without_cluster_commands(self):
        c = self.cluster
        d = self.start_cluster_daemon(c, backend_url=c.url(user="base", password="basepw"),
                                      start=False)
        d.start(wait_backend=False)
        self.wait_log(d, "needs at least the ACL", "the log to name the ACL the user needs",
                      timeout=5.0)
        line = next(x for x in d.log(200000).splitlines() if "needs at least the ACL" in x)
        report("with the redis backend's ACL alone: %s" % line.strip())
        for cmd in CLUSTER_COMMANDS.split():
            self.assertIn(cmd, line)
        self.assertIn("NOPERM", line)
        reply = self.conn(d).cmd("LOCK", unique_key("acl"), "WAIT", 0)
        self.assertIsInstance(reply, Err, reply)
        self.assertEqual(reply.code, "BACKEND")
        # one line per reason, not one per attempt
        time.sleep(1.0)
        lines = [x for x in d.log(200000).splitlines() if "no slot map" in x]
        self.assertLessEqual(len(lines), len(c.seed_list()), "\n".join(lines[:10]))


def check_config(text):
    """dlockd -t on a configuration file of text: (status, what it printed,
    the file's path)."""
    path = os.path.join(new_dir("cluster-conf"), "dlockd.yaml")
    with open(path, "w") as f:
        f.write(text)
    p = spawn([DLOCKD, "-t", "-c", path], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
              stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
        reap(p)
    return p.returncode, (out + err).decode(errors="replace"), path


NODES = '  nodes: ["127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"]\n'


class TestClusterConfig(unittest.TestCase):
    """dlockd -t on a redis-cluster backend section: no server is needed."""

    def test_good(self):
        rc, out, _ = check_config("backend:\n  type: redis-cluster\n" + NODES +
                                  "  refresh_ms: 2000\n  key_prefix: \"app:\"\n"
                                  "  min_replicas_ack: 1\n  command_timeout_ms: 500\n")
        self.assertEqual((rc, out), (0, "configuration OK\n"))
        rc, out, _ = check_config("backend:\n  type: redis-cluster\n"
                                  "  nodes: 127.0.0.1:7000,127.0.0.1:7001\n")
        self.assertEqual((rc, out), (0, "configuration OK\n"))

    def test_db_is_not_a_setting(self):
        rc, out, path = check_config("backend:\n  type: redis-cluster\n" + NODES +
                                     "  db: 1\n")
        self.assertEqual(rc, 1, out)
        self.assertRegex(out, re.escape(path) + r":4:\d+: .*\bdb\b")

    def test_prefix_with_brace(self):
        rc, out, path = check_config("backend:\n  type: redis-cluster\n" + NODES +
                                     "  key_prefix: \"dl{x}:\"\n")
        self.assertEqual(rc, 1, out)
        self.assertRegex(out, re.escape(path) + r":4:\d+: .*key_prefix")

    def test_no_nodes(self):
        rc, out, path = check_config("backend:\n  type: redis-cluster\n  refresh_ms: 100\n")
        self.assertEqual(rc, 1, out)
        self.assertIn(path + ":", out)
        self.assertIn("nodes", out)


if __name__ == "__main__":
    unittest.main()
