#!/usr/bin/env bash
# wheel.sh ROOT WHEEL - install the gpumutex wheel into a fresh venv inside
# a throw-away overlay of the Debian root ROOT (as tests/system/run.sh: the
# root itself is only read) and run a contended pair of jobs there through
# the venv's gpumutex-run, on the fake driver built inside the root with
# its own compiler. Prints "wheel: ok ..." and exits 0 when the pair took
# turns; tests/test_wheel_roots.py runs it for bullseye and trixie. Needs
# root, mount namespaces and overlayfs.
set -euo pipefail
cd "$(dirname "$0")/../.."

root=$(cd "${1:?usage: wheel.sh ROOT WHEEL}" && pwd -P)
wheel=${2:?usage: wheel.sh ROOT WHEEL}
if [ -z "${GM_SYSTEM_NS:-}" ]; then
    GM_SYSTEM_NS=1 exec unshare --mount --propagation private \
        bash "${BASH_SOURCE[0]}" "$@"
fi
work=$(mktemp -d /var/tmp/gm-wheel.XXXXXX)
cleanup() {
    umount "$work/merged" 2>/dev/null || umount -l "$work/merged" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/upper" "$work/work" "$work/merged"
mount -t overlay overlay \
    -o "lowerdir=$root,upperdir=$work/upper,workdir=$work/work" "$work/merged"
w=$work/merged/gm-wheel
mkdir -p "$w"
cp "$wheel" "$w/"
# The fake driver's sources: every .c of tests/fakecuda but its self-test.
mkdir -p "$w/fake"
cp tests/fakecuda/*.c "$w/fake/" && rm "$w/fake/selftest.c"
cp tests/fakecuda/fcint.h \
    tests/fakecuda/fakecuda.h tests/fakecuda/stubs.txt \
    tests/fakecuda/gen-stubs.sh tests/fakecuda/exports.map \
    tests/portability/client.c tests/system/wheel_pair.py tests/lib/journal.py "$w/"
bash tools/chroot-run.sh "$work/merged" /bin/sh -ec '
    cd /gm-wheel
    sh gen-stubs.sh --c stubs.txt fakecuda.h > stubs.c
    cc -std=gnu11 -O2 -fPIC -shared -pthread -I. -o libcuda.so.1 fake/*.c stubs.c \
        -Wl,-soname,libcuda.so.1 -Wl,--version-script=exports.map -Wl,-Bsymbolic -ldl
    ln -sf libcuda.so.1 libcuda.so
    cc -O2 -o client client.c -L. -lcuda
    python3 -m venv venv
    venv/bin/pip install -q --no-index --no-deps ./*.whl
    venv/bin/python wheel_pair.py
'
