#!/usr/bin/env bash
# bench_live.sh [MOED] [PAIRS] [NP]: what the whole profiler, live path included, costs in
# tokens/s. For two shapes (decode: ~0.5 ms steps on an idle machine; prefill:
# configs/experts.yaml's model and tokens per step) it runs PAIRS (default 5) rounds on NP
# ranks (default 2) pinned one per core (mpirun --bind-to core:overload-allowed), each
# round one run of every variant, the order alternating from round to round:
#   off   profiler.enabled false, no listen
#   prof  profiler.enabled true (its default window schedule), no listen
#   live  profiler.enabled true and profiler.listen 127.0.0.1:0, with /metrics and /status
#         scraped every SCRAPE_S seconds (default 5; Prometheus' default interval is 60 s,
#         15 s is common) during the run (SCRAPE=0: no client). The client is two curl
#         processes per scrape on the same cores as the ranks: at SCRAPE_S=0.5 they cost
#         this 2-core machine ~11% of tokens/s by themselves (SCRAPE=0 shows moed's part)
# Prints each round, then per shape the medians, the median of the per-round ratios
# prof/off and live/off (robust to drift between rounds), and the profiler's own
# accounting: the share of run time inside all its hooks and inside the live path's alone
# (the most of any rank, as moed prints them). SHAPES="decode": one shape only (decode8:
# ~7 ms steps, weight-bandwidth bound); STEPS=N:
# N steps per run (checking the script). Figures on a
# shared machine are noise: compare them only from an idle one. A benchmark, not a test.
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
    decode)  echo 128 256 32 2 8 20000 ;;   # ~0.5 ms steps: weights stay in cache
    decode8) echo 256 512 32 4 16 1500 ;;   # ~7 ms steps: 100 MB of weights read per step
    prefill) echo 1024 3584 2048 2 8 12 ;;
  esac
}
config() { # NAME off|prof|live
  read -r H F T L E S < <(shape "$1")
  S=${STEPS:-$S} # STEPS=N: every shape runs N steps (a quick check of the script itself)
  cat <<EOC
model: {hidden_dim: $H, ffn_dim: $F, num_experts: $E, top_k: 2, num_layers: $L, seed: 1}
placement: {experts: auto}
runtime: {routing: symmetric}
workload: {tokens_per_step: $T, steps: $S}
profiler:
  enabled: $([[ $2 == off ]] && echo false || echo true)
  output_dir: $work/experiments
EOC
  [[ $2 == live ]] && echo '  listen: "127.0.0.1:0"'
  true
}
# run FILE: tokens/s (and the profiler's shares "all/live" into $work/share) of one run;
# with listen, scrape the endpoint while it runs.
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
      sleep "${SCRAPE_S:-5}"
    done
  fi
  wait "$job" || { cat "$log" >&2; exit 1; }
  local all live
  all=$(sed -n 's/^profiler: \([0-9.]*\)%.*/\1/p' "$log")
  live=$(sed -n 's/^live: \([0-9.]*\)%.*/\1/p' "$log")
  echo "${all:-0}/${live:-0}" > "$work/share"
  sed -n 's/^tokens\/s: //p' "$log"
}
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {print a / b}'; }
for name in ${SHAPES:-decode prefill}; do
  for v in off prof live; do config "$name" "$v" > "$work/$v.yaml"; done
  declare -A tps=()
  r_prof=() r_live=() s_prof=() s_all=() s_live=()
  for ((i = 1; i <= pairs; i++)); do
    order="off prof live"
    ((i % 2 == 0)) && order="live prof off"
    for v in $order; do
      tps[$v,$i]=$(run "$work/$v.yaml")
      [[ $v == prof ]] && s_prof+=("$(cut -d/ -f1 "$work/share")")
      [[ $v == live ]] && { s_all+=("$(cut -d/ -f1 "$work/share")"); s_live+=("$(cut -d/ -f2 "$work/share")"); }
    done
    r_prof+=("$(ratio "${tps[prof,$i]}" "${tps[off,$i]}")")
    r_live+=("$(ratio "${tps[live,$i]}" "${tps[off,$i]}")")
    echo "$name round $i ($np ranks, $order): off ${tps[off,$i]}, prof ${tps[prof,$i]}, live ${tps[live,$i]} tokens/s; hooks prof ${s_prof[-1]} %, live run all/live ${s_all[-1]}/${s_live[-1]} %"
  done
  offs=() profs=() lives=()
  for ((i = 1; i <= pairs; i++)); do offs+=("${tps[off,$i]}"); profs+=("${tps[prof,$i]}"); lives+=("${tps[live,$i]}"); done
  awk -v n="$name" -v off="$(median "${offs[@]}")" -v pr="$(median "${profs[@]}")" \
      -v li="$(median "${lives[@]}")" -v rp="$(median "${r_prof[@]}")" -v rl="$(median "${r_live[@]}")" \
      -v sp="$(median "${s_prof[@]}")" -v sa="$(median "${s_all[@]}")" -v sl="$(median "${s_live[@]}")" 'BEGIN {
    printf "%s: median tokens/s off %.0f, prof %.0f, live %.0f; median per-round ratio prof/off %.4f (cost %.2f%%), live/off %.4f (cost %.2f%%)\n",
           n, off, pr, li, rp, 100 * (1 - rp), rl, 100 * (1 - rl)
    printf "%s: the profiler'"'"'s own accounting (median): prof run %.3f%% of run time in its hooks; live run %.3f%% in all hooks, %.3f%% in the live path'"'"'s\n",
           n, sp, sa, sl }'
  unset tps
done
