#!/usr/bin/env bash
# live.sh CASE: the live endpoint of a run without end (workload.steps: 0) on 3 ranks,
# over 127.0.0.1 only, every request bounded in time.
#   metrics  /metrics parsed by prometheus_client's parser; counters rise between scrapes;
#            /status is JSON with every rank
#   window   POST /profile: 401 without a token, 403 with a wrong one (nothing changes),
#            202 with the right one; steps=3 (every rank) then steps=2&ranks=0,2: each a
#            full report folder (summary.json with that many steps and those profiled
#            ranks) while the run goes on; each folder's config.yaml is the run's config
#            with the file's control token "<redacted>", its summary.json has every
#            profiled rank's memory series inside the window, the peak theirs; then
#            SIGTERM and the end report is written too (its config.yaml redacted as well)
#   window_noprof  the same for one window with profiler.enabled: false (no end report)
#   window_peak  rank 1 maps, writes and unmaps 128 MiB in every step (MOED_TEST_TOUCH_MIB),
#            between two of its memory samples: a window's peak RSS of rank 1 holds it,
#            its samples do not; the end report's peak holds it too
#   window_long_dir  profiler.output_dir of ~640 bytes (room for a window's name): a window's
#            folder is written whole at output_dir/NAME, not at a path cut to 511 bytes
#   abuse    garbage, a 200 kB header and idle connections: steps keep going and /metrics
#            still answers fast
#   page     the page in headless Chromium draws its charts with data: heat map cells,
#            step-time points, byte cells and memory bars counted; axis labels with units,
#            colour scales with numbers, rank, layer and expert labels, hover titles, the
#            window in words; then the page replayed with the /status and /live.json taken
#            at one moment (tests/live/replay.py): every figure it shows equals theirs
#            (page_check.py), and again with layer 1 given no token (its cells: no layer
#            mean to compare with; 77 without Chromium)
#   page_window  the window's state in words in Chromium, from /status replayed: a window
#            written (its folder), one recording (step k of N), agreed, requested, writing
#   page_js  the page's script run by node against the live endpoint with a stub DOM: all
#            four charts draw their SVG with hover titles, no exception (77 without node 18+)
#   top      `moed top URL --once` prints a frame
#   stop     SIGTERM: every rank stops within seconds and rank 0 writes the report
#   start_checks  a control token under 16 bytes (file or environment) is refused at start
#            (exit 3); listen 0.0.0.0 starts with a warning that the network reaches it
#   harden   32 clients trickling a byte a second are cut at the request deadline while a
#            client from another address is answered (and theirs after); a 1 MB chunked
#            body gets 413; GET /profile 405 with Allow; steps over the maximum 400;
#            /status names folders, never an absolute path, nor does last_error when the
#            output folder cannot be made for a window
#   close    DELETE /profile closes an open window early: its folder is written, partial,
#            with the steps it got and the steps asked for; 409 with no window
#   window_stop  SIGTERM with a window open: its folder is written, partial and interrupted
#   window_kill  rank 1 SIGKILLed with a window open: mpirun stops the job, and the window's
#            folder names rank 1, whose last part never came, in `missing`
#   sched    the profiler's schedule (warm-up 2, 5 steps, repeat 1) in this run without end:
#            <run folder>/window-1 is written whole while the run goes on, no second one;
#            /status lists it (RUN/window-1) and counts it, and so does `moed top`
#   sched_repeat  repeat 0, wait_steps 100: window folders appear while the run goes on,
#            never more than the 10 kept, the newest ones, each whole
#   sched_fail  the same schedule, the run folder made a file after a window: a window's
#            folder that cannot be made sets /status's last_error as an on-demand one's does
#            (named RUN/window-N, no path), on stderr once
set -euo pipefail
source "$(dirname "$0")/../mpi/common.sh"
source "$(dirname "$0")/common.sh"
case_name=${1:?case}
TOKEN=t0ken-$$-live-0123456789

if [[ "$case_name" == page_js ]] && ! node -e 'if (typeof fetch !== "function") process.exit(1)' \
   2>/dev/null; then
  echo "SKIP: node 18+ (with fetch) not installed"; exit 77
fi
if [[ "$case_name" == page* && "$case_name" != page_js ]] && ! command -v chromium >/dev/null && \
   ! command -v chromium-browser >/dev/null; then
  echo "SKIP: chromium not installed"; exit 77
fi
# Debian's python3 (python3-prometheus-client), not whatever python3 comes first in PATH
PYTHON=${MOED_PYTHON:-$( [[ -x /usr/bin/python3 ]] && echo /usr/bin/python3 || command -v python3)}
"$PYTHON" -c 'import prometheus_client' 2>/dev/null || \
  { [[ "$case_name" == metrics ]] && { echo "SKIP: python3-prometheus-client not installed"; exit 77; }; true; }

PROF=true
[[ "$case_name" == window_noprof ]] && PROF=false
# a token in the file too (the environment's wins): the reports' config.yaml must not hold it
FILE_TOKEN=f1le-t0ken-$$-0123456789
STEPS=0 PROF=$PROF TOKENS=64 LAYERS=2 E=8 small_model > c.yaml
cat >> c.yaml <<EOC
  warmup_steps: 2
  measurement_steps: 5
  listen: "127.0.0.1:0"
  control_token: "$FILE_TOKEN"
