#!/usr/bin/env bash
# faults.sh CASE: a fault (SIGSTOP, SIGKILL, SIGTERM, SIGHUP, SIGINT) on one rank at one phase
# (start-up, loading, mid-step, after the last step, during the report, after the report:
# teardown, MPI_Finalize) of a 3-rank job. Each case checks: the job ends within its bound,
# with the expected exit code, one error line naming the rank at fault, and the report of the
# completed steps present and marked (or absent where the fault takes rank 0, which writes
# it). A deliberate stop (a signal) prints no error but a normal line. And what is no fault:
# mpirun paused and resumed (pause_mpirun), a load slower than the bound but steady
# (load_slow*). step_timeout_s is 3 s so bounds are short.
# Names: <signal>_<phase>_r<rank>. docs/faults.md "Failures and stopping" states the bounds.
source "$(dirname "$0")/common.sh"
command -v python3 > /dev/null || { echo "SKIP: python3 is needed to read the reports"; exit 77; }

TIMEOUT_S=3
# The issue's small job: hidden 256, ffn 512, 4 experts, 2 layers, 512 tokens, profiler on,
# warm-up 2. STEPS steps (default: long enough to be interrupted mid-run).
job() {
  H=${H:-256} F=${F:-512} E=${E:-4} TOKENS=${TOKENS:-512} STEPS=${STEPS:-100000} PROF=${PROF:-true} small_model \
    | sed "s/^runtime:/runtime:\n  step_timeout_s: $TIMEOUT_S/" \
    | sed 's/^  enabled: true/  enabled: true\n  warmup_steps: 2\n  measurement_steps: 5\n  repeat: 0/'
}

# run_bg [ENV=VALUE ...]: the job in the background (pid $job), bounded at 240 s.
run_bg() {
  local xs=()
  for kv in "$@"; do xs+=(-x "$kv"); done
  # shellcheck disable=SC2086
  # shellcheck disable=SC2086
  timeout --foreground -k 5 240 mpirun $MPIRUN_FLAGS -np 3 "${xs[@]}" "$MOED" --config c.yaml \
    "${PROGRESS:---no-progress}" ${MOED_EXTRA_ARGS:-} > run.log 2> err.log &
  job=$!
  t_start=$(date +%s%N)
}
# finish BOUND_S: wait for the job; $code, $took_ms (since $t_event, else the start).
finish() {
  set +e; wait "$job"; code=$?; set -e
  took_ms=$(( ($(date +%s%N) - ${t_event:-$t_start}) / 1000000 ))
  echo "exit $code after ${took_ms} ms (bound $1 s)"
  grep -v '^\s*$' err.log | grep -v -- '----' | head -12 || true
  [[ $code -ne 124 ]] || fail "the job hung: killed by the test's timeout"
  (( took_ms <= $1 * 1000 )) || fail "took ${took_ms} ms, bound $1 s"
}
# wait_steps N: until rank 0 has streamed N lines to metrics.csv (the run is in its steps;
# the file is metrics.csv.part until the report is complete), at most 180 s: rank 0 merges
# the windows' rows in batches (the first came after 18 s at a load of 9 on 2 cores; a
# 60 s bound failed at a load of 25), and the bound on the fault comes after, in finish.
wait_steps() {
  for _ in $(seq 1 1800); do
    f=$(ls "$WORK"/experiments/*/metrics.csv.part "$WORK"/experiments/*/metrics.csv \
          2> /dev/null | head -1 || true)
    [[ -n "$f" && $(wc -l < "$f") -gt ${1:-5} ]] && return
    sleep 0.1
  done
  fail "the run never reached its steps"
}
# wait_stopped R [TRIES]: until rank R has stopped itself (MOED_TEST_PAUSE), checked every
# 0.1 s, 200 times unless TRIES says (a pause in the steps comes after the start-up's load).
wait_stopped() {
  local p
  for _ in $(seq 1 "${2:-200}"); do
    p=$(rank_pid "$1")
    [[ -n "$p" && $(awk '{print $3}' "/proc/$p/stat" 2> /dev/null) == T ]] && return
    sleep 0.1
  done
  fail "rank $1 never stopped"
}
# expect_code N: mpirun's exit code is N. One exception, Open MPI's and not moed's: after a
# rank's MPI_Abort with errorcode N, mpirun itself may crash in PMIx_server_finalize while it
# tears the job down (SIGSEGV, exit 139; seen once, in stop_teardown_r1, 2026-11-26, Open
# MPI 4.1.4: a PMIx race on abort, cf. open-mpi/ompi#6222); moed asked for N, so that counts
# as N, said in the test's output.
expect_code() {
  if [[ $code -eq 139 ]] && grep -q "MPI_ABORT was invoked on rank [0-9]* in communicator MPI_COMM_WORLD" err.log \
     && grep -A1 "MPI_ABORT was invoked" err.log | grep -q "with errorcode $1\." \
     && grep -q "PMIx_server_finalize" err.log; then
    echo "mpirun crashed in PMIx_server_finalize after MPI_Abort with errorcode $1 (Open MPI's): counted as exit $1"
    return
  fi
  [[ $code -eq $1 ]] || fail "exit $code, expected $1"
}
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
# stopped_line REGEX: a deliberate stop is a normal end: no 'moed: error' line at all; rank 0
# says on stdout that it stopped, after how many steps, with the tokens/s of those steps;
# with the profiler on the report's path follows.
stopped_line() {
  local n; n=$(grep -c 'moed: error' err.log || true)
  [[ $n -eq 0 ]] || fail "a deliberate stop printed $n error line(s)"
  grep -qE "^moed: stopped by $1 after [0-9]+( of [0-9]+)? steps, [0-9]+ tokens/s over them" \
    run.log || fail "no line on stdout says it stopped ($1), after how many steps, tokens/s"
  if grep -q '^profiler:' c.yaml && grep -q '^  enabled: true' c.yaml; then
    grep -q '^  report: .*summary.txt' run.log || fail "no line says where the report is"
  fi
}
# report WHAT: the report's summary.json says WHAT (complete | partial | interrupted | none).
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
if want == "complete":
    # a fault after the report: the report stays as written, whole
    assert not s["partial"] and not run["interrupted"], ("a complete report", s["missing"])
    assert run["steps_run"] == run["steps_planned"], run
    print("complete:", run["steps_run"], "steps")
