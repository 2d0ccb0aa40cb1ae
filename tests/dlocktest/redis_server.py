"""redis-server for the tests (the store of the redis, redlock and
redis-cluster backends, and the fault test's fenced resource): RedisServer
starts one on a free loopback port; RedisMonitor records what it executes;
commandstats() reads what it counted; redis_cli() runs redis-cli."""

import os
import re
import shlex
import signal
import socket
import ssl
import threading
import time

import redis

from . import env
from .env import new_dir, next_seq
from .proc import ServerProcess, free_port, run_to_end
from .resp import IO_TIMEOUT, Closed, Raw, encode, parse_info, text


# ---- redis-server (the redis backend's store) ----

def redis_first_reply(port, password=None, host="127.0.0.1", ssl_context=None,
                      commands=("PING",)):
    """Connect to a redis-server on port (over TLS with ssl_context, the
    server's name being localhost), send AUTH password (if given) and the
    commands, and return the first line of each reply (bytes, without
    CRLF), or None if it cannot be reached, does not finish a TLS handshake,
    or closes first."""
    try:
        s = socket.create_connection((host, port), timeout=2)
    except OSError:
        return None
    try:
        if ssl_context is not None:
            s = ssl_context.wrap_socket(s, server_hostname="localhost")
        cmds = [("AUTH", password)] if password is not None else []
        cmds += [(c,) if isinstance(c, str) else tuple(c) for c in commands]
        s.sendall(b"".join(encode(*c) for c in cmds))
        got = b""
        while got.count(b"\r\n") < len(cmds):
            data = s.recv(100)
            if not data:
                return None
            got += data
        return got.split(b"\r\n")[:len(cmds)]
    except (OSError, ssl.SSLError):
        return None
    finally:
        s.close()


def redis_pings(port, password=None, host="127.0.0.1", ssl_context=None):
    """True if a redis-server on port answers PING (after AUTH when it has
    a password; over TLS with ssl_context)."""
    got = redis_first_reply(port, password, host, ssl_context)
    want = [b"+PONG"] if password is None else [b"+OK", b"+PONG"]
    return got == want



def one_command(connect, args, timeout):
    """args sent on a new connection, connect(timeout=timeout) (a server's
    raw()); the reply (an error reply as an Err), or None if it cannot be
    reached or does not answer within timeout."""
    try:
        c = connect(timeout=timeout)
    except (OSError, AssertionError):
        return None
    try:
        return c.cmd(*args)
    except (OSError, AssertionError, Closed):
        return None
    finally:
        c.close()


def redis_cli(*args, timeout=10.0, input=None):
    """Run redis-cli; returns (status, stdout, stderr) as str."""
    return run_to_end([env.REDIS_CLI] + list(args), timeout, input)


