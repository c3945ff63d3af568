#!/usr/bin/env bash
# container.sh REPO: deploy/container/Dockerfile (docker cannot run here) copies only files
# that exist, and sets what Open MPI needs inside a container: no CMA single copy between
# ranks of one container (it needs ptrace rights containers lack), in the image and on the
# MPI Operator's mpirun line.
set -euo pipefail
REPO=${1:?usage: container.sh REPO}
df=$REPO/deploy/container/Dockerfile
fail() { echo "FAIL: $*" >&2; exit 1; }
grep -qx 'ENV OMPI_MCA_btl_vader_single_copy_mechanism=none' "$df" \
  || fail "the Dockerfile does not set ENV OMPI_MCA_btl_vader_single_copy_mechanism=none"
grep -q -- '--cap-add=SYS_PTRACE' "$df" || fail "the Dockerfile does not document --cap-add=SYS_PTRACE"
n=0
while read -r src; do
  [[ -e $REPO/$src ]] || fail "COPY $src: no such file in the repository"
  n=$((n + 1))
done < <(sed -n 's/^COPY \(--[^ ]* \)*\([^ ]*\) .*/\2/p' "$df")
[[ $n -ge 5 ]] || fail "found only $n COPY lines: the pattern no longer matches the Dockerfile"
job=$REPO/deploy/k8s/base/mpijob.yaml
grep -q -- '- none' <<< "$(grep -A1 -- '- btl_vader_single_copy_mechanism' "$job")" \
  || fail "$job: mpirun does not pass --mca btl_vader_single_copy_mechanism none"
echo "PASS: $n COPY sources exist; the image and the MPIJob turn off CMA"
