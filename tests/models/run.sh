#!/usr/bin/env bash
# run.sh CASE: a tiny Hugging Face checkpoint of one family (make_reference.py), run by moed
# on 3 ranks and on 1 rank, each output compared with the NumPy reference's expected output.
#   CASE = FAMILY_DTYPE_ROUTING[_layers][_bf16c][_gemm]   e.g. deepseek_v3_fp8_master,
#          qwen2_moe_f32_symmetric, mixtral_f32_master_layers (a subset of the MoE layers:
#          model.layers), mixtral_bf16_master_bf16c (BF16 compute and BF16 rows on the wire:
#          the weights as stored, so the reference is also the F32 compute of the same
#          BF16-rounded weights; tolerance 3e-2, and the 3-rank output against the 1-rank one
#          within 4e-3, 1e-3 with runtime.dedup: false (see below); skipped, exit 77, on a
#          CPU without native BF16),
#          deepseek_v3_fp8_master_gemm (runtime.small_batch_rows: 0: every expert call on the
#          GEMM path, FP8 / MXFP4 dequantised for it, instead of the small-batch kernels that
#          take the calls of few rows otherwise), ..._columns (placement.copies: columns:
#          every expert split into column shares over every expert rank, 2 in master routing,
#          3 in symmetric; the checkpoint's expert ffn 32 x shares wide, 128 x shares for FP8
#          so a share holds whole scale blocks; the 1-rank run holds whole experts),
#          ..._hfdefaults (config.json without the family's optional routing keys, which
#          transformers' configuration class then defaults: n_group, routed_scaling_factor,
#          n_shared_experts, first_k_dense_replace ... (make_reference.py --hf-defaults);
#          moed must route with the same defaults and say each one came from an absent key)
# Families with shared experts must say how the routing ranks hold and compute them
# ("shared experts: ..."): FP8 as stored, BF16 for BF16 compute and for F32 compute on a
# CPU without native BF16 that has moed's F32 kernels (AVX2 and FMA, or AVX-512), else F32.
# FP8 and MXFP4 checkpoints are held as stored (model.dtype auto): the first line must say so.
# Every other case computes in F32 (runtime.compute_dtype: f32), whatever the stored type.
# Needs MOED and ST_DIFF (ctest sets them). Fails, printing what moed said, when moed cannot
# run the checkpoint: never skips.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../mpi/common.sh"   # cds into a fresh temporary directory
source "$HERE/common.sh"

