#!/usr/bin/env bash
# files.sh CASE: report files are whole or absent, and the folder says which are missing.
# Real faults: a full file system (a small tmpfs), a read-only and an immutable output
# folder, many runs in one second, and metrics.csv over profiler.metrics_max_mb.
source "$(dirname "$0")/common.sh"
command -v python3 > /dev/null || { echo "SKIP: python3 is needed to parse the JSON reports"; exit 77; }
MNT=$WORK/mnt
IMM=$WORK/immutable
cleanup() {
  mountpoint -q "$MNT" 2> /dev/null && umount "$MNT"
  [[ -d $IMM ]] && chattr -i "$IMM" 2> /dev/null
  [[ -n "${KEEP_WORK:-}" ]] || rm -rf "$WORK"
}
trap cleanup EXIT

# tmpfs SIZE: a file system of that size at $MNT, or skip (77) saying why.
tmpfs() {
  mkdir -p "$MNT"
  if [[ $(id -u) -ne 0 ]] || ! mount -t tmpfs -o "size=$1" tmpfs "$MNT" 2> /dev/null; then
    echo "SKIP: cannot mount a tmpfs here (needs root and mount rights)"
    exit 77
  fi
}

# check_folder DIR NP: every file is whole (JSON parses, CSV rows complete, HTML ends) or
# absent, no .part is left, and INCOMPLETE names every file that is absent.
check_folder() {
  python3 - "$1" "$2" <<'PY'
import csv, glob, json, os, sys
d = sys.argv[1]
trace = "trace: false" not in open("c.yaml").read()
names = ["summary.json", "summary.txt", "config.yaml", "comm.csv", "metrics.csv",
         "report.html"] + ["trace.json"] * trace + ["summary_rank_%d.txt" % r for r in range(int(sys.argv[2]))]
left = [f for f in os.listdir(d) if f.endswith(".part") or f == ".reserve"]
assert not left, "partial files left: %s" % left
for f in glob.glob(d + "/*.json"):
    json.load(open(f))
for f in glob.glob(d + "/*.csv"):
    text = open(f).read()
    assert text.endswith("\n"), f + ": last row torn"
    rows = list(csv.reader(text.splitlines()))
    bad = [r for r in rows if len(r) != len(rows[0]) or any(x == "" for x in r)]
    assert not bad, "%s: torn rows %s" % (f, bad[:3])
if os.path.exists(d + "/report.html"):
    assert open(d + "/report.html").read().rstrip().endswith("</html>"), "report.html torn"
absent = [n for n in names if not os.path.exists(os.path.join(d, n))]
if absent:
    inc = open(d + "/INCOMPLETE").read()
    for n in absent:
        name = "summary_rank_*.txt" if n.startswith("summary_rank_") else n
        assert n in inc or name in inc, "%s is absent but INCOMPLETE does not say so:\n%s" % (n, inc)
print("whole or absent; absent:", absent)
PY
}

