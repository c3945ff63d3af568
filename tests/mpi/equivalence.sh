#!/usr/bin/env bash
# equivalence.sh CASE: the distributed output equals the single-rank output.
source "$(dirname "$0")/common.sh"
# family NAME [KEY: VALUE]...: add model.family NAME and the knobs to the config on stdin.
family() {
  local lines="  family: $1"; shift
  while [[ $# -ge 2 ]]; do lines+="\n  $1 $2"; shift 2; done
  sed "s/^model:/model:\n$lines/"
}
case "$1" in
  master)      PLACEMENT='{1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}' small_model > c.yaml ;;
  master_hosts) MASTER=1 PLACEMENT='{0: [0, 2, 4, 6], 1: [1], 2: [3, 5, 7]}' small_model > c.yaml ;;
  symmetric)   ROUTING=symmetric TOKENS=100 small_model > c.yaml ;;
  gelu)        ROUTING=symmetric ACT=gelu NORM=false K=3 small_model > c.yaml ;;
  capacity_master)    CF=1.0 SKEW=1.5 small_model > c.yaml ;;
  capacity_symmetric) ROUTING=symmetric CF=1.0 SKEW=1.5 TOKENS=100 small_model > c.yaml ;;
  # runtime.chunks: the overlapped step gives the same output as the plain one (7 does
  # not divide the blocks evenly; some pieces are empty).
  chunks_master)   CHUNKS=4 small_model > c.yaml ;;
  chunks_uneven)   CHUNKS=7 PLACEMENT='{0: [0, 2, 4, 6], 1: [1], 2: [3, 5, 7]}' small_model > c.yaml ;;
  chunks_capacity) CHUNKS=3 ROUTING=symmetric CF=1.0 SKEW=1.5 TOKENS=100 small_model > c.yaml ;;
  chunks_ucx)
    export UCX_TLS=${MOED_TEST_UCX_TLS:-${UCX_TLS:-sm,self}}
    CHUNKS=4 ROUTING=symmetric TOKENS=100 small_model | sed 's/^runtime:/runtime:\n  transport: ucx/' > c.yaml ;;
  ucx)
    # 3 ranks over UCX (1 rank: no peers, the same config) against the MPI reference
    # output. On this host UCX picks shared memory and self; MOED_TEST_UCX_TLS overrides
    # (e.g. tcp,self). Skipped (77), not failed, when the build has no UCX or UCX cannot
    # start here (see below).
    export UCX_TLS=${MOED_TEST_UCX_TLS:-${UCX_TLS:-sm,self}}
    ROUTING=symmetric TOKENS=100 small_model | sed 's/^runtime:/runtime:\n  transport: ucx/' > c.yaml ;;
  rndv_ucx)
    # Rows large enough for UCX's rendezvous, sent by put_zcopy (the sender writes into
    # the receiver): before the transport kept every worker progressing until all ranks
    # had closed their endpoints, a rank that destroyed its worker first left a peer's
    # flush to fail ("UCX ERROR ... Endpoint timeout", 3 to 6 lines a run). It showed
    # with UCX's own choice of transports (TCP among them), not with sm,self: UCX_TLS is
    # left to UCX unless MOED_TEST_UCX_TLS says otherwise.
    export UCX_RNDV_SCHEME=put_zcopy
    [[ -n ${MOED_TEST_UCX_TLS:-} ]] && export UCX_TLS=$MOED_TEST_UCX_TLS
    H=512 F=512 TOKENS=512 small_model | sed 's/^runtime:/runtime:\n  transport: ucx/' > c.yaml ;;
  # model.family with random weights: each family's routing (and shared experts on the
  # routing ranks: the master, or every rank in symmetric routing).
  family_qwen2_moe)
    ROUTING=symmetric TOKENS=100 NORM=false small_model | family qwen2_moe n_shared_experts: 1 shared_ffn_dim: 384 > c.yaml ;;
  family_qwen3_moe)   K=4 small_model | family qwen3_moe > c.yaml ;;
  family_deepseek_v2)
    NORM=false small_model | family deepseek_v2 topk_method: group_limited_greedy n_group: 4 topk_group: 2 n_shared_experts: 2 routed_scaling_factor: 1.5 > c.yaml ;;
  family_deepseek_v3)
    ROUTING=symmetric TOKENS=100 K=3 small_model | family deepseek_v3 n_group: 4 topk_group: 2 n_shared_experts: 1 routed_scaling_factor: 2.5 > c.yaml ;;
  family_gpt_oss)     ACT=swiglu_oai CHUNKS=3 small_model | family gpt_oss swiglu_limit: 7.0 > c.yaml ;;
  # Replicas (an expert under several ranks) and per-layer placement (placement.layers):
  # the replicated expert's tokens are split between its copies, the output stays the same.
  replicas_master)
    CF=1.0 SKEW=1.5 CHUNKS=2 PLACEMENT='{1: [0, 1, 2, 3, 4], 2: [0, 4, 5, 6, 7]}' small_model > c.yaml ;;
  replicas_symmetric)
    ROUTING=symmetric TOKENS=100 CF=1.0 SKEW=1.5 PLACEMENT='{0: [0, 1, 2], 1: [0, 3, 4, 5], 2: [0, 5, 6, 7]}' small_model > c.yaml ;;
  layers_master)
    SKEW=1.5 small_model | sed 's/^  experts: auto/  experts: auto\n  layers: {1: {1: [0, 1], 2: [0, 2, 3, 4, 5, 6, 7]}}/' > c.yaml ;;
  layers_symmetric)
    ROUTING=symmetric TOKENS=100 SKEW=1.5 LAYERS=3 small_model | sed 's/^  experts: auto/  experts: auto\n  layers: {0: {0: [0], 1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}, 2: {0: [1, 2, 3, 4, 5, 6, 7], 2: [0]}}/' > c.yaml ;;
  # Online rebalancing every 2 steps on skewed routing: weights move between steps, the
  # placement changes (with replicas), the output does not.
  rebalance_master)
    SKEW=1.5 STEPS=7 CHUNKS=2 small_model | sed 's/^runtime:/runtime:\n  rebalance_every: 2\n  redundant_experts: 2/' > c.yaml ;;
  rebalance_bf16) # weights held in BF16 (compute bf16 where the CPU has it): plain copies move.
    # F32 rows on the wire: with BF16 rows runtime.dedup rounds each rank's sum of a token's
    # experts once, so the output moves with the placement by a BF16 rounding (dedup_bf16).
    SKEW=1.5 STEPS=7 small_model | sed 's/^model:/model:\n  dtype: bf16/; s/^runtime:/runtime:\n  wire_dtype: f32\n  rebalance_every: 2\n  redundant_experts: 2/' > c.yaml ;;
  rebalance_bf16_f32) # the same with no native BF16 (forced): held in BF16 for moed's F32
    # kernels, the plain copies move and arrive laid out for them
    export MOED_CPU_NO_BF16=1
    MPIRUN_FLAGS+=" -x MOED_CPU_NO_BF16"
    SKEW=1.5 STEPS=7 small_model | sed 's/^model:/model:\n  dtype: bf16/; s/^runtime:/runtime:\n  wire_dtype: f32\n  rebalance_every: 2\n  redundant_experts: 2/' > c.yaml ;;
  # runtime.dedup. A token goes once to each rank holding some of its experts; the rank sums
  # their weighted outputs (F32, ascending expert id) and returns one row; the routing rank
  # adds its rows in ascending rank order. Top-3, so a token's sum groups differently on 1
  # and on 3 ranks (top-2 sums are exact either way: a + b = b + a).
  dedup_off)  # runtime.dedup: false (one row per (token, expert), the CUDA back-end's way)
    ROUTING=symmetric TOKENS=100 K=3 CF=1.0 SKEW=1.5 CHUNKS=3 PLACEMENT='{0: [0, 1, 2], 1: [0, 3, 4, 5], 2: [0, 5, 6, 7]}' \
      small_model | sed 's/^runtime:/runtime:\n  dedup: false/' > c.yaml ;;
  dedup_bf16)  # BF16 weights, compute and rows: each rank's sum is rounded to BF16 once
    ROUTING=symmetric TOKENS=100 K=3 CF=1.0 SKEW=1.5 CHUNKS=3 LAYERS=1 PLACEMENT='{0: [0, 1, 2], 1: [0, 3, 4, 5], 2: [0, 5, 6, 7]}' \
      small_model | sed 's/^model:/model:\n  dtype: bf16/' > c.yaml ;;
  # placement.copies: columns: every expert split into column shares over the expert ranks
  # (each computes its columns of every expert; the ranks' rows add up): top-3 with capacity
  # drops and chunks, symmetric (3 shares of 128), gpt-oss's biases (the down bias on share
  # 0), over UCX. Within the suite's 1e-4 of one rank, not bit for bit: the down
  # projection's F32 sum is cut in pieces (2e-7 relative measured).
  columns_master)
    K=3 CF=1.0 SKEW=1.5 CHUNKS=3 small_model | sed 's/^placement:/placement:\n  copies: columns/' > c.yaml ;;
  columns_symmetric)
    ROUTING=symmetric TOKENS=100 K=3 CF=1.0 SKEW=1.5 F=384 small_model \
      | sed 's/^placement:/placement:\n  copies: columns/' > c.yaml ;;
  columns_gpt_oss)
    ACT=swiglu_oai CHUNKS=2 small_model | family gpt_oss swiglu_limit: 7.0 \
      | sed 's/^placement:/placement:\n  copies: columns/' > c.yaml ;;
  columns_ucx)
    export UCX_TLS=${MOED_TEST_UCX_TLS:-${UCX_TLS:-sm,self}}
    CHUNKS=2 K=3 small_model | sed 's/^placement:/placement:\n  copies: columns/; s/^runtime:/runtime:\n  transport: ucx/' > c.yaml ;;
  # placement.copies: balance: every expert whole on every expert rank, each step all of its
  # tokens on the copy whose rank has the fewest experts so far (top-3, capacity, chunks;
  # symmetric; one row per (token, expert)).
  balance_master)
    K=3 CF=1.0 SKEW=1.5 CHUNKS=3 small_model | sed 's/^placement:/placement:\n  copies: balance/' > c.yaml ;;
  balance_symmetric)
    ROUTING=symmetric TOKENS=100 K=3 CF=1.0 SKEW=1.5 small_model \
      | sed 's/^placement:/placement:\n  copies: balance/' > c.yaml ;;
  balance_dedup_off)
    K=3 SKEW=1.5 PLACEMENT='{1: [0, 1, 2, 3, 4, 5, 6, 7], 2: [0, 2, 4, 6]}' small_model \
      | sed 's/^placement:/placement:\n  copies: balance/; s/^runtime:/runtime:\n  dedup: false/' > c.yaml ;;
  rebalance_symmetric)
    ROUTING=symmetric TOKENS=100 CF=1.0 SKEW=1.5 STEPS=7 small_model | sed 's/^runtime:/runtime:\n  rebalance_every: 2\n  redundant_experts: 3/' > c.yaml ;;
  # Weights held as stored (codes and scales) move. FP8 in f32: in bf16 a call of few rows
  # (the small-batch kernels: exact FP8 values) and one of many (oneDNN: code x scale
  # rounded to BF16) round differently, and a replica's share of rows decides which it is.
  # Every call on the kernels (small_batch_rows 128): in f32 compute (a CPU without BF16)
  # the kernels and the BLAS sum in another order, and the AVX2 switch points (FP8 16,
  # MXFP4 8 rows) would put a replica's share on one path and the whole on the other.
  rebalance_fp8|rebalance_mxfp4)
    mkdir ck
    compute=auto
    if [[ $1 == rebalance_fp8 ]]; then
      compute=f32
      "$MAKE_CKPT" --dir ck deepseek_v3 fp8 160 136 8 2 3 1 96 > /dev/null || fail "make_checkpoint"
    else
      "$MAKE_CKPT" --dir ck gpt_oss mxfp4 96 64 8 2 2 1 96 > /dev/null || fail "make_checkpoint"
    fi
    # F32 rows on the wire, as in rebalance_bf16 (BF16 rows: mpi.equivalence.dedup_bf16)
    printf 'model:\n  checkpoint: %s\nplacement:\n  experts: auto\nruntime:\n  compute_dtype: %s\n  wire_dtype: f32\n  small_batch_rows: 128\n  rebalance_every: 2\n  redundant_experts: 2\nworkload:\n  tokens_per_step: 96\n  steps: 7\n  input: %s\n  routing_skew: 1.5\nprofiler:\n  enabled: false\n' \
      "$WORK/ck" "$compute" "$WORK/ck/input.safetensors" > c.yaml ;;
  # The MPI transport sends a peer's rows in pieces (transport/mpi.c). 1 KiB pieces of
  # 512-byte rows: 2 rows a message, an odd count leaves a short last piece; with chunks
  # and symmetric routing every rank sends and receives many pieces a slot.
  pieces_master)
    export MOED_MPI_PIECE_KB=1
    TOKENS=97 PLACEMENT='{0: [0, 2, 4, 6], 1: [1], 2: [3, 5, 7]}' small_model > c.yaml ;;
  pieces_symmetric)
    export MOED_MPI_PIECE_KB=1
    CHUNKS=3 ROUTING=symmetric TOKENS=101 CF=1.0 SKEW=1.5 small_model > c.yaml ;;
  # The default pieces (256 KiB) without MPI's single-copy path: 4 KiB rows, ~2 MB a peer,
  # copied through shared memory in fragments (the case the pieces are for).
  pieces_no_cma)
    export OMPI_MCA_btl_vader_single_copy_mechanism=none
    H=1024 F=128 TOKENS=512 small_model > c.yaml ;;
  *) fail "unknown case $1" ;;
