# Shared helpers for moed's multi-rank tests. Sourced; expects MOED, ST_DIFF and MAKE_CKPT
# in the environment (ctest sets them) and works in a fresh temporary directory.
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# 3 ranks on a 2-core machine need --oversubscribe; shared memory + self only, so no
# test ever touches a network interface.
MPIRUN_FLAGS=${MOED_MPIRUN_FLAGS:---oversubscribe --mca btl self,vader --mca pml ob1}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/moed-test.XXXXXX")
trap '[[ -n "${KEEP_WORK:-}" ]] || rm -rf "$WORK"' EXIT
cd "$WORK"

fail() { echo "FAIL: $*" >&2; exit 1; }

# test_pids: the pids of this test's moed processes, one a line: moed itself (not the
# mpirun or timeout whose command line names it too) working in this test's $WORK.
test_pids() {
  local p here exe
  here=$(readlink -f "$WORK")
  exe=$(readlink -f "$MOED")
  for p in $(pgrep -f "$MOED --config"); do
    [[ "$(readlink "/proc/$p/cwd" 2> /dev/null)" == "$here" &&
       "$(readlink "/proc/$p/exe" 2> /dev/null)" == "$exe" ]] && echo "$p"
  done
  return 0
}
# rank_pid R: the pid of this test's moed rank R: its environment names the rank and it
# works in this test's $WORK (ranks start in mpirun's directory). Both, as ctest -j runs
# other tests' jobs beside this one: a rank found by its environment alone was once
# another test's, stopped there (live.harden and live.window_watchdog failed together).
rank_pid() {
  local p
  for p in $(test_pids); do
    if tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$p"; return
    fi
  done
}

# cpu_holds_bf16: true when this CPU holds BF16 weights in BF16 (from /proc/cpuinfo, not
# from moed): native BF16 (avx512_bf16) or moed's F32 kernels (AVX2 and FMA, or AVX-512);
# a CPU with neither holds them widened to F32.
cpu_holds_bf16() {
  local flags
  flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
  [[ $flags == *" avx512_bf16 "* || $flags == *" avx512f "* ||
     ( $flags == *" avx2 "* && $flags == *" fma "* ) ]]
}

# mpirun_moed NP ARGS...: run moed on NP ranks, bounded in time so nothing hangs a test.
mpirun_moed() {
  local np=$1; shift
  # shellcheck disable=SC2086
  timeout -k 5 120 mpirun $MPIRUN_FLAGS -np "$np" "$MOED" "$@"
}

# write_config FILE ROUTING PLACEMENT [extra "section.key: value" lines appended raw]
small_model() {
  cat <<EOC
model:
  hidden_dim: ${H:-128}
  ffn_dim: ${F:-256}
  num_experts: ${E:-8}
  top_k: ${K:-2}
  num_layers: ${LAYERS:-2}
  activation: ${ACT:-swiglu}
  normalize_topk: ${NORM:-true}
  capacity_factor: ${CF:-0}
  weights: ${WEIGHTS:-random}
  first_layer: ${FIRST:-0}
  seed: 7
placement:
  master_rank: ${MASTER:-0}
  experts: ${PLACEMENT:-auto}
runtime:
  routing: ${ROUTING:-master}
  chunks: ${CHUNKS:-1}
workload:
  tokens_per_step: ${TOKENS:-96}
  steps: ${STEPS:-3}
  input: ${INPUT:-random}
  routing_skew: ${SKEW:-0.0}
profiler:
  enabled: ${PROF:-false}
  output_dir: $WORK/experiments
EOC
}

# same_as_one_rank NP [TOL]: run the config c.yaml on 1 rank and on NP ranks, compare
# outputs (st_diff's relative tolerance, 1e-4 unless given).
same_as_one_rank() {
  local np=$1 tol=${2:-1e-4}
  "$MOED" --config c.yaml --dump-output one.safetensors --no-progress > one.log 2>&1 \
    || { cat one.log; fail "single-rank run failed"; }
  mpirun_moed "$np" --config c.yaml --dump-output many.safetensors --no-progress > many.log 2>&1 \
    || { cat many.log; fail "$np-rank run failed"; }
  "$ST_DIFF" one.safetensors many.safetensors --tol "$tol" || fail "outputs differ"
}
