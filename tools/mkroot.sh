#!/usr/bin/env bash
# mkroot.sh SUITE [PACKAGE...]
#
# Makes a Debian SUITE root with debootstrap --variant=minbase
# --include=PACKAGE,... from Debian's package mirror, once, into
# .portability/SUITE (git-ignored), and prints its path. The root records
# the package list it was made with (in /etc/gpumutex-root-packages); a
# later call with another list makes it anew, so a cached root always holds
# exactly what was asked for. Nothing but Debian packages is downloaded. If
# the mirror cannot be reached it says so and fails; it never skips.
#
#   GM_PORTABILITY_MIRROR   the mirror (default http://deb.debian.org/debian)
#   GM_ROOT_NAME            the directory under .portability/ (default SUITE):
#                           a second root of one suite with another list
set -euo pipefail
cd "$(dirname "$0")/.."

suite=${1:?usage: mkroot.sh SUITE [PACKAGE...]}
shift
mirror=${GM_PORTABILITY_MIRROR:-http://deb.debian.org/debian}
root=.portability/${GM_ROOT_NAME:-$suite}
stamp=etc/gpumutex-root-packages
want=$(printf '%s\n' "$@" | sed '/^$/d' | sort -u)

[ "$(id -u)" -eq 0 ] || { echo "mkroot: needs root (debootstrap)" >&2; exit 2; }

if [ -f "$root/$stamp" ] && [ "$(cat "$root/$stamp")" = "$want" ]; then
    printf '%s\n' "$root"
    exit 0
fi

command -v debootstrap >/dev/null || {
    echo "mkroot: debootstrap is not installed (apt-get install debootstrap)" >&2
    exit 1
}
# A root with mounts inside must not be deleted (rm -rf would follow them).
here=$(pwd -P)
mounts_under() { awk -v r="$here/$1" 'index($2, r) == 1 {print $2}' /proc/mounts; }
if [ -n "$(mounts_under "$root")" ]; then
    echo "mkroot: FAIL: something is mounted under $root; unmount it first" >&2
    exit 1
fi
log=.portability/debootstrap-${GM_ROOT_NAME:-$suite}.log
echo "mkroot: building a $suite root in $root (once; cached): $(printf '%s' "$want" | tr '\n' ' ')" >&2
mkdir -p .portability
rm -rf "$root.partial"
include=$(printf '%s' "$want" | tr '\n' ',')
start=$(date +%s)
status=0
debootstrap --variant=minbase ${include:+--include="$include"} \
    "$suite" "$root.partial" "$mirror" >"$log" 2>&1 || status=$?
# debootstrap mounts /proc and /sys inside the root while it works; a
# failed one may leave them: unmount them (deepest first), never rm them.
for m in $(mounts_under "$root.partial" | sort -r); do
    umount "$m" || umount -l "$m"
done
if [ "$status" -ne 0 ]; then
    echo "mkroot: FAIL: debootstrap of $suite from $mirror failed" \
        "(is the package mirror reachable?); see $log" >&2
    tail -5 "$log" >&2 || true
    exit 1
fi
printf '%s\n' "$want" >"$root.partial/$stamp"
rm -rf "$root"
mv "$root.partial" "$root"
echo "mkroot: $suite root ready in $(($(date +%s) - start)) s" >&2
printf '%s\n' "$root"
