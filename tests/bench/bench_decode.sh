#!/usr/bin/env bash
# bench_decode.sh [BUILD] [DTYPE] [SHAPES]: moed at decode shapes against the machine's read
# bandwidth, measured in the same run on the same number of cores. A benchmark, not a test.
#
#   BUILD   the build folder (default build): moed, tests/bench/bench_stream, tests/make_checkpoint
#   DTYPE   the expert weights, or several in one run ("fp8 fp8-bf16": one checkpoint for both):
#             bf16      random weights held in BF16 (model.dtype bf16; the default)
#             f32       random weights in F32
#             fp8       a DeepSeek-V3-layout FP8 e4m3 checkpoint (128x128 block scales, written
#                       by tests/models/make_reference.py: NumPy, ~2 min for 32 experts x 4
#                       layers; top-k is the family's 4, a shared expert runs on the master)
#                       run with model.dtype auto: held as stored where moed keeps FP8 (else
#                       widened at load: the run's "experts:" line says)
#             fp8-bf16  the same checkpoint widened to BF16 at load (model.dtype bf16): the
#                       baseline of the FP8 speed-up
#             mxfp4     a gpt-oss-layout MXFP4 checkpoint (U8 blocks, e8m0 scales, written by
#                       make_reference.py; top-k is the family's 4), dtype auto: held as stored
#             mxfp4-bf16  the same checkpoint widened to BF16 at load: the baseline of its speed-up
#   SHAPES  "EXPERTS:TOPK ..." (default "32:4 128:8": Qwen3-30B-A3B's top-8 of 128 and
#           DeepSeek-V3's top-8 of 256 scaled to the machine; for fp8 K is the checkpoint's 4)
# Environment: TOKENS ("1 8 32 128"), HIDDEN (2048), FFN (768), LAYERS (4), STEPS (40, of
# which WARMUP 5 unrecorded), NP (3: a master and NP-1 expert ranks), ROUTING (master: rank 0
# routes every token and hosts no experts; symmetric: every one of the NP ranks routes its
# share of the tokens and hosts experts: NP=2 is two ranks on two cores, none idle, no
# master waiting on a shared core; the shared experts then run on every rank), BIND (auto: moed's
# runtime.bind pins the expert ranks, mpirun --bind-to none; overload: mpirun --bind-to
# core:overload-allowed), BENCH (1: also moed --bench's decode latency lines), THREADS (1:
# runtime.threads of every rank; an expert rank's threads split each expert's columns, so
# NP=2 THREADS=2 is one expert rank reading with both cores), COPIES (replicas: whole
# experts placed in blocks; columns: placement.copies: columns, every expert split into
# column shares over all the expert ranks, each reading its share of every touched expert;
# balance: every expert whole on every expert rank, each step's tokens of an expert on the
# copy with the fewest experts to read; a list ("replicas balance columns") runs each back
# to back at every token count, rows labelled DTYPE/bal and DTYPE/col), KEEP (keep the
# work folder), CKPTS (a folder for the checkpoints the runs make, kept for the next
# invocation: two builds compared on the same weights without making them again; default the
# work folder), ROUNDS (default 1: the whole set runs that many times).
# The runs go shape by shape, token count by token count, the DTYPEs (and COPIES) of each
# back to back, so that a held type and its widened baseline ("fp8 fp8-bf16", "mxfp4
# mxfp4-bf16") meet the host at the same speed; the last lines give the widened run's step
# over the held one's for each such pair (the speed-up), by the mean step and by the median
# step (trace.json's step spans, exact), per round with both runs' reads before and after,
# their median over the rounds and over the rounds with steady reads (the four reads within
# 20%, and neither run reading its weights faster than the higher of its reads).
#
# Per run it prints the step's and the layers' latency (p50 / p99 over the recorded steps, the
# profiler's: the routing rank's times), the bytes of distinct expert weights touched per
# step (metrics.csv: the (layer, expert) pairs with rows, times the bytes of one expert as
# the expert ranks hold it), those bytes over the expert compute time (each expert rank's
# bytes over its own expert call time, summed over the expert ranks: the rate at which
# the cores read weights while they compute) and over the whole step (rank 0's mean step
# time), each against the read bandwidth of NP-1 threads pinned as the expert ranks are
# (bench_stream, measured right before and right after each run, the higher of the two in
# the "read GB/s" column: the host's own speed moves it from minute to minute, so each row
# has its own; a ratio above 1 says the run met a quicker spell than both measurements; the
# row's "read:" line gives both, "unsteady" where they differ by more than 20%). "+sh MB": the shared
# experts' bytes a step (DeepSeek's checkpoint: the routing rank reads them every layer, held
# as the experts are); "step GB/s" counts them. "floor ms": the roofline's floor of a step on
# the expert ranks' cores, the longer of its weight bytes at the read bandwidth and its FLOPs
# (experts' and shared experts') at the GEMM limit that --bench measures for these shapes
# (an expert rank's oneDNN GEMM, its threads, at the rows an expert call gets, at least 16); "/floor" is the floor
# over rank 0's mean step time: 1 is the machine's limit, whichever it is (a step of many
# rows per expert is bound by FLOPs, not bytes: its bandwidth ratio cannot reach 1).
# "steal": the share of the CPUs' time during the run that the hypervisor gave to others
# (/proc/stat): on a shared VM it stalls a pinned rank for tens of ms now and then, which is
# what the rare p99 spikes are. "median step": the recorded steps' times from trace.json's
# step spans (exact, where the report's percentiles are within 1/32), their median and mean,
# the step GB/s and /read at the median step, and the steps over twice it (stalls). "parts":
# the touched bytes over the mean step against the read (the row's step /read without the
# shared experts' bytes) as the product of three shares (metrics.csv, each expert rank's call
# time summed per step and layer): the calls' read (the touched bytes over the expert ranks'
# mean call time a step, against the read: each core's rate against its share of the read),
# the expert ranks' balance (their mean call time over the slowest one's, layer by layer: 1
# with one expert rank), and the step's own part (the slowest rank's call time over the mean
# step: the gate, exchange, merge and waits are the rest).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build}
dtypes=${2:-bf16}
shapes=${3:-32:4 128:8}
moed=$build/moed
stream=$build/tests/bench/bench_stream
mkckpt=$build/tests/make_checkpoint
TOKENS=${TOKENS:-1 8 32 128}
HIDDEN=${HIDDEN:-2048}
FFN=${FFN:-768}
LAYERS=${LAYERS:-4}
STEPS=${STEPS:-40}
WARMUP=${WARMUP:-5}
NP=${NP:-3}
ROUTING=${ROUTING:-master}
BIND=${BIND:-auto}
BENCH=${BENCH:-1}
THREADS=${THREADS:-1}
COPIES=${COPIES:-replicas}
ROUNDS=${ROUNDS:-1}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "bench_decode: ROUNDS is a count of rounds (1, 2, ...)" >&2; exit 2; }
PY=$( [[ -x /usr/bin/python3 ]] && echo /usr/bin/python3 || command -v python3)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for x in "$moed" "$stream"; do
  [[ -x $x ]] || { echo "bench_decode: $x not built (cmake --build $build)" >&2; exit 2; }
