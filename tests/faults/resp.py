"""A small RESP2/RESP3 client on a plain socket for the safety test's workers.

Unlike the integration harness's Raw client it never blocks without a bound
and hands every push to a callback as soon as it is read, so that a worker
holding a lock can poll for a "lost" push while it does something else.

    c = Conn(port, on_push=fn)
    c.cmd("HELLO", "3")            # a reply; pushes before it go to fn
    c.poll(0.02)                   # read what is there (pushes) for <= 20 ms

Replies are: str (status), Err (error), int, bytes (bulk), None (any null),
list (array, set), dict (map), Push (push). A closed connection raises Closed,
a reply that does not come within the timeout raises Timeout (the caller
should then drop the connection: replies would be out of step).
"""

import select
import socket
import time


class Err(str):
    """An error reply: "CODE sentence"."""

    @property
    def code(self):
        return self.split(" ", 1)[0]


class Push(list):
    """A RESP3 push."""


class Closed(Exception):
    """The peer closed the connection (or reset it)."""


class Timeout(Exception):
    """No complete reply within the time given."""


class _Incomplete(Exception):
    pass


def encode(*args):
    """A command as a RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, int):
            a = str(a)
        if isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def parse(buf, pos=0):
    """One value from buf at pos: (value, next position); raises _Incomplete
    when buf ends first and ValueError on garbage."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise _Incomplete()
    t, rest = buf[pos:pos + 1], buf[pos + 1:end]
    pos = end + 2
    if t == b"+":
        return rest.decode(errors="replace"), pos
    if t == b"-":
        return Err(rest.decode(errors="replace")), pos
    if t in (b":", b"("):
        return int(rest), pos
    if t in (b"$", b"=", b"!"):
        n = int(rest)
        if n < 0:
            return None, pos
        if len(buf) < pos + n + 2:
            raise _Incomplete()
        if t == b"!":
            return Err(buf[pos:pos + n].decode(errors="replace")), pos + n + 2
        return buf[pos:pos + n], pos + n + 2
    if t == b"_":
        return None, pos
    if t == b"#":
        return rest == b"t", pos
    if t == b",":
        return float(rest), pos
    if t in (b"*", b"~", b">"):
        n = int(rest)
        if n < 0:
            return None, pos
        items = []
        for _ in range(n):
            v, pos = parse(buf, pos)
            items.append(v)
        return (Push(items) if t == b">" else items), pos
    if t == b"%":
        n = int(rest)
        m = {}
        for _ in range(n):
            k, pos = parse(buf, pos)
            v, pos = parse(buf, pos)
            m[k] = v
        return m, pos
    if t == b"|":  # attributes: skipped, the value follows
        n = int(rest)
        for _ in range(2 * n):
            _, pos = parse(buf, pos)
        return parse(buf, pos)
    raise ValueError("unparsable reply line %r" % buf[pos - len(rest) - 3:end])


class Conn:
    """One RESP connection. on_push(push) is called for every push read."""

    def __init__(self, port, host="127.0.0.1", on_push=None, connect_timeout=2.0):
        self.s = socket.create_connection((host, port), timeout=connect_timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.s.setblocking(False)
        self.buf = b""
        self.on_push = on_push
        self.closed = False

    def close(self):
        self.closed = True
        try:
            self.s.close()
        except OSError:
            pass

    def send(self, *args):
        data = encode(*args)
        try:
            self.s.setblocking(True)
            self.s.settimeout(5.0)
            self.s.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as e:
            self.closed = True
            raise Closed(str(e))
        except socket.timeout:
            raise Timeout("send")
        finally:
            try:
                self.s.setblocking(False)
            except OSError:
                pass

    def _fill(self, timeout):
        """Wait up to timeout s for bytes; False if none came."""
        try:
            r, _, _ = select.select([self.s], [], [], max(0.0, timeout))
        except ValueError:  # closed socket
            raise Closed("socket closed")
        if not r:
            return False
        try:
            data = self.s.recv(65536)
        except BlockingIOError:
            return False
        except (ConnectionResetError, OSError) as e:
            self.closed = True
            raise Closed(str(e))
        if not data:
            self.closed = True
            raise Closed("closed by the peer")
        self.buf += data
        return True

    def _take(self):
        """The next complete value in the buffer, or _Incomplete."""
        v, pos = parse(self.buf, 0)
        self.buf = self.buf[pos:]
        return v

    def _next_reply(self):
        """The next buffered non-push value; pushes before it go to on_push."""
        while True:
            v = self._take()
            if isinstance(v, Push):
                if self.on_push is not None:
                    self.on_push(v)
                continue
            return v

    def read(self, timeout):
        """The next reply, waiting at most timeout s."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._next_reply()
            except _Incomplete:
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout("no reply within %.1f s" % timeout)
            self._fill(left)

    def cmd(self, *args, timeout=30.0):
        self.send(*args)
        return self.read(timeout)

    def poll(self, timeout):
        """Wait up to timeout s for input, then read all that is there,
        handing pushes to on_push; returns as soon as something was read. A
        reply read here would be out of place: such values are returned in a
        list for the caller to complain about."""
        stray = []
        got = self._fill(timeout)
        while got:
            got = self._fill(0)
        while True:
            try:
                stray.append(self._next_reply())
            except _Incomplete:
                return stray
