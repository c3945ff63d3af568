#!/usr/bin/env bash
# The decode benchmark's plumbing (tests/bench/bench_decode.sh, bench_stream, moed --bench's
# latency lines) on a tiny shape: every figure is there and consistent, the counts exchange
# of master routing is the master's messages alone; no speed asserted.
# bench.sh decode | speedup | plan | layers
source "$(dirname "$0")/common.sh"
here=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$(dirname "$MOED")" && pwd)
case "$1" in
  speedup)  # a held type and its widened baseline back to back, two rounds: the speed-up
            # lines are the widened run's step over the held one's, round by round, by the
            # mean step and by the median step (trace.json's, whose mean is the report's)
    # the MXFP4 checkpoint is NumPy's (tests/models/make_reference.py, the python3 that
    # bench_decode.sh runs)
    PYN=$( [[ -x /usr/bin/python3 ]] && echo /usr/bin/python3 || command -v python3)
    "$PYN" -c 'import numpy' 2>/dev/null || { echo "SKIP: NumPy (python3-numpy) not installed"; exit 77; }
    HIDDEN=256 FFN=128 LAYERS=2 STEPS=6 WARMUP=2 TOKENS="1" BENCH=0 ROUNDS=2 \
      timeout -k 5 250 bash "$here/tests/bench/bench_decode.sh" "$build" "mxfp4 mxfp4-bf16" "8:2" \
      > out.log 2> err.log || { cat out.log err.log; fail "bench_decode.sh failed"; }
    cat out.log
    python3 - out.log <<'PY' || fail "speed-up lines"
import re, statistics, sys
t = open(sys.argv[1]).read()
rows = [l.split() for l in t.splitlines() if l.startswith("mxfp4")]
labels = [r[0] for r in rows]
assert labels == ["mxfp4", "mxfp4-bf16"] * 2, labels        # back to back, round by round
steps = [float(x) for x in re.findall(r"^    floor: .*; step mean ([0-9.]+) ms\)$", t, re.M)]
# each run's reads before and after it ("read: A GB/s before the run, B after"), and whether
# it read its weights faster than the higher one (its row: expert GB/s over read GB/s)
quick = [float(r[11]) > float(r[10]) for r in rows]
reads = re.findall(r"^    read: ([0-9.]+) GB/s before the run, ([0-9.]+) after", t, re.M)
meds = re.findall(r"^    median step: ([0-9.]+) ms \(trace.json, exact: (\d+) steps, mean ([0-9.]+) ms\); "
                  r"step GB/s at it ([0-9.]+), /read ([0-9.]+); (\d+) over twice it \(the longest ([0-9.]+) ms\)$",
                  t, re.M)
assert len(steps) == 4 and len(reads) == 4 and len(meds) == 4, (steps, reads, meds)
for mean, (med, n, tmean, gbps, ratio, over, longest) in zip(steps, meds):
    # the trace's 4 recorded steps (STEPS 6, WARMUP 2) are the ones the report's mean took
    assert int(n) == 4, n
    assert abs(float(tmean) - mean) <= 0.002 + 0.001 * mean, (tmean, mean)
    assert 0 < float(med) <= float(longest) and 0 <= int(over) < int(n), (med, longest, over)
    if abs(float(longest) - 2 * float(med)) > 0.002:  # clear of the printed figures' rounding
        assert (int(over) > 0) == (float(longest) > 2 * float(med)), (med, longest, over)