case "$1" in
  full_disk)  # the report does not fit: summaries first, the rest whole or absent, exit != 0
    tmpfs 256k
    H=64 F=128 STEPS=800 PROF=true small_model |
      sed -e "s|output_dir: .*|output_dir: $MNT/exp|" \
          -e 's/^  enabled: true/  enabled: true\n  measurement_steps: 800/' > c.yaml
    set +e; mpirun_moed 3 --config c.yaml --no-progress > run.log 2>&1; code=$?; set -e
    cat run.log | grep -v "^ *$" | tail -6
    [[ $code -ne 0 ]] || fail "the report did not fit, yet moed exited 0"
    d=$(ls -d "$MNT"/exp/*/ | head -1)
    [[ -f $d/INCOMPLETE ]] || fail "no INCOMPLETE marker in $d"
    cat "$d/INCOMPLETE"
    grep -q "No space left on device" "$d/INCOMPLETE" || fail "INCOMPLETE does not say why"
    for f in summary.json summary.txt summary_rank_0.txt summary_rank_1.txt summary_rank_2.txt; do
      [[ -s $d/$f ]] || fail "$f missing: the summaries must be written first"
    done
    check_folder "$d" 3 || fail "a file is torn or INCOMPLETE is wrong"
    # the headline lists only files that are there; metrics.csv agrees with summary.json
    grep "^  report: " run.log | grep -o '[a-z_]*\.\(json\|html\|txt\)' | while read -r f; do
      [[ -f $d/$f ]] || fail "the headline lists $f, which was not written"
    done
    python3 - "$d" <<'PY' || fail "summary.json does not match the files"
import json, os, sys
d = sys.argv[1]
run = json.load(open(d + "/summary.json"))["run"]
rows = 0  # metrics.csv absent when the disk took it: nothing to count
if os.path.exists(d + "/metrics.csv"):
    rows = sum(1 for _ in open(d + "/metrics.csv")) - 1
    assert run["metrics_rows"] == rows, (run["metrics_rows"], rows)
assert run["complete"] is False, "complete, with files missing"
inc = open(d + "/INCOMPLETE").read()
if run["metrics_lost"] > 0:  # its own line, or within the file's when the file is absent
    assert "%d rows from step %d on" % (run["metrics_lost"], run["metrics_stop_step"]) in inc, inc
    assert inc.count("metrics.csv:") == 1, "metrics.csv listed twice:\n" + inc
    assert "rows not written" in open(d + "/summary.txt").read()
print("metrics.csv:", rows, "rows;", run["metrics_lost"], "lost from step", run["metrics_stop_step"],
      "; not written:", run["files_not_written"])
PY
    ;;
  routing_full)  # routing.safetensors (profiler.record_routing) does not fit: it is one of the
    # report's files: absent, named in INCOMPLETE and summary.json, the error names it, exit 5
    tmpfs 256k  # the trace: 6 steps x 2048 tokens x 2 layers x top-2 x 8 B = 384 KiB
    H=64 F=128 TOKENS=2048 STEPS=6 PROF=true small_model |
      sed -e "s|output_dir: .*|output_dir: $MNT/exp\n  warmup_steps: 0\n  measurement_steps: 6\n  trace: false\n  record_routing: true|" > c.yaml
    set +e; mpirun_moed 3 --config c.yaml --no-progress > run.log 2>&1; code=$?; set -e
    cat run.log | grep -v "^ *$" | tail -6
    [[ $code -eq 5 ]] || fail "routing.safetensors did not fit: exit $code, want 5"
    d=$(ls -d "$MNT"/exp/*/ | head -1)
    [[ ! -e $d/routing.safetensors ]] || fail "routing.safetensors is there, whole?"
    ! ls "$d" | grep -q "tmp\." || { ls -la "$d"; fail "a temporary file is left"; }
    grep -q "^moed: error: .*/routing.safetensors: write failed: No space left on device" run.log \
      || fail "the error does not name routing.safetensors and the cause"
    grep -q "^routing.safetensors: not written: .*No space left on device" "$d/INCOMPLETE" \
      || { cat "$d/INCOMPLETE"; fail "INCOMPLETE does not name routing.safetensors"; }
    grep -q "INCOMPLETE report:.* routing.safetensors: not written" run.log \
      || fail "the headline does not say routing.safetensors is missing"
    python3 - "$d" <<'PY' || fail "summary.json does not say routing.safetensors is missing"
