"""A small DNS server for tests, and a private /etc/resolv.conf for dlockd.

FakeDNS answers UDP queries on a loopback address: A queries for the names
of its table (which a test may change at any time, from any thread) with
their addresses, every other type of query for those names with no answer
(NOERROR, empty: a name with no IPv6 address), and every query for another
name with NXDOMAIN. TTLs are short. It runs in a thread of the test and
stops with stop() (or at the end of a with block).

Resolver is a directory with a resolv.conf naming that server alone and a
hosts file naming localhost alone; its wrapper() is an argv prefix that
runs a command in a mount namespace of its own (unshare) where those two
files are /etc/resolv.conf and /etc/hosts, through exec, so the command
keeps the pid of the process started. Nothing outside the namespace sees
them.
"""

import errno
import os
import random
import select
import shutil
import socket
import struct
import threading

from .env import new_dir
from .proc import run_to_end

TTL = 1  # seconds, in every answer

# header flags
QR = 0x8000
AA = 0x0400
RD = 0x0100
RA = 0x0080
OPCODE_MASK = 0x7800
NOERROR = 0
FORMERR = 1
NXDOMAIN = 3
NOTIMP = 4

TYPE_A = 1
CLASS_IN = 1


def _read_name(msg, pos):
    """The name at pos of a DNS message (no compression: a query's
    question) as its raw labels, and the position after it."""
    labels = []
    while True:
        if pos >= len(msg):
            raise ValueError("name runs past the message")
        n = msg[pos]
        pos += 1
        if n == 0:
            return labels, pos
        if n & 0xC0:
            raise ValueError("compressed name in a question")
        if pos + n > len(msg):
            raise ValueError("label runs past the message")
        labels.append(msg[pos:pos + n])
        pos += n


class FakeDNS:
    """A DNS server on a loopback UDP address (default: a random
    127.53.x.y, port 53; another free port when port 53 cannot be bound).

    names maps a name (any case, without the final dot) to an IPv4 address
    or a list of them; set(), remove() and clear() change it while it runs.
    queries is the list of (name, qtype) asked so far, names lowercase.
    """

    def __init__(self, names=None, host=None, port=53):
        self._mu = threading.Lock()
        self._names = {}
        self.queries = []
        for name, addrs in (names or {}).items():
            self.set(name, addrs)
        self.sock = self._bind(host, port)
        self.host, self.port = self.sock.getsockname()[:2]
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="fake-dns-%s" % self.host)
        self._thread.start()

    @staticmethod
    def _bind(host, port):
        """A UDP socket bound to host (default: a random 127.53.x.y) and
        port, or to another free port of it when port cannot be had (not
        permitted, or a server on the wildcard address holds it)."""
        hosts = [host] if host else ["127.53.%d.%d" % (random.randint(0, 255),
                                                       random.randint(1, 254))
                                     for _ in range(5)]
        for h in hosts:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                s.bind((h, port))
                return s
            except OSError as e:
                s.close()
                if e.errno not in (errno.EADDRINUSE, errno.EACCES):
                    raise
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((hosts[0], 0))
        return s

    def nameserver(self):
        """The address as a resolv.conf nameserver line takes it (IP, or
        IP:PORT off port 53, which libevent's evdns reads)."""
        return self.host if self.port == 53 else "%s:%d" % (self.host, self.port)

    # ---- the table ----

    def set(self, name, addrs):
        """name now resolves to addrs (an IPv4 address or a list)."""
        if isinstance(addrs, str):
            addrs = [addrs]
        packed = [socket.inet_aton(a) for a in addrs]
        with self._mu:
            self._names[name.lower().rstrip(".")] = packed

    def remove(self, name):
        """name is unknown from now on (NXDOMAIN)."""
        with self._mu:
            self._names.pop(name.lower().rstrip("."), None)

    def clear(self):
        with self._mu:
            self._names.clear()

    def asked(self, name, qtype=TYPE_A):
        """How many queries of qtype for name arrived so far."""
        name = name.lower().rstrip(".")
        with self._mu:
            return sum(1 for q in self.queries if q == (name, qtype))

    # ---- serving ----

    def answer(self, msg):
        """The reply to one query message, or None to ignore it."""
        if len(msg) < 12:
            return None
        qid, flags, qdcount = struct.unpack("!HHH", msg[:6])
        if flags & QR:
            return None
        base = QR | AA | RA | (flags & (OPCODE_MASK | RD))
        if (flags & OPCODE_MASK) != 0 or qdcount != 1:
            return struct.pack("!HHHHHH", qid, base | NOTIMP, 0, 0, 0, 0)
        try:
            labels, pos = _read_name(msg, 12)
            if pos + 4 > len(msg):
                raise ValueError("question without type and class")
            qtype, qclass = struct.unpack("!HH", msg[pos:pos + 4])
        except ValueError:
            return struct.pack("!HHHHHH", qid, base | FORMERR, 0, 0, 0, 0)
        # the question goes back as it came: resolvers that mix the case
        # of the name (DNS 0x20, as evdns does) compare it byte for byte
        question = msg[12:pos + 4]
        name = b".".join(labels).decode("ascii", "replace").lower()
        with self._mu:
            self.queries.append((name, qtype))
            addrs = self._names.get(name)
        if addrs is None:
            return struct.pack("!HHHHHH", qid, base | NXDOMAIN, 1, 0, 0, 0) + question
        answers = []
        if qtype == TYPE_A and qclass == CLASS_IN:
            for a in addrs:
                # the name as a pointer to the question's (offset 12)
                answers.append(struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, TTL, 4) + a)
        return (struct.pack("!HHHHHH", qid, base | NOERROR, 1, len(answers), 0, 0)
                + question + b"".join(answers))

    def _run(self):
        while True:
            r, _, _ = select.select([self.sock, self._stop_r], [], [])
            if self._stop_r in r:
                return
            try:
                msg, peer = self.sock.recvfrom(4096)
            except OSError:
                continue
            reply = self.answer(msg)
            if reply is not None:
                try:
                    self.sock.sendto(reply, peer)
                except OSError:
                    pass

    def stop(self):
        """Stop serving and close the socket (safe twice)."""
        if self._stop_w is None:
            return
        os.write(self._stop_w, b"x")
        self._thread.join(5)
        os.close(self._stop_w)
        os.close(self._stop_r)
        self._stop_w = self._stop_r = None
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


