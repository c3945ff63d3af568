# Shared by the live tests: a run without end on 3 ranks and its endpoint. Sourced after
# ../mpi/common.sh.

# live_start SECONDS: moed on 3 ranks with c.yaml in the background (output in run.log),
# bounded by SECONDS; sets RUN (its pid) and exports URL once rank 0 printed it; the run
# is stopped (SIGTERM) and the work folder removed on exit.
live_start() {
  # --foreground: timeout passes SIGTERM on to mpirun only (see mpi/failures.sh)
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
