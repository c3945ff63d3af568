#!/usr/bin/env bash
# bench_checkpoint.sh MOED ST_DIFF [DIR]: load time and peak RSS per rank for a Hugging Face
# checkpoint of about 300 MB (qwen3_moe, BF16, 4 shards, 16 experts x 2 MoE layers of
# hidden 1024 / expert ffn 1536, 9.4 MiB per expert), written by tests/models/make_reference.py
# into DIR (default: a temporary folder). Runs 1 rank (all experts) and 3 ranks (rank 0
# routes, ranks 1 and 2 hold 8 experts each), one step each, pinned; prints the wall time of
# the run (start-up + weights load + 1 step), each rank's peak RSS, and checks the output
# against the reference. A benchmark: it prints figures and asserts nothing about time.
set -euo pipefail
MOED=$(readlink -f "$1"); ST_DIFF=$(readlink -f "$2")
HERE=$(cd "$(dirname "$0")/.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source "$HERE/models/common.sh"
DIR=${3:-$(mktemp -d /tmp/moed-bench-ckpt.XXXXXX)}
CK=$DIR/qwen3
if [[ ! -f $CK/config.json ]]; then
  "$PY" "$HERE/models/make_reference.py" "$CK" qwen3_moe bf16 --shards 4 --tokens 256 \
    --experts 16 --hidden 1024 --ffn 1536 --moe-layers 2 --min-margin 0 > "$DIR/make.log"
fi
cd "$DIR"
echo "checkpoint: $(du -sh "$CK" | cut -f1) in $(ls "$CK"/model-*.safetensors | wc -l) shards ($CK)"
grep -m1 'model name' /proc/cpuinfo | sed 's/^.*: /cpu: /'
cat > c.yaml <<EOC
model:
  checkpoint: $CK
placement:
  master_rank: 0
  experts: auto
runtime:
  routing: master
workload:
  tokens_per_step: 256
  steps: 1
  input: $CK/input.safetensors
profiler:
  enabled: false
EOC
for np in 1 3; do
  rm -f rss.*
  t0=$(date +%s.%N)
  mpirun --oversubscribe --bind-to core:overload-allowed -np $np "$PY" "$MODELS_DIR/rss_wrapper.py" "$MOED" \
    --config c.yaml --dump-output out$np.safetensors --no-progress > run$np.log 2>&1
  t1=$(date +%s.%N)
  awk -v n="$np" -v a="$t0" -v b="$t1" \
    'BEGIN { printf "%d rank(s): %.2f s wall (start-up, load, 1 step); peak RSS per rank:", n, b - a }'
  for r in $(seq 0 $((np - 1))); do awk -v r="$r" '{ printf " rank %d %.0f MiB;", r, $1 / 1024 }' "rss.$r"; done
  echo
  "$ST_DIFF" "$CK/expected.safetensors" out$np.safetensors --tol 1e-4 | tail -1
done
