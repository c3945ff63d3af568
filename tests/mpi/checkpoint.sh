#!/usr/bin/env bash
# checkpoint.sh NAMING DTYPE ROUTING: a tiny safetensors checkpoint with Hugging Face names
# (a dense layer first, so model.first_layer: 1) runs, and 3 ranks equal 1 rank.
# checkpoint.sh dir FAMILY DTYPE ROUTING SHARDS: a tiny Hugging Face checkpoint directory
# of FAMILY (config.json, shards + index when SHARDS > 1, FP8 + _scale_inv for fp8, MXFP4
# _blocks + _scales for gpt_oss mxfp4: both held as stored, as the first line says) runs
# every MoE layer from config.json, and 3 ranks equal 1 rank.
# checkpoint.sh skew FAMILY ROUTING: workload.routing_skew applies to a checkpoint's router
# as to random weights: the output differs from the unskewed run's, 3 ranks equal 1 rank,
# and with routing_skew 16 (mixtral, gpt_oss: top-2 of logits) only experts 0 and 1 run.
source "$(dirname "$0")/common.sh"
# Rows on the wire in F32 (runtime.wire_dtype; auto sends BF16 where BF16 weights are
# computed in BF16): runtime.dedup sums a token's experts on each expert rank and rounds
# that sum to the wire type once, so with BF16 rows 3 ranks and 1 rank group a token's
# experts differently and agree within a BF16 rounding only (mpi.equivalence.dedup_bf16);
# with F32 rows and top-2 the sums are exact either way.
f32_rows() { sed 's/^runtime:/runtime:\n  wire_dtype: f32/'; }
if [[ "$1" == skew ]]; then
  family=$2 routing=$3
  mkdir ck
  "$MAKE_CKPT" --dir ck "$family" bf16 64 48 8 2 3 1 40 || fail "make_checkpoint failed"
  skewed() {  # skewed S [PROF]: c.yaml with routing_skew S
    printf 'model:\n  checkpoint: %s\nplacement:\n  experts: auto\nruntime:\n  routing: %s\n' \
      "$WORK/ck" "$routing" | f32_rows
    printf 'workload:\n  tokens_per_step: 40\n  steps: 2\n  input: %s\n  routing_skew: %s\n' \
      "$WORK/ck/input.safetensors" "$1"
    printf 'profiler:\n  enabled: %s\n  warmup_steps: 0\n  output_dir: %s\n' "${2:-false}" \
      "$WORK/experiments"
  }
  skewed 0 > c.yaml
  "$MOED" --config c.yaml --dump-output plain.safetensors --no-progress > plain.log 2>&1 \
    || { cat plain.log; fail "unskewed run failed"; }
  skewed 2 > c.yaml
  same_as_one_rank 3
  rc=0; "$ST_DIFF" plain.safetensors one.safetensors --tol 1e-3 || rc=$?
  [[ $rc -ne 0 ]] || fail "routing_skew 2 gave the unskewed output: the key was ignored with model.checkpoint"
  [[ $rc -eq 1 ]] || fail "st_diff could not read the outputs"
  if [[ $family == mixtral || $family == gpt_oss ]]; then
    skewed 16 true > c.yaml
    mpirun_moed 3 --config c.yaml --no-progress > prof.log 2>&1 || { cat prof.log; fail "profiled run"; }
    d=$(ls -d "$WORK"/experiments/*/ | tail -1)
    python3 - "$d/summary.json" <<'PY' || fail "routing_skew 16: experts other than 0 and 1 ran"
import json, sys
ex = {x["expert"]: x["tokens"] for x in json.load(open(sys.argv[1]))["experts"]}
assert ex[0] > 0 and ex[1] > 0, ex
assert all(ex[e] == 0 for e in range(2, 8)), ex
PY
  fi
  echo "PASS checkpoint skew $family $routing"
  exit 0
fi
if [[ "$1" == dir ]]; then
  family=$2 dtype=$3 routing=$4 shards=$5
  H=64 F=48 E=8 K=2 T=40
  [[ $dtype == fp8 ]] && H=160 F=136  # two 128-wide scale blocks each way
  [[ $dtype == mxfp4 ]] && H=96 F=64  # whole 32-value scale blocks
  mkdir ck
  "$MAKE_CKPT" --dir ck "$family" "$dtype" $H $F $E $K 3 "$shards" $T || fail "make_checkpoint failed"
  cat > c.yaml <<EOC
model:
  checkpoint: $WORK/ck
placement:
  experts: auto
runtime:
  routing: $routing
  wire_dtype: f32
workload:
  tokens_per_step: $T
  steps: 2
  input: $WORK/ck/input.safetensors
profiler:
  enabled: false
  output_dir: $WORK/experiments
EOC
  same_as_one_rank 3
  grep -q "weights $family (" one.log || { cat one.log; fail "family not reported"; }
  if [[ $dtype == fp8 || $dtype == mxfp4 ]]; then  # held as the checkpoint stores them
    grep -q "^experts: $( [[ $dtype == fp8 ]] && echo "fp8 e4m3" || echo mxfp4) weights held as stored" one.log \
      || { cat one.log; fail "$dtype weights not held as stored"; }
  fi
  moe_layers=2  # layer 0 is dense where the family has dense layers
  [[ $family == mixtral || $family == gpt_oss ]] && moe_layers=3
  grep -q "model: $moe_layers layers" one.log || { cat one.log; fail "not the $moe_layers MoE layers of 3"; }
  # the report says where the weights came from and their on-disk dtype
  sed -i 's/^  enabled: false/  enabled: true\n  warmup_steps: 0/' c.yaml
  mpirun_moed 3 --config c.yaml --no-progress > prof.log 2>&1 || { cat prof.log; fail "profiled run"; }
  want=$(case $dtype in fp8) echo F8_E4M3 ;; mxfp4) echo MXFP4 ;; bf16) echo BF16 ;; f16) echo F16 ;; *) echo F32 ;; esac)
  d=$(ls -d "$WORK"/experiments/*/ | tail -1)
  grep -q "^  weights  *$family (.*$want" "$d/summary.txt" \
    || { grep -A3 '^  routing' "$d/summary.txt"; fail "summary.txt: no weights line with $family and $want"; }
  grep -q "\"weights\": \"$family (.*$want" "$d/summary.json" || fail "summary.json: run.weights"
  # the activation, in every report file as in the run's first lines (gpt-oss's clamped
  # swiglu_oai was once reported as swiglu)
  act=$( [[ $family == gpt_oss ]] && echo swiglu_oai || echo swiglu)
  grep -q "^model: $moe_layers layers x [0-9]* experts (top-[0-9]*, $act)" prof.log \
    || { grep '^model:' prof.log; fail "the first lines do not say $act"; }
  grep -q "\"activation\": \"$act\"" "$d/summary.json" || fail "summary.json: run.activation is not $act"
  grep -q "^  model  .*, ffn [0-9]*, $act, capacity factor" "$d/summary.txt" \
    || { grep '^  model' "$d/summary.txt"; fail "summary.txt: the model line does not say $act"; }
  grep -q "ffn [0-9]*, $act, capacity factor" "$d/report.html" || fail "report.html: the model is not $act"
  # each expert call's GFLOP/s in metrics.csv: its rows x 2 H F x 3 matrices (swiglu and
  # swiglu_oai: gate, up, down; gpt-oss's once counted 2) over its time
  python3 - "$d" <<'PY' || fail "metrics.csv: GFLOP/s is not rows x 6 H F over the call's time"
