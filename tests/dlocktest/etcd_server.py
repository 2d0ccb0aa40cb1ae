"""etcd for the tests (the store of the etcd backend): EtcdServer starts a
one-member etcd on free loopback ports (over TLS if asked, with its JSON
gateway on or off) and reads and writes it (keys, leases, authentication,
/metrics) through the gateway or etcdctl."""

import base64
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import urllib.error
import urllib.request

from . import env
from .conf import backend_section, yaml_value
from .env import new_dir
from .proc import ServerProcess, free_port, port_accepts, run_bytes
from .resp import as_bytes


ETCD_START_TIMEOUT = 15.0  # seconds etcd may take to answer (about 1 s on loopback)
ETCD_HTTP_TIMEOUT = 5.0  # seconds a request of the JSON gateway may take


def _b64(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def _unb64(text):
    return base64.b64decode(text or "")


def prefix_end(prefix):
    """The range_end that makes a range of every key starting with prefix
    (the prefix with its last byte below 0xff incremented)."""
    if isinstance(prefix, str):
        prefix = prefix.encode()
    b = bytearray(prefix)
    while b and b[-1] == 0xFF:
        b.pop()
    if not b:
        return b"\0"  # every key
    b[-1] += 1
    return bytes(b)


# loopback only: no proxy from the environment
_http = urllib.request.build_opener(urllib.request.ProxyHandler({}))

METRIC_RE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class EtcdError(Exception):
    """etcd refused a request: the JSON gateway answered an HTTP status
    other than 200, or etcdctl failed with etcd's error."""


class EtcdUnreachable(EtcdError, OSError):
    """etcdctl got no answer from etcd in time (stopped, paused, not
    listening); an OSError, as the gateway's connection errors are."""


# what etcdctl says when it got no answer (rather than an error of etcd's)
_UNREACHABLE_RE = re.compile(r"context deadline exceeded|DeadlineExceeded|connection refused"
                             r"|Unavailable|all SubConns are in TransientFailure|"
                             r"transport is closing|error reading from server")

_DEFAULT = object()  # an argument left at its default (None means: leave out)


class EtcdServer(ServerProcess):
    """One etcd process, a cluster of one member: client and peer URLs on
    free loopback ports, its data in a directory of its own, warnings only
    in its log.

    start() starts it (again on the same ports and data after stop());
    stop() stops it (resuming it first if pause() stopped it) and is safe to
    call twice. Every process is recorded by spawn(), so one a test could
    not stop is killed at exit.

    tls (a Certs, e.g. shared_certs()) serves TLS only on the client port:
    https client URLs, the server's certificate tls.server_cert (names
    localhost and 127.0.0.1) and key tls.server_key; with client_cert_auth
    (the default) every client must present a certificate signed by tls.ca
    (--client-cert-auth, --trusted-ca-file), as tls.client_cert is. The
    metrics are then served over plain HTTP on a port of their own
    (metrics_port). url() is etcds://, backend_config() writes the
    backend.tls section of a daemon.

    gateway (default: ETCD_GATEWAY of the environment) leaves etcd's JSON
    gateway on; with gateway=False etcd runs with --enable-grpc-gateway=false.
    etcd_bin is the etcd to run (default: ETCD_BIN of the environment).

    The other methods read and write etcd: keys(), put(), delete(),
    compact(), revision(), lease_grant(), lease_ttl(), leases(),
    enable_auth(), through the JSON gateway (POST /v3/..., keys and values
    base64) when it is on and etcd serves plain HTTP, else through etcdctl
    (ETCDCTL_BIN, -w json, with the CA and client certificate under TLS);
    and GET /metrics: metrics(), requests(). Either way they are gRPC calls
    inside etcd and count in requests() like the daemons' own.
    """

    NAME = "etcd"
    PACKAGE = "etcd-server"
    START_LIMIT = ETCD_START_TIMEOUT
    POLL = 0.02

    def binary(self):
        # read at each start: a test may change env.ETCD
        return self.etcd_bin if self.etcd_bin is not None else env.ETCD

    def __init__(self, port=None, directory=None, name="dlockd-test", tls=None,
                 client_cert_auth=True, gateway=None, etcd_bin=None):
        self.etcd_bin = etcd_bin
        self.dir = directory or new_dir("etcd")
        self.fixed_port = port is not None
        self.port = port or free_port()
        self.peer_port = free_port()
        self.tls = tls
        self.client_cert_auth = bool(client_cert_auth) and tls is not None
        self.gateway = env.ETCD_GATEWAY if gateway is None else bool(gateway)
        # TLS: the metrics on plain HTTP, on a port of their own
        self.metrics_port = free_port() if tls is not None else None
        self.name = name
        self.data = os.path.join(self.dir, "data")
        self._process_init(os.path.join(self.dir, "etcd.log"))
        self.member = False  # the data directory holds a member
        self.auth = None  # (user, password) once enable_auth() ran
        self.token = None  # the gateway's token for self.auth

    def client_url(self):
        """The client URL: http://127.0.0.1:port, https:// with tls."""
        return "%s://127.0.0.1:%d" % ("https" if self.tls is not None else "http", self.port)

    def argv(self):
        client = self.client_url()
        peer = "http://127.0.0.1:%d" % self.peer_port
        a = [self.binary(), "--name", self.name, "--data-dir", self.data,
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", "%s=%s" % (self.name, peer),
             "--initial-cluster-state", "new",
             "--initial-cluster-token", "dlockd-test-%d" % self.port,
             "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn"]
        if self.tls is not None:
            a += ["--cert-file", self.tls.server_cert, "--key-file", self.tls.server_key,
                  "--listen-metrics-urls", "http://127.0.0.1:%d" % self.metrics_port]
            if self.client_cert_auth:
                a += ["--client-cert-auth", "--trusted-ca-file", self.tls.ca]
        if not self.gateway:
            a += ["--enable-grpc-gateway=false"]
        return a

    def answers(self):
        # etcdctl waits for a server that does not listen yet: ask only
        # once the port takes connections
        if not port_accepts(self.port):
            return False
        try:
            self.revision(timeout=1.0)
        except (OSError, EtcdError):
            return False
        return True

    def started(self):
        self.member = True

    def new_ports(self):
        # a member's ports are kept once it has data
        if self.fixed_port or self.member:
            return False
        shutil.rmtree(self.data, True)
        self.port = free_port()
        self.peer_port = free_port()
        if self.metrics_port is not None:
            self.metrics_port = free_port()
        return True

    def pause(self):
        """SIGSTOP, as ServerProcess.pause. etcd's clock goes on: a lease
        that ran out meanwhile is revoked soon after resume()."""
        super().pause()

    def stop_checked(self):
        """Stop with SIGTERM (for cleanups); fail unless it ends as etcd does
        on SIGTERM: it raises the signal again, status -SIGTERM. One the
        test stopped itself is left alone."""
        if self.proc is None:
            return
        rc = self.stop()
        if rc not in (0, -signal.SIGTERM):
            raise AssertionError("etcd exited with %s; log:\n%s" % (rc, self.log()))

    def endpoint(self):
        """host:port of the client URL, as backend.endpoints takes it."""
        return "127.0.0.1:%d" % self.port

    def url(self, user=None, password=None):
        """The -b URL of this server: etcd://[user:password@]127.0.0.1:port
        (etcds:// with tls)."""
        u = "etcds://" if self.tls is not None else "etcd://"
        if user is not None or password is not None:
            u += "%s:%s@" % (user or "", password or "")
        return u + self.endpoint()

    def backend_config(self, ca=_DEFAULT, cert=_DEFAULT, key=_DEFAULT, server_name=None,
                       enabled=True, endpoints=None, **keys):
        """A daemon's backend section (YAML text) for this server: type
        etcd, endpoints (default: this server's), the other backend.* keys
        given, and with tls a tls section: enabled, ca_file (default the
        CA), cert_file and key_file (default: the client certificate when
        the server wants one), server_name if given. None leaves a setting
        out; enabled=None leaves the tls section out."""
        conf = {"type": "etcd",
                "endpoints": list(endpoints) if endpoints else [self.endpoint()]}
        conf.update(keys)
        text = backend_section(conf)
        if enabled is None:
            return text
        certs = self.tls
        if ca is _DEFAULT:
            ca = certs.ca if certs is not None else None
        if cert is _DEFAULT:
            cert = certs.client_cert if self.client_cert_auth else None
        if key is _DEFAULT:
            key = certs.client_key if self.client_cert_auth else None
        text += "  tls:\n    enabled: %s\n" % yaml_value(bool(enabled))
        for name, value in (("ca_file", ca), ("cert_file", cert), ("key_file", key),
                            ("server_name", server_name)):
            if value is not None:
                text += "    %s: %s\n" % (name, yaml_value(value))
        return text

    # ---- etcdctl (gateway off, or TLS) ----

    def uses_etcdctl(self):
        """Whether these methods talk to the server through etcdctl (its
        gateway is off, or it serves TLS) rather than the JSON gateway."""
        return not self.gateway or self.tls is not None

    def etcdctl(self, *args, timeout=ETCD_HTTP_TIMEOUT, user=True):
        """Run etcdctl (API v3, -w json) against this server with args (str
        or bytes; the CA and client certificate with tls; once
        enable_auth() ran, as its user unless user=False); the decoded
        JSON answer, or None if it printed none. Raises EtcdUnreachable
        when etcd does not answer within timeout s, EtcdError when it
        refuses."""
        if shutil.which(env.ETCDCTL) is None:
            raise AssertionError("etcdctl is missing: %r not found (Debian package "
                                 "etcd-client)" % env.ETCDCTL)
        ms = max(int(timeout * 1000), 1)
        argv = [env.ETCDCTL, "--endpoints", self.client_url(), "-w", "json",
                "--dial-timeout", "%dms" % ms, "--command-timeout", "%dms" % ms]
        if self.tls is not None:
            argv += ["--cacert", self.tls.ca]
            if self.client_cert_auth:
                argv += ["--cert", self.tls.client_cert, "--key", self.tls.client_key]
        if user and self.auth is not None:
            argv += ["--user", "%s:%s" % self.auth]
        argv += list(args)
        ctl_env = {k: v for k, v in os.environ.items() if not k.startswith("ETCDCTL_")}
        ctl_env["ETCDCTL_API"] = "3"
        try:
            rc, out, err = run_bytes(argv, 2 * timeout + 5, env=ctl_env)
        except subprocess.TimeoutExpired:
            raise EtcdUnreachable("etcdctl %s: no answer within %.1f s" % (args, timeout))
        text = out.decode(errors="replace").strip()
        if rc != 0:
            why = (err.decode(errors="replace").strip().splitlines() or [text])[-1]
            what = "etcdctl %s: %s" % (" ".join(a.decode(errors="replace")
                                                if isinstance(a, bytes) else a
                                                for a in args), why)
            if _UNREACHABLE_RE.search(why):
                raise EtcdUnreachable(what)
            raise EtcdError(what)
        if not text.startswith(("{", "[")):
            return None
        return json.loads(text)

    def _ctl_range(self, key, range_end=None, timeout=ETCD_HTTP_TIMEOUT):
        """etcdctl get of key (up to range_end, as the gateway's kv/range
        takes them, bytes); the decoded answer (header, kvs, count)."""
        if range_end is None:
            args = ["get", "--", key]
        elif key == b"\0" and range_end == b"\0":
            args = ["get", "--prefix", "--", ""]  # every key
        elif range_end == b"\0":
            args = ["get", "--from-key", "--", key]
        elif range_end == prefix_end(key):
            args = ["get", "--prefix", "--", key]
        else:
            args = ["get", "--", key, range_end]
        return self.etcdctl(*args, timeout=timeout)

    # ---- the JSON gateway ----

    def call(self, path, body, timeout=ETCD_HTTP_TIMEOUT, token=True):
        """POST body (a dict) as JSON to /v3/<path>; the decoded answer.
        Once enable_auth() ran, as its user (token=False: as nobody).
        Without the gateway (uses_etcdctl()), kv/range alone, through
        etcdctl (an OSError when etcd does not answer, as with the
        gateway)."""
        if self.uses_etcdctl():
            if path != "kv/range":
                raise EtcdError("%s: not available through etcdctl" % path)
            end = body.get("range_end")
            return self._ctl_range(_unb64(body.get("key")),
                                   _unb64(end) if end is not None else None, timeout)
        headers = {"Content-Type": "application/json"}
        if token and self.auth is not None:
            if self.token is None:
                self.token = self.call("auth/authenticate",
                                       {"name": self.auth[0], "password": self.auth[1]},
                                       timeout, token=False)["token"]
            headers["Authorization"] = self.token
        req = urllib.request.Request("http://127.0.0.1:%d/v3/%s" % (self.port, path),
                                     data=json.dumps(body).encode(), method="POST",
                                     headers=headers)
        try:
            with _http.open(req, timeout=timeout) as f:
                return json.loads(f.read().decode())
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            if token and self.token is not None and "invalid auth token" in text:
                self.token = None  # etcd restarted: authenticate again
                return self.call(path, body, timeout)
            raise EtcdError("%s: HTTP %d: %s" % (path, e.code, text))

    def gateway_answers(self, timeout=2.0):
        """What POST /v3/kv/range on the client port gets: ("json", the
        decoded answer), ("http", status) for another answer, or ("error",
        why) when the request fails (no HTTP answer, or TLS refused). With
        tls the request is HTTPS with the client certificate."""
        req = urllib.request.Request("%s/v3/kv/range" % self.client_url(),
                                     data=json.dumps({"key": _b64(b"a")}).encode(),
                                     method="POST",
                                     headers={"Content-Type": "application/json"})
        handlers = [urllib.request.ProxyHandler({})]
        if self.tls is not None:
            handlers.append(urllib.request.HTTPSHandler(
                context=self.tls.context(client_cert=self.client_cert_auth)))
        try:
            with urllib.request.build_opener(*handlers).open(req, timeout=timeout) as f:
                data = f.read()
                status = f.status
        except urllib.error.HTTPError as e:
            return ("http", e.code)
        except (OSError, ValueError, http.client.HTTPException) as e:
            return ("error", str(e))
        try:
            return ("json", json.loads(data.decode()))
        except ValueError:
            return ("http", status)

    def enable_auth(self, user="root", password="s3cret"):
        """Add user (a root) with password and turn authentication on:
        from then on every call needs a user's token (this object's calls
        authenticate as user). A restarted server keeps it on."""
        if self.uses_etcdctl():
            self.etcdctl("user", "add", user, "--new-user-password", password,
                         "--interactive=false")
            self.etcdctl("user", "grant-role", user, "root")
            self.etcdctl("auth", "enable")
        else:
            self.call("auth/user/add", {"name": user, "password": password})
            self.call("auth/user/grant", {"user": user, "role": "root"})
            self.call("auth/enable", {})
        self.auth = (user, password)
        self.token = None

    def revision(self, timeout=ETCD_HTTP_TIMEOUT):
        """The store's current revision."""
        if self.uses_etcdctl():
            r = self.etcdctl("get", "--", "\1", timeout=timeout)
        else:
            r = self.call("kv/range", {"key": _b64(b"\0"), "count_only": True}, timeout)
        return int(r["header"]["revision"])

    def keys(self, prefix=b""):
        """Every key under prefix as (key, create_revision, lease, value),
        key and value bytes, sorted by create revision."""
        if isinstance(prefix, str):
            prefix = prefix.encode()
        if self.uses_etcdctl():
            r = self._ctl_range(prefix or b"\0", prefix_end(prefix))
        else:
            r = self.call("kv/range", {"key": _b64(prefix or b"\0"),
                                       "range_end": _b64(prefix_end(prefix))})
        out = [(_unb64(kv["key"]), int(kv.get("create_revision", 0)),
                int(kv.get("lease", 0)), _unb64(kv.get("value")))
               for kv in r.get("kvs", [])]
        out.sort(key=lambda e: e[1])
        return out

    def put(self, key, value, lease=0):
        """Put key = value (optionally on a lease); the new revision."""
        if self.uses_etcdctl():
            args = ["put"] + (["--lease", "%x" % lease] if lease else [])
            r = self.etcdctl(*(args + ["--", as_bytes(key), as_bytes(value)]))
            return int(r["header"]["revision"])
        body = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        return int(self.call("kv/put", body)["header"]["revision"])

    def delete(self, key, prefix=False):
        """Delete key (every key under it with prefix=True); how many went."""
        if self.uses_etcdctl():
            r = self.etcdctl(*(["del"] + (["--prefix"] if prefix else [])
                               + ["--", as_bytes(key)]))
            return int(r.get("deleted", 0))
        body = {"key": _b64(key)}
        if prefix:
            body["range_end"] = _b64(prefix_end(key))
        return int(self.call("kv/deleterange", body).get("deleted", 0))

    def compact(self, revision=None, physical=True):
        """Compact the history up to revision (default: the current one)."""
        if revision is None:
            revision = self.revision()
        if self.uses_etcdctl():
            self.etcdctl(*(["compaction"] + (["--physical"] if physical else [])
                           + [str(revision)]))
        else:
            self.call("kv/compaction", {"revision": str(revision), "physical": physical})
        return revision

    def lease_grant(self, ttl_s):
        """A new lease of ttl_s seconds; its id."""
        if self.uses_etcdctl():
            return int(self.etcdctl("lease", "grant", str(ttl_s))["ID"])
        return int(self.call("lease/grant", {"TTL": str(ttl_s)})["ID"])

    def lease_ttl(self, lease):
        """(ttl, granted_ttl) of a lease in seconds; ttl is -1 once it is gone."""
        if self.uses_etcdctl():
            r = self.etcdctl("lease", "timetolive", "%x" % lease)
            return int(r.get("ttl", -1)), int(r.get("granted-ttl", 0))
        r = self.call("kv/lease/timetolive", {"ID": str(lease)})
        return int(r.get("TTL", -1)), int(r.get("grantedTTL", 0))

    def leases(self):
        """The ids of every live lease."""
        if self.uses_etcdctl():
            r = self.etcdctl("lease", "list")
            return sorted(int(x["id"]) for x in r.get("leases") or [])
        r = self.call("kv/lease/leases", {})
        return sorted(int(x["ID"]) for x in r.get("leases", []))

    # ---- metrics ----

    def metrics_url(self):
        """Where GET /metrics is served: the client port, or with tls the
        metrics port (plain HTTP)."""
        if self.metrics_port is not None:
            return "http://127.0.0.1:%d/metrics" % self.metrics_port
        return "http://127.0.0.1:%d/metrics" % self.port

    def metrics(self):
        """GET /metrics as a dict of (name, frozenset of (label, value)) ->
        float. Not a gRPC call: it counts in no request counter."""
        with _http.open(self.metrics_url(), timeout=ETCD_HTTP_TIMEOUT) as f:
            text = f.read().decode(errors="replace")
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = METRIC_RE.match(line)
            if not m:
                continue
            labels = frozenset(LABEL_RE.findall(m.group(2) or ""))
            try:
                out[(m.group(1), labels)] = float(m.group(3))
            except ValueError:
                pass
        return out

    @staticmethod
    def count(metrics, name, **labels):
        """The sum of metric name over the series that have these labels."""
        want = set(labels.items())
        return sum(v for (n, ls), v in metrics.items() if n == name and want <= ls)

    def requests(self, method, metrics=None):
        """gRPC calls of method (Range, Txn, Put, DeleteRange, LeaseGrant,
        LeaseKeepAlive, Watch, ...) started so far: a stream counts once."""
        if metrics is None:
            metrics = self.metrics()
        return int(self.count(metrics, "grpc_server_started_total", grpc_method=method))

    def messages(self, method, metrics=None):
        """gRPC messages received of method (for streams: each keepalive
        request or watch request sent on it)."""
        if metrics is None:
            metrics = self.metrics()
        return int(self.count(metrics, "grpc_server_msg_received_total", grpc_method=method))