medians = [float(m[0]) for m in meds]
for how, figs in (("mean", steps), ("median", medians)):
    m = re.search(r"^  mxfp4 over mxfp4-bf16, 1 tokens, 8:4, replicas, %s step: median ([0-9.]+)x of 2 of "
                  r"2 rounds \(([0-9.]+)-([0-9.]+)x\), (?:([0-9.]+)x of the (\d) with steady reads|none with "
                  r"steady reads): (.*)$" % how, t, re.M)
    assert m, "no speed-up line by the %s step" % how
    rounds = re.findall(r"round (\d) ([0-9.]+)x \(([0-9.]+) / ([0-9.]+) ms, read ([0-9.]+)-([0-9.]+) / "
                        r"([0-9.]+)-([0-9.]+) GB/s(, reads unsteady|, read faster than the reads)?\)",
                        m.group(6))
    assert [r[0] for r in rounds] == ["1", "2"], rounds
    want, steady = [], []
    for i, (_, x, w, h, wb, wa, hb, ha, unsteady) in enumerate(rounds):
        held, widened = figs[2 * i], figs[2 * i + 1]
        assert float(h) == held and float(w) == widened, (how, h, w, held, widened)
        assert (hb, ha) == reads[2 * i] and (wb, wa) == reads[2 * i + 1], (hb, ha, wb, wa, reads)
        want.append(widened / held)
        assert abs(float(x) - widened / held) < 0.006, (x, widened, held)
        four = [float(v) for v in (wb, wa, hb, ha)]
        agree = min(four) >= 0.8 * max(four)  # the four reads within 20%
        faster = quick[2 * i] or quick[2 * i + 1]
        ok = agree and not faster             # steady
        assert unsteady == ("" if ok else ", reads unsteady" if not agree
                            else ", read faster than the reads"), (four, faster, unsteady)
        if ok:
            steady.append(widened / held)
    assert abs(float(m.group(1)) - statistics.median(want)) < 0.006, (m.group(1), want)
    assert abs(float(m.group(2)) - min(want)) < 0.006 and abs(float(m.group(3)) - max(want)) < 0.006
    if steady:
        assert int(m.group(5)) == len(steady), (m.group(5), steady)
        assert abs(float(m.group(4)) - statistics.median(steady)) < 0.006, (m.group(4), steady)
    else:
        assert m.group(4) is None, m.group(0)
    print("speed-up by the %s step: %s (steady: %s)" % (how, ", ".join("%.2fx" % x for x in want),
                                                       ", ".join("%.2fx" % x for x in steady)))
assert "fp8 over" not in t                                  # no FP8 pair ran
PY
    ;;
  speedup_lines)  # tests/bench/speedup.awk on runs whose figures are set by hand: the
    # ratios, the medians over all rounds and over the steady ones, the marks, a failed run
    # left out, a pair with no steady round, a run that never paired. Fields: DTYPE COPIES
    # TOKENS E K MEAN_MS READ ROUND MEDIAN_MS READ_BEFORE READ_AFTER EXPERT_GBPS
    cat > runs.txt <<'EOR'
mxfp4 replicas 8 32 4 5.000 63 1 4.900 62 63 40
mxfp4-bf16 replicas 8 32 4 15.000 63 1 15.190 61 63 50
mxfp4 replicas 8 32 4 6.000 60 2 5.800 35 60 40
mxfp4-bf16 replicas 8 32 4 15.000 60 2 15.000 60 59 50
mxfp4 replicas 8 32 4 5.000 60 3 5.000 60 60 70
mxfp4-bf16 replicas 8 32 4 16.000 60 3 16.000 60 60 50
mxfp4 balance 8 32 4 4.000 60 1 4.000 60 60 40
mxfp4-bf16 balance 8 32 4 12.000 60 1 12.000 30 60 50
mxfp4 balance 8 32 4 4.000 60 2 4.000 60 60 40
bf16 replicas 8 32 4 20.000 60 1 20.000 60 60 50
EOR
    awk -v rounds=3 -f "$here/tests/bench/speedup.awk" runs.txt > lines.txt || fail "speedup.awk failed"
    cat lines.txt
    cat > want.txt <<'EOW'
