#!/usr/bin/env bash
# parts.sh [ROOT]: the parts of runtime/src and profiler/src include only what they say.
# Exactly one source file of each part's folder opens with "/* Part NAME (...): ... May
# include: A B C (...)": this check reads that list and fails, naming file:line, on any
# `#include "PART/..."` of a sibling part that is not in it, and on a folder with no such
# comment or more than one. proto/ may include only the base headers (moe/...) and the
# layouts under proto/include (moe_proto/...). Each include root publishes one namespace
# (moe/ base, moe_config/, moe_model/, moe_proto/, moe_prof/) and the base and config
# floors include nothing above them.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
bad=0
for top in runtime/src profiler/src; do
  for dir in "$root/$top"/*/; do
    part=$(basename "$dir")
    # the one file of the folder that opens with the part's comment
    heads=()
    while IFS= read -r f; do
      [[ -n "$f" ]] || continue
      if awk 'NR==1{exit !/^\/\* Part /}' "$dir/$f"; then heads+=("$f"); fi
    done < <(find "$dir" -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) \
               -printf '%f\n' | LC_ALL=C sort)
    if [[ ${#heads[@]} -ne 1 ]]; then
      echo "$top/$part/: ${#heads[@]} files open with a /* Part ... */ comment (want exactly one: what part '$part' does and what it may include)"
      bad=1
      continue
    fi
    head_text=$(awk '/\*\//{print; exit} {print}' "$dir/${heads[0]}" | tr '\n' ' ' | tr -s ' ')
    if [[ "$head_text" != "/* Part $part "* ]]; then
      echo "$top/$part/${heads[0]}:1: the part comment names another part (want /* Part $part ...)"
      bad=1
      continue
    fi
    allowed=$(sed -nE 's/.*May include: ([^.(]*).*/\1/p' <<< "$head_text")
    [[ "$allowed" == "no other part"* ]] && allowed=""
    siblings=$(find "$root/$top" -mindepth 1 -maxdepth 1 -type d -printf '%f\n')
    while IFS= read -r hit; do
      [[ -n "$hit" ]] || continue
      file=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}
      inc=$(sed -nE 's/.*#include "([a-z_]+)\/.*/\1/p' <<< "$hit")
      [[ "$inc" == "$part" ]] && continue
      grep -qx "$inc" <<< "$siblings" || continue
      if ! grep -qw -- "$inc" <<< "$allowed"; then
        echo "${file#"$root"/}:$line: part '$part' includes part '$inc' (allowed: ${allowed:-none})"
        bad=1
      fi
    done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include "[a-z_]+/' "$dir" || true)
  done
done
# proto/: layouts only, on the base layer
while IFS= read -r hit; do
  [[ -n "$hit" ]] || continue
  inc=$(sed -nE 's/.*#include "([^"]+)".*/\1/p' <<< "$hit")
  case "$inc" in
    moe/status.h|moe/hash.h|moe/limits.h|moe/phase.h|moe/clock.h) ;;
    moe_proto/*) [[ -f "$root/proto/include/$inc" ]] || { hit=${hit#"$root"/}; echo "${hit%:*}: proto includes $inc (no such proto header)"; bad=1; } ;;
    moe/*) hit=${hit#"$root"/}; echo "${hit%:*}: proto includes $inc (not a base header proto may use)"; bad=1 ;;
    *) echo "${hit#"$root"/}: proto includes $inc"; bad=1 ;;
  esac
done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include "' "$root/proto" || true)
# Each include root publishes one namespace, so an #include says which part it comes from:
# moe/ the base layer, moe_config/ the config, moe_model/ the model's reader, moe_proto/ the
# byte layouts, moe_prof/ the profiler's calls.
for pair in "runtime/include:moe" "runtime/src/config/include:moe_config" \
            "runtime/src/model/include:moe_model" "proto/include:moe_proto" \
            "profiler/include:moe_prof"; do
  dir=$root/${pair%%:*} want=${pair##*:}
  for sub in "$dir"/*; do
    [[ -e "$sub" ]] || continue
    [[ "$(basename "$sub")" == "$want" ]] || { echo "${pair%%:*}/$(basename "$sub"): the include root ${pair%%:*} publishes only $want/"; bad=1; }
  done
done
# The floors do not reach up: base includes only moe/ headers, config only moe/ and
# moe_config/ (and its own folder's).
while IFS= read -r hit; do
  [[ -n "$hit" ]] || continue
  echo "${hit#"$root"/}: the base layer includes a header above it"; bad=1
done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include "moe_(config|model|proto|prof)/' \
           "$root/runtime/src/base" "$root/runtime/include" || true)
while IFS= read -r hit; do
  [[ -n "$hit" ]] || continue
  echo "${hit#"$root"/}: the config part includes a header above it"; bad=1
done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include "moe_(model|proto|prof)/' \
           "$root/runtime/src/config" || true)
if [[ $bad -ne 0 ]]; then
  echo "FAIL: a part comment is missing or a part includes what its comment does not allow" >&2
  exit 1
fi
echo "OK: every part includes only the parts its part comment names"
