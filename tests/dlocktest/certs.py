"""TLS certificates for the tests, made with the openssl command: a CA, a
server certificate for localhost and 127.0.0.1, a client certificate and an
unrelated CA (make_certs, Certs), or one of this process shared by every
test that only reads them (shared_certs)."""

import os
import ssl
import subprocess
import threading

from .env import new_dir


def openssl(*args, cwd):
    """Run the openssl command in cwd; fail with its output if it fails."""
    p = subprocess.run(["openssl"] + list(args), cwd=cwd, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    if p.returncode != 0:
        raise AssertionError("openssl %s: %s" % (" ".join(args), p.stdout.decode()))


# a new EC P-256 key (fast to make, and every TLS stack here takes it)
_NEW_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def make_ca(d, name, cn=None):
    """A self-signed CA valid for two days: name.crt and name.key in d."""
    openssl("req", "-x509", *_NEW_KEY, "-keyout", name + ".key", "-out", name + ".crt",
            "-days", "2", "-subj", "/CN=%s" % (cn or name), cwd=d)


def make_cert(d, name, ca, cn, san=None):
    """A certificate name.crt (key name.key) in d for cn, signed by the CA
    ca (ca.crt and ca.key in d), valid for two days, with subjectAltName san
    (e.g. "DNS:localhost,IP:127.0.0.1") if given."""
    openssl("req", *_NEW_KEY, "-keyout", name + ".key", "-out", name + ".csr",
            "-subj", "/CN=%s" % cn, cwd=d)
    ext = os.path.join(d, name + ".ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=%s\n" % san if san else "basicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey", ca + ".key",
            "-CAcreateserial", "-out", name + ".crt", "-days", "2", "-extfile", ext, cwd=d)


class Certs:
    """The paths of the certificates make_certs() makes in one directory
    (PEM files):

      ca, ca_key                  a CA (ca.crt, ca.key)
      server_cert, server_key     CN localhost, DNS:localhost, IP:127.0.0.1,
                                  signed by the CA (server.crt, server.key)
      client_cert, client_key     CN test client, signed by the CA
                                  (client.crt, client.key)
      other_ca, other_ca_key      an unrelated CA (other-ca.crt, other-ca.key)
    """

    def __init__(self, directory):
        self.dir = directory
        self.ca = self.path("ca.crt")
        self.ca_key = self.path("ca.key")
        self.server_cert = self.path("server.crt")
        self.server_key = self.path("server.key")
        self.client_cert = self.path("client.crt")
        self.client_key = self.path("client.key")
        self.other_ca = self.path("other-ca.crt")
        self.other_ca_key = self.path("other-ca.key")

    def path(self, name):
        """The file name in the certificates' directory."""
        return os.path.join(self.dir, name)

    def context(self, ca=None, client_cert=False):
        """A client ssl.SSLContext that verifies servers (and their names)
        against ca (default: the CA) and, with client_cert, presents the
        client certificate."""
        ctx = ssl.create_default_context(cafile=ca or self.ca)
        if client_cert:
            ctx.load_cert_chain(self.client_cert, self.client_key)
        return ctx


def make_certs(directory=None):
    """Make the test certificates (see Certs) in directory (default: a new
    one); returns their Certs. Takes a fraction of a second."""
    d = directory or new_dir("certs")
    make_ca(d, "ca", "dlockd test CA")
    make_ca(d, "other-ca", "dlockd other CA")
    make_cert(d, "server", "ca", "localhost", "DNS:localhost,IP:127.0.0.1")
    make_cert(d, "client", "ca", "test client")
    return Certs(d)


_shared_certs = None
_shared_certs_lock = threading.Lock()


def shared_certs():
    """The Certs of this process, made on first use (do not change them)."""
    global _shared_certs
    with _shared_certs_lock:
        if _shared_certs is None:
            _shared_certs = make_certs()
        return _shared_certs
