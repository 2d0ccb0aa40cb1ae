"""LOCKALL and UNLOCKALL on every backend, across daemons (the tests are
dlocktest.multi's): memory (one daemon), one Redis, Sentinel's master,
redlock's nodes, a Redis Cluster with the keys of a set on different
masters, and etcd.
"""

from dlocktest.cases import EtcdTestCase, RedisTestCase
from dlocktest.cluster import lock_keys
from dlocktest.daemon import Daemon
from dlocktest.env import unique_key
from dlocktest.multi import IO, LockAllAcrossDaemons

FAST = {"command_timeout_ms": 500}


class TestLockAllMemory(LockAllAcrossDaemons, RedisTestCase):
    """One daemon on the memory backend: a and b are the same."""

    @classmethod
    def setUpClass(cls):
        d = Daemon("", backend="memory")
        cls.addClassCleanup(d.stop_checked)
        cls.a = cls.b = d.start()


class TestLockAllRedis(LockAllAcrossDaemons, RedisTestCase):
    """Two daemons, A and B, on one Redis."""

    @classmethod
    def setUpClass(cls):
        cls.redis = cls.class_redis()
        cls.a = cls.class_daemon(cls.redis, backend_conf=FAST)
        cls.b = cls.class_daemon(cls.redis, backend_conf=FAST)


class TestLockAllSentinel(LockAllAcrossDaemons, RedisTestCase):
    """Two daemons on Sentinel's master."""

    @classmethod
    def setUpClass(cls):
        cls.a, cls.b = cls.class_sentinel_daemons(2, backend_conf=FAST)


class TestLockAllRedlock(LockAllAcrossDaemons, RedisTestCase):
    """Two daemons on three redlock nodes."""

    @classmethod
    def setUpClass(cls):
        cls.nodes = cls.class_nodes(3)
        cls.a = cls.class_redlock_daemon(cls.nodes, backend_conf=FAST)
        cls.b = cls.class_redlock_daemon(cls.nodes, backend_conf=FAST)


class TestLockAllCluster(LockAllAcrossDaemons, RedisTestCase):
    """Two daemons on a Redis Cluster; the keys of a set live on different
    masters."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = cls.class_cluster()
        cls.a = cls.class_cluster_daemon(cls.cluster, backend_conf=FAST)
        cls.b = cls.class_cluster_daemon(cls.cluster, backend_conf=FAST)

    def keys(self, n):
        """n keys, each on another master while there are masters left."""
        owners = self.cluster.slot_map()
        found, seen = [], set()
        base = unique_key("m")
        i = 0
        while len(found) < n:
            k = "%s-%d" % (base, i)
            i += 1
            owner = owners[self.cluster.lock_slot(k)]
            if owner in seen and len(seen) < len(self.cluster.masters()):
                continue
            seen.add(owner)
            found.append(k)
        return found

    def test_set_over_three_masters(self):
        k = self.keys(3)
        masters = [self.cluster.master_of_lock(key) for key in k]
        self.assertEqual(len({m.port for m in masters}), 3)
        ca = self.conn(self.a, timeout=IO)
        self.assertSet(ca.cmd("LOCKALL", 3, *k), 3)
        for key, m in zip(k, masters):
            r = self.redis_conn(m)
            self.assertEqual(r.cmd("EXISTS", lock_keys(key)["lease"]), 1, key)
        self.assertEqual(ca.cmd("UNLOCKALL", 3, *k), [0, 0, 0])
        for key, m in zip(k, masters):
            self.assertEqual(self.redis_conn(m).cmd("EXISTS", lock_keys(key)["lease"]), 0)


class TestLockAllEtcd(LockAllAcrossDaemons, EtcdTestCase):
    """Two daemons on one etcd."""

    @classmethod
    def setUpClass(cls):
        cls.etcd = cls.class_etcd()
        cls.a = cls.class_daemon(cls.etcd)
        cls.b = cls.class_daemon(cls.etcd)
