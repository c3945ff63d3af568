#!/usr/bin/env bash
# placement.sh CASE: /metrics names the (layer, expert, rank) that ran, whatever the
# placement: a run without end on 3 ranks (master rank 0 routes 64 tokens a step) with
# routing_skew 16, so that every token picks expert 0 first and expert 1 second (the
# truth by hand: expert 0 gets 64 rows a step in every layer, experts 2-7 none).
#   layers     placement.experts {1: [0-3], 2: [4-7]}, layer 1 swapped by placement.layers:
#              expert 0 runs on rank 1 in layer 0 and on rank 2 in layer 1
#   replicas   expert 0 on ranks 1 and 2: each copy takes 32 rows a step (contiguous shares
#              by token index), and both ranks' histograms count every step
#   symmetric  every rank routes 21 of 63 tokens (symmetric routing), expert 0 has copies
#              on ranks 1 and 2 that split tokens by global index (0-31 and 32-62): rank
#              0's 21 rows go to rank 1, rank 1's to rank 1 (11) and 2 (10), rank 2's to
#              rank 2; /metrics sums the routing ranks' counts, each at its own step
#   rebalance  auto placement (0-3 on rank 1) with rebalance_every 4 and 2 redundant
#              experts: the rebalance copies experts 0 and 1 to rank 2, whose series then
#              count them (and never the cold experts it held before)
# Every count is checked against the same rank's reported last step (one snapshot each).
set -euo pipefail
source "$(dirname "$0")/../mpi/common.sh"
source "$(dirname "$0")/common.sh"
case_name=${1:?case}
PYTHON=${MOED_PYTHON:-$( [[ -x /usr/bin/python3 ]] && echo /usr/bin/python3 || command -v python3)}
"$PYTHON" -c 'import prometheus_client' 2>/dev/null || \
  { echo "SKIP: python3-prometheus-client not installed"; exit 77; }

case "$case_name" in
  layers)
    STEPS=0 TOKENS=64 SKEW=16 PLACEMENT='{1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}' small_model |
      sed 's/^  experts: \(.*\)/  experts: \1\n  layers: {1: {1: [4, 5, 6, 7], 2: [0, 1, 2, 3]}}/' > c.yaml ;;
  replicas)
    STEPS=0 TOKENS=64 SKEW=16 PLACEMENT='{1: [0, 1, 2, 3], 2: [0, 4, 5, 6, 7]}' small_model > c.yaml ;;
  symmetric)
    STEPS=0 TOKENS=63 SKEW=16 ROUTING=symmetric \
      PLACEMENT='{0: [1, 2, 3], 1: [0, 4, 5], 2: [0, 6, 7]}' small_model > c.yaml ;;
  rebalance)
    STEPS=0 TOKENS=64 SKEW=16 small_model |
      sed 's/^runtime:/runtime:\n  rebalance_every: 4\n  redundant_experts: 2/' > c.yaml ;;
  *) fail "unknown case $case_name" ;;
esac
cat >> c.yaml <<EOC
  listen: "127.0.0.1:0"
  expert_histograms: expert
EOC
live_start 120
export CASE=$case_name
timeout 90 "$PYTHON" - <<'PY' || { cat run.log; fail "labels check"; }
import os, time, urllib.request
from collections import defaultdict
from prometheus_client.parser import text_string_to_metric_families
url, case = os.environ["URL"], os.environ["CASE"]
def scrape():
    with urllib.request.urlopen(url + "metrics", timeout=5) as r:
        tok, cnt, last = {}, {}, {}
        for f in text_string_to_metric_families(r.read().decode()):
            for s in f.samples:
                lab = s.labels
                if s.name == "moed_expert_tokens_total":
                    k = (int(lab["layer"]), int(lab["expert"]), int(lab["rank"]))
                    assert k not in tok, ("duplicate series", k)
                    tok[k] = int(s.value)
                elif s.name == "moed_expert_seconds_count":
                    k = (int(lab["layer"]), int(lab["expert"]), int(lab["rank"]))
                    assert k not in cnt, ("duplicate series", k)
                    cnt[k] = int(s.value)
                elif s.name == "moed_rank_last_step":
                    last[int(lab["rank"])] = int(s.value)
        return tok, cnt, last
