#!/bin/sh
# The safety test (tests/faults/, python3 -m faults.safety with tests/ on
# PYTHONPATH), run from the top of the source tree:
#
#   BUILD=build sh tests/faults/run.sh [--long | --short] [faults.safety options]
#
# Starts its redis-server, redis-sentinel, etcd, dlockd and worker processes on free
# loopback ports in a temporary directory, and stops every one of them at
# exit whatever happens (each is recorded in the directory's pids/). The
# logs and results.json stay in $BUILD/faults/<mode>. Exits 0 only if every
# check passed.
set -u

PYTHON=/usr/bin/python3
BUILD=${BUILD:-build}
case "$BUILD" in
/*) ;;
*) BUILD=$(pwd)/$BUILD ;;
esac
HERE=$(cd "$(dirname "$0")" && pwd)
# the fault test (tests/faults) and the tests' Python library (tests/dlocktest)
PYTHONPATH=$(dirname "$HERE")${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH

mode=short
for a in "$@"; do
	case "$a" in
	--long) mode=long ;;
	--short) mode=short ;;
	esac
done

if [ ! -x "$BUILD/dlockd" ]; then
	echo "faults: $BUILD/dlockd is missing (make all)"
	exit 1
fi
for p in "$PYTHON" redis-server redis-cli "${REDIS_SENTINEL_BIN:-redis-sentinel}" \
    "${ETCD_BIN:-etcd}"; do
	if ! command -v "$p" >/dev/null 2>&1; then
		echo "faults: $p is missing (make deps-check)"
		exit 1
	fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlockd-faults.XXXXXX") || exit 1
pid=""

cleanup() {
	trap - EXIT HUP INT TERM
	[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null
	# give the Python side a moment to stop what it started, then make sure
	i=0
	while [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
	if [ -d "$tmp/py/pids" ]; then
		for f in "$tmp"/py/pids/*; do
			[ -e "$f" ] || continue
			kill -CONT "${f##*/}" 2>/dev/null
			kill -KILL "${f##*/}" 2>/dev/null
		done
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

out="$BUILD/faults/$mode"
rm -rf "$out"
mkdir -p "$tmp/py" "$out"
DLOCKD_BIN="$BUILD/dlockd" DLOCKD_TEST_TMP="$tmp/py" PYTHONDONTWRITEBYTECODE=1 \
    "$PYTHON" -B -m faults.safety --out "$out" "$@" &
pid=$!
wait $pid
rc=$?
pid=""
exit $rc
