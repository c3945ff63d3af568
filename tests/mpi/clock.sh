#!/usr/bin/env bash
# clock.sh: ranks on one kernel (one machine: the same boot_id) read one CLOCK_MONOTONIC, so
# the profiler's clock offsets to rank 0 are 0 exactly, with no uncertainty and no drift
# (a ping-pong estimate, whose polled legs are not equal in time, was 0.1-0.7 ms off here
# and made one expert rank seem to wait 35-75% of its step for another); summary.txt says 0.
source "$(dirname "$0")/common.sh"
PROF=true small_model | sed 's/^  enabled: true/  enabled: true\n  warmup_steps: 1\n  measurement_steps: 2/' > c.yaml
mpirun_moed 3 --config c.yaml --no-progress > run.log 2>&1 || { cat run.log; fail "run failed"; }
d=$(ls -d "$WORK"/experiments/*/ | sort | tail -1)
python3 - "$d" <<'PY' || fail "clock figures are not 0 on one machine"
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
run = s["run"]
for k in ("clock_skew_max_ns", "clock_uncertainty_max_ns", "clock_drift_max_ns"):
    assert run[k] == 0, (k, run[k])
for r in s["ranks"]:
    c = r["clock"]
    assert c["offset_ns"] == 0 and c["uncertainty_ns"] == 0, (r["rank"], c)
    assert c["offset_end_ns"] in (0, None), (r["rank"], c)
print("offsets, uncertainty and drift 0 on", len(s["ranks"]), "ranks")
PY
grep -q "skew max 0.0 us, uncertainty max +/- 0.0 us, drift max 0.0 us" "$d/summary.txt" \
  || { grep clocks "$d/summary.txt"; fail "summary.txt's clocks line is not 0"; }
echo "PASS clock same_kernel"
