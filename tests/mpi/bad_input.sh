#!/usr/bin/env bash
# bad_input.sh CASE [check]: on 3 ranks, a bad input is reported exactly once, by rank 0, with
# the expected text and exit code, and every rank exits promptly (the timeout catches a hang).
# With `check`: the same verdict from `moed --check-config --ranks 3`, one process, no mpirun.
# Cases with want_code=0 expect no error and the warning `want` exactly once.
source "$(dirname "$0")/common.sh"
args=(--config c.yaml --no-progress)
CK_H=64 CK_F=96 CK_E=4  # the checkpoint cases' model
ckpt() { "$MAKE_CKPT" ckpt.safetensors mixtral f32 $CK_H $CK_F $CK_E 2 0 || fail "make_checkpoint"; }
here=$(pwd -P)  # what getcwd() says: the absolute path moed's messages show
# ro/: a read-only file system (root ignores chmod, so a mode cannot make "unwritable").
ro_mount() {
  mkdir ro
  mount -t tmpfs -o ro,size=1m tmpfs ro 2>/dev/null \
    || { echo "SKIP: cannot mount a read-only tmpfs here (needs root / CAP_SYS_ADMIN)"; exit 77; }
  trap 'umount "$WORK/ro" 2>/dev/null || true; [[ -n "${KEEP_WORK:-}" ]] || rm -rf "$WORK"' EXIT
}
with_output_dir() { sed "s|^  output_dir: .*|  output_dir: $1|"; }
fast=0  # 1: must end before any step (a run of a million steps would not)
post=  # want_code=0 and want="": a command that checks what the run made
no_folder=0  # 1: the report's output_dir must not exist afterwards (nothing made before the checks)
# hold_port: a listener of another program on a free port of 127.0.0.1, in $PORT, until exit.
hold_port() {
  python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True); time.sleep(600)' > port.txt &
  holder=$!
  trap 'kill $holder 2>/dev/null || true; [[ -n "${KEEP_WORK:-}" ]] || rm -rf "$WORK"' EXIT
  for _ in $(seq 100); do [[ -s port.txt ]] && break; sleep 0.1; done
  PORT=$(cat port.txt); [[ -n "$PORT" ]] || fail "no port held"
}
with_listen() { sed "s|^profiler:|profiler:\n  listen: $1|"; }
# ckdir FAMILY DTYPE SHARDS [BREAK] [YAML model lines]: a checkpoint directory ck/ (layer 0
# dense for deepseek/qwen) and c.yaml pointing at it.
ckdir() {
  mkdir -p ck
  "$MAKE_CKPT" --dir ck "$1" "$2" 64 "${CKF:-48}" 8 2 3 "$3" 12 ${4:-} || fail "make_checkpoint --dir"
  printf 'model:\n  checkpoint: ck\n%bworkload:\n  tokens_per_step: 12\n  steps: 1\n  input: ck/input.safetensors\nprofiler:\n  enabled: false\n' "${5:-}" > c.yaml
}
case "$1" in
  unknown_key)
    small_model | sed 's/  hidden_dim:/  hiden_dim:/' > c.yaml
    want_code=3 want="did you mean 'model.hidden_dim'" ;;
  enum_typo)  # an enum's value mistyped: the values it takes, and the nearest
    ROUTING=symetric small_model > c.yaml
    want_code=3 want="c.yaml:17:12: runtime.routing: expected master or symmetric, found 'symetric' (did you mean 'symmetric'?)" ;;
  real_underflow)  # a real too small for a double: refused, not read as 0 (no limit)
    CF=1e-400 small_model > c.yaml
    want_code=3 want="c.yaml:9:20: model.capacity_factor: 1e-400 is out of range [0, 1024]" ;;
  real_hex)  # C's hex floats are no YAML number
    CF=0x1p-2 small_model > c.yaml
    want_code=3 want="c.yaml:9:20: model.capacity_factor: expected a number, found '0x1p-2'" ;;
  string_null)  # output_dir: ~ is no folder named '~'
    PROF=true small_model | sed 's/^  output_dir: .*/  output_dir: ~/' > c.yaml
    want_code=3 want="c.yaml:26:15: profiler.output_dir: expected a non-empty string, found a YAML null ('~')" ;;
  rank_beyond)
    PLACEMENT='{1: [0, 1, 2, 3], 5: [4, 5, 6, 7]}' small_model > c.yaml
    want_code=3 want="rank 5" ;;
  expert_twice)
    PLACEMENT='{1: [0, 1, 2, 3, 3], 2: [4, 5, 6, 7]}' small_model > c.yaml
    want_code=3 want="c.yaml:15:29: placement.experts: expert 3 is listed twice under rank 1" ;;
  topk)
    K=9 small_model > c.yaml
    want_code=3 want="model.top_k" ;;
  yaml_syntax)
    { small_model; echo "  bad: [1, 2"; } > c.yaml
    want_code=3 want="c.yaml:" ;;
  nccl_on_cpu)
    small_model | sed 's/^runtime:/runtime:\n  transport: nccl/' > c.yaml
    want_code=3 want="needs runtime.device: cuda" ;;
  step_timeout_tiny)  # a bound no step can meet once ended the job at once (exit 7)
    small_model | sed 's/^runtime:/runtime:\n  step_timeout_s: 1e-300/' > c.yaml
    want_code=3 want="c.yaml:17:19: runtime.step_timeout_s: 1e-300 is below the watchdog's minimum of 1 s (0 turns the watchdog off)" ;;
  rebalance_negative)
    small_model | sed 's/^runtime:/runtime:\n  rebalance_every: -2/' > c.yaml
    want_code=3 want="runtime.rebalance_every" ;;
  rebalance_cuda)  # refused in the config, before the build's devices are looked at
    small_model | sed 's/^runtime:/runtime:\n  device: cuda\n  rebalance_every: 4/' > c.yaml
    want_code=3 want="online rebalancing runs on runtime.device: cpu only" ;;
  columns_dedup_off)  # column shares add up in the expert rank's sum: dedup is needed
    small_model | sed 's/^placement:/placement:\n  copies: columns/; s/^runtime:/runtime:\n  dedup: false/' > c.yaml
    want_code=3 want="c.yaml:18:10: runtime.dedup: false, but placement.copies: columns needs one row per (token, rank)" ;;
  columns_uneven)  # every expert cut into as many shares
    PLACEMENT='{1: [0, 1, 2, 3, 4, 5, 6, 7], 2: [0, 1, 2, 3]}' small_model \
      | sed 's/^placement:/placement:\n  copies: columns/' > c.yaml
    want_code=3 want="c.yaml:14:11: placement.copies: columns, but expert 4 is on 1 rank in placement.experts and expert 0 of the first layer on 2" ;;
  columns_ffn)  # 96 columns in 2 shares of 48: not whole 32-column blocks
    F=96 small_model | sed 's/^placement:/placement:\n  copies: columns/' > c.yaml
    want_code=3 want="placement.copies: columns splits model.ffn_dim 96 into 2 shares: each must be a whole multiple of 32 columns (96 / 2 is not); copies of an expert that work: 3" ;;
  columns_rebalance)  # online rebalancing moves whole experts
    small_model | sed 's/^placement:/placement:\n  copies: columns/; s/^runtime:/runtime:\n  rebalance_every: 2/' > c.yaml
    want_code=3 want="runtime.rebalance_every: 2, but placement.copies: columns splits every expert" ;;
  columns_cuda)  # the GPU back-end holds whole experts
    small_model | sed 's/^placement:/placement:\n  copies: columns/; s/^runtime:/runtime:\n  device: cuda/' > c.yaml
    want_code=3 want="placement.copies: columns runs on runtime.device: cpu only" ;;
  columns_fp8_block)  # FP8 shares of 64 columns would cut the checkpoint's 128-input blocks
    # (--check-config too: it reads the checkpoint's weight_block_size)
    CKF=128 ckdir deepseek_v3 fp8 1
    printf 'placement:\n  copies: columns\n' >> c.yaml
    want_code=4 want="placement.copies: columns: a share of 64 of model.ffn_dim 128 cuts the FP8 scale blocks of 128 inputs" ;;
  columns_table)  # every expert on every expert rank must fit the placement table (check
    # only: 1024 experts on 39 expert ranks are 39936 entries of 32768; once it wrote past it)
    [[ "${2:-}" == check ]] || fail "columns_table runs with check only (40 ranks)"
    E=1024 F=64 small_model | sed 's/^placement:/placement:\n  copies: columns/' > c.yaml
    check_ranks=40
    want_code=3 want="placement.copies: columns with placement.experts: auto puts 1024 experts on each of 39 expert ranks: 39936 (expert, rank) entries, more than moed's 32768" ;;
  balance_rebalance)  # both move an expert's tokens between copies
    small_model | sed 's/^placement:/placement:\n  copies: balance/; s/^runtime:/runtime:\n  rebalance_every: 2/' > c.yaml
    want_code=3 want="runtime.rebalance_every: 2, but placement.copies: balance already picks a copy of each expert every step" ;;
  balance_cuda)  # the GPU back-end holds one copy of each expert
    small_model | sed 's/^placement:/placement:\n  copies: balance/; s/^runtime:/runtime:\n  device: cuda/' > c.yaml
    want_code=3 want="placement.copies: balance runs on runtime.device: cpu only" ;;
  dedup_cuda)  # one row per (token, rank) is the CPU back-end's: refused in the config
    small_model | sed 's/^runtime:/runtime:\n  device: cuda\n  dedup: true/' > c.yaml
    want_code=3 want="c.yaml:18:10: runtime.dedup: true, but the CUDA back-end sends one row per (token, expert)" ;;
  rebalance_redundant)  # 2 expert ranks hold at most 8 extra copies of 8 experts apart
    small_model | sed 's/^runtime:/runtime:\n  rebalance_every: 4\n  redundant_experts: 9/' > c.yaml
    want_code=3 want="runtime.redundant_experts: 9 extra copies do not fit apart" ;;
  cuda_on_cpu_build)  # a config error (3): nothing is wrong with a file
    caps=$("$MOED" --version) || fail "moed --version"
    if grep -q '^transports: .*; devices: .*cuda' <<< "$caps"; then
      echo "SKIP: this build has CUDA (${caps##*$'\n'})"; exit 77
    fi
    small_model | sed 's/^runtime:/runtime:\n  device: cuda/' > c.yaml
    want_code=3 want="runtime.device: cuda is not available in this build" ;;
  cuda_replicas)  # the GPU back-end holds one expert set: no copies (config error, 3)
    PLACEMENT='{1: [0, 1, 2, 3], 2: [0, 4, 5, 6, 7]}' small_model \
      | sed 's/^runtime:/runtime:\n  device: cuda/' > c.yaml
    want_code=3 want="c.yaml:15:34: placement.experts: expert 0 is listed under ranks 1 and 2: replicas are not supported with runtime.device: cuda" ;;
  cuda_layers)  # nor a layer's own placement
    small_model | sed 's/^runtime:/runtime:\n  device: cuda/' \
      | sed 's/^  experts: auto/  experts: auto\n  layers: {0: {1: [0, 1, 2, 3, 4], 2: [5, 6, 7]}}/' > c.yaml
    want_code=3 want="placement.layers: not supported with runtime.device: cuda yet" ;;
  empty_config)  # 0 bytes: a mistake (a truncated copy, the wrong file), not the default job
    : > c.yaml
    want_code=3 want="c.yaml: the file is empty (no configuration keys)" ;;
  missing_config)
    args=(--config /nonexistent/moed.yaml)
    want_code=3 want="/nonexistent/moed.yaml" ;;
  bad_flag)
    small_model > c.yaml; args=(--config c.yaml --steps many)
    want_code=2 want="--steps: 'many' is not a whole number (0..1000000000)" ;;
  socket_config)  # open() says ENXIO ("No such device or address"): said as what it is
    python3 -c "import socket; socket.socket(socket.AF_UNIX).bind('s.yaml')" || fail "no socket made"
    args=(--config s.yaml)
    want_code=3 want="cannot read config 's.yaml': it is a socket, not a file or a pipe" ;;
  config_path_long)  # the reason must fit the message after a path of 5 kB
    long=$(printf 'd%.0s' {1..200}); long=$(printf "$long/%.0s" {1..25})
    args=(--config "${long}x.yaml")
    want_code=3 want="/x.yaml': File name too long" ;;
  flag_space)  # digits only, as the config's numbers (strtoll alone takes " 5" and "+5")
    small_model > c.yaml; args=(--config c.yaml --steps " 5")
    want_code=2 want="--steps: ' 5' is not a whole number (0..1000000000)" ;;
  flag_range)  # (--steps 0 is a run without end: failures.steps_zero)
    small_model > c.yaml; args=(--config c.yaml --steps=1000000001)
    want_code=2 want="--steps: 1000000001 is outside 0..1000000000" ;;
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
    want_code=4
    want="model.weights: cannot read '/nonexistent/w.safetensors': No such file or directory" ;;
  missing_weights_relative)  # relative to the working directory, which the message shows
    WEIGHTS=ckpt/w.safetensors small_model > c.yaml
    want_code=4 want="model.weights: cannot read 'ckpt/w.safetensors' (tried $here/ckpt/w.safetensors)" ;;
  missing_input)
    INPUT=in.safetensors small_model > c.yaml
    want_code=4 want="workload.input: cannot read 'in.safetensors' (tried $here/in.safetensors)" ;;
  unwritable_output)  # found before the first of a million steps, not after the run
    ro_mount; PROF=true STEPS=1000000 small_model | with_output_dir "$WORK/ro/experiments" > c.yaml
    want_code=5 fast=1
    want="profiler.output_dir: cannot write in '$WORK/ro/experiments'; it would be made in '$WORK/ro': Read-only file system" ;;
  unwritable_dump)
    ro_mount; STEPS=1000000 small_model > c.yaml; args+=(--dump-output ro/out.safetensors)
    want_code=5 fast=1 want="--dump-output: cannot write in 'ro' (tried $here/ro): Read-only file system" ;;
  idle_rank)  # a warning: the run goes on
    PLACEMENT='{1: [0, 1, 2, 3, 4, 5, 6, 7]}' small_model > c.yaml
    want_code=0 want="placement.experts: rank 2 (of 3) hosts no experts" ;;
  ucx_no_peer_errors)  # UCX_TLS=sm,self cannot report a lost peer (UCX 1.13): warned once
    "$MOED" --version | grep -q 'transports: .*ucx' || { echo "SKIP: built without UCX"; exit 77; }
    export UCX_TLS=sm,self
    small_model | sed 's/^runtime:/runtime:\n  transport: ucx/' > c.yaml
    want_code=0 want="UCX: the transports in use cannot report a lost peer (UCX_TLS=sm,self)" ;;
  ucx_peer_errors_off)  # runtime.ucx_peer_errors: false: not asked for, so not warned
    "$MOED" --version | grep -q 'transports: .*ucx' || { echo "SKIP: built without UCX"; exit 77; }
    export UCX_TLS=sm,self
    small_model | sed 's/^runtime:/runtime:\n  transport: ucx\n  ucx_peer_errors: false/' > c.yaml
    want_code=0 want="" post='! grep -q "cannot report a lost peer" err.log || fail "warned although not asked for"' ;;
  threads_beyond_cpus)  # a warning: rank 1 may use one CPU (taskset), runtime.threads is 2
    cpu=$(taskset -pc $$ | sed 's/.*: *//; s/[-,].*//')  # the first CPU this test may use
    printf '#!/bin/sh\n[ "$OMPI_COMM_WORLD_RANK" = 1 ] && exec taskset -c %s "%s" "$@"\nexec "%s" "$@"\n' \
      "$cpu" "$MOED" "$MOED" > moed_rank1_one_cpu
    chmod +x moed_rank1_one_cpu; MOED=$PWD/moed_rank1_one_cpu
    small_model | sed 's/^runtime:/runtime:\n  threads: 2/' > c.yaml
    want_code=0 want="runtime.threads: 2, but rank 1 ($(hostname)) may use 1 CPU (its affinity mask)"
    if (( $(nproc) < 2 )); then  # every rank has one CPU here
      want="runtime.threads: 2, but 3 of 3 ranks may use fewer CPUs"
    fi ;;
  threads_beyond_cpus_all)  # every rank on one CPU: one warning counting them
    cpu=$(taskset -pc $$ | sed 's/.*: *//; s/[-,].*//')
    printf '#!/bin/sh\nexec taskset -c %s "%s" "$@"\n' "$cpu" "$MOED" > moed_one_cpu
    chmod +x moed_one_cpu; MOED=$PWD/moed_one_cpu
    small_model | sed 's/^runtime:/runtime:\n  threads: 3/' > c.yaml
    want_code=0 want="runtime.threads: 3, but 3 of 3 ranks may use fewer CPUs (their affinity masks; the fewest: rank 0 ($(hostname)), 1)" ;;
  warmup_only)  # no token kept in a recorded step: every layer's balance unknown (null,
    # "-"), not 0 (which reads as "all on one expert")
    PROF=true STEPS=2 small_model > c.yaml
    want_code=0 want="profiler: all 2 steps are warm-up (profiler.warmup_steps 5)"
    post='python3 - "$(ls -d "$WORK"/experiments/*/ | tail -1)" <<'"'"'PY'"'"'
