#!/usr/bin/env bash
# run_bundle.sh BUNDLE [OUT]: on a disposable GPU machine, in a checkout of the same commit,
# unpack a tests/gpu/bundle.sh bundle and run the GPU tests (unit.cuda_build,
# unit.cuda_ops, mpi.gpu.*, plugin.*) and the default job's --bench on the GPU (1 rank over
# MPI and over NCCL, 3 ranks sharing the GPU), then compute-sanitizer's memcheck over whole
# runs and racecheck over unit.cuda_ops (sanitize.*) where the machine has it. Logs go to
# OUT (default ./gpu-logs).
# It REPLACES the machine's Open MPI, PMIx and UCX component trees (/usr/lib/x86_64-linux-gnu/
# openmpi, ...) with the bundle's: the machine's own Open MPI (another version) would load
# its components into the bundle's library. Use it only on a machine that is thrown away.
# Exit status: the number of tests that failed. docs/tests.md#gpu.
set -uo pipefail
bundle=$(realpath "$1"); out=$(realpath -m "${2:-gpu-logs}")
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
t0=$(date +%s); step() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }
step setup; nvidia-smi -L || { echo "run_bundle.sh: no GPU (nvidia-smi)"; exit 2; }
root=/opt/moed-bundle; rm -rf "$root"; mkdir -p "$root" && tar -C "$root" -xJf "$bundle"
rm -rf /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi \
       /usr/share/pmix /etc/openmpi /usr/lib/x86_64-linux-gnu/ucx
cp -a "$root/root/." /
# generic runtime libraries: the machine's own (newer) where it has them
for l in libstdc++.so.6 libgcc_s.so.1 libz.so.1 libgomp.so.1 libatomic.so.1 libffi.so.8 \
         libudev.so.1 libuuid.so.1 libquadmath.so.0 libgfortran.so.5; do
  if ldconfig -p | grep -q "^\s*$l "; then rm -f "$root/lib/$l"; fi
done
cuda=""
for n in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  p=$(ldconfig -p | awk -v n="$n" '$1 == n {print $NF; exit}')
  [[ -n $p ]] || p=$(find /usr/local /opt /usr/lib -name "$n" 2>/dev/null | head -1)
  echo "$n: ${p:-not found}"; [[ -n $p ]] && cuda+=":$(dirname "$p")"
done
export LD_LIBRARY_PATH=$root/bin:$root/lib$cuda
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
B=$root/bin; export MOED=$B/moed ST_DIFF=$B/st_diff MAKE_CKPT=$B/make_checkpoint
"$MOED" --version | head -1
failed=0
check() { # check NAME COMMAND...: 0 passed, 77 skipped, else failed
  local name=$1; shift; step "$name"
  timeout 300 "$@" > "$out/$name.log" 2>&1; local rc=$?
  tail -2 "$out/$name.log"
  case $rc in 0) echo "$name: passed" ;; 77) echo "$name: skipped" ;; *) echo "$name: FAILED ($rc)"; failed=$((failed + 1)) ;; esac
}
check unit.cuda_build "$B/test_cuda_build"
check unit.cuda_ops "$B/test_cuda_ops"
for c in f32 bf16 f16 staged nccl; do check "mpi.gpu.$c" bash "$repo/tests/mpi/gpu.sh" "$c"; done
for c in cpu_maps_no_cuda symbols missing broken other_build; do
  check "plugin.$c" bash "$repo/tests/gpu/plugin.sh" "$c" "$MOED" "$B/libmoed_cuda.so" \
    "$B/libmoed_test_fake_plugin.so" "$B/libmoed_test_other_build.so"
done
work=$(mktemp -d); cd "$work" || exit 2
sed -e 's/^  device: cpu/  device: cuda/' -e "s|^  output_dir: .*|  output_dir: $out/reports|" \
  "$repo/configs/experts.yaml" > gpu.yaml
sed -e 's/^  transport: mpi/  transport: nccl/' gpu.yaml > nccl.yaml
bench() { # bench NAME COMMAND...
  local name=$1; shift; step "bench $name"
  timeout 300 "$@" --bench --no-progress > "$out/bench_$name.log" 2>&1 || echo "bench $name: exit $?"
  grep -E '^run:|phases|^tokens/s|bench: (device|expert compute|dispatch)' "$out/bench_$name.log"
}
bench 1rank_mpi "$MOED" --config gpu.yaml
bench 1rank_nccl "$MOED" --config nccl.yaml
bench 3ranks_staged mpirun --oversubscribe --bind-to none -np 3 "$MOED" --config gpu.yaml
# compute-sanitizer, where the machine has it: memcheck over whole GPU runs (1 rank, MPI and
# NCCL, 256 tokens, 8 steps) and racecheck over unit.cuda_ops. A finding fails only where
# it is moed's: racecheck reports hazards inside cuBLAS's sm90 GEMM kernels (nvjet_*: their
# asynchronous copies, which it does not model) and NCCL's start probes its kernels with
# cudaFuncGetAttributes, an API error memcheck reports (no kernel image for some of them);
# both are counted and printed, not failed on. moed's kernels: the __global__ functions
# of runtime/src/expert/cuda/*.cu.
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
own=$(sed -n 's/^__global__ void \([A-Za-z0-9_]*\).*/\1/p' "$repo"/runtime/src/expert/cuda/*.cu | sort -u | paste -sd'|')
sanitized() { # sanitized NAME LOG: passed unless a finding is moed's
  local name=$1 log=$2 n bad
  n=$(grep -cE 'Race reported|Invalid |Program hit|Leaked [0-9]+ bytes' "$log")
  bad=$(( $(grep -cE 'Invalid |Misaligned|Out-of-range|Leaked [0-9]+ bytes' "$log")
          + $(grep -E 'Race reported' "$log" | grep -cE "(${own})[(<+ ]")
          + $(grep -E 'Host Frame:' "$log" | grep -cE 'in (\S*/)?(moed|libmoed_cuda\.so|test_cuda_[a-z]+)([[:space:]]|$)') ))
  if ! grep -qE 'ERROR SUMMARY|RACECHECK SUMMARY' "$log"; then
    echo "$name: FAILED (no summary: the run did not end; log $log)"; failed=$((failed + 1))
  elif [[ $bad -gt 0 ]]; then
    echo "$name: FAILED ($bad of $n findings are moed's; log $log)"; failed=$((failed + 1))
  else
    echo "$name: passed ($n findings, none in moed's kernels or code)"
  fi
}
if [[ -n $cs ]]; then
  sed -e 's/^  tokens_per_step: .*/  tokens_per_step: 256/' gpu.yaml > san.yaml
  sed -e 's/^  transport: mpi/  transport: nccl/' san.yaml > san_nccl.yaml
  for c in san san_nccl; do
    step "sanitize.memcheck_$c"
    timeout 300 "$cs" --tool memcheck --leak-check full "$MOED" --config $c.yaml --steps 8 \
      --no-progress > "$out/sanitize_memcheck_$c.log" 2>&1
    tail -2 "$out/sanitize_memcheck_$c.log"; sanitized "sanitize.memcheck_$c" "$out/sanitize_memcheck_$c.log"
  done
  step "sanitize.racecheck_cuda_ops"
  timeout 300 "$cs" --tool racecheck "$B/test_cuda_ops" > "$out/sanitize_racecheck.log" 2>&1
  tail -1 "$out/sanitize_racecheck.log"; sanitized sanitize.racecheck_cuda_ops "$out/sanitize_racecheck.log"
else
  echo "sanitize.*: skipped (no compute-sanitizer)"
fi
step "done: $failed failed"
exit "$failed"
