"""RESP2/RESP3: the codec and two clients on plain sockets.

Raw is the blocking client of the integration tests, for byte-level tests
(over TLS too): cmd() sends a command and reads its reply, read_raw() gives
a reply's exact bytes. Conn is the fault test's workers' client: it never
blocks without a bound and hands every push to a callback as soon as it is
read, so that a worker holding a lock can poll for a "lost" push while it
does something else:

    c = Conn(port, on_push=fn)
    c.cmd("HELLO", "3")            # a reply; pushes before it go to fn
    c.poll(0.02)                   # read what is there (pushes) for <= 20 ms

Replies are: str (status), Err (error), int, bytes (bulk, verbatim), a null
(NULL from Raw, None from Conn), bool, float, list (array, set), dict (map),
Push (push). A closed connection raises Closed; a Conn reply that does not
come within the timeout raises Timeout (the caller should then drop the
connection: replies would be out of step).
"""

import re
import select
import socket
import time

IO_TIMEOUT = 10.0  # socket timeout of every Raw connection (s)
TOKEN_RE = re.compile(rb"\A[0-9a-f]{32}\Z")  # a lock token


class Err(str):
    """An error reply: "CODE sentence"."""

    @property
    def code(self):
        return self.split(" ", 1)[0]


class Push(list):
    """A RESP3 push."""


class Null:
    """The null reply of Raw; NULL is its one instance."""

    def __repr__(self):
        return "NULL"


NULL = Null()


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


def _blob(buf, pos, n):
    """The n bytes at pos and the position after their CRLF."""
    if len(buf) < pos + n + 2:
        raise _Incomplete()
    if buf[pos + n:pos + n + 2] != b"\r\n":
        raise ValueError("no CRLF after a string of %d bytes" % n)
    return buf[pos:pos + n], pos + n + 2


def parse(buf, pos=0, null=None):
    """One value from buf at pos: (value, next position), null for any
    null; raises _Incomplete when buf ends first and ValueError on
    garbage."""
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
            return null, pos
        data, pos = _blob(buf, pos, n)
        if t == b"!":
            return Err(data.decode(errors="replace")), pos
        return data, pos
    if t == b"_":
        return null, pos
    if t == b"#":
        return rest == b"t", pos
    if t == b",":
        return float(rest), pos
    if t in (b"*", b"~", b">"):
        n = int(rest)
        if n < 0:
            return null, pos
        items = []
        for _ in range(n):
            v, pos = parse(buf, pos, null)
            items.append(v)
        return (Push(items) if t == b">" else items), pos
    if t == b"%":
        n = int(rest)
        m = {}
        for _ in range(n):
            k, pos = parse(buf, pos, null)
            v, pos = parse(buf, pos, null)
            m[k] = v
        return m, pos
    if t == b"|":  # attributes: skipped, the value follows
        n = int(rest)
        for _ in range(2 * n):
            _, pos = parse(buf, pos, null)
        return parse(buf, pos, null)
    raise ValueError("unparsable reply line %r" % buf[pos - len(rest) - 3:end])


def text(v):
    """A bulk reply (bytes) as str; anything else as it is."""
    return v.decode() if isinstance(v, bytes) else v


def as_bytes(v):
    """A str (UTF-8) or bytes-like value as bytes."""
    return v.encode() if isinstance(v, str) else bytes(v)


def pairs(flat):
    """A flat [name, value, ...] list (or a map) as a dict with str names."""
    if isinstance(flat, dict):
        return {k.decode() if isinstance(k, bytes) else k: v for k, v in flat.items()}
    assert len(flat) % 2 == 0, flat
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


def parse_info(text):
    """INFO's bulk string as a dict of str -> str (headers skipped)."""
    if isinstance(text, bytes):
        text = text.decode()
    out = {}
    for line in text.split("\r\n"):
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition(":")
        assert sep, "INFO line without a colon: %r" % line
        out[name] = value
    return out


# ---- the blocking client ----

class Raw:
    """A RESP connection on a plain or TLS socket, for byte-level tests."""

    def __init__(self, port=None, unix=None, host="127.0.0.1", timeout=IO_TIMEOUT,
                 ssl_context=None, server_hostname="localhost"):
        """Connect to port on host (over TLS with ssl_context, checking the
        name server_hostname), or to the Unix socket unix."""
        if unix:
            self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.s.settimeout(timeout)
            self.s.connect(unix)
        else:
            self.s = socket.create_connection((host, port), timeout=timeout)
        if ssl_context is not None:
            try:
                self.s = ssl_context.wrap_socket(self.s, server_hostname=server_hostname)
            except BaseException:
                self.s.close()
                raise
        self.buf = b""
        self.last_raw = b""  # the bytes of the last reply read

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass

    def settimeout(self, t):
        self.s.settimeout(t)

    def send(self, data):
        self.s.sendall(data)

    encode = staticmethod(encode)

    def cmd(self, *args):
        """Send a command as a RESP array and read its reply."""
        self.send(self.encode(*args))
        return self.read()

    def inline(self, line):
        """Send an inline command (a str or bytes line) and read its reply."""
        if isinstance(line, str):
            line = line.encode()
        self.send(line + b"\r\n")
        return self.read()

    def _fill(self):
        try:
            data = self.s.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            raise Closed("connection closed by the server (buffer %r)" % self.buf)
        self.buf += data

    def read(self):
        """Read one complete reply (or push)."""
        while True:
            try:
                v, pos = parse(self.buf, 0, NULL)
                break
            except _Incomplete:
                self._fill()
            except ValueError:
                raise AssertionError("malformed reply: %r" % self.buf)
        self.last_raw = self.buf[:pos]
        self.buf = self.buf[pos:]
        return v

    def read_raw(self):
        """Read one reply and return its exact bytes."""
        self.read()
        return self.last_raw

    def is_closed(self, timeout=2.0):
        """True if the server closes the connection within timeout s
        (anything else it sends is discarded)."""
        deadline = time.monotonic() + timeout
        self.buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.s.settimeout(left)
            try:
                data = self.s.recv(65536)
            except socket.timeout:
                return False
            except ConnectionResetError:
                return True
            if not data:
                return True


def read_within(conn, seconds):
    """The next reply or push on a Raw connection, or None if nothing
    complete arrives within seconds."""
    old = conn.s.gettimeout()
    conn.settimeout(max(seconds, 0.001))
    try:
        return conn.read()
    except (socket.timeout, TimeoutError):
        return None
    finally:
        conn.settimeout(old)


# ---- the non-blocking client ----

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