esac
# The UCX cases first try one step on 2 ranks, which opens a UCX worker and an endpoint to
# a peer. A build without UCX, or a UCX that cannot start here (no usable transport or
# device for UCX_TLS, peers unreachable over it) cannot run the test: skip (ctest:
# SKIP_RETURN_CODE 77) with moed's own message. Any other failure fails the test, and
# once the probe passes nothing more is excused.
skip() { echo "SKIP: $*"; exit 77; }
ucx_cannot_start='ucp_(config_read|init|worker_create) failed|UCX failed to start on another rank'
ucx_cannot_start+='|ucp_ep_create failed: (Destination is unreachable|No such device)'
if [[ "$1" == *ucx ]] && ! mpirun_moed 2 --config c.yaml --steps 1 --no-progress > probe.log 2>&1; then
  why=$(grep -m1 -o 'moed: error: .*' probe.log || true)
  grep -q 'not available in this build' probe.log && skip "this build has no UCX transport (${why#moed: error: })"
  grep -qE "$ucx_cannot_start" probe.log && skip "UCX cannot start here with UCX_TLS=${UCX_TLS:-unset, UCX picks}: ${why#moed: error: }"
  cat probe.log; fail "UCX probe run (2 ranks, 1 step) failed"
fi
if [[ "$1" == dedup_bf16 ]]; then
  # How a token's experts group into ranks differs between 1 and 3 ranks, and each group's
  # sum is rounded to BF16 once: within one BF16 rounding (2^-8 = 3.9e-3 of a value; one
  # layer, so no later gate sees the difference and picks another expert). Without dedup
  # each (token, expert) row is rounded alike on any placement: within 1e-5 (F32 sums; a
  # call's kernel, small-batch or GEMM, follows its rows: runtime.small_batch_rows).
  same_as_one_rank 3 4e-3
  grep -q 'bf16 rows on the wire' many.log || { echo "SKIP: no BF16 rows on the wire here (a CPU without native BF16 computes and sends F32)"; exit 77; }
  sed 's/^runtime:/runtime:\n  dedup: false/' c.yaml > off.yaml
  "$MOED" --config off.yaml --dump-output one_off.safetensors --no-progress > one_off.log 2>&1 \
    || { cat one_off.log; fail "single-rank run, runtime.dedup: false, failed"; }
  mpirun_moed 3 --config off.yaml --dump-output many_off.safetensors --no-progress > many_off.log 2>&1 \
    || { cat many_off.log; fail "3-rank run, runtime.dedup: false, failed"; }
  "$ST_DIFF" one_off.safetensors many_off.safetensors --tol 1e-5 \
    || fail "runtime.dedup: false with BF16 rows: 3 ranks differ from 1 rank"
