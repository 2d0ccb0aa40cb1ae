"""dlockd driven by command-line tools: redis-cli and the dlock CLI."""

import os
import re
import signal
import subprocess
import time
import unittest

from harness import (DLOCK, Daemon, DaemonTestCase, in_thread, kill_pid, read_line, reap,
                     redis_cli, run_dlock, spawn, track_pid, unique_key,
                     wait_until)


class TestRedisCli(DaemonTestCase):

    def cli(self, *args, **kw):
        return redis_cli("-p", self.daemon.port, *args, **kw)

    def test_lock_raw_output(self):
        key = unique_key()
        rc, out, err = self.cli("LOCK", key, "WAIT", "5000")
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertEqual(len(lines), 3, out)
        self.assertRegex(lines[0], r"^[0-9a-f]{32}$")
        self.assertRegex(lines[1], r"^[1-9]\d*$")
        self.assertEqual(lines[2], "30000")
        # redis-cli has exited: its session lock is gone
        self.wait_status(key, mode=b"free", fence=int(lines[1]))

    def test_formatted_output(self):
        key = unique_key()
        rc, out, err = self.cli("--no-raw", "LOCK", key, "TTL", "600000", "DETACH")
        self.assertEqual(rc, 0, err)
        m = re.fullmatch(r'1\) "([0-9a-f]{32})"\n2\) \(integer\) (\d+)\n'
                         r'3\) \(integer\) 600000\n', out)
        self.assertIsNotNone(m, out)
        token, fence = m.group(1), int(m.group(2))
        rc, out, err = self.cli("--no-raw", "STATUS", key)
        self.assertEqual(rc, 0, err)
        m = re.fullmatch(
            r' 1\) "mode"\n 2\) "exclusive"\n 3\) "holders"\n 4\) \(integer\) 1\n'
            r' 5\) "waiters"\n 6\) \(integer\) 0\n 7\) "fence"\n 8\) \(integer\) (\d+)\n'
            r' 9\) "ttl_ms"\n10\) \(integer\) (\d+)\n11\) "limit"\n12\) \(integer\) 0\n'
            r'13\) "backend"\n14\) "local"\n', out)
        self.assertIsNotNone(m, out)
        self.assertEqual(int(m.group(1)), fence)
        self.assertTrue(590000 < int(m.group(2)) <= 600000)
        rc, out, err = self.cli("-3", "--no-raw", "STATUS", key)
        self.assertEqual(rc, 0, err)
        m = re.fullmatch(
            r'1# "mode" => "exclusive"\n2# "holders" => \(integer\) 1\n'
            r'3# "waiters" => \(integer\) 0\n4# "fence" => \(integer\) (\d+)\n'
            r'5# "ttl_ms" => \(integer\) \d+\n6# "limit" => \(integer\) 0\n'
            r'7# "backend" => "local"\n', out)
        self.assertIsNotNone(m, out)
        rc, out, err = self.cli("--no-raw", "VALIDATE", key, str(fence))
        self.assertEqual(out, "(integer) 1\n")
        rc, out, err = self.cli("UNLOCK", key, token)
        self.assertEqual((rc, out), (0, "0\n"), err)
        rc, out, err = self.cli("--no-raw", "UNLOCK", key)
        self.assertTrue(out.startswith("(error) NOTHELD key is not held by this session"), out)
        rc, out, err = self.cli("--no-raw", "LOCK", key, "WAIT", "0", "TTL", "5")
        self.assertRegex(out, r"^\(error\) ERR .*TTL")

    def test_one_session_from_stdin(self):
        key = unique_key()
        script = "LOCK %s TTL 10000\nLOCK %s\nLOCKS\nUNLOCK %s\nUNLOCK %s\nUNLOCK %s\n" % (
            (key,) * 5)
        rc, out, err = self.cli("--no-raw", input=script)
        self.assertEqual(rc, 0, err)
        m = re.fullmatch(
            r'1\) "([0-9a-f]{32})"\n2\) \(integer\) (\d+)\n3\) \(integer\) 10000\n'
            r'1\) "\1"\n2\) \(integer\) \2\n3\) \(integer\) 10000\n'
            r'1\) 1\) "%s"\n   2\) "\1"\n   3\) \(integer\) \2\n   4\) "exclusive"\n'
            r'   5\) \(integer\) 2\n'
            r'\(integer\) 1\n\(integer\) 0\n\(error\) NOTHELD [^\n]*\n' % re.escape(key), out)
        self.assertIsNotNone(m, out)

    def test_resp3_null(self):
        key = unique_key()
        holder = self.raw()
        holder.cmd("LOCK", key)
        rc, out, err = self.cli("-3", "--no-raw", "LOCK", key, "WAIT", "0")
        self.assertEqual(out, "(nil)\n")
        rc, out, err = self.cli("--no-raw", "LOCK", key, "WAIT", "0")
        self.assertEqual(out, "(nil)\n")

    def test_hello_and_info(self):
        rc, out, err = self.cli("--no-raw", "HELLO", "3")
        self.assertEqual(rc, 0, err)
        self.assertIn('"server" => "dlockd"', out)
        rc, out, err = self.cli("INFO")
        self.assertEqual(rc, 0, err)
        self.assertIn("process_id:%d" % self.daemon.pid, out)


