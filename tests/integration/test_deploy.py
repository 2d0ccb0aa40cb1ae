"""The deployment examples: docs/kubernetes/dlockd-sidecar.yaml and the
container image's configuration, conf/dlockd-docker.yaml.

The Kubernetes manifests are parsed (python3-yaml) and checked for what
docs/kubernetes.md promises: the dlockd configuration of the ConfigMap passes
dlockd -t, the application and dlockd share /run/dlockd, dlockd listens on
the socket there, the probes ping it, the pod's fsGroup lets the application
reach the socket. No cluster is involved.
"""

import os
import subprocess
import tempfile
import unittest

import yaml

from dlocktest.env import DLOCKD, WRAPPER

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIDECAR = os.path.join(TOP, "docs", "kubernetes", "dlockd-sidecar.yaml")
DOCKER_CONF = os.path.join(TOP, "conf", "dlockd-docker.yaml")
SOCKET = "unix:/run/dlockd/dlockd.sock"


def check_conf(text):
    """Run dlockd -t on the configuration text; return (exit status, output).
    dlockd -t checks that a Unix socket's directory exists: /run/dlockd, which
    the container's volume provides, is a temporary directory here."""
    with tempfile.TemporaryDirectory() as d:
        run = os.path.join(d, "run")
        os.mkdir(run)
        path = os.path.join(d, "dlockd.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace("/run/dlockd/", run + "/"))
        p = subprocess.run([*WRAPPER, DLOCKD, "-t", "-c", path], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60, check=False)
    return p.returncode, p.stdout.decode(errors="replace")


class TestKubernetesSidecar(unittest.TestCase):
    """docs/kubernetes/dlockd-sidecar.yaml"""

    @classmethod
    def setUpClass(cls):
        with open(SIDECAR, encoding="utf-8") as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        cls.by_kind = {d["kind"]: d for d in docs}
        cls.configmap = cls.by_kind["ConfigMap"]
        cls.conf_text = cls.configmap["data"]["dlockd.yaml"]
        cls.conf = yaml.safe_load(cls.conf_text)
        cls.pod = cls.by_kind["Deployment"]["spec"]["template"]["spec"]
        cls.containers = {c["name"]: c for c in cls.pod["containers"]}
        cls.dlockd = cls.containers["dlockd"]
        cls.app = cls.containers["app"]

    def test_kinds(self):
        self.assertEqual(sorted(self.by_kind), ["ConfigMap", "Deployment"])

    def test_config_passes_dlockd_t(self):
        self.assertIn("unix:/run/dlockd/", self.conf_text)
        rc, out = check_conf(self.conf_text)
        self.assertEqual(rc, 0, out)
        self.assertIn("configuration OK", out)

    def test_config_redis_service(self):
        self.assertEqual(self.conf["backend"]["type"], "redis")
        self.assertEqual(self.conf["backend"]["address"], "redis:6379")

    def test_dlockd_reads_the_configmap(self):
        cmd = self.dlockd["command"]
        conf = cmd[cmd.index("-c") + 1]
        mounts = {m["name"]: m["mountPath"] for m in self.dlockd["volumeMounts"]}
        volumes = {v["name"]: v for v in self.pod["volumes"]}
        name = next(n for n, v in volumes.items()
                    if v.get("configMap", {}).get("name") == self.configmap["metadata"]["name"])
        self.assertEqual(os.path.join(mounts[name], "dlockd.yaml"), conf)

    def test_socket_shared_in_an_emptydir(self):
        self.assertIn(SOCKET, self.conf["listen"])
        volumes = {v["name"]: v for v in self.pod["volumes"]}
        shared = set()
        for c in (self.dlockd, self.app):
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            self.assertIn("/run/dlockd", mounts, c["name"])
            shared.add(mounts["/run/dlockd"])
        self.assertEqual(len(shared), 1, "one volume at /run/dlockd in both containers")
        self.assertIn("emptyDir", volumes[shared.pop()])
        env = {e["name"]: e["value"] for e in self.app.get("env", [])}
        self.assertEqual(env.get("DLOCK_ADDR"), SOCKET)

    def test_app_reaches_the_socket(self):
        # group fsGroup owns the emptyDir (setgid), so the socket; mode 0660
        self.assertIn("fsGroup", self.pod["securityContext"])
        self.assertEqual(self.conf["unix_socket_mode"], "0660")
        self.assertTrue(self.pod["securityContext"].get("runAsNonRoot"))
        self.assertEqual(self.dlockd["securityContext"]["runAsUser"], 480)

    def test_probes_ping_dlockd(self):
        listen = set(self.conf["listen"])
        for kind in ("readinessProbe", "livenessProbe"):
            cmd = self.dlockd[kind]["exec"]["command"]
            self.assertEqual(cmd[0], "dlock", kind)
            self.assertEqual(cmd[-1], "ping", kind)
            self.assertIn(cmd[cmd.index("-a") + 1], listen, kind)

    def test_resource_requests(self):
        for c in self.containers.values():
            self.assertIn("requests", c["resources"], c["name"])


class TestDockerConfig(unittest.TestCase):
    """conf/dlockd-docker.yaml, the image's /etc/dlockd/dlockd.yaml"""

    def test_passes_dlockd_t(self):
        with open(DOCKER_CONF, encoding="utf-8") as f:
            rc, out = check_conf(f.read())
        self.assertEqual(rc, 0, out)
        self.assertIn("configuration OK", out)

    def test_listens_on_7480_and_the_socket(self):
        with open(DOCKER_CONF, encoding="utf-8") as f:
            conf = yaml.safe_load(f)
        self.assertEqual(conf["listen"], ["0.0.0.0:7480", SOCKET])

    def test_dockerfile_uses_it(self):
        with open(os.path.join(TOP, "Dockerfile"), encoding="utf-8") as f:
            text = f.read()
        self.assertIn("COPY conf/dlockd-docker.yaml /etc/dlockd/dlockd.yaml", text)
        self.assertIn("EXPOSE 7480", text)
        self.assertIn("USER dlockd", text)
