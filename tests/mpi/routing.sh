#!/usr/bin/env bash
# routing.sh CASE: routing traces (docs/routing.md): profiler.record_routing writes
# routing.safetensors, workload.routing replays it in place of the gate.
#   record_master, record_symmetric, capacity, replicas, layers, rebalance:
#             record a skewed run (every step), check the file (metadata, shapes, the
#             report's demand per expert = the trace's counts), replay it with the same input
#             on 3 ranks and on 1 rank: the outputs are bit-identical to the recording run's
#             (record_master: its replay recorded again holds the same tensors, and its
#             source names the trace replayed)
#   symmetric_same  the recording under symmetric routing holds the same choices as under
#             master routing (every routing rank's tokens, in global order)
#   reference_FAMILY  a routing chosen at random (not the router) and the NumPy reference's
#             output for it (tests/models/make_reference.py --given-routing): moed replaying
#             it on a checkpoint of that family reproduces the reference on 3 ranks and 1
#   cycle     a replay longer than the trace starts over and says so once
#   bad       broken traces refused at start (exit 4, no report folder), each with one message
#             naming the file and the tensor; --check-config refuses a bad header too
#   bounds    a recording without end, or over profiler.routing_max_mb (also where --steps makes it so), and routing_skew
#             with a trace: exit 3 before anything runs
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/common.sh"
source "$HERE/../models/common.sh"

case_name=$1
STEPS=${STEPS:-6}

