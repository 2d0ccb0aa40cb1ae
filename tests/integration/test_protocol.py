"""The wire protocol end to end: framing, RESP2/RESP3, inline commands,
errors that keep the connection and protocol errors that close it."""

import socket
import threading
import time

import redis

from dlocktest.cases import DaemonTestCase
from dlocktest.env import unique_key
from dlocktest.proc import wait_until
from dlocktest.resp import TOKEN_RE, Err, Raw, pairs


class TestProtocol(DaemonTestCase):
    CONFIG = ""

    def test_ping(self):
        r = self.client()
        self.assertIs(r.execute_command("PING"), True)
        raw = self.raw()
        raw.send(Raw.encode("PING"))
        self.assertEqual(raw.read_raw(), b"+PONG\r\n")
        raw.send(Raw.encode("PING", "hello"))
        self.assertEqual(raw.read_raw(), b"$5\r\nhello\r\n")
        raw.send(Raw.encode("ping"))  # case-insensitive
        self.assertEqual(raw.read_raw(), b"+PONG\r\n")

    def test_hello_2(self):
        r = self.client()
        h = pairs(r.execute_command("HELLO", "2"))
        self.assertEqual(h["server"], b"dlockd")
        self.assertEqual(h["version"], b"0.1.0")
        self.assertEqual(h["proto"], 2)
        self.assertIsInstance(h["id"], int)
        self.assertGreater(h["id"], 0)
        self.assertEqual(h["backend"], b"memory")
        self.assertEqual(h["mode"], b"standalone")
        self.assertEqual(r.execute_command("CLIENT", "ID"), h["id"])
        # without protover: the protocol in use is kept
        self.assertEqual(pairs(r.execute_command("HELLO"))["proto"], 2)

    def test_hello_2_bytes(self):
        raw = self.raw()
        raw.send(Raw.encode("HELLO", "2"))
        got = raw.read_raw()
        self.assertFullMatch(
            rb"\*12\r\n\$6\r\nserver\r\n\$6\r\ndlockd\r\n\$7\r\nversion\r\n"
            rb"\$5\r\n0\.1\.0\r\n\$5\r\nproto\r\n:2\r\n\$2\r\nid\r\n:(\d+)\r\n"
            rb"\$7\r\nbackend\r\n\$6\r\nmemory\r\n\$4\r\nmode\r\n"
            rb"\$10\r\nstandalone\r\n", got, "HELLO 2 reply: %r" % got)

    def test_hello_3_bytes(self):
        raw = self.raw()
        raw.send(Raw.encode("HELLO", "3"))
        got = raw.read_raw()
        m = self.assertFullMatch(
            rb"%6\r\n\$6\r\nserver\r\n\$6\r\ndlockd\r\n\$7\r\nversion\r\n"
            rb"\$5\r\n0\.1\.0\r\n\$5\r\nproto\r\n:3\r\n\$2\r\nid\r\n:(\d+)\r\n"
            rb"\$7\r\nbackend\r\n\$6\r\nmemory\r\n\$4\r\nmode\r\n"
            rb"\$10\r\nstandalone\r\n", got, "HELLO 3 reply: %r" % got)
        sid = int(m.group(1))
        raw.send(Raw.encode("CLIENT", "ID"))
        self.assertEqual(raw.read_raw(), b":%d\r\n" % sid)

    def test_hello_3_map_contents(self):
        raw = self.raw()
        h = raw.cmd("HELLO", "3")
        self.assertIsInstance(h, dict)
        self.assertEqual(h[b"server"], b"dlockd")
        self.assertEqual(h[b"proto"], 3)
        self.assertEqual(h[b"backend"], b"memory")
        self.assertEqual(h[b"mode"], b"standalone")
        # back to RESP2
        h2 = raw.cmd("HELLO", "2")
        self.assertIsInstance(h2, list)
        self.assertEqual(pairs(h2)["proto"], 2)
        self.assertEqual(pairs(h2)["id"], h[b"id"])

    def test_hello_setname(self):
        raw = self.raw()
        h = raw.cmd("HELLO", "3", "SETNAME", "worker-1")
        self.assertIsInstance(h, dict)
        self.assertEqual(raw.cmd("CLIENT", "GETNAME"), b"worker-1")

    def test_hello_bad_version(self):
        raw = self.raw()
        for v in ("4", "1", "abc"):
            rep = raw.cmd("HELLO", v)
            self.assertIsInstance(rep, Err)
            self.assertEqual(rep, "NOPROTO unsupported protocol version", v)
        self.assertEqual(raw.cmd("PING"), "PONG")

    def test_auth_without_password(self):
        raw = self.raw()
        self.assertEqual(raw.cmd("AUTH", "x"),
                         Err("ERR AUTH called without any password configured"))
        self.assertEqual(raw.cmd("AUTH", "default", "x"),
                         Err("ERR AUTH called without any password configured"))
        self.assertEqual(raw.cmd("PING"), "PONG")

    def test_client_commands(self):
        raw = self.raw()
        cid = raw.cmd("CLIENT", "ID")
        self.assertIsInstance(cid, int)
        self.assertGreater(cid, 0)
        other = self.raw()
        self.assertNotEqual(other.cmd("CLIENT", "ID"), cid)
        raw.send(Raw.encode("CLIENT", "GETNAME"))
        self.assertEqual(raw.read_raw(), b"$-1\r\n")
        self.assertEqual(raw.cmd("client", "setname", "w1"), "OK")
        self.assertEqual(raw.cmd("CLIENT", "GETNAME"), b"w1")
        raw.cmd("HELLO", "3")
        other.cmd("HELLO", "3")
        other.send(Raw.encode("CLIENT", "GETNAME"))
        self.assertEqual(other.read_raw(), b"_\r\n")
        self.assertEqual(raw.cmd("CLIENT", "NOSUCH").code, "ERR")
        self.assertEqual(raw.cmd("PING"), "PONG")

    def test_quit_closes(self):
        raw = self.raw()
        raw.send(Raw.encode("QUIT"))
        self.assertEqual(raw.read_raw(), b"+OK\r\n")
        self.assertTrue(raw.is_closed(), "connection still open after QUIT")

    def test_quit_releases_locks(self):
        key = unique_key()
        raw = self.raw()
        self.assertIsInstance(raw.cmd("LOCK", key), list)
        self.assertEqual(raw.cmd("QUIT"), "OK")
        self.assertTrue(raw.is_closed())
        self.wait_status(key, mode=b"free", holders=0)

    def test_unknown_command_keeps_connection(self):
        raw = self.raw()
        rep = raw.cmd("NOSUCHCOMMAND", "a", "b")
        self.assertIsInstance(rep, Err)
        self.assertEqual(rep.code, "ERR")
        self.assertEqual(raw.cmd("PING"), "PONG")
        r = self.client()
        with self.assertRaises(redis.ResponseError):
            r.execute_command("GET", "x")
        self.assertIs(r.execute_command("PING"), True)

    def test_wrong_arity_keeps_connection(self):
        raw = self.raw()
        for args in (["LOCK"], ["UNLOCK"], ["UNLOCK", "k", "t", "x"], ["EXTEND", "k"],
                     ["STATUS"], ["STATUS", "a", "b"], ["VALIDATE", "k"],
                     ["VALIDATE", "k", "1", "2"], ["LOCKS", "x"], ["PING", "a", "b"],
                     ["CLIENT"],
                     ["CLIENT", "SETNAME"], ["AUTH"]):
            rep = raw.cmd(*args)
            self.assertIsInstance(rep, Err, args)
            self.assertEqual(rep.code, "ERR", (args, rep))
        self.assertEqual(raw.cmd("PING"), "PONG")

    def test_lock_syntax_errors(self):
        raw = self.raw()
        key = unique_key()
        for args in (["TTL"], ["WAIT"], ["LIMIT"], ["BOGUS"], ["SHARED", "LIMIT", "2"],
                     ["LIMIT", "2", "SHARED"], ["TTL", "1000", "EXTRA"]):
            rep = raw.cmd("LOCK", key, *args)
            self.assertIsInstance(rep, Err, args)
            self.assertTrue(rep.startswith("ERR syntax error"), (args, rep))
        self.assertEqual(raw.cmd("PING"), "PONG")
        self.assertEqual(self.status(key)["mode"], b"free")

    def test_bad_ttl(self):
        raw = self.raw()
        key = unique_key()
        for ttl in ("9", "0", "-5", "abc", "86400001", "1.5", "", "99999999999999999999999"):
            rep = raw.cmd("LOCK", key, "TTL", ttl)
            self.assertIsInstance(rep, Err, ttl)
            self.assertTrue(rep.startswith("ERR invalid TTL"), (ttl, rep))
        rep = raw.cmd("LOCK", key, "TTL", "10", "WAIT", "0")
        self.assertIsInstance(rep, list)
        self.assertEqual(rep[2], 10)
        self.assertEqual(raw.cmd("UNLOCK", key), 0)
        rep = raw.cmd("LOCK", key, "TTL", "86400000", "WAIT", "0")
        self.assertEqual(rep[2], 86400000)
        self.assertEqual(raw.cmd("UNLOCK", key), 0)

    def test_bad_wait_and_limit(self):
        raw = self.raw()
        key = unique_key()
        for args in (["WAIT", "-1"], ["WAIT", "x"], ["LIMIT", "0"], ["LIMIT", "1000001"],
                     ["LIMIT", "-2"], ["LIMIT", "two"]):
            rep = raw.cmd("LOCK", key, *args)
            self.assertIsInstance(rep, Err, args)
            self.assertEqual(rep.code, "ERR", (args, rep))
        self.assertEqual(raw.cmd("PING"), "PONG")
        rep = raw.cmd("LOCK", key, "LIMIT", "1000000", "WAIT", "0")
        self.assertIsInstance(rep, list)

    def test_option_words_case_insensitive(self):
        raw = self.raw()
        key = unique_key()
        rep = raw.cmd("lock", key, "ttl", "5000", "wait", "0", "shared")
        self.assertIsInstance(rep, list)
        self.assertEqual(rep[2], 5000)
        self.assertEqual(pairs(raw.cmd("Status", key))["mode"], b"shared")

    def test_key_length(self):
        raw = self.raw()
        long_key = "k" * 1025
        for cmd in (["LOCK", long_key], ["LOCK", ""], ["STATUS", long_key], ["STATUS", ""],
                    ["UNLOCK", long_key], ["EXTEND", long_key, "1000"],
                    ["VALIDATE", long_key, "1"]):
            rep = raw.cmd(*cmd)
            self.assertIsInstance(rep, Err, cmd[0])
            self.assertTrue(rep.startswith("ERR key is empty or too long"), (cmd[0], rep))
        self.assertEqual(raw.cmd("PING"), "PONG")
        ok_key = unique_key().ljust(1024, "x")
        self.assertEqual(len(ok_key), 1024)
        rep = raw.cmd("LOCK", ok_key, "WAIT", "0")
        self.assertIsInstance(rep, list)
        locks = raw.cmd("LOCKS")
        self.assertEqual(locks[0][0], ok_key.encode())
        self.assertEqual(raw.cmd("UNLOCK", ok_key), 0)

    def test_binary_key(self):
        raw = self.raw()
        key = unique_key().encode() + b"\r\n\x00\xff end"
        rep = raw.cmd("LOCK", key, "WAIT", "0")
        self.assertIsInstance(rep, list)
        self.assertEqual(raw.cmd("LOCKS")[0][0], key)
        st = pairs(self.raw().cmd("STATUS", key))
        self.assertEqual(st["mode"], b"exclusive")
        prefix = key[:key.index(b"\r")]
        self.assertEqual(pairs(self.raw().cmd("STATUS", prefix))["mode"], b"free")
        self.assertEqual(raw.cmd("UNLOCK", key), 0)

    def test_protocol_garbage(self):
        before = int(self.info()["protocol_errors_total"])
        cases = [
            (b"*abc\r\n", "bad array count"),
            (b"*1\r\n:5\r\n", "array element not a bulk string"),
            (b"*2\r\n$4\r\nPING\r\n$x\r\n", "bad bulk length"),
            (b"*1\r\n$4\r\nPINGXX\r\n", "bulk longer than its length"),
            (b"*1\r\n$-5\r\n", "negative bulk length"),
            (b'PING "unbalanced\r\n', "unbalanced quotes"),
            (b'PING "a"b\r\n', "closing quote not followed by a blank"),
        ]
        for data, what in cases:
            self.expect_protocol_error(data, what)
        after = int(self.info()["protocol_errors_total"])
        self.assertGreaterEqual(after - before, len(cases))

    def test_bulk_outside_array(self):
        # a bulk string header is not a command: garbage, not an inline word
        self.expect_protocol_error(b"$5\r\n", "bulk string outside an array")

    def test_oversize_frame(self):
        # detected as soon as the length is known: no need to send the body
        self.expect_protocol_error(b"*2\r\n$4\r\nPING\r\n$70000\r\n", "bulk > 64 KiB")
        self.expect_protocol_error(b"*2000000\r\n", "huge array count")
        # a whole frame larger than max_request_bytes made of small parts
        parts = ["LOCK", unique_key()] + ["x" * 1000] * 80
        self.expect_protocol_error(Raw.encode(*parts), "frame > 64 KiB")
        # an inline line longer than max_request_bytes
        self.expect_protocol_error(b"PING " + b"a" * 70000, "inline > 64 KiB")

    def test_protocol_error_releases_locks(self):
        key = unique_key()
        raw = self.raw()
        self.assertIsInstance(raw.cmd("LOCK", key), list)
        raw.send(b"*abc\r\n")
        rep = raw.read()
        self.assertTrue(rep.startswith("ERR Protocol error"))
        self.assertTrue(raw.is_closed())
        self.wait_status(key, mode=b"free")

    def test_inline_argument(self):
        raw = self.raw()
        raw.send(b"PING abc\r\n")
        self.assertEqual(raw.read_raw(), b"$3\r\nabc\r\n")
        self.assertEqual(raw.inline('PING "a b"'), b"a b")

    def test_inline_commands(self):
        raw = self.raw()
        self.assertEqual(raw.inline("PING"), "PONG")
        raw.send(b"PING\n")  # LF alone ends a line too
        self.assertEqual(raw.read(), "PONG")
        raw.send(b"\r\n\r\n")  # empty lines: no reply
        raw.send(b"*0\r\n")  # empty array: no reply
        self.assertEqual(raw.inline("  ping \t hello  "), b"hello")
        base = unique_key()
        key = base + " with space"
        rep = raw.inline('LOCK "%s" TTL 10000 WAIT 0' % key)
        self.assertIsInstance(rep, list)
        self.assertTrue(TOKEN_RE.match(rep[0]))
        self.assertEqual(rep[2], 10000)
        st = pairs(raw.inline("STATUS '%s'" % key))
        self.assertEqual(st["mode"], b"exclusive")
        self.assertEqual(raw.inline("VALIDATE \"%s\" %d" % (key, rep[1])), 1)
        # escapes in double quotes
        esc = base + "\tx\nA\"\\"
        rep2 = raw.inline('LOCK "%s\\tx\\n\\x41\\"\\\\" WAIT 0' % base)
        self.assertIsInstance(rep2, list)
        keys = sorted(entry[0] for entry in raw.inline("LOCKS"))
        self.assertEqual(keys, sorted([key.encode(), esc.encode()]))
        # single quotes: everything literal but \'
        rep3 = raw.inline("LOCK '%s\\n\\'q' WAIT 0" % base)
        self.assertIsInstance(rep3, list)
        self.assertIn((base + "\\n'q").encode(), [e[0] for e in raw.inline("LOCKS")])
        self.assertEqual(raw.inline("UNLOCK '%s'" % key), 0)
        # inline and RESP frames mixed in one write
        raw.send(Raw.encode("PING", "a") + b"PING b\r\n" + Raw.encode("PING", "c"))
        self.assertEqual([raw.read(), raw.read(), raw.read()], [b"a", b"b", b"c"])
        self.assertEqual(raw.inline("QUIT"), "OK")
        self.assertTrue(raw.is_closed())

    def test_pipelining(self):
        key = unique_key()
        raw = self.raw()
        raw.send(Raw.encode("PING") + Raw.encode("LOCK", key, "WAIT", "0")
                 + Raw.encode("LOCK", key) + Raw.encode("UNLOCK", key)
                 + Raw.encode("UNLOCK", key) + Raw.encode("UNLOCK", key)
                 + Raw.encode("PING", "inline") + Raw.encode("STATUS", key))
        self.assertEqual(raw.read(), "PONG")
        g1 = raw.read()
        g2 = raw.read()
        self.assertEqual(g1[:2], g2[:2])
        self.assertEqual(raw.read(), 1)
        self.assertEqual(raw.read(), 0)
        self.assertEqual(raw.read().code, "NOTHELD")
        self.assertEqual(raw.read(), b"inline")
        self.assertEqual(pairs(raw.read())["mode"], b"free")

    def test_split_frames(self):
        # a command sent one byte at a time is still one command
        raw = self.raw()
        raw.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = Raw.encode("PING", "split") + b"PING\r\n"
        for i in range(len(data)):
            raw.send(data[i:i + 1])
            if i % 7 == 0:
                time.sleep(0.001)
        self.assertEqual(raw.read(), b"split")
        self.assertEqual(raw.read(), "PONG")

    def test_resp3_null_and_status_map(self):
        key = unique_key()
        holder = self.raw()
        self.assertIsInstance(holder.cmd("LOCK", key, "TTL", "20000"), list)
        raw = self.raw()
        raw.cmd("HELLO", "3")
        raw.send(Raw.encode("LOCK", key, "WAIT", "0"))
        self.assertEqual(raw.read_raw(), b"_\r\n")
        raw.send(Raw.encode("STATUS", key))
        got = raw.read_raw()
        m = self.assertFullMatch(
            rb"%7\r\n\$4\r\nmode\r\n\$9\r\nexclusive\r\n\$7\r\nholders\r\n:1\r\n"
            rb"\$7\r\nwaiters\r\n:0\r\n\$5\r\nfence\r\n:(\d+)\r\n"
            rb"\$6\r\nttl_ms\r\n:(\d+)\r\n\$5\r\nlimit\r\n:0\r\n"
            rb"\$7\r\nbackend\r\n\$5\r\nlocal\r\n", got)
        self.assertLessEqual(int(m.group(2)), 20000)
        self.assertGreater(int(m.group(2)), 10000)
        # RESP2 on another connection: the null array and a flat array
        r2 = self.raw()
        r2.send(Raw.encode("LOCK", key, "WAIT", "0"))
        self.assertEqual(r2.read_raw(), b"*-1\r\n")
        r2.send(Raw.encode("STATUS", key))
        self.assertTrue(r2.read_raw().startswith(b"*14\r\n$4\r\nmode\r\n$9\r\nexclusive\r\n"))

    def test_redis_py_error_codes(self):
        key = unique_key()
        r = self.client()
        try:
            r.execute_command("UNLOCK", key)
        except redis.ResponseError as e:
            self.assertEqual(str(e).split(" ", 1)[0], "NOTHELD")
        else:
            self.fail("UNLOCK of a free key succeeded")
        self.assertIs(r.execute_command("PING"), True)


