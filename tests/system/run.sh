#!/usr/bin/env bash
# run.sh ROOT OUTDIR - the machine-wide scenarios (tests/system/scenarios.py)
# in a throw-away overlay of the Debian root ROOT: the root itself is only
# read, and everything the scenarios write (/etc/ld.so.preload,
# /etc/gpumutex.conf, the build) lands in a temporary upper directory that
# is removed afterwards. Results go to OUTDIR/results.json. Needs root,
# mount namespaces and overlayfs (tests/test_system.py checks, and skips
# with the reason where they are missing).
set -euo pipefail
cd "$(dirname "$0")/../.."

root=$(cd "${1:?usage: run.sh ROOT OUTDIR}" && pwd -P)
out=${2:?usage: run.sh ROOT OUTDIR}
if [ -z "${GM_SYSTEM_NS:-}" ]; then
    GM_SYSTEM_NS=1 exec unshare --mount --propagation private \
        bash "${BASH_SOURCE[0]}" "$@"
fi
work=$(mktemp -d /var/tmp/gm-system.XXXXXX)
cleanup() {
    umount "$work/merged" 2>/dev/null || umount -l "$work/merged" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/upper" "$work/work" "$work/merged"
mount -t overlay overlay \
    -o "lowerdir=$root,upperdir=$work/upper,workdir=$work/work" "$work/merged"
bash tools/copy-tree.sh "$work/merged/gm-src"
status=0
bash tools/chroot-run.sh "$work/merged" /usr/bin/python3 \
    /gm-src/tests/system/scenarios.py /gm-out || status=$?
mkdir -p "$out"
cp -r "$work/merged/gm-out/." "$out/" 2>/dev/null || true
cleanup
exit "$status"
