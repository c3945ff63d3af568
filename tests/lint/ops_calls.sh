#!/usr/bin/env bash
# ops_calls.sh [ROOT]: back-ends are called through wrappers (STYLE.md item 17). Fails,
# naming file:line, on each line of runtime/src, profiler/src and proto/src that reaches
# into a back-end's table (`->ops->` or `.ops->`) outside
#   - the wrappers' files: runtime/src/expert/backend.c (moe_expert_backend_*) and
#     runtime/src/transport/transport.c (moe_transport_*)
#   - the back-ends' own files: runtime/src/expert/backend_cpu.c, runtime/src/expert/cuda/,
#     runtime/src/transport/{common,mpi,ucx,nccl}.c
# Everyone else calls moe_expert_backend_gate(be, ...), moe_transport_start(t, ...), ...
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
dirs=()
for d in runtime/src profiler/src proto/src; do
  [[ -d "$root/$d" ]] && dirs+=("$root/$d")
done
[[ ${#dirs[@]} -gt 0 ]] || { echo "FAIL: no source folders under $root" >&2; exit 1; }

allowed='^runtime/src/(expert/backend\.c|transport/transport\.c|expert/backend_cpu\.c|expert/cuda/[^:]+|transport/(common|mpi|ucx|nccl)\.c):'
found=$(grep -rnE --include='*.c' --include='*.h' --include='*.cu' --include='*.cpp' \
          '(->|\.)[[:space:]]*ops[[:space:]]*->' "${dirs[@]}" \
        | sed "s|^$root/||" | grep -vE "$allowed" || true)
if [[ -n "$found" ]]; then
  n=$(printf '%s\n' "$found" | wc -l)
  printf '%s\n' "$found" | sed 's|^\([^:]*:[0-9]*\):[[:space:]]*|\1: |'
  echo "FAIL: $n call(s) into a back-end's ops table outside its wrappers: use" \
       "moe_expert_backend_* (expert/backend.h) or moe_transport_* (transport/transport.h)" >&2
  exit 1
fi
echo "OK: back-ends' ops tables are reached only through their wrappers"
