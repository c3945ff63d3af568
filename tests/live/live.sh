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
#   abuse    garbage, a 200 kB header and idle connections: steps keep going and /metrics
#            still answers fast
#   page     the page in headless Chromium draws its charts with data: heat map cells,
#            step-time points, byte cells and memory bars counted; axis labels with units,
#            colour scales with numbers, rank, layer and expert labels, hover titles, the
#            window in words; then the page replayed with the /status and /live.json taken
#            at one moment (tests/live/replay.py): every figure it shows equals theirs
#            (page_check.py; 77 without Chromium)
#   page_window  the window's state in words in Chromium, from /status replayed: a window
#            written (its folder), one recording (step k of N), agreed, requested, writing
#   page_js  the page's script run by node against the live endpoint with a stub DOM: all
#            four charts draw their SVG with hover titles, no exception (77 without node 18+)
#   top      `moed top URL --once` prints a frame
#   stop     SIGTERM: every rank stops within seconds and rank 0 writes the report
set -euo pipefail
source "$(dirname "$0")/../mpi/common.sh"
source "$(dirname "$0")/common.sh"
case_name=${1:?case}
TOKEN=t0ken-$$-live

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
FILE_TOKEN=f1le-t0ken-$$
STEPS=0 PROF=$PROF TOKENS=64 LAYERS=2 E=8 small_model > c.yaml
cat >> c.yaml <<EOC
  warmup_steps: 2
  measurement_steps: 5
  listen: "127.0.0.1:0"
  control_token: "$FILE_TOKEN"
EOC
export MOED_CONTROL_TOKEN=$TOKEN FILE_TOKEN
live_start 150
export URL TOKEN
sleep 1

py() { timeout 60 "$PYTHON" - "$@"; }
CHECK=$(dirname "$0")/page_check.py

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
                  ("moed_tokens_dropped", "counter"), ("moed_layer_imbalance", "gauge")]:
    assert name in b, name + " missing"
    assert b[name].type == typ, (name, b[name].type)
tok = [s for s in b["moed_expert_tokens"].samples if s.name == "moed_expert_tokens_total"]
assert len(tok) == 2 * 8, len(tok)           # every expert of every layer
assert {s.labels["rank"] for s in tok} == {"1", "2"}, "owner ranks"
for n, s in [("moed_steps", "moed_steps_total"), ("moed_expert_tokens", "moed_expert_tokens_total"),
             ("moed_exchange_bytes", "moed_exchange_bytes_total"),
             ("moed_step_seconds", "moed_step_seconds_count")]:
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
    try:
        import yaml
    except ImportError:
        return
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
        assert abs(m["rss_peak_mib"] - max(v for _, v in s)) < 1e-6, (d, m)
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
assert post("profile?steps=5&ranks=7", {"Authorization": "Bearer " + token})[0] == 400
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
assert worst < 1.0, "metrics took %.3f s" % worst
for s in idle:
    s.close()
print("abuse ok: steps %d -> %d, slowest /metrics %.3f s" % (s0, s1, worst))
PY
  ;;
page)
  # the page live: every chart drawn with data, every label, unit and colour scale there
  page_dom "$URL" dom.html
  "$PYTHON" "$CHECK" marks dom.html || { head -c 2000 dom.html; fail "page charts"; }
  # the page fed the /status and /live.json taken now, replayed unchanged: every figure it
  # shows (hover titles, labels, scales, table, header) must equal those files
  curl -sf -m 5 "$URL" > page.html && curl -sf -m 5 "${URL}status" > st.json && \
    curl -sf -m 5 "${URL}live.json" > lj.json || fail "GET /, /status, /live.json"
  page_replay st.json lj.json replay.html
  "$PYTHON" "$CHECK" values replay.html st.json lj.json || fail "page values"
  "$PYTHON" "$CHECK" window replay.html st.json || fail "window state in words"
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
post("steps=1000000")                   # longer than the test: it stays open
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
top)
  timeout 20 "$MOED" top "$URL" --once > top.txt || { cat top.txt; fail "moed top --once"; }
  cat top.txt
  grep -q "tokens/s" top.txt && grep -qE "^ +2 +yes" top.txt || fail "top frame incomplete"
  ;;
stop)
  sleep 1
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
  pgrep -f "$WORK/c.yaml" >/dev/null && fail "a rank is still running"
  echo "stop ok in $((t1 - t0)) s"
  ;;
*) fail "unknown case $case_name" ;;
esac
