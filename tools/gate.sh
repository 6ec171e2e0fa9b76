#!/usr/bin/env bash
# gate.sh LIBRARY EXPORTS_LIST
#
# The load gate: checks that a built libgpumutex.so will load on every
# target (x86_64 glibc 2.17 or newer, no C++ runtime) and exports exactly
# the documented symbols. Fails with a message naming the property.
#
#   - highest GLIBC_ symbol version referenced <= GLIBC_2.17
#   - no GLIBC_ABI_* markers (newer toolchains add them; old glibc refuses)
#   - no GLIBCXX_/CXXABI_ versions and no libstdc++/libgcc_s
#   - NEEDED only libc.so.6, libdl.so.2, libpthread.so.0
#   - no RPATH or RUNPATH
#   - an SONAME
#   - defined dynamic symbols == EXPORTS_LIST (one name per line, # comments)
set -euo pipefail

lib=${1:?usage: gate.sh LIBRARY EXPORTS_LIST}
list=${2:?usage: gate.sh LIBRARY EXPORTS_LIST}
max_minor=17
fail=0

bad() {
    echo "gate: FAIL: $lib: $*" >&2
    fail=1
}

[ -f "$lib" ] || { echo "gate: $lib does not exist (build it first)" >&2; exit 2; }
dyn=$(readelf -dW "$lib")
vers=$(readelf -VW "$lib")

# Versions this library requires, from the version-needs section.
needs=$(printf '%s\n' "$vers" | sed -n 's/.*Name: \([A-Za-z_]*[0-9][0-9.]*\|[A-Z_]*\)  *Flags.*/\1/p')
while read -r v; do
    [ -n "$v" ] || continue
    case $v in
    GLIBC_ABI_*) bad "references the marker $v (not known to older glibc)" ;;
    GLIBCXX_* | CXXABI_*) bad "references the C++ runtime version $v" ;;
    GLIBC_2.*)
        minor=${v#GLIBC_2.}
        minor=${minor%%.*}
        if [ "$minor" -gt "$max_minor" ]; then
            syms=$(objdump -T "$lib" | awk -v v="$v" '$0 ~ "[ (]"v"[) ]" {print $NF}' | tr '\n' ' ')
            bad "references $v, newer than GLIBC_2.$max_minor: ${syms:-?}"
        fi
        ;;
    esac
done <<<"$needs"

# Libraries it needs.
while read -r n; do
    [ -n "$n" ] || continue
    case $n in
    libc.so.6 | libdl.so.2 | libpthread.so.0) ;;
    *) bad "NEEDED $n (only libc, libdl and libpthread are allowed)" ;;
    esac
done < <(printf '%s\n' "$dyn" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')

printf '%s\n' "$dyn" | grep -q '(RPATH)' && bad "has an RPATH"
printf '%s\n' "$dyn" | grep -q '(RUNPATH)' && bad "has a RUNPATH"
printf '%s\n' "$dyn" | grep -q '(SONAME)' || bad "has no SONAME"

# Exported (defined) dynamic symbols against the documented list.
have=$(readelf --dyn-syms -W "$lib" |
    awk '$7 != "UND" && ($5 == "GLOBAL" || $5 == "WEAK") && $4 != "SECTION" && $4 != "FILE" {print $8}' |
    sed 's/@.*//' | sort -u)
want=$(sed 's/#.*//; s/[[:space:]]//g; /^$/d' "$list" | sort -u)
extra=$(comm -23 <(printf '%s\n' "$have") <(printf '%s\n' "$want") | tr '\n' ' ')
missing=$(comm -13 <(printf '%s\n' "$have") <(printf '%s\n' "$want") | tr '\n' ' ')
[ -z "${extra// /}" ] || bad "exports undocumented symbols: $extra"
[ -z "${missing// /}" ] || bad "does not export documented symbols: $missing"

if [ "$fail" -eq 0 ]; then
    echo "gate: ok: $lib (glibc <= 2.$max_minor, libc only, exports: $(printf '%s' "$want" | tr '\n' ' '))"
fi
exit "$fail"
