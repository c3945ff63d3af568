#!/usr/bin/env bash
# plan.sh CASE: `moed plan` on a real report: a skewed run, its plan, the rerun with the
# planned config, `moed compare`; and the bad input plan refuses (exit 2, one message,
# nothing written).
source "$(dirname "$0")/common.sh"
command -v python3 > /dev/null || { echo "SKIP: python3 is needed to parse the JSON reports"; exit 77; }
run_dir() { ls -d "$WORK"/experiments/*/ | sort | tail -1; }

# skewed routing, 8 experts in contiguous blocks on ranks 1 and 2 (master 0 routes only)
skewed_run() {
  PROF=true SKEW=1.2 TOKENS=256 STEPS=8 H=64 F=128 PLACEMENT='{1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}' \
    small_model | sed 's/^  enabled: true/  enabled: true\n  warmup_steps: 1/' > c.yaml
  mpirun_moed 3 --config c.yaml --no-progress > a.log 2>&1 || { cat a.log; fail "skewed run failed"; }
  A=$(run_dir); sleep 1
}

# refuses ARGS...: `moed plan ARGS` exits 2 with a message holding $want on stderr's first
# line and nothing on stdout; $out (the -o path) is left as it was ($before: its hash, or
# "absent"); one that waits (exit 124: a FIFO read, say) fails it
refuses() {
  set +e; timeout -k 5 60 "$MOED" plan "$@" > out.log 2> err.log; local code=$?; set -e
  cat err.log
  [[ $code -eq 2 ]] || fail "exit $code, want 2"
  head -1 err.log | grep -qF -- "$want" || fail "first line of stderr lacks: $want"
  head -1 err.log | grep -q '^moed plan: error: ' || fail "the first line is not 'moed plan: error: ...'"
  [[ $(wc -l < err.log) -eq 1 ]] || fail "more than one line on stderr"
  [[ ! -s out.log ]] || { cat out.log; fail "something on stdout"; }
  if [[ $before == absent ]]; then
    [[ ! -e $out ]] || fail "$out was written"
  else
    [[ $(sha256sum < "$out") == "$before" ]] || fail "$out was changed"
  fi
}

case "$1" in
  checkpoint)
    # a checkpoint run's report (model.checkpoint replaces model.weights/first_layer: the
    # plan must neither read nor write those); routing from the checkpoint's own router
    PY=""
    for p in ${MOED_PYTHON:-} /usr/bin/python3 python3; do
      if "$p" -c 'import numpy' 2>/dev/null; then PY=$p; break; fi
    done
    [[ -n $PY ]] || { echo "SKIP: no python3 with numpy to write the checkpoint"; exit 77; }
    "$PY" "$(dirname "$0")/../models/make_reference.py" ck gpt_oss bf16 --tokens 16 \
      --experts 8 --hidden 64 --ffn 128 --moe-layers 2 --min-margin 0 > make.log 2>&1 \
      || { cat make.log; fail "make_reference.py failed"; }
    printf 'model: {checkpoint: %s/ck}\nplacement:\n  experts: {1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}\nworkload: {tokens_per_step: 128, steps: 4, input: random}\nprofiler: {enabled: true, warmup_steps: 1, output_dir: %s/experiments}\n' \
      "$WORK" "$WORK" > c.yaml
    mpirun_moed 3 --config c.yaml --no-progress > a.log 2>&1 || { cat a.log; fail "checkpoint run failed"; }
    A=$(run_dir); sleep 1
    "$MOED" plan "$A" --ranks 3 --redundant 2 -o p.yaml > plan.log 2>&1 \
      || { cat plan.log; fail "plan of a checkpoint run failed"; }
    grep -q "^  checkpoint: " p.yaml || fail "p.yaml lacks model.checkpoint"
    ! grep -qE "^  (weights|first_layer): " p.yaml || fail "p.yaml names model.weights/first_layer beside the checkpoint"
    mpirun_moed 3 --config p.yaml --no-progress > b.log 2>&1 || { cat b.log; fail "planned run failed"; }
    echo "PASS: plan of a checkpoint run, rerun"
    ;;
  end_to_end)
    skewed_run
    "$MOED" plan "$A" --ranks 3 --redundant 2 -o p.yaml > plan.log 2>&1 \
      || { cat plan.log; fail "plan failed"; }
    cat plan.log
    grep -q '^# predicted per-rank load max/mean' p.yaml || fail "p.yaml lacks the predicted figures"
    predicted=$(awk '/^  overall +before/ { print $5 }' plan.log)
    [[ -n $predicted ]] || fail "no overall 'after' figure in the plan's printout"
    mpirun_moed 3 --config p.yaml --no-progress > b.log 2>&1 || { cat b.log; fail "planned run failed"; }
    B=$(run_dir)
    [[ $B != "$A" ]] || fail "the planned run wrote no report"
    python3 - "$A" "$B" "$predicted" <<'PY' || fail "the planned run is not what the plan said"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:3])
predicted = float(sys.argv[3])
# the same seed and input: the router chose the same experts, so loads compare like for like
assert [l["demand"] for l in a["layers"]] == [l["demand"] for l in b["layers"]], "routing differs"
assert a["replicas"] == [], a["replicas"]
W, E = b["run"]["world_size"], b["run"]["num_experts"]
def overall(s):
    """sum over layers of the busiest rank's rows / sum of the means over ranks with experts"""
    mx = mean = 0.0
    for l in range(s["run"]["num_layers"]):
        reps = {(x["expert"], x["rank"]): x["tokens"] for x in s["replicas"] if x["layer"] == l}
        load, hosts = [0.0] * W, set()
        for e in (x for x in s["experts"] if x["layer"] == l):
            copies = [(r, t) for (x, r), t in reps.items() if x == e["expert"]]
            for r, t in copies or [(e["rank"], e["tokens"])]:
                load[r] += t
                hosts.add(r)
        mx += max(load[r] for r in hosts)
        mean += sum(load[r] for r in hosts) / len(hosts)
    return mx / mean
# 2 redundant copies per layer: the replicas rows name them, each copy did some rows
for l in range(b["run"]["num_layers"]):
    rows = [x for x in b["replicas"] if x["layer"] == l]
    extra = len(rows) - len({x["expert"] for x in rows})
    assert extra == 2, (l, rows)
    assert all(x["tokens"] > 0 for x in rows), rows
    for e in {x["expert"] for x in rows}:
        total = next(x["tokens"] for x in b["experts"] if x["layer"] == l and x["expert"] == e)
        assert sum(x["tokens"] for x in rows if x["expert"] == e) == total, (l, e)
before, after = overall(a), overall(b)
print("per-rank max/mean: before %.3f, after %.3f, predicted %.3f" % (before, after, predicted))
assert after < before, (before, after)
# The plan splits an expert's count evenly over its copies; the run splits each step's
# rows into contiguous shares, off by at most one row per copy per step (here 2 x 7 rows
# on ~1800 per rank, under 1%): 0.05 is loose for that and still far from `before`.
assert abs(after - predicted) <= 0.05, (after, predicted)
PY
    "$MOED" compare "$A" "$B" > cmp.log 2>&1 || { cat cmp.log; fail "compare failed"; }
    sed -n '/^Placement/,/^  overall/p' cmp.log
    grep -q "placement changed" cmp.log || fail "compare shows no placement change"
    grep -qE 'B: [0-9* ]*[0-9]\*' cmp.log || fail "compare marks no replica (e*)"
    grep -q "^  overall max/mean" cmp.log || fail "compare shows no overall per-rank max/mean"
    long=$(awk 'length > 200' cmp.log | wc -l)
    [[ $long -eq 0 ]] || fail "compare has $long lines over 200 characters"
    ;;
  more_ranks)  # 8 experts planned onto 9 expert ranks: one is left empty, and the plan's
    # "after" averages over the ranks that hold an expert, as the run's figure does (it
    # divided by all 9: 9/8 of the run's)
    skewed_run
    "$MOED" plan "$A" --ranks 10 -o p.yaml > plan.log 2>&1 || { cat plan.log; fail "plan failed"; }
    cat plan.log
    predicted=$(awk '/^  overall +before/ { print $5 }' plan.log)
    [[ -n $predicted ]] || fail "no overall 'after' figure in the plan's printout"
    mpirun_moed 10 --config p.yaml --no-progress > b.log 2>&1 || { cat b.log; fail "planned run failed"; }
    B=$(run_dir)
    python3 - "$B" "$predicted" <<'PY' || fail "the planned run is not what the plan said"
import json, sys
b, predicted = json.load(open(sys.argv[1] + "/summary.json")), float(sys.argv[2])
W = b["run"]["world_size"]
mx = mean = 0.0
for l in range(b["run"]["num_layers"]):
    load, hosts = [0.0] * W, set()
    for e in (x for x in b["experts"] if x["layer"] == l):
        load[e["rank"]] += e["tokens"]
        hosts.add(e["rank"])
    assert len(hosts) == 8, hosts  # 8 experts, one a rank: one expert rank holds none
    mx += max(load[r] for r in hosts)
    mean += sum(load[r] for r in hosts) / len(hosts)
print("overall max/mean: run %.3f, predicted %.3f" % (mx / mean, predicted))
assert abs(mx / mean - predicted) <= 0.02, (mx / mean, predicted)
PY
    ;;
  not_report)
    mkdir notreport; echo x > notreport/data.txt
    out=p.yaml before=absent want="notreport: not a moed report folder"
    refuses notreport --ranks 3 -o p.yaml
    want="nosuch: No such file or directory"  # a wrong path reads apart from a wrong folder
    refuses nosuch --ranks 3 -o p.yaml ;;
  rebalanced)  # a run whose online rebalancing moved experts: summary.json's experts[].rank
    # and replicas[] give the configured placement, not where they ran after the move, so
    # plan and --check refuse it (exit 2, one line), and take it once no rebalance moved one.
    # routing_skew 16: every token picks experts 0 and 1, both on rank 1 (auto: 0-3 on rank 1,
    # 4-7 on rank 2). The rebalance before step 4 packs 2 extra copies, 5 slots a rank: 0, 0,
    # 1, 1 (128 rows each) onto ranks 1, 2, 1, 2, then the idle 2-7 lowest rank first: 2, 3,
    # 4 on rank 1, 5, 6, 7 on rank 2. Rank 2 gains 0 and 1, rank 1 gains 4: 3 copies in each
    # of the 2 layers, 6 moved in 1 rebalance (the one before step 8 has nothing to gain).
    PROF=true SKEW=16 TOKENS=64 STEPS=9 H=64 F=128 small_model \
      | sed 's/^runtime:/runtime:\n  rebalance_every: 4\n  redundant_experts: 2/' \
      | sed 's/^  enabled: true/  enabled: true\n  warmup_steps: 0\n  record_routing: true/' > c.yaml
    mpirun_moed 3 --config c.yaml --no-progress > a.log 2>&1 || { cat a.log; fail "the run failed"; }
    A=$(run_dir)
    out=p.yaml before=absent want="online rebalancing moved 6 experts in 1 rebalance (summary.json rebalances[])"
    refuses "$A" --ranks 3 -o p.yaml
    refuses --check "$A"
    # --routing plans from its recorded trace, on its config: its "before" is the configured
    # placement, said so (it read "where its experts ran")
    "$MOED" plan --routing "$A" --ranks 3 -o r.yaml > rplan.log 2>&1 \
      || { cat rplan.log; fail "plan --routing on the rebalanced run failed"; }
    grep -q "its online rebalancing moved 6 experts, so 'before' is the configured placement" \
      rplan.log || { cat rplan.log; fail "plan --routing does not say its 'before' is the configured placement"; }
    # the same report with no expert moved: taken (the refusal is the moves, not the key)
    python3 - "$A/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
for x in s["rebalances"]:
    x["experts_moved"] = 0
json.dump(s, open(sys.argv[1], "w"))
PY
    "$MOED" plan "$A" --ranks 3 -o p.yaml > plan.log 2>&1 || { cat plan.log; fail "a report with no move refused"; } ;;
  odd_path)  # a report folder whose path is not UTF-8 or holds a newline: the planned config,
    # which names it in a comment, must still load (libyaml refuses a comment not in UTF-8)
    skewed_run
    # not UTF-8, a newline, and what libyaml would take as a line break or refuse: NEL
    # (U+0085), U+2028, a C1 control (U+0080)
    for name in $'odd\xff' $'odd\nline' $'odd\xc2\x85x: 1' $'odd\xe2\x80\xa8' $'odd\xc2\x80'; do
      mkdir "$name"; cp -r "$A" "$name/run"
    done
    for d in $'odd\xff/run' $'odd\nline/run' $'odd\xc2\x85x: 1/run' $'odd\xe2\x80\xa8/run' $'odd\xc2\x80/run'; do
      "$MOED" plan "$d" --ranks 3 -o p.yaml --force > plan.log 2>&1 || { cat plan.log; fail "plan of an odd path failed"; }
      head -1 p.yaml | grep -qE '^# moed plan odd\\x(FF|0A|C2|E2)' || { head -2 p.yaml; fail "the path is not escaped in the comment"; }
      "$MOED" --config p.yaml --check-config --ranks 3 > check.log 2>&1 || { cat check.log; fail "the planned config does not load"; }
    done ;;
  other_shape)  # -o names a config of another model shape: not replaced
    skewed_run
    E=16 small_model > other.yaml
    out=other.yaml before=$(sha256sum < other.yaml) want="is a config of another model shape"
    refuses "$A" --ranks 3 -o other.yaml ;;
  exists)  # a second plan does not replace the first without --force (-o or the default)
    skewed_run
    "$MOED" plan "$A" --ranks 3 -o p.yaml > plan.log 2>&1 || { cat plan.log; fail "first plan failed"; }
    out=p.yaml before=$(sha256sum < p.yaml)
    want="-o p.yaml exists (a config of this model): not replacing it; --force replaces it"
    refuses "$A" --ranks 3 --redundant 2 -o p.yaml
    "$MOED" plan "$A" --ranks=3 --redundant=2 -o p.yaml --force > plan.log 2>&1 \
      || { cat plan.log; fail "--force (and --ranks=3 --redundant=2) did not replace p.yaml"; }
    [[ $(sha256sum < p.yaml) != "$before" ]] || fail "--force left p.yaml as it was"
    grep -qE "^  overall +before" plan.log || fail "--force: no figures printed"
    "$MOED" --config p.yaml --check-config --ranks 3 > check.log 2>&1 || { cat check.log; fail "the replaced p.yaml does not load"; }
    # the default target, REPORT_DIR/planned.yaml, the same way
    dir=${A%/}
    "$MOED" plan "$dir" --ranks 3 > plan.log 2>&1 || { cat plan.log; fail "plan to the default file failed"; }
    out=$dir/planned.yaml before=$(sha256sum < "$dir/planned.yaml")
    want="$dir/planned.yaml exists (a config of this model): not replacing it"
    refuses "$dir" --ranks 3 --redundant 2 ;;
  redundant_beyond)  # 8 experts on 2 expert ranks: at most 8 extra copies
    skewed_run
    out=p.yaml before=absent want="--redundant 9 is more than the 8 free slots"
    refuses "$A" --ranks 3 --redundant 9 -o p.yaml ;;
  slots_beyond)  # --slots 5 on 2 expert ranks: 10 slots for 8 experts
    skewed_run
    out=p.yaml before=absent want="--redundant 3 is more than the 2 free slots"
    refuses "$A" --ranks 3 --redundant 3 --slots 5 -o p.yaml ;;
  ranks_small)
    skewed_run
    out=p.yaml before=absent want="--ranks 1 is too small"
    refuses "$A" --ranks 1 -o p.yaml
    out=p.yaml before=absent want="--ranks 3 is too small: 8 experts need 4 expert ranks"
    refuses "$A" --ranks 3 --slots 2 -o p.yaml ;;
  columns|balance)  # every expert on both ranks as column shares, or balanced per step:
    # refused (nothing to place; a dispatch the prediction does not follow)
    PROF=true TOKENS=64 STEPS=4 H=64 F=128 small_model \
      | sed "s/^  enabled: true/  enabled: true\n  warmup_steps: 1/; s/^placement:/placement:\n  copies: $1/" > c.yaml
    mpirun_moed 3 --config c.yaml --no-progress > a.log 2>&1 || { cat a.log; fail "$1 run failed"; }
    out=p.yaml before=absent want="the base config sets placement.copies: $1"
    refuses "$(run_dir)" --ranks 3 -o p.yaml ;;
  io_faults)  # input that is not a file, numbers past moed's bounds, a report with nothing
    # recorded, an -o that cannot be written (exit 5)
    skewed_run
    out=p.yaml before=absent
    mkfifo hf.fifo; want="--hostfile hf.fifo: a FIFO (named pipe)"
    refuses "$A" --ranks 3 --hostfile hf.fifo -o p.yaml
    mkdir fifo_rep; mkfifo fifo_rep/summary.json
    want="fifo_rep/summary.json: is a FIFO (named pipe), not a regular file"
    refuses fifo_rep --ranks 3 -o p.yaml
    rc=0; timeout 20 "$MOED" compare fifo_rep "$A" > cmp.log 2>&1 || rc=$?
    [[ $rc -eq 2 ]] && grep -q "is a FIFO (named pipe), not a regular file" cmp.log \
      || { cat cmp.log; fail "moed compare on a FIFO summary.json: exit $rc"; }
    want="--ranks 5000 is more than 4096"; refuses "$A" --ranks 5000 -o p.yaml
    want="--ranks 99999999999 is more than 4096"; refuses "$A" --ranks 99999999999 -o p.yaml
    rc=0; "$MOED" plan "$A" --ranks 3 -o "$WORK/no/such/folder/p.yaml" > w.log 2>&1 || rc=$?
    [[ $rc -eq 5 ]] && grep -q "^moed plan: error: cannot write .*/p.yaml: No such file or directory" w.log \
      || { cat w.log; fail "-o that cannot be written: exit $rc, want 5"; }
    PROF=true STEPS=2 H=64 F=128 small_model > w.yaml  # every step a warm-up step
    mpirun_moed 3 --config w.yaml --no-progress > wr.log 2>&1 || { cat wr.log; fail "warm-up run"; }
    want="the report recorded no expert choices (0 recorded steps"; refuses "$(run_dir)" --ranks 3 -o p.yaml
    ;;
  unknown_option)
    mkdir rep
    out=rep/planned.yaml before=absent want="unknown option: --frobnicate"
    refuses rep --ranks 3 --frobnicate
    want="-o needs a path"; refuses rep --ranks 3 -o
    want="--ranks needs a non-negative integer"; refuses rep --ranks
    want="--ranks needs a non-negative integer"; refuses rep --ranks=
    want="--force takes no value"; refuses rep --ranks 3 --force=yes
    want="--slots 1025 is more than 1024"; refuses rep --ranks 3 --slots 1025  # MOE_MAX_EXPERTS
    # an option given twice: refused, as moed's own (docs/config.md), not the last one winning
    want="--ranks given twice"; refuses rep --ranks 3 --ranks 4
    want="-o given twice"; refuses rep --ranks 3 -o a.yaml -o rep/planned.yaml
    [[ ! -e a.yaml ]] || fail "-o given twice wrote a.yaml"
    "$MOED" plan --help > help.log 2>&1 || fail "plan --help exits non-zero"
    grep -q '^usage: moed plan REPORT_DIR --ranks N' help.log || fail "plan --help: no usage" ;;
  *) fail "unknown case $1" ;;
esac
echo "PASS: plan $1"
