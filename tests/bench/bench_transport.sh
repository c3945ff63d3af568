#!/usr/bin/env bash
# bench_transport.sh [MOED] [NP]: the token exchange of each transport for a range of
# tokens x hidden sizes, against memcpy of the same payload, measured by `moed --bench`
# (dispatch + combine replayed between barriers; bytes = one row per (token, chosen
# expert) pair each way, as DeepEP reports). The FFN is kept tiny (ffn 64, 1 layer,
# 3 steps): only the exchange is of interest. A benchmark, not a test.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
moed=${1:-$here/build/moed}
np=${2:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '%-8s %-7s %-9s %12s %12s %10s\n' tokens hidden transport "exchange GB/s" "memcpy GB/s" "x slower"
for shape in "256 1024" "2048 1024" "2048 4096" "8192 4096"; do
  read -r tokens hidden <<< "$shape"
  for variant in alltoallv mpi ucx; do
    # alltoallv: the MPI transport with one MPI_Ialltoallv instead of per-peer messages,
    # the baseline no transport should fall below
    transport=${variant/alltoallv/mpi}
    env_args=()
    [[ $variant == alltoallv ]] && env_args=(-x MOED_MPI_EXCHANGE=alltoallv)
    cat > "$work/c.yaml" <<EOC
model: {hidden_dim: $hidden, ffn_dim: 64, num_experts: 8, top_k: 2, num_layers: 1}
placement: {experts: auto}
runtime: {routing: symmetric, transport: $transport}
workload: {tokens_per_step: $tokens, steps: 3}
profiler: {enabled: false}
EOC
    out=$(mpirun --oversubscribe -np "$np" "${env_args[@]}" "$moed" --config "$work/c.yaml" \
            --bench --no-progress 2>&1) \
      || { echo "$variant $shape: run failed"; echo "$out" | tail -3; continue; }
    ex=$(sed -n 's/^bench: dispatch+combine GB\/s (replay) *\([0-9.]*\).*/\1/p' <<< "$out")
    mc=$(sed -n 's/^bench: memcpy GB\/s, same payload *\([0-9.]*\).*/\1/p' <<< "$out")
    printf '%-8s %-7s %-9s %12s %12s %10s\n' "$tokens" "$hidden" "$variant" "$ex" "$mc" \
      "$(awk -v e="$ex" -v m="$mc" 'BEGIN { if (e > 0) printf "%.2f", m / e; else print "-" }')"
  done
done
