#!/usr/bin/env bash
# isa.sh TEST_SMALLBATCH CASE: the small-batch kernels on the instruction sets a CPU has.
#   native  the sets test_smallbatch finds ("kernels here: ...") are the ones /proc/cpuinfo's
#           flags give (avx2: avx2 + fma; avx512: avx512f, bw, dq, vl; avx512_bf16: those and
#           avx512_bf16; +vbmi: and avx512vbmi), and its checks pass
#   avx2    under qemu-x86_64 -cpu Haswell (AVX2 and FMA, no AVX-512): the avx2 kernels alone,
#           and every check passes. The AVX2 kernels once held AVX-512 instructions (compiled
#           in the AVX-512 region): SIGILL on Zen 3, seen here on any x86-64 CI machine
#   sse2    under qemu-x86_64 -cpu Nehalem (no AVX): no kernel, the scalar paths pass
# qemu-user (deploy/install-deps.sh --test) emulates the CPU; without it: skipped (77).
# QEMU 7.2 emulates no AVX-512, so the AVX-512 kernels run only where the CPU has them.
set -euo pipefail
bin=${1:?test_smallbatch}
case_name=${2:?case}
fail() { echo "FAIL: $*" >&2; exit 1; }
run() {
  local rc=0
  "$@" > out.log 2>&1 || rc=$?
  cat out.log
  ((rc == 0)) || fail "test_smallbatch exited $rc"
  grep -qE '^test_smallbatch: [0-9]+ checks, 0 failed$' out.log || fail "no passing summary line"
}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; cd "$work"
unset MOED_CPU_NO_BF16  # it hides BF16 from test_smallbatch: the flags would not tell
case $case_name in
  native)
    flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
    has() { local f; for f; do [[ $flags == *" $f "* ]] || return 1; done; }
    a2=0 a5=0 bf=0 vb=0
    has avx2 fma && a2=1
    has avx512f avx512bw avx512dq avx512vl && a5=1
    ((a5)) && has avx512_bf16 && bf=1
    ((bf)) && has avx512vbmi && vb=1
    run "$bin"
    want="kernels here: avx2 $a2, avx512 $a5, avx512_bf16 $bf, avx512_bf16+vbmi $vb"
    grep -qx "$want" out.log || fail "want '$want' (from /proc/cpuinfo)"
    ;;
  avx2|sse2)
    command -v qemu-x86_64 > /dev/null || { echo "SKIP: qemu-x86_64 (qemu-user) not installed"; exit 77; }
    [[ -z "${MOED_SANITIZED:-}" ]] || { echo "SKIP: a sanitizer build (ASan's shadow memory under QEMU)"; exit 77; }
    cpu=Haswell want="kernels here: avx2 1, avx512 0, avx512_bf16 0, avx512_bf16+vbmi 0"
    [[ $case_name == sse2 ]] && cpu=Nehalem want="kernels here: avx2 0, avx512 0, avx512_bf16 0, avx512_bf16+vbmi 0"
    # OpenBLAS picks its kernels by the host's CPU id, which QEMU passes through: one core
    # type every emulated CPU runs (the test's references use no BLAS kernel but its own)
    OPENBLAS_CORETYPE=Prescott run qemu-x86_64 -cpu "$cpu" "$bin"
    grep -qx "$want" out.log || fail "want '$want' under -cpu $cpu"
    ;;
  *) fail "unknown case '$case_name' (native, avx2, sse2)" ;;
esac
echo "PASS isa $case_name"
