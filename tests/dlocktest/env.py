"""What the tests run and where: the binaries, the timeouts, the scratch
directory.

Environment (set by the runners: tests/integration/run.sh,
tests/faults/run.sh, the Makefile's bench target):
  DLOCKD_BIN       the daemon under test
  DLOCK_BIN        the dlock command-line client
  DLOCK_BENCH_BIN  the benchmark's load generator, dlock-bench
  DLOCKD_WRAPPER   a command prefix for every dlockd started (e.g.
                   "valgrind -q --error-exitcode=99")
  REDIS_SERVER_BIN the redis-server of the redis-backed tests (default:
                   redis-server from PATH; missing is a failure, not a skip)
  ETCD_BIN         the etcd of the etcd-backed tests (default: etcd from
                   PATH; missing is a failure, not a skip)
  ETCD_GATEWAY     0: etcd runs with its JSON gateway off
                   (--enable-grpc-gateway=false), and the tests read and
                   write etcd through etcdctl (default 1: the gateway is on)
  ETCDCTL_BIN      the etcdctl (API v3) the tests use when the gateway is off
                   or etcd serves TLS (default: etcdctl from PATH, Debian
                   package etcd-client)
  DLOCKD_TEST_TMP  a scratch directory that the runner removes at exit; every
                   process started here is recorded in its pids/ directory
                   so that the runner can stop it if this interpreter dies

The server binaries (REDIS_SERVER, ETCD) are read at each start: a test may
change them here.
"""

import atexit
import itertools
import os
import shlex
import shutil
import tempfile
import threading

DLOCKD = os.environ.get("DLOCKD_BIN", os.path.abspath("build/dlockd"))
DLOCK = os.environ.get("DLOCK_BIN", os.path.abspath("build/dlock"))
DLOCK_BENCH = os.environ.get("DLOCK_BENCH_BIN", os.path.abspath("build/dlock-bench"))
# a command prefix for every dlockd started, e.g. "valgrind -q --error-exitcode=99"
WRAPPER = shlex.split(os.environ.get("DLOCKD_WRAPPER", ""))
PYTHON = "/usr/bin/python3"
REDIS_CLI = "redis-cli"
REDIS_SERVER = os.environ.get("REDIS_SERVER_BIN", "redis-server")
ETCD = os.environ.get("ETCD_BIN", "etcd")
ETCDCTL = os.environ.get("ETCDCTL_BIN", "etcdctl")
# whether etcd's JSON gateway is on (the default of EtcdServer's gateway)
ETCD_GATEWAY = os.environ.get("ETCD_GATEWAY", "1").strip().lower() not in ("0", "no", "false",
                                                                             "off")

START_TIMEOUT = 20.0 if WRAPPER else 5.0  # seconds a daemon may take to accept
STOP_TIMEOUT = 20.0 if WRAPPER else 5.0  # seconds a daemon may take to exit
# latency bounds are multiplied by this when the daemon runs under a wrapper
SLOWDOWN = 5.0 if WRAPPER else 1.0


def _tmp_root():
    root = os.environ.get("DLOCKD_TEST_TMP")
    if not root:
        # run without a runner: clean up after ourselves
        root = tempfile.mkdtemp(prefix="dlockd-it.")
        os.environ["DLOCKD_TEST_TMP"] = root
        atexit.register(shutil.rmtree, root, True)
    os.makedirs(os.path.join(root, "pids"), exist_ok=True)
    return root


TMP = _tmp_root()
_seq = itertools.count(1)
_seq_lock = threading.Lock()


def next_seq():
    """A number no other caller in this process gets."""
    with _seq_lock:
        return next(_seq)


def new_dir(prefix):
    """A new empty directory under the scratch directory."""
    path = os.path.join(TMP, "%s-%d" % (prefix, next_seq()))
    os.makedirs(path)
    return path


def subdir(parent, name):
    """parent/name, made if it is not there yet."""
    p = os.path.join(parent, name)
    os.makedirs(p, exist_ok=True)
    return p


def unique_key(name="k"):
    """A key no other test uses."""
    return "it/%d/%s/%d" % (os.getpid(), name, next_seq())