import csv, json, sys
d = sys.argv[1]
run = json.load(open(d + "/summary.json"))["run"]
H, F = run["hidden_dim"], run["ffn_dim"]
mats = 2 if run["activation"] == "gelu" else 3
n = 0
for r in csv.DictReader(open(d + "/metrics.csv")):
    ms, g, rows = float(r["compute_ms"]), float(r["gflops"]), int(r["tokens"])
    if ms < 0.002:
        continue
    want = rows * 2 * H * F * mats / (ms * 1e-3) / 1e9
    # printed: compute_ms to 1e-6, gflops to 1e-3
    assert abs(g - want) <= 0.0006 + want * (0.6e-6 / ms) + 1e-6 * want, (r, want)
    n += 1
assert n > 0, "no expert call long enough to check"
print("metrics.csv: %d calls at rows x %d x 2 H F" % (n, mats))
PY
  echo "PASS checkpoint dir $family $dtype $routing $shards"
  exit 0
fi
naming=$1 dtype=$2 routing=$3
H=64 F=96 E=4 TOKENS=40
"$MAKE_CKPT" ckpt.safetensors "$naming" "$dtype" $H $F $E 2 1 $TOKENS input.safetensors \
  || fail "make_checkpoint failed"
H=$H F=$F E=$E TOKENS=$TOKENS FIRST=1 WEIGHTS=ckpt.safetensors INPUT=input.safetensors \
  ROUTING=$routing small_model | f32_rows > c.yaml
same_as_one_rank 3
grep -q "weights $( [[ $naming == mixtral ]] && echo mixtral || echo qwen2_moe names)" one.log \
  || { cat one.log; fail "naming not detected"; }
echo "PASS checkpoint $naming $dtype $routing"