import json, sys
s = json.load(open(sys.argv[1] + "summary.json"))
for y in s["layers"]:
    assert all(y[k] is None for k in ("gini", "cv", "entropy_norm", "max_mean")), y
print("balance unknown in", len(s["layers"]), "layers")
PY' ;;
  no_profiled_rank)  # profiled_ranks: [] runs, with a warning: its report holds no figures
    PROF=true STEPS=2 small_model | sed 's/^  enabled: true/  enabled: true\n  warmup_steps: 0\n  profiled_ranks: []/' > c.yaml
    want_code=0 want="profiler.profiled_ranks: [] profiles no rank: the report will hold no figures" ;;
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
    ckdir qwen3_moe f32 2 shape
    want_code=4 want="ck/model-00002-of-00002.safetensors: tensor 'model.layers.1.mlp.experts.0.gate_proj.weight' has shape [49, 64] but [48, 64] was expected" ;;
  ckpt_fp8_no_scale)
    ckdir deepseek_v3 fp8 2 no_scale
    want_code=4 want="ck/model.safetensors.index.json: FP8 weight 'model.layers.1.mlp.experts.0.gate_proj.weight' has no scale tensor 'model.layers.1.mlp.experts.0.gate_proj.weight_scale_inv' in the index" ;;
  ckpt_fp8_no_scale_one)  # one file: the file lacks it
    ckdir deepseek_v3 fp8 1 no_scale
    want_code=4 want="ck/model.safetensors: FP8 weight 'model.layers.1.mlp.experts.0.gate_proj.weight' has no scale tensor 'model.layers.1.mlp.experts.0.gate_proj.weight_scale_inv'" ;;
  ckpt_lfs_pointer)  # a clone without git lfs: the shard is the pointer's text, said so
    ckdir mixtral f32 1
    printf 'version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 4943162240\n' \
      > ck/model.safetensors
    want_code=4 want="ck/model.safetensors: a Git LFS pointer (a text file that names the weights), not the weights: fetch them (git lfs pull in the clone, or hf download)" ;;
  ckpt_quant_method)  # GPTQ, AWQ, ...: their tensors are not moed's; refused by name at once
    ckdir mixtral f32 1
    python3 - ck/config.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["quantization_config"] = {"quant_method": "gptq", "bits": 4}