if __name__ == "__main__":
    import unittest
    unittest.main()


class TestBackpressure(DaemonTestCase):
    CONFIG = ""

    def test_peer_that_does_not_read(self):
        """A client that pipelines far more replies than it reads pauses its
        own session (not the daemon), and loses no reply."""
        n = 1500000     # 10 MB of replies: more than the kernel buffers hold
        base = int(self.info()["commands_total"])
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        s.settimeout(60)
        s.connect(("127.0.0.1", self.daemon.port))
        payload = b"PING\r\n" * n
        sender = threading.Thread(target=s.sendall, args=(payload,))
        sender.start()
        # the daemon stops taking that client's requests: the count settles
        # well short of n while the client reads nothing
        seen = [-1]

        def settled():
            now = int(self.info()["commands_total"])    # INFO counts itself
            done, seen[0] = 0 <= now - seen[0] <= 1, now
            return done
        wait_until(settled, 10, 0.3, "the paused session's command count to settle")
        self.assertGreater(seen[0] - base, 1000)
        self.assertLess(seen[0] - base, n * 3 // 4)
        # while that client is not reading, others are served
        other = self.raw()
        self.assertEqual(other.cmd("PING"), "PONG")
        want = b"+PONG\r\n" * n
        got = bytearray()
        while len(got) < len(want):
            chunk = s.recv(1 << 16)
            self.assertTrue(chunk, "connection closed after %d bytes" % len(got))
            got += chunk
        sender.join(10)
        self.assertFalse(sender.is_alive())
        self.assertEqual(bytes(got), want)
        s.close()
