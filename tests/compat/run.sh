#!/bin/sh
# The redis backend's integration tests against the servers of Debian 13
# (trixie), Redis 8 and Valkey 8, run from the top of the source tree as
# root:
#
#   BUILD=build sh tests/compat/run.sh
#
# 1. tests/compat/setup.sh makes the chroot $BUILD/compat/trixie once
#    (debootstrap: root and the network to Debian's mirror; a failure is
#    loud) and reuses it afterwards;
# 2. for each server of $COMPAT_SERVERS (default "redis-server
#    valkey-server"), tests/integration/run.sh -k PATTERN for each word of
#    $COMPAT_TESTS (default "test_redis TestLocksRedis test_redlock
#    TestLocksRedlock": test_redis, test_redis_prod with TLS and ACL users,
#    test_redis_cluster, the redlock suites, the lock suite on the redis,
#    redis-cluster and redlock backends),
#    with REDIS_SERVER_BIN=tests/compat/chroot-server, which starts that
#    server inside the chroot (same pid, same network).
#
# The tests give the server file names under their temporary directory
# (its --dir, TLS certificates and keys). That directory, made here under
# ${TMPDIR:-/tmp}, is bind-mounted at the same path inside the chroot, and
# /proc is mounted there too, in a mount namespace of this run's own
# (unshare -m): the host never sees a mount under $BUILD, and the mounts go
# away with the run's last process however it ends (make clean's rm -rf
# cannot go through them into the host's files). SIGINT or SIGTERM stops
# the tests' servers and daemons, then removes the temporary directory and
# its mount point. SIGKILL leaves the temporary directory (the output so far)
# and an empty mount point in the chroot, which the next run removes.
#
# The last lines say, for each server, its version and the tests' result:
#
#   compat: redis-server 8.0.2: N passed, M failed (S s)
#
# and the exit status is 0 only if nothing failed.
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/common.sh"
SUITE=trixie
root=$BUILD/compat/$SUITE

if [ -z "${DLOCKD_COMPAT_NS:-}" ]; then
	sh "$HERE/setup.sh" "$BUILD/compat" || exit 1
	exec unshare --mount --propagation private env DLOCKD_COMPAT_NS=1 sh "$0" "$@"
fi

# ---- from here on in the run's own mount namespace ----

base=$(cd "${TMPDIR:-/tmp}" && pwd -P) || exit 1
# what runs killed by SIGKILL left: their directory (its pid file names a
# process that is gone) and its mount point in the chroot
for d in "$base"/dlockd-compat.*; do
	[ -f "$d/pid" ] && ! kill -0 "$(cat "$d/pid")" 2>/dev/null && rm -rf "$d"
done
for d in "$root$base"/dlockd-compat.*; do
	[ -d "$d" ] && [ ! -e "${d#"$root"}" ] && rmdir "$d" 2>/dev/null
done
tmp=$(mktemp -d "$base/dlockd-compat.XXXXXX") || {
	echo "compat: cannot create a temporary directory in $base"
	exit 1
}
echo $$ > "$tmp/pid"

cleanup() {
	trap - EXIT INT TERM
	umount "$root$tmp" 2>/dev/null || umount -l "$root$tmp" 2>/dev/null
	umount "$root/proc" 2>/dev/null || umount -l "$root/proc" 2>/dev/null
	rmdir "$root$tmp" 2>/dev/null
	rm -rf "$tmp"
}
# on a signal, common.sh's stopped() lets the integration run.sh stop the
# servers and daemons it started (by their pids) before the mounts go
trap cleanup EXIT
on_signals

if ! { mkdir -p "$root$tmp" && mount --bind "$tmp" "$root$tmp" &&
    mount -t proc proc "$root/proc"; }; then
	echo "compat: cannot mount $tmp and /proc in $root"
	exit 1
fi

patterns=""
for p in ${COMPAT_TESTS:-test_redis TestLocksRedis test_redlock TestLocksRedlock}; do
	patterns="$patterns -k $p"
done
summary=""
status=0
for s in ${COMPAT_SERVERS:-redis-server valkey-server}; do
	version=$(chroot "$root" "/usr/bin/$s" --version 2>&1 | sed -n 's/.* v=\([^ ]*\) .*/\1/p')
	echo "== compat: $s ${version:-(no version)} (Debian $SUITE)"
	start=$(date +%s)
	mkdir -p "$tmp/$s"
	# shellcheck disable=SC2086  # $patterns is a list of words
	follow "$tmp/$s.out" env TMPDIR="$tmp/$s" REDIS_SERVER_BIN="$HERE/chroot-server" \
	    DLOCKD_COMPAT_ROOT="$root" DLOCKD_COMPAT_SERVER="$s" BUILD="$BUILD" \
	    sh "$TOP/tests/integration/run.sh" $patterns
	read_result "$tmp/$s.out" || status=1
	summary="$summary
compat: $s ${version:-(no version)}: $result ($(($(date +%s) - start)) s)"
done
echo "$summary" | sed 1d
exit $status
