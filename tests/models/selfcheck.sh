#!/usr/bin/env bash
# selfcheck.sh: the NumPy reference's own tests (test_reference.py) with a python3 that has numpy.
set -euo pipefail
source "$(cd "$(dirname "$0")" && pwd)/common.sh"
exec "$PY" "$MODELS_DIR/test_reference.py"
