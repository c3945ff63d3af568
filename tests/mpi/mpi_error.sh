#!/usr/bin/env bash
# mpi_error.sh CASE: a failing MPI call stops the job with one message that names the MPI
# function, where it was called and MPI's error text, and a non-zero exit, on 3 ranks.
# MOED_TEST_MPI_FAIL=agree:N makes the Nth agreement (moe_agree, engine.c) of every rank
# hand MPI_Iallreduce an invalid count, so MPI itself fails the call (MPI_ERR_COUNT).
# Agreements in order, profiler off: 1 the config text, 2-3 the handshake, 4 the config's
# parse (each rank reads a checkpoint's config.json), 5 the resolved config compared, 6-7
# creating the engine, 8-9 gathering the output (--dump-output), 10 writing it.
source "$(dirname "$0")/common.sh"

# expect_mpi_error N [ARGS...]: run with the Nth agreement failing; checks the exit code
# and that exactly one error line names MPI_Iallreduce in engine.c with MPI's text.
expect_mpi_error() {
  local nth=$1; shift
  small_model > c.yaml
  set +e
  # shellcheck disable=SC2086
  timeout -k 5 60 mpirun $MPIRUN_FLAGS -np 3 -x MOED_TEST_MPI_FAIL="agree:$nth" "$MOED" \
    --config c.yaml --no-progress "$@" > run.log 2> err.log
  code=$?
  set -e
  cat err.log
  [[ $code -ne 0 && $code -ne 124 && $code -ne 137 ]] || fail "exit $code: the failed MPI call must fail the job"
  [[ $(grep -c 'moed: error' err.log) -eq 1 ]] || fail "want exactly one error line"
  grep -Eq 'moed: error: .*MPI_Iallreduce failed \(engine\.c:[0-9]+\): MPI_ERR_COUNT' err.log \
    || fail "the message must name MPI_Iallreduce, engine.c:line and MPI's error"
}

case "$1" in
  agree_parse)  # the parse's verdict, every rank's: no step may run
    expect_mpi_error 4
    ! grep -q "tokens/s" run.log || fail "work started after the failed agreement"
    ;;
  agree_startup)  # the first agreement, on the config text
    expect_mpi_error 1
    ! grep -q "tokens/s" run.log || fail "work started after the failed agreement"
    ;;
  agree_engine)  # the engine's agreement step (moe_engine_create): no step may run
    expect_mpi_error 6
    ! grep -q "tokens/s" run.log || fail "work started after the failed agreement"
    ;;
  agree_output)  # after the run, gathering the output: the file must not be written
    expect_mpi_error 8 --dump-output out.safetensors
    [[ ! -e out.safetensors ]] || fail "output written after the failed gather"
    ;;
  *) fail "unknown case $1" ;;
esac
echo "PASS: $1"
