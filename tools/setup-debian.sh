#!/bin/sh
# Installs what tartan needs to build and test on Debian 12 (run as root).
# Skips apt-get when everything is already there, so it is cheap to call twice.
set -eu
PKGS="build-essential autoconf automake libtool pkg-config libopenblas-dev liburing-dev \
libxxhash-dev check python3 python3-numpy libsqlite3-dev ${TT_EXTRA_PKGS:-}"
missing=""
for p in $PKGS; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "setup: missing packages:$missing (run as root to install them)" >&2
        exit 1
    fi
    echo "setup: installing$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends $missing >/dev/null
fi
