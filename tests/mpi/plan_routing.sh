#!/usr/bin/env bash
# plan_routing.sh CASE: `moed plan --routing` on real runs. A skewed run records its routing
# (profiler.record_routing), moed plans from the trace (the report's own config the base),
# the planned config replays the trace (workload.routing), and the replay's tokens per
# expert rank, layer by layer, are what the plan predicted: the same counts, exactly
# (`moed plan --check`, and summary.json read here). The "before" the plan prints is what
# the recording run measured. Cases: master routing without replicas; symmetric routing
# with replicas, a capacity limit and 2 chunks; the planned config loads (--check-config)
# for a trace written here without any run.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/common.sh"
command -v python3 > /dev/null || { echo "SKIP: python3 is needed to parse the JSON reports"; exit 77; }
run_dir() { ls -d "$WORK"/experiments/*/ | sort | tail -1; }

# needs_replay: record and replay are config keys of this moed (the test waits for them)
needs_replay() {
  "$MOED" --help-config > keys.txt 2>&1 || true
  grep -q "profiler.record_routing" keys.txt && grep -q "workload.routing" keys.txt \
    || { echo "SKIP: this moed has no profiler.record_routing / workload.routing"; exit 77; }
}

# record: a skewed run of c.yaml's model on 3 ranks, 7 steps, the first one warm-up, the 6
# others recorded with their routing; A its report folder
record() {
  PROF=true SKEW=1.2 TOKENS=128 STEPS=7 H=64 F=128 small_model \
    | sed 's/^  enabled: true/  enabled: true\n  warmup_steps: 1\n  measurement_steps: 6\n  record_routing: true/' \
    > c.yaml
  mpirun_moed 3 --config c.yaml --no-progress > a.log 2>&1 || { cat a.log; fail "recording run failed"; }
  A=$(run_dir); sleep 1
  [[ -f $A/routing.safetensors ]] || fail "the recording run wrote no routing.safetensors"
}

# replay_config IN OUT TRACE: the planned config with workload.routing set to the trace (and
# no routing_skew, which only the gate takes) and the recording off
replay_config() {
  python3 - "$1" "$2" "$3" <<'PY'
import sys
src, dst, trace = sys.argv[1:4]
out, sec = [], None
for line in open(src).read().split("\n"):
    if line and not line.startswith(" "):
        sec = line.rstrip(":")
    if sec == "workload" and line.startswith(("  routing:", "  routing_skew:")):
        continue  # the replay replaces the gate: a skew for it is refused
    if sec == "profiler" and line.startswith("  record_routing:"):
        continue
    out.append(line)
    if line == "workload:":
        out.append("  routing: %s" % trace)
assert "workload:" in out, "the planned config has no workload section"
open(dst, "w").write("\n".join(out))
PY
}

# check_exact PLAN_YAML RUN_DIR WHICH: the run's tokens per expert rank, per layer, against
# the plan's comment line (WHICH before or after): the same max, total and ranks
check_exact() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, re, sys
plan, run, which = sys.argv[1:4]
pat = re.compile(r"^#   layer (\d+): before [\d.]+ \(max (\d+) / mean ([\d.]+) on (\d+) ranks\), "
                 r"after [\d.]+ \(max (\d+) / mean ([\d.]+) on (\d+) ranks\); (\d+) in all$")
pred = {}
for line in open(plan):
    m = pat.match(line.rstrip("\n"))
    if m:
        l, bmax, bmean, bh, amax, amean, ah, total = m.groups()
        if which == "before":
            pred[int(l)] = (int(bmax), round(float(bmean) * int(bh)), int(bh))
        else:
            pred[int(l)] = (int(amax), int(total), int(ah))
s = json.load(open(run + "/summary.json"))
W, L = s["run"]["world_size"], s["run"]["num_layers"]
assert sorted(pred) == list(range(L)), ("prediction lines", sorted(pred), L)
for l in range(L):
    reps = {(x["expert"], x["rank"]): x["tokens"] for x in s["replicas"] if x["layer"] == l}
    load, hosts = [0] * W, set()
    for e in (x for x in s["experts"] if x["layer"] == l):
        copies = [(r, t) for (x, r), t in reps.items() if x == e["expert"]]
        for r, t in copies or [(e["rank"], e["tokens"])]:
            load[r] += int(t)
            hosts.add(r)
    mx, total = max(load[r] for r in hosts), sum(load[r] for r in hosts)
    pmax, ptotal, phosts = pred[l]
    print("layer %d %s: run max %d total %d on %d ranks; predicted max %d total %d on %d"
          % (l, which, mx, total, len(hosts), pmax, ptotal, phosts))
    assert (mx, total, len(hosts)) == (pmax, ptotal, phosts), "not what the plan predicted"
PY
}

# plan_replay_check REDUNDANT: plan from A's trace, replay it under the plan, check
plan_replay_check() {
  "$MOED" plan --routing "$A" --ranks 3 --redundant "$1" -o p.yaml > plan.log 2>&1 \
    || { cat plan.log; fail "plan --routing failed"; }
  cat plan.log
  grep -q "base config: .*summary.json (the recording run's config)" plan.log \
    || fail "the plan did not take the recording report's config as its base"
  # the plan's "before" is the recording run's placement: what A measured
  check_exact p.yaml "$A" before || fail "the plan's 'before' is not what the recording run measured"
  replay_config p.yaml r.yaml "$A/routing.safetensors"
  mpirun_moed 3 --config r.yaml --no-progress > b.log 2>&1 || { cat b.log; fail "replay run failed"; }
  B=$(run_dir)
  [[ $B != "$A" ]] || fail "the replay wrote no report"
  check_exact p.yaml "$B" after || fail "the replay did not measure what the plan predicted"
  set +e; "$MOED" plan --check "$B" > check.log 2>&1; code=$?; set -e
  cat check.log
  [[ $code -eq 0 ]] || fail "moed plan --check: exit $code, want 0"
  grep -q "^result: the run measured what the plan predicted, in all 2 layers" check.log \
    || fail "plan --check does not say the run measured the prediction"
  "$MOED" compare "$A" "$B" > cmp.log 2>&1 || { cat cmp.log; fail "compare failed"; }
  sed -n '/^Load and time per layer/,/^$/p' cmp.log
  grep -q "^Load and time per layer, A | B" cmp.log || fail "compare shows no load and time per layer"
  grep -q "^     routing: " cmp.log || fail "compare names no routing source"
}

case "$1" in
  master)  # master routing, experts in blocks on ranks 1 and 2, no replicas
    needs_replay
    PLACEMENT='{1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}' record
    plan_replay_check 0
    ;;
  replicas_symmetric)  # every rank routes and hosts; 2 extra copies; capacity; 2 chunks
    needs_replay
    ROUTING=symmetric CF=1.25 CHUNKS=2 record
    plan_replay_check 2
    grep -q "capacity .* per expert and step" plan.log || fail "the plan does not name the capacity"
    ;;
  loads)  # no run: a trace written here, planned onto a base config; the config loads
    python3 "$HERE/make_trace.py" t.safetensors --layers 0,1 --experts 8 --top-k 2 \
      --rows 320 --step 64 || fail "make_trace.py failed"
    E=8 K=2 LAYERS=2 TOKENS=64 small_model > base.yaml
    "$MOED" plan --routing t.safetensors --ranks 3 --redundant 2 --config base.yaml -o p.yaml \
      > plan.log 2>&1 || { cat plan.log; fail "plan --routing failed"; }
    cat plan.log
    grep -q "the trace's 320 tokens in 5 steps of 64" plan.log || fail "the plan's scope"
    "$MOED" --config p.yaml --check-config --ranks 3 > check.log 2>&1 \
      || { cat check.log; fail "the planned config does not load for 3 ranks"; }
    # the trace cannot be read: exit 2, one message, nothing written
    set +e; "$MOED" plan --routing nothing.safetensors --ranks 3 --config base.yaml -o q.yaml \
      > out.log 2> err.log; code=$?; set -e
    [[ $code -eq 2 ]] || fail "a missing trace: exit $code, want 2"
    grep -q "nothing.safetensors" err.log || fail "the message does not name the trace"
    [[ ! -e q.yaml ]] || fail "q.yaml written"
    ;;
  *) fail "unknown case $1" ;;
esac
echo "PASS: plan_routing $1"
