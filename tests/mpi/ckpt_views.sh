#!/usr/bin/env bash
# ckpt_views.sh CASE: the ranks see different checkpoints at one model.checkpoint path (a
# relative path, ranks 1-2 started in another folder, as on nodes that do not hold the same
# files). Every rank reads config.json itself; the job must end at start-up with exit 4 and
# one line naming the cause, on every rank (it once hung in the agreement until the 60 s
# watchdog, exit 7, or ran and failed mid-step with an MPI error).
#   missing   ranks 1-2 have no checkpoint there: the failing rank's reason, named as its
#   differs   ranks 1-2 hold a model with 8 experts where rank 0's has 4: the key named
# and the same from --check-config under mpirun.
source "$(dirname "$0")/common.sh"
case_name=$1
mkdir -p a/ck b
"$MAKE_CKPT" --dir a/ck mixtral f32 64 48 4 2 3 1 16 > ckpt.log 2>&1 || { cat ckpt.log; fail "make_checkpoint"; }
case $case_name in
  missing) want="rank 1 ($(hostname)): model.checkpoint: 'ck' (tried $(cd b && pwd -P)/ck): No such file or directory" ;;
  differs)
    mkdir -p b/ck; "$MAKE_CKPT" --dir b/ck mixtral f32 64 48 8 2 3 1 16 > ckpt_b.log 2>&1 || { cat ckpt_b.log; fail "make_checkpoint b"; }
    want="rank 1 resolved model.num_experts: 8, rank 0 another value: each rank reads model.checkpoint's config.json itself" ;;
  *) fail "unknown case $case_name" ;;
esac
printf 'model:\n  checkpoint: ck\nworkload:\n  tokens_per_step: 16\n  steps: 2\nprofiler:\n  enabled: false\n' > a/c.yaml
rc=0
# shellcheck disable=SC2086
timeout -k 5 120 mpirun $MPIRUN_FLAGS -np 1 -wdir "$WORK/a" "$MOED" --config c.yaml --no-progress \
  : -np 2 -wdir "$WORK/b" "$MOED" --config c.yaml --no-progress > run.log 2>&1 || rc=$?
cat run.log
((rc == 4)) || fail "exit $rc, want 4 (bad weights or input)"
n=$(grep -c "^moed: error: " run.log || true)
((n == 1)) || fail "$n error lines, want 1"
grep -q -- "$want" run.log || fail "no '$want'"
# --check-config under mpirun runs the same agreements: it must not pass what the run refuses
rc=0
# shellcheck disable=SC2086
timeout -k 5 120 mpirun $MPIRUN_FLAGS -np 1 -wdir "$WORK/a" "$MOED" --config c.yaml --check-config \
  : -np 2 -wdir "$WORK/b" "$MOED" --config c.yaml --check-config > check.log 2>&1 || rc=$?
cat check.log
((rc == 4)) || fail "--check-config: exit $rc, want 4"
grep -q -- "$want" check.log || fail "--check-config: no '$want'"
echo "PASS ckpt_views $case_name"
