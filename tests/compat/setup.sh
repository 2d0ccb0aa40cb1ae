#!/bin/sh
# Make the Debian 13 (trixie) chroot of the compatibility tests, once:
#
#   sh tests/compat/setup.sh DIR
#
# DIR/trixie is a minimal trixie with redis-server (Redis 8) and
# valkey-server (Valkey 8), made by debootstrap from $COMPAT_MIRROR (default
# http://deb.debian.org/debian). DIR/trixie.ok says it is complete (the
# suite and the packages it was made with); a chroot with the same stamp is
# reused, anything else (an interrupted build, other packages) is made again.
# The servers stay at the versions of that day: remove DIR for newer ones.
# Needs root and the network to the mirror; a failure is loud, with the end
# of debootstrap's log, and the exit status is 1.
#
# debootstrap runs in a mount namespace of its own (unshare -m): the /proc
# and /sys it mounts in the new tree go away with it, even when it is
# killed, so nothing is ever left mounted under DIR on the host.
set -eu

SUITE=trixie
PACKAGES=redis-server,valkey-server
MIRROR=${COMPAT_MIRROR:-http://deb.debian.org/debian}

die() {
	echo "compat: $*" >&2
	exit 1
}

[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || die "making and entering the chroot needs root (debootstrap, chroot, mount)"
command -v debootstrap >/dev/null 2>&1 || die "debootstrap is missing (Debian package debootstrap)"
for tool in unshare flock; do
	command -v $tool >/dev/null 2>&1 || die "$tool is missing (Debian package util-linux)"
done
mkdir -p "$1"
dir=$(cd "$1" && pwd)
root=$dir/$SUITE
stamp=$dir/$SUITE.ok
want="$SUITE $PACKAGES"

# one setup at a time in DIR; a second waits for the first and reuses its chroot
exec 9>"$dir/setup.lock"
flock 9

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$root/usr/bin/redis-server" ] &&
   [ -x "$root/usr/bin/valkey-server" ]; then
	exit 0
fi

# never remove a tree something is mounted in (rm -rf would go through it)
for t in "$root" "$root.new"; do
	if awk -v t="$t" '$5 == t || index($5, t "/") == 1 { found = 1 } END { exit !found }' \
	    /proc/self/mountinfo; then
		die "something is mounted under $t: unmount it first"
	fi
done
rm -f "$stamp"
rm -rf "$root" "$root.new"

echo "compat: making a Debian $SUITE chroot with $PACKAGES in $root from $MIRROR"
start=$(date +%s)
if ! unshare --mount --propagation private \
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root.new" "$MIRROR" \
    > "$dir/debootstrap.log" 2>&1 </dev/null; then
	tail -n 30 "$dir/debootstrap.log" >&2
	rm -rf "$root.new"
	die "debootstrap of $SUITE from $MIRROR failed (log: $dir/debootstrap.log); it needs root and the network to the mirror"
fi
# the downloaded packages are not needed any more
rm -f "$root.new"/var/cache/apt/archives/*.deb
for s in redis-server valkey-server; do
	v=$(chroot "$root.new" "/usr/bin/$s" --version 2>&1) ||
		die "$s of the new chroot does not run: $v"
done
mv "$root.new" "$root"
echo "$want" > "$stamp"
echo "compat: chroot made in $(($(date +%s) - start)) s"