speed-up: the widened run's step over the held one's, run back to back, by the mean step and by the median step
  mxfp4 over mxfp4-bf16, 8 tokens, 32:4, replicas, mean step: median 3.00x of 3 of 3 rounds (2.50-3.20x), 3.00x of the 1 with steady reads: round 1 3.00x (15.000 / 5.000 ms, read 61-63 / 62-63 GB/s), round 2 2.50x (15.000 / 6.000 ms, read 60-59 / 35-60 GB/s, reads unsteady), round 3 3.20x (16.000 / 5.000 ms, read 60-60 / 60-60 GB/s, read faster than the reads)
  mxfp4 over mxfp4-bf16, 8 tokens, 32:4, replicas, median step: median 3.10x of 3 of 3 rounds (2.59-3.20x), 3.10x of the 1 with steady reads: round 1 3.10x (15.190 / 4.900 ms, read 61-63 / 62-63 GB/s), round 2 2.59x (15.000 / 5.800 ms, read 60-59 / 35-60 GB/s, reads unsteady), round 3 3.20x (16.000 / 5.000 ms, read 60-60 / 60-60 GB/s, read faster than the reads)
  mxfp4 over mxfp4-bf16, 8 tokens, 32:4, balance, mean step: median 3.00x of 1 of 3 rounds (3.00-3.00x), none with steady reads: round 1 3.00x (12.000 / 4.000 ms, read 30-60 / 60-60 GB/s, reads unsteady)
  mxfp4 over mxfp4-bf16, 8 tokens, 32:4, balance, median step: median 3.00x of 1 of 3 rounds (3.00-3.00x), none with steady reads: round 1 3.00x (12.000 / 4.000 ms, read 30-60 / 60-60 GB/s, reads unsteady)
EOW
    diff want.txt lines.txt || fail "speed-up lines differ from the hand-made ones"
    ;;
  decode)  # 2 layers of 8 experts top-2, tokens 1 and 8: the table, the bytes touched, the
           # roofline floor (the bytes at the read bandwidth or the FLOPs at the GEMM limit), --bench
    [[ -x $build/tests/bench/bench_stream ]] || fail "bench_stream not built"
    # bench_stream alone: one line of GB/s, both passes' figures positive
    "$build/tests/bench/bench_stream" --threads 1 --mib 64 --passes 2 > stream.log 2>&1 \
      || { cat stream.log; fail "bench_stream failed"; }
    grep -qE '^stream: read GB/s best [0-9.]+ median [0-9.]+ \(2 passes\)$' stream.log \
      || { cat stream.log; fail "bench_stream: no read GB/s line"; }
    HIDDEN=256 FFN=128 LAYERS=2 STEPS=6 WARMUP=2 TOKENS="1 8" BENCH=1 \
      timeout -k 5 250 bash "$here/tests/bench/bench_decode.sh" "$build" bf16 "8:2" > out.log 2> err.log \
      || { cat out.log err.log; fail "bench_decode.sh failed"; }
    cat out.log
    cat > parts.py <<'PY'
import re
def check_parts(t, rows, expert_ranks):
    # each run's parts line: three shares whose product it prints, and that product is the
    # row's step /read (no shared experts here: the touched bytes over the mean step against
    # the read), to the printed figures' rounding; the balance is 1 with one expert rank, and
    # no rank's calls take longer than the step
    parts = re.findall(r"^    parts: the calls read at ([0-9.]+) of the read x the expert ranks' balance "
                       r"([0-9.]+) x the step's own part ([0-9.]+) = ([0-9.]+), the touched bytes over "
                       r"the mean step against the read$", t, re.M)
    assert len(parts) == len(rows), (parts, rows)
    for r, p in zip(rows, parts):
        c, b, o, prod = map(float, p)
        # the row's step GB/s over its read GB/s: the step GB/s printed to 0.01 (off by 0.005
        # GB/s at most), the product to 0.001
        read = float(r[10])
        sratio = float(r[13]) / read
        assert c > 0 and 0 < b <= 1 and 0 < o <= 1.0005, p
        assert abs(prod - c * b * o) <= 0.002, p
        assert abs(prod - sratio) <= 0.0006 + 0.0051 / read + 0.002 * sratio, (p, sratio)
        if expert_ranks == 1:
            assert b == 1, p
