"""dlocktest: the Python library of dlockd's integration tests
(tests/integration), its fault test (tests/faults) and its benchmark
(bench/run.py). The runners put tests/ on PYTHONPATH; code imports the
modules by name, e.g. `from dlocktest.daemon import Daemon`.

  env           the binaries under test, timeouts, the scratch directory
  proc          processes: spawn, reap, kill by pid, waits, ports, ServerProcess
  resp          RESP2/RESP3: the codec, Raw (blocking) and Conn (pushes) clients
  certs         TLS certificates made with openssl
  redis_server  redis-server (RedisServer), MONITOR, INFO commandstats, redis-cli
  cluster       Redis Cluster (RedisCluster, ClusterNode), slots, slot migration
  sentinel      Redis Sentinel: a master, a replica and sentinels
  etcd_server   etcd (EtcdServer): its keys, leases and metrics
  dnsfake       a DNS server of the test and a private resolv.conf for dlockd
  conf          the daemon's configuration text (YAML values, backend section)
  daemon        the daemon (Daemon), run_dlockd(), run_dlock()
  sessions      many sessions: exclusion across daemons, idle sessions
  cases         the TestCase bases (DaemonTestCase, RedisTestCase,
                EtcdTestCase, ConfigTestCase), report()

Every process started is stopped whatever happens (see proc).
"""
