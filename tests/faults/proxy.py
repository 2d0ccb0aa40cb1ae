"""A TCP proxy between a dlockd and its backend (Redis, or etcd's JSON
gateway) that can black-hole the path.

    python3 -m faults.proxy LISTEN_PORT UPSTREAM_PORT    (tests/ on PYTHONPATH)

It accepts on 127.0.0.1:LISTEN_PORT and connects each client connection to
127.0.0.1:UPSTREAM_PORT, any number at once (the etcd client keeps several
HTTP/1.1 connections and a watch stream). It reads commands on its standard
input, one per line, and answers each on its standard output:

  block   stop forwarding in both directions on every connection, closing
          nothing: bytes stay in the kernel's buffers, a close is not passed
          on, new connections are accepted (as the kernel would) but not
          connected upstream; answers "blocked T"
  heal    forward again what was held, connect the new connections (so what
          was sent during the black hole arrives late, as after a partition
          that TCP rode out); answers "healed T"
  quit    close everything and exit; answers "bye T"

T is time.monotonic() when the change took effect. It prints "ready" once it
listens. When one side of a pair closes (outside a black hole), what it sent
is passed on and the other side is closed too.
"""

import os
import select
import socket
import sys
import time

HIGH = 1 << 20  # stop reading a side while this much waits for the other


class Pair:
    def __init__(self, client):
        self.c = client
        self.u = None       # upstream socket, None until connected
        self.c2u = b""
        self.u2c = b""
        self.c_eof = False
        self.u_eof = False

    def socks(self):
        return [s for s in (self.c, self.u) if s is not None]

    def close(self):
        for s in self.socks():
            try:
                s.close()
            except OSError:
                pass


def main():
    lport, uport = int(sys.argv[1]), int(sys.argv[2])
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", lport))
    ls.listen(64)
    ls.setblocking(False)
    pairs = []
    blocked = False
    ctl = sys.stdin.buffer.raw if hasattr(sys.stdin.buffer, "raw") else sys.stdin.buffer
    ctl_fd = ctl.fileno()
    ctl_buf = b""

    def say(line):
        os.write(1, (line + "\n").encode())

    def connect_up(p):
        try:
            u = socket.create_connection(("127.0.0.1", uport), timeout=1.0)
            u.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            u.setblocking(False)
            p.u = u
            return True
        except OSError:
            return False

    say("ready")
    while True:
        rl = [ls, ctl_fd]
        wl = []
        if not blocked:
            for p in pairs:
                if p.u is None:
                    continue
                if not p.c_eof and len(p.c2u) < HIGH:
                    rl.append(p.c)
                if not p.u_eof and len(p.u2c) < HIGH:
                    rl.append(p.u)
                if p.c2u:
                    wl.append(p.u)
                if p.u2c:
                    wl.append(p.c)
        r, w, _ = select.select(rl, wl, [], 1.0)
        if ctl_fd in r:
            data = os.read(ctl_fd, 4096)
            if not data:
                break  # the orchestrator is gone
            ctl_buf += data
            while b"\n" in ctl_buf:
                line, ctl_buf = ctl_buf.split(b"\n", 1)
                cmd = line.strip().decode()
                if cmd == "block":
                    blocked = True
                    say("blocked %.6f" % time.monotonic())
                elif cmd == "heal":
                    blocked = False
                    for p in list(pairs):
                        if p.u is None and not connect_up(p):
                            p.close()
                            pairs.remove(p)
                    say("healed %.6f" % time.monotonic())
                elif cmd == "quit":
                    for p in pairs:
                        p.close()
                    say("bye %.6f" % time.monotonic())
                    return
            continue  # the lists above may be stale now
        if ls in r:
            while True:
                try:
                    c, _ = ls.accept()
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    break
                c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                c.setblocking(False)
                p = Pair(c)
                if not blocked and not connect_up(p):
                    c.close()  # Redis is down: refuse as it would
                    continue
                pairs.append(p)
        if blocked:
            continue
        dead = []
        for p in pairs:
            if p.u is None:
                continue
            for src, dst_attr in ((p.c, "c2u"), (p.u, "u2c")):
                if src in r:
                    try:
                        data = src.recv(65536)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        data = b""
                    if data:
                        setattr(p, dst_attr, getattr(p, dst_attr) + data)
                    elif src is p.c:
                        p.c_eof = True
                    else:
                        p.u_eof = True
            for dst, buf_attr in ((p.u, "c2u"), (p.c, "u2c")):
                if dst in w:
                    buf = getattr(p, buf_attr)
                    try:
                        n = dst.send(buf)
                    except (BlockingIOError, InterruptedError):
                        n = 0
                    except OSError:
                        dead.append(p)
                        break
                    setattr(p, buf_attr, buf[n:])
            # one side closed: pass on what it sent, then close both
            if (p.c_eof and not p.c2u) or (p.u_eof and not p.u2c):
                dead.append(p)
        for p in dead:
            if p in pairs:
                pairs.remove(p)
                p.close()


if __name__ == "__main__":
    main()
