#!/bin/sh
# make install and the directories it bakes in, run from the top of the
# source tree:  sh tests/install.sh
#
# Builds into a temporary directory (BUILD=...), never into build/, and
# installs with DESTDIR into that directory:
#   - make, then make install PREFIX=/usr: libdlock.pc names /usr, dlockd -h
#     names /etc/dlockd/dlockd.yaml, the configuration lands in /etc/dlockd;
#   - make install PREFIX=/opt/x: dlockd -h names /opt/x/etc/dlockd/dlockd.yaml,
#     where the configuration lands; a second make install keeps an edited one;
#   - SYSTEMDUNITDIR: the units installed only when given, naming the
#     installed daemon and configuration;
#   - a plain make afterwards goes back to /usr/local.
# Last line: "install: N passed, M failed".
set -u
NAME=install
. "$(dirname "$0")/steps.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlockd-install.XXXXXX") || {
	fail "cannot create a temporary directory"
	finish
}
trap 'rm -rf "$tmp"' EXIT
b=$tmp/build

# mk ARGS...: make in this tree into $b, quietly; the output on failure
mk() {
	if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -j2 BUILD="$b" "$@" \
	    > "$tmp/make.log" 2>&1; then
		tail -n 30 "$tmp/make.log"
		return 1
	fi
}

# default_conf DLOCKD: the default configuration file dlockd -h names
default_conf() {
	"$1" -h 2>&1 | sed -n 's/.*configuration file (default \(.*\))$/\1/p'
}

# has FILE TEXT: FILE exists and contains the line TEXT
has() {
	grep -qxF "$2" "$1" 2>/dev/null
}

check "make (PREFIX /usr/local)" mk all
check "dlockd -h names /usr/local/etc/dlockd/dlockd.yaml" \
    test "$(default_conf "$b/dlockd")" = /usr/local/etc/dlockd/dlockd.yaml

d=$tmp/usr
check "make install PREFIX=/usr after a plain make" mk install PREFIX=/usr DESTDIR="$d"
pc=$d/usr/lib/pkgconfig/libdlock.pc
check "libdlock.pc: prefix=/usr" has "$pc" "prefix=/usr"
check "libdlock.pc: libdir=/usr/lib" has "$pc" "libdir=/usr/lib"
check "libdlock.pc: includedir=/usr/include" has "$pc" "includedir=/usr/include"
check "libdlock.pc names no /usr/local" sh -c '! grep -q /usr/local "$1"' sh "$pc"
check "installed dlockd -h names /etc/dlockd/dlockd.yaml" \
    test "$(default_conf "$d/usr/sbin/dlockd")" = /etc/dlockd/dlockd.yaml
check "configuration installed as /etc/dlockd/dlockd.yaml" test -f "$d/etc/dlockd/dlockd.yaml"
check "libdlock.so.1 links to the versioned file" \
    test "$(readlink "$d/usr/lib/libdlock.so.1")" = libdlock.so.1.0.0
check "libdlock.so links to libdlock.so.1" test "$(readlink "$d/usr/lib/libdlock.so")" = libdlock.so.1
check "no systemd unit without SYSTEMDUNITDIR" \
    sh -c '! find "$1" -name "dlockd.s*" | grep -q .' sh "$d"

d=$tmp/opt
check "make install PREFIX=/opt/x" mk install PREFIX=/opt/x DESTDIR="$d"
check "installed dlockd -h names /opt/x/etc/dlockd/dlockd.yaml" \
    test "$(default_conf "$d/opt/x/sbin/dlockd")" = /opt/x/etc/dlockd/dlockd.yaml
check "configuration installed as /opt/x/etc/dlockd/dlockd.yaml" \
    test -f "$d/opt/x/etc/dlockd/dlockd.yaml"
check "libdlock.pc: prefix=/opt/x" has "$d/opt/x/lib/pkgconfig/libdlock.pc" "prefix=/opt/x"
echo "# edited by the operator" >> "$d/opt/x/etc/dlockd/dlockd.yaml"
cp "$d/opt/x/etc/dlockd/dlockd.yaml" "$tmp/edited.yaml"
check "make install PREFIX=/opt/x again" mk install PREFIX=/opt/x DESTDIR="$d"
check "a second make install keeps the edited configuration" \
    cmp -s "$tmp/edited.yaml" "$d/opt/x/etc/dlockd/dlockd.yaml"

check "make install PREFIX=/opt/x SYSTEMDUNITDIR=/opt/x/lib/systemd/system" \
    mk install PREFIX=/opt/x DESTDIR="$d" SYSTEMDUNITDIR=/opt/x/lib/systemd/system
u=$d/opt/x/lib/systemd/system
for unit in $(cd systemd && ls); do
	check "$unit installed" test -f "$u/$unit"
done
check "dlockd.service runs /opt/x/sbin/dlockd" grep -q '^ExecStart=/opt/x/sbin/dlockd ' "$u/dlockd.service"
check "dlockd.service reads /opt/x/etc/dlockd/dlockd.yaml" \
    grep -q '^ExecStart=.* /opt/x/etc/dlockd/dlockd.yaml' "$u/dlockd.service"
check "the units name no /usr/sbin or /etc path" \
    sh -c '! grep -v "^#" "$@" | grep -qE "/usr/sbin/|[ =]/etc/"' sh "$u"/*

check "make again with the default PREFIX" mk all
check "dlockd -h names /usr/local/etc/dlockd/dlockd.yaml again" \
    test "$(default_conf "$b/dlockd")" = /usr/local/etc/dlockd/dlockd.yaml
finish
