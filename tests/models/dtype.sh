#!/usr/bin/env bash
# dtype.sh CASE: BF16 weights, compute and wire (model.dtype, runtime.compute_dtype,
# runtime.wire_dtype).
#   wire      rows exchanged in BF16 are half the bytes: summary.json's comm figures (real
#             bytes) of a wire_dtype bf16 run are exactly half those of the f32 run (one
#             layer and F32 compute in both, so routing and rows are the same).
#   fallback  on a CPU without native BF16 (forced: MOED_CPU_NO_BF16=1) model.dtype bf16 with
#             compute auto runs in F32; compute_dtype bf16 is refused: one message, exit 3,
#             no report written.
#   memory    an expert rank's memory for its weights held in BF16 is at most 0.6x that of
#             F32 (peak RSS at exit, wait4's ru_maxrss, minus the same run's with tiny
#             experts, so MPI and code are not counted); both peaks are printed.
# BF16 cases skip (77) on a CPU without native BF16.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../mpi/common.sh"   # cds into a fresh temporary directory
source "$HERE/common.sh"

case_name=$1

# cfg FILE [extra runtime lines...]: a small job, rank 0 routes, rank 1 holds every expert.
cfg() {
  local file=$1; shift
  {
    cat <<EOC
model:
  hidden_dim: ${H:-256}
  ffn_dim: ${F:-512}
  num_experts: 8
  top_k: 2
  num_layers: ${LAYERS:-1}
  dtype: ${DTYPE:-bf16}
  seed: 3
placement:
  master_rank: 0
  experts: {1: [0, 1, 2, 3, 4, 5, 6, 7]}
workload:
  tokens_per_step: ${TOKENS:-256}
  steps: ${STEPS:-4}
profiler:
  enabled: ${PROF:-true}
  warmup_steps: 1
  measurement_steps: 2
  trace: false
  output_dir: $WORK/exp.$file
runtime:
EOC
    for line in "$@"; do echo "  $line"; done
  } > "$file.yaml"
}

need_bf16() {
  if [[ "${MOED_CPU_NO_BF16:-}" != "" && "${MOED_CPU_NO_BF16:-}" != 0 ]]; then
    echo "SKIP: MOED_CPU_NO_BF16 is set"; exit 77
  fi
  cfg probe "compute_dtype: bf16"
  local rc=0
  "$MOED" --config probe.yaml --check-config > probe.log 2>&1 || rc=$?
  if ((rc == 3)) && grep -q "native BF16" probe.log; then
    echo "SKIP: $(sed -n 's/^moed: error: //p' probe.log)"; exit 77
  fi
}

# comm_bytes NAME: summary.json's comm.bytes_between_ranks of run NAME.
comm_bytes() {
  "$PY" -c 'import json,glob,sys; print(json.load(open(glob.glob(sys.argv[1])[0]))["comm"]["bytes_between_ranks"])' \
    "$WORK/exp.$1/*/summary.json"
}

case $case_name in
wire)
  for w in f32 bf16; do
    cfg "w$w" "compute_dtype: f32" "wire_dtype: $w"
    mpirun_moed 2 --config "w$w.yaml" --no-progress > "w$w.log" 2>&1 || { cat "w$w.log"; fail "wire $w run"; }
    grep -q "$w rows on the wire" "w$w.log" || { cat "w$w.log"; fail "wire $w not reported"; }
  done
  f=$(comm_bytes wf32) b=$(comm_bytes wbf16)
  echo "bytes between ranks: f32 wire $f, bf16 wire $b"
  ((f > 0 && 2 * b == f)) || fail "BF16 wire moved $b bytes, F32 $f: not half"
  ;;
fallback)
  cfg auto "compute_dtype: auto"
  # shellcheck disable=SC2086
  timeout -k 5 120 mpirun $MPIRUN_FLAGS -x MOED_CPU_NO_BF16=1 -np 2 "$MOED" --config auto.yaml \
    --no-progress > auto.log 2>&1 || { cat auto.log; fail "compute auto on a CPU without BF16 did not run"; }
  grep -q "bf16 weights, f32 compute" auto.log || { cat auto.log; fail "auto did not fall back to f32"; }
  cfg forced "compute_dtype: bf16"
  rc=0
  # shellcheck disable=SC2086
  timeout -k 5 120 mpirun $MPIRUN_FLAGS -x MOED_CPU_NO_BF16=1 -np 2 "$MOED" --config forced.yaml \
    --no-progress > forced.log 2>&1 || rc=$?
  ((rc == 3)) || { cat forced.log; fail "compute_dtype bf16 without BF16: exit $rc, want 3"; }
  n=$(grep -c "^moed: error: runtime.compute_dtype: bf16, but MOED_CPU_NO_BF16 is set" forced.log || true)
  ((n == 1)) || { cat forced.log; fail "want one error line naming the key and the reason, got $n"; }
  [[ ! -e $WORK/exp.forced ]] || fail "a refused run wrote $WORK/exp.forced"
  ;;
memory)
  need_bf16
  if [[ -n "${MOED_SANITIZED:-}" ]]; then
    echo "SKIP: AddressSanitizer quarantines freed memory (the F32 staging), so RSS does not measure moed here"
    exit 77
  fi
  # peak NAME DTYPE FFN: rank 1's peak RSS (KiB) of 8 experts x 8 layers, hidden 512.
  peak() {
    H=512 F=$3 LAYERS=8 DTYPE=$2 TOKENS=64 STEPS=1 PROF=false cfg "$1" "compute_dtype: auto"
    rm -f rss.*
    # shellcheck disable=SC2086
    timeout -k 5 200 mpirun $MPIRUN_FLAGS -np 2 "$PY" "$MODELS_DIR/rss_wrapper.py" "$MOED" --config "$1.yaml" \
      --no-progress > "$1.log" 2>&1 || { cat "$1.log"; fail "$1 run"; }
    cat rss.1
  }
  base=$(peak base f32 8) f32=$(peak f32 f32 1024) bf16=$(peak bf16 bf16 1024)
  grep -q "bf16 weights, bf16 compute" bf16.log || { cat bf16.log; fail "bf16 run did not compute in bf16"; }
  "$PY" - "$base" "$f32" "$bf16" <<'EOF'
import sys
base, f32, bf16 = (int(v) for v in sys.argv[1:])
gf, gb = f32 - base, bf16 - base
print("rank 1 peak RSS: f32 %.1f MiB, bf16 %.1f MiB (%.2fx); weights' growth over the tiny run "
      "(%.1f MiB): f32 %.1f MiB, bf16 %.1f MiB (%.2fx)"
      % (f32 / 1024, bf16 / 1024, bf16 / f32, base / 1024, gf / 1024, gb / 1024, gb / gf))
# 384 MiB of F32 expert weights: BF16 holds 192 MiB, plus one F32 expert staged at load.
if gb > 0.6 * gf:
    print("FAIL: BF16 weights cost %.2fx the F32 ones, want <= 0.6" % (gb / gf))
    sys.exit(1)
EOF
  ;;
*)
  fail "unknown case '$case_name' (wire, fallback, memory)"
  ;;
esac
echo "PASS dtype $case_name"
