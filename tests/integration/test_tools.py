"""dlockd driven by command-line tools: redis-cli and the dlock CLI."""

import json
import os
import re
import select
import signal
import socket
import subprocess
import threading
import time
import unittest

from dlocktest.cases import DaemonTestCase, DlockCliCase, RedisTestCase
from dlocktest.daemon import Daemon, run_dlock
from dlocktest.env import DLOCK, PYTHON, SLOWDOWN, new_dir, unique_key
from dlocktest.proc import (end_process, kill_pid, read_line, reap, spawn, track_pid,
                            wait_until)
from dlocktest.redis_server import redis_cli
from dlocktest.resp import pairs


# dlock's own exit statuses (dlock(1), EXIT STATUS)
EX_INVALID = 1
EX_USAGE = 64
EX_REFUSED = 65
EX_NOHOST = 68
EX_UNAVAILABLE = 69
EX_TEMPFAIL = 75
EX_PROTOCOL = 76
EX_NOPERM = 77
EX_LOST = 79

ADMIN_PASSWORD = "tools admin"  # auth.admin_password of the daemons that need one


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
        m = self.assertFullMatch(r'1\) "([0-9a-f]{32})"\n2\) \(integer\) (\d+)\n'
                                 r'3\) \(integer\) 600000\n', out)
        token, fence = m.group(1), int(m.group(2))
        rc, out, err = self.cli("--no-raw", "STATUS", key)
        self.assertEqual(rc, 0, err)
        m = self.assertFullMatch(
            r' 1\) "mode"\n 2\) "exclusive"\n 3\) "holders"\n 4\) \(integer\) 1\n'
            r' 5\) "waiters"\n 6\) \(integer\) 0\n 7\) "fence"\n 8\) \(integer\) (\d+)\n'
            r' 9\) "ttl_ms"\n10\) \(integer\) (\d+)\n11\) "limit"\n12\) \(integer\) 0\n'
            r'13\) "backend"\n14\) "local"\n', out)
        self.assertEqual(int(m.group(1)), fence)
        self.assertTrue(590000 < int(m.group(2)) <= 600000)
        rc, out, err = self.cli("-3", "--no-raw", "STATUS", key)
        self.assertEqual(rc, 0, err)
        m = self.assertFullMatch(
            r'1# "mode" => "exclusive"\n2# "holders" => \(integer\) 1\n'
            r'3# "waiters" => \(integer\) 0\n4# "fence" => \(integer\) (\d+)\n'
            r'5# "ttl_ms" => \(integer\) \d+\n6# "limit" => \(integer\) 0\n'
            r'7# "backend" => "local"\n', out)
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
        self.assertFullMatch(
            r'1\) "([0-9a-f]{32})"\n2\) \(integer\) (\d+)\n3\) \(integer\) 10000\n'
            r'1\) "\1"\n2\) \(integer\) \2\n3\) \(integer\) 10000\n'
            r'1\) 1\) "%s"\n   2\) "\1"\n   3\) \(integer\) \2\n   4\) "exclusive"\n'
            r'   5\) \(integer\) 2\n'
            r'\(integer\) 1\n\(integer\) 0\n\(error\) NOTHELD [^\n]*\n' % re.escape(key), out)

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


