#!/usr/bin/env bash
# bench_live.sh [MOED] [PAIRS] [NP]: what the whole profiler, live path included, costs in
# tokens/s. For two shapes (decode: ~1 ms steps; prefill: configs/experts.yaml's shape)
# it runs PAIRS (default 5) interleaved pairs on NP ranks (default 2) pinned one per core
# (mpirun --bind-to core:overload-allowed): profiling off (profiler.enabled false, no
# listen) and on (profiler.enabled true with its default window schedule,
# profiler.listen 127.0.0.1:0, and /metrics plus /status scraped every 0.5 s during the
# run). Prints each pair, the medians and their ratio, and the profiler's own accounting:
# the share of run time inside all its hooks and inside the live path's alone (the most of
# any rank). SCRAPE=0: no client during the on runs; SHAPES="decode": one shape only.
# A benchmark, not a test.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
moed=${1:-$here/build/moed}
pairs=${2:-5}
np=${3:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
MPIRUN=(mpirun --oversubscribe --bind-to core:overload-allowed -np "$np")

# shape NAME: H F TOKENS LAYERS EXPERTS STEPS
shape() {
  case $1 in
    decode)  echo 256 512 32 4 16 1500 ;;
    prefill) echo 1024 3584 2048 2 8 12 ;;
  esac
}
config() { # NAME on|off
  read -r H F T L E S < <(shape "$1")
  cat <<EOC
model: {hidden_dim: $H, ffn_dim: $F, num_experts: $E, top_k: 2, num_layers: $L, seed: 1}
placement: {experts: auto}
runtime: {routing: symmetric}
workload: {tokens_per_step: $T, steps: $S}
profiler:
  enabled: $([[ $2 == on ]] && echo true || echo false)
  output_dir: $work/experiments
EOC
  [[ $2 == on ]] && echo '  listen: "127.0.0.1:0"'
  true
}
# run FILE: tokens/s (and the profiler's share into $work/share) of one run; when on,
# scrape the endpoint while it runs.
run() {
  local log=$work/run.log
  "${MPIRUN[@]}" "$moed" --config "$1" --no-progress > "$log" 2>&1 &
  local job=$! url=""
  if grep -q listen "$1" && [[ ${SCRAPE:-1} != 0 ]]; then
    while kill -0 "$job" 2>/dev/null; do
      url=${url:-$(sed -nE 's/.*live: (http:[^ ]+).*/\1/p' "$log" | head -1)}
      if [[ -n "$url" ]]; then
        curl -s -m 2 -o /dev/null "${url}metrics" || true
        curl -s -m 2 -o /dev/null "${url}status" || true
      fi
      sleep 0.5
    done
  fi
  wait "$job" || { cat "$log" >&2; exit 1; }
  { sed -n 's/^profiler: \([0-9.]*\)%.*/\1/p' "$log"; sed -n 's/^live: \([0-9.]*\)%.*/\1/p' "$log"; } \
    | paste -sd/ > "$work/share"
  sed -n 's/^tokens\/s: //p' "$log"
}
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
for name in ${SHAPES:-decode prefill}; do
  config "$name" off > "$work/off.yaml"
  config "$name" on > "$work/on.yaml"
  on=() off=() share=()
  for ((i = 1; i <= pairs; i++)); do
    off+=("$(run "$work/off.yaml")")
    on+=("$(run "$work/on.yaml")")
    share+=("$(cat "$work/share")")
    echo "$name pair $i ($np ranks): off ${off[-1]} tokens/s, on ${on[-1]} tokens/s (hooks all/live ${share[-1]} %)"
  done
  ratios=()
  for ((i = 0; i < pairs; i++)); do ratios+=("$(awk -v a="${on[i]}" -v b="${off[i]}" 'BEGIN {print a / b}')"); done
  echo "$name: median of the per-pair on/off ratios $(median "${ratios[@]}") (robust to drift between pairs)"
  m_off=$(median "${off[@]}") m_on=$(median "${on[@]}")
  m_all=$(median "${share[@]%/*}") m_live=$(median "${share[@]#*/}")
  awk -v n="$name" -v on="$m_on" -v off="$m_off" -v a="$m_all" -v l="$m_live" 'BEGIN {
    printf "%s: median tokens/s off %.0f, on %.0f; on/off = %.4f (cost %.2f%%); hooks: profiler %.3f%%, live %.3f%% of run time\n",
           n, off, on, on / off, 100 * (1 - on / off), a, l }'
done