class RedisServer(ServerProcess):
    """One redis-server process: loopback only, no persistence, in a
    directory of its own (see ServerProcess). stop() with SIGTERM makes it
    exit 0.

    password sets requirepass (the default user's password).

    tls (a Certs, e.g. shared_certs()) serves TLS only, on port: the
    server's certificate and key are tls.server_cert and tls.server_key,
    clients' certificates are checked against tls.ca, and with auth_clients
    every client must present one (tls.client_cert does). client(), raw()
    and the readiness check speak TLS then; url() is rediss://.

    users is a list of ACL rules, one per user, as redis.conf's "user"
    directive takes them, e.g. "alice on >secret ~dlock:* &dlock:* +evalsha"
    or "default off". The default user stays as it is (or as password makes
    it) unless a rule names it; with it off, a NOAUTH reply to the readiness
    PING counts as an answer. host is the loopback address it binds."""

    NAME = "redis-server"
    PACKAGE = "redis-server"
    WAITING_FOR = "to answer PING"

    @staticmethod
    def binary():
        return env.REDIS_SERVER  # read at each start: a test may change it

    def __init__(self, port=None, password=None, directory=None, tls=None,
                 auth_clients=False, users=None, host="127.0.0.1"):
        self.dir = directory or new_dir("redis")
        self.host = host
        self.fixed_port = port is not None
        self.port = port or free_port()
        self.password = password
        self.tls = tls
        self.auth_clients = bool(auth_clients)
        self.users = list(users or [])
        for rule in self.users:
            if not shlex.split(rule):
                raise ValueError("an empty ACL rule")
        self._process_init(os.path.join(self.dir, "redis.log"))

    def argv(self):
        a = [env.REDIS_SERVER, "--bind", self.host,
             "--save", "", "--appendonly", "no", "--dir", self.dir,
             "--daemonize", "no", "--logfile", "", "--loglevel", "notice"]
        if self.tls is None:
            a += ["--port", str(self.port)]
        else:
            a += ["--port", "0", "--tls-port", str(self.port),
                  "--tls-cert-file", self.tls.server_cert,
                  "--tls-key-file", self.tls.server_key,
                  "--tls-ca-cert-file", self.tls.ca,
                  "--tls-auth-clients", "yes" if self.auth_clients else "no"]
        if self.password is not None:
            a += ["--requirepass", self.password]
        for rule in self.users:
            # one argument per word: redis-server quotes each argument
            a += ["--user"] + shlex.split(rule)
        return a

    def ssl_context(self, ca=None, client_cert=None):
        """A client ssl.SSLContext for this server (None without tls):
        verifies it against ca (default: the CA) and presents the client
        certificate when client_cert (default: when it wants one)."""
        if self.tls is None:
            return None
        if client_cert is None:
            client_cert = self.auth_clients
        return self.tls.context(ca=ca, client_cert=client_cert)

    def answers(self):
        got = redis_first_reply(self.port, self.password, self.host, self.ssl_context())
        if got is None:
            return False
        if self.password is not None:
            return got == [b"+OK", b"+PONG"]
        return got[0] == b"+PONG" or got[0].startswith(b"-NOAUTH")

    def stop_checked(self):
        """Stop with SIGTERM; fail unless it exits 0 (for cleanups)."""
        rc = self.stop()
        if rc not in (0, None):
            raise AssertionError("redis-server exited with %s; log:\n%s" % (rc, self.log()))

    def kill(self):
        """SIGKILL (a crash: the data, never persisted, is gone) and wait
        for the exit. A later stop_checked() does not count it as a
        failure; restart() starts it again, empty (no persistence). Returns
        the status."""
        rc = self.stop(signal.SIGKILL)
        self.rc = None
        return rc

    def cmd(self, *args, timeout=2.0):
        """One command on a new connection; its reply (an error reply as an
        Err), or None if the server is not running, is paused, cannot be
        reached or does not answer within timeout."""
        if not self.running() or self.paused:
            return None
        return one_command(self.raw, args, timeout)

    def expect_ok(self, *args, timeout=5.0, also=()):
        """One command (see cmd) that must answer OK (or one of also)."""
        r = self.cmd(*args, timeout=timeout)
        if r != "OK" and r not in also:
            raise AssertionError("%s on port %d answered %r"
                                 % (" ".join(str(a) for a in args), self.port, r))

    def role(self):
        """"master" or "slave" (ROLE's first word), None if unreachable."""
        r = self.cmd("ROLE")
        return text(r[0]) if isinstance(r, list) and r else None

    def replication(self, timeout=2.0):
        """INFO replication as a dict ({} if unreachable)."""
        r = self.cmd("INFO", "replication", timeout=timeout)
        return parse_info(r) if isinstance(r, bytes) else {}

    def address(self):
        return "%s:%d" % (self.host, self.port)

    def url(self, db=None, password=None):
        """The -b URL of this server: redis://[:password@]127.0.0.1:port[/db]
        (rediss:// with tls; password defaults to the server's)."""
        pw = self.password if password is None else password
        u = "rediss://" if self.tls is not None else "redis://"
        if pw is not None:
            u += ":%s@" % pw
        u += self.address()
        if db is not None:
            u += "/%d" % db
        return u

    def client(self, db=0, **kw):
        """A redis-py client of the redis-server itself, with a connection
        of its own (close it with hangup()): the server's password unless
        password= (and username=) are given; over TLS with tls, verifying
        the server and presenting the client certificate when the server
        wants one."""
        kw.setdefault("socket_timeout", IO_TIMEOUT)
        kw.setdefault("socket_connect_timeout", IO_TIMEOUT)
        kw.setdefault("password", self.password)
        if self.tls is not None:
            kw.setdefault("ssl", True)
            kw.setdefault("ssl_ca_certs", self.tls.ca)
            kw.setdefault("ssl_cert_reqs", "required")
            kw.setdefault("ssl_check_hostname", True)
            if self.auth_clients:
                kw.setdefault("ssl_certfile", self.tls.client_cert)
                kw.setdefault("ssl_keyfile", self.tls.client_key)
        return redis.Redis(host=self.host, port=self.port, db=db,
                           single_connection_client=True, **kw)

    def raw(self, user=None, password=None, **kw):
        """A raw RESP connection to the redis-server (over TLS with tls),
        authenticated: as user with password if given, else with the
        server's password if it has one."""
        if self.tls is not None:
            kw.setdefault("ssl_context", self.ssl_context())
        c = Raw(port=self.port, host=self.host, **kw)
        auth = None
        if user is not None:
            auth = ("AUTH", user, password)
        elif password is not None or self.password is not None:
            auth = ("AUTH", password if password is not None else self.password)
        if auth is not None:
            r = c.cmd(*auth)
            assert r == "OK", r
        return c


