"""The documentation against the tree and the daemon: INFO answers exactly the
sections and fields docs/protocol.md lists, with each backend; every relative
link (and #anchor) of README.md and docs/ resolves; each setting is explained
in dlockd.yaml(5) and named in at most one page besides; the README stays a
front door whose two commands come first; and the README's examples run as
written against a daemon."""

import glob
import os
import re
import shlex
import subprocess
import unittest

from dlocktest.cases import DaemonTestCase
from dlocktest.env import DLOCK, PYTHON, SLOWDOWN
from dlocktest.proc import reap, run_to_end, spawn

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(TOP, "README.md")
MAN_CONF = os.path.join(TOP, "conf", "dlockd.yaml.5")
README_MAX_LINES = 300


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def markdown_pages():
    """README.md and every Markdown page under docs/, as paths from TOP."""
    pages = ["README.md"]
    pages += sorted(os.path.relpath(p, TOP) for p in
                    glob.glob(os.path.join(TOP, "docs", "**", "*.md"), recursive=True))
    return pages


def prose(text):
    """text without its fenced and indented code blocks: what is read as
    Markdown, not shown as code."""
    out = []
    fence = None
    prev_blank = True
    in_indented = False
    for line in text.split("\n"):
        m = re.match(r"^ {0,3}(```+|~~~+)", line)
        if fence is None and m:
            fence = m.group(1)[0] * 3
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            continue
        if line.startswith("    ") and (prev_blank or in_indented):
            in_indented = True
            continue
        in_indented = False
        prev_blank = line.strip() == ""
        out.append(line)
    return "\n".join(out)


def github_anchor(heading):
    """The anchor GitHub gives a heading's text: inline markup dropped,
    lower case, everything but letters, digits, '_', '-' and spaces
    removed, spaces made '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in "_- ")
    return text.replace(" ", "-")


def anchors(text):
    """The set of anchors of a Markdown page's headings (a repeated heading
    gets -1, -2, ... as on GitHub)."""
    seen = {}
    out = set()
    for m in re.finditer(r"^#{1,6} +(.+?) *#*$", prose(text), re.M):
        base = github_anchor(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else "%s-%d" % (base, n))
    return out


def links(text):
    """The targets of the inline links of a page's prose, inline code left
    out."""
    body = re.sub(r"`[^`\n]*`", "", prose(text))
    return re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", body)


def documented_info():
    """docs/protocol.md's INFO table: {section: {backend or None: set of fields}}."""
    doc = read(os.path.join(TOP, "docs", "protocol.md"))
    table = doc[doc.index("\n### INFO\n"):]
    table = table[:table.index("\n### ", 1)]
    out = {}
    section = None
    for m in re.finditer(r"^\| *(\w*) *\| *(?:\(([\w-]+)\) )?`([\w<>]+)`", table, re.M):
        section = m.group(1) or section
        out.setdefault(section, {}).setdefault(m.group(2), set()).add(m.group(3))
    return out


def settings():
    """Every key dlockd.yaml(5) explains, as written there (backend.nodes...)."""
    return sorted(set(re.findall(r"^\.TP\n\.B ([a-z_.]+)$", read(MAN_CONF), re.M)))


def names(text, leaf):
    """Whether text names the setting leaf as a word of its own (an INFO
    field such as backend_lease_cache_ms does not count)."""
    return re.search(r"(?<![\w.-])(?:[a-z]+\.)*%s(?![\w-])" % re.escape(leaf), text) is not None


class TestLinks(unittest.TestCase):

    def test_relative_links_resolve(self):
        """Every relative link of README.md and docs/**/*.md names a file or
        directory of the tree, and its #anchor a heading of the page."""
        bad = []
        for page in markdown_pages():
            for target in links(read(os.path.join(TOP, page))):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # https:, mailto:
                path, _, anchor = target.partition("#")
                dest = (os.path.normpath(os.path.join(TOP, os.path.dirname(page), path))
                        if path else os.path.join(TOP, page))
                if not dest.startswith(TOP + os.sep) or not os.path.exists(dest):
                    bad.append("%s: %s: no such file" % (page, target))
                elif anchor and dest.endswith(".md") and anchor not in anchors(read(dest)):
                    bad.append("%s: %s: no heading with that anchor" % (page, target))
        self.assertEqual(bad, [])

    def test_anchors_follow_github(self):
        self.assertEqual(github_anchor("7.4 Leases and renewal"), "74-leases-and-renewal")
        self.assertEqual(github_anchor("libdlock, the C client"), "libdlock-the-c-client")
        self.assertEqual(github_anchor("The `dlock` command?"), "the-dlock-command")
        self.assertEqual(anchors("# A\n```\n# not a heading\n```\n## A\n"), {"a", "a-1"})