done
for dtype in $dtypes; do
  case $dtype in
    bf16|f32|fp8|fp8-bf16|mxfp4|mxfp4-bf16) ;;
    *) echo "bench_decode: DTYPE is bf16, f32, fp8, fp8-bf16, mxfp4 or mxfp4-bf16, not $dtype" >&2; exit 2 ;;
  esac
done
case $ROUTING in
  master|symmetric) ;;
  *) echo "bench_decode: ROUTING is master or symmetric, not $ROUTING" >&2; exit 2 ;;
esac
case $BIND in
  auto) mpibind=(--bind-to none) ;;
  overload) mpibind=(--bind-to core:overload-allowed) ;;
  *) echo "bench_decode: BIND is auto or overload" >&2; exit 2 ;;
esac
work=$(mktemp -d "${TMPDIR:-/tmp}/moed-decode.XXXXXX")
[[ -n ${KEEP:-} ]] || trap 'rm -rf "$work"' EXIT
ckpts=${CKPTS:-$work}
mkdir -p "$ckpts" || { echo "bench_decode: cannot make CKPTS $ckpts" >&2; exit 2; }
experts_ranks=$((NP - 1)) routing_ranks=1
[[ $ROUTING == symmetric ]] && experts_ranks=$NP routing_ranks=$NP
expert_cores=$((experts_ranks * THREADS)) # the cores the expert ranks read with

