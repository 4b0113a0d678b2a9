#!/usr/bin/env bash
# Makes the virtual environment with PyPI's current PyTorch that the speed comparisons measure kiln
# against (README "Measured", docs/precision.md), beside Debian's python3-torch 1.13:
#
#   tools/bench/make_torch_venv.sh [DIR]     default DIR: $KILN_TORCH_VENV, else build-torch-venv/
#   DIR/bin/python tools/bench/bench_train.py build/tools/kiln ...     the same script, the new torch
#
# Pinned (KILN_TORCH_VERSION, default below) so that a figure names the release it was measured
# against. PyPI's Linux wheel brings NVIDIA's CUDA libraries too (a few GB): only the CPU is used.
# Safe to run again. Needs python3's venv module (Debian: python3-venv) and PyPI.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
venv=${1:-${KILN_TORCH_VENV:-$src/build-torch-venv}}
version=${KILN_TORCH_VERSION:-2.15.0}
python=${PYTHON:-python3}
if ! "$python" -c "import venv, ensurepip" 2>/dev/null; then
  echo "make_torch_venv: $python has no venv/ensurepip module; on Debian: apt-get install python3-venv" >&2
  exit 1
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "torch==$version" torchvision numpy  # torchvision: ResNet-18
"$venv/bin/python" -c "import torch; print('make_torch_venv: torch', torch.__version__, 'threads', torch.get_num_threads())"
echo "make_torch_venv: ready: $venv/bin/python tools/bench/bench_train.py build/tools/kiln"