PY
    wbytes=4; cpu_holds_bf16 && wbytes=2  # the weights as held: BF16, or widened to F32
    python3 - out.log "$wbytes" <<'PY' || fail "decode figures"
import re, sys
sys.path.insert(0, ".")
from parts import check_parts
t = open(sys.argv[1]).read()
assert re.search(r"^cpu: .+, family \d+, model \d+, \d+ CPUs", t, re.M), "cpu line"
assert re.search(r"^cpu flags: ", t, re.M), "cpu flags line"
assert re.search(r"^kernel memory monitor \(DAMON\): (none|kdamond \d+ \w+)", t, re.M), "DAMON line"
assert re.search(r"^read bandwidth: stream: read GB/s best [0-9.]+", t, re.M), "stream line"
rows = [l.split() for l in t.splitlines() if l.startswith("bf16 ")]
assert len(rows) == 2, rows
# MB: gate, up, down in BF16, or widened to F32 where the CPU cannot hold BF16 (argv[2])
wbytes = int(sys.argv[2])
per_expert = 3 * 256 * 128 * wbytes / 1e6
floors = re.findall(r"^    floor: (bytes|flops) \(GEMM limit ([0-9.]+) GFLOP/s an expert rank; step mean ([0-9.]+) ms\)$",
                    t, re.M)
assert len(floors) == 2, floors
steal = re.findall(r"^    steal: ([0-9.]+)% of the CPUs' time during the run", t, re.M)
assert len(steal) == 2 and all(0 <= float(x) <= 100 for x in steal), steal
for r, (bound, limit, step_ms) in zip(rows, floors):
    tokens, E, k = int(r[1]), int(r[2]), int(r[3])
    sp50, sp99, lp50, lp99, mb, shmb, read, egb, eratio, sgb, sratio, floor, fratio = \
        map(float, r[4:17])
    assert shmb == 0, r                      # random mixtral weights: no shared experts
    # the roofline's floor: the longer of the bytes at the read bandwidth and the FLOPs
    # (2 layers, 6 H F a (token, expert) pair) on the 2 expert ranks' cores at the limit
    by_bytes = mb / read
    by_flops = tokens * 2 * 6 * 256 * 128 * k / (2 * float(limit) * 1e9) * 1e3
    assert float(limit) > 0, limit
    want = max(by_bytes, by_flops)
    assert abs(floor - want) <= 0.006 + 0.01 * want, (floor, by_bytes, by_flops)
    assert bound == ("bytes" if by_bytes > by_flops else "flops"), (bound, by_bytes, by_flops)
    assert abs(fratio - floor / float(step_ms)) < 0.006, (fratio, floor, step_ms)
    assert 0 < sp50 <= sp99 and 0 < lp50 <= lp99, r
    # distinct (layer, expert) pairs a step touches: k per layer for one token (a token
    # picks k distinct experts), at most min(E, tokens * k) per layer
    if tokens == 1:
        assert abs(mb - 2 * k * per_expert) < 0.06, (mb, 2 * k * per_expert)
    assert 2 * k * per_expert - 0.06 <= mb <= 2 * min(E, tokens * k) * per_expert + 0.06, mb
    assert egb > 0 and sgb > 0 and egb >= sgb, r     # compute time is part of the step
    assert read > 0 and abs(eratio - egb / read) < 0.006 and abs(sratio - sgb / read) < 0.006, r
