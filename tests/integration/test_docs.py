"""The documentation against the daemon: INFO answers exactly the sections and
fields proto/PROTOCOL.md lists, with each backend."""

import os
import re

from dlocktest.cases import DaemonTestCase

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def documented_info():
    """PROTOCOL.md's INFO table: {section: {backend or None: set of fields}}."""
    with open(os.path.join(TOP, "proto", "PROTOCOL.md")) as f:
        doc = f.read()
    table = doc[doc.index("\n### INFO\n"):]
    table = table[:table.index("\n### ", 1)]
    out = {}
    section = None
    for m in re.finditer(r"^\| *(\w*) *\| *(?:\(([\w-]+)\) )?`([\w<>]+)`", table, re.M):
        section = m.group(1) or section
        out.setdefault(section, {}).setdefault(m.group(2), set()).add(m.group(3))
    return out


class InfoDocumented:
    """INFO's sections and fields with this class's BACKEND are the documented ones
    (those of DOCUMENTED_AS, the rows marked with these backends, when set)."""

    DOCUMENTED_AS = ()

    def test_info_matches_protocol_md(self):
        text = self.raw().cmd("INFO")
        if isinstance(text, bytes):
            text = text.decode()
        got = {}
        section = None
        for line in text.splitlines():
            if line.startswith("# "):
                section = line[2:]
                got[section] = set()
            elif ":" in line:
                # one row per master or node: backend_master<i>_slots
                got[section].add(re.sub(r"^(backend_(?:master|node))\d+_", r"\1<i>_",
                                        line.split(":", 1)[0]))
        kinds = self.DOCUMENTED_AS or (self.BACKEND,)
        want = {name: fields.get(None, set()).union(*(fields.get(k, set()) for k in kinds))
                for name, fields in documented_info().items()}
        self.assertEqual(list(got), list(want), "INFO's sections")
        for name in want:
            self.assertEqual(sorted(got[name] - want[name]), [],
                             "INFO fields of # %s missing in PROTOCOL.md" % name)
            self.assertEqual(sorted(want[name] - got[name]), [],
                             "PROTOCOL.md's # %s fields INFO does not answer" % name)


class TestInfoMemory(InfoDocumented, DaemonTestCase):
    BACKEND = "memory"


class TestInfoRedis(InfoDocumented, DaemonTestCase):
    BACKEND = "redis"


class TestInfoEtcd(InfoDocumented, DaemonTestCase):
    BACKEND = "etcd"


class TestInfoRedisCluster(InfoDocumented, DaemonTestCase):
    """The redis fields (summed over the masters) and the cluster's own."""
    BACKEND = "redis-cluster"
    DOCUMENTED_AS = ("redis", "redis-cluster")


class TestInfoRedlock(InfoDocumented, DaemonTestCase):
    """The redis fields (summed over the nodes) and redlock's own."""
    BACKEND = "redlock"
    DOCUMENTED_AS = ("redis", "redlock")
