#!/bin/sh
# Installs what tartan needs to build and test on Debian 12 (run as root).
# Skips apt-get when everything is already there, so it is cheap to call twice.
set -eu
PKGS="build-essential autoconf automake libtool pkg-config libopenblas-dev liburing-dev \
libxxhash-dev check python3 python3-numpy libsqlite3-dev ${TT_EXTRA_PKGS:-}"
# tartan serve (doc/server.md): HTTP, JSON; curl for its tests
PKGS="$PKGS libmicrohttpd-dev libjansson-dev curl"
# the Python binding (python/, doc/python.md): headers, venv, and pip/setuptools to install it
PKGS="$PKGS python3-dev python3-venv python3-pip python3-setuptools python3-wheel"
# MPI (optional: tartan-mpi and tests/cli_mpi.sh; doc/scale.md)
PKGS="$PKGS libopenmpi-dev openmpi-bin"
# The side-by-side benchmark against the PLAID reference (bench/plaid_ref.py; opt-in,
# TT_BENCH_PLAID=1: torch is large): the reference's Python dependencies, faiss for its
# k-means, and g++/ninja with torch's and pybind11's headers for its C++ extensions
# (torch's JIT build; Debian's python3-torch ships no headers)
if [ "${TT_BENCH_PLAID:-0}" = 1 ]; then
    PKGS="$PKGS python3-torch python3-faiss python3-scipy python3-ujson python3-bitarray \
python3-tqdm ninja-build g++ libtorch-dev pybind11-dev"
fi
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
