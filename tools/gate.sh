#!/usr/bin/env bash
# gate.sh LIBRARY EXPORTS_LIST [MORE_EXPORTS_LISTS...]
# gate.sh --program PROGRAM...
#
# The load gate: checks that a built libgpumutex.so (or libgpuoffload.so)
# will load on every target (x86_64 glibc 2.17 or newer, no C++ runtime)
# and exports exactly the documented symbols (EXPORTS_LIST). Fails with a message naming the property.
#
#   - highest GLIBC_ symbol version referenced <= GLIBC_2.17
#   - no GLIBC_ABI_* markers (newer toolchains add them; old glibc refuses)
#   - no GLIBCXX_/CXXABI_ versions and no libstdc++/libgcc_s
#   - NEEDED only libc.so.6, libdl.so.2, libpthread.so.0
#   - no RPATH or RUNPATH
#   - an SONAME
#   - defined dynamic symbols == EXPORTS_LIST (one name per line, # comments),
#     plus the names of any further lists (the generated driver wrappers,
#     build/gen/wrap-exports.list)
#   - no call to a function that glibc >= 2.38 redirects to a GLIBC_2.38
#     symbol under _GNU_SOURCE (strtol & co., sscanf & co.): the same source
#     built on a newer host would not load on an older glibc
#
# With --program, each PROGRAM (gpumutex, gpumutex-run, gpu-offload,
# gpu-offload-calib) is checked for the same glibc floor, markers, NEEDED
# libraries, RPATH and number parsers; a program has no SONAME and no
# export list (src/compat/ says how the programs are built for it).
#
# Each failure says what is wrong and what to do about it.
set -euo pipefail

if [ "${1:-}" = --program ]; then
    shift
    [ "$#" -gt 0 ] || { echo "usage: gate.sh --program PROGRAM..." >&2; exit 2; }
    rc=0
    for p in "$@"; do
        GM_GATE_PROGRAM=1 bash "${BASH_SOURCE[0]}" "$p" /dev/null || rc=1
    done
    exit "$rc"
fi
program=${GM_GATE_PROGRAM:-}

lib=${1:?usage: gate.sh LIBRARY EXPORTS_LIST}
list=${2:?usage: gate.sh LIBRARY EXPORTS_LIST}
shift 2
lists=("$list" "$@")
max_minor=17
fail=0

# bad WHAT FIX: one failure, and what to do about it.
bad() {
    echo "gate: FAIL: $lib: $1" >&2
    echo "gate:   fix: $2" >&2
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
    GLIBC_ABI_*) bad "references the marker $v (not known to older glibc)" \
        "link without the marker (binutils' -z nomark-plt / an older linker), see docs/portability.md" ;;
    GLIBCXX_* | CXXABI_*) bad "references the C++ runtime version $v" \
        "the library must be plain C: remove the C++ object or -lstdc++ from its link" ;;
    GLIBC_2.*)
        minor=${v#GLIBC_2.}
        minor=${minor%%.*}
        if [ "$minor" -gt "$max_minor" ]; then
            syms=$(objdump -T "$lib" | awk -v v="$v" '$0 ~ "[ (]"v"[) ]" {print $NF}' | tr '\n' ' ')
            bad "references $v, newer than GLIBC_2.$max_minor: ${syms:-?}" \
                "avoid these functions or bind an older version (see src/preload/compat.h, src/compat/ for programs, and docs/portability.md); __isoc23_* come from strtol/sscanf/atoi under _GNU_SOURCE: use gm_parse_uint (src/lease/num.c)"
        fi
        ;;
    esac
done <<<"$needs"

# Libraries it needs.
while read -r n; do
    [ -n "$n" ] || continue
    case $n in
    libc.so.6 | libdl.so.2 | libpthread.so.0) ;;
    *) bad "NEEDED $n (only libc, libdl and libpthread are allowed)" \
        "drop -l${n%%.so*} from the link; anything else must be dlopen()ed at run time" ;;
    esac
done < <(printf '%s\n' "$dyn" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')

grep -q '(RPATH)' <<<"$dyn" && bad "has an RPATH" "remove -Wl,-rpath from the link"
grep -q '(RUNPATH)' <<<"$dyn" && bad "has a RUNPATH" "remove -Wl,-rpath from the link"
[ -n "$program" ] || grep -q '(SONAME)' <<<"$dyn" || bad "has no SONAME" "link with -Wl,-soname,$(basename "$lib")"

# Exported (defined) dynamic symbols against the documented list.
have=$(readelf --dyn-syms -W "$lib" |
    awk '$7 != "UND" && ($5 == "GLOBAL" || $5 == "WEAK") && $4 != "SECTION" && $4 != "FILE" {print $8}' |
    sed 's/@.*//' | sort -u)
want=$(sed 's/#.*//; s/[[:space:]]//g; /^$/d' "${lists[@]}" | sort -u)
# At most 12 names per message (the wrappers are some 600).
extra=$(comm -23 <(printf '%s\n' "$have") <(printf '%s\n' "$want") |
    awk 'NR <= 12 { printf "%s ", $0 } END { if (NR > 12) printf "(%d in all) ", NR }')
missing=$(comm -13 <(printf '%s\n' "$have") <(printf '%s\n' "$want") |
    awk 'NR <= 12 { printf "%s ", $0 } END { if (NR > 12) printf "(%d in all) ", NR }')
[ -n "$program" ] || [ -z "${extra// /}" ] || bad "exports undocumented symbols: $extra" \
    "build with -fvisibility=hidden and the version script, or document them in $list"
[ -n "$program" ] || [ -z "${missing// /}" ] || bad "does not export documented symbols: $missing" \
    "define them, or remove them from $list"

# Functions that glibc >= 2.38 redirects to __isoc23_* under _GNU_SOURCE
# (or C2X): harmless in this artifact if it was built on an older host, but
# the same source built on a newer one would need GLIBC_2.38.
c23=$(objdump -T "$lib" | awk '$0 ~ /\*UND\*/ {print $NF}' |
    grep -xE '(strto(l|ul|ll|ull|imax|umax)|wcsto(l|ul|ll|ull|imax|umax)|(v|f|vf|s|vs|sw|vsw|fw|vfw|w|vw)?scanf|ato(i|l|ll))' |
    tr '\n' ' ' || true)
[ -z "${c23// /}" ] || bad "calls $c23(redirected to __isoc23_*@GLIBC_2.38 by glibc >= 2.38 headers: a build on a newer host would not load on older glibc)" \
    "parse numbers with gm_parse_uint / gm_scan_uint (src/lease/num.c) instead"

if [ "$fail" -eq 0 ] && [ -n "$program" ]; then
    echo "gate: ok: $lib (program: glibc <= 2.$max_minor, libc only, no RPATH)"
elif [ "$fail" -eq 0 ]; then
    nexp=$(printf '%s\n' "$want" | wc -l)
    if [ "$nexp" -le 12 ]; then
        exports=$(printf '%s' "$want" | tr '\n' ' ')
    else
        exports="the $nexp names of ${lists[*]}"
    fi
    echo "gate: ok: $lib (glibc <= 2.$max_minor, libc only, exports: $exports)"
fi
exit "$fail"
