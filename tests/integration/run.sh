#!/bin/sh
# Integration tests of dlockd, run from the top of the source tree:
#
#   BUILD=build sh tests/integration/run.sh [-k PATTERN]...
#
# 1. the Python suite (tests/integration/test_*.py, Debian's /usr/bin/python3
#    with python3-redis, the tests' library tests/dlocktest on PYTHONPATH),
#    which starts its own dlockd processes (and, for the
#    redis and etcd backends, its own redis-server and etcd processes on free
#    loopback ports),
#    and drives them with redis-py, raw sockets, redis-cli and the dlock CLI;
# 2. the libdlock Check suites ($BUILD/tests/check_dlock and
#    check_dlock_elect), one after the other, against a fresh dlockd whose
#    address they get in DLOCK_TEST_ADDR.
#
# -k PATTERN runs only the Python tests whose name (module.Class.test)
# contains PATTERN (and skips the Check suites): -k test_redis. for the redis
# backend's own tests, -k TestLocksRedis for the lock suite on the redis
# backend (-k test_etcd. and -k TestLocksEtcd for etcd), -k
# test_lost_before_redis_ttl for one test. DLOCKD_WRAPPER, if set, is a command prefix for
# every dlockd started (e.g. "valgrind -q --error-exitcode=99"). The binaries come from $BUILD: dlockd, dlock,
# dlock-bench, tests/check_dlock and tests/check_dlock_elect; a missing one is a failure. Everything runs in a
# temporary directory that is removed at exit, and every process started
# here is stopped at exit, by its pid. The last line of output is
#
#   integration: N passed, M failed
#
# and the exit status is 0 only if nothing failed.
set -u

PYTHON=/usr/bin/python3
TEST_LIMIT=${TEST_LIMIT:-900}	# seconds any one suite may run
BUILD=${BUILD:-build}
BUILD_NAME=$BUILD			# as given, for messages
SUITES="tests/check_dlock tests/check_dlock_elect"	# libdlock's, in $BUILD (part 2)
case "$BUILD" in
/*) ;;
*) BUILD=$(pwd)/$BUILD ;;
esac
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../counts.sh"
# the tests' Python library, tests/dlocktest
PYTHONPATH=$(dirname "$HERE")${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH
unset DLOCK_ADDR DLOCK_PASSWORD DLOCK_TEST_ADDR DLOCK_TEST_PASSWORD

patterns=""
while [ $# -gt 0 ]; do
	case "$1" in
	-k) [ $# -ge 2 ] || { echo "usage: $0 [-k PATTERN]..." >&2; exit 2; }
	    patterns="$patterns -k $2"; shift 2 ;;
	*) echo "usage: $0 [-k PATTERN]..." >&2; exit 2 ;;
	esac
done

passed=0
failed=0
started=""			# pids of the processes started here, not reaped yet

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlockd-it.XXXXXX") || {
	echo "integration: cannot create a temporary directory"
	echo "integration: 0 passed, 1 failed"
	exit 1
}

# alive PID: the process exists and is not a zombie
alive() {
	kill -0 "$1" 2>/dev/null || return 1
	if [ -r "/proc/$1/stat" ]; then
		! grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null
	fi
}

cleanup() {
	trap - EXIT INT TERM
	for pid in $started; do
		kill -TERM "$pid" 2>/dev/null
	done
	i=0
	while [ $i -lt 50 ]; do
		left=""
		for pid in $started; do
			alive "$pid" && left="$left $pid"
		done
		[ -z "$left" ] && break
		sleep 0.1
		i=$((i + 1))
	done
	for pid in $started; do
		kill -KILL "$pid" 2>/dev/null
	done
	# processes the Python suite started and could not stop itself
	if [ -d "$tmp/py/pids" ]; then
		for f in "$tmp"/py/pids/*; do
			[ -e "$f" ] || continue
			kill -KILL "${f##*/}" 2>/dev/null
		done
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

forget() {
	rest=""
	for pid in $started; do
		[ "$pid" = "$1" ] || rest="$rest $pid"
	done
	started=$rest
}

fail() {
	echo "FAIL: $*"
	failed=$((failed + 1))
}

# ---- what the tests need ----

for bin in dlockd dlock dlock-bench $SUITES; do
	if [ ! -x "$BUILD/$bin" ]; then
		fail "$BUILD_NAME/$bin is missing (build it with make $BUILD_NAME/$bin)"
	fi
done
python_ok=1
if [ ! -x "$PYTHON" ]; then
	fail "$PYTHON is missing (Debian package python3)"
	python_ok=0
elif ! "$PYTHON" -c 'import redis' 2>/dev/null; then
	fail "$PYTHON cannot import redis (Debian package python3-redis)"
	python_ok=0