echo "bench_decode: $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -r), moed $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | sed -n 's/^CPU family: *//p'), model $(lscpu | sed -n 's/^Model: *//p'), $(nproc) CPUs, L3 $(lscpu | sed -n 's/^L3 cache: *//p')"
echo "cpu flags: $(grep -m1 -o -w -E 'avx2|avx512f|avx512_bf16|avx512_fp16|amx_bf16|amx_tile|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "memory: $(free -g | awk '/^Mem:/ {print $2 " GiB, " $7 " GiB available"}'); THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo '?'); load $(cut -d' ' -f1-3 /proc/loadavg)"
# the kernel's own memory monitor (DAMON): a kdamond thread applying a scheme (here the VM's
# proactive reclaim, `pageout`) takes CPU time beside pinned ranks (20-40 ms a 4 s run seen)
damon() {
  local k d out=""
  for k in /sys/kernel/mm/damon/admin/kdamonds/[0-9]*; do
    [[ -r $k/state ]] || continue
    d="kdamond ${k##*/} $(cat "$k/state")"
    for c in "$k"/contexts/[0-9]*; do
      d+=" ($(cat "$c/operations" 2>/dev/null)"
      for x in "$c"/schemes/[0-9]*; do
        d+=", $(cat "$x/action" 2>/dev/null) up to $(cat "$x/quotas/ms" 2>/dev/null) ms of CPU a $(cat "$x/quotas/reset_interval_ms" 2>/dev/null) ms"
      done
      d+=")"
    done
    out+="${out:+; }$d"
  done
  echo "${out:-none}"
}
echo "kernel memory monitor (DAMON): $(damon)"
# what moves small exchanges' latency (docs/performance.md, "Two ranks"): the VM's idle
# vCPUs (cpuidle driver; haltpoll's polling before a halt) and MPI's eager limit
echo "wake-ups: cpuidle $(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo '?'), guest_halt_poll_ns $(cat /sys/module/haltpoll/parameters/guest_halt_poll_ns 2>/dev/null || echo '-'); vader eager limit ${OMPI_MCA_btl_vader_eager_limit:-default (4096)}"
echo "shapes: hidden $HIDDEN, ffn $FFN, $LAYERS layers, dtype $dtypes, $NP ranks ($ROUTING routing, $experts_ranks expert ranks of $THREADS thread(s), binding $BIND, copies $COPIES), $STEPS steps ($WARMUP warm-up)"

# cpu_ticks: /proc/stat's total and steal ticks of all CPUs; steal_pct BEFORE AFTER: the
# share of the CPUs' time in between that the hypervisor gave to others (a VM's steal: the
# cause of this machine's rare 30-70 ms stalls of a pinned rank, in the p99 columns)
cpu_ticks() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t, $9 }' /proc/stat; }
steal_pct() {
  awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " "); d = y[1] - x[1]
    printf("%.1f", d > 0 ? 100 * (y[2] - x[2]) / d : 0) }'
}

stream_gbps() { # the read GB/s (best pass) of the expert ranks' threads, pinned
  local out
  out=$("$stream" --threads "$expert_cores" --mib 2048 --passes 6 2>&1) || { echo 0; return; }
  sed -n 's/^stream: read GB\/s best \([0-9.]*\).*/\1/p' <<< "$out"
}
"$stream" --threads "$expert_cores" --mib 2048 --passes 6 2>&1 | sed 's/^/read bandwidth: /'