case_name=$1
subset=
compute=f32
small_rows=-1
copies=replicas
hfdefaults=
if [[ $case_name == *_hfdefaults ]]; then hfdefaults=1; case_name=${case_name%_hfdefaults}; fi
if [[ $case_name == *_columns ]]; then copies=columns; case_name=${case_name%_columns}; fi
if [[ $case_name == *_gemm ]]; then small_rows=0; case_name=${case_name%_gemm}; fi
if [[ $case_name == *_bf16c ]]; then compute=bf16; case_name=${case_name%_bf16c}; fi
if [[ $case_name == *_layers ]]; then subset=1; case_name=${case_name%_layers}; fi
routing=${case_name##*_}
rest=${case_name%_*}
dtype=${rest##*_}
family=${rest%_*}
[[ $routing == master || $routing == symmetric ]] || fail "case '$1': routing must be master or symmetric"

# Relative tolerance of st_diff (max |moed - expected| / max |expected|). expected is computed
# in float64 from the weights as stored (already rounded to BF16/F16, FP8 already
# dequantised), so every dtype differs from moed only by F32 accumulation order: 1e-4.
TOL=1e-4
TOKENS=48
# BF16 compute rounds the GEMMs' inputs (tokens, activations) to BF16: 8 mantissa bits.
[[ $compute == bf16 ]] && TOL=3e-2

DIR=$WORK/ckpt
args=(--shards 3 --tokens $TOKENS --seed 11)
# BF16 compute: one MoE layer, so the F32 gate sees the same input as the reference's and
# routes alike (a second layer's input carries the first's BF16 error, which can flip a
# near-tie choice: a different expert, not a numerical difference).
[[ $compute == bf16 ]] && args+=(--moe-layers 1)
if [[ $copies == columns ]]; then
  shares=2 width=32
  [[ $routing == symmetric ]] && shares=3
  [[ $dtype == fp8 ]] && width=128
  args+=(--ffn $((width * shares)))
fi
[[ -n $hfdefaults ]] && args+=(--hf-defaults)
layers_yaml=
if [[ -n $subset ]]; then
  # The reference's MoE layers minus the first, in order: model.layers names a subset.
  make_ref "$DIR.all" "$family" "$dtype" "${args[@]}"
  all=$(ref_info "$DIR.all" moe_layers)
  sub=${all#*, }
  [[ "$sub" != "$all" ]] || fail "$family has one MoE layer: no subset to test"
  make_ref "$DIR" "$family" "$dtype" "${args[@]}" --layers "${sub// /}"
  layers_yaml="  layers: [$sub]"
else
  make_ref "$DIR" "$family" "$dtype" "${args[@]}"
fi
echo "reference: $(cat make_reference.log)"

cat > c.yaml <<EOC
model:
  checkpoint: $DIR
$layers_yaml
placement:
  master_rank: 0
  experts: auto
  copies: $copies
runtime:
  routing: $routing
  compute_dtype: $compute
  small_batch_rows: $small_rows
workload:
  tokens_per_step: $TOKENS
  steps: 1
  input: $DIR/input.safetensors
profiler:
  enabled: false
  output_dir: $WORK/experiments
EOC

if [[ $compute == bf16 ]]; then
  rc=0
  "$MOED" --config c.yaml --check-config > check.log 2>&1 || rc=$?
  if ((rc == 3)) && grep -q "no native BF16" check.log; then
    echo "SKIP: $(sed -n 's/^moed: error: //p' check.log)"
    exit 77
  fi
fi

status=0
# run_and_compare NAME NP: moed on NP ranks, then its output against expected.
run_and_compare() {
  local name=$1 np=$2 rc=0
  if [[ $np == 1 ]]; then
    timeout -k 5 120 "$MOED" --config c.yaml --dump-output "$name.safetensors" --no-progress \
      > "$name.log" 2>&1 || rc=$?
  else
    mpirun_moed "$np" --config c.yaml --dump-output "$name.safetensors" --no-progress \
      > "$name.log" 2>&1 || rc=$?
  fi
  if ((rc != 0)); then
    echo "---- moed on $np rank(s) exited $rc; it said:"
    cat "$name.log"
    echo "----"
    echo "FAIL: $family $dtype $routing: moed on $np rank(s) exited $rc" >&2
    status=1
    return
  fi
  held=
  case $dtype in fp8) held="fp8 e4m3 weights held as stored" ;; mxfp4) held="mxfp4 weights held as stored" ;; esac
  if [[ -n $held ]] && ! grep -m1 "^experts: " "$name.log" | grep -q "^experts: $held"; then
    echo "---- moed's log ($np rank(s)):"; cat "$name.log"
    echo "FAIL: $family $dtype $routing on $np rank(s): the first line does not say '$held'" >&2
    status=1
  fi
  if [[ $copies == columns && $np != 1 ]] &&
     ! grep -m1 "^experts: " "$name.log" | grep -q "; every expert in $shares column shares"; then
    echo "---- moed's log ($np rank(s)):"; cat "$name.log"
    echo "FAIL: $family $dtype $routing on $np rank(s): no '$shares column shares' said" >&2
    status=1
  fi
  # the shared experts held as the experts would be: FP8 as stored, else BF16 for BF16
  # compute, and for F32 compute where the CPU lacks native BF16 but has moed's F32 kernels
  # (from /proc/cpuinfo, not from moed), F32 otherwise (their own line after the experts')
  if [[ $family == qwen2_moe || $family == deepseek_* || $family == kimi_k2 ]]; then
    shared="f32 weights, f32 compute"
    native=; grep -qw avx512_bf16 /proc/cpuinfo && [[ ${MOED_CPU_NO_BF16:-0} == 0 ]] && native=1
    [[ $dtype == bf16 && -z $native ]] && cpu_holds_bf16 && shared="bf16 weights, f32 compute"
    [[ $compute == bf16 ]] && shared="bf16 weights, bf16 compute"
    [[ $dtype == fp8 ]] && shared="fp8 e4m3 weights held as stored, $compute compute"
    if ! grep -qx "shared experts: $shared" "$name.log"; then
      echo "---- moed's log ($np rank(s)):"; cat "$name.log"
      echo "FAIL: $family $dtype $routing on $np rank(s): no line 'shared experts: $shared'" >&2
      status=1
    fi
  fi
  if ! "$ST_DIFF" "$DIR/expected.safetensors" "$name.safetensors" --tol $TOL; then
    echo "---- moed's log ($np rank(s)):"
    cat "$name.log"
    echo "FAIL: $family $dtype $routing on $np rank(s): output differs from the reference" >&2
    status=1
  fi
}
run_and_compare many 3
run_and_compare one 1
# --hf-defaults: each omitted key shows in the config moed resolved as the default of an
# absent key (--check-config prints the checkpoint's facts)
if [[ -n $hfdefaults ]]; then
  "$MOED" --config c.yaml --check-config > facts.log 2>&1 || { cat facts.log; fail "--check-config failed"; }
  omitted=$(ref_info "$DIR" omitted_keys)
  for key in ${omitted//,/ }; do
    [[ $key == mlp_only_layers ]] && continue # a list: moed's rule reads it, no fact of its own
    grep -qE "default of absent key '$key'|$key [^ ]+ \(default of absent key\)" facts.log ||
      { cat facts.log; fail "--check-config does not say key '$key' took its default"; }
  done
  [[ $family != mixtral ]] || grep -q "model.normalize_topk *true *(the family's routing" facts.log ||
    { cat facts.log; fail "mixtral: norm_topk_prob false in config.json, but not 'true (the family's routing'"; }
  [[ $family != deepseek_v2 ]] || grep -q "model.normalize_topk *false *(the family's routing" facts.log ||
    { cat facts.log; fail "deepseek_v2: not 'model.normalize_topk false (the family's routing'"; }
  [[ -n $omitted ]] || omitted="none; norm_topk_prob false ignored"
  echo "defaults said: $omitted"
fi
# BF16 rows on the wire: runtime.dedup (the CPU's default) sums a token's experts on each
# expert rank and rounds that sum to BF16 once for the way back; how a token's experts group
# into ranks differs between 1 and 3 ranks, so the outputs agree within one BF16 rounding
# (2^-8 = 3.9e-3 of a value). With runtime.dedup: false every (token, expert) row is rounded
# alike on any number of ranks: within 1e-3.
if ((status == 0)) && [[ $compute == bf16 ]] &&
   ! "$ST_DIFF" one.safetensors many.safetensors --tol 4e-3; then
  echo "FAIL: $family $dtype $routing: BF16 on 3 ranks differs from BF16 on 1 rank" >&2
  status=1
fi
if ((status == 0)) && [[ $compute == bf16 && $copies == replicas ]]; then
  sed 's/^runtime:/runtime:\n  dedup: false/' c.yaml > nodedup.yaml
  timeout -k 5 120 "$MOED" --config nodedup.yaml --dump-output one_nd.safetensors --no-progress \
    > one_nd.log 2>&1 || { cat one_nd.log; fail "runtime.dedup: false on 1 rank failed"; }
  mpirun_moed 3 --config nodedup.yaml --dump-output many_nd.safetensors --no-progress \
    > many_nd.log 2>&1 || { cat many_nd.log; fail "runtime.dedup: false on 3 ranks failed"; }
  "$ST_DIFF" one_nd.safetensors many_nd.safetensors --tol 1e-3 \
    || fail "$family $dtype $routing: runtime.dedup: false, BF16 on 3 ranks differs from 1 rank"
fi
((status == 0)) || exit 1
echo "PASS models $1"