import json, sys
run = json.load(open(sys.argv[1] + "/summary.json"))["run"]
assert run["complete"] is False, run["complete"]
assert any(f.startswith("routing.safetensors") for f in run["files_not_written"]), run["files_not_written"]
print("summary.json: files_not_written", run["files_not_written"])
PY
    check_folder "$d" 3 || fail "a file is torn or INCOMPLETE is wrong"
    ;;
  routing_warmup)  # record_routing in a run of warm-up steps only: nothing recorded, nothing
    # missing: no routing.safetensors, no INCOMPLETE, exit 0, no wait for routing never sent
    PROF=true STEPS=2 small_model | sed -e 's/^  enabled: true/  enabled: true\n  record_routing: true/' > c.yaml
    t0=$SECONDS
    mpirun_moed 3 --config c.yaml --no-progress > run.log 2>&1 || { cat run.log; fail "exit non-zero"; }
    (( SECONDS - t0 < 30 )) || fail "took $((SECONDS - t0)) s: waited for routing no rank records"
    d=$(ls -d "$WORK"/experiments/*/ | head -1)
    [[ ! -e $d/INCOMPLETE && ! -e $d/routing.safetensors ]] || { ls "$d"; fail "INCOMPLETE or a routing file"; }
    ! grep -q "INCOMPLETE" run.log || fail "the headline says INCOMPLETE"
    ;;
  full_at_start)  # no byte free at start: refused before the run (a name alone still fits
    # a full disk: the check writes a block), exit 5, no folder made
    tmpfs 64k
    dd if=/dev/zero of="$MNT/fill" bs=4k 2> /dev/null || true
    PROF=true STEPS=3 small_model | sed -e "s|output_dir: .*|output_dir: $MNT/exp|" > c.yaml
    set +e; mpirun_moed 3 --config c.yaml --no-progress > run.log 2>&1; code=$?; set -e
    cat run.log | grep -v "^ *$" | tail -3
    [[ $code -eq 5 ]] || fail "a full disk at start: exit $code, want 5"
    grep -q "^moed: error: profiler.output_dir: cannot write in '$MNT/exp'.*No space left on device" run.log \
      || fail "the error does not say the disk is full"
    ! grep -q "^run: " run.log || fail "the steps ran before the refusal"
    [[ ! -e $MNT/exp ]] || fail "a folder was made"
    ;;
  disk_freed)  # the disk is full for a while, then freed: rows lost are counted, exit 5
    tmpfs 1m
    # 6000 steps of at least 1 ms (a sleep in rank 0's step hook): the run goes on for
    # seconds after the disk fills, whatever the build (under ASan the last ~1000 of 3000
    # fast steps once ended before the stall was seen, and the end report met a full disk);
    # the first write fails within ~2000 steps, the disk is freed 1000 steps later
    H=64 F=128 STEPS=6000 PROF=true small_model |
      sed -e "s|output_dir: .*|output_dir: $MNT/exp|" \
          -e 's/^  enabled: true/  enabled: true\n  measurement_steps: 100\n  repeat: 0\n  trace: false/' > c.yaml
    head -c $((1024 * 1024 - 160 * 1024)) /dev/zero > "$MNT/filler"  # 160 KiB left
    set +e
    : > run.log  # before the job: the loop reads it at once
    # shellcheck disable=SC2086  # (longer than mpirun_moed's bound: ASan on a loaded machine;
    # 195 s once beside six busy loops; ctest's bound for this test is 560 s)
    MOED_TEST_HOOK_DELAY_US=1000 timeout -k 5 500 mpirun $MPIRUN_FLAGS -np 3 "$MOED" \
      --config c.yaml --progress > run.log 2>&1 &
    pid=$!
    # Rows merge every 100-step window; metrics.csv.part stops growing when a write fails:
    # then free the disk, mid-run. Time alone cannot tell a failed write from a slow window
    # (under ASan on a loaded machine the disk was once freed before any write failed: the
    # rows then filled it and the end report found no space), so count steps: 1000 steps
    # (10 windows) done by rank 0 (its progress line) with no row written.
    last=-1; since=0; step=0
    for _ in $(seq 3600); do  # at least 360 s: inside the run's 500
      size=$(stat -c %s "$MNT"/exp/*/metrics.csv.part 2> /dev/null || echo -1)
      step=$(tr '\r' '\n' < run.log | sed -n 's|^step \([0-9]*\)/.*|\1|p' | tail -1)
      step=${step:-0}
      if [[ $size -ne $last ]]; then last=$size; since=$step; fi
      [[ $size -gt 0 && $((step - since)) -ge 1000 ]] && break
      kill -0 $pid 2> /dev/null || break
      sleep 0.1
    done
    kill -0 $pid 2> /dev/null || { cat run.log; fail "the run ended before its rows stopped"; }
    rm -f "$MNT/filler"
    echo "disk freed at step $step: metrics.csv.part at $last bytes since step $since"
    wait $pid; code=$?
    set -e
    grep -E "moed: error|report: |INCOMPLETE" run.log || true
    [[ $code -eq 5 ]] || { cat run.log; fail "exit $code after metrics.csv lost rows, expected 5"; }
    d=$(ls -d "$MNT"/exp/*/ | head -1)
    check_folder "$d" 3 || fail "a file is torn or INCOMPLETE is wrong"
    cat "$d/INCOMPLETE"
    python3 - "$d" <<'PY' || fail "the lost rows are not reported"
import json, sys
d = sys.argv[1]
run = json.load(open(d + "/summary.json"))["run"]
rows = sum(1 for _ in open(d + "/metrics.csv")) - 1
inc = open(d + "/INCOMPLETE").read().splitlines()
assert run["metrics_lost"] > 0 and run["metrics_rows"] == rows and not run["complete"], run
line = ("metrics.csv: %d rows from step %d on not written: No space left on device"
        % (run["metrics_lost"], run["metrics_stop_step"]))
assert inc[1:] == [line], inc
# summary.json says what INCOMPLETE says: complete false names why
assert run["files_not_written"] == [line], run["files_not_written"]
txt = open(d + "/summary.txt").read()
assert "%d rows not written" % run["metrics_lost"] in txt, "summary.txt does not count them"
print("metrics.csv:", rows, "rows whole,", run["metrics_lost"], "lost from step",
      run["metrics_stop_step"], "; every other file written")
PY
    ;;
  killed_writing)  # SIGKILL while trace.json (12 MB) is written: no torn trace.json
    STEPS=3000 PROF=true small_model |
      sed 's/^  enabled: true/  enabled: true\n  measurement_steps: 3000/' > c.yaml
    python3 - "$MOED" "$WORK/experiments" <<'PY' || fail "could not kill moed while it wrote trace.json"
import glob, os, signal, subprocess, sys, time
p = subprocess.Popen([sys.argv[1], "--config", "c.yaml", "--no-progress"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
end = time.time() + 100
while p.poll() is None and time.time() < end:
    if glob.glob(sys.argv[2] + "/*/trace.json.part"):
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        print("killed while trace.json.part was being written")
        sys.exit(0)
    time.sleep(0.001)
sys.exit(1)
PY
    d=$(ls -d "$WORK"/experiments/*/ | head -1)
    [[ ! -e $d/trace.json ]] || fail "trace.json exists after a kill during its write"
    cat "$d/INCOMPLETE"
    [[ $(grep -c "not yet written" "$d/INCOMPLETE") -eq 1 ]] && grep -q "^trace.json: not yet written" "$d/INCOMPLETE" \
      || fail "INCOMPLETE should list trace.json only"
    rm -f "$d"/*.part "$d/.reserve"  # a kill's leftovers, named as such; the rest must be whole
    check_folder "$d" 1 || fail "a file is torn after the kill"
    ;;
  read_only)  # a read-only output_dir: the real errno, exit 5
    tmpfs 1m
    mkdir -p "$MNT/exp"
    mount -o remount,ro "$MNT" || { echo "SKIP: cannot remount the tmpfs read-only"; exit 77; }
    PROF=true small_model | sed "s|output_dir: .*|output_dir: $MNT/exp|" > c.yaml
    set +e; mpirun_moed 3 --config c.yaml --no-progress > run.log 2>&1; code=$?; set -e
    grep "moed" run.log | grep -i "report" || true
    [[ $code -eq 5 ]] || { cat run.log; fail "exit $code, expected 5 (output not written)"; }
    grep -q "Read-only file system" run.log || { cat run.log; fail "the real errno is not reported"; }
    ! grep -q "No such file or directory" run.log || fail "'No such file or directory' for a read-only folder"
    ;;
  immutable)  # an immutable output_dir (chattr +i): the real errno, exit 5
    mkdir -p "$IMM"
    chattr +i "$IMM" 2> /dev/null || \
      { echo "SKIP: chattr +i is not supported on this file system ($WORK)"; exit 77; }
    PROF=true small_model | sed "s|output_dir: .*|output_dir: $IMM/exp|" > i.yaml
    set +e; "$MOED" --config i.yaml --no-progress > imm.log 2>&1; code=$?; set -e
    grep "moed" imm.log | grep -i "report" || true
    [[ $code -eq 5 ]] || { cat imm.log; fail "immutable folder: exit $code, expected 5"; }
    grep -q "Operation not permitted" imm.log || { cat imm.log; fail "immutable: errno not reported"; }
    ;;
  same_second)  # every name for the next seconds taken, runs at once: each its own folder
    PROF=true small_model > c.yaml
    "$MOED" --config c.yaml --no-progress > first.log 2>&1 || { cat first.log; fail "first run failed"; }
    first=$(ls -d "$WORK"/experiments/*/ | head -1)
    hash=$(basename "$first" | sed 's/.*_\([0-9a-f]*\)$/\1/')
    "$MOED" --config c.yaml --steps 4 --no-progress > steps.log 2>&1 || fail "--steps run failed"
    ls "$WORK"/experiments | grep -v "_$hash" > /dev/null || fail "--steps 4 is not in the folder's hash"
    python3 - "$WORK/experiments" "$hash" <<'PY'  # one process: forks are slow here
import os, sys, time
now = int(time.time())
for s in range(20):
    stamp = time.strftime("%Y-%m-%d__%H-%M-%S", time.localtime(now + s))
    for k in [""] + ["-%d" % i for i in range(2, 100)]:
        d = "%s/%s_%s%s" % (sys.argv[1], stamp, sys.argv[2], k)
        try:  # a folder an earlier run wrote this second is not "taken": leave it
            os.makedirs(d)
        except FileExistsError:
            continue
        open(d + "/taken", "w").close()
PY
    pids=()
    for i in 1 2 3 4; do
      "$MOED" --config c.yaml --no-progress > "run$i.log" 2>&1 & pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || fail "a concurrent run failed"; done
    dirs=$(grep -h "report: " run?.log | sed 's|.*report: \(.*\)/summary.txt.*|\1|' | sort -u)
    [[ $(echo "$dirs" | wc -l) -eq 4 ]] || { echo "$dirs"; fail "4 runs did not get 4 folders"; }
    for d in $dirs; do
      [[ ! -e $d/taken ]] || fail "$d was another run's folder"
      [[ ! -e $d/INCOMPLETE ]] || fail "$d: INCOMPLETE after a complete run"
      python3 -c "import json,sys; assert json.load(open(sys.argv[1]+'/summary.json'))['run']['run_dir']==sys.argv[1]" "$d" \
        || fail "$d/summary.json names another folder"
    done
    python3 - "$WORK/experiments" <<'PY' || fail "a taken folder was written into"
import os, sys
taken = [d for d in os.scandir(sys.argv[1]) if os.path.exists(d.path + "/taken")]
bad = [d.name for d in taken if os.listdir(d.path) != ["taken"]]
assert taken and not bad, bad
print("pre-taken folders untouched:", len(taken))
PY
    echo "own folders: $(for d in $dirs; do basename "$d"; done | tr '\n' ' ')"
    ;;
  metrics_bound)  # profiler.metrics_max_mb: 1 stops metrics.csv at 1 MiB, says at which step
    LAYERS=8 E=16 STEPS=600 PROF=true small_model |
      sed 's/^  enabled: true/  enabled: true\n  measurement_steps: 600\n  metrics_max_mb: 1/' > c.yaml
    "$MOED" --config c.yaml --no-progress > run.log 2>&1 || { cat run.log; fail "run failed (a bound is not an error)"; }
    d=$(ls -d "$WORK"/experiments/*/ | head -1)
    size=$(stat -c %s "$d/metrics.csv")
    [[ $size -le 1048576 ]] || fail "metrics.csv is $size bytes, over 1 MiB"
    [[ ! -e $d/INCOMPLETE ]] || fail "INCOMPLETE after a run that only reached the bound"
    check_folder "$d" 1 > /dev/null || fail "a file is torn"
    grep "metrics.csv" "$d/summary.txt" || fail "summary.txt does not say metrics.csv stopped"
    python3 - "$d" <<'PY' || fail "summary.json: the stop is not reported right"
import json, sys
d = sys.argv[1]
run = json.load(open(d + "/summary.json"))["run"]
steps = [int(l.split(",")[0]) for l in open(d + "/metrics.csv").read().splitlines()[1:]]
assert run["metrics_lost"] > 0 and "metrics_max_mb" in run["metrics_stop_reason"], run
assert run["metrics_stop_step"] > 0 and max(steps) <= run["metrics_stop_step"], (max(steps), run)
assert run["metrics_rows"] == len(steps) and run["complete"] is True, run
print("metrics.csv stopped at step", run["metrics_stop_step"], "after", len(steps), "rows;",
      run["metrics_lost"], "not written")
PY
    ;;
  *) fail "unknown case $1" ;;
esac
echo "PASS files $1"