# record EXTRA_SED: c.yaml with every step recorded and its routing written; rec.safetensors
# the output; $TRACE the folder holding routing.safetensors.
record() {
  PROF=true small_model | sed "s/^profiler:/profiler:\n  warmup_steps: 0\n  measurement_steps: $STEPS\n  record_routing: true/" \
    | sed "$1" > c.yaml
  mpirun_moed 3 --config c.yaml --dump-output rec.safetensors --no-progress > rec.log 2>&1 \
    || { cat rec.log; fail "recording run failed"; }
  TRACE=$(ls -d "$WORK"/experiments/*/ | head -1)
  [[ -f "$TRACE/routing.safetensors" ]] || { cat rec.log; fail "no routing.safetensors in $TRACE"; }
  grep -q "^routing: $STEPS recorded steps x ${TOKENS:-96} tokens" rec.log \
    || { cat rec.log; fail "no 'routing: ...' line for the file"; }
}

# replay_same NP...: c.yaml with workload.routing (no skew, profiler off) gives the
# recording run's output bit for bit on the same ranks: on 3 ranks rec.safetensors; on 1 rank
# a 1-rank recording's output replayed on 1 rank; and the 3-rank trace replayed on 1 rank
# gives rec's output within 1e-5 (the gate's GEMM rounds alike only for the same row split,
# and the sums' order may differ between rank counts: the equivalence tests' tolerance).
replay_yaml() { # replay_yaml IN TRACE OUT
  sed "s|^workload:|workload:\n  routing: $2|; s/^  routing_skew: .*/  routing_skew: 0/; s/^  record_routing: true/  record_routing: false/" \
    "$1" > "$3"
}
replay_same() {
  replay_yaml c.yaml "$TRACE" r.yaml
  for np in "$@"; do
    if [[ $np == 1 ]]; then
      sed "s|output_dir: .*|output_dir: $WORK/one_out|" c.yaml > one.yaml
      timeout -k 5 120 "$MOED" --config one.yaml --dump-output rec1.safetensors --no-progress > rec1.log 2>&1 \
        || { cat rec1.log; fail "the 1-rank recording failed"; }
      replay_yaml one.yaml "$(ls -d "$WORK"/one_out/*/)" r1.yaml
      timeout -k 5 120 "$MOED" --config r1.yaml --dump-output r1.safetensors --no-progress > r1.log 2>&1 \
        || { cat r1.log; fail "replay on 1 rank failed"; }
      cmp -s rec1.safetensors r1.safetensors || {
        "$ST_DIFF" rec1.safetensors r1.safetensors --tol 0 || true
        fail "replay on 1 rank is not bit-identical to its 1-rank recording run"; }
      timeout -k 5 120 "$MOED" --config r.yaml --dump-output r13.safetensors --no-progress > r13.log 2>&1 \
        || { cat r13.log; fail "the 3-rank trace replayed on 1 rank failed"; }
      "$ST_DIFF" rec.safetensors r13.safetensors --tol 1e-5 \
        || fail "the 3-rank trace replayed on 1 rank differs from the 3-rank run"
    else
      mpirun_moed "$np" --config r.yaml --dump-output "r$np.safetensors" --no-progress > "r$np.log" 2>&1 \
        || { cat "r$np.log"; fail "replay on $np ranks failed"; }
      cmp -s rec.safetensors "r$np.safetensors" || {
        "$ST_DIFF" rec.safetensors "r$np.safetensors" --tol 0 || true
        fail "replay on $np ranks is not bit-identical to the recording run"; }
    fi
    echo "replay on $np rank(s): bit-identical to its recording run"
  done
}

# check_trace: metadata and shapes, and the report's demand per expert (summary.json
# experts[].tokens: the router's choices over the recorded steps) = the trace's counts.
check_trace() {
  "$PY" - "$TRACE" "$STEPS" "${TOKENS:-96}" "${LAYERS:-2}" "${E:-8}" "${K:-2}" <<'EOF' || fail "trace check"
import json, struct, sys
import numpy as np
d, steps, T, L, E, k = sys.argv[1], *map(int, sys.argv[2:])
raw = open(d + "/routing.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); data = raw[8 + n:]
m = h.pop("__metadata__")
want = {"format": "moed-routing/1", "num_experts": str(E), "top_k": str(k),
        "tokens_per_step": str(T), "family": "mixtral"}
for key, v in want.items():
    assert m[key] == v, (key, m[key], v)
assert json.loads(m["layers"]) == list(range(L)), m["layers"]
assert m["source"].startswith("moed run "), m["source"]
def tensor(name):
    t = h[name]; a, b = t["data_offsets"]
    return np.frombuffer(data[a:b], dtype="<i4" if t["dtype"] == "I32" else "<f4").reshape(t["shape"])
rep = json.load(open(d + "/summary.json"))
for l in range(L):
    ids = tensor("layers.%d.topk_ids" % l); w = tensor("layers.%d.topk_weights" % l)
    assert h["layers.%d.topk_ids" % l]["dtype"] == "I32" and ids.shape == (steps * T, k), ids.shape
    assert h["layers.%d.topk_weights" % l]["dtype"] == "F32" and w.shape == (steps * T, k)
    assert all(len(set(r)) == k for r in ids.tolist()), "a repeated id"
    assert (w >= 0).all() and np.isfinite(w).all()
    counts = np.bincount(ids.ravel(), minlength=E)
    report = np.zeros(E, dtype=np.int64)
    for e in rep["experts"]:
        if e["layer"] == l:
            report[e["expert"]] += e["tokens"]
    assert (report == counts).all(), ("layer", l, report.tolist(), counts.tolist())
print("trace ok: %d layers x %d rows, demand per expert = the report's" % (L, steps * T))
EOF
}

case "$case_name" in
  record_master)
    SKEW=1.5 record ''
    check_trace
    "$PY" - "$TRACE/summary.json" router "" <<'EOF' || fail "the recording's report names another routing"
import json, sys
r = json.load(open(sys.argv[1]))["routing"]
assert r["source"] == sys.argv[2] and (r["file"] or "") == sys.argv[3], r
EOF
    replay_same 3 1
    # the replay's report (3 ranks, profiler on) says what was replayed
    last=$(ls -td "$WORK"/experiments/*/ | head -1)
    [[ "$last" != "$TRACE" ]] || fail "the replay wrote no report"
    "$PY" - "$last/summary.json" replayed "${TRACE}routing.safetensors" <<'EOF' || fail "the replay's report does not name the trace"
import json, sys
r = json.load(open(sys.argv[1]))["routing"]
assert r["source"] == sys.argv[2] and r["file"] == sys.argv[3], (r, sys.argv[3])
assert r["trace_source"].startswith("moed run "), r
EOF
    grep -q "routing source.*replayed" "$last/summary.txt" || fail "summary.txt does not say replayed"
    # a replay recorded again: the same choices, and its source says whose they are
    replay_yaml c.yaml "$TRACE" rr.yaml
    sed -i "s/^  record_routing: false/  record_routing: true/" rr.yaml
    mpirun_moed 3 --config rr.yaml --no-progress > rr.log 2>&1 || { cat rr.log; fail "re-recording failed"; }
    again=$(ls -td "$WORK"/experiments/*/ | head -1)
    "$PY" - "${TRACE}routing.safetensors" "${again}routing.safetensors" "$again" <<'EOF' || fail "the re-recorded trace"
import json, struct, sys
def load(p):
    raw = open(p, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n]); m = h.pop("__metadata__")
    return m, {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
(ma, a), (mb, b) = load(sys.argv[1]), load(sys.argv[2])
assert a == b, "the re-recorded choices differ from the trace's"
want = "moed run %s (replaying %s (%s))" % (sys.argv[3].rstrip("/"), sys.argv[1], ma["source"])
assert mb["source"] == want, (mb["source"], want)
print("re-recorded:", mb["source"])
EOF
    # a replayed trace's source that would not fit a reader's 1,087 bytes is left out, whole
    "$PY" - "${TRACE}routing.safetensors" long.safetensors <<'EOF'
import json, struct, sys
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); h["__metadata__"]["source"] = "vLLM " + "x" * 1060
hj = json.dumps(h).encode(); hj += b" " * (-len(hj) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hj)) + hj + raw[8 + n:])
EOF
    sed -i "s|^  routing: $TRACE\$|  routing: $WORK/long.safetensors|" rr.yaml
    mpirun_moed 3 --config rr.yaml --no-progress > rr2.log 2>&1 || { cat rr2.log; fail "re-recording 2 failed"; }
    again=$(ls -td "$WORK"/experiments/*/ | head -1)
    "$PY" - "${again}routing.safetensors" "moed run ${again%/} (replaying $WORK/long.safetensors)" <<'EOF' || fail "the re-recorded trace of a long source"
import json, struct, sys
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
src = json.loads(raw[8:8 + n])["__metadata__"]["source"]
assert src == sys.argv[2], (src, sys.argv[2])
EOF
    # under a long output folder the source is longer than 511 bytes (a reader kept 511
    # once): recorded whole, and a replay's report reads it back whole. It names $WORK three
    # times (the run folder, the trace replayed, that trace's source): the folder is padded
    # so that the source is about 800 bytes, under the 1,087 a reader keeps
    pad=$(( 630 - 3 * ${#WORK} )) long_out=$WORK
    while (( pad > 0 )); do
      long_out+=/$(printf 'd%.0s' $(seq $(( pad > 200 ? 200 : pad ))))
      pad=$(( pad - 201 ))
    done
    mkdir -p "$long_out"
    sed "s|output_dir: .*|output_dir: $long_out|; s|^  routing: $WORK/long.safetensors\$|  routing: $TRACE|" \
      rr.yaml > rl.yaml
    mpirun_moed 3 --config rl.yaml --no-progress > rl.log 2>&1 || { cat rl.log; fail "recording under a long output folder failed"; }
    deep=$(ls -d "$long_out"/*/ | head -1)
    sed "s|^  routing: $TRACE\$|  routing: $deep|; s/^  record_routing: true/  record_routing: false/" rl.yaml \
      | sed "s|output_dir: .*|output_dir: $WORK/experiments|" > rp.yaml
    mpirun_moed 3 --config rp.yaml --no-progress > rp.log 2>&1 || { cat rp.log; fail "replaying the long-sourced trace failed"; }
    last=$(ls -td "$WORK"/experiments/*/ | head -1)
    "$PY" - "${deep}routing.safetensors" "$last/summary.json" "$deep" "${TRACE}routing.safetensors" <<'EOF' || fail "a source past 511 bytes"
import json, struct, sys
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
src = json.loads(raw[8:8 + n])["__metadata__"]["source"]
want = "moed run %s (replaying %s (" % (sys.argv[3].rstrip("/"), sys.argv[4])
assert src.startswith(want) and 700 < len(src) < 1087, (len(src), src[:80])
got = json.load(open(sys.argv[2]))["routing"]["trace_source"]
assert got == src, (len(got), len(src))
print("a source of %d bytes, read back whole" % len(src))
EOF
    ;;
  record_symmetric)
    ROUTING=symmetric; TOKENS=100; SKEW=1.5; record ''
    check_trace
    replay_same 3 1 ;;
  master2)  # the master is rank 2: its recording travels to rank 0, the replay back to it
    MASTER=2; SKEW=1.5; PLACEMENT='{0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}'; record ''
    check_trace
    replay_same 3 ;;
  symmetric_same)
    SKEW=1.5; TOKENS=100; record ''
    mv "$TRACE" master_trace
    rm -rf "$WORK/experiments"
    ROUTING=symmetric; record ''
    "$PY" - master_trace/routing.safetensors "$TRACE/routing.safetensors" <<'EOF' || fail "symmetric trace differs from master's"
import json, struct, sys
import numpy as np
DT = {"I32": np.int32, "I64": np.int64, "F32": np.float32}
def load(p):
    raw = open(p, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n]); h.pop("__metadata__")
    return {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                             DT[v["dtype"]]).reshape(v["shape"]) for k, v in h.items()}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys(), (sorted(a), sorted(b))
most = 0.0
for k in a:
    assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
    if a[k].dtype == np.float32:
        # the gate's GEMM over another split of the rows (each routing rank its share) may
        # round its last bit otherwise (OpenBLAS's Haswell kernels do): weights within 1e-6
        diff = float(np.abs(a[k] - b[k]).max())
        assert diff <= 1e-6, (k, diff)
        most = max(most, diff)
    else:  # the choices themselves: exactly the same
        assert np.array_equal(a[k], b[k]), (k, int((a[k] != b[k]).sum()))
print("symmetric recording = master recording (%d tensors; weights within %.1e)" % (len(a), most))
EOF
    ;;
  capacity)
    CF=1.0; SKEW=1.5; CHUNKS=2; record ''
    grep -q '"dropped": [1-9]' "$TRACE/summary.json" || grep -q 'dropped [1-9]' "$TRACE/summary.txt" \
      || fail "capacity_factor 1.0 with skew 1.5 dropped nothing: the case tests nothing"
    replay_same 3 1 ;;
  replicas)
    CF=1.0 SKEW=1.5 CHUNKS=2 PLACEMENT='{1: [0, 1, 2, 3, 4], 2: [0, 4, 5, 6, 7]}' record ''
    replay_same 3 ;;
  layers)
    ROUTING=symmetric; TOKENS=100; SKEW=1.5; LAYERS=3
    record 's/^  experts: auto/  experts: auto\n  layers: {0: {0: [0], 1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}, 2: {0: [1, 2, 3, 4, 5, 6, 7], 2: [0]}}/'
    check_trace
    replay_same 3 1 ;;
  rebalance)
    STEPS=7; SKEW=1.5; record 's/^runtime:/runtime:\n  rebalance_every: 2\n  redundant_experts: 2/'
    check_trace
    replay_same 3 ;;
  reference_*)
    family=${case_name#reference_}
    make_ref ck "$family" f32 --shards 2 --tokens 48 --seed 5 --given-routing
    cat > c.yaml <<EOC
model:
  checkpoint: $WORK/ck
workload:
  input: $WORK/ck/input.safetensors
  routing: $WORK/ck
  steps: 1
runtime:
  compute_dtype: f32
profiler:
  enabled: false
EOC
    mpirun_moed 3 --config c.yaml --dump-output many.safetensors --no-progress > many.log 2>&1 \
      || { cat many.log; fail "3-rank replay failed"; }
    "$ST_DIFF" many.safetensors ck/expected.safetensors --tol 1e-4 || fail "3 ranks differ from the reference"
    timeout -k 5 120 "$MOED" --config c.yaml --dump-output one.safetensors --no-progress > one.log 2>&1 \
      || { cat one.log; fail "1-rank replay failed"; }
    "$ST_DIFF" one.safetensors ck/expected.safetensors --tol 1e-4 || fail "1 rank differs from the reference"
    # the router's own choice is another output: the replay is what made them agree
    sed -i "/^  routing: /d" c.yaml
    timeout -k 5 120 "$MOED" --config c.yaml --dump-output router.safetensors --no-progress > router.log 2>&1 \
      || { cat router.log; fail "run without the trace failed"; }
    if "$ST_DIFF" router.safetensors ck/expected.safetensors --tol 1e-2 > /dev/null; then
      fail "the router's own routing matches the given one: the case tests nothing"
    fi ;;
  imported)
    # vLLM's routed_experts (saved with np.savez, one array per request) and SGLang's
    # returned routed_experts (base64 int32 in meta_info), each converted by
    # profiler/tools/moed-routing-import and replayed: the report's demand = the ids' counts
    IMPORT="$HERE/../../profiler/tools/moed-routing-import"
    "$PY" - <<'EOF'
import base64, json
import numpy as np
rng = np.random.default_rng(3)
def request(n):  # [tokens, layers, top_k], as vLLM's CompletionOutput.routed_experts
    return np.stack([np.stack([rng.permutation(8)[:2] for _ in range(2)]) for _ in range(n)]).astype(np.int32)
np.savez("routed.npz", r0=request(200), r1=request(88))
resp = [{"text": "...", "meta_info": {"routed_experts": base64.b64encode(request(n).tobytes()).decode()}}
        for n in (150, 138)]
json.dump(resp, open("responses.json", "w"))
EOF
    "$PY" "$IMPORT" vllm routed.npz --num-experts 8 --tokens-per-step 96 -o vllm.safetensors > imp.log 2>&1 \
      || { cat imp.log; fail "vllm import failed"; }
    "$PY" "$IMPORT" sglang responses.json --num-experts 8 --top-k 2 --num-layers 2 --tokens-per-step 96 -o sglang.safetensors >> imp.log 2>&1 \
      || { cat imp.log; fail "sglang import failed"; }
    for src in vllm sglang; do
      rm -rf "$WORK/experiments"
      STEPS=3 PROF=true small_model | sed "s|^workload:|workload:\n  routing: $WORK/$src.safetensors|; s/^profiler:/profiler:\n  warmup_steps: 0\n  measurement_steps: 3/" > i.yaml
      mpirun_moed 3 --config i.yaml --no-progress > "i_$src.log" 2>&1 || { cat "i_$src.log"; fail "replay of the $src import failed"; }
      d=$(ls -d "$WORK"/experiments/*/)
      "$PY" - "$d/summary.json" "$WORK/$src.safetensors" "$src" <<'EOF' || fail "$src: report vs trace"
