#!/usr/bin/env bash
# bad_input.sh CASE: on 3 ranks, a bad input is reported exactly once, by rank 0, with the
# expected text and exit code, and every rank exits promptly (the timeout catches a hang).
source "$(dirname "$0")/common.sh"
args=(--config c.yaml --no-progress)
CK_H=64 CK_F=96 CK_E=4  # the checkpoint cases' model
ckpt() { "$MAKE_CKPT" ckpt.safetensors mixtral f32 $CK_H $CK_F $CK_E 2 0 || fail "make_checkpoint"; }
# ckdir FAMILY DTYPE SHARDS [BREAK] [YAML model lines]: a checkpoint directory ck/ (layer 0
# dense for deepseek/qwen) and c.yaml pointing at it.
ckdir() {
  mkdir -p ck
  "$MAKE_CKPT" --dir ck "$1" "$2" 64 48 8 2 3 "$3" 12 ${4:-} || fail "make_checkpoint --dir"
  printf 'model:\n  checkpoint: ck\n%bworkload:\n  tokens_per_step: 12\n  steps: 1\n  input: ck/input.safetensors\nprofiler:\n  enabled: false\n' "${5:-}" > c.yaml
}
case "$1" in
  unknown_key)
    small_model | sed 's/  hidden_dim:/  hiden_dim:/' > c.yaml
    want_code=3 want="did you mean 'model.hidden_dim'" ;;
  rank_beyond)
    PLACEMENT='{1: [0, 1, 2, 3], 5: [4, 5, 6, 7]}' small_model > c.yaml
    want_code=3 want="rank 5" ;;
  expert_twice)
    PLACEMENT='{1: [0, 1, 2, 3], 2: [3, 4, 5, 6, 7]}' small_model > c.yaml
    want_code=3 want="c.yaml:15:" ;;
  topk)
    K=9 small_model > c.yaml
    want_code=3 want="model.top_k" ;;
  yaml_syntax)
    { small_model; echo "  bad: [1, 2"; } > c.yaml
    want_code=3 want="c.yaml:" ;;
  nccl_on_cpu)
    small_model | sed 's/^runtime:/runtime:\n  transport: nccl/' > c.yaml
    want_code=3 want="needs runtime.device: cuda" ;;
  empty_config)  # 0 bytes: a mistake (a truncated copy, the wrong file), not the default job
    : > c.yaml
    want_code=3 want="c.yaml: the file is empty (no configuration keys)" ;;
  missing_config)
    args=(--config /nonexistent/moed.yaml)
    want_code=3 want="/nonexistent/moed.yaml" ;;
  bad_flag)
    small_model > c.yaml; args=(--config c.yaml --steps many)
    want_code=2 want="--steps: 'many' is not a whole number (1..1000000000)" ;;
  flag_range)
    small_model > c.yaml; args=(--config c.yaml --steps=0)
    want_code=2 want="--steps: 0 is outside 1..1000000000" ;;
  flag_typo)
    small_model > c.yaml; args=(--config c.yaml --stpes 3)
    want_code=2 want="unknown option '--stpes' (did you mean --steps?)" ;;
  flag_twice)
    small_model > c.yaml; args=(--config c.yaml --steps 3 --no-progress --steps 4)
    want_code=2 want="--steps given twice" ;;
  flag_equals)  # --config=FILE reaches the loader, which names the file
    args=(--config=/nonexistent/moed.yaml --no-progress)
    want_code=3 want="/nonexistent/moed.yaml" ;;
  ranks_without_check)
    small_model > c.yaml; args=(--config c.yaml --ranks 3 --no-progress)
    want_code=2 want="--ranks only applies with --check-config" ;;
  missing_weights)
    WEIGHTS=/nonexistent/w.safetensors small_model > c.yaml
    want_code=4 want="/nonexistent/w.safetensors" ;;
  truncated_weights)
    ckpt; truncate -s 20000 ckpt.safetensors
    H=$CK_H F=$CK_F E=$CK_E WEIGHTS=ckpt.safetensors small_model > c.yaml
    want_code=4 want="ckpt.safetensors" ;;
  dims_mismatch)
    ckpt; H=128 F=$CK_F E=$CK_E WEIGHTS=ckpt.safetensors small_model > c.yaml
    want_code=4 want="[4, 64]" ;;
  missing_tensor)
    ckpt; H=$CK_H F=$CK_F E=$CK_E LAYERS=3 WEIGHTS=ckpt.safetensors small_model > c.yaml
    want_code=4 want="model.layers.2." ;;
  ckpt_no_config)
    ckdir mixtral f32 1; rm ck/config.json
    want_code=4 want="ck/config.json: no such file" ;;
  ckpt_bad_json)
    ckdir mixtral f32 1; printf '{\n  "hidden_size": 64,\n  oops\n}\n' > ck/config.json
    want_code=4 want="ck/config.json:3:" ;;
  ckpt_arch)
    ckdir mixtral f32 1; sed -i 's/MixtralForCausalLM/LlamaForCausalLM/' ck/config.json
    want_code=4 want="architecture 'LlamaForCausalLM' is not supported; moed supports MixtralForCausalLM, Qwen2MoeForCausalLM" ;;
  ckpt_missing_shard)
    ckdir qwen3_moe bf16 2; rm ck/model-00002-of-00002.safetensors
    want_code=4 want="model-00002-of-00002.safetensors" ;;
  ckpt_truncated_shard)
    ckdir deepseek_v2 bf16 2; truncate -s 3000 ck/model-00001-of-00002.safetensors
    want_code=4 want="model-00001-of-00002.safetensors" ;;
  ckpt_index_file)
    ckdir deepseek_v3 bf16 2 index_file
    want_code=4 want="model-00099-of-00002.safetensors" ;;
  ckpt_index_tensor)
    ckdir qwen2_moe f32 2 index_tensor
    want_code=4 want="although the index puts it there" ;;
  ckpt_shape)
    ckdir qwen3_moe f32 1 shape
    want_code=4 want="has shape [49, 64] but [48, 64] was expected" ;;
  ckpt_fp8_no_scale)
    ckdir deepseek_v3 fp8 1 no_scale
    want_code=4 want="has no scale tensor 'model.layers.1.mlp.experts.0.gate_proj.weight_scale_inv'" ;;
  ckpt_dense_layer)
    ckdir deepseek_v3 f32 1 "" '  layers: [1, 0]\n'
    want_code=4 want="c.yaml:3:15: model.layers: layer 0 is a dense layer" ;;
  ckpt_layer_range)
    ckdir gpt_oss f32 1 "" '  layers: [5]\n'
    want_code=4 want="model.layers: layer 5 is out of range" ;;
  ckpt_contradicts)
    ckdir mixtral f32 1 "" '  hidden_dim: 128\n'
    want_code=4 want="c.yaml:3:15: model.hidden_dim: 128 contradicts ck/config.json (key 'hidden_size' 64)" ;;
  *) fail "unknown case $1" ;;
esac
set +e
start=$SECONDS
mpirun_moed 3 "${args[@]}" > out.log 2> err.log
code=$?
set -e
elapsed=$((SECONDS - start))
cat err.log
[[ $code -ne 124 && $code -ne 137 ]] || fail "moed hung (killed by timeout)"
[[ $code -eq $want_code ]] || fail "exit code $code, want $want_code"
n=$(grep -c 'moed: error' err.log || true)
[[ $n -eq 1 ]] || fail "error printed $n times, want exactly once"
grep -qF -- "$want" err.log || fail "message lacks '$want'"
grep -q 'moed: error:' err.log || fail "the error was not printed by rank 0 (no plain 'moed: error:' line)"
echo "PASS $1: exit $code in ${elapsed}s"
