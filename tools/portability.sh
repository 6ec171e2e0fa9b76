#!/usr/bin/env bash
# portability.sh [--build] - the glibc 2.31 proofs, in a Debian bullseye root.
#
#   portability.sh           load proof: run the fake-driver contention test
#                            inside the root with a libgpumutex.so built
#                            elsewhere: $GM_PORTABILITY_LIB, by default
#                            build/libgpumutex.so (built on this machine)
#   portability.sh --build   build libgpumutex.so inside the root with its
#                            own compiler (gcc 10) and run the load gate on it
#
# The root is made once by tools/mkroot.sh from Debian's packages and cached
# in .portability/ (git-ignored). The fake driver and the client are built
# inside the root with its own compiler, so only the library under test
# comes from outside. If the package mirror cannot be reached the target
# says so and fails; it never skips silently.
set -euo pipefail
cd "$(dirname "$0")/.."

suite=${GM_PORTABILITY_SUITE:-bullseye}
packages=(gcc libc6-dev make python3 python3-venv)
lib=${GM_PORTABILITY_LIB:-build/libgpumutex.so}
mode=load
case ${1:-} in
'') ;;
--build) mode=build ;;
*) echo "usage: portability.sh [--build]" >&2; exit 2 ;;
esac

[ "$(id -u)" -eq 0 ] || { echo "portability: needs root (debootstrap, chroot)" >&2; exit 2; }
if [ "$mode" = load ] && [ ! -f "$lib" ]; then
    echo "portability: $lib is missing (run make first)" >&2
    exit 2
fi

root=$(bash tools/mkroot.sh "$suite" "${packages[@]}")

if [ "$mode" = build ]; then
    bash tools/copy-tree.sh "$root/gm-src"
    bash tools/chroot-run.sh "$root" /bin/sh -ec '
        cd /gm-src
        echo "portability: building with $(gcc --version | head -1), $(ldd --version | head -1)"
        make build/libgpumutex.so
        bash tools/gate.sh build/libgpumutex.so src/preload/exports.list \
            build/gen/wrap-exports.list
    '
    exit 0
fi

work=$root/gm
rm -rf "$work"
mkdir -p "$work"
echo "portability: load proof of $lib ($(sha256sum "$lib" | cut -c1-12))"
cp "$lib" "$work/libgpumutex.so"
# The fake driver: every file of tests/fakecuda (its sources are every .c
# but the self-test, as tests/fakecuda/module.mk builds it).
mkdir "$work/fc"
cp tests/fakecuda/* "$work/fc/"
cp tests/portability/client.c tests/portability/contention.py \
    tests/lib/journal.py "$work/"

chroot "$root" /bin/sh -ec '
    cd /gm
    ldd --version | head -1
    sh fc/gen-stubs.sh --c fc/stubs.txt fc/fakecuda.h > stubs.c
    rm fc/selftest.c
    cc -std=gnu11 -O2 -fPIC -shared -pthread -Ifc -o libcuda.so.1 fc/*.c \
        stubs.c -Wl,-soname,libcuda.so.1 -Wl,--version-script=fc/exports.map \
        -Wl,-Bsymbolic -ldl
    ln -sf libcuda.so.1 libcuda.so
    cc -O2 -o client client.c -L. -lcuda
    python3 contention.py
'
