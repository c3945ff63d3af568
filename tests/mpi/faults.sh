#!/usr/bin/env bash
# faults.sh CASE: a fault (SIGSTOP, SIGKILL, SIGTERM, SIGHUP, SIGINT) on one rank at one phase
# (start-up, mid-step, after the last step, during the report) of a 3-rank job. Each case
# checks: the job ends within its bound, with the expected exit code, one error line naming
# the rank at fault, and the report of the completed steps present and marked (or absent
# where the fault takes rank 0, which writes it). step_timeout_s is 3 s so bounds are short.
# Names: <signal>_<phase>_r<rank>. docs/faults.md "Failures and stopping" states the bounds.
source "$(dirname "$0")/common.sh"
command -v python3 > /dev/null || { echo "SKIP: python3 is needed to read the reports"; exit 77; }

TIMEOUT_S=3
# The issue's small job: hidden 256, ffn 512, 4 experts, 2 layers, 512 tokens, profiler on,
# warm-up 2. STEPS steps (default: long enough to be interrupted mid-run).
job() {
  H=256 F=512 E=4 TOKENS=512 STEPS=${STEPS:-100000} PROF=true small_model \
    | sed "s/^runtime:/runtime:\n  step_timeout_s: $TIMEOUT_S/" \
    | sed 's/^  enabled: true/  enabled: true\n  warmup_steps: 2\n  measurement_steps: 5\n  repeat: 0/'
}

