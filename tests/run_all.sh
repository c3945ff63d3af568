#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this and nothing else):
#   1. install what is missing (Debian packages, deploy/install-deps.sh --test)
#   2. build and run every ctest test in build/ (RelWithDebInfo, -Werror); where the CUDA
#      Toolkit is installed (/usr/local/cuda, nvcc on PATH) this is the CUDA + NCCL variant:
#      it is built and linked even without a GPU, and the GPU tests skip with the reason
#   3. build again with AddressSanitizer + UndefinedBehaviorSanitizer in build-asan/ (CPU
#      only: the sanitizers do not instrument CUDA) and run the same tests there
#   4. build (no tests) as a packager would, Release (-O3), in build-release/: -O3 finds
#      warnings the other two builds do not
# Every build here has -Werror (MOED_WERROR=ON); a user's or packager's build has it off.
# Prints one closing line with the totals of both runs.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
jobs=$(nproc 2>/dev/null || echo 2)

./deploy/install-deps.sh --test || { echo "install failed"; exit 1; }

passed=0 failed=0 skipped=0 rc=0
run_suite() { # run_suite BUILD_DIR CTEST_ARGS CMAKE_ARGS...
  local dir=$1 ctest_args=$2; shift 2
  echo "== $dir: configure and build"
  # a build that fails counts as one failed test (as build-release's), its tests as none
  cmake -S . -B "$dir" "$@" > "$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; echo "$dir: configure FAILED (counted as one failed test)";
      failed=$((failed + 1)); return 1; }
  cmake --build "$dir" -j "$jobs" ||
    { echo "$dir: build FAILED (counted as one failed test)"; failed=$((failed + 1)); return 1; }
  echo "== $dir: ctest"
  # shellcheck disable=SC2086
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" --timeout 600 $ctest_args | tee "$dir.ctest.log"
  local status=${PIPESTATUS[0]}
  count_results "$dir.ctest.log"
  return "$status"
}

# count_results CTEST_LOG: add a ctest run's results to passed / failed / skipped.
# ctest's "N% tests passed, F tests failed out of T" counts a skipped test (exit 77 with
# SKIP_RETURN_CODE) as passed and a missing executable ("Not Run") as failed, and leaves
# disabled tests out of T. Skips are counted from ctest's own progress lines ("3/7 Test #3:
# name ....***Skipped"), not from anywhere in the log: a test's output printed by
# --output-on-failure must not count, nor the summary list that names each skip again.
count_results() {
  local log=$1 line total fail skip disabled
  local progress='^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*'
  line=$(grep -E 'tests passed, [0-9]+ tests failed out of' "$log" | tail -1)
  total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<< "$line")
  fail=$(sed -E 's/.*, ([0-9]+) tests failed.*/\1/' <<< "$line")
  skip=$(grep -cE "${progress}Skipped" "$log" || true)
  disabled=$(grep -cE "${progress}Not Run \(Disabled\)" "$log" || true)
  passed=$((passed + ${total:-0} - ${fail:-0} - skip))
  failed=$((failed + ${fail:-0}))
  skipped=$((skipped + skip + disabled))
}

mkdir -p build build-asan
# nvcc is looked for on PATH; the toolkit's usual home is added so a login shell is not needed.
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="$PATH:/usr/local/cuda/bin"
run_suite build "" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOED_WERROR=ON || rc=1
grep -E 'moed: (CUDA|NCCL|UCX)' build.configure.log || true
# ASan + UBSan over the same tests. Leak checking covers the unit tests (no MPI); the
# tests that start MPI turn it off (tests/CMakeLists.txt says why).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The fuzz targets build their own sanitized binaries with clang: not run twice.
run_suite build-asan "-LE fuzz" -DCMAKE_BUILD_TYPE=Debug -DMOED_SANITIZE=ON \
  -DMOED_WITH_CUDA=OFF -DMOED_WERROR=ON || rc=1
echo "== build-release: configure and build (Release, CPU; not tested again)"
mkdir -p build-release
if cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DMOED_WITH_CUDA=OFF \
     -DMOED_WERROR=ON > build-release.configure.log 2>&1 &&
   cmake --build build-release -j "$jobs" > build-release.build.log 2>&1; then
  echo "build-release: built"
else
  cat build-release.configure.log build-release.build.log 2>/dev/null | grep -E 'error|warning' | head -40
  echo "build-release: FAILED (counted as one failed test)"
  failed=$((failed + 1)); rc=1
fi

echo "moed test suite, both builds (build/ and build-asan/) together:"
echo "total: $passed passed, $failed failed, $skipped skipped"
exit $rc
