#!/bin/sh
# The Debian packages, built, checked, installed, used and purged; run from
# the top of the source tree, as root:  sh tests/packages.sh
#
#  1. copies the tracked (and new, not ignored) files of the tree (outside
#     git: all but build/) to a temporary directory and builds the binary
#     packages there with dpkg-buildpackage -us -uc -b -Pnocheck (and
#     DEB_BUILD_OPTIONS=nocheck: make check runs the tests itself);
#  2. runs lintian on the .changes: any E: or W: tag fails;
#  3. refuses to go on if a dlockd package is installed on this machine
#     already (an operator's install is never replaced);
#  4. installs dlockd, dlock, libdlock1 and libdlock-dev with dpkg -i and
#     checks the user and group dlockd, /etc/dlockd (root:dlockd 0750), the
#     conffile, the units, dlockd -t, dlockd -h;
#  5. starts the installed dlockd as user dlockd on a free loopback port and
#     runs the installed dlock (ping, lock, status, run) and a C program built
#     with pkg-config against libdlock-dev against it, then stops it by pid;
#  6. purges the four packages and checks their files are gone.
#
# Whatever happens, the daemon started here is stopped and the packages
# installed here are purged. The dlockd system user stays, as it does after
# a purge. Not root: says it is skipped. Last line: "packages: N passed, M failed".
set -u
NAME=packages
. "$(dirname "$0")/steps.sh"

PKGS="dlockd dlock libdlock1 libdlock-dev"

if [ "$(id -u)" -ne 0 ]; then
	echo "packages: SKIPPED: installing packages needs root (run make check as root)"
	finish
fi
for tool in dpkg-buildpackage:dpkg-dev dh:debhelper fakeroot:fakeroot lintian:lintian \
    cc:build-essential pkg-config:pkg-config setpriv:util-linux python3:python3; do
	if ! command -v "${tool%%:*}" >/dev/null 2>&1; then
		fail "${tool%%:*} is missing (Debian package ${tool#*:})"
	fi
done
[ $failed -eq 0 ] || finish

# installed PKG: PKG is installed, or removed with its conffiles left
installed() {
	case "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" in
	""|not-installed) return 1 ;;
	*) return 0 ;;
	esac
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlockd-packages.XXXXXX") || {
	fail "cannot create a temporary directory"
	finish
}
chmod 0755 "$tmp"		# the daemon's user reaches its run directory
dpid=""				# the dlockd started here
ours=0				# 1 once the packages are installed by this script

