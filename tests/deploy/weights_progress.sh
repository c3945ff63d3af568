#!/usr/bin/env bash
# weights_progress.sh CASE: a weights load large enough to take seconds says what it builds
# (rank 0, stdout) and when it is done; a small one prints nothing about weights.
#   one_rank:   one rank builds all 8 experts of 1 layer (336 MiB)
#   master:     3 ranks, rank 0 only routes: it says the expert ranks build theirs
#   master_checkpoint: the same from a BF16 checkpoint (model.dtype auto): the line gives the
#               type and bytes the expert ranks hold (BF16, 24 MiB an expert; F32 and 48 MiB
#               on a CPU with neither native BF16 nor moed's F32 kernels), not rank 0's
#               own (it once said F32 and twice the bytes: rank 0 holds no expert)
#   symmetric:  3 ranks, rank 0 hosts 3 experts: it reports its own progress, and says so
#   layers:     placement.layers: rank 0's count differs per layer, the bytes add them up
#   small:      configs of the test size print no weights line
source "$(dirname "$0")/../mpi/common.sh"
# 8 experts of hidden 1024, ffn 3584 (SwiGLU): (2 x 3584 + 3584) x 1024 x 4 B = 42 MiB each.
export H=1024 F=3584 TOKENS=32 STEPS=1
case "$1" in
  one_rank)
    LAYERS=1 small_model > c.yaml
    "$MOED" --config c.yaml --no-progress > out.log 2> err.log || { cat out.log err.log; fail "run failed"; }
    want=("weights: generating 8 experts x 1 layer (F32, 42 MiB per expert, 336 MiB)"
          "weights: done, 336 MiB in") ;;
  master)
    LAYERS=2 PLACEMENT='{1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}' small_model > c.yaml
    mpirun_moed 3 --config c.yaml --no-progress > out.log 2> err.log || { cat out.log err.log; fail "run failed"; }
    want=("weights: rank 0 hosts no experts; the expert ranks are generating theirs (up to 4 x 2 layers, 336 MiB on one rank") ;;
  master_checkpoint)  # 8 experts of 1024 x 4096 in BF16: (2 x 4096 + 4096) x 1024 x 2 B = 24 MiB
    mkdir ck && "$MAKE_CKPT" --dir ck mixtral bf16 1024 4096 8 2 3 1 8 > /dev/null || fail "make_checkpoint"
    printf 'model:\n  checkpoint: %s\nruntime:\n  routing: master\nworkload:\n  tokens_per_step: 8\n  steps: 1\nprofiler:\n  enabled: false\n' \
      "$PWD/ck" > c.yaml
    mpirun_moed 3 --config c.yaml --no-progress > out.log 2> err.log || { cat out.log err.log; fail "run failed"; }
    # held in BF16 (cpu_holds_bf16); a CPU that cannot holds them widened: F32, twice the bytes
    held="288 MiB on one rank; BF16, 24 MiB per expert"
    cpu_holds_bf16 || held="576 MiB on one rank; F32, 48 MiB per expert"
    want=("weights: rank 0 hosts no experts; the expert ranks are reading theirs from $PWD/ck (up to 4 x 3 layers, $held)") ;;
  symmetric)
    LAYERS=3 ROUTING=symmetric small_model > c.yaml
    mpirun_moed 3 --config c.yaml --no-progress > out.log 2> err.log || { cat out.log err.log; fail "run failed"; }
    want=("weights: rank 0 generating its 3 of 8 experts x 3 layers (F32, 42 MiB per expert, 378 MiB); the other ranks build theirs at the same time, progress below is rank 0's"
          "weights: done, 378 MiB in") ;;
  layers)  # placement.layers: rank 0 builds 3 experts of layer 0 and 5 of layer 1 (336 MiB)
    LAYERS=2 ROUTING=symmetric small_model \
      | sed 's/^  experts: auto/  experts: auto\n  layers: {1: {0: [0, 1, 2, 3, 4], 1: [5, 6], 2: [7]}}/' > c.yaml
    mpirun_moed 3 --config c.yaml --no-progress > out.log 2> err.log || { cat out.log err.log; fail "run failed"; }
    want=("weights: rank 0 generating its 3 to 5 of 8 experts x 2 layers (F32, 42 MiB per expert, 336 MiB)"
          "weights: done, 336 MiB in") ;;
  small)
    H=128 F=256 small_model > c.yaml
    "$MOED" --config c.yaml --no-progress > out.log 2> err.log || { cat out.log err.log; fail "run failed"; }
    if grep -q '^weights:' out.log; then cat out.log; fail "a small load printed weights lines"; fi
    want=() ;;
  *) fail "unknown case $1" ;;
esac
cat out.log
for w in "${want[@]}"; do
  grep -qF -- "$w" out.log || fail "stdout lacks '$w'"
done
n=$(grep -c '^weights:' out.log || true)
[[ $1 == small || $n -ge 1 ]] || fail "no weights line"
echo "PASS $1"