class TestSettingsExplainedOnce(unittest.TestCase):
    """dlockd.yaml(5) explains every setting; the other pages link there."""

    # the backend settings that pages used to explain over and over: named
    # by the man page, the example configuration and the design notes only
    TUNING = ("handoff_limit", "lease_cache_ms", "min_replicas_ack", "restart_keepout_ms")
    TUNING_PAGES = ["conf/dlockd.yaml", "conf/dlockd.yaml.5", "docs/design.md"]

    def test_backend_tuning_only_in_man_page_config_and_design(self):
        files = markdown_pages() + ["conf/dlockd.yaml", "conf/dlockd.yaml.5"]
        for leaf in self.TUNING:
            found = [f for f in files if names(read(os.path.join(TOP, f)), leaf)]
            self.assertTrue(set(found) <= set(self.TUNING_PAGES), "%s named in %s"
                            % (leaf, found))
            self.assertIn("conf/dlockd.yaml.5", found, leaf)

    def test_each_setting_named_by_one_page_at_most(self):
        """A setting appears in the prose of at most one page besides the man
        page (examples of configuration files aside); docs/kubernetes.md
        walks through its example's configuration key by key."""
        pages = [p for p in markdown_pages() if p != "docs/kubernetes.md"]
        texts = {p: prose(read(os.path.join(TOP, p))) for p in pages}
        keys = settings()
        self.assertIn("backend.handoff_limit", keys)
        crowded = {}
        for key in keys:
            leaf = key.rsplit(".", 1)[-1]
            if "_" not in leaf:
                continue  # listen, metrics, type...: words of their own too
            found = [p for p in pages if names(texts[p], leaf)]
            if len(found) > 1:
                crowded[key] = found
        self.assertEqual(crowded, {})

    def test_example_config_names_every_key(self):
        """conf/dlockd.yaml shows every key of the man page (its leaf name)."""
        conf = read(os.path.join(TOP, "conf", "dlockd.yaml"))
        missing = [k for k in settings() if k != "memory" and
                   not re.search(r"^\s*#? ?%s:" % re.escape(k.rsplit(".", 1)[-1]), conf, re.M)]
        self.assertEqual(missing, [])


class TestReadmeFrontDoor(unittest.TestCase):

    def test_short_with_the_two_commands_first(self):
        lines = read(README).split("\n")
        self.assertLessEqual(len(lines), README_MAX_LINES)
        head = "\n".join(lines[:10])
        makefile = read(os.path.join(TOP, "Makefile"))
        for target in ("run", "check"):
            self.assertRegex(head, r"(?m)^    make %s +# " % target)
            self.assertRegex(makefile, r"(?m)^%s:" % target)


def readme_section(title):
    text = read(README)
    start = text.index("\n## %s\n" % title)
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


class TestReadmeExamples(DaemonTestCase):
    """The README's first examples, run as they are written against a
    daemon of the memory backend: build/dlock is the dlock under test, and
    the port 7480 the daemon's."""

    def test_dlock_examples(self):
        commands = re.findall(r"^    (build/dlock .*)$", readme_section("A first lock"), re.M)
        self.assertEqual(len(commands), 2, commands)
        env = dict(os.environ, DLOCK_ADDR="127.0.0.1:%d" % self.daemon.port)
        out = []
        for command in commands:
            line = shlex.quote(DLOCK) + command[len("build/dlock"):]
            rc, stdout, stderr = run_to_end(["sh", "-c", line], 10 * SLOWDOWN, env=env)
            self.assertEqual(rc, 0, "%s: %s" % (command, stderr))
            out.append(stdout)
        self.assertRegex(out[0], r"^holding jobs/nightly with fence \d+\n$")
        self.assertIn("mode: free\n", out[1])

    def test_redis_py_example(self):
        """It waits for a holder (WAIT 5000), then gets, checks and releases
        the lock, and ends its session."""
        blocks = re.findall(r"^```python\n(.*?)^```$", readme_section("A first lock"),
                            re.M | re.S)
        self.assertEqual(len(blocks), 1)
        self.assertEqual(blocks[0].count("port=7480"), 1)
        code = blocks[0].replace("port=7480", "port=%d" % self.daemon.port)
        holder = self.client()
        holder.execute_command("LOCK", "jobs/nightly")
        p = spawn([PYTHON, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE)
        try:
            self.wait_status("jobs/nightly", "(the example queued)", timeout=10 * SLOWDOWN,
                             waiters=1)
            self.assertEqual(holder.execute_command("UNLOCK", "jobs/nightly"), 0)
            out, err = p.communicate(timeout=10 * SLOWDOWN)
        finally:
            if p.poll() is None:
                p.kill()
            reap(p)
        self.assertEqual(p.returncode, 0, err.decode(errors="replace"))
        self.assertRegex(out.decode(), r"^got jobs/nightly, fence \d+\n$")
        self.wait_status("jobs/nightly", "(released by the example)", mode=b"free",
                         holders=0, waiters=0)


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
                             "INFO fields of # %s missing in docs/protocol.md" % name)
            self.assertEqual(sorted(want[name] - got[name]), [],
                             "docs/protocol.md's # %s fields INFO does not answer" % name)


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
