#!/usr/bin/env bash
# bench_live.sh [MOED] [PAIRS] [NP]: what the whole profiler, live path included, costs in
# tokens/s, for three shapes: decode (32 tokens, ~0.5-1 ms steps), decode8 (32 tokens,
# ~7 ms steps, bound by reading 100 MB of weights per step) and prefill
# (configs/experts.yaml's model and tokens per step), on NP ranks (default 2) pinned one per
# core (mpirun --bind-to core:overload-allowed). Two measurements per shape:
#
# 1. In one run (the precise one): the live variant below with `moed --profiler-ab K`:
#    blocks of K steps alternate with the profiler's and the live path's hooks on and off
#    (pairs on-off, off-on, ...), rank 0 times every block, and moed prints tokens/s on/off
#    as the median and mean of the pairs with a 95% interval. Neighbouring blocks of the
#    same process on the same cores: the run-to-run spread (+-20% at 1 ms steps on these
#    machines) is not in it. The profiler's threads (memory sampler; HTTP handlers and
#    window writers) run through both kinds of block, so the A/B does not see them: moed
#    counts their CPU time (`profiler threads: X% of run time`), and the script adds it:
#    cost = (1 - on/off) + threads' share, upper bound from the interval's low end.
# 2. Across runs (the plain one, noisy at small steps): PAIRS (default 3; 0 skips) rounds,
#    each one run of every variant, the order alternating from round to round:
#      off   profiler.enabled false, no listen
#      prof  profiler.enabled true (its default window schedule), no listen
#      live  profiler.enabled true and profiler.listen 127.0.0.1:0, with /metrics and
#            /status scraped every SCRAPE_S seconds (default 5; Prometheus' default
#            interval is 60 s, 15 s is common) during the run (SCRAPE=0: no client). The
#            client is two curl processes per scrape on the same cores as the ranks.
#    and prints the medians, the median per-round ratios prof/off and live/off, and the
#    profiler's own accounting (hooks; threads).
# SHAPES="decode decode8 prefill" (default) picks shapes; STEPS=N: N steps per run (checking
# the script). Figures on a shared machine are noise: compare them only from an idle one.
# A benchmark, not a test.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
moed=${1:-$here/build/moed}
pairs=${2:-3}
np=${3:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
MPIRUN=(mpirun --oversubscribe --bind-to core:overload-allowed -np "$np")

# shape NAME: H F TOKENS LAYERS EXPERTS STEPS AB_STEPS AB_K (the in-run A/B: steps, block)
shape() {
  case $1 in
    decode)  echo 128 256 32 2 8 20000 40000 20 ;; # ~0.5-1 ms steps: weights stay in cache
    decode8) echo 256 512 32 4 16 1500 6000 4 ;;   # ~7 ms steps: 100 MB of weights a step
    prefill) echo 1024 3584 2048 2 8 12 40 1 ;;
  esac
}
config() { # NAME off|prof|live|ab
  read -r H F T L E S AS _ < <(shape "$1")
  [[ $2 == ab ]] && S=$AS
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
  [[ $2 == live || $2 == ab ]] && echo '  listen: "127.0.0.1:0"'
  true
}
# run FILE [moed flags]: tokens/s (and the profiler's shares "hooks/live/threads" into
# $work/share) of one run; with listen, scrape the endpoint while it runs.
run() {
  local log=$work/run.log cfg=$1
  shift
  : > "$log"  # before the job: the loop below may read it before the job's redirection
  "${MPIRUN[@]}" "$moed" --config "$cfg" --no-progress "$@" > "$log" 2>&1 &
  local job=$! url=""
  if grep -q listen "$cfg" && [[ ${SCRAPE:-1} != 0 ]]; then
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
  local all live threads
  all=$(sed -n 's/^profiler: \([0-9.]*\)%.*/\1/p' "$log")
  live=$(sed -n 's/^live: \([0-9.]*\)%.*/\1/p' "$log")
  threads=$(sed -n 's/^profiler threads: \([0-9.]*\)%.*/\1/p' "$log")
  echo "${all:-0}/${live:-0}/${threads:-0}" > "$work/share"
  sed -n 's/^tokens\/s: //p' "$log"
}
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {print a / b}'; }
bf16=no
grep -qw avx512_bf16 /proc/cpuinfo && bf16=yes
echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, avx512_bf16 $bf16"
for name in ${SHAPES:-decode decode8 prefill}; do
  for v in off prof live ab; do config "$name" "$v" > "$work/$v.yaml"; done
  read -r _ _ _ _ _ _ _ K < <(shape "$name")
  echo "$name, in one run: ${MPIRUN[*]} moed --config <live config> --profiler-ab $K"
  tok=$(run "$work/ab.yaml" --profiler-ab "$K")
  sed -n 's/^profiler A\/B: /  /p' "$work/run.log"
  IFS=/ read -r hooks _ threads < "$work/share"
  sed -n 's/^profiler A\/B: tokens\/s on\/off \([0-9.]*\) (median of pairs; mean \([0-9.]*\), 95% interval \([0-9.]*\)-\([0-9.]*\).*/\1 \2 \3 \4/p' \
    "$work/run.log" | awk -v n="$name" -v h="$hooks" -v th="$threads" -v t="$tok" '{
    printf "%s: %.0f tokens/s over the run; hooks on/off %.4f (median), mean %.4f [%.4f, %.4f]; hooks %.3f%% and threads %.3f%% of run time (own accounting)\n", n, t, $1, $2, $3, $4, h, th
    printf "%s: cost = (1 - mean) + threads = %.2f%% (upper bound, interval low end: %.2f%%)\n", n, 100 * (1 - $2) + th, 100 * (1 - $3) + th }'
  ((pairs > 0)) || continue
  declare -A tps=()
  r_prof=() r_live=() s_prof=() s_all=() s_live=() s_thr=()
  for ((i = 1; i <= pairs; i++)); do
    order="off prof live"
    ((i % 2 == 0)) && order="live prof off"
    for v in $order; do
      tps[$v,$i]=$(run "$work/$v.yaml")
      [[ $v == prof ]] && { s_prof+=("$(cut -d/ -f1 "$work/share")"); s_thr+=("$(cut -d/ -f3 "$work/share")"); }
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
      -v sp="$(median "${s_prof[@]}")" -v sa="$(median "${s_all[@]}")" -v sl="$(median "${s_live[@]}")" \
      -v st="$(median "${s_thr[@]}")" 'BEGIN {
    printf "%s: median tokens/s off %.0f, prof %.0f, live %.0f; median per-round ratio prof/off %.4f (cost %.2f%%), live/off %.4f (cost %.2f%%)\n",
           n, off, pr, li, rp, 100 * (1 - rp), rl, 100 * (1 - rl)
    printf "%s: the profiler'"'"'s own accounting (median): prof run %.3f%% of run time in its hooks, %.3f%% in its threads; live run %.3f%% in all hooks, %.3f%% in the live path'"'"'s\n",
           n, sp, st, sa, sl }'
  unset tps
done
