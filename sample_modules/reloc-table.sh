#!/bin/sh
# Print a markdown table row per ELF file: | file | size | relocation types with counts (readelf -rW) |
# Usage: sample_modules/reloc-table.sh FILE...   (CROSS defaults to arm-linux-gnueabihf-)
CROSS=${CROSS:-arm-linux-gnueabihf-}
for f in "$@"; do
  types=$(${CROSS}readelf -rW "$f" | awk '/^[0-9a-f]+ +[0-9a-f]+ +R_ARM_/{print $3}' | sort | uniq -c |
          awk '{sub(/^R_ARM_/, "", $2); printf "%s%s×%s", sep, $2, $1; sep=", "}')
  printf '| `%s` | %s | %s |\n' "$(basename "$f")" "$(stat -c %s "$f")" "$types"
done
