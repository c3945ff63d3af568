#!/usr/bin/env bash
# plugin.sh CASE MOED PLUGIN [FAKE_PLUGIN [OTHER_BUILD]]: the CUDA plug-in (libmoed_cuda.so) is loaded
# only when asked for, moed exports what it calls back, and its absence is one clear error.
#   cpu_maps_no_cuda  moed links no CUDA library, and a CPU job (and --version) maps
#                     neither the plug-in nor cudart, cuBLAS or NCCL
#   symbols           every moe_* function the plug-in needs is exported by moed
#   missing           runtime.device: cuda with no plug-in beside moed or in
#                     MOED_PLUGIN_DIR: exit 4, one message naming the file and the key
#   broken            a plug-in that cannot load (a library it needs is missing): the
#                     message names that library and the key
#   other_build       a plug-in of the same table version and size but another build id
#                     (another commit): refused before any slot is called, exit 6 (builds
#                     differ), naming both build ids
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
CASE=$1 MOED=$2 PLUGIN=$3 FAKE=${4:-} OTHER=${5:-}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/moed-plugin.XXXXXX")
trap '[[ -n "${KEEP_WORK:-}" ]] || rm -rf "$WORK"' EXIT
cd "$WORK"
fail() { echo "FAIL: $*" >&2; exit 1; }
CUDA_LIBS='libmoed_cuda|libcudart|libcublas|libnccl'

config() { # config DEVICE
  cat <<EOC
model:
  hidden_dim: 64
  ffn_dim: 128
  num_experts: 4
  top_k: 2
  num_layers: 1
  seed: 7
placement:
  experts: auto
runtime:
  device: $1
workload:
  tokens_per_step: 32
  steps: 2
profiler:
  enabled: false
EOC
}

# expect_error CODE TEXT...: run the moed copy in $WORK/bin on c.yaml, one error line
# containing every TEXT, exit CODE.
expect_error() {
  local want_code=$1; shift
  set +e
  MOED_PLUGIN_DIR="$WORK/empty" timeout -k 5 60 "$WORK/bin/moed" --config c.yaml \
    --no-progress > out.log 2> err.log
  local code=$?
  set -e
  cat err.log
  [[ $code -eq $want_code ]] || fail "exit code $code, want $want_code"
  [[ $(grep -c 'moed: error' err.log || true) -eq 1 ]] || fail "error not printed exactly once"
  for text in "$@"; do
    grep -qF -- "$text" err.log || fail "message lacks '$text'"
  done
}

case "$CASE" in
  cpu_maps_no_cuda)
    if ldd "$MOED" | grep -E "$CUDA_LIBS"; then fail "moed links a CUDA library"; fi
    grep -q libcudart <<< "$(ldd "$PLUGIN")" || fail "the plug-in does not link cudart (not the plug-in?)"
    config cpu > c.yaml
    LD_DEBUG=files LD_DEBUG_OUTPUT="$WORK/ld" "$MOED" --version > /dev/null
    LD_DEBUG=files LD_DEBUG_OUTPUT="$WORK/ld" timeout -k 5 60 "$MOED" --config c.yaml \
      --no-progress > out.log 2>&1 || { cat out.log; fail "the CPU run failed"; }
    ls "$WORK"/ld.* > /dev/null || fail "LD_DEBUG wrote nothing"
    if grep -hE "file=[^ ]*($CUDA_LIBS)" "$WORK"/ld.*; then
      fail "a CPU run loaded a CUDA library"
    fi
    echo "PASS: no CUDA library linked or loaded by a CPU run" ;;
  symbols)
    need=$(nm -D --undefined-only "$PLUGIN" | awk '{print $NF}' | grep '^moe_' | sort -u)
    have=$(nm -D --defined-only "$MOED" | awk '{print $NF}' | sort -u)
    [[ -n "$need" ]] || fail "the plug-in calls no moe_ function (nm failed?)"
    missing=$(comm -23 <(echo "$need") <(echo "$have"))
    [[ -z "$missing" ]] || fail "moed does not export: $missing"
    echo "PASS: moed exports the $(echo "$need" | wc -l) functions the plug-in calls" ;;
  missing)
    mkdir -p bin empty && cp "$MOED" bin/
    config cuda > c.yaml
    expect_error 4 "runtime.device: cuda" "libmoed_cuda.so" "$WORK/empty (MOED_PLUGIN_DIR)" \
      "$WORK/bin (beside moed)"
    echo "PASS: missing plug-in" ;;
  broken)
    mkdir -p bin empty && cp "$MOED" bin/ && cp "$FAKE" bin/libmoed_cuda.so
    config cuda > c.yaml
    expect_error 4 "runtime.device: cuda" "libmoed_test_missing_dep.so"
    echo "PASS: broken plug-in" ;;
  other_build)
    mkdir -p bin empty && cp "$MOED" bin/ && cp "$OTHER" bin/libmoed_cuda.so
    config cuda > c.yaml
    expect_error 6 "from another moed build" "0123456789ab-other-commit" \
      "this moed from $("$MOED" --version | sed -n 's/.*(build \([^,]*\),.*/\1/p')"
    echo "PASS: a plug-in of another build is refused" ;;
  *) fail "unknown case $CASE" ;;
esac
