#!/usr/bin/env bash
# Build moed's libFuzzer targets with clang and run them (README.md in this directory).
#
#   tests/fuzz/run_fuzz.sh [--build-dir DIR] SECONDS TARGET...
#
# TARGET: config | safetensors | prof_record | prof_record_nosum | handshake | all.
# For each target: build tests/fuzz/fuzz_TARGET.c with the library sources it needs
# (-fsanitize=fuzzer,address,undefined), replay every committed seed of its corpus once
# (the regression check), then fuzz for SECONDS over a copy of that corpus (the committed
# one is never modified). Exits 1 on any crash, leak, timeout, out-of-memory or sanitizer
# report, printing the saved input and the start of the report; 77 (SKIP) when clang or
# its fuzzer runtime is missing; 2 on bad usage.
#
# Environment: FUZZ_CC (default clang; not CC, which CI often sets to gcc), FUZZ_JOBS
# (parallel fuzzing jobs per target, default 1), FUZZ_EXTRA_ARGS (more libFuzzer flags,
# e.g. "-max_len=65536").
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cc=${FUZZ_CC:-clang}
all_targets=(config safetensors prof_record prof_record_nosum handshake)

usage() {
    echo "usage: $0 [--build-dir DIR] SECONDS TARGET... (TARGET: ${all_targets[*]} | all)" >&2
    exit 2
}

