#!/usr/bin/env bash
# Installs every build and test dependency of moed from Debian packages.
# Idempotent: packages already present are left alone. Run as root.
#   deploy/install-deps.sh            build + run dependencies
#   deploy/install-deps.sh --test     also what the test suite uses (clang for fuzzing,
#                                     iproute2 for the multi-host test, procps (pgrep) and
#                                     python3 (+ yaml) for the multi-rank and deploy checks,
#                                     python3-prometheus-client for tests/live, chromium
#                                     for live.page: headless, as root it needs
#                                     --no-sandbox --headless --disable-gpu)
set -euo pipefail

want=(build-essential cmake pkg-config
      openmpi-bin libopenmpi-dev libyaml-dev libjansson-dev libmicrohttpd-dev
      libopenblas-dev libblis-dev libdnnl-dev
      libucx-dev ucx-utils)
if [[ "${1:-}" == "--test" ]]; then
  want+=(clang libclang-rt-dev iproute2 procps python3 python3-yaml python3-numpy
        python3-prometheus-client chromium)
fi

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "deploy/install-deps.sh: all ${#want[@]} packages present"
  exit 0
fi
echo "deploy/install-deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deploy/install-deps.sh: done"
