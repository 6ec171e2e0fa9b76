#!/usr/bin/env bash
# copy-tree.sh DEST
#
# Copies this source tree as it is now (tracked files and untracked ones
# that git does not ignore, uncommitted changes included; never build/,
# .portability/ or .git/) into DEST, made anew with mode 755 so that other
# users can reach it (tests switch users).
set -euo pipefail
cd "$(dirname "$0")/.."

dest=${1:?usage: copy-tree.sh DEST}
case $dest in /*) ;; *) dest=$(pwd)/$dest ;; esac
rm -rf "$dest"
mkdir -p "$dest"
chmod 755 "$dest"

if command -v git >/dev/null && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do
            # A tracked file deleted in the working tree is not copied.
            if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
        done |
        tar --null -T - -cf - | tar -xf - -C "$dest"
else
    tar --exclude=./build --exclude=./.portability --exclude=./.git \
        --exclude='*.pyc' --exclude=__pycache__ -cf - . | tar -xf - -C "$dest"
fi
