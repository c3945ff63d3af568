#!/usr/bin/env bash
# bench_plan_family.sh [BUILD_DIR] [FAMILY]: `moed plan` on a real family's routing. Writes a
# Hugging Face checkpoint of FAMILY (default gpt_oss: router with a bias, the routing skew
# comes from the checkpoint, not from workload.routing_skew) with
# tests/models/make_reference.py (16 experts, hidden 512, expert ffn 1024, 2 MoE layers, BF16),
# runs it on 3 ranks with the contiguous placement (rank 1: experts 0-7, rank 2: 8-15),
# plans with 2 redundant experts, reruns the planned config, and prints what the plan
# predicted (max/mean of the expert ranks' loads) and what the rerun measured (summary.json:
# tokens/s and the rows each rank's experts computed). Figures only, no assertion.
set -euo pipefail
BUILD=${1:-build}
FAMILY=${2:-gpt_oss}
MOED=$(cd "$BUILD" && pwd)/moed
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${MOED_PYTHON:-/usr/bin/python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$PY" "$HERE/models/make_reference.py" "$W/ck" "$FAMILY" bf16 --tokens 16 --experts 16 \
  --hidden 512 --ffn 1024 --moe-layers 2 --min-margin 0 > "$W/make.log"
cat > "$W/c.yaml" <<EOC
model: {checkpoint: $W/ck}
placement:
  experts: {1: [0, 1, 2, 3, 4, 5, 6, 7], 2: [8, 9, 10, 11, 12, 13, 14, 15]}
workload: {tokens_per_step: 1024, steps: 40, input: random}
profiler: {enabled: true, warmup_steps: 5, measurement_steps: 30, output_dir: $W/exp}
EOC
grep -m1 'model name' /proc/cpuinfo | sed 's/^.*: /cpu: /'
echo "family: $FAMILY (checkpoint written by make_reference.py; random input tokens)"
mpirun --oversubscribe -np 3 "$MOED" --config "$W/c.yaml" --no-progress > "$W/a.log" 2>&1
a=$(ls -d "$W"/exp/*/ | head -1)
"$MOED" plan "$a" --ranks 3 --redundant 2 -o "$W/p.yaml" | grep -E 'overall|layer'
mpirun --oversubscribe -np 3 "$MOED" --config "$W/p.yaml" --no-progress > "$W/b.log" 2>&1
b=$(ls -td "$W"/exp/*/ | head -1)
"$PY" - "$a" "$b" <<'PY'
import json, sys
def load(d):
    # the plan's figure: sum over layers of the busiest rank's rows / sum of the mean rows
    s = json.load(open(d + "/summary.json"))
    rows = {}
    src = s.get("replicas") or []
    replicated = {(e["layer"], e["expert"]) for e in src}
    for e in src:
        rows[(e["layer"], e["rank"])] = rows.get((e["layer"], e["rank"]), 0) + e["tokens"]
    for e in s["experts"]:
        if (e["layer"], e["expert"]) not in replicated:
            rows[(e["layer"], e["rank"])] = rows.get((e["layer"], e["rank"]), 0) + e["tokens"]
    layers = sorted({l for l, _ in rows})
    mx = sum(max(v for (l, _), v in rows.items() if l == L) for L in layers)
    mean = sum(sum(v for (l, _), v in rows.items() if l == L) /
               len([1 for (l, _) in rows if l == L]) for L in layers)
    return s["run"]["tokens_per_s"], mx / mean
(ta, ma), (tb, mb) = load(sys.argv[1]), load(sys.argv[2])
print("measured contiguous: %.0f tokens/s, max/mean of the ranks' rows (as plan computes it) %.3f" % (ta, ma))
print("measured planned:    %.0f tokens/s, max/mean of the ranks' rows (as plan computes it) %.3f" % (tb, mb))
print("ratio: %.2fx" % (tb / ta))
PY
