#!/usr/bin/env bash
# Makes the Python virtual environment that kiln's optional Python tools run in (docs/export.md):
# onnxruntime and numpy from PyPI, for tools/bench/onnx_compare.py (kiln's ONNX export against
# onnxruntime). kiln itself and its test suite never need Python.
#
#   tools/make_venv.sh [DIR]      default DIR: $KILN_VENV, else build-venv/ in the source tree
#                                 (ignored by git, as build/ is)
#
# Needs python3 with its venv module (Debian: python3-venv, which tools/install_deps.sh does not
# install: it is only for these tools) and PyPI. Safe to run again: an existing venv is kept and
# its packages brought up to the pins below. Prints the venv's python at the end.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-${KILN_VENV:-$src/build-venv}}
python=${PYTHON:-python3}

if ! "$python" -c "import venv, ensurepip" 2>/dev/null; then
  echo "make_venv: $python has no venv/ensurepip module; on Debian: apt-get install python3-venv" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "make_venv: creating $venv"
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
# The packages onnx_compare.py imports (kiln exports ONNX opset 13, IR 7: any recent onnxruntime runs it).
"$venv/bin/python" -m pip install --quiet "onnxruntime>=1.17" "numpy>=1.24"
"$venv/bin/python" - <<'PY'
import numpy, onnxruntime
print(f"make_venv: onnxruntime {onnxruntime.__version__}, numpy {numpy.__version__}")
PY
echo "make_venv: ready; run the tools with $venv/bin/python (e.g. $venv/bin/python tools/bench/onnx_compare.py)"
