#!/usr/bin/env bash
# Fetch Debian packages by name and unpack them (dpkg-deb -x) under a cache folder.
# Nothing is installed system-wide. Usage: scripts/fetch-debs.sh DEST PKG[:ARCH][=VER] ...
# Each package is unpacked into DEST/<name>/ once; a stamp file makes reruns free.
set -euo pipefail
mkdir -p "$1"; dest=$(cd "$1" && pwd); shift
mkdir -p "$dest/debs"
need_update=0
for spec in "$@"; do
  name=${spec%%[:=]*}
  [ -f "$dest/$name/.unpacked" ] && continue
  if [[ $spec == *:armhf* ]] && ! dpkg --print-foreign-architectures | grep -qx armhf; then
    dpkg --add-architecture armhf 2>/dev/null || { echo "fetch-debs: cannot add armhf architecture (need root)" >&2; exit 3; }
    need_update=1
  fi
  if [ $need_update = 1 ] || ! apt-cache show "$spec" >/dev/null 2>&1; then
    apt-get update -qq >/dev/null 2>&1 || true
    need_update=0
  fi
  if ! (cd "$dest/debs" && apt-get download -q "$spec" >/dev/null 2>"$dest/debs/$name.err"); then
    echo "fetch-debs: could not download $spec: $(tail -1 "$dest/debs/$name.err")" >&2
    echo "fetch-debs: is the Debian package index reachable? (apt-get update)" >&2
    exit 2
  fi
  deb=$(ls -t "$dest/debs/${name}"_*.deb | head -1)
  rm -rf "$dest/$name"; mkdir -p "$dest/$name"
  dpkg-deb -x "$deb" "$dest/$name"
  touch "$dest/$name/.unpacked"
  echo "fetch-debs: $spec -> $dest/$name"
done