EOC
[[ "$case_name" == sched_repeat || "$case_name" == sched_fail ]] && printf '  repeat: 0\n  wait_steps: 100\n' >> c.yaml
[[ "$case_name" == window_watchdog ]] && sed -i 's/^runtime:/runtime:\n  step_timeout_s: 3/' c.yaml
export MOED_CONTROL_TOKEN=$TOKEN FILE_TOKEN
if [[ "$case_name" == start_checks ]]; then
  # shellcheck disable=SC2086
  run_moed() { timeout -k 5 60 mpirun $MPIRUN_FLAGS -np 3 "$MOED" --no-progress "$@"; }
  STEPS=0 TOKENS=64 small_model > short.yaml
  printf '  listen: "127.0.0.1:0"\n  control_token: x\n' >> short.yaml
  rc=0; run_moed --config short.yaml > short.log 2>&1 || rc=$?
  (( rc == 3 )) || { cat short.log; fail "a 1-byte token: exit $rc, want 3"; }
  grep -q "short.yaml:[0-9]*:[0-9]*: profiler.control_token: 1 byte; .*at least 16" short.log || \
    { cat short.log; fail "no file:line message for the short token"; }
  STEPS=0 TOKENS=64 small_model > env.yaml
  printf '  listen: "127.0.0.1:0"\n' >> env.yaml
  rc=0; MOED_CONTROL_TOKEN=abc run_moed --config env.yaml > env.log 2>&1 || rc=$?
  (( rc == 3 )) || { cat env.log; fail "a 3-byte MOED_CONTROL_TOKEN: exit $rc, want 3"; }
  grep -q "MOED_CONTROL_TOKEN: 3 bytes; .*at least 16" env.log || \
    { cat env.log; fail "env message"; }
  # bound to every interface for a few steps; nothing connects to it
  STEPS=20 TOKENS=64 small_model > open.yaml
  printf '  listen: "0.0.0.0:0"\n' >> open.yaml
  rc=0; run_moed --config open.yaml > open.log 2>&1 || rc=$?
  (( rc == 0 )) || { cat open.log; fail "listen 0.0.0.0: exit $rc"; }
  grep -q "reachable from the network.*127.0.0.1.*SSH tunnel" open.log || \
    { cat open.log; fail "no warning for listen 0.0.0.0"; }
  STEPS=20 TOKENS=64 small_model > lo.yaml
  printf '  listen: "127.0.0.1:0"\n' >> lo.yaml
  run_moed --config lo.yaml > lo.log 2>&1 || { cat lo.log; fail "listen 127.0.0.1"; }
  ! grep -q "reachable from the network" lo.log || fail "a warning for 127.0.0.1"
  echo "start checks ok"
  exit 0
fi
# the stopped window's folder and the end report are written before Open MPI's SIGKILL
# (2 x odls_base_sigkill_timeout after the stop): room for both on a busy machine
[[ "$case_name" == window_stop || "$case_name" == window_kill ]] && \
  MPIRUN_FLAGS+=" --mca odls_base_sigkill_timeout 5"
if [[ "$case_name" == window_peak ]]; then
  # without a writable clear_refs (some sandboxes) a window's peak is its largest sample
  "$PYTHON" -c 'open("/proc/self/clear_refs", "w").write("5")' 2> /dev/null || \
    { echo "SKIP: /proc/self/clear_refs cannot be written: no high-water mark per window"; exit 77; }
  export MOED_TEST_TOUCH_MIB=1:128
fi
if [[ "$case_name" == window_long_dir ]]; then
  LONG_DIR=$WORK/$(for _ in 1 2 3 4 5 6; do printf 'd%.0s' $(seq 1 100); printf '/'; done)out
  sed -i "s|^  output_dir: .*|  output_dir: $LONG_DIR|" c.yaml
  export LONG_DIR
fi
live_start 150
export URL TOKEN CASE=$case_name
sleep 1

py() { timeout "${PY_BOUND:-60}" "$PYTHON" - "$@"; }
CHECK=$(dirname "$0")/page_check.py
# window_open STEPS: POST /profile?steps=STEPS, wait until /status lists its folder (or says
# an error), /status then in window_status.json; prints the folder's name
window_open() {
  py "$1" <<'PY'
import json, os, sys, time, urllib.request
url, token = os.environ["URL"], os.environ["TOKEN"]
req = urllib.request.Request(url + "profile?steps=" + sys.argv[1], data=b"", method="POST",
                             headers={"Authorization": "Bearer " + token})
with urllib.request.urlopen(req, timeout=5) as r:
    folder = json.load(r)["folder"]
for _ in range(300):
    with urllib.request.urlopen(url + "status", timeout=5) as r:
        st = json.load(r)
    if folder in st["reports"] or st.get("last_error"):
        break
    time.sleep(0.1)
json.dump(st, open("window_status.json", "w"))
print(folder)
PY
}

case "$case_name" in
metrics)
  py <<'PY' || fail "metrics check"
import json, os, time, urllib.request
from prometheus_client.parser import text_string_to_metric_families
url = os.environ["URL"]
def scrape():
    with urllib.request.urlopen(url + "metrics", timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers
        fams = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
    return fams
def total(f, name):
    return sum(s.value for s in f.samples if s.name == name)
a = scrape(); time.sleep(1.5); b = scrape()
for name, typ in [("moed_steps", "counter"), ("moed_step_seconds", "histogram"),
                  ("moed_expert_tokens", "counter"), ("moed_expert_seconds", "histogram"),
                  ("moed_exchange_bytes", "counter"), ("moed_rank_resident_bytes", "gauge"),
                  ("moed_tokens_dropped", "counter"), ("moed_layer_imbalance", "gauge"),
                  ("moed_step_latency_seconds", "summary"),
                  ("moed_layer_latency_seconds", "summary")]:
    assert name in b, name + " missing"
    assert b[name].type == typ, (name, b[name].type)
tok = [s for s in b["moed_expert_tokens"].samples if s.name == "moed_expert_tokens_total"]
assert len(tok) == 2 * 8, len(tok)           # every expert of every layer
assert {s.labels["rank"] for s in tok} == {"1", "2"}, "owner ranks"
for n, s in [("moed_steps", "moed_steps_total"), ("moed_expert_tokens", "moed_expert_tokens_total"),
             ("moed_exchange_bytes", "moed_exchange_bytes_total"),
             ("moed_step_seconds", "moed_step_seconds_count"),
             ("moed_step_latency_seconds", "moed_step_latency_seconds_count"),
             ("moed_layer_latency_seconds", "moed_layer_latency_seconds_count")]:
    assert total(b[n], s) > total(a[n], s) > 0, (s, total(a[n], s), total(b[n], s))
assert total(b["moed_expert_tokens"], "moed_expert_tokens_total") > 0
ranks = {s.labels["rank"] for s in b["moed_rank_resident_bytes"].samples}
assert ranks == {"0", "1", "2"}, ranks
with urllib.request.urlopen(url + "status", timeout=5) as r:
    st = json.load(r)
assert st["world"] == 3 and len(st["ranks"]) == 3 and st["tokens_per_s"] > 0, st
assert all(r["alive"] for r in st["ranks"]), st["ranks"]
print("metrics ok: %d families, steps %d -> %d" % (len(b), total(a["moed_steps"], "moed_steps_total"),
      total(b["moed_steps"], "moed_steps_total")))
PY
  ;;
window|window_noprof)
  [[ "$case_name" == window ]] && export WINDOWS="3: 2:&ranks=0,2" || export WINDOWS="4:&ranks=1,2"
  py <<'PY' || fail "window check"
