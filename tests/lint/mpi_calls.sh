#!/usr/bin/env bash
# mpi_calls.sh [ROOT]: every MPI result is looked at. Fails, naming file:line, on each line
# of runtime/src, profiler/src and proto/src whose first token is an MPI call (its result
# dropped), bare or cast to void. Such calls go through MOE_MPI(call, err) from
# moe/mpi_check.h; only teardown (MPI_Abort, MPI_Finalize) may stay bare.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
dirs=()
for d in runtime/src profiler/src proto/src; do
  [[ -d "$root/$d" ]] && dirs+=("$root/$d")
done
[[ ${#dirs[@]} -gt 0 ]] || { echo "FAIL: no source folders under $root" >&2; exit 1; }

# A statement starting with the call, or with (void) and the call, any spacing.
found=$(grep -rnE --include='*.c' --include='*.h' --include='*.cu' --include='*.cpp' \
          '^[[:space:]]*(\([[:space:]]*void[[:space:]]*\)[[:space:]]*)?MPI_[A-Za-z_]+[[:space:]]*\(' \
          "${dirs[@]}" \
        | grep -vE ':[0-9]+:[[:space:]]*(\([[:space:]]*void[[:space:]]*\)[[:space:]]*)?MPI_(Abort|Finalize)[[:space:]]*\(' \
        || true)
if [[ -n "$found" ]]; then
  n=$(printf '%s\n' "$found" | wc -l)
  printf '%s\n' "$found" | sed "s|^$root/||; s|^\([^:]*:[0-9]*\):[[:space:]]*|\1: |"
  echo "FAIL: $n MPI call(s) whose result is dropped: wrap them in MOE_MPI(call, err)" >&2
  exit 1
fi
echo "OK: every MPI call outside teardown (MPI_Abort, MPI_Finalize) is checked"
