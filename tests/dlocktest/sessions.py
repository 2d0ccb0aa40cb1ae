"""Sessions of the daemon in numbers: several sessions taking turns on a key
across daemons (exclusion_across), a waiter granted through a backend outage
(grant_through_outage), many idle sessions (open_sessions, close_hard)."""

import socket
import struct
import threading
import time

from .proc import in_thread, results
from .resp import Err, Push, encode, read_within


def read_pushes(conn, n, deadline):
    """Pushes read on a Raw connection, up to n of them, until
    time.monotonic() is deadline: the key each names (str) -> (when it was
    read, the push). Anything but a push fails."""
    pushes = {}
    while len(pushes) < n:
        p = read_within(conn, deadline - time.monotonic())
        if p is None:
            break
        if not isinstance(p, Push):
            raise AssertionError("not a push: %r" % (p,))
        pushes[p[1].decode()] = (time.monotonic(), p)
    return pushes


def grant_through_outage(conn, key, wait_ms, pause, limit=25.0):
    """Read the answer to a LOCK key ... WAIT sent on Raw conn; while the
    backend is unreachable the answer may be -BACKEND: then ask again (after
    pause s, with WAIT wait_ms) until granted, within limit s. Returns
    (when granted, the grant); anything else fails."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        g = conn.read()
        if isinstance(g, list):
            return time.monotonic(), g
        if not (isinstance(g, Err) and g.code == "BACKEND"):
            raise AssertionError("waiter for %s got %r" % (key, g))
        time.sleep(pause)
        conn.send(encode("LOCK", key, "WAIT", wait_ms))
    raise AssertionError("%s not granted" % key)


def open_sessions(port, n, timeout=30.0):
    """n TCP connections to 127.0.0.1:port, each a real session: it sent PING
    and got PONG. Returns the sockets (blocking, with timeout); close them
    with close_hard()."""
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
            socks.append(s)
            s.sendall(b"PING\r\n")
        for s in socks:
            got = b""
            while not got.endswith(b"\r\n"):
                data = s.recv(64)
                if not data:
                    raise AssertionError("a session was closed at its PING: %r" % got)
                got += data
            if got != b"+PONG\r\n":
                raise AssertionError("PING answered %r" % got)
    except BaseException:
        close_hard(socks)
        raise
    return socks


def close_hard(socks):
    """Close sockets with a reset (SO_LINGER 0): no TIME_WAIT left holding a
    local port, however many there are."""
    for s in socks:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        s.close()


def exclusion_across(daemons, key, rounds, timeout):
    """Sessions on each of daemons (one per entry) lock and unlock key
    rounds times each, holding it a moment; returns (errors, fences): what
    went wrong (a grant while another session held the key, a LOCK or
    UNLOCK answered otherwise) and the fences in the order of the critical
    sections."""
    errors = []
    fences = []
    inside = threading.Lock()

    def worker(daemon):
        c = daemon.raw()
        try:
            for _ in range(rounds):
                g = c.cmd("LOCK", key, "WAIT", 20000)
                if not isinstance(g, list):
                    errors.append("LOCK on %s answered %r" % (daemon.addr(), g))
                    return
                if not inside.acquire(blocking=False):
                    errors.append("granted on %s while another session holds the key"
                                  % daemon.addr())
                else:
                    fences.append(g[1])
                    time.sleep(0.001)  # hold the key a moment: overlaps show
                    inside.release()
                r = c.cmd("UNLOCK", key)
                if r != 0:
                    errors.append("UNLOCK answered %r" % (r,))
        finally:
            c.close()

    calls = [in_thread(worker, d) for d in daemons]
    results(calls, timeout)
    return errors, fences