# ---- a private resolver configuration ----

# what runs inside the namespace: $1 the resolv.conf, $2 the hosts file,
# then the command, which replaces the shell (same pid)
_NS_SCRIPT = ('mount --bind "$1" /etc/resolv.conf && mount --bind "$2" /etc/hosts '
              '&& shift 2 && exec "$@"')

HOSTS = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"


class NamespaceRefused(Exception):
    """unshare could not make a mount namespace: not permitted here."""


class Resolver:
    """A resolv.conf and a hosts file in a new directory; wrapper() runs a
    command with them as /etc/resolv.conf and /etc/hosts. for_dns() makes
    one whose resolv.conf names a FakeDNS alone."""

    def __init__(self, resolv_text, hosts_text=HOSTS, directory=None):
        self.dir = directory or new_dir("resolver")
        self.resolv_conf = os.path.join(self.dir, "resolv.conf")
        self.hosts = os.path.join(self.dir, "hosts")
        with open(self.resolv_conf, "w") as f:
            f.write(resolv_text)
        with open(self.hosts, "w") as f:
            f.write(hosts_text)

    @classmethod
    def for_dns(cls, dns):
        """dns (a FakeDNS) the one name server, no search list; a name
        that gets no answer fails within about 2 s."""
        return cls("nameserver %s\noptions ndots:1 timeout:1 attempts:2\n"
                   % dns.nameserver())

    def wrapper(self):
        """The argv prefix that runs a command in a mount namespace of its
        own with this resolver's files."""
        return ["unshare", "--mount", "--propagation", "private",
                "sh", "-c", _NS_SCRIPT, "dlockd-ns", self.resolv_conf, self.hosts]

    def run(self, argv, timeout=20.0):
        """Run argv under wrapper(); returns (status, stdout, stderr) as
        str. Fails if it does not finish within timeout s."""
        return run(self.wrapper() + list(argv), timeout)


def run(argv, timeout=20.0):
    """Run argv (recorded, so that it is killed if this interpreter dies);
    returns (status, stdout, stderr) as str. Fails if it does not finish
    within timeout s."""
    return run_to_end(argv, timeout)


def check_namespaces():
    """Returns if a command can run with a private /etc/resolv.conf here
    (as Resolver.wrapper does); raises NamespaceRefused when unshare itself
    is not permitted to make a mount namespace (EPERM), AssertionError for
    any other failure (unshare missing, the bind mounts failing)."""
    if shutil.which("unshare") is None:
        raise AssertionError("unshare is missing (Debian package util-linux)")
    rc, _, err = run(["unshare", "--mount", "--propagation", "private", "true"], 10)
    if rc != 0:
        if "Operation not permitted" in err:
            raise NamespaceRefused("unshare --mount is not permitted here: %s"
                                   % err.strip())
        raise AssertionError("unshare --mount true failed (%d): %s" % (rc, err.strip()))
    # the bind mounts work, and stay inside
    r = Resolver("# private resolv.conf\n", "# private hosts\n")
    rc, out, err = r.run(["cat", "/etc/resolv.conf", "/etc/hosts"], timeout=10)
    if rc != 0 or out != "# private resolv.conf\n# private hosts\n":
        raise AssertionError("bind mounts over /etc/resolv.conf and /etc/hosts in a "
                             "mount namespace failed (%d): %s%s" % (rc, out, err))
    with open("/etc/resolv.conf") as f:
        if f.read() == "# private resolv.conf\n":
            raise AssertionError("the bind mount over /etc/resolv.conf leaked out of "
                                 "its namespace")
