"""Run every test_*.py of this directory with unittest.

usage: runtests.py [RESULT_FILE] [-k PATTERN]...

Prints unittest's verbose report and a last line "python: N passed, M failed";
writes "N M" to RESULT_FILE if given. Skipped tests count as failures (a
missing binary or server must not pass silently). Exits 0 only if every test
passed. A watchdog ends the run if it takes longer than DLOCKD_TEST_LIMIT
seconds (default 300).
"""

import faulthandler
import os
import sys
import unittest

from dlocktest import env, proc

HERE = os.path.dirname(os.path.abspath(__file__))


# Suites left out under a wrapper (valgrind): Redis failovers with deadlines.
TIMED_ONLY = {"test_redis_sentinel", "test_redis_dns"}


def without_modules(suite, names):
    """suite without the tests of the modules named."""
    out = unittest.TestSuite()
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            out.addTest(without_modules(t, names))
        elif type(t).__module__ not in names:
            out.addTest(t)
    return out


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
        suite = without_modules(suite, TIMED_ONLY)
    runner = unittest.TextTestRunner(verbosity=2, stream=sys.stdout)
    result = runner.run(suite)
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