json.dump(c, open(sys.argv[1], "w"))
PY
    want_code=4 want="ck/config.json: quantization_config.quant_method 'gptq': moed reads unquantised weights (BF16, F16, F32), block FP8 (fp8: DeepSeek-V3, Kimi-K2) and MXFP4 (mxfp4: gpt-oss)" ;;
  ckpt_swiglu_alpha)  # GptOssConfig's swiglu_alpha other than 1.702: refused, not ignored
    ckdir gpt_oss f32 1
    python3 - ck/config.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["swiglu_alpha"] = 1.5
json.dump(c, open(sys.argv[1], "w"))
PY
    want_code=4 want="ck/config.json: swiglu_alpha 1.5: moed's gpt-oss activation has the released models' 1.702 fixed" ;;
  ckpt_int_key)  # a layer rule's key that is no integer: named, not the family's default
    ckdir deepseek_v3 f32 1
    sed -i 's/"first_k_dense_replace": 1,/"first_k_dense_replace": "1",/' ck/config.json
    want_code=4 want="ck/config.json: key 'first_k_dense_replace' must be an integer" ;;
  ckpt_int_real)  # 1.0 is 1 (transformers reads it so): layer 1 is MoE (V3's default, 3, made
    # it dense, and the run refused model.layers [1])
    ckdir deepseek_v3 f32 1 "" '  layers: [1]\n'
    sed -i 's/"first_k_dense_replace": 1,/"first_k_dense_replace": 1.0,/' ck/config.json
    grep -q '"first_k_dense_replace": 1.0,' ck/config.json || fail "config.json not edited"
    want_code=0 want="" post='grep -q "tokens/s" out.log || fail "no run: $(cat out.log)"' ;;
  ckpt_path_long)  # a checkpoint folder's path of 1000 bytes (model.checkpoint takes 1023):
    # its index and config.json paths are longer, and were cut short ("no index there")
    long=$WORK; while (( ${#long} < 1000 - 60 )); do long=$long/$(printf 'p%.0s' {1..50}); done
    long=$long/$(printf 'q%.0s' $(seq $((1000 - ${#long} - 1))))
    mkdir -p "$long" && cd "$long"
    ckdir qwen3_moe f32 2
    sed -i "s|^  checkpoint: ck|  checkpoint: $long/ck|" c.yaml
    (( ${#long} + 3 == 1003 )) || fail "the path is ${#long} + 3 bytes, want 1003"
    want_code=0 want="" post='grep -q "tokens/s" out.log || fail "no run: $(cat out.log)"' ;;
  ckpt_dense_layer)
    ckdir deepseek_v3 f32 1 "" '  layers: [1, 0]\n'
    want_code=4 want="c.yaml:3:15: model.layers: layer 0 is a dense layer" ;;
  ckpt_layer_range)
    ckdir gpt_oss f32 1 "" '  layers: [5]\n'
    want_code=4 want="model.layers: layer 5 is out of range" ;;
  ckpt_contradicts)
    ckdir mixtral f32 1 "" '  hidden_dim: 128\n'
    want_code=4 want="c.yaml:3:15: model.hidden_dim: 128 contradicts ck/config.json (key 'hidden_size' 64)" ;;
  fifo_weights)  # a FIFO with no writer: refused at once, never waited on (open() blocked)
    mkfifo w.fifo; WEIGHTS=w.fifo small_model > c.yaml
    want_code=4 fast=1
    want="model.weights: 'w.fifo' (tried $here/w.fifo) is a FIFO (named pipe), not a .safetensors file" ;;
  fifo_input)
    mkfifo in.fifo; INPUT=in.fifo small_model > c.yaml
    want_code=4 fast=1
    want="workload.input: 'in.fifo' (tried $here/in.fifo) is a FIFO (named pipe), not a .safetensors file" ;;
  fifo_ckpt_config)
    ckdir mixtral f32 1; rm ck/config.json; mkfifo ck/config.json
    want_code=4 fast=1 want="ck/config.json: is a FIFO (named pipe), not a regular file" ;;
  fifo_ckpt_shard)  # the one model.safetensors of a checkpoint folder
    ckdir mixtral f32 1; rm ck/model.safetensors; mkfifo ck/model.safetensors
    want_code=4 fast=1 want="ck/model.safetensors: is a FIFO (named pipe), not a regular file" ;;
  fifo_ckpt_index)
    ckdir qwen3_moe f32 2; rm ck/model.safetensors.index.json; mkfifo ck/model.safetensors.index.json
    want_code=4 fast=1 want="ck/model.safetensors.index.json: is a FIFO (named pipe), not a regular file" ;;
  fifo_ckpt_shards)  # a shard the index names
    ckdir qwen3_moe f32 2; rm ck/model-00002-of-00002.safetensors
    mkfifo ck/model-00002-of-00002.safetensors
    want_code=4 fast=1
    want="names shard ck/model-00002-of-00002.safetensors, which is not a regular file (a FIFO (named pipe))" ;;
  ckpt_is_file)  # model.checkpoint names a .safetensors file, not a folder
    ckpt; printf 'model:\n  checkpoint: ckpt.safetensors\n' > c.yaml
    want_code=4
    want="model.checkpoint: 'ckpt.safetensors' is a file, not a folder: a Hugging Face checkpoint folder (config.json with model.safetensors, or model.safetensors.index.json and the shards it names) is expected; one .safetensors file goes in model.weights instead" ;;
  ckpt_is_config)  # ... or its config.json
    ckdir mixtral f32 1; sed -i 's|checkpoint: ck|checkpoint: ck/config.json|' c.yaml
    want_code=4 want="model.checkpoint: 'ck/config.json' is a file, not a folder: a Hugging Face checkpoint folder (config.json with model.safetensors, or model.safetensors.index.json and the shards it names) is expected; name the folder that holds this config.json" ;;
  ckpt_mxfp4_inputs)  # gpt-oss as released, but ffn 48: not whole 32-value scale blocks
    ckdir gpt_oss mxfp4 1
    grep -q '"quant_method": "mxfp4"' ck/config.json || fail "config.json does not say mxfp4"
    want_code=4
    want="MXFP4 tensor 'model.layers.0.mlp.experts.down_proj' has 48 inputs, not a multiple of its 32-value scale blocks" ;;
  ckpt_mxfp4_nan_scale)  # a 255 scale (e8m0's NaN): refused naming it, not an all-NaN output
    CKF=64 ckdir gpt_oss mxfp4 1 mxfp4_nan
    want_code=4
    want="tensor 'model.layers.0.mlp.experts.gate_up_proj_scales' (U8, e8m0) holds NaN (255) at element 7: moed refuses weights that are not finite" ;;
  ckpt_mxfp4_big_scale)  # a 254 scale (2^127): the block's weights overflow F32, as a NaN would
    CKF=64 ckdir gpt_oss mxfp4 1 mxfp4_big
    want_code=4
    want="tensor 'model.layers.0.mlp.experts.gate_up_proj_scales' (U8, e8m0) scale 254 (2^127) at element 7 makes its block's" ;;
  ckpt_fp8_block_huge)  # a block side near 2^63 once made the scales' shape 0 and read past them
    ckdir deepseek_v3 fp8 1
    sed -i 's/"weight_block_size": *\[[^]]*\]/"weight_block_size": [9223372036854775807, 128]/' ck/config.json
    grep -q 9223372036854775807 ck/config.json || fail "config.json has no weight_block_size to spoil"
    want_code=4
    want="quantization_config.weight_block_size must be [rows, cols] of integers in [1, 65536]" ;;
  ckpt_nan_scale)  # a NaN FP8 scale: refused naming the tensor, not an all-NaN output
    ckdir deepseek_v3 fp8 1 nan_scale
    want_code=4
    want="tensor 'model.layers.1.mlp.experts.0.gate_proj.weight_scale_inv' (F32) holds NaN at element 0" ;;
  ckpt_nan_fp8)  # a NaN code in an FP8 weight
    ckdir deepseek_v3 fp8 1 nan_fp8
    want_code=4
    want="tensor 'model.layers.1.mlp.experts.0.gate_proj.weight' (F8_E4M3) holds NaN at element 3 (code 0x7f" ;;
  ckpt_inf_bf16)  # an infinite BF16 weight
    ckdir mixtral bf16 1 inf_weight
    want_code=4
    want="tensor 'model.layers.0.block_sparse_moe.experts.1.w1.weight' (BF16) holds +inf at element 5" ;;
  ckpt_top_k)  # the checkpoint contradicts itself: its file is named, exit 4 (not the YAML's 3)
    ckdir mixtral f32 1; sed -i 's/"num_experts_per_tok": [0-9]*/"num_experts_per_tok": 20/' ck/config.json
    want_code=4 want="ck/config.json: key 'num_experts_per_tok' 20 is more than key 'num_local_experts' 8 (moed's model.top_k and model.num_experts)" ;;
  ckpt_n_group)
    ckdir deepseek_v3 f32 1; sed -i 's/"n_group": [0-9]*/"n_group": 3/' ck/config.json
    want_code=4 want="ck/config.json: model.n_group 3 / model.topk_group" ;;
  input_rows)  # both shapes in the message, before the run (--check-config too)
    ckdir mixtral f32 1; sed -i 's/  tokens_per_step: 12/  tokens_per_step: 20/' c.yaml
    want_code=4 want="ck/input.safetensors: workload.input needs tensor 'input' of shape [20, 64] (workload.tokens_per_step, model.hidden_dim); the file's 'input' has shape [12, 64]; set workload.tokens_per_step to its rows, or leave the key out" ;;
  input_rows_default)  # no tokens_per_step: the input's 12 rows (the output has as many)
    ckdir mixtral f32 1; sed -i '/  tokens_per_step: 12/d' c.yaml
    args+=(--dump-output out.safetensors)
    want_code=0 want="" post='grep -aq "\"shape\":\[12,64\]" out.safetensors || fail "the output is not [12, 64]: $(head -c 120 out.safetensors)"' ;;
  too_big)  # 768 GiB an expert: more than any node's memory; refused before the run
    H=65536 F=1048576 E=128 LAYERS=1024 PROF=true STEPS=1000000 small_model > c.yaml
    want_code=3 fast=1 no_folder=1
    want="model: rank 1 would hold 50331648.0 GiB of weights (65536 expert-layers of 768 GiB each in F32), more than " ;;
  too_big_shared)  # the master's shared experts (1024 layers of 3 x 65536 x 1048576) counted
    # as they will be held: BF16 with model.dtype bf16 where the CPU computes in BF16 (F32
    # would be 786434.3 GiB), with the gates' 2.0 GiB and the shared experts' bias-free rows
    H=65536 F=256 E=8 LAYERS=1024 PROF=true STEPS=1000000 small_model |
      sed 's/^model:/model:\n  family: deepseek_v3\n  dtype: bf16\n  n_shared_experts: 1\n  shared_ffn_dim: 1048576/' > c.yaml
    want_code=3 fast=1 no_folder=1
    said=$("$MOED" --config c.yaml --check-config --ranks 3 2>&1 || true)  # exit 3, as wanted
    if grep -q "shared experts (F32)" <<< "$said"; then
      grep -q avx512_bf16 /proc/cpuinfo && fail "shared experts counted in F32 on a BF16 CPU"
      want="model: rank 0 would hold 786434.3 GiB of weights (the gates and shared experts (F32)), more than "
    else
      want="model: rank 0 would hold 393218.3 GiB of weights (the gates and shared experts (BF16)), more than "
    fi ;;
  too_big_ulimit)  # 2.6 GiB on each expert rank, under ulimit -v 2.4 GiB (MPI starts in it)
    [[ -z "${MOED_SANITIZED:-}" ]] || { echo "SKIP: ASan reserves more address space than this"; exit 77; }
    ulimit -v 2500000 || { echo "SKIP: cannot set ulimit -v"; exit 77; }
    H=4096 F=14336 E=8 LAYERS=1 PROF=true STEPS=1000000 small_model > c.yaml
    want_code=3 fast=1 no_folder=1
    want="model: rank 1 would hold 2.6 GiB of weights (4 expert-layers of 0.656 GiB each in F32), more than the address-space limit, ulimit -v (2.4 GiB); raise ulimit -v" ;;
  listen_no_port)  # refused before the run: no report folder, --check-config too
    PROF=true STEPS=1000000 small_model | with_listen localhost > c.yaml
    want_code=3 fast=1 no_folder=1
    want="profiler.listen: localhost: expected HOST:PORT such as 127.0.0.1:9464" ;;
  listen_port_range)  # a port past 65535: refused, not bound modulo 65536 (70000 -> 4464)
    PROF=true STEPS=1000000 small_model | with_listen 127.0.0.1:70000 > c.yaml
    want_code=3 fast=1 no_folder=1
    want="profiler.listen: 127.0.0.1:70000: port '70000' is not a number in 0..65535" ;;
  fifo_config)  # the config a FIFO nobody writes to: moed waits, says so, and SIGTERM ends
    # it (it sat in open() for ever, deaf to SIGINT and SIGTERM); a pipe (`<(...)`) is read
    mkfifo f.yaml
    "$MOED" --config f.yaml --check-config --ranks 3 > out.log 2> err.log & pid=$!
    for _ in $(seq 100); do grep -q "waiting for the config" err.log && break; sleep 0.1; done
    grep -q "^moed: waiting for the config from 'f.yaml' (not a file: a pipe or a terminal)" err.log \
      || { cat err.log; fail "no word that it waits for the FIFO"; }
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    ! kill -0 "$pid" 2> /dev/null || { kill -9 "$pid"; fail "SIGTERM did not end the wait"; }
    code=0; wait "$pid" || code=$?
    [[ $code -eq 130 ]] || { cat err.log; fail "stopped while waiting: exit $code, want 130"; }
    small_model > c.yaml
    "$MOED" --config <(cat c.yaml) --check-config --ranks 3 > pipe.log 2>&1 \
      || { cat pipe.log; fail "a config given as a pipe <(...) was not read"; }
    echo "PASS $1: a FIFO waited on until SIGTERM (exit 130), a pipe read"
    exit 0 ;;
  control_token_short)  # MOED_CONTROL_TOKEN too short: refused before the run (--check-config too)
    export MOED_CONTROL_TOKEN=short
    PROF=true STEPS=1000000 small_model | with_listen 127.0.0.1:0 > c.yaml
    want_code=3 fast=1 no_folder=1
    want="MOED_CONTROL_TOKEN: 5 bytes; a control token needs at least 16" ;;
  listen_in_use)
    hold_port; PROF=true STEPS=1000000 small_model | with_listen "127.0.0.1:$PORT" > c.yaml
    want_code=3 fast=1 no_folder=1
    want="profiler.listen: 127.0.0.1:$PORT: cannot listen there: Address already in use" ;;
  listen_not_here)  # an address of no interface of this host (TEST-NET-1)
    PROF=true STEPS=1000000 small_model | with_listen 192.0.2.1:9464 > c.yaml
    want_code=3 fast=1 no_folder=1
    want="profiler.listen: 192.0.2.1:9464: cannot listen there: Cannot assign requested address (not an address of this host)" ;;
  output_dangling)  # a dangling symbolic link: mkdir says EEXIST, but no folder can be made in it
    ln -s "$WORK/gone" "$WORK/experiments"; PROF=true small_model > c.yaml
    want_code=5 no_folder=1
    want="profiler.output_dir: cannot write in '$WORK/experiments': '$WORK/experiments' is a symbolic link to '$WORK/gone', which does not exist" ;;
  output_newline)  # it would split the report's headline
    PROF=true small_model | with_output_dir "\"$WORK/experiments\\\\nx\"" > c.yaml
    want_code=3 no_folder=1
    want="profiler.output_dir: the path holds a control character (byte 0x0a at offset $((${#WORK} + 12)): a newline)" ;;
  output_too_long)  # no room under it for a run folder and its files: refused before the run
    long=$WORK/$(printf 'o%.0s' {1..230})/$(printf 'p%.0s' {1..230})/$(printf 'q%.0s' {1..230})/$(printf 'r%.0s' {1..230})
    PROF=true STEPS=1000000 small_model | with_output_dir "$long" > c.yaml
    want_code=3 fast=1 no_folder=1
    want="profiler.output_dir: $(( ${#long} )) bytes; a run folder and its files' names go under it, so it must be shorter than 896 bytes" ;;
  dump_name_too_long)  # the file and its temporary beside it must fit NAME_MAX: a name of
    # 245 bytes is legal, its FILE.tmp.PID is not (found only at the end before the check)
    STEPS=1000000 small_model > c.yaml; args+=(--dump-output "$(printf 'z%.0s' {1..233}).safetensors")
    want_code=5 fast=1 want="--dump-output: the file name is 245 bytes; with its temporary's suffix it must fit the file system's 255" ;;
  *) fail "unknown case $1" ;;
