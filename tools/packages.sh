#!/bin/sh
# packages.sh - the first step of `make demo` and `make check`: the Debian
# packages of .ci/packages that this machine lacks. One dpkg-query call;
# when nothing is missing it says nothing and costs some milliseconds.
#
#   missing, run as root   says what it installs, then apt-get update and
#                          apt-get install -y --no-install-recommends them
#   missing, not root      prints the one apt-get line and exits 2
#   no dpkg-query          (not Debian or Ubuntu) names the list, goes on
#   PACKAGES=no            skips all of it (packages from elsewhere: pip, a
#                          distribution of another kind)
set -eu
cd "$(dirname "$0")/.."

[ "${PACKAGES:-yes}" = no ] && exit 0
list=$(sed 's/#.*//; s/[[:space:]]//g; /^$/d' .ci/packages | tr '\n' ' ')
if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "gpumutex: no dpkg-query (not Debian or Ubuntu): the build and tests need the equivalents of $list" >&2
    exit 0
fi
# shellcheck disable=SC2086 # the list is words
installed=" $(dpkg-query -W -f='${Package} ${db:Status-Status}\n' $list 2>/dev/null |
    awk '$2 == "installed" { printf "%s ", $1 }')"
missing=
for p in $list; do
    case $installed in *" $p "*) ;; *) missing="$missing $p" ;; esac
done
[ -z "$missing" ] && exit 0
# A name that an installed package provides is there too: Debian 13's
# 64-bit time_t renames (libtcmalloc-minimal4 is installed as
# libtcmalloc-minimal4t64, which provides the old name). Asked only when
# something seems missing.
provided=" $(dpkg-query -W -f='${db:Status-Status} ${Provides}\n' 2>/dev/null |
    awk '$1 == "installed" { $1 = ""; gsub(/\([^)]*\)/, ""); gsub(/,/, " "); printf "%s ", $0 }')"
still=
for p in $missing; do
    case $provided in *" $p "*) ;; *) still="$still $p" ;; esac
done
missing=${still# }
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "gpumutex: this machine lacks Debian packages that the build and the tests use; install them (as root) with" >&2
    echo "  apt-get install -y $missing" >&2
    echo "(or run this as root, which installs them; PACKAGES=no skips this check)" >&2
    exit 2
fi
echo "gpumutex: installing what this machine lacks from .ci/packages: $missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $missing