elif want == "partial":
    # every step may have run (a fault after the last one): partial says what is missing;
    # the watchdog ended it, no signal stopped it (it once said INTERRUPTED too)
    assert s["partial"], "the report must be marked partial"
    assert not run["interrupted"], "a watchdog's report is partial, not stopped by a signal"
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
  stall_balance_r1)  # symmetric routing with balanced copies: each layer the routing ranks
    # sum the experts' demand (an allreduce); a rank hung before it must be caught there too
    STEPS=40 ROUTING=symmetric job | sed 's/^  experts: auto/  experts: auto\n  copies: balance/' > c.yaml
    grep -q '^  copies: balance' c.yaml || fail "the config has no copies: balance"
    run_bg MOED_TEST_STALL=1:20
    finish 25
    expect_code 7
    one_error "watchdog: .*waiting in the experts' demand \(placement.copies: balance\).*rank 1 \(.*\) does not answer"
    report partial
    ;;
  stop_bench_r1)  # a rank stopped in --bench's latency rounds (after the steps and the
    # report; tight spins, not polls): caught as a step's wait is, named, exit 7, within T
    STEPS=6 job > c.yaml
    MOED_EXTRA_ARGS=--bench run_bg MOED_TEST_PAUSE=1:bench
    finish 25
    expect_code 7
    one_error "watchdog: .*phase --bench \(after the steps\): waiting in the bench's latency rounds.*rank 1 \(.*\) does not answer"
    report complete
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
    # what survives is metrics.csv.part, a readable CSV, and INCOMPLETE says so
    d=$(ls -d "$WORK"/experiments/*/ | head -1)
    cat "$d/INCOMPLETE"
    grep -q "^metrics.csv: .*metrics.csv.part" "$d/INCOMPLETE" || fail "INCOMPLETE does not name metrics.csv.part"
    head -1 "$d/metrics.csv.part" | grep -qx "step,layer,expert,rank,tokens,compute_ms,gflops" \
      || fail "metrics.csv.part does not start with the CSV header"
    awk -F, 'NF != 7 { exit 1 }' "$d/metrics.csv.part" || fail "metrics.csv.part has a torn row"
    (( $(wc -l < "$d/metrics.csv.part") > 1 )) || fail "metrics.csv.part has no rows"
    ;;
  kill_midstep_r1_ucx)  # UCX: a rank killed mid-step, 3 times; rank 0 must not abort in UCX
    # Rows of 4 kB x 1024 tokens: rank 0 is in UCX's shared-memory reads (process_vm_readv
    # from rank 1) most of the time, where a peer's death was fatal to rank 0 and its report
    # (3 runs in 6 lost it before UCX's peer error handling was asked for).
    H=1024 F=128 E=4 TOKENS=1024 STEPS=100000 PROF=true small_model \
      | sed "s/^runtime:/runtime:\n  transport: ucx\n  step_timeout_s: 30/" \
      | sed 's/^  enabled: true/  enabled: true\n  warmup_steps: 1\n  measurement_steps: 3\n  repeat: 0/' \
      > c.yaml
    sed 's/^  steps: .*/  steps: 1/' c.yaml > probe.yaml
    if ! timeout -k 5 60 mpirun $MPIRUN_FLAGS -np 2 "$MOED" --config probe.yaml --no-progress \
         > probe.log 2>&1; then
      grep -qE 'ucp_(config_read|init|worker_create|ep_create) failed|UCX failed to start' probe.log \
        && { echo "SKIP: UCX cannot start here: $(grep -m1 'moed: error' probe.log)"; exit 77; }
      cat probe.log; fail "the UCX probe run failed"
    fi
    for i in 1 2 3; do
      rm -rf "$WORK/experiments"; t_event=
      # rank 0's progress line says the steps have begun (with UCX the profile's rows reach
      # metrics.csv.part only at the end: wait_steps cannot see them)
      PROGRESS=--progress run_bg
      for _ in $(seq 1 600); do grep -q 'step [3-9]' run.log && break; sleep 0.1; done
      grep -q 'step [3-9]' run.log || fail "run $i never reached its steps"
      t_event=$(date +%s%N); kill -KILL "$(rank_pid 1)"
      finish 20
      [[ $code -ne 0 ]] || fail "exit 0 after rank 1 died"
      ! grep -qE 'process_vm_readv|Signal: Aborted|ucs_fatal_error' err.log \
        || fail "run $i: a rank aborted inside UCX"
      d=$(ls -d "$WORK"/experiments/*/ 2> /dev/null | head -1 || true)
      [[ -n "$d" && -f "$d/summary.json" && ! -e "$d/INCOMPLETE" ]] \
        || fail "run $i: no report of the completed steps: $(ls "$d" 2> /dev/null | tr '\n' ' ')"
      python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); assert s["run"]["recorded_steps"] > 0' \
        "$d/summary.json" || fail "run $i: the report has no recorded step"
      echo "run $i: report kept ($(grep -m1 'moed: error' err.log | cut -c1-120))"
    done
    ;;
  term_midstep_r1)  # SIGTERM to one rank: the job stops as one, the report is complete
    job > c.yaml
    run_bg
    wait_steps 10
    t_event=$(date +%s%N); kill -TERM "$(rank_pid 1)"
    finish 8
    expect_code 130
    stopped_line "SIGTERM on rank 1"
    report interrupted
    ;;
  hup_midstep_r2)  # SIGHUP to one rank: honoured like SIGTERM
    job > c.yaml
    run_bg
    wait_steps 10
    t_event=$(date +%s%N); kill -HUP "$(rank_pid 2)"
    finish 8
    expect_code 130
    stopped_line "SIGHUP on rank 2"
    report interrupted
    ;;
  int_midstep)  # Ctrl-C mid-step: the abandoned step's finished layers do not count
    LAYERS=4 job > c.yaml
    run_bg
    wait_steps 10
    t_event=$(date +%s%N); kill -INT "$job"
    finish 8
    [[ $code -ne 0 ]] || fail "exit 0 after Ctrl-C"
    stopped_line ".*"
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
  stop_finalize_r1)  # a rank stopped at MPI_Finalize's door, after the report and the last
    # barrier: Open MPI's last fence would wait for it forever; rank 0 ends the job past T
    STEPS=40 job > c.yaml
    run_bg MOED_TEST_PAUSE=1:finalize
    finish 30
    [[ $code -ne 0 ]] || fail "exit 0 with a rank stopped in MPI_Finalize"
    one_error "watchdog: rank 0 waited 3 s in MPI_Finalize: every rank reached it"
    grep -q '  report: ' run.log || fail "no report line"
    report complete
    ;;
  stop_teardown_r1)  # a rank stopped after the last barrier, before its teardown: named
    STEPS=40 job > c.yaml
    run_bg MOED_TEST_PAUSE=1:teardown
    finish 30
    expect_code 7
    one_error "watchdog: .*phase the end \(teardown done, before MPI_Finalize\).*rank 1 \(.*\) does not answer"
    report complete
    ;;
  stop_exit_r1)  # a rank stopped after MPI_Finalize returned (past Open MPI's last fence,
    # where the others leave): the node's exit board tells; rank 0 names it, exit 7 (before,
    # mpirun waited for it forever)
    STEPS=6 job > c.yaml
    run_bg MOED_TEST_PAUSE=1:exit
    finish 25
    expect_code 7
    one_error "watchdog: rank 0 \(.*\) waited 3 s after MPI_Finalize for rank 1 \(.*\) to end: stopped, hung or lost"
    report complete
    ;;
  pause_mpirun)  # mpirun alone paused (SIGSTOP) and resumed: it passes its SIGCONT on to
    # the ranks, which ran on meanwhile; that is no end of the job: it completes, exit 0.
    # Rank 0's hook sleeps 20 ms a step, so the 500 steps last 10 s or more after start-up
    # (rank 0's first line, the dtypes, comes before the weights): the pause lands in them.
    STEPS=500 job > c.yaml
    run_bg MOED_TEST_HOOK_DELAY_US=20000
    for _ in $(seq 1 600); do grep -q '^experts: ' run.log && break; sleep 0.1; done
    grep -q '^experts: ' run.log || fail "rank 0 never printed its dtypes line"
    sleep 3
    mp=$(pgrep -P "$job" -x mpirun) || fail "no mpirun under the test's timeout"
    kill -STOP "$mp"; sleep 2; kill -CONT "$mp"
    sleep 2
    kill -0 "$job" 2> /dev/null || fail "the job ended right after mpirun was resumed"
    grep -q 'Forwarding signal 18' err.log || fail "mpirun did not pass its SIGCONT on"
    finish 85
    expect_code 0
    [[ $(grep -c 'moed: error' err.log || true) -eq 0 ]] || fail "an error line after a pause"
    grep -q '^tokens/s: ' run.log || fail "no tokens/s"
    report complete
    ;;
  term_noend_noprof)  # SIGTERM to mpirun, a run without end, profiler off: it says it
    # stopped, after how many steps and their tokens/s (it used to print nothing or an error)
    STEPS=0 PROF=false job > c.yaml
    run_bg
    for _ in $(seq 1 600); do grep -q '^experts: ' run.log && break; sleep 0.1; done
    sleep 3
    t_event=$(date +%s%N); kill -TERM "$job"
    finish 10
    [[ $code -ne 0 ]] || fail "exit 0 after SIGTERM to mpirun (its own code: 1)"
    stopped_line "mpirun ending the job \(Ctrl-C or a signal to mpirun\)"
    grep -q '(profiler off: no report)' run.log || fail "the line does not say there is no report"
    ;;
  load_slow)  # the expert ranks load for longer than T, slowly and steadily (700 ms a piece,
    # 12 pieces a rank: 8.4 s or more, past T + the pings' grace) while rank 0, which hosts no expert, waits for them at
    # start-up: a busy rank is not a hung one; the job completes (32 tokens: short steps)
    H=1024 F=3584 E=8 LAYERS=1 STEPS=3 TOKENS=32 PLACEMENT='{1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}' \
      job > c.yaml
    run_bg MOED_TEST_LOAD_DELAY_MS=700
    finish 80
    expect_code 0
    [[ $(grep -c 'moed: error' err.log || true) -eq 0 ]] || fail "an error line"
    grep -q '^tokens/s: ' run.log || fail "no tokens/s"
    report complete
    ;;
  load_slow_ckpt)  # the same from a BF16 checkpoint (held in BF16, packed where oneDNN
    # runs): every tensor read takes 700 ms more, 12 a rank (2 experts x 2 layers x 3)
    "$MAKE_CKPT" ckpt.safetensors mixtral bf16 64 96 4 2 1 32 input.safetensors \
      || fail "make_checkpoint failed"
    H=64 F=96 E=4 LAYERS=2 FIRST=1 STEPS=3 TOKENS=32 WEIGHTS=ckpt.safetensors \
      INPUT=input.safetensors PLACEMENT='{1: [0, 1], 2: [2, 3]}' job > c.yaml
    run_bg MOED_TEST_LOAD_DELAY_MS=700
    finish 80
    expect_code 0
    [[ $(grep -c 'moed: error' err.log || true) -eq 0 ]] || fail "an error line"
    # the packing runs where the CPU computes in BF16; elsewhere (no avx512_bf16) the same
    # load is widened to F32, and this checks the slow load alone
    if grep -qw avx512_bf16 /proc/cpuinfo; then
      grep -q 'bf16 compute' run.log || fail "no BF16 compute: the packing was not exercised"
    else
      grep -q 'f32 compute' run.log || fail "no F32 compute on a CPU without BF16"
    fi
    report complete
    ;;
  stop_rebalance_r2)  # a rank stopped in an online rebalance, its weight moves arrived
    # (MOED_TEST_PAUSE=2:rebalance): the others wait for it in the rebalance's reduction;
    # the watchdog names it and rank 0 writes the report of the steps before, marked partial
    H=256 F=512 E=8 TOKENS=512 SKEW=1.5 STEPS=40 PROF=true small_model \
      | sed "s/^runtime:/runtime:\n  step_timeout_s: $TIMEOUT_S\n  rebalance_every: 4\n  redundant_experts: 2/" \
      | sed 's/^  enabled: true/  enabled: true\n  warmup_steps: 1\n  measurement_steps: 2\n  repeat: 0/' \
      > c.yaml
    run_bg MOED_TEST_PAUSE=2:rebalance
    finish 30
    expect_code 7
    one_error "watchdog: .*rank 2 \(.*\) does not answer"
    report partial
    ;;
  load_stop_r1)  # the same load, rank 1 stopped in the middle of it: still caught, named
    H=1024 F=3584 E=8 LAYERS=1 STEPS=3 TOKENS=32 PLACEMENT='{1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}' \
      job > c.yaml
    run_bg MOED_TEST_LOAD_DELAY_MS=700
    for _ in $(seq 1 600); do grep -q '^experts: ' run.log && break; sleep 0.1; done
    grep -q '^experts: ' run.log || fail "rank 0 never printed its dtypes line"
    sleep 1
    t_event=$(date +%s%N); kill -STOP "$(rank_pid 1)"
    finish 25
    expect_code 7
    one_error "watchdog: .*rank 1 \(.*\) does not answer"
    ;;
  routing_term)  # SIGTERM mid-run while routing is recorded (symmetric: every rank routes):
    # routing.safetensors holds exactly the completed recorded steps, every token of them
    ROUTING=symmetric job | sed 's/^  repeat: 0/  repeat: 1\n  record_routing: true/; s/^  measurement_steps: 5/  measurement_steps: 400/' > c.yaml
    run_bg
    wait_steps 10
    t_event=$(date +%s%N); kill -TERM "$(rank_pid 1)"
    finish 20
    expect_code 130
    report interrupted
    d=$(ls -d "$WORK"/experiments/*/ | sort | tail -1)
    python3 - "$d" <<'PY' || fail "routing.safetensors of a stopped run"
import json, struct, sys
d = sys.argv[1]
s = json.load(open(d + "/summary.json"))
n_steps = s["run"]["recorded_steps"]
raw = open(d + "/routing.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); m = h.pop("__metadata__")
T = int(m["tokens_per_step"])
rows = {v["shape"][0] for v in h.values()}
assert rows == {n_steps * T}, (rows, n_steps, T)
print("routing.safetensors: %d completed recorded steps x %d tokens" % (n_steps, T))
PY
    ;;
  routing_killed)  # a routing rank dies (symmetric): no routing.safetensors, said why; the
    # report is partial as without the recording
    ROUTING=symmetric job | sed 's/^  repeat: 0/  repeat: 1\n  record_routing: true/; s/^  measurement_steps: 5/  measurement_steps: 400/' > c.yaml
    run_bg
    wait_steps 10
    t_event=$(date +%s%N); kill -9 "$(rank_pid 2)"
    finish 60
    [[ $code -ne 0 ]] || fail "exit 0 after a rank died"
    d=$(ls -d "$WORK"/experiments/*/ | sort | tail -1)
    [[ -f "$d/summary.json" ]] || fail "no report"
    [[ ! -e "$d/routing.safetensors" ]] || fail "routing.safetensors written without rank 2's tokens"
    ls "$d" | grep -q 'routing.safetensors' && fail "a routing.safetensors temporary left behind"
    grep -q "INCOMPLETE report:.* routing.safetensors: not written: the routing of [0-9]* of the ${TOKENS:-512} tokens" run.log \
      || { cat run.log; fail "the headline does not say why routing.safetensors is missing"; }
    grep -q "^routing.safetensors: not written: the routing of [0-9]* of the" "$d/INCOMPLETE" \
      || { cat "$d/INCOMPLETE"; fail "INCOMPLETE does not list routing.safetensors and why"; }
    ;;
  routing_killed_master)  # master routing, an expert rank killed mid-step after the other
    # expert rank completed its part of that step: the step in flight counts for nothing, so
    # run.recorded_steps, routing.safetensors' rows and rank 0's steps agree. One layer:
    # rank 2's experts take 4 s a step before their rows go back, rank 1 ends step 4 and
    # stops itself at step 5's begin, and rank 2 is killed within 0.1 s of that, while it
    # still sleeps in step 4 (the test checks it: rank 1 holds one step more than rank 0).
    TIMEOUT_S=30 LAYERS=1 STEPS=40 job \
      | sed 's/^  repeat: 0/  repeat: 1\n  record_routing: true/; s/^  measurement_steps: 5/  measurement_steps: 400/' > c.yaml
    run_bg MOED_TEST_EXPERT_DELAY_MS=2:4000 MOED_TEST_PAUSE=1:step5
    wait_stopped 1 1800
    t_event=$(date +%s%N); kill -9 "$(rank_pid 2)"
    finish 60
    [[ $code -ne 0 ]] || fail "exit 0 after a rank died"
    d=$(ls -d "$WORK"/experiments/*/ | sort | tail -1)
    python3 - "$d" <<'PY' || fail "recorded_steps, the trace and the steps done disagree"
import json, struct, sys
d = sys.argv[1]
s = json.load(open(d + "/summary.json"))
run = s["run"]
warmup = 2
raw = open(d + "/routing.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); m = h.pop("__metadata__")
T = int(m["tokens_per_step"])
rows = {v["shape"][0] for v in h.values()}
print("steps_run", run["steps_run"], "recorded_steps", run["recorded_steps"], "trace rows",
      rows, "T", T, "ranks' steps", [k.get("steps") for k in s["ranks"]])
assert run["steps_run"] == 4, "rank 0 completed steps 0..3: %s" % run["steps_run"]
assert [k.get("steps") for k in s["ranks"]][1] == 3, "rank 1 did not complete step 4"
assert run["recorded_steps"] == run["steps_run"] - warmup, "recorded_steps counts a step the job did not complete"
assert rows == {run["recorded_steps"] * T}, (rows, run["recorded_steps"], T)
PY
    ;;
  routing_killed_symmetric)  # symmetric routing: rank 0 ends a step that rank 1 never
    # ends, then a rank dies: run.recorded_steps counts that step for no one (the least any
    # present routing rank completed), though rank 0's steps_run does. One layer, 6 experts,
    # two on each rank; a replayed trace sends rank 0's tokens to its own experts, rank 1's
    # and rank 2's to rank 2's, whose experts take 4 s a step before their rows go back.
    # Rank 0 ends step 4 as soon as its rows came and stops itself at step 5's begin; rank 2
    # is killed within 0.1 s of that, while it still sleeps in step 4 (checked: rank 0
    # holds one recorded step more than rank 1), so rank 1 never ends step 4. Rank 2 is not
    # profiled: rank 0 takes no part of its records mid-run, which (a message in flight from
    # a rank that sleeps) could hold rank 0 in step 4's end until rank 2's sleep is over.
    TIMEOUT_S=30 LAYERS=1 STEPS=40 E=6 TOKENS=96 ROUTING=symmetric \
      PLACEMENT='{0: [0, 1], 1: [2, 3], 2: [4, 5]}' job \
      | sed "s|^workload:|workload:\n  routing: $WORK/t.safetensors|; s/^  routing_skew: .*/  routing_skew: 0/" \
      | sed 's/^  repeat: 0/  repeat: 1\n  record_routing: true\n  profiled_ranks: [0, 1]/; s/^  measurement_steps: 5/  measurement_steps: 400/' > c.yaml
    python3 - "$WORK/t.safetensors" <<'PY'
import json, struct, sys
from array import array
T = 96  # rank r routes tokens [32 r, 32 r + 32)
ids = array("i", [e for t in range(T) for e in ((0, 1) if t < 32 else (4, 5))])
ws = array("f", [0.5] * (2 * T))
if struct.pack("=i", 1) != struct.pack("<i", 1):
    ids.byteswap(); ws.byteswap()
h = {"__metadata__": {"format": "moed-routing/1", "num_experts": "6", "top_k": "2",
                      "tokens_per_step": str(T), "layers": "[0]", "family": "",
                      "source": "faults.sh", "weights": "uniform"},
     "layers.0.topk_ids": {"dtype": "I32", "shape": [T, 2], "data_offsets": [0, 4 * 2 * T]},
     "layers.0.topk_weights": {"dtype": "F32", "shape": [T, 2],
                               "data_offsets": [4 * 2 * T, 8 * 2 * T]}}
text = json.dumps(h).encode(); text += b" " * (-len(text) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(text)) + text + ids.tobytes() + ws.tobytes())
PY
    run_bg MOED_TEST_EXPERT_DELAY_MS=2:4000 MOED_TEST_PAUSE=0:step5
    wait_stopped 0 1800
    t_event=$(date +%s%N); p2=$(rank_pid 2); kill -9 "$p2"
    echo "rank 0 stopped itself $(( (t_event - t_start) / 1000000 )) ms after the start; rank 2 killed $(( ($(date +%s%N) - t_event) / 1000000 )) ms later"
    finish 60
    [[ $code -ne 0 ]] || fail "exit 0 after a rank died"
    d=$(ls -d "$WORK"/experiments/*/ | sort | tail -1)
    python3 - "$d" <<'PY' || fail "recorded_steps counts a step a routing rank did not complete"
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
run, steps = s["run"], [k.get("steps") for k in s["ranks"]]
print("steps_run", run["steps_run"], "recorded_steps", run["recorded_steps"], "ranks' steps", steps,
      "present", [k.get("present") for k in s["ranks"]])
assert run["steps_run"] == 5, "rank 0 completed steps 0..4: %s" % run["steps_run"]
assert steps[0] == 3 and steps[1] == 2, "rank 1 completed step 4 (the kill came late?): %s" % steps
assert run["recorded_steps"] == steps[1], "recorded_steps counts step 4, which rank 1 never completed"
PY
    ;;
  *) fail "unknown case $1" ;;
esac
echo "PASS faults $1"
