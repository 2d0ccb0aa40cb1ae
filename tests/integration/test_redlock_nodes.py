"""The redlock backend's nodes, each with settings of its own: a password,
an ACL user with a password file, TLS with a client certificate and a
password, where the backend's own settings would not do. Real redis-server processes,
certificates made with openssl."""

import os
import subprocess

from dlocktest.cases import RedisTestCase
from dlocktest.certs import shared_certs
from dlocktest.daemon import Daemon
from dlocktest.env import DLOCKD, new_dir, unique_key
from dlocktest.proc import wait_until
from dlocktest.resp import Err


class TestRedlockNodeSettings(RedisTestCase):

    def nodes(self):
        """Three nodes that each want something else: a password, an ACL
        user, TLS with a client certificate."""
        certs = shared_certs()
        plain = self.start_redis(password="pw-zero")
        acl = self.start_redis(users=["bob on >pw-one ~* &* +@all"])
        tls = self.start_redis(tls=certs, auth_clients=True, password="pw-two")
        return certs, plain, acl, tls

    def config(self, d, certs, plain, acl, tls, tls_name=None):
        """A backend section with the three nodes' own settings (and a
        backend password that none of them takes), bob's password in a
        file beside the configuration."""
        with open(os.path.join(d, "bob.pass"), "w") as f:
            f.write("pw-one\n")
        lines = ["backend:", "  type: redlock", "  password: not-this-one",
                 "  command_timeout_ms: 500", "  nodes:",
                 "    - address: %s" % plain.address(),
                 "      password: pw-zero",
                 "    - address: %s" % acl.address(),
                 "      username: bob",
                 "      password_file: bob.pass",
                 "    - address: %s" % tls.address(),
                 "      password: pw-two",
                 "      tls:",
                 "        enabled: true",
                 "        ca_file: %s" % certs.ca,
                 "        cert_file: %s" % certs.client_cert,
                 "        key_file: %s" % certs.client_key]
        if tls_name is not None:
            lines.append("        server_name: %s" % tls_name)
        return "\n".join(lines) + "\n"

    def daemon(self, text, directory):
        d = Daemon(text, directory=directory)
        self.addCleanup(d.stop_checked)
        return d.start()

    def test_each_node_with_its_own_settings(self):
        certs, plain, acl, tls = self.nodes()
        directory = self.new_daemon_dir()
        d = self.daemon(self.config(directory, certs, plain, acl, tls), directory)
        wait_until(lambda: d.info().get("backend_nodes_up") == "3", 10.0,
                   what="the three nodes connected:\n%s" % d.log())
        c = d.raw()
        self.addCleanup(c.close)
        key = unique_key("nodes")
        reply = c.cmd("LOCK", key, "TTL", "9000")
        self.assertNotIsInstance(reply, Err, reply)
        self.assertEqual(c.cmd("STATUS", key)[-1], b"connected")
        lease = ("dlock:l:" + key).encode()
        for server, kw in ((plain, {}), (acl, {"username": "bob", "password": "pw-one"}),
                           (tls, {})):
            r = server.client(**kw)
            try:
                self.assertEqual(r.get(lease), b"x0:" + reply[0],
                                 "the lease on %s" % server.address())
            finally:
                r.close()
        self.assertEqual(c.cmd("UNLOCK", key), 0)
        self.assertNotIn("not-this-one", d.log(100000))

    def test_a_node_refused_leaves_the_others(self):
        """A node whose own setting is wrong (here its certificate's name)
        is down alone; the others make a majority."""
        certs, plain, acl, tls = self.nodes()
        directory = self.new_daemon_dir()
        d = self.daemon(self.config(directory, certs, plain, acl, tls,
                                    tls_name="other.example"), directory)
        wait_until(lambda: "certificate not verified: hostname mismatch" in d.log(100000),
                   10.0, what="the TLS node refused")
        info = d.info()
        self.assertEqual(info["backend_nodes_up"], "2", info)
        self.assertEqual(info["backend_node2_connected"], "0", info)
        c = d.raw()
        self.addCleanup(c.close)
        key = unique_key("nodes")
        self.assertNotIsInstance(c.cmd("LOCK", key, "TTL", "9000"), Err)
        self.assertEqual(c.cmd("STATUS", key)[-1], b"degraded")

    def test_check_names_a_node_whose_files_do_not_load(self):
        """dlockd -t loads each node's own TLS files and names the node."""
        certs, plain, acl, tls = self.nodes()
        directory = self.new_daemon_dir()
        text = self.config(directory, certs, plain, acl, tls).replace(
            certs.client_key, os.path.join(directory, "missing.key"))
        path = os.path.join(directory, "dlockd.yaml")
        with open(path, "w") as f:
            f.write(text)
        p = subprocess.run([DLOCKD, "-t", "-c", path], capture_output=True, text=True,
                           timeout=30)
        self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("TLS of node %s" % tls.address(), p.stderr + p.stdout)

    def new_daemon_dir(self):
        return new_dir("dlockd")
