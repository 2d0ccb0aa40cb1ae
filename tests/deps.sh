#!/bin/sh
# Install the Debian packages named in $DEB that are not installed yet.
# Root runs apt-get itself; anyone else goes through sudo.
set -eu
missing=""
for p in $DEB; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0
echo "installing missing packages:$missing"
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing; then
    $SUDO apt-get update -q
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing
fi