import json, os, time, urllib.request, urllib.error
url, token = os.environ["URL"], os.environ["TOKEN"]
file_token = os.environ["FILE_TOKEN"]
# the run's config text, the file's token value replaced (the line is control_token: "...")
want_cfg = open("c.yaml").read()
assert want_cfg.count('"%s"' % file_token) == 1
want_cfg = want_cfg.replace('"%s"' % file_token, '"<redacted>"')
def check_config(d):
    got = open(os.path.join(d, "config.yaml")).read()
    assert file_token not in got and token not in got, "a token in " + d
    assert got == want_cfg, "config.yaml of %s is not the run's config:\n%s" % (d, got)
    import yaml  # python3-yaml: deploy/install-deps.sh --test installs it
    y = yaml.safe_load(got)
    assert y["profiler"]["control_token"] == "<redacted>" and y["workload"]["steps"] == 0, y
def check_memory(d, j, want):
    run_ms = j["run"]["run_s"] * 1e3
    for m in j["memory"]:
        if m["rank"] not in want:
            assert m["samples"] == 0, m
            continue
        s = m["series"]
        # the window's first and last step at least, more only past memory_sample_ms
        assert m["samples"] == len(s) >= 2, (d, m)
        assert all(v > 1.0 for _, v in s), (d, m["rank"], s)    # MiB resident
        # the kernel's high-water mark since the window's start: at least every sample
        assert m["rss_peak_mib"] >= max(v for _, v in s) - 1e-6, (d, m)
        # ms since rank 0's first step began: inside the window (other ranks' clocks and
        # step ends are within milliseconds of rank 0's)
        assert all(-50.0 <= t <= run_ms + 250.0 for t, _ in s), (d, m["rank"], run_ms, s)
        assert [t for t, _ in s] == sorted(t for t, _ in s), s
def post(path, headers):
    req = urllib.request.Request(url + path, data=b"", method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")
def status():
    with urllib.request.urlopen(url + "status", timeout=5) as r:
        return json.load(r)
assert post("profile?steps=5", {})[0] == 401
assert post("profile?steps=5", {"Authorization": "Bearer wrong"})[0] == 403
assert post("profile?steps=5", {"Authorization": "Bearer " + token + "x"})[0] == 403
assert post("profile?steps=5", {"Authorization": "Basic " + token})[0] == 403
assert status()["window"]["state"] == "idle", "a refused request changed the window"
assert post("profile?steps=0", {"Authorization": "Bearer " + token})[0] == 400
# the scheme's name in any case, more than one space (RFC 7235): past the token, so 400
assert post("profile?steps=0", {"Authorization": "bearer  " + token})[0] == 400
assert post("profile?steps=0", {"Authorization": "BEARER " + token})[0] == 400
assert post("profile?steps=0", {"Authorization": "Bearer" + token})[0] == 403
assert post("profile?steps=5&ranks=7", {"Authorization": "Bearer " + token})[0] == 400
# an empty list or an empty element: no window with no rank (both were once 202)
for bad in ("", "1,", ",1", "0,,2", "+1", "%201", "1,-0"):
    assert post("profile?steps=5&ranks=" + bad, {"Authorization": "Bearer " + token})[0] == 400, bad
# only decimal digits for steps, and no argument it does not read (rank=1 would have
# recorded every rank)
for bad in ("+5", "%205", "5%20", "0x5", "5e0"):
    assert post("profile?steps=" + bad, {"Authorization": "Bearer " + token})[0] == 400, bad
code, ans = post("profile?steps=5&rank=1", {"Authorization": "Bearer " + token})
assert code == 400 and "unknown argument 'rank'" in ans.get("error", ""), (code, ans)
# the name comes back inside the JSON answer: a quote in it stays out of the JSON
code, ans = post('profile?steps=5&a%22%2C%22x%5C=1', {"Authorization": "Bearer " + token})
assert code == 400 and "unknown argument 'a???x?'" in ans.get("error", ""), (code, ans)
assert status()["window"]["state"] == "idle", "a refused ranks= changed the window"
folders = []
for w in os.environ["WINDOWS"].split():
    steps, ranks = int(w.split(":")[0]), w.split(":", 1)[1]
    code, ans = post("profile?steps=%d%s" % (steps, ranks), {"Authorization": "Bearer " + token})
    assert code == 202, (code, ans)
    folders.append(ans["folder"])
    for _ in range(300):
        st = status()
        if ans["folder"] in st["reports"]:
            break
        time.sleep(0.1)
    else:
        raise SystemExit("window never written: %s" % st)
    d = os.path.join(st["output_dir"], ans["folder"])
    have = set(os.listdir(d))
    for f in ["summary.txt", "summary.json", "report.html", "metrics.csv"]:
        assert f in have, (f, sorted(have))
    assert "INCOMPLETE" not in have, sorted(have)
    j = json.load(open(os.path.join(d, "summary.json")))
    assert j["run"]["steps_run"] == steps and j["run"]["recorded_steps"] == steps, j["run"]
    want = [0, 1, 2] if ranks == "" else [int(x) for x in ranks.split("=")[1].split(",")]
    got = [r["rank"] for r in j["ranks"] if r["profiled"]]
    assert got == want, (got, want)
    assert all(r["steps"] == steps for r in j["ranks"] if r["profiled"]), j["ranks"]
    assert not j.get("partial", False), j.get("missing")
    check_config(d)
    check_memory(d, j, want)
s1 = status()["step"]; time.sleep(0.5)
assert status()["step"] > s1, "the run did not go on"
open("windows.txt", "w").write("\n".join(folders))
print("windows ok:", folders)
PY
  kill -TERM "$RUN"; rc=0; wait "$RUN" || rc=$?
  n=0
  for f in experiments/*/summary.json; do
    grep -qF "$(dirname "$f" | xargs basename)" windows.txt && continue
    n=$((n + 1))
    grep -qF "$FILE_TOKEN" "$(dirname "$f")/config.yaml" && fail "the end report's config.yaml holds the token"
    sed "s/\"$FILE_TOKEN\"/\"<redacted>\"/" c.yaml | cmp -s - "$(dirname "$f")/config.yaml" || \
      fail "the end report's config.yaml is not the run's config, token redacted"
  done
  if [[ "$case_name" == window_noprof ]]; then
    (( n == 0 )) || { ls experiments; fail "an end report with profiler.enabled false"; }
    echo "no end report (profiler.enabled false)"
  else
    (( n == 1 )) || { ls experiments; fail "no end-of-run report besides the windows ($n)"; }
    grep -l '"interrupted": *true' experiments/*/summary.json >/dev/null || fail "end report not interrupted"
    echo "end report written after the windows, its config.yaml redacted"
  fi
  ;;
window_peak)
  folder=$(window_open 4) || fail "window request"
  FOLDER=$folder py <<'PY' || fail "window peak check"
