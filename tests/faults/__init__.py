"""faults: dlockd's safety test, a fenced lock-set test with fault
injection (README.md). Run it with tests/faults/run.sh, or
`python3 -m faults.safety` with tests/ on PYTHONPATH.

  safety         the run: scenarios, workers, the faults they share, the table
  topology       the topologies of one store (memory, split, redis, etcd) and
                 the base; topo_sentinel, topo_redlock, topo_cluster the others
  check          the checker
  worker         one worker process (python3 -m faults.worker)
  proxy          the TCP proxy that black-holes a path (python3 -m faults.proxy)
  fenced         the fenced resource's Lua scripts
"""