esac
set +e
start=$SECONDS
if [[ "${2:-}" == check ]]; then
  timeout -k 5 60 "$MOED" "${args[@]}" --check-config --ranks "${check_ranks:-3}" > out.log 2> err.log
else
  mpirun_moed 3 "${args[@]}" > out.log 2> err.log
fi
code=$?
set -e
elapsed=$((SECONDS - start))
cat err.log
[[ $code -ne 124 && $code -ne 137 ]] || fail "moed hung (killed by timeout)"
[[ $code -eq $want_code ]] || fail "exit code $code, want $want_code"
if [[ $fast -eq 1 ]]; then
  [[ $elapsed -le 60 ]] || fail "took ${elapsed}s: the check did not come before the steps"
  ! grep -q 'report:' out.log || fail "a report: line was printed for a run that failed"
fi
if [[ $no_folder -eq 1 ]] && compgen -G "$WORK/experiments*/*" > /dev/null; then
  find "$WORK"/experiments*; fail "a report folder was made for a job refused at start"
fi
if [[ $no_folder -eq 1 && ! -L "$WORK/experiments" ]] && compgen -G "$WORK/experiments*" > /dev/null; then
  find "$WORK"/experiments*; fail "an output folder was made for a job refused at start"
fi
n=$(grep -c 'moed: error' err.log || true)
if [[ $want_code -eq 0 ]]; then
  [[ $n -eq 0 ]] || fail "$n error lines, want none"
  if [[ -z "$want" ]]; then  # no warning expected: the case's own check of what it made
    [[ "${2:-}" == check ]] || eval "$post"
    echo "PASS $1${2:+ ($2)}: exit 0 in ${elapsed}s"
    exit 0
  fi
  w=$(grep 'moed: warning' err.log | grep -cF -- "$want" || true)
  [[ $w -eq 1 ]] || fail "warning '$want' printed $w times, want exactly once"
  [[ -z "$post" || "${2:-}" == check ]] || eval "$post"
  echo "PASS $1: exit 0 with the warning in ${elapsed}s"
  exit 0
fi
[[ $n -eq 1 ]] || fail "error printed $n times, want exactly once"
grep -qF -- "$want" err.log || fail "message lacks '$want'"
grep -q 'moed: error:' err.log || fail "the error was not printed by rank 0 (no plain 'moed: error:' line)"
echo "PASS $1${2:+ ($2)}: exit $code in ${elapsed}s"