import json, os
folder, st = os.environ["FOLDER"], json.load(open("window_status.json"))
assert folder in st["reports"], ("window never written", st)
j = json.load(open(os.path.join(st["output_dir"], folder, "summary.json")))
m = {x["rank"]: x for x in j["memory"]}[1]
top = max(v for _, v in m["series"])
# 128 MiB touched and let go inside each step: between two samples, never in one
assert m["rss_peak_mib"] >= 128 and m["rss_peak_mib"] >= top + 100, (m["rss_peak_mib"], top, m)
print("window peak ok: rank 1 %.1f MiB, its samples at most %.1f" % (m["rss_peak_mib"], top))
PY
  kill -TERM "$RUN"; wait "$RUN" || true
  FOLDER=$folder py <<'PY' || fail "end report peak check"
import glob, json, os
ends = [f for f in glob.glob("experiments/*/summary.json")
        if os.path.basename(os.path.dirname(f)) != os.environ["FOLDER"]]
assert len(ends) == 1, ends
m = {x["rank"]: x for x in json.load(open(ends[0]))["memory"]}[1]
assert m["rss_peak_mib"] >= 128, m["rss_peak_mib"]
print("end report peak ok: rank 1 %.1f MiB" % m["rss_peak_mib"])
PY
  ;;
window_long_dir)
  folder=$(window_open 2) || fail "window request"
  FOLDER=$folder py <<'PY' || fail "window with a long output_dir"
import json, os, re
folder, long_dir = os.environ["FOLDER"], os.environ["LONG_DIR"]
st = json.load(open("window_status.json"))
assert len(long_dir) > 600, len(long_dir)
assert folder in st["reports"], st
path = os.path.join(long_dir, folder)
assert json.load(open(os.path.join(path, "summary.json")))["run"]["recorded_steps"] == 2, path
# nothing written beside it under a cut name: the windows and the run's own folder only
extra = [e for e in os.listdir(long_dir)
         if e not in st["reports"] and not re.match(r"\d{4}-\d\d-\d\d__", e)]
assert not extra, (extra, st["reports"])
print("window folder whole at %d bytes: %s" % (len(path), folder))
PY
  ;;
abuse)
  py <<'PY' || fail "abuse check"
import os, socket, time, urllib.request
url = os.environ["URL"]
host, port = url[len("http://"):].rstrip("/").split(":")
port = int(port)
def step():
    import json
    with urllib.request.urlopen(url + "status", timeout=5) as r:
        return json.load(r)["step"]
idle = [socket.create_connection((host, port), timeout=5) for _ in range(16)]
for s in idle[:8]:
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")        # never finished
for _ in range(5):
    g = socket.create_connection((host, port), timeout=5)
    g.sendall(os.urandom(4096)); g.close()
big = socket.create_connection((host, port), timeout=5)
try:
    big.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n")
except OSError:
    pass                                                      # closed on us: fine
try:
    ans = big.recv(200)
    assert ans == b"" or b" 200 " not in ans.split(b"\r\n")[0], ans[:60]
except OSError:
    pass
s0 = step(); time.sleep(1.0)
worst = 0.0
for _ in range(10):
    t = time.monotonic()
    with urllib.request.urlopen(url + "metrics", timeout=5) as r:
        assert r.status == 200 and len(r.read()) > 0
    worst = max(worst, time.monotonic() - t)
s1 = step()
assert s1 > s0 + 5, ("steps stalled", s0, s1)
# answered while the idle and trickling clients hold their sockets (each GET is bounded by
# its 5 s timeout above); how fast is the benchmark's business (docs/performance.md)
for s in idle:
    s.close()
print("abuse ok: steps %d -> %d, slowest /metrics %.3f s" % (s0, s1, worst))
PY
  ;;
page)
  # the page live: every chart drawn with data, every label, unit and colour scale there.
  # First every rank's counters must have reached rank 0 (the 4 byte cells of the routing
  # rank with both expert ranks, both ways): on a loaded machine the page was once loaded
  # while only rank 0's own row was in (2 cells), which says nothing about the page.
  timeout 90 "$PYTHON" - "${URL}live.json" <<'PY' || fail "rank 0 never had every rank's bytes"
import json, sys, time, urllib.request
while True:
    with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
        b = json.load(r)["bytes"]
    if sum(1 for s, row in enumerate(b) for k, v in enumerate(row) if s != k and v > 0) >= 4:
        break
    time.sleep(0.2)
PY
  page_dom "$URL" dom.html
  "$PYTHON" "$CHECK" marks dom.html || { head -c 2000 dom.html; fail "page charts"; }
  # the page fed the /status and /live.json taken now, replayed unchanged: every figure it
  # shows (hover titles, labels, scales, table, header) must equal those files
  curl -sf -m 5 "$URL" > page.html && curl -sf -m 5 "${URL}status" > st.json && \
    curl -sf -m 5 "${URL}live.json" > lj.json || fail "GET /, /status, /live.json"
  page_replay st.json lj.json replay.html
  "$PYTHON" "$CHECK" values replay.html st.json lj.json || fail "page values"
  "$PYTHON" "$CHECK" window replay.html st.json || fail "window state in words"
  # the same with layer 1 given no token: its cells have no layer mean to compare with
  "$PYTHON" -c 'import json, sys; d = json.load(open("lj.json"))
d["tokens"][1] = [0] * d["experts"]; json.dump(d, open("lj0.json", "w"))' || fail "lj0.json"
  page_replay st.json lj0.json replay0.html
  "$PYTHON" "$CHECK" values replay0.html st.json lj0.json || fail "page values, a layer at 0"
  echo "page ok"
  ;;