else
  same_as_one_rank 3
fi
if [[ "$1" == rebalance_bf16_f32 ]]; then
  grep -q "^experts: bf16 weights, f32 compute" many.log || { cat many.log; fail "not held in BF16 for f32 compute"; }
fi
if [[ "$1" == columns_* ]]; then
  grep -q "; every expert in [23] column shares" many.log || { cat many.log; fail "no column shares said"; }
fi
if [[ "$1" == balance_* ]]; then
  grep -q "; each step an expert's tokens on its copy with the fewest" many.log || { cat many.log; fail "no balance said"; }
fi
if [[ "$1" == dedup_off ]]; then
  # the same on 3 ranks with dedup (the default): only the F32 sums' grouping differs
  sed '/^  dedup: false/d' c.yaml > on.yaml
  mpirun_moed 3 --config on.yaml --dump-output on.safetensors --no-progress > on.log 2>&1 \
    || { cat on.log; fail "3-rank run with runtime.dedup failed"; }
  "$ST_DIFF" many.safetensors on.safetensors --tol 1e-5 || fail "runtime.dedup changed the output"
fi
if [[ "$1" == *ucx || "$1" == chunks_* ]]; then
  # The reference: the same model on 1 rank over MPI, in one chunk.
  sed -e '/^  transport: ucx/d' -e 's/^  chunks: .*/  chunks: 1/' c.yaml > mpi.yaml
  "$MOED" --config mpi.yaml --dump-output ref.safetensors --no-progress > ref.log 2>&1 \
    || { cat ref.log; fail "single-rank MPI run failed"; }
  "$ST_DIFF" ref.safetensors many.safetensors --tol 1e-4 || fail "output differs from 1 rank, 1 chunk, MPI"
