# Shared by the tests/models scripts. Sourced; picks a python3 that has numpy (Debian's
# python3-numpy lives in /usr/bin/python3, which a pyenv or venv python3 earlier in PATH
# does not see).
MODELS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=
for p in ${MOED_PYTHON:-} /usr/bin/python3 python3; do
  if "$p" -c 'import numpy' 2>/dev/null; then PY=$p; break; fi
done
if [[ -z "$PY" ]]; then
  echo "FAIL: no python3 with numpy (apt-get install -y python3-numpy, or deploy/install-deps.sh --test)" >&2
  exit 1
fi

# make_ref DIR FAMILY DTYPE [args]: the checkpoint, input and expected output, or fail.
make_ref() {
  "$PY" "$MODELS_DIR/make_reference.py" "$@" > make_reference.log 2>&1 \
    || { cat make_reference.log >&2; echo "FAIL: make_reference.py $*" >&2; exit 1; }
}

# ref_info DIR KEY: one value of DIR/reference.json.
ref_info() {
  "$PY" -c 'import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print(v if not isinstance(v, list) else ", ".join(map(str, v)))' \
    "$1/reference.json" "$2"
}