page_window)
  # the window's state in words, from what /status says: a window written (idle, its
  # folder named), one recording (step k of N), and the states between (requested, then
  # writing), each replayed to the page unchanged
  curl -sf -m 5 "$URL" > page.html || fail "GET /"
  timeout 120 "$PYTHON" - <<'PY' || fail "windows"
import json, os, time, urllib.request
url, token = os.environ["URL"], os.environ["TOKEN"]
def post(q):
    req = urllib.request.Request(url + "profile?" + q, data=b"", method="POST",
                                 headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r)
def status():
    with urllib.request.urlopen(url + "status", timeout=5) as r:
        return r.read()
def until(pred, what):                  # bounded by time, not by luck: 90 s at most
    end = time.monotonic() + 90
    while True:
        raw = status()
        if pred(json.loads(raw)):
            return raw
        if time.monotonic() > end:
            raise SystemExit("no " + what + ": " + raw.decode())
        time.sleep(0.1)
w1 = post("steps=2")["folder"]
open("st_written.json", "wb").write(until(lambda s: w1 in s["reports"] and
                                          s["window"]["state"] == "idle", "window written"))
post("steps=100000")                    # the most a window may ask: it stays open
raw = until(lambda s: s["window"]["state"] == "open" and s["step"] >= s["window"]["first_step"],
            "window recording")
open("st_open.json", "wb").write(raw)
# the same window as /status shows it in the other states: agreed (open, its first step
# not reached yet), requested, writing
for state in ("agreed", "requested", "writing"):
    s = json.loads(raw)
    s["window"]["state"] = "open" if state == "agreed" else state
    if state == "agreed":
        s["step"] = s["window"]["first_step"] - 3
    if state == "requested":
        del s["window"]["first_step"], s["window"]["last_step"]
    open("st_%s.json" % state, "w").write(json.dumps(s))
PY
  curl -sf -m 5 "${URL}live.json" > lj.json || fail "GET /live.json"
  for st in written open agreed requested writing; do
    page_replay "st_$st.json" lj.json "win_$st.html"
    "$PYTHON" "$CHECK" window "win_$st.html" "st_$st.json" || fail "window $st in words"
  done
  ;;
page_js)
  curl -s -m 5 "$URL" > page.html || fail "GET /"
  grep -q '<div id="heat"' page.html || fail "no heat map chart"
  ! grep -qE '(src|href)="(https?:)?//' page.html || fail "the page loads something from a network"
  sed -n '/<script>/,/<\/script>/p' page.html | sed '1s/.*<script>//; $s/<\/script>.*//' > page.js
  cat > run_page.js <<'JS'
const fs = require("fs");
const base = process.env.URL.replace(/\/$/, "");
const els = {};
global.document = {getElementById(id) {
  if (!els[id]) els[id] = {id, attrs: {}, textContent: "", innerHTML: "",
    setAttribute(k, v) { this.attrs[k] = v; }};
  return els[id];
}};
const realFetch = fetch;
global.fetch = (p) => realFetch(base + p);
let ticks = 0;
const realSetInterval = setInterval;
global.setInterval = (f) => { const h = realSetInterval(() => { ticks++; f(); }, 300); h.unref(); };
eval(fs.readFileSync("page.js", "utf8"));
setTimeout(() => {
  for (const id of ["heat", "steps", "bytes", "mem"]) {
    const e = els[id];
    if (!e || e.attrs["data-drawn"] !== "1" || !/^<svg[^>]*>.*<title>.*<\/svg>$/s.test(e.innerHTML)) {
      console.log("chart not drawn:", id, e && e.innerHTML.slice(0, 200)); process.exit(1);
    }
  }
  if (!/Idle: no profiling window is recording/.test(els["win"].innerHTML) ||
      !/<td/.test(els["ranks"].innerHTML)) { console.log("no window or ranks"); process.exit(1); }
  const h = els["hdr"].innerHTML;
  if (!/tokens\/s/.test(h)) { console.log("header:", h); process.exit(1); }
  console.log("page ok after", ticks, "refreshes:", h);
  process.exit(0);
}, 2500);
JS
  URL=$URL timeout 30 node run_page.js || fail "the page's script"
  ;;
harden)
  py <<'PY' || fail "hardening check"
import json, os, socket, time, urllib.request, urllib.error
url, token = os.environ["URL"], os.environ["TOKEN"]
host, port = url[len("http://"):].rstrip("/").split(":")
port = int(port)
bad = []
def check(ok, what):
    if not ok:
        bad.append(what)
        print("NOT OK:", what)
