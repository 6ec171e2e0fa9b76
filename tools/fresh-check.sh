#!/usr/bin/env bash
# fresh-check.sh - the README's two commands on a fresh machine.
#
# A Debian root (debootstrap --variant=minbase, as `make distro-check`
# makes them; tools/mkroot.sh, cached in .portability/fresh-SUITE) holding
# nothing but make, which the commands need to start. In a throw-away
# copy of it (the cached root stays fresh), this source tree is copied
# to /gm-src and, as root, `make demo` then `make check` run there: the
# first must install what .ci/packages lists (tools/packages.sh, from
# Debian's package mirror) and say so, both must pass, and afterwards the
# package check must find nothing missing. (The path for a user that is
# not root, the apt-get line and exit 2, is tests/test_packages.py's.)
#
#   GM_FRESH_SUITE   the Debian release (default trixie)
#
# Needs root, unshare, overlayfs and Debian's package mirror. Some 20-30
# minutes on two cores (the package download and `make check`). Log:
# .portability/fresh-SUITE.log.
set -euo pipefail
cd "$(dirname "$0")/.."

suite=${GM_FRESH_SUITE:-trixie}
[ "$(id -u)" -eq 0 ] || { echo "fresh-check: needs root (debootstrap, chroot)" >&2; exit 2; }
if [ -z "${GM_FRESH_NS:-}" ]; then
    GM_FRESH_NS=1 exec unshare --mount --propagation private \
        bash "${BASH_SOURCE[0]}" "$@"
fi
root=$(GM_ROOT_NAME=fresh-$suite bash tools/mkroot.sh "$suite" make)
root=$(cd "$root" && pwd -P)
work=$(mktemp -d /var/tmp/gm-fresh.XXXXXX)
# A copy on this machine's filesystem, not an overlay: `make check` inside
# makes overlays of its own (tests/system/run.sh), and overlayfs refuses an
# upper directory on overlayfs.
cleanup() {
    # Never delete through a mount left inside (rm -rf would follow it).
    if awk -v r="$work/" 'index($2, r) == 1 {found=1} END {exit !found}' /proc/mounts; then
        echo "fresh-check: something is still mounted under $work; not removing it" >&2
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
mkdir "$work/merged"
cp -a "$root/." "$work/merged/"
# The package mirror's name, resolved as on this machine.
cp /etc/resolv.conf "$work/merged/etc/resolv.conf"
bash tools/copy-tree.sh "$work/merged/gm-src"
log=.portability/fresh-$suite.log
echo "fresh-check: the README's two commands in a fresh $suite root (log: $log)"
status=0
bash tools/chroot-run.sh "$work/merged" /bin/sh -ec '
    cd /gm-src
    if command -v gcc python3 >/dev/null 2>&1; then
        echo "fresh-check: FAIL: the fresh root already has gcc or python3" >&2
        exit 1
    fi
    make demo
    make check
    # What is missing now: nothing, and the check says nothing.
    test -z "$(sh tools/packages.sh 2>&1)"
' >"$log" 2>&1 || status=$?
tail -5 "$log"
if [ "$status" -ne 0 ]; then
    echo "fresh-check: FAIL (exit $status); see $log" >&2
    exit 1
fi
grep -q "^gpumutex: installing what this machine lacks from .ci/packages" "$log" || {
    echo "fresh-check: FAIL: make demo did not say what it installed; see $log" >&2
    exit 1
}
echo "fresh-check: ok: make demo and make check installed what they lacked and passed in a fresh $suite root"