cleanup() {
	if [ -n "$dpid" ]; then
		kill -KILL "$dpid" 2>/dev/null
		wait "$dpid" 2>/dev/null
	fi
	if [ $ours = 1 ]; then
		# shellcheck disable=SC2086  # a list of names
		dpkg --purge $PKGS > /dev/null 2>&1
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- 1. build ----

mkdir "$tmp/src"
# The files: git's list (tracked, and new ones not ignored) in a checkout,
# else every file but build/ and .git/ (an unpacked release).
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
	git ls-files -z --cached --others --exclude-standard > "$tmp/files"
else
	find . \( -path ./build -o -path ./.git \) -prune -o \( -type f -o -type l \) -print0 \
	    > "$tmp/files"
fi
# files deleted from the work tree but still tracked are left out
python3 -c 'import os, shutil, sys
dst = sys.argv[1]
for name in open(sys.argv[2], "rb").read().decode().split("\0"):
    if name and os.path.lexists(name):
        os.makedirs(os.path.join(dst, os.path.dirname(name)), exist_ok=True)
        shutil.copy2(name, os.path.join(dst, name), follow_symlinks=False)' \
    "$tmp/src" "$tmp/files"
echo "== dpkg-buildpackage -us -uc -b -Pnocheck"
if (cd "$tmp/src" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
    DEB_BUILD_OPTIONS="nocheck parallel=2" dpkg-buildpackage -us -uc -b -Pnocheck) \
    > "$tmp/build.log" 2>&1; then
	ok "dpkg-buildpackage -us -uc -b -Pnocheck"
else
	tail -n 40 "$tmp/build.log"
	fail "dpkg-buildpackage -us -uc -b -Pnocheck"
	finish
fi
debs=""
for p in $PKGS; do
	f=$(ls "$tmp/${p}_"*.deb 2>/dev/null)
	if [ -n "$f" ]; then
		debs="$debs $f"
	else
		fail "no $p package was built"
	fi
done
[ $failed -eq 0 ] || finish

# ---- 2. lintian ----

echo "== lintian"
# --fail-on none: the exit status says only whether lintian itself worked
lintian --fail-on none "$tmp"/*.changes > "$tmp/lintian.out" 2>&1
rc=$?
grep -v '^running with root privileges' "$tmp/lintian.out"
check "lintian ran (status $rc)" test $rc -eq 0
check "lintian reports no error and no warning" \
    sh -c '! grep -qE "^[EW]: " "$1"' sh "$tmp/lintian.out"

# ---- 3. install ----

for p in $PKGS; do
	if installed "$p"; then
		fail "the package $p is installed on this machine: not replacing it (dpkg --purge $PKGS, then run again)"
	fi
done
[ $failed -eq 0 ] || finish

echo "== dpkg -i"
ours=1
# shellcheck disable=SC2086  # a list of files
if dpkg -i $debs > "$tmp/dpkg.log" 2>&1; then
	ok "dpkg -i $PKGS"
else
	cat "$tmp/dpkg.log"
	fail "dpkg -i $PKGS"
	finish
fi

ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
check "user dlockd exists, a system user without a home" \
    sh -c 'u=$(getent passwd dlockd) && [ "$(echo "$u" | cut -d: -f6)" = /nonexistent ] &&
        [ "$(echo "$u" | cut -d: -f3)" -lt 1000 ]'
check "group dlockd exists and is the user's group" \
    sh -c '[ "$(getent group dlockd | cut -d: -f3)" = "$(id -g dlockd)" ]'
check "/etc/dlockd is root:dlockd 0750" test "$(stat -c '%U:%G %a' /etc/dlockd)" = "root:dlockd 750"
check "/etc/dlockd/dlockd.yaml is a conffile of dlockd" \
    sh -c 'dpkg-query -W -f="\${Conffiles}\n" dlockd | grep -q "^ /etc/dlockd/dlockd.yaml "'
for f in /usr/sbin/dlockd /lib/systemd/system/dlockd.service /lib/systemd/system/dlockd.socket \
    /usr/bin/dlock /usr/share/man/man8/dlockd.8.gz /usr/share/man/man5/dlockd.yaml.5.gz \
    /usr/share/man/man1/dlock.1.gz "/usr/lib/$ma/libdlock.so.1" /usr/include/dlock.h \
    "/usr/lib/$ma/libdlock.a" "/usr/lib/$ma/pkgconfig/libdlock.pc"; do
	check "$f installed" test -e "$f"
done
# deb-systemd-helper enables units with the same links whether systemd runs or not
check "dlockd.service is enabled" test -L /etc/systemd/system/multi-user.target.wants/dlockd.service
check "dlockd.socket is not enabled" test ! -e /etc/systemd/system/sockets.target.wants/dlockd.socket
check "dlockd.socket is not started on install" \
    sh -c '! grep -q "deb-systemd-invoke.*dlockd.socket" /var/lib/dpkg/info/dlockd.postinst'
check "dlockd -h names /etc/dlockd/dlockd.yaml" \
    sh -c '/usr/sbin/dlockd -h 2>&1 | grep -qF "(default /etc/dlockd/dlockd.yaml)"'
# The shipped configuration's Unix socket is in /run/dlockd, which systemd
# makes (RuntimeDirectory=dlockd): -t says so where it is missing, and
# approves the file once it is there.
made_run=
if [ ! -e /run/dlockd ]; then
	check "without /run/dlockd, dlockd -t names the socket's directory" \
	    sh -c '! /usr/sbin/dlockd -t -c /etc/dlockd/dlockd.yaml 2>&1 |
	        grep -q "configuration OK" && /usr/sbin/dlockd -t -c /etc/dlockd/dlockd.yaml 2>&1 |
	        grep -q "directory /run/dlockd"'
	install -d -o dlockd -g dlockd -m 0750 /run/dlockd && made_run=1
fi
check "the shipped configuration passes dlockd -t, run as user dlockd" \
    sh -c 'setpriv --reuid=dlockd --regid=dlockd --init-groups \
        /usr/sbin/dlockd -t -c /etc/dlockd/dlockd.yaml 2>&1 | grep -q "configuration OK"'
[ -n "$made_run" ] && rmdir /run/dlockd
check "pkg-config --modversion libdlock" test "$(pkg-config --modversion libdlock)" = "$(
    sed -n 's/^VERSION *:= *//p' "$tmp/src/Makefile")"

# ---- 4. use ----

echo "== the installed dlockd, dlock and libdlock"
port=$(python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
mkdir "$tmp/run"
chown dlockd:dlockd "$tmp/run"
cat > "$tmp/dlockd.yaml" <<EOT
listen:
  - "127.0.0.1:$port"
  - "unix:$tmp/run/dlockd.sock"
backend:
  type: memory
EOT
chmod 0644 "$tmp/dlockd.yaml"
setpriv --reuid=dlockd --regid=dlockd --init-groups \
    /usr/sbin/dlockd -c "$tmp/dlockd.yaml" > "$tmp/dlockd.log" 2>&1 < /dev/null &
dpid=$!
up=0
i=0
while [ $i -lt 100 ]; do
	if /usr/bin/dlock -a "127.0.0.1:$port" ping > /dev/null 2>&1; then
		up=1
		break
	fi
	kill -0 "$dpid" 2>/dev/null || break
	sleep 0.1
	i=$((i + 1))
done
if [ $up = 1 ]; then
	ok "the installed dlockd answers dlock ping"
else
	cat "$tmp/dlockd.log"
	fail "the installed dlockd did not start on 127.0.0.1:$port"
fi
check "dlockd runs as user dlockd" test "$(ps -o user= -p "$dpid")" = dlockd
check "its Unix socket belongs to dlockd" test "$(stat -c %U "$tmp/run/dlockd.sock" 2>/dev/null)" = dlockd

addr=127.0.0.1:$port
out=$(/usr/bin/dlock -a "$addr" lock --ttl 30000 pkg/lock 2>&1)
echo "$out"
check "dlock lock" test -n "$out"
check "dlock status shows the lock held" \
    sh -c '/usr/bin/dlock -a "$1" status pkg/lock | grep -qx "holders: 1"' sh "$addr"
out=$(/usr/bin/dlock -a "unix:$tmp/run/dlockd.sock" run --wait 0 pkg/run -- \
    /usr/bin/dlock -a "$addr" status pkg/run 2>&1)
echo "$out"
check "dlock run (over the Unix socket) holds the key while its command runs" \
    sh -c 'echo "$1" | grep -qx "holders: 1"' sh "$out"

cat > "$tmp/app.c" <<'EOT'
#include <stdio.h>
#include <dlock.h>

int
main(int argc, char **argv)
{
	char err[256];
	struct dlock_lock_opts o = DLOCK_LOCK_OPTS_INIT;
	struct dlock_grant g;
	dlock_t *d;

	if (argc != 2 || (d = dlock_connect(argv[1], NULL, err, sizeof(err))) == NULL) {
		fprintf(stderr, "connect: %s\n", argc == 2 ? err : "usage");
		return 1;
	}
	o.wait_ms = 5000;
	if (dlock_lock(d, "pkg/app", &o, &g) != 1) {
		fprintf(stderr, "lock: %s\n", dlock_error(d));
		return 1;
	}
	if (dlock_unlock(d, "pkg/app", NULL) < 0) {
		fprintf(stderr, "unlock: %s\n", dlock_error(d));
		return 1;
	}
	printf("fence %lld\n", g.fence);
	dlock_close(d);
	return 0;
}
EOT
# shellcheck disable=SC2046  # pkg-config prints a list of words
if cc -o "$tmp/app" "$tmp/app.c" $(pkg-config --cflags --libs libdlock) 2> "$tmp/cc.log"; then
	ok "a C program builds with pkg-config --cflags --libs libdlock"
	check "it links the shared libdlock.so.1" \
	    sh -c 'LC_ALL=C readelf -d "$1" | grep -qF "(NEEDED)" &&
	        LC_ALL=C readelf -d "$1" | grep -qF "Shared library: [libdlock.so.1]"' sh "$tmp/app"
	out=$("$tmp/app" "$addr" 2>&1)
	echo "$out"
	check "it takes and releases a lock" sh -c 'echo "$1" | grep -qE "^fence [0-9]+$"' sh "$out"
else
	cat "$tmp/cc.log"
	fail "a C program builds with pkg-config --cflags --libs libdlock"
fi

kill -TERM "$dpid"
i=0
while kill -0 "$dpid" 2>/dev/null && [ $i -lt 100 ]; do
	# a zombie is gone too
	grep -q '^[0-9]* (.*) Z' "/proc/$dpid/stat" 2>/dev/null && break
	sleep 0.1
	i=$((i + 1))
done
wait "$dpid"
rc=$?
dpid=""
check "the installed dlockd exits 0 on SIGTERM" test $rc -eq 0

# ---- 5. purge ----

echo "== dpkg --purge"
# shellcheck disable=SC2086  # a list of names
if dpkg --purge $PKGS > "$tmp/purge.log" 2>&1; then
	ok "dpkg --purge $PKGS"
	ours=0
else
	cat "$tmp/purge.log"
	fail "dpkg --purge $PKGS"
fi
for p in $PKGS; do
	if installed "$p"; then fail "$p is still installed"; else ok "$p is not installed any more"; fi
done
for f in /usr/sbin/dlockd /usr/bin/dlock /etc/dlockd /lib/systemd/system/dlockd.service \
    /lib/systemd/system/dlockd.socket /usr/include/dlock.h "/usr/lib/$ma/libdlock.so" \
    "/usr/lib/$ma/libdlock.so.1" "/usr/lib/$ma/libdlock.so.1.0.0" "/usr/lib/$ma/libdlock.a" \
    "/usr/lib/$ma/pkgconfig/libdlock.pc" /usr/share/man/man8/dlockd.8.gz \
    /etc/systemd/system/multi-user.target.wants/dlockd.service; do
	check "$f is gone" test ! -e "$f"
done
finish