def get(path, src="127.0.0.1"):
    s = socket.create_connection((host, port), timeout=5, source_address=(src, 0))
    s.sendall(b"GET /" + path.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return head.decode(), body
# /status: folder names, never a path (output_dir is absolute in c.yaml)
head, body = get("status")
st = json.loads(body)
check(st["output_dir"] == "experiments", "/status output_dir %s" % st["output_dir"])
check(os.getcwd() not in body.decode() and '"/' not in body.decode(), "a path in /status")
# GET /profile: 405, Allow says what is
head, _ = get("profile")
check(head.startswith("HTTP/1.1 405"), "GET /profile: " + head.split("\r\n")[0])
allow = [l for l in head.split("\r\n") if l.lower().startswith("allow:")]
check(allow and "POST" in allow[0] and "DELETE" in allow[0], "Allow: %s" % allow)
# steps over the maximum
req = urllib.request.Request(url + "profile?steps=100001", data=b"", method="POST",
                             headers={"Authorization": "Bearer " + token})
try:
    urllib.request.urlopen(req, timeout=5); check(False, "steps=100001 accepted")
except urllib.error.HTTPError as e:
    check(e.code == 400 and b"100000" in e.read(), "steps=100001: %d" % e.code)
# a 1 MB body in 4 kB chunks: the total counts, 413
s = socket.create_connection((host, port), timeout=10)
s.sendall(("POST /profile?steps=3 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
           "Transfer-Encoding: chunked\r\n\r\n" % token).encode())
try:
    for _ in range(256):
        s.sendall(b"1000\r\n" + b"a" * 4096 + b"\r\n")
    s.sendall(b"0\r\n\r\n")
except OSError:
    pass
try:
    ans = s.recv(200)
except OSError as e:
    ans = str(e).encode()
s.close()
check(ans.startswith(b"HTTP/1.1 413"), "1 MB chunked body: %r" % ans[:40])
st = json.loads(get("status")[1])
check(st["window"]["state"] == "idle", "a refused body opened a window")
# 32 clients of 127.0.0.3 (its whole per-address limit) send a byte a second: an address of
# their own, as a connection 127.0.0.1 closed just before may still count for it a moment
# (under ASan the 32nd was once refused so)
req_bytes = b"GET /status HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 100 + b"\r\n\r\n"
slow = [socket.create_connection((host, port), timeout=5, source_address=("127.0.0.3", 0))
        for _ in range(32)]
for s in slow:
    s.setblocking(False)
t0 = time.monotonic(); cut = {}; other = 0
while len(cut) < 32 and time.monotonic() - t0 < 30:     # deadline 10 s; bounded at 30
    i = int(time.monotonic() - t0)
    for k, s in enumerate(slow):
        if k in cut:
            continue
        try:
            if s.recv(100) == b"":
                cut[k] = time.monotonic() - t0
                continue
        except BlockingIOError:
            pass
        except OSError:
            cut[k] = time.monotonic() - t0
            continue
        try:
            s.send(req_bytes[i:i + 1])
        except BlockingIOError:
            pass
        except OSError:
            cut[k] = time.monotonic() - t0
    if len(cut) == 0 and time.monotonic() - t0 > 2 and other < 3:
        assert json.loads(get("status", "127.0.0.2")[1])["world"] == 3  # another address
        other += 1
    time.sleep(1.0)
for s in slow:
    s.close()
check(len(cut) == 32, "%d of 32 trickling clients cut within 30 s" % len(cut))
check(other >= 1, "no answer to another address while they trickled")
check(not cut or min(cut.values()) >= 5, "cut before the deadline: %s" % cut)
check(json.loads(get("status", "127.0.0.3")[1])["world"] == 3, "127.0.0.3 not served again")
# a window whose output folder cannot be made (a file where it was, made after the start):
# last_error names it by its last component, never a path (the absolute one was once there)
out = os.path.join(os.getcwd(), "experiments")
os.rename(out, out + ".moved")
open(out, "w").close()
req = urllib.request.Request(url + "profile?steps=2", data=b"", method="POST",
                             headers={"Authorization": "Bearer " + token})
check(urllib.request.urlopen(req, timeout=5).status == 202, "POST steps=2")
t_end = time.time() + 60
while time.time() < t_end:
    st = json.loads(get("status")[1])
    if st.get("last_error") and st["window"]["state"] == "idle":
        break
    time.sleep(0.5)
os.remove(out)
os.rename(out + ".moved", out)
err = st.get("last_error", "")
print("last_error:", err)
check("cannot create the output folder" in err, "no output-folder error: %r" % err)
check("/" not in err and err.startswith("window "), "a path in last_error: %r" % err)
assert not bad, bad
print("harden ok: tricklers cut after %.1f-%.1f s, %d answers meanwhile" %
      (min(cut.values()), max(cut.values()), other))
PY
  ;;
close|window_stop|window_kill|window_watchdog)
  py <<'PY' || fail "$case_name check"
import json, os, time, urllib.request, urllib.error
url, token = os.environ["URL"], os.environ["TOKEN"]
def call(method, path):
    req = urllib.request.Request(url + path, data=b"" if method == "POST" else None,
                                 method=method, headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")
def status():
    with urllib.request.urlopen(url + "status", timeout=5) as r:
        return json.load(r)
if os.environ["CASE"] == "close":
    assert call("DELETE", "profile")[0] == 409, "DELETE with no window"
    req = urllib.request.Request(url + "profile", method="DELETE")
    try:
        urllib.request.urlopen(req, timeout=5); raise SystemExit("DELETE without a token")
    except urllib.error.HTTPError as e:
        assert e.code == 401, e.code
code, ans = call("POST", "profile?steps=100000")
assert code == 202, (code, ans)
for _ in range(300):
    st = status()
    if st["window"]["state"] == "open" and st["step"] > st["window"]["first_step"] + 5:
        break
    time.sleep(0.1)
else:
    raise SystemExit("window never open: %s" % st)
open("window.txt", "w").write(ans["folder"])
if os.environ["CASE"] in ("window_stop", "window_kill", "window_watchdog"):
    print("window open at step", st["step"]); raise SystemExit(0)
code, c = call("DELETE", "profile")
assert code == 202 and c["state"] == "closing", (code, c)
for _ in range(300):
    st = status()
    if ans["folder"] in st["reports"]:
        break
    time.sleep(0.1)
else:
    raise SystemExit("closed window never written: %s" % st)
j = json.load(open(os.path.join("experiments", ans["folder"], "summary.json")))
r = j["run"]
assert 5 < r["steps_run"] < 100000 and r["steps_planned"] == 100000, r
assert j["partial"] and "DELETE /profile" in j["missing"], (j.get("partial"), j.get("missing"))
assert not r["interrupted"], r
txt = open(os.path.join("experiments", ans["folder"], "summary.txt")).read()
assert "Figures below cover only the ranks" not in txt, "every rank is there: no such banner"
s1 = status()["step"]; time.sleep(0.5)
assert status()["step"] > s1, "the run did not go on"
assert call("POST", "profile?steps=2")[0] == 202, "no new window after a closed one"
print("close ok: %d of 100000 steps; %s" % (r["steps_run"], j["missing"]))
PY
  if [[ "$case_name" == window_stop ]]; then
    kill -TERM "$RUN"; rc=0; wait "$RUN" || rc=$?
    d=experiments/$(cat window.txt)
    [[ -f $d/summary.json ]] || \
      { tail -5 run.log; ls experiments; fail "no folder for the window open at the stop"; }
    [[ ! -e $d/INCOMPLETE ]] || fail "the window's folder is incomplete: $(cat "$d/INCOMPLETE")"
    "$PYTHON" - "$d/summary.json" <<'PY' || fail "the stopped window's summary"
import json, sys
j = json.load(open(sys.argv[1])); r = j["run"]
assert j["partial"] and "stopped" in j["missing"] and r["interrupted"], (j.get("missing"), r)
assert 5 < r["steps_run"] < 100000 and r["steps_planned"] == 100000, r
assert all(x["steps"] > 0 for x in j["ranks"] if x["profiled"]), j["ranks"]
print("window_stop ok: %d of 100000 steps; %s" % (r["steps_run"], j["missing"]))
PY
  fi
  if [[ "$case_name" == window_kill ]]; then  # rank 1 killed: its earlier parts came, its
    # last one never does; mpirun stops the other ranks, and rank 0 writes the window
    r1=$(rank_pid 1)
    [[ -n $r1 ]] || fail "no rank 1"
    sleep 0.6  # past a part (every 250 ms): rank 1 has sent some of the window
    kill -KILL "$r1"; rc=0; wait "$RUN" || rc=$?
    tail -4 run.log
    d=experiments/$(cat window.txt)
    [[ -f $d/summary.json ]] || \
      { tail -5 run.log; ls experiments; fail "no folder for the window open when rank 1 died"; }
    "$PYTHON" - "$d/summary.json" <<'PY' || fail "the window does not name the killed rank"
import json, sys
j = json.load(open(sys.argv[1])); r = j["run"]
assert j["partial"], j.get("missing")
one = [x for x in j["ranks"] if x["rank"] == 1][0]
# its parts that came are kept and it is named for the one that did not (were none in yet,
# it is named as a rank without records, as before)
if one["steps"] > 0:
    assert "rank 1 (" in j["missing"] and "its last part not in" in j["missing"], j["missing"]
else:
    assert "rank 1 (" in j["missing"] and "no record within" in j["missing"], j["missing"]
print("window_kill ok: %d of 100000 steps; rank 1: %d steps; %s"
      % (r["steps_run"], one["steps"], j["missing"]))
PY
  fi
  if [[ "$case_name" == window_watchdog ]]; then  # a rank stopped with a window open: the
    # watchdog ends the job (exit 7); the window cannot be gathered, and rank 0 says so
    r1=$(rank_pid 1)
    [[ -n $r1 ]] || fail "no rank 1"
    kill -STOP "$r1"; rc=0; wait "$RUN" || rc=$?; kill -CONT "$r1" 2> /dev/null || true
    tail -4 run.log
    [[ $rc -eq 7 ]] || fail "a stopped rank with a window open: exit $rc, want 7"
    grep -q "moed: warning.*live: window [0-9]*: $(cat window.txt) not written: the watchdog ended the run" run.log \
      || fail "rank 0 did not say the open window is not written"
    ! grep -qP "warning: .*[\x00-\x08\x0e-\x1f]" run.log || fail "a warning with control bytes"
  fi
  ;;
sched|sched_repeat)
  # sched_repeat's 13 windows are ~1400 steps: 5-10 s on an idle 2-core machine, 35-42 s
  # under ctest -j3 with two busy loops; the wait is bounded at 120 s (the run at 150)
  PY_BOUND=130 py <<'PY' || fail "$case_name check"
