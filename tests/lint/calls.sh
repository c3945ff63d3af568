#!/usr/bin/env bash
# calls.sh ROOT BUILD: parts.sh for calls. It reads the built objects of runtime/src,
# profiler/src and proto/src under BUILD (nm: what each file defines and what it leaves
# undefined) and fails, naming a function or variable that crosses, on
#   part A -> B      a part that calls (or reads) what a sibling part defines when B is not
#                    in A's "May include:" list (the part comment parts.sh reads); across the
#                    top folders: proto/ reaches only runtime/base; profiler/ only
#                    runtime/base, runtime/config, proto/ and runtime/model (for its file
#                    formats: moe_model/safetensors.h, moe_model/routing_trace.h: the
#                    routing traces the profiler records and the planner reads);
#                    runtime/base and runtime/config
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

# ---- findings -------------------------------------------------------------------------
# part of a file: runtime/src/layer/plan.c -> runtime/layer; proto/src/wire.c -> proto
awk 'function part(f,   p) { split(f, p, "/"); return p[1] == "proto" ? "proto" : p[1] "/" p[3] }
     function top(q) { sub(/\/.*/, "", q); return q }
     function may(a, b,   n, i, w) { # may part a call part b?
       if (a == b) return 1
       if (top(a) == top(b)) {
         if (top(a) == "proto") return 1
         n = split(list[a], w, " ")
         for (i = 1; i <= n; i++) if (top(a) "/" w[i] == b) return 1
         return 0
       }
       if (top(a) == "proto") return b == "runtime/base"
       if (top(a) == "profiler")
         return b == "runtime/base" || b == "runtime/config" || b == "proto" ||
                b == "runtime/model"
       return a != "runtime/base" && a != "runtime/config" # runtime -> profiler, proto
     }
     NR == FNR { p = $1; $1 = ""; list[p] = $0; next }
     { a = part($1); b = part($2); key = "part " a " -> " b
       if (!may(a, b) && !(key in said)) {
         said[key] = 1
         printf "%s\t%s calls %s (%s)\n", key, $1, $3, $2
       } }' "$tmp/lists" "$tmp/edges" > "$tmp/found"
# loops between two files of one folder
awk '{ da = $1; db = $2
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
