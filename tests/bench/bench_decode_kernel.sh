#!/usr/bin/env bash
# bench_decode_kernel.sh [BUILD] [REPS] [ROWS]: moed's small-batch expert kernels against
# the GEMM path at decode sizes, per weight type (BF16, FP8 e4m3, MXFP4), on this machine:
# GB/s of weight bytes (as held) per expert call against a streaming read of 1 GiB on the
# same cores in the same run, and the switch point per type (tests/bench/bench_decode_kernel.c).
#   BUILD  the build folder (default build; the bench is built there if it is not)
#   REPS   repetitions per figure, the best kept (default 3)
#   ROWS   rows per expert call (default 1,2,4,8,12,16,24,32,48,64,128)
# Runs: 1 thread pinned to one core; 2 threads on two cores (when there are two); each
# again with MOED_CPU_NO_BF16=1 (F32 compute: the avx512/avx2 kernels against the BLAS on
# dequantised panels). Expert shapes: hidden 2048, ffn 768 (Qwen3-30B-A3B's), 32 experts
# in turn (288 MiB in BF16: far past the caches). Prints the machine first (CPU model,
# its vector flags, cores). Takes a few minutes; a busy machine makes it noisy: run it quiet.
set -euo pipefail
BUILD=${1:-build}
REPS=${2:-3}
ROWS=${3:-1,2,4,8,12,16,24,32,48,64,128}
BIN=$BUILD/tests/bench/bench_decode_kernel
if [[ ! -x $BIN ]]; then
  cmake --build "$BUILD" --target bench_decode_kernel > /dev/null
fi
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores, \
$(grep -m1 'cpu MHz' /proc/cpuinfo | sed 's/.*: //') MHz"
echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512[a-z0-9_]*|amx[a-z0-9_]*)$' | tr '\n' ' ')"
echo "kernel: $(uname -r)"
cores=$(nproc)
for nobf16 in 0 1; do
  for t in 1 2; do
    ((t <= cores)) || continue
    cpus=0; ((t == 2)) && cpus=0,1
    echo
    echo "== $t thread(s) on CPU(s) $cpus$( ((nobf16)) && echo ", MOED_CPU_NO_BF16=1 (f32 compute)")"
    MOED_CPU_NO_BF16=$nobf16 OMP_PROC_BIND=close OMP_PLACES=cores taskset -c "$cpus" \
      "$BIN" --threads "$t" --reps "$REPS" --rows "$ROWS"
  done
done