# ckpt E K: the checkpoint folder of the dtype's family for E experts, top-K (made once)
ckpt() {
  local e=$1 k=$2 d="$ckpts/ck_${dtype%%-*}_$1_$2_h${HIDDEN}_f${FFN}_l${LAYERS}" fam kind brk=""
  case $dtype in
    fp8|fp8-bf16) fam=deepseek_v3 kind=fp8 k=4 d="$ckpts/ck_fp8_$1_4_h${HIDDEN}_f${FFN}_l${LAYERS}" ;;
    mxfp4|mxfp4-bf16) fam=gpt_oss kind=mxfp4 k=4 d="$ckpts/ck_mxfp4_$1_4_h${HIDDEN}_f${FFN}_l${LAYERS}" ;;
  esac
  if [[ ! -d $d && ( $kind == fp8 || $kind == mxfp4 ) ]]; then
    # tests/models/make_reference.py (NumPy): DeepSeek-V3's layout and knobs scaled down, a
    # dense layer 0 then LAYERS MoE layers, 128x128 e4m3 blocks; top-k is the family's 4
    # (made under another name first: a CKPTS folder never keeps half a checkpoint)
    rm -rf "$d.part"
    "$PY" "$here/tests/models/make_reference.py" "$d.part" "$fam" "$kind" --experts "$e" \
      --hidden "$HIDDEN" --ffn "$FFN" --moe-layers "$LAYERS" --tokens 8 >&2 \
      && mv "$d.part" "$d" || { echo "bench_decode: make_reference.py failed" >&2; exit 1; }
  elif [[ ! -d $d ]]; then
    mkdir -p "$d"
    [[ -x $mkckpt ]] || { echo "bench_decode: $mkckpt not built" >&2; exit 2; }
    "$mkckpt" --dir "$d" "$fam" "$kind" "$HIDDEN" "$FFN" "$e" "$k" "$LAYERS" 1 128 \
      $brk >&2 || { echo "bench_decode: make_checkpoint failed" >&2; exit 1; }
  fi
  echo "$d"
}

config() { # E K T: the run's config on stdout
  local e=$1 k=$2 t=$3
  local prof="profiler: {enabled: true, warmup_steps: $WARMUP, measurement_steps: $((STEPS - WARMUP)), trace: true, output_dir: $work/exp}"
  local run="runtime: {routing: $ROUTING, transport: mpi, threads: $THREADS, bind: $([[ $BIND == auto ]] && echo auto || echo none)}"
  local work_l="workload: {tokens_per_step: $t, steps: $STEPS}"
  case $dtype in
    bf16|f32)
      printf 'model: {hidden_dim: %s, ffn_dim: %s, num_experts: %s, top_k: %s, num_layers: %s, dtype: %s}\n' \
        "$HIDDEN" "$FFN" "$e" "$k" "$LAYERS" "$dtype"
      echo "placement: {master_rank: 0, experts: auto, copies: $copies}" ;;
    *)
      local d; d=$(ckpt "$e" "$k")
      printf 'model: {checkpoint: %s, dtype: %s}\n' "$d" "$([[ $dtype == *-bf16 ]] && echo bf16 || echo auto)"
      echo "placement: {master_rank: 0, experts: auto, copies: $copies}" ;;
  esac
  echo "$run"; echo "$work_l"; echo "$prof"
}

