#!/usr/bin/env bash
# chroot-run.sh ROOT COMMAND [ARG...]
#
# Runs COMMAND inside the root directory ROOT (chroot) with /proc, /dev,
# /dev/pts and a fresh /dev/shm mounted, in a clean environment, and
# unmounts them again whatever happens. Where unshare(1) works the mounts
# are made in a private mount namespace, so the host never sees them and
# they vanish with the command even if this script is killed; the trap
# unmounts them in any case. Exits with COMMAND's status.
set -euo pipefail

root=${1:?usage: chroot-run.sh ROOT COMMAND [ARG...]}
shift
[ "$#" -gt 0 ] || { echo "usage: chroot-run.sh ROOT COMMAND [ARG...]" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "chroot-run: needs root (mount, chroot)" >&2; exit 2; }
[ -x "$root/bin/sh" ] || { echo "chroot-run: $root is not a root directory" >&2; exit 2; }
root=$(cd "$root" && pwd -P)

if [ -z "${GM_CHROOT_NS:-}" ] && unshare --mount --propagation private true 2>/dev/null; then
    GM_CHROOT_NS=1 exec unshare --mount --propagation private \
        bash "${BASH_SOURCE[0]}" "$root" "$@"
fi

mounted=()
cleanup() {
    local i m
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        m=${mounted[i]}
        umount "$m" 2>/dev/null || umount -l "$m" ||
            echo "chroot-run: could not unmount $m" >&2
    done
    mounted=()
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mnt() {  # mnt TARGET MOUNT-ARGS...
    local target=$root$1
    shift
    mkdir -p "$target"
    mount "$@" "$target"
    mounted+=("$target")
}
mnt /proc -t proc proc
mnt /dev --bind /dev
mnt /dev/pts --bind /dev/pts
mnt /dev/shm -t tmpfs -o mode=1777,nosuid,nodev tmpfs

status=0
chroot "$root" /usr/bin/env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" "$@" || status=$?
cleanup
exit "$status"