class TestDlockCli(DlockCliCase):

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
        self.assertEqual(rc, EX_REFUSED)
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
        self.assertEqual(rc, EX_USAGE)
        rc, out, err = self.dlock("run", "--shared", "--limit", "2", "k", "--", "true")
        self.assertEqual(rc, EX_USAGE)
        rc, out, err = self.dlock("ping", env={"DLOCK_ADDR": "127.0.0.1:1"})
        self.assertEqual(rc, EX_NOHOST)
        rc, out, err = self.dlock("--version")
        self.assertEqual(rc, 0)
        self.assertIn("0.1.0", out)

    def test_run_option_forms(self):
        key = unique_key()
        echo = ["sh", "-c", 'echo "$DLOCK_KEY" "$@"', "sh"]
        for args in (["run", "--wait", "5000", key, "--"], ["run", key, "--wait", "5000", "--"],
                     ["run", "--ttl=5000", key, "--wait=5000", "--"],
                     ["run", key, "-v", "--"], ["run", key]):
            rc, out, err = self.dlock(*(args + echo + ["a", "--wait"]))
            self.assertEqual((rc, out), (0, key + " a --wait\n"), (args, err))
        # after KEY, the first word that is not an option starts COMMAND
        rc, out, err = self.dlock("run", key, "--wait", "100", "echo", "--", "--ttl", "x")
        self.assertEqual((rc, out), (0, "-- --ttl x\n"), err)
        # a "--" before KEY: a key that starts with a dash
        rc, out, err = self.dlock("run", "--", "-" + key, "--wait", "100", "--", *echo)
        self.assertEqual((rc, out), (0, "-%s\n" % key), err)
        # options after KEY are in force: --wait bounds the wait
        self.client().execute_command("LOCK", key)
        t0 = time.monotonic()
        rc, out, err = self.dlock("run", key, "--wait", "200", "--", "echo", "ran")
        self.assertEqual((rc, out), (EX_TEMPFAIL, ""), err)
        self.assertGreaterEqual(time.monotonic() - t0, 0.18)
        self.assertIn("not granted within 200 ms", err)

    def test_run_usage_errors(self):
        key = unique_key()
        for args, why in ((["run", key], "missing COMMAND"),
                          (["run", key, "--wait", "100"], "missing COMMAND"),
                          (["run", key, "--"], "missing COMMAND"),
                          (["run", "--wait", "100"], "missing KEY"),
                          (["run", key, "--frob", "--", "true"], "unknown option --frob"),
                          (["run", "--frob", key, "--", "true"], "unknown option --frob"),
                          (["run", key, "--wait", "--", "true"], "--wait: not a number"),
                          (["run", key, "--ttl"], "option --ttl needs a value"),
                          (["run", "", "--", "true"], "KEY is empty"),
                          (["lock", key, "extra"], "unexpected argument extra"),
                          (["lock", key, "--"], "unexpected argument --")):
            rc, out, err = self.dlock(*args)
            self.assertEqual(rc, EX_USAGE, (args, err))
            self.assertIn("dlock: " + why, err, args)
            self.assertIn("usage: dlock", err, args)
        self.assertEqual(self.status(key)["mode"], b"free")

    def test_lock_options_after_key(self):
        key = unique_key()
        rc, out, err = self.dlock("lock", key, "--ttl", "40000", "--wait", "0")
        self.assertEqual(rc, 0, err)
        self.assertTrue(30000 < self.status(key)["ttl_ms"] <= 40000)
        rc, out2, err = self.dlock("lock", key, "--wait", "0")
        self.assertEqual(rc, EX_TEMPFAIL, err)
        self.dlock("unlock", key, out.split()[0])

    def test_own_exit_statuses(self):
        key = unique_key()
        # refused: a semaphore locked with another limit
        self.client().execute_command("LOCK", key, "LIMIT", 3)
        rc, out, err = self.dlock("run", "--limit", "2", key, "--", "true")
        self.assertEqual(rc, EX_REFUSED, err)
        rc, out, err = self.dlock("run", key, "--", "true", env={"DLOCK_ADDR": "127.0.0.1:1"})
        self.assertEqual(rc, EX_NOHOST, err)
        # the command's own statuses are passed on
        rc, out, err = self.dlock("run", unique_key(), "--", "sh", "-c", "exit 1")
        self.assertEqual((rc, err), (1, ""))
        rc, out, err = self.dlock("--help")
        for code in (64, 65, 68, 69, 75, 76, 77, 79):
            self.assertRegex(out, r"\n +%d  \S" % code)

    def test_run_verbose(self):
        key = unique_key()
        holder = self.client()
        holder.execute_command("CLIENT", "SETNAME", "holder-1")
        fence = holder.execute_command("LOCK", key, "TTL", 20000)[1]
        p = self.popen("run", "-v", key, "--wait", "5000", "--", "true",
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            line = read_line(p.stderr)
            # STATUS key FULL, or plain STATUS where dlockd predates FULL
            self.assertRegex(line, r"^dlock: waiting for %s \(held exclusive by .*fence %d.*; "
                             r"0 ahead of us\)\n$" % (re.escape(key), fence))
            self.wait_status(key, "(dlock queued)", waiters=1)
            time.sleep(0.2)
            self.assertEqual(holder.execute_command("UNLOCK", key), 0)
            self.assertEqual(reap(p), 0)
            m = re.match(r"^dlock: got %s \(fence (\d+)\) after (\d+\.\d) s\n$" % re.escape(key),
                         read_line(p.stderr))
            self.assertIsNotNone(m)
            self.assertGreater(int(m.group(1)), fence)
            self.assertGreaterEqual(float(m.group(2)), 0.2)
        finally:
            end_process(p, p.stderr)
        # granted at once: no waiting line
        rc, out, err = self.dlock("run", "-v", key, "--", "true")
        self.assertEqual(rc, 0, err)
        self.assertRegex(err, r"^dlock: got %s \(fence \d+\) after 0\.\d s\n$" % re.escape(key))

    def test_killed_dlock_run_releases(self):
        key = unique_key()
        p = self.popen("run", key, "--", "sh", "-c", "echo $$; exec sleep 60",
                       stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        child = None
        try:
            child = int(read_line(p.stdout))
            track_pid(child)
            self.assertEqual(self.status(key)["holders"], 1)
            self.assertGrantedAfterKill(p.pid, key)
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

    # ---- campaign, leader, observe ----

    def test_campaign_runs_as_leader(self):
        key = unique_key()
        p = self.popen("campaign", key, "10.0.0.5:8080", "--", "sh", "-c",
                       'printf "%s\\n%s\\n%s\\n" "$DLOCK_KEY" "$DLOCK_TOKEN" "$DLOCK_FENCE";'
                       ' read line; exit 7',
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            self.assertEqual(read_line(p.stdout), key + "\n")
            self.assertRegex(read_line(p.stdout), r"^[0-9a-f]{32}\n$")
            term = int(read_line(p.stdout))
            value, lterm, rev, kind, holders = self.client().execute_command("LEADER", key)
            self.assertEqual((value, lterm, kind, holders),
                             (b"10.0.0.5:8080", term, b"exclusive", 1))
            rc, out, err = self.dlock("leader", key)
            self.assertEqual(rc, 0, err)
            self.assertEqual(out, 'value: "10.0.0.5:8080"\nterm: %d\nrevision: %d\n'
                                  'kind: exclusive\nholders: 1\n' % (term, rev))
            p.stdin.write(b"go\n")
            p.stdin.close()
            self.assertEqual(reap(p), 7)
        finally:
            end_process(p, p.stdout)
        # resigned when the command ended
        value, lterm, rev2, kind, holders = self.client().execute_command("LEADER", key)
        self.assertEqual((value, lterm, kind, holders), (None, 0, b"free", 0))
        self.assertGreater(rev2, rev)

    def test_campaign_waits_for_resign(self):
        key = unique_key()
        first = self.popen("campaign", key, "first", "--", "sh", "-c",
                           'echo "$DLOCK_FENCE"; read line',
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        second = None
        try:
            term1 = int(read_line(first.stdout))
            # led: one that will not wait is not granted, and does not run
            rc, out, err = self.dlock("campaign", "--wait", "0", key, "second", "--",
                                      "echo", "ran")
            self.assertEqual((rc, out), (EX_TEMPFAIL, ""), err)
            self.assertIn("not granted", err)
            second = self.popen("campaign", key, "second", "--", "sh", "-c",
                                'echo "$DLOCK_FENCE"; exec "$0" leader --json "$DLOCK_KEY"',
                                DLOCK, stdout=subprocess.PIPE)
            self.wait_status(key, "(the second campaign queued)", waiters=1)
            self.assertIsNone(second.poll())
            first.stdin.write(b"go\n")
            first.stdin.close()
            self.assertEqual(reap(first), 0)
            term2 = int(read_line(second.stdout))
            self.assertGreater(term2, term1)
            led = json.loads(read_line(second.stdout))
            self.assertEqual(led, {"key": key, "value": "second", "term": term2,
                                   "revision": led["revision"], "kind": "exclusive",
                                   "holders": 1})
            self.assertEqual(reap(second), 0)
        finally:
            end_process(first, first.stdout)
            if second is not None:
                end_process(second, second.stdout)
        self.assertEqual(self.status(key)["mode"], b"free")

    def test_leader(self):
        key = unique_key()
        rc, out, err = self.dlock("leader", key)
        self.assertEqual(rc, 0, err)
        m = self.assertFullMatch(r"value: none\nterm: 0\nrevision: (\d+)\nkind: free\n"
                                 r"holders: 0\n", out)
        rev = int(m.group(1))
        # a value with a quote, a control byte and UTF-8 text
        holder = self.client()
        term = holder.execute_command("CAMPAIGN", key, 'a"\x01\u00e9'.encode())[1]
        rc, out, err = self.dlock("leader", key)
        self.assertEqual(rc, 0, err)
        m = self.assertFullMatch(r'value: "a\\"\\x01\u00e9"\nterm: %d\nrevision: (\d+)\n'
                                 r"kind: exclusive\nholders: 1\n" % term, out)
        self.assertGreater(int(m.group(1)), rev)
        rc, out, err = self.dlock("leader", "--json", key)
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(out), {"key": key, "value": 'a"\x01\u00e9', "term": term,
                                           "revision": int(m.group(1)), "kind": "exclusive",
                                           "holders": 1})
        # a plain lock: held, no value
        self.assertEqual(holder.execute_command("RESIGN", key), 0)
        fence = holder.execute_command("LOCK", key)[1]
        rc, out, err = self.dlock("leader", key, "--json")
        self.assertEqual(rc, 0, err)
        led = json.loads(out)
        self.assertEqual((led["value"], led["term"], led["kind"], led["holders"]),
                         (None, fence, "exclusive", 1))

    def test_observe_json_sees_change(self):
        key = unique_key()
        p = self.popen("observe", "--json", "--count", "2", key, stdout=subprocess.PIPE)
        try:
            now = json.loads(read_line(p.stdout))
            self.assertEqual(now, {"key": key, "value": None, "term": 0,
                                   "revision": now["revision"], "kind": "free",
                                   "holders": 0})
            time.sleep(0.1)
            self.assertIsNone(p.poll())
            term = self.client().execute_command("CAMPAIGN", key, "10.0.0.7:80")[1]
            changed = json.loads(read_line(p.stdout))
            self.assertEqual(changed, {"key": key, "value": "10.0.0.7:80", "term": term,
                                       "revision": changed["revision"], "kind": "exclusive",
                                       "holders": 1})
            self.assertGreater(changed["revision"], now["revision"])
            self.assertEqual(reap(p), 0)
            self.assertEqual(p.stdout.read(), b"")
        finally:
            end_process(p, p.stdout)

    def test_observe_lines(self):
        key = unique_key()
        leader = self.client()
        term = leader.execute_command("CAMPAIGN", key, "one")[1]
        p = self.popen("observe", key, "--count", "3", stdout=subprocess.PIPE)
        try:
            self.assertRegex(read_line(p.stdout),
                             r'^rev \d+  term %d  leader "one"\n$' % term)
            leader.execute_command("PROCLAIM", key, "two")
            self.assertRegex(read_line(p.stdout),
                             r'^rev \d+  term %d  leader "two"\n$' % term)
            leader.execute_command("RESIGN", key)
            self.assertRegex(read_line(p.stdout), r"^rev \d+  term 0  no leader\n$")
            self.assertEqual(reap(p), 0)
        finally:
            end_process(p, p.stdout)

    def test_observe_until_interrupted(self):
        key = unique_key()
        for sig in (signal.SIGINT, signal.SIGTERM):
            p = self.popen("observe", key, stdout=subprocess.PIPE, preexec_fn=sigint_default)
            try:
                self.assertRegex(read_line(p.stdout), r"^rev \d+  term 0  no leader\n$")
                os.kill(p.pid, sig)
                self.assertEqual(reap(p), -sig)
            finally:
                end_process(p, p.stdout)

    def test_elect_usage_errors(self):
        key = unique_key()
        for args, why in ((["campaign", key], "missing VALUE"),
                          (["campaign", key, "v"], "missing COMMAND"),
                          (["campaign", key, "v", "--"], "missing COMMAND"),
                          (["campaign", "--shared", key, "v", "--", "true"],
                           "a campaign is exclusive"),
                          (["campaign", key, "v", "--limit", "2", "--", "true"],
                           "a campaign is exclusive"),
                          (["leader"], "missing KEY"),
                          (["leader", key, "extra"], "unexpected argument extra"),
                          (["leader", "--count", "1", key], "unknown option --count"),
                          (["observe", "--count", "0", key], "--count: not a positive"),
                          (["observe", key, "--count"], "option --count needs a value"),
                          (["observe", ""], "KEY is empty")):
            rc, out, err = self.dlock(*args)
            self.assertEqual(rc, EX_USAGE, (args, err))
            self.assertIn("dlock: " + why, err, args)
            self.assertIn("usage: dlock", err, args)
        self.assertEqual(self.status(key)["mode"], b"free")
        rc, out, err = self.dlock("--help")
        for line in ("campaign [-v] [--ttl MS] [--wait MS] [--kill-after MS] KEY VALUE",
                     "leader [--json] KEY", "observe [--json] [--count N] KEY"):
            self.assertIn(line, out)
        # a "--" before KEY and VALUE: ones that start with a dash
        rc, out, err = self.dlock("campaign", "--", "-" + key, "--", "-v", "--", "sh", "-c",
                                  'echo "$DLOCK_KEY"; "$0" leader --json -- "$DLOCK_KEY"', DLOCK)
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertEqual(lines[0], "-" + key)
        self.assertEqual(json.loads(lines[1])["value"], "-v")


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
        self.assertEqual(rc, EX_NOPERM, out + err)
        rc, out, err = run_dlock(["status", "k"], env=dict(addr, DLOCK_PASSWORD=""))
        self.assertEqual(rc, EX_NOPERM, out + err)
        self.assertIn("NOAUTH", out + err)
        rc, out, err = run_dlock(["run", "k", "--", "true"], env=dict(addr, DLOCK_PASSWORD=""))
        self.assertEqual(rc, EX_NOPERM, out + err)
        self.assertIn("NOAUTH", out + err)
        # PING needs no password
        rc, out, err = run_dlock(["ping"], env=dict(addr, DLOCK_PASSWORD=""))
        self.assertEqual((rc, out), (0, "PONG\n"), err)



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
            self.assertEqual(rc, EX_LOST)
            self.assertEqual(p.stdout.read(), b"terminated\n")
            self.assertIn(b"dlock", p.stderr.read())
        finally:
            end_process(p, p.stdout, p.stderr)
            if d.running():
                d.stop()


# ---- dlock run: the command's process group, loss, keepalive, terminal ----

GONE_BOUND = 3.0  # s for a stopped command's whole group to be gone


def pid_gone(pid):
    """True if process pid has ended (gone, or a zombie)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(") ", 1)[1][0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def pid_state(pid):
    """The state letter of process pid (R, S, T, Z, ...), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(") ", 1)[1][0]
    except FileNotFoundError:
        return None


def read_pids(path, n, timeout=5.0):
    """The n pids, one a line, that a command wrote to path (waited for)."""
    def ready():
        try:
            with open(path) as f:
                lines = f.read().split("\n")
        except FileNotFoundError:
            return None
        return lines[:n] if len(lines) > n else None
    pids = [int(x) for x in wait_until(ready, timeout, 0.005, "the pids in %s" % path)]
    for pid in pids:
        track_pid(pid)
    return pids


# A command whose shell and background sleep write their pids (shell first)
# to $PIDS and wait; with trap, both ignore SIGTERM.
GROUP_CMD = 'echo $$ > "$PIDS.tmp"; sleep 60 & echo $! >> "$PIDS.tmp"; mv "$PIDS.tmp" "$PIDS"; wait'
DEAF_CMD = 'trap "" TERM; ' + GROUP_CMD


def sigint_default():
    """SIGINT as by default in a dlock run (and its command's group): the
    tests may run from a shell that ignores it (a background job), and an
    ignored signal stays ignored across exec."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class DlockRunCase(unittest.TestCase):
    """Tests that start a daemon of their own (they kill it)."""

    CONFIG = ""

    def setUp(self):
        self.daemon = Daemon(self.CONFIG).start()
        self.addCleanup(self._stop_daemon)
        self.dir = new_dir("run")
        self.pidfile = os.path.join(self.dir, "pids")

    def _stop_daemon(self):
        if self.daemon.running():
            self.daemon.stop()

    def run_bg(self, *args, sub="run"):
        """Start `dlock run ARGS` (or another subcommand) with $PIDS set;
        stdout/stderr piped."""
        env = dict(os.environ, DLOCK_ADDR=self.daemon.addr(), DLOCK_PASSWORD="",
                   PIDS=self.pidfile)
        p = spawn([DLOCK, sub] + [str(a) for a in args], env=env, stdin=subprocess.DEVNULL,
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=sigint_default)
        self.addCleanup(self._reap, p)
        return p

    def _reap(self, p):
        end_process(p, p.stdout, p.stderr)

    def group_pids(self):
        pids = read_pids(self.pidfile, 2)
        for pid in pids:
            self.addCleanup(kill_pid, pid)
        return pids

    def assertGone(self, pids, bound=GONE_BOUND):
        wait_until(lambda: all(pid_gone(p) for p in pids), bound, 0.01,
                   "processes %s of the command's group to be gone" % pids)


class TestDlockRunGroup(DlockRunCase):

    def test_daemon_killed_stops_whole_group(self):
        # the lock is gone with the daemon: the shell AND its background
        # sleep (a grandchild of dlock) are stopped, not only the shell
        key = unique_key()
        p = self.run_bg(key, "--", "sh", "-c", GROUP_CMD)
        sh, sleep = self.group_pids()
        self.assertEqual(os.getpgid(sleep), sh, "the command leads a group of its own")
        self.assertNotEqual(os.getpgid(sh), os.getpgid(p.pid))
        t0 = time.monotonic()
        self.daemon.stop(signal.SIGKILL)
        self.assertGone([sh, sleep])
        self.assertEqual(reap(p), EX_LOST)
        took = time.monotonic() - t0
        self.assertLess(took, 1.5, "dlock took %.2f s to stop the group" % took)
        err = p.stderr.read().decode()
        self.assertIn("connection closed by dlockd; the lock is gone, stopping the command", err)
        self.assertNotIn("killing", err)

    def test_campaign_daemon_killed_stops_whole_group(self):
        # as run's: the lead is gone with the daemon, the whole group is stopped
        key = unique_key()
        p = self.run_bg(key, "10.0.0.5:80", "--", "sh", "-c", GROUP_CMD, sub="campaign")
        sh, sleep = self.group_pids()
        self.assertEqual(os.getpgid(sleep), sh, "the command leads a group of its own")
        self.daemon.stop(signal.SIGKILL)
        self.assertGone([sh, sleep])
        self.assertEqual(reap(p), EX_LOST)
        self.assertIn("connection closed by dlockd; the lock is gone, stopping the command",
                      p.stderr.read().decode())

    def test_kill_after(self):
        # a group that ignores SIGTERM gets SIGKILL --kill-after ms later
        key = unique_key()
        p = self.run_bg("--kill-after", 600, key, "--", "sh", "-c", DEAF_CMD)
        sh, sleep = self.group_pids()
        t0 = time.monotonic()
        self.daemon.stop(signal.SIGKILL)
        time.sleep(0.3)
        self.assertFalse(pid_gone(sh) or pid_gone(sleep), "SIGKILL before --kill-after")
        self.assertGone([sh, sleep], 0.3 + GONE_BOUND)
        self.assertEqual(reap(p), EX_LOST)
        took = time.monotonic() - t0
        self.assertGreaterEqual(took, 0.55)
        self.assertLess(took, 0.6 + 1.0, "dlock ended %.2f s after the daemon" % took)
        self.assertIn("did not end within 600 ms of SIGTERM, killing it",
                      p.stderr.read().decode())

    def test_kill_after_zero(self):
        key = unique_key()
        p = self.run_bg("--kill-after=0", key, "--", "sh", "-c", DEAF_CMD)
        sh, sleep = self.group_pids()
        t0 = time.monotonic()
        self.daemon.stop(signal.SIGKILL)
        self.assertGone([sh, sleep])
        self.assertEqual(reap(p), EX_LOST)
        self.assertLess(time.monotonic() - t0, 1.0)

    def test_signals_forwarded_to_group(self):
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            key = unique_key()
            if os.path.exists(self.pidfile):
                os.unlink(self.pidfile)
            # an asynchronous list of a shell without job control ignores
            # SIGINT: for it, the grandchild runs in the foreground of a shell
            cmd = GROUP_CMD if sig != signal.SIGINT else \
                'echo $$ > "$PIDS.tmp"; sh -c \'echo $$ >> "$PIDS.tmp"; ' \
                'mv "$PIDS.tmp" "$PIDS"; exec sleep 60\''
            p = self.run_bg(key, "--", "sh", "-c", cmd)
            pids = self.group_pids()
            os.kill(p.pid, sig)
            self.assertGone(pids)
            self.assertEqual(reap(p), 128 + sig, sig)
            self.assertEqual(self.daemon.info()["locks_held"], "0")

    def test_kill_after_usage(self):
        for bad in ("-1", "x", "86400001"):
            rc, out, err = run_dlock(["run", "--kill-after", bad, "k", "--", "true"],
                                     env={"DLOCK_ADDR": self.daemon.addr()})
            self.assertEqual(rc, EX_USAGE, err)
            self.assertIn("--kill-after", err)
        rc, out, err = run_dlock(["lock", "--kill-after", "5", "k"],
                                 env={"DLOCK_ADDR": self.daemon.addr()})
        self.assertEqual(rc, EX_USAGE, err)
        rc, out, err = run_dlock(["--help"])
        self.assertIn("--kill-after MS", out)
        rc, out, err = run_dlock(["run", "--help"])
        self.assertIn("[--kill-after MS]", out)


class TestDlockCampaignLost(DlockRunCase):
    CONFIG = "auth:\n  admin_password: \"%s\"\n" % ADMIN_PASSWORD

    def test_lost_lead_stops_whole_group(self):
        # an administrator breaks the term (UNLOCK FORCE): the lost push stops
        # the command's whole group, as a lost lock stops run's
        key = unique_key()
        p = self.run_bg(key, "10.0.0.5:80", "--", "sh", "-c", GROUP_CMD, sub="campaign")
        pids = self.group_pids()
        admin = self.daemon.client(username="admin", password=ADMIN_PASSWORD)
        self.addCleanup(admin.close)
        self.assertEqual(admin.execute_command("UNLOCK", key, "FORCE"), 1)
        self.assertGone(pids)
        self.assertEqual(reap(p), EX_LOST)
        self.assertRegex(p.stderr.read().decode(),
                         r"the lock was lost \(fence \d+\), stopping the command")


class TestDlockRunKeepalive(DlockRunCase):
    CONFIG = "sessions:\n  idle_timeout_ms: 600\n"

    def test_keeps_session_alive(self):
        key, other = unique_key(), unique_key()
        idle = self.daemon.raw()
        self.addCleanup(idle.close)
        self.assertIsInstance(idle.cmd("LOCK", other), list)
        t0 = time.monotonic()
        p = self.run_bg(key, "--", "sleep", "2")
        # a raw connection that says nothing is closed after ~0.6 s, its lock released
        self.assertTrue(idle.is_closed(3.0), "the idle connection was not closed")
        took = time.monotonic() - t0
        self.assertTrue(0.5 < took < 0.6 + 0.9 * SLOWDOWN,
                        "idle connection closed after %.2f s" % took)
        # dlock's session lives on: its lock is held at ~1.5 s
        time.sleep(max(0.0, 1.5 - (time.monotonic() - t0)))
        st = self.daemon.raw()
        try:
            status = pairs(st.cmd("STATUS", key))
            other_status = pairs(st.cmd("STATUS", other))
        finally:
            st.close()
        held_at = time.monotonic() - t0
        self.assertEqual((status["mode"], status["holders"]), (b"exclusive", 1),
                         "not held at %.2f s: %r" % (held_at, status))
        self.assertEqual(other_status["mode"], b"free")
        self.assertEqual(reap(p), 0, p.stderr.read().decode())
        self.assertGreaterEqual(time.monotonic() - t0, 2.0)

    def test_ping_failure_stops_group(self):
        # the daemon stops answering (SIGSTOP): dlock's PING (every 200 ms,
        # answer due before the next) fails and the group is stopped
        key = unique_key()
        p = self.run_bg(key, "--", "sh", "-c", GROUP_CMD)
        pids = self.group_pids()
        t0 = time.monotonic()
        os.kill(self.daemon.pid, signal.SIGSTOP)
        try:
            self.assertGone(pids)
            took = time.monotonic() - t0
        finally:
            os.kill(self.daemon.pid, signal.SIGCONT)
        self.assertEqual(reap(p), EX_LOST)
        self.assertLess(took, 1.5, "the group was stopped %.2f s after the daemon" % took)
        self.assertIn("PING failed: dlockd did not answer within 200 ms",
                      p.stderr.read().decode())


class TestDlockRunLost(RedisTestCase):

    def test_lost_lock_stops_whole_group(self):
        # the lease is taken from under dlock run (its Redis keys deleted, the
        # key locked through a second daemon): the lost push stops the group
        fast = {"connect_timeout_ms": 200, "command_timeout_ms": 300}
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf=fast)
        b = self.start_daemon(r, backend_conf=fast)
        key = unique_key()
        d = new_dir("run")
        pidfile = os.path.join(d, "pids")
        env = dict(os.environ, DLOCK_ADDR=a.addr(), DLOCK_PASSWORD="", PIDS=pidfile)
        p = spawn([DLOCK, "run", "--ttl", "1500", key, "--", "sh", "-c", GROUP_CMD], env=env,
                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            pids = read_pids(pidfile, 2)
            for pid in pids:
                self.addCleanup(kill_pid, pid)
            rc = r.client()
            self.addCleanup(rc.connection_pool.disconnect)
            leases = [n for n in rc.scan_iter(match="*" + key + "*") if rc.pttl(n) > 0]
            self.assertTrue(leases, "no Redis key with an expiry names %s" % key)
            t0 = time.monotonic()
            rc.delete(*leases)
            self.assertIsInstance(self.conn(b).cmd("LOCK", key, "WAIT", 0), list)
            wait_until(lambda: all(pid_gone(x) for x in pids), 1.5 + GONE_BOUND, 0.01,
                       "the group of the command to be gone")
            took = time.monotonic() - t0
            self.assertEqual(reap(p), EX_LOST)
            err = p.stderr.read().decode()
            self.assertRegex(err, r"the lock was lost \(fence \d+\), stopping the command")
            self.assertLess(took, 0.5 + 1.0 * SLOWDOWN, "group stopped %.2f s after" % took)
        finally:
            end_process(p, p.stdout, p.stderr)

    def test_verbose_suspended_then_resumed(self):
        # dlock run -v: Redis stopped past a renewal and back before the
        # lease's margin: dlock says the lock is suspended, then resumed,
        # and the command runs on
        fast = {"connect_timeout_ms": 200, "command_timeout_ms": 300}
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf=fast)
        key = unique_key()
        env = dict(os.environ, DLOCK_ADDR=a.addr(), DLOCK_PASSWORD="")
        p = spawn([DLOCK, "run", "-v", "--ttl", "6000", key, "--", "sleep", "30"], env=env,
                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            self.assertRegex(read_line(p.stderr), r"^dlock: got %s \(fence (\d+)\)"
                             % re.escape(key))
            r.pause()
            try:
                self.assertRegex(read_line(p.stderr, 6.0), r"^dlock: %s: suspended: its "
                                 r"renewals fail \(fence \d+\); held until it is lost\n$"
                                 % re.escape(key))
            finally:
                r.resume()
            self.assertRegex(read_line(p.stderr, 4.0), r"^dlock: %s: resumed: renewed again "
                             r"\(fence \d+\)\n$" % re.escape(key))
            self.assertIsNone(p.poll(), "the command stopped")
        finally:
            end_process(p, p.stderr)

    def test_backend_down_exit_status(self):
        fast = {"connect_timeout_ms": 200, "command_timeout_ms": 300}
        r = self.start_redis()
        a = self.start_daemon(r, backend_conf=fast)
        self.assertEqual(r.stop(), 0)
        rc, out, err = run_dlock(["run", "--wait", "1000", unique_key(), "--", "echo", "ran"],
                                 env={"DLOCK_ADDR": a.addr(), "DLOCK_PASSWORD": ""})
        self.assertEqual((rc, out), (EX_UNAVAILABLE, ""), err)
        self.assertIn("BACKEND", err)

    def test_not_dlockd_exit_status(self):
        # a Redis server answers HELLO 3 but refuses CLIENT LOSTPUSH ON
        r = self.start_redis()
        rc, out, err = run_dlock(["run", unique_key(), "--", "echo", "ran"],
                                 env={"DLOCK_ADDR": "127.0.0.1:%d" % r.port,
                                      "DLOCK_PASSWORD": ""})
        self.assertEqual((rc, out), (EX_PROTOCOL, ""), err)
        self.assertIn("LOSTPUSH", err)


class FakeDlockd:
    """A stand-in for a dlockd that knows STATUS key FULL: it answers the
    handshake, a first LOCK with null (not granted), STATUS with the canned
    full reply, a second LOCK with a grant, then INFO, UNLOCK and PING."""

    FULL = (b"%9\r\n+mode\r\n+exclusive\r\n+holders\r\n:1\r\n+waiters\r\n:2\r\n"
            b"+fence\r\n:17\r\n+ttl_ms\r\n:2500\r\n+limit\r\n:0\r\n+backend\r\n+local\r\n"
            b"+holders\r\n*1\r\n%9\r\n+session\r\n:7\r\n+name\r\n$8\r\nworker-1\r\n"
            b"+addr\r\n$14\r\n10.0.0.5:51234\r\n+mode\r\n+exclusive\r\n+fence\r\n:17\r\n"
            b"+count\r\n:1\r\n+held_ms\r\n:12345\r\n+lease_ms\r\n:2500\r\n+detached\r\n#f\r\n"
            b"+waiters\r\n*2\r\n"
            + 2 * (b"%7\r\n+session\r\n:9\r\n+name\r\n_\r\n+addr\r\n$4\r\nunix\r\n"
                   b"+mode\r\n+exclusive\r\n+waited_ms\r\n:5\r\n+wait_ms\r\n:-1\r\n"
                   b"+detach\r\n#f\r\n"))

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.commands = []
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _serve(self):
        conn, _ = self.sock.accept()
        f = conn.makefile("rb")
        locks = 0
        with conn, f:
            while True:
                line = f.readline()
                if not line:
                    return
                args = []
                for _ in range(int(line[1:])):
                    n = int(f.readline()[1:])
                    args.append(f.read(n + 2)[:-2].decode())
                self.commands.append(args)
                name = args[0].upper()
                if name == "HELLO":
                    reply = b"%1\r\n+proto\r\n:3\r\n"
                elif name in ("CLIENT", "PING"):
                    reply = b"+OK\r\n" if name == "CLIENT" else b"+PONG\r\n"
                elif name == "LOCK":
                    locks += 1
                    reply = (b"_\r\n" if locks == 1 else
                             b"*3\r\n$32\r\n" + b"a" * 32 + b"\r\n:18\r\n:30000\r\n")
                elif name == "STATUS":
                    reply = self.FULL
                elif name == "INFO":
                    reply = b"$0\r\n\r\n"
                else:
                    reply = b":0\r\n"
                conn.sendall(reply)

    def close(self):
        self.sock.close()
        self.t.join(5)


class TestDlockRunVerboseFull(unittest.TestCase):
    """dlock run -v reads STATUS key FULL: the holders and the queue."""

    def test_full_status(self):
        fake = FakeDlockd()
        self.addCleanup(fake.close)
        rc, out, err = run_dlock(["run", "-v", "--wait", "3000", "jobs/a", "--", "true"],
                                 env={"DLOCK_ADDR": "127.0.0.1:%d" % fake.port,
                                      "DLOCK_PASSWORD": ""})
        self.assertEqual(rc, 0, err)
        lines = err.splitlines()
        self.assertEqual(lines[0], 'dlock: waiting for jobs/a (held exclusive by session 7 '
                                   '"worker-1" 10.0.0.5:51234 for 12.3 s, fence 17; '
                                   '2 ahead of us)')
        self.assertRegex(lines[1], r"^dlock: got jobs/a \(fence 18\) after \d+\.\d s$")
        self.assertEqual(len(lines), 2, err)
        locks = [c for c in fake.commands if c[0] == "LOCK"]
        self.assertEqual(locks[0], ["LOCK", "jobs/a", "WAIT", "0"])
        self.assertEqual(locks[1][:3], ["LOCK", "jobs/a", "WAIT"])
        self.assertLessEqual(int(locks[1][3]), 3000)
        self.assertIn(["STATUS", "jobs/a", "FULL"], fake.commands)


# A stand-in for a job-control shell: made session leader (by Popen) with the
# pty whose slave is fd argv[1] as its controlling terminal, it runs argv[2:]
# as a job (a process group of its own, in the foreground), reports on
# stdout "pid N", "stopped SIG" (then waits for a line on stdin before doing
# what fg does) and "exit STATUS FG" (FG: the terminal's foreground group
# then).
JOB_SHELL = r'''
import fcntl, os, signal, sys, termios
tty = int(sys.argv[1])
fcntl.ioctl(tty, termios.TIOCSCTTY, 0)
signal.signal(signal.SIGTTOU, signal.SIG_IGN)
stdin_null = sys.argv[2] == "stdin-null"
pid = os.fork()
if pid == 0:
    os.setpgid(0, 0)
    os.tcsetpgrp(tty, os.getpid())
    for s in (signal.SIGTTOU, signal.SIGPIPE, signal.SIGINT):
        signal.signal(s, signal.SIG_DFL)
    os.dup2(os.open(os.devnull, os.O_RDONLY) if stdin_null else tty, 0)
    os.dup2(tty, 1)
    os.dup2(tty, 2)
    os.execv(sys.argv[3], sys.argv[3:])
try:
    os.setpgid(pid, pid)
except OSError:
    pass
os.tcsetpgrp(tty, pid)
print("pid %d" % pid, flush=True)
while True:
    _, st = os.waitpid(pid, os.WUNTRACED)
    if os.WIFSTOPPED(st):
        os.tcsetpgrp(tty, os.getpgrp())
        print("stopped %d" % os.WSTOPSIG(st), flush=True)
        sys.stdin.readline()
        os.tcsetpgrp(tty, pid)
        os.kill(-pid, signal.SIGCONT)
        continue
    print("exit %d %d" % (os.waitstatus_to_exitcode(st), os.tcgetpgrp(tty)), flush=True)
    break
'''


class TestDlockRunTerminal(DaemonTestCase):
    """dlock run from an interactive shell: the command gets the terminal,
    and Control-Z stops the job and fg continues it."""

    def job(self, *args, stdin_null=False):
        """Run dlock ARGS as a job of JOB_SHELL on a new pty. Returns the
        shell's Popen, the pty master and dlock's pid."""
        master, slave = os.openpty()
        self.addCleanup(os.close, master)
        env = dict(os.environ, DLOCK_ADDR=self.daemon.addr(), DLOCK_PASSWORD="")
        sh = spawn([PYTHON, "-c", JOB_SHELL, str(slave),
                    "stdin-null" if stdin_null else "stdin-tty", DLOCK] + [str(a) for a in args],
                   env=env, pass_fds=(slave,), start_new_session=True,
                   stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        os.close(slave)
        self.tty_out = ""
        self.addCleanup(self._end_job, sh)
        line = read_line(sh.stdout)
        self.assertTrue(line.startswith("pid "), line)
        pid = int(line.split()[1])
        track_pid(pid)
        self.addCleanup(kill_pid, pid)
        return sh, master, pid

    def _end_job(self, sh):
        end_process(sh, sh.stdin, sh.stdout)

    def read_tty(self, master, pattern, timeout=5.0):
        """Read the pty until its output matches the regular expression
        pattern (bounded); returns the match. Output up to the end of the
        match is consumed."""
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.tty_out)
            if m:
                self.tty_out = self.tty_out[m.end():]
                return m
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("%r not seen on the terminal (got %r)"
                                     % (pattern, self.tty_out))
            r, _, _ = select.select([master], [], [], left)
            if r:
                try:
                    data = os.read(master, 4096)
                except OSError:  # EIO: every slave end closed
                    data = b""
                if not data:
                    raise AssertionError("the terminal closed (got %r)" % self.tty_out)
                self.tty_out += data.decode(errors="replace")

    def test_command_gets_terminal(self):
        key = unique_key()
        probe = "import os; print('fg', os.tcgetpgrp(0) == os.getpgrp(), os.getpgrp())"
        sh, master, pid = self.job("run", key, "--", PYTHON, "-c", probe)
        m = self.read_tty(master, r"fg (\w+) (\d+)")
        self.assertEqual(m.group(1), "True", "the command is not in the foreground")
        self.assertNotEqual(int(m.group(2)), pid, "the command shares dlock's group")
        line = read_line(sh.stdout)
        # dlock took the terminal back before it exited
        self.assertEqual(line, "exit 0 %d\n" % pid)

    def test_not_interactive_without_tty_stdin(self):
        key = unique_key()
        probe = "import os; print('fg', os.tcgetpgrp(1) == os.getpgrp())"
        sh, master, pid = self.job("run", key, "--", PYTHON, "-c", probe, stdin_null=True)
        self.assertEqual(self.read_tty(master, r"fg (\w+)").group(1), "False")
        self.assertEqual(read_line(sh.stdout), "exit 0 %d\n" % pid)

    def test_control_z_and_fg(self):
        key = unique_key()
        sh, master, pid = self.job("run", key, "--", "sh", "-c",
                                   'echo "ready $$"; read x; echo "got $x"')
        cmd = int(self.read_tty(master, r"ready (\d+)\r?\n").group(1))
        track_pid(cmd)
        self.addCleanup(kill_pid, cmd)
        os.write(master, b"\x1a")  # Control-Z
        line = read_line(sh.stdout)
        self.assertEqual(line, "stopped %d\n" % signal.SIGTSTP)
        wait_until(lambda: pid_state(cmd) == "T" and pid_state(pid) == "T", 2, 0.01,
                   "the command and dlock to be stopped")
        self.assertEqual(self.status(key)["holders"], 1)
        sh.stdin.write(b"fg\n")
        sh.stdin.flush()
        wait_until(lambda: pid_state(cmd) not in (None, "T"), 2, 0.01,
                   "the command to be continued")
        # the command reads the terminal: it has the foreground again
        os.write(master, b"hello\n")
        self.read_tty(master, r"got hello")
        self.assertEqual(read_line(sh.stdout), "exit 0 %d\n" % pid)
        self.assertEqual(self.status(key)["mode"], b"free")
