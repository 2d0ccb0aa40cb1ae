#!/bin/sh
# Fetch etcd 3.5 from Debian 13 (trixie), once:
#
#   sh tests/compat/etcd35-setup.sh DIR
#
# Debian 13's etcd-server package carries a statically linked etcd 3.5,
# which runs on Debian 12 as it is. Its .deb is fetched with apt-get from
# $COMPAT_MIRROR (default http://deb.debian.org/debian) through a private
# APT configuration under DIR (its own sources list, lists, cache and an
# empty dpkg status: the host's APT state is neither read nor changed; the
# archive's signature is checked against Debian's keyring), and unpacked
# with dpkg -x into DIR/root, giving DIR/root/usr/bin/etcd. DIR/etcd35.ok
# says it is complete (the suite and the package's version); it is reused
# afterwards. Remove DIR for a newer etcd.
#
# The last line of output is the path of the etcd binary; a failure is
# loud and the exit status is 1. Root is not needed; the network to the
# mirror is.
set -eu

SUITE=trixie
PACKAGE=etcd-server
MIRROR=${COMPAT_MIRROR:-http://deb.debian.org/debian}
KEYRING=${COMPAT_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}

die() {
	echo "compat: $*" >&2
	exit 1
}

[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
for tool in apt-get dpkg flock; do
	command -v $tool >/dev/null 2>&1 || die "$tool is missing"
done
mkdir -p "$1"
dir=$(cd "$1" && pwd)
root=$dir/root
bin=$root/usr/bin/etcd
stamp=$dir/etcd35.ok

# one setup at a time in DIR; a second waits for the first and reuses it
exec 9>"$dir/setup.lock"
flock 9

if [ -f "$stamp" ] && [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
	echo "$bin"
	exit 0
fi
[ -r "$KEYRING" ] || die "Debian's archive keyring $KEYRING is missing (Debian package debian-archive-keyring)"
rm -f "$stamp"

apt=$dir/apt
rm -rf "$apt" "$root" "$root.new"
mkdir -p "$apt/etc/sources.list.d" "$apt/etc/preferences.d" "$apt/state/lists/partial" \
	"$apt/cache/archives/partial" "$apt/debs"
echo "deb [signed-by=$KEYRING] $MIRROR $SUITE main" > "$apt/etc/sources.list"
: > "$apt/state/status"
set -- -q -o "Dir::Etc::SourceList=$apt/etc/sources.list" \
	-o "Dir::Etc::SourceParts=$apt/etc/sources.list.d" \
	-o "Dir::Etc::Preferences=$apt/etc/preferences" \
	-o "Dir::Etc::PreferencesParts=$apt/etc/preferences.d" \
	-o "Dir::State=$apt/state" -o "Dir::State::status=$apt/state/status" \
	-o "Dir::Cache=$apt/cache" -o "APT::Sandbox::User=root" \
	-o "Acquire::Languages=none"

echo "compat: fetching $PACKAGE of Debian $SUITE from $MIRROR into $dir"
if ! apt-get "$@" update > "$dir/apt.log" 2>&1 </dev/null; then
	tail -n 20 "$dir/apt.log" >&2
	die "apt-get update of $SUITE from $MIRROR failed (log: $dir/apt.log)"
fi
# apt-get update says W: (and exits 0) when an index failed to verify
if grep -q '^[WE]:' "$dir/apt.log"; then
	grep '^[WE]:' "$dir/apt.log" >&2
	die "apt-get update of $SUITE from $MIRROR was not clean (log: $dir/apt.log)"
fi
if ! (cd "$apt/debs" && apt-get "$@" download "$PACKAGE") >> "$dir/apt.log" 2>&1 </dev/null; then
	tail -n 20 "$dir/apt.log" >&2
	die "apt-get download $PACKAGE failed (log: $dir/apt.log)"
fi
deb=""
for f in "$apt/debs/${PACKAGE}"_*.deb; do
	if [ -f "$f" ]; then deb=$f; fi
done
[ -n "$deb" ] || die "apt-get download left no $PACKAGE .deb (log: $dir/apt.log)"
dpkg -x "$deb" "$root.new" || die "dpkg -x $deb failed"
v=$("$root.new/usr/bin/etcd" --version 2>&1) || die "etcd of $deb does not run here: $v"
mv "$root.new" "$root"
echo "$SUITE $(dpkg-deb -f "$deb" Version)" > "$stamp"
# the package and the indexes are not needed any more
rm -rf "$apt"
echo "compat: $(echo "$v" | head -n 1) in $root"
echo "$bin"
