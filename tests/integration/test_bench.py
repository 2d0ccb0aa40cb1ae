"""dlock-bench, the load generator of `make bench`: a fraction of a second of
each of its modes against a real dlockd or redis-server, and its answers to
bad arguments.

Only the sanity of its JSON report is checked (acquisitions were made, the
fairness index is in (0, 1], the percentiles are ordered, the counts add
up), never a speed: the machine is shared.
"""

import json
import subprocess

from dlocktest.cases import RedisTestCase
from dlocktest.daemon import Daemon
from dlocktest.env import DLOCK_BENCH
from dlocktest.proc import forget, spawn
from dlocktest.redis_server import commandstats

WINDOW = "300"  # ms of each run's measuring window
WARMUP = "100"


def bench(*args, timeout=20.0):
    """Run dlock-bench; returns (status, stdout, stderr) as str."""
    p = spawn([DLOCK_BENCH] + [str(a) for a in args], stdin=subprocess.DEVNULL,
              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        forget(p)
        raise AssertionError("dlock-bench %s did not finish within %.0f s" % (args, timeout))
    forget(p)
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")


class TestBench(RedisTestCase):

    def run_json(self, *args):
        """One short run; its report, checked for sanity."""
        rc, out, err = bench("--duration", WINDOW, "--warmup", WARMUP, "--hist", *args)
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertEqual(len(lines), 1, out)
        j = json.loads(lines[0])
        self.assertEqual(j["tool"], "dlock-bench")
        self.assertGreater(j["ops"], 0, j)
        self.assertGreaterEqual(j["ops_total"], j["ops"])
        self.assertGreater(j["rate"], 0)
        self.assertGreater(j["window_s"], 0.2)
        self.assertEqual(sum(j["per_client"]), j["ops"])
        self.assertEqual(len(j["per_client"]), j["clients"])
        self.assertGreater(j["jain_clients"], 0)
        self.assertLessEqual(j["jain_clients"], 1.0)
        w = j["wait_us"]
        self.assertEqual(w["n"], j["ops"])
        self.assertLessEqual(w["min"], w["p50"])
        self.assertLessEqual(w["p50"], w["p90"])
        self.assertLessEqual(w["p90"], w["p99"])
        self.assertLessEqual(w["p99"], w["max"])
        self.assertLessEqual(w["min"], w["mean"])
        self.assertLessEqual(w["mean"], w["max"])
        self.assertEqual(sum(n for _, _, n in j["hist"]), w["n"])
        for lo, hi, n in j["hist"]:
            self.assertLess(lo, hi)
            self.assertGreater(n, 0)
        self.assertGreaterEqual(j["tool_cpu_us"], 0)
        self.assertGreaterEqual(j["machine_busy_us"], 0)
        for name, v in j["cpu_us"].items():
            self.assertIsNotNone(v, name)
            self.assertGreaterEqual(v, 0, name)
        return j

    def memory_daemon(self):
        d = Daemon("", unix=False)
        self.addCleanup(d.stop_checked)
        return d.start()

    def test_dlock_contended_memory(self):
        d = self.memory_daemon()
        before = int(d.info()["grants_total"])
        j = self.run_json("--addr", d.addr(), "--workload", "contended", "--clients", 4,
                          "--hold-us", 200, "--cpu", "dlockd=%d" % d.pid)
        self.assertEqual((j["mode"], j["workload"], j["keys"]), ("dlock", "contended", 1))
        self.assertEqual(j["errors"], 0, j["first_error"])
        self.assertEqual(j["hold_us"], 200)
        self.assertGreaterEqual(j["wait_us"]["min"], 0)
        self.assertGreater(j["cpu_us"]["dlockd"], 0)
        # FIFO: nobody starves. At the end every client may be waiting: the
        # grant to the next one can be on its way (slow under valgrind).
        self.assertEqual(j["starved_clients"], 0, j["per_client"])
        self.assertLessEqual(j["waiting_at_end"], 4)
        self.assertLess(j["longest_waiting_us"], j["window_s"] * 1e6)
        # every acquisition the tool counted is a grant of the daemon
        self.assertGreaterEqual(int(d.info()["grants_total"]) - before, j["ops_total"])

    def test_hot_and_two_daemons(self):
        d1, d2 = self.memory_daemon(), self.memory_daemon()
        j = self.run_json("--addr", d1.addr(), "--addr", d2.addr(), "--workload", "hot",
                          "--clients", 8, "--keys", 50, "--hold-us", 0)
        self.assertEqual(j["keys"], 50)
        self.assertEqual(len(j["per_addr"]), 2)
        self.assertEqual(sum(j["per_addr"]), j["ops"])
        self.assertGreater(j["jain_addrs"], 0)
        self.assertLessEqual(j["jain_addrs"], 1.0)

    def test_direct_poll_and_ping_redis(self):
        r = self.start_redis()
        conn = self.redis_conn(r)
        before = commandstats(conn)
        j = self.run_json("--mode", "direct-poll", "--addr", r.address(), "--workload",
                          "contended", "--clients", 3, "--hold-us", 500, "--poll-ms", 5,
                          "--cpu", "redis=%d" % r.pid)
        after = commandstats(conn)
        self.assertEqual(j["errors"], 0, j["first_error"])
        self.assertEqual(j["lost"], 0)
        self.assertGreaterEqual(j["lock_requests"], j["ops"])
        self.assertGreaterEqual(after.get("set", 0) - before.get("set", 0), j["ops_total"])
        self.assertGreaterEqual(after.get("evalsha", 0) - before.get("evalsha", 0),
                                j["ops_total"] - 3)
        j = self.run_json("--mode", "direct", "--addr", r.address(), "--clients", 2)
        self.assertEqual(j["errors"], 0, j["first_error"])
        j = self.run_json("--mode", "ping", "--addr", r.address(), "--clients", 2)
        self.assertEqual((j["unit"], j["errors"]), ("ping", 0))

    def test_lockseq_sets(self):
        d = self.memory_daemon()
        before = int(d.info()["grants_total"])
        j = self.run_json("--addr", d.addr(), "--mode", "lockseq", "--clients", 3)
        self.assertEqual((j["unit"], j["keys"], j["set_min"], j["set_max"]), ("set", 6, 2, 2))
        self.assertEqual(j["errors"], 0, j["first_error"])
        self.assertIsNone(j["wait_ms"])
        self.assertEqual((j["stuck"], j["not_granted"]), (0, 0))
        c = j["cycle_us"]
        self.assertGreater(c["n"], 0)
        self.assertLessEqual(c["p50"], c["p99"])
        self.assertLessEqual(c["p99"], c["max"])
        self.assertGreaterEqual(c["p50"], j["wait_us"]["p50"])
        # a LOCK per key: two grants of the daemon per set
        self.assertGreaterEqual(int(d.info()["grants_total"]) - before, 2 * j["ops_total"])

    def test_lockall_sets(self):
        d = self.memory_daemon()
        before = int(d.info()["lockall_granted_total"])
        j = self.run_json("--addr", d.addr(), "--mode", "lockall", "--clients", 2,
                          "--set", 3, "--cpu", "dlockd=%d" % d.pid)
        self.assertEqual((j["mode"], j["unit"], j["keys"]), ("lockall", "set", 6))
        self.assertEqual(j["errors"], 0, j["first_error"])
        # one request per set (give or take those the window's ends cut)
        self.assertLessEqual(abs(j["lock_requests"] - j["ops"]), 2)
        self.assertGreater(j["cycle_us"]["n"], 0)
        # one LOCKALL per set
        self.assertGreaterEqual(int(d.info()["lockall_granted_total"]) - before,
                                j["ops_total"])

    def test_lockall_crowd(self):
        """Sets of distinct keys in random orders: LOCKALL takes them in one
        order, so nobody is stuck, and every set is released."""
        d1, d2 = self.memory_daemon(), self.memory_daemon()
        j = self.run_json("--addr", d1.addr(), "--addr", d2.addr(), "--mode", "lockall",
                          "--workload", "hot", "--keys", 5, "--zipf", 0, "--set", "2-3",
                          "--wait-ms", 1000, "--margin-ms", 2000, "--hold-us", 200,
                          "--clients", 6)
        self.assertEqual(j["errors"], 0, j["first_error"])
        self.assertEqual((j["stuck"], j["unanswered_at_end"]), (0, 0))
        self.assertLess(j["longest_unanswered_us"], 3000 * 1000)
        for d in (d1, d2):
            info = d.info()
            self.assertEqual(info["lockall_waiting"], "0")
            self.assertEqual(info["locks_held"], "0")

    def test_lockseq_crowd_waits(self):
        """Random orders deadlock lockseq's LOCKs until WAIT runs out: nil
        answers, not errors, and each request answered within WAIT plus the
        margin; after the window the clients finish their sets."""
        d = self.memory_daemon()
        j = self.run_json("--addr", d.addr(), "--mode", "lockseq", "--workload", "hot",
                          "--keys", 4, "--zipf", 0, "--set", "2-3", "--wait-ms", 50,
                          "--margin-ms", 2000, "--hold-us", 500, "--clients", 6)
        self.assertEqual((j["set_min"], j["set_max"], j["wait_ms"]), (2, 3, 50))
        self.assertEqual(j["errors"], 0, j["first_error"])
        self.assertEqual((j["stuck"], j["unanswered_at_end"]), (0, 0))
        self.assertLess(j["longest_unanswered_us"], 2050 * 1000)
        self.assertLess(j["drain_s"], 3 * 0.05 + 2 * 2.0 + 1)
        self.assertGreaterEqual(j["not_granted_total"], j["not_granted"])

    def test_hold_limit(self):
        j = self.run_json("--mode", "hold", "--hold-us", 1000)
        self.assertEqual(j["addrs"], [])
        self.assertGreater(j["wait_us"]["min"], 900)   # a hold is about as long as asked
        self.assertLess(j["rate"], 1100)

    def test_usage_and_bad_arguments(self):
        rc, out, err = bench("--help")
        self.assertEqual(rc, 0, err)
        self.assertIn("usage: dlock-bench", out)
        for args, msg in [(["--mode", "fast"], "--mode: unknown value 'fast'"),
                          (["--clients", "0"], "--clients: 0 is out of range"),
                          (["--clients", "x"], "'x' is not an integer"),
                          (["--addr", "nohost"], "--addr 'nohost'"),
                          (["--mode", "direct", "--workload", "contended"],
                           "direct is for the uncontended workload"),
                          (["--mode", "hold"], "--mode hold needs --hold-us"),
                          (["--keys", "10"], "--keys is for the hot workload"),
                          (["--set", "2"], "--set is for the lockall and lockseq modes"),
                          (["--mode", "lockall", "--set", "3-2"], "--set: 2 is out of range"),
                          (["--mode", "lockall", "--set", "17"], "--set: 17 is out of range"),
                          (["--mode", "ping", "--wait-ms", "5"],
                           "--wait-ms is for the dlock, lockall and lockseq modes"),
                          (["--mode", "lockall", "--workload", "hot", "--keys", "2",
                            "--set", "3"], "--keys 2 cannot make sets of 3 distinct keys"),
                          (["--key-file", "/nonexistent"], "--key-file '/nonexistent'"),
                          (["--cpu", "nopid"], "expected NAME=PID"),
                          (["--bogus"], "unknown option --bogus"),
                          (["--clients"], "needs a value"),
                          (["extra"], "unexpected argument 'extra'")]:
            rc, out, err = bench(*args)
            self.assertEqual(rc, 2, (args, out, err))
            self.assertEqual(out, "")
            self.assertIn(msg, err, args)
            self.assertIn("--help", err, args)
        d = self.memory_daemon()
        port = d.port
        d.stop_checked()
        rc, out, err = bench("--addr", "127.0.0.1:%d" % port)
        self.assertEqual(rc, 1, err)
        self.assertIn("cannot connect to 127.0.0.1:%d" % port, err)