fi
if ! command -v redis-cli >/dev/null 2>&1; then
	fail "redis-cli is missing (Debian package redis-tools)"
fi
if ! command -v "${REDIS_SERVER_BIN:-redis-server}" >/dev/null 2>&1; then
	fail "${REDIS_SERVER_BIN:-redis-server} is missing (Debian package redis-server)"
fi
if ! command -v "${ETCD_BIN:-etcd}" >/dev/null 2>&1; then
	fail "${ETCD_BIN:-etcd} is missing (Debian package etcd-server)"
fi

# ---- 1. the Python suite ----

if [ $python_ok = 1 ]; then
	echo "== python suite"
	mkdir -p "$tmp/py"
	# shellcheck disable=SC2086  # $patterns is a list of words
	DLOCKD_BIN="$BUILD/dlockd" DLOCK_BIN="$BUILD/dlock" DLOCK_BENCH_BIN="$BUILD/dlock-bench" \
	    DLOCKD_TEST_TMP="$tmp/py" \
	    DLOCKD_TEST_LIMIT=$TEST_LIMIT PYTHONDONTWRITEBYTECODE=1 \
	    "$PYTHON" -B "$HERE/runtests.py" "$tmp/py.result" $patterns &
	pid=$!
	started="$started $pid"
	wait $pid
	rc=$?
	forget $pid
	if [ -r "$tmp/py.result" ]; then
		read -r p f < "$tmp/py.result"
		passed=$((passed + p))
		failed=$((failed + f))
		[ $rc -ne 0 ] && [ "$f" -eq 0 ] && fail "the Python suite exited with status $rc"
	else
		fail "the Python suite ended without a result (status $rc)"
	fi
fi

# ---- 2. the libdlock Check suites against a fresh daemon ----

# suites_ready: every suite of $SUITES is there
suites_ready() {
	for bin in $SUITES; do
		[ -x "$BUILD/$bin" ] || return 1
	done
}

# suite BIN: run $BUILD/BIN, one of $SUITES, against the daemon at
# 127.0.0.1:$port and add its counts
suite() {
	echo "== $BUILD/$1"
	CK_FORK=yes DLOCK_TEST_ADDR="127.0.0.1:$port" \
	    timeout -k 5 $TEST_LIMIT "$BUILD/$1" \
	    > "$tmp/check.out" 2>&1 </dev/null &
	cpid=$!
	started="$started $cpid"
	wait $cpid
	rc=$?
	forget $cpid
	cat "$tmp/check.out"
	if check_counts "$(cat "$tmp/check.out")"; then
		passed=$((passed + counts_passed))
		failed=$((failed + counts_failed))
		[ $rc -ne 0 ] && [ "$counts_failed" -eq 0 ] && \
		    fail "${1##*/} exited with status $rc"
	else
		fail "${1##*/} printed no result (status $rc)"
	fi
}

if [ -n "$patterns" ]; then
	:
elif suites_ready && [ -x "$BUILD/dlockd" ] && [ $python_ok = 1 ]; then
	port=$("$PYTHON" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
	: > "$tmp/check.yaml"
	# shellcheck disable=SC2086  # the wrapper is a list of words
	${DLOCKD_WRAPPER:-} "$BUILD/dlockd" -c "$tmp/check.yaml" -l "127.0.0.1:$port" \
	    > "$tmp/check-dlockd.log" 2>&1 </dev/null &
	dpid=$!
	started="$started $dpid"
	if "$PYTHON" -c 'import socket, sys, time
port = int(sys.argv[1])
deadline = time.monotonic() + (20 if sys.argv[2] else 5)
while time.monotonic() < deadline:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.01)
sys.exit(1)' "$port" "${DLOCKD_WRAPPER:-}" && alive $dpid; then
		for bin in $SUITES; do
			suite "$bin"
		done
		kill -TERM $dpid
		i=0
		while alive $dpid && [ $i -lt 200 ]; do
			sleep 0.1
			i=$((i + 1))
		done
		if alive $dpid; then
			fail "dlockd (libdlock's suites') did not exit within 20 s of SIGTERM"
			kill -KILL $dpid
		fi
		wait $dpid
		rc=$?
		forget $dpid
		[ $rc -eq 0 ] || fail "dlockd (libdlock's suites') exited with status $rc"
	else
		fail "dlockd for libdlock's suites did not start"
	fi
	if [ $failed -gt 0 ] && [ -s "$tmp/check-dlockd.log" ]; then
		echo "-- dlockd log (libdlock's suites):"
		tail -n 40 "$tmp/check-dlockd.log"
	fi
fi

echo "integration: $passed passed, $failed failed"
[ $failed -eq 0 ]
