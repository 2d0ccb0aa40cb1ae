"""Leader election across daemons on the etcd backend (the tests are
dlocktest.elect's), and a leader's daemon killed: its etcd lease runs out
and the observer on the other daemon sees the key free.
"""

from dlocktest.cases import EtcdTestCase
from dlocktest.elect import ElectAcrossDaemons, ObserveUntil
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


class TestElectEtcdKilled(ObserveUntil, EtcdTestCase):

    def test_killed_leader_seen_lost_on_b(self):
        e = self.start_etcd()
        conf = {"lease_ttl_ms": LEASE, "request_timeout_ms": 500}
        a = self.start_daemon(e, backend_conf=conf)
        b = self.start_daemon(e, backend_conf=conf)
        self.killed_leader_seen_lost(a, b, unique_key(), LEASE / 1000, KILL_MARGIN)