import glob, json, os, re, time, urllib.request
url, case = os.environ["URL"], os.environ["CASE"]
def step():
    with urllib.request.urlopen(url + "status", timeout=5) as r:
        return json.load(r)["step"]
def windows():
    got = {}
    for d in glob.glob("experiments/*/window-*"):
        got[int(re.search(r"window-(\d+)$", d).group(1))] = d
    return got
want = 1 if case == "sched" else 13
t0 = time.monotonic(); most = 0; done = None
while time.monotonic() - t0 < 120:             # py itself is bounded at 130 s
    w = windows(); most = max(most, len(w))
    whole = [n for n, d in w.items() if os.path.exists(d + "/summary.json")
             and not os.path.exists(d + "/INCOMPLETE")]
    if whole and max(whole) >= want:
        # read it now: 10 windows later it is removed (a fast machine runs 1000 steps a second)
        d = w[max(whole)]
        try:
            j = json.load(open(d + "/summary.json"))
            have = {f: os.path.exists(os.path.join(d, f))
                    for f in ["summary.txt", "report.html", "metrics.csv", "config.yaml"]}
        except FileNotFoundError:  # rotated away meanwhile: a newer one comes
            time.sleep(0.2)
            continue
        if os.path.isdir(d):
            done = max(whole); break
    time.sleep(0.2)
assert done is not None, "no window folder %d while the run goes on: %s" % (want, windows())
s0 = step(); time.sleep(1.0); s1 = step()
assert s1 > s0, "the run did not go on"
# /status lists the schedule's folders too, as RUN/window-N under output_dir, and counts
# every one written (it listed only POST /profile's: "reports: 0" after window 1)
run = os.path.basename(os.path.dirname(w[done]))
with urllib.request.urlopen(url + "status", timeout=5) as r:
    st = json.load(r)
assert "%s/window-%d" % (run, done) in st["reports"], st["reports"]
assert all(re.fullmatch(re.escape(run) + r"/window-\d+", n) for n in st["reports"]), st
assert st["reports_written"] >= done and len(st["reports"]) <= st["reports_written"], st
assert j["run"]["steps_run"] == 5 and j["run"]["recorded_steps"] == 5, j["run"]
assert [r["rank"] for r in j["ranks"] if r["profiled"]] == [0, 1, 2], j["ranks"]
assert all(r["steps"] == 5 for r in j["ranks"]), j["ranks"]
assert all(have.values()), have
w = windows()
if case == "sched":
    assert sorted(w) == [1], w                     # repeat 1: one window, one folder
else:
    assert most <= 10 and len(w) <= 10, (most, w)   # the newest 10 are kept
    assert sorted(w) == list(range(max(w) - len(w) + 1, max(w) + 1)) and max(w) >= 13, w
    assert len(w) >= 9, w                           # the oldest go only past 10
print("%s ok: window-%d written at step ~%d, folders %s" % (case, done, s0, sorted(w)))
PY
  timeout 20 "$MOED" top "$URL" --once > top.txt || { cat top.txt; fail "moed top --once"; }
  grep -qE "^window: .*   reports: [1-9][0-9]* written, newest [^/]+/window-[0-9]+$" top.txt \
    || { cat top.txt; fail "moed top does not count the schedule's window folders"; }
  kill -TERM "$RUN"; rc=0; wait "$RUN" || rc=$?
  compgen -G "experiments/*/summary.json" >/dev/null || fail "no end report after the windows"
  ;;
sched_fail)
  py <<'PY' || fail "sched_fail check"
import glob, json, os, re, time, urllib.request
url = os.environ["URL"]
def status():
    with urllib.request.urlopen(url + "status", timeout=5) as r:
        return json.load(r)
t_end = time.monotonic() + 50
while not glob.glob("experiments/*/window-*") and time.monotonic() < t_end:
    time.sleep(0.1)
