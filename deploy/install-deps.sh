#!/usr/bin/env bash
# Installs every build and test dependency of moed from Debian packages.
# Idempotent: packages already present are left alone. Run as root.
#   deploy/install-deps.sh            build + run dependencies
#   deploy/install-deps.sh --test     also what the test suite uses (clang for fuzzing,
#                                     iproute2 for the multi-host test, procps (pgrep) and
#                                     python3 (+ yaml, numpy: the independent references)
#                                     for the multi-rank and deploy checks,
#                                     python3-prometheus-client for tests/live, chromium
#                                     for live.page: headless, as root it needs
#                                     --no-sandbox --headless --disable-gpu), curl for
#                                     tests/live, qemu-user for unit.isa_* (the kernels on
#                                     an emulated AVX2-only and SSE-only CPU)
#   deploy/install-deps.sh --help     this text
# Exit status: 0 done (or nothing missing), 2 a wrong argument or not root where something
# is missing, else apt-get's.
set -euo pipefail

prog=deploy/install-deps.sh
test_deps=0
case "${1:-}" in
  "") ;;
  --test) test_deps=1 ;;
  -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
  *) echo "$prog: error: unknown argument '$1' (usage: $prog [--test | --help])" >&2; exit 2 ;;
esac
(($# <= 1)) || { echo "$prog: error: one argument at most (usage: $prog [--test | --help])" >&2; exit 2; }

want=(build-essential cmake pkg-config
      openmpi-bin libopenmpi-dev libyaml-dev libjansson-dev libmicrohttpd-dev
      libopenblas-dev libblis-dev libdnnl-dev
      libucx-dev ucx-utils)
if ((test_deps)); then
  want+=(clang libclang-rt-dev iproute2 procps python3 python3-yaml python3-numpy
        python3-prometheus-client chromium curl qemu-user)
fi

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "deploy/install-deps.sh: all ${#want[@]} packages present"
  exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
  echo "$prog: error: ${missing[*]} missing; installing them needs root (run it as root or" \
       "with sudo)" >&2
  exit 2
fi
echo "deploy/install-deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deploy/install-deps.sh: done"
