"""Run every test_*.py of this directory with unittest.

usage: runtests.py [RESULT_FILE] [-k PATTERN]...

Prints unittest's verbose report and a last line "python: N passed, M failed";
writes "N M" to RESULT_FILE if given. Skipped tests count as failures (a
missing binary or server must not pass silently). Exits 0 only if every test
passed. A watchdog ends the run if it takes longer than DLOCKD_TEST_LIMIT
seconds (default 300).
"""

import collections
import faulthandler
import os
import sys
import time
import unittest

from dlocktest import env, proc

HERE = os.path.dirname(os.path.abspath(__file__))


# Suites left out under a wrapper (valgrind): Redis failovers with deadlines.
TIMED_ONLY = {"test_redis_sentinel", "test_redis_dns"}

# The suites the checked builds run (DLOCKD_TEST_SET=san: ASan/UBSan;
# valgrind: every daemon under valgrind): those that drive the daemon's
# memory handling (framing and hostile input, sessions, the lock table and
# observers, each backend's client, TLS), not those that run other
# programs' clients, time failovers, measure, or test packaging and docs,
# which the plain build runs. Under valgrind the lock suite runs on the
# memory backend only (each backend's own suite runs its client).
CHECKED_SETS = {
    "san": {"test_abuse", "test_daemon", "test_elect", "test_elect_etcd", "test_elect_redis",
            "test_elect_redlock", "test_etcd",
            "test_etcd_tls", "test_leases", "test_lockall", "test_locks", "test_metrics", "test_ops",
            "test_protocol", "test_redis", "test_redis_cluster", "test_redis_prod",
            "test_redlock", "test_scale", "test_tls"},
    "valgrind": {"test_abuse", "test_elect", "test_elect_etcd", "test_elect_redis",
                 "test_elect_redlock", "test_etcd", "test_leases", "test_lockall",
                 "test_locks", "test_protocol", "test_redis", "test_redis_cluster",
                 "test_redlock", "test_tls"},
}
VALGRIND_LEFT_OUT = {"TestLocksRedis", "TestLocksRedlock", "TestLocksRedisCluster",
                     "TestLocksEtcd", "TestElectCluster", "TestElectSentinel",
                     "TestLockAllSentinel", "TestLockAllCluster"}


def only(suite, keep):
    """suite with the tests t for which keep(t) is true."""
    out = unittest.TestSuite()
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            out.addTest(only(t, keep))
        elif keep(t):
            out.addTest(t)
    return out


class TimedResult(unittest.TextTestResult):
    """unittest's verbose result, adding up the seconds each module took
    (a test's share runs from the end of the one before: its class's set-up
    counts with it)."""

    seconds = collections.Counter()
    last = time.monotonic()

    def stopTest(self, test):
        super().stopTest(test)
        now = time.monotonic()
        TimedResult.seconds[type(test).__module__] += now - TimedResult.last
        TimedResult.last = now


def main(argv):
    proc.install_signal_handlers()
    faulthandler.dump_traceback_later(
        float(os.environ.get("DLOCKD_TEST_LIMIT", "300")), exit=True)
    result_file = None
    patterns = []
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "-k" and args:
            patterns.append(args.pop(0))
        else:
            result_file = a
    loader = unittest.TestLoader()
    if patterns:
        loader.testNamePatterns = ["*%s*" % p for p in patterns]
    suite = loader.discover(HERE, pattern="test_*.py", top_level_dir=HERE)
    if env.WRAPPER:
        # failovers timed in seconds: under valgrind the daemons are too slow
        # for them, and the code they run is run under it by test_redis*
        print("not run under DLOCKD_WRAPPER: %s" % ", ".join(sorted(TIMED_ONLY)))
        suite = only(suite, lambda t: type(t).__module__ not in TIMED_ONLY)
    test_set = os.environ.get("DLOCKD_TEST_SET", "")
    if test_set:
        modules = CHECKED_SETS[test_set]
        left_out = VALGRIND_LEFT_OUT if test_set == "valgrind" else set()
        print("the %s set: %s" % (test_set, ", ".join(sorted(modules))))
        suite = only(suite, lambda t: type(t).__module__ in modules and
                     type(t).__name__ not in left_out)
    TimedResult.last = time.monotonic()
    runner = unittest.TextTestRunner(verbosity=2, stream=sys.stdout,
                                     resultclass=TimedResult)
    result = runner.run(suite)
    print("seconds per module (the slowest first):")
    for name, secs in TimedResult.seconds.most_common():
        print("  %7.1f %s" % (secs, name))
    bad = result.failures + result.errors
    # a failing setUpClass/tearDownClass is reported as an error of a
    # placeholder that testsRun does not count
    holders = sum(1 for t, _ in bad if not isinstance(t, unittest.TestCase))
    failed = len(bad) + len(result.skipped) + len(result.unexpectedSuccesses)
    passed = max(result.testsRun - (failed - holders), 0)
    for test, why in result.skipped:
        print("SKIPPED (counted as a failure): %s: %s" % (test, why))
    if result.testsRun == 0:
        failed += 1
        print("no test ran")
    print("python: %d passed, %d failed" % (passed, failed))
    sys.stdout.flush()
    if result_file:
        with open(result_file, "w") as f:
            f.write("%d %d\n" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
