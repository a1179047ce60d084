#!/usr/bin/env bash
# Merge the unpacked Debian linux-headers-<rel>-armmp, linux-headers-<rel>-common and
# linux-kbuild-6.1 trees (from scripts/fetch-debs.sh) into one local root that mirrors the
# installed layout, so the relative scripts/ and tools/ symlinks resolve to the unpacked amd64
# kbuild host tools. Nothing is installed system-wide.
# Usage: sample_modules/mkktree.sh CACHE_DIR KREL   -> prints the kbuild dir (CACHE/ktree/usr/src/linux-headers-KREL)
set -euo pipefail
cache=$(cd "$1" && pwd); krel=$2
flavour=${krel##*-}; base=${krel%-*}          # 6.1.0-50 armmp
root=$cache/ktree
stamp=$root/.stamp-$krel
kdir=$root/usr/src/linux-headers-$krel
if [ ! -f "$stamp" ]; then
  rm -rf "$root"; mkdir -p "$root"
  for t in "linux-headers-$krel" "linux-headers-$base-common" "linux-kbuild-${base%%.0-*}"; do
    [ -d "$cache/$t/usr" ] || { echo "mkktree: $cache/$t missing (run scripts/fetch-debs.sh)" >&2; exit 2; }
    cp -a "$cache/$t/usr" "$root/"
  done
  touch "$stamp"
fi
# The flavour Makefile includes the common Makefile by absolute installed path: make it relative
# (make -C runs it from $kdir), so the tree works wherever the cache is, or is linked from.
sed -i "s#^include .*/linux-headers-$base-common/Makefile#include ../linux-headers-$base-common/Makefile#" "$kdir/Makefile"
echo "$kdir"
