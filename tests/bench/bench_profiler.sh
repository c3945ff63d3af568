#!/usr/bin/env bash
# bench_profiler.sh [MOED] [CONFIG] [PAIRS] [NP]: the profiler's cost in tokens/s.
# Runs CONFIG (default configs/experts.yaml) on NP ranks (default 2) PAIRS times (default
# 5) with profiler.enabled true and false, interleaved so drift in the machine hits both
# alike, and prints the median tokens/s of each and their ratio. A benchmark, not a test.
# With NP other than 3 the config's placement becomes `auto` and routing `symmetric`: on
# a 2-core machine, 2 ranks (one per core) measure a 1% effect; 3 oversubscribed ranks
# vary by ~8% from run to run.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
moed=${1:-$here/build/moed}
config=${2:-$here/configs/experts.yaml}
pairs=${3:-5}
np=${4:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Same config text but the switch (and reports into the scratch folder).
sed -E 's/^(  enabled:).*/\1 true/; s|^(  output_dir:).*|\1 '"$work"'/experiments|' "$config" > "$work/on.yaml"
if [[ $np != 3 ]]; then
  sed -i -E 's/^(  experts:).*/\1 auto/; s/^(  routing:).*/\1 symmetric/' "$work/on.yaml"
fi
sed -E 's/^(  enabled:).*/\1 false/' "$work/on.yaml" > "$work/off.yaml"
grep -q 'enabled: true' "$work/on.yaml" || { echo "config has no profiler.enabled line" >&2; exit 2; }
run() { mpirun --oversubscribe -np "$np" "$moed" --config "$1" --no-progress 2>&1 | sed -n 's/^tokens\/s: //p'; }
on=() off=()
for ((i = 1; i <= pairs; i++)); do
  off+=("$(run "$work/off.yaml")")
  on+=("$(run "$work/on.yaml")")
  echo "pair $i ($np ranks): profiling off ${off[-1]} tokens/s, on ${on[-1]} tokens/s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
m_off=$(median "${off[@]}") m_on=$(median "${on[@]}")
awk -v on="$m_on" -v off="$m_off" 'BEGIN {
  printf "median tokens/s: profiling off %.0f, on %.0f; on/off = %.4f (cost %.2f%%)\n",
         off, on, on / off, 100 * (1 - on / off) }'
