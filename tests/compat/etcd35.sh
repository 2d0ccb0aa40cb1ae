#!/bin/sh
# The etcd backend's integration tests against etcd 3.5 of Debian 13
# (trixie) with etcd's JSON gateway off, run from the top of the source
# tree:
#
#   BUILD=build sh tests/compat/etcd35.sh
#
# 1. tests/compat/etcd35-setup.sh fetches Debian 13's etcd-server package
#    once and unpacks it into $BUILD/compat/etcd/root (its etcd is a static
#    binary that runs here); it is reused afterwards. Root is not needed,
#    the network to Debian's mirror is (the first time).
# 2. tests/integration/run.sh -k PATTERN for each word of
#    $COMPAT_ETCD_TESTS (default "test_etcd TestLocksEtcd": test_etcd,
#    test_etcd_tls and test_etcd_versions, and the lock suite on the etcd
#    backend) with ETCD_BIN set to that etcd and ETCD_GATEWAY=0: every etcd
#    the tests start runs with --enable-grpc-gateway=false, and the tests
#    read and write it with etcdctl (Debian package etcd-client).
#
# SIGINT or SIGTERM stops the tests' servers and daemons (run.sh stops them
# by their pids). The last line says the version and the tests' result:
#
#   compat: etcd 3.5.16 (gRPC gateway off): N passed, M failed (S s)
#
# and the exit status is 0 only if nothing failed.
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/common.sh"

if ! out=$(sh "$HERE/etcd35-setup.sh" "$BUILD/compat/etcd"); then
	[ -n "$out" ] && echo "$out"
	echo "compat: etcd 3.5: no etcd binary (see above): 0 passed, 1 failed"
	exit 1
fi
echo "$out" | sed '$d'
etcd=$(echo "$out" | tail -n 1)
version=$("$etcd" --version 2>&1 | sed -n 's/^etcd Version: *//p')
if ! command -v "${ETCDCTL_BIN:-etcdctl}" >/dev/null 2>&1; then
	echo "compat: ${ETCDCTL_BIN:-etcdctl} is missing (Debian package etcd-client)"
	echo "compat: etcd ${version:-(no version)} (gRPC gateway off): 0 passed, 1 failed"
	exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlockd-compat-etcd.XXXXXX") || {
	echo "compat: cannot create a temporary directory"
	exit 1
}

cleanup() {
	trap - EXIT INT TERM
	rm -rf "$tmp"
}
trap cleanup EXIT
on_signals

patterns=""
for p in ${COMPAT_ETCD_TESTS:-test_etcd TestLocksEtcd}; do
	patterns="$patterns -k $p"
done
echo "== compat: etcd ${version:-(no version)} (Debian trixie, gRPC gateway off)"
start=$(date +%s)
# shellcheck disable=SC2086  # $patterns is a list of words
follow "$tmp/out" env ETCD_BIN="$etcd" ETCD35_BIN="$etcd" ETCD_GATEWAY=0 BUILD="$BUILD" \
    sh "$TOP/tests/integration/run.sh" $patterns
status=0
read_result "$tmp/out" || status=1
echo "compat: etcd ${version:-(no version)} (gRPC gateway off): $result ($(($(date +%s) - start)) s)"
exit $status
