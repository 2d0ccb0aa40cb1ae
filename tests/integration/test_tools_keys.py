"""The dlock CLI with several keys at once (-k KEY -k KEY..., one LOCKALL):
dlock run gives its command a variable per key and releases every key after
it, takes all of the keys or none (a key held elsewhere: the command does not
run, exit status 75 as for one key), stops its command when one key is lost
(79, naming the key), and dlock lock prints a grant per key; one -k KEY is
plain KEY."""

import os
import re
import subprocess
import time

from dlocktest.cases import DlockCliCase
from dlocktest.env import unique_key
from dlocktest.proc import end_process, read_line, reap

EX_USAGE = 64
EX_REFUSED = 65
EX_TEMPFAIL = 75
EX_LOST = 79
ADMIN_PASSWORD = "keys admin"  # auth.admin_password of the class's daemon

# prints the variables of two keys and whether those of one key are set
SHOW_TWO = ('printf "%s\\n" "$DLOCK_KEYS" "$DLOCK_KEY_1" "$DLOCK_TOKEN_1" "$DLOCK_FENCE_1"'
            ' "$DLOCK_KEY_2" "$DLOCK_TOKEN_2" "$DLOCK_FENCE_2"'
            ' "${DLOCK_KEY-unset} ${DLOCK_TOKEN-unset} ${DLOCK_FENCE-unset}"')


