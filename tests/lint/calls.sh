#!/usr/bin/env bash
# calls.sh ROOT BUILD: parts.sh for calls. It reads the built objects of runtime/src,
# profiler/src and proto/src under BUILD (nm: what each file defines and what it leaves
# undefined) and fails, naming a function or variable that crosses, on
#   part A -> B      a part that calls (or reads) what a sibling part defines when B is not
#                    in A's "May include:" list (the part comment parts.sh reads); across the
#                    top folders: proto/ reaches only runtime/base; profiler/ only
#                    runtime/base, runtime/config and proto/; runtime/base and runtime/config
#                    nothing outside runtime/, the other runtime parts also profiler/ and
#                    proto/ (their public headers)
#   loop A <-> B     two files of one folder that call each other
#   cycle DIR: ...   a longer loop among the files of one folder
# Each finding prints as one key line; a key listed in tests/lint/calls_allowed.txt (a
# known seam, with its reason) is let through, and a listed key that no longer turns up
# fails too, so that the list only shrinks as seams are fixed.
set -euo pipefail
root=${1:?usage: calls.sh ROOT BUILD}
build=${2:?usage: calls.sh ROOT BUILD}
allow_file="$root/tests/lint/calls_allowed.txt"
command -v nm >/dev/null || { echo "FAIL: nm not found (binutils)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- each object as its source path: runtime/src/layer/plan.c ------------------------
n=0
while IFS= read -r o; do
  src=$(sed -nE 's#^.*/(runtime|profiler|proto)/CMakeFiles/[^/]+\.dir/src/(.+)\.o$#\1/src/\2#p' \
          <<< "$o")
  [[ -n "$src" ]] || continue
  [[ -f "$root/$src" ]] || continue # left in the build folder by a file since moved
  nm -g --defined-only "$o" | awk -v f="$src" 'NF == 3 { print $3, f }' >> "$tmp/def"
  nm -u "$o" | awk -v f="$src" '{ print f, $NF }' >> "$tmp/use"
  n=$((n + 1))
done < <(find "$build" -type f -name '*.o' -path '*/CMakeFiles/*.dir/src/*' | LC_ALL=C sort)
if [[ $n -lt 10 ]]; then
  echo "FAIL: $n objects of runtime/, profiler/, proto/ under $build: build the tree first" >&2
  exit 1
fi
# caller callee symbol, one line per file pair (the first symbol, by name)
awk 'NR == FNR { def[$1] = $2; next }
     ($2 in def) && def[$2] != $1 { print $1, def[$2], $2 }' "$tmp/def" "$tmp/use" |
  LC_ALL=C sort -k1,1 -k2,2 -k3,3 | awk '$1" "$2 != last { print; last = $1" "$2 }' > "$tmp/edges"

# ---- the parts' lists -------------------------------------------------------------------
# "top/part allowed..." from each part comment (as parts.sh reads it)
for top in runtime/src profiler/src; do
  for dir in "$root/$top"/*/; do
    part=$(basename "$dir")
    head=$(grep -l '^/\* Part ' "$dir"*.c "$dir"*.h 2>/dev/null | head -n 1 || true)
    [[ -n "$head" ]] || continue # parts.sh fails on that
    allowed=$(awk '/\*\//{print; exit} {print}' "$head" | tr '\n' ' ' | tr -s ' ' |
              sed -nE 's/.*May include: ([^.(]*).*/\1/p' | tr -d '*')
    [[ "$allowed" == *"no other part"* ]] && allowed=""
    echo "${top%/src}/$part $allowed"
  done
done > "$tmp/lists"

part_of() { # runtime/src/layer/plan.c -> runtime/layer; proto/src/wire.c -> proto
  local top=${1%%/*} rest=${1#*/src/}
  if [[ "$top" == proto ]]; then echo proto; else echo "$top/${rest%%/*}"; fi
}

may_call() { # may part $1 call part $2?
  local a=$1 b=$2 atop=${1%%/*} btop=${2%%/*}
  [[ "$a" == "$b" ]] && return 0
  if [[ "$atop" == "$btop" ]]; then
    [[ "$atop" == proto ]] && return 0
    grep -q -- "^$a .*\b${b#*/}\b" "$tmp/lists"
    return
  fi
  case "$atop:$b" in
    proto:runtime/base) return 0 ;;
    profiler:runtime/base | profiler:runtime/config | profiler:proto) return 0 ;;
    runtime:*) [[ "$a" != runtime/base && "$a" != runtime/config ]]; return ;;
  esac
  return 1
}

# ---- findings -------------------------------------------------------------------------
: > "$tmp/found"
declare -A said=()
while read -r from to sym; do
  pa=$(part_of "$from"); pb=$(part_of "$to")
  if [[ "$pa" != "$pb" ]] && ! may_call "$pa" "$pb"; then
    key="part $pa -> $pb"
    if [[ -z "${said[$key]:-}" ]]; then
      said[$key]=1
      printf '%s\t%s calls %s (%s)\n' "$key" "$from" "$sym" "$to" >> "$tmp/found"
    fi
  fi
done < "$tmp/edges"
# loops between two files of one folder
awk '{ split($1, a, "/"); split($2, b, "/"); da = $1; db = $2
       sub(/\/[^\/]*$/, "", da); sub(/\/[^\/]*$/, "", db)
       if (da == db) print $1, $2, $3 }' "$tmp/edges" > "$tmp/local"
awk 'NR == FNR { e[$1" "$2] = $3; next }
     ($2" "$1) in e && $1 < $2 { printf "loop %s <-> %s\t%s calls %s, %s calls %s\n",
                                 $1, $2, $1, $3, $2, e[$2" "$1] }' \
  "$tmp/local" "$tmp/local" >> "$tmp/found"
# longer loops: what tsort cannot order once the two-file loops are set aside
awk 'NR == FNR { e[$1" "$2] = 1; next } !(($2" "$1) in e) { print $1, $2 }' \
  "$tmp/local" "$tmp/local" > "$tmp/dag"
for dir in $(awk '{ d = $1; sub(/\/[^\/]*$/, "", d); print d }' "$tmp/dag" | LC_ALL=C sort -u); do
  grep "^$dir/[^/ ]* $dir/" "$tmp/dag" | tsort > /dev/null 2> "$tmp/tsort" || true
  members=$(sed -nE 's/^tsort: ([^ ]+)$/\1/p' "$tmp/tsort" | LC_ALL=C sort -u | tr '\n' ' ')
  [[ -z "$members" ]] || printf 'cycle %s: %s\tthese files call one another round\n' \
    "$dir" "${members% }" >> "$tmp/found"
done

# ---- the allow-list ----------------------------------------------------------------------
bad=0
sed -E 's/[[:space:]]*#.*$//; /^[[:space:]]*$/d' "$allow_file" 2>/dev/null > "$tmp/allowed" || true
while IFS=$'\t' read -r key why; do
  if grep -qxF -- "$key" "$tmp/allowed"; then
    echo "allowed: $key ($why)"
  else
    echo "$key: $why"
    bad=1
  fi
done < <(LC_ALL=C sort "$tmp/found")
while IFS= read -r key; do
  if ! cut -f1 "$tmp/found" | grep -qxF -- "$key"; then
    echo "$key: listed in tests/lint/calls_allowed.txt but no longer found: remove the line"
    bad=1
  fi
done < "$tmp/allowed"
if [[ $bad -ne 0 ]]; then
  echo "FAIL: a part calls a part its comment does not allow, or files of one folder call" \
       "each other in a loop" >&2
  exit 1
fi
echo "OK: $n objects; every call stays within the parts each part comment names, no call" \
     "loops in a folder"