import json, struct, sys
import numpy as np
rep, path, src = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
raw = open(path, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); h.pop("__metadata__")
r = rep["routing"]
assert r["source"] == "replayed" and r["file"] == path, r
assert ("vLLM" if src == "vllm" else "SGLang") in r["trace_source"], r["trace_source"]
for l in (0, 1):
    t = h["layers.%d.topk_ids" % l]; a, b = t["data_offsets"]
    ids = np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<i4").reshape(t["shape"])[:3 * 96]
    counts = np.bincount(ids.ravel(), minlength=8)
    got = np.zeros(8, dtype=np.int64)
    for e in rep["experts"]:
        if e["layer"] == l:
            got[e["expert"]] += e["tokens"]
    assert (got == counts).all(), (src, l, got.tolist(), counts.tolist())
print(src, "import replayed: demand per expert = the trace's counts")
EOF
    done ;;
  cycle)
    STEPS=3 SKEW=1.5 record ''
    sed "s|^workload:|workload:\n  routing: $TRACE|; s/^  routing_skew: .*/  routing_skew: 0/; s/^  steps: 3/  steps: 8/; s/^  record_routing: true/  record_routing: false/" \
      c.yaml > r.yaml
    mpirun_moed 3 --config r.yaml --no-progress > r.log 2>&1 || { cat r.log; fail "replay failed"; }
    n=$(grep -c "holds 288 tokens a layer, 3 steps of 96; the replay starts over" r.log || true)
    [[ $n == 1 ]] || { cat r.log; fail "expected the start-over note once, saw it $n times"; }
    ! grep -q "recorded in steps of" r.log || { cat r.log; fail "a note on the step size, the same"; }
    # the same trace in steps of 64: said once, not silently other steps
    sed "s/^  tokens_per_step: 96/  tokens_per_step: 64/" r.yaml > r64.yaml
    mpirun_moed 3 --config r64.yaml --no-progress > r64.log 2>&1 || { cat r64.log; fail "replay in steps of 64 failed"; }
    n=$(grep -c "was recorded in steps of 96 tokens; this run takes 64 a step" r64.log || true)
    [[ $n == 1 ]] || { cat r64.log; fail "expected the step-size note once, saw it $n times"; } ;;
  bad)
    STEPS=2 SKEW=1.5 record ''
    # each: NAME  python edit of the good trace  expected words  "header" when --check-config
    # must also refuse it
    run_bad() {
      local name=$1 edit=$2 words=$3 header=$4
      "$PY" - "$TRACE/routing.safetensors" "bad_$name.safetensors" "$edit" <<'EOF'
import json, struct, sys
import numpy as np
src, dst, edit = sys.argv[1:]
raw = open(src, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); data = raw[8 + n:]
meta = h.pop("__metadata__")
arrays = {}
for k, v in h.items():
    a, b = v["data_offsets"]
    arrays[k] = np.frombuffer(data[a:b], dtype="<i4" if v["dtype"] == "I32" else "<f4").reshape(v["shape"]).copy()
exec(edit)
header, off, blobs = {"__metadata__": meta}, 0, []
for k, a in arrays.items():
    b = a.tobytes()
    header[k] = {"dtype": "I32" if a.dtype.kind == "i" else "F32", "shape": list(a.shape),
                 "data_offsets": [off, off + len(b)]}
    off += len(b); blobs.append(b)
hj = json.dumps(header).encode(); hj += b" " * (-len(hj) % 8)
with open(dst, "wb") as f:
    f.write(struct.pack("<Q", len(hj))); f.write(hj); [f.write(b) for b in blobs]
EOF
      sed "s|^workload:|workload:\n  routing: $WORK/bad_$name.safetensors|; s/^  routing_skew: .*/  routing_skew: 0/; s/^  record_routing: true/  record_routing: false/; s|output_dir: .*|output_dir: $WORK/bad_out|" \
        c.yaml > b.yaml
      set +e
      mpirun_moed 3 --config b.yaml --no-progress > "b_$name.log" 2>&1; rc=$?
      set -e
      [[ $rc == 4 ]] || { cat "b_$name.log"; fail "$name: exit $rc, expected 4"; }
      grep -q -- "$words" "b_$name.log" || { cat "b_$name.log"; fail "$name: no '$words'"; }
      grep -q "bad_$name.safetensors" "b_$name.log" || { cat "b_$name.log"; fail "$name: the file is not named"; }
      # after the config's file:line:col of the value, as the config's own errors
      grep -q "b.yaml:[0-9]*:12: workload.routing: .*$words" "b_$name.log" \
        || { cat "b_$name.log"; fail "$name: no b.yaml:LINE:12 before workload.routing"; }
      n=$(grep -c -- "$words" "b_$name.log")
      [[ $n == 1 ]] || { cat "b_$name.log"; fail "$name: the message came $n times"; }
      [[ ! -e "$WORK/bad_out" ]] || fail "$name: a report folder was made"
      if [[ $header == header ]]; then
        set +e
        "$MOED" --config b.yaml --check-config > "c_$name.log" 2>&1; rc=$?
        set -e
        [[ $rc == 4 ]] || { cat "c_$name.log"; fail "$name: --check-config exit $rc, expected 4"; }
        grep -q -- "$words" "c_$name.log" || { cat "c_$name.log"; fail "$name: --check-config said no '$words'"; }
      fi
    }
    run_bad layer_missing 'del arrays["layers.1.topk_ids"]; del arrays["layers.1.topk_weights"]; meta["layers"] = "[0]"' \
      "no tensor 'layers.1.topk_ids'" header
    run_bad top_k 'meta["top_k"] = "3"; arrays = {k: np.concatenate([a, a[:, :1]], axis=1) for k, a in arrays.items()}' \
      "top_k 3" header
    run_bad experts 'meta["num_experts"] = "16"' "num_experts 16" header
    run_bad rows 'arrays = {k: a[:50] for k, a in arrays.items()}' "50 rows (tokens) per layer, fewer than one step" header
    run_bad id_range 'arrays["layers.1.topk_ids"][7, 1] = 8' "'layers.1.topk_ids' row 7 column 1 is expert 8" rows
    run_bad id_twice 'a = arrays["layers.0.topk_ids"]; a[3, 1] = a[3, 0]' "'layers.0.topk_ids' row 3 names expert" rows
    run_bad nan 'arrays["layers.0.topk_weights"][5, 0] = np.nan' "'layers.0.topk_weights' row 5 column 0 is nan" rows
    run_bad negative 'arrays["layers.1.topk_weights"][0, 1] = -0.25' "'layers.1.topk_weights' row 0 column 1 is -0.25" rows
    run_bad format 'meta["format"] = "other/1"' "not a routing trace" header
    run_bad family 'meta["family"] = "deepseek_v3"' "metadata family deepseek_v3; the model is model.family mixtral" header ;;
  bounds)
    expect3() {
      local words=$1; shift
      set +e
      mpirun_moed 3 --config b.yaml --no-progress "$@" > b.log 2>&1; rc=$?
      set -e
      [[ $rc == 3 ]] || { cat b.log; fail "exit $rc, expected 3 ($words)"; }
      grep -q -- "$words" b.log || { cat b.log; fail "no '$words'"; }
      [[ ! -e "$WORK/experiments" ]] || fail "a report folder was made ($words)"
    }
    PROF=true STEPS=0 small_model | sed "s/^profiler:/profiler:\n  repeat: 0\n  record_routing: true/" > b.yaml
    expect3 "has no end (workload.steps: 0) and records windows without end"
    PROF=true STEPS=1000 TOKENS=4096 LAYERS=8 small_model \
      | sed "s/^profiler:/profiler:\n  warmup_steps: 0\n  measurement_steps: 1000\n  record_routing: true\n  routing_max_mb: 100/" > b.yaml
    expect3 "= 500.0 MiB, more than profiler.routing_max_mb (100)"
    # --steps is the run's workload.steps for these checks too: no end, or past the bound
    PROF=true STEPS=10 small_model | sed "s/^profiler:/profiler:\n  repeat: 0\n  record_routing: true/" > b.yaml
    expect3 "has no end (--steps 0) and records windows without end" --steps 0
    PROF=true STEPS=10 TOKENS=4096 LAYERS=8 small_model \
      | sed "s/^profiler:/profiler:\n  warmup_steps: 0\n  measurement_steps: 1000\n  record_routing: true\n  routing_max_mb: 100/" > b.yaml
    expect3 "1000 recorded steps (of --steps 1000) x 4096 tokens" --steps 1000
    SKEW=1.5 small_model | sed "s|^workload:|workload:\n  routing: $WORK|" > b.yaml
    expect3 "workload.routing replays a trace instead of running the gate" ;;
  *) fail "unknown case $case_name" ;;
esac
echo "PASS $case_name"