build_dir=
if [[ ${1:-} == --build-dir ]]; then
    [[ $# -ge 2 ]] || usage
    build_dir=$2
    shift 2
fi
[[ $# -ge 2 && $1 =~ ^[0-9]+$ && $1 -ge 1 ]] || usage
seconds=$1
shift
targets=()
for t in "$@"; do
    if [[ $t == all ]]; then
        targets+=("${all_targets[@]}")
    elif [[ " ${all_targets[*]} " == *" $t "* ]]; then
        targets+=("$t")
    else
        echo "$0: unknown target '$t'" >&2
        usage
    fi
done

# The corpus and dictionary a target uses (the two prof_record targets share them).
corpus_of() { echo "${1%_nosum}"; }

cleanup_dir=
if [[ -z $build_dir ]]; then
    build_dir=$(mktemp -d "${TMPDIR:-/tmp}/moed-fuzz.XXXXXX") || exit 1
    cleanup_dir=$build_dir
fi
mkdir -p "$build_dir" || exit 1
build_dir=$(cd "$build_dir" && pwd)
trap '[[ -n $cleanup_dir ]] && rm -rf "$cleanup_dir"' EXIT

skip() {
    echo "SKIP: $*"
    exit 77
}

# --- toolchain ------------------------------------------------------------------------

command -v "$cc" >/dev/null 2>&1 || skip "$cc not found (install clang and libclang-rt-dev)"
sanitize=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
cflags=(-std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -fno-omit-frame-pointer
        -Wall -Wextra -Wno-unused-parameter "${sanitize[@]}"
        -I"$root/runtime/include" -I"$root/runtime/src" -I"$root/runtime/src/config/include"
        -I"$root/runtime/src/model/include" -I"$root/profiler/include"
        -I"$root/profiler/src" -I"$root/proto/include" -I"$here")
printf '#include <stddef.h>\n#include <stdint.h>\n#include <yaml.h>\n'\
'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; '\
'return yaml_get_version_string() == NULL; }\n' > "$build_dir/probe.c"
if ! probe_log=$("$cc" "${sanitize[@]}" "$build_dir/probe.c" -lyaml -o "$build_dir/probe" 2>&1); then
    skip "$cc cannot link -fsanitize=fuzzer,address,undefined with -lyaml (install" \
         "libclang-rt-dev and libyaml-dev): $(echo "$probe_log" | grep -m1 -i error)"
fi

# --- build ----------------------------------------------------------------------------

lib_srcs=(runtime/src/base/status.c runtime/src/base/hash.c runtime/src/base/phase.c
          runtime/src/base/file.c runtime/src/base/stop.c runtime/src/base/utf8.c
          runtime/src/config/config.c runtime/src/config/config_load.c
          runtime/src/config/config_checks.c runtime/src/config/placement.c
          runtime/src/config/config_print.c runtime/src/model/safetensors.c
          runtime/src/model/safetensors_dtype.c runtime/src/model/safetensors_write.c
          proto/src/prof_record.c proto/src/wire.c proto/src/hist.c proto/src/handshake.c)
objs=()
for src in "${lib_srcs[@]}"; do
    obj=$build_dir/lib_$(basename "${src%.c}").o
    if ! "$cc" "${cflags[@]}" -c "$root/$src" -o "$obj"; then
        echo "FAIL: cannot compile $src for fuzzing"
        exit 1
    fi
    objs+=("$obj")
done
for t in "${targets[@]}"; do
    if ! "$cc" "${cflags[@]}" "$here/fuzz_$t.c" "${objs[@]}" -lyaml -ljansson -lm -o "$build_dir/fuzz_$t"; then
        echo "FAIL: cannot build fuzz_$t"
        exit 1
    fi
done

# --- run ------------------------------------------------------------------------------

# Appended: the last value of an option wins, so a CI-wide ASAN_OPTIONS cannot turn the
# leak check off here.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1:allocator_may_return_null=0"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:halt_on_error=1"
common=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
read -r -a extra <<<"${FUZZ_EXTRA_ARGS:-}"

# Print what went wrong: the saved input(s) and the first lines of the report.
report() {
    local t=$1 log=$2 what=$3
    echo "FAIL: fuzz_$t: $what"
    grep -h -E 'Test unit written to' "$log" | sed 's/^.*Test unit written to /  input: /'
    # replaying seeds, libFuzzer names each file before running it: the last one failed
    grep -h '^Running: ' "$log" | tail -n 1 | sed 's/^Running: /  input: /'
    echo "  reproduce: $build_dir/fuzz_$t <input>   (log: $log)"
    echo "  --- report ---"
    awk '/^==[0-9]+==ERROR|runtime error:|^FUZZ-CHECK|ERROR: libFuzzer|^SUMMARY|ALARM: working on the last Unit/ {on=1}
         on && n < 40 {print "  " $0; n++}' "$log"
    if ! grep -q -E '^==[0-9]+==ERROR|runtime error:|^FUZZ-CHECK|ERROR: libFuzzer|ALARM' "$log"; then
        tail -n 25 "$log" | sed 's/^/  /'
    fi
}

failed=0
for t in "${targets[@]}"; do
    c=$(corpus_of "$t")
    seeds=$here/corpus/$c
    bin=$build_dir/fuzz_$t
    dict=()
    [[ -f $here/$c.dict ]] && dict=(-dict="$here/$c.dict")
    art=$build_dir/artifacts-$t
    work=$build_dir/corpus-$t
    rm -rf "$art" "$work"
    mkdir -p "$art" "$work"

    # 1. Regression: every committed seed once (a fixed crash added to the corpus stays fixed).
    mapfile -t files < <(find "$seeds" -maxdepth 1 -type f ! -name '.*' 2>/dev/null | sort)
    if [[ ${#files[@]} -gt 0 ]]; then
        log=$build_dir/replay-$t.log
        if ! "$bin" "${common[@]}" -artifact_prefix="$art/" "${files[@]}" >"$log" 2>&1; then
            report "$t" "$log" "a committed seed in tests/fuzz/corpus/$c fails"
            failed=1
            continue
        fi
        echo "fuzz_$t: replayed ${#files[@]} seeds of corpus/$c"
    fi

    # 2. Fuzz SECONDS over a copy of the corpus.
    [[ ${#files[@]} -gt 0 ]] && cp "${files[@]}" "$work/"
    log=$build_dir/run-$t.log
    jobs=${FUZZ_JOBS:-1}
    par=()
    [[ $jobs -gt 1 ]] && par=(-jobs="$jobs" -workers="$jobs")
    rm -f "$build_dir"/fuzz-*.log # the per-job logs of -jobs
    (cd "$build_dir" && "$bin" "${common[@]}" "${dict[@]}" "${par[@]}" "${extra[@]}" \
        -max_total_time="$seconds" -artifact_prefix="$art/" "$work") >"$log" 2>&1
    rc=$?
    [[ $jobs -gt 1 ]] && cat "$build_dir"/fuzz-*.log >>"$log" 2>/dev/null
    crashes=$(find "$art" -type f | wc -l)
    if [[ $rc -ne 0 || $crashes -ne 0 ]]; then
        report "$t" "$log" "exit status $rc, $crashes input(s) saved in $art"
        failed=1
        continue
    fi
    runs=$(grep -h -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s += $2} END {print s + 0}')
    speed=$(grep -h -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | awk '{s += $2} END {print s + 0}')
    cov=$(grep -h -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -n 1)
    echo "fuzz_$t: ok: $runs runs in ${seconds}s ($speed exec/s), $cov, corpus $(ls "$work" | wc -l) inputs"
done

if [[ $failed -ne 0 ]]; then
    cleanup_dir= # keep the inputs and logs for the report above
    exit 1
fi
exit 0