def commandstats(conn):
    """INFO commandstats of a redis-server (a Raw connection) as a dict of
    command name -> calls. Commands a script runs are counted too."""
    text = conn.cmd("INFO", "commandstats")
    if isinstance(text, bytes):
        text = text.decode()
    out = {}
    for line in text.split("\r\n"):
        m = re.match(r"^cmdstat_([^:]+):calls=(\d+),", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


class RedisMonitor:
    """MONITOR on a redis-server: records every command it executes as
    (source, name), where source is "lua" for a command a script ran and
    the client's "ip:port" otherwise. sync() waits until everything executed
    before it has been seen; stop() ends the recording."""

    LINE_RE = re.compile(rb'^\+[0-9.]+ \[\d+ ([^\]]+)\] "((?:[^"\\]|\\.)*)"')

    def __init__(self, server):
        self.server = server
        self.entries = []  # (source, name) in execution order
        self._mu = threading.Lock()
        self._seen = threading.Condition(self._mu)
        self._marks = set()
        self.conn = server.raw()
        self.ctl = server.raw()
        # the control connection's commands are left out
        self.own = {"%s:%d" % self.ctl.s.getsockname()[:2]}
        self.conn.send(encode("MONITOR"))
        assert self.conn.read() == "OK"
        self.conn.settimeout(None)
        self._buf = self.conn.buf
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        buf = self._buf
        while True:
            try:
                data = self.conn.s.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            buf += data
            lines = buf.split(b"\r\n")
            buf = lines.pop()
            with self._mu:
                for line in lines:
                    m = self.LINE_RE.match(line)
                    if not m:
                        continue
                    src = m.group(1).decode()
                    name = m.group(2).decode(errors="replace").lower()
                    if src in self.own:
                        if name == "echo":
                            self._marks.add(line.rsplit(b'"', 2)[-2].decode())
                            self._seen.notify_all()
                        continue
                    self.entries.append((src, name))

    def sync(self, timeout=5.0):
        """Wait (bounded) until the monitor has seen every command executed
        before this call."""
        mark = "sync-%d" % next_seq()
        assert self.ctl.cmd("ECHO", mark) == mark.encode()
        deadline = time.monotonic() + timeout
        with self._mu:
            while mark not in self._marks:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("MONITOR did not show a command within %.1f s"
                                         % timeout)
                self._seen.wait(left)

    def take(self):
        """The entries recorded so far, which are then forgotten."""
        with self._mu:
            e, self.entries = self.entries, []
        return e

    def stop(self):
        """End the recording and close both connections (safe twice)."""
        try:
            # wakes the reader, which close() alone would not
            self.conn.s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()
        self.ctl.close()
        self._thread.join(5)


def process_tcp_ports(pid):
    """The local ports of the TCP sockets process pid has open (from
    /proc), to tell which of a redis-server's clients belong to it."""
    inodes = set()
    fddir = "/proc/%d/fd" % pid
    for fd in os.listdir(fddir):
        try:
            target = os.readlink(os.path.join(fddir, fd))
        except OSError:
            continue
        m = re.match(r"^socket:\[(\d+)\]$", target)
        if m:
            inodes.add(m.group(1))
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            with open("/proc/%d/net/%s" % (pid, table)) as f:
                lines = f.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def count_commands(entries):
    """(by_client, by_lua): dicts of command name -> count, for the commands
    that clients sent and for those that scripts ran."""
    client, lua = {}, {}
    for src, name in entries:
        d = lua if src == "lua" else client
        d[name] = d.get(name, 0) + 1
    return client, lua

