#!/usr/bin/env bash
# scripts.sh SRC MOED: deploy/run-hostfile.sh and deploy/install-deps.sh's arguments (no apt:
# install-deps.sh is only asked for --help and wrong arguments, which end before it). The
# hostfile's slots as Open MPI reads them (slots = N, count=N), a folder or zero slots
# refused in one line, CDPATH exported, every MOED_* variable forwarded, ssh told not to
# wait (BatchMode, ConnectTimeout) unless mpirun's arguments set plm_rsh_*, and a real run
# on this node's slots.
set -euo pipefail
src=$1 moed=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/moed-deploy.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
if [[ $(id -u) == 0 ]]; then  # as the other multi-rank tests (tests/mpi/common.sh)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
rh=$src/deploy/run-hostfile.sh

printf 'localhost slots = 2\nlocalhost count=1   # two lines of one host\n' > hosts
line=$(CDPATH=.:/tmp MOED_CONTROL_TOKEN=abcdefghijklmnop "$rh" hosts "$src/configs/experts.yaml" \
         --moed "$moed" --dry-run 2>&1 | grep '^run-hostfile.sh: mpirun')
[[ $line == *" -np 3 "* ]] || fail "slots = 2 and count=1 are not 3 ranks: $line"
[[ $line == *" -x MOED_CONTROL_TOKEN "* ]] || fail "MOED_CONTROL_TOKEN not forwarded: $line"
[[ $line == *"plm_rsh_args -o\\ BatchMode=yes\\ -o\\ ConnectTimeout=10"* ]] || fail "no ssh timeout: $line"
line=$("$rh" hosts x.yaml --moed "$moed" --dry-run -- --mca plm_rsh_agent /bin/true 2>&1 | grep '^run-hostfile.sh: mpirun')
[[ $line != *"plm_rsh_args"* ]] || fail "plm_rsh_args added beside the caller's plm_rsh_*: $line"

refused() {  # refused WANT ARGS...: exit 2, one error line holding WANT
  local want=$1 rc=0; shift
  "$rh" "$@" > out.txt 2>&1 || rc=$?
  [[ $rc == 2 ]] || { cat out.txt; fail "$*: exit $rc, want 2"; }
  grep -q "^run-hostfile.sh: error: .*$want" out.txt || { cat out.txt; fail "$*: no '$want'"; }
}
mkdir folder
refused "hostfile 'folder' is not a readable file" folder x.yaml --moed "$moed"
printf 'localhost slots=0\n' > zero
refused "the sum of its slots is 0" zero x.yaml --moed "$moed"
printf '# nothing\n' > empty
refused "has no host lines" empty x.yaml --moed "$moed"

rc=0; "$src/deploy/install-deps.sh" --help > help.txt 2>&1 || rc=$?
[[ $rc == 0 ]] && grep -q "^  deploy/install-deps.sh --test" help.txt || { cat help.txt; fail "install-deps.sh --help: exit $rc"; }
rc=0; "$src/deploy/install-deps.sh" --tests > bad.txt 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q "unknown argument '--tests'" bad.txt || { cat bad.txt; fail "install-deps.sh --tests: exit $rc, want 2"; }

# a real run on this node's three slots
printf 'localhost slots=3\n' > h3
printf 'model: {hidden_dim: 64, ffn_dim: 128, num_experts: 4, top_k: 2, num_layers: 2}\nworkload: {tokens_per_step: 16, steps: 2}\nprofiler: {enabled: false}\n' > c.yaml
timeout -k 5 120 "$rh" h3 c.yaml --moed "$moed" -- --oversubscribe > run.txt 2>&1 || { cat run.txt; fail "a run on localhost's slots failed"; }
grep -q "^tokens/s: " run.txt || { cat run.txt; fail "no tokens/s from the run"; }
echo "PASS deploy scripts"
