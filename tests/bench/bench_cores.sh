#!/usr/bin/env bash
# bench_cores.sh [MOED] [CONFIG] [REPS] [BINDINGS]: which process binding serves the ranks
# best when they outnumber the cores (3 ranks on 2 cores for configs/experts.yaml).
# Runs CONFIG REPS times (default 5) for each binding with `moed --bench` (profiler off),
# the bindings taken in turn within each round, and prints every run's tokens/s and each rank's CPU share (process CPU time over wall time
# over the run: the cores it kept busy), then the median tokens/s, its spread (min-max as %
# of the median) and the median CPU share per rank and of the expert ranks together.
# BINDINGS: space-separated names from the table below (default: all). A benchmark, not a
# test: the figures depend on what else runs on the machine (its load is printed).
#   none      mpirun --oversubscribe --bind-to none                 (the kernel places ranks)
#   overload  mpirun --oversubscribe --bind-to core:overload-allowed (round robin over cores:
#             rank 0 and rank 2 share core 0, rank 1 has core 1)
#   mapcore   mpirun --oversubscribe --map-by core --bind-to core    (the same, asked for
#             without overload-allowed: Open MPI may refuse it)
#   self      mpirun --oversubscribe --bind-to none, moed pins itself (runtime.bind: core)
#   auto      mpirun --oversubscribe, runtime.bind left at its default (auto)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
moed=${1:-$here/build/moed}
config=${2:-$here/configs/experts.yaml}
reps=${3:-5}
bindings=${4:-none overload mapcore self auto}
np=${NP:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[[ -x $moed ]] || { echo "bench_cores.sh: $moed is not an executable" >&2; exit 2; }
[[ -r $config ]] || { echo "bench_cores.sh: cannot read $config" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The config as given, the profiler off (its report is not the point), runtime.bind set.
with_bind() {
  sed -E 's/^(  enabled:).*/\1 false/; /^  bind:/d' "$config" > "$work/$1.yaml"
  if [[ $1 != default ]]; then
    sed -i -E "s/^runtime:\$/runtime:\n  bind: $1/" "$work/$1.yaml"
  fi
}
with_bind none
with_bind core
with_bind default

flags_of() {
  case $1 in
    none) echo "--oversubscribe --bind-to none" ;;
    overload) echo "--oversubscribe --bind-to core:overload-allowed" ;;
    mapcore) echo "--oversubscribe --map-by core --bind-to core" ;;
    self) echo "--oversubscribe --bind-to none" ;;
    auto) echo "--oversubscribe" ;;
    *) return 1 ;;
  esac
}
config_of() {
  case $1 in
    self) echo "$work/core.yaml" ;;
    auto) echo "$work/default.yaml" ;;
    *) echo "$work/none.yaml" ;;
  esac
}

bf16=no
grep -qw avx512_bf16 /proc/cpuinfo && bf16=yes
echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, avx512_bf16 $bf16"
echo "mpirun: $(mpirun --version 2>&1 | head -1)"
echo "config: $config ($np ranks), $reps runs per binding; load average now: $(cut -d' ' -f1-3 /proc/loadavg)"

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# Round robin: run i of every binding, then run i+1, so drift in the machine's load (other
# jobs) hits every binding alike.
declare -A tps together share
for b in $bindings; do
  flags_of "$b" > /dev/null || { echo "bench_cores.sh: unknown binding '$b'" >&2; exit 2; }
  echo "$b: mpirun $(flags_of "$b") -np $np $moed --config $(config_of "$b") --no-progress --bench"
done
for ((i = 1; i <= reps; i++)); do
  echo
  echo "== round $i (load average $(cut -d' ' -f1 /proc/loadavg))"
  for b in $bindings; do
    # shellcheck disable=SC2086
    if ! mpirun $(flags_of "$b") -np "$np" "$moed" --config "$(config_of "$b")" --no-progress \
        --bench > "$work/out" 2>&1; then
      echo "  $b: failed: $(grep -v -e "^-*$" -e "^ *$" "$work/out" | head -2 | tr "\n" " ")"
      continue
    fi
    t=$(sed -n 's/^bench: tokens\/s  *\([0-9][0-9.]*\)$/\1/p' "$work/out")
    line=$(sed -n 's/^bench: CPU per rank, cores busy *//p' "$work/out")
    sum=$(sed -n 's/^bench: CPU, expert ranks together *\([0-9.]*\).*/\1/p' "$work/out")
    tps[$b]="${tps[$b]:-} $t"
    together[$b]="${together[$b]:-} $sum"
    for r in $(seq 0 $((np - 1))); do
      v=$(echo "$line" | grep -oE "rank $r [0-9.]+" | awk '{print $3}')
      share[$b.$r]="${share[$b.$r]:-} $v"
    done
    echo "  $b: $t tokens/s; cores busy: $line; expert ranks together $sum"
  done
done
echo
for b in $bindings; do
  if [[ -z ${tps[$b]:-} ]]; then
    echo "$b: no run completed"
    continue
  fi
  # shellcheck disable=SC2086
  set -- ${tps[$b]}
  n=$#
  m=$(median "$@")
  lo=$(printf '%s\n' "$@" | sort -g | head -1)
  hi=$(printf '%s\n' "$@" | sort -g | tail -1)
  ranks=""
  for r in $(seq 0 $((np - 1))); do
    # shellcheck disable=SC2086
    ranks+=" rank $r $(median ${share[$b.$r]})"
  done
  # shellcheck disable=SC2086
  tog=$(median ${together[$b]})
  awk -v b="$b" -v m="$m" -v lo="$lo" -v hi="$hi" -v n="$n" -v ranks="$ranks" -v tog="$tog" 'BEGIN {
    printf "%s: median tokens/s %.0f over %d runs (spread %.0f%% of it); median cores busy:%s; expert ranks together %.2f\n",
           b, m, n, (m > 0 ? 100 * (hi - lo) / m : 0), ranks, tog }'
done
