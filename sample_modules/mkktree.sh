#!/usr/bin/env bash
# Merge the unpacked Debian linux-headers-<rel>, the common headers tree its Makefile includes and
# the linux-kbuild tree its scripts/ link reaches (from scripts/fetch-debs.sh) into one local root
# that mirrors the installed layout, so the relative scripts/ and tools/ symlinks resolve to the
# unpacked amd64 kbuild host tools. Nothing is installed system-wide. The two other trees are read
# from the flavour tree itself: 6.1.0-50-armmp includes linux-headers-6.1.0-50-common and links
# linux-kbuild-6.1; 6.1.0-50-rt-armmp includes linux-headers-6.1.0-50-common-rt; 6.12.107+deb12-armmp
# includes linux-headers-6.12.107+deb12-common and links linux-kbuild-6.12.107+deb12.
# Usage: sample_modules/mkktree.sh CACHE_DIR KREL [ROOT]   (ROOT: default CACHE_DIR/ktree)
#   -> prints the kbuild dir (ROOT/usr/src/linux-headers-KREL)
set -euo pipefail
cache=$(cd "$1" && pwd); krel=$2
root=${3:-$cache/ktree}
hdr=$cache/linux-headers-$krel/usr/src/linux-headers-$krel
[ -f "$hdr/Makefile" ] || { echo "mkktree: $hdr/Makefile missing (run scripts/fetch-debs.sh)" >&2; exit 2; }
common=$(sed -n 's#^include /usr/src/\(linux-headers-[^/]*\)/Makefile$#\1#p' "$hdr/Makefile")
kbuild=$(readlink "$hdr/scripts" | sed -n 's#^\.\./\.\./lib/\(linux-kbuild-[^/]*\)/scripts$#\1#p')
[ -n "$common" ] && [ -n "$kbuild" ] || { echo "mkktree: $hdr names no common tree or kbuild" >&2; exit 2; }
stamp=$root/.stamp-$krel
kdir=$root/usr/src/linux-headers-$krel
if [ ! -f "$stamp" ]; then
  rm -rf "$root"; mkdir -p "$root"
  for t in "linux-headers-$krel" "$common" "$kbuild"; do
    [ -d "$cache/$t/usr" ] || { echo "mkktree: $cache/$t missing (run scripts/fetch-debs.sh)" >&2; exit 2; }
    cp -a "$cache/$t/usr" "$root/"
  done
  touch "$stamp"
fi
# The flavour Makefile includes the common Makefile by absolute installed path: make it relative
# (make -C runs it from $kdir), so the tree works wherever the cache is, or is linked from.
sed -i "s#^include .*/$common/Makefile#include ../$common/Makefile#" "$kdir/Makefile"
echo "$kdir"