# run_bg [ENV=VALUE ...]: the job in the background (pid $job), bounded at 90 s.
run_bg() {
  local xs=()
  for kv in "$@"; do xs+=(-x "$kv"); done
  # shellcheck disable=SC2086
  timeout --foreground -k 5 90 mpirun $MPIRUN_FLAGS -np 3 "${xs[@]}" "$MOED" --config c.yaml \
    --no-progress > run.log 2> err.log &
  job=$!
  t_start=$(date +%s%N)
}
# finish BOUND_S: wait for the job; $code, $took_ms (since $t_event, else the start).
finish() {
  set +e; wait "$job"; code=$?; set -e
  took_ms=$(( ($(date +%s%N) - ${t_event:-$t_start}) / 1000000 ))
  echo "exit $code after ${took_ms} ms (bound $1 s)"
  grep -v '^\s*$' err.log | grep -v -- '----' | head -12 || true
  (( took_ms < 90000 )) || fail "the job hung: killed by the test's timeout"
  (( took_ms <= $1 * 1000 )) || fail "took ${took_ms} ms, bound $1 s"
}
rank_pid() {
  for p in $(pgrep -f "$MOED --config"); do
    if tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$p"; return
    fi
  done
}
# wait_steps N: until rank 0 has streamed N lines to metrics.csv (the run is in its steps;
# the file is metrics.csv.part until the report is complete), at most 60 s.
wait_steps() {
  for _ in $(seq 1 600); do
    f=$(ls "$WORK"/experiments/*/metrics.csv.part "$WORK"/experiments/*/metrics.csv \
          2> /dev/null | head -1 || true)
    [[ -n "$f" && $(wc -l < "$f") -gt ${1:-5} ]] && return
    sleep 0.1
  done
  fail "the run never reached its steps"
}
# wait_stopped R: until rank R has stopped itself (MOED_TEST_PAUSE): the job is in start-up.
wait_stopped() {
  local p
  for _ in $(seq 1 200); do
    p=$(rank_pid "$1")
    [[ -n "$p" && $(awk '{print $3}' "/proc/$p/stat" 2> /dev/null) == T ]] && return
    sleep 0.1
  done
  fail "rank $1 never stopped"
}
expect_code() { [[ $code -eq $1 ]] || fail "exit $code, expected $1"; }
# one_error REGEX: exactly one 'moed: error' line that says why, and it matches. Besides
# it, a rank that mpirun resumes to end it (SIGCONT) may say it stopped; nothing else.
one_error() {
  local stopped='stopped by SIG\|stopped by mpirun\|stop requested'
  local n; n=$(grep 'moed: error' err.log | grep -vc "$stopped" || true)
  [[ $n -eq 1 ]] || fail "want one error line, got $n"
  grep 'moed: error' err.log | grep -v "$stopped" | grep -qE "$1" \
    || fail "the error line does not match: $1"
}
# only_error REGEX: exactly one 'moed: error' line at all, and it matches.
only_error() {
  local n; n=$(grep -c 'moed: error' err.log || true)
  [[ $n -eq 1 ]] || fail "want one error line, got $n"
  grep 'moed: error' err.log | grep -qE "$1" || fail "the error line does not match: $1"
}
# report WHAT: the report's summary.json says WHAT (partial | interrupted | none).
report() {
  local d; d=$(ls -d "$WORK"/experiments/*/ 2> /dev/null | sort | tail -1 || true)
  python3 - "$1" "${d:-}" <<'PY' || fail "report check ($1)"
import json, os, sys
want, d = sys.argv[1], sys.argv[2]
path = os.path.join(d, "summary.json") if d else ""
if want == "none":
    # rank 0 is gone: no summary (or a complete one); metrics.csv is what may survive
    if path and os.path.exists(path):
        json.load(open(path))
    print("no report from a lost rank 0; left:", sorted(os.listdir(d)) if d else [])
    sys.exit(0)
s = json.load(open(path))
run = s["run"]
assert run["recorded_steps"] > 0, "the completed steps must be in the report"
if want == "partial":
    # every step may have run (a fault after the last one): partial says what is missing
    assert s["partial"], "the report must be marked partial"
    print("partial; missing:", s["missing"])
else:
    assert run["interrupted"], "the report must say the run was interrupted"
    assert not s["partial"], ("every rank's last record must arrive", s["missing"])
    print("interrupted after", run["steps_run"], "steps")
for r in s["ranks"]:
    assert r["steps"] <= run["steps_run"], r
PY
}

case "$1" in
  stop_startup_r1)  # a rank stopped in start-up: the others' agreement times out
    job > c.yaml
    run_bg MOED_TEST_PAUSE=1:startup
    finish 25
    expect_code 7
    one_error "watchdog: .*start-up.*rank 1 does not answer"
    ;;
  stop_midstep_r1)  # a rank stopped mid-run: rank 0 writes the completed steps, exit 7
    job > c.yaml
    run_bg
    wait_steps 10
    t_event=$(date +%s%N); kill -STOP "$(rank_pid 1)"
    finish 20
    expect_code 7
    one_error "watchdog: .*rank 1 \(.*\) does not answer"
    report partial
    ;;
  stall_midstep_r2)  # a rank hung (not stopped): the same, with the report
    STEPS=40 job > c.yaml
    run_bg MOED_TEST_STALL=2:20
    finish 25
    expect_code 7
    one_error "watchdog: .*rank 2 \(.*\) does not answer"
    report partial
    ;;
  stop_end_r1)  # a rank stopped after the last step (the summary, the clock sync)
    STEPS=40 job > c.yaml
    run_bg MOED_TEST_PAUSE=1:end
    finish 25
    expect_code 7
    one_error "watchdog: .*rank 1 \(.*\) does not answer"
    report partial
    ;;
  stop_report_r2)  # a rank stopped while rank 0 gathers the report
    STEPS=40 job > c.yaml
    run_bg MOED_TEST_PAUSE=2:report
    finish 25
    expect_code 7
    one_error "watchdog: .*rank 2 \(.*\) does not answer"
    report partial
    ;;
  stop_end_r0)  # the master stopped after the last step: another rank names it; no report
    STEPS=40 job > c.yaml
    run_bg MOED_TEST_PAUSE=0:end
    finish 30
    expect_code 7
    one_error "watchdog: .*rank 0 \(.*\) does not answer"
    report none
    ;;
  kill_midstep_r0)  # the master killed: mpirun names it, the job ends; what survives
    job > c.yaml
    run_bg
    wait_steps 10
    t_event=$(date +%s%N); kill -KILL "$(rank_pid 0)"
    finish 15
    [[ $code -ne 0 ]] || fail "exit 0 after rank 0 died"
    grep -qE "rank 0 .*(exited on signal 9|killed)" err.log run.log || fail "rank 0 not named"
    report none
    ;;
  term_midstep_r1)  # SIGTERM to one rank: the job stops as one, the report is complete
    job > c.yaml
    run_bg
    wait_steps 10
    t_event=$(date +%s%N); kill -TERM "$(rank_pid 1)"
    finish 8
    expect_code 130
    only_error "stopped by SIGTERM on rank 1 after [0-9]+ of"
    report interrupted
    ;;
  hup_midstep_r2)  # SIGHUP to one rank: honoured like SIGTERM
    job > c.yaml
    run_bg
    wait_steps 10
    t_event=$(date +%s%N); kill -HUP "$(rank_pid 2)"
    finish 8
    expect_code 130
    only_error "stopped by SIGHUP on rank 2 after [0-9]+ of"
    report interrupted
    ;;
  int_midstep)  # Ctrl-C mid-step: the abandoned step's finished layers do not count
    LAYERS=4 job > c.yaml
    run_bg
    wait_steps 10
    t_event=$(date +%s%N); kill -INT "$job"
    finish 8
    [[ $code -ne 0 ]] || fail "exit 0 after Ctrl-C"
    only_error "stopped by .* after [0-9]+ of"
    report interrupted
    d=$(ls -d "$WORK"/experiments/*/ | sort | tail -1)
    python3 - "$d" <<'PY' || fail "figures of an abandoned step in the report"
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
run = s["run"]
# master routing: rank 0 routes every token; its completed steps are the choices made
# (an expert rank may complete one step more or less than rank 0 when the signal comes)
steps0 = [r for r in s["ranks"] if r["rank"] == 0][0]["steps"]
want = steps0 * run["tokens_per_step"] * run["top_k"]
totals = [l["demand_total"] for l in s["layers"]]
assert all(t == want for t in totals), ("choices per layer", totals, "want", want)
for r in s["ranks"]:
    assert r["exchange_ms"] >= 0, (r["rank"], r["exchange_ms"])
idle = s["findings"].get("idle_share")
assert idle is None or 0 <= idle <= 1, ("idle share", idle)
print("every layer", want, "choices over", steps0, "steps")
PY
    ;;
  int_startup)  # Ctrl-C on mpirun during start-up (rank 1 held there): says it stopped
    job > c.yaml
    run_bg MOED_TEST_PAUSE=1:startup
    wait_stopped 1
    t_event=$(date +%s%N); kill -INT "$job"
    finish 6
    [[ $code -ne 0 ]] || fail "exit 0 after Ctrl-C"
    grep -q 'stopped by .* during start-up' err.log || fail "no line says it stopped"
    ;;
  *) fail "unknown case $1" ;;
esac
echo "PASS faults $1"
