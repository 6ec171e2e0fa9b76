#!/usr/bin/env bash
# portability.sh - load proof: run the fake-driver contention test inside a
# Debian bullseye root (glibc 2.31) with the libgpumutex.so built here.
#
# The root is made once with debootstrap from Debian's packages and cached
# in .portability/ (git-ignored). The fake driver and the client are built
# inside the root with its own compiler, so only the library under test
# comes from this machine. If the package mirror cannot be reached the
# target says so and fails; it never skips silently.
set -euo pipefail
cd "$(dirname "$0")/.."

suite=${GM_PORTABILITY_SUITE:-bullseye}
mirror=${GM_PORTABILITY_MIRROR:-http://deb.debian.org/debian}
root=.portability/$suite
lib=build/libgpumutex.so

[ -f "$lib" ] || { echo "portability: $lib is missing (run make first)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "portability: needs root (debootstrap, chroot)" >&2; exit 2; }

if [ ! -x "$root/usr/bin/gcc" ] || [ ! -x "$root/usr/bin/python3" ]; then
    command -v debootstrap >/dev/null || {
        echo "portability: debootstrap is not installed (apt-get install debootstrap)" >&2
        exit 1
    }
    echo "portability: building a $suite root in $root (once; cached)"
    rm -rf "$root.partial"
    mkdir -p .portability
    if ! debootstrap --variant=minbase --include=gcc,libc6-dev,make,python3 \
        "$suite" "$root.partial" "$mirror" >.portability/debootstrap.log 2>&1; then
        echo "portability: FAIL: debootstrap of $suite from $mirror failed" \
            "(is the package mirror reachable?); see .portability/debootstrap.log" >&2
        tail -5 .portability/debootstrap.log >&2 || true
        exit 1
    fi
    mv "$root.partial" "$root"
fi

work=$root/gm
rm -rf "$work"
mkdir -p "$work"
cp "$lib" "$work/libgpumutex.so"
cp tests/fakecuda/fakecuda.c tests/fakecuda/fakecuda.h tests/fakecuda/stubs.txt \
    tests/fakecuda/gen-stubs.sh tests/fakecuda/exports.map \
    tests/portability/client.c tests/portability/contention.py \
    tests/lib/journal.py "$work/"

chroot "$root" /bin/sh -ec '
    cd /gm
    ldd --version | head -1
    sh gen-stubs.sh --c stubs.txt fakecuda.h > stubs.c
    cc -std=gnu11 -O2 -fPIC -shared -pthread -I. -o libcuda.so.1 fakecuda.c stubs.c \
        -Wl,-soname,libcuda.so.1 -Wl,--version-script=exports.map -Wl,-Bsymbolic -ldl
    ln -sf libcuda.so.1 libcuda.so
    cc -O2 -o client client.c -L. -lcuda
    python3 contention.py
'