check_parts(t, rows, 2)
lines = re.findall(r"bench: layer exchange, moed +([0-9.]+) us, best [0-9.]+ us", t)
mpi = re.findall(r"bench: same messages, plain MPI +([0-9.]+) us, best [0-9.]+ us", t)
ratio = re.findall(r"bench: layer exchange / plain MPI +([0-9.]+)x, best [0-9.]+x", t)
pp = re.findall(r"bench: MPI ping-pong round trip +([0-9.]+) us, best [0-9.]+ us +\(([0-9.]+) kB", t)
wake = re.findall(r"bench: wake-up after 2 ms napping +(-?[0-9.]+) us posted, (-?[0-9.]+) us not posted", t)
assert len(lines) == len(mpi) == len(ratio) == len(pp) == len(wake) == 2, (lines, mpi, ratio, pp, wake)
# master routing: counts go from the routing rank to each expert rank only (the expert ranks
# route nothing and send each other none), rows to each expert rank that gets any
cm = re.findall(r"replayed; (\d+) counts messages, (\d+) row messages each way and (\d+) empty", t)
assert len(cm) == 2 and all(c == "2" for c, _, _ in cm), cm
# the receives go before the counts: each expert rank gets one dispatch message, with rows
# or empty (1 token top-2: both experts may sit on one expert rank)
assert all(int(r) + int(e) == 2 and int(r) >= 1 for _, r, e in cm), cm
# decode sizes: the rows' receives go before the counts (each expert rank's place: one row
# a token, 8 rows of 512 bytes at most); the waits yield only where 3 ranks share the cores
import os
shared = 3 > os.cpu_count()
how = re.findall(r"largest [0-9.]+ kB; rows received (while awaiting|after) the counts, waits "
                 r"(yielding the core \(cores shared\)|spinning \(a core each\))\)", t)
assert how == [("while awaiting", "yielding the core (cores shared)" if shared else
                "spinning (a core each)")] * 2, how
# the ratio is of the unrounded times; a and b are printed to 0.1 us (each off by 0.05 at
# most), q to 0.01: a CI run printed 18.0 / 10.1 and 1.77 (18.0 / 10.1 = 1.782)
for a, b, q in zip(lines, mpi, ratio):
    a, b, q = float(a), float(b), float(q)
    slack = (a + 0.05) / max(b - 0.05, 1e-9) - a / b + 0.006
    assert a > 0 and b > 0 and abs(q - a / b) <= slack, (a, b, q, slack)
# the largest message: at most every (token, choice) row of the step, 256 BF16 = 512 bytes
for (us, kb), tokens in zip(pp, (1, 8)):
    assert float(us) > 0 and 0 < float(kb) <= tokens * 2 * 0.512 + 0.05, (us, kb)
print("decode bench: %d rows, exchange %s us vs plain MPI %s us" % (len(rows), lines, mpi))
PY
    # one expert rank (a master and one): its balance is 1 by construction
    NP=2 HIDDEN=256 FFN=128 LAYERS=2 STEPS=6 WARMUP=2 TOKENS="8" BENCH=0 \
      timeout -k 5 250 bash "$here/tests/bench/bench_decode.sh" "$build" bf16 "8:2" > one.log 2> err.log \
      || { cat one.log err.log; fail "bench_decode.sh NP=2 failed"; }
    cat one.log
    python3 - one.log <<'PY' || fail "decode figures, one expert rank"
import sys
sys.path.insert(0, ".")
from parts import check_parts
t = open(sys.argv[1]).read()
assert "1 expert ranks of 1 thread(s)" in t, "not one expert rank"
rows = [l.split() for l in t.splitlines() if l.startswith("bf16 ")]
assert len(rows) == 1, rows
check_parts(t, rows, 1)
PY
    ;;
  plan)  # --bench's plan collectives line: there exactly where a layer's plan runs a
          # collective besides the exchange (capacity scan; balanced copies' demand sum with
          # two routing ranks), naming each, none otherwise; its ratio to the exchange's
    # plan_run NP ROUTING COPIES CF: moed --bench's output in bench_<ROUTING>_<COPIES>_<CF>.log
    plan_run() {
      local log="bench_$2_$3_$4.log"
      H=256 F=128 E=8 K=2 TOKENS=8 STEPS=4 ROUTING=$2 CF=$4 small_model \
        | sed "s/^placement:/placement:\n  copies: $3/" > "c_$2_$3_$4.yaml"
      mpirun_moed "$1" --config "c_$2_$3_$4.yaml" --bench --no-progress > "$log" 2>&1 \
        || { cat "$log"; fail "moed --bench ($2, $3, capacity factor $4) failed"; }
    }
    plan_run 2 symmetric balance 0      # the demand sum alone
    plan_run 2 symmetric balance 1.5    # both
    plan_run 3 master replicas 1.5      # the capacity scan alone (one routing rank)
    plan_run 3 master balance 0         # one routing rank: its own plan, no sum
    plan_run 2 symmetric replicas 0     # none
    python3 - <<'PY' || fail "plan collectives line"