# wait for enough steps on every rank (and, rebalancing, two rebalances behind us)
deadline = time.time() + 60
while True:
    tok, cnt, last = scrape()
    if len(last) == 3 and min(last.values()) >= 12:
        break
    assert time.time() < deadline, ("too few steps", last)
    time.sleep(0.3)
steps = {r: last[r] + 1 for r in last}
print("steps per rank at their snapshots:", steps)
print("tokens:", {k: v for k, v in sorted(tok.items()) if v})
print("calls:", {k: v for k, v in sorted(cnt.items()) if v})
for l in (0, 1):
    # expert 0 takes every token, from the routing ranks' counts, whichever rank ran it
    got = sum(v for (L, e, r), v in tok.items() if L == l and e == 0)
    want = 21 * sum(steps.values()) if case == "symmetric" else 64 * steps[0]
    assert got == want, (l, got, want, steps)
    for (L, e, r), v in list(tok.items()) + list(cnt.items()):
        if L == l and e >= 2:
            assert v == 0, ("a cold expert has counts", (L, e, r), v)
    if case != "symmetric":
        assert all(r in (1, 2) for (_, _, r) in list(tok) + list(cnt)), "master hosts nothing"
if case == "symmetric":
    for l in (0, 1):
        assert tok[(l, 0, 1)] == 21 * steps[0] + 11 * steps[1], (l, tok, steps)
        assert tok[(l, 0, 2)] == 10 * steps[1] + 21 * steps[2], (l, tok, steps)
        assert tok[(l, 1, 0)] == 21 * sum(steps.values()), (l, tok, steps)
        # each copy gets rows every step: its calls are its own rank's steps
        assert (cnt[(l, 0, 1)], cnt[(l, 0, 2)], cnt[(l, 1, 0)]) == (steps[1], steps[2], steps[0]), \
            (l, cnt, steps)
elif case == "layers":
    for l, host, other in ((0, 1, 2), (1, 2, 1)):
        assert tok[(l, 0, host)] == 64 * steps[0], (l, tok)
        assert cnt[(l, 0, host)] == steps[host], (l, cnt, steps)
        assert (l, 0, other) not in tok and (l, 0, other) not in cnt, (l, other)
        assert cnt[(l, 1, host)] == steps[host], (l, cnt)
elif case == "replicas":
    for l in (0, 1):
        assert tok[(l, 0, 1)] == tok[(l, 0, 2)] == 32 * steps[0], (l, tok)
        assert cnt[(l, 0, 1)] == steps[1] and cnt[(l, 0, 2)] == steps[2], (l, cnt, steps)
        assert (l, 1, 2) not in cnt and (l, 4, 1) not in cnt, "series of experts not hosted"
else:
    # before the first rebalance (after step 4) rank 2 held only cold experts; after it,
    # copies of 0 and 1: its series of them count every step since, and rank 1 went on
    for l in (0, 1):
        for e in (0, 1):
            assert tok.get((l, e, 2), 0) > 0 and cnt.get((l, e, 2), 0) > 0, (l, e, tok, cnt)
            assert 0 < cnt[(l, e, 2)] < steps[2], (l, e, cnt, steps)
            assert cnt[(l, e, 1)] + cnt[(l, e, 2)] >= steps[1], (l, e, cnt, steps)
# a second scrape: counters never go down, per series
time.sleep(0.6)
tok2, cnt2, _ = scrape()
for a, b in ((tok, tok2), (cnt, cnt2)):
    for k, v in a.items():
        assert k in b and b[k] >= v, ("a counter went down or vanished", k, v, b.get(k))
print("labels ok:", case)
PY
stop_run
if [[ "$case_name" == rebalance ]]; then
  grep -q "rebalance before step 4: [1-9][0-9]* experts moved" run.log || \
    { cat run.log; fail "the first rebalance moved nothing"; }
fi
echo "PASS live.placement_$case_name"