# figures RUN_DIR CKPT ROUTING_RANKS: one line of figures from the report
# (summary.json, metrics.csv, trace.json) and the checkpoint's config.json (its shared
# experts, read by each of the ROUTING_RANKS; CKPT "-": random weights, none)
figures() {
  "$PY" - "$1" "$2" "$3" <<'PY'
import csv, json, os, re, statistics, sys
d, ck = sys.argv[1], sys.argv[2]
s = json.load(open(d + "/summary.json"))
# each recorded step's time, exact, from trace.json's step spans (pid = rank + 1): the
# longest of the routing ranks' (summary.json's ranks[].routes: the master, or every rank
# with tokens to route in symmetric routing), as the report's step percentiles take it; the
# median is what a stall of the host (a vCPU taken away for tens of ms) moves least
routers = {r["rank"] + 1 for r in s["ranks"] if r.get("routes")}
per = {}
for e in json.load(open(d + "/trace.json"))["traceEvents"]:
    if e.get("cat") == "step" and e.get("ph") == "X" and e["pid"] in routers:
        k = e["args"]["step"]
        per[k] = max(per.get(k, 0.0), e["dur"] * 1e-3)
ts = sorted(per.values())
tmed = statistics.median(ts) if ts else 0.0
tover = sum(1 for x in ts if x > 2 * tmed)
tmax = ts[-1] if ts else 0.0
tmean = statistics.fmean(ts) if ts else 0.0
L = s["run"]["num_layers"]
# DeepSeek's shared experts: n_shared_experts x moe_intermediate_size wide, one FFN held as
# the experts are (each routing rank reads all of it every step, every layer)
n_shared = 0
if ck != "-" and os.path.exists(ck + "/config.json"):
    n_shared = json.load(open(ck + "/config.json")).get("n_shared_experts") or 0
# one expert's bytes as the expert ranks hold them: their weight bytes over their (layer, expert)s
ex = [r["rank"] for r in s["ranks"] if r["num_local"] > 0]
held = sum(s["memory"][r]["expert_weights_mib"] * 2**20 for r in ex)
pairs = sum(s["ranks"][r]["num_local"] for r in ex) * L
per_expert = held / pairs if pairs else 0
touched, busy, steps, calls = {}, {}, set(), {}
for row in csv.DictReader(open(d + "/metrics.csv")):
    if int(row["tokens"]) <= 0:
        continue
    r, sec = int(row["rank"]), float(row["compute_ms"]) * 1e-3
    steps.add(int(row["step"]))
    touched[r] = touched.get(r, 0) + 1
    busy[r] = busy.get(r, 0.0) + sec
    c = calls.setdefault((int(row["step"]), int(row["layer"])), {})  # per step and layer
    c[r] = c.get(r, 0.0) + sec
n = len(steps)
per_step = sum(touched.values()) * per_expert / n if n else 0
# a column share (placement.copies: columns) holds 1/n of an expert; shared experts are whole
m = re.search(r"every expert in (\d+) column shares", s["run"]["weights"] or "")
shared = n_shared * per_expert * (int(m.group(1)) if m else 1) * L * int(sys.argv[3])
expert_gbps = sum(touched[r] * per_expert / busy[r] for r in touched if busy[r] > 0) / 1e9
r0 = s["ranks"][0]["per_step_ms"]["step"] * 1e-3
step_gbps = (per_step + shared) / r0 / 1e9 if r0 > 0 else 0
st = s["run"]["step_latency_ms"]
lat = [l["latency_ms"] for l in s["layers"]]
lp50 = sum(x["p50"] for x in lat) / len(lat)
lp99 = max(x["p99"] for x in lat)
w = [r["share_of_step"]["weights"] for r in s["ranks"] if r["num_local"] > 0]
med_gbps = (per_step + shared) / (tmed * 1e-3) / 1e9 if tmed > 0 else 0
# the parts (see the header): mean_b the expert ranks' mean call time a step, slow the
# slowest rank's a step (layer by layer, a rank without calls in a layer at 0), r0 the step
mean_b = sum(busy.get(r, 0.0) for r in ex) / len(ex) / n if ex and n else 0
slow = sum(max(c.values()) for c in calls.values()) / n if n else 0
bal = mean_b / slow if slow > 0 else 0
own = slow / r0 if r0 > 0 else 0
print("%.2f %.2f %.3f %.3f %.1f %.1f %.2f %.2f %.2f %.3f %d %.0f %.3f %.3f %d %.3f %d %.2f %.4f %.4f %.4f %s" % (
      st["p50"], st["p99"], lp50, lp99, per_step / 1e6, shared / 1e6, expert_gbps, step_gbps,
      per_expert / 1e6, r0 * 1e3, n_shared, n, tmed, tmean, len(ts), tmax, tover, med_gbps,
      per_step / mean_b / 1e9 if mean_b > 0 else 0, bal, own, s["run"]["weights"] or "random"))
PY
}