fi
if [[ "$1" == capacity_* || "$1" == chunks_capacity || "$1" == dedup_* ]]; then
  # The limit must really bite, the same way on 1 and on 3 ranks.
  d1=$(grep -o 'capacity: [0-9]* of' one.log) || fail "no capacity line"
  d3=$(grep -o 'capacity: [0-9]* of' many.log) || fail "no capacity line"
  [[ "$d1" == "$d3" ]] || fail "dropped counts differ: '$d1' vs '$d3'"
  [[ "$d1" != "capacity: 0 of" ]] || fail "capacity dropped nothing"
  echo "dropped: $d1"
fi
if [[ "$1" == rebalance_* ]]; then
  # It must really have moved weights: the first rebalance on a skewed run moves some.
  moved=$(grep -o 'rebalance before step 2: [0-9]* experts moved' many.log | grep -o '[0-9]* experts') \
    || { cat many.log; fail "no rebalance line for step 2"; }
  [[ ${moved% experts} -gt 0 ]] || fail "the first rebalance moved no expert"
  [[ $(grep -c 'rebalance before step' many.log) -eq 3 ]] || fail "want 3 rebalances (steps 2, 4, 6)"
  echo "first rebalance: $moved moved"
  if [[ "$1" == rebalance_fp8 || "$1" == rebalance_mxfp4 ]]; then
    grep -q "^experts: .* weights held as stored" many.log || { cat many.log; fail "not held as stored"; }
  fi
fi
if [[ "$1" == replicas_* || "$1" == layers_* || "$1" == rebalance_* || "$1" == dedup_off ]]; then
  "$ST_DIFF" one.safetensors many.safetensors --tol 1e-5 || fail "output differs from 1 rank by more than 1e-5"
fi
if [[ "$1" == *ucx ]] && grep -q 'UCX  *ERROR' many.log; then
  grep 'UCX  *ERROR' many.log; fail "UCX reported errors"
fi
grep -q 'tokens/s: [0-9]' many.log || fail "no tokens/s line"
echo "PASS $1"
