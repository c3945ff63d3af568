#!/usr/bin/env bash
# bench_overlap.sh [MOED] [NP] [REPS]: what runtime.chunks buys. For each job and chunk
# count, tokens/s (median of REPS runs, chunk counts interleaved so drift hits all alike),
# its ratio to chunks 1 in the same sweep, and the profiler's share of exchange time
# hidden behind expert compute (summary.json, mean over profiled ranks weighted by time).
#   default   the shipped job (configs/experts.yaml): compute-bound on a CPU
#   exchange  hidden 4096, ffn 64, 4096 tokens: as many bytes per FLOP as a CPU can make,
#             so that the exchange is a large part of the step
# A benchmark, not a test: no figure is asserted.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
moed=${1:-$here/build/moed}
np=${2:-3}
reps=${3:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

job_yaml() { # job_yaml JOB CHUNKS
  if [[ $1 == default ]]; then
    sed -e "s/^runtime:/runtime:\n  chunks: $2/" -e "s|^  output_dir: .*|  output_dir: $work/out|" \
      "$here/configs/experts.yaml"
  else
    cat <<EOC
model: {hidden_dim: 4096, ffn_dim: 64, num_experts: 8, top_k: 2, num_layers: 2}
placement: {master_rank: 0, experts: {1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}}
runtime: {routing: master, chunks: $2}
workload: {tokens_per_step: 4096, steps: 12}
profiler: {enabled: true, warmup_steps: 2, measurement_steps: 10, output_dir: $work/out}
EOC
  fi
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

hidden_share() { # the run-level share from the newest report
  local s; s=$(ls -td "$work"/out/*/ | head -1)/summary.json
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.1f%%" % (100 * d["run"]["exchange_hidden_share"]))' "$s"
}

printf '%-9s %-6s %10s %10s %14s\n' job chunks tokens/s "vs 1" "hidden share"
for job in default exchange; do
  declare -A tps=() hid=()
  for ((r = 0; r < reps; r++)); do
    for c in 1 2 4 8; do
      job_yaml "$job" "$c" > "$work/c.yaml"
      out=$(mpirun --oversubscribe -np "$np" "$moed" --config "$work/c.yaml" --no-progress 2>&1) \
        || { echo "$job chunks $c: run failed"; echo "$out" | tail -3; exit 1; }
      tps[$c]+="$(sed -n 's/^tokens\/s: \([0-9]*\).*/\1/p' <<< "$out") "
      hid[$c]=$(hidden_share)
    done
  done
  base=$(tr ' ' '\n' <<< "${tps[1]}" | grep . | median)
  for c in 1 2 4 8; do
    m=$(tr ' ' '\n' <<< "${tps[$c]}" | grep . | median)
    printf '%-9s %-6s %10s %10s %14s\n' "$job" "$c" "$m" \
      "$(awk -v a="$m" -v b="$base" 'BEGIN { printf "%.3f", a / b }')" "${hid[$c]}"
  done
  unset tps hid
done
