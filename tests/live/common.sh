# Shared by the live tests: a run without end on 3 ranks and its endpoint. Sourced after
# ../mpi/common.sh.

# live_start SECONDS: moed on 3 ranks with c.yaml in the background (output in run.log),
# bounded by SECONDS; sets RUN (its pid) and exports URL once rank 0 printed it; the run
# is stopped (SIGTERM) and the work folder removed on exit.
live_start() {
  # --foreground: timeout passes SIGTERM on to mpirun only (see mpi/failures.sh).
  # run.log is made here, before the job: the background job's own "> run.log" may come
  # after the first read below (live.stop once failed in 0.1 s, sed finding no run.log)
  : > run.log
  # shellcheck disable=SC2086
  timeout --foreground -k 5 "$1" mpirun $MPIRUN_FLAGS -np 3 "$MOED" --config c.yaml \
    --no-progress > run.log 2>&1 &
  RUN=$!
  trap 'stop_run; [[ -n "${KEEP_WORK:-}" ]] || rm -rf "$WORK"' EXIT
  URL=""
  for _ in $(seq 1 300); do
    URL=$(sed -nE 's/.*live: (http:[^ ]+).*/\1/p' run.log | head -1)
    [[ -n "$URL" ]] && break
    kill -0 "$RUN" 2>/dev/null || { cat run.log; fail "the run ended before its endpoint"; }
    sleep 0.1
  done
  [[ -n "$URL" ]] || { cat run.log; fail "no endpoint URL printed by rank 0"; }
  [[ "$URL" == http://127.0.0.1:* ]] || fail "unexpected URL $URL"
  echo "endpoint $URL"
  export URL
}

stop_run() { kill -TERM "$RUN" 2>/dev/null || true; wait "$RUN" 2>/dev/null || true; }

# page_dom URL OUT: the DOM of the page at URL once headless Chromium has let it refresh a
# few times (--virtual-time-budget runs its 1.5 s timers without waiting for them); as root
# in a container Chromium needs --no-sandbox; its profile in the test's folder (without
# --user-data-dir every run left a folder in ~/.cache/chromium-headless).
page_dom() {
  local chrome
  chrome=$(command -v chromium || command -v chromium-browser)
  timeout 90 "$chrome" --headless --no-sandbox --disable-gpu --virtual-time-budget=5000 \
    --user-data-dir="$WORK/chromium-profile" --dump-dom "$1" > "$2" 2>chrome.err || { tail -5 chrome.err; fail "chromium failed"; }
}

# page_replay STATUS LIVE OUT: the DOM of the page (page.html, as the endpoint served it)
# loaded from tests/live/replay.py serving those very /status and /live.json files: every
# figure it shows is then known, however busy the machine or fast the run.
page_replay() {
  rm -f replay.port
  "$PYTHON" "$(dirname "${BASH_SOURCE[0]}")/replay.py" page.html "$1" "$2" > replay.port &
  local pid=$! port=""
  for _ in $(seq 1 300); do
    port=$(head -1 replay.port 2>/dev/null || true)
    [[ -n "$port" ]] && break
    sleep 0.1
  done
  [[ -n "$port" ]] || { kill "$pid"; fail "the replay server did not start"; }
  page_dom "http://127.0.0.1:$port/" "$3"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
