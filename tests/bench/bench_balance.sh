#!/usr/bin/env bash
# bench_balance.sh [BUILD_DIR]: skewed routing (routing_skew 1.2, 8 experts, 2 expert
# ranks, contiguous placement), then `moed plan --redundant 2`, then the planned config:
# prints both tokens/s and the ratio. Then online rebalancing (runtime.rebalance_every 8,
# redundant_experts 2) on the contiguous config from the start, its rebalancing cost
# included: tokens/s and the ratio to the contiguous run. Figures only, no assertion.
set -euo pipefail
BUILD=${1:-build}
MOED=$(cd "$BUILD" && pwd)/moed
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cat > "$W/c.yaml" <<EOC
model: {hidden_dim: 512, ffn_dim: 1024, num_experts: 8, top_k: 2, num_layers: 2}
placement:
  experts: {1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}
workload: {tokens_per_step: 1024, steps: 40, routing_skew: 1.2}
profiler: {enabled: true, warmup_steps: 5, measurement_steps: 30, output_dir: $W/exp}
EOC
tps() { grep -o 'tokens/s: [0-9]*' "$1" | tail -1 | awk '{print $2}'; }
mpirun --oversubscribe -np 3 "$MOED" --config "$W/c.yaml" --no-progress > "$W/a.log" 2>&1
run=$(ls -d "$W"/exp/*/ | head -1)
"$MOED" plan "$run" --ranks 3 --redundant 2 -o "$W/p.yaml"
mpirun --oversubscribe -np 3 "$MOED" --config "$W/p.yaml" --no-progress > "$W/b.log" 2>&1
a=$(tps "$W/a.log"); b=$(tps "$W/b.log")
echo "contiguous: $a tokens/s"
echo "planned (2 redundant): $b tokens/s"
awk -v a="$a" -v b="$b" 'BEGIN { printf "ratio: %.2fx\n", b / a }'
printf 'runtime: {rebalance_every: 8, redundant_experts: 2}\n' | cat "$W/c.yaml" - > "$W/o.yaml"
mpirun --oversubscribe -np 3 "$MOED" --config "$W/o.yaml" --no-progress > "$W/o.log" 2>&1
o=$(tps "$W/o.log")
echo "online (rebalance every 8 steps, 2 redundant): $o tokens/s ($(grep -c 'rebalance before' "$W/o.log") rebalances)"
awk -v a="$a" -v o="$o" 'BEGIN { printf "online ratio: %.2fx\n", o / a }'
