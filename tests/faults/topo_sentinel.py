"""The fault test's sentinel topology: two daemons on Redis Sentinel (-b
redis-sentinel://...): a master, a replica and three sentinels
(dlocktest.sentinel: down-after 1000 ms, failover-timeout 5000 ms). Its
faults: the master killed or stopped across a failover, a sentinel killed
and then the master. No fault excuses an overlap across a failover
(check.py), whether the lease reached the replica or not."""

import time

from dlocktest.sentinel import (DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS, READY_TIMEOUT,
                                SentinelDaemon, SentinelSetup)

from faults.topology import TWO_DAEMONS, Topology, stopped_across

# s for the sentinels to name a new master after the master is killed or
# stopped (down-after + failover-timeout, with room)
FAILOVER_LIMIT = (DOWN_AFTER_MS + FAILOVER_TIMEOUT_MS) / 1000.0 + 10


class SentinelTopology(Topology):
    """A master, a replica and three sentinels; two daemons on them."""

    FAULTS = ["master_kill", "master_stop", "sentinel_kill"]
    # "failover": until the sentinels name the promoted replica, then 0.3 s
    # more, so that the daemons have moved before the stale master runs
    PLANS = {
        "master_kill": [("renew", None), ("lock", None), ("prewrite", None)],
        "master_stop": [("renew", "failover"), ("lock", "failover"), ("extend", "failover")],
        "sentinel_kill": [("renew", None), ("lock", None), ("prewrite", None)],
    }
    # a failover takes 2 to 4 s: some locks are renewed on the new master
    # before only their margin is left, others are lost
    TTL = 4000
    LAYOUT = TWO_DAEMONS
    DAEMONS = ("d0", "d1")

    def __init__(self, sc):
        super().__init__(sc)
        self.sentinels = None  # the SentinelSetup

    def start(self, conf):
        self.sentinels = SentinelSetup(directory=self.subdir("sentinel"))
        self.sentinels.start()
        for n in ("d0", "d1"):
            self.sc.daemons[n] = SentinelDaemon(self.sentinels, conf, unix=False,
                                                backend_conf=self.backend_conf(),
                                                directory=self.subdir(n))

    def inject(self, kind, how, spec):
        """The master SIGKILLed, or SIGSTOPped until the sentinels have
        promoted the replica (and a moment more), or a sentinel SIGKILLed
        and then the master. Then back to a master, a replica and three
        sentinels for the next round."""
        sc = self.sc
        after = sc.duration(spec) if spec else None
        s = self.sentinels
        dead = None
        t_sentinel = None
        if kind == "sentinel_kill":
            dead = sc.rng.randrange(len(s.sentinels))
            t_sentinel = time.monotonic()
            s.kill_sentinel(dead)
            time.sleep(1.0 * sc.scale)  # locks go on with two sentinels
        wid, aim = sc.aim_at(how)
        m = s.master()
        pid = m.pid
        limit = FAILOVER_LIMIT * sc.scale
        if kind == "master_stop":
            t0, port, failover, t1 = stopped_across(
                m, lambda: s.wait_failover(limit, old=m.port), after)
        else:
            _, t0 = s.kill_master()
            port = s.wait_failover(limit, old=m.port)
            t1 = time.monotonic()
            failover = t1 - t0
        target = "master" if dead is None else "sentinel%d" % dead
        sc.record(kind, target, t_sentinel if t_sentinel is not None else t0, t1, aim=aim,
                  pid=pid, master_at=t0, new_master=port, failover=round(failover, 3),
                  planned="failover" if kind == "master_stop" else None)
        # the old master back as a replica (a stopped one is demoted by the
        # sentinels some 10 s after it runs again), the sentinel back
        if kind != "master_stop":
            s.rejoin(m)
        if dead is not None:
            s.restart_sentinel(dead)
        s.wait_ready(READY_TIMEOUT * sc.scale)

    def stop(self):
        if self.sentinels is None:
            return
        for p, rc in self.sentinels.stop():
            if rc != 0:
                self.sc.failures.append({"kind": "sentinel exit",
                                         "text": "%s on port %d exited with %s; log:\n%s"
                                         % (p.NAME, p.port, rc, p.log())})
