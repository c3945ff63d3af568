#!/usr/bin/env bash
# run.sh CASE: test_import.py CASE (ctest tools.*) with a python3 that has NumPy, and for the
# hf cases torch (and transformers): $MOED_PYTHON, the python3 on PATH (a venv with
# transformers), or Debian's /usr/bin/python3 (python3-numpy). Exit 77 (skip) when the case
# needs torch or transformers and no candidate has them.
set -euo pipefail
case_=${1:?usage: run.sh CASE}
here=$(cd "$(dirname "$0")" && pwd)
need="import numpy"
case "$case_" in
  hf) need="import numpy, torch, transformers" ;;
  hf_hooks|sglang_torch) need="import numpy, torch" ;;
esac
py=
for p in ${MOED_PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c "$need" 2>/dev/null; then py=$p; break; fi
done
if [[ -z "$py" ]]; then
  if [[ "$need" == "import numpy" ]]; then
    echo "FAIL: no python3 with numpy (apt-get install -y python3-numpy, or deploy/install-deps.sh --test)" >&2
    exit 1
  fi
  echo "SKIP: no python3 can '$need' (tried ${MOED_PYTHON:-} python3 /usr/bin/python3)"
  exit 77
fi
exec "$py" "$here/test_import.py" "$case_"