class TestDlockRunKeys(DlockCliCase):
    CONFIG = "auth:\n  admin_password: \"%s\"\n" % ADMIN_PASSWORD

    def assertFree(self, *keys):
        for key in keys:
            st = self.status(key)
            self.assertEqual((st["mode"], st["waiters"]), (b"free", 0), key)

    def test_run_two_keys_variables_and_release(self):
        a, b = unique_key("a"), unique_key("b")
        # variables of an outer dlock run are not passed on as if they were ours
        p = self.popen("run", "-k", b, "--key", a, "--", "sh", "-c", SHOW_TWO + "; read line; exit 7",
                       env={"DLOCK_KEY": "outer", "DLOCK_FENCE": "1"},
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            lines = [read_line(p.stdout).rstrip("\n") for _ in range(8)]
            self.assertEqual(lines[0], "2")
            # in the order given, whatever order dlockd takes them in
            self.assertEqual((lines[1], lines[4]), (b, a))
            self.assertEqual(lines[7], "unset unset unset")
            for key, token, fence in ((b, lines[2], lines[3]), (a, lines[5], lines[6])):
                self.assertRegex(token, r"^[0-9a-f]{32}$")
                st = self.status(key)
                self.assertEqual((st["mode"], st["holders"], st["fence"]),
                                 (b"exclusive", 1, int(fence)), key)
                self.assertEqual(self.client().execute_command("VALIDATE", key, int(fence)), 1)
            p.stdin.write(b"go\n")
            p.stdin.close()
            self.assertEqual(reap(p), 7)
        finally:
            end_process(p, p.stdout)
        self.assertFree(a, b)

    def test_run_all_or_none(self):
        a, b = unique_key("a"), unique_key("b")
        holder = self.client()
        holder.execute_command("LOCK", b)
        marker = os.path.join(self.daemon.dir, "ran-" + str(time.monotonic_ns()))
        t0 = time.monotonic()
        rc, out, err = self.dlock("run", "--wait", "200", "-k", a, "-k", b, "--",
                                  "touch", marker)
        self.assertEqual(rc, EX_TEMPFAIL, err)
        self.assertGreaterEqual(time.monotonic() - t0, 0.18)
        self.assertIn("dlock: %s, %s: not granted within 200 ms" % (a, b), err)
        self.assertFalse(os.path.exists(marker), "the command ran without every key")
        # nothing of the set is held or queued; the holder keeps its key
        self.assertFree(a)
        st = self.status(b)
        self.assertEqual((st["mode"], st["holders"], st["waiters"]), (b"exclusive", 1, 0))
        rc, out, err = self.dlock("run", "--wait=0", "-k", a, "-k", b, "--", "touch", marker)
        self.assertEqual(rc, EX_TEMPFAIL, err)
        self.assertFalse(os.path.exists(marker))
        # granted once the holder lets go, while dlock waits
        p = self.popen("run", "--wait", "5000", "-k", a, "-k", b, "--", "touch", marker,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.wait_status(b, "(dlock queued)", waiters=1)
            self.assertEqual(holder.execute_command("UNLOCK", b), 0)
            self.assertEqual(reap(p), 0)
        finally:
            end_process(p)
        self.assertTrue(os.path.exists(marker))
        self.assertFree(a, b)

    def test_run_one_key(self):
        # one -k KEY is KEY: today's variables, none of several keys'
        key = unique_key()
        show = 'echo "$DLOCK_KEY" "${DLOCK_KEYS-unset}" "${DLOCK_KEY_1-unset}"'
        outer = {"DLOCK_KEYS": "2", "DLOCK_KEY_1": "x", "DLOCK_FENCE_2": "9"}
        for args in (["-k", key], [key]):
            rc, out, err = self.dlock("run", *args, "--", "sh", "-c", show, env=outer)
            self.assertEqual((rc, out), (0, key + " unset unset\n"), (args, err))
        self.assertFree(key)

    def test_run_one_key_lost(self):
        # an administrator breaks one key of the set: the command is stopped,
        # dlock names the key and exits 79, and the other key is released
        a, b = unique_key("a"), unique_key("b")
        p = self.popen("run", "-k", a, "-k", b, "--", "sh", "-c", "echo up; exec sleep 60",
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            self.assertEqual(read_line(p.stdout), "up\n")
            fence = self.status(b)["fence"]
            admin = self.client(username="admin", password=ADMIN_PASSWORD)
            self.assertEqual(admin.execute_command("UNLOCK", b, "FORCE"), 1)
            self.assertEqual(reap(p), EX_LOST)
            self.assertIn("dlock: %s, %s: the lock of %s was lost (fence %d), stopping the "
                          "command" % (a, b, b, fence), p.stderr.read().decode())
        finally:
            end_process(p, p.stdout, p.stderr)
        self.assertFree(a, b)

    def test_run_key_named_twice(self):
        key = unique_key()
        rc, out, err = self.dlock("run", "-k", key, "-k", key, "--", "true")
        self.assertEqual(rc, EX_REFUSED, err)
        self.assertIn("twice", err)
        self.assertFree(key)

    def test_run_verbose(self):
        a, b = unique_key("a"), unique_key("b")
        holder = self.client()
        fence = holder.execute_command("LOCK", b)[1]
        p = self.popen("run", "-v", "--wait", "5000", "-k", a, "-k", b, "--", "true",
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            # only the key that is held is described
            self.assertRegex(read_line(p.stderr),
                             r"^dlock: waiting for %s \(held exclusive by .*fence %d.*\)\n$"
                             % (re.escape(b), fence))
            self.wait_status(b, "(dlock queued)", waiters=1)
            self.assertEqual(holder.execute_command("UNLOCK", b), 0)
            self.assertEqual(reap(p), 0)
            self.assertRegex(read_line(p.stderr), r"^dlock: got %s \(fence \d+\), %s \(fence "
                             r"\d+\) after \d+\.\d s\n$" % (re.escape(a), re.escape(b)))
        finally:
            end_process(p, p.stderr)

    def test_usage_errors(self):
        key = unique_key()
        for args, why in ((["run", key, "-k", key + "2", "--", "true"],
                           "KEY and -k KEY cannot be combined"),
                          (["run", "-k", "", "--", "true"], "KEY is empty"),
                          (["run", "-k", key, "-k", key + "2"], "missing COMMAND"),
                          (["run", "--wait", "0", "-k"], "option -k needs a value"),
                          (["lock", "-k", key, "extra"], "unexpected argument extra"),
                          (["campaign", "-k", key, "v", "--", "true"], "unknown option -k")):
            rc, out, err = self.dlock(*args)
            self.assertEqual(rc, EX_USAGE, (args, err))
            self.assertIn("dlock: " + why, err, args)
        self.assertFree(key)

    def test_lock_two_keys(self):
        a, b = unique_key("a"), unique_key("b")
        rc, out, err = self.dlock("lock", "--ttl", "60000", "-k", a, "-k", b)
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertEqual(len(lines), 4, out)
        for key, token, fence in ((a, lines[0], lines[1]), (b, lines[2], lines[3])):
            self.assertRegex(token, r"^[0-9a-f]{32}$")
            # detached: held after dlock exited
            st = self.status(key)
            self.assertEqual((st["mode"], st["fence"]), (b"exclusive", int(fence)), key)
        rc, out2, err = self.dlock("lock", "--wait", "0", "-k", unique_key("c"), "-k", b)
        self.assertEqual(rc, EX_TEMPFAIL, err)
        for key, token in ((a, lines[0]), (b, lines[2])):
            rc, out2, err = self.dlock("unlock", key, token)
            self.assertEqual((rc, out2), (0, "0\n"), err)
        self.assertFree(a, b)
