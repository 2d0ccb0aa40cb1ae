"""Leader election across daemons on the etcd backend (the tests are
dlocktest.elect's); leaders that come and go faster than a read, each
told; a leader's daemon killed: its etcd lease runs out and the observer on
the other daemon sees the key free.
"""

from dlocktest.cases import EtcdTestCase
from dlocktest.elect import ElectAcrossDaemons, ObserveUntil, state
from dlocktest.env import unique_key

LEASE = 3000  # ms: the daemon lease of the killed daemon's test
KILL_MARGIN = 1.5  # s after the lease for etcd to expire it and B to see it


class TestElectEtcd(ElectAcrossDaemons, EtcdTestCase):
    """Two daemons, A and B, on one etcd."""

    @classmethod
    def setUpClass(cls):
        cls.etcd = cls.class_etcd()
        cls.a = cls.class_daemon(cls.etcd)
        cls.b = cls.class_daemon(cls.etcd)

    def test_every_leader_seen_however_short(self):
        """Leaders on A that come and go faster than B can read: each
        read as etcd had the key at its put, and told."""
        self.every_leader_followed(self.a, self.b, 5)

    def test_proclaims_in_a_row_end_on_the_last(self):
        """Values proclaimed faster than B reads: B may skip some, never
        the last, and the term stays."""
        key = unique_key()
        a, b = self.conn(self.a), self.conn(self.b)
        term = a.cmd("CAMPAIGN", key, "v0")[1]
        first = state(b.cmd("OBSERVE", key))
        for i in range(1, 6):
            a.send(a.encode("PROCLAIM", key, "v%d" % i))
        for _ in range(1, 6):
            self.assertIsInstance(a.read(), int)
        st, seen = self.observe_until(b, key, first["rev"], lambda s: s["value"] == b"v5")
        self.assertTrue(all(s["term"] == term for s in seen), seen)


class TestElectEtcdKilled(ObserveUntil, EtcdTestCase):

    def test_killed_leader_seen_lost_on_b(self):
        e = self.start_etcd()
        conf = {"lease_ttl_ms": LEASE, "request_timeout_ms": 500}
        a = self.start_daemon(e, backend_conf=conf)
        b = self.start_daemon(e, backend_conf=conf)
        self.killed_leader_seen_lost(a, b, unique_key(), LEASE / 1000, KILL_MARGIN)