class TestDlockCli(DaemonTestCase):

    def dlock(self, *args, env=None, timeout=10.0):
        e = {"DLOCK_ADDR": self.daemon.addr(), "DLOCK_PASSWORD": ""}
        e.update(env or {})
        return run_dlock(args, env=e, timeout=timeout)

    def popen(self, *args, **kw):
        """Start dlock in the background (its pipes as asked in kw)."""
        self.assertTrue(os.path.exists(DLOCK), "dlock binary missing: %s" % DLOCK)
        env = dict(os.environ, DLOCK_ADDR=self.daemon.addr(), DLOCK_PASSWORD="")
        return spawn([DLOCK] + [str(a) for a in args], env=env, **kw)

    def test_ping_and_info(self):
        rc, out, err = self.dlock("ping")
        self.assertEqual((rc, out), (0, "PONG\n"), err)
        rc, out, err = self.dlock("info")
        self.assertEqual(rc, 0, err)
        self.assertIn("version:0.1.0", out.splitlines())
        self.assertIn("process_id:%d" % self.daemon.pid, out.splitlines())
        rc, out, err = self.dlock("-a", "unix:" + self.daemon.sock, "ping")
        self.assertEqual((rc, out), (0, "PONG\n"), err)
        rc, out, err = self.dlock("--addr", self.daemon.addr(), "ping",
                                  env={"DLOCK_ADDR": "127.0.0.1:1"})
        self.assertEqual((rc, out), (0, "PONG\n"), err)

    def test_run_sees_lock(self):
        key = unique_key()
        p = self.popen("run", key, "--", "sh", "-c",
                       'printf "%s\\n%s\\n%s\\n" "$DLOCK_KEY" "$DLOCK_TOKEN" "$DLOCK_FENCE";'
                       ' read line; exit 7',
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            self.assertEqual(read_line(p.stdout), key + "\n")
            token = read_line(p.stdout).strip()
            fence = int(read_line(p.stdout))
            self.assertRegex(token, r"^[0-9a-f]{32}$")
            st = self.status(key)
            self.assertEqual((st["mode"], st["holders"], st["fence"]), (b"exclusive", 1, fence))
            self.assertEqual(self.client().execute_command("VALIDATE", key, fence), 1)
            p.stdin.write(b"go\n")
            p.stdin.close()
            self.assertEqual(reap(p), 7)
        finally:
            if p.poll() is None:
                p.kill()
                reap(p)
            p.stdout.close()
        self.assertEqual(self.status(key)["mode"], b"free")

    def test_run_exit_status(self):
        key = unique_key()
        for cmd, want in ((["true"], 0), (["false"], 1), (["sh", "-c", "exit 3"], 3),
                          (["sh", "-c", "kill -TERM $$"], 128 + signal.SIGTERM),
                          (["no-such-command-for-dlock"], 127)):
            rc, out, err = self.dlock("run", key, "--", *cmd)
            self.assertEqual(rc, want, (cmd, err))
        self.assertEqual(self.status(key)["mode"], b"free")

    def test_run_modes(self):
        key = unique_key()
        other = self.client()
        other.execute_command("LOCK", key, "SHARED")
        rc, out, err = self.dlock("run", "--shared", "--wait", "0", key, "--", "true")
        self.assertEqual(rc, 0, err)
        rc, out, err = self.dlock("run", "--wait", "0", key, "--", "true")
        self.assertEqual(rc, 75, err)
        sem = unique_key()
        other.execute_command("LOCK", sem, "LIMIT", 2)
        rc, out, err = self.dlock("run", "--limit", "2", "--wait", "0", sem, "--",
                                  "sh", "-c", 'test -n "$DLOCK_FENCE"')
        self.assertEqual(rc, 0, err)

    def test_run_not_granted(self):
        key = unique_key()
        holder = self.client()
        holder.execute_command("LOCK", key)
        marker = os.path.join(self.daemon.dir, "ran-" + str(time.monotonic_ns()))
        t0 = time.monotonic()
        rc, out, err = self.dlock("run", "--wait", "200", key, "--", "touch", marker)
        took = time.monotonic() - t0
        self.assertEqual(rc, 75, err)
        self.assertGreaterEqual(took, 0.18)
        self.assertIn("not granted within 200 ms", err)
        self.assertFalse(os.path.exists(marker), "the command ran without the lock")
        rc, out, err = self.dlock("run", "--wait=0", key, "--", "touch", marker)
        self.assertEqual(rc, 75, err)
        self.assertFalse(os.path.exists(marker))
        self.assertEqual(self.status(key)["waiters"], 0)

    def test_run_waits_for_release(self):
        key = unique_key()
        holder = self.client()
        holder.execute_command("LOCK", key)
        p = self.popen("run", "--wait", "5000", key, "--", "true",
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.wait_status(key, "(dlock queued)", waiters=1)
            self.assertIsNone(p.poll())
            self.assertEqual(holder.execute_command("UNLOCK", key), 0)
            self.assertEqual(reap(p), 0)
        finally:
            if p.poll() is None:
                p.kill()
                reap(p)

    def test_lock_unlock_by_token(self):
        key = unique_key()
        rc, out, err = self.dlock("lock", "--ttl", "60000", key)
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertEqual(len(lines), 2, out)
        token, fence = lines[0], int(lines[1])
        self.assertRegex(token, r"^[0-9a-f]{32}$")
        # detached: held after dlock exited
        st = self.status(key)
        self.assertEqual((st["mode"], st["holders"], st["fence"]), (b"exclusive", 1, fence))
        self.assertTrue(50000 < st["ttl_ms"] <= 60000, st)
        rc, out, err = self.dlock("lock", "--wait", "0", key)
        self.assertEqual(rc, 75, err)
        rc, out, err = self.dlock("validate", key, fence)
        self.assertEqual((rc, out), (0, "1\n"), err)
        rc, out, err = self.dlock("extend", key, "120000", token)
        self.assertEqual((rc, out), (0, "120000\n"), err)
        self.assertGreater(self.status(key)["ttl_ms"], 60000)
        rc, out, err = self.dlock("unlock", key, token)
        self.assertEqual((rc, out), (0, "0\n"), err)
        self.assertEqual(self.status(key)["mode"], b"free")
        rc, out, err = self.dlock("unlock", key, token)
        self.assertEqual(rc, 1)
        self.assertIn("NOTHELD", out + err)
        rc, out, err = self.dlock("validate", key, fence)
        self.assertEqual((rc, out), (1, "0\n"), err)

    def test_lock_default_ttl(self):
        key = unique_key()
        rc, out, err = self.dlock("lock", key)
        self.assertEqual(rc, 0, err)
        self.assertTrue(50000 < self.status(key)["ttl_ms"] <= 60000)
        self.dlock("unlock", key, out.split()[0])

    def test_status(self):
        key = unique_key()
        rc, out, err = self.dlock("status", key)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, "mode: free\nholders: 0\nwaiters: 0\nfence: 0\n"
                              "ttl_ms: -1\nlimit: 0\nbackend: local\n")
        g = self.client().execute_command("LOCK", key, "LIMIT", 3)
        rc, out, err = self.dlock("status", key)
        self.assertEqual(out, "mode: semaphore\nholders: 1\nwaiters: 0\nfence: %d\n"
                              "ttl_ms: -1\nlimit: 3\nbackend: local\n" % g[1])

    def test_errors(self):
        rc, out, err = self.dlock("frobnicate")
        self.assertEqual(rc, 2)
        rc, out, err = self.dlock("run", "--shared", "--limit", "2", "k", "--", "true")
        self.assertEqual(rc, 2)
        rc, out, err = self.dlock("ping", env={"DLOCK_ADDR": "127.0.0.1:1"})
        self.assertEqual(rc, 69)
        rc, out, err = self.dlock("--version")
        self.assertEqual(rc, 0)
        self.assertIn("0.1.0", out)

    def test_killed_dlock_run_releases(self):
        key = unique_key()
        p = self.popen("run", key, "--", "sh", "-c", "echo $$; exec sleep 60",
                       stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        child = None
        try:
            child = int(read_line(p.stdout))
            track_pid(child)
            self.assertEqual(self.status(key)["holders"], 1)
            waiter = in_thread(self.client().execute_command, "LOCK", key, "WAIT", 5000)
            self.wait_status(key, waiters=1)
            t0 = time.monotonic()
            os.kill(p.pid, signal.SIGKILL)
            self.assertIsNotNone(waiter.result(5))
            took = waiter.done_at - t0
            self.assertLess(took, 0.5, "lock released %.3f s after SIGKILL" % took)
            self.assertEqual(reap(p), -signal.SIGKILL)

            # dlock documents that its command gets SIGTERM when it dies
            def child_gone():
                try:
                    with open("/proc/%d/stat" % child) as f:
                        return f.read().split(") ")[1][0] == "Z"
                except FileNotFoundError:
                    return True
            wait_until(child_gone, 3, 0.01, "the command of the killed dlock to end")
        finally:
            if p.poll() is None:
                p.kill()
                reap(p)
            p.stdout.close()
            if child is not None:
                kill_pid(child)


class TestDlockCliPassword(DaemonTestCase):
    CONFIG = 'auth:\n  password: "cli-pw"\n'

    def test_password(self):
        addr = {"DLOCK_ADDR": self.daemon.addr()}
        rc, out, err = run_dlock(["ping"], env=dict(addr, DLOCK_PASSWORD="cli-pw"))
        self.assertEqual((rc, out), (0, "PONG\n"), err)
        rc, out, err = run_dlock(["-p", "cli-pw", "status", "k"],
                                 env=dict(addr, DLOCK_PASSWORD=""))
        self.assertEqual(rc, 0, err)
        rc, out, err = run_dlock(["-p", "wrong", "status", "k"],
                                 env=dict(addr, DLOCK_PASSWORD=""))
        self.assertEqual(rc, 1, out + err)
        rc, out, err = run_dlock(["status", "k"], env=dict(addr, DLOCK_PASSWORD=""))
        self.assertEqual(rc, 1, out + err)
        self.assertIn("NOAUTH", out + err)


if __name__ == "__main__":
    import unittest
    unittest.main()


class TestDlockRunLosesDaemon(unittest.TestCase):
    """When the connection to dlockd drops, the lock is gone: `dlock run`
    stops its command and fails, as `consul lock` does."""

    def test_daemon_stops_under_run(self):
        d = Daemon().start()
        env = dict(os.environ, DLOCK_ADDR=d.addr(), DLOCK_PASSWORD="")
        p = spawn([DLOCK, "run", unique_key(), "--", "sh", "-c",
                   'trap "echo terminated; exit 0" TERM; echo started; '
                   'while :; do sleep 0.05; done'],
                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            self.assertEqual(read_line(p.stdout), "started\n")
            d.stop_ok(self)
            rc = reap(p, 10)
            self.assertEqual(rc, 1)
            self.assertEqual(p.stdout.read(), b"terminated\n")
            self.assertIn(b"dlock", p.stderr.read())
        finally:
            if p.poll() is None:
                p.kill()
                reap(p)
            p.stdout.close()
            p.stderr.close()
            if d.running():
                d.stop()