printf '\n%-12s %6s %4s %3s %8s %8s %8s %8s %10s %6s %8s %9s %6s %9s %6s %8s %6s\n' dtype tokens E k \
  "step p50" "step p99" "layer p50" "layer p99" "touched MB" "+sh MB" "read GB/s" "expert GB/s" \
  "/read" "step GB/s" "/read" "floor ms" "/floor"
: > "$work/runs.txt"
for round in $(seq "$ROUNDS"); do
(( ROUNDS > 1 )) && echo "round $round of $ROUNDS"
for shape in $shapes; do
  for t in $TOKENS; do
  for copies in $COPIES; do
  for dtype in $dtypes; do # back to back: a type and its widened baseline meet the same host
    e=${shape%%:*} k=${shape##*:}
    [[ $dtype == fp8* || $dtype == mxfp4* ]] && k=4 # the checkpoint's
    label=$dtype; [[ $copies == columns ]] && label=$dtype/col; [[ $copies == balance ]] && label=$dtype/bal
    read_gbps=$(stream_gbps)
    config "$e" "$k" "$t" > "$work/c.yaml"
    extra=()
    [[ $BENCH == 1 ]] && extra=(--bench)
    shopt -s nullglob; runs=("$work"/exp/*/); before=${#runs[@]}
    cpu0=$(cpu_ticks)
    if ! out=$(timeout -k 5 1200 mpirun --oversubscribe "${mpibind[@]}" -np "$NP" "$moed" \
                 --config "$work/c.yaml" --no-progress "${extra[@]}" 2>&1); then
      echo "$label $t $e $k: run failed"
      { grep -m3 -E 'error|moed:' <<< "$out" || tail -5 <<< "$out"; } | sed 's/^/    /'
      continue
    fi
    runs=("$work"/exp/*/)
    [[ ${#runs[@]} -gt $before ]] || { echo "$label $t $e $k: no report"; continue; }
    dir=$(printf '%s\n' "${runs[@]}" | sort | tail -1)
    read_before=$read_gbps read_after=$(stream_gbps)
    read_gbps=$(awk -v a="$read_before" -v b="$read_after" 'BEGIN { print (b > a) ? b : a }')
    ck=-; [[ $dtype == fp8* || $dtype == mxfp4* ]] && ck=$(ckpt "$e" "$k")
    read -r sp50 sp99 lp50 lp99 mb shmb egb sgb pe stepms nsh n tmed tmean tn tmax tover mgb cgb bal own \
      wts <<< "$(figures "$dir" "$ck" "$routing_ranks")"
    # the roofline's floor of a step: its weight bytes (experts touched + shared) at the read
    # bandwidth, or its FLOPs (the experts' and the shared experts', 2 x H x 3F a row) over
    # the expert ranks' cores at the GEMM limit --bench measured for these shapes, the longer
    # (the limit of the type the experts compute in, as the run's "experts:" line says: F32
    # for f32 weights and on a CPU without native BF16)
    ctype=BF16
    grep -m1 '^experts: ' <<< "$out" | grep -q ', f32 compute' && ctype=F32
    limit=$(sed -n "s/^bench: $ctype GEMM GFLOP\/s ([^)]*) *\([0-9.]*\) per rank.*/\1/p" <<< "$out" | head -1)
    floor=$(awk -v mb="$mb" -v sh="$shmb" -v bw="$read_gbps" -v t="$t" -v k="$k" -v L="$LAYERS" \
      -v H="$HIDDEN" -v F="$FFN" -v nsh="$nsh" -v lim="${limit:-0}" -v c="$experts_ranks" 'BEGIN {
        bytes = (bw > 0) ? (mb + sh) / bw : 0
        flops = t * L * 6 * H * F * (k + nsh)
        comp = (lim > 0) ? flops / (c * lim * 1e9) * 1e3 : 0
        printf("%.2f %s", bytes > comp ? bytes : comp, bytes > comp ? "bytes" : "flops") }')
    printf '%-12s %6s %4s %3s %8s %8s %8s %8s %10s %6s %8s %9s %6s %9s %6s %8s %6s\n' "$label" "$t" \
      "$e" "$k" "$sp50" "$sp99" "$lp50" "$lp99" "$mb" "$shmb" "$read_gbps" "$egb" \
      "$(awk -v a="$egb" -v b="$read_gbps" 'BEGIN { printf("%.2f", (b > 0) ? a / b : 0) }')" "$sgb" \
      "$(awk -v a="$sgb" -v b="$read_gbps" 'BEGIN { printf("%.2f", (b > 0) ? a / b : 0) }')" \
      "${floor% *}" "$(awk -v f="${floor% *}" -v s="$stepms" 'BEGIN { printf("%.2f", (s > 0) ? f / s : 0) }')"
    echo "    floor: ${floor#* } (GEMM limit ${limit:-not measured, BENCH=0} GFLOP/s an expert rank; step mean $stepms ms)"
    echo "    median step: $tmed ms (trace.json, exact: $tn steps, mean $tmean ms); step GB/s at it $mgb, /read $(awk -v a="$mgb" -v b="$read_gbps" 'BEGIN { printf("%.2f", (b > 0) ? a / b : 0) }'); $tover over twice it (the longest $tmax ms)"
    [[ $tn == "$n" ]] || echo "    median step: trace.json holds $tn of the $n recorded steps (events past profiler.trace_max_events are dropped)"
    awk -v c="$cgb" -v r="$read_gbps" -v b="$bal" -v o="$own" 'BEGIN { c = (r > 0) ? c / r : 0
      printf("    parts: the calls read at %.3f of the read x the expert ranks'"'"' balance %.3f x the step'"'"'s own part %.3f = %.3f, the touched bytes over the mean step against the read\n", c, b, o, c * b * o) }'
    awk -v a="$read_before" -v b="$read_after" 'BEGIN { lo = a < b ? a : b; hi = a < b ? b : a
      printf("    read: %s GB/s before the run, %s after%s\n", a, b,
             (hi > 0 && lo < 0.8 * hi) ? ": unsteady (the host), the ratios against the higher" : "") }'
    echo "    steal: $(steal_pct "$cpu0" "$(cpu_ticks)")% of the CPUs' time during the run (/proc/stat: the hypervisor gave it to other guests)"
    grep -E '^experts: |ranks on|^moed ' <<< "$out" | head -3 | sed 's/^/    /'
    echo "    $n recorded steps, ${pe} MB per expert as held ($wts)"
    [[ $BENCH == 1 ]] && grep -E '^bench: (layer exchange|same messages|MPI ping-pong|wake-up)' <<< "$out" | sed 's/^/    /'
    # a run whose figures could not be read is no pair's: its round shows missing
    [[ -n $stepms && -n $read_gbps ]] && echo "$dtype $copies $t $e $k $stepms $read_gbps $round $tmed $read_before $read_after $egb" >> "$work/runs.txt"
  done
  done
  done
done
done
# the speed-up lines: each held type over its widened baseline (tests/bench/speedup.awk)
awk -v rounds="$ROUNDS" -f "$here/tests/bench/speedup.awk" "$work/runs.txt"
echo "read GB/s: bench_stream, $expert_cores threads pinned to the expert ranks' CPUs, 2 GiB, best of 6 passes, the higher of right before and right after each run"
