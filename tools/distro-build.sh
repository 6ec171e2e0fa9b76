#!/usr/bin/env bash
# distro-build.sh - build and test on the newest toolchain, load on the oldest.
#
#   1. makes a Debian trixie root (gcc 14, glibc 2.41) holding exactly the
#      packages of .ci/packages above its host-only marker (the README's list (tools/mkroot.sh; cached
#      in .portability/trixie);
#   2. copies this source tree into it (/gm-src) and runs there what the
#      README says, `make`, `make demo` and `make check`, and then `make gate`
#      (with PACKAGES=no: the root holds the list above the marker on
#      purpose; installing the rest is what `make fresh-check` proves);
#   3. checks with objdump -T that every shared library built there that is
#      shipped (all of build/ but the test-only build/tests and build/san)
#      references no symbol version above GLIBC_2.17;
#   4. runs the bullseye load proof (tools/portability.sh, glibc 2.31) with
#      the trixie-built libgpumutex.so;
#   5. builds libgpumutex.so inside the bullseye root with its gcc 10 and
#      gates it (tools/portability.sh --build).
#
# Needs root and Debian's package mirror the first time. A failing step
# fails the script; nothing is skipped. Logs: .portability/distro-*.log.
set -euo pipefail
cd "$(dirname "$0")/.."

suite=${GM_DISTRO_SUITE:-trixie}
max_minor=17

[ "$(id -u)" -eq 0 ] || { echo "distro-build: needs root (debootstrap, chroot)" >&2; exit 2; }
# Only the lines above the host-only marker: those below are for tests that
# the host runs (NumPy, SciPy, gfortran) and skip where they are missing.
mapfile -t packages < <(sed '/^# -- host-only test packages (not in the distro-check roots) --$/,$d; s/#.*//; s/[[:space:]]//g; /^$/d' .ci/packages)

step() { echo "distro-build: == $*"; }
t0=$(date +%s)
lap() { echo "distro-build: -- $1 took $(($(date +%s) - t0)) s"; t0=$(date +%s); }

step "1. $suite root with .ci/packages: ${packages[*]}"
root=$(bash tools/mkroot.sh "$suite" "${packages[@]}")
lap "root"

step "2. make, make demo, make check, make gate inside $suite"
bash tools/copy-tree.sh "$root/gm-src"
log=.portability/distro-$suite.log
bash tools/chroot-run.sh "$root" /bin/sh -ec '
    cd /gm-src
    echo "distro-build: $(gcc --version | head -1), $(ldd --version | head -1)"
    make
    make demo PACKAGES=no
    make check PACKAGES=no
    make gate
' 2>&1 | tee "$log"
lap "make, make demo, make check, make gate"

step "3. glibc floor (GLIBC_2.$max_minor) of the shipped libraries built in $suite"
fail=0
found=0
while IFS= read -r -d '' so; do
    found=$((found + 1))
    too_new=$(objdump -T "$so" |
        sed -n 's/.*[( ]\(GLIBC_2\.[0-9][0-9.]*\)[) ].* \([^ ]*\)$/\1 \2/p' |
        awk -v max="$max_minor" '{ split($1, v, "."); if (v[2] + 0 > max) print $2 "@" $1 }' |
        sort -u | tr '\n' ' ')
    if [ -n "$too_new" ]; then
        echo "distro-build: FAIL: ${so#"$root"/} references versions above GLIBC_2.$max_minor: $too_new" >&2
        fail=1
    else
        echo "distro-build: ok: ${so#"$root"/} (nothing above GLIBC_2.$max_minor)"
    fi
done < <(find "$root/gm-src/build" \( -path "$root/gm-src/build/tests" -o \
    -path "$root/gm-src/build/san" \) -prune -o -type f -name '*.so*' -print0)
[ "$found" -gt 0 ] || { echo "distro-build: FAIL: no shared library built in $suite" >&2; fail=1; }
[ "$fail" -eq 0 ] || exit 1
lap "glibc floor"

step "4. bullseye load proof of the $suite-built libgpumutex.so"
GM_PORTABILITY_LIB=$root/gm-src/build/libgpumutex.so bash tools/portability.sh
lap "cross-load"

step "5. build and gate libgpumutex.so with bullseye's gcc 10"
bash tools/portability.sh --build
lap "bullseye build"

if awk '$2 ~ /\/\.portability\//' /proc/mounts | grep .; then
    echo "distro-build: FAIL: mounts left under .portability" >&2
    exit 1
fi
echo "distro-build: ok: $suite build, tests, glibc floor, bullseye load and gcc 10 build"