runs = glob.glob("experiments/*/window-*")
assert runs, "no window folder: %s" % glob.glob("experiments/*")
run_dir = os.path.dirname(runs[0])
run = os.path.basename(run_dir)
# the next windows' folders cannot be made: a file where the run folder was
os.rename(run_dir, run_dir + ".moved")
open(run_dir, "w").close()
while not status().get("last_error") and time.monotonic() < t_end:
    time.sleep(0.2)
st = status()
os.remove(run_dir)
os.rename(run_dir + ".moved", run_dir)
err = st.get("last_error", "")
print("last_error:", err)
m = re.match(r"window (\d+): " + re.escape(run) + r"/window-(\d+)\b.*: (.*)$", err)
assert m and m.group(1) == m.group(2), "no window error in /status: %r" % err
assert os.getcwd() not in err and "experiments" not in err, "a path in last_error: %r" % err
assert run + "/window-" + m.group(1) not in st["reports"], st["reports"]
open("sched_fail.err", "w").write("window %s: .*: %s\n" % (m.group(1), m.group(3)))
PY
  # the same error once on stderr, with its path there
  grep -c "moed: warning: profile: $(cat sched_fail.err)" run.log | grep -qx 1 || \
    { cat run.log; fail "the window's error not on stderr once"; }
  echo "sched_fail ok"
  ;;
top)
  timeout 20 "$MOED" top "$URL" --once > top.txt || { cat top.txt; fail "moed top --once"; }
  cat top.txt
  grep -q "tokens/s" top.txt && grep -qE "^ +2 +yes" top.txt || fail "top frame incomplete"
  rc=0; "$MOED" top "$URL" --once --once > top2.txt 2>&1 || rc=$?  # as moed's own options
  [[ $rc -eq 2 ]] && grep -q "^moed top: error: --once given twice" top2.txt \
    || { cat top2.txt; fail "--once given twice: exit $rc"; }
  # a port past 65535 is refused (the resolver would wrap it); a server that is not moed's
  # gets one line on stderr, its bytes filtered; one that trickles is cut at the 5 s bound
  rc=0; "$MOED" top http://127.0.0.1:70000/ --once > t3.txt 2>&1 || rc=$?
  [[ $rc -eq 2 ]] && grep -q "^moed top: error: port '70000' is not a number in 1..65535" t3.txt \
    || { cat t3.txt; fail "port 70000: exit $rc"; }
  for noport in 127.0.0.1 http://127.0.0.1/ http://[::1]/; do  # no usual port to assume
    rc=0; "$MOED" top "$noport" --once > t5.txt 2>&1 || rc=$?
    [[ $rc -eq 2 ]] && grep -qF "moed top: error: '$noport' has no port: give HOST:PORT" t5.txt \
      || { cat t5.txt; fail "$noport: exit $rc"; }
  done
  rc=0; "$MOED" top https://127.0.0.1:1/ --once > t4.txt 2>&1 || rc=$?  # the scheme, not the port
  [[ $rc -eq 2 ]] && grep -q "^moed top: error: 'https://': moed's endpoint speaks plain HTTP" t4.txt \
    || { cat t4.txt; fail "https://: exit $rc"; }
  "$PYTHON" - > other.port 2> /dev/null <<'PY' &
import socket, sys, time, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
def serve(c, n):
    c.recv(4096)  # the request first: a close with it unread would reset the answer
    if n == 0:  # not moed: a status line with a terminal control code, then more lines
        c.sendall(b"HTTP/1.0 404 \x1b[2JNope\r\nServer: x\r\n\r\n"); c.close()
    else:       # a byte a second, for ever
        for _ in range(20):
            c.sendall(b"H"); time.sleep(1)
for n in range(2):
    c, _ = s.accept(); threading.Thread(target=serve, args=(c, n), daemon=True).start()
time.sleep(20)
PY
  other=$!
  # (|| true: the server may be gone and reaped by then, and a failing command in an EXIT
  # trap under set -e would end the test as failed, with no word)
  trap 'kill $other 2> /dev/null || true; stop_run; [[ -n "${KEEP_WORK:-}" ]] || rm -rf "$WORK"' EXIT
  for _ in $(seq 50); do [[ -s other.port ]] && break; sleep 0.1; done
  port=$(cat other.port)
  rc=0; timeout 20 "$MOED" top "http://127.0.0.1:$port/" --once > t4.out 2> t4.err || rc=$?
  [[ $rc -eq 1 && ! -s t4.out && $(wc -l < t4.err) -eq 1 ]] \
    && grep -q "^moed top: error: not a moed endpoint: /status answered 'HTTP/1.0 404 ?\[2JNope'$" t4.err \
    || { cat t4.out t4.err; fail "a server not moed's: exit $rc"; }
  t0=$SECONDS; rc=0; timeout 20 "$MOED" top "http://127.0.0.1:$port/" --once > t5.txt 2>&1 || rc=$?
  [[ $rc -eq 1 ]] && (( SECONDS - t0 <= 8 )) && grep -q "no whole answer within 5000 ms" t5.txt \
    || { cat t5.txt; fail "a trickling server: exit $rc after $((SECONDS - t0)) s"; }
  kill "$other" 2> /dev/null || true
  ;;
stop)
  sleep 1
  [[ $(test_pids | wc -l) -eq 3 ]] || fail "this test's 3 ranks not found: $(test_pids | paste -sd ' ' -)"
  t0=$(date +%s)
  kill -TERM "$RUN"
  rc=0; wait "$RUN" || rc=$?
  t1=$(date +%s)
  cat run.log | tail -5
  (( t1 - t0 <= 10 )) || fail "stopping took $((t1 - t0)) s"
  [[ $rc -ne 0 ]] || fail "a stopped run must not exit 0"
  compgen -G "experiments/*/summary.json" >/dev/null || { ls -R experiments | head; \
    fail "no report written after SIGTERM"; }
  grep -q '"interrupted": *true' experiments/*/summary.json || fail "report not marked interrupted"
  # this test's ranks by their working directory (they run `--config c.yaml`, a relative
  # path: a pgrep for "$WORK/c.yaml" matched nothing, ever)
  left=$(test_pids | paste -sd ' ' -)
  [[ -z $left ]] || { ps -o pid,stat,args -p "${left// /,}" || true; fail "a rank is still running: $left"; }
  echo "stop ok in $((t1 - t0)) s"
  ;;
*) fail "unknown case $case_name" ;;
esac