import re
def plan(name):
    t = open(name).read()
    assert re.search(r"^bench: layer exchange, moed +[0-9.]+ us", t, re.M), (name, t[-2000:])
    ex = float(re.search(r"^bench: layer exchange, moed +([0-9.]+) us", t, re.M).group(1))
    m = re.findall(r"^bench: plan collectives, moed +([0-9.]+) us, best ([0-9.]+) us  \(the last "
                   r"layer's (.*), replayed: (\d+) integers each, every rank; not in the exchange "
                   r"above: ([0-9.]+)x of it\)$", t, re.M)
    if not m:
        assert "plan collectives" not in t, (name, t)
        return None
    assert len(m) == 1, m
    us, best, what, ints, ratio = m[0]
    us, best, ratio = float(us), float(best), float(ratio)
    assert 0 < best <= us and ints == "8", m
    # printed to 0.1 us and 0.01x: the ratio of the unrounded times
    slack = (us + 0.05) / max(ex - 0.05, 1e-9) - us / ex + 0.006
    assert abs(ratio - us / ex) <= slack, (ratio, us, ex)
    return what
scan, total = "capacity scan (MPI_Iexscan)", "experts' demand sum of balanced copies (MPI_Iallreduce)"
got = {k: plan("bench_%s.log" % k) for k in
       ["symmetric_balance_0", "symmetric_balance_1.5", "master_replicas_1.5",
        "master_balance_0", "symmetric_replicas_0"]}
want = {"symmetric_balance_0": total, "symmetric_balance_1.5": scan + " and " + total,
        "master_replicas_1.5": scan, "master_balance_0": None, "symmetric_replicas_0": None}
assert got == want, (got, want)
print("plan collectives:", got)
PY
    ;;
  layers)  # placement.layers giving layer 0 no expert on rank 2 (layer 1 four): rank 2 has
            # experts. Counted by hand: rank 0 none (master), rank 1 8 in layer 0 and 4 in
            # layer 1, rank 2 4 in layer 1; so 2 expert ranks in the means and the CPU table,
            # rank 0 its only rank without experts (layer 0's count alone once put rank 2
            # there, and its GEMM limit at 0 in the mean).
    H=256 F=128 E=8 K=2 TOKENS=64 STEPS=4 PLACEMENT='{1: [0, 1, 2, 3, 4, 5, 6, 7]}' small_model \
      | sed 's/^  experts: .*/&\n  layers: {1: {1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}}/' > c.yaml
    mpirun_moed 3 --config c.yaml --bench --no-progress > bench.log 2>&1 \
      || { cat bench.log; fail "moed --bench failed"; }
    grep -E '^bench: (expert FFN|best GEMM|expert compute|CPU)' bench.log
    grep -qE '^bench: expert FFN GFLOP/s \(run\) +[0-9.]+ per expert rank \(mean of 2\)$' bench.log \
      || { cat bench.log; fail "not 2 expert ranks in the run's mean"; }
    grep -qE '^bench: CPU per rank, cores busy +rank 0 [0-9.]+ \(no experts\), rank 1 [0-9.]+, rank 2 [0-9.]+$' bench.log \
      || { cat bench.log; fail "the CPU table does not give ranks 1 and 2 experts and rank 0 none"; }
    ;;
  *) fail "unknown case $1" ;;
esac
echo "PASS bench $1"
