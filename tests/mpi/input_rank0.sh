#!/usr/bin/env bash
# input_rank0.sh: workload.input seen by rank 0 alone (the other ranks run in a folder
# without it, as on a node that does not see the file), workload.tokens_per_step left out:
# every rank must take rank 0's count (the file's 4096 rows, more than the default 2048: a
# rank that could not read the file once kept 2048 while rank 0 routed 4096, and the
# ranks' buffers disagreed), and the output must equal the single-rank run's. Master routing: only rank 0 needs the
# input; the expert ranks need the checkpoint (seen by every rank).
source "$(dirname "$0")/common.sh"
mkdir -p a/ck b
"$MAKE_CKPT" --dir a/ck mixtral f32 64 48 8 2 3 1 4096 > ckpt.log 2>&1 || { cat ckpt.log; fail "make_checkpoint"; }
mv a/ck/input.safetensors a/in.safetensors
ln -s ../a/ck b/ck
printf 'model:\n  checkpoint: ck\nplacement:\n  master_rank: 0\nruntime:\n  routing: master\nworkload:\n  steps: 1\n  input: in.safetensors\nprofiler:\n  enabled: false\n' > a/c.yaml
(cd a && "$MOED" --config c.yaml --dump-output one.safetensors --no-progress) > one.log 2>&1 \
  || { cat one.log; fail "the single-rank run failed"; }
# shellcheck disable=SC2086
(cd a && timeout -k 5 120 mpirun $MPIRUN_FLAGS -np 1 -wdir "$WORK/a" "$MOED" --config c.yaml \
   --dump-output many.safetensors --no-progress : -np 2 -wdir "$WORK/b" "$MOED" \
   --config c.yaml --dump-output many.safetensors --no-progress) > many.log 2>&1 \
  || { cat many.log; fail "the 3-rank run with the input on rank 0 alone failed"; }
grep -q 'x 4096 tokens' many.log || { cat many.log; fail "the run did not take the input's 4096 rows"; }
"$ST_DIFF" a/one.safetensors a/many.safetensors --tol 1e-4 || fail "outputs differ"
echo "PASS: the input's rows agreed from rank 0; 3 ranks = 1 rank"
